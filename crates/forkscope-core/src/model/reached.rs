//! What the explored steps made happen, tallied: evidence the search reached the decisions it
//! is meant to test. Each step's part is a bit set (no names, no allocation: the search takes
//! millions of steps); the names are written once, when the search is done.

use crate::client::RequestPhase;
use crate::resume::RejectReason;
use crate::sim::Sim;
use crate::time::LabTime;
use std::collections::BTreeMap;

/// What one step made happen, beyond the rejections.
const EVENTS: [&str; 11] = [
    "resume accepted",
    "new stream, flagged as new",
    "new stream, not flagged",
    "grace window started",
    "stream fenced",
    "late emit refused",
    "replay skipped by the client",
    "side effect applied",
    "client started a new session",
    "tool call result applied",
    "tool call given up (the client was told)",
];

/// What one step made happen: bit `i` for [`EVENTS`]`[i]`, bit `EVENTS.len() + j` for a
/// resume rejected for [`RejectReason::ALL`]`[j]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached(u32);

const _: () = assert!(EVENTS.len() + RejectReason::ALL.len() <= 32);

/// What a state's counters say, so far: a step's part is the difference between the marks
/// before and after it (read before the step, so the state itself can be moved on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marks {
    /// [`EVENTS`]' counts, but for the renewal's, which is compared as is.
    counts: [u64; EVENTS.len()],
    renewed: Option<(LabTime, &'static str)>,
    rejected: [u64; RejectReason::ALL.len()],
}

/// The [`EVENTS`] slot that holds no count: the client's renewal is compared as it is.
const RENEWED: usize = 8;

impl Marks {
    pub(super) fn of(sim: &Sim) -> Self {
        let c = sim.history().checker().counters();
        let ended = |phase: RequestPhase| {
            sim.client()
                .requests()
                .iter()
                .filter(|r| r.phase == phase)
                .count() as u64
        };
        let mut rejected = [0; RejectReason::ALL.len()];
        for (reason, n) in &c.resumes_rejected {
            if let Some(j) = RejectReason::ALL.iter().position(|r| r == reason) {
                rejected[j] = *n;
            }
        }
        Marks {
            counts: [
                c.resumes_accepted,
                c.new_streams_flagged,
                c.new_streams_silent,
                c.orphaned,
                c.fences,
                c.late_emits_refused,
                c.replays_skipped,
                c.applied,
                0,
                ended(RequestPhase::Done),
                ended(RequestPhase::Failed),
            ],
            renewed: sim.client().renewed(),
            rejected,
        }
    }
}

impl Reached {
    /// What the step from `before` to `after` made happen.
    pub(super) fn between(before: &Marks, after: &Marks) -> Self {
        let mut bits = 0u32;
        for (i, (b, a)) in before.counts.iter().zip(after.counts).enumerate() {
            bits |= u32::from(a > *b) << i;
        }
        bits |= u32::from(after.renewed != before.renewed) << RENEWED;
        for (j, (b, a)) in before.rejected.iter().zip(after.rejected).enumerate() {
            bits |= u32::from(a > *b) << (EVENTS.len() + j);
        }
        Reached(bits)
    }
}

/// How many steps made each thing happen.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally([u64; 32]);

impl Tally {
    pub(super) fn add(&mut self, reached: Reached) {
        let mut bits = reached.0;
        while bits != 0 {
            self.0[bits.trailing_zeros() as usize] += 1;
            bits &= bits - 1;
        }
    }

    /// By name, only what happened at least once.
    pub(super) fn named(&self) -> BTreeMap<String, u64> {
        let names = EVENTS
            .iter()
            .map(|e| (*e).to_owned())
            .chain(RejectReason::ALL.iter().map(|r| format!("rejected: {r}")));
        names.zip(self.0).filter(|(_, n)| *n > 0).collect()
    }
}
