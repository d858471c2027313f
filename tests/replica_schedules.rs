//! Random schedules over two fenced replicas on a real `redis-server`, through `forkscope
//! balance` (round-robin, no stickiness): a client follows a tool call or a standalone stream
//! while drops, stripped keys, foreign cursors, concurrent resumes, a replica killed mid-stream,
//! a replica's link to Redis slowed past its lease, a replica that stops answering behind the
//! balancer, a Redis restored from an older snapshot, a corrupt record, the session's keys
//! expiring, and a Redis restart hit it. After each, what the client applied must be every
//! event once, in order, with no gap and no id issued twice — or, where the store lost or
//! spoiled what it held, a typed refusal that says so (never a silent new stream or a gap).
//!
//! `FORKSCOPE_SCHEDULES` sets how many (default 200; the soak in BENCHMARKS.md runs 10,000),
//! `FORKSCOPE_SEED` the first seed. A failure names its seed, which replays it.

mod common;

use common::replica_lab::{
    Backend, Lab, Spec, Sse, progress_of, results_of, retrying_unavailable, seqs_of,
};
use forkscope::wire::balance::{Balancer, Mode, Upstream};
use forkscope::wire::proxy::Proxy;
use forkscope_core::{Entropy, Policy, SplitMix64};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

const LEASE_MS: u64 = 200;
const EMIT_MS: u64 = 4;
/// Background events a standalone schedule follows before it judges.
const STANDALONE_EVENTS: usize = 40;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The connection is cut; the client resumes with its last id.
    Drop,
    /// The client's resume lost the key its ids carry (a stripped token): refused, then resumed.
    KeylessCursor,
    /// A cursor of another session: refused, then resumed.
    ForeignCursor,
    /// Two resumes at once from one cursor: one wins, the other is fenced.
    ConcurrentResumes,
    /// The replica serving the stream is killed (and restarted); the client resumes.
    KillServingReplica,
    /// The serving replica's link to Redis slows past its lease; the client resumes elsewhere.
    Partition,
    /// Redis restarts empty: the session is gone, and the client is told so with a 404.
    RedisRestart,
    /// The serving replica stops answering behind the balancer (accepts, never answers, and
    /// cannot reach Redis: a stopped process); the resume is served by the other.
    StoppedUpstream,
    /// Redis comes back from a snapshot taken `after` events ago (a restored backup, a promoted
    /// async replica): every event once, or a 410 `store_rolled_back` — never an id reused.
    StoreRollback,
    /// The stream's record is spoiled (a field that is not a number): one terminal 500
    /// `store_corrupt`, not a retry loop.
    CorruptRecord,
    /// The session's keys expire (their TTL cut short): a 404, as for any session gone.
    TtlExpiry,
}

/// How a schedule ended when the store could not carry it on: the client was told.
#[derive(Debug)]
enum Told {
    RedisRestarted,
    RolledBack,
    Corrupt,
    Expired,
}

#[derive(Debug)]
struct Schedule {
    call: Option<(u64, u64)>,
    faults: Vec<(usize, Fault)>,
}

fn schedule(rng: &mut SplitMix64) -> Schedule {
    let mut pick = |n: u64| rng.next_u64() % n;
    let call = (pick(10) < 7).then(|| (5 + pick(36), pick(9)));
    let count = 1 + pick(4) as usize;
    let mut faults = Vec::with_capacity(count);
    for _ in 0..count {
        let after = 1 + pick(8) as usize;
        let fault = match pick(100) {
            0..=24 => Fault::Drop,
            25..=34 => Fault::KeylessCursor,
            35..=44 => Fault::ForeignCursor,
            45..=58 => Fault::ConcurrentResumes,
            59..=70 => Fault::KillServingReplica,
            71..=81 => Fault::Partition,
            82..=88 => Fault::StoppedUpstream,
            89..=93 => Fault::StoreRollback,
            94..=95 => Fault::RedisRestart,
            96..=97 => Fault::CorruptRecord,
            _ => Fault::TtlExpiry,
        };
        faults.push((after, fault));
    }
    Schedule { call, faults }
}

