//! The anomalies the checker names, each explaining itself in one sentence.

use super::record::Run;
use crate::ids::{EventId, ReplicaId, SessionId, StreamId, TaskId};
use crate::time::LabTime;
use crate::vocabulary::{RejectReason, TaskStatus};
use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// What kind of anomaly, declared most telling first: a verdict leads with the first kind it
/// found (a fork explains the duplicates and drift after it). The snake_case names are the
/// ones users read and type (`--anomaly cursor_drift`, scenario expectations).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::EnumIter,
    strum::VariantNames,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AnomalyKind {
    Fork,
    Duplicate,
    ReusedId,
    Gap,
    NonMonotonicCursor,
    Lost,
    CallLost,
    /// 2026-07-28: one call run by two runners at once (two tasks for one key, or a runner
    /// past its epoch still writing). Leads the kinds below it, which it explains.
    TwoRunners,
    /// 2026-07-28: a step of one call applied twice, by a second run of it (a re-issue the
    /// server did not know for the same call).
    EffectTwice,
    TerminalTwice,
    StaleRead,
    /// 2026-07-28: a task whose id the client never learned, left running.
    OrphanTask,
    /// 2026-07-28: a call stopped halfway by the cancel a closed stream means.
    CutHalfway,
    /// 2026-07-28: a task the client asked for whose end never reached it, and nothing told
    /// it (its runners died, the store forgot it, it never finished).
    TaskLost,
    CursorDrift,
    /// Owed and never delivered, but the client was told: not a silent loss, not clean either.
    Undelivered,
}

impl AnomalyKind {
    /// The kind's name, as users read and type it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether it breaks the promise silently or unsafely: everything but an undelivered
    /// obligation the client was told of. What `check` stops at unless asked for a kind.
    pub fn is_violation(self) -> bool {
        self != AnomalyKind::Undelivered
    }

    /// Whether it is one of 2026-07-28's requests and tasks (the others are 2025-11-25's
    /// sessions and streams): which model of `check` can look for it.
    pub fn is_2026(self) -> bool {
        matches!(
            self,
            AnomalyKind::TwoRunners
                | AnomalyKind::EffectTwice
                | AnomalyKind::TerminalTwice
                | AnomalyKind::StaleRead
                | AnomalyKind::OrphanTask
                | AnomalyKind::CutHalfway
                | AnomalyKind::TaskLost
        )
    }
}

// Every kind is one bit of `AnomalyKinds`.
const _: () = assert!((AnomalyKind::Undelivered as u8) < 16);

/// A set of anomaly kinds, one bit each: what one lane mark stands for, small enough to copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AnomalyKinds(u16);

impl AnomalyKinds {
    pub const NONE: AnomalyKinds = AnomalyKinds(0);

    pub fn with(self, kind: AnomalyKind) -> AnomalyKinds {
        AnomalyKinds(self.0 | 1 << kind as u8)
    }

