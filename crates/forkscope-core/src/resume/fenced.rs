//! The fencing rule: honour a resume only when token and `Last-Event-ID` co-validate to the
//! same non-fenced stream, the server has not advanced past the cursor without keeping what it
//! sent, and no other stream of the session is still live. Otherwise refuse with a reason;
//! never mint a stream silently.
//!
//! Conditions 1 (co-validation) and 2 (fence the old stream) of the seed are decided here;
//! condition 3 by the [`IdScheme::Scoped`] ids this policy issues.

use super::{Plan, ResumeRejected, TokenLookup, shown};
use crate::config::LabConfig;
use crate::ids::{IdScheme, StreamId, WireCursor};
use crate::server::{Session, StreamKind, StreamState};
use crate::time::LabTime;

pub(crate) fn decide(
    session: &Session,
    token: TokenLookup,
    last_event_id: Option<&str>,
    now: LabTime,
    config: &LabConfig,
) -> Plan {
    match (token, last_event_id) {
        // Neither header: not a resume at all, a request for a new standalone stream.
        (TokenLookup::Absent, None) => open_new_stream(session, now, config),
        // The seed's incident: an id alone proves nothing about identity.
        (TokenLookup::Absent, Some(cursor)) => Plan::reject(ResumeRejected::MissingToken {
            cursor: shown(cursor),
        }),
        (TokenLookup::Unknown, _) => Plan::reject(ResumeRejected::UnknownToken),
        (TokenLookup::OtherSession, _) => Plan::reject(ResumeRejected::TokenOfAnotherSession),
        // A token alone proves nothing about gap-freedom.
        (TokenLookup::Found(_), None) => Plan::reject(ResumeRejected::MissingLastEventId),
        (TokenLookup::Found(stream), Some(cursor)) => {
            resume_identified(session, stream, cursor, now, config)
        }
    }
}

fn resume_identified(
    session: &Session,
    id: StreamId,
    raw_cursor: &str,
    now: LabTime,
    config: &LabConfig,
) -> Plan {
    let Some(stream) = session.stream(id) else {
        return Plan::reject(ResumeRejected::UnknownToken);
    };
    let Some(cursor) = WireCursor::parse(raw_cursor) else {
        return Plan::reject(ResumeRejected::MalformedCursor {
            shown: shown(raw_cursor),
        });
    };
    // Condition 1: the cursor must name the very stream the token names.
    let seq = match cursor {
        WireCursor::Scoped(event) if event.stream == id => event.seq,
        _ => {
            return Plan::reject(ResumeRejected::CursorNotOnStream {
                cursor: shown(raw_cursor),
                stream: id,
            });
        }
    };
    match stream.state() {
        StreamState::Fenced { at } => {
            return Plan::reject(ResumeRejected::StreamFenced { stream: id, at });
        }
        StreamState::Closed { at } => {
            return Plan::reject(ResumeRejected::StreamClosed { stream: id, at });
        }
        StreamState::Live | StreamState::Orphaned { .. } => {}
    }
    if seq > stream.high_water() {
        return Plan::reject(ResumeRejected::CursorAhead {
            stream: id,
            cursor: seq,
            high_water: stream.high_water(),
        });
    }
    if let Err(evicted) = stream.buffer.after(seq, stream.high_water()) {
        return Plan::reject(ResumeRejected::CursorEvicted {
            stream: id,
            cursor: seq,
            oldest_kept: evicted.oldest_kept,
        });
    }
    if stream.kind() == StreamKind::Request {
        // A request stream has no siblings in its lineage: nothing else to fence.
        return Plan::Resume {
            stream: id,
            after: seq,
            fence: Vec::new(),
        };
    }
    match fence_orphaned_streams(session, Some(id), now, config) {
        Ok(fence) => Plan::Resume {
            stream: id,
            after: seq,
            fence,
        },
        Err(plan) => plan,
    }
}

fn open_new_stream(session: &Session, now: LabTime, config: &LabConfig) -> Plan {
    match fence_orphaned_streams(session, None, now, config) {
        Ok(fence) => Plan::Mint {
            flagged_new: true,
            backlog_from: None,
            orphan: None,
            fence,
            ids: IdScheme::Scoped,
        },
        Err(plan) => plan,
    }
}

/// Condition 2, with the seed's grace rule: every other standalone stream that emits can still
/// land on must be fenced before this request is granted, but one still inside its grace window
/// blocks the request instead, so a resume never races a still-live original. A stream the
/// server still believed live is proven abandoned by this very request: its grace starts now.
fn fence_orphaned_streams(
    session: &Session,
    except: Option<StreamId>,
    now: LabTime,
    config: &LabConfig,
) -> Result<Vec<StreamId>, Plan> {
    let mut fence = Vec::new();
    for other in session.other_standalone_accepting(except) {
        match other.state() {
            StreamState::Live if config.grace_ms > 0 => {
                return Err(Plan::Reject {
                    rejected: ResumeRejected::OrphanStillLive {
                        orphan: other.id(),
                        remaining_ms: config.grace_ms,
                    },
                    orphan: Some(other.id()),
                });
            }
            StreamState::Orphaned { grace_deadline, .. } if grace_deadline > now => {
                return Err(Plan::reject(ResumeRejected::OrphanStillLive {
                    orphan: other.id(),
                    remaining_ms: grace_deadline.since(now),
                }));
            }
            _ => fence.push(other.id()),
        }
    }
    Ok(fence)
}
