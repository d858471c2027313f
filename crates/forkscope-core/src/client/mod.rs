//! The client side of the core: the cursor, the reconciliation rule of condition 4, side-effect
//! application with dedupe, and the reconnect schedule; `intent.rs` is the 2026-07-28 client's
//! one intent (a task call under its key, its re-issues and polls, the task's cursor).
//!
//! The client decides only from what a real client sees on the wire (headers, event ids). The
//! ground truth of each event ([`EventTruth`]) is passed along purely for the history, so the
//! checker can judge what really happened.

pub mod intent;
pub mod request;
pub mod retry;

pub use request::{RequestPhase, RequestStream};

use crate::config::RetryConfig;
use crate::history::{History, Record};
use crate::ids::{EventId, SessionId, WireCursor};
use crate::policy::Policy;
use crate::time::LabTime;
use crate::vocabulary::{ClientAction, RejectReason};
use serde::Serialize;
use std::sync::Arc;

/// The identity headers of a stream response, as the client read them.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamHeaders<'a> {
    /// `Mcp-Stream-Id`.
    pub stream: Option<&'a str>,
    /// `Mcp-Stream-Resumed`.
    pub resumed: Option<bool>,
    /// `Mcp-Resumption-Token`: the token for the stream now attached.
    pub token: Option<&'a str>,
}

/// How the client interpreted a stream response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Continuity {
    /// The echo names the bound stream and says resumed: continue from the cursor.
    Resumed,
    /// No matching resumed-identity echo: a new stream; the cursor is reset (condition 4).
    NewStream,
    /// The naive client does not look: it assumes whatever arrives continues its stream.
    Assumed,
}

/// What the server really sent, known to the lab (the event's `_meta`), never used to decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTruth {
    pub session: SessionId,
    pub event: EventId,
    /// The side effect; `None` for a priming event.
    pub key: Option<Arc<str>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// A priming event: the cursor moved, nothing applied.
    Primed,
    Applied,
    /// A replayed event at or before the cursor of the same stream: not applied again.
    SkippedReplay,
}

/// A reconnect the client is about to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectPlan {
    pub attempt: u32,
    pub last_event_id: Option<String>,
    pub token: Option<String>,
    /// The token was withheld by the `strip_token` fault.
    pub token_stripped: bool,
}

impl ReconnectPlan {
    /// Attempt `attempt` with the cursor and token held; `strip` withholds the token.
    pub(crate) fn new(
        attempt: u32,
        last_event_id: Option<String>,
        token: Option<String>,
        strip: bool,
    ) -> Self {
        let token_stripped = strip && token.is_some();
        ReconnectPlan {
            attempt,
            last_event_id,
            token: if token_stripped { None } else { token },
            token_stripped,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "phase")]
pub enum Phase {
    /// No stream yet (before the first GET, or after being told to start a new session).
    Idle,
    Connected,
    /// Lost the stream at `since`; the next attempt is due at `next_at` (`None`: one is in
    /// flight).
    Reconnecting {
        since: LabTime,
        attempt: u32,
        next_at: Option<LabTime>,
    },
    /// The retry budget ran out.
    GaveUp {
        at: LabTime,
    },
}

#[derive(Clone, Debug)]
pub struct Client {
    reconciles: bool,
    retry: RetryConfig,
    session: Option<SessionId>,
    bound_stream: Option<String>,
    cursor: Option<String>,
    cursor_truth: Option<EventId>,
    token: Option<String>,
    pending_reset: bool,
    strip_next: bool,
    retry_hint_ms: Option<u64>,
    phase: Phase,
    applied: u64,
    skipped: u64,
    /// Tool calls whose response streams the client follows, oldest first; finished ones are
    /// kept (a few) for the views.
    requests: Vec<RequestStream>,
    /// Why the client is about to start a new session, then why it started its current one
    /// (and when): a newcomer seeing `s1` again must learn ids restart with a session.
    renewing: Option<&'static str>,
    renewed: Option<(LabTime, &'static str)>,
}

/// Finished tool calls kept for the views.
const REQUESTS_KEPT: usize = 8;

/// What the checker learns of a delivery, when the server told the truth about the event.
fn record_delivery(now: LabTime, truth: Option<&EventTruth>, applied: bool, history: &mut History) {
    let Some(truth) = truth else { return };
    let Some(key) = truth.key.clone() else { return };
    history.record(
        now,
        Record::Delivered {
            session: truth.session,
            event: truth.event,
            key,
            applied,
        },
    );
}

/// Whether `wire_id` is at or before `cursor` on the same stream: a replay not to apply again.
fn replays(wire_id: Option<&str>, cursor: Option<&str>) -> bool {
    let incoming = wire_id.and_then(WireCursor::parse);
    let current = cursor.and_then(WireCursor::parse);
    match (incoming, current) {
        (Some(WireCursor::Bare(new)), Some(WireCursor::Bare(cur))) => new <= cur,
        (Some(new), Some(cur)) => match (new.event(), cur.event()) {
            (Some(new_id), Some(cur_id)) => {
                new_id.stream == cur_id.stream && new.key() == cur.key() && new_id.seq <= cur_id.seq
            }
            _ => false,
        },
        _ => false,
    }
}

impl Client {
    pub fn new(policy: Policy, retry: RetryConfig) -> Self {
        Client {
            reconciles: policy == Policy::Fenced,
            retry,
            session: None,
            bound_stream: None,
            cursor: None,
            cursor_truth: None,
            token: None,
            pending_reset: false,
            strip_next: false,
            retry_hint_ms: None,
            phase: Phase::Idle,
            applied: 0,
            skipped: 0,
            requests: Vec::new(),
            renewing: None,
            renewed: None,
        }
    }

