//! The server side of the core: sessions, their streams, emits, grace timers, and carrying out
//! the resume decisions of [`crate::resume`].
//!
//! Sans-IO in the quinn style: `handle_*` and `emit*` take the current [`LabTime`], and
//! [`Server::poll_timeout`] tells the caller when to call [`Server::handle_timeout`] next.

mod budget;
mod opening;
mod replay_buffer;
mod session;
mod stream;

pub use crate::vocabulary::{OrphanCause, StreamKind};
pub use opening::{Opening, Outgoing, ReplayEvents};
pub use session::Session;
pub use stream::{Stream, StreamState};

use crate::config::{ConfigError, LabConfig, Tuning};
use crate::event::{Event, Payload};
use crate::history::{History, Record};
use crate::ids::{
    ConnectionId, Entropy, EventId, IdScheme, ResumptionToken, SessionId, StreamId, WireCursor,
};
use crate::policy::Policy;
use crate::resume::{
    self, NewStream, Plan, ResumeDecision, ResumeRejected, ResumeRequest, Resumed, StreamEcho,
    TokenLookup,
};
use crate::time::LabTime;
use budget::ReplayBudget;
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// A request about a session the server does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SessionError {
    #[error("no such session: it never existed, ended, or was deleted; initialize a new one")]
    Unknown,
    #[error(
        "the server already holds {max} sessions; end one (DELETE) or wait for an idle one to expire"
    )]
    Limit {
        max: usize,
        /// When the first idle session expires, if any is idle now.
        free_at: Option<LabTime>,
    },
    #[error(
        "the server's replay memory budget ({budget} bytes) is used up; retry once finished \
         tool calls have been let go"
    )]
    OverBudget { budget: usize },
}

/// An emit the core refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EmitError {
    #[error("no such session")]
    UnknownSession,
    #[error("no stream {0} in this session")]
    UnknownStream(StreamId),
    #[error("late emit refused: stream {0} is fenced")]
    Fenced(StreamId),
    #[error("stream {0} has ended")]
    Closed(StreamId),
    #[error("the session has no stream to emit onto")]
    NoStream,
    #[error("the session already holds {max} streams and none has ended")]
    TooManyStreams { max: usize },
    #[error(
        "the server's replay memory budget ({budget} bytes) is used up; retry once finished \
         tool calls have been let go"
    )]
    OverBudget { budget: usize },
}

/// Where a background emit landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackgroundEmit {
    pub event: EventId,
    /// The emitter's previous stream, if it was fenced and the emit onto it was refused first.
    pub refused_on: Option<StreamId>,
}

/// A stream a timer ended: the adapter stops writing to its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    pub session: SessionId,
    pub stream: StreamId,
    pub state: StreamState,
    pub connection: Option<ConnectionId>,
}

#[derive(Clone, Debug)]
pub struct Server {
    config: LabConfig,
    policy: Policy,
    sessions: BTreeMap<SessionId, Session>,
    /// Token → the one (session, stream) it was minted for.
    tokens: HashMap<ResumptionToken, (SessionId, StreamId)>,
    budget: ReplayBudget,
}

impl Server {
    pub fn new(config: LabConfig, policy: Policy) -> Result<Self, ConfigError> {
        config.validate(policy)?;
        Ok(Server {
            config,
            policy,
            sessions: BTreeMap::new(),
            tokens: HashMap::new(),
            budget: ReplayBudget::new(config.replay_budget_bytes, config.replay_buffer_bytes),
        })
    }

    /// Bytes held for replay across every session, against `replay_budget_bytes`.
    pub fn replay_bytes(&self) -> usize {
        self.budget.used()
    }

