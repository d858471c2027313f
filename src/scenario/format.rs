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
                    ms.saturating_mul(u64::from(*repeat))
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
    #[error("{path}:{line}: {bound}")]
    OverBound {
        path: String,
        line: usize,
        bound: OverBound,
    },
    #[error(
        "{path}: larger than 1 MiB ({MAX_FILE_BYTES} bytes), the most a scenario file may be; \
         a scenario is a story of steps, not a log"
    )]
    TooLarge { path: String },
}

/// A bound a scenario went past, found before anything plays. The bounds exist because a
/// scenario is input: without them a file of a few bytes could keep `forkscope run` busy for
/// ever (lab time near the end of `u64`, where every deadline saturates to now and the driver
/// never goes idle) or for a day (a billion repeats).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverBound {
    #[error(
        "step {step}: repeat = {repeat} is more than {MAX_REPEAT}, the most one step may repeat"
    )]
    Repeat { step: usize, repeat: u32 },
    #[error(
        "step {step}: the advances{} add up to more than a week of lab time \
         ({MAX_LAB_TIME_MS} ms), the most a scenario may move the clock",
        under(*only)
    )]
    LabTime { step: usize, only: Option<Policy> },
    #[error(
        "step {step}: the steps played{}, repeats counted, add up to more than \
         {MAX_PLAYED_STEPS}, the most a scenario may play",
        under(*only)
    )]
    PlayedSteps { step: usize, only: Option<Policy> },
    #[error(
        "step {step}: timeout_ms = {timeout_ms} is more than {MAX_WAIT_TIMEOUT_MS} (ten minutes), \
         the longest a wait may last"
    )]
    WaitTimeout { step: usize, timeout_ms: u64 },
}

/// ` under naive` for a step that runs under one policy only (its totals are that policy's).
fn under(only: Option<Policy>) -> String {
    only.map(|p| format!(" under {p}")).unwrap_or_default()
}

/// The largest scenario file read: the shipped ones are a few KiB, a 50,000-step file about
/// 1 MiB. Anything bigger (or a device that never ends) is refused after reading this much.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The most one step may repeat. An advance settles the lab between repeats (tens of real
/// milliseconds each), so a thousand repeats already take about a minute.
pub const MAX_REPEAT: u32 = 1_000;

/// Steps one run may play, each repeat counted: twice the steps the largest file can hold
/// without repeats, so only repeats multiplied over many steps reach it.
pub const MAX_PLAYED_STEPS: u64 = 100_000;

/// Lab time a scenario may move in all, under each policy: a week, far past every timer the
/// lab has (the longest default, a session's idle limit, is ten minutes) and far from where
/// lab time saturates.
pub const MAX_LAB_TIME_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The longest a wait may be given, in real time: a wait that long has failed anyway, and
/// this keeps its deadline far from overflowing the clock it is measured on.
pub const MAX_WAIT_TIMEOUT_MS: u64 = 10 * 60 * 1000;

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
    use std::io::Read as _;
    let shown = path.display().to_string();
    let read = |source| ScenarioError::Read {
        path: shown.clone(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ScenarioError::TooLarge { path: shown });
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    parse(&text, path)
}

/// What the steps so far add up to under each policy, checked against the bounds as each step
/// is read.
#[derive(Default)]
struct Totals {
    /// Under naive and under fenced: lab time moved, and steps played with their repeats.
    lab_ms: [u64; 2],
    played: [u64; 2],
}

impl Totals {
    /// Counts step number `n`, or says which bound it crosses.
    fn add(&mut self, step: &Step, n: usize) -> Result<(), OverBound> {
        let (repeat, advance_ms) = match step.kind {
            StepKind::Action { repeat, .. } => (repeat, 0),
            StepKind::Advance { ms, repeat } => (repeat, ms),
            StepKind::Wait { timeout_ms, .. } if timeout_ms > MAX_WAIT_TIMEOUT_MS => {
                return Err(OverBound::WaitTimeout {
                    step: n,
                    timeout_ms,
                });
            }
            StepKind::Wait { .. } | StepKind::Probe(_) | StepKind::Say => (1, 0),
        };
        if repeat > MAX_REPEAT {
            return Err(OverBound::Repeat { step: n, repeat });
        }
        for (i, policy) in [Policy::Naive, Policy::Fenced].into_iter().enumerate() {
            if step.only.is_some_and(|only| only != policy) {
                continue;
            }
            // Checked: two advances of 2⁶³ ms must not wrap into a small total.
            self.lab_ms[i] = advance_ms
                .checked_mul(u64::from(repeat))
                .and_then(|ms| ms.checked_add(self.lab_ms[i]))
                .filter(|total| *total <= MAX_LAB_TIME_MS)
                .ok_or(OverBound::LabTime {
                    step: n,
                    only: step.only,
                })?;
            self.played[i] += u64::from(repeat);
            if self.played[i] > MAX_PLAYED_STEPS {
                return Err(OverBound::PlayedSteps {
                    step: n,
                    only: step.only,
                });
            }
        }
        Ok(())
    }
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
    let mut totals = Totals::default();
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
        let step = Step {
            kind,
            say: step.say.clone(),
            only: step.only,
            line,
        };
        if let Err(bound) = totals.add(&step, n) {
            return Err(ScenarioError::OverBound {
                path: shown.clone(),
                line,
                bound,
            });
        }
        steps.push(step);
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
        let max = forkscope_core::work::MAX_STEPS;
        let max_delay = forkscope_core::work::MAX_DELAY_MS;
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

