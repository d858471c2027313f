//! `forkscope check`: the exhaustive search, its report, and a counterexample written as a
//! scenario.

use super::{Format, IdentityArg, Which, out, outln, which_parser};
use forkscope::check::{self, ScheduleError};
use forkscope::new_file::{self, NewFileError};
use forkscope_core::model::{self, ByteSize, Delivery};
use forkscope_core::replica::ReplicaPolicy;
use forkscope_core::{AnomalyKind, ConfigError, Policy};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[arg(long, value_parser = which_parser(), default_value = "both")]
    policy: Which,
    /// Steps after the client's first connection (1-40). Default: 8; with --replicas 2, 16
    /// (fenced completes it in about 12 s in release on a 2-core machine).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=40))]
    depth: Option<u16>,
    /// Explore a lab of this many replicas on a shared store (only 2): the store's atomic
    /// steps (compare-and-set, lease expiry, partition, heal, kill) instead of one server.
    /// Takes --policy, --depth, the limits, --delivery, --format and --write.
    #[arg(long, value_name = "N")]
    replicas: Option<u8>,
    /// Which revision's model to explore: 2025-11-25 (sessions and stream resumption, the
    /// default) or 2026-07-28 (no resumption: one call of the tasks extension, its answer lost
    /// and re-issued, its runner dead and adopted, its steps outlasting the lease, its cancel
    /// and TTL racing its result). 2026-07-28 takes --policy naive or fenced, --depth (default
    /// 40: every reachable state), the limits, --anomaly, --format and --write.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Legacy)]
    protocol: ProtocolArg,
    /// Seconds each policy's search may run (1-86400): it stops at the first round past
    /// them, says to which depth every schedule holds, and exits 3.
    #[arg(long, default_value_t = model::DEFAULT_TIME_BUDGET_SECS, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    time_budget: u64,
    /// Streams a session may mint (1-16); schedules that would mint more are not followed.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    streams: u32,
    /// Stop at this many distinct states (the report says to which depth every schedule
    /// holds; exit 3).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_states: Option<u64>,
    /// Memory the search may hold, estimated (about 80 bytes per state found, and 4 MiB
    /// besides): bytes, or a number with KiB, MiB, GiB or TiB (512MiB, 4GiB). When it
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
    /// Look for a schedule that ends in this anomaly (fork, duplicate, reused_id, gap,
    /// non_monotonic_cursor, lost, call_lost, cursor_drift, undelivered), exploring past the
    /// others. A run may end wherever nothing more happens on its own, and what it still owes
    /// is judged then: lost, or undelivered when the client was told. With --protocol
    /// 2026-07-28: effect_twice, two_runners, orphan_task, terminal_twice or stale_read.
    #[arg(long, value_parser = parse_anomaly)]
    anomaly: Option<AnomalyKind>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the counterexample as a scenario file that `forkscope run` replays over
    /// real sockets (refuses to overwrite a file).
    #[arg(long, visible_alias = "write", value_name = "FILE.toml")]
    emit_scenario: Option<PathBuf>,
    /// With --protocol 2026-07-28: plant a fault in the model's task runners, to see the
    /// fence without one of its rules: `no-renewal` (runners renew their lease only with their
    /// steps). The counterexample, written with --emit-scenario, plants the same fault in the
    /// lab's server (`mutate` in the file) and replays it over real sockets.
    #[arg(long, value_enum, value_name = "MUTATION")]
    mutate: Option<MutateArg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MutateArg {
    NoRenewal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProtocolArg {
    #[value(name = "2025-11-25")]
    Legacy,
    #[value(name = "2026-07-28")]
    Modern,
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
    #[error(
        "--replicas {0}: the replica model runs exactly 2 replicas (the smallest lab a fork across replicas needs)"
    )]
    Replicas(u8),
    #[error("--replicas 2 does not take {0} (it explores the replica lab's own steps)")]
    NotWithReplicas(&'static str),
    #[error(
        "--replicas 2 --policy {0}: replicas run naive or fenced (the SDK policies model one server with sticky sessions)"
    )]
    SdkWithReplicas(Policy),
    #[error(
        "--anomaly {kind}: the {protocol} model cannot reach it; {protocol} looks for {}",
        reachable(protocol)
    )]
    OtherRevisionsAnomaly {
        kind: AnomalyKind,
        protocol: &'static str,
    },
    #[error(
        "--protocol 2026-07-28 does not take {0} (it explores one call of the tasks extension)"
    )]
    NotWithModern(&'static str),
    #[error("--mutate plants a fault in the task runners: it needs --protocol 2026-07-28")]
    MutateNeedsModern,
    #[error(
        "--protocol 2026-07-28 --policy {0}: the 2026-07-28 model runs naive or fenced (the SDKs' 2026 quirks are not modelled yet)"
    )]
    SdkWithModern(Policy),
    #[error("cannot write {} as a scenario: {source}", path.display())]
    ModernScenario {
        path: PathBuf,
        source: forkscope::check::requests::NotPlayable,
    },
    #[error("cannot write {}: {source}", path.display())]
    ReplicaScenario {
        path: PathBuf,
        source: forkscope::scenario::file::WriteError,
    },
}

