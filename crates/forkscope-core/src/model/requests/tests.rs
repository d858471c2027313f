use super::*;
use crate::history::AnomalyKind;
use crate::model::Limits;
use std::num::NonZeroUsize;
use std::time::Duration;

fn search(policy: Policy, params: Params, depth: usize) -> Exploration {
    explore(
        policy,
        params,
        Limits::up_to(depth),
        NonZeroUsize::new(2).unwrap(),
        &mut || Duration::ZERO,
        &mut |_| {},
    )
}

/// The fence holds to depth 12: one task per key, one runner at a time, one end, no read back
/// from it, whatever is lost, whoever dies, however the cancel and the TTL race the result.
#[test]
fn fenced_holds_to_depth_12() {
    let e = search(Policy::Fenced, Params::default(), 12);
    assert!(e.counterexample.is_none(), "{:?}", e.counterexample);
    assert!(e.complete, "{:?}", e.stopped);
    assert!(e.distinct > 100, "the space was explored: {}", e.distinct);
}

/// Naive reads no key: the shortest violation is the orphan a lost answer leaves (call, lose
/// it, call again), and the shortest double effect follows two steps later.
#[test]
fn naive_orphans_a_task_and_applies_a_step_twice() {
    let e = search(Policy::Naive, Params::default(), 12);
    let c = e.counterexample.expect("naive breaks");
    assert_eq!(c.anomaly.kind(), AnomalyKind::OrphanTask);
    assert_eq!(
        c.steps,
        [
            RequestStep::Call,
            RequestStep::LoseAnswer,
            RequestStep::Call
        ]
    );
    let target = Params {
        target: Some(AnomalyKind::EffectTwice),
        ..Params::default()
    };
    let e = search(Policy::Naive, target, 12);
    let c = e.counterexample.expect("a double effect");
    assert_eq!(c.anomaly.kind(), AnomalyKind::EffectTwice);
    assert_eq!(c.steps.len(), 5, "{:?}", c.steps);
    let told = trace(Policy::Naive, &target, &c.steps);
    assert!(
        told.iter()
            .any(|t| t.anomalies.iter().any(|a| a.contains("applied twice"))),
        "{told:#?}"
    );
    // Under the fence, the same schedule makes one task and applies each step once.
    let mut fenced = RequestLab::new(Policy::Fenced, 64);
    for &step in &c.steps {
        if fenced.enabled(step, &target) {
            fenced.take(step, &target);
        }
    }
    assert_eq!(fenced.tasks_made(), 1);
    assert!(fenced.anomaly(None).is_none());
}

/// A runner that dies is adopted by a poll after its lease, under the next epoch, and the
/// adopter goes on from the last committed step: each step once.
#[test]
fn an_adopted_task_runs_each_step_once() {
    let p = Params::default();
    let mut lab = RequestLab::new(Policy::Fenced, 64);
    for step in [
        RequestStep::Call,
        RequestStep::Answer,
        RequestStep::Run(0),
        RequestStep::Crash(0),
        RequestStep::LeasesExpire,
        RequestStep::Poll,
        RequestStep::Run(1),
        RequestStep::Run(1),
        RequestStep::Poll,
    ] {
        assert!(lab.enabled(step, &p), "{step}");
        lab.take(step, &p);
    }
    assert_eq!(lab.runners[1].epoch, 2);
    assert_eq!(lab.status(0), Some(Status::Completed));
    assert_eq!(lab.history.checker().counters().steps_applied, 2);
    assert!(lab.anomaly(None).is_none());
}

/// Two states alike but for the ids chance gave share a fingerprint.
#[test]
fn the_fingerprint_leaves_out_the_ids() {
    let p = Params::default();
    let mut a = RequestLab::new(Policy::Fenced, 1);
    let mut b = RequestLab::new(Policy::Fenced, 1);
    b.rng = crate::ids::SplitMix64::new(99);
    for lab in [&mut a, &mut b] {
        lab.take(RequestStep::Call, &p);
        lab.take(RequestStep::Answer, &p);
    }
    assert_ne!(a.tasks, b.tasks);
    assert_eq!(a.fingerprint(), b.fingerprint());
    b.take(RequestStep::Run(0), &p);
    assert_ne!(a.fingerprint(), b.fingerprint());
}