struct Run<'a> {
    lab: &'a mut Lab,
    /// Each replica's front, the balancer's upstream for it: a stopped upstream is its front
    /// holding every byte.
    fronts: &'a [Proxy],
    url: String,
    session: String,
    foreign_cursor: String,
}

/// Holds every byte past the balancer's head timeout and the lease: a process stopped that long.
const STOPPED_MS: u64 = 5_000;
/// The balancer's wait for a response head: short, so a stopped upstream costs seconds, and
/// past a replica's own store timeout (1 s), so a replica that cannot reach Redis answers its
/// typed 503 before the balancer gives up on it.
const HEAD_TIMEOUT: Duration = Duration::from_millis(2_500);

/// How many events a response has applied, of the kind the schedule follows.
fn applied(call: bool, events: &[forkscope::wire::sse::SseEvent]) -> usize {
    if call {
        progress_of(events).len() + results_of(events)
    } else {
        seqs_of(events).len()
    }
}

/// Deliveries the fence ended, across the replicas.
fn fenced(lab: &Lab) -> u64 {
    (0..lab.replicas.len())
        .map(|i| lab.counter(i, |c| &c.deliveries_fenced))
        .sum()
}

fn background_of(events: &[forkscope::wire::sse::SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|v| v.pointer("/params/data/background").and_then(Value::as_u64))
        .collect()
}

impl Run<'_> {
    /// Resumes through the balancer; a 503 (a replica that cannot reach Redis right now) or a
    /// 502/504 from the balancer is retried. `Err(status)` for any other refusal.
    async fn resume(&self, cursor: &str) -> Result<Sse, u16> {
        self.resume_or_refusal(cursor)
            .await
            .map_err(|(status, _)| status)
    }

    /// As [`Run::resume`], with the refusal's body.
    async fn resume_or_refusal(&self, cursor: &str) -> Result<Sse, (u16, Value)> {
        for _ in 0..100 {
            let response = self
                .lab
                .get(&self.url, &self.session, Some(cursor))
                .send()
                .await
                .expect("GET through the balancer");
            match response.status().as_u16() {
                200 => return Ok(Sse::from_response(response)),
                // 504: no upstream answered in time (a GET is safe to send again).
                502..=504 => tokio::time::sleep(Duration::from_millis(30)).await,
                other => {
                    let body = response.json().await.unwrap_or(Value::Null);
                    return Err((other, body));
                }
            }
        }
        panic!("the resume kept getting 503")
    }

    fn replica_serving(&self, served_by: &str) -> usize {
        self.lab
            .replicas
            .iter()
            .position(|r| r.name == served_by)
            .unwrap()
    }

    async fn redis(&self) -> redis::aio::MultiplexedConnection {
        let url = self.lab.redis.as_ref().unwrap().url();
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to Redis")
    }
}

/// The stream an event id names (`s1-12.KEY` → 1) and its number in that stream (12).
fn stream_and_seq(id: &str) -> (u64, u64) {
    let bare = id.split('.').next().unwrap();
    let (stream, seq) = bare
        .trim_start_matches('s')
        .split_once('-')
        .unwrap_or_else(|| panic!("an id of the fenced form: {id}"));
    (stream.parse().unwrap(), seq.parse().unwrap())
}

/// The typed reason of a refusal's JSON-RPC error.
fn reason(body: &Value) -> Option<&str> {
    body.pointer("/error/data/reason").and_then(Value::as_str)
}

