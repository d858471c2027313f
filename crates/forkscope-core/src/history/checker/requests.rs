//! Exactly once, or told, for 2026-07-28's requests and tasks: each call the client meant
//! (`op`, the idempotency key it named it with) is owed one run of its work and one terminal
//! outcome. With no session and no stream to resume, the fork leaves the wire, and its failure
//! class stays in these rules:
//!
//! - **two runners**: a second run of an `op` starts while the first still runs (a re-issue
//!   made a second task), or a task's runner writes on an epoch older than one already taken;
//! - **effect twice**: a step of an `op` applied a second time;
//! - **terminal twice**, **stale read**: a task ended twice, or read back from its end;
//! - **orphan task**: a task whose `op` was asked for again before its id ever reached the
//!   client, so the client can never read it;
//! - **cut halfway**: a plain call cancelled by its closed stream with part of its work done;
//! - **task lost**: the run ended, and no end of a call made as a task reached the client (a
//!   terminal read, or a listen's notification of one), nor a typed error that told it none
//!   will — its runners died, the store forgot it, it never finished. Told, it is
//!   **undelivered**; either way, never clean.
//!
//! A run (a task, or a plain call's request) is matched to its `op` by the record that
//! started it; a run started where this checker did not see it (a task a replica of another
//! process made) stands for itself. State is bounded: the oldest calls, tasks and runs are
//! forgotten past [`KEPT`].

use super::super::anomaly::{Anomaly, Owed, Told};
use super::super::record::{Record, Run};
use crate::ids::TaskId;
use crate::time::LabTime;
use crate::vocabulary::TaskStatus;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Calls (and tasks) kept for judging; past it the oldest are forgotten.
const KEPT: usize = 4_096;
/// Runs of one call kept for judging (a call re-issued more often is judged on the newest).
const RUNS_KEPT: usize = 16;

#[derive(Clone, Debug, Default)]
struct Op {
    /// Each run of it, with the highest step it applied: a run takes its steps in order, so
    /// a step at or below another run's highest was applied before (memory per run, not per
    /// step: a call of a million steps costs what one of two does). The newest [`RUNS_KEPT`].
    applied: Vec<(Run, u64)>,
    /// Runs that applied a step and have not ended.
    live: Vec<Run>,
    /// Fresh tasks made for it, oldest first.
    tasks: Vec<TaskId>,
    /// Already reported as run twice: one report per call.
    two_runners: bool,
    /// Fresh tasks ever made for it.
    made: u32,
    /// An end of it reached the client (a read of a terminal task of it).
    end_read: bool,
    /// What told the client its end will not come, if anything did.
    told: Option<Told>,
    /// Already judged at a run's end.
    settled: bool,
}

#[derive(Clone, Debug)]
struct Task {
    op: Arc<str>,
    /// The highest epoch a write of it was taken on.
    epoch: u64,
    named: bool,
    orphaned: bool,
    settled: Option<TaskStatus>,
    /// The last terminal status a read answered.
    read_terminal: Option<TaskStatus>,
    /// The highest step a write of it applied, of how many.
    done: u64,
    of: u64,
    /// Re-issues its key found it by.
    found_again: u32,
    /// Which of its call's tasks it is: 1, or a run again of the call.
    run: u32,
}

/// Two runs of one call, the one made first first. Two tasks of one call run at once take
/// their steps in a race, so which applied a step first is chance; which was made again (the
/// re-issue's task, "run 2 of its call") is not, and is what the story names as the second.
/// Runs whose making the checker did not see (plain requests) keep the order they acted in.
fn made_order(tasks: &HashMap<TaskId, Task>, before: Run, now: Run) -> (Run, Run) {
    let made = |run: &Run| match run {
        Run::Task(task) => tasks.get(task).map(|t| t.run),
        Run::Request(_) => None,
    };
    match (made(&before), made(&now)) {
        (Some(a), Some(b)) if a > b => (now, before),
        _ => (before, now),
    }
}

