//! An in-memory wire: one server, one client and the history, joined by a simulated connection
//! that delivers events in order and can be dropped like a NAT drop.
//!
//! It plays the part the real HTTP adapters play, with no sockets and no clock, so the core's
//! tests, property tests and the headless demonstration run the seed incident deterministically.

use crate::canon::Canon;
use crate::client::{Client, Continuity, Delivery, EventTruth, RequestPhase, StreamHeaders};
use crate::config::{ConfigError, LabConfig};
use crate::event::Payload;
use crate::history::History;
use crate::ids::{ConnectionId, EventId, SessionId, SplitMix64, StreamId};
use crate::policy::Policy;
use crate::resume::{ClientAction, ResumeDecision, ResumeRequest};
use crate::server::{Opening, Outgoing, Server};
use crate::time::LabTime;
use crate::view::View;
use std::collections::VecDeque;

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

/// One tool call: the server's tool working through its steps, and the connection the client
/// follows the call's response on (the POST's own, or a resume's).
#[derive(Clone, Debug)]
struct Call {
    request_id: u64,
    session: SessionId,
    /// The call's request stream.
    stream: StreamId,
    steps_done: u64,
    /// When the tool takes its next step; `None` once it sent its result (or its stream ended).
    next_at: Option<LabTime>,
    connection: Option<Connection>,
    /// The connection ends once what is in flight is delivered: the stream finished.
    ends: bool,
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
    background_emitted: u64,
    decisions: Vec<ResumeDecision>,
}

impl Sim {
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
            background_emitted: 0,
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

    /// What `progress_task` does from now on.
    pub fn set_tool(&mut self, tool: ToolSpec) {
        self.tool = tool;
    }

    pub fn tool(&self) -> ToolSpec {
        self.tool
    }

    /// Whether a tool call is under way: the client still follows it.
    pub fn call_in_progress(&self) -> bool {
        self.calls.iter().any(|c| {
            self.client.request(c.request_id).is_some_and(|r| {
                matches!(
                    r.phase,
                    RequestPhase::Streaming | RequestPhase::Resuming { .. }
                )
            })
        })
    }

    /// Events in flight on tool calls' connections.
    pub fn call_in_flight(&self) -> usize {
        self.calls
            .iter()
            .filter_map(|c| c.connection.as_ref())
            .map(|c| c.pending.len())
            .sum()
    }

    /// The client calls `progress_task`: a POST whose response is the call's request stream,
    /// on a connection of its own. Returns the request id.
    pub fn call_tool(&mut self) -> Option<u64> {
        let session = self.session?;
        let request_id = self.next_request;
        self.next_request += 1;
        self.client.begin_request(request_id, None);
        let connection = ConnectionId(self.next_connection);
        self.next_connection += 1;
        let Ok((stream, token)) = self.server.open_request_stream(
            self.now,
            session,
            connection,
            &mut self.rng,
            &mut self.history,
        ) else {
            // Refused (limits, budget): the call fails at once.
            self.client.on_request_done(request_id);
            return Some(request_id);
        };
        let pending = self
            .server
            .opening_of_request_stream(session, stream)
            .map(|o| o.events().map(|e| InFlight::new(session, e)).collect())
            .unwrap_or_default();
        self.calls.push(Call {
            request_id,
            session,
            stream,
            steps_done: 0,
            next_at: Some(self.now.plus(self.tool.delay_ms)),
            connection: Some(Connection {
                id: connection,
                session,
                pending,
            }),
            ends: false,
        });
        // The fenced server names the stream and says it is new; the naive one says nothing.
        let echo = (self.server.policy() == Policy::Fenced).then(|| stream.to_string());
        let token = token.to_string();
        self.client.on_request_stream_opened(
            request_id,
            StreamHeaders {
                stream: echo.as_deref(),
                resumed: echo.as_ref().map(|_| false),
                token: Some(&token),
            },
        );
        Some(request_id)
    }

    /// Every tool whose next step is due takes it: a progress notification, or, after the
    /// last, the result, after which the call's stream finishes (resumable for retention).
    fn run_tools(&mut self) {
        for index in 0..self.calls.len() {
            while self.calls[index].next_at.is_some_and(|t| t <= self.now) {
                self.tool_step(index);
            }
        }
    }

    fn tool_step(&mut self, index: usize) {
        let (session, stream, done) = {
            let call = &self.calls[index];
            (call.session, call.stream, call.steps_done)
        };
        let short = session.short();
        if done == self.tool.steps {
            let payload = Payload::new(
                format!("{short}:call{}:result", stream.0),
                r#"{"result":{}}"#,
            );
            if let Ok(event) =
                self.server
                    .emit(self.now, session, stream, payload, &mut self.history)
            {
                self.write(session, event);
            }
            self.server
                .finish_request_stream(self.now, session, stream, &mut self.history);
            // The connection ends after the result only if it follows this very stream (a
            // naive resume may have put the client on another).
            let attached = self
                .server
                .session(session)
                .and_then(|s| s.stream(stream))
                .and_then(|s| s.connection());
            let call = &mut self.calls[index];
            call.next_at = None;
            call.ends = call
                .connection
                .as_ref()
                .is_some_and(|c| Some(c.id) == attached);
            return;
        }
        let payload = Payload::new(
            format!("{short}:call{}:progress{}", stream.0, done + 1),
            r#"{"method":"notifications/progress"}"#,
        );
        let emitted = self
            .server
            .emit(self.now, session, stream, payload, &mut self.history);
        let call = &mut self.calls[index];
        call.steps_done += 1;
        call.next_at = call.next_at.map(|t| t.plus(self.tool.delay_ms));
        match emitted {
            Ok(event) => self.write(session, event),
            // Its stream was fenced or ended under it: the call is over.
            Err(_) => self.calls[index].next_at = None,
        }
    }

