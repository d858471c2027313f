//! What time travel keeps of a lab left running (issue 23, item 8): the real dashboard `App`
//! with a real lab over loopback, drawn into a ratatui `TestBackend`, at ten times the pace the
//! issue measured — lab time ×10, a background event every 70 lab ms, a tool call and a drop
//! every 6 lab seconds, a frame every 10 ms (the dashboard draws at most every 100 ms) — so a
//! 100 s run keeps what about 17 minutes at the pace would.
//!
//! Every 10 s it reports the moments kept, the kept run's estimated bytes, the history's length
//! and the process's RSS; at the end, how fast RSS grew over the second half of the run.
//!
//! `cargo bench --bench travel`; without `--bench` (as `cargo test --benches` runs it) a 3 s
//! smoke run.

use forkscope::lab::LabOptions;
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope::wire::server::EmitRate;
use forkscope_core::Policy;
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

const RUN: Duration = Duration::from_secs(100);
const REPORT_EVERY: Duration = Duration::from_secs(10);
const FRAME_EVERY: Duration = Duration::from_millis(10);
/// A tool call, then a drop while it runs, every 6 lab seconds at ×10.
const CYCLE: Duration = Duration::from_millis(600);
const DROP_AFTER: Duration = Duration::from_millis(300);

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

async fn bench() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let run = if smoke { Duration::from_secs(3) } else { RUN };
    let start = Start {
        options: LabOptions {
            policy: Policy::Fenced,
            background: Some(EmitRate::every_ms(70)),
            ..LabOptions::default()
        },
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    for _ in 0..3 {
        app.handle(char('+')).await;
    }
    assert_eq!(app.labs()[0].clock().speed(), 10.0, "three + reach ×10");
    println!(
        "travel: lab ×10, an event every 70 lab ms, a tool call and a drop every 6 lab s, a 120×40 frame every 10 ms, for {:.0} s",
        run.as_secs_f64()
    );
    println!(
        "{:>6} {:>8} {:>10} {:>12} {:>9}",
        "time", "moments", "kept MiB", "history", "RSS MiB"
    );
    let began = Instant::now();
    let mut next_report = Duration::ZERO;
    let mut next_cycle = Duration::ZERO;
    let mut drop_at = None;
    let mut samples: Vec<(f64, f64)> = Vec::new();
    loop {
        let now = began.elapsed();
        if now >= next_cycle {
            app.handle(char('x')).await;
            drop_at = Some(now + DROP_AFTER);
            next_cycle += CYCLE;
        }
        if drop_at.is_some_and(|at| now >= at) {
            app.handle(char('d')).await;
            drop_at = None;
        }
        app.draw(&mut terminal).unwrap();
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
    // RSS growth over the second half, by least squares: the slope a long run would follow.
    let half: Vec<(f64, f64)> = samples
        .iter()
        .copied()
        .filter(|(t, _)| *t >= run.as_secs_f64() / 2.0)
        .collect();
    if half.len() >= 2 {
        let n = half.len() as f64;
        let (st, sr) = half
            .iter()
            .fold((0.0, 0.0), |(a, b), (t, r)| (a + t, b + r));
        let (mt, mr) = (st / n, sr / n);
        let cov: f64 = half.iter().map(|(t, r)| (t - mt) * (r - mr)).sum();
        let var: f64 = half.iter().map(|(t, _)| (t - mt) * (t - mt)).sum();
        let slope = cov / var * 1024.0;
        println!(
            "RSS over the second half: {slope:+.0} KiB/s here, {:+.1} KiB/s at the issue's pace",
            slope / 10.0
        );
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
