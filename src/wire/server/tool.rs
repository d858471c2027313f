//! The one tool, `progress_task {steps, delay_ms}`, on the wire: its JSON arguments, its
//! schema, and the JSON-RPC bodies of its steps. The call itself — when each step is due, its
//! key, how the result finishes the stream — is the core's [`forkscope_core::work::ToolCall`],
//! the same machine the Sim and the exhaustive check drive. With `delay_ms: 0` the call streams
//! as fast as the socket takes it.

use crate::wire::{Core, jsonrpc};
use forkscope_core::work::{
    MAX_DELAY_MS, MAX_STEPS, ToolCall, ToolOutcome, ToolSpec, ToolSpecError, ToolStep,
};
use forkscope_core::{LabTime, SessionId, StreamId};
use serde_json::{Value, json};
/// The longest progress token echoed: every progress notification carries it.
pub const MAX_PROGRESS_TOKEN_BYTES: usize = 256;

/// Why a call's arguments or `_meta` were refused (answered with −32602).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidArguments {
    #[error("{field} must be an integer from {min} to {max}")]
    OutOfRange {
        field: &'static str,
        min: u64,
        max: u64,
    },
    #[error(transparent)]
    Spec(#[from] ToolSpecError),
    #[error(
        "_meta.progressToken must be a string of at most {max} bytes or an integer (it is echoed on every progress notification)"
    )]
    ProgressToken { max: usize },
}

/// MCP allows a string or an integer progress token; a bounded one, since each notification
/// echoes it.
pub fn check_progress_token(token: &Value) -> Result<(), InvalidArguments> {
    match token {
        Value::String(s) if s.len() <= MAX_PROGRESS_TOKEN_BYTES => Ok(()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        _ => Err(InvalidArguments::ProgressToken {
            max: MAX_PROGRESS_TOKEN_BYTES,
        }),
    }
}

pub fn schema() -> Value {
    json!({
        "name": "progress_task",
        "title": "Progress task",
        "description": "Works through `steps` steps, sending a progress notification after each (one every `delay_ms` lab milliseconds), then returns. Its response is an SSE stream that can be resumed, also after the result was sent.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "steps": { "type": "integer", "minimum": 1, "maximum": MAX_STEPS, "default": 5 },
                "delay_ms": { "type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS, "default": 100 }
            },
            "additionalProperties": false
        }
    })
}

/// Reads `progress_task`'s arguments; a missing one takes its default (5 steps, 100 ms). The
/// bounds are the core's ([`ToolSpec::checked`]).
pub fn parse_arguments(args: &Value) -> Result<ToolSpec, InvalidArguments> {
    let number = |field: &'static str, default: u64, min: u64, max: u64| match args.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .ok_or(InvalidArguments::OutOfRange { field, min, max }),
    };
    let steps = number("steps", 5, 1, MAX_STEPS)?;
    let delay_ms = number("delay_ms", 100, 0, MAX_DELAY_MS)?;
    Ok(ToolSpec::checked(steps, delay_ms)?)
}

/// A running call: the core's machine, and what the wire echoes on its messages.
#[derive(Debug)]
pub struct RunningCall {
    pub request_id: Value,
    pub progress_token: Option<Value>,
    pub call: ToolCall,
    /// The last step was held back by a full writer: the body will wake the driver.
    blocked: bool,
}

impl RunningCall {
    pub fn new(
        session: SessionId,
        stream: StreamId,
        request_id: Value,
        progress_token: Option<Value>,
        args: ToolSpec,
        now: LabTime,
    ) -> Self {
        RunningCall {
            call: ToolCall::new(session, stream, args, progress_token.is_some(), now),
            request_id,
            progress_token,
            blocked: false,
        }
    }

    pub fn session(&self) -> SessionId {
        self.call.session()
    }

    /// The JSON-RPC message of `step`.
    fn body(&self, step: ToolStep) -> String {
        step_body(&self.request_id, self.progress_token.as_ref(), step)
    }
}

/// The JSON-RPC message of a call's `step`: a progress notification, or the result.
pub fn step_body(request_id: &Value, progress_token: Option<&Value>, step: ToolStep) -> String {
    match step {
        ToolStep::Progress { done, total } => jsonrpc::notification(
            "notifications/progress",
            json!({ "progressToken": progress_token, "progress": done, "total": total, "message": format!("step {done} of {total}") }),
        ),
        ToolStep::Result { steps } => jsonrpc::result(request_id, result(steps)),
    }
}

