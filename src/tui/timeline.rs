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

use super::panes::header::Reach;
use super::panes::lanes::{self, Placed};
use super::weight::Weigh;
use crate::lab::{Exchange, Snapshot};
use forkscope_core::LabTime;
use forkscope_core::history::{Entry, History};
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

/// One lab's run: every entry since the oldest kept.
#[derive(Debug)]
pub struct Track {
    entries: Vec<Entry>,
    placed: Vec<Placed>,
    /// Absolute index of `entries[0]` / `placed[0]` (older ones were let go).
    entry_base: usize,
    placed_base: usize,
    /// Absolute indices of the entries that are decisions.
    decisions: Vec<usize>,
    /// The heap bytes of the kept entries (their keys), kept as entries come and go.
    entries_heap: usize,
    /// The bytes this track may hold before its oldest entries go.
    share: usize,
    /// How many of the core's entries were copied (or missed).
    seen: u64,
    /// Entries that left the core's ring before the dashboard copied them.
    pub missed: u64,
}

impl Track {
    pub fn with_share(share: usize) -> Track {
        Track {
            entries: Vec::new(),
            placed: Vec::new(),
            entry_base: 0,
            placed_base: 0,
            decisions: Vec::new(),
            entries_heap: 0,
            share,
            seen: 0,
            missed: 0,
        }
    }

    /// Copies the entries `history` recorded since the last call.
    pub fn sync(&mut self, history: &History) {
        let total = history.total();
        let fresh = total.saturating_sub(self.seen);
        if fresh == 0 {
            return;
        }
        let recent = history.recent();
        let kept = (fresh as usize).min(recent.len());
        self.missed += fresh - kept as u64;
        self.seen = total;
        for entry in recent.iter().skip(recent.len() - kept) {
            self.push(entry.clone());
        }
    }

    pub fn push(&mut self, entry: Entry) {
        self.make_room();
        let index = self.entry_base + self.entries.len();
        if entry.record.is_decision() {
            self.decisions.push(index);
        }
        lanes::place(index, &entry, &mut self.placed);
        self.entries_heap += entry.heap();
        self.entries.push(entry);
    }

    /// Lets the oldest quarter of the entries go while one more could take the track past its
    /// share. A full vector doubles when it grows, so that growth counts before it happens: the
    /// vectors never outgrow the share, and forgetting leaves room in the same allocation.
    fn make_room(&mut self) {
        fn growth<T>(v: &Vec<T>) -> usize {
            if v.len() == v.capacity() {
                v.capacity().max(4) * size_of::<T>()
            } else {
                0
            }
        }
        while !self.entries.is_empty()
            && self.weight()
                + growth(&self.entries)
                + growth(&self.placed)
                + growth(&self.decisions)
                > self.share
        {
            self.forget(self.entries.len().div_ceil(4));
        }
    }

    fn forget(&mut self, count: usize) {
        for entry in &self.entries[..count] {
            self.entries_heap -= entry.heap();
        }
        self.entries.drain(..count);
        self.entry_base += count;
        let marks = self.placed.partition_point(|p| p.entry < self.entry_base);
        self.placed.drain(..marks);
        self.placed_base += marks;
        self.decisions.retain(|d| *d >= self.entry_base);
    }

    /// What the track holds, in bytes (see [`super::weight`]): its vectors as allocated and
    /// the entries' keys.
    pub fn weight(&self) -> usize {
        self.entries.capacity() * size_of::<Entry>()
            + self.entries_heap
            + self.placed.capacity() * size_of::<Placed>()
            + self.decisions.capacity() * size_of::<usize>()
    }

    /// Lab time of the oldest entry kept, once older ones were let go.
    pub fn forgotten_before(&self) -> Option<LabTime> {
        (self.entry_base > 0)
            .then(|| self.entries.first().map(|e| e.at))
            .flatten()
    }

    /// Absolute counts now: (entries, marks).
    pub fn ends(&self) -> (usize, usize) {
        (
            self.entry_base + self.entries.len(),
            self.placed_base + self.placed.len(),
        )
    }

