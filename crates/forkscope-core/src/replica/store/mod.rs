//! The shared store's rules, once: what each store operation (open, resume, adopt, append,
//! snapshot, cancel, expire) answers and changes, as a sans-IO machine ([`StoreMachine`]) whose
//! clock is a parameter.
//!
//! The in-memory store is this machine behind a lock. The Redis store's Lua scripts implement
//! the same operations, one script apiece, and a differential test (`tests/store_differential.rs`)
//! runs the same random operations against both and compares every answer, conflicts included.
//! A rule changed here and not there (or there and not here) fails it.

mod machine;

pub use machine::{RecordLook, SessionImage, StoreMachine};

use super::StaleEpoch;
use crate::ids::StreamId;
use crate::vocabulary::StreamKind;

/// Events a stream's log keeps by default (whole committed batches: up to one batch more): a
/// call's 10,000 steps and its result fit.
pub const LOG_MAXLEN: u64 = 10_016;

/// Sessions one store holds at once by default, shared by every replica on it; past it
/// `initialize` is refused as the store being full (503 `too_many_sessions`).
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// Most streams one session may hold whose events are still kept; past it a new stream is
/// refused as the store being full. (Redis bounds the same by expiring each stream's keys, so
/// the differential test stays below it.)
pub const MAX_KEPT_STREAMS: usize = 1_024;

/// A store's settings, the same for both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Sessions the store holds at once, whichever replica opened them; a session counts until
    /// it ends or goes idle past `session_idle_ms`.
    pub max_sessions: usize,
    /// A session (and a stream record) with no request for this long is gone.
    pub session_idle_ms: u64,
    /// A finished call's stream stays resumable this long from when it finished.
    pub finished_ms: u64,
    pub lease_ms: u64,
    /// Events a stream's log keeps, whole batches: up to one batch more ([`LOG_MAXLEN`]).
    pub log_events: u64,
    /// A task stays readable this long past its TTL, then is deleted (a tombstone stays).
    pub task_retain_ms: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle_ms: 600_000,
            finished_ms: 15_000,
            lease_ms: super::DEFAULT_LEASE_MS,
            log_events: LOG_MAXLEN,
            task_retain_ms: crate::tasks::RETAIN_MS,
        }
    }
}

/// What a tool call's stream is opened with, so any replica can continue it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallSpec {
    pub steps: u64,
    pub delay_ms: u64,
    /// The JSON-RPC request id, as JSON text: the result answers it.
    pub request_id: String,
    /// The progress token, as JSON text (`None`: the call reports no progress).
    pub progress_token: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewStream {
    pub kind: StreamKind,
    pub key: u64,
    pub owner: String,
    pub call: Option<CallSpec>,
    /// The session's standalone stream to fence in the same step, on the epoch it was read at.
    pub fence: Option<(StreamId, u64)>,
}

/// A stream's record and what only the wire needs to continue its call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub record: super::StreamRecord,
    pub call: Option<CallSpec>,
}

/// Events read from a stream's log, in order: `(seq, data)`.
pub type Events = Vec<(u64, String)>;

/// Who is writing, and on which fencing token.
#[derive(Clone, Copy, Debug)]
pub enum Writer<'a> {
    /// An emit on a standalone stream, by the replica holding its stream epoch. `background`
    /// is the session-wide number of the background event it carries, recorded with it so that
    /// the next holder numbers on from there.
    Epoch {
        epoch: u64,
        name: &'a str,
        background: Option<u64>,
        /// The high-water mark this writer's last write returned: a store below it forgot.
        floor: u64,
    },
    /// A tool call's step, by the replica holding its lease; `done` is the call's progress once
    /// the batch lands. The write renews the lease.
    Lease {
        epoch: u64,
        name: &'a str,
        done: Option<u64>,
        floor: Floor,
    },
    /// The naive replica: no epoch, as in the SDKs' stores.
    Unfenced {
        name: &'a str,
        background: Option<u64>,
    },
}

/// What a fenced writer knows its stream holds: the high-water mark its own last write returned
/// ([`super::forgot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    /// Refuse the write when the store holds less: it was rolled back.
    Check(u64),
    /// The store was rolled back: raise its mark to this first, so the write lands past every
    /// id already handed out and none is issued twice (a call's last message, saying so).
    SkipTo(u64),
}

/// Why a write did not land.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Stale(#[from] StaleEpoch),
    /// The stream finished or was fenced: nothing more lands on it.
    #[error("stream {0} takes no more events")]
    Closed(StreamId),
    /// The store holds fewer events than this writer already wrote: it was restored from an
    /// older state, and writing on would hand the same ids out again.
    #[error(
        "the store rolled back: stream {stream} holds {holds} events, but this writer had written up to {wrote}"
    )]
    RolledBack {
        stream: StreamId,
        holds: u64,
        wrote: u64,
    },
    /// A background event (a log message) below the level the session's client set: withheld
    /// by its choice, and the emitter goes on.
    #[error("the session's client set a log level above the background events'")]
    BelowLogLevel,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// The call is this replica's now, at `lease`, continuing after step `done`.
    Adopted {
        lease: u64,
        done: u64,
    },
    NotExpired {
        remaining_ms: u64,
    },
    /// Someone else took it, it finished, or its record is gone: read again.
    Lost,
}

/// What a resume committed ([`StoreMachine::resume`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The stream epoch it attached on (`None`: it was asked to take none, as naive).
    pub epoch: Option<u64>,
    /// Whether it took the stream's call over, when asked to.
    pub adoption: Option<Adoption>,
}

/// Why the store could not answer at all (rather than refuse a step).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreFault {
    /// The session is not in the store (never was, ended, expired, or the store restarted
    /// empty).
    #[error("no such session in the store")]
    SessionGone,
    #[error("the store is at capacity: {0}")]
    Full(String),
}

#[cfg(test)]
mod tests;
