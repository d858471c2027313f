//! The overlays: help, the scenario picker, the "prove it" card and the knobs. One is open at a
//! time ([`Overlay`]); while it is, keys go to it. Help pauses what runs while the room reads it;
//! opening another overlay closes help first.

use super::App;
use crate::lab::Outcome;
use crate::scenario::{self, Scenario, ScenarioError};
use crate::tui::knobs::{Apply, Knob, Knobs, Settings};
use crate::tui::panes::picker::PickerView;
use crate::tui::panes::proof::{ProofResult, ProofView};
use forkscope_core::Policy;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use strum::VariantArray as _;

/// What is open over the dashboard.
#[derive(Debug)]
pub(super) enum Overlay {
    /// Help, scrolled down `scroll` rows; `paused`: opening it paused what ran.
    Help {
        scroll: u16,
        paused: bool,
    },
    Picker(Picker),
    /// The policy picker, the `selected` row of [`Policy::ALL`] marked.
    Policies {
        selected: usize,
    },
    Proof(Proof),
    Knobs(Box<Knobs>),
}

/// The scenario files `p` lists, each loaded (or why it does not load).
#[derive(Debug)]
pub(super) struct Picker {
    files: Vec<PathBuf>,
    loaded: Vec<Result<Scenario, Arc<ScenarioError>>>,
    selected: usize,
}

/// A "prove it" check running or done, and the scenario of its counterexample.
#[derive(Debug)]
pub(super) struct Proof {
    view: Arc<Mutex<ProofView>>,
    scenario: Arc<Mutex<Option<String>>>,
}

