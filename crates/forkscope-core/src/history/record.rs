//! What really happened, as the server and client report it: the checker's evidence.

use super::caused::Caused;
use crate::ids::{
    ByReplica, ConnectionId, EventId, IdScheme, ReplicaId, SessionId, StreamId, TaskId,
};
use crate::time::LabTime;
use crate::vocabulary::{IdentityProof, OrphanCause, RejectReason, StreamKind, TaskStatus};
use serde::Serialize;
use std::sync::Arc;

/// One fact, stamped with the lab time it happened at, and tagged with what the checker
/// concluded from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub at: LabTime,
    /// The replica that did it, and on which epoch, in a lab of several behind a balancer;
    /// `None` for one server and for the client's own facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<ByReplica>,
    pub record: Record,
    #[serde(skip_serializing_if = "Caused::is_empty")]
    pub caused: Caused,
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
        /// A request stream's call: the JSON-RPC id of the POST it answers (numeric ids only).
        /// How a client that gave the call up before hearing from it is matched to its stream.
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
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
    /// A replica committed id `seq` of the stream to the shared store, carrying `key`. What
    /// reaches a connection is [`Record::Emitted`]; this is what the store holds, so an id
    /// written twice is seen even when no one receives the second write (a rolled-back store).
    Written {
        session: SessionId,
        stream: StreamId,
        seq: u64,
        key: Arc<str>,
    },
    /// A late emit onto a fenced stream, refused.
    LateEmitRefused {
        session: SessionId,
        stream: StreamId,
        key: Arc<str>,
    },
    /// A write a replica made on an epoch that was no longer current, refused by the shared
    /// store: a late emit that the fence across replicas stopped. `epoch` is the writer's,
    /// `current` the store's, held by `holder`.
    StaleWriteRefused {
        session: SessionId,
        stream: StreamId,
        epoch: u64,
        current: u64,
        holder: Option<ReplicaId>,
    },
    /// A replica took over a tool call whose runner's lease expired, from step `done`.
    CallAdopted {
        session: SessionId,
        stream: StreamId,
        lease: u64,
        done: u64,
    },
    ResumeAccepted {
        session: SessionId,
        stream: StreamId,
        after: u64,
        replay_len: usize,
        /// How the server knew which stream it was.
        proof: IdentityProof,
        /// The connection the stream was still attached to (a half-open one, after a NAT drop),
        /// fenced by this resume: it gets nothing more.
        #[serde(skip_serializing_if = "Option::is_none")]
        fenced_connection: Option<ConnectionId>,
    },
    ResumeRejected {
        session: SessionId,
        reason: RejectReason,
    },
    /// An SDK policy answered a GET 200 with no stream behind it: no replay, no error. With
    /// `held_open` the client waits on it for good (a stock client takes it for a resume).
    AnsweredSilently {
        session: SessionId,
        held_open: bool,
    },
    /// An SDK policy answered a GET with a bare error status (409, 404, …) in place of a
    /// stream: not one of forkscope's typed refusals, but the client is refused all the same.
    AnsweredWithStatus {
        session: SessionId,
        status: u16,
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
    /// The client gave up a tool call: a refusal sent it away (`refused`), its retry budget ran
    /// out, or (`broken`) its POST failed before a response came, so there is no stream to
    /// resume. `call`: the call's stream, when an event of it ever arrived; `request`: the
    /// call's JSON-RPC id, which names it when none did.
    CallAbandoned {
        session: SessionId,
        call: Option<StreamId>,
        request: u64,
        refused: Option<RejectReason>,
        broken: bool,
    },
    /// The replica running the tool call on `call` died. `adoptable`: its lease in the store
    /// will expire and another replica can take the call over (fenced replicas); else no one
    /// will run the rest of it.
    RunnerStopped {
        session: SessionId,
        call: StreamId,
        adoptable: bool,
    },
    /// The client is in `session` from now on, and reports what it receives there: what the
    /// session emits is owed to it.
    ClientJoined {
        session: SessionId,
    },
    ClientGaveUp,
    /// The run is over and the lab was let quiesce: what is still owed can no longer arrive.
    /// `reconnecting`: the client was still trying to get its stream back (so it knows).
    RunEnded {
        reconnecting: bool,
    },
    // 2026-07-28: requests and tasks, with no session and no stream to resume. `op` is the
    // call the client meant: the idempotency key it named the call with, or its run's own name
    // when it named none (then a re-issue cannot be told from a new call).
    /// A plain call (no task) started running `op` on its request's response stream.
    CallStarted {
        op: Arc<str>,
        run: Run,
    },
    /// Step `step` of `of` of a run's work was applied (for a task: committed under `epoch`):
    /// one effect.
    StepApplied {
        run: Run,
        step: u64,
        of: u64,
        epoch: u64,
    },
    /// A plain call stopped because its response stream closed (the revision's cancel), after
    /// `done` of its `of` steps.
    CallCut {
        run: Run,
        done: u64,
        of: u64,
    },
    /// A run's runner stopped before its end and wrote nothing more (its replica died): it
    /// no longer runs its call, whoever takes it over.
    RunStopped {
        run: Run,
    },
    /// A task was made for `op` (`fresh`), or `op`'s key found the one made before.
    TaskCreated {
        op: Arc<str>,
        task: TaskId,
        fresh: bool,
    },
    /// The client named the task in a request: it knows the id.
    TaskNamed {
        task: TaskId,
    },
    /// A task became terminal: the write that made it so was taken.
    TaskSettled {
        task: TaskId,
        status: TaskStatus,
    },
    /// What a `tasks/get` answered.
    TaskRead {
        task: TaskId,
        status: TaskStatus,
    },
    /// A read of the task was answered with a typed error no retry cures (`reason`, its
    /// `data.reason`): the client knows its end will not come.
    TaskRefused {
        task: TaskId,
        reason: &'static str,
    },
}

