//! The history of a lab run and the checker that judges it.
//!
//! Server and client append [`Record`]s here as things happen; the [`Checker`] reads each one
//! as it arrives. Recent entries are kept in a bounded ring for the views.

mod anomaly;
mod checker;
mod record;

pub use anomaly::{Anomaly, AnomalyKind, AppliedAt, Drift};
pub use checker::{Checker, Counters, Verdict};
pub use record::{Entry, Record};

use crate::time::LabTime;
use std::collections::VecDeque;

#[derive(Clone, Debug)]
pub struct History {
    recent: VecDeque<Entry>,
    capacity: usize,
    total: u64,
    checker: Checker,
}

impl History {
    pub fn new(capacity: usize) -> Self {
        History {
            recent: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1),
            total: 0,
            checker: Checker::default(),
        }
    }

    pub fn record(&mut self, at: LabTime, record: Record) {
        let entry = Entry { at, record };
        self.checker.observe(&entry);
        if self.recent.len() == self.capacity {
            self.recent.pop_front();
        }
        self.recent.push_back(entry);
        self.total += 1;
    }

    /// Keeps only the newest entry from now on, and lets the rest go: for a history whose
    /// verdict is all that is read (the explorer keeps labs by the hundred thousand).
    pub(crate) fn keep_verdict_only(&mut self) {
        self.capacity = 1;
        while self.recent.len() > 1 {
            self.recent.pop_front();
        }
        self.recent.shrink_to_fit();
    }

    /// The most recent entries, oldest first.
    pub fn recent(&self) -> &VecDeque<Entry> {
        &self.recent
    }

    /// Entries recorded since the start, including those no longer kept.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    pub fn verdict(&self) -> Verdict {
        self.checker.verdict()
    }
}

impl History {
    /// Canonical form: the checker's state; the log itself is for views.
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        self.checker.canonical(c);
    }
}
