//! The lab clock: real time × speed, pausable, steppable. Everything in the lab — the server's
//! driver, the client, the views — reads time from here and hands it to the core as a
//! [`LabTime`].

mod turns;

pub use turns::{Role, Time, Worker};

use forkscope_core::LabTime;
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::{Notify, watch};
use turns::Turns;

#[derive(Debug)]
pub struct LabClock {
    state: Mutex<State>,
    /// Signalled on every change of speed, pause or time: a task sleeping until a lab deadline
    /// must recompute how long that is in real time.
    changes: Notify,
    /// The same, for any number of sleepers ([`Time::sleep_until`]): counts the changes.
    generation: watch::Sender<u64>,
    /// Who sleeps on this clock, and whose turn it is when several are due at once.
    turns: Mutex<Turns>,
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
            turns: Mutex::default(),
        }
    }

    /// Sleepers ([`Time::sleep_until`]) whose time is still ahead: each has done all it had
    /// to do by now.
    pub fn resting(&self) -> usize {
        self.turns().resting(self.now())
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A sleeper came or went, or a worker ended: those waiting for their turn look again.
    fn signal_turns(&self) {
        self.generation.send_modify(|n| *n = n.wrapping_add(1));
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

#[cfg(test)]
mod tests {
    use super::*;

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
