//! `forkscope check --protocol 2026-07-28`: one call of the tasks extension as plain data,
//! explored breadth-first by the same search as the other models.
//!
//! Under 2026-07-28 nothing resumes: a client whose answer was lost re-issues its call as a new
//! request. So the model is one client with one intent (its idempotency key) calling
//! `progress_task` as a task, and the faults the revision leaves: the `CreateTaskResult` lost on
//! the way (the client re-issues), a runner that dies (its lease runs out, and a poll adopts the
//! task), a cancel racing the completion, and the TTL. Every write goes through the core's own
//! [`TaskTable`] — the table the wire's stores keep and the Redis script mirrors — under the
//! policy's [`TaskRules`], and what happened is recorded in a [`History`] the real checker
//! judges: a step applied twice, two runners, an orphan task, an end reached twice, a read back
//! from an end.
//!
//! The client is the core's own [`Intent`] — the machine the lab's client drives — knowing
//! tasks by their index in the model: what it re-issues, and what it has read.
//!
//! Time is explored too: each step of the work takes longer than the lease, so a runner lives
//! only by renewing, and a runner is the core's own [`TaskRunner`] — the machine the wire's
//! runners drive — whose every write (a step, the result, a renewal) is one step of the search,
//! racing the client's polls. Liveness is judged as `run` judges a quiet lab: wherever the client
//! knows its task and nothing is in flight, the lab is let run on with the client polling at its
//! interval, the run ends, and a task whose end never reached the client is lost — so a runner
//! that does not renew (the mutation [`Params::renewal`] switches on) is found: every poll past
//! its lease adopts the task, the adopter waits a whole step again, and the task never ends.
//!
//! Counters (calls, crashes) are bounded by [`Params`], so the space is finite and small enough
//! to explore to depth 16 in a moment.

mod explore;
#[cfg(test)]
mod tests;

pub use explore::{TracedStep, explore, trace};

use crate::client::intent::{CallAnswer, Intent, IntentStep, ReadAnswer};
use crate::history::{Anomaly, History, Record, Run};
use crate::ids::{SplitMix64, TaskId};
use crate::policy::Policy;
use crate::tasks::{
    DEFAULT_TTL_MS, Holder, Keyed, LEASE_MS, Runner, Settled, Status, TaskRules, TaskTable, Work,
};
use crate::time::LabTime;
use crate::work::{RunnerWrite, TaskRunner, ToolSpec};
use serde::Serialize;
use std::fmt;

/// What a search of the model found.
pub type Exploration = crate::model::Exploration<RequestStep, Params>;
pub type Counterexample = crate::model::Counterexample<RequestStep>;

/// Steps of work the call has before its result: the smallest in which a re-issue can apply a
/// step twice while another is still to come; each longer than the lease, so a runner that does
/// not renew between steps loses its task.
pub const WORK: Work = Work {
    steps: 2,
    delay_ms: LEASE_MS + LEASE_MS / 2,
};
/// Rounds of the client's polling a quiet lab is let run before its run ends: far more than
/// the work takes at its pace, so only a task that never ends is still owed then.
const QUIESCE_ROUNDS: usize = 256;
/// The client's idempotency key for its one intent.
pub const KEY: &str = "charge-1";
/// Runners the model follows at once (each task's creator, and each adopter).
pub const MAX_RUNNERS: usize = 4;

/// How far the model goes besides the depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Params {
    /// Calls the client makes: the first, and re-issues after a lost answer.
    pub calls: u8,
    /// Runners that may die.
    pub crashes: u8,
    /// Look for this anomaly, exploring past the others; `None`: stop at the first violation.
    pub target: Option<crate::history::AnomalyKind>,
    /// Runners renew their lease between steps; `false` is a mutation (the runner as it was
    /// before it renewed) that the search must catch.
    pub renewal: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            calls: 3,
            crashes: 1,
            target: None,
            renewal: true,
        }
    }
}

/// One atomic step: the client's, the network's, a runner's, or time's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "step", content = "runner")]
pub enum RequestStep {
    /// The client calls the tool as a task under its key: its first call, or the re-issue the
    /// revision asks for after the answer was lost (a new request id, the same key).
    Call,
    /// The `CreateTaskResult` in flight reaches the client: it knows the task.
    Answer,
    /// The `CreateTaskResult` in flight is lost (the response stream broke).
    LoseAnswer,
    /// Runner N makes the write it has due: its task's next step, the result, or a renewal of
    /// its lease.
    Run(u8),
    /// Runner N dies (its replica crashed): it writes nothing more.
    Crash(u8),
    /// Time passes to the next deadline: a runner's next write falls due, or a lease runs out.
    Tick,
    /// The client polls `tasks/get` for the task it knows; one found working past its lease
    /// is adopted by the replica that answered.
    Poll,
    /// The client cancels the task it knows.
    Cancel,
    /// The TTL of every task runs out: an unfinished one is failed.
    TtlExpires,
}

