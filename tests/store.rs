//! One suite, two stores: every test here runs against the in-memory store and against a real
//! `redis-server` (started on a free port, stopped on every path). The Redis half is skipped
//! only when no `redis-server` is installed and `FORKSCOPE_REQUIRE_SERVICES` is unset; CI sets it.

mod common;

use common::services::RedisServer;
use forkscope::store::{
    Adoption, CallSpec, Floor, LOG_MAXLEN, NewStream, Refused, Retention, SessionId, Store,
    StoreError, Writer, new_session_id,
};
use forkscope_core::replica::RecordState;
use forkscope_core::vocabulary::LogLevel;
use forkscope_core::{StreamId, StreamKind};

/// A store under test, and the Redis process behind it, if any.
struct Backend {
    store: Store,
    redis: Option<RedisServer>,
}

fn retention(lease_ms: u64) -> Retention {
    Retention {
        max_sessions: 10_000,
        session_idle_ms: 60_000,
        finished_ms: 60_000,
        lease_ms,
        log_events: LOG_MAXLEN,
        ..Retention::default()
    }
}

async fn memory(lease_ms: u64) -> Option<Backend> {
    Some(Backend {
        store: Store::memory(retention(lease_ms)),
        redis: None,
    })
}

async fn redis(lease_ms: u64) -> Option<Backend> {
    let redis = RedisServer::start()?;
    let store = Store::redis(&redis.url(), retention(lease_ms))
        .await
        .expect("connect to the test redis-server");
    Some(Backend {
        store,
        redis: Some(redis),
    })
}

/// Runs each listed test against both stores.
macro_rules! both_stores {
    ($($name:ident($lease:expr)),* $(,)?) => {
        mod on_memory {
            $(
                #[tokio::test]
                async fn $name() {
                    if let Some(b) = super::memory($lease).await {
                        super::$name(b).await;
                    }
                }
            )*
        }
        mod on_redis {
            $(
                #[tokio::test]
                async fn $name() {
                    if let Some(b) = super::redis($lease).await {
                        super::$name(b).await;
                    }
                }
            )*
        }
    };
}

both_stores!(
    sessions_open_and_end(2_000),
    stream_ids_come_from_the_store(2_000),
    a_resume_fences_the_old_epoch(2_000),
    a_new_standalone_stream_fences_the_old_one(2_000),
    a_call_moves_only_when_its_lease_expired(150),
    a_blocked_read_wakes_on_an_append(2_000),
    a_finished_stream_takes_nothing_more(2_000),
    the_log_is_capped(2_000),
    a_replay_read_carries_its_record(2_000),
    a_rolled_back_store_refuses_a_fenced_writer(2_000),
    a_record_no_replica_wrote_is_corrupt_not_unavailable(2_000),
    a_log_level_above_info_withholds_background_events(2_000),
);

async fn open(b: &Backend) -> SessionId {
    let session = new_session_id();
    b.store.open_session(&session).await.expect("open session");
    session
}

/// A standalone stream opened by replica a, fencing nothing.
async fn open_standalone(b: &Backend, session: &SessionId) -> StreamId {
    let opened = b.store.open_stream(session, &standalone("a", None)).await;
    opened
        .expect("the store answers")
        .expect("nothing to fence")
}

/// Replica a's emit on the stream epoch `epoch`.
fn by_a(epoch: u64) -> Writer<'static> {
    Writer::Epoch {
        epoch,
        name: "a",
        background: None,
        floor: 0,
    }
}

fn standalone(owner: &str, fence: Option<(StreamId, u64)>) -> NewStream {
    NewStream {
        kind: StreamKind::Standalone,
        key: 42,
        owner: owner.into(),
        call: None,
        fence,
    }
}

fn call(owner: &str, steps: u64) -> NewStream {
    NewStream {
        kind: StreamKind::Request,
        key: 7,
        owner: owner.into(),
        call: Some(CallSpec {
            steps,
            delay_ms: 0,
            request_id: "3".into(),
            progress_token: Some("\"t\"".into()),
        }),
        fence: None,
    }
}

fn events(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{{\"n\":{i}}}")).collect()
}

