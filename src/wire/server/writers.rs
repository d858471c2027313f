//! The open SSE connections, by connection id: where the server's writes go.
//!
//! Each connection has a queue drained by its response body, bounded in frames and in bytes. A
//! producer (a tool call, the background emitter) that finds a queue full waits for it instead
//! of growing it: the stream then goes as fast as the socket takes it. The body wakes the
//! driver once it has made room. A frame that still does not fit (a live emit onto a reader
//! that stopped) cuts the connection off; the client resumes from its cursor. What the body
//! takes is counted, so [`super::liveness`] can tell a connection that stopped taking bytes.

use super::handles::{Handle, KEEPALIVE_FRAME, Wake};
use crate::wire::sse;
use bytes::Bytes;
use forkscope_core::{ConnectionId, LabTime, SessionId, StreamId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Frames queued for one SSE connection. Producers wait when it is full.
pub const WRITER_QUEUE: usize = 2_048;
/// Bytes queued for one SSE connection: producers (a tool call, the background emitter) wait
/// past this, so a stalled reader holds no more.
pub const WRITER_QUEUE_BYTES: usize = 32 * 1024;
/// A live emit that ignores the wait (a burst from the dashboard or a scenario) may take the
/// queue up to this; a frame past it cuts the connection off, and the client resumes.
pub const WRITER_QUEUE_CUT_BYTES: usize = 256 * 1024;
/// Real time a stall must also last: a lab clock stepped forward (paused, scripted, sped up)
/// must not judge a body that had no time to take its frames.
pub const STALL_REAL_MIN: Duration = Duration::from_millis(200);
/// The `retry:` hint sent on priming events and before the server closes a stream.
pub const RETRY_HINT_MS: u64 = 250;

/// What a connection's producers and its body share.
#[derive(Debug, Default)]
struct Flow {
    /// Bytes queued and not yet taken by the body.
    queued: AtomicUsize,
    /// Chunks the body has handed to the socket (replay and live tail): progress.
    taken: AtomicU64,
    /// Set by a producer that found the queue full; the body clears it and wakes the driver.
    blocked: AtomicBool,
}

/// One open SSE connection.
#[derive(Debug)]
struct Writer {
    session: SessionId,
    stream: StreamId,
    tx: mpsc::Sender<Bytes>,
    flow: Arc<Flow>,
    /// Its TCP connection, to close when it is judged gone.
    handle: Option<Handle>,
    /// Frames queued so far, and since when that count has not moved (for keep-alive).
    sent: u64,
    quiet: (u64, LabTime),
    /// The body's progress when it was last seen moving or with nothing queued.
    progress: u64,
    /// When it was first seen waiting with no progress since: lab time (the deadline) and real
    /// time (a lab clock stepped forward gives the body no time to take anything).
    stalled_from: Option<(LabTime, Instant)>,
}

impl Writer {
    fn send(&mut self, frame: Bytes) -> bool {
        let len = frame.len();
        if self.flow.queued.load(Ordering::Relaxed) + len > WRITER_QUEUE_CUT_BYTES {
            return false;
        }
        self.flow.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.try_send(frame).is_err() {
            self.flow.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        self.sent += 1;
        true
    }
}

/// A connection whose queued frames went untaken for the write deadline, cut off.
#[derive(Debug)]
pub(super) struct Stalled {
    pub session: SessionId,
    pub stream: StreamId,
    pub connection: ConnectionId,
    pub handle: Option<Handle>,
    /// When it was first seen waiting without progress.
    pub since: LabTime,
}

/// The receiving end a response body drains.
#[derive(Debug)]
pub(super) struct Queue {
    pub rx: mpsc::Receiver<Bytes>,
    flow: Arc<Flow>,
    wake: Wake,
}

impl Queue {
    /// The body took `bytes` of queued frames: if a producer was waiting for room, wake the
    /// driver.
    pub fn drained(&self, bytes: usize) {
        let left = self.flow.queued.fetch_sub(bytes, Ordering::Relaxed) - bytes;
        self.wrote();
        if self.flow.blocked.load(Ordering::Relaxed)
            && self.rx.len() <= WRITER_QUEUE / 2
            && left <= WRITER_QUEUE_BYTES / 2
            && self.flow.blocked.swap(false, Ordering::AcqRel)
        {
            self.wake.wake();
        }
    }

    /// The body handed a chunk to the socket (a replay chunk, or queued frames).
    pub fn wrote(&self) {
        self.flow.taken.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
pub struct Writers {
    open: HashMap<ConnectionId, Writer>,
}

impl Writers {
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Open SSE connections per stream, for the views.
    pub fn connections_of(&self, session: SessionId, stream: StreamId) -> usize {
        self.of(session, stream).count()
    }

    fn of(&self, session: SessionId, stream: StreamId) -> impl Iterator<Item = ConnectionId> + '_ {
        self.open
            .iter()
            .filter(move |(_, w)| w.session == session && w.stream == stream)
            .map(|(c, _)| *c)
    }

    /// A new connection for `stream` at lab time `now`, on the TCP connection `handle` closes;
    /// returns the queue its body drains.
    pub(super) fn register(
        &mut self,
        connection: ConnectionId,
        session: SessionId,
        stream: StreamId,
        wake: Wake,
        handle: Option<Handle>,
        now: LabTime,
    ) -> Queue {
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let flow = Arc::new(Flow::default());
        self.open.insert(
            connection,
            Writer {
                session,
                stream,
                tx,
                flow: flow.clone(),
                handle,
                sent: 0,
                quiet: (0, now),
                progress: 0,
                stalled_from: None,
            },
        );
        Queue { rx, flow, wake }
    }

    /// A `: keep-alive` comment on every connection that has queued nothing for `every` ms.
    pub(super) fn keep_alive(&mut self, now: LabTime, every: u64) {
        let frame = Bytes::from_static(KEEPALIVE_FRAME);
        for writer in self.open.values_mut() {
            if writer.sent != writer.quiet.0 {
                writer.quiet = (writer.sent, now);
            } else if now.since(writer.quiet.1) >= every {
                // A full queue needs no keep-alive: the write deadline is already watching it.
                let _ = writer.send(frame.clone());
                writer.quiet = (writer.sent, now);
            }
        }
    }

    /// Removes and returns every connection that has had frames queued while neither its body
    /// nor its socket took anything for `deadline` ms of lab time (and [`STALL_REAL_MIN`] of
    /// real time).
    pub(super) fn cut_stalled(&mut self, now: LabTime, deadline: u64) -> Vec<Stalled> {
        let mut stalled = Vec::new();
        let real_now = Instant::now();
        for (connection, writer) in &mut self.open {
            // Progress is what the body handed on plus what the socket took: a slow reader
            // whose socket takes a few bytes at a time is alive, though a whole chunk may sit
            // in hyper's buffer for longer than the deadline.
            let taken = writer.flow.taken.load(Ordering::Relaxed)
                + writer.handle.as_ref().map_or(0, |h| h.written());
            let waiting = writer.flow.queued.load(Ordering::Relaxed) > 0;
            if !waiting || taken != writer.progress {
                writer.progress = taken;
                writer.stalled_from = None;
                continue;
            }
            match writer.stalled_from {
                None => writer.stalled_from = Some((now, real_now)),
                Some((lab, real))
                    if now.since(lab) >= deadline
                        && real_now.duration_since(real) >= STALL_REAL_MIN =>
                {
                    stalled.push(*connection);
                }
                Some(_) => {}
            }
        }
        stalled
            .into_iter()
            .filter_map(|connection| {
                let writer = self.open.remove(&connection)?;
                Some(Stalled {
                    session: writer.session,
                    stream: writer.stream,
                    connection,
                    handle: writer.handle,
                    since: writer.stalled_from.map_or(now, |(lab, _)| lab),
                })
            })
            .collect()
    }

    /// The body of `connection` ended (its guard tells us).
    pub(super) fn forget(&mut self, connection: ConnectionId) {
        self.open.remove(&connection);
    }

    /// Whether every connection of `stream` has room for `frames` more frames. When one has
    /// not, it is marked so its body wakes the driver once it has drained.
    pub(super) fn has_room(&self, session: SessionId, stream: StreamId, frames: usize) -> bool {
        let mut room = true;
        for connection in self.of(session, stream) {
            let writer = &self.open[&connection];
            if writer.tx.capacity() < frames
                || writer.flow.queued.load(Ordering::Relaxed) >= WRITER_QUEUE_BYTES
            {
                writer.flow.blocked.store(true, Ordering::Release);
                room = false;
            }
        }
        room
    }

    /// Writes a frame to every connection open on the stream (one under fenced; under naive an
    /// un-detached old connection keeps receiving too).
    pub(super) fn send_to_stream(&mut self, session: SessionId, stream: StreamId, frame: &Bytes) {
        let mut cut = Vec::new();
        for (connection, writer) in &mut self.open {
            if writer.session == session && writer.stream == stream && !writer.send(frame.clone()) {
                // Too slow or gone: cut it off; the client resumes from its cursor.
                cut.push(*connection);
            }
        }
        for connection in cut {
            if let Some(writer) = self.open.remove(&connection) {
                tracing::info!(
                    session = %session.short(),
                    %stream,
                    connection = writer.handle.as_ref().map(|h| h.id),
                    queued_bytes = writer.flow.queued.load(Ordering::Relaxed),
                    "stream response ended: its writer queue is full (the client reads slower than events come); it resumes from its cursor"
                );
            }
        }
    }

    /// Ends a connection: a last `retry:` so the client knows when to come back, then EOF.
    pub(super) fn close(&mut self, connection: ConnectionId) {
        if let Some(mut writer) = self.open.remove(&connection) {
            let _ = writer.send(sse::retry_frame(RETRY_HINT_MS));
        }
    }

    /// Ends every connection of a stream the server let go of (fenced, expired), with `retry:`.
    pub(super) fn close_stream(&mut self, session: SessionId, stream: StreamId) {
        let doomed: Vec<_> = self.of(session, stream).collect();
        for connection in doomed {
            self.close(connection);
        }
    }

    /// Ends every connection of a stream that is complete (a tool call's result was written):
    /// plain EOF, there is nothing to come back for.
    pub(super) fn finish_stream(&mut self, session: SessionId, stream: StreamId) {
        self.open
            .retain(|_, w| !(w.session == session && w.stream == stream));
    }

    /// Ends every connection (the server is stopping), each with `retry:` and a clean end.
    pub(super) fn close_all(&mut self) {
        self.close_where(|_| true);
    }

    pub(super) fn close_session(&mut self, session: SessionId) {
        self.close_where(|w| w.session == session);
    }

    /// Ends every connection whose writer matches, each with `retry:`.
    fn close_where(&mut self, doomed: impl Fn(&Writer) -> bool) {
        let doomed: Vec<_> = self
            .open
            .iter()
            .filter(|(_, w)| doomed(w))
            .map(|(c, _)| *c)
            .collect();
        for connection in doomed {
            self.close(connection);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::{SplitMix64, StreamId};

    /// A queue is bounded in bytes, not only in frames: big frames stop the producer long
    /// before 2,048 of them, and a live frame past the cut bound cuts the connection off.
    #[test]
    fn writer_queues_are_bounded_in_bytes() {
        let mut writers = Writers::default();
        let session = SessionId::generate(&mut SplitMix64::new(1));
        let stream = StreamId(1);
        let connection = ConnectionId(1);
        let _queue = writers.register(
            connection,
            session,
            stream,
            Wake::default(),
            None,
            LabTime::ZERO,
        );
        let frame = Bytes::from(vec![b'x'; 4 * 1024]);
        let mut sent = 0;
        while writers.has_room(session, stream, 1) {
            writers.send_to_stream(session, stream, &frame);
            sent += 1;
            assert!(sent <= WRITER_QUEUE, "no byte bound");
        }
        assert_eq!(
            sent,
            WRITER_QUEUE_BYTES / frame.len(),
            "stops at the byte bound"
        );
        // Producers that ignore `has_room` (a live emit) are cut off past the cut bound.
        while writers.connections_of(session, stream) > 0 {
            writers.send_to_stream(session, stream, &frame);
            sent += 1;
            assert!(sent <= WRITER_QUEUE_CUT_BYTES / frame.len() + 1);
        }
    }
}
