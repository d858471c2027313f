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
}

/// Replays `steps` from the explorer's initial state and tells what each did.
pub fn trace(
    config: LabConfig,
    policy: Policy,
    steps: &[Step],
    delivery: Delivery,
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
        let happened = recent
            .iter()
            .skip(recent.len().saturating_sub(added))
            .filter_map(|entry| say(&entry.record, &mut sessions))
            .collect();
        let anomalies = sim.history().checker().anomalies()[anomalies_before..]
            .iter()
            .map(|a| renamed(&a.to_string(), &sessions))
            .collect();
        out.push(TraceStep {
            step,
            at_ms: sim.now().as_millis(),
            happened,
            anomalies,
        });
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

/// A side effect's key without its session prefix: `bg:3`.
fn short_key(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, rest)| rest)
}

/// One record in words; `None` for what a reader does not need.
fn say(record: &Record, sessions: &mut Vec<SessionId>) -> Option<String> {
    let mut name = |s: &SessionId| {
        let i = sessions.iter().position(|k| k == s).unwrap_or_else(|| {
            sessions.push(*s);
            sessions.len() - 1
        });
        format!("session {}", i + 1)
    };
    Some(match record {
        Record::SessionOpened { session } => format!("server opens {}", name(session)),
        Record::SessionClosed { session } => format!("server ends {}", name(session)),
        Record::StreamOpened {
            stream,
            flagged_new,
            stream_kind,
            ..
        } => format!(
            "server mints {} stream {stream}{}",
            match stream_kind {
                crate::server::StreamKind::Standalone => "standalone",
                crate::server::StreamKind::Request => "request",
            },
            if *flagged_new {
                ", flagged as new"
            } else {
                ", not flagged as new: the client will take it for a continuation"
            }
        ),
        Record::Attached { stream, .. } => format!("server attaches {stream} to the connection"),
        Record::Orphaned {
            stream,
            grace_deadline,
            cause,
            ..
        } => format!(
            "server sees {stream}'s connection {}: grace window until {grace_deadline}",
            cause.describe()
        ),
        Record::Fenced { stream, .. } => {
            format!("server fences {stream}: nothing more may land on it")
        }
        Record::StreamClosed { stream, .. } => format!("server closes {stream}"),
        Record::StreamForgotten { .. } => return None,
        Record::Emitted {
            stream,
            seq,
            key,
            copied,
            ..
        } => {
            if *copied {
                format!("{} copied into {stream} as #{seq}", short_key(key))
            } else {
                format!("{} emitted onto {stream} as #{seq}", short_key(key))
            }
        }
        Record::LateEmitRefused { stream, key, .. } => {
            format!("late emit {} onto fenced {stream} refused", short_key(key))
        }
        Record::ResumeAccepted {
            stream,
            after,
            replay_len,
            ..
        } => format!("server resumes {stream} after #{after}, replaying {replay_len}"),
        Record::ResumeRejected { reason, .. } => {
            format!("server refuses with {} {reason}", reason.http_status())
        }
        Record::Delivered {
            event,
            key,
            applied,
            ..
        } => {
            if *applied {
                format!("client applies {} ({event})", short_key(key))
            } else {
                format!("client skips {} ({event}): a replay it has", short_key(key))
            }
        }
        Record::CursorMoved { from, to, .. } => match from {
            Some(from) => format!("client cursor {from} → {to}"),
            None => format!("client cursor → {to}"),
        },
        Record::ClientNewSession => "client starts a new session".to_owned(),
        Record::ClientGaveUp => "client gives up: its retry budget is spent".to_owned(),
    })
}
