use super::*;
use crate::lab::Snapshot;
use crate::tui::weight::weight;
use forkscope_core::sim::Sim;
use forkscope_core::{AnomalyKind, LabConfig, LabTime, Policy};

/// Plays the seed incident under naive in the core's own simulation, capturing a moment
/// after every step, as the dashboard does after every change.
fn recorded() -> (Sim, Timeline) {
    let mut sim = Sim::new(LabConfig::default(), Policy::Naive, 7).unwrap();
    let mut timeline = Timeline::new(1);
    let capture = |sim: &Sim, timeline: &mut Timeline| {
        timeline.tracks[0].sync(sim.history());
        timeline.capture(&[Snapshot::from_sim(sim, Vec::new())]);
    };
    sim.start();
    capture(&sim, &mut timeline);
    for _ in 0..3 {
        sim.emit_background();
        sim.deliver_all();
        sim.advance(100);
        capture(&sim, &mut timeline);
    }
    sim.drop_connection();
    capture(&sim, &mut timeline);
    sim.strip_token();
    sim.reconnect(true);
    sim.deliver_all();
    capture(&sim, &mut timeline);
    sim.advance(100);
    sim.emit_background();
    sim.deliver_all();
    capture(&sim, &mut timeline);
    (sim, timeline)
}

#[test]
fn the_track_keeps_every_entry_and_each_moment_its_share() {
    let (sim, timeline) = recorded();
    let track = &timeline.tracks[0];
    assert_eq!(track.ends().0 as u64, sim.history().total());
    assert_eq!(track.missed, 0);
    let counts: Vec<usize> = (0..timeline.len())
        .map(|i| timeline.moment(i).unwrap().panels[0].entries)
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert!(
        timeline
            .moment(0)
            .unwrap()
            .panels
            .iter()
            .all(|f| f.snapshot.recent.is_empty()),
        "a moment does not copy the ring"
    );
}

#[test]
fn jumps_land_on_the_first_violation_and_on_decisions() {
    let (_, timeline) = recorded();
    let last = timeline.len() - 1;
    let first = timeline.jump(last, Jump::FirstViolation);
    assert!(timeline.moment(first).unwrap().violation);
    assert!(
        (0..first).all(|i| !timeline.moment(i).unwrap().violation),
        "it is the first"
    );
    let previous = timeline.jump(last, Jump::PreviousDecision);
    assert!(previous < last && timeline.moment(previous).unwrap().decision);
    let next = timeline.jump(0, Jump::NextDecision);
    assert!(next > 0 && timeline.moment(next).unwrap().decision);
    assert_eq!(timeline.jump(0, Jump::Back(5)), 0);
    assert_eq!(timeline.jump(0, Jump::Forward(500)), last);
}

/// A budget a few hundred moments fill: thinning and forgetting within seconds of test.
const SMALL: usize = 512 << 10;

fn capture(sim: &Sim, timeline: &mut Timeline) {
    timeline.tracks[0].sync(sim.history());
    timeline.capture(&[Snapshot::from_sim(sim, Vec::new())]);
}

/// The moments' lab times and entry counts never go backwards, and each moment's marks are
/// those of its entries.
fn assert_ordered(timeline: &Timeline) {
    let track = &timeline.tracks[0];
    let mut previous = (LabTime::ZERO, 0);
    for i in 0..timeline.len() {
        let moment = timeline.moment(i).unwrap();
        let now = (moment.at(), moment.panels[0].entries);
        assert!(now >= previous, "moment {i}: {now:?} after {previous:?}");
        previous = now;
        let (marks, _) = track.placed_until(moment.panels[0].placed);
        assert!(
            marks.iter().all(|m| m.entry < moment.panels[0].entries),
            "moment {i}'s lanes end at its entries"
        );
        let (entries, entry_base) = track.entries_until(moment.panels[0].entries);
        assert!(marks.first().is_none_or(|m| m.entry >= entry_base));
        assert_eq!(
            entry_base + entries.len(),
            moment.panels[0].entries.max(entry_base)
        );
    }
}

