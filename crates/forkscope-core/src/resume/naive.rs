//! The naive policy: the seed incident, reproduced on purpose.
//!
//! A reconnect without a (known) token mints a fresh stream whose buffer is a copy of the
//! session's backlog, renumbered and replayed from its own index 0, with bare ids that reuse the
//! old stream's. The old stream is merely orphaned: it stays live for the grace window and the
//! background emitter keeps writing to it. Nothing in the response says "new". A token is
//! honoured without checking the cursor against anything.

use super::{Plan, Quirked, TokenLookup};
use crate::ids::{IdScheme, WireCursor};
use crate::state::{Session, StreamState};
use crate::vocabulary::{IdentityProof, StreamKind};

pub(crate) fn decide(session: &Session, token: TokenLookup, last_event_id: Option<&str>) -> Plan {
    if let TokenLookup::Found(id) = token
        && let Some(stream) = session.stream(id)
        && stream.state().accepts_emits()
    {
        // Trust the cursor: an unparsable one means "from the start", one ahead of the stream
        // replays nothing, one evicted replays what is left — silently, with a gap.
        let asked = last_event_id
            .and_then(WireCursor::parse)
            .map_or(0, WireCursor::seq);
        let floor = stream
            .oldest_buffered()
            .map_or(stream.high_water(), |o| o - 1);
        let after = asked.min(stream.high_water()).max(floor);
        return Plan::Resume {
            stream: id,
            after,
            fence: Vec::new(),
            proof: IdentityProof::Unchecked,
            quirked: Quirked::default(),
        };
    }
    let previous = session
        .active()
        .and_then(|id| session.stream(id))
        .filter(|s| s.kind() == StreamKind::Standalone);
    Plan::Mint {
        flagged_new: false,
        backlog_from: previous.map(|s| s.id()),
        orphan: previous
            .filter(|s| s.state() == StreamState::Live)
            .map(|s| s.id()),
        fence: Vec::new(),
        ids: IdScheme::Bare,
    }
}