    /// When the budget is used up, what refuses new sessions and tool calls.
    fn check_budget(&self) -> Result<(), usize> {
        if self.budget.exhausted() {
            Err(self.budget.max())
        } else {
            Ok(())
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn config(&self) -> &LabConfig {
        &self.config
    }

    /// Changes what a running lab may change (see [`Tuning`]), checked as at start: under the
    /// fenced policy a grace window that is not strictly shorter than the retry budget is
    /// refused (condition 5), and nothing changes. Returns the configuration now in force.
    pub fn tune(&mut self, tuning: &Tuning) -> Result<LabConfig, ConfigError> {
        let next = self.config.tuned(tuning);
        next.validate(self.policy)?;
        self.config = next;
        Ok(next)
    }

    /// Switches policy at run time. Switching to fenced re-checks condition 5, and fences
    /// every standalone stream the naive policy left emitting beside the one the client is
    /// bound to: from the switch on, the single-live-stream invariant holds. Returns the
    /// streams fenced, for the adapter to stop writing to.
    pub fn set_policy(
        &mut self,
        now: LabTime,
        policy: Policy,
        history: &mut History,
    ) -> Result<Vec<(SessionId, StreamId)>, ConfigError> {
        self.config.validate(policy)?;
        let was = std::mem::replace(&mut self.policy, policy);
        if was == policy || policy != Policy::Fenced {
            return Ok(Vec::new());
        }
        let orphans: Vec<(SessionId, StreamId)> = self
            .sessions
            .values()
            .flat_map(|s| {
                s.other_standalone_accepting(s.active)
                    .map(move |stream| (s.id, stream.id))
            })
            .collect();
        for (session, stream) in &orphans {
            self.fence(now, *session, *stream, history);
        }
        Ok(orphans)
    }

    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values()
    }

    pub fn session(&self, id: SessionId) -> Option<&Session> {
        self.sessions.get(&id)
    }

    /// `initialize`: a new session with an unguessable id.
    pub fn open_session(
        &mut self,
        now: LabTime,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<SessionId, SessionError> {
        if self.sessions.len() >= self.config.max_sessions {
            return Err(SessionError::Limit {
                max: self.config.max_sessions,
                free_at: self.next_idle_deadline(),
            });
        }
        self.check_budget()
            .map_err(|budget| SessionError::OverBudget { budget })?;
        let id = loop {
            let id = SessionId::generate(rng);
            if !self.sessions.contains_key(&id) {
                break id;
            }
        };
        self.sessions.insert(id, Session::new(id, now));
        history.record(now, Record::SessionOpened { session: id });
        Ok(id)
    }

    /// `DELETE`: ends the session and every stream in it; their tokens resume nothing after.
    /// Returns the connections the adapter should stop writing to.
    pub fn close_session(
        &mut self,
        now: LabTime,
        id: SessionId,
        history: &mut History,
    ) -> Result<Vec<ConnectionId>, SessionError> {
        let session = self.sessions.remove(&id).ok_or(SessionError::Unknown)?;
        let mut connections = Vec::new();
        for stream in &session.streams {
            self.budget.release(stream.buffer.bytes());
            self.tokens.remove(&stream.token);
            connections.extend(stream.connection);
            if stream.state.accepts_emits() {
                history.record(
                    now,
                    Record::StreamClosed {
                        session: id,
                        stream: stream.id,
                    },
                );
            }
        }
        history.record(now, Record::SessionClosed { session: id });
        Ok(connections)
    }

    /// A request on the session was admitted: it is in use, its idle clock starts over. A
    /// refused request never calls this.
    pub fn touch(&mut self, now: LabTime, session: SessionId) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.last_activity = s.last_activity.max(now);
        }
    }

    /// The earliest moment a session with nothing attached expires.
    fn next_idle_deadline(&self) -> Option<LabTime> {
        let idle = self.config.session_idle_ms;
        self.sessions
            .values()
            .filter(|s| !s.in_use())
            .map(|s| s.last_activity.plus(idle))
            .min()
    }

