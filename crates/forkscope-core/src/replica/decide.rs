//! A GET that reached a replica: open a standalone stream, resume one, or refuse. Identity comes
//! from the key a keyed `Last-Event-ID` carries; whether the named stream may be resumed from
//! the cursor is the single-process fence's own rule ([`resumable`]) on the record's facts; and
//! the plan carries an epoch to commit on, so a resume on one replica fences the attachment on
//! another.

use super::{RecordState, StreamRecord, lease};
use crate::ids::{StreamId, WireCursor};
use crate::policy::Policy;
use crate::resume::fenced::resumable;
use crate::resume::{ResumeRejected, shown};
use crate::vocabulary::{IdentityProof, StreamKind};

/// What a replica does with a GET, for the store to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetPlan {
    /// A new standalone stream. `fence` is the session's current standalone stream and the epoch
    /// it was read at: the commit fences it in the same script (condition 2 of the seed).
    Open {
        fence: Option<(StreamId, u64)>,
    },
    /// Deliver `stream` from after `after`. `expect_epoch` is the compare-and-set condition that
    /// bumps the stream epoch (`None` under naive: nothing is fenced). `adopt` is the lease epoch
    /// of a call whose runner's lease has expired: this replica takes the call over.
    Resume {
        stream: StreamId,
        after: u64,
        expect_epoch: Option<u64>,
        adopt: Option<u64>,
        /// What proved the stream's identity: the decision's word, for the record.
        proof: IdentityProof,
    },
    Reject(ResumeRejected),
}

/// The stream a `Last-Event-ID` names, for the adapter to read before it asks [`decide_get`].
pub fn cursor_stream(last_event_id: &str) -> Option<StreamId> {
    WireCursor::parse(last_event_id)
        .and_then(WireCursor::event)
        .map(|e| e.stream)
}

/// Whether [`decide_get`] reads the session's standalone stream for this GET: under fenced only
/// a plain GET (whose new stream fences it), under naive also a bare id (which names no stream).
/// A resume with a keyed id needs only the stream it names: one store read fewer.
pub fn needs_standalone(policy: Policy, last_event_id: Option<&str>) -> bool {
    match last_event_id {
        None => true,
        Some(raw) => !policy.fences() && cursor_stream(raw).is_none(),
    }
}

/// `named`: the record of the stream the cursor names, if the store has it. `standalone`: the
/// session's current standalone stream, if any.
pub fn decide_get(
    policy: Policy,
    last_event_id: Option<&str>,
    named: Option<&StreamRecord>,
    standalone: Option<&StreamRecord>,
) -> GetPlan {
    match policy {
        Policy::Fenced => fenced(last_event_id, named, standalone),
        // Naive: a replica starts from a `ReplicaPolicy` (fenced or naive), so no SDK policy
        // reaches a replica's decision.
        _ => naive(last_event_id, named, standalone),
    }
}

/// The fence on a store record. One choice differs from the single server's on purpose: a
/// plain GET fences the session's live standalone stream at once, with no grace window. A
/// replica cannot see another replica's connection, only the record's epoch, so it cannot tell
/// a stream still being read from an orphan; the epoch bump ends the old delivery at its next
/// look at the record (within one blocked read), and nothing emitted after it lands there.
fn fenced(
    last_event_id: Option<&str>,
    named: Option<&StreamRecord>,
    standalone: Option<&StreamRecord>,
) -> GetPlan {
    let Some(raw) = last_event_id else {
        return GetPlan::Open {
            fence: standalone
                .filter(|s| s.state == RecordState::Live)
                .map(|s| (s.stream, s.epoch)),
        };
    };
    let reject = GetPlan::Reject;
    let Some(cursor) = WireCursor::parse(raw) else {
        return reject(ResumeRejected::MalformedCursor { shown: shown(raw) });
    };
    let (Some(event), Some(key)) = (cursor.event(), cursor.key()) else {
        // An id that carries no key proves nothing about which stream the client held.
        return reject(ResumeRejected::MissingToken { cursor: shown(raw) });
    };
    let Some(record) = named.filter(|r| r.stream == event.stream && r.key == key) else {
        return reject(ResumeRejected::UnknownToken);
    };
    // Identity is proven (the key); the rest is the single server's fence, on the record.
    if let Err(why) = resumable(&record.facts(), event.seq) {
        return reject(why);
    }
    GetPlan::Resume {
        stream: record.stream,
        after: event.seq,
        expect_epoch: Some(record.epoch),
        adopt: adoptable(Policy::Fenced, record),
        proof: IdentityProof::EventIdKey,
    }
}

/// The SDKs' shared stores: trust the cursor, fence nothing, never adopt a call.
fn naive(
    last_event_id: Option<&str>,
    named: Option<&StreamRecord>,
    standalone: Option<&StreamRecord>,
) -> GetPlan {
    let cursor = last_event_id.and_then(WireCursor::parse);
    let record = match cursor.and_then(WireCursor::event) {
        Some(event) => named.filter(|r| r.stream == event.stream),
        // A bare id names no stream: take the session's standalone one.
        None if cursor.is_some() => standalone,
        None => None,
    };
    let Some(record) = record else {
        return GetPlan::Open { fence: None };
    };
    // An id ahead replays nothing; one evicted replays what is left, silently, with a gap.
    let asked = cursor.map_or(0, WireCursor::seq);
    let after = asked
        .min(record.high_water)
        .max(record.oldest_kept.saturating_sub(1));
    GetPlan::Resume {
        stream: record.stream,
        after,
        expect_epoch: None,
        adopt: None,
        proof: IdentityProof::Unchecked,
    }
}

/// Whether a call whose runner died can be taken over by another replica under `policy`: under
/// naive a call dies with its replica, as in the SDKs.
pub fn adopts_orphaned_calls(policy: Policy) -> bool {
    policy != Policy::Naive
}

/// The lease epoch to take a call over on, when `record` is a call still running whose lease
/// has expired by the store's clock.
pub fn adoptable(policy: Policy, record: &StreamRecord) -> Option<u64> {
    if !adopts_orphaned_calls(policy) || record.kind != StreamKind::Request {
        return None;
    }
    let call = record.call.as_ref()?;
    let running = record.state == RecordState::Live && call.done <= call.steps;
    (running && lease::lease_state(&call.lease, record.now_ms) == lease::LeaseState::Expired)
        .then_some(call.lease.epoch)
}
