//! asciicast v2 recordings of the dashboard: the frames it drew, with their times, and a marker
//! at the first violation. Playable by asciinema; read back in tests through a virtual terminal.

use crate::lab::{Lab, Snapshot};
use crate::scenario::player::{self, new_run};
use crate::scenario::{Scenario, format::Step};
use crate::tui::panes::narration::Narration;
use crate::tui::theme::Theme;
use crate::tui::ui::{Screen, draw};
use forkscope_core::Policy;
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

/// Writes an asciicast v2 file: a header line, then one JSON array per event.
#[derive(Debug)]
pub struct Recorder {
    out: BufWriter<File>,
    /// Terminal output since the last frame.
    pending: Vec<u8>,
    marked: bool,
}

impl Recorder {
    pub fn create(path: &Path, width: u16, height: u16, title: &str) -> io::Result<Recorder> {
        let mut out = BufWriter::new(File::create(path)?);
        let header = serde_json::json!({
            "version": 2,
            "width": width,
            "height": height,
            "title": title,
            "env": { "TERM": "xterm-256color" },
        });
        writeln!(out, "{header}")?;
        Ok(Recorder {
            out,
            pending: Vec::new(),
            marked: false,
        })
    }

    fn event(&mut self, at: f64, kind: &str, data: &str) -> io::Result<()> {
        writeln!(
            self.out,
            "{}",
            serde_json::json!([(at * 1000.0).round() / 1000.0, kind, data])
        )
    }

    /// Emits what the terminal was sent since the last frame, stamped `at` seconds.
    pub fn frame(&mut self, at: f64) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
        self.event(at, "o", &data)
    }

    /// A marker at the first violation (asciinema's `m` event); later calls do nothing.
    pub fn mark_first_violation(&mut self, at: f64, label: &str) -> io::Result<()> {
        if std::mem::replace(&mut self.marked, true) {
            return Ok(());
        }
        self.event(at, "m", &format!("first violation: {label}"))
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The terminal's writer: collects every byte for the recorder, and passes them on to the real
/// terminal when there is one.
#[derive(Debug)]
pub struct Tee<W: Write> {
    pub inner: Option<W>,
    pub recorder: Arc<Mutex<Recorder>>,
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .extend_from_slice(buf);
        match &mut self.inner {
            Some(inner) => inner.write_all(buf).map(|()| buf.len()),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.as_mut().map_or(Ok(()), Write::flush)
    }
}

/// Plays `scenario` on one lab per policy (two: side by side) and records the dashboard, with
/// each step's narration in the status line. Returns the verdict summaries.
pub async fn record_scenario(
    scenario: &Scenario,
    policies: &[Policy],
    path: &Path,
    width: u16,
    height: u16,
) -> Result<Vec<String>, String> {
    let title = format!(
        "forkscope — {} ({})",
        scenario.name,
        policies
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(" vs ")
    );
    let recorder = Arc::new(Mutex::new(
        Recorder::create(path, width, height, &title)
            .map_err(|e| format!("{}: {e}", path.display()))?,
    ));
    let tee = Tee::<io::Sink> {
        inner: None,
        recorder: recorder.clone(),
    };
    let backend = CrosstermBackend::new(tee);
    let viewport = Viewport::Fixed(Rect::new(0, 0, width, height));
    let mut terminal =
        Terminal::with_options(backend, TerminalOptions { viewport }).map_err(|e| e.to_string())?;
    let mut labs = Vec::new();
    for policy in policies {
        let lab = Lab::start(player::lab_options(scenario, *policy))
            .await
            .map_err(|e| format!("{policy}: {e}"))?;
        labs.push(lab);
    }
    let lab_refs: Vec<&Lab> = labs.iter().collect();
    let mut runs: Vec<_> = policies.iter().map(|p| new_run(*p)).collect();
    let theme = Theme { color: true };
    let mut at = 0.0f64;
    let mut failure = None;
    let mut narration = Narration {
        name: scenario.name.clone(),
        teaches: scenario.teaches.replace('\n', " "),
        total: scenario.steps.len(),
        ..Narration::default()
    };
    let mut draw_frame =
        |labs: &[&Lab], narration: &Narration, status: Option<&str>, pause: f64| {
            let panels: Vec<Snapshot> = labs.iter().map(|l| l.snapshot()).collect();
            let screen = Screen {
                status,
                narration: Some(narration),
                ..Screen::of(&panels, theme)
            };
            if terminal
                .draw(|f| {
                    draw(f, &screen);
                })
                .is_err()
            {
                return;
            }
            let mut rec = recorder.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = rec.frame(at);
            if let Some(bad) = panels.iter().find(|p| !p.view.verdict.clean) {
                let _ = rec.mark_first_violation(at, &bad.view.verdict.headline);
            }
            at += pause;
        };
    {
        // Hide the cursor and clear, then the opening frame.
        let mut rec = recorder.lock().unwrap_or_else(PoisonError::into_inner);
        rec.pending.extend_from_slice(b"\x1b[?25l\x1b[2J");
    }
    draw_frame(&lab_refs, &narration, None, 2.5);
    let mut seen: Vec<u64> = lab_refs.iter().map(|l| l.core().history.total()).collect();
    let mut on_step = |index: usize, step: &Step| {
        narration.stepped(index, step);
        narration.decided_in(lab_refs.iter().copied(), &mut seen);
        let pause = if step.say.is_some() { 1.8 } else { 0.4 };
        draw_frame(&lab_refs, &narration, None, pause);
    };
    if let Err(e) = player::drive(&lab_refs, scenario, &mut runs, &mut on_step).await {
        failure = Some(e);
    }
    for lab in &lab_refs {
        player::settle(lab).await;
    }
    let verdicts: Vec<String> = labs
        .iter()
        .map(|l| {
            format!(
                "{}: {}",
                l.options().policy,
                l.snapshot().view.verdict.summary()
            )
        })
        .collect();
    let closing = verdicts.join("   ");
    narration.finished = true;
    draw_frame(&lab_refs, &narration, Some(&closing), 3.0);
    draw_frame(&lab_refs, &narration, Some(&closing), 0.0);
    drop(terminal);
    for lab in labs {
        lab.stop().await;
    }
    let recorder = Arc::try_unwrap(recorder).map_err(|_| "recorder still shared".to_owned())?;
    recorder
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .finish()
        .map_err(|e| e.to_string())?;
    match failure {
        Some(e) => Err(e),
        None => Ok(verdicts),
    }
}
