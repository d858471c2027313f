//! The store on Redis. Every compare-and-set is a Lua script (`lua/`), so the epoch check and
//! the write it guards happen as one step inside Redis; never `WATCH` on the shared multiplexed
//! connection, where other requests' commands interleave with a transaction's.
//!
//! Keys: `fs:{SESSION}:meta` (a hash: stream counter, the standalone stream), `fs:{SESSION}:s:N`
//! (a stream's record: epoch, holder, high-water, key, and a call's lease and progress) and
//! `fs:{SESSION}:log:N` (a Redis Stream of its events, ids `SEQ-1`, capped by `MAXLEN ~`). One
//! session's keys share the hash tag `{SESSION}`, so each script stays on one shard of a Redis
//! Cluster; no key is shared between sessions. Every key expires: sessions when idle, a finished
//! call's stream after its retention.
//!
//! Cross-replica delivery reads the log with `XREAD BLOCK` from the client's cursor: replay and
//! live tail are one read, so the hand-off between them has no gap and no duplicate (pub/sub
//! beside a log needs subscribe, read, and dedupe, and loses what lands between them).

use super::{
    Adoption, CallSpec, Events, Floor, LOG_MAXLEN, NewStream, READ_BLOCK, Refused, Retention,
    SessionKey, Snapshot, StoreError, Writer,
};
use forkscope_core::replica::{CallRecord, Lease, RecordState, StaleEpoch, StreamRecord};
use forkscope_core::{StreamId, StreamKind};
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
    attach: Script,
    adopt: Script,
    append: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    open_session: Script::new(include_str!("lua/open_session.lua")),
    alloc_stream: Script::new(include_str!("lua/alloc_stream.lua")),
    open_stream: Script::new(include_str!("lua/open_stream.lua")),
    snapshot: Script::new(include_str!("lua/snapshot.lua")),
    attach: Script::new(include_str!("lua/attach.lua")),
    adopt: Script::new(include_str!("lua/adopt.lua")),
    append: Script::new(include_str!("lua/append.lua")),
});

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
    client: Client,
    conn: ConnectionManager,
    url: Arc<str>,
    retention: Retention,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .finish()
    }
}

pub(super) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// What a failed Redis command means for the record at `key`: the store not answering (a
/// timeout, a dropped or refused connection, a Redis loading or failing over: retry), or an
/// answer no replica's script gives — a Lua runtime error, a key of the wrong type, a field that
/// is not a number: the record is corrupt, and retrying cannot mend it.
pub(super) fn classify(e: RedisError, key: &str) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    let transient = e.is_timeout()
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::ReadOnly
            )
        );
    if transient {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Corrupt(format!("{key}: {e}"))
    }
}

/// The sessions index: each live session, scored by when it opened, for the session cap. The
/// one key not of a single session (see ARCHITECTURE.md: in a cluster it would be per shard).
const SESSIONS: &str = "fs:sessions";

fn meta(s: &SessionKey) -> String {
    format!("fs:{{{s}}}:meta")
}
fn stream_key(s: &SessionKey, stream: StreamId) -> String {
    format!("fs:{{{s}}}:s:{}", stream.0)
}
fn log_key(s: &SessionKey, stream: StreamId) -> String {
    format!("fs:{{{s}}}:log:{}", stream.0)
}

