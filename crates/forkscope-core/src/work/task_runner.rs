//! A 2026-07-28 task's runner as a sans-IO machine: its steps ([`Steps`], the schedule every
//! tool call runs) and its lease, renewed at a third of the lease ([`crate::lease::renew_every`])
//! whatever a step's length. Without the renewal a task whose steps outlast the lease is adopted
//! by the next read, the adopter waits a whole step again, and a polled task never ends.
//!
//! The wire (`wire/server/tasks.rs`) drives it against its store; the machine decides what to
//! write and when, and the caller says how each write went.

use super::{Steps, ToolSpec, ToolStep};
use crate::ids::TaskId;
use crate::time::LabTime;

/// A fault planted in the runner on purpose, for `check` to find and a scenario to replay: what
/// the fence would be without one of its rules. Never in force unless asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// Runners renew their lease only with their steps ([`TaskRunner::without_renewal`]).
    NoRenewal,
}

impl Mutation {
    pub fn describe(self) -> &'static str {
        match self {
            Mutation::NoRenewal => {
                "no-renewal: task runners renew their lease only with their steps, so a step \
                 longer than the lease lets a read adopt the task"
            }
        }
    }
}

/// One write the runner owes its store, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerWrite {
    /// Nothing was due, but the lease must not run out: renew it under the runner's epoch,
    /// saying how many steps its writes left in the store (a store that holds fewer was
    /// rolled back).
    Renew { wrote: u64 },
    /// Step `done` of `total`: committed before it counts, and it renews the lease.
    Step { done: u64, total: u64 },
    /// The work is done: settle the task completed with the result of `steps`.
    Finish { steps: u64 },
    /// The last step of `steps` and the result due with it (no pace after the last step): one
    /// store operation ([`crate::tasks::TaskTable::finish`]), not a step and a settle in a row
    /// that a crash or a rollback could split.
    Last { steps: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRunner {
    task: TaskId,
    epoch: u64,
    steps: Steps,
    renew_every: u64,
    /// When the lease must next be renewed if no step renews it first.
    renew_at: LabTime,
    /// `false` only in the mutation a test switches on ([`TaskRunner::without_renewal`]).
    renews: bool,
    stopped: bool,
}

impl TaskRunner {
    /// A runner for `task` under `epoch`, from `done` committed steps (0 for a fresh task, the
    /// store's count for an adopted one), holding a lease of `lease_ms` taken at `now`.
    pub fn new(
        task: TaskId,
        epoch: u64,
        spec: ToolSpec,
        done: u64,
        lease_ms: u64,
        now: LabTime,
    ) -> TaskRunner {
        let renew_every = crate::lease::renew_every(lease_ms);
        TaskRunner {
            task,
            epoch,
            steps: Steps::resumed(spec, true, done, now),
            renew_every,
            renew_at: now.plus(renew_every),
            renews: true,
            stopped: false,
        }
    }

    /// The same runner renewing only with its steps, as the task runner did before: the
    /// mutation `check`'s model must catch (a task whose steps outlast the lease never ends
    /// while polled). Not for serving.
    pub fn without_renewal(self) -> TaskRunner {
        TaskRunner {
            renews: false,
            ..self
        }
    }

    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The epoch every write of this runner carries.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Steps taken so far.
    pub fn done(&self) -> u64 {
        self.steps.done()
    }

    /// When the runner next has a write to make: its next step, or its next renewal, whichever
    /// comes first. `None` once it finished or was stopped.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        if self.stopped {
            return None;
        }
        let step = self.steps.poll_timeout()?;
        Some(if self.renews {
            step.min(self.renew_at)
        } else {
            step
        })
    }

    /// The next write due at `now`: a step (or the result) first, else a renewal. Each is
    /// handed out once; [`TaskRunner::written`] or [`TaskRunner::stop`] says how it went.
    pub fn poll_write(&mut self, now: LabTime) -> Option<RunnerWrite> {
        if self.stopped {
            return None;
        }
        if let Some(step) = self.steps.take_due(now, 1).pop() {
            return Some(match step {
                ToolStep::Progress { done, total } if done == total => {
                    match self.steps.take_due(now, 1).pop() {
                        Some(ToolStep::Result { steps }) => RunnerWrite::Last { steps },
                        _ => RunnerWrite::Step { done, total },
                    }
                }
                ToolStep::Progress { done, total } => RunnerWrite::Step { done, total },
                ToolStep::Result { steps } => RunnerWrite::Finish { steps },
            });
        }
        if !self.renews || self.steps.is_over() || now < self.renew_at {
            return None;
        }
        // Due again only once this renewal has landed ([`TaskRunner::written`]).
        self.renew_at = LabTime::from_millis(u64::MAX);
        Some(RunnerWrite::Renew {
            wrote: self.steps.done(),
        })
    }

    /// A write landed at `now`: every write renews the lease, so the next renewal is due a
    /// third of the lease from here.
    pub fn written(&mut self, now: LabTime) {
        self.renew_at = now.plus(self.renew_every);
    }

    /// A write was refused (the task ended, another runner holds it, it expired): nothing more
    /// is written.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.steps.end();
    }

    pub fn is_over(&self) -> bool {
        self.stopped || self.steps.is_over()
    }
}
