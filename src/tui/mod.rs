//! The dashboard: a ratatui view of one live lab (or two, in compare mode), with fault keys.
//!
//! Data flows one way: key → [`keys::Command`] → [`crate::lab::Action`] → lab → snapshot →
//! [`ui::draw`]. Keys and the frame deadline's tick update the state and mark it dirty; the
//! loop redraws only then (or on resize), and a draw reads the state, never a lab.

pub mod app;
pub mod keys;
pub mod knobs;
pub mod log;
pub mod panes;
pub mod probe_watch;
pub mod theme;
pub mod timeline;
pub mod ui;
pub mod weight;

use crate::record::{Recorder, Tee};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use app::Start;

/// Runs the dashboard until the user quits; with `record`, also writes everything it draws to
/// an asciicast v2 file. Returns an error for the caller to print once the terminal is restored.
/// Whether stdin and stdout are a terminal the dashboard can own.
pub fn has_terminal() -> bool {
    std::io::stdout().is_terminal() && std::io::stdin().is_terminal()
}

/// Why the dashboard could not run (printed once the terminal is restored).
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error(
        "the dashboard needs a terminal; try `forkscope incident` or `forkscope demo` for headless runs"
    )]
    NoTerminal,
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the terminal failed: {0}")]
    Terminal(std::io::Error),
    #[error("{path}: {source}")]
    Recording {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not start a lab: {0}")]
    Lab(#[from] crate::lab::LabError),
    #[error("{scenario}: the lab refuses this configuration: {why}")]
    ConfigRefused { scenario: String, why: String },
}

pub fn run(start: Start, record: Option<PathBuf>) -> Result<(), DashboardError> {
    if !has_terminal() {
        return Err(DashboardError::NoTerminal);
    }
    let ring = log::LogRing::default();
    install_logging(ring.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(DashboardError::Runtime)?;
    let recorder = match &record {
        Some(path) => {
            let (width, height) =
                ratatui::crossterm::terminal::size().map_err(DashboardError::Terminal)?;
            let title = "forkscope dashboard";
            let recorder = Recorder::create(path, width, height, title).map_err(|source| {
                DashboardError::Recording {
                    path: path.clone(),
                    source,
                }
            })?;
            Some(Arc::new(Mutex::new(recorder)))
        }
        None => None,
    };
    let start = Start {
        recorder: recorder.clone(),
        ..start
    };
    let result = match recorder {
        None => {
            let mut terminal = ratatui::init();
            capture_mouse();
            install_panic_exit();
            runtime.block_on(app::App::run(start, ring, &mut terminal))
        }
        Some(recorder) => {
            // Same terminal set-up as `ratatui::init`, with a writer that also records.
            let _ = ratatui::init();
            capture_mouse();
            install_panic_exit();
            let tee = Tee {
                inner: Some(std::io::stdout()),
                recorder: recorder.clone(),
            };
            let mut terminal = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(tee))
                .map_err(DashboardError::Terminal)?;
            let _ = terminal.clear();
            let result = runtime.block_on(app::App::run(start, ring, &mut terminal));
            drop(terminal);
            if let Ok(recorder) = Arc::try_unwrap(recorder) {
                let _ = recorder.into_inner().map(Recorder::finish);
            }
            result
        }
    };
    restore();
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

/// Clicks select events in the lanes.
fn capture_mouse() {
    let _ = ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::event::EnableMouseCapture
    );
}

/// Gives the terminal back as it was: mouse reporting off, then ratatui's restore.
fn restore() {
    let _ = ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::event::DisableMouseCapture
    );
    ratatui::restore();
}

fn install_logging(ring: log::LogRing) {
    use tracing_subscriber::layer::SubscriberExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::registry().with(filter).with(ring);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Held while a frame is written, so a panic's restore and message never interleave with one.
pub(crate) static TERMINAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A panic on any thread — the UI's or a lab task's — must not leave a dead dashboard in a raw
/// terminal: wait for any frame in progress, restore the terminal, print the panic, exit.
/// Replaces the hook `ratatui::init` set, whose restore could race a frame being drawn.
pub(crate) fn install_panic_exit() {
    let _ratatuis = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // Wait briefly for a frame in progress on another thread; a panic inside a frame on this
        // thread already holds the lock, so never wait for long.
        for _ in 0..20 {
            match TERMINAL.try_lock() {
                Ok(guard) => {
                    std::mem::forget(guard);
                    break;
                }
                Err(std::sync::TryLockError::Poisoned(_)) => break,
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
        restore();
        eprintln!("forkscope panicked: {info}");
        std::process::exit(101);
    }));
}
