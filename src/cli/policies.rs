//! `forkscope policies`: every policy the lab and `forkscope serve` run, and for each SDK policy
//! what it reproduces, rule by rule, and the SDK's own threads on it.

use super::outln;
use forkscope_core::Policy;
use forkscope_core::resume::sdk;
use std::process::ExitCode;

pub fn run() -> ExitCode {
    outln!(
        "fenced            every resume proven (stream identity, no gap) or refused with a typed reason"
    );
    outln!(
        "naive             the seed incident: a fresh stream replayed from 0, the orphan keeps emitting"
    );
    for q in sdk::all() {
        outln!();
        outln!("{:<17} {}", q.policy.name(), q.sdk);
        outln!("{:<17} {}", "", q.summary);
        for (what, how) in q.rules() {
            outln!("{:<17}   {what}: {how}", "");
        }
        for cite in q.cites {
            outln!("{:<17}   see {} — {}", "", cite.url, cite.quirk);
        }
    }
    outln!();
    outln!(
        "`forkscope serve --policy <name>`, the dashboard's `--policy` and `n`, and scenario files take any of: {}",
        Policy::ALL.map(Policy::name).join(", ")
    );
    ExitCode::SUCCESS
}
