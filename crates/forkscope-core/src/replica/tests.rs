use super::*;
use crate::ids::{EventId, WireCursor};
use crate::resume::ResumeRejected;
use crate::vocabulary::IdentityProof;

fn record(stream: u32, kind: StreamKind) -> StreamRecord {
    StreamRecord {
        stream: StreamId(stream),
        kind,
        key: 0xfeed,
        state: RecordState::Live,
        epoch: 3,
        owner: "a".into(),
        high_water: 10,
        oldest_kept: 1,
        call: None,
        now_ms: 5_000,
        forgotten: None,
    }
}

fn keyed(stream: u32, seq: u64, key: u64) -> String {
    WireCursor::Keyed {
        event: EventId {
            stream: StreamId(stream),
            seq,
        },
        key,
    }
    .to_string()
}

fn call(lease_until_ms: u64, done: u64) -> Option<CallRecord> {
    Some(CallRecord {
        steps: 5,
        delay_ms: 10,
        done,
        lease: Lease {
            epoch: 7,
            owner: "a".into(),
            until_ms: lease_until_ms,
        },
    })
}

#[test]
fn a_keyed_cursor_resumes_on_the_epoch_it_read() {
    let r = record(2, StreamKind::Standalone);
    let plan = decide_get(
        Policy::Fenced,
        Some(&keyed(2, 4, 0xfeed)),
        Some(&r),
        Some(&r),
    );
    assert_eq!(
        plan,
        GetPlan::Resume {
            stream: StreamId(2),
            after: 4,
            expect_epoch: Some(3),
            adopt: None,
            proof: IdentityProof::EventIdKey,
        }
    );
}

#[test]
fn fenced_refuses_what_it_cannot_prove() {
    let r = record(2, StreamKind::Standalone);
    let decide = |cursor: &str| decide_get(Policy::Fenced, Some(cursor), Some(&r), Some(&r));
    assert!(matches!(
        decide("s2-4"),
        GetPlan::Reject(ResumeRejected::MissingToken { .. })
    ));
    assert!(matches!(
        decide(&keyed(2, 4, 0xbeef)),
        GetPlan::Reject(ResumeRejected::UnknownToken)
    ));
    assert!(matches!(
        decide("s2-x"),
        GetPlan::Reject(ResumeRejected::MalformedCursor { .. })
    ));
    assert!(matches!(
        decide(&keyed(2, 11, 0xfeed)),
        GetPlan::Reject(ResumeRejected::StoreRolledBack { high_water: 10, .. })
    ));
    // A rolled-back store's skipped ids: a cursor before their end cannot be made whole.
    let mut forgot = r.clone();
    forgot.forgotten = Some((6, 8));
    let after = |seq| {
        decide_get(
            Policy::Fenced,
            Some(&keyed(2, seq, 0xfeed)),
            Some(&forgot),
            None,
        )
    };
    assert!(matches!(
        after(5),
        GetPlan::Reject(ResumeRejected::StoreForgot {
            first: 6,
            last: 8,
            ..
        })
    ));
    assert!(matches!(
        after(7),
        GetPlan::Reject(ResumeRejected::StoreForgot { .. })
    ));
    assert!(matches!(after(8), GetPlan::Resume { after: 8, .. }));
    let mut evicted = r.clone();
    evicted.oldest_kept = 7;
    assert!(matches!(
        decide_get(
            Policy::Fenced,
            Some(&keyed(2, 4, 0xfeed)),
            Some(&evicted),
            None
        ),
        GetPlan::Reject(ResumeRejected::CursorEvicted { oldest_kept: 7, .. })
    ));
    // The event just before the oldest kept one is still a gap-free cursor.
    assert!(matches!(
        decide_get(
            Policy::Fenced,
            Some(&keyed(2, 6, 0xfeed)),
            Some(&evicted),
            None
        ),
        GetPlan::Resume { after: 6, .. }
    ));
    let mut fenced = r.clone();
    fenced.state = RecordState::Fenced;
    assert!(matches!(
        decide_get(
            Policy::Fenced,
            Some(&keyed(2, 4, 0xfeed)),
            Some(&fenced),
            None
        ),
        GetPlan::Reject(ResumeRejected::StreamFenced { .. })
    ));
}

