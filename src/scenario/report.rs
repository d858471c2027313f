//! Verdict tables for `forkscope run`: text for people, JSON for tools.

use super::{Run, Scenario};
use std::fmt::Write as _;

pub fn text(scenario: &Scenario, runs: &[Run]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} — {}", scenario.path.display(), scenario.name);
    let _ = writeln!(out, "  teaches: {}", scenario.teaches.replace('\n', " "));
    for run in runs {
        let verdict = match (&run.config_refused, &run.verdict) {
            (Some(_), _) => "config refused".to_owned(),
            (None, Some(v)) => v.summary(),
            (None, None) => "no verdict".to_owned(),
        };
        let passed = run.checks.iter().filter(|c| c.ok).count();
        // A run that checked nothing passed nothing: it says so instead of PASS.
        let (mark, tally) = match (run.ok(), run.checks.len()) {
            (true, 0) => (
                "----",
                format!("no expectations for {} in this file", run.policy.name()),
            ),
            (ok, n) => (
                if ok { "PASS" } else { "FAIL" },
                format!("{passed}/{n} expectations"),
            ),
        };
        let _ = writeln!(out, "  {mark}  {:<7} {:<58} {tally}", run.label(), verdict,);
        if let Some(error) = &run.error {
            let _ = writeln!(out, "        error: {error}");
        }
        for check in run.checks.iter().filter(|c| !c.ok) {
            let _ = writeln!(out, "        expected {}, got {}", check.what, check.got);
        }
        if !run.ok()
            && let Some(v) = &run.verdict
        {
            let _ = writeln!(out, "        {}", v.headline);
        }
    }
    out
}

pub fn json(scenario: &Scenario, runs: &[Run]) -> serde_json::Value {
    serde_json::json!({
        "file": scenario.path.display().to_string(),
        "name": scenario.name,
        "teaches": scenario.teaches,
        "ok": runs.iter().all(Run::ok),
        "runs": runs.iter().map(|run| serde_json::json!({
            "policy": run.policy.name(),
            "ended_under": run.ended_under.map(|p| p.name()),
            "ok": run.ok(),
            // False when the file states no expectation for this policy: `ok` then means
            // only that it played.
            "checked": !run.checks.is_empty(),
            "verdict": run.verdict,
            "counters": run.counters,
            "conditions_broken": run.conditions_broken,
            "probes": run.probes,
            "config_refused": run.config_refused,
            "error": run.error,
            "checks": run.checks,
            "transcript": run.transcript,
        })).collect::<Vec<_>>(),
    })
}