impl RequestStep {
    /// Every step the search tries, in the order it tries them.
    pub fn alphabet() -> Vec<RequestStep> {
        let mut steps = vec![
            RequestStep::Call,
            RequestStep::Answer,
            RequestStep::LoseAnswer,
        ];
        for r in 0..MAX_RUNNERS as u8 {
            steps.push(RequestStep::Run(r));
            steps.push(RequestStep::Crash(r));
        }
        steps.extend([
            RequestStep::Tick,
            RequestStep::Poll,
            RequestStep::Cancel,
            RequestStep::TtlExpires,
        ]);
        steps
    }
}

impl fmt::Display for RequestStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestStep::Call => write!(f, "the client calls progress_task as a task, key {KEY}"),
            RequestStep::Answer => f.write_str("the CreateTaskResult reaches the client"),
            RequestStep::LoseAnswer => {
                f.write_str("the CreateTaskResult is lost: the response stream broke")
            }
            RequestStep::Run(r) => write!(f, "runner {r} makes its next write"),
            RequestStep::Crash(r) => write!(f, "runner {r} dies (its replica crashed)"),
            RequestStep::Tick => f.write_str("time passes to the next deadline"),
            RequestStep::Poll => f.write_str("the client polls tasks/get"),
            RequestStep::Cancel => f.write_str("the client cancels the task"),
            RequestStep::TtlExpires => f.write_str("the tasks' TTL runs out"),
        }
    }
}

/// One runner of one task: the core's machine, and which task it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelRunner {
    /// Index into the tasks, in creation order.
    pub task: u8,
    pub runner: TaskRunner,
}

/// The client's one call under 2026-07-28, as plain data.
#[derive(Clone, Debug)]
pub struct RequestLab {
    pub(crate) policy: Policy,
    rules: TaskRules,
    pub(crate) table: TaskTable,
    pub(crate) now: LabTime,
    /// Tasks in the order they were made.
    pub(crate) tasks: Vec<TaskId>,
    pub(crate) runners: Vec<ModelRunner>,
    /// The answer on its way to the client: the task it names.
    pub(crate) in_flight: Option<u8>,
    /// The client: the core's own machine, the one the lab's client drives, knowing tasks by
    /// their index here. Its calls are bounded by [`Params::calls`], not by its own limit.
    pub(crate) intent: Intent<u8>,
    pub(crate) crashes: u8,
    pub(crate) cancelled: bool,
    pub(crate) ttl_passed: bool,
    pub(crate) history: History,
    rng: SplitMix64,
    /// Whether new runners renew ([`Params::renewal`]).
    renewal: bool,
}

impl RequestLab {
    /// A client about to call; `capacity`: history entries kept for a trace.
    pub fn new(policy: Policy, capacity: usize) -> RequestLab {
        RequestLab {
            policy,
            rules: TaskRules::of(policy),
            table: TaskTable::new(),
            now: LabTime::ZERO,
            tasks: Vec::new(),
            runners: Vec::new(),
            in_flight: None,
            intent: Intent::new(u32::from(u8::MAX)),
            crashes: 0,
            cancelled: false,
            ttl_passed: false,
            history: History::new(capacity),
            rng: SplitMix64::new(0x2026_0728),
            renewal: true,
        }
    }

    /// Whether the run may end here and be judged: the client knows its task and nothing is on
    /// its way to it (a state where it knows none was cut by the bound on its re-issues).
    pub(crate) fn at_rest(&self) -> bool {
        self.intent.known().is_some() && self.in_flight.is_none()
    }

    /// Lets the lab run on as a quiet lab does before a run ends — every runner making its
    /// writes as they fall due, the client polling at its interval (a read adopting a dead
    /// runner's task, as ever) until it has read its task's end — then ends the run, so what is
    /// still owed is judged. Bounded by [`QUIESCE_ROUNDS`] polls: a task still not ended then
    /// never will be.
    pub(crate) fn end_run(&mut self) {
        for _ in 0..QUIESCE_ROUNDS {
            if self.intent.known().is_none() || self.intent.outcome().is_some() {
                break;
            }
            for r in 0..self.runners.len() {
                let now = self.now;
                while (self.runners[r].runner.poll_timeout()).is_some_and(|due| due <= now) {
                    self.run(r);
                }
            }
            // The client reads at its own pace, as the lab's client does: the machine says when.
            match self.intent.next(self.now) {
                IntentStep::Read { .. } => self.poll(usize::MAX),
                // A re-issue in a quiet lab: its answer arrives.
                IntentStep::Call => {
                    self.call();
                    if let Some(task) = self.in_flight.take() {
                        self.intent.answered(self.now, CallAnswer::Created(task));
                    }
                }
                _ => {}
            }
            let next_read = self.intent.poll_timeout().unwrap_or(self.now);
            self.now = self
                .next_deadline()
                .map_or(next_read, |at| at.min(next_read))
                .max(self.now);
        }
        self.record(Record::RunEnded {
            reconnecting: false,
        });
    }

