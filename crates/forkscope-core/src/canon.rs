//! The canonical form of a lab state: what the explorer deduplicates on.
//!
//! Two states that differ only in the names chance gave them — session ids and tokens drawn
//! from the random source, connection numbers, the absolute lab time — behave alike from then
//! on, so they are explored once (symmetry reduction). Sessions are renamed by their order,
//! tokens and keyed ids by the stream they name, connections by whether the client holds them,
//! and every deadline becomes "so many ms from now". What only a view reads (when something
//! happened, counters, the anomaly list) is left out; what any later decision reads is kept.
//!
//! A leaf of the core: it reads only the id and time vocabulary, so the server, client and
//! history can each write their own part without depending on the explorer that reads it.

use crate::ids::{ConnectionId, ResumptionToken, SessionId, StreamId, WireCursor};
use crate::time::LabTime;

/// Writes a state's canonical bytes. Each part of the core writes its own fields
/// (`canonical` methods beside the structs), through these helpers.
pub struct Canon {
    now: LabTime,
    /// Sessions in canonical order: the client's first, then by age.
    sessions: Vec<SessionId>,
    /// Each session's short id, spelled as [`SessionId::short`] spells it: a key's prefix
    /// names a session exactly when it is one of these (compared as bytes, not parsed: the
    /// canonical form of a state reads dozens of keys).
    shorts: Vec<[u8; SHORT_LEN]>,
    /// Tokens this thread parsed lately, by spelling: explored states share a handful of
    /// tokens (every one starts from the same seed), and parsing hex was the largest part of
    /// writing a state. Boxed, so handing the buffers back and forth moves a pointer, not the
    /// table; allocated on the first token parsed (a replica model's states have none).
    parsed: Option<Box<Parsed>>,
    /// Every stream the server still knows, by token: `(session ordinal, stream)`.
    tokens: Vec<(ResumptionToken, u8, StreamId)>,
    /// The connections the client is reading, in a fixed order.
    held: Vec<ConnectionId>,
    bytes: Vec<u8>,
    /// Room for [`Canon::unordered`] to sort in.
    runs: Vec<(usize, usize)>,
    written: Vec<u8>,
}

/// What a token names: nothing it can (absent or malformed), nothing the server keeps, or a
/// stream (session ordinal, stream).
#[derive(Clone, Copy, Debug)]
enum Named {
    NotAToken,
    Nothing,
    Stream(u8, StreamId),
}

/// Hex digits in a token.
const TOKEN_LEN: usize = 32;

/// A small cache of [`ResumptionToken::parse`], one entry per slot.
type Parsed = [Option<([u8; TOKEN_LEN], Option<ResumptionToken>)>; 8];

/// Hex digits in a session's short id.
const SHORT_LEN: usize = 6;

