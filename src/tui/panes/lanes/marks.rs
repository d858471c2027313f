//! The lanes' marks: each history entry becomes a few [`Placed`] marks once, as it arrives —
//! which lane, which glyph. A mark shows what the entry records, or, when the checker tagged
//! the entry with anomalies it caused, those anomalies. Nothing here judges: a fork or a
//! duplicate is drawn where the checker said it happened, and only there.

use forkscope_core::history::{
    Anomaly, AnomalyKind, AnomalyKinds, Drift, Entry, Owed, Record, Run,
};
use forkscope_core::{ReplicaId, SessionId, StreamId, TaskId};

/// An emit onto a stream the client had left: the fork. A cross, not a dot, so it differs from
/// `●` by shape where colour is lost (a projector, `NO_COLOR`).
pub const ORPHAN_EMIT: char = '╳';
/// A side effect the client applied again.
pub const DUPLICATE: char = '◆';
/// Events a stream owed the client that it can no longer deliver, and no one was told.
pub const LOST: char = '∅';
/// The client received an event with one before it missing.
pub const GAP: char = '⋯';
/// The client's cursor moved backwards.
pub const CURSOR_BACK: char = '↶';
/// The server's position and the client's cursor came apart.
pub const DRIFT: char = '≠';
/// An id written a second time on its stream.
pub const REUSED_ID: char = '⧉';
/// A tool call whose result can no longer arrive, silently.
pub const CALL_LOST: char = '⊘';
/// Owed and never delivered, and the client was told.
pub const UNDELIVERED: char = '◌';
/// 2026-07-28: one call run by two runners at once.
pub const TWO_RUNNERS: char = '⇉';
/// 2026-07-28: a step of one call applied a second time.
pub const EFFECT_TWICE: char = '◈';
/// 2026-07-28: a task ended twice.
pub const TERMINAL_TWICE: char = '⧈';
/// 2026-07-28: a task read back from its end.
pub const STALE_READ: char = '↯';
/// 2026-07-28: a task whose id the client never learned.
pub const ORPHAN_TASK: char = '⊗';
/// 2026-07-28: a call cancelled halfway by its closed stream.
pub const CUT_HALFWAY: char = '◐';
/// 2026-07-28: a task made, on its own lane.
pub const TASK_MADE: char = '◇';
/// 2026-07-28: one step of a task's work applied (committed under its runner's epoch).
pub const STEP: char = '▪';
/// 2026-07-28: a task reached its end.
pub const TASK_ENDED: char = '■';
/// 2026-07-28: a task's runner stopped (its replica died): it writes nothing more.
pub const RUNNER_LOST: char = '□';
/// 2026-07-28: a call's key found the task made before: nothing new runs.
pub const FOUND_BY_KEY: char = '↻';

/// How bad a mark is; the worst one in a column wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Event,
    /// A resume: drawn over the events that share its column, so the `↺` is never hidden.
    Notable,
    Warn,
    Violation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub glyph: char,
    pub severity: Severity,
    /// Colours an event mark by its stream.
    pub(super) stream: Option<StreamId>,
    /// What the checker tagged the entry with, on this lane: empty for an ordinary mark.
    pub anomalies: AnomalyKinds,
    /// What an anomaly mark shows while the verdict is hidden: the entry's ordinary mark on
    /// this lane, if it has one (else nothing shows).
    plain: Option<(char, Severity)>,
    /// A resume that fenced the connection its stream was still on: the lane says
    /// `fenced s1 (was on conn 3)` beside it.
    pub was_on: Option<u64>,
}

impl Mark {
    fn new(glyph: char, severity: Severity, stream: Option<StreamId>) -> Mark {
        Mark {
            glyph,
            severity,
            stream,
            anomalies: AnomalyKinds::NONE,
            plain: None,
            was_on: None,
        }
    }

