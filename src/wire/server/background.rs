//! The background emitter: the server-initiated work of the seed's incident. Every session's
//! standalone stream receives `notifications/message` events at a set rate, from one event
//! every few seconds up to a million a second. The core decides which stream an emit lands on
//! (under naive, the orphan keeps receiving); this file only keeps the schedule.

use super::writers::WRITER_QUEUE;
use crate::wire::{Core, jsonrpc};
use forkscope_core::{EventId, LabTime, Payload, SessionId};
use serde_json::json;
use std::collections::HashMap;

/// Background events per second, per session.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmitRate {
    per_second: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("an emit rate must be more than 0 and at most {max} events per second, got {0}", max = EmitRate::MAX)]
pub struct RateError(f64);

impl EmitRate {
    pub const MAX: f64 = 1_000_000.0;

    pub fn per_second(per_second: f64) -> Result<EmitRate, RateError> {
        if per_second.is_finite() && per_second > 0.0 && per_second <= Self::MAX {
            Ok(EmitRate { per_second })
        } else {
            Err(RateError(per_second))
        }
    }

    /// One event every `ms` lab milliseconds (at least 1).
    pub fn every_ms(ms: u64) -> EmitRate {
        EmitRate {
            per_second: 1_000.0 / ms.max(1) as f64,
        }
    }

    pub fn events_per_second(&self) -> f64 {
        self.per_second
    }

    /// Lab milliseconds between two events, rounded (at least 1): the inverse of
    /// [`EmitRate::every_ms`].
    pub fn interval_ms(&self) -> u64 {
        (1_000.0 / self.per_second).round().max(1.0) as u64
    }

    /// Events due `elapsed_ms` after the schedule's anchor.
    fn due(&self, elapsed_ms: u64) -> u64 {
        (elapsed_ms as f64 * self.per_second / 1_000.0).floor() as u64
    }

    /// Milliseconds after the anchor at which event number `n` (1-based) is due.
    fn at(&self, n: u64) -> u64 {
        (n as f64 * 1_000.0 / self.per_second).ceil() as u64
    }
}

/// How far a schedule may fall behind (a stalled reader, a paused socket) before it skips
/// ahead instead of bursting everything it missed.
const MAX_BEHIND: u64 = WRITER_QUEUE as u64;

#[derive(Debug)]
struct Schedule {
    anchor: LabTime,
    /// Events the schedule has accounted for since the anchor (emitted or skipped).
    taken: u64,
    /// The last emit was held back by a full writer: the body will wake the driver.
    blocked: bool,
}

#[derive(Debug, Default)]
pub struct Background {
    schedules: HashMap<SessionId, Schedule>,
    /// The `background` counter each session's payloads carry (emits that landed).
    emitted: HashMap<SessionId, u64>,
}

impl Background {
    pub fn forget(&mut self, session: SessionId) {
        self.schedules.remove(&session);
        self.emitted.remove(&session);
    }
}

/// The session's background task emits its next event now; `None` when the session has no
/// stream to emit onto.
pub fn emit_background(core: &mut Core, session: SessionId, now: LabTime) -> Option<EventId> {
    let n = core
        .io
        .background
        .emitted
        .get(&session)
        .copied()
        .unwrap_or(0)
        + 1;
    let key = format!("{}:bg:{n}", session.short());
    let body = jsonrpc::notification(
        "notifications/message",
        json!({ "level": "info", "logger": "forkscope", "data": { "background": n } }),
    );
    let emitted = core
        .server
        .emit_background(now, session, Payload::new(key, body), &mut core.history)
        .ok()?;
    core.io.background.emitted.insert(session, n);
    if let Some(refused) = emitted.refused_on {
        tracing::info!(session = %session.short(), stream = %refused, "late emit refused on a fenced stream");
    }
    super::write_event(core, session, emitted.event);
    Some(emitted.event)
}

/// Emits what is due on every session, at most `budget` events. Returns the events emitted and
/// the next deadline (`None`: nothing scheduled, or every schedule waits for its writer).
pub(super) fn run_due(
    core: &mut Core,
    rate: EmitRate,
    now: LabTime,
    budget: &mut usize,
) -> Option<LabTime> {
    let sessions: Vec<SessionId> = core.server.sessions().map(|s| s.id()).collect();
    core.io
        .background
        .schedules
        .retain(|s, _| sessions.contains(s));
    let mut next: Option<LabTime> = None;
    for session in sessions {
        let schedule = core
            .io
            .background
            .schedules
            .entry(session)
            .or_insert(Schedule {
                anchor: now,
                taken: 0,
                blocked: false,
            });
        schedule.blocked = false;
        let due = rate.due(now.since(schedule.anchor));
        if due > schedule.taken + MAX_BEHIND {
            schedule.taken = due - MAX_BEHIND;
        }
        while *budget > 0 {
            let schedule = &core.io.background.schedules[&session];
            if schedule.taken >= due {
                break;
            }
            let target = core
                .server
                .session(session)
                .and_then(|s| s.background_target().or(s.active()));
            if let Some(stream) = target
                && !core.io.writers.has_room(session, stream, 1)
            {
                if let Some(s) = core.io.background.schedules.get_mut(&session) {
                    s.blocked = true;
                }
                break;
            }
            // An emit with no stream to land on is skipped, not owed.
            let _ = emit_background(core, session, now);
            *budget -= 1;
            if let Some(s) = core.io.background.schedules.get_mut(&session) {
                s.taken += 1;
            }
        }
        let schedule = &core.io.background.schedules[&session];
        if !schedule.blocked {
            let at = if schedule.taken < due {
                now // budget ran out: more is due at once
            } else {
                schedule.anchor.plus(rate.at(schedule.taken + 1))
            };
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_bounded_and_schedules_exact() {
        assert!(EmitRate::per_second(0.0).is_err());
        assert!(EmitRate::per_second(f64::NAN).is_err());
        assert!(EmitRate::per_second(2e6).is_err());
        let every = EmitRate::every_ms(700);
        assert_eq!(
            (every.due(699), every.due(700), every.due(1_400)),
            (0, 1, 2)
        );
        assert_eq!((every.at(1), every.at(2)), (700, 1_400));
        let fast = EmitRate::per_second(100_000.0).unwrap();
        assert_eq!(fast.due(1), 100);
        assert_eq!(fast.at(101), 2);
        let slow = EmitRate::per_second(0.25).unwrap();
        assert_eq!(slow.at(1), 4_000, "one every four seconds");
    }
}
