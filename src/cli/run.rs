//! `forkscope run`: scenario files played headless against a real loopback lab.

use super::{Format, Which, out, outln, runtime, which_parser};
use forkscope::scenario::{self, ScenarioError};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario files (scenarios/*.toml).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Override the policies a file names.
    #[arg(long, value_parser = which_parser())]
    policy: Option<Which>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Where a file's replicas (`replicas = 2`) share state: `memory` (default) or
    /// `redis://HOST:PORT[/DB]`, a running Redis. Files of one server ignore it.
    #[arg(long, value_name = "memory|redis://HOST:PORT[/DB]", value_parser = super::parse_store)]
    store: Option<forkscope::lab::StoreChoice>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// Exit 0 when every expectation held, 1 when one failed.
pub fn run(args: RunArgs) -> Result<ExitCode, RunError> {
    // Every file is read and checked before anything runs: bad input fails fast, with exit 2.
    let mut scenarios = args
        .files
        .iter()
        .map(|file| scenario::load(file))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(store) = &args.store {
        for setup in scenarios.iter_mut().filter_map(|s| s.replicas.as_mut()) {
            setup.store = store.clone();
        }
    }
    let all_ok = runtime().block_on(async {
        let mut all_ok = true;
        let mut reports = Vec::new();
        for s in &scenarios {
            let policies = args.policy.map_or_else(|| s.policy.list(), Which::policies);
            let mut runs = Vec::new();
            for p in policies {
                runs.push(scenario::play(s, p).await);
            }
            all_ok &= runs.iter().all(scenario::Run::ok);
            match args.format {
                Format::Text => out!("{}", scenario::report::text(s, &runs)),
                Format::Json => reports.push(scenario::report::json(s, &runs)),
            }
        }
        if let Format::Json = args.format {
            outln!(
                "{}",
                serde_json::to_string_pretty(&reports).unwrap_or_default()
            );
        }
        all_ok
    });
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
