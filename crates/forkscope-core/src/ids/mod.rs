//! Identities: sessions, streams, events, resumption tokens, connections, and the wire
//! encoding of event ids.
//!
//! The seed's core distinction lives here: a *session* (the conversation, `Mcp-Session-Id`) is
//! not a *stream* (one server-initiated SSE sequence, named by its resumption token). Randomness
//! comes in from the caller through [`Entropy`], so a seeded lab is reproducible while the real
//! server draws from the operating system.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A source of random bits supplied by the caller. The wire server implements it with the
/// operating system's CSPRNG; tests and scripted labs use a seeded [`SplitMix64`].
pub trait Entropy {
    fn next_u64(&mut self) -> u64;

    fn next_u128(&mut self) -> u128 {
        (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64())
    }
}

/// A small deterministic generator for tests and reproducible labs. Not for tokens that leave
/// the machine: predictable by design.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
}

impl Entropy for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

// Every id has exactly one spelling, the one the server writes, and a parser here accepts
// nothing else. A second spelling (`s1-01` for `s1-1`, an uppercase session id) would be the
// same id to the server but a different string to everything that compares ids as text: a
// client deduplicating replays, a log, a cache keyed on the header.

/// Reads exactly `len` lowercase hex digits: hex ids are fixed width, so their leading zeros
/// belong to the one spelling, and `{:x}` writes lowercase.
fn parse_hex(s: &str, len: usize) -> Option<u128> {
    if s.len() != len || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u128::from_str_radix(s, 16).ok()
}

fn parse_hex128(s: &str) -> Option<u128> {
    parse_hex(s, 32)
}

/// Reads a decimal number as `{}` writes it: ASCII digits, no sign, no whitespace, and no
/// leading zero unless the number is 0. `str::parse` alone would also take `+1` and `01`.
pub fn parse_decimal<T: std::str::FromStr>(s: &str) -> Option<T> {
    let canonical = match s.as_bytes() {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    canonical.then(|| s.parse().ok()).flatten()
}

/// The logical conversation: 128 random bits, sent as `Mcp-Session-Id` in 32 hex digits.
/// Serialized as that hex string: 128 bits do not fit a JSON number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct SessionId(u128);

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.to_string()
    }
}

/// An id read back from text (a saved file, a header) that is not in its one spelling.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{0:?} is not a session id (32 hex digits)")]
    NotASession(String),
    /// The text is not echoed: it was meant to be a credential.
    #[error("not a resumption token (32 hex digits)")]
    NotAToken,
}

impl TryFrom<String> for SessionId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        SessionId::parse(&s).ok_or(IdError::NotASession(s))
    }
}

impl SessionId {
    pub fn generate(rng: &mut impl Entropy) -> Self {
        SessionId(rng.next_u128())
    }

    /// Parses the wire form; `None` for anything that is not 32 lowercase hex digits.
    pub fn parse(s: &str) -> Option<Self> {
        parse_hex128(s).map(SessionId)
    }

    /// Reads back what [`SessionId::short`] wrote (6 lowercase hex digits) as its bits.
    pub fn parse_short(s: &str) -> Option<u32> {
        parse_hex(s, 6).map(|bits| bits as u32)
    }

    /// The first 6 hex digits: enough to tell sessions apart on a dashboard.
    pub fn short(&self) -> String {
        format!("{:06x}", self.short_bits())
    }

    /// The number [`SessionId::short`] spells.
    pub fn short_bits(&self) -> u32 {
        (self.0 >> 104) as u32
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A task of the tasks extension: minted by the server "with sufficient entropy" ([EXT]:902),
/// 128 random bits, spelled as 32 lowercase hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct TaskId(u128);

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.to_string()
    }
}

impl TaskId {
    pub fn generate(rng: &mut impl Entropy) -> Self {
        TaskId(rng.next_u128())
    }

    /// Parses the wire form; `None` for anything that is not 32 lowercase hex digits.
    pub fn parse(s: &str) -> Option<Self> {
        parse_hex128(s).map(TaskId)
    }

    /// The first 6 hex digits, for a dashboard.
    pub fn short(&self) -> String {
        format!("{:06x}", self.0 >> 104)
    }

