//! `forkscope check --replicas 2`: the replica lab as plain data, explored breadth-first.
//!
//! The single-server explorer runs the whole [`Sim`](crate::sim::Sim); the replica lab has no
//! Sim, so this is a small model of it on the wire's own rules. What is shared is the store
//! itself, the core's [`StoreMachine`] that the in-memory store wraps and the Redis scripts are
//! held to, and every store operation is one atomic step of it, decided by the very functions
//! the wire calls: a GET by [`replica::decide_get`] and committed by the machine's `attach` on
//! the epoch it read, a write admitted or refused by the machine's `append`, a lease judged by
//! [`replica::lease_state`] and taken over by the machine's `adopt` when
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
use crate::replica::store::{CallSpec, NewStream, RecordLook, Retention, StoreMachine};
use crate::replica::{self, GetPlan, LeaseState, RecordState};
use crate::time::LabTime;
use crate::vocabulary::StreamKind;
use crate::work::{ToolCall, ToolSpec};
use serde::Serialize;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

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
    /// The call runner: the lease epoch it writes under, and the steps it has done.
    runner: Option<Runner>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Runner {
    lease: u64,
    done: u64,
}

impl Runner {
    /// The call as the core's [`ToolCall`] runs it after this runner's steps (the wire's
    /// runner's machine: which step is next, when it is over). Made when asked rather than
    /// kept: the search holds states by the million. The model takes a step whenever the
    /// search says, so the machine's steps have no delay.
    fn call(self, session: SessionId, now_ms: u64) -> ToolCall {
        let spec = ToolSpec {
            steps: CALL_STEPS,
            delay_ms: 0,
        };
        let now = LabTime::from_millis(now_ms);
        ToolCall::resumed(session, CALL, spec, true, self.done, now)
    }
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
    /// The shared store: the session's standalone stream and, once called, its tool call's.
    store: StoreMachine,
    /// Which replica wrote each event of the standalone stream (index `seq - 1`): a naive
    /// delivery hears only its own replica's.
    written_by: Vec<ReplicaId>,
    called: bool,
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
    /// What the steps' guards read of the store, read once a step.
    guards: Guards,
}

/// What the steps' guards read of the store's two records, read after each step: the search
/// asks every step of the alphabet whether it is enabled at every state it expands, and a look
/// into the store is a map search and a record's expiry checks each time.
#[derive(Clone, Copy, Debug, Default)]
struct Guards {
    /// The standalone stream's high-water mark.
    high_water: u64,
    /// The call's record is live.
    call_live: bool,
    /// The live call's lease while it holds by the store's clock: its epoch and holder.
    lease: Option<(u64, Option<ReplicaId>)>,
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
        let mut store = StoreMachine::new(Retention::default());
        let opened = store.open_session(&session, 0).and_then(|()| {
            let new = NewStream {
                kind: StreamKind::Standalone,
                key: STANDALONE_KEY,
                owner: a.to_string(),
                call: None,
                fence: None,
            };
            store.open_stream(&session, &new, 0)
        });
        debug_assert_eq!(opened, Ok(Ok(STANDALONE)), "an empty store opens stream 1");
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
            store,
            written_by: Vec::new(),
            called: false,
            replicas: [on_a, idle],
            connection: Connection::On(a),
            cursor: 0,
            emits: 0,
            reconnects: 0,
            appended: 0,
            applied: 0,
            decisions: 1,
            history: History::new(history_capacity),
            guards: Guards::default(),
        };
        lab.guards = lab.read_guards();
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
                request: None,
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
        self.history.checker().first_wanted(None)
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

    /// A stream's record as the store holds it now (a look, not a store operation).
    fn stored(&self, stream: StreamId) -> Option<RecordLook<'_>> {
        self.store.look(&self.session, stream, self.now_ms)
    }

    fn call_running(&self) -> bool {
        self.guards.call_live
    }

    /// The store as the guards read it (see [`Guards`]).
    fn read_guards(&self) -> Guards {
        let call = self.stored(CALL).filter(|c| c.state == RecordState::Live);
        let lease = call
            .and_then(|c| c.call)
            .filter(|(_, lease)| replica::lease_state(lease, self.now_ms) != LeaseState::Expired)
            .map(|(_, lease)| (lease.epoch, ReplicaId::parse(&lease.owner)));
        Guards {
            high_water: self.stored(STANDALONE).map_or(0, |s| s.high_water),
            call_live: call.is_some(),
            lease,
        }
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
                params.call && !self.called && self.replica(r).reaches_store()
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
        let Some((epoch, holder)) = self.guards.lease else {
            return false;
        };
        let holder = holder.map(|r| self.replica(r));
        holder.is_none_or(|h| !h.reaches_store() || h.runner.map(|r| r.lease) != Some(epoch))
    }

    /// The sequence `r`'s delivery would send next, if it can read one now. A fenced delivery
    /// on a stale epoch still reads (its read is refused in [`Self::send`], which ends it).
    fn next_send(&self, r: ReplicaId) -> Option<u64> {
        let replica = self.replica(r);
        if !replica.reaches_store() {
            return None;
        }
        let delivery = replica.delivery.as_ref()?;
        let high_water = self.guards.high_water;
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
                if let Some((_, lease)) = self.stored(CALL).and_then(|c| c.call) {
                    self.now_ms = self.now_ms.max(lease.until_ms);
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
        // Sends read the store and write only the history: the guards stay true through them.
        self.guards = self.read_guards();
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
}

/// The call the client makes, as the store opens it.
fn call_spec() -> CallSpec {
    CallSpec {
        steps: CALL_STEPS,
        delay_ms: 300,
        request_id: "1".into(),
        progress_token: None,
    }
}

fn fenced(policy: Policy, epoch: u64) -> Option<u64> {
    (policy == Policy::Fenced).then_some(epoch)
}

fn replica_id(index: u8) -> ReplicaId {
    // Indices below REPLICAS are always replicas.
    ReplicaId::new(index).unwrap_or_else(|| unreachable!("replica {index} of {REPLICAS}"))
}

mod explore;
mod steps;

pub use explore::{TracedStep, explore, trace};

#[cfg(test)]
mod tests;
