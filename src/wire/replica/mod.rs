//! The MCP server as one of several replicas on a shared store ([`crate::store`]): any replica
//! answers any request of any session, behind a load balancer with no stickiness.
//!
//! - [`routes`]: POST, GET and DELETE on `/mcp`: parse, read the store, ask the core
//!   ([`forkscope_core::replica`]), commit by compare-and-set, answer.
//! - [`deliver`]: an SSE response: the stream's log from the client's cursor, on the epoch this
//!   replica holds; it ends when a resume elsewhere fenced it.
//! - [`work`]: a tool call under its lease, and the background emitter under the stream epoch.
//! - [`local`]: what the naive replica delivers live: only its own writes, as the SDKs do.
//!
//! Every response says which replica answered (`Mcp-Served-By`, a lab extension header that
//! clients ignore).

mod deliver;
mod local;
mod routes;
pub mod witness;
mod work;

use crate::store::{SessionId, Store};
use crate::wire::headers;
use crate::wire::server::connections::{self, Limits, Stop};
use crate::wire::server::rebinding::{self, AllowedHosts};
use crate::wire::server::{self, EmitRate, MAX_BODY_BYTES, liveness};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderValue;
use axum::middleware;
use axum::response::Response;
use axum::routing::post;
use forkscope_core::replica::ReplicaPolicy;
use forkscope_core::{Policy, StreamId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::{AbortHandle, JoinHandle};

/// Deliveries (open SSE responses) one replica serves at once; past it a GET or a call is
/// answered 503 with Retry-After. Each holds a store connection on Redis.
pub const MAX_DELIVERIES: usize = 1_024;

#[derive(Clone, Debug)]
pub struct ReplicaOptions {
    /// This replica's name, in `Mcp-Served-By` and in every epoch it takes (`None`: its
    /// address, HOST:PORT, once bound).
    pub name: Option<String>,
    /// Fenced or naive: an SDK policy cannot be asked of a replica.
    pub policy: ReplicaPolicy,
    /// Background events on each session's standalone stream; `None`: none.
    pub background: Option<EmitRate>,
    pub allowed_hosts: Vec<String>,
    pub max_deliveries: usize,
    /// A lab watching this replica: it is told every decision and every live send.
    pub witness: Option<witness::Witness>,
    /// Write each event's ground truth in an SSE comment, for the lab's own client.
    pub truth_comments: bool,
    /// Run a background emitter for every standalone stream, emitting on
    /// [`RunningReplica::emit_now`] (and on `background`'s rate, if any): the lab's `EmitOn`.
    pub emit_on_demand: bool,
    /// The single server's bounds on connections, the same accept loop
    /// ([`server::connections`]): see [`server::MAX_CONNECTIONS`],
    /// [`server::REQUEST_READ_TIMEOUT`], [`server::IDLE_TIMEOUT`].
    pub max_connections: usize,
    pub request_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// A delivery whose frames the client has not taken for this long is judged gone: it ends
    /// and its connection is closed (`None`: kept until the socket fails). See
    /// [`liveness::WRITE_DEADLINE_MS`].
    pub write_deadline: Option<Duration>,
    /// Which protocol revisions the endpoint serves: a 2026-07-28 request is stateless, so
    /// any replica answers it alone (no store).
    pub protocols: forkscope_core::revision::Protocols,
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        ReplicaOptions {
            name: None,
            policy: ReplicaPolicy::Fenced,
            background: None,
            allowed_hosts: Vec::new(),
            max_deliveries: MAX_DELIVERIES,
            witness: None,
            truth_comments: false,
            emit_on_demand: false,
            max_connections: server::MAX_CONNECTIONS,
            request_read_timeout: server::REQUEST_READ_TIMEOUT,
            idle_timeout: server::IDLE_TIMEOUT,
            write_deadline: Some(Duration::from_millis(liveness::WRITE_DEADLINE_MS)),
            protocols: forkscope_core::revision::Protocols::default(),
        }
    }
}

