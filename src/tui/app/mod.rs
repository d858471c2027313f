//! Dashboard state and its event loop: keys in, actions to the labs, frames out when changed.
//! A scenario can play in it (paced by the person), and the whole session can be recorded.
//!
//! Updates and draws are apart. [`App::handle`] (a key, a click) and [`App::tick`] (the frame
//! deadline: take the labs' snapshots, keep a moment for time travel, pin evidence) change the
//! state and mark it dirty; [`App::draw`] only turns that state into a [`Screen`]. Time travel
//! ([`travel`]), the overlays ([`overlay`]), a scenario playing ([`playback`]) and the labs
//! themselves ([`labs`]) each have their own module.

mod labs;
mod overlay;
mod playback;
mod terminate;
mod travel;

use super::DashboardError;
use super::keys::{self, Command};
use super::log::LogRing;
use super::panes::event_card::{self, EventCard};
use super::panes::header;
use super::panes::lanes::{LaneSource, LanesDrawn, Zoom};
use super::theme::Theme;
use super::timeline::{Frozen, RUN_BUDGET};
use super::ui::{self, OverlayView, Screen};
use crate::lab::{Lab, LabOptions, Snapshot};
use crate::record::Recorder;
use crate::scenario::Scenario;
use crate::scenario::journal::Journal;
use forkscope_core::Policy;
use futures_util::StreamExt;
use labs::Evidence;
use overlay::Overlay;
use playback::Playback;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{
    Event, EventStream, KeyCode, KeyEvent, KeyEventKind, MouseButton, MouseEvent, MouseEventKind,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use travel::Travel;

/// The frame deadline: at most this often, and only when something changed.
const FRAME: Duration = Duration::from_millis(100);
const STATUS_SHOWN: Duration = Duration::from_secs(4);
const LOG_LINES: usize = 200;

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
    /// Compare mode's policies, two or three side by side (`--compare`): the dashboard starts
    /// in compare mode; `None`: one lab, and `m` compares naive and fenced.
    pub compare: Option<Vec<Policy>>,
    /// Bytes time travel may keep of the run (`None`: [`RUN_BUDGET`]); tests set a small one
    /// to see thinning without hours of data.
    pub run_budget: Option<usize>,
}

/// What the screen showed of the world outside the dashboard's own state at the last tick:
/// when it differs, the screen is dirty. (The dashboard's own state marks itself dirty.)
#[derive(Debug, PartialEq)]
struct Outside {
    /// Per lab; none while travelling: the past does not change.
    labs: Vec<LabSeen>,
    log: u64,
    /// A scenario's progress: steps done, finished, stopped, paused.
    playback: Option<(usize, bool, bool, bool)>,
    proof: Option<ProofSeen>,
}

/// A check's progress: the level reached (depth, states), results, whether it failed.
#[derive(Debug, PartialEq)]
struct ProofSeen {
    progress: Option<(usize, u64)>,
    results: usize,
    failed: bool,
}

/// What the screen shows of one lab's changes.
#[derive(Debug, PartialEq)]
struct LabSeen {
    entries: u64,
    exchanges: (usize, Option<forkscope_core::LabTime>),
    /// Lab time in the tenths the header shows.
    tenths: u64,
    paused: bool,
    speed: u64,
    /// A lab of replicas: what its replicas pane shows, hashed (a kill or a restart records no
    /// history of its own).
    replicas: Option<u64>,
}

#[derive(Debug)]
pub struct App {
    options: LabOptions,
    labs: Vec<Arc<Lab>>,
    /// What each lab showed at the last tick: the screen's present.
    live: Vec<Snapshot>,
    /// The policy to return to when compare mode ends.
    single_policy: Policy,
    /// The policies compare mode runs side by side (`m`).
    compare: Vec<Policy>,
    /// What was done since the labs started, for "save what I did" (`w`).
    journal: Journal,
    playback: Option<Playback>,
    overlay: Option<Overlay>,
    evidence: Evidence,
    travel: Travel,
    /// The condition the invariant panel explains (keys 1–5).
    explained: Option<forkscope_core::Condition>,
    /// In a lab of replicas, the replica the replica keys act on (A–D choose).
    replica: forkscope_core::ReplicaId,
    /// The replicas' setup while `L` has the labs run one server, to return to.
    parked_replicas: Option<crate::lab::ReplicaSetup>,
    /// The selected lane mark: panel, and absolute index among the track's marks.
    selected: Option<(usize, usize)>,
    zoom: Zoom,
    present: bool,
    hide_verdict: bool,
    status: Option<(String, Instant)>,
    /// Where each panel's lanes were last drawn, for the mouse.
    lanes_drawn: Vec<LanesDrawn>,
    /// The last frame showed the evidence card: Esc closes it first.
    card_drawn: bool,
    /// The terminal was below the dashboard's minimum at the last frame: keys other than quit
    /// do nothing (the screen only asks to be enlarged).
    too_small: bool,
    scenario_dir: PathBuf,
    save_dir: PathBuf,
    log: LogRing,
    theme: Theme,
    recorder: Option<(Arc<Mutex<Recorder>>, Instant)>,
    seen: Option<Outside>,
    /// Something on screen changed since the last frame.
    dirty: bool,
    quit: bool,
}

