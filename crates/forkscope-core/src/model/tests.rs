use super::*;
use crate::history::AnomalyKind;
use std::time::Duration;

fn bounds() -> Bounds {
    Bounds::default()
}

fn to(depth: usize) -> Limits {
    Limits::up_to(depth)
}

#[test]
fn naive_forks_within_a_few_steps_and_the_schedule_is_shortest() {
    let found = explore(config(), Policy::Naive, bounds(), to(6)).unwrap();
    let c = found.counterexample.expect("naive must fork");
    assert_eq!(c.anomaly.kind(), AnomalyKind::Fork, "{c:?}");
    // Nothing shorter forks: the level before the counterexample's was explored clean.
    let shorter = explore(config(), Policy::Naive, bounds(), to(c.steps.len() - 1)).unwrap();
    assert!(
        shorter.counterexample.is_none(),
        "{:?}",
        shorter.counterexample
    );
}

#[test]
fn fenced_holds_up_to_a_small_depth() {
    let found = explore(config(), Policy::Fenced, bounds(), to(5)).unwrap();
    assert!(found.counterexample.is_none(), "{:?}", found.counterexample);
    assert!(found.complete);
    assert!(found.distinct > 100, "explored only {}", found.distinct);
}

#[test]
fn a_counterexample_replays_to_the_same_anomaly() {
    let found = explore(config(), Policy::Naive, bounds(), to(6)).unwrap();
    let c = found.counterexample.unwrap();
    let told = trace(
        config(),
        Policy::Naive,
        &c.steps,
        found.rules.delivery,
        c.ends_run,
    )
    .unwrap();
    assert_eq!(told.len(), c.steps.len());
    let last = told.last().unwrap();
    assert!(
        last.anomalies.iter().any(|a| a.starts_with("fork")),
        "{last:?}"
    );
}

#[test]
fn states_alike_up_to_renaming_share_a_fingerprint() {
    // Two labs from different seeds draw different session ids and tokens.
    let mut a = Sim::new(config(), Policy::Fenced, 1).unwrap();
    let mut b = Sim::new(config(), Policy::Fenced, 2).unwrap();
    for sim in [&mut a, &mut b] {
        sim.start();
        sim.emit_background();
        sim.deliver_all();
    }
    assert_ne!(a.session(), b.session());
    assert_eq!(a.fingerprint(), b.fingerprint());
    // And a real difference shows.
    b.emit_background();
    assert_ne!(a.fingerprint(), b.fingerprint());
}

#[test]
fn a_fence_that_skips_condition_2_is_caught() {
    crate::resume::fenced::SKIP_CONDITION_2.with(|skip| skip.set(true));
    let found = explore(config(), Policy::Fenced, bounds(), to(4));
    crate::resume::fenced::SKIP_CONDITION_2.with(|skip| skip.set(false));
    let c = found
        .unwrap()
        .counterexample
        .expect("the weakened fence must fail");
    assert_eq!(c.anomaly.kind(), AnomalyKind::Fork, "{c:?}");
}

#[test]
fn the_search_reaches_the_decisions_it_tests() {
    let client_only = Bounds {
        probes: false,
        ..bounds()
    };
    let found = explore(config(), Policy::Fenced, client_only, to(10)).unwrap();
    assert!(found.counterexample.is_none(), "{:?}", found.counterexample);
    for what in [
        "resume accepted",
        "stream fenced",
        "tool call result applied",
        "client started a new session",
        "rejected: orphan_still_live",
        "rejected: cursor_evicted",
        "rejected: stream_closed",
    ] {
        assert!(
            found.reached.contains_key(what),
            "{what}: {:?}",
            found.reached
        );
    }
}

#[test]
fn eager_delivery_holds_too_and_naive_still_forks() {
    let eager = Bounds {
        delivery: Delivery::Eager,
        ..bounds()
    };
    let fenced = explore(config(), Policy::Fenced, eager, to(8)).unwrap();
    assert!(
        fenced.counterexample.is_none(),
        "{:?}",
        fenced.counterexample
    );
    let target = Bounds {
        target: Some(AnomalyKind::Duplicate),
        probes: false,
        ..eager
    };
    let naive = explore(config(), Policy::Naive, target, to(8)).unwrap();
    let c = naive.counterexample.expect("naive duplicates");
    assert_eq!(c.anomaly.kind(), AnomalyKind::Duplicate);
    assert!(!c.steps.iter().any(|s| matches!(s, Step::Probe(_))));
}

