//! The 2026-07-28 rules (`requests.rs`) fed record by record: each hazard named, and the
//! fenced history of the same faults clean.

use crate::history::anomaly::{Anomaly, AnomalyKind};
use crate::history::{Checker, Entry, Record, Run};
use crate::ids::{SplitMix64, TaskId};
use crate::time::LabTime;
use crate::vocabulary::TaskStatus;
use std::sync::Arc;

struct Feed {
    checker: Checker,
    at: u64,
    rng: SplitMix64,
}

impl Feed {
    fn new() -> Feed {
        Feed {
            checker: Checker::default(),
            at: 0,
            rng: SplitMix64::new(7),
        }
    }

    fn see(&mut self, record: Record) -> Vec<AnomalyKind> {
        self.at += 1;
        let entry = Entry {
            at: LabTime::from_millis(self.at),
            by: None,
            record,
            caused: Default::default(),
        };
        let caused = self.checker.observe(&entry);
        caused.anomalies().iter().map(Anomaly::kind).collect()
    }

    fn task(&mut self) -> TaskId {
        TaskId::generate(&mut self.rng)
    }

    fn create(&mut self, op: &str, task: TaskId, fresh: bool) -> Vec<AnomalyKind> {
        self.see(Record::TaskCreated {
            op: op.into(),
            task,
            fresh,
        })
    }

    fn step(&mut self, task: TaskId, step: u64, epoch: u64) -> Vec<AnomalyKind> {
        self.see(Record::StepApplied {
            run: Run::Task(task),
            step,
            of: 3,
            epoch,
        })
    }

    fn settle(&mut self, task: TaskId, status: TaskStatus) -> Vec<AnomalyKind> {
        self.see(Record::TaskSettled { task, status })
    }

    fn read(&mut self, task: TaskId, status: TaskStatus) -> Vec<AnomalyKind> {
        self.see(Record::TaskRead { task, status })
    }

    fn count(&self, kind: AnomalyKind) -> u64 {
        self.checker.count(kind)
    }
}

/// Naive: the `CreateTaskResult` is lost after step 1, the client re-issues with the same key,
/// and the server makes a second task: the first is orphaned, two run at once, and every step
/// the first had taken is taken again.
#[test]
fn a_lost_create_result_reissued_to_a_naive_server_orphans_runs_twice_and_applies_twice() {
    let mut f = Feed::new();
    let (a, b) = (f.task(), f.task());
    assert!(f.create("charge-1", a, true).is_empty());
    assert!(f.step(a, 1, 1).is_empty());
    assert_eq!(f.create("charge-1", b, true), vec![AnomalyKind::OrphanTask]);
    assert_eq!(
        f.step(b, 1, 1),
        vec![AnomalyKind::TwoRunners, AnomalyKind::EffectTwice]
    );
    assert_eq!(f.step(a, 2, 1), vec![]);
    assert_eq!(f.step(b, 2, 1), vec![AnomalyKind::EffectTwice]);
    assert!(f.checker.verdict().summary().contains("two_runners ×1"));
    let said = f.checker.anomalies()[0].to_string();
    assert!(
        said.contains("orphan task") && said.contains("charge-1"),
        "{said}"
    );
}

/// Two tasks of one call race for their steps: whichever writes a step first, the second
/// runner and the run that applied it again are the task made after (the re-issue's, "run 2
/// of its call" in the server's pane), so the story does not change with the race.
#[test]
fn of_two_tasks_racing_the_one_made_after_is_the_second_runner_whoever_writes_first() {
    let mut f = Feed::new();
    let (a, b) = (f.task(), f.task());
    f.create("charge-1", a, true);
    f.create("charge-1", b, true);
    // The re-issue's task takes step 1 first, then the orphan; the orphan takes step 2 first.
    assert!(f.step(b, 1, 1).is_empty());
    f.step(a, 1, 1);
    f.step(a, 2, 1);
    f.step(b, 2, 1);
    let runs = |anomaly: &Anomaly| match anomaly {
        Anomaly::TwoRunners { first, second, .. } | Anomaly::EffectTwice { first, second, .. } => {
            Some((first.clone(), second.clone()))
        }
        _ => None,
    };
    let pairs: Vec<_> = f.checker.anomalies().iter().filter_map(runs).collect();
    assert_eq!(
        pairs.len(),
        3,
        "two runners, and steps 1 and 2 applied again"
    );
    for pair in pairs {
        assert_eq!(pair, (Run::Task(a), Run::Task(b)));
    }
}

/// Fenced: the re-issue's key finds the task made before; one run, each step once.
#[test]
fn the_same_faults_against_a_fenced_server_are_clean() {
    let mut f = Feed::new();
    let a = f.task();
    assert!(f.create("charge-1", a, true).is_empty());
    assert!(f.step(a, 1, 1).is_empty());
    assert!(f.create("charge-1", a, false).is_empty());
    // The runner dies; a poll elsewhere adopts under epoch 2 and runs on from step 1.
    assert!(f.step(a, 2, 2).is_empty());
    assert!(f.step(a, 3, 2).is_empty());
    assert!(f.settle(a, TaskStatus::Completed).is_empty());
    assert!(f.read(a, TaskStatus::Completed).is_empty());
    assert!(f.read(a, TaskStatus::Completed).is_empty());
    // A fresh task for a key the client already learned is no orphan.
    let b = f.task();
    f.see(Record::TaskNamed { task: a });
    assert!(f.create("charge-1", b, true).is_empty());
    assert!(f.checker.verdict().clean);
}