async fn sessions_open_and_end(b: Backend) {
    let session = open(&b).await;
    assert!(b.store.session_exists(&session).await.unwrap());
    let other = new_session_id();
    assert!(!b.store.session_exists(&other).await.unwrap());
    assert_eq!(
        b.store
            .open_stream(&other, &standalone("a", None))
            .await
            .unwrap_err(),
        StoreError::SessionGone
    );
    assert!(b.store.end_session(&session).await.unwrap());
    assert!(!b.store.session_exists(&session).await.unwrap());
    assert!(!b.store.end_session(&session).await.unwrap());
}

async fn stream_ids_come_from_the_store(b: Backend) {
    let session = open(&b).await;
    let s1 = b.store.open_stream(&session, &standalone("a", None)).await;
    let s2 = b.store.open_stream(&session, &call("b", 3)).await;
    assert_eq!(s1.unwrap(), Ok(StreamId(1)));
    assert_eq!(s2.unwrap(), Ok(StreamId(2)));
    let w = by_a(1);
    let hw = b
        .store
        .append(&session, StreamId(1), w, &events(3), false)
        .await;
    assert_eq!(hw.unwrap(), Ok(3));
    let hw = b
        .store
        .append(&session, StreamId(1), w, &events(2), false)
        .await;
    assert_eq!(hw.unwrap(), Ok(5), "ids continue, never reused");
    let snap = b.store.snapshot(&session, StreamId(1)).await.unwrap();
    let record = snap.expect("the stream's record").record;
    assert_eq!(
        (record.high_water, record.oldest_kept, record.epoch),
        (5, 1, 1)
    );
    assert_eq!((record.key, record.owner.as_str()), (42, "a"));
    let snap = b.store.snapshot(&session, StreamId(2)).await.unwrap();
    let snap = snap.expect("the call's record");
    let spec = snap.call.expect("a call keeps its spec");
    assert_eq!((spec.steps, spec.request_id.as_str()), (3, "3"));
    assert_eq!(spec.progress_token.as_deref(), Some("\"t\""));
    assert_eq!(snap.record.call.unwrap().lease.owner, "b");
    assert!(
        b.store
            .snapshot(&session, StreamId(9))
            .await
            .unwrap()
            .is_none()
    );
}

async fn a_resume_fences_the_old_epoch(b: Backend) {
    let session = open(&b).await;
    let s = open_standalone(&b, &session).await;
    let resumed = b
        .store
        .resume(&session, s, Some(1), None, "b")
        .await
        .unwrap();
    assert_eq!(resumed.map(|r| r.epoch), Ok(Some(2)));
    // A second resume decided on the same snapshot loses the race: read again, decide again.
    let lost = b
        .store
        .resume(&session, s, Some(1), None, "c")
        .await
        .unwrap();
    assert_eq!(lost.unwrap_err().current, 2);
    let late = b
        .store
        .append(&session, s, by_a(1), &events(1), false)
        .await
        .unwrap();
    match late {
        Err(Refused::Stale(stale)) => {
            assert_eq!((stale.writer.as_str(), stale.writer_epoch), ("a", 1));
            assert_eq!((stale.current, stale.holder.as_str()), (2, "b"));
        }
        other => panic!("a write on the old epoch must be refused, got {other:?}"),
    }
    let record = b.store.snapshot(&session, s).await.unwrap().unwrap().record;
    assert_eq!(record.high_water, 0, "the refused write left nothing");
    // The naive replica writes without an epoch, as the SDKs' stores do.
    let unfenced = Writer::Unfenced {
        name: "a",
        background: None,
    };
    let landed = b
        .store
        .append(&session, s, unfenced, &events(1), false)
        .await;
    assert_eq!(landed.unwrap(), Ok(1));
}

async fn a_new_standalone_stream_fences_the_old_one(b: Backend) {
    let session = open(&b).await;
    let s1 = open_standalone(&b, &session).await;
    // Decided on a stale epoch: refused, nothing opened.
    let stale = b
        .store
        .open_stream(&session, &standalone("b", Some((s1, 7))))
        .await
        .unwrap();
    assert_eq!(stale, Err(1));
    let s2 = b
        .store
        .open_stream(&session, &standalone("b", Some((s1, 1))))
        .await
        .unwrap()
        .expect("fenced on the epoch read");
    assert_eq!(b.store.standalone(&session).await.unwrap(), Some(s2));
    let old = b
        .store
        .snapshot(&session, s1)
        .await
        .unwrap()
        .unwrap()
        .record;
    assert_eq!((old.state, old.epoch), (RecordState::Fenced, 2));
    let w = by_a(1);
    let late = b.store.append(&session, s1, w, &events(1), false).await;
    assert!(matches!(late.unwrap(), Err(Refused::Stale(_))));
}

