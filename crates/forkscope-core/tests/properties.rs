//! Property tests over random schedules of emit / deliver / drop / reset / reconnect (with or
//! without token, any cursor) / time advance.
//!
//! Under the fenced policy the checker never finds a fork, duplicate, gap, non-monotonic
//! cursor, lost event or drift; under the naive policy the search finds a fork. Resuming twice
//! with the same cursor yields the same continuation or the same rejection.

use forkscope_core::sim::Sim;
use forkscope_core::{
    AnomalyKind, ConnectionId, History, LabConfig, LabTime, Payload, Policy, ResumeDecision,
    ResumeRequest, RetryConfig, Server, SplitMix64, StreamId,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

#[derive(Clone, Debug)]
enum Step {
    Emit(u8),
    Deliver(u8),
    DropConnection,
    Reset,
    StripToken,
    ReconnectNow,
    /// A foreign GET with arbitrary headers, as a misbehaving peer might send.
    RawGet {
        token: TokenChoice,
        cursor: CursorChoice,
    },
    Advance(u16),
}

#[derive(Clone, Debug)]
enum TokenChoice {
    None,
    Current,
    Garbage,
}

#[derive(Clone, Debug)]
enum CursorChoice {
    None,
    Current,
    Scoped(u8, u8),
    Bare(u8),
    Junk,
}

fn step() -> impl Strategy<Value = Step> {
    let token = prop_oneof![
        Just(TokenChoice::None),
        Just(TokenChoice::Current),
        Just(TokenChoice::Garbage)
    ];
    let cursor = prop_oneof![
        Just(CursorChoice::None),
        Just(CursorChoice::Current),
        (1u8..4, 0u8..60).prop_map(|(s, q)| CursorChoice::Scoped(s, q)),
        (0u8..60).prop_map(CursorChoice::Bare),
        Just(CursorChoice::Junk),
    ];
    prop_oneof![
        4 => (1u8..6).prop_map(Step::Emit),
        4 => (1u8..8).prop_map(Step::Deliver),
        1 => Just(Step::DropConnection),
        1 => Just(Step::Reset),
        1 => Just(Step::StripToken),
        2 => Just(Step::ReconnectNow),
        1 => (token, cursor).prop_map(|(token, cursor)| Step::RawGet { token, cursor }),
        2 => (1u16..3_000).prop_map(Step::Advance),
    ]
}

fn config() -> LabConfig {
    LabConfig {
        grace_ms: 1_500,
        retry: RetryConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 800,
            budget_ms: 6_000,
        },
        replay_buffer: 24,
        ..LabConfig::default()
    }
}

fn run(policy: Policy, steps: &[Step], seed: u64) -> Sim {
    let mut sim = Sim::new(config(), policy, seed).unwrap();
    sim.start();
    for step in steps {
        match step {
            Step::Emit(n) => (0..*n).for_each(|_| sim.emit_background()),
            Step::Deliver(n) => {
                sim.deliver(usize::from(*n));
            }
            Step::DropConnection => sim.drop_connection(),
            Step::Reset => sim.reset(),
            Step::StripToken => sim.strip_token(),
            Step::ReconnectNow => {
                sim.reconnect(true);
            }
            Step::RawGet { token, cursor } => {
                let token = match token {
                    TokenChoice::None => None,
                    TokenChoice::Current => sim.client().token().map(str::to_owned),
                    TokenChoice::Garbage => Some("ffffffffffffffffffffffffffffffff".to_owned()),
                };
                let cursor = match cursor {
                    CursorChoice::None => None,
                    CursorChoice::Current => sim.client().cursor().map(str::to_owned),
                    CursorChoice::Scoped(s, q) => Some(format!("s{s}-{q}")),
                    CursorChoice::Bare(q) => Some(q.to_string()),
                    CursorChoice::Junk => Some("\u{0}junk".to_owned()),
                };
                // A GET from someone else (a stale tab, a buggy retry layer, an attacker): the
                // server rules on it, but the honest client never reads its answer.
                sim.probe_get(token.as_deref(), cursor.as_deref(), ConnectionId(1_000_000));
            }
            Step::Advance(ms) => sim.advance(u64::from(*ms)),
        }
    }
    sim.deliver_all();
    sim
}

fn cases() -> u32 {
    std::env::var("FORKSCOPE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn fenced_never_forks_duplicates_gaps_or_drifts(
        steps in prop::collection::vec(step(), 1..60),
        seed in any::<u64>(),
    ) {
        let mut sim = run(Policy::Fenced, &steps, seed);
        // Exactly once, or told: whatever the run leaves undelivered, the client knows of.
        sim.end_run();
        let verdict = sim.history().verdict();
        let violations: Vec<_> = verdict.counts.keys().filter(|k| k.is_violation()).collect();
        prop_assert!(violations.is_empty(), "{}\n{:?}", verdict.headline, verdict.counts);
    }

    #[test]
    fn resuming_twice_with_the_same_cursor_is_idempotent(
        steps in prop::collection::vec(step(), 1..40),
        seed in any::<u64>(),
        policy in prop_oneof![Just(Policy::Fenced), Just(Policy::Naive)],
    ) {
        let sim = run(policy, &steps, seed);
        // Replay the same resume twice against a server in the state the schedule left.
        let token = sim.client().token().map(str::to_owned);
        let cursor = sim.client().cursor().map(str::to_owned);
        let (first, second) = resume_twice(&sim, policy, &steps, seed, token.as_deref(), cursor.as_deref());
        prop_assert_eq!(first, second);
    }
}

