//! A lab of two in-process replicas on one store (memory, or a real `redis-server`), and an
//! SSE client that reads a response as it arrives: shared by the replica tests.

use super::services::RedisServer;
use forkscope::store::{Retention, Store};
use forkscope::wire::balance::{Balancer, Mode, Upstream};
use forkscope::wire::proxy::Proxy;
use forkscope::wire::replica::{self, Counters, ReplicaOptions, RunningReplica};
use forkscope::wire::server::EmitRate;
use forkscope::wire::sse::{Parser, SseEvent};
use forkscope_core::Policy;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Each named `async fn name(backend: Backend)` of the calling test file as two tests: on the
/// in-memory store and on a real `redis-server`.
#[macro_export]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::replica_lab::Backend::Memory).await;
                }
            )*
        }
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::replica_lab::Backend::Redis).await;
                }
            )*
        }
    };
}

/// A safety net only: tests synchronise on what they observe, and this bounds a hang.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// How a lab is made.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub backend: Backend,
    pub policy: Policy,
    pub emit_ms: Option<u64>,
    pub lease_ms: u64,
    pub partitionable: bool,
}

pub struct Lab {
    pub store: Store,
    /// Each replica's link to Redis, when the lab was made partitionable.
    pub links: Vec<Proxy>,
    pub spec: Spec,
    pub replicas: Vec<RunningReplica>,
    pub http: reqwest::Client,
    pub redis: Option<RedisServer>,
}

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Memory,
    Redis,
}

impl Lab {
    pub async fn start(
        backend: Backend,
        policy: Policy,
        emit_ms: Option<u64>,
        lease_ms: u64,
    ) -> Option<Lab> {
        Lab::start_with(Spec {
            backend,
            policy,
            emit_ms,
            lease_ms,
            partitionable: false,
        })
        .await
    }

    /// `partitionable`: each replica reaches Redis through a fault proxy of its own
    /// ([`Lab::links`]), so a test can cut or slow one replica's link to the store.
    pub async fn start_with(spec: Spec) -> Option<Lab> {
        let retention = Retention {
            lease_ms: spec.lease_ms,
            ..Retention::default()
        };
        let (store, redis) = match spec.backend {
            Backend::Memory => (Store::memory(retention), None),
            Backend::Redis => {
                let redis = RedisServer::start()?;
                let store = Store::redis(&redis.url(), retention)
                    .await
                    .expect("connect");
                (store, Some(redis))
            }
        };
        let mut lab = Lab {
            store,
            replicas: Vec::new(),
            http: reqwest::Client::new(),
            redis,
            links: Vec::new(),
            spec,
        };
        for name in ["a", "b"] {
            if let (true, Some(redis)) = (spec.partitionable, &lab.redis) {
                lab.links
                    .push(Proxy::start(redis.addr()).await.expect("link proxy"));
            }
            let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
            let replica = lab.start_replica(name, addr).await?;
            lab.replicas.push(replica);
        }
        Some(lab)
    }

    /// The store as replica `index` reaches it: its own connection, as a process would have.
    async fn store_for(&self, index: usize) -> Option<Store> {
        let retention = self.store.retention();
        match (&self.redis, self.links.get(index)) {
            (None, _) => Some(self.store.clone()),
            (Some(_), Some(link)) => Store::redis(&format!("redis://{}/", link.addr), retention)
                .await
                .ok(),
            (Some(redis), None) => Store::redis(&redis.url(), retention).await.ok(),
        }
    }

