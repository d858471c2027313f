//! Loopback benchmark: real sockets on 127.0.0.1, each figure beside a bare-axum baseline
//! measured in the same run.
//!
//! - throughput: events/s from core emit to client apply through real SSE, against a bare axum
//!   loop (serialize a JSON-RPC notification, frame it, send) read by the same SSE parser;
//! - resume latency: reconnect → first replayed event, and → all 1,000 replayed, p50/p99,
//!   against a bare axum handler that replays 1,000 stored frames;
//! - replay of the last 10 events from a stream holding 10³ vs 10⁵ events.
//!
//! `cargo bench --bench loopback` (FORKSCOPE_BENCH_QUICK=1 for a short run; `cargo test`
//! runs it as a smoke test with small sizes).

use axum::body::{Body, Bytes};
use axum::response::IntoResponse;
use axum::routing::get;
use forkscope::clock::LabClock;
use forkscope::lab::{Action, Lab, LabOptions};
use forkscope::wire::headers::MODELLED_REVISION;
use forkscope::wire::mcp;
use forkscope::wire::server::{self, ServeOptions};
use forkscope::wire::sse::{self, Parser};
use forkscope::wire::{Core, Shared};
use forkscope_core::client::Phase;
use forkscope_core::{LabConfig, Policy, SessionId};
use futures_util::StreamExt;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `cargo bench` passes `--bench`; anything else (`cargo test --all-targets`) is a smoke run.
fn quick() -> bool {
    std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench")
}

fn notification(n: u64) -> String {
    json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"forkscope","data":{"background":n}}}).to_string()
}

// --- bare axum baseline ---------------------------------------------------------------------

