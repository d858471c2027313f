//! Both revisions on one `forkscope serve`, as a user runs it: the real binary as a subprocess
//! (`TOKIO_WORKER_THREADS=1`), real sockets on 127.0.0.1, reqwest as the client.
//!
//! 1. tool-call progress events/s: `progress_task` with `delay_ms` 0 and a progress token, send
//!    → the stream's end, best of 3 — a 2025-11-25 session's call beside a 2026-07-28 stateless
//!    call on the same server.
//! 2. time to the first byte of a plain 2026 call (the first progress frame of a 1-step call) beside
//!    the time to a fenced task's `CreateTaskResult` (keyed, so the store records the key too),
//!    p50 and p99. Target: the task create within 2× the plain call.
//! 3. a task's round trip: create, then `tasks/get` until it is completed, with its result
//!    (1 step, `delay_ms` 0), p50 and p99.
//!
//! 4. the same round trip on a replica whose tasks are in the shared store: `serve --store
//!    memory` beside `serve --store redis://…` (a `redis-server` the bench starts on a free port,
//!    no persistence, and stops on every path). Target: Redis ≥ 0.5× memory (round trips/s).
//! 6. a listen's wake-up on Redis: a long task on replica A, a listen for it on A, or on a
//!    second replica B on the same store; the time from `tasks/cancel` sent to A to the listen's
//!    `cancelled`, p50 and p99 (200 rounds each).
//!
//! `cargo bench --bench revisions`; `FORKSCOPE_BENCH_QUICK=1` (or running without `--bench`, as
//! `cargo test --all-targets` does) uses small sizes; `FORKSCOPE_BENCH_ONLY=store` runs measures
//! 4 and 6 alone (the shared store's figures, repeated cheaply while the store changes). JSON:
//! `target/bench-revisions.json` (quick runs: `target/bench-revisions.quick.json`; store-only
//! runs: `bench-revisions.store[.quick].json`). A measure that cannot run exits non-zero.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// A bound on any one request, never a measurement.
const LIMIT: Duration = Duration::from_secs(60);

fn quick() -> bool {
    std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench")
}

/// `forkscope serve` as a child process, killed when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(extra: &[&str]) -> Result<Serve, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args(["serve", "--port", "0", "--emit-every", "0"])
            .args(extra)
            .env("TOKIO_WORKER_THREADS", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start forkscope serve: {e}"))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut serve = Serve {
            child,
            url: String::new(),
        };
        let line = rx
            .recv_timeout(START_TIMEOUT)
            .map_err(|_| "forkscope serve announced no address".to_owned())?;
        let url = line
            .split_once(" at ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .filter(|u| u.starts_with("http://127.0.0.1:"))
            .ok_or_else(|| format!("not a start line: {line}"))?;
        serve.url = url.to_owned();
        Ok(serve)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

fn meta(tasks: bool, key: Option<&str>) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p",
    });
    if tasks {
        meta["io.modelcontextprotocol/clientCapabilities"] =
            json!({ "extensions": { "io.modelcontextprotocol/tasks": {} } });
    }
    if let Some(key) = key {
        meta["io.forkscope/idempotencyKey"] = json!(key);
    }
    meta
}

/// `method` on `url` (`Mcp-Name: name`), its JSON answer.
async fn answer(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: &str,
    body: &Value,
) -> Result<Value, String> {
    modern(http, url, method, name, body)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())
}

fn modern(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: &str,
    body: &Value,
) -> reqwest::RequestBuilder {
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", method)
        .header("mcp-name", name)
        .body(body.to_string())
}

fn call_body(id: u64, steps: u64, meta: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "progress_task", "arguments": { "steps": steps, "delay_ms": 0 }, "_meta": meta } })
}

/// A 2025-11-25 session: its id.
async fn open_session(http: &reqwest::Client, url: &str) -> Result<String, String> {
    let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": { "name": "bench", "version": "0" } } });
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| "initialize: no Mcp-Session-Id".to_owned())
}

/// Reads a call's whole stream; checks every progress step and the result arrived.
async fn whole_call(request: reqwest::RequestBuilder, steps: u64) -> Result<Duration, String> {
    let started = Instant::now();
    let response = tokio::time::timeout(LIMIT, request.send())
        .await
        .map_err(|_| "no answer".to_owned())?
        .map_err(|e| e.to_string())?;
    let body = tokio::time::timeout(LIMIT, response.bytes())
        .await
        .map_err(|_| "the stream did not end".to_owned())?
        .map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&body);
    let progress = text.matches("notifications/progress").count() as u64;
    if progress != steps || !text.contains(&format!("done: {steps} steps")) {
        return Err(format!(
            "{progress} of {steps} progress events, or no result"
        ));
    }
    Ok(took)
}

