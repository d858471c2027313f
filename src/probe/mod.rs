//! `forkscope probe URL`: tests another MCP server's stream resumption for forks, duplicates
//! and gaps, as a stock client meets it. The rules it judges by live in the core
//! ([`forkscope_core::probe`]); this module finds what the server offers, runs the battery
//! ([`cases`]) over real HTTP ([`http`]), and reports.

pub mod cases;
pub mod discover;
pub mod expect;
pub mod faults;
pub mod http;
pub mod items;
pub mod junit;
mod text;

use crate::wire::mcp::Call;
use cases::{CASES, Ctx, Emitter, NotRun};
use discover::ToolPlan;
use forkscope_core::probe::{Connection, Item, Judged, Verdict};
use forkscope_core::revision::{LEGACY, MODERN};
use http::{Bounds, HttpError, Target};
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;
pub use text::{evidence, evidence_lines, text};

/// What the command line asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub repeat: u32,
    pub tool: Option<String>,
    pub args: Option<String>,
    /// The call tool's argument that sets how many notifications it sends.
    pub count_arg: Option<String>,
    /// The tool that notifies on the standalone stream, and its arguments.
    pub standalone_tool: Option<String>,
    pub standalone_args: Option<String>,
    /// The standalone tool's argument that sets how many events it sends.
    pub standalone_count_arg: Option<String>,
    pub only: Option<Vec<String>>,
    pub allow_remote: bool,
    /// How long a case waits for what it expects, in milliseconds.
    pub window_ms: u64,
    /// The user's fault commands and effect counters (the fault cases run only with them).
    pub faults: faults::Faults,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("not an http(s) URL: {0}")]
    BadUrl(String),
    #[error(
        "{host} is not a loopback address: the probe sends hostile inputs, so it only probes 127.0.0.1, ::1 or localhost unless given --allow-remote"
    )]
    Remote { host: String },
    #[error("could not resolve {host}: {why}")]
    Unresolved { host: String, why: String },
    #[error("no case named {name}; the cases are: {names}")]
    UnknownCase { name: String, names: String },
    #[error("--args must be a JSON object: {0}")]
    BadArgs(String),
    #[error("--args needs --tool")]
    ArgsWithoutTool,
    #[error("--standalone-args must be a JSON object: {0}")]
    BadStandaloneArgs(String),
    #[error("--standalone-args needs --standalone-tool")]
    StandaloneArgsWithoutTool,
    #[error("--repeat must be 1-100, got {0}")]
    BadRepeat(u32),
    #[error("the server is unreachable or not an MCP server: {0}")]
    Unreachable(HttpError),
    #[error("tools/list failed: {0}")]
    ToolsList(HttpError),
    #[error("quit before any case finished")]
    Interrupted,
    #[error("no tool named {name} in tools/list (it offers: {offered})")]
    NoSuchTool { name: String, offered: String },
}

/// How one case came out.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Holds,
    Violated,
    NotRun,
    /// Run, but it saw too little to judge (the core's [`Judged::NotExercised`]): neither a
    /// pass nor a violation, counted apart.
    ///
    /// [`Judged::NotExercised`]: forkscope_core::probe::Judged::NotExercised
    NotExercised,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    pub case: &'static str,
    pub does: &'static str,
    pub outcome: Outcome,
    /// The verdict's name (`clean_continuation`, `two_live_streams`, …); none if not run.
    pub verdict: Option<&'static str>,
    /// The status of a typed rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The verdict in a sentence, or why the case was not run.
    pub says: String,
    pub why: String,
    /// Arrival orders of the events that break the rule, to mark in a view.
    pub marked: Vec<u64>,
    pub connections: Vec<Connection>,
    /// How long the case ran, in milliseconds.
    pub elapsed_ms: u64,
    /// What the case did that evidence must show: the fault commands it ran and how each
    /// ended, the effects it counted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub url: String,
    pub server: String,
    pub protocol: String,
    /// The revisions the cases that ran spoke (a case not run speaks none).
    pub revisions: Vec<String>,
    pub call_tool: Option<String>,
    pub standalone: String,
    pub cases: Vec<CaseReport>,
    /// The comparison with `--expect`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<expect::Compared>,
}

