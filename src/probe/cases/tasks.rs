//! The 2026-07-28 cases: what the tasks extension owes a client that loses an answer, reads a
//! task from wherever a balancer sends it, or cancels. They run only when the server's
//! `server/discover` offers 2026-07-28 (else `not run`, saying so), with no session: each
//! request stands alone. The rules they judge by are the core's [`forkscope_core::probe::tasks`].
//!
//! A lost `CreateTaskResult` is played by the probe's own choice: it reads the first answer
//! (to know which task the server made) and then does what a client that never got it does —
//! re-issue the call, with a new request id, under the same idempotency key
//! (`_meta["io.forkscope/idempotencyKey"]`, forkscope's extension: a server that does not read
//! it shows what a stock client meets).
//!
//! A listen gap is played the same way: a `subscriptions/listen` for the task, dropped once
//! acknowledged; the task ends while none is open; a new listen, read for the end.

use super::{Ctx, NotRun, Outcome};
use crate::probe::discover::ToolPlan;
use crate::probe::http::{HttpError, Messages, Opened};
use crate::wire::mcp::modern::{ModernCall, created_task};
use forkscope_core::probe::tasks::{self, Reissued, Relisten, TaskRead};
use forkscope_core::probe::{Finding, Unexercised};
use forkscope_core::revision::MODERN;
use forkscope_core::tasks::EXTENSION;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// How many times `task-get-repeated` reads a new task: enough to land on every upstream of a
/// small balanced pool more than once.
const READS: usize = 8;
/// How often the probe reads a working task (a probe need not honour `pollIntervalMs`).
const POLL: Duration = Duration::from_millis(25);

/// Request ids, unique within the run: 2026-07-28 has no session to scope them.
static IDS: AtomicU64 = AtomicU64::new(1);

/// What a task call was answered with.
enum Created {
    Task(String),
    Refused {
        code: i64,
    },
    /// A plain result: the server ran the call without making it a task.
    Plain,
}

pub(super) async fn run(ctx: &Ctx, name: &str) -> Outcome {
    let declares_tasks = discover(ctx).await?;
    let tool = ctx.call_tool.as_ref().ok_or_else(|| {
        NotRun("no tool to call: the server offers none the probe can make a task of".into())
    })?;
    if !declares_tasks {
        return match name {
            "task-reissue-same-key" => Ok((
                Finding::not_exercised(
                    Unexercised::NoTasks,
                    "whether a re-issued call runs twice was not seen",
                ),
                Vec::new(),
            )),
            _ => Err(NotRun(
                "the server does not declare the tasks extension (io.modelcontextprotocol/tasks)"
                    .into(),
            )),
        };
    }
    let key = ctx.task_key(name);
    let finding = match name {
        "task-reissue-same-key" => reissue_same_key(ctx, tool, &key).await?,
        "task-key-other-arguments" => key_other_arguments(ctx, tool, &key).await?,
        "task-get-repeated" => get_repeated(ctx, tool, &key).await?,
        "task-cancel-after-complete" => cancel_after_complete(ctx, tool, &key).await?,
        "task-cancel-while-working" => cancel_while_working(ctx, tool, &key).await?,
        "task-listen-gap" => listen_gap(ctx, tool, &key).await?,
        other => return Err(NotRun(format!("no 2026-07-28 case named {other}"))),
    };
    Ok((finding, Vec::new()))
}

