//! The words the server, the client, the resume policies and the history share: what kind a
//! stream is, why it was orphaned, how a resume proved identity, why one was refused, what a
//! payload's key names.
//!
//! They sit below every module that speaks them, so the history can record what the server did
//! without importing the server, and the client can read a rejection without importing the
//! policies that decide it.

mod log_level;
mod payload_key;
mod reject_reason;

pub use log_level::{BACKGROUND_SEVERITY, LogLevel};
pub use payload_key::{Effect, PayloadKey, PayloadKeyError};
pub use reject_reason::{ClientAction, RejectReason};

use serde::{Deserialize, Serialize};

/// Which lineage a stream belongs to. The single-live-stream invariant is about the session's
/// server-initiated (standalone GET) stream; a request stream carries one POST's response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    Standalone,
    Request,
}

/// Why the server decided a stream's client is gone, starting its grace window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanCause {
    /// Its connection ended: the server saw EOF or a reset.
    ConnectionClosed,
    /// Its connection stopped taking bytes: nothing written to it (keep-alives included) was
    /// acknowledged for the write deadline. How a NAT drop or a hung client is noticed.
    WritesStalled,
    /// Naive policy: a new stream took its place while it was live.
    Replaced,
}

impl OrphanCause {
    /// Why, in a few words, for the views.
    pub fn describe(self) -> &'static str {
        match self {
            OrphanCause::ConnectionClosed => "closed",
            OrphanCause::WritesStalled => "stalled",
            OrphanCause::Replaced => "replaced",
        }
    }
}

/// How a resumed stream's identity was established: what a `↺` in the lanes and its card say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityProof {
    /// The token header named the stream, and the cursor lay on it.
    TokenHeader,
    /// The token a keyed `Last-Event-ID` carries named the stream: no header needed, so a
    /// stripped header costs nothing.
    EventIdKey,
    /// The header and the id's key both named the stream, and agreed.
    HeaderAndEventIdKey,
    /// Naive: the token picked the stream; the cursor was trusted without a check.
    Unchecked,
}

impl IdentityProof {
    /// One clause for a card: how the server knew which stream this was.
    pub fn describe(self) -> &'static str {
        match self {
            IdentityProof::TokenHeader => {
                "identity proven by the token header, the cursor checked against its stream"
            }
            IdentityProof::EventIdKey => {
                "identity proven by the key inside Last-Event-ID: the token header was not needed"
            }
            IdentityProof::HeaderAndEventIdKey => {
                "identity proven twice: the token header and the key inside Last-Event-ID agree"
            }
            IdentityProof::Unchecked => {
                "identity not proven: naive took the token's stream and trusted the cursor"
            }
        }
    }
}

/// A task's status, as the tasks extension names it ([EXT] "Task Status"; `input_required` is
/// not used here). Its spelling is derived once, for the wire, the store and the probe alike.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, strum::IntoStaticStr, strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TaskStatus {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn is_terminal(self) -> bool {
        self != TaskStatus::Working
    }

    /// A status as the extension spells it; `None` for any other word (`input_required` is
    /// not one a task here takes).
    pub fn parse(word: &str) -> Option<TaskStatus> {
        word.parse().ok()
    }
}