/// Follows one schedule; returns what the client applied, in order, or that Redis lost the
/// session (and said so with a 404).
async fn follow(
    run: &mut Run<'_>,
    plan: &Schedule,
) -> Result<Vec<forkscope::wire::sse::SseEvent>, (Told, Vec<forkscope::wire::sse::SseEvent>)> {
    let call = plan.call.is_some();
    let mut rolled_back = false;
    let mut current = match plan.call {
        Some((steps, delay)) => run.lab.call(&run.url, &run.session, steps, delay).await,
        None => {
            let opened = retrying_unavailable(|| run.lab.get(&run.url, &run.session, None)).await;
            assert_eq!(opened.status(), 200, "the standalone stream");
            Sse::from_response(opened)
        }
    };
    let mut kept = Vec::new();
    let mut slowed: Option<usize> = None;
    let mut stopped: Option<usize> = None;
    for &(after, fault) in &plan.faults {
        // The older snapshot a rollback returns to: what Redis held `after` events ago.
        let older: Option<PathBuf> = matches!(fault, Fault::StoreRollback)
            .then(|| run.lab.redis.as_ref().unwrap().save_snapshot("older"));
        let target = applied(call, &current.events) + after;
        let finished = |e: &[_]| results_of(e) == 1;
        if !current
            .until(|e| applied(call, e) >= target || finished(e))
            .await
            || finished(&current.events)
        {
            break;
        }
        let cursor = current.last_id();
        let served_by = current.served_by().to_owned();
        kept.append(&mut current.events);
        drop(current);
        match fault {
            Fault::Drop => {}
            Fault::KeylessCursor => {
                let keyless = cursor.split('.').next().unwrap().to_owned();
                let status = run.resume(&keyless).await.err();
                assert!(
                    matches!(status, Some(400..=499)),
                    "a keyless cursor is refused, got {status:?}"
                );
            }
            Fault::ForeignCursor => {
                let status = run.resume(&run.foreign_cursor.clone()).await.err();
                assert!(
                    matches!(status, Some(400..=499)),
                    "a foreign cursor is refused, got {status:?}"
                );
            }
            Fault::ConcurrentResumes => {
                let fenced_before = fenced(run.lab);
                let (one, two) = tokio::join!(run.resume(&cursor), run.resume(&cursor));
                let (mut one, mut two) = (one.expect("resume"), two.expect("resume"));
                // One of the two is fenced and ends; the client follows the other. (The winner
                // of a call may end first too, with the result: then it is the one to keep.)
                let ended = tokio::select! {
                    _ = one.read_to_end() => 1,
                    _ = two.read_to_end() => 2,
                };
                let ended_done =
                    results_of(if ended == 1 { &one.events } else { &two.events }) == 1;
                let lost = if ended_done { 3 - ended } else { ended };
                let (mut winner, mut loser) = if lost == 1 { (two, one) } else { (one, two) };
                // The loser was fenced, not served alongside: its delivery ends, by the fence
                // unless it had handed over the call's end before the winner took the stream,
                // and what it sent is what the winner sends too.
                loser.read_to_end().await;
                assert!(loser.ended, "the losing resume was never fenced");
                if results_of(&loser.events) == 0 {
                    let fenced_now = fenced(run.lab);
                    assert!(
                        fenced_now > fenced_before,
                        "the losing delivery ended unfenced ({fenced_before} → {fenced_now})"
                    );
                }
                let sent = seqs_of(&loser.events);
                winner.until(|e| seqs_of(e).len() >= sent.len()).await;
                let kept = seqs_of(&winner.events);
                assert!(
                    kept.starts_with(&sent),
                    "the loser sent {sent:?}, which the winner ({kept:?}) does not"
                );
                current = winner;
                continue;
            }
            Fault::KillServingReplica => {
                let index = run
                    .lab
                    .replicas
                    .iter()
                    .position(|r| r.name == served_by)
                    .unwrap();
                run.lab.restart(index).await;
            }
            Fault::Partition => {
                let index = run
                    .lab
                    .replicas
                    .iter()
                    .position(|r| r.name == served_by)
                    .unwrap();
                run.lab.links[index].set_latency(400);
                slowed = Some(index);
            }
            Fault::RedisRestart => {
                run.lab.redis.as_mut().unwrap().restart();
                let status = run.resume(&cursor).await.err();
                assert_eq!(
                    status,
                    Some(404),
                    "after Redis lost the session: 404, never a new stream"
                );
                return Err((Told::RedisRestarted, kept));
            }
            Fault::StoppedUpstream => {
                let index = run.replica_serving(&served_by);
                run.fronts[index].set_latency(STOPPED_MS);
                run.lab.links[index].set_latency(STOPPED_MS);
                stopped = Some(index);
            }
            Fault::StoreRollback => {
                let older = older.expect("saved before the events it forgets");
                run.lab.redis.as_mut().unwrap().restore(&older);
                rolled_back = true;
                match run.resume_or_refusal(&cursor).await {
                    Ok(resumed) => {
                        current = resumed;
                        continue;
                    }
                    Err((status, body)) => {
                        assert_eq!(
                            (status, reason(&body)),
                            (410, Some("store_rolled_back")),
                            "after a rollback: every event, or told so: {body}"
                        );
                        return Err((Told::RolledBack, kept));
                    }
                }
            }
            Fault::CorruptRecord => {
                let (stream, _) = stream_and_seq(&cursor);
                let key = format!("fs:{{{}}}:s:{stream}", run.session);
                let _: () = redis::cmd("HSET")
                    .arg(&key)
                    .arg("epoch")
                    .arg("not a number")
                    .query_async(&mut run.redis().await)
                    .await
                    .unwrap();
                let (status, body) = run
                    .resume_or_refusal(&cursor)
                    .await
                    .err()
                    .expect("a corrupt record is refused");
                assert_eq!(
                    (status, reason(&body)),
                    (500, Some("store_corrupt")),
                    "a corrupt record: one terminal typed error: {body}"
                );
                return Err((Told::Corrupt, kept));
            }
            Fault::TtlExpiry => {
                // The moment the session's TTL fires, brought forward: every key of it expires
                // at once (PEXPIRE 0 expires a key now), in one script, so no replica's
                // operation refreshes one of them in between, as none could at a real expiry.
                let expired: i64 = redis::Script::new(
                    "local n = 0 \
                     for _, key in ipairs(redis.call('KEYS', ARGV[1])) do \
                       n = n + redis.call('PEXPIRE', key, 0) \
                     end \
                     return n",
                )
                .arg(format!("fs:{{{}}}:*", run.session))
                .invoke_async(&mut run.redis().await)
                .await
                .unwrap();
                assert!(expired > 0, "the session had keys to expire");
                let status = run.resume(&cursor).await.err();
                assert_eq!(
                    status,
                    Some(404),
                    "an expired session is gone: 404, never a new stream"
                );
                return Err((Told::Expired, kept));
            }
        }
        current = run.resume(&cursor).await.expect("resume");
        if let Some(index) = slowed.take() {
            // Healed once the client moved on: the slowed replica's late writes meet the fence.
            run.lab.links[index].set_latency(0);
        }
        if let Some(index) = stopped.take() {
            // The resume was served by the other; the stopped one answers again, late.
            assert_ne!(
                current.served_by(),
                served_by,
                "not by the stopped upstream"
            );
            run.fronts[index].set_latency(0);
            run.lab.links[index].set_latency(0);
        }
    }
    if call {
        // Its result; or, once the store rolled back under it, the call's typed end in its
        // place (the runner found the store had forgotten its steps): told, in the stream.
        assert!(
            current
                .until(|e| results_of(e) == 1 || ended_rolled_back(e))
                .await,
            "the call finished"
        );
        if ended_rolled_back(&current.events) {
            assert!(rolled_back, "store_rolled_back with no rollback");
            kept.append(&mut current.events);
            return Err((Told::RolledBack, kept));
        }
    } else {
        let need = STANDALONE_EVENTS.saturating_sub(kept.len()).max(1);
        assert!(current.until(|e| seqs_of(e).len() >= need).await);
    }
    kept.append(&mut current.events);
    Ok(kept)
}

