//! An in-memory wire: one server, one client and the history, joined by a simulated connection
//! that delivers events in order and can be dropped like a NAT drop.
//!
//! It plays the part the real HTTP adapters play, with no sockets and no clock, so the core's
//! tests, property tests and the headless demonstration run the seed incident deterministically.
//! Tool calls, each with a connection of its own, are in `calls`.

mod calls;

use crate::canon::Canon;
use crate::client::{Client, Continuity, EventTruth, StreamHeaders};
use crate::config::{ConfigError, LabConfig};
use crate::history::History;
use crate::ids::{ConnectionId, EventId, SessionId, SplitMix64, StreamId};
use crate::policy::Policy;
use crate::resume::{ResumeDecision, ResumeRequest};
use crate::server::{Opening, Outgoing, Server};
use crate::time::LabTime;
use crate::view::View;
use crate::vocabulary::{ClientAction, OrphanCause};
use crate::work::BackgroundEmitter;
pub use crate::work::ToolSpec;
use calls::Call;
use std::collections::VecDeque;

// The Sim's stand-in for the body the wire spells as JSON-RPC: only keys are judged.
const BACKGROUND_BODY: &str = "{}";

/// An event in flight on the simulated connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub wire_id: String,
    pub truth: EventTruth,
}

impl InFlight {
    fn new(session: SessionId, outgoing: Outgoing) -> Self {
        InFlight {
            wire_id: outgoing.wire_id,
            truth: EventTruth {
                session,
                event: outgoing.event,
                key: outgoing.key,
            },
        }
    }
}

#[derive(Clone, Debug)]
struct Connection {
    id: ConnectionId,
    session: SessionId,
    pending: VecDeque<InFlight>,
}

#[derive(Clone, Debug)]
pub struct Sim {
    now: LabTime,
    server: Server,
    client: Client,
    history: History,
    rng: SplitMix64,
    session: Option<SessionId>,
    connection: Option<Connection>,
    /// Connections the client dropped (NAT drop) whose server side is still open.
    half_open: Vec<(ConnectionId, SessionId)>,
    /// Tool calls (`progress_task`): the server's tool and the client's follower of each.
    calls: Vec<Call>,
    tool: ToolSpec,
    next_request: u64,
    next_connection: u64,
    /// The session's background task; a new session starts its own.
    background: Option<BackgroundEmitter>,
    decisions: Vec<ResumeDecision>,
}

impl Sim {
    /// The seed incident, short, on the default configuration: an event applied, the
    /// connection dropped, the token stripped, a reconnect, one more emit. Under naive the
    /// emit lands on the orphan (a fork) and the client applies the replay again; under fenced
    /// it holds. Where the tests of every layer start.
    pub fn seed_incident(policy: Policy) -> Sim {
        let mut sim = Sim::new(LabConfig::default(), policy, 1).expect("the default is valid");
        sim.start();
        sim.emit_background();
        sim.deliver_all();
        sim.advance(200);
        sim.drop_connection();
        sim.strip_token();
        sim.reconnect(true);
        sim.deliver_all();
        sim.advance(200);
        sim.emit_background();
        sim
    }

    pub fn new(config: LabConfig, policy: Policy, seed: u64) -> Result<Self, ConfigError> {
        Ok(Sim {
            now: LabTime::ZERO,
            server: Server::new(config, policy)?,
            client: Client::new(policy, config.retry),
            history: History::new(config.history_capacity),
            rng: SplitMix64::new(seed),
            session: None,
            connection: None,
            half_open: Vec::new(),
            calls: Vec::new(),
            tool: ToolSpec::default(),
            next_request: 1,
            next_connection: 1,
            background: None,
            decisions: Vec::new(),
        })
    }

    pub fn now(&self) -> LabTime {
        self.now
    }
    pub fn server(&self) -> &Server {
        &self.server
    }
    pub fn client(&self) -> &Client {
        &self.client
    }
    pub fn history(&self) -> &History {
        &self.history
    }
    pub fn session(&self) -> Option<SessionId> {
        self.session
    }
    /// Every GET decision so far, oldest first.
    pub fn decisions(&self) -> &[ResumeDecision] {
        &self.decisions
    }
    pub fn view(&self) -> View {
        View::compose(self.now, &self.server, Some(&self.client), &self.history)
    }
    pub fn in_flight(&self) -> usize {
        self.connection.as_ref().map_or(0, |c| c.pending.len())
    }
    pub fn connected(&self) -> bool {
        self.connection.is_some()
    }

