//! The dashboard's memory of a run, for time travel: every history entry of each lab (the
//! core keeps only a ring) with its lane mark, and a [`Moment`] — what every pane showed —
//! each time something happened. Scrubbing redraws a moment; the lanes of a moment are the
//! run's marks up to it, so they scroll back over the whole run.

use super::panes::lanes::{Classifier, Placed};
use super::weight::Weigh;
use crate::lab::Snapshot;
use forkscope_core::history::{Entry, History};
use std::mem::size_of;

/// Entries kept per lab; past it the oldest quarter goes (a run of hours at the default rate
/// stays whole).
const MAX_ENTRIES: usize = 1_000_000;
/// Moments kept; past it every other ordinary moment of the older part goes, so the whole run
/// stays reachable, coarser the older it is. Decisions and violations are never thinned.
const MAX_MOMENTS: usize = 4_000;

/// One lab's whole run.
#[derive(Debug, Default)]
pub struct Track {
    entries: Vec<Entry>,
    placed: Vec<Placed>,
    /// Absolute index of `entries[0]` / `placed[0]` (older ones were let go).
    entry_base: usize,
    placed_base: usize,
    /// Absolute indices of the entries that are decisions.
    decisions: Vec<usize>,
    classifier: Classifier,
    /// The heap bytes of the kept entries (their keys), kept as entries come and go.
    entries_heap: usize,
    /// How many of the core's entries were copied (or missed).
    seen: u64,
    /// Entries that left the core's ring before the dashboard copied them.
    pub missed: u64,
}

impl Track {
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
        if self.entries.len() > MAX_ENTRIES {
            self.forget(MAX_ENTRIES / 4);
        }
    }

    pub fn push(&mut self, entry: Entry) {
        let index = self.entry_base + self.entries.len();
        if entry.record.is_decision() {
            self.decisions.push(index);
        }
        self.placed.extend(self.classifier.place(index, &entry));
        self.placed.extend(Classifier::resumed(index, &entry));
        self.entries_heap += entry.heap();
        self.entries.push(entry);
    }

    fn forget(&mut self, count: usize) {
        self.entries_heap -= self.entries[..count].iter().map(Weigh::heap).sum::<usize>();
        self.entries.drain(..count);
        self.entry_base += count;
        let marks = self.placed.partition_point(|p| p.entry < self.entry_base);
        self.placed.drain(..marks);
        self.placed_base += marks;
        self.decisions.retain(|d| *d >= self.entry_base);
    }

    /// What the track holds, in bytes (see [`super::weight`]): its vectors as allocated, the
    /// entries' keys, and what the classifier remembers.
    pub fn weight(&self) -> usize {
        self.entries.capacity() * size_of::<Entry>()
            + self.entries_heap
            + self.placed.capacity() * size_of::<Placed>()
            + self.decisions.capacity() * size_of::<usize>()
            + self.classifier.heap()
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
    /// Without `recent`: the lanes come from the track.
    pub snapshot: Snapshot,
    /// Absolute counts of the track's entries and marks at the moment.
    pub entries: usize,
    pub placed: usize,
}

impl Weigh for Frozen {
    fn heap(&self) -> usize {
        self.snapshot.heap()
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
    /// What the moment holds on the heap, in bytes, weighed once when captured.
    heap: usize,
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

#[derive(Debug, Default)]
pub struct Timeline {
    pub tracks: Vec<Track>,
    moments: Vec<Moment>,
    /// The sum of the kept moments' `heap`.
    moments_heap: usize,
}

impl Timeline {
    pub fn new(labs: usize) -> Timeline {
        Timeline {
            tracks: (0..labs).map(|_| Track::default()).collect(),
            moments: Vec::new(),
            moments_heap: 0,
        }
    }

    /// What the kept run holds, in bytes (see [`super::weight`]): every track and moment.
    pub fn weight(&self) -> usize {
        self.tracks.iter().map(Track::weight).sum::<usize>()
            + self.moments.capacity() * size_of::<Moment>()
            + self.moments_heap
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

    /// Records what the labs show now (their tracks already synced).
    pub fn capture(&mut self, snapshots: &[Snapshot]) {
        let previous = self.moments.last();
        let mut decision = false;
        let panels = snapshots
            .iter()
            .zip(&self.tracks)
            .enumerate()
            .map(|(i, (snap, track))| {
                let (entries, placed) = track.ends();
                let before = previous
                    .and_then(|m| m.panels.get(i))
                    .map_or(0, |f| f.entries);
                decision |= track.decided_between(before, entries);
                let mut snapshot = snap.clone();
                snapshot.recent = Vec::new();
                Frozen {
                    snapshot,
                    entries,
                    placed,
                }
            })
            .collect::<Vec<Frozen>>();
        let violation = snapshots.iter().any(|s| !s.view.verdict.clean);
        let heap = panels.heap();
        self.moments_heap += heap;
        self.moments.push(Moment {
            panels,
            violation,
            decision,
            heap,
        });
        if self.moments.len() > MAX_MOMENTS {
            self.thin();
        }
    }

    /// Lets every other ordinary moment of the older three quarters go.
    fn thin(&mut self) {
        let older = self.moments.len() * 3 / 4;
        let first_violation = self.moments.iter().position(|m| m.violation);
        let mut index = 0;
        self.moments.retain(|m| {
            let keep =
                index >= older || index % 2 == 0 || m.decision || Some(index) == first_violation;
            index += 1;
            keep
        });
        if self.moments.len() > MAX_MOMENTS {
            // All decisions: keep the newest.
            let excess = self.moments.len() - MAX_MOMENTS;
            self.moments.drain(..excess);
        }
        self.moments_heap = self.moments.iter().map(|m| m.heap).sum();
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
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabConfig, Policy};

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

    #[test]
    fn thinning_keeps_the_whole_run_reachable() {
        let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 3).unwrap();
        sim.start();
        let mut timeline = Timeline::new(1);
        for _ in 0..(MAX_MOMENTS + 500) {
            sim.emit_background();
            sim.deliver_all();
            sim.advance(10);
            timeline.tracks[0].sync(sim.history());
            timeline.capture(&[Snapshot::from_sim(&sim, Vec::new())]);
        }
        assert!(timeline.len() <= MAX_MOMENTS);
        let first = timeline.moment(0).unwrap().panels[0].snapshot.view.at;
        assert!(
            first.as_millis() <= 10,
            "the start of the run is still there"
        );
    }
}