    /// The mark of `anomalies` caused by `record`, over its ordinary mark on the lane if any.
    fn tagged(anomalies: AnomalyKinds, record: &Record, ordinary: Option<Mark>) -> Mark {
        let glyph = match anomalies.lead() {
            Some(AnomalyKind::Fork) => ORPHAN_EMIT,
            // Lost at once: it landed on a stream the client had left.
            Some(AnomalyKind::Lost) if matches!(record, Record::Emitted { .. }) => ORPHAN_EMIT,
            Some(AnomalyKind::Lost) => LOST,
            Some(AnomalyKind::Duplicate) => DUPLICATE,
            Some(AnomalyKind::Gap) => GAP,
            Some(AnomalyKind::NonMonotonicCursor) => CURSOR_BACK,
            Some(AnomalyKind::ReusedId) => REUSED_ID,
            Some(AnomalyKind::CallLost | AnomalyKind::TaskLost) => CALL_LOST,
            Some(AnomalyKind::Undelivered) => UNDELIVERED,
            Some(AnomalyKind::TwoRunners) => TWO_RUNNERS,
            Some(AnomalyKind::EffectTwice) => EFFECT_TWICE,
            Some(AnomalyKind::TerminalTwice) => TERMINAL_TWICE,
            Some(AnomalyKind::StaleRead) => STALE_READ,
            Some(AnomalyKind::OrphanTask) => ORPHAN_TASK,
            Some(AnomalyKind::CutHalfway) => CUT_HALFWAY,
            Some(AnomalyKind::CursorDrift) | None => DRIFT,
        };
        // Told is not silent: a warning, not a violation.
        let severity = if anomalies.lead() == Some(AnomalyKind::Undelivered) {
            Severity::Warn
        } else {
            Severity::Violation
        };
        Mark {
            glyph,
            severity,
            stream: ordinary.and_then(|m| m.stream),
            anomalies,
            plain: ordinary.map(|m| (m.glyph, m.severity)),
            was_on: None,
        }
    }

    /// Whether the checker tagged its entry with an anomaly of `kind` on this lane.
    pub fn stands_for(&self, kind: AnomalyKind) -> bool {
        self.anomalies.contains(kind)
    }

    /// The mark as drawn while the verdict is hidden (predict, then reveal): an anomaly mark
    /// shows as the ordinary mark beneath it, or not at all.
    pub fn verdict_hidden(self) -> Option<Mark> {
        if self.anomalies.is_empty() {
            return Some(self);
        }
        let (glyph, severity) = self.plain?;
        Some(Mark::new(glyph, severity, self.stream))
    }
}

/// A stream's lane. In a lab of replicas a stream has one per replica that acted on it (the
/// replica the history entry names), so a fork across replicas is two lanes of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lane {
    pub stream: StreamId,
    /// The replica that made the fact; `None` in a lab of one.
    pub replica: Option<ReplicaId>,
}

impl Lane {
    /// The lane of a stream in a lab of one.
    pub fn of(stream: StreamId) -> Lane {
        Lane {
            stream,
            replica: None,
        }
    }
}

/// `s1`, or `s1@A` for replica A's lane of s1.
impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.replica {
            Some(r) => write!(f, "{}@{r}", self.stream),
            None => write!(f, "{}", self.stream),
        }
    }
}

/// Which lane a mark is drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    Stream(Lane),
    /// 2026-07-28: a task of the tasks extension, made, stepped and ended on its own lane, so
    /// two tasks of one call are two lanes running at once.
    Task(TaskId),
    Client,
}

impl Row {
    /// The stream row on the lane of the replica that made the fact, if one did.
    fn by(self, replica: Option<ReplicaId>) -> Row {
        match self {
            Row::Stream(lane) => Row::Stream(Lane { replica, ..lane }),
            other => other,
        }
    }
}

/// One mark of a history entry: where and how the lanes draw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub at_ms: u64,
    /// Index of its entry in the run's history.
    pub entry: usize,
    /// Drawn only while the client is in this session; `None`: always (the client's own
    /// refusals and deliveries show even after it moved to a new session).
    pub session: Option<SessionId>,
    pub row: Row,
    pub mark: Mark,
}

impl Placed {
    /// Whether the lanes of a client in `session` draw it.
    pub fn shown_for(&self, session: Option<SessionId>) -> bool {
        self.session.is_none() || self.session == session
    }

    /// Where it lies on the lanes' axis: lab time, or its place in the history.
    pub fn coordinate(&self, in_order: bool) -> u64 {
        if in_order {
            self.entry as u64
        } else {
            self.at_ms
        }
    }
}

/// Appends the marks of the `index`th entry: its ordinary mark, the client's ↺ for a resume,
/// and the anomalies the checker tagged it with, each on the lane where it happened (over the
/// ordinary mark when they share a lane). A fact a replica made goes on that replica's lane of
/// the stream.
pub fn place(index: usize, entry: &Entry, placed: &mut Vec<Placed>) {
    let at_ms = entry.at.as_millis();
    let session = stream_session(&entry.record);
    let by = entry.by.map(|b| b.replica);
    let mark = |row: Row, mark: Mark| Placed {
        at_ms,
        entry: index,
        session: if row == Row::Client { None } else { session },
        row: row.by(by),
        mark,
    };
    let from = placed.len();
    if let Some((row, ordinary)) = ordinary(&entry.record) {
        placed.push(mark(row, ordinary));
    }
    if let Record::ResumeAccepted { session, .. } = &entry.record {
        placed.push(Placed {
            session: Some(*session),
            ..mark(Row::Client, Mark::new('↺', Severity::Notable, None))
        });
    }
    for anomaly in entry.caused.anomalies() {
        let (row, kind) = (lane_of(anomaly).by(by), anomaly.kind());
        match placed[from..].iter_mut().find(|p| p.row == row) {
            Some(p) => {
                let ordinary = if p.mark.anomalies.is_empty() {
                    Some(p.mark)
                } else {
                    p.mark.verdict_hidden()
                };
                p.mark = Mark::tagged(p.mark.anomalies.with(kind), &entry.record, ordinary);
            }
            None => placed.push(mark(
                row,
                Mark::tagged(AnomalyKinds::NONE.with(kind), &entry.record, None),
            )),
        }
    }
}

