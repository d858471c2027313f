//! The scenario file as written on disk: typed, serde both ways, and written in one place
//! ([`ScenarioFile::to_toml`]). The loader reads these types and the writers (a journal saved
//! from the dashboard, a counterexample from `check`) build them, so a file written here always
//! parses back to the steps it was written from: no string is quoted by hand.

use crate::lab::{Action, Probe};
use forkscope_core::{AnomalyKind, LabConfig, Policy, RejectReason, Tuning};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// Which policies a scenario runs under: `"both"` (naive, then fenced), one policy's name
/// (`"rmcp"`), or a list of names (`["naive", "ts-sdk", "fenced"]`), run in the order written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Policies {
    #[default]
    Both,
    Listed(Vec<Policy>),
}

impl Policies {
    pub fn list(&self) -> Vec<Policy> {
        match self {
            Policies::Both => vec![Policy::Naive, Policy::Fenced],
            Policies::Listed(list) => list.clone(),
        }
    }
}

impl From<Policy> for Policies {
    fn from(policy: Policy) -> Self {
        Policies::Listed(vec![policy])
    }
}

impl Serialize for Policies {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Policies::Both => s.serialize_str("both"),
            Policies::Listed(list) if list.len() == 1 => list[0].serialize(s),
            Policies::Listed(list) => s.collect_seq(list),
        }
    }
}

impl<'de> Deserialize<'de> for Policies {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            One(String),
            Many(Vec<String>),
        }
        let named = |name: &str| {
            name.parse::<Policy>().map_err(|_| {
                D::Error::custom(format!(
                    "unknown policy `{name}`: expected both, {}",
                    Policy::names()
                ))
            })
        };
        match Written::deserialize(d)? {
            Written::One(name) if name == "both" => Ok(Policies::Both),
            Written::One(name) => Ok(Policies::from(named(&name)?)),
            Written::Many(names) => {
                let mut list = Vec::with_capacity(names.len());
                for name in &names {
                    let policy = named(name)?;
                    if list.contains(&policy) {
                        return Err(D::Error::custom(format!("policy `{name}` listed twice")));
                    }
                    list.push(policy);
                }
                if list.is_empty() {
                    return Err(D::Error::custom(
                        "an empty list of policies: name at least one",
                    ));
                }
                Ok(Policies::Listed(list))
            }
        }
    }
}

/// A state of the lab a step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
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
    /// The store has refused at least `count` late writes (emits or call steps on a stale
    /// epoch), or a fenced stream refused them.
    Refused,
    /// Replicas have adopted at least `count` tool calls whose lease expired.
    Adopted,
    /// The client's reconnect was answered, whatever the answer: it holds a stream again, or
    /// the server ruled on its GET (since the last action, advance or probe step began) and the
    /// client is not between sessions. One script for every policy: a resume, a refusal to
    /// retry, a new session and an SDK's empty 200 all satisfy it.
    Answered,
    /// 2026-07-28: the server has applied at least `count` steps of its calls' and tasks'
    /// work.
    StepsApplied,
    /// 2026-07-28: the task client has read at least `count` tasks as ended.
    TasksEnded,
    /// 2026-07-28: the server (or its replicas) adopted at least `count` tasks whose lease ran
    /// out, by their own count.
    TasksAdopted,
    /// 2026-07-28: the server (or its replicas) wrote at least `count` task ends, by the
    /// checker's record (one task ended twice counts twice).
    TasksSettled,
    /// 2026-07-28: the task client's reads again (`read_task_again`) have been answered, at
    /// least `count` of them, whatever the answer.
    ReadsAgain,
}

impl WaitFor {
    /// The wait in words, for a report: `the client to hold a stream`.
    pub fn describe(self, count: u64) -> String {
        match self {
            WaitFor::Connected => "the client to hold a stream with a cursor".to_owned(),
            WaitFor::Reconnecting => "the client to notice its streams ended".to_owned(),
            WaitFor::Applied => format!("the client to apply {count} side effects"),
            WaitFor::Decision => format!("the server to rule on {count} more GETs"),
            WaitFor::Emits => format!("the server to record {count} emits"),
            WaitFor::Orphaned => format!("the server to start {count} grace windows"),
            WaitFor::ToolProgress => {
                format!("the latest tool call to open and apply {count} events")
            }
            WaitFor::ToolDone => "the latest tool call to end".to_owned(),
            WaitFor::Refused => format!("{count} late writes to be refused"),
            WaitFor::Adopted => format!("replicas to adopt {count} tool calls"),
            WaitFor::Answered => "the client's reconnect to be answered".to_owned(),
            WaitFor::StepsApplied => format!("the server to apply {count} steps of work"),
            WaitFor::TasksEnded => format!("{count} tasks to be read as ended"),
            WaitFor::TasksAdopted => format!("the server to adopt {count} tasks"),
            WaitFor::TasksSettled => format!("the server to write {count} task ends"),
            WaitFor::ReadsAgain => format!("{count} reads again to be answered"),
        }
    }
}

