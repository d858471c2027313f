//! Dashboard state and its event loop: keys in, actions to the labs, frames out when changed.
//! A scenario can play in it (paced by the person), and the whole session can be recorded.

use super::DashboardError;
use super::keys::{self, Command};
use super::log::LogRing;
use super::panes::evidence::{self, EvidenceView};
use super::panes::narration::Narration;
use super::panes::picker::PickerView;
use super::panes::proof::{ProofResult, ProofView};
use super::theme::Theme;
use super::ui::{self, Screen};
use crate::lab::{Action, Lab, LabOptions, Outcome, Snapshot};
use crate::record::Recorder;
use crate::scenario::player::{self, Gate, Pace};
use crate::scenario::{self, Scenario};
use forkscope_core::Policy;
use futures_util::StreamExt;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind};
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
    pub recorder: Option<Arc<Mutex<Recorder>>>,
    /// Pause the labs at the first violation, with the evidence card up (for presenters).
    pub pause_at_violation: bool,
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
    help: bool,
    status: Option<(String, Instant)>,
    log: LogRing,
    theme: Theme,
    recorder: Option<(Arc<Mutex<Recorder>>, Instant)>,
    /// The policy to return to when compare mode ends.
    single_policy: Policy,
    quit: bool,
}

impl App {
    pub async fn run<B: Backend>(
        start: Start,
        log: LogRing,
        terminal: &mut Terminal<B>,
    ) -> Result<(), DashboardError> {
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
            help: false,
            status: None,
            log,
            theme: Theme::from_env(),
            recorder: start.recorder.map(|r| (r, Instant::now())),
            single_policy: start.options.policy,
            quit: false,
        };
        match start.scenario {
            Some(s) => app.play(s).await?,
            None => {
                let lab = Lab::start(start.options).await?;
                app.labs.push(Arc::new(lab));
            }
        }
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
        app.stop_labs().await;
        result
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
                    Some(Ok(Event::Key(key))) if key.kind == KeyEventKind::Press => {
                        self.key(key).await;
                        force = true;
                    }
                    Some(Ok(Event::Resize(_, _))) => force = true,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(DashboardError::Terminal(e)),
                    None => self.quit = true,
                },
                () = terminate.as_mut() => self.quit = true,
            }
        }
        Ok(())
    }

    fn draw<B: Backend>(&mut self, terminal: &mut Terminal<B>) -> Result<(), DashboardError> {
        if self
            .status
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() > STATUS_SHOWN)
        {
            self.status = None;
        }
        let panels: Vec<Snapshot> = self.labs.iter().map(|l| l.snapshot()).collect();
        self.pin_evidence(&panels);
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
        };
        let _frame = super::TERMINAL
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        terminal
            .draw(|frame| ui::draw(frame, &screen))
            .map_err(|e| DashboardError::Terminal(std::io::Error::other(e.to_string())))?;
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
    fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for lab in &self.labs {
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
            self.status.is_some(),
            self.picker.as_ref().map(|p| p.selected),
        )
            .hash(&mut h);
        h.finish()
    }

    /// Pins the first violation (or, until one happens, the first typed rejection) in the
    /// evidence card; with `pause_at_violation`, pauses the labs on a violation.
    fn pin_evidence(&mut self, panels: &[Snapshot]) {
        if self.evidence_dismissed || self.evidence.as_ref().is_some_and(|e| e.violation) {
            return;
        }
        let found = panels
            .iter()
            .filter_map(evidence::of)
            .max_by_key(|e| e.violation);
        let Some(mut found) = found else { return };
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
        if self.picker.is_some() {
            return self.picker_key(key).await;
        }
        if self.proof.is_some() {
            return self.proof_key(key).await;
        }
        if key.code == KeyCode::Enter && self.evidence.is_some() && !self.evidence_dismissed {
            self.evidence_dismissed = true;
            return;
        }
        let Some(command) = keys::command_for(key) else {
            return;
        };
        match command {
            Command::Quit if self.help => self.help = false,
            Command::Quit => self.quit = true,
            Command::ToggleHelp => self.help = !self.help,
            Command::ToggleCompare => self.toggle_compare().await,
            Command::OpenPicker => self.picker = Some(Picker::load(&self.scenario_dir)),
            Command::Prove => self.prove(),
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
                let mut restart = false;
                for lab in &self.labs {
                    restart |= lab.apply(action) == Outcome::RestartRequested;
                }
                if restart {
                    let policies: Vec<Policy> =
                        self.labs.iter().map(|l| l.options().policy).collect();
                    self.replace_labs(&policies, self.options.clone()).await;
                    self.say("lab restarted");
                } else {
                    self.say(action.describe());
                }
            }
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
                n.error = result.err();
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
        // New labs, new evidence.
        self.evidence = None;
        self.evidence_dismissed = false;
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
    use forkscope_core::model::{Bounds, Delivery};
    for &policy in policies {
        let bounds = match policy {
            Policy::Fenced => Bounds {
                depth: 10,
                streams: 3,
                max_states: Some(300_000),
                probes: true,
                delivery: Delivery::Interleaved,
                target: None,
            },
            Policy::Naive => Bounds {
                depth: 8,
                streams: 3,
                max_states: Some(300_000),
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
                view.lock().unwrap_or_else(PoisonError::into_inner).error = Some(e);
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