    /// Where a store keeps the task: its top 16 bits. A store that shards (Redis Cluster) keeps
    /// a task and its idempotency key together by this, so a keyed task is minted at its key's
    /// home ([`TaskId::at_home`]); the other 112 bits stay random, so the id stays unguessable.
    pub fn home(&self) -> u16 {
        (self.0 >> 112) as u16
    }

    /// The same id, moved to `home`.
    pub fn at_home(self, home: u16) -> Self {
        TaskId((self.0 & !(0xffff << 112)) | (u128::from(home) << 112))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// One replica of a lab that runs several behind a balancer, spelled `A`, `B`, … in the order
/// the lab started them: what the history tags each server-side fact with, so a fork across
/// replicas is named by the replicas it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaId(u8);

impl ReplicaId {
    /// The most replicas a lab runs: one letter each.
    pub const MAX: u8 = 26;

    pub fn new(index: u8) -> Option<ReplicaId> {
        (index < Self::MAX).then_some(ReplicaId(index))
    }

    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The replica's name, `A`, as `Display` writes it, without an allocation.
    pub fn name(self) -> &'static str {
        const NAMES: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let i = self.index();
        &NAMES[i..=i]
    }

    /// Reads a replica's name, `A`, only as `Display` writes it.
    pub fn parse(s: &str) -> Option<ReplicaId> {
        match s.as_bytes() {
            [c @ b'A'..=b'Z'] => Some(ReplicaId(c - b'A')),
            _ => None,
        }
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", char::from(b'A' + self.0))
    }
}

impl Serialize for ReplicaId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ReplicaId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ReplicaId::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not a replica (A to Z)")))
    }
}

/// Which replica made a fact, and the stream epoch it held when it did (`None` under naive,
/// which takes none). The epoch orders facts the way the store did: a send made on an older
/// epoch than an attach was handed over before that attach, whenever it is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ByReplica {
    pub replica: ReplicaId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

impl ByReplica {
    /// Whether this fact was made on an epoch older than `other`'s: before `other` in the
    /// store's order.
    pub fn precedes(&self, other: &ByReplica) -> bool {
        matches!((self.epoch, other.epoch), (Some(a), Some(b)) if a < b)
    }
}

/// One stream identity within a session, numbered from 1 in the order the session minted them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StreamId(pub u32);

impl StreamId {
    /// Reads a stream's name, `s7`, only as [`StreamId`]'s `Display` writes it.
    pub fn parse(s: &str) -> Option<Self> {
        parse_decimal(s.strip_prefix('s')?).map(StreamId)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// The per-stream position of an event. Sequence 0 is the priming event every stream opens
/// with (an id and empty data), so a client has a cursor before any real event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventId {
    pub stream: StreamId,
    pub seq: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.stream, self.seq)
    }
}

/// How a stream spells its event ids on the wire (condition 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdScheme {
    /// `s2-41`: the id names its stream, so it is unique across the session and a cursor can be
    /// co-validated against the token.
    Scoped,
    /// `41`: a bare counter. Two streams of one session reuse the same ids (the naive server).
    Bare,
    /// `s2-41.<key>`: a scoped id that also carries the stream's key — 64 unguessable bits of
    /// its resumption token, in 11 base64url characters — so `Last-Event-ID` alone proves
    /// stream identity. Stock MCP clients keep `Last-Event-ID` and drop unknown headers; with
    /// these ids they resume under the fenced policy.
    Keyed,
    /// `s2_0001780000041337_kqzrtwbx` — the TypeScript SDK's store: stream, millisecond,
    /// random; the standalone stream is spelled `_GET_stream`, which its store cannot read
    /// back. Sorting these ids is not sorting events: one millisecond's sort at random.
    Timestamped,
    /// `9f2c41d0-…`: a uuid per event (the Python SDK's example store). Says nothing of its
    /// stream or position: only the store can tell.
    Uuid,
    /// No id at all (the Python SDK without a store): nothing to resume from.
    Unnumbered,
    /// `41` on the standalone stream, `41/2` on a tool call's (rmcp's session cache).
    Indexed,
}

/// Longest `Last-Event-ID` the core will parse; anything longer is malformed, not truncated.
/// The longest well-formed id, `s<u32>-<u64>.<11 base64url>`, is 44 bytes.
pub const MAX_CURSOR_LEN: usize = 80;

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// Characters a stream key spells in: 64 bits, 6 at a time.
const KEY_LEN: usize = 11;