impl App {
    /// A dashboard ready to draw: its labs started (or the scenario's, playing).
    pub async fn new(start: Start, log: LogRing) -> Result<App, DashboardError> {
        let run_budget = start.run_budget.unwrap_or(RUN_BUDGET);
        let mut app = App {
            options: start.options.clone(),
            labs: Vec::new(),
            live: Vec::new(),
            single_policy: start.options.policy,
            compare: start
                .compare
                .clone()
                .unwrap_or_else(|| vec![Policy::Naive, Policy::Fenced]),
            journal: Journal::new(&start.options, &[start.options.policy]),
            playback: None,
            overlay: None,
            evidence: Evidence {
                pause_at_violation: start.pause_at_violation,
                ..Evidence::default()
            },
            travel: Travel::new(0, run_budget),
            explained: None,
            replica: super::panes::replicas::first(),
            parked_replicas: None,
            selected: None,
            zoom: Zoom::default(),
            present: start.present,
            hide_verdict: start.predict,
            status: None,
            lanes_drawn: Vec::new(),
            card_drawn: false,
            too_small: false,
            scenario_dir: start.scenario_dir,
            save_dir: start.save_dir,
            log,
            theme: Theme::from_env(),
            recorder: start.recorder.map(|r| (r, Instant::now())),
            seen: None,
            dirty: true,
            quit: false,
        };
        match start.scenario {
            Some(s) => app.play(s).await?,
            None if start.compare.is_some() => {
                let compare = app.compare.clone();
                app.replace_labs(&compare, start.options).await;
                app.travel.restart(compare.len());
            }
            None => {
                let lab = Lab::start(start.options).await?;
                app.labs.push(Arc::new(lab));
                app.travel.restart(1);
            }
        }
        app.tick();
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

    /// Whether an overlay (help, the picker, the proof, the knobs) is up.
    pub fn overlay_open(&self) -> bool {
        self.overlay.is_some()
    }

    /// Time travel's position: the moment shown and how many there are; `None` when live.
    pub fn travelling(&self) -> Option<(usize, usize)> {
        self.travel.at.map(|i| (i, self.travel.timeline.len()))
    }

    /// What time travel keeps of the run, in estimated bytes (see [`super::weight`]).
    pub fn kept_bytes(&self) -> usize {
        self.travel.timeline.weight()
    }

    /// The moments time travel can go to.
    pub fn kept_moments(&self) -> usize {
        self.travel.timeline.len()
    }

    /// Whether the screen shows something the last frame did not.
    pub fn needs_draw(&self) -> bool {
        self.dirty
    }

    /// One terminal event: a key press, a click on the lanes; the rest is ignored.
    pub async fn handle(&mut self, event: Event) {
        match event {
            Event::Key(key) if key.kind == KeyEventKind::Press => {
                self.dirty = true;
                self.key(key).await;
            }
            Event::Mouse(MouseEvent {
                kind: MouseEventKind::Down(MouseButton::Left),
                column,
                row,
                ..
            }) => {
                self.dirty = true;
                self.click(column, row);
            }
            Event::Resize(..) => self.dirty = true,
            _ => {}
        }
    }

    /// The frame deadline: lets an old status line go, takes each lab's snapshot (the present
    /// the screen shows), keeps a moment for time travel when something happened, pins the
    /// evidence; marks the screen dirty when any of it changed what it shows.
    pub fn tick(&mut self) {
        if self
            .status
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() > STATUS_SHOWN)
        {
            self.status = None;
            self.dirty = true;
        }
        let outside = self.outside();
        if self.seen.as_ref() != Some(&outside) {
            self.dirty = true;
            self.seen = Some(outside);
        }
        // Travelling, the screen shows the past: the labs are left alone.
        if self.travel.at.is_some() {
            return;
        }
        self.live = self.labs.iter().map(|l| l.snapshot()).collect();
        let changes = self.changes(&self.live);
        self.travel.record(&self.labs, &self.live, changes);
        let live = std::mem::take(&mut self.live);
        self.pin_evidence(&live);
        self.live = live;
    }