/// The same resume request made twice in a row at the same instant, reduced to what the client
/// would see: the continuation (stream, replayed events, echo) or the rejection.
fn resume_twice(
    sim: &Sim,
    policy: Policy,
    steps: &[Step],
    seed: u64,
    token: Option<&str>,
    cursor: Option<&str>,
) -> (String, String) {
    // Rebuild the very same state (the run is deterministic) and poke its server directly.
    let mut again = run(policy, steps, seed);
    assert_eq!(
        again.history().total(),
        sim.history().total(),
        "runs are reproducible"
    );
    let Some(session) = again.session() else {
        return (String::new(), String::new());
    };
    let mut outcomes = Vec::new();
    for connection in [ConnectionId(10_001), ConnectionId(10_002)] {
        let decision = again.probe_get(token, cursor, connection);
        outcomes.push(describe(&again, session, decision));
    }
    (outcomes.remove(0), outcomes.remove(0))
}

fn describe(
    sim: &Sim,
    session: forkscope_core::SessionId,
    decision: Option<ResumeDecision>,
) -> String {
    match decision {
        None => "no session".to_owned(),
        Some(ResumeDecision::Resume(r)) => {
            let replayed: Vec<String> = sim
                .server()
                .replay(session, r.stream, r.after)
                .map(|it| it.map(|e| format!("{}:{}", e.id, e.payload.key)).collect())
                .unwrap_or_default();
            format!(
                "resume {} after {} echo {:?} replay {:?}",
                r.stream, r.after, r.echo, replayed
            )
        }
        Some(ResumeDecision::Reject(r)) => format!("reject {r}"),
        Some(ResumeDecision::Answered(a)) => format!("answered {}", a.status),
        Some(ResumeDecision::NewStream(n)) => {
            format!("new stream (flagged {:?})", n.echo.is_some())
        }
    }
}

/// Naive mode is the incident: a search over random schedules finds a fork.
#[test]
fn naive_search_finds_a_fork() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (prop::collection::vec(step(), 1..60), any::<u64>());
    let mut found = None;
    for attempt in 0..5_000 {
        let (steps, seed) = strategy.new_tree(&mut runner).unwrap().current();
        let sim = run(Policy::Naive, &steps, seed);
        if sim.history().verdict().count(AnomalyKind::Fork) > 0 {
            found = Some((attempt, sim.history().verdict().headline));
            break;
        }
    }
    let (attempt, headline) = found.expect("5,000 random naive schedules and no fork");
    assert!(headline.starts_with("fork:"), "{headline}");
    eprintln!(
        "naive fork found after {} schedules: {headline}",
        attempt + 1
    );
}

/// A direct check of the server alone: random emits and resumes never replay an event twice or
/// skip one when the resume is accepted.
#[test]
fn accepted_resumes_replay_exactly_the_events_after_the_cursor() {
    let mut rng = SplitMix64::new(11);
    let mut history = History::new(64);
    let mut server = Server::new(config(), Policy::Fenced).unwrap();
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
    for n in 1..=60u64 {
        server
            .emit(
                LabTime::ZERO,
                session,
                StreamId(1),
                Payload::new(format!("k{n}"), "{}"),
                &mut history,
            )
            .unwrap();
        for cursor in n.saturating_sub(30)..=n + 1 {
            let raw = format!("s1-{cursor}");
            let request = ResumeRequest {
                session,
                token: Some(&token),
                last_event_id: Some(&raw),
                connection: ConnectionId(2),
            };
            match server
                .handle_get(LabTime::ZERO, &request, &mut rng, &mut history)
                .unwrap()
            {
                ResumeDecision::Resume(r) => {
                    let seqs: Vec<u64> = server
                        .replay(session, StreamId(1), r.after)
                        .unwrap()
                        .map(|e| e.id.seq)
                        .collect();
                    assert_eq!(seqs, ((cursor + 1)..=n).collect::<Vec<_>>());
                }
                ResumeDecision::Reject(r) => {
                    assert!(cursor > n || cursor + 24 < n, "cursor {cursor} at {n}: {r}")
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

/// The fenced property means something only if its schedules reach the interesting states:
/// accepted resumes, typed rejections of many kinds, fenced orphans and refused late emits.
#[test]
fn fenced_schedules_exercise_resumes_rejections_and_fencing() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (prop::collection::vec(step(), 1..60), any::<u64>());
    let (mut accepted, mut fences, mut late, mut applied) = (0, 0, 0, 0);
    let mut reasons = std::collections::BTreeSet::new();
    for _ in 0..2_000 {
        let (steps, seed) = strategy.new_tree(&mut runner).unwrap().current();
        let sim = run(Policy::Fenced, &steps, seed);
        let counters = sim.history().checker().counters();
        accepted += counters.resumes_accepted;
        fences += counters.fences;
        late += counters.late_emits_refused;
        applied += counters.applied;
        reasons.extend(counters.resumes_rejected.keys().copied());
    }
    assert!(
        accepted > 100 && fences > 10 && late > 0 && applied > 1_000,
        "{accepted} {fences} {late} {applied}"
    );
    assert!(reasons.len() >= 6, "rejection reasons reached: {reasons:?}");
}