async fn events_per_second(
    http: &reqwest::Client,
    url: &str,
    steps: u64,
    legacy: bool,
) -> Result<f64, String> {
    let session = if legacy {
        Some(open_session(http, url).await?)
    } else {
        None
    };
    let mut best = f64::MAX;
    for id in 1..=3 {
        let request = match &session {
            Some(session) => {
                let mut body = call_body(id, steps, json!({ "progressToken": "p" }));
                body["params"]["_meta"] = json!({ "progressToken": "p" });
                http.post(url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", LEGACY)
                    .header("mcp-session-id", session)
                    .body(body.to_string())
            }
            None => modern(
                http,
                url,
                "tools/call",
                "progress_task",
                &call_body(id, steps, meta(false, None)),
            ),
        };
        best = best.min(whole_call(request, steps).await?.as_secs_f64());
    }
    Ok(steps as f64 / best)
}

/// Time to a plain call's first byte, and to a task's `CreateTaskResult`.
async fn first_byte(
    http: &reqwest::Client,
    url: &str,
    rounds: u64,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let (mut plain, mut task) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let body = call_body(round, 1, meta(false, None));
        let started = Instant::now();
        let mut response = modern(http, url, "tools/call", "progress_task", &body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        response
            .chunk()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an empty stream")?;
        plain.push(started.elapsed());
        drop(response);
        let key = format!("bench-{round}");
        let body = call_body(round, 1, meta(true, Some(&key)));
        let started = Instant::now();
        let created: Value = answer(http, url, "tools/call", "progress_task", &body).await?;
        task.push(started.elapsed());
        if created["result"]["resultType"] != "task" {
            return Err(format!("not a task: {created}"));
        }
    }
    Ok((plain, task))
}

/// A task created, polled until completed, its result read.
async fn round_trips(
    http: &reqwest::Client,
    url: &str,
    rounds: u64,
) -> Result<Vec<Duration>, String> {
    let mut took = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let task = create_task(http, url, round).await?;
        let deadline = Instant::now() + LIMIT;
        loop {
            let get = json!({ "jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                "params": { "taskId": task, "_meta": meta(true, None) } });
            let read: Value = answer(http, url, "tasks/get", &task, &get).await?;
            if read["result"]["status"] == "completed" {
                if read["result"]["result"]["content"][0]["text"] != "done: 1 steps" {
                    return Err(format!("a wrong result: {read}"));
                }
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the task did not complete: {read}"));
            }
        }
        took.push(started.elapsed());
    }
    Ok(took)
}

/// A 1-step task, as request `id`: its id.
async fn create_task(http: &reqwest::Client, url: &str, id: u64) -> Result<String, String> {
    let body = call_body(id, 1, meta(true, None));
    let created: Value = answer(http, url, "tools/call", "progress_task", &body).await?;
    created["result"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no task id: {created}"))
}

/// Measure 5: the same round trip told by a listen: create, then `subscriptions/listen` for the
/// task until its `notifications/tasks` says completed — no poll.
async fn listen_round_trips(
    http: &reqwest::Client,
    url: &str,
    rounds: u64,
) -> Result<Vec<Duration>, String> {
    let mut took = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let task = create_task(http, url, round).await?;
        let mut body = Box::pin(open_listen(http, url, &task).await?);
        until_told(&mut body, r#""status":"completed""#).await?;
        took.push(started.elapsed());
    }
    Ok(took)
}

/// `subscriptions/listen` for `task` on `url`: the stream of its frames.
async fn open_listen(
    http: &reqwest::Client,
    url: &str,
    task: &str,
) -> Result<impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>>, String> {
    let listen = json!({ "jsonrpc": "2.0", "id": 2, "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": [task] }, "_meta": meta(true, None) } });
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(listen.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(response.bytes_stream())
}

/// Reads `body` until its text holds `needle`.
async fn until_told(
    body: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    needle: &str,
) -> Result<(), String> {
    use futures_util::StreamExt;
    let mut text = String::new();
    while !text.contains(needle) {
        let chunk = tokio::time::timeout(LIMIT, body.next())
            .await
            .map_err(|_| format!("no {needle} in time"))?
            .ok_or_else(|| format!("the listen ended before {needle}: {text}"))?
            .map_err(|e| e.to_string())?;
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    Ok(())
}

/// Measure 6: how soon a listen hears a write made on another replica. A long task runs on A;
/// a listen for it is open on `listener` (A itself, or B on the same store) and has sent its
/// first state; the clock starts as `tasks/cancel` goes to A and stops at the listen's
/// `cancelled`. The wake-up is the store's word (Redis publishes every task write): no tick.
async fn listen_wakeups(
    http: &reqwest::Client,
    a: &str,
    listener: &str,
    rounds: u64,
) -> Result<Vec<Duration>, String> {
    let mut took = Vec::new();
    for round in 0..rounds {
        let body = json!({ "jsonrpc": "2.0", "id": round, "method": "tools/call", "params": {
            "name": "progress_task", "arguments": { "steps": 10_000, "delay_ms": 50 },
            "_meta": meta(true, None) } });
        let created: Value = answer(http, a, "tools/call", "progress_task", &body).await?;
        let task = created["result"]["taskId"]
            .as_str()
            .ok_or_else(|| format!("no task id: {created}"))?
            .to_owned();
        let mut listen = Box::pin(open_listen(http, listener, &task).await?);
        until_told(&mut listen, r#""status":"working""#).await?;
        let started = Instant::now();
        let cancel = json!({ "jsonrpc": "2.0", "id": 3, "method": "tasks/cancel",
            "params": { "taskId": task, "_meta": meta(true, None) } });
        let cancelled: Value = answer(http, a, "tasks/cancel", &task, &cancel).await?;
        if cancelled.get("error").is_some() {
            return Err(format!("tasks/cancel refused: {cancelled}"));
        }
        until_told(&mut listen, r#""status":"cancelled""#).await?;
        took.push(started.elapsed());
    }
    Ok(took)
}

#[path = "../tests/common/services.rs"]
#[allow(dead_code)] // the bench starts Redis alone
mod services;

/// Measure 4: a task's round trip on one replica per store, memory then Redis.
async fn store_round_trips(http: &reqwest::Client, rounds: u64) -> Result<Value, String> {
    let memory = Serve::start(&["--store", "memory"])?;
    round_trips(http, &memory.url, 10).await?;
    let on_memory = round_trips(http, &memory.url, rounds).await?;
    drop(memory);
    let Some(redis) = std::panic::catch_unwind(services::RedisServer::start)
        .map_err(|_| "redis-server did not start".to_owned())?
    else {
        println!("  4. skipped: no redis-server installed");
        return Ok(json!(null));
    };
    let (on_redis, same, across) = {
        let serve = Serve::start(&["--store", &redis.url()])?;
        let other = Serve::start(&["--store", &redis.url()])?;
        round_trips(http, &serve.url, 10).await?;
        let trips = round_trips(http, &serve.url, rounds).await?;
        let wakeups = rounds.min(200);
        listen_wakeups(http, &serve.url, &serve.url, 5).await?;
        let same = listen_wakeups(http, &serve.url, &serve.url, wakeups).await?;
        let across = listen_wakeups(http, &serve.url, &other.url, wakeups).await?;
        (trips, same, across)
    };
    println!(
        "  6. a listen woken by a cancel on replica A (Redis): the listen on A p50 {:.3} ms p99 {:.3} ms; on B p50 {:.3} ms p99 {:.3} ms",
        percentile_ms(&same, 0.5),
        percentile_ms(&same, 0.99),
        percentile_ms(&across, 0.5),
        percentile_ms(&across, 0.99)
    );
    let (m, r) = (
        percentile_ms(&on_memory, 0.5),
        percentile_ms(&on_redis, 0.5),
    );
    println!(
        "  4. task round trip on a replica: store memory p50 {m:.3} ms, store redis p50 {r:.3} ms: Redis {:.2}× memory (round trips/s; target ≥ 0.5×{})",
        m / r,
        if m / r >= 0.5 { ", met" } else { ", MISSED" }
    );
    Ok(
        json!({ "memory_p50": m, "memory_p99": percentile_ms(&on_memory, 0.99),
        "redis_p50": r, "redis_p99": percentile_ms(&on_redis, 0.99), "redis_over_memory": m / r,
        "listen_wakeup_same_replica_p50": percentile_ms(&same, 0.5),
        "listen_wakeup_same_replica_p99": percentile_ms(&same, 0.99),
        "listen_wakeup_other_replica_p50": percentile_ms(&across, 0.5),
        "listen_wakeup_other_replica_p99": percentile_ms(&across, 0.99) }),
    )
}

fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    let mut sorted: Vec<Duration> = samples.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1_000.0
}

/// `FORKSCOPE_BENCH_ONLY=store`: measures 4 and 6 alone.
fn store_only() -> bool {
    std::env::var("FORKSCOPE_BENCH_ONLY").as_deref() == Ok("store")
}

async fn run() -> Result<Value, String> {
    let (steps, rounds) = if quick() { (500, 20) } else { (10_000, 500) };
    if store_only() {
        let stores = store_round_trips(&http(), rounds).await?;
        return Ok(json!({ "quick": quick(), "task_round_trip_by_store_ms": stores }));
    }
    let serve = Serve::start(&[])?;
    let http = http();
    let url = serve.url.clone();
    // Warm both paths up.
    events_per_second(&http, &url, 50, true).await?;
    events_per_second(&http, &url, 50, false).await?;
    let legacy = events_per_second(&http, &url, steps, true).await?;
    let modern = events_per_second(&http, &url, steps, false).await?;
    let (plain, task) = first_byte(&http, &url, rounds).await?;
    let trips = round_trips(&http, &url, rounds).await?;
    // A fresh server: the task table holds 1,024 tasks, and measures 2 and 3 made 1,000.
    let told = {
        let serve = Serve::start(&[])?;
        listen_round_trips(&http, &serve.url, 10).await?;
        listen_round_trips(&http, &serve.url, rounds).await?
    };
    let (plain_p50, task_p50) = (percentile_ms(&plain, 0.5), percentile_ms(&task, 0.5));
    println!(
        "forkscope serve, both revisions — {} sizes",
        if quick() { "quick" } else { "full" }
    );
    println!(
        "  1. tool-call progress events/s ({steps} steps, best of 3): 2025-11-25 {legacy:.0}, 2026-07-28 {modern:.0} ({:.2}×)",
        modern / legacy
    );
    println!(
        "  2. first byte of a plain 2026 call p50 {plain_p50:.3} ms p99 {:.3} ms; fenced task create p50 {task_p50:.3} ms p99 {:.3} ms ({:.2}× the plain call; target ≤ 2×{})",
        percentile_ms(&plain, 0.99),
        percentile_ms(&task, 0.99),
        task_p50 / plain_p50,
        if task_p50 <= 2.0 * plain_p50 {
            ", met"
        } else {
            ", MISSED"
        }
    );
    println!(
        "  3. task round trip (create, poll, result; 1 step) p50 {:.3} ms p99 {:.3} ms ({rounds} rounds)",
        percentile_ms(&trips, 0.5),
        percentile_ms(&trips, 0.99)
    );
    println!(
        "  5. the same round trip told by a listen (create, subscriptions/listen, the end's notifications/tasks) p50 {:.3} ms p99 {:.3} ms",
        percentile_ms(&told, 0.5),
        percentile_ms(&told, 0.99)
    );
    drop(serve);
    let stores = store_round_trips(&http, rounds).await?;
    Ok(json!({
        "quick": quick(),
        "task_round_trip_by_store_ms": stores,
        "progress_events_per_second": { "2025-11-25": legacy, "2026-07-28": modern, "steps": steps },
        "first_byte_ms": { "plain_p50": plain_p50, "plain_p99": percentile_ms(&plain, 0.99),
            "task_create_p50": task_p50, "task_create_p99": percentile_ms(&task, 0.99), "rounds": rounds },
        "task_round_trip_ms": { "p50": percentile_ms(&trips, 0.5), "p99": percentile_ms(&trips, 0.99) },
        "listen_round_trip_ms": { "p50": percentile_ms(&told, 0.5), "p99": percentile_ms(&told, 0.99) },
    }))
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match runtime.block_on(run()) {
        Ok(report) => {
            let target = std::path::Path::new(env!("CARGO_BIN_EXE_forkscope"))
                .ancestors()
                .nth(2)
                .map(|p| p.to_path_buf())
                .unwrap_or_default();
            // A store-only run never overwrites a whole run's figures.
            let name = match (store_only(), quick()) {
                (true, true) => "bench-revisions.store.quick.json",
                (true, false) => "bench-revisions.store.json",
                (false, true) => "bench-revisions.quick.json",
                (false, false) => "bench-revisions.json",
            };
            let path = target.join(name);
            if let Err(e) = std::fs::write(&path, format!("{report:#}\n")) {
                eprintln!("cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("results written to {}", path.display());
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("FAILED: {why}");
            ExitCode::FAILURE
        }
    }
}
