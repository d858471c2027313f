use super::*;
use crate::ids::SessionId;
use crate::replica::RecordState;

const IDLE: u64 = 1_000;

fn machine() -> StoreMachine {
    StoreMachine::new(Retention {
        max_sessions: 2,
        session_idle_ms: IDLE,
        finished_ms: 100,
        lease_ms: 50,
        log_events: LOG_MAXLEN,
        ..Retention::default()
    })
}

fn sid(n: u128) -> SessionId {
    SessionId::parse(&format!("{n:032x}")).unwrap()
}

fn standalone(owner: &str, fence: Option<(StreamId, u64)>) -> NewStream {
    NewStream {
        kind: StreamKind::Standalone,
        key: 7,
        owner: owner.into(),
        call: None,
        fence,
    }
}

fn call(owner: &str, rid: &str) -> NewStream {
    NewStream {
        kind: StreamKind::Request,
        key: 9,
        owner: owner.into(),
        call: Some(CallSpec {
            steps: 3,
            delay_ms: 0,
            request_id: rid.into(),
            progress_token: None,
        }),
        fence: None,
    }
}

fn epoch_writer(epoch: u64, floor: u64) -> Writer<'static> {
    Writer::Epoch {
        epoch,
        name: "A",
        background: None,
        floor,
    }
}

fn events(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("e{i}")).collect()
}

#[test]
fn a_resume_fences_the_old_holder_and_a_stale_open_opens_nothing() {
    let mut m = machine();
    let s = sid(1);
    m.open_session(&s, 0).unwrap();
    let first = m
        .open_stream(&s, &standalone("A", None), 0)
        .unwrap()
        .unwrap();
    let resumed = m.resume(&s, first, Some(1), None, "B", 1).unwrap().unwrap();
    assert_eq!(resumed.epoch, Some(2));
    let refused = m.append(&s, first, epoch_writer(1, 0), &events(1), false, 2);
    let Ok(Err(Refused::Stale(stale))) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!((stale.current, stale.holder.as_str()), (2, "B"));
    // A new standalone stream read at epoch 1 finds 2: nothing is opened, a number is used up.
    assert_eq!(
        m.open_stream(&s, &standalone("A", Some((first, 1))), 3),
        Ok(Err(2))
    );
    let next = m.open_stream(&s, &standalone("A", Some((first, 2))), 4);
    assert_eq!(next, Ok(Ok(StreamId(3))));
    let old = m.snapshot(&s, first, 5).unwrap().unwrap().record;
    assert_eq!((old.state, old.epoch), (RecordState::Fenced, 3));
    assert_eq!(m.standalone(&s, 5), Ok(Some(StreamId(3))));
}

#[test]
fn a_record_that_is_gone_refuses_with_epoch_zero_and_says_so() {
    let mut m = machine();
    let s = sid(1);
    m.open_session(&s, 0).unwrap();
    let Ok(Err(stale)) = m.resume(&s, StreamId(5), Some(1), None, "B", 0) else {
        panic!()
    };
    assert_eq!(stale.current, 0);
    assert!(stale.to_string().contains("has no record"), "{stale}");
    assert_eq!(m.adopt(&s, StreamId(5), 1, "B", 0), Ok(Adoption::Lost));
    let unfenced = Writer::Unfenced {
        name: "A",
        background: None,
    };
    assert_eq!(
        m.append(&s, StreamId(5), unfenced, &events(1), false, 0),
        Ok(Err(Refused::Closed(StreamId(5))))
    );
    assert_eq!(m.replay(&s, StreamId(5), 0, 1, 0), Ok(None));
}

#[test]
fn the_log_keeps_whole_batches_and_a_replay_reads_batches() {
    let mut m = machine();
    let s = sid(1);
    m.open_session(&s, 0).unwrap();
    let st = m
        .open_stream(&s, &standalone("A", None), 0)
        .unwrap()
        .unwrap();
    let mut hw = 0;
    for _ in 0..(LOG_MAXLEN / 16 + 2) {
        hw = m
            .append(&s, st, epoch_writer(1, hw), &events(16), false, 1)
            .unwrap()
            .unwrap();
    }
    let (snap, read) = m.replay(&s, st, 0, 2, 2).unwrap().unwrap();
    let kept = snap.record.high_water + 1 - snap.record.oldest_kept;
    assert!((LOG_MAXLEN..LOG_MAXLEN + 16).contains(&kept), "{kept}");
    assert_eq!(read.len(), 32, "two batches of 16");
    assert_eq!(read[0].0, snap.record.oldest_kept);
    // From the middle of a batch: the rest of that batch, then the next.
    let (_, read) = m.replay(&s, st, hw - 20, 2, 3).unwrap().unwrap();
    assert_eq!(read.first().map(|e| e.0), Some(hw - 19));
    assert_eq!(read.len(), 4 + 16);
}

