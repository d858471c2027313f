use super::*;
use crate::ids::SplitMix64;

const T0: LabTime = LabTime::ZERO;
const A: Runner = Runner(0);
const B: Runner = Runner(1);

fn keyed(key: &str, arguments: &str) -> Option<Keyed> {
    Some(Keyed {
        key: key.to_owned(),
        arguments: arguments.to_owned(),
    })
}

fn table() -> (TaskTable, SplitMix64) {
    (TaskTable::new(), SplitMix64::new(7))
}

#[test]
fn one_key_one_task_and_the_same_key_with_other_arguments_is_refused() {
    let (mut tasks, mut rng) = table();
    let first = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            keyed("k1", r#"{"steps":5}"#),
            A,
        )
        .unwrap();
    assert!(first.fresh);
    // The re-issue of a call whose answer was lost: the same task, nothing new runs.
    let again = tasks
        .create(
            T0.plus(10),
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            keyed("k1", r#"{"steps":5}"#),
            A,
        )
        .unwrap();
    assert_eq!((again.id, again.fresh), (first.id, false));
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        tasks.create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0
            },
            DEFAULT_TTL_MS,
            keyed("k1", r#"{"steps":6}"#),
            A
        ),
        Err(CreateError::KeyReused { task: first.id })
    );
    // Without a key every call is a task of its own: the naive re-issue makes a second.
    let a = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    let b = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(
        tasks.create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0
            },
            DEFAULT_TTL_MS,
            keyed(&"k".repeat(300), "{}"),
            A
        ),
        Err(CreateError::KeyTooLong)
    );
}

#[test]
fn a_full_table_refuses_creation_but_still_answers_known_keys() {
    let mut tasks = TaskTable::with_capacity(1);
    let mut rng = SplitMix64::new(1);
    let first = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 1,
                delay_ms: 0,
            },
            1_000,
            keyed("k", "{}"),
            A,
        )
        .unwrap();
    assert_eq!(
        tasks.create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 1,
                delay_ms: 0
            },
            1_000,
            None,
            A
        ),
        Err(CreateError::Full { max: 1 })
    );
    assert_eq!(
        tasks
            .create(
                T0,
                TaskId::generate(&mut rng),
                Work {
                    steps: 1,
                    delay_ms: 0
                },
                1_000,
                keyed("k", "{}"),
                A
            )
            .map(|c| c.id),
        Ok(first.id)
    );
}

#[test]
fn one_runner_a_stale_epoch_is_refused_after_an_adoption() {
    let (mut tasks, mut rng) = table();
    let task = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    tasks.step(T0.plus(100), task.id, 1, 1).unwrap();
    // The lease holds: nobody else may take the task.
    assert_eq!(tasks.adopt(T0.plus(200), task.id, B), None);
    // A's lease runs out (it died, or is partitioned): B adopts under epoch 2.
    let later = T0.plus(100 + LEASE_MS);
    assert_eq!(tasks.adopt(later, task.id, B), Some(2));
    assert_eq!(
        tasks.step(later.plus(1), task.id, 1, 2),
        Err(WriteRefused::Stale { epoch: 1, held: 2 })
    );
    assert_eq!(
        tasks.settle(
            later.plus(1),
            task.id,
            Some(Holder { epoch: 1, wrote: 0 }),
            Status::Completed,
            None
        ),
        Err(WriteRefused::Stale { epoch: 1, held: 2 })
    );
    tasks.step(later.plus(2), task.id, 2, 2).unwrap();
    let read = tasks.get(task.id).unwrap();
    assert_eq!((read.done, read.runner, read.epoch), (2, B, 2));
}

#[test]
fn terminal_once_every_read_returns_the_stored_outcome() {
    let (mut tasks, mut rng) = table();
    let task = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 1,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    let result: Arc<str> = r#"{"content":[]}"#.into();
    assert_eq!(
        tasks.settle(
            T0.plus(5),
            task.id,
            Some(Holder { epoch: 1, wrote: 0 }),
            Status::Completed,
            Some(result.clone())
        ),
        Ok(Settled::Won(Status::Completed))
    );
    assert_eq!(
        tasks.settle(
            T0.plus(6),
            task.id,
            Some(Holder { epoch: 1, wrote: 0 }),
            Status::Failed,
            Some("{}".into())
        ),
        Ok(Settled::Lost(Status::Completed))
    );
    let read = tasks.get(task.id).unwrap();
    assert_eq!(
        (read.status, read.outcome.clone()),
        (Status::Completed, Some(result))
    );
    assert_eq!(
        tasks.step(T0.plus(7), task.id, 1, 2),
        Err(WriteRefused::Terminal(Status::Completed))
    );
}

