//! Dashboard state and its event loop: keys in, actions to the labs, frames out when changed.

use super::keys::{self, Command};
use super::log::LogRing;
use super::theme::Theme;
use super::ui::{self, Screen};
use crate::lab::{Action, Lab, LabOptions, Outcome, Snapshot};
use forkscope_core::Policy;
use futures_util::StreamExt;
use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{Event, EventStream, KeyEventKind};
use std::time::{Duration, Instant};

/// The frame deadline: at most this often, and only when something changed.
const FRAME: Duration = Duration::from_millis(100);
const STATUS_SHOWN: Duration = Duration::from_secs(4);
const LOG_LINES: usize = 200;

#[derive(Debug)]
pub struct App {
    options: LabOptions,
    labs: Vec<Lab>,
    help: bool,
    status: Option<(String, Instant)>,
    log: LogRing,
    theme: Theme,
    quit: bool,
}

impl App {
    pub async fn run(
        options: LabOptions,
        log: LogRing,
        terminal: &mut DefaultTerminal,
    ) -> Result<(), String> {
        let lab = Lab::start(options.clone())
            .await
            .map_err(|e| e.to_string())?;
        let mut app = App {
            options,
            labs: vec![lab],
            help: false,
            status: None,
            log,
            theme: Theme::from_env(),
            quit: false,
        };
        if let Some(ms) = std::env::var("FORKSCOPE_TEST_PANIC_AFTER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            // For the terminal-restore test: a panic on a task thread, not the UI's.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                panic!("test panic requested by FORKSCOPE_TEST_PANIC_AFTER_MS");
            });
        }
        let result = app.event_loop(terminal).await;
        for lab in app.labs.drain(..) {
            lab.stop().await;
        }
        result
    }

    async fn event_loop(&mut self, terminal: &mut DefaultTerminal) -> Result<(), String> {
        let mut events = EventStream::new();
        let mut frame = tokio::time::interval(FRAME);
        frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut drawn: Option<u64> = None;
        let mut force = true;
        let mut terminate = sigterm();
        while !self.quit {
            let fingerprint = self.fingerprint();
            if force || drawn != Some(fingerprint) {
                self.draw(terminal)?;
                drawn = Some(fingerprint);
                force = false;
            }
            tokio::select! {
                _ = frame.tick() => {}
                event = events.next() => match event {
                    Some(Ok(Event::Key(key))) if key.kind == KeyEventKind::Press => {
                        if let Some(command) = keys::command_for(key) {
                            self.handle(command).await;
                        }
                        force = true;
                    }
                    Some(Ok(Event::Resize(_, _))) => force = true,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(format!("terminal input failed: {e}")),
                    None => self.quit = true,
                },
                () = terminate.as_mut() => self.quit = true,
            }
        }
        Ok(())
    }

    fn snapshots(&self) -> Vec<Snapshot> {
        self.labs.iter().map(Lab::snapshot).collect()
    }

    fn draw(&mut self, terminal: &mut DefaultTerminal) -> Result<(), String> {
        if self
            .status
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() > STATUS_SHOWN)
        {
            self.status = None;
        }
        let panels = self.snapshots();
        let log = self.log.tail(LOG_LINES);
        let screen = Screen {
            panels: &panels,
            log: &log,
            help: self.help,
            status: self.status.as_ref().map(|(s, _)| s.as_str()),
            theme: self.theme,
        };
        let _frame = super::TERMINAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        terminal
            .draw(|frame| ui::draw(frame, &screen))
            .map_err(|e| format!("drawing failed: {e}"))?;
        Ok(())
    }

    /// Changes whenever anything on screen would: history, exchanges, log, lab time (in the
    /// tenths the header shows), pause, speed, UI state.
    fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for lab in &self.labs {
            let core = lab.core();
            core.history.total().hash(&mut h);
            core.exchanges.len().hash(&mut h);
            core.exchanges.back().map(|e| e.at).hash(&mut h);
            drop(core);
            (lab.clock().now().as_millis() / 100).hash(&mut h);
            lab.clock().paused().hash(&mut h);
            lab.clock().speed().to_bits().hash(&mut h);
        }
        self.log.version().hash(&mut h);
        (self.help, self.status.is_some()).hash(&mut h);
        h.finish()
    }

    fn say(&mut self, status: impl Into<String>) {
        self.status = Some((status.into(), Instant::now()));
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Quit if self.help => self.help = false,
            Command::Quit => self.quit = true,
            Command::ToggleHelp => self.help = !self.help,
            Command::ToggleCompare => self.toggle_compare().await,
            Command::Lab(Action::ToggleNaive) if self.labs.len() > 1 => {
                self.say("compare mode runs naive (left) and fenced (right); m leaves it");
            }
            Command::Lab(action) => {
                let mut restart = false;
                for lab in &self.labs {
                    restart |= lab.apply(action) == Outcome::RestartRequested;
                }
                if restart {
                    let policies: Vec<Policy> =
                        self.labs.iter().map(|l| l.snapshot().view.policy).collect();
                    self.replace_labs(&policies).await;
                    self.say("lab restarted");
                } else {
                    self.say(action.describe());
                }
            }
        }
    }

    async fn toggle_compare(&mut self) {
        if self.labs.len() > 1 {
            self.replace_labs(&[self.options.policy]).await;
            self.say("compare mode off");
        } else {
            self.replace_labs(&[Policy::Naive, Policy::Fenced]).await;
            self.say("compare mode: every key goes to both labs");
        }
    }

    async fn replace_labs(&mut self, policies: &[Policy]) {
        for lab in self.labs.drain(..) {
            lab.stop().await;
        }
        for policy in policies {
            match Lab::start(LabOptions {
                policy: *policy,
                ..self.options.clone()
            })
            .await
            {
                Ok(lab) => self.labs.push(lab),
                Err(e) => tracing::error!(error = %e, "could not start a lab"),
            }
        }
        if self.labs.is_empty() {
            self.quit = true;
        }
    }
}

/// Resolves on SIGTERM (or never, where there is none): quit cleanly, restoring the terminal.
fn sigterm() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    #[cfg(unix)]
    {
        if let Ok(mut signal) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            return Box::pin(async move {
                signal.recv().await;
            });
        }
    }
    Box::pin(std::future::pending())
}