/// Exit 0: no counterexample; 1: one found; 3: none, but a limit (time, memory, states)
/// stopped the search short. The same with `--replicas 2`.
pub fn run(args: CheckArgs) -> Result<ExitCode, CheckError> {
    let modern = args.protocol == ProtocolArg::Modern;
    if let Some(kind) = args.anomaly
        && !reachable_in(kind, modern)
    {
        let protocol = if modern { "2026-07-28" } else { "2025-11-25" };
        return Err(CheckError::OtherRevisionsAnomaly { kind, protocol });
    }
    if modern {
        return run_modern(args);
    }
    if args.mutate.is_some() {
        return Err(CheckError::MutateNeedsModern);
    }
    if let Some(replicas) = args.replicas {
        return run_replicas(replicas, args);
    }
    let delivery = match (args.delivery, &args.emit_scenario) {
        (Some(DeliveryArg::Interleaved), _) => Delivery::Interleaved,
        (Some(DeliveryArg::Eager), _) | (None, Some(_)) => Delivery::Eager,
        (None, None) => Delivery::Interleaved,
    };
    let limits = args.limits(8);
    let bounds = model::Bounds {
        streams: args.streams,
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
        Which::Both => vec![Policy::Fenced, Policy::Naive],
        one => one.policies(),
    };
    let config = check::config(args.identity.into());
    let mut checked = Vec::new();
    for policy in policies {
        let mut line = ProgressLine::new(policy, &args.format);
        checked.push(check::check(config, policy, bounds, limits, |p| {
            line.show(p)
        })?);
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
    let unfinished = unfinished(checked.iter().map(|c| c.exploration.stopped.is_some()));
    if let Some(path) = emit_scenario {
        let Some((found, counterexample)) = found else {
            eprintln!(
                "forkscope check: no counterexample, so no scenario written to {}",
                path.display()
            );
            return Ok(unfinished);
        };
        write_scenario(path, config, found, counterexample)?;
        say_written(path);
    }
    Ok(exit_for(found.is_some(), unfinished))
}

fn write_scenario(
    path: &Path,
    config: forkscope_core::LabConfig,
    found: &check::Checked,
    counterexample: &model::Counterexample,
) -> Result<(), CheckError> {
    let text = check::scenario_toml(config, found, counterexample).map_err(|source| {
        CheckError::Schedule {
            path: path.to_path_buf(),
            source,
        }
    })?;
    new_file::write_new(path, &text)?;
    Ok(())
}

/// `--depth` with `--replicas 2` when none is given: fenced completes it well within a minute.
const REPLICAS_DEPTH: u16 = 16;

/// `forkscope check --replicas 2`: fenced first (the proof), then naive (the counterexample).
fn run_replicas(replicas: u8, args: CheckArgs) -> Result<ExitCode, CheckError> {
    use forkscope::check::replicas as check_replicas;
    use forkscope_core::model::replicas::Params;
    if replicas != 2 {
        return Err(CheckError::Replicas(replicas));
    }
    let refused = [
        (args.streams != 3, "--streams"),
        (args.client_only, "--client-only"),
        (args.anomaly.is_some(), "--anomaly"),
        (!matches!(args.identity, IdentityArg::EventId), "--identity"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        return Err(CheckError::NotWithReplicas(flag));
    }
    let write = args.emit_scenario.as_deref();
    if let Some(path) = write
        && path.exists()
    {
        return Err(CheckError::WouldOverwrite(path.to_path_buf()));
    }
    let delivery = match (args.delivery, write) {
        (Some(DeliveryArg::Interleaved), _) => Delivery::Interleaved,
        (Some(DeliveryArg::Eager), _) | (None, Some(_)) => Delivery::Eager,
        (None, None) => Delivery::Interleaved,
    };
    let params = Params {
        delivery,
        ..Params::default()
    };
    let limits = args.limits(REPLICAS_DEPTH);
    let policies = match args.policy {
        Which::Both => vec![Policy::Fenced, Policy::Naive],
        Which::One(policy) => match ReplicaPolicy::try_from(policy) {
            Ok(_) => vec![policy],
            Err(_) => return Err(CheckError::SdkWithReplicas(policy)),
        },
    };
    let mut checked = Vec::new();
    for policy in policies {
        let mut line = ProgressLine::new(policy, &args.format);
        checked.push(check_replicas::check(policy, params, limits, |p| {
            line.show(p)
        }));
    }
    match args.format {
        Format::Text => out!("{}", check_replicas::text(&checked)),
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&check_replicas::json(&checked)).unwrap_or_default()
        ),
    }
    let found = checked
        .iter()
        .find(|c| c.exploration.counterexample.is_some());
    let unfinished = unfinished(checked.iter().map(|c| c.exploration.stopped.is_some()));
    if let Some(path) = write {
        let text = found
            .map(check_replicas::scenario_toml)
            .transpose()
            .map_err(|source| CheckError::ReplicaScenario {
                path: path.to_path_buf(),
                source,
            })?
            .flatten();
        let Some(text) = text else {
            eprintln!(
                "forkscope check: no counterexample, so no scenario written to {}",
                path.display()
            );
            return Ok(unfinished);
        };
        new_file::write_new(path, &text)?;
        say_written(path);
    }
    Ok(exit_for(found.is_some(), unfinished))
}