    /// A new reconnect schedule (the lab's knobs); an outage under way is measured against it
    /// from its next attempt on.
    pub fn set_retry(&mut self, retry: RetryConfig) {
        self.retry = retry;
    }

    /// The fenced client reconciles (condition 4); the naive one assumes continuity.
    pub fn set_policy(&mut self, policy: Policy) {
        self.reconciles = policy == Policy::Fenced;
    }

    /// `initialize` succeeded: a fresh session, no stream, no cursor.
    pub fn begin_session(&mut self, now: LabTime, session: SessionId, history: &mut History) {
        if self.session.is_some() {
            history.record(now, Record::ClientNewSession);
            let why = self.renewing.take().unwrap_or("the session was gone");
            self.renewed = Some((now, why));
        }
        history.record(now, Record::ClientJoined { session });
        self.session = Some(session);
        self.bound_stream = None;
        self.cursor = None;
        self.cursor_truth = None;
        self.token = None;
        self.pending_reset = false;
        self.phase = Phase::Idle;
        self.requests.clear();
    }

    /// A stream response arrived (status 200, `text/event-stream`). Condition 4 lives here.
    pub fn on_stream_opened(&mut self, headers: StreamHeaders<'_>) -> Continuity {
        self.phase = Phase::Connected;
        self.end_outage_if_over();
        if let Some(token) = headers.token {
            self.token = Some(token.to_owned());
        }
        if !self.reconciles {
            return Continuity::Assumed;
        }
        let same_identity =
            headers.stream.is_some() && headers.stream == self.bound_stream.as_deref();
        if headers.resumed == Some(true) && same_identity {
            return Continuity::Resumed;
        }
        // Never assume continuity: bind to what the server named and forget the old cursor.
        self.bound_stream = headers.stream.map(str::to_owned);
        self.cursor = None;
        self.pending_reset = true;
        Continuity::NewStream
    }

    /// An SSE event arrived whole: `priming` when its data was empty. Applies its side effect
    /// unless it is a replay of something at or before the cursor on the same stream. The
    /// decision reads only the wire; `truth` (when the server sent it) feeds the history.
    pub fn on_event(
        &mut self,
        now: LabTime,
        wire_id: Option<&str>,
        priming: bool,
        truth: Option<EventTruth>,
        history: &mut History,
    ) -> Delivery {
        if priming {
            if let Some(id) = wire_id {
                self.move_cursor(now, id, truth.as_ref(), history);
            }
            return Delivery::Primed;
        }
        if self.reconciles && self.is_replay(wire_id) {
            return self.skip(now, truth.as_ref(), history);
        }
        self.apply(now, truth.as_ref(), history);
        if let Some(id) = wire_id {
            self.move_cursor(now, id, truth.as_ref(), history);
        }
        Delivery::Applied
    }

