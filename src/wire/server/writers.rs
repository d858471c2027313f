//! The open SSE connections, by connection id: where the server's writes go.
//!
//! Each connection has a bounded frame queue drained by its response body. A producer (a tool
//! call, the background emitter) that finds a queue full waits for it instead of growing it: the
//! stream then goes as fast as the socket takes it. The body wakes the driver once it has made
//! room. A frame that still does not fit (a live emit onto a reader that stopped) cuts the
//! connection off; the client resumes from its cursor.

use super::driver::Wake;
use crate::wire::sse;
use bytes::Bytes;
use forkscope_core::{ConnectionId, SessionId, StreamId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// Frames queued for one SSE connection. Producers wait when it is full.
pub const WRITER_QUEUE: usize = 2_048;
/// The `retry:` hint sent on priming events and before the server closes a stream.
pub const RETRY_HINT_MS: u64 = 250;

/// One open SSE connection.
#[derive(Debug)]
struct Writer {
    session: SessionId,
    stream: StreamId,
    tx: mpsc::Sender<Bytes>,
    /// Set by a producer that found the queue full; the body clears it and wakes the driver.
    blocked: Arc<AtomicBool>,
}

/// The receiving end a response body drains.
#[derive(Debug)]
pub(super) struct Queue {
    pub rx: mpsc::Receiver<Bytes>,
    blocked: Arc<AtomicBool>,
    wake: Wake,
}

impl Queue {
    /// The body took frames out: if a producer was waiting for room, wake the driver.
    pub fn drained(&self) {
        if self.blocked.load(Ordering::Relaxed)
            && self.rx.len() <= WRITER_QUEUE / 2
            && self.blocked.swap(false, Ordering::AcqRel)
        {
            self.wake.wake();
        }
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

    /// A new connection for `stream`; returns the queue its body drains.
    pub(super) fn register(
        &mut self,
        connection: ConnectionId,
        session: SessionId,
        stream: StreamId,
        wake: Wake,
    ) -> Queue {
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let blocked = Arc::new(AtomicBool::new(false));
        self.open.insert(
            connection,
            Writer {
                session,
                stream,
                tx,
                blocked: blocked.clone(),
            },
        );
        Queue { rx, blocked, wake }
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
            if writer.tx.capacity() < frames {
                writer.blocked.store(true, Ordering::Release);
                room = false;
            }
        }
        room
    }

    /// Writes a frame to every connection open on the stream (one under fenced; under naive an
    /// un-detached old connection keeps receiving too).
    pub(super) fn send_to_stream(&mut self, session: SessionId, stream: StreamId, frame: &Bytes) {
        let mut cut = Vec::new();
        for (connection, writer) in &self.open {
            if writer.session == session
                && writer.stream == stream
                && writer.tx.try_send(frame.clone()).is_err()
            {
                // Too slow or gone: cut it off; the client resumes from its cursor.
                cut.push(*connection);
            }
        }
        for connection in cut {
            self.open.remove(&connection);
        }
    }

    /// Ends a connection: a last `retry:` so the client knows when to come back, then EOF.
    pub(super) fn close(&mut self, connection: ConnectionId) {
        if let Some(writer) = self.open.remove(&connection) {
            let _ = writer.tx.try_send(sse::retry_frame(RETRY_HINT_MS));
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

    pub(super) fn close_session(&mut self, session: SessionId) {
        let doomed: Vec<_> = self
            .open
            .iter()
            .filter(|(_, w)| w.session == session)
            .map(|(c, _)| *c)
            .collect();
        for connection in doomed {
            self.close(connection);
        }
    }
}
