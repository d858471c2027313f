//! The workshop plan (docs/workshop.md) by its keys, through the real dashboard (`App`, real
//! sockets) at 100×30, the size a projector room gets: each step's claimed screen text is
//! asserted. Every wait is for observed state; the labs run on their own clocks, as in a room.

mod common;

use common::{code, frame, key, until};
use forkscope::lab::{LabOptions, ReplicaSetup, Snapshot};
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope_core::client::Phase;
use forkscope_core::{AnomalyKind, LabConfig, Policy, StreamIdentity};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;
use std::time::Duration;

fn terminal() -> Terminal<TestBackend> {
    Terminal::new(TestBackend::new(100, 30)).unwrap()
}

fn screen(terminal: &Terminal<TestBackend>) -> String {
    terminal.backend().to_string()
}

async fn start(start: Start) -> (App, Terminal<TestBackend>) {
    let app = App::new(start, LogRing::default())
        .await
        .expect("the lab starts");
    (app, terminal())
}

/// Turns the loop until the screen shows `text` (a guard of 30 s against a hang).
async fn shown(app: &mut App, terminal: &mut Terminal<TestBackend>, text: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        frame(app, terminal);
        let now = screen(terminal);
        if now.contains(text) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not shown: {text}\n{now}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn connected(s: &Snapshot) -> bool {
    s.view
        .client
        .as_ref()
        .is_some_and(|c| c.phase == Phase::Connected)
}

fn applied(s: &Snapshot) -> u64 {
    s.view.client.as_ref().map_or(0, |c| c.applied)
}

/// `e` a few times (each landing), then `keys`.
async fn emit_then(app: &mut App, terminal: &mut Terminal<TestBackend>, keys: &str) {
    until(app, terminal, "connected", |s| s.iter().all(connected)).await;
    for n in 1..=3 {
        app.handle(key('e')).await;
        until(app, terminal, "the emit applied", |s| {
            s.iter().all(|s| applied(s) >= n)
        })
        .await;
    }
    for k in keys.chars() {
        app.handle(key(k)).await;
    }
}

/// 0:05–0:15: the seed incident's scenario, side by side, presented, the verdicts hidden until
/// `V`; then naive FORK and fenced CLEAN, every count whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_0_05_predict_then_reveal() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/seed-incident.toml");
    let (mut app, mut terminal) = start(Start {
        scenario: Some(forkscope::scenario::load(&path).unwrap()),
        present: true,
        predict: true,
        ..Start::default()
    })
    .await;
    let hidden = shown(&mut app, &mut terminal, "step 10/10  finished").await;
    assert_eq!(hidden.matches("VERDICT HIDDEN").count(), 2, "{hidden}");
    assert!(
        hidden.contains("NAIVE") && hidden.contains("FENCED"),
        "{hidden}"
    );
    app.handle(key('V')).await;
    let revealed = shown(&mut app, &mut terminal, "CLEAN").await;
    let naive = app.labs()[0].snapshot();
    assert!(naive.view.verdict.count(AnomalyKind::Fork) >= 1);
    for (kind, n) in &naive.view.verdict.counts {
        let short = match kind {
            AnomalyKind::Fork => "FORK",
            AnomalyKind::Duplicate => "DUPLICATE",
            AnomalyKind::NonMonotonicCursor => "CURSOR BACK",
            AnomalyKind::Lost => "LOST",
            AnomalyKind::CursorDrift => "DRIFT",
            other => panic!("the seed incident has no {other:?}"),
        };
        assert!(revealed.contains(&format!("{short} ×{n}")), "{revealed}");
    }
    app.stop().await;
}

