//! The task table's rules against real Redis, answer by answer: the same random task operations
//! — create (keyed, unkeyed, a key with other arguments), get, read (which may adopt, and ends
//! a task it finds holding less than its reader was told), step, renew, settle, a runner's seal
//! of a task found rolled back, a last step and its result in one write, cancel, adopt, under
//! stale and current epochs, on tasks whose TTL runs out at once and tasks whose TTL never does
//! — go to the in-memory store (the core's `TaskTable` behind a lock) and to a real
//! `redis-server` (`lua/tasks/`), and every answer must be the same. A rule changed on one side
//! only fails here.
//!
//! `FORKSCOPE_DIFFERENTIAL_OPS` sets how many operations (default 4,000, split over stores whose
//! leases run out at once and stores whose leases never do); `FORKSCOPE_DIFFERENTIAL_SEED`
//! replays one run. Skipped without a `redis-server` unless `FORKSCOPE_REQUIRE_SERVICES` is set.
//!
//! Deletion past the TTL is in: a third run keeps no task past its TTL, so a task made with a TTL
//! of 0 is deleted by the next operation that touches it, its key's entry with it, and every
//! later answer is the tombstone's. Left out, on purpose: the clock (each store reads its own, so
//! the times in an answer are blanked; a TTL is 0 or an hour, so expiry never races the test).

mod common;

use common::services::RedisServer;
use forkscope::store::{Retention, Store};
use forkscope_core::tasks::{Holder, Keyed, Runner, Seen, Status, Task, Work};
use forkscope_core::{Entropy, LabTime, SplitMix64, TaskId};
use std::collections::BTreeMap;
use std::sync::Arc;

const RUNNERS: [Runner; 3] = [Runner(1), Runner(2), Runner(3)];
const KEYS: [&str; 3] = ["order-1", "order-2", "order-3"];

/// One operation, as both stores are asked it.
#[derive(Clone, Debug)]
enum Op {
    Create {
        id: TaskId,
        steps: u64,
        ttl_ms: u64,
        keyed: Option<Keyed>,
        runner: Runner,
    },
    Get(TaskId),
    Step(TaskId, u64, u64),
    /// A last step and the result, in one write.
    Finish(TaskId, u64, u64),
    Renew(TaskId, u64, u64),
    Settle(TaskId, Option<Holder>, Status),
    /// A runner's end of a task it found rolled back: its holder, and the steps it applied.
    Seal(TaskId, Holder, u64),
    Cancel(TaskId),
    Adopt(TaskId, Runner),
    Read(TaskId, Option<Runner>, Option<Seen>),
}

struct Gen {
    rng: SplitMix64,
    /// Every id made (and some never made), with the epoch and steps last answered.
    known: Vec<(TaskId, u64, u64)>,
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    /// `likely` most of the time, else a neighbour: a stale or a future value.
    fn near(&mut self, likely: u64) -> u64 {
        match self.below(8) {
            0 => likely.saturating_sub(1),
            1 => likely + 1,
            _ => likely,
        }
    }

    fn task(&mut self) -> (TaskId, u64, u64) {
        if self.known.is_empty() || self.below(20) == 0 {
            return (TaskId::generate(&mut self.rng), 1, 0);
        }
        let i = self.below(self.known.len() as u64) as usize;
        self.known[i]
    }