#[test]
fn a_rolled_back_store_refuses_a_checked_write_and_records_a_skipped_gap() {
    let mut m = machine();
    let s = sid(1);
    m.open_session(&s, 0).unwrap();
    let c = m.open_stream(&s, &call("A", "1"), 0).unwrap().unwrap();
    let lease = |done, floor| Writer::Lease {
        epoch: 1,
        name: "A",
        done: Some(done),
        floor,
    };
    assert_eq!(
        m.append(&s, c, lease(2, Floor::Check(5)), &events(1), false, 1),
        Ok(Err(Refused::RolledBack {
            stream: c,
            holds: 0,
            wrote: 5
        }))
    );
    assert_eq!(
        m.append(&s, c, lease(2, Floor::SkipTo(5)), &events(1), true, 1),
        Ok(Ok(6))
    );
    let record = m.snapshot(&s, c, 2).unwrap().unwrap().record;
    assert_eq!(record.forgotten, Some((1, 5)));
    assert_eq!(record.state, RecordState::Finished);
    assert_eq!(
        m.cancel(&s, "1", 3),
        Ok(None),
        "a finished call is not cancelled"
    );
}

#[test]
fn a_lease_is_adopted_only_once_it_expired_and_only_by_one() {
    let mut m = machine();
    let s = sid(1);
    m.open_session(&s, 0).unwrap();
    let c = m.open_stream(&s, &call("A", "1"), 0).unwrap().unwrap();
    assert_eq!(
        m.adopt(&s, c, 1, "B", 10),
        Ok(Adoption::NotExpired { remaining_ms: 40 })
    );
    assert_eq!(
        m.adopt(&s, c, 1, "B", 50),
        Ok(Adoption::Adopted { lease: 2, done: 0 })
    );
    assert_eq!(m.adopt(&s, c, 1, "C", 200), Ok(Adoption::Lost));
    // A resume attaches and adopts in one step, or does neither.
    let stale = m.resume(&s, c, Some(7), Some(2), "C", 300).unwrap();
    assert_eq!(stale.map_err(|e| e.current), Err(1));
    let resumed = m
        .resume(&s, c, Some(1), Some(2), "C", 300)
        .unwrap()
        .unwrap();
    assert_eq!(
        resumed,
        Resumed {
            epoch: Some(2),
            adoption: Some(Adoption::Adopted { lease: 3, done: 0 })
        }
    );
    assert_eq!(m.cancel(&s, "1", 301), Ok(Some(c)));
    assert_eq!(m.cancel(&s, "1", 302), Ok(None));
}

#[test]
fn idle_records_go_and_the_cap_counts_live_sessions() {
    let mut m = machine();
    m.open_session(&sid(1), 0).unwrap();
    let st = m
        .open_stream(&sid(1), &standalone("A", None), 0)
        .unwrap()
        .unwrap();
    m.open_session(&sid(2), 0).unwrap();
    assert_eq!(
        m.open_session(&sid(3), IDLE - 1),
        Err(StoreFault::Full("2 sessions".into()))
    );
    // A session-only request keeps the session, not the stream it does not read.
    assert!(m.session_exists(&sid(1), IDLE - 1));
    assert_eq!(m.replay(&sid(1), st, 0, 1, IDLE + 1), Ok(None));
    // The second session went idle: its place is free.
    assert_eq!(m.open_session(&sid(3), IDLE), Ok(()));
    assert_eq!(
        m.background_number(&sid(2), IDLE),
        Err(StoreFault::SessionGone)
    );
    assert!(m.end_session(&sid(3), IDLE));
    assert!(!m.end_session(&sid(3), IDLE));
}
