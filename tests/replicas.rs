//! Two replicas of `forkscope serve` on one store, over real sockets: on the in-memory store and
//! on a real `redis-server`, as one suite. A resume that lands on the other replica continues the
//! stream exactly; a resume elsewhere fences the orphan (and, naive, does not); a call outlives
//! the replica that ran it; a lost or emptied Redis gets typed answers.

mod common;

use common::replica_lab::{Backend, Lab, Spec, Sse, progress_of, results_of, seqs_of};
use forkscope_core::Policy;
use serde_json::{Value, json};
use std::time::Duration;

crate::both_stores!(
    a_call_resumed_on_the_other_replica_delivers_each_step_once,
    a_resume_on_another_replica_fences_the_orphan,
    naive_replicas_fork_across_machines,
    a_call_outlives_its_replica,
    round_robin_through_the_balancer,
    a_cancel_on_either_replica_stops_the_call,
);

async fn a_call_resumed_on_the_other_replica_delivers_each_step_once(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let mut first = lab.call(&lab.url(0), &session, 40, 5).await;
    assert_eq!(first.served_by(), "a");
    assert!(first.until(|e| progress_of(e).len() >= 3).await);
    let cursor = first.last_id();
    drop(first.response);
    let mut resumed = Sse::open(lab.get(&lab.url(1), &session, Some(&cursor))).await;
    assert_eq!(resumed.served_by(), "b");
    assert_eq!(resumed.header("mcp-stream-resumed"), Some("true"));
    assert!(resumed.until(|e| results_of(e) == 1).await);
    resumed.read_to_end().await;
    let mut seen = progress_of(&first.events);
    seen.extend(progress_of(&resumed.events));
    assert_eq!(
        seen,
        (1..=40).collect::<Vec<_>>(),
        "every step once, in order"
    );
    assert_eq!(results_of(&first.events) + results_of(&resumed.events), 1);
    // The call ran where it started: the resume moved the delivery, not the work.
    assert_eq!(lab.counter(1, |c| &c.calls_adopted), 0);
    assert_eq!(lab.counter(1, |c| &c.resumes), 1);
}

async fn a_resume_on_another_replica_fences_the_orphan(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, Some(5), 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let mut original = Sse::open(lab.get(&lab.url(0), &session, None)).await;
    assert!(original.until(|e| seqs_of(e).len() >= 3).await);
    let cursor = original.last_id();
    let after: u64 = *seqs_of(&original.events).last().unwrap();
    // The original stays open (half-open, as replica a sees it) while the client resumes on b.
    let mut resumed = Sse::open(lab.get(&lab.url(1), &session, Some(&cursor))).await;
    assert_eq!(resumed.served_by(), "b");
    assert!(resumed.until(|e| seqs_of(e).len() >= 20).await);
    // a's emitter was refused at its next emit, and a's delivery ended: no orphan.
    original.read_to_end().await;
    assert!(original.ended);
    assert!(lab.counter(0, |c| &c.late_writes_refused) >= 1);
    assert_eq!(lab.counter(0, |c| &c.deliveries_fenced), 1);
    let seqs = seqs_of(&resumed.events);
    let expected: Vec<u64> = (after + 1..=after + seqs.len() as u64).collect();
    assert_eq!(
        seqs, expected,
        "b continues the one stream: no gap, no duplicate"
    );
}

async fn naive_replicas_fork_across_machines(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Naive, Some(5), 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let mut original = Sse::open(lab.get(&lab.url(0), &session, None)).await;
    assert!(original.until(|e| seqs_of(e).len() >= 3).await);
    let cursor = original.last_id();
    let before = seqs_of(&original.events).len();
    let mut resumed = Sse::open(lab.get(&lab.url(1), &session, Some(&cursor))).await;
    assert!(resumed.until(|e| seqs_of(e).len() >= 10).await);
    // The orphan on a keeps receiving after the resume: two live streams, one session.
    assert!(original.until(|e| seqs_of(e).len() >= before + 10).await);
    let on_b = seqs_of(&resumed.events);
    let orphan_only: Vec<u64> = seqs_of(&original.events)[before..]
        .iter()
        .copied()
        .filter(|s| !on_b.contains(s) && *s < *on_b.last().unwrap())
        .collect();
    assert!(
        !orphan_only.is_empty(),
        "events the client's stream skipped went to the orphan: the fork"
    );
    assert_eq!(
        lab.counter(0, |c| &c.late_writes_refused),
        0,
        "naive refuses nothing"
    );
}

