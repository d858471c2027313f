//! An SSE response body: the connection's opening (priming event, replay) rendered a write's
//! worth at a time, then the live tail from its writer queue, coalesced into large writes.

use super::App;
use super::handles::{Handle, Wake};
use super::writers::{Queue, RETRY_HINT_MS};
use crate::clock::LabClock;
use crate::wire::Shared;
use crate::wire::sse;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use forkscope_core::server::{Opening, Outgoing};
use forkscope_core::{ConnectionId, OrphanCause, SessionId, StreamId};
use std::sync::Arc;

/// Largest live-tail write: queued frames are joined, so a burst costs a few syscalls.
const MAX_WRITE: usize = 32 * 1024;
/// Largest replay write: a replay is rendered straight into one buffer of up to this size.
const MAX_REPLAY_WRITE: usize = 32 * 1024;
/// The first replay write: the first two dozen events, out as soon as they are rendered (a
/// client parses them while the next write is rendered). Later writes grow fourfold, up to
/// [`MAX_REPLAY_WRITE`], so a long replay still goes in a few large writes: 4, 16, then 32 KiB.
/// Measured in the serve bench (measure 3b): starting at 1 or 2 KiB, or doubling, made the
/// whole replay slower (more writes and wake-ups for the same bytes) without bringing the
/// first event earlier; starting at 16 KiB held the first event back by some 50 µs.
const FIRST_REPLAY_WRITE: usize = 4 * 1024;
/// How many times larger each replay write may be than the one before.
const REPLAY_WRITE_GROWTH: usize = 4;

/// An event as an SSE frame — with its ground truth in a comment line when `truth` (the lab's
/// own client feeds it to the checker; other clients have no use for it); the priming event
/// carries the `retry:` hint.
pub fn render(outgoing: &Outgoing, truth: bool) -> Bytes {
    let mut out = bytes::BytesMut::with_capacity(outgoing.body.len() + 128);
    render_into(&mut out, outgoing, truth);
    out.freeze()
}

fn render_into(out: &mut bytes::BytesMut, outgoing: &Outgoing, truth: bool) {
    let truth = truth.then_some((
        outgoing.event.stream.0,
        outgoing.event.seq,
        outgoing.key.as_deref(),
    ));
    let retry = outgoing.key.is_none().then_some(RETRY_HINT_MS);
    sse::write_frame_of(
        out,
        truth,
        &outgoing.wire_id,
        retry,
        (&outgoing.body, outgoing.one_line),
    );
}

/// What to say (log) about a connection once its first write is out, or once it ends if it
/// never gets one.
pub(super) type Announcement = Box<dyn FnOnce() + Send>;

/// The opening, rendered lazily: captured atomically with the attach, formatted as written.
struct Replay {
    opening: Option<Opening>,
    announce: Option<Announcement>,
    truth: bool,
    next: usize,
    priming_sent: bool,
    /// The size the next replay write is rendered up to.
    write_size: usize,
    /// A replay write was just handed to hyper: let it go out before rendering the next.
    flush: bool,
}

impl Replay {
    fn new((opening, announce): (Option<Opening>, Option<Announcement>), truth: bool) -> Self {
        Replay {
            opening,
            announce,
            truth,
            next: 0,
            priming_sent: false,
            write_size: FIRST_REPLAY_WRITE,
            flush: false,
        }
    }

    fn announce(&mut self) {
        if let Some(announce) = self.announce.take() {
            announce();
        }
    }

    /// Whether the connection ends after the replay (a finished stream, or nothing attached).
    fn ends(&self) -> bool {
        self.opening.as_ref().is_none_or(|o| o.ends)
    }