    async fn start_replica(&self, name: &str, addr: SocketAddr) -> Option<RunningReplica> {
        let index = usize::from(name != "a");
        let options = ReplicaOptions {
            name: Some(name.into()),
            policy: self
                .spec
                .policy
                .try_into()
                .expect("replicas run fenced or naive"),
            background: self.spec.emit_ms.map(EmitRate::every_ms),
            allowed_hosts: Vec::new(),
            max_deliveries: replica::MAX_DELIVERIES,
            ..ReplicaOptions::default()
        };
        let store = self.store_for(index).await?;
        // A restarted replica binds its old port again: the kernel may hold it a moment.
        for _ in 0..100 {
            match replica::start(store.clone(), options.clone(), addr).await {
                Ok(replica) => return Some(replica),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        panic!("replica {name} could not bind {addr} again");
    }

    /// Kills replica `index` mid-whatever (a crash) and starts it again on the same address.
    pub async fn restart(&mut self, index: usize) {
        let old = self.replicas.remove(index);
        let (name, addr) = (old.name.clone(), old.addr);
        old.kill();
        let replica = self.start_replica(&name, addr).await.expect("restart");
        self.replicas.insert(index, replica);
    }

    /// `forkscope balance` in front of the replicas: round-robin, no stickiness.
    pub async fn balancer(&self) -> Balancer {
        self.balancer_in(Mode::RoundRobin).await
    }

    /// `forkscope balance` in front of the replicas, routing as `mode` says.
    pub async fn balancer_in(&self, mode: Mode) -> Balancer {
        let upstreams = self
            .replicas
            .iter()
            .map(|r| Upstream::parse(&format!("http://{}", r.addr)).unwrap())
            .collect();
        Balancer::start("127.0.0.1:0".parse().unwrap(), upstreams, mode)
            .await
            .expect("balancer")
    }

    pub fn url(&self, replica: usize) -> String {
        format!("http://{}/mcp", self.replicas[replica].addr)
    }

    pub fn counter(&self, replica: usize, pick: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        Counters::get(pick(&self.replicas[replica].counters))
    }

    pub async fn initialize(&self, url: &str) -> String {
        let initialize = || {
            self.http
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"replicas-test","version":"1"}}}).to_string())
        };
        let response = retrying_unavailable(initialize).await;
        assert_eq!(response.status(), 200);
        response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned()
    }

    pub fn post(&self, url: &str, session: &str, body: Value) -> reqwest::RequestBuilder {
        self.http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", session)
            .body(body.to_string())
    }

    pub async fn call(&self, url: &str, session: &str, steps: u64, delay_ms: u64) -> Sse {
        let body = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress_task","arguments":{"steps":steps,"delay_ms":delay_ms},"_meta":{"progressToken":"p"}}});
        let response = retrying_unavailable(|| self.post(url, session, body.clone())).await;
        assert_eq!(response.status(), 200, "a tool call's stream");
        Sse::from_response(response)
    }

    /// A session on the first replica whose call of `steps` × `delay_ms` the client leaves
    /// once it holds `seen` progress events: the session, and the cursor it left at. The call
    /// runs on.
    pub async fn call_left(&self, steps: u64, delay_ms: u64, seen: usize) -> (String, String) {
        let session = self.initialize(&self.url(0)).await;
        let mut call = self.call(&self.url(0), &session, steps, delay_ms).await;
        assert!(call.until(|e| progress_of(e).len() >= seen).await);
        (session, call.last_id())
    }

    pub fn get(&self, url: &str, session: &str, cursor: Option<&str>) -> reqwest::RequestBuilder {
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

/// Sends a request again while it is answered 503 (a replica reconnecting to its store) or 502
/// (a balancer whose replica is restarting), as a client honouring Retry-After would; bounded.
pub async fn retrying_unavailable(
    request: impl Fn() -> reqwest::RequestBuilder,
) -> reqwest::Response {
    for _ in 0..100 {
        let response = request().send().await.expect("request");
        if !matches!(response.status().as_u16(), 502 | 503) {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("still unavailable after 100 tries")
}

/// An SSE response read as it arrives.
pub struct Sse {
    pub response: reqwest::Response,
    pub parser: Parser,
    pub events: Vec<SseEvent>,
    pub ended: bool,
}

impl Sse {
    pub async fn open(request: reqwest::RequestBuilder) -> Sse {
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), 200, "an SSE stream");
        Sse::from_response(response)
    }

    pub fn from_response(response: reqwest::Response) -> Sse {
        Sse {
            response,
            parser: Parser::new(),
            events: Vec::new(),
            ended: false,
        }
    }

    pub fn served_by(&self) -> &str {
        self.response.headers()["mcp-served-by"].to_str().unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
    }

    /// Reads until `done` holds of what arrived, or the stream ends. Returns whether it held.
    pub async fn until(&mut self, done: impl Fn(&[SseEvent]) -> bool) -> bool {
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

    pub async fn read_to_end(&mut self) {
        self.until(|_| false).await;
    }

    pub fn first_id(&self) -> String {
        self.events
            .iter()
            .find_map(|e| e.id.clone())
            .expect("an event id")
    }

    pub fn last_id(&self) -> String {
        self.events
            .iter()
            .rev()
            .find_map(|e| e.id.clone())
            .expect("an event id")
    }
}

pub fn progress_of(events: &[SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|v| v.pointer("/params/progress").and_then(Value::as_u64))
        .collect()
}

pub fn results_of(events: &[SseEvent]) -> usize {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter(|v| v.get("result").is_some())
        .count()
}

/// The sequence numbers of the events with data (`s2-41.<key>` → 41).
pub fn seqs_of(events: &[SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| !e.data.is_empty())
        .filter_map(|e| e.id.as_deref())
        .filter_map(|id| id.split_once('-')?.1.split('.').next()?.parse().ok())
        .collect()
}
