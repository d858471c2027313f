//! The official Rust SDK's client (crates.io `rmcp` 3.11, its 2026-07-28 mode: `server/discover`,
//! per-request metadata, the tasks extension declared) makes one task call of `progress_task`
//! through a break, against `forkscope serve` behind `forkscope proxy`.
//!
//! The break loses the `CreateTaskResult` in flight: the proxy is told `hold` (the server's bytes
//! stop in it), the call is sent, and once the proxy holds the answer it is told `drop`. The
//! client then does what 2026-07-28 tells it to (changelog.mdx: a broken stream "loses the
//! in-flight request; clients MUST re-issue it as a new request with a new request ID"): it
//! re-issues the call under the same idempotency key (`_meta["io.forkscope/idempotencyKey"]`, an
//! extension of forkscope's) and polls `tasks/get` to the end. Everything on the wire is the SDK's
//! own; this program only sequences it.
//!
//! With `--break kill` the break is a replica's death instead (`interop/check-replicas.sh`): the
//! call is answered, then `drop` is written to the control fifo, where the harness kills the
//! replica running the task; the client polls on through the balancer until a survivor, having
//! adopted the task by its lease, answers with the result.
//!
//! Whether the work ran once is the server's to say (its checker's verdict, or the survivor's
//! log; the harnesses read them). This prints one `PASS`/`FAIL` line per check the client itself
//! can make, and `note:` lines.
//!
//! Usage: forkscope-rmcp-task-client URL --proxy-ctl FIFO --proxy-out FILE [--steps N]
//! [--delay-ms N] [--break answer-lost|kill]. Exit 0 iff every check passed, 1 otherwise, 2 on
//! bad usage.

use std::time::Duration;

use rmcp::{
    ClientLifecycleMode, ClientServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
        Implementation, JsonObject, ProtocolVersion, RequestMetaObject, Task, TaskPayload,
        TaskStatus,
    },
    transport::StreamableHttpClientTransport,
};
use serde_json::json;

const USAGE: &str = "usage: forkscope-rmcp-task-client URL --proxy-ctl FIFO --proxy-out FILE \
                     [--steps N] [--delay-ms N] [--break answer-lost|kill]";
const IDEMPOTENCY_KEY: &str = "io.forkscope/idempotencyKey";
/// Bounds every wait on the proxy (its answers, the held answer).
const PROXY_WAIT: Duration = Duration::from_secs(10);

struct Args {
    url: String,
    proxy_ctl: String,
    proxy_out: String,
    steps: u64,
    delay_ms: u64,
    /// A replica killed under the task, rather than its answer lost.
    kill: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let url = args.next().ok_or("a URL is needed")?;
    let (mut proxy_ctl, mut proxy_out, mut steps, mut delay_ms) = (None, None, 5, 100);
    let mut kill = false;
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} {value:?}: a number"))
        };
        match flag.as_str() {
            "--proxy-ctl" => proxy_ctl = Some(value.clone()),
            "--proxy-out" => proxy_out = Some(value.clone()),
            "--steps" => steps = number()?,
            "--delay-ms" => delay_ms = number()?,
            "--break" => match value.as_str() {
                "answer-lost" => kill = false,
                "kill" => kill = true,
                other => return Err(format!("--break {other:?}: answer-lost or kill")),
            },
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        url,
        proxy_ctl: proxy_ctl.ok_or("--proxy-ctl is needed")?,
        proxy_out: proxy_out.ok_or("--proxy-out is needed")?,
        steps,
        delay_ms,
        kill,
    })
}

/// The proxy's control fifo and the log where it answers `ok WORD N`.
struct Proxy {
    ctl: String,
    out: String,
}

