//! The search tree, kept as schedules rather than states: each state the search found is a
//! link to the state it was reached from and the step that reached it — five bytes, where a
//! whole lab is several kilobytes. A level's states are rebuilt when they are expanded, by
//! replaying the tree from the initial state depth-first; a [`Model`] is deterministic (its
//! randomness is part of its state), so a replay reaches the very state the search first saw.
//!
//! Links are stored level by level, in the order the search found them, so a state's children
//! are a contiguous run of the next level, and the states of any contiguous run of a level are
//! rebuilt in order by walking only their ancestors.

use super::search::Model;
use std::ops::{ControlFlow, Range};

/// The states first reached at one depth: for each, its parent's index in the level above and
/// the step (an index into the model's alphabet) taken from it. Parents never decrease along a level.
#[derive(Debug, Default)]
struct Links {
    parents: Vec<u32>,
    steps: Vec<u8>,
}

/// Every state found so far, by depth; level 0 holds the initial state alone.
#[derive(Debug)]
pub(super) struct Tree {
    levels: Vec<Links>,
}

impl Tree {
    pub(super) fn new() -> Self {
        Tree {
            levels: vec![Links {
                parents: vec![0],
                steps: vec![0],
            }],
        }
    }

    /// States first reached at `depth`.
    pub(super) fn width(&self, depth: usize) -> usize {
        self.levels.get(depth).map_or(0, |l| l.parents.len())
    }

    /// Adds a state to the level being built (the one after the deepest so far).
    pub(super) fn push(&mut self, depth: usize, parent: u32, step: u8) {
        if self.levels.len() == depth {
            self.levels.push(Links::default());
        }
        let level = &mut self.levels[depth];
        level.parents.push(parent);
        level.steps.push(step);
    }

    /// The steps from the initial state to state `node` of level `depth`.
    pub(super) fn schedule<S: Copy>(&self, alphabet: &[S], depth: usize, mut node: u32) -> Vec<S> {
        let mut steps = Vec::with_capacity(depth);
        for level in self.levels[1..=depth].iter().rev() {
            steps.push(alphabet[usize::from(level.steps[node as usize])]);
            node = level.parents[node as usize];
        }
        steps.reverse();
        steps
    }

    /// Rebuilds states `nodes` of level `depth` from `root`, in order, and hands each to
    /// `visit` (which may stop the walk). Only their ancestors are replayed, each once.
    pub(super) fn replay<M: Model, B>(
        &self,
        root: &M,
        rules: &M::Rules,
        alphabet: &[M::Step],
        depth: usize,
        nodes: Range<u32>,
        visit: &mut impl FnMut(u32, M) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if nodes.is_empty() {
            return ControlFlow::Continue(());
        }
        // The run's ancestors at each level are a run too, bounded by its ends' ancestors.
        let mut runs = vec![0..0; depth + 1];
        runs[depth] = nodes;
        for d in (1..=depth).rev() {
            let parents = &self.levels[d].parents;
            let (first, last) = (runs[d].start, runs[d].end - 1);
            runs[d - 1] = parents[first as usize]..parents[last as usize] + 1;
        }
        let walk = Walk {
            tree: self,
            rules,
            alphabet,
            depth,
            runs: &runs,
        };
        walk.from(0, 0, root.clone(), visit)
    }
}

/// One replay: which nodes of each level to rebuild.
struct Walk<'a, M: Model> {
    tree: &'a Tree,
    rules: &'a M::Rules,
    alphabet: &'a [M::Step],
    depth: usize,
    runs: &'a [Range<u32>],
}

impl<M: Model> Walk<'_, M> {
    fn from<B>(
        &self,
        level: usize,
        node: u32,
        state: M,
        visit: &mut impl FnMut(u32, M) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if level == self.depth {
            return visit(node, state);
        }
        let links = &self.tree.levels[level + 1];
        let run = &self.runs[level + 1];
        let first = links.parents.partition_point(|p| *p < node) as u32;
        let end = links.parents.partition_point(|p| *p <= node) as u32;
        let children = first.max(run.start)..end.min(run.end);
        if children.is_empty() {
            return ControlFlow::Continue(());
        }
        for child in children.start..children.end - 1 {
            self.child(level + 1, child, state.clone(), visit)?;
        }
        // The last child takes the parent itself: one clone fewer per parent.
        self.child(level + 1, children.end - 1, state, visit)
    }

    fn child<B>(
        &self,
        level: usize,
        node: u32,
        mut state: M,
        visit: &mut impl FnMut(u32, M) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        let step = self.alphabet[usize::from(self.tree.levels[level].steps[node as usize])];
        state.take(step, self.rules);
        self.from(level, node, state, visit)
    }
}
