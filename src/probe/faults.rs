//! The faults the user hands the probe, like Jepsen's nemesis: the probe never kills, pauses or
//! restarts anything on its own; it runs the commands it was given (`--kill-cmd`,
//! `--pause-cmd`, `--resume-cmd`, `--restart-cmd`), each with `sh -c`, bounded in time, and says
//! in the case's report when it ran each and how it ended. How many times the tool's side effect
//! happened comes from `--effects-cmd` (its standard output's first number) or `--effects-tool`
//! (a tool whose result holds the count), never from a log.
//!
//! Each command sees `FORKSCOPE_PROBE_URL` (the server) and `FORKSCOPE_PROBE_TASK` (the task
//! the case is working on), so a command can aim at the process that runs it.

use super::http::Target;
use crate::wire::mcp::modern::ModernCall;
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// How long any one command may run before it is killed and the case says so.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(30);
/// How long the probe waits for the server to answer again after a restart.
pub const ANSWER_AGAIN_LIMIT: Duration = Duration::from_secs(30);

/// The commands and counters the user gave.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    pub kill: Option<String>,
    pub pause: Option<String>,
    pub resume: Option<String>,
    pub restart: Option<String>,
    pub effects_cmd: Option<String>,
    pub effects_tool: Option<String>,
    /// How long a paused runner stays paused, in milliseconds.
    pub pause_ms: u64,
}

impl Faults {
    pub fn counts_effects(&self) -> bool {
        self.effects_cmd.is_some() || self.effects_tool.is_some()
    }
}

/// Request ids for the effects tool's calls.
static IDS: AtomicU64 = AtomicU64::new(1 << 40);

/// A command that ran: its line for the report.
#[derive(Debug)]
pub struct Ran {
    pub ok: bool,
    pub stdout: String,
}

/// Runs `cmd` (given as `flag`) with `sh -c`, bounded by [`COMMAND_LIMIT`]; `capture`: read
/// its standard output (the effects count), else it goes nowhere — a restart that starts a
/// server in the background must not hold the probe's pipe open. `note` gets its line.
pub async fn run(
    flag: &str,
    cmd: &str,
    target: &Target,
    task: Option<&str>,
    capture: bool,
    note: &(dyn Fn(String) + Sync),
) -> Ran {
    let started = Instant::now();
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(cmd)
        .env("FORKSCOPE_PROBE_URL", target.url())
        .env("FORKSCOPE_PROBE_TASK", task.unwrap_or(""))
        .stdin(Stdio::null())
        .stdout(if capture {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let outcome = match command.spawn() {
        Err(e) => Err(format!("could not start: {e}")),
        Ok(child) => match tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output()).await {
            Err(_) => Err(format!("killed after {} s", COMMAND_LIMIT.as_secs())),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(out)) => Ok(out),
        },
    };
    let took = started.elapsed().as_secs_f64();
    match outcome {
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let status = out
                .status
                .code()
                .map_or("a signal".to_owned(), |c| c.to_string());
            let shown = if capture {
                format!(
                    ", printed {:?}",
                    stdout.chars().take(40).collect::<String>()
                )
            } else {
                String::new()
            };
            note(format!(
                "ran {flag} `{cmd}`: exit {status} in {took:.2} s{shown}"
            ));
            Ran {
                ok: out.status.success(),
                stdout,
            }
        }
        Err(why) => {
            note(format!("ran {flag} `{cmd}`: {why} ({took:.2} s)"));
            Ran {
                ok: false,
                stdout: String::new(),
            }
        }
    }
}

/// Waits until the server answers `server/discover` again (after a restart); how long it took.
pub async fn answering_again(target: &Target) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < ANSWER_AGAIN_LIMIT {
        let call = ModernCall {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            method: "server/discover",
            params: json!({}),
            tasks: false,
            key: None,
        };
        if let Ok(Ok(_)) = target.modern("server/discover", &call).await {
            return Some(started.elapsed());
        }
        sleep(Duration::from_millis(100)).await;
    }
    None
}

/// The side effects counted so far: `--effects-cmd`'s first number, or `--effects-tool`'s.
pub async fn effects(
    faults: &Faults,
    target: &Target,
    note: &(dyn Fn(String) + Sync),
) -> Option<u64> {
    if let Some(cmd) = &faults.effects_cmd {
        let ran = run("--effects-cmd", cmd, target, None, true, note).await;
        return ran.ok.then(|| first_integer(&ran.stdout)).flatten();
    }
    let tool = faults.effects_tool.as_ref()?;
    let call = ModernCall {
        id: IDS.fetch_add(1, Ordering::Relaxed),
        method: "tools/call",
        params: json!({ "name": tool, "arguments": {} }),
        tasks: false,
        key: None,
    };
    match target.modern("tools/call", &call).await {
        Ok(Ok(result)) => {
            let n = result
                .get("structuredContent")
                .and_then(number_in)
                .or_else(|| result.get("content").and_then(number_in));
            note(format!(
                "called --effects-tool {tool}: {}",
                n.map_or("no number in its result".into(), |n| n.to_string())
            ));
            n
        }
        other => {
            note(format!(
                "called --effects-tool {tool}: no count ({other:?})"
            ));
            None
        }
    }
}

/// The count once it stopped moving: read until two reads half a second apart agree (a runner
/// that writes its effect just after its task reads as ended, or a stalled one that wakes,
/// still counts), at most `within`.
pub async fn settled_effects(
    faults: &Faults,
    target: &Target,
    within: Duration,
    note: &(dyn Fn(String) + Sync),
) -> Option<u64> {
    let deadline = Instant::now() + within;
    let quiet = |_: String| {};
    let mut last = effects(faults, target, &quiet).await?;
    loop {
        sleep(Duration::from_millis(500)).await;
        let now = effects(faults, target, &quiet).await?;
        if now == last || Instant::now() >= deadline {
            note(format!("effects counted: {now}"));
            return Some(now);
        }
        last = now;
    }
}

fn first_integer(text: &str) -> Option<u64> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The first whole number in a result: a number, or one written in a text.
fn number_in(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => first_integer(s),
        Value::Array(items) => items.iter().find_map(number_in),
        Value::Object(map) => map.values().find_map(number_in),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_what_a_command_prints_or_a_tool_returns() {
        assert_eq!(first_integer("  42 /tmp/effects\n"), Some(42));
        assert_eq!(first_integer("none"), None);
        assert_eq!(
            number_in(&json!([{ "type": "text", "text": "effects: 7" }])),
            Some(7)
        );
        assert_eq!(number_in(&json!({ "effects": 3 })), Some(3));
    }
}