/// One task as the checker knows it, for a view to list: it judges nothing.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TaskLine {
    pub id: TaskId,
    /// The call it runs for: the key the client named it by, else the task itself.
    pub op: Arc<str>,
    /// Its end once settled; `None` while it works.
    pub ended: Option<TaskStatus>,
    /// Steps applied, of how many (0 of 0 until its first step).
    pub done: u64,
    pub of: u64,
    /// The highest epoch a write of it was taken on: past 1, a runner adopted it.
    pub epoch: u64,
    /// Its id reached the client.
    pub named: bool,
    /// Its call was asked for again before its id reached the client.
    pub orphaned: bool,
    /// Re-issues its key found it by.
    pub found_again: u32,
    /// Which of its call's tasks it is: past 1, its call ran again.
    pub run: u32,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Requests {
    ops: HashMap<Arc<str>, Op>,
    order: VecDeque<Arc<str>>,
    tasks: HashMap<TaskId, Task>,
    task_order: VecDeque<TaskId>,
    /// Each plain call's `op`.
    calls: HashMap<Arc<str>, Arc<str>>,
    call_order: VecDeque<Arc<str>>,
}

impl Requests {
    /// Judges one fact; the anomalies it caused go to `report`.
    pub(super) fn judge(&mut self, record: &Record, at: LabTime, report: &mut impl FnMut(Anomaly)) {
        match record {
            Record::TaskCreated { op, task, fresh } => self.created(op, *task, *fresh, at, report),
            Record::TaskNamed { task } => {
                if let Some(t) = self.tasks.get_mut(task) {
                    t.named = true;
                }
            }
            Record::CallStarted {
                op,
                run: Run::Request(id),
            } => {
                if self.calls.len() >= KEPT
                    && let Some(oldest) = self.call_order.pop_front()
                {
                    self.calls.remove(&oldest);
                }
                self.call_order.push_back(id.clone());
                self.calls.insert(id.clone(), op.clone());
            }
            Record::StepApplied {
                run,
                step,
                of,
                epoch,
            } => {
                let op = self.op_of(run);
                self.applied(&op, run, (*step, *of, *epoch), at, report);
            }
            Record::CallCut { run, done, of } => {
                let op = self.op_of(run);
                self.ended(&op, run);
                if *done > 0 && done < of {
                    report(Anomaly::CutHalfway {
                        op,
                        run: run.clone(),
                        done: *done,
                        of: *of,
                        at,
                    });
                }
            }
            Record::RunStopped { run } => {
                let op = self.op_of(run);
                self.ended(&op, run);
            }
            Record::TaskSettled { task, status } => {
                let Some(t) = self.tasks.get_mut(task) else {
                    return;
                };
                match t.settled {
                    Some(first) => report(Anomaly::TerminalTwice {
                        task: *task,
                        first,
                        second: *status,
                        at,
                    }),
                    None => t.settled = Some(*status),
                }
                let op = t.op.clone();
                self.ended(&op, &Run::Task(*task));
            }
            Record::TaskRefused { task, reason } => {
                if let Some(t) = self.tasks.get(task) {
                    let op = t.op.clone();
                    self.op(&op).told = Some(Told::TaskRefused { reason });
                }
            }
            Record::TaskRead { task, status } => {
                let Some(t) = self.tasks.get_mut(task) else {
                    return;
                };
                // Judged against what the client was already answered, not against the
                // runner's own record, which a read taken just before it may trail.
                if let Some(was) = t.read_terminal
                    && was != *status
                {
                    report(Anomaly::StaleRead {
                        task: *task,
                        was,
                        read: *status,
                        at,
                    });
                }
                if status.is_terminal() {
                    t.read_terminal = Some(*status);
                    // The client has an end of its call: what it was owed arrived.
                    let op = t.op.clone();
                    self.op(&op).end_read = true;
                }
            }
            _ => {}
        }
    }