/// Appends a stream key as 11 base64url characters, most significant first.
fn push_key(out: &mut String, key: u64) {
    for i in (0..KEY_LEN).rev() {
        out.push(BASE64URL[((key >> (6 * i)) & 63) as usize] as char);
    }
}

/// Reads 11 base64url characters back into a key; `None` for anything else (or past 64 bits).
fn parse_key(s: &str) -> Option<u64> {
    if s.len() != KEY_LEN {
        return None;
    }
    let mut key: u64 = 0;
    for (i, b) in s.bytes().enumerate() {
        let v = BASE64URL.iter().position(|c| *c == b)? as u64;
        if i == 0 && v > 15 {
            return None; // 66 bits spelled; the top two must be zero
        }
        key = (key << 6) | v;
    }
    Some(key)
}

/// What an id is spelled from beside its stream and position: the stream's token, whether it
/// is the standalone stream, and when the event was emitted (the SDK spellings use them).
#[derive(Clone, Copy, Debug)]
pub struct IdContext {
    pub token: ResumptionToken,
    pub standalone: bool,
    pub at: crate::time::LabTime,
}

impl IdScheme {
    /// The wire spelling of an event id of the stream `token` names, under this scheme. For the
    /// SDK spellings that need more (the time, the stream's kind) see [`IdScheme::spell`].
    pub fn encode(self, id: EventId, token: ResumptionToken) -> String {
        self.spell(
            id,
            IdContext {
                token,
                standalone: false,
                at: crate::time::LabTime::ZERO,
            },
        )
    }

    /// The wire spelling of an event id; empty under [`IdScheme::Unnumbered`].
    pub fn spell(self, id: EventId, cx: IdContext) -> String {
        // A per-event "random" part that replays: mixed from the stream's key and the position.
        let mixed = |salt: u64| splitmix(cx.token.stream_key() ^ id.seq.wrapping_mul(salt));
        match self {
            IdScheme::Timestamped => {
                let stream = if cx.standalone {
                    "_GET_stream".to_string()
                } else {
                    id.stream.to_string()
                };
                let mut random = String::with_capacity(8);
                let mut r = mixed(0x9e37_79b9_7f4a_7c15);
                for _ in 0..8 {
                    random.push((b'a' + (r % 26) as u8) as char);
                    r /= 26;
                }
                // A wall-clock-like millisecond of 16 digits, so ids sort as numbers do.
                let ms = TIMESTAMP_EPOCH_MS + cx.at.as_millis();
                format!("{stream}_{ms:016}_{random}")
            }
            IdScheme::Uuid => {
                let (hi, lo) = (mixed(0xd6e8_feb8_6659_fd93), mixed(0xa076_1d64_78bd_642f));
                format!(
                    "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                    hi >> 32,
                    (hi >> 16) & 0xffff,
                    hi & 0xfff,
                    (lo >> 48) & 0x3fff | 0x8000,
                    lo & 0xffff_ffff_ffff
                )
            }
            IdScheme::Unnumbered => String::new(),
            _ => {
                let (prefix, suffix) = self
                    .affixes(id.stream, cx.token, cx.standalone)
                    .expect("a counter scheme");
                format!("{prefix}{}{suffix}", id.seq)
            }
        }
    }

    /// What every id of `stream` spells before and after its sequence number (`s2-` and
    /// `.<key>` for keyed ids): a replay spells a thousand ids from one pair. `None` for the
    /// schemes whose ids are not a counter between two fixed strings.
    pub fn affixes(
        self,
        stream: StreamId,
        token: ResumptionToken,
        standalone: bool,
    ) -> Option<(String, String)> {
        Some(match self {
            IdScheme::Bare => (String::new(), String::new()),
            IdScheme::Scoped => (format!("{stream}-"), String::new()),
            IdScheme::Keyed => {
                let mut suffix = String::with_capacity(KEY_LEN + 1);
                suffix.push('.');
                push_key(&mut suffix, token.stream_key());
                (format!("{stream}-"), suffix)
            }
            IdScheme::Indexed if standalone => (String::new(), String::new()),
            IdScheme::Indexed => (String::new(), format!("/{}", stream.0)),
            IdScheme::Timestamped | IdScheme::Uuid | IdScheme::Unnumbered => return None,
        })
    }

    /// Whether two streams of one session can spell the same id (condition 3 broken).
    pub fn reuses_ids(self) -> bool {
        matches!(self, IdScheme::Bare)
    }
}

