//! The command line: one clap args struct and one module per subcommand, each returning a typed
//! error; [`Failure`] is the one place an error becomes its message and exit status.

mod balance;
mod check;
mod dashboard;
mod incident;
mod policies;
mod probe;
mod proxy;
mod record;
mod run;
mod serve;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};
use clap::{Parser, Subcommand, ValueEnum};
use forkscope::lab::StoreChoice;
use forkscope_core::{Policy, StreamIdentity};
use std::process::ExitCode;

/// Standard output that a closed pipe (`forkscope probe … | head`) cannot turn into a panic:
/// what is not read is not written, and the exit status still says how the run went.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub(crate) use {out, outln};

// `--help` says the package's description. What forkscope models, for whoever reads this:
// MCP Streamable HTTP revision 2025-11-25 (sessions, the standalone GET stream, Last-Event-ID
// resumption). Revision 2026-07-28 removed resumption, but every official SDK still serves the
// 2025 path, so the fork it teaches is still out there.
#[derive(Debug, Parser)]
#[command(name = "forkscope", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    dashboard: dashboard::DashboardArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the MCP server alone, for other clients (binds 127.0.0.1 by default).
    Serve(serve::ServeArgs),
    /// A TCP fault proxy in front of a server, driven from standard input: `drop` (a NAT drop of
    /// every open connection: the client side is cut, the server side kept open and no longer read),
    /// `reset` (close both sides). For testing other clients' resumption by hand or in scripts.
    Proxy(proxy::ProxyArgs),
    /// An HTTP load balancer in front of several servers (replicas of `forkscope serve`),
    /// driven from standard input: `out N` / `in N` (take upstream N out of rotation, put it
    /// back), `next N` (send the next request to N), `status`. The end of standard input does
    /// not stop it; a signal does.
    Balance(balance::BalanceArgs),
    /// Play the seed incident over real loopback HTTP, headless, and print the verdicts.
    Incident(incident::IncidentArgs),
    /// Play the seed incident in the core alone (no sockets) and narrate it.
    Demo,
    /// List the policies: fenced, naive, and the SDK policies (what each official SDK's server
    /// does on a resume, as `forkscope probe` measured it), each rule with the SDK's threads.
    Policies,
    /// Play scenario files headless against a real loopback lab and print verdict tables.
    /// Exit status: 0 every expectation held, 1 one failed, 2 bad input.
    Run(run::RunArgs),
    /// Prove the fence: explore every interleaving of the lab's steps (emit, deliver, drop,
    /// reset, strip the token, reconnect, timers, foreign GETs) up to a bound, on the core's own
    /// code, breadth-first, so a counterexample is a shortest one.
    /// Exit status: 0 no counterexample, 1 one found, 2 bad input, 3 no counterexample but a
    /// limit (--memory-budget, --max-states) stopped the search short of --depth: the report
    /// says to which depth every schedule holds. With --replicas 2 it explores two replicas on
    /// a shared store instead (compare-and-set, lease expiry, partition, heal, kill): naive's
    /// fork across replicas exits 1 (expected), fenced holding exits 0, and 3 when
    /// --time-budget ran out short of --depth.
    Check(check::CheckArgs),
    /// Test another MCP server's stream resumption for forks, duplicates and gaps: a battery
    /// of resume cases (break a stream and resume it, resume twice, resume with a wrong cursor),
    /// each judged in the checker's words with its evidence; on a server that offers 2026-07-28,
    /// its tasks too (a re-issue under one key, reads, cancels, a listen's gap). Loopback
    /// targets only unless --allow-remote (the probe sends hostile inputs).
    /// The tools are found by schema in tools/list (--tool, --count-arg, --standalone-tool
    /// name them otherwise). A case that saw too little to judge — the stream ended before the
    /// break, nothing came after it — says `not exercised`, with why: it neither holds nor
    /// is violated, and the summary counts it apart.
    /// Exit status: 0 no case is violated (`not exercised` and `not run` are not violations),
    /// 1 one is violated, 2 bad input or no MCP server; with --expect, 0 the findings match
    /// the file, 1 one changed (`not_exercised` is written as a case's verdict, and a case
    /// going to or from it is a change).
    Probe(probe::ProbeArgs),
    /// Open the dashboard (the default).
    Dashboard,
    /// Play a scenario headless and record the dashboard: an asciicast v2 file (asciinema) or an
    /// animated SVG (for a README or slides), by the output's extension.
    Record(record::RecordArgs),
}

/// `--policy NAME`: the names and their one-line help come from [`Policy::ALL`], so a new
/// policy is a new variant there and nothing here. The SDK policies reproduce what `forkscope
/// probe` measured in each official SDK's server (`forkscope policies` lists their sources).
fn policy_parser() -> impl clap::builder::TypedValueParser<Value = Policy> {
    let names = Policy::ALL
        .map(|p| PossibleValue::new(p.name()).help(forkscope_core::resume::sdk::summary(p)));
    PossibleValuesParser::new(names).try_map(|name| name.parse::<Policy>())
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum IdentityArg {
    EventId,
    TokenHeader,
}

impl From<IdentityArg> for StreamIdentity {
    fn from(i: IdentityArg) -> Self {
        match i {
            IdentityArg::EventId => StreamIdentity::EventId,
            IdentityArg::TokenHeader => StreamIdentity::TokenHeader,
        }
    }
}

/// Which policies a headless command runs: naive and fenced (`both`), or one policy.
/// `--policy` where a command can run several: one policy, or `both` (naive and fenced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Both,
    One(Policy),
}

const BOTH: &str = "both";