    pub fn contains(self, kind: AnomalyKind) -> bool {
        self.0 & 1 << kind as u8 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds in the set, most telling first.
    pub fn iter(self) -> impl Iterator<Item = AnomalyKind> {
        <AnomalyKind as strum::IntoEnumIterator>::iter().filter(move |k| self.contains(*k))
    }

    /// The most telling kind in the set: the one a mark is drawn as.
    pub fn lead(self) -> Option<AnomalyKind> {
        self.iter().next()
    }
}

impl FromIterator<AnomalyKind> for AnomalyKinds {
    fn from_iter<I: IntoIterator<Item = AnomalyKind>>(kinds: I) -> Self {
        kinds
            .into_iter()
            .fold(AnomalyKinds::NONE, AnomalyKinds::with)
    }
}

/// Where and when a side effect was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AppliedAt {
    pub event: EventId,
    pub at: LabTime,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Anomaly {
    /// Two live streams on one session, with an emit on the one the client is not bound to;
    /// or, across replicas, one stream sent from a replica other than the one the client is
    /// bound to it on (`across`).
    Fork {
        session: SessionId,
        orphan: StreamId,
        bound: StreamId,
        seq: u64,
        at: LabTime,
        #[serde(skip_serializing_if = "Option::is_none")]
        across: Option<Across>,
    },
    Duplicate {
        key: Arc<str>,
        first: AppliedAt,
        second: AppliedAt,
    },
    Gap {
        stream: StreamId,
        expected: u64,
        got: u64,
        at: LabTime,
    },
    NonMonotonicCursor {
        from: EventId,
        to: EventId,
        at: LabTime,
    },
    /// An id written a second time on its stream: `first` is what the id carried before,
    /// `second` what it carries now. A client whose cursor passed the id never sees the second
    /// write.
    ReusedId {
        event: EventId,
        first: Arc<str>,
        second: Arc<str>,
        at: LabTime,
    },
    /// Emitted onto a stream the client silently left (a fork) or onto a connection it left
    /// while it waits on a silent answer (an SDK's 200 held open), or owed by a stream that can
    /// deliver nothing more while the client was not told continuity broke: never delivered.
    Lost { event: EventId, at: LabTime },
    /// A tool call the client made whose result can no longer arrive, and nothing told the
    /// client: it delivered `steps` progress steps and then nothing.
    CallLost {
        session: SessionId,
        call: StreamId,
        steps: u64,
        at: LabTime,
    },
    /// Owed and never delivered, and the client knows: `told` says how it learned.
    Undelivered { owed: Owed, told: Told, at: LabTime },
    CursorDrift {
        session: SessionId,
        drift: Drift,
        at: LabTime,
    },
    /// `second` ran `op` while `first` still did (of two tasks, `second` the one made after);
    /// or (`first == second`, a task) a runner wrote on an epoch older than the one its task is
    /// held at.
    TwoRunners {
        op: Arc<str>,
        first: Run,
        second: Run,
        at: LabTime,
    },
    /// Step `step` of `op` was applied by `first` and again by `second`: in that order, or,
    /// for two tasks of the call, `second` the one made after (which wrote first is a race).
    EffectTwice {
        op: Arc<str>,
        step: u64,
        first: Run,
        second: Run,
        at: LabTime,
    },
    /// `task` ended `first`, then again `second`.
    TerminalTwice {
        task: TaskId,
        first: TaskStatus,
        second: TaskStatus,
        at: LabTime,
    },
    /// `task` was read `read` after a read had answered it `was`, terminal.
    StaleRead {
        task: TaskId,
        was: TaskStatus,
        read: TaskStatus,
        at: LabTime,
    },
    /// `task` was made for `op`, its id never reached the client (it asked for `op` again),
    /// and it runs on where no one will read its result.
    OrphanTask {
        op: Arc<str>,
        task: TaskId,
        at: LabTime,
    },
    /// `run`'s stream closed after `done` of `of` steps: the cancel left the effect half made.
    CutHalfway {
        op: Arc<str>,
        run: Run,
        done: u64,
        of: u64,
        at: LabTime,
    },
    /// The run ended and no end of `op` reached the client, nor anything that told it none
    /// will: its newest task, `task`, had applied `done` of `of` steps.
    TaskLost {
        op: Arc<str>,
        task: TaskId,
        done: u64,
        of: u64,
        at: LabTime,
    },
}

/// The two replicas of a fork across replicas: one sent, the client was bound on the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Across {
    pub from: ReplicaId,
    pub bound_on: ReplicaId,
}

/// How the server's session position and the client's cursor came apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Drift {
    /// The session counter advanced on a stream the client is not bound to.
    CounterAdvancedElsewhere {
        counter: u64,
        on: StreamId,
        cursor: Option<EventId>,
    },
    /// The client's cursor spells an id another stream of the session also issued.
    AmbiguousCursor { cursor: EventId, also_on: StreamId },
}

impl Anomaly {
    pub fn kind(&self) -> AnomalyKind {
        match self {
            Anomaly::Fork { .. } => AnomalyKind::Fork,
            Anomaly::Duplicate { .. } => AnomalyKind::Duplicate,
            Anomaly::Gap { .. } => AnomalyKind::Gap,
            Anomaly::NonMonotonicCursor { .. } => AnomalyKind::NonMonotonicCursor,
            Anomaly::ReusedId { .. } => AnomalyKind::ReusedId,
            Anomaly::Lost { .. } => AnomalyKind::Lost,
            Anomaly::CallLost { .. } => AnomalyKind::CallLost,
            Anomaly::CursorDrift { .. } => AnomalyKind::CursorDrift,
            Anomaly::Undelivered { .. } => AnomalyKind::Undelivered,
            Anomaly::TwoRunners { .. } => AnomalyKind::TwoRunners,
            Anomaly::EffectTwice { .. } => AnomalyKind::EffectTwice,
            Anomaly::TerminalTwice { .. } => AnomalyKind::TerminalTwice,
            Anomaly::StaleRead { .. } => AnomalyKind::StaleRead,
            Anomaly::OrphanTask { .. } => AnomalyKind::OrphanTask,
            Anomaly::CutHalfway { .. } => AnomalyKind::CutHalfway,
            Anomaly::TaskLost { .. } => AnomalyKind::TaskLost,
        }
    }

