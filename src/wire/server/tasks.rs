//! The tasks extension (`io.modelcontextprotocol/tasks`) on the 2026-07-28 side of the
//! endpoint: `tools/call` answered with a `CreateTaskResult` when the client declares the
//! extension, then `tasks/get`, `tasks/update` and `tasks/cancel`. What may happen to a task is
//! the core's [`TaskTable`](forkscope_core::tasks::TaskTable) (one task per idempotency key, one
//! runner, terminal once, cancel settled against complete, expiry distinct from never-existed),
//! kept in a store (`crate::store`): the server's own in memory, or the replicas' shared one, so
//! any replica answers for any task. This file spells it in JSON and runs the work:
//! `progress_task`'s steps, each committed under the runner's epoch before it counts as done.
//!
//! A runner renews its lease between steps (the core's [`TaskRunner`]), so only a runner that
//! died or stalled leaves its lease to run out; the next `tasks/get` that finds the task working
//! past its lease adopts it under the next epoch and runs it on from its last committed step,
//! wherever that poll landed, so a task needs no sticky routing.

use super::handles::Report;
use super::refusal::{Unavailable, json_response, store_corrupt, unavailable};
pub use super::task_answers::iso8601;
use super::task_answers::{acknowledged, invalid, missing_task, seen_of, task_json, task_of};
use crate::clock::Time;
use crate::store::{Retention, Store, StoreError};
use crate::wire::{OsEntropy, jsonrpc};
use axum::http::StatusCode;
use axum::response::Response;
use forkscope_core::history::Run;
use forkscope_core::tasks::{
    CreateError, DEFAULT_TTL_MS, Holder, Keyed, META_DONE, Missing, Runner, Seen, Settled, Status,
    Task, TaskRules, Work, WriteRefused,
};
use forkscope_core::work::{RunnerWrite, TaskRunner};
use forkscope_core::{Entropy, Record, TaskId, ToolSpec};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use forkscope_core::tasks::EXTENSION as TASKS_EXTENSION;

/// Listens one endpoint holds open at once.
pub const MAX_LISTENS: usize = 64;

/// What the tasks side did, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct TaskCounters {
    pub created: AtomicU64,
    /// Calls whose idempotency key named a task made before: nothing new ran.
    pub reused: AtomicU64,
    /// Steps this endpoint committed: each is one effect of the work, taken once.
    pub steps_committed: AtomicU64,
    /// Runner writes the store refused (stale epoch, or the task already ended).
    pub writes_refused: AtomicU64,
    pub completed: AtomicU64,
    /// Tasks this endpoint took over from a runner whose lease ran out.
    pub adopted: AtomicU64,
    /// Listens acknowledged (`subscriptions/listen`).
    pub listens_opened: AtomicU64,
}

/// The tasks of one endpoint: where they are kept, by which rules, and who runs them here.
#[derive(Debug)]
pub struct TaskHub {
    store: Store,
    rules: TaskRules,
    runner: Runner,
    rng: Mutex<OsEntropy>,
    pub counters: TaskCounters,
    /// The runners this endpoint started: a replica killed stops them with everything else.
    runners: Mutex<Vec<(TaskId, tokio::task::AbortHandle)>>,
    /// Set once the endpoint was killed: nothing new runs here.
    stopped: std::sync::atomic::AtomicBool,
    /// Who hears what each task did (the checker).
    pub(super) report: Report,
    /// Listens open at once, bounded: each reads its tasks while it stays open.
    pub(super) listens: Arc<tokio::sync::Semaphore>,
    /// Set, and woken, when the endpoint drains: each listen sends its graceful completion.
    listens_end: std::sync::atomic::AtomicBool,
    pub(super) ending: tokio::sync::Notify,
    /// What its runners step on: the lab's clock in the dashboard's own lab, else real time.
    time: Time,
    /// Cleared only by a scenario's mutation (`mutate = "no-renewal"`): runners started from
    /// then on renew their lease only with their steps.
    renewing: std::sync::atomic::AtomicBool,
}

impl Default for TaskHub {
    fn default() -> Self {
        TaskHub::new(
            TaskRules::default(),
            None,
            Report::default(),
            crate::clock::Time::real(),
        )
    }
}

