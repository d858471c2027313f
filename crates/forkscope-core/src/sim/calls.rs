//! Tool calls in the Sim: the client calls `progress_task`, the core's [`ToolCall`] machine
//! works through its steps on the call's request stream, and the client follows the call's
//! response on a connection of its own, resuming it when it breaks.

use super::{Connection, InFlight, Sim};
use crate::client::{Delivery, RequestPhase, StreamHeaders};
use crate::ids::ConnectionId;
use crate::policy::Policy;
use crate::resume::{ResumeDecision, ResumeRequest};
use crate::vocabulary::{Effect, PayloadKey};
use crate::work::{ToolCall, ToolOutcome, ToolSpec, ToolStep};
use std::collections::VecDeque;

// The Sim's stand-ins for the bodies the wire spells as JSON-RPC: only keys are judged.
const PROGRESS_BODY: &str = r#"{"method":"notifications/progress"}"#;
const RESULT_BODY: &str = r#"{"result":{}}"#;

/// One tool call: the server's tool working through its steps, and the connection the client
/// follows the call's response on (the POST's own, or a resume's).
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub(super) request_id: u64,
    pub(super) tool: ToolCall,
    pub(super) connection: Option<Connection>,
    /// The connection ends once what is in flight is delivered: the stream finished.
    pub(super) ends: bool,
}

impl Sim {
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
            Some(request_id),
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
            // The client always asks for progress.
            tool: ToolCall::new(session, stream, self.tool, true, self.now),
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
    pub(super) fn run_tools(&mut self) {
        for index in 0..self.calls.len() {
            while let Some(step) = self.calls[index].tool.poll_step(self.now) {
                let body = match step {
                    ToolStep::Progress { .. } => PROGRESS_BODY,
                    ToolStep::Result { .. } => RESULT_BODY,
                };
                let call = &mut self.calls[index];
                let outcome = call
                    .tool
                    .take(self.now, body, &mut self.server, &mut self.history);
                let (session, stream) = (call.tool.session(), call.tool.stream());
                match outcome {
                    Some(ToolOutcome::Progressed(event)) => self.write(session, event),
                    Some(ToolOutcome::Finished(result)) => {
                        if let Some(event) = result {
                            self.write(session, event);
                        }
                        // The connection ends after the result only if it follows this very
                        // stream (a naive resume may have put the client on another).
                        let attached = self
                            .server
                            .session(session)
                            .and_then(|s| s.stream(stream))
                            .and_then(|s| s.connection());
                        let call = &mut self.calls[index];
                        call.ends = call
                            .connection
                            .as_ref()
                            .is_some_and(|c| Some(c.id) == attached);
                    }
                    Some(ToolOutcome::Lost) | None => {}
                }
            }
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
        let is_result = event.truth.key.as_deref().is_some_and(|k| {
            k.parse::<PayloadKey>()
                .is_ok_and(|k| matches!(k.effect(), Effect::Result { .. }))
        });
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
    pub(super) fn end_call_connection(&mut self, index: usize) {
        if let Some(connection) = self.calls[index].connection.take() {
            self.close_server_side(connection.session, connection.id);
        }
        self.calls[index].ends = false;
    }

    /// The client resumes a tool call's broken stream, if a resume is due.
    pub(super) fn resume_call(&mut self, index: usize) {
        let (request_id, session) = (
            self.calls[index].request_id,
            self.calls[index].tool.session(),
        );
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
                self.client.on_request_attempt_failed(
                    self.now,
                    request_id,
                    Some(reason),
                    &mut self.history,
                );
                return;
            }
            Ok(ResumeDecision::Answered(_)) | Err(_) => {
                self.client.on_request_attempt_failed(
                    self.now,
                    request_id,
                    None,
                    &mut self.history,
                );
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
}