    /// A GET on the session: a resume, or a request for a new standalone stream. The policy
    /// decides ([`resume::fenced`] or [`resume::naive`]); this carries the decision out
    /// atomically and records it.
    pub fn handle_get(
        &mut self,
        now: LabTime,
        request: &ResumeRequest<'_>,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<ResumeDecision, SessionError> {
        let token = self.lookup_token(request.session, request.token);
        let session = self
            .sessions
            .get(&request.session)
            .ok_or(SessionError::Unknown)?;
        let plan = match self.policy {
            Policy::Fenced => {
                // A keyed id names its stream and carries that stream's key: it identifies the
                // stream only when the key is that stream's, in this session.
                let cursor_key = match request.last_event_id.and_then(WireCursor::parse) {
                    Some(WireCursor::Keyed { event, key }) => match session.stream(event.stream) {
                        Some(s) if s.token.stream_key() == key => TokenLookup::Found(s.id),
                        _ => TokenLookup::Unknown,
                    },
                    _ => TokenLookup::Absent,
                };
                resume::fenced::decide(
                    session,
                    token,
                    cursor_key,
                    request.last_event_id,
                    now,
                    &self.config,
                )
            }
            Policy::Naive => resume::naive::decide(session, token, request.last_event_id),
        };
        let decision = self.carry_out(now, request, plan, rng, history);
        // A rejection changes nothing, the session's idle clock included: a client sending
        // only refused requests must not keep a session alive.
        if !matches!(decision, ResumeDecision::Reject(_)) {
            self.touch(now, request.session);
        }
        Ok(decision)
    }

    fn lookup_token(&self, session: SessionId, raw: Option<&str>) -> TokenLookup {
        let Some(raw) = raw else {
            return TokenLookup::Absent;
        };
        match ResumptionToken::parse(raw) {
            None => TokenLookup::Unknown,
            Some(token) => self.resolve(session, token),
        }
    }

    fn resolve(&self, session: SessionId, token: ResumptionToken) -> TokenLookup {
        match self.tokens.get(&token) {
            None => TokenLookup::Unknown,
            Some((owner, _)) if *owner != session => TokenLookup::OtherSession,
            Some((_, stream)) => TokenLookup::Found(*stream),
        }
    }