/// The marks of a whole run at once (hand-built snapshots, tests).
pub fn place_all(entries: &[Entry]) -> Vec<Placed> {
    let mut placed = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        place(i, entry, &mut placed);
    }
    placed
}

/// The lane an anomaly happened on: the server's on the stream it concerns, what the client
/// saw on the client's lane.
fn lane_of(anomaly: &Anomaly) -> Row {
    match anomaly {
        Anomaly::Fork { orphan, .. } => Row::Stream(Lane::of(*orphan)),
        Anomaly::Lost { event, .. }
        | Anomaly::ReusedId { event, .. }
        | Anomaly::Undelivered {
            owed: Owed::Event { event },
            ..
        } => Row::Stream(Lane::of(event.stream)),
        Anomaly::CallLost { call, .. }
        | Anomaly::Undelivered {
            owed: Owed::CallResult { call },
            ..
        } => Row::Stream(Lane::of(*call)),
        Anomaly::CursorDrift {
            drift: Drift::CounterAdvancedElsewhere { on, .. },
            ..
        } => Row::Stream(Lane::of(*on)),
        // 2026-07-28 has no streams: what a task did is drawn on its lane (the second runner's,
        // for two runners or a step applied again); what a plain request did, where the client is.
        Anomaly::TwoRunners { second, .. } | Anomaly::EffectTwice { second, .. } => run_row(second),
        Anomaly::TerminalTwice { task, .. }
        | Anomaly::StaleRead { task, .. }
        | Anomaly::OrphanTask { task, .. }
        | Anomaly::TaskLost { task, .. }
        | Anomaly::Undelivered {
            owed: Owed::TaskEnd { task },
            ..
        } => Row::Task(*task),
        Anomaly::Duplicate { .. }
        | Anomaly::CutHalfway { .. }
        | Anomaly::Gap { .. }
        | Anomaly::NonMonotonicCursor { .. }
        | Anomaly::CursorDrift {
            drift: Drift::AmbiguousCursor { .. },
            ..
        } => Row::Client,
    }
}

/// A run's lane: a task's own, a plain request's the client's.
fn run_row(run: &Run) -> Row {
    match run {
        Run::Task(task) => Row::Task(*task),
        Run::Request(_) => Row::Client,
    }
}

/// The session of a record about one of its streams: a stream lane's marks show while the
/// client is in it.
fn stream_session(record: &Record) -> Option<SessionId> {
    match record {
        Record::StreamOpened { session, .. }
        | Record::Attached { session, .. }
        | Record::Orphaned { session, .. }
        | Record::Fenced { session, .. }
        | Record::StreamClosed { session, .. }
        | Record::StreamForgotten { session, .. }
        | Record::Emitted { session, .. }
        | Record::LateEmitRefused { session, .. }
        | Record::StaleWriteRefused { session, .. }
        | Record::ResumeAccepted { session, .. } => Some(*session),
        _ => None,
    }
}

