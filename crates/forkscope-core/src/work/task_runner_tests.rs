//! The task runner against the core's task table on a clock only the test moves: a task whose
//! steps outlast the lease ends while it is polled, and one whose runner stops is adopted.

use super::{RunnerWrite, TaskRunner, ToolSpec};
use crate::ids::{SplitMix64, TaskId};
use crate::tasks::{
    DEFAULT_TTL_MS, Holder, POLL_INTERVAL_MS, Runner, Settled, Status, TaskTable, Work,
};
use crate::time::LabTime;
use std::sync::Arc;

const LEASE: u64 = 1_000;

/// Carries out every write the runner has due at `now` on `table`, as the wire does.
fn drive(runner: &mut TaskRunner, table: &mut TaskTable, now: LabTime) {
    while let Some(write) = runner.poll_write(now) {
        let (task, epoch) = (runner.task(), runner.epoch());
        let landed = match write {
            RunnerWrite::Renew { wrote } => table.renew(now, task, epoch, wrote).is_ok(),
            RunnerWrite::Step { done, .. } => table.step(now, task, epoch, done).is_ok(),
            RunnerWrite::Last { steps } => table
                .finish(now, task, epoch, steps, Some(Arc::from("{}")))
                .is_ok(),
            RunnerWrite::Finish { steps } => matches!(
                table.settle(
                    now,
                    task,
                    Some(Holder {
                        epoch,
                        wrote: steps
                    }),
                    Status::Completed,
                    Some(Arc::from("{}"))
                ),
                Ok(Settled::Won(_))
            ),
        };
        if landed {
            runner.written(now);
        } else {
            runner.stop();
        }
    }
}

fn task(table: &mut TaskTable, steps: u64, delay_ms: u64) -> (TaskId, TaskRunner) {
    let id = TaskId::generate(&mut SplitMix64::new(3));
    let spec = ToolSpec { steps, delay_ms };
    let work = Work { steps, delay_ms };
    let made = table
        .create(LabTime::ZERO, id, work, DEFAULT_TTL_MS, None, Runner(0))
        .unwrap();
    let runner = TaskRunner::new(made.id, made.epoch, spec, 0, LEASE, LabTime::ZERO);
    (made.id, runner)
}

/// Steps three times the lease, read at the poll interval (every read may adopt): the runner's
/// renewals keep its lease, nothing is adopted, and the task completes.
#[test]
fn a_task_whose_steps_outlast_the_lease_completes_while_polled() {
    let mut table = TaskTable::new().with_lease(LEASE);
    let (id, mut runner) = task(&mut table, 3, 3 * LEASE);
    let mut now = LabTime::ZERO;
    while now.as_millis() < 20_000 {
        drive(&mut runner, &mut table, now);
        assert_eq!(table.adopt(now, id, Runner(1)), None, "adopted at {now:?}");
        if table.get(id).unwrap().status.is_terminal() {
            break;
        }
        now = now.plus(POLL_INTERVAL_MS.min(runner.poll_timeout().unwrap().since(now).max(1)));
    }
    let done = table.get(id).unwrap();
    assert_eq!(done.status, Status::Completed);
    assert_eq!((done.done, done.epoch), (3, 1));
}

/// The runner says when it next writes: never later than a third of the lease.
#[test]
fn the_runner_wakes_to_renew_between_long_steps() {
    let mut table = TaskTable::new().with_lease(LEASE);
    let (_, mut runner) = task(&mut table, 2, 10_000);
    let first = runner.poll_timeout().unwrap();
    assert_eq!(first.as_millis(), LEASE / 3);
    assert_eq!(
        runner.poll_write(first),
        Some(RunnerWrite::Renew { wrote: 0 })
    );
    // Until the renewal lands, none is due again.
    assert_eq!(runner.poll_write(first), None);
    runner.written(first);
    assert_eq!(runner.poll_timeout().unwrap(), first.plus(LEASE / 3));
}

/// A runner that stops renewing (killed, paused) loses its task to the next read past its
/// lease, and its next write is refused.
#[test]
fn a_runner_that_stops_renewing_is_adopted_and_refused() {
    let mut table = TaskTable::new().with_lease(LEASE);
    let (id, mut runner) = task(&mut table, 3, 3 * LEASE);
    let paused = LabTime::from_millis(LEASE - 1);
    assert_eq!(table.adopt(paused, id, Runner(1)), None);
    let late = LabTime::from_millis(LEASE);
    assert_eq!(table.adopt(late, id, Runner(1)), Some(2));
    drive(&mut runner, &mut table, late);
    assert!(
        runner.is_over(),
        "the stale runner stops at its first refused write"
    );
    assert_eq!(table.get(id).unwrap().done, 0);
}

/// A last step whose result is due with it goes as one write; one paced before its result
/// goes alone, and the result follows a delay later.
#[test]
fn the_last_step_and_a_result_due_with_it_are_one_write() {
    let mut table = TaskTable::new().with_lease(LEASE);
    let (_, mut runner) = task(&mut table, 1, 0);
    assert_eq!(
        runner.poll_write(LabTime::ZERO),
        Some(RunnerWrite::Last { steps: 1 })
    );
    let (_, mut paced) = task(&mut TaskTable::new().with_lease(LEASE), 1, 100);
    let at = LabTime::from_millis(100);
    assert_eq!(
        paced.poll_write(at),
        Some(RunnerWrite::Step { done: 1, total: 1 })
    );
    assert_eq!(paced.poll_write(at), None);
    assert_eq!(
        paced.poll_write(LabTime::from_millis(200)),
        Some(RunnerWrite::Finish { steps: 1 })
    );
}

/// A runner behind its schedule (a slow store) finds its last step and result due together.
#[test]
fn a_late_runner_finishes_in_one_write() {
    let mut table = TaskTable::new().with_lease(LEASE);
    let (id, mut runner) = task(&mut table, 2, 100);
    drive(&mut runner, &mut table, LabTime::from_millis(100));
    assert_eq!(
        runner.poll_write(LabTime::from_millis(900)),
        Some(RunnerWrite::Last { steps: 2 })
    );
    runner.written(LabTime::from_millis(900));
    table
        .finish(LabTime::from_millis(900), id, 1, 2, None)
        .unwrap();
    assert_eq!(table.get(id).unwrap().status, Status::Completed);
    assert!(runner.is_over());
}
