//! The room test: the real dashboard (`App`, real sockets) driven by the seed incident's keys on
//! a paused lab clock, so every run reaches the same state; then read at the sizes a room uses.
//! Numbers on screen must equal the lab's, never cut; the fork stays in view; `v` steps through
//! the violations fork first; a selected event is marked without colour; 1–5 explain a
//! condition; compare mode shows the client and the http line. Every wait is for observed state.

mod common;

use common::{code, frame, key, seed};
use forkscope::lab::Snapshot;
use forkscope::tui::app::App;
use forkscope::tui::panes::lanes::ORPHAN_EMIT;
use forkscope_core::{AnomalyKind, Policy};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;
use std::time::Duration;

const SIZES: [(u16, u16); 3] = [(60, 20), (80, 24), (100, 30)];

fn draw(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    frame(app, &mut terminal);
    terminal.backend().to_string()
}

/// Every `label N` on screen whose value the lab knows, with the lab's value: a cut number
/// (`duplicates 1` for 15) reads as a different number and fails.
fn numbers_match(screen: &str, snap: &Snapshot) -> Vec<String> {
    let client = snap.view.client.as_ref().expect("a client");
    let session = snap
        .view
        .sessions
        .iter()
        .find(|s| Some(s.id) == client.session)
        .expect("the client's session");
    let mut expected: Vec<(String, String)> = vec![
        ("applied".into(), client.applied.to_string()),
        ("skipped".into(), client.replays_skipped.to_string()),
        (
            "duplicates".into(),
            snap.view.verdict.count(AnomalyKind::Duplicate).to_string(),
        ),
        (
            "dup".into(),
            snap.view.verdict.count(AnomalyKind::Duplicate).to_string(),
        ),
        ("counter".into(), session.counter.to_string()),
    ];
    for (kind, n) in &snap.view.verdict.counts {
        expected.push((format!("{} ×", short(*kind)), n.to_string()));
    }
    let mut wrong = Vec::new();
    let mut seen = 0;
    for line in screen.lines() {
        for (label, value) in &expected {
            let spaced = if label.ends_with('×') {
                label.clone()
            } else {
                format!("{label} ")
            };
            for (at, _) in line.match_indices(spaced.as_str()) {
                // A word that merely ends in the label (`undup`) is not it.
                if at > 0 && line[..at].chars().last().is_some_and(char::is_alphanumeric) {
                    continue;
                }
                let rest = &line[at + spaced.len()..];
                let shown: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if shown.is_empty() {
                    continue;
                }
                seen += 1;
                if &shown != value {
                    wrong.push(format!("{label}: screen {shown}, lab {value}: {line}"));
                }
            }
        }
        // Each stream's high-water mark, by its id on the same line.
        for stream in &session.streams {
            let id = format!(" {:<4}", stream.id.to_string());
            if let Some(at) = line.find(&id)
                && let Some(hw) = line[at..].find("hw ")
            {
                let rest = line[at + hw + 3..].trim_start();
                let shown: String = rest.chars().take_while(char::is_ascii_digit).collect();
                seen += 1;
                if shown != stream.high_water.to_string() {
                    wrong.push(format!(
                        "hw of {}: screen {shown}, lab {}: {line}",
                        stream.id, stream.high_water
                    ));
                }
            }
        }
    }
    assert!(
        seen >= 2,
        "the screen shows too few numbers to judge:\n{screen}"
    );
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_number_on_screen_equals_the_labs_at_the_sizes_a_room_uses() {
    for (policy, present) in [
        (Policy::Naive, false),
        (Policy::Fenced, false),
        (Policy::Naive, true),
    ] {
        let (mut app, _) = seed(policy, present, false).await;
        for (w, h) in SIZES {
            // The screen and the lab at one instant: a delivery still landing would change the
            // lab between the two reads, so read until nothing changed across a draw.
            let (screen, snap) = loop {
                let before = app.labs()[0].snapshot();
                let screen = draw(&mut app, w, h);
                let after = app.labs()[0].snapshot();
                if before.view.counters == after.view.counters
                    && before.view.client.as_ref().map(|c| c.applied)
                        == after.view.client.as_ref().map(|c| c.applied)
                {
                    break (screen, after);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let wrong = numbers_match(&screen, &snap);
            assert!(
                wrong.is_empty(),
                "{policy} {w}×{h} present={present}: {wrong:#?}\n{screen}"
            );
            // No number is cut at a pane's edge: a word of digits never touches a right border
            // (an opaque id that happens to end in a digit may).
            for line in screen.lines() {
                for (at, _) in line.match_indices('│').skip(1) {
                    let word: String = line[..at]
                        .chars()
                        .rev()
                        .take_while(|c| !c.is_whitespace() && *c != '│')
                        .collect();
                    assert!(
                        word.is_empty() || !word.chars().all(|c| c.is_ascii_digit() || c == '.'),
                        "{policy} {w}×{h}: a number runs into a border: {line}\n{screen}"
                    );
                }
            }
        }
        app.stop().await;
    }
}

/// A kind's name as the verdict line writes it.
fn short(kind: AnomalyKind) -> &'static str {
    match kind {
        AnomalyKind::Fork => "FORK",
        AnomalyKind::Duplicate => "DUPLICATE",
        AnomalyKind::Gap => "GAP",
        AnomalyKind::NonMonotonicCursor => "CURSOR BACK",
        AnomalyKind::Lost => "LOST",
        AnomalyKind::CallLost => "CALL LOST",
        AnomalyKind::ReusedId => "REUSED ID",
        AnomalyKind::CursorDrift => "DRIFT",
        AnomalyKind::Undelivered => "UNDELIVERED",
        AnomalyKind::TwoRunners => "TWO RUNNERS",
        AnomalyKind::EffectTwice => "RE-APPLIED",
        AnomalyKind::TerminalTwice => "ENDED TWICE",
        AnomalyKind::StaleRead => "STALE READ",
        AnomalyKind::OrphanTask => "ORPHAN TASK",
        AnomalyKind::CutHalfway => "CUT HALFWAY",
        AnomalyKind::TaskLost => "TASK LOST",
    }
}

/// The words of a column of the screen (`columns` side by side, the `n`th), in reading order,
/// borders and padding gone: a sentence wrapped over rows reads whole again.
fn column_words(screen: &str, columns: usize, n: usize) -> String {
    let mut words = Vec::new();
    for line in screen.lines() {
        let line = line.trim_matches('"');
        let cells: Vec<char> = line.chars().collect();
        let width = cells.len() / columns;
        let part: String = cells[n * width..((n + 1) * width).min(cells.len())]
            .iter()
            .collect();
        words.extend(
            part.split(|c: char| c.is_whitespace() || "│╭╮╰╯─".contains(c))
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    words.join(" ")
}

/// Side by side, presenter and predict at the sizes a room uses: every count of every lab's
/// verdict is on screen whole (`DUPLICATE ×41`, never dropped), and each verdict's sentence
/// reads whole (or without its closing tallies), never cut with `…`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verdict_shows_whole_side_by_side_in_presenter_and_after_predict() {
    for (present, compare) in [(false, true), (true, true), (true, false)] {
        let (mut app, _) = seed(Policy::Naive, present, compare).await;
        // Predict, then reveal: hidden, nothing of the verdict shows; revealed, all of it.
        app.handle(key('V')).await;
        let hidden = draw(&mut app, 100, 30);
        assert!(hidden.contains("VERDICT HIDDEN"), "{hidden}");
        assert!(!hidden.contains("FORK ×"), "{hidden}");
        app.handle(key('V')).await;
        let labs = app.labs().len();
        for (w, h) in SIZES {
            let screen = draw(&mut app, w, h);
            // Side by side, each verdict is lettered the same: big letters on every side or none.
            let lettered: Vec<bool> = (0..labs)
                .map(|n| column_words(&screen, labs, n).contains(['█', '▛', '▜', '▙', '▟']))
                .collect();
            assert!(
                lettered.iter().all(|l| *l == lettered[0]),
                "{w}×{h} present={present}: letters on some sides only: {lettered:?}\n{screen}"
            );
            for (n, lab) in app.labs().iter().enumerate() {
                let snap = lab.snapshot();
                let verdict = &snap.view.verdict;
                let words = column_words(&screen, labs, n);
                for (kind, count) in &verdict.counts {
                    let shown = format!("{} ×{count}", short(*kind));
                    assert!(
                        words.contains(&shown),
                        "{w}×{h} present={present} lab {n}: {shown} not on screen\n{screen}"
                    );
                }
                // Two columns of 30 at 60×20 cannot hold a fork's whole sentence beside the
                // lanes and the client's line: there it may end in `…` (its counts may not).
                if compare && w < 80 {
                    continue;
                }
                let headline = verdict
                    .headline
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                let brief = headline
                    .rsplit_once(" (")
                    .map_or(headline.as_str(), |(b, _)| b);
                assert!(
                    words.contains(brief),
                    "{w}×{h} present={present} lab {n}: the sentence is cut: {brief}\n{screen}"
                );
            }
        }
        app.stop().await;
    }
}

/// The replica pane at the sizes a room uses, after a tool call that A ran and B adopted once
/// A died: every replica's state line, the store's records with the call's lease whole where
/// it fits (100×30), the call's result on the client's line, and every verdict count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_pane_at_the_sizes_a_room_uses() {
    use forkscope::lab::{LabOptions, ReplicaSetup};
    use forkscope::tui::Start;
    use forkscope::tui::log::LogRing;
    let start = Start {
        options: LabOptions {
            policy: Policy::Fenced,
            replicas: Some(ReplicaSetup::default()),
            ..LabOptions::default()
        },
        ..Start::default()
    };
    let mut app = App::new(start, LogRing::default()).await.unwrap();
    let mut terminal = ratatui::Terminal::new(TestBackend::new(100, 30)).unwrap();
    let done = |s: &[Snapshot]| {
        s[0].view.client.as_ref().is_some_and(|c| {
            c.request
                .as_ref()
                .is_some_and(|r| r.phase == forkscope_core::client::RequestPhase::Done)
        })
    };
    common::until(&mut app, &mut terminal, "connected", |s| {
        s[0].view
            .client
            .as_ref()
            .is_some_and(|c| c.cursor.is_some())
    })
    .await;
    app.handle(key('x')).await;
    common::until(&mut app, &mut terminal, "a step of the call applied", |s| {
        s[0].view
            .client
            .as_ref()
            .is_some_and(|c| c.request.as_ref().is_some_and(|r| r.applied >= 1))
    })
    .await;
    // A runs the call; killing it leaves the lease to expire and B to adopt the call.
    app.handle(key('K')).await;
    common::until(&mut app, &mut terminal, "the call's result", done).await;
    for (w, h) in SIZES {
        let screen = draw(&mut app, w, h);
        let snap = app.labs()[0].snapshot();
        let view = snap.replicas.as_ref().expect("a lab of replicas");
        for replica in &view.replicas {
            assert!(
                screen.contains(&format!(
                    "{}{} {}",
                    if replica.id == view.replicas[0].id {
                        "▸"
                    } else {
                        " "
                    },
                    replica.id,
                    replica.state.as_str()
                )),
                "{w}×{h}: replica {}'s state line:\n{screen}",
                replica.id
            );
        }
        for (kind, n) in &snap.view.verdict.counts {
            assert!(
                screen.contains(&format!("{} ×{n}", short(*kind))),
                "{w}×{h}:\n{screen}"
            );
        }
        if w >= 100 {
            let call = view
                .streams
                .iter()
                .find_map(|s| s.lease.as_ref())
                .expect("the call's record has a lease");
            let lease = format!("lease ep {} {} {} done", call.0, call.1, call.2);
            assert!(screen.contains(&lease), "{w}×{h}: {lease}\n{screen}");
            assert!(
                screen.contains("✓ once"),
                "{w}×{h}: the result, once:\n{screen}"
            );
        }
    }
    app.stop().await;
}

/// Session ids, tokens and ports differ from run to run (filtered); the rest is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_the_real_app_after_the_seed_keys() {
    for (name, policy, present) in [
        ("naive", Policy::Naive, false),
        ("fenced", Policy::Fenced, false),
        ("present", Policy::Naive, true),
    ] {
        let (mut app, _) = seed(policy, present, false).await;
        for (w, h) in SIZES {
            let screen = draw(&mut app, w, h);
            let mut settings = insta::Settings::clone_current();
            settings.add_filter(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT");
            settings.add_filter(r"\b[0-9a-f]{6}\b", "SESSID");
            settings.add_filter(r"\b[0-9a-f]{8,}…?", "TOKEN…");
            settings.add_filter(r"(s\d+-\d+)\.[A-Za-z0-9_-]+…?", "$1.KEY…");
            // The log pane's order follows the tasks that wrote it.
            settings.add_filter(r"(?m)^(│(INFO|WARN|DEBUG|ERROR) ).*$", "$1…");
            settings.bind(|| {
                insta::assert_snapshot!(format!("room_{name}_{w}x{h}"), screen);
            });
        }
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v_steps_through_the_violations_fork_first_and_marks_it_without_colour() {
    let (mut app, _) = seed(Policy::Naive, false, false).await;
    app.handle(code(KeyCode::Enter)).await; // the evidence card down: the event card has room
    app.handle(key('v')).await;
    let screen = draw(&mut app, 100, 30);
    assert!(app.travelling().is_some(), "{screen}");
    assert!(screen.contains("violation 1 of"), "{screen}");
    assert!(screen.contains(": FORK"), "the fork comes first:\n{screen}");
    // The fork's mark is selected, its lane pointed at and its column marked on the border.
    let lane = screen
        .lines()
        .find(|l| l.contains("│s1     ›"))
        .unwrap_or_else(|| panic!("the fork's lane is pointed at:\n{screen}"));
    assert!(lane.contains(ORPHAN_EMIT), "{lane}");
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("\"╰") && l.contains('▲')),
        "the selected column is marked on the lanes' border:\n{screen}"
    );
    assert!(
        screen.contains("event s1#"),
        "the card explains it:\n{screen}"
    );
    app.handle(key('v')).await;
    let next = draw(&mut app, 100, 30);
    assert!(next.contains("violation 2 of"), "{next}");
    assert!(!next.contains(": FORK ·"), "then the others:\n{next}");
    // Enter dismisses the card on top: the selected event's.
    assert!(next.contains("selected event"), "{next}");
    app.handle(code(KeyCode::Enter)).await;
    assert!(!draw(&mut app, 100, 30).contains("selected event"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_one_to_five_explain_a_condition_at_80x24() {
    let (mut app, _) = seed(Policy::Naive, false, false).await;
    app.handle(code(KeyCode::Enter)).await;
    let before = draw(&mut app, 80, 24);
    assert!(before.contains("1–5 explain"), "{before}");
    app.handle(key('1')).await;
    let explained = draw(&mut app, 80, 24);
    assert!(explained.contains("✘ broken · 1 token"), "{explained}");
    assert!(
        explained.contains("means: token and cursor must name one stream"),
        "{explained}"
    );
    assert!(
        explained.contains("verdict FORK"),
        "the verdict stays: {explained}"
    );
    app.handle(key('1')).await;
    assert!(!draw(&mut app, 80, 24).contains("means:"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_resume_says_how_identity_was_proven() {
    let (mut app, _) = seed(Policy::Fenced, false, false).await;
    // Select back from the newest mark to the client lane's ↺.
    let mut found = None;
    for _ in 0..12 {
        app.handle(key(',')).await;
        let screen = draw(&mut app, 100, 40);
        if screen.contains("server resumes s1") {
            found = Some(screen);
            break;
        }
    }
    let screen = found.expect("a resume is selectable in the lanes");
    assert!(
        screen.contains("identity proven by the key inside Last-Event-ID"),
        "{screen}"
    );
    app.stop().await;
}

/// The fence where it happens, as the workshop's 0:15 step shows it (`n` to fenced, `t`, `d`):
/// the resume fenced the half-open connection the stream was still on, and both the lanes (under
/// the resume's column) and the http pane (beside the resuming GET) say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_lab_shows_the_old_connection_fenced_at_the_resume() {
    let (mut app, _) = seed(Policy::Fenced, false, false).await;
    let screen = draw(&mut app, 100, 30);
    let said: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("fenced s1 (was on conn "))
        .collect();
    assert!(
        said.iter().any(|l| l.contains("↑ fenced s1 (was on conn ")),
        "the lanes say it under the resume:\n{screen}"
    );
    assert!(
        said.iter().any(|l| l.contains("┃ fenced s1 (was on conn ")),
        "the http pane says it by the resume:\n{screen}"
    );
    // The connection named is the one the resume fenced.
    let snap = app.labs()[0].snapshot();
    let conn = snap
        .recent
        .iter()
        .find_map(|e| match &e.record {
            forkscope_core::history::Record::ResumeAccepted {
                fenced_connection: Some(c),
                ..
            } => Some(c.0),
            _ => None,
        })
        .expect("the resume fenced a connection");
    assert!(
        screen.contains(&format!("(was on conn {conn})")),
        "{screen}"
    );
    assert!(screen.contains("verdict CLEAN"), "{screen}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_mode_shows_each_labs_client_and_http_at_80x24() {
    let (mut app, _) = seed(Policy::Fenced, false, true).await;
    let screen = draw(&mut app, 80, 24);
    let both = |needle: &str| screen.lines().any(|l| l.matches(needle).count() == 2);
    assert!(both("applied "), "{screen}");
    assert!(both("http GET"), "{screen}");
    assert!(both("verdict "), "{screen}");
    app.stop().await;
}
