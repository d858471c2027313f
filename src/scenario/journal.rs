//! "Save what I just did": the actions a person took in the dashboard (keys and knob turns),
//! stamped with lab time and with what the lab had reached when each was taken, written as a
//! scenario file that `forkscope run` replays on a scripted clock — so an experiment becomes a
//! test or a demo.
//!
//! The replay moves lab time as the live lab's moved between two actions, in small steps with
//! the lab settling in between (a client acts on what fell due, as in real time), and before
//! each action waits for what the live lab had reached: the client's applied count, and a
//! reconnect completed after a fault. Its expectations are the live verdict's: the same
//! anomaly kinds (or clean), the same typed rejections.

use crate::lab::{Action, LabOptions};
use forkscope_core::history::Counters;
use forkscope_core::{Policy, Verdict};
use std::fmt::Write as _;

/// Lab milliseconds one replayed time step moves: the client's first backoff, so a reconnect
/// falls due within a step, never a whole retry budget in one leap.
const TIME_STEP_MS: u64 = 250;

/// What the lab had reached when an action was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub at_ms: u64,
    /// Side effects the client had applied.
    pub applied: u64,
    /// The client held a stream with a cursor.
    pub connected: bool,
    /// The policy in force (before the action): what `n` did depends on it.
    pub policy: Policy,
}

#[derive(Clone, Debug)]
struct Entry {
    action: Action,
    /// One per lab, in the journal's policy order.
    observed: Vec<Observed>,
}

impl Entry {
    /// What the key did, in the first lab's terms (compare mode takes no `n`).
    fn describe(&self) -> &'static str {
        match self.observed.first() {
            Some(o) => self.action.describe_from(o.policy),
            None => self.action.describe(),
        }
    }
}

/// One lab's verdict when the journal is written, as the expectations of its policy.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub policy: Policy,
    pub verdict: Verdict,
    pub counters: Counters,
    pub tool_results: u64,
}

#[derive(Clone, Debug)]
pub struct Journal {
    options: LabOptions,
    policies: Vec<Policy>,
    entries: Vec<Entry>,
}

impl Journal {
    /// A journal of labs started with `options`, one per policy in `policies`.
    pub fn new(options: &LabOptions, policies: &[Policy]) -> Journal {
        Journal {
            options: options.clone(),
            policies: policies.to_vec(),
            entries: Vec::new(),
        }
    }

    /// Notes an action taken, with what the lab had reached; what only paces the live clock
    /// (pause, step, speed) is not a step of the story, and a restart begins a new journal.
    pub fn record(&mut self, action: Action, observed: Vec<Observed>) {
        if matches!(
            action,
            Action::TogglePause | Action::Step | Action::SpeedUp | Action::SpeedDown
        ) {
            return;
        }
        self.entries.push(Entry { action, observed });
    }

    pub fn actions(&self) -> usize {
        self.entries.len()
    }