    fn created(
        &mut self,
        op: &Arc<str>,
        task: TaskId,
        fresh: bool,
        at: LabTime,
        report: &mut impl FnMut(Anomaly),
    ) {
        if !fresh {
            // The key found the task made before: the client hears its id in this answer.
            if let Some(t) = self.tasks.get_mut(&task) {
                t.named = true;
                t.found_again += 1;
            }
            return;
        }
        // Asked for again: each earlier task of the call whose id the client never used is
        // one it never had, and no one will read its result. Only those are kept to judge (a
        // named or orphaned task is done with), at most the newest [`RUNS_KEPT`].
        let earlier = std::mem::take(&mut self.op(op).tasks);
        for earlier in earlier {
            if let Some(t) = self.tasks.get_mut(&earlier)
                && !t.named
                && !t.orphaned
            {
                t.orphaned = true;
                report(Anomaly::OrphanTask {
                    op: op.clone(),
                    task: earlier,
                    at,
                });
            }
        }
        let entry = self.op(op);
        entry.tasks.push(task);
        entry.made = entry.made.saturating_add(1);
        let run = entry.made;
        if self.tasks.len() >= KEPT
            && let Some(oldest) = self.task_order.pop_front()
        {
            self.tasks.remove(&oldest);
        }
        self.task_order.push_back(task);
        self.tasks.insert(
            task,
            Task {
                op: op.clone(),
                epoch: 0,
                named: false,
                orphaned: false,
                settled: None,
                read_terminal: None,
                done: 0,
                of: 0,
                found_again: 0,
                run,
            },
        );
    }

    /// `run` applied `step` of `of` under `epoch`.
    fn applied(
        &mut self,
        op: &Arc<str>,
        run: &Run,
        (step, of, epoch): (u64, u64, u64),
        at: LabTime,
        report: &mut impl FnMut(Anomaly),
    ) {
        // A step told after its task's end (the store took it first; the report came late)
        // leaves the run ended.
        let (mut stale, mut ended) = (false, false);
        if let Run::Task(task) = run
            && let Some(t) = self.tasks.get_mut(task)
        {
            stale = epoch < t.epoch;
            ended = t.settled.is_some();
            t.epoch = t.epoch.max(epoch);
            t.done = t.done.max(step);
            t.of = of;
        }
        self.op(op);
        // The call's entry beside the tasks, to say which of two runs was made first.
        let (Some(entry), tasks) = (self.ops.get_mut(op), &self.tasks) else {
            return;
        };
        if stale && !entry.two_runners {
            entry.two_runners = true;
            report(Anomaly::TwoRunners {
                op: op.clone(),
                first: run.clone(),
                second: run.clone(),
                at,
            });
        }
        if let Some(other) = entry.live.iter().find(|r| *r != run).cloned()
            && !entry.two_runners
        {
            entry.two_runners = true;
            let (first, second) = made_order(tasks, other, run.clone());
            report(Anomaly::TwoRunners {
                op: op.clone(),
                first,
                second,
                at,
            });
        }
        // The run that applied this step before: another, or this one again.
        let before = entry
            .applied
            .iter()
            .find(|(r, high)| r != run && *high >= step)
            .or_else(|| {
                entry
                    .applied
                    .iter()
                    .find(|(r, high)| r == run && *high >= step)
            });
        if let Some((before, _)) = before {
            let (first, second) = made_order(tasks, before.clone(), run.clone());
            report(Anomaly::EffectTwice {
                op: op.clone(),
                step,
                first,
                second,
                at,
            });
        }
        match entry.applied.iter_mut().find(|(r, _)| r == run) {
            Some((_, high)) => *high = (*high).max(step),
            None => {
                if entry.applied.len() >= RUNS_KEPT {
                    entry.applied.remove(0);
                }
                entry.applied.push((run.clone(), step));
            }
        }
        if step >= of || ended {
            entry.live.retain(|r| r != run);
        } else if !entry.live.contains(run) {
            if entry.live.len() >= RUNS_KEPT {
                entry.live.remove(0);
            }
            entry.live.push(run.clone());
        }
    }

