//! The completeness rules (`owed.rs`) fed record by record: each way an obligation settles.

use crate::history::anomaly::{Anomaly, AnomalyKind, Owed, Refusals, Told};
use crate::history::{Caused, Checker, Entry, Record};
use crate::ids::{ConnectionId, EventId, IdScheme, SessionId, SplitMix64, StreamId};
use crate::time::LabTime;
use crate::vocabulary::Effect;
use crate::vocabulary::{PayloadKey, RejectReason, StreamKind};
use std::sync::Arc;

/// A checker fed records by hand: one session, its standalone stream s1 bound.
struct Feed {
    checker: Checker,
    session: SessionId,
    at: u64,
}

const S1: StreamId = StreamId(1);
const CALL: StreamId = StreamId(2);

impl Feed {
    fn new() -> Feed {
        let session = SessionId::generate(&mut SplitMix64::new(3));
        let mut f = Feed {
            checker: Checker::default(),
            session,
            at: 0,
        };
        f.open(S1, StreamKind::Standalone);
        f.see(Record::Attached {
            session,
            stream: S1,
            connection: ConnectionId(1),
        });
        // The priming event: the client's cursor, so it reports what it receives.
        f.see(Record::CursorMoved {
            session,
            from: None,
            to: EventId { stream: S1, seq: 0 },
            reset: false,
        });
        f
    }

    fn see(&mut self, record: Record) -> Vec<Anomaly> {
        self.at += 100;
        let caused = self.checker.observe(&Entry {
            at: LabTime::from_millis(self.at),
            by: None,
            record,
            caused: Caused::NOTHING,
        });
        caused.anomalies().to_vec()
    }

    fn open(&mut self, stream: StreamId, stream_kind: StreamKind) {
        let session = self.session;
        self.see(Record::StreamOpened {
            session,
            stream,
            stream_kind,
            ids: IdScheme::Scoped,
            flagged_new: false,
            // A call's stream answers the request numbered as the stream, in these feeds.
            request: (stream_kind == StreamKind::Request).then_some(u64::from(stream.0)),
        });
    }

    fn key(&self, effect: Effect) -> Arc<str> {
        PayloadKey::new(self.session, effect).to_shared()
    }

    fn emit(&mut self, stream: StreamId, seq: u64, key: Arc<str>) -> Vec<Anomaly> {
        let session = self.session;
        self.see(Record::Emitted {
            session,
            stream,
            seq,
            key,
            copied: false,
        })
    }

    fn deliver(&mut self, stream: StreamId, seq: u64, key: Arc<str>) {
        let session = self.session;
        self.see(Record::Delivered {
            session,
            event: EventId { stream, seq },
            key,
            applied: true,
        });
    }

    /// Background event `n` as s1#n, delivered or not.
    fn background(&mut self, n: u64, delivered: bool) {
        let key = self.key(Effect::Background { n });
        self.emit(S1, n, key.clone());
        if delivered {
            self.deliver(S1, n, key);
        }
    }

    fn kinds(&self) -> Vec<AnomalyKind> {
        self.checker.anomalies().iter().map(Anomaly::kind).collect()
    }
}

#[test]
fn what_the_client_gave_up_on_is_undelivered_and_says_how_it_was_told() {
    let mut f = Feed::new();
    f.background(1, true);
    f.background(2, false);
    f.background(3, false);
    let session = f.session;
    for _ in 0..3 {
        f.see(Record::AnsweredWithStatus {
            session,
            status: 409,
        });
    }
    let settled = f.see(Record::ClientGaveUp);
    let told = Told::GaveUp {
        refusals: Some(Refusals {
            status: 409,
            reason: None,
            times: 3,
        }),
    };
    let owed: Vec<_> = settled
        .iter()
        .map(|a| match a {
            Anomaly::Undelivered { owed, told, .. } => (*owed, *told),
            other => panic!("{other}"),
        })
        .collect();
    let event = |seq| Owed::Event {
        event: EventId { stream: S1, seq },
    };
    assert_eq!(owed, [(event(2), told), (event(3), told)]);
    // Emitted after the client left knowingly: not owed at all.
    f.background(4, false);
    f.see(Record::RunEnded {
        reconnecting: false,
    });
    let verdict = f.checker.verdict();
    assert_eq!(
        verdict.summary(),
        "undelivered ×2 (told: gave up after 409 ×3)"
    );
    assert!(!verdict.clean, "told is not delivered");
    assert_eq!(f.checker.counters().owed, 3);
    assert_eq!(f.checker.counters().owed_delivered, 1);
}