impl Report {
    /// A report of `cases`, naming the revisions they probed.
    pub fn new(
        url: String,
        server: String,
        protocol: String,
        call_tool: Option<String>,
        standalone: String,
        cases: Vec<CaseReport>,
    ) -> Report {
        let ran = |modern: bool| {
            cases.iter().any(|c| {
                cases::is_modern(c.case) == modern && !matches!(c.outcome, Outcome::NotRun)
            })
        };
        let mut revisions = Vec::new();
        if ran(false) {
            // `protocol` is the revision `initialize` settled on when the server speaks both.
            let legacy = if protocol == MODERN {
                LEGACY
            } else {
                &protocol
            };
            revisions.push(legacy.to_owned());
        }
        if ran(true) {
            revisions.push(MODERN.to_owned());
        }
        Report {
            url,
            server,
            protocol,
            revisions,
            call_tool,
            standalone,
            cases,
            expected: None,
        }
    }

    pub fn count(&self, outcome: fn(&Outcome) -> bool) -> usize {
        self.cases.iter().filter(|c| outcome(&c.outcome)).count()
    }

    pub fn violated(&self) -> bool {
        self.count(|o| matches!(o, Outcome::Violated)) > 0
    }
}

/// Checks what can be checked before touching the network.
pub fn validate(
    opts: &Options,
) -> Result<(reqwest::Url, Vec<&'static str>, Option<Value>), ProbeError> {
    let url = reqwest::Url::parse(&opts.url)
        .map_err(|e| ProbeError::BadUrl(format!("{} ({e})", opts.url)))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ProbeError::BadUrl(opts.url.clone()));
    }
    if !(1..=100).contains(&opts.repeat) {
        return Err(ProbeError::BadRepeat(opts.repeat));
    }
    let names: Vec<&'static str> = match &opts.only {
        None => CASES.iter().map(|(n, _)| *n).collect(),
        Some(only) => {
            let mut picked = Vec::new();
            for name in only {
                let Some((n, _)) = CASES.iter().find(|(n, _)| n == name) else {
                    return Err(ProbeError::UnknownCase {
                        name: name.clone(),
                        names: CASES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
                    });
                };
                if !picked.contains(n) {
                    picked.push(*n);
                }
            }
            picked
        }
    };
    let args = json_object(
        &opts.tool,
        &opts.args,
        ProbeError::ArgsWithoutTool,
        ProbeError::BadArgs,
    )?;
    json_object(
        &opts.standalone_tool,
        &opts.standalone_args,
        ProbeError::StandaloneArgsWithoutTool,
        ProbeError::BadStandaloneArgs,
    )?;
    Ok((url, names, args))
}

/// A flag's JSON object, which needs the flag naming its tool.
fn json_object(
    tool: &Option<String>,
    args: &Option<String>,
    without_tool: ProbeError,
    bad: fn(String) -> ProbeError,
) -> Result<Option<Value>, ProbeError> {
    match (tool, args) {
        (None, Some(_)) => Err(without_tool),
        (_, Some(text)) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Ok(Some(v)),
            Ok(other) => Err(bad(format!("got {other}"))),
            Err(e) => Err(bad(e.to_string())),
        },
        _ => Ok(None),
    }
}

/// Refuses anything but loopback unless allowed: every address the host resolves to counts.
async fn check_loopback(url: &reqwest::Url, allow_remote: bool) -> Result<(), ProbeError> {
    if allow_remote {
        return Ok(());
    }
    let host = url
        .host_str()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<_> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| ProbeError::Unresolved {
            host: host.clone(),
            why: e.to_string(),
        })?
        .collect();
    if addrs.is_empty() || addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(ProbeError::Remote { host });
    }
    Ok(())
}

