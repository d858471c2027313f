//! `forkscope check --replicas 2`: the replica lab as plain data, explored breadth-first.
//!
//! The single-server explorer runs the whole [`Sim`](crate::sim::Sim); the replica lab has no
//! Sim, so this is a small model of it on the wire's own rules. What is shared is kept as the
//! store keeps it ([`StreamRecord`]), and every store operation is one atomic step decided by
//! the very functions the wire calls: a GET by [`replica::decide_get`] and committed by
//! compare-and-set on the stream epoch, a write admitted or refused by [`replica::admits`], a
//! lease judged by [`replica::lease_state`] and taken over only when
//! [`replica::adoptable`] says so. What happened is recorded in a [`History`] with the replica
//! and epoch that did it, so the checker that judges the real lab judges the model: a send
//! from a replica the client left is the fork across replicas.
//!
//! The session is one standalone stream (and, when asked, one tool call's stream with its
//! lease). Each replica delivers the standalone stream on at most one connection — a new
//! attach on the same replica replaces its own older one: a fork within one replica is the
//! single-server explorer's to find. Counters (emits, reconnects) are bounded by [`Params`]
//! so the space is finite and small enough to explore deeply.

pub use crate::model::Level;

/// What the search of the replica lab found.
pub type Exploration = crate::model::Exploration<ReplicaStep, Params>;
pub type Counterexample = crate::model::Counterexample<ReplicaStep>;

use crate::canon::Canon;
use crate::history::{Anomaly, History, Record};
use crate::ids::{
    ByReplica, ConnectionId, EventId, IdScheme, ReplicaId, SessionId, SplitMix64, StreamId,
    WireCursor,
};
use crate::model::reached::Reached;
use crate::model::search::{self, Judged, Model};
use crate::model::{Delivery, Limits, Progress};
use crate::policy::Policy;
use crate::replica::{
    self, CallRecord, DEFAULT_LEASE_MS, GetPlan, Lease, LeaseState, RecordState, StreamRecord,
};
use crate::time::LabTime;
use crate::vocabulary::{IdentityProof, StreamKind};
use serde::Serialize;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// Explores every schedule of the replica lab up to `limits`, breadth-first, on `workers`
/// threads; stops at the first anomaly, or at a limit (`elapsed` is the caller's clock).
pub fn explore(
    policy: Policy,
    params: Params,
    limits: Limits,
    workers: NonZeroUsize,
    elapsed: &mut dyn FnMut() -> Duration,
    on_progress: &mut dyn FnMut(&Progress),
) -> Exploration {
    let mut root = ReplicaLab::new(policy, 1);
    root.keep_verdict_only();
    search::explore(root, params, limits, workers, elapsed, on_progress)
}

impl Model for ReplicaLab {
    type Step = ReplicaStep;
    type Rules = Params;
    type Marks = ();

    fn alphabet(params: &Params) -> Vec<ReplicaStep> {
        ReplicaStep::alphabet(params)
    }

    fn enabled(&self, step: ReplicaStep, params: &Params) -> bool {
        ReplicaLab::enabled(self, step, params)
    }

    fn take(&mut self, step: ReplicaStep, params: &Params) {
        ReplicaLab::take(self, step, params);
    }

    fn fingerprint(&self) -> u128 {
        ReplicaLab::fingerprint(self)
    }

    fn judge(&self, _: &Params) -> Judged {
        match self.anomaly() {
            Some(anomaly) => Judged::Broken {
                anomaly: Box::new(anomaly.clone()),
                ends_run: false,
            },
            None => Judged::Holds,
        }
    }

    fn policy(&self) -> Policy {
        self.policy
    }

    fn marks(&self) {}

    fn reached(_: &(), _: &()) -> Reached {
        Reached::default()
    }
}

/// Replicas the model runs: the smallest lab in which a fork across replicas can happen.
pub const REPLICAS: usize = 2;

/// The session's standalone stream and its tool call's stream.
const STANDALONE: StreamId = StreamId(1);
const CALL: StreamId = StreamId(2);
/// The keys keyed event ids carry (64 bits of each stream's token); any fixed pair will do.
const STANDALONE_KEY: u64 = 0x5eed_0001;
const CALL_KEY: u64 = 0x5eed_0002;

/// Progress steps the tool call takes before its result.
pub const CALL_STEPS: u64 = 2;

