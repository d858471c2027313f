//! How the tasks extension's requests are answered: a task as JSON (its status message, and
//! the error a failed one carries), and the answers that are not a task — an unknown, expired
//! or forgotten task, invalid params, an acknowledgement — with the wall times a task's fields
//! are written in. `tasks.rs` decides; this file spells the answers.

use super::refusal::json_response;
use crate::wire::jsonrpc;
use axum::http::StatusCode;
use axum::response::Response;
use forkscope_core::tasks::{EndedBy, META_SEEN, Missing, POLL_INTERVAL_MS, Seen, Status, Task};
use forkscope_core::{LabTime, TaskId};
use serde_json::{Value, json};

/// `task` as the extension spells it; `origin_ms`: Unix milliseconds at the store clock's zero.
pub(super) fn task_json(task: &Task, origin_ms: u64) -> Value {
    let at = |t: LabTime| iso8601(origin_ms + t.as_millis());
    let mut json = json!({
        "taskId": task.id.to_string(),
        "status": task.status.name(),
        "statusMessage": status_message(task),
        "createdAt": at(task.created_at),
        "lastUpdatedAt": at(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": POLL_INTERVAL_MS,
    });
    if let Some(outcome) = &task.outcome
        && let Ok(outcome) = serde_json::from_str::<Value>(outcome)
    {
        let field = if task.status == Status::Failed {
            "error"
        } else {
            "result"
        };
        json[field] = outcome;
    } else if task.status == Status::Failed {
        // The extension's `failed` carries the JSON-RPC error that ended it: for an end the
        // table gave it (the TTL, a rollback), one that says so.
        let data = match task.ended_by {
            Some(EndedBy::RolledBack { holds, applied }) => {
                json!({ "reason": "store_rolled_back", "holds": holds, "applied": applied })
            }
            _ => json!({ "reason": "ttl_expired", "done": task.done, "steps": task.steps }),
        };
        json["error"] = json!({
            "code": jsonrpc::INTERNAL_ERROR,
            "message": status_message(task),
            "data": data,
        });
    }
    json
}

/// A task's `statusMessage`, and the message of the error a failed one carries: one spelling
/// of each end, whoever wrote it (a rollback's, by its runner or by a read, on either store).
fn status_message(task: &Task) -> String {
    match (task.status, task.ended_by) {
        (Status::Working, _) => format!("step {} of {}", task.done, task.steps),
        (Status::Completed, _) => format!("done: {} steps", task.steps),
        (Status::Cancelled, _) => format!("cancelled after {} of {} steps", task.done, task.steps),
        (Status::Failed, Some(EndedBy::Ttl)) => format!(
            "its TTL ran out after {} of {} steps; no step ran after",
            task.done, task.steps
        ),
        (Status::Failed, Some(EndedBy::RolledBack { holds, applied })) if holds < applied => {
            format!(
                "the store was rolled back under this task: it holds {holds} steps, though {applied} were applied; none runs again"
            )
        }
        // As many steps held as were read: what the store forgot is the end.
        (Status::Failed, Some(EndedBy::RolledBack { holds, .. })) => format!(
            "the store was rolled back under this task: it holds {holds} steps and no end, though its end was read; none runs again"
        ),
        (Status::Failed, _) => format!("failed after {} of {} steps", task.done, task.steps),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::tasks::Runner;

    fn failed(ended_by: EndedBy) -> Task {
        Task {
            id: TaskId::parse("0123456789abcdef0123456789abcdef").unwrap(),
            status: Status::Failed,
            created_at: LabTime::ZERO,
            updated_at: LabTime::from_millis(5),
            ttl_ms: 5,
            steps: 4,
            delay_ms: 10,
            done: 2,
            runner: Runner(0),
            epoch: 1,
            lease_until: LabTime::ZERO,
            outcome: None,
            ended_by: Some(ended_by),
        }
    }

    /// A task the TTL failed is answered with the `error` the extension requires of `failed`.
    #[test]
    fn a_task_failed_by_its_ttl_carries_an_error() {
        let json = task_json(&failed(EndedBy::Ttl), 0);
        assert_eq!(json["status"], "failed");
        assert_eq!(json["error"]["data"]["reason"], "ttl_expired");
        assert_eq!(json["error"]["data"]["done"], 2);
        assert!(json.get("result").is_none());
    }

    /// A task a rollback ended carries one error, whoever found the rollback: both counts, and
    /// the message its status says.
    #[test]
    fn a_task_a_rollback_ended_carries_both_counts() {
        let json = task_json(
            &failed(EndedBy::RolledBack {
                holds: 2,
                applied: 3,
            }),
            0,
        );
        assert_eq!(
            json["error"],
            json!({ "code": jsonrpc::INTERNAL_ERROR, "message": json["statusMessage"],
                "data": { "reason": "store_rolled_back", "holds": 2, "applied": 3 } })
        );
        assert_eq!(
            json["statusMessage"],
            "the store was rolled back under this task: it holds 2 steps, though 3 were applied; none runs again"
        );
        let end = task_json(
            &failed(EndedBy::RolledBack {
                holds: 2,
                applied: 2,
            }),
            0,
        );
        assert!(
            end["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no end, though its end was read")),
            "{end}"
        );
    }

    #[test]
    fn timestamps_are_iso_8601_in_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_796_538_520_123), "2026-12-06T06:28:40.123Z");
    }
}