    /// When the violation happened.
    pub fn at(&self) -> LabTime {
        match self {
            Anomaly::Fork { at, .. }
            | Anomaly::Gap { at, .. }
            | Anomaly::NonMonotonicCursor { at, .. }
            | Anomaly::ReusedId { at, .. }
            | Anomaly::Lost { at, .. }
            | Anomaly::CallLost { at, .. }
            | Anomaly::Undelivered { at, .. }
            | Anomaly::CursorDrift { at, .. }
            | Anomaly::TwoRunners { at, .. }
            | Anomaly::EffectTwice { at, .. }
            | Anomaly::TerminalTwice { at, .. }
            | Anomaly::StaleRead { at, .. }
            | Anomaly::OrphanTask { at, .. }
            | Anomaly::CutHalfway { at, .. }
            | Anomaly::TaskLost { at, .. } => *at,
            Anomaly::Duplicate { second, .. } => second.at,
        }
    }

    /// The tasks the anomaly names (2026-07-28), in the order its sentence does: the lanes a
    /// screen keeps in view for it.
    pub fn tasks(&self) -> Vec<TaskId> {
        let of = |run: &Run| match run {
            Run::Task(task) => Some(*task),
            Run::Request(_) => None,
        };
        let mut tasks: Vec<TaskId> = match self {
            Anomaly::TwoRunners { first, second, .. }
            | Anomaly::EffectTwice { first, second, .. } => {
                [of(first), of(second)].into_iter().flatten().collect()
            }
            Anomaly::CutHalfway { run, .. } => of(run).into_iter().collect(),
            Anomaly::TerminalTwice { task, .. }
            | Anomaly::StaleRead { task, .. }
            | Anomaly::OrphanTask { task, .. }
            | Anomaly::TaskLost { task, .. } => vec![*task],
            _ => Vec::new(),
        };
        tasks.dedup();
        tasks
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Fork {
                orphan,
                bound,
                seq,
                at,
                across: Some(Across { from, bound_on }),
                ..
            } => write!(
                f,
                "fork across replicas: stream {orphan} received event {seq} from replica {from} at \
                 {at} while the client was bound to {bound} on replica {bound_on}"
            ),
            Anomaly::Fork {
                session,
                orphan,
                bound,
                seq,
                at,
                across: None,
            } => write!(
                f,
                "fork: stream {orphan} received event {seq} at {at} while the client was bound to \
                 {bound}; both streams of session {} were live",
                session.short()
            ),
            Anomaly::Duplicate { key, first, second } => write!(
                f,
                "{key} was applied twice: first as {} at {}, then as {} at {}",
                first.event, first.at, second.event, second.at
            ),
            Anomaly::Gap {
                stream,
                expected,
                got,
                at,
            } => write!(
                f,
                "gap: the client received {stream}#{got} at {at} but never {stream}#{expected}"
            ),
            Anomaly::NonMonotonicCursor { from, to, at } => write!(
                f,
                "the client's cursor moved from {from} back to {to} at {at} without being reset"
            ),
            Anomaly::ReusedId {
                event,
                first,
                second,
                at,
            } => write!(
                f,
                "id {event} was written twice: first {}, then {} at {at}; a client past the id \
                 never sees the second write",
                short_key(first),
                short_key(second)
            ),
            Anomaly::CallLost {
                call, steps, at, ..
            } => write!(
                f,
                "the tool call on {call} stopped after {} at {at}; its result will never \
                 arrive, and nothing told the client",
                plural(*steps, "progress step", "delivered")
            ),
            Anomaly::Undelivered { owed, told, at } => {
                write!(
                    f,
                    "{owed} was never delivered; the client was told at {at}: {told}"
                )
            }
            Anomaly::Lost { event, at } => write!(
                f,
                "event {event} emitted at {at} landed where the client no longer reads (a stream \
                 or a connection it had silently left); it will never be delivered"
            ),
            Anomaly::CursorDrift { session, drift, at } => match drift {
                Drift::CounterAdvancedElsewhere {
                    counter,
                    on,
                    cursor,
                } => write!(
                    f,
                    "cursor drift: session {}'s counter reached {counter} on {on} at {at} while \
                     the client's cursor stayed at {}",
                    session.short(),
                    cursor.map_or_else(|| "nothing".to_owned(), |c| c.to_string())
                ),
                Drift::AmbiguousCursor { cursor, also_on } => write!(
                    f,
                    "cursor drift: the client's cursor {} at {at} is also an id of {also_on} in \
                     session {}, so a later resume cannot tell the streams apart",
                    cursor,
                    session.short()
                ),
            },
            Anomaly::TwoRunners {
                op,
                first,
                second,
                at,
            } if first == second => write!(
                f,
                "two runners: {second} of {op} took a write at {at} on an epoch older than the \
                 one it is held at, so two runners wrote one task"
            ),
            Anomaly::TwoRunners {
                op,
                first,
                second,
                at,
            } => write!(
                f,
                "two runners: {first} and {second} both ran {op} at {at}, one call run twice at \
                 once"
            ),
            Anomaly::EffectTwice {
                op,
                step,
                first,
                second,
                at,
            } => write!(
                f,
                "step {step} of {op} was applied twice, by {first} and by {second} (made after \
                 it) at {at} — a re-issue the server did not know for the same call"
            ),
            Anomaly::TerminalTwice {
                task,
                first,
                second,
                at,
            } => write!(
                f,
                "task {} ended twice: {}, then {} at {at}",
                task.short(),
                first.name(),
                second.name()
            ),
            Anomaly::StaleRead {
                task,
                was,
                read,
                at,
            } => write!(
                f,
                "stale read: task {} read {} at {at} after a read had answered {}",
                task.short(),
                read.name(),
                was.name()
            ),
            Anomaly::OrphanTask { op, task, at } => write!(
                f,
                "orphan task: {op} was asked for again at {at} before the client named task {}: \
                 it had lost that answer, and no one will read the task's result",
                task.short()
            ),
            Anomaly::CutHalfway {
                op,
                run,
                done,
                of,
                at,
            } => {
                // A call with no key of its own is named by its run: say it once.
                if **op == *run.op_name() {
                    write!(f, "{run}")?;
                } else {
                    write!(f, "{run} of {op}")?;
                }
                write!(
                    f,
                    " was cancelled at {at} by its closed stream after {done} of {of} steps: its \
                     effect is half made, and the client cannot know how far it got"
                )
            }
            Anomaly::TaskLost {
                op,
                task,
                done,
                of,
                at,
            } => {
                write!(
                    f,
                    "task lost: the run ended at {at} and no end of {op} reached the client, nor \
                     anything that told it none will (task {} ",
                    task.short()
                )?;
                // A step's record says how many the work has: none applied, none said.
                match of {
                    0 => f.write_str("had applied no step)"),
                    _ => write!(f, "had applied {done} of {of} steps)"),
                }
            }
        }
    }
}

