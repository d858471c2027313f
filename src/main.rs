//! The forkscope command line.

use clap::{Parser, Subcommand, ValueEnum};
use forkscope::clock::LabClock;
use forkscope::lab::LabOptions;
use forkscope::wire::server::{self, EmitRate, ServeOptions};
use forkscope::wire::{Core, Shared};
use forkscope::{demo, incident, scenario};
use forkscope_core::{LabConfig, Policy, StreamIdentity};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// jemalloc, with a background thread that returns freed pages to the system within about a
/// second (settings in `.cargo/config.toml`): glibc's per-thread arenas kept a stalled load's
/// hundreds of MiB long after its connections had ended.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Records `forkscope serve` keeps for its history ring (its checker sees every one).
const SERVE_HISTORY: usize = 1_024;

/// Watch an MCP Streamable HTTP session fork, and watch a fenced resume prevent it.
///
/// Models MCP Streamable HTTP revision 2025-11-25 (sessions, the standalone GET stream,
/// Last-Event-ID resumption). Revision 2026-07-28 removed resumption, but every official SDK still
/// serves the 2025 path, so the fork it teaches is still out there.
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

#[derive(Debug, Parser)]
#[command(name = "forkscope", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
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
    scenario: Option<std::path::PathBuf>,
    /// Record the dashboard to an asciicast v2 file (playable with asciinema).
    #[arg(long, value_name = "FILE.cast")]
    record: Option<std::path::PathBuf>,
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

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PolicyArg {
    Fenced,
    Naive,
}