impl TaskHub {
    /// `store`: a shared one (replicas), or `None` for a store of this endpoint's own, on
    /// `time`; `report`: who hears what each task did; `time`: what its runners step on.
    pub fn new(rules: TaskRules, store: Option<Store>, report: Report, time: Time) -> Self {
        let mut rng = OsEntropy::new();
        let runner = Runner(rng.next_u64() as u32);
        TaskHub {
            store: store.unwrap_or_else(|| Store::memory_on(Retention::default(), time.clone())),
            time,
            rules,
            runner,
            rng: Mutex::new(rng),
            counters: TaskCounters::default(),
            runners: Mutex::default(),
            stopped: std::sync::atomic::AtomicBool::new(false),
            report,
            listens: Arc::new(tokio::sync::Semaphore::new(MAX_LISTENS)),
            listens_end: std::sync::atomic::AtomicBool::new(false),
            ending: tokio::sync::Notify::new(),
            renewing: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// What this endpoint does with tasks.
    pub fn rules(&self) -> TaskRules {
        self.rules
    }

    /// Where this endpoint's tasks are kept.
    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    /// Runs a task here from `done` under `epoch`, unless this endpoint was killed.
    fn start_runner(self: &Arc<Self>, task: TaskId, epoch: u64, spec: ToolSpec, done: u64) {
        let mut runners = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        runners.retain(|(_, r)| !r.is_finished());
        // Made here, in the order the requests came: at one instant of the lab's clock, the
        // runner made first takes its step first.
        let worker = self.time.worker();
        let time = worker
            .as_ref()
            .map_or_else(|| self.time.clone(), |w| w.time());
        let hub = self.clone();
        let handle = tokio::spawn(async move {
            run(hub, time, task, epoch, spec, done).await;
            drop(worker);
        });
        runners.push((task, handle.abort_handle()));
    }

    /// Whether a runner of this endpoint still runs `task`: it is alive, whatever its lease in
    /// the store says (a store restored from an older state may show it run out), so a read
    /// here never adopts it.
    fn runs_here(&self, task: TaskId) -> bool {
        let runners = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        runners.iter().any(|(t, r)| *t == task && !r.is_finished())
    }

    /// Runners of this endpoint still running.
    pub fn runners_running(&self) -> usize {
        let runners = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        runners.iter().filter(|(_, r)| !r.is_finished()).count()
    }

    /// Stops every runner at once, as a crash would: their tasks' leases run out, and a poll
    /// on another replica adopts them.
    pub fn kill_runners(&self) {
        let mut runners = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        self.stopped.store(true, Ordering::SeqCst);
        for (_, runner) in runners.drain(..) {
            runner.abort();
        }
    }

    /// Whether the endpoint was killed: its listens stop reading (a read could adopt a task
    /// it would then not run).
    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// A drain: every open listen ends with its graceful completion result
    /// (subscriptions.mdx, "Graceful Closure").
    pub fn end_listens(&self) {
        self.listens_end.store(true, Ordering::SeqCst);
        self.ending.notify_waiters();
    }

    pub(super) fn listens_ending(&self) -> bool {
        self.listens_end.load(Ordering::SeqCst)
    }

    fn new_id(&self) -> TaskId {
        TaskId::generate(&mut *self.rng.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// `tools/call` as a task: created (or found by its key) in the store before the answer,
    /// then run here.
    pub(crate) async fn call(
        self: &Arc<Self>,
        id: &Value,
        spec: ToolSpec,
        keyed: Option<Keyed>,
    ) -> Response {
        // The call the client meant, as it named it: what the checker judges re-issues by,
        // whether or not these rules honour the key.
        let op: Option<Arc<str>> = keyed.as_ref().map(|k| k.key.as_str().into());
        let keyed = self.rules.read_key(keyed);
        let created = self
            .store
            .task_create(
                self.new_id(),
                Work {
                    steps: spec.steps,
                    delay_ms: spec.delay_ms,
                },
                DEFAULT_TTL_MS,
                keyed,
                self.runner,
            )
            .await;
        let (created, task) = match created {
            Ok(Ok(done)) => done,
            Ok(Err(CreateError::Full { .. } | CreateError::Held { .. })) => {
                return unavailable(id, Unavailable::TooManyTasks, "too many tasks are held", 5);
            }
            Ok(Err(e @ CreateError::KeyReused { task })) => {
                let data =
                    json!({ "reason": "idempotency_key_reused", "taskId": task.to_string() });
                return invalid(id, &e.to_string(), data);
            }
            Ok(Err(e @ CreateError::KeyTooLong)) => {
                let data = json!({ "reason": "idempotency_key_too_long" });
                return invalid(id, &e.to_string(), data);
            }
            Err(e) => return store_failed(id, &e),
        };
        self.report.tell(|| Record::TaskCreated {
            op: op.unwrap_or_else(|| Run::Task(created.id).op_name()),
            task: created.id,
            fresh: created.fresh,
        });
        if created.fresh {
            self.counters.created.fetch_add(1, Ordering::Relaxed);
            tracing::info!(task = %created.id.short(), steps = spec.steps, "task created");
            self.start_runner(created.id, created.epoch, spec, 0);
        } else {
            self.counters.reused.fetch_add(1, Ordering::Relaxed);
            tracing::info!(task = %created.id.short(), "task found by its idempotency key: nothing new runs");
        }
        let mut body = self.task_json(&task);
        body["resultType"] = json!("task");
        json_response(StatusCode::OK, jsonrpc::result(id, body))
    }

    /// Plants `mutation` in the runners this endpoint starts from now on (a scenario's
    /// `mutate`, replaying what `check --mutate` found).
    pub fn mutate(&self, mutation: forkscope_core::work::Mutation) {
        match mutation {
            forkscope_core::work::Mutation::NoRenewal => {
                self.renewing.store(false, Ordering::Relaxed);
            }
        }
    }

    /// The task as stored. One found working past its lease is adopted here first, and run on
    /// from its last committed step: every reader (a `tasks/get`, a listen) goes through here,
    /// so a task whose client only listens is adopted too.
    pub(super) async fn read(
        self: &Arc<Self>,
        task: TaskId,
        seen: Option<Seen>,
    ) -> Result<Result<Task, Missing>, StoreError> {
        // One store operation: the read, the adoption when the lease ran out (unless a runner
        // of this endpoint still runs the task), and the end of a task the store forgot under
        // what this reader was told.
        let adopter = (!self.runs_here(task)).then_some(self.runner);
        let read = self.store.task_read(task, adopter, seen).await?;
        if let Err(Missing::Forgotten { holds, seen }) = read {
            tracing::warn!(task = %task.short(), holds, told = seen.done,
                "task ended: the store was rolled back under what its reader was told");
            // The checker hears this end as a runner's seal, unless it stands in for an end
            // the store forgot (the core's rule).
            if seen.seal_is_news() {
                self.report.tell(|| Record::TaskSettled {
                    task,
                    status: Status::Failed,
                });
            }
        }
        if let Ok((adopted, true)) = &read {
            let adopted = adopted.clone();
            self.counters.adopted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(task = %task.short(), epoch = adopted.epoch, done = adopted.done,
                "adopted a task whose runner's lease ran out");
            let spec = ToolSpec {
                steps: adopted.steps,
                delay_ms: adopted.delay_ms,
            };
            self.start_runner(task, adopted.epoch, spec, adopted.done);
            return Ok(Ok(adopted));
        }
        Ok(read.map(|(task, _)| task))
    }

    /// `tasks/get`: the task as stored (adopted first if its runner's lease ran out).
    pub(crate) async fn get(self: &Arc<Self>, id: &Value, params: &Value) -> Response {
        let Some(task) = self.named(params) else {
            return missing_task(id, Missing::Unknown);
        };
        let seen = match seen_of(params) {
            Ok(seen) => seen,
            Err(why) => return invalid(id, why, json!({ "reason": "bad_seen" })),
        };
        match self.read(task, seen).await {
            Ok(Ok(task)) => {
                self.report.tell(|| Record::TaskRead {
                    task: task.id,
                    status: task.status,
                });
                let mut body = self.task_json(&task);
                body["resultType"] = json!("complete");
                // What the reader sends back as seen on its next read.
                body["_meta"] = json!({ META_DONE: task.done });
                json_response(StatusCode::OK, jsonrpc::result(id, body))
            }
            Ok(Err(missing)) => {
                // The client now knows this task's end will not come (it may ask again).
                let reason = missing.reason();
                self.report.tell(|| Record::TaskRefused { task, reason });
                missing_task(id, missing)
            }
            Err(e) => {
                if let Some(reason) = terminal_reason(&e) {
                    self.report.tell(|| Record::TaskRefused { task, reason });
                }
                store_failed(id, &e)
            }
        }
    }

    /// `tasks/update`: nothing here asks for input, so every response is for a key not
    /// outstanding, which the extension says to ignore; an unknown task is an error.
    pub(crate) async fn update(&self, id: &Value, params: &Value) -> Response {
        let Some(task) = self.named(params) else {
            return missing_task(id, Missing::Unknown);
        };
        match self.store.task_get(task).await {
            Ok(Ok(_)) => acknowledged(id, None),
            Ok(Err(missing)) => missing_task(id, missing),
            Err(e) => store_failed(id, &e),
        }
    }

    /// `tasks/cancel`: settled against completion by the store's compare-and-set; the
    /// acknowledgement says which won, in `_meta` (an extension of forkscope's).
    pub(crate) async fn cancel(&self, id: &Value, params: &Value) -> Response {
        let Some(task) = self.named(params) else {
            return missing_task(id, Missing::Unknown);
        };
        match self.store.task_cancel(task).await {
            Ok(Ok(Settled::Won(status))) => {
                self.report.tell(|| Record::TaskSettled { task, status });
                acknowledged(
                    id,
                    Some(("cancelled", "the cancel won: no step runs after it")),
                )
            }
            Ok(Ok(Settled::Lost(status))) => acknowledged(
                id,
                Some((
                    status.name(),
                    "the task had already ended: that outcome stands",
                )),
            ),
            Ok(Err(missing)) => missing_task(id, missing),
            Err(e) => store_failed(id, &e),
        }
    }

    /// The task a request names (`params.taskId`), told to the checker: a client that names
    /// it knows it. `None` for anything that is not a task id.
    fn named(&self, params: &Value) -> Option<TaskId> {
        let task = task_of(params).ok()?;
        self.report.tell(|| Record::TaskNamed { task });
        Some(task)
    }

    pub(super) fn task_json(&self, task: &Task) -> Value {
        task_json(task, self.store.task_wall_origin_ms())
    }
}

/// Runs a task from `done` under `epoch` as the core's [`TaskRunner`] says: each step committed
/// to the store before it counts, and the lease renewed between steps however long they are; a
/// last step whose result is due with it goes with the result, in one store operation. A
/// refused write (a cancel won, the TTL ran out, another runner adopted it), or a store that did
/// not answer for a whole lease, stops the work (its lease then runs out, and a read elsewhere
/// adopts it); a store found rolled back ends the task, typed.
async fn run(hub: Arc<TaskHub>, time: Time, task: TaskId, epoch: u64, spec: ToolSpec, done: u64) {
    let now = || time.now();
    let lease_ms = hub.store.retention().lease_ms;
    let mut runner = TaskRunner::new(task, epoch, spec, done, lease_ms, now());
    if !hub.renewing.load(Ordering::Relaxed) {
        runner = runner.without_renewal();
    }
    let lease = std::time::Duration::from_millis(lease_ms);
    let mut landed = tokio::time::Instant::now();
    while let Some(due) = runner.poll_timeout() {
        time.sleep_until(due).await;
        while let Some(write) = runner.poll_write(now()) {
            // A store that did not answer may answer again (a restart, a failover): the same
            // write is tried again, for a while — this endpoint's reads do not adopt a task its
            // runner still runs, and when the store answers, a write finding it rolled back ends
            // the task, typed.
            let written = loop {
                match commit(&hub, task, epoch, write).await {
                    Err(StoreError::Unavailable(_)) if landed.elapsed() < RETRY_FOR.max(lease) => {
                        tokio::time::sleep(RETRY_UNANSWERED).await;
                    }
                    other => break other,
                }
            };
            match written {
                Ok(Ok(true)) => {
                    landed = tokio::time::Instant::now();
                    runner.written(now());
                }
                Ok(Ok(false)) => runner.stop(),
                Ok(Err(WriteRefused::RolledBack { holds, wrote })) => {
                    hub.counters.writes_refused.fetch_add(1, Ordering::Relaxed);
                    seal_rolled_back(&hub, task, epoch, (holds, wrote)).await;
                    runner.stop();
                }
                Ok(Err(why)) => {
                    hub.counters.writes_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(task = %task.short(), %why, "task runner stops: its write was refused");
                    runner.stop();
                }
                Err(why) => {
                    tracing::warn!(task = %task.short(), %why, "task runner stops: the store did not answer");
                    runner.stop();
                }
            }
        }
    }
}

/// How soon a runner tries a write again that the store did not answer.
const RETRY_UNANSWERED: std::time::Duration = std::time::Duration::from_millis(100);
/// How long a runner goes on trying a write the store does not answer before it stops.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// The store forgot steps this runner wrote (`holds` of `wrote`): running on would run them
/// again, so the task ends failed, typed (`EndedBy::RolledBack`, as a read that finds it ends
/// it) under the runner's epoch, and the client reads why on its next poll.
async fn seal_rolled_back(hub: &TaskHub, task: TaskId, epoch: u64, (holds, wrote): (u64, u64)) {
    tracing::warn!(task = %task.short(), holds, wrote, "task ended: the store was rolled back under it");
    // What the store holds is what the end claims: `holds`, not the steps it forgot.
    let by = Holder {
        epoch,
        wrote: holds,
    };
    let settled = hub.store.task_seal_rolled_back(task, by, wrote).await;
    if matches!(settled, Ok(Ok(Settled::Won(_)))) {
        hub.report.tell(|| Record::TaskSettled {
            task,
            status: Status::Failed,
        });
    }
}

/// One write of a runner under `epoch`, and what it tells: `Ok(Ok(true))` it landed,
/// `Ok(Ok(false))` the task had already ended (the runner stops without a word).
async fn commit(
    hub: &TaskHub,
    task: TaskId,
    epoch: u64,
    write: RunnerWrite,
) -> Result<Result<bool, WriteRefused>, StoreError> {
    let result = |steps: u64| -> Arc<str> { super::tool::result(steps).to_string().into() };
    let written = match write {
        RunnerWrite::Renew { wrote } => {
            return hub
                .store
                .task_renew(task, epoch, wrote)
                .await
                .map(|w| w.map(|()| true));
        }
        RunnerWrite::Step { done, .. } => hub
            .store
            .task_step(task, epoch, done)
            .await
            .map(|w| w.map(|()| true)),
        RunnerWrite::Finish { steps } => {
            let by = Holder {
                epoch,
                wrote: steps,
            };
            hub.store
                .task_settle(task, Some(by), Status::Completed, Some(result(steps)))
                .await
                .map(|w| w.map(|s| matches!(s, Settled::Won(_))))
        }
        RunnerWrite::Last { steps } => hub
            .store
            .task_finish(task, epoch, steps, result(steps))
            .await
            .map(|w| w.map(|()| true)),
    };
    if !matches!(written, Ok(Ok(true))) {
        return written;
    }
    let (step, finished) = match write {
        RunnerWrite::Step { done, total } => (Some((done, total)), false),
        RunnerWrite::Finish { .. } => (None, true),
        RunnerWrite::Last { steps } => (Some((steps, steps)), true),
        RunnerWrite::Renew { .. } => (None, false),
    };
    if let Some((done, total)) = step {
        super::effects::step_committed(&task.to_string(), done, total, epoch);
        hub.counters.steps_committed.fetch_add(1, Ordering::Relaxed);
        hub.report.tell(|| Record::StepApplied {
            run: Run::Task(task),
            step: done,
            of: total,
            epoch,
        });
    }
    if finished {
        hub.report.tell(|| Record::TaskSettled {
            task,
            status: Status::Completed,
        });
        hub.counters.completed.fetch_add(1, Ordering::Relaxed);
        tracing::info!(task = %task.short(), "task completed");
    }
    written
}

/// A store failure as the client reads it: a corrupt record is a terminal 500 that names it
/// (a retry would read the same record); `store_unavailable`, with `Retry-After`, is kept for
/// what a retry can cure.
pub(super) fn store_failed(id: &Value, e: &StoreError) -> Response {
    match e {
        StoreError::Corrupt(_) => store_corrupt(id, &e.to_string()),
        _ => unavailable(id, Unavailable::StoreUnreachable, &e.to_string(), 1),
    }
}

/// The `data.reason` of a store failure no retry cures, told to the checker; `None` for one a
/// retry may cure.
fn terminal_reason(e: &StoreError) -> Option<&'static str> {
    matches!(e, StoreError::Corrupt(_)).then_some("store_corrupt")
}
