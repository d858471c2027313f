//! The store boundary: where a replica keeps sessions, streams (epoch, holder, high-water, key),
//! their event logs and tool-call progress, so that any replica can serve any request.
//!
//! The store's rules are the core's [`StoreMachine`], once. Two implementations behind one
//! type, [`Store`]:
//! - [`memory`]: that machine behind a lock, in this process, the default (`forkscope serve
//!   --store memory`, the tests);
//! - [`redis`]: a real Redis (`--store redis://HOST:PORT[/DB]`), every operation a Lua script
//!   doing what the machine's method does, so the epoch check and the write it guards are one
//!   atomic step in the store. `tests/store_differential.rs` holds the two to the same answers.
//!
//! The store decides nothing. A replica reads a [`StreamRecord`], the core decides
//! ([`forkscope_core::replica`]), and the store commits on the epoch the replica read; a
//! conflict sends the replica back to read and decide again.
//!
//! [`StoreMachine`]: forkscope_core::replica::store::StoreMachine
//! [`StreamRecord`]: forkscope_core::replica::StreamRecord

pub mod changes;
pub mod memory;
pub mod redis;
pub mod rollback;
mod tasks;

/// The store names sessions by the core's own id type.
pub use forkscope_core::SessionId;
use forkscope_core::replica::StaleEpoch;
use forkscope_core::vocabulary::LogLevel;
use forkscope_core::{Entropy, StreamId};
use std::time::Duration;

/// The store's types and limits are the core's, where its rules are.
pub use forkscope_core::replica::store::{
    Adoption, CallSpec, DEFAULT_MAX_SESSIONS, Events, Floor, LOG_MAXLEN, MAX_KEPT_STREAMS,
    NewStream, Refused, Resumed, Retention, Snapshot, StoreFault, Writer,
};

/// Longest a blocked read waits before the reader looks at the stream's record again.
pub const READ_BLOCK: Duration = Duration::from_millis(250);

/// A new session id, as replicas share it: the core's [`SessionId`] (32 lowercase hex digits on
/// the wire), its 128 bits from the thread's CSPRNG, seeded by the operating system, so it is
/// unguessable. Minted by the replica that answered `initialize`.
pub fn new_session_id() -> SessionId {
    SessionId::generate(&mut ThreadEntropy)
}

/// The thread's CSPRNG as the core's [`Entropy`].
struct ThreadEntropy;

impl Entropy for ThreadEntropy {
    fn next_u64(&mut self) -> u64 {
        rand::random()
    }
}

/// Why the store could not answer. Every one reaches a client as a typed 503 or 404, never as a
/// silent new stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The session is not in the store (never was, ended, or the store restarted empty).
    #[error("no such session in the store")]
    SessionGone,
    #[error("the store is unreachable: {0}")]
    Unavailable(String),
    /// The store answered with something no replica writes.
    #[error("the store holds a record no replica wrote: {0}")]
    Corrupt(String),
    #[error("the store is at capacity: {0}")]
    Full(String),
}

impl StoreError {
    /// The same error, naming the key it was read from when it is a corrupt record.
    pub fn at(self, key: &str) -> StoreError {
        match self {
            StoreError::Corrupt(why) => StoreError::Corrupt(format!("{key}: {why}")),
            other => other,
        }
    }
}

impl From<StoreFault> for StoreError {
    fn from(fault: StoreFault) -> StoreError {
        match fault {
            StoreFault::SessionGone => StoreError::SessionGone,
            StoreFault::Full(what) => StoreError::Full(what),
        }
    }
}

/// The store, in memory or on Redis, as one replica reaches it. One enum rather than a trait
/// object: two variants, and async calls with no boxing on the hot path.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Backend,
    /// The lab's partition switch for this handle ([`Store::with_link`]); `None`: always up.
    link: Option<Link>,
}

#[derive(Clone, Debug)]
enum Backend {
    Memory(memory::MemoryStore),
    /// Boxed: its client and connection manager are far larger than the memory store's handle.
    Redis(Box<redis::RedisStore>),
}

