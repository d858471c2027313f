//! Time travel over a long run, on the path a person uses: the real dashboard `App` with a real
//! lab over loopback, driven by keys, drawn into a ratatui `TestBackend`. The run is the seed
//! fork (n, t, d, then n back to fenced) and then ≥ 10⁵ history records from `e` presses; the figures are the frame
//! times while scrubbing through it (target: < 2 ms a frame), and whether a dashboard paused in
//! the past draws anything.
//!
//! `cargo bench --bench scrub`; `FORKSCOPE_BENCH_QUICK=1` (or running without `--bench`, as
//! `cargo test --all-targets` does) is a smoke run of 3,000 records.

use forkscope::lab::{Action, LabOptions};
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope_core::Policy;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers,
};
use std::time::{Duration, Instant};

fn key(code: KeyCode) -> Event {
    Event::Key(KeyEvent {
        code,
        modifiers: KeyModifiers::NONE,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    })
}

fn char(c: char) -> Event {
    key(KeyCode::Char(c))
}

fn applied(app: &App) -> u64 {
    app.labs()[0]
        .snapshot()
        .view
        .client
        .map_or(0, |c| c.applied)
}

fn history(app: &App) -> u64 {
    app.labs()[0].core().history.total()
}

async fn wait(app: &App, what: &str, ready: impl Fn(&App) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready(app) {
        assert!(Instant::now() < deadline, "not reached: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

struct Figures {
    name: &'static str,
    times: Vec<Duration>,
}

impl Figures {
    fn print(&mut self) {
        self.times.sort();
        let at = |q: f64| self.times[((self.times.len() - 1) as f64 * q) as usize];
        println!(
            "{:<52} {:>5} frames  p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
            self.name,
            self.times.len(),
            at(0.5).as_secs_f64() * 1e3,
            at(0.99).as_secs_f64() * 1e3,
            self.times.last().unwrap().as_secs_f64() * 1e3,
        );
    }
}

async fn bench() {
    let quick = std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some()
        || !std::env::args().any(|a| a == "--bench");
    let target: u64 = if quick { 3_000 } else { 100_000 };
    let start = Start {
        options: LabOptions {
            policy: Policy::Naive,
            background: None,
            ..LabOptions::default()
        },
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    app.tick();
    app.draw(&mut terminal).unwrap();
    // An `e` before the client holds its stream has no session to go to; wait as a person
    // waits for the stream lane to appear.
    wait(&app, "the client's stream", |a| {
        a.labs()[0].core().client.holds_stream()
    })
    .await;
    // The seed fork by keys in a naive lab: two events, strip the token, drop the connection.
    for _ in 0..2 {
        app.handle(char('e')).await;
    }
    wait(&app, "two applied", |a| applied(a) >= 2).await;
    app.handle(char('t')).await;
    app.handle(char('d')).await;
    wait(&app, "the fork", |a| {
        !a.labs()[0].snapshot().view.verdict.clean && a.labs()[0].client().session().is_some()
    })
    .await;
    // Then fenced in the same lab, as a scenario's `set_policy` switches it (`n` would start a
    // fresh lab): the naive orphan is fenced, so every later emit reaches the client, and the
    // fork stays in the history for the jumps below.
    app.labs()[0].apply(Action::SetPolicy(Policy::Fenced));
    // Then a long run: `e` presses in batches, a frame after each (a moment for time travel).
    let began = Instant::now();
    let mut live = Figures {
        name: "live frame, history growing to the target",
        times: Vec::new(),
    };
    while history(&app) < target {
        let before = applied(&app);
        for _ in 0..200 {
            app.handle(char('e')).await;
        }
        wait(&app, "the batch applied", |a| applied(a) >= before + 200).await;
        let t = Instant::now();
        app.tick();
        app.draw(&mut terminal).unwrap();
        live.times.push(t.elapsed());
    }
    let records = history(&app);
    println!(
        "run: {records} history records in {:.1} s over loopback; {} moments to travel through",
        began.elapsed().as_secs_f64(),
        live.times.len() + 1
    );
    live.print();

    // Scrub: Home, then → through every moment, a frame each.
    let mut scrub = Figures {
        name: "scrub → one change, 120×40",
        times: Vec::new(),
    };
    app.handle(key(KeyCode::Home)).await;
    app.tick();
    app.draw(&mut terminal).unwrap();
    loop {
        let (at, of) = app.travelling().expect("travelling");
        if at + 1 >= of {
            break;
        }
        app.handle(key(KeyCode::Right)).await;
        let t = Instant::now();
        app.tick();
        app.draw(&mut terminal).unwrap();
        scrub.times.push(t.elapsed());
    }
    scrub.print();

    // The worst case for the lanes: the whole run in the width, ← back through it.
    app.handle(char('z')).await;
    let mut whole = Figures {
        name: "scrub ← one change, whole run in the lanes (z)",
        times: Vec::new(),
    };
    loop {
        let (at, _) = app.travelling().expect("travelling");
        if at == 0 {
            break;
        }
        app.handle(key(KeyCode::Left)).await;
        let t = Instant::now();
        app.tick();
        app.draw(&mut terminal).unwrap();
        whole.times.push(t.elapsed());
    }
    whole.print();

    // Jumps, with an event selected (its card scans the history up to the moment).
    let mut jumps = Figures {
        name: "jump (v, ], [, End+←) with an event selected",
        times: Vec::new(),
    };
    app.handle(char(',')).await;
    for _ in 0..20 {
        for event in [
            char('v'),
            char(']'),
            char('['),
            key(KeyCode::End),
            key(KeyCode::Left),
        ] {
            app.handle(event).await;
            let t = Instant::now();
            app.tick();
            app.draw(&mut terminal).unwrap();
            jumps.times.push(t.elapsed());
        }
    }
    jumps.print();

    // Paused in the past, nothing changes on screen: the loop has nothing to draw.
    let mut changed = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        app.tick();
        changed += usize::from(app.needs_draw());
    }
    println!("paused in the past for 2 s: {changed} frames due (0 = draws nothing)");
    assert_eq!(
        changed, 0,
        "a dashboard paused in the past must draw nothing"
    );
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
