//! The task table's rules on both stores (in memory, and a real `redis-server` running
//! `lua/tasks/`), held to the same answers: one task per key and arguments, a stale epoch
//! refused after an adoption, terminal once, cancel settled against completion, the TTL failing
//! unfinished work through the same path, unknown kept apart from a task that exists.

mod common;

use common::services::RedisServer;
use forkscope::store::{Retention, Store};
use forkscope_core::tasks::{
    CreateError, Holder, Keyed, MAX_TASKS, Missing, Runner, Settled, Status, Work, WriteRefused,
};
use forkscope_core::{SplitMix64, TaskId};
use std::time::Duration;

/// A bound on waiting for a lease to run out by the store's clock, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);
const A: Runner = Runner(1);
const B: Runner = Runner(2);

fn keyed(key: &str, arguments: &str) -> Option<Keyed> {
    Some(Keyed {
        key: key.into(),
        arguments: arguments.into(),
    })
}

/// The same script for each store: every answer asserted.
async fn the_rules_hold(store: Store, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut id = || TaskId::generate(&mut rng);
    let (first, task) = store
        .task_create(
            id(),
            Work {
                steps: 5,
                delay_ms: 10,
            },
            60_000,
            keyed("k", "steps=5"),
            A,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(first.fresh);
    assert_eq!(
        (task.status, task.epoch, task.done, task.steps),
        (Status::Working, 1, 0, 5)
    );
    // The pace is kept with the task, for an adopter to run on at.
    assert_eq!(task.delay_ms, 10);
    let (again, _) = store
        .task_create(
            id(),
            Work {
                steps: 5,
                delay_ms: 10,
            },
            60_000,
            keyed("k", "steps=5"),
            A,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.fresh), (first.id, false));
    assert_eq!(
        store
            .task_create(
                id(),
                Work {
                    steps: 6,
                    delay_ms: 10
                },
                60_000,
                keyed("k", "steps=6"),
                A
            )
            .await
            .unwrap()
            .err(),
        Some(CreateError::KeyReused { task: first.id })
    );
    // Steps under the epoch, in order; a step never goes back.
    store.task_step(first.id, 1, 1).await.unwrap().unwrap();
    store.task_step(first.id, 1, 2).await.unwrap().unwrap();
    store.task_step(first.id, 1, 1).await.unwrap().unwrap();
    // A step past the next, or a renewal claiming more than the store holds: the store forgot
    // what the runner wrote (it was rolled back), and the write is refused.
    assert_eq!(
        store.task_step(first.id, 1, 4).await.unwrap(),
        Err(WriteRefused::RolledBack { holds: 2, wrote: 3 })
    );
    assert_eq!(
        store.task_renew(first.id, 1, 3).await.unwrap(),
        Err(WriteRefused::RolledBack { holds: 2, wrote: 3 })
    );
    store.task_renew(first.id, 1, 2).await.unwrap().unwrap();
    assert_eq!(store.task_get(first.id).await.unwrap().unwrap().done, 2);
    // The lease holds: no adoption.
    assert_eq!(store.task_adopt(first.id, B).await.unwrap(), None);
    // Once it ran out by the store's clock, B adopts under epoch 2 and A's writes are refused.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let adopted = loop {
        if let Some(adopted) = store.task_adopt(first.id, B).await.unwrap() {
            break adopted;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never ran out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((adopted.epoch, adopted.runner, adopted.done), (2, B, 2));
    assert_eq!(
        store.task_step(first.id, 1, 3).await.unwrap(),
        Err(WriteRefused::Stale { epoch: 1, held: 2 })
    );
    assert_eq!(
        store
            .task_settle(
                first.id,
                Some(Holder { epoch: 1, wrote: 0 }),
                Status::Completed,
                Some("{}".into())
            )
            .await
            .unwrap(),
        Err(WriteRefused::Stale { epoch: 1, held: 2 })
    );
    // Terminal once: B's result stands, and every later end loses to it.
    let result = r#"{"content":[],"isError":false}"#;
    assert_eq!(
        store
            .task_settle(
                first.id,
                Some(Holder { epoch: 2, wrote: 0 }),
                Status::Completed,
                Some(result.into())
            )
            .await
            .unwrap(),
        Ok(Settled::Won(Status::Completed))
    );
    assert_eq!(
        store.task_cancel(first.id).await.unwrap(),
        Ok(Settled::Lost(Status::Completed))
    );
    assert_eq!(
        store.task_step(first.id, 2, 5).await.unwrap(),
        Err(WriteRefused::Terminal(Status::Completed))
    );
    let read = store.task_get(first.id).await.unwrap().unwrap();
    assert_eq!(
        (read.status, read.outcome.as_deref()),
        (Status::Completed, Some(result))
    );
    // Cancel wins against a working task, and its runner's next write is refused.
    let (second, _) = store
        .task_create(
            id(),
            Work {
                steps: 3,
                delay_ms: 10,
            },
            60_000,
            None,
            A,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.task_cancel(second.id).await.unwrap(),
        Ok(Settled::Won(Status::Cancelled))
    );
    assert_eq!(
        store.task_step(second.id, 1, 1).await.unwrap(),
        Err(WriteRefused::Terminal(Status::Cancelled))
    );
    // The TTL fails unfinished work by the same path: no step lands after it.
    let (short, _) = store
        .task_create(
            id(),
            Work {
                steps: 3,
                delay_ms: 10,
            },
            50,
            None,
            A,
        )
        .await
        .unwrap()
        .unwrap();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let read = store.task_get(short.id).await.unwrap().unwrap();
        if read.status == Status::Failed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TTL never ran out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        store.task_step(short.id, 1, 1).await.unwrap(),
        Err(WriteRefused::Terminal(Status::Failed))
    );
    // A task never made.
    assert_eq!(store.task_get(id()).await.unwrap(), Err(Missing::Unknown));
    assert_eq!(
        store.task_cancel(id()).await.unwrap(),
        Err(Missing::Unknown)
    );
    assert_eq!(store.task_adopt(id(), B).await.unwrap(), None);
}

