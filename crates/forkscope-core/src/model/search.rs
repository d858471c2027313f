//! The one search behind `forkscope check`: breadth-first over any [`Model`], level by level,
//! on as many threads as it is given, under one set of [`Limits`]. The single-server lab (a
//! whole [`Sim`](crate::sim::Sim)) and the replica lab
//! ([`ReplicaLab`](super::replicas::ReplicaLab)) are two models of it.
//!
//! What it keeps per state is what the answer needs: a 128-bit fingerprint of the canonical
//! form in the visited set, and a link in the [`Tree`] to spell a schedule. A level's states
//! are rebuilt by replay when expanded, in pieces: workers take pieces in turn, and the
//! transitions they report are merged in the order one thread would have taken them. The
//! merge alone decides what is new, counts, applies the limits and picks the counterexample,
//! so the result — states, counts, the shortest schedule — is the same on any number of
//! threads, and the same as a search that kept every state whole (the time budget aside,
//! which stops where the clock says).
//!
//! The core reads no clock: the caller hands the search one (`elapsed`), and the search asks
//! it between rounds.

use super::memory::{self, ByteSize};
use super::reached::{Reached, Tally};
use super::tree::Tree;
use super::{Counterexample, Exploration, Level, Limit, Stopped};
use crate::history::Anomaly;
use crate::policy::Policy;
use serde::Serialize;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroUsize;
use std::ops::{ControlFlow, Range};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// States of a level one worker rebuilds and expands at a time: large enough that replaying
/// their ancestors costs little beside expanding them, small enough to share out evenly.
const PIECE: u32 = 128;

/// Pieces per worker merged at once: the merge waits for the slowest piece of a round, and
/// the clock is read between rounds.
const PIECES_PER_WORKER: usize = 64;

/// A lab the search can explore: plain data that clones, a fixed alphabet of steps, a
/// canonical fingerprint, and the checker's judgement after each step.
pub trait Model: Clone + Send + Sync {
    /// One atomic step of the lab.
    type Step: Copy + Send + Sync;
    /// What every state of one search shares: the bounds of the alphabet and the judgement.
    type Rules: Sync;
    /// A state's counters before a step, to tell what the step made happen.
    type Marks: Copy;

    /// Every step the search may try under `rules`, in the order it tries them.
    fn alphabet(rules: &Self::Rules) -> Vec<Self::Step>;
    fn enabled(&self, step: Self::Step, rules: &Self::Rules) -> bool;
    fn take(&mut self, step: Self::Step, rules: &Self::Rules);
    /// The state up to renaming: two states alike but for names chance gave share it.
    fn fingerprint(&self) -> u128;
    /// What the checker says of the state a step reached.
    fn judge(&self, rules: &Self::Rules) -> Judged;
    fn policy(&self) -> Policy;
    fn marks(&self) -> Self::Marks;
    /// What the step from `before` to `after` made happen (nothing, for a model that keeps no
    /// such evidence).
    fn reached(before: &Self::Marks, after: &Self::Marks) -> Reached;
}

/// The checker's word on one state.
#[derive(Debug)]
pub enum Judged {
    Holds,
    /// The invariant broke; `ends_run` when it was found by ending the run there (see
    /// [`Counterexample::ends_run`]).
    Broken {
        anomaly: Box<Anomaly>,
        ends_run: bool,
    },
    /// Past a bound of the rules (more streams than allowed): not followed.
    Pruned,
}

/// How far a search may go and what it may spend: the same four for every model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Steps from the initial state.
    pub depth: usize,
    /// Distinct states the search may hold at most; reaching it stops the search, incomplete.
    pub max_states: Option<u64>,
    /// Memory the search may hold, estimated ([`memory::estimate`]); reaching it stops the
    /// search, incomplete, rather than letting the allocator abort the process.
    pub memory_budget: ByteSize,
    /// Seconds of the caller's clock the search may run; it stops at the first round past it.
    pub time_budget_secs: Option<u64>,
}

/// The time budget when none is given: a minute, for every model.
pub const DEFAULT_TIME_BUDGET_SECS: u64 = 60;