    /// What the screen shows of the labs, the log and the tasks, now.
    fn outside(&self) -> Outside {
        let labs = match self.travel.at {
            Some(_) => Vec::new(),
            None => self
                .labs
                .iter()
                .map(|lab| {
                    let clock = lab.clock();
                    // Read apart: the core's lock must be let go before `replicas_seen` takes it.
                    let entries = lab.core().history.total();
                    LabSeen {
                        entries,
                        exchanges: lab.exchanges().fingerprint(),
                        tenths: clock.now().as_millis() / 100,
                        paused: clock.paused(),
                        speed: clock.speed().to_bits(),
                        replicas: replicas_seen(lab),
                    }
                })
                .collect(),
        };
        Outside {
            labs,
            log: self.log.version(),
            playback: self.playback.as_ref().map(|p| {
                let n = p.narration();
                (n.done, n.finished, n.error.is_some(), n.paused)
            }),
            proof: match &self.overlay {
                Some(Overlay::Proof(p)) => {
                    let view = p.view();
                    Some(ProofSeen {
                        progress: view.progress,
                        results: view.results.len(),
                        failed: view.error.is_some(),
                    })
                }
                _ => None,
            },
        }
    }

    async fn event_loop<B: Backend>(
        &mut self,
        terminal: &mut Terminal<B>,
    ) -> Result<(), DashboardError> {
        let mut events = EventStream::new();
        let mut frame = tokio::time::interval(FRAME);
        frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut terminate = terminate::sigterm();
        while !self.quit {
            self.tick();
            if self.dirty {
                self.draw(terminal)?;
                self.record_frame();
            }
            tokio::select! {
                _ = frame.tick() => {}
                event = events.next() => match event {
                    Some(Ok(event)) => self.handle(event).await,
                    Some(Err(e)) => return Err(DashboardError::Terminal(e)),
                    None => self.quit = true,
                },
                () = terminate.as_mut() => self.quit = true,
            }
        }
        Ok(())
    }

    /// Draws what the state holds: the present as the last tick took it or, travelling, the
    /// moment chosen. Reads no lab.
    pub fn draw<B: Backend>(&mut self, terminal: &mut Terminal<B>) -> Result<(), DashboardError> {
        if let Ok(size) = terminal.size() {
            self.too_small = size.width < ui::MIN_WIDTH || size.height < ui::MIN_HEIGHT;
        }
        let timeline = &self.travel.timeline;
        let (panels, ends): (Vec<Snapshot>, Vec<(usize, usize)>) =
            match self.travel.at.and_then(|i| timeline.moment(i)) {
                Some(moment) => (
                    moment.panels.iter().map(Frozen::shown).collect(),
                    moment
                        .panels
                        .iter()
                        .map(|f| (f.entries, f.placed))
                        .collect(),
                ),
                None => (
                    self.live.clone(),
                    timeline.tracks.iter().map(|t| t.ends()).collect(),
                ),
            };
        let sources: Vec<LaneSource> = panels
            .iter()
            .zip(&ends)
            .zip(&timeline.tracks)
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
            let track = timeline.tracks.get(p)?;
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
        let narration = self.playback.as_ref().map(Playback::narration);
        let picker;
        let proof;
        let overlay = match &self.overlay {
            None => None,
            Some(Overlay::Help { scroll, .. }) => Some(OverlayView::Help { scroll: *scroll }),
            Some(Overlay::Picker(p)) => {
                picker = p.view();
                Some(OverlayView::Picker(&picker))
            }
            Some(Overlay::Proof(p)) => {
                proof = p.view();
                Some(OverlayView::Proof(&proof))
            }
            Some(Overlay::Knobs(k)) => Some(OverlayView::Knobs(k)),
            Some(Overlay::Policies { selected }) => Some(OverlayView::Policies {
                selected: *selected,
            }),
        };
        let screen = Screen {
            panels: &panels,
            log: &log,
            status: self.status.as_ref().map(|(s, _)| s.as_str()),
            theme: self.theme,
            narration: narration.as_ref(),
            overlay,
            evidence: self.evidence.shown(),
            lanes: &sources,
            travel: self.travel.at.map(|moment| header::Travel {
                moment,
                moments: timeline.len(),
            }),
            reach: timeline.reach(),
            event: event.as_ref(),
            present: self.present,
            hide_verdict: self.hide_verdict,
            explained: self.explained,
            replica: self.replica,
        };
        let frame_lock = super::TERMINAL
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut drawn = ui::Drawn::default();
        terminal
            .draw(|frame| drawn = ui::draw(frame, &screen))
            .map_err(|e| DashboardError::Terminal(std::io::Error::other(e.to_string())))?;
        drop(frame_lock);
        self.lanes_drawn = drawn.lanes;
        self.card_drawn = drawn.evidence;
        self.dirty = false;
        Ok(())
    }