/// The one rule that keeps the verdict honest: an obligation settled as told is never
/// counted as delivered, and never reads as clean.
#[test]
fn a_told_obligation_is_never_counted_as_delivered() {
    let mut f = Feed::new();
    f.background(1, false);
    let session = f.session;
    f.see(Record::ResumeRejected {
        session,
        reason: RejectReason::CursorEvicted,
    });
    f.see(Record::ClientNewSession);
    assert_eq!(f.kinds(), [AnomalyKind::Undelivered]);
    assert_eq!(f.checker.counters().owed_delivered, 0);
    assert_eq!(f.checker.open_obligations(), 0);
    let verdict = f.checker.verdict();
    assert!(!verdict.clean);
    assert_eq!(
        verdict.told,
        Some(Told::Refused {
            status: 410,
            reason: Some(RejectReason::CursorEvicted)
        })
    );
}

#[test]
fn at_the_end_of_a_run_what_is_still_owed_is_lost_unless_the_client_is_reconnecting() {
    for reconnecting in [false, true] {
        let mut f = Feed::new();
        f.background(1, true);
        f.background(2, false);
        assert_eq!(f.checker.open_obligations(), 1);
        assert!(f.checker.verdict().clean, "owed, not yet lost");
        f.see(Record::RunEnded { reconnecting });
        let want = if reconnecting {
            AnomalyKind::Undelivered
        } else {
            AnomalyKind::Lost
        };
        assert_eq!(f.kinds(), [want]);
        assert_eq!(f.checker.open_obligations(), 0);
    }
}

#[test]
fn a_call_whose_result_never_comes_is_a_call_lost_naming_its_steps() {
    let mut f = Feed::new();
    f.open(CALL, StreamKind::Request);
    for step in 1..=3 {
        let key = f.key(Effect::Progress { call: CALL, step });
        f.emit(CALL, step, key.clone());
        f.deliver(CALL, step, key);
    }
    assert_eq!(f.checker.open_obligations(), 1, "its result");
    let settled = f.see(Record::RunEnded {
        reconnecting: false,
    });
    assert!(
        matches!(
            settled.as_slice(),
            [Anomaly::CallLost {
                call: CALL,
                steps: 3,
                ..
            }]
        ),
        "{settled:?}"
    );
    assert!(
        settled[0]
            .to_string()
            .contains("3 progress steps delivered")
    );
}

#[test]
fn a_call_whose_result_arrived_owes_nothing() {
    let mut f = Feed::new();
    f.open(CALL, StreamKind::Request);
    let key = f.key(Effect::Result { call: CALL });
    f.emit(CALL, 1, key.clone());
    f.deliver(CALL, 1, key);
    f.see(Record::RunEnded {
        reconnecting: false,
    });
    assert!(f.checker.verdict().clean, "{:?}", f.kinds());
    assert_eq!(
        (
            f.checker.counters().owed,
            f.checker.counters().owed_delivered
        ),
        (2, 2),
        "the call and its result event"
    );
}

#[test]
fn an_id_written_again_with_other_content_is_reused_and_names_both_writes() {
    let mut f = Feed::new();
    for n in 1..=3 {
        f.background(n, true);
    }
    // Sent again as it was (a replica's replay): not a reuse.
    let same = f.key(Effect::Background { n: 2 });
    assert!(f.emit(S1, 2, same).is_empty());
    // A store rolled back hands s1#2 out again, to other content.
    let other = f.key(Effect::Background { n: 7 });
    let found = f.emit(S1, 2, other.clone());
    let [
        Anomaly::ReusedId {
            event,
            first,
            second,
            ..
        },
    ] = found.as_slice()
    else {
        panic!("{found:?}");
    };
    assert_eq!(*event, EventId { stream: S1, seq: 2 });
    assert_eq!(*first, f.key(Effect::Background { n: 2 }));
    assert_eq!(*second, other);
}