impl Limits {
    /// Only a depth: no state limit, the default memory budget, no time budget.
    pub fn up_to(depth: usize) -> Self {
        Limits {
            depth,
            max_states: None,
            memory_budget: memory::DEFAULT_MEMORY_BUDGET,
            time_budget_secs: None,
        }
    }
}

/// Where a search is, told after every round (for a progress line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub depth: usize,
    pub distinct: u64,
    pub transitions: u64,
    /// Memory held, estimated as the budget is.
    pub held: ByteSize,
}

pub(super) type Visited = HashSet<u128, BuildHasherDefault<Prehashed>>;

/// One step from one state, as a worker saw it.
#[derive(Debug)]
struct Transition {
    parent: u32,
    step: u8,
    reached: Reached,
    found: Found,
}

#[derive(Debug)]
enum Found {
    Broken(Box<Anomaly>, bool),
    Pruned,
    /// A state found before this round.
    Known,
    New(u128),
}

/// Explores every schedule from `root` up to `limits`, breadth-first, on `workers` threads;
/// stops at the first broken state, or at a limit. `elapsed` is the caller's clock, read
/// between rounds; `on_progress` is told after every round.
pub fn explore<M: Model>(
    root: M,
    rules: M::Rules,
    limits: Limits,
    workers: NonZeroUsize,
    elapsed: &mut dyn FnMut() -> Duration,
    on_progress: &mut dyn FnMut(&Progress),
) -> Exploration<M::Step, M::Rules> {
    let workers = workers.get();
    let alphabet = M::alphabet(&rules);
    assert!(
        alphabet.len() <= usize::from(u8::MAX),
        "a step index is a byte"
    );
    let mut seen = Visited::default();
    seen.insert(root.fingerprint());
    let mut tree = Tree::new();
    let mut tally = Tally::default();
    let mut out = Exploration {
        policy: root.policy(),
        rules,
        limits,
        workers,
        transitions: 0,
        distinct: 1,
        pruned: 0,
        depth_reached: 0,
        proven_depth: 0,
        complete: true,
        exhausted: false,
        stopped: None,
        estimated_peak: memory::estimate(1),
        levels: Vec::new(),
        reached: Default::default(),
        counterexample: None,
    };
    let rules = &out.rules;
    let out_of_time = |elapsed: &mut dyn FnMut() -> Duration| {
        limits
            .time_budget_secs
            .is_some_and(|secs| elapsed() >= Duration::from_secs(secs))
    };
    'levels: for depth in 1..=limits.depth {
        let parents = tree.width(depth - 1) as u32;
        let pieces: Vec<Range<u32>> = (0..parents)
            .step_by(PIECE as usize)
            .map(|start| start..(start + PIECE).min(parents))
            .collect();
        let mut new_states = 0u64;
        let mut stopped = None;
        'rounds: for round in pieces.chunks(workers * PIECES_PER_WORKER) {
            if let Some(secs) = limits.time_budget_secs.filter(|_| out_of_time(elapsed)) {
                stopped = Some(Limit::TimeBudget { secs });
                break 'rounds;
            }
            let expand = |piece: &Range<u32>| {
                let mut found = Vec::new();
                let _ = tree.replay(
                    &root,
                    rules,
                    &alphabet,
                    depth - 1,
                    piece.clone(),
                    &mut |node, state| {
                        expand_state(state, node, rules, &alphabet, &seen, &mut found)
                    },
                );
                found
            };
            let results = if workers == 1 {
                round.iter().map(expand).collect()
            } else {
                in_parallel(round, workers, expand)
            };
            for transition in results.into_iter().flatten() {
                out.transitions += 1;
                tally.add(transition.reached);
                let step = transition.step;
                match transition.found {
                    Found::Broken(anomaly, ends_run) => {
                        let mut steps = tree.schedule(&alphabet, depth - 1, transition.parent);
                        steps.push(alphabet[usize::from(step)]);
                        out.counterexample = Some(Counterexample {
                            steps,
                            anomaly: *anomaly,
                            ends_run,
                        });
                        out.depth_reached = depth;
                        break 'levels;
                    }
                    Found::Pruned => out.pruned += 1,
                    Found::Known => {}
                    Found::New(fingerprint) => {
                        if !seen.insert(fingerprint) {
                            continue;
                        }
                        // Checked before the state is kept, so neither limit is ever passed.
                        let held = memory::estimate(out.distinct + 1);
                        stopped = match limits.max_states {
                            Some(max_states) if out.distinct >= max_states => {
                                Some(Limit::StateLimit { max_states })
                            }
                            _ if held > limits.memory_budget => Some(Limit::MemoryBudget {
                                budget: limits.memory_budget,
                            }),
                            _ => None,
                        };
                        if stopped.is_some() {
                            break 'rounds;
                        }
                        out.estimated_peak = out.estimated_peak.max(held);
                        tree.push(depth, transition.parent, step);
                        out.distinct += 1;
                        new_states += 1;
                    }
                }
            }
            on_progress(&Progress {
                depth,
                distinct: out.distinct,
                transitions: out.transitions,
                held: out.estimated_peak,
            });
        }
        if let Some(limit) = stopped {
            out.stopped = Some(Stopped {
                limit,
                at_depth: depth,
            });
            out.complete = false;
        }
        out.depth_reached = depth;
        if out.complete {
            out.proven_depth = depth;
        }
        out.levels.push(Level {
            depth,
            new_states,
            distinct: out.distinct,
            transitions: out.transitions,
            complete: out.complete,
        });
        if !out.complete {
            break;
        }
        if new_states == 0 {
            out.exhausted = true;
            break;
        }
    }
    out.reached = tally.named();
    out
}

