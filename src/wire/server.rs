//! The MCP Streamable HTTP server (revision 2025-11-25) at `/mcp`, as a thin axum adapter.
//!
//! POST carries JSON-RPC (`initialize`, `ping`, `tools/list`, `tools/call`, notifications);
//! GET opens or resumes a stream — the core rules on it and this file writes the decision;
//! DELETE ends a session. A driver task turns lab time into grace-timer expiries, background
//! emits and tool-call progress. Every write to an SSE connection goes through [`ServerIo`].

use super::headers::{self, MODELLED_REVISION, SUPPORTED_REVISIONS};
use super::jsonrpc;
use super::sse::{self, Truth};
use super::{Core, Shared};
use crate::lab::clock::LabClock;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use forkscope_core::{
    ConnectionId, EventId, LabTime, Payload, Policy, ResumeDecision, ResumeRequest, SessionError,
    SessionId, StreamId,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Largest POST body accepted; a larger one is answered 413 before it is read whole.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Frames queued for one SSE connection beyond its replay; a client that falls this far behind
/// is cut off and must resume.
pub const WRITER_QUEUE: usize = 65_536;
/// The `retry:` hint sent on priming events and before the server closes a stream.
pub const RETRY_HINT_MS: u64 = 250;
/// How often the driver turns lab time into timers and emits.
const TICK: Duration = Duration::from_millis(5);
/// Bounds on the `progress_task` tool's arguments.
const MAX_STEPS: u64 = 10_000;
const MAX_DELAY_MS: u64 = 60_000;

#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Lab milliseconds between background emits on each session's standalone stream.
    pub background_every_ms: Option<u64>,
}

/// One open SSE connection.
#[derive(Debug)]
struct Writer {
    session: SessionId,
    stream: StreamId,
    tx: mpsc::Sender<Bytes>,
}

/// A running `progress_task` call.
#[derive(Debug)]
struct ToolCall {
    session: SessionId,
    stream: StreamId,
    request_id: Value,
    progress_token: Option<Value>,
    steps: u64,
    done: u64,
    delay_ms: u64,
    next_at: LabTime,
}

/// The server side's I/O state: open writers, background schedule, running tool calls.
#[derive(Debug, Default)]
pub struct ServerIo {
    writers: HashMap<ConnectionId, Writer>,
    background_due: HashMap<SessionId, LabTime>,
    background_counts: HashMap<SessionId, u64>,
    tool_calls: Vec<ToolCall>,
}

impl ServerIo {
    pub fn open_connections(&self) -> usize {
        self.writers.len()
    }

    /// Open SSE connections per stream, for the views.
    pub fn connections_of(&self, session: SessionId, stream: StreamId) -> usize {
        self.writers
            .values()
            .filter(|w| w.session == session && w.stream == stream)
            .count()
    }

    fn register(
        &mut self,
        connection: ConnectionId,
        session: SessionId,
        stream: StreamId,
        tx: mpsc::Sender<Bytes>,
    ) {
        self.writers.insert(
            connection,
            Writer {
                session,
                stream,
                tx,
            },
        );
    }

    fn send(&mut self, connection: ConnectionId, frame: Bytes) {
        let Some(writer) = self.writers.get(&connection) else {
            return;
        };
        if writer.tx.try_send(frame).is_err() {
            // Too slow or gone: cut it off; the client resumes from its cursor.
            self.writers.remove(&connection);
        }
    }

    /// Ends a connection: a last `retry:` so the client knows when to come back, then EOF.
    fn close(&mut self, connection: ConnectionId) {
        if let Some(writer) = self.writers.remove(&connection) {
            let _ = writer.tx.try_send(sse::retry_frame(RETRY_HINT_MS));
        }
    }

    fn close_stream(&mut self, session: SessionId, stream: StreamId) {
        let doomed: Vec<ConnectionId> = self
            .writers
            .iter()
            .filter(|(_, w)| w.session == session && w.stream == stream)
            .map(|(c, _)| *c)
            .collect();
        for connection in doomed {
            self.close(connection);
        }
    }

