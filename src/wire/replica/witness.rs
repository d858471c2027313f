//! What a replica tells a lab that watches it (`forkscope --replicas 2`): each decision it
//! commits and each event it hands to a connection, as it happens, so the lab's history can
//! name which replica did what. `forkscope serve` runs with none, and pays nothing for it.
//!
//! The replica only reports; the lab turns facts into history records and the core's checker
//! judges them.

use crate::store::SessionId;
use forkscope_core::replica::StaleEpoch;
use forkscope_core::{Effect, IdentityProof, RejectReason, StreamId, StreamKind};
use serde_json::Value;
use std::sync::Arc;

/// One thing a replica did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fact {
    SessionOpened {
        session: SessionId,
    },
    /// A new stream: a standalone one a GET opened, or a tool call's.
    StreamOpened {
        session: SessionId,
        stream: StreamId,
        kind: StreamKind,
        /// Told to the client as new (`Mcp-Stream-Resumed: false`): fenced replicas say so.
        flagged_new: bool,
        /// The stream epoch it opens at (fenced); `None` under naive.
        epoch: Option<u64>,
        /// A tool call's: the POST's JSON-RPC id, when numeric.
        request: Option<u64>,
    },
    /// A resume committed (fenced: the attach took `epoch`).
    Resumed {
        session: SessionId,
        stream: StreamId,
        after: u64,
        replay: u64,
        epoch: Option<u64>,
        /// What proved the stream's identity, as the decision said.
        proof: IdentityProof,
    },
    Rejected {
        session: SessionId,
        reason: RejectReason,
    },
    /// A delivery began on this replica: the client's connection for `stream` is here now.
    Attached {
        session: SessionId,
        stream: StreamId,
        connection: u64,
        epoch: Option<u64>,
    },
    /// An event handed to a connection live (a replay is told by [`Fact::Resumed`]).
    Sent {
        session: SessionId,
        stream: StreamId,
        seq: u64,
        effect: Option<Effect>,
        epoch: Option<u64>,
    },
    /// A batch this replica committed to the store: ids `first..` carry these side effects.
    Written {
        session: SessionId,
        stream: StreamId,
        first: u64,
        effects: Vec<Option<Effect>>,
    },
    /// The store held fewer events of `stream` than this replica had written up to: it was
    /// restored from an older state. The write was refused (fenced).
    RolledBack {
        session: SessionId,
        stream: StreamId,
        holds: u64,
        wrote: u64,
    },
    /// The store refused a write of this replica: its epoch was stale.
    Refused {
        session: SessionId,
        stale: StaleEpoch,
    },
    /// This replica took over a call whose lease expired.
    Adopted {
        session: SessionId,
        stream: StreamId,
        lease: u64,
        done: u64,
    },
    /// A call's result was committed: its stream takes nothing more.
    Finished {
        session: SessionId,
        stream: StreamId,
    },
    /// A 2026-07-28 call's or task's fact, as the record the checker reads (no session, no
    /// stream: the record says it all).
    Request(forkscope_core::Record),
    /// A delivery on this replica ended: its stream did, or the client went, a resume
    /// elsewhere fenced it, the store failed.
    DeliveryEnded {
        session: SessionId,
        stream: StreamId,
        connection: u64,
        why: String,
    },
}

/// Where a replica's facts go.
#[derive(Clone)]
pub struct Witness(Arc<dyn Fn(Fact) + Send + Sync>);

impl Witness {
    pub fn new(tell: impl Fn(Fact) + Send + Sync + 'static) -> Witness {
        Witness(Arc::new(tell))
    }

    pub fn tell(&self, fact: Fact) {
        (self.0)(fact);
    }
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Witness")
    }
}

/// The side effect an event's body names, read back from what this server writes: a progress
/// step or the result on a call's stream, a numbered background message on a standalone one.
pub fn effect_of(kind: StreamKind, stream: StreamId, data: &str) -> Option<Effect> {
    let message: Value = serde_json::from_str(data).ok()?;
    match kind {
        StreamKind::Request if message.get("result").is_some() => {
            Some(Effect::Result { call: stream })
        }
        // A JSON-RPC error ends the call: why it stopped.
        StreamKind::Request if message.get("error").is_some() => {
            Some(Effect::Stopped { call: stream })
        }
        StreamKind::Request => {
            let step = message.pointer("/params/progress")?.as_u64()?;
            Some(Effect::Progress { call: stream, step })
        }
        StreamKind::Standalone => {
            let n = message.pointer("/params/data/background")?.as_u64()?;
            Some(Effect::Background { n })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::server::{background, tool};
    use forkscope_core::work::ToolStep;

    /// Every body a replica writes names its effect, read back as the in-process server keys it.
    #[test]
    fn every_body_a_replica_writes_names_its_effect() {
        let id = serde_json::json!(7);
        let token = serde_json::json!("t");
        let s = StreamId(2);
        let progress = tool::step_body(&id, Some(&token), ToolStep::Progress { done: 3, total: 5 });
        let result = tool::step_body(&id, Some(&token), ToolStep::Result { steps: 5 });
        assert_eq!(
            effect_of(StreamKind::Request, s, &progress),
            Some(Effect::Progress { call: s, step: 3 })
        );
        assert_eq!(
            effect_of(StreamKind::Request, s, &result),
            Some(Effect::Result { call: s })
        );
        assert_eq!(
            effect_of(StreamKind::Standalone, StreamId(1), &background::body(9)),
            Some(Effect::Background { n: 9 })
        );
        assert_eq!(effect_of(StreamKind::Standalone, s, "not json"), None);
    }
}
