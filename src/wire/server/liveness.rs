//! Liveness: how the server learns that a connection is dead when nothing tells it.
//!
//! A NAT drop sends no FIN and no reset: the server keeps writing into a connection nobody
//! reads. Its writes back up — through the socket buffers, then hyper's, then the writer
//! queue — and stop being taken. Two rules turn that into a decision, never someone else's
//! request (a rejected GET changes nothing):
//!
//! - **Keep-alive.** An SSE connection with nothing to say gets a `: keep-alive` comment every
//!   `keepalive_ms`, so an idle stream's writes back up too (every SSE client ignores comments).
//! - **Write deadline.** A connection whose queued frames have not been taken for
//!   `write_deadline_ms` is judged gone: the core orphans its stream with the cause
//!   `writes_stalled` (its grace window starts, and the dashboard says why), and the TCP
//!   connection is closed.
//!
//! Both run on lab time, so a paused lab judges nothing and a scripted lab judges
//! deterministically.

use super::writers::Stalled;
use crate::wire::Core;
use forkscope_core::{LabTime, OrphanCause};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How often idle SSE connections get a keep-alive comment, by default (lab milliseconds).
pub const KEEPALIVE_MS: u64 = 1_000;
/// How long queued frames may go untaken before the connection is judged gone, by default.
pub const WRITE_DEADLINE_MS: u64 = 3_000;

/// The keep-alive comment: a line every SSE parser skips.
pub const KEEPALIVE_FRAME: &[u8] = b": keep-alive\n\n";

/// The settings of the two rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// `None`: no keep-alive comments.
    pub keepalive_ms: Option<u64>,
    /// `None`: a stalled connection is kept until its socket fails.
    pub write_deadline_ms: Option<u64>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            keepalive_ms: Some(KEEPALIVE_MS),
            write_deadline_ms: Some(WRITE_DEADLINE_MS),
        }
    }
}

impl Liveness {
    /// How often the rules are checked: often enough that neither is late by more than a
    /// quarter of its period.
    fn check_every(self) -> Option<u64> {
        [self.keepalive_ms, self.write_deadline_ms]
            .into_iter()
            .flatten()
            .min()
            .map(|ms| (ms / 4).max(1))
    }
}

/// A TCP connection the server can close from outside its task, and that remembers whether
/// the kernel gave up on it because nothing it sent was acknowledged.
#[derive(Debug, Default)]
pub struct ConnectionHandle {
    kill: Notify,
    timed_out: AtomicBool,
}

impl ConnectionHandle {
    /// Whether a write failed because the peer acknowledged nothing for the user timeout.
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
}

/// Applies both rules at lab time `now`; returns when to check again (`None`: no connection
/// open, nothing to check until one is).
pub(super) fn run_due(core: &mut Core, now: LabTime, liveness: Liveness) -> Option<LabTime> {
    let every = liveness.check_every()?;
    if core.io.writers.is_empty() {
        return None;
    }
    if let Some(keepalive) = liveness.keepalive_ms {
        core.io.writers.keep_alive(now, keepalive);
    }
    if let Some(deadline) = liveness.write_deadline_ms {
        for Stalled {
            session,
            stream,
            connection,
            handle,
            since,
        } in core.io.writers.cut_stalled(now, deadline)
        {
            tracing::info!(session = %session.short(), %stream, stalled_ms = now.since(since), "writes stalled: connection judged gone");
            core.server.connection_closed(
                now,
                session,
                stream,
                connection,
                OrphanCause::WritesStalled,
                &mut core.history,
            );
            if let Some(handle) = handle {
                handle.close();
            }
        }
    }
    Some(now.plus(every))
}

/// What a request carries to know its TCP connection.
pub(super) type Handle = Arc<ConnectionHandle>;

/// Sets the kernel's own write deadline on an accepted socket (Linux: `TCP_USER_TIMEOUT`):
/// bytes unacknowledged — a black-holed route, or a peer whose window stays shut — for this
/// long abort the connection. It catches a dead peer before the buffers fill, which the
/// write-deadline rule needs.
pub(super) fn arm_socket(tcp: &TcpStream, liveness: Liveness) {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    if let Some(ms) = liveness.write_deadline_ms {
        let timeout = u32::try_from(ms).map_or(u32::MAX, |ms| ms.max(1));
        let _ = socket2::SockRef::from(tcp)
            .set_tcp_user_timeout(Some(Duration::from_millis(u64::from(timeout))));
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "fuchsia")))]
    let _ = (tcp, liveness);
}

/// The accepted socket, noting on its handle when a write fails with a timeout (the kernel
/// gave up on an unacknowledging peer), so the stream is orphaned as `writes_stalled`.
#[derive(Debug)]
pub(super) struct Watched {
    tcp: TcpStream,
    handle: Handle,
}

impl Watched {
    pub fn new(tcp: TcpStream, handle: Handle) -> Self {
        Watched { tcp, handle }
    }

    fn note<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(e)) = &result
            && e.kind() == io::ErrorKind::TimedOut
        {
            self.handle.timed_out.store(true, Ordering::Relaxed);
        }
        result
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.tcp).poll_read(cx, buf);
        self.note(result)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write(cx, buf);
        self.note(result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.note(result)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.tcp).poll_flush(cx);
        self.note(result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
