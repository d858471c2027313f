//! `forkscope proxy`: a TCP fault proxy driven from standard input, one command a line:
//! `drop` (a NAT drop), `reset`, `hold` (the server's bytes stop in the proxy), `held` (how many
//! bytes it holds) and `release`; each is answered `ok WORD N` on standard output.

use super::{init_logging, outln, runtime, shutdown_signal};
use forkscope::wire::proxy::{Fault, Proxy};
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::io::AsyncBufReadExt;

#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// The server to forward to, HOST:PORT.
    #[arg(long)]
    to: SocketAddr,
    /// Port to listen on, on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        listen: SocketAddr,
        source: std::io::Error,
    },
}

pub fn run(args: ProxyArgs) -> Result<ExitCode, ProxyError> {
    init_logging();
    let runtime = runtime();
    let ran = runtime.block_on(proxy(args.to, args.port));
    // The stdin reader is a blocking task still waiting for a line: a runtime dropped the usual
    // way waits for it, so a signal with stdin open never ended the proxy.
    runtime.shutdown_background();
    ran
}

async fn proxy(to: SocketAddr, port: u16) -> Result<ExitCode, ProxyError> {
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let proxy = Proxy::start_on(listen, to)
        .await
        .map_err(|source| ProxyError::Listen { listen, source })?;
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
            "release" => (Fault::Release, "release"),
            "hold" => {
                proxy.hold();
                outln!("ok hold {}", proxy.open_connections());
                continue;
            }
            "held" => {
                outln!("ok held {}", proxy.held_bytes());
                continue;
            }
            "" => continue,
            other => {
                outln!(
                    "error: unknown command {other:?}; the commands are drop, reset, hold, held and release"
                );
                continue;
            }
        };
        let affected = proxy.open_connections();
        proxy.inject(fault);
        outln!("ok {word} {affected}");
    }
    Ok(ExitCode::SUCCESS)
}
