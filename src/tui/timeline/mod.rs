//! The dashboard's memory of a run, for time travel: the history entries of each lab (the
//! core keeps only a ring) with their lane marks, and a [`Moment`] — what every pane showed —
//! each time something happened. Scrubbing redraws a moment; the lanes of a moment are the
//! run's marks up to it, so they scroll back over the run.
//!
//! A lab left running all day must not take the machine with it, so the kept run is bounded in
//! bytes ([`RUN_BUDGET`], weighed as [`super::weight`] estimates): older ordinary moments are
//! thinned, coarser the older they are, while every decision and the first violation stay; a
//! track lets its oldest entries go when they alone outgrow their share. [`Timeline::reach`]
//! says how far back travel still goes.

mod track;

pub use track::Track;

use crate::lab::{Exchange, Snapshot};
use crate::tui::panes::header::Reach;
use crate::tui::weight::Weigh;
use forkscope_core::LabTime;
use std::mem::size_of;
use std::sync::Arc;

/// What the kept run may weigh: small on any laptop (the count caps it replaces let the moments
/// alone reach ~110 MiB), yet at issue 23's pace (lab ×10, a tool call and a drop every lab
/// minute: about ten moments and forty entries a second) some ten to fifteen minutes fit change
/// by change before the older run thins (`benches/travel.rs`, BENCHMARKS.md).
pub const RUN_BUDGET: usize = 32 << 20;

/// The share of the budget all tracks together may hold: the lanes and the event card read
/// them, and a moment is worth little without them. Moments get what the tracks leave.
const TRACKS_SHARE: f64 = 0.5;

/// Past the budget, moments are thinned down to this part of it, so thinning (a pass over
/// every moment) happens now and then, not at every capture.
const THIN_TO: f64 = 0.75;

/// One lab as a moment showed it.
#[derive(Clone, Debug)]
pub struct Frozen {
    /// Without `recent` (the lanes come from the track) and without `exchanges`.
    pub snapshot: Snapshot,
    /// The HTTP exchanges listed, shared with the moments before and after that listed the
    /// same: the list changes with a request, not with every event, and it is most of what a
    /// moment weighs (64 exchanges with their headers, ~25 KiB).
    pub exchanges: Arc<[Exchange]>,
    /// Absolute counts of the track's entries and marks at the moment.
    pub entries: usize,
    pub placed: usize,
}

impl Frozen {
    /// What the panes showed (without `recent`).
    pub fn shown(&self) -> Snapshot {
        Snapshot {
            exchanges: self.exchanges.to_vec(),
            ..self.snapshot.clone()
        }
    }
}

/// What every lab showed at one instant when something had happened.
#[derive(Clone, Debug)]
pub struct Moment {
    pub panels: Vec<Frozen>,
    /// A lab's verdict was not clean.
    pub violation: bool,
    /// A decision (a server's or the client's new session) arrived since the previous moment.
    pub decision: bool,
    /// What the moment holds on the heap, in bytes, weighed once when captured; without the
    /// exchanges, which it may share (see [`Timeline::recount`]).
    heap: usize,
}

impl Moment {
    /// Lab time when the moment was captured (the first lab's clock).
    pub fn at(&self) -> LabTime {
        self.panels
            .first()
            .map_or(LabTime::ZERO, |f| f.snapshot.view.at)
    }
}

/// Where time travel can go from a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jump {
    Back(usize),
    Forward(usize),
    Start,
    FirstViolation,
    PreviousDecision,
    NextDecision,
}

#[derive(Debug)]
pub struct Timeline {
    pub tracks: Vec<Track>,
    moments: Vec<Moment>,
    /// What the kept moments hold on the heap: their `heap`, and each list of exchanges once.
    moments_heap: usize,
    /// The bytes the whole kept run may hold.
    budget: usize,
    /// Lab time of the newest moment thinning let go: every change after it is kept.
    thinned_until: Option<LabTime>,
    /// Lab time of the newest moment let go from the start of the run (when the decisions
    /// alone outgrew the budget).
    forgotten_until: Option<LabTime>,
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline::new(0)
    }
}