    fn forget_session(&mut self, session: SessionId) {
        self.background_due.remove(&session);
        self.background_counts.remove(&session);
        self.tool_calls.retain(|c| c.session != session);
        let doomed: Vec<ConnectionId> = self
            .writers
            .iter()
            .filter(|(_, w)| w.session == session)
            .map(|(c, _)| *c)
            .collect();
        for connection in doomed {
            self.close(connection);
        }
    }
}

/// Renders an emitted event as the frame the core's stream spells it with.
fn render(core: &Core, session: SessionId, event: EventId) -> Option<Bytes> {
    let stream = core.server.session(session)?.stream(event.stream)?;
    let stored = core
        .server
        .replay(session, event.stream, event.seq - 1)?
        .next()?;
    let truth = Truth {
        stream: event.stream.0,
        seq: event.seq,
        key: Some(stored.payload.key.to_string()),
    };
    Some(sse::frame(
        Some(&truth),
        &stream.wire_id(event.seq),
        None,
        &stored.payload.body,
    ))
}

/// Writes an event to every connection open on its stream (one under fenced; under naive an
/// un-detached old connection keeps receiving too).
pub fn write_event(core: &mut Core, session: SessionId, event: EventId) {
    let Some(frame) = render(core, session, event) else {
        return;
    };
    let targets: Vec<ConnectionId> = core
        .io
        .writers
        .iter()
        .filter(|(_, w)| w.session == session && w.stream == event.stream)
        .map(|(c, _)| *c)
        .collect();
    for connection in targets {
        core.io.send(connection, frame.clone());
    }
}

/// The session's background task emits its next event.
pub fn emit_background(core: &mut Core, session: SessionId, now: LabTime) -> Option<EventId> {
    let n = {
        let count = core.io.background_counts.entry(session).or_default();
        *count += 1;
        *count
    };
    let key = format!("{}:bg:{n}", session.short());
    let body = jsonrpc::notification(
        "notifications/message",
        json!({ "level": "info", "logger": "forkscope", "data": { "background": n } }),
    );
    let emitted = core
        .server
        .emit_background(now, session, Payload::new(key, body), &mut core.history)
        .ok()?;
    if let Some(refused) = emitted.refused_on {
        tracing::info!(session = %session.short(), stream = %refused, "late emit refused on a fenced stream");
    }
    write_event(core, session, emitted.event);
    Some(emitted.event)
}

/// One driver step at lab time `now`: grace expiries, due background emits, tool-call progress.
pub fn tick(core: &mut Core, now: LabTime, options: &ServeOptions) {
    for expired in core.server.handle_timeout(now, &mut core.history) {
        tracing::info!(session = %expired.session.short(), stream = %expired.stream, state = expired.state.label(), "grace window over");
        core.io.close_stream(expired.session, expired.stream);
    }
    if let Some(every) = options.background_every_ms {
        let sessions: Vec<SessionId> = core.server.sessions().map(|s| s.id()).collect();
        for session in sessions {
            let due = *core
                .io
                .background_due
                .entry(session)
                .or_insert(now.plus(every));
            if due <= now {
                emit_background(core, session, now);
                core.io.background_due.insert(session, now.plus(every));
            }
        }
        core.io
            .background_due
            .retain(|s, _| core.server.session(*s).is_some());
    }
    let mut index = 0;
    while index < core.io.tool_calls.len() {
        if core.io.tool_calls[index].next_at > now {
            index += 1;
            continue;
        }
        if step_tool_call(core, index, now) {
            index += 1;
        } else {
            core.io.tool_calls.swap_remove(index);
        }
    }
}

