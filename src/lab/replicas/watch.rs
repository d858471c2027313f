//! What the lab learned of its replicas, for the panes: each replica's deliveries and runs, its
//! recent facts, and the watched session's streams as the store holds them (polled).

use super::{Held, RECENT_FACTS, STORE_POLL, StoredStream, WATCHED_STREAMS, lock};
use crate::store::Store;
use forkscope_core::{ReplicaId, SessionId, StreamId, StreamKind};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What the lab learned from the replicas' facts, for the panes.
#[derive(Debug, Default)]
pub(super) struct Watch {
    pub(super) replicas: Vec<Seen>,
    /// Streams opened, per session, newest last.
    pub(super) streams: Vec<(SessionId, StreamId, StreamKind)>,
    pub(super) stored: Vec<StoredStream>,
    pub(super) store_error: Option<String>,
    /// The session's standalone stream and the replica it was last attached on (for sticky).
    pub(super) standalone_on: Option<(SessionId, ReplicaId)>,
    /// The 2026-07-28 tasks this lab made (up to [`LAB_TASKS`]): what the store's faults touch.
    pub(super) tasks: Vec<forkscope_core::TaskId>,
}

/// Tasks a lab keeps track of for its store faults: far more than any scenario makes.
pub(super) const LAB_TASKS: usize = 1_024;

#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) holds: Vec<(SessionId, Held)>,
    /// The tool calls this replica runs (it started them, or adopted them), until they finish.
    pub(super) runs: Vec<(SessionId, StreamId)>,
    /// The 2026-07-28 tasks this replica applied steps of, until they end.
    pub(super) task_runs: Vec<forkscope_core::TaskId>,
    pub(super) sent: u64,
    pub(super) recent: VecDeque<String>,
}

impl Watch {
    pub(super) fn note(&mut self, replica: ReplicaId, line: String) {
        if let Some(seen) = self.replicas.get_mut(replica.index()) {
            if seen.recent.len() == RECENT_FACTS {
                seen.recent.pop_front();
            }
            seen.recent.push_back(line);
        }
    }
}

/// Reads the watched session's streams back from the store, for the panes.
pub(super) async fn poll_store(store: Store, watch: Arc<Mutex<Watch>>) {
    let mut ticks = tokio::time::interval(STORE_POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        let wanted: Vec<(SessionId, StreamId)> = {
            let mut watch = lock(&watch);
            let Some((session, _, _)) = watch.streams.last() else {
                // Nothing watched (a store restart cleared it): nothing to show either.
                watch.stored.clear();
                continue;
            };
            let session = *session;
            let mut wanted: Vec<_> = watch
                .streams
                .iter()
                .filter(|(k, _, _)| *k == session)
                .map(|(k, s, _)| (*k, *s))
                .collect();
            let excess = wanted.len().saturating_sub(WATCHED_STREAMS);
            wanted.drain(..excess);
            wanted
        };
        let mut stored = Vec::new();
        let mut error = None;
        for (session, stream) in wanted {
            match store.snapshot(&session, stream).await {
                Ok(Some(snapshot)) => {
                    let record = snapshot.record;
                    stored.push(StoredStream {
                        stream: record.stream,
                        kind: record.kind,
                        state: record.state,
                        epoch: record.epoch,
                        owner: record.owner,
                        high_water: record.high_water,
                        lease: record.call.map(|c| (c.lease.epoch, c.lease.owner, c.done)),
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        let mut watch = lock(&watch);
        if error.is_none() {
            watch.stored = stored;
        }
        watch.store_error = error;
    }
}