/// One run of a call's work under 2026-07-28: a task (every runner of it, across adoptions), or
/// a plain call's request (its JSON-RPC id as sent).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Run {
    Task(TaskId),
    Request(Arc<str>),
}

impl Run {
    /// What a run stands for as a call when the client named none: itself, spelled whole (a
    /// task's full id, not the six digits a screen shows), so two runs never share it.
    pub fn op_name(&self) -> Arc<str> {
        match self {
            Run::Task(task) => format!("task {task}").into(),
            Run::Request(id) => format!("request {id}").into(),
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Run::Task(task) => write!(f, "task {}", task.short()),
            Run::Request(id) => write!(f, "request {id}"),
        }
    }
}

/// A side effect's key without its session prefix: `bg:3`.
fn short_key(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, rest)| rest)
}

impl Record {
    /// Whether this is something the server decided (or the client's move to a new session):
    /// what a narration of "what happened" tells, without every emit and delivery.
    pub fn is_decision(&self) -> bool {
        !matches!(
            self,
            Record::Emitted { .. }
                | Record::Written { .. }
                | Record::Delivered { .. }
                | Record::CursorMoved { .. }
                | Record::StreamForgotten { .. }
                | Record::ClientJoined { .. }
                | Record::StepApplied { .. }
                | Record::CallStarted { .. }
                | Record::TaskRead { .. }
                | Record::TaskNamed { .. }
        )
    }