/// Advances a tool call by one step; returns false once its result is written.
fn step_tool_call(core: &mut Core, index: usize, now: LabTime) -> bool {
    let call = &mut core.io.tool_calls[index];
    let (session, stream) = (call.session, call.stream);
    let short = session.short();
    let payload = if call.done < call.steps {
        call.done += 1;
        call.next_at = now.plus(call.delay_ms);
        let Some(token) = call.progress_token.clone() else {
            return true;
        };
        let (done, steps) = (call.done, call.steps);
        Payload::new(
            format!("{short}:call{}:progress{done}", stream.0),
            jsonrpc::notification(
                "notifications/progress",
                json!({ "progressToken": token, "progress": done, "total": steps, "message": format!("step {done} of {steps}") }),
            ),
        )
    } else {
        let text = format!("done: {} steps", call.steps);
        let body = jsonrpc::result(
            &call.request_id,
            json!({ "content": [{ "type": "text", "text": text }], "isError": false }),
        );
        let payload = Payload::new(format!("{short}:call{}:result", stream.0), body);
        if let Ok(event) = core
            .server
            .emit(now, session, stream, payload, &mut core.history)
        {
            write_event(core, session, event);
        }
        core.server
            .close_stream(now, session, stream, &mut core.history);
        core.io.close_stream(session, stream);
        return false;
    };
    match core
        .server
        .emit(now, session, stream, payload, &mut core.history)
    {
        Ok(event) => {
            write_event(core, session, event);
            true
        }
        // The stream was fenced or ended under it: the call is over.
        Err(_) => false,
    }
}

#[derive(Clone)]
struct App {
    shared: Shared,
    clock: Arc<LabClock>,
    next_connection: Arc<AtomicU64>,
}

impl App {
    fn connection(&self) -> ConnectionId {
        ConnectionId(self.next_connection.fetch_add(1, Ordering::Relaxed))
    }
}

/// A running server: its address, and what stops it.
#[derive(Debug)]
pub struct RunningServer {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningServer {
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The router alone, for tests that drive it without a socket.
pub fn router(shared: Shared, clock: Arc<LabClock>) -> axum::Router {
    let app = App {
        shared,
        clock,
        next_connection: Arc::new(AtomicU64::new(1)),
    };
    axum::Router::new()
        .route("/mcp", post(post_mcp).get(get_mcp).delete(delete_mcp))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(check_origin))
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
    let listener = listener.tap_io(|tcp| {
        // axum leaves Nagle on, which turns a burst of small SSE frames into 40 ms stalls.
        let _ = tcp.set_nodelay(true);
    });
    let (shutdown, stopped) = oneshot::channel::<()>();
    let app = router(shared.clone(), clock.clone());
    let serve = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    let driver = tokio::spawn(async move {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let now = clock.now();
            tick(&mut shared.lock(), now, &options);
        }
    });
    Ok(RunningServer {
        addr,
        shutdown: Some(shutdown),
        tasks: vec![serve, driver],
    })
}

// ---------------------------------------------------------------------------------------------
// Request handling.

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn session_error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        jsonrpc::error(&Value::Null, jsonrpc::SESSION_ERROR, message, None),
    )
}

/// Origin validation against DNS rebinding: a browser page from elsewhere must not reach a
/// local server. Requests without `Origin` (non-browser clients) pass.
async fn check_origin(request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin.to_str().is_ok_and(origin_is_local)
    {
        return session_error(
            StatusCode::FORBIDDEN,
            "Origin not allowed: forkscope serves loopback pages only",
        );
    }
    next.run(request).await
}

fn origin_is_local(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    // `[::1]:port` or `host:port`; a port, when its colon is there, must be a real one.
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match rest.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        },
    };
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return false;
    }
    host == "127.0.0.1" || host == "::1" || host.eq_ignore_ascii_case("localhost")
}

/// A request refused before it reaches the core, answered with a JSON-RPC error body.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        session_error(self.0, &self.1)
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `MCP-Protocol-Version`, when present, must be one this server speaks — every copy of it.
fn check_protocol_version(headers: &HeaderMap) -> Result<(), Refusal> {
    let supported = headers
        .get_all(headers::PROTOCOL_VERSION)
        .iter()
        .all(|v| v.to_str().is_ok_and(|v| SUPPORTED_REVISIONS.contains(&v)));
    if supported {
        return Ok(());
    }
    Err(Refusal(
        StatusCode::BAD_REQUEST,
        format!(
            "unsupported MCP-Protocol-Version; this server speaks {}",
            SUPPORTED_REVISIONS.join(", ")
        ),
    ))
}

