//! The dashboard, the default command: its flags sit on `forkscope` itself.

use super::{IdentityArg, RoutingArg, out, outln, parse_store, policy_parser};
use forkscope::lab::{LabOptions, ReplicaSetup, StoreChoice};
use forkscope::scenario::{self, ScenarioError};
use forkscope_core::Policy;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DashboardArgs {
    /// The dashboard's starting policy (key n toggles naive ⇄ fenced; o picks any).
    #[arg(long, value_parser = policy_parser(), default_value = "fenced")]
    policy: Policy,
    /// Start in compare mode with these two or three policies side by side, left to right
    /// (`naive,rmcp,fenced`); o picks the middle one's policy. Without it, m compares naive and fenced.
    #[arg(long, value_name = "A,B[,C]", value_parser = parse_compare, conflicts_with = "scenario")]
    compare: Option<Comparison>,
    /// Grace window for orphaned streams, in milliseconds (the dashboard's lab).
    #[arg(long)]
    grace_ms: Option<u64>,
    /// Where the fenced lab reads stream identity from: `event-id` (ids carry the stream's
    /// token) or `token-header` (the seed's model: a stripped token header is refused).
    #[arg(long, value_enum, default_value_t = IdentityArg::EventId)]
    identity: IdentityArg,
    /// Play this scenario in the dashboard (space pauses it, s steps it, p picks another).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Record the dashboard to an asciicast v2 file (playable with asciinema).
    #[arg(long, value_name = "FILE.cast")]
    record: Option<PathBuf>,
    /// Pause the lab at the first violation, with its evidence card up (for presenters).
    #[arg(long)]
    pause_at_violation: bool,
    /// Presenter mode: fewer panes, wider lanes, a bigger verdict (f toggles it).
    #[arg(long)]
    present: bool,
    /// Predict, then reveal: the verdict stays hidden until V (so a room can vote first).
    #[arg(long)]
    predict: bool,
    /// Run the server as this many replicas (2-4) behind a load balancer on one store, to see
    /// the fork across replicas (keys A-D choose a replica; K kills it or starts it again, I
    /// partitions it from the store or heals it, N sends the next request to it, G switches
    /// routing; L in the dashboard switches between replicas and one server).
    #[arg(long, value_parser = clap::value_parser!(u8).range(2..=4))]
    replicas: Option<u8>,
    /// With --replicas: where the replicas share state, `memory` (default) or
    /// `redis://HOST:PORT[/DB]` (a running Redis).
    #[arg(long, requires = "replicas", value_name = "memory|redis://HOST:PORT[/DB]", value_parser = parse_store)]
    store: Option<StoreChoice>,
    /// With --replicas: how long a tool call's runner holds its lease without a step, in
    /// milliseconds (100-600000; default 2000).
    #[arg(long, requires = "replicas", value_parser = clap::value_parser!(u64).range(100..=600_000))]
    lease_ms: Option<u64>,
    /// With --replicas: how the balancer routes at the start (G switches it).
    #[arg(long, requires = "replicas", value_enum, default_value_t = RoutingArg::RoundRobin)]
    routing: RoutingArg,
    /// The revisions the lab's server speaks: `both` (default: the 2025-11-25 client and the
    /// 2026-07-28 one side by side), `2025-11-25` (X is refused), or `2026-07-28` (no session
    /// and no stream: the lab is X's tasks, each on its own lane). One server only: replicas
    /// speak both (X calls a task there too).
    #[arg(long, default_value = "both", conflicts_with = "replicas")]
    protocol: forkscope_core::revision::Protocols,
}

/// The policies `--compare` names, checked: two or three, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison(Vec<Policy>);

/// Why `--compare` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompareError {
    #[error(transparent)]
    Unknown(#[from] forkscope_core::UnknownPolicy),
    #[error("`{0}` is named twice: each lab runs a different policy")]
    Twice(Policy),
    #[error("compare mode runs 2 or 3 policies side by side, not {0}")]
    Count(usize),
    #[error("--replicas runs naive or fenced, not {0}: compare an SDK on one server")]
    SdkOnReplicas(Policy),
}

