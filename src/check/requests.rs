//! `forkscope check --protocol 2026-07-28`: the search of `forkscope_core::model::requests`
//! (one call of the tasks extension, its answer lost, its runner dead, its cancel and TTL
//! racing its result), reported as the other models are.

use forkscope_core::Policy;
use forkscope_core::model::requests::{self, Params, RequestStep, TracedStep};
use forkscope_core::model::{Limits, Progress};
use std::fmt::Write as _;
use std::time::Instant;

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
    let started = Instant::now();
    let exploration = requests::explore(
        policy,
        params,
        limits,
        super::workers(),
        &mut || started.elapsed(),
        &mut on_progress,
    );
    let elapsed = started.elapsed();
    let trace = exploration
        .counterexample
        .as_ref()
        .map(|c| requests::trace(policy, &params, &c.steps))
        .unwrap_or_default();
    Checked {
        exploration,
        elapsed,
        trace,
    }
}

/// The verdict in this model's words: what holds is exactly once, not the 2025 stream rules.
fn verdict(c: &Checked) -> String {
    let e = &c.exploration;
    match (&e.counterexample, e.stopped) {
        (None, None) => format!(
            "no step applied twice, no second runner, no orphan task, no second end and no \
             stale read in {} states up to depth {}{}",
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
