//! `forkscope serve`: the MCP server alone, for other clients, until a signal stops it.

use super::{IdentityArg, init_logging, outln, policy_parser, runtime, shutdown_signal};
use forkscope::clock::LabClock;
use forkscope::store::{DEFAULT_MAX_SESSIONS, Retention, Store};
use forkscope::wire::replica::{self, Counters, ReplicaOptions};
use forkscope::wire::server::{self, EmitRate, ServeOptions};
use forkscope::wire::{Core, Shared};
use forkscope_core::replica::DEFAULT_LEASE_MS;
use forkscope_core::revision::{self, Protocols};
use forkscope_core::tasks::sdk::ModernQuirks;
use forkscope_core::{ConfigError, LabConfig, Policy};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Records `forkscope serve` keeps for its history ring (its checker sees every one).
const SERVE_HISTORY: usize = 1_024;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8931)]
    port: u16,
    /// Address to bind. Anything but loopback exposes the lab to the network.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    #[arg(long, value_parser = policy_parser(), default_value = "fenced")]
    policy: Policy,
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
    /// Sessions held at once; past it `initialize` is answered 503 `too_many_sessions` with
    /// Retry-After. One server: its own (default 64); with --store: the whole store's, shared
    /// by every replica on it (default 10000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_sessions: Option<u64>,
    /// Replay memory across all sessions, in MiB (default 48); past it, `initialize` and
    /// tool calls are answered 503 `over_budget` with Retry-After.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    replay_budget_mib: Option<u64>,
    /// A `: keep-alive` comment on every SSE stream idle this long, in milliseconds
    /// (0: none).
    #[arg(long, default_value_t = server::liveness::KEEPALIVE_MS)]
    keepalive_ms: u64,
    /// A stream whose writes are not taken (or acknowledged) for this long is judged gone
    /// and its grace window starts, in milliseconds (0: never).
    #[arg(long, default_value_t = server::liveness::WRITE_DEADLINE_MS)]
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
    /// Append a line to FILE for each task step this process commits: the tool's side effect,
    /// for a prober to count (`forkscope probe --effects-cmd 'wc -l < FILE'`). Replicas may
    /// share one file.
    #[arg(long, value_name = "FILE")]
    effects_file: Option<std::path::PathBuf>,
    /// Answer requests whose Host names this too (NAME for any port, NAME:PORT for one;
    /// repeatable). Loopback names and the bound address always pass; any other Host is
    /// refused 403, against DNS rebinding.
    #[arg(long, value_name = "NAME[:PORT]", value_parser = server::rebinding::parse_allowed_host)]
    allow_host: Vec<String>,
    /// Close a connection with no request in flight for this long, in milliseconds
    /// (HTTP/1 keep-alive and HTTP/2 alike; 1-3600000).
    #[arg(long, default_value_t = server::IDLE_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    idle_timeout_ms: u64,
    /// How long a client may take to send a request's head (the first one included) and a
    /// POST's body, in milliseconds (1-600000).
    #[arg(long, default_value_t = server::REQUEST_READ_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    request_timeout_ms: u64,
    /// On SIGINT or SIGTERM, how long open responses may take to finish, in milliseconds
    /// (0-600000): running tool calls get a JSON-RPC error saying the server is stopping,
    /// and every stream ends cleanly; what is still open after it is closed. With --store,
    /// streams end cleanly (their clients resume on another replica) and a running call is
    /// left in the store for another replica to adopt.
    #[arg(long, default_value_t = server::DRAIN_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    drain_ms: u64,
    /// Serve as one replica on a shared store: `memory` (this process only) or
    /// `redis://HOST:PORT[/DB]`. Any replica then answers any request of any session; resumes
    /// are fenced by epochs the store checks. Without it, the single-process server.
    #[arg(long, value_name = "memory|redis://HOST:PORT[/DB]")]
    store: Option<String>,
    /// This replica's name, sent on every response as `Mcp-Served-By` (default: its
    /// address, HOST:PORT).
    #[arg(long, value_name = "NAME", requires = "store", value_parser = parse_replica_name)]
    replica: Option<String>,
    /// How long a replica's tool call may go without committing a step before another replica
    /// may adopt it, by the store's clock, in milliseconds (100-600000).
    #[arg(long, requires = "store", value_parser = clap::value_parser!(u64).range(100..=600_000))]
    lease_ms: Option<u64>,
    /// Which protocol revisions to serve: 2025-11-25 (sessions, a GET stream, fenced
    /// resumption), 2026-07-28 (stateless: no sessions, no GET, no resumption; closing a
    /// call's response stream cancels it), or both on one endpoint, chosen per request by
    /// how the client opens.
    #[arg(
        long,
        value_name = "2025-11-25|2026-07-28|both",
        default_value = "both"
    )]
    protocol: Protocols,
}

