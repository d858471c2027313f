//! `forkscope incident`: the seed incident over real loopback HTTP, headless.

use super::{Which, outln, runtime, which_parser};
use forkscope::incident::{self, IncidentError};
use forkscope_core::Policy;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct IncidentArgs {
    #[arg(long, value_parser = which_parser(), default_value = "both")]
    policy: Which,
}

#[derive(Debug, thiserror::Error)]
#[error("the {policy} incident did not complete: {source}")]
pub struct IncidentFailure {
    policy: Policy,
    source: IncidentError,
}

pub fn run(args: IncidentArgs) -> Result<ExitCode, IncidentFailure> {
    runtime().block_on(async {
        for policy in args.policy.policies() {
            let report = incident::run(policy)
                .await
                .map_err(|source| IncidentFailure { policy, source })?;
            outln!("{}", policy.name().to_uppercase());
            for line in &report.transcript {
                outln!("  {line}");
            }
            outln!("  verdict: {}", report.verdict.summary());
            outln!("           {}", report.verdict.headline);
        }
        Ok(ExitCode::SUCCESS)
    })
}