    fn carry_out(
        &mut self,
        now: LabTime,
        request: &ResumeRequest<'_>,
        plan: Plan,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> ResumeDecision {
        let session_id = request.session;
        match plan {
            Plan::Reject(rejected) => self.reject(now, session_id, rejected, history),
            Plan::Resume {
                stream,
                after,
                fence,
                proof,
            } => {
                for id in &fence {
                    self.fence(now, session_id, *id, history);
                }
                let policy = self.policy;
                let session = self
                    .sessions
                    .get_mut(&session_id)
                    .expect("planned on this session");
                let target = session.stream_mut(stream).expect("planned on this stream");
                let finished = matches!(target.state, StreamState::Finished { .. });
                if !finished {
                    target.state = StreamState::Live;
                }
                let previous = target.connection.replace(request.connection);
                let replay_len = target
                    .buffer
                    .after(after, target.high_water)
                    .map_or(0, |r| r.len());
                let ids = target.ids;
                let kind = target.kind;
                if kind == StreamKind::Standalone {
                    session.active = Some(stream);
                    retarget_background_if_ended(session);
                }
                history.record(
                    now,
                    Record::Attached {
                        session: session_id,
                        stream,
                        connection: request.connection,
                    },
                );
                history.record(
                    now,
                    Record::ResumeAccepted {
                        session: session_id,
                        stream,
                        after,
                        replay_len,
                        proof,
                    },
                );
                let fenced = policy == Policy::Fenced;
                ResumeDecision::Resume(Resumed {
                    stream,
                    after,
                    replay_len,
                    // Condition 2 at connection level: the old socket gets nothing more.
                    detached: previous.filter(|c| fenced && *c != request.connection),
                    echo: fenced.then_some(StreamEcho {
                        stream,
                        resumed: true,
                    }),
                    ids,
                    fenced: fence,
                    finished,
                })
            }
            Plan::Mint {
                flagged_new,
                backlog_from,
                orphan,
                fence,
                ids,
            } => {
                for id in &fence {
                    self.fence(now, session_id, *id, history);
                }
                if let Some(orphan) = orphan {
                    self.orphan(now, session_id, orphan, OrphanCause::Replaced, history);
                }
                let minted = self.mint_stream(
                    now,
                    session_id,
                    StreamKind::Standalone,
                    ids,
                    flagged_new,
                    Some(request.connection),
                    rng,
                    history,
                );
                let (stream, token) = match minted {
                    Ok(minted) => minted,
                    Err(max) => {
                        return self.reject(
                            now,
                            session_id,
                            ResumeRejected::TooManyStreams { max },
                            history,
                        );
                    }
                };
                let session = self
                    .sessions
                    .get_mut(&session_id)
                    .expect("planned on this session");
                let replay_len = match backlog_from {
                    Some(from) => {
                        copy_backlog(now, session, from, stream, &mut self.budget, history)
                    }
                    None => 0,
                };
                ResumeDecision::NewStream(NewStream {
                    stream,
                    token,
                    echo: flagged_new.then_some(StreamEcho {
                        stream,
                        resumed: false,
                    }),
                    ids,
                    replay_len,
                    orphaned: orphan,
                    fenced: fence,
                })
            }
        }
    }

    fn reject(
        &mut self,
        now: LabTime,
        session: SessionId,
        rejected: ResumeRejected,
        history: &mut History,
    ) -> ResumeDecision {
        history.record(
            now,
            Record::ResumeRejected {
                session,
                reason: rejected.reason(),
            },
        );
        ResumeDecision::Reject(rejected)
    }

    /// Mints a stream, forgetting the oldest ended streams when the session is at its bound.
    /// Errs with the bound when every kept stream is still open.
    #[allow(clippy::too_many_arguments)]
    fn mint_stream(
        &mut self,
        now: LabTime,
        session_id: SessionId,
        kind: StreamKind,
        ids: IdScheme,
        flagged_new: bool,
        connection: Option<ConnectionId>,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<(StreamId, ResumptionToken), usize> {
        let max = self.config.max_streams_per_session;
        let capacity = self.config.replay_buffer;
        let capacity_bytes = self.config.replay_buffer_bytes;
        let session = self
            .sessions
            .get_mut(&session_id)
            .expect("caller checked the session");
        while session.streams.len() >= max {
            let Some(oldest_ended) = session.forgettable() else {
                return Err(max);
            };
            let forgotten = session.streams.remove(oldest_ended);
            self.budget.release(forgotten.buffer.bytes());
            self.tokens.remove(&forgotten.token);
            history.record(
                now,
                Record::StreamForgotten {
                    session: session_id,
                    stream: forgotten.id,
                },
            );
        }
        let token = loop {
            let token = ResumptionToken::generate(rng);
            if !self.tokens.contains_key(&token) {
                break token;
            }
        };
        let id = StreamId(session.next_stream);
        session.next_stream += 1;
        let mut stream = Stream::new(id, kind, token, ids, capacity, capacity_bytes, now);
        stream.connection = connection;
        session.streams.push(stream);
        if kind == StreamKind::Standalone {
            session.active = Some(id);
            retarget_background_if_ended(session);
        }
        self.tokens.insert(token, (session_id, id));
        history.record(
            now,
            Record::StreamOpened {
                session: session_id,
                stream: id,
                stream_kind: kind,
                ids,
                flagged_new,
            },
        );
        if let Some(connection) = connection {
            history.record(
                now,
                Record::Attached {
                    session: session_id,
                    stream: id,
                    connection,
                },
            );
        }
        Ok((id, token))
    }

    /// A POST whose response is an SSE stream (a tool call): a request stream, resumable by its
    /// own token, outside the standalone lineage.
    pub fn open_request_stream(
        &mut self,
        now: LabTime,
        session: SessionId,
        connection: ConnectionId,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<(StreamId, ResumptionToken), EmitError> {
        if !self.sessions.contains_key(&session) {
            return Err(EmitError::UnknownSession);
        }
        self.check_budget()
            .map_err(|budget| EmitError::OverBudget { budget })?;
        let ids = match self.policy {
            Policy::Fenced => resume::fenced::id_scheme(&self.config),
            Policy::Naive => IdScheme::Bare,
        };
        let minted = self
            .mint_stream(
                now,
                session,
                StreamKind::Request,
                ids,
                true,
                Some(connection),
                rng,
                history,
            )
            .map_err(|max| EmitError::TooManyStreams { max })?;
        self.touch(now, session);
        Ok(minted)
    }

    /// Emits onto a given stream. Refused (and recorded) on a fenced stream: a late emit can
    /// never land on a stream the client has abandoned.
    pub fn emit(
        &mut self,
        now: LabTime,
        session_id: SessionId,
        stream_id: StreamId,
        payload: Payload,
        history: &mut History,
    ) -> Result<EventId, EmitError> {
        let session = self
            .sessions
            .get_mut(&session_id)
            .ok_or(EmitError::UnknownSession)?;
        emit_onto(now, session, stream_id, payload, &mut self.budget, history)
    }

    /// Emits from the session's background task. The task stays on the stream it writes to
    /// until that stream ends — which is how, under the naive policy, emits keep landing on an
    /// orphan. When its stream was fenced, the emit there is refused and counted, and the task
    /// moves to the session's active stream.
    pub fn emit_background(
        &mut self,
        now: LabTime,
        session_id: SessionId,
        payload: Payload,
        history: &mut History,
    ) -> Result<BackgroundEmit, EmitError> {
        let session = self
            .sessions
            .get_mut(&session_id)
            .ok_or(EmitError::UnknownSession)?;
        let mut refused_on = None;
        if let Some(target) = session.background_target {
            match emit_onto(
                now,
                session,
                target,
                payload.clone(),
                &mut self.budget,
                history,
            ) {
                Ok(event) => return Ok(BackgroundEmit { event, refused_on }),
                Err(EmitError::Fenced(stream)) => refused_on = Some(stream),
                Err(_) => {}
            }
        }
        session.background_target = session
            .active
            .filter(|id| session.stream(*id).is_some_and(|s| s.state.accepts_emits()));
        let target = session.background_target.ok_or(EmitError::NoStream)?;
        let event = emit_onto(now, session, target, payload, &mut self.budget, history)?;
        Ok(BackgroundEmit { event, refused_on })
    }

    /// The events after `after` (exclusive) on a stream, oldest first, in O(k). Errs when the
    /// stream is unknown or the events were evicted.
    pub fn replay(
        &self,
        session: SessionId,
        stream: StreamId,
        after: u64,
    ) -> Option<impl ExactSizeIterator<Item = &Event> + '_> {
        let stream = self.sessions.get(&session)?.stream(stream)?;
        stream.buffer.after(after, stream.high_water).ok()
    }

    /// The adapter judged a stream's connection gone: it ended (EOF, reset), or stopped taking
    /// bytes (a NAT drop is only noticed that way). A live stream is orphaned: its grace
    /// window starts, recorded with `cause`. Returns whether it was.
    pub fn connection_closed(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        connection: ConnectionId,
        cause: OrphanCause,
        history: &mut History,
    ) -> bool {
        let Some(owner) = self.sessions.get_mut(&session) else {
            return false;
        };
        let Some(target) = owner.stream_mut(stream) else {
            return false;
        };
        if target.connection != Some(connection) {
            return false; // An old connection, already replaced by a resume.
        }
        target.connection = None;
        let live = target.state == StreamState::Live;
        // Its idle clock starts when its last connection ends.
        owner.last_activity = owner.last_activity.max(now);
        if live {
            self.orphan(now, session, stream, cause, history);
        }
        live
    }

    /// A request stream's response was sent: nothing more is emitted on it, but it stays
    /// resumable for the retention window, so a client cut off before the result gets it.
    pub fn finish_request_stream(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        history: &mut History,
    ) {
        let retain_until = now.plus(self.config.retention_ms);
        let Some(target) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.stream_mut(stream))
        else {
            return;
        };
        if target.state.accepts_emits() {
            target.state = StreamState::Finished {
                at: now,
                retain_until,
            };
            history.record(now, Record::StreamClosed { session, stream });
        }
    }

    fn orphan(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        cause: OrphanCause,
        history: &mut History,
    ) {
        let grace = self.config.grace_ms;
        let Some(target) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.stream_mut(stream))
        else {
            return;
        };
        if target.state != StreamState::Live {
            return;
        }
        let grace_deadline = now.plus(grace);
        target.state = StreamState::Orphaned {
            since: now,
            grace_deadline,
            cause,
        };
        history.record(
            now,
            Record::Orphaned {
                session,
                stream,
                grace_deadline,
                cause,
            },
        );
    }