/// `notifications/cancelled` sent to the replica that does not run the call stops it: the
/// call's stream ends with the steps written so far and no result, the runner writes nothing
/// more, and a resume finds the stream finished, not running.
async fn a_cancel_on_either_replica_stops_the_call(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let mut call = lab.call(&lab.url(0), &session, 1_000, 20).await;
    assert_eq!(call.served_by(), "a");
    assert!(call.until(|e| progress_of(e).len() >= 3).await);
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}});
    let answered = lab
        .post(&lab.url(1), &session, cancel)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 202);
    // The stream ends on its own (it would run 20 s more otherwise), with no result.
    call.read_to_end().await;
    let seen = progress_of(&call.events);
    assert!(
        seen.len() < 1_000,
        "the call ran to its end: {}",
        seen.len()
    );
    assert_eq!(
        results_of(&call.events),
        0,
        "a cancelled call sends no result"
    );
    assert_eq!(
        seen,
        (1..=seen.len() as u64).collect::<Vec<_>>(),
        "every step it wrote, once"
    );
    // A resume from the start replays exactly what was written, then ends: nothing more was.
    let mut resumed = Sse::open(lab.get(&lab.url(1), &session, Some(&call.first_id()))).await;
    resumed.read_to_end().await;
    let replayed = progress_of(&resumed.events);
    assert_eq!(replayed.last(), seen.last(), "{replayed:?}");
    assert_eq!(results_of(&resumed.events), 0);
    // A second cancel finds nothing running, and is still accepted.
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}});
    let again = lab
        .post(&lab.url(0), &session, cancel)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 202);
}

async fn a_call_outlives_its_replica(backend: Backend) {
    let Some(mut lab) = Lab::start(backend, Policy::Fenced, None, 300).await else {
        return;
    };
    let session = lab.initialize(&lab.url(1)).await;
    let mut first = lab.call(&lab.url(0), &session, 30, 20).await;
    assert!(first.until(|e| progress_of(e).len() >= 5).await);
    // Replica a dies mid-call: its runner and its connections stop at once.
    lab.replicas.remove(0).kill();
    first.read_to_end().await;
    let cursor = first.last_id();
    let b = lab.url(0);
    let mut resumed = Sse::open(lab.get(&b, &session, Some(&cursor))).await;
    assert!(resumed.until(|e| results_of(e) == 1).await);
    let mut seen = progress_of(&first.events);
    seen.extend(progress_of(&resumed.events));
    assert_eq!(
        seen,
        (1..=30).collect::<Vec<_>>(),
        "every step once, across the two runners"
    );
    assert_eq!(results_of(&first.events) + results_of(&resumed.events), 1);
    assert_eq!(lab.counter(0, |c| &c.calls_adopted), 1);
}