/// The session a request names: 400 without the header, 404 when unknown or ended.
fn session_of(headers: &HeaderMap, core: &Core) -> Result<SessionId, Refusal> {
    let Some(raw) = headers.get(headers::SESSION_ID) else {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "missing Mcp-Session-Id: initialize first".to_owned(),
        ));
    };
    raw.to_str()
        .ok()
        .and_then(SessionId::parse)
        .filter(|id| core.server.session(*id).is_some())
        .ok_or_else(|| Refusal(StatusCode::NOT_FOUND, SessionError::Unknown.to_string()))
}

/// The checks every request on an existing session passes first: a protocol version this server
/// speaks, and a session it holds. Returns the locked core with the session.
fn session_request<'a>(
    app: &'a App,
    headers: &HeaderMap,
) -> Result<(std::sync::MutexGuard<'a, Core>, SessionId), Refusal> {
    check_protocol_version(headers)?;
    let core = app.shared.lock();
    let session = session_of(headers, &core)?;
    Ok((core, session))
}

fn accepts(headers: &HeaderMap, mime: &str) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|m| {
                let m = m.split(';').next().unwrap_or("").trim();
                m == mime || m == "*/*"
            })
        })
    })
}

async fn post_mcp(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    // Every Content-Type copy must say JSON: a request that says two things is refused.
    let mut types = headers.get_all(header::CONTENT_TYPE).iter().peekable();
    let is_json = types.peek().is_some()
        && types.all(|ct| {
            ct.to_str().is_ok_and(|ct| {
                ct.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            })
        });
    if !is_json {
        return session_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "POST bodies must be application/json",
        );
    }
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let body = jsonrpc::error(
                &Value::Null,
                jsonrpc::PARSE_ERROR,
                &format!("invalid JSON: {e}"),
                None,
            );
            return json_response(StatusCode::BAD_REQUEST, body);
        }
    };
    if !message.is_object() || message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let why = "expected one JSON-RPC 2.0 message (batches are not part of revision 2025-11-25)";
        return json_response(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, why, None),
        );
    }
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").cloned();
    if let (Some("initialize"), Some(id)) = (method, &id) {
        return initialize(&app, id, &message);
    }
    let session = match session_request(&app, &headers) {
        Ok((_, session)) => session,
        Err(refusal) => return refusal.into_response(),
    };
    let (Some(method), Some(id)) = (method, id) else {
        // A notification or a response: accepted, nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match method {
        "ping" => json_response(StatusCode::OK, jsonrpc::result(&id, json!({}))),
        "tools/list" => json_response(
            StatusCode::OK,
            jsonrpc::result(&id, json!({ "tools": [progress_task_tool()] })),
        ),
        "tools/call" => call_tool(&app, session, id, &params),
        other => json_response(
            StatusCode::OK,
            jsonrpc::error(
                &id,
                jsonrpc::METHOD_NOT_FOUND,
                &format!("method not found: {other}"),
                None,
            ),
        ),
    }
}

fn progress_task_tool() -> Value {
    json!({
        "name": "progress_task",
        "title": "Progress task",
        "description": "Works through `steps` steps, sending a progress notification after each (one every `delay_ms` lab milliseconds), then returns. Its response is an SSE stream that can be resumed.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "steps": { "type": "integer", "minimum": 1, "maximum": MAX_STEPS, "default": 5 },
                "delay_ms": { "type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS, "default": 100 }
            },
            "additionalProperties": false
        }
    })
}