/// A switch that cuts one replica off from the store, for the lab's partition fault. A call
/// made while it is cut waits as long as an unanswered Redis call does, then fails as one: the
/// replica sees what a real partition shows it, and keeps running.
#[derive(Clone, Debug, Default)]
pub struct Link(std::sync::Arc<std::sync::atomic::AtomicBool>);

/// How long a call across a cut link waits before it fails.
pub const PARTITION_STALL: Duration = redis::RESPONSE_TIMEOUT;

impl Link {
    pub fn cut(&self, cut: bool) {
        self.0.store(cut, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_cut(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn check(link: Option<&Link>) -> Result<(), StoreError> {
        match link {
            Some(link) if link.is_cut() => {
                tokio::time::sleep(PARTITION_STALL).await;
                Err(StoreError::Unavailable(
                    "no answer: this replica is partitioned from the store".into(),
                ))
            }
            _ => Ok(()),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {{
        Link::check($self.link.as_ref()).await?;
        match &$self.backend {
            Backend::Memory($s) => $call,
            Backend::Redis($s) => $call,
        }
    }};
}

macro_rules! dispatch_sync {
    ($self:ident, $s:ident => $call:expr) => {
        match &$self.backend {
            Backend::Memory($s) => $call,
            Backend::Redis($s) => $call,
        }
    };
}

impl Store {
    /// A store in this process, on real time.
    pub fn memory(retention: Retention) -> Store {
        Store::memory_on(retention, crate::clock::Time::real())
    }

    /// A store in this process whose leases and TTLs run on `time` (the lab's clock, in the
    /// dashboard's own lab).
    pub fn memory_on(retention: Retention, time: crate::clock::Time) -> Store {
        Store {
            backend: Backend::Memory(memory::MemoryStore::new(retention, time)),
            link: None,
        }
    }

    /// Connects to `url` (`redis://HOST:PORT[/DB]`) and checks that it answers.
    pub async fn redis(url: &str, retention: Retention) -> Result<Store, redis::ConnectError> {
        Ok(Store {
            backend: Backend::Redis(Box::new(redis::RedisStore::connect(url, retention).await?)),
            link: None,
        })
    }

    /// The same store, reached through `link`: the lab cuts it to partition one replica.
    pub fn with_link(&self, link: Link) -> Store {
        Store {
            backend: self.backend.clone(),
            link: Some(link),
        }
    }

    pub fn retention(&self) -> Retention {
        dispatch_sync!(self, s => s.retention())
    }

    pub fn label(&self) -> String {
        dispatch_sync!(self, s => s.label())
    }

    pub async fn open_session(&self, session: &SessionId) -> Result<(), StoreError> {
        dispatch!(self, s => s.open_session(session).await)
    }

    pub async fn session_exists(&self, session: &SessionId) -> Result<bool, StoreError> {
        dispatch!(self, s => s.session_exists(session).await)
    }

    pub async fn end_session(&self, session: &SessionId) -> Result<bool, StoreError> {
        dispatch!(self, s => s.end_session(session).await)
    }

    /// `notifications/cancelled`: the session's running call with this request id (JSON text,
    /// as [`CallSpec::request_id`]) finishes with no result, whichever replica runs it. `None`:
    /// no such call is running.
    pub async fn cancel(
        &self,
        session: &SessionId,
        request_id: &str,
    ) -> Result<Option<StreamId>, StoreError> {
        dispatch!(self, s => s.cancel(session, request_id).await)
    }

    /// Opens a stream; `Ok(Err(epoch))` when the fence's epoch moved since it was read.
    pub async fn open_stream(
        &self,
        session: &SessionId,
        new: &NewStream,
    ) -> Result<Result<StreamId, u64>, StoreError> {
        dispatch!(self, s => s.open_stream(session, new).await)
    }

    /// The number of the session's last background event: a new emitter numbers on from it.
    /// `logging/setLevel`: the session's background events below `level` are withheld.
    pub async fn set_log_level(
        &self,
        session: &SessionId,
        level: LogLevel,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.set_log_level(session, level).await)
    }

    pub async fn background_number(&self, session: &SessionId) -> Result<u64, StoreError> {
        dispatch!(self, s => s.background_number(session).await)
    }

    /// The session's current standalone stream.
    pub async fn standalone(&self, session: &SessionId) -> Result<Option<StreamId>, StoreError> {
        dispatch!(self, s => s.standalone(session).await)
    }

    pub async fn snapshot(
        &self,
        session: &SessionId,
        stream: StreamId,
    ) -> Result<Option<Snapshot>, StoreError> {
        dispatch!(self, s => s.snapshot(session, stream).await)
    }

    /// The stream's record and the events after `after`, at one instant, in one round trip:
    /// what a delivery checks its epoch on and writes. Does not wait for events. `max` bounds
    /// the log entries read: an event apiece in memory, a committed batch (up to 64) on Redis.
    pub async fn replay(
        &self,
        session: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Option<(Snapshot, Events)>, StoreError> {
        dispatch!(self, s => s.replay(session, stream, after, max).await)
    }

    /// A resume, one step: bumps the stream epoch from `expect` (when given), naming `owner`
    /// the holder, then takes the stream's call over from lease epoch `adopt` (when given) if
    /// its lease expired.
    pub async fn resume(
        &self,
        session: &SessionId,
        stream: StreamId,
        expect: Option<u64>,
        adopt: Option<u64>,
        owner: &str,
    ) -> Result<Result<Resumed, StaleEpoch>, StoreError> {
        dispatch!(self, s => s.resume(session, stream, expect, adopt, owner).await)
    }

    pub async fn adopt(
        &self,
        session: &SessionId,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
    ) -> Result<Adoption, StoreError> {
        dispatch!(self, s => s.adopt(session, stream, expect_lease, owner).await)
    }

    /// Appends `events` (none: a lease renewal), finishing the stream after them if `finish`.
    /// Returns the stream's high-water mark after the batch.
    pub async fn append(
        &self,
        session: &SessionId,
        stream: StreamId,
        writer: Writer<'_>,
        events: &[String],
        finish: bool,
    ) -> Result<Result<u64, Refused>, StoreError> {
        dispatch!(self, s => s.append(session, stream, writer, events, finish).await)
    }

    /// A reader for one delivery: waits for events after a cursor.
    pub async fn reader(&self) -> Result<Reader, StoreError> {
        Link::check(self.link.as_ref()).await?;
        let backend = match &self.backend {
            Backend::Memory(s) => ReaderBackend::Memory(s.clone()),
            Backend::Redis(s) => ReaderBackend::Redis(s.reader().await?),
        };
        Ok(Reader {
            backend,
            link: self.link.clone(),
        })
    }
}

/// One delivery's view of a log. On Redis it holds a connection of its own, since a blocked
/// `XREAD` would stall every other command on a shared one.
#[derive(Debug)]
pub struct Reader {
    backend: ReaderBackend,
    link: Option<Link>,
}

#[derive(Debug)]
enum ReaderBackend {
    Memory(memory::MemoryStore),
    Redis(redis::RedisReader),
}

impl Reader {
    /// Up to `max` events after `after`, waiting up to [`READ_BLOCK`] for the first. Empty: none
    /// came in time (the caller looks at the record, then reads again).
    pub async fn read(
        &mut self,
        session: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Events, StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &mut self.backend {
            ReaderBackend::Memory(s) => s.read(session, stream, after, max).await,
            ReaderBackend::Redis(r) => r.read(session, stream, after, max).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SessionId, new_session_id};

    #[test]
    fn session_ids_parse_only_as_generated() {
        let k = new_session_id();
        assert_eq!(SessionId::parse(&k.to_string()), Some(k));
        assert_eq!(SessionId::parse(&k.to_string().to_uppercase()), None);
        assert_eq!(SessionId::parse("abc"), None);
        assert_eq!(SessionId::parse("{x}:meta-000000000000000000000000"), None);
        assert_ne!(new_session_id(), k);
    }
}