/// A runner that lost its lease and still writes: the store should have refused it.
#[test]
fn a_write_on_an_epoch_older_than_one_taken_is_two_runners() {
    let mut f = Feed::new();
    let a = f.task();
    f.create("k", a, true);
    f.step(a, 1, 1);
    f.step(a, 2, 2);
    assert_eq!(f.step(a, 3, 1), vec![AnomalyKind::TwoRunners]);
    let said = f.checker.anomalies()[0].to_string();
    assert!(said.contains("epoch older"), "{said}");
    // Reported once per call.
    assert!(f.step(a, 3, 1).contains(&AnomalyKind::EffectTwice));
    assert_eq!(f.count(AnomalyKind::TwoRunners), 1);
}

#[test]
fn a_task_ended_twice_and_a_read_back_from_its_end_are_named() {
    let mut f = Feed::new();
    let a = f.task();
    f.create("k", a, true);
    assert!(f.read(a, TaskStatus::Working).is_empty());
    assert!(f.settle(a, TaskStatus::Completed).is_empty());
    assert_eq!(
        f.settle(a, TaskStatus::Cancelled),
        vec![AnomalyKind::TerminalTwice]
    );
    assert!(f.read(a, TaskStatus::Completed).is_empty());
    assert_eq!(f.read(a, TaskStatus::Working), vec![AnomalyKind::StaleRead]);
    assert_eq!(
        f.read(a, TaskStatus::Cancelled),
        vec![AnomalyKind::StaleRead]
    );
}

/// A plain call's closed stream cancels it: halfway is named, before any step or at its end
/// is not (nothing was done, or all of it).
#[test]
fn a_cancel_by_a_closed_stream_is_cut_halfway_only_with_part_done() {
    let mut f = Feed::new();
    f.see(Record::CallStarted {
        op: Arc::from("7"),
        run: Run::Request("7".into()),
    });
    let cut = |done| Record::CallCut {
        run: Run::Request("7".into()),
        done,
        of: 4,
    };
    assert!(f.see(cut(0)).is_empty());
    assert_eq!(f.see(cut(2)), vec![AnomalyKind::CutHalfway]);
    assert!(f.see(cut(4)).is_empty());
    assert!(f.checker.anomalies()[0].to_string().contains("2 of 4"));
}

/// Plain calls re-issued under one key: each step again, and two runners while both ran.
#[test]
fn a_plain_call_reissued_under_its_key_applies_its_steps_twice() {
    let mut f = Feed::new();
    for id in ["1", "2"] {
        f.see(Record::CallStarted {
            op: Arc::from("pay"),
            run: Run::Request(id.into()),
        });
    }
    let run = |id: &str, step| Record::StepApplied {
        run: Run::Request(id.into()),
        step,
        of: 2,
        epoch: 0,
    };
    assert!(f.see(run("1", 1)).is_empty());
    f.see(Record::CallCut {
        run: Run::Request("1".into()),
        done: 1,
        of: 2,
    });
    // The first run ended (cut): the re-issue is not a second runner, but it applies step 1
    // again.
    assert_eq!(f.see(run("2", 1)), vec![AnomalyKind::EffectTwice]);
    assert!(f.see(run("2", 2)).is_empty());
}

/// What is kept per call is a highest step per run, not a record per step: a step at or below
/// another run's highest is its second application, and so is a run taking its own step again
/// (an adopter that did not start after the last committed step).
#[test]
fn steps_are_judged_by_each_runs_highest_step() {
    let mut f = Feed::new();
    let (a, b) = (f.task(), f.task());
    f.create("k", a, true);
    for step in 1..=3 {
        assert!(f.step(a, step, 1).is_empty());
    }
    f.settle(a, TaskStatus::Completed);
    f.create("k", b, true);
    assert_eq!(f.step(b, 2, 1), vec![AnomalyKind::EffectTwice]);
    assert_eq!(f.step(b, 4, 1), vec![]);
    let c = f.task();
    f.create("j", c, true);
    assert!(f.step(c, 1, 1).is_empty());
    assert!(f.step(c, 2, 2).is_empty());
    assert_eq!(f.step(c, 2, 2), vec![AnomalyKind::EffectTwice]);
}

/// Exactly once, or told: a task's end that never reached the client is lost at the run's end
/// (whatever the runner did), undelivered when a typed error told the client, and nothing once
/// a read answered its end.
#[test]
fn a_task_whose_end_never_reached_the_client_is_lost_or_told_never_clean() {
    // One call made as a task, then `then` (given the task), then the run's end.
    let judged = |then: &dyn Fn(&mut Feed, TaskId)| {
        let mut f = Feed::new();
        let t = f.task();
        f.create("order-1", t, true);
        then(&mut f, t);
        let ended = Record::RunEnded {
            reconnecting: false,
        };
        let first = f.see(ended.clone());
        // A second run end judges nothing twice.
        assert!(f.see(ended).is_empty());
        first
    };
    let read = |f: &mut Feed, task, status| f.see(Record::TaskRead { task, status });
    // Its runners died after a step: no end was ever read.
    let died = judged(&|f, t| {
        f.step(t, 1, 1);
    });
    assert_eq!(died, vec![AnomalyKind::TaskLost]);
    // Completed in the store, but the client never read it: still owed, still lost.
    let unread = judged(&|f, t| {
        f.settle(t, TaskStatus::Completed);
        read(f, t, TaskStatus::Working);
    });
    assert_eq!(unread, vec![AnomalyKind::TaskLost]);
    // A typed error told the client: undelivered.
    let told = judged(&|f, task| {
        f.see(Record::TaskRefused {
            task,
            reason: "store_corrupt",
        });
    });
    assert_eq!(told, vec![AnomalyKind::Undelivered]);
    // A read answered its end: nothing owed.
    let delivered = judged(&|f, t| {
        f.settle(t, TaskStatus::Completed);
        read(f, t, TaskStatus::Completed);
    });
    assert!(delivered.is_empty());
}
