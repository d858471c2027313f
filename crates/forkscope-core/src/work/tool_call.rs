//! One `progress_task` call: `steps` progress notifications on the call's request stream, one
//! every `delay_ms` of lab time, then its result, after which the stream finishes (and stays
//! resumable for the retention window). Exact in lab time: step `k` is due `k × delay_ms` after
//! the call began, however late the caller got to it.

use crate::event::Payload;
use crate::history::History;
use crate::ids::{EventId, SessionId, StreamId};
use crate::server::Server;
use crate::time::LabTime;
use crate::vocabulary::{Effect, PayloadKey};
use std::sync::Arc;
use thiserror::Error;

/// Most steps a call may take.
pub const MAX_STEPS: u64 = 10_000;
/// Longest delay between two steps.
pub const MAX_DELAY_MS: u64 = 60_000;
/// The longest a call may run (`steps × delay_ms`): a call holds a stream slot until it ends.
pub const MAX_CALL_MS: u64 = 10 * 60 * 1_000;

/// What `progress_task` does when called: `steps` progress notifications, one every
/// `delay_ms` of lab time, then its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    pub steps: u64,
    pub delay_ms: u64,
}

impl Default for ToolSpec {
    fn default() -> Self {
        ToolSpec {
            steps: 3,
            delay_ms: 400,
        }
    }
}

/// Why a call's arguments are out of bounds.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ToolSpecError {
    #[error("{field} must be an integer from {min} to {max}")]
    OutOfRange {
        field: &'static str,
        min: u64,
        max: u64,
    },
    #[error("steps × delay_ms is {total_ms} ms; a call may run at most {max_ms} ms")]
    TooLong { total_ms: u64, max_ms: u64 },
}

impl ToolSpec {
    /// A call within the bounds: 1..=[`MAX_STEPS`] steps, 0..=[`MAX_DELAY_MS`] apart, at most
    /// [`MAX_CALL_MS`] in all.
    pub fn checked(steps: u64, delay_ms: u64) -> Result<ToolSpec, ToolSpecError> {
        if !(1..=MAX_STEPS).contains(&steps) {
            return Err(ToolSpecError::OutOfRange {
                field: "steps",
                min: 1,
                max: MAX_STEPS,
            });
        }
        if delay_ms > MAX_DELAY_MS {
            return Err(ToolSpecError::OutOfRange {
                field: "delay_ms",
                min: 0,
                max: MAX_DELAY_MS,
            });
        }
        let total_ms = steps.saturating_mul(delay_ms);
        if total_ms > MAX_CALL_MS {
            return Err(ToolSpecError::TooLong {
                total_ms,
                max_ms: MAX_CALL_MS,
            });
        }
        Ok(ToolSpec { steps, delay_ms })
    }
}

/// The step a call has due: the caller spells its body, then [`ToolCall::take`]s it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStep {
    /// Progress notification `done` of `total`.
    Progress { done: u64, total: u64 },
    /// The result, after `steps` steps.
    Result { steps: u64 },
}

/// What taking a step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolOutcome {
    /// A progress notification landed on the call's stream.
    Progressed(EventId),
    /// The result was emitted (`None`: its stream no longer took emits) and the stream
    /// finished. The call is over.
    Finished(Option<EventId>),
    /// The stream was fenced or ended under the call: it is over, and sends nothing more.
    Lost,
}

/// A call's steps in time: when each is due and how far it got. It knows nothing of where the
/// steps go, so a 2026-07-28 request, which has no session or stream of the legacy kind, runs
/// the same schedule as a [`ToolCall`] on a session's request stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steps {
    spec: ToolSpec,
    /// A progress token was given: without one, MCP sends no progress and the steps are silent.
    reports_progress: bool,
    done: u64,
    /// When the next step is due; `None` once the call is over.
    next_at: Option<LabTime>,
}

impl Steps {
    /// A call that began at `now`.
    pub fn new(spec: ToolSpec, reports_progress: bool, now: LabTime) -> Self {
        Steps {
            spec,
            reports_progress,
            done: 0,
            next_at: Some(now.plus(spec.delay_ms)),
        }
    }

    /// A call taken over after `done` steps (another runner adopting it): its next step is due
    /// one delay from `now`.
    pub fn resumed(spec: ToolSpec, reports_progress: bool, done: u64, now: LabTime) -> Self {
        Steps {
            done: done.min(spec.steps),
            ..Steps::new(spec, reports_progress, now)
        }
    }

    /// The steps due at `now`, at most `max`, each moved past, for a caller that writes them
    /// elsewhere in one write (a replica commits them to its store): progress steps, then the
    /// result, which ends the call. Silent steps are moved past on the way, as in
    /// [`Steps::poll_step`]: [`Steps::done`] counts them.
    pub fn take_due(&mut self, now: LabTime, max: usize) -> Vec<ToolStep> {
        let mut due = Vec::new();
        while due.len() < max {
            let Some(step) = self.poll_step(now) else {
                break;
            };
            due.push(step);
            match step {
                ToolStep::Progress { .. } => self.advance(),
                ToolStep::Result { .. } => {
                    self.done = self.spec.steps;
                    self.next_at = None;
                    break;
                }
            }
        }
        due
    }

