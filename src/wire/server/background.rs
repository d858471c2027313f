//! The background emitter on the wire: every session's standalone stream receives
//! `notifications/message` events at a set rate. Each session's task is the core's
//! [`BackgroundEmitter`] (the machine the Sim drives too: numbering, schedule, skipping ahead);
//! this file spells the bodies and holds an emit back while its writer is full.

use super::writers::WRITER_QUEUE;
use crate::wire::{Core, jsonrpc};
use forkscope_core::server::BackgroundEmit;
use forkscope_core::vocabulary::{BACKGROUND_SEVERITY, LogLevel};
use forkscope_core::work::BackgroundEmitter;
use forkscope_core::{EventId, LabTime, SessionId};
use serde_json::json;
use std::collections::HashMap;

pub use forkscope_core::work::{EmitRate, RateError};

/// How far a schedule may fall behind (a stalled reader, a paused socket) before it skips
/// ahead instead of bursting everything it missed: a writer's queue.
const MAX_BEHIND: u64 = WRITER_QUEUE as u64;

#[derive(Debug)]
struct Task {
    emitter: BackgroundEmitter,
    /// The last emit was held back by a full writer: the body will wake the driver.
    blocked: bool,
    /// The session's own background events that landed: their bodies count on from it, one
    /// by one, whatever else (`emit_standalone`) takes numbers in the keys' sequence.
    own: u64,
    /// When the task started: its schedule runs from here.
    since: LabTime,
}

#[derive(Debug, Default)]
pub struct Background {
    tasks: HashMap<SessionId, Task>,
}

impl Background {
    pub fn forget(&mut self, session: SessionId) {
        self.tasks.remove(&session);
    }

    /// The session's task, started at `now` (at `rate`, or on demand) if it has none yet.
    fn task(&mut self, session: SessionId, rate: Option<EmitRate>, now: LabTime) -> &mut Task {
        let task = self.tasks.entry(session).or_insert_with(|| Task {
            emitter: match rate {
                Some(rate) => BackgroundEmitter::scheduled(session, rate, MAX_BEHIND, now),
                None => BackgroundEmitter::on_demand(session),
            },
            blocked: false,
            own: 0,
            since: now,
        });
        // A task an on-demand emit started (a key, `emit_standalone`) before the driver's first
        // turn on the session takes the schedule from when it started: which of the two came
        // first must not move the session's emits (it did: a scripted lab then never emitted).
        if let (Some(rate), None) = (rate, task.emitter.poll_timeout()) {
            task.emitter = BackgroundEmitter::scheduled(session, rate, MAX_BEHIND, task.since)
                .numbered_from(task.emitter.emitted());
        }
        task
    }
}

/// The `notifications/message` body of background event `n`, a log message of the level the
/// core's background emitter has.
pub(crate) fn body(n: u64) -> String {
    jsonrpc::notification(
        "notifications/message",
        json!({ "level": BACKGROUND_SEVERITY.as_str(), "logger": "forkscope", "data": { "background": n } }),
    )
}

/// Writes where an emit landed; says so when a fenced stream refused it first.
fn landed(core: &mut Core, session: SessionId, emitted: BackgroundEmit) -> EventId {
    if let Some(refused) = emitted.refused_on {
        tracing::info!(session = %session.short(), stream = %refused, "late emit refused on a fenced stream");
    }
    super::write_event(core, session, emitted.event);
    emitted.event
}

/// The session's background task emits its next event now; `None` when the session has no
/// stream to emit onto.
pub fn emit_background(core: &mut Core, session: SessionId, now: LabTime) -> Option<EventId> {
    let n = core.io.background.task(session, None, now).own + 1;
    let event = emit_body(core, session, now, body(n), Some(BACKGROUND_SEVERITY))?;
    if let Some(task) = core.io.background.tasks.get_mut(&session) {
        task.own = n;
    }
    Some(event)
}

/// Emits `body` now as the session's next background event (numbered in its key in the
/// session's one background sequence); `None` when the session has no stream to emit onto, or
/// when `body` is a log message of a `severity` below the level its client set.
pub(super) fn emit_body(
    core: &mut Core,
    session: SessionId,
    now: LabTime,
    body: String,
    severity: Option<LogLevel>,
) -> Option<EventId> {
    let task = core.io.background.task(session, None, now);
    let emitted = match severity {
        Some(severity) => {
            task.emitter
                .emit_log(now, severity, body, &mut core.server, &mut core.history)
        }
        None => task
            .emitter
            .emit(now, body, &mut core.server, &mut core.history),
    }
    .ok()?;
    Some(landed(core, session, emitted))
}

/// Whether the writer of the stream a background emit of `session` would land on has room for
/// one more event (true when it lands on no stream). A full writer holds every background
/// schedule of its session — the emitter's and `emit_standalone`'s — until it drains: a slow
/// reader is not buffered without bound.
pub(super) fn has_room(core: &Core, session: SessionId) -> bool {
    let target = core
        .server
        .session(session)
        .and_then(|s| s.background_target().or(s.active()));
    target.is_none_or(|stream| core.io.writers.has_room(session, stream, 1))
}

/// Emits what is due on every session, at most `budget` events. Returns the next deadline
/// (`None`: nothing scheduled, or every schedule waits for its writer).
pub(super) fn run_due(
    core: &mut Core,
    rate: EmitRate,
    now: LabTime,
    budget: &mut usize,
) -> Option<LabTime> {
    let sessions: Vec<SessionId> = core.server.sessions().map(|s| s.id()).collect();
    core.io.background.tasks.retain(|s, _| sessions.contains(s));
    let mut next: Option<LabTime> = None;
    for session in sessions {
        let task = core.io.background.task(session, Some(rate), now);
        task.blocked = false;
        task.emitter.handle_timeout(now);
        while *budget > 0 && core.io.background.tasks[&session].emitter.is_owed() {
            if !has_room(core, session) {
                if let Some(task) = core.io.background.tasks.get_mut(&session) {
                    task.blocked = true;
                }
                break;
            }
            *budget -= 1;
            let Some(task) = core.io.background.tasks.get_mut(&session) else {
                break;
            };
            let body = body(task.own + 1);
            // An emit with no stream to land on is skipped, not owed.
            if let Some(Ok(emitted)) =
                task.emitter
                    .take_owed(now, body, &mut core.server, &mut core.history)
            {
                task.own += 1;
                landed(core, session, emitted);
            }
        }
        let task = &core.io.background.tasks[&session];
        if !task.blocked
            && let Some(at) = task.emitter.poll_timeout()
        {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An on-demand emit that starts the session's task before the driver's first turn must
    /// not cost the session its schedule: the schedule runs from when the task started.
    #[test]
    fn a_task_an_emit_started_keeps_the_schedule_from_its_start() {
        let session = SessionId::parse(&format!("{:032x}", 7)).unwrap();
        let rate = EmitRate::every_ms(700);
        let mut background = Background::default();
        background.task(session, None, LabTime::from_millis(0));
        let task = background.task(session, Some(rate), LabTime::from_millis(300));
        assert_eq!(task.emitter.poll_timeout(), Some(LabTime::from_millis(700)));
        // And a schedule once set stays as it was.
        let again = background.task(session, Some(rate), LabTime::from_millis(650));
        assert_eq!(
            again.emitter.poll_timeout(),
            Some(LabTime::from_millis(700))
        );
    }
}
