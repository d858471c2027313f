//! Breadth-first over the replica lab's schedules, deduplicated on the canonical fingerprint,
//! so the first anomaly found has a shortest schedule. As in the single-server search, a state
//! found costs a fingerprint and a link to its parent, never a whole lab (each holds a
//! checker: a level of them kept whole took 7 GB at depth 16); a level is rebuilt by replay,
//! depth first, when it is expanded.
//!
//! The core reads no clock: the caller says when time is up (`out_of_time`), and the search
//! stops at the last depth it explored in full.

use super::{Params, ReplicaLab, ReplicaStep};
use crate::history::Anomaly;
use crate::model::search::Visited;
use crate::policy::Policy;
use serde::Serialize;
use std::ops::ControlFlow;

/// States expanded between two questions to `out_of_time`.
const ASK_EVERY: u64 = 4_096;

/// One depth of the search, as the single-server search reports it; a level is recorded only
/// once explored in full (the time budget stops between levels).
pub use crate::model::Level;

/// A shortest schedule that breaks the invariant.
#[derive(Clone, Debug, Serialize)]
pub struct Counterexample {
    pub steps: Vec<ReplicaStep>,
    /// The first anomaly the checker named.
    pub anomaly: Anomaly,
}

/// What the search found.
#[derive(Clone, Debug, Serialize)]
pub struct Exploration {
    pub policy: Policy,
    pub params: Params,
    /// The depth asked for.
    pub depth: usize,
    /// Distinct states, the initial one included.
    pub distinct: u64,
    /// Steps taken: each enabled step from each distinct state.
    pub transitions: u64,
    /// Every schedule up to this depth was explored.
    pub proven_depth: usize,
    /// No new state appeared before the depth bound: the whole reachable space.
    pub exhausted: bool,
    /// Time ran out before the depth bound.
    pub out_of_time: bool,
    pub levels: Vec<Level>,
    pub counterexample: Option<Counterexample>,
}

impl Exploration {
    /// One sentence: the verdict.
    pub fn verdict(&self) -> String {
        match &self.counterexample {
            Some(c) => format!(
                "counterexample in {} steps: {}",
                c.steps.len(),
                c.anomaly.kind()
            ),
            None => format!(
                "no fork, duplicate, gap, drift, loss or reused id in {} states up to depth {}{}",
                self.distinct,
                self.proven_depth,
                if self.exhausted {
                    " (every reachable state)"
                } else if self.out_of_time {
                    " (time ran out before the next depth)"
                } else {
                    ""
                }
            ),
        }
    }
}

/// Explores every schedule of the replica lab up to `depth`, breadth-first; stops at the first
/// anomaly, or after the last depth completed when `out_of_time` says so. `on_level` is told
/// as each depth completes.
pub fn explore(
    policy: Policy,
    params: Params,
    depth: usize,
    out_of_time: &mut dyn FnMut() -> bool,
    on_level: &mut dyn FnMut(&Level),
) -> Exploration {
    let alphabet = ReplicaStep::alphabet(&params);
    let mut root = ReplicaLab::new(policy, 1);
    root.keep_verdict_only();
    let mut seen = Visited::default();
    seen.insert(root.fingerprint());
    let mut out = Exploration {
        policy,
        params,
        depth,
        distinct: 1,
        transitions: 0,
        proven_depth: 0,
        exhausted: false,
        out_of_time: false,
        levels: Vec::new(),
        counterexample: None,
    };
    // Each level's links: (index of the parent in the level above, the step taken), in the
    // parents' order, so the children of one state are contiguous. A level is rebuilt from
    // these when it is expanded: a state found costs its fingerprint and a link, not a lab.
    let mut links: Vec<Vec<(u32, u8)>> = Vec::new();
    let mut expanded = 0u64;
    for level in 1..=depth {
        let mut next_links = Vec::new();
        let mut stop = false;
        let mut expand = |parent: u32, state: ReplicaLab| {
            expanded += 1;
            if expanded % ASK_EVERY == 0 && out_of_time() {
                stop = true;
                return ControlFlow::Break(());
            }
            for (i, &step) in alphabet.iter().enumerate() {
                if !state.enabled(step, &params) {
                    continue;
                }
                out.transitions += 1;
                let mut child = state.clone();
                child.take(step, &params);
                if let Some(anomaly) = child.anomaly() {
                    let mut steps = schedule(&links, &alphabet, parent);
                    steps.push(step);
                    out.counterexample = Some(Counterexample {
                        steps,
                        anomaly: anomaly.clone(),
                    });
                    return ControlFlow::Break(());
                }
                if seen.insert(child.fingerprint()) {
                    next_links.push((parent, i as u8));
                }
            }
            ControlFlow::Continue(())
        };
        let mut cursors = vec![0usize; links.len()];
        let _ = rebuild(
            &root,
            0,
            0,
            &links,
            &mut cursors,
            &alphabet,
            &params,
            &mut expand,
        );
        if stop {
            out.out_of_time = true;
            return out;
        }
        if out.counterexample.is_some() {
            return out;
        }
        let new_states = next_links.len() as u64;
        let found = Level {
            depth: level,
            new_states,
            distinct: out.distinct + new_states,
            transitions: out.transitions,
            complete: true,
        };
        out.distinct = found.distinct;
        out.proven_depth = level;
        on_level(&found);
        out.levels.push(found);
        if new_states == 0 {
            out.exhausted = true;
            break;
        }
        links.push(next_links);
        if level < depth && out_of_time() {
            out.out_of_time = true;
            break;
        }
    }
    out
}

/// Rebuilds, depth first, every state of the deepest level of `links` below `state` (state
/// `index` of level `level`), and hands each to `visit` in the level's order: one clone and one
/// step per state of the tree, the path's states held at once. `cursors[k]` is the next link of
/// level `k + 1` to rebuild.
#[allow(clippy::too_many_arguments)]
fn rebuild(
    state: &ReplicaLab,
    level: usize,
    index: u32,
    links: &[Vec<(u32, u8)>],
    cursors: &mut [usize],
    alphabet: &[ReplicaStep],
    params: &Params,
    visit: &mut dyn FnMut(u32, ReplicaLab) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Some(below) = links.get(level) else {
        return visit(index, state.clone());
    };
    while let Some(&(parent, step)) = below.get(cursors[level]) {
        if parent != index {
            break;
        }
        let child_index = cursors[level] as u32;
        cursors[level] += 1;
        let mut child = state.clone();
        child.take(alphabet[usize::from(step)], params);
        rebuild(
            &child,
            level + 1,
            child_index,
            links,
            cursors,
            alphabet,
            params,
            visit,
        )?;
    }
    ControlFlow::Continue(())
}

/// The steps from the start to state `index` of the deepest level in `links`.
fn schedule(
    links: &[Vec<(u32, u8)>],
    alphabet: &[ReplicaStep],
    mut index: u32,
) -> Vec<ReplicaStep> {
    let mut steps = Vec::with_capacity(links.len() + 1);
    for level in links.iter().rev() {
        let (parent, step) = level[index as usize];
        steps.push(alphabet[usize::from(step)]);
        index = parent;
    }
    steps.reverse();
    steps
}
