//! A 2026-07-28 response stream, for every part of the modern endpoint (a call's own stream,
//! a listen's): how many frames it queues, the response that carries it, and a runner's pause.
//! A leaf: `modern`, `tasks` and `listen` all use it, and it uses none of them.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

/// Frames a modern call's stream may hold before its runner waits for the client.
pub(super) const STREAM_QUEUE: usize = 16;

/// A stream of the frames `rx` gives, as this endpoint's SSE response: a call's, a listen's.
pub(super) fn sse_response(rx: mpsc::Receiver<String>) -> Response {
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        let frame = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(frame), rx))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// Waits `ms`, or not at all when nothing is left to wait.
pub(super) async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}
