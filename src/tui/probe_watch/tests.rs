use super::*;
use forkscope_core::probe::{Answer, Connection, End, Item, Received};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn event(item: Item, order: u64) -> Received {
    Received {
        item,
        event_id: None,
        order,
    }
}

fn forked() -> CaseReport {
    let tick = |n| Item::Numbered {
        channel: "c".into(),
        n,
    };
    CaseReport {
        case: "resume-while-old-open",
        does: "resume while the old connection is still open",
        outcome: Outcome::Violated,
        verdict: Some("two_live_streams"),
        status: None,
        says: "two live streams: the old connection received 2 events after the new one opened (1 there)".into(),
        why: "the resume attached a second stream while the first still received events".into(),
        marked: vec![6, 8],
        connections: vec![
            Connection {
                label: "A".into(),
                request: "GET".into(),
                answer: Answer::Stream { status: 200, opened: 1 },
                events: vec![event(Item::Priming, 2), event(tick(1), 3), event(tick(2), 4), event(tick(3), 6), event(tick(4), 8)],
                end: End::Open,
            },
            Connection {
                label: "B".into(),
                request: "GET Last-Event-ID: 2".into(),
                answer: Answer::Stream { status: 200, opened: 5 },
                events: vec![event(tick(3), 7)],
                end: End::Open,
            },
        ],
        elapsed_ms: 40,
        notes: Vec::new(),
    }
}

#[test]
fn a_violated_case_shows_its_lanes_and_marks_the_breaking_events() {
    let mut watch = Watch::new("http://127.0.0.1:8931/mcp", Theme { color: false });
    watch.apply(Progress::Discovered {
        server: "forkscope 0.1.0".into(),
        protocol: "2025-11-25".into(),
        call_tool: Some("progress_task".into()),
        standalone: "the server's own events".into(),
        cases: vec!["standalone-resume", "resume-while-old-open"],
    });
    watch.apply(Progress::Started("resume-while-old-open"));
    watch.apply(Progress::Finished(Box::new(forked())));
    watch.finish();
    let mut terminal = Terminal::new(TestBackend::new(110, 24)).unwrap();
    terminal.draw(|f| watch.render(f)).unwrap();
    let screen: String = terminal
        .backend()
        .buffer()
        .content()
        .chunks(110)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
        .collect();
    assert!(screen.contains("✗ resume-while-old-open"), "{screen}");
    assert!(screen.contains("VIOLATED  two live streams"), "{screen}");
    let lane_a = screen.lines().find(|l| l.contains("A GET ")).unwrap();
    assert_eq!(lane_a.matches('✕').count(), 2, "{screen}");
    let lane_b = screen
        .lines()
        .find(|l| l.contains("B GET Last-Event-ID"))
        .unwrap();
    assert!(lane_b.contains('▪') && !lane_b.contains('✕'), "{screen}");
    assert!(screen.contains("done: 1 cases, 1 violated"), "{screen}");
    // A tiny terminal draws without panicking.
    let mut tiny = Terminal::new(TestBackend::new(20, 5)).unwrap();
    tiny.draw(|f| watch.render(f)).unwrap();
}

#[test]
fn keys_move_between_cases_and_quit() {
    let mut watch = Watch::new("u", Theme { color: false });
    watch.apply(Progress::Discovered {
        server: "s".into(),
        protocol: "p".into(),
        call_tool: None,
        standalone: "x".into(),
        cases: vec!["standalone-resume", "resume-while-old-open", "bogus-cursor"],
    });
    watch.apply(Progress::Finished(Box::new(forked())));
    assert_eq!(watch.selected, 1, "the selection follows the finished case");
    let press = |c| KeyEvent::new(c, KeyModifiers::NONE);
    assert!(!watch.key(press(KeyCode::Up)));
    assert_eq!(watch.selected, 0);
    watch.apply(Progress::Started("bogus-cursor"));
    assert_eq!(watch.selected, 0, "a moved selection stays put");
    assert!(!watch.key(press(KeyCode::Char('v'))));
    assert_eq!(watch.selected, 1, "v finds the violated case");
    assert!(watch.key(press(KeyCode::Char('q'))));
    assert!(watch.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)));
    assert_eq!(watch.report().unwrap().cases.len(), 1);
}

/// A case with no connection to draw (a task case) shows what it asked and was answered.
#[test]
fn a_task_case_shows_its_requests_and_answers() {
    let mut watch = Watch::new("u", Theme { color: false });
    watch.apply(Progress::Discovered {
        server: "s".into(),
        protocol: "2026-07-28".into(),
        call_tool: Some("progress_task".into()),
        standalone: "x".into(),
        cases: vec!["task-get-repeated"],
    });
    let mut task = forked();
    task.case = "task-get-repeated";
    task.connections.clear();
    task.notes = vec!["at 0.10 s: tasks/get 02bc9e61 → working (×8)".into()];
    watch.apply(Progress::Finished(Box::new(task)));
    watch.finish();
    let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
    terminal.draw(|f| watch.render(f)).unwrap();
    let screen: String = terminal
        .backend()
        .buffer()
        .content()
        .chunks(100)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
        .collect();
    assert!(
        screen.contains("tasks/get 02bc9e61 → working (×8)"),
        "{screen}"
    );
}
