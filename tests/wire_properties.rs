//! The fence over real sockets: random fault schedules — NAT drops, resets, stripped tokens,
//! stale and foreign cursors, concurrent resumes, tool calls, policy round trips — played
//! against a lab (server, fault proxy and client on 127.0.0.1) on a scripted clock. Under the
//! fenced policy the checker stays clean whatever the schedule; under the naive one the
//! reconnect after a NAT drop forks.
//!
//! `FORKSCOPE_WIRE_CASES` sets the number of fenced schedules (default 1,000); the soak in
//! BENCHMARKS.md runs 10⁵.

use forkscope::lab::{Action, Lab, LabOptions, Probe, ProbeToken};
use forkscope_core::client::Phase;
use forkscope_core::{AnomalyKind, LabConfig, Policy, RetryConfig};
use proptest::prelude::*;
use std::time::Duration;

/// A guard against a hung run, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);

#[derive(Clone, Debug)]
enum Step {
    Drop,
    Reset,
    StripToken,
    ReconnectNow,
    Emit(u8),
    ToolCall,
    Advance(u16),
    /// A GET from outside the client: a stale or foreign cursor, a garbage or foreign token.
    Probe(u8),
    /// Several resumes with the client's own token and cursor at once.
    ConcurrentResumes(u8),
    /// Naive and back at once, no request served between: the switch back fences whatever
    /// naive left emitting.
    PolicyRoundTrip,
    /// Not drawn at random: waits until the server has opened `n` standalone streams.
    AwaitStreams(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Drop),
        2 => Just(Step::Reset),
        1 => Just(Step::StripToken),
        2 => Just(Step::ReconnectNow),
        4 => (1u8..4).prop_map(Step::Emit),
        1 => Just(Step::ToolCall),
        4 => (50u16..2_500).prop_map(Step::Advance),
        2 => (0u8..5).prop_map(Step::Probe),
        1 => (2u8..4).prop_map(Step::ConcurrentResumes),
        1 => Just(Step::PolicyRoundTrip),
    ]
}

fn options(policy: Policy) -> LabOptions {
    LabOptions {
        policy,
        config: LabConfig {
            grace_ms: 1_000,
            retry: RetryConfig {
                initial_backoff_ms: 100,
                max_backoff_ms: 400,
                budget_ms: 4_000,
            },
            retention_ms: 4_000,
            ..LabConfig::default()
        },
        background: None,
        tool_steps: 3,
        tool_delay_ms: 100,
        start_paused: true,
        via_proxy: true,
        replicas: None,
        latency_ms: 0,
        protocols: forkscope_core::revision::Protocols::Both,
        ..LabOptions::default()
    }
}

fn probe(kind: u8) -> Probe {
    let (token, cursor) = match kind {
        0 => (ProbeToken::Current, Some("s1-0")),
        1 => (ProbeToken::None, Some("s7-3.AAAAAAAAAAA")),
        2 => (ProbeToken::Garbage, Some("current")),
        3 => (ProbeToken::OtherSession, Some("current")),
        _ => (ProbeToken::None, None),
    };
    Probe {
        token,
        last_event_id: cursor.map(str::to_owned),
    }
}

/// Moves lab time on in steps of at most 100 ms, giving the client the real time to act on
/// whatever fell due in each (a clock that leaps seconds at once would spend a client's retry
/// budget before it could try).
async fn advance(lab: &Lab, ms: u64) {
    let mut left = ms;
    while left > 0 {
        let step = left.min(100);
        lab.advance(step);
        left -= step;
        let now = lab.clock().now();
        until(lab, Duration::from_millis(50), |core| {
            client_waits(core, now)
        })
        .await;
    }
}

/// Whether the client has done everything due by `now`: it is connected, waiting for a later
/// attempt, or has given up — not about to act, and no attempt in flight.
fn client_waits(core: &forkscope::wire::Core, now: forkscope_core::LabTime) -> bool {
    let idle = match core.client.phase() {
        Phase::Connected | Phase::GaveUp { .. } => true,
        Phase::Reconnecting {
            next_at: Some(due), ..
        } => due > now,
        Phase::Reconnecting { next_at: None, .. } | Phase::Idle => false,
    };
    idle && core.client.poll_timeout().is_none_or(|due| due > now)
}

