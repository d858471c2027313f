//! The 2026-07-28 room: the real `App` on 2026-07-28 alone (`--protocol 2026-07-28`) — one lab,
//! then workshop exercise 10 self-serve, naive beside fenced in compare mode with the verdict
//! hidden until `V` — driven by the exercise's keys (`a` loses the next `CreateTaskResult`, `X`
//! calls the tool as a task) on a paused lab clock. The test steps it with `s`, each step taken
//! in full (`Lab::tasks_at_rest`: every runner and intent asleep until a time still ahead)
//! before the next, so every run reaches the same screen. Snapshots at 100×30 and 80×24, and
//! what the issue promised read off the screen: the broken guarantee ✘, ⇉ on the task the
//! server pane names, no 2025 key, every verdict word.

mod common;

use common::{code, filters, frame, key, shot};
use forkscope::lab::LabOptions;
use forkscope::tui::Start;
use forkscope::tui::app::App;
use forkscope::tui::log::LogRing;
use forkscope_core::revision::Protocols;
use forkscope_core::{AnomalyKind, Policy};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;
use std::sync::atomic::Ordering;

const SIZES: [(u16, u16); 2] = [(100, 30), (80, 24)];

/// Steps of 100 ms of lab time the longest story here may take (4 tasks of 8 × 400 ms steps,
/// polled every 250 ms): a guard, never reached by a run that works.
const MAX_STEPS: usize = 200;

async fn start(policy: Policy, compare: Option<Vec<Policy>>) -> (App, Terminal<TestBackend>) {
    let start = Start {
        options: LabOptions {
            policy,
            protocols: Protocols::Modern,
            start_paused: true,
            ..LabOptions::default()
        },
        predict: compare.is_some(),
        compare,
        ..Start::default()
    };
    let app = App::new(start, LogRing::default())
        .await
        .expect("the lab starts");
    (app, Terminal::new(TestBackend::new(100, 30)).unwrap())
}

/// Loses `lost` answers, calls the tool as a task, and steps the clock until every lab's
/// client has read its task's end and nothing of its work runs on.
async fn lose_call_and_run(app: &mut App, terminal: &mut Terminal<TestBackend>, lost: usize) {
    for _ in 0..lost {
        app.handle(key('a')).await;
    }
    app.handle(key('X')).await;
    for _ in 0..MAX_STEPS {
        rest(app).await;
        frame(app, terminal);
        let over = app.labs().iter().all(|lab| {
            let client = &lab.task_client().counters;
            client.ended.load(Ordering::SeqCst) >= 1
                && client.at_work.load(Ordering::SeqCst) == 0
                && lab.tasks_at_rest()
                && lab.snapshot().view.tasks.iter().all(|t| t.ended.is_some())
        });
        if over {
            return;
        }
        app.handle(key('s')).await;
    }
    panic!(
        "the task work did not end in {MAX_STEPS} steps\n{}",
        terminal.backend()
    );
}

/// Waits until every lab has taken the last step of its clock in full.
async fn rest(app: &App) {
    for lab in app.labs() {
        assert!(
            lab.until_tasks_at_rest().await,
            "a lab's task work did not come to rest"
        );
    }
}

/// The room's filters, and a task's id (`t` and six hex digits), which differs run to run.
fn snapshot(name: &str, screen: &str) {
    let mut settings = filters();
    settings.add_filter(r"\bt[0-9a-f]{6}\b", "tTASKID");
    settings.bind(|| insta::assert_snapshot!(name, screen));
}

/// The id (six hex digits) of the task whose row in the server pane says `flag`.
fn task_flagged(screen: &str, flag: &str) -> String {
    let row = screen
        .lines()
        .find(|l| l.contains(flag))
        .unwrap_or_else(|| panic!("no task row says {flag:?}\n{screen}"));
    let at = row.find("│t").expect("a task row") + "│t".len();
    row[at..at + 6].to_owned()
}

/// The lane of task `id`: its row in the lanes pane.
fn lane<'a>(screen: &'a str, id: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(&format!("│t{id} ")) && l.contains("··"))
        .unwrap_or_else(|| panic!("no lane for task {id}\n{screen}"))
}

/// 2026-07-28 alone, naive, `a` `X`: the re-issue made a second task. The guarantee two runners
/// break is ✘ beside the verdict that names them; ⇉ sits on the lane of the task the server
/// pane calls run 2, the orphan's ⊗ on the other; the key bar, legend and verdict speak of
/// tasks, not streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2026_lab_after_naive_a_x_tells_the_checkers_story() {
    let (mut app, mut terminal) = start(Policy::Naive, None).await;
    lose_call_and_run(&mut app, &mut terminal, 1).await;
    let verdict = app.labs()[0].snapshot().view.verdict;
    assert_eq!(verdict.count(AnomalyKind::TwoRunners), 1, "{verdict:?}");
    for (w, h) in SIZES {
        let screen = shot(&mut app, w, h);
        assert!(screen.contains("TWO RUNNERS"), "{w}×{h}\n{screen}");
        let second = task_flagged(&screen, "⇉");
        let orphan = task_flagged(&screen, "⊗");
        assert_ne!(second, orphan, "{screen}");
        assert!(lane(&screen, &second).contains('⇉'), "{w}×{h}\n{screen}");
        assert!(!lane(&screen, &orphan).contains('⇉'), "{w}×{h}\n{screen}");
        assert!(lane(&screen, &orphan).contains('⊗'), "{w}×{h}\n{screen}");
        for legacy in ["strip token", "d drop", "stream"] {
            assert!(
                !screen.contains(legacy),
                "a 2025 word ({legacy:?}) in the 2026 lab at {w}×{h}\n{screen}"
            );
        }
        snapshot(&format!("lab_2026_naive_{w}x{h}"), &screen);
    }
    // The guarantees, once the evidence card is read and dismissed, at every size.
    app.handle(code(KeyCode::Enter)).await;
    for (w, h) in SIZES {
        let screen = shot(&mut app, w, h);
        // `✘3` in the one-line form, `✘ 3 one runner…` where the pane lists them.
        assert!(
            screen.contains("✘3") || screen.contains("✘ 3 one runner"),
            "{w}×{h}\n{screen}"
        );
    }
    // A stream's key is refused, saying why; help lists the lab's own keys and guarantees.
    app.handle(key('d')).await;
    let screen = shot(&mut app, 100, 30);
    assert!(screen.contains("no stream to drop"), "{screen}");
    app.handle(key('?')).await;
    let help = shot(&mut app, 100, 30);
    assert!(!help.contains("drop the connection"), "{help}");
    assert!(help.contains("task · a loses it"), "{help}");
    app.stop().await;
}

