//! Every step kind, and words of every shape, written by [`super::file::ScenarioFile::to_toml`] and read
//! back by the loader as what they were written from.

use super::file::*;
use crate::lab::ProbeToken;
use crate::lab::{Action, Probe};
use crate::scenario::format::{DEFAULT_WAIT_TIMEOUT_MS, Step, StepKind, parse};
use forkscope_core::{AnomalyKind, Policy, RejectReason, Tuning};
use proptest::prelude::*;
use std::path::Path;

const WAITS: [WaitFor; 16] = [
    WaitFor::Connected,
    WaitFor::Reconnecting,
    WaitFor::Applied,
    WaitFor::Decision,
    WaitFor::Emits,
    WaitFor::Orphaned,
    WaitFor::ToolProgress,
    WaitFor::ToolDone,
    WaitFor::Refused,
    WaitFor::Adopted,
    WaitFor::Answered,
    WaitFor::StepsApplied,
    WaitFor::TasksEnded,
    WaitFor::ReadsAgain,
    WaitFor::TasksAdopted,
    WaitFor::TasksSettled,
];

/// Fails to compile when a wait is added without being listed in [`WAITS`].
#[allow(dead_code)]
fn listed(what: WaitFor) {
    match what {
        WaitFor::Connected
        | WaitFor::Reconnecting
        | WaitFor::Applied
        | WaitFor::Decision
        | WaitFor::Emits
        | WaitFor::Orphaned
        | WaitFor::ToolProgress
        | WaitFor::ToolDone
        | WaitFor::Refused
        | WaitFor::Adopted
        | WaitFor::Answered
        | WaitFor::StepsApplied
        | WaitFor::TasksEnded
        | WaitFor::ReadsAgain
        | WaitFor::TasksAdopted
        | WaitFor::TasksSettled => {}
    }
}

/// One step of each kind and of each shape a kind takes.
fn every_step() -> Vec<Step> {
    let step = |kind| Step {
        kind,
        say: None,
        only: None,
        line: 0,
    };
    let mut steps = Vec::new();
    let b = forkscope_core::ReplicaId::new(1).unwrap();
    let actions = Action::ALL.into_iter().chain([
        Action::ToggleNaive,
        Action::SetPolicy(forkscope_core::Policy::Rmcp),
        Action::SetPolicy(forkscope_core::Policy::PythonSdkStore),
        Action::KillReplica(b),
        Action::ReviveReplica(b),
        Action::Partition(b),
        Action::Heal(b),
        Action::ToggleRouting,
        Action::RouteNext(b),
        Action::EmitOn(b),
        Action::RestartStore,
        Action::SnapshotStore,
        Action::RestoreStore,
        Action::AddLatency(50),
        Action::Tune(Tuning {
            grace_ms: Some(2_000),
            ..Tuning::default()
        }),
    ]);
    for action in actions {
        steps.push(step(StepKind::Action { action, repeat: 1 }));
        if !matches!(action, Action::Tune(_)) {
            steps.push(step(StepKind::Action { action, repeat: 3 }));
        }
    }
    for what in WAITS {
        for (count, timeout_ms) in [(1, DEFAULT_WAIT_TIMEOUT_MS), (0, 2_000), (44, 1)] {
            steps.push(step(StepKind::Wait {
                what,
                count,
                timeout_ms,
            }));
        }
    }
    steps.push(step(StepKind::Advance { ms: 250, repeat: 1 }));
    steps.push(step(StepKind::Advance { ms: 1, repeat: 4 }));
    for token in [
        ProbeToken::None,
        ProbeToken::Current,
        ProbeToken::Garbage,
        ProbeToken::OtherSession,
    ] {
        for last_event_id in [None, Some("current"), Some("s1-9"), Some("a \"b\" \\ c")] {
            steps.push(step(StepKind::Probe(Probe {
                token,
                last_event_id: last_event_id.map(str::to_owned),
            })));
        }
    }
    steps.push(Step {
        say: Some("only words".into()),
        ..step(StepKind::Say)
    });
    // Narration and a policy on a few, as files give them.
    for (i, s) in steps.iter_mut().enumerate() {
        if i % 3 == 0 {
            s.say.get_or_insert_with(|| format!("step {i}: \"quoted\""));
        }
        if i % 4 == 1 {
            s.only = Some(if i % 8 == 1 {
                Policy::Naive
            } else {
                Policy::Fenced
            });
        }
    }
    steps
}

/// Every variant of [`StepKind`] appears in [`every_step`].
#[test]
fn every_step_kind_is_covered() {
    let mut seen = [false; 5];
    for step in every_step() {
        let at = match step.kind {
            StepKind::Action { .. } => 0,
            StepKind::Wait { .. } => 1,
            StepKind::Advance { .. } => 2,
            StepKind::Probe(_) => 3,
            StepKind::Say => 4,
        };
        seen[at] = true;
    }
    assert_eq!(seen, [true; 5]);
}

