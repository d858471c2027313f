//! The real dashboard driven by keys and clicks: key → Action → lab (real sockets) → screen,
//! drawn into a `TestBackend`. Every wait is for observed state, never a sleep-and-hope.

mod common;

use common::{code, ctrl_c, frame, key, until};
use forkscope::lab::{LabOptions, Snapshot};
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope_core::Policy;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use std::time::Duration;

async fn dashboard(policy: Policy) -> App {
    let start = Start {
        options: LabOptions {
            policy,
            ..LabOptions::default()
        },
        ..Start::default()
    };
    App::new(start, LogRing::default())
        .await
        .expect("the lab starts")
}

fn applied(snaps: &[Snapshot]) -> u64 {
    snaps
        .iter()
        .map(|s| s.view.client.as_ref().map_or(0, |c| c.applied))
        .min()
        .unwrap_or(0)
}

fn forked(snaps: &[Snapshot]) -> bool {
    snaps.iter().any(|s| {
        s.view
            .verdict
            .counts
            .iter()
            .any(|(k, _)| *k == forkscope_core::AnomalyKind::Fork)
    })
}

fn screen(terminal: &Terminal<TestBackend>) -> String {
    terminal.backend().to_string()
}

/// The seed incident by keys: n, a few events, t, d: the fork on screen.
async fn fork_by_keys(app: &mut App, terminal: &mut Terminal<TestBackend>) {
    app.handle(key('n')).await;
    until(app, terminal, "two applied events", |s| applied(s) >= 2).await;
    app.handle(key('t')).await;
    app.handle(key('d')).await;
    // A fork is an emit landing on the orphaned stream: the ╳ the lanes draw.
    until(app, terminal, "a fork", forked).await;
    // The lab's snapshot may be a step ahead of the last frame: tick once more, so the
    // dashboard's own timeline holds the fork too.
    frame(app, terminal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_keys_fork_the_lab_and_time_travel_finds_the_violation() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    fork_by_keys(&mut app, &mut terminal).await;
    frame(&mut app, &mut terminal);
    let live = screen(&terminal);
    assert!(live.contains("NAIVE") && live.contains("FORK"), "{live}");
    assert_eq!(app.travelling(), None);

    // v: back to the change where the fork first showed (the fork before the duplicates).
    app.handle(key('v')).await;
    let (moment, moments) = app.travelling().expect("travelling");
    assert!(moment < moments, "{moment} of {moments}");
    frame(&mut app, &mut terminal);
    let past = screen(&terminal);
    assert!(past.contains("TIME TRAVEL"), "{past}");
    assert!(
        past.contains("verdict FORK"),
        "the fork's moment shows it: {past}"
    );
    // One change further back there was no fork yet.
    app.handle(code(KeyCode::Left)).await;
    frame(&mut app, &mut terminal);
    let before = screen(&terminal);
    assert!(!before.contains("verdict FORK"), "{before}");
    // The lab was paused for the journey; End returns to live and lab time runs again.
    assert!(app.labs()[0].clock().paused());
    app.handle(code(KeyCode::End)).await;
    assert_eq!(app.travelling(), None);
    assert!(!app.labs()[0].clock().paused());
    frame(&mut app, &mut terminal);
    assert!(!screen(&terminal).contains("TIME TRAVEL"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_steps_of_their_own() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    fork_by_keys(&mut app, &mut terminal).await;
    app.handle(code(KeyCode::Home)).await;
    let at = |app: &App| app.travelling().unwrap().0;
    assert_eq!(at(&app), 0);
    // `]` from the start: each press a later decision, until none is left. How many fell into
    // the first moment (the attach, if the lab was quick) depends on the machine; the fork's
    // reconnect came long after it.
    let mut stops = Vec::new();
    loop {
        let before = at(&app);
        app.handle(key(']')).await;
        if at(&app) == before {
            break;
        }
        assert!(at(&app) > before, "the next decision is later");
        stops.push(at(&app));
    }
    assert!(!stops.is_empty(), "the fork's reconnect is a decision");
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("no decision that way"),
        "{}",
        screen(&terminal)
    );
    // `[` retraces them.
    for &stop in stops.iter().rev().skip(1) {
        app.handle(key('[')).await;
        assert_eq!(at(&app), stop);
    }
    // Esc closes the evidence card, then leaves time travel, before it would quit.
    app.handle(code(KeyCode::Esc)).await;
    assert!(app.travelling().is_some() && !app.quitting());
    app.handle(code(KeyCode::Esc)).await;
    assert_eq!(app.travelling(), None);
    assert!(!app.quitting());
    app.handle(code(KeyCode::Esc)).await;
    assert!(app.quitting());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selected_event_says_what_the_client_believed_and_what_was_true() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    fork_by_keys(&mut app, &mut terminal).await;
    app.handle(key('v')).await;
    // Walking back from the first violation's mark reaches an event (the cursor's moves, when
    // the checker judged them, have marks of their own)…
    let mut text = String::new();
    for _ in 0..10 {
        app.handle(key(',')).await;
        frame(&mut app, &mut terminal);
        text = screen(&terminal);
        if text.contains("payload") {
            break;
        }
    }
    assert!(text.contains("selected event"), "{text}");
    assert!(text.contains("payload"), "{text}");
    assert!(text.contains("truth:"), "{text}");
    // …and walking back finds a delivery the client applied twice.
    let mut seen_duplicate = false;
    for _ in 0..40 {
        app.handle(key(',')).await;
        frame(&mut app, &mut terminal);
        if screen(&terminal).contains("believing it new") {
            seen_duplicate = true;
            break;
        }
    }
    assert!(seen_duplicate, "{}", screen(&terminal));
    // Esc clears the selection first; the card goes.
    app.handle(code(KeyCode::Esc)).await;
    frame(&mut app, &mut terminal);
    assert!(!screen(&terminal).contains("selected event"));
    assert!(app.travelling().is_some());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_an_orphan_emit_explains_the_fork() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    fork_by_keys(&mut app, &mut terminal).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (x, y) = loop {
        frame(&mut app, &mut terminal);
        let buffer = terminal.backend().buffer().clone();
        let found = (0..buffer.area.height).find_map(|y| {
            (0..buffer.area.width)
                .find(|x| buffer[(*x, y)].symbol() == "╳")
                .map(|x| (x, y))
        });
        if let Some(at) = found {
            break at;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            screen(&terminal)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Freeze the screen first so the cell stays where it was drawn.
    app.handle(code(KeyCode::Left)).await;
    app.handle(code(KeyCode::Right)).await;
    frame(&mut app, &mut terminal);
    let buffer = terminal.backend().buffer().clone();
    let (x, y) = (0..buffer.area.width)
        .find(|x| buffer[(*x, y)].symbol() == "╳")
        .map_or((x, y), |x| (x, y));
    app.handle(Event::Mouse(MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: x,
        row: y,
        modifiers: KeyModifiers::NONE,
    }))
    .await;
    frame(&mut app, &mut terminal);
    let text = screen(&terminal);
    assert!(text.contains("selected event"), "{text}");
    assert!(text.contains("orphan still receiving: a FORK"), "{text}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presenter_mode_hides_the_verdict_until_revealed() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    app.handle(key('f')).await;
    app.handle(key('V')).await;
    fork_by_keys(&mut app, &mut terminal).await;
    frame(&mut app, &mut terminal);
    let hidden = screen(&terminal);
    assert!(hidden.contains("VERDICT HIDDEN"), "{hidden}");
    assert!(!hidden.contains("FORK"), "{hidden}");
    let lanes: Vec<&str> = hidden
        .lines()
        .filter(|l| l.contains("│s1 ") || l.contains("│s2 ") || l.contains("│client "))
        .collect();
    assert!(lanes.len() >= 3, "{hidden}");
    assert!(
        lanes.iter().all(|l| !l.contains('╳') && !l.contains('◆')),
        "no red marks while hidden: {hidden}"
    );
    assert!(hidden.contains("duplicates ?"), "{hidden}");
    assert!(
        hidden.contains("applied ?"),
        "the applied count waits too: {hidden}"
    );
    assert!(
        !hidden.contains("http"),
        "presenter mode drops the http pane: {hidden}"
    );
    app.handle(key('V')).await;
    frame(&mut app, &mut terminal);
    let revealed = screen(&terminal);
    assert!(revealed.contains("FORK"), "{revealed}");
    assert!(
        revealed
            .lines()
            .any(|l| l.contains("│client ") && l.contains('◆')),
        "{revealed}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_lanes_of_the_fork_show_at_60x20_and_in_compare_mode_at_80x24() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(60, 20)).unwrap();
    fork_by_keys(&mut app, &mut terminal).await;
    frame(&mut app, &mut terminal);
    // Too short for the evidence card beneath the panes: the card waits, and the fork's two
    // lanes stay on screen beside the invariant pane's verdict.
    let small = screen(&terminal);
    assert!(
        small.contains("│s1 ") && small.contains("│s2 ") && small.contains("verdict FORK"),
        "both lanes and the verdict at 60×20:\n{small}"
    );
    assert!(!small.contains("evidence"), "the card waits:\n{small}");
    // With room again, the card is there, and Esc closes it without quitting.
    let mut tall = Terminal::new(TestBackend::new(100, 40)).unwrap();
    frame(&mut app, &mut tall);
    assert!(screen(&tall).contains("evidence"), "{}", screen(&tall));
    app.handle(code(KeyCode::Esc)).await;
    assert!(!app.quitting(), "Esc closed the card, not the dashboard");
    frame(&mut app, &mut tall);
    assert!(!screen(&tall).contains("evidence"), "{}", screen(&tall));
    app.handle(key('m')).await;
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    until(
        &mut app,
        &mut terminal,
        "two applied events in both labs",
        |s| s.len() == 2 && applied(s) >= 2,
    )
    .await;
    app.handle(key('t')).await;
    app.handle(key('d')).await;
    until(&mut app, &mut terminal, "naive forks", forked).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        frame(&mut app, &mut terminal);
        let text = screen(&terminal);
        if text.matches("│s2 ").count() >= 1 && text.contains("│s1 ") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_dashboard_in_the_past_has_nothing_new_to_draw() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    until(&mut app, &mut terminal, "an applied event", |s| {
        applied(s) >= 1
    })
    .await;
    app.handle(code(KeyCode::Left)).await;
    frame(&mut app, &mut terminal);
    // The background emitter would have fired several times by now were lab time running.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        app.tick();
        assert!(!app.needs_draw(), "the screen would change");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knobs_turn_the_running_lab_and_fenced_refuses_a_broken_condition_five() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    frame(&mut app, &mut terminal);
    let grace = |app: &App| app.labs()[0].core().server.config().grace_ms;
    assert_eq!(grace(&app), 5_000);
    // k, then → on the grace window until it reaches the retry budget (15 s): refused.
    app.handle(key('k')).await;
    for _ in 0..5 {
        app.handle(code(KeyCode::Right)).await;
    }
    frame(&mut app, &mut terminal);
    let card = screen(&terminal);
    assert!(card.contains("5000 → 15000"), "{card}");
    assert!(
        card.contains("✘ condition 5") && card.contains("fenced refuses it"),
        "{card}"
    );
    app.handle(code(KeyCode::Enter)).await;
    frame(&mut app, &mut terminal);
    let refused = screen(&terminal);
    assert!(refused.contains("refused: fenced"), "{refused}");
    assert_eq!(grace(&app), 5_000, "a refused change changes nothing");
    // One rung back (14 s): condition 5 holds, and Enter turns the running lab.
    app.handle(code(KeyCode::Left)).await;
    app.handle(code(KeyCode::Enter)).await;
    assert_eq!(grace(&app), 14_000);
    frame(&mut app, &mut terminal);
    let applied = screen(&terminal);
    assert!(applied.contains("✓ applied · Esc closes"), "{applied}");
    // Enter, Esc (a habit) closes the card and leaves the dashboard running.
    app.handle(code(KeyCode::Esc)).await;
    assert!(!app.quitting());
    frame(&mut app, &mut terminal);
    let after = screen(&terminal);
    assert!(!after.contains("knobs ·"), "the card closes: {after}");
    assert!(after.contains("grace 14000 ms < retry budget"), "{after}");
    // The link's added latency turns live too: the fault proxy's.
    app.handle(key('k')).await;
    for _ in 0..5 {
        app.handle(code(KeyCode::Down)).await;
    }
    app.handle(code(KeyCode::Right)).await;
    app.handle(code(KeyCode::Enter)).await;
    assert_eq!(app.labs()[0].proxy().latency_ms(), 5);
    app.handle(code(KeyCode::Esc)).await;
    // A start-time knob (the tool call's steps) restarts the lab with it.
    app.handle(key('k')).await;
    for _ in 0..7 {
        app.handle(code(KeyCode::Down)).await;
    }
    app.handle(code(KeyCode::Right)).await;
    app.handle(code(KeyCode::Enter)).await;
    assert_eq!(app.labs()[0].options().tool_steps, 16);
    assert_eq!(grace(&app), 14_000, "the restart keeps the live knobs");
    assert_eq!(app.labs()[0].proxy().latency_ms(), 5, "and the latency");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_i_did_in_the_dashboard_saves_as_a_scenario_that_replays_with_the_same_verdict() {
    let dir = std::env::temp_dir().join(format!("forkscope-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let start = Start {
        save_dir: dir.clone(),
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    fork_by_keys(&mut app, &mut terminal).await;
    app.handle(key('w')).await;
    frame(&mut app, &mut terminal);
    let saved = dir.join("forkscope-saved-1.toml");
    assert!(
        screen(&terminal).contains("forkscope-saved-1.toml"),
        "{}",
        screen(&terminal)
    );
    // A second save never overwrites the first.
    app.handle(key('w')).await;
    assert!(dir.join("forkscope-saved-2.toml").exists());
    app.stop().await;
    let text = std::fs::read_to_string(&saved).unwrap();
    // n started a fresh naive lab: what was done since is the run the file replays, naive.
    assert!(!text.contains("set_policy"), "{text}");
    let scenario = forkscope::scenario::load(&saved).unwrap();
    assert!(
        scenario.expect.get(Policy::Naive).is_some()
            && scenario.expect.get(Policy::Fenced).is_none(),
        "the file names the policy in force, naive: {scenario:?}"
    );
    let run = forkscope::scenario::play(&scenario, Policy::Naive).await;
    assert!(
        run.error.is_none(),
        "{:?}\n{text}\n{:?}",
        run.error,
        run.transcript
    );
    assert!(run.checks.iter().all(|c| c.ok), "{:?}\n{text}", run.checks);
    let verdict = run.verdict.unwrap();
    assert!(
        verdict.count(forkscope_core::AnomalyKind::Fork) >= 1,
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_at_80x24_scrolls_to_its_glossary_and_keys_wait_behind_the_enlarge_screen() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    app.handle(key('?')).await;
    frame(&mut app, &mut terminal);
    let top = screen(&terminal);
    assert!(top.contains("help · ↑↓ scroll"), "{top}");
    // One column at 80: every key's words on its own line, none wrapped to the border.
    assert!(
        top.contains("│ d        drop the connection (NAT drop)       "),
        "{top}"
    );
    for _ in 0..100 {
        app.handle(code(KeyCode::Down)).await;
    }
    frame(&mut app, &mut terminal);
    let bottom = screen(&terminal);
    // At the end: the five conditions, each with what it means.
    assert!(bottom.contains("the five conditions"), "{bottom}");
    assert!(
        bottom.contains("an orphan is fenced before the client stops retrying: no race"),
        "{bottom}"
    );
    // Back up: the glossary, and every key on the way.
    let (mut glossary, mut knobs) = (false, false);
    for _ in 0..100 {
        frame(&mut app, &mut terminal);
        let shown = screen(&terminal);
        glossary |= shown.contains("CURSOR BACK the client's cursor moved backwards")
            && shown.contains("the lab time the lanes span");
        knobs |= shown.contains(" k        knobs: grace, retry, rates…");
        app.handle(code(KeyCode::Up)).await;
    }
    assert!(
        glossary && knobs,
        "the glossary and every key are reachable"
    );
    app.handle(code(KeyCode::Esc)).await;
    assert!(!app.quitting(), "Esc closes the help first");
    // Below 60×20 the screen asks to be enlarged, and keys other than quit wait for it.
    let mut tiny = Terminal::new(TestBackend::new(40, 10)).unwrap();
    frame(&mut app, &mut tiny);
    assert!(screen(&tiny).contains("enlarge the terminal"));
    app.handle(key('k')).await;
    app.handle(key('?')).await;
    frame(&mut app, &mut terminal);
    let back = screen(&terminal);
    assert!(
        !back.contains("knobs ·") && !back.contains("help ·"),
        "{back}"
    );
    app.handle(key('q')).await;
    assert!(app.quitting(), "q still quits");
    app.stop().await;
}

/// Ctrl-C quits whatever is open: the knobs (where `c` alone means nothing), help, the
/// scenario picker, a too-small screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_quits_over_every_overlay() {
    for opens in ['k', '?', 'p'] {
        let mut app = dashboard(Policy::Fenced).await;
        let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
        app.handle(key(opens)).await;
        frame(&mut app, &mut terminal);
        assert!(app.overlay_open(), "{opens} opens an overlay");
        app.handle(ctrl_c()).await;
        assert!(
            app.quitting(),
            "Ctrl-C quits over the overlay {opens} opened"
        );
        app.stop().await;
    }
    let mut app = dashboard(Policy::Fenced).await;
    let mut tiny = Terminal::new(TestBackend::new(40, 10)).unwrap();
    frame(&mut app, &mut tiny);
    app.handle(ctrl_c()).await;
    assert!(app.quitting(), "Ctrl-C quits a too-small screen");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_compare_mode_naive_takes_a_knob_that_fenced_refuses_and_the_card_says_both() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    app.handle(key('m')).await;
    assert_eq!(app.labs().len(), 2);
    app.handle(key('k')).await;
    for _ in 0..5 {
        app.handle(code(KeyCode::Right)).await;
    }
    app.handle(code(KeyCode::Enter)).await;
    let grace: Vec<(Policy, u64)> = app
        .labs()
        .iter()
        .map(|l| (l.policy(), l.core().server.config().grace_ms))
        .collect();
    assert_eq!(
        grace,
        vec![(Policy::Naive, 15_000), (Policy::Fenced, 5_000)],
        "naive runs a broken condition 5; fenced refuses it"
    );
    frame(&mut app, &mut terminal);
    let card = screen(&terminal);
    assert!(card.contains("naive took it · refused: fenced:"), "{card}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_line_fits_every_width_and_always_ends_with_the_way_out() {
    let mut app = dashboard(Policy::Fenced).await;
    for (w, h) in [(60, 20), (80, 24), (100, 30), (120, 40), (200, 50)] {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
        frame(&mut app, &mut terminal);
        let buffer = terminal.backend().buffer();
        let last: String = (0..w)
            .map(|x| buffer[(x, h - 1)].symbol().to_owned())
            .collect();
        let last = last.trim_end();
        assert!(last.starts_with(" ? help"), "{w}×{h}: {last:?}");
        assert!(last.ends_with("q quit"), "{w}×{h}: {last:?}");
        // Every key shown is whole: a cut list says so with `…` before the way out.
        let whole = last.contains("r reset");
        assert_eq!(!whole, last.contains(" … q quit"), "{w}×{h}: {last:?}");
    }
    app.stop().await;
}

/// `R` restarts the lab under the policy in force, not the one it was launched with: the
/// workshop's "n (fenced), R, t, d" resumes cleanly in a lab launched naive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_the_policy_in_force() {
    let mut app = dashboard(Policy::Naive).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    until(&mut app, &mut terminal, "a connected naive lab", |s| {
        applied(s) >= 1
    })
    .await;
    // o lists every policy; Enter starts a fresh lab under the chosen one and says so.
    for sdk in Policy::SDKS {
        app.handle(key('o')).await;
        let from = app.labs()[0].policy();
        let at = |p: Policy| Policy::ALL.iter().position(|x| *x == p).unwrap();
        for _ in 0..(at(sdk) + Policy::ALL.len() - at(from)) % Policy::ALL.len() {
            app.handle(code(KeyCode::Down)).await;
        }
        frame(&mut app, &mut terminal);
        assert!(
            screen(&terminal).contains(&format!("▶ {}", sdk.name())),
            "the picker marks {sdk}: {}",
            screen(&terminal)
        );
        app.handle(code(KeyCode::Enter)).await;
        assert_eq!(app.labs()[0].policy(), sdk);
    }
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("policy rmcp: a resume replays"),
        "the pick says what is in force: {}",
        screen(&terminal)
    );
    assert!(
        screen(&terminal).contains(" RMCP "),
        "{}",
        screen(&terminal)
    );
    // A fresh lab: nothing judged under naive shows under rmcp's header.
    let snap = app.labs()[0].snapshot();
    assert!(snap.view.verdict.clean, "{:?}", snap.view.verdict);
    // n is the mission's toggle: from an SDK's policy to fenced, then naive ⇄ fenced.
    app.handle(key('n')).await;
    assert_eq!(app.labs()[0].policy(), Policy::Fenced);
    app.handle(key('n')).await;
    assert_eq!(app.labs()[0].policy(), Policy::Naive);
    app.handle(key('n')).await;
    assert_eq!(app.labs()[0].policy(), Policy::Fenced);
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("policy fenced"),
        "n says what it did: {}",
        screen(&terminal)
    );
    app.handle(key('R')).await;
    assert_eq!(app.labs()[0].policy(), Policy::Fenced, "R kept fenced");
    until(&mut app, &mut terminal, "the restarted lab applies", |s| {
        applied(s) >= 2
    })
    .await;
    assert!(
        screen(&terminal).contains("FENCED"),
        "{}",
        screen(&terminal)
    );
    app.handle(key('t')).await;
    app.handle(key('d')).await;
    until(&mut app, &mut terminal, "a resume", |s| {
        s.iter().all(|s| s.view.counters.resumes_accepted >= 1)
    })
    .await;
    assert!(!forked(
        &app.labs().iter().map(|l| l.snapshot()).collect::<Vec<_>>()
    ));
}

/// Help pauses the lab while the room reads it, and closing it runs the lab again; a lab the
/// presenter had paused stays paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_pauses_the_lab_and_closing_it_resumes() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    until(&mut app, &mut terminal, "a connected lab", |s| {
        applied(s) >= 1
    })
    .await;
    assert!(!app.labs()[0].clock().paused());
    app.handle(key('?')).await;
    assert!(app.labs()[0].clock().paused(), "help paused the lab");
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("the lab is paused while help is open"),
        "and says so: {}",
        screen(&terminal)
    );
    app.handle(key('?')).await;
    assert!(!app.labs()[0].clock().paused(), "closing help resumed it");
    // Paused by the presenter first: help leaves it paused.
    app.handle(key(' ')).await;
    assert!(app.labs()[0].clock().paused());
    app.handle(key('?')).await;
    app.handle(code(KeyCode::Esc)).await;
    assert!(
        app.labs()[0].clock().paused(),
        "still the presenter's pause"
    );
}

/// Selecting an event in a running lab pauses it, as space does, so the event stays in view;
/// space runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selecting_an_event_stops_following() {
    let mut app = dashboard(Policy::Fenced).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    until(&mut app, &mut terminal, "events to select", |s| {
        applied(s) >= 2
    })
    .await;
    assert!(!app.labs()[0].clock().paused());
    app.handle(key(',')).await;
    assert!(app.labs()[0].clock().paused(), "selecting paused the lab");
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("space runs the lab again"),
        "{}",
        screen(&terminal)
    );
    app.handle(key(' ')).await;
    assert!(!app.labs()[0].clock().paused(), "space runs it again");
    app.stop().await;
}