/// Waits until the history has not grown for 10 ms: what was on the wire has landed.
async fn quiet(lab: &Lab) {
    let mut last = u64::MAX;
    let mut since = std::time::Instant::now();
    let deadline = since + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let total = lab.core().history.total();
        if total != last {
            last = total;
            since = std::time::Instant::now();
        } else if since.elapsed() >= Duration::from_millis(10) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Polls `ready` tightly (the client reacts in microseconds), for at most `limit`; whether it
/// held.
async fn until(
    lab: &Lab,
    limit: Duration,
    mut ready: impl FnMut(&forkscope::wire::Core) -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if ready(&lab.core()) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

async fn play(lab: &Lab, steps: &[Step]) {
    for step in steps {
        match step {
            Step::Drop => lab.apply(Action::DropConnection),
            Step::Reset => lab.apply(Action::Reset),
            Step::StripToken => lab.apply(Action::StripToken),
            Step::ReconnectNow => lab.apply(Action::ReconnectNow),
            Step::Emit(n) => {
                for _ in 0..*n {
                    lab.apply(Action::EmitBackground);
                }
                forkscope::lab::Outcome::Done
            }
            Step::ToolCall => lab.apply(Action::StartToolCall),
            Step::Advance(ms) => {
                advance(lab, u64::from(*ms)).await;
                forkscope::lab::Outcome::Done
            }
            Step::Probe(kind) => {
                lab.probe(&probe(*kind)).await;
                forkscope::lab::Outcome::Done
            }
            Step::ConcurrentResumes(n) => {
                let resume = Probe {
                    token: ProbeToken::Current,
                    last_event_id: Some("current".to_owned()),
                };
                let probes = (0..*n).map(|_| lab.probe(&resume));
                futures_util::future::join_all(probes).await;
                forkscope::lab::Outcome::Done
            }
            Step::PolicyRoundTrip => {
                // Both switches under one hold of the core's lock: a request served between
                // two separate switches would meet the other policy (a reconnect in flight
                // under a moment of naive is a real fork, and the checker says so).
                let policy = lab.policy();
                lab.switch_policies(&[policy.toggled(), policy])
            }
            Step::AwaitStreams(n) => {
                let _ = lab
                    .wait_for(LIMIT, |core| {
                        let c = core.history.checker().counters();
                        c.new_streams_flagged + c.new_streams_silent >= u64::from(*n)
                    })
                    .await;
                forkscope::lab::Outcome::Done
            }
        };
        // Let the client notice a fault (a broken connection shows in real time, not lab
        // time) and finish what it started before the next step.
        if matches!(step, Step::Drop | Step::Reset) {
            until(lab, Duration::from_millis(200), |core| {
                core.client.phase() != Phase::Connected
            })
            .await;
        }
        let now = lab.clock().now();
        until(lab, Duration::from_millis(50), |core| {
            client_waits(core, now)
        })
        .await;
    }
}

/// Runs lab time on until an event emitted now reaches the client — proof that it is bound
/// to a live stream and has everything before it (under fenced; a naive fork may lose it, so
/// there the lab just goes quiet).
async fn quiesce(lab: &Lab, policy: Policy) -> Result<(), String> {
    if policy == Policy::Naive {
        advance(lab, 2_000).await;
        quiet(lab).await;
        return Ok(());
    }
    for _ in 0..60 {
        let (phase, attached) = {
            let core = lab.core();
            let phase = core.client.phase();
            (
                phase,
                phase == Phase::Connected && core.client.cursor().is_some(),
            )
        };
        if matches!(phase, Phase::GaveUp { .. }) {
            // Nothing more will reach it; the verdict still judges what did.
            quiet(lab).await;
            return Ok(());
        }
        if attached {
            let before = lab.core().client.applied();
            lab.apply(Action::EmitBackground);
            if until(lab, Duration::from_millis(100), |core| {
                core.client.applied() > before
            })
            .await
            {
                quiet(lab).await;
                return Ok(());
            }
        }
        advance(lab, 250).await;
    }
    Err(format!(
        "no event reached the client after 15 s of lab time; verdict: {}",
        lab.core().history.verdict().headline
    ))
}

fn run(policy: Policy, steps: &[Step]) -> Result<forkscope_core::Verdict, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let lab = Lab::start(options(policy))
            .await
            .map_err(|e| e.to_string())?;
        lab.wait_for(LIMIT, |core| core.client.cursor().is_some())
            .await
            .map_err(|e| e.to_string())?;
        play(&lab, steps).await;
        let quiet = quiesce(&lab, policy).await;
        // Ended as a scenario ends: what is still owed once the lab is quiet is judged.
        forkscope::scenario::player::finish(&lab, QUIESCE_MS).await;
        let verdict = lab.core().history.verdict();
        lab.stop().await;
        quiet.map(|()| verdict)
    })
}

/// Lab time a run may go on after its steps while something is still owed.
const QUIESCE_MS: u64 = 20_000;

fn cases() -> u32 {
    std::env::var("FORKSCOPE_WIRE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn fenced_stays_clean_over_real_sockets(steps in prop::collection::vec(step(), 1..16)) {
        // Exactly once, or told: no violation once the run is ended and what is still owed is
        // judged; what the client was refused on the way, or knows it lost (a tool call whose
        // POST broke before any answer), is undelivered and told, which is allowed.
        let verdict = run(Policy::Fenced, &steps).map_err(TestCaseError::fail)?;
        let violations: Vec<_> = verdict.counts.keys().filter(|k| k.is_violation()).collect();
        prop_assert!(violations.is_empty(), "{}\n{:?}", verdict.headline, verdict.counts);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 10, max_shrink_iters: 50, ..ProptestConfig::default() })]

    /// The seed incident: a NAT drop, a reconnect without the token, and the naive server
    /// mints a new stream while the old one keeps the background task: the next emit lands on
    /// the orphan — a fork, whatever follows.
    #[test]
    fn naive_forks_after_a_nat_drop_over_real_sockets(rest in prop::collection::vec(step(), 0..10)) {
        let mut steps = vec![
            Step::StripToken,
            Step::Drop,
            Step::Advance(300),
            Step::ReconnectNow,
            Step::AwaitStreams(2),
            Step::Emit(1),
        ];
        steps.extend(rest);
        let verdict = run(Policy::Naive, &steps).map_err(TestCaseError::fail)?;
        prop_assert!(verdict.count(AnomalyKind::Fork) >= 1, "{}\n{:?}", verdict.headline, verdict.counts);
    }
}