/// The same keys under fenced: the re-issue's key finds the task the first call made; one
/// task, each step once, and the verdict is CLEAN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2026_lab_after_fenced_a_x_is_one_task_and_clean() {
    let (mut app, mut terminal) = start(Policy::Fenced, None).await;
    lose_call_and_run(&mut app, &mut terminal, 1).await;
    let view = app.labs()[0].snapshot().view;
    assert!(view.verdict.clean, "{:?}", view.verdict);
    assert_eq!(view.tasks.len(), 1, "{:?}", view.tasks);
    for (w, h) in SIZES {
        let screen = shot(&mut app, w, h);
        assert!(screen.contains("CLEAN"), "{w}×{h}\n{screen}");
        assert!(!screen.contains('✘'), "{w}×{h}\n{screen}");
        snapshot(&format!("lab_2026_fenced_{w}x{h}"), &screen);
    }
    app.stop().await;
}

/// The tasks pane after three lost answers under naive: four tasks of one call, three of
/// them orphans, the last three each a run again of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_pane_lists_every_run_of_one_call() {
    let (mut app, mut terminal) = start(Policy::Naive, None).await;
    lose_call_and_run(&mut app, &mut terminal, 3).await;
    for (w, h) in SIZES {
        let screen = shot(&mut app, w, h);
        let pane = server_pane(&screen);
        assert_eq!(pane.matches('⊗').count(), 3, "{w}×{h}\n{pane}");
        assert_eq!(pane.matches('⇉').count(), 3, "{w}×{h}\n{pane}");
        snapshot(&format!("tasks_pane_2026_{w}x{h}"), &pane);
    }
    app.stop().await;
}

/// The server pane, cut out of the screen: its box, from its title to its bottom edge.
fn server_pane(screen: &str) -> String {
    // The test terminal quotes each line.
    let lines: Vec<&str> = screen.lines().map(|l| l.trim_matches('"')).collect();
    let top = lines
        .iter()
        .position(|l| l.contains("server · tasks"))
        .unwrap_or_else(|| panic!("no tasks pane\n{screen}"));
    let width = lines[top]
        .chars()
        .position(|c| c == '╮')
        .expect("its corner")
        + 1;
    let bottom = top
        + lines[top..]
            .iter()
            .position(|l| l.starts_with('╰'))
            .expect("its edge");
    lines[top..=bottom]
        .iter()
        .map(|l| l.chars().take(width).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Workshop exercise 10 self-serve: `forkscope --protocol 2026-07-28 --compare naive,fenced
/// --predict`, then `a` `X`. Before `V` no verdict is shown; the two labs' task lanes are. After
/// `V`, naive reads TWO RUNNERS with two tasks, fenced CLEAN with one, each side's words whole,
/// and the guarantees in view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exercise_ten_in_compare_mode_predict_then_reveal() {
    let (mut app, mut terminal) =
        start(Policy::Naive, Some(vec![Policy::Naive, Policy::Fenced])).await;
    assert_eq!(app.labs().len(), 2);
    lose_call_and_run(&mut app, &mut terminal, 1).await;
    let naive = app.labs()[0].snapshot().view;
    let fenced = app.labs()[1].snapshot().view;
    assert_eq!(naive.verdict.count(AnomalyKind::TwoRunners), 1);
    assert_eq!(naive.tasks.len(), 2);
    assert!(fenced.verdict.clean, "{:?}", fenced.verdict);
    assert_eq!(fenced.tasks.len(), 1);
    for (w, h) in SIZES {
        let screen = shot(&mut app, w, h);
        for word in ["TWO RUNNERS", "CLEAN"] {
            assert!(
                !screen.contains(word),
                "shown before V at {w}×{h}\n{screen}"
            );
        }
        snapshot(&format!("compare_2026_hidden_{w}x{h}"), &screen);
    }
    app.handle(key('V')).await;
    for (w, h) in SIZES {
        let screen = shot(&mut app, w, h);
        for word in ["TWO", "RUNNERS", "CLEAN"] {
            assert!(screen.contains(word), "{word} missing at {w}×{h}\n{screen}");
        }
        snapshot(&format!("compare_2026_reveal_{w}x{h}"), &screen);
    }
    app.stop().await;
}
