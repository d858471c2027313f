//! The lab's MCP client over reqwest: initializes, holds the standalone GET stream open,
//! reconnects inside its retry budget, and calls the tool. Every decision — what to send on a
//! reconnect, whether a response continues the stream, whether an event is applied — is asked
//! of the core's [`forkscope_core::Client`]; this file only speaks HTTP and SSE.

use super::Shared;
use super::headers::{self, MODELLED_REVISION};
use super::jsonrpc;
use super::sse::{Parser, SseEvent};
use crate::clock::LabClock;
use forkscope_core::client::{Phase, RequestPhase};
use forkscope_core::{
    ClientAction, EventId, EventTruth, LabTime, RejectReason, SessionId, StreamHeaders, StreamId,
};
use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// How long the client waits for a response's headers before calling the attempt failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting client re-reads the lab clock (which can be paused or sped up).
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the server answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the server sent no usable Mcp-Session-Id")]
    NoSession,
    #[error("the tool call's stream broke and could not be resumed: its result is lost")]
    ResultLost,
}

/// Where the client reports every HTTP exchange it makes (the lab keeps a few for the views).
pub trait ExchangeLog: Send + Sync + std::fmt::Debug {
    fn exchange(
        &self,
        at: LabTime,
        method: &'static str,
        what: String,
        status: u16,
        sent: &[(&str, String)],
        received: &HeaderMap,
    );
}

/// A handle to the running client, shared by its task and the lab's actions.
#[derive(Debug)]
pub struct LabClient {
    http: reqwest::Client,
    url: String,
    shared: Shared,
    clock: Arc<LabClock>,
    exchanges: Arc<dyn ExchangeLog>,
    session: std::sync::Mutex<Option<SessionId>>,
    wake: Notify,
    force_reconnect: AtomicBool,
    next_request_id: AtomicU64,
}

