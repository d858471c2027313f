//! The `/mcp` endpoint: POST (JSON-RPC), GET (open or resume a stream: the core rules on it,
//! this file writes the decision), DELETE (end a session). Each handler parses, asks the core
//! under one lock — reading the lab time under that lock — writes what it decided, and wakes
//! the driver.

use super::App;
use super::handles::Handle;
use super::incoming::{self, Incoming, Routed};
use super::modern::Gate;
use super::refusal::{
    Refusal, Unavailable, accepts, identity_header, json_response, resume_rejected, session_error,
    session_request, unavailable,
};
use super::stream_body::{Announcement, sse_response};
use super::tool::RunningCall;
use crate::wire::headers;
use crate::wire::jsonrpc;
use crate::wire::mcp::message::method::LOG_SET_LEVEL;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forkscope_core::{EmitError, Policy, ResumeDecision, ResumeRequest, SessionError, SessionId};
use serde_json::{Value, json};

pub(super) async fn post_mcp(
    State(app): State<App>,
    tcp: Option<Extension<Handle>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let tcp = tcp.map(|Extension(handle)| handle);
    let incoming = match Incoming::read(&headers, body) {
        Ok(incoming) => incoming,
        Err(refused) => return refused,
    };
    if let Gate::Answered(response) = app.modern.gate_post(&headers, &incoming).await {
        return response;
    }
    let params = incoming.params();
    let (id, method, message) = (incoming.id, incoming.method.as_deref(), &incoming.message);
    if let (Some("initialize"), Some(id)) = (method, &id) {
        return initialize(&app, id, message);
    }
    let session = match session_request(&app, &headers) {
        Ok((_, session)) => session,
        Err(refusal) => return refusal.into_response(),
    };
    let (Some(method), Some(id)) = (method, id) else {
        if method == Some(crate::wire::mcp::message::method::CANCELLED) {
            cancel_tool_call(&app, session, message.pointer("/params/requestId"));
        }
        // A notification or a response: accepted, nothing to answer.
        admitted(&app, session);
        return StatusCode::ACCEPTED.into_response();
    };
    if method == LOG_SET_LEVEL {
        return set_log_level(&app, session, &id, &params);
    }
    match incoming::route(method, &id, &headers) {
        Routed::Answered { response, served } => {
            if served {
                admitted(&app, session);
            }
            response
        }
        Routed::CallTool
            if params.get("name").and_then(Value::as_str) == Some("emit_standalone") =>
        {
            emit_standalone(&app, session, &id, &params)
        }
        Routed::CallTool => call_tool(&app, session, id, &params, tcp),
    }
}

/// `logging/setLevel`: the session's log messages below the level are no longer sent (the
/// core's rule, [`forkscope_core::Server::log_allows`]).
fn set_log_level(app: &App, session: SessionId, id: &Value, params: &Value) -> Response {
    let level = match incoming::log_level(id, params) {
        Ok(level) => level,
        Err(refused) => return refused,
    };
    app.shared.lock().server.set_log_level(session, level);
    admitted(app, session);
    incoming::log_level_set(id)
}

/// A request on the session was served: its idle clock starts over (a refused one leaves it).
fn admitted(app: &App, session: SessionId) {
    let mut core = app.shared.lock();
    let now = app.clock.now();
    core.server.touch(now, session);
}