    /// Switches both server and client policy.
    pub fn set_policy(&mut self, policy: Policy) -> Result<(), ConfigError> {
        self.server
            .set_policy(self.now, policy, &mut self.history)?;
        self.client.set_policy(policy);
        Ok(())
    }

    /// `initialize` then a GET for the standalone stream.
    pub fn start(&mut self) {
        let Ok(session) = self
            .server
            .open_session(self.now, &mut self.rng, &mut self.history)
        else {
            return;
        };
        self.session = Some(session);
        self.background = Some(BackgroundEmitter::on_demand(session));
        self.client
            .begin_session(self.now, session, &mut self.history);
        self.get(None, None);
    }

    /// A GET with the given headers, on a fresh connection; its decision is carried out on the
    /// simulated wire and returned.
    pub fn get(
        &mut self,
        token: Option<&str>,
        last_event_id: Option<&str>,
    ) -> Option<ResumeDecision> {
        let session = self.session?;
        let connection = ConnectionId(self.next_connection);
        self.next_connection += 1;
        let request = ResumeRequest {
            session,
            token,
            last_event_id,
            connection,
        };
        let Ok(decision) =
            self.server
                .handle_get(self.now, &request, &mut self.rng, &mut self.history)
        else {
            // 404: the session ended (it idled out). The client initializes a new one.
            self.start_new_session();
            return None;
        };
        self.decisions.push(decision.clone());
        let opening = self.server.opening_for(session, &decision);
        match &decision {
            ResumeDecision::Resume(resumed) => {
                let echo = resumed.echo.map(|e| (e.stream.to_string(), e.resumed));
                self.attach(connection, opening, echo, None);
            }
            ResumeDecision::NewStream(new) => {
                let echo = new.echo.map(|e| (e.stream.to_string(), e.resumed));
                self.attach(connection, opening, echo, Some(new.token.to_string()));
            }
            // An SDK's answer instead of a stream: to the client, an attempt that failed.
            ResumeDecision::Answered(_) => {
                let _ = self.client.on_attempt_failed(self.now, &mut self.history);
            }
            ResumeDecision::Reject(rejected) => {
                match self
                    .client
                    .on_rejected(self.now, rejected.reason(), &mut self.history)
                {
                    ClientAction::RetryLater => {}
                    ClientAction::StartNewSession => self.start_new_session(),
                }
            }
        }
        Some(decision)
    }

    /// A GET the server rules on and carries out, but whose answer goes nowhere: no connection
    /// is attached and the client does not react. For probing what the server would say.
    pub fn probe_get(
        &mut self,
        token: Option<&str>,
        last_event_id: Option<&str>,
        connection: ConnectionId,
    ) -> Option<ResumeDecision> {
        let session = self.session?;
        let request = ResumeRequest {
            session,
            token,
            last_event_id,
            connection,
        };
        let decision = self
            .server
            .handle_get(self.now, &request, &mut self.rng, &mut self.history);
        self.close_if_server_let_go();
        decision.ok()
    }

    /// The adapters close a connection whose stream was resumed elsewhere, fenced or closed;
    /// the client sees the end of its stream and reconnects.
    fn close_if_server_let_go(&mut self) {
        let Some(connection) = &self.connection else {
            return;
        };
        let still_attached = self
            .server
            .session(connection.session)
            .into_iter()
            .flat_map(|s| s.streams())
            .any(|s| s.connection() == Some(connection.id) && s.state().accepts_emits());
        if !still_attached {
            self.connection = None;
            self.client.on_disconnected(self.now);
        }
    }

    /// Attaches the client to a fresh connection that starts with the server's opening.
    fn attach(
        &mut self,
        id: ConnectionId,
        opening: Option<Opening>,
        echo: Option<(String, bool)>,
        token: Option<String>,
    ) {
        let Some(opening) = opening else { return };
        let session = opening.session;
        let pending = opening
            .events()
            .map(|o| InFlight::new(session, o))
            .collect();
        self.connection = Some(Connection {
            id,
            session,
            pending,
        });
        let headers = StreamHeaders {
            stream: echo.as_ref().map(|(s, _)| s.as_str()),
            resumed: echo.as_ref().map(|(_, r)| *r),
            token: token.as_deref(),
        };
        let _: Continuity = self.client.on_stream_opened(headers);
    }

    /// The client abandons the session (DELETE) and initializes a new one.
    fn start_new_session(&mut self) {
        if let Some(old) = self.session.take() {
            let _ = self.server.close_session(self.now, old, &mut self.history);
        }
        self.connection = None;
        // The old session's calls went with it (the client forgets them too).
        self.calls.clear();
        self.start();
    }

