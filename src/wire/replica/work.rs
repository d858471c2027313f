//! The work a replica runs, each under its fencing token:
//! - a tool call under its **lease**: every step is committed to the store with the lease epoch,
//!   renewing the lease; a replica that adopted the call bumped that epoch, so the steps of a
//!   runner that was only partitioned are refused when it comes back.
//! - the background emitter under the **stream epoch**: a resume on another replica bumps it, and
//!   this replica's next emit is refused, so it stops: no orphan keeps receiving.
//!
//! Under naive nothing is fenced: both keep writing, and tell only this replica's connections.
//!
//! Which step is due and when, and which background event is owed, are the core's `work/`
//! machines ([`ToolCall`], [`BackgroundEmitter`]), as on the single server; this file commits
//! what they say to the store.

use super::Replica;
use super::local::Local;
use super::witness::{Fact, effect_of};
use crate::store::{CallSpec, Floor, Refused, SessionId, StoreError, Writer};
use crate::wire::mcp::jsonrpc;
use crate::wire::server::{background, tool};
use forkscope_core::LabTime;
use forkscope_core::replica::StaleEpoch;
use forkscope_core::work::{BackgroundEmitter, ToolCall, ToolSpec};
use forkscope_core::{Policy, StreamId, StreamKind};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Steps committed in one script call when a call runs with no delay: one round trip per batch.
const STEP_BATCH: usize = 64;
/// How far a background schedule may fall behind (a store that answered slowly) before it skips
/// ahead: one, so a late emitter sends one event, not a burst.
const MAX_BEHIND: u64 = 1;

/// Where a call's runner starts: its lease epoch, the steps already committed, and the stream's
/// high-water mark then (what the store must still hold when the runner next writes).
#[derive(Clone, Copy, Debug)]
pub(super) struct CallStart {
    pub lease: u64,
    pub done: u64,
    pub wrote: u64,
}

pub(super) fn start_call(
    replica: &Replica,
    session: SessionId,
    stream: StreamId,
    spec: CallSpec,
    start: CallStart,
) {
    let task_replica = replica.clone();
    replica.spawn(async move {
        if let Err(why) = run_call(&task_replica, &session, stream, &spec, start).await {
            tracing::warn!(replica = %task_replica.name, %session, %stream, "tool call stopped: {why}");
        }
    });
}

#[derive(Debug, thiserror::Error)]
enum Stopped {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The call ended with its closing error: the store rolled back under it.
    #[error(
        "the store rolled back (it held {holds} events, {wrote} were sent): the call ended with store_rolled_back"
    )]
    Sealed { holds: u64, wrote: u64 },
}

/// Counts a stale write, names the replica, and stops the writer.
fn refused(replica: &Replica, session: &SessionId, why: Refused) -> Stopped {
    if let Refused::RolledBack {
        stream,
        holds,
        wrote,
    } = why
    {
        replica.tell(|| Fact::RolledBack {
            session: *session,
            stream,
            holds,
            wrote,
        });
    }
    if let Refused::Stale(stale) = &why {
        replica
            .counters
            .late_writes_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(replica = %replica.name, "{stale}");
        replica.tell(|| Fact::Refused {
            session: *session,
            stale: stale.clone(),
        });
    }
    Stopped::Refused(why)
}

/// The call as the core's [`ToolCall`] schedules it (the machine the single server and the
/// Sim drive): each step it has due is committed to the store under the lease before the next,
/// up to [`STEP_BATCH`] in one write when they are due together.
async fn run_call(
    replica: &Replica,
    session: &SessionId,
    stream: StreamId,
    spec: &CallSpec,
    start: CallStart,
) -> Result<(), Stopped> {
    let request_id: Value = serde_json::from_str(&spec.request_id).unwrap_or(Value::Null);
    let token: Option<Value> = spec
        .progress_token
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok());
    let clock = RunnerClock::start();
    // Checked when the call was made; the store keeps what was checked.
    let tool = ToolSpec {
        steps: spec.steps,
        delay_ms: spec.delay_ms,
    };
    let mut call = ToolCall::resumed(
        *session,
        stream,
        tool,
        token.is_some(),
        start.done,
        clock.now(),
    );
    let renew_every = Duration::from_millis((replica.store.retention().lease_ms / 3).max(1));
    let mut wrote = start.wrote;
    let at = (session, stream, spec, start.lease);
    while let Some(due) = call.poll_timeout() {
        // Asleep until the next step, the runner still renews: its lease outlives the delay.
        loop {
            let until = clock.instant(due);
            let nap = tokio::time::Instant::now() + renew_every;
            if until <= nap {
                tokio::time::sleep_until(until).await;
                break;
            }
            tokio::time::sleep_until(nap).await;
            let renewal = Batch {
                done: None,
                bodies: &[],
                finish: false,
            };
            wrote = commit_or_seal(replica, at, wrote, renewal).await?;
        }
        let steps = call.take_due(clock.now(), STEP_BATCH);
        let bodies: Vec<String> = steps
            .iter()
            .map(|step| tool::step_body(&request_id, token.as_ref(), *step))
            .collect();
        let batch = Batch {
            done: Some(call.done()),
            bodies: &bodies,
            finish: call.is_over(),
        };
        wrote = commit_or_seal(replica, at, wrote, batch).await?;
    }
    Ok(())
}

