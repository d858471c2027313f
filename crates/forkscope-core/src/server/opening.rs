//! What a connection is sent right after a stream is attached to it, before its live tail: the
//! priming event of a new stream, then the replay after the cursor. Both adapters — the HTTP
//! server and the in-memory [`crate::sim`] — write exactly this, so the property tests exercise
//! the attach path the real server runs.

use super::{Server, StreamState};
use crate::event::Event;
use crate::ids::{EventId, IdContext, IdScheme, SessionId, StreamId};
use crate::resume::ResumeDecision;
use crate::state::SharedEvents;
use crate::time::LabTime;
use std::sync::Arc;

#[derive(Debug)]
pub struct Opening {
    pub session: SessionId,
    pub stream: StreamId,
    ids: IdScheme,
    cx: IdContext,
    /// A new stream opens with a priming event (sequence 0, empty data) so the client has a
    /// cursor before any real event.
    pub priming: bool,
    /// The buffered events after the cursor, oldest first (captured atomically with the
    /// attach; rendered by the adapter as it writes).
    pub replay: ReplayEvents,
    /// The stream has finished: the connection ends after the replay.
    pub ends: bool,
}

/// The events an opening replays. A finished stream's are shared with its buffer, which takes
/// no more events: taking them costs the same for one event or a thousand, so the first can
/// be written at once. A live stream's are copied, so its next emit need not copy the buffer.
#[derive(Clone, Debug)]
pub struct ReplayEvents(Kept);

#[derive(Clone, Debug)]
enum Kept {
    Copied(Vec<Event>),
    Shared(SharedEvents),
}

impl ReplayEvents {
    pub fn len(&self) -> usize {
        match &self.0 {
            Kept::Copied(events) => events.len(),
            Kept::Shared(events) => events.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `index`-th event replayed.
    pub fn get(&self, index: usize) -> Option<&Event> {
        match &self.0 {
            Kept::Copied(events) => events.get(index),
            Kept::Shared(events) => events.get(index),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        let (copied, shared) = match &self.0 {
            Kept::Copied(events) => (Some(events.iter()), None),
            Kept::Shared(events) => (None, Some(events.iter())),
        };
        copied
            .into_iter()
            .flatten()
            .chain(shared.into_iter().flatten())
    }
}

/// One event as written to the wire: its spelling, its ground truth and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub wire_id: String,
    pub event: EventId,
    /// The side-effect key; `None` on the priming event.
    pub key: Option<Arc<str>>,
    /// The JSON-RPC message; empty on the priming event.
    pub body: Arc<str>,
    /// The body is known to hold no line break (see [`crate::Payload::is_one_line`]).
    pub one_line: bool,
}

impl Opening {
    /// The wire spelling of one of this stream's event ids, emitted at `at`.
    pub fn wire_id(&self, seq: u64, at: LabTime) -> String {
        self.ids.spell(
            EventId {
                stream: self.stream,
                seq,
            },
            IdContext { at, ..self.cx },
        )
    }

    /// What every wire id of this stream spells around its sequence number; `None` when its
    /// ids are not a counter between two fixed strings (then spell each with
    /// [`Opening::wire_id`]).
    pub fn id_affixes(&self) -> Option<(String, String)> {
        self.ids
            .affixes(self.stream, self.cx.token, self.cx.standalone)
    }

    /// The priming event, if this opening has one.
    pub fn priming_event(&self) -> Option<Outgoing> {
        self.priming.then(|| Outgoing {
            wire_id: self.wire_id(0, self.cx.at),
            event: EventId {
                stream: self.stream,
                seq: 0,
            },
            key: None,
            body: Arc::from(""),
            one_line: true,
        })
    }

    pub fn outgoing(&self, event: &Event) -> Outgoing {
        Outgoing {
            wire_id: self.wire_id(event.id.seq, event.emitted_at),
            event: event.id,
            key: Some(event.payload.key.clone()),
            body: event.payload.body.clone(),
            one_line: event.payload.is_one_line(),
        }
    }

    /// Everything this opening writes, in order.
    pub fn events(&self) -> impl Iterator<Item = Outgoing> + '_ {
        self.priming_event()
            .into_iter()
            .chain(self.replay.iter().map(|e| self.outgoing(e)))
    }
}

impl Server {
    /// The opening of the connection a GET decision attached; `None` for a rejection.
    pub fn opening_for(&self, session: SessionId, decision: &ResumeDecision) -> Option<Opening> {
        match decision {
            ResumeDecision::Resume(r) => {
                let mut opening = if r.by_id {
                    self.opening_by_id(session, r.stream, r.after)
                } else {
                    self.opening(session, r.stream, false, r.after)
                }?;
                opening.ends |= r.then_close;
                Some(opening)
            }
            ResumeDecision::NewStream(n) => self.opening(session, n.stream, true, 0),
            ResumeDecision::Reject(_) | ResumeDecision::Answered(_) => None,
        }
    }

    /// The opening of a request stream just minted for a POST (its priming event).
    pub fn opening_of_request_stream(
        &self,
        session: SessionId,
        stream: StreamId,
    ) -> Option<Opening> {
        self.opening(session, stream, true, 0)
    }

    fn opening(
        &self,
        session: SessionId,
        stream: StreamId,
        priming: bool,
        after: u64,
    ) -> Option<Opening> {
        let s = self.session(session)?.stream(stream)?;
        let ends = matches!(s.state, StreamState::Finished { .. });
        let kept = if ends {
            s.buffer.share_after(after, s.high_water).map(Kept::Shared)
        } else {
            s.buffer
                .after(after, s.high_water)
                .map(|events| Kept::Copied(events.cloned().collect()))
        };
        Some(Opening {
            session,
            stream,
            ids: s.ids,
            // The priming event is spelled as of the stream's opening.
            cx: s.id_context(s.opened_at()),
            priming,
            replay: ReplayEvents(kept.unwrap_or(Kept::Copied(Vec::new()))),
            ends,
        })
    }

    /// An SDK store's replay ([`crate::resume::sdk::ReplayOrder::ById`]): every kept event
    /// whose id sorts after the cursor's, in the order the ids sort.
    fn opening_by_id(&self, session: SessionId, stream: StreamId, cursor: u64) -> Option<Opening> {
        let s = self.session(session)?.stream(stream)?;
        let mut opening = self.opening(session, stream, false, s.high_water)?;
        let at = s
            .buffer
            .iter()
            .find(|e| e.id.seq == cursor)
            .map_or(s.opened_at(), |e| e.emitted_at);
        let cursor_id = s.wire_id(cursor, at);
        let mut after: Vec<(String, Event)> = s
            .buffer
            .iter()
            .map(|e| (s.wire_id(e.id.seq, e.emitted_at), e.clone()))
            .filter(|(id, _)| *id > cursor_id)
            .collect();
        after.sort_by(|a, b| a.0.cmp(&b.0));
        opening.replay = ReplayEvents(Kept::Copied(after.into_iter().map(|(_, e)| e).collect()));
        Some(opening)
    }

    /// The event at `id` as written to the wire, if it is still buffered.
    pub fn outgoing(&self, session: SessionId, id: EventId) -> Option<Outgoing> {
        let s = self.session(session)?.stream(id.stream)?;
        let event = s.buffer.after(id.seq - 1, s.high_water).ok()?.next()?;
        Some(Outgoing {
            wire_id: s.wire_id(id.seq, event.emitted_at),
            event: id,
            key: Some(event.payload.key.clone()),
            body: event.payload.body.clone(),
            one_line: event.payload.is_one_line(),
        })
    }
}
