//! The fence across replicas: what a replica decides on a snapshot of a stream it read from the
//! shared store. The store then commits the decision by compare-and-set on the snapshot's epoch,
//! and on a conflict the replica reads again and decides again. Decide here, commit there.
//!
//! Two epochs, two fencing tokens (Kleppmann, "How to do distributed locking"):
//! - the **stream epoch** says which attachment may deliver the stream and emit on it. Every
//!   resume bumps it, so the replica still holding the half-open original is refused at its next
//!   emit or delivery: the fork across machines cannot happen.
//! - the **lease epoch** says which replica runs a tool call. A call stays where it runs when its
//!   client reconnects elsewhere; it moves only when its lease has expired by the store's clock,
//!   and the adoption bumps the lease epoch, so a partitioned runner's late steps are refused.
//!
//! The naive replica does what the SDKs' shared stores do: the store replays, but nothing is
//! fenced and live events reach only connections on the replica that wrote them.

mod decide;
mod lease;
pub mod store;

pub use decide::{
    GetPlan, adoptable, adopts_orphaned_calls, cursor_stream, decide_get, needs_standalone,
};
pub use lease::{DEFAULT_LEASE_MS, LeaseState, lease_state};

use crate::ids::StreamId;
use crate::policy::Policy;
use crate::resume::fenced::{Ended, StreamFacts};
use crate::time::LabTime;
use crate::vocabulary::StreamKind;
use serde::{Deserialize, Serialize};

/// Where a stream is in its life, as the store records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    Live,
    /// A tool call's stream whose result is in the log: replayable, nothing more is emitted.
    Finished,
    /// Replaced by a newer standalone stream of its session: it resumes nothing.
    Fenced,
}

/// A tool call's lease: the replica running it, and until when by the store's clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub epoch: u64,
    pub owner: String,
    pub until_ms: u64,
}

/// A tool call's progress as committed to the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    pub steps: u64,
    pub delay_ms: u64,
    /// Steps committed so far (the result is step `steps + 1`).
    pub done: u64,
    pub lease: Lease,
}

/// One stream as a replica read it from the store: what every decision here is taken on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    pub stream: StreamId,
    pub kind: StreamKind,
    /// The key every keyed event id of the stream carries (64 bits of its token).
    pub key: u64,
    pub state: RecordState,
    /// The stream epoch: bumped by every resume.
    pub epoch: u64,
    /// The replica whose attachment holds the current epoch.
    pub owner: String,
    /// Newest sequence number issued by the store; 0: only the priming event.
    pub high_water: u64,
    /// Oldest sequence the log still keeps (`high_water + 1` when it keeps none).
    pub oldest_kept: u64,
    pub call: Option<CallRecord>,
    /// The store's clock when the snapshot was read, in milliseconds.
    pub now_ms: u64,
    /// Ids the store handed out and then forgot (it was rolled back), `(first, last)`, skipped
    /// by the writer that found it so none is issued twice: a cursor before `last` cannot be
    /// made whole.
    pub forgotten: Option<(u64, u64)>,
}

impl StreamRecord {
    /// Whether a delivery that has handed over everything up to `after` is done: the stream
    /// finished (a call's result is in the log) and nothing after `after` is left.
    pub fn delivered_all(&self, after: u64) -> bool {
        self.state == RecordState::Finished && after >= self.high_water
    }

    /// What the fence reads of the record ([`crate::resume::fenced::resumable`]). A store can
    /// be restored from an older state, so a cursor past its mark was forgotten, not made up.
    pub fn facts(&self) -> StreamFacts {
        StreamFacts {
            stream: self.stream,
            ended: (self.state == RecordState::Fenced).then_some(Ended::Fenced {
                at: LabTime::from_millis(self.now_ms),
            }),
            high_water: self.high_water,
            oldest_kept: self.oldest_kept,
            forgotten: self.forgotten,
            restorable: true,
        }
    }

    /// The ids a rolled-back store forgot that a delivery from `after` would still need: then
    /// the stream cannot be delivered whole from there.
    pub fn forgotten_after(&self, after: u64) -> Option<(u64, u64)> {
        self.facts().forgotten_after(after)
    }