impl Proof {
    /// The card as the check has it now.
    pub fn view(&self) -> ProofView {
        self.view
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl App {
    pub(super) fn help_open(&self) -> bool {
        matches!(self.overlay, Some(Overlay::Help { .. }))
    }

    /// Opens `overlay` over the dashboard, closing help first.
    pub(super) fn open(&mut self, overlay: Overlay) {
        self.set_help(false);
        self.overlay = Some(overlay);
    }

    /// Help pauses the lab, so nothing happens while the room reads it; closing it runs the
    /// lab again if help paused it.
    pub(super) fn set_help(&mut self, open: bool) {
        match (&self.overlay, open) {
            (Some(Overlay::Help { paused, .. }), false) => {
                let paused = *paused;
                self.overlay = None;
                if paused {
                    self.resume_paused();
                }
            }
            (Some(Overlay::Help { .. }), true) | (_, false) => {}
            (_, true) => {
                let paused = self.pause_running();
                self.overlay = Some(Overlay::Help { scroll: 0, paused });
                // Said, not only done: a room that sees the clock stop should know why.
                if paused {
                    self.say("the lab is paused while help is open; ? or Esc runs it again");
                }
            }
        }
    }

    /// Up, Down, PageUp and PageDown scroll help; other keys go on to the dashboard.
    pub(super) fn help_scrolled(&mut self, key: KeyEvent) -> bool {
        let Some(Overlay::Help { scroll, .. }) = &mut self.overlay else {
            return false;
        };
        let by = match key.code {
            KeyCode::Up => -1,
            KeyCode::Down => 1,
            KeyCode::PageUp => -10,
            KeyCode::PageDown => 10,
            _ => return false,
        };
        *scroll = scroll.saturating_add_signed(by).min(100);
        true
    }

    /// A key while the picker, the proof or the knobs are open.
    pub(super) async fn overlay_key(&mut self, key: KeyEvent) {
        match &self.overlay {
            Some(Overlay::Picker(_)) => self.picker_key(key).await,
            Some(Overlay::Policies { .. }) => self.policies_key(key).await,
            Some(Overlay::Proof(_)) => self.proof_key(key).await,
            Some(Overlay::Knobs(_)) => self.knobs_key(key).await,
            Some(Overlay::Help { .. }) | None => {}
        }
    }

    /// `o`: every policy, the one in force (compare: the middle lab's) selected.
    pub(super) fn open_policies(&mut self) {
        let shown = match self.labs.len() {
            3 => self.labs.get(1),
            _ => self.labs.first(),
        };
        let selected = shown
            .and_then(|lab| Policy::ALL.iter().position(|p| *p == lab.policy()))
            .unwrap_or(0);
        self.open(Overlay::Policies { selected });
    }

    async fn policies_key(&mut self, key: KeyEvent) {
        let Some(Overlay::Policies { selected }) = &mut self.overlay else {
            return;
        };
        let count = Policy::ALL.len();
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('o') => self.overlay = None,
            KeyCode::Up | KeyCode::Char('k') => *selected = (*selected + count - 1) % count,
            KeyCode::Down | KeyCode::Char('j') => *selected = (*selected + 1) % count,
            KeyCode::Enter => {
                let chosen = Policy::ALL[*selected];
                self.overlay = None;
                self.choose_policy(chosen).await;
            }
            _ => {}
        }
    }

    pub(super) fn open_picker(&mut self) {
        let picker = Picker::load(&self.scenario_dir);
        self.open(Overlay::Picker(picker));
    }

    async fn picker_key(&mut self, key: KeyEvent) {
        let Some(Overlay::Picker(picker)) = &mut self.overlay else {
            return;
        };
        let count = picker.files.len();
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('p') => self.overlay = None,
            KeyCode::Up | KeyCode::Char('k') if count > 0 => {
                picker.selected = (picker.selected + count - 1) % count
            }
            KeyCode::Down | KeyCode::Char('j') if count > 0 => {
                picker.selected = (picker.selected + 1) % count
            }
            KeyCode::Enter => {
                let chosen = picker.loaded.get(picker.selected).cloned();
                self.overlay = None;
                match chosen {
                    Some(Ok(s)) => {
                        if let Err(e) = self.play(s).await {
                            self.say(e.to_string());
                        }
                    }
                    Some(Err(e)) => self.say(e.to_string()),
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// Starts a bounded exhaustive check of the lab's policy (both in compare mode) on a
    /// blocking thread; the card shows its progress, then its verdict.
    pub(super) fn prove(&mut self) {
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
        self.open(Overlay::Proof(Proof { view, scenario }));
    }

    async fn proof_key(&mut self, key: KeyEvent) {
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('P') => self.overlay = None,
            KeyCode::Enter => {
                let text = match &self.overlay {
                    Some(Overlay::Proof(p)) => p
                        .scenario
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone(),
                    _ => None,
                };
                let Some(text) = text else { return };
                self.overlay = None;
                let path = Path::new("prove-it (forkscope check counterexample)");
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

    pub(super) fn open_knobs(&mut self) {
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
                Knob::VARIANTS
                    .iter()
                    .copied()
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
        self.open(Overlay::Knobs(Box::new(knobs)));
    }

    fn knobs(&mut self) -> Option<&mut Knobs> {
        match &mut self.overlay {
            Some(Overlay::Knobs(k)) => Some(k),
            _ => None,
        }
    }

    async fn knobs_key(&mut self, key: KeyEvent) {
        let Some(knobs) = self.knobs() else { return };
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('k') => self.overlay = None,
            KeyCode::Up | KeyCode::Char('K') => knobs.select(false),
            KeyCode::Down | KeyCode::Char('j') | KeyCode::Tab => knobs.select(true),
            KeyCode::Right | KeyCode::Char('+') | KeyCode::Char('=') => knobs.turn(true),
            KeyCode::Left | KeyCode::Char('-') => knobs.turn(false),
            KeyCode::Enter => self.apply_knobs().await,
            _ => {}
        }
    }

    /// Applies the overlay: live knobs as one [`crate::lab::Action::Tune`] to every lab
    /// (journalled like a key), start-time knobs by restarting the labs — unless a lab's
    /// policy refuses them.
    async fn apply_knobs(&mut self) {
        let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
        let apply = match &self.overlay {
            Some(Overlay::Knobs(knobs)) => knobs.apply(&self.options),
            _ => return,
        };
        match apply {
            Apply::Nothing => {
                self.overlay = None;
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
                    if let Some(k) = self.knobs() {
                        let edited = k.edited;
                        k.running = edited;
                        k.applied = true;
                        self.options.config = edited.config;
                        self.options.latency_ms = edited.latency_ms;
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
                    if let Some(k) = self.knobs() {
                        k.refused = Some(why);
                    }
                }
            }
            Apply::Restart(options) => {
                let Some(knobs) = self.knobs() else { return };
                let refused: Vec<String> = policies
                    .iter()
                    .filter_map(|p| knobs.refusal(*p).map(|e| format!("{p}: {e}")))
                    .collect();
                if !refused.is_empty() {
                    knobs.refused = Some(format!("refused: {}", refused.join("; ")));
                    return;
                }
                knobs.running = knobs.edited;
                knobs.applied = true;
                self.options = options.clone();
                self.replace_labs(&policies, options).await;
                self.say("labs restarted with the new knobs (their history starts afresh)");
            }
        }
    }
}

impl Picker {
    fn load(dir: &Path) -> Picker {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
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
            .map(|f| scenario::load(f).map_err(Arc::new))
            .collect();
        Picker {
            files,
            loaded,
            selected: 0,
        }
    }

    pub fn view(&self) -> PickerView {
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
                    (file, s.as_ref().map(|s| s.name.clone()).map_err(Arc::clone))
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

/// The dashboard's bounded checks: fenced explores every schedule to depth 10 (foreign GETs
/// included, deliveries interleaved); naive looks for the seed incident's shape — the lab
/// client's own steps, events arriving at once, a fork — so what it finds plays as a scenario.
fn prove_policies(
    policies: &[Policy],
    config: forkscope_core::LabConfig,
    view: &Mutex<ProofView>,
    scenario: &Mutex<Option<String>>,
) {
    use forkscope_core::model::{Bounds, Delivery, Limits};
    for &policy in policies {
        let (bounds, depth) = match policy {
            Policy::Fenced => (Bounds::default(), 10),
            // Unfenced policies: look for the seed incident's shape.
            _ => (
                Bounds {
                    streams: 3,
                    probes: false,
                    delivery: Delivery::Eager,
                    target: Some(forkscope_core::AnomalyKind::Fork),
                },
                8,
            ),
        };
        let limits = Limits {
            max_states: Some(300_000),
            ..Limits::up_to(depth)
        };
        let progress = |p: &forkscope_core::model::Progress| {
            view.lock().unwrap_or_else(PoisonError::into_inner).progress =
                Some((p.depth, p.distinct));
        };
        let checked = match crate::check::check(config, policy, bounds, limits, progress) {
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
            if let Ok(text) = crate::check::scenario_toml(config, &checked, counterexample) {
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
                    _ => " --client-only --delivery eager --anomaly fork",
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
