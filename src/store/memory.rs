//! The store in this process: the default, and the one the replica tests also run against
//! Redis. Its compare-and-sets take one lock, and it checks epochs with the core's [`admits`]
//! and rollbacks with [`forgot`], the comparisons the Redis scripts make; the shared suite
//! (`tests/store.rs`) holds both to the same answers (not yet a differential test over random
//! operations). Its log trims event by event where Redis trims whole batches. Its clock is its
//! own (milliseconds since it was made), as Redis's `TIME` is the Redis store's.
//!
//! Idle expiry is the rule `lua/touch.lua` states for Redis: a request refreshes the session
//! and the stream record it reads, each for `session_idle_ms`; a finished stream is kept
//! `finished_ms` from when it finished. A delivery's blocked read refreshes nothing (an
//! `XREAD`), but the replay it makes between reads does, so a held stream lives.

use super::Floor;
use super::{
    Adoption, CallSpec, Events, LOG_MAXLEN, NewStream, READ_BLOCK, Refused, Retention, SessionId,
    Snapshot, StoreError, Writer,
};
use forkscope_core::replica::{
    CallRecord, Lease, RecordState, StaleEpoch, StreamRecord, admits, forgot,
};
use forkscope_core::{Policy, StreamId, StreamKind};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;

/// Most streams one session may hold whose events are still kept; past it a new stream is
/// refused as the store being full (Redis bounds the same by expiring each stream's keys).
pub const MAX_KEPT_STREAMS: usize = 1_024;

#[derive(Clone, Debug)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sessions: Mutex<HashMap<SessionId, Session>>,
    /// Woken on every append: a blocked reader looks again.
    appended: Notify,
    born: Instant,
    retention: Retention,
}

#[derive(Clone, Debug)]
pub(super) struct Session {
    streams: Vec<Stream>,
    standalone: Option<StreamId>,
    background: u64,
    touched_ms: u64,
}

#[derive(Clone, Debug)]
struct Stream {
    id: StreamId,
    kind: StreamKind,
    key: u64,
    state: RecordState,
    epoch: u64,
    owner: String,
    high_water: u64,
    log: VecDeque<(u64, String)>,
    call: Option<(CallSpec, u64, Lease)>,
    finished_ms: Option<u64>,
    /// Ids handed out, then forgot by a rollback and skipped: `(first, last)`.
    forgotten: Option<(u64, u64)>,
    /// The last request that read or wrote the record.
    touched_ms: u64,
}

impl Stream {
    /// Whether the record is still kept at `now`: a finished stream for its retention from
    /// when it finished, any other for the idle time from its last request.
    fn kept(&self, now: u64, retention: &Retention) -> bool {
        match self.finished_ms {
            Some(at) => now < at + retention.finished_ms,
            None => now.saturating_sub(self.touched_ms) < retention.session_idle_ms,
        }
    }

    /// A request read or wrote it: kept for the idle time from now (a finished stream keeps
    /// its retention).
    fn touch(&mut self, now: u64) {
        self.touched_ms = now;
    }

    /// Up to `max` events after `after`. The log is in sequence order (consecutive, but for the
    /// ids a rolled-back store skipped), so the first one is found by a binary search.
    fn after(&self, after: u64, max: usize) -> Events {
        let skip = self.log.partition_point(|(seq, _)| *seq <= after);
        self.log.range(skip..).take(max).cloned().collect()
    }
}