    /// Lets go of what only views and narration read (the history's log, the list of
    /// decisions): the explorer keeps labs by the hundred thousand. The verdict is unchanged.
    pub fn compact(&mut self) {
        self.history.keep_verdict_only();
        self.decisions = Vec::new();
    }

    /// The session's background task emits its next event.
    pub fn emit_background(&mut self) {
        let (Some(session), Some(background)) = (self.session, self.background.as_mut()) else {
            return;
        };
        if let Ok(emitted) = background.emit(
            self.now,
            BACKGROUND_BODY,
            &mut self.server,
            &mut self.history,
        ) {
            self.write(session, emitted.event);
        }
    }

    /// The server writes an emitted event to its stream's connection, if that is the one the
    /// client is listening on; anything written to a dropped connection vanishes.
    fn write(&mut self, session: SessionId, event: EventId) {
        let Some(s) = self
            .server
            .session(session)
            .and_then(|s| s.stream(event.stream))
        else {
            return;
        };
        let Some(attached) = s.connection() else {
            return;
        };
        let Some(outgoing) = self.server.outgoing(session, event) else {
            return;
        };
        let connection = self
            .connection
            .iter_mut()
            .chain(self.calls.iter_mut().filter_map(|c| c.connection.as_mut()))
            .find(|c| c.id == attached && c.session == session);
        if let Some(connection) = connection {
            connection
                .pending
                .push_back(InFlight::new(session, outgoing));
        }
    }

    /// Delivers up to `n` in-flight events to the client; returns how many arrived.
    pub fn deliver(&mut self, n: usize) -> usize {
        let mut delivered = 0;
        while delivered < n {
            let Some(event) = self.connection.as_mut().and_then(|c| c.pending.pop_front()) else {
                break;
            };
            self.client.on_event(
                self.now,
                Some(&event.wire_id),
                event.truth.key.is_none(),
                Some(event.truth),
                &mut self.history,
            );
            delivered += 1;
        }
        delivered
    }

    pub fn deliver_all(&mut self) -> usize {
        self.deliver(usize::MAX)
    }

    /// A NAT drop: the client loses the connection and everything in flight; the server is not
    /// told and keeps writing into the void.
    /// The run is over: the checker judges what the client is still owed (see
    /// [`crate::history::Record::RunEnded`]). Deliver what is on the wire first.
    pub fn end_run(&mut self) {
        let reconnecting = matches!(
            self.client.phase(),
            crate::client::Phase::Reconnecting { .. }
        );
        self.history
            .record(self.now, crate::history::Record::RunEnded { reconnecting });
    }

    pub fn drop_connection(&mut self) {
        if let Some(dropped) = self.connection.take() {
            self.half_open.push((dropped.id, dropped.session));
            self.client.on_disconnected(self.now);
        }
        // Every connection goes through the same route: tool calls' are cut too.
        for index in 0..self.calls.len() {
            if let Some(dropped) = self.calls[index].connection.take() {
                self.half_open.push((dropped.id, dropped.session));
                self.calls[index].ends = false;
                let request_id = self.calls[index].request_id;
                self.client.on_request_lost(self.now, request_id);
            }
        }
    }

    /// Whether a dropped connection's server side is still open with a stream attached.
    pub fn half_open(&self) -> bool {
        self.half_open.iter().any(|(id, session)| {
            self.server
                .session(*session)
                .is_some_and(|s| s.streams().iter().any(|st| st.connection() == Some(*id)))
        })
    }

    /// The server side of every dropped connection times out (TCP's user timeout or
    /// keep-alive, in the end): the server sees each close and orphans its stream.
    pub fn expire_half_open(&mut self) {
        for (connection, session) in std::mem::take(&mut self.half_open) {
            self.close_server_side(session, connection);
        }
    }

    /// The server sees `connection` end: every stream attached to it is orphaned.
    fn close_server_side(&mut self, session: SessionId, connection: ConnectionId) {
        let Some(owner) = self.server.session(session) else {
            return;
        };
        let attached: Vec<StreamId> = owner
            .streams()
            .iter()
            .filter(|s| s.connection() == Some(connection))
            .map(|s| s.id())
            .collect();
        for stream in attached {
            self.server.connection_closed(
                self.now,
                session,
                stream,
                connection,
                OrphanCause::ConnectionClosed,
                &mut self.history,
            );
        }
    }