/// The cap counts working tasks: more than `MAX_TASKS` finished ones keep their results and
/// block no one; `MAX_TASKS` working ones do.
async fn finished_tasks_do_not_block_creation(store: Store, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let work = Work {
        steps: 1,
        delay_ms: 0,
    };
    let done: Option<std::sync::Arc<str>> = Some("{}".into());
    for _ in 0..MAX_TASKS + 10 {
        let (made, _) = store
            .task_create(TaskId::generate(&mut rng), work, 60_000, None, A)
            .await
            .unwrap()
            .unwrap();
        let settled = store
            .task_settle(
                made.id,
                Some(Holder {
                    epoch: made.epoch,
                    wrote: 0,
                }),
                Status::Completed,
                done.clone(),
            )
            .await
            .unwrap();
        assert_eq!(settled, Ok(Settled::Won(Status::Completed)));
    }
    let key = || {
        Some(Keyed {
            key: "order-1".into(),
            arguments: "{}".into(),
        })
    };
    let (first, _) = store
        .task_create(TaskId::generate(&mut rng), work, 60_000, key(), A)
        .await
        .unwrap()
        .unwrap();
    for _ in 1..MAX_TASKS {
        store
            .task_create(TaskId::generate(&mut rng), work, 60_000, None, A)
            .await
            .unwrap()
            .unwrap();
    }
    let drawn = TaskId::generate(&mut rng);
    let refused = store
        .task_create(drawn, work, 60_000, None, A)
        .await
        .unwrap();
    assert_eq!(
        refused.map(|_| ()),
        Err(CreateError::Full { max: MAX_TASKS })
    );
    // Refused, it left nothing behind (on Redis it was made beside its admission, then
    // withdrawn), and a new key is refused the same, its entry never made.
    assert_eq!(store.task_get(drawn).await.unwrap(), Err(Missing::Unknown));
    let other = || {
        Some(Keyed {
            key: "order-2".into(),
            arguments: "{}".into(),
        })
    };
    let refused = store
        .task_create(TaskId::generate(&mut rng), work, 60_000, other(), A)
        .await
        .unwrap();
    assert_eq!(
        refused.map(|_| ()),
        Err(CreateError::Full { max: MAX_TASKS })
    );
    // Full, a re-issue under a key still finds its task: it makes nothing new.
    let (again, _) = store
        .task_create(TaskId::generate(&mut rng), work, 60_000, key(), A)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.fresh), (first.id, false));
    // A task that ends gives its place back at once.
    let settled = store
        .task_settle(
            first.id,
            Some(Holder {
                epoch: first.epoch,
                wrote: 0,
            }),
            Status::Completed,
            done,
        )
        .await
        .unwrap();
    assert_eq!(settled, Ok(Settled::Won(Status::Completed)));
    let (made, _) = store
        .task_create(TaskId::generate(&mut rng), work, 60_000, other(), A)
        .await
        .unwrap()
        .unwrap();
    assert!(made.fresh, "the key refused while full makes its task now");
    let refused = store
        .task_create(TaskId::generate(&mut rng), work, 60_000, None, A)
        .await
        .unwrap();
    assert_eq!(
        refused.map(|_| ()),
        Err(CreateError::Full { max: MAX_TASKS })
    );
}

#[tokio::test]
async fn the_task_rules_hold_in_memory() {
    the_rules_hold(Store::memory(Retention::default()), 1).await;
    finished_tasks_do_not_block_creation(Store::memory(Retention::default()), 3).await;
}

#[tokio::test]
async fn the_task_rules_hold_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = Store::redis(&redis.url(), Retention::default())
        .await
        .unwrap();
    the_rules_hold(store.clone(), 2).await;
    // From an empty store: the rules above left tasks working.
    assert_eq!(redis.command(&["FLUSHALL"]), "OK");
    finished_tasks_do_not_block_creation(store, 4).await;
}
