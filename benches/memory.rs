//! Memory that comes back: `forkscope serve` (the release binary, over real sockets) under the
//! load that once held ~1 MB per stalled connection and never returned it — 12 sessions × 16
//! tool calls of 10,000 steps with `delay_ms: 0` and 256-byte progress tokens, whose responses
//! are never read — three times on one server.
//!
//! Per repetition it reports the peak RSS while the calls are stalled, and RSS once the
//! connections have ended and the calls' retained events have expired (`--retention-ms`),
//! against RSS before the first repetition. Targets: peak < 96 MiB, after ≤ 1.5× before.
//!
//! `cargo bench --bench memory`; under `cargo test --benches` it runs one small repetition as
//! a smoke test.

use forkscope::wire::headers::MODELLED_REVISION;
use forkscope::wire::mcp;
use serde_json::json;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SESSIONS: usize = 12;
const CALLS_PER_SESSION: usize = 16;
const STEPS: u64 = 10_000;
const REPETITIONS: usize = 3;
/// How long a finished call's events stay resumable on the bench's server.
const RETENTION_MS: u64 = 1_000;
/// Longest wait for RSS to settle: a bound, not a measure.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// The server process, killed when dropped (also when the bench fails).
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .args(["serve", "--port", "0", "--emit-every", "0"])
        .args(["--retention-ms", &RETENTION_MS.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("forkscope serve starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("forkscope serve prints its address")
            .unwrap();
        if let Some(at) = line.find("http://") {
            break line[at..].split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, url }
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// CPU time the process has used, in clock ticks (`/proc/<pid>/stat`: utime + stime).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Samples RSS until the server is quiet for `quiet` — RSS within 0.5 MiB and at most one tick
/// of CPU per sample, so calls still running on count as busy — and returns the last sample and
/// the highest one seen.
fn settle(pid: u32, quiet: Duration) -> (f64, f64) {
    let started = Instant::now();
    let mut peak = rss_mib(pid);
    let mut last = peak;
    let mut ticks = cpu_ticks(pid);
    let mut since = Instant::now();
    // RSS when the quiet window began: a slow steady decline is not quiet.
    let mut reference = last;
    while since.elapsed() < quiet && started.elapsed() < SETTLE_LIMIT {
        std::thread::sleep(Duration::from_millis(100));
        let now = rss_mib(pid);
        let now_ticks = cpu_ticks(pid);
        peak = peak.max(now);
        if (now - reference).abs() > 0.5 || now_ticks > ticks + 1 {
            since = Instant::now();
            reference = now;
        }
        last = now;
        ticks = now_ticks;
    }
    (last, peak)
}

/// One repetition: every call opened and left unread; returns (admitted, refused) and the
/// responses, held open until the caller drops them.
async fn stall(
    url: &str,
    sessions: usize,
    calls: usize,
    steps: u64,
) -> (usize, usize, Vec<reqwest::Response>) {
    let token = "t".repeat(256);
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..sessions {
        // A client of its own per session: its connections are its own.
        let endpoint = mcp::Endpoint::new(reqwest::Client::new(), url);
        // Past the replay budget, `initialize` is refused too.
        let Ok(session) = mcp::open_session(&endpoint, "memory-bench").await else {
            refused += calls;
            continue;
        };
        let session = session.to_string();
        for id in 0..calls {
            let call = mcp::ToolCall::with_progress(
                "progress_task",
                json!({ "steps": steps, "delay_ms": 0 }),
                mcp::ProgressToken::Text(token.clone()),
            );
            let body = mcp::Request::new(mcp::RequestId(id as u64), mcp::Call::ToolsCall(call));
            let response = endpoint
                .post(mcp::Headers::session(&session, MODELLED_REVISION), &body)
                .send()
                .await
                .unwrap();
            if response.status() == 200 {
                held.push(response);
            } else {
                refused += 1;
            }
        }
    }
    (held.len(), refused, held)
}

fn main() {
    let smoke =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let (sessions, calls, steps, repetitions) = if smoke {
        (2, 2, 200, 1)
    } else {
        (SESSIONS, CALLS_PER_SESSION, STEPS, REPETITIONS)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = start();
    let pid = server.child.id();
    // Warm up what the first request allocates for good (the runtime, the router).
    runtime.block_on(async {
        let endpoint = mcp::Endpoint::new(reqwest::Client::new(), server.url.as_str());
        mcp::open_session(&endpoint, "memory-bench")
            .await
            .expect("a session");
    });
    let (before, _) = settle(pid, Duration::from_secs(1));
    println!(
        "memory: {sessions} sessions × {calls} tool calls × {steps} steps (delay_ms 0, 256-byte progress tokens), never read; {repetitions} repetition(s) on one server"
    );
    println!("  RSS before: {before:.1} MiB");
    let mut worst_peak: f64 = 0.0;
    let mut worst_after: f64 = 0.0;
    for repetition in 1..=repetitions {
        let (admitted, refused, held) =
            runtime.block_on(stall(&server.url, sessions, calls, steps));
        // The calls run into their full queues, the server cuts the stalled connections and
        // the calls run on into their replay buffers: RSS rises, then stops.
        let (_, peak) = settle(pid, Duration::from_secs(2));
        drop(held);
        // Connections gone and retention over: what comes back.
        let (after, peak_after) = settle(pid, Duration::from_millis(RETENTION_MS * 3));
        let peak = peak.max(peak_after);
        worst_peak = worst_peak.max(peak);
        worst_after = worst_after.max(after);
        println!(
            "  repetition {repetition}: {admitted} calls admitted, {refused} refused over budget; peak {peak:.1} MiB; after {after:.1} MiB ({:.2}× before)",
            after / before
        );
    }
    let peak_ok = worst_peak < 96.0;
    let after_ok = worst_after <= 1.5 * before;
    println!(
        "  targets: peak < 96 MiB: {} ({worst_peak:.1}); after ≤ 1.5× before: {} ({:.2}×)",
        if peak_ok { "met" } else { "MISSED" },
        if after_ok { "met" } else { "MISSED" },
        worst_after / before
    );
    drop(server);
}