/// A `--replica` name that is not one.
#[derive(Debug, thiserror::Error)]
#[error("a replica name is 1-64 letters, digits, '.', '-', '_' or ':'")]
pub struct BadReplicaName;

/// A replica name: 1-64 characters of letters, digits, `.`, `-`, `_` and `:`.
fn parse_replica_name(s: &str) -> Result<String, BadReplicaName> {
    let ok = (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(BadReplicaName)
    }
}

/// `--emit-rate` that is not a rate.
#[derive(Debug, thiserror::Error)]
pub enum RateArgError {
    #[error("{0:?} is not a number of events per second")]
    NotANumber(String),
    #[error(transparent)]
    OutOfRange(#[from] server::background::RateError),
}

fn parse_rate(s: &str) -> Result<EmitRate, RateArgError> {
    let n: f64 = s
        .parse()
        .map_err(|_| RateArgError::NotANumber(s.to_owned()))?;
    Ok(EmitRate::per_second(n)?)
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] forkscope::store::redis::ConnectError),
    #[error("--store: {0}")]
    ReplicaPolicy(#[from] forkscope_core::replica::NotAReplicaPolicy),
    #[error(
        "--protocol 2026-07-28: --policy {policy} reproduces a server that does not speak 2026-07-28 ({why}); use --protocol 2025-11-25 or both"
    )]
    NotSpoken { policy: Policy, why: &'static str },
    #[error("--effects-file {}: {source}", path.display())]
    EffectsFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub fn run(args: ServeArgs) -> Result<ExitCode, ServeError> {
    init_logging();
    if let Some(path) = &args.effects_file {
        server::effects::record_to(path).map_err(|source| ServeError::EffectsFile {
            path: path.clone(),
            source,
        })?;
    }
    let mut config = LabConfig {
        identity: args.identity.into(),
        // Nothing views serve's history: the checker reads each record as it comes, so a
        // short ring is enough (the lab's 65,536 would hold ~9 MiB for no one).
        history_capacity: SERVE_HISTORY,
        ..LabConfig::default()
    };
    if let Some(grace) = args.grace_ms {
        config.grace_ms = grace;
    }
    if let Some(budget) = args.retry_budget_ms {
        config.retry.budget_ms = budget;
        config.retention_ms = budget;
    }
    if let Some(retention) = args.retention_ms {
        config.retention_ms = retention;
    }
    if let Some(max) = args.max_sessions {
        config.max_sessions = max as usize;
    }
    if let Some(idle) = args.session_idle_ms {
        config.session_idle_ms = idle;
    }
    if let Some(mib) = args.replay_budget_mib {
        // Bounded by the parser: at most 64 GiB, which fits in usize on 64-bit hosts.
        config.replay_budget_bytes = usize::try_from(mib * 1024 * 1024).unwrap_or(usize::MAX);
    }
    let background = args
        .emit_rate
        .or((args.emit_every > 0).then(|| EmitRate::every_ms(args.emit_every)));
    let options = ServeOptions {
        background,
        truth_comments: args.truth_comments,
        liveness: server::liveness::Liveness {
            keepalive_ms: (args.keepalive_ms > 0).then_some(args.keepalive_ms),
            write_deadline_ms: (args.write_deadline_ms > 0).then_some(args.write_deadline_ms),
        },
        allowed_hosts: args.allow_host,
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        request_read_timeout: Duration::from_millis(args.request_timeout_ms),
        protocols: forkscope_core::server::protocols_spoken(args.protocol, args.policy),
        ..ServeOptions::default()
    };
    if args.protocol == Protocols::Modern && options.protocols != Protocols::Modern {
        return Err(ServeError::NotSpoken {
            policy: args.policy,
            why: ModernQuirks::of(args.policy)
                .cites
                .first()
                .map_or("", |(quirk, _)| quirk),
        });
    }
    let addr = SocketAddr::new(args.bind, args.port);
    if let Some(store) = args.store {
        let retention = Retention {
            max_sessions: args
                .max_sessions
                .map_or(DEFAULT_MAX_SESSIONS, |n| n as usize),
            session_idle_ms: config.session_idle_ms,
            finished_ms: config.retention_ms,
            lease_ms: args.lease_ms.unwrap_or(DEFAULT_LEASE_MS),
            ..Retention::default()
        };
        let replica = ReplicaOptions {
            name: args.replica,
            policy: args.policy.try_into()?,
            background,
            allowed_hosts: options.allowed_hosts,
            max_deliveries: replica::MAX_DELIVERIES,
            max_connections: options.max_connections,
            request_read_timeout: options.request_read_timeout,
            idle_timeout: options.idle_timeout,
            write_deadline: options
                .liveness
                .write_deadline_ms
                .map(Duration::from_millis),
            protocols: options.protocols,
            ..ReplicaOptions::default()
        };
        let drain = Duration::from_millis(args.drain_ms);
        return runtime().block_on(serve_replica(addr, store, retention, replica, drain));
    }
    runtime().block_on(serve(
        addr,
        args.policy,
        config,
        options,
        Duration::from_millis(args.drain_ms),
    ))
}

/// What the banner says the endpoint speaks.
fn revisions(protocols: Protocols) -> String {
    match protocols {
        Protocols::Both => format!("{} and {}", revision::LEGACY, revision::MODERN),
        one => one.name().to_owned(),
    }
}

/// `serve --store`: one replica on the shared store, until a signal stops it.
async fn serve_replica(
    addr: SocketAddr,
    store: String,
    retention: Retention,
    options: ReplicaOptions,
    drain: Duration,
) -> Result<ExitCode, ServeError> {
    let store = match store.as_str() {
        "memory" => Store::memory(retention),
        url => Store::redis(url, retention).await?,
    };
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "binding a non-loopback address: anyone who can reach it can drive this lab");
    }
    let (policy, protocols) = (options.policy, options.protocols);
    let running = replica::start(store.clone(), options, addr)
        .await
        .map_err(|source| ServeError::Listen { addr, source })?;
    outln!(
        "forkscope serve: replica {} at http://{}/mcp on store {} (policy {policy}; {})",
        running.name,
        running.addr,
        store.label(),
        revisions(protocols)
    );
    shutdown_signal().await;
    let c = &running.counters;
    outln!(
        "forkscope serve: replica {} stopping; resumes {}, late writes refused {}, deliveries fenced {}, calls adopted {}",
        running.name,
        Counters::get(&c.resumes),
        Counters::get(&c.late_writes_refused),
        Counters::get(&c.deliveries_fenced),
        Counters::get(&c.calls_adopted),
    );
    // Streams end cleanly and their clients resume on another replica; a call this replica
    // ran is adopted there once its lease expires.
    running.drain(drain).await;
    Ok(ExitCode::SUCCESS)
}

async fn serve(
    addr: SocketAddr,
    policy: Policy,
    config: LabConfig,
    options: ServeOptions,
    drain: Duration,
) -> Result<ExitCode, ServeError> {
    let core = Core::new(config, policy)?;
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "binding a non-loopback address: anyone who can reach it can drive this lab");
    }
    let shared = Shared::new(core);
    let protocols = options.protocols;
    let running = server::start(shared.clone(), Arc::new(LabClock::new()), options, addr)
        .await
        .map_err(|source| ServeError::Listen { addr, source })?;
    let shutdown = shutdown_signal();
    outln!(
        "forkscope serve: MCP Streamable HTTP {} at http://{}/mcp (policy {policy})",
        revisions(protocols),
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
    Ok(ExitCode::SUCCESS)
}
