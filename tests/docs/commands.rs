//! Which commands of a doc the docs test runs, and how: the few it skips (each with why), the
//! waits it shortens, and what kind of command each one is.

use super::{markdown, repo};
use regex::Regex;
use std::sync::LazyLock;

static EXITS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bexits (\d+)\b").unwrap());

/// The commands the docs show that this test does not run, each with why. Written as the
/// doc writes them (`cargo run --release --` as `forkscope`, comments left out).
pub const SKIPPED: &[(&str, &str)] = &[
    ("cargo test", "the test suite: this test is part of it"),
    (
        "cargo bench",
        "minutes of benchmarks; their figures are BENCHMARKS.md's",
    ),
    (
        "forkscope probe http://127.0.0.1:8931/mcp",
        "the whole battery waits out a window per case (about 50 s); .ci/run's probe step runs it against fenced and naive (interop/check-probe.sh)",
    ),
    (
        "forkscope probe http://127.0.0.1:8931/mcp --watch",
        "full screen: it needs a terminal to draw the battery in (src/tui/probe_watch/tests.rs tests its lanes)",
    ),
    (
        "interop/check-python-sdk.sh",
        "needs the Python SDK from PyPI; .ci/run runs it in its interop step",
    ),
    (
        "interop/check-sdk-clients.sh",
        "needs the Python and TypeScript SDKs from PyPI and npm; .ci/run runs it in its interop step",
    ),
    (
        "interop/check-conformance.sh",
        "needs the MCP conformance suite from npm; .ci/run runs it in its interop step",
    ),
    (
        "interop/check-inspector.sh",
        "needs the MCP Inspector from npm; .ci/run runs it in its inspector step",
    ),
    (
        "interop/check-fastmcp.sh",
        "needs FastMCP from PyPI; .ci/run runs it in its fastmcp step",
    ),
    (
        "npx @modelcontextprotocol/inspector --cli http://127.0.0.1:8931/mcp --method tools/list",
        "needs the MCP Inspector from npm; interop/check-inspector.sh runs it in CI",
    ),
    (
        "npx @modelcontextprotocol/inspector --cli http://127.0.0.1:8931/mcp --method tools/call --tool-name progress_task --tool-arg steps=3",
        "needs the MCP Inspector from npm; interop/check-inspector.sh runs it in CI",
    ),
    (
        "forkscope probe http://127.0.0.1:8940/mcp --only task-survives-restart --restart-cmd './restart-both.sh' --effects-cmd 'wc -l < effects.log'",
        "needs replicas a restart script of yours brings back; interop/check-faults.sh runs the same against FastMCP and fenced replicas",
    ),
    (
        "interop/check-faults.sh",
        "needs redis-server and FastMCP from PyPI; .ci/run runs it in its faults step",
    ),
    (
        "interop/check-probe.sh",
        "needs the Python, TypeScript and Rust (rmcp) SDK servers; .ci/run runs it in its probe step",
    ),
    (
        r#"redis-server --port 6379 --save "" --appendonly no"#,
        "needs redis-server and several servers at once; .ci/run runs the same setup in interop/check-replicas.sh",
    ),
    (
        r#"forkscope serve --store redis://127.0.0.1:6379 --replica a --port 8941"#,
        "needs redis-server and several servers at once; .ci/run runs the same setup in interop/check-replicas.sh",
    ),
    (
        r#"forkscope serve --store redis://127.0.0.1:6379 --replica b --port 8942"#,
        "needs redis-server and several servers at once; .ci/run runs the same setup in interop/check-replicas.sh",
    ),
    (
        r#"forkscope balance --port 8940 --upstream http://127.0.0.1:8941 --upstream http://127.0.0.1:8942"#,
        "needs redis-server and several servers at once; .ci/run runs the same setup in interop/check-replicas.sh",
    ),
    (
        r#"forkscope probe http://127.0.0.1:8940/mcp"#,
        "the battery against two replicas behind the balancer; .ci/run runs it in interop/check-replicas.sh",
    ),
    (
        r#"curl -si http://127.0.0.1:8940/mcp -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}' | grep -i '^mcp-'"#,
        "needs redis-server and several servers at once; .ci/run runs the same setup in interop/check-replicas.sh",
    ),
];

/// The curl walkthrough at the test's pace: the doc's timers are for people typing, and the
/// test does not wait them out. Each replaces text in the commands run (the output shown
/// does not depend on them; its timings are `…`).
pub const PACE: &[(&str, &str, &str)] = &[
    (
        "--grace-ms 14000",
        "--grace-ms 3000",
        "the fenced stream's grace window is waited out once; 3 s still leaves the test room to make each resume inside it",
    ),
    (
        "--grace-ms 20000",
        "--grace-ms 2000",
        "the naive orphan's grace window is waited out once, and 2 s holds several events emitted onto it: the fork",
    ),
    (
        "--emit-every 2000",
        "--emit-every 500",
        "a background event every 0.5 s: the three before Ctrl-C come sooner, and 0.5 s is the room to press it before a fourth",
    ),
    (
        "\"delay_ms\":1000",
        "\"delay_ms\":100",
        "the 5-step tool call in half a second",
    ),
];

/// How the test takes a doc command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Pasted into a terminal.
    Run,
    /// `forkscope` with no subcommand: the dashboard, run without a terminal.
    Dashboard,
    /// `forkscope serve` or `proxy`, run as T1.
    Server,
    Skipped(&'static str),
}

/// The command as the skip list reads it: `cargo run --release --` is `forkscope`.
pub fn as_forkscope(code: &str) -> String {
    let code = code.replace("cargo run --release --", "forkscope");
    match code.strip_prefix("cargo run --release") {
        Some(rest) if rest.is_empty() || rest.starts_with(' ') => format!("forkscope{rest}"),
        _ => code,
    }
}

pub fn classify(command: &str) -> Result<Kind, String> {
    if let Some((_, why)) = SKIPPED.iter().find(|(skipped, _)| *skipped == command) {
        return Ok(Kind::Skipped(why));
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.as_slice() {
        ["forkscope", "serve" | "proxy", ..] => Ok(Kind::Server),
        ["forkscope"] => Ok(Kind::Dashboard),
        ["forkscope", flag, ..] if flag.starts_with("--") => Ok(Kind::Dashboard),
        ["cargo", ..] => Err(format!(
            "`{command}`: the test runs the built binary, which only `cargo run --release` stands for; \
             list it in SKIPPED in tests/docs.rs with a reason"
        )),
        _ => Ok(Kind::Run),
    }
}

/// The exit status a command's comments promise: `exits N`, else 0.
pub fn promised_exit(comments: &[String]) -> i32 {
    comments
        .iter()
        .find_map(|c| EXITS.captures(c))
        .map_or(0, |c| c[1].parse().expect("a number"))
}

/// Every command a doc shows, as `classify` reads it.
pub fn doc_commands(doc: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    let mut commands = Vec::new();
    for block in markdown::blocks(&text) {
        let script = match block.info.as_str() {
            "sh" => block.body.clone(),
            "console" => block
                .body
                .lines()
                .filter_map(|l| l.strip_prefix("$ "))
                .map(|l| format!("{l}\n"))
                .collect(),
            _ => continue,
        };
        for command in markdown::logical_commands(&script) {
            if !command.code.is_empty() {
                commands.push((as_forkscope(&command.code), command.text));
            }
        }
    }
    commands
}
