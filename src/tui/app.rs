//! Dashboard state and its event loop: keys in, actions to the labs, frames out when changed.
//! A scenario can play in it (paced by the person), and the whole session can be recorded.

use super::DashboardError;
use super::keys::{self, Command};
use super::knobs::{Apply, Knobs, Settings};
use super::log::LogRing;
use super::panes;
use super::panes::event_card::{self, EventCard};
use super::panes::evidence::{self, EvidenceView};
use super::panes::header::Travel;
use super::panes::lanes::{self, LaneSource, LanesDrawn, Row, Zoom};
use super::panes::narration::Narration;
use super::panes::picker::PickerView;
use super::panes::proof::{ProofResult, ProofView};
use super::theme::Theme;
use super::timeline::{Frozen, Jump, RUN_BUDGET, Timeline};
use super::ui::{self, Screen};
use crate::lab::{Action, Lab, LabOptions, Outcome, Snapshot};
use crate::record::Recorder;
use crate::scenario::journal::{self, Journal, Observed};
use crate::scenario::player::{self, Gate, Pace};
use crate::scenario::{self, Scenario};
use forkscope_core::{AnomalyKind, Policy};
use futures_util::StreamExt;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{
    Event, EventStream, KeyCode, KeyEvent, KeyEventKind, MouseButton, MouseEvent, MouseEventKind,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The frame deadline: at most this often, and only when something changed.
const FRAME: Duration = Duration::from_millis(100);
const STATUS_SHOWN: Duration = Duration::from_secs(4);
const LOG_LINES: usize = 200;
/// Real time between scenario steps while playing in the dashboard.
const STEP_DELAY_MS: u64 = 1_600;

/// How the dashboard starts.
#[derive(Debug, Default)]
pub struct Start {
    pub options: LabOptions,
    pub scenario: Option<Scenario>,
    /// Where `p` looks for scenarios.
    pub scenario_dir: PathBuf,
    /// Where `w` saves what was done (empty: the working directory).
    pub save_dir: PathBuf,
    pub recorder: Option<Arc<Mutex<Recorder>>>,
    /// Pause the labs at the first violation, with the evidence card up (for presenters).
    pub pause_at_violation: bool,
    /// Start in presenter mode.
    pub present: bool,
    /// Start with the verdict hidden (predict, then reveal).
    pub predict: bool,
    /// Bytes time travel may keep of the run (`None`: [`RUN_BUDGET`]); tests set a small one
    /// to see thinning without hours of data.
    pub run_budget: Option<usize>,
}

#[derive(Debug)]
struct Playback {
    gate: Arc<Gate>,
    narration: Arc<Mutex<Narration>>,
    task: JoinHandle<()>,
}

/// A "prove it" check running or done, and the scenario of its counterexample.
#[derive(Debug)]
struct Proof {
    view: Arc<Mutex<ProofView>>,
    scenario: Arc<Mutex<Option<String>>>,
}

#[derive(Debug)]
struct Picker {
    files: Vec<PathBuf>,
    loaded: Vec<Result<Scenario, String>>,
    selected: usize,
}

#[derive(Debug)]
pub struct App {
    options: LabOptions,
    labs: Vec<Arc<Lab>>,
    playback: Option<Playback>,
    picker: Option<Picker>,
    proof: Option<Proof>,
    /// The evidence card, once something worth pinning happened; `dismissed` keeps it down
    /// until the labs are replaced.
    evidence: Option<EvidenceView>,
    evidence_dismissed: bool,
    pause_at_violation: bool,
    scenario_dir: PathBuf,
    save_dir: PathBuf,
    help: bool,
    help_scroll: u16,
    /// The terminal was below the dashboard's minimum at the last frame: keys other than quit
    /// do nothing (the screen only asks to be enlarged).
    too_small: bool,
    status: Option<(String, Instant)>,
    log: LogRing,
    theme: Theme,
    recorder: Option<(Arc<Mutex<Recorder>>, Instant)>,
    /// The policy to return to when compare mode ends.
    single_policy: Policy,
    /// Every lab's run, and a moment each time something happened: for time travel.
    timeline: Timeline,
    /// The bytes `timeline` may hold.
    run_budget: usize,
    /// Time travel: the moment shown, or `None` for the present.
    travel: Option<usize>,
    /// This dashboard paused lab time to travel (and resumes it when back to live).
    travel_paused: bool,
    /// Opening help paused lab time (closing it resumes it).
    help_paused: bool,
    /// What was last captured as a moment (see [`App::changes`]).
    captured: Option<u64>,
    /// The condition the invariant panel explains (keys 1–5).
    explained: Option<forkscope_core::Condition>,
    /// Which of the run's violation stops `v` last travelled to.
    violation_step: Option<usize>,
    /// The selected lane mark: panel, and absolute index among the track's marks.
    selected: Option<(usize, usize)>,
    zoom: Zoom,
    present: bool,
    hide_verdict: bool,
    /// Where each panel's lanes were last drawn, for the mouse.
    lanes_drawn: Vec<LanesDrawn>,
    /// The knobs overlay, while open.
    knobs: Option<Knobs>,
    /// What was done since the labs started, for "save what I did" (`w`).
    journal: Journal,
    quit: bool,
}

/// A moment where a lab's count of one kind of violation grew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ViolationStop {
    moment: usize,
    panel: usize,
    kind: AnomalyKind,
}

/// Every moment a violation count grew, the first fork first and the rest in time order:
/// the fork explains the duplicates, which can reach the checker a moment before it.
fn violation_stops(timeline: &Timeline) -> Vec<ViolationStop> {
    let mut stops = Vec::new();
    let mut before: Vec<std::collections::BTreeMap<AnomalyKind, u64>> = Vec::new();
    for moment in 0..timeline.len() {
        let Some(m) = timeline.moment(moment) else {
            continue;
        };
        for (panel, frozen) in m.panels.iter().enumerate() {
            let counts = &frozen.snapshot.view.verdict.counts;
            if before.len() <= panel {
                before.resize(panel + 1, Default::default());
            }
            for (kind, n) in counts {
                if before[panel].get(kind).is_none_or(|was| was < n) {
                    stops.push(ViolationStop {
                        moment,
                        panel,
                        kind: *kind,
                    });
                }
            }
            before[panel] = counts.clone();
        }
    }
    if let Some(fork) = stops.iter().position(|s| s.kind == AnomalyKind::Fork) {
        let fork = stops.remove(fork);
        stops.insert(0, fork);
    }
    stops
}

