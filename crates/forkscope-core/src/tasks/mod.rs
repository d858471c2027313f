//! The tasks extension (`io.modelcontextprotocol/tasks`) with the guarantees the extension does
//! not make, as one sans-IO table: what a store of tasks must do, time a parameter.
//!
//! The extension lets a server answer `tools/call` with a task handle and the client poll
//! `tasks/get` ([EXT] = ext-tasks `specification/draft/tasks.md`). It leaves the failure class
//! of the old fork in place: creation is not idempotent (no client key, no `tasks/list`: a lost
//! `CreateTaskResult` orphans a task, and the re-issue makes a second), nothing says one runner,
//! cancel races complete, and "expired" reads like "never existed". Here, each is a rule:
//!
//! - **one task per key** ([`TaskTable::create`]): a vendor `_meta` key,
//!   `io.forkscope/idempotencyKey` (an extension of forkscope's, not the spec's), maps with the
//!   call's arguments to one task, atomically, before the answer; the same key with other
//!   arguments is refused ([`CreateError::KeyReused`]).
//! - **durable before acknowledged** ([EXT]:300): `create` returns once the task reads back.
//! - **one runner** ([`TaskTable::step`], [`TaskTable::renew`], [`TaskTable::adopt`]): a lease
//!   with a rising epoch, the one lease rule the 2025 calls hold ([`crate::lease`]); the runner
//!   renews it whatever its steps' length ([`crate::work::TaskRunner`]); every step and the
//!   terminal write carry the epoch they were taken under, and a stale one is refused
//!   ([`WriteRefused::Stale`]); a lease past its deadline (its runner stopped renewing) may be
//!   adopted under the next epoch, and the old runner's next write is refused.
//! - **terminal once** ([`TaskTable::settle`]): a compare-and-set from a non-terminal state;
//!   every later read returns exactly the stored outcome.
//! - **cancel as intent** ([`TaskTable::cancel`]): the same compare-and-set, and the answer says
//!   which won — the cancel, or the completion that got there first.
//! - **TTL through the same path** ([`TaskTable::expire`]): past its TTL an unfinished task is
//!   failed by the compare-and-set (its runner's next write is refused, so no effect lands after),
//!   and a deleted task leaves a tombstone, so "expired" stays distinct from "never existed".

mod refusals;
pub use refusals::{Missing, Seen, WriteRefused};
pub mod guarantee;
mod image;
pub mod listen;
mod rolled_back;
pub mod sdk;
#[cfg(test)]
mod tests;

pub use image::TaskImage;

use crate::ids::TaskId;
use crate::lease::LeaseState;
use crate::policy::Policy;
use crate::time::LabTime;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A task's lifetime from creation unless the caller says otherwise (rmcp's default).
pub const DEFAULT_TTL_MS: u64 = 300_000;
/// How often a client is asked to poll.
pub const POLL_INTERVAL_MS: u64 = 250;
/// How long a runner may go without renewing before another may adopt its task: the lease the
/// 2025-11-25 calls hold ([`crate::lease`]), unless the store is told otherwise.
pub const LEASE_MS: u64 = crate::lease::DEFAULT_LEASE_MS;
/// How long a settled task stays readable past its TTL before it is deleted.
pub const RETAIN_MS: u64 = 60_000;
/// Tasks working at once; past it creation is refused. A finished task does not count: it keeps
/// its result until its TTL without blocking anyone's next task.
pub const MAX_TASKS: usize = 1_024;
/// Tasks held at once, finished ones included: the bound on the table's memory.
pub const MAX_HELD: usize = 16 * MAX_TASKS;
/// Tombstones kept (oldest go first): enough to tell "expired" for every task of a full table.
pub const MAX_TOMBSTONES: usize = 4 * MAX_TASKS;
/// How long a deleted task's tombstone says "expired"; after it, the task reads as unknown.
pub const TOMBSTONE_MS: u64 = 3_600_000;
/// The longest idempotency key accepted.
pub const MAX_KEY_BYTES: usize = 256;

