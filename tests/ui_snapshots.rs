//! Whole-screen snapshots of the real dashboard (`App`, real sockets, lab time paused) after
//! the keys a person presses: an idle lab, the seed incident under naive (the fork) and under
//! fenced (a typed rejection), compare mode, help, the picker, the knobs, a scenario playing,
//! the "prove it" card, the evidence card, and the sizes a room uses. Every wait is for
//! observed state; what differs from run to run (ids, tokens, ports, log lines) is filtered.

mod common;

use common::{code, emit_and_step, filters, frame, key, seed, shot, until};
use forkscope::lab::LabOptions;
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope::tui::panes::lanes::ORPHAN_EMIT;
use forkscope_core::client::Phase;
use forkscope_core::{LabConfig, Policy, StreamIdentity};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;
use std::time::Duration;

fn snapshot(name: &str, screen: &str) {
    filters().bind(|| insta::assert_snapshot!(name, screen));
}

/// A connected lab on a paused clock that has applied `events` background events.
async fn idle(policy: Policy, events: u64) -> (App, Terminal<TestBackend>) {
    let options = LabOptions {
        policy,
        ..LabOptions::default()
    };
    idle_with(options, events).await
}

async fn idle_with(options: LabOptions, events: u64) -> (App, Terminal<TestBackend>) {
    let start = Start {
        options: LabOptions {
            start_paused: true,
            ..options
        },
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default())
        .await
        .expect("the lab starts");
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    // Connected, and the priming event read (its id is the cursor): the lanes then show it
    // before the first emit on every run, however loaded the machine.
    until(&mut app, &mut terminal, "connected and primed", |s| {
        s.iter().all(|s| {
            s.view
                .client
                .as_ref()
                .is_some_and(|c| c.phase == Phase::Connected && c.cursor.is_some())
        })
    })
    .await;
    emit_and_step(&mut app, &mut terminal, events).await;
    frame(&mut app, &mut terminal);
    (app, terminal)
}

/// Turns the loop until the screen at `width`×`height` shows `text` (30 s guard).
async fn until_shown(app: &mut App, width: u16, height: u16, text: &str) -> String {
    until_shown_any(app, width, height, &[text]).await
}

