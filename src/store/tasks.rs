//! The tasks extension's tasks in the shared store, so that any replica answers `tasks/get`
//! for any task and adopts one whose runner died. The rules are the core's
//! [`TaskTable`](forkscope_core::tasks::TaskTable), once: the memory store runs that table
//! behind its lock at its own clock; on Redis each operation is a Lua script doing what the
//! table's method of the same name does, atomically, at Redis's clock.
//!
//! Every write a runner makes carries the epoch its lease was taken under; the store compares
//! it where the write lands, so a runner that lost its task (a cancel won, the TTL ran out,
//! another replica adopted it) has its next write refused and stops.

use super::{Backend, Link, Store, StoreError};
use forkscope_core::TaskId;
use forkscope_core::tasks::{
    CreateError, Created, Holder, Keyed, Missing, Runner, Seen, Settled, Status, Task, Work,
    WriteRefused,
};
use std::sync::Arc;

impl Store {
    /// [`TaskTable::create`](forkscope_core::tasks::TaskTable::create): returns once the task
    /// reads back from the store (durable before acknowledged).
    pub async fn task_create(
        &self,
        new_id: TaskId,
        work: Work,
        ttl_ms: u64,
        keyed: Option<Keyed>,
        runner: Runner,
    ) -> Result<Result<(Created, Task), CreateError>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_create(new_id, work, ttl_ms, keyed, runner)),
            Backend::Redis(r) => r.task_create(new_id, work, ttl_ms, keyed, runner).await,
        }
    }

    pub async fn task_get(&self, id: TaskId) -> Result<Result<Task, Missing>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_get(id)),
            Backend::Redis(r) => r.task_get(id).await,
        }
    }

    pub async fn task_step(
        &self,
        id: TaskId,
        epoch: u64,
        done: u64,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_step(id, epoch, done)),
            Backend::Redis(r) => r.task_step(id, epoch, done).await,
        }
    }

    /// [`TaskTable::finish`](forkscope_core::tasks::TaskTable::finish): the runner under
    /// `epoch` commits its last step `done` and its result in one store operation.
    pub async fn task_finish(
        &self,
        id: TaskId,
        epoch: u64,
        done: u64,
        outcome: Arc<str>,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_finish(id, epoch, done, outcome)),
            Backend::Redis(r) => r.task_finish(id, epoch, done, outcome).await,
        }
    }

    /// [`TaskTable::renew`](forkscope_core::tasks::TaskTable::renew): the runner under `epoch`
    /// is alive, between steps, its writes having left `wrote` steps.
    pub async fn task_renew(
        &self,
        id: TaskId,
        epoch: u64,
        wrote: u64,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_renew(id, epoch, wrote)),
            Backend::Redis(r) => r.task_renew(id, epoch, wrote).await,
        }
    }

    pub async fn task_settle(
        &self,
        id: TaskId,
        by: Option<Holder>,
        to: Status,
        outcome: Option<Arc<str>>,
    ) -> Result<Result<Settled, WriteRefused>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_settle(id, by, to, outcome)),
            Backend::Redis(r) => r.task_settle(id, by, to, outcome).await,
        }
    }

    pub async fn task_cancel(&self, id: TaskId) -> Result<Result<Settled, Missing>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_cancel(id)),
            Backend::Redis(r) => r.task_cancel(id).await,
        }
    }

    /// [`TaskTable::seal_rolled_back`](forkscope_core::tasks::TaskTable::seal_rolled_back): the
    /// runner under `by.epoch` found the store holding `by.wrote` of the `applied` steps it
    /// wrote, and ends the task failed, typed.
    pub async fn task_seal_rolled_back(
        &self,
        id: TaskId,
        by: Holder,
        applied: u64,
    ) -> Result<Result<Settled, WriteRefused>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_seal_rolled_back(id, by, applied)),
            Backend::Redis(r) => r.task_seal_rolled_back(id, by, applied).await,
        }
    }

    /// [`TaskTable::read`](forkscope_core::tasks::TaskTable::read): the task, adopted by
    /// `adopter` first if it works past its lease (`true` then; `None`: never adopted), in one
    /// store operation; where the store holds less than the reader was told (`seen`), refused,
    /// adopting nothing, and the task ended failed as rolled back in the same operation.
    pub async fn task_read(
        &self,
        id: TaskId,
        adopter: Option<Runner>,
        seen: Option<Seen>,
    ) -> Result<Result<(Task, bool), Missing>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_read(id, adopter, seen)),
            Backend::Redis(r) => r.task_read(id, adopter, seen).await,
        }
    }

    /// [`TaskTable::adopt`](forkscope_core::tasks::TaskTable::adopt): the task under its next
    /// epoch, now `runner`'s, when its lease ran out; `None` while it holds or once it ended.
    pub async fn task_adopt(&self, id: TaskId, runner: Runner) -> Result<Option<Task>, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_adopt(id, runner)),
            Backend::Redis(r) => r.task_adopt(id, runner).await,
        }
    }

    /// Who waits on a task's change: woken by every task write any handle of this store makes
    /// (on Redis, through its `PUBLISH`), so a listen needs no tick.
    pub fn task_changes(&self) -> Arc<crate::store::changes::ChangeFeed> {
        match &self.backend {
            Backend::Memory(m) => m.task_changes(),
            Backend::Redis(r) => r.task_changes(),
        }
    }

    /// Unix milliseconds at the store clock's zero: a task's times are written on the store's
    /// clock (Redis's `TIME`; the memory store's own), and this makes them wall times.
    pub fn task_wall_origin_ms(&self) -> u64 {
        match &self.backend {
            Backend::Memory(m) => m.task_wall_origin_ms(),
            Backend::Redis(_) => 0,
        }
    }

    /// The store's clock, in the milliseconds a task's times are written in.
    pub async fn task_now(&self) -> Result<u64, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(m) => Ok(m.task_now()),
            Backend::Redis(r) => r.task_now().await,
        }
    }
}