/// The number after `prefix` in `text` up to its unit, whole (`None` if `prefix` is absent).
fn seconds_after(text: &str, prefix: &str) -> Option<String> {
    let at = text.find(prefix)? + prefix.len();
    let rest = &text[at..];
    let end = rest.find(" s")?;
    let number = &rest[..end];
    assert!(
        number.parse::<f64>().is_ok(),
        "'{prefix}' is followed by a whole number: {text}"
    );
    Some(number.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_says_how_far_back_travel_reaches_at_every_size() {
    // A budget a few dozen moments fill, so the run thins in seconds, not hours.
    let start = Start {
        options: LabOptions {
            policy: Policy::Fenced,
            background: None,
            ..LabOptions::default()
        },
        run_budget: Some(96 << 10),
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    until(&mut app, &mut terminal, "the client's stream", |s| {
        s[0].view
            .client
            .as_ref()
            .is_some_and(|c| c.bound_stream.is_some())
    })
    .await;
    let header = |terminal: &Terminal<TestBackend>| {
        screen(terminal)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    for _ in 0..3 {
        app.handle(key('+')).await;
    }
    // An event at a time, each a moment a lab second or so apart, until the live header says
    // how far back travel goes: the run was thinned to stay within its budget.
    let mut presses = 0;
    while !header(&terminal).contains("back to") {
        let before = app.labs()[0].snapshot();
        let (applied_before, at) = (applied(std::slice::from_ref(&before)), before.view.at);
        app.handle(key('e')).await;
        until(
            &mut app,
            &mut terminal,
            "the event applied, a lab second on",
            |s| applied(s) > applied_before && s[0].view.at.as_millis() > at.as_millis() + 1_000,
        )
        .await;
        presses += 1;
        assert!(presses < 2_000, "never thinned: {}", header(&terminal));
    }
    assert!(app.kept_bytes() <= 96 << 10, "{}", app.kept_bytes());

    // Home goes to the oldest moment kept, and the line says that is where travel reaches.
    app.handle(code(KeyCode::Home)).await;
    assert_eq!(app.travelling().map(|(at, _)| at), Some(0));
    for (width, height) in [(60, 20), (80, 24), (100, 30)] {
        terminal.backend_mut().resize(width, height);
        frame(&mut app, &mut terminal);
        let line = header(&terminal);
        assert!(line.contains("⏪"), "{width}×{height}: {line}");
        let back = seconds_after(&line, "back to ").expect("the reach is shown");
        let shown = seconds_after(&line, "lab ")
            .or_else(|| seconds_after(&line, "TIME TRAVEL "))
            .or_else(|| seconds_after(&line, "⏪ "))
            .expect("the moment's lab time is shown");
        assert_eq!(
            back, shown,
            "{width}×{height}: Home is where travel reaches: {line}"
        );
        let (_, moments) = app.travelling().unwrap();
        assert!(
            line.contains(&format!("1 of {moments}")) || line.contains(&format!("1/{moments}")),
            "{width}×{height}: {line}"
        );
        // Nothing was forgotten: the first moment is the run's start, and the key line says
        // from when every change is kept, in full.
        let keys = screen(&terminal)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        let since = seconds_after(&keys, "run's start; every change since lab ")
            .unwrap_or_else(|| panic!("{width}×{height}: {keys}"));
        assert!(since.parse::<f64>().unwrap() > back.parse::<f64>().unwrap());
        if let Some(shown) = seconds_after(&line, "since ") {
            assert_eq!(shown, since, "{width}×{height}: {line}");
        }
    }
    // Live again: the header still says how far back travel reaches.
    app.handle(code(KeyCode::End)).await;
    for (width, height) in [(60, 20), (80, 24), (100, 30)] {
        terminal.backend_mut().resize(width, height);
        frame(&mut app, &mut terminal);
        let line = header(&terminal);
        assert!(
            seconds_after(&line, "back to ").is_some(),
            "{width}×{height}: {line}"
        );
    }
    app.stop().await;
}

/// `--compare naive,rmcp,fenced` starts three labs; in compare mode `n` keeps each lab's
/// policy and `o` picks the middle one's (not one shown already); `m` leaves and returns to the
/// same three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_mode_of_three_turns_its_middle_lab() {
    let start = Start {
        compare: Some(vec![Policy::Naive, Policy::Rmcp, Policy::Fenced]),
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = Terminal::new(TestBackend::new(200, 50)).unwrap();
    let policies = |app: &App| app.labs().iter().map(|l| l.policy()).collect::<Vec<_>>();
    assert_eq!(
        policies(&app),
        [Policy::Naive, Policy::Rmcp, Policy::Fenced]
    );
    app.handle(key('n')).await;
    assert_eq!(
        policies(&app),
        [Policy::Naive, Policy::Rmcp, Policy::Fenced],
        "n keeps compare mode's policies"
    );
    // o: the middle's policy is selected; up to fenced is refused (shown already), ts-sdk taken.
    app.handle(key('o')).await;
    for _ in 0..5 {
        app.handle(code(KeyCode::Up)).await;
    }
    app.handle(code(KeyCode::Enter)).await;
    assert_eq!(
        policies(&app),
        [Policy::Naive, Policy::Rmcp, Policy::Fenced],
        "fenced is shown already"
    );
    app.handle(key('o')).await;
    for _ in 0..3 {
        app.handle(code(KeyCode::Up)).await;
    }
    app.handle(code(KeyCode::Enter)).await;
    assert_eq!(
        policies(&app),
        [Policy::Naive, Policy::TsSdk, Policy::Fenced],
        "rmcp → ts-sdk, three rows up"
    );
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("middle lab: policy ts-sdk"),
        "{}",
        screen(&terminal)
    );
    app.handle(key('m')).await;
    assert_eq!(app.labs().len(), 1);
    app.handle(key('m')).await;
    assert_eq!(
        policies(&app),
        [Policy::Naive, Policy::TsSdk, Policy::Fenced]
    );
    app.stop().await;
}

/// `Y` restarts the lab on 2026-07-28 alone: no session, and `a` `X` under naive shows two task
/// lanes of one call; `Y` twice more returns to both revisions, the 2025-11-25 client back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn y_runs_the_lab_on_2026_alone_and_its_task_lanes_show_the_double_run() {
    let mut app = dashboard(Policy::Naive).await;
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    until(&mut app, &mut terminal, "a connected lab", |s| {
        applied(s) >= 1
    })
    .await;
    app.handle(key('Y')).await;
    frame(&mut app, &mut terminal);
    assert!(
        screen(&terminal).contains("2026-07-28 alone"),
        "{}",
        screen(&terminal)
    );
    app.handle(key('a')).await;
    app.handle(key('X')).await;
    until(&mut app, &mut terminal, "two tasks of one call", |s| {
        s.iter().any(|s| {
            s.view
                .verdict
                .counts
                .iter()
                .any(|(k, _)| *k == forkscope_core::AnomalyKind::EffectTwice)
        })
    })
    .await;
    frame(&mut app, &mut terminal);
    let shown = screen(&terminal);
    // No session, no stream: the server's pane lists its tasks, the second a run again of
    // the one call; the invariant pane lists the tasks extension's guarantees, naive's first
    // one broken; the header names the revision.
    assert!(shown.contains("server · tasks"), "{shown}");
    assert!(shown.contains("⇉ run 2 of its call"), "{shown}");
    assert!(
        shown.contains("✘ 1 a re-issue finds its task by key"),
        "{shown}"
    );
    assert!(
        shown.lines().next().unwrap().contains("2026-07-28 only"),
        "{shown}"
    );
    assert!(shown.contains("1 orphaned"), "{shown}");
    // Two lanes, one per task: the orphan's ⊗ on one, the second runner's ⇉ (or a step it
    // applied again, ◈) on the other.
    let task_lanes: Vec<&str> = shown
        .lines()
        .map(|l| l.trim_start_matches('"'))
        // A task's lane is labelled `t` and its id's six hex digits, and runs in dots.
        .filter(|l| {
            l.contains("··")
                && l.strip_prefix("│t").is_some_and(|rest| {
                    rest.chars().take(6).all(|c| c.is_ascii_hexdigit())
                        && rest.get(6..).is_some_and(|r| r.starts_with(' '))
                })
        })
        .collect();
    assert_eq!(task_lanes.len(), 2, "{shown}");
    assert!(task_lanes.iter().any(|l| l.contains('⊗')), "{shown}");
    assert!(
        task_lanes
            .iter()
            .any(|l| l.contains('⇉') || l.contains('◈')),
        "{shown}"
    );
    app.handle(key('Y')).await;
    app.handle(key('Y')).await;
    until(&mut app, &mut terminal, "the 2025-11-25 client back", |s| {
        applied(s) >= 1
    })
    .await;
    app.stop().await;
}
