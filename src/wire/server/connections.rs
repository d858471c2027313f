//! Accepting connections, bounded:
//!
//! - at most [`super::MAX_CONNECTIONS`] at once; past it the connection idle longest is closed
//!   to make room, or, when every one is busy, the new one gets a typed 503;
//! - the first request's head within [`super::REQUEST_READ_TIMEOUT`] (a silent socket, a lone
//!   `P`, slowloris), POST bodies within it too, and no connection idle (no request in flight)
//!   past [`super::IDLE_TIMEOUT`], HTTP/1 and HTTP/2 alike;
//! - a failed accept (out of descriptors) backs off and gives back an idle connection's
//!   descriptor instead of spinning;
//! - every connection the server lets go is logged with its cause.
//!
//! Nagle is off. Every connection task belongs to the accept loop, so stopping the server ends
//! them all.

use super::handles::{ConnectionHandle, Handle, InFlight};
use super::liveness::{self, Watched};
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
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
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
pub(crate) struct Limits {
    pub max_connections: usize,
    pub read_timeout: std::time::Duration,
    /// A connection with no request in flight for this long is closed (HTTP/1 keep-alive and
    /// HTTP/2 alike).
    pub idle_timeout: std::time::Duration,
    pub liveness: liveness::Liveness,
}

/// Longest pause after a failed accept (EMFILE, ENFILE, ENOBUFS): the loop backs off instead of
/// spinning on an error that only a closed connection can clear.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// What hyper may buffer per connection (HTTP/1) or stream (HTTP/2), on top of the writer
/// queue.
const HYPER_BUFFER: usize = 16 * 1024;
/// Connections being answered 503 at once, and how long each may take to send its head.
const MAX_REFUSING: usize = 64;
const REFUSE_READ_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) async fn accept(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    mut stopped: oneshot::Receiver<Stop>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut http = auto::Builder::new(TokioExecutor::new());
    // hyper buffers ~400 KiB per connection (per stream on HTTP/2) by default, on top of the
    // writer queue: a stalled reader would hold both. The writer queue is where a stream waits.
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        // Heads up to the largest any policy reads; the policy's own limit is applied per
        // request (`rebinding`), forkscope's 16 KiB by default.
        .max_buf_size(HYPER_BUFFER.max(forkscope_core::resume::sdk::MAX_HEAD_BYTES));
    http.http2().max_send_buf_size(HYPER_BUFFER);
    let epoch = Instant::now();
    let mut open = Open::default();
    let mut tasks = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let (drain, draining) = watch::channel(false);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            stop = &mut stopped => {
                if let Ok(Stop::Drain(within)) = stop {
                    drop(listener);
                    let _ = drain.send(true);
                    drain_connections(tasks, within).await;
                }
                return;
            }
        };
        while tasks.try_join_next().is_some() {}
        let (tcp, peer) = match accepted {
            Ok(accepted) => {
                backoff = ACCEPT_BACKOFF_MIN;
                accepted
            }
            Err(e) => {
                // Out of descriptors: an idle connection's is the one to give back, and the
                // loop waits before trying again rather than spinning on the same error.
                let evicted = open.evict_oldest_idle();
                tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, evicted = ?evicted.as_ref().map(|h| (h.id, h.peer)), "accept failed; backing off");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    stop = &mut stopped => {
                        if let Ok(Stop::Drain(within)) = stop {
                            let _ = drain.send(true);
                            drain_connections(tasks, within).await;
                        }
                        return;
                    }
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        // Nagle would turn a burst of small SSE frames into 40 ms stalls.
        let _ = tcp.set_nodelay(true);
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            Err(_) => match open.evict_oldest_idle() {
                // At the cap, the connection idle longest makes room for the new one.
                Some(evicted) => {
                    tracing::info!(connection = evicted.id, peer = %evicted.peer, idle_ms = evicted.last_active().elapsed().as_millis() as u64, "connection cap reached: closed the oldest idle connection to admit a new one");
                    None
                }
                // Every connection is busy: a typed 503.
                None => {
                    tracing::info!(%peer, max = limits.max_connections, "connection cap reached and none idle: 503");
                    // Refusals hold descriptors too: past a few at once, the socket is just
                    // closed.
                    if let Ok(refusing) = refusals.clone().try_acquire_owned() {
                        tasks.spawn(async move {
                            refuse(tcp, REFUSE_READ_TIMEOUT).await;
                            drop(refusing);
                        });
                    }
                    continue;
                }
            },
        };
        let handle: Handle = Arc::new(ConnectionHandle::new(open.next_id(), peer, epoch));
        open.track(handle.clone());
        // Every request on the connection carries a handle to close it (liveness does, when
        // its writes stall, and the idle rule counts its requests). Put in each request's
        // extensions rather than layered onto the router: re-layering the router costs every
        // new connection about 20 µs.
        let routes = TowerToHyperService::new(router.clone());
        let for_requests = handle.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(for_requests.clone());
            routes.call(request)
        });
        let http = http.clone();
        let slots = slots.clone();
        liveness::arm_socket(&tcp, limits.liveness);
        let io = TokioIo::new(Watched::new(tcp, handle.clone()));
        let mut draining = draining.clone();
        tasks.spawn(async move {
            // An evicted connection frees its slot as its task ends, at once.
            let slot = match slot {
                Some(slot) => slot,
                None => match tokio::time::timeout(limits.read_timeout, slots.acquire_owned()).await
                {
                    Ok(Ok(slot)) => slot,
                    _ => return,
                },
            };
            let connection = http.serve_connection(io, service);
            tokio::pin!(connection);
            let mut shutting_down = false;
            let ended = loop {
                tokio::select! {
                    served = connection.as_mut() => break match served {
                        Ok(()) => None,
                        Err(e) => Some(Cut::Failed(e.to_string())),
                    },
                    () = handle.closed() => break None,
                    cut = idle_watch(&handle, limits) => break Some(cut),
                    // The server is stopping: finish the responses under way (their streams
                    // were ended cleanly), take no new request, then close.
                    Ok(()) = draining.changed(), if !shutting_down => {
                        shutting_down = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            };
            if let Some(cut) = ended {
                let cut = if handle.timed_out() { Cut::PeerSilent } else { cut };
                tracing::info!(connection = handle.id, peer = %handle.peer, written = handle.written(), cause = %cut, "connection closed");
            }
            handle.ended();
            drop(slot);
        });
    }
}

