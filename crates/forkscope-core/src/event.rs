//! What travels on a stream: an event's identity, its semantic payload and when it was emitted.

use crate::ids::EventId;
use crate::time::LabTime;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The semantic content of an event. `key` names the side effect a client applies when it
/// receives the event ("progress step 3 of call 7"); applying one key twice is a duplicate side
/// effect however the event was numbered. `body` is the serialized JSON-RPC message the adapter
/// writes, kept as-is so a replay sends the very same bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payload {
    pub key: Arc<str>,
    pub body: Arc<str>,
    /// Known to hold no line break, checked once when made: an SSE writer spells it as one
    /// `data:` line without scanning it again on every replay. `false` means "not known".
    #[serde(skip)]
    one_line: bool,
}

impl Payload {
    pub fn new(key: impl Into<Arc<str>>, body: impl Into<Arc<str>>) -> Self {
        let body = body.into();
        let one_line = !body.contains(['\n', '\r']);
        Payload {
            key: key.into(),
            body,
            one_line,
        }
    }

    /// Whether the body is known to hold no line break (`\n` or `\r`).
    pub fn is_one_line(&self) -> bool {
        self.one_line
    }
}

/// One event emitted onto a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub id: EventId,
    pub payload: Payload,
    pub emitted_at: LabTime,
}