/// Where [`IdScheme::Timestamped`] counts milliseconds from: lab time 0 reads as a recent
/// wall-clock millisecond, as the TypeScript SDK's `Date.now()` does.
const TIMESTAMP_EPOCH_MS: u64 = 1_780_000_000_000;

/// SplitMix64's finaliser: a fixed, well-spread mix of 64 bits.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A `Last-Event-ID` as the client sent it, parsed but not yet validated against any stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WireCursor {
    /// `s2-41`: names stream and position.
    Scoped(EventId),
    /// `41`: a position with no stream identity.
    Bare(u64),
    /// `s2-41.<key>`: names stream and position, and carries the stream's key.
    Keyed { event: EventId, key: u64 },
}

impl WireCursor {
    /// Parses `s<stream>-<seq>`, `s<stream>-<seq>.<key>` or `<seq>`, each only as the server
    /// spells it, so an accepted cursor displays as the very string that was sent. Empty,
    /// overlong, signed, padded, zero-led or otherwise odd input is `None`: the caller reports
    /// it as malformed rather than guessing.
    pub fn parse(s: &str) -> Option<Self> {
        if s.is_empty() || s.len() > MAX_CURSOR_LEN {
            return None;
        }
        if s.starts_with('s') {
            let (stream, rest) = s.split_once('-')?;
            let (seq, key) = match rest.split_once('.') {
                Some((seq, key)) => (seq, Some(parse_key(key)?)),
                None => (rest, None),
            };
            let event = EventId {
                stream: StreamId::parse(stream)?,
                seq: parse_decimal(seq)?,
            };
            Some(match key {
                Some(key) => WireCursor::Keyed { event, key },
                None => WireCursor::Scoped(event),
            })
        } else {
            parse_decimal(s).map(WireCursor::Bare)
        }
    }

    pub fn seq(self) -> u64 {
        match self {
            WireCursor::Scoped(id) | WireCursor::Keyed { event: id, .. } => id.seq,
            WireCursor::Bare(seq) => seq,
        }
    }

    /// The stream and position, when the spelling names a stream.
    pub fn event(self) -> Option<EventId> {
        match self {
            WireCursor::Scoped(id) | WireCursor::Keyed { event: id, .. } => Some(id),
            WireCursor::Bare(_) => None,
        }
    }

    /// The stream key the id carries (keyed spelling only).
    pub fn key(self) -> Option<u64> {
        match self {
            WireCursor::Keyed { key, .. } => Some(key),
            _ => None,
        }
    }
}

impl fmt::Display for WireCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireCursor::Scoped(id) => write!(f, "{}-{}", id.stream, id.seq),
            WireCursor::Keyed { event, key } => {
                let mut spelled = String::with_capacity(KEY_LEN);
                push_key(&mut spelled, *key);
                write!(f, "{}-{}.{spelled}", event.stream, event.seq)
            }
            WireCursor::Bare(seq) => write!(f, "{seq}"),
        }
    }
}

/// A resumption token: 128 random bits naming one stream of one session. The server keeps the
/// binding token → (session, stream); the token itself carries nothing guessable. Serialized as
/// its 32 hex digits (128 bits do not fit a JSON number).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct ResumptionToken(u128);

impl From<ResumptionToken> for String {
    fn from(token: ResumptionToken) -> String {
        token.to_string()
    }
}

impl TryFrom<String> for ResumptionToken {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        ResumptionToken::parse(&s).ok_or(IdError::NotAToken)
    }
}

impl ResumptionToken {
    pub fn generate(rng: &mut impl Entropy) -> Self {
        ResumptionToken(rng.next_u128())
    }

    pub fn parse(s: &str) -> Option<Self> {
        parse_hex128(s).map(ResumptionToken)
    }

    /// The 64 bits of the token a keyed event id carries: enough that no one guesses them, and
    /// 21 bytes shorter on every event than the whole token.
    pub fn stream_key(&self) -> u64 {
        self.0 as u64
    }
}

impl fmt::Display for ResumptionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for ResumptionToken {
    /// Never prints the secret in full: logs and snapshots show a prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResumptionToken({:08x}…)", self.0 >> 96)
    }
}

/// An HTTP connection as the adapter numbers them. The core uses it to detach a stream's old,
/// possibly half-open connection atomically with a resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConnectionId(pub u64);

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

#[cfg(test)]
mod tests;