fn initialize(app: &App, id: &Value, message: &Value) -> Response {
    let version = incoming::negotiated_version(message);
    let session = {
        let mut guard = app.shared.lock();
        let core = &mut *guard;
        let now = app.clock.now();
        match core
            .server
            .open_session(now, &mut core.rng, &mut core.history)
        {
            Ok(s) => s,
            Err(e) => {
                // At capacity: say when an idle session will have freed a slot, or when
                // finished tool calls will have freed replay memory.
                let (retry_after, why) = match &e {
                    SessionError::Limit {
                        free_at: Some(at), ..
                    } => (
                        at.since(now).div_ceil(1_000).max(1),
                        Unavailable::TooManySessions,
                    ),
                    SessionError::OverBudget { .. } => {
                        (retention_secs(&core.server), Unavailable::OverBudget)
                    }
                    _ => (60, Unavailable::TooManySessions),
                };
                return unavailable(id, why, &e.to_string(), retry_after);
            }
        }
    };
    app.wake.wake(); // a new session: a new background schedule
    tracing::info!(session = %session.short(), version, "session initialized");
    let result = incoming::initialize_result(version);
    let mut response = json_response(StatusCode::OK, jsonrpc::result(id, result));
    if let Ok(value) = HeaderValue::from_str(&session.to_string()) {
        response.headers_mut().insert(headers::SESSION_ID, value);
    }
    response
}

fn call_tool(
    app: &App,
    session: SessionId,
    id: Value,
    params: &Value,
    tcp: Option<Handle>,
) -> Response {
    let (args, progress_token) = match incoming::tool_call(&id, params) {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let connection = app.connection();
    let (opening, queue, stream, token, fenced) = {
        let mut guard = app.shared.lock();
        let core = &mut *guard;
        let now = app.clock.now();
        // Two calls in flight under one id could not be told apart: by their responses, or by a
        // cancel, which would stop only the first.
        if core
            .io
            .tool_calls
            .iter()
            .any(|c| c.session() == session && c.request_id == id)
        {
            return json_response(
                StatusCode::CONFLICT,
                jsonrpc::error(
                    &id,
                    jsonrpc::INVALID_REQUEST,
                    &format!(
                        "a request with id {id} is already in flight in this session: use a new id"
                    ),
                    Some(json!({ "reason": "duplicate_request_id", "id": id })),
                ),
            );
        }
        let (stream, token) = match core.server.open_request_stream(
            now,
            session,
            id.as_u64(),
            connection,
            &mut core.rng,
            &mut core.history,
        ) {
            Ok(minted) => minted,
            // The refusal answers this request: it carries its id.
            Err(e @ EmitError::OverBudget { .. }) => {
                let retry_after = retention_secs(&core.server);
                return unavailable(&id, Unavailable::OverBudget, &e.to_string(), retry_after);
            }
            Err(e) => {
                return json_response(
                    StatusCode::CONFLICT,
                    jsonrpc::error(&id, jsonrpc::SESSION_ERROR, &e.to_string(), None),
                );
            }
        };
        let queue = app.register(core, connection, session, stream, tcp.clone(), now);
        let opening = core.server.opening_of_request_stream(session, stream);
        core.io.tool_calls.push(RunningCall::new(
            session,
            stream,
            id,
            progress_token,
            args,
            now,
        ));
        let fenced = core.server.policy() == Policy::Fenced;
        (opening, queue, stream, token, fenced)
    };
    app.wake.wake();
    let opened = (opening, None);
    let mut response = sse_response(app, opened, Some(queue), session, stream, connection, tcp);
    let headers = response.headers_mut();
    insert(headers, headers::RESUMPTION_TOKEN, &token.to_string());
    if fenced {
        insert(headers, headers::STREAM_ID, &stream.to_string());
        insert(headers, headers::STREAM_RESUMED, "false");
    }
    response
}

/// `emit_standalone`: answered at once, in JSON; its notifications follow on the standalone
/// stream ([`super::emission`]).
fn emit_standalone(app: &App, session: SessionId, id: &Value, params: &Value) -> Response {
    let invalid = |message: String| {
        json_response(
            StatusCode::OK,
            jsonrpc::error(id, jsonrpc::INVALID_PARAMS, &message, None),
        )
    };
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(_) => return invalid("arguments must be an object".to_owned()),
    };
    let args = match super::emission::parse_arguments(&args) {
        Ok(args) => args,
        Err(e) => return invalid(e.to_string()),
    };
    let count = args.count;
    {
        let mut guard = app.shared.lock();
        let now = app.clock.now();
        core_touch_and_start(&mut guard, session, args, now).map_err(|e| {
            json_response(
                StatusCode::CONFLICT,
                jsonrpc::error(id, jsonrpc::SESSION_ERROR, &e.to_string(), None),
            )
        })
    }
    .map_or_else(
        |refused| refused,
        |()| {
            app.wake.wake();
            json_response(
                StatusCode::OK,
                jsonrpc::result(
                    id,
                    json!({ "content": [{ "type": "text", "text": format!("emitting {count}") }] }),
                ),
            )
        },
    )
}