    fn next_chunk(&mut self) -> Option<Bytes> {
        let opening = self.opening.as_ref()?;
        let max_write = self.write_size;
        let mut batch = bytes::BytesMut::with_capacity(max_write + 1024);
        if !self.priming_sent {
            self.priming_sent = true;
            if let Some(priming) = opening.priming_event() {
                render_into(&mut batch, &priming, self.truth);
            }
        }
        let affixes = opening.id_affixes();
        while batch.len() < max_write {
            let Some(event) = opening.replay.get(self.next) else {
                break;
            };
            self.next += 1;
            // Ids that are not a counter between two fixed strings are spelled one by one.
            let Some((prefix, suffix)) = &affixes else {
                render_into(&mut batch, &opening.outgoing(event), self.truth);
                continue;
            };
            let truth =
                self.truth
                    .then_some((event.id.stream.0, event.id.seq, Some(&*event.payload.key)));
            sse::write_replayed(
                &mut batch,
                truth,
                (prefix, event.id.seq, suffix),
                &event.payload.body,
                event.payload.is_one_line(),
            );
        }
        if batch.is_empty() {
            return None;
        }
        self.write_size = (max_write * REPLAY_WRITE_GROWTH).min(MAX_REPLAY_WRITE);
        self.flush = true;
        Some(batch.freeze())
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.announce();
    }
}

/// Joins the frames already queued behind `first` into one write (up to [`MAX_WRITE`]).
fn coalesce(first: Bytes, queue: &mut Queue) -> Bytes {
    let Ok(second) = queue.rx.try_recv() else {
        return first;
    };
    let mut batch = bytes::BytesMut::with_capacity((first.len() + second.len()) * 8);
    batch.extend_from_slice(&first);
    batch.extend_from_slice(&second);
    while batch.len() < MAX_WRITE {
        let Ok(next) = queue.rx.try_recv() else { break };
        batch.extend_from_slice(&next);
    }
    batch.freeze()
}

/// Tells the core when an SSE connection ends (the client went away, or we closed it), and
/// wakes the driver: a producer may have been waiting on this connection.
struct ConnectionGuard {
    shared: Shared,
    clock: Arc<LabClock>,
    wake: Wake,
    session: SessionId,
    stream: StreamId,
    connection: ConnectionId,
    /// Its TCP connection: tells whether the kernel gave up on an unacknowledging peer.
    tcp: Option<Handle>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        {
            let mut guard = self.shared.lock();
            let core = &mut *guard;
            let now = self.clock.now();
            core.io.writers.forget(self.connection);
            let cause = if self.tcp.as_ref().is_some_and(|h| h.timed_out()) {
                OrphanCause::WritesStalled
            } else {
                OrphanCause::ConnectionClosed
            };
            let orphaned = core.server.connection_closed(
                now,
                self.session,
                self.stream,
                self.connection,
                cause,
                &mut core.history,
            );
            if orphaned {
                tracing::info!(session = %self.session.short(), stream = %self.stream, cause = cause.describe(), "connection lost: grace window starts");
            }
        }
        self.wake.wake();
    }
}

/// The response for an attached connection: `opening` first, then `queue` (the live tail)
/// unless the opening ends the stream. The opening's announcement is logged once its first
/// write is out.
pub(super) fn sse_response(
    app: &App,
    opening: (Option<Opening>, Option<Announcement>),
    queue: Option<Queue>,
    session: SessionId,
    stream: StreamId,
    connection: ConnectionId,
    tcp: Option<Handle>,
) -> Response {
    let guard = ConnectionGuard {
        shared: app.shared.clone(),
        clock: app.clock.clone(),
        wake: app.wake.clone(),
        session,
        stream,
        connection,
        tcp,
    };
    let replay = Replay::new(opening, app.truth);
    let body = futures_util::stream::unfold(
        (replay, queue, guard),
        |(mut replay, mut queue, guard)| async move {
            if std::mem::take(&mut replay.flush) {
                // Return Pending after each replay write, so hyper sends it while the next is
                // rendered: the client parses one write as the server renders the next,
                // instead of waiting for the whole replay to be buffered behind the first.
                tokio::task::yield_now().await;
                replay.announce();
            }
            let chunk = match replay.next_chunk() {
                Some(chunk) => {
                    if let Some(q) = &queue {
                        q.wrote();
                    }
                    chunk
                }
                None if replay.ends() => return None,
                None => {
                    replay.announce(); // Not said yet if there was nothing to replay.
                    let q = queue.as_mut()?;
                    let frame = q.rx.recv().await?;
                    let chunk = coalesce(frame, q);
                    q.drained(chunk.len());
                    chunk
                }
            };
            Some((
                Ok::<Bytes, std::convert::Infallible>(chunk),
                (replay, queue, guard),
            ))
        },
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