    /// The marks up to an absolute mark count, and the absolute index of the first.
    pub fn placed_until(&self, placed_end: usize) -> (&[Placed], usize) {
        let end = placed_end
            .saturating_sub(self.placed_base)
            .min(self.placed.len());
        (&self.placed[..end], self.placed_base)
    }

    /// The entry at an absolute index, if still kept.
    pub fn entry(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index.checked_sub(self.entry_base)?)
    }

    /// The kept entries up to an absolute count, and the absolute index of the first.
    pub fn entries_until(&self, entry_end: usize) -> (&[Entry], usize) {
        let end = entry_end
            .saturating_sub(self.entry_base)
            .min(self.entries.len());
        (&self.entries[..end], self.entry_base)
    }

    /// Whether a decision lies in the absolute entry range `from..to`.
    fn decided_between(&self, from: usize, to: usize) -> bool {
        let i = self.decisions.partition_point(|d| *d < from);
        self.decisions.get(i).is_some_and(|d| *d < to)
    }
}

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
mod tests {
    use super::*;
    use crate::lab::Snapshot;
    use crate::tui::weight::weight;
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabConfig, LabTime, Policy};

    /// Plays the seed incident under naive in the core's own simulation, capturing a moment
    /// after every step, as the dashboard does after every change.
    fn recorded() -> (Sim, Timeline) {
        let mut sim = Sim::new(LabConfig::default(), Policy::Naive, 7).unwrap();
        let mut timeline = Timeline::new(1);
        let capture = |sim: &Sim, timeline: &mut Timeline| {
            timeline.tracks[0].sync(sim.history());
            timeline.capture(&[Snapshot::from_sim(sim, Vec::new())]);
        };
        sim.start();
        capture(&sim, &mut timeline);
        for _ in 0..3 {
            sim.emit_background();
            sim.deliver_all();
            sim.advance(100);
            capture(&sim, &mut timeline);
        }
        sim.drop_connection();
        capture(&sim, &mut timeline);
        sim.strip_token();
        sim.reconnect(true);
        sim.deliver_all();
        capture(&sim, &mut timeline);
        sim.advance(100);
        sim.emit_background();
        sim.deliver_all();
        capture(&sim, &mut timeline);
        (sim, timeline)
    }

    #[test]
    fn the_track_keeps_every_entry_and_each_moment_its_share() {
        let (sim, timeline) = recorded();
        let track = &timeline.tracks[0];
        assert_eq!(track.ends().0 as u64, sim.history().total());
        assert_eq!(track.missed, 0);
        let counts: Vec<usize> = (0..timeline.len())
            .map(|i| timeline.moment(i).unwrap().panels[0].entries)
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
        assert!(
            timeline
                .moment(0)
                .unwrap()
                .panels
                .iter()
                .all(|f| f.snapshot.recent.is_empty()),
            "a moment does not copy the ring"
        );
    }

    #[test]
    fn jumps_land_on_the_first_violation_and_on_decisions() {
        let (_, timeline) = recorded();
        let last = timeline.len() - 1;
        let first = timeline.jump(last, Jump::FirstViolation);
        assert!(timeline.moment(first).unwrap().violation);
        assert!(
            (0..first).all(|i| !timeline.moment(i).unwrap().violation),
            "it is the first"
        );
        let previous = timeline.jump(last, Jump::PreviousDecision);
        assert!(previous < last && timeline.moment(previous).unwrap().decision);
        let next = timeline.jump(0, Jump::NextDecision);
        assert!(next > 0 && timeline.moment(next).unwrap().decision);
        assert_eq!(timeline.jump(0, Jump::Back(5)), 0);
        assert_eq!(timeline.jump(0, Jump::Forward(500)), last);
    }

    /// A budget a few hundred moments fill: thinning and forgetting within seconds of test.
    const SMALL: usize = 512 << 10;

    fn capture(sim: &Sim, timeline: &mut Timeline) {
        timeline.tracks[0].sync(sim.history());
        timeline.capture(&[Snapshot::from_sim(sim, Vec::new())]);
    }

    /// The moments' lab times and entry counts never go backwards, and each moment's marks are
    /// those of its entries.
    fn assert_ordered(timeline: &Timeline) {
        let track = &timeline.tracks[0];
        let mut previous = (LabTime::ZERO, 0);
        for i in 0..timeline.len() {
            let moment = timeline.moment(i).unwrap();
            let now = (moment.at(), moment.panels[0].entries);
            assert!(now >= previous, "moment {i}: {now:?} after {previous:?}");
            previous = now;
            let (marks, _) = track.placed_until(moment.panels[0].placed);
            assert!(
                marks.iter().all(|m| m.entry < moment.panels[0].entries),
                "moment {i}'s lanes end at its entries"
            );
            let (entries, entry_base) = track.entries_until(moment.panels[0].entries);
            assert!(marks.first().is_none_or(|m| m.entry >= entry_base));
            assert_eq!(
                entry_base + entries.len(),
                moment.panels[0].entries.max(entry_base)
            );
        }
    }

    #[test]
    fn a_long_run_stays_within_its_budget_and_reachable_from_its_start() {
        let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 3).unwrap();
        sim.start();
        let mut timeline = Timeline::with_budget(1, SMALL);
        let mut most = 0;
        for _ in 0..20_000 {
            sim.emit_background();
            sim.deliver_all();
            sim.advance(10);
            capture(&sim, &mut timeline);
            assert!(
                timeline.weight() <= SMALL,
                "{} bytes kept of {SMALL}",
                timeline.weight()
            );
            most = most.max(timeline.len());
        }
        assert!(most < 20_000, "moments were thinned");
        let first = timeline.moment(0).unwrap().at();
        assert!(
            first.as_millis() <= 10,
            "the start of the run is still there"
        );
        assert_eq!(timeline.jump(timeline.len() - 1, Jump::Start), 0);
        assert_ordered(&timeline);
        let reach = timeline.reach().unwrap();
        assert_eq!(reach.oldest_ms, first.as_millis());
        assert!(!reach.forgotten, "ordinary moments thin, none is let go");
        let since = reach.every_change_since_ms.expect("the run was thinned");
        // Every change after the thinned part is there: one moment per 10 ms step.
        let last = timeline
            .moment(timeline.len() - 1)
            .unwrap()
            .at()
            .as_millis();
        let after = (0..timeline.len())
            .filter(|i| timeline.moment(*i).unwrap().at().as_millis() > since)
            .count() as u64;
        assert_eq!(after, (last - since) / 10, "every change since {since} ms");
        // The track outgrew its share too: its oldest entries went, the lanes say from when.
        let track = &timeline.tracks[0];
        assert_eq!(
            track.ends().0 as u64,
            sim.history().total(),
            "counts stay absolute"
        );
        assert!(track.entry(0).is_none() && track.entry(track.ends().0 - 1).is_some());
        assert!(reach.lanes_since_ms.is_some());
        assert!(track.weight() <= SMALL / 2, "{}", track.weight());
    }

    #[test]
    fn thinning_keeps_every_decision_and_the_first_violation() {
        // The seed fork early, then a long quiet run with a drop and a resume now and then.
        let (mut sim, _) = recorded();
        let mut timeline = Timeline::with_budget(1, SMALL);
        let mut decisions = Vec::new();
        let mut first_violation = None;
        for step in 0..6_000 {
            if step % 200 == 100 {
                sim.drop_connection();
            } else if step % 200 == 110 {
                sim.reconnect(true);
            } else {
                sim.emit_background();
            }
            sim.deliver_all();
            sim.advance(10);
            capture(&sim, &mut timeline);
            let newest = timeline.moment(timeline.len() - 1).unwrap();
            if newest.decision {
                decisions.push(newest.panels[0].entries);
            }
            if newest.violation && first_violation.is_none() {
                first_violation = Some(newest.panels[0].entries);
            }
        }
        assert!(decisions.len() > 20, "{decisions:?}");
        assert!(timeline.reach().unwrap().every_change_since_ms.is_some());
        let kept: Vec<usize> = (0..timeline.len())
            .map(|i| timeline.moment(i).unwrap())
            .filter(|m| m.decision)
            .map(|m| m.panels[0].entries)
            .collect();
        assert_eq!(kept, decisions, "every decision survives, in order");
        let v = timeline.jump(timeline.len() - 1, Jump::FirstViolation);
        assert_eq!(
            Some(timeline.moment(v).unwrap().panels[0].entries),
            first_violation
        );
        assert_ordered(&timeline);
        // `]` from the start visits the decisions in order.
        let mut at = 0;
        let mut visited = Vec::new();
        loop {
            let next = timeline.jump(at, Jump::NextDecision);
            if next == at {
                break;
            }
            visited.push(timeline.moment(next).unwrap().panels[0].entries);
            at = next;
        }
        let skipped_first = usize::from(timeline.moment(0).unwrap().decision);
        assert_eq!(visited, decisions[skipped_first..]);
    }

    #[test]
    fn when_decisions_alone_outgrow_the_budget_the_oldest_go() {
        let (mut sim, _) = recorded();
        let mut timeline = Timeline::with_budget(1, SMALL);
        for _ in 0..4_000 {
            // Every step a decision: a drop, then a resume.
            sim.drop_connection();
            sim.reconnect(true);
            sim.deliver_all();
            sim.advance(10);
            capture(&sim, &mut timeline);
            assert!(timeline.weight() <= SMALL);
        }
        let reach = timeline.reach().unwrap();
        assert!(reach.forgotten, "older moments were let go");
        assert_ordered(&timeline);
        // The first violation stays, oldest of all: Home and v both go to it.
        let first = timeline.moment(0).unwrap();
        assert!(first.violation);
        assert_eq!(timeline.jump(timeline.len() - 1, Jump::FirstViolation), 0);
        assert_eq!(reach.oldest_ms, first.at().as_millis());
        // The present is always kept.
        let last = timeline.moment(timeline.len() - 1).unwrap();
        assert_eq!(last.panels[0].entries, timeline.tracks[0].ends().0);
    }

    #[test]
    fn moments_share_an_unchanged_list_of_exchanges_and_count_it_once() {
        let exchange = |i: u64| Exchange {
            at: LabTime::from_millis(i),
            method: "GET",
            what: format!("standalone stream {i}"),
            status: 200,
            headers: vec![("← mcp-session-id".to_owned(), format!("{i:032x}"))],
        };
        let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 3).unwrap();
        sim.start();
        let mut timeline = Timeline::with_budget(1, SMALL);
        let mut listed: Vec<Exchange> = (0..64).map(exchange).collect();
        for step in 0..3_000 {
            if step % 500 == 0 {
                // A request: the list moves on by one.
                listed.remove(0);
                listed.push(exchange(64 + step));
            }
            sim.emit_background();
            sim.deliver_all();
            sim.advance(10);
            timeline.tracks[0].sync(sim.history());
            timeline.capture(&[Snapshot::from_sim(&sim, listed.clone())]);
            let counted = timeline.moments_heap;
            timeline.recount();
            assert_eq!(counted, timeline.moments_heap, "step {step}");
        }
        let last = timeline.len() - 1;
        let (newest, before) = (
            timeline.moment(last).unwrap(),
            timeline.moment(last - 1).unwrap(),
        );
        assert!(Arc::ptr_eq(
            &newest.panels[0].exchanges,
            &before.panels[0].exchanges
        ));
        assert_eq!(
            newest.panels[0].shown().exchanges,
            listed,
            "shown as listed"
        );
        assert!(
            newest.panels[0].snapshot.exchanges.is_empty(),
            "kept once, shared"
        );
        // Shared, the kept moments weigh a fraction of one list each.
        let one_list = weight(&listed);
        assert!(
            timeline.moments_heap * 4 < timeline.len() * one_list,
            "{} moments of a {one_list}-byte list weigh {}",
            timeline.len(),
            timeline.moments_heap
        );
    }
}
