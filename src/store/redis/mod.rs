//! The store on Redis. Every compare-and-set is a Lua script (`lua/`), so the epoch check and
//! the write it guards happen as one step inside Redis; never `WATCH` on the shared multiplexed
//! connection, where other requests' commands interleave with a transaction's.
//!
//! Keys: `fs:{SESSION}:meta` (a hash: stream counter, the standalone stream), `fs:{SESSION}:s:N`
//! (a stream's record: epoch, holder, high-water, key, and a call's lease and progress) and
//! `fs:{SESSION}:log:N` (a Redis Stream of its events, one entry per committed batch, the entry's
//! id `SEQ-1` its last event's; trimmed by `MINID` to the newest `Retention::log_events` events,
//! whole batches, so up to one batch more). One session's keys share the hash tag `{SESSION}`,
//! so each script stays on one shard of a Redis Cluster, and every one of them expires: sessions
//! when idle, a finished call's stream after its retention. The one key shared between sessions
//! is the sessions index `fs:sessions`, which the session cap counts.
//!
//! Cross-replica delivery reads the log with `XREAD BLOCK` from the client's cursor: replay and
//! live tail are one read, so the hand-off between them has no gap and no duplicate (pub/sub
//! beside a log needs subscribe, read, and dedupe, and loses what lands between them).

mod log_level;
mod reader;
mod replies;
pub mod tasks;
mod url;
pub use reader::RedisReader;
pub use url::parse_url;

pub(super) use replies::{classify, unavailable};
use replies::{corrupt, entries_of, ints_and_text, kind_name, pack, read_entries, read_record};

use super::{
    Adoption, CallSpec, Events, Floor, NewStream, READ_BLOCK, Refused, Resumed, Retention,
    SessionId, Snapshot, StoreError, Writer,
};
use forkscope_core::StreamId;
use forkscope_core::replica::StaleEpoch;
use forkscope_core::vocabulary::BACKGROUND_SEVERITY;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, RedisError, Script, Value};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// How long one command may take before the store counts as unreachable.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1_000);

struct Scripts {
    open_session: Script,
    alloc_stream: Script,
    open_stream: Script,
    snapshot: Script,
    resume: Script,
    adopt: Script,
    append: Script,
    cancel: Script,
    set_log_level: Script,
}

/// A script that touches a session, with the one idle-expiry rule (`touch.lua`) before it.
macro_rules! touching {
    ($($file:literal),+) => {
        Script::new(concat!(
            include_str!("../lua/touch.lua"),
            $(include_str!(concat!("../lua/", $file))),+
        ))
    };
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    open_session: Script::new(include_str!("../lua/open_session.lua")),
    alloc_stream: touching!("alloc_stream.lua"),
    open_stream: touching!("open_stream.lua"),
    snapshot: touching!("snapshot.lua"),
    resume: touching!("take_over.lua", "resume.lua"),
    adopt: touching!("take_over.lua", "adopt.lua"),
    append: touching!("append.lua"),
    cancel: touching!("cancel.lua"),
    set_log_level: touching!("set_log_level.lua"),
});

/// The idle-expiry rule alone, for the reads that are no script (a replay's `MULTI`): sent as
/// `EVAL` inside the transaction. KEYS: meta, stream, log; ARGV: idle_ms.
const TOUCH: &str = concat!(
    include_str!("../lua/touch.lua"),
    "touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))\n"
);

/// Why `--store redis://…` could not be used at start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{url:?} is not a Redis URL (redis://HOST:PORT[/DB]): {why}")]
    BadUrl { url: String, why: String },
    #[error("Redis at {url} is unreachable: {why}")]
    Unreachable { url: String, why: String },
}

#[derive(Clone)]
pub struct RedisStore {
    pub(super) client: Client,
    conn: ConnectionManager,
    url: Arc<str>,
    retention: Retention,
    pub(super) task_changes: Arc<crate::store::changes::ChangeFeed>, // woken by the task scripts' PUBLISH
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .finish()
    }
}

/// The sessions index: each live session, scored by when it opened, for the session cap. The
/// one key not of a single session (see ARCHITECTURE.md: in a cluster it would be per shard).
const SESSIONS: &str = "fs:sessions";

fn meta(s: &SessionId) -> String {
    format!("fs:{{{s}}}:meta")
}
fn stream_key(s: &SessionId, stream: StreamId) -> String {
    format!("fs:{{{s}}}:s:{}", stream.0)
}
fn log_key(s: &SessionId, stream: StreamId) -> String {
    format!("fs:{{{s}}}:log:{}", stream.0)
}