impl App {
    /// A dashboard ready to draw: its labs started (or the scenario's, playing).
    pub async fn new(start: Start, log: LogRing) -> Result<App, DashboardError> {
        let run_budget = start.run_budget.unwrap_or(RUN_BUDGET);
        let mut app = App {
            options: start.options.clone(),
            labs: Vec::new(),
            playback: None,
            picker: None,
            proof: None,
            evidence: None,
            evidence_dismissed: false,
            pause_at_violation: start.pause_at_violation,
            scenario_dir: start.scenario_dir,
            save_dir: start.save_dir,
            help: false,
            help_scroll: 0,
            too_small: false,
            status: None,
            log,
            theme: Theme::from_env(),
            recorder: start.recorder.map(|r| (r, Instant::now())),
            single_policy: start.options.policy,
            timeline: Timeline::with_budget(0, run_budget),
            run_budget,
            travel: None,
            travel_paused: false,
            help_paused: false,
            captured: None,
            violation_step: None,
            explained: None,
            selected: None,
            zoom: Zoom::default(),
            present: start.present,
            hide_verdict: start.predict,
            lanes_drawn: Vec::new(),
            knobs: None,
            journal: Journal::new(&start.options, &[start.options.policy]),
            quit: false,
        };
        match start.scenario {
            Some(s) => app.play(s).await?,
            None => {
                let lab = Lab::start(start.options).await?;
                app.labs.push(Arc::new(lab));
                app.timeline = Timeline::with_budget(1, app.run_budget);
            }
        }
        Ok(app)
    }

    pub async fn run<B: Backend>(
        start: Start,
        log: LogRing,
        terminal: &mut Terminal<B>,
    ) -> Result<(), DashboardError> {
        let mut app = App::new(start, log).await?;
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
        app.stop().await;
        result
    }

    /// Stops the labs (and a scenario playing).
    pub async fn stop(&mut self) {
        self.stop_labs().await;
    }

    /// The labs on screen: one, or naive and fenced in compare mode.
    pub fn labs(&self) -> &[Arc<Lab>] {
        &self.labs
    }

    /// Whether the person asked to quit.
    pub fn quitting(&self) -> bool {
        self.quit
    }

    /// Time travel's position: the moment shown and how many there are; `None` when live.
    pub fn travelling(&self) -> Option<(usize, usize)> {
        self.travel.map(|i| (i, self.timeline.len()))
    }

    /// What time travel keeps of the run, in estimated bytes (see [`super::weight`]).
    pub fn kept_bytes(&self) -> usize {
        self.timeline.weight()
    }

    /// The moments time travel can go to.
    pub fn kept_moments(&self) -> usize {
        self.timeline.len()
    }

    /// One terminal event: a key press, a click on the lanes; the rest is ignored.
    pub async fn handle(&mut self, event: Event) {
        match event {
            Event::Key(key) if key.kind == KeyEventKind::Press => self.key(key).await,
            Event::Mouse(MouseEvent {
                kind: MouseEventKind::Down(MouseButton::Left),
                column,
                row,
                ..
            }) => self.click(column, row),
            _ => {}
        }
    }