/// How far the model goes besides the depth: each counter bounds a step that could repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Params {
    /// Background emits tried (landed or refused), over both replicas.
    pub emits: u8,
    /// Reconnects the client makes.
    pub reconnects: u8,
    /// The client calls the tool once (a lease to expire and a call to adopt).
    pub call: bool,
    /// Sends as steps of their own, or at once after every step (as over loopback).
    pub delivery: Delivery,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            emits: 3,
            reconnects: 3,
            call: true,
            delivery: Delivery::Interleaved,
        }
    }
}

/// One atomic step of the replica lab: one store operation, or one event on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "step", content = "replica")]
pub enum ReplicaStep {
    /// The client's connection drops half-open: the replica holding it is not told.
    Drop,
    /// The client reconnects through this replica: its GET is decided on the store record and
    /// committed (and a tool call whose lease expired is adopted on the way).
    Reconnect(ReplicaId),
    /// The replica's background emitter appends an event under the epoch it holds.
    Emit(ReplicaId),
    /// The replica's delivery sends the next event it reads from the log to its connection.
    Send(ReplicaId),
    /// The client calls the tool through this replica, which runs it under a fresh lease.
    CallStart(ReplicaId),
    /// The replica's call runner commits the call's next step under its lease.
    CallStep(ReplicaId),
    /// The store's clock passes the call's lease, which its runner could not renew.
    LeaseExpires,
    /// The replica is cut off from the store: its store operations fail.
    Partition(ReplicaId),
    Heal(ReplicaId),
    /// The replica crashes: its work ends, and the client's connection through it goes silent.
    Kill(ReplicaId),
}

impl fmt::Display for ReplicaStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplicaStep::Drop => write!(f, "the client's connection drops half-open"),
            ReplicaStep::Reconnect(r) => write!(f, "the client reconnects through replica {r}"),
            ReplicaStep::Emit(r) => write!(f, "replica {r}'s background emitter emits"),
            ReplicaStep::Send(r) => write!(f, "replica {r}'s delivery sends the next event"),
            ReplicaStep::CallStart(r) => write!(f, "the client calls the tool through replica {r}"),
            ReplicaStep::CallStep(r) => write!(f, "replica {r} commits the call's next step"),
            ReplicaStep::LeaseExpires => write!(f, "the call's lease expires"),
            ReplicaStep::Partition(r) => write!(f, "replica {r} is partitioned from the store"),
            ReplicaStep::Heal(r) => write!(f, "replica {r}'s partition heals"),
            ReplicaStep::Kill(r) => write!(f, "replica {r} is killed"),
        }
    }
}

impl ReplicaStep {
    /// Every step the model tries, in the order it tries them.
    pub fn alphabet(params: &Params) -> Vec<ReplicaStep> {
        let mut all = vec![ReplicaStep::Drop];
        for r in replicas() {
            all.push(ReplicaStep::Reconnect(r));
            all.push(ReplicaStep::Emit(r));
            if params.delivery == Delivery::Interleaved {
                all.push(ReplicaStep::Send(r));
            }
        }
        if params.call {
            for r in replicas() {
                all.push(ReplicaStep::CallStart(r));
                all.push(ReplicaStep::CallStep(r));
            }
            all.push(ReplicaStep::LeaseExpires);
        }
        for r in replicas() {
            all.push(ReplicaStep::Partition(r));
            all.push(ReplicaStep::Heal(r));
            all.push(ReplicaStep::Kill(r));
        }
        all
    }
}

fn replicas() -> impl Iterator<Item = ReplicaId> {
    (0..REPLICAS as u8).filter_map(ReplicaId::new)
}

/// A replica's delivery of the standalone stream to one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Delivering {
    /// The stream epoch it was attached on (`None`: naive, which takes none).
    epoch: Option<u64>,
    /// The newest sequence it has sent.
    sent: u64,
    /// Naive: it replays the log up to this, then hears only its own replica's writes.
    replay_to: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Replica {
    alive: bool,
    partitioned: bool,
    delivery: Option<Delivering>,
    /// The background emitter, on the stream epoch it writes under.
    emitter: Option<Option<u64>>,
    /// The call runner, on the lease epoch it writes under.
    runner: Option<u64>,
}

impl Replica {
    fn reaches_store(&self) -> bool {
        self.alive && !self.partitioned
    }
}

/// Where the client's connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Connection {
    On(ReplicaId),
    /// Dropped (or silent since its replica died): the client is between attempts.
    Reconnecting,
}