async fn round_robin_through_the_balancer(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let balancer = lab.balancer().await;
    let url = format!("http://{}/mcp", balancer.addr);
    let session = lab.initialize(&url).await;
    let mut call = lab.call(&url, &session, 10, 5).await;
    assert!(call.until(|e| progress_of(e).len() >= 2).await);
    let first_replica = call.served_by().to_owned();
    let cursor = call.last_id();
    drop(call.response);
    let mut resumed = Sse::open(lab.get(&url, &session, Some(&cursor))).await;
    assert_ne!(
        resumed.served_by(),
        first_replica,
        "round-robin: the other replica"
    );
    assert!(resumed.until(|e| results_of(e) == 1).await);
    let mut seen = progress_of(&call.events);
    seen.extend(progress_of(&resumed.events));
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    let _ = &lab.store;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_redis_is_a_typed_503_and_an_empty_one_a_404() {
    let Some(mut lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    let ok = lab
        .post(&lab.url(1), &session, list.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let redis = lab.redis.as_mut().unwrap();
    redis.kill9();
    let lost = lab
        .post(&lab.url(1), &session, list.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(lost.status(), 503);
    assert!(lost.headers().contains_key("retry-after"));
    let body: Value = lost.json().await.unwrap();
    assert_eq!(
        body.pointer("/error/data/reason"),
        Some(&json!("store_unavailable"))
    );
    lab.redis.as_mut().unwrap().restart();
    // The replica reconnects on its own; the session did not survive an empty restart.
    let mut status = 0;
    for _ in 0..100 {
        let after = lab
            .post(&lab.url(1), &session, list.clone())
            .send()
            .await
            .unwrap();
        status = after.status().as_u16();
        if status != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 404, "re-initialize, as the transport prescribes");
    let again = lab.initialize(&lab.url(1)).await;
    assert_ne!(again, session);
}

/// A stream record no replica wrote (a field that is not a number) is answered once with a
/// terminal typed 500 naming the key, never a 503 that sends the client round again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_a_terminal_typed_500_naming_its_key() {
    let Some(lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let (session, cursor) = lab.call_left(400, 20, 2).await;
    let redis = lab.redis.as_ref().unwrap();
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("fs:{{{session}}}:s:1");
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("epoch")
        .arg("not a number")
        .query_async(&mut raw)
        .await
        .unwrap();
    let refused = lab
        .get(&lab.url(1), &session, Some(&cursor))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 500);
    assert!(!refused.headers().contains_key("retry-after"), "terminal");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body.pointer("/error/data/reason"),
        Some(&json!("store_corrupt"))
    );
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap();
    assert!(message.contains(&key), "{message}");
}

/// Redis restored from an RDB snapshot a few steps old, mid call, over and over: the client
/// never meets a reused id or a silent gap. It gets every step once and the result, or its
/// steps once up to where it is told, by a typed error naming the rollback (the call's last
/// message, or the refusal of its resume).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_restored_from_an_older_snapshot_never_reuses_an_id_or_hides_a_gap() {
    let runs: usize = std::env::var("FORKSCOPE_ROLLBACK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut told = 0;
    for run in 0..runs {
        let Some(mut lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
            return;
        };
        let session = lab.initialize(&lab.url(0)).await;
        let mut call = lab.call(&lab.url(0), &session, 40, 30).await;
        assert!(call.until(|e| progress_of(e).len() >= 5).await, "run {run}");
        let snapshot = lab.redis.as_ref().unwrap().save_snapshot("older");
        assert!(
            call.until(|e| progress_of(e).len() >= 12).await,
            "run {run}"
        );
        lab.redis.as_mut().unwrap().restore(&snapshot);
        call.read_to_end().await;
        let mut events = call.events.clone();
        let ended_with = |events: &[forkscope::wire::sse::SseEvent]| {
            events.iter().rev().find_map(|e| {
                let v: Value = serde_json::from_str(&e.data).ok()?;
                (v.get("result").is_some() || v.get("error").is_some()).then_some(v)
            })
        };
        if ended_with(&events).is_none() {
            // The delivery ended with the store: resume on the other replica.
            let cursor = call.last_id();
            let response = common::replica_lab::retrying_unavailable(|| {
                lab.get(&lab.url(1), &session, Some(&cursor))
            })
            .await;
            if response.status() == 200 {
                let mut resumed = Sse::from_response(response);
                resumed.read_to_end().await;
                events.extend(resumed.events);
            } else {
                let status = response.status();
                let body: Value = response.json().await.unwrap();
                assert_eq!(
                    body.pointer("/error/data/reason"),
                    Some(&json!("store_rolled_back")),
                    "run {run}: {status} {body}"
                );
                told += 1;
                check_once(run, &events);
                continue;
            }
        }
        check_once(run, &events);
        let last = ended_with(&events).unwrap_or_else(|| panic!("run {run}: no end"));
        if last.get("error").is_some() {
            assert_eq!(
                last.pointer("/error/data/reason"),
                Some(&json!("store_rolled_back")),
                "run {run}: {last}"
            );
            told += 1;
        } else {
            assert_eq!(
                progress_of(&events),
                (1..=40).collect::<Vec<_>>(),
                "run {run}"
            );
        }
    }
    eprintln!("{runs} rollbacks: {told} told by a typed error, the rest delivered whole");
}

/// Every step at most once, in order from 1 with no hole, and ids only ever increasing.
fn check_once(run: usize, events: &[forkscope::wire::sse::SseEvent]) {
    let steps = progress_of(events);
    assert_eq!(
        steps,
        (1..=steps.len() as u64).collect::<Vec<_>>(),
        "run {run}: steps"
    );
    let seqs = seqs_of(events);
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "run {run}: ids {seqs:?}"
    );
}

/// Replica a is cut off from Redis mid-call (its link slowed past the lease), the client
/// resumes on b, b adopts the call; when a's link heals, its late step is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_runner_is_refused_when_it_comes_back() {
    let spec = Spec {
        backend: Backend::Redis,
        policy: Policy::Fenced,
        emit_ms: None,
        lease_ms: 300,
        partitionable: true,
    };
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let Some(lab) = Lab::start_with(spec).await else {
        return;
    };
    let session = lab.initialize(&lab.url(1)).await;
    let mut first = lab.call(&lab.url(0), &session, 40, 20).await;
    assert!(first.until(|e| progress_of(e).len() >= 5).await);
    // Every command a sends now takes 0.4 s each way: its renewals reach the store further
    // apart than its 0.3 s lease, as through a flapping link, yet each answer comes back
    // within the client's timeout, so a hears the store's refusal.
    lab.links[0].set_latency(400);
    let cursor = first.last_id();
    drop(first.response);
    let mut resumed = Sse::open(lab.get(&lab.url(1), &session, Some(&cursor))).await;
    assert!(resumed.until(|e| results_of(e) == 1).await);
    let mut seen = progress_of(&first.events);
    seen.extend(progress_of(&resumed.events));
    assert_eq!(
        seen,
        (1..=40).collect::<Vec<_>>(),
        "every step once, whoever ran it"
    );
    assert_eq!(lab.counter(1, |c| &c.calls_adopted), 1);
    lab.links[0].set_latency(0);
    // a's step, sent on the lease it held before the partition, lands late and is refused.
    let mut refused = 0;
    for _ in 0..200 {
        refused = lab.counter(0, |c| &c.late_writes_refused);
        if refused > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        refused, 1,
        "the partitioned runner's late step is refused, once"
    );
}