/// `bits` in [`SHORT_LEN`] lowercase hex digits, as [`SessionId::short`] writes them.
fn spell_short(bits: u32) -> [u8; SHORT_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut spelled = [0u8; SHORT_LEN];
    for (i, digit) in spelled.iter_mut().enumerate() {
        *digit = HEX[((bits >> (4 * (SHORT_LEN - 1 - i))) & 0xf) as usize];
    }
    spelled
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
        let spare = SPARE.with(|s| std::mem::take(&mut *s.borrow_mut()));
        let mut shorts = spare.shorts;
        shorts.clear();
        shorts.extend(sessions.iter().map(|s| spell_short(s.short_bits())));
        let mut canon = Canon {
            now,
            sessions,
            shorts,
            parsed: spare.parsed,
            tokens: spare.tokens,
            held,
            bytes: spare.bytes,
            runs: spare.runs,
            written: spare.written,
        };
        canon.bytes.clear();
        let mut bound = std::mem::take(&mut canon.tokens);
        bound.clear();
        bound.extend(
            tokens
                .into_iter()
                .map(|(token, session, stream)| (token, canon.ordinal(session), stream)),
        );
        canon.tokens = bound;
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
        let named = match token.and_then(|text| self.parse_token(text)) {
            None => Named::NotAToken,
            Some(t) => match self.tokens.iter().find(|(k, _, _)| *k == t) {
                None => Named::Nothing,
                Some(&(_, session, stream)) => Named::Stream(session, stream),
            },
        };
        match named {
            Named::NotAToken => self.tag(0),
            Named::Nothing => self.tag(1),
            Named::Stream(session, stream) => {
                self.tag(2);
                self.tag(session);
                self.stream(stream);
            }
        }
    }

    /// [`ResumptionToken::parse`], remembered.
    fn parse_token(&mut self, text: &str) -> Option<ResumptionToken> {
        let Ok(spelled) = <[u8; TOKEN_LEN]>::try_from(text.as_bytes()) else {
            return ResumptionToken::parse(text);
        };
        let table = self.parsed.get_or_insert_with(Box::default);
        let slot =
            usize::from(spelled[TOKEN_LEN - 1] ^ (spelled[TOKEN_LEN - 2] << 3)) % table.len();
        if let Some((known, parsed)) = &table[slot] {
            if *known == spelled {
                return *parsed;
            }
        }
        let parsed = ResumptionToken::parse(text);
        table[slot] = Some((spelled, parsed));
        parsed
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

    /// The session ordinal a key's `<session short>:` prefix names.
    fn key_session(&self, key: &str) -> (u8, usize) {
        let Some((prefix, _)) = key.split_once(':') else {
            return (GONE, 0);
        };
        let ordinal = self
            .shorts
            .iter()
            .position(|s| s.as_slice() == prefix.as_bytes())
            .map_or(GONE, |i| u8::try_from(i).unwrap_or(GONE));
        (ordinal, prefix.len() + 1)
    }

    /// A side effect's key, `<session short>:<rest>`, with the session renamed.
    pub(crate) fn key(&mut self, key: &str) {
        let (ordinal, skip) = self.key_session(key);
        self.tag(ordinal);
        self.text(&key[skip..]);
    }

    /// Whether a side effect's key belongs to a session the server still holds.
    pub(crate) fn key_known(&self, key: &str) -> bool {
        self.key_session(key).0 != GONE
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
        // Each item is written in place, then the runs are reordered: no allocation per item,
        // nor (once the buffers have grown) per state.
        let start = self.bytes.len();
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        for item in items {
            let from = self.bytes.len() - start;
            write(self, item);
            runs.push((from, self.bytes.len() - start));
        }
        let mut written = std::mem::take(&mut self.written);
        written.clear();
        written.extend_from_slice(&self.bytes[start..]);
        self.bytes.truncate(start);
        runs.sort_unstable_by(|a, b| written[a.0..a.1].cmp(&written[b.0..b.1]));
        self.number(runs.len() as u64);
        for &(from, to) in &runs {
            self.number((to - from) as u64);
            self.bytes.extend_from_slice(&written[from..to]);
        }
        // An `unordered` inside `write` found these taken and used its own.
        self.runs = runs;
        self.written = written;
    }

    /// 128 bits of the canonical bytes: what the explorer keeps per visited state. Two
    /// lanes with unrelated keys, so a collision (two states taken for one) needs both to
    /// collide: among ten million states, less than one chance in 10²⁴.
    pub(crate) fn fingerprint(&self) -> u128 {
        let (a, b) = hash128(&self.bytes);
        (u128::from(a) << 64) | u128::from(b)
    }
}

impl Drop for Canon {
    /// Hands the buffers back for the next state: allocations per thread, not per state.
    fn drop(&mut self) {
        let spare = Spare {
            bytes: std::mem::take(&mut self.bytes),
            shorts: std::mem::take(&mut self.shorts),
            parsed: self.parsed.take(),
            tokens: std::mem::take(&mut self.tokens),
            runs: std::mem::take(&mut self.runs),
            written: std::mem::take(&mut self.written),
        };
        SPARE.with(|s| *s.borrow_mut() = spare);
    }
}

/// A finished [`Canon`]'s buffers, kept for the next one on the same thread.
#[derive(Default)]
struct Spare {
    bytes: Vec<u8>,
    shorts: Vec<[u8; SHORT_LEN]>,
    parsed: Option<Box<Parsed>>,
    tokens: Vec<(ResumptionToken, u8, StreamId)>,
    runs: Vec<(usize, usize)>,
    written: Vec<u8>,
}

thread_local! {
    static SPARE: std::cell::RefCell<Spare> = std::cell::RefCell::new(Spare::default());
}

/// The keys of the fingerprint's two lanes: bits spread, unrelated (digits of π and e).
const KEYS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7345,
    0xb7e1_5162_8aed_2a6b,
    0x9e37_79b9_7f4a_7c15,
];

/// A 64×64→128 multiply, folded: every bit of either factor reaches the whole result (the
/// mixing step of wyhash and foldhash).
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Two 64-bit hashes of `bytes`, 16 bytes a multiply in each lane. The lanes take the words
/// in opposite roles and under different keys, and run side by side: the canonical bytes of
/// a state run to a kilobyte or two, and hashing them was the largest single cost of a step.
/// Not keyed against an adversary — the states are the lab's own — only against chance.
fn hash128(bytes: &[u8]) -> (u64, u64) {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let len = bytes.len() as u64;
    let (mut a, mut b) = (KEYS[0] ^ len, KEYS[2] ^ len.rotate_left(32));
    let mut blocks = bytes.chunks_exact(16);
    for block in &mut blocks {
        let (w0, w1) = (word(&block[..8]), word(&block[8..]));
        a = fold(a ^ w0, KEYS[1] ^ w1);
        b = fold(b ^ w1, KEYS[3] ^ w0);
    }
    let mut last = [0u8; 16];
    last[..blocks.remainder().len()].copy_from_slice(blocks.remainder());
    let (w0, w1) = (word(&last[..8]), word(&last[8..]));
    a = fold(a ^ w0, KEYS[1] ^ w1);
    b = fold(b ^ w1, KEYS[3] ^ w0);
    (fold(a, KEYS[0] ^ KEYS[3]), fold(b, KEYS[2] ^ KEYS[1]))
}
