//! A tool call's response stream as the client follows it: the stream's token and cursor,
//! dedupe of replayed events, and the resume to make when the stream breaks before the result.
//!
//! A request stream is not the session's standalone stream: it carries one POST's progress and
//! its result, and ends after the result. A client cut off before the result resumes it like
//! any stream (a GET with `Last-Event-ID`, and the token), and must apply each progress step
//! and the result exactly once.

use super::{
    Client, Continuity, Delivery, EventTruth, REQUESTS_KEPT, ReconnectPlan, StreamHeaders, retry,
};
use crate::config::RetryConfig;
use crate::history::{History, Record};
use crate::ids::{SessionId, StreamId, WireCursor};
use crate::time::LabTime;
use crate::vocabulary::{ClientAction, RejectReason};
use serde::Serialize;

/// Where a followed request stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "phase")]
pub enum RequestPhase {
    /// Reading the stream.
    Streaming,
    /// The stream broke before the result; the next resume is due at `next_at` (`None`: one
    /// is in flight).
    Resuming {
        since: LabTime,
        attempt: u32,
        next_at: Option<LabTime>,
    },
    /// The result arrived and was applied.
    Done,
    /// The retry budget ran out, the server refused for good, or the call ended with an error
    /// in place of its result: the result will not come.
    Failed,
}

/// One tool call the client is waiting on.
#[derive(Clone, Debug, Serialize)]
pub struct RequestStream {
    pub request_id: u64,
    pub bound_stream: Option<String>,
    pub cursor: Option<String>,
    #[serde(skip)]
    pub(crate) token: Option<String>,
    pub phase: RequestPhase,
    /// Resumes that reattached the stream.
    pub resumes: u32,
    pub applied: u64,
    pub replays_skipped: u64,
    /// The progress steps the call asked for, when the caller said (a display's "7 of 16").
    pub steps: Option<u64>,
    /// The call's stream as the server knows it, from the ground truth of the first event that
    /// arrived on it (the priming event): what the client names when it gives the call up.
    #[serde(skip)]
    pub(crate) truth: Option<(SessionId, StreamId)>,
}

impl RequestStream {
    pub(crate) fn new(request_id: u64, steps: Option<u64>) -> Self {
        RequestStream {
            request_id,
            steps,
            bound_stream: None,
            cursor: None,
            token: None,
            phase: RequestPhase::Streaming,
            resumes: 0,
            applied: 0,
            replays_skipped: 0,
            truth: None,
        }
    }

    /// A response stream opened (the POST's own, or a resume's). Condition 4 as on the
    /// standalone stream: continue only on an echo of this very stream saying resumed.
    pub(crate) fn on_opened(&mut self, headers: StreamHeaders<'_>, reconciles: bool) -> Continuity {
        let resuming = matches!(self.phase, RequestPhase::Resuming { .. });
        self.phase = RequestPhase::Streaming;
        if let Some(token) = headers.token {
            self.token = Some(token.to_owned());
        }
        if !reconciles {
            if resuming {
                self.resumes += 1;
            }
            return Continuity::Assumed;
        }
        let same = headers.stream.is_some() && headers.stream == self.bound_stream.as_deref();
        if resuming && same && headers.resumed == Some(true) {
            self.resumes += 1;
            return Continuity::Resumed;
        }
        self.bound_stream = headers.stream.map(str::to_owned);
        self.cursor = None;
        Continuity::NewStream
    }

    /// Whether an event is a replay of one at or before the cursor on the same stream.
    pub(crate) fn is_replay(&self, wire_id: Option<&str>) -> bool {
        super::replays(wire_id, self.cursor.as_deref())
    }

    pub(crate) fn moved_to(&mut self, wire_id: &str) {
        self.cursor = Some(wire_id.to_owned());
    }

    /// The stream broke before the result: schedules the first resume.
    pub(crate) fn on_lost(&mut self, now: LabTime, config: &RetryConfig, hint: Option<u64>) {
        if matches!(self.phase, RequestPhase::Done | RequestPhase::Failed) {
            return;
        }
        self.phase = RequestPhase::Resuming {
            since: now,
            attempt: 0,
            next_at: Some(now.plus(retry::backoff_ms(config, hint, 0))),
        };
    }