/// Lab time for a replica's work: milliseconds since it started, as the core's machines count.
struct RunnerClock(tokio::time::Instant);

impl RunnerClock {
    fn start() -> RunnerClock {
        RunnerClock(tokio::time::Instant::now())
    }

    fn now(&self) -> LabTime {
        LabTime::from_millis(self.0.elapsed().as_millis() as u64)
    }

    fn instant(&self, at: LabTime) -> tokio::time::Instant {
        self.0 + Duration::from_millis(at.as_millis())
    }
}

/// Commits a batch of the call on `(session, stream, spec, lease)`; a store found rolled back
/// ends the call ([`seal`]), and the runner stops (`Stopped::Sealed`).
async fn commit_or_seal(
    replica: &Replica,
    (session, stream, spec, lease): (&SessionId, StreamId, &CallSpec, u64),
    wrote: u64,
    batch: Batch<'_>,
) -> Result<u64, Stopped> {
    match commit_surely(replica, session, stream, lease, wrote, batch).await {
        Err(Stopped::Refused(Refused::RolledBack { holds, wrote, .. })) => {
            let why = RolledBack { holds, wrote };
            Err(seal(replica, session, stream, spec, lease, why).await)
        }
        other => other,
    }
}

/// The store holds `holds` events of the call's stream, though this runner wrote up to `wrote`.
#[derive(Clone, Copy, Debug)]
struct RolledBack {
    holds: u64,
    wrote: u64,
}

/// The store was rolled back under a running call: it fails closed. The call's last message is
/// a JSON-RPC error that names the rollback, written past every id already handed out, and the
/// stream finishes, so the client is told, no id is issued twice, and no replica adopts the call.
///
/// Why not write the forgotten steps again from this runner's memory: the rollback may have
/// handed the lease back to an older holder, or undone an adoption, so no runner can prove it
/// is the only writer any more; and a real tool's steps are side effects, not text to repeat.
async fn seal(
    replica: &Replica,
    session: &SessionId,
    stream: StreamId,
    spec: &CallSpec,
    lease: u64,
    why: RolledBack,
) -> Stopped {
    let RolledBack { holds, wrote } = why;
    tracing::warn!(replica = %replica.name, %session, %stream, holds, wrote, "the store rolled back under a running call: it ends with a typed error");
    let request_id: Value = serde_json::from_str(&spec.request_id).unwrap_or(Value::Null);
    let body = jsonrpc::error(
        &request_id,
        jsonrpc::STORE_ROLLED_BACK,
        &format!(
            "the store rolled back: it holds {holds} events of this call's stream, but {wrote} were sent; the call's outcome is unknown"
        ),
        Some(json!({ "reason": "store_rolled_back", "holds": holds, "wrote": wrote })),
    );
    let writer = Writer::Lease {
        epoch: lease,
        name: &replica.name,
        done: None,
        floor: Floor::SkipTo(wrote),
    };
    // A rollback comes with failovers: a store that does not answer is asked again (bounded),
    // and a stream already finished means an earlier try landed and its answer was lost.
    let mut tries = 0;
    loop {
        tries += 1;
        let sealed = replica
            .store
            .append(session, stream, writer, std::slice::from_ref(&body), true)
            .await;
        match sealed {
            Ok(Ok(_)) | Ok(Err(Refused::Closed(_))) => break,
            Ok(Err(why)) => return refused(replica, session, why),
            Err(StoreError::Unavailable(_)) if tries < RECOVER_ATTEMPTS => {
                tokio::time::sleep(RECOVER_PAUSE).await;
            }
            Err(other) => return other.into(),
        }
    }
    replica.tell(|| Fact::Finished {
        session: *session,
        stream,
    });
    Stopped::Sealed { holds, wrote }
}