    async fn event_loop<B: Backend>(
        &mut self,
        terminal: &mut Terminal<B>,
    ) -> Result<(), DashboardError> {
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
                    Some(Ok(Event::Resize(_, _))) => force = true,
                    Some(Ok(event)) => {
                        force = matches!(event, Event::Key(_) | Event::Mouse(MouseEvent {
                            kind: MouseEventKind::Down(_),
                            ..
                        }));
                        self.handle(event).await;
                    }
                    Some(Err(e)) => return Err(DashboardError::Terminal(e)),
                    None => self.quit = true,
                },
                () = terminate.as_mut() => self.quit = true,
            }
        }
        Ok(())
    }

    /// Draws the present (capturing a moment when something happened) or, travelling, the
    /// moment chosen.
    pub fn draw<B: Backend>(&mut self, terminal: &mut Terminal<B>) -> Result<(), DashboardError> {
        if let Ok(size) = terminal.size() {
            self.too_small = size.width < ui::MIN_WIDTH || size.height < ui::MIN_HEIGHT;
        }
        if self
            .status
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() > STATUS_SHOWN)
        {
            self.status = None;
        }
        let (panels, ends) = match self.travel.and_then(|i| self.timeline.moment(i)) {
            Some(moment) => (
                moment.panels.iter().map(Frozen::shown).collect::<Vec<_>>(),
                moment
                    .panels
                    .iter()
                    .map(|f| (f.entries, f.placed))
                    .collect::<Vec<_>>(),
            ),
            None => {
                if self.timeline.tracks.len() != self.labs.len() {
                    self.timeline = Timeline::with_budget(self.labs.len(), self.run_budget);
                }
                for (track, lab) in self.timeline.tracks.iter_mut().zip(&self.labs) {
                    track.sync(&lab.core().history);
                }
                let panels: Vec<Snapshot> = self.labs.iter().map(|l| l.snapshot()).collect();
                let changes = self.changes();
                if self.captured != Some(changes) {
                    self.timeline.capture(&panels);
                    self.captured = Some(changes);
                }
                self.pin_evidence(&panels);
                let ends = self.timeline.tracks.iter().map(|t| t.ends()).collect();
                (panels, ends)
            }
        };
        let sources: Vec<LaneSource> = panels
            .iter()
            .zip(&ends)
            .zip(&self.timeline.tracks)
            .enumerate()
            .map(|(i, ((snap, (_, placed)), track))| {
                let (marks, base) = track.placed_until(*placed);
                LaneSource {
                    placed: marks,
                    end_ms: snap.view.at.as_millis(),
                    zoom: self.zoom,
                    selected: self
                        .selected
                        .filter(|(p, _)| *p == i)
                        .and_then(|(_, abs)| abs.checked_sub(base)),
                    hide_verdict: self.hide_verdict,
                    in_order: snap.scripted,
                }
            })
            .collect();
        let event: Option<EventCard> = self.selected.and_then(|(p, abs)| {
            let track = self.timeline.tracks.get(p)?;
            let (entries, base) = track.entries_until(ends.get(p)?.0);
            let (marks, marks_base) = track.placed_until(ends.get(p)?.1);
            let policy = panels.get(p)?.view.policy;
            event_card::describe(
                entries,
                base,
                marks.get(abs.checked_sub(marks_base)?)?,
                policy,
            )
        });
        let log = self.log.tail(LOG_LINES);
        let narration = self.playback.as_ref().map(|p| {
            let mut n = p
                .narration
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            n.paused = p.gate.pace() == Pace::Paused;
            n
        });
        let picker = self.picker.as_ref().map(Picker::view);
        let proof = self.proof.as_ref().map(|p| {
            p.view
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        });
        let screen = Screen {
            panels: &panels,
            log: &log,
            help: self.help,
            help_scroll: self.help_scroll,
            status: self.status.as_ref().map(|(s, _)| s.as_str()),
            theme: self.theme,
            narration: narration.as_ref(),
            picker: picker.as_ref(),
            proof: proof.as_ref(),
            evidence: if self.evidence_dismissed {
                None
            } else {
                self.evidence.as_ref()
            },
            lanes: &sources,
            travel: self.travel.map(|moment| Travel {
                moment,
                moments: self.timeline.len(),
            }),
            reach: self.timeline.reach(),
            event: event.as_ref(),
            present: self.present,
            hide_verdict: self.hide_verdict,
            explained: self.explained,
            knobs: self.knobs.as_ref(),
        };
        let frame_lock = super::TERMINAL
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut drawn = Vec::new();
        terminal
            .draw(|frame| drawn = ui::draw(frame, &screen))
            .map_err(|e| DashboardError::Terminal(std::io::Error::other(e.to_string())))?;
        drop(frame_lock);
        self.lanes_drawn = drawn;
        if let Some((recorder, started)) = &self.recorder {
            let at = started.elapsed().as_secs_f64();
            let mut recorder = recorder.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = recorder.frame(at);
            if let Some(bad) = panels.iter().find(|p| !p.view.verdict.clean) {
                let _ = recorder.mark_first_violation(at, &bad.view.verdict.headline);
            }
        }
        Ok(())
    }

    /// Changes whenever anything on screen would: history, exchanges, log, lab time (in the
    /// tenths the header shows), pause, speed, UI state, scenario progress.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            self.travel,
            self.selected,
            self.zoom,
            self.present,
            self.hide_verdict,
        )
            .hash(&mut h);
        // Travelling, the screen shows the past: the labs' changes do not show.
        let labs: &[Arc<Lab>] = if self.travel.is_some() {
            &[]
        } else {
            &self.labs
        };
        for lab in labs {
            let core = lab.core();
            core.history.total().hash(&mut h);
            drop(core);
            lab.exchanges().fingerprint().hash(&mut h);
            (lab.clock().now().as_millis() / 100).hash(&mut h);
            lab.clock().paused().hash(&mut h);
            lab.clock().speed().to_bits().hash(&mut h);
        }
        if let Some(p) = &self.playback {
            let n = p.narration.lock().unwrap_or_else(PoisonError::into_inner);
            (
                n.done,
                n.finished,
                n.error.is_some(),
                p.gate.pace() == Pace::Paused,
            )
                .hash(&mut h);
        }
        self.log.version().hash(&mut h);
        if let Some(p) = &self.proof {
            let view = p.view.lock().unwrap_or_else(PoisonError::into_inner);
            (view.progress, view.results.len(), view.error.is_some()).hash(&mut h);
        }
        (
            self.evidence.as_ref().map(|e| (e.violation, e.paused)),
            self.evidence_dismissed,
            self.help,
            self.help_scroll,
            self.status.is_some(),
            self.picker.as_ref().map(|p| p.selected),
        )
            .hash(&mut h);
        if let Some(k) = &self.knobs {
            let values: Vec<u64> = super::knobs::Knob::ALL
                .iter()
                .map(|knob| k.edited.get(*knob))
                .collect();
            (k.selected, values, &k.refused).hash(&mut h);
        }
        h.finish()
    }

    /// Changes whenever something happened in a lab (not merely time passing): a new moment
    /// for time travel.
    fn changes(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for lab in &self.labs {
            lab.core().history.total().hash(&mut h);
            lab.exchanges().fingerprint().hash(&mut h);
            lab.clock().paused().hash(&mut h);
        }
        if let Some(p) = &self.playback {
            let n = p.narration.lock().unwrap_or_else(PoisonError::into_inner);
            (n.done, n.finished).hash(&mut h);
        }
        h.finish()
    }

    /// Moves through the past; the first move from the present pauses the labs.
    fn travel_to(&mut self, jump: Jump) {
        if self.timeline.is_empty() {
            self.say("nothing has happened yet to travel back to");
            return;
        }
        let from = match self.travel {
            Some(i) => i,
            None => {
                self.pause_for_travel();
                self.timeline.len() - 1
            }
        };
        let to = self.timeline.jump(from, jump);
        let violation = self.timeline.moment(to).is_some_and(|m| m.violation);
        let reach = self.timeline.reach();
        match jump {
            // The oldest moment kept: say when that is not the run's whole start (short: the
            // key line has 50 columns for it at the smallest size).
            Jump::Start => match reach {
                Some(r) if r.forgotten => self.say(format!(
                    "oldest kept: lab {}; older ones forgotten",
                    panes::seconds(r.oldest_ms)
                )),
                Some(r) => {
                    if let Some(since) = r.every_change_since_ms {
                        self.say(format!(
                            "run's start; every change since lab {}",
                            panes::seconds(since)
                        ));
                    }
                }
                None => {}
            },
            Jump::FirstViolation if !violation => self.say("no violation in this run"),
            Jump::PreviousDecision | Jump::NextDecision if to == from => {
                self.say("no decision that way")
            }
            Jump::Forward(_) if to == from => {
                self.say("the newest change; End (or l) goes back to live")
            }
            _ => {}
        }
        self.travel = Some(to);
    }

    /// `v`: the fork first, then every other violation in the order it happened; each press
    /// travels to the next and selects its mark in the lanes, so the card explains it.
    fn step_violation(&mut self) {
        let stops = violation_stops(&self.timeline);
        if stops.is_empty() {
            self.say("no violation in this run");
            return;
        }
        let next = match (self.travel, self.violation_step) {
            (Some(_), Some(k)) => (k + 1) % stops.len(),
            _ => 0,
        };
        if self.travel.is_none() {
            self.pause_for_travel();
        }
        let stop = stops[next];
        self.travel = Some(stop.moment);
        self.violation_step = Some(next);
        self.selected = self.mark_of(stop);
        let tail = if next + 1 == stops.len() {
            "the last; v starts over, End is live"
        } else {
            "v: the next"
        };
        self.say(format!(
            "violation {} of {}: {} · {tail}",
            next + 1,
            stops.len(),
            crate::tui::panes::invariant::short(stop.kind)
        ));
    }

    /// The lane mark of a violation stop: the orphan emit or duplicate that arrived in its
    /// moment (other anomalies have no mark of their own).
    fn mark_of(&self, stop: ViolationStop) -> Option<(usize, usize)> {
        let glyph = match stop.kind {
            AnomalyKind::Fork => lanes::ORPHAN_EMIT,
            AnomalyKind::Duplicate => '◆',
            _ => return None,
        };
        let moment = self.timeline.moment(stop.moment)?;
        let frozen = moment.panels.get(stop.panel)?;
        let from = stop
            .moment
            .checked_sub(1)
            .and_then(|m| self.timeline.moment(m))
            .and_then(|m| m.panels.get(stop.panel))
            .map_or(0, |f| f.placed);
        let (marks, base) = self.timeline.tracks[stop.panel].placed_until(frozen.placed);
        let from = from.saturating_sub(base);
        (from..marks.len())
            .find(|i| marks[*i].mark.glyph == glyph)
            .map(|i| (stop.panel, base + i))
    }

    fn pause_for_travel(&mut self) {
        self.travel_paused = self.pause_running();
    }

    /// Pauses lab time (or the script) if it runs; returns whether it did, so the caller
    /// resumes only what it paused.
    fn pause_running(&self) -> bool {
        match &self.playback {
            Some(p) if p.gate.pace() != Pace::Paused => {
                p.gate.set(Pace::Paused);
                true
            }
            Some(_) => false,
            None => {
                let running: Vec<_> = self.labs.iter().filter(|l| !l.clock().paused()).collect();
                running.iter().for_each(|l| l.clock().set_paused(true));
                !running.is_empty()
            }
        }
    }

    /// Runs what [`Self::pause_running`] paused.
    fn resume_paused(&self) {
        match &self.playback {
            Some(p) => p.gate.set(Pace::Playing),
            None => self.labs.iter().for_each(|l| l.clock().set_paused(false)),
        }
    }

    /// Back to the present; lab time runs again if time travel paused it.
    fn go_live(&mut self) {
        self.violation_step = None;
        if self.travel.take().is_none() {
            return;
        }
        if std::mem::take(&mut self.travel_paused) {
            self.resume_paused();
        }
        self.say("live");
    }

    /// Help pauses the lab, so nothing happens while the room reads it; closing it runs the
    /// lab again if help paused it.
    fn set_help(&mut self, open: bool) {
        if open == self.help {
            return;
        }
        self.help = open;
        self.help_scroll = 0;
        if open {
            self.help_paused = self.pause_running();
        } else if std::mem::take(&mut self.help_paused) {
            self.resume_paused();
        }
    }

    /// The marks the selected panel shows now (or at the moment shown), and its session.
    fn shown(&self, panel: usize) -> Option<(usize, Option<forkscope_core::SessionId>)> {
        let moment = match self.travel {
            Some(i) => self.timeline.moment(i)?,
            None => self.timeline.moment(self.timeline.len().checked_sub(1)?)?,
        };
        let frozen = moment.panels.get(panel)?;
        let end = match self.travel {
            Some(_) => frozen.placed,
            None => self.timeline.tracks.get(panel)?.ends().1,
        };
        let session = frozen.snapshot.view.client.as_ref().and_then(|c| c.session);
        Some((end, session))
    }

    /// Selects the previous or next event the lanes show.
    fn select(&mut self, direction: i8) {
        let panel = self.selected.map_or(0, |(p, _)| p);
        let Some((end, session)) = self.shown(panel) else {
            return;
        };
        let (marks, base) = self.timeline.tracks[panel].placed_until(end);
        let shown = |i: &usize| marks[*i].shown_for(session);
        let current = self
            .selected
            .and_then(|(_, abs)| abs.checked_sub(base))
            .filter(|i| *i < marks.len());
        let next = match (current, direction) {
            (None, _) => (0..marks.len()).rev().find(shown),
            (Some(c), d) if d < 0 => (0..c).rev().find(shown).or(Some(c)),
            (Some(c), _) => (c + 1..marks.len()).find(shown).or(Some(c)),
        };
        match next {
            Some(i) => self.selected = Some((panel, base + i)),
            None => self.say("no events to select yet"),
        }
    }

    /// A click on a lane selects the mark drawn in that cell.
    fn click(&mut self, column: u16, row: u16) {
        let hit = self
            .lanes_drawn
            .iter()
            .enumerate()
            .find_map(|(p, d)| d.hit(column, row).map(|h| (p, h)));
        let Some((panel, (lane, from, to))) = hit else {
            return;
        };
        let in_order = self.lanes_drawn[panel].in_order;
        let Some((end, session)) = self.shown(panel) else {
            return;
        };
        let (marks, base) = self.timeline.tracks[panel].placed_until(end);
        let start = marks.partition_point(|m| m.coordinate(in_order) < from);
        // The cell draws its worst mark, the later of equals: select that one.
        let best = marks[start..]
            .iter()
            .enumerate()
            .take_while(|(_, m)| m.coordinate(in_order) < to)
            .filter(|(_, m)| m.row == lane && m.shown_for(session))
            .max_by_key(|(i, m)| (m.mark.severity, *i))
            .map(|(i, _)| base + start + i);
        self.selected = best.map(|abs| (panel, abs));
        if best.is_none() {
            self.say(match lane {
                Row::Client => "nothing the client received there",
                Row::Stream(_) => "no event there",
            });
        }
    }

    /// Pins the first violation (or, until one happens, the first typed rejection) in the
    /// evidence card; with `pause_at_violation`, pauses the labs on a violation.
    fn pin_evidence(&mut self, panels: &[Snapshot]) {
        if self.evidence_dismissed {
            return;
        }
        // A violation outranks a rejection; among violations the fork leads (it explains
        // the duplicates that may reach the checker a moment before it).
        let rank = |e: &EvidenceView| (e.violation, std::cmp::Reverse(e.kind));
        let found = panels.iter().filter_map(evidence::of).max_by_key(rank);
        let Some(mut found) = found else { return };
        if let Some(pinned) = &self.evidence
            && pinned.violation
            && rank(&found) <= rank(pinned)
        {
            return;
        }
        if found.violation && self.pause_at_violation {
            match &self.playback {
                Some(p) => p.gate.set(Pace::Paused),
                None => self.labs.iter().for_each(|l| l.clock().set_paused(true)),
            }
            found.paused = true;
        }
        if self.evidence.as_ref() != Some(&found) {
            self.evidence = Some(found);
        }
    }

    fn say(&mut self, status: impl Into<String>) {
        self.status = Some((status.into(), Instant::now()));
    }

    async fn key(&mut self, key: KeyEvent) {
        if self.too_small {
            if keys::command_for(key) == Some(Command::Quit) {
                self.quit = true;
            }
            return;
        }
        if self.help {
            let scroll = match key.code {
                KeyCode::Up => Some(-1),
                KeyCode::Down => Some(1),
                KeyCode::PageUp => Some(-10),
                KeyCode::PageDown => Some(10),
                _ => None,
            };
            if let Some(by) = scroll {
                self.help_scroll = self.help_scroll.saturating_add_signed(by).min(100);
                return;
            }
        }
        if self.picker.is_some() {
            return self.picker_key(key).await;
        }
        if self.proof.is_some() {
            return self.proof_key(key).await;
        }
        if self.knobs.is_some() {
            return self.knobs_key(key).await;
        }
        // Enter dismisses the card on top: the selected event's, else the evidence.
        if key.code == KeyCode::Enter && self.selected.take().is_some() {
            return;
        }
        if key.code == KeyCode::Enter && self.evidence.is_some() && !self.evidence_dismissed {
            self.evidence_dismissed = true;
            return;
        }
        // Esc closes what is open, one thing at a time, before it quits.
        if key.code == KeyCode::Esc && !self.help {
            if self.selected.take().is_some() || self.explained.take().is_some() {
                return;
            }
            if self.travel.is_some() {
                return self.go_live();
            }
        }
        let Some(command) = keys::command_for(key) else {
            return;
        };
        match command {
            Command::Quit if self.help => self.set_help(false),
            Command::Quit => self.quit = true,
            Command::ToggleHelp => self.set_help(!self.help),
            Command::ToggleCompare => self.toggle_compare().await,
            Command::OpenPicker => self.picker = Some(Picker::load(&self.scenario_dir)),
            Command::Prove => self.prove(),
            Command::Travel(Jump::FirstViolation) => self.step_violation(),
            Command::Explain(n) => {
                let asked = forkscope_core::Condition::ALL
                    .get(usize::from(n) - 1)
                    .copied();
                self.explained = if self.explained == asked { None } else { asked };
                // Presenter mode has no invariant panel: say what the key did, and where.
                if let (true, Some(c)) = (self.present, self.explained) {
                    self.say(format!("{}. {}: {}", c.number(), c.title(), c.meaning()));
                }
            }
            Command::Travel(jump) => self.travel_to(jump),
            Command::Live => self.go_live(),
            Command::Select(direction) => self.select(direction),
            Command::Zoom => {
                self.zoom = match self.zoom {
                    Zoom::Follow => Zoom::WholeRun,
                    Zoom::WholeRun => Zoom::Follow,
                };
                self.say(match self.zoom {
                    Zoom::Follow => "lanes follow the present",
                    Zoom::WholeRun => "lanes show the whole run",
                });
            }
            Command::Present => {
                self.present = !self.present;
                self.say(if self.present {
                    "presenter mode: f returns to the full dashboard"
                } else {
                    "full dashboard"
                });
            }
            Command::HideVerdict => {
                self.hide_verdict = !self.hide_verdict;
                self.say(if self.hide_verdict {
                    "verdict hidden: predict, then V reveals"
                } else {
                    "revealed"
                });
            }
            Command::Knobs => self.open_knobs(),
            Command::SaveScenario => self.save_scenario(),
            // The labs live in the present: a fault key leaves time travel first.
            Command::Lab(_) if self.travel.is_some() => {
                self.go_live();
                self.say("back to live (the labs live in the present); press again to act");
            }
            // While a scenario plays, space and s pace the script: its clock is scripted.
            Command::Lab(Action::TogglePause) if self.playback.is_some() => {
                if let Some(p) = &self.playback {
                    let next = if p.gate.pace() == Pace::Paused {
                        Pace::Playing
                    } else {
                        Pace::Paused
                    };
                    p.gate.set(next);
                }
            }
            Command::Lab(Action::Step) if self.playback.is_some() => {
                if let Some(p) = &self.playback {
                    p.gate.set(Pace::StepOnce);
                }
            }
            Command::Lab(Action::ToggleNaive) if self.labs.len() > 1 => {
                self.say("compare mode runs naive (left) and fenced (right); m leaves it");
            }
            Command::Lab(action) => {
                let before = self.labs.first().map(|l| l.policy());
                if self.playback.is_none() {
                    let observed = self.observe();
                    self.journal.record(action, observed);
                }
                let mut restart = false;
                let mut refused = None;
                for lab in &self.labs {
                    match lab.apply(action) {
                        Outcome::RestartRequested => restart = true,
                        Outcome::Refused(e) => refused = Some(e),
                        Outcome::Done => {}
                    }
                }
                if let Some(e) = refused {
                    self.say(format!("not done: {e}"));
                } else if restart {
                    // The policy in force now, not the launch one: a presenter who pressed
                    // `n` and then `R` expects the lab they were looking at, fresh.
                    let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
                    self.replace_labs(&policies, self.options.clone()).await;
                    self.say("lab restarted");
                } else {
                    self.say(before.map_or(action.describe(), |p| action.describe_from(p)));
                }
            }
        }
    }

    /// What each lab had reached, for the journal.
    fn observe(&self) -> Vec<Observed> {
        self.labs
            .iter()
            .map(|lab| {
                let core = lab.core();
                Observed {
                    at_ms: lab.clock().now().as_millis(),
                    applied: core.client.applied(),
                    connected: core.client.holds_stream(),
                    policy: core.server.policy(),
                }
            })
            .collect()
    }

    fn open_knobs(&mut self) {
        if self.playback.is_some() {
            return self.say("a scenario sets its own knobs; R returns to a live lab first");
        }
        let settings: Vec<(Policy, Settings)> = self
            .labs
            .iter()
            .map(|lab| {
                let config = *lab.core().server.config();
                let latency = lab.proxy().latency_ms();
                (lab.policy(), Settings::of(&self.options, config, latency))
            })
            .collect();
        let Some((_, first)) = settings.first() else {
            return;
        };
        let mut knobs = Knobs::new(*first);
        // In compare mode one lab may have taken a value the other refused: the card shows
        // the first lab's, and says where the other differs rather than hide it.
        let differ: Vec<String> = settings
            .iter()
            .skip(1)
            .flat_map(|(policy, other)| {
                crate::tui::knobs::Knob::ALL
                    .into_iter()
                    .filter(|k| other.shown(*k) != first.shown(*k))
                    .map(move |k| format!("{policy} runs {} {}", k.label(), other.shown(k)))
            })
            .collect();
        if !differ.is_empty() {
            knobs.refused = Some(format!(
                "the labs differ: {} (it refused the other value)",
                differ.join("; ")
            ));
        }
        self.knobs = Some(knobs);
    }

    async fn knobs_key(&mut self, key: KeyEvent) {
        let Some(knobs) = &mut self.knobs else { return };
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('k') => self.knobs = None,
            KeyCode::Up | KeyCode::Char('K') => knobs.select(false),
            KeyCode::Down | KeyCode::Char('j') | KeyCode::Tab => knobs.select(true),
            KeyCode::Right | KeyCode::Char('+') | KeyCode::Char('=') => knobs.turn(true),
            KeyCode::Left | KeyCode::Char('-') => knobs.turn(false),
            KeyCode::Enter => self.apply_knobs().await,
            _ => {}
        }
    }

    /// Applies the overlay: live knobs as one [`Action::Tune`] to every lab (journalled like a
    /// key), start-time knobs by restarting the labs — unless a lab's policy refuses them.
    async fn apply_knobs(&mut self) {
        let Some(knobs) = &self.knobs else { return };
        let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
        match knobs.apply(&self.options) {
            Apply::Nothing => {
                self.knobs = None;
                self.say("knobs unchanged");
            }
            Apply::Live(actions) => {
                let mut refused: Vec<(Policy, String)> = Vec::new();
                for action in actions {
                    let observed = self.observe();
                    self.journal.record(action, observed);
                    for (lab, policy) in self.labs.iter().zip(&policies) {
                        if let Outcome::Refused(e) = lab.apply(action) {
                            refused.push((*policy, e.to_string()));
                        }
                    }
                }
                if refused.is_empty() {
                    // The card stays up (Esc closes it): a habitual Enter, Esc must not quit.
                    if let Some(k) = &mut self.knobs {
                        self.options.config = k.edited.config;
                        self.options.latency_ms = k.edited.latency_ms;
                        k.running = k.edited;
                        k.applied = true;
                    }
                    self.say("knobs turned on the running lab");
                } else {
                    // In compare mode one lab may take what the other refuses: say both.
                    let took: Vec<&str> = policies
                        .iter()
                        .filter(|p| refused.iter().all(|(r, _)| r != *p))
                        .map(|p| p.name())
                        .collect();
                    let why: Vec<String> =
                        refused.iter().map(|(p, e)| format!("{p}: {e}")).collect();
                    let why = format!("refused: {}", why.join("; "));
                    let why = if took.is_empty() {
                        why
                    } else {
                        self.say("knobs turned where the policy allows; see the card");
                        format!("{} took it · {why}", took.join(" and "))
                    };
                    if let Some(k) = &mut self.knobs {
                        k.refused = Some(why);
                    }
                }
            }
            Apply::Restart(options) => {
                let refused: Vec<String> = policies
                    .iter()
                    .filter_map(|p| knobs.refusal(*p).map(|e| format!("{p}: {e}")))
                    .collect();
                if !refused.is_empty() {
                    let why = format!("refused: {}", refused.join("; "));
                    if let Some(k) = &mut self.knobs {
                        k.refused = Some(why);
                    }
                    return;
                }
                self.options = options.clone();
                if let Some(k) = &mut self.knobs {
                    k.running = k.edited;
                    k.applied = true;
                }
                self.replace_labs(&policies, options).await;
                self.say("labs restarted with the new knobs (their history starts afresh)");
            }
        }
    }

    /// Writes what was done since the labs started as a scenario file in the working
    /// directory (never over an existing file), with the labs' verdicts as its expectations.
    fn save_scenario(&mut self) {
        if self.playback.is_some() {
            return self.say("a scenario is playing: its file already replays it");
        }
        let saved = self.observe();
        let outcomes: Vec<journal::Outcome> = self
            .labs
            .iter()
            .map(|lab| {
                let core = lab.core();
                journal::Outcome {
                    policy: lab.options().policy,
                    verdict: core.history.verdict(),
                    counters: core.history.checker().counters().clone(),
                    tool_results: core.client.tool_results(),
                }
            })
            .collect();
        let at = saved.first().map_or(0, |o| o.at_ms);
        let name = format!(
            "Saved from the dashboard ({} actions, {})",
            self.journal.actions(),
            super::panes::seconds(at)
        );
        let text = match self.journal.to_toml(&saved, &outcomes, &name) {
            Ok(text) => text,
            Err(e) => return self.say(format!("could not save the scenario: {e}")),
        };
        match crate::new_file::write_numbered(&self.save_dir, "forkscope-saved", &text) {
            Ok(path) => self.say(format!(
                "saved {} as {path} — forkscope run {path} replays it",
                match self.journal.actions() {
                    1 => "1 action".to_owned(),
                    n => format!("{n} actions"),
                },
                path = path.display()
            )),
            Err(e) => self.say(format!("could not save the scenario: {e}")),
        }
    }

    async fn picker_key(&mut self, key: KeyEvent) {
        let Some(picker) = &mut self.picker else {
            return;
        };
        let count = picker.files.len();
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('p') => self.picker = None,
            KeyCode::Up | KeyCode::Char('k') if count > 0 => {
                picker.selected = (picker.selected + count - 1) % count
            }
            KeyCode::Down | KeyCode::Char('j') if count > 0 => {
                picker.selected = (picker.selected + 1) % count
            }
            KeyCode::Enter => {
                let chosen = picker.loaded.get(picker.selected).cloned();
                self.picker = None;
                match chosen {
                    Some(Ok(s)) => {
                        if let Err(e) = self.play(s).await {
                            self.say(e.to_string());
                        }
                    }
                    Some(Err(e)) => self.say(e),
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// Starts a bounded exhaustive check of the lab's policy (both in compare mode) on a
    /// blocking thread; the card shows its progress, then its verdict.
    fn prove(&mut self) {
        let policies: Vec<Policy> = if self.labs.len() > 1 {
            vec![Policy::Fenced, Policy::Naive]
        } else {
            // The policy in force now (n switches it at run time).
            self.labs
                .first()
                .map_or(vec![self.single_policy], |l| vec![l.core().server.policy()])
        };
        let names: Vec<&str> = policies.iter().map(|p| p.name()).collect();
        let view = Arc::new(Mutex::new(ProofView {
            policies: names.join(" and "),
            ..ProofView::default()
        }));
        let scenario = Arc::new(Mutex::new(None));
        let config = crate::check::config(self.options.config.identity);
        let (task_view, task_scenario) = (view.clone(), scenario.clone());
        tokio::task::spawn_blocking(move || {
            prove_policies(&policies, config, &task_view, &task_scenario);
        });
        self.proof = Some(Proof { view, scenario });
    }

    async fn proof_key(&mut self, key: KeyEvent) {
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('P') => self.proof = None,
            KeyCode::Enter => {
                let text = self.proof.as_ref().and_then(|p| {
                    p.scenario
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()
                });
                let Some(text) = text else { return };
                self.proof = None;
                let path = std::path::Path::new("prove-it (forkscope check counterexample)");
                match scenario::format::parse(&text, path) {
                    Ok(s) => {
                        if let Err(e) = self.play(s).await {
                            self.say(e.to_string());
                        }
                    }
                    Err(e) => self.say(e.to_string()),
                }
            }
            _ => {}
        }
    }

    /// Starts a scenario: fresh labs (two side by side for "both"), then the script, paced.
    async fn play(&mut self, scenario: Scenario) -> Result<(), DashboardError> {
        let policies = scenario.policy.list();
        let mut refused = Vec::new();
        let playable: Vec<Policy> = policies
            .iter()
            .copied()
            .filter(|p| match scenario.config.validate(*p) {
                Ok(()) => true,
                Err(e) => {
                    refused.push(format!("{p}: {e}"));
                    false
                }
            })
            .collect();
        if playable.is_empty() {
            return Err(DashboardError::ConfigRefused {
                scenario: scenario.name.clone(),
                why: refused.join("; "),
            });
        }
        self.stop_labs().await;
        for policy in &playable {
            let lab = Lab::start(player::lab_options(&scenario, *policy)).await?;
            self.labs.push(Arc::new(lab));
        }
        let narration = Arc::new(Mutex::new(Narration {
            name: scenario.name.clone(),
            teaches: scenario.teaches.replace('\n', " "),
            total: scenario.steps.len(),
            ..Narration::default()
        }));
        let gate = Arc::new(Gate::new(Pace::Playing, STEP_DELAY_MS));
        let task = {
            let labs = self.labs.clone();
            let narration = narration.clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                let refs: Vec<&Lab> = labs.iter().map(|l| l.as_ref()).collect();
                let mut runs: Vec<_> = playable.iter().map(|p| player::new_run(*p)).collect();
                let progress = narration.clone();
                let watched = labs.clone();
                let mut seen: Vec<u64> = watched.iter().map(|l| l.core().history.total()).collect();
                let mut on_step = |index: usize, step: &scenario::format::Step| {
                    let mut n = progress.lock().unwrap_or_else(PoisonError::into_inner);
                    n.stepped(index, step);
                    // What each lab's server decided during the step, in the history's words.
                    n.decided_in(watched.iter().map(AsRef::as_ref), &mut seen);
                };
                let result =
                    player::drive_paced(&refs, &scenario, &mut runs, &mut on_step, Some(&gate))
                        .await;
                let mut n = narration.lock().unwrap_or_else(PoisonError::into_inner);
                n.finished = true;
                n.error = result.err().map(|e| e.to_string());
            })
        };
        if !refused.is_empty() {
            let mut n = narration.lock().unwrap_or_else(PoisonError::into_inner);
            n.said = Some((
                0,
                format!("refused before it started — {}", refused.join("; ")),
            ));
        }
        self.playback = Some(Playback {
            gate,
            narration,
            task,
        });
        Ok(())
    }

    async fn toggle_compare(&mut self) {
        if self.labs.len() > 1 {
            let back = self.single_policy;
            self.replace_labs(&[back], self.options.clone()).await;
            self.say(format!(
                "compare mode off: a fresh {back} lab (both labs were stopped; m compares again)"
            ));
        } else {
            if let Some(lab) = self.labs.first() {
                self.single_policy = lab.core().server.policy();
            }
            self.replace_labs(&[Policy::Naive, Policy::Fenced], self.options.clone())
                .await;
            self.say("compare mode: two fresh labs, naive and fenced; every key goes to both");
        }
    }

    async fn stop_labs(&mut self) {
        // New labs, new evidence, a new run to travel through.
        self.evidence = None;
        self.evidence_dismissed = false;
        self.timeline = Timeline::with_budget(0, self.run_budget);
        self.travel = None;
        self.travel_paused = false;
        self.captured = None;
        self.selected = None;
        if let Some(playback) = self.playback.take() {
            playback.task.abort();
            let _ = playback.task.await;
        }
        for lab in self.labs.drain(..) {
            // The playback task held the other references; it is gone now.
            if let Ok(lab) = Arc::try_unwrap(lab) {
                lab.stop().await;
            }
        }
    }

    async fn replace_labs(&mut self, policies: &[Policy], options: LabOptions) {
        self.stop_labs().await;
        self.journal = Journal::new(&options, policies);
        for policy in policies {
            match Lab::start(LabOptions {
                policy: *policy,
                ..options.clone()
            })
            .await
            {
                Ok(lab) => self.labs.push(Arc::new(lab)),
                Err(e) => tracing::error!(error = %e, "could not start a lab"),
            }
        }
        if self.labs.is_empty() {
            self.quit = true;
        }
    }
}

