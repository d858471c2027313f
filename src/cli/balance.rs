//! `forkscope balance`: an HTTP load balancer in front of several servers, driven from standard
//! input. Unlike `forkscope proxy`, the end of standard input does not stop it: it is started in
//! the background by scripts, whose background jobs read `/dev/null`; a signal stops it.

use super::{init_logging, outln, runtime, shutdown_signal};
use forkscope::wire::balance::{
    Balancer, Mode, NoSuchUpstream, Upstream, UpstreamError, UpstreamsError, check_upstreams,
};
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::io::AsyncBufReadExt;

#[derive(Debug, clap::Args)]
pub struct BalanceArgs {
    /// Port to listen on, on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// A server to forward to, http://HOST:PORT; give it once per server (at least one, none
    /// twice). They are numbered 1, 2, … in the order given.
    #[arg(long = "upstream", value_name = "URL")]
    upstreams: Vec<String>,
    /// `round-robin`: each request to the next upstream in rotation, whatever its session;
    /// `sticky`: a request with Mcp-Session-Id to the upstream whose response first carried
    /// that id (the others in rotation).
    #[arg(long, value_enum, default_value_t = ModeArg::RoundRobin)]
    mode: ModeArg,
    /// How long an upstream may take to start a response (its status and headers) before it
    /// gets no new request until it answers again; the request is sent to the next upstream if
    /// it is a GET, HEAD, OPTIONS or DELETE, else answered 504 (it may have run).
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    head_timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    RoundRobin,
    Sticky,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::RoundRobin => Mode::RoundRobin,
            ModeArg::Sticky => Mode::Sticky,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Upstreams(#[from] UpstreamsError),
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        listen: SocketAddr,
        source: std::io::Error,
    },
}

pub fn run(args: BalanceArgs) -> Result<ExitCode, BalanceError> {
    let upstreams = args
        .upstreams
        .iter()
        .map(|given| Upstream::parse(given))
        .collect::<Result<Vec<_>, _>>()?;
    check_upstreams(&upstreams)?;
    init_logging();
    let runtime = runtime();
    let head_timeout = std::time::Duration::from_millis(args.head_timeout_ms);
    let ran = runtime.block_on(balance(
        upstreams,
        args.port,
        args.mode.into(),
        head_timeout,
    ));
    // The stdin reader is a blocking task still waiting for a line: a runtime dropped the usual
    // way would wait for it, and a signal with stdin open would never end the balancer.
    runtime.shutdown_background();
    ran
}

async fn balance(
    upstreams: Vec<Upstream>,
    port: u16,
    mode: Mode,
    head_timeout: std::time::Duration,
) -> Result<ExitCode, BalanceError> {
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let balancer = Balancer::start(listen, upstreams, mode)
        .await
        .map_err(|source| BalanceError::Listen { listen, source })?;
    balancer.set_head_timeout(head_timeout);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let listed: Vec<String> = balancer
        .upstreams()
        .iter()
        .enumerate()
        .map(|(i, upstream)| format!("{} {upstream}", i + 1))
        .collect();
    outln!(
        "forkscope balance: http://{} -> {} ({mode})",
        balancer.addr,
        listed.join(", ")
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            () = &mut shutdown => return Ok(ExitCode::SUCCESS),
        };
        let Ok(Some(line)) = line else { break };
        match command(&balancer, &line) {
            Some(Ok(answer)) => outln!("ok {answer}"),
            Some(Err(error)) => outln!("error: {error}"),
            None => {}
        }
    }
    // Standard input ended: keep balancing until a signal.
    shutdown.await;
    Ok(ExitCode::SUCCESS)
}

/// A line on standard input that is not a command the balancer can carry out.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("unknown command {0:?}; the commands are out, in, next, status")]
    Unknown(String),
    #[error("{0} needs an upstream: its number (1 to {1}) or its URL")]
    NoUpstreamNamed(&'static str, usize),
    #[error("no upstream {given:?}: the upstreams are 1 to {count}, or their URLs")]
    NoSuchUpstream { given: String, count: usize },
    #[error("{0} takes one upstream, not {1:?}")]
    TooMany(&'static str, String),
    #[error("status takes nothing, not {0:?}")]
    StatusTakesNothing(String),
}

/// What `out`, `in` and `next` do to the upstream they name.
type Change = fn(&Balancer, usize) -> Result<(), NoSuchUpstream>;

/// Carries out one line and says what it did (`None`: a blank line, no answer).
fn command(balancer: &Balancer, line: &str) -> Option<Result<String, CommandError>> {
    let mut words = line.split_whitespace();
    let verb = words.next()?;
    let rest: Vec<&str> = words.collect();
    let (verb, change): (&'static str, Change) = match verb {
        "status" if rest.is_empty() => return Some(Ok(status(balancer))),
        "status" => return Some(Err(CommandError::StatusTakesNothing(rest.join(" ")))),
        "out" => ("out", Balancer::take_out),
        "in" => ("in", Balancer::put_in),
        "next" => ("next", Balancer::send_next_to),
        _ => return Some(Err(CommandError::Unknown(line.trim().to_owned()))),
    };
    Some(upstream_named(balancer, verb, &rest).and_then(|i| {
        change(balancer, i).map_err(|NoSuchUpstream { count, .. }| {
            CommandError::NoSuchUpstream {
                given: (i + 1).to_string(),
                count,
            }
        })?;
        Ok(format!("{verb} {} {}", i + 1, balancer.upstreams()[i]))
    }))
}

/// The 0-based index of the upstream a person named by its 1-based number or by its URL.
fn upstream_named(
    balancer: &Balancer,
    verb: &'static str,
    words: &[&str],
) -> Result<usize, CommandError> {
    let upstreams = balancer.upstreams();
    let count = upstreams.len();
    let given = match words {
        [] => return Err(CommandError::NoUpstreamNamed(verb, count)),
        [given] => *given,
        _ => return Err(CommandError::TooMany(verb, words.join(" "))),
    };
    let by_number = given
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=count).contains(n))
        .map(|n| n - 1);
    let by_url = || {
        let named = Upstream::parse(given).ok()?;
        upstreams.iter().position(|u| u.same_server(&named))
    };
    by_number
        .or_else(by_url)
        .ok_or_else(|| CommandError::NoSuchUpstream {
            given: given.to_owned(),
            count,
        })
}

/// `1 http://… in 3 forwarded, 2 http://… out 0 forwarded (round-robin)`.
fn status(balancer: &Balancer) -> String {
    let upstreams: Vec<String> = balancer
        .status()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{} {} {} {} forwarded{}{}",
                i + 1,
                s.url,
                if s.in_rotation { "in" } else { "out" },
                s.forwarded,
                if s.next { " next" } else { "" },
                if s.answering { "" } else { " not answering" }
            )
        })
        .collect();
    format!("{} ({})", upstreams.join(", "), balancer.mode())
}
