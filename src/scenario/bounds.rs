//! The bounds a scenario is held to before anything plays, and the running totals that check
//! them step by step.

use forkscope_core::Policy;

/// A bound a scenario went past, found before anything plays. The bounds exist because a
/// scenario is input: without them a file of a few bytes could keep `forkscope run` busy for
/// ever (lab time near the end of `u64`, where every deadline saturates to now and the driver
/// never goes idle) or for a day (a billion repeats).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverBound {
    #[error(
        "step {step}: repeat = {repeat} is more than {MAX_REPEAT}, the most one step may repeat"
    )]
    Repeat { step: usize, repeat: u32 },
    #[error(
        "step {step}: the advances{} add up to more than a week of lab time \
         ({MAX_LAB_TIME_MS} ms), the most a scenario may move the clock",
        under(*only)
    )]
    LabTime { step: usize, only: Option<Policy> },
    #[error(
        "step {step}: the steps played{}, repeats counted, add up to more than \
         {MAX_PLAYED_STEPS}, the most a scenario may play",
        under(*only)
    )]
    PlayedSteps { step: usize, only: Option<Policy> },
    #[error(
        "step {step}: timeout_ms = {timeout_ms} is more than {MAX_WAIT_TIMEOUT_MS} (ten minutes), \
         the longest a wait may last"
    )]
    WaitTimeout { step: usize, timeout_ms: u64 },
}

/// ` under naive` for a step that runs under one policy only (its totals are that policy's).
fn under(only: Option<Policy>) -> String {
    only.map(|p| format!(" under {p}")).unwrap_or_default()
}

/// The largest scenario file read: the shipped ones are a few KiB, a 50,000-step file about
/// 1 MiB. Anything bigger (or a device that never ends) is refused after reading this much.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The most one step may repeat. An advance settles the lab between repeats (tens of real
/// milliseconds each), so a thousand repeats already take about a minute.
pub const MAX_REPEAT: u32 = 1_000;

/// Steps one run may play, each repeat counted: twice the steps the largest file can hold
/// without repeats, so only repeats multiplied over many steps reach it.
pub const MAX_PLAYED_STEPS: u64 = 100_000;

/// Lab time a scenario may move in all, under each policy: a week, far past every timer the
/// lab has (the longest default, a session's idle limit, is ten minutes) and far from where
/// lab time saturates.
pub const MAX_LAB_TIME_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The longest a wait may be given, in real time: a wait that long has failed anyway, and
/// this keeps its deadline far from overflowing the clock it is measured on.
pub const MAX_WAIT_TIMEOUT_MS: u64 = 10 * 60 * 1000;

/// Default guard on a wait, in real time: a stuck scenario fails instead of hanging.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 10_000;

/// What one step asks of the bounds: how often it runs, how far it moves lab time each time,
/// how long it may wait, and under which policy (the step reader says; the bounds judge).
#[derive(Clone, Copy, Debug)]
pub(super) struct Cost {
    pub repeat: u32,
    pub advance_ms: u64,
    pub wait_timeout_ms: Option<u64>,
    pub only: Option<Policy>,
}

/// What the steps so far add up to under each policy, checked against the bounds as each step
/// is read.
#[derive(Default)]
pub(super) struct Totals {
    /// Under naive and under fenced: lab time moved, and steps played with their repeats.
    lab_ms: [u64; 2],
    played: [u64; 2],
}

impl Totals {
    /// Counts step number `n`, or says which bound it crosses.
    pub(super) fn add(&mut self, step: Cost, n: usize) -> Result<(), OverBound> {
        let Cost {
            repeat, advance_ms, ..
        } = step;
        if let Some(timeout_ms) = step.wait_timeout_ms.filter(|t| *t > MAX_WAIT_TIMEOUT_MS) {
            return Err(OverBound::WaitTimeout {
                step: n,
                timeout_ms,
            });
        }
        if repeat > MAX_REPEAT {
            return Err(OverBound::Repeat { step: n, repeat });
        }
        for (i, policy) in [Policy::Naive, Policy::Fenced].into_iter().enumerate() {
            if step.only.is_some_and(|only| only != policy) {
                continue;
            }
            // Checked: two advances of 2⁶³ ms must not wrap into a small total.
            self.lab_ms[i] = advance_ms
                .checked_mul(u64::from(repeat))
                .and_then(|ms| ms.checked_add(self.lab_ms[i]))
                .filter(|total| *total <= MAX_LAB_TIME_MS)
                .ok_or(OverBound::LabTime {
                    step: n,
                    only: step.only,
                })?;
            self.played[i] += u64::from(repeat);
            if self.played[i] > MAX_PLAYED_STEPS {
                return Err(OverBound::PlayedSteps {
                    step: n,
                    only: step.only,
                });
            }
        }
        Ok(())
    }
}