    fn fence(&mut self, now: LabTime, session: SessionId, stream: StreamId, history: &mut History) {
        let Some(target) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.stream_mut(stream))
        else {
            return;
        };
        if Session::ended(target.state) {
            return;
        }
        target.state = StreamState::Fenced { at: now };
        target.connection = None;
        history.record(now, Record::Fenced { session, stream });
    }

    /// Sessions in canonical order ([`crate::model::canonical`]): `first` (the client's), then
    /// the rest by age.
    pub(crate) fn canonical_order(&self, first: Option<SessionId>) -> Vec<SessionId> {
        let mut rest: Vec<&Session> = self
            .sessions
            .values()
            .filter(|s| Some(s.id) != first)
            .collect();
        rest.sort_by_key(|s| (s.opened_at, s.id));
        first
            .filter(|f| self.sessions.contains_key(f))
            .into_iter()
            .chain(rest.into_iter().map(|s| s.id))
            .collect()
    }

    /// Every token the server honours, with the stream it names.
    pub(crate) fn token_bindings(
        &self,
    ) -> impl Iterator<Item = (ResumptionToken, SessionId, StreamId)> + '_ {
        self.tokens
            .iter()
            .map(|(token, (session, stream))| (*token, *session, *stream))
    }

    /// Canonical form: see [`crate::model::canonical`].
    pub(crate) fn canonical(&self, c: &mut crate::model::Canon, order: &[SessionId]) {
        c.tag(self.policy as u8);
        c.number(self.budget.used() as u64);
        c.number(order.len() as u64);
        for id in order {
            if let Some(session) = self.sessions.get(id) {
                session.canonical(c);
            }
        }
    }

    /// The next deadline: a grace window, a finished stream's retention, or an idle session
    /// ending.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        self.sessions
            .values()
            .flat_map(|s| &s.streams)
            .filter_map(|s| match s.state {
                StreamState::Orphaned { grace_deadline, .. } => Some(grace_deadline),
                StreamState::Finished { retain_until, .. } => Some(retain_until),
                _ => None,
            })
            .chain(self.next_idle_deadline())
            .min()
    }

    /// Ends every session idle past its deadline; returns them.
    fn expire_idle_sessions(&mut self, now: LabTime, history: &mut History) -> Vec<SessionId> {
        let idle = self.config.session_idle_ms;
        let expired: Vec<SessionId> = self
            .sessions
            .values()
            .filter(|s| !s.in_use() && s.last_activity.plus(idle) <= now)
            .map(|s| s.id)
            .collect();
        for session in &expired {
            let _ = self.close_session(now, *session, history);
        }
        expired
    }

    /// Ends every orphan whose grace window is over: fenced under the fenced policy, merely
    /// closed under the naive one. Forgets the events of finished streams past retention.
    /// Returns what ended, for the adapter to stop writing.
    pub fn handle_timeout(&mut self, now: LabTime, history: &mut History) -> Vec<Expired> {
        self.expire_idle_sessions(now, history);
        let policy = self.policy;
        let budget = &mut self.budget;
        let mut expired = Vec::new();
        for session in self.sessions.values_mut() {
            for stream in &mut session.streams {
                if let StreamState::Finished { retain_until, .. } = stream.state
                    && retain_until <= now
                {
                    stream.state = StreamState::Closed { at: retain_until };
                    budget.release(stream.buffer.bytes());
                    stream.buffer.clear();
                    expired.push(Expired {
                        session: session.id,
                        stream: stream.id,
                        state: stream.state,
                        connection: stream.connection.take(),
                    });
                    continue;
                }
                let StreamState::Orphaned { grace_deadline, .. } = stream.state else {
                    continue;
                };
                if grace_deadline > now {
                    continue;
                }
                let connection = stream.connection.take();
                let (state, record) = match policy {
                    Policy::Fenced => (
                        StreamState::Fenced { at: grace_deadline },
                        Record::Fenced {
                            session: session.id,
                            stream: stream.id,
                        },
                    ),
                    Policy::Naive => (
                        StreamState::Closed { at: grace_deadline },
                        Record::StreamClosed {
                            session: session.id,
                            stream: stream.id,
                        },
                    ),
                };
                stream.state = state;
                history.record(now, record);
                expired.push(Expired {
                    session: session.id,
                    stream: stream.id,
                    state,
                    connection,
                });
            }
        }
        expired
    }
}

