//! A stream: one identity with its own event sequence, state, high-water mark and replay
//! buffer, attached to at most one HTTP connection at a time.

use super::budget::ReplayBudget;
use super::replay_buffer::ReplayBuffer;
use crate::event::{Event, Payload};
use crate::ids::{ConnectionId, EventId, IdContext, IdScheme, ResumptionToken, StreamId};
use crate::time::LabTime;
use crate::vocabulary::{OrphanCause, StreamKind};
use serde::{Deserialize, Serialize};

/// Where a stream is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum StreamState {
    /// Attached, or believed attached: a NAT drop leaves the server believing this.
    Live,
    /// The client is evidently elsewhere; emits still land here until `grace_deadline`, when the
    /// stream is fenced (fenced policy) or closed (naive policy).
    Orphaned {
        since: LabTime,
        grace_deadline: LabTime,
        cause: OrphanCause,
    },
    /// Invalidated: its token resumes nothing and emits onto it are refused.
    Fenced { at: LabTime },
    /// A request stream whose response was sent. Nothing more is emitted, but its events,
    /// result included, stay replayable until `retain_until`: a client cut off before the
    /// result can still resume and fetch it.
    Finished { at: LabTime, retain_until: LabTime },
    /// Ended for good: the session ended, a naive orphan expired, or a finished stream's
    /// retention ran out. Its token resumes nothing.
    Closed { at: LabTime },
}

impl StreamState {
    /// Whether emits still land on the stream.
    pub fn accepts_emits(self) -> bool {
        matches!(self, StreamState::Live | StreamState::Orphaned { .. })
    }

    pub fn label(self) -> &'static str {
        match self {
            StreamState::Live => "live",
            StreamState::Orphaned { .. } => "orphaned",
            StreamState::Fenced { .. } => "fenced",
            StreamState::Finished { .. } => "finished",
            StreamState::Closed { .. } => "closed",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Stream {
    pub(crate) id: StreamId,
    pub(crate) kind: StreamKind,
    pub(crate) token: ResumptionToken,
    pub(crate) ids: IdScheme,
    pub(crate) state: StreamState,
    /// Newest sequence emitted; 0 means only the priming event so far.
    pub(crate) high_water: u64,
    pub(crate) last_emit: Option<LabTime>,
    pub(crate) connection: Option<ConnectionId>,
    pub(crate) buffer: ReplayBuffer,
    pub(crate) opened_at: LabTime,
}

impl Stream {
    pub(crate) fn new(
        id: StreamId,
        kind: StreamKind,
        token: ResumptionToken,
        ids: IdScheme,
        buffer_capacity: usize,
        buffer_bytes: usize,
        now: LabTime,
    ) -> Self {
        Stream {
            id,
            kind,
            token,
            ids,
            state: StreamState::Live,
            high_water: 0,
            last_emit: None,
            connection: None,
            buffer: ReplayBuffer::new(buffer_capacity, buffer_bytes),
            opened_at: now,
        }
    }

    /// Appends the next event, charged to the server's replay budget. The caller has checked
    /// the state accepts emits.
    pub(crate) fn push(
        &mut self,
        now: LabTime,
        payload: Payload,
        budget: &mut ReplayBudget,
    ) -> EventId {
        self.high_water += 1;
        let id = EventId {
            stream: self.id,
            seq: self.high_water,
        };
        let event = Event {
            id,
            payload,
            emitted_at: now,
        };
        budget.charge(&mut self.buffer, |buffer| buffer.push(event));
        self.last_emit = Some(now);
        id
    }

    pub fn id(&self) -> StreamId {
        self.id
    }
    pub fn kind(&self) -> StreamKind {
        self.kind
    }
    pub fn state(&self) -> StreamState {
        self.state
    }
    pub fn high_water(&self) -> u64 {
        self.high_water
    }
    pub fn last_emit(&self) -> Option<LabTime> {
        self.last_emit
    }
    pub fn connection(&self) -> Option<ConnectionId> {
        self.connection
    }
    pub fn id_scheme(&self) -> IdScheme {
        self.ids
    }
    pub fn token(&self) -> ResumptionToken {
        self.token
    }
    pub fn opened_at(&self) -> LabTime {
        self.opened_at
    }
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }
    /// Bytes the replay buffer holds.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.bytes()
    }
    pub fn oldest_buffered(&self) -> Option<u64> {
        self.buffer.oldest_seq()
    }
    /// The wire spelling of one of this stream's event ids, emitted at `at`.
    pub fn wire_id(&self, seq: u64, at: LabTime) -> String {
        self.ids.spell(
            EventId {
                stream: self.id,
                seq,
            },
            self.id_context(at),
        )
    }

    /// What this stream's ids are spelled from beside their position.
    pub fn id_context(&self, at: LabTime) -> IdContext {
        IdContext {
            token: self.token,
            standalone: self.kind == StreamKind::Standalone,
            at,
        }
    }
}

impl Stream {
    /// Canonical form: see [`crate::canon`].
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        c.stream(self.id);
        c.tag(self.kind as u8);
        c.tag(self.ids as u8);
        match self.state {
            StreamState::Live => c.tag(0),
            StreamState::Orphaned {
                grace_deadline,
                cause,
                ..
            } => {
                c.tag(1);
                c.time(grace_deadline);
                c.tag(cause as u8);
            }
            StreamState::Fenced { .. } => c.tag(2),
            StreamState::Finished { retain_until, .. } => {
                c.tag(3);
                c.time(retain_until);
            }
            StreamState::Closed { .. } => c.tag(4),
        }
        c.number(self.high_water);
        c.connection(self.connection);
        c.number(self.buffer.len() as u64);
        for event in self.buffer.iter() {
            c.number(event.id.seq);
            c.key(&event.payload.key);
            c.text(&event.payload.body);
        }
    }
}