async fn a_call_moves_only_when_its_lease_expired(b: Backend) {
    let session = open(&b).await;
    let s = b
        .store
        .open_stream(&session, &call("a", 10))
        .await
        .unwrap()
        .unwrap();
    let step = |epoch, name, done| Writer::Lease {
        epoch,
        name,
        done: Some(done),
        floor: Floor::Check(0),
    };
    let hw = b
        .store
        .append(&session, s, step(1, "a", 2), &events(2), false)
        .await;
    assert_eq!(hw.unwrap(), Ok(2));
    // Polls the store until the lease has run out by the store's clock (bounded).
    let mut adopted = None;
    for _ in 0..200 {
        match b.store.adopt(&session, s, 1, "b").await.unwrap() {
            Adoption::NotExpired { remaining_ms } => {
                assert!(remaining_ms <= 150);
                tokio::time::sleep(std::time::Duration::from_millis(remaining_ms.max(5))).await;
            }
            other => {
                adopted = Some(other);
                break;
            }
        }
    }
    assert_eq!(adopted, Some(Adoption::Adopted { lease: 2, done: 2 }));
    // The partitioned runner comes back: its late step is refused, naming the new holder.
    let late = b
        .store
        .append(&session, s, step(1, "a", 3), &events(1), false)
        .await
        .unwrap();
    match late {
        Err(Refused::Stale(stale)) => assert_eq!((stale.current, stale.holder.as_str()), (2, "b")),
        other => panic!("a step on the old lease must be refused, got {other:?}"),
    }
    assert_eq!(
        b.store.adopt(&session, s, 1, "c").await.unwrap(),
        Adoption::Lost
    );
    let hw = b
        .store
        .append(&session, s, step(2, "b", 3), &events(1), false)
        .await;
    assert_eq!(hw.unwrap(), Ok(3));
    let record = b.store.snapshot(&session, s).await.unwrap().unwrap().record;
    let call = record.call.unwrap();
    assert_eq!((call.done, call.lease.owner.as_str()), (3, "b"));
}

async fn a_blocked_read_wakes_on_an_append(b: Backend) {
    let session = open(&b).await;
    let s = open_standalone(&b, &session).await;
    let w = by_a(1);
    b.store
        .append(&session, s, w, &events(2), false)
        .await
        .unwrap()
        .unwrap();
    let mut reader = b.store.reader().await.unwrap();
    let got = reader.read(&session, s, 0, 10).await.unwrap();
    assert_eq!(got.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 2]);
    let got = reader.read(&session, s, 1, 10).await.unwrap();
    assert_eq!(got.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2]);
    // Nothing after 2 yet: the read blocks until the append lands (re-armed if it times out).
    let store = b.store.clone();
    let session2 = session;
    let writer = tokio::spawn(async move {
        let w = by_a(1);
        store.append(&session2, s, w, &events(1), false).await
    });
    let mut got = Vec::new();
    for _ in 0..40 {
        got = reader.read(&session, s, 2, 10).await.unwrap();
        if !got.is_empty() {
            break;
        }
    }
    writer.await.unwrap().unwrap().unwrap();
    assert_eq!(got, vec![(3, "{\"n\":1}".to_owned())]);
}

async fn a_finished_stream_takes_nothing_more(b: Backend) {
    let session = open(&b).await;
    let s = b
        .store
        .open_stream(&session, &call("a", 1))
        .await
        .unwrap()
        .unwrap();
    let w = Writer::Lease {
        epoch: 1,
        name: "a",
        done: Some(1),
        floor: Floor::Check(0),
    };
    let hw = b.store.append(&session, s, w, &events(2), true).await;
    assert_eq!(hw.unwrap(), Ok(2));
    let record = b.store.snapshot(&session, s).await.unwrap().unwrap().record;
    assert_eq!(record.state, RecordState::Finished);
    let more = b.store.append(&session, s, w, &events(1), false).await;
    assert_eq!(more.unwrap(), Err(Refused::Closed(s)));
    // Still replayable.
    let mut reader = b.store.reader().await.unwrap();
    assert_eq!(reader.read(&session, s, 0, 10).await.unwrap().len(), 2);
}

