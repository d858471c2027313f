//! `forkscope check --replicas 2`: the search of `forkscope_core::model::replicas`, reported
//! as the single-server check reports, and a counterexample written as a scenario of the
//! replica lab (`replicas = 2`) that `forkscope run` replays over real sockets.

use crate::lab::Action;
use crate::scenario::file::{Count, Policies, ScenarioFile, StepFile, WaitFor, WriteError};
use forkscope_core::model::replicas::{self, Params, ReplicaStep, TracedStep};
use forkscope_core::model::{Limits, Progress};
use forkscope_core::{AnomalyKind, Policy};
use std::fmt::Write as _;

/// One policy's search of the replica lab and how long it took.
pub type Checked = super::Checked<ReplicaStep, Params, TracedStep>;

/// Runs the search for one policy, its time budget on this process's clock; `on_progress`
/// hears after every round of the search.
pub fn check(
    policy: Policy,
    params: Params,
    limits: Limits,
    mut on_progress: impl FnMut(&Progress),
) -> Checked {
    Checked::timed(
        |elapsed| {
            let workers = super::workers();
            replicas::explore(policy, params, limits, workers, elapsed, &mut on_progress)
        },
        |steps| replicas::trace(policy, &params, steps),
    )
}

/// The report for people.
pub fn text(checked: &[Checked]) -> String {
    let mut out = String::new();
    for c in checked {
        let e = &c.exploration;
        let p = &e.rules;
        let _ = writeln!(out, "{} across 2 replicas: {}", e.policy, e.verdict());
        let about = format!(
            "at most {} emits and {} reconnects, {} tool call, {} delivery",
            p.emits,
            p.reconnects,
            if p.call { "one" } else { "no" },
            super::delivery_name(p.delivery),
        );
        super::write_summary(&mut out, c, &about);
        if let Some(counterexample) = &e.counterexample {
            let _ = writeln!(
                out,
                "  shortest schedule, from a client connected through replica A:"
            );
            for (i, step) in c.trace.iter().enumerate() {
                super::write_step(&mut out, i + 1, &step.said, &step.happened, &step.anomalies);
            }
            let _ = writeln!(out, "  the checker: {}", counterexample.anomaly);
        }
    }
    out
}

/// The report for scripts: the single-server report's fields, with the replica lab's params.
pub fn json(checked: &[Checked]) -> serde_json::Value {
    serde_json::Value::Array(
        checked
            .iter()
            .map(|c| {
                let mut report =
                    super::json_summary(c, ("params", serde_json::json!(c.exploration.rules)));
                report["replicas"] = serde_json::json!(2);
                report
            })
            .collect(),
    )
}

/// The scenario steps that make the replica lab take one model step, followed by the waits
/// that keep the real run in step with the model. `told` is the step as the model took it
/// (what the lab showed after it), `before` what it showed before.
///
/// The mapping, one model step to scenario steps:
/// - the connection drops half-open → `drop_connection`, `wait reconnecting`
/// - the client reconnects through R → `route_next R`, `reconnect_now`, `wait decision`
///   (one GET, two when a tool call's stream is resumed too), `wait connected`
/// - R's emitter emits → `emit_on R`, and `wait emits` (events appended so far) when it landed
/// - R's delivery sends → nothing to press (a delivery sends on its own); `wait applied`
///   when the client applied it, else only said (it went down a half-open connection)
/// - the client calls the tool through R → `route_next R`, `start_tool_call`
/// - R commits the call's next step, the lease expires → nothing to press: the lab's runner
///   steps on its own timer and the store's clock passes the lease in real time; only said
/// - partition R → `partition R`; heal R → `heal R`
/// - kill R → `kill_replica R`, and `wait reconnecting` when the client was through R
fn scenario_steps(
    step: ReplicaStep,
    told: &TracedStep,
    before: replicas::Observed,
) -> Vec<StepFile> {
    let after = told.observed;
    let mut written = Vec::new();
    match step {
        ReplicaStep::Drop => {
            written.push(StepFile::action(Action::DropConnection));
            written.push(StepFile::wait(WaitFor::Reconnecting, 1));
        }
        ReplicaStep::Reconnect(r) => {
            written.push(StepFile::action(Action::RouteNext(r)));
            written.push(StepFile::action(Action::ReconnectNow));
            written.push(StepFile::wait(
                WaitFor::Decision,
                after.decisions - before.decisions,
            ));
            if after.connected {
                written.push(StepFile::wait(WaitFor::Connected, 1));
            }
        }
        ReplicaStep::Emit(r) => {
            written.push(StepFile::action(Action::EmitOn(r)));
            if after.appended > before.appended {
                written.push(StepFile::wait(WaitFor::Emits, after.appended));
            }
        }
        ReplicaStep::Send(_) => {}
        ReplicaStep::CallStart(r) => {
            written.push(StepFile::action(Action::RouteNext(r)));
            written.push(StepFile::action(Action::StartToolCall));
        }
        ReplicaStep::CallStep(_) | ReplicaStep::LeaseExpires => {}
        ReplicaStep::Partition(r) => written.push(StepFile::action(Action::Partition(r))),
        ReplicaStep::Heal(r) => written.push(StepFile::action(Action::Heal(r))),
        ReplicaStep::Kill(r) => {
            written.push(StepFile::action(Action::KillReplica(r)));
            if told.client_was_on == Some(r) {
                written.push(StepFile::wait(WaitFor::Reconnecting, 1));
            }
        }
    }
    // Under eager delivery any step may send what the client then applies.
    if after.applied > before.applied {
        written.push(StepFile::wait(WaitFor::Applied, after.applied));
    }
    written
}