impl LabClient {
    pub fn new(
        url: String,
        shared: Shared,
        clock: Arc<LabClock>,
        exchanges: Arc<dyn ExchangeLog>,
    ) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(4)
            // Let go of an idle connection well before the server's idle timeout closes it, so
            // a request never races that close on a reused connection.
            .pool_idle_timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("a plain HTTP client builds");
        Arc::new(LabClient {
            http,
            url,
            shared,
            clock,
            exchanges,
            session: std::sync::Mutex::new(None),
            wake: Notify::new(),
            force_reconnect: AtomicBool::new(false),
            next_request_id: AtomicU64::new(1),
        })
    }

    pub fn session(&self) -> Option<SessionId> {
        *self
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_session(&self, session: Option<SessionId>) {
        *self
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = session;
    }

    /// "Reconnect now": skip the rest of the backoff wait.
    pub fn reconnect_now(&self) {
        self.force_reconnect.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn record(
        &self,
        method: &'static str,
        what: String,
        status: u16,
        sent: &[(&str, String)],
        received: &HeaderMap,
    ) {
        let at = self.clock.now();
        self.exchanges
            .exchange(at, method, what, status, sent, received);
    }

    fn request_id(&self) -> u64 {
        self.next_request_id.fetch_add(1, Ordering::Relaxed)
    }

    fn post(&self, session: Option<SessionId>, body: String) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(session) = session {
            request = request
                .header(headers::SESSION_ID, session.to_string())
                .header(headers::PROTOCOL_VERSION, MODELLED_REVISION);
        }
        request
    }

    /// `initialize` + `notifications/initialized`; tells the core a new session began.
    pub async fn initialize(&self) -> Result<SessionId, ClientError> {
        let id = self.request_id();
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {
                "protocolVersion": MODELLED_REVISION,
                "capabilities": {},
                "clientInfo": { "name": "forkscope-lab", "version": env!("CARGO_PKG_VERSION") }
            }
        });
        let response = self
            .post(None, body.to_string())
            .timeout(RESPONSE_TIMEOUT)
            .send()
            .await?;
        let status = response.status().as_u16();
        self.record("POST", "initialize".into(), status, &[], response.headers());
        let session = response
            .headers()
            .get(headers::SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .and_then(SessionId::parse);
        if status != 200 {
            let message = response.text().await.unwrap_or_default();
            return Err(ClientError::Status { status, message });
        }
        let session = session.ok_or(ClientError::NoSession)?;
        let notify = jsonrpc::notification("notifications/initialized", json!({}));
        let ack = self
            .post(Some(session), notify)
            .timeout(RESPONSE_TIMEOUT)
            .send()
            .await?;
        self.record(
            "POST",
            "notifications/initialized".into(),
            ack.status().as_u16(),
            &[],
            ack.headers(),
        );
        {
            let now = self.clock.now();
            let mut guard = self.shared.lock();
            let core = &mut *guard;
            core.client.begin_session(now, session, &mut core.history);
        }
        self.set_session(Some(session));
        tracing::info!(session = %session.short(), "client initialized");
        Ok(session)
    }

    /// Best-effort `DELETE` of a session the client abandons.
    async fn delete(&self, session: SessionId) {
        let request = self
            .http
            .delete(&self.url)
            .header(headers::SESSION_ID, session.to_string())
            .header(headers::PROTOCOL_VERSION, MODELLED_REVISION)
            .timeout(RESPONSE_TIMEOUT);
        if let Ok(response) = request.send().await {
            self.record(
                "DELETE",
                "end session".into(),
                response.status().as_u16(),
                &[],
                response.headers(),
            );
        }
    }

    /// The client's life: keep a standalone stream, reconnecting as the core decides.
    pub async fn run(self: Arc<Self>) {
        loop {
            let Some(session) = self.session() else {
                if let Err(e) = self.initialize().await {
                    tracing::warn!(error = %e, "initialize failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                continue;
            };
            let phase = self.shared.lock().client.phase();
            let (token, cursor) = match phase {
                Phase::Idle | Phase::Connected => (None, None),
                Phase::Reconnecting { .. } => {
                    let plan = self.wait_for_reconnect().await;
                    let Some(plan) = plan else { continue };
                    if plan.token_stripped {
                        tracing::warn!(
                            "fault: the resumption token header was dropped on this retry"
                        );
                    }
                    (plan.token, plan.last_event_id)
                }
                Phase::GaveUp { .. } => {
                    tracing::warn!("retry budget exhausted; waiting for a reconnect or restart");
                    self.wake.notified().await;
                    if self.force_reconnect.swap(false, Ordering::SeqCst) {
                        // Start over: a new session (initialize resets the core's client).
                        self.abandon(session, true).await;
                    }
                    continue;
                }
            };
            self.stream_once(session, token, cursor).await;
        }
    }

    /// Waits until the core says a reconnect is due (or the user forces one), then takes it.
    async fn wait_for_reconnect(&self) -> Option<forkscope_core::ReconnectPlan> {
        loop {
            let force = self.force_reconnect.swap(false, Ordering::SeqCst);
            let now = self.clock.now();
            let (plan, due) = {
                let mut core = self.shared.lock();
                let plan = core.client.reconnect_plan(now, force);
                (plan, core.client.poll_timeout())
            };
            if plan.is_some() {
                return plan;
            }
            if !matches!(
                self.shared.lock().client.phase(),
                Phase::Reconnecting { .. }
            ) {
                return None;
            }
            let wait = due
                .and_then(|due| self.clock.real_ms_until(due))
                .map_or(POLL, |ms| Duration::from_millis(ms).min(POLL));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// A GET for a stream: a new one, or a resume with the cursor and token the core chose.
    /// Returns the request and the headers sent, as the exchange list shows them.
    fn stream_get(
        &self,
        session: SessionId,
        token: Option<&str>,
        cursor: Option<&str>,
    ) -> (reqwest::RequestBuilder, Vec<(&'static str, String)>) {
        let mut request = self
            .http
            .get(&self.url)
            .header(ACCEPT, "text/event-stream")
            .header(headers::SESSION_ID, session.to_string())
            .header(headers::PROTOCOL_VERSION, MODELLED_REVISION);
        let mut sent = Vec::new();
        if let Some(cursor) = cursor {
            request = request.header(headers::LAST_EVENT_ID, cursor);
            sent.push((headers::LAST_EVENT_ID, cursor.to_owned()));
        }
        if let Some(token) = token {
            request = request.header(headers::RESUMPTION_TOKEN, token);
            sent.push((headers::RESUMPTION_TOKEN, shorten(token)));
        }
        (request, sent)
    }

    /// One GET and, if a stream opens, reading it until it ends. The http pane names what the
    /// server did, not only what was asked: a resume answered with a new stream says so.
    async fn stream_once(&self, session: SessionId, token: Option<String>, cursor: Option<String>) {
        let (request, sent) = self.stream_get(session, token.as_deref(), cursor.as_deref());
        let what = if cursor.is_some() || token.is_some() {
            "resume"
        } else {
            "open stream"
        };
        let response = match tokio::time::timeout(RESPONSE_TIMEOUT, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                tracing::info!(error = %e, "reconnect attempt failed");
                return self.attempt_failed();
            }
            Err(_) => {
                tracing::info!("reconnect attempt timed out");
                return self.attempt_failed();
            }
        };
        let status = response.status().as_u16();
        let what = answered_as(what, status, response.headers());
        self.record("GET", what, status, &sent, response.headers());
        if status == 404 {
            tracing::warn!(session = %session.short(), "session gone (404); initializing a new one");
            return self.abandon(session, false).await;
        }
        if status != 200 {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let reason = body
                .pointer("/error/data/reason")
                .and_then(Value::as_str)
                .and_then(RejectReason::parse);
            let Some(reason) = reason else {
                tracing::warn!(status, "unexpected answer to GET");
                return self.attempt_failed();
            };
            let now = self.clock.now();
            let action = {
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                core.client.on_rejected(now, reason, &mut core.history)
            };
            tracing::info!(%reason, action = action.as_str(), "resume rejected");
            if action == ClientAction::StartNewSession {
                self.abandon(session, true).await;
            }
            return;
        }
        let headers = stream_headers(response.headers());
        let continuity = self.shared.lock().client.on_stream_opened(headers.borrow());
        tracing::info!(
            ?continuity,
            stream = headers.stream.as_deref().unwrap_or("(no echo)"),
            "stream open"
        );
        self.read_events(session, response, Follow::Standalone)
            .await;
        let now = self.clock.now();
        self.shared.lock().client.on_disconnected(now);
        tracing::info!("stream ended");
    }

    fn attempt_failed(&self) {
        let now = self.clock.now();
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        core.client.on_attempt_failed(now, &mut core.history);
    }

    /// Gives up on `session` (DELETE when it may still exist) and starts over with a new one.
    async fn abandon(&self, session: SessionId, delete: bool) {
        if delete {
            self.delete(session).await;
        }
        self.set_session(None);
    }

    /// Reads SSE events until the stream ends, handing each whole event to the core. Returns
    /// the JSON-RPC response a request stream carried, if it arrived.
    async fn read_events(
        &self,
        session: SessionId,
        response: reqwest::Response,
        follow: Follow,
    ) -> Option<Value> {
        let mut parser = Parser::new();
        let mut bytes = response.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            let Ok(chunk) = chunk else { break };
            let Ok(events) = parser.feed(&chunk) else {
                break;
            };
            for event in events {
                if let Some(result) = self.deliver(session, event, follow) {
                    return Some(result);
                }
            }
        }
        None
    }

    /// Delivers one event to the core; returns the JSON-RPC response it carried, if it was
    /// applied (a replayed result is not a second result).
    fn deliver(&self, session: SessionId, event: SseEvent, follow: Follow) -> Option<Value> {
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        let now: LabTime = self.clock.now();
        if let Some(retry) = event.retry_ms {
            core.client.on_retry_hint(retry);
        }
        // The lab-only truth comment feeds the checker, nothing else: a server that sends
        // none is followed the same way, and the checker is simply told less.
        let truth = event.truth.as_ref().map(|t| EventTruth {
            session,
            event: EventId {
                stream: StreamId(t.stream),
                seq: t.seq,
            },
            key: t.key.as_deref().map(Arc::from),
        });
        let priming = event.data.is_empty();
        let id = event.id.as_deref();
        let delivery = match follow {
            Follow::Standalone => core
                .client
                .on_event(now, id, priming, truth, &mut core.history),
            Follow::Request(request) => {
                core.client
                    .on_request_event(now, request, id, priming, truth, &mut core.history)
            }
        };
        if delivery != forkscope_core::Delivery::Applied {
            return None;
        }
        let message: Value = serde_json::from_str(&event.data).ok()?;
        message.get("result").is_some().then_some(message)
    }

    /// Calls `progress_task` and follows its SSE response to the result. When the stream
    /// breaks first, resumes it (a GET with the stream's token and `Last-Event-ID`) inside the
    /// retry budget, as the core schedules; every progress step and the result are applied
    /// through the core exactly once.
    pub async fn call_tool(&self, steps: u64, delay_ms: u64) -> Result<Value, ClientError> {
        let session = self.session().ok_or(ClientError::NoSession)?;
        let id = self.request_id();
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "progress_task", "arguments": { "steps": steps, "delay_ms": delay_ms }, "_meta": { "progressToken": id } }
        });
        self.shared.lock().client.begin_request(id, Some(steps));
        let response = self.post(Some(session), body.to_string()).send().await?;
        let status = response.status().as_u16();
        self.record(
            "POST",
            format!("tools/call progress_task ({steps} steps)"),
            status,
            &[],
            response.headers(),
        );
        if status != 200 {
            self.shared.lock().client.on_request_done(id);
            let message = response.text().await.unwrap_or_default();
            return Err(ClientError::Status { status, message });
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            self.shared.lock().client.on_request_done(id);
            return Ok(response.json().await?);
        }
        let mut response = response;
        loop {
            let headers = stream_headers(response.headers());
            self.shared
                .lock()
                .client
                .on_request_stream_opened(id, headers.borrow());
            if let Some(result) = self
                .read_events(session, response, Follow::Request(id))
                .await
            {
                self.shared.lock().client.on_request_done(id);
                return Ok(result);
            }
            tracing::info!(
                request = id,
                "the tool call's stream broke before its result; resuming"
            );
            let now = self.clock.now();
            self.shared.lock().client.on_request_lost(now, id);
            response = self.resume_request(session, id).await?;
        }
    }

    /// Resumes a tool call's stream: waits for the core's schedule, GETs with the stream's
    /// token and cursor, and retries inside the budget. Errs when the core gives up.
    async fn resume_request(
        &self,
        session: SessionId,
        id: u64,
    ) -> Result<reqwest::Response, ClientError> {
        loop {
            let plan = loop {
                let now = self.clock.now();
                let (plan, phase, due) = {
                    let mut core = self.shared.lock();
                    let plan = core.client.request_resume_plan(now, id);
                    let request = core.client.request(id);
                    (
                        plan,
                        request.map(|r| r.phase),
                        request.and_then(|r| r.poll_timeout()),
                    )
                };
                if let Some(plan) = plan {
                    break plan;
                }
                if !matches!(phase, Some(RequestPhase::Resuming { .. })) {
                    return Err(ClientError::ResultLost);
                }
                let wait = due
                    .and_then(|due| self.clock.real_ms_until(due))
                    .map_or(POLL, |ms| Duration::from_millis(ms).min(POLL));
                tokio::time::sleep(wait).await;
            };
            let (request, sent) = self.stream_get(
                session,
                plan.token.as_deref(),
                plan.last_event_id.as_deref(),
            );
            let answer = tokio::time::timeout(RESPONSE_TIMEOUT, request.send()).await;
            let rejected = match answer {
                Ok(Ok(response)) => {
                    let status = response.status().as_u16();
                    self.record(
                        "GET",
                        format!("resume tool call {id}"),
                        status,
                        &sent,
                        response.headers(),
                    );
                    if status == 200 {
                        return Ok(response);
                    }
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    body.pointer("/error/data/reason")
                        .and_then(Value::as_str)
                        .and_then(RejectReason::parse)
                }
                _ => None,
            };
            let now = self.clock.now();
            let phase = {
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                core.client.on_request_attempt_failed(now, id, rejected)
            };
            if phase == RequestPhase::Failed {
                tracing::warn!(request = id, reason = ?rejected, "the tool call's result is lost");
                return Err(ClientError::ResultLost);
            }
        }
    }
}