/// The grace choice for replicas, on purpose: a plain GET fences the live standalone stream at
/// once, even one attached a moment ago, where one server would refuse it `orphan_still_live`
/// inside its grace window. A replica sees epochs, not connections (see `decide.rs`).
#[test]
fn a_plain_get_fences_the_live_standalone_stream_under_fenced_only() {
    let r = record(2, StreamKind::Standalone);
    assert_eq!(
        decide_get(Policy::Fenced, None, None, Some(&r)),
        GetPlan::Open {
            fence: Some((StreamId(2), 3))
        }
    );
    assert_eq!(
        decide_get(Policy::Naive, None, None, Some(&r)),
        GetPlan::Open { fence: None }
    );
}

#[test]
fn a_call_is_adopted_only_once_its_lease_expired_by_the_store_clock() {
    let mut r = record(4, StreamKind::Request);
    r.call = call(5_001, 2);
    let cursor = keyed(4, 2, 0xfeed);
    let plan = decide_get(Policy::Fenced, Some(&cursor), Some(&r), None);
    assert!(matches!(plan, GetPlan::Resume { adopt: None, .. }));
    r.call = call(5_000, 2);
    let plan = decide_get(Policy::Fenced, Some(&cursor), Some(&r), None);
    assert!(matches!(plan, GetPlan::Resume { adopt: Some(7), .. }));
    // A finished call is replayed, never run again.
    r.state = RecordState::Finished;
    assert_eq!(adoptable(Policy::Fenced, &r), None);
    r.state = RecordState::Live;
    assert_eq!(adoptable(Policy::Naive, &r), None);
}

#[test]
fn naive_trusts_any_cursor_and_fences_nothing() {
    let r = record(2, StreamKind::Standalone);
    let plan = decide_get(Policy::Naive, Some("4"), None, Some(&r));
    assert_eq!(
        plan,
        GetPlan::Resume {
            stream: StreamId(2),
            after: 4,
            expect_epoch: None,
            adopt: None,
            proof: IdentityProof::Unchecked,
        }
    );
    let plan = decide_get(Policy::Naive, Some(&keyed(2, 99, 1)), Some(&r), Some(&r));
    assert!(matches!(plan, GetPlan::Resume { after: 10, .. }));
    assert_eq!(
        decide_get(Policy::Naive, Some("garbage"), None, Some(&r)),
        GetPlan::Open { fence: None }
    );
}

#[test]
fn the_fence_admits_the_current_epoch_alone() {
    assert!(admits(Policy::Fenced, 4, 4));
    assert!(!admits(Policy::Fenced, 5, 4));
    assert!(admits(Policy::Naive, 5, 4));
}

#[test]
fn cursor_stream_reads_the_stream_a_cursor_names() {
    assert_eq!(cursor_stream(&keyed(9, 1, 2)), Some(StreamId(9)));
    assert_eq!(cursor_stream("12"), None);
}

#[test]
fn a_keyed_resume_reads_only_the_stream_it_names() {
    let keyed_cursor = keyed(2, 4, 1);
    assert!(!needs_standalone(Policy::Fenced, Some(&keyed_cursor)));
    assert!(!needs_standalone(Policy::Fenced, Some("7")));
    assert!(needs_standalone(Policy::Fenced, None));
    assert!(needs_standalone(Policy::Naive, Some("7")));
    assert!(!needs_standalone(Policy::Naive, Some(&keyed_cursor)));
}

#[test]
fn a_delivery_is_done_only_once_a_finished_stream_is_handed_over() {
    let mut r = record(4, StreamKind::Request);
    assert!(!r.delivered_all(10), "a live stream may still grow");
    r.state = RecordState::Finished;
    assert!(!r.delivered_all(9));
    assert!(r.delivered_all(10));
}

/// A hole in what a delivery read: before the oldest kept, evicted; in ids a rollback forgot,
/// forgotten; anywhere else, lost from the log.
#[test]
fn a_hole_in_the_log_is_named_by_what_the_record_explains() {
    let mut record = record(1, StreamKind::Request);
    record.high_water = 20;
    record.oldest_kept = 5;
    assert_eq!(record.hole_in(6, [7, 8, 9]), None);
    assert_eq!(record.hole_in(2, [5, 6]), Some(LogHole::Evicted));
    assert_eq!(record.hole_in(6, [7, 9]), Some(LogHole::Missing(8, 8)));
    assert_eq!(record.hole_in(6, [10]), Some(LogHole::Missing(7, 9)));
    record.forgotten = Some((12, 15));
    assert_eq!(record.hole_in(10, [11, 16]), Some(LogHole::Forgot(12, 15)));
}