/// The replica lab: the store's records, two replicas, the client, and the history.
#[derive(Clone, Debug)]
pub struct ReplicaLab {
    policy: Policy,
    session: SessionId,
    /// The store's clock, in milliseconds.
    now_ms: u64,
    standalone: StreamRecord,
    /// Which replica wrote each event of the standalone stream (index `seq - 1`): a naive
    /// delivery hears only its own replica's.
    written_by: Vec<ReplicaId>,
    call: Option<StreamRecord>,
    replicas: [Replica; REPLICAS],
    connection: Connection,
    /// The sequence of the newest standalone event the client applied.
    cursor: u64,
    emits: u8,
    reconnects: u8,
    /// Events appended to the log (what a scenario waits for as `emits`).
    appended: u64,
    /// Events the client applied.
    applied: u64,
    /// GETs ruled on by the replicas.
    decisions: u64,
    history: History,
}

/// What the lab shows after a step: what a scenario waits on to stay in step with the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub appended: u64,
    pub applied: u64,
    pub decisions: u64,
    pub connected: bool,
    pub refused: u64,
}

impl ReplicaLab {
    /// The lab every schedule starts from: the client connected through replica A to a fresh
    /// session, its stream's priming event received, A's background emitter running.
    pub fn new(policy: Policy, history_capacity: usize) -> ReplicaLab {
        let session = SessionId::generate(&mut SplitMix64::new(super::SEED));
        let a = replica_id(0);
        let epoch = 1;
        let standalone = StreamRecord {
            stream: STANDALONE,
            kind: StreamKind::Standalone,
            key: STANDALONE_KEY,
            state: RecordState::Live,
            epoch,
            owner: a.to_string(),
            high_water: 0,
            oldest_kept: 1,
            call: None,
            now_ms: 0,
            forgotten: None,
        };
        let idle = Replica {
            alive: true,
            partitioned: false,
            delivery: None,
            emitter: None,
            runner: None,
        };
        let mut on_a = idle.clone();
        on_a.delivery = Some(Delivering {
            epoch: fenced(policy, epoch),
            sent: 0,
            // Naive: a fresh stream has nothing to replay; it hears A's own writes.
            replay_to: (policy == Policy::Naive).then_some(0),
        });
        on_a.emitter = Some(fenced(policy, epoch));
        let mut lab = ReplicaLab {
            policy,
            session,
            now_ms: 0,
            standalone,
            written_by: Vec::new(),
            call: None,
            replicas: [on_a, idle],
            connection: Connection::On(a),
            cursor: 0,
            emits: 0,
            reconnects: 0,
            appended: 0,
            applied: 0,
            decisions: 1,
            history: History::new(history_capacity),
        };
        let by = lab.by(a, fenced(policy, epoch));
        lab.record(by, Record::SessionOpened { session });
        lab.record(
            by,
            Record::StreamOpened {
                session,
                stream: STANDALONE,
                stream_kind: StreamKind::Standalone,
                ids: IdScheme::Keyed,
                flagged_new: true,
            },
        );
        lab.record(
            by,
            Record::Attached {
                session,
                stream: STANDALONE,
                connection: ConnectionId(0),
            },
        );
        lab
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    /// The first anomaly the checker named, if any.
    /// The first violation the checker named (an undelivered obligation the client was told
    /// of is not one).
    pub fn anomaly(&self) -> Option<&Anomaly> {
        self.history
            .checker()
            .anomalies()
            .iter()
            .find(|a| a.kind().is_violation())
    }

    pub fn observed(&self) -> Observed {
        Observed {
            appended: self.appended,
            applied: self.applied,
            decisions: self.decisions,
            connected: matches!(self.connection, Connection::On(_)),
            refused: self.history.checker().counters().late_emits_refused,
        }
    }

    /// Keeps only the verdict of the history: the search holds states by the hundred thousand.
    pub(crate) fn keep_verdict_only(&mut self) {
        self.history.keep_verdict_only();
    }

    fn replica(&self, r: ReplicaId) -> &Replica {
        &self.replicas[r.index()]
    }

    fn replica_mut(&mut self, r: ReplicaId) -> &mut Replica {
        &mut self.replicas[r.index()]
    }

    fn by(&self, r: ReplicaId, epoch: Option<u64>) -> Option<ByReplica> {
        Some(ByReplica { replica: r, epoch })
    }

    fn record(&mut self, by: Option<ByReplica>, record: Record) {
        self.history
            .record_by(LabTime::from_millis(self.now_ms), by, record);
    }

    fn call_running(&self) -> bool {
        self.call
            .as_ref()
            .is_some_and(|c| c.state == RecordState::Live)
    }

    /// Whether `step` can be taken now under `params`.
    pub fn enabled(&self, step: ReplicaStep, params: &Params) -> bool {
        match step {
            ReplicaStep::Drop => matches!(self.connection, Connection::On(_)),
            ReplicaStep::Reconnect(r) => {
                self.connection == Connection::Reconnecting
                    && self.reconnects < params.reconnects
                    && self.replica(r).reaches_store()
            }
            ReplicaStep::Emit(r) => {
                self.emits < params.emits
                    && self.replica(r).reaches_store()
                    && self.replica(r).emitter.is_some()
            }
            ReplicaStep::Send(r) => self.next_send(r).is_some(),
            ReplicaStep::CallStart(r) => {
                params.call && self.call.is_none() && self.replica(r).reaches_store()
            }
            ReplicaStep::CallStep(r) => {
                self.call_running()
                    && self.replica(r).reaches_store()
                    && self.replica(r).runner.is_some()
            }
            ReplicaStep::LeaseExpires => self.lease_unrenewed(),
            ReplicaStep::Partition(r) => self.replica(r).reaches_store(),
            ReplicaStep::Heal(r) => self.replica(r).alive && self.replica(r).partitioned,
            ReplicaStep::Kill(r) => self.replica(r).alive,
        }
    }

    /// A running call's lease still held by the store's clock whose holder cannot renew it
    /// (killed, partitioned, or no longer running the call): only then does time pass it. A
    /// runner that reaches the store renews well before expiry.
    fn lease_unrenewed(&self) -> bool {
        let Some(call) = self.call.as_ref().filter(|_| self.call_running()) else {
            return false;
        };
        let Some(record) = &call.call else {
            return false;
        };
        let lease = &record.lease;
        if replica::lease_state(lease, self.now_ms) == LeaseState::Expired {
            return false;
        }
        let holder = ReplicaId::parse(&lease.owner).map(|r| self.replica(r));
        holder.is_none_or(|h| !h.reaches_store() || h.runner != Some(lease.epoch))
    }

    /// The sequence `r`'s delivery would send next, if it can read one now. A fenced delivery
    /// on a stale epoch still reads (its read is refused in [`Self::send`], which ends it).
    fn next_send(&self, r: ReplicaId) -> Option<u64> {
        let replica = self.replica(r);
        if !replica.reaches_store() {
            return None;
        }
        let delivery = replica.delivery.as_ref()?;
        let high_water = self.standalone.high_water;
        match delivery.replay_to {
            None => (delivery.sent < high_water).then_some(delivery.sent + 1),
            // Naive: the replay from the log, then only what its own replica writes.
            Some(replay_to) => ((delivery.sent + 1)..=high_water).find(|seq| {
                *seq <= replay_to || self.written_by.get(*seq as usize - 1) == Some(&r)
            }),
        }
    }

    /// Takes `step` (which must be enabled), then under eager delivery every send it allows.
    pub fn take(&mut self, step: ReplicaStep, params: &Params) {
        match step {
            ReplicaStep::Drop => self.connection = Connection::Reconnecting,
            ReplicaStep::Reconnect(r) => self.reconnect(r),
            ReplicaStep::Emit(r) => self.emit(r),
            ReplicaStep::Send(r) => self.send(r),
            ReplicaStep::CallStart(r) => self.call_start(r),
            ReplicaStep::CallStep(r) => self.call_step(r),
            ReplicaStep::LeaseExpires => {
                if let Some(lease) = self.call.as_ref().and_then(|c| c.call.as_ref()) {
                    self.now_ms = self.now_ms.max(lease.lease.until_ms);
                }
            }
            ReplicaStep::Partition(r) => self.replica_mut(r).partitioned = true,
            ReplicaStep::Heal(r) => self.replica_mut(r).partitioned = false,
            ReplicaStep::Kill(r) => {
                *self.replica_mut(r) = Replica {
                    alive: false,
                    partitioned: false,
                    delivery: None,
                    emitter: None,
                    runner: None,
                };
                if self.connection == Connection::On(r) {
                    self.connection = Connection::Reconnecting;
                }
            }
        }
        if params.delivery == Delivery::Eager {
            self.send_everything();
        }
    }

    /// Every delivery sends all it can, replica A first: loopback, where nothing waits.
    fn send_everything(&mut self) {
        for r in replicas() {
            while self.next_send(r).is_some() {
                self.send(r);
            }
        }
    }

    fn standalone_snapshot(&self) -> StreamRecord {
        StreamRecord {
            now_ms: self.now_ms,
            forgotten: None,
            ..self.standalone.clone()
        }
    }

    fn reconnect(&mut self, r: ReplicaId) {
        self.reconnects += 1;
        self.decisions += 1;
        let session = self.session;
        let record = self.standalone_snapshot();
        let cursor = WireCursor::Keyed {
            event: EventId {
                stream: STANDALONE,
                seq: self.cursor,
            },
            key: STANDALONE_KEY,
        }
        .to_string();
        let plan = replica::decide_get(self.policy, Some(&cursor), Some(&record), Some(&record));
        let (after, expect_epoch) = match plan {
            GetPlan::Resume {
                after,
                expect_epoch,
                ..
            } => (after, expect_epoch),
            GetPlan::Reject(rejected) => {
                let by = self.by(r, None);
                let reason = rejected.reason();
                self.record(by, Record::ResumeRejected { session, reason });
                return;
            }
            // A keyed cursor of a stream the store keeps is resumed or refused, never answered
            // with a new stream: the client stays between attempts.
            GetPlan::Open { .. } => return,
        };
        // The compare-and-set: the record was read in this same step, so its epoch holds.
        let epoch = match expect_epoch {
            Some(read) => {
                self.standalone.epoch = read + 1;
                self.standalone.owner = r.to_string();
                Some(read + 1)
            }
            None => None,
        };
        let high_water = self.standalone.high_water;
        let by = self.by(r, epoch);
        self.record(
            by,
            Record::ResumeAccepted {
                session,
                stream: STANDALONE,
                after,
                replay_len: (high_water - after) as usize,
                proof: match self.policy {
                    Policy::Fenced => IdentityProof::EventIdKey,
                    _ => IdentityProof::Unchecked,
                },
            },
        );
        self.record(
            by,
            Record::Attached {
                session,
                stream: STANDALONE,
                connection: ConnectionId(u64::from(self.reconnects)),
            },
        );
        let replica = self.replica_mut(r);
        replica.delivery = Some(Delivering {
            epoch,
            sent: after,
            replay_to: epoch.is_none().then_some(high_water),
        });
        replica.emitter = Some(epoch);
        self.connection = Connection::On(r);
        if self.call_running() {
            self.resume_call(r);
        }
    }

    /// The client's GET for its tool call's stream, through `r`: a call whose lease expired is
    /// adopted here, under a bumped lease epoch.
    fn resume_call(&mut self, r: ReplicaId) {
        let Some(call) = self.call.as_ref() else {
            return;
        };
        self.decisions += 1;
        let record = StreamRecord {
            now_ms: self.now_ms,
            forgotten: None,
            ..call.clone()
        };
        let cursor = WireCursor::Keyed {
            event: EventId {
                stream: CALL,
                seq: 0,
            },
            key: CALL_KEY,
        }
        .to_string();
        let plan = replica::decide_get(self.policy, Some(&cursor), Some(&record), None);
        let GetPlan::Resume {
            expect_epoch,
            adopt,
            ..
        } = plan
        else {
            return;
        };
        let now_ms = self.now_ms;
        let session = self.session;
        let Some(call) = self.call.as_mut() else {
            return;
        };
        if let Some(read) = expect_epoch {
            call.epoch = read + 1;
            call.owner = r.to_string();
        }
        let Some(lease_epoch) = adopt else {
            return;
        };
        let Some(progress) = call.call.as_mut() else {
            return;
        };
        progress.lease = Lease {
            epoch: lease_epoch + 1,
            owner: r.to_string(),
            until_ms: now_ms + DEFAULT_LEASE_MS,
        };
        let done = progress.done;
        self.replica_mut(r).runner = Some(lease_epoch + 1);
        let by = self.by(r, Some(lease_epoch + 1));
        self.record(
            by,
            Record::CallAdopted {
                session,
                stream: CALL,
                lease: lease_epoch + 1,
                done,
            },
        );
    }

    fn emit(&mut self, r: ReplicaId) {
        self.emits += 1;
        let Some(epoch) = self.replica(r).emitter else {
            return;
        };
        let stored = self.standalone.epoch;
        if replica::admits(self.policy, stored, epoch.unwrap_or(stored)) {
            self.standalone.high_water += 1;
            self.written_by.push(r);
            self.appended += 1;
            return;
        }
        // Refused: the emitter learns its epoch is stale and stops.
        self.replica_mut(r).emitter = None;
        let holder = ReplicaId::parse(&self.standalone.owner);
        let by = self.by(r, epoch);
        let session = self.session;
        self.record(
            by,
            Record::StaleWriteRefused {
                session,
                stream: STANDALONE,
                epoch: epoch.unwrap_or(0),
                current: stored,
                holder,
            },
        );
    }

    fn send(&mut self, r: ReplicaId) {
        let Some(seq) = self.next_send(r) else {
            return;
        };
        let Some(delivery) = self.replica(r).delivery.clone() else {
            return;
        };
        let stored = self.standalone.epoch;
        if let Some(epoch) = delivery.epoch
            && !replica::admits(self.policy, stored, epoch)
        {
            // The read carries the epoch too: a superseded delivery ends instead of sending.
            self.replica_mut(r).delivery = None;
            return;
        }
        if let Some(d) = self.replica_mut(r).delivery.as_mut() {
            d.sent = seq;
        }
        let session = self.session;
        let key: Arc<str> = format!("{}:bg:{seq}", session.short()).into();
        let by = self.by(r, delivery.epoch);
        self.record(
            by,
            Record::Emitted {
                session,
                stream: STANDALONE,
                seq,
                key: key.clone(),
                copied: false,
            },
        );
        if self.connection != Connection::On(r) {
            // A half-open connection: the send goes nowhere the client reads.
            return;
        }
        let event = EventId {
            stream: STANDALONE,
            seq,
        };
        let applied = seq > self.cursor;
        self.record(
            None,
            Record::Delivered {
                session,
                event,
                key,
                applied,
            },
        );
        if applied {
            self.applied += 1;
            let from = EventId {
                stream: STANDALONE,
                seq: self.cursor,
            };
            self.cursor = seq;
            self.record(
                None,
                Record::CursorMoved {
                    session,
                    from: Some(from),
                    to: event,
                    reset: false,
                },
            );
        }
    }

    fn call_start(&mut self, r: ReplicaId) {
        let session = self.session;
        self.call = Some(StreamRecord {
            stream: CALL,
            kind: StreamKind::Request,
            key: CALL_KEY,
            state: RecordState::Live,
            epoch: 1,
            owner: r.to_string(),
            high_water: 0,
            oldest_kept: 1,
            call: Some(CallRecord {
                steps: CALL_STEPS,
                delay_ms: 300,
                done: 0,
                lease: Lease {
                    epoch: 1,
                    owner: r.to_string(),
                    until_ms: self.now_ms + DEFAULT_LEASE_MS,
                },
            }),
            now_ms: self.now_ms,
            forgotten: None,
        });
        self.replica_mut(r).runner = Some(1);
        let by = self.by(r, fenced(self.policy, 1));
        self.record(
            by,
            Record::StreamOpened {
                session,
                stream: CALL,
                stream_kind: StreamKind::Request,
                ids: IdScheme::Keyed,
                flagged_new: true,
            },
        );
    }

    fn call_step(&mut self, r: ReplicaId) {
        let Some(writer) = self.replica(r).runner else {
            return;
        };
        let policy = self.policy;
        let now_ms = self.now_ms;
        let Some(call) = self.call.as_mut() else {
            return;
        };
        let Some(progress) = call.call.as_mut() else {
            return;
        };
        let stored = progress.lease.epoch;
        if replica::admits(policy, stored, writer) {
            progress.done += 1;
            progress.lease.until_ms = now_ms + DEFAULT_LEASE_MS;
            call.high_water += 1;
            if progress.done > progress.steps {
                call.state = RecordState::Finished;
                self.replica_mut(r).runner = None;
            }
            return;
        }
        let holder = ReplicaId::parse(&progress.lease.owner);
        self.replica_mut(r).runner = None;
        let by = self.by(r, Some(writer));
        let session = self.session;
        self.record(
            by,
            Record::StaleWriteRefused {
                session,
                stream: CALL,
                epoch: writer,
                current: stored,
                holder,
            },
        );
    }

    /// The canonical form's 128-bit fingerprint: what the search deduplicates on. Absolute
    /// time is left out (only whether the lease has expired is read), and so is what only a
    /// report reads (the counts of events applied and decisions).
    pub fn fingerprint(&self) -> u128 {
        let mut c = Canon::new(
            LabTime::from_millis(self.now_ms),
            vec![self.session],
            std::iter::empty(),
            Vec::new(),
        );
        self.history.canonical(&mut c);
        canonical_record(&mut c, &self.standalone, self.now_ms);
        c.number(self.written_by.len() as u64);
        for r in &self.written_by {
            c.number(r.index() as u64);
        }
        match &self.call {
            Some(call) => {
                c.tag(1);
                canonical_record(&mut c, call, self.now_ms);
            }
            None => c.tag(0),
        }
        for replica in &self.replicas {
            c.flag(replica.alive);
            c.flag(replica.partitioned);
            match &replica.delivery {
                Some(d) => {
                    c.tag(1);
                    c.number(d.epoch.map_or(0, |e| e + 1));
                    c.number(d.sent);
                    c.number(d.replay_to.map_or(0, |e| e + 1));
                }
                None => c.tag(0),
            }
            c.number(replica.emitter.map_or(0, |e| e.map_or(1, |e| e + 2)));
            c.number(replica.runner.map_or(0, |e| e + 1));
        }
        c.number(match self.connection {
            Connection::On(r) => r.index() as u64 + 1,
            Connection::Reconnecting => 0,
        });
        c.number(self.cursor);
        c.number(u64::from(self.emits));
        c.number(u64::from(self.reconnects));
        c.fingerprint()
    }
}

fn canonical_record(c: &mut Canon, record: &StreamRecord, now_ms: u64) {
    c.tag(record.state as u8);
    c.number(record.epoch);
    c.text(&record.owner);
    c.number(record.high_water);
    if let Some(call) = &record.call {
        c.number(call.done);
        c.number(call.lease.epoch);
        c.text(&call.lease.owner);
        c.flag(replica::lease_state(&call.lease, now_ms) == LeaseState::Expired);
    }
}

fn fenced(policy: Policy, epoch: u64) -> Option<u64> {
    (policy == Policy::Fenced).then_some(epoch)
}

fn replica_id(index: u8) -> ReplicaId {
    // Indices below REPLICAS are always replicas.
    ReplicaId::new(index).unwrap_or_else(|| unreachable!("replica {index} of {REPLICAS}"))
}

/// One step of a counterexample in words: what it did, and what the checker concluded.
#[derive(Clone, Debug, Serialize)]
pub struct TracedStep {
    pub step: ReplicaStep,
    pub said: String,
    pub happened: Vec<String>,
    pub anomalies: Vec<String>,
    /// What the lab showed after the step.
    #[serde(skip)]
    pub observed: Observed,
    /// Whether the client's connection was through the step's replica before it was taken.
    #[serde(skip)]
    pub client_was_on: Option<ReplicaId>,
}

/// Replays `steps` from the start, telling each: the narration of a counterexample, and what a
/// scenario waits on after each step.
pub fn trace(policy: Policy, params: &Params, steps: &[ReplicaStep]) -> Vec<TracedStep> {
    let mut lab = ReplicaLab::new(policy, 4096);
    let mut told = Vec::with_capacity(steps.len());
    for &step in steps {
        let before = lab.history.total();
        let client_was_on = match lab.connection {
            Connection::On(r) => Some(r),
            Connection::Reconnecting => None,
        };
        lab.take(step, params);
        let fresh = (lab.history.total() - before) as usize;
        let recent = lab.history.recent();
        let entries = recent.iter().skip(recent.len().saturating_sub(fresh));
        let mut happened = Vec::new();
        let mut anomalies = Vec::new();
        for entry in entries {
            if let Some(words) = entry.record.describe() {
                let who = entry.by.map_or(String::new(), |b| match b.epoch {
                    Some(e) => format!("[{} @{e}] ", b.replica),
                    None => format!("[{}] ", b.replica),
                });
                happened.push(format!("{who}{words}"));
            }
            anomalies.extend(entry.caused.anomalies().iter().map(ToString::to_string));
        }
        told.push(TracedStep {
            step,
            said: step.to_string(),
            happened,
            anomalies,
            observed: lab.observed(),
            client_was_on,
        });
    }
    told
}

#[cfg(test)]
mod tests;