    /// `--record`: what the terminal was just sent becomes a frame of the asciicast, marked at
    /// the first violation.
    fn record_frame(&self) {
        let Some((recorder, started)) = &self.recorder else {
            return;
        };
        let at = started.elapsed().as_secs_f64();
        let mut recorder = recorder.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = recorder.frame(at);
        if let Some(bad) = self.live.iter().find(|p| !p.view.verdict.clean) {
            let _ = recorder.mark_first_violation(at, &bad.view.verdict.headline);
        }
    }

    fn say(&mut self, status: impl Into<String>) {
        self.status = Some((status.into(), Instant::now()));
        self.dirty = true;
    }

    async fn key(&mut self, key: KeyEvent) {
        // Ctrl-C quits from anywhere: over an overlay, in help, on a too-small screen. A
        // person pressing it wants out, not the overlay's meaning of `c`.
        if keys::is_interrupt(key) {
            self.quit = true;
            return;
        }
        if self.too_small {
            if keys::command_for(key) == Some(Command::Quit) {
                self.quit = true;
            }
            return;
        }
        if self.help_scrolled(key) {
            return;
        }
        if matches!(
            self.overlay,
            Some(
                Overlay::Picker(_)
                    | Overlay::Proof(_)
                    | Overlay::Knobs(_)
                    | Overlay::Policies { .. },
            )
        ) {
            return self.overlay_key(key).await;
        }
        // Enter dismisses the card on top: the selected event's, else the evidence.
        if key.code == KeyCode::Enter && self.selected.take().is_some() {
            return;
        }
        if key.code == KeyCode::Enter && self.evidence.shown().is_some() {
            self.evidence.dismissed = true;
            return;
        }
        // Esc closes what is open, one thing at a time, before it quits.
        if key.code == KeyCode::Esc && !self.help_open() {
            if self.selected.take().is_some() || self.explained.take().is_some() {
                return;
            }
            // The evidence card on screen is a card too: Esc pressed to close it must not quit.
            if self.card_drawn && self.evidence.shown().is_some() {
                self.evidence.dismissed = true;
                return;
            }
            if self.travel.at.is_some() {
                return self.go_live();
            }
        }
        let Some(command) = keys::command_for(key) else {
            return;
        };
        self.command(command).await;
    }

    /// What a key asks for, outside the overlays.
    async fn command(&mut self, command: Command) {
        use super::timeline::Jump;
        match command {
            Command::Quit if self.help_open() => self.set_help(false),
            Command::Quit => self.quit = true,
            Command::ToggleHelp => self.set_help(!self.help_open()),
            Command::ToggleCompare => self.toggle_compare().await,
            Command::NextPolicy => self.next_policy().await,
            Command::OpenPicker => self.open_picker(),
            Command::PickPolicy => self.open_policies(),
            Command::Prove => self.prove(),
            Command::Travel(Jump::FirstViolation) => self.step_violation(),
            Command::Explain(n) => {
                let asked = forkscope_core::Condition::ALL
                    .get(usize::from(n) - 1)
                    .copied();
                self.explained = if self.explained == asked { None } else { asked };
            }
            Command::Travel(jump) => self.travel_to(jump),
            Command::Live => self.go_live(),
            Command::Select(direction) => self.select_and_hold(direction).await,
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
            Command::ToggleReplicas => self.toggle_replicas().await,
            Command::NextRevision => self.next_revision().await,
            Command::PickReplica(index) => self.pick_replica(index),
            Command::Replica(key) => {
                let action = self.replica_action(key);
                self.lab_action(action).await;
            }
            Command::SaveScenario => self.save_scenario(),
            Command::Lab(action) => self.lab_action(action).await,
        }
    }
}

/// What a lab's replicas pane shows, as a hash: it changes when a replica is killed, started,
/// partitioned or healed, sends, or the store's records move.
fn replicas_seen(lab: &Lab) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let view = lab.replicas_view()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{view:?}").hash(&mut h);
    Some(h.finish())
}