/// Checks a URL the way `--store` takes it: `redis://HOST:PORT[/DB]`, nothing else.
pub fn parse_url(url: &str) -> Result<Client, ConnectError> {
    let bad = |why: &str| ConnectError::BadUrl {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| bad("it must start with redis://"))?;
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() || authority.contains('@') {
        return Err(bad(
            "it must name HOST:PORT (credentials are not taken on the command line)",
        ));
    }
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(bad("the database after the / must be a number"));
    }
    if authority
        .rsplit_once(':')
        .is_none_or(|(_, p)| p.parse::<u16>().is_err())
    {
        return Err(bad("it must name a port (redis://HOST:PORT)"));
    }
    Client::open(url).map_err(|e| bad(&e.to_string()))
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
    pub async fn open_session(&self, session: &SessionKey) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let cap = self.retention.max_sessions;
        let mut invocation = SCRIPTS.open_session.prepare_invoke();
        invocation
            .key(SESSIONS)
            .key(meta(session))
            .arg(cap)
            .arg(self.retention.session_idle_ms)
            .arg(session.as_str());
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

    pub async fn session_exists(&self, session: &SessionKey) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        redis::cmd("EXISTS")
            .arg(meta(session))
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))
    }

    pub async fn end_session(&self, session: &SessionKey) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let (deleted, _): (u64, u64) = redis::pipe()
            .cmd("DEL")
            .arg(meta(session))
            .cmd("ZREM")
            .arg(SESSIONS)
            .arg(session.as_str())
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        Ok(deleted > 0)
    }

    pub async fn open_stream(
        &self,
        session: &SessionKey,
        new: &NewStream,
    ) -> Result<Result<StreamId, u64>, StoreError> {
        let mut conn = self.conn();
        let n: i64 = SCRIPTS
            .alloc_stream
            .key(meta(session))
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

    pub async fn background_number(&self, session: &SessionKey) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let n: Option<u64> = redis::cmd("HGET")
            .arg(meta(session))
            .arg("bg")
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        Ok(n.unwrap_or(0))
    }

    pub async fn standalone(&self, session: &SessionKey) -> Result<Option<StreamId>, StoreError> {
        let mut conn = self.conn();
        let (streams, standalone): (Option<u64>, Option<u32>) = redis::cmd("HMGET")
            .arg(meta(session))
            .arg("streams")
            .arg("standalone")
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
        session: &SessionKey,
        stream: StreamId,
    ) -> Result<Option<Snapshot>, StoreError> {
        let mut conn = self.conn();
        let reply: Value = SCRIPTS
            .snapshot
            .key(meta(session))
            .key(stream_key(session, stream))
            .key(log_key(session, stream))
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
        session: &SessionKey,
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
        Ok(Some((snapshot, entries_of(entries, after)?)))
    }

    pub async fn attach(
        &self,
        session: &SessionKey,
        stream: StreamId,
        expect: u64,
        owner: &str,
    ) -> Result<Result<u64, StaleEpoch>, StoreError> {
        let mut conn = self.conn();
        let reply: Value = SCRIPTS
            .attach
            .key(meta(session))
            .key(stream_key(session, stream))
            .arg(expect)
            .arg(owner)
            .arg(self.retention.session_idle_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        match ints_and_text(&reply).as_deref() {
            Some([(1, _), (epoch, _)]) => Ok(Ok(*epoch as u64)),
            Some([(-1, _)]) => Err(StoreError::SessionGone),
            Some([(-2, _), (current, _), (_, holder)]) => Ok(Err(StaleEpoch {
                stream,
                writer: owner.to_owned(),
                writer_epoch: expect,
                current: *current as u64,
                holder: holder.clone(),
            })),
            _ => Err(corrupt("attach reply", &reply)),
        }
    }

    pub async fn adopt(
        &self,
        session: &SessionKey,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
    ) -> Result<Adoption, StoreError> {
        let mut conn = self.conn();
        let reply: Vec<i64> = SCRIPTS
            .adopt
            .key(stream_key(session, stream))
            .arg(expect_lease)
            .arg(owner)
            .arg(self.retention.lease_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        match reply.as_slice() {
            [1, lease, done] => Ok(Adoption::Adopted {
                lease: *lease as u64,
                done: *done as u64,
            }),
            [-4, remaining] => Ok(Adoption::NotExpired {
                remaining_ms: *remaining as u64,
            }),
            [-2, _] | [-3] => Ok(Adoption::Lost),
            other => Err(corrupt("adopt reply", other)),
        }
    }

    pub async fn append(
        &self,
        session: &SessionKey,
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
            .arg(LOG_MAXLEN)
            .arg(if finish { "1" } else { "0" })
            .arg(done.map_or(-1, |d| d as i64))
            .arg(self.retention.finished_ms)
            .arg(self.retention.session_idle_ms)
            .arg(background.map_or(String::new(), |n| n.to_string()))
            .arg(pack(events))
            .arg(floor)
            .arg(skip);
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

/// A connection of one delivery's own, for `XREAD BLOCK`.
pub struct RedisReader {
    conn: MultiplexedConnection,
}

impl std::fmt::Debug for RedisReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisReader")
    }
}

impl RedisReader {
    pub async fn read(
        &mut self,
        session: &SessionKey,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Events, StoreError> {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(max)
            .arg("BLOCK")
            .arg(READ_BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(log_key(session, stream))
            .arg(format!("{after}-1"))
            .query_async(&mut self.conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        read_entries(reply, after)
    }
}

fn kind_name(kind: StreamKind) -> &'static str {
    match kind {
        StreamKind::Standalone => "standalone",
        StreamKind::Request => "request",
    }
}

fn corrupt(what: &str, value: &(impl std::fmt::Debug + ?Sized)) -> StoreError {
    let mut shown = format!("{value:?}");
    shown.truncate(200);
    StoreError::Corrupt(format!("{what}: {shown}"))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A script's flat reply as (number, text) pairs: numbers where it sent numbers, text where text.
fn ints_and_text(v: &Value) -> Option<Vec<(i64, String)>> {
    let Value::Array(items) = v else { return None };
    items
        .iter()
        .map(|item| match item {
            Value::Int(i) => Some((*i, i.to_string())),
            other => text(other).map(|t| (0, t)),
        })
        .collect()
}

/// `SEQ-1`, as the append script spells entry ids.
fn entry_seq(id: &str) -> Option<u64> {
    id.strip_suffix("-1")?.parse().ok()
}

fn read_entries(reply: Value, after: u64) -> Result<Events, StoreError> {
    let streams = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams,
        Value::Map(map) => {
            return map
                .into_iter()
                .next()
                .map_or(Ok(Vec::new()), |(_, entries)| entries_of(entries, after));
        }
        other => return Err(corrupt("XREAD reply", &other)),
    };
    match streams.into_iter().next() {
        None => Ok(Vec::new()),
        Some(Value::Array(mut pair)) if pair.len() == 2 => {
            entries_of(pair.pop().unwrap_or(Value::Nil), after)
        }
        Some(other) => Err(corrupt("XREAD reply", &other)),
    }
}

/// The events of a stream's entries after `after`, taking the reply apart rather than copying
/// it. Each entry is a batch (see [`pack`]) whose id is its last event's sequence.
fn entries_of(entries: Value, after: u64) -> Result<Events, StoreError> {
    let Value::Array(entries) = entries else {
        return Err(corrupt("XRANGE entries", &entries));
    };
    let bad = |why: &str| StoreError::Corrupt(format!("a stream entry {why}"));
    let mut events = Vec::new();
    for entry in entries {
        let Value::Array(mut parts) = entry else {
            return Err(bad("that is not [id, fields]"));
        };
        let (fields, id) = (parts.pop(), parts.pop());
        let last = match id {
            Some(Value::BulkString(id)) => std::str::from_utf8(&id).ok().and_then(entry_seq),
            Some(Value::SimpleString(id)) => entry_seq(&id),
            _ => None,
        }
        .ok_or_else(|| bad("whose id is not SEQ-1"))?;
        let packed = match fields {
            Some(Value::Array(mut fields)) if fields.len() == 2 => match fields.pop() {
                Some(Value::BulkString(packed)) => packed,
                _ => return Err(bad("that holds no batch")),
            },
            _ => return Err(bad("that holds no batch")),
        };
        unpack(&packed, last, after, &mut events).ok_or_else(|| bad("whose batch is torn"))?;
    }
    Ok(events)
}

/// A batch of events as one log entry: `COUNT\n`, then `LEN\n` and the data of each. One
/// `XADD` a batch, and a replay reads a few large values instead of thousands of small ones.
fn pack(events: &[String]) -> Vec<u8> {
    if events.is_empty() {
        return Vec::new();
    }
    let mut packed = Vec::with_capacity(events.iter().map(|e| e.len() + 8).sum::<usize>() + 8);
    packed.extend_from_slice(format!("{}\n", events.len()).as_bytes());
    for data in events {
        packed.extend_from_slice(format!("{}\n", data.len()).as_bytes());
        packed.extend_from_slice(data.as_bytes());
    }
    packed
}

/// Reads a batch whose last event is `last`, keeping the events after `after`.
fn unpack(mut packed: &[u8], last: u64, after: u64, out: &mut Events) -> Option<()> {
    fn number(packed: &mut &[u8]) -> Option<usize> {
        let newline = packed.iter().position(|b| *b == b'\n')?;
        let n = std::str::from_utf8(&packed[..newline]).ok()?.parse().ok()?;
        *packed = &packed[newline + 1..];
        Some(n)
    }
    let count = number(&mut packed)? as u64;
    let first = (last + 1).checked_sub(count)?;
    for seq in first..=last {
        let len = number(&mut packed)?;
        let data = packed.get(..len)?;
        packed = &packed[len..];
        if seq > after {
            out.push((seq, String::from_utf8(data.to_vec()).ok()?));
        }
    }
    packed.is_empty().then_some(())
}

/// A stream's record from its hash's fields; a field missing or malformed names the key.
fn read_record(
    (key, stream): (&str, StreamId),
    now_ms: u64,
    oldest: Option<u64>,
    fields: &[Value],
) -> Result<Snapshot, StoreError> {
    let mut get = std::collections::HashMap::new();
    for pair in fields.chunks(2) {
        if let [k, v] = pair
            && let (Some(k), Some(v)) = (text(k), text(v))
        {
            get.insert(k, v);
        }
    }
    let field = |name: &str| {
        get.get(name)
            .cloned()
            .ok_or_else(|| StoreError::Corrupt(format!("{key}: stream {stream} has no {name}")))
    };
    let number = |name: &str| -> Result<u64, StoreError> {
        field(name)?.parse().map_err(|_| {
            StoreError::Corrupt(format!("{key}: stream {stream}'s {name} is not a number"))
        })
    };
    let kind = match field("kind")?.as_str() {
        "standalone" => StreamKind::Standalone,
        "request" => StreamKind::Request,
        other => return Err(corrupt("stream kind", &other)),
    };
    let state = match field("state")?.as_str() {
        "live" => RecordState::Live,
        "finished" => RecordState::Finished,
        "fenced" => RecordState::Fenced,
        other => return Err(corrupt("stream state", &other)),
    };
    let high_water = number("hw")?;
    let oldest_kept = oldest.unwrap_or(high_water + 1);
    let (call, spec) = if kind == StreamKind::Request {
        let record = CallRecord {
            steps: number("steps")?,
            delay_ms: number("delay")?,
            done: number("done")?,
            lease: Lease {
                epoch: number("lease")?,
                owner: field("lowner")?,
                until_ms: number("luntil")?,
            },
        };
        let spec = CallSpec {
            steps: record.steps,
            delay_ms: record.delay_ms,
            request_id: field("rid")?,
            progress_token: Some(field("ptok")?).filter(|t| !t.is_empty()),
        };
        (Some(record), Some(spec))
    } else {
        (None, None)
    };
    Ok(Snapshot {
        record: StreamRecord {
            stream,
            kind,
            key: number("key")?,
            state,
            epoch: number("epoch")?,
            owner: field("owner")?,
            high_water,
            oldest_kept,
            call,
            now_ms,
        },
        call: spec,
    })
}
