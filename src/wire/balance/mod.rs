//! The balancer: a small streaming HTTP load balancer that puts several `forkscope serve`
//! replicas behind one address, so a session's requests and reconnects can land on a replica
//! other than the one that opened it. Round-robin (the default) has no stickiness at all: the
//! hard case for resumption, where every GET with `Last-Event-ID` may reach a stranger. Sticky
//! keeps a session where its `Mcp-Session-Id` was first answered, and (2026-07-28) a task where
//! its `CreateTaskResult` came from: its `tasks/*` requests carry the task id in `Mcp-Name`.
//!
//! Unlike the fault [`proxy`](super::proxy), it speaks HTTP rather than relaying bytes: each
//! request is routed on its own, so one client connection reaches every replica. A response is
//! handed back frame by frame as the upstream writes it (an SSE stream flows event by event),
//! and a client that goes away drops the upstream connection with it, so the replica sees its
//! stream close as it would without the balancer.
//!
//! The upstream side is hyper's HTTP/1 client, one connection per request, rather than
//! reqwest: reqwest adds `Accept: */*` to a request that has none (its default headers cannot
//! be emptied), and a balancer must not change what a client accepts in front of a server that
//! checks it. Dialling the socket ourselves also makes "nothing was sent" exact — the dial
//! failed — which is the one case where trying the next upstream is safe, and lets us turn
//! Nagle off on it as the proxy does. Neither side follows redirects or decompresses: bytes
//! pass as they are. A connection per request costs a loopback handshake, nothing more.

mod affinity;
mod routing;
mod upstream;

pub use upstream::{Upstream, UpstreamError, UpstreamsError, check_upstreams};

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt as _;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use affinity::{affinity, header_is, learn_task};
use routing::{Plan, Routing};

/// The largest request body forwarded; a larger one is answered 413. Bodies are read whole
/// before an upstream is chosen, so a refused connection can be retried on the next one.
pub const MAX_BODY: usize = 1024 * 1024;
/// Sessions remembered in sticky mode; past it, the oldest learned is forgotten.
pub const MAX_SESSIONS: usize = 10_000;
/// Client connections served at once; the accept loop waits for a free slot past it.
const MAX_CONNECTIONS: usize = 1_024;
/// How long dialling an upstream may take before it counts as not answering (loopback refuses
/// at once; an address that drops SYNs would otherwise hold the request forever).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an upstream may take to send a response's head (its status and headers) before it
/// counts as not answering: a stopped process accepts connections and never answers. The body
/// that follows (an SSE stream) may be quiet for as long as it likes.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send its request head, and then its body, as the replicas
/// allow: a stalled head closes the connection, a stalled body is answered 408. Without it a
/// slow client holds a connection slot (and its buffered bytes) for as long as it likes.
pub const DEFAULT_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an upstream that stopped answering is asked again (`GET /`; any answer will do).
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// The pause after a failed accept (out of descriptors), instead of spinning on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How an upstream is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every request to the next upstream in rotation, whatever session it belongs to.
    #[default]
    RoundRobin,
    /// A request with `Mcp-Session-Id` to the upstream whose response first carried that id;
    /// others (and sessions not learned, or whose upstream is out) in rotation.
    Sticky,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::RoundRobin => "round-robin",
            Mode::Sticky => "sticky",
        })
    }
}

/// An index past the balancer's upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no upstream at index {index}: there are {count} (indexes 0 to {})", count - 1)]
pub struct NoSuchUpstream {
    pub index: usize,
    pub count: usize,
}

/// One upstream as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamStatus {
    pub url: String,
    /// In rotation (`take_out` puts it out, `put_in` back).
    pub in_rotation: bool,
    /// Requests sent to it (its connection was made).
    pub forwarded: u64,
    /// The next request goes to it (`send_next_to`).
    pub next: bool,
    /// It started its last response in time; one that did not is passed over until it answers.
    pub answering: bool,
}

