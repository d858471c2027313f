//! The lab clock: real time × speed, pausable, steppable. Everything in the lab — the server's
//! driver, the client, the views — reads time from here and hands it to the core as a
//! [`LabTime`].

use forkscope_core::LabTime;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{Notify, watch};

#[derive(Debug)]
pub struct LabClock {
    state: Mutex<State>,
    /// Signalled on every change of speed, pause or time: a task sleeping until a lab deadline
    /// must recompute how long that is in real time.
    changes: Notify,
    /// The same, for any number of sleepers ([`Time::sleep_until`]): counts the changes.
    generation: watch::Sender<u64>,
    /// When each sleeper on this clock wakes: those still ahead of now are at rest, so a
    /// test stepping a paused clock can wait until a step has been fully taken.
    sleepers: Mutex<std::collections::BTreeMap<LabTime, usize>>,
}

#[derive(Debug, Clone, Copy)]
struct State {
    anchor_real: Instant,
    anchor_lab_ms: f64,
    speed: f64,
    paused: bool,
}

/// Speeds the dashboard steps through.
pub const SPEEDS: [f64; 7] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0];

impl Default for LabClock {
    fn default() -> Self {
        Self::new()
    }
}

impl LabClock {
    pub fn new() -> Self {
        LabClock {
            state: Mutex::new(State {
                anchor_real: Instant::now(),
                anchor_lab_ms: 0.0,
                speed: 1.0,
                paused: false,
            }),
            changes: Notify::new(),
            generation: watch::Sender::new(0),
            sleepers: Mutex::default(),
        }
    }

    /// Sleepers ([`Time::sleep_until`]) whose time is still ahead: each has done all it had
    /// to do by now.
    pub fn resting(&self) -> usize {
        let now = self.now();
        self.sleepers_lock()
            .range(LabTime::from_millis(now.as_millis().saturating_add(1))..)
            .map(|(_, n)| n)
            .sum()
    }