/// 0:15–0:20: by hand in presenter mode. Naive forks on `e` `t` `d`; `1` explains condition 1
/// in a panel; `n` lands on FENCED (a fresh lab), where `t` `d` resume by the event id, the
/// fence shows under the lanes, and the verdict stays CLEAN. Then the two-header model refuses
/// the stripped retry with 428.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_0_15_the_same_by_hand() {
    let (mut app, mut terminal) = start(Start {
        options: LabOptions {
            policy: Policy::Naive,
            ..LabOptions::default()
        },
        present: true,
        ..Start::default()
    })
    .await;
    emit_then(&mut app, &mut terminal, "td").await;
    until(&mut app, &mut terminal, "the fork", |s| {
        s[0].view.verdict.count(AnomalyKind::Fork) >= 1
    })
    .await;
    let forked = shown(&mut app, &mut terminal, "evidence · naive lab").await;
    assert!(forked.contains("FORK ×1"), "{forked}");
    assert!(
        forked.contains("FORK fork: stream s1"),
        "the card pins the fork:\n{forked}"
    );
    // `v`: the fork first, selected in the lanes (which stay on screen) with its card.
    app.handle(key('v')).await;
    let stepped = shown(&mut app, &mut terminal, "violation 1 of").await;
    assert!(
        stepped.contains("FORK")
            && stepped.contains("╭ lanes")
            && stepped.contains("selected event"),
        "the selection is in the lanes, with its card:\n{stepped}"
    );
    // The next violation is a replayed DUPLICATE among a burst of deliveries in one column:
    // the lanes still point at it (its lane's `›`).
    app.handle(key('v')).await;
    let second = shown(&mut app, &mut terminal, "violation 2 of").await;
    let pointed = second
        .lines()
        .any(|l| l.contains("client") && l.contains('›'));
    assert!(
        pointed,
        "the client lane points at the selection:\n{second}"
    );
    // `Esc` clears the selection, then returns from the past.
    app.handle(code(KeyCode::Esc)).await;
    app.handle(code(KeyCode::Esc)).await;
    shown(&mut app, &mut terminal, "▶ running").await;
    app.handle(code(KeyCode::Enter)).await;
    app.handle(key('1')).await;
    let explained = shown(&mut app, &mut terminal, "means: ").await;
    assert!(
        explained.contains("1 token + Last-Event-ID co-validated")
            && explained.contains("1 again closes this"),
        "condition 1 explained in a panel:\n{explained}"
    );
    // The verdict stands above in full; the panel does not repeat it (cut) beneath.
    assert!(!explained.contains("verdict FORK"), "{explained}");
    app.handle(key('1')).await;
    app.handle(key('n')).await;
    until(&mut app, &mut terminal, "a fresh fenced lab", |s| {
        s[0].view.policy == Policy::Fenced && s[0].view.verdict.counts.is_empty()
    })
    .await;
    let fenced = shown(&mut app, &mut terminal, "FENCED").await;
    assert!(
        !fenced.contains("FORK"),
        "nothing of naive's under fenced:\n{fenced}"
    );
    emit_then(&mut app, &mut terminal, "td").await;
    until(&mut app, &mut terminal, "resumed", |s| {
        s[0].view.counters.resumes_accepted >= 1 && connected(&s[0])
    })
    .await;
    let resumed = shown(&mut app, &mut terminal, "↑ fenced s1 (was on conn ").await;
    assert!(resumed.contains("CLEAN"), "{resumed}");
    assert!(
        resumed.contains('↺'),
        "the client lane shows the resume:\n{resumed}"
    );
    app.stop().await;

    let (mut app, mut terminal) = start(Start {
        options: LabOptions {
            config: LabConfig {
                identity: StreamIdentity::TokenHeader,
                ..LabConfig::default()
            },
            ..LabOptions::default()
        },
        ..Start::default()
    })
    .await;
    emit_then(&mut app, &mut terminal, "td").await;
    let refused = shown(
        &mut app,
        &mut terminal,
        "typed rejections 428 missing_token ×1",
    )
    .await;
    // Told, never silent: CLEAN when nothing was emitted between the drop and the refusal,
    // else UNDELIVERED (told); never LOST.
    let lost = app.labs()[0]
        .snapshot()
        .view
        .verdict
        .count(AnomalyKind::Lost);
    assert_eq!(lost, 0, "{refused}");
    assert!(
        refused.contains("CLEAN") || refused.contains("UNDELIVERED"),
        "{refused}"
    );
    app.stop().await;
}

/// Exercise 8 by hand: naive replicas fork on `e` and `d` alone (round robin sends the
/// reconnect to the other replica); `n` restarts them fenced, and the same keys end with the
/// store refusing the old holder's write, named with the holder, and CLEAN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exercise_8_the_fork_across_replicas_by_hand() {
    let (mut app, mut terminal) = start(Start {
        options: LabOptions {
            policy: Policy::Naive,
            replicas: Some(ReplicaSetup::default()),
            ..LabOptions::default()
        },
        ..Start::default()
    })
    .await;
    emit_then(&mut app, &mut terminal, "d").await;
    until(&mut app, &mut terminal, "the fork across replicas", |s| {
        s[0].view.verdict.count(AnomalyKind::Fork) >= 1
    })
    .await;
    let forked = shown(&mut app, &mut terminal, "fork across replicas: stream s1").await;
    assert!(
        forked.contains("│s1@A") && forked.contains("│s1@B"),
        "both replicas' lanes of s1:\n{forked}"
    );
    assert!(forked.contains("FORK ×1"), "{forked}");
    app.handle(code(KeyCode::Enter)).await;
    app.handle(key('n')).await;
    until(&mut app, &mut terminal, "fenced replicas, fresh", |s| {
        s[0].view.policy == Policy::Fenced && s[0].view.verdict.counts.is_empty()
    })
    .await;
    emit_then(&mut app, &mut terminal, "d").await;
    until(
        &mut app,
        &mut terminal,
        "the old holder's write refused",
        |s| s[0].view.counters.late_emits_refused >= 1,
    )
    .await;
    // Both replicas named: the one refused, and the holder.
    let refused = shown(&mut app, &mut terminal, "epoch 1 < 2, held by ").await;
    assert!(refused.contains("× A"), "{refused}");
    assert!(refused.contains("verdict CLEAN"), "{refused}");
    app.stop().await;
}

/// Exercise 9 in the dashboard, under every policy the picker lists: the seed's keys run, the
/// header names the policy in force, and the verdict is the checker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exercise_9_every_policy_in_the_dashboard() {
    for policy in Policy::ALL {
        let (mut app, mut terminal) = start(Start {
            options: LabOptions {
                policy,
                ..LabOptions::default()
            },
            ..Start::default()
        })
        .await;
        emit_then(&mut app, &mut terminal, "td").await;
        // The reconnect was answered, however the policy answers it.
        until(&mut app, &mut terminal, "the reconnect answered", |s| {
            s[0].exchanges.iter().filter(|e| e.method == "GET").count() >= 2
        })
        .await;
        let screen = shown(&mut app, &mut terminal, "verdict ").await;
        let badge = policy.name().to_uppercase();
        assert!(
            screen.contains(&badge),
            "{policy}: the header says {badge}:\n{screen}"
        );
        app.stop().await;
    }
}

/// Exercise 9's scenario holds under every policy a server may use: each one's written
/// expectations pass, as `forkscope run scenarios/your-sdk.toml --policy P` prints them.
#[test]
fn exercise_9_your_sdk_passes_under_all_six_policies() {
    for policy in Policy::ALL {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["run", "scenarios/your-sdk.toml", "--policy", policy.name()])
            .output()
            .expect("forkscope runs");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && printed.contains(&format!("PASS  {}", policy.name())),
            "{policy}: {:?}\n{printed}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
