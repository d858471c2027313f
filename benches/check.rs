//! `forkscope check` as a user runs it: the real binary, `--format json`, one process per
//! bound, measured against the explorer's targets under fenced:
//!
//! - depth 12: at least 10⁵ distinct states per second per core (states ÷ the search's own
//!   time ÷ the threads it ran on), with a peak resident set of at most 128 MiB;
//! - depth 18: within 60 s and 2 GiB.
//!
//! Peak memory is the child process's own high-water mark (`VmHWM` in `/proc/<pid>/status`,
//! which never decreases), read every 5 ms until the process exits. The CPU time it was given
//! (`utime + stime` from `/proc/<pid>/stat`) is reported too: states per CPU-second, a figure a
//! busy machine does not skew the way it skews wall time. Then, for context: how the state
//! count grows with the number of streams, eager delivery, and how soon naive's shortest
//! counterexample is found.
//!
//! `cargo bench --bench check`; running without `--bench` (as `cargo test --all-targets` does)
//! or with `FORKSCOPE_BENCH_QUICK=1` uses small bounds. Results are printed as a table and
//! written as JSON to `target/bench-check.json` (quick runs: `target/bench-check.quick.json`).
//! A run that fails (a counterexample under fenced, a bad exit, unparsable output) makes the
//! process exit non-zero; a missed target is printed, not failed (the machine may be busy).

use serde_json::Value;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

/// `cargo bench` passes `--bench`; anything else is a smoke run.
fn quick() -> bool {
    std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench")
}

