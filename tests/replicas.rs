//! Two replicas of `forkscope serve` on one store, over real sockets: on the in-memory store and
//! on a real `redis-server`, as one suite. A resume that lands on the other replica continues the
//! stream exactly; a resume elsewhere fences the orphan (and, naive, does not); a call outlives
//! the replica that ran it; a lost or emptied Redis gets typed answers.

mod common;

use common::services::RedisServer;
use forkscope::store::{Retention, Store};
use forkscope::wire::balance::{Balancer, Mode, Upstream};
use forkscope::wire::replica::{self, Counters, ReplicaOptions, RunningReplica};
use forkscope::wire::server::EmitRate;
use forkscope::wire::sse::{Parser, SseEvent};
use forkscope_core::Policy;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// A safety net only: tests synchronise on what they observe, and this bounds a hang.
const PATIENCE: Duration = Duration::from_secs(20);

struct Lab {
    store: Store,
    replicas: Vec<RunningReplica>,
    http: reqwest::Client,
    redis: Option<RedisServer>,
}

#[derive(Clone, Copy)]
enum Backend {
    Memory,
    Redis,
}

impl Lab {
    async fn start(
        backend: Backend,
        policy: Policy,
        emit_ms: Option<u64>,
        lease_ms: u64,
    ) -> Option<Lab> {
        let retention = Retention {
            lease_ms,
            ..Retention::default()
        };
        let (store, redis) = match backend {
            Backend::Memory => (Store::memory(retention), None),
            Backend::Redis => {
                let redis = RedisServer::start()?;
                let store = Store::redis(&redis.url(), retention)
                    .await
                    .expect("connect");
                (store, Some(redis))
            }
        };
        let mut replicas = Vec::new();
        for name in ["a", "b"] {
            // Each replica connects on its own, as separate processes would.
            let own = match backend {
                Backend::Memory => store.clone(),
                Backend::Redis => Store::redis(&redis.as_ref()?.url(), retention).await.ok()?,
            };
            let options = ReplicaOptions {
                name: Some(name.into()),
                policy,
                background: emit_ms.map(EmitRate::every_ms),
                allowed_hosts: Vec::new(),
                max_deliveries: replica::MAX_DELIVERIES,
            };
            let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
            replicas.push(
                replica::start(own, options, addr)
                    .await
                    .expect("start replica"),
            );
        }
        Some(Lab {
            store,
            replicas,
            http: reqwest::Client::new(),
            redis,
        })
    }

    fn url(&self, replica: usize) -> String {
        format!("http://{}/mcp", self.replicas[replica].addr)
    }

    fn counter(&self, replica: usize, pick: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        Counters::get(pick(&self.replicas[replica].counters))
    }

    async fn initialize(&self, url: &str) -> String {
        let response = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"replicas-test","version":"1"}}}).to_string())
            .send()
            .await
            .expect("initialize");
        assert_eq!(response.status(), 200);
        response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned()
    }

    fn post(&self, url: &str, session: &str, body: Value) -> reqwest::RequestBuilder {
        self.http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", session)
            .body(body.to_string())
    }

    async fn call(&self, url: &str, session: &str, steps: u64, delay_ms: u64) -> Sse {
        let body = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress_task","arguments":{"steps":steps,"delay_ms":delay_ms},"_meta":{"progressToken":"p"}}});
        Sse::open(self.post(url, session, body)).await
    }

    fn get(&self, url: &str, session: &str, cursor: Option<&str>) -> reqwest::RequestBuilder {
        let mut get = self
            .http
            .get(url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", session);
        if let Some(cursor) = cursor {
            get = get.header("last-event-id", cursor);
        }
        get
    }
}

/// An SSE response read as it arrives.
struct Sse {
    response: reqwest::Response,
    parser: Parser,
    events: Vec<SseEvent>,
    ended: bool,
}

impl Sse {
    async fn open(request: reqwest::RequestBuilder) -> Sse {
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), 200, "an SSE stream");
        Sse {
            response,
            parser: Parser::new(),
            events: Vec::new(),
            ended: false,
        }
    }

    fn served_by(&self) -> &str {
        self.response.headers()["mcp-served-by"].to_str().unwrap()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
    }

    /// Reads until `done` holds of what arrived, or the stream ends. Returns whether it held.
    async fn until(&mut self, done: impl Fn(&[SseEvent]) -> bool) -> bool {
        let read = async {
            while !done(&self.events) {
                match self.response.chunk().await {
                    Ok(Some(chunk)) => self.events.extend(self.parser.feed(&chunk).unwrap()),
                    _ => {
                        self.ended = true;
                        return false;
                    }
                }
            }
            true
        };
        tokio::time::timeout(PATIENCE, read).await.unwrap_or(false)
    }

    async fn read_to_end(&mut self) {
        self.until(|_| false).await;
    }

    fn last_id(&self) -> String {
        self.events
            .iter()
            .rev()
            .find_map(|e| e.id.clone())
            .expect("an event id")
    }
}

fn progress_of(events: &[SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|v| v.pointer("/params/progress").and_then(Value::as_u64))
        .collect()
}

fn results_of(events: &[SseEvent]) -> usize {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter(|v| v.get("result").is_some())
        .count()
}

/// The sequence numbers of the events with data (`s2-41.<key>` → 41).
fn seqs_of(events: &[SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| !e.data.is_empty())
        .filter_map(|e| e.id.as_deref())
        .filter_map(|id| id.split_once('-')?.1.split('.').next()?.parse().ok())
        .collect()
}

macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Memory).await;
                }
            )*
        }
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Redis).await;
                }
            )*
        }
    };
}

both_stores!(
    a_call_resumed_on_the_other_replica_delivers_each_step_once,
    a_resume_on_another_replica_fences_the_orphan,
    naive_replicas_fork_across_machines,
    a_call_outlives_its_replica,
    round_robin_through_the_balancer,
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
    let upstreams = lab
        .replicas
        .iter()
        .map(|r| Upstream::parse(&format!("http://{}", r.addr)).unwrap())
        .collect();
    let balancer = Balancer::start("127.0.0.1:0".parse().unwrap(), upstreams, Mode::RoundRobin)
        .await
        .expect("balancer");
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
