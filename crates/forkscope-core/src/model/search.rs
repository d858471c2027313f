//! The breadth-first search, level by level, on as many threads as it is given.
//!
//! What it keeps per state is what the answer needs: a 128-bit fingerprint of the canonical
//! form in the visited set, and a link in the [`Tree`] to spell a schedule. A level's states
//! are rebuilt by replay when expanded, in pieces: workers take pieces in turn, and the
//! transitions they report are merged in the order one thread would have taken them. The
//! merge alone decides what is new, counts, applies the limits and picks the counterexample,
//! so the result — states, counts, the shortest schedule — is the same on any number of
//! threads, and the same as a search that kept every state whole.

use super::memory;
use super::reached::{Marks, Reached, Tally};
use super::tree::Tree;
use super::{
    Bounds, Counterexample, Exploration, Level, Limit, Step, Stopped, in_alphabet, initial,
    streams_minted, take,
};
use crate::config::{ConfigError, LabConfig};
use crate::history::Anomaly;
use crate::policy::Policy;
use crate::sim::Sim;
use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroUsize;
use std::ops::{ControlFlow, Range};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// States of a level one worker rebuilds and expands at a time: large enough that replaying
/// their ancestors costs little beside expanding them, small enough to share out evenly.
const PIECE: u32 = 128;

/// Pieces per worker merged at once: the merge waits for the slowest piece of a round.
const PIECES_PER_WORKER: usize = 64;

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
    /// The anomaly, and whether it was found by ending the run there (see
    /// [`Counterexample::ends_run`]).
    Anomaly(Box<Anomaly>, bool),
    /// It minted more streams than the bound allows.
    Pruned,
    /// A state found before this round.
    Known,
    New(u128),
}

/// Nothing more happens on its own: no event on the wire, no timer due (a call's next step, a
/// client's retry, a grace window). A run may end here; `run` ends a quiet lab the same way.
fn at_rest(sim: &Sim) -> bool {
    sim.in_flight() == 0 && sim.call_in_flight() == 0 && sim.next_deadline().is_none()
}

pub(super) fn explore(
    config: LabConfig,
    policy: Policy,
    bounds: Bounds,
    workers: NonZeroUsize,
    on_level: &mut dyn FnMut(&Level),
) -> Result<Exploration, ConfigError> {
    let workers = workers.get();
    let mut root = initial(config, policy)?;
    root.compact();
    let mut seen = Visited::default();
    seen.insert(root.fingerprint());
    let mut tree = Tree::new();
    let mut tally = Tally::default();
    let mut out = Exploration {
        policy,
        bounds,
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
        reached: BTreeMap::new(),
        counterexample: None,
    };
    'levels: for depth in 1..=bounds.depth {
        let parents = tree.width(depth - 1) as u32;
        let pieces: Vec<Range<u32>> = (0..parents)
            .step_by(PIECE as usize)
            .map(|start| start..(start + PIECE).min(parents))
            .collect();
        let mut new_states = 0u64;
        'rounds: for round in pieces.chunks(workers * PIECES_PER_WORKER) {
            let expand = |piece: &Range<u32>| {
                let mut found = Vec::new();
                let _ = tree.replay(
                    &root,
                    bounds.delivery,
                    depth - 1,
                    piece.clone(),
                    &mut |node, sim| expand_state(sim, node, &bounds, &seen, &mut found),
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
                    Found::Anomaly(anomaly, ends_run) => {
                        let mut steps = tree.schedule(depth - 1, transition.parent);
                        steps.push(Step::ALL[usize::from(step)]);
                        out.counterexample = Some(Counterexample {
                            steps,
                            delivery: bounds.delivery,
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
                        let limit = match bounds.max_states {
                            Some(max_states) if out.distinct >= max_states => {
                                Some(Limit::StateLimit { max_states })
                            }
                            _ if held > bounds.memory_budget => Some(Limit::MemoryBudget {
                                budget: bounds.memory_budget,
                            }),
                            _ => None,
                        };
                        if let Some(limit) = limit {
                            out.stopped = Some(Stopped {
                                limit,
                                at_depth: depth,
                            });
                            out.complete = false;
                            break 'rounds;
                        }
                        out.estimated_peak = out.estimated_peak.max(held);
                        tree.push(depth, transition.parent, step);
                        out.distinct += 1;
                        new_states += 1;
                    }
                }
            }
        }
        out.depth_reached = depth;
        if out.complete {
            out.proven_depth = depth;
        }
        let level = Level {
            depth,
            new_states,
            distinct: out.distinct,
            transitions: out.transitions,
            complete: out.complete,
        };
        on_level(&level);
        out.levels.push(level);
        if !out.complete {
            break;
        }
        if new_states == 0 {
            out.exhausted = true;
            break;
        }
    }
    out.reached = tally.named();
    Ok(out)
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

/// Takes every enabled step from `sim` (state `node` of its level), reporting each in the
/// order of [`Step::ALL`]; stops after an anomaly, since nothing after it is merged.
fn expand_state(
    sim: Sim,
    node: u32,
    bounds: &Bounds,
    seen: &Visited,
    found: &mut Vec<Transition>,
) -> ControlFlow<()> {
    let mut enabled = [0u8; Step::ALL.len()];
    let mut count = 0;
    for (i, step) in Step::ALL.into_iter().enumerate() {
        if in_alphabet(step, bounds) && step.enabled(&sim) {
            enabled[count] = i as u8;
            count += 1;
        }
    }
    let Some((&last, rest)) = enabled[..count].split_last() else {
        return ControlFlow::Continue(());
    };
    let before = Marks::of(&sim);
    let judge = |i: u8, mut child: Sim, found: &mut Vec<Transition>| {
        take(Step::ALL[usize::from(i)], &mut child, bounds.delivery);
        let reached = Reached::between(&before, &Marks::of(&child));
        let wanted = |a: &&Anomaly| match bounds.target {
            None => a.kind().is_violation(),
            Some(kind) => a.kind() == kind,
        };
        let hit = child.history().checker().anomalies().iter().find(wanted);
        // Exactly once, or told: where nothing more happens on its own, the run may end, and
        // what is still owed is judged as `run` judges a quiet lab.
        let settled = || {
            let mut ended = child.clone();
            ended.end_run();
            ended
                .history()
                .checker()
                .anomalies()
                .iter()
                .find(wanted)
                .cloned()
        };
        let outcome = if let Some(anomaly) = hit {
            Found::Anomaly(Box::new(anomaly.clone()), false)
        } else if let Some(anomaly) = at_rest(&child).then(settled).flatten() {
            Found::Anomaly(Box::new(anomaly), true)
        } else if streams_minted(&child) > bounds.streams {
            Found::Pruned
        } else {
            let fingerprint = child.fingerprint();
            if seen.contains(&fingerprint) {
                Found::Known
            } else {
                Found::New(fingerprint)
            }
        };
        let stop = matches!(outcome, Found::Anomaly(..));
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
        judge(i, sim.clone(), found)?;
    }
    // The last step takes the state itself: one clone fewer per state.
    judge(last, sim, found)
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