    fn op(&mut self) -> Op {
        let (id, epoch, done) = self.task();
        match self.below(100) {
            0..=14 => {
                let keyed = (self.below(3) > 0).then(|| Keyed {
                    key: KEYS[self.below(3) as usize].to_owned(),
                    arguments: format!("steps={}", 2 + self.below(2)),
                });
                let id = TaskId::generate(&mut self.rng);
                Op::Create {
                    id,
                    steps: 3,
                    ttl_ms: if self.below(6) == 0 { 0 } else { 3_600_000 },
                    keyed,
                    runner: RUNNERS[self.below(3) as usize],
                }
            }
            15..=29 => Op::Get(id),
            30..=54 => {
                let epoch = self.near(epoch);
                let done = self.near(done + 1);
                if self.below(5) == 0 {
                    return Op::Finish(id, epoch, done);
                }
                Op::Step(id, epoch, done)
            }
            55..=64 => {
                let epoch = self.near(epoch);
                Op::Renew(id, epoch, self.near(done))
            }
            65..=74 => {
                let by = (self.below(4) > 0).then(|| Holder {
                    epoch: self.near(epoch),
                    wrote: self.near(done),
                });
                if self.below(4) == 0 {
                    let by = Holder {
                        epoch: self.near(epoch),
                        wrote: self.near(done),
                    };
                    return Op::Seal(id, by, done + 1 + self.below(3));
                }
                let to = [Status::Completed, Status::Failed][self.below(2) as usize];
                Op::Settle(id, by, to)
            }
            75..=82 => Op::Cancel(id),
            83..=91 => Op::Adopt(id, RUNNERS[self.below(3) as usize]),
            _ => {
                // What the reader was told: nothing, or near what the store last answered
                // (a step more, often enough that a read finds its cursor forgotten).
                let seen = (self.below(3) == 0).then(|| Seen {
                    done: if self.below(4) == 0 {
                        done + 1
                    } else {
                        self.near(done)
                    },
                    ended: self.below(4) == 0,
                });
                // No adopter: the reader's own runner still runs the task.
                let adopter = (self.below(6) > 0).then(|| RUNNERS[self.below(3) as usize]);
                Op::Read(id, adopter, seen)
            }
        }
    }

    /// What an answer taught about a task: its epoch and steps, for the next operations.
    fn learn(&mut self, task: &Task) {
        match self.known.iter_mut().find(|(id, ..)| *id == task.id) {
            Some(k) => *k = (task.id, task.epoch, task.done),
            None => self.known.push((task.id, task.epoch, task.done)),
        }
    }
}

/// A task with its times blanked: each store reads its own clock.
fn blank(task: &Task) -> Task {
    Task {
        created_at: LabTime::ZERO,
        updated_at: LabTime::ZERO,
        lease_until: LabTime::ZERO,
        ..task.clone()
    }
}

/// The answer to `op` from `store`, spelled for comparison, and the task it told of, if any.
async fn ask(store: &Store, op: &Op) -> (String, Option<Task>) {
    match op.clone() {
        Op::Create {
            id,
            steps,
            ttl_ms,
            keyed,
            runner,
        } => {
            let work = Work {
                steps,
                delay_ms: 10,
            };
            match store.task_create(id, work, ttl_ms, keyed, runner).await {
                Ok(Ok((created, task))) => (
                    format!("create: {created:?} {:?}", blank(&task)),
                    Some(task),
                ),
                other => (format!("create: {:?}", other.map(|r| r.map(|_| ()))), None),
            }
        }
        Op::Get(id) => match store.task_get(id).await {
            Ok(Ok(task)) => (format!("get: {:?}", blank(&task)), Some(task)),
            other => (format!("get: {:?}", other.map(|r| r.map(|_| ()))), None),
        },
        Op::Step(id, epoch, done) => (
            format!("step: {:?}", store.task_step(id, epoch, done).await),
            None,
        ),
        Op::Finish(id, epoch, done) => {
            let outcome: Arc<str> = "{\"content\":[]}".into();
            let finished = store.task_finish(id, epoch, done, outcome).await;
            (format!("finish: {finished:?}"), None)
        }
        Op::Renew(id, epoch, wrote) => (
            format!("renew: {:?}", store.task_renew(id, epoch, wrote).await),
            None,
        ),
        Op::Settle(id, by, to) => {
            let outcome: Option<Arc<str>> = Some("{\"content\":[]}".into());
            let settled = store.task_settle(id, by, to, outcome).await;
            (format!("settle: {settled:?}"), None)
        }
        Op::Seal(id, by, applied) => {
            let sealed = store.task_seal_rolled_back(id, by, applied).await;
            (format!("seal: {sealed:?}"), None)
        }
        Op::Cancel(id) => (format!("cancel: {:?}", store.task_cancel(id).await), None),
        Op::Read(id, runner, seen) => match store.task_read(id, runner, seen).await {
            Ok(Ok((task, adopted))) => (
                format!("read: adopted {adopted} {:?}", blank(&task)),
                Some(task),
            ),
            other => (format!("read: {:?}", other.map(|r| r.map(|_| ()))), None),
        },
        Op::Adopt(id, runner) => match store.task_adopt(id, runner).await {
            Ok(Some(task)) => (format!("adopt: {:?}", blank(&task)), Some(task)),
            other => (format!("adopt: {:?}", other.map(|t| t.map(|_| ()))), None),
        },
    }
}