impl Timeline {
    pub fn new(labs: usize) -> Timeline {
        Timeline::with_budget(labs, RUN_BUDGET)
    }

    /// A timeline that keeps at most `budget` bytes of the run (tests use a small one).
    pub fn with_budget(labs: usize, budget: usize) -> Timeline {
        let share = (budget as f64 * TRACKS_SHARE) as usize / labs.max(1);
        Timeline {
            tracks: (0..labs).map(|_| Track::with_share(share)).collect(),
            moments: Vec::new(),
            moments_heap: 0,
            budget,
            thinned_until: None,
            forgotten_until: None,
        }
    }

    /// What the kept run holds, in bytes (see [`super::weight`]): every track and moment.
    pub fn weight(&self) -> usize {
        self.tracks.iter().map(Track::weight).sum::<usize>()
            + self.moments.capacity() * size_of::<Moment>()
            + self.moments_heap
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn len(&self) -> usize {
        self.moments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.moments.is_empty()
    }

    pub fn moment(&self, index: usize) -> Option<&Moment> {
        self.moments.get(index)
    }

    /// How far back travel goes, and what of the run was thinned or let go on the way.
    pub fn reach(&self) -> Option<Reach> {
        let oldest = self.moments.first()?.at();
        Some(Reach {
            oldest_ms: oldest.as_millis(),
            forgotten: self.forgotten_until.is_some(),
            every_change_since_ms: self.thinned_until.map(LabTime::as_millis),
            lanes_since_ms: self
                .tracks
                .iter()
                .filter_map(Track::forgotten_before)
                .max()
                .map(LabTime::as_millis),
        })
    }

    /// Records what the labs show now (their tracks already synced).
    pub fn capture(&mut self, snapshots: &[Snapshot]) {
        let previous = self.moments.last();
        let mut decision = false;
        let mut fresh_exchanges = 0;
        let panels = snapshots
            .iter()
            .zip(&self.tracks)
            .enumerate()
            .map(|(i, (snap, track))| {
                let (entries, placed) = track.ends();
                let before = previous.and_then(|m| m.panels.get(i));
                decision |= track.decided_between(before.map_or(0, |f| f.entries), entries);
                let mut snapshot = snap.clone();
                snapshot.recent = Vec::new();
                let listed = std::mem::take(&mut snapshot.exchanges);
                let exchanges = match before.filter(|f| *f.exchanges == *listed) {
                    Some(f) => f.exchanges.clone(),
                    None => {
                        let fresh: Arc<[Exchange]> = listed.into();
                        fresh_exchanges += fresh.heap();
                        fresh
                    }
                };
                Frozen {
                    snapshot,
                    exchanges,
                    entries,
                    placed,
                }
            })
            .collect::<Vec<Frozen>>();
        let violation = snapshots.iter().any(|s| !s.view.verdict.clean);
        let heap = panels.iter().map(|f| f.snapshot.heap()).sum::<usize>()
            + panels.capacity() * size_of::<Frozen>();
        self.moments_heap += heap + fresh_exchanges;
        self.moments.push(Moment {
            panels,
            violation,
            decision,
            heap,
        });
        if self.weight() > self.budget {
            self.fit();
        }
    }

    /// The first moment with a violation, and the first with a fork (where `v` goes first):
    /// neither is ever thinned.
    fn first_violations(&self) -> [Option<usize>; 2] {
        let forked = |m: &Moment| {
            m.panels.iter().any(|f| {
                f.snapshot
                    .view
                    .verdict
                    .count(forkscope_core::AnomalyKind::Fork)
                    > 0
            })
        };
        [
            self.moments.iter().position(|m| m.violation),
            self.moments.iter().position(forked),
        ]
    }

    /// Thins the moments until the run weighs [`THIN_TO`] of the budget; when only decisions
    /// and the first violation and fork are left to thin, lets the oldest moments go.
    fn fit(&mut self) {
        let target = (self.budget as f64 * THIN_TO) as usize;
        while self.weight() > target {
            if !self.thin() && !self.let_go_oldest() {
                break;
            }
        }
    }

    /// Lets every other ordinary moment go, except the newest quarter of them; returns whether
    /// any went. Repeated, the older part gets coarser each time, so the whole run stays
    /// reachable, coarser the older it is. Decisions, the first violation and the first fork (what `v`, `[`
    /// and `]` go to) are never thinned.
    fn thin(&mut self) -> bool {
        let [first_violation, first_fork] = self.first_violations();
        let pinned = |i: usize, m: &Moment| {
            m.decision || Some(i) == first_violation || Some(i) == first_fork
        };
        let ordinary = self
            .moments
            .iter()
            .enumerate()
            .filter(|(i, m)| !pinned(*i, m))
            .count();
        let thinned = ordinary * 3 / 4;
        let mut index = 0;
        let mut seen = 0;
        let mut newest_gone = None;
        self.moments.retain(|m| {
            let keep = pinned(index, m) || {
                seen += 1;
                // The 1st, 3rd, … stay: the run's first moment is always kept.
                seen > thinned || seen % 2 == 1
            };
            if !keep {
                newest_gone = Some(m.at());
            }
            index += 1;
            keep
        });
        self.recount();
        match newest_gone {
            Some(at) => {
                self.thinned_until = self.thinned_until.max(Some(at));
                true
            }
            None => false,
        }
    }

    /// Lets the oldest quarter of the moments go, all but the first violation and fork; returns whether
    /// any went.
    fn let_go_oldest(&mut self) -> bool {
        let [first_violation, first_fork] = self.first_violations();
        // Never the newest: the present is always a moment to travel to.
        let count = self
            .moments
            .len()
            .div_ceil(4)
            .min(self.moments.len().saturating_sub(1));
        let mut index = 0;
        let mut newest_gone = None;
        self.moments.retain(|m| {
            let keep =
                index >= count || Some(index) == first_violation || Some(index) == first_fork;
            if !keep {
                newest_gone = Some(m.at());
            }
            index += 1;
            keep
        });
        self.recount();
        if newest_gone.is_some() {
            self.forgotten_until = self.forgotten_until.max(newest_gone);
        }
        newest_gone.is_some()
    }

    /// Sums what the kept moments hold: a list of exchanges counts once for the run of
    /// moments that share it (they are always neighbours: a moment shares only its
    /// predecessor's list, and letting moments go keeps the order).
    fn recount(&mut self) {
        let mut heap = 0;
        let mut previous: Option<&Moment> = None;
        for moment in &self.moments {
            heap += moment.heap;
            for (i, frozen) in moment.panels.iter().enumerate() {
                let shared = previous
                    .and_then(|p| p.panels.get(i))
                    .is_some_and(|p| Arc::ptr_eq(&p.exchanges, &frozen.exchanges));
                if !shared {
                    heap += frozen.exchanges.heap();
                }
            }
            previous = Some(moment);
        }
        self.moments_heap = heap;
    }

    /// The moment a jump from `from` lands on (the same one if there is nowhere to go).
    pub fn jump(&self, from: usize, jump: Jump) -> usize {
        let last = self.moments.len().saturating_sub(1);
        let from = from.min(last);
        match jump {
            Jump::Back(n) => from.saturating_sub(n),
            Jump::Forward(n) => (from + n).min(last),
            Jump::Start => 0,
            Jump::FirstViolation => self
                .moments
                .iter()
                .position(|m| m.violation)
                .unwrap_or(from),
            Jump::PreviousDecision => self.moments[..from]
                .iter()
                .rposition(|m| m.decision)
                .unwrap_or(from),
            Jump::NextDecision => self
                .moments
                .iter()
                .skip(from + 1)
                .position(|m| m.decision)
                .map_or(from, |i| from + 1 + i),
        }
    }
}

#[cfg(test)]
mod tests;