/// A running balancer on `addr`. Dropping it stops accepting and closes every connection it
/// serves (and with them the upstream ones).
#[derive(Debug)]
pub struct Balancer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Balancer {
    /// Listens on `listen` and forwards every request to one of `upstreams` (at least one, no
    /// server twice: `InvalidInput` otherwise), chosen as `mode` says, all in rotation.
    pub async fn start(
        listen: SocketAddr,
        upstreams: Vec<Upstream>,
        mode: Mode,
    ) -> std::io::Result<Balancer> {
        Balancer::start_bounded(listen, upstreams, mode, DEFAULT_CLIENT_TIMEOUT).await
    }

    /// [`Balancer::start`], with clients given `client_timeout` for a request's head and
    /// then for its body.
    pub async fn start_bounded(
        listen: SocketAddr,
        upstreams: Vec<Upstream>,
        mode: Mode,
        client_timeout: Duration,
    ) -> std::io::Result<Balancer> {
        check_upstreams(&upstreams)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            routing: Mutex::new(Routing::new(upstreams.len())),
            upstreams,
            mode: Mutex::new(mode),
            head_timeout: Mutex::new(DEFAULT_HEAD_TIMEOUT),
            client_timeout,
        });
        let accept = tokio::spawn(accept(listener, shared.clone()));
        Ok(Balancer {
            addr,
            shared,
            accept,
        })
    }

    /// How long an upstream may take to start its response before the balancer stops sending
    /// it requests (default [`DEFAULT_HEAD_TIMEOUT`]).
    pub fn set_head_timeout(&self, timeout: Duration) {
        *self
            .shared
            .head_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = timeout;
    }

    pub fn upstreams(&self) -> &[Upstream] {
        &self.shared.upstreams
    }

    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// Routes from the next request on as `mode` says. Sticky learns sessions from responses
    /// it routes from now on: a session answered under round-robin goes on in rotation until a
    /// response names it again.
    pub fn set_mode(&self, mode: Mode) {
        *self
            .shared
            .mode
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = mode;
    }

    /// Takes upstream `index` (0-based, in the order given) out of rotation: no request is
    /// sent to it unless `send_next_to` names it.
    pub fn take_out(&self, index: usize) -> Result<(), NoSuchUpstream> {
        self.with_upstream(index, |routing| routing.slots[index].in_rotation = false)
    }

    /// Puts upstream `index` back in rotation.
    pub fn put_in(&self, index: usize) -> Result<(), NoSuchUpstream> {
        self.with_upstream(index, |routing| routing.slots[index].in_rotation = true)
    }

    /// Sends the next request to upstream `index` whatever the rotation and the sessions say
    /// (out of rotation too), once.
    pub fn send_next_to(&self, index: usize) -> Result<(), NoSuchUpstream> {
        self.with_upstream(index, |routing| routing.next = Some(index))
    }

    /// Sticky mode sends session `id` to upstream `index` from now on, as if that upstream had
    /// answered its `initialize`: for a session that began under round-robin.
    pub fn learn(&self, id: &str, index: usize) -> Result<(), NoSuchUpstream> {
        self.with_upstream(index, |routing| routing.sessions.learn(id, index))
    }

    /// Each upstream in the order given.
    pub fn status(&self) -> Vec<UpstreamStatus> {
        let routing = self.shared.routing();
        self.shared
            .upstreams
            .iter()
            .zip(&routing.slots)
            .enumerate()
            .map(|(i, (upstream, slot))| UpstreamStatus {
                url: upstream.url().to_owned(),
                in_rotation: slot.in_rotation,
                forwarded: slot.forwarded,
                next: routing.next == Some(i),
                answering: slot.answering,
            })
            .collect()
    }

    fn with_upstream(
        &self,
        index: usize,
        change: impl FnOnce(&mut Routing),
    ) -> Result<(), NoSuchUpstream> {
        let count = self.shared.upstreams.len();
        if index >= count {
            return Err(NoSuchUpstream { index, count });
        }
        change(&mut self.shared.routing());
        Ok(())
    }
}