#[test]
fn a_call_that_ends_with_an_error_is_undelivered_told_never_delivered() {
    let mut f = Feed::new();
    f.open(CALL, StreamKind::Request);
    let step = f.key(Effect::Progress {
        call: CALL,
        step: 1,
    });
    f.emit(CALL, 1, step.clone());
    f.deliver(CALL, 1, step);
    let stopped = f.key(Effect::Stopped { call: CALL });
    f.emit(CALL, 2, stopped.clone());
    f.deliver(CALL, 2, stopped);
    f.see(Record::RunEnded {
        reconnecting: false,
    });
    assert!(!f.checker.verdict().clean);
    assert_eq!(f.kinds(), [AnomalyKind::Undelivered]);
    assert!(matches!(
        f.checker.anomalies()[0],
        Anomaly::Undelivered {
            owed: Owed::CallResult { call: CALL },
            told: Told::CallEnded,
            ..
        }
    ));
    // Both events arrived; the result did not.
    let counters = f.checker.counters();
    assert_eq!((counters.owed, counters.owed_delivered), (3, 2));
}

#[test]
fn an_id_the_store_holds_twice_is_reused_though_no_one_received_the_second() {
    let mut f = Feed::new();
    f.background(1, true);
    let session = f.session;
    let other = f.key(Effect::Background { n: 5 });
    let found = f.see(Record::Written {
        session,
        stream: S1,
        seq: 1,
        key: other,
    });
    assert!(
        matches!(found.as_slice(), [Anomaly::ReusedId { .. }]),
        "{found:?}"
    );
    // Written as it was: not a reuse.
    let same = f.key(Effect::Background { n: 1 });
    let again = f.see(Record::Written {
        session,
        stream: S1,
        seq: 1,
        key: same,
    });
    assert!(again.is_empty());
}

#[test]
fn a_call_given_up_before_its_stream_opened_is_told_when_it_opens() {
    let mut f = Feed::new();
    let session = f.session;
    // The POST broke on the client's side before any answer; it reached the server after.
    f.see(Record::CallAbandoned {
        session,
        call: None,
        request: u64::from(CALL.0),
        refused: None,
        broken: true,
    });
    f.open(CALL, StreamKind::Request);
    let step = f.key(Effect::Progress {
        call: CALL,
        step: 1,
    });
    f.emit(CALL, 1, step);
    f.see(Record::RunEnded {
        reconnecting: false,
    });
    assert_eq!(f.kinds(), [AnomalyKind::Undelivered], "told, never lost");
    assert!(matches!(
        f.checker.anomalies()[0],
        Anomaly::Undelivered {
            owed: Owed::CallResult { call: CALL },
            told: Told::CallEnded,
            ..
        }
    ));
}

#[test]
fn a_call_given_up_unheard_is_told_by_its_id_and_its_neighbours_stay_owed() {
    // Two calls are open, unheard, when the client gives up a third whose POST broke; that
    // POST's stream opens after. The one given up is the third, whatever opened first.
    let mut f = Feed::new();
    let session = f.session;
    let (first, second, third) = (StreamId(3), StreamId(4), StreamId(5));
    f.open(first, StreamKind::Request);
    f.open(second, StreamKind::Request);
    f.see(Record::CallAbandoned {
        session,
        call: None,
        request: u64::from(third.0),
        refused: None,
        broken: true,
    });
    f.open(third, StreamKind::Request);
    for call in [first, second, third] {
        let result = f.key(Effect::Result { call });
        f.emit(call, 1, result);
    }
    // The first call's result arrives; the second's never does; the third was given up.
    let result = f.key(Effect::Result { call: first });
    f.deliver(first, 1, result);
    f.see(Record::RunEnded {
        reconnecting: false,
    });
    let found = f.checker.anomalies();
    assert!(
        matches!(
            found,
            [
                Anomaly::Undelivered {
                    owed: Owed::CallResult { call },
                    told: Told::CallEnded,
                    ..
                },
                Anomaly::Lost { event, .. },
            ] if *call == third && event.stream == second
        ),
        "{found:?}"
    );
}