/// Which stream an event belongs to, for the core's client.
#[derive(Clone, Copy, Debug)]
enum Follow {
    /// The session's standalone stream: the cursor the checker watches.
    Standalone,
    /// A tool call's response stream, by request id.
    Request(u64),
}

/// A stream response's identity headers, owned (they outlive the response they came from).
struct OwnedStreamHeaders {
    stream: Option<String>,
    resumed: Option<bool>,
    token: Option<String>,
}

impl OwnedStreamHeaders {
    fn borrow(&self) -> StreamHeaders<'_> {
        StreamHeaders {
            stream: self.stream.as_deref(),
            resumed: self.resumed,
            token: self.token.as_deref(),
        }
    }
}

fn stream_headers(h: &HeaderMap) -> OwnedStreamHeaders {
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    OwnedStreamHeaders {
        stream: get(headers::STREAM_ID),
        resumed: get(headers::STREAM_RESUMED).map(|v| v.eq_ignore_ascii_case("true")),
        token: get(headers::RESUMPTION_TOKEN),
    }
}

/// A token as the exchange list shows it: enough to tell tokens apart, not to use one.
fn shorten(token: &str) -> String {
    format!("{}…", &token[..8.min(token.len())])
}

/// A bare client of its own: `initialize`, then open the standalone stream. Returns the session,
/// the stream's resumption token and the open response. For probes and benchmarks that need a
/// session the lab's client does not own.
pub async fn open_session_stream(
    http: &reqwest::Client,
    url: &str,
    name: &str,
) -> Option<(SessionId, String, reqwest::Response)> {
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": MODELLED_REVISION, "capabilities": {}, "clientInfo": { "name": name, "version": "0" } }
    });
    let response = http
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .ok()?;
    let session = SessionId::parse(response.headers().get(headers::SESSION_ID)?.to_str().ok()?)?;
    let stream = http
        .get(url)
        .header(ACCEPT, "text/event-stream")
        .header(headers::SESSION_ID, session.to_string())
        .header(headers::PROTOCOL_VERSION, MODELLED_REVISION)
        .send()
        .await
        .ok()?;
    let token = stream
        .headers()
        .get(headers::RESUMPTION_TOKEN)?
        .to_str()
        .ok()?
        .to_owned();
    Some((session, token, stream))
}