/// Whether the call ended with `store_rolled_back` in place of its result.
fn ended_rolled_back(events: &[forkscope::wire::sse::SseEvent]) -> bool {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .any(|v| reason(&v) == Some("store_rolled_back"))
}

/// No id issued twice: each stream's numbers only ever rise, across every resume.
fn no_reused_id(applied: &[forkscope::wire::sse::SseEvent]) {
    let mut last = std::collections::BTreeMap::new();
    for id in applied.iter().filter_map(|e| e.id.as_deref()) {
        let (stream, seq) = stream_and_seq(id);
        let before = last.insert(stream, seq);
        assert!(
            before.is_none_or(|b| b < seq),
            "id {id} after s{stream}-{before:?}: an id issued twice"
        );
    }
}

/// What a schedule the store cut short applied: once each, in order, from the start.
fn judge_prefix(plan: &Schedule, applied: &[forkscope::wire::sse::SseEvent]) {
    no_reused_id(applied);
    match plan.call {
        Some(_) => {
            let steps = progress_of(applied);
            let expected: Vec<u64> = (1..=steps.len() as u64).collect();
            assert_eq!(steps, expected, "the steps before it once each, in order");
        }
        None => {
            let numbers = background_of(applied);
            if let Some(&first) = numbers.first() {
                let expected: Vec<u64> = (first..first + numbers.len() as u64).collect();
                assert_eq!(numbers, expected, "background events once each, no gap");
            }
        }
    }
}

