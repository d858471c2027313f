//! A store found rolled back under a task ends it, one way whoever finds it: the runner whose
//! write it refuses ([`TaskTable::seal_rolled_back`]) or the read whose cursor it forgot
//! ([`TaskTable::read`]). The task is failed, [`EndedBy::RolledBack`], in the same operation
//! that found the rollback: left working, a later reader that sends no cursor would adopt it
//! once its lease ran out and run the forgotten steps again.

use super::{
    EndedBy, Holder, Missing, Runner, Seen, Settled, Status, Task, TaskTable, WriteRefused,
};
use crate::ids::TaskId;
use crate::time::LabTime;

/// Ends `task` failed as rolled back, its reader or runner having been told `applied` steps.
fn seal(task: &mut Task, now: LabTime, applied: u64) {
    task.status = Status::Failed;
    task.ended_by = Some(EndedBy::RolledBack {
        holds: task.done,
        applied,
    });
    task.updated_at = now;
}

impl TaskTable {
    /// The runner under `by.epoch` found the store holding `by.wrote` steps of the `applied`
    /// its writes left there: it ends the task failed, typed, checked as any end of its is
    /// (its epoch, and the steps it claims no more than the store holds). `Lost` when the task
    /// had already ended (a read found the rollback first).
    pub fn seal_rolled_back(
        &mut self,
        now: LabTime,
        id: TaskId,
        by: Holder,
        applied: u64,
    ) -> Result<Settled, WriteRefused> {
        let settled = self.settle(now, id, Some(by), Status::Failed, None)?;
        if settled == Settled::Won(Status::Failed)
            && let Some(task) = self.tasks.get_mut(&id)
        {
            seal(task, now, applied);
        }
        Ok(settled)
    }

    /// A read that may adopt, as one operation: the task as stored, taken over by `adopter`
    /// first if it works past its lease ([`TaskTable::adopt`]); `true` when it was. What every
    /// `tasks/get` and listen reads by, so a poll of a working task is one store operation;
    /// `adopter` is `None` where the reader's own runner still runs the task.
    ///
    /// `seen`: what the reader was told before. A store holding less forgot it: the read is
    /// refused ([`Missing::Forgotten`]), adopts nothing, and ends the task as rolled back, so
    /// every later read, with a cursor or without, reads that end, and a runner still alive
    /// has its next write refused.
    pub fn read(
        &mut self,
        now: LabTime,
        id: TaskId,
        adopter: Option<Runner>,
        seen: Option<Seen>,
    ) -> Result<(Task, bool), Missing> {
        let missing = self.missing(id);
        let task = self.tasks.get_mut(&id).ok_or(missing)?;
        if let Some(seen) = seen
            && seen.forgotten_by(task)
        {
            let holds = task.done;
            seal(task, now, seen.done);
            return Err(Missing::Forgotten { holds, seen });
        }
        let adopted = adopter.is_some_and(|a| self.adopt(now, id, a).is_some());
        Ok((self.get(id)?.clone(), adopted))
    }
}