    /// Whether events read from the log after `after` (their ids, in order) follow on from it
    /// with none missing. A hole the record explains is a rollback's forgotten ids, or ids
    /// older than the oldest the log keeps (evicted by its bound); any other hole is an entry
    /// the log lost (deleted, or never readable): a delivery hands nothing on past it as if it
    /// were whole.
    pub fn hole_in(&self, after: u64, seqs: impl IntoIterator<Item = u64>) -> Option<LogHole> {
        let mut expected = after + 1;
        for seq in seqs {
            if seq != expected {
                let (first, last) = (expected, seq.saturating_sub(1));
                return Some(match self.forgotten_after(expected - 1) {
                    Some(forgot) => LogHole::Forgot(forgot.0, forgot.1),
                    None if expected < self.oldest_kept => LogHole::Evicted,
                    None => LogHole::Missing(first, last),
                });
            }
            expected = seq + 1;
        }
        None
    }
}

/// Why events read from a stream's log do not follow on ([`StreamRecord::hole_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogHole {
    /// A rolled-back store forgot these ids.
    Forgot(u64, u64),
    /// The log's bound dropped the ids after the cursor before they were delivered.
    Evicted,
    /// The log lost these ids' entries: deleted, or unreadable.
    Missing(u64, u64),
}

/// Whether the store takes a write carrying `writer`'s epoch on a record at `stored`: the fence.
/// Under the naive policy every write lands, as in the SDKs' stores. The in-memory store calls
/// this; the Redis store's scripts compare the same two numbers, atomically.
pub fn admits(policy: Policy, stored: u64, writer: u64) -> bool {
    policy == Policy::Naive || stored == writer
}

/// The policies a replica runs: the fence across replicas, or the SDKs' shared stores (no
/// fence). The SDK policies model one server — none has a store a second replica could read —
/// so a replica is only ever made from one of these, at the one place it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaPolicy {
    Fenced,
    Naive,
}

/// A policy no replica runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "replicas run fenced or naive, not {0}: the SDK policies model one server (none has a store a second replica could read)"
)]
pub struct NotAReplicaPolicy(pub Policy);

impl TryFrom<Policy> for ReplicaPolicy {
    type Error = NotAReplicaPolicy;

    fn try_from(policy: Policy) -> Result<Self, Self::Error> {
        match policy {
            Policy::Fenced => Ok(ReplicaPolicy::Fenced),
            Policy::Naive => Ok(ReplicaPolicy::Naive),
            sdk => Err(NotAReplicaPolicy(sdk)),
        }
    }
}

impl std::fmt::Display for ReplicaPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Policy::from(*self).fmt(f)
    }
}

impl From<ReplicaPolicy> for Policy {
    fn from(policy: ReplicaPolicy) -> Policy {
        match policy {
            ReplicaPolicy::Fenced => Policy::Fenced,
            ReplicaPolicy::Naive => Policy::Naive,
        }
    }
}

/// Whether a store forgot ids it already handed out: its high-water mark is below `floor`, the
/// mark a fenced writer's own last write returned. Only a store restored from an older state (a
/// snapshot, an async replica promoted by failover) goes backwards; writing on from its mark
/// would issue ids the client already holds a second time, with other content. A fenced write is
/// refused then; the Redis scripts compare the same two numbers.
pub fn forgot(high_water: u64, floor: u64) -> bool {
    high_water < floor
}

/// A write the store refused: the writer's epoch is stale. Counted as a late emit refused.
/// `current` 0 (no record holds it: every stream starts at 1) says the record is gone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct StaleEpoch {
    pub stream: StreamId,
    pub writer: String,
    pub writer_epoch: u64,
    pub current: u64,
    pub holder: String,
}

impl std::fmt::Display for StaleEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let StaleEpoch {
            stream,
            writer,
            writer_epoch,
            current,
            holder,
        } = self;
        write!(
            f,
            "late write refused: replica {writer} wrote at epoch {writer_epoch}, but "
        )?;
        match current {
            0 => write!(
                f,
                "stream {stream} has no record (it expired or its session ended)"
            ),
            _ => write!(
                f,
                "stream {stream} is at epoch {current} (held by {holder})"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
