//! Accepting connections, bounded: at most [`super::MAX_CONNECTIONS`] at once (past it, a 503
//! and close), request headers and POST bodies within [`super::REQUEST_READ_TIMEOUT`], Nagle
//! off. Every connection task belongs to the accept loop, so stopping the server ends them all.

use super::liveness::{self, Handle, Watched};
use super::refusal::json_response;
use crate::wire::jsonrpc;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::service::{Service as _, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinSet;

/// The answer to a connection over the cap, written raw: the server has no slot to run HTTP on
/// it.
fn over_capacity() -> Vec<u8> {
    let body = jsonrpc::error(
        &Value::Null,
        jsonrpc::SESSION_ERROR,
        "too many open connections: retry in a moment",
        None,
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub max_connections: usize,
    pub read_timeout: std::time::Duration,
    pub liveness: liveness::Liveness,
}

pub(super) async fn accept(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    mut stopped: oneshot::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout);
    let mut tasks = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stopped => return,
        };
        while tasks.try_join_next().is_some() {}
        let Ok((tcp, _)) = accepted else { continue };
        // Nagle would turn a burst of small SSE frames into 40 ms stalls.
        let _ = tcp.set_nodelay(true);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tasks.spawn(refuse(tcp, limits.read_timeout));
            continue;
        };
        // Every request on the connection carries a handle to close it (liveness does, when
        // its writes stall). Put in each request's extensions rather than layered onto the
        // router: re-layering the router costs every new connection about 20 µs.
        let handle: Handle = Arc::default();
        let routes = TowerToHyperService::new(router.clone());
        let for_requests = handle.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(for_requests.clone());
            routes.call(request)
        });
        let http = http.clone();
        liveness::arm_socket(&tcp, limits.liveness);
        let io = TokioIo::new(Watched::new(tcp, handle.clone()));
        tasks.spawn(async move {
            tokio::select! {
                _ = http.serve_connection(io, service) => {}
                () = handle.closed() => {}
            }
            drop(slot);
        });
    }
}

/// Answers a connection over the cap: its request head is read first (bounded in time and
/// size), so the client reads a response to what it sent, then 503 and close.
async fn refuse(mut tcp: tokio::net::TcpStream, read_timeout: std::time::Duration) {
    let mut head = Vec::with_capacity(1024);
    let _ = tokio::time::timeout(read_timeout, async {
        let mut buf = [0u8; 1024];
        while head.len() < 8 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let _ = tcp.write_all(&over_capacity()).await;
    let _ = tcp.shutdown().await;
}

/// A POST's body must arrive within the read timeout (headers are bounded by hyper): the
/// handler reads the body before it answers, so the whole handler is timed. Streams are not:
/// a GET or a tool call's SSE response returns as soon as its headers are ready.
pub(super) async fn bound_request_read(
    State(timeout): State<std::time::Duration>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => json_response(
            StatusCode::REQUEST_TIMEOUT,
            jsonrpc::error(
                &Value::Null,
                jsonrpc::INVALID_REQUEST,
                "the request body did not arrive in time",
                None,
            ),
        ),
    }
}