impl Proxy {
    /// Sends `command` and waits for its `ok` answer past those already in the log; returns N.
    async fn ask(&self, command: &str) -> Result<u64, String> {
        let answers = |log: &str| {
            log.lines()
                .filter(|l| l.starts_with(&format!("ok {command} ")))
                .count()
        };
        let before = answers(&std::fs::read_to_string(&self.out).unwrap_or_default());
        std::fs::write(&self.ctl, format!("{command}\n"))
            .map_err(|e| format!("write {}: {e}", self.ctl))?;
        let deadline = tokio::time::Instant::now() + PROXY_WAIT;
        loop {
            let log = std::fs::read_to_string(&self.out).unwrap_or_default();
            if answers(&log) > before {
                let last = log
                    .lines()
                    .rev()
                    .find(|l| l.starts_with(&format!("ok {command} ")));
                let n = last
                    .and_then(|l| l.rsplit(' ').next())
                    .and_then(|n| n.parse().ok());
                return n.ok_or_else(|| format!("the proxy's answer to {command}: {last:?}"));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "the proxy did not answer {command} within {PROXY_WAIT:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

struct Checks {
    failed: usize,
}

impl Checks {
    fn check(&mut self, what: &str, held: bool, detail: impl std::fmt::Display) {
        if held {
            println!("PASS {what} ({detail})");
        } else {
            self.failed += 1;
            println!("FAIL {what} ({detail})");
        }
    }
}

fn call(key: &str, steps: u64, delay_ms: u64) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("progress_task");
    let arguments = json!({ "steps": steps, "delay_ms": delay_ms });
    params.arguments = arguments.as_object().cloned();
    let mut meta = RequestMetaObject::new();
    meta.0.0.insert(IDEMPOTENCY_KEY.into(), json!(key));
    params.meta = Some(meta);
    params
}

async fn run(args: Args) -> Result<usize, String> {
    let proxy = Proxy {
        ctl: args.proxy_ctl.clone(),
        out: args.proxy_out.clone(),
    };
    let mut checks = Checks { failed: 0 };
    let mut config = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("forkscope-rmcp-task-client", env!("CARGO_PKG_VERSION")),
    );
    config.protocol_version = ProtocolVersion::V_2026_07_28;
    let transport = StreamableHttpClientTransport::from_uri(args.url.as_str());
    let client = config
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .map_err(|e| format!("server/discover failed: {e}"))?;
    let negotiated = client.peer_info().map(|i| i.protocol_version.to_string());
    println!(
        "note: rmcp 3.11.0 negotiated {}",
        negotiated.as_deref().unwrap_or("?")
    );
    checks.check(
        "negotiated 2026-07-28",
        negotiated.as_deref() == Some("2026-07-28"),
        negotiated.as_deref().unwrap_or("nothing"),
    );

    // The intent's key: unique per run, as a real client's would be.
    let key = format!("rmcp-intent-{}-{}", std::process::id(), nanos());
    let task = if args.kill {
        killed_under(&client, &proxy, &mut checks, &key, &args).await?
    } else {
        answer_lost(&client, &proxy, &mut checks, &key, &args).await?
    };
    let Some(task) = task else {
        return Ok(checks.failed);
    };

    let poll = Duration::from_millis(task.poll_interval_ms.unwrap_or(100).clamp(10, 1000));
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(args.steps * args.delay_ms)
        + Duration::from_secs(15);
    let mut failed_polls = Vec::new();
    let ended = loop {
        let read = client
            .get_task(GetTaskParams::new(task.task_id.clone()))
            .await;
        match read {
            Ok(got) if got.task.status() != TaskStatus::Working => break Ok(got.task),
            Ok(_) => {}
            // A poll that met a dead replica, or the balancer passing over it: a stock client
            // polls again.
            Err(e) => failed_polls.push(e.to_string()),
        }
        if tokio::time::Instant::now() > deadline {
            break Err(format!(
                "the task did not end in time ({} polls failed, the last: {})",
                failed_polls.len(),
                failed_polls.last().map_or("none", String::as_str)
            ));
        }
        tokio::time::sleep(poll).await;
    };
    let result: Option<JsonObject> = match &ended {
        Ok(t) => match &t.payload {
            TaskPayload::Completed { result } => Some(result.clone()),
            _ => None,
        },
        Err(_) => None,
    };
    // Every step the call asked for, once: the server's result says how many it ran.
    let whole = format!("done: {} steps", args.steps);
    let said_whole = result.as_ref().is_some_and(|r| {
        serde_json::Value::Object(r.clone())
            .to_string()
            .contains(&whole)
    });
    checks.check(
        &format!("the task completed with its result ({whole})"),
        said_whole,
        match (&ended, &result) {
            (_, Some(r)) => serde_json::Value::Object(r.clone()).to_string(),
            (Ok(t), None) => format!("ended {:?}", t.status()),
            (Err(e), None) => e.clone(),
        },
    );
    if !failed_polls.is_empty() {
        println!(
            "note: {} polls failed on the way (the first: {})",
            failed_polls.len(),
            failed_polls[0]
        );
    }
    let _ = client.cancel().await;
    Ok(checks.failed)
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

/// The `CreateTaskResult` lost in the proxy, and the call re-issued under the same key: the task
/// the re-issue names.
async fn answer_lost(
    client: &Client,
    proxy: &Proxy,
    checks: &mut Checks,
    key: &str,
    args: &Args,
) -> Result<Option<Task>, String> {
    proxy.ask("hold").await?;
    let first = {
        let peer = client.peer().clone();
        let params = call(key, args.steps, args.delay_ms);
        tokio::spawn(async move { peer.call_tool_once(params).await })
    };
    // The server has answered (and, durable before acknowledged, made the task) once the proxy
    // holds bytes; then the route dies with them.
    let deadline = tokio::time::Instant::now() + PROXY_WAIT;
    let held = loop {
        let held = proxy.ask("held").await?;
        if held > 0 || tokio::time::Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let dropped = proxy.ask("drop").await?;
    let first = tokio::time::timeout(PROXY_WAIT, first).await;
    let lost = match &first {
        Ok(Ok(Err(e))) => Some(e.to_string()),
        _ => None,
    };
    checks.check(
        "the break lost the CreateTaskResult",
        held > 0 && dropped >= 1 && lost.is_some(),
        format!(
            "{held} bytes held, {dropped} connections dropped, the SDK said: {}",
            lost.as_deref().unwrap_or("no error")
        ),
    );
    // The re-issue: a new request (the SDK gives it a new id) under the same key.
    let again = client
        .call_tool_once(call(key, args.steps, args.delay_ms))
        .await;
    Ok(answered_with_task(
        checks,
        "the re-issue under the same key was answered with a task",
        again,
    ))
}

/// The call answered, then the replica running its task killed (the harness does it on `drop`).
async fn killed_under(
    client: &Client,
    proxy: &Proxy,
    checks: &mut Checks,
    key: &str,
    args: &Args,
) -> Result<Option<Task>, String> {
    let created = client
        .call_tool_once(call(key, args.steps, args.delay_ms))
        .await;
    let task = answered_with_task(checks, "the call was answered with a task", created);
    if let Some(created) = &task {
        // Killed mid-work: once a read shows the task past its first state (forkscope says
        // `step N of M`), so the survivor has steps to run on from, not only the whole.
        let deadline = tokio::time::Instant::now() + PROXY_WAIT;
        while tokio::time::Instant::now() < deadline {
            let read = client
                .get_task(GetTaskParams::new(created.task_id.clone()))
                .await;
            let message = read.ok().and_then(|r| r.task.task.status_message);
            if message.is_some() && message != created.status_message {
                println!("note: killed at {}", message.unwrap_or_default());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let killed = proxy.ask("drop").await?;
        checks.check(
            "the replica running the task was killed",
            killed >= 1,
            format!("{killed} replica(s) killed"),
        );
    }
    Ok(task)
}

/// The task a `tools/call` was answered with, checked as `what`.
fn answered_with_task(
    checks: &mut Checks,
    what: &str,
    answer: Result<CallToolResponse, rmcp::service::ServiceError>,
) -> Option<Task> {
    let task = match answer {
        Ok(CallToolResponse::Task(created)) => Some(created.task),
        _ => None,
    };
    let said = task
        .as_ref()
        .map_or("no task".to_string(), |t| format!("task {}", t.task_id));
    checks.check(what, task.is_some(), said);
    task
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{USAGE} ({e})");
            return std::process::ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        Err(e) => {
            println!("FAIL the run went through ({e})");
            std::process::ExitCode::from(1)
        }
    }
}
