//! The tasks extension (`io.modelcontextprotocol/tasks`) on the 2026-07-28 side of the
//! endpoint: `tools/call` answered with a `CreateTaskResult` when the client declares the
//! extension, then `tasks/get`, `tasks/update` and `tasks/cancel`. What may happen to a task is
//! the core's [`TaskTable`] (one task per idempotency key, one runner, terminal once, cancel
//! settled against complete, expiry distinct from never-existed); this file spells it in JSON
//! and runs the work: `progress_task`'s steps, each committed under the runner's epoch before it
//! counts as done.

use super::refusal::{Unavailable, json_response, unavailable};
use crate::wire::{OsEntropy, jsonrpc};
use axum::http::StatusCode;
use axum::response::Response;
use forkscope_core::tasks::{
    CreateError, DEFAULT_TTL_MS, Keyed, Missing, POLL_INTERVAL_MS, Runner, Settled, Status, Task,
    TaskRules, TaskTable,
};
use forkscope_core::work::{Steps, ToolStep};
use forkscope_core::{LabTime, TaskId, ToolSpec};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The extension's identifier, in capabilities.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// What the tasks side did, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct TaskCounters {
    pub created: AtomicU64,
    /// Calls whose idempotency key named a task made before: nothing new ran.
    pub reused: AtomicU64,
    /// Steps committed: each is one effect of the work, taken once.
    pub steps_committed: AtomicU64,
    /// Runner writes the table refused (stale epoch, or the task already ended).
    pub writes_refused: AtomicU64,
    pub completed: AtomicU64,
}

/// The tasks of one endpoint, and the clock and randomness they are made with.
#[derive(Debug)]
pub struct TaskHub {
    table: Mutex<TaskTable>,
    rng: Mutex<OsEntropy>,
    started: tokio::time::Instant,
    /// Wall time at `started`, for the ISO 8601 timestamps the extension's `Task` carries.
    started_unix_ms: u64,
    pub counters: TaskCounters,
}

impl Default for TaskHub {
    fn default() -> Self {
        TaskHub::new(TaskRules::default())
    }
}

impl TaskHub {
    pub fn new(rules: TaskRules) -> Self {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        TaskHub {
            table: Mutex::new(TaskTable::new(rules)),
            rng: Mutex::new(OsEntropy::new()),
            started: tokio::time::Instant::now(),
            started_unix_ms: unix_ms,
            counters: TaskCounters::default(),
        }
    }
}

/// The one server runs every task itself.
const THIS_SERVER: Runner = Runner(0);

impl TaskHub {
    fn now(&self) -> LabTime {
        LabTime::from_millis(self.started.elapsed().as_millis() as u64)
    }

    /// The table, with the TTL applied up to now: every read and write goes through it.
    fn table(&self) -> MutexGuard<'_, TaskTable> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.now();
        if table.poll_timeout().is_some_and(|at| at <= now) {
            for id in table.expire(now) {
                tracing::info!(task = %id.short(), "task failed: its TTL ran out before it finished");
            }
        }
        table
    }

    /// `tools/call` as a task: created (or found by its key) before the answer, then run.
    pub(crate) fn call(
        self: &Arc<Self>,
        id: &Value,
        spec: ToolSpec,
        keyed: Option<Keyed>,
    ) -> Response {
        let now = self.now();
        let created = {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            let mut table = self.table();
            table
                .create(
                    now,
                    &mut *rng,
                    spec.steps,
                    DEFAULT_TTL_MS,
                    keyed,
                    THIS_SERVER,
                )
                .map(|created| (created, table.get(created.id).map(|t| self.task_json(t))))
        };
        let (created, task) = match created {
            Ok(done) => done,
            Err(CreateError::Full { .. }) => {
                return unavailable(id, Unavailable::TooManyTasks, "too many tasks are held", 5);
            }
            Err(e @ CreateError::KeyReused { task }) => {
                let data =
                    json!({ "reason": "idempotency_key_reused", "taskId": task.to_string() });
                return invalid(id, &e.to_string(), data);
            }
            Err(e @ CreateError::KeyTooLong) => {
                return invalid(
                    id,
                    &e.to_string(),
                    json!({ "reason": "idempotency_key_too_long" }),
                );
            }
        };
        let Ok(mut task) = task else {
            unreachable!("a task just created or found reads back");
        };
        if created.fresh {
            self.counters.created.fetch_add(1, Ordering::Relaxed);
            tracing::info!(task = %created.id.short(), steps = spec.steps, "task created");
            tokio::spawn(run(self.clone(), created.id, created.epoch, spec));
        } else {
            self.counters.reused.fetch_add(1, Ordering::Relaxed);
            tracing::info!(task = %created.id.short(), "task found by its idempotency key: nothing new runs");
        }
        task["resultType"] = json!("task");
        json_response(StatusCode::OK, jsonrpc::result(id, task))
    }

    pub(crate) fn get(&self, id: &Value, params: &Value) -> Response {
        let table = self.table();
        match task_of(params)
            .map_err(|()| Missing::Unknown)
            .and_then(|t| table.get(t))
        {
            Ok(task) => {
                let mut body = self.task_json(task);
                body["resultType"] = json!("complete");
                json_response(StatusCode::OK, jsonrpc::result(id, body))
            }
            Err(missing) => missing_task(id, missing),
        }
    }

    /// `tasks/update`: nothing here asks for input, so every response is for a key not
    /// outstanding, which the extension says to ignore; an unknown task is an error.
    pub(crate) fn update(&self, id: &Value, params: &Value) -> Response {
        let table = self.table();
        match task_of(params)
            .map_err(|()| Missing::Unknown)
            .and_then(|t| table.get(t))
        {
            Ok(_) => acknowledged(id, None),
            Err(missing) => missing_task(id, missing),
        }
    }

    /// `tasks/cancel`: settled against completion by the table's compare-and-set; the
    /// acknowledgement says which won, in `_meta` (an extension of forkscope's).
    pub(crate) fn cancel(&self, id: &Value, params: &Value) -> Response {
        let now = self.now();
        let settled = task_of(params)
            .map_err(|()| Missing::Unknown)
            .and_then(|t| self.table().cancel(now, t));
        match settled {
            Ok(Settled::Won(_)) => acknowledged(
                id,
                Some(("cancelled", "the cancel won: no step runs after it")),
            ),
            Ok(Settled::Lost(status)) => acknowledged(
                id,
                Some((
                    status.name(),
                    "the task had already ended: that outcome stands",
                )),
            ),
            Err(missing) => missing_task(id, missing),
        }
    }

    fn task_json(&self, task: &Task) -> Value {
        let at = |t: LabTime| iso8601(self.started_unix_ms + t.as_millis());
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
        }
        json
    }
}

