//! Table tests of the probe's rules on hand-written observations.

use super::judge::*;
use super::observed::*;
use super::verdict::{Finding, Verdict};

fn call() -> StreamOf {
    StreamOf::Call {
        token: "t1".into(),
        request: "7".into(),
        steps: Some(4),
    }
}

fn p(n: u64, order: u64) -> Received {
    Received {
        item: Item::Progress {
            token: "t1".into(),
            n,
        },
        event_id: Some(format!("e{n}")),
        order,
    }
}

fn result(order: u64) -> Received {
    Received {
        item: Item::Response {
            request: "7".into(),
        },
        event_id: None,
        order,
    }
}

fn conn(label: &str, opened: u64, events: Vec<Received>, end: End) -> Connection {
    Connection {
        label: label.into(),
        request: "GET".into(),
        answer: Answer::Stream {
            status: 200,
            opened,
        },
        events,
        end,
    }
}

fn verdict_of(old: &Connection, new: &Connection) -> (Verdict, bool) {
    let mine = call();
    let known = Known {
        mine: &mine,
        same_session: &[],
        other_sessions: &[],
    };
    let f = judge_resume(&known, &[old, new], false, true);
    (f.verdict.clone(), f.held())
}

#[test]
fn a_gap_free_resume_is_a_clean_continuation() {
    let old = conn("A", 0, vec![p(1, 1), p(2, 2)], End::DroppedByProbe);
    let new = conn(
        "B",
        3,
        vec![p(3, 4), p(4, 5), result(6)],
        End::ClosedByServer,
    );
    assert_eq!(verdict_of(&old, &new), (Verdict::CleanContinuation, true));
}

#[test]
fn each_break_of_the_invariant_has_its_name() {
    let old = conn("A", 0, vec![p(1, 1), p(2, 2)], End::DroppedByProbe);
    let replayed_cursor = conn(
        "B",
        3,
        vec![p(2, 4), p(3, 5), p(4, 6), result(7)],
        End::ClosedByServer,
    );
    assert_eq!(verdict_of(&old, &replayed_cursor).0.word(), "duplicate");
    let skipped = conn("B", 3, vec![p(4, 5), result(6)], End::ClosedByServer);
    assert_eq!(
        verdict_of(&old, &skipped).0,
        Verdict::Gap {
            missing: "p3".into()
        }
    );
    let unfinished = conn("B", 3, vec![p(3, 5)], End::Open);
    assert_eq!(
        verdict_of(&old, &unfinished).0,
        Verdict::Gap {
            missing: "p4 and the result".into()
        }
    );
    let still_live = conn("A", 0, vec![p(1, 1), p(2, 2), p(3, 5)], End::Open);
    let new = conn(
        "B",
        3,
        vec![p(3, 4), p(4, 6), result(7)],
        End::ClosedByServer,
    );
    assert_eq!(
        verdict_of(&still_live, &new).0,
        Verdict::TwoLiveStreams { old: 1, new: 3 }
    );
    let mut refused = conn("B", 3, vec![], End::ClosedByServer);
    refused.answer = Answer::Rejected {
        status: 409,
        reason: None,
    };
    assert_eq!(
        verdict_of(&old, &refused),
        (
            Verdict::TypedRejection {
                status: 409,
                reinitializes: false
            },
            false
        )
    );
}

#[test]
fn a_bad_cursor_must_be_refused_not_answered_with_silence() {
    let mine = StreamOf::Channel {
        channel: "tick".into(),
        last: None,
    };
    let theirs = [StreamOf::Call {
        token: "other".into(),
        request: "1".into(),
        steps: None,
    }];
    let known = Known {
        mine: &mine,
        same_session: &[],
        other_sessions: &theirs,
    };
    let silent = conn("B", 0, vec![], End::Open);
    assert_eq!(
        judge_foreign_cursor(&known, &silent).verdict,
        Verdict::SilentEmptyStream { live: 0 }
    );
    let leaked = conn(
        "B",
        0,
        vec![Received {
            item: Item::Progress {
                token: "other".into(),
                n: 1,
            },
            event_id: None,
            order: 1,
        }],
        End::Open,
    );
    let f = judge_foreign_cursor(&known, &leaked);
    assert_eq!(
        (f.verdict.word(), f.held()),
        ("cross_session_replay", false)
    );
    let mut refused = conn("B", 0, vec![], End::Open);
    refused.answer = Answer::Rejected {
        status: 404,
        reason: None,
    };
    let f = judge_foreign_cursor(&known, &refused);
    assert!(f.held());
    assert_eq!(
        f.verdict,
        Verdict::TypedRejection {
            status: 404,
            reinitializes: true
        }
    );
}

