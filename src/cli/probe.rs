//! `forkscope probe`: another MCP server's stream resumption, tested case by case.

use super::{out, outln, runtime};
use forkscope::probe::{self, ProbeError, expect::ExpectError};
use forkscope::tui::probe_watch::{self, WatchError};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp.
    url: String,
    /// text for a person, json for a script, junit (JUnit XML) for a CI job's test report.
    #[arg(long, value_enum, default_value_t = ProbeFormat::Text)]
    format: ProbeFormat,
    /// Rounds of the racing case (1-100).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// The tool whose calls stream progress notifications (default: found by schema in
    /// tools/list: an integer argument that sets how many notifications a call sends —
    /// `steps`, `count`, `n`, `total`, `iterations`, … — and one that paces them, `delay_ms`,
    /// `interval_ms`, …).
    #[arg(long)]
    tool: Option<String>,
    /// The tool's arguments, a JSON object; the count and pace arguments are filled in where
    /// it does not set them.
    #[arg(long, value_name = "JSON")]
    args: Option<String>,
    /// The call tool's integer argument that sets how many notifications it sends, when its
    /// name does not say so.
    #[arg(long, value_name = "NAME")]
    count_arg: Option<String>,
    /// The tool that sends notifications on the standalone GET stream (default: a tool whose
    /// name or description says it notifies — emit, notify, broadcast, background, … — once a
    /// trial call shows it does; else whatever the server sends on its own). Its events are
    /// numbered by the first integer in their params, or a number ending a string
    /// (`urn:x:7`); a `label`, `tag` or `prefix` argument is filled with the session's label,
    /// and events that carry it (`:LABEL:`) are read first — a server that does not echo it is
    /// read without it. It may answer before or after it sends them. A run of known length (a
    /// count argument, or --standalone-count-arg) lets a lost event be told from a quiet one.
    #[arg(long, value_name = "NAME")]
    standalone_tool: Option<String>,
    /// The standalone tool's arguments, a JSON object.
    #[arg(long, value_name = "JSON")]
    standalone_args: Option<String>,
    /// The standalone tool's integer argument that sets how many events it sends, when its
    /// schema does not say so (a count in --standalone-args under a count's name is read too):
    /// a run of known length lets a lost event be told from a quiet source.
    #[arg(long, value_name = "NAME", requires = "standalone_tool")]
    standalone_count_arg: Option<String>,
    /// Run only these cases (comma-separated names, as the report prints them).
    #[arg(long, value_delimiter = ',', value_name = "CASE,...")]
    only: Option<Vec<String>>,
    /// How long a case waits for what it expects, in milliseconds (100-60000).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    window_ms: u64,
    /// Probe a server that is not on this machine.
    #[arg(long)]
    allow_remote: bool,
    /// Compare the findings with the verdicts this TOML file writes down per case; the
    /// exit status then says whether they match (0) or changed (1).
    #[arg(long, value_name = "FILE.toml")]
    expect: Option<PathBuf>,
    /// A command that stops the process running the current task (e.g. `kill -9 $(cat
    /// server.pid)`): runs the task-runner-killed case. Every fault command runs with `sh -c`,
    /// at most 30 s, with FORKSCOPE_PROBE_URL and FORKSCOPE_PROBE_TASK (the task's id) set; the
    /// probe never causes a fault on its own.
    #[arg(long, value_name = "CMD")]
    kill_cmd: Option<String>,
    /// A command that pauses the process running the current task (e.g. `kill -STOP …`); with
    /// --resume-cmd, runs the task-runner-paused case.
    #[arg(long, value_name = "CMD", requires = "resume_cmd")]
    pause_cmd: Option<String>,
    /// The command that wakes what --pause-cmd paused (e.g. `kill -CONT …`).
    #[arg(long, value_name = "CMD", requires = "pause_cmd")]
    resume_cmd: Option<String>,
    /// How long --pause-cmd's pause lasts before --resume-cmd, in milliseconds: longer than the
    /// server's lease or redelivery timeout, to see a second runner.
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pause_ms: u64,
    /// A command that restarts the server (the probe then waits until it answers again): runs
    /// the task-survives-restart case, and brings the server back after --kill-cmd.
    #[arg(long, value_name = "CMD")]
    restart_cmd: Option<String>,
    /// A command that prints how many times the tool's side effect has happened so far (its
    /// output's first number, e.g. `wc -l < effects.log`): the fault cases then judge a step
    /// that ran twice.
    #[arg(long, value_name = "CMD", conflicts_with = "effects_tool")]
    effects_cmd: Option<String>,
    /// A tool of the server whose result holds that count, for a server that exposes one.
    #[arg(long, value_name = "NAME")]
    effects_tool: Option<String>,
    /// Watch the battery in the terminal: each case's connections as lanes, the events
    /// that break the rule marked (q quits; the report of the cases run so far follows).
    #[arg(long)]
    watch: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ProbeFormat {
    Text,
    Json,
    Junit,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeFailure {
    #[error(transparent)]
    Expect(#[from] ExpectError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    Watch(#[from] WatchError),
}

/// Exit 0 when no case is violated (or, with `--expect`, the findings match), else 1. A case
/// `not exercised` (it saw too little to judge) or `not run` is no violation; the summary line
/// counts each apart.
pub fn run(args: ProbeArgs) -> Result<ExitCode, ProbeFailure> {
    let expected = args
        .expect
        .as_deref()
        .map(probe::expect::load)
        .transpose()?;
    let options = probe::Options {
        url: args.url,
        repeat: args.repeat,
        tool: args.tool,
        args: args.args,
        count_arg: args.count_arg,
        standalone_tool: args.standalone_tool,
        standalone_args: args.standalone_args,
        standalone_count_arg: args.standalone_count_arg,
        only: args.only,
        allow_remote: args.allow_remote,
        window_ms: args.window_ms,
        faults: probe::faults::Faults {
            kill: args.kill_cmd,
            pause: args.pause_cmd,
            resume: args.resume_cmd,
            restart: args.restart_cmd,
            effects_cmd: args.effects_cmd,
            effects_tool: args.effects_tool,
            pause_ms: args.pause_ms,
        },
    };
    let mut report = if args.watch {
        probe_watch::run(&options)?
    } else {
        runtime().block_on(probe::probe(&options))?
    };
    report.expected = expected
        .as_ref()
        .map(|e| probe::expect::compare(e, &report));
    match args.format {
        ProbeFormat::Text => out!("{}", probe::text(&report)),
        ProbeFormat::Json => outln!("{}", probe::json(&report)),
        ProbeFormat::Junit => out!("{}", probe::junit::junit(&report)),
    }
    let failed = match &report.expected {
        Some(compared) => !compared.mismatches.is_empty(),
        None => report.violated(),
    };
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
