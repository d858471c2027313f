//! The canonical form of a lab state: what the explorer deduplicates on.
//!
//! Two states that differ only in the names chance gave them — session ids and tokens drawn
//! from the random source, connection numbers, the absolute lab time — behave alike from then
//! on, so they are explored once (symmetry reduction). Sessions are renamed by their order,
//! tokens and keyed ids by the stream they name, connections by whether the client holds them,
//! and every deadline becomes "so many ms from now". What only a view reads (when something
//! happened, counters, the anomaly list) is left out; what any later decision reads is kept.

use crate::ids::{ConnectionId, ResumptionToken, SessionId, StreamId, WireCursor};
use crate::time::LabTime;
use std::hash::{Hash, Hasher};

/// Writes a state's canonical bytes. Each part of the core writes its own fields
/// (`canonical` methods beside the structs), through these helpers.
pub struct Canon {
    now: LabTime,
    /// Sessions in canonical order: the client's first, then by age.
    sessions: Vec<SessionId>,
    shorts: Vec<String>,
    /// Every stream the server still knows, by token: `(session ordinal, stream)`.
    tokens: Vec<(ResumptionToken, u8, StreamId)>,
    /// The connections the client is reading, in a fixed order.
    held: Vec<ConnectionId>,
    bytes: Vec<u8>,
}

/// Ordinal written for a session the server no longer holds.
const GONE: u8 = u8::MAX;

impl Canon {
    pub(crate) fn new(
        now: LabTime,
        sessions: Vec<SessionId>,
        tokens: impl IntoIterator<Item = (ResumptionToken, SessionId, StreamId)>,
        held: Vec<ConnectionId>,
    ) -> Self {
        let shorts = sessions.iter().map(SessionId::short).collect();
        let mut canon = Canon {
            now,
            sessions,
            shorts,
            tokens: Vec::new(),
            held,
            bytes: Vec::with_capacity(512),
        };
        canon.tokens = tokens
            .into_iter()
            .map(|(token, session, stream)| (token, canon.ordinal(session), stream))
            .collect();
        canon
    }

    fn ordinal(&self, session: SessionId) -> u8 {
        self.sessions
            .iter()
            .position(|s| *s == session)
            .map_or(GONE, |i| u8::try_from(i).unwrap_or(GONE))
    }

    pub(crate) fn tag(&mut self, tag: u8) {
        self.bytes.push(tag);
    }

    pub(crate) fn flag(&mut self, flag: bool) {
        self.bytes.push(u8::from(flag));
    }

    pub(crate) fn number(&mut self, n: u64) {
        self.bytes.extend_from_slice(&n.to_le_bytes());
    }

    pub(crate) fn stream(&mut self, stream: StreamId) {
        self.bytes.extend_from_slice(&stream.0.to_le_bytes());
    }

    pub(crate) fn session(&mut self, session: SessionId) {
        let ordinal = self.ordinal(session);
        self.bytes.push(ordinal);
    }

    /// A connection a stream is attached to: none, one the client reads (which one), or one
    /// nobody reads any more (all alike: nothing will ever close them).
    pub(crate) fn connection(&mut self, connection: Option<ConnectionId>) {
        match connection {
            None => self.tag(0),
            Some(c) => match self.held.iter().position(|h| *h == c) {
                Some(i) => {
                    self.tag(1);
                    self.number(i as u64);
                }
                None => self.tag(2),
            },
        }
    }

    /// Whether `session` is one the server still holds.
    pub(crate) fn known(&self, session: SessionId) -> bool {
        self.ordinal(session) != GONE
    }

    /// A deadline or instant, as its distance from now (negative: past).
    pub(crate) fn time(&mut self, at: LabTime) {
        let from_now = i128::from(at.as_millis()) - i128::from(self.now.as_millis());
        self.bytes.extend_from_slice(&from_now.to_le_bytes());
    }

    pub(crate) fn opt_time(&mut self, at: Option<LabTime>) {
        match at {
            None => self.tag(0),
            Some(at) => {
                self.tag(1);
                self.time(at);
            }
        }
    }

    /// A token as the stream it names (or "names nothing the server keeps").
    pub(crate) fn token(&mut self, token: Option<&str>) {
        let named = token
            .and_then(ResumptionToken::parse)
            .map(|t| self.tokens.iter().find(|(k, _, _)| *k == t).copied());
        match named {
            None => self.tag(0),
            Some(None) => self.tag(1),
            Some(Some((_, session, stream))) => {
                self.tag(2);
                self.tag(session);
                self.stream(stream);
            }
        }
    }

    /// A wire event id or `Last-Event-ID`: its spelling, with a stream key replaced by the
    /// stream it names.
    pub(crate) fn cursor(&mut self, cursor: Option<&str>) {
        let Some(raw) = cursor else {
            self.tag(0);
            return;
        };
        match WireCursor::parse(raw) {
            None => {
                self.tag(1);
                self.text(raw);
            }
            Some(WireCursor::Bare(seq)) => {
                self.tag(2);
                self.number(seq);
            }
            Some(WireCursor::Scoped(event)) => {
                self.tag(3);
                self.stream(event.stream);
                self.number(event.seq);
            }
            Some(WireCursor::Keyed { event, key }) => {
                self.tag(4);
                self.stream(event.stream);
                self.number(event.seq);
                match self.tokens.iter().find(|(t, _, _)| t.stream_key() == key) {
                    Some(&(_, session, stream)) => {
                        self.tag(session);
                        self.stream(stream);
                    }
                    None => self.tag(GONE),
                }
            }
        }
    }

    /// A side effect's key, `<session short>:<rest>`, with the session renamed.
    pub(crate) fn key(&mut self, key: &str) {
        let (prefix, rest) = key.split_once(':').unwrap_or(("", key));
        let ordinal = self
            .shorts
            .iter()
            .position(|s| s == prefix)
            .map_or(GONE, |i| u8::try_from(i).unwrap_or(GONE));
        self.tag(ordinal);
        self.text(rest);
    }

    /// Whether a side effect's key belongs to a session the server still holds.
    pub(crate) fn key_known(&self, key: &str) -> bool {
        let prefix = key.split_once(':').map_or("", |(p, _)| p);
        self.shorts.iter().any(|s| s == prefix)
    }

    pub(crate) fn text(&mut self, text: &str) {
        self.number(text.len() as u64);
        self.bytes.extend_from_slice(text.as_bytes());
    }

    /// Items whose order means nothing (a hash map's): written sorted by their own bytes.
    pub(crate) fn unordered<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        mut write: impl FnMut(&mut Canon, T),
    ) {
        let outer = std::mem::take(&mut self.bytes);
        let mut parts = Vec::new();
        for item in items {
            write(self, item);
            parts.push(std::mem::take(&mut self.bytes));
        }
        self.bytes = outer;
        parts.sort_unstable();
        self.number(parts.len() as u64);
        for part in parts {
            self.number(part.len() as u64);
            self.bytes.extend_from_slice(&part);
        }
    }

    /// 128 bits of the canonical bytes: what the explorer keeps per visited state.
    pub(crate) fn fingerprint(&self) -> u128 {
        let half = |salt: u8| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            salt.hash(&mut hasher);
            self.bytes.hash(&mut hasher);
            hasher.finish()
        };
        (u128::from(half(1)) << 64) | u128::from(half(2))
    }
}
