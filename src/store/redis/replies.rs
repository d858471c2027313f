//! What Redis answers, read back: what a failed command means, script replies, log entries
//! (a committed batch packs several events into one entry) and stream records.

use super::super::{CallSpec, Events, Snapshot, StoreError};
use forkscope_core::StreamId;
use forkscope_core::StreamKind;
use forkscope_core::replica::{CallRecord, Lease, RecordState, StreamRecord};
use redis::{RedisError, Value};

pub(in crate::store) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// What a failed Redis command means for the record at `key`: the store not answering (a
/// timeout, a dropped or refused connection, a Redis loading or failing over: retry), or an
/// answer no replica's script gives — a Lua runtime error, a key of the wrong type, a field that
/// is not a number: the record is corrupt, and retrying cannot mend it.
pub(in crate::store) fn classify(e: RedisError, key: &str) -> StoreError {
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
        )
        // A script running long (BUSY), memory full (OOM), no connection slot free: Redis is
        // there but cannot take this now.
        || matches!(e.code(), Some("BUSY" | "OOM"))
        || e.to_string().contains("max number of clients");
    if transient {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Corrupt(format!("{key}: {e}"))
    }
}

pub(super) fn kind_name(kind: StreamKind) -> &'static str {
    match kind {
        StreamKind::Standalone => "standalone",
        StreamKind::Request => "request",
    }
}

pub(super) fn corrupt(what: &str, value: &(impl std::fmt::Debug + ?Sized)) -> StoreError {
    let mut shown = format!("{value:?}");
    shown.truncate(200);
    StoreError::Corrupt(format!("{what}: {shown}"))
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A script's flat reply as (number, text) pairs: numbers where it sent numbers, text where text.
pub(super) fn ints_and_text(v: &Value) -> Option<Vec<(i64, String)>> {
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
pub(super) fn entry_seq(id: &str) -> Option<u64> {
    id.strip_suffix("-1")?.parse().ok()
}

pub(super) fn read_entries(reply: Value, after: u64) -> Result<Events, StoreError> {
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
pub(super) fn entries_of(entries: Value, after: u64) -> Result<Events, StoreError> {
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
pub(super) fn pack(events: &[String]) -> Vec<u8> {
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
pub(super) fn unpack(mut packed: &[u8], last: u64, after: u64, out: &mut Events) -> Option<()> {
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
pub(super) fn read_record(
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
    let forgotten = match (get.contains_key("gapfrom"), get.contains_key("gapto")) {
        (true, true) => Some((number("gapfrom")?, number("gapto")?)),
        _ => None,
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
            forgotten,
        },
        call: spec,
    })
}
