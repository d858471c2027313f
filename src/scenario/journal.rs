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

use super::file::{Count, Expect, Policies, ScenarioFile, StepFile, ToolArgs, WaitFor, WriteError};
use super::format::{Step, StepKind};
use crate::lab::{Action, LabOptions};
use forkscope_core::history::Counters;
use forkscope_core::{Policy, Verdict};

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
    fn describe(&self) -> String {
        match self.observed.first() {
            Some(o) => self.action.describe_from(o.policy),
            None => self.action.describe().to_owned(),
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
    pub fn to_toml(
        &self,
        saved: &[Observed],
        outcomes: &[Outcome],
        name: &str,
    ) -> Result<String, WriteError> {
        self.to_file(saved, outcomes, name).to_toml()
    }

    fn to_file(&self, saved: &[Observed], outcomes: &[Outcome], name: &str) -> ScenarioFile {
        let keys: Vec<String> = self.entries.iter().map(Entry::describe).collect();
        let teaches = format!(
            "Saved from the dashboard: {}. `forkscope run` replays it on a scripted clock.",
            if keys.is_empty() {
                "nothing but time passing".to_owned()
            } else {
                keys.join("; ")
            }
        );
        let policy = match self.policies.as_slice() {
            [one] => Policies::from(*one),
            [Policy::Naive, Policy::Fenced] => Policies::Both,
            many => Policies::Listed(many.to_vec()),
        };
        let mut file = ScenarioFile::new(name.to_owned(), teaches, policy);
        file.background_every_ms = self.options.background.map(|rate| rate.interval_ms());
        file.tool = Some(ToolArgs {
            steps: self.options.tool_steps,
            delay_ms: self.options.tool_delay_ms,
        });
        file.config = self.options.config;
        file.mutate = self.options.mutate;
        file.task_cursor = (!self.options.task_cursor).then_some(false);
        // A lab of replicas replays as one (its store is chosen when it is run).
        if let Some(setup) = &self.options.replicas {
            file.replicas = Some(setup.count);
            file.lease_ms = Some(setup.lease_ms);
            file.routing = Some(setup.routing);
            file.mutate = file.mutate.or(setup.mutate);
        }

        // Per lab: what was last waited for, and whether a fault awaits its reconnect.
        let mut applied = vec![0; self.policies.len()];
        let mut faulted = vec![false; self.policies.len()];
        let mut at = 0;
        let only = |i: usize| match self.policies.as_slice() {
            [_] => None,
            all => Some(all[i]),
        };
        let mut waits = |file: &mut ScenarioFile, observed: &[Observed], faulted: &mut [bool]| {
            for (i, o) in observed.iter().enumerate().take(self.policies.len()) {
                if o.connected && faulted[i] {
                    file.push(StepFile::wait(WaitFor::Connected, 1).only(only(i)));
                    faulted[i] = false;
                }
                if o.applied > applied[i] {
                    file.push(StepFile::wait(WaitFor::Applied, o.applied).only(only(i)));
                    applied[i] = o.applied;
                }
            }
        };
        for entry in &self.entries {
            let now = entry.observed.first().map_or(at, |o| o.at_ms);
            advance(&mut file, now.saturating_sub(at));
            at = at.max(now);
            waits(&mut file, &entry.observed, &mut faulted);
            // Narration: what was pressed, and when (the dashboard plays it with these words).
            let say = format!("at {:.1} s: {}", now as f64 / 1_000.0, entry.describe());
            let step = Step {
                kind: StepKind::Action {
                    action: entry.action,
                    repeat: 1,
                },
                say: Some(say),
                only: None,
                line: 0,
            };
            file.push(step.to_file());
            if matches!(entry.action, Action::DropConnection | Action::Reset) {
                file.push(StepFile::wait(WaitFor::Reconnecting, 1));
                faulted.iter_mut().for_each(|f| *f = true);
            }
        }
        let now = saved.first().map_or(at, |o| o.at_ms);
        advance(&mut file, now.saturating_sub(at));
        waits(&mut file, saved, &mut faulted);
        if self.entries.is_empty() && now == 0 {
            file.push(StepFile::default().say("nothing happened"));
        }
        for outcome in outcomes {
            expectations(file.expect.of(outcome.policy), outcome);
        }
        file
    }
}

/// Lab time moves `ms` in steps of at most [`TIME_STEP_MS`].
fn advance(file: &mut ScenarioFile, ms: u64) {
    let (steps, rest) = (ms / TIME_STEP_MS, ms % TIME_STEP_MS);
    if steps > 0 {
        let repeat = u32::try_from(steps).unwrap_or(u32::MAX);
        file.push(StepFile::advance(TIME_STEP_MS, repeat));
    }
    if rest > 0 {
        file.push(StepFile::advance(rest, 1));
    }
}

/// The live verdict as expectations: the same anomaly kinds (or clean), the same typed
/// rejections, a tool result if one was applied.
fn expectations(expect: &mut Expect, o: &Outcome) {
    if o.verdict.clean {
        expect.clean = Some(true);
    } else {
        expect.anomalies = o
            .verdict
            .counts
            .keys()
            .map(|kind| (*kind, Count::AtLeast(1)))
            .collect();
    }
    expect.rejected = o
        .counters
        .resumes_rejected
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(reason, _)| (*reason, Count::AtLeast(1)))
        .collect();
    if o.tool_results > 0 {
        expect.tool_results = Some(Count::AtLeast(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::format::parse;
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
        let text = j
            .to_toml(&under(3_000, Policy::Fenced), &[], "n twice")
            .unwrap();
        assert!(
            text.contains("switch to naive mode (reproduces the fork); switch back to fenced"),
            "{text}"
        );
        assert!(text.contains("at 2.0 s: switch back to fenced"), "{text}");
    }

    /// `n` journals the policy it put in force, and three labs side by side are listed.
    #[test]
    fn a_policy_set_and_three_labs_replay_as_written() {
        let policies = [Policy::Naive, Policy::Rmcp, Policy::Fenced];
        let mut j = Journal::new(&LabOptions::default(), &policies);
        let under = |at_ms| {
            policies
                .iter()
                .map(|&policy| Observed {
                    at_ms,
                    applied: 0,
                    connected: true,
                    policy,
                })
                .collect::<Vec<_>>()
        };
        j.record(Action::SetPolicy(Policy::TsSdk), under(1_000));
        let text = j.to_toml(&under(2_000), &[], "sdk").unwrap();
        assert!(
            text.contains(r#"policy = ["naive", "rmcp", "fenced"]"#),
            "{text}"
        );
        assert!(
            text.contains(r#"action = { set_policy = "ts-sdk" }"#),
            "{text}"
        );
        let s = parse(&text, Path::new("saved.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.policy.list(), policies);
        assert!(s.steps.iter().any(|step| matches!(
            step.kind,
            StepKind::Action {
                action: Action::SetPolicy(Policy::TsSdk),
                ..
            }
        )));
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
                open: 0,
                counts: Default::default(),
                headline: String::new(),
                first: None,
                told: None,
            },
            counters: Counters::default(),
            tool_results: 0,
        };
        let text = j
            .to_toml(&at(2_600, 3, true), &[outcome], "saved \"experiment\"")
            .unwrap();
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
        assert_eq!(s.expect.get(Policy::Fenced).unwrap().clean, Some(true));
    }

    /// What was done in a lab of replicas (`L`, or `--replicas 2`) replays in one.
    #[test]
    fn a_journal_of_replicas_replays_on_replicas() {
        let setup = crate::lab::ReplicaSetup {
            routing: crate::lab::Routing::Sticky,
            ..crate::lab::ReplicaSetup::default()
        };
        let options = LabOptions {
            replicas: Some(setup.clone()),
            ..LabOptions::default()
        };
        let mut j = Journal::new(&options, &[Policy::Naive]);
        let at = |at_ms| {
            vec![Observed {
                at_ms,
                applied: 1,
                connected: true,
                policy: Policy::Naive,
            }]
        };
        let b = forkscope_core::ReplicaId::new(1).unwrap();
        j.record(Action::RouteNext(b), at(1_000));
        j.record(Action::KillReplica(b), at(2_000));
        let text = j.to_toml(&at(3_000), &[], "replicas").unwrap();
        let s = parse(&text, Path::new("saved.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.replicas, Some(setup), "{text}");
    }
}
