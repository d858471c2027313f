//! A schedule replayed and told step by step: what each step did, what the server decided, and
//! what the checker named — the counterexample as a person reads it.

use super::{Delivery, Step, initial, take};
use crate::config::{ConfigError, LabConfig};
use crate::history::Record;
use crate::ids::SessionId;
use crate::policy::Policy;
use serde::Serialize;

/// One step of a replayed schedule.
#[derive(Clone, Debug, Serialize)]
pub struct TraceStep {
    pub step: Step,
    /// Lab time after the step, in ms.
    pub at_ms: u64,
    /// What happened, one fact per line, in order.
    pub happened: Vec<String>,
    /// Anomalies the checker named during this step.
    pub anomalies: Vec<String>,
    /// Their kinds, in the same order.
    pub kinds: Vec<crate::history::AnomalyKind>,
}

/// Replays `steps` from the explorer's initial state and tells what each did.
pub fn trace(
    config: LabConfig,
    policy: Policy,
    steps: &[Step],
    delivery: Delivery,
    ends_run: bool,
) -> Result<Vec<TraceStep>, ConfigError> {
    // Keep every record: the narration reads them.
    let config = LabConfig {
        history_capacity: 4_096,
        ..config
    };
    let mut sim = initial(config, policy)?;
    let mut sessions: Vec<SessionId> = sim.session().into_iter().collect();
    let mut out = Vec::new();
    for &step in steps {
        let (records_before, anomalies_before) = (
            sim.history().total(),
            sim.history().checker().anomalies().len(),
        );
        take(step, &mut sim, delivery);
        let added = usize::try_from(sim.history().total() - records_before).unwrap_or(usize::MAX);
        let recent = sim.history().recent();
        let fresh: Vec<_> = recent
            .iter()
            .skip(recent.len().saturating_sub(added))
            .collect();
        for entry in &fresh {
            note_session(&entry.record, &mut sessions);
        }
        let happened = fresh
            .iter()
            .filter_map(|entry| entry.record.describe())
            .map(|said| renamed(&said, &sessions))
            .collect();
        let named = &sim.history().checker().anomalies()[anomalies_before..];
        let anomalies = named
            .iter()
            .map(|a| renamed(&a.to_string(), &sessions))
            .collect();
        let kinds = named.iter().map(crate::history::Anomaly::kind).collect();
        out.push(TraceStep {
            step,
            at_ms: sim.now().as_millis(),
            happened,
            anomalies,
            kinds,
        });
    }
    // The run ends where the schedule does: what is still owed is judged, told on the last step.
    if ends_run && let Some(last) = out.last_mut() {
        let before = sim.history().checker().anomalies().len();
        sim.end_run();
        last.happened
            .push("the run ends here: nothing more happens on its own".to_owned());
        for a in &sim.history().checker().anomalies()[before..] {
            last.anomalies.push(renamed(&a.to_string(), &sessions));
            last.kinds.push(a.kind());
        }
    }
    Ok(out)
}

/// The checker's words with each session's short id replaced by its place in the schedule
/// (`session 1`): the ids are the model's, not the ones a replay will draw.
fn renamed(said: &str, sessions: &[SessionId]) -> String {
    let mut out = said.to_owned();
    for (i, session) in sessions.iter().enumerate() {
        out = out.replace(
            &format!("session {}", session.short()),
            &format!("session {}", i + 1),
        );
    }
    out
}

/// Numbers sessions in the order the schedule meets them.
fn note_session(record: &Record, sessions: &mut Vec<SessionId>) {
    if let Record::SessionOpened { session } = record
        && !sessions.contains(session)
    {
        sessions.push(*session);
    }
}

/// The checker's words for the first anomaly of `kind` in a told schedule.
pub fn said_of(trace: &[TraceStep], kind: crate::history::AnomalyKind) -> Option<&str> {
    trace.iter().find_map(|step| {
        step.kinds
            .iter()
            .position(|k| *k == kind)
            .map(|i| step.anomalies[i].as_str())
    })
}