fn status_message(task: &Task) -> String {
    use forkscope_core::tasks::EndedBy;
    match (task.status, task.ended_by) {
        (Status::Working, _) => format!("step {} of {}", task.done, task.steps),
        (Status::Completed, _) => format!("done: {} steps", task.steps),
        (Status::Cancelled, _) => format!("cancelled after {} of {} steps", task.done, task.steps),
        (Status::Failed, Some(EndedBy::Ttl)) => format!(
            "its TTL ran out after {} of {} steps; no step ran after",
            task.done, task.steps
        ),
        (Status::Failed, _) => format!("failed after {} of {} steps", task.done, task.steps),
    }
}

/// Runs a task's steps under `epoch`: each is committed to the table before it counts, and a
/// refused write (a cancel won, the TTL ran out, another runner adopted it) stops the work.
async fn run(hub: Arc<TaskHub>, task: TaskId, epoch: u64, spec: ToolSpec) {
    let mut steps = Steps::new(spec, true, hub.now());
    while let Some(due) = steps.poll_timeout() {
        tokio::time::sleep(std::time::Duration::from_millis(due.since(hub.now()))).await;
        for step in steps.take_due(hub.now(), usize::MAX) {
            let now = hub.now();
            let written = match step {
                ToolStep::Progress { done, .. } => {
                    hub.table().step(now, task, epoch, done).map(|()| true)
                }
                ToolStep::Result { steps } => {
                    let result: Arc<str> = super::tool::result(steps).to_string().into();
                    hub.table()
                        .settle(now, task, Some(epoch), Status::Completed, Some(result))
                        .map(|s| matches!(s, Settled::Won(_)))
                }
            };
            match written {
                Ok(true) if matches!(step, ToolStep::Progress { .. }) => {
                    hub.counters.steps_committed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(true) => {
                    hub.counters.completed.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(task = %task.short(), "task completed");
                }
                Ok(false) => return,
                Err(why) => {
                    hub.counters.writes_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(task = %task.short(), %why, "task runner stops: its write was refused");
                    return;
                }
            }
        }
    }
}

/// `params.taskId` as a task id; `Err` for anything else (answered as an unknown task).
fn task_of(params: &Value) -> Result<TaskId, ()> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .and_then(TaskId::parse)
        .ok_or(())
}

fn invalid(id: &Value, message: &str, data: Value) -> Response {
    json_response(
        StatusCode::OK,
        jsonrpc::error(id, jsonrpc::INVALID_PARAMS, message, Some(data)),
    )
}

/// −32602 for both, as the extension says, with `data.reason` telling them apart.
fn missing_task(id: &Value, missing: Missing) -> Response {
    invalid(
        id,
        &format!("Invalid params: {missing}"),
        json!({ "reason": missing.reason() }),
    )
}

/// The empty acknowledgement `tasks/update` and `tasks/cancel` answer with; `outcome`: what a
/// cancel settled as, and why.
fn acknowledged(id: &Value, outcome: Option<(&str, &str)>) -> Response {
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
    #[test]
    fn timestamps_are_iso_8601_in_utc() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            super::iso8601(1_796_538_520_123),
            "2026-12-06T06:28:40.123Z"
        );
    }
}