fn initialize(app: &App, id: &Value, message: &Value) -> Response {
    let requested = message
        .pointer("/params/protocolVersion")
        .and_then(Value::as_str);
    let version = requested
        .filter(|v| SUPPORTED_REVISIONS.contains(v))
        .unwrap_or(MODELLED_REVISION);
    let now = app.clock.now();
    let mut guard = app.shared.lock();
    let core = &mut *guard;
    let session = match core
        .server
        .open_session(now, &mut core.rng, &mut core.history)
    {
        Ok(s) => s,
        Err(e) => return session_error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    tracing::info!(session = %session.short(), version, "session initialized");
    let result = json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false }, "logging": {} },
        "serverInfo": { "name": "forkscope", "version": env!("CARGO_PKG_VERSION") },
        "instructions": "forkscope models MCP Streamable HTTP 2025-11-25 resumption. Call progress_task; open GET /mcp for background events."
    });
    let mut response = json_response(StatusCode::OK, jsonrpc::result(id, result));
    if let Ok(value) = HeaderValue::from_str(&session.to_string()) {
        response.headers_mut().insert(headers::SESSION_ID, value);
    }
    response
}

fn call_tool(app: &App, session: SessionId, id: Value, params: &Value) -> Response {
    let invalid = |message: String| {
        json_response(
            StatusCode::OK,
            jsonrpc::error(&id, jsonrpc::INVALID_PARAMS, &message, None),
        )
    };
    let name = params.get("name").and_then(Value::as_str);
    if name != Some("progress_task") {
        return invalid(format!(
            "unknown tool {}; the only tool is progress_task",
            name.unwrap_or("(none)")
        ));
    }
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let number = |field: &str, default: u64, max: u64, min: u64| -> Result<u64, String> {
        match args.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| format!("{field} must be an integer from {min} to {max}")),
        }
    };
    let steps = match number("steps", 5, MAX_STEPS, 1) {
        Ok(n) => n,
        Err(e) => return invalid(e),
    };
    let delay_ms = match number("delay_ms", 100, MAX_DELAY_MS, 0) {
        Ok(n) => n,
        Err(e) => return invalid(e),
    };
    let progress_token = params.pointer("/_meta/progressToken").cloned();
    let connection = app.connection();
    let now = app.clock.now();
    let mut guard = app.shared.lock();
    let core = &mut *guard;
    let (stream, token) = match core.server.open_request_stream(
        now,
        session,
        connection,
        &mut core.rng,
        &mut core.history,
    ) {
        Ok(minted) => minted,
        Err(e) => return session_error(StatusCode::CONFLICT, &e.to_string()),
    };
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    core.io.register(connection, session, stream, tx);
    let fenced = core.server.policy() == Policy::Fenced;
    let priming = priming_frame(core, session, stream);
    if let Some(frame) = priming {
        core.io.send(connection, frame);
    }
    core.io.tool_calls.push(ToolCall {
        session,
        stream,
        request_id: id,
        progress_token,
        steps,
        done: 0,
        delay_ms,
        next_at: now.plus(delay_ms),
    });
    drop(guard);
    let mut response = sse_response(app, Replay::default(), rx, session, stream, connection);
    let headers = response.headers_mut();
    insert(headers, headers::RESUMPTION_TOKEN, &token.to_string());
    if fenced {
        insert(headers, headers::STREAM_ID, &stream.to_string());
        insert(headers, headers::STREAM_RESUMED, "false");
    }
    response
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

fn priming_frame(core: &Core, session: SessionId, stream: StreamId) -> Option<Bytes> {
    let s = core.server.session(session)?.stream(stream)?;
    let truth = Truth {
        stream: stream.0,
        seq: 0,
        key: None,
    };
    Some(sse::frame(
        Some(&truth),
        &s.wire_id(0),
        Some(RETRY_HINT_MS),
        "",
    ))
}

/// What a new connection receives before its live tail: the priming event and the replayed
/// events, rendered a write's worth at a time.
#[derive(Debug, Default)]
struct Replay {
    priming: Option<Bytes>,
    ids: Option<forkscope_core::IdScheme>,
    events: std::vec::IntoIter<forkscope_core::Event>,
    started: bool,
    flushed: bool,
}