/// The extension's identifier, in capabilities.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The `_meta` key a client names its call with (an extension of forkscope's).
pub const IDEMPOTENCY_KEY: &str = "io.forkscope/idempotencyKey";
/// `_meta` of a `tasks/get` result (an extension of forkscope's): the steps the task holds done.
pub const META_DONE: &str = "io.forkscope/done";
/// `_meta` of a `tasks/get` (forkscope's): what its reader was told before, `{"done": N,
/// "ended": bool}` ([`Seen`]).
pub const META_SEEN: &str = "io.forkscope/seen";

pub use crate::vocabulary::TaskStatus as Status;

/// Who runs a task: a replica, or the one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Runner(pub u32);

/// The work a task runs: its steps, and the pace between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    pub steps: u64,
    pub delay_ms: u64,
}

/// A call's key and its arguments in canonical form (the caller's spelling, compared exactly).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyed {
    pub key: String,
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    pub status: Status,
    pub created_at: LabTime,
    pub updated_at: LabTime,
    pub ttl_ms: u64,
    /// Steps the work has, and has committed, and the pace it runs at (an adopter keeps it).
    pub steps: u64,
    pub delay_ms: u64,
    pub done: u64,
    /// The runner's lease: whose, under which epoch, until when.
    pub runner: Runner,
    pub epoch: u64,
    pub lease_until: LabTime,
    /// Set once terminal: the result's or the error's JSON, as the runner wrote it.
    pub outcome: Option<Arc<str>>,
    /// Why it ended, when the table ended it (a cancel, the TTL).
    pub ended_by: Option<EndedBy>,
}

/// What ended a task other than its runner's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndedBy {
    Cancel,
    Ttl,
    /// The store was found rolled back under it, holding `holds` steps of the `applied` its
    /// runner wrote or its reader was told: failed, typed, so none runs again
    /// ([`TaskTable::seal_rolled_back`], [`TaskTable::read`]).
    RolledBack {
        holds: u64,
        applied: u64,
    },
}

impl Task {
    /// When the task's TTL runs out.
    pub fn expires_at(&self) -> LabTime {
        self.created_at.plus(self.ttl_ms)
    }
}

/// What `create` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Created {
    pub id: TaskId,
    /// The epoch the creator runs it under.
    pub epoch: u64,
    /// `false`: the key named a task made before; nothing new runs.
    pub fresh: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    #[error("the idempotency key names task {task} with other arguments")]
    KeyReused { task: TaskId },
    #[error("the idempotency key is over {MAX_KEY_BYTES} bytes")]
    KeyTooLong,
    #[error("{max} tasks are working; try again once one has ended")]
    Full { max: usize },
    #[error("{max} tasks are held, finished ones until their TTL; try again once one expires")]
    Held { max: usize },
}

/// How a compare-and-set to a terminal state went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// This write made the task terminal.
    Won(Status),
    /// The task was already terminal: that status stands.
    Lost(Status),
}

/// What a server does with tasks, by policy ([`sdk::ModernQuirks`]). The fence honours the
/// idempotency key; every other policy does what the extension's wire alone gives (no key is
/// read), so a re-issued call makes a second task: the double effect. An SDK without the
/// extension runs every call plainly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskRules {
    pub honours_keys: bool,
    pub runs_tasks: bool,
    /// What a listen's `taskIds` get: each task's state now first, or changes only.
    pub listen: listen::TaskListen,
}

impl TaskRules {
    pub fn of(policy: Policy) -> TaskRules {
        let quirks = sdk::ModernQuirks::of(policy);
        TaskRules {
            honours_keys: quirks.honours_keys,
            runs_tasks: quirks.runs_tasks,
            listen: quirks.listen,
        }
    }

    /// The key a call's creation goes by under these rules: none where keys are not read.
    pub fn read_key(self, keyed: Option<Keyed>) -> Option<Keyed> {
        keyed.filter(|_| self.honours_keys)
    }

    /// A plain call (its client did not declare the extension, so no task can answer it) that
    /// names an idempotency key: where keys are honoured it is refused, never run with its key
    /// ignored — a re-issue of it would run the work again while its key promised once.
    pub fn plain_call_key(self, named: bool) -> Result<(), KeyNeedsTask> {
        if named && self.honours_keys {
            Err(KeyNeedsTask)
        } else {
            Ok(())
        }
    }
}

