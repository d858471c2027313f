//! A store rolled back under a task ends it the same way whoever finds it: the read whose
//! cursor it forgot, or the runner whose write it refuses.

use super::*;

/// A task of `steps`, run by A to `done` steps; then the store forgets `forgotten` of them.
fn rolled_back(tasks: &mut TaskTable, rng: &mut SplitMix64, done: u64, forgotten: u64) -> TaskId {
    let work = Work {
        steps: 8,
        delay_ms: 0,
    };
    let made = tasks
        .create(T0, TaskId::generate(rng), work, DEFAULT_TTL_MS, None, A)
        .unwrap();
    for step in 1..=done - forgotten {
        tasks.step(T0, made.id, made.epoch, step).unwrap();
    }
    let image = tasks.image(&[made.id]);
    for step in done - forgotten + 1..=done {
        tasks.step(T0, made.id, made.epoch, step).unwrap();
    }
    tasks.restore(&image);
    made.id
}

/// The reader was told 6 steps; the store holds 2, working, its lease run out. The read is
/// refused and ends the task in the same operation: every later read — a stock one with no
/// cursor, whose lease check would have adopted it — reads it failed, rolled back, and nothing
/// adopts it; the runner, were it alive, has its next write refused.
#[test]
fn a_read_that_finds_its_cursor_forgotten_ends_the_task() {
    let (mut tasks, mut rng) = table();
    let id = rolled_back(&mut tasks, &mut rng, 6, 4);
    let late = T0.plus(10 * LEASE_MS);
    let seen = Seen {
        done: 6,
        ended: false,
    };
    assert_eq!(
        tasks.read(late, id, Some(B), Some(seen)),
        Err(Missing::Forgotten { holds: 2, seen })
    );
    let (read, adopted) = tasks.read(late, id, Some(B), None).unwrap();
    assert!(!adopted, "an ended task is never adopted");
    assert_eq!(
        (read.status, read.ended_by, read.epoch, read.done),
        (
            Status::Failed,
            Some(EndedBy::RolledBack {
                holds: 2,
                applied: 6
            }),
            1,
            2
        )
    );
    // The cursor's reader, asking again, reads the end too: it is no longer forgotten.
    assert_eq!(tasks.read(late, id, Some(B), Some(seen)).unwrap().0, read);
    assert_eq!(
        tasks.step(late, id, 1, 3),
        Err(WriteRefused::Terminal(Status::Failed))
    );
}

/// A read told the end finds the task working at as many steps: its end was forgotten.
#[test]
fn a_forgotten_end_is_a_forgotten_cursor_too() {
    let (mut tasks, mut rng) = table();
    let id = rolled_back(&mut tasks, &mut rng, 3, 0);
    let seen = Seen {
        done: 3,
        ended: true,
    };
    assert!(tasks.read(T0, id, None, Some(seen)).is_err());
    assert_eq!(
        tasks.get(id).unwrap().ended_by,
        Some(EndedBy::RolledBack {
            holds: 3,
            applied: 3
        })
    );
}

/// The runner's refused write ends the task with the same end a read leaves; once ended,
/// whichever came second loses to it.
#[test]
fn the_runners_seal_is_the_same_end() {
    let (mut tasks, mut rng) = table();
    let id = rolled_back(&mut tasks, &mut rng, 5, 2);
    assert_eq!(
        tasks.step(T0, id, 1, 6),
        Err(WriteRefused::RolledBack { holds: 3, wrote: 5 })
    );
    // Its end claims no more than the store holds, under its epoch.
    let stale = Holder { epoch: 2, wrote: 3 };
    assert_eq!(
        tasks.seal_rolled_back(T0, id, stale, 5),
        Err(WriteRefused::Stale { epoch: 2, held: 1 })
    );
    let by = Holder { epoch: 1, wrote: 3 };
    assert_eq!(
        tasks.seal_rolled_back(T0, id, by, 5),
        Ok(Settled::Won(Status::Failed))
    );
    let sealed = tasks.get(id).unwrap().clone();
    assert_eq!(
        (sealed.status, sealed.outcome.clone(), sealed.ended_by),
        (
            Status::Failed,
            None,
            Some(EndedBy::RolledBack {
                holds: 3,
                applied: 5
            })
        )
    );
    // A read with a cursor past it now reads that end, and a second seal loses.
    let seen = Seen {
        done: 5,
        ended: false,
    };
    assert_eq!(tasks.read(T0, id, Some(B), Some(seen)).unwrap().0, sealed);
    assert_eq!(
        tasks.seal_rolled_back(T0, id, by, 5),
        Ok(Settled::Lost(Status::Failed))
    );
}
