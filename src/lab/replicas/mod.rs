//! A lab of replicas (`forkscope --replicas 2`): the MCP server as two or more replicas on one
//! store (in memory, or a real Redis), behind the balancer, with the fault proxy and the lab's
//! client in front as in a lab of one. What each replica decides and sends reaches the lab's
//! history tagged with the replica and the epoch it held ([`forkscope_core::ByReplica`]), so
//! the core's checker names a fork across replicas by the replicas it spans.
//!
//! The lab only wires and reports: the replicas decide with the core's rules
//! ([`forkscope_core::replica`]), and the store commits on epochs.

mod facts;
mod store_faults;
mod watch;

use watch::{Seen, Watch, poll_store};

use crate::clock::LabClock;
use crate::store::{Link, Retention, Store};
use crate::wire::Shared;
use crate::wire::balance::{Balancer, Mode, Upstream};
use crate::wire::replica::witness::Witness;
use crate::wire::replica::{self, ReplicaOptions, RunningReplica};
use forkscope_core::history::Record;
use forkscope_core::replica::{DEFAULT_LEASE_MS, NotAReplicaPolicy, RecordState, ReplicaPolicy};
use forkscope_core::{ByReplica, EmitRate, Policy, ReplicaId, SessionId, StreamId, StreamKind};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;

/// The most replicas a lab runs.
pub const MAX_REPLICAS: u8 = 4;
/// Facts each replica's pane keeps, newest last.
const RECENT_FACTS: usize = 8;
/// Streams of the client's session the lab reads back from the store for the panes.
const WATCHED_STREAMS: usize = 8;
/// How often the panes' copy of the store's records is read again.
const STORE_POLL: Duration = Duration::from_millis(100);

/// Where the replicas keep what they share.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreChoice {
    #[default]
    Memory,
    /// A real Redis, `redis://HOST:PORT[/DB]`.
    Redis(String),
}

/// How the balancer picks a replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Every request to the next replica in turn: a reconnect may land anywhere.
    #[default]
    RoundRobin,
    /// A session's requests to the replica that answered its `initialize`.
    Sticky,
}

impl Routing {
    fn mode(self) -> Mode {
        match self {
            Routing::RoundRobin => Mode::RoundRobin,
            Routing::Sticky => Mode::Sticky,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Routing::RoundRobin => "round-robin",
            Routing::Sticky => "sticky",
        }
    }
}

/// How a lab of replicas is set up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaSetup {
    /// 2 to [`MAX_REPLICAS`].
    pub count: u8,
    pub store: StoreChoice,
    /// How long a tool call's runner holds its lease without renewing it.
    pub lease_ms: u64,
    pub routing: Routing,
    /// A fault planted in every replica's task runners, each time one starts (a scenario's
    /// `mutate`).
    pub mutate: Option<forkscope_core::work::Mutation>,
}

impl Default for ReplicaSetup {
    fn default() -> Self {
        ReplicaSetup {
            count: 2,
            store: StoreChoice::Memory,
            lease_ms: DEFAULT_LEASE_MS,
            routing: Routing::RoundRobin,
            mutate: None,
        }
    }
}

/// A replica as the panes show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    Up,
    /// Running, serving, and cut off from the store.
    Partitioned,
    Killed,
}

impl ReplicaState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaState::Up => "up",
            ReplicaState::Partitioned => "partitioned",
            ReplicaState::Killed => "killed",
        }
    }
}

/// A stream whose delivery runs on a replica: the client's connection, or an orphan's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub stream: StreamId,
    pub connection: u64,
    pub epoch: Option<u64>,
    /// The stream is attached on another replica or epoch now, as the checker judges: this
    /// delivery is an orphan.
    pub superseded: bool,
}

#[derive(Clone, Debug)]
pub struct ReplicaView {
    pub id: ReplicaId,
    pub addr: SocketAddr,
    pub state: ReplicaState,
    pub holds: Vec<Held>,
    /// Requests the balancer sent it.
    pub forwarded: u64,
    /// The balancer's next request goes here.
    pub next: bool,
    pub late_writes_refused: u64,
    pub deliveries_fenced: u64,
    pub calls_adopted: u64,
    pub resumes: u64,
    /// Events it sent live, all streams.
    pub sent: u64,
    /// What it did last, in words, newest last.
    pub recent: Vec<String>,
}