    /// Each bound is refused before anything plays, at the line of the step that crosses it.
    #[test]
    fn lab_time_repeats_and_waits_past_their_bounds_are_refused_at_their_line() {
        let end_of_time = err(&format!("{HEAD}[[step]]\nadvance_ms = {}\n", u64::MAX));
        assert!(
            end_of_time.starts_with("t.toml:3:") && end_of_time.contains("lab time"),
            "{end_of_time}"
        );
        // Two advances of 2⁶³−1 ms each: neither alone overflows, their sum does.
        let half = i64::MAX;
        let two_halves = err(&format!(
            "{HEAD}[[step]]\nadvance_ms = {half}\n[[step]]\nadvance_ms = {half}\n"
        ));
        assert!(
            two_halves.starts_with("t.toml:3:") && two_halves.contains("lab time"),
            "{two_halves}"
        );
        // A week in one step is allowed; a week and a millisecond, in two, is not.
        let week: u64 = 7 * 24 * 60 * 60 * 1000;
        assert!(
            parse(
                &format!("{HEAD}[[step]]\nadvance_ms = {week}\n"),
                Path::new("t.toml")
            )
            .is_ok()
        );
        let past_a_week = err(&format!(
            "{HEAD}[[step]]\nadvance_ms = {week}\n[[step]]\nsay = \"x\"\n[[step]]\nadvance_ms = 1\n"
        ));
        assert!(past_a_week.starts_with("t.toml:7:"), "{past_a_week}");
        // Repeated advances count every time.
        let repeated = err(&format!(
            "{HEAD}[[step]]\nadvance_ms = {}\nrepeat = 2\n",
            week / 2 + 1
        ));
        assert!(repeated.contains("lab time"), "{repeated}");
        // Steps under different policies add up separately.
        assert!(parse(
            &format!(
                "{HEAD}[[step]]\nadvance_ms = {week}\nonly = \"naive\"\n[[step]]\nadvance_ms = {week}\nonly = \"fenced\"\n"
            ),
            Path::new("t.toml")
        )
        .is_ok());
        let billion = err(&format!(
            "{HEAD}[[step]]\naction = \"emit_background\"\nrepeat = 1000000000\n"
        ));
        assert!(
            billion.starts_with("t.toml:3:") && billion.contains("repeat"),
            "{billion}"
        );
        // 101 steps of 1,000 repeats: more than the 100,000 a scenario may play.
        let many = "[[step]]\naction = \"emit_background\"\nrepeat = 1000\n".repeat(101);
        let too_many = err(&format!("{HEAD}{many}"));
        assert!(too_many.contains("add up to more than"), "{too_many}");
        let forever = err(&format!(
            "{HEAD}[[step]]\nwait = \"applied\"\ntimeout_ms = {}\n",
            u64::MAX
        ));
        assert!(
            forever.starts_with("t.toml:3:") && forever.contains("timeout_ms"),
            "{forever}"
        );
    }

    #[test]
    fn a_file_past_the_size_cap_is_refused_unread() {
        let dir = std::env::temp_dir().join(format!("forkscope-format-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.toml");
        let mut text = format!("{HEAD}[[step]]\nsay = \"x\"\n");
        text.push_str(&"#".repeat(1024 * 1024 + 1 - text.len()));
        std::fs::write(&big, &text).unwrap();
        let refused = load(&big).unwrap_err().to_string();
        assert!(
            refused.contains("big.toml") && refused.contains("1 MiB"),
            "{refused}"
        );
        // One byte less is a scenario like any other.
        text.pop();
        std::fs::write(&big, &text).unwrap();
        assert!(load(&big).is_ok());
        std::fs::remove_dir_all(&dir).ok();
        // A device that never ends is read only up to the cap.
        #[cfg(unix)]
        {
            let endless = load(Path::new("/dev/zero")).unwrap_err().to_string();
            assert!(endless.contains("1 MiB"), "{endless}");
        }
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
