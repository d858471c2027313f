//! One SSE response of a replica: the stream's events from the client's cursor, read from the
//! shared log, so an event written on any replica reaches the connection on this one.
//!
//! Under fenced, every batch is handed over on the epoch this delivery holds: before writing, it
//! reads the stream's record, and a newer epoch (a resume that landed elsewhere) ends it. The
//! replay and the live tail are one read from the cursor, so the hand-off has no gap and no
//! duplicate. A call whose runner's lease expired is adopted here, by the store's clock.
//!
//! Under naive, the log is read once, up to its high-water mark, and then only this replica's
//! own writes arrive ([`super::local`]), as in the SDKs.

use super::local::Local;
use super::witness::{Fact, effect_of};
use super::{Replica, work};
use crate::store::{Adoption, Events, Reader, Snapshot, StoreError};
use crate::wire::server::handles::Handle;
use crate::wire::server::{KEEPALIVE_FRAME, RETRY_HINT_MS, liveness};
use crate::wire::sse;
use axum::body::{Body, Bytes};
use bytes::BytesMut;
use forkscope_core::replica::{LogHole, RecordState, admits, adoptable, forgot};
use forkscope_core::{EventId, PayloadKey, Policy, SessionId, StreamId, StreamKind, WireCursor};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, broadcast, mpsc};
use tokio::time::Instant;

/// Events read and written per batch by a naive delivery's replay.
const BATCH: usize = 256;
/// Log entries a fenced delivery reads and writes at once, with the record they were read with
/// (see [`crate::store::Store::replay`]): a small first read, so the first event is out before
/// a long replay is read, then larger ones.
pub(super) const FIRST_BATCH: usize = 4;
const REPLAY_BATCH: usize = 1_024;
/// How long a delivery with nothing to send waits before a keep-alive comment, as the
/// single-process server does by default.
const KEEPALIVE: Duration = Duration::from_millis(liveness::KEEPALIVE_MS);
/// Batches queued for a slow client before the delivery waits for it.
const QUEUE: usize = 16;

/// What one delivery carries.
#[derive(Clone, Debug)]
pub(super) struct Delivery {
    pub session: SessionId,
    pub stream: StreamId,
    pub kind: StreamKind,
    pub key: u64,
    /// The client's cursor: delivery starts after it.
    pub after: u64,
    /// Events up to here were in the log when the GET was decided: a replay. Later ones are
    /// sent live (what a watching lab is told of, one by one).
    pub live_after: u64,
    /// The stream epoch this delivery holds (fenced); `None` under naive.
    pub epoch: Option<u64>,
    /// A new stream opens with its priming event (an id, and empty data).
    pub priming: bool,
    /// The first hand-off, already read with its record: a resume reads it before it is
    /// answered (a log with a hole is refused, typed), and the delivery starts from it rather
    /// than read it again — one store round trip, not two, before the first replayed event.
    pub first: Option<(Snapshot, Events)>,
}

impl Delivery {
    fn id(&self, seq: u64) -> String {
        WireCursor::Keyed {
            event: EventId {
                stream: self.stream,
                seq,
            },
            key: self.key,
        }
        .to_string()
    }
}

/// The response body: a task reads the store and feeds it; the task ends when the client goes.
pub(super) fn body(
    replica: &Replica,
    delivery: Delivery,
    permit: OwnedSemaphorePermit,
    connection: Option<Handle>,
) -> Body {
    let (tx, rx) = mpsc::channel::<Bytes>(QUEUE);
    let tx = Out {
        tx,
        deadline: replica.write_deadline,
        connection,
    };
    let task_replica = replica.clone();
    let connection = replica.connections.fetch_add(1, Ordering::Relaxed) + 1;
    replica.tell(|| Fact::Attached {
        session: delivery.session,
        stream: delivery.stream,
        connection,
        epoch: delivery.epoch,
    });
    replica.spawn(async move {
        let _permit = permit;
        let mut delivery = delivery;
        let first = delivery.first.take();
        let ended = if delivery.epoch.is_some() {
            fenced(&task_replica, &delivery, &tx, first).await
        } else {
            naive(&task_replica, &delivery, &tx).await
        };
        if let Err(why) = &ended {
            tracing::info!(replica = %task_replica.name, session = %delivery.session, stream = %delivery.stream, "delivery ended: {why}");
        }
        if let (Err(Ended::WritesStalled(_)), Some(connection)) = (&ended, &tx.connection) {
            connection.close();
        }
        task_replica.tell(|| Fact::DeliveryEnded {
            session: delivery.session,
            stream: delivery.stream,
            connection,
            why: ended.map_or_else(|why| why.to_string(), |()| "the stream ended".to_owned()),
        });
    });
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    }))
}

/// The store's log of `stream` lost events `first`–`last`: a record no retry can mend.
pub(super) fn lost(stream: StreamId, first: u64, last: u64) -> StoreError {
    StoreError::Corrupt(format!(
        "the log of stream {stream} lost events {first}–{last} (an entry deleted or unreadable)"
    ))
}

