//! Recordings of the dashboard: a scenario played headless, every frame it drew kept with its
//! time (what the terminal was sent, and the whole screen), then written as asciicast v2 (a
//! marker at the first violation; playable by asciinema) or as an SVG picture ([`svg`]: animated
//! at the recording's pace, or its final frame alone). The live dashboard's `--record` uses the
//! asciicast [`Recorder`] directly, through [`Tee`].

pub mod svg;

use crate::lab::{Lab, LabError, Snapshot};
use crate::scenario::narration::Narration;
use crate::scenario::player::{self, new_run};
use crate::scenario::{Scenario, format::Step};
use forkscope_core::Policy;
use ratatui::backend::CrosstermBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// What one recorded frame shows: the labs, the scenario's narration, and a closing line.
#[derive(Clone, Copy, Debug)]
pub struct Still<'a> {
    pub panels: &'a [Snapshot],
    pub narration: &'a Narration,
    pub status: Option<&'a str>,
}

/// Draws a recorded frame. The recorder is handed the dashboard's drawing
/// (`tui::ui::draw_still`) rather than reaching for it, so recordings never depend on the
/// dashboard that depends on them.
pub type Painter = fn(&mut ratatui::Frame, &Still);

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

/// Where a [`Tee`] puts what the terminal was sent.
pub trait Capture {
    fn capture(&mut self, bytes: &[u8]);
}

impl Capture for Recorder {
    fn capture(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }
}

impl Capture for Vec<u8> {
    fn capture(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// The terminal's writer: collects every byte for the recorder, and passes them on to the real
/// terminal when there is one.
#[derive(Debug)]
pub struct Tee<W: Write, C: Capture = Recorder> {
    pub inner: Option<W>,
    pub recorder: Arc<Mutex<C>>,
}

impl<W: Write, C: Capture> Write for Tee<W, C> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .capture(buf);
        match &mut self.inner {
            Some(inner) => inner.write_all(buf).map(|()| buf.len()),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.as_mut().map_or(Ok(()), Write::flush)
    }
}

/// What a recording is written as, chosen by the output file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.cast`: asciicast v2.
    Cast,
    /// `.svg`: every frame, animated at the recording's pace, looping.
    Svg,
    /// `.svg` with `--still`: the final frame alone.
    SvgStill,
}

/// Why an output file names no format the recorder writes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("{}: unknown recording format; the output must end in .cast or .svg", .0.display())]
    UnknownExtension(PathBuf),
    #[error("{}: --still needs an .svg output (a .cast is always the whole run)", .0.display())]
    StillNeedsSvg(PathBuf),
}

impl Format {
    pub fn for_path(path: &Path, still: bool) -> Result<Format, FormatError> {
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match (extension.as_deref(), still) {
            (Some("cast"), false) => Ok(Format::Cast),
            (Some("cast"), true) => Err(FormatError::StillNeedsSvg(path.to_owned())),
            (Some("svg"), false) => Ok(Format::Svg),
            (Some("svg"), true) => Ok(Format::SvgStill),
            _ => Err(FormatError::UnknownExtension(path.to_owned())),
        }
    }
}

/// Why a recording could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("{policy}: {source}")]
    Lab { policy: Policy, source: LabError },
    #[error("the recording's terminal failed: {0}")]
    Terminal(io::Error),
    #[error("{}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    /// The player's own sentence (a wait that timed out, a probe that failed); the frames up to
    /// it were still written.
    #[error("the scenario stopped: {0}")]
    Scenario(String),
}

/// One frame the dashboard drew.
#[derive(Clone, Debug)]
pub struct Frame {
    /// When it appeared, in seconds from the start of the recording.
    pub at: f64,
    /// How long it stays up before the next one.
    pub hold: f64,
    /// What the terminal was sent for it (ratatui's diff against the frame before).
    pub ansi: Vec<u8>,
    /// The whole screen.
    pub screen: Buffer,
    /// The verdict's headline, on the first frame where some lab is no longer clean.
    pub first_violation: Option<String>,
}

/// A scenario's run as the dashboard drew it.
#[derive(Clone, Debug)]
pub struct Recording {
    pub title: String,
    pub width: u16,
    pub height: u16,
    pub frames: Vec<Frame>,
    /// `policy: summary` for each lab.
    pub verdicts: Vec<String>,
    /// Why the scenario stopped early, if it did.
    pub failure: Option<String>,
}

impl Recording {
    pub fn write(&self, path: &Path, format: Format) -> Result<(), RecordError> {
        let written = match format {
            Format::Cast => self.write_cast(path),
            Format::Svg => std::fs::write(path, svg::animated(self)),
            Format::SvgStill => std::fs::write(path, svg::still(self)),
        };
        written.map_err(|source| RecordError::Write {
            path: path.to_owned(),
            source,
        })
    }

    fn write_cast(&self, path: &Path) -> io::Result<()> {
        let mut recorder = Recorder::create(path, self.width, self.height, &self.title)?;
        for frame in &self.frames {
            recorder.pending.extend_from_slice(&frame.ansi);
            recorder.frame(frame.at)?;
            if let Some(headline) = &frame.first_violation {
                recorder.mark_first_violation(frame.at, headline)?;
            }
        }
        recorder.finish()
    }
}

