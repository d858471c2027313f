//! `forkscope policies`: every policy the lab and `forkscope serve` run, and for each SDK policy
//! what it reproduces, rule by rule, and the SDK's own threads on it.

use super::outln;
use forkscope_core::Policy;
use forkscope_core::resume::sdk;
use std::process::ExitCode;

pub fn run() -> ExitCode {
    for pole in [Policy::Fenced, Policy::Naive] {
        outln!(
            "{:<17} {}",
            pole.name(),
            forkscope_core::resume::sdk::summary(pole)
        );
    }
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
        Policy::names()
    );
    ExitCode::SUCCESS
}