    fn sleepers_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<LabTime, usize>> {
        self.sleepers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn signal(&self) {
        self.changes.notify_one();
        self.generation.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Resolves when the clock next changes speed, pause or time (one waiter: the driver).
    pub async fn changed(&self) {
        self.changes.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lab_ms(state: &State) -> f64 {
        if state.paused {
            state.anchor_lab_ms
        } else {
            state.anchor_lab_ms + state.anchor_real.elapsed().as_secs_f64() * 1000.0 * state.speed
        }
    }

    pub fn now(&self) -> LabTime {
        LabTime::from_millis(Self::lab_ms(&self.lock()) as u64)
    }

    /// Re-anchors so the change applies from now on, without a jump.
    fn reanchor(state: &mut State) {
        state.anchor_lab_ms = Self::lab_ms(state);
        state.anchor_real = Instant::now();
    }

    pub fn set_speed(&self, speed: f64) {
        let mut state = self.lock();
        Self::reanchor(&mut state);
        state.speed = speed.clamp(SPEEDS[0], SPEEDS[SPEEDS.len() - 1]);
        drop(state);
        self.signal();
    }

    pub fn speed(&self) -> f64 {
        self.lock().speed
    }

    /// The next speed up (`faster`) or down in [`SPEEDS`].
    pub fn step_speed(&self, faster: bool) -> f64 {
        let current = self.speed();
        let next = if faster {
            SPEEDS.iter().copied().find(|s| *s > current + 1e-9)
        } else {
            SPEEDS.iter().rev().copied().find(|s| *s < current - 1e-9)
        };
        let next = next.unwrap_or(current);
        self.set_speed(next);
        next
    }

    pub fn set_paused(&self, paused: bool) {
        let mut state = self.lock();
        Self::reanchor(&mut state);
        state.paused = paused;
        drop(state);
        self.signal();
    }

    pub fn paused(&self) -> bool {
        self.lock().paused
    }

    /// Moves lab time forward by `ms` at once (single step while paused, or scripted time).
    pub fn advance(&self, ms: u64) {
        let mut state = self.lock();
        Self::reanchor(&mut state);
        state.anchor_lab_ms += ms as f64;
        drop(state);
        self.signal();
    }

    /// Real milliseconds until lab time reaches `at`; `None` while paused (it never will).
    pub fn real_ms_until(&self, at: LabTime) -> Option<u64> {
        let state = self.lock();
        if state.paused {
            return None;
        }
        let lab = Self::lab_ms(&state);
        let ahead = (at.as_millis() as f64 - lab).max(0.0);
        Some((ahead / state.speed).ceil() as u64)
    }
}

/// Where a part of the wire that runs work over time (a task's runner, the 2026-07-28 client,
/// the store's leases) reads the time and sleeps: real time from when it started (`serve`'s
/// replicas, whose store may be a `redis-server` with a clock of its own), or the lab's clock,
/// so the dashboard's pause, step and speed hold for tasks as they do for streams.
#[derive(Clone, Debug)]
pub enum Time {
    Real(tokio::time::Instant),
    Lab(Arc<LabClock>),
}

impl Time {
    /// Real time, counted from now.
    pub fn real() -> Time {
        Time::Real(tokio::time::Instant::now())
    }

    pub fn now(&self) -> LabTime {
        match self {
            Time::Real(origin) => LabTime::from_millis(origin.elapsed().as_millis() as u64),
            Time::Lab(clock) => clock.now(),
        }
    }

    /// Resolves once it is `at` or later: on the lab's clock, never while it is paused, and at
    /// once when a step moves it past `at`.
    pub async fn sleep_until(&self, at: LabTime) {
        match self {
            // A time already come is not slept on: tokio's timer rounds even a zero sleep up
            // to its next millisecond tick.
            Time::Real(_) if self.now() >= at => {}
            Time::Real(origin) => {
                let when = *origin + std::time::Duration::from_millis(at.as_millis());
                tokio::time::sleep_until(when).await;
            }
            Time::Lab(clock) => {
                let _asleep = Asleep::until(clock, at);
                Self::sleep_on_lab(clock, at).await;
            }
        }
    }

    async fn sleep_on_lab(clock: &LabClock, at: LabTime) {
        loop {
            // Watching before reading: a change between the two is not missed.
            let mut changed = clock.generation.subscribe();
            if clock.now() >= at {
                return;
            }
            match clock.real_ms_until(at) {
                Some(0) => return,
                Some(ms) => {
                    let nap = std::time::Duration::from_millis(ms);
                    tokio::select! {
                        () = tokio::time::sleep(nap) => {}
                        _ = changed.changed() => {}
                    }
                }
                None => {
                    let _ = changed.changed().await;
                }
            }
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

/// A sleeper's entry in its clock's [`LabClock::resting`] count, for as long as it sleeps
/// (an aborted sleeper leaves it too).
struct Asleep<'a> {
    clock: &'a LabClock,
    at: LabTime,
}

impl<'a> Asleep<'a> {
    fn until(clock: &'a LabClock, at: LabTime) -> Asleep<'a> {
        *clock.sleepers_lock().entry(at).or_default() += 1;
        Asleep { clock, at }
    }
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        let mut sleepers = self.clock.sleepers_lock();
        if let Some(n) = sleepers.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                sleepers.remove(&self.at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sleeper on the lab's clock wakes when a step moves a paused clock past its time,
    /// and not before.
    #[tokio::test]
    async fn a_sleep_on_a_paused_lab_clock_ends_when_a_step_passes_it() {
        let clock = Arc::new(LabClock::new());
        clock.set_paused(true);
        let time = Time::Lab(clock.clone());
        let at = clock.now().plus(500);
        let sleeper = tokio::spawn({
            let time = time.clone();
            async move { time.sleep_until(at).await }
        });
        clock.advance(300);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke 200 ms of lab time early");
        clock.advance(300);
        // A guard against a sleeper that never wakes, not a measurement.
        tokio::time::timeout(std::time::Duration::from_secs(10), sleeper)
            .await
            .expect("the step past its time woke the sleeper")
            .expect("the sleeper ran");
        assert!(time.now() >= at);
    }

    #[test]
    fn pausing_freezes_and_advancing_steps() {
        let clock = LabClock::new();
        clock.set_paused(true);
        let frozen = clock.now();
        assert_eq!(clock.now(), frozen);
        clock.advance(250);
        assert_eq!(clock.now(), frozen.plus(250));
        assert_eq!(clock.real_ms_until(frozen.plus(1_000)), None);
    }

    #[test]
    fn speed_steps_through_the_table_and_stops_at_the_ends() {
        let clock = LabClock::new();
        assert_eq!(clock.step_speed(true), 2.0);
        assert_eq!(clock.step_speed(true), 4.0);
        assert_eq!(clock.step_speed(true), 10.0);
        assert_eq!(clock.step_speed(true), 10.0);
        clock.set_speed(0.1);
        assert_eq!(clock.step_speed(false), 0.1);
    }
}