fn scenario_with(name: &str, teaches: &str, steps: &[Step]) -> ScenarioFile {
    let mut file = ScenarioFile::new(
        name.to_owned(),
        teaches.to_owned(),
        Policies::from(Policy::Naive),
    );
    file.background_every_ms = Some(250);
    file.tool = Some(ToolArgs {
        steps: 3,
        delay_ms: 100,
    });
    file.config.grace_ms = 1_000;
    file.config.retry.budget_ms = 2_500;
    file.config.identity = forkscope_core::StreamIdentity::TokenHeader;
    file.replicas = Some(2);
    file.lease_ms = Some(900);
    file.routing = Some(crate::lab::Routing::Sticky);
    for step in steps {
        file.push(step.to_file());
    }
    let naive = file.expect.of(Policy::Naive);
    naive.anomalies.insert(AnomalyKind::Fork, Count::AtLeast(1));
    naive.anomalies.insert(AnomalyKind::Lost, Count::Exactly(3));
    naive
        .rejected
        .insert(RejectReason::MissingToken, Count::AtMost(2));
    naive.conditions_broken = Some(vec![1, 4]);
    naive.probe_statuses = Some(vec![200, 409]);
    let fenced = file.expect.of(Policy::Fenced);
    fenced.clean = Some(true);
    fenced.tool_results = Some(Count::Exactly(1));
    fenced.calls_adopted = Some(Count::AtLeast(1));
    fenced.applied = Some(Count::AtMost(9));
    file
}

/// Writes `file`, reads it back, and checks that it says what it was written from.
fn round_trip(file: &ScenarioFile, steps: &[Step]) {
    let text = file.to_toml().unwrap();
    let read = parse(&text, Path::new("written.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(read.name, file.name, "{text}");
    assert_eq!(read.teaches, file.teaches.trim(), "{text}");
    assert_eq!(read.policy, file.policy);
    assert_eq!(read.background_every_ms, file.background_every_ms);
    assert_eq!(read.tool, file.tool);
    let setup = read.replicas.as_ref();
    assert_eq!(setup.map(|r| r.count), file.replicas, "{text}");
    assert_eq!(setup.map(|r| r.lease_ms), file.lease_ms, "{text}");
    assert_eq!(setup.map(|r| r.routing), file.routing, "{text}");
    assert_eq!(read.config, file.config, "{text}");
    assert_eq!(read.expect, file.expect, "{text}");
    assert_eq!(read.steps.len(), steps.len());
    for (got, want) in read.steps.iter().zip(steps) {
        assert_eq!(
            (&got.kind, &got.say, got.only),
            (&want.kind, &want.say, want.only),
            "line {}:\n{text}",
            got.line
        );
    }
}

#[test]
fn every_step_kind_is_written_and_read_back_as_itself() {
    let steps = every_step();
    round_trip(
        &scenario_with("every step", "each kind, once", &steps),
        &steps,
    );
}

#[test]
fn a_written_file_reads_as_a_person_writes_one() {
    let steps = [
        Step {
            kind: StepKind::Probe(Probe {
                token: ProbeToken::Current,
                last_event_id: Some("current".into()),
            }),
            say: Some("a stale tab".into()),
            only: None,
            line: 0,
        },
        Step {
            kind: StepKind::Wait {
                what: WaitFor::Applied,
                count: 3,
                timeout_ms: DEFAULT_WAIT_TIMEOUT_MS,
            },
            say: None,
            only: Some(Policy::Fenced),
            line: 0,
        },
    ];
    let text = scenario_with("n", "t", &steps).to_toml().unwrap();
    for expected in [
        "name = \"n\"\n",
        "tool = { steps = 3, delay_ms = 100 }\n",
        "\n[config]\n",
        "\n[config.retry]\nbudget_ms = 2500\n",
        "\n[[step]]\nprobe = { token = \"current\", last_event_id = \"current\" }\nsay = \"a stale tab\"\n",
        "\n[[step]]\nwait = \"applied\"\ncount = 3\nonly = \"fenced\"\n",
        "\n[expect.naive]\n",
        "anomalies = { fork = \">=1\", lost = 3 }\n",
        "rejected = { missing_token = \"<=2\" }\n",
        "\n[expect.fenced]\nclean = true\n",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
}

#[test]
fn tricky_strings_survive_the_round_trip() {
    let steps: Vec<Step> = [
        "\"quoted\"",
        "back\\slash \\n not a newline",
        "line one\nline two\r\nthree",
        "tab\there, nul \u{0} and bell \u{7}",
        "'''triple''' \"\"\"quotes\"\"\"",
        "unicode: ✘ ≥ 🦀 ünïcödé",
        "",
    ]
    .iter()
    .map(|say| Step {
        kind: StepKind::Say,
        say: Some((*say).to_owned()),
        only: None,
        line: 0,
    })
    .collect();
    round_trip(
        &scenario_with("name with \"quotes\" and \\", "teaches\nover lines", &steps),
        &steps,
    );
}

proptest! {
    #[test]
    fn any_words_survive_the_round_trip(name in any::<String>(), say in any::<String>()) {
        let steps = [Step {
            kind: StepKind::Say,
            say: Some(say),
            only: None,
            line: 0,
        }];
        round_trip(&scenario_with(&name, "t", &steps), &steps);
    }
}
