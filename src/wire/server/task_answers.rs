//! How the tasks extension's requests are answered when they are not answered with a task: an
//! unknown, expired or forgotten task, invalid params, an acknowledgement, and the wall times
//! a task's fields are written in. `tasks.rs` decides; this file spells the answers.

use super::refusal::json_response;
use crate::wire::jsonrpc;
use axum::http::StatusCode;
use axum::response::Response;
use forkscope_core::TaskId;
use forkscope_core::tasks::{META_SEEN, Missing, Seen};
use serde_json::{Value, json};

/// `params.taskId` as a task id; `Err` for anything else (answered as an unknown task).
pub(super) fn task_of(params: &Value) -> Result<TaskId, ()> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .and_then(TaskId::parse)
        .ok_or(())
}

pub(super) fn invalid(id: &Value, message: &str, data: Value) -> Response {
    json_response(
        StatusCode::OK,
        jsonrpc::error(id, jsonrpc::INVALID_PARAMS, message, Some(data)),
    )
}

/// `_meta["io.forkscope/seen"]` of a `tasks/get`: `None` when absent (a stock client sends
/// none, and is read as before).
pub(super) fn seen_of(params: &Value) -> Result<Option<Seen>, &'static str> {
    let Some(seen) = params.pointer("/_meta").and_then(|m| m.get(META_SEEN)) else {
        return Ok(None);
    };
    const WHY: &str = "Invalid params: _meta[\"io.forkscope/seen\"] must be {\"done\": a step count, \"ended\": true or false}";
    let done = seen.get("done").and_then(Value::as_u64).ok_or(WHY)?;
    let ended = seen
        .get("ended")
        .map_or(Some(false), Value::as_bool)
        .ok_or(WHY)?;
    Ok(Some(Seen { done, ended }))
}

/// −32602 for an unknown or expired task, as the extension says, with `data.reason` telling
/// them apart; a store rolled back under what the reader was told is the store's failure: 500,
/// `store_rolled_back`, with both counts, as a runner's write finding it ends its task.
pub(super) fn missing_task(id: &Value, missing: Missing) -> Response {
    if let Missing::Forgotten { holds, seen } = missing {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            jsonrpc::error(
                id,
                jsonrpc::INTERNAL_ERROR,
                &missing.to_string(),
                Some(json!({ "reason": missing.reason(), "holds": holds,
                    "seen": { "done": seen.done, "ended": seen.ended } })),
            ),
        );
    }
    invalid(
        id,
        &format!("Invalid params: {missing}"),
        json!({ "reason": missing.reason() }),
    )
}

/// The empty acknowledgement `tasks/update` and `tasks/cancel` answer with; `outcome`: what a
/// cancel settled as, and why.
pub(super) fn acknowledged(id: &Value, outcome: Option<(&str, &str)>) -> Response {
    let mut result = json!({ "resultType": "complete" });
    if let Some((status, why)) = outcome {
        result["_meta"] = json!({ "io.forkscope/cancel": { "status": status, "why": why } });
    }
    json_response(StatusCode::OK, jsonrpc::result(id, result))
}

/// Milliseconds since the Unix epoch as ISO 8601 in UTC (`2026-12-06T06:28:40.123Z`).
pub fn iso8601(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1_000, unix_ms % 1_000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}