    pub fn spec(&self) -> ToolSpec {
        self.spec
    }
    /// Steps taken so far.
    pub fn done(&self) -> u64 {
        self.done
    }
    pub fn is_over(&self) -> bool {
        self.next_at.is_none()
    }

    /// When the call next has a step to take; `None` once it is over.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        self.next_at
    }

    /// The step due at `now`, if any, without taking it. Silent progress steps (no progress
    /// token) have nothing to send and are taken here on the way.
    pub fn poll_step(&mut self, now: LabTime) -> Option<ToolStep> {
        loop {
            if self.next_at? > now {
                return None;
            }
            if self.done == self.spec.steps {
                return Some(ToolStep::Result {
                    steps: self.spec.steps,
                });
            }
            if self.reports_progress {
                return Some(ToolStep::Progress {
                    done: self.done + 1,
                    total: self.spec.steps,
                });
            }
            self.advance();
        }
    }

    /// The call is over: nothing more is due.
    pub fn end(&mut self) {
        self.next_at = None;
    }

    fn advance(&mut self) {
        self.done += 1;
        // Due one delay after the step before was due, not after whenever it was taken.
        self.next_at = self.next_at.map(|t| t.plus(self.spec.delay_ms));
    }
}

/// A running call on a session's request stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    session: SessionId,
    stream: StreamId,
    steps: Steps,
}

impl ToolCall {
    /// A call that began at `now` on the request stream `stream`.
    pub fn new(
        session: SessionId,
        stream: StreamId,
        spec: ToolSpec,
        reports_progress: bool,
        now: LabTime,
    ) -> Self {
        ToolCall {
            session,
            stream,
            steps: Steps::new(spec, reports_progress, now),
        }
    }

    /// A call taken over after `done` steps (a replica adopting it from its store): its next
    /// step is due one delay from `now`.
    pub fn resumed(
        session: SessionId,
        stream: StreamId,
        spec: ToolSpec,
        reports_progress: bool,
        done: u64,
        now: LabTime,
    ) -> Self {
        ToolCall {
            session,
            stream,
            steps: Steps::resumed(spec, reports_progress, done, now),
        }
    }

    /// See [`Steps::take_due`].
    pub fn take_due(&mut self, now: LabTime, max: usize) -> Vec<ToolStep> {
        self.steps.take_due(now, max)
    }

    pub fn session(&self) -> SessionId {
        self.session
    }
    pub fn stream(&self) -> StreamId {
        self.stream
    }
    pub fn spec(&self) -> ToolSpec {
        self.steps.spec
    }
    /// Steps taken so far.
    pub fn done(&self) -> u64 {
        self.steps.done
    }
    pub fn is_over(&self) -> bool {
        self.steps.is_over()
    }

    /// When the call next has a step to take; `None` once it is over.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        self.steps.poll_timeout()
    }

    /// See [`Steps::poll_step`].
    pub fn poll_step(&mut self, now: LabTime) -> Option<ToolStep> {
        self.steps.poll_step(now)
    }

    /// Takes the step due at `now`, emitting `body` (the caller's spelling of that step) onto
    /// the call's stream; `None` when no step is due.
    pub fn take(
        &mut self,
        now: LabTime,
        body: impl Into<Arc<str>>,
        server: &mut Server,
        history: &mut History,
    ) -> Option<ToolOutcome> {
        let step = self.poll_step(now)?;
        let (session, call) = (self.session, self.stream);
        Some(match step {
            ToolStep::Result { .. } => {
                let key = PayloadKey::new(session, Effect::Result { call });
                self.end(now, Some((key, body.into())), server, history)
            }
            ToolStep::Progress { done, .. } => {
                let key = PayloadKey::new(session, Effect::Progress { call, step: done });
                self.steps.advance();
                match server.emit(now, session, call, Payload::new(key, body), history) {
                    Ok(event) => ToolOutcome::Progressed(event),
                    Err(_) => {
                        self.steps.end();
                        ToolOutcome::Lost
                    }
                }
            }
        })
    }

    /// The server is stopping: the call ends with `body` (why it stopped) as its stream's last
    /// event, resumable like a result. `None` when the call was already over.
    pub fn stop(
        &mut self,
        now: LabTime,
        body: impl Into<Arc<str>>,
        server: &mut Server,
        history: &mut History,
    ) -> Option<ToolOutcome> {
        self.steps.poll_timeout()?;
        let key = PayloadKey::new(self.session, Effect::Stopped { call: self.stream });
        Some(self.end(now, Some((key, body.into())), server, history))
    }

    /// The client cancelled the call: no result is sent, its stream finishes. Returns whether
    /// the call was still running.
    pub fn cancel(&mut self, now: LabTime, server: &mut Server, history: &mut History) -> bool {
        if self.is_over() {
            return false;
        }
        self.end(now, None, server, history);
        true
    }

    fn end(
        &mut self,
        now: LabTime,
        last: Option<(PayloadKey, Arc<str>)>,
        server: &mut Server,
        history: &mut History,
    ) -> ToolOutcome {
        self.steps.end();
        let event = last.and_then(|(key, body)| {
            let payload = Payload::new(key, body);
            server
                .emit(now, self.session, self.stream, payload, history)
                .ok()
        });
        server.finish_request_stream(now, self.session, self.stream, history);
        ToolOutcome::Finished(event)
    }
}