fn judge(plan: &Schedule, applied: &[forkscope::wire::sse::SseEvent]) {
    no_reused_id(applied);
    match plan.call {
        Some((steps, _)) => {
            assert_eq!(
                progress_of(applied),
                (1..=steps).collect::<Vec<_>>(),
                "every step once, in order"
            );
            assert_eq!(results_of(applied), 1, "the result once");
        }
        None => {
            let numbers = background_of(applied);
            let first = numbers[0];
            let expected: Vec<u64> = (first..first + numbers.len() as u64).collect();
            assert_eq!(numbers, expected, "background events once each, no gap");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_schedules_over_two_replicas_on_redis_hold_the_invariant() {
    let spec = Spec {
        backend: Backend::Redis,
        policy: Policy::Fenced,
        emit_ms: Some(EMIT_MS),
        lease_ms: LEASE_MS,
        partitionable: true,
    };
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_ansi(false)
        .try_init();
    let Some(mut lab) = Lab::start_with(spec).await else {
        return;
    };
    // `forkscope balance` in front of each replica's front (a proxy that can stop answering).
    let mut fronts = Vec::new();
    for replica in &lab.replicas {
        fronts.push(Proxy::start(replica.addr).await.expect("front proxy"));
    }
    let upstreams = fronts
        .iter()
        .map(|f| Upstream::parse(&format!("http://{}", f.addr)).unwrap())
        .collect();
    let balancer = Balancer::start("127.0.0.1:0".parse().unwrap(), upstreams, Mode::RoundRobin)
        .await
        .expect("balancer");
    balancer.set_head_timeout(HEAD_TIMEOUT);
    let url = format!("http://{}/mcp", balancer.addr);
    let count: u64 = std::env::var("FORKSCOPE_SCHEDULES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let first_seed: u64 = std::env::var("FORKSCOPE_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut told = std::collections::BTreeMap::<String, u64>::new();
    for seed in first_seed..first_seed + count {
        let plan = schedule(&mut SplitMix64::new(seed));
        // Shown only when the test fails: the schedule that broke it, and its seed.
        println!("seed {seed}: {plan:?}");
        // A cursor of another session, for the foreign-cursor fault.
        let other = lab.initialize(&url).await;
        let mut probe = lab.call(&url, &other, 1, 0).await;
        assert!(probe.until(|e| results_of(e) == 1).await);
        let foreign_cursor = probe.last_id();
        let session = lab.initialize(&url).await;
        let mut run = Run {
            lab: &mut lab,
            fronts: &fronts,
            url: url.clone(),
            session,
            foreign_cursor,
        };
        let followed = tokio::time::timeout(Duration::from_secs(60), follow(&mut run, &plan)).await;
        match followed {
            Err(_) => panic!("seed {seed} ({plan:?}) did not finish"),
            Ok(Err((how, applied))) => {
                let judged = std::panic::catch_unwind(|| judge_prefix(&plan, &applied));
                assert!(judged.is_ok(), "seed {seed} broke the invariant: {plan:?}");
                *told.entry(format!("{how:?}")).or_default() += 1;
            }
            Ok(Ok(applied)) => {
                let judged = std::panic::catch_unwind(|| judge(&plan, &applied));
                assert!(judged.is_ok(), "seed {seed} broke the invariant: {plan:?}");
            }
        }
    }
    eprintln!(
        "{count} schedules from seed {first_seed}: every one held; ended by the store and told: {told:?}"
    );
}