    /// The resume to make now, if one is due.
    pub(crate) fn resume_plan(&mut self, now: LabTime, strip_token: bool) -> Option<ReconnectPlan> {
        let RequestPhase::Resuming {
            since,
            attempt,
            next_at: Some(due),
        } = self.phase
        else {
            return None;
        };
        if now < due {
            return None;
        }
        let attempt = attempt + 1;
        self.phase = RequestPhase::Resuming {
            since,
            attempt,
            next_at: None,
        };
        Some(ReconnectPlan::new(
            attempt,
            self.cursor.clone(),
            self.token.clone(),
            strip_token,
        ))
    }

    /// The resume in flight failed; schedules the next inside the budget, or gives up.
    pub(crate) fn on_attempt_failed(
        &mut self,
        now: LabTime,
        config: &RetryConfig,
        hint: Option<u64>,
    ) -> RequestPhase {
        if let RequestPhase::Resuming { since, attempt, .. } = self.phase {
            self.phase = match retry::next_attempt_at(config, hint, since, attempt, now) {
                Some(due) => RequestPhase::Resuming {
                    since,
                    attempt,
                    next_at: Some(due),
                },
                None => RequestPhase::Failed,
            };
        }
        self.phase
    }

    /// When the follower wants to be woken.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        match self.phase {
            RequestPhase::Resuming { next_at, .. } => next_at,
            _ => None,
        }
    }

    pub fn cursor_seq(&self) -> Option<u64> {
        self.cursor
            .as_deref()
            .and_then(WireCursor::parse)
            .map(WireCursor::seq)
    }
}

impl RequestStream {
    /// Canonical form: see [`crate::canon`].
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        c.number(self.request_id);
        c.cursor(self.bound_stream.as_deref());
        c.cursor(self.cursor.as_deref());
        c.token(self.token.as_deref());
        match self.phase {
            RequestPhase::Streaming => c.tag(0),
            RequestPhase::Resuming {
                since,
                attempt,
                next_at,
            } => {
                c.tag(1);
                c.time(since);
                c.number(u64::from(attempt));
                c.opt_time(next_at);
            }
            RequestPhase::Done => c.tag(2),
            RequestPhase::Failed => c.tag(3),
        }
    }
}

/// The Client's side of its tool calls: each call's response stream is followed by its own
/// [`RequestStream`].
impl Client {
    /// A tool call was sent: the client follows its response stream from now on. `steps`: the
    /// progress steps it asked for, if known (shown, never judged).
    pub fn begin_request(&mut self, request_id: u64, steps: Option<u64>) {
        let finished =
            |r: &RequestStream| matches!(r.phase, RequestPhase::Done | RequestPhase::Failed);
        if self.requests.iter().filter(|r| finished(r)).count() >= REQUESTS_KEPT
            && let Some(oldest) = self.requests.iter().position(finished)
        {
            self.requests.remove(oldest);
        }
        self.requests.push(RequestStream::new(request_id, steps));
    }

    pub(super) fn request_mut(&mut self, request_id: u64) -> Option<&mut RequestStream> {
        self.requests
            .iter_mut()
            .find(|r| r.request_id == request_id)
    }

    /// A tool call's response stream opened: the POST's own, or a resume's.
    pub fn on_request_stream_opened(
        &mut self,
        request_id: u64,
        headers: StreamHeaders<'_>,
    ) -> Continuity {
        let reconciles = self.reconciles;
        let continuity = match self.request_mut(request_id) {
            Some(request) => request.on_opened(headers, reconciles),
            None => Continuity::NewStream,
        };
        self.end_outage_if_over();
        continuity
    }