async fn the_log_is_capped(b: Backend) {
    let session = open(&b).await;
    let s = open_standalone(&b, &session).await;
    let w = by_a(1);
    let total = LOG_MAXLEN as usize + 2_000;
    // Committed as a call commits: batches of up to 64.
    for chunk in events(total).chunks(64) {
        b.store
            .append(&session, s, w, chunk, false)
            .await
            .unwrap()
            .unwrap();
    }
    let record = b.store.snapshot(&session, s).await.unwrap().unwrap().record;
    assert_eq!(record.high_water, total as u64);
    let kept = record.high_water + 1 - record.oldest_kept;
    assert!(kept >= LOG_MAXLEN, "kept {kept}");
    // Redis trims whole batches: at most one batch over the cap.
    assert!(kept < LOG_MAXLEN + 64, "kept {kept}");
    if let Some(redis) = &b.redis {
        let keys = redis.command(&["KEYS", "*"]);
        // The one key not of a session: the index the session cap counts.
        let of_sessions = keys.split_whitespace().filter(|k| *k != "fs:sessions");
        for key in of_sessions.filter(|k| k.starts_with("fs:")) {
            assert!(
                key.starts_with(&format!("fs:{{{session}}}:")),
                "every key is namespaced and hash-tagged by its session: {key}"
            );
        }
    }
}

async fn a_replay_read_carries_its_record(b: Backend) {
    let session = open(&b).await;
    let s = open_standalone(&b, &session).await;
    let w = by_a(1);
    // Data with the packing's own separators in it comes back whole.
    let odd = vec![
        "12 34\nnot a header".to_owned(),
        String::new(),
        "é ✓".to_owned(),
    ];
    let mut all = events(2_000);
    all.extend(odd.clone());
    for chunk in all.chunks(500) {
        b.store
            .append(&session, s, w, chunk, false)
            .await
            .unwrap()
            .unwrap();
    }
    let (snapshot, got) = b
        .store
        .replay(&session, s, 1_990, 1_024)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.record.high_water, 2_003);
    assert_eq!(snapshot.record.epoch, 1);
    assert_eq!(got.first().map(|e| e.0), Some(1_991));
    assert_eq!(got.len(), 13);
    let tail: Vec<String> = got[10..].iter().map(|e| e.1.clone()).collect();
    assert_eq!(tail, odd);
    let (_, batch) = b
        .store
        .replay(&session, s, 0, 1_024)
        .await
        .unwrap()
        .unwrap();
    // At least what was asked for (Redis reads whole committed batches), in order, no gap.
    assert!(batch.len() >= 1_024, "{}", batch.len());
    assert!(batch.iter().enumerate().all(|(i, e)| e.0 == i as u64 + 1));
    let (_, none) = b
        .store
        .replay(&session, s, 2_003, 1_024)
        .await
        .unwrap()
        .unwrap();
    assert!(none.is_empty());
    assert!(
        b.store
            .replay(&session, StreamId(9), 0, 10)
            .await
            .unwrap()
            .is_none()
    );
}