/// The targets, under fenced.
const RATE_DEPTH: u64 = 12;
const STATES_PER_SECOND_PER_CORE: f64 = 1e5;
const RATE_PEAK_MIB: f64 = 128.0;
const DEEP_DEPTH: u64 = 18;
const DEEP_WALL: Duration = Duration::from_secs(60);
const DEEP_PEAK_MIB: f64 = 2048.0;

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`: 100 on every Linux ABI).
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug)]
struct Measured {
    label: String,
    depth: u64,
    streams: u64,
    delivery: &'static str,
    distinct: u64,
    transitions: u64,
    elapsed: Duration,
    /// Threads the search ran on.
    workers: u64,
    /// CPU time the process was given.
    cpu: Duration,
    peak_rss_mib: f64,
    /// The memory budget stopped the search short of its depth.
    stopped: bool,
}

/// A running `forkscope check`, killed and reaped when dropped: an early return or a panic
/// while measuring never leaves it running.
struct CheckProcess(Child);

impl Drop for CheckProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Peak resident memory of a running process, from /proc (Linux), in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU time a running process has used so far, from /proc (Linux).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / TICKS_PER_SECOND,
    ))
}

impl Measured {
    fn states_per_second(&self) -> f64 {
        self.distinct as f64 / self.elapsed.as_secs_f64().max(1e-3)
    }

    fn per_core(&self) -> f64 {
        self.states_per_second() / self.workers.max(1) as f64
    }

    fn per_cpu_second(&self) -> f64 {
        self.distinct as f64 / self.cpu.as_secs_f64().max(1e-3)
    }
}

fn run(
    label: &str,
    depth: u64,
    streams: u64,
    delivery: &'static str,
    policy: &str,
) -> Result<Measured, String> {
    let mut child = CheckProcess(
        Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args(["check", "--format", "json", "--policy", policy])
            .args(["--depth", &depth.to_string()])
            .args(["--streams", &streams.to_string()])
            .args(["--delivery", delivery])
            // What a depth costs, not what a minute reaches: no time budget to cut it.
            .args(["--time-budget", "86400"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start forkscope check: {e}"))?,
    );
    // Sample the peak while it runs: /proc forgets a process once it is reaped.
    let pid = child.0.id();
    let mut peak = 0.0_f64;
    let mut cpu = Duration::ZERO;
    let reader = {
        let mut stdout = child.0.stdout.take().ok_or("no stdout")?;
        std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
        })
    };
    let status = loop {
        if let Some(rss) = peak_rss_mib(pid) {
            peak = peak.max(rss);
        }
        if let Some(used) = cpu_time(pid) {
            cpu = cpu.max(used);
        }
        if let Some(status) = child.0.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = reader
        .join()
        .map_err(|_| "reader panicked".to_owned())?
        .map_err(|e| e.to_string())?;
    let report: Value =
        serde_json::from_str(&text).map_err(|e| format!("{label}: unparsable report: {e}"))?;
    let first = &report[0];
    let holds = first["holds"].as_bool() == Some(true);
    // The memory budget (1 GiB by default) may stop a deep search short: exit 3.
    let stopped = !first["stopped"].is_null();
    let expected_code = match (holds, stopped) {
        (false, _) => 1,
        (true, false) => 0,
        (true, true) => 3,
    };
    if status.code() != Some(expected_code) {
        return Err(format!("{label}: exit {status} for holds = {holds}"));
    }
    if policy == "fenced" && !holds {
        return Err(format!(
            "{label}: the fenced policy has a counterexample: {}",
            first["counterexample"]
        ));
    }
    Ok(Measured {
        label: label.to_owned(),
        depth,
        streams,
        delivery,
        distinct: first["distinct_states"].as_u64().unwrap_or(0),
        transitions: first["transitions"].as_u64().unwrap_or(0),
        // The search's own time, without process start and report writing.
        elapsed: Duration::from_millis(first["elapsed_ms"].as_u64().unwrap_or(0)),
        workers: first["workers"].as_u64().unwrap_or(1),
        cpu,
        peak_rss_mib: peak,
        stopped,
    })
}

fn main() -> ExitCode {
    let quick = quick();
    let mut rows: Vec<Measured> = Vec::new();
    let mut failed = Vec::new();
    let mut record = |r: Result<Measured, String>, rows: &mut Vec<Measured>| match r {
        Ok(m) => {
            println!(
                "{:<28} depth {:>2}  streams {}  {:<11}  {:>9} states  {:>10} steps  {:>7.2} s  {:>8.0} states/s  {} threads  {:>7.0} /core  {:>7.0} /cpu-s  {:>6.0} MiB",
                m.label,
                m.depth,
                m.streams,
                m.delivery,
                m.distinct,
                m.transitions,
                m.elapsed.as_secs_f64(),
                m.states_per_second(),
                m.workers,
                m.per_core(),
                m.per_cpu_second(),
                m.peak_rss_mib
            );
            if m.stopped {
                println!("  (stopped short by the memory budget)");
            }
            rows.push(m);
        }
        Err(e) => {
            println!("FAILED {e}");
            failed.push(e);
        }
    };
    let (rate_depth, deep_depth) = if quick {
        (5, 7)
    } else {
        (RATE_DEPTH, DEEP_DEPTH)
    };
    let mut verdicts = Vec::new();
    let rate = run("fenced, rate", rate_depth, 3, "interleaved", "fenced");
    if let Ok(m) = &rate {
        verdicts.push(format!(
            "depth {}: {:.0} states/s per core (target ≥ {:.0}) {}; peak {:.0} MiB (target ≤ {:.0}) {}",
            m.depth,
            m.per_core(),
            STATES_PER_SECOND_PER_CORE,
            met(m.per_core() >= STATES_PER_SECOND_PER_CORE),
            m.peak_rss_mib,
            RATE_PEAK_MIB,
            met(m.peak_rss_mib <= RATE_PEAK_MIB),
        ));
    }
    record(rate, &mut rows);
    let deep = run("fenced, deep", deep_depth, 3, "interleaved", "fenced");
    if let Ok(m) = &deep {
        verdicts.push(format!(
            "depth {}: {:.1} s (target ≤ {} s) {}; peak {:.0} MiB (target ≤ {:.0}) {}{}",
            m.depth,
            m.elapsed.as_secs_f64(),
            DEEP_WALL.as_secs(),
            met(m.elapsed <= DEEP_WALL),
            m.peak_rss_mib,
            DEEP_PEAK_MIB,
            met(m.peak_rss_mib <= DEEP_PEAK_MIB),
            if m.stopped {
                " — but the memory budget stopped it short"
            } else {
                ""
            },
        ));
    }
    record(deep, &mut rows);
    // Growth with streams.
    let depth = if quick { 4 } else { 10 };
    for streams in 1..=4 {
        let r = run(
            "fenced, by streams",
            depth,
            streams,
            "interleaved",
            "fenced",
        );
        record(r, &mut rows);
    }
    // Eager delivery (what a scenario replays).
    let depth = if quick { 4 } else { 12 };
    record(
        run("fenced, eager delivery", depth, 3, "eager", "fenced"),
        &mut rows,
    );
    // How fast naive's shortest counterexample is found.
    record(
        run("naive, first counterexample", 8, 3, "interleaved", "naive"),
        &mut rows,
    );
    for verdict in &verdicts {
        println!("{verdict}");
    }
    let json = serde_json::json!({
        "quick": quick,
        "targets": verdicts,
        "rows": rows.iter().map(|m| serde_json::json!({
            "label": m.label,
            "depth": m.depth,
            "streams": m.streams,
            "delivery": m.delivery,
            "distinct_states": m.distinct,
            "transitions": m.transitions,
            "elapsed_ms": m.elapsed.as_millis() as u64,
            "workers": m.workers,
            "cpu_ms": m.cpu.as_millis() as u64,
            "states_per_second": m.states_per_second().round(),
            "states_per_second_per_core": m.per_core().round(),
            "states_per_cpu_second": m.per_cpu_second().round(),
            "peak_rss_mib": (m.peak_rss_mib * 10.0).round() / 10.0,
            "stopped_by_memory_budget": m.stopped,
        })).collect::<Vec<_>>(),
        "failed": failed,
    });
    let path = if quick {
        "target/bench-check.quick.json"
    } else {
        "target/bench-check.json"
    };
    let _ = std::fs::write(
        path,
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn met(yes: bool) -> &'static str {
    if yes { "met" } else { "MISSED" }
}
