//! The small handles the server's parts pass each other: what wakes the driver, and what a
//! TCP connection shares with the writers, the liveness rules and the accept loop. A leaf: it
//! imports none of them, so they form no circle through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// Where the 2026-07-28 side of an endpoint says what it did, for the checker: the one
/// server's history, or nowhere (a replica of `forkscope serve`, which keeps none).
#[derive(Clone, Default)]
pub struct Report(Option<Arc<dyn Fn(forkscope_core::Record) + Send + Sync>>);

impl Report {
    pub fn to(sink: impl Fn(forkscope_core::Record) + Send + Sync + 'static) -> Report {
        Report(Some(Arc::new(sink)))
    }

    /// Reports a fact; it is only made when someone listens.
    pub fn tell(&self, record: impl FnOnce() -> forkscope_core::Record) {
        if let Some(sink) = &self.0 {
            sink(record());
        }
    }
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Report(listened)"
        } else {
            "Report(none)"
        })
    }
}

/// The keep-alive comment: a line every SSE parser skips.
pub const KEEPALIVE_FRAME: &[u8] = b": keep-alive\n\n";

/// Wakes the driver. Cheap and never lost: a wake while the driver is busy is kept for its
/// next wait.
#[derive(Clone, Debug, Default)]
pub struct Wake(Arc<Notify>);

impl Wake {
    pub fn wake(&self) {
        self.0.notify_one();
    }

    pub(super) async fn woken(&self) {
        self.0.notified().await;
    }
}

/// A TCP connection the server can close from outside its task, and what it has been doing:
/// whether the kernel gave up on it, how many bytes the socket took (a slow reader's progress),
/// and whether a request is in flight on it (an idle connection is closed, see
/// [`super::connections`]).
#[derive(Debug)]
pub struct ConnectionHandle {
    /// The accept loop's number for it, for the log.
    pub id: u64,
    pub peer: std::net::SocketAddr,
    kill: Notify,
    timed_out: AtomicBool,
    /// Bytes the socket accepted from the server: a connection that takes bytes is alive,
    /// however slowly it reads.
    written: AtomicU64,
    /// Requests whose response has not ended yet.
    in_flight: AtomicUsize,
    /// Whether a request head ever arrived.
    served: AtomicBool,
    /// When the last request started or ended (ms since the server started, real time).
    last_active_ms: AtomicU64,
    /// Its task has ended.
    ended: AtomicBool,
    /// Chosen to make room at the connection cap (closed, not yet ended).
    evicted: AtomicBool,
    /// Real time the server started: what `last_active_ms` counts from.
    epoch: std::time::Instant,
}

impl ConnectionHandle {
    pub fn new(id: u64, peer: std::net::SocketAddr, epoch: std::time::Instant) -> Self {
        let handle = ConnectionHandle {
            id,
            peer,
            kill: Notify::new(),
            timed_out: AtomicBool::new(false),
            written: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            last_active_ms: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            epoch,
        };
        handle.mark_active();
        handle
    }

    /// The socket took `n` more bytes.
    pub(super) fn note_written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }

    /// A write failed with a timeout: the kernel gave up on the peer.
    pub(super) fn note_timed_out(&self) {
        self.timed_out.store(true, Ordering::Relaxed);
    }

    /// Whether a write failed because the kernel gave up on a peer that acknowledged nothing.
    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Closes the connection (its task drops it): a stalled peer gets nothing more.
    pub fn close(&self) {
        self.kill.notify_one();
    }

    pub(super) async fn closed(&self) {
        self.kill.notified().await;
    }

    pub(super) fn ended(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    pub(super) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// Closes it to make room for another; it is not chosen twice.
    pub(super) fn evict(&self) {
        self.evicted.store(true, Ordering::Relaxed);
        self.close();
    }

    pub(super) fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Bytes the socket has taken so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Requests in flight on the connection now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Whether any request head arrived on it yet.
    pub fn served(&self) -> bool {
        self.served.load(Ordering::Relaxed)
    }

    /// When a request last started or ended on it.
    pub fn last_active(&self) -> std::time::Instant {
        self.epoch + Duration::from_millis(self.last_active_ms.load(Ordering::Relaxed))
    }

    fn mark_active(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active_ms.store(ms, Ordering::Relaxed);
    }

    /// A request head arrived: the connection is busy until the returned guard (held by the
    /// response body) is dropped.
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.mark_active();
        InFlight(self.clone())
    }
}

/// A request in flight on a connection; dropped when its response has ended.
#[derive(Debug)]
pub struct InFlight(Arc<ConnectionHandle>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.mark_active();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a request carries to know its TCP connection.
pub(crate) type Handle = Arc<ConnectionHandle>;