    /// Delivers the next event in flight on a tool call's connection; returns whether one
    /// arrived.
    pub fn deliver_call(&mut self) -> bool {
        let Some(index) = self
            .calls
            .iter()
            .position(|c| c.connection.as_ref().is_some_and(|k| !k.pending.is_empty()))
        else {
            return false;
        };
        let request_id = self.calls[index].request_id;
        let Some(event) = self.calls[index]
            .connection
            .as_mut()
            .and_then(|c| c.pending.pop_front())
        else {
            return false;
        };
        let is_result = event
            .truth
            .key
            .as_deref()
            .is_some_and(|k| k.ends_with(":result"));
        let delivery = self.client.on_request_event(
            self.now,
            request_id,
            Some(&event.wire_id),
            event.truth.key.is_none(),
            Some(event.truth),
            &mut self.history,
        );
        if is_result && delivery == Delivery::Applied {
            // The POST's answer arrived: the client stops following the call.
            self.client.on_request_done(request_id);
            self.end_call_connection(index);
        } else if self.calls[index].ends
            && self.calls[index]
                .connection
                .as_ref()
                .is_some_and(|c| c.pending.is_empty())
        {
            // A finished stream's connection ends after its last event.
            self.end_call_connection(index);
            self.client.on_request_lost(self.now, request_id);
        }
        true
    }

    /// The call's connection closes cleanly: both sides see it.
    fn end_call_connection(&mut self, index: usize) {
        if let Some(connection) = self.calls[index].connection.take() {
            self.close_server_side(connection.session, connection.id);
        }
        self.calls[index].ends = false;
    }

    /// The client resumes a tool call's broken stream, if a resume is due.
    fn resume_call(&mut self, index: usize) {
        let (request_id, session) = (self.calls[index].request_id, self.calls[index].session);
        let Some(plan) = self.client.request_resume_plan(self.now, request_id) else {
            return;
        };
        let connection = ConnectionId(self.next_connection);
        self.next_connection += 1;
        let request = ResumeRequest {
            session,
            token: plan.token.as_deref(),
            last_event_id: plan.last_event_id.as_deref(),
            connection,
        };
        let decision = self
            .server
            .handle_get(self.now, &request, &mut self.rng, &mut self.history);
        let (echo, token) = match &decision {
            Ok(ResumeDecision::Resume(r)) => (r.echo, None),
            Ok(ResumeDecision::NewStream(n)) => (n.echo, Some(n.token.to_string())),
            Ok(ResumeDecision::Reject(rejected)) => {
                let reason = rejected.reason();
                self.client
                    .on_request_attempt_failed(self.now, request_id, Some(reason));
                return;
            }
            Err(_) => {
                self.client
                    .on_request_attempt_failed(self.now, request_id, None);
                return;
            }
        };
        let Ok(decision) = decision else { return };
        self.decisions.push(decision.clone());
        let Some(opening) = self.server.opening_for(session, &decision) else {
            return;
        };
        let ends = opening.ends;
        let pending: VecDeque<InFlight> = opening
            .events()
            .map(|o| InFlight::new(session, o))
            .collect();
        let call = &mut self.calls[index];
        call.ends = ends;
        call.connection = Some(Connection {
            id: connection,
            session,
            pending,
        });
        let stream = echo.map(|e| e.stream.to_string());
        self.client.on_request_stream_opened(
            request_id,
            StreamHeaders {
                stream: stream.as_deref(),
                resumed: echo.map(|e| e.resumed),
                token: token.as_deref(),
            },
        );
        if ends
            && self.calls[index]
                .connection
                .as_ref()
                .is_some_and(|c| c.pending.is_empty())
        {
            self.end_call_connection(index);
            self.client.on_request_lost(self.now, request_id);
        }
    }

    /// The session's background task emits its next event.
    pub fn emit_background(&mut self) {
        let Some(session) = self.session else { return };
        self.background_emitted += 1;
        let key = format!("{}:bg:{}", session.short(), self.background_emitted);
        let payload = Payload::new(key.as_str(), "{}");
        if let Ok(emitted) =
            self.server
                .emit_background(self.now, session, payload, &mut self.history)
        {
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
                crate::server::OrphanCause::ConnectionClosed,
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
            .chain(self.calls.iter().map(|c| c.next_at))
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
            c.session(call.session);
            c.stream(call.stream);
            c.number(call.steps_done);
            c.opt_time(call.next_at);
            c.flag(call.ends);
            canonical_connection(&mut c, call.connection.as_ref());
        }
        c.number(self.background_emitted);
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