/// An idempotency key on a call that is not a task: refused as invalid params.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the idempotency key is kept only for a task: declare the tasks extension ({EXTENSION}) in \
     this request's capabilities, or send no key"
)]
pub struct KeyNeedsTask;

impl KeyNeedsTask {
    /// `data.reason` on the −32602 that says so.
    pub const REASON: &'static str = "idempotency_key_needs_task";
}

impl Default for TaskRules {
    fn default() -> Self {
        TaskRules::of(Policy::Fenced)
    }
}

/// The home ([`TaskId::home`]) of the task an idempotency key makes: FNV-1a of the key, folded
/// to 16 bits. A stable hash, so every replica and every run agree on it.
pub fn key_home(key: &str) -> u16 {
    let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (hash ^ (hash >> 16)) as u16
}

/// The id a create under `keyed` mints from `drawn`: at its key's home, so a store that shards
/// keeps the task beside its key.
pub fn minted(drawn: TaskId, keyed: Option<&Keyed>) -> TaskId {
    keyed.map_or(drawn, |k| drawn.at_home(key_home(&k.key)))
}

/// Every task, every key, and the tombstones of the deleted.
#[derive(Clone, Debug)]
pub struct TaskTable {
    tasks: HashMap<TaskId, Task>,
    keys: HashMap<String, (String, TaskId)>,
    tombstones: VecDeque<(TaskId, LabTime)>,
    max_tasks: usize,
    lease_ms: u64,
    retain_ms: u64,
}

/// A runner's write, as the store checks it: the epoch it holds the task at, and the steps its
/// own writes left in the store (fewer held means the store was rolled back under it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub epoch: u64,
    pub wrote: u64,
}

/// Refused when `task` holds fewer steps than a runner's writes left in it (`wrote`).
fn forgot(task: &Task, wrote: u64) -> Result<(), WriteRefused> {
    if task.done < wrote {
        return Err(WriteRefused::RolledBack {
            holds: task.done,
            wrote,
        });
    }
    Ok(())
}

impl Default for TaskTable {
    fn default() -> Self {
        TaskTable::new()
    }
}

impl TaskTable {
    pub fn new() -> TaskTable {
        TaskTable::with_capacity(MAX_TASKS)
    }

    pub fn with_capacity(max_tasks: usize) -> TaskTable {
        TaskTable {
            tasks: HashMap::new(),
            keys: HashMap::new(),
            tombstones: VecDeque::new(),
            max_tasks,
            lease_ms: LEASE_MS,
            retain_ms: RETAIN_MS,
        }
    }

    /// The same table with leases of `lease_ms` (a store's `--lease-ms`).
    pub fn with_lease(self, lease_ms: u64) -> TaskTable {
        TaskTable { lease_ms, ..self }
    }

    /// The same table keeping a task `retain_ms` past its TTL before deleting it.
    pub fn with_retain(self, retain_ms: u64) -> TaskTable {
        TaskTable { retain_ms, ..self }
    }

    pub fn retain_ms(&self) -> u64 {
        self.retain_ms
    }

    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// A task for `steps` of work, run by `runner` under epoch 1 and named `new_id` (drawn by
    /// the caller, unguessable; moved to its key's home, [`minted`]); or, for a key seen before with the same arguments, that task
    /// again (`fresh: false`), whatever state it is in. `keyed`: as [`TaskRules::read_key`]
    /// gave it.
    pub fn create(
        &mut self,
        now: LabTime,
        new_id: TaskId,
        work: Work,
        ttl_ms: u64,
        keyed: Option<Keyed>,
        runner: Runner,
    ) -> Result<Created, CreateError> {
        if let Some(k) = &keyed {
            if k.key.len() > MAX_KEY_BYTES {
                return Err(CreateError::KeyTooLong);
            }
            if let Some((arguments, id)) = self.keys.get(&k.key) {
                if *arguments != k.arguments {
                    return Err(CreateError::KeyReused { task: *id });
                }
                let epoch = self.tasks.get(id).map_or(0, |t| t.epoch);
                return Ok(Created {
                    id: *id,
                    epoch,
                    fresh: false,
                });
            }
        }
        let working = self
            .tasks
            .values()
            .filter(|t| !t.status.is_terminal())
            .count();
        if working >= self.max_tasks {
            return Err(CreateError::Full {
                max: self.max_tasks,
            });
        }
        if self.tasks.len() >= MAX_HELD.max(self.max_tasks) {
            return Err(CreateError::Held { max: MAX_HELD });
        }
        let id = minted(new_id, keyed.as_ref());
        self.tasks.insert(
            id,
            Task {
                id,
                status: Status::Working,
                created_at: now,
                updated_at: now,
                ttl_ms,
                steps: work.steps,
                delay_ms: work.delay_ms,
                done: 0,
                runner,
                epoch: 1,
                lease_until: now.plus(self.lease_ms),
                outcome: None,
                ended_by: None,
            },
        );
        if let Some(k) = keyed {
            self.keys.insert(k.key, (k.arguments, id));
        }
        Ok(Created {
            id,
            epoch: 1,
            fresh: true,
        })
    }

