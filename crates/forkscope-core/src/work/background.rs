//! One session's background task: the server-initiated work of the seed's incident. It emits
//! onto the session's standalone stream on demand, or at a set rate (from one event every few
//! seconds up to a million a second). The server decides which stream an emit lands on (under
//! naive, the orphan keeps receiving); this machine numbers the emits and keeps the schedule.

use crate::event::Payload;
use crate::history::History;
use crate::ids::SessionId;
use crate::server::{BackgroundEmit, EmitError, Server};
use crate::time::LabTime;
use crate::vocabulary::{BACKGROUND_SEVERITY, Effect, LogLevel, PayloadKey};
use std::sync::Arc;
use thiserror::Error;

/// Background events per second, per session.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmitRate {
    per_second: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Error)]
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

#[derive(Clone, Copy, Debug, PartialEq)]
struct Schedule {
    rate: EmitRate,
    anchor: LabTime,
    /// Events the schedule has accounted for since the anchor (emitted or skipped).
    taken: u64,
    /// Events due and not yet taken, as of the last [`BackgroundEmitter::handle_timeout`].
    owed: u64,
    /// How far the schedule may fall behind (a stalled reader, a paused socket) before it
    /// skips ahead instead of bursting everything it missed.
    max_behind: u64,
}

/// One session's background task.
#[derive(Clone, Debug, PartialEq)]
pub struct BackgroundEmitter {
    session: SessionId,
    schedule: Option<Schedule>,
    /// Emits that landed: the number the next one's key and body carry is one more.
    emitted: u64,
}

impl BackgroundEmitter {
    /// A task that emits only when told to ([`BackgroundEmitter::emit`]).
    pub fn on_demand(session: SessionId) -> Self {
        BackgroundEmitter {
            session,
            schedule: None,
            emitted: 0,
        }
    }

    /// A task that emits at `rate` from `now` on, falling at most `max_behind` events behind.
    pub fn scheduled(session: SessionId, rate: EmitRate, max_behind: u64, now: LabTime) -> Self {
        BackgroundEmitter {
            schedule: Some(Schedule {
                rate,
                anchor: now,
                taken: 0,
                owed: 0,
                max_behind,
            }),
            ..BackgroundEmitter::on_demand(session)
        }
    }

    /// Numbers on from `n`: the session's last background event, wherever it was emitted (a
    /// replica takes the number from its store).
    pub fn numbered_from(self, n: u64) -> Self {
        BackgroundEmitter { emitted: n, ..self }
    }

    /// Takes the owed emit, if one is, for a caller that writes it elsewhere (a replica's
    /// store): the number its body carries. [`BackgroundEmitter::landed`] counts it once it
    /// landed; one that did not is skipped, not owed again.
    pub fn take_owed_number(&mut self) -> Option<u64> {
        let schedule = self.schedule.as_mut().filter(|s| s.owed > 0)?;
        schedule.owed -= 1;
        schedule.taken += 1;
        Some(self.next_number())
    }

    /// The emit numbered [`BackgroundEmitter::next_number`] landed where the caller wrote it.
    pub fn landed(&mut self) {
        self.emitted += 1;
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Emits that landed so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// The number the next emit carries (in its key, and in the body the caller spells).
    pub fn next_number(&self) -> u64 {
        self.emitted + 1
    }

    /// Counts what the schedule has due at `now`. A schedule more than `max_behind` behind
    /// skips ahead: the events it missed are skipped, not owed.
    pub fn handle_timeout(&mut self, now: LabTime) {
        let Some(schedule) = &mut self.schedule else {
            return;
        };
        let due = schedule.rate.due(now.since(schedule.anchor));
        if due > schedule.taken + schedule.max_behind {
            schedule.taken = due - schedule.max_behind;
        }
        schedule.owed = due.saturating_sub(schedule.taken);
    }

    /// Whether a scheduled emit is owed (as of the last [`BackgroundEmitter::handle_timeout`]).
    pub fn is_owed(&self) -> bool {
        self.schedule.is_some_and(|s| s.owed > 0)
    }

    /// When the schedule's next emit is due: at or before the last `handle_timeout`'s `now`
    /// while one is owed. `None` for a task that emits on demand.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        self.schedule.map(|s| s.anchor.plus(s.rate.at(s.taken + 1)))
    }

    /// Takes the owed emit, if one is: emits `body` (spelled for
    /// [`BackgroundEmitter::next_number`]), a log message at [`BACKGROUND_SEVERITY`]. An emit
    /// with no stream to land on, or below the level the client set, is skipped, not owed again.
    pub fn take_owed(
        &mut self,
        now: LabTime,
        body: impl Into<Arc<str>>,
        server: &mut Server,
        history: &mut History,
    ) -> Option<Result<BackgroundEmit, EmitError>> {
        let schedule = self.schedule.as_mut().filter(|s| s.owed > 0)?;
        schedule.owed -= 1;
        schedule.taken += 1;
        Some(self.emit_log(now, BACKGROUND_SEVERITY, body, server, history))
    }

    /// Emits a log message of `severity` now, unless the session's client set a level above it.
    pub fn emit_log(
        &mut self,
        now: LabTime,
        severity: LogLevel,
        body: impl Into<Arc<str>>,
        server: &mut Server,
        history: &mut History,
    ) -> Result<BackgroundEmit, EmitError> {
        server.log_allows(self.session, severity)?;
        self.emit(now, body, server, history)
    }

    /// Emits the next event now, `body` spelled for [`BackgroundEmitter::next_number`].
    pub fn emit(
        &mut self,
        now: LabTime,
        body: impl Into<Arc<str>>,
        server: &mut Server,
        history: &mut History,
    ) -> Result<BackgroundEmit, EmitError> {
        let key = PayloadKey::new(
            self.session,
            Effect::Background {
                n: self.next_number(),
            },
        );
        let emitted =
            server.emit_background(now, self.session, Payload::new(key, body), history)?;
        self.emitted += 1;
        Ok(emitted)
    }
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
