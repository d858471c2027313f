//! The server side of the core: sessions, their streams, emits, grace timers, and carrying out
//! the resume decisions of [`crate::resume`].
//!
//! The `Server` and its sessions are here; what it does is split by concern: carrying out a
//! GET's decision (`reconnects`), emits (`emits`), and a stream's life after it opened:
//! orphaning, fencing, timers (`lifecycle`).
//!
//! Sans-IO in the quinn style: `handle_*` and `emit*` take the current [`LabTime`], and
//! [`Server::poll_timeout`] tells the caller when to call [`Server::handle_timeout`] next.

mod emits;
mod lifecycle;
mod opening;
mod reconnects;

pub use crate::state::{Session, Stream, StreamState};
pub use crate::vocabulary::{OrphanCause, StreamKind};
pub use opening::{Opening, Outgoing, ReplayEvents};

use crate::config::{ConfigError, LabConfig, Tuning};
use crate::history::{History, Record};
use crate::ids::{ConnectionId, Entropy, EventId, ResumptionToken, SessionId, StreamId};
use crate::policy::Policy;
use crate::state::ReplayBudget;
use crate::time::LabTime;
use crate::vocabulary::LogLevel;
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// The revisions a server under `policy` speaks of those `asked` for (`--protocol`): 2026-07-28
/// only where its SDK speaks it ([`crate::tasks::sdk::ModernQuirks`]). Every server, lab and
/// `serve` asks this one rule.
pub fn protocols_spoken(
    asked: crate::revision::Protocols,
    policy: Policy,
) -> crate::revision::Protocols {
    asked.spoken(crate::tasks::sdk::ModernQuirks::of(policy).speaks)
}

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
    /// A log message less severe than the level the client set: not sent, by its choice.
    #[error("a {severity} log message is below the level the client set ({set})")]
    BelowLogLevel {
        severity: &'static str,
        set: &'static str,
    },
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

    /// `logging/setLevel`: the session's client is sent log messages at `level` or more severe
    /// from now on. `false` when the session is unknown.
    pub fn set_log_level(&mut self, id: SessionId, level: LogLevel) -> bool {
        match self.sessions.get_mut(&id) {
            Some(session) => {
                session.log_level = Some(level);
                true
            }
            None => false,
        }
    }

    /// Whether a log message of `severity` may be sent to the session's client (an error says
    /// why not; an unknown session is the caller's to find).
    pub fn log_allows(&self, id: SessionId, severity: LogLevel) -> Result<(), EmitError> {
        let set = self.sessions.get(&id).and_then(Session::log_level);
        if LogLevel::sends(set, severity) {
            Ok(())
        } else {
            Err(EmitError::BelowLogLevel {
                severity: severity.as_str(),
                set: set.map_or("none", LogLevel::as_str),
            })
        }
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

    /// Sessions in canonical order ([`crate::canon`]): `first` (the client's), then
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

    /// A stream of a session, to change: the lookup every transition starts from.
    pub(crate) fn stream_mut(
        &mut self,
        session: SessionId,
        stream: StreamId,
    ) -> Option<&mut Stream> {
        self.sessions.get_mut(&session)?.stream_mut(stream)
    }

    /// Canonical form: see [`crate::canon`].
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon, order: &[SessionId]) {
        c.tag(self.policy as u8);
        c.number(self.budget.used() as u64);
        c.number(order.len() as u64);
        for id in order {
            if let Some(session) = self.sessions.get(id) {
                session.canonical(c);
            }
        }
    }
}
