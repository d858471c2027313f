//! Every way a resume can be refused, each with a sentence, a machine-readable reason, an HTTP
//! status chosen on purpose, and what the client should do next.
//!
//! Status codes avoid 404: to stock MCP clients 404 means "the session is gone, re-initialize",
//! which is wrong for a bad cursor on a live session.

use crate::ids::StreamId;
use crate::time::LabTime;
use crate::vocabulary::{ClientAction, RejectReason};
use thiserror::Error;

/// A typed resume rejection: decision (b) of the seed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ResumeRejected {
    #[error(
        "the reconnect sent Last-Event-ID {cursor} without a resumption token, so stream identity \
         cannot be proven; start a new session"
    )]
    MissingToken { cursor: String },
    #[error(
        "the reconnect sent a resumption token without Last-Event-ID, so gap-freedom cannot be \
         proven; start a new session"
    )]
    MissingLastEventId,
    #[error(
        "Last-Event-ID {shown} is not an event id this server issues (s<stream>-<seq>[.<key>], at \
         most {max} bytes)",
        max = crate::ids::MAX_CURSOR_LEN
    )]
    MalformedCursor { shown: String },
    #[error(
        "the resumption token, or the stream key in Last-Event-ID, names no stream this server \
         knows"
    )]
    UnknownToken,
    #[error("the resumption token belongs to another session")]
    TokenOfAnotherSession,
    #[error("Last-Event-ID {cursor} does not belong to stream {stream}, which the token names")]
    CursorNotOnStream { cursor: String, stream: StreamId },
    #[error("stream {stream} was fenced at {at}; resuming it would fork the session")]
    StreamFenced { stream: StreamId, at: LabTime },
    #[error("stream {stream} ended at {at}; there is nothing left to resume")]
    StreamClosed { stream: StreamId, at: LabTime },
    #[error(
        "Last-Event-ID {cursor} is ahead of stream {stream}'s high-water mark {high_water}: the \
         server never sent it"
    )]
    CursorAhead {
        stream: StreamId,
        cursor: u64,
        high_water: u64,
    },
    /// A replica's: the cursor carries the stream's key, so it was handed out, yet the shared
    /// store holds fewer events — the store was restored from an older state.
    #[error(
        "Last-Event-ID {cursor} is past what the shared store holds of stream {stream} (high-water \
         mark {high_water}), though the stream handed it out: the store was rolled back and forgot \
         those events"
    )]
    StoreRolledBack {
        stream: StreamId,
        cursor: u64,
        high_water: u64,
    },
    /// A replica's: the shared store forgot events after the cursor (it was rolled back, and
    /// the writer that found it skipped their ids), so the stream cannot be delivered whole.
    #[error(
        "the shared store forgot events {first}–{last} of stream {stream}, after Last-Event-ID \
         {cursor} (it was rolled back): they cannot be delivered"
    )]
    StoreForgot {
        stream: StreamId,
        cursor: u64,
        first: u64,
        last: u64,
    },
    #[error(
        "events after {cursor} on stream {stream} were evicted from the replay buffer (oldest \
         kept: {oldest_kept}), so gap-freedom cannot be proven"
    )]
    CursorEvicted {
        stream: StreamId,
        cursor: u64,
        oldest_kept: u64,
    },
    #[error(
        "stream {orphan} is still live — attached, or inside its grace window (up to \
         {remaining_ms} ms more); accepting now would leave two live streams"
    )]
    OrphanStillLive { orphan: StreamId, remaining_ms: u64 },
    #[error("the session already holds {max} streams and none has ended")]
    TooManyStreams { max: usize },
}

impl ResumeRejected {
    pub fn reason(&self) -> RejectReason {
        match self {
            ResumeRejected::MissingToken { .. } => RejectReason::MissingToken,
            ResumeRejected::MissingLastEventId => RejectReason::MissingLastEventId,
            ResumeRejected::MalformedCursor { .. } => RejectReason::MalformedCursor,
            ResumeRejected::UnknownToken => RejectReason::UnknownToken,
            ResumeRejected::TokenOfAnotherSession => RejectReason::TokenOfAnotherSession,
            ResumeRejected::CursorNotOnStream { .. } => RejectReason::CursorNotOnStream,
            ResumeRejected::StreamFenced { .. } => RejectReason::StreamFenced,
            ResumeRejected::StreamClosed { .. } => RejectReason::StreamClosed,
            ResumeRejected::CursorAhead { .. } => RejectReason::CursorAhead,
            ResumeRejected::StoreRolledBack { .. } | ResumeRejected::StoreForgot { .. } => {
                RejectReason::StoreRolledBack
            }
            ResumeRejected::CursorEvicted { .. } => RejectReason::CursorEvicted,
            ResumeRejected::OrphanStillLive { .. } => RejectReason::OrphanStillLive,
            ResumeRejected::TooManyStreams { .. } => RejectReason::TooManyStreams,
        }
    }

    pub fn http_status(&self) -> u16 {
        self.reason().http_status()
    }

    pub fn client_action(&self) -> ClientAction {
        self.reason().client_action()
    }

    /// Seconds a client should wait before retrying, for a `Retry-After` header.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ResumeRejected::OrphanStillLive { remaining_ms, .. } => {
                Some(remaining_ms.div_ceil(1000))
            }
            _ => None,
        }
    }
}

/// A client-supplied string made safe to echo in a sentence: printable, at most 24 characters.
pub(crate) fn shown(raw: &str) -> String {
    const MAX: usize = 24;
    let mut out: String = raw
        .chars()
        .take(MAX)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if raw.chars().count() > MAX {
        out.push('…');
    }
    if out.is_empty() {
        "\"\"".to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_and_truncates() {
        assert_eq!(shown("s1-4"), "s1-4");
        assert_eq!(shown("a\nb"), "a?b");
        assert_eq!(shown(&"x".repeat(100)), format!("{}…", "x".repeat(24)));
        assert_eq!(shown(""), "\"\"");
    }

    #[test]
    fn only_a_live_orphan_asks_for_a_retry() {
        let orphan = ResumeRejected::OrphanStillLive {
            orphan: StreamId(1),
            remaining_ms: 1_200,
        };
        assert_eq!(orphan.client_action(), ClientAction::RetryLater);
        assert_eq!(orphan.retry_after_secs(), Some(2));
        assert_eq!(
            ResumeRejected::UnknownToken.client_action(),
            ClientAction::StartNewSession
        );
    }
}