fn parse_compare(text: &str) -> Result<Comparison, CompareError> {
    let mut list = Vec::new();
    for name in text.split(',').map(str::trim) {
        let policy: Policy = name.parse()?;
        if list.contains(&policy) {
            return Err(CompareError::Twice(policy));
        }
        list.push(policy);
    }
    match list.len() {
        2 | 3 => Ok(Comparison(list)),
        n => Err(CompareError::Count(n)),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DashboardFailure {
    #[error(transparent)]
    Config(#[from] forkscope_core::ConfigError),
    #[error(transparent)]
    Compare(#[from] CompareError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Run(#[from] forkscope::tui::DashboardError),
}

/// Opens the dashboard; `asked`: by `forkscope dashboard`, not by default, so without a
/// terminal it is an error rather than the headless demonstration.
pub fn run(args: DashboardArgs, asked: bool) -> Result<ExitCode, DashboardFailure> {
    let mut options = LabOptions {
        policy: args.policy,
        protocols: args.protocol,
        ..LabOptions::default()
    };
    if let Some(grace) = args.grace_ms {
        options.config.grace_ms = grace;
    }
    options.config.identity = args.identity.into();
    options.config.validate(options.policy)?;
    let compare = args.compare.map(|Comparison(list)| list);
    for policy in compare.iter().flatten() {
        options.config.validate(*policy)?;
        if args.replicas.is_some()
            && forkscope_core::replica::ReplicaPolicy::try_from(*policy).is_err()
        {
            return Err(CompareError::SdkOnReplicas(*policy).into());
        }
    }
    options.replicas = args.replicas.map(|count| ReplicaSetup {
        count,
        store: args.store.clone().unwrap_or_default(),
        lease_ms: args
            .lease_ms
            .unwrap_or(forkscope_core::replica::DEFAULT_LEASE_MS),
        routing: args.routing.into(),
        mutate: None,
    });
    let scenario = args.scenario.as_deref().map(scenario::load).transpose()?;
    let scenario_dir = args
        .scenario
        .as_deref()
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("scenarios"), Path::to_path_buf);
    if !forkscope::tui::has_terminal() && !asked {
        // `cargo run` without a terminal (a pipe, CI): show the headless story instead.
        eprintln!(
            "forkscope: no terminal for the dashboard; here is the headless demonstration (forkscope demo)"
        );
        out!("{}", forkscope::demo::run());
        return Ok(ExitCode::SUCCESS);
    }
    let start = forkscope::tui::Start {
        options,
        scenario,
        scenario_dir,
        save_dir: PathBuf::new(),
        recorder: None,
        pause_at_violation: args.pause_at_violation,
        present: args.present,
        predict: args.predict,
        run_budget: None,
        compare,
    };
    let recorded = args.record.clone();
    forkscope::tui::run(start, args.record)?;
    // Say where the recording went: the terminal was the dashboard's until now.
    if let Some(path) = recorded {
        let path = std::path::absolute(&path).unwrap_or(path);
        outln!(
            "forkscope: recorded {} (asciicast v2: asciinema play {})",
            path.display(),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_takes_two_or_three_known_policies_once_each() {
        assert_eq!(
            parse_compare("naive,rmcp,fenced"),
            Ok(Comparison(vec![
                Policy::Naive,
                Policy::Rmcp,
                Policy::Fenced
            ]))
        );
        assert_eq!(
            parse_compare("ts-sdk, fenced"),
            Ok(Comparison(vec![Policy::TsSdk, Policy::Fenced]))
        );
        assert_eq!(
            parse_compare("naive,grpc"),
            Err(CompareError::Unknown(forkscope_core::UnknownPolicy(
                "grpc".into()
            )))
        );
        assert_eq!(
            parse_compare("naive,naive"),
            Err(CompareError::Twice(Policy::Naive))
        );
        assert_eq!(parse_compare("naive"), Err(CompareError::Count(1)));
        assert_eq!(
            parse_compare("naive,rmcp,ts-sdk,fenced"),
            Err(CompareError::Count(4))
        );
        let unknown = CompareError::Unknown(forkscope_core::UnknownPolicy("x".into())).to_string();
        assert!(unknown.contains("fenced, naive, ts-sdk"), "{unknown}");
    }
}