/// A search that runs into its memory budget stops at the end of the last depth it explored
/// in full, says so, and never holds more than the budget (as estimated).
#[test]
fn a_memory_budget_stops_the_search_after_the_last_full_depth() {
    let budget = ByteSize::mib(16);
    let bounded = Limits {
        memory_budget: budget,
        ..to(30)
    };
    let found = explore(config(), Policy::Fenced, bounds(), bounded).unwrap();
    assert!(found.counterexample.is_none(), "{:?}", found.counterexample);
    assert!(!found.complete);
    let stopped = found
        .stopped
        .expect("the budget stops a search to depth 30");
    assert_eq!(stopped.limit, Limit::MemoryBudget { budget });
    assert_eq!(stopped.at_depth, found.proven_depth + 1);
    assert!(found.proven_depth >= 5, "{found:?}");
    assert!(found.estimated_peak <= budget);
    // What it claims for the depths it finished is what a search bounded there finds.
    let full = explore(config(), Policy::Fenced, bounds(), to(found.proven_depth)).unwrap();
    assert!(full.complete);
    assert_eq!(&full.levels[..], &found.levels[..found.proven_depth]);
    let last = found.levels.last().unwrap();
    assert_eq!((last.depth, last.complete), (stopped.at_depth, false));
    let verdict = found.verdict();
    assert!(
        verdict.starts_with(&format!(
            "every schedule up to depth {} holds",
            found.proven_depth
        )) && verdict.ends_with(&format!(
            "(memory budget 16 MiB reached at depth {})",
            stopped.at_depth
        )),
        "{verdict}"
    );
}

#[test]
fn a_state_limit_stops_the_search_the_same_way() {
    let limited = Limits {
        max_states: Some(1_000),
        ..to(30)
    };
    let found = explore(config(), Policy::Fenced, bounds(), limited).unwrap();
    assert_eq!(found.distinct, 1_000);
    let stopped = found.stopped.unwrap();
    assert_eq!(stopped.limit, Limit::StateLimit { max_states: 1_000 });
    assert_eq!(stopped.at_depth, found.proven_depth + 1);
    assert!(
        found
            .verdict()
            .contains("(state limit 1000 reached at depth")
    );
    // A limit met exactly at the end of a level leaves that level whole.
    let exact = found.levels[found.proven_depth - 1].distinct;
    let at_a_level = Limits {
        max_states: Some(exact),
        ..to(found.proven_depth)
    };
    let whole = explore(config(), Policy::Fenced, bounds(), at_a_level).unwrap();
    assert!(whole.complete && whole.stopped.is_none(), "{whole:?}");
}

#[test]
fn a_budget_too_small_for_one_level_proves_nothing_and_says_so() {
    let tiny = Limits {
        // Room for three states: level 1 alone finds seven.
        memory_budget: memory::estimate(3),
        ..to(8)
    };
    let found = explore(config(), Policy::Fenced, bounds(), tiny).unwrap();
    assert_eq!(found.proven_depth, 0);
    assert!(
        found.verdict().starts_with("nothing proven"),
        "{}",
        found.verdict()
    );
}

fn on(workers: usize, policy: Policy, bounds: Bounds, limits: Limits) -> Exploration {
    let workers = NonZeroUsize::new(workers).unwrap();
    let mut no_clock = || Duration::ZERO;
    explore_on(
        workers,
        config(),
        policy,
        bounds,
        limits,
        &mut no_clock,
        &mut |_| {},
    )
    .unwrap()
}