    /// The run ended: every call made as a task whose end never reached the client is owed
    /// it still, and now never will be — undelivered if a typed error told the client so, else
    /// lost. Judged once per call, on its newest task.
    pub(super) fn settle(&mut self, at: LabTime, report: &mut impl FnMut(Anomaly)) {
        for op in &self.order {
            let Some(entry) = self.ops.get_mut(op) else {
                continue;
            };
            if entry.end_read || entry.settled || entry.made == 0 {
                continue;
            }
            entry.settled = true;
            let newest = self
                .task_order
                .iter()
                .rev()
                .find(|id| self.tasks.get(id).is_some_and(|t| t.op == *op));
            let Some((task, t)) = newest.and_then(|id| Some((*id, self.tasks.get(id)?))) else {
                continue;
            };
            report(match entry.told {
                Some(told) => Anomaly::Undelivered {
                    owed: Owed::TaskEnd { task },
                    told,
                    at,
                },
                None => Anomaly::TaskLost {
                    op: op.clone(),
                    task,
                    done: t.done,
                    of: t.of,
                    at,
                },
            });
        }
    }

    /// Calls made as tasks whose end has not reached the client yet, nor been judged.
    pub(super) fn open_ends(&self) -> u64 {
        let open = |op: &&Op| !op.end_read && !op.settled && op.made > 0;
        self.ops.values().filter(open).count() as u64
    }

    /// The tasks kept, oldest first: the newest `n`.
    pub(super) fn tasks(&self, n: usize) -> Vec<TaskLine> {
        let skip = self.task_order.len().saturating_sub(n);
        self.task_order
            .iter()
            .skip(skip)
            .filter_map(|id| {
                let t = self.tasks.get(id)?;
                Some(TaskLine {
                    id: *id,
                    op: t.op.clone(),
                    ended: t.settled,
                    done: t.done,
                    of: t.of,
                    epoch: t.epoch,
                    named: t.named,
                    orphaned: t.orphaned,
                    found_again: t.found_again,
                    run: t.run,
                })
            })
            .collect()
    }

    /// The call `run` runs, as the record that started it said; else the run itself.
    fn op_of(&self, run: &Run) -> Arc<str> {
        let known = match run {
            Run::Task(task) => self.tasks.get(task).map(|t| t.op.clone()),
            Run::Request(id) => self.calls.get(id).cloned(),
        };
        known.unwrap_or_else(|| run.op_name())
    }

    fn ended(&mut self, op: &Arc<str>, run: &Run) {
        if let Some(entry) = self.ops.get_mut(op) {
            entry.live.retain(|r| r != run);
        }
    }

    /// The call `op`, kept from now on (the oldest forgotten past [`KEPT`]).
    fn op(&mut self, op: &Arc<str>) -> &mut Op {
        if !self.ops.contains_key(op) {
            if self.ops.len() >= KEPT
                && let Some(oldest) = self.order.pop_front()
            {
                self.ops.remove(&oldest);
            }
            self.order.push_back(op.clone());
        }
        self.ops.entry(op.clone()).or_default()
    }
}

impl super::Checker {
    /// The newest `n` tasks the checker keeps, oldest first, as a view lists them.
    pub fn tasks(&self, n: usize) -> Vec<TaskLine> {
        self.requests.tasks(n)
    }

    /// The run ended: each task's end still owed is judged ([`Requests::settle`]).
    pub(super) fn settle_tasks(&mut self, at: LabTime) {
        let mut found = Vec::new();
        self.requests.settle(at, &mut |a| found.push(a));
        for anomaly in found {
            self.report(anomaly);
        }
    }

    /// A 2026-07-28 fact: counted, then judged by [`Requests`].
    pub(super) fn judge_request(&mut self, record: &Record, at: LabTime) {
        match record {
            Record::StepApplied { .. } => self.counters.steps_applied += 1,
            Record::TaskCreated { fresh: true, .. } => self.counters.tasks_created += 1,
            Record::TaskCreated { fresh: false, .. } => self.counters.tasks_found_again += 1,
            Record::TaskSettled { .. } => self.counters.tasks_settled += 1,
            _ => {}
        }
        let mut found = Vec::new();
        self.requests.judge(record, at, &mut |a| found.push(a));
        for anomaly in found {
            self.report(anomaly);
        }
    }
}
