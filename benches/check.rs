//! `forkscope check` as a user runs it: the real binary, `--format json`, one process per
//! bound. Reports distinct states, steps taken, states/s and peak memory (the process's
//! VmHWM), how the state count grows with depth, with the number of streams and with the
//! delivery mode, and the largest depth that finishes within 60 s and the default memory
//! budget.
//!
//! `cargo bench --bench check`; running without `--bench` (as `cargo test --all-targets` does)
//! or with `FORKSCOPE_BENCH_QUICK=1` uses small bounds. Results are printed as a table and
//! written as JSON to `target/bench-check.json` (quick runs: `target/bench-check.quick.json`).
//! A run that fails (a counterexample under fenced, a bad exit, unparsable output) makes the
//! process exit non-zero.

use serde_json::Value;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

/// `cargo bench` passes `--bench`; anything else is a smoke run.
fn quick() -> bool {
    std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench")
}

/// The longest a single bound may take and still count as finishing.
const BUDGET: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Measured {
    label: String,
    depth: u64,
    streams: u64,
    delivery: &'static str,
    distinct: u64,
    transitions: u64,
    elapsed: Duration,
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
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start forkscope check: {e}"))?,
    );
    // Sample the peak while it runs: /proc forgets a process once it is reaped.
    let pid = child.0.id();
    let mut peak = 0.0_f64;
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
        if let Some(status) = child.0.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
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
                "{:<34} depth {:>2}  streams {}  {:<11}  {:>10} states  {:>11} steps  {:>8.2} s  {:>8.0} states/s  {:>7.0} MiB",
                m.label,
                m.depth,
                m.streams,
                m.delivery,
                m.distinct,
                m.transitions,
                m.elapsed.as_secs_f64(),
                m.distinct as f64 / m.elapsed.as_secs_f64().max(1e-3),
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
    // Growth with depth, and the largest depth inside the budget.
    let depths: Vec<u64> = if quick {
        (2..=5).collect()
    } else {
        (4..=20).collect()
    };
    let mut largest = None;
    for depth in depths {
        let r = run("fenced, by depth", depth, 3, "interleaved", "fenced");
        let over = r.as_ref().map_or(true, |m| m.elapsed > BUDGET || m.stopped);
        if let Ok(m) = &r
            && m.elapsed <= BUDGET
            && !m.stopped
        {
            largest = Some(m.depth);
        }
        record(r, &mut rows);
        if over {
            break;
        }
    }
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
    if let Some(d) = largest {
        println!(
            "largest depth explored in full within {} s and the default memory budget: {d}",
            BUDGET.as_secs()
        );
    }
    let json = serde_json::json!({
        "quick": quick,
        "largest_depth_within_60s": largest,
        "rows": rows.iter().map(|m| serde_json::json!({
            "label": m.label,
            "depth": m.depth,
            "streams": m.streams,
            "delivery": m.delivery,
            "distinct_states": m.distinct,
            "transitions": m.transitions,
            "elapsed_ms": m.elapsed.as_millis() as u64,
            "states_per_second": (m.distinct as f64 / m.elapsed.as_secs_f64().max(1e-3)).round(),
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