/// The counts a search that kept every state whole found (the explorer before states were
/// rebuilt by replay, on the Sim that drives the core's work machines; at depth 12 it found
/// 119,387 states in 584,693 steps, as this one does): the same states, steps and evidence, on
/// one thread or several.
#[test]
fn the_search_finds_the_states_a_search_keeping_every_state_found() {
    let interleaved = bounds();
    let eager = Bounds {
        delivery: Delivery::Eager,
        ..bounds()
    };
    for workers in [1, 2, 3] {
        let fenced = on(workers, Policy::Fenced, interleaved, to(7));
        let by_depth: Vec<u64> = fenced.levels.iter().map(|l| l.distinct).collect();
        assert_eq!(
            by_depth,
            [7, 25, 77, 219, 578, 1430, 3351],
            "{workers} workers"
        );
        assert_eq!((fenced.transitions, fenced.pruned), (13_222, 0));
        let reached: Vec<(&str, u64)> = fenced
            .reached
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        assert_eq!(
            reached,
            [
                ("client started a new session", 23),
                ("grace window started", 1_310),
                ("new stream, flagged as new", 23),
                ("rejected: cursor_evicted", 73),
                ("rejected: missing_last_event_id", 176),
                ("rejected: orphan_still_live", 1_498),
                ("rejected: unknown_token", 1_430),
                ("resume accepted", 4_256),
                ("side effect applied", 248),
                ("tool call given up (the client was told)", 175),
            ]
        );
        let fenced = on(workers, Policy::Fenced, eager, to(7));
        let by_depth: Vec<u64> = fenced.levels.iter().map(|l| l.distinct).collect();
        assert_eq!(
            by_depth,
            [7, 26, 78, 212, 515, 1109, 2182],
            "{workers} workers"
        );
        assert_eq!(fenced.transitions, 9_754);
        // Naive forks at the second step, in the same two steps, after the same work.
        for (bounds, distinct, transitions) in [(interleaved, 32, 66), (eager, 33, 64)] {
            let naive = on(workers, Policy::Naive, bounds, to(7));
            let c = naive.counterexample.expect("naive forks");
            assert_eq!(c.anomaly.kind(), AnomalyKind::Fork);
            assert_eq!(
                c.steps,
                [Step::Probe(ProbeGet::CursorOnly), Step::EmitBackground]
            );
            assert_eq!((naive.distinct, naive.transitions), (distinct, transitions));
        }
    }
}

/// Deeper, one thread and two agree on everything, limits included.
#[test]
fn threads_change_nothing_but_the_time() {
    let capped = Limits {
        max_states: Some(20_000),
        ..to(10)
    };
    let one = on(1, Policy::Fenced, bounds(), capped);
    let two = on(2, Policy::Fenced, bounds(), capped);
    assert_eq!(one.levels, two.levels);
    assert_eq!(one.stopped, two.stopped);
    assert_eq!(one.reached, two.reached);
    assert_eq!((one.distinct, one.pruned), (two.distinct, two.pruned));
    assert_eq!(one.distinct, 20_000);
}

/// A time budget stops the search at the first round past it, as the other limits do: the
/// depths before are whole and the same as an unlimited search's, and the verdict says what
/// stopped it. The clock is the caller's (here one that moves a second each time it is read).
#[test]
fn a_time_budget_stops_the_search_where_the_clock_says() {
    let budget = Limits {
        time_budget_secs: Some(5),
        ..to(30)
    };
    let mut ticks = 0u64;
    let mut clock = || {
        ticks += 1;
        Duration::from_secs(ticks)
    };
    let mut told = Vec::new();
    let found = explore_on(
        NonZeroUsize::MIN,
        config(),
        Policy::Fenced,
        bounds(),
        budget,
        &mut clock,
        &mut |p| told.push(*p),
    )
    .unwrap();
    let stopped = found.stopped.expect("five ticks are short of depth 30");
    assert_eq!(stopped.limit, Limit::TimeBudget { secs: 5 });
    assert_eq!(stopped.at_depth, found.proven_depth + 1);
    // The clock is read once a round; one round a level while the levels are small.
    assert_eq!(ticks, 5);
    assert_eq!(found.proven_depth, 4);
    let whole = explore(config(), Policy::Fenced, bounds(), to(4)).unwrap();
    assert_eq!(&whole.levels[..], &found.levels[..4]);
    assert!(
        found
            .verdict()
            .ends_with("(time budget of 5 s reached at depth 5)"),
        "{}",
        found.verdict()
    );
    // Progress is told after every round, with what the search held.
    assert_eq!(told.len(), 4);
    assert_eq!(told.last().map(|p| p.distinct), Some(whole.distinct));
}
