//! `emit_standalone`: a tool that returns at once, then puts `count` numbered notifications on
//! the session's standalone stream, `delay_ms` apart — the source of standalone events the
//! probe asks a server for, as the SDK probe servers in `interop/` offer it, so a probe of
//! `forkscope serve` exercises the standalone stream as it does theirs. Each event is a
//! background emit on its own schedule, stopped after `count`: its events land where the
//! policy lands background emits (an orphan keeps receiving them under naive; a fenced stream
//! refuses them).

use crate::wire::{Core, jsonrpc};
use forkscope_core::{LabTime, SessionId};
use serde_json::{Value, json};

/// Most notifications one call may ask for.
pub const MAX_COUNT: u64 = 10_000;
/// Longest pause between two of them.
pub const MAX_DELAY_MS: u64 = 60_000;
/// Longest label.
pub const MAX_LABEL: usize = 64;
/// Runs one session may have going at once: a further call is refused.
pub const MAX_RUNS_PER_SESSION: usize = 16;

/// One call's run: its own schedule, its events numbered 1..=`count` in their bodies. Each
/// is emitted as one of the session's background events (its key numbered in the session's
/// one background sequence, so two runs never share a side-effect key).
#[derive(Debug)]
pub struct Emission {
    session: SessionId,
    label: String,
    count: u64,
    delay_ms: u64,
    sent: u64,
    started: LabTime,
}

impl Emission {
    pub fn session(&self) -> SessionId {
        self.session
    }

    fn due_at(&self) -> LabTime {
        self.started.plus(self.delay_ms * (self.sent + 1))
    }
}

/// What a call asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct EmitArgs {
    pub count: u64,
    pub delay_ms: u64,
    pub label: String,
}

pub fn schema() -> Value {
    json!({
        "name": "emit_standalone",
        "title": "Emit on the standalone stream",
        "description": "Returns at once, then sends `count` notifications/resources/updated (uri urn:forkscope-probe:<label>:<n>) on the session's standalone GET stream, one every `delay_ms` lab milliseconds, in the background.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "count": { "type": "integer", "minimum": 1, "maximum": MAX_COUNT, "default": 10 },
                "delay_ms": { "type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS, "default": 20 },
                "label": { "type": "string", "maxLength": MAX_LABEL, "default": "x" }
            },
            "additionalProperties": false
        }
    })
}

/// Why `emit_standalone`'s arguments were refused (answered with −32602).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmitArgsError {
    #[error("{field} must be an integer from {min} to {max}")]
    OutOfRange {
        field: &'static str,
        min: u64,
        max: u64,
    },
    #[error("label must be a string of at most {MAX_LABEL} bytes")]
    Label,
}

/// A session already has its most `emit_standalone` runs going.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_RUNS_PER_SESSION} emit_standalone runs are already going in this session")]
pub struct TooManyRuns;

/// Reads the arguments; a missing one takes its default (10, 20 ms, `x`).
pub fn parse_arguments(args: &Value) -> Result<EmitArgs, EmitArgsError> {
    let number = |field: &'static str, default: u64, min: u64, max: u64| match args.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| (min..=max).contains(n))
            .ok_or(EmitArgsError::OutOfRange { field, min, max }),
    };
    let count = number("count", 10, 1, MAX_COUNT)?;
    let delay_ms = number("delay_ms", 20, 0, MAX_DELAY_MS)?;
    let label = match args.get("label") {
        None | Some(Value::Null) => "x".to_owned(),
        Some(Value::String(s)) if s.len() <= MAX_LABEL && !s.contains(char::is_control) => {
            s.clone()
        }
        Some(_) => return Err(EmitArgsError::Label),
    };
    Ok(EmitArgs {
        count,
        delay_ms,
        label,
    })
}

/// Starts a run on `session`; `Err` when the session has too many going.
pub fn start(
    core: &mut Core,
    session: SessionId,
    args: EmitArgs,
    now: LabTime,
) -> Result<(), TooManyRuns> {
    let runs = &mut core.io.emissions;
    if runs.iter().filter(|r| r.session == session).count() >= MAX_RUNS_PER_SESSION {
        return Err(TooManyRuns);
    }
    runs.push(Emission {
        session,
        label: args.label,
        count: args.count,
        delay_ms: args.delay_ms,
        sent: 0,
        started: now,
    });
    Ok(())
}

/// The notification of event `n` of a run labelled `label`.
fn body(label: &str, n: u64) -> String {
    jsonrpc::notification(
        "notifications/resources/updated",
        json!({ "uri": format!("urn:forkscope-probe:{label}:{n}") }),
    )
}

/// Emits what is due, at most `budget` events, as the background emitter does: only while the
/// stream's writer has room ([`super::background::has_room`]; a run held by a full writer
/// waits for it to drain, with no deadline of its own). A finished run, or one whose session is
/// gone, is dropped. Returns the next deadline.
pub(super) fn run_due(core: &mut Core, now: LabTime, budget: &mut usize) -> Option<LabTime> {
    let mut next: Option<LabTime> = None;
    let mut i = 0;
    while i < core.io.emissions.len() {
        let run = &core.io.emissions[i];
        let session = run.session;
        if run.sent >= run.count || core.server.session(session).is_none() {
            core.io.emissions.swap_remove(i);
            continue;
        }
        if run.due_at() > now || *budget == 0 {
            next = Some(next.map_or(run.due_at(), |n| n.min(run.due_at())));
            i += 1;
            continue;
        }
        if !super::background::has_room(core, session) {
            i += 1;
            continue;
        }
        *budget -= 1;
        let body = body(&run.label, run.sent + 1);
        core.io.emissions[i].sent += 1;
        // An emit with no stream to land on is skipped, as the background's is.
        let _ = super::background::emit_body(core, session, now, body, None);
    }
    next
}