    /// The scenario file: what was done, then what must hold under each policy.
    /// `saved`: what each lab had reached when the journal was written.
    pub fn to_toml(&self, saved: &[Observed], outcomes: &[Outcome], name: &str) -> String {
        let mut out = String::new();
        let keys: Vec<&str> = self.entries.iter().map(Entry::describe).collect();
        let _ = writeln!(out, "name = {}", quoted(name));
        let _ = writeln!(
            out,
            "teaches = {}",
            quoted(&format!(
                "Saved from the dashboard: {}. `forkscope run` replays it on a scripted clock.",
                if keys.is_empty() {
                    "nothing but time passing".to_owned()
                } else {
                    keys.join("; ")
                }
            ))
        );
        let policy = match self.policies.as_slice() {
            [one] => one.name(),
            _ => "both",
        };
        let _ = writeln!(out, "policy = \"{policy}\"");
        if let Some(rate) = self.options.background {
            let _ = writeln!(out, "background_every_ms = {}", rate.interval_ms());
        }
        let _ = writeln!(
            out,
            "tool = {{ steps = {}, delay_ms = {} }}",
            self.options.tool_steps, self.options.tool_delay_ms
        );
        let config = differences(&self.options.config);
        if !config.is_empty() {
            // Under a `config` key, so nested tables come out as `[config.retry]`.
            let mut doc = toml::Table::new();
            doc.insert("config".to_owned(), toml::Value::Table(config));
            let _ = write!(out, "\n{}", toml::to_string(&doc).unwrap_or_default());
        }

        // Per lab: what was last waited for, and whether a fault awaits its reconnect.
        let mut applied = vec![0; self.policies.len()];
        let mut faulted = vec![false; self.policies.len()];
        let mut at = 0;
        let only = |i: usize| match self.policies.as_slice() {
            [_] => String::new(),
            all => format!("\nonly = \"{}\"", all[i].name()),
        };
        let mut waits = |out: &mut String, observed: &[Observed], faulted: &mut [bool]| {
            for (i, o) in observed.iter().enumerate().take(self.policies.len()) {
                if o.connected && faulted[i] {
                    step(out, &format!("wait = \"connected\"{}", only(i)));
                    faulted[i] = false;
                }
                if o.applied > applied[i] {
                    step(
                        out,
                        &format!("wait = \"applied\"\ncount = {}{}", o.applied, only(i)),
                    );
                    applied[i] = o.applied;
                }
            }
        };
        for entry in &self.entries {
            let now = entry.observed.first().map_or(at, |o| o.at_ms);
            advance(&mut out, now.saturating_sub(at));
            at = at.max(now);
            waits(&mut out, &entry.observed, &mut faulted);
            // Narration: what was pressed, and when (the dashboard plays it with these words).
            let say = quoted(&format!(
                "at {:.1} s: {}",
                now as f64 / 1_000.0,
                entry.describe()
            ));
            match entry.action {
                Action::Tune(tuning) => {
                    step(&mut out, &format!("set = {{ {tuning} }}\nsay = {say}"));
                }
                action => {
                    // `"drop_connection"`, or an inline table for an action with a value
                    // (`{ add_latency = 50 }`).
                    let action = toml::Value::try_from(action)
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    step(&mut out, &format!("action = {action}\nsay = {say}"));
                }
            }
            if matches!(entry.action, Action::DropConnection | Action::Reset) {
                step(&mut out, "wait = \"reconnecting\"");
                faulted.iter_mut().for_each(|f| *f = true);
            }
        }
        let now = saved.first().map_or(at, |o| o.at_ms);
        advance(&mut out, now.saturating_sub(at));
        waits(&mut out, saved, &mut faulted);
        if self.entries.is_empty() && now == 0 {
            step(&mut out, "say = \"nothing happened\"");
        }
        for outcome in outcomes {
            expectations(&mut out, outcome);
        }
        out
    }
}

/// The settings of `config` that differ from the defaults (a file says what is special about
/// it; the rest is what `run` assumes anyway).
fn differences(config: &forkscope_core::LabConfig) -> toml::Table {
    let table = |c: &forkscope_core::LabConfig| match toml::Value::try_from(c) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    let defaults = table(&forkscope_core::LabConfig::default());
    let mut changed = toml::Table::new();
    for (key, value) in table(config) {
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
    changed
}

fn step(out: &mut String, body: &str) {
    let _ = write!(out, "\n[[step]]\n{body}\n");
}

/// Lab time moves `ms` in steps of at most [`TIME_STEP_MS`].
fn advance(out: &mut String, ms: u64) {
    let (steps, rest) = (ms / TIME_STEP_MS, ms % TIME_STEP_MS);
    if steps == 1 {
        step(out, &format!("advance_ms = {TIME_STEP_MS}"));
    } else if steps > 1 {
        step(
            out,
            &format!("advance_ms = {TIME_STEP_MS}\nrepeat = {steps}"),
        );
    }
    if rest > 0 {
        step(out, &format!("advance_ms = {rest}"));
    }
}

fn expectations(out: &mut String, o: &Outcome) {
    let _ = write!(out, "\n[expect.{}]\n", o.policy.name());
    if o.verdict.clean {
        let _ = writeln!(out, "clean = true");
    } else {
        let kinds: Vec<String> = o
            .verdict
            .counts
            .keys()
            .filter_map(|k| serde_json::to_value(k).ok()?.as_str().map(str::to_owned))
            .map(|k| format!("{k} = \">=1\""))
            .collect();
        let _ = writeln!(out, "anomalies = {{ {} }}", kinds.join(", "));
    }
    let rejected: Vec<String> = o
        .counters
        .resumes_rejected
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(reason, _)| format!("{} = \">=1\"", reason.as_str()))
        .collect();
    if !rejected.is_empty() {
        let _ = writeln!(out, "rejected = {{ {} }}", rejected.join(", "));
    }
    if o.tool_results > 0 {
        let _ = writeln!(out, "tool_results = \">=1\"");
    }
}