/// One stream's record in the store, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredStream {
    pub stream: StreamId,
    pub kind: StreamKind,
    pub state: RecordState,
    pub epoch: u64,
    /// The replica that took the epoch (or opened the stream).
    pub owner: String,
    pub high_water: u64,
    /// A tool call's lease: epoch, holder, steps committed.
    pub lease: Option<(u64, String, u64)>,
}

/// Everything the replica panes show, at one instant.
#[derive(Clone, Debug)]
pub struct ReplicasView {
    pub store: String,
    pub routing: Routing,
    pub lease_ms: u64,
    pub replicas: Vec<ReplicaView>,
    /// The client's session's streams in the store, oldest first.
    pub streams: Vec<StoredStream>,
    /// The last store read failed (the store is down or restarting).
    pub store_error: Option<String>,
}

/// One replica's place in the lab: its address, its link to the store, and the replica while
/// it runs.
#[derive(Debug)]
struct Slot {
    id: ReplicaId,
    addr: SocketAddr,
    link: Link,
    running: Option<RunningReplica>,
}

/// The running replicas, their store and balancer.
pub struct Replicas {
    setup: ReplicaSetup,
    store: Store,
    slots: Mutex<Vec<Slot>>,
    balancer: Balancer,
    watch: Arc<Mutex<Watch>>,
    template: ReplicaOptions,
    shared: Shared,
    clock: Arc<LabClock>,
    poller: JoinHandle<()>,
    /// Actions still being carried out in the background (a store restart, a replica starting
    /// again): a script's next step waits for them ([`Replicas::idle`]).
    pending: Arc<std::sync::atomic::AtomicUsize>,
    /// This lab's sessions as the store held them at the last `SnapshotStore`.
    images: Arc<Mutex<store_faults::Images>>,
}

/// Counts one background action from its start until it is dropped.
struct Pending(Arc<std::sync::atomic::AtomicUsize>);