#[derive(Debug)]
struct Shared {
    upstreams: Vec<Upstream>,
    mode: Mutex<Mode>,
    routing: Mutex<Routing>,
    head_timeout: Mutex<Duration>,
    client_timeout: Duration,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn head_timeout(&self) -> Duration {
        *self
            .head_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Upstream `i` did not start a response in time: it gets no new request while another
    /// answers, and is asked again every [`PROBE_EVERY`] until it answers.
    fn stopped_answering(self: &Arc<Self>, i: usize) {
        let was_answering = std::mem::replace(&mut self.routing().slots[i].answering, false);
        if !was_answering {
            return;
        }
        tracing::warn!(upstream = %self.upstreams[i], "upstream did not answer in time; resting it until it answers again");
        let shared = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if shared.answers(i).await {
                    shared.routing().slots[i].answering = true;
                    tracing::info!(upstream = %shared.upstreams[i], "upstream answers again");
                    return;
                }
            }
        });
    }

    /// Whether upstream `i` starts a response to `GET /` within the head timeout.
    async fn answers(&self, i: usize) -> bool {
        let upstream = &self.upstreams[i];
        let Ok(tcp) = dial(upstream).await else {
            return false;
        };
        let mut request = Request::new(Body::empty());
        if let Ok(host) = HeaderValue::from_str(&upstream.authority()) {
            request.headers_mut().insert(header::HOST, host);
        }
        matches!(
            tokio::time::timeout(self.head_timeout(), send(tcp, request)).await,
            Ok(Ok(_))
        )
    }
    /// Held briefly, never across an await; a panic elsewhere leaves it consistent, so poisoning
    /// is ignored.
    fn routing(&self) -> MutexGuard<'_, Routing> {
        self.routing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(shared.client_timeout);
    // Owned here, so aborting the accept loop ends every connection it started.
    let mut connections = JoinSet::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                tracing::warn!(%error, "balancer accept failed; backing off");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        // Nagle would hold an SSE event back behind the previous one's acknowledgement.
        let _ = tcp.set_nodelay(true);
        let shared = shared.clone();
        let http = http.clone();
        connections.spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(forward(&shared, request).await) }
            });
            if let Err(error) = http.serve_connection(TokioIo::new(tcp), service).await {
                tracing::debug!(%error, "balancer client connection ended");
            }
        });
    }
}

/// Why a request body was not read.
enum BodyError {
    TooLarge,
    Read(axum::Error),
}

async fn read_body(body: Incoming) -> Result<Bytes, BodyError> {
    let mut data = Body::new(body).into_data_stream();
    let mut whole = Vec::new();
    while let Some(chunk) = data.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if whole.len() + chunk.len() > MAX_BODY {
            return Err(BodyError::TooLarge);
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(whole))
}

