//! The scenario file format (`scenarios/*.toml`) and its loader, which reports every mistake
//! with file, line and what was expected.

use crate::lab::{Action, Probe};
use forkscope_core::{AnomalyKind, LabConfig, Policy, RejectReason, Tuning};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which policies a scenario runs under.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policies {
    Fenced,
    Naive,
    #[default]
    Both,
}

impl Policies {
    pub fn list(self) -> Vec<Policy> {
        match self {
            Policies::Fenced => vec![Policy::Fenced],
            Policies::Naive => vec![Policy::Naive],
            Policies::Both => vec![Policy::Naive, Policy::Fenced],
        }
    }
}

/// A state of the lab a step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitFor {
    /// The client holds a stream and has a cursor.
    Connected,
    /// The client noticed its streams ended and is between attempts: the standalone stream,
    /// and every tool call still waiting on its result.
    Reconnecting,
    /// The client has applied at least `count` side effects.
    Applied,
    /// The server has ruled on `count` more GETs (resumed, rejected or a new stream) since the
    /// last action, advance or probe step began.
    Decision,
    /// The server has recorded at least `count` emits.
    Emits,
    /// The server has started at least `count` grace windows (it noticed a connection end):
    /// what a script waits for before it lets lab time run past a grace window.
    Orphaned,
    /// The latest tool call's stream is open (its priming event arrived) and it has applied at
    /// least `count` events (progress steps, result); `count = 0`: the call is under way.
    ToolProgress,
    /// The latest tool call is over: its result applied, or given up as lost.
    ToolDone,
}

/// The arguments of the `progress_task` call a `start_tool_call` step makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolArgs {
    pub steps: u64,
    pub delay_ms: u64,
}

/// A count expectation: `3` (exactly), `">=1"`, `"<=2"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Count {
    Exactly(u64),
    AtLeast(u64),
    AtMost(u64),
}

impl Count {
    pub fn holds(self, got: u64) -> bool {
        match self {
            Count::Exactly(n) => got == n,
            Count::AtLeast(n) => got >= n,
            Count::AtMost(n) => got <= n,
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Count::Exactly(n) => write!(f, "= {n}"),
            Count::AtLeast(n) => write!(f, "≥ {n}"),
            Count::AtMost(n) => write!(f, "≤ {n}"),
        }
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        let bad = || {
            serde::de::Error::custom(
                "expected a count: a number, or a string like \">=1\" or \"<=2\"",
            )
        };
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => Ok(Count::Exactly(n)),
            Raw::Text(t) => {
                let t = t.trim();
                let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
                if let Some(n) = t.strip_prefix(">=") {
                    Ok(Count::AtLeast(number(n)?))
                } else if let Some(n) = t.strip_prefix("<=") {
                    Ok(Count::AtMost(number(n)?))
                } else {
                    Ok(Count::Exactly(number(t)?))
                }
            }
        }
    }
}

/// What must hold at the end of a run under one policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// No anomaly at all.
    pub clean: Option<bool>,
    #[serde(default)]
    pub anomalies: BTreeMap<AnomalyKind, Count>,
    #[serde(default)]
    pub rejected: BTreeMap<RejectReason, Count>,
    pub resumes_accepted: Option<Count>,
    pub late_emits_refused: Option<Count>,
    /// Conditions (1–5) the dashboard must show red.
    pub conditions_broken: Option<Vec<u8>>,
    /// The lab refuses to start with this configuration.
    pub config_refused: Option<bool>,
    /// HTTP statuses of the probes, in order.
    pub probe_statuses: Option<Vec<u16>>,
    /// Every accepted probe replayed the same events (idempotent resume).
    pub probes_replay_alike: Option<bool>,
    /// Tool-call results the client applied (each call's result, once).
    pub tool_results: Option<Count>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    pub naive: Option<Expect>,
    pub fenced: Option<Expect>,
}

/// One step as written: exactly one of `action`, `set`, `wait`, `advance_ms`, `probe`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    action: Option<Action>,
    /// Turn the lab's knobs while it runs (`set = { grace_ms = 8000 }`).
    set: Option<Tuning>,
    repeat: Option<u32>,
    wait: Option<WaitFor>,
    count: Option<u64>,
    timeout_ms: Option<u64>,
    advance_ms: Option<u64>,
    probe: Option<Probe>,
    /// Narration: what this step does and why it matters.
    say: Option<String>,
    /// Run this step under one policy only.
    only: Option<Policy>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    teaches: String,
    #[serde(default)]
    policy: Policies,
    #[serde(default)]
    config: LabConfig,
    background_every_ms: Option<u64>,
    /// What `start_tool_call` asks of `progress_task` (default 8 steps, 400 ms apart).
    tool: Option<ToolArgs>,
    #[serde(rename = "step")]
    steps: Vec<toml::Spanned<RawStep>>,
    #[serde(default)]
    expect: Expectations,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum StepKind {
    Action {
        action: Action,
        repeat: u32,
    },
    Wait {
        what: WaitFor,
        count: u64,
        timeout_ms: u64,
    },
    /// Lab time moves `ms`, `repeat` times, the lab settling in between (so a client acts on
    /// what fell due, as it would in real time).
    Advance {
        ms: u64,
        repeat: u32,
    },
    Probe(Probe),
    Say,
}

