//! The MCP Streamable HTTP server (revision 2025-11-25) at `/mcp`, as a thin axum adapter.
//!
//! - [`routes`]: POST, GET and DELETE on `/mcp`; the core rules on every GET.
//! - [`stream_body`]: an SSE response — its opening (priming, replay), then the live tail.
//! - [`writers`]: the open SSE connections and their bounded queues.
//! - [`driver`]: the event-driven task that turns lab time into deadlines and work.
//! - [`background`] and [`tool`]: the work — the background emitter and `progress_task`, each
//!   the core's machine ([`forkscope_core::work`]) with its JSON-RPC bodies spelled here.
//! - [`liveness`]: keep-alive comments and the write deadline — how a dead connection is noticed.
//! - `handles`: what the parts above pass each other (the driver's wake, a TCP connection's
//!   handle); it imports none of them.
//! - [`rebinding`] and [`refusal`]: what is refused before the core is asked.
//! - [`modern`]: the 2026-07-28 revision on the same endpoint (stateless; the core's
//!   `revision` says which era a request speaks).

pub mod background;
pub(crate) mod connections;
pub mod driver;
pub mod effects;
pub mod emission;
mod event_stream;
pub(crate) mod handles;
pub(crate) mod incoming;
pub mod listen;
pub mod liveness;
pub mod modern;
pub mod rebinding;
pub(crate) mod refusal;
mod routes;
pub mod stream_body;
pub mod task_answers;
pub mod tasks;
pub mod tool;
pub mod writers;

pub use background::{EmitRate, emit_background};
pub use driver::{Next, run_due, run_until_idle};
pub use handles::{KEEPALIVE_FRAME, Wake};
pub use writers::{RETRY_HINT_MS, WRITER_QUEUE, Writers};

use crate::clock::LabClock;
use crate::wire::{Core, Shared};
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::post;
use forkscope_core::{ConnectionId, EventId, SessionId};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Largest POST body accepted; a larger one is answered 413 before it is read whole.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Connections served at once by default; past it a new one gets a 503 and is closed.
/// 64 sessions × 16 streams fit.
pub const MAX_CONNECTIONS: usize = 1_024;
/// How long a client may take by default to send a request's headers, and a POST's body: a
/// client trickling bytes (slowloris) cannot hold a connection open.
pub const REQUEST_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a connection may sit with no request in flight by default before it is closed
/// (HTTP/1 keep-alive and HTTP/2 alike): parked sockets cannot use up the connection cap.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Background events per second on each session's standalone stream; `None`: only on
    /// demand.
    pub background: Option<EmitRate>,
    /// Write each event's ground truth in an SSE comment (`: truth s2 5 <key>`), for a lab's
    /// own client and checker. Every SSE client ignores comments, but they cost bytes.
    pub truth_comments: bool,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`REQUEST_READ_TIMEOUT`].
    pub request_read_timeout: std::time::Duration,
    /// See [`IDLE_TIMEOUT`].
    pub idle_timeout: std::time::Duration,
    /// Keep-alive comments and the write deadline: how a dead connection is noticed.
    pub liveness: liveness::Liveness,
    /// Host names a request may dial besides loopback's and the bound address (`--allow-host`).
    pub allowed_hosts: Vec<String>,
    /// Which protocol revisions the endpoint serves (`--protocol`).
    pub protocols: forkscope_core::revision::Protocols,
    /// Tasks step on the lab's clock, in turns (`clock::turns`): the dashboard's own lab,
    /// which pauses and steps. `false` (`serve`): real time, every runner on its own.
    pub tasks_on_lab_clock: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            background: None,
            truth_comments: true,
            max_connections: MAX_CONNECTIONS,
            request_read_timeout: REQUEST_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            liveness: liveness::Liveness::default(),
            allowed_hosts: Vec::new(),
            protocols: forkscope_core::revision::Protocols::default(),
            tasks_on_lab_clock: false,
        }
    }
}