    /// The task as stored: what `tasks/get` answers on any replica.
    pub fn get(&self, id: TaskId) -> Result<&Task, Missing> {
        match self.tasks.get(&id) {
            Some(task) => Ok(task),
            None => Err(self.missing(id)),
        }
    }

    fn missing(&self, id: TaskId) -> Missing {
        self.tombstones
            .iter()
            .find(|(t, _)| *t == id)
            .map_or(Missing::Unknown, |(_, at)| Missing::Expired { at: *at })
    }

    fn writable(&mut self, id: TaskId, epoch: u64) -> Result<&mut Task, WriteRefused> {
        let missing = self.missing(id);
        let task = self.tasks.get_mut(&id).ok_or(missing)?;
        if task.status.is_terminal() {
            return Err(WriteRefused::Terminal(task.status));
        }
        if epoch != task.epoch {
            return Err(WriteRefused::Stale {
                epoch,
                held: task.epoch,
            });
        }
        Ok(task)
    }

    /// The runner under `epoch` committed step `done`: it may take its effect. Renews the lease.
    /// A runner writes its steps in order, so step `done` finds `done - 1` held: a store that
    /// holds fewer forgot what this runner wrote ([`WriteRefused::RolledBack`]).
    pub fn step(
        &mut self,
        now: LabTime,
        id: TaskId,
        epoch: u64,
        done: u64,
    ) -> Result<(), WriteRefused> {
        let lease_ms = self.lease_ms;
        let task = self.writable(id, epoch)?;
        forgot(task, done.saturating_sub(1))?;
        task.done = task.done.max(done);
        task.updated_at = now;
        task.lease_until = now.plus(lease_ms);
        Ok(())
    }

    /// The runner under `epoch`, whose writes left `wrote` steps in the store, is alive: its
    /// lease runs on from `now`, though no step was due. Refused as a step is (stale epoch,
    /// terminal, missing, rolled back), and then the runner must stop.
    pub fn renew(
        &mut self,
        now: LabTime,
        id: TaskId,
        epoch: u64,
        wrote: u64,
    ) -> Result<(), WriteRefused> {
        let lease_ms = self.lease_ms;
        let task = self.writable(id, epoch)?;
        forgot(task, wrote)?;
        task.lease_until = now.plus(lease_ms);
        Ok(())
    }

    /// Moves the task to `to` (terminal) with `outcome`, if it is not terminal yet. `by`: the
    /// runner that settles, checked like a step (its epoch, and a store holding fewer steps
    /// than it wrote was rolled back: its end would claim steps the store forgot); `None` for
    /// the table's own ends (cancel, TTL).
    pub fn settle(
        &mut self,
        now: LabTime,
        id: TaskId,
        by: Option<Holder>,
        to: Status,
        outcome: Option<Arc<str>>,
    ) -> Result<Settled, WriteRefused> {
        debug_assert!(to.is_terminal(), "settle moves to a terminal state");
        let missing = self.missing(id);
        let task = self.tasks.get_mut(&id).ok_or(missing)?;
        if task.status.is_terminal() {
            return Ok(Settled::Lost(task.status));
        }
        if let Some(Holder { epoch, wrote }) = by {
            if epoch != task.epoch {
                return Err(WriteRefused::Stale {
                    epoch,
                    held: task.epoch,
                });
            }
            forgot(task, wrote)?;
        }
        task.status = to;
        task.outcome = outcome;
        task.updated_at = now;
        Ok(Settled::Won(to))
    }