/// What a replica counted: the fence at work, seen from one replica.
#[derive(Debug, Default)]
pub struct Counters {
    /// Writes (emits, call steps) this replica made on a stale epoch, refused by the store.
    pub late_writes_refused: AtomicU64,
    /// Deliveries this replica ended because a resume elsewhere took the stream.
    pub deliveries_fenced: AtomicU64,
    /// Tool calls this replica took over after their runner's lease expired.
    pub calls_adopted: AtomicU64,
    /// Resumes this replica committed.
    pub resumes: AtomicU64,
}

impl Counters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// What every handler and task of one replica shares.
#[derive(Clone, Debug)]
struct Replica {
    store: Store,
    name: Arc<str>,
    policy: Policy,
    background: Option<EmitRate>,
    local: local::LocalHub,
    deliveries: Arc<Semaphore>,
    counters: Arc<Counters>,
    /// The replica's own tasks (deliveries, calls, emitters): [`RunningReplica::kill`] stops
    /// them all at once, as a crash would.
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
    witness: Option<witness::Witness>,
    truth: bool,
    emit_on_demand: bool,
    pokes: Pokes,
    connections: Arc<AtomicU64>,
    /// Cleared by [`RunningReplica::kill`]: a request still in flight then starts no new work
    /// and tells the lab nothing more, as a crashed process would not.
    alive: Arc<AtomicBool>,
    /// See [`ReplicaOptions::write_deadline`].
    write_deadline: Option<Duration>,
    /// The era gate, shared with the single server.
    modern: server::modern::Modern,
}

/// The emitters of each session on this replica, by stream, poked by
/// [`RunningReplica::emit_now`].
type Pokes = Arc<Mutex<HashMap<SessionId, Vec<(StreamId, Weak<Semaphore>)>>>>;

/// Pokes an emitter holds before more are dropped: a key held down is not a thousand emits.
pub(crate) const MAX_POKES: usize = 64;

impl Replica {
    fn tell(&self, fact: impl FnOnce() -> witness::Fact) {
        if let Some(witness) = &self.witness
            && self.alive.load(Ordering::SeqCst)
        {
            witness.tell(fact());
        }
    }

    fn spawn<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        // Checked under the task list's lock, which `kill` drains after clearing it: a task is
        // either refused here or aborted there.
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if !self.alive.load(Ordering::SeqCst) {
            return;
        }
        let handle = tokio::spawn(task).abort_handle();
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }
}

/// A replica serving on its address until it is stopped or dropped.
#[derive(Debug)]
pub struct RunningReplica {
    pub addr: SocketAddr,
    pub name: String,
    pub counters: Arc<Counters>,
    stop: Option<oneshot::Sender<Stop>>,
    server: JoinHandle<()>,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
    pokes: Pokes,
    alive: Arc<AtomicBool>,
    /// The 2026-07-28 side: its counters, and the task runners a kill stops.
    modern: server::modern::Modern,
}

impl RunningReplica {
    /// The tasks extension's side of this replica (its counters outlive a kill).
    pub fn tasks(&self) -> Arc<server::tasks::TaskHub> {
        self.modern.tasks.clone()
    }

    /// Each background emitter this replica runs for `session` emits once, now. Returns how
    /// many were poked.
    pub fn emit_now(&self, session: &SessionId) -> usize {
        let mut pokes = self.pokes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(emitters) = pokes.get_mut(session) else {
            return 0;
        };
        emitters.retain(|(_, e)| e.strong_count() > 0);
        // Counted, not coalesced: three pokes are three emits.
        for emitter in emitters.iter().filter_map(|(_, e)| e.upgrade()) {
            if emitter.available_permits() < MAX_POKES {
                emitter.add_permits(1);
            }
        }
        emitters.len()
    }

    /// Stops at once, everything this replica runs included, with nothing said to anyone: a
    /// crash, for the tests that kill a replica mid-call.
    pub fn kill(mut self) {
        self.abort_all();
    }