#[test]
fn a_long_run_stays_within_its_budget_and_reachable_from_its_start() {
    let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 3).unwrap();
    sim.start();
    let mut timeline = Timeline::with_budget(1, SMALL);
    let mut most = 0;
    for _ in 0..20_000 {
        sim.emit_background();
        sim.deliver_all();
        sim.advance(10);
        capture(&sim, &mut timeline);
        assert!(
            timeline.weight() <= SMALL,
            "{} bytes kept of {SMALL}",
            timeline.weight()
        );
        most = most.max(timeline.len());
    }
    assert!(most < 20_000, "moments were thinned");
    let first = timeline.moment(0).unwrap().at();
    assert!(
        first.as_millis() <= 10,
        "the start of the run is still there"
    );
    assert_eq!(timeline.jump(timeline.len() - 1, Jump::Start), 0);
    assert_ordered(&timeline);
    let reach = timeline.reach().unwrap();
    assert_eq!(reach.oldest_ms, first.as_millis());
    assert!(!reach.forgotten, "ordinary moments thin, none is let go");
    let since = reach.every_change_since_ms.expect("the run was thinned");
    // Every change after the thinned part is there: one moment per 10 ms step.
    let last = timeline
        .moment(timeline.len() - 1)
        .unwrap()
        .at()
        .as_millis();
    let after = (0..timeline.len())
        .filter(|i| timeline.moment(*i).unwrap().at().as_millis() > since)
        .count() as u64;
    assert_eq!(after, (last - since) / 10, "every change since {since} ms");
    // The track outgrew its share too: its oldest entries went, the lanes say from when.
    let track = &timeline.tracks[0];
    assert_eq!(
        track.ends().0 as u64,
        sim.history().total(),
        "counts stay absolute"
    );
    assert!(track.entry(0).is_none() && track.entry(track.ends().0 - 1).is_some());
    assert!(reach.lanes_since_ms.is_some());
    assert!(track.weight() <= SMALL / 2, "{}", track.weight());
}

#[test]
fn thinning_keeps_every_decision_and_the_first_violation() {
    // The seed fork early, then a long quiet run with a drop and a resume now and then.
    let (mut sim, _) = recorded();
    let mut timeline = Timeline::with_budget(1, SMALL);
    let mut decisions = Vec::new();
    let mut first_violation = None;
    for step in 0..6_000 {
        if step % 200 == 100 {
            sim.drop_connection();
        } else if step % 200 == 110 {
            sim.reconnect(true);
        } else {
            sim.emit_background();
        }
        sim.deliver_all();
        sim.advance(10);
        capture(&sim, &mut timeline);
        let newest = timeline.moment(timeline.len() - 1).unwrap();
        if newest.decision {
            decisions.push(newest.panels[0].entries);
        }
        if newest.violation && first_violation.is_none() {
            first_violation = Some(newest.panels[0].entries);
        }
    }
    assert!(decisions.len() > 20, "{decisions:?}");
    assert!(timeline.reach().unwrap().every_change_since_ms.is_some());
    let kept: Vec<usize> = (0..timeline.len())
        .map(|i| timeline.moment(i).unwrap())
        .filter(|m| m.decision)
        .map(|m| m.panels[0].entries)
        .collect();
    assert_eq!(kept, decisions, "every decision survives, in order");
    let v = timeline.jump(timeline.len() - 1, Jump::FirstViolation);
    assert_eq!(
        Some(timeline.moment(v).unwrap().panels[0].entries),
        first_violation
    );
    assert_ordered(&timeline);
    // `]` from the start visits the decisions in order.
    let mut at = 0;
    let mut visited = Vec::new();
    loop {
        let next = timeline.jump(at, Jump::NextDecision);
        if next == at {
            break;
        }
        visited.push(timeline.moment(next).unwrap().panels[0].entries);
        at = next;
    }
    let skipped_first = usize::from(timeline.moment(0).unwrap().decision);
    assert_eq!(visited, decisions[skipped_first..]);
}