/// Whether a model can reach `kind`: the 2026-07-28 model runs tasks only (a call cut halfway
/// is a plain call's) and never ends its run (a task lost is judged at a run's end), the
/// 2025-11-25 ones sessions and streams.
fn reachable_in(kind: AnomalyKind, modern: bool) -> bool {
    if modern {
        kind.is_2026() && !matches!(kind, AnomalyKind::CutHalfway | AnomalyKind::TaskLost)
    } else {
        !kind.is_2026()
    }
}

/// The kinds a revision's model looks for, as `--anomaly` spells them.
fn reachable(protocol: &str) -> String {
    let modern = protocol == "2026-07-28";
    <AnomalyKind as strum::IntoEnumIterator>::iter()
        .filter(|k| reachable_in(*k, modern))
        .map(AnomalyKind::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--depth` with `--protocol 2026-07-28` when none is given: past the deepest reachable state
/// (38, some 12,800 states in a fifth of a second), so the default proves every schedule.
const MODERN_DEPTH: u16 = 40;

/// `forkscope check --protocol 2026-07-28`: fenced first (the proof), then naive (the
/// counterexample).
fn run_modern(args: CheckArgs) -> Result<ExitCode, CheckError> {
    use forkscope::check::requests;
    use forkscope_core::model::requests::Params;
    let refused = [
        (args.replicas.is_some(), "--replicas"),
        (args.streams != 3, "--streams"),
        (args.client_only, "--client-only"),
        (args.delivery.is_some(), "--delivery"),
        (!matches!(args.identity, IdentityArg::EventId), "--identity"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        return Err(CheckError::NotWithModern(flag));
    }
    let write = args.emit_scenario.as_deref();
    if let Some(path) = write
        && path.exists()
    {
        return Err(CheckError::WouldOverwrite(path.to_path_buf()));
    }
    let policies = match args.policy {
        Which::Both => vec![Policy::Fenced, Policy::Naive],
        Which::One(policy @ (Policy::Fenced | Policy::Naive)) => vec![policy],
        Which::One(policy) => return Err(CheckError::SdkWithModern(policy)),
    };
    let params = Params {
        target: args.anomaly,
        renewal: args.mutate != Some(MutateArg::NoRenewal),
        ..Params::default()
    };
    let limits = args.limits(MODERN_DEPTH);
    let mut checked = Vec::new();
    for policy in policies {
        let mut line = ProgressLine::new(policy, &args.format);
        checked.push(requests::check(policy, params, limits, |p| line.show(p)));
    }
    match args.format {
        Format::Text => out!("{}", requests::text(&checked)),
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&requests::json(&checked)).unwrap_or_default()
        ),
    }
    let found = checked
        .iter()
        .find(|c| c.exploration.counterexample.is_some());
    let unfinished = unfinished(checked.iter().map(|c| c.exploration.stopped.is_some()));
    if let Some(path) = write {
        let file = found
            .map(requests::scenario_file)
            .transpose()
            .map_err(|source| CheckError::ModernScenario {
                path: path.to_path_buf(),
                source,
            })?
            .flatten();
        let Some(file) = file else {
            eprintln!(
                "forkscope check: no counterexample, so no scenario written to {}",
                path.display()
            );
            return Ok(unfinished);
        };
        let text = file
            .to_toml()
            .map_err(|source| CheckError::ReplicaScenario {
                path: path.to_path_buf(),
                source,
            })?;
        let text = format!(
            "# Written by forkscope from a schedule of `forkscope check --protocol 2026-07-28`'s model.\n{text}"
        );
        new_file::write_new(path, &text)?;
        say_written(path);
    }
    Ok(exit_for(found.is_some(), unfinished))
}

impl CheckArgs {
    /// The limits every search takes, `depth` when none is given.
    fn limits(&self, depth: u16) -> model::Limits {
        model::Limits {
            depth: usize::from(self.depth.unwrap_or(depth)),
            max_states: self.max_states,
            memory_budget: self.memory_budget,
            time_budget_secs: Some(self.time_budget),
        }
    }
}

/// A search's progress on one line of a terminal (a log or a pipe gets the report alone),
/// shown once it has run for a second: depth, states, rate and memory, rewritten in place and
/// cleared when the search ends.
struct ProgressLine {
    policy: Policy,
    started: Instant,
    on_terminal: bool,
    shown: bool,
}

impl ProgressLine {
    fn new(policy: Policy, format: &Format) -> Self {
        ProgressLine {
            policy,
            started: Instant::now(),
            on_terminal: matches!(format, Format::Text)
                && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            shown: false,
        }
    }

    fn show(&mut self, p: &model::Progress) {
        let elapsed = self.started.elapsed();
        if !self.on_terminal || elapsed < Duration::from_secs(1) {
            return;
        }
        self.shown = true;
        let rate = p.distinct as f64 / elapsed.as_secs_f64();
        eprint!(
            "\r\x1b[K{}: depth {} — {} states, {} states/s, {} held (estimated), {:.0} s",
            self.policy,
            p.depth,
            check::thousands(p.distinct),
            check::thousands(rate as u64),
            p.held,
            elapsed.as_secs_f64()
        );
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}

/// Tells a person where the counterexample went, and how to replay it.
fn say_written(path: &Path) {
    eprintln!(
        "forkscope check: wrote {} — replay it over real sockets with `forkscope run {}`",
        path.display(),
        path.display()
    );
}

/// 3 when a limit cut any search short (it proved less than was asked: not a pass), else 0.
fn unfinished(stopped: impl IntoIterator<Item = bool>) -> ExitCode {
    if stopped.into_iter().any(|s| s) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// 1 for a counterexample, else what the search reached (0, or 3 when a limit cut it short).
fn exit_for(found: bool, unfinished: ExitCode) -> ExitCode {
    if found { ExitCode::FAILURE } else { unfinished }
}