/// What a probe run says as it goes (for `--watch`).
#[derive(Debug, Clone)]
pub enum Progress {
    /// The server answered `initialize` and `tools/list`; the cases that will run.
    Discovered {
        server: String,
        protocol: String,
        call_tool: Option<String>,
        standalone: String,
        cases: Vec<&'static str>,
    },
    Started(&'static str),
    Finished(Box<CaseReport>),
}

/// Runs the battery against `opts.url`.
pub async fn probe(opts: &Options) -> Result<Report, ProbeError> {
    probe_with(opts, |_| {}).await
}

/// [`probe`], telling `progress` what happens as it happens.
pub async fn probe_with(
    opts: &Options,
    mut progress: impl FnMut(Progress) + Send,
) -> Result<Report, ProbeError> {
    let (url, names, args) = validate(opts)?;
    check_loopback(&url, opts.allow_remote).await?;
    let window = Duration::from_millis(opts.window_ms.max(100));
    let target = Target::new(url.clone(), Bounds::default()).map_err(ProbeError::Unreachable)?;
    let run: String = format!("{:08x}", rand::random::<u32>());
    let discovery = discover::server(&target, &run).await?;
    let tools = discovery.tools;
    let tools = match (tools, &opts.tool) {
        (Ok(v), _) => v
            .get("tools")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        (Err(e), Some(_)) => return Err(ProbeError::ToolsList(e)),
        (Err(_), None) => Vec::new(),
    };
    let unknown = |u: discover::Unknown| ProbeError::NoSuchTool {
        name: u.name,
        offered: u.offered,
    };
    let call_tool = discover::call_tool(
        &tools,
        opts.tool.as_deref(),
        args,
        opts.count_arg.as_deref(),
    )
    .map_err(unknown)?;
    let (lost, tried) = discovery.lost_sessions;
    let (emitter, standalone) = if lost > 0 && lost == tried {
        let none = "none: no session outlived its initialize, so no standalone stream was opened";
        (Emitter::OnItsOwn, none.to_owned())
    } else if discovery.legacy {
        pick_emitter(&target, &run, &tools, call_tool.as_ref(), opts, window)
            .await
            .map_err(unknown)?
    } else {
        let none = "none: the server speaks 2026-07-28 alone, which has no standalone GET stream";
        (Emitter::OnItsOwn, none.to_owned())
    };
    let report_tool = call_tool.as_ref().map(ToolPlan::describe);
    let mut ctx = Ctx::new(target, call_tool, emitter, opts.repeat, window, run);
    ctx.legacy = discovery.legacy;
    ctx.faults = opts.faults.clone();
    progress(Progress::Discovered {
        server: discovery.server.clone(),
        protocol: discovery.protocol.clone(),
        call_tool: report_tool.clone(),
        standalone: standalone.clone(),
        cases: names.clone(),
    });
    let mut cases = Vec::new();
    for name in names {
        progress(Progress::Started(name));
        let does = CASES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| *d)
            .unwrap_or_default();
        // A safety net over the case's own bounded waits (the racing case waits per round).
        let rounds = if name == "resume-races-emission" {
            2 * opts.repeat.max(1)
        } else {
            1
        };
        let mut limit = window * (4 * rounds) + Duration::from_secs(5);
        if cases::is_fault_case(name) {
            // Its commands and the wait for the server to answer again are bounded apart.
            limit += 3 * faults::COMMAND_LIMIT
                + faults::ANSWER_AGAIN_LIMIT
                + Duration::from_millis(opts.faults.pause_ms);
        }
        let started = std::time::Instant::now();
        let outcome = match tokio::time::timeout(limit, cases::run(&ctx, name)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(NotRun(format!(
                "the case did not finish within its limit of {} s, so it says nothing",
                limit.as_secs()
            ))),
        };
        let report = match outcome {
            Ok((finding, connections)) => CaseReport {
                case: name,
                does,
                outcome: match finding.judged {
                    Judged::Holds => Outcome::Holds,
                    Judged::Violated => Outcome::Violated,
                    Judged::NotExercised => Outcome::NotExercised,
                },
                verdict: Some(finding.verdict.word()),
                status: match finding.verdict {
                    Verdict::TypedRejection { status, .. } => Some(status),
                    _ => None,
                },
                // The mark says `not exercised`; the line says why.
                says: match &finding.verdict {
                    Verdict::NotExercised { because } => because.describe(),
                    other => other.describe(),
                },
                why: finding.why,
                marked: finding.marked,
                connections,
                elapsed_ms: started.elapsed().as_millis() as u64,
                notes: ctx.take_notes(),
            },
            Err(NotRun(why)) => CaseReport {
                case: name,
                does,
                outcome: Outcome::NotRun,
                verdict: None,
                status: None,
                says: "not run".into(),
                why,
                marked: Vec::new(),
                connections: Vec::new(),
                elapsed_ms: started.elapsed().as_millis() as u64,
                notes: ctx.take_notes(),
            },
        };
        progress(Progress::Finished(Box::new(report.clone())));
        cases.push(report);
    }
    Ok(Report::new(
        url.to_string(),
        discovery.server.clone(),
        discovery.protocol.clone(),
        report_tool,
        standalone,
        cases,
    ))
}

