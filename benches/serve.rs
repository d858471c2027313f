//! `forkscope serve` as a user runs it: the real binary as a subprocess, real sockets on
//! 127.0.0.1, every figure beside a bare-axum baseline measured in the same run.
//!
//! One core per server: the forkscope subprocess runs with `TOKIO_WORKER_THREADS=1`; the bare
//! axum baseline runs on its own OS thread with a current-thread runtime; the measuring client
//! (reqwest + forkscope's own SSE parser, the same code for both servers) runs on a third,
//! current-thread runtime on the main thread. With two CPUs or more, the client is pinned to
//! one and both servers to another: left to the scheduler, a server sometimes shared the
//! client's CPU for a whole run, which serialises a replay's rendering and its parsing (the
//! same build then measured either about 1.1× or 1.5× bare for the whole replay).
//!
//! 1. tool-call progress events/s: `progress_task` with `delay_ms` 0, send → result, best of 3;
//!    bare: serialize a `notifications/progress`, frame it, `send().await` it into a
//!    1,024-slot channel feeding `Body::from_stream`, then the result.
//! 2. background-emitter events/s (`--emit-rate 1000000`): the session's GET stream, events
//!    after the first one, best of 3; bare: the same loop with `notifications/message`.
//! 3. resume of a finished tool call after 1,000 missed: GET with `Last-Event-ID` = the tool
//!    call's priming id, send → first replayed event and → result, p50/p99, every progress
//!    value checked to arrive exactly once; bare: a whole-buffer replay of stored frames.
//!    3 reads the whole call before resuming; 3b makes a real break: it drops the call's
//!    stream right after its priming event, waits until the server says the call finished
//!    (forkscope's `tool call finished` log line; the bare call's task ending), then resumes
//!    over a new connection, as a client cut off mid-call does.
//! 4. idle CPU of a fresh `--emit-every 0` server holding one session with its GET stream open.
//!
//! R. Replicas on Redis (`--store redis://…`), each figure beside the in-memory `forkscope
//! serve` of the same run rather than bare axum: R1 measure 1 on one replica; R2 two replicas,
//! two clients at once, one call each on its own replica, aggregate events/s; R3 measure 3 with
//! the resume landing on the other replica; R4 Redis `used_memory` per idle session and per
//! retained finished call. The bench starts its own `redis-server` (no persistence) on a free
//! 127.0.0.1 port, pinned to the servers' CPU, and kills it on every path. Without
//! `redis-server` these are skipped in quick runs and FAILED in a full one.
//!
//! `cargo bench --bench serve`; `FORKSCOPE_BENCH_QUICK=1` (or running without `--bench`, as
//! `cargo test --all-targets` does) uses small sizes. Results are printed as a table and
//! written as JSON to `target/bench-serve.json` (quick runs: `target/bench-serve.quick.json`,
//! so a smoke test never overwrites a full run). `FORKSCOPE_BENCH_ONLY=resume` runs measures 3
//! and 3b alone (with their JSON in `target/bench-serve.resume.json`), for iterating on the
//! replay path. `FORKSCOPE_BENCH_ONLY=redis` runs measures 1 and 3 (the in-memory figures the
//! Redis ones are compared with) and the R measures (JSON in `target/bench-serve.redis.json`).
//! A measure that cannot run (a refused flag, a
//! stream that stalls, a replay that loses or repeats an event) is reported as FAILED with its
//! reason and makes the process exit non-zero; a missed target is reported, not fatal.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use forkscope::wire::headers::MODELLED_REVISION;
use forkscope::wire::sse::{self, Parser};
use forkscope::wire::{jsonrpc, mcp};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Every request's send (headers back) must finish within this.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `forkscope serve` may take to announce its port.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest chunk of the bare whole-buffer replay.
const REPLAY_CHUNK: usize = 32 * 1024;

/// Where the client and the servers run (see the module doc).
#[derive(Clone, Copy, Debug)]
struct Cpus {
    client: core_affinity::CoreId,
    server: core_affinity::CoreId,
}

/// The pinning of this run, chosen once: `None` with fewer than two CPUs to run on.
fn cpus() -> Option<Cpus> {
    static CPUS: std::sync::OnceLock<Option<Cpus>> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| {
        let ids = core_affinity::get_core_ids()?;
        match ids.as_slice() {
            [client, server, ..] => Some(Cpus {
                client: *client,
                server: *server,
            }),
            _ => None,
        }
    })
}

/// Moves the calling thread to `cpu`, if the run pins (threads and processes it starts after
/// this inherit it).
fn pin(cpu: impl Fn(Cpus) -> core_affinity::CoreId) {
    if let Some(cpus) = cpus() {
        core_affinity::set_for_current(cpu(cpus));
    }
}

/// `cargo bench` passes `--bench`; anything else (`cargo test --all-targets`) is a smoke run.
fn quick() -> bool {
    std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench")
}

/// Which measures run (`FORKSCOPE_BENCH_ONLY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    All,
    /// `resume`: measures 3 and 3b.
    Resume,
    /// `redis`: measures 1 and 3 (the in-memory baselines) and the R measures.
    Redis,
}

#[derive(Clone, Copy, Debug)]
struct Sizes {
    quick: bool,
    only: Only,
    /// Measure 1: steps of one `progress_task`.
    progress_steps: u64,
    /// Measure 2: background events counted after the first one.
    background_events: u64,
    /// Best-of count for measures 1 and 2.
    best_of: usize,
    /// Measures 3 and 3b: tries, and events missed before each resume.
    resume_tries: usize,
    missed: u64,
    /// Measure 4: how long the server is left idle.
    idle: Duration,
    /// Measure 6: tool calls in one long session.
    long_session_calls: u64,
    /// R4: idle sessions opened, and retained finished calls of 1,000 and of 10 steps.
    idle_sessions: u64,
    retained_long_calls: u64,
    retained_short_calls: u64,
    limits: Limits,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        Sizes {
            quick,
            only: match std::env::var("FORKSCOPE_BENCH_ONLY").as_deref() {
                Ok("resume") => Only::Resume,
                Ok("redis") => Only::Redis,
                _ => Only::All,
            },
            progress_steps: if quick { 2_000 } else { 10_000 }, // the tool's maximum
            background_events: if quick { 2_000 } else { 200_000 },
            best_of: 3,
            resume_tries: if quick { 3 } else { 50 },
            missed: 1_000,
            idle: Duration::from_secs(if quick { 1 } else { 10 }),
            long_session_calls: if quick { 2_000 } else { 100_000 },
            idle_sessions: if quick { 50 } else { 1_000 },
            retained_long_calls: if quick { 2 } else { 20 },
            retained_short_calls: if quick { 10 } else { 200 },
            limits: Limits {
                deadline: Duration::from_secs(if quick { 10 } else { 120 }),
                stall: Duration::from_secs(5),
                after_result: Duration::from_secs(2),
            },
        }
    }
}

/// Bounds on reading one SSE stream.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// The whole stream, from the request's send.
    deadline: Duration,
    /// Longest silence before the result.
    stall: Duration,
    /// How long a stream may stay open after its result before we stop waiting for its end.
    after_result: Duration,
}

async fn within<T>(
    limit: Duration,
    what: &str,
    future: impl Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| format!("{what}: no answer within {:.1} s", limit.as_secs_f64()))
}

fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

// --- JSON-RPC shapes, shared by the bare baseline and the client ----------------------------

fn progress_json(token: &Value, n: u64, total: u64) -> String {
    json!({
        "jsonrpc": "2.0",
        "method": mcp::method::PROGRESS,
        "params": { "progressToken": token, "progress": n, "total": total, "message": format!("step {n} of {total}") }
    })
    .to_string()
}

fn result_json(id: &Value, steps: u64) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": { "content": [{ "type": "text", "text": format!("done: {steps} steps") }], "isError": false }
    })
    .to_string()
}

fn message_json(n: u64) -> String {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": { "level": "info", "logger": "forkscope", "data": { "background": n } }
    })
    .to_string()
}

fn tool_call(id: u64, steps: u64) -> mcp::Request {
    tool_call_with(id, steps, mcp::ProgressToken::Number(1))
}

fn tool_call_with(id: u64, steps: u64, token: mcp::ProgressToken) -> mcp::Request {
    let call = mcp::ToolCall::with_progress(
        "progress_task",
        json!({ "steps": steps, "delay_ms": 0 }),
        token,
    );
    mcp::Request::new(mcp::RequestId(id), mcp::Call::ToolsCall(call))
}

/// The request ids of the tool calls a server has finished (sent their result, or stopped
/// because their stream went away): what a resume after a break waits on.
type Ended = watch::Receiver<BTreeSet<u64>>;

// --- bare axum baseline, on its own thread with a current-thread runtime --------------------

struct BareState {
    /// The stored replay of a finished tool call: `missed` progress frames and the result,
    /// concatenated and cut into chunks of about [`REPLAY_CHUNK`] at frame boundaries.
    replay: Vec<Bytes>,
    /// Set when a call's task ends.
    ended: watch::Sender<BTreeSet<u64>>,
}

