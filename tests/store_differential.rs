//! The store's rules against real Redis, answer by answer: the same random operations go to the
//! in-memory store (the core's `StoreMachine` behind a lock) and to a real `redis-server` (the
//! Lua scripts), and every answer must be the same, conflicts and refusals included. A rule
//! changed on one side only fails here.
//!
//! `FORKSCOPE_DIFFERENTIAL_OPS` sets how many operations (default 10,000, split over a store
//! whose leases expire at once and one whose leases never do); `FORKSCOPE_DIFFERENTIAL_SEED`
//! replays one run. Skipped without a `redis-server` unless `FORKSCOPE_REQUIRE_SERVICES` is set.
//!
//! What is left out, on purpose: the clock (each store reads its own, so the times in an answer
//! are blanked, and nothing is left idle long enough to expire: `tests/store.rs` tests expiry on
//! both), and a blocked read of a session that ended (Redis keeps an ended session's logs until
//! they expire, and a delivery's replay, not its read, sees the end).

mod common;

use common::services::RedisServer;
use forkscope::store::rollback::SessionImage;
use forkscope::store::{
    Adoption, CallSpec, Events, Floor, NewStream, Resumed, Retention, SessionId, Snapshot, Store,
    StoreError, Writer, new_session_id,
};
use forkscope_core::vocabulary::LogLevel;
use forkscope_core::{StreamId, StreamKind};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

/// Sessions the stores hold at once: small, so the cap is met and refused.
const CAP: usize = 6;
/// A session that has opened this many streams is ended, well below the memory store's
/// per-session bound (Redis has none but expiry).
const STREAMS_PER_SESSION: u32 = 300;
const OWNERS: [&str; 3] = ["A", "B", "C"];

/// The core's deterministic generator, with the draws these tests make: a failing run replays
/// from its seed.
struct Rng(forkscope_core::SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(forkscope_core::SplitMix64::new(seed))
    }

    fn next(&mut self) -> u64 {
        forkscope_core::Entropy::next_u64(&mut self.0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }

    /// `likely` most of the time, else a neighbour or a small number: a stale or a future value.
    fn near(&mut self, likely: u64) -> u64 {
        match self.below(10) {
            0 => likely.saturating_sub(1),
            1 => likely + 1,
            2 => self.below(4),
            _ => likely,
        }
    }
}