impl RedisStore {
    pub async fn connect(url: &str, retention: Retention) -> Result<RedisStore, ConnectError> {
        let client = parse_url(url)?;
        let unreachable = |e: RedisError| ConnectError::Unreachable {
            url: url.to_owned(),
            why: e.to_string(),
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1);
        let mut conn = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(unreachable)?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(RedisStore {
            client,
            conn,
            url: url.into(),
            retention,
            task_changes: Arc::default(),
        })
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    pub fn label(&self) -> String {
        self.url.to_string()
    }

    /// The shared connection for one command or script.
    pub(super) fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Opens a session unless the store already holds `max_sessions` (counted in the sessions
    /// index, `fs:sessions`, one entry per session while its record lives).
    pub async fn open_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let cap = self.retention.max_sessions;
        let mut invocation = SCRIPTS.open_session.prepare_invoke();
        invocation
            .key(SESSIONS)
            .key(meta(session))
            .arg(cap)
            .arg(self.retention.session_idle_ms)
            .arg(session.to_string());
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, SESSIONS))?;
        match ints_and_text(&reply).as_deref() {
            Some([(1, _)]) => Ok(()),
            Some([(-5, _)]) => Err(StoreError::Full(format!("{cap} sessions"))),
            _ => Err(corrupt("open_session reply", &reply)),
        }
    }

    pub async fn session_exists(&self, session: &SessionId) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let (exists,): (bool,) = redis::pipe()
            .atomic()
            .exists(meta(session))
            .pexpire(meta(session), self.idle_ms())
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        Ok(exists)
    }

    /// The idle time as `PEXPIRE` takes it.
    fn idle_ms(&self) -> i64 {
        i64::try_from(self.retention.session_idle_ms).unwrap_or(i64::MAX)
    }

    pub async fn end_session(&self, session: &SessionId) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let (deleted, _): (u64, u64) = redis::pipe()
            .cmd("DEL")
            .arg(meta(session))
            .cmd("ZREM")
            .arg(SESSIONS)
            .arg(session.to_string())
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        Ok(deleted > 0)
    }

    /// Finishes the session's running call with this request id, with no result; `None` when
    /// no call of it is running.
    pub async fn cancel(
        &self,
        session: &SessionId,
        request_id: &str,
    ) -> Result<Option<StreamId>, StoreError> {
        let mut conn = self.conn();
        let reply: Vec<i64> = SCRIPTS
            .cancel
            .key(meta(session))
            .arg(request_id)
            .arg(self.retention.finished_ms)
            .arg(self.retention.session_idle_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        match reply.as_slice() {
            [1, n] => Ok(Some(StreamId(
                u32::try_from(*n).map_err(|_| corrupt("cancel reply", n))?,
            ))),
            [0] => Ok(None),
            [-1] => Err(StoreError::SessionGone),
            other => Err(corrupt("cancel reply", other)),
        }
    }

    pub async fn open_stream(
        &self,
        session: &SessionId,
        new: &NewStream,
    ) -> Result<Result<StreamId, u64>, StoreError> {
        let mut conn = self.conn();
        let n: i64 = SCRIPTS
            .alloc_stream
            .key(meta(session))
            .arg(self.retention.session_idle_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        if n < 0 {
            return Err(StoreError::SessionGone);
        }
        let id = StreamId(u32::try_from(n).map_err(|_| corrupt("stream counter", &n))?);
        let fence = new.fence.unwrap_or((id, 0));
        let call = new.call.clone().unwrap_or(CallSpec {
            steps: 0,
            delay_ms: 0,
            request_id: String::new(),
            progress_token: None,
        });
        let reply: Vec<i64> = SCRIPTS
            .open_stream
            .key(meta(session))
            .key(stream_key(session, id))
            .key(log_key(session, id))
            .key(stream_key(session, fence.0))
            .arg(kind_name(new.kind))
            .arg(new.key)
            .arg(&new.owner)
            .arg(self.retention.session_idle_ms)
            .arg(call.steps)
            .arg(call.delay_ms)
            .arg(self.retention.lease_ms)
            .arg(&call.request_id)
            .arg(call.progress_token.as_deref().unwrap_or(""))
            .arg(
                new.fence
                    .map_or(String::new(), |(_, epoch)| epoch.to_string()),
            )
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        match reply.as_slice() {
            [1, ..] => Ok(Ok(id)),
            [-1] => Err(StoreError::SessionGone),
            [-2, epoch] => Ok(Err(*epoch as u64)),
            other => Err(corrupt("open_stream reply", other)),
        }
    }

    pub async fn background_number(&self, session: &SessionId) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let ((streams, n),): ((Option<u64>, Option<u64>),) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(meta(session))
            .arg("streams")
            .arg("bg")
            .pexpire(meta(session), self.idle_ms())
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        if streams.is_none() {
            return Err(StoreError::SessionGone);
        }
        Ok(n.unwrap_or(0))
    }

    pub async fn standalone(&self, session: &SessionId) -> Result<Option<StreamId>, StoreError> {
        let mut conn = self.conn();
        let ((streams, standalone),): ((Option<u64>, Option<u32>),) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(meta(session))
            .arg("streams")
            .arg("standalone")
            .pexpire(meta(session), self.idle_ms())
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        if streams.is_none() {
            return Err(StoreError::SessionGone);
        }
        Ok(standalone.map(StreamId))
    }

    pub async fn snapshot(
        &self,
        session: &SessionId,
        stream: StreamId,
    ) -> Result<Option<Snapshot>, StoreError> {
        let mut conn = self.conn();
        let reply: Value = SCRIPTS
            .snapshot
            .key(meta(session))
            .key(stream_key(session, stream))
            .key(log_key(session, stream))
            .arg(self.retention.session_idle_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        let Value::Array(parts) = reply else {
            return Err(corrupt("snapshot reply", &reply));
        };
        match parts.as_slice() {
            [Value::Int(-1)] => Err(StoreError::SessionGone),
            [Value::Int(0), _] => Ok(None),
            [
                Value::Int(1),
                Value::Int(now),
                Value::Int(oldest),
                Value::Array(fields),
            ] => {
                let oldest = u64::try_from(*oldest).ok();
                Ok(Some(read_record(
                    (&stream_key(session, stream), stream),
                    *now as u64,
                    oldest,
                    fields,
                )?))
            }
            _ => Err(corrupt("snapshot reply", &parts)),
        }
    }

    /// The stream's record and up to `max` events after `after`, read at one instant: one
    /// `MULTI`/`EXEC` of native reads (no script: Lua would copy every entry twice), sent as
    /// one batch, so nothing runs between them and no `WATCH` is needed.
    pub async fn replay(
        &self,
        session: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Option<(Snapshot, Events)>, StoreError> {
        let mut conn = self.conn();
        let log = log_key(session, stream);
        let (exists, fields, first, entries, time): (bool, Value, Value, Value, (u64, u64)) =
            redis::pipe()
                .atomic()
                .exists(meta(session))
                .cmd("EVAL")
                .arg(TOUCH)
                .arg(3)
                .arg(meta(session))
                .arg(stream_key(session, stream))
                .arg(&log)
                .arg(self.retention.session_idle_ms)
                .ignore()
                .hgetall(stream_key(session, stream))
                .cmd("XRANGE")
                .arg(&log)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .cmd("XRANGE")
                .arg(&log)
                .arg(format!("({after}-1"))
                .arg("+")
                .arg("COUNT")
                .arg(max)
                .cmd("TIME")
                .query_async(&mut conn)
                .await
                .map_err(|e| classify(e, &stream_key(session, stream)))?;
        if !exists {
            return Err(StoreError::SessionGone);
        }
        let fields = match fields {
            Value::Array(flat) => flat,
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => return Err(corrupt("HGETALL reply", &other)),
        };
        if fields.is_empty() {
            return Ok(None);
        }
        let oldest = entries_of(first, 0)?.first().map(|(seq, _)| *seq);
        let now_ms = time.0 * 1_000 + time.1 / 1_000;
        let snapshot = read_record(
            (&stream_key(session, stream), stream),
            now_ms,
            oldest,
            &fields,
        )?;
        Ok(Some((
            snapshot,
            entries_of(entries, after).map_err(|e| e.at(&log))?,
        )))
    }

    pub async fn resume(
        &self,
        session: &SessionId,
        stream: StreamId,
        expect: Option<u64>,
        adopt: Option<u64>,
        owner: &str,
    ) -> Result<Result<Resumed, StaleEpoch>, StoreError> {
        let mut conn = self.conn();
        let optional = |n: Option<u64>| n.map_or(String::new(), |n| n.to_string());
        let reply: Value = SCRIPTS
            .resume
            .key(meta(session))
            .key(stream_key(session, stream))
            .key(log_key(session, stream))
            .arg(optional(expect))
            .arg(owner)
            .arg(self.retention.session_idle_ms)
            .arg(optional(adopt))
            .arg(self.retention.lease_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        let Some(parts) = ints_and_text(&reply) else {
            return Err(corrupt("resume reply", &reply));
        };
        let numbers: Vec<i64> = parts.iter().map(|(n, _)| *n).collect();
        match numbers.as_slice() {
            [-1] => Err(StoreError::SessionGone),
            [-2, current, _] => Ok(Err(StaleEpoch {
                stream,
                writer: owner.to_owned(),
                writer_epoch: expect.unwrap_or(0),
                current: *current as u64,
                holder: parts[2].1.clone(),
            })),
            [1, epoch, adoption @ ..] => {
                let epoch = expect.map(|_| *epoch as u64);
                let adoption = match adoption {
                    [] => None,
                    taken => {
                        Some(adoption_of(taken).ok_or_else(|| corrupt("resume reply", &reply))?)
                    }
                };
                Ok(Ok(Resumed { epoch, adoption }))
            }
            _ => Err(corrupt("resume reply", &reply)),
        }
    }

    pub async fn adopt(
        &self,
        session: &SessionId,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
    ) -> Result<Adoption, StoreError> {
        let mut conn = self.conn();
        let reply: Vec<i64> = SCRIPTS
            .adopt
            .key(meta(session))
            .key(stream_key(session, stream))
            .key(log_key(session, stream))
            .arg(expect_lease)
            .arg(owner)
            .arg(self.retention.lease_ms)
            .arg(self.retention.session_idle_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        match reply.as_slice() {
            [-1] => Err(StoreError::SessionGone),
            taken => adoption_of(taken).ok_or_else(|| corrupt("adopt reply", taken)),
        }
    }

    pub async fn append(
        &self,
        session: &SessionId,
        stream: StreamId,
        writer: Writer<'_>,
        events: &[String],
        finish: bool,
    ) -> Result<Result<u64, Refused>, StoreError> {
        let (mode, epoch, name, done, background, floor) = match writer {
            Writer::Epoch {
                epoch,
                name,
                background,
                floor,
            } => ("epoch", epoch, name, None, background, Floor::Check(floor)),
            Writer::Lease {
                epoch,
                name,
                done,
                floor,
            } => ("lease", epoch, name, done, None, floor),
            Writer::Unfenced { name, background } => {
                ("none", 0, name, None, background, Floor::Check(0))
            }
        };
        let (floor, skip) = match floor {
            Floor::Check(f) => (f, "0"),
            Floor::SkipTo(f) => (f, "1"),
        };
        let mut conn = self.conn();
        let mut invocation = SCRIPTS.append.prepare_invoke();
        invocation
            .key(meta(session))
            .key(stream_key(session, stream))
            .key(log_key(session, stream))
            .arg(mode)
            .arg(epoch)
            .arg(name)
            .arg(self.retention.lease_ms)
            .arg(self.retention.log_events)
            .arg(if finish { "1" } else { "0" })
            .arg(done.map_or(-1, |d| d as i64))
            .arg(self.retention.finished_ms)
            .arg(self.retention.session_idle_ms)
            .arg(background.map_or(String::new(), |n| n.to_string()))
            .arg(pack(events))
            .arg(floor)
            .arg(skip)
            .arg(BACKGROUND_SEVERITY.rank());
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        match ints_and_text(&reply).as_deref() {
            Some([(1, _), (high_water, _)]) => Ok(Ok(*high_water as u64)),
            Some([(-1, _)]) => Err(StoreError::SessionGone),
            Some([(-2, _), (current, _), (_, holder)]) => Ok(Err(Refused::Stale(StaleEpoch {
                stream,
                writer: name.to_owned(),
                writer_epoch: epoch,
                current: *current as u64,
                holder: holder.clone(),
            }))),
            Some([(-3, _)]) => Ok(Err(Refused::Closed(stream))),
            Some([(-4, _), (holds, _)]) => Ok(Err(Refused::RolledBack {
                stream,
                holds: *holds as u64,
                wrote: floor,
            })),
            Some([(-5, _)]) => Ok(Err(Refused::BelowLogLevel)),
            _ => Err(corrupt("append reply", &reply)),
        }
    }

    pub async fn reader(&self) -> Result<RedisReader, StoreError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(READ_BLOCK + RESPONSE_TIMEOUT));
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(unavailable)?;
        Ok(RedisReader { conn })
    }

    /// `INFO memory`'s `used_memory`, for the benchmarks' bytes per session.
    pub async fn used_memory(&self) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| corrupt("INFO memory", &info))
    }
}

/// What `take_over.lua` answered.
fn adoption_of(reply: &[i64]) -> Option<Adoption> {
    match reply {
        [1, lease, done] => Some(Adoption::Adopted {
            lease: *lease as u64,
            done: *done as u64,
        }),
        [-4, remaining] => Some(Adoption::NotExpired {
            remaining_ms: *remaining as u64,
        }),
        [-2] => Some(Adoption::Lost),
        _ => None,
    }
}
