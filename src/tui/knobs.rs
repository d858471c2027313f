//! The knobs overlay (`k`): the lab's settings as a short list a person turns with the arrow
//! keys. Live knobs (grace window, retry budget and backoff, replay buffer) become an
//! [`Action::Tune`] — the same action a scenario's `set` step is — so the change is checked by
//! the core exactly as a configuration at start is (fenced refuses a broken condition 5). The
//! rest (background rate, the tool call, identity) shape a lab at start: applying them restarts
//! the labs with the new options.

use crate::lab::{Action, LabOptions};
use forkscope_core::EmitRate;
use forkscope_core::{LabConfig, Policy, StreamIdentity, Tuning};
use strum::VariantArray as _;

/// One knob: what it is called, the values the arrows step through, and whether it applies
/// live or at a restart. The overlay lists them in declaration order ([`Knob::VARIANTS`]); the
/// label is the knob's name on the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
pub enum Knob {
    #[strum(serialize = "grace window (ms)")]
    GraceMs,
    #[strum(serialize = "client retry budget (ms)")]
    RetryBudgetMs,
    #[strum(serialize = "first backoff (ms)")]
    InitialBackoffMs,
    #[strum(serialize = "longest backoff (ms)")]
    MaxBackoffMs,
    #[strum(serialize = "replay buffer (events/stream)")]
    ReplayBuffer,
    #[strum(serialize = "added link latency (ms, each way)")]
    LatencyMs,
    #[strum(serialize = "background emit every (ms)")]
    BackgroundEveryMs,
    #[strum(serialize = "tool call steps")]
    ToolSteps,
    #[strum(serialize = "tool call step delay (ms)")]
    ToolDelayMs,
    #[strum(serialize = "stream identity (fenced)")]
    Identity,
}

impl Knob {
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Applies while the lab runs; otherwise the labs restart with it.
    pub fn live(self) -> bool {
        matches!(
            self,
            Knob::GraceMs
                | Knob::RetryBudgetMs
                | Knob::InitialBackoffMs
                | Knob::MaxBackoffMs
                | Knob::ReplayBuffer
                | Knob::LatencyMs
        )
    }

    fn ladder(self) -> &'static [u64] {
        match self {
            Knob::GraceMs => &[
                0, 250, 500, 1_000, 2_000, 3_000, 5_000, 8_000, 10_000, 12_000, 14_000, 15_000,
                20_000, 30_000, 45_000,
            ],
            Knob::RetryBudgetMs => &[1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 30_000, 60_000],
            Knob::InitialBackoffMs => &[50, 100, 250, 500, 1_000, 2_000],
            Knob::MaxBackoffMs => &[250, 500, 1_000, 2_000, 5_000, 10_000],
            Knob::ReplayBuffer => &[4, 8, 16, 32, 64, 128, 256, 1_024, 4_096],
            Knob::LatencyMs => &[0, 5, 20, 50, 100, 250, 500, 1_000],
            // 0: no background task; emits only on `e`.
            Knob::BackgroundEveryMs => &[0, 100, 250, 500, 700, 1_000, 2_000, 5_000],
            Knob::ToolSteps => &[1, 2, 4, 8, 16, 25, 50, 100],
            Knob::ToolDelayMs => &[0, 50, 100, 200, 400, 800, 1_500],
            Knob::Identity => &[0, 1],
        }
    }
}

/// The settings the overlay edits, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub config: LabConfig,
    /// 0: no background task.
    pub background_every_ms: u64,
    pub tool_steps: u64,
    pub tool_delay_ms: u64,
    /// Real milliseconds the fault proxy adds, each way.
    pub latency_ms: u64,
}

impl Settings {
    /// What a lab started with `options` runs with now: `config` and `latency_ms` as turned.
    pub fn of(options: &LabOptions, config: LabConfig, latency_ms: u64) -> Settings {
        Settings {
            config,
            latency_ms,
            background_every_ms: options.background.map_or(0, |r| r.interval_ms()),
            tool_steps: options.tool_steps,
            tool_delay_ms: options.tool_delay_ms,
        }
    }