/// What a GET turned out to be, for the http pane: a resume the server answered with a new
/// stream (a fresh token, or `Mcp-Stream-Resumed: false`) is not a resume, though a naive
/// client takes it for one.
fn answered_as(asked: &str, status: u16, received: &HeaderMap) -> String {
    let new_stream = received.contains_key(headers::RESUMPTION_TOKEN)
        || received
            .get(headers::STREAM_RESUMED)
            .is_some_and(|v| v.as_bytes() == b"false");
    if status == 200 && asked == "resume" && new_stream {
        "resume → new stream".to_owned()
    } else {
        asked.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn a_resume_answered_with_a_new_stream_is_labelled_so() {
        let mut fresh = HeaderMap::new();
        fresh.insert(headers::RESUMPTION_TOKEN, HeaderValue::from_static("ab"));
        assert_eq!(answered_as("resume", 200, &fresh), "resume → new stream");
        let mut flagged = HeaderMap::new();
        flagged.insert(headers::STREAM_RESUMED, HeaderValue::from_static("false"));
        assert_eq!(answered_as("resume", 200, &flagged), "resume → new stream");
        let mut resumed = HeaderMap::new();
        resumed.insert(headers::STREAM_RESUMED, HeaderValue::from_static("true"));
        assert_eq!(answered_as("resume", 200, &resumed), "resume");
        assert_eq!(answered_as("resume", 409, &fresh), "resume");
        assert_eq!(answered_as("open stream", 200, &fresh), "open stream");
    }
}