impl MemoryStore {
    pub fn new(retention: Retention) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner {
                sessions: Mutex::new(HashMap::new()),
                appended: Notify::new(),
                born: Instant::now(),
                retention,
            }),
        }
    }

    pub fn retention(&self) -> Retention {
        self.inner.retention
    }

    pub fn label(&self) -> String {
        "memory".into()
    }

    fn now_ms(&self) -> u64 {
        // Offset so no lease deadline is ever 0.
        1_000 + self.inner.born.elapsed().as_millis() as u64
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Session>> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The session, if it is there and not idle past its retention (then it is dropped),
    /// refreshed: a request touched it.
    fn live<'a>(
        &self,
        sessions: &'a mut HashMap<SessionId, Session>,
        key: &SessionId,
        now: u64,
    ) -> Result<&'a mut Session, StoreError> {
        let session = self.unexpired(sessions, key, now)?;
        session.touched_ms = now;
        Ok(session)
    }

    /// The session, if it is there and not idle past its retention, untouched.
    fn unexpired<'a>(
        &self,
        sessions: &'a mut HashMap<SessionId, Session>,
        key: &SessionId,
        now: u64,
    ) -> Result<&'a mut Session, StoreError> {
        let idle = self.inner.retention.session_idle_ms;
        if sessions
            .get(key)
            .is_some_and(|s| now.saturating_sub(s.touched_ms) >= idle)
        {
            sessions.remove(key);
        }
        sessions.get_mut(key).ok_or(StoreError::SessionGone)
    }

    pub async fn open_session(&self, key: &SessionId) -> Result<(), StoreError> {
        let now = self.now_ms();
        let idle = self.inner.retention.session_idle_ms;
        let mut sessions = self.lock();
        let cap = self.inner.retention.max_sessions;
        if sessions.len() >= cap {
            sessions.retain(|_, s| now.saturating_sub(s.touched_ms) < idle);
        }
        if sessions.len() >= cap {
            return Err(StoreError::Full(format!("{cap} sessions")));
        }
        sessions.entry(*key).or_insert(Session {
            streams: Vec::new(),
            standalone: None,
            background: 0,
            touched_ms: now,
        });
        Ok(())
    }

    pub async fn session_exists(&self, key: &SessionId) -> Result<bool, StoreError> {
        let now = self.now_ms();
        Ok(self.live(&mut self.lock(), key, now).is_ok())
    }

    pub async fn end_session(&self, key: &SessionId) -> Result<bool, StoreError> {
        let ended = self.lock().remove(key).is_some();
        self.inner.appended.notify_waiters();
        Ok(ended)
    }

    pub async fn open_stream(
        &self,
        key: &SessionId,
        new: &NewStream,
    ) -> Result<Result<StreamId, u64>, StoreError> {
        let now = self.now_ms();
        let mut sessions = self.lock();
        let retention = self.inner.retention;
        let session = self.live(&mut sessions, key, now)?;
        // A record no longer kept (a finished call past its retention, a stream idle past its
        // time) frees its events, as its keys expire on Redis.
        for stream in &mut session.streams {
            if !stream.kept(now, &retention) {
                stream.log = VecDeque::new();
            }
        }
        let kept = session.streams.iter().filter(|s| !s.log.is_empty()).count();
        if kept >= MAX_KEPT_STREAMS {
            return Err(StoreError::Full(format!(
                "{MAX_KEPT_STREAMS} streams with events kept in one session"
            )));
        }
        if let Some((fenced, expect)) = new.fence {
            let Some(old) = session
                .streams
                .iter_mut()
                .find(|s| s.id == fenced && s.kept(now, &retention))
            else {
                return Ok(Err(0));
            };
            if old.epoch != expect {
                return Ok(Err(old.epoch));
            }
            old.epoch += 1;
            old.state = RecordState::Fenced;
        }
        let id = StreamId(session.streams.len() as u32 + 1);
        let lease = Lease {
            epoch: 1,
            owner: new.owner.clone(),
            until_ms: now + self.inner.retention.lease_ms,
        };
        session.streams.push(Stream {
            id,
            kind: new.kind,
            key: new.key,
            state: RecordState::Live,
            epoch: 1,
            owner: new.owner.clone(),
            high_water: 0,
            log: VecDeque::new(),
            call: new.call.clone().map(|spec| (spec, 0, lease)),
            finished_ms: None,
            forgotten: None,
            touched_ms: now,
        });
        if new.kind == StreamKind::Standalone {
            session.standalone = Some(id);
        }
        drop(sessions);
        self.inner.appended.notify_waiters();
        Ok(Ok(id))
    }

    pub async fn cancel(
        &self,
        key: &SessionId,
        request_id: &str,
    ) -> Result<Option<StreamId>, StoreError> {
        let now = self.now_ms();
        let mut sessions = self.lock();
        let session = self.live(&mut sessions, key, now)?;
        // The latest call with this id, as the Redis store's index keeps it.
        let running = session.streams.iter_mut().rev().find(|s| {
            s.call
                .as_ref()
                .is_some_and(|(spec, ..)| spec.request_id == request_id)
        });
        let Some(s) = running.filter(|s| s.state == RecordState::Live) else {
            return Ok(None);
        };
        s.state = RecordState::Finished;
        s.finished_ms = Some(now);
        let stream = s.id;
        drop(sessions);
        self.inner.appended.notify_waiters();
        Ok(Some(stream))
    }

    pub async fn background_number(&self, key: &SessionId) -> Result<u64, StoreError> {
        let now = self.now_ms();
        Ok(self.live(&mut self.lock(), key, now)?.background)
    }

    pub async fn standalone(&self, key: &SessionId) -> Result<Option<StreamId>, StoreError> {
        let now = self.now_ms();
        Ok(self.live(&mut self.lock(), key, now)?.standalone)
    }

    pub async fn snapshot(
        &self,
        key: &SessionId,
        stream: StreamId,
    ) -> Result<Option<Snapshot>, StoreError> {
        Ok(self
            .replay(key, stream, 0, 0)
            .await?
            .map(|(snapshot, _)| snapshot))
    }

    /// The record and the events after `after`, under one lock: the epoch and the events agree.
    pub async fn replay(
        &self,
        key: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Option<(Snapshot, Events)>, StoreError> {
        let now = self.now_ms();
        let retention = self.inner.retention;
        let mut sessions = self.lock();
        let session = self.live(&mut sessions, key, now)?;
        let Some(s) = session
            .streams
            .iter_mut()
            .find(|s| s.id == stream && s.kept(now, &retention))
        else {
            return Ok(None);
        };
        s.touch(now);
        let record = StreamRecord {
            stream: s.id,
            kind: s.kind,
            key: s.key,
            state: s.state,
            epoch: s.epoch,
            owner: s.owner.clone(),
            high_water: s.high_water,
            oldest_kept: s.log.front().map_or(s.high_water + 1, |(seq, _)| *seq),
            call: s.call.as_ref().map(|(spec, done, lease)| CallRecord {
                steps: spec.steps,
                delay_ms: spec.delay_ms,
                done: *done,
                lease: lease.clone(),
            }),
            now_ms: now,
            forgotten: s.forgotten,
        };
        let snapshot = Snapshot {
            record,
            call: s.call.as_ref().map(|(spec, ..)| spec.clone()),
        };
        Ok(Some((snapshot, s.after(after, max))))
    }

    /// The stream's record, refreshed with its session: a request read or wrote it.
    fn stream_mut<'a>(
        &self,
        sessions: &'a mut HashMap<SessionId, Session>,
        key: &SessionId,
        stream: StreamId,
        now: u64,
    ) -> Result<&'a mut Stream, StoreError> {
        self.live(sessions, key, now)?;
        let s = self.kept_stream(sessions, key, stream, now)?;
        s.touch(now);
        Ok(s)
    }

    /// The stream's record if it is kept, touching nothing (a blocked read, as `XREAD`).
    fn kept_stream<'a>(
        &self,
        sessions: &'a mut HashMap<SessionId, Session>,
        key: &SessionId,
        stream: StreamId,
        now: u64,
    ) -> Result<&'a mut Stream, StoreError> {
        let retention = self.inner.retention;
        self.unexpired(sessions, key, now)?
            .streams
            .iter_mut()
            .find(|s| s.id == stream && s.kept(now, &retention))
            .ok_or_else(|| StoreError::Corrupt(format!("stream {stream} has no record")))
    }

    pub async fn attach(
        &self,
        key: &SessionId,
        stream: StreamId,
        expect: u64,
        owner: &str,
    ) -> Result<Result<u64, StaleEpoch>, StoreError> {
        let now = self.now_ms();
        let mut sessions = self.lock();
        let s = self.stream_mut(&mut sessions, key, stream, now)?;
        if !admits(Policy::Fenced, s.epoch, expect) {
            return Ok(Err(StaleEpoch {
                stream,
                writer: owner.to_owned(),
                writer_epoch: expect,
                current: s.epoch,
                holder: s.owner.clone(),
            }));
        }
        s.epoch += 1;
        s.owner = owner.to_owned();
        Ok(Ok(s.epoch))
    }

    pub async fn adopt(
        &self,
        key: &SessionId,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
    ) -> Result<Adoption, StoreError> {
        let now = self.now_ms();
        let lease_ms = self.inner.retention.lease_ms;
        let mut sessions = self.lock();
        let s = self.stream_mut(&mut sessions, key, stream, now)?;
        let live = s.state == RecordState::Live;
        let Some((_, done, lease)) = s.call.as_mut() else {
            return Ok(Adoption::Lost);
        };
        if lease.epoch != expect_lease || !live {
            return Ok(Adoption::Lost);
        }
        if lease.until_ms > now {
            return Ok(Adoption::NotExpired {
                remaining_ms: lease.until_ms - now,
            });
        }
        lease.epoch += 1;
        lease.owner = owner.to_owned();
        lease.until_ms = now + lease_ms;
        Ok(Adoption::Adopted {
            lease: lease.epoch,
            done: *done,
        })
    }

    pub async fn append(
        &self,
        key: &SessionId,
        stream: StreamId,
        writer: Writer<'_>,
        events: &[String],
        finish: bool,
    ) -> Result<Result<u64, Refused>, StoreError> {
        let now = self.now_ms();
        let lease_ms = self.inner.retention.lease_ms;
        let mut sessions = self.lock();
        let background = match writer {
            Writer::Epoch { background, .. } | Writer::Unfenced { background, .. } => background,
            Writer::Lease { .. } => None,
        };
        let s = self.stream_mut(&mut sessions, key, stream, now)?;
        let stale = |current: u64, holder: &str, name: &str, epoch: u64| {
            Ok(Err(Refused::Stale(StaleEpoch {
                stream,
                writer: name.to_owned(),
                writer_epoch: epoch,
                current,
                holder: holder.to_owned(),
            })))
        };
        match writer {
            Writer::Epoch { epoch, name, .. } if !admits(Policy::Fenced, s.epoch, epoch) => {
                return stale(s.epoch, &s.owner, name, epoch);
            }
            Writer::Lease { epoch, name, .. } => match &s.call {
                Some((_, _, lease)) if !admits(Policy::Fenced, lease.epoch, epoch) => {
                    return stale(lease.epoch, &lease.owner, name, epoch);
                }
                None => return Ok(Err(Refused::Closed(stream))),
                Some(_) => {}
            },
            _ => {}
        }
        if s.state != RecordState::Live {
            return Ok(Err(Refused::Closed(stream)));
        }
        let floor = match writer {
            Writer::Epoch { floor, .. }
            | Writer::Lease {
                floor: Floor::Check(floor),
                ..
            } => Some(floor),
            Writer::Lease {
                floor: Floor::SkipTo(floor),
                ..
            } => {
                if s.high_water < floor {
                    s.forgotten = Some((s.high_water + 1, floor));
                    s.high_water = floor;
                }
                None
            }
            Writer::Unfenced { .. } => None,
        };
        if let Some(wrote) = floor.filter(|f| forgot(s.high_water, *f)) {
            return Ok(Err(Refused::RolledBack {
                stream,
                holds: s.high_water,
                wrote,
            }));
        }
        for data in events {
            s.high_water += 1;
            s.log.push_back((s.high_water, data.clone()));
        }
        while s.log.len() as u64 > LOG_MAXLEN {
            s.log.pop_front();
        }
        if let (Writer::Lease { done, .. }, Some((_, committed, lease))) = (writer, s.call.as_mut())
        {
            lease.until_ms = now + lease_ms;
            if let Some(done) = done {
                *committed = done;
            }
        }
        if finish {
            s.state = RecordState::Finished;
            s.finished_ms = Some(now);
        }
        let high_water = s.high_water;
        if let Some(n) = background {
            self.live(&mut sessions, key, now)?.background = n;
        }
        drop(sessions);
        if !events.is_empty() || finish {
            self.inner.appended.notify_waiters();
        }
        Ok(Ok(high_water))
    }

    /// The session as it is now (`None`: not here), for the lab's rollback fault.
    pub(super) fn image(&self, key: &SessionId) -> Option<Session> {
        self.lock().get(key).cloned()
    }

    /// Puts the session back as `image` held it; every blocked reader looks again.
    pub(super) fn restore(&self, key: &SessionId, image: Option<Session>) {
        let mut sessions = self.lock();
        match image {
            Some(session) => sessions.insert(*key, session),
            None => sessions.remove(key),
        };
        drop(sessions);
        self.inner.appended.notify_waiters();
    }

    pub async fn read(
        &self,
        key: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Events, StoreError> {
        let deadline = tokio::time::Instant::now() + READ_BLOCK;
        loop {
            // Registered before looking, so an append between the look and the wait still wakes.
            let appended = self.inner.appended.notified();
            tokio::pin!(appended);
            appended.as_mut().enable();
            {
                let now = self.now_ms();
                let mut sessions = self.lock();
                let s = self.kept_stream(&mut sessions, key, stream, now)?;
                let events = s.after(after, max);
                if !events.is_empty() {
                    return Ok(events);
                }
            }
            if tokio::time::timeout_at(deadline, appended).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }
}