    pub fn get(&self, knob: Knob) -> u64 {
        let c = &self.config;
        match knob {
            Knob::GraceMs => c.grace_ms,
            Knob::RetryBudgetMs => c.retry.budget_ms,
            Knob::InitialBackoffMs => c.retry.initial_backoff_ms,
            Knob::MaxBackoffMs => c.retry.max_backoff_ms,
            Knob::ReplayBuffer => c.replay_buffer as u64,
            Knob::LatencyMs => self.latency_ms,
            Knob::BackgroundEveryMs => self.background_every_ms,
            Knob::ToolSteps => self.tool_steps,
            Knob::ToolDelayMs => self.tool_delay_ms,
            Knob::Identity => u64::from(c.identity == StreamIdentity::TokenHeader),
        }
    }

    fn set(&mut self, knob: Knob, value: u64) {
        let c = &mut self.config;
        match knob {
            Knob::GraceMs => c.grace_ms = value,
            Knob::RetryBudgetMs => c.retry.budget_ms = value,
            Knob::InitialBackoffMs => c.retry.initial_backoff_ms = value,
            Knob::MaxBackoffMs => c.retry.max_backoff_ms = value,
            Knob::ReplayBuffer => c.replay_buffer = value as usize,
            Knob::LatencyMs => self.latency_ms = value,
            Knob::BackgroundEveryMs => self.background_every_ms = value,
            Knob::ToolSteps => self.tool_steps = value,
            Knob::ToolDelayMs => self.tool_delay_ms = value,
            Knob::Identity => {
                c.identity = if value == 1 {
                    StreamIdentity::TokenHeader
                } else {
                    StreamIdentity::EventId
                }
            }
        }
    }

    /// How a knob's value reads on screen.
    pub fn shown(&self, knob: Knob) -> String {
        match knob {
            Knob::Identity => self.config.identity.name().to_owned(),
            Knob::BackgroundEveryMs if self.background_every_ms == 0 => "off (e only)".into(),
            _ => self.get(knob).to_string(),
        }
    }

    /// Moves `knob` one rung up (`up`) or down its ladder; a value between rungs moves to the
    /// next rung that way.
    pub fn step(&mut self, knob: Knob, up: bool) {
        let now = self.get(knob);
        let ladder = knob.ladder();
        let next = if up {
            ladder.iter().copied().find(|v| *v > now)
        } else {
            ladder.iter().rev().copied().find(|v| *v < now)
        };
        if let Some(value) = next {
            self.set(knob, value);
        }
    }

    /// The options a restarted lab takes: `base` with these settings.
    pub fn options(&self, base: &LabOptions) -> LabOptions {
        LabOptions {
            config: self.config,
            background: (self.background_every_ms > 0)
                .then(|| EmitRate::every_ms(self.background_every_ms)),
            tool_steps: self.tool_steps,
            tool_delay_ms: self.tool_delay_ms,
            latency_ms: self.latency_ms,
            ..base.clone()
        }
    }
}

/// The overlay's state: what the labs run with, what the person turned it to, the knob
/// selected, and the last refusal.
#[derive(Clone, Debug, PartialEq)]
pub struct Knobs {
    pub running: Settings,
    pub edited: Settings,
    pub selected: usize,
    /// Why the last apply was refused (the core's sentence).
    pub refused: Option<String>,
    /// The last Enter took effect (until the next turn).
    pub applied: bool,
}

/// What applying the overlay asks of the dashboard.
#[derive(Clone, Debug)]
pub enum Apply {
    Nothing,
    /// Turn the live knobs: these actions to every lab.
    Live(Vec<Action>),
    /// Restart the labs with these options (after the live knobs, if any).
    Restart(LabOptions),
}

impl Knobs {
    pub fn new(running: Settings) -> Knobs {
        Knobs {
            running,
            edited: running,
            selected: 0,
            refused: None,
            applied: false,
        }
    }