async fn bare_server(events: u64, stored: Arc<Vec<Bytes>>) -> SocketAddr {
    let app = axum::Router::new()
        .route(
            "/stream",
            get(move || async move {
                let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1024);
                tokio::spawn(async move {
                    for n in 1..=events {
                        let frame = sse::frame(None, &n.to_string(), None, &notification(n));
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                });
                let body = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv()
                        .await
                        .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
                });
                (
                    [("content-type", "text/event-stream")],
                    Body::from_stream(body),
                )
                    .into_response()
            }),
        )
        .route(
            "/replay",
            get(move || {
                let stored = stored.clone();
                async move {
                    let body = futures_util::stream::iter(
                        stored
                            .iter()
                            .cloned()
                            .map(Ok::<_, std::convert::Infallible>)
                            .collect::<Vec<_>>(),
                    )
                    .chain(futures_util::stream::pending());
                    (
                        [("content-type", "text/event-stream")],
                        Body::from_stream(body),
                    )
                        .into_response()
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|t| {
        let _ = t.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Reads SSE events until `count` have arrived; returns (first event, all) times since `start`.
async fn read_events(
    response: reqwest::Response,
    count: usize,
    start: Instant,
) -> (Duration, Duration) {
    let mut parser = Parser::new();
    let mut body = response.bytes_stream();
    let mut seen = 0usize;
    let mut first = None;
    while let Some(chunk) = body.next().await {
        let events = parser.feed(&chunk.unwrap()).unwrap();
        for e in events {
            if e.data.is_empty() {
                continue; // priming
            }
            seen += 1;
            first.get_or_insert_with(|| start.elapsed());
            if seen == count {
                return (first.unwrap(), start.elapsed());
            }
        }
    }
    panic!("stream ended after {seen} of {count} events");
}

async fn bare_throughput(addr: SocketAddr, events: u64) -> f64 {
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let start = Instant::now();
    let response = http
        .get(format!("http://{addr}/stream"))
        .send()
        .await
        .unwrap();
    let (_, all) = read_events(response, events as usize, start).await;
    events as f64 / all.as_secs_f64()
}

// --- forkscope ------------------------------------------------------------------------------

async fn forkscope_throughput(events: u64) -> f64 {
    let options = LabOptions {
        background: None,
        via_proxy: false,
        ..LabOptions::default()
    };
    let lab = Lab::start(options).await.unwrap();
    lab.wait_for(Duration::from_secs(10), |c| {
        c.client.phase() == Phase::Connected && c.client.cursor().is_some()
    })
    .await
    .unwrap();
    let session = lab.client().session().unwrap();
    let clock = LabClock::new();
    let start = Instant::now();
    let mut emitted = 0u64;
    // Emitting outside the driver skips its backpressure: stay inside the writer queue's
    // bounds (2,048 frames; a live frame past 256 KiB queued cuts the reader off).
    const CHUNK: u64 = 256;
    const AHEAD: u64 = 1_024;
    while emitted < events {
        {
            let mut core = lab.core();
            for _ in 0..CHUNK.min(events - emitted) {
                server::emit_background(&mut core, session, clock.now());
                emitted += 1;
            }
        }
        while emitted - lab.core().client.applied() > AHEAD {
            tokio::task::yield_now().await;
        }
    }
    lab.wait_for(Duration::from_secs(60), |c| c.client.applied() >= events)
        .await
        .unwrap();
    let rate = events as f64 / start.elapsed().as_secs_f64();
    assert!(lab.core().history.verdict().clean);
    lab.apply(Action::TogglePause);
    lab.stop().await;
    rate
}

struct ResumeLab {
    shared: Shared,
    url: String,
    session: SessionId,
    token: String,
    high_water: u64,
    _running: server::RunningServer,
    _stream: reqwest::Response,
}

async fn resume_lab(events: u64, buffer: usize) -> ResumeLab {
    let config = LabConfig {
        replay_buffer: buffer,
        history_capacity: 1_024,
        ..LabConfig::default()
    };
    let core = Core::new(config, Policy::Fenced).unwrap();
    let shared = Shared::new(core);
    let running = server::start(
        shared.clone(),
        Arc::new(LabClock::new()),
        ServeOptions::default(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let url = format!("http://{}/mcp", running.addr);
    let endpoint = mcp::Endpoint::new(reqwest::Client::new(), url.clone());
    let (session, token, stream) = mcp::open_session_stream(&endpoint, "bench").await.unwrap();
    {
        // Fill the stream's buffer directly; the open connection is detached by the first resume.
        let clock = LabClock::new();
        let mut core = shared.lock();
        for _ in 0..events {
            server::emit_background(&mut core, session, clock.now());
        }
    }
    ResumeLab {
        shared,
        url,
        session,
        token,
        high_water: events,
        _running: running,
        _stream: stream,
    }
}

async fn resume_once(http: &reqwest::Client, lab: &ResumeLab, back: u64) -> (Duration, Duration) {
    let cursor = format!("s1-{}", lab.high_water - back);
    let endpoint = mcp::Endpoint::new(http.clone(), lab.url.clone());
    let session = lab.session.to_string();
    let headers = mcp::Headers::session(&session, MODELLED_REVISION)
        .cursor(Some(&cursor))
        .token(Some(&lab.token));
    let start = Instant::now();
    let response = endpoint.get_stream(headers).send().await.unwrap();
    assert_eq!(response.status(), 200);
    read_events(response, back as usize, start).await
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index].as_secs_f64() * 1_000.0
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let quick = quick();
        let events: u64 = if quick { 5_000 } else { 200_000 };
        let rounds = if quick { 10 } else { 200 };
        let stored: Arc<Vec<Bytes>> = Arc::new(
            (1..=1_000u64)
                .map(|n| sse::frame(None, &n.to_string(), None, &notification(n)))
                .collect(),
        );
        let bare = bare_server(events, stored).await;

        // Throughput, alternating to share the machine's noise.
        let (mut bare_rates, mut fork_rates) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            bare_rates.push(bare_throughput(bare, events).await);
            fork_rates.push(forkscope_throughput(events).await);
        }
        let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let (b, f) = (best(&bare_rates), best(&fork_rates));
        println!("throughput ({events} events, best of 3)");
        println!("  bare axum SSE loop          {:>10.0} events/s", b);
        println!(
            "  forkscope emit → apply      {:>10.0} events/s   ({:.0} % of bare)",
            f,
            100.0 * f / b
        );

        // Resume latency after 1,000 missed events.
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let lab = resume_lab(1_000, 1_024).await;
        let (mut first, mut all, mut bare_first, mut bare_all) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (f1, a1) = resume_once(&http, &lab, 1_000).await;
            first.push(f1);
            all.push(a1);
            let start = Instant::now();
            let response = http
                .get(format!("http://{bare}/replay"))
                .send()
                .await
                .unwrap();
            let (f2, a2) = read_events(response, 1_000, start).await;
            bare_first.push(f2);
            bare_all.push(a2);
        }
        println!("resume after 1,000 missed events ({rounds} rounds; ms)");
        println!("                              first p50  first p99   all p50   all p99");
        println!(
            "  bare axum replay            {:>9.3}  {:>9.3}  {:>8.3}  {:>8.3}",
            percentile(&mut bare_first, 0.5),
            percentile(&mut bare_first, 0.99),
            percentile(&mut bare_all, 0.5),
            percentile(&mut bare_all, 0.99)
        );
        println!(
            "  forkscope resume            {:>9.3}  {:>9.3}  {:>8.3}  {:>8.3}",
            percentile(&mut first, 0.5),
            percentile(&mut first, 0.99),
            percentile(&mut all, 0.5),
            percentile(&mut all, 0.99)
        );
        let verdict = lab.shared.lock().history.verdict();
        assert!(verdict.clean, "{}", verdict.headline);

        // Replay of the last 10 events: flat in the stream's size.
        println!("replay of the last 10 events ({rounds} rounds; all 10 received, ms p50)");
        for size in [1_000u64, 100_000] {
            let lab = resume_lab(size, size as usize).await;
            let mut samples = Vec::new();
            for _ in 0..rounds {
                samples.push(resume_once(&http, &lab, 10).await.1);
            }
            println!(
                "  stream of {size:>7} events     {:>8.3}",
                percentile(&mut samples, 0.5)
            );
        }
    });
}
