//! The store's state and one method per store operation. Each method is what one Lua script
//! does, in the same order (what it checks first, what it refreshes, what it answers on a
//! conflict), so the two can be compared answer by answer.
//!
//! Idle expiry, the rule `lua/touch.lua` states: a request refreshes the session and the stream
//! record it reads, each for `session_idle_ms`; a finished stream is kept `finished_ms` from when
//! it finished. A record past its time is gone, as an expired key is: it is dropped where it is
//! next looked at. A blocked read ([`StoreMachine::read`]) refreshes nothing, as `XREAD` does.

use super::{
    Adoption, CallSpec, Events, Floor, MAX_KEPT_STREAMS, NewStream, Refused, Resumed, Retention,
    Snapshot, StoreFault, Writer,
};
use crate::ids::{SessionId, StreamId};
use crate::policy::Policy;
use crate::replica::{
    CallRecord, Lease, LeaseState, RecordState, StaleEpoch, StreamRecord, admits, forgot,
    lease_state,
};
use crate::tasks::TaskTable;
use crate::time::LabTime;
use crate::vocabulary::{BACKGROUND_SEVERITY, LogLevel, StreamKind};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

mod records;
use records::no_record;

/// Every session the store holds, by the store's clock (milliseconds, the caller's).
#[derive(Clone, Debug)]
pub struct StoreMachine {
    retention: Retention,
    /// Shared until written, as each stream is: see [`Session::streams`]. A hash map on the
    /// id's own bits: a model copies the map whenever it writes, and one session's table is a
    /// small allocation where a tree's node holds room for eleven.
    sessions: Arc<Sessions>,
    /// The tasks extension's tasks, on the same clock and behind the same lock as the
    /// sessions: one store for both revisions, with the one lease rule.
    tasks: Arc<TaskTable>,
}

type Sessions = HashMap<SessionId, Session, BuildHasherDefault<IdBits>>;

/// Hashes a session id by its low 64 bits: ids are drawn at random (never chosen by a client),
/// so they are spread already.
#[derive(Clone, Copy, Debug, Default)]
struct IdBits(u64);

impl Hasher for IdBits {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u128(&mut self, bits: u128) {
        self.0 ^= bits as u64;
    }
}

/// A stream's record as [`StoreMachine::look`] lends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLook<'a> {
    pub state: RecordState,
    pub epoch: u64,
    pub owner: &'a str,
    pub high_water: u64,
    /// A call's steps done, and its lease.
    pub call: Option<(u64, &'a Lease)>,
}

/// One session's records at an instant, for the lab's rollback fault: put back, they are what a
/// store restored from an older snapshot holds.
#[derive(Clone, Debug)]
pub struct SessionImage(Option<Session>);

#[derive(Clone, Debug)]
struct Session {
    /// By stream number. A number is allocated before a fence is checked, so a refused open
    /// uses one up, as the Redis store's counter does. Shared until written (`Arc::make_mut`):
    /// a model clones the store at every state it explores, and most steps write one record
    /// or none.
    streams: Streams,
    opened: u32,
    standalone: Option<StreamId>,
    background: u64,
    /// The session's running calls by request id (JSON text), for `notifications/cancelled`.
    calls: Arc<BTreeMap<String, StreamId>>,
    touched_ms: u64,
    /// The level the session's client set with `logging/setLevel`, if it set one: a background
    /// event (a log message) below it is withheld ([`LogLevel::sends`]).
    log_level: Option<LogLevel>,
}

#[derive(Clone, Debug)]
struct Stream {
    kind: StreamKind,
    key: u64,
    state: RecordState,
    epoch: u64,
    /// Shared: a model clones records by the million, and the holder changes only on a resume.
    owner: Arc<str>,
    high_water: u64,
    /// Events in sequence order, each with the batch (the write) it came in.
    log: VecDeque<Logged>,
    call: Option<Call>,
    finished_ms: Option<u64>,
    /// Ids handed out, then forgot by a rollback and skipped: `(first, last)`.
    forgotten: Option<(u64, u64)>,
    touched_ms: u64,
}

#[derive(Clone, Debug)]
struct Call {
    spec: Arc<CallSpec>,
    done: u64,
    lease: Lease,
}

