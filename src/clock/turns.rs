//! Time for the lab's own task work, and whose turn it is.
//!
//! A task's runner, the 2026-07-28 client and the store's leases read the time from a [`Time`]:
//! real time (`serve`'s replicas, whose store may be a `redis-server` with a clock of its own),
//! or the lab's clock, so the dashboard's pause, step and speed hold for tasks as they do for
//! streams. On the lab's clock, what is due at one instant happens in one order, every run:
//! workers (runners, [`Role::Work`]) one at a time, in the order they were made, and only
//! then watchers (the client's polls, [`Role::Watch`]) — work done at an instant is seen at it.
//! So a paused lab stepped by hand, or by a scenario, tells the same story each time.

use super::LabClock;
use forkscope_core::LabTime;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a sleeper on the lab's clock does when it wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Changes what is kept (a runner's steps): one at a time. Where its workers are made
    /// ([`Time::worker`]); each sleeps as its own [`Role::Turn`].
    Work,
    /// One worker, by the order workers were made: at one instant, the older goes first.
    Turn(u64),
    /// Reads it (a client's poll): after every worker due by then.
    Watch,
}

/// Where a part of the wire reads the time and sleeps.
#[derive(Clone, Debug)]
pub enum Time {
    Real(tokio::time::Instant),
    Lab(Arc<LabClock>, Role),
}

/// Who sleeps on one clock.
#[derive(Debug, Default)]
pub(super) struct Turns {
    /// Workers alive ([`Worker`]): asleep, or awake and at work.
    workers: usize,
    /// Workers asleep, by when they wake, then by when they went to sleep.
    work: BTreeSet<(LabTime, u64)>,
    watch: BTreeMap<LabTime, usize>,
    /// The next worker's number, and the next number for a worker sleeping without one.
    next: u64,
}

impl Turns {
    /// Sleepers whose time is still ahead of `now`.
    pub(super) fn resting(&self, now: LabTime) -> usize {
        let later = LabTime::from_millis(now.as_millis().saturating_add(1));
        let work = self.work.range((later, 0)..).count();
        let watch: usize = self.watch.range(later..).map(|(_, n)| n).sum();
        work + watch
    }

    /// Whether the worker asleep as `ticket` may wake at `now`: its time has come, no other
    /// worker is awake, and no worker due before it (or at once, asleep longer) waits.
    fn work_may_wake(&self, ticket: (LabTime, u64), now: LabTime) -> bool {
        ticket.0 <= now && self.workers == self.work.len() && self.work.first() == Some(&ticket)
    }

    /// Whether a watcher due at `at` may wake at `now`: its time has come, and every worker
    /// is asleep until a time still ahead (or gone).
    fn watch_may_wake(&self, at: LabTime, now: LabTime) -> bool {
        let later = LabTime::from_millis(now.as_millis().saturating_add(1));
        at <= now
            && self.workers == self.work.len()
            && self.work.first().is_none_or(|first| first.0 >= later)
    }
}

/// A worker counted alive on its clock until dropped: while it is awake, no other worker's
/// turn comes, and no watcher's.
#[derive(Debug)]
pub struct Worker(Arc<LabClock>, u64);

impl Worker {
    /// The time this worker sleeps on: its turn among those due with it is its number, given
    /// in the order workers were made (the order the requests that made them came in).
    pub fn time(&self) -> Time {
        Time::Lab(self.0.clone(), Role::Turn(self.1))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.turns().workers -= 1;
        self.0.signal_turns();
    }
}

/// A sleeper's place on its clock, for as long as it sleeps (an aborted sleeper leaves it).
struct Asleep<'a> {
    clock: &'a LabClock,
    place: Place,
}

#[derive(Clone, Copy)]
enum Place {
    Work((LabTime, u64)),
    Watch(LabTime),
}

impl<'a> Asleep<'a> {
    fn until(clock: &'a LabClock, at: LabTime, role: Role) -> Asleep<'a> {
        let place = {
            let mut turns = clock.turns();
            match role {
                Role::Work | Role::Turn(_) => {
                    let number = match role {
                        Role::Turn(number) => number,
                        _ => {
                            turns.next += 1;
                            turns.next
                        }
                    };
                    let ticket = (at, number);
                    turns.work.insert(ticket);
                    Place::Work(ticket)
                }
                Role::Watch => {
                    *turns.watch.entry(at).or_default() += 1;
                    Place::Watch(at)
                }
            }
        };
        clock.signal_turns();
        Asleep { clock, place }
    }

    fn may_wake(&self) -> bool {
        let now = self.clock.now();
        let turns = self.clock.turns();
        match self.place {
            Place::Work(ticket) => turns.work_may_wake(ticket, now),
            Place::Watch(at) => turns.watch_may_wake(at, now),
        }
    }

    fn at(&self) -> LabTime {
        match self.place {
            Place::Work((at, _)) | Place::Watch(at) => at,
        }
    }
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        {
            let mut turns = self.clock.turns();
            match self.place {
                Place::Work(ticket) => {
                    turns.work.remove(&ticket);
                }
                Place::Watch(at) => {
                    if let Some(n) = turns.watch.get_mut(&at) {
                        *n -= 1;
                        if *n == 0 {
                            turns.watch.remove(&at);
                        }
                    }
                }
            }
        }
        self.clock.signal_turns();
    }
}

