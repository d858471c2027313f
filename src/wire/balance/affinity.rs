//! What sticky mode keeps together: a 2025-11-25 session by its `Mcp-Session-Id`, and a
//! 2026-07-28 task by its id, learned from the `CreateTaskResult` that named it and carried by
//! its `tasks/*` requests in `Mcp-Name`.

use super::{Shared, pass_back, plain, strip_hop_by_hop};
use axum::body::Body;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap};
use hyper::{Response, StatusCode};

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

/// The largest JSON answer read whole to learn a task id from it.
const TASK_ANSWER_BYTES: u64 = 64 * 1024;

/// Passes a `tools/call` answer back, learning the task it created, if any, for the upstream
/// that made it: a JSON answer of known, small length is read whole (a stream never is).
pub(super) async fn learn_task(
    response: Response<Incoming>,
    shared: &Shared,
    upstream: usize,
) -> Response<Body> {
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
    if let Some(task) = answer
        .as_ref()
        .filter(|a| a.pointer("/result/resultType").and_then(|t| t.as_str()) == Some("task"))
        .and_then(|a| a.pointer("/result/taskId"))
        .and_then(|t| t.as_str())
    {
        shared.routing().sessions.learn(task, upstream);
    }
    Response::from_parts(parts, Body::from(bytes))
}