    /// The fact in words, for narration (`server mints standalone stream s2, not flagged as
    /// new: …`); `None` for bookkeeping a reader does not need.
    pub fn describe(&self) -> Option<String> {
        let name = |s: &SessionId| format!("session {}", s.short());
        Some(match self {
            Record::SessionOpened { session } => format!("server opens {}", name(session)),
            Record::SessionClosed { session } => format!("server ends {}", name(session)),
            Record::StreamOpened {
                stream,
                flagged_new,
                stream_kind,
                ..
            } => format!(
                "server mints {} stream {stream}{}",
                match stream_kind {
                    StreamKind::Standalone => "standalone",
                    StreamKind::Request => "request",
                },
                if *flagged_new {
                    ", flagged as new"
                } else {
                    ", not flagged as new: the client will take it for a continuation"
                }
            ),
            Record::Attached { stream, .. } => {
                format!("server attaches {stream} to the connection")
            }
            Record::Orphaned {
                stream,
                grace_deadline,
                cause,
                ..
            } => format!(
                "server sees {stream}'s connection {}: grace window until {grace_deadline}",
                cause.describe()
            ),
            Record::Fenced { stream, .. } => {
                format!("server fences {stream}: nothing more may land on it")
            }
            Record::StreamClosed { stream, .. } => format!("server closes {stream}"),
            Record::StreamForgotten { .. } => return None,
            Record::Emitted {
                stream,
                seq,
                key,
                copied,
                ..
            } => {
                if *copied {
                    format!("{} copied into {stream} as #{seq}", short_key(key))
                } else {
                    format!("{} emitted onto {stream} as #{seq}", short_key(key))
                }
            }
            Record::Written {
                stream, seq, key, ..
            } => format!("store holds {} as {stream} #{seq}", short_key(key)),
            Record::LateEmitRefused { stream, key, .. } => {
                format!("late emit {} onto fenced {stream} refused", short_key(key))
            }
            Record::StaleWriteRefused {
                stream,
                epoch,
                current,
                holder,
                ..
            } => {
                let holder = holder.map_or(String::new(), |h| format!(", held by {h}"));
                format!(
                    "store refuses a late write onto {stream}: epoch {epoch} is stale \
                     (now {current}{holder})"
                )
            }
            Record::CallAdopted {
                stream,
                done,
                lease,
                ..
            } => format!(
                "call on {stream} adopted after step {done}: its lease is now epoch {lease}"
            ),
            Record::ResumeAccepted {
                stream,
                after,
                replay_len,
                proof,
                fenced_connection,
                ..
            } => format!(
                "server resumes {stream} after #{after}, replaying {replay_len}; {}{}",
                proof.describe(),
                fenced_connection
                    .map(|c| format!("; fenced {stream} (was on conn {})", c.0))
                    .unwrap_or_default()
            ),
            Record::ResumeRejected { reason, .. } => {
                format!("server refuses with {} {reason}", reason.http_status())
            }
            Record::Delivered {
                event,
                key,
                applied,
                ..
            } => {
                if *applied {
                    format!("client applies {} ({event})", short_key(key))
                } else {
                    format!("client skips {} ({event}): a replay it has", short_key(key))
                }
            }
            Record::CursorMoved { from, to, .. } => match from {
                Some(from) => format!("client cursor {from} → {to}"),
                None => format!("client cursor → {to}"),
            },
            Record::ClientNewSession => "client starts a new session".to_owned(),
            Record::ClientGaveUp => "client gives up: its retry budget is spent".to_owned(),
            Record::ClientJoined { .. } => return None,
            Record::RunnerStopped {
                call, adoptable, ..
            } => {
                if *adoptable {
                    format!(
                        "the call on {call} loses its runner: its lease will expire for another replica to adopt it"
                    )
                } else {
                    format!(
                        "the call on {call} loses its runner, and no replica will take it over (no lease)"
                    )
                }
            }
            Record::CallAbandoned {
                call,
                request,
                refused,
                broken,
                ..
            } => format!(
                "client gives up the tool call{}: {}",
                call.map_or_else(|| format!(" (request {request})"), |c| format!(" on {c}")),
                match refused {
                    Some(r) => format!("refused with {} {r}", r.http_status()),
                    None if *broken => {
                        "its request failed before any answer (nothing to resume)".to_owned()
                    }
                    None => "its retry budget is spent".to_owned(),
                }
            ),
            Record::RunEnded { reconnecting } => if *reconnecting {
                "the run ends with the client still reconnecting: what it is owed is judged"
            } else {
                "the run ends: what the client is still owed is judged"
            }
            .to_owned(),
            Record::AnsweredWithStatus { status, .. } => {
                format!("server answers {status} with no stream and no typed reason")
            }
            Record::CallStarted { op, run } => format!("{run} starts running {op}"),
            Record::StepApplied {
                run,
                step,
                of,
                epoch,
            } => format!("{run} applies step {step} of {of} (epoch {epoch})"),
            Record::CallCut { run, done, of } => {
                format!("{run}'s stream closes: the call is cancelled after {done} of {of} steps")
            }
            Record::TaskCreated { op, task, fresh } => {
                if *fresh {
                    format!("server creates task {} for {op}", task.short())
                } else {
                    format!(
                        "{op} names task {} made before: nothing new runs",
                        task.short()
                    )
                }
            }
            Record::TaskNamed { task } => format!("client names task {}", task.short()),
            Record::TaskRefused { task, reason } => {
                format!("a read of task {} is refused: {reason}", task.short())
            }
            Record::RunStopped { run } => format!("{run} loses its runner: it writes nothing more"),
            Record::TaskSettled { task, status } => {
                format!("task {} ends {}", task.short(), status.name())
            }
            Record::TaskRead { task, status } => {
                format!("tasks/get answers task {} {}", task.short(), status.name())
            }
            Record::AnsweredSilently { held_open, .. } => if *held_open {
                "server answers 200 with no stream, held open: the client waits on it"
            } else {
                "server answers 200 with no stream, ended at once"
            }
            .to_owned(),
        })
    }
}
