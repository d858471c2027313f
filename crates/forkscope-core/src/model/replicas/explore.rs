//! The replica lab as the search's second [`Model`]: its fingerprint (the canonical form it is
//! deduplicated on), and a schedule told step by step.

use super::*;

/// Explores every schedule of the replica lab up to `limits`, breadth-first, on `workers`
/// threads; stops at the first anomaly, or at a limit (`elapsed` is the caller's clock).
pub fn explore(
    policy: Policy,
    params: Params,
    limits: Limits,
    workers: NonZeroUsize,
    elapsed: &mut dyn FnMut() -> Duration,
    on_progress: &mut dyn FnMut(&Progress),
) -> Exploration {
    let mut root = ReplicaLab::new(policy, 1);
    root.keep_verdict_only();
    search::explore(root, params, limits, workers, elapsed, on_progress)
}

impl Model for ReplicaLab {
    type Step = ReplicaStep;
    type Rules = Params;
    type Marks = ();

    fn alphabet(params: &Params) -> Vec<ReplicaStep> {
        ReplicaStep::alphabet(params)
    }

    fn enabled(&self, step: ReplicaStep, params: &Params) -> bool {
        ReplicaLab::enabled(self, step, params)
    }

    fn take(&mut self, step: ReplicaStep, params: &Params) {
        ReplicaLab::take(self, step, params);
    }

    fn fingerprint(&self) -> u128 {
        ReplicaLab::fingerprint(self)
    }

    fn judge(&self, _: &Params) -> Judged {
        match self.anomaly() {
            Some(anomaly) => Judged::Broken {
                anomaly: Box::new(anomaly.clone()),
                ends_run: false,
            },
            None => Judged::Holds,
        }
    }

    fn policy(&self) -> Policy {
        self.policy
    }

    fn marks(&self) {}

    fn reached(_: &(), _: &()) -> Reached {
        Reached::default()
    }
}

impl ReplicaLab {
    /// The canonical form's 128-bit fingerprint: what the search deduplicates on. Absolute
    /// time is left out (only whether the lease has expired is read), and so is what only a
    /// report reads (the counts of events applied and decisions).
    pub fn fingerprint(&self) -> u128 {
        let mut c = Canon::new(
            LabTime::from_millis(self.now_ms),
            vec![self.session],
            std::iter::empty(),
            Vec::new(),
        );
        self.history.canonical(&mut c);
        match self.stored(STANDALONE) {
            Some(standalone) => canonical_record(&mut c, &standalone, self.now_ms),
            None => c.tag(0),
        }
        c.number(self.written_by.len() as u64);
        for r in &self.written_by {
            c.number(r.index() as u64);
        }
        // Whether the client called is whether the call's record is there.
        match self.stored(CALL) {
            Some(call) => {
                c.tag(1);
                canonical_record(&mut c, &call, self.now_ms);
            }
            None => c.tag(0),
        }
        for replica in &self.replicas {
            c.flag(replica.alive);
            c.flag(replica.partitioned);
            match &replica.delivery {
                Some(d) => {
                    c.tag(1);
                    c.number(d.epoch.map_or(0, |e| e + 1));
                    c.number(d.sent);
                    c.number(d.replay_to.map_or(0, |e| e + 1));
                }
                None => c.tag(0),
            }
            c.number(replica.emitter.map_or(0, |e| e.map_or(1, |e| e + 2)));
            match replica.runner {
                Some(runner) => {
                    c.tag(1);
                    c.number(runner.lease);
                    // A fenced runner's count is the record's while it holds the lease, and
                    // moot once it does not (its next write is refused); a naive runner's is
                    // its own alone (an unfenced write records no progress).
                    if self.policy == Policy::Naive {
                        c.number(runner.done);
                    }
                }
                None => c.tag(0),
            }
        }
        c.number(match self.connection {
            Connection::On(r) => r.index() as u64 + 1,
            Connection::Reconnecting => 0,
        });
        c.number(self.cursor);
        c.number(u64::from(self.emits));
        c.number(u64::from(self.reconnects));
        c.fingerprint()
    }
}

fn canonical_record(c: &mut Canon, record: &RecordLook<'_>, now_ms: u64) {
    c.tag(record.state as u8);
    c.number(record.epoch);
    c.text(record.owner);
    c.number(record.high_water);
    if let Some((done, lease)) = record.call {
        c.number(done);
        c.number(lease.epoch);
        c.text(&lease.owner);
        c.flag(replica::lease_state(lease, now_ms) == LeaseState::Expired);
    }
}

/// One step of a counterexample in words: what it did, and what the checker concluded.
#[derive(Clone, Debug, Serialize)]
pub struct TracedStep {
    pub step: ReplicaStep,
    pub said: String,
    pub happened: Vec<String>,
    pub anomalies: Vec<String>,
    /// What the lab showed after the step.
    #[serde(skip)]
    pub observed: Observed,
    /// Whether the client's connection was through the step's replica before it was taken.
    #[serde(skip)]
    pub client_was_on: Option<ReplicaId>,
}

/// Replays `steps` from the start, telling each: the narration of a counterexample, and what a
/// scenario waits on after each step.
pub fn trace(policy: Policy, params: &Params, steps: &[ReplicaStep]) -> Vec<TracedStep> {
    let mut lab = ReplicaLab::new(policy, 4096);
    let mut told = Vec::with_capacity(steps.len());
    for &step in steps {
        let before = lab.history.total();
        let client_was_on = match lab.connection {
            Connection::On(r) => Some(r),
            Connection::Reconnecting => None,
        };
        lab.take(step, params);
        let fresh = (lab.history.total() - before) as usize;
        let recent = lab.history.recent();
        let entries = recent.iter().skip(recent.len().saturating_sub(fresh));
        let mut happened = Vec::new();
        let mut anomalies = Vec::new();
        for entry in entries {
            if let Some(words) = entry.record.describe() {
                let who = entry.by.map_or(String::new(), |b| match b.epoch {
                    Some(e) => format!("[{} @{e}] ", b.replica),
                    None => format!("[{}] ", b.replica),
                });
                happened.push(format!("{who}{words}"));
            }
            anomalies.extend(entry.caused.anomalies().iter().map(ToString::to_string));
        }
        told.push(TracedStep {
            step,
            said: step.to_string(),
            happened,
            anomalies,
            observed: lab.observed(),
            client_was_on,
        });
    }
    told
}