#[test]
fn one_event_on_two_connections_is_a_broadcast() {
    let mine = StreamOf::Channel {
        channel: "tick".into(),
        last: None,
    };
    let known = Known {
        mine: &mine,
        same_session: &[],
        other_sessions: &[],
    };
    let tick = |n, order| Received {
        item: Item::Numbered {
            channel: "tick".into(),
            n,
        },
        event_id: None,
        order,
    };
    let first = conn("A", 0, vec![tick(1, 1), tick(2, 3)], End::Open);
    let second = conn("B", 2, vec![tick(2, 4)], End::Open);
    assert_eq!(
        judge_second_get(&known, &first, &second).verdict.word(),
        "duplicate"
    );
    let handed_over = conn("A", 0, vec![tick(1, 1)], End::ClosedByServer);
    let f = judge_second_get(&known, &handed_over, &second);
    assert!(f.held(), "{f:?}");
}

#[test]
fn session_basics_follow_the_transport() {
    let answer = |status| Answer::Rejected {
        status,
        reason: None,
    };
    assert!(judge_unknown_session(&answer(404)).held());
    assert!(!judge_unknown_session(&answer(400)).held());
    assert!(judge_unsupported_version(&answer(400)).held());
    assert!(judge_foreign_origin(&answer(403)).held());
    assert!(
        !judge_foreign_origin(&Answer::Stream {
            status: 200,
            opened: 0
        })
        .held()
    );
}

#[test]
fn a_late_event_is_out_of_order_not_a_gap() {
    let old = conn("A", 0, vec![p(1, 1)], End::DroppedByProbe);
    let swapped = conn(
        "B",
        2,
        vec![p(3, 3), p(2, 4), p(4, 5), result(6)],
        End::ClosedByServer,
    );
    assert_eq!(
        verdict_of(&old, &swapped).0,
        Verdict::OutOfOrder {
            item: "p2".into(),
            after: "p3".into()
        }
    );
    let early_result = conn(
        "B",
        2,
        vec![p(2, 3), p(3, 4), result(5), p(4, 6)],
        End::ClosedByServer,
    );
    assert_eq!(
        verdict_of(&old, &early_result).0,
        Verdict::OutOfOrder {
            item: "p4".into(),
            after: "result".into()
        }
    );
}

#[test]
fn only_a_stream_counting_by_one_has_gaps_and_only_a_finished_one_has_a_missing_tail() {
    let by_ten = |n: u64, order| p(n * 10, order);
    let old = conn(
        "A",
        0,
        vec![by_ten(1, 1), by_ten(2, 2), by_ten(3, 3)],
        End::DroppedByProbe,
    );
    let new = conn("B", 4, vec![by_ten(4, 5), result(6)], End::ClosedByServer);
    let mine = StreamOf::Call {
        token: "t1".into(),
        request: "7".into(),
        steps: None,
    };
    let known = Known {
        mine: &mine,
        same_session: &[],
        other_sessions: &[],
    };
    assert!(judge_resume(&known, &[&old, &new], false, true).held());
    // Still open when the window ended: late, not lost.
    let old = conn("A", 0, vec![p(1, 1), p(2, 2)], End::DroppedByProbe);
    let running = conn("B", 3, vec![p(3, 4)], End::Open);
    let f = judge_resume(&known, &[&old, &running], false, false);
    assert!(f.held(), "{f:?}");
}