/// Plays `scenario` on one lab per policy (two: side by side) and records what `paint` draws
/// into `path` as `format`, with each step's narration in the status line. Returns the verdict
/// summaries.
pub async fn record_scenario(
    scenario: &Scenario,
    policies: &[Policy],
    path: &Path,
    format: Format,
    width: u16,
    height: u16,
    paint: Painter,
) -> Result<Vec<String>, RecordError> {
    let recording = play(scenario, policies, width, height, paint).await?;
    recording.write(path, format)?;
    match recording.failure {
        Some(e) => Err(RecordError::Scenario(e)),
        None => Ok(recording.verdicts),
    }
}

/// Plays `scenario` on one lab per policy and keeps every frame `paint` drew, paced as a viewer
/// should see it: 2.5 s for the opening, 1.8 s for a narrated step, 0.4 s for the rest, 3 s for
/// the verdict.
pub async fn play(
    scenario: &Scenario,
    policies: &[Policy],
    width: u16,
    height: u16,
    paint: Painter,
) -> Result<Recording, RecordError> {
    let title = format!(
        "forkscope — {} ({})",
        scenario.name,
        policies
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(" vs ")
    );
    let sent = Arc::new(Mutex::new(Vec::<u8>::new()));
    let tee = Tee::<io::Sink, Vec<u8>> {
        inner: None,
        recorder: sent.clone(),
    };
    let backend = CrosstermBackend::new(tee);
    let viewport = Viewport::Fixed(Rect::new(0, 0, width, height));
    let mut terminal = Terminal::with_options(backend, TerminalOptions { viewport })
        .map_err(RecordError::Terminal)?;
    let mut labs = Vec::new();
    for policy in policies {
        let lab = Lab::start(player::lab_options(scenario, *policy))
            .await
            .map_err(|source| RecordError::Lab {
                policy: *policy,
                source,
            })?;
        labs.push(lab);
    }
    let lab_refs: Vec<&Lab> = labs.iter().collect();
    let mut runs: Vec<_> = policies.iter().map(|p| new_run(*p)).collect();
    let mut at = 0.0f64;
    let mut frames: Vec<Frame> = Vec::new();
    let mut violated = false;
    // The first failure to draw; the run goes on (the labs must still be stopped) and it is
    // reported at the end.
    let mut draw_failed: Option<io::Error> = None;
    let mut failure = None;
    let mut narration = Narration {
        name: scenario.name.clone(),
        teaches: scenario.teaches.replace('\n', " "),
        total: scenario.steps.len(),
        ..Narration::default()
    };
    // Hide the cursor and clear, then the opening frame.
    sent.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend_from_slice(b"\x1b[?25l\x1b[2J");
    let mut draw_frame = |labs: &[&Lab], narration: &Narration, status: Option<&str>, hold: f64| {
        let panels: Vec<Snapshot> = labs.iter().map(|l| l.snapshot()).collect();
        let still = Still {
            panels: &panels,
            narration,
            status,
        };
        let drawn = terminal.draw(|f| paint(f, &still));
        let screen = match drawn {
            Ok(completed) => completed.buffer.clone(),
            Err(e) => {
                draw_failed.get_or_insert(e);
                return;
            }
        };
        let ansi = std::mem::take(&mut *sent.lock().unwrap_or_else(PoisonError::into_inner));
        let first_violation = match panels.iter().find(|p| !p.view.verdict.clean) {
            Some(bad) if !std::mem::replace(&mut violated, true) => {
                Some(bad.view.verdict.headline.clone())
            }
            _ => None,
        };
        frames.push(Frame {
            at,
            hold,
            ansi,
            screen,
            first_violation,
        });
        at += hold;
    };
    draw_frame(&lab_refs, &narration, None, 2.5);
    let mut seen: Vec<u64> = lab_refs.iter().map(|l| l.core().history.total()).collect();
    let mut on_step = |index: usize, step: &Step| {
        narration.stepped(index, step);
        narration.decided_in(lab_refs.iter().copied(), &mut seen);
        let hold = if step.say.is_some() { 1.8 } else { 0.4 };
        draw_frame(&lab_refs, &narration, None, hold);
    };
    if let Err(e) = player::drive(&lab_refs, scenario, &mut runs, &mut on_step).await {
        failure = Some(e.to_string());
    }
    for lab in &lab_refs {
        player::finish(lab, scenario.quiesce_ms).await;
    }
    let verdicts: Vec<String> = labs
        .iter()
        .map(|l| {
            // A scenario that pressed `n` ends under the other policy: say both.
            let (started, now) = (l.options().policy, l.policy());
            let label = if started == now {
                started.to_string()
            } else {
                format!("{started} → {now}")
            };
            format!("{label}: {}", l.snapshot().view.verdict.summary())
        })
        .collect();
    let closing = verdicts.join("   ");
    narration.finished = true;
    draw_frame(&lab_refs, &narration, Some(&closing), 3.0);
    // A last frame, so that an asciicast player holds the verdict for its 3 s.
    draw_frame(&lab_refs, &narration, Some(&closing), 0.0);
    drop(terminal);
    for lab in labs {
        lab.stop().await;
    }
    if let Some(e) = draw_failed {
        return Err(RecordError::Terminal(e));
    }
    Ok(Recording {
        title,
        width,
        height,
        frames,
        verdicts,
        failure,
    })
}