/// A TOML basic string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::format::{StepKind, parse};
    use forkscope_core::Tuning;
    use std::path::Path;

    #[test]
    fn each_n_is_named_by_what_it_did() {
        let mut j = Journal::new(&LabOptions::default(), &[Policy::Fenced]);
        let under = |at_ms, policy| {
            vec![Observed {
                at_ms,
                applied: 0,
                connected: true,
                policy,
            }]
        };
        j.record(Action::ToggleNaive, under(1_000, Policy::Fenced));
        j.record(Action::ToggleNaive, under(2_000, Policy::Naive));
        let text = j.to_toml(&under(3_000, Policy::Fenced), &[], "n twice");
        assert!(
            text.contains("switch to naive mode (reproduces the fork); switch back to fenced"),
            "{text}"
        );
        assert!(text.contains("at 2.0 s: switch back to fenced"), "{text}");
    }

    #[test]
    fn a_journal_writes_a_scenario_the_loader_reads_back() {
        let mut options = LabOptions::default();
        options.config.grace_ms = 3_000;
        options.config.retry.budget_ms = 9_000;
        let mut j = Journal::new(&options, &[Policy::Fenced]);
        let at = |at_ms, applied, connected| {
            vec![Observed {
                at_ms,
                applied,
                connected,
                policy: Policy::Fenced,
            }]
        };
        j.record(Action::EmitBackground, at(1_000, 1, true));
        j.record(Action::TogglePause, at(1_100, 2, true));
        j.record(Action::DropConnection, at(1_600, 2, true));
        j.record(Action::AddLatency(50), at(1_800, 2, true));
        j.record(
            Action::Tune(Tuning {
                grace_ms: Some(2_000),
                ..Tuning::default()
            }),
            at(2_000, 2, true),
        );
        let outcome = Outcome {
            policy: Policy::Fenced,
            verdict: Verdict {
                clean: true,
                counts: Default::default(),
                headline: String::new(),
                first: None,
            },
            counters: Counters::default(),
            tool_results: 0,
        };
        let text = j.to_toml(&at(2_600, 3, true), &[outcome], "saved \"experiment\"");
        let s = parse(&text, Path::new("saved.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.name, "saved \"experiment\"");
        assert_eq!(s.config, options.config, "{text}");
        assert!(
            !text.contains("history_capacity"),
            "defaults left out: {text}"
        );
        let kinds: Vec<&StepKind> = s.steps.iter().map(|s| &s.kind).collect();
        assert_eq!(
            kinds[0],
            &StepKind::Advance { ms: 250, repeat: 4 },
            "{text}"
        );
        assert!(
            kinds.iter().any(|k| matches!(k, StepKind::Action {
                action: Action::Tune(t),
                ..
            } if t.grace_ms == Some(2_000))),
            "{text}"
        );
        assert!(
            kinds.contains(&&StepKind::Action {
                action: Action::AddLatency(50),
                repeat: 1
            }),
            "{text}"
        );
        assert!(
            !kinds.iter().any(|k| matches!(
                k,
                StepKind::Action {
                    action: Action::TogglePause,
                    ..
                }
            )),
            "pacing keys are not steps"
        );
        assert_eq!(s.expect.fenced.unwrap().clean, Some(true));
    }
}