/// How often, and how far apart, a runner that lost its answer from the store reads again.
const RECOVER_ATTEMPTS: u32 = 50;
const RECOVER_PAUSE: Duration = Duration::from_millis(100);

/// One commit of a call: the progress it reaches, its events, whether it holds the result.
#[derive(Clone, Copy, Debug)]
struct Batch<'a> {
    done: Option<u64>,
    bodies: &'a [String],
    finish: bool,
}

/// Commits a batch; when the store's answer is lost (a timeout: the batch may or may not have
/// landed), reads the call's record again and decides: the lease moved on (the store refused,
/// or will refuse, this runner: a late write, counted), the batch landed (go on), or neither
/// (commit again). Naive runners do not look: they stop.
async fn commit_surely(
    replica: &Replica,
    session: &SessionId,
    stream: StreamId,
    lease: u64,
    wrote: u64,
    batch: Batch<'_>,
) -> Result<u64, Stopped> {
    let mut reads = 0;
    loop {
        let mut lost = match commit(replica, session, stream, lease, wrote, batch).await {
            Err(Stopped::Store(StoreError::Unavailable(why)))
                if replica.policy == Policy::Fenced =>
            {
                why
            }
            other => return other,
        };
        // Read (a bounded number of times) until the store says what became of the batch.
        let (call, high_water) = loop {
            if reads == RECOVER_ATTEMPTS {
                return Err(StoreError::Unavailable(lost).into());
            }
            reads += 1;
            tokio::time::sleep(RECOVER_PAUSE).await;
            match replica.store.snapshot(session, stream).await {
                Ok(Some(snapshot)) => {
                    let call = snapshot.record.call.ok_or_else(|| {
                        StoreError::Corrupt(format!("call {stream} has no lease"))
                    })?;
                    break (call, snapshot.record.high_water);
                }
                Ok(None) => return Err(StoreError::SessionGone.into()),
                Err(StoreError::Unavailable(why)) => lost = why,
                Err(other) => return Err(other.into()),
            }
        };
        if call.lease.epoch != lease {
            let stale = StaleEpoch {
                stream,
                writer: replica.name.to_string(),
                writer_epoch: lease,
                current: call.lease.epoch,
                holder: call.lease.owner,
            };
            return Err(refused(replica, session, Refused::Stale(stale)));
        }
        if batch.done.is_some_and(|d| call.done >= d) {
            return Ok(high_water);
        }
        // Neither fenced nor landed: commit it again.
    }
}

/// Commits a batch of a call's steps (none: a lease renewal) on the lease epoch, if the store
/// still holds what this runner wrote (`wrote`). Returns the stream's high-water mark after it.
async fn commit(
    replica: &Replica,
    session: &SessionId,
    stream: StreamId,
    lease: u64,
    wrote: u64,
    batch: Batch<'_>,
) -> Result<u64, Stopped> {
    let Batch {
        done,
        bodies,
        finish,
    } = batch;
    let writer = match replica.policy {
        Policy::Fenced => Writer::Lease {
            epoch: lease,
            name: &replica.name,
            done,
            floor: Floor::Check(wrote),
        },
        // Naive: a replica's policy is a `ReplicaPolicy`, so nothing else reaches here.
        _ => Writer::Unfenced {
            name: &replica.name,
            background: None,
        },
    };
    let high_water = replica
        .store
        .append(session, stream, writer, bodies, finish)
        .await?
        .map_err(|why| refused(replica, session, why))?;
    tell_written(
        replica,
        session,
        (stream, StreamKind::Request),
        high_water,
        bodies,
    );
    tell_local(replica, session, stream, high_water, bodies, finish);
    if finish {
        replica.tell(|| Fact::Finished {
            session: *session,
            stream,
        });
    }
    Ok(high_water)
}

/// Tells a watching lab which ids a batch was written at, so its checker sees an id written
/// twice (what a rolled-back store makes an unfenced writer do) even when no one receives it.
fn tell_written(
    replica: &Replica,
    session: &SessionId,
    (stream, kind): (StreamId, StreamKind),
    high_water: u64,
    bodies: &[String],
) {
    if bodies.is_empty() {
        return;
    }
    replica.tell(|| Fact::Written {
        session: *session,
        stream,
        first: high_water + 1 - bodies.len() as u64,
        effects: bodies
            .iter()
            .map(|body| effect_of(kind, stream, body))
            .collect(),
    });
}