/// The server side's I/O state: open writers, the background schedule, running tool calls.
#[derive(Debug, Default)]
pub struct ServerIo {
    pub writers: Writers,
    /// See [`ServeOptions::truth_comments`].
    truth_comments: bool,
    background: background::Background,
    tool_calls: Vec<tool::RunningCall>,
    /// `emit_standalone` runs going.
    emissions: Vec<emission::Emission>,
}

impl ServerIo {
    pub fn open_connections(&self) -> usize {
        self.writers.len()
    }

    /// Open SSE connections per stream, for the views.
    pub fn connections_of(&self, session: SessionId, stream: forkscope_core::StreamId) -> usize {
        self.writers.connections_of(session, stream)
    }

    /// Stops writing to a stream the core let go of (its connections get `retry:` and EOF).
    pub fn close_stream(&mut self, session: SessionId, stream: forkscope_core::StreamId) {
        self.writers.close_stream(session, stream);
    }

    /// Tool calls still running.
    pub fn running_tool_calls(&self) -> usize {
        self.tool_calls.len()
    }

    /// Drops the I/O state of sessions the core no longer holds (expired while idle).
    pub(crate) fn forget_gone_sessions(&mut self, server: &forkscope_core::Server) {
        let gone: Vec<SessionId> = self
            .tool_calls
            .iter()
            .map(tool::RunningCall::session)
            .filter(|s| server.session(*s).is_none())
            .collect();
        for session in gone {
            tracing::info!(session = %session.short(), "session expired while idle");
            self.forget_session(session);
        }
    }

    fn forget_session(&mut self, session: SessionId) {
        self.background.forget(session);
        self.tool_calls.retain(|c| c.session() != session);
        self.emissions.retain(|e| e.session() != session);
        self.writers.close_session(session);
    }
}

/// Writes an emitted event to every connection open on its stream.
pub fn write_event(core: &mut Core, session: SessionId, event: EventId) {
    if let Some(outgoing) = core.server.outgoing(session, event) {
        let frame = stream_body::render(&outgoing, core.io.truth_comments);
        core.io
            .writers
            .send_to_stream(session, event.stream, &frame);
    }
}

#[derive(Clone)]
struct App {
    shared: Shared,
    truth: bool,
    clock: Arc<LabClock>,
    wake: Wake,
    next_connection: Arc<AtomicU64>,
    modern: modern::Modern,
}

impl App {
    fn connection(&self) -> ConnectionId {
        ConnectionId(self.next_connection.fetch_add(1, Ordering::Relaxed))
    }

    /// A writer for an SSE response on `stream`, woken into this server's driver and closable
    /// through its TCP connection (`tcp`).
    fn register(
        &self,
        core: &mut Core,
        connection: ConnectionId,
        session: SessionId,
        stream: forkscope_core::StreamId,
        tcp: Option<handles::Handle>,
        now: forkscope_core::LabTime,
    ) -> writers::Queue {
        core.io
            .writers
            .register(connection, session, stream, self.wake.clone(), tcp, now)
    }
}

/// A running server: its address, what wakes its driver, and what stops it.
#[derive(Debug)]
pub struct RunningServer {
    pub addr: SocketAddr,
    wake: Wake,
    shared: Shared,
    clock: Arc<LabClock>,
    shutdown: Option<oneshot::Sender<connections::Stop>>,
    tasks: Vec<JoinHandle<()>>,
    modern: modern::Modern,
}

