//! What the checker keeps of each stream and of each tool call the client made.

use crate::ids::IdScheme;
use crate::vocabulary::StreamKind;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(super) struct Track {
    pub(super) kind: StreamKind,
    pub(super) ids: IdScheme,
    pub(super) accepting: bool,
    pub(super) high_water: u64,
    /// Highest sequence the client has received on this stream (0: just the priming event).
    pub(super) seen: u64,
    /// Events emitted here and not yet delivered, by sequence: judged when the stream can no
    /// longer deliver them (see [`Checker::settle_stream`]).
    pub(super) pending: BTreeMap<u64, Arc<str>>,
    /// Opened flagged as new (`Mcp-Stream-Resumed: false`): a client moving onto it was told
    /// that continuity broke.
    pub(super) flagged_new: bool,
    /// A request stream: the tool call the client is owed the result of.
    pub(super) call: Option<Call>,
    /// What the latest delivered ids carried, newest [`OWED_KEPT`] kept: what a second write of
    /// one of them is told apart by.
    pub(super) delivered: BTreeMap<u64, Arc<str>>,
}

/// What the client has of a tool call it made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Call {
    /// Progress steps delivered.
    pub(super) steps: u64,
    /// Its result (or why it stopped) was emitted: from then on the event is what is owed.
    pub(super) end_emitted: bool,
    /// Its result was delivered, or the call was judged: nothing more is owed.
    pub(super) settled: bool,
    /// Counted in [`Counters::owed`]: the client reported what it received when it made the call.
    pub(super) counted: bool,
    /// The JSON-RPC id of its POST, when numeric: how the client names a call it gives up
    /// before it heard from it.
    pub(super) request: Option<u64>,
}