fn emit_onto(
    now: LabTime,
    session: &mut Session,
    stream_id: StreamId,
    payload: Payload,
    budget: &mut ReplayBudget,
    history: &mut History,
) -> Result<EventId, EmitError> {
    let session_id = session.id;
    let stream = session
        .stream_mut(stream_id)
        .ok_or(EmitError::UnknownStream(stream_id))?;
    match stream.state {
        StreamState::Fenced { .. } => {
            history.record(
                now,
                Record::LateEmitRefused {
                    session: session_id,
                    stream: stream_id,
                    key: payload.key,
                },
            );
            Err(EmitError::Fenced(stream_id))
        }
        StreamState::Closed { .. } | StreamState::Finished { .. } => {
            Err(EmitError::Closed(stream_id))
        }
        StreamState::Live | StreamState::Orphaned { .. } => {
            let key = payload.key.clone();
            let event = stream.push(now, payload, budget);
            if stream.kind == StreamKind::Standalone {
                session.counter += 1;
            }
            history.record(
                now,
                Record::Emitted {
                    session: session_id,
                    stream: stream_id,
                    seq: event.seq,
                    key,
                    copied: false,
                },
            );
            Ok(event)
        }
    }
}

/// The naive policy's "replay from its own index 0": the old stream's kept events, copied into
/// the new stream under fresh (reused) sequence numbers.
fn copy_backlog(
    now: LabTime,
    session: &mut Session,
    from: StreamId,
    into: StreamId,
    budget: &mut ReplayBudget,
    history: &mut History,
) -> usize {
    let backlog: Vec<Payload> = match session.stream(from) {
        Some(old) => old.buffer.iter().map(|e| e.payload.clone()).collect(),
        None => return 0,
    };
    let session_id = session.id;
    let stream = session.stream_mut(into).expect("just minted");
    for payload in &backlog {
        let key = payload.key.clone();
        let event = stream.push(now, payload.clone(), budget);
        history.record(
            now,
            Record::Emitted {
                session: session_id,
                stream: into,
                seq: event.seq,
                key,
                copied: true,
            },
        );
    }
    backlog.len()
}

/// Points the background task at the active stream when it has none, or its stream is gone or
/// closed. A fenced target is kept on purpose: the task's next emit there is refused and counted
/// (a late emit), and only then does it move.
fn retarget_background_if_ended(session: &mut Session) {
    let keep = session
        .background_target
        .and_then(|id| session.stream(id))
        .is_some_and(|s| {
            !matches!(
                s.state,
                StreamState::Closed { .. } | StreamState::Finished { .. }
            )
        });
    if !keep {
        session.background_target = session.active;
    }
}
