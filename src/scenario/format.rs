//! A scenario as it plays (`scenarios/*.toml` read into steps), and its loader, which reports
//! every mistake with file, line and what was expected. The file's own types and its writer are
//! in [`super::file`]; the bounds a scenario is held to, in [`super::bounds`].

use super::bounds::{Cost, Totals};
use crate::lab::{Action, Probe};
use forkscope_core::{LabConfig, Policy};
use std::path::{Path, PathBuf};

pub use super::bounds::{
    DEFAULT_WAIT_TIMEOUT_MS, MAX_FILE_BYTES, MAX_LAB_TIME_MS, MAX_PLAYED_STEPS, MAX_REPEAT,
    MAX_WAIT_TIMEOUT_MS, OverBound,
};
pub use super::file::{
    Count, Expect, Expectations, Policies, ScenarioFile, StepFile, ToolArgs, WaitFor, WriteError,
};

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
            StepKind::Action {
                action: Action::SetPolicy(policy),
                ..
            } => format!("the {policy} policy is put in force"),
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
    /// Lab time the end of the run may move on before the verdict (see the file's
    /// `quiesce_ms`).
    pub quiesce_ms: u64,
    /// A lab of replicas (`replicas = 2` in the file), on `store` (chosen when it is run:
    /// `forkscope run --store`).
    pub replicas: Option<crate::lab::ReplicaSetup>,
    /// A fault planted in the server's task runners (`mutate` in the file).
    pub mutate: Option<forkscope_core::work::Mutation>,
    /// Whether the task client sends its task cursor (`task_cursor` in the file; default yes).
    pub task_cursor: bool,
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

pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    let shown = path.display().to_string();
    let invalid = |line: usize, message: String| ScenarioError::Invalid {
        path: shown.clone(),
        line,
        message,
    };
    let lines = Lines::new(text);
    let file: ScenarioFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| lines.line_of(s.start));
        invalid(line, e.message().trim().to_owned())
    })?;
    if file.steps.is_empty() {
        return Err(invalid(1, "a scenario needs at least one [[step]]".into()));
    }
    let mut steps = Vec::new();
    let mut totals = Totals::default();
    for (index, spanned) in file.steps.iter().enumerate() {
        let line = lines.line_of(spanned.span().start);
        let n = index + 1;
        let step = Step::read(spanned.get_ref(), line)
            .map_err(|message| invalid(line, format!("step {n}: {message}")))?;
        if let Err(bound) = totals.add(step.cost(), n) {
            return Err(ScenarioError::OverBound {
                path: shown.clone(),
                line,
                bound,
            });
        }
        steps.push(step);
    }
    for (policy, expect) in file.expect.iter() {
        if let Some(list) = &expect.conditions_broken
            && let Some(bad) = list.iter().find(|c| !(1..=5).contains(*c))
        {
            return Err(invalid(
                1,
                format!("expect.{policy}.conditions_broken: {bad} is not a condition (1–5)"),
            ));
        }
    }
    if let Some(tool) = file.tool {
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
    if let Some(ms) = file.quiesce_ms
        && ms > MAX_QUIESCE_MS
    {
        return Err(invalid(
            1,
            format!("quiesce_ms: at most {MAX_QUIESCE_MS} (ten minutes of lab time), not {ms}"),
        ));
    }
    let replicas = match (file.replicas, file.lease_ms, file.routing) {
        (None, None, None) => {
            if let Some(n) = steps.iter().position(|s| s.needs_replicas()) {
                return Err(invalid(
                    1,
                    format!(
                        "step {}: a replica step needs a lab of replicas (replicas = 2 at the top of the file)",
                        n + 1
                    ),
                ));
            }
            None
        }
        (None, _, _) => {
            return Err(invalid(
                1,
                "lease_ms and routing are for a lab of replicas: add replicas = 2".into(),
            ));
        }
        (Some(count), lease_ms, routing) => {
            let max = crate::lab::replicas::MAX_REPLICAS;
            if !(2..=max).contains(&count) {
                return Err(invalid(
                    1,
                    format!("replicas: a lab runs 2 to {max} replicas, not {count}"),
                ));
            }
            let lease_ms = lease_ms.unwrap_or(forkscope_core::replica::DEFAULT_LEASE_MS);
            if !(100..=600_000).contains(&lease_ms) {
                return Err(invalid(
                    1,
                    format!("lease_ms: 100 to 600000 milliseconds, not {lease_ms}"),
                ));
            }
            if let Some(n) = steps.iter().position(|s| s.names_replica_past(count)) {
                return Err(invalid(
                    1,
                    format!(
                        "step {}: names a replica past the {count} this lab runs",
                        n + 1
                    ),
                ));
            }
            Some(crate::lab::ReplicaSetup {
                count,
                lease_ms,
                routing: routing.unwrap_or_default(),
                mutate: file.mutate,
                ..crate::lab::ReplicaSetup::default()
            })
        }
    };
    Ok(Scenario {
        path: path.to_path_buf(),
        name: file.name,
        teaches: file.teaches.trim().to_owned(),
        policy: file.policy,
        config: file.config,
        background_every_ms: file.background_every_ms,
        tool: file.tool,
        quiesce_ms: file.quiesce_ms.unwrap_or(0),
        replicas,
        mutate: file.mutate,
        task_cursor: file.task_cursor.unwrap_or(true),
        steps,
        expect: file.expect,
    })
}