fn which_parser() -> impl clap::builder::TypedValueParser<Value = Which> {
    let both = PossibleValue::new(BOTH).help("naive, then fenced: the fork, then its prevention");
    let names = Policy::ALL
        .map(|p| PossibleValue::new(p.name()).help(forkscope_core::resume::sdk::summary(p)));
    PossibleValuesParser::new(std::iter::once(both).chain(names)).try_map(|name| {
        if name == BOTH {
            Ok(Which::Both)
        } else {
            name.parse().map(Which::One)
        }
    })
}

impl Which {
    /// The policies, naive first (the story's order: the fork, then its prevention).
    fn policies(self) -> Vec<Policy> {
        match self {
            Which::Both => vec![Policy::Naive, Policy::Fenced],
            Which::One(policy) => vec![policy],
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Why a command failed, for the one place that reports it.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Dashboard(#[from] dashboard::DashboardFailure),
    #[error(transparent)]
    Serve(#[from] serve::ServeError),
    #[error(transparent)]
    Proxy(#[from] proxy::ProxyError),
    #[error(transparent)]
    Balance(#[from] balance::BalanceError),
    #[error(transparent)]
    Incident(#[from] incident::IncidentFailure),
    #[error(transparent)]
    Run(#[from] run::RunError),
    #[error(transparent)]
    Check(#[from] check::CheckError),
    #[error(transparent)]
    Probe(#[from] probe::ProbeFailure),
    #[error(transparent)]
    Record(#[from] record::RecordFailure),
}

impl Failure {
    /// Who says it: the program, or the program and its subcommand.
    fn speaker(&self) -> &'static str {
        match self {
            Failure::Dashboard(_) | Failure::Incident(_) => "forkscope",
            Failure::Serve(_) => "forkscope serve",
            Failure::Proxy(_) => "forkscope proxy",
            Failure::Balance(_) => "forkscope balance",
            Failure::Run(_) => "forkscope run",
            Failure::Check(_) => "forkscope check",
            Failure::Probe(_) => "forkscope probe",
            Failure::Record(_) => "forkscope record",
        }
    }

    /// 2: bad input (the run could not start as asked); 1: a run that started and failed.
    fn exit_code(&self) -> u8 {
        use dashboard::DashboardFailure as D;
        use record::RecordFailure as R;
        match self {
            Failure::Dashboard(D::Config(_) | D::Scenario(_) | D::Compare(_)) => 2,
            Failure::Dashboard(D::Run(_)) => 1,
            Failure::Serve(_) | Failure::Proxy(_) | Failure::Balance(_) | Failure::Run(_) => 2,
            Failure::Incident(_) => 1,
            Failure::Check(_) | Failure::Probe(_) => 2,
            Failure::Record(R::Format(_) | R::Scenario(_)) => 2,
            Failure::Record(R::Record(_)) => 1,
        }
    }
}

/// Runs the command line; a failure is said on standard error and becomes the exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let ran = match cli.command {
        None => dashboard::run(cli.dashboard, false).map_err(Failure::from),
        Some(Command::Dashboard) => dashboard::run(cli.dashboard, true).map_err(Failure::from),
        Some(Command::Serve(args)) => serve::run(args).map_err(Failure::from),
        Some(Command::Proxy(args)) => proxy::run(args).map_err(Failure::from),
        Some(Command::Balance(args)) => balance::run(args).map_err(Failure::from),
        Some(Command::Incident(args)) => incident::run(args).map_err(Failure::from),
        Some(Command::Demo) => {
            out!("{}", forkscope::demo::run());
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Policies) => Ok(policies::run()),
        Some(Command::Run(args)) => run::run(args).map_err(Failure::from),
        Some(Command::Check(args)) => check::run(args).map_err(Failure::from),
        Some(Command::Probe(args)) => probe::run(args).map_err(Failure::from),
        Some(Command::Record(args)) => record::run(args).map_err(Failure::from),
    };
    match ran {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("{}: {failure}", failure.speaker());
            ExitCode::from(failure.exit_code())
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal, and never under NO_COLOR: `serve 2> log` gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
}

/// Resolves on Ctrl-C (SIGINT), SIGTERM or SIGHUP, so a supervisor's stop or a closed
/// terminal takes the graceful path. It listens from the moment it is called, not from its
/// first poll: call it before announcing the address, or a script that signals as soon as it
/// reads the announcement can race the handlers (and a signal between two polls of a fresh
/// listener is lost).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listeners = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        );
        async move {
            match listeners {
                (Ok(mut int), Ok(mut term), Ok(mut hup)) => tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                    _ = hup.recv() => {}
                },
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A `--store` that is neither `memory` nor a Redis URL.
#[derive(Debug, thiserror::Error)]
#[error("{0} (or `memory`)")]
pub struct StoreArgError(#[from] forkscope::store::redis::ConnectError);

/// `--store` for a lab of replicas: `memory`, or a Redis URL checked as `serve --store` checks it.
fn parse_store(s: &str) -> Result<StoreChoice, StoreArgError> {
    if s == "memory" {
        return Ok(StoreChoice::Memory);
    }
    forkscope::store::redis::parse_url(s)?;
    Ok(StoreChoice::Redis(s.to_owned()))
}

/// How a lab of replicas' balancer routes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum RoutingArg {
    RoundRobin,
    Sticky,
}

impl From<RoutingArg> for forkscope::lab::Routing {
    fn from(r: RoutingArg) -> Self {
        match r {
            RoutingArg::RoundRobin => forkscope::lab::Routing::RoundRobin,
            RoutingArg::Sticky => forkscope::lab::Routing::Sticky,
        }
    }
}