impl StepKind {
    /// What the step does, in a few words: the narration of a step the file says nothing about.
    pub fn describe(&self) -> String {
        match self {
            StepKind::Action { action, repeat } if *repeat > 1 => {
                format!("{} (×{repeat})", action.describe())
            }
            StepKind::Action {
                action: Action::Tune(tuning),
                ..
            } => format!("the knobs turn: {tuning}"),
            StepKind::Action { action, .. } => action.describe().to_owned(),
            StepKind::Wait { what, count, .. } => {
                let what = serde_json::to_value(what)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
                    .replace('_', " ");
                format!("waiting for: {what} {count}")
            }
            StepKind::Advance { ms, repeat } if *repeat > 1 => {
                format!(
                    "lab time moves {} ms in steps of {ms}; due timers fire",
                    ms * u64::from(*repeat)
                )
            }
            StepKind::Advance { ms, .. } => format!("lab time moves {ms} ms; due timers fire"),
            StepKind::Probe(probe) => format!(
                "a raw GET: token {:?}, Last-Event-ID {}",
                probe.token,
                probe.last_event_id.as_deref().unwrap_or("none")
            )
            .to_lowercase(),
            StepKind::Say => String::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    pub kind: StepKind,
    pub say: Option<String>,
    pub only: Option<Policy>,
    /// Line in the file, for messages.
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Scenario {
    pub path: PathBuf,
    pub name: String,
    pub teaches: String,
    pub policy: Policies,
    pub config: LabConfig,
    pub background_every_ms: Option<u64>,
    pub tool: Option<ToolArgs>,
    pub steps: Vec<Step>,
    pub expect: Expectations,
}

/// A mistake in a scenario file.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: String,
        line: usize,
        message: String,
    },
}

/// Default guard on a wait, in real time: a stuck scenario fails instead of hanging.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 10_000;

/// Where each line of a file starts, so finding a span's line is a binary search. Counting
/// newlines from the top for every step made loading a file of n steps cost n².
struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    fn new(text: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Lines { starts }
    }

    /// The 1-based line of byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|start| *start <= offset)
    }
}

pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&text, path)
}

pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    let shown = path.display().to_string();
    let invalid = |line: usize, message: String| ScenarioError::Invalid {
        path: shown.clone(),
        line,
        message,
    };
    let lines = Lines::new(text);
    let raw: RawScenario = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| lines.line_of(s.start));
        invalid(line, e.message().trim().to_owned())
    })?;
    if raw.steps.is_empty() {
        return Err(invalid(1, "a scenario needs at least one [[step]]".into()));
    }
    let mut steps = Vec::new();
    for (index, spanned) in raw.steps.iter().enumerate() {
        let line = lines.line_of(spanned.span().start);
        let step = spanned.get_ref();
        let n = index + 1;
        let given = [
            step.action.is_some(),
            step.set.is_some(),
            step.wait.is_some(),
            step.advance_ms.is_some(),
            step.probe.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        let kind = match (given, &step.action, step.wait, step.advance_ms, &step.probe) {
            (0, ..) if step.say.is_some() => StepKind::Say,
            (1, ..) if step.set.is_some() => StepKind::Action {
                action: Action::Tune(step.set.unwrap_or_default()),
                repeat: 1,
            },
            (1, Some(action), ..) => StepKind::Action {
                action: *action,
                repeat: step.repeat.unwrap_or(1).max(1),
            },
            (1, _, Some(what), ..) => StepKind::Wait {
                what,
                count: step.count.unwrap_or(1),
                timeout_ms: step.timeout_ms.unwrap_or(DEFAULT_WAIT_TIMEOUT_MS),
            },
            (1, _, _, Some(ms), _) => StepKind::Advance {
                ms,
                repeat: step.repeat.unwrap_or(1).max(1),
            },
            (1, .., Some(probe)) => StepKind::Probe(probe.clone()),
            _ => {
                return Err(invalid(
                    line,
                    format!(
                        "step {n}: expected exactly one of `action`, `set`, `wait`, `advance_ms`, `probe` (or only `say`)"
                    ),
                ));
            }
        };
        if step.repeat.is_some() && step.action.is_none() && step.advance_ms.is_none() {
            return Err(invalid(
                line,
                format!("step {n}: `repeat` goes with `action` or `advance_ms`"),
            ));
        }
        if (step.count.is_some() || step.timeout_ms.is_some()) && step.wait.is_none() {
            return Err(invalid(
                line,
                format!("step {n}: `count` and `timeout_ms` go with `wait`"),
            ));
        }
        steps.push(Step {
            kind,
            say: step.say.clone(),
            only: step.only,
            line,
        });
    }
    for (policy, expect) in [
        (Policy::Naive, &raw.expect.naive),
        (Policy::Fenced, &raw.expect.fenced),
    ] {
        if let Some(Expect {
            conditions_broken: Some(list),
            ..
        }) = expect
            && let Some(bad) = list.iter().find(|c| !(1..=5).contains(*c))
        {
            return Err(invalid(
                1,
                format!("expect.{policy}.conditions_broken: {bad} is not a condition (1–5)"),
            ));
        }
    }
    if let Some(tool) = raw.tool {
        let max = crate::wire::server::tool::MAX_STEPS;
        let max_delay = crate::wire::server::tool::MAX_DELAY_MS;
        if !(1..=max).contains(&tool.steps) || tool.delay_ms > max_delay {
            return Err(invalid(
                1,
                format!(
                    "tool: steps must be 1–{max} and delay_ms at most {max_delay} (got {} and {})",
                    tool.steps, tool.delay_ms
                ),
            ));
        }
    }
    Ok(Scenario {
        path: path.to_path_buf(),
        name: raw.name,
        teaches: raw.teaches.trim().to_owned(),
        policy: raw.policy,
        config: raw.config,
        background_every_ms: raw.background_every_ms,
        tool: raw.tool,
        steps,
        expect: raw.expect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, Path::new("t.toml")).unwrap_err().to_string()
    }

    const HEAD: &str = "name = \"x\"\nteaches = \"y\"\n";

    #[test]
    fn a_good_file_parses() {
        let text = format!(
            "{HEAD}policy = \"both\"\n[config]\ngrace_ms = 100\n[[step]]\naction = \"emit_background\"\nrepeat = 3\n[[step]]\nwait = \"applied\"\ncount = 3\n[[step]]\nadvance_ms = 5\nsay = \"later\"\n[[step]]\nprobe = {{ token = \"current\", last_event_id = \"s1-9\" }}\n[expect.naive]\nanomalies = {{ fork = \">=1\" }}\n[expect.fenced]\nclean = true\nrejected = {{ missing_token = 1 }}\n"
        );
        let s = parse(&text, Path::new("t.toml")).unwrap();
        assert_eq!(s.steps.len(), 4);
        assert_eq!(
            s.steps[0].kind,
            StepKind::Action {
                action: Action::EmitBackground,
                repeat: 3
            }
        );
        assert_eq!(s.steps[1].line, 9);
        assert_eq!(s.config.grace_ms, 100);
        assert_eq!(
            s.expect.naive.unwrap().anomalies[&AnomalyKind::Fork],
            Count::AtLeast(1)
        );
    }

    #[test]
    fn mistakes_name_the_file_the_line_and_what_was_expected() {
        let unknown_action = err(&format!("{HEAD}[[step]]\naction = \"fly\"\n"));
        assert!(unknown_action.starts_with("t.toml:4:"), "{unknown_action}");
        assert!(
            unknown_action.contains("drop_connection"),
            "lists the valid actions: {unknown_action}"
        );
        let two = err(&format!(
            "{HEAD}[[step]]\naction = \"reset\"\nwait = \"connected\"\n"
        ));
        assert!(
            two.starts_with("t.toml:3:") && two.contains("exactly one of"),
            "{two}"
        );
        let typo = err(&format!("{HEAD}[[step]]\nactoin = \"reset\"\n"));
        assert!(
            typo.contains("t.toml:4") && typo.contains("actoin"),
            "{typo}"
        );
        let count = err(&format!(
            "{HEAD}[[step]]\nsay = \"x\"\n[expect.naive]\nresumes_accepted = \"more\"\n"
        ));
        assert!(count.contains("expected a count"), "{count}");
        let no_steps = err(HEAD);
        assert!(no_steps.contains("step"), "{no_steps}");
        let bad_config = err(&format!(
            "{HEAD}[config]\ngrace = 3\n[[step]]\nsay = \"x\"\n"
        ));
        assert!(
            bad_config.contains("t.toml:4") && bad_config.contains("grace"),
            "{bad_config}"
        );
        let syntax = err("name = \n");
        assert!(syntax.starts_with("t.toml:1:"), "{syntax}");
    }

    #[test]
    fn line_numbers_are_right_across_a_long_file() {
        let steps = 5_000;
        let text = format!("{HEAD}{}", "[[step]]\nsay = \"x\"\n".repeat(steps));
        let s = parse(&text, Path::new("t.toml")).unwrap();
        assert_eq!(s.steps.len(), steps);
        for (i, step) in s.steps.iter().enumerate() {
            assert_eq!(step.line, 3 + 2 * i);
        }
        let lines = Lines::new("a\nbc\n\nd");
        let got: Vec<usize> = (0..=8).map(|at| lines.line_of(at)).collect();
        assert_eq!(got, [1, 1, 2, 2, 2, 3, 4, 4, 4]);
    }
}
