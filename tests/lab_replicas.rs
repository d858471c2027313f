//! A lab of replicas over real sockets: two replicas on one store behind the balancer, the
//! fault proxy and the lab's client in front. A NAT drop, then a reconnect the balancer sends
//! to the other replica: naive replicas fork across replicas (the first keeps sending on the
//! orphan), fenced ones hand the stream over and the store refuses the first replica's late
//! write.

use forkscope::lab::{Action, Lab, LabOptions, Outcome, ReplicaSetup};
use forkscope_core::client::Phase;
use forkscope_core::history::{Anomaly, Record};
use forkscope_core::{AnomalyKind, Policy, ReplicaId};
use std::time::Duration;

/// A guard against a hung run, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);

fn replica(name: &str) -> ReplicaId {
    ReplicaId::parse(name).expect("a replica name")
}

async fn lab(policy: Policy) -> Lab {
    let options = LabOptions {
        policy,
        background: None,
        replicas: Some(ReplicaSetup::default()),
        ..LabOptions::default()
    };
    Lab::start(options).await.expect("the lab starts")
}

fn connected(lab: &Lab) -> bool {
    let snapshot = lab.snapshot();
    snapshot
        .view
        .client
        .is_some_and(|c| c.phase == Phase::Connected && c.cursor.is_some())
}

async fn until(lab: &Lab, what: &str, mut ready: impl FnMut(&Lab) -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !ready(lab) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not reached; verdict: {}",
            lab.snapshot().view.verdict.headline
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn emits_by(lab: &Lab, id: ReplicaId) -> usize {
    lab.core()
        .history
        .recent()
        .iter()
        .filter(|e| matches!(e.record, Record::Emitted { .. }))
        .filter(|e| e.by.is_some_and(|b| b.replica == id))
        .count()
}

/// The resume lands on B while A still holds the half-open connection: what each policy does.
async fn resume_lands_on_the_other_replica(policy: Policy) -> Lab {
    let (a, b) = (replica("A"), replica("B"));
    let lab = lab(policy).await;
    until(&lab, "connected", connected).await;
    // The session's standalone stream is on A (round-robin sends the first GET somewhere:
    // find out where).
    let holder = {
        let view = lab.snapshot().replicas.expect("a lab of replicas");
        view.replicas
            .iter()
            .find(|r| r.holds.iter().any(|h| !h.superseded))
            .map(|r| r.id)
            .expect("a replica holds the stream")
    };
    let other = if holder == a { b } else { a };
    assert_eq!(lab.apply(Action::EmitOn(holder)), Outcome::Done);
    until(&lab, "the first event applied", |l| {
        l.snapshot().view.client.is_some_and(|c| c.applied >= 1)
    })
    .await;
    assert_eq!(lab.apply(Action::DropConnection), Outcome::Done);
    until(&lab, "reconnecting", |l| !connected(l)).await;
    assert_eq!(lab.apply(Action::RouteNext(other)), Outcome::Done);
    lab.apply(Action::ReconnectNow);
    until(&lab, "attached on the other replica", |l| {
        l.snapshot().replicas.is_some_and(|v| {
            v.replicas[other.index()]
                .holds
                .iter()
                .any(|h| !h.superseded)
        }) && connected(l)
    })
    .await;
    // The replica the client left emits.
    lab.apply(Action::EmitOn(holder));
    lab.apply(Action::EmitOn(other));
    until(&lab, "the orphan's emit judged", |l| match policy {
        Policy::Naive => l.core().history.checker().count(AnomalyKind::Fork) >= 1,
        Policy::Fenced => l.core().history.checker().counters().late_emits_refused >= 1,
        other => unreachable!("replicas run naive or fenced, not {other}"),
    })
    .await;
    lab
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_replicas_fork_across_replicas_and_the_checker_names_both() {
    let lab = resume_lands_on_the_other_replica(Policy::Naive).await;
    let across = |a: &&Anomaly| {
        matches!(
            a,
            Anomaly::Fork {
                across: Some(_),
                ..
            }
        )
    };
    let fork = {
        let core = lab.core();
        let found = core
            .history
            .checker()
            .anomalies()
            .iter()
            .find(across)
            .cloned();
        found.expect("a fork across replicas")
    };
    let said = fork.to_string();
    assert!(said.contains("from replica"), "{said}");
    // Every later send the orphan receives is drawn where it lands (tagged), and the fork is
    // still counted once.
    let Anomaly::Fork {
        across: Some(across),
        ..
    } = fork
    else {
        unreachable!("found as a fork across replicas")
    };
    let tagged_sends = |l: &Lab| {
        l.core()
            .history
            .recent()
            .iter()
            .filter(|e| e.by.is_some_and(|b| b.replica == across.from))
            .filter(|e| matches!(e.record, Record::Emitted { .. }))
            .filter(|e| e.caused.kinds().contains(AnomalyKind::Fork))
            .count()
    };
    let before = tagged_sends(&lab);
    lab.apply(Action::EmitOn(across.from));
    lab.apply(Action::EmitOn(across.from));
    until(&lab, "two more orphan sends tagged", |l| {
        tagged_sends(l) >= before + 2
    })
    .await;
    assert_eq!(lab.core().history.checker().count(AnomalyKind::Fork), 1);
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_replicas_hand_the_stream_over_and_refuse_the_late_write() {
    let lab = resume_lands_on_the_other_replica(Policy::Fenced).await;
    let verdict = lab.snapshot().view.verdict;
    assert!(verdict.clean, "{}", verdict.headline);
    let refused = lab
        .core()
        .history
        .recent()
        .iter()
        .any(|e| matches!(e.record, Record::StaleWriteRefused { .. }));
    assert!(refused, "the store refused the late write");
    assert!(emits_by(&lab, replica("A")) + emits_by(&lab, replica("B")) >= 1);
    lab.stop().await;
}