/// Starts the run and counts the request as served (the session's idle clock starts over).
fn core_touch_and_start(
    core: &mut crate::wire::Core,
    session: SessionId,
    args: super::emission::EmitArgs,
    now: forkscope_core::LabTime,
) -> Result<(), super::emission::TooManyRuns> {
    super::emission::start(core, session, args, now)?;
    core.server.touch(now, session);
    Ok(())
}

/// How long until finished tool calls let their replay memory go: the retention window.
fn retention_secs(server: &forkscope_core::Server) -> u64 {
    server.config().retention_ms.div_ceil(1_000).max(1)
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

pub(super) async fn get_mcp(
    State(app): State<App>,
    tcp: Option<Extension<Handle>>,
    headers: HeaderMap,
) -> Response {
    let tcp = tcp.map(|Extension(handle)| handle);
    if let Some(refused) = app.modern.gate_get_or_delete(&headers) {
        return refused;
    }
    if !accepts(&headers, "text/event-stream") {
        return session_error(
            StatusCode::NOT_ACCEPTABLE,
            "GET /mcp answers text/event-stream only",
        );
    }
    let connection = app.connection();
    let (decision, opening, queue, session, announce) = {
        let (mut guard, session) = match session_request(&app, &headers) {
            Ok(locked) => locked,
            Err(refusal) => return refusal.into_response(),
        };
        let core = &mut *guard;
        let now = app.clock.now();
        let token = match identity_header(&headers, headers::RESUMPTION_TOKEN) {
            Ok(token) => token,
            Err(refusal) => return refusal.into_response(),
        };
        let last_event_id = match identity_header(&headers, headers::LAST_EVENT_ID) {
            Ok(cursor) => cursor,
            Err(refusal) => return refusal.into_response(),
        };
        let request = ResumeRequest {
            session,
            token,
            last_event_id,
            connection,
        };
        let decision = match core
            .server
            .handle_get(now, &request, &mut core.rng, &mut core.history)
        {
            Ok(d) => d,
            Err(e) => return Refusal::Session(e).into_response(),
        };
        // Logged once the first write is out, so that the line's cost does not delay it.
        let (stream, fenced, announce): (_, _, Option<Announcement>) = match &decision {
            ResumeDecision::Reject(_) | ResumeDecision::Answered(_) => (None, Vec::new(), None),
            ResumeDecision::Resume(r) => {
                if let Some(old) = r.detached {
                    core.io.writers.close(old);
                }
                let (short, stream, after, replay, finished) =
                    (session.short(), r.stream, r.after, r.replay_len, r.finished);
                let announce = move || {
                    tracing::info!(session = %short, %stream, after, replay, finished, "resumed");
                };
                (Some(r.stream), r.fenced.clone(), Some(Box::new(announce)))
            }
            ResumeDecision::NewStream(n) => {
                let (short, stream, flagged, backlog) =
                    (session.short(), n.stream, n.echo.is_some(), n.replay_len);
                let announce = move || {
                    tracing::info!(session = %short, %stream, flagged, backlog, "new stream");
                };
                (Some(n.stream), n.fenced.clone(), Some(Box::new(announce)))
            }
        };
        for fenced_stream in fenced {
            core.io.writers.close_stream(session, fenced_stream);
        }
        let opening = core.server.opening_for(session, &decision);
        // A finished stream has no live tail: no writer, the body ends after the replay.
        let queue = match (&opening, stream) {
            (Some(o), Some(stream)) if !o.ends => {
                Some(app.register(core, connection, session, stream, tcp.clone(), now))
            }
            _ => None,
        };
        (decision, opening, queue, session, announce)
    };
    app.wake.wake();
    match decision {
        ResumeDecision::Reject(rejected) => {
            tracing::info!(session = %session.short(), reason = %rejected.reason(), "resume rejected");
            resume_rejected(&rejected)
        }
        ResumeDecision::Answered(answer) => {
            tracing::info!(session = %session.short(), status = answer.status, "answered as the SDK does");
            sdk_answer(answer)
        }
        ResumeDecision::Resume(r) => {
            let opened = (opening, announce);
            let mut response =
                sse_response(&app, opened, queue, session, r.stream, connection, tcp);
            echo(response.headers_mut(), r.echo, None);
            response
        }
        ResumeDecision::NewStream(n) => {
            let opened = (opening, announce);
            let mut response =
                sse_response(&app, opened, queue, session, n.stream, connection, tcp);
            echo(response.headers_mut(), n.echo, Some(n.token));
            response
        }
    }
}

/// An SDK policy's answer: 200 is an event stream with nothing in it, ended at once; any other
/// status carries the SDK's sentence.
fn sdk_answer(answer: forkscope_core::resume::sdk::Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status == StatusCode::OK {
        let sse = [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        if !answer.held_open {
            return (StatusCode::OK, sse).into_response();
        }
        // Keep-alives only, until the client goes: nothing is attached, nothing will come.
        let every = std::time::Duration::from_millis(super::liveness::KEEPALIVE_MS);
        let keepalives = futures_util::stream::unfold((), move |()| async move {
            tokio::time::sleep(every).await;
            Some((
                Ok::<_, std::convert::Infallible>(Bytes::from_static(
                    super::handles::KEEPALIVE_FRAME,
                )),
                (),
            ))
        });
        return (
            StatusCode::OK,
            sse,
            axum::body::Body::from_stream(keepalives),
        )
            .into_response();
    }
    json_response(
        status,
        jsonrpc::error(&Value::Null, jsonrpc::SESSION_ERROR, answer.message, None),
    )
}

/// `notifications/cancelled` for a running tool call: it stops, sends no result, and its
/// stream ends (what it sent stays resumable for the retention window).
fn cancel_tool_call(app: &App, session: SessionId, request_id: Option<&Value>) {
    let Some(request_id) = request_id else { return };
    let cancelled = {
        let mut guard = app.shared.lock();
        let core = &mut *guard;
        let now = app.clock.now();
        super::tool::cancel(core, session, request_id, now)
    };
    if cancelled {
        tracing::info!(session = %session.short(), request = %request_id, "tool call cancelled");
        app.wake.wake();
    }
}

/// The identity echo (fenced only) and, on a new stream, its token.
fn echo(
    h: &mut HeaderMap,
    echo: Option<forkscope_core::StreamEcho>,
    token: Option<forkscope_core::ResumptionToken>,
) {
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
}

pub(super) async fn delete_mcp(State(app): State<App>, headers: HeaderMap) -> Response {
    if let Some(refused) = app.modern.gate_get_or_delete(&headers) {
        return refused;
    }
    {
        let (mut guard, session) = match session_request(&app, &headers) {
            Ok(locked) => locked,
            Err(refusal) => return refusal.into_response(),
        };
        let core = &mut *guard;
        let now = app.clock.now();
        let _ = core.server.close_session(now, session, &mut core.history);
        core.io.forget_session(session);
        tracing::info!(session = %session.short(), "session deleted");
    }
    app.wake.wake();
    StatusCode::NO_CONTENT.into_response()
}

/// HEAD changes nothing: 405, with what is allowed.
pub(super) async fn head_mcp() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, POST, DELETE")],
    )
        .into_response()
}
