//! Core benchmarks: resume decision latency, replay cost against buffer size, emit throughput.
//!
//! Replay is measured for k = 10 and k = 1,000 events from buffers of 10², 10⁴ and 10⁶: the
//! cost must follow k, not the buffer size. The baseline in the same run is a plain `VecDeque`
//! range iteration of the same k, so the ratio holds on a noisy machine.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use forkscope_core::{
    ConnectionId, History, LabConfig, LabTime, Payload, Policy, ResumeDecision, ResumeRequest,
    Server, SessionId, SplitMix64, StreamId,
};
use std::collections::VecDeque;

struct Loaded {
    server: Server,
    history: History,
    rng: SplitMix64,
    session: SessionId,
    token: String,
}

fn loaded(buffer: usize, events: u64) -> Loaded {
    let config = LabConfig {
        replay_buffer: buffer,
        history_capacity: 1_024,
        ..LabConfig::default()
    };
    let mut server = Server::new(config, Policy::Fenced).unwrap();
    let mut history = History::new(1_024);
    let mut rng = SplitMix64::new(1);
    let session = server
        .open_session(LabTime::ZERO, &mut rng, &mut history)
        .unwrap();
    let request = ResumeRequest {
        session,
        token: None,
        last_event_id: None,
        connection: ConnectionId(1),
    };
    let token = match server
        .handle_get(LabTime::ZERO, &request, &mut rng, &mut history)
        .unwrap()
    {
        ResumeDecision::NewStream(n) => n.token.to_string(),
        other => panic!("{other:?}"),
    };
    let body: std::sync::Arc<str> = r#"{"jsonrpc":"2.0","method":"notifications/message"}"#.into();
    for n in 0..events {
        let payload = Payload::new(format!("k{n}"), body.clone());
        server
            .emit(LabTime::ZERO, session, StreamId(1), payload, &mut history)
            .unwrap();
    }
    Loaded {
        server,
        history,
        rng,
        session,
        token,
    }
}

fn resume_decision(c: &mut Criterion) {
    let mut lab = loaded(1_024, 1_000);
    let cursor = "s1-990".to_owned();
    let mut connection = 2;
    c.bench_function("resume_decision/accept (1,000 buffered)", |b| {
        b.iter(|| {
            connection += 1;
            let request = ResumeRequest {
                session: lab.session,
                token: Some(&lab.token),
                last_event_id: Some(&cursor),
                connection: ConnectionId(connection),
            };
            black_box(
                lab.server
                    .handle_get(LabTime::ZERO, &request, &mut lab.rng, &mut lab.history)
                    .unwrap(),
            )
        });
    });
    c.bench_function("resume_decision/reject missing_token", |b| {
        b.iter(|| {
            let request = ResumeRequest {
                session: lab.session,
                token: None,
                last_event_id: Some(&cursor),
                connection: ConnectionId(1),
            };
            black_box(
                lab.server
                    .handle_get(LabTime::ZERO, &request, &mut lab.rng, &mut lab.history)
                    .unwrap(),
            )
        });
    });
}

fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay");
    for n in [100usize, 10_000, 1_000_000] {
        let lab = loaded(n, n as u64);
        let baseline: VecDeque<u64> = (1..=n as u64).collect();
        for k in [10u64, 1_000] {
            if k as usize > n {
                continue;
            }
            group.throughput(Throughput::Elements(k));
            let after = n as u64 - k;
            group.bench_with_input(
                BenchmarkId::new(format!("core k={k}"), n),
                &after,
                |b, &after| {
                    b.iter(|| {
                        let replay = lab
                            .server
                            .replay(lab.session, StreamId(1), black_box(after))
                            .unwrap();
                        replay.map(|e| e.id.seq).sum::<u64>()
                    });
                },
            );
            group.bench_with_input(
                BenchmarkId::new(format!("vecdeque baseline k={k}"), n),
                &after,
                |b, &after| {
                    b.iter(|| baseline.range(black_box(after) as usize..).sum::<u64>());
                },
            );
        }
    }
    group.finish();
}

fn emits(c: &mut Criterion) {
    let mut group = c.benchmark_group("emit");
    group.throughput(Throughput::Elements(1));
    let mut lab = loaded(1_024, 0);
    let body: std::sync::Arc<str> = r#"{"jsonrpc":"2.0","method":"notifications/message"}"#.into();
    let key: std::sync::Arc<str> = "k".into();
    group.bench_function("emit_background with history", |b| {
        b.iter(|| {
            let payload = Payload::new(key.clone(), body.clone());
            black_box(
                lab.server
                    .emit_background(LabTime::ZERO, lab.session, payload, &mut lab.history)
                    .unwrap(),
            )
        });
    });
    group.finish();
}

criterion_group!(benches, resume_decision, replay, emits);
criterion_main!(benches);
