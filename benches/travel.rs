//! What time travel keeps of a lab left running (issue 23, item 8): the real dashboard `App`
//! with a real lab over loopback, drawn into a ratatui `TestBackend`, faster than the issue's
//! pace — lab time ×10 with a background event every 70 lab ms and a tool call and a drop every
//! 6 lab seconds (ten times the issue's), a frame every 5 ms (the dashboard draws at most every
//! 100 ms: moments come about fifteen times as fast) — so two minutes keep what about twenty at
//! the pace would.
//!
//! Two of the lab's own bounded stores would still be filling at the end of so short a run and
//! hide the kept run's shape, so the bench fills them sooner: the core's history ring holds
//! 8,192 records (65,536 by default: at this pace it fills in 140 s), and each dropped
//! connection's half-open server side is timed out (`h`) once the client has resumed (the
//! proxy lets it go after 300 real seconds anyway, holding ~40 KiB of buffers until then).
//!
//! Every 10 s it reports the moments kept, the kept run's estimated bytes, the history's
//! length and the process's RSS; at the end, how fast RSS grew over the last half of the run.
//! `FORKSCOPE_TRAVEL_BUDGET_MIB` sets the kept run's budget (default: the dashboard's).
//!
//! `cargo bench --bench travel`; without `--bench` (as `cargo test --benches` runs it) a 3 s
//! smoke run.

use forkscope::lab::LabOptions;
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope::wire::server::EmitRate;
use forkscope_core::{LabConfig, Policy};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers,
};
use std::time::{Duration, Instant};

/// The dashboard's allocator and settings (`.cargo/config.toml`), so RSS is the dashboard's.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const RUN: Duration = Duration::from_secs(110);
const REPORT_EVERY: Duration = Duration::from_secs(10);
const FRAME_EVERY: Duration = Duration::from_millis(5);
/// A tool call, a drop while it runs, and the dropped side timed out once the client resumed:
/// every 6 lab seconds at ×10.
const CYCLE: Duration = Duration::from_millis(600);
const DROP_AFTER: Duration = Duration::from_millis(300);
const EXPIRE_AFTER: Duration = Duration::from_millis(500);
const HISTORY: usize = 8_192;

fn char(c: char) -> Event {
    Event::Key(KeyEvent {
        code: KeyCode::Char(c),
        modifiers: KeyModifiers::NONE,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    })
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The least-squares slope of `(seconds, MiB)` samples, in KiB/s.
fn slope(samples: &[(f64, f64)]) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let n = samples.len() as f64;
    let mt = samples.iter().map(|(t, _)| t).sum::<f64>() / n;
    let mr = samples.iter().map(|(_, r)| r).sum::<f64>() / n;
    let cov: f64 = samples.iter().map(|(t, r)| (t - mt) * (r - mr)).sum();
    let var: f64 = samples.iter().map(|(t, _)| (t - mt) * (t - mt)).sum();
    Some(cov / var * 1024.0)
}

async fn bench() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let run = if smoke { Duration::from_secs(3) } else { RUN };
    let start = Start {
        options: LabOptions {
            policy: Policy::Fenced,
            config: LabConfig {
                history_capacity: HISTORY,
                ..LabConfig::default()
            },
            background: Some(EmitRate::every_ms(70)),
            ..LabOptions::default()
        },
        run_budget: std::env::var("FORKSCOPE_TRAVEL_BUDGET_MIB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map(|mib| mib << 20),
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    for _ in 0..3 {
        app.handle(char('+')).await;
    }
    assert_eq!(app.labs()[0].clock().speed(), 10.0, "three + reach ×10");
    println!(
        "travel: lab ×10, an event every 70 lab ms, a tool call and a drop every 6 lab s, a 120×40 frame every 5 ms, for {:.0} s",
        run.as_secs_f64()
    );
    println!(
        "{:>6} {:>8} {:>10} {:>12} {:>9}",
        "time", "moments", "kept MiB", "history", "RSS MiB"
    );
    let began = Instant::now();
    let mut next_report = Duration::ZERO;
    let mut next_cycle = Duration::ZERO;
    let mut cycle_began = Duration::ZERO;
    let (mut dropped, mut expired) = (true, true);
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut most_kept = 0;
    let mut frames = 0u64;
    loop {
        let now = began.elapsed();
        if now >= next_cycle {
            app.handle(char('x')).await;
            (cycle_began, dropped, expired) = (now, false, false);
            next_cycle += CYCLE;
        }
        if !dropped && now >= cycle_began + DROP_AFTER {
            app.handle(char('d')).await;
            dropped = true;
        }
        if !expired && now >= cycle_began + EXPIRE_AFTER {
            app.handle(char('h')).await;
            expired = true;
        }
        app.tick();
        app.draw(&mut terminal).unwrap();
        frames += 1;
        most_kept = most_kept.max(app.kept_bytes());
        if now >= next_report || now >= run {
            let rss = rss_mib();
            samples.push((now.as_secs_f64(), rss));
            println!(
                "{:>5.0}s {:>8} {:>10.1} {:>12} {:>9.1}",
                now.as_secs_f64(),
                app.kept_moments(),
                mib(app.kept_bytes()),
                app.labs()[0].core().history.total(),
                rss
            );
            next_report += REPORT_EVERY;
        }
        if now >= run {
            break;
        }
        tokio::time::sleep(FRAME_EVERY).await;
    }
    println!(
        "{frames} frames; the kept run peaked at {:.1} MiB",
        mib(most_kept)
    );
    let half = run.as_secs_f64() / 2.0;
    let late: Vec<(f64, f64)> = samples
        .iter()
        .copied()
        .filter(|(t, _)| *t >= half)
        .collect();
    if let Some(kib_s) = slope(&late) {
        println!("RSS over the last half: {kib_s:+.0} KiB/s");
    }
    app.stop().await;
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}