#[test]
fn cancel_is_settled_against_complete_and_says_which_won() {
    let (mut tasks, mut rng) = table();
    let task = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 3,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    assert_eq!(
        tasks.cancel(T0.plus(1), task.id),
        Ok(Settled::Won(Status::Cancelled))
    );
    // The runner's next write is refused: no effect lands after the cancel won.
    assert_eq!(
        tasks.step(T0.plus(2), task.id, 1, 1),
        Err(WriteRefused::Terminal(Status::Cancelled))
    );
    assert_eq!(tasks.get(task.id).unwrap().ended_by, Some(EndedBy::Cancel));
    let done = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 1,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    tasks
        .settle(
            T0.plus(1),
            done.id,
            Some(Holder { epoch: 1, wrote: 0 }),
            Status::Completed,
            None,
        )
        .unwrap();
    assert_eq!(
        tasks.cancel(T0.plus(2), done.id),
        Ok(Settled::Lost(Status::Completed))
    );
    let never = TaskId::generate(&mut rng);
    assert_eq!(tasks.cancel(T0, never), Err(Missing::Unknown));
}

#[test]
fn the_ttl_fails_unfinished_work_through_the_same_path_and_expired_stays_distinct() {
    let (mut tasks, mut rng) = table();
    let task = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 10,
                delay_ms: 0,
            },
            1_000,
            keyed("k", "{}"),
            A,
        )
        .unwrap();
    assert_eq!(tasks.poll_timeout(), Some(T0.plus(1_000)));
    assert!(tasks.expire(T0.plus(999)).is_empty());
    assert_eq!(tasks.expire(T0.plus(1_000)), vec![task.id]);
    assert_eq!(tasks.get(task.id).unwrap().status, Status::Failed);
    // The runner that was still going is stopped by its next write.
    assert_eq!(
        tasks.step(T0.plus(1_001), task.id, 1, 3),
        Err(WriteRefused::Terminal(Status::Failed))
    );
    let gone_at = T0.plus(1_000 + RETAIN_MS);
    assert_eq!(tasks.poll_timeout(), Some(gone_at));
    tasks.expire(gone_at);
    assert_eq!(tasks.get(task.id), Err(Missing::Expired { at: gone_at }));
    assert_eq!(tasks.get(TaskId::generate(&mut rng)), Err(Missing::Unknown));
    assert_eq!(Missing::Expired { at: gone_at }.reason(), "expired");
    // The key went with its task.
    let again = tasks
        .create(
            gone_at,
            TaskId::generate(&mut rng),
            Work {
                steps: 1,
                delay_ms: 0,
            },
            1_000,
            keyed("k", "{}"),
            A,
        )
        .unwrap();
    assert!(again.fresh);
}

#[test]
fn naive_reads_no_key_so_the_re_issue_makes_a_second_task() {
    let naive = TaskRules::of(Policy::Naive);
    assert_eq!(naive.read_key(keyed("k", "{}")), None);
    assert!(
        TaskRules::of(Policy::Fenced)
            .read_key(keyed("k", "{}"))
            .is_some()
    );
    let (mut tasks, mut rng) = table();
    let first = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            naive.read_key(keyed("k", "{}")),
            A,
        )
        .unwrap();
    let again = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            Work {
                steps: 5,
                delay_ms: 0,
            },
            DEFAULT_TTL_MS,
            naive.read_key(keyed("k", "{}")),
            A,
        )
        .unwrap();
    assert!(first.fresh && again.fresh);
    assert_ne!(first.id, again.id);
    assert_eq!(tasks.len(), 2);
}

mod listening;
mod rolled_back;

/// The cap counts working tasks: a finished one keeps its result without blocking creation.
#[test]
fn finished_tasks_do_not_count_against_the_cap() {
    let mut tasks = TaskTable::with_capacity(2);
    let mut rng = SplitMix64::new(2);
    let work = Work {
        steps: 1,
        delay_ms: 0,
    };
    for _ in 0..10 {
        let made = tasks
            .create(T0, TaskId::generate(&mut rng), work, 60_000, None, A)
            .unwrap();
        let done = Some(Arc::from("{}"));
        tasks
            .settle(
                T0,
                made.id,
                Some(Holder {
                    epoch: made.epoch,
                    wrote: 0,
                }),
                Status::Completed,
                done,
            )
            .unwrap();
    }
    assert_eq!(tasks.len(), 10, "each finished task keeps its result");
    for _ in 0..2 {
        tasks
            .create(T0, TaskId::generate(&mut rng), work, 60_000, None, A)
            .unwrap();
    }
    assert_eq!(
        tasks.create(T0, TaskId::generate(&mut rng), work, 60_000, None, A),
        Err(CreateError::Full { max: 2 })
    );
}

/// A keyed task is minted at its key's home (a sharded store keeps the two together); the
/// rest of the id stays as drawn, so it stays unguessable, and an unkeyed one is left as drawn.
#[test]
fn a_keyed_task_lives_at_its_keys_home_and_keeps_its_random_bits() {
    let (mut tasks, mut rng) = table();
    let work = Work {
        steps: 1,
        delay_ms: 0,
    };
    let drawn = TaskId::generate(&mut rng);
    let made = tasks
        .create(T0, drawn, work, DEFAULT_TTL_MS, keyed("order-7", "{}"), A)
        .unwrap();
    assert_eq!(made.id.home(), key_home("order-7"));
    assert_eq!(made.id.at_home(drawn.home()), drawn);
    let plain = TaskId::generate(&mut rng);
    let made = tasks
        .create(T0, plain, work, DEFAULT_TTL_MS, None, A)
        .unwrap();
    assert_eq!(made.id, plain);
    // The hash is stable and spreads keys: 1,000 keys land on many homes.
    assert_eq!(key_home("order-7"), key_home("order-7"));
    let homes: std::collections::HashSet<u16> = (0..1_000)
        .map(|i| key_home(&format!("order-{i}")))
        .collect();
    assert!(homes.len() > 950, "{}", homes.len());
}