impl Replay {
    /// True exactly once: right after the first chunk was produced.
    fn first_written(&mut self) -> bool {
        self.started && !std::mem::replace(&mut self.flushed, true)
    }

    fn next_chunk(&mut self) -> Option<Bytes> {
        // A small first write gets the first event out at once; later writes amortise.
        let max_write = if std::mem::replace(&mut self.started, true) {
            32 * 1024
        } else {
            1024
        };
        let mut batch = bytes::BytesMut::new();
        if let Some(priming) = self.priming.take() {
            batch.extend_from_slice(&priming);
        }
        if let Some(ids) = self.ids {
            while batch.len() < max_write {
                let Some(e) = self.events.next() else { break };
                let truth = Truth {
                    stream: e.id.stream.0,
                    seq: e.id.seq,
                    key: Some(e.payload.key.to_string()),
                };
                batch.extend_from_slice(&sse::frame(
                    Some(&truth),
                    &ids.encode(e.id),
                    None,
                    &e.payload.body,
                ));
            }
        }
        (!batch.is_empty()).then(|| batch.freeze())
    }
}

/// Joins the frames already queued behind `first` into one write (up to 32 KiB): a replay or
/// a burst then costs a few syscalls instead of one per event.
fn coalesce(first: Bytes, rx: &mut mpsc::Receiver<Bytes>) -> Bytes {
    const MAX_WRITE: usize = 32 * 1024;
    let Ok(second) = rx.try_recv() else {
        return first;
    };
    let mut batch = bytes::BytesMut::with_capacity((first.len() + second.len()) * 8);
    batch.extend_from_slice(&first);
    batch.extend_from_slice(&second);
    while batch.len() < MAX_WRITE {
        let Ok(next) = rx.try_recv() else { break };
        batch.extend_from_slice(&next);
    }
    batch.freeze()
}

/// Tells the core when an SSE connection ends (the client went away, or we closed it).
struct ConnectionGuard {
    shared: Shared,
    clock: Arc<LabClock>,
    session: SessionId,
    stream: StreamId,
    connection: ConnectionId,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let now = self.clock.now();
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        core.io.writers.remove(&self.connection);
        core.server.connection_closed(
            now,
            self.session,
            self.stream,
            self.connection,
            &mut core.history,
        );
    }
}

