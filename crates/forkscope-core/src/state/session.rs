//! A session: the logical conversation and the streams it has minted.

use super::stream::{Stream, StreamState};
use crate::ids::{SessionId, StreamId};
use crate::time::LabTime;
use crate::vocabulary::{LogLevel, StreamKind};

#[derive(Clone, Debug)]
pub struct Session {
    pub(crate) id: SessionId,
    /// Streams in the order they were minted; ended ones are pruned oldest first.
    pub(crate) streams: Vec<Stream>,
    pub(crate) next_stream: u32,
    /// The standalone stream the client was last attached to.
    pub(crate) active: Option<StreamId>,
    /// The stream the background emitter writes to. It stays on a stream until that stream
    /// ends, which is exactly how, under the naive policy, emits keep landing on an orphan.
    pub(crate) background_target: Option<StreamId>,
    /// Events emitted in the session on standalone streams: the server's session counter.
    pub(crate) counter: u64,
    pub(crate) opened_at: LabTime,
    /// The last request naming the session, or the last connection of it ending.
    pub(crate) last_activity: LabTime,
    /// The level `logging/setLevel` set: log messages less severe are not sent (`None`: all).
    pub(crate) log_level: Option<LogLevel>,
}

impl Session {
    pub(crate) fn new(id: SessionId, now: LabTime) -> Self {
        Session {
            id,
            streams: Vec::new(),
            next_stream: 1,
            active: None,
            background_target: None,
            counter: 0,
            opened_at: now,
            last_activity: now,
            log_level: None,
        }
    }

    /// The level the client set with `logging/setLevel`, if it set one.
    pub fn log_level(&self) -> Option<LogLevel> {
        self.log_level
    }

    pub fn id(&self) -> SessionId {
        self.id
    }
    pub fn active(&self) -> Option<StreamId> {
        self.active
    }
    pub fn background_target(&self) -> Option<StreamId> {
        self.background_target
    }
    pub fn counter(&self) -> u64 {
        self.counter
    }
    pub fn opened_at(&self) -> LabTime {
        self.opened_at
    }
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }
    pub fn last_activity(&self) -> LabTime {
        self.last_activity
    }

    /// Whether a connection is attached to any of its streams: a session in use never idles.
    pub fn in_use(&self) -> bool {
        self.streams.iter().any(|s| s.connection.is_some())
    }

    pub fn stream(&self, id: StreamId) -> Option<&Stream> {
        // Streams are minted in increasing id order and only pruned, so the vector is sorted.
        self.streams
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .map(|i| &self.streams[i])
    }

    pub(crate) fn stream_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.streams
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .map(move |i| &mut self.streams[i])
    }

    /// Standalone streams other than `except` that emits can still land on.
    pub(crate) fn other_standalone_accepting(
        &self,
        except: Option<StreamId>,
    ) -> impl Iterator<Item = &Stream> + '_ {
        self.streams.iter().filter(move |s| {
            s.kind == StreamKind::Standalone && Some(s.id) != except && s.state.accepts_emits()
        })
    }

    /// Live or orphaned standalone streams (more than one at once is a fork in the making).
    pub fn live_standalone_count(&self) -> usize {
        self.other_standalone_accepting(None).count()
    }

    /// Fenced or closed: nothing more is emitted or replayed.
    pub(crate) fn ended(state: StreamState) -> bool {
        matches!(
            state,
            StreamState::Fenced { .. } | StreamState::Closed { .. }
        )
    }

    /// Which stream to forget when the session is at its stream bound: the oldest ended one,
    /// else the oldest finished one (its retention is cut short), else none.
    pub(crate) fn forgettable(&self) -> Option<usize> {
        self.streams
            .iter()
            .position(|s| Self::ended(s.state))
            .or_else(|| {
                self.streams
                    .iter()
                    .position(|s| matches!(s.state, StreamState::Finished { .. }))
            })
    }
}

impl Session {
    /// Streams minted so far, ended and forgotten ones included.
    pub fn streams_opened(&self) -> u32 {
        self.next_stream - 1
    }

    /// Canonical form: see [`crate::canon`].
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        c.session(self.id);
        c.number(self.streams.len() as u64);
        for stream in &self.streams {
            stream.canonical(c);
        }
        c.number(u64::from(self.next_stream));
        let optional = |c: &mut crate::canon::Canon, s: Option<StreamId>| match s {
            None => c.tag(0),
            Some(s) => {
                c.tag(1);
                c.stream(s);
            }
        };
        optional(c, self.active);
        optional(c, self.background_target);
        c.number(self.counter);
        c.time(self.last_activity);
    }
}