    /// An event on a tool call's response stream (progress or result): applied once, unless
    /// it replays something at or before the call's cursor. The standalone cursor is left
    /// alone.
    pub fn on_request_event(
        &mut self,
        now: LabTime,
        request_id: u64,
        wire_id: Option<&str>,
        priming: bool,
        truth: Option<EventTruth>,
        history: &mut History,
    ) -> Delivery {
        let reconciles = self.reconciles;
        let Some(request) = self.request_mut(request_id) else {
            return Delivery::SkippedReplay;
        };
        if let Some(t) = &truth {
            request.truth.get_or_insert((t.session, t.event.stream));
        }
        if priming {
            if let Some(id) = wire_id {
                request.moved_to(id);
            }
            return Delivery::Primed;
        }
        if reconciles && request.is_replay(wire_id) {
            request.replays_skipped += 1;
            return self.skip(now, truth.as_ref(), history);
        }
        request.applied += 1;
        if let Some(id) = wire_id {
            request.moved_to(id);
        }
        self.apply(now, truth.as_ref(), history);
        Delivery::Applied
    }

    /// The tool call's result was applied: nothing more to follow.
    pub fn on_request_done(&mut self, request_id: u64) {
        if let Some(request) = self.request_mut(request_id) {
            request.phase = RequestPhase::Done;
        }
    }

    /// The tool call's stream ended with an error in place of its result (a server stopping, a
    /// store rolled back): nothing more to follow, and no result to wait for.
    pub fn on_request_failed(&mut self, request_id: u64) {
        if let Some(request) = self.request_mut(request_id) {
            request.phase = RequestPhase::Failed;
        }
    }

    /// The tool call's request failed before any response (its connection broke, or no answer
    /// came): there is no stream to resume, and the client knows the call has no result.
    pub fn on_request_broken(&mut self, now: LabTime, request_id: u64, history: &mut History) {
        let session = self.session;
        let Some(request) = self.request_mut(request_id) else {
            return;
        };
        request.phase = RequestPhase::Failed;
        if let Some(session) = request.truth.map(|(s, _)| s).or(session) {
            let call = request.truth.map(|(_, stream)| stream);
            let record = Record::CallAbandoned {
                session,
                call,
                request: request_id,
                refused: None,
                broken: true,
            };
            history.record(now, record);
        }
    }

    /// The tool call's stream broke before its result: a resume is scheduled.
    pub fn on_request_lost(&mut self, now: LabTime, request_id: u64) {
        let (retry, hint) = (self.retry, self.retry_hint_ms);
        if let Some(request) = self.request_mut(request_id) {
            request.on_lost(now, &retry, hint);
        }
    }

    /// The resume of a tool call's stream to make now, if one is due.
    pub fn request_resume_plan(&mut self, now: LabTime, request_id: u64) -> Option<ReconnectPlan> {
        let strip = self.strip_next;
        self.request_mut(request_id)?.resume_plan(now, strip)
    }

    /// A resume of a tool call's stream failed (no answer, or a rejection). A rejection that
    /// says "start a new session" ends the call: its result is lost, and the client says so
    /// (in the history too: it knows what it will not get).
    pub fn on_request_attempt_failed(
        &mut self,
        now: LabTime,
        request_id: u64,
        rejected: Option<RejectReason>,
        history: &mut History,
    ) -> RequestPhase {
        let (retry, hint) = (self.retry, self.retry_hint_ms);
        let session = self.session;
        let Some(request) = self.request_mut(request_id) else {
            return RequestPhase::Failed;
        };
        let refused = rejected.filter(|r| r.client_action() == ClientAction::StartNewSession);
        let phase = if refused.is_some() {
            request.phase = RequestPhase::Failed;
            request.phase
        } else {
            request.on_attempt_failed(now, &retry, hint)
        };
        if phase == RequestPhase::Failed
            && let Some(session) = request.truth.map(|(s, _)| s).or(session)
        {
            let call = request.truth.map(|(_, stream)| stream);
            history.record(
                now,
                Record::CallAbandoned {
                    session,
                    call,
                    request: request_id,
                    refused,
                    broken: false,
                },
            );
        }
        phase
    }

    /// The tool calls the client follows, oldest first.
    pub fn requests(&self) -> &[RequestStream] {
        &self.requests
    }

    pub fn request(&self, request_id: u64) -> Option<&RequestStream> {
        self.requests.iter().find(|r| r.request_id == request_id)
    }
}