impl Time {
    /// Real time, counted from now.
    pub fn real() -> Time {
        Time::Real(tokio::time::Instant::now())
    }

    pub fn now(&self) -> LabTime {
        match self {
            Time::Real(origin) => LabTime::from_millis(origin.elapsed().as_millis() as u64),
            Time::Lab(clock, _) => clock.now(),
        }
    }

    /// Counts a worker alive on the lab's clock until the guard drops (taken before the
    /// worker is spawned, so a step is not called taken before it has begun); `None` on real
    /// time.
    pub fn worker(&self) -> Option<Worker> {
        match self {
            Time::Real(_) => None,
            Time::Lab(clock, _) => {
                let number = {
                    let mut turns = clock.turns();
                    turns.workers += 1;
                    turns.next += 1;
                    turns.next
                };
                Some(Worker(clock.clone(), number))
            }
        }
    }

    /// Resolves once it is `at` or later: on the lab's clock, never while it is paused, at
    /// once when a step moves it past `at`, and in its turn among those due with it.
    pub async fn sleep_until(&self, at: LabTime) {
        match self {
            // A time already come is not slept on: tokio's timer rounds even a zero sleep up
            // to its next millisecond tick.
            Time::Real(_) if self.now() >= at => {}
            Time::Real(origin) => {
                let when = *origin + std::time::Duration::from_millis(at.as_millis());
                tokio::time::sleep_until(when).await;
            }
            Time::Lab(clock, role) => Asleep::until(clock, at, *role).wait().await,
        }
    }

    /// [`Time::sleep_until`] `ms` from now.
    pub async fn sleep(&self, ms: u64) {
        if ms > 0 {
            let at = self.now().plus(ms);
            self.sleep_until(at).await;
        }
    }
}

impl Asleep<'_> {
    async fn wait(self) {
        loop {
            // Watching before reading: a change between the two is not missed.
            let mut changed = self.clock.generation.subscribe();
            if self.may_wake() {
                return;
            }
            match self.clock.real_ms_until(self.at()) {
                // Due, but not its turn: the next change may make it so.
                Some(0) | None => {
                    let _ = changed.changed().await;
                }
                Some(ms) => {
                    let nap = std::time::Duration::from_millis(ms);
                    tokio::select! {
                        () = tokio::time::sleep(nap) => {}
                        _ = changed.changed() => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A guard against a sleeper that never wakes, not a measurement.
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

    /// A sleeper on the lab's clock wakes when a step moves a paused clock past its time,
    /// and not before.
    #[tokio::test]
    async fn a_sleep_on_a_paused_lab_clock_ends_when_a_step_passes_it() {
        let clock = Arc::new(LabClock::new());
        clock.set_paused(true);
        let time = Time::Lab(clock.clone(), Role::Watch);
        let at = clock.now().plus(500);
        let sleeper = tokio::spawn({
            let time = time.clone();
            async move { time.sleep_until(at).await }
        });
        clock.advance(300);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke 200 ms of lab time early");
        clock.advance(300);
        tokio::time::timeout(LIMIT, sleeper)
            .await
            .expect("the step past its time woke the sleeper")
            .expect("the sleeper ran");
        assert!(time.now() >= at);
    }

    /// Three workers and a watcher due at one instant: the workers one at a time, in the
    /// order they were made, the watcher after them all, however the runtime schedules.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_one_instant_workers_go_one_at_a_time_in_order_then_watchers() {
        for _ in 0..20 {
            let clock = Arc::new(LabClock::new());
            clock.set_paused(true);
            let at = clock.now().plus(100);
            let order = Arc::new(Mutex::new(Vec::new()));
            let mut sleepers = Vec::new();
            let watch = Time::Lab(clock.clone(), Role::Watch);
            sleepers.push(tokio::spawn({
                let order = order.clone();
                async move {
                    watch.sleep_until(at).await;
                    order.lock().unwrap().push("watch");
                }
            }));
            let work = Time::Lab(clock.clone(), Role::Work);
            let workers: Vec<Worker> = (0..3).filter_map(|_| work.worker()).collect();
            // They go to sleep last made first: their turns still follow the order made.
            for (worker, name) in workers.into_iter().zip(["first", "second", "third"]).rev() {
                let order = order.clone();
                sleepers.push(tokio::spawn(async move {
                    worker.time().sleep_until(at).await;
                    // At work a while: no one else's turn comes meanwhile.
                    tokio::task::yield_now().await;
                    order.lock().unwrap().push(name);
                    drop(worker);
                }));
                while clock.resting() < sleepers.len() {
                    tokio::task::yield_now().await;
                }
            }
            clock.advance(100);
            for sleeper in sleepers {
                tokio::time::timeout(LIMIT, sleeper)
                    .await
                    .expect("every sleeper's turn came")
                    .expect("it ran");
            }
            assert_eq!(
                *order.lock().unwrap(),
                ["first", "second", "third", "watch"]
            );
        }
    }
}