/// The naive replica's live path: its own connections hear its own writes.
fn tell_local(
    replica: &Replica,
    session: &SessionId,
    stream: StreamId,
    high_water: u64,
    bodies: &[String],
    finish: bool,
) {
    if replica.policy != Policy::Naive {
        return;
    }
    let first = high_water + 1 - bodies.len() as u64;
    for (i, body) in bodies.iter().enumerate() {
        let item = Local::Event(first + i as u64, body.as_str().into());
        replica.local.publish(session, stream, item);
    }
    if finish {
        replica.local.publish(session, stream, Local::Finished);
    }
}

/// Emits background events on the standalone stream `stream` while this replica holds `epoch`,
/// numbered on from the session's last one, whichever replica emitted it.
pub(super) fn start_emitter(replica: &Replica, session: SessionId, stream: StreamId, epoch: u64) {
    if replica.background.is_none() && !replica.emit_on_demand {
        return;
    }
    let rate = replica.background;
    let poke = Arc::new(Semaphore::new(0));
    {
        let mut pokes = replica.pokes.lock().unwrap_or_else(|p| p.into_inner());
        pokes.retain(|_, emitters| {
            emitters.retain(|(_, e)| e.strong_count() > 0);
            !emitters.is_empty()
        });
        let emitters = pokes.entry(session).or_default();
        // Naive: one emitter per stream on a replica, as one SDK process runs one task per
        // session; a resume here keeps it. Fenced: the old one is on an epoch the resume
        // moved, so its next write is refused and it stops; this one takes over.
        if replica.policy == Policy::Naive && emitters.iter().any(|(s, _)| *s == stream) {
            return;
        }
        emitters.push((stream, Arc::downgrade(&poke)));
    }
    let task_replica = replica.clone();
    replica.spawn(async move {
        // What the store must still hold when this emitter next writes: from the start, the
        // stream as this replica attached it.
        let mut wrote = match task_replica.store.snapshot(&session, stream).await {
            Ok(Some(snapshot)) => snapshot.record.high_water,
            _ => 0,
        };
        let n = match task_replica.store.background_number(&session).await {
            Ok(n) => n,
            Err(why) => {
                tracing::warn!(replica = %task_replica.name, %session, "background emitter not started: {why}");
                return;
            }
        };
        // The core's schedule (the single server's and the Sim's), numbered on from the
        // session's number when this emitter started: two naive emitters of one session (the
        // orphan's, the resume's) can give one number twice, a duplicate side effect; under
        // fenced only one of them can still write.
        let clock = RunnerClock::start();
        let mut emitter = match rate {
            Some(rate) => BackgroundEmitter::scheduled(session, rate, MAX_BEHIND, clock.now()),
            None => BackgroundEmitter::on_demand(session),
        }
        .numbered_from(n);
        loop {
            let due = emitter.poll_timeout().map(|at| clock.instant(at));
            let poked = tokio::select! {
                () = sleep_until_some(due) => {
                    emitter.handle_timeout(clock.now());
                    false
                }
                permit = poke.acquire() => match permit {
                    Ok(permit) => {
                        permit.forget();
                        true
                    }
                    Err(_) => return,
                },
            };
            let n = if poked {
                emitter.next_number()
            } else {
                match emitter.take_owed_number() {
                    Some(n) => n,
                    None => continue,
                }
            };
            let body = [background::body(n)];
            let writer = match task_replica.policy {
                Policy::Fenced => Writer::Epoch {
                    epoch,
                    name: &task_replica.name,
                    background: Some(n),
                    floor: wrote,
                },
                _ => Writer::Unfenced {
                    name: &task_replica.name,
                    background: Some(n),
                },
            };
            let appended = task_replica
                .store
                .append(&session, stream, writer, &body, false)
                .await;
            match appended {
                Ok(Ok(high_water)) => {
                    emitter.landed();
                    wrote = high_water;
                    let written = (stream, StreamKind::Standalone);
                    tell_written(&task_replica, &session, written, high_water, &body);
                    tell_local(&task_replica, &session, stream, high_water, &body, false);
                }
                // Below the level the client set: withheld, and the number goes to the next.
                Ok(Err(Refused::BelowLogLevel)) => {}
                Ok(Err(why)) => {
                    let _ = refused(&task_replica, &session, why);
                    return;
                }
                // Gone, or a record no replica writes: the next emit would meet it again.
                Err(StoreError::SessionGone | StoreError::Corrupt(_)) => return,
                // A store that does not answer for now: skip this emit, try the next.
                Err(why) => {
                    tracing::warn!(replica = %task_replica.name, %session, "background emit failed: {why}");
                }
            }
        }
    });
}

/// Sleeps until `at`; forever when there is none (an emitter that emits only when poked).
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