    pub fn knob(&self) -> Knob {
        Knob::VARIANTS[self.selected]
    }

    pub fn select(&mut self, down: bool) {
        let n = Knob::VARIANTS.len();
        self.selected = (self.selected + if down { 1 } else { n - 1 }) % n;
    }

    pub fn turn(&mut self, up: bool) {
        let knob = self.knob();
        self.edited.step(knob, up);
        self.refused = None;
        self.applied = false;
    }

    /// Knobs that differ from what the labs run with.
    pub fn changed(&self) -> Vec<Knob> {
        Knob::VARIANTS
            .iter()
            .copied()
            .filter(|k| self.edited.get(*k) != self.running.get(*k))
            .collect()
    }

    /// Condition 5 with the edited values: fenced refuses it broken, naive runs it (red).
    pub fn condition_five_holds(&self) -> bool {
        self.edited.config.grace_shorter_than_retry_budget()
    }

    /// What the check at start would say of the edited values under `policy`.
    pub fn refusal(&self, policy: Policy) -> Option<String> {
        self.edited
            .config
            .validate(policy)
            .err()
            .map(|e| e.to_string())
    }

    /// What applying asks for: a restart if a start-time knob changed (it carries every
    /// change), else the live tuning.
    pub fn apply(&self, base: &LabOptions) -> Apply {
        let changed = self.changed();
        if changed.is_empty() {
            Apply::Nothing
        } else if changed.iter().any(|k| !k.live()) {
            Apply::Restart(self.edited.options(base))
        } else {
            let tuning = Tuning::between(&self.running.config, &self.edited.config);
            let mut actions = Vec::new();
            if !tuning.is_empty() {
                actions.push(Action::Tune(tuning));
            }
            if self.edited.latency_ms != self.running.latency_ms {
                actions.push(Action::AddLatency(self.edited.latency_ms));
            }
            Apply::Live(actions)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs() -> Knobs {
        let options = LabOptions::default();
        Knobs::new(Settings::of(&options, options.config, 0))
    }

    #[test]
    fn arrows_step_through_the_ladder_and_stop_at_its_ends() {
        let mut k = knobs();
        assert_eq!(k.knob(), Knob::GraceMs);
        assert_eq!(k.edited.get(Knob::GraceMs), 5_000);
        k.turn(true);
        assert_eq!(k.edited.get(Knob::GraceMs), 8_000);
        for _ in 0..20 {
            k.turn(true);
        }
        assert_eq!(k.edited.get(Knob::GraceMs), 45_000, "the top rung holds");
        k.select(false);
        assert_eq!(k.knob(), Knob::Identity, "selection wraps");
        k.turn(true);
        assert_eq!(k.edited.shown(Knob::Identity), "token header");
    }

    #[test]
    fn live_knobs_tune_and_start_time_knobs_restart() {
        let mut k = knobs();
        assert!(matches!(k.apply(&LabOptions::default()), Apply::Nothing));
        k.turn(true); // grace 8 s
        match k.apply(&LabOptions::default()) {
            Apply::Live(actions) => assert_eq!(
                actions,
                vec![Action::Tune(Tuning {
                    grace_ms: Some(8_000),
                    ..Tuning::default()
                })]
            ),
            other => panic!("{other:?}"),
        }
        k.selected = Knob::VARIANTS
            .iter()
            .position(|k| *k == Knob::ToolSteps)
            .unwrap();
        k.turn(true); // 16 steps
        match k.apply(&LabOptions::default()) {
            Apply::Restart(options) => {
                assert_eq!(options.tool_steps, 16);
                assert_eq!(
                    options.config.grace_ms, 8_000,
                    "a restart carries every change"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_grace_window_past_the_retry_budget_is_refused_by_fenced_only() {
        let mut k = knobs();
        while k.condition_five_holds() {
            k.turn(true);
        }
        assert!(k.refusal(Policy::Fenced).unwrap().contains("condition 5"));
        assert_eq!(k.refusal(Policy::Naive), None);
    }
}