/// Where the standalone stream's events come from, and the report's line saying why:
/// `--standalone-tool`, else the first candidate of [`discover::standalone_candidates`] that a
/// trial call shows putting a numbered event on the standalone GET stream.
async fn pick_emitter(
    target: &Target,
    run: &str,
    tools: &[Value],
    call_tool: Option<&ToolPlan>,
    opts: &Options,
    window: Duration,
) -> Result<(Emitter, String), discover::Unknown> {
    if let Some(name) = &opts.standalone_tool {
        let tool = discover::find(tools, name)?;
        let base = opts
            .standalone_args
            .as_deref()
            .and_then(|a| serde_json::from_str(a).ok());
        let plan = discover::standalone_plan(
            tool,
            base,
            "--standalone-tool names it".into(),
            opts.standalone_count_arg.as_deref(),
        );
        let line = plan.describe();
        return Ok((Emitter::Tool(plan), line));
    }
    let mut tried = Vec::new();
    for (i, tool) in discover::standalone_candidates(tools, call_tool.map(|t| t.name.as_str()))
        .into_iter()
        .enumerate()
    {
        let plan = discover::standalone_plan(
            tool,
            None,
            "its name or description says it notifies, and a trial call put a numbered event on the standalone GET stream".into(),
            None,
        );
        if tries_standalone(target, &format!("{run}t{i}"), &plan, window).await {
            let line = plan.describe();
            return Ok((Emitter::Tool(plan), line));
        }
        tried.push(plan.name);
    }
    let line = if tried.is_empty() {
        "whatever the server sends on its own: no tool says it notifies on the standalone stream (name one with --standalone-tool)".to_owned()
    } else {
        format!(
            "whatever the server sends on its own: a trial call of {} put nothing numbered on the standalone stream",
            tried.join(", ")
        )
    };
    Ok((Emitter::OnItsOwn, line))
}

/// Calls `plan`'s tool with the standalone GET stream open: did a numbered event arrive on it?
async fn tries_standalone(target: &Target, label: &str, plan: &ToolPlan, window: Duration) -> bool {
    let Ok(session) = target.open_session(label.to_owned()).await else {
        return false;
    };
    let case = http::Case::new(target);
    let get = case.get(&session, http::Extra::default()).await;
    let (args, _) = plan.args(3, 10, &session.label);
    let called = target
        .request(
            "emit",
            &session,
            Call::ToolsCall(crate::wire::mcp::ToolCall::plain(&plan.name, args)),
        )
        .await
        .is_ok();
    let numbered = |c: &Connection| {
        c.events
            .iter()
            .any(|r| matches!(r.item, Item::Numbered { .. }))
    };
    let seen = called
        && case
            .wait_until(
                tokio::time::Instant::now() + window.min(Duration::from_secs(2)),
                |cs| numbered(&cs[get]),
            )
            .await;
    drop(case);
    target.end_session(&session).await;
    seen
}

pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