/// A session restored from an older image forgets what was written since: a fenced writer that
/// wrote past the restored mark is refused (no id is handed out twice), its last message lands
/// past every id it handed out, and an unfenced writer reuses the forgotten ids, as the SDKs'
/// stores would.
async fn a_rolled_back_store_refuses_a_fenced_writer(b: Backend) {
    let session = open(&b).await;
    let s = b
        .store
        .open_stream(&session, &call("a", 20))
        .await
        .unwrap()
        .unwrap();
    let step = |done, floor| Writer::Lease {
        epoch: 1,
        name: "a",
        done: Some(done),
        floor,
    };
    let hw = b
        .store
        .append(&session, s, step(3, Floor::Check(0)), &events(3), false)
        .await;
    assert_eq!(hw.unwrap(), Ok(3));
    let image = b.store.image(&session).await.unwrap();
    let hw = b
        .store
        .append(&session, s, step(5, Floor::Check(3)), &events(2), false)
        .await;
    assert_eq!(hw.unwrap(), Ok(5));
    b.store.restore(&session, &image).await.unwrap();
    let record = b.store.snapshot(&session, s).await.unwrap().unwrap().record;
    assert_eq!((record.high_water, record.call.unwrap().done), (3, 3));

    let again = b
        .store
        .append(&session, s, step(6, Floor::Check(5)), &events(1), false)
        .await;
    assert_eq!(
        again.unwrap(),
        Err(Refused::RolledBack {
            stream: s,
            holds: 3,
            wrote: 5
        })
    );
    let last = vec!["rolled back".to_owned()];
    let sealed = b
        .store
        .append(&session, s, step(5, Floor::SkipTo(5)), &last, true)
        .await;
    assert_eq!(sealed.unwrap(), Ok(6));
    let (snapshot, events_after_3) = b.store.replay(&session, s, 3, 10).await.unwrap().unwrap();
    assert_eq!(snapshot.record.state, RecordState::Finished);
    let seqs: Vec<u64> = events_after_3.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, [6], "ids 4 and 5 are never handed out again");
    assert_eq!(
        snapshot.record.forgotten,
        Some((4, 5)),
        "and the record says so"
    );

    // Unfenced: the same rollback, and ids 4 and 5 are written a second time.
    let session = open(&b).await;
    let s = b
        .store
        .open_stream(&session, &call("a", 20))
        .await
        .unwrap()
        .unwrap();
    let naive = Writer::Unfenced {
        name: "a",
        background: None,
    };
    let hw = b.store.append(&session, s, naive, &events(3), false).await;
    assert_eq!(hw.unwrap(), Ok(3));
    let image = b.store.image(&session).await.unwrap();
    let hw = b.store.append(&session, s, naive, &events(2), false).await;
    assert_eq!(hw.unwrap(), Ok(5));
    b.store.restore(&session, &image).await.unwrap();
    let hw = b.store.append(&session, s, naive, &events(2), false).await;
    assert_eq!(hw.unwrap(), Ok(5), "the forgotten ids are issued again");
}

/// A record of the wrong type, or a field that is not a number, is a corrupt record naming its
/// key — terminal, never "unavailable" (which a replica answers with a retry). Only Redis can
/// hold one; the in-memory store's records are typed.
async fn a_record_no_replica_wrote_is_corrupt_not_unavailable(b: Backend) {
    let Some(redis) = &b.redis else { return };
    let session = open(&b).await;
    let s = open_standalone(&b, &session).await;
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("fs:{{{session}}}:s:{}", s.0);
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("hw")
        .arg("not a number")
        .query_async(&mut raw)
        .await
        .unwrap();
    let appended = b
        .store
        .append(&session, s, by_a(1), &events(1), false)
        .await;
    match appended {
        Err(StoreError::Corrupt(why)) => assert!(why.contains(&key), "{why}"),
        other => panic!("a Lua error on a bad field: {other:?}"),
    }
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("a string")
        .query_async(&mut raw)
        .await
        .unwrap();
    match b.store.resume(&session, s, Some(1), None, "b").await {
        Err(StoreError::Corrupt(why)) => assert!(why.contains(&key), "{why}"),
        other => panic!("WRONGTYPE: {other:?}"),
    }
}

/// A store with room for three sessions that go idle after 300 ms.
fn capped_retention() -> Retention {
    Retention {
        max_sessions: 3,
        session_idle_ms: 300,
        ..retention(2_000)
    }
}

#[tokio::test]
async fn sessions_are_capped_on_memory() {
    sessions_are_capped(Store::memory(capped_retention())).await;
}

#[tokio::test]
async fn sessions_are_capped_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = Store::redis(&redis.url(), capped_retention())
        .await
        .unwrap();
    sessions_are_capped(store).await;
}