fn stored_replay(missed: u64) -> Vec<Bytes> {
    let token = json!(1);
    let mut chunks = Vec::new();
    let mut chunk = bytes::BytesMut::with_capacity(REPLAY_CHUNK + 1024);
    let frames = (1..=missed)
        .map(|n| {
            sse::frame(
                None,
                &n.to_string(),
                None,
                &progress_json(&token, n, missed),
            )
        })
        .chain(std::iter::once(sse::frame(
            None,
            &(missed + 1).to_string(),
            None,
            &result_json(&json!(0), missed),
        )));
    for frame in frames {
        if !chunk.is_empty() && chunk.len() + frame.len() > REPLAY_CHUNK {
            chunks.push(chunk.split().freeze());
        }
        chunk.extend_from_slice(&frame);
    }
    chunks.push(chunk.freeze());
    chunks
}

fn bare_sse(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// POST: a `tools/call` answered like `progress_task`: priming event, per step serialize a
/// `notifications/progress` with serde_json, frame it, `send().await` it through a 1,024-slot
/// channel (backpressured by the socket) into `Body::from_stream`; then the result. The call
/// ends early when its stream goes away; either way its end is noted in `ended`.
async fn bare_post(State(state): State<Arc<BareState>>, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let steps = message
        .pointer("/params/arguments/steps")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let token = message
        .pointer("/params/_meta/progressToken")
        .cloned()
        .unwrap_or(json!(1));
    let request = id.as_u64();
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    tokio::spawn(async move {
        let call = async {
            if tx.send(sse::frame(None, "0", Some(250), "")).await.is_err() {
                return;
            }
            for n in 1..=steps {
                let frame =
                    sse::frame(None, &n.to_string(), None, &progress_json(&token, n, steps));
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
            let result = sse::frame(
                None,
                &(steps + 1).to_string(),
                None,
                &result_json(&id, steps),
            );
            let _ = tx.send(result).await;
        };
        call.await;
        if let Some(request) = request {
            state.ended.send_modify(|ended| {
                ended.insert(request);
            });
        }
    });
    bare_sse(rx)
}

/// GET with `Last-Event-ID`: the whole-buffer replay of a finished tool call — the stored,
/// pre-framed 1,000 progress events and the result, handed to hyper as a few ~32 KiB `Bytes`
/// (no per-event work, no per-event write), then the body ends. This is the strongest replay a
/// server can do: a handful of writes of bytes it already holds.
///
/// GET without it: the standalone stream, priming event then `notifications/message` events in
/// the same serialize → frame → `send().await` loop as POST, until the client goes away.
async fn bare_get(State(state): State<Arc<BareState>>, headers: HeaderMap) -> Response {
    if headers.contains_key("last-event-id") {
        let chunks: Vec<Result<Bytes, Infallible>> = state.replay.iter().cloned().map(Ok).collect();
        return (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            Body::from_stream(futures_util::stream::iter(chunks)),
        )
            .into_response();
    }
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    tokio::spawn(async move {
        if tx.send(sse::frame(None, "0", Some(250), "")).await.is_err() {
            return;
        }
        // Bounded; in practice ends when the client drops the stream.
        for n in 1..=100_000_000u64 {
            let frame = sse::frame(None, &n.to_string(), None, &message_json(n));
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    bare_sse(rx)
}

struct BareServer {
    addr: SocketAddr,
    ended: Ended,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BareServer {
    fn start(missed: u64) -> Result<BareServer, String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (ended_tx, ended) = watch::channel(BTreeSet::new());
        let state = Arc::new(BareState {
            replay: stored_replay(missed),
            ended: ended_tx,
        });
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bare-axum".into())
            .spawn(move || {
                pin(|c| c.server);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime for the bare server");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("the bare listener joins the runtime")
                        .tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        });
                    let app = axum::Router::new()
                        .route("/mcp", post(bare_post).get(bare_get))
                        .with_state(state);
                    tokio::select! {
                        _ = async { axum::serve(listener, app).await } => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| e.to_string())?;
        Ok(BareServer {
            addr,
            ended,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }
}

impl Drop for BareServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            for _ in 0..200 {
                if thread.is_finished() {
                    let _ = thread.join();
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            eprintln!("bench: the bare server thread did not stop within 2 s; leaving it");
        }
    }
}

// --- `forkscope serve` as a subprocess ------------------------------------------------------

/// A running `forkscope serve`; killed when dropped (panics included).
struct Serve {
    child: Child,
    port: u16,
    args: String,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The calls its log says finished.
    ended: Ended,
}

impl Serve {
    fn start(args: &[&str]) -> Result<Serve, String> {
        let binary = env!("CARGO_BIN_EXE_forkscope");
        let shown = format!("forkscope serve {}", args.join(" "));
        // The child inherits the affinity of the thread that starts it.
        pin(|c| c.server);
        let child = Command::new(binary)
            .arg("serve")
            .args(args)
            .env("TOKIO_WORKER_THREADS", "1")
            .env_remove("RUST_LOG") // the default log level, as a user runs it
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        pin(|c| c.client);
        let mut child = child.map_err(|e| format!("{shown}: cannot start {binary}: {e}"))?;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr_tail.clone();
        let (ended_tx, ended) = watch::channel(BTreeSet::new());
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_thread = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(request) = finished_call(&line) {
                    ended_tx.send_modify(|ended| {
                        ended.insert(request);
                    });
                }
                let mut tail = tail.lock().unwrap();
                if tail.len() == 20 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            // Keeps draining stdout after the announcement, until the process ends.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        let mut serve = Serve {
            child,
            port: 0,
            args: shown.clone(),
            stderr_tail,
            ended,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(port) = announced_port(&line) {
                        if !line.contains("(policy fenced") {
                            eprintln!("bench: unexpected announcement from {shown}: {line}");
                        }
                        serve.port = port;
                        return Ok(serve);
                    }
                    seen.push(line);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{shown}: no `forkscope serve: … at http://127.0.0.1:PORT/mcp …` line \
                         within {} s (stdout: {:?}){}",
                        START_TIMEOUT.as_secs(),
                        seen,
                        serve.tail()
                    ));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    // stdout closed: the process is ending. Give stderr a moment to drain.
                    let mut status = None;
                    for _ in 0..100 {
                        if let Ok(Some(s)) = serve.child.try_wait() {
                            status = Some(s);
                            if stderr_thread.is_finished() {
                                break;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let status = status.map_or("still running".to_owned(), |s| s.to_string());
                    return Err(format!(
                        "{shown} exited before announcing its port ({status}){}",
                        serve.tail()
                    ));
                }
            }
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the server wrote to stderr, for a failure message.
    fn tail(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap();
        if tail.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = tail
                .iter()
                .rev()
                .take(6)
                .rev()
                .map(String::as_str)
                .collect();
            format!("; its stderr ends: {}", clip(&lines.join(" | "), 600))
        }
    }

    /// An error message, with a note if the server has died meanwhile.
    fn explain(&mut self, error: String) -> String {
        match self.child.try_wait() {
            Ok(Some(status)) => format!("{error} [{} died: {status}{}]", self.args, self.tail()),
            _ => error,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The request id of a `tool call finished … request=7 …` log line (colours or not).
fn finished_call(line: &str) -> Option<u64> {
    if !line.contains("tool call finished") {
        return None;
    }
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An ANSI escape: up to and including its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let rest = &plain[plain.find("request=")? + "request=".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The port of the start line: `forkscope serve: MCP Streamable HTTP REVISIONS at URL …`, or a
/// replica's `forkscope serve: replica NAME at URL on store STORE (policy …)`.
fn announced_port(line: &str) -> Option<u16> {
    let at = match line.strip_prefix("forkscope serve: MCP Streamable HTTP ") {
        Some(rest) => rest.split_once(" at ")?.1,
        None => {
            line.strip_prefix("forkscope serve: replica ")?
                .split_once(" at ")?
                .1
        }
    };
    let rest = at.strip_prefix("http://127.0.0.1:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    rest[digits.len()..].starts_with("/mcp").then_some(())?;
    digits.parse().ok()
}

// --- the measuring client: reqwest + forkscope's SSE parser, one code path for both ---------

/// Where requests go, with the session they carry (a placeholder for the bare server, so both
/// get the same headers).
#[derive(Clone, Debug)]
struct Target {
    url: String,
    session: String,
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("a reqwest client")
}

impl Target {
    /// The endpoint, reached through `http` (one client per connection where that matters).
    fn endpoint(&self, http: &reqwest::Client) -> mcp::Endpoint {
        mcp::Endpoint::new(http.clone(), self.url.clone())
    }

    fn headers(&self) -> mcp::Headers<'_> {
        mcp::Headers::session(&self.session, MODELLED_REVISION)
    }
}

fn post_request(
    http: &reqwest::Client,
    target: &Target,
    body: &mcp::Request,
) -> reqwest::RequestBuilder {
    target.endpoint(http).post(target.headers(), body)
}

fn get_request(
    http: &reqwest::Client,
    target: &Target,
    last_event_id: Option<&str>,
) -> reqwest::RequestBuilder {
    let headers = target.headers().cursor(last_event_id);
    target.endpoint(http).get_stream(headers)
}

async fn send(request: reqwest::RequestBuilder, what: &str) -> Result<reqwest::Response, String> {
    within(SEND_TIMEOUT, what, request.send())
        .await?
        .map_err(|e| format!("{what}: {e}"))
}

/// The response must be a 200 SSE stream; anything else becomes an error with its body.
async fn expect_stream(
    response: reqwest::Response,
    what: &str,
) -> Result<reqwest::Response, String> {
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if status == 200 && content_type.starts_with("text/event-stream") {
        return Ok(response);
    }
    let body = within(Duration::from_secs(5), what, response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Err(format!(
        "{what}: expected 200 text/event-stream, got {status} ({content_type}): {}",
        clip(&body, 300)
    ))
}

/// `initialize` then `notifications/initialized`; returns the session as a target.
async fn open_session(http: &reqwest::Client, url: &str) -> Result<Target, String> {
    let endpoint = mcp::Endpoint::new(http.clone(), url);
    let opened = within(
        2 * SEND_TIMEOUT,
        "initialize",
        mcp::open_session(&endpoint, "forkscope-bench"),
    )
    .await?;
    let session = opened.map_err(|e| e.to_string())?;
    Ok(Target {
        url: url.to_owned(),
        session: session.to_string(),
    })
}

async fn close_session(http: &reqwest::Client, target: &Target) {
    let request = target.endpoint(http).delete(target.headers());
    let _ = send(request, "DELETE /mcp").await;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Progress,
    Result,
    Error,
    Other,
}

/// A cheap look at an event's data, without parsing it (the client must not be the bottleneck).
fn classify(data: &str) -> Kind {
    if data.contains("\"method\"") {
        if data.contains(mcp::method::PROGRESS) {
            Kind::Progress
        } else {
            Kind::Other
        }
    } else if data.contains("\"result\"") {
        Kind::Result
    } else if data.contains("\"error\"") {
        Kind::Error
    } else {
        Kind::Other
    }
}

#[derive(Clone, Copy, Debug)]
enum Until {
    /// Until the server ends the stream (or it stays open `after_result` past the result).
    End,
    /// Until this many events with data have arrived.
    DataEvents(u64),
    /// Until the priming event (empty data, an id) has arrived.
    Priming,
}

/// What one SSE stream delivered. Times are since the request's send.
#[derive(Debug, Default)]
struct Read {
    /// The id of the first event with empty data (the priming event).
    priming_id: Option<String>,
    first_at: Option<Duration>,
    last_at: Option<Duration>,
    result_at: Option<Duration>,
    data_events: u64,
    progress: u64,
    results: u64,
    ended: bool,
    /// Body bytes received.
    bytes: u64,
    /// Every data payload, when asked to keep them (checked after the clock stops).
    kept: Vec<String>,
}

impl Read {
    fn summary(&self, start: Instant) -> String {
        let secs = start.elapsed().as_secs_f64();
        format!(
            "after {secs:.1} s: {} events with data ({} progress, {} results, {:.0} events/s)",
            self.data_events,
            self.progress,
            self.results,
            self.data_events as f64 / secs
        )
    }
}

async fn read_sse(
    response: reqwest::Response,
    start: Instant,
    until: Until,
    keep: bool,
    limits: Limits,
) -> Result<Read, String> {
    let mut parser = Parser::new();
    let mut body = response.bytes_stream();
    let mut read = Read::default();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= limits.deadline {
            return Err(format!("timed out {}", read.summary(start)));
        }
        let quiet = if read.results > 0 {
            limits.after_result
        } else {
            limits.stall
        };
        let wait = quiet.min(limits.deadline - elapsed);
        let next = match tokio::time::timeout(wait, body.next()).await {
            Ok(next) => next,
            // The result is in and the stream stays open: done waiting; `ended` stays false.
            Err(_) if read.results > 0 => return Ok(read),
            Err(_) if wait < quiet => return Err(format!("timed out {}", read.summary(start))),
            Err(_) => {
                return Err(format!(
                    "stalled (nothing for {:.1} s) {}",
                    wait.as_secs_f64(),
                    read.summary(start)
                ));
            }
        };
        let Some(chunk) = next else {
            read.ended = true;
            return Ok(read);
        };
        let chunk = chunk.map_err(|e| format!("stream broke ({e}) {}", read.summary(start)))?;
        read.bytes += chunk.len() as u64;
        let events = parser
            .feed(&chunk)
            .map_err(|e| format!("SSE parse error: {e}"))?;
        for event in events {
            if event.data.is_empty() {
                if read.priming_id.is_none() && event.id.is_some() {
                    read.priming_id = event.id;
                    if let Until::Priming = until {
                        return Ok(read);
                    }
                }
                continue;
            }
            let now = start.elapsed();
            read.data_events += 1;
            read.first_at.get_or_insert(now);
            read.last_at = Some(now);
            match classify(&event.data) {
                Kind::Progress => read.progress += 1,
                Kind::Result => {
                    read.results += 1;
                    read.result_at.get_or_insert(now);
                }
                Kind::Error => {
                    return Err(format!(
                        "JSON-RPC error on the stream: {}",
                        clip(&event.data, 300)
                    ));
                }
                Kind::Other => {}
            }
            if keep {
                read.kept.push(event.data);
            }
            if let Until::DataEvents(n) = until
                && read.data_events >= n
            {
                return Ok(read);
            }
        }
    }
}

/// Measure 1, one try: events/s from the send to the result (and a warning).
async fn tool_call_rate(
    http: &reqwest::Client,
    target: &Target,
    id: u64,
    steps: u64,
    limits: Limits,
) -> Result<(f64, Option<String>), String> {
    let (at, warning) = tool_call_timed(http, target, id, steps, limits).await?;
    Ok((steps as f64 / at.as_secs_f64(), warning))
}

/// One `steps`-step tool call read to its end: the time from the send to the result.
async fn tool_call_timed(
    http: &reqwest::Client,
    target: &Target,
    id: u64,
    steps: u64,
    limits: Limits,
) -> Result<(Duration, Option<String>), String> {
    let start = Instant::now();
    let response = send(
        post_request(http, target, &tool_call(id, steps)),
        "tools/call",
    )
    .await?;
    let response = expect_stream(response, "tools/call").await?;
    let read = read_sse(response, start, Until::End, false, limits)
        .await
        .map_err(|e| format!("tools/call steps={steps}: {e}"))?;
    if read.progress != steps || read.results != 1 {
        return Err(format!(
            "tools/call steps={steps}: the stream ended with {} progress events and {} results",
            read.progress, read.results
        ));
    }
    let at = read.result_at.expect("a result was counted");
    let warning = (!read.ended).then(|| {
        format!(
            "a tool call's stream stayed open {} s after its result",
            limits.after_result.as_secs_f64()
        )
    });
    Ok((at, warning))
}

/// Measure 2, one try: events/s over `count` events after the first one on a GET stream.
async fn background_rate(
    http: &reqwest::Client,
    target: &Target,
    count: u64,
    limits: Limits,
) -> Result<f64, String> {
    let start = Instant::now();
    let response = send(get_request(http, target, None), "GET /mcp").await?;
    let response = expect_stream(response, "GET /mcp").await?;
    let read = read_sse(response, start, Until::DataEvents(count + 1), false, limits)
        .await
        .map_err(|e| format!("GET /mcp, counting {count} background events: {e}"))?;
    if read.data_events < count + 1 {
        return Err(format!(
            "GET /mcp: the stream ended {}",
            read.summary(start)
        ));
    }
    let span = read.last_at.unwrap() - read.first_at.unwrap();
    Ok(count as f64 / span.as_secs_f64())
}

/// Checks a replay after the priming event: every progress value 1..=missed exactly once,
/// the result exactly once, nothing else.
fn check_replay(kept: &[String], missed: u64) -> Result<(), String> {
    let mut seen = vec![0u32; missed as usize + 1];
    let mut results = 0;
    for data in kept {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| format!("replayed event is not JSON ({e}): {}", clip(data, 200)))?;
        if v.get("method").and_then(Value::as_str) == Some(mcp::method::PROGRESS) {
            let p = v
                .pointer("/params/progress")
                .and_then(Value::as_u64)
                .filter(|p| (1..=missed).contains(p))
                .ok_or_else(|| {
                    format!("replayed progress out of 1..={missed}: {}", clip(data, 200))
                })?;
            seen[p as usize] += 1;
        } else if v.get("result").is_some() {
            results += 1;
        } else {
            return Err(format!("unexpected replayed event: {}", clip(data, 200)));
        }
    }
    let missing: Vec<u64> = (1..=missed).filter(|p| seen[*p as usize] == 0).collect();
    let repeated: Vec<u64> = (1..=missed).filter(|p| seen[*p as usize] > 1).collect();
    if missing.is_empty() && repeated.is_empty() && results == 1 {
        return Ok(());
    }
    Err(format!(
        "replay not exactly-once: {} progress values missing (first {:?}), {} repeated (first {:?}), {results} results",
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        repeated.len(),
        repeated.iter().take(5).collect::<Vec<_>>(),
    ))
}

/// One resume: times since the resume's send, the replay's size, and a warning.
struct Resumed {
    first: Duration,
    all: Duration,
    bytes: u64,
    warning: Option<String>,
}

/// Measure 3, one try: a `missed`-step tool call on `call_on` read to its end, then a resume
/// from its priming id on `resume_on` (the same server, or R3's other replica).
async fn resume_try(
    http: &reqwest::Client,
    call_on: &Target,
    resume_on: &Target,
    id: u64,
    missed: u64,
    limits: Limits,
) -> Result<Resumed, String> {
    let start = Instant::now();
    let response = send(
        post_request(http, call_on, &tool_call(id, missed)),
        "tools/call",
    )
    .await?;
    let response = expect_stream(response, "tools/call").await?;
    let call = read_sse(response, start, Until::End, false, limits)
        .await
        .map_err(|e| format!("tools/call steps={missed}: {e}"))?;
    if call.progress != missed || call.results != 1 {
        return Err(format!(
            "tools/call steps={missed}: {} progress events and {} results",
            call.progress, call.results
        ));
    }
    let priming = call
        .priming_id
        .ok_or("the tool call's stream had no priming event (empty data with an id)")?;
    resume_from(http, resume_on, &priming, missed, limits).await
}

/// Measure 3b, one try: a `missed`-step tool call whose stream is dropped right after its
/// priming event; once the server has finished the call (as `ended` says), a resume from the
/// priming id, over a new connection (the broken one cannot be reused).
async fn resume_after_break(
    http: &reqwest::Client,
    target: &Target,
    ended: &Ended,
    id: u64,
    missed: u64,
    limits: Limits,
) -> Result<Resumed, String> {
    let start = Instant::now();
    let response = send(
        post_request(http, target, &tool_call(id, missed)),
        "tools/call",
    )
    .await?;
    let response = expect_stream(response, "tools/call").await?;
    // `read_sse` owns the response: returning at the priming event drops it mid-stream.
    let call = read_sse(response, start, Until::Priming, false, limits)
        .await
        .map_err(|e| format!("tools/call steps={missed}, up to its priming event: {e}"))?;
    let priming = call
        .priming_id
        .ok_or("the tool call's stream ended before its priming event")?;
    let mut ended = ended.clone();
    within(
        limits.deadline,
        "waiting for the dropped call to finish",
        ended.wait_for(|done| done.contains(&id)),
    )
    .await?
    .map_err(|_| "the server stopped before saying the call finished".to_owned())?;
    resume_from(http, target, &priming, missed, limits).await
}

/// A resume from `priming`, read to its end and checked exactly-once; times from its send.
async fn resume_from(
    http: &reqwest::Client,
    target: &Target,
    priming: &str,
    missed: u64,
    limits: Limits,
) -> Result<Resumed, String> {
    let what = format!("resume GET with Last-Event-ID {priming}");
    let start = Instant::now();
    let response = send(get_request(http, target, Some(priming)), &what).await?;
    let response = expect_stream(response, &what).await?;
    let read = read_sse(response, start, Until::End, true, limits)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    check_replay(&read.kept, missed).map_err(|e| format!("{what}: {e}"))?;
    let warning = (!read.ended).then(|| {
        format!(
            "the resumed stream of a finished tool call stayed open {} s after its result",
            limits.after_result.as_secs_f64()
        )
    });
    Ok(Resumed {
        first: read.first_at.unwrap(),
        all: read.result_at.unwrap(),
        bytes: read.bytes,
        warning,
    })
}

/// Process CPU time (user + system, all threads) in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the `(comm)`, which may hold spaces: state is field 3, utime 14, stime 15.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: no field {n}"))
    };
    Ok(field(14)? + field(15)?)
}

fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

struct Idle {
    cpu_percent: f64,
    cpu_ms: f64,
    seconds: f64,
    bytes_on_get: u64,
}

/// Measure 4: a fresh `--emit-every 0` server, one session, its GET stream open and read.
/// Resident memory of a process, from `/proc/<pid>/status`.
fn rss_mib(pid: u32) -> Result<f64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or("no VmRSS in /proc/<pid>/status")?;
    Ok(kib / 1024.0)
}

struct Memory {
    start_mib: f64,
    unread_mib: f64,
    long_first_mib: f64,
    long_last_mib: f64,
    long_growth_mib: f64,
}

/// 5: a client that opens 16 long tool calls and never reads them (the producers must wait on
/// their full writer queues, not buffer without bound), plus the oversized progress tokens
/// that once took the server to ~1 GB (now refused). 6: RSS over many tool calls in one
/// session (streams, tokens, checker state and history must not grow with the count).
async fn memory(http: &reqwest::Client, sizes: Sizes) -> Result<Memory, String> {
    let mut serve = Serve::start(&["--port", "0", "--policy", "fenced", "--emit-every", "0"])?;
    let pid = serve.pid();
    let result = async {
        let target = open_session(http, &serve.url()).await?;
        let start_mib = rss_mib(pid)?;
        let huge = "x".repeat(60_000);
        for id in 0..16 {
            let call = tool_call_with(10_000 + id, 1_100, mcp::ProgressToken::Text(huge.clone()));
            let r = send(post_request(http, &target, &call), "hostile tools/call").await?;
            let body = r.bytes().await.map_err(|e| e.to_string())?;
            let code = mcp::RpcError::of_body(&body).and_then(|e| e.code());
            if code != Some(jsonrpc::INVALID_PARAMS) {
                return Err(format!(
                    "a 60,000-byte progress token was not refused: {}",
                    String::from_utf8_lossy(&body)
                ));
            }
        }
        let token = "t".repeat(256);
        let mut unread = Vec::new();
        for id in 0..16 {
            let call = tool_call_with(20_000 + id, 1_100, mcp::ProgressToken::Text(token.clone()));
            unread.push(send(post_request(http, &target, &call), "unread tools/call").await?);
        }
        // Let the calls run into their full queues; RSS is read once it stops rising.
        let mut unread_mib = rss_mib(pid)?;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = rss_mib(pid)?;
            if (now - unread_mib).abs() < 0.1 {
                break;
            }
            unread_mib = now;
        }
        unread_mib = unread_mib.max(rss_mib(pid)?);
        drop(unread);
        let target = open_session(http, &serve.url()).await?;
        let calls = sizes.long_session_calls;
        let mut long_first_mib = 0.0;
        for n in 0..calls {
            let response =
                send(post_request(http, &target, &tool_call(n, 1)), "tools/call").await?;
            let response = expect_stream(response, "tools/call").await?;
            let read = read_sse(response, Instant::now(), Until::End, false, sizes.limits).await?;
            if read.results != 1 {
                return Err(format!("call {n}: no result"));
            }
            if n + 1 == calls / 10 {
                long_first_mib = rss_mib(pid)?;
            }
        }
        let long_last_mib = rss_mib(pid)?;
        Ok(Memory {
            start_mib,
            unread_mib,
            long_first_mib,
            long_last_mib,
            long_growth_mib: (long_last_mib - long_first_mib).max(0.0),
        })
    }
    .await;
    result.map_err(|e| serve.explain(e))
}

#[derive(Debug)]
struct Fanout {
    start_mib: f64,
    peak_mib: f64,
    admitted: u64,
    refused: u64,
    sessions_refused: u64,
}

/// 5b: the whole fan-out the per-stream bounds allow — 64 sessions, each opening 15 tool calls
/// of 1,100 steps with 256-byte progress tokens that nobody reads (64 × 15 × 512 KiB of replay
/// was 480 MiB before the global budget). The budget must refuse the excess with a typed 503
/// and hold RSS.
async fn memory_fanout() -> Result<Fanout, String> {
    let mut serve = Serve::start(&["--port", "0", "--policy", "fenced", "--emit-every", "0"])?;
    let pid = serve.pid();
    let result = async {
        // One connection per unread call: a pooled client would queue requests behind them.
        let start_mib = rss_mib(pid)?;
        let token = "t".repeat(256);
        let mut unread = Vec::new();
        let (mut admitted, mut refused) = (0, 0);
        let mut sessions_refused = 0;
        for session in 0..64 {
            let http = http_client();
            // Past the budget, `initialize` is refused too (typed, like the calls).
            let target = match open_session(&http, &serve.url()).await {
                Ok(target) => target,
                Err(e) if e.contains("over_budget") => {
                    sessions_refused += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for call in 0..15 {
                let http = http_client();
                let body = tool_call_with(
                    session * 100 + call,
                    1_100,
                    mcp::ProgressToken::Text(token.clone()),
                );
                let response =
                    send(post_request(&http, &target, &body), "fan-out tools/call").await?;
                match response.status().as_u16() {
                    200 => {
                        admitted += 1;
                        unread.push((http, response));
                    }
                    503 => {
                        let text = response.text().await.map_err(|e| e.to_string())?;
                        if !text.contains("over_budget") {
                            return Err(format!("a 503 that is not over_budget: {text}"));
                        }
                        refused += 1;
                    }
                    other => return Err(format!("fan-out tools/call answered {other}")),
                }
            }
        }
        let mut peak_mib = rss_mib(pid)?;
        let mut last = peak_mib;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = rss_mib(pid)?;
            peak_mib = peak_mib.max(now);
            if (now - last).abs() < 0.1 {
                break;
            }
            last = now;
        }
        drop(unread);
        Ok(Fanout {
            start_mib,
            peak_mib,
            admitted,
            refused,
            sessions_refused,
        })
    }
    .await;
    result.map_err(|e| serve.explain(e))
}

async fn idle_cpu(http: &reqwest::Client, idle: Duration) -> Result<Idle, String> {
    let mut serve = Serve::start(&["--port", "0", "--policy", "fenced", "--emit-every", "0"])?;
    let result = async {
        let target = open_session(http, &serve.url()).await?;
        let response = expect_stream(
            send(get_request(http, &target, None), "GET /mcp").await?,
            "GET /mcp",
        )
        .await?;
        let bytes = Arc::new(AtomicU64::new(0));
        let counter = bytes.clone();
        let reader = tokio::spawn(async move {
            let mut body = response.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        });
        // Let the GET's own work (and its priming event) finish before the window opens.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ticks = clock_ticks_per_second();
        let before_bytes = bytes.load(Ordering::Relaxed);
        let before = cpu_ticks(serve.pid())?;
        let clock = Instant::now();
        tokio::time::sleep(idle).await;
        let after = cpu_ticks(serve.pid())?;
        let seconds = clock.elapsed().as_secs_f64();
        let bytes_on_get = bytes.load(Ordering::Relaxed) - before_bytes;
        let stream_open = !reader.is_finished();
        reader.abort();
        if !stream_open {
            return Err("the GET stream ended during the idle window".to_owned());
        }
        let cpu_secs = (after - before) as f64 / ticks as f64;
        Ok(Idle {
            cpu_percent: 100.0 * cpu_secs / seconds,
            cpu_ms: 1_000.0 * cpu_secs,
            seconds,
            bytes_on_get,
        })
    }
    .await;
    result.map_err(|e| serve.explain(e))
}

/// The client's own ceiling: the SSE parser and classifier alone, on in-memory frames.
fn client_ceiling(events: u64) -> f64 {
    let token = json!(1);
    let mut buffer = Vec::new();
    for n in 1..=events {
        buffer.extend_from_slice(&sse::frame(
            None,
            &format!("0-1-{n}"),
            None,
            &progress_json(&token, n, events),
        ));
    }
    let start = Instant::now();
    let mut parser = Parser::new();
    let mut progress = 0u64;
    for chunk in buffer.chunks(16 * 1024) {
        for event in parser.feed(chunk).expect("well-formed frames") {
            if classify(&event.data) == Kind::Progress {
                progress += 1;
            }
        }
    }
    assert_eq!(progress, events);
    events as f64 / start.elapsed().as_secs_f64()
}

// --- replicas on Redis: the R measures -----------------------------------------------------

#[path = "../tests/common/services.rs"]
#[allow(dead_code)] // the bench starts Redis alone, not the load balancer
mod services;

/// The bench's `redis-server`, started from the servers' CPU so it runs there. `Ok(None)`:
/// not installed. A start that fails (a panic in the harness) becomes an error.
fn start_redis() -> Result<Option<services::RedisServer>, String> {
    pin(|c| c.server);
    let started = std::panic::catch_unwind(services::RedisServer::start);
    pin(|c| c.client);
    started.map_err(|panic| format!("redis-server did not start: {}", panic_text(&*panic)))
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// One command to the bench's Redis; a Redis that cannot be reached is an error, not a panic.
fn redis_command(redis: &services::RedisServer, args: &[&str]) -> Result<String, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| redis.command(args)))
        .map_err(|panic| panic_text(&*panic))
}

/// Redis's `used_memory` (bytes its allocator holds for data, clients and scripts).
fn used_memory(redis: &services::RedisServer) -> Result<u64, String> {
    let info = redis_command(redis, &["INFO", "memory"])?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no used_memory in INFO memory: {}", clip(&info, 200)))
}

/// One replica on the bench's Redis, `--emit-every 0` like the in-memory server it is
/// compared with.
fn start_replica(
    redis: &services::RedisServer,
    name: &str,
    extra: &[&str],
) -> Result<Serve, String> {
    let url = redis.url();
    let mut args = vec![
        "--store",
        url.as_str(),
        "--replica",
        name,
        "--port",
        "0",
        "--policy",
        "fenced",
        "--emit-every",
        "0",
    ];
    args.extend_from_slice(extra);
    Serve::start(&args)
}

/// R2, one try: a `steps`-step call on each replica at once, each from its own client and
/// session; both calls' progress events over the time to the later result (each call's clock
/// starts at its send, the two sends a poll apart).
async fn two_replica_rate(
    calls: [(&reqwest::Client, &Target, u64); 2],
    steps: u64,
    limits: Limits,
) -> Result<f64, String> {
    let [(http_a, a, id_a), (http_b, b, id_b)] = calls;
    let (on_a, on_b) = tokio::join!(
        tool_call_timed(http_a, a, id_a, steps, limits),
        tool_call_timed(http_b, b, id_b, steps, limits),
    );
    let (at_a, _) = on_a.map_err(|e| format!("the call on replica a: {e}"))?;
    let (at_b, _) = on_b.map_err(|e| format!("the call on replica b: {e}"))?;
    Ok(2.0 * steps as f64 / at_a.max(at_b).as_secs_f64())
}

/// R4's figures: Redis bytes per idle session and per retained finished call.
struct RedisMemory {
    baseline: u64,
    /// `DBSIZE` after the warm-up, the idle sessions, the long calls and the short calls.
    keys: [u64; 4],
    per_idle_session: f64,
    per_long_call: f64,
    per_short_call: f64,
}

/// R4: an emptied Redis and a fresh replica that keeps finished calls for 10 minutes (so none
/// expires while counted); `used_memory` before and after idle sessions, then after finished
/// calls of 1,000 and of 10 steps, each read to its end. A warm-up session and two calls come
/// first, so the scripts' cache is in the baseline.
async fn redis_memory(
    http: &reqwest::Client,
    redis: &services::RedisServer,
    sizes: Sizes,
    id: &mut impl FnMut() -> u64,
) -> Result<RedisMemory, String> {
    const LONG: u64 = 1_000;
    const SHORT: u64 = 10;
    redis_command(redis, &["FLUSHALL"])?;
    let mut serve = start_replica(redis, "m", &["--retention-ms", "600000"])?;
    let limits = sizes.limits;
    let result = async {
        let target = open_session(http, &serve.url()).await?;
        for steps in [SHORT, LONG] {
            tool_call_timed(http, &target, id(), steps, limits).await?;
        }
        let keys = || -> Result<u64, String> {
            let n = redis_command(redis, &["DBSIZE"])?;
            n.parse().map_err(|_| format!("DBSIZE answered {n:?}"))
        };
        let baseline = used_memory(redis)?;
        let keys_baseline = keys()?;
        for _ in 0..sizes.idle_sessions {
            open_session(http, &serve.url()).await?;
        }
        let after_sessions = used_memory(redis)?;
        let keys_sessions = keys()?;
        for _ in 0..sizes.retained_long_calls {
            tool_call_timed(http, &target, id(), LONG, limits).await?;
        }
        let after_long = used_memory(redis)?;
        let keys_long = keys()?;
        for _ in 0..sizes.retained_short_calls {
            tool_call_timed(http, &target, id(), SHORT, limits).await?;
        }
        let after_short = used_memory(redis)?;
        let keys_short = keys()?;
        let per = |after: u64, before: u64, count: u64| {
            (after as f64 - before as f64) / count.max(1) as f64
        };
        Ok(RedisMemory {
            baseline,
            keys: [keys_baseline, keys_sessions, keys_long, keys_short],
            per_idle_session: per(after_sessions, baseline, sizes.idle_sessions),
            per_long_call: per(after_long, after_sessions, sizes.retained_long_calls),
            per_short_call: per(after_short, after_long, sizes.retained_short_calls),
        })
    }
    .await;
    result.map_err(|e| serve.explain(e))
}

/// The R rows; `skipped` says why there are none.
#[derive(Default)]
struct RedisReport {
    rows: Vec<Row>,
    skipped: Option<String>,
    /// Body bytes of one R3 replay from the other replica.
    resume_bytes: Option<u64>,
}

/// R1–R4 on a `redis-server` of their own. `in_memory_rate` is measure 1's forkscope figure
/// and `in_memory_resume` measure 3's samples, both of this run.
async fn redis_measures(
    http: &reqwest::Client,
    sizes: Sizes,
    in_memory_rate: Option<f64>,
    in_memory_resume: &ResumeSamples,
    id: &mut impl FnMut() -> u64,
    warnings: &mut Vec<String>,
) -> RedisReport {
    let limits = sizes.limits;
    let steps = sizes.progress_steps;
    let missed = sizes.missed;
    let tries = sizes.resume_tries;
    let mut rate = Row::new(
        "redis_tool_call_progress_events_per_s",
        format!(
            "R1 tool-call progress on Redis, one replica, events/s ({steps} steps, best of {})",
            sizes.best_of
        ),
        "events/s",
        "Redis ≥ 0.25 × in-memory",
    );
    rate.bare = in_memory_rate;
    let mut pair = Row::new(
        "redis_two_replicas_events_per_s",
        format!(
            "R2 2 replicas, 2 clients at once, a {steps}-step call each, aggregate events/s (best of {})",
            sizes.best_of
        ),
        "events/s",
        "— (reported)",
    );
    pair.bare = in_memory_rate;
    let mut elsewhere = ResumeSamples::default();
    elsewhere.first[0] = in_memory_resume.first[1].clone();
    elsewhere.all[0] = in_memory_resume.all[1].clone();
    elsewhere.bytes[0] = in_memory_resume.bytes[1];
    let mut per_session = Row::new(
        "redis_bytes_per_idle_session",
        format!(
            "R4 Redis used_memory per idle session (initialize + initialized, {} sessions)",
            sizes.idle_sessions
        ),
        "bytes",
        "— (reported)",
    );
    let mut per_long = Row::new(
        "redis_bytes_per_retained_call_1000",
        format!(
            "R4 Redis used_memory per retained finished call of 1,000 steps ({} calls)",
            sizes.retained_long_calls
        ),
        "bytes",
        "— (reported)",
    );
    let mut per_short = Row::new(
        "redis_bytes_per_retained_call_10",
        format!(
            "R4 Redis used_memory per retained finished call of 10 steps ({} calls)",
            sizes.retained_short_calls
        ),
        "bytes",
        "— (reported)",
    );

    let redis = match start_redis() {
        Ok(Some(redis)) => Ok(redis),
        Ok(None) if sizes.quick => {
            return RedisReport {
                skipped: Some("redis-server is not installed".to_owned()),
                ..RedisReport::default()
            };
        }
        Ok(None) => Err("redis-server is not installed (a full run needs it)".to_owned()),
        Err(e) => Err(e),
    };
    let redis = match redis {
        Ok(redis) => redis,
        Err(e) => {
            for row in [
                &mut rate,
                &mut pair,
                &mut per_session,
                &mut per_long,
                &mut per_short,
            ] {
                row.fail(e.clone());
            }
            elsewhere.error = Some(e);
            return RedisReport {
                rows: redis_rows(
                    rate,
                    pair,
                    &elsewhere,
                    missed,
                    tries,
                    [per_session, per_long, per_short],
                ),
                ..RedisReport::default()
            };
        }
    };

    // R1, R2, R3: replicas a and b on one Redis.
    let mut a = start_replica(&redis, "a", &[]);
    let mut b = start_replica(&redis, "b", &[]);
    let session_a = match &mut a {
        Ok(a) => {
            let session = open_session(http, &a.url()).await;
            session.map_err(|e| a.explain(e))
        }
        Err(e) => Err(e.clone()),
    };
    for _ in 0..sizes.best_of {
        let Ok(target) = &session_a else { break };
        if rate.error.is_some() {
            break;
        }
        match tool_call_rate(http, target, id(), steps, limits).await {
            Ok((r, _)) => rate.forkscope_samples.push(r),
            Err(e) => {
                let e = a.as_mut().map_or(e.clone(), |a| a.explain(e));
                rate.fail(format!("replica a: {e}"));
            }
        }
    }
    if let Err(e) = &session_a {
        rate.fail(format!("replica a: {e}"));
    }

    // R2: a session per client, each on its replica, each client its own connections.
    let clients = [http_client(), http_client()];
    let pair_sessions = match (&a, &b) {
        (Ok(a), Ok(b)) => {
            let on_a = open_session(&clients[0], &a.url()).await;
            let on_b = open_session(&clients[1], &b.url()).await;
            on_a.and_then(|on_a| on_b.map(|on_b| (on_a, on_b)))
        }
        (Err(e), _) => Err(format!("replica a: {e}")),
        (_, Err(e)) => Err(format!("replica b: {e}")),
    };
    match &pair_sessions {
        Ok((on_a, on_b)) => {
            for _ in 0..sizes.best_of {
                let calls = [(&clients[0], on_a, id()), (&clients[1], on_b, id())];
                match two_replica_rate(calls, steps, limits).await {
                    Ok(r) => pair.forkscope_samples.push(r),
                    Err(e) => {
                        pair.fail(e);
                        break;
                    }
                }
            }
        }
        Err(e) => pair.fail(e.clone()),
    }

    // R3: the call on a read whole, the resume on b, in the same session.
    match (&session_a, &b) {
        (Ok(on_a), Ok(b)) => {
            let on_b = Target {
                url: b.url(),
                session: on_a.session.clone(),
            };
            for _ in 0..tries {
                let outcome = resume_try(http, on_a, &on_b, id(), missed, limits).await;
                let failed = outcome.is_err();
                elsewhere.note(1, outcome, "on Redis, call on a, resume on b", warnings);
                if failed {
                    break;
                }
            }
        }
        (Err(e), _) => elsewhere.error = Some(format!("replica a: {e}")),
        (_, Err(e)) => elsewhere.error = Some(format!("replica b: {e}")),
    }
    if let (Some(e), Ok(b)) = (&mut elsewhere.error, &mut b) {
        *e = b.explain(std::mem::take(e));
    }
    let resume_bytes = elsewhere.bytes[1];
    drop((a, b));

    // R4: Redis memory, on an emptied Redis.
    match redis_memory(http, &redis, sizes, id).await {
        Ok(m) => {
            per_session.forkscope = Some(m.per_idle_session);
            per_long.forkscope = Some(m.per_long_call);
            per_short.forkscope = Some(m.per_short_call);
            let [k0, k1, k2, k3] = m.keys;
            warnings.push(format!(
                "Redis memory: used_memory {} bytes and {k0} keys after the warm-up (one session, \
                 two calls); keys +{} for the idle sessions, +{} for the 1,000-step calls, +{} for \
                 the 10-step calls",
                m.baseline,
                k1 - k0,
                k2 - k1,
                k3 - k2,
            ));
        }
        Err(e) => {
            for row in [&mut per_session, &mut per_long, &mut per_short] {
                row.fail(e.clone());
            }
        }
    }
    drop(redis);

    rate.forkscope = best(&rate.forkscope_samples);
    rate.compare(Some(|r| r >= 0.25));
    pair.forkscope = best(&pair.forkscope_samples);
    pair.compare(None);
    RedisReport {
        rows: redis_rows(
            rate,
            pair,
            &elsewhere,
            missed,
            tries,
            [per_session, per_long, per_short],
        ),
        skipped: None,
        resume_bytes,
    }
}

fn redis_rows(
    rate: Row,
    pair: Row,
    elsewhere: &ResumeSamples,
    missed: u64,
    tries: usize,
    memory: [Row; 3],
) -> Vec<Row> {
    let resume = elsewhere.rows(
        [
            "redis_resume_elsewhere_first_event_p50_ms",
            "redis_resume_elsewhere_first_event_p99_ms",
            "redis_resume_elsewhere_result_p50_ms",
            "redis_resume_elsewhere_result_p99_ms",
        ],
        format!(
            "R3 resume of a finished {missed}-step call on the other replica: first event p50 ({tries} tries)"
        ),
        missed,
        None,
        ("Redis ≤ 3 × in-memory", |r| r <= 3.0),
    );
    [vec![rate, pair], resume, memory.into()]
        .into_iter()
        .flatten()
        .collect()
}

// --- results --------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Row {
    key: &'static str,
    label: String,
    unit: &'static str,
    bare: Option<f64>,
    forkscope: Option<f64>,
    /// forkscope / bare.
    ratio: Option<f64>,
    target: &'static str,
    met: Option<bool>,
    error: Option<String>,
    bare_samples: Vec<f64>,
    forkscope_samples: Vec<f64>,
}

impl Row {
    fn new(key: &'static str, label: String, unit: &'static str, target: &'static str) -> Self {
        Row {
            key,
            label,
            unit,
            target,
            ..Row::default()
        }
    }

    /// Fills in the ratio and, with `check`, whether the target is met.
    fn compare(&mut self, check: Option<fn(f64) -> bool>) {
        if let (Some(b), Some(f)) = (self.bare, self.forkscope) {
            let ratio = f / b;
            self.ratio = Some(ratio);
            self.met = check.map(|c| c(ratio));
        }
    }

    fn fail(&mut self, error: String) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    fn json(&self) -> Value {
        self.json_named("bare_axum", "forkscope")
    }

    /// The row with its two columns named: what the baseline and the measured server are.
    fn json_named(&self, baseline: &str, measured: &str) -> Value {
        let mut row = serde_json::Map::new();
        row.insert("key".into(), json!(self.key));
        row.insert("measure".into(), json!(self.label));
        row.insert("unit".into(), json!(self.unit));
        row.insert(baseline.into(), json!(self.bare));
        row.insert(measured.into(), json!(self.forkscope));
        row.insert(
            format!("ratio_{measured}_over_{baseline}"),
            json!(self.ratio),
        );
        row.insert("target".into(), json!(self.target));
        row.insert("met".into(), json!(self.met));
        row.insert("error".into(), json!(self.error));
        row.insert(format!("{baseline}_samples"), json!(self.bare_samples));
        row.insert(format!("{measured}_samples"), json!(self.forkscope_samples));
        Value::Object(row)
    }
}

fn best(samples: &[f64]) -> Option<f64> {
    samples.iter().copied().reduce(f64::max)
}

/// Nearest-rank percentile, in milliseconds.
fn percentile_ms(samples: &[Duration], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1].as_secs_f64() * 1_000.0)
}

fn ms(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(|d| d.as_secs_f64() * 1_000.0).collect()
}

/// A target as shown, and the check of a ratio against it.
type RatioTarget = (&'static str, fn(f64) -> bool);

/// The samples of measure 3 or 3b, each try's bare and forkscope resume side by side (R3: the
/// in-memory server's, from measure 3, and the other replica's on Redis).
#[derive(Default)]
struct ResumeSamples {
    /// First replayed event, then all + result: [bare, forkscope].
    first: [Vec<Duration>; 2],
    all: [Vec<Duration>; 2],
    /// Body bytes of one replay: [bare, forkscope].
    bytes: [Option<u64>; 2],
    error: Option<String>,
}

impl ResumeSamples {
    /// Records one try of server `which` (0 bare, 1 forkscope).
    fn note(
        &mut self,
        which: usize,
        outcome: Result<Resumed, String>,
        name: &str,
        warnings: &mut Vec<String>,
    ) {
        match outcome {
            Ok(r) => {
                self.first[which].push(r.first);
                self.all[which].push(r.all);
                self.bytes[which] = Some(r.bytes);
                if let Some(w) = r.warning
                    && !warnings.contains(&w)
                {
                    warnings.push(w);
                }
            }
            Err(e) => {
                self.error.get_or_insert(format!("{name}: {e}"));
            }
        }
    }

    /// First event p50 and p99, all + result p50 and p99, with the two targets' checks.
    fn rows(
        &self,
        keys: [&'static str; 4],
        label: String,
        missed: u64,
        first_target: Option<RatioTarget>,
        all_target: RatioTarget,
    ) -> Vec<Row> {
        let mut first_p50 = Row::new(keys[0], label, "ms", first_target.map_or("—", |t| t.0));
        let mut first_p99 = Row::new(
            keys[1],
            "  … first replayed event p99".to_owned(),
            "ms",
            "—",
        );
        let mut all_p50 = Row::new(
            keys[2],
            format!("  … all {missed} + result, p50"),
            "ms",
            all_target.0,
        );
        let mut all_p99 = Row::new(
            keys[3],
            format!("  … all {missed} + result, p99"),
            "ms",
            "—",
        );
        if let Some(e) = &self.error {
            first_p50.fail(e.clone());
        }
        for (row, samples, p) in [
            (&mut first_p50, &self.first, 0.5),
            (&mut first_p99, &self.first, 0.99),
            (&mut all_p50, &self.all, 0.5),
            (&mut all_p99, &self.all, 0.99),
        ] {
            row.bare = percentile_ms(&samples[0], p);
            row.forkscope = percentile_ms(&samples[1], p);
            row.bare_samples = ms(&samples[0]);
            row.forkscope_samples = ms(&samples[1]);
        }
        first_p50.compare(first_target.map(|t| t.1));
        all_p50.compare(Some(all_target.1));
        first_p99.compare(None);
        all_p99.compare(None);
        vec![first_p50, first_p99, all_p50, all_p99]
    }
}

struct Report {
    sizes: Sizes,
    rows: Vec<Row>,
    idle: Option<Idle>,
    client_ceiling: f64,
    /// Body bytes of one resume's replay: bare, forkscope.
    resume_bytes: [Option<u64>; 2],
    redis: RedisReport,
    warnings: Vec<String>,
}

async fn run(sizes: Sizes, bare_addr: SocketAddr, bare_ended: Ended) -> Report {
    let http = http_client();
    let limits = sizes.limits;
    let bare = Target {
        url: format!("http://{bare_addr}/mcp"),
        session: "bare-baseline".to_owned(),
    };
    let mut warnings = Vec::new();
    let mut next_id = 1u64;
    let mut id = || {
        next_id += 1;
        next_id
    };

    // --- 1 and 3 share one `--emit-every 0` server and one session --------------------------
    let steps = sizes.progress_steps;
    let mut progress = Row::new(
        "tool_call_progress_events_per_s",
        format!(
            "1 tool-call progress, events/s ({steps} steps, delay 0, send → result, best of {})",
            sizes.best_of
        ),
        "events/s",
        "forkscope ≥ 0.5 × bare",
    );
    let missed = sizes.missed;
    let tries = sizes.resume_tries;

    let server = Serve::start(&["--port", "0", "--policy", "fenced", "--emit-every", "0"]);
    let (mut server, session) = match server {
        Ok(mut server) => {
            let session = open_session(&http, &server.url()).await;
            let session = session.map_err(|e| server.explain(e));
            (Some(server), session)
        }
        Err(e) => (None, Err(e)),
    };
    if let Err(e) = &session {
        progress.fail(format!("forkscope: {e}"));
    }

    let best_of = if sizes.only == Only::Resume {
        0
    } else {
        sizes.best_of
    };
    for _ in 0..best_of {
        match tool_call_rate(&http, &bare, id(), steps, limits).await {
            Ok((rate, _)) => progress.bare_samples.push(rate),
            Err(e) => progress.fail(format!("bare: {e}")),
        }
        if let (Ok(target), None) = (&session, &progress.error) {
            match tool_call_rate(&http, target, id(), steps, limits).await {
                Ok((rate, warning)) => {
                    progress.forkscope_samples.push(rate);
                    if let Some(w) = warning
                        && !warnings.contains(&w)
                    {
                        warnings.push(w);
                    }
                }
                Err(e) => {
                    let e = server.as_mut().map_or(e.clone(), |s| s.explain(e));
                    progress.fail(format!("forkscope: {e}"));
                }
            }
        }
    }
    progress.bare = best(&progress.bare_samples);
    progress.forkscope = best(&progress.forkscope_samples);
    progress.compare(Some(|r| r >= 0.5));

    // 3: the whole call read before the resume (the pooled connection is reused).
    let mut read_whole = ResumeSamples::default();
    for _ in 0..tries {
        let bare_try = resume_try(&http, &bare, &bare, id(), missed, limits).await;
        read_whole.note(0, bare_try, "bare", &mut warnings);
        if let (Ok(target), None) = (&session, &read_whole.error) {
            let fork_try = resume_try(&http, target, target, id(), missed, limits).await;
            read_whole.note(1, fork_try, "forkscope", &mut warnings);
        }
    }
    // 3b: a real break — the call's stream dropped after its priming event.
    let mut after_break = ResumeSamples::default();
    let fork_ended = server.as_ref().map(|s| s.ended.clone());
    let break_tries = if sizes.only == Only::Redis { 0 } else { tries };
    for _ in 0..break_tries {
        let bare_try = resume_after_break(&http, &bare, &bare_ended, id(), missed, limits).await;
        after_break.note(0, bare_try, "bare", &mut warnings);
        if let (Ok(target), Some(ended), None) = (&session, &fork_ended, &after_break.error) {
            let fork_try = resume_after_break(&http, target, ended, id(), missed, limits).await;
            after_break.note(1, fork_try, "forkscope", &mut warnings);
        }
    }
    for samples in [&mut read_whole, &mut after_break] {
        if let (Some(e), Some(serve)) = (&mut samples.error, server.as_mut()) {
            *e = serve.explain(std::mem::take(e));
        }
        if let (Err(e), None) = (&session, &samples.error) {
            samples.error = Some(format!("forkscope: {e}"));
        }
    }
    let resume_bytes = read_whole.bytes;
    let mut resume_rows = read_whole.rows(
        [
            "resume_first_event_p50_ms",
            "resume_first_event_p99_ms",
            "resume_result_p50_ms",
            "resume_result_p99_ms",
        ],
        format!("3 resume after {missed} missed, call read whole: first event p50 ({tries} tries)"),
        missed,
        Some(("forkscope ≤ 1.5 × bare", |r| r <= 1.5)),
        ("forkscope ≤ 1.5 × bare", |r| r <= 1.5),
    );
    resume_rows.extend(after_break.rows(
        [
            "resume_break_first_event_p50_ms",
            "resume_break_first_event_p99_ms",
            "resume_break_result_p50_ms",
            "resume_break_result_p99_ms",
        ],
        format!(
            "3b the same after a break (dropped after priming): first event p50 ({tries} tries)"
        ),
        missed,
        Some(("forkscope ≤ 1.5 × bare", |r| r <= 1.5)),
        ("forkscope ≤ 1.1 × bare", |r| r <= 1.1),
    ));
    drop(server); // kills it: the measures after get the machine to themselves
    if sizes.only == Only::Resume {
        return Report {
            sizes,
            rows: resume_rows,
            idle: None,
            client_ceiling: client_ceiling(sizes.progress_steps),
            resume_bytes,
            redis: RedisReport::default(),
            warnings,
        };
    }

    // --- R1–R4: replicas on Redis, against measures 1 and 3 just taken ----------------------
    let redis = redis_measures(
        &http,
        sizes,
        progress.forkscope,
        &read_whole,
        &mut id,
        &mut warnings,
    )
    .await;
    if sizes.only == Only::Redis {
        resume_rows.truncate(4); // 3b did not run
        return Report {
            sizes,
            rows: std::iter::once(progress).chain(resume_rows).collect(),
            idle: None,
            client_ceiling: client_ceiling(sizes.progress_steps),
            resume_bytes,
            redis,
            warnings,
        };
    }

    // --- 2: the background emitter at full rate --------------------------------------------
    let count = sizes.background_events;
    let mut background = Row::new(
        "background_events_per_s",
        format!(
            "2 background emitter, events/s (--emit-rate 1000000, {count} after the first, best of {})",
            sizes.best_of
        ),
        "events/s",
        "forkscope ≥ 0.5 × bare",
    );
    let mut server = match Serve::start(&[
        "--port",
        "0",
        "--policy",
        "fenced",
        "--emit-rate",
        "1000000",
    ]) {
        Ok(server) => Some(server),
        Err(e) => {
            background.fail(format!("forkscope: {e}"));
            None
        }
    };
    for _ in 0..sizes.best_of {
        match background_rate(&http, &bare, count, limits).await {
            Ok(rate) => background.bare_samples.push(rate),
            Err(e) => background.fail(format!("bare: {e}")),
        }
        let (Some(serve), None) = (server.as_mut(), &background.error) else {
            continue;
        };
        // A fresh session per try, deleted after, so no emitter runs between tries.
        let outcome = match open_session(&http, &serve.url()).await {
            Ok(target) => {
                let rate = background_rate(&http, &target, count, limits).await;
                close_session(&http, &target).await;
                rate
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(rate) => background.forkscope_samples.push(rate),
            Err(e) => background.fail(format!("forkscope: {}", serve.explain(e))),
        }
    }
    drop(server.take());
    background.bare = best(&background.bare_samples);
    background.forkscope = best(&background.forkscope_samples);
    background.compare(Some(|r| r >= 0.5));

    // --- 4: idle CPU ------------------------------------------------------------------------
    let mut idle_row = Row::new(
        "idle_cpu_percent",
        format!(
            "4 idle CPU, {} s, --emit-every 0, one session with its GET stream open",
            sizes.idle.as_secs()
        ),
        "% of one core",
        "< 0.5 %",
    );
    let idle = match idle_cpu(&http, sizes.idle).await {
        Ok(idle) => {
            idle_row.forkscope = Some(idle.cpu_percent);
            idle_row.met = Some(idle.cpu_percent < 0.5);
            Some(idle)
        }
        Err(e) => {
            idle_row.fail(e);
            None
        }
    };

    // --- 5 and 6: memory under hostile loads -----------------------------------------------
    let mut unread_row = Row::new(
        "rss_unread_calls_mib",
        "5 RSS, 16 tool calls × 1,100 steps never read (256-byte progress tokens) + 16 refused 60,000-byte ones".to_owned(),
        "MiB",
        "< 64 MiB",
    );
    let mut long_row = Row::new(
        "rss_long_session_growth_mib",
        format!(
            "6 RSS growth over {} tool calls in one session (after the first 10 %)",
            sizes.long_session_calls
        ),
        "MiB",
        "flat (< 8 MiB)",
    );
    match memory(&http, sizes).await {
        Ok(m) => {
            unread_row.forkscope = Some(m.unread_mib);
            unread_row.met = Some(m.unread_mib < 64.0);
            long_row.forkscope = Some(m.long_growth_mib);
            long_row.met = Some(m.long_growth_mib < 8.0);
            warnings.push(format!(
                "memory: idle server {:.1} MiB; with 16 unread calls {:.1} MiB; long session {:.1} → {:.1} MiB",
                m.start_mib, m.unread_mib, m.long_first_mib, m.long_last_mib
            ));
        }
        Err(e) => {
            unread_row.fail(e.clone());
            long_row.fail(e);
        }
    }

    let mut fanout_row = Row::new(
        "rss_fanout_mib",
        "5b RSS, 64 sessions × 15 unread tool calls × 1,100 steps (the excess refused over_budget)"
            .to_owned(),
        "MiB",
        "< 160 MiB",
    );
    match memory_fanout().await {
        Ok(f) => {
            fanout_row.forkscope = Some(f.peak_mib);
            fanout_row.met = Some(f.peak_mib < 160.0 && f.refused + f.sessions_refused > 0);
            warnings.push(format!(
                "memory fan-out: {:.1} → {:.1} MiB; {} calls admitted, {} calls and {} sessions refused over_budget",
                f.start_mib, f.peak_mib, f.admitted, f.refused, f.sessions_refused
            ));
        }
        Err(e) => fanout_row.fail(e),
    }

    Report {
        sizes,
        rows: [
            vec![progress, background],
            resume_rows,
            vec![idle_row, unread_row, fanout_row, long_row],
        ]
        .into_iter()
        .flatten()
        .collect(),
        idle,
        client_ceiling: client_ceiling(sizes.progress_steps),
        resume_bytes,
        redis,
        warnings,
    }
}

fn number(value: Option<f64>, unit: &str) -> String {
    match value {
        None => "—".to_owned(),
        Some(v) if unit == "events/s" || unit == "bytes" => {
            forkscope_core::model::thousands(v.round() as u64)
        }
        Some(v) if unit == "ms" => format!("{v:.3} ms"),
        Some(v) if unit == "MiB" => format!("{v:.1} MiB"),
        Some(v) => format!("{v:.2} %"),
    }
}

fn print_table(report: &Report) {
    let sizes = report.sizes;
    println!();
    println!(
        "forkscope serve vs bare axum — {} sizes; forkscope: subprocess, TOKIO_WORKER_THREADS=1; \
         bare: one current-thread runtime; client: its own current-thread runtime; {}",
        if sizes.quick { "QUICK" } else { "full" },
        cpus().map_or("not pinned (one CPU)".to_owned(), |c| format!(
            "client pinned to CPU {}, both servers to CPU {}",
            c.client.id, c.server.id
        ))
    );
    print_rows(&report.rows, ["bare axum", "forkscope"]);
    if let Some(idle) = &report.idle {
        println!(
            "    idle: {:.0} ms of CPU in {:.1} s; {} bytes arrived on the open GET stream meanwhile",
            idle.cpu_ms, idle.seconds, idle.bytes_on_get
        );
    }
    if let [Some(bare), Some(forkscope)] = report.resume_bytes {
        println!(
            "    resume: one replay of {} + result is {bare} bytes from bare, {forkscope} bytes from forkscope",
            sizes.missed
        );
    }
    if sizes.only != Only::Resume {
        println!();
        println!(
            "replicas on Redis vs the in-memory forkscope serve above — each replica and redis-server {}",
            cpus().map_or("not pinned (one CPU)".to_owned(), |c| format!(
                "pinned to CPU {} with the servers",
                c.server.id
            ))
        );
        match &report.redis.skipped {
            Some(why) => println!("    skipped: {why}"),
            None => print_rows(&report.redis.rows, ["in-memory", "on Redis"]),
        }
        if let Some(bytes) = report.redis.resume_bytes {
            println!(
                "    R3: one replay of {} + result is {bytes} bytes from the other replica",
                sizes.missed
            );
        }
    }
    println!(
        "client ceiling (forkscope's SSE parser + classifier alone, in memory, {} events): {} events/s",
        sizes.progress_steps,
        number(Some(report.client_ceiling), "events/s")
    );
    for w in &report.warnings {
        println!("warning: {w}");
    }
}

/// Rows under a header naming the two columns compared.
fn print_rows(rows: &[Row], columns: [&str; 2]) {
    println!(
        "{:<88} {:>14} {:>14} {:>8}  target",
        "measure", columns[0], columns[1], "ratio"
    );
    for row in rows {
        let verdict = match row.met {
            Some(true) => " ✔",
            Some(false) => " ✘",
            None => "",
        };
        println!(
            "{:<88} {:>14} {:>14} {:>8}  {}{}",
            row.label,
            number(row.bare, row.unit),
            number(row.forkscope, row.unit),
            row.ratio.map_or("—".to_owned(), |r| if r < 0.1 {
                format!("{r:.4}×")
            } else {
                format!("{r:.2}×")
            }),
            row.target,
            verdict
        );
        if let Some(e) = &row.error {
            println!("    FAILED: {e}");
        }
    }
}

fn write_json(report: &Report) -> Result<PathBuf, String> {
    let sizes = report.sizes;
    let doc = json!({
        "bench": "serve",
        "quick": sizes.quick,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "pinned": cpus().map(|c| json!({ "client_cpu": c.client.id, "servers_cpu": c.server.id })),
        "sizes": {
            "progress_steps": sizes.progress_steps,
            "background_events": sizes.background_events,
            "best_of": sizes.best_of,
            "resume_tries": sizes.resume_tries,
            "resume_missed": sizes.missed,
            "idle_seconds": sizes.idle.as_secs_f64(),
            "redis_idle_sessions": sizes.idle_sessions,
            "redis_retained_calls_1000_steps": sizes.retained_long_calls,
            "redis_retained_calls_10_steps": sizes.retained_short_calls,
        },
        "measures": report.rows.iter().map(Row::json).collect::<Vec<_>>(),
        "redis": {
            "measures": report.redis.rows.iter().map(|r| r.json_named("in_memory", "redis")).collect::<Vec<_>>(),
            "skipped": report.redis.skipped,
            "resume_replay_bytes": report.redis.resume_bytes,
            "redis_server_cpu": cpus().map(|c| c.server.id),
        },
        "idle": report.idle.as_ref().map(|i| json!({
            "cpu_percent": i.cpu_percent,
            "cpu_ms": i.cpu_ms,
            "seconds": i.seconds,
            "bytes_on_get_stream": i.bytes_on_get,
        })),
        "client_ceiling_events_per_s": report.client_ceiling,
        "resume_replay_bytes": { "bare_axum": report.resume_bytes[0], "forkscope": report.resume_bytes[1] },
        "warnings": report.warnings,
        "failed": report.rows.iter().chain(&report.redis.rows).any(|r| r.error.is_some()),
    });
    // The target directory: the one holding the profile directory of the binary under test.
    let target_dir = std::path::Path::new(env!("CARGO_BIN_EXE_forkscope"))
        .parent()
        .and_then(|profile| profile.parent())
        .ok_or("no target directory")?;
    let name = if sizes.only == Only::Resume {
        "bench-serve.resume.json"
    } else if sizes.only == Only::Redis {
        "bench-serve.redis.json"
    } else if sizes.quick {
        "bench-serve.quick.json"
    } else {
        "bench-serve.json"
    };
    let path = target_dir.join(name);
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

fn main() -> ExitCode {
    let sizes = Sizes::new(quick());
    pin(|c| c.client);
    let bare = match BareServer::start(sizes.missed) {
        Ok(bare) => bare,
        Err(e) => {
            eprintln!("bench: cannot start the bare axum server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime for the client");
    let report = client.block_on(run(sizes, bare.addr, bare.ended.clone()));
    drop(client);
    drop(bare);
    print_table(&report);
    match write_json(&report) {
        Ok(path) => println!("results written to {}", path.display()),
        Err(e) => eprintln!("bench: cannot write the JSON results: {e}"),
    }
    if report
        .rows
        .iter()
        .chain(&report.redis.rows)
        .any(|r| r.error.is_some())
    {
        eprintln!("bench: at least one measure FAILED (see above)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
