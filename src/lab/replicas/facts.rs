//! A replica's facts, into the lab: each becomes a history record (for the core's checker),
//! tagged with the replica and the epoch it held, and a line in the replica's pane. The lab
//! translates; it judges nothing.

use super::{Held, ReplicaId, WATCHED_STREAMS, Watch, lock};
use crate::clock::LabClock;
use crate::wire::Shared;
use crate::wire::replica::witness::Fact;
use forkscope_core::history::{Record, Run};
use forkscope_core::{
    ByReplica, ConnectionId, IdScheme, PayloadKey, SessionId, StreamId, StreamKind,
};
use std::sync::Mutex;

/// One replica fact, into the lab's history (for the checker) and its watch (for the panes).
pub(super) fn record(
    shared: &Shared,
    clock: &LabClock,
    watch: &Mutex<Watch>,
    id: ReplicaId,
    fact: Fact,
) {
    let by = |epoch: Option<u64>| Some(ByReplica { replica: id, epoch });
    let mut watch = lock(watch);
    if let Fact::Written {
        session,
        stream,
        first,
        effects,
    } = &fact
    {
        let s = *session;
        drop(watch);
        let mut core = shared.lock();
        let now = clock.now();
        for (seq, effect) in (*first..).zip(effects) {
            if let Some(effect) = effect {
                let key = PayloadKey::new(s, *effect).to_shared();
                let record = Record::Written {
                    session: s,
                    stream: *stream,
                    seq,
                    key,
                };
                core.history.record_by(now, by(None), record);
            }
        }
        return;
    }
    let (by, record) = match fact {
        Fact::Written { .. } => return,
        Fact::Request(record) => {
            match &record {
                Record::StepApplied {
                    run: Run::Task(task),
                    ..
                } => {
                    let runs = &mut watch.replicas[id.index()].task_runs;
                    if !runs.contains(task) {
                        runs.push(*task);
                    }
                }
                Record::TaskCreated {
                    task, fresh: true, ..
                } if watch.tasks.len() < super::watch::LAB_TASKS => watch.tasks.push(*task),
                Record::TaskSettled { task, .. } => {
                    for seen in &mut watch.replicas {
                        seen.task_runs.retain(|t| t != task);
                    }
                }
                _ => {}
            }
            (by(None), record)
        }
        Fact::RolledBack {
            stream,
            holds,
            wrote,
            ..
        } => {
            watch.note(
                id,
                format!("the store rolled back: {stream} holds #{holds}, this replica wrote #{wrote}; write refused"),
            );
            return;
        }
        Fact::SessionOpened { session } => {
            let s = session;
            watch.note(id, format!("opens session {}", s.short()));
            (by(None), Record::SessionOpened { session: s })
        }
        Fact::StreamOpened {
            session,
            stream,
            kind,
            flagged_new,
            epoch,
            request,
        } => {
            let s = session;
            watch.streams.push((session, stream, kind));
            if kind == StreamKind::Request
                && let Some(seen) = watch.replicas.get_mut(id.index())
            {
                seen.runs.push((s, stream));
            }
            let excess = watch.streams.len().saturating_sub(64);
            watch.streams.drain(..excess);
            watch.note(id, format!("opens {stream}"));
            let record = Record::StreamOpened {
                session: s,
                stream,
                stream_kind: kind,
                ids: IdScheme::Keyed,
                flagged_new,
                request,
            };
            (by(epoch), record)
        }
        Fact::Resumed {
            session,
            stream,
            after,
            replay,
            epoch,
            proof,
        } => {
            let s = session;
            let line = match epoch {
                Some(e) => format!("resumes {stream} after #{after}: takes epoch {e}"),
                None => format!("resumes {stream} after #{after}, no epoch taken"),
            };
            watch.note(id, line);
            let record = Record::ResumeAccepted {
                session: s,
                stream,
                after,
                replay_len: usize::try_from(replay).unwrap_or(usize::MAX),
                proof,
                // Across replicas the fence is the stream's epoch (the replica pane's `ep`).
                fenced_connection: None,
            };
            (by(epoch), record)
        }
        Fact::Rejected { session, reason } => {
            let s = session;
            watch.note(id, format!("refuses a resume: {reason}"));
            (by(None), Record::ResumeRejected { session: s, reason })
        }
        Fact::Attached {
            session,
            stream,
            connection,
            epoch,
        } => {
            let s = session;
            let seen = &mut watch.replicas[id.index()];
            seen.holds.push((
                session,
                Held {
                    stream,
                    connection,
                    epoch,
                    superseded: false,
                },
            ));
            let excess = seen.holds.len().saturating_sub(WATCHED_STREAMS);
            seen.holds.drain(..excess);
            if stream_kind(&watch, &session, stream) == Some(StreamKind::Standalone)
                || watch.standalone_on.is_none()
            {
                watch.standalone_on = Some((session, id));
            }
            let record = Record::Attached {
                session: s,
                stream,
                connection: ConnectionId(((id.index() as u64) << 32) | connection),
            };
            (by(epoch), record)
        }
        Fact::Sent {
            session,
            stream,
            seq,
            effect,
            epoch,
        } => {
            let s = session;
            let Some(effect) = effect else { return };
            watch.replicas[id.index()].sent += 1;
            let record = Record::Emitted {
                session: s,
                stream,
                seq,
                key: PayloadKey::new(s, effect).to_shared(),
                copied: false,
            };
            (by(epoch), record)
        }
        Fact::Refused { session, stale } => {
            let s = session;
            // Not a note: the pane words the store's refusals from the history, each while it
            // is news (until the replica holds a newer epoch).
            let holder = ReplicaId::parse(&stale.holder);
            let record = Record::StaleWriteRefused {
                session: s,
                stream: stale.stream,
                epoch: stale.writer_epoch,
                current: stale.current,
                holder,
            };
            (by(Some(stale.writer_epoch)), record)
        }
        Fact::Adopted {
            session,
            stream,
            lease,
            done,
        } => {
            let s = session;
            watch.note(id, format!("adopts the call on {stream} after step {done}"));
            for seen in &mut watch.replicas {
                seen.runs.retain(|run| *run != (s, stream));
            }
            if let Some(seen) = watch.replicas.get_mut(id.index()) {
                seen.runs.push((s, stream));
            }
            let record = Record::CallAdopted {
                session: s,
                stream,
                lease,
                done,
            };
            (by(None), record)
        }
        Fact::Finished { session, stream } => {
            let s = session;
            watch.note(id, format!("finishes the call on {stream}"));
            for seen in &mut watch.replicas {
                seen.runs.retain(|run| *run != (s, stream));
            }
            (by(None), Record::StreamClosed { session: s, stream })
        }
        Fact::DeliveryEnded {
            session,
            stream,
            connection,
            why,
        } => {
            let seen = &mut watch.replicas[id.index()];
            seen.holds.retain(|(k, h)| {
                !(*k == session && h.stream == stream && h.connection == connection)
            });
            watch.note(id, format!("stops sending {stream}: {why}"));
            return;
        }
    };
    drop(watch);
    let mut core = shared.lock();
    // Read under the lock: entries are stamped in the order they are recorded.
    let now = clock.now();
    core.history.record_by(now, by, record);
}

fn stream_kind(watch: &Watch, session: &SessionId, stream: StreamId) -> Option<StreamKind> {
    watch
        .streams
        .iter()
        .find(|(k, s, _)| k == session && *s == stream)
        .map(|(_, _, kind)| *kind)
}
