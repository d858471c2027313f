//! The dashboard, the default command: its flags sit on `forkscope` itself.

use super::{IdentityArg, PolicyArg, out, outln};
use forkscope::lab::LabOptions;
use forkscope::scenario::{self, ScenarioError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DashboardArgs {
    /// The dashboard's starting policy (key n toggles it).
    #[arg(long, value_enum, default_value_t = PolicyArg::Fenced)]
    policy: PolicyArg,
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
}

#[derive(Debug, thiserror::Error)]
pub enum DashboardFailure {
    #[error(transparent)]
    Config(#[from] forkscope_core::ConfigError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Run(#[from] forkscope::tui::DashboardError),
}

/// Opens the dashboard; `asked`: by `forkscope dashboard`, not by default, so without a
/// terminal it is an error rather than the headless demonstration.
pub fn run(args: DashboardArgs, asked: bool) -> Result<ExitCode, DashboardFailure> {
    let mut options = LabOptions {
        policy: args.policy.into(),
        ..LabOptions::default()
    };
    if let Some(grace) = args.grace_ms {
        options.config.grace_ms = grace;
    }
    options.config.identity = args.identity.into();
    options.config.validate(options.policy)?;
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