/// What the client was owed and did not get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "owed")]
pub enum Owed {
    /// An event on a stream it follows.
    Event { event: EventId },
    /// The result of a tool call it made.
    CallResult { call: StreamId },
    /// The end of a 2026-07-28 task it asked for.
    TaskEnd { task: TaskId },
}

impl fmt::Display for Owed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owed::Event { event } => write!(f, "event {event}"),
            Owed::CallResult { call } => write!(f, "the result of the tool call on {call}"),
            Owed::TaskEnd { task } => write!(f, "the end of task {}", task.short()),
        }
    }
}

/// How the client learned that what it was owed will not arrive: what makes a loss
/// "undelivered, told" rather than silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Told {
    /// Its retry budget ran out, after `refusals` (the last run of one refusal), if any.
    GaveUp { refusals: Option<Refusals> },
    /// A refusal sent it away: typed (`reason`), or an SDK's bare status.
    Refused {
        status: u16,
        reason: Option<RejectReason>,
    },
    /// The server ended its session.
    SessionEnded,
    /// The stream it moved onto was flagged new: continuity broke.
    FlaggedNew,
    /// The run ended while it was still reconnecting: it knows its stream broke.
    StillReconnecting,
    /// Its tool call ended with an error in place of its result (a server stopping, a store
    /// rolled back), or its request failed before any answer: the client knows it has none.
    CallEnded,
    /// A read of its task was answered with a typed error that no retry cures (the task
    /// expired, or its record is corrupt): `reason` is the error's `data.reason`.
    TaskRefused { reason: &'static str },
}

/// One refusal, answered `times` times in a row: a typed one (`reason`), or an SDK's bare
/// status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Refusals {
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<RejectReason>,
    pub times: u32,
}

impl fmt::Display for Told {
    /// `gave up after 409 ×5`: what a verdict line puts in brackets after `told:`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Told::GaveUp {
                refusals: Some(Refusals { status, times, .. }),
            } => write!(f, "gave up after {status} ×{times}"),
            Told::GaveUp { refusals: None } => f.write_str("gave up: its retry budget ran out"),
            Told::Refused {
                status,
                reason: Some(reason),
            } => write!(f, "refused with {status} {reason}"),
            Told::Refused {
                status,
                reason: None,
            } => write!(f, "refused with {status}"),
            Told::SessionEnded => f.write_str("its session ended"),
            Told::FlaggedNew => f.write_str("its new stream was flagged new"),
            Told::StillReconnecting => f.write_str("still reconnecting when the run ended"),
            Told::CallEnded => f.write_str("its call ended with an error"),
            Told::TaskRefused { reason } => {
                write!(f, "a read of its task was refused ({reason})")
            }
        }
    }
}

/// A side effect's key without its session prefix: `bg:3`.
fn short_key(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, rest)| rest)
}

/// `1 progress step delivered`, `0 progress steps delivered`.
fn plural(n: u64, noun: &str, participle: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} {noun}{s} {participle}")
}