/// How the accept loop stops.
#[derive(Debug)]
pub(crate) enum Stop {
    /// At once: every connection is dropped where it stands (a lab torn down).
    Abort,
    /// Gracefully: no new connection; each open one finishes its response (already told to
    /// end) and closes, for at most this long; what is left then is dropped.
    Drain(Duration),
}

/// Waits for every connection to finish, for at most `within`.
async fn drain_connections(mut tasks: JoinSet<()>, within: Duration) {
    let open = tasks.len();
    let drained =
        tokio::time::timeout(within, async { while tasks.join_next().await.is_some() {} }).await;
    match drained {
        Ok(()) => tracing::info!(
            connections = open,
            "drained: every connection closed cleanly"
        ),
        Err(_) => tracing::warn!(
            connections = open,
            left = tasks.len(),
            within_ms = within.as_millis() as u64,
            "drain time over: closing the connections left"
        ),
    }
}

/// Why the server let a connection go, for the log.
#[derive(Debug, thiserror::Error)]
enum Cut {
    #[error("no request arrived within the request read timeout")]
    NoRequest,
    #[error("idle: no request in flight for the idle timeout")]
    Idle,
    #[error("the kernel gave up: nothing sent was acknowledged")]
    PeerSilent,
    #[error("{0}")]
    Failed(String),
}

/// Resolves when the connection has had no request in flight for the idle timeout (or, before
/// its first request, for the read timeout): slowloris, a lone `P`, a parked h2c connection.
async fn idle_watch(handle: &ConnectionHandle, limits: Limits) -> Cut {
    loop {
        let (limit, cut) = if handle.served() {
            (limits.idle_timeout, Cut::Idle)
        } else {
            (limits.read_timeout, Cut::NoRequest)
        };
        if handle.in_flight() > 0 {
            // Busy: a request ends through its own rules (body read timeout, liveness).
            tokio::time::sleep(limit).await;
            continue;
        }
        let deadline = handle.last_active() + limit;
        if Instant::now() >= deadline {
            return cut;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// The connections open now, oldest first, for eviction at the cap.
#[derive(Debug, Default)]
struct Open {
    handles: Vec<Handle>,
    next: u64,
}

impl Open {
    fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn track(&mut self, handle: Handle) {
        self.handles.retain(|h| !h.is_ended());
        self.handles.push(handle);
    }

    /// Closes the connection idle longest, if any has no request in flight.
    fn evict_oldest_idle(&mut self) -> Option<Handle> {
        self.handles.retain(|h| !h.is_ended());
        let oldest = self
            .handles
            .iter()
            .filter(|h| h.in_flight() == 0 && !h.is_evicted())
            .min_by_key(|h| h.last_active())?
            .clone();
        oldest.evict();
        Some(oldest)
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

/// Marks the connection busy from a request's head until its response body ends (an SSE
/// stream is busy while it is open), so [`idle_watch`] closes only idle connections.
pub(crate) async fn track_in_flight(request: Request, next: Next) -> Response {
    let Some(handle) = request.extensions().get::<Handle>().cloned() else {
        return next.run(request).await;
    };
    let in_flight = handle.request_started();
    let response = next.run(request).await;
    response.map(|body| {
        axum::body::Body::new(Tracked {
            body,
            _in_flight: in_flight,
        })
    })
}

/// A response body that holds its request's [`InFlight`] until it ends.
struct Tracked {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A POST's body must arrive within the read timeout (headers are bounded by hyper): the
/// handler reads the body before it answers, so the whole handler is timed. Streams are not:
/// a GET or a tool call's SSE response returns as soon as its headers are ready.
pub(crate) async fn bound_request_read(
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
