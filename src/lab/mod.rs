//! One running lab: clock + server + fault proxy + client on loopback, driven by [`Action`]s,
//! producing [`Snapshot`]s for the views. Several labs can run side by side in one process.

mod not_reached;
mod policy;
mod probe;
mod rest;
pub use not_reached::NotReached;
pub use probe::{Probe, ProbeResult, ProbeToken};
pub mod action;
pub mod exchanges;
pub mod replicas;
mod snapshot;
pub use snapshot::Snapshot;

/// What a lab holds under its lock (server, client, history) and its emitter's rate: the
/// lab's own vocabulary, so the screen and the scenarios never reach into the wire for them.
pub use crate::wire::Core;
pub use action::Action;
pub use exchanges::{Exchange, Exchanges};
pub use forkscope_core::EmitRate;
pub use replicas::{ReplicaSetup, Replicas, ReplicasView, Routing, StoreChoice};

use crate::clock::LabClock;
use crate::wire::Shared;
use crate::wire::client::LabClient;
use crate::wire::client::tasks::TaskClient;
use crate::wire::proxy::{Fault, Proxy};
use crate::wire::server::{self, RunningServer, ServeOptions};
use forkscope_core::{ConfigError, LabConfig, Policy, View};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How a lab is set up.
#[derive(Clone, Debug)]
pub struct LabOptions {
    pub policy: Policy,
    pub config: LabConfig,
    /// The background emitter's rate on the standalone stream; `None`: only on demand.
    pub background: Option<EmitRate>,
    /// Steps and delay of the tool call `StartToolCall` makes.
    pub tool_steps: u64,
    pub tool_delay_ms: u64,
    /// Start with lab time paused.
    pub start_paused: bool,
    /// Route the client through the fault proxy (off only for benchmarks of the bare path).
    pub via_proxy: bool,
    /// Real milliseconds the proxy adds to each chunk, each way.
    pub latency_ms: u64,
    /// Run the server as replicas behind a balancer on one store; `None`: one server.
    pub replicas: Option<ReplicaSetup>,
    /// The revisions the lab's server speaks (`--protocol`). Under 2026-07-28 alone the
    /// 2025-11-25 client does not start: the lab is its 2026 client's (`X`, `a`) and its tasks.
    pub protocols: forkscope_core::revision::Protocols,
    /// A fault planted in the one server's task runners (a lab of replicas takes it in its
    /// `ReplicaSetup`): what a scenario `check` wrote from a mutation replays.
    pub mutate: Option<forkscope_core::work::Mutation>,
    /// The 2026-07-28 client sends its task cursor with each read; `false`: a stock client's
    /// reads, which say nothing of what they were told.
    pub task_cursor: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            policy: Policy::Fenced,
            config: LabConfig::default(),
            background: Some(EmitRate::every_ms(700)),
            tool_steps: 8,
            tool_delay_ms: 400,
            start_paused: false,
            via_proxy: true,
            latency_ms: 0,
            replicas: None,
            protocols: forkscope_core::revision::Protocols::Both,
            mutate: None,
            task_cursor: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("could not open a loopback socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Replicas(#[from] replicas::StartError),
}

/// What applying an action asks of the lab's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The owner should replace this lab with a fresh one.
    RestartRequested,
    /// The lab refused the change (a knob, or a policy its configuration breaks condition 5
    /// under, or a replica action in a lab of one) and changed nothing.
    Refused(Refusal),
}

/// Why a lab refused an action.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "this lab runs one server; replica keys need a lab of replicas (forkscope --replicas 2)"
    )]
    NotReplicas,
    #[error(
        "replicas run naive or fenced, not {0}: the SDK policies model one server (L returns to one)"
    )]
    SdkOnReplicas(forkscope_core::Policy),
    #[error("this lab has no replica {0}")]
    NoSuchReplica(forkscope_core::ReplicaId),
    #[error("replica {0} is {1}")]
    ReplicaState(forkscope_core::ReplicaId, &'static str),
    #[error("the store cannot do that: {0}")]
    Store(String),
    #[error(
        "2026-07-28 has no stream to {0}: X calls a task, a loses its answer (Y speaks both revisions)"
    )]
    NoStream(&'static str),
}