/// One operation, as both stores are asked it.
#[derive(Clone, Debug)]
enum Op {
    OpenSession(SessionId),
    SessionExists(SessionId),
    EndSession(SessionId),
    OpenStream(SessionId, NewStream),
    Cancel(SessionId, String),
    BackgroundNumber(SessionId),
    SetLogLevel(SessionId, LogLevel),
    Standalone(SessionId),
    Snapshot(SessionId, StreamId),
    Replay(SessionId, StreamId, u64, usize),
    Read(SessionId, StreamId, u64, usize),
    Resume(SessionId, StreamId, Option<u64>, Option<u64>, &'static str),
    Adopt(SessionId, StreamId, u64, &'static str),
    Append(SessionId, StreamId, Written, Vec<String>, bool),
    Image(SessionId),
    Restore(SessionId),
}

/// A [`Writer`] with its name owned by the op.
#[derive(Clone, Copy, Debug)]
enum Written {
    Epoch(u64, &'static str, Option<u64>, u64),
    Lease(u64, &'static str, Option<u64>, Floor),
    Unfenced(&'static str, Option<u64>),
}

impl Written {
    fn writer(self) -> Writer<'static> {
        match self {
            Written::Epoch(epoch, name, background, floor) => Writer::Epoch {
                epoch,
                name,
                background,
                floor,
            },
            Written::Lease(epoch, name, done, floor) => Writer::Lease {
                epoch,
                name,
                done,
                floor,
            },
            Written::Unfenced(name, background) => Writer::Unfenced { name, background },
        }
    }
}

/// What the generator knows of a session from the answers so far, to ask questions whose
/// answers are mostly yes and sometimes a conflict.
#[derive(Default)]
struct Known {
    streams: Vec<StreamId>,
    /// Per stream: epoch, lease epoch, high-water mark, call steps done (as last answered).
    epoch: HashMap<StreamId, u64>,
    lease: HashMap<StreamId, u64>,
    high_water: HashMap<StreamId, u64>,
    done: HashMap<StreamId, u64>,
    standalone: Option<StreamId>,
    calls: Vec<String>,
    opened: u32,
    ended: bool,
    image: bool,
    background: u64,
}

struct Generator {
    rng: Rng,
    sessions: Vec<SessionId>,
    known: HashMap<SessionId, Known>,
    next_call: u64,
}

impl Generator {
    fn op(&mut self) -> Op {
        let rng = &mut self.rng;
        let live: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|s| !self.known[s].ended)
            .copied()
            .collect();
        let Some(&session) = rng.pick(&live).filter(|_| !rng.chance(4)) else {
            let id = new_session_id();
            self.sessions.push(id);
            self.known.insert(id, Known::default());
            return Op::OpenSession(id);
        };
        // Now and then a session that ended, or one never opened: the store says it is gone.
        let session = match rng.below(50) {
            0 => *rng.pick(&self.sessions).unwrap_or(&session),
            1 => new_session_id(),
            _ => session,
        };
        let k = self.known.entry(session).or_default();
        if k.opened >= STREAMS_PER_SESSION {
            k.ended = true;
            return Op::EndSession(session);
        }
        let stream = match rng.pick(&k.streams) {
            Some(s) if !rng.chance(3) => *s,
            _ => StreamId(rng.below(k.opened as u64 + 2) as u32 + 1),
        };
        let owner = *rng.pick(&OWNERS).unwrap();
        let epoch = rng.near(*k.epoch.get(&stream).unwrap_or(&1));
        let lease = rng.near(*k.lease.get(&stream).unwrap_or(&1));
        let high_water = *k.high_water.get(&stream).unwrap_or(&0);
        match rng.below(100) {
            0..=1 => Op::EndSession(session),
            2..=4 => Op::SessionExists(session),
            5..=14 => {
                let fence = match k.standalone {
                    Some(s) if !rng.chance(15) => {
                        Some((s, rng.near(*k.epoch.get(&s).unwrap_or(&1))))
                    }
                    _ => None,
                };
                Op::OpenStream(
                    session,
                    NewStream {
                        kind: StreamKind::Standalone,
                        key: rng.next(),
                        owner: owner.into(),
                        call: None,
                        fence,
                    },
                )
            }
            15..=21 => {
                // Request ids repeat now and then: the latest call with one is cancelled.
                let request_id = match rng.pick(&k.calls) {
                    Some(rid) if rng.chance(20) => rid.clone(),
                    _ => {
                        self.next_call += 1;
                        format!("\"call-{}\"", self.next_call)
                    }
                };
                Op::OpenStream(
                    session,
                    NewStream {
                        kind: StreamKind::Request,
                        key: rng.next(),
                        owner: owner.into(),
                        call: Some(CallSpec {
                            steps: 1 + rng.below(20),
                            delay_ms: rng.below(100),
                            request_id,
                            progress_token: rng.chance(50).then(|| format!("{}", rng.below(99))),
                        }),
                        fence: None,
                    },
                )
            }
            22..=25 => {
                let rid = match rng.pick(&k.calls) {
                    Some(rid) if !rng.chance(10) => rid.clone(),
                    _ => "\"never\"".into(),
                };
                Op::Cancel(session, rid)
            }
            26 => Op::SetLogLevel(session, LogLevel::of_rank(rng.below(8) as u8).unwrap()),
            27..=28 => Op::BackgroundNumber(session),
            29..=31 => Op::Standalone(session),
            32..=38 => Op::Snapshot(session, stream),
            39..=47 => Op::Replay(
                session,
                stream,
                rng.below(high_water + 3),
                1 + rng.below(4) as usize,
            ),
            48..=51 if high_water > 0 && !k.ended => Op::Read(
                session,
                stream,
                rng.below(high_water),
                1 + rng.below(4) as usize,
            ),
            52..=59 => Op::Resume(
                session,
                stream,
                rng.chance(80).then_some(epoch),
                rng.chance(40).then_some(lease),
                owner,
            ),
            60..=65 => Op::Adopt(session, stream, lease, owner),
            66..=97 => {
                let events = (0..rng.below(5))
                    .map(|i| event_text(rng, i))
                    .collect::<Vec<_>>();
                let finish = rng.chance(6);
                let background = rng.chance(30).then(|| {
                    k.background += 1;
                    k.background
                });
                let floor = rng.near(high_water);
                let written = match rng.below(10) {
                    0..=3 => Written::Epoch(epoch, owner, background, floor),
                    4..=8 => {
                        let done = *k.done.get(&stream).unwrap_or(&0) + 1;
                        let floor = if rng.chance(8) {
                            Floor::SkipTo(high_water + rng.below(4))
                        } else {
                            Floor::Check(floor)
                        };
                        Written::Lease(lease, owner, rng.chance(80).then_some(done), floor)
                    }
                    _ => Written::Unfenced(owner, background),
                };
                Op::Append(session, stream, written, events, finish)
            }
            98 if !k.ended => {
                k.image = true;
                Op::Image(session)
            }
            99 if k.image && !k.ended => Op::Restore(session),
            _ => Op::Snapshot(session, stream),
        }
    }

    /// Learns from an answer the memory store gave, so the next questions are to the point.
    fn learn(&mut self, op: &Op, answer: &Answer) {
        match (op, answer) {
            (Op::OpenStream(s, new), Answer::Opened(Ok(Ok(id)))) => {
                let k = self.known.entry(*s).or_default();
                k.opened = k.opened.max(id.0);
                k.streams.push(*id);
                k.epoch.insert(*id, 1);
                k.lease.insert(*id, 1);
                match &new.call {
                    Some(call) => k.calls.push(call.request_id.clone()),
                    None => k.standalone = Some(*id),
                }
            }
            (Op::OpenStream(s, _), Answer::Opened(Ok(Err(_)))) => {
                self.known.entry(*s).or_default().opened += 1
            }
            // Ended, or never opened (the store was full): asked now and then, as gone.
            (Op::EndSession(s), _) | (Op::OpenSession(s), Answer::Unit(Err(_))) => {
                self.known.entry(*s).or_default().ended = true;
            }
            (Op::Resume(s, id, ..), Answer::Resumed(Ok(Ok(resumed)))) => {
                let k = self.known.entry(*s).or_default();
                if let Some(epoch) = resumed.epoch {
                    k.epoch.insert(*id, epoch);
                }
                if let Some(Adoption::Adopted { lease, .. }) = resumed.adoption {
                    k.lease.insert(*id, lease);
                }
            }
            (Op::Adopt(s, id, ..), Answer::Adopted(Ok(Adoption::Adopted { lease, .. }))) => {
                self.known.entry(*s).or_default().lease.insert(*id, *lease);
            }
            (Op::Append(s, id, written, ..), Answer::Appended(Ok(Ok(hw)))) => {
                let k = self.known.entry(*s).or_default();
                k.high_water.insert(*id, *hw);
                if let Written::Lease(_, _, Some(done), _) = written {
                    k.done.insert(*id, *done);
                }
            }
            (Op::Snapshot(s, id), Answer::Snapshot(Ok(Some(snap))))
            | (Op::Replay(s, id, ..), Answer::Replayed(Ok(Some((snap, _))))) => {
                let k = self.known.entry(*s).or_default();
                k.epoch.insert(*id, snap.record.epoch);
                k.high_water.insert(*id, snap.record.high_water);
                if let Some(call) = &snap.record.call {
                    k.lease.insert(*id, call.lease.epoch);
                    k.done.insert(*id, call.done);
                }
            }
            _ => {}
        }
    }
}

/// Event text with what a packed batch must survive: newlines, digits first, non-ASCII, empty.
fn event_text(rng: &mut Rng, i: u64) -> String {
    match rng.below(5) {
        0 => String::new(),
        1 => format!("{i}\n{}\n", rng.below(1000)),
        2 => "é·✓".repeat(rng.below(4) as usize + 1),
        _ => format!("data: {{\"n\":{}}}", rng.next()),
    }
}

/// An answer, with the times each store reads from its own clock blanked.
#[derive(Debug, PartialEq)]
enum Answer {
    Unit(Result<(), StoreError>),
    Flag(Result<bool, StoreError>),
    Opened(Result<Result<StreamId, u64>, StoreError>),
    Stream(Result<Option<StreamId>, StoreError>),
    Number(Result<u64, StoreError>),
    Snapshot(Result<Option<Snapshot>, StoreError>),
    Replayed(Result<Option<(Snapshot, Events)>, StoreError>),
    Events(Result<Events, StoreError>),
    Resumed(Result<Result<Resumed, forkscope_core::replica::StaleEpoch>, StoreError>),
    Adopted(Result<Adoption, StoreError>),
    Appended(Result<Result<u64, forkscope::store::Refused>, StoreError>),
}

fn blank_adoption(adoption: Adoption) -> Adoption {
    match adoption {
        Adoption::NotExpired { .. } => Adoption::NotExpired { remaining_ms: 0 },
        other => other,
    }
}

fn blank(mut snapshot: Snapshot) -> Snapshot {
    snapshot.record.now_ms = 0;
    if let Some(call) = snapshot.record.call.as_mut() {
        call.lease.until_ms = 0;
    }
    snapshot
}

/// Asks one store one question. Images are kept per store, as each store's own.
async fn ask(store: &Store, images: &mut HashMap<SessionId, SessionImage>, op: &Op) -> Answer {
    match op {
        Op::OpenSession(s) => Answer::Unit(store.open_session(s).await),
        Op::SessionExists(s) => Answer::Flag(store.session_exists(s).await),
        Op::EndSession(s) => Answer::Flag(store.end_session(s).await),
        Op::OpenStream(s, new) => Answer::Opened(store.open_stream(s, new).await),
        Op::Cancel(s, rid) => Answer::Stream(store.cancel(s, rid).await),
        Op::BackgroundNumber(s) => Answer::Number(store.background_number(s).await),
        Op::SetLogLevel(s, level) => Answer::Unit(store.set_log_level(s, *level).await),
        Op::Standalone(s) => Answer::Stream(store.standalone(s).await),
        Op::Snapshot(s, id) => Answer::Snapshot(store.snapshot(s, *id).await.map(|o| o.map(blank))),
        Op::Replay(s, id, after, max) => Answer::Replayed(
            store
                .replay(s, *id, *after, *max)
                .await
                .map(|o| o.map(|(snap, events)| (blank(snap), events))),
        ),
        Op::Read(s, id, after, max) => {
            let mut reader = store.reader().await.expect("a reader");
            Answer::Events(reader.read(s, *id, *after, *max).await)
        }
        Op::Resume(s, id, expect, adopt, owner) => {
            Answer::Resumed(store.resume(s, *id, *expect, *adopt, owner).await.map(|r| {
                r.map(|r| Resumed {
                    adoption: r.adoption.map(blank_adoption),
                    ..r
                })
            }))
        }
        Op::Adopt(s, id, expect, owner) => Answer::Adopted(
            store
                .adopt(s, *id, *expect, owner)
                .await
                .map(blank_adoption),
        ),
        Op::Append(s, id, written, events, finish) => Answer::Appended(
            store
                .append(s, *id, written.writer(), events, *finish)
                .await,
        ),
        Op::Image(s) => {
            images.insert(*s, store.image(s).await.expect("an image"));
            Answer::Unit(Ok(()))
        }
        Op::Restore(s) => match images.get(s) {
            Some(image) => Answer::Unit(store.restore(s, image).await),
            None => Answer::Unit(Ok(())),
        },
    }
}

fn retention(lease_ms: u64) -> Retention {
    Retention {
        max_sessions: CAP,
        session_idle_ms: 3_600_000,
        finished_ms: 3_600_000,
        lease_ms,
        // Small, so logs are trimmed all the time.
        log_events: 12,
        ..Retention::default()
    }
}

/// Runs `ops` random operations on both stores from `seed`; panics at the first disagreement,
/// with the operations that led to it.
async fn differ(
    redis: &RedisServer,
    lease_ms: u64,
    seed: u64,
    ops: usize,
) -> HashMap<&'static str, usize> {
    redis.command(&["FLUSHALL"]);
    let memory = Store::memory(retention(lease_ms));
    let on_redis = Store::redis(&redis.url(), retention(lease_ms))
        .await
        .expect("connect to the test redis-server");
    let mut generator = Generator {
        rng: Rng::new(seed),
        sessions: Vec::new(),
        known: HashMap::new(),
        next_call: 0,
    };
    let (mut memory_images, mut redis_images) = (HashMap::new(), HashMap::new());
    let mut recent: VecDeque<String> = VecDeque::new();
    let mut seen: HashMap<&'static str, usize> = HashMap::new();
    for n in 0..ops {
        let op = generator.op();
        let expected = ask(&memory, &mut memory_images, &op).await;
        let got = ask(&on_redis, &mut redis_images, &op).await;
        recent.push_back(format!("{n}: {op:?} → {expected:?}"));
        if recent.len() > 30 {
            recent.pop_front();
        }
        if expected != got {
            let mut context = String::new();
            for line in &recent {
                let _ = writeln!(context, "  {line}");
            }
            panic!(
                "the stores disagree at operation {n} (seed {seed}, lease {lease_ms} ms):\n  \
                 {op:?}\n  memory (the core's machine): {expected:?}\n  redis (the scripts): \
                 {got:?}\nthe operations before it:\n{context}"
            );
        }
        *seen.entry(outcome(&expected)).or_default() += 1;
        generator.learn(&op, &expected);
    }
    seen
}

/// A coarse name of an answer, to show that the run met refusals as well as successes.
fn outcome(answer: &Answer) -> &'static str {
    use forkscope::store::Refused;
    match answer {
        Answer::Opened(Ok(Err(_))) => "open: fence moved",
        Answer::Opened(Ok(Ok(_))) => "open: opened",
        Answer::Resumed(Ok(Ok(Resumed {
            adoption: Some(Adoption::Adopted { .. }),
            ..
        }))) => "resume: attached and adopted",
        Answer::Resumed(Ok(Ok(_))) => "resume: attached",
        Answer::Resumed(Ok(Err(_))) => "resume: stale",
        Answer::Adopted(Ok(Adoption::Adopted { .. })) => "adopt: adopted",
        Answer::Adopted(Ok(Adoption::NotExpired { .. })) => "adopt: not expired",
        Answer::Adopted(Ok(Adoption::Lost)) => "adopt: lost",
        Answer::Appended(Ok(Ok(_))) => "append: landed",
        Answer::Appended(Ok(Err(Refused::Stale(_)))) => "append: stale",
        Answer::Appended(Ok(Err(Refused::Closed(_)))) => "append: closed",
        Answer::Appended(Ok(Err(Refused::RolledBack { .. }))) => "append: rolled back",
        Answer::Replayed(Ok(Some((_, events)))) if !events.is_empty() => "replay: events",
        Answer::Events(Ok(events)) if !events.is_empty() => "read: events",
        Answer::Stream(Ok(Some(_))) => "cancel or standalone: found",
        Answer::Unit(Err(StoreError::Full(_))) => "open session: full",
        Answer::Unit(Ok(())) => "open session, image or restore",
        Answer::Flag(Ok(true)) => "session there or ended",
        _ if format!("{answer:?}").contains("SessionGone") => "session gone",
        _ => "other",
    }
}

fn ops() -> usize {
    std::env::var("FORKSCOPE_DIFFERENTIAL_OPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_store_machine_and_the_redis_scripts_answer_alike() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let seed = std::env::var("FORKSCOPE_DIFFERENTIAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let total = ops();
    // Leases that expire at once (adoption by epoch alone), then leases that never do.
    let mut seen = differ(&redis, 0, seed, total * 4 / 5).await;
    for (what, n) in differ(&redis, 3_600_000, seed ^ 1, total - total * 4 / 5).await {
        *seen.entry(what).or_default() += n;
    }
    let mut shown: Vec<_> = seen.iter().collect();
    shown.sort();
    println!("seed {seed}: {total} operations, every answer alike: {shown:?}");
    // The run met the conflicts it is there to compare, not only successes.
    for needed in [
        "open: fence moved",
        "resume: stale",
        "resume: attached and adopted",
        "adopt: adopted",
        "adopt: not expired",
        "adopt: lost",
        "append: stale",
        "append: closed",
        "append: rolled back",
        "read: events",
        "open session: full",
        "session gone",
    ] {
        assert!(
            seen.get(needed).is_some_and(|n| *n > 0) || total < 2_000,
            "{total} operations never met `{needed}`: {shown:?}"
        );
    }
}