/// The call's result, after `steps` steps.
pub fn result(steps: u64) -> Value {
    json!({ "content": [{ "type": "text", "text": format!("done: {steps} steps") }], "isError": false })
}

/// Stops the call `request_id` of `session`, if it runs: no result is sent, its stream ends.
/// Returns whether a call was stopped.
pub fn cancel(core: &mut Core, session: SessionId, request_id: &Value, now: LabTime) -> bool {
    let Some(index) = core
        .io
        .tool_calls
        .iter()
        .position(|c| c.session() == session && &c.request_id == request_id)
    else {
        return false;
    };
    let mut running = core.io.tool_calls.swap_remove(index);
    running
        .call
        .cancel(now, &mut core.server, &mut core.history);
    core.io
        .writers
        .finish_stream(session, running.call.stream());
    true
}

/// The server is stopping: every running call ends with a JSON-RPC error that says so (its
/// stream's last event, resumable like a result), so a client can retry the call elsewhere
/// rather than wait on a stream that just ends. Returns how many calls were stopped.
pub fn stop_all(core: &mut Core, now: LabTime) -> usize {
    let calls = std::mem::take(&mut core.io.tool_calls);
    let stopped = calls.len();
    for RunningCall {
        request_id,
        mut call,
        ..
    } in calls
    {
        let (done, steps) = (call.done(), call.spec().steps);
        let body = jsonrpc::error(
            &request_id,
            jsonrpc::SERVER_STOPPING,
            &format!(
                "the server is stopping: the call was cut after {done} of {steps} steps; retry it"
            ),
            Some(json!({ "reason": "server_stopping", "done": done, "steps": steps })),
        );
        let outcome = call.stop(now, body, &mut core.server, &mut core.history);
        write_outcome(core, call.session(), call.stream(), outcome);
    }
    stopped
}

/// Writes what a step emitted; once the call is over its stream's writers finish.
fn write_outcome(
    core: &mut Core,
    session: SessionId,
    stream: StreamId,
    outcome: Option<ToolOutcome>,
) {
    match outcome {
        Some(ToolOutcome::Progressed(event)) => super::write_event(core, session, event),
        Some(ToolOutcome::Finished(last)) => {
            if let Some(event) = last {
                super::write_event(core, session, event);
            }
            core.io.writers.finish_stream(session, stream);
        }
        Some(ToolOutcome::Lost) | None => {}
    }
}

/// Advances every due call, at most `budget` events. Returns the next deadline (`None`: no
/// call is waiting on time).
pub(super) fn run_due(core: &mut Core, now: LabTime, budget: &mut usize) -> Option<LabTime> {
    let mut next: Option<LabTime> = None;
    let mut index = 0;
    while index < core.io.tool_calls.len() {
        core.io.tool_calls[index].blocked = false;
        while *budget > 0 {
            let running = &mut core.io.tool_calls[index];
            let Some(step) = running.call.poll_step(now) else {
                break;
            };
            let (session, stream) = (running.call.session(), running.call.stream());
            if !core.io.writers.has_room(session, stream, 1) {
                core.io.tool_calls[index].blocked = true;
                break;
            }
            *budget -= 1;
            let running = &mut core.io.tool_calls[index];
            let body = running.body(step);
            let outcome = running
                .call
                .take(now, body, &mut core.server, &mut core.history);
            if let (Some(ToolOutcome::Finished(_)), ToolStep::Result { steps }) = (outcome, step) {
                // Said once the result is buffered: a client that lost the stream may resume
                // from here.
                let request = &core.io.tool_calls[index].request_id;
                tracing::info!(session = %session.short(), %stream, %request, steps, "tool call finished");
            }
            write_outcome(core, session, stream, outcome);
        }
        let running = &core.io.tool_calls[index];
        match running.call.poll_timeout() {
            None => {
                core.io.tool_calls.swap_remove(index);
            }
            Some(at) => {
                if !running.blocked {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                index += 1;
            }
        }
    }
    next
}
