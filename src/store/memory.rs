//! The store in this process: the default, and the one the replica tests also run against
//! Redis. It is the core's [`StoreMachine`] behind one lock, with a clock of its own
//! (milliseconds since it was made, as Redis's `TIME` is the Redis store's; the lab's clock in
//! the dashboard's own lab) and a wake-up for blocked readers; every rule is the machine's.

use super::changes::ChangeFeed;
use super::{
    Adoption, Events, NewStream, READ_BLOCK, Refused, Resumed, Retention, SessionId, Snapshot,
    StoreError, Writer,
};
use crate::clock::Time;
use forkscope_core::replica::StaleEpoch;
use forkscope_core::replica::store::{SessionImage, StoreMachine};
use forkscope_core::tasks::{
    CreateError, Created, Holder, Keyed, Missing, Runner, Seen, Settled, Status, Task, TaskImage,
    TaskTable, Work, WriteRefused,
};
use forkscope_core::vocabulary::LogLevel;
use forkscope_core::{LabTime, StreamId, TaskId};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

#[derive(Clone, Debug)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Streams and tasks, both revisions' records, behind one lock.
    machine: Mutex<StoreMachine>,
    /// Woken on every append, end and restore: a blocked reader looks again.
    changed: Notify,
    /// Woken on every task write: a listen reads again.
    task_changes: Arc<ChangeFeed>,
    /// Its clock: leases and TTLs run out on it.
    time: Time,
}