/// The arguments of the `progress_task` call a `start_tool_call` step makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolArgs {
    pub steps: u64,
    pub delay_ms: u64,
}

/// A count expectation: `3` (exactly), `">=1"`, `"<=2"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// As the file writes it: a number, or `">=1"` / `"<=2"`.
impl Serialize for Count {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Count::Exactly(n) => serializer.serialize_u64(*n),
            Count::AtLeast(n) => serializer.collect_str(&format_args!(">={n}")),
            Count::AtMost(n) => serializer.collect_str(&format_args!("<={n}")),
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// No anomaly at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub anomalies: BTreeMap<AnomalyKind, Count>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rejected: BTreeMap<RejectReason, Count>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumes_accepted: Option<Count>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_emits_refused: Option<Count>,
    /// Side effects the client applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Count>,
    /// Tool calls a replica adopted (a lab of replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_adopted: Option<Count>,
    /// Conditions (1–5) the dashboard must show red.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions_broken: Option<Vec<u8>>,
    /// The lab refuses to start with this configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_refused: Option<bool>,
    /// HTTP statuses of the probes, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_statuses: Option<Vec<u16>>,
    /// Every accepted probe replayed the same events (idempotent resume).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes_replay_alike: Option<bool>,
    /// Tool-call results the client applied (each call's result, once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_results: Option<Count>,
}

/// What a scenario expects, by policy: `[expect.naive]`, `[expect.ts-sdk]`, … — the keys are
/// [`Policy`]'s own names, so an unknown one is refused with the list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Expectations(BTreeMap<Policy, Expect>);

impl Expectations {
    /// The expectation of `policy`, made if missing.
    pub fn of(&mut self, policy: Policy) -> &mut Expect {
        self.0.entry(policy).or_default()
    }

    /// The expectation of `policy`, if the file has one.
    pub fn get(&self, policy: Policy) -> Option<&Expect> {
        self.0.get(&policy)
    }

    /// Every policy's expectation, in [`Policy::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Policy, &Expect)> {
        self.0.iter().map(|(p, e)| (*p, e))
    }
}

/// One `[[step]]` as written: the loader accepts exactly one of `action`, `set`, `wait`,
/// `advance_ms`, `probe` (or only `say`); see [`super::format::StepKind`] for what each means.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// Turn the lab's knobs while it runs (`set = { grace_ms = 8000 }`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<Tuning>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitFor>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advance_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
    /// Narration: what this step does and why it matters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    /// Run this step under one policy only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only: Option<Policy>,
}

impl StepFile {
    pub fn action(action: Action) -> StepFile {
        StepFile {
            action: Some(action),
            ..StepFile::default()
        }
    }

    /// Wait for `what` (a count of 1 is the loader's default, so it is left out).
    pub fn wait(what: WaitFor, count: u64) -> StepFile {
        StepFile {
            wait: Some(what),
            count: (count != 1).then_some(count),
            ..StepFile::default()
        }
    }

    pub fn advance(ms: u64, repeat: u32) -> StepFile {
        StepFile {
            advance_ms: Some(ms),
            repeat: (repeat > 1).then_some(repeat),
            ..StepFile::default()
        }
    }

    pub fn say(mut self, say: impl Into<String>) -> StepFile {
        self.say = Some(say.into());
        self
    }

    pub fn only(mut self, only: Option<Policy>) -> StepFile {
        self.only = only;
        self
    }
}

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    pub teaches: String,
    #[serde(default)]
    pub policy: Policies,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_every_ms: Option<u64>,
    /// Run the lab as this many replicas behind a balancer on one store (2 to 4); absent: one
    /// server. Replica steps (`kill_replica`, `partition`, …) need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u8>,
    /// With `replicas`: how long a tool call's runner holds its lease (100 to 600,000 ms;
    /// default 2,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// With `replicas`: how the balancer routes at the start (`round_robin`, the default, or
    /// `sticky`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<crate::lab::Routing>,
    /// A fault planted in the server's (or every replica's) task runners, as `check
    /// --mutate` found it (`"no-renewal"`). Absent: the server as it serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutate: Option<forkscope_core::work::Mutation>,
    /// 2026-07-28: `false`, the task client sends no task cursor with its reads (what it was
    /// told: `_meta["io.forkscope/seen"]`), as the SDKs' clients do. Absent: forkscope's client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_cursor: Option<bool>,
    /// What `start_tool_call` asks of `progress_task` (default 8 steps, 400 ms apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolArgs>,
    /// After the last step, how much lab time the run may move on to let
    /// what is still owed arrive — a client's next retry, a call's last steps — before the
    /// checker judges it, in 250 ms steps (0 to 600,000 ms; default 0: judged as the steps
    /// leave it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesce_ms: Option<u64>,
    /// Written as the settings that differ from the defaults: a file says what is special
    /// about it, the rest is what `run` assumes anyway.
    #[serde(
        default,
        serialize_with = "config_differences",
        skip_serializing_if = "is_default_config"
    )]
    pub config: LabConfig,
    #[serde(rename = "step")]
    pub steps: Vec<toml::Spanned<StepFile>>,
    #[serde(default)]
    pub expect: Expectations,
}