    /// A replay of what the client already applied: recorded as delivered, not applied again.
    fn skip(
        &mut self,
        now: LabTime,
        truth: Option<&EventTruth>,
        history: &mut History,
    ) -> Delivery {
        self.skipped += 1;
        record_delivery(now, truth, false, history);
        Delivery::SkippedReplay
    }

    /// Applies a side effect and records it.
    fn apply(&mut self, now: LabTime, truth: Option<&EventTruth>, history: &mut History) {
        self.applied += 1;
        record_delivery(now, truth, true, history);
    }

    fn is_replay(&self, wire_id: Option<&str>) -> bool {
        replays(wire_id, self.cursor.as_deref())
    }

    fn move_cursor(
        &mut self,
        now: LabTime,
        wire_id: &str,
        truth: Option<&EventTruth>,
        history: &mut History,
    ) {
        let from = self.cursor_truth;
        self.cursor = Some(wire_id.to_owned());
        let reset = std::mem::take(&mut self.pending_reset);
        self.cursor_truth = truth.map(|t| t.event);
        if let Some(truth) = truth {
            history.record(
                now,
                Record::CursorMoved {
                    session: truth.session,
                    from,
                    to: truth.event,
                    reset,
                },
            );
        }
    }

    /// The server's SSE `retry:` field: the base delay of the next reconnects.
    pub fn on_retry_hint(&mut self, retry_ms: u64) {
        self.retry_hint_ms = Some(retry_ms);
    }

    /// The `strip_token` fault ends with the outage: once no stream is still reconnecting,
    /// every retry the outage caused has gone out without the header.
    fn end_outage_if_over(&mut self) {
        let standalone_waiting = matches!(self.phase, Phase::Reconnecting { .. });
        let request_waiting = self
            .requests
            .iter()
            .any(|r| matches!(r.phase, RequestPhase::Resuming { .. }));
        if !standalone_waiting && !request_waiting {
            self.strip_next = false;
        }
    }

    /// The `strip_token` fault: the next reconnects — of the standalone stream and of any tool
    /// call's stream cut by the same outage — omit the token header, like an HTTP library that
    /// drops a custom header on retry.
    pub fn strip_token_on_next_reconnect(&mut self) {
        self.strip_next = true;
    }

    /// The stream broke. Schedules the first reconnect.
    pub fn on_disconnected(&mut self, now: LabTime) {
        if matches!(
            self.phase,
            Phase::Reconnecting { .. } | Phase::GaveUp { .. }
        ) {
            return;
        }
        let next_at = Some(now.plus(retry::backoff_ms(&self.retry, self.retry_hint_ms, 0)));
        self.phase = Phase::Reconnecting {
            since: now,
            attempt: 0,
            next_at,
        };
    }

    /// When the client wants to be woken: its next reconnect attempt.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        match self.phase {
            Phase::Reconnecting { next_at, .. } => next_at,
            _ => None,
        }
    }

    /// The reconnect to make now, if one is due. Skips the schedule when `force` (the
    /// dashboard's "reconnect now").
    pub fn reconnect_plan(&mut self, now: LabTime, force: bool) -> Option<ReconnectPlan> {
        let Phase::Reconnecting {
            since,
            attempt,
            next_at: Some(due),
        } = self.phase
        else {
            return None;
        };
        if now < due && !force {
            return None;
        }
        let attempt = attempt + 1;
        self.phase = Phase::Reconnecting {
            since,
            attempt,
            next_at: None,
        };
        Some(ReconnectPlan::new(
            attempt,
            self.cursor.clone(),
            self.token.clone(),
            self.strip_next,
        ))
    }

