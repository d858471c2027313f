//! What the dashboard's integration tests share: key presses as the terminal delivers them, a
//! turn of the dashboard's loop, and a wait on observed lab state.

#![allow(dead_code)] // each test crate uses its own part

pub mod replica_lab;
pub mod services;

use forkscope::lab::{LabOptions, Snapshot};
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope_core::client::Phase;
use forkscope_core::{AnomalyKind, Policy};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers,
};
use std::time::Duration;

/// `forkscope serve`'s server in process under `policy`, on a free port of 127.0.0.1: it, and
/// its endpoint's URL.
pub async fn serve(
    policy: Policy,
    options: forkscope::wire::server::ServeOptions,
) -> (forkscope::wire::server::RunningServer, String) {
    let core = forkscope::wire::Core::new(forkscope_core::LabConfig::default(), policy).unwrap();
    let running = forkscope::wire::server::start(
        forkscope::wire::Shared::new(core),
        std::sync::Arc::new(forkscope::clock::LabClock::new()),
        options,
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let url = format!("http://{}/mcp", running.addr);
    (running, url)
}

/// A plain character key, pressed.
pub fn key(c: char) -> Event {
    code(KeyCode::Char(c))
}

/// Ctrl-C, pressed.
pub fn ctrl_c() -> Event {
    Event::Key(KeyEvent {
        code: KeyCode::Char('c'),
        modifiers: KeyModifiers::CONTROL,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    })
}

/// Any key, pressed without modifiers.
pub fn code(code: KeyCode) -> Event {
    Event::Key(KeyEvent {
        code,
        modifiers: KeyModifiers::NONE,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    })
}

/// One turn of the dashboard's loop, as the frame deadline runs it: the tick (the labs'
/// snapshots, a moment for time travel, the evidence pinned), then a frame.
pub fn frame(app: &mut App, terminal: &mut Terminal<TestBackend>) {
    app.tick();
    app.draw(terminal).unwrap();
}

/// Turns the loop until `ready` holds for the labs' snapshots (a guard of 30 s against a hang).
pub async fn until(
    app: &mut App,
    terminal: &mut Terminal<TestBackend>,
    what: &str,
    ready: impl Fn(&[Snapshot]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        frame(app, terminal);
        let snaps: Vec<Snapshot> = app.labs().iter().map(|l| l.snapshot()).collect();
        if ready(&snaps) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reached: {what}\n{}",
            terminal.backend()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `ready` of every lab.
pub fn each(ready: impl Fn(&Snapshot) -> bool) -> impl Fn(&[Snapshot]) -> bool {
    move |snaps| snaps.iter().all(&ready)
}

pub fn applied(s: &Snapshot) -> u64 {
    s.view.client.as_ref().map_or(0, |c| c.applied)
}

pub fn decisions(s: &Snapshot) -> u64 {
    let c = &s.view.counters;
    c.resumes_accepted + c.rejected_total() + c.new_streams_flagged + c.new_streams_silent
}

/// The seed incident by keys on a paused clock: three events (a step of lab time after each),
/// `t` strips the token, `d` drops the connection, `c` reconnects without waiting for the
/// backoff, and lab time runs on to the background emitter's first event. Naive forks;
/// fenced resumes by the key in the event id.
pub async fn seed(policy: Policy, present: bool, compare: bool) -> (App, Terminal<TestBackend>) {
    let start = Start {
        options: LabOptions {
            policy,
            start_paused: true,
            ..LabOptions::default()
        },
        present,
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default())
        .await
        .expect("the lab starts");
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    if compare {
        app.handle(key('m')).await;
    }
    until(
        &mut app,
        &mut terminal,
        "connected",
        each(|s| {
            s.view
                .client
                .as_ref()
                .is_some_and(|c| c.phase == Phase::Connected)
        }),
    )
    .await;
    emit_and_step(&mut app, &mut terminal, 3).await;
    app.handle(key('t')).await;
    app.handle(key('d')).await;
    until(
        &mut app,
        &mut terminal,
        "reconnecting",
        each(|s| {
            s.view
                .client
                .as_ref()
                .is_some_and(|c| matches!(c.phase, Phase::Reconnecting { .. }))
        }),
    )
    .await;
    // The stream opened at the start was a decision too: wait for the one after it.
    let before = decisions(&app.labs()[0].snapshot());
    app.handle(key('c')).await;
    // The decision, and the client's record of the exchange (stamped when it lands).
    until(
        &mut app,
        &mut terminal,
        "the server's decision",
        each(|s| {
            decisions(s) > before && s.exchanges.iter().filter(|e| e.method == "GET").count() >= 2
        }),
    )
    .await;
    // And what the resume replayed, applied (naive: the three again; fenced: nothing): the
    // lab's clock moves on only after, so every run's records come in one order.
    until(
        &mut app,
        &mut terminal,
        "the replay applied",
        each(|s| match s.view.policy {
            Policy::Naive => applied(s) >= 6,
            _ => applied(s) >= 3,
        }),
    )
    .await;
    // Lab time to 0.7 s, where the background emitter writes to the stream it was given: the
    // orphan under naive (the fork), the resumed stream under fenced.
    for _ in 0..4 {
        app.handle(key('s')).await;
    }
    until(
        &mut app,
        &mut terminal,
        "the background emit judged",
        each(|s| match s.view.policy {
            Policy::Naive => {
                s.view.verdict.count(AnomalyKind::Fork) >= 1
                    && s.view.verdict.count(AnomalyKind::Duplicate) >= 3
            }
            Policy::Fenced => applied(s) >= 4 && s.view.counters.resumes_accepted >= 1,
            other => unreachable!("the seed incident is shown under naive and fenced, not {other}"),
        }),
    )
    .await;
    // A frame of the final state: time travel keeps what the screen showed.
    frame(&mut app, &mut terminal);
    (app, terminal)
}

/// Draws the dashboard as it stands into a fresh terminal of `width`×`height`.
pub fn shot(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    frame(app, &mut terminal);
    terminal.backend().to_string()
}

/// What differs from run to run on the real dashboard, filtered out of its snapshots: session
/// ids, tokens and ports; the log pane's lines, whose order follows the tasks that wrote them.
pub fn filters() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT");
    settings.add_filter(r"\b[0-9a-f]{6}\b", "SESSID");
    settings.add_filter(r"\b[0-9a-f]{8,}…?", "TOKEN…");
    settings.add_filter(r"(s\d+-\d+)\.[A-Za-z0-9_-]+…?", "$1.KEY…");
    settings.add_filter(r"(?m)^(│(INFO|WARN|DEBUG|ERROR) ).*$", "$1…");
    // An id cut short where an overlay covers the pane.
    settings.add_filter(r"\b[0-9a-f]{3,5}…", "ID…");
    settings
}

/// `e` then `s`, `events` times, each emit applied before the paused clock steps on: the
/// seed's opening, one event at a time.
pub async fn emit_and_step(app: &mut App, terminal: &mut Terminal<TestBackend>, events: u64) {
    for n in 1..=events {
        app.handle(key('e')).await;
        until(app, terminal, "applied", each(|s| applied(s) >= n)).await;
        app.handle(key('s')).await;
    }
}

/// The shipped scenarios, in name order.
pub fn shipped_scenarios() -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
    files.sort();
    files
}

/// `step N of M` in a working task's status message (a `tasks/get` answer): N.
pub fn steps_done(read: &serde_json::Value) -> Option<u64> {
    let message = read["result"]["statusMessage"].as_str()?;
    message
        .strip_prefix("step ")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}
