//! What really happened, as the server and client report it: the checker's evidence.

use crate::ids::{ConnectionId, EventId, IdScheme, SessionId, StreamId};
use crate::resume::RejectReason;
use crate::server::{OrphanCause, StreamKind};
use crate::time::LabTime;
use serde::Serialize;
use std::sync::Arc;

/// One fact, stamped with the lab time it happened at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub at: LabTime,
    pub record: Record,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Record {
    // Server side.
    SessionOpened {
        session: SessionId,
    },
    SessionClosed {
        session: SessionId,
    },
    StreamOpened {
        session: SessionId,
        stream: StreamId,
        stream_kind: StreamKind,
        ids: IdScheme,
        flagged_new: bool,
    },
    /// The server attached a stream to a connection: the client is now bound to it.
    Attached {
        session: SessionId,
        stream: StreamId,
        connection: ConnectionId,
    },
    /// The server judged the stream's client gone: its grace window starts, for `cause`.
    Orphaned {
        session: SessionId,
        stream: StreamId,
        grace_deadline: LabTime,
        cause: OrphanCause,
    },
    Fenced {
        session: SessionId,
        stream: StreamId,
    },
    StreamClosed {
        session: SessionId,
        stream: StreamId,
    },
    /// An ended stream the session no longer keeps (its slot was needed): nothing about it
    /// can happen any more.
    StreamForgotten {
        session: SessionId,
        stream: StreamId,
    },
    /// An event landed on a stream. `copied` marks the naive backlog copied into a new stream:
    /// old content under new ids, not a new side effect of the session.
    Emitted {
        session: SessionId,
        stream: StreamId,
        seq: u64,
        key: Arc<str>,
        copied: bool,
    },
    /// A late emit onto a fenced stream, refused.
    LateEmitRefused {
        session: SessionId,
        stream: StreamId,
        key: Arc<str>,
    },
    ResumeAccepted {
        session: SessionId,
        stream: StreamId,
        after: u64,
        replay_len: usize,
    },
    ResumeRejected {
        session: SessionId,
        reason: RejectReason,
    },
    // Client side. Stream and sequence are ground truth (what the server sent), not what the
    // client believed.
    Delivered {
        session: SessionId,
        event: EventId,
        key: Arc<str>,
        applied: bool,
    },
    CursorMoved {
        session: SessionId,
        from: Option<EventId>,
        to: EventId,
        reset: bool,
    },
    ClientNewSession,
    ClientGaveUp,
}