async fn forward(shared: &Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let body = match tokio::time::timeout(shared.client_timeout, read_body(body)).await {
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time\n".to_owned(),
            );
        }
        Ok(Ok(body)) => body,
        Ok(Err(BodyError::TooLarge)) => return too_large(),
        Ok(Err(BodyError::Read(error))) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {error}\n"),
            );
        }
    };
    let mode = shared.mode();
    let session = match mode {
        Mode::Sticky => affinity(&parts.headers),
        Mode::RoundRobin => None,
    };
    // A 2026-07-28 `tools/call` may be answered with a task, whose id sticky mode learns.
    let may_make_task =
        mode == Mode::Sticky && header_is(&parts.headers, "mcp-method", "tools/call");
    let order = match shared.routing().plan(session) {
        Plan::Try(order) => order,
        Plan::AllOut => {
            let mut refused = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "every upstream is out of rotation; put one back in (`in N`)\n".to_owned(),
            );
            refused
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return refused;
        }
    };
    let mut tried = Vec::with_capacity(order.len());
    let mut timed_out = false;
    for i in order {
        let upstream = &shared.upstreams[i];
        let tcp = match dial(upstream).await {
            Ok(tcp) => tcp,
            Err(error) => {
                tracing::info!(upstream = %upstream, %error, "upstream did not answer; trying the next");
                tried.push(format!("{} {} ({error})", i + 1, upstream));
                continue;
            }
        };
        shared.routing().slots[i].forwarded += 1;
        let outgoing = upstream_request(&parts, body.clone(), upstream);
        let head_timeout = shared.head_timeout();
        let Ok(sent) = tokio::time::timeout(head_timeout, send(tcp, outgoing)).await else {
            shared.stopped_answering(i);
            let why = format!("{} {upstream} (no response in {head_timeout:?})", i + 1);
            if retry_is_safe(&parts.method) {
                tracing::info!(upstream = %upstream, "upstream did not answer in time; trying the next");
                tried.push(why);
                timed_out = true;
                continue;
            }
            // It may have reached the server (a tools/call that runs): sending it again could
            // run it twice, so the client is told instead.
            return plain(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "upstream {why}: the request may have reached it, so it is not sent again\n"
                ),
            );
        };
        return match sent {
            Ok(response) => {
                if mode == Mode::Sticky
                    && let Some(id) = response
                        .headers()
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok())
                {
                    shared.routing().sessions.learn(id, i);
                }
                if may_make_task {
                    return learn_task(response, shared, i).await;
                }
                pass_back(response)
            }
            Err(error) => plain(
                StatusCode::BAD_GATEWAY,
                format!(
                    "upstream {} {upstream} failed after the request was sent: {error}\n",
                    i + 1
                ),
            ),
        };
    }
    let status = if timed_out {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::BAD_GATEWAY
    };
    plain(
        status,
        format!("no upstream answered; tried {}\n", tried.join(", ")),
    )
}

/// Whether a request that may have reached an upstream can be sent to the next one: methods
/// HTTP defines as idempotent (a GET resume is decided by the store's epoch whoever gets it).
fn retry_is_safe(method: &hyper::Method) -> bool {
    matches!(
        *method,
        hyper::Method::GET | hyper::Method::HEAD | hyper::Method::OPTIONS | hyper::Method::DELETE
    )
}

async fn dial(upstream: &Upstream) -> std::io::Result<TcpStream> {
    let host = upstream.host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, upstream.port)))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

async fn send(tcp: TcpStream, request: Request<Body>) -> hyper::Result<Response<Incoming>> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    // Lives as long as the response body is read; a client that goes away drops the body,
    // and with it this connection.
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "balancer upstream connection ended");
        }
    });
    sender.send_request(request).await
}

/// The client's request for `upstream`: same method, path and query, headers and body, minus
/// what belongs to the client's hop.
fn upstream_request(
    parts: &hyper::http::request::Parts,
    body: Bytes,
    upstream: &Upstream,
) -> Request<Body> {
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    if !headers.contains_key(header::HOST) {
        // HTTP/2 carries the authority in the URI, and HTTP/1.0 may carry none.
        let authority = parts
            .uri
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_else(|| upstream.authority());
        if let Ok(host) = HeaderValue::from_str(&authority) {
            headers.insert(header::HOST, host);
        }
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut request = Request::new(Body::from(body));
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = path
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    *request.headers_mut() = headers;
    request
}

fn pass_back(response: Response<Incoming>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, Body::new(body))
}

/// Removes the headers that describe one connection rather than the message (RFC 9110 §7.6.1),
/// and any the `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    let hop: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            matches!(
                name.as_str(),
                "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade"
            ) || name.as_str().starts_with("proxy-")
        })
        .cloned()
        .collect();
    for name in hop {
        headers.remove(name);
    }
}

fn too_large() -> Response<Body> {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is over the balancer's limit of {MAX_BODY} bytes\n"),
    )
}

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "close, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "x"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("mcp-session-id", "s1"),
            ("last-event-id", "7"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["last-event-id", "mcp-session-id"]);
    }
}