/// Whether the server offers 2026-07-28 (else the case is not run) and declares tasks.
pub(super) async fn discover(ctx: &Ctx) -> Result<bool, NotRun> {
    let call = request("server/discover", json!({}), None);
    let result = match ctx.target.modern("server/discover", &call).await {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => {
            return Err(NotRun(format!(
                "the server does not speak 2026-07-28: server/discover was answered {error}"
            )));
        }
        Err(e) => {
            return Err(NotRun(format!("the server does not speak 2026-07-28: {e}")));
        }
    };
    let offers = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v.as_str() == Some(MODERN)));
    if !offers {
        return Err(NotRun(format!(
            "the server does not offer 2026-07-28 (server/discover lists {})",
            result.get("supportedVersions").unwrap_or(&Value::Null)
        )));
    }
    Ok(result
        .pointer("/capabilities/extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some())
}

fn request<'a>(method: &'a str, params: Value, key: Option<&'a str>) -> ModernCall<'a> {
    ModernCall {
        id: IDS.fetch_add(1, Ordering::Relaxed),
        method,
        params,
        tasks: true,
        key,
    }
}

/// Calls `tool` as a task: `steps` steps `delay_ms` apart, under `key`.
async fn create(
    ctx: &Ctx,
    tool: &ToolPlan,
    key: &str,
    steps: u64,
    delay_ms: u64,
) -> Result<Created, NotRun> {
    let (arguments, _) = tool.args(steps, delay_ms, key);
    let params = json!({ "name": tool.name, "arguments": arguments });
    let call = request("tools/call", params, Some(key));
    let asked = format!(
        "tools/call {} as a task ({steps} steps) under key …{}",
        tool.name,
        tail(key)
    );
    let created = match ctx.target.modern("tools/call", &call).await {
        Ok(Ok(result)) => Ok(match created_task(&result) {
            Some(task) => Created::Task(task.to_owned()),
            None => Created::Plain,
        }),
        Ok(Err(error)) => Ok(Created::Refused {
            code: error.code().unwrap_or_default(),
        }),
        Err(e) => Err(NotRun(format!("the task call was not answered: {e}"))),
    };
    ctx.note(match &created {
        Ok(Created::Task(task)) => format!("{asked} → task {}", short(task)),
        Ok(Created::Refused { code }) => format!("{asked} → error {code}"),
        Ok(Created::Plain) => format!("{asked} → a plain result, no task"),
        Err(NotRun(why)) => format!("{asked} → {why}"),
    });
    created
}

/// The first call must make a task for the case to say anything.
pub(super) async fn first_task(
    ctx: &Ctx,
    tool: &ToolPlan,
    key: &str,
    steps: u64,
    delay_ms: u64,
) -> Result<String, NotRun> {
    match create(ctx, tool, key, steps, delay_ms).await? {
        Created::Task(task) => Ok(task),
        Created::Refused { code } => Err(NotRun(format!(
            "the task call was refused with error {code}"
        ))),
        Created::Plain => Err(NotRun(
            "the server answered the call without making a task".into(),
        )),
    }
}

/// One `tasks/get`.
pub(super) async fn read(ctx: &Ctx, task: &str) -> Result<TaskRead, NotRun> {
    let call = request("tasks/get", json!({ "taskId": task }), None);
    let (read, answer) = match ctx.target.modern("tasks/get", &call).await {
        Ok(Ok(result)) => {
            let status = result.get("status").and_then(Value::as_str);
            (
                Ok(TaskRead::of_status(status)),
                status.unwrap_or("a result with no status").to_owned(),
            )
        }
        Ok(Err(error)) => (
            Ok(TaskRead::of_error(error.code())),
            format!("error {error}").chars().take(100).collect(),
        ),
        Err(e) => {
            let why = format!("tasks/get was not answered: {e}");
            (Err(NotRun(why.clone())), why)
        }
    };
    ctx.note(format!("tasks/get {} → {answer}", short(task)));
    read
}

/// A task id as the notes show it: its first 8 characters.
pub(super) fn short(task: &str) -> String {
    task.chars().take(8).collect()
}

/// The end of a key, which tells one case's keys apart.
fn tail(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    chars[chars.len().saturating_sub(24)..].iter().collect()
}

/// Reads `task` until a read says it ended, or the window closes; every read, in order.
async fn reads_to_end(ctx: &Ctx, task: &str) -> Result<Vec<TaskRead>, NotRun> {
    reads_until(ctx, task, Instant::now() + ctx.window).await
}

/// Reads `task` until a read says it ended, or `deadline`; every read, in order.
pub(super) async fn reads_until(
    ctx: &Ctx,
    task: &str,
    deadline: Instant,
) -> Result<Vec<TaskRead>, NotRun> {
    let mut reads = Vec::new();
    loop {
        let got = read(ctx, task).await?;
        // A read that does not know the task goes on: behind a balancer the next may.
        let ended = got.ended();
        reads.push(got);
        if ended || Instant::now() > deadline {
            return Ok(reads);
        }
        sleep(POLL).await;
    }
}

/// The last status read of `task`, read to its end.
async fn end_of(ctx: &Ctx, task: &str) -> Result<Option<String>, NotRun> {
    Ok(reads_to_end(ctx, task)
        .await?
        .into_iter()
        .rev()
        .find_map(|r| match r {
            TaskRead::Status(s) => Some(s),
            TaskRead::Unknown | TaskRead::Unanswered => None,
        }))
}

/// Best effort: the case is over either way.
async fn cancel(ctx: &Ctx, task: &str) {
    let call = request("tasks/cancel", json!({ "taskId": task }), None);
    let answer = match ctx.target.modern("tasks/cancel", &call).await {
        Ok(Ok(result)) => result
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("acknowledged")
            .to_owned(),
        Ok(Err(error)) => format!("error {error}").chars().take(100).collect(),
        Err(e) => format!("not answered: {e}"),
    };
    ctx.note(format!("tasks/cancel {} → {answer}", short(task)));
}

async fn reissue_same_key(ctx: &Ctx, tool: &ToolPlan, key: &str) -> Result<Finding, NotRun> {
    let first = first_task(ctx, tool, key, 3, 50).await?;
    let reissued = match create(ctx, tool, key, 3, 50).await? {
        Created::Task(second) if second == first => Reissued::SameTask,
        Created::Task(second) => Reissued::OtherTask {
            first_end: end_of(ctx, &first).await?,
            second_end: end_of(ctx, &second).await?,
        },
        // Told the call failed: whether the first call's work happened anyway decides.
        Created::Refused { code } => Reissued::Refused {
            code,
            first_end: end_of(ctx, &first).await?,
        },
        Created::Plain => {
            return Err(NotRun(
                "the re-issue was answered without a task: which run it was is not known".into(),
            ));
        }
    };
    Ok(tasks::judge_reissue(&reissued))
}

async fn key_other_arguments(ctx: &Ctx, tool: &ToolPlan, key: &str) -> Result<Finding, NotRun> {
    let first = first_task(ctx, tool, key, 3, 50).await?;
    let reissued = match create(ctx, tool, key, 4, 50).await? {
        Created::Task(second) if second == first => Reissued::SameTask,
        Created::Task(second) => {
            cancel(ctx, &second).await;
            Reissued::OtherTask {
                first_end: None,
                second_end: None,
            }
        }
        Created::Refused { code } => Reissued::Refused {
            code,
            first_end: None,
        },
        Created::Plain => {
            return Err(NotRun(
                "the call with other arguments was answered without a task".into(),
            ));
        }
    };
    cancel(ctx, &first).await;
    Ok(tasks::judge_key_other_arguments(&reissued))
}

async fn get_repeated(ctx: &Ctx, tool: &ToolPlan, key: &str) -> Result<Finding, NotRun> {
    let task = first_task(ctx, tool, key, 20, 50).await?;
    let mut reads = Vec::with_capacity(READS);
    for _ in 0..READS {
        reads.push(read(ctx, &task).await?);
    }
    cancel(ctx, &task).await;
    Ok(tasks::judge_repeated_reads(&reads))
}

async fn cancel_after_complete(ctx: &Ctx, tool: &ToolPlan, key: &str) -> Result<Finding, NotRun> {
    let task = first_task(ctx, tool, key, 2, 20).await?;
    let mut reads = reads_to_end(ctx, &task).await?;
    if reads.last() != Some(&TaskRead::Status("completed".into())) {
        return Ok(Finding::not_exercised(
            Unexercised::NoEndSeen,
            "the task did not complete within the window, so a cancel after it was not tried",
        ));
    }
    cancel(ctx, &task).await;
    for _ in 0..3 {
        reads.push(read(ctx, &task).await?);
    }
    Ok(tasks::judge_terminal(&reads))
}

async fn cancel_while_working(ctx: &Ctx, tool: &ToolPlan, key: &str) -> Result<Finding, NotRun> {
    let task = first_task(ctx, tool, key, 100, 50).await?;
    cancel(ctx, &task).await;
    let mut reads = reads_to_end(ctx, &task).await?;
    for _ in 0..2 {
        sleep(POLL).await;
        reads.push(read(ctx, &task).await?);
    }
    Ok(tasks::judge_terminal(&reads))
}

async fn listen_gap(ctx: &Ctx, tool: &ToolPlan, key: &str) -> Result<Finding, NotRun> {
    let task = first_task(ctx, tool, key, 4, 50).await?;
    // The first listen, acknowledged and then broken: the gap opens.
    match open_listen(ctx, &task).await? {
        Listening::Acknowledged(stream) => drop(stream),
        Listening::Refused(why) => {
            cancel(ctx, &task).await;
            return Ok(Finding::not_exercised(Unexercised::NoTaskListen, why));
        }
    }
    if !reads_to_end(ctx, &task)
        .await?
        .last()
        .is_some_and(TaskRead::ended)
    {
        return Ok(Finding::not_exercised(
            Unexercised::NoEndSeen,
            "the task did not end within the window, so no end fell in the gap",
        ));
    }
    let mut stream = match open_listen(ctx, &task).await? {
        Listening::Acknowledged(stream) => stream,
        Listening::Refused(why) => {
            return Ok(Finding::not_exercised(Unexercised::NoTaskListen, why));
        }
    };
    let deadline = Instant::now() + ctx.window;
    let mut relisten = Relisten::NoEnd;
    while let Some(message) = stream.next(deadline).await {
        let params = &message["params"];
        let status = params["status"].as_str().unwrap_or_default();
        if message["method"] == "notifications/tasks"
            && params["taskId"] == task.as_str()
            && tasks::is_terminal(status)
        {
            relisten = Relisten::EndSent(status.to_owned());
            break;
        }
        // The subscription's own answer: it ended.
        if message.get("id").is_some() {
            break;
        }
    }
    Ok(tasks::judge_listen_gap(&relisten))
}

/// A listen for one task: acknowledged for it, or why not.
enum Listening {
    Acknowledged(Messages),
    Refused(String),
}

async fn open_listen(ctx: &Ctx, task: &str) -> Result<Listening, NotRun> {
    let what = "subscriptions/listen";
    let call = request(
        what,
        json!({ "notifications": { "taskIds": [task] } }),
        None,
    );
    let mut stream = match ctx.target.modern_open(what, &call).await {
        Ok(Opened::Stream(stream)) => stream,
        Ok(Opened::Answer(Err(error))) => {
            return Ok(Listening::Refused(format!("{what} was answered {error}")));
        }
        Ok(Opened::Answer(Ok(_))) => {
            return Ok(Listening::Refused(format!(
                "{what} was answered at once, with no stream"
            )));
        }
        Err(refused @ HttpError::Status { .. }) => {
            return Ok(Listening::Refused(refused.to_string()));
        }
        Err(e) => return Err(NotRun(format!("{what} was not answered: {e}"))),
    };
    let deadline = Instant::now() + ctx.window;
    while let Some(message) = stream.next(deadline).await {
        if message["method"] == "notifications/subscriptions/acknowledged" {
            let names_it = message
                .pointer("/params/notifications/taskIds")
                .and_then(Value::as_array)
                .is_some_and(|ids| ids.iter().any(|id| id == task));
            return Ok(if names_it {
                Listening::Acknowledged(stream)
            } else {
                Listening::Refused(format!(
                    "the acknowledgement named no task id (notifications: {})",
                    message
                        .pointer("/params/notifications")
                        .unwrap_or(&Value::Null)
                ))
            });
        }
        if let Some(error) = message.get("error") {
            return Ok(Listening::Refused(format!(
                "{what} was answered with error {}",
                error.get("code").unwrap_or(&Value::Null)
            )));
        }
        if message.get("id").is_some() {
            return Ok(Listening::Refused(
                "the subscription ended before its acknowledgement".into(),
            ));
        }
    }
    Ok(Listening::Refused("no acknowledgement came".into()))
}