    pub(crate) fn keep_verdict_only(&mut self) {
        self.history.keep_verdict_only();
    }

    /// The first violation the checker named (of `target`'s kind, when given), if any.
    pub fn anomaly(&self, target: Option<crate::history::AnomalyKind>) -> Option<&Anomaly> {
        self.history.checker().first_wanted(target)
    }

    fn status(&self, task: u8) -> Option<Status> {
        self.table
            .get(self.tasks[usize::from(task)])
            .ok()
            .map(|t| t.status)
    }

    fn working(&self, task: u8) -> bool {
        self.status(task) == Some(Status::Working)
    }

    pub fn enabled(&self, step: RequestStep, params: &Params) -> bool {
        let awaiting = self.in_flight.is_some();
        match step {
            // The first call, or a re-issue: nothing known and nothing on its way.
            RequestStep::Call => {
                self.intent.wants_call()
                    && self.intent.calls() < u32::from(params.calls)
                    && !self.ttl_passed
            }
            RequestStep::Answer | RequestStep::LoseAnswer => awaiting,
            RequestStep::Run(r) => self
                .runners
                .get(usize::from(r))
                .and_then(|r| r.runner.poll_timeout())
                .is_some_and(|due| due <= self.now),
            RequestStep::Crash(r) => {
                self.crashes < params.crashes
                    && self
                        .runners
                        .get(usize::from(r))
                        .is_some_and(|r| !r.runner.is_over())
            }
            RequestStep::Tick => self.next_deadline().is_some(),
            RequestStep::Poll => self.intent.known().is_some(),
            RequestStep::Cancel => self.intent.known().is_some() && !self.cancelled,
            RequestStep::TtlExpires => !self.tasks.is_empty() && !self.ttl_passed,
        }
    }

    fn record(&mut self, record: Record) {
        self.history.record(self.now, record);
    }

    /// The next moment something falls due on its own, after now: a live runner's next write,
    /// or the end of a working task's lease.
    fn next_deadline(&self) -> Option<LabTime> {
        let writes = self.runners.iter().filter_map(|r| r.runner.poll_timeout());
        let leases = self.tasks.iter().filter_map(|&id| {
            let task = self.table.get(id).ok()?;
            (task.status == Status::Working).then_some(task.lease_until)
        });
        writes.chain(leases).filter(|&at| at > self.now).min()
    }

    /// A runner for task `index` under `epoch` from `done` steps, as the rules say it renews.
    fn start_runner(&mut self, index: u8, epoch: u64, done: u64, renewal: bool) {
        let spec = ToolSpec {
            steps: WORK.steps,
            delay_ms: WORK.delay_ms,
        };
        let id = self.tasks[usize::from(index)];
        let runner = TaskRunner::new(id, epoch, spec, done, self.table.lease_ms(), self.now);
        let runner = if renewal {
            runner
        } else {
            runner.without_renewal()
        };
        self.runners.push(ModelRunner {
            task: index,
            runner,
        });
    }

    pub fn take(&mut self, step: RequestStep, params: &Params) {
        self.renewal = params.renewal;
        match step {
            RequestStep::Call => {
                if self.intent.next(self.now) == IntentStep::Call {
                    self.call();
                }
            }
            RequestStep::Answer => {
                if let Some(task) = self.in_flight.take() {
                    self.intent.answered(self.now, CallAnswer::Created(task));
                }
            }
            RequestStep::LoseAnswer => {
                self.in_flight = None;
                self.intent.answered(self.now, CallAnswer::Lost);
            }
            RequestStep::Run(r) => self.run(usize::from(r)),
            RequestStep::Crash(r) => {
                self.crashes += 1;
                self.runners[usize::from(r)].runner.stop();
            }
            RequestStep::Tick => {
                if let Some(next) = self.next_deadline() {
                    self.now = next;
                }
            }
            RequestStep::Poll => self.poll(MAX_RUNNERS),
            RequestStep::Cancel => self.cancel(),
            RequestStep::TtlExpires => {
                self.ttl_passed = true;
                // Past every TTL, short of deleting what ended.
                let last = self.tasks.iter().filter_map(|&id| self.table.get(id).ok());
                let expires = last.map(|t| t.expires_at()).max().unwrap_or(self.now);
                self.now = self.now.max(expires);
                for task in self.table.expire(self.now) {
                    self.record(Record::TaskSettled {
                        task,
                        status: Status::Failed,
                    });
                }
            }
        }
    }

