//! `notifications/tasks` on `subscriptions/listen` ([EXT], "Task Status Notifications";
//! S/basic/patterns/subscriptions.mdx): which task ids a listen is acknowledged for, and which
//! reads of them are sent.
//!
//! A listen stream has no ids and no replay: a client whose stream broke and who listens again
//! has lost whatever was sent in the gap (subscriptions.mdx, "Graceful Closure": a close without
//! the result is an unexpected disconnect, and the client MAY listen again; the Python SDK's
//! own docs say the gap's notifications are lost). A task that ended in the gap is the hazard: a client that waits for the end on its
//! listen waits for ever, never told. The spec allows a server to send only what changes after
//! the acknowledgement ([`TaskListen::ChangesOnly`], naive); the fence sends each acknowledged
//! task's state as it is now first ([`TaskListen::CurrentFirst`]), identical to a `tasks/get`
//! then, so a re-listen tells the client what it missed.
//!
//! A subscription for tasks alone ends once nothing more can be sent on it — every task it
//! watches has ended and that end was sent, or is gone — with the graceful completion result,
//! so a slot is not held for a stream that will stay silent.

use super::{Status, Task};
use crate::ids::TaskId;
use crate::time::LabTime;

/// Task ids one listen may name: each is read while the stream is open.
pub const MAX_LISTENED_TASKS: usize = 32;
/// "Missing required client capability" ([EXT], a listen for tasks without the extension).
pub const MISSING_CAPABILITY: i64 = -32021;

/// What a policy's server does with the `taskIds` of a listen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskListen {
    /// Each acknowledged task's current state first, then each change (the fence).
    CurrentFirst,
    /// Only what changes after the acknowledgement: a task that ended in a gap is never told.
    ChangesOnly,
    /// The filter has no `taskIds`: nothing is acknowledged for tasks.
    NoTaskIds,
    /// No `subscriptions/listen` at all: method not found.
    NotServed,
}

/// What a `subscriptions/listen` asked of tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenAsk<'a> {
    /// `params.notifications` is an object, as the method requires.
    pub has_filter: bool,
    /// `notifications.taskIds`: `None` when absent, `Some(Err)` when it is not a list of strings.
    pub task_ids: Option<Result<Vec<&'a str>, ()>>,
    /// The request's capabilities declare the tasks extension.
    pub declares_tasks: bool,
}

/// Why a listen is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListenRefused {
    #[error("Method not found: subscriptions/listen")]
    NotServed,
    #[error("subscriptions/listen needs params.notifications, an object naming what to send")]
    NoFilter,
    #[error("Missing required client capability")]
    MissingCapability,
    #[error("notifications.taskIds must be a list of strings")]
    NotAList,
    #[error("a listen may name at most {max} task ids; this one named {asked}")]
    TooMany { asked: usize, max: usize },
}

impl ListenRefused {
    /// The JSON-RPC error code: the extension's −32021, else invalid params.
    pub fn code(&self) -> i64 {
        match self {
            ListenRefused::NotServed => -32601,
            ListenRefused::MissingCapability => MISSING_CAPABILITY,
            ListenRefused::NoFilter | ListenRefused::NotAList | ListenRefused::TooMany { .. } => {
                -32602
            }
        }
    }
}

/// The task ids worth reading for the acknowledgement: those asked for that are task ids at
/// all, once each, in the order asked. The caller acknowledges those its store knows.
pub fn candidates(ask: &ListenAsk<'_>, listen: TaskListen) -> Result<Vec<TaskId>, ListenRefused> {
    if listen == TaskListen::NotServed {
        return Err(ListenRefused::NotServed);
    }
    if !ask.has_filter {
        return Err(ListenRefused::NoFilter);
    }
    let Some(asked) = &ask.task_ids else {
        return Ok(Vec::new());
    };
    let asked = asked.as_ref().map_err(|()| ListenRefused::NotAList)?;
    if !ask.declares_tasks {
        return Err(ListenRefused::MissingCapability);
    }
    if asked.len() > MAX_LISTENED_TASKS {
        return Err(ListenRefused::TooMany {
            asked: asked.len(),
            max: MAX_LISTENED_TASKS,
        });
    }
    if listen == TaskListen::NoTaskIds {
        return Ok(Vec::new());
    }
    let mut ids: Vec<TaskId> = Vec::with_capacity(asked.len());
    for id in asked.iter().filter_map(|s| TaskId::parse(s)) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The `taskIds` the acknowledgement names (`None`: the field is left out): those `known` —
/// the candidates the store found — when the listen asked for task ids and the policy sends
/// `notifications/tasks` at all.
pub fn acknowledged(asked: bool, listen: TaskListen, known: &[Task]) -> Option<Vec<TaskId>> {
    let sends = matches!(listen, TaskListen::CurrentFirst | TaskListen::ChangesOnly);
    (asked && sends).then(|| known.iter().map(|t| t.id).collect())
}

/// What a read shows of a task: a change is a new fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    status: Status,
    done: u64,
    updated_at: LabTime,
}

impl Seen {
    fn of(task: &Task) -> Seen {
        Seen {
            status: task.status,
            done: task.done,
            updated_at: task.updated_at,
        }
    }
}

#[derive(Clone, Debug)]
struct Watched {
    id: TaskId,
    /// What the client was last sent (or, under `ChangesOnly`, what the acknowledgement read).
    sent: Option<Seen>,
    /// Nothing more will be sent for it: its end was sent, or it is gone.
    over: bool,
}

/// One open listen's acknowledged tasks, deciding which reads are sent.
#[derive(Clone, Debug)]
pub struct Watch {
    watched: Vec<Watched>,
}

impl Watch {
    /// `acknowledged`: each task the acknowledgement named, as read for it.
    pub fn new<'a>(listen: TaskListen, acknowledged: impl IntoIterator<Item = &'a Task>) -> Watch {
        let watched = acknowledged
            .into_iter()
            .map(|task| {
                let terminal = task.status.is_terminal();
                match listen {
                    TaskListen::CurrentFirst => Watched {
                        id: task.id,
                        sent: None,
                        over: false,
                    },
                    // What the acknowledgement read counts as known: an end already reached
                    // is never sent.
                    TaskListen::ChangesOnly | TaskListen::NoTaskIds | TaskListen::NotServed => {
                        Watched {
                            id: task.id,
                            sent: Some(Seen::of(task)),
                            over: terminal,
                        }
                    }
                }
            })
            .collect();
        Watch { watched }
    }

    /// The tasks still to read.
    pub fn pending(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.watched.iter().filter(|w| !w.over).map(|w| w.id)
    }

    /// A read of `id`: whether it is sent (`true`) — a state the client was not sent yet.
    /// `None`: the task is gone (expired past its TTL, deleted): nothing more is sent for it.
    pub fn read(&mut self, id: TaskId, task: Option<&Task>) -> bool {
        let Some(watched) = self.watched.iter_mut().find(|w| w.id == id && !w.over) else {
            return false;
        };
        let Some(task) = task else {
            watched.over = true;
            return false;
        };
        let seen = Seen::of(task);
        if watched.sent == Some(seen) {
            return false;
        }
        watched.sent = Some(seen);
        watched.over = task.status.is_terminal();
        true
    }

    /// Whether nothing more can be sent: the subscription may end.
    pub fn over(&self) -> bool {
        self.watched.iter().all(|w| w.over)
    }
}
