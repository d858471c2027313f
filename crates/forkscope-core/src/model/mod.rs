//! The exhaustive explorer behind `forkscope check`: every interleaving of the lab's steps up
//! to a bound, run on the core's own code (the same [`Sim`], server, client and checker the
//! lab uses — not a re-model), breadth-first, so the first anomaly found has a shortest
//! schedule.
//!
//! States are deduplicated by a canonical form ([`crate::canon`]) that forgets the names chance
//! gave them, so states alike up to renaming are explored once. A small breadth-first search of
//! our own rather than a checker crate: the core's state is plain data that clones, the
//! alphabet is a dozen steps, and what the search must report (a shortest schedule, replayable
//! over sockets and narrated in the checker's words) needs the core's own types throughout.
//!
//! A state found costs the search a fingerprint and a link, never a whole lab: a level is
//! rebuilt by replaying schedules when it is expanded ([`tree`]), on as many threads as it is
//! given, with the result the same on any number ([`search`]).

pub mod memory;
mod reached;
pub mod replicas;
pub mod requests;
mod search;
mod server;
mod step;
mod trace;
mod tree;

pub use memory::{ByteSize, ByteSizeError, DEFAULT_MEMORY_BUDGET};
pub use search::{DEFAULT_TIME_BUDGET_SECS, Limits, Progress};
pub use step::{GARBAGE_TOKEN, ProbeGet, Step};
pub use trace::{TraceStep, said_of, trace};

use crate::config::{ConfigError, LabConfig, RetryConfig};
use crate::history::{Anomaly, AnomalyKind};
use crate::policy::Policy;
use crate::sim::{Sim, ToolSpec};
use serde::Serialize;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

/// What the single-server model explores besides the [`Limits`]: its alphabet and its
/// judgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Bounds {
    /// Streams a session may mint (standalone and tool calls); a schedule that would mint
    /// more is not followed.
    pub streams: u32,
    /// Foreign GETs ([`Step::Probe`]) are tried too; without them only the lab client's own
    /// steps, the network's faults and the timers are (the seed incident's cast).
    pub probes: bool,
    /// How events reach the client.
    pub delivery: Delivery,
    /// Stop only at a schedule that ends in this kind of anomaly (others are explored past).
    pub target: Option<AnomalyKind>,
}

/// How events in flight reach the client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Each delivery is a step of its own, so any step can come between an event's write and
    /// its arrival (a slow network; an event still in flight when a connection drops is lost).
    #[default]
    Interleaved,
    /// Every event arrives as soon as it is written, as on loopback: what `forkscope run`
    /// replays faithfully.
    Eager,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            streams: 3,
            probes: true,
            delivery: Delivery::Interleaved,
            target: None,
        }
    }
}

/// The lab configuration the explorer runs: the lab's defaults with short timers and a small
/// replay buffer, so grace expiry, giving up and eviction are all a few steps away.
pub fn config() -> LabConfig {
    LabConfig {
        grace_ms: 1_000,
        retry: RetryConfig {
            initial_backoff_ms: 500,
            max_backoff_ms: 1_000,
            budget_ms: 2_500,
        },
        replay_buffer: 3,
        retention_ms: 2_500,
        session_idle_ms: 5_000,
        history_capacity: 16,
        ..LabConfig::default()
    }
}

/// The seed every explored lab starts from: tokens are drawn from it, and replaying a schedule
/// from it reproduces the very states the search saw.
pub const SEED: u64 = 0x5eed_f0c5;

/// One level of the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Level {
    pub depth: usize,
    /// States first reached at this depth.
    pub new_states: u64,
    /// Distinct states so far.
    pub distinct: u64,
    /// Steps taken so far (each enabled step from each state).
    pub transitions: u64,
    /// Every schedule of this depth was explored (no limit cut the level short).
    pub complete: bool,
}

/// A limit that stopped a search before its depth bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum Limit {
    /// Keeping one more state would have taken the estimate past the budget.
    MemoryBudget { budget: ByteSize },
    /// The search held `max_states` distinct states.
    StateLimit { max_states: u64 },
    /// The caller's clock passed the budget.
    TimeBudget { secs: u64 },
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::MemoryBudget { budget } => write!(f, "memory budget {budget}"),
            Limit::StateLimit { max_states } => write!(f, "state limit {max_states}"),
            Limit::TimeBudget { secs } => write!(f, "time budget of {secs} s"),
        }
    }
}

/// Where and why a search stopped short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Stopped {
    #[serde(flatten)]
    pub limit: Limit,
    /// The depth being explored when the limit was reached: every shorter schedule was
    /// explored in full.
    pub at_depth: usize,
}

