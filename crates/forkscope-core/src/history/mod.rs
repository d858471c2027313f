//! The history of a lab run and the checker that judges it.
//!
//! Server and client append [`Record`]s here as things happen; the [`Checker`] reads each one
//! as it arrives and tags its [`Entry`] with what it [`Caused`]. Recent entries are kept in a
//! bounded ring for the views, which draw those tags and never judge on their own.

mod anomaly;
mod caused;
mod checker;
mod record;

pub use anomaly::{
    Across, Anomaly, AnomalyKind, AnomalyKinds, AppliedAt, Drift, Owed, Refusals, Told,
};
pub use caused::Caused;
pub use checker::{Checker, Counters, TaskLine, Verdict};
pub use record::{Entry, Record, Run};

use crate::ids::ByReplica;
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
        self.record_by(at, None, record);
    }

    /// Records a fact that a replica (of a lab of several) made.
    pub fn record_by(&mut self, at: LabTime, by: Option<ByReplica>, record: Record) {
        let mut entry = Entry {
            at,
            by,
            record,
            caused: Caused::NOTHING,
        };
        entry.caused = self.checker.observe(&entry);
        self.total += 1;
        if self.capacity == 0 {
            return;
        }
        if self.recent.len() == self.capacity {
            self.recent.pop_front();
        }
        self.recent.push_back(entry);
    }

    /// Keeps no entry from now on (the checker still judges each): for a history whose verdict
    /// is all that is read. The explorer keeps labs by the hundred thousand and copies one at
    /// every step; an empty ring copies without allocating.
    pub(crate) fn keep_verdict_only(&mut self) {
        self.capacity = 0;
        self.recent = VecDeque::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::sim::Sim;

    /// Each anomaly the checker reports tags the entry that caused it, in order and nothing
    /// more: the fork and the loss on the orphan emit, each duplicate on its delivery, naming
    /// the first application.
    #[test]
    fn every_anomaly_tags_the_entry_that_caused_it() {
        let sim = Sim::seed_incident(Policy::Naive);
        let history = sim.history();
        let tagged: Vec<&Anomaly> = history
            .recent()
            .iter()
            .flat_map(|e| e.caused.anomalies())
            .collect();
        let reported: Vec<&Anomaly> = history.checker().anomalies().iter().collect();
        assert_eq!(tagged, reported);
        let orphan_emit = history
            .recent()
            .iter()
            .find(|e| e.caused.kinds().contains(AnomalyKind::Fork))
            .expect("the fork is tagged");
        assert!(matches!(orphan_emit.record, Record::Emitted { .. }));
        assert!(orphan_emit.caused.kinds().contains(AnomalyKind::Lost));
        let duplicate = history
            .recent()
            .iter()
            .find(|e| e.caused.kinds().contains(AnomalyKind::Duplicate))
            .expect("a duplicate is tagged");
        let Record::Delivered { event, .. } = duplicate.record else {
            panic!("a duplicate is a delivery: {duplicate:?}");
        };
        let Some(Anomaly::Duplicate { first, second, .. }) = duplicate.caused.anomalies().first()
        else {
            panic!("{duplicate:?}");
        };
        assert_eq!(second.event, event);
        assert_ne!(first.event, event, "against the first application");
    }

    /// Across replicas: a send from the replica the client left is a fork named by both
    /// replicas, unless it was made on an older epoch than the attach (the store ordered it
    /// first, and the new holder replays it).
    #[test]
    fn a_send_from_the_replica_the_client_left_is_a_fork_across_replicas() {
        use crate::ids::{ByReplica, IdScheme, ReplicaId, SessionId, SplitMix64, StreamId};
        use crate::vocabulary::StreamKind;
        let session = SessionId::generate(&mut SplitMix64::new(9));
        let (a, b) = (ReplicaId::new(0).unwrap(), ReplicaId::new(1).unwrap());
        let stream = StreamId(1);
        let run = |fenced: bool| {
            let by = |replica, epoch| {
                Some(ByReplica {
                    replica,
                    epoch: fenced.then_some(epoch),
                })
            };
            let mut history = History::new(64);
            let at = LabTime::ZERO;
            history.record_by(at, by(a, 1), Record::SessionOpened { session });
            history.record_by(
                at,
                by(a, 1),
                Record::StreamOpened {
                    session,
                    stream,
                    stream_kind: StreamKind::Standalone,
                    ids: IdScheme::Keyed,
                    flagged_new: fenced,
                    request: None,
                },
            );
            let attached = Record::Attached {
                session,
                stream,
                connection: crate::ids::ConnectionId(1),
            };
            history.record_by(at, by(a, 1), attached.clone());
            let emit = |seq| Record::Emitted {
                session,
                stream,
                seq,
                key: format!("{}:bg:{seq}", session.short()).into(),
                copied: false,
            };
            history.record_by(at, by(a, 1), emit(1));
            history.record_by(at, by(b, 2), attached);
            // A's send on the epoch it held, recorded after B's attach.
            history.record_by(at, by(a, 1), emit(2));
            history.record_by(at, by(a, 1), emit(3));
            history
        };
        let naive = run(false);
        assert_eq!(naive.checker().count(AnomalyKind::Fork), 1);
        // Counted once, drawn on every send the orphan received.
        let sends_tagged = naive
            .recent()
            .iter()
            .filter(|e| e.caused.kinds().contains(AnomalyKind::Fork))
            .count();
        assert_eq!(sends_tagged, 2);
        let fork = naive.checker().anomalies()[0].to_string();
        assert!(
            fork.contains("from replica A") && fork.contains("on replica B"),
            "{fork}"
        );
        let fenced = run(true);
        assert_eq!(fenced.checker().count(AnomalyKind::Fork), 0);
    }
}
