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

use super::handles::Handle;
pub use super::handles::KEEPALIVE_FRAME;
use super::writers::Stalled;
use crate::wire::Core;
use forkscope_core::{LabTime, OrphanCause};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How often idle SSE connections get a keep-alive comment, by default (lab milliseconds).
pub const KEEPALIVE_MS: u64 = 1_000;
/// How long queued frames may go untaken before the connection is judged gone, by default.
pub const WRITE_DEADLINE_MS: u64 = 3_000;

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

/// Makes a peer that takes nothing visible to the write-deadline rule at once: with
/// `TCP_NOTSENT_LOWAT` at one byte, the socket takes a write only when everything before it has
/// left (Linux). A closed receive window (a reader that stopped, the lab's NAT drop) then stops
/// the socket taking bytes after the first write that cannot leave, instead of after the send
/// buffer's megabytes; a slow reader whose window opens now and then keeps taking bytes, and is
/// judged alive.
///
/// `TCP_USER_TIMEOUT` is not used: Linux applies it to a window too small for the next segment
/// as if nothing were acknowledged, and so reset live slow readers after the deadline. A peer
/// that acknowledges nothing at all is found when the send buffer fills and the socket stops
/// taking bytes (or by the kernel's retransmission limit).
pub(super) fn arm_socket(tcp: &TcpStream, liveness: Liveness) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if liveness.write_deadline_ms.is_some() {
        let _ = socket2::SockRef::from(tcp).set_tcp_notsent_lowat(1);
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
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

    fn note_written(&self, result: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = &result {
            self.handle.note_written(*n as u64);
        }
        self.note(result)
    }

    fn note<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(e)) = &result
            && e.kind() == io::ErrorKind::TimedOut
        {
            self.handle.note_timed_out();
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
        self.note_written(result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.note_written(result)
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