/// Waits until the screen shows any of `texts` (the wordings a pane fits to its width).
async fn until_shown_any(app: &mut App, width: u16, height: u16, texts: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let screen = shot(app, width, height);
        if texts.iter().any(|t| screen.contains(t)) {
            return screen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not shown: {texts:?}\n{screen}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_lab() {
    let (mut app, _) = idle(Policy::Fenced, 3).await;
    let screen = shot(&mut app, 120, 40);
    assert!(screen.contains("CLEAN"), "{screen}");
    assert!(screen.contains("initialize"), "the http pane:\n{screen}");
    snapshot("idle_lab", &screen);
    app.stop().await;
}

/// The seed incident under naive: the fork, its orphan emits, the evidence card; and the
/// sizes a room uses, down to the one that asks for a larger terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_mid_incident_shows_the_fork() {
    let (mut app, _) = seed(Policy::Naive, false, false).await;
    let screen = shot(&mut app, 120, 40);
    assert!(screen.contains("FORK ×1"), "{screen}");
    assert!(screen.contains("orphaned"), "{screen}");
    assert!(
        screen.contains(ORPHAN_EMIT),
        "orphan emits have their own glyph:\n{screen}"
    );
    // The evidence card pins the fork and leaves the verdict on screen.
    for (width, height) in [(120, 40), (80, 24)] {
        let text = shot(&mut app, width, height);
        assert!(
            text.contains("evidence · naive lab"),
            "{width}×{height}:\n{text}"
        );
        assert!(text.contains("verdict FORK"), "{width}×{height}:\n{text}");
    }
    snapshot("naive_mid_incident_shows_the_fork", &screen);
    // The fork is two lanes receiving at once: both visible at the smallest sizes.
    app.handle(code(KeyCode::Enter)).await; // the evidence card down
    for (width, height) in [(60, 20), (80, 24)] {
        let text = shot(&mut app, width, height);
        let lane = |name: &str| {
            text.lines()
                .any(|l| l.trim_start_matches(['"', '│']).starts_with(name))
        };
        assert!(
            lane("s1 ") && lane("s2 ") && lane("client"),
            "{width}×{height}: both stream lanes and the client's:\n{text}"
        );
        assert!(text.contains("FORK ×1"), "{width}×{height}:\n{text}");
    }
    let usable = shot(&mut app, 80, 24);
    snapshot("usable_80x24", &usable);
    // 100×30, a common laptop split: the client's last row and the log keep their rows (with no
    // tool call running, that row is what the client was owed; a running call takes it).
    let laptop = shot(&mut app, 100, 30);
    assert!(laptop.contains("owed    "), "{laptop}");
    assert!(laptop.contains("verdict FORK"), "{laptop}");
    assert!(laptop.contains("log"), "{laptop}");
    let tiny = shot(&mut app, 40, 10);
    assert!(tiny.contains("enlarge the terminal"), "{tiny}");
    app.stop().await;
}

/// Fenced with the seed's two-header identity: the stripped token is refused with a typed
/// 428, pinned as evidence, and the refusal stays in the http pane while the client starts
/// over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_rejection() {
    let options = LabOptions {
        policy: Policy::Fenced,
        config: LabConfig {
            identity: StreamIdentity::TokenHeader,
            ..LabConfig::default()
        },
        ..LabOptions::default()
    };
    let (mut app, mut terminal) = idle_with(options, 3).await;
    app.handle(key('t')).await;
    app.handle(key('d')).await;
    until(&mut app, &mut terminal, "reconnecting", |s| {
        s.iter().all(|s| {
            s.view
                .client
                .as_ref()
                .is_some_and(|c| matches!(c.phase, Phase::Reconnecting { .. }))
        })
    })
    .await;
    app.handle(key('c')).await;
    // The refusal, then the client's new session: DELETE, initialize, a new stream.
    until(&mut app, &mut terminal, "the client starts over", |s| {
        s.iter().all(|s| {
            s.view.counters.rejected_total() >= 1
                && s.exchanges
                    .iter()
                    .filter(|e| e.what == "open stream")
                    .count()
                    >= 2
                && s.view
                    .client
                    .as_ref()
                    .is_some_and(|c| c.phase == Phase::Connected)
        })
    })
    .await;
    let screen = shot(&mut app, 120, 40);
    assert!(screen.contains("CLEAN"), "{screen}");
    assert!(screen.contains("1 rejected"), "{screen}");
    assert!(
        screen.contains("typed rejections 428 missing_token ×1"),
        "{screen}"
    );
    assert!(
        screen.contains("428 missing_token"),
        "the evidence card:\n{screen}"
    );
    for (width, height) in [(120, 40), (100, 30)] {
        let text = shot(&mut app, width, height);
        assert!(
            text.contains("GET    428 resume"),
            "{width}×{height}:\n{text}"
        );
    }
    snapshot("fenced_rejection", &screen);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_mode() {
    let (mut app, _) = seed(Policy::Naive, false, true).await;
    let screen = shot(&mut app, 120, 40);
    assert!(
        screen.contains("NAIVE") && screen.contains("FENCED"),
        "{screen}"
    );
    snapshot("compare_mode", &screen);
    // At 80×24 the naive side still shows both lanes of its fork.
    app.handle(code(KeyCode::Enter)).await;
    let small = shot(&mut app, 80, 24);
    let lanes = |name: &str| small.matches(&format!("│{name} ")).count();
    assert!(lanes("s2") >= 1, "the naive s2 lane:\n{small}");
    assert!(lanes("s1") >= 2, "an s1 lane on each side:\n{small}");
    assert!(small.contains("FORK"), "{small}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_overlay() {
    let (mut app, _) = idle(Policy::Fenced, 1).await;
    app.handle(key('?')).await;
    let screen = shot(&mut app, 100, 32);
    // The glossary: every verdict word and the abbreviations.
    for word in [
        "FORK",
        "DUPLICATE",
        "CURSOR BACK",
        "LOST",
        "DRIFT",
        "high-water",
        "stalled",
    ] {
        assert!(screen.contains(word), "{word}:\n{screen}");
    }
    snapshot("help_overlay", &screen);
    // q closes help, not the dashboard.
    app.handle(key('q')).await;
    assert!(!app.quitting());
    assert!(!shot(&mut app, 100, 32).contains("CURSOR BACK"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_and_the_knobs() {
    let (mut app, _) = idle(Policy::Fenced, 1).await;
    app.handle(key('p')).await;
    let picker = shot(&mut app, 100, 30);
    assert!(picker.contains("seed-incident.toml"), "{picker}");
    snapshot("picker", &picker);
    app.handle(code(KeyCode::Esc)).await;
    app.handle(key('k')).await;
    app.handle(code(KeyCode::Right)).await;
    let knobs = shot(&mut app, 100, 30);
    assert!(knobs.contains("grace window (ms)"), "{knobs}");
    assert!(knobs.contains("5000 → 8000"), "{knobs}");
    snapshot("knobs", &knobs);
    app.handle(code(KeyCode::Esc)).await;
    assert!(!shot(&mut app, 100, 30).contains("grace window (ms)"));
    app.stop().await;
}

/// The seed incident's scenario, paused at once and stepped by `s`: the step's own words (no
/// "line N:" prefix), and what the server decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_playing_with_its_narration() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/seed-incident.toml");
    let start = Start {
        scenario: Some(forkscope::scenario::load(&path).unwrap()),
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    app.handle(key(' ')).await;
    for step in 1..=4 {
        app.handle(key('s')).await;
        until_shown(&mut app, 120, 40, &format!("step {step}/")).await;
    }
    // Step 4's events may still be on their way over the sockets when its line shows: wait
    // for both labs' lanes to hold all fifteen.
    let fifteen = format!("s1      {}·", "●".repeat(15));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let screen = loop {
        let screen = shot(&mut app, 120, 40);
        if screen.lines().any(|l| l.matches(&fifteen).count() == 2) {
            break screen;
        }
        assert!(tokio::time::Instant::now() < deadline, "{screen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        screen.contains("a NAT drops the TCP connection") && !screen.contains("line 30:"),
        "{screen}"
    );
    assert!(screen.contains("paused · space plays"), "{screen}");
    // What each lab's server decided is read when the step ends, so which decisions a lab's
    // line names (and whether it has one yet) depends on when its tasks ran: those lines, and
    // the blank rows they leave, are not part of the picture.
    let mut settings = filters();
    settings.add_filter(r#"(?m)^"│(naive|fenced): .*"\n"#, "");
    settings.add_filter(r#"(?m)^"│ *│"\n"#, "");
    settings.bind(|| insta::assert_snapshot!("a_scenario_playing_with_its_narration", screen));
    app.stop().await;
}

/// "Prove it" on a naive lab: the check's counterexample step by step, and the key that plays
/// it; readable at the smallest size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prove_it_card_shows_the_counterexample() {
    let (mut app, _) = idle(Policy::Naive, 1).await;
    app.handle(key('P')).await;
    let screen = until_shown(&mut app, 120, 40, "Enter plays").await;
    assert!(screen.contains("naive: counterexample in"), "{screen}");
    assert!(screen.contains("✘ fork"), "{screen}");
    let small = shot(&mut app, 60, 20);
    assert!(small.contains("counterexample in"), "{small}");
    assert!(small.contains("Enter plays"), "{small}");
    app.stop().await;
}

/// A lab of replicas by keys: the replicas pane (each replica, what it sends, the store's
/// records) and the replica keys at the sizes a room uses; the fork across replicas as two
/// lanes of one stream; a kill, a routing switch, a replica started again; and in a lab of one
/// the replica keys say why not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_of_replicas() {
    use forkscope::lab::ReplicaSetup;
    let options = LabOptions {
        policy: Policy::Naive,
        replicas: Some(ReplicaSetup::default()),
        // Events only on demand (`e`), so what each replica sent is what the keys made.
        background: None,
        ..LabOptions::default()
    };
    let (mut app, _) = idle_with(options, 2).await;
    for (width, height) in [(80, 24), (100, 30)] {
        let screen = until_shown(&mut app, width, height, "store s1").await;
        for shown in [
            "replicas · round-robin · store memory",
            "▸A up",
            " B up",
            "sends s1 conn 1",
            "s1@A",
        ] {
            assert!(
                screen.contains(shown),
                "{width}×{height}: {shown}\n{screen}"
            );
        }
        assert!(!screen.contains("server · streams"), "{screen}");
    }
    // The fork across replicas: the client's connection dropped (A keeps its side), the
    // reconnect sent to B, an emit on each: two lanes of s1 receiving.
    app.handle(key('d')).await;
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    until(&mut app, &mut terminal, "the drop noticed", |s| {
        s.iter().all(|s| {
            s.view
                .client
                .as_ref()
                .is_some_and(|c| matches!(c.phase, Phase::Reconnecting { .. }))
        })
    })
    .await;
    app.handle(key('B')).await;
    app.handle(key('N')).await;
    app.handle(key('c')).await;
    until_shown(&mut app, 100, 30, "resumes s1").await;
    app.handle(key('e')).await;
    // A lane named `name` with an event on it.
    let receives = |screen: &str, name: &str| {
        screen.lines().any(|l| {
            let l = l.trim_start_matches(['"', '│']);
            l.starts_with(name) && l.contains('●')
        })
    };
    until(&mut app, &mut terminal, "B's emit", |s| {
        s.iter().all(|s| {
            s.recent.iter().any(|e| {
                matches!(e.record, forkscope_core::Record::Emitted { .. })
                    && e.by.is_some_and(|b| b.replica.to_string() == "B")
            })
        })
    })
    .await;
    for (width, height) in [(80, 24), (100, 30)] {
        let screen = until_shown(&mut app, width, height, "fork across replicas").await;
        assert!(
            receives(&screen, "s1@A") && receives(&screen, "s1@B"),
            "{width}×{height}: both replicas' lanes of s1 receiving\n{screen}"
        );
        assert!(screen.contains(ORPHAN_EMIT), "{screen}");
        assert!(
            screen.contains("orphan"),
            "A's delivery is an orphan:\n{screen}"
        );
    }
    // The replica keys, on B.
    app.handle(key('G')).await;
    until_shown(&mut app, 80, 24, "replicas · sticky").await;
    app.handle(key('K')).await;
    let screen = until_shown(&mut app, 80, 24, "B killed").await;
    assert!(screen.contains("replica B killed"), "{screen}");
    until_shown(&mut app, 100, 30, "B killed").await;
    app.handle(key('K')).await;
    until_shown(&mut app, 80, 24, "▸B up").await;
    app.handle(key('C')).await;
    until_shown(&mut app, 80, 24, "this lab runs 2 replicas, A to B").await;
    // Back to one server: the replica keys are refused, and say how to get replicas.
    app.handle(key('L')).await;
    until_shown(&mut app, 80, 24, "server · streams").await;
    app.handle(key('K')).await;
    let screen = until_shown(&mut app, 120, 40, "not done: this lab runs one server").await;
    assert!(screen.contains("L runs replicas"), "{screen}");
    app.stop().await;
}

/// Fenced replicas by the same keys: the resume on B takes epoch 2, and the store refuses A's
/// late write on epoch 1 — said in the replicas pane with the holder, marked on A's lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_replicas_show_the_stores_refusal() {
    use forkscope::lab::ReplicaSetup;
    let options = LabOptions {
        policy: Policy::Fenced,
        replicas: Some(ReplicaSetup::default()),
        background: None,
        ..LabOptions::default()
    };
    let (mut app, mut terminal) = idle_with(options, 2).await;
    app.handle(key('d')).await;
    until(&mut app, &mut terminal, "the drop noticed", |s| {
        s.iter().all(|s| {
            s.view
                .client
                .as_ref()
                .is_some_and(|c| matches!(c.phase, Phase::Reconnecting { .. }))
        })
    })
    .await;
    for k in ['B', 'N', 'c'] {
        app.handle(key(k)).await;
    }
    until_shown(&mut app, 100, 30, "takes epoch 2").await;
    app.handle(key('e')).await;
    for (width, height) in [(80, 24), (100, 30)] {
        // Both replicas named: the one refused, and the holder.
        let refusal = [
            "A's write on s1 refused: epoch 1 < 2, held by B",
            "A refused on s1: epoch 1 < 2, held by B",
        ];
        let screen = until_shown_any(&mut app, width, height, &refusal).await;
        assert!(
            refusal.iter().any(|r| screen.contains(&format!("× {r}"))),
            "{screen}"
        );
        // The store's record as last read (every 100 ms).
        let owner = "store s1  GET  live     ep 2 owner B";
        let screen = until_shown(&mut app, width, height, owner).await;
        assert!(
            screen
                .lines()
                .any(|l| l.trim_start_matches(['"', '│']).starts_with("s1@A") && l.contains('×')),
            "the refusal on A's lane:\n{screen}"
        );
        assert!(screen.contains("verdict CLEAN"), "{screen}");
    }
    app.stop().await;
}

/// A scenario of three policies opens three labs side by side: the seed incident under naive,
/// rmcp and fenced, played to its end. At 200×50 each column shows its badge and verdict; at
/// 80×24 the screen asks for a wider terminal and shows each lab's verdict line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_labs_side_by_side() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/your-sdk.toml");
    let start = Start {
        scenario: Some(forkscope::scenario::load(&path).unwrap()),
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    assert_eq!(app.labs().len(), 3);
    let wide = until_shown(&mut app, 200, 50, "finished").await;
    for badge in [" NAIVE ", " RMCP ", " FENCED "] {
        assert_eq!(wide.matches(badge).count(), 1, "{badge}:\n{wide}");
    }
    assert!(wide.contains("FORK"), "{wide}");
    let mut settings = filters();
    settings.add_filter(r#"(?m)^"│(naive|rmcp|fenced): .*"\n"#, "");
    settings.add_filter(r#"(?m)^"│ *│"\n"#, "");
    settings.bind(|| insta::assert_snapshot!("three_labs_side_by_side", wide));
    let narrow = shot(&mut app, 80, 24);
    assert!(
        narrow.contains("3 labs side by side need 120 columns (now 80)"),
        "{narrow}"
    );
    assert!(narrow.contains("fork: stream s1"), "{narrow}");
    settings.bind(|| insta::assert_snapshot!("three_labs_too_narrow", narrow));
    app.stop().await;
}