/// One event of a log, and the last sequence of the batch it was written in: the log keeps and
/// reads whole batches, as the Redis store's entries are. (One flat queue rather than a queue of
/// batches: a model clones the store at every state.)
#[derive(Clone, Debug)]
struct Logged {
    seq: u64,
    batch_last: u64,
    data: String,
}

/// A session's records by stream number, in number order: numbers only grow, so a new one is
/// pushed at the end and a lookup is a binary search. A vector because a model clones a
/// session whenever it writes one record: one allocation, where a map copies a node.
#[derive(Clone, Debug, Default)]
struct Streams(Vec<(u32, Arc<Stream>)>);

impl Streams {
    fn at(&self, number: &u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(number, |(n, _)| *n)
    }

    fn get(&self, number: &u32) -> Option<&Arc<Stream>> {
        self.at(number).ok().map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, number: &u32) -> Option<&mut Arc<Stream>> {
        self.at(number).ok().map(|i| &mut self.0[i].1)
    }

    fn insert(&mut self, number: u32, stream: Arc<Stream>) {
        match self.at(&number) {
            Ok(i) => self.0[i].1 = stream,
            Err(i) => self.0.insert(i, (number, stream)),
        }
    }

    fn remove(&mut self, number: &u32) {
        if let Ok(i) = self.at(number) {
            self.0.remove(i);
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&Arc<Stream>) -> bool) {
        self.0.retain(|(_, s)| keep(s));
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl StoreMachine {
    pub fn new(retention: Retention) -> StoreMachine {
        StoreMachine {
            retention,
            sessions: Arc::default(),
            tasks: Arc::new(
                TaskTable::new()
                    .with_lease(retention.lease_ms)
                    .with_retain(retention.task_retain_ms),
            ),
        }
    }

    /// The task table at `now` (the store's milliseconds), its TTLs applied first, as every
    /// task script applies them to the task it touches; `true` when that ended or deleted a
    /// task (its waiters are told).
    pub fn tasks(&mut self, now: u64) -> (&mut TaskTable, bool) {
        let now = LabTime::from_millis(now);
        let tasks = Arc::make_mut(&mut self.tasks);
        let expired = tasks.poll_timeout().is_some_and(|at| at <= now) && {
            let before = tasks.len();
            !tasks.expire(now).is_empty() || tasks.len() != before
        };
        (tasks, expired)
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// The session if it is there and not idle past its time (one past it is dropped),
    /// untouched.
    fn session(&mut self, id: &SessionId, now: u64) -> Result<&mut Session, StoreFault> {
        let idle = self.retention.session_idle_ms;
        if self
            .sessions
            .get(id)
            .is_some_and(|s| now.saturating_sub(s.touched_ms) >= idle)
        {
            Arc::make_mut(&mut self.sessions).remove(id);
        }
        if !self.sessions.contains_key(id) {
            return Err(StoreFault::SessionGone);
        }
        Arc::make_mut(&mut self.sessions)
            .get_mut(id)
            .ok_or(StoreFault::SessionGone)
    }

    /// The session, refreshed: a request touched it.
    fn live(&mut self, id: &SessionId, now: u64) -> Result<&mut Session, StoreFault> {
        let session = self.session(id, now)?;
        session.touched_ms = now;
        Ok(session)
    }

    /// Opens a session unless the store holds its cap of them (after dropping those idle past
    /// their time). An open session is left as it is.
    pub fn open_session(&mut self, id: &SessionId, now: u64) -> Result<(), StoreFault> {
        let (cap, idle) = (self.retention.max_sessions, self.retention.session_idle_ms);
        if self.sessions.len() >= cap {
            Arc::make_mut(&mut self.sessions)
                .retain(|_, s| now.saturating_sub(s.touched_ms) < idle);
        }
        if self.sessions.len() >= cap {
            return Err(StoreFault::Full(format!("{cap} sessions")));
        }
        Arc::make_mut(&mut self.sessions)
            .entry(*id)
            .or_insert_with(|| Session {
                streams: Streams::default(),
                opened: 0,
                standalone: None,
                background: 0,
                calls: Arc::default(),
                touched_ms: now,
                log_level: None,
            })
            .touched_ms = now;
        Ok(())
    }

    pub fn session_exists(&mut self, id: &SessionId, now: u64) -> bool {
        self.live(id, now).is_ok()
    }

    /// Ends the session and everything in it; false when it was not there.
    pub fn end_session(&mut self, id: &SessionId, now: u64) -> bool {
        self.session(id, now).is_ok() && Arc::make_mut(&mut self.sessions).remove(id).is_some()
    }

    /// Opens a stream; `Ok(Err(epoch))` when the standalone stream to fence is no longer at the
    /// epoch it was read at (0: its record is gone), and nothing is fenced or opened.
    pub fn open_stream(
        &mut self,
        id: &SessionId,
        new: &NewStream,
        now: u64,
    ) -> Result<Result<StreamId, u64>, StoreFault> {
        let retention = self.retention;
        let session = self.live(id, now)?;
        // A record past its time frees its events, as its keys expire on Redis.
        session.streams.retain(|s| s.kept(now, &retention));
        if session.streams.len() >= MAX_KEPT_STREAMS {
            return Err(StoreFault::Full(format!(
                "{MAX_KEPT_STREAMS} streams kept in one session"
            )));
        }
        session.opened += 1;
        let stream = StreamId(session.opened);
        if let Some((fenced, expect)) = new.fence {
            let Some(old) = session.stream(fenced, now, &retention) else {
                return Ok(Err(0));
            };
            if old.epoch != expect {
                return Ok(Err(old.epoch));
            }
            old.epoch += 1;
            old.state = RecordState::Fenced;
        }
        let call = new.call.clone().map(|spec| Call {
            spec: Arc::new(spec),
            done: 0,
            lease: Lease {
                epoch: 1,
                owner: new.owner.clone(),
                until_ms: now + retention.lease_ms,
            },
        });
        match (new.kind, &call) {
            // The latest call with a request id is the one a cancel names.
            (StreamKind::Request, Some(call)) => {
                Arc::make_mut(&mut session.calls).insert(call.spec.request_id.clone(), stream);
            }
            (StreamKind::Request, None) => {}
            (StreamKind::Standalone, _) => session.standalone = Some(stream),
        }
        session.streams.insert(
            stream.0,
            Arc::new(Stream {
                kind: new.kind,
                key: new.key,
                state: RecordState::Live,
                epoch: 1,
                owner: new.owner.as_str().into(),
                high_water: 0,
                log: VecDeque::new(),
                call,
                finished_ms: None,
                forgotten: None,
                touched_ms: now,
            }),
        );
        Ok(Ok(stream))
    }

    /// `notifications/cancelled`: the session's running call with this request id finishes
    /// where it is, with no result. `None`: no such call is running.
    pub fn cancel(
        &mut self,
        id: &SessionId,
        request_id: &str,
        now: u64,
    ) -> Result<Option<StreamId>, StoreFault> {
        let retention = self.retention;
        let session = self.live(id, now)?;
        let Some(&stream) = session.calls.get(request_id) else {
            return Ok(None);
        };
        match session.stream(stream, now, &retention) {
            Some(s) if s.state == RecordState::Live => s.finish(now),
            _ => return Ok(None),
        }
        Arc::make_mut(&mut session.calls).remove(request_id);
        Ok(Some(stream))
    }

    /// The number of the session's last background event: a new emitter numbers on from it.
    pub fn background_number(&mut self, id: &SessionId, now: u64) -> Result<u64, StoreFault> {
        Ok(self.live(id, now)?.background)
    }

    /// `logging/setLevel`: background events below `level` are withheld from now on.
    pub fn set_log_level(
        &mut self,
        id: &SessionId,
        level: LogLevel,
        now: u64,
    ) -> Result<(), StoreFault> {
        self.live(id, now)?.log_level = Some(level);
        Ok(())
    }

    /// The session's current standalone stream.
    pub fn standalone(&mut self, id: &SessionId, now: u64) -> Result<Option<StreamId>, StoreFault> {
        Ok(self.live(id, now)?.standalone)
    }

    /// The stream's record and the events of up to `max` batches after `after`, at one instant.
    /// `None`: the session lives but the stream has no record.
    pub fn replay(
        &mut self,
        id: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
        now: u64,
    ) -> Result<Option<(Snapshot, Events)>, StoreFault> {
        let retention = self.retention;
        // A read that refreshes nothing new (the session and the record were refreshed at
        // this very `now`) changes nothing, so it reads what is shared rather than copy it.
        if let Some(session) = self.sessions.get(id)
            && session.touched_ms == now
            && let Some(s) = session.streams.get(&stream.0)
            && s.kept(now, &retention)
            && (s.touched_ms == now || s.state == RecordState::Finished)
        {
            return Ok(Some((s.record(stream, now), s.after(after, max))));
        }
        let session = self.live(id, now)?;
        let Some(s) = session.read(stream, now, &retention) else {
            return Ok(None);
        };
        Ok(Some((s.record(stream, now), s.after(after, max))))
    }

    pub fn snapshot(
        &mut self,
        id: &SessionId,
        stream: StreamId,
        now: u64,
    ) -> Result<Option<Snapshot>, StoreFault> {
        Ok(self
            .replay(id, stream, 0, 0, now)?
            .map(|(snapshot, _)| snapshot))
    }

    /// The stream's record as it is at `now`, borrowed, refreshing and dropping nothing: what a
    /// model looks at between its steps (which are enabled, its fingerprint), many times a
    /// state. `None`: no record.
    pub fn look(&self, id: &SessionId, stream: StreamId, now: u64) -> Option<RecordLook<'_>> {
        let session = self.sessions.get(id)?;
        (now.saturating_sub(session.touched_ms) < self.retention.session_idle_ms).then_some(())?;
        let s = session
            .streams
            .get(&stream.0)
            .filter(|s| s.kept(now, &self.retention))?;
        Some(RecordLook {
            state: s.state,
            epoch: s.epoch,
            owner: &s.owner,
            high_water: s.high_water,
            call: s.call.as_ref().map(|c| (c.done, &c.lease)),
        })
    }

    /// A delivery's read between replays: the events of up to `max` batches after `after`,
    /// refreshing nothing. A stream with no record (or no session) has none.
    pub fn read(
        &mut self,
        id: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
        now: u64,
    ) -> Events {
        let retention = self.retention;
        self.session(id, now)
            .ok()
            .and_then(|session| session.stream(stream, now, &retention))
            .map_or_else(Vec::new, |s| s.after(after, max))
    }

    /// A resume, one step: bumps the stream epoch from `expect` (when given), naming `owner`
    /// the holder, then (when `adopt` names the lease epoch read) takes the stream's call over
    /// if its lease expired. As one step, a replica never holds a call's stream without having
    /// had its one chance at the call. A refused attach refreshes and adopts nothing.
    pub fn resume(
        &mut self,
        id: &SessionId,
        stream: StreamId,
        expect: Option<u64>,
        adopt: Option<u64>,
        owner: &str,
        now: u64,
    ) -> Result<Result<Resumed, StaleEpoch>, StoreFault> {
        let retention = self.retention;
        let session = self.session(id, now)?;
        let mut epoch = None;
        if let Some(expect) = expect {
            let Some(s) = session.stream(stream, now, &retention) else {
                return Ok(Err(no_record(stream, owner, expect)));
            };
            if !admits(Policy::Fenced, s.epoch, expect) {
                return Ok(Err(StaleEpoch {
                    stream,
                    writer: owner.to_owned(),
                    writer_epoch: expect,
                    current: s.epoch,
                    holder: s.owner.to_string(),
                }));
            }
            s.epoch += 1;
            s.owner = owner.into();
            s.touch(now);
            epoch = Some(s.epoch);
            session.touched_ms = now;
        }
        let adoption = adopt.map(|lease| {
            session.touched_ms = now;
            session.take_over(stream, lease, owner, now, &retention)
        });
        Ok(Ok(Resumed { epoch, adoption }))
    }

    /// Takes a tool call over when its lease has expired by the store's clock and is still at
    /// the epoch the replica read: bumps the lease epoch, so the old runner's late steps are
    /// refused. (A delivery that finds its call's runner gone; a resume adopts in
    /// [`StoreMachine::resume`].)
    pub fn adopt(
        &mut self,
        id: &SessionId,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
        now: u64,
    ) -> Result<Adoption, StoreFault> {
        let retention = self.retention;
        let session = self.live(id, now)?;
        Ok(session.take_over(stream, expect_lease, owner, now, &retention))
    }

    /// Appends `events` as one batch (none: a lease renewal), finishing the stream after them if
    /// `finish`, if `writer`'s epoch is current: the fence, checked where the write lands.
    /// Returns the stream's high-water mark after the batch. A refusal refreshes nothing.
    pub fn append(
        &mut self,
        id: &SessionId,
        stream: StreamId,
        writer: Writer<'_>,
        events: &[String],
        finish: bool,
        now: u64,
    ) -> Result<Result<u64, Refused>, StoreFault> {
        let retention = self.retention;
        let session = self.session(id, now)?;
        let log_level = session.log_level;
        let Some(s) = session.stream(stream, now, &retention) else {
            return Ok(Err(match writer {
                Writer::Epoch { epoch, name, .. } | Writer::Lease { epoch, name, .. } => {
                    Refused::Stale(no_record(stream, name, epoch))
                }
                Writer::Unfenced { .. } => Refused::Closed(stream),
            }));
        };
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
                Some(call) if !admits(Policy::Fenced, call.lease.epoch, epoch) => {
                    return stale(call.lease.epoch, &call.lease.owner, name, epoch);
                }
                None => return stale(0, "", name, epoch),
                Some(_) => {}
            },
            _ => {}
        }
        if s.state != RecordState::Live {
            return Ok(Err(Refused::Closed(stream)));
        }
        let background = matches!(
            writer,
            Writer::Epoch {
                background: Some(_),
                ..
            } | Writer::Unfenced {
                background: Some(_),
                ..
            }
        );
        if background && !LogLevel::sends(log_level, BACKGROUND_SEVERITY) {
            return Ok(Err(Refused::BelowLogLevel));
        }
        let floor = match writer {
            Writer::Epoch { floor, .. } => Floor::Check(floor),
            Writer::Lease { floor, .. } => floor,
            Writer::Unfenced { .. } => Floor::Check(0),
        };
        match floor {
            Floor::Check(wrote) if forgot(s.high_water, wrote) => {
                return Ok(Err(Refused::RolledBack {
                    stream,
                    holds: s.high_water,
                    wrote,
                }));
            }
            // Skipped, never issued again; a resume from before them is refused.
            Floor::SkipTo(to) if forgot(s.high_water, to) => {
                s.forgotten = Some((s.high_water + 1, to));
                s.high_water = to;
            }
            _ => {}
        }
        if !events.is_empty() {
            let first = s.high_water + 1;
            s.high_water += events.len() as u64;
            let batch_last = s.high_water;
            s.log
                .extend((first..).zip(events).map(|(seq, data)| Logged {
                    seq,
                    batch_last,
                    data: data.clone(),
                }));
            // Keeps the newest `log_events` events, whole batches: one whose last event is
            // older goes.
            let keep_from = (s.high_water + 1).saturating_sub(retention.log_events);
            while s.log.front().is_some_and(|e| e.batch_last < keep_from) {
                s.log.pop_front();
            }
        }
        if let (Writer::Lease { done, .. }, Some(call)) = (writer, s.call.as_mut()) {
            call.lease.until_ms = now + retention.lease_ms;
            if let Some(done) = done {
                call.done = done;
            }
        }
        s.touch(now);
        if finish {
            s.finish(now);
        }
        let high_water = s.high_water;
        if finish
            && let Some(rid) = s.call.as_ref().map(|c| c.spec.request_id.clone())
            && session.calls.get(&rid) == Some(&stream)
        {
            Arc::make_mut(&mut session.calls).remove(&rid);
        }
        if let Writer::Epoch {
            background: Some(n),
            ..
        }
        | Writer::Unfenced {
            background: Some(n),
            ..
        } = writer
        {
            session.background = n;
        }
        session.touched_ms = now;
        Ok(Ok(high_water))
    }

    /// The session as it is now, for the lab's rollback fault.
    pub fn image(&self, id: &SessionId) -> SessionImage {
        SessionImage(self.sessions.get(id).cloned())
    }

    /// Puts the session back as `image` held it: what was written since is forgotten.
    pub fn restore(&mut self, id: &SessionId, image: &SessionImage) {
        match &image.0 {
            Some(session) => Arc::make_mut(&mut self.sessions).insert(*id, session.clone()),
            None => Arc::make_mut(&mut self.sessions).remove(id),
        };
    }
}
