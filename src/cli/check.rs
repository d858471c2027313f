//! `forkscope check`: the exhaustive search, its report, and a counterexample written as a
//! scenario.

use super::{Format, IdentityArg, Which, out, outln};
use forkscope::check::{self, ScheduleError};
use forkscope::new_file::{self, NewFileError};
use forkscope_core::model::{self, ByteSize, Delivery};
use forkscope_core::{AnomalyKind, ConfigError, Policy};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[arg(long, value_enum, default_value_t = Which::Both)]
    policy: Which,
    /// Steps after the client's first connection (1-40).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=40))]
    depth: u16,
    /// Streams a session may mint (1-16); schedules that would mint more are not followed.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    streams: u32,
    /// Stop at this many distinct states (the report says to which depth every schedule
    /// holds; exit 3).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_states: Option<u64>,
    /// Memory the search may hold, estimated (about 7 KiB per state waiting to be
    /// explored): bytes, or a number with KiB, MiB, GiB or TiB (512MiB, 4GiB). When it
    /// runs out the search stops after the last depth it explored in full, says what it
    /// proved, and exits 3.
    #[arg(long, default_value_t = model::DEFAULT_MEMORY_BUDGET, value_name = "SIZE")]
    memory_budget: ByteSize,
    /// Where the fenced policy reads stream identity from (see the dashboard's option).
    #[arg(long, value_enum, default_value_t = IdentityArg::EventId)]
    identity: IdentityArg,
    /// Leave out the foreign GETs (a stale tab, a stock client, a stranger): only the lab
    /// client's own steps, the network's faults and the timers, as in the seed incident.
    #[arg(long)]
    client_only: bool,
    /// How events reach the client: `interleaved` (any step may come between a write and
    /// its arrival) or `eager` (at once, as over loopback). Default: interleaved, or eager
    /// with --emit-scenario, so the scenario replays over real sockets as it was found.
    #[arg(long, value_enum)]
    delivery: Option<DeliveryArg>,
    /// Look for a schedule that ends in this anomaly (fork, duplicate, gap,
    /// non_monotonic_cursor, lost, cursor_drift), exploring past the others.
    #[arg(long, value_parser = parse_anomaly)]
    anomaly: Option<AnomalyKind>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the counterexample as a scenario file that `forkscope run` replays over
    /// real sockets (refuses to overwrite a file).
    #[arg(long, value_name = "FILE.toml")]
    emit_scenario: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DeliveryArg {
    Interleaved,
    Eager,
}

/// `--anomaly` that names none.
#[derive(Debug, thiserror::Error)]
#[error("{given:?} is not an anomaly; one of: {}", known())]
pub struct UnknownAnomaly {
    given: String,
}

fn known() -> String {
    <AnomalyKind as strum::VariantNames>::VARIANTS.join(", ")
}

fn parse_anomaly(s: &str) -> Result<AnomalyKind, UnknownAnomaly> {
    s.replace('-', "_").parse().map_err(|_| UnknownAnomaly {
        given: s.to_owned(),
    })
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{} already exists; not overwriting it (choose another file)", .0.display())]
    WouldOverwrite(PathBuf),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot write {}: {source}", path.display())]
    Schedule {
        path: PathBuf,
        source: ScheduleError,
    },
    #[error(transparent)]
    Write(#[from] NewFileError),
}

/// Exit 0: no counterexample; 1: one found; 3: none, but a limit stopped the search short.
pub fn run(args: CheckArgs) -> Result<ExitCode, CheckError> {
    let delivery = match (args.delivery, &args.emit_scenario) {
        (Some(DeliveryArg::Interleaved), _) => Delivery::Interleaved,
        (Some(DeliveryArg::Eager), _) | (None, Some(_)) => Delivery::Eager,
        (None, None) => Delivery::Interleaved,
    };
    let bounds = model::Bounds {
        depth: usize::from(args.depth),
        streams: args.streams,
        max_states: args.max_states,
        memory_budget: args.memory_budget,
        probes: !args.client_only,
        delivery,
        target: args.anomaly,
    };
    let emit_scenario = args.emit_scenario.as_deref();
    // Refuse before searching: the file is the point of the run.
    if let Some(path) = emit_scenario
        && path.exists()
    {
        return Err(CheckError::WouldOverwrite(path.to_path_buf()));
    }
    // Fenced first: the proof, then the counterexample.
    let policies = match args.policy {
        Which::Fenced => vec![Policy::Fenced],
        Which::Naive => vec![Policy::Naive],
        Which::Both => vec![Policy::Fenced, Policy::Naive],
    };
    let config = check::config(args.identity.into());
    // Progress on a terminal only: a log or a pipe gets the report alone.
    let show_progress =
        matches!(args.format, Format::Text) && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut checked = Vec::new();
    for policy in policies {
        let progress = |level: &model::Level| {
            if show_progress {
                eprint!(
                    "\r{policy}: depth {} — {} states…   ",
                    level.depth, level.distinct
                );
            }
        };
        checked.push(check::check(config, policy, bounds, progress)?);
        if show_progress {
            eprint!("\r\x1b[K");
        }
    }
    match args.format {
        Format::Text => out!("{}", check::text(&checked)),
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&check::json(&checked)).unwrap_or_default()
        ),
    }
    let found = checked.iter().find_map(|c| {
        c.exploration
            .counterexample
            .as_ref()
            .map(|counterexample| (c, counterexample))
    });
    // A search a limit cut short proved less than was asked: not a pass.
    let unfinished = if checked.iter().any(|c| c.exploration.stopped.is_some()) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    };
    if let Some(path) = emit_scenario {
        let Some((found, counterexample)) = found else {
            eprintln!(
                "forkscope check: no counterexample, so no scenario written to {}",
                path.display()
            );
            return Ok(unfinished);
        };
        write_scenario(path, config, found, counterexample)?;
        eprintln!(
            "forkscope check: wrote {} — replay it over real sockets with `forkscope run {}`",
            path.display(),
            path.display()
        );
    }
    Ok(if found.is_some() {
        ExitCode::FAILURE
    } else {
        unfinished
    })
}

fn write_scenario(
    path: &Path,
    config: forkscope_core::LabConfig,
    found: &check::Checked,
    counterexample: &model::Counterexample,
) -> Result<(), CheckError> {
    let text = check::scenario_toml(
        config,
        found.exploration.policy,
        counterexample,
        &found.trace,
    )
    .map_err(|source| CheckError::Schedule {
        path: path.to_path_buf(),
        source,
    })?;
    new_file::write_new(path, &text)?;
    Ok(())
}
