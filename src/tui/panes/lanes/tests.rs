use super::*;
use forkscope_core::sim::Sim;
use forkscope_core::{LabConfig, Policy, StreamId};

/// A live stream with nothing to say for longer than the lanes' span keeps its lane.
#[test]
fn a_live_but_quiet_stream_keeps_its_lane() {
    let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 1).unwrap();
    sim.start();
    sim.deliver_all();
    sim.advance(120_000);
    let snap = crate::lab::Snapshot::from_sim(&sim, Vec::new());
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 8)).unwrap();
    terminal
        .draw(|frame| {
            render(frame, frame.area(), &snap, None, &Theme::from_env());
        })
        .unwrap();
    let screen = terminal.backend().to_string();
    assert!(screen.contains("│s1 "), "{screen}");
}

/// 2026-07-28: each task on its own lane, labelled by its id, with the 2026 legend; in a
/// pane too small for a task's lane, its marks fall to the client's lane.
#[test]
fn tasks_get_lanes_and_a_small_pane_keeps_their_marks_on_the_client_lane() {
    use forkscope_core::history::{Caused, Entry, Record, Run};
    use forkscope_core::{LabTime, SplitMix64, TaskId};
    let mut sim = Sim::new(LabConfig::default(), Policy::Naive, 1).unwrap();
    sim.start();
    sim.deliver_all();
    let mut snap = crate::lab::Snapshot::from_sim(&sim, Vec::new());
    let mut rng = SplitMix64::new(9);
    let (a, b) = (TaskId::generate(&mut rng), TaskId::generate(&mut rng));
    let at = |ms: u64, record: Record| Entry {
        at: LabTime::from_millis(ms),
        by: None,
        record,
        caused: Caused::NOTHING,
    };
    let step = |task: TaskId, n: u64| Record::StepApplied {
        run: Run::Task(task),
        step: n,
        of: 2,
        epoch: 1,
    };
    let now = snap.view.at.as_millis();
    snap.recent.extend([
        at(
            now,
            Record::TaskCreated {
                op: "k".into(),
                task: a,
                fresh: true,
            },
        ),
        at(
            now,
            Record::TaskCreated {
                op: "k".into(),
                task: b,
                fresh: true,
            },
        ),
        at(now, step(a, 1)),
        at(now, step(b, 1)),
    ]);
    let draw = |height: u16| {
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, height)).unwrap();
        terminal
            .draw(|frame| {
                render(frame, frame.area(), &snap, None, &Theme::from_env());
            })
            .unwrap();
        terminal.backend().to_string()
    };
    let tall = draw(9);
    for task in [a, b] {
        assert!(tall.contains(&format!("t{}", task.short())), "{tall}");
    }
    assert!(tall.contains("◇ task made"), "{tall}");
    // Three rows inside: one stream, one task, the client; the other task on the client's,
    // and the title says so.
    let small = draw(5);
    let client = small.lines().find(|l| l.contains("│client")).unwrap();
    assert!(
        client.contains(STEP) || client.contains(TASK_MADE),
        "{small}"
    );
    assert!(
        small.contains("1 more task's marks on the client lane"),
        "{small}"
    );
}

#[test]
fn a_click_maps_to_its_lane_and_time() {
    let drawn = LanesDrawn {
        area: Rect::new(0, 0, 30, 6),
        rows: vec![(1, Row::Stream(Lane::of(StreamId(1)))), (2, Row::Client)],
        first_column: 9,
        columns: 19,
        start_ms: 1000,
        ms_per_column: 10,
        in_order: false,
        on_client: Vec::new(),
    };
    assert_eq!(
        drawn.hit(9, 1),
        Some((Row::Stream(Lane::of(StreamId(1))), 1000, 1010))
    );
    assert_eq!(drawn.hit(12, 2), Some((Row::Client, 1030, 1040)));
    assert_eq!(drawn.hit(3, 2), None, "the label column");
    assert_eq!(drawn.hit(12, 4), None, "below the lanes");
}

/// With no stream to keep a lane open (a lab of tasks), a run gone quiet for longer than the
/// lanes' span keeps its last marks in view, and says since when it is quiet.
#[test]
fn tasks_of_a_run_gone_quiet_stay_in_view() {
    use forkscope_core::history::{Caused, Entry, Record};
    use forkscope_core::{LabTime, SplitMix64, TaskId};
    let mut sim = Sim::new(LabConfig::default(), Policy::Naive, 1).unwrap();
    sim.advance(60_000);
    let mut snap = crate::lab::Snapshot::from_sim(&sim, Vec::new());
    let task = TaskId::generate(&mut SplitMix64::new(3));
    snap.recent.push(Entry {
        at: LabTime::from_millis(2_500),
        by: None,
        record: Record::TaskCreated {
            op: "k".into(),
            task,
            fresh: true,
        },
        caused: Caused::NOTHING,
    });
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 6)).unwrap();
    terminal
        .draw(|frame| {
            render(frame, frame.area(), &snap, None, &Theme::from_env());
        })
        .unwrap();
    let screen = terminal.backend().to_string();
    let lane = format!("t{}", task.short());
    assert!(screen.contains(&lane), "{screen}");
    assert!(screen.contains("up to 2.5 s (quiet since)"), "{screen}");
}
