//! The naive replica's live delivery: events reach only connections on the replica that wrote
//! them, as in the SDKs, whose shared stores replay but do not deliver across replicas. A resume
//! that lands on another replica replays the log and then hears nothing of the original writer:
//! the orphan on the first replica keeps receiving, and the session forks.

use crate::store::SessionId;
use forkscope_core::StreamId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Events a slow local listener may fall behind before it misses some.
const LOCAL_QUEUE: usize = 1_024;

#[derive(Clone, Debug)]
pub(super) enum Local {
    Event(u64, Arc<str>),
    Finished,
}

type Channels = HashMap<(SessionId, StreamId), broadcast::Sender<Local>>;

#[derive(Clone, Debug, Default)]
pub(super) struct LocalHub {
    streams: Arc<Mutex<Channels>>,
}

impl LocalHub {
    pub(super) fn subscribe(
        &self,
        session: &SessionId,
        stream: StreamId,
    ) -> broadcast::Receiver<Local> {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        // Senders nobody listens to any more are dropped here: the map stays bounded by the
        // streams with a live listener.
        streams.retain(|_, tx| tx.receiver_count() > 0);
        // One listener per stream on a replica, as one SDK process keeps one writer per stream
        // id: a resume on the same replica takes the stream over, and the delivery it replaced
        // ends (its channel closes). Only a resume on another replica leaves an orphan.
        let (tx, rx) = broadcast::channel(LOCAL_QUEUE);
        streams.insert((*session, stream), tx);
        rx
    }

    pub(super) fn publish(&self, session: &SessionId, stream: StreamId, item: Local) {
        let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = streams.get(&(*session, stream)) {
            let _ = tx.send(item);
        }
    }
}
