//! The one tool, `progress_task {steps, delay_ms}`: a `notifications/progress` per step on the
//! call's own SSE response stream, then the result. `delay_ms` is honoured exactly in lab time;
//! with `delay_ms: 0` the call streams as fast as the socket takes it.

use crate::wire::{Core, jsonrpc};
use forkscope_core::{LabTime, Payload, SessionId, StreamId};
use serde_json::{Value, json};

/// Bounds on the tool's arguments.
pub const MAX_STEPS: u64 = 10_000;
pub const MAX_DELAY_MS: u64 = 60_000;
/// The longest a call may run (`steps × delay_ms`): a call holds a stream slot until it ends.
pub const MAX_CALL_MS: u64 = 10 * 60 * 1_000;
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
    #[error("steps × delay_ms is {total_ms} ms; a call may run at most {max_ms} ms")]
    TooLong { total_ms: u64, max_ms: u64 },
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

/// A call's arguments, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arguments {
    pub steps: u64,
    pub delay_ms: u64,
}

impl Arguments {
    pub fn parse(args: &Value) -> Result<Arguments, InvalidArguments> {
        let number = |field: &'static str, default: u64, min: u64, max: u64| match args.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|n| (min..=max).contains(n))
                .ok_or(InvalidArguments::OutOfRange { field, min, max }),
        };
        let args = Arguments {
            steps: number("steps", 5, 1, MAX_STEPS)?,
            delay_ms: number("delay_ms", 100, 0, MAX_DELAY_MS)?,
        };
        let total_ms = args.steps.saturating_mul(args.delay_ms);
        if total_ms > MAX_CALL_MS {
            return Err(InvalidArguments::TooLong {
                total_ms,
                max_ms: MAX_CALL_MS,
            });
        }
        Ok(args)
    }
}

/// A running call.
#[derive(Debug)]
pub struct ToolCall {
    pub session: SessionId,
    pub stream: StreamId,
    pub request_id: Value,
    pub progress_token: Option<Value>,
    pub args: Arguments,
    pub done: u64,
    pub next_at: LabTime,
    /// The last step was held back by a full writer: the body will wake the driver.
    blocked: bool,
}

impl ToolCall {
    pub fn new(
        session: SessionId,
        stream: StreamId,
        request_id: Value,
        progress_token: Option<Value>,
        args: Arguments,
        now: LabTime,
    ) -> Self {
        ToolCall {
            session,
            stream,
            request_id,
            progress_token,
            args,
            done: 0,
            next_at: now.plus(args.delay_ms),
            blocked: false,
        }
    }
}

/// Stops the call `request_id` of `session`, if it runs: no result is sent, its stream ends.
/// Returns whether a call was stopped.
pub fn cancel(core: &mut Core, session: SessionId, request_id: &Value, now: LabTime) -> bool {
    let Some(index) = core
        .io
        .tool_calls
        .iter()
        .position(|c| c.session == session && &c.request_id == request_id)
    else {
        return false;
    };
    let call = core.io.tool_calls.swap_remove(index);
    core.server
        .finish_request_stream(now, session, call.stream, &mut core.history);
    core.io.writers.finish_stream(session, call.stream);
    true
}

/// The server is stopping: every running call ends with a JSON-RPC error that says so (its
/// stream's last event, resumable like a result), so a client can retry the call elsewhere
/// rather than wait on a stream that just ends. Returns how many calls were stopped.
pub fn stop_all(core: &mut Core, now: LabTime) -> usize {
    let calls = std::mem::take(&mut core.io.tool_calls);
    for call in &calls {
        let (session, stream) = (call.session, call.stream);
        let body = jsonrpc::error(
            &call.request_id,
            jsonrpc::SERVER_STOPPING,
            &format!(
                "the server is stopping: the call was cut after {} of {} steps; retry it",
                call.done, call.args.steps
            ),
            Some(
                json!({ "reason": "server_stopping", "done": call.done, "steps": call.args.steps }),
            ),
        );
        let payload = Payload::new(
            format!("{}:call{}:stopped", session.short(), stream.0),
            body,
        );
        end_with(core, now, session, stream, payload);
    }
    calls.len()
}

/// Writes a call's last message (its result, or why it stopped) and completes its stream, which
/// stays resumable for its retention window.
fn end_with(core: &mut Core, now: LabTime, session: SessionId, stream: StreamId, last: Payload) {
    if let Ok(event) = core
        .server
        .emit(now, session, stream, last, &mut core.history)
    {
        super::write_event(core, session, event);
    }
    core.server
        .finish_request_stream(now, session, stream, &mut core.history);
    core.io.writers.finish_stream(session, stream);
}

/// What one step did.
enum Step {
    Continue,
    /// The result was written, or the stream went away under the call: it is over.
    Over,
}

/// Advances every due call, at most `budget` events. Returns the next deadline (`None`: no
/// call is waiting on time).
pub(super) fn run_due(core: &mut Core, now: LabTime, budget: &mut usize) -> Option<LabTime> {
    let mut next: Option<LabTime> = None;
    let mut index = 0;
    while index < core.io.tool_calls.len() {
        let (session, stream) = {
            let call = &mut core.io.tool_calls[index];
            call.blocked = false;
            (call.session, call.stream)
        };
        let mut over = false;
        while *budget > 0 && core.io.tool_calls[index].next_at <= now {
            if !core.io.writers.has_room(session, stream, 1) {
                core.io.tool_calls[index].blocked = true;
                break;
            }
            *budget -= 1;
            if let Step::Over = step(core, index, now) {
                over = true;
                break;
            }
        }
        if over {
            core.io.tool_calls.swap_remove(index);
            continue;
        }
        let call = &core.io.tool_calls[index];
        if !call.blocked {
            next = Some(next.map_or(call.next_at, |n| n.min(call.next_at)));
        }
        index += 1;
    }
    next
}

fn step(core: &mut Core, index: usize, now: LabTime) -> Step {
    let call = &mut core.io.tool_calls[index];
    let (session, stream) = (call.session, call.stream);
    let short = session.short();
    if call.done == call.args.steps {
        let (request, steps) = (call.request_id.clone(), call.args.steps);
        let text = format!("done: {steps} steps");
        let body = jsonrpc::result(
            &call.request_id,
            json!({ "content": [{ "type": "text", "text": text }], "isError": false }),
        );
        let payload = Payload::new(format!("{short}:call{}:result", stream.0), body);
        end_with(core, now, session, stream, payload);
        // Said once the result is buffered: a client that lost the stream may resume from here.
        tracing::info!(session = %short, %stream, %request, steps, "tool call finished");
        return Step::Over;
    }
    call.done += 1;
    // Exact in lab time: the next step is due one delay after this one was, not after now.
    call.next_at = call.next_at.plus(call.args.delay_ms);
    let Some(token) = call.progress_token.clone() else {
        return Step::Continue; // No progress token: the step is silent.
    };
    let (done, steps) = (call.done, call.args.steps);
    let payload = Payload::new(
        format!("{short}:call{}:progress{done}", stream.0),
        jsonrpc::notification(
            "notifications/progress",
            json!({ "progressToken": token, "progress": done, "total": steps, "message": format!("step {done} of {steps}") }),
        ),
    );
    match core
        .server
        .emit(now, session, stream, payload, &mut core.history)
    {
        Ok(event) => {
            super::write_event(core, session, event);
            Step::Continue
        }
        // The stream was fenced or ended under it: the call is over.
        Err(_) => Step::Over,
    }
}