/// What a search found: `S` is the model's step, `R` what it explored besides the limits
/// ([`Bounds`] for one server, [`replicas::Params`] for the replica lab).
#[derive(Clone, Debug, Serialize)]
pub struct Exploration<S = Step, R = Bounds> {
    pub policy: Policy,
    pub rules: R,
    pub limits: Limits,
    /// Threads the search ran on.
    pub workers: usize,
    /// Steps taken: each enabled step from each distinct state.
    pub transitions: u64,
    /// Distinct states (up to renaming), the initial one included.
    pub distinct: u64,
    /// Successors not followed because they minted more streams than the bound.
    pub pruned: u64,
    /// The deepest level entered (in full, or cut short by a limit, or where the
    /// counterexample was found).
    pub depth_reached: usize,
    /// Every schedule up to this depth was explored; without a counterexample, every one holds.
    pub proven_depth: usize,
    /// Every state up to the bound was explored (no limit cut it short). `exhausted` when no
    /// new state appeared before the depth bound: the whole reachable space.
    pub complete: bool,
    pub exhausted: bool,
    /// The limit that cut the search short, if one did.
    pub stopped: Option<Stopped>,
    /// The most memory the search held at once, estimated as the budget is.
    pub estimated_peak: ByteSize,
    pub levels: Vec<Level>,
    /// What the explored steps made happen, each with how many steps did: evidence the search
    /// reached the decisions it is meant to test.
    pub reached: BTreeMap<String, u64>,
    pub counterexample: Option<Counterexample<S>>,
}

/// `1,234,567`: how a verdict and a report write a count.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl<S, R> Exploration<S, R> {
    /// One sentence: the verdict.
    pub fn verdict(&self) -> String {
        match &self.counterexample {
            Some(c) => format!(
                "counterexample in {} steps: {}",
                c.steps.len(),
                c.anomaly.kind()
            ),
            None if self.complete => format!(
                "no fork, duplicate, gap, drift, loss or reused id in {} states up to depth {}{}",
                thousands(self.distinct),
                self.depth_reached,
                if self.exhausted {
                    " (every reachable state)"
                } else {
                    ""
                }
            ),
            None => match self.stopped {
                Some(Stopped { limit, at_depth }) if self.proven_depth == 0 => format!(
                    "nothing proven: the {limit} was reached at depth {at_depth}, before any \
                     depth was explored in full"
                ),
                Some(Stopped { limit, at_depth }) => format!(
                    "every schedule up to depth {} holds: no fork, duplicate, gap, drift, loss or \
                     reused id in {} states ({limit} reached at depth {at_depth})",
                    self.proven_depth,
                    thousands(self.distinct)
                ),
                // `complete` is false only when a limit stopped the search.
                None => format!(
                    "no anomaly in the {} states explored, to depth {}",
                    thousands(self.distinct),
                    self.depth_reached
                ),
            },
        }
    }
}

/// A shortest schedule that breaks the invariant.
#[derive(Clone, Debug, Serialize)]
pub struct Counterexample<S = Step> {
    pub steps: Vec<S>,
    /// The first anomaly the checker named, in its words.
    pub anomaly: Anomaly,
    /// Found by ending the run after the last step, where nothing more happens on its own: an
    /// obligation no step will deliver (lost, call lost, undelivered). A replay ends the same
    /// way once its lab is quiet.
    pub ends_run: bool,
}

/// What `progress_task` does in the explored lab: two progress steps, then the result.
pub const TOOL: ToolSpec = ToolSpec {
    steps: 2,
    delay_ms: 300,
};

/// Takes `step`, then, under eager delivery, delivers everything in flight.
pub fn take(step: Step, sim: &mut Sim, delivery: Delivery) {
    step.apply(sim);
    if delivery == Delivery::Eager {
        deliver_everything(sim);
    }
}

fn deliver_everything(sim: &mut Sim) {
    sim.deliver_all();
    while sim.deliver_call() {}
}

/// Whether the explorer tries `step` at all under `bounds`.
fn in_alphabet(step: Step, bounds: &Bounds) -> bool {
    match step {
        Step::Probe(_) => bounds.probes,
        Step::Deliver | Step::DeliverCall => bounds.delivery == Delivery::Interleaved,
        _ => true,
    }
}

/// The lab the search starts from: the client connected to a fresh session, its stream's
/// priming event received (so it holds a cursor) — what a scenario's `wait = "connected"` is.
pub fn initial(config: LabConfig, policy: Policy) -> Result<Sim, ConfigError> {
    let mut sim = Sim::new(config, policy, SEED)?;
    sim.set_tool(TOOL);
    sim.start();
    sim.deliver_all();
    Ok(sim)
}

/// Streams minted by the session that minted the most.
fn streams_minted(sim: &Sim) -> u32 {
    sim.server()
        .sessions()
        .map(|s| s.streams_opened())
        .max()
        .unwrap_or(0)
}

/// Explores every schedule of the single-server lab up to `limits`, breadth-first, on the
/// calling thread, with no clock (a time budget is never reached); stops at the first anomaly.
pub fn explore(
    config: LabConfig,
    policy: Policy,
    bounds: Bounds,
    limits: Limits,
) -> Result<Exploration, ConfigError> {
    explore_on(
        NonZeroUsize::MIN,
        config,
        policy,
        bounds,
        limits,
        &mut || Duration::ZERO,
        &mut |_| {},
    )
}

/// [`explore`] on `workers` threads, with the caller's clock for the time budget and a word
/// after every round: the same states, counts and counterexample (the time budget aside),
/// sooner.
pub fn explore_on(
    workers: NonZeroUsize,
    config: LabConfig,
    policy: Policy,
    bounds: Bounds,
    limits: Limits,
    elapsed: &mut dyn FnMut() -> Duration,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<Exploration, ConfigError> {
    let mut root = initial(config, policy)?;
    root.compact();
    Ok(search::explore(
        root,
        bounds,
        limits,
        workers,
        elapsed,
        on_progress,
    ))
}

#[cfg(test)]
mod tests;