#[derive(Debug)]
pub struct Lab {
    options: LabOptions,
    shared: Shared,
    clock: Arc<LabClock>,
    server: Option<RunningServer>,
    replicas: Option<Arc<Replicas>>,
    proxy: Proxy,
    client: Arc<LabClient>,
    /// The 2026-07-28 client beside it, through the same proxy.
    task_client: Arc<TaskClient>,
    exchanges: Arc<Exchanges>,
    tasks: Vec<JoinHandle<()>>,
}

/// Entries a snapshot carries for the lanes.
const RECENT_ENTRIES: usize = 2_000;

impl Lab {
    pub async fn start(options: LabOptions) -> Result<Lab, LabError> {
        let clock = Arc::new(LabClock::new());
        if options.start_paused {
            clock.set_paused(true);
        }
        let config = options.config;
        let core = Core::new(config, options.policy)?;
        let shared = Shared::new(core);
        let (running, replicas) = match &options.replicas {
            None => {
                let serve = ServeOptions {
                    background: options.background,
                    protocols: options.protocols,
                    // Paused, stepped or fast with the dashboard, as its streams are.
                    tasks_on_lab_clock: true,
                    ..ServeOptions::default()
                };
                let running = server::start(
                    shared.clone(),
                    clock.clone(),
                    serve,
                    SocketAddr::from(([127, 0, 0, 1], 0)),
                )
                .await?;
                if let Some(mutation) = options.mutate {
                    tracing::warn!(mutation = mutation.describe(), "a mutation is in force");
                    running.task_hub().mutate(mutation);
                }
                (Some(running), None)
            }
            Some(setup) => {
                let replicas = Replicas::start(
                    setup.clone(),
                    options.policy,
                    options.background,
                    shared.clone(),
                    clock.clone(),
                )
                .await?;
                (None, Some(Arc::new(replicas)))
            }
        };
        let upstream = running
            .as_ref()
            .map_or_else(|| replicas.as_ref().map(|r| r.addr()), |r| Some(r.addr))
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let proxy = Proxy::start(upstream).await?;
        if options.latency_ms > 0 {
            proxy.set_latency(options.latency_ms);
        }
        let target = if options.via_proxy {
            proxy.addr
        } else {
            upstream
        };
        let exchanges = Arc::new(Exchanges::default());
        let client = LabClient::new(
            format!("http://{target}/mcp"),
            shared.clone(),
            clock.clone(),
            exchanges.clone(),
        );
        let legacy = forkscope_core::server::protocols_spoken(options.protocols, options.policy);
        let tasks = if legacy.serves_legacy() {
            vec![tokio::spawn(client.clone().run())]
        } else {
            tracing::info!(
                "2026-07-28 only: no session, no stream to resume; X calls progress_task as a task, a loses its answer"
            );
            Vec::new()
        };
        let task_client = Arc::new(
            TaskClient::new(
                format!("http://{target}/mcp"),
                forkscope_core::ToolSpec {
                    steps: options.tool_steps,
                    delay_ms: options.tool_delay_ms,
                },
            )
            .logging_to(exchanges.clone(), clock.clone())
            .on(match replicas {
                // Polled on the clock the tasks step on (see `tasks_run_on_lab_time`).
                None => crate::clock::Time::Lab(clock.clone(), crate::clock::Role::Watch),
                Some(_) => crate::clock::Time::real(),
            })
            .with_cursor(options.task_cursor),
        );
        Ok(Lab {
            task_client,
            options,
            shared,
            clock,
            server: running,
            replicas,
            proxy,
            client,
            exchanges,
            tasks,
        })
    }

