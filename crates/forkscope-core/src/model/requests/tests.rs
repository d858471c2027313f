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

/// The fence holds to depth 16: one task per key, one runner at a time, one end, no read back
/// from it, and every run that ends has told the client its task's end — whatever is lost,
/// whoever dies, however the renewals, the polls, the cancel and the TTL race the steps.
#[test]
fn fenced_holds_to_depth_16() {
    let e = search(Policy::Fenced, Params::default(), 16);
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
    // Both tasks run to their end once the run is let end: each step twice.
    assert!(c.ends_run);
    assert_eq!(
        c.steps,
        [
            RequestStep::Call,
            RequestStep::LoseAnswer,
            RequestStep::Call,
            RequestStep::Answer
        ]
    );
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
    fenced.end_run();
    assert_eq!(fenced.tasks_made(), 1);
    assert!(fenced.anomaly(None).is_none());
}

/// A runner that dies is adopted by a poll after its lease, under the next epoch, and the
/// adopter goes on from the last committed step: each step once. Time moves only to the next
/// deadline, and each write is a step of its own.
#[test]
fn an_adopted_task_runs_each_step_once() {
    let p = Params::default();
    let mut lab = RequestLab::new(Policy::Fenced, 256);
    for step in [RequestStep::Call, RequestStep::Answer] {
        lab.take(step, &p);
    }
    // Runner 0 lives past its first step (renewing on the way), then dies.
    while lab.history.checker().counters().steps_applied < 1 {
        step_on(&mut lab, &p);
    }
    lab.take(RequestStep::Crash(0), &p);
    // Its lease runs out; the client's next poll adopts the task, and runner 1 ends it.
    while lab.runners.len() < 2 {
        lab.take(RequestStep::Tick, &p);
        lab.take(RequestStep::Poll, &p);
    }
    while lab.status(0) == Some(Status::Working) {
        step_on(&mut lab, &p);
    }
    lab.take(RequestStep::Poll, &p);
    assert_eq!(lab.runners[1].runner.epoch(), 2);
    assert_eq!(lab.status(0), Some(Status::Completed));
    assert_eq!(lab.history.checker().counters().steps_applied, 2);
    assert!(lab.anomaly(None).is_none());
}

/// Every runner write due now, else time to the next deadline.
fn step_on(lab: &mut RequestLab, p: &Params) {
    let due = (0..lab.runners.len() as u8).find(|&r| lab.enabled(RequestStep::Run(r), p));
    lab.take(due.map_or(RequestStep::Tick, RequestStep::Run), p);
}

/// Steps longer than the lease, polled: the renewing runner keeps its task, and the run ends
/// with the client holding its end. The mutation — a runner that renews only with its steps —
/// is found: every poll past the lease adopts the task, the adopter waits a whole step again,
/// and the task never ends (lost, found by ending the run).
#[test]
fn a_runner_that_does_not_renew_is_found_never_ending() {
    let mut lab = RequestLab::new(Policy::Fenced, 64);
    let p = Params::default();
    lab.take(RequestStep::Call, &p);
    lab.take(RequestStep::Answer, &p);
    assert!(
        WORK.delay_ms > lab.table.lease_ms(),
        "steps outlast the lease"
    );
    lab.end_run();
    assert_eq!(lab.status(0), Some(Status::Completed));
    assert!(lab.anomaly(None).is_none());
    assert_eq!(lab.runners.len(), 1, "nothing was adopted");

    let mutated = Params {
        renewal: false,
        ..Params::default()
    };
    let e = search(Policy::Fenced, mutated, 16);
    let c = e.counterexample.expect("the mutation is caught");
    assert_eq!(c.anomaly.kind(), AnomalyKind::TaskLost, "{}", c.anomaly);
    assert!(c.ends_run);
    assert_eq!(c.steps, [RequestStep::Call, RequestStep::Answer]);
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
    b.take(RequestStep::Tick, &p);
    assert_ne!(a.fingerprint(), b.fingerprint());
}
