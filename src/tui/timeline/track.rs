//! One lab's run as time travel keeps it: every history entry since the oldest kept, each
//! placed as a lane mark, bounded by the track's share of the run's budget.

use crate::tui::panes::lanes::{self, Placed};
use crate::tui::weight::Weigh;
use forkscope_core::LabTime;
use forkscope_core::history::{Entry, History};
use std::mem::size_of;

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
        self.sync_to(history, history.total());
    }

    /// Copies the entries `history` recorded since the last call, up to its `until`th: the
    /// count a snapshot was composed from, so a captured moment's marks and verdict agree
    /// (entries the history took after the snapshot wait for the next moment).
    pub fn sync_to(&mut self, history: &History, until: u64) {
        let total = history.total();
        let until = until.min(total);
        let fresh = until.saturating_sub(self.seen);
        if fresh == 0 {
            return;
        }
        let recent = history.recent();
        // `recent` ends at `total`; the entries after `until` are left for later.
        let upto = recent.len() - ((total - until) as usize).min(recent.len());
        let kept = (fresh as usize).min(upto);
        self.missed += fresh - kept as u64;
        self.seen = until;
        for entry in recent.range(upto - kept..upto) {
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
    pub(super) fn decided_between(&self, from: usize, to: usize) -> bool {
        let i = self.decisions.partition_point(|d| *d < from);
        self.decisions.get(i).is_some_and(|d| *d < to)
    }
}