fn sse_response(
    app: &App,
    replay: Replay,
    rx: mpsc::Receiver<Bytes>,
    session: SessionId,
    stream: StreamId,
    connection: ConnectionId,
) -> Response {
    let guard = ConnectionGuard {
        shared: app.shared.clone(),
        clock: app.clock.clone(),
        session,
        stream,
        connection,
    };
    let body = futures_util::stream::unfold(
        (replay, rx, guard),
        |(mut replay, mut rx, guard)| async move {
            if replay.first_written() {
                // Return Pending once after the first write, so hyper flushes it instead of
                // buffering the whole replay behind it.
                tokio::task::yield_now().await;
            }
            let chunk = match replay.next_chunk() {
                Some(chunk) => chunk,
                None => {
                    let frame = rx.recv().await?;
                    coalesce(frame, &mut rx)
                }
            };
            Some((
                Ok::<Bytes, std::convert::Infallible>(chunk),
                (replay, rx, guard),
            ))
        },
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

async fn get_mcp(State(app): State<App>, headers: HeaderMap) -> Response {
    if !accepts(&headers, "text/event-stream") {
        return session_error(
            StatusCode::NOT_ACCEPTABLE,
            "GET /mcp answers text/event-stream only",
        );
    }
    let connection = app.connection();
    let now = app.clock.now();
    let (mut guard, session) = match session_request(&app, &headers) {
        Ok(locked) => locked,
        Err(refusal) => return refusal.into_response(),
    };
    let core = &mut *guard;
    let request = ResumeRequest {
        session,
        token: header_str(&headers, headers::RESUMPTION_TOKEN),
        last_event_id: header_str(&headers, headers::LAST_EVENT_ID),
        connection,
    };
    let decision = match core
        .server
        .handle_get(now, &request, &mut core.rng, &mut core.history)
    {
        Ok(d) => d,
        Err(e) => return session_error(StatusCode::NOT_FOUND, &e.to_string()),
    };
    let (stream, replay_after, priming, echo, token, fenced) = match &decision {
        ResumeDecision::Reject(rejected) => {
            tracing::info!(session = %session.short(), reason = %rejected.reason(), "resume rejected");
            let reason = rejected.reason();
            let data = json!({
                "reason": reason.as_str(),
                "action": rejected.client_action().as_str(),
                "status": reason.http_status(),
            });
            let body = jsonrpc::error(
                &Value::Null,
                jsonrpc::RESUME_REJECTED,
                &rejected.to_string(),
                Some(data),
            );
            let status = StatusCode::from_u16(reason.http_status()).unwrap_or(StatusCode::CONFLICT);
            let mut response = json_response(status, body);
            if let Some(secs) = rejected.retry_after_secs() {
                insert(response.headers_mut(), "retry-after", &secs.to_string());
            }
            return response;
        }
        ResumeDecision::Resume(r) => {
            tracing::info!(session = %session.short(), stream = %r.stream, after = r.after, replay = r.replay_len, "resumed");
            if let Some(old) = r.detached {
                core.io.close(old);
            }
            (r.stream, r.after, false, r.echo, None, r.fenced.clone())
        }
        ResumeDecision::NewStream(n) => {
            tracing::info!(session = %session.short(), stream = %n.stream, flagged = n.echo.is_some(), backlog = n.replay_len, "new stream");
            (n.stream, 0, true, n.echo, Some(n.token), n.fenced.clone())
        }
    };
    for fenced_stream in fenced {
        core.io.close_stream(session, fenced_stream);
    }
    // Captured atomically with the attach; rendered lazily in the body, so the first replayed
    // event is written before the last one is formatted.
    let mut replay = Replay::default();
    if priming {
        replay.priming = priming_frame(core, session, stream);
    }
    if let (Some(s), Some(events)) = (
        core.server.session(session).and_then(|s| s.stream(stream)),
        core.server.replay(session, stream, replay_after),
    ) {
        replay.ids = Some(s.id_scheme());
        replay.events = events.cloned().collect::<Vec<_>>().into_iter();
    }
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    core.io.register(connection, session, stream, tx);
    drop(guard);
    let mut response = sse_response(&app, replay, rx, session, stream, connection);
    let h = response.headers_mut();
    if let Some(echo) = echo {
        insert(h, headers::STREAM_ID, &echo.stream.to_string());
        insert(
            h,
            headers::STREAM_RESUMED,
            if echo.resumed { "true" } else { "false" },
        );
    }
    if let Some(token) = token {
        insert(h, headers::RESUMPTION_TOKEN, &token.to_string());
    }
    response
}

async fn delete_mcp(State(app): State<App>, headers: HeaderMap) -> Response {
    let now = app.clock.now();
    let (mut guard, session) = match session_request(&app, &headers) {
        Ok(locked) => locked,
        Err(refusal) => return refusal.into_response(),
    };
    let core = &mut *guard;
    let _ = core.server.close_session(now, session, &mut core.history);
    core.io.forget_session(session);
    tracing::info!(session = %session.short(), "session deleted");
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_origins_pass() {
        for ok in [
            "http://127.0.0.1",
            "http://127.0.0.1:8080",
            "http://localhost:3000",
            "https://LOCALHOST",
            "http://[::1]:9",
        ] {
            assert!(origin_is_local(ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://127.0.0.1.evil.example",
            "http://localhost:99999",
            "ftp://127.0.0.1",
            "http://[::2]",
            "http://127.0.0.1:",
        ] {
            assert!(!origin_is_local(bad), "{bad}");
        }
    }
}