    /// The runner under `epoch` commits its last step, `done`, and its result `outcome` as one
    /// operation: the step as [`TaskTable::step`] takes it, then the end as
    /// [`TaskTable::settle`] checks it, claiming the `done` steps the store now holds. What a
    /// runner whose result is due with its last step writes: nothing can come between the two
    /// that could not have come after them. Refused as the step would be, writing nothing.
    pub fn finish(
        &mut self,
        now: LabTime,
        id: TaskId,
        epoch: u64,
        done: u64,
        outcome: Option<Arc<str>>,
    ) -> Result<(), WriteRefused> {
        self.step(now, id, epoch, done)?;
        let by = Holder { epoch, wrote: done };
        let settled = self.settle(now, id, Some(by), Status::Completed, outcome)?;
        debug_assert_eq!(
            settled,
            Settled::Won(Status::Completed),
            "a step just landed"
        );
        Ok(())
    }

    /// The client's cancel: settled against completion by the same compare-and-set. `Won`:
    /// the task is cancelled and its runner's next write is refused; `Lost(s)`: it had already
    /// ended as `s`.
    pub fn cancel(&mut self, now: LabTime, id: TaskId) -> Result<Settled, Missing> {
        match self.settle(now, id, None, Status::Cancelled, None) {
            Ok(settled) => {
                if settled == Settled::Won(Status::Cancelled)
                    && let Some(task) = self.tasks.get_mut(&id)
                {
                    task.ended_by = Some(EndedBy::Cancel);
                }
                Ok(settled)
            }
            Err(WriteRefused::Missing(m)) => Err(m),
            // No epoch is checked for a cancel, and a terminal task answers `Lost`.
            Err(other) => unreachable!("a cancel is refused only for a missing task: {other}"),
        }
    }

    /// Another runner takes the task over once its lease ran out (its runner stopped renewing):
    /// the next epoch is its. `None` while the lease holds or once the task has ended.
    pub fn adopt(&mut self, now: LabTime, id: TaskId, runner: Runner) -> Option<u64> {
        let lease_ms = self.lease_ms;
        let task = self.tasks.get_mut(&id)?;
        let lease = LeaseState::at(task.lease_until.as_millis(), now.as_millis());
        if task.status.is_terminal() || !lease.is_expired() {
            return None;
        }
        task.epoch += 1;
        task.runner = runner;
        task.lease_until = now.plus(lease_ms);
        task.updated_at = now;
        Some(task.epoch)
    }

    /// The TTL, through the same compare-and-set: an unfinished task past its TTL is failed
    /// (its runner's next write is refused); a task past its TTL and its retention more is
    /// deleted, leaving a tombstone. Returns the tasks failed here.
    pub fn expire(&mut self, now: LabTime) -> Vec<TaskId> {
        let mut failed = Vec::new();
        let mut gone = Vec::new();
        let retain_ms = self.retain_ms;
        for task in self.tasks.values_mut() {
            let expires = task.expires_at();
            if now >= expires.plus(retain_ms) {
                gone.push(task.id);
            } else if now >= expires && !task.status.is_terminal() {
                task.status = Status::Failed;
                task.ended_by = Some(EndedBy::Ttl);
                task.updated_at = now;
                failed.push(task.id);
            }
        }
        while self
            .tombstones
            .front()
            .is_some_and(|(_, at)| now >= at.plus(TOMBSTONE_MS))
        {
            self.tombstones.pop_front();
        }
        for id in gone {
            self.tasks.remove(&id);
            self.keys.retain(|_, (_, t)| *t != id);
            if self.tombstones.len() >= MAX_TOMBSTONES {
                self.tombstones.pop_front();
            }
            self.tombstones.push_back((id, now));
        }
        failed
    }

    /// When [`TaskTable::expire`] next has something to do.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        self.tasks
            .values()
            .map(|t| {
                if t.status.is_terminal() {
                    t.expires_at().plus(self.retain_ms)
                } else {
                    t.expires_at()
                }
            })
            .min()
    }
}