    /// The call the client's machine asked for ([`IntentStep::Call`]).
    fn call(&mut self) {
        let keyed = self.rules.read_key(Some(Keyed {
            key: KEY.to_owned(),
            arguments: "progress_task".to_owned(),
        }));
        let new_id = TaskId::generate(&mut self.rng);
        let created = self
            .table
            .create(
                self.now,
                new_id,
                WORK,
                DEFAULT_TTL_MS,
                keyed,
                Runner(self.runners.len() as u32),
            )
            .expect("one key, one set of arguments, far below the table's bound");
        self.record(Record::TaskCreated {
            op: KEY.into(),
            task: created.id,
            fresh: created.fresh,
        });
        let index = match self.tasks.iter().position(|&t| t == created.id) {
            Some(i) => i as u8,
            None => {
                self.tasks.push(created.id);
                (self.tasks.len() - 1) as u8
            }
        };
        if created.fresh {
            self.start_runner(index, created.epoch, 0, self.renewal);
        }
        self.in_flight = Some(index);
    }

    /// Runner `r` makes the write it has due, on the table, as the wire's runner does on its
    /// store: a refused write stops it.
    fn run(&mut self, r: usize) {
        let now = self.now;
        let Some(write) = self.runners[r].runner.poll_write(now) else {
            return;
        };
        let (id, epoch) = (
            self.runners[r].runner.task(),
            self.runners[r].runner.epoch(),
        );
        let landed = match write {
            RunnerWrite::Renew { wrote } => self.table.renew(now, id, epoch, wrote).is_ok(),
            RunnerWrite::Step { done, total } => {
                let taken = self.table.step(now, id, epoch, done).is_ok();
                if taken {
                    self.record(applied(id, (done, total), epoch));
                }
                taken
            }
            RunnerWrite::Last { steps } => {
                let taken = self.table.finish(now, id, epoch, steps, None).is_ok();
                if taken {
                    self.record(applied(id, (steps, steps), epoch));
                    self.record(Record::TaskSettled {
                        task: id,
                        status: Status::Completed,
                    });
                }
                taken
            }
            RunnerWrite::Finish { steps } => {
                let by = Holder {
                    epoch,
                    wrote: steps,
                };
                match self
                    .table
                    .settle(now, id, Some(by), Status::Completed, None)
                {
                    Ok(Settled::Won(status)) => {
                        self.record(Record::TaskSettled { task: id, status });
                        true
                    }
                    _ => false,
                }
            }
        };
        let runner = &mut self.runners[r].runner;
        if landed {
            runner.written(now);
        } else {
            runner.stop();
        }
    }

    /// The client's `tasks/get`; a task found working past its lease is adopted by the replica
    /// that answered, while fewer than `max_runners` have run.
    fn poll(&mut self, max_runners: usize) {
        let Some(&known) = self.intent.known() else {
            return;
        };
        let id = self.tasks[usize::from(known)];
        self.record(Record::TaskNamed { task: id });
        if self.working(known)
            && self.runners.len() < max_runners
            && let Some(epoch) = self
                .table
                .adopt(self.now, id, Runner(self.runners.len() as u32))
        {
            let done = self.table.get(id).map_or(0, |t| t.done);
            self.start_runner(known, epoch, done, self.renewal);
        }
        if let Ok(task) = self.table.get(id) {
            let (status, done) = (task.status, task.done);
            self.record(Record::TaskRead { task: id, status });
            let read = ReadAnswer::Read {
                status,
                done: Some(done),
            };
            self.intent.read(self.now, read);
        }
    }

    fn cancel(&mut self) {
        let Some(&known) = self.intent.known() else {
            return;
        };
        self.cancelled = true;
        let id = self.tasks[usize::from(known)];
        self.record(Record::TaskNamed { task: id });
        if let Ok(Settled::Won(status)) = self.table.cancel(self.now, id) {
            self.record(Record::TaskSettled { task: id, status });
        }
    }
}

/// A runner's step `done` of `total` of task `id`, landed under `epoch`: what the checker hears.
fn applied(id: TaskId, (done, total): (u64, u64), epoch: u64) -> Record {
    Record::StepApplied {
        run: Run::Task(id),
        step: done,
        of: total,
        epoch,
    }
}
