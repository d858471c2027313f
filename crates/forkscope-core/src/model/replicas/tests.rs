use super::*;
use crate::history::{Across, AnomalyKind};

fn a() -> ReplicaId {
    replica_id(0)
}

fn b() -> ReplicaId {
    replica_id(1)
}

fn search(policy: Policy, params: Params, depth: usize) -> Exploration {
    explore(
        policy,
        params,
        Limits::up_to(depth),
        NonZeroUsize::MIN,
        &mut || Duration::ZERO,
        &mut |_| {},
    )
}

fn run(policy: Policy, params: &Params, steps: &[ReplicaStep]) -> ReplicaLab {
    let mut lab = ReplicaLab::new(policy, 256);
    for &step in steps {
        assert!(lab.enabled(step, params), "{step} is not enabled");
        lab.take(step, params);
    }
    lab
}

/// Naive: the shortest fork across replicas is four steps interleaved — the client leaves A
/// half-open, reconnects through B, A's emitter (still running, unfenced) appends, and A's
/// delivery sends it down the connection the client left — and three when sends follow
/// writes at once, as over loopback. The checker names both replicas.
#[test]
fn naive_finds_the_shortest_fork_across_replicas() {
    for (delivery, shortest) in [(Delivery::Interleaved, 4), (Delivery::Eager, 3)] {
        let params = Params {
            delivery,
            ..Params::default()
        };
        let found = search(Policy::Naive, params, 8);
        let counterexample = found.counterexample.expect("naive forks");
        assert_eq!(counterexample.steps.len(), shortest, "{counterexample:?}");
        assert_eq!(found.proven_depth, shortest - 1);
        let Anomaly::Fork { across, .. } = &counterexample.anomaly else {
            panic!("not a fork: {}", counterexample.anomaly);
        };
        assert_eq!(
            *across,
            Some(Across {
                from: a(),
                bound_on: b()
            })
        );
        let steps = &counterexample.steps;
        assert!(steps.contains(&ReplicaStep::Drop) && steps.contains(&ReplicaStep::Reconnect(b())));
        let last = match delivery {
            Delivery::Interleaved => ReplicaStep::Send(a()),
            Delivery::Eager => ReplicaStep::Emit(a()),
        };
        assert_eq!(steps.last(), Some(&last), "{steps:?}");
    }
}

/// Fenced: every schedule up to depth 8 (sends interleaved, a tool call, partitions and
/// kills) holds, and the space is not exhausted there: the bound is what was proven.
#[test]
fn fenced_holds_to_depth_8() {
    let found = search(Policy::Fenced, Params::default(), 8);
    assert!(found.counterexample.is_none(), "{:?}", found.counterexample);
    assert_eq!(found.proven_depth, 8);
    assert!(!found.exhausted);
    assert!(found.distinct > 1_000, "{}", found.distinct);
}

/// A small bound is explored to the end: every reachable state holds under fenced.
#[test]
fn fenced_exhausts_a_small_bound() {
    let params = Params {
        emits: 1,
        reconnects: 1,
        call: false,
        delivery: Delivery::Eager,
    };
    let found = search(Policy::Fenced, params, 40);
    assert!(found.counterexample.is_none());
    assert!(found.exhausted, "{}", found.verdict());
}

/// The schedule behind the lease: A runs the call and is partitioned, the lease runs out, the
/// client reconnects through B, which adopts the call; A heals and its late step is refused by
/// the store, and so is its stale emitter's emit. Nothing forks.
#[test]
fn fenced_partition_lease_expiry_adoption_and_heal_refuse_the_late_writes() {
    let params = Params::default();
    let lab = run(
        Policy::Fenced,
        &params,
        &[
            ReplicaStep::CallStart(a()),
            ReplicaStep::CallStep(a()),
            ReplicaStep::Partition(a()),
            ReplicaStep::LeaseExpires,
            ReplicaStep::Drop,
            ReplicaStep::Reconnect(b()),
            ReplicaStep::Heal(a()),
            ReplicaStep::CallStep(a()),
            ReplicaStep::Emit(a()),
            ReplicaStep::Emit(b()),
            ReplicaStep::Send(b()),
        ],
    );
    let records: Vec<&Record> = lab.history().recent().iter().map(|e| &e.record).collect();
    assert!(
        records.iter().any(|r| matches!(
            r,
            Record::CallAdopted {
                lease: 2,
                done: 1,
                ..
            }
        )),
        "{records:#?}"
    );
    let refused: Vec<StreamId> = records
        .iter()
        .filter_map(|r| match r {
            Record::StaleWriteRefused { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(refused, [CALL, STANDALONE]);
    assert_eq!(lab.history().checker().counters().late_emits_refused, 2);
    assert!(lab.history().checker().anomalies().is_empty());
    assert_eq!(lab.observed().applied, 1);
}

/// The same schedule under naive: the call is never adopted (it dies with its replica, as in
/// the SDKs), nothing is refused, and A's emit after the client left is sent from A: a fork.
#[test]
fn naive_adopts_nothing_and_refuses_nothing() {
    let params = Params::default();
    let lab = run(
        Policy::Naive,
        &params,
        &[
            ReplicaStep::CallStart(a()),
            ReplicaStep::Partition(a()),
            ReplicaStep::LeaseExpires,
            ReplicaStep::Drop,
            ReplicaStep::Reconnect(b()),
            ReplicaStep::Heal(a()),
            ReplicaStep::CallStep(a()),
            ReplicaStep::Emit(a()),
            ReplicaStep::Send(a()),
        ],
    );
    let checker = lab.history().checker();
    assert_eq!(checker.counters().late_emits_refused, 0);
    assert!(
        !lab.history()
            .recent()
            .iter()
            .any(|e| matches!(e.record, Record::CallAdopted { .. }))
    );
    assert_eq!(checker.count(AnomalyKind::Fork), 1);
}

/// States alike are one state: a partition healed is where it started.
#[test]
fn a_healed_partition_is_the_state_before_it() {
    let params = Params::default();
    let start = ReplicaLab::new(Policy::Fenced, 1);
    let healed = run(
        Policy::Fenced,
        &params,
        &[ReplicaStep::Partition(b()), ReplicaStep::Heal(b())],
    );
    assert_eq!(start.fingerprint(), healed.fingerprint());
    let dropped = run(Policy::Fenced, &params, &[ReplicaStep::Drop]);
    assert_ne!(start.fingerprint(), dropped.fingerprint());
}

/// The trace tells each step, and the anomaly on the step that caused it.
#[test]
fn the_trace_names_the_fork_on_its_step() {
    let params = Params {
        delivery: Delivery::Eager,
        ..Params::default()
    };
    let found = search(Policy::Naive, params, 6);
    let steps = found.counterexample.expect("naive forks").steps;
    let told = trace(Policy::Naive, &params, &steps);
    assert_eq!(told.len(), steps.len());
    assert!(
        told[..told.len() - 1]
            .iter()
            .all(|t| t.anomalies.is_empty())
    );
    let last = told.last().unwrap();
    assert!(
        last.anomalies.iter().any(|a| a.contains("from replica A")),
        "{last:?}"
    );
}