/// A counterexample as a scenario of two replicas, run under both policies: it expects the
/// fork under naive and none under fenced.
pub fn scenario_file(checked: &Checked) -> Option<ScenarioFile> {
    let e = &checked.exploration;
    let counterexample = e.counterexample.as_ref()?;
    let kind = counterexample.anomaly.kind();
    let name = format!(
        "Shortest {kind} across two replicas under {} ({} steps, found by forkscope check)",
        e.policy,
        counterexample.steps.len()
    );
    let teaches = format!(
        "forkscope check --replicas 2 explored every interleaving of the replica lab's atomic \
         steps (compare-and-set, lease expiry, partition, heal, kill); this is a shortest \
         schedule in which the {} policy lets a {kind} happen across replicas. The checker, in \
         the model: {}",
        e.policy, counterexample.anomaly
    );
    let mut file = ScenarioFile::new(name, teaches, Policies::Both);
    file.replicas = Some(2);
    file.push(StepFile::wait(WaitFor::Connected, 1).say(
        "the client is connected through replica A to a fresh session: the state every \
         schedule starts from",
    ));
    // The other policy takes the same steps to different ends (a write refused, a delivery
    // ended): a wait that only one of them reaches is written for that one alone.
    let other = e.policy.toggled();
    let other_trace = replicas::trace(other, &e.rules, &counterexample.steps);
    let mut before = replicas::ReplicaLab::new(e.policy, 1).observed();
    let mut other_before = replicas::ReplicaLab::new(other, 1).observed();
    for (i, (told, other_told)) in checked.trace.iter().zip(&other_trace).enumerate() {
        let mut say = format!("{}. {}", i + 1, told.said);
        for fact in &told.happened {
            let _ = write!(say, "; {fact}");
        }
        for anomaly in &told.anomalies {
            let _ = write!(say, " ✘ {anomaly}");
        }
        let ours = scenario_steps(told.step, told, before);
        let theirs = scenario_steps(other_told.step, other_told, other_before);
        let mut written = ours
            .iter()
            .map(|step| {
                let only = (!theirs.contains(step)).then_some(e.policy);
                step.clone().only(only)
            })
            .chain(
                theirs
                    .iter()
                    .filter(|step| !ours.contains(step))
                    .map(|step| step.clone().only(Some(other))),
            )
            .collect::<Vec<_>>()
            .into_iter();
        file.push(written.next().unwrap_or_default().say(say));
        written.for_each(|step| file.push(step));
        before = told.observed;
        other_before = other_told.observed;
    }
    file.expect
        .of(Policy::Naive)
        .anomalies
        .insert(kind, Count::AtLeast(1));
    file.expect
        .of(Policy::Fenced)
        .anomalies
        .insert(AnomalyKind::Fork, Count::Exactly(0));
    Some(file)
}

/// [`scenario_file`] as TOML.
pub fn scenario_toml(checked: &Checked) -> Result<Option<String>, WriteError> {
    let Some(file) = scenario_file(checked) else {
        return Ok(None);
    };
    Ok(Some(format!(
        "# Written by forkscope from a schedule of `forkscope check --replicas 2`'s model.\n{}",
        file.to_toml()?
    )))
}
