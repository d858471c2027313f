//! `forkscope check --protocol 2026-07-28`: the search of `forkscope_core::model::requests`
//! (one call of the tasks extension, its answer lost, its runner dead, its cancel and TTL
//! racing its result), reported as the other models are.

use forkscope_core::Policy;
use forkscope_core::model::requests::{self, Params, RequestStep, TracedStep};
use forkscope_core::model::{Limits, Progress};
use std::fmt::Write as _;

/// One policy's search of the model and how long it took.
pub type Checked = super::Checked<RequestStep, Params, TracedStep>;

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
            requests::explore(policy, params, limits, workers, elapsed, &mut on_progress)
        },
        |steps| requests::trace(policy, &params, steps),
    )
}

/// The verdict in this model's words: what holds is exactly once, not the 2025 stream rules.
fn verdict(c: &Checked) -> String {
    let e = &c.exploration;
    match (&e.counterexample, e.stopped) {
        (None, None) if e.rules.target.is_some() => format!(
            "no {} in {} states up to depth {}{}",
            e.rules.target.map(|k| k.as_str()).unwrap_or_default(),
            super::thousands(e.distinct),
            e.depth_reached,
            if e.exhausted {
                " (every reachable state)"
            } else {
                ""
            }
        ),
        (None, None) => format!(
            "no step applied twice, no second runner, no orphan task, no second end, no \
             stale read and no task whose end never came in {} states up to depth {}{}",
            super::thousands(e.distinct),
            e.depth_reached,
            if e.exhausted {
                " (every reachable state)"
            } else {
                ""
            }
        ),
        _ => e.verdict(),
    }
}

/// The report for people.
pub fn text(checked: &[Checked]) -> String {
    let mut out = String::new();
    for c in checked {
        let e = &c.exploration;
        let p = &e.rules;
        let _ = writeln!(out, "{} under 2026-07-28: {}", e.policy, verdict(c));
        let about = format!(
            "one intent (key {}) of {} steps, at most {} calls and {} runner crash{}{}",
            requests::KEY,
            requests::WORK.steps,
            p.calls,
            p.crashes,
            if p.crashes == 1 { "" } else { "es" },
            p.target
                .map(|kind| format!(", looking for {kind}"))
                .unwrap_or_default()
        );
        super::write_summary(&mut out, c, &about);
        if let Some(counterexample) = &e.counterexample {
            let _ = writeln!(out, "  shortest schedule, from a client about to call:");
            for (i, step) in c.trace.iter().enumerate() {
                super::write_step(&mut out, i + 1, &step.said, &step.happened, &step.anomalies);
            }
            let _ = writeln!(out, "  the checker: {}", counterexample.anomaly);
        }
    }
    out
}

/// The report for scripts: the other models' fields, with this model's params.
pub fn json(checked: &[Checked]) -> serde_json::Value {
    serde_json::Value::Array(
        checked
            .iter()
            .map(|c| {
                let mut report =
                    super::json_summary(c, ("params", serde_json::json!(c.exploration.rules)));
                report["verdict"] = serde_json::json!(verdict(c));
                report["protocol"] = serde_json::json!(forkscope_core::revision::MODERN);
                report
            })
            .collect(),
    )
}

/// Why a schedule of the model cannot be written as a scenario the lab plays.
#[derive(Debug, thiserror::Error)]
#[error(
    "its step \"{0}\" has no counterpart in a lab of one server yet (a runner's death and \
     adoption, time past a lease or a TTL, a poll or cancel of the lab's choosing)"
)]
pub struct NotPlayable(pub RequestStep);