impl Pending {
    fn start(count: &Arc<std::sync::atomic::AtomicUsize>) -> Pending {
        count.fetch_add(1, Ordering::SeqCst);
        Pending(count.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("setup", &self.setup)
            .field("balancer", &self.balancer.addr)
            .finish_non_exhaustive()
    }
}

/// Why a lab of replicas could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("a lab runs 2 to {MAX_REPLICAS} replicas, not {0}")]
    Count(u8),
    #[error(transparent)]
    Store(#[from] crate::store::redis::ConnectError),
    #[error("could not open a loopback socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    SdkPolicy(#[from] NotAReplicaPolicy),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Replicas {
    /// Starts the store, `setup.count` replicas under `policy`, and the balancer in front.
    pub async fn start(
        setup: ReplicaSetup,
        policy: Policy,
        background: Option<EmitRate>,
        shared: Shared,
        clock: Arc<LabClock>,
    ) -> Result<Replicas, StartError> {
        if !(2..=MAX_REPLICAS).contains(&setup.count) {
            return Err(StartError::Count(setup.count));
        }
        let policy = ReplicaPolicy::try_from(policy)?;
        let retention = Retention {
            lease_ms: setup.lease_ms,
            ..Retention::default()
        };
        let store = match &setup.store {
            StoreChoice::Memory => Store::memory(retention),
            StoreChoice::Redis(url) => Store::redis(url, retention).await?,
        };
        let watch = Arc::new(Mutex::new(Watch {
            replicas: (0..setup.count).map(|_| Seen::default()).collect(),
            ..Watch::default()
        }));
        let template = ReplicaOptions {
            policy,
            background,
            truth_comments: true,
            emit_on_demand: true,
            ..ReplicaOptions::default()
        };
        let mut slots = Vec::new();
        for index in 0..setup.count {
            let id = ReplicaId::new(index).unwrap_or_else(|| unreachable!("count ≤ 4"));
            let link = Link::default();
            let options = options_for(&template, id, &shared, &clock, &watch);
            let running = replica::start(
                store.with_link(link.clone()),
                options,
                SocketAddr::from(([127, 0, 0, 1], 0)),
            )
            .await?;
            if let Some(mutation) = setup.mutate {
                running.tasks().mutate(mutation);
            }
            slots.push(Slot {
                id,
                addr: running.addr,
                link,
                running: Some(running),
            });
        }
        let upstreams = slots
            .iter()
            .map(|s| Upstream::parse(&format!("http://{}", s.addr)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let balancer = Balancer::start(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            upstreams,
            setup.routing.mode(),
        )
        .await?;
        let poller = tokio::spawn(poll_store(store.clone(), watch.clone()));
        Ok(Replicas {
            setup,
            store,
            slots: Mutex::new(slots),
            balancer,
            watch,
            template,
            shared,
            clock,
            poller,
            pending: Arc::default(),
            images: Arc::default(),
        })
    }

    /// Tasks the running replicas adopted because their lease ran out.
    pub fn tasks_adopted(&self) -> u64 {
        lock(&self.slots)
            .iter()
            .filter_map(|s| s.running.as_ref())
            .map(|r| r.tasks().counters.adopted.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether every action handed to the replicas has been carried out.
    pub fn idle(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
    }

    /// Counts a background action until the returned guard is dropped.
    pub(super) fn pending(&self) -> impl Drop + Send + 'static {
        Pending::start(&self.pending)
    }

    /// Where the client's requests go: the balancer.
    pub fn addr(&self) -> SocketAddr {
        self.balancer.addr
    }

    pub fn setup(&self) -> &ReplicaSetup {
        &self.setup
    }

    fn index(&self, id: ReplicaId) -> Result<usize, super::Refusal> {
        let index = id.index();
        if index < usize::from(self.setup.count) {
            Ok(index)
        } else {
            Err(super::Refusal::NoSuchReplica(id))
        }
    }

    /// Kills replica `id`: its tasks stop at once, its connections end, its port refuses.
    pub fn kill(&self, id: ReplicaId) -> Result<(), super::Refusal> {
        let index = self.index(id)?;
        let running = lock(&self.slots)[index].running.take();
        let Some(running) = running else {
            return Err(super::Refusal::ReplicaState(id, "already killed"));
        };
        let _ = self.balancer.take_out(index);
        running.kill();
        let mut watch = lock(&self.watch);
        watch.replicas[index].holds.clear();
        let runs = std::mem::take(&mut watch.replicas[index].runs);
        let task_runs = std::mem::take(&mut watch.replicas[index].task_runs);
        watch.note(id, "killed".into());
        drop(watch);
        // The calls it ran have no runner now; whether another replica takes them over is the
        // core's rule.
        let adoptable = forkscope_core::replica::adopts_orphaned_calls(self.template.policy.into());
        let now = self.clock.now();
        let mut core = self.shared.lock();
        for (session, call) in runs {
            core.history.record_by(
                now,
                Some(ByReplica {
                    replica: id,
                    epoch: None,
                }),
                Record::RunnerStopped {
                    session,
                    call,
                    adoptable,
                },
            );
        }
        for task in task_runs {
            let by = ByReplica {
                replica: id,
                epoch: None,
            };
            let run = forkscope_core::history::Run::Task(task);
            core.history
                .record_by(now, Some(by), Record::RunStopped { run });
        }
        Ok(())
    }

    /// Starts a killed replica again on its address, with nothing in memory.
    pub async fn revive(&self, id: ReplicaId) -> Result<(), super::Refusal> {
        let index = self.index(id)?;
        let (addr, link) = {
            let slots = lock(&self.slots);
            if slots[index].running.is_some() {
                return Err(super::Refusal::ReplicaState(id, "running"));
            }
            (slots[index].addr, slots[index].link.clone())
        };
        let options = options_for(&self.template, id, &self.shared, &self.clock, &self.watch);
        // The port was just closed: the kernel may hold it a moment.
        let mut last = None;
        for _ in 0..50 {
            match replica::start(self.store.with_link(link.clone()), options.clone(), addr).await {
                Ok(running) => {
                    if let Some(mutation) = self.setup.mutate {
                        running.tasks().mutate(mutation);
                    }
                    lock(&self.slots)[index].running = Some(running);
                    let _ = self.balancer.put_in(index);
                    lock(&self.watch).note(id, "started again".into());
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(super::Refusal::Store(format!(
            "replica {id} could not bind {addr} again: {}",
            last.map_or_else(String::new, |e| e.to_string())
        )))
    }

    pub fn partition(&self, id: ReplicaId, cut: bool) -> Result<(), super::Refusal> {
        let index = self.index(id)?;
        let slots = lock(&self.slots);
        if slots[index].running.is_none() {
            return Err(super::Refusal::ReplicaState(id, "killed"));
        }
        slots[index].link.cut(cut);
        drop(slots);
        let line = if cut {
            "partitioned from the store"
        } else {
            "reaches the store again"
        };
        lock(&self.watch).note(id, line.into());
        Ok(())
    }

    pub fn routing(&self) -> Routing {
        match self.balancer.mode() {
            Mode::RoundRobin => Routing::RoundRobin,
            Mode::Sticky => Routing::Sticky,
        }
    }

    /// Switches routing; a session that began under round-robin sticks to the replica its
    /// standalone stream is on.
    pub fn toggle_routing(&self) -> Routing {
        let next = match self.routing() {
            Routing::RoundRobin => Routing::Sticky,
            Routing::Sticky => Routing::RoundRobin,
        };
        self.balancer.set_mode(next.mode());
        if next == Routing::Sticky
            && let Some((session, on)) = lock(&self.watch).standalone_on
        {
            let _ = self.balancer.learn(&session.to_string(), on.index());
        }
        next
    }

    pub fn route_next(&self, id: ReplicaId) -> Result<(), super::Refusal> {
        let index = self.index(id)?;
        self.balancer
            .send_next_to(index)
            .map_err(|e| super::Refusal::Store(e.to_string()))
    }

    /// Replica `id`'s emitters for `session` emit once each; returns how many did.
    pub fn emit_on(&self, id: ReplicaId, session: SessionId) -> Result<usize, super::Refusal> {
        let index = self.index(id)?;
        let slots = lock(&self.slots);
        let Some(running) = &slots[index].running else {
            return Err(super::Refusal::ReplicaState(id, "killed"));
        };
        Ok(running.emit_now(&session))
    }

    /// Every running replica's emitters for `session` emit once.
    pub fn emit_everywhere(&self, session: SessionId) -> usize {
        (0..self.setup.count)
            .filter_map(ReplicaId::new)
            .filter_map(|id| self.emit_on(id, session).ok())
            .sum()
    }

    /// What the replica panes show; a delivery is an orphan where `checker` says its stream is
    /// attached on another replica or epoch (the pane does not judge on its own).
    pub fn view(&self, checker: &forkscope_core::history::Checker) -> ReplicasView {
        let status = self.balancer.status();
        let slots = lock(&self.slots);
        let watch = lock(&self.watch);
        let replicas = slots
            .iter()
            .enumerate()
            .map(|(i, slot)| {
                let seen = &watch.replicas[i];
                let counters = slot.running.as_ref().map(|r| r.counters.clone());
                let count = |f: fn(&replica::Counters) -> &std::sync::atomic::AtomicU64| {
                    counters
                        .as_ref()
                        .map_or(0, |c| f(c).load(Ordering::Relaxed))
                };
                ReplicaView {
                    id: slot.id,
                    addr: slot.addr,
                    state: match (&slot.running, slot.link.is_cut()) {
                        (None, _) => ReplicaState::Killed,
                        (Some(_), true) => ReplicaState::Partitioned,
                        (Some(_), false) => ReplicaState::Up,
                    },
                    holds: seen
                        .holds
                        .iter()
                        .map(|(session, held)| {
                            let bound = checker.attached_on(*session, held.stream);
                            Held {
                                superseded: bound
                                    .is_some_and(|b| b.replica != slot.id || b.epoch != held.epoch),
                                ..held.clone()
                            }
                        })
                        .collect(),
                    forwarded: status.get(i).map_or(0, |s| s.forwarded),
                    next: status.get(i).is_some_and(|s| s.next),
                    late_writes_refused: count(|c| &c.late_writes_refused),
                    deliveries_fenced: count(|c| &c.deliveries_fenced),
                    calls_adopted: count(|c| &c.calls_adopted),
                    resumes: count(|c| &c.resumes),
                    sent: seen.sent,
                    recent: seen.recent.iter().cloned().collect(),
                }
            })
            .collect();
        ReplicasView {
            store: self.store.label(),
            routing: self.routing(),
            lease_ms: self.setup.lease_ms,
            replicas,
            streams: watch.stored.clone(),
            store_error: watch.store_error.clone(),
        }
    }

    pub fn stop(&self) {
        self.poller.abort();
        for slot in lock(&self.slots).iter_mut() {
            if let Some(running) = slot.running.take() {
                running.kill();
            }
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The options replica `id` starts with: the lab's, its name, and a witness that writes its
/// facts into the lab's history.
fn options_for(
    template: &ReplicaOptions,
    id: ReplicaId,
    shared: &Shared,
    clock: &Arc<LabClock>,
    watch: &Arc<Mutex<Watch>>,
) -> ReplicaOptions {
    let (shared, clock, watch) = (shared.clone(), clock.clone(), watch.clone());
    let witness = Witness::new(move |fact| facts::record(&shared, &clock, &watch, id, fact));
    ReplicaOptions {
        name: Some(id.to_string()),
        witness: Some(witness),
        ..template.clone()
    }
}