/// Why a delivery ended before its stream did.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("the client went away")]
    ClientGone,
    #[error("writes stalled: the client took nothing for {} ms", .0.as_millis())]
    WritesStalled(Duration),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("fenced: stream {stream} is at epoch {current}, held by {holder}")]
    Fenced {
        stream: StreamId,
        current: u64,
        holder: String,
    },
    #[error("events after {after} were evicted from the log before they were delivered")]
    Evicted { after: u64 },
    #[error("a newer connection on this replica took the stream over")]
    TakenOver,
    #[error("the stream's record is gone")]
    Gone,
    #[error(
        "the store rolled back: stream {stream} holds {holds} events, but this connection was sent {sent}"
    )]
    RolledBack {
        stream: StreamId,
        holds: u64,
        sent: u64,
    },
    #[error("the store rolled back and forgot events {first}–{last} of stream {stream}")]
    Forgot {
        stream: StreamId,
        first: u64,
        last: u64,
    },
}

/// Where a delivery writes: the response body's queue, and the connection under it.
struct Out {
    tx: mpsc::Sender<Bytes>,
    /// How long a write may wait for room: see `ReplicaOptions::write_deadline`.
    deadline: Option<Duration>,
    connection: Option<Handle>,
}

impl Out {
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Queues `bytes` for the client. A client that takes nothing for the write deadline (a NAT
/// drop, a reader that stopped) is judged gone: the delivery ends and its connection is
/// closed, as the single server's write deadline does.
async fn send(tx: &Out, bytes: Bytes) -> Result<(), Ended> {
    let sent = match tx.deadline {
        Some(deadline) => tokio::time::timeout(deadline, tx.tx.send(bytes))
            .await
            .map_err(|_| Ended::WritesStalled(deadline))?,
        None => tx.tx.send(bytes).await,
    };
    sent.map_err(|_| Ended::ClientGone)
}

/// A `: keep-alive` comment when the connection has been quiet for [`KEEPALIVE`]: a write, so a
/// client that went away is noticed, and its delivery ends, without waiting for an event.
async fn keep_alive(tx: &Out, quiet_since: &mut Instant) -> Result<(), Ended> {
    if quiet_since.elapsed() >= KEEPALIVE {
        send(tx, Bytes::from_static(KEEPALIVE_FRAME)).await?;
        *quiet_since = Instant::now();
    }
    Ok(())
}

/// The events as SSE frames (with their ground truth, for a lab's client); a watching lab is
/// told of each one sent live.
fn render(replica: &Replica, delivery: &Delivery, events: &[(u64, String)]) -> Bytes {
    let mut out = BytesMut::with_capacity(events.iter().map(|(_, d)| d.len() + 64).sum());
    let watched = replica.truth || replica.witness.is_some();
    for (seq, data) in events {
        let effect = watched
            .then(|| effect_of(delivery.kind, delivery.stream, data))
            .flatten();
        let key = effect.map(|effect| PayloadKey::new(delivery.session, effect).to_string());
        let truth = replica
            .truth
            .then_some((delivery.stream.0, *seq, key.as_deref()));
        sse::write_frame(&mut out, truth, &delivery.id(*seq), None, data);
        if *seq > delivery.live_after {
            replica.tell(|| Fact::Sent {
                session: delivery.session,
                stream: delivery.stream,
                seq: *seq,
                effect,
                epoch: delivery.epoch,
            });
        }
    }
    out.freeze()
}

async fn prime(replica: &Replica, delivery: &Delivery, tx: &Out) -> Result<(), Ended> {
    if delivery.priming {
        let truth = replica.truth.then_some(sse::Truth {
            stream: delivery.stream.0,
            seq: 0,
            key: None,
        });
        send(
            tx,
            sse::frame(truth.as_ref(), &delivery.id(0), Some(RETRY_HINT_MS), ""),
        )
        .await?;
    }
    Ok(())
}

async fn read_record(replica: &Replica, delivery: &Delivery) -> Result<Snapshot, Ended> {
    replica
        .store
        .snapshot(&delivery.session, delivery.stream)
        .await?
        .ok_or(Ended::Gone)
}

async fn fenced(
    replica: &Replica,
    delivery: &Delivery,
    tx: &Out,
    mut first: Option<(Snapshot, Events)>,
) -> Result<(), Ended> {
    let epoch = delivery.epoch.unwrap_or_default();
    prime(replica, delivery, tx).await?;
    // Opened only once the delivery has caught up: a replay of a finished call never needs one.
    let mut waiter: Option<Reader> = None;
    let mut after = delivery.after;
    let mut batch = FIRST_BATCH;
    let mut quiet_since = Instant::now();
    loop {
        if tx.is_closed() {
            return Err(Ended::ClientGone);
        }
        // Every hand-off, replay and live alike, comes with the record it was read with, and
        // is checked against the epoch first.
        let (snapshot, events) = match first.take() {
            Some(read) => read,
            None => replica
                .store
                .replay(&delivery.session, delivery.stream, after, batch)
                .await?
                .ok_or(Ended::Gone)?,
        };
        let record = &snapshot.record;
        if !admits(Policy::Fenced, record.epoch, epoch) {
            replica
                .counters
                .deliveries_fenced
                .fetch_add(1, Ordering::Relaxed);
            return Err(Ended::Fenced {
                stream: delivery.stream,
                current: record.epoch,
                holder: record.owner.clone(),
            });
        }
        // The store holds less than this connection was sent: it was restored from an older
        // state. A call's runner ends the call with an error that says so; a standalone
        // stream's delivery ends here, and the client's resume is refused (store_rolled_back).
        if forgot(record.high_water, after) && delivery.kind == StreamKind::Standalone {
            return Err(Ended::RolledBack {
                stream: delivery.stream,
                holds: record.high_water,
                sent: after,
            });
        }
        // Ids a rolled-back store forgot (skipped so none is issued twice), evicted, or lost
        // from the log: the delivery ends rather than hand on a stream with a hole in it.
        if let Some(hole) = record.hole_in(after, events.iter().map(|(seq, _)| *seq)) {
            // What comes before the hole is whole: the client gets it, then the end.
            let whole = events
                .iter()
                .zip(after + 1..)
                .take_while(|((seq, _), expected)| seq == expected)
                .count();
            if whole > 0 {
                send(tx, render(replica, delivery, &events[..whole])).await?;
            }
            return Err(match hole {
                LogHole::Forgot(first, last) => Ended::Forgot {
                    stream: delivery.stream,
                    first,
                    last,
                },
                LogHole::Evicted => Ended::Evicted { after },
                LogHole::Missing(first, last) => Ended::Store(lost(delivery.stream, first, last)),
            });
        }
        if let Some((last, _)) = events.last() {
            send(tx, render(replica, delivery, &events)).await?;
            after = *last;
            quiet_since = Instant::now();
        }
        if record.delivered_all(after) {
            return Ok(());
        }
        if !events.is_empty() {
            batch = REPLAY_BATCH;
            continue;
        }
        keep_alive(tx, &mut quiet_since).await?;
        if let Some(lease) = adoptable(replica.policy, record) {
            adopt(replica, delivery, &snapshot, (lease, after)).await?;
        }
        // Caught up: wait for the next event (or READ_BLOCK), then read it with its record.
        let reader = match &mut waiter {
            Some(reader) => reader,
            None => waiter.insert(replica.store.reader().await?),
        };
        reader
            .read(&delivery.session, delivery.stream, after, 1)
            .await?;
    }
}

/// Takes over a call whose runner's lease expired, and runs it on from its last committed step.
/// `sent`: what this delivery already handed over — a store holding less was rolled back, so the
/// adopter starts from that mark, its first write is refused, and it ends the call with the
/// error that says so rather than issue those ids again.
async fn adopt(
    replica: &Replica,
    delivery: &Delivery,
    snapshot: &Snapshot,
    (lease, sent): (u64, u64),
) -> Result<(), Ended> {
    let adopted = replica
        .store
        .adopt(&delivery.session, delivery.stream, lease, &replica.name)
        .await?;
    if let (Adoption::Adopted { lease, done }, Some(spec)) = (adopted, snapshot.call.clone()) {
        replica
            .counters
            .calls_adopted
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(replica = %replica.name, session = %delivery.session, stream = %delivery.stream, done, "adopted a tool call whose lease expired");
        replica.tell(|| Fact::Adopted {
            session: delivery.session,
            stream: delivery.stream,
            lease,
            done,
        });
        work::start_call(
            replica,
            delivery.session,
            delivery.stream,
            spec,
            work::CallStart {
                lease,
                done,
                wrote: snapshot.record.high_water.max(sent),
            },
        );
    }
    Ok(())
}

async fn naive(replica: &Replica, delivery: &Delivery, tx: &Out) -> Result<(), Ended> {
    // Listening before the replay is read: what this replica writes meanwhile is not lost.
    let mut live = replica.local.subscribe(&delivery.session, delivery.stream);
    let record = read_record(replica, delivery).await?.record;
    let mut reader = replica.store.reader().await?;
    prime(replica, delivery, tx).await?;
    let mut after = delivery.after;
    while after < record.high_water {
        let events = reader
            .read(&delivery.session, delivery.stream, after, BATCH)
            .await?;
        let Some((last, _)) = events.last() else {
            break;
        };
        let last = *last;
        let upto: Vec<_> = events
            .into_iter()
            .filter(|(seq, _)| *seq <= record.high_water)
            .collect();
        send(tx, render(replica, delivery, &upto)).await?;
        after = last.min(record.high_water);
    }
    if record.state != RecordState::Live {
        return Ok(());
    }
    let mut quiet_since = Instant::now();
    loop {
        let Ok(heard) = tokio::time::timeout(KEEPALIVE, live.recv()).await else {
            keep_alive(tx, &mut quiet_since).await?;
            continue;
        };
        match heard {
            Ok(Local::Event(seq, data)) if seq > after => {
                send(tx, render(replica, delivery, &[(seq, data.to_string())])).await?;
                after = seq;
                quiet_since = Instant::now();
            }
            Ok(Local::Event(..)) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Ok(Local::Finished) => return Ok(()),
            Err(broadcast::error::RecvError::Closed) => return Err(Ended::TakenOver),
        }
    }
}