/// A counterexample as a scenario of the lab's 2026-07-28 client, run under both policies: it
/// expects the anomaly under the policy that broke and a clean run under the other.
///
/// The mapping, one model step to scenario steps:
/// - the client's first call → `call_task`, after one `lose_answer` for each answer the
///   schedule loses (every loss comes before the answer that arrives: a client that has its
///   answer calls no more); a re-issue and an answer arriving → nothing (the client
///   re-issues, and reads its answer, on its own)
/// - a runner's step → `wait steps_applied` (the steps the model applied so far), under the
///   policy that broke; the other policy's runs take their own count
/// - any other step → [`NotPlayable`]
///
/// The run ends once the client has read its task's end.
pub fn scenario_file(
    checked: &Checked,
) -> Result<Option<crate::scenario::file::ScenarioFile>, NotPlayable> {
    use crate::lab::Action;
    use crate::scenario::file::{Count, Policies, ScenarioFile, StepFile, ToolArgs, WaitFor};
    let e = &checked.exploration;
    let Some(counterexample) = e.counterexample.as_ref() else {
        return Ok(None);
    };
    let kind = counterexample.anomaly.kind();
    let name = format!(
        "Shortest {kind} under 2026-07-28 and {} ({} steps, found by forkscope check)",
        e.policy,
        counterexample.steps.len()
    );
    let teaches = format!(
        "forkscope check --protocol 2026-07-28 explored every schedule of one call of the tasks \
         extension (its answer lost and re-issued, a runner dead and adopted, a cancel and the \
         TTL racing its result); this is a shortest one in which the {} policy shows {kind}. The checker, in the model: {}",
        e.policy, counterexample.anomaly
    );
    let mut file = ScenarioFile::new(name, teaches, Policies::Both);
    file.tool = Some(ToolArgs {
        steps: requests::WORK.steps,
        delay_ms: 300,
    });
    // A mutation replays only with the model's timing: steps longer than the lease.
    let mutated = !e.rules.renewal;
    if mutated {
        // A server never adopts a task its own runner runs: the livelock needs a read on a
        // second replica (round robin sends every other poll there).
        file.mutate = Some(forkscope_core::work::Mutation::NoRenewal);
        // Under its policy alone: the other's replicas would show their own hazards there.
        file.policy = Policies::from(e.policy);
        file.replicas = Some(2);
        file.lease_ms = Some(forkscope_core::tasks::LEASE_MS);
        file.tool = Some(ToolArgs {
            steps: requests::WORK.steps,
            delay_ms: requests::WORK.delay_ms,
        });
    }
    let steps = &counterexample.steps;
    let mut calls = 0;
    let mut applied = 0;
    for (i, (&step, told)) in steps.iter().zip(&checked.trace).enumerate() {
        let mut say = format!("{}. {}", i + 1, told.said);
        for anomaly in &told.anomalies {
            let _ = write!(say, " ✘ {anomaly}");
        }
        let mut written = Vec::new();
        match step {
            RequestStep::Call => {
                calls += 1;
                if calls == 1 {
                    let lost = steps
                        .iter()
                        .filter(|s| **s == RequestStep::LoseAnswer)
                        .count();
                    written.extend((0..lost).map(|_| StepFile::action(Action::LoseAnswer)));
                    written.push(StepFile::action(Action::CallTask));
                }
            }
            // Time passes in the lab on its own; the lab's runners renew as the model's do.
            RequestStep::Answer | RequestStep::LoseAnswer | RequestStep::Tick => {}
            RequestStep::Run(_) => {
                applied += told
                    .happened
                    .iter()
                    .filter(|h| h.contains("applies step"))
                    .count();
                written.push(
                    StepFile::wait(WaitFor::StepsApplied, applied as u64).only(Some(e.policy)),
                );
            }
            other => return Err(NotPlayable(other)),
        }
        let mut written = written.into_iter();
        file.push(written.next().unwrap_or_default().say(say));
        written.for_each(|step| file.push(step));
    }
    if mutated && kind == forkscope_core::AnomalyKind::TaskLost {
        // The broken policy's task never ends: its run goes on, polled, until the server has
        // adopted the task three times (a server whose runners renew never does, so the wait
        // fails and says so), then it is judged; the other's ends as the work does.
        let work = requests::WORK.steps * requests::WORK.delay_ms;
        let mut livelock = StepFile::wait(WaitFor::TasksAdopted, 3)
            .only(Some(e.policy))
            .say("the client polls on: every poll past the lease adopts the task, and no runner lives long enough to end it");
        livelock.timeout_ms = Some(3 * work);
        file.push(livelock);
    } else {
        file.push(
            StepFile::wait(WaitFor::TasksEnded, 1)
                .say("the client polls the task it learned until it ends"),
        );
    }
    file.expect
        .of(e.policy)
        .anomalies
        .insert(kind, Count::AtLeast(1));
    if !mutated {
        file.expect.of(e.policy.toggled()).clean = Some(true);
    }
    Ok(Some(file))
}