impl Picker {
    fn load(dir: &std::path::Path) -> Picker {
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let dir = if dir.is_dir() { dir } else { shipped.as_path() };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                    .collect()
            })
            .unwrap_or_default();
        // The seed incident first: it is the story the rest elaborate.
        files.sort_by_key(|f| (!f.ends_with("seed-incident.toml"), f.clone()));
        let loaded = files
            .iter()
            .map(|f| scenario::load(f).map_err(|e| e.to_string()))
            .collect();
        Picker {
            files,
            loaded,
            selected: 0,
        }
    }

    fn view(&self) -> PickerView {
        PickerView {
            entries: self
                .files
                .iter()
                .zip(&self.loaded)
                .map(|(f, s)| {
                    let file = f
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    (
                        file,
                        s.as_ref().map(|s| s.name.clone()).map_err(Clone::clone),
                    )
                })
                .collect(),
            selected: self.selected,
            teaches: self
                .loaded
                .get(self.selected)
                .and_then(|s| s.as_ref().ok())
                .map(|s| s.teaches.replace('\n', " ")),
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

/// The dashboard's bounded checks: fenced explores every schedule to depth 10 (foreign GETs
/// included, deliveries interleaved); naive looks for the seed incident's shape — the lab
/// client's own steps, events arriving at once, a fork — so what it finds plays as a scenario.
fn prove_policies(
    policies: &[Policy],
    config: forkscope_core::LabConfig,
    view: &Mutex<ProofView>,
    scenario: &Mutex<Option<String>>,
) {
    use forkscope_core::model::{Bounds, DEFAULT_MEMORY_BUDGET, Delivery};
    for &policy in policies {
        let bounds = match policy {
            Policy::Fenced => Bounds {
                depth: 10,
                streams: 3,
                max_states: Some(300_000),
                memory_budget: DEFAULT_MEMORY_BUDGET,
                probes: true,
                delivery: Delivery::Interleaved,
                target: None,
            },
            Policy::Naive => Bounds {
                depth: 8,
                streams: 3,
                max_states: Some(300_000),
                memory_budget: DEFAULT_MEMORY_BUDGET,
                probes: false,
                delivery: Delivery::Eager,
                target: Some(forkscope_core::AnomalyKind::Fork),
            },
        };
        let progress = |level: &forkscope_core::model::Level| {
            view.lock().unwrap_or_else(PoisonError::into_inner).progress =
                Some((level.depth, level.distinct));
        };
        let checked = match crate::check::check(config, policy, bounds, progress) {
            Ok(c) => c,
            Err(e) => {
                view.lock().unwrap_or_else(PoisonError::into_inner).error = Some(e.to_string());
                return;
            }
        };
        let e = &checked.exploration;
        let mut details = Vec::new();
        if let Some(counterexample) = &e.counterexample {
            for (i, step) in checked.trace.iter().enumerate() {
                details.push(format!("{:>2}. {}", i + 1, step.step));
                details.extend(step.happened.iter().map(|h| format!("      {h}")));
                details.extend(step.anomalies.iter().map(|a| format!("    ✘ {a}")));
            }
            if let Ok(text) =
                crate::check::scenario_toml(config, policy, counterexample, &checked.trace)
            {
                *scenario.lock().unwrap_or_else(PoisonError::into_inner) = Some(text);
            }
        } else {
            let reached: Vec<&str> = e.reached.keys().map(String::as_str).collect();
            details.push(format!("reached: {}", reached.join(" · ")));
        }
        let result = ProofResult {
            holds: e.counterexample.is_none(),
            verdict: format!("{policy}: {}", e.verdict()),
            figures: format!(
                "{} states, {} steps, depth {} · {:.1} s ({} states/s) · same check: forkscope check --policy {policy}{}",
                crate::check::thousands(e.distinct),
                crate::check::thousands(e.transitions),
                e.depth_reached,
                checked.elapsed.as_secs_f64(),
                crate::check::thousands(checked.states_per_second() as u64),
                match policy {
                    Policy::Fenced => " --depth 10",
                    Policy::Naive => " --client-only --delivery eager --anomaly fork",
                }
            ),
            details,
        };
        let mut shown = view.lock().unwrap_or_else(PoisonError::into_inner);
        shown.results.push(result);
        shown.playable = scenario
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
    }
}