impl From<PolicyArg> for Policy {
    fn from(p: PolicyArg) -> Self {
        match p {
            PolicyArg::Fenced => Policy::Fenced,
            PolicyArg::Naive => Policy::Naive,
        }
    }
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

fn parse_rate(s: &str) -> Result<EmitRate, String> {
    let n: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of events per second"))?;
    EmitRate::per_second(n).map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DeliveryArg {
    Interleaved,
    Eager,
}

fn parse_anomaly(s: &str) -> Result<forkscope_core::AnomalyKind, String> {
    forkscope_core::AnomalyKind::ALL
        .into_iter()
        .find(|k| k.as_str() == s.replace('-', "_"))
        .ok_or_else(|| {
            let names: Vec<&str> = forkscope_core::AnomalyKind::ALL
                .iter()
                .map(|k| k.as_str())
                .collect();
            format!("{s:?} is not an anomaly; one of: {}", names.join(", "))
        })
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Which {
    Fenced,
    Naive,
    Both,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the MCP server alone, for other clients (binds 127.0.0.1 by default).
    Serve {
        /// Port to listen on (0: any free port).
        #[arg(long, default_value_t = 8931)]
        port: u16,
        /// Address to bind. Anything but loopback exposes the lab to the network.
        #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
        bind: IpAddr,
        #[arg(long, value_enum, default_value_t = PolicyArg::Fenced)]
        policy: PolicyArg,
        /// Milliseconds between background emits on each session's GET stream (0: none).
        #[arg(long, default_value_t = 1000, conflicts_with = "emit_rate")]
        emit_every: u64,
        /// Background emits per second on each session's GET stream, up to 1000000 (instead
        /// of --emit-every; a fractional rate like 0.25 is one every four seconds).
        #[arg(long, value_parser = parse_rate)]
        emit_rate: Option<EmitRate>,
        /// Grace window for orphaned streams, in milliseconds.
        #[arg(long)]
        grace_ms: Option<u64>,
        /// How long a finished tool call's stream stays resumable, in milliseconds (default:
        /// the client retry budget, 15000).
        #[arg(long)]
        retention_ms: Option<u64>,
        /// The retry budget the server assumes its clients have, in milliseconds (default
        /// 15000): under fenced the grace window must be strictly shorter (condition 5), so a
        /// longer --grace-ms (for people typing by hand) needs a longer budget too.
        #[arg(long)]
        retry_budget_ms: Option<u64>,
        /// End a session with nothing attached and no request for this long, in milliseconds
        /// (default 600000); at capacity, `initialize` is answered 503 with Retry-After.
        #[arg(long)]
        session_idle_ms: Option<u64>,
        /// Replay memory across all sessions, in MiB (default 48); past it, `initialize` and
        /// tool calls are answered 503 `over_budget` with Retry-After.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65_536))]
        replay_budget_mib: Option<u64>,
        /// A `: keep-alive` comment on every SSE stream idle this long, in milliseconds
        /// (0: none).
        #[arg(long, default_value_t = forkscope::wire::server::liveness::KEEPALIVE_MS)]
        keepalive_ms: u64,
        /// A stream whose writes are not taken (or acknowledged) for this long is judged gone
        /// and its grace window starts, in milliseconds (0: never).
        #[arg(long, default_value_t = forkscope::wire::server::liveness::WRITE_DEADLINE_MS)]
        write_deadline_ms: u64,
        /// Where the fenced policy reads stream identity from: `event-id` (ids carry the
        /// stream's token, so stock MCP clients resume with Last-Event-ID alone) or
        /// `token-header` (the seed's model: a resume also needs Mcp-Resumption-Token).
        #[arg(long, value_enum, default_value_t = IdentityArg::EventId)]
        identity: IdentityArg,
        /// Also write each event's ground truth as an SSE comment (`: truth s2 5 <key>`), as
        /// the dashboard's lab does; clients ignore it.
        #[arg(long)]
        truth_comments: bool,
        /// Answer requests whose Host names this too (NAME for any port, NAME:PORT for one;
        /// repeatable). Loopback names and the bound address always pass; any other Host is
        /// refused 403, against DNS rebinding.
        #[arg(long, value_name = "NAME[:PORT]", value_parser = forkscope::wire::server::rebinding::parse_allowed_host)]
        allow_host: Vec<String>,
        /// Close a connection with no request in flight for this long, in milliseconds
        /// (HTTP/1 keep-alive and HTTP/2 alike; 1-3600000).
        #[arg(long, default_value_t = forkscope::wire::server::IDLE_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        idle_timeout_ms: u64,
        /// How long a client may take to send a request's head (the first one included) and a
        /// POST's body, in milliseconds (1-600000).
        #[arg(long, default_value_t = forkscope::wire::server::REQUEST_READ_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        request_timeout_ms: u64,
        /// On SIGINT or SIGTERM, how long open responses may take to finish, in milliseconds
        /// (0-600000): running tool calls get a JSON-RPC error saying the server is stopping,
        /// and every stream ends cleanly; what is still open after it is closed.
        #[arg(long, default_value_t = forkscope::wire::server::DRAIN_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(0..=600_000))]
        drain_ms: u64,
    },
    /// A TCP fault proxy in front of a server, driven from standard input: `drop` (a NAT drop of
    /// every open connection: the client side is cut, the server side kept open and no longer read),
    /// `reset` (close both sides). For testing other clients' resumption by hand or in scripts.
    Proxy {
        /// The server to forward to, HOST:PORT.
        #[arg(long)]
        to: SocketAddr,
        /// Port to listen on, on 127.0.0.1 (0: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Play the seed incident over real loopback HTTP, headless, and print the verdicts.
    Incident {
        #[arg(long, value_enum, default_value_t = Which::Both)]
        policy: Which,
    },
    /// Play the seed incident in the core alone (no sockets) and narrate it.
    Demo,
    /// Play scenario files headless against a real loopback lab and print verdict tables.
    /// Exit status: 0 every expectation held, 1 one failed, 2 bad input.
    Run {
        /// Scenario files (scenarios/*.toml).
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// Override the policies a file names.
        #[arg(long, value_enum)]
        policy: Option<Which>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Prove the fence: explore every interleaving of the lab's steps (emit, deliver, drop,
    /// reset, strip the token, reconnect, timers, foreign GETs) up to a bound, on the core's own
    /// code, breadth-first, so a counterexample is a shortest one.
    /// Exit status: 0 no counterexample, 1 one found, 2 bad input, 3 no counterexample but a
    /// limit (--memory-budget, --max-states) stopped the search short of --depth: the report
    /// says to which depth every schedule holds.
    Check {
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
        #[arg(long, default_value_t = forkscope_core::model::DEFAULT_MEMORY_BUDGET, value_name = "SIZE")]
        memory_budget: forkscope_core::model::ByteSize,
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
        anomaly: Option<forkscope_core::AnomalyKind>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Write the counterexample as a scenario file that `forkscope run` replays over
        /// real sockets (refuses to overwrite a file).
        #[arg(long, value_name = "FILE.toml")]
        emit_scenario: Option<std::path::PathBuf>,
    },
    /// Test another MCP server's stream resumption for forks, duplicates and gaps: a battery
    /// of resume cases (break a stream and resume it, resume twice, resume with a wrong cursor),
    /// each judged in the checker's words with its evidence. Loopback targets only unless
    /// --allow-remote (the probe sends hostile inputs).
    /// Exit status: 0 every case run holds, 1 one is violated, 2 bad input or no MCP server;
    /// with --expect, 0 the findings match the file, 1 one changed.
    Probe {
        /// The server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp.
        url: String,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Rounds of the racing case (1-100).
        #[arg(long, default_value_t = 3)]
        repeat: u32,
        /// The tool whose calls stream progress notifications (default: `progress_task`, or
        /// the first tool that takes `steps`).
        #[arg(long)]
        tool: Option<String>,
        /// The tool's arguments, a JSON object (default: `steps` and `delay_ms` where the
        /// tool's schema has them).
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// Run only these cases (comma-separated names, as the report prints them).
        #[arg(long, value_delimiter = ',', value_name = "CASE,...")]
        only: Option<Vec<String>>,
        /// How long a case waits for what it expects, in milliseconds (100-60000).
        #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
        window_ms: u64,
        /// Probe a server that is not on this machine.
        #[arg(long)]
        allow_remote: bool,
        /// Compare the findings with the verdicts this TOML file writes down per case; the
        /// exit status then says whether they match (0) or changed (1).
        #[arg(long, value_name = "FILE.toml")]
        expect: Option<std::path::PathBuf>,
        /// Watch the battery in the terminal: each case's connections as lanes, the events
        /// that break the rule marked (q quits; the report of the cases run so far follows).
        #[arg(long)]
        watch: bool,
    },
    /// Open the dashboard (the default).
    Dashboard,
    /// Play a scenario headless and record the dashboard: an asciicast v2 file (asciinema) or an
    /// animated SVG (for a README or slides), by the output's extension.
    Record {
        scenario: std::path::PathBuf,
        /// Where to write the recording: FILE.cast or FILE.svg.
        #[arg(long)]
        out: std::path::PathBuf,
        /// With an .svg output: only the final frame, as a still picture.
        #[arg(long)]
        still: bool,
        /// naive, fenced, or both side by side.
        #[arg(long, value_enum, default_value_t = Which::Both)]
        policy: Which,
        /// Terminal size of the recording, WIDTHxHEIGHT.
        #[arg(long, default_value = "120x36", value_parser = parse_size)]
        size: (u16, u16),
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None | Some(Command::Dashboard) => {
            let mut options = LabOptions {
                policy: cli.policy.into(),
                ..LabOptions::default()
            };
            if let Some(grace) = cli.grace_ms {
                options.config.grace_ms = grace;
            }
            options.config.identity = cli.identity.into();
            if let Err(e) = options.config.validate(options.policy) {
                eprintln!("forkscope: {e}");
                return ExitCode::from(2);
            }
            let scenario = match cli.scenario.as_deref().map(scenario::load).transpose() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("forkscope: {e}");
                    return ExitCode::from(2);
                }
            };
            let scenario_dir = cli
                .scenario
                .as_deref()
                .and_then(std::path::Path::parent)
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(
                    || std::path::PathBuf::from("scenarios"),
                    std::path::Path::to_path_buf,
                );
            if !forkscope::tui::has_terminal() && cli.command.is_none() {
                // `cargo run` without a terminal (a pipe, CI): show the headless story instead.
                eprintln!(
                    "forkscope: no terminal for the dashboard; here is the headless demonstration (forkscope demo)"
                );
                out!("{}", demo::run());
                return ExitCode::SUCCESS;
            }
            let start = forkscope::tui::Start {
                options,
                scenario,
                scenario_dir,
                save_dir: std::path::PathBuf::new(),
                recorder: None,
                pause_at_violation: cli.pause_at_violation,
                present: cli.present,
                predict: cli.predict,
                run_budget: None,
            };
            let recorded = cli.record.clone();
            match forkscope::tui::run(start, cli.record) {
                Ok(()) => {
                    // Say where the recording went: the terminal was the dashboard's until now.
                    if let Some(path) = recorded {
                        let path = std::path::absolute(&path).unwrap_or(path);
                        outln!(
                            "forkscope: recorded {} (asciicast v2: asciinema play {})",
                            path.display(),
                            path.display()
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("forkscope: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Check {
            policy,
            depth,
            streams,
            max_states,
            memory_budget,
            identity,
            client_only,
            delivery,
            anomaly,
            format,
            emit_scenario,
        }) => {
            use forkscope_core::model::Delivery;
            let delivery = match (delivery, &emit_scenario) {
                (Some(DeliveryArg::Interleaved), _) => Delivery::Interleaved,
                (Some(DeliveryArg::Eager), _) | (None, Some(_)) => Delivery::Eager,
                (None, None) => Delivery::Interleaved,
            };
            let bounds = forkscope_core::model::Bounds {
                depth: usize::from(depth),
                streams,
                max_states,
                memory_budget,
                probes: !client_only,
                delivery,
                target: anomaly,
            };
            check(
                policy,
                bounds,
                identity.into(),
                format,
                emit_scenario.as_deref(),
            )
        }
        Some(Command::Probe {
            url,
            format,
            repeat,
            tool,
            args,
            only,
            window_ms,
            allow_remote,
            expect,
            watch,
        }) => {
            let expected = match expect.as_deref().map(forkscope::probe::expect::load) {
                None => None,
                Some(Ok(e)) => Some(e),
                Some(Err(e)) => {
                    eprintln!("forkscope probe: {e}");
                    return ExitCode::from(2);
                }
            };
            let options = forkscope::probe::Options {
                url,
                repeat,
                tool,
                args,
                only,
                allow_remote,
                window_ms,
            };
            let result = if watch {
                forkscope::tui::probe_watch::run(&options).map_err(|e| e.to_string())
            } else {
                runtime()
                    .block_on(forkscope::probe::probe(&options))
                    .map_err(|e| e.to_string())
            };
            match result {
                Ok(mut report) => {
                    report.expected = expected
                        .as_ref()
                        .map(|e| forkscope::probe::expect::compare(e, &report));
                    match format {
                        Format::Text => out!("{}", forkscope::probe::text(&report)),
                        Format::Json => outln!("{}", forkscope::probe::json(&report)),
                    }
                    let failed = match &report.expected {
                        Some(compared) => !compared.mismatches.is_empty(),
                        None => report.violated(),
                    };
                    if failed {
                        ExitCode::from(1)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("forkscope probe: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Some(Command::Demo) => {
            out!("{}", demo::run());
            ExitCode::SUCCESS
        }
        Some(Command::Run {
            files,
            policy,
            format,
        }) => run_scenarios(&files, policy, format),
        Some(Command::Record {
            scenario,
            out,
            still,
            policy,
            size,
        }) => record(&scenario, &out, still, policy, size),
        Some(Command::Serve {
            port,
            bind,
            policy,
            emit_every,
            emit_rate,
            grace_ms,
            retention_ms,
            retry_budget_ms,
            session_idle_ms,
            replay_budget_mib,
            keepalive_ms,
            write_deadline_ms,
            identity,
            truth_comments,
            allow_host,
            idle_timeout_ms,
            request_timeout_ms,
            drain_ms,
        }) => {
            init_logging();
            let mut config = LabConfig {
                identity: identity.into(),
                // Nothing views serve's history: the checker reads each record as it comes,
                // so a short ring is enough (the lab's 65,536 would hold ~9 MiB for no one).
                history_capacity: SERVE_HISTORY,
                ..LabConfig::default()
            };
            if let Some(grace) = grace_ms {
                config.grace_ms = grace;
            }
            if let Some(budget) = retry_budget_ms {
                config.retry.budget_ms = budget;
                config.retention_ms = budget;
            }
            if let Some(retention) = retention_ms {
                config.retention_ms = retention;
            }
            if let Some(idle) = session_idle_ms {
                config.session_idle_ms = idle;
            }
            if let Some(mib) = replay_budget_mib {
                // Bounded by the parser: at most 64 GiB, which fits in usize on 64-bit hosts.
                config.replay_budget_bytes =
                    usize::try_from(mib * 1024 * 1024).unwrap_or(usize::MAX);
            }
            let background = emit_rate.or((emit_every > 0).then(|| EmitRate::every_ms(emit_every)));
            let options = ServeOptions {
                background,
                truth_comments,
                liveness: forkscope::wire::server::liveness::Liveness {
                    keepalive_ms: (keepalive_ms > 0).then_some(keepalive_ms),
                    write_deadline_ms: (write_deadline_ms > 0).then_some(write_deadline_ms),
                },
                allowed_hosts: allow_host,
                idle_timeout: Duration::from_millis(idle_timeout_ms),
                request_read_timeout: Duration::from_millis(request_timeout_ms),
                ..ServeOptions::default()
            };
            runtime().block_on(serve(
                SocketAddr::new(bind, port),
                policy.into(),
                config,
                options,
                Duration::from_millis(drain_ms),
            ))
        }
        Some(Command::Proxy { to, port }) => {
            init_logging();
            let runtime = runtime();
            let code = runtime.block_on(proxy(to, port));
            // The stdin reader is a blocking task still waiting for a line: a runtime dropped
            // the usual way waits for it, so a signal with stdin open never ended the proxy.
            runtime.shutdown_background();
            code
        }
        Some(Command::Incident { policy }) => {
            let policies = match policy {
                Which::Fenced => vec![Policy::Fenced],
                Which::Naive => vec![Policy::Naive],
                Which::Both => vec![Policy::Naive, Policy::Fenced],
            };
            runtime().block_on(async {
                for policy in policies {
                    match incident::run(policy).await {
                        Ok(report) => {
                            outln!("{}", policy.name().to_uppercase());
                            for line in &report.transcript {
                                outln!("  {line}");
                            }
                            outln!("  verdict: {}", report.verdict.summary());
                            outln!("           {}", report.verdict.headline);
                        }
                        Err(e) => {
                            eprintln!("forkscope: the {policy} incident did not complete: {e}");
                            return ExitCode::FAILURE;
                        }
                    }
                }
                ExitCode::SUCCESS
            })
        }
    }
}

fn record(
    scenario: &std::path::Path,
    out: &std::path::Path,
    still: bool,
    policy: Which,
    size: (u16, u16),
) -> ExitCode {
    use forkscope::record::Format;
    let format = match Format::for_path(out, still) {
        Ok(format) => format,
        Err(e) => {
            eprintln!("forkscope record: {e}");
            return ExitCode::from(2);
        }
    };
    let s = match scenario::load(scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("forkscope record: {e}");
            return ExitCode::from(2);
        }
    };
    let policies = match policy {
        Which::Fenced => vec![Policy::Fenced],
        Which::Naive => vec![Policy::Naive],
        Which::Both => vec![Policy::Naive, Policy::Fenced],
    };
    let recorded = runtime().block_on(forkscope::record::record_scenario(
        &s, &policies, out, format, size.0, size.1,
    ));
    match recorded {
        Ok(verdicts) => {
            outln!("recorded {} — {}", out.display(), verdicts.join("; "));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("forkscope record: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(
    policy: Which,
    bounds: forkscope_core::model::Bounds,
    identity: StreamIdentity,
    format: Format,
    emit_scenario: Option<&std::path::Path>,
) -> ExitCode {
    use forkscope::check;
    // Refuse before searching: the file is the point of the run.
    if let Some(path) = emit_scenario
        && path.exists()
    {
        eprintln!(
            "forkscope check: {} already exists; not overwriting it (choose another file)",
            path.display()
        );
        return ExitCode::from(2);
    }
    let policies = match policy {
        Which::Fenced => vec![Policy::Fenced],
        Which::Naive => vec![Policy::Naive],
        Which::Both => vec![Policy::Fenced, Policy::Naive],
    };
    let config = check::config(identity);
    // Progress on a terminal only: a log or a pipe gets the report alone.
    let show_progress =
        matches!(format, Format::Text) && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut checked = Vec::new();
    for policy in policies {
        let progress = |level: &forkscope_core::model::Level| {
            if show_progress {
                eprint!(
                    "\r{policy}: depth {} — {} states…   ",
                    level.depth, level.distinct
                );
            }
        };
        match check::check(config, policy, bounds, progress) {
            Ok(c) => checked.push(c),
            Err(e) => {
                eprintln!("forkscope check: {e}");
                return ExitCode::from(2);
            }
        }
        if show_progress {
            eprint!("\r\x1b[K");
        }
    }
    match format {
        Format::Text => out!("{}", check::text(&checked)),
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&check::json(&checked)).unwrap_or_default()
        ),
    }
    let found = checked
        .iter()
        .find(|c| c.exploration.counterexample.is_some());
    // A search a limit cut short proved less than was asked: not a pass.
    let unfinished = if checked.iter().any(|c| c.exploration.stopped.is_some()) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    };
    if let Some(path) = emit_scenario {
        let Some(found) = found else {
            eprintln!(
                "forkscope check: no counterexample, so no scenario written to {}",
                path.display()
            );
            return unfinished;
        };
        let Some(counterexample) = &found.exploration.counterexample else {
            return ExitCode::FAILURE;
        };
        let cannot_write = |e: &dyn std::fmt::Display| {
            eprintln!("forkscope check: cannot write {}: {e}", path.display());
            ExitCode::from(2)
        };
        let text = match check::scenario_toml(
            config,
            found.exploration.policy,
            counterexample,
            &found.trace,
        ) {
            Ok(text) => text,
            Err(e) => return cannot_write(&e),
        };
        if let Err(e) = forkscope::new_file::write_new(path, &text) {
            eprintln!("forkscope check: {e}");
            return ExitCode::from(2);
        }
        eprintln!(
            "forkscope check: wrote {} — replay it over real sockets with `forkscope run {}`",
            path.display(),
            path.display()
        );
    }
    if found.is_some() {
        ExitCode::FAILURE
    } else {
        unfinished
    }
}

fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or("expected WIDTHxHEIGHT, e.g. 120x36")?;
    let w: u16 = w.parse().map_err(|_| format!("bad width {w:?}"))?;
    let h: u16 = h.parse().map_err(|_| format!("bad height {h:?}"))?;
    if w < 60 || h < 20 || w > 400 || h > 200 {
        return Err("the size must be between 60x20 and 400x200".into());
    }
    Ok((w, h))
}

fn run_scenarios(files: &[std::path::PathBuf], policy: Option<Which>, format: Format) -> ExitCode {
    // Every file is read and checked before anything runs: bad input fails fast, with exit 2.
    let mut scenarios = Vec::new();
    for file in files {
        match scenario::load(file) {
            Ok(s) => scenarios.push(s),
            Err(e) => {
                eprintln!("forkscope run: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let all_ok = runtime().block_on(async {
        let mut all_ok = true;
        let mut reports = Vec::new();
        for s in &scenarios {
            let policies = match policy {
                Some(Which::Fenced) => vec![Policy::Fenced],
                Some(Which::Naive) => vec![Policy::Naive],
                Some(Which::Both) => vec![Policy::Naive, Policy::Fenced],
                None => s.policy.list(),
            };
            let mut runs = Vec::new();
            for p in policies {
                runs.push(scenario::play(s, p).await);
            }
            all_ok &= runs.iter().all(scenario::Run::ok);
            match format {
                Format::Text => out!("{}", scenario::report::text(s, &runs)),
                Format::Json => reports.push(scenario::report::json(s, &runs)),
            }
        }
        if let Format::Json = format {
            outln!(
                "{}",
                serde_json::to_string_pretty(&reports).unwrap_or_default()
            );
        }
        all_ok
    });
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
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

async fn proxy(to: SocketAddr, port: u16) -> ExitCode {
    use forkscope::wire::proxy::{Fault, Proxy};
    use tokio::io::AsyncBufReadExt;
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let proxy = match Proxy::start_on(listen, to).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("forkscope proxy: cannot listen on {listen}: {e}");
            return ExitCode::from(2);
        }
    };
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    outln!("forkscope proxy: {} -> {to}", proxy.addr);
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            () = &mut shutdown => break,
        };
        let Ok(Some(line)) = line else { break };
        let (fault, word) = match line.trim() {
            "drop" => (Fault::Drop, "drop"),
            "reset" => (Fault::Reset, "reset"),
            "" => continue,
            other => {
                outln!("error: unknown command {other:?}; the commands are drop and reset");
                continue;
            }
        };
        let affected = proxy.open_connections();
        proxy.inject(fault);
        outln!("ok {word} {affected}");
    }
    ExitCode::SUCCESS
}

async fn serve(
    addr: SocketAddr,
    policy: Policy,
    config: LabConfig,
    options: ServeOptions,
    drain: Duration,
) -> ExitCode {
    let core = match Core::new(config, policy) {
        Ok(core) => core,
        Err(e) => {
            eprintln!("forkscope serve: {e}");
            return ExitCode::from(2);
        }
    };
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "binding a non-loopback address: anyone who can reach it can drive this lab");
    }
    let shared = Shared::new(core);
    let running =
        match server::start(shared.clone(), Arc::new(LabClock::new()), options, addr).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("forkscope serve: cannot listen on {addr}: {e}");
                return ExitCode::from(2);
            }
        };
    let shutdown = shutdown_signal();
    outln!(
        "forkscope serve: MCP Streamable HTTP 2025-11-25 at http://{}/mcp (policy {policy})",
        running.addr
    );
    shutdown.await;
    let verdict = shared.lock().history.verdict();
    outln!(
        "forkscope serve: stopping; checker verdict: {} — {}",
        verdict.summary(),
        verdict.headline
    );
    // A second signal stops at once: dropping the server aborts what is left.
    tokio::select! {
        stopped = running.drain(drain) => {
            if stopped > 0 {
                outln!("forkscope serve: {stopped} running tool call(s) told the server is stopping");
            }
        }
        () = shutdown_signal() => outln!("forkscope serve: stopped without draining"),
    }
    ExitCode::SUCCESS
}