/// A quiet stream on a replica gets `: keep-alive` comments, so a client that went away is
/// noticed by a write, as on the single-process server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_replica_stream_keeps_alive() {
    let Some(lab) = Lab::start(Backend::Memory, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let mut response = lab.get(&lab.url(0), &session, None).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut seen = Vec::new();
    let read = async {
        while !String::from_utf8_lossy(&seen).contains(": keep-alive") {
            match response.chunk().await {
                Ok(Some(chunk)) => seen.extend_from_slice(&chunk),
                _ => return false,
            }
        }
        true
    };
    assert!(
        tokio::time::timeout(common::replica_lab::PATIENCE, read)
            .await
            .unwrap_or(false)
    );
}

/// Reads `sse` to its end; true when the body ended cleanly (its terminating chunk arrived),
/// false when the connection broke under it.
async fn ends_cleanly(sse: &mut Sse) -> bool {
    let read = async {
        loop {
            match sse.response.chunk().await {
                Ok(Some(chunk)) => sse.events.extend(sse.parser.feed(&chunk).unwrap()),
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    };
    tokio::time::timeout(common::replica_lab::PATIENCE, read)
        .await
        .expect("the stream ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_ends_its_streams_cleanly_and_its_call_moves() {
    let Some(mut lab) = Lab::start(Backend::Memory, Policy::Fenced, Some(50), 300).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let mut standalone = Sse::open(lab.get(&lab.url(0), &session, None)).await;
    let mut first = lab.call(&lab.url(0), &session, 30, 20).await;
    assert!(first.until(|e| progress_of(e).len() >= 5).await);
    // SIGTERM on replica a: no new connection, its streams end with their terminating chunk.
    let a = lab.replicas.remove(0);
    let drained = tokio::spawn(a.drain(Duration::from_secs(5)));
    assert!(
        ends_cleanly(&mut first).await,
        "the call's stream ends cleanly"
    );
    assert!(
        ends_cleanly(&mut standalone).await,
        "the standalone stream ends cleanly"
    );
    drained.await.unwrap();
    // The call was left in the store: replica b adopts it once its lease expires, and the
    // client's resume there gets every step once.
    let b = lab.url(0);
    let mut resumed = Sse::open(lab.get(&b, &session, Some(&first.last_id()))).await;
    assert!(resumed.until(|e| results_of(e) == 1).await);
    let mut seen = progress_of(&first.events);
    seen.extend(progress_of(&resumed.events));
    assert_eq!(seen, (1..=30).collect::<Vec<_>>(), "every step once");
    assert_eq!(lab.counter(0, |c| &c.calls_adopted), 1);
}

/// A client that stops reading (a NAT drop, a stalled reader) is judged gone after the write
/// deadline: its delivery ends and the replica closes the connection, as the single server
/// does. Without the deadline the emitter would queue for it forever and the read below would
/// never reach the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_closes_a_stream_whose_client_takes_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(lab) = Lab::start(Backend::Memory, Policy::Fenced, Some(1), 2_000).await else {
        return;
    };
    let session = lab.initialize(&lab.url(0)).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(2_048).unwrap();
    let mut tcp = socket.connect(lab.replicas[0].addr).await.unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    // Reads nothing for longer than the write deadline (the condition, not a sync).
    let deadline = forkscope::wire::replica::ReplicaOptions::default()
        .write_deadline
        .expect("a write deadline by default");
    tokio::time::sleep(deadline * 2).await;
    let mut buf = [0u8; 16 * 1024];
    let mut read = 0usize;
    let ended = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    tokio::time::timeout(common::replica_lab::PATIENCE, ended)
        .await
        .expect("the replica closed the connection");
    // What was queued before the cut, not a stream that went on.
    assert!(read < 4 * 1024 * 1024, "{read} bytes");
}