/// The kind of an answer, for the tally: its words without the numbers (ids, epochs, steps).
fn kind(answer: &str) -> String {
    let words: String = answer.chars().filter(|c| !c.is_ascii_digit()).collect();
    let mut kind: String = words.chars().take(120).collect();
    if answer.contains("Some(Ttl)") {
        kind.push_str(" … ended by its TTL");
    }
    if answer.contains("Some(RolledBack") {
        kind.push_str(" … ended rolled back");
    }
    kind
}

/// An answer with the tombstone's time blanked, as a task's are.
fn untimed(answer: String) -> String {
    static AT: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"Expired \{ at: [^}]* \}").unwrap());
    AT.replace_all(&answer, "Expired").into_owned()
}

async fn differ(
    redis: &RedisServer,
    (lease_ms, task_retain_ms): (u64, u64),
    seed: u64,
    n: usize,
) -> BTreeMap<String, u64> {
    assert_eq!(redis.command(&["FLUSHALL"]), "OK");
    let retention = Retention {
        lease_ms,
        task_retain_ms,
        ..Retention::default()
    };
    let memory = Store::memory(retention);
    let on_redis = Store::redis(&redis.url(), retention).await.unwrap();
    let mut draw = Gen {
        rng: SplitMix64::new(seed),
        known: Vec::new(),
    };
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let op = draw.op();
        let (mine, task) = ask(&memory, &op).await;
        let (theirs, _) = ask(&on_redis, &op).await;
        let (mine, theirs) = (untimed(mine), untimed(theirs));
        assert_eq!(
            mine, theirs,
            "seed {seed}, lease {lease_ms} ms, retained {task_retain_ms} ms, operation {i}: {op:?}\nmemory: {mine}\nredis:  {theirs}"
        );
        if let Some(task) = task {
            draw.learn(&task);
        }
        *seen.entry(kind(&mine)).or_default() += 1;
    }
    seen
}

fn ops() -> usize {
    std::env::var("FORKSCOPE_DIFFERENTIAL_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_task_table_and_the_redis_script_answer_alike() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let seed = std::env::var("FORKSCOPE_DIFFERENTIAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let total = ops();
    // Leases that run out at once (adoption by epoch alone), then leases that never do, then
    // tasks deleted as soon as their TTL runs out.
    let mut seen = differ(&redis, (0, 60_000), seed, total * 2 / 5).await;
    for (what, n) in [
        differ(&redis, (3_600_000, 60_000), seed ^ 1, total * 2 / 5).await,
        differ(&redis, (3_600_000, 0), seed ^ 2, total - total * 4 / 5).await,
    ]
    .into_iter()
    .flatten()
    {
        *seen.entry(what).or_default() += n;
    }
    println!("seed {seed}: {total} task operations, every answer alike: {seen:?}");
    // The run met the refusals it is there to compare, not only successes.
    let met = |needle: &str| seen.keys().any(|k| k.contains(needle));
    for needed in [
        "KeyReused",
        "Stale",
        "Terminal",
        "Unknown",
        "Lost",
        "Won",
        "adopt: Task",
        "adopt: Ok(None)",
        "read: adopted true",
        "read: adopted false",
        "renew: Ok(Ok",
        "RolledBack",
        "Forgotten",
        "seal: Ok(Ok(Won",
        "finish: Ok(Ok(()))",
        "ended rolled back",
        "ended by its TTL",
        "Expired",
    ] {
        assert!(met(needed), "seed {seed}: no answer met {needed}: {seen:?}");
    }
}