    /// Stops gracefully: no new connection; this replica's work ends where it stands (a call
    /// it ran is adopted by another replica once its lease expires, as after a crash, and no
    /// step is lost: each was committed before it was sent); every delivery's response ends
    /// cleanly with its terminating chunk, so its client reconnects elsewhere from its cursor;
    /// connections close once their responses are written, within `within`.
    pub async fn drain(mut self, within: Duration) {
        self.modern.tasks.end_listens();
        self.abort_work();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Drain(within));
        }
        let _ = (&mut self.server).await;
    }

    fn abort_all(&mut self) {
        self.abort_work();
        self.stop.take();
        self.server.abort();
    }

    /// Ends what this replica runs: deliveries, call runners, background emitters.
    fn abort_work(&mut self) {
        self.alive.store(false, Ordering::SeqCst);
        self.modern.tasks.kill_runners();
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

impl Drop for RunningReplica {
    fn drop(&mut self) {
        self.abort_all();
    }
}

async fn served_by(State(name): State<HeaderValue>, mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(headers::SERVED_BY, name.clone());
    response
}

/// Serves `/mcp` on `addr` as replica `options.name` of the store.
pub async fn start(
    store: Store,
    options: ReplicaOptions,
    addr: SocketAddr,
) -> std::io::Result<RunningReplica> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let name = options.name.unwrap_or_else(|| addr.to_string());
    let name_header = HeaderValue::from_str(&name).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a replica name must be printable ASCII",
        )
    })?;
    let counters = Arc::new(Counters::default());
    let tasks = Arc::new(Mutex::new(Vec::new()));
    let pokes = Pokes::default();
    let alive = Arc::new(AtomicBool::new(true));
    let shared_tasks = (options.policy == ReplicaPolicy::Fenced).then(|| store.clone());
    // What its 2026-07-28 calls and tasks do reaches a lab watching it, while it is alive.
    let report = match &options.witness {
        Some(witness) => {
            let (witness, alive) = (witness.clone(), alive.clone());
            server::handles::Report::to(move |record| {
                if alive.load(Ordering::SeqCst) {
                    witness.tell(witness::Fact::Request(record));
                }
            })
        }
        None => server::handles::Report::default(),
    };
    let replica = Replica {
        witness: options.witness,
        truth: options.truth_comments,
        emit_on_demand: options.emit_on_demand,
        pokes: pokes.clone(),
        connections: Arc::new(AtomicU64::new(0)),
        alive: alive.clone(),
        store,
        name: name.as_str().into(),
        policy: options.policy.into(),
        background: options.background,
        local: local::LocalHub::default(),
        deliveries: Arc::new(Semaphore::new(options.max_deliveries)),
        counters: counters.clone(),
        tasks: tasks.clone(),
        write_deadline: options.write_deadline,
        modern: server::modern::Modern::new(
            options.protocols,
            options.policy.into(),
            // Fenced replicas keep tasks in the shared store; naive ones in their own process,
            // as the SDKs' task managers do: a poll that lands elsewhere finds nothing.
            shared_tasks,
            report,
            // A replica's store may be a `redis-server`, on a clock of its own: real time.
            crate::clock::Time::real(),
        ),
    };
    let allowed = Arc::new(AllowedHosts::new(addr.ip(), options.allowed_hosts));
    let limits = Limits {
        max_connections: options.max_connections,
        read_timeout: options.request_read_timeout,
        idle_timeout: options.idle_timeout,
        // A replica keeps its own keep-alive comments and write deadline, in each delivery.
        liveness: liveness::Liveness {
            keepalive_ms: None,
            write_deadline_ms: options.write_deadline.map(|d| d.as_millis() as u64),
        },
    };
    let modern = replica.modern.clone();
    let app = axum::Router::new()
        .route(
            "/mcp",
            post(routes::post_mcp)
                .get(routes::get_mcp)
                .delete(routes::delete_mcp),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            limits.read_timeout,
            connections::bound_request_read,
        ))
        .layer(middleware::from_fn(connections::track_in_flight))
        .with_state(replica)
        .layer(middleware::from_fn_with_state(
            allowed,
            rebinding::check_names,
        ))
        .layer(middleware::map_response_with_state(name_header, served_by));
    let (stop, stopped) = oneshot::channel::<Stop>();
    // The single server's accept loop: Nagle off, the connection cap, head and idle timeouts,
    // a drain on stop.
    let server = tokio::spawn(connections::accept(listener, app, limits, stopped));
    Ok(RunningReplica {
        addr,
        name,
        counters,
        stop: Some(stop),
        server,
        tasks,
        modern,
        pokes,
        alive,
    })
}

/// The session a request names, as the replica reads it.
fn session_key(raw: &str) -> Option<SessionId> {
    SessionId::parse(raw)
}