impl MemoryStore {
    pub fn new(retention: Retention, time: Time) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner {
                machine: Mutex::new(StoreMachine::new(retention)),
                changed: Notify::new(),
                task_changes: Arc::default(),
                time,
            }),
        }
    }

    pub fn retention(&self) -> Retention {
        self.lock().retention()
    }

    pub fn label(&self) -> String {
        "memory".into()
    }

    fn now_ms(&self) -> u64 {
        // Offset so no lease deadline is ever 0.
        1_000 + self.inner.time.now().as_millis()
    }

    fn lock(&self) -> MutexGuard<'_, StoreMachine> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner
            .machine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one operation on the store machine's task table at this store's clock, the TTL
    /// applied first.
    fn tasks<T>(&self, op: impl FnOnce(&mut TaskTable, LabTime) -> T) -> T {
        let now = self.now_ms();
        let mut machine = self.lock();
        let (tasks, expired) = machine.tasks(now);
        if expired {
            self.inner.task_changes.changed();
        }
        op(tasks, LabTime::from_millis(now))
    }

    /// [`MemoryStore::tasks`] for an operation that may change a task: its waiters are woken
    /// after (a refused write wakes them for nothing, which costs them one read).
    fn task_write<T>(&self, op: impl FnOnce(&mut TaskTable, LabTime) -> T) -> T {
        let done = self.tasks(op);
        self.inner.task_changes.changed();
        done
    }

    pub(super) fn task_changes(&self) -> Arc<ChangeFeed> {
        self.inner.task_changes.clone()
    }

    pub(super) fn task_now(&self) -> u64 {
        self.now_ms()
    }

    pub(super) fn task_wall_origin_ms(&self) -> u64 {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        unix_ms.saturating_sub(self.now_ms())
    }

    pub(super) fn task_create(
        &self,
        new_id: TaskId,
        work: Work,
        ttl_ms: u64,
        keyed: Option<Keyed>,
        runner: Runner,
    ) -> Result<(Created, Task), CreateError> {
        self.task_write(|t, now| {
            let created = t.create(now, new_id, work, ttl_ms, keyed, runner)?;
            let task = t
                .get(created.id)
                .cloned()
                .expect("a task just made reads back");
            Ok((created, task))
        })
    }

    pub(super) fn task_get(&self, id: TaskId) -> Result<Task, Missing> {
        self.tasks(|t, _| t.get(id).cloned())
    }

    pub(super) fn task_step(&self, id: TaskId, epoch: u64, done: u64) -> Result<(), WriteRefused> {
        self.task_write(|t, now| t.step(now, id, epoch, done))
    }

    pub(super) fn task_finish(
        &self,
        id: TaskId,
        epoch: u64,
        done: u64,
        outcome: Arc<str>,
    ) -> Result<(), WriteRefused> {
        self.task_write(|t, now| t.finish(now, id, epoch, done, Some(outcome)))
    }

    pub(super) fn task_renew(
        &self,
        id: TaskId,
        epoch: u64,
        wrote: u64,
    ) -> Result<(), WriteRefused> {
        self.tasks(|t, now| t.renew(now, id, epoch, wrote))
    }

    pub(super) fn task_settle(
        &self,
        id: TaskId,
        by: Option<Holder>,
        to: Status,
        outcome: Option<Arc<str>>,
    ) -> Result<Settled, WriteRefused> {
        self.task_write(|t, now| t.settle(now, id, by, to, outcome))
    }

    pub(super) fn task_cancel(&self, id: TaskId) -> Result<Settled, Missing> {
        self.task_write(|t, now| t.cancel(now, id))
    }

    pub(super) fn task_seal_rolled_back(
        &self,
        id: TaskId,
        by: Holder,
        applied: u64,
    ) -> Result<Settled, WriteRefused> {
        self.task_write(|t, now| t.seal_rolled_back(now, id, by, applied))
    }

    pub(super) fn task_read(
        &self,
        id: TaskId,
        adopter: Option<Runner>,
        seen: Option<Seen>,
    ) -> Result<(Task, bool), Missing> {
        let read = self.tasks(|t, now| t.read(now, id, adopter, seen));
        // Only a read that changed the task wakes the waiters: an adoption, or a forgotten
        // cursor's end (a listen's own read would otherwise wake it again, for ever).
        if matches!(read, Ok((_, true)) | Err(Missing::Forgotten { .. })) {
            self.inner.task_changes.changed();
        }
        read
    }

    pub(super) fn task_adopt(&self, id: TaskId, runner: Runner) -> Option<Task> {
        // Every read of a working task asks: only a real adoption wakes the waiters (a listen's
        // own read would otherwise wake it again, for ever).
        let adopted = self.tasks(|t, now| {
            t.adopt(now, id, runner)?;
            t.get(id).ok().cloned()
        });
        if adopted.is_some() {
            self.inner.task_changes.changed();
        }
        adopted
    }

    /// Runs one operation on the machine at this store's clock.
    fn run<T>(&self, op: impl FnOnce(&mut StoreMachine, u64) -> T) -> T {
        let now = self.now_ms();
        op(&mut self.lock(), now)
    }

    pub async fn open_session(&self, key: &SessionId) -> Result<(), StoreError> {
        Ok(self.run(|m, now| m.open_session(key, now))?)
    }

    pub async fn session_exists(&self, key: &SessionId) -> Result<bool, StoreError> {
        Ok(self.run(|m, now| m.session_exists(key, now)))
    }

    pub async fn end_session(&self, key: &SessionId) -> Result<bool, StoreError> {
        let ended = self.run(|m, now| m.end_session(key, now));
        self.inner.changed.notify_waiters();
        Ok(ended)
    }

    pub async fn open_stream(
        &self,
        key: &SessionId,
        new: &NewStream,
    ) -> Result<Result<StreamId, u64>, StoreError> {
        Ok(self.run(|m, now| m.open_stream(key, new, now))?)
    }

    pub async fn cancel(
        &self,
        key: &SessionId,
        request_id: &str,
    ) -> Result<Option<StreamId>, StoreError> {
        let cancelled = self.run(|m, now| m.cancel(key, request_id, now))?;
        self.inner.changed.notify_waiters();
        Ok(cancelled)
    }

    pub async fn set_log_level(&self, key: &SessionId, level: LogLevel) -> Result<(), StoreError> {
        Ok(self.run(|m, now| m.set_log_level(key, level, now))?)
    }

    pub async fn background_number(&self, key: &SessionId) -> Result<u64, StoreError> {
        Ok(self.run(|m, now| m.background_number(key, now))?)
    }

    pub async fn standalone(&self, key: &SessionId) -> Result<Option<StreamId>, StoreError> {
        Ok(self.run(|m, now| m.standalone(key, now))?)
    }

    pub async fn snapshot(
        &self,
        key: &SessionId,
        stream: StreamId,
    ) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.run(|m, now| m.snapshot(key, stream, now))?)
    }

    /// The record and the events after `after`, under one lock: the epoch and the events agree.
    pub async fn replay(
        &self,
        key: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Option<(Snapshot, Events)>, StoreError> {
        Ok(self.run(|m, now| m.replay(key, stream, after, max, now))?)
    }

    pub async fn resume(
        &self,
        key: &SessionId,
        stream: StreamId,
        expect: Option<u64>,
        adopt: Option<u64>,
        owner: &str,
    ) -> Result<Result<Resumed, StaleEpoch>, StoreError> {
        Ok(self.run(|m, now| m.resume(key, stream, expect, adopt, owner, now))?)
    }

    pub async fn adopt(
        &self,
        key: &SessionId,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
    ) -> Result<Adoption, StoreError> {
        Ok(self.run(|m, now| m.adopt(key, stream, expect_lease, owner, now))?)
    }

    pub async fn append(
        &self,
        key: &SessionId,
        stream: StreamId,
        writer: Writer<'_>,
        events: &[String],
        finish: bool,
    ) -> Result<Result<u64, Refused>, StoreError> {
        let appended = self.run(|m, now| m.append(key, stream, writer, events, finish, now))?;
        if appended.is_ok() && (!events.is_empty() || finish) {
            self.inner.changed.notify_waiters();
        }
        Ok(appended)
    }

    /// The session as it is now, for the lab's rollback fault.
    pub(super) fn image(&self, key: &SessionId) -> SessionImage {
        self.lock().image(key)
    }

    /// Puts the session back as `image` held it; every blocked reader looks again.
    pub(super) fn restore(&self, key: &SessionId, image: &SessionImage) {
        self.lock().restore(key, image);
        self.inner.changed.notify_waiters();
    }

    pub(super) fn task_image(&self, ids: &[TaskId]) -> TaskImage {
        self.tasks(|t, _| t.image(ids))
    }

    /// Puts the tasks back as `image` held them; every listen reads again.
    pub(super) fn task_restore(&self, image: &TaskImage) {
        self.task_write(|t, _| t.restore(image));
    }

    /// Up to `max` batches' events after `after`, waiting up to [`READ_BLOCK`] for the first.
    pub async fn read(
        &self,
        key: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Events, StoreError> {
        let deadline = tokio::time::Instant::now() + READ_BLOCK;
        loop {
            // Registered before looking, so an append between the look and the wait still wakes.
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let events = self.run(|m, now| m.read(key, stream, after, max, now));
            if !events.is_empty() {
                return Ok(events);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }
}