    pub fn options(&self) -> &LabOptions {
        &self.options
    }

    pub fn clock(&self) -> &LabClock {
        &self.clock
    }

    pub fn client(&self) -> &Arc<LabClient> {
        &self.client
    }

    /// The 2026-07-28 client.
    pub fn task_client(&self) -> &Arc<TaskClient> {
        &self.task_client
    }

    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// The HTTP exchanges the client made, for the views.
    pub fn exchanges(&self) -> &Exchanges {
        &self.exchanges
    }

    /// The server's own address (not through the proxy), for other clients: a lab of
    /// replicas' balancer.
    pub fn server_addr(&self) -> SocketAddr {
        match (&self.server, &self.replicas) {
            (Some(server), _) => server.addr,
            (None, Some(replicas)) => replicas.addr(),
            (None, None) => self.proxy.addr,
        }
    }

    /// The replicas, in a lab of several.
    pub fn replicas(&self) -> Option<&Replicas> {
        self.replicas.as_deref()
    }

    /// What the replica panes show now, in a lab of several.
    pub fn replicas_view(&self) -> Option<ReplicasView> {
        let replicas = self.replicas.as_deref()?;
        Some(replicas.view(self.core().history.checker()))
    }

    /// Locks the lab's core for a direct look (tests, benches).
    pub fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.shared.lock()
    }

    /// What the server decided since `seen` history records (a session renewed by the client
    /// included), in the history's words; moves `seen` on. For narration.
    pub fn decided_since(&self, seen: &mut u64) -> Vec<String> {
        let core = self.core();
        let total = core.history.total();
        let fresh = usize::try_from(total.saturating_sub(*seen)).unwrap_or(usize::MAX);
        *seen = total;
        let recent = core.history.recent();
        recent
            .iter()
            .skip(recent.len().saturating_sub(fresh))
            .filter(|e| e.record.is_decision())
            .filter_map(|e| e.record.describe())
            .collect()
    }

    pub fn apply(&self, action: Action) -> Outcome {
        match action {
            Action::Tune(tuning) => tracing::info!(set = %tuning, "knobs"),
            action => tracing::info!("{}", action.describe()),
        }
        if let Some(what) = action.on_a_stream()
            && self.options.protocols == forkscope_core::revision::Protocols::Modern
        {
            return Outcome::Refused(Refusal::NoStream(what));
        }
        match action {
            Action::DropConnection => self.proxy.inject(Fault::Drop),
            Action::Reset => self.proxy.inject(Fault::Reset),
            Action::ExpireHalfOpen => self.proxy.inject(Fault::ExpireHalfOpen),
            Action::StripToken => self.shared.lock().client.strip_token_on_next_reconnect(),
            Action::ToggleNaive => return self.switch_policy(self.policy().toggled()),
            Action::SetPolicy(policy) => return self.switch_policy(policy),
            Action::ReconnectNow => self.client.reconnect_now(),
            Action::EmitBackground if self.replicas.is_some() => match self.client.session() {
                Some(session) => {
                    if let Some(replicas) = &self.replicas {
                        replicas.emit_everywhere(session);
                    }
                }
                None => tracing::warn!("no event emitted: the client has no session yet"),
            },
            Action::EmitBackground => {
                let now = self.clock.now();
                let mut core = self.shared.lock();
                match self.client.session() {
                    Some(session) => {
                        server::emit_background(&mut core, session, now);
                    }
                    None => tracing::warn!("no event emitted: the client has no session yet"),
                }
            }
            Action::StartToolCall => {
                let client = self.client.clone();
                let (steps, delay) = (self.options.tool_steps, self.options.tool_delay_ms);
                tokio::spawn(async move {
                    match client.call_tool(steps, delay).await {
                        Ok(_) => tracing::info!("tool call returned its result"),
                        Err(e) => tracing::warn!(error = %e, "tool call failed"),
                    }
                });
            }
            Action::CallTask => {
                let work = self.task_client.begin();
                tokio::spawn(async move {
                    match work.client().intent().await {
                        Ok(status) => tracing::info!(status = status.name(), "task ended"),
                        Err(e) => tracing::warn!(error = %e, "task call failed"),
                    }
                });
            }
            Action::LoseAnswer => self.task_client.lose_next_answer(),
            Action::ReadTaskAgain => {
                let work = self.task_client.begin();
                tokio::spawn(async move {
                    match work.client().read_again().await {
                        Ok(status) => tracing::info!(status = status.name(), "task read again"),
                        Err(e) => tracing::warn!(error = %e, "task read again: refused"),
                    }
                });
            }
            Action::TogglePause => self.clock.set_paused(!self.clock.paused()),
            Action::Step => self.clock.advance(action::STEP_MS),
            Action::SpeedUp => {
                self.clock.step_speed(true);
            }
            Action::SpeedDown => {
                self.clock.step_speed(false);
            }
            Action::Restart => return Outcome::RestartRequested,
            Action::AddLatency(ms) => self.proxy.set_latency(ms),
            Action::Tune(tuning) => {
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                match core.server.tune(&tuning) {
                    Ok(config) => {
                        core.client.set_retry(config.retry);
                        tracing::info!(
                            grace_ms = config.grace_ms,
                            retry_budget_ms = config.retry.budget_ms,
                            replay_buffer = config.replay_buffer,
                            "knobs turned"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "knobs not changed");
                        return Outcome::Refused(e.into());
                    }
                }
            }
            // Only a lab of replicas does these (`Action::needs_replicas`).
            Action::KillReplica(id) => return self.on_replicas(|r| r.kill(id)),
            Action::ReviveReplica(id) => return self.on_replicas(|r| self.revive(r, id)),
            Action::Partition(id) => return self.on_replicas(|r| r.partition(id, true)),
            Action::Heal(id) => return self.on_replicas(|r| r.partition(id, false)),
            Action::ToggleRouting => {
                return self.on_replicas(|r| {
                    let routing = r.toggle_routing();
                    tracing::info!(routing = routing.as_str(), "routing switched");
                    Ok(())
                });
            }
            Action::RouteNext(id) => return self.on_replicas(|r| r.route_next(id)),
            Action::EmitOn(id) => {
                return self.on_replicas(|r| match self.client.session() {
                    Some(session) => r.emit_on(id, session).map(|_| ()),
                    None => Ok(()),
                });
            }
            Action::RestartStore => {
                return self.on_replicas(|r| {
                    r.restart_store();
                    Ok(())
                });
            }
            Action::SnapshotStore => return self.on_replicas(|r| r.snapshot_store()),
            Action::RestoreStore => return self.on_replicas(|r| r.restore_store()),
        }
        Outcome::Done
    }

    /// Carries out a replica action, or refuses it in a lab of one.
    fn on_replicas(&self, act: impl FnOnce(&Replicas) -> Result<(), Refusal>) -> Outcome {
        let Some(replicas) = &self.replicas else {
            return Outcome::Refused(Refusal::NotReplicas);
        };
        match act(replicas) {
            Ok(()) => Outcome::Done,
            Err(refused) => {
                tracing::warn!(error = %refused, "not done");
                Outcome::Refused(refused)
            }
        }
    }

    /// Starts a killed replica again; binding is async, and the replica shows as up once it is.
    fn revive(&self, replicas: &Replicas, id: forkscope_core::ReplicaId) -> Result<(), Refusal> {
        if id.index() >= usize::from(replicas.setup().count) {
            return Err(Refusal::NoSuchReplica(id));
        }
        let this = self.replicas.clone();
        let pending = replicas.pending();
        tokio::spawn(async move {
            let _pending = pending;
            if let Some(replicas) = this
                && let Err(e) = replicas.revive(id).await
            {
                tracing::warn!(error = %e, "replica not started again");
            }
        });
        Ok(())
    }

    /// Waits (bounded) until every action handed to a lab of replicas in the background (a
    /// store restart, a replica starting again) has been carried out: a script's next step
    /// then sees its effect. A lab of one does everything at once.
    pub async fn until_applied(&self) {
        let Some(replicas) = &self.replicas else {
            return;
        };
        for _ in 0..500 {
            if replicas.idle() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tracing::warn!("a replica action was still under way after 5 s");
    }

    /// The run is over: records it, so the checker judges what the client is still owed (lost,
    /// or undelivered where the client knows — it is still reconnecting). Call it once the lab
    /// is quiet ([`crate::scenario::player::finish`]).
    pub fn end_run(&self) {
        let now = self.clock.now();
        let mut core = self.shared.lock();
        let reconnecting = matches!(
            core.client.phase(),
            forkscope_core::client::Phase::Reconnecting { .. }
        ) || core.client.requests().iter().any(|r| {
            matches!(
                r.phase,
                forkscope_core::client::RequestPhase::Resuming { .. }
            )
        });
        core.history.record(
            now,
            forkscope_core::history::Record::RunEnded { reconnecting },
        );
    }

    /// Moves lab time forward by `ms` and runs the server's timers at once, so a script's next
    /// step sees grace windows that ended (the client's reconnects follow on their own).
    /// Tasks the lab's server (or its running replicas) adopted because their lease ran out.
    pub fn tasks_adopted(&self) -> u64 {
        let one = self.server.as_ref().map_or(0, |s| {
            s.tasks().adopted.load(std::sync::atomic::Ordering::Relaxed)
        });
        one + self.replicas.as_ref().map_or(0, |r| r.tasks_adopted())
    }

    pub fn advance(&self, ms: u64) {
        self.clock.advance(ms);
        let serve = ServeOptions {
            background: self.options.background,
            ..ServeOptions::default()
        };
        let mut core = self.shared.lock();
        let now = self.clock.now();
        server::run_until_idle(&mut core, now, &serve);
    }

    pub fn snapshot(&self) -> Snapshot {
        let now = self.clock.now();
        let core = self.shared.lock();
        let view = View::compose(now, &core.server, Some(&core.client), &core.history);
        let protocols =
            forkscope_core::server::protocols_spoken(self.options.protocols, view.policy);
        let recent = core.history.recent();
        let skip = recent.len().saturating_sub(RECENT_ENTRIES);
        let stats = &self.proxy.stats;
        Snapshot {
            view,
            paused: self.clock.paused(),
            scripted: self.options.start_paused,
            speed: self.clock.speed(),
            exchanges: self.exchanges.list(),
            recent: recent.iter().skip(skip).cloned().collect(),
            entries: core.history.total(),
            server_connections: core.io.open_connections(),
            proxied_connections: stats.open.load(Ordering::Relaxed),
            half_open: stats.half_open.load(Ordering::Relaxed),
            bytes_down: stats.bytes_down.load(Ordering::Relaxed),
            bytes_up: stats.bytes_up.load(Ordering::Relaxed),
            server_addr: self.server_addr(),
            proxy_addr: self.proxy.addr,
            replicas: self
                .replicas
                .as_deref()
                .map(|r| r.view(core.history.checker())),
            protocols,
        }
    }

    /// Waits until `ready` holds for the lab's core, polling; errs after `limit` (a guard
    /// against hanging, never a measurement).
    pub async fn wait_for(
        &self,
        limit: Duration,
        mut ready: impl FnMut(&Core) -> bool,
    ) -> Result<(), NotReached> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if ready(&self.shared.lock()) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let snapshot = self.snapshot();
                return Err(NotReached {
                    limit,
                    verdict: snapshot.view.verdict.headline,
                    client: not_reached::describe_client(snapshot.view.client.as_ref()),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn stop(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
        self.proxy.inject(Fault::Reset);
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
        if let Some(replicas) = self.replicas.take() {
            replicas.stop();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
