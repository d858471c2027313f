//! The incident of the write-up, step by step, under both policies: event 41 received, the
//! connection lost, the token stripped on the retry, background emits 42–44.

use forkscope_core::sim::Sim;
use forkscope_core::{
    AnomalyKind, LabConfig, Policy, RejectReason, ResumeDecision, StreamIdentity,
};

/// The seed's model: identity travels only in the token header.
fn two_headers() -> LabConfig {
    LabConfig {
        identity: StreamIdentity::TokenHeader,
        ..LabConfig::default()
    }
}

fn incident(policy: Policy) -> Sim {
    incident_with(policy, two_headers())
}

fn incident_with(policy: Policy, config: LabConfig) -> Sim {
    let mut sim = Sim::new(config, policy, 41).unwrap();
    sim.start();
    for _ in 0..41 {
        sim.emit_background();
    }
    assert_eq!(sim.deliver_all(), 42, "priming + 41 events");
    assert_eq!(sim.client().applied(), 41);
    let cursor = sim.client().cursor().unwrap().to_owned();
    assert!(
        cursor.ends_with("41") || cursor.starts_with("s1-41."),
        "cursor {cursor}"
    );
    // A flaky NAT drops the TCP connection; the server never hears of it.
    sim.drop_connection();
    sim.advance(100);
    // The client's HTTP library drops the custom token header on the retry.
    sim.strip_token();
    let decision = sim.reconnect(true).expect("a reconnect was due");
    sim.deliver_all();
    if sim.server().config().identity == StreamIdentity::TokenHeader {
        remember(&mut sim, decision);
    }
    // A background task keeps emitting.
    for _ in 0..3 {
        sim.emit_background();
        sim.advance(100);
    }
    sim.deliver_all();
    sim
}

fn remember(_: &mut Sim, decision: ResumeDecision) {
    // The first GET after the drop is the one the incident turns on.
    match decision {
        ResumeDecision::Reject(r) => assert_eq!(r.reason(), RejectReason::MissingToken),
        ResumeDecision::NewStream(n) => assert!(n.echo.is_none(), "naive does not flag new"),
        ResumeDecision::Resume(_) => panic!("a tokenless reconnect is never a resume"),
        ResumeDecision::Answered(a) => {
            panic!("an SDK's answer ({}) under naive or fenced", a.status)
        }
    }
}

#[test]
fn naive_forks_duplicates_and_drifts() {
    let sim = incident(Policy::Naive);
    let verdict = sim.history().verdict();
    assert!(!verdict.clean);
    assert!(verdict.count(AnomalyKind::Fork) >= 1, "{verdict:?}");
    assert!(verdict.count(AnomalyKind::Duplicate) >= 1, "{verdict:?}");
    assert!(verdict.count(AnomalyKind::CursorDrift) >= 1, "{verdict:?}");
    assert_eq!(
        verdict.count(AnomalyKind::Lost),
        3,
        "42–44 landed on the orphan"
    );
    assert!(
        verdict
            .headline
            .starts_with("fork: stream s1 received event 42"),
        "{}",
        verdict.headline
    );
    // The orphan kept receiving: two live streams on one session.
    let session = sim.server().session(sim.session().unwrap()).unwrap();
    assert_eq!(session.live_standalone_count(), 2);
    assert_eq!(
        session
            .stream(forkscope_core::StreamId(1))
            .unwrap()
            .high_water(),
        44
    );
    // Nobody rejected anything: both sides saw well-formed protocol.
    assert_eq!(sim.history().checker().counters().rejected_total(), 0);
    // A duplicate names the event, both streams and both times.
    let duplicate = sim
        .history()
        .checker()
        .anomalies()
        .iter()
        .find(|a| a.kind() == AnomalyKind::Duplicate)
        .unwrap()
        .to_string();
    assert!(
        duplicate.contains("applied twice: first as s1#1 at 0.0 s, then as s2#1 at 0.1 s"),
        "{duplicate}"
    );
}

#[test]
fn fenced_rejects_typed_and_stays_clean() {
    let sim = incident(Policy::Fenced);
    let verdict = sim.history().verdict();
    assert!(verdict.clean, "{}", verdict.headline);
    let counters = sim.history().checker().counters();
    assert_eq!(
        counters.resumes_rejected.get(&RejectReason::MissingToken),
        Some(&1)
    );
    assert_eq!(verdict.count(AnomalyKind::Duplicate), 0);
    // The client started a new session and got the three new events, each once.
    assert_eq!(sim.client().applied(), 44);
    assert_eq!(
        sim.server().sessions().count(),
        1,
        "the abandoned session was deleted"
    );
}

#[test]
fn fenced_with_identity_in_the_event_id_resumes_without_the_header() {
    let sim = incident_with(Policy::Fenced, LabConfig::default());
    match &sim.decisions()[1] {
        ResumeDecision::Resume(r) => assert_eq!((r.after, r.replay_len), (41, 0)),
        other => panic!("the id alone proves identity: {other:?}"),
    }
    let verdict = sim.history().verdict();
    assert!(verdict.clean, "{}", verdict.headline);
    assert_eq!(sim.history().checker().counters().rejected_total(), 0);
    assert_eq!(sim.client().applied(), 44, "41 then 42–44, each once");
    assert_eq!(sim.server().sessions().count(), 1);
    assert!(sim.client().cursor().unwrap().starts_with("s1-44."));
}

#[test]
fn naive_forks_with_either_identity_setting() {
    // The naive server ignores the setting: bare ids, tokenless reconnects mint silently.
    let sim = incident_with(Policy::Naive, LabConfig::default());
    assert!(sim.history().verdict().count(AnomalyKind::Fork) >= 1);
}

#[test]
fn fenced_with_the_token_resumes_gap_free() {
    let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 7).unwrap();
    sim.start();
    for _ in 0..41 {
        sim.emit_background();
    }
    sim.deliver_all();
    sim.drop_connection();
    for _ in 0..3 {
        sim.emit_background(); // 42–44 go into the void, but stay in the replay buffer.
    }
    sim.advance(300);
    sim.deliver_all();
    match sim.decisions().last().unwrap() {
        ResumeDecision::Resume(r) => {
            assert_eq!((r.after, r.replay_len), (41, 3));
            assert_eq!(r.echo.map(|e| e.resumed), Some(true));
        }
        other => panic!("expected a resume, got {other:?}"),
    }
    assert!(sim.client().cursor().unwrap().starts_with("s1-44."));
    assert_eq!(sim.client().applied(), 44);
    assert!(
        sim.history().verdict().clean,
        "{}",
        sim.history().verdict().headline
    );
}
