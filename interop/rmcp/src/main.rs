//! An MCP server built on the official Rust SDK (crates.io `rmcp`), for `forkscope probe`.
//!
//! Streamable HTTP through the SDK's `StreamableHttpService` with its default session manager,
//! `LocalSessionManager::default()`: no event store, so resumption is the per-stream cache the
//! SDK ships (event ids `<index>/<request>`, as many events kept as the channel holds). Nothing
//! is added to the transport: what the probe finds is what the SDK does. Two tools give the
//! probe events:
//!
//! - `progress_task {steps, delay_ms}`: a progress notification per step on the call's stream;
//! - `emit_standalone {count, delay_ms, label}`: returns at once, then sends `count`
//!   `notifications/resources/updated` (uri `urn:forkscope-probe:<label>:<n>`) on the session's
//!   standalone GET stream.
//!
//! Under these names, `progress_task` is a task of the tasks extension for a 2026-07-28 client
//! that declares it (the SDK's `TaskManager`; see tools.rs).
//!
//! `--names other` names them as another server might, for the probe to find by schema alone:
//! `countdown {count, delay_ms}` (the progress tool) and `ping_all {count, delay_ms}`, which
//! notifies the standalone stream with `urn:ping-all:<n>`, unlabelled.
//!
//! Usage: forkscope-probe-rmcp --port N [--names probe|other]   (port 0: the kernel picks)

mod tools;

use std::{net::SocketAddr, sync::Arc};

use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

const USAGE: &str = "usage: forkscope-probe-rmcp --port N [--names probe|other]";

/// Which names the tools go by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    Probe,
    Other,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("{USAGE} ({0})")]
    Usage(String),
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("serving failed: {0}")]
    Serve(std::io::Error),
}

struct Args {
    port: u16,
    names: Names,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, StartError> {
    let mut port = None;
    let mut names = Names::Probe;
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| StartError::Usage(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--port" => {
                port = Some(
                    value
                        .parse()
                        .map_err(|_| StartError::Usage(format!("not a port: {value}")))?,
                )
            }
            "--names" => {
                names = match value.as_str() {
                    "probe" => Names::Probe,
                    "other" => Names::Other,
                    _ => return Err(StartError::Usage(format!("no names called {value}"))),
                }
            }
            _ => return Err(StartError::Usage(format!("unknown flag {flag}"))),
        }
    }
    let port = port.ok_or_else(|| StartError::Usage("--port is required".into()))?;
    Ok(Args { port, names })
}

/// The SDK's service with its defaults: `LocalSessionManager::default()` and
/// `StreamableHttpServerConfig::default()` (sessions, priming events, `retry: 3000`).
fn mcp_service<S>(
    server: impl Fn() -> S + Send + Sync + 'static,
) -> StreamableHttpService<S, LocalSessionManager>
where
    S: rmcp::ServerHandler + Send + 'static,
{
    StreamableHttpService::new(
        move || Ok(server()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    )
}

async fn run(args: Args) -> Result<(), StartError> {
    let router = match args.names {
        Names::Probe => {
            // One task manager for the process: every handler the service makes shares it.
            let tasks = rmcp::task_manager::TaskManager::new();
            axum::Router::new().nest_service(
                "/mcp",
                mcp_service(move || tools::ProbeNames::new(tasks.clone())),
            )
        }
        Names::Other => {
            axum::Router::new().nest_service("/mcp", mcp_service(tools::OtherNames::new))
        }
    };
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], args.port)))
        .await
        .map_err(|source| StartError::Bind {
            port: args.port,
            source,
        })?;
    let address = listener.local_addr().map_err(StartError::Serve)?;
    println!("listening on {address}");
    axum::serve(listener, router)
        .await
        .map_err(StartError::Serve)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let result = match parse_args(std::env::args().skip(1)) {
        Ok(args) => run(args).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("forkscope-probe-rmcp: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