/// Runs `expand` on every piece of a round, on the calling thread and up to `workers - 1`
/// more, each taking pieces in turn, and returns the results in the pieces' order. A thread
/// the system refuses (an address-space limit, say) is done without: the calling thread
/// takes its pieces, and the result is the same.
fn in_parallel<T: Send>(
    round: &[Range<u32>],
    workers: usize,
    expand: impl Fn(&Range<u32>) -> T + Sync,
) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, T)>> = Mutex::new(Vec::with_capacity(round.len()));
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(piece) = round.get(i) else { break };
            let result = expand(piece);
            // A worker that panicked poisons the lock; the scope re-raises its panic.
            if let Ok(mut done) = done.lock() {
                done.push((i, result));
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..workers.min(round.len()) {
            if std::thread::Builder::new()
                .spawn_scoped(scope, work)
                .is_err()
            {
                break;
            }
        }
        work();
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// Takes every enabled step from `state` (state `node` of its level), reporting each in the
/// alphabet's order; stops after a broken state, since nothing after it is merged.
fn expand_state<M: Model>(
    state: M,
    node: u32,
    rules: &M::Rules,
    alphabet: &[M::Step],
    seen: &Visited,
    found: &mut Vec<Transition>,
) -> ControlFlow<()> {
    let mut enabled = Vec::with_capacity(alphabet.len());
    for (i, &step) in alphabet.iter().enumerate() {
        if state.enabled(step, rules) {
            enabled.push(i as u8);
        }
    }
    let Some((&last, rest)) = enabled.split_last() else {
        return ControlFlow::Continue(());
    };
    let before = state.marks();
    let judge = |i: u8, mut child: M, found: &mut Vec<Transition>| {
        child.take(alphabet[usize::from(i)], rules);
        let reached = M::reached(&before, &child.marks());
        let outcome = match child.judge(rules) {
            Judged::Broken { anomaly, ends_run } => Found::Broken(anomaly, ends_run),
            Judged::Pruned => Found::Pruned,
            Judged::Holds => {
                let fingerprint = child.fingerprint();
                if seen.contains(&fingerprint) {
                    Found::Known
                } else {
                    Found::New(fingerprint)
                }
            }
        };
        let stop = matches!(outcome, Found::Broken(..));
        found.push(Transition {
            parent: node,
            step: i,
            reached,
            found: outcome,
        });
        if stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    for &i in rest {
        judge(i, state.clone(), found)?;
    }
    // The last step takes the state itself: one clone fewer per state.
    judge(last, state, found)
}

/// The hasher of the visited set: its keys are fingerprints, already hashes, so their low
/// bits are used as they are.
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u128 keys are hashed; any other input is folded in plainly.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(word);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}