/// How long `forkscope serve` lets its connections finish on SIGINT or SIGTERM, by default.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl RunningServer {
    /// What the 2026-07-28 side of the endpoint has done.
    pub fn modern(&self) -> &modern::ModernCounters {
        &self.modern.counters
    }

    /// What the tasks extension's side has done.
    pub fn tasks(&self) -> &tasks::TaskCounters {
        &self.modern.tasks.counters
    }

    /// The tasks extension's side itself (a scenario plants its mutation there).
    pub fn task_hub(&self) -> &tasks::TaskHub {
        &self.modern.tasks
    }

    /// The checker's verdict on everything this server did so far.
    pub fn verdict(&self) -> forkscope_core::Verdict {
        self.shared.lock().history.verdict()
    }

    /// Wakes the driver (after work was queued from outside a request).
    pub fn wake(&self) {
        self.wake.wake();
    }

    /// Stops at once: every connection is dropped where it stands (a lab torn down).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(connections::Stop::Abort);
        }
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl RunningServer {
    /// Stops gracefully: no new connection; every running tool call ends with a JSON-RPC error
    /// saying the server is stopping; every stream ends cleanly (`retry:`, then its terminating
    /// chunk); connections close once their responses are written, within `within`. Returns
    /// how many tool calls were stopped.
    pub async fn drain(mut self, within: std::time::Duration) -> usize {
        self.modern.tasks.end_listens();
        let stopped = {
            let mut core = self.shared.lock();
            let now = self.clock.now();
            let stopped = tool::stop_all(&mut core, now);
            core.io.writers.close_all();
            stopped
        };
        self.wake.wake();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(connections::Stop::Drain(within));
        }
        // The accept loop ends once its connections have (or its drain time is over).
        let mut tasks = std::mem::take(&mut self.tasks).into_iter();
        if let Some(serve) = tasks.next() {
            let _ = serve.await;
        }
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
        stopped
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn router(
    app: App,
    read_timeout: std::time::Duration,
    hosts: rebinding::AllowedHosts,
) -> axum::Router {
    axum::Router::new()
        .route(
            "/mcp",
            post(routes::post_mcp)
                .get(routes::get_mcp)
                // Without its own handler HEAD would run GET and mint a stream.
                .head(routes::head_mcp)
                .delete(routes::delete_mcp),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            read_timeout,
            connections::bound_request_read,
        ))
        .layer(middleware::from_fn(connections::track_in_flight))
        .layer(middleware::from_fn_with_state(
            Arc::new(hosts),
            rebinding::check_names,
        ))
        .with_state(app)
}

/// Binds `addr` (127.0.0.1 unless told otherwise) and serves until stopped.
pub async fn start(
    shared: Shared,
    clock: Arc<LabClock>,
    options: ServeOptions,
    addr: SocketAddr,
) -> std::io::Result<RunningServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let wake = Wake::default();
    let policy = {
        let mut core = shared.lock();
        core.io.truth_comments = options.truth_comments;
        core.server.policy()
    };
    let app = App {
        shared: shared.clone(),
        truth: options.truth_comments,
        clock: clock.clone(),
        wake: wake.clone(),
        next_connection: Arc::new(AtomicU64::new(1)),
        modern: modern::Modern::new(
            options.protocols,
            policy,
            None,
            {
                let (shared, clock) = (shared.clone(), clock.clone());
                handles::Report::to(move |record| {
                    let now = clock.now();
                    shared.lock().history.record(now, record);
                })
            },
            match options.tasks_on_lab_clock {
                true => crate::clock::Time::Lab(clock.clone(), crate::clock::Role::Work),
                false => crate::clock::Time::real(),
            },
        ),
    };
    let modern = app.modern.clone();
    let (shutdown, stopped) = oneshot::channel();
    let limits = connections::Limits {
        max_connections: options.max_connections,
        read_timeout: options.request_read_timeout,
        idle_timeout: options.idle_timeout,
        liveness: options.liveness,
    };
    let serve = tokio::spawn(connections::accept(
        listener,
        router(
            app,
            limits.read_timeout,
            rebinding::AllowedHosts::new(addr.ip(), options.allowed_hosts.iter().cloned())
                .following(shared.clone()),
        ),
        limits,
        stopped,
    ));
    let driver = tokio::spawn(driver::drive(
        shared.clone(),
        clock.clone(),
        options,
        wake.clone(),
    ));
    Ok(RunningServer {
        addr,
        wake,
        shared,
        clock,
        shutdown: Some(shutdown),
        tasks: vec![serve, driver],
        modern,
    })
}
