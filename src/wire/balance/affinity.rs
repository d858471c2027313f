//! What sticky mode keeps together: a 2025-11-25 session by its `Mcp-Session-Id`, and a
//! 2026-07-28 task by its id, learned from the `CreateTaskResult` that named it and carried by
//! its `tasks/*` requests in `Mcp-Name`.

use super::{Shared, pass_back, plain, strip_hop_by_hop};
use axum::body::Body;
use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap};
use hyper::{Response, StatusCode};
use std::sync::Arc;

/// What sticky mode keeps a request with: its session (2025-11-25), or, for the tasks
/// extension's methods, the task its `Mcp-Name` names (2026-07-28: the extension asks clients to
/// send it "so that balancers route to the instance holding the task").
pub(super) fn affinity(headers: &HeaderMap) -> Option<&str> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    text("mcp-session-id").or_else(|| {
        text("mcp-method")
            .filter(|m| m.starts_with("tasks/"))
            .and_then(|_| text("mcp-name"))
    })
}

pub(super) fn header_is(headers: &HeaderMap, name: &str, value: &str) -> bool {
    headers
        .get(name)
        .is_some_and(|v| v.as_bytes() == value.as_bytes())
}

/// The most of an answer read to learn a task id from it: a JSON answer is read whole up to
/// this; an SSE answer is passed on as it comes and looked at up to this.
const TASK_ANSWER_BYTES: u64 = 64 * 1024;

/// The task a `CreateTaskResult` names, if `answer` (a JSON-RPC response) carries one.
fn task_of(answer: &serde_json::Value) -> Option<&str> {
    crate::wire::mcp::modern::created_task(answer.get("result")?)
}

/// Passes a `tools/call` answer back, learning the task it created, if any, for the upstream
/// that made it. A JSON answer of known, small length is read whole; an SSE answer (as servers
/// may send even a `CreateTaskResult`) is passed on chunk by chunk and read on the way, so the
/// task is learned before the client can name it, and a long stream is never held.
pub(super) async fn learn_task(
    response: Response<Incoming>,
    shared: &Arc<Shared>,
    upstream: usize,
) -> Response<Body> {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type.trim_start().starts_with("text/event-stream") {
        return tap_stream(response, shared.clone(), upstream);
    }
    let small_json = header_is(response.headers(), "content-type", "application/json")
        && response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n <= TASK_ANSWER_BYTES);
    if !small_json {
        return pass_back(response);
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let Ok(bytes) = axum::body::to_bytes(Body::new(body), TASK_ANSWER_BYTES as usize).await else {
        return plain(
            StatusCode::BAD_GATEWAY,
            "the upstream's answer broke off while it was read\n".to_owned(),
        );
    };
    let answer: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
    if let Some(task) = answer.as_ref().and_then(task_of) {
        shared.routing().sessions.learn(task, upstream);
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// An SSE answer passed on as it comes, its events read until the first response or
/// [`TASK_ANSWER_BYTES`], whichever is first.
fn tap_stream(
    response: Response<Incoming>,
    shared: Arc<Shared>,
    upstream: usize,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let mut parser = Some(crate::wire::sse::Parser::new());
    let mut seen = 0u64;
    let tapped = Body::new(body).into_data_stream().map(move |chunk| {
        if let (Ok(bytes), Some(reading)) = (&chunk, parser.as_mut()) {
            seen += bytes.len() as u64;
            let events = reading.feed(bytes).unwrap_or_default();
            let answered = events.iter().any(|e| {
                let answer = serde_json::from_str::<serde_json::Value>(&e.data).ok();
                let answer =
                    answer.filter(|a| a.get("result").is_some() || a.get("error").is_some());
                if let Some(task) = answer.as_ref().and_then(task_of) {
                    shared.routing().sessions.learn(task, upstream);
                }
                answer.is_some()
            });
            if answered || seen > TASK_ANSWER_BYTES {
                parser = None;
            }
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(tapped))
}
