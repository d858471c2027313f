//! Why a task operation answers with no task: it is unknown, expired, or forgotten under what
//! its reader was told ([`Missing`], [`Seen`]), or a runner's write was refused
//! ([`WriteRefused`]).

use super::{Status, Task};
use crate::time::LabTime;

/// Why a task cannot be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    /// It existed, and was deleted past its TTL at `at`.
    #[error("the task expired")]
    Expired { at: LabTime },
    #[error("no such task")]
    Unknown,
    /// The store holds less of the task than its reader was already told (`seen`): it was
    /// rolled back under the read, which ended the task failed
    /// ([`EndedBy::RolledBack`](super::EndedBy::RolledBack)). Answered as a store failure, not
    /// as an unknown task.
    #[error(
        "the store was rolled back under this task: it holds {holds} steps{}, though {} were read{}; it ends failed, and none runs again",
        if .seen.ended { " and no end" } else { "" }, .seen.done,
        if .seen.ended { " and its end" } else { "" }
    )]
    Forgotten { holds: u64, seen: Seen },
}

impl Missing {
    /// `data.reason` on the error that says so: for an unknown or expired task the code stays
    /// the spec's −32602 ([EXT]:793-830).
    pub fn reason(self) -> &'static str {
        match self {
            Missing::Expired { .. } => "expired",
            Missing::Unknown => "unknown",
            Missing::Forgotten { .. } => "store_rolled_back",
        }
    }
}

/// What a reader was told of a task before this read: the steps it read done, and whether it
/// read the task's end (forkscope's client says so with each `tasks/get`). The task's cursor,
/// as `Last-Event-ID` is a stream's: a store holding less forgot what it told — restored from
/// an older snapshot after the read — and a read under it adopting the task would run steps
/// the client saw applied, or end it a second time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub done: u64,
    pub ended: bool,
}

impl Seen {
    /// `task` as stored holds less than this reader was told: it works, at fewer steps than
    /// were read, or though its end was read. An ended task is answered as it is (its end says
    /// itself what happened, the rollback's own typed failure included).
    pub fn forgotten_by(self, task: &Task) -> bool {
        !task.status.is_terminal() && (task.done < self.done || self.ended)
    }

    /// Whether the end a read that found the task forgotten writes (failed, rolled back) is an
    /// end the checker has not heard: a reader told an end already had one recorded, which the
    /// store forgot; the seal stands in for it, and is not a second end.
    pub fn seal_is_news(self) -> bool {
        !self.ended
    }
}

/// Why a runner's write was refused: it must stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefused {
    #[error("epoch {epoch} is stale: the task is held at epoch {held}")]
    Stale { epoch: u64, held: u64 },
    #[error("the task is already {}", .0.name())]
    Terminal(Status),
    /// The store holds fewer steps than the runner's own writes left in it: it was restored
    /// from an older state (a snapshot, a truncated log, a lagging replica promoted). Running
    /// on would run the forgotten steps again; the runner ends the task, typed.
    #[error(
        "the store holds {holds} steps of the task, though this runner wrote {wrote}: it was rolled back"
    )]
    RolledBack { holds: u64, wrote: u64 },
    #[error(transparent)]
    Missing(#[from] Missing),
}