fn is_default_config(config: &LabConfig) -> bool {
    *config == LabConfig::default()
}

fn config_differences<S: Serializer>(config: &LabConfig, serializer: S) -> Result<S::Ok, S::Error> {
    let table = |c: &LabConfig| match toml::Value::try_from(c) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(_) => Err(serde::ser::Error::custom("a configuration is a table")),
        Err(e) => Err(serde::ser::Error::custom(e)),
    };
    let defaults = table(&LabConfig::default())?;
    let mut changed = toml::Table::new();
    for (key, value) in table(config)? {
        match (&value, defaults.get(&key)) {
            (toml::Value::Table(inner), Some(toml::Value::Table(default))) => {
                let differ: toml::Table = inner
                    .iter()
                    .filter(|(k, v)| default.get(*k) != Some(*v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !differ.is_empty() {
                    changed.insert(key, toml::Value::Table(differ));
                }
            }
            (value, default) if default != Some(value) => {
                changed.insert(key, value.clone());
            }
            _ => {}
        }
    }
    changed.serialize(serializer)
}

/// A scenario could not be written (a value TOML cannot hold).
#[derive(Debug, thiserror::Error)]
#[error("cannot write the scenario as TOML: {0}")]
pub struct WriteError(#[from] toml::ser::Error);

impl ScenarioFile {
    /// A file with these steps and nothing else said.
    pub fn new(name: String, teaches: String, policy: Policies) -> ScenarioFile {
        ScenarioFile {
            name,
            teaches,
            policy,
            background_every_ms: None,
            quiesce_ms: None,
            replicas: None,
            lease_ms: None,
            routing: None,
            mutate: None,
            task_cursor: None,
            tool: None,
            config: LabConfig::default(),
            steps: Vec::new(),
            expect: Expectations::default(),
        }
    }

    pub fn push(&mut self, step: StepFile) {
        self.steps.push(toml::Spanned::new(0..0, step));
    }

    /// The file's text, laid out as a person writes one: the scenario's own keys, then
    /// `[config]`, then each `[[step]]` with its values inline, then `[expect.<policy>]`.
    /// Every value is written by the `toml` crate.
    pub fn to_toml(&self) -> Result<String, WriteError> {
        let doc = toml::Table::try_from(self)?;
        let mut out = String::new();
        for (key, value) in &doc {
            if !is_section(key, value) {
                line(&mut out, key, value);
            }
        }
        for (key, value) in &doc {
            if !is_section(key, value) {
                continue;
            }
            match value {
                toml::Value::Array(items) => {
                    for item in items {
                        out.push_str(&format!("\n[[{}]]\n", bare(key)));
                        lines(&mut out, item);
                    }
                }
                // A table of tables (`expect`): one section each, values inline.
                toml::Value::Table(inner) if inner.values().all(toml::Value::is_table) => {
                    for (sub, table) in inner {
                        out.push_str(&format!("\n[{}.{}]\n", bare(key), bare(sub)));
                        lines(&mut out, table);
                    }
                }
                // A table with settings of its own (`config`): as TOML lays it out, nested
                // tables as `[config.retry]`.
                toml::Value::Table(inner) => {
                    let mut section = toml::Table::new();
                    section.insert(key.clone(), toml::Value::Table(inner.clone()));
                    out.push('\n');
                    out.push_str(&toml::to_string(&section)?);
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// What is written as a section of its own: the lab's settings, the expectations, and the
/// steps (an array of tables). Small tables (`tool`) stay inline.
fn is_section(key: &str, value: &toml::Value) -> bool {
    match value {
        toml::Value::Table(_) => key == "config" || key == "expect",
        toml::Value::Array(items) => !items.is_empty() && items.iter().all(toml::Value::is_table),
        _ => false,
    }
}

fn lines(out: &mut String, table: &toml::Value) {
    if let toml::Value::Table(table) = table {
        for (key, value) in table {
            line(out, key, value);
        }
    }
}

/// `key = value`, the value inline (`{ token = "current" }` for a table).
fn line(out: &mut String, key: &str, value: &toml::Value) {
    out.push_str(&format!("{} = {value}\n", bare(key)));
}

/// A key as TOML writes it: bare when it can be, else a quoted string.
fn bare(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        key.to_owned()
    } else {
        toml::Value::String(key.to_owned()).to_string()
    }
}