/// The most lab time a run's end may move on to let what is owed arrive.
pub const MAX_QUIESCE_MS: u64 = 10 * 60 * 1000;

/// A step's mistake, said after `step n: `.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepMistake {
    #[error(
        "expected exactly one of `action`, `set`, `wait`, `advance_ms`, `probe` (or only `say`)"
    )]
    NotOneKind,
    #[error("`repeat` goes with `action` or `advance_ms`")]
    StrayRepeat,
    #[error("`count` and `timeout_ms` go with `wait`")]
    StrayWaitField,
}

impl Step {
    fn action(&self) -> Option<Action> {
        match self.kind {
            StepKind::Action { action, .. } => Some(action),
            _ => None,
        }
    }

    /// A step only a lab of replicas can play.
    fn needs_replicas(&self) -> bool {
        self.action().is_some_and(Action::needs_replicas)
    }

    /// A replica step naming a replica past the first `count`.
    fn names_replica_past(&self, count: u8) -> bool {
        self.action()
            .and_then(Action::replica)
            .is_some_and(|r| r.index() >= usize::from(count))
    }

    /// What this step asks of the scenario's bounds.
    fn cost(&self) -> Cost {
        let (repeat, advance_ms, wait_timeout_ms) = match self.kind {
            StepKind::Action { repeat, .. } => (repeat, 0, None),
            StepKind::Advance { ms, repeat } => (repeat, ms, None),
            StepKind::Wait { timeout_ms, .. } => (1, 0, Some(timeout_ms)),
            StepKind::Probe(_) | StepKind::Say => (1, 0, None),
        };
        Cost {
            repeat,
            advance_ms,
            wait_timeout_ms,
            only: self.only,
        }
    }

    /// The step a `[[step]]` says, at `line`.
    pub fn read(step: &StepFile, line: usize) -> Result<Step, StepMistake> {
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
            _ => return Err(StepMistake::NotOneKind),
        };
        if step.repeat.is_some() && step.action.is_none() && step.advance_ms.is_none() {
            return Err(StepMistake::StrayRepeat);
        }
        if (step.count.is_some() || step.timeout_ms.is_some()) && step.wait.is_none() {
            return Err(StepMistake::StrayWaitField);
        }
        Ok(Step {
            kind,
            say: step.say.clone(),
            only: step.only,
            line,
        })
    }

    /// The `[[step]]` that reads back as this step: [`Step::read`]'s inverse. A knob turn is
    /// written as `set`; a count, timeout or repeat the loader assumes anyway is left out.
    pub fn to_file(&self) -> StepFile {
        let repeat = |n: u32| (n > 1).then_some(n);
        let written = match &self.kind {
            StepKind::Action {
                action: Action::Tune(tuning),
                ..
            } => StepFile {
                set: Some(*tuning),
                ..StepFile::default()
            },
            StepKind::Action { action, repeat: n } => StepFile {
                action: Some(*action),
                repeat: repeat(*n),
                ..StepFile::default()
            },
            StepKind::Wait {
                what,
                count,
                timeout_ms,
            } => StepFile {
                timeout_ms: (*timeout_ms != DEFAULT_WAIT_TIMEOUT_MS).then_some(*timeout_ms),
                ..StepFile::wait(*what, *count)
            },
            StepKind::Advance { ms, repeat: n } => StepFile::advance(*ms, *n),
            StepKind::Probe(probe) => StepFile {
                probe: Some(probe.clone()),
                ..StepFile::default()
            },
            // A step that only narrates is its words; without them there is nothing to write.
            StepKind::Say => StepFile {
                say: Some(String::new()),
                ..StepFile::default()
            },
        };
        StepFile {
            say: self.say.clone().or(written.say.clone()),
            only: self.only,
            ..written
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::AnomalyKind;

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
            s.expect.get(Policy::Naive).unwrap().anomalies[&AnomalyKind::Fork],
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