    /// Both sides see the connection end: the server orphans the stream.
    pub fn reset(&mut self) {
        if let Some(connection) = self.connection.take() {
            self.close_server_side(connection.session, connection.id);
            self.client.on_disconnected(self.now);
        }
        for index in 0..self.calls.len() {
            if let Some(connection) = self.calls[index].connection.take() {
                self.close_server_side(connection.session, connection.id);
                self.calls[index].ends = false;
                let request_id = self.calls[index].request_id;
                self.client.on_request_lost(self.now, request_id);
            }
        }
    }

    /// Whether any connection the client reads is open (its stream's, or a tool call's).
    pub fn any_connection(&self) -> bool {
        self.connection.is_some() || self.calls.iter().any(|c| c.connection.is_some())
    }

    pub fn strip_token(&mut self) {
        self.client.strip_token_on_next_reconnect();
    }

    /// The client reconnects now if a reconnect is due (or at once, when `force`).
    pub fn reconnect(&mut self, force: bool) -> Option<ResumeDecision> {
        let plan = self.client.reconnect_plan(self.now, force)?;
        self.get(plan.token.as_deref(), plan.last_event_id.as_deref())
    }

    /// The next instant a timer fires: a grace window or retention ending, a session idling
    /// out, the client's next reconnect.
    pub fn next_deadline(&self) -> Option<LabTime> {
        [self.server.poll_timeout(), self.client.poll_timeout()]
            .into_iter()
            .chain(self.calls.iter().map(|c| c.tool.poll_timeout()))
            .chain(self.calls.iter().map(|c| self.request_due(c.request_id)))
            .flatten()
            .min()
    }

    /// When the client's follower of a tool call wants to resume it.
    fn request_due(&self, request_id: u64) -> Option<LabTime> {
        self.client
            .request(request_id)
            .and_then(|r| r.poll_timeout())
    }

    /// The state's fingerprint up to renaming ([`crate::canon`]).
    pub fn fingerprint(&self) -> u128 {
        let order = self.server.canonical_order(self.session);
        // The client's connections (its stream's, its calls'), then the half-open ones in the
        // order they dropped.
        let held = self
            .connection
            .iter()
            .chain(self.calls.iter().filter_map(|c| c.connection.as_ref()))
            .map(|c| c.id)
            .chain(self.half_open.iter().map(|(id, _)| *id))
            .collect();
        let mut c = Canon::new(self.now, order.clone(), self.server.token_bindings(), held);
        self.server.canonical(&mut c, &order);
        self.client.canonical(&mut c);
        self.history.canonical(&mut c);
        canonical_connection(&mut c, self.connection.as_ref());
        c.number(self.calls.len() as u64);
        for call in &self.calls {
            c.number(call.request_id);
            c.session(call.tool.session());
            c.stream(call.tool.stream());
            c.number(call.tool.done());
            c.opt_time(call.tool.poll_timeout());
            c.flag(call.ends);
            canonical_connection(&mut c, call.connection.as_ref());
        }
        c.number(
            self.background
                .as_ref()
                .map_or(0, BackgroundEmitter::emitted),
        );
        c.fingerprint()
    }

    /// Advances the clock by `ms`, firing grace timers and due reconnects on the way.
    pub fn advance(&mut self, ms: u64) {
        let until = self.now.plus(ms);
        while let Some(next) = self.next_deadline().filter(|t| *t <= until) {
            self.now = self.now.max(next);
            self.server.handle_timeout(self.now, &mut self.history);
            self.close_if_server_let_go();
            self.run_tools();
            if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
                self.reconnect(false);
            }
            for index in 0..self.calls.len() {
                let due = self.request_due(self.calls[index].request_id);
                if due.is_some_and(|t| t <= self.now) {
                    self.resume_call(index);
                }
            }
        }
        self.now = until;
    }
}

/// A connection the client reads, and what is in flight on it.
fn canonical_connection(c: &mut Canon, connection: Option<&Connection>) {
    let Some(connection) = connection else {
        c.tag(0);
        return;
    };
    c.tag(1);
    c.session(connection.session);
    c.number(connection.pending.len() as u64);
    for event in &connection.pending {
        c.cursor(Some(&event.wire_id));
        c.session(event.truth.session);
        c.stream(event.truth.event.stream);
        c.number(event.truth.event.seq);
        match &event.truth.key {
            None => c.tag(0),
            Some(key) => {
                c.tag(1);
                c.key(key);
            }
        }
    }
}