/// Past its TTL and its retention a task is deleted and reads as expired; a store told to
/// retain nothing deletes it at its TTL.
#[test]
fn the_retention_is_the_stores_to_set() {
    let mut tasks = TaskTable::new().with_retain(0);
    let mut rng = SplitMix64::new(3);
    let work = Work {
        steps: 1,
        delay_ms: 0,
    };
    let made = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            work,
            1_000,
            keyed("k", "{}"),
            A,
        )
        .unwrap();
    assert_eq!(tasks.poll_timeout(), Some(T0.plus(1_000)));
    tasks.expire(T0.plus(1_000));
    assert_eq!(
        tasks.get(made.id).err(),
        Some(Missing::Expired { at: T0.plus(1_000) })
    );
    // Its key went with it: the same key makes a new task.
    let again = tasks
        .create(
            T0.plus(1_001),
            TaskId::generate(&mut rng),
            work,
            1_000,
            keyed("k", "{}"),
            A,
        )
        .unwrap();
    assert!(again.fresh);
}

/// A task put back as an image held it forgets what was written since, its key with it; an
/// empty image is a store that restarted with nothing: the task and its key are unknown.
#[test]
fn an_image_puts_tasks_back_as_they_were() {
    let (mut tasks, mut rng) = table();
    let work = Work {
        steps: 5,
        delay_ms: 0,
    };
    let mut make = |tasks: &mut TaskTable| {
        tasks
            .create(
                T0,
                TaskId::generate(&mut rng),
                work,
                DEFAULT_TTL_MS,
                keyed("k", "{}"),
                A,
            )
            .unwrap()
    };
    let made = make(&mut tasks);
    tasks.step(T0, made.id, made.epoch, 1).unwrap();
    tasks.step(T0, made.id, made.epoch, 2).unwrap();
    let image = tasks.image(&[made.id]);
    tasks.step(T0, made.id, made.epoch, 3).unwrap();
    tasks.restore(&image);
    assert_eq!(tasks.get(made.id).unwrap().done, 2);
    // The runner's next write finds the store forgot step 3.
    assert_eq!(
        tasks.step(T0, made.id, made.epoch, 4),
        Err(WriteRefused::RolledBack { holds: 2, wrote: 3 })
    );
    // Nor does its end claim what the store forgot: the settle that completes all five is
    // refused as the step was, and the task stays working for the runner to end it, typed.
    let by = Holder {
        epoch: made.epoch,
        wrote: 5,
    };
    assert_eq!(
        tasks.settle(T0, made.id, Some(by), Status::Completed, None),
        Err(WriteRefused::RolledBack { holds: 2, wrote: 5 })
    );
    assert_eq!(tasks.get(made.id).unwrap().status, Status::Working);
    tasks.restore(&TaskImage::empty(&[made.id]));
    assert_eq!(tasks.get(made.id).err(), Some(Missing::Unknown));
    let again = make(&mut tasks);
    assert!(again.fresh, "the key went with the store");
}

/// The last step and the result in one write: both land, or neither, refused as the step is.
#[test]
fn a_last_step_and_its_result_land_together_or_not_at_all() {
    let (mut tasks, mut rng) = table();
    let work = Work {
        steps: 2,
        delay_ms: 0,
    };
    let made = tasks
        .create(
            T0,
            TaskId::generate(&mut rng),
            work,
            DEFAULT_TTL_MS,
            None,
            A,
        )
        .unwrap();
    let result: Option<Arc<str>> = Some("{}".into());
    // Step 1 is not held: the store forgot it, and nothing is written.
    assert_eq!(
        tasks.finish(T0, made.id, made.epoch, 2, result.clone()),
        Err(WriteRefused::RolledBack { holds: 0, wrote: 1 })
    );
    tasks.step(T0, made.id, made.epoch, 1).unwrap();
    assert_eq!(
        tasks.finish(T0, made.id, made.epoch + 1, 2, result.clone()),
        Err(WriteRefused::Stale { epoch: 2, held: 1 })
    );
    assert_eq!(tasks.get(made.id).unwrap().done, 1);
    tasks
        .finish(T0, made.id, made.epoch, 2, result.clone())
        .unwrap();
    let done = tasks.get(made.id).unwrap();
    assert_eq!(
        (done.status, done.done, done.outcome.clone()),
        (Status::Completed, 2, result.clone())
    );
    assert_eq!(
        tasks.finish(T0, made.id, made.epoch, 2, result),
        Err(WriteRefused::Terminal(Status::Completed))
    );
}