/// The cap holds for the whole store: the fourth session is refused as full; one that ends, or
/// goes idle past its time, makes room again.
async fn sessions_are_capped(store: Store) {
    let open = |store: Store| async move {
        let session = new_session_id();
        store.open_session(&session).await.map(|()| session)
    };
    let first = open(store.clone()).await.unwrap();
    open(store.clone()).await.unwrap();
    open(store.clone()).await.unwrap();
    let full = open(store.clone()).await.unwrap_err();
    assert_eq!(full, StoreError::Full("3 sessions".into()));
    assert!(store.end_session(&first).await.unwrap());
    open(store.clone())
        .await
        .expect("an ended session makes room");
    assert!(open(store.clone()).await.is_err());
    // Idle past 300 ms, every session goes: room again (polled, bounded).
    let mut reopened = false;
    for _ in 0..200 {
        if open(store.clone()).await.is_ok() {
            reopened = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(reopened, "idle sessions never made room");
}

/// Sessions idle out after 600 ms; a finished call is kept 300 ms.
fn idle_retention() -> Retention {
    Retention {
        session_idle_ms: 600,
        finished_ms: 300,
        ..retention(2_000)
    }
}

#[tokio::test]
async fn one_idle_expiry_rule_on_memory() {
    one_idle_expiry_rule(Store::memory(idle_retention())).await;
}

#[tokio::test]
async fn one_idle_expiry_rule_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = Store::redis(&redis.url(), idle_retention()).await.unwrap();
    one_idle_expiry_rule(store).await;
}

/// The one idle-expiry rule, the same on both stores: a request refreshes the session and the
/// stream record it reads, each for the idle time; a finished stream is kept for its retention
/// from when it finished. Time passes by sleeping, in steps a quarter of the idle time or
/// three times it, so the answers do not depend on how fast the machine is.
async fn one_idle_expiry_rule(store: Store) {
    let quarter = std::time::Duration::from_millis(150);
    let session = new_session_id();
    store.open_session(&session).await.unwrap();
    let held = store
        .open_stream(&session, &standalone("a", None))
        .await
        .unwrap()
        .unwrap();
    let finished = store
        .open_stream(&session, &call("a", 1))
        .await
        .unwrap()
        .unwrap();
    let lease = Writer::Lease {
        epoch: 1,
        name: "a",
        done: Some(1),
        floor: Floor::Check(0),
    };
    store
        .append(&session, finished, lease, &events(1), true)
        .await
        .unwrap()
        .unwrap();
    // A held stream with no events: its delivery's replays (between blocked reads) keep the
    // session and the record, twice the idle time and more.
    for _ in 0..8 {
        tokio::time::sleep(quarter).await;
        let read = store.replay(&session, held, 0, 10).await.unwrap();
        assert!(read.is_some(), "a held stream lost its record");
    }
    // The finished call went at its retention, though its session lives.
    assert!(store.snapshot(&session, finished).await.unwrap().is_none());
    // Requests that read only the session keep it, not a record no one reads.
    for _ in 0..8 {
        tokio::time::sleep(quarter).await;
        assert!(store.session_exists(&session).await.unwrap());
    }
    assert!(
        store.snapshot(&session, held).await.unwrap().is_none(),
        "a record no request read outlived the idle time"
    );
    // No request at all: the session goes.
    tokio::time::sleep(quarter * 12).await;
    assert!(!store.session_exists(&session).await.unwrap());
    assert_eq!(
        store.snapshot(&session, held).await.unwrap_err(),
        StoreError::SessionGone
    );
}

/// `logging/setLevel` above `info` withholds the background emitter's events (log messages)
/// and nothing else; a level back at or below `info` lets them through again. The number a
/// withheld event would have carried is the next landed one's.
async fn a_log_level_above_info_withholds_background_events(b: Backend) {
    let session = open(&b).await;
    let stream = open_standalone(&b, &session).await;
    let background = |n| Writer::Epoch {
        epoch: 1,
        name: "a",
        background: Some(n),
        floor: 0,
    };
    let one = events(1);
    let landed = b
        .store
        .append(&session, stream, background(1), &one, false)
        .await;
    assert_eq!(landed.unwrap(), Ok(1));
    b.store
        .set_log_level(&session, LogLevel::Warning)
        .await
        .unwrap();
    let withheld = b
        .store
        .append(&session, stream, background(2), &one, false)
        .await;
    assert_eq!(withheld.unwrap(), Err(Refused::BelowLogLevel));
    assert_eq!(b.store.background_number(&session).await.unwrap(), 1);
    // What is not a log message still lands.
    let other = b.store.append(&session, stream, by_a(1), &one, false).await;
    assert_eq!(other.unwrap(), Ok(2));
    b.store
        .set_log_level(&session, LogLevel::Info)
        .await
        .unwrap();
    let again = b
        .store
        .append(&session, stream, background(2), &one, false)
        .await;
    assert_eq!(again.unwrap(), Ok(3));
    assert_eq!(b.store.background_number(&session).await.unwrap(), 2);
    // A session the store does not hold is gone, as for every session operation.
    let unknown = new_session_id();
    assert!(matches!(
        b.store.set_log_level(&unknown, LogLevel::Debug).await,
        Err(StoreError::SessionGone)
    ));
}