/// Every way a case can see too little to judge, and the reason it gives: never `holds`.
#[test]
fn a_case_that_saw_too_little_is_not_exercised_with_its_reason() {
    use super::verdict::{Judged, Unexercised};
    let tick = |n, order| Received {
        item: Item::Numbered {
            channel: "tick".into(),
            n,
        },
        event_id: Some(format!("t{n}")),
        order,
    };
    let call_of_unknown_length = StreamOf::Call {
        token: "t1".into(),
        request: "7".into(),
        steps: None,
    };
    let quiet_source = StreamOf::Channel {
        channel: "tick".into(),
        last: None,
    };
    let counted_source = StreamOf::Channel {
        channel: "tick".into(),
        last: Some(30),
    };
    fn known(mine: &StreamOf) -> Known<'_> {
        Known {
            mine,
            same_session: &[],
            other_sessions: &[],
        }
    }
    fn resume(mine: &StreamOf, old: Connection, new: Connection) -> super::verdict::Finding {
        judge_resume(&known(mine), &[&old, &new], false, true)
    }
    let four_steps = call();
    let whole_call = || vec![p(1, 1), p(2, 2), p(3, 3), p(4, 4), result(5)];
    let table: Vec<(&str, super::verdict::Finding, Unexercised)> = vec![
        (
            "nothing on either connection",
            resume(
                &four_steps,
                conn("A", 0, vec![], End::DroppedByProbe),
                conn("B", 1, vec![], End::Open),
            ),
            Unexercised::NoEventAtAll,
        ),
        (
            "no standalone event at all",
            resume(
                &counted_source,
                conn("A", 0, vec![], End::DroppedByProbe),
                conn("B", 1, vec![], End::Open),
            ),
            Unexercised::NoEventAtAll,
        ),
        (
            "the call finished before the break, nothing after it",
            resume(
                &four_steps,
                conn("A", 0, whole_call(), End::DroppedByProbe),
                conn("B", 6, vec![], End::ClosedByServer),
            ),
            Unexercised::EndedBeforeBreak { before: 5 },
        ),
        (
            "the call finished before the break, its stream unresumable",
            judge_unresumable_call(
                &four_steps,
                &conn("A", 0, whole_call(), End::DroppedByProbe),
            ),
            Unexercised::EndedBeforeBreak { before: 5 },
        ),
        (
            "a source with no known end went quiet after the break",
            resume(
                &quiet_source,
                conn("A", 0, vec![tick(1, 1), tick(2, 2)], End::DroppedByProbe),
                conn("B", 3, vec![], End::Open),
            ),
            Unexercised::SourceWentQuiet,
        ),
        (
            "the break came before the first event",
            resume(
                &quiet_source,
                conn("A", 0, vec![], End::DroppedByProbe),
                conn("B", 1, vec![tick(1, 2), tick(2, 3)], End::Open),
            ),
            Unexercised::NothingBeforeBreak,
        ),
        (
            "only the result after the break, the call's length unknown",
            resume(
                &call_of_unknown_length,
                conn("A", 0, vec![p(1, 1), p(2, 2)], End::DroppedByProbe),
                conn("B", 3, vec![result(4)], End::ClosedByServer),
            ),
            Unexercised::OnlyTheEndAfterBreak,
        ),
        (
            "a second GET, and no event on either connection since",
            judge_second_get(
                &known(&quiet_source),
                &conn("A", 0, vec![tick(1, 1)], End::Open),
                &conn("B", 2, vec![], End::Open),
            ),
            Unexercised::NothingWhileBothOpen,
        ),
        (
            "a burst that carried nothing of the call",
            judge_burst(
                &known(&call_of_unknown_length),
                &conn("A", 0, vec![], End::Open),
                false,
            ),
            Unexercised::NoEventAtAll,
        ),
        (
            "a burst of one event",
            judge_burst(
                &known(&call_of_unknown_length),
                &conn("A", 0, vec![p(1, 1)], End::Open),
                false,
            ),
            Unexercised::TooFew { seen: 1 },
        ),
    ];
    for (what, finding, because) in table {
        assert_eq!(finding.judged, Judged::NotExercised, "{what}: {finding:?}");
        assert_eq!(
            finding.verdict,
            Verdict::NotExercised { because },
            "{what}: {finding:?}"
        );
        assert_eq!(finding.verdict.word(), "not_exercised");
        assert!(
            finding.verdict.describe().starts_with("not exercised: "),
            "{what}"
        );
        assert!(!finding.why.is_empty(), "{what}");
    }
    // What a vacuous case would have hidden is still found when it happened: a replay of the
    // finished call is a duplicate, not `not exercised`.
    let replayed = resume(
        &four_steps,
        conn("A", 0, whole_call(), End::DroppedByProbe),
        conn("B", 6, vec![result(7)], End::ClosedByServer),
    );
    assert_eq!(replayed.verdict.word(), "duplicate");
}

#[test]
fn a_huge_cursor_refused_with_any_huge_header_is_the_http_layers_limit() {
    let refused = |status| Answer::Rejected {
        status,
        reason: None,
    };
    let finding = || {
        Finding::holds(
            Verdict::TypedRejection {
                status: 431,
                reinitializes: false,
            },
            "a cursor the server cannot honour is refused",
        )
    };
    let layer = judge_huge_cursor(finding(), &refused(431));
    assert!(
        layer.held() && layer.why.contains("HTTP layer's header limit"),
        "{layer:?}"
    );
    let server = judge_huge_cursor(
        finding(),
        &Answer::Stream {
            status: 200,
            opened: 3,
        },
    );
    assert!(
        server.why.contains("by the server itself") && server.why.contains("200"),
        "{server:?}"
    );
}