    /// The attempt in flight failed (connection refused, or a rejection that asks for a retry).
    /// Schedules the next one inside the budget, or gives up.
    pub fn on_attempt_failed(&mut self, now: LabTime, history: &mut History) -> Phase {
        if self.phase == Phase::Idle {
            // It failed before the client ever had a stream: the first wait starts now.
            self.on_disconnected(now);
            return self.phase;
        }
        let Phase::Reconnecting { since, attempt, .. } = self.phase else {
            return self.phase;
        };
        self.phase =
            match retry::next_attempt_at(&self.retry, self.retry_hint_ms, since, attempt, now) {
                Some(due) => Phase::Reconnecting {
                    since,
                    attempt,
                    next_at: Some(due),
                },
                None => {
                    history.record(now, Record::ClientGaveUp);
                    Phase::GaveUp { at: now }
                }
            };
        self.phase
    }

    /// A typed rejection arrived. Returns what the client does next.
    pub fn on_rejected(
        &mut self,
        now: LabTime,
        reason: RejectReason,
        history: &mut History,
    ) -> ClientAction {
        match reason.client_action() {
            ClientAction::RetryLater => {
                if let Phase::GaveUp { .. } = self.on_attempt_failed(now, history) {
                    self.renewing = Some("its retry budget ran out");
                    return ClientAction::StartNewSession;
                }
                ClientAction::RetryLater
            }
            ClientAction::StartNewSession => {
                self.phase = Phase::Idle;
                self.renewing = Some(reason.as_str());
                ClientAction::StartNewSession
            }
        }
    }

    /// When the client started its current session in place of an earlier one, and why (a
    /// rejection's reason, a spent retry budget, or a session that was gone).
    pub fn renewed(&self) -> Option<(LabTime, &'static str)> {
        self.renewed
    }

    pub fn reconciles(&self) -> bool {
        self.reconciles
    }
    pub fn session(&self) -> Option<SessionId> {
        self.session
    }
    pub fn bound_stream(&self) -> Option<&str> {
        self.bound_stream.as_deref()
    }
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }
    pub fn cursor_truth(&self) -> Option<EventId> {
        self.cursor_truth
    }
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
    /// Whether the next reconnect will carry the token.
    pub fn will_send_token(&self) -> bool {
        self.token.is_some() && !self.strip_next
    }
    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn retry(&self) -> &RetryConfig {
        &self.retry
    }
    /// Connected, and holding a cursor on the stream it is bound to: a reconnect completed.
    pub fn holds_stream(&self) -> bool {
        self.phase() == Phase::Connected && self.cursor().is_some()
    }

    /// Tool calls whose result the client applied (each once).
    pub fn tool_results(&self) -> u64 {
        self.requests()
            .iter()
            .filter(|r| r.phase == RequestPhase::Done)
            .count() as u64
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Milliseconds of retry budget left at `now` (the whole budget when connected).
    pub fn budget_left_ms(&self, now: LabTime) -> u64 {
        match self.phase {
            Phase::Reconnecting { since, .. } => {
                self.retry.budget_ms.saturating_sub(now.since(since))
            }
            Phase::GaveUp { .. } => 0,
            Phase::Idle | Phase::Connected => self.retry.budget_ms,
        }
    }
}

impl Client {
    /// Canonical form: see [`crate::canon`]. Counters and the renewal note are
    /// left out: only views read them.
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        c.flag(self.reconciles);
        match self.session {
            None => c.tag(0),
            Some(s) => {
                c.tag(1);
                c.session(s);
            }
        }
        c.cursor(self.bound_stream.as_deref());
        c.cursor(self.cursor.as_deref());
        match self.cursor_truth {
            None => c.tag(0),
            Some(e) => {
                c.tag(1);
                c.stream(e.stream);
                c.number(e.seq);
            }
        }
        c.token(self.token.as_deref());
        c.flag(self.pending_reset);
        c.flag(self.strip_next);
        c.number(self.retry_hint_ms.map_or(u64::MAX, |ms| ms));
        canonical_phase(c, self.phase);
        c.number(self.requests.len() as u64);
        for request in &self.requests {
            request.canonical(c);
        }
    }
}

fn canonical_phase(c: &mut crate::canon::Canon, phase: Phase) {
    match phase {
        Phase::Idle => c.tag(0),
        Phase::Connected => c.tag(1),
        Phase::Reconnecting {
            since,
            attempt,
            next_at,
        } => {
            c.tag(2);
            c.time(since);
            c.number(u64::from(attempt));
            c.opt_time(next_at);
        }
        Phase::GaveUp { .. } => c.tag(3),
    }
}
