//! The 2026-07-28 model as the search's third [`Model`]: its fingerprint (the canonical form it
//! is deduplicated on), and a schedule told step by step.

use super::{Params, RequestLab, RequestStep};
use crate::model::reached::Reached;
use crate::model::search::{self, Judged, Model};
use crate::model::{Limits, Progress};
use crate::policy::Policy;
use serde::Serialize;
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::time::Duration;

/// Explores every schedule of one call under 2026-07-28 up to `limits`, breadth-first, on
/// `workers` threads; stops at the first anomaly (or `params.target`'s), or at a limit
/// (`elapsed` is the caller's clock).
pub fn explore(
    policy: Policy,
    params: Params,
    limits: Limits,
    workers: NonZeroUsize,
    elapsed: &mut dyn FnMut() -> Duration,
    on_progress: &mut dyn FnMut(&Progress),
) -> super::Exploration {
    let mut root = RequestLab::new(policy, 1);
    root.keep_verdict_only();
    search::explore(root, params, limits, workers, elapsed, on_progress)
}

impl Model for RequestLab {
    type Step = RequestStep;
    type Rules = Params;
    type Marks = ();

    fn alphabet(_: &Params) -> Vec<RequestStep> {
        RequestStep::alphabet()
    }

    fn enabled(&self, step: RequestStep, params: &Params) -> bool {
        RequestLab::enabled(self, step, params)
    }

    fn take(&mut self, step: RequestStep, params: &Params) {
        RequestLab::take(self, step, params);
    }

    fn fingerprint(&self) -> u128 {
        RequestLab::fingerprint(self)
    }

    fn judge(&self, params: &Params) -> Judged {
        if let Some(anomaly) = self.anomaly(params.target) {
            return Judged::Broken {
                anomaly: Box::new(anomaly.clone()),
                ends_run: false,
            };
        }
        // Exactly once, or told — and live: where the client knows its task and nothing is in
        // flight, the run may end after the lab has run on, and what is still owed is judged.
        if self.at_rest() {
            let mut ended = self.clone();
            ended.end_run();
            if let Some(anomaly) = ended.anomaly(params.target) {
                return Judged::Broken {
                    anomaly: Box::new(anomaly.clone()),
                    ends_run: true,
                };
            }
        }
        Judged::Holds
    }

    fn policy(&self) -> Policy {
        self.policy
    }

    fn marks(&self) {}

    fn reached(_: &(), _: &()) -> Reached {
        Reached::default()
    }
}

impl RequestLab {
    /// The canonical form's 128-bit fingerprint: tasks by the order they were made (their ids
    /// are chance's), each as stored — status, steps done, epoch, how long its lease has left
    /// (time relative to now, never absolute) — with what the client last read of it, the
    /// runners (epoch, steps, when each next writes), the client's knowledge and the bounded
    /// counters. The checker's own state is left out: up to
    /// the first violation (where the search stops) it follows from these — which run applied
    /// which steps from the runners' counts, which tasks were named from what the client knows.
    pub fn fingerprint(&self) -> u128 {
        let words = self.canonical();
        let half = |salt: u64| {
            let mut h = std::hash::DefaultHasher::new();
            salt.hash(&mut h);
            words.hash(&mut h);
            h.finish()
        };
        u128::from(half(1)) << 64 | u128::from(half(2))
    }

    fn canonical(&self) -> Vec<u64> {
        let mut words = vec![
            self.tasks.len() as u64,
            self.in_flight.map_or(0, |t| u64::from(t) + 1),
            self.intent.known().map_or(0, |&t| u64::from(t) + 1),
            u64::from(self.crashes),
            u64::from(self.cancelled),
            u64::from(self.ttl_passed),
        ];
        words.extend(self.intent.canonical());
        for &id in &self.tasks {
            match self.table.get(id) {
                Ok(task) => words.extend([
                    task.status as u64 + 1,
                    task.done,
                    task.epoch,
                    task.lease_until.since(self.now),
                ]),
                Err(_) => words.push(0),
            }
        }
        for r in &self.runners {
            let next = r.runner.poll_timeout();
            words.extend([
                u64::from(r.task),
                r.runner.epoch(),
                r.runner.done(),
                next.map_or(0, |at| at.since(self.now) + 1),
            ]);
        }
        words
    }

    /// What the lab showed after a step, for a test.
    pub fn tasks_made(&self) -> usize {
        self.tasks.len()
    }
}

/// One step of a schedule, told: what it was, what it made happen, what the checker named.
#[derive(Clone, Debug, Serialize)]
pub struct TracedStep {
    /// `None` for the run's end, told after the last step when the run ended there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<RequestStep>,
    pub said: String,
    pub happened: Vec<String>,
    pub anomalies: Vec<String>,
}

/// Replays `steps` from the start, telling each: the narration of a counterexample. One found
/// by ending the run (nothing found by the steps alone, and the client at rest) is told to its
/// end: the lab running on, the client polling, the run ending.
pub fn trace(policy: Policy, params: &Params, steps: &[RequestStep]) -> Vec<TracedStep> {
    let mut lab = RequestLab::new(policy, 4096);
    let mut told = Vec::with_capacity(steps.len() + 1);
    for &step in steps {
        let before = lab.history.total();
        lab.take(step, params);
        let fresh = (lab.history.total() - before) as usize;
        let recent = lab.history.recent();
        let entries = recent.iter().skip(recent.len().saturating_sub(fresh));
        let mut happened = Vec::new();
        let mut anomalies = Vec::new();
        for entry in entries {
            happened.extend(entry.record.describe());
            anomalies.extend(entry.caused.anomalies().iter().map(ToString::to_string));
        }
        told.push(TracedStep {
            step: Some(step),
            said: step.to_string(),
            happened,
            anomalies,
        });
    }
    if lab.anomaly(params.target).is_none() && lab.at_rest() {
        let before = lab.history.total();
        lab.end_run();
        let fresh = (lab.history.total() - before) as usize;
        let recent = lab.history.recent();
        let entries = recent.iter().skip(recent.len().saturating_sub(fresh));
        let (mut happened, mut anomalies) = (Vec::new(), Vec::new());
        // The decisions only: every poll of a long run would bury them.
        for entry in entries {
            if entry.record.is_decision() {
                happened.extend(entry.record.describe());
            }
            anomalies.extend(entry.caused.anomalies().iter().map(ToString::to_string));
        }
        told.push(TracedStep {
            step: None,
            said: "the lab runs on, the client polling at its interval, and the run ends"
                .to_owned(),
            happened,
            anomalies,
        });
    }
    told
}