/// What the record shows by itself, and on which lane.
fn ordinary(record: &Record) -> Option<(Row, Mark)> {
    let on = |stream: StreamId, glyph: char, severity: Severity, coloured: bool| {
        let colour = coloured.then_some(stream);
        Some((
            Row::Stream(Lane::of(stream)),
            Mark::new(glyph, severity, colour),
        ))
    };
    match record {
        // The client's lane shows the resume too (see `place`).
        Record::ResumeAccepted {
            stream,
            fenced_connection,
            ..
        } => on(*stream, '↺', Severity::Notable, true).map(|(row, mark)| {
            let was_on = fenced_connection.map(|c| c.0);
            (row, Mark { was_on, ..mark })
        }),
        Record::Attached { stream, .. } => on(*stream, '┣', Severity::Info, true),
        Record::Emitted {
            stream,
            copied: true,
            ..
        } => on(*stream, '○', Severity::Warn, true),
        Record::Emitted { stream, .. } => on(*stream, '●', Severity::Event, true),
        Record::LateEmitRefused { stream, .. } => on(*stream, '×', Severity::Warn, false),
        // The store refused a replica's write on an epoch it no longer holds: the fence across
        // replicas, on the refused replica's lane.
        Record::StaleWriteRefused { stream, .. } => on(*stream, '×', Severity::Warn, false),
        Record::Fenced { stream, .. } => on(*stream, '┃', Severity::Warn, false),
        Record::Orphaned { stream, .. } => on(*stream, '╎', Severity::Warn, false),
        Record::Delivered { event, applied, .. } => Some((
            Row::Client,
            if *applied {
                Mark::new('▲', Severity::Event, Some(event.stream))
            } else {
                Mark::new('·', Severity::Info, None)
            },
        )),
        Record::ResumeRejected { .. } => Some((Row::Client, Mark::new('✗', Severity::Warn, None))),
        Record::TaskCreated {
            task, fresh: true, ..
        } => Some((
            Row::Task(*task),
            Mark::new(TASK_MADE, Severity::Notable, None),
        )),
        Record::TaskCreated { task, .. } => Some((
            Row::Task(*task),
            Mark::new(FOUND_BY_KEY, Severity::Notable, None),
        )),
        Record::StepApplied {
            run: Run::Task(task),
            ..
        } => Some((Row::Task(*task), Mark::new(STEP, Severity::Event, None))),
        Record::TaskSettled { task, .. } => Some((
            Row::Task(*task),
            Mark::new(TASK_ENDED, Severity::Notable, None),
        )),
        Record::RunStopped {
            run: Run::Task(task),
        } => Some((
            Row::Task(*task),
            Mark::new(RUNNER_LOST, Severity::Warn, None),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::history::Caused;
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabTime, Policy, SplitMix64};

    /// The seed incident in the Sim: naive forks, the client applies the replay again.
    fn forked() -> Vec<Entry> {
        let mut sim = Sim::seed_incident(Policy::Naive);
        sim.emit_background();
        sim.history().recent().iter().cloned().collect()
    }

    #[test]
    fn every_tagged_entry_has_its_marks_and_no_other_entry_has_one() {
        let entries = forked();
        let placed = place_all(&entries);
        for (i, entry) in entries.iter().enumerate() {
            let drawn = placed
                .iter()
                .filter(|p| p.entry == i)
                .fold(AnomalyKinds::NONE, |all, p| {
                    p.mark.anomalies.iter().fold(all, AnomalyKinds::with)
                });
            assert_eq!(drawn, entry.caused.kinds(), "{entry:?}");
        }
        let kinds = |glyph: char| {
            placed
                .iter()
                .filter(|p| p.mark.glyph == glyph)
                .fold(AnomalyKinds::NONE, |all, p| {
                    p.mark.anomalies.iter().fold(all, AnomalyKinds::with)
                })
        };
        assert!(kinds(ORPHAN_EMIT).contains(AnomalyKind::Fork));
        assert!(kinds(DUPLICATE).contains(AnomalyKind::Duplicate));
        assert!(
            placed
                .iter()
                .all(|p| (p.mark.severity == Severity::Violation) != p.mark.anomalies.is_empty()),
            "a red mark stands for an anomaly, and only a red one"
        );
    }

    /// Leaving the bound stream is the checker's to judge (it also asks whether the bound
    /// stream is live): an emit elsewhere that it did not tag is drawn as an ordinary emit.
    #[test]
    fn an_untagged_emit_off_the_bound_stream_is_an_ordinary_emit() {
        let session = SessionId::generate(&mut SplitMix64::new(5));
        let at = |record: Record| Entry {
            at: LabTime::ZERO,
            by: None,
            record,
            caused: Caused::NOTHING,
        };
        let connection = forkscope_core::ConnectionId(1);
        let entries = [
            at(Record::Attached {
                session,
                stream: StreamId(1),
                connection,
            }),
            at(Record::Attached {
                session,
                stream: StreamId(2),
                connection,
            }),
            at(Record::Emitted {
                session,
                stream: StreamId(1),
                seq: 3,
                key: "k:bg:3".into(),
                copied: false,
            }),
        ];
        let emit = place_all(&entries)
            .into_iter()
            .find(|p| p.entry == 2)
            .unwrap();
        assert_eq!(
            (emit.mark.glyph, emit.mark.severity),
            ('●', Severity::Event)
        );
    }

    /// Predict, then reveal: hidden, an anomaly mark shows the ordinary mark beneath it.
    #[test]
    fn a_hidden_verdict_shows_the_ordinary_mark() {
        let placed = place_all(&forked());
        let hidden = |glyph: char| {
            placed
                .iter()
                .find(|p| p.mark.glyph == glyph)
                .and_then(|p| p.mark.verdict_hidden())
                .map(|m| (m.glyph, m.severity))
        };
        assert_eq!(hidden(ORPHAN_EMIT), Some(('●', Severity::Event)));
        assert_eq!(hidden(DUPLICATE), Some(('▲', Severity::Event)));
    }
}