#[test]
fn when_decisions_alone_outgrow_the_budget_the_oldest_go() {
    let (mut sim, _) = recorded();
    let mut timeline = Timeline::with_budget(1, SMALL);
    for _ in 0..4_000 {
        // Every step a decision: a drop, then a resume.
        sim.drop_connection();
        sim.reconnect(true);
        sim.deliver_all();
        sim.advance(10);
        capture(&sim, &mut timeline);
        assert!(timeline.weight() <= SMALL);
    }
    let reach = timeline.reach().unwrap();
    assert!(reach.forgotten, "older moments were let go");
    assert_ordered(&timeline);
    // The first violation stays, oldest of all: Home and v both go to it.
    let first = timeline.moment(0).unwrap();
    assert!(first.violation);
    assert_eq!(timeline.jump(timeline.len() - 1, Jump::FirstViolation), 0);
    assert_eq!(reach.oldest_ms, first.at().as_millis());
    // The present is always kept.
    let last = timeline.moment(timeline.len() - 1).unwrap();
    assert_eq!(last.panels[0].entries, timeline.tracks[0].ends().0);
}

#[test]
fn moments_share_an_unchanged_list_of_exchanges_and_count_it_once() {
    let exchange = |i: u64| Exchange {
        at: LabTime::from_millis(i),
        method: "GET",
        what: format!("standalone stream {i}"),
        status: 200,
        headers: vec![("← mcp-session-id".to_owned(), format!("{i:032x}"))],
    };
    let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 3).unwrap();
    sim.start();
    let mut timeline = Timeline::with_budget(1, SMALL);
    let mut listed: Vec<Exchange> = (0..64).map(exchange).collect();
    for step in 0..3_000 {
        if step % 500 == 0 {
            // A request: the list moves on by one.
            listed.remove(0);
            listed.push(exchange(64 + step));
        }
        sim.emit_background();
        sim.deliver_all();
        sim.advance(10);
        timeline.tracks[0].sync(sim.history());
        timeline.capture(&[Snapshot::from_sim(&sim, listed.clone())]);
        let counted = timeline.moments_heap;
        timeline.recount();
        assert_eq!(counted, timeline.moments_heap, "step {step}");
    }
    let last = timeline.len() - 1;
    let (newest, before) = (
        timeline.moment(last).unwrap(),
        timeline.moment(last - 1).unwrap(),
    );
    assert!(Arc::ptr_eq(
        &newest.panels[0].exchanges,
        &before.panels[0].exchanges
    ));
    assert_eq!(
        newest.panels[0].shown().exchanges,
        listed,
        "shown as listed"
    );
    assert!(
        newest.panels[0].snapshot.exchanges.is_empty(),
        "kept once, shared"
    );
    // Shared, the kept moments weigh a fraction of one list each.
    let one_list = weight(&listed);
    assert!(
        timeline.moments_heap * 4 < timeline.len() * one_list,
        "{} moments of a {one_list}-byte list weigh {}",
        timeline.len(),
        timeline.moments_heap
    );
}

/// The dashboard takes a lab's snapshot, then syncs the track while the lab goes on: entries
/// the history took after the snapshot wait for the next moment, so the moment whose verdict
/// first counts the fork is the one that placed its mark (`v` selects it there).
#[test]
fn a_moments_marks_go_as_far_as_its_snapshot_saw() {
    let mut sim = Sim::new(LabConfig::default(), Policy::Naive, 7).unwrap();
    let mut timeline = Timeline::new(1);
    sim.start();
    for _ in 0..3 {
        sim.emit_background();
        sim.deliver_all();
        sim.advance(100);
    }
    sim.drop_connection();
    sim.strip_token();
    sim.reconnect(true);
    sim.deliver_all();
    sim.advance(100);
    let before = Snapshot::from_sim(&sim, Vec::new());
    assert_eq!(before.view.verdict.count(AnomalyKind::Fork), 0);
    // The fork lands between the snapshot and the sync.
    sim.emit_background();
    sim.deliver_all();
    assert_eq!(sim.history().verdict().count(AnomalyKind::Fork), 1);
    timeline.tracks[0].sync_to(sim.history(), before.entries);
    timeline.capture(&[before]);
    timeline.tracks[0].sync_to(sim.history(), sim.history().total());
    timeline.capture(&[Snapshot::from_sim(&sim, Vec::new())]);
    let track = &timeline.tracks[0];
    let forks_until = |moment: usize| {
        let (marks, _) = track.placed_until(timeline.moment(moment).unwrap().panels[0].placed);
        marks
            .iter()
            .filter(|p| p.mark.stands_for(AnomalyKind::Fork))
            .count()
    };
    assert_eq!(forks_until(0), 0, "not before its verdict counts it");
    assert_eq!(forks_until(1), 1);
}
