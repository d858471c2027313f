//! Exactly once, or told: what the client was owed, and how each obligation settled.
//!
//! An obligation is each event emitted on a stream the client follows and the result of each
//! tool call it made (for a client that reports what it receives). It settles as delivered
//! (applied once; twice is a duplicate), or, once nothing can deliver it any more, as **lost**
//! when the client believes it is complete, or **undelivered** when the client was told — a
//! refusal, a retry budget spent, a session ended, a stream flagged new. Safety is judged as the
//! records arrive (`mod.rs`); this is completeness.

use super::{Checker, StreamKind, Track};
use crate::history::anomaly::{Anomaly, Owed, Told};
use crate::ids::{EventId, SessionId, StreamId};
use crate::time::LabTime;
use crate::vocabulary::RejectReason;
use std::sync::Arc;

/// What id `seq` of the stream carried when it was first written, while it is still kept
/// (owed, or among the latest delivered); unknown is not judged.
pub(super) fn first_write(track: &Track, seq: u64) -> Option<Arc<str>> {
    track
        .pending
        .get(&seq)
        .or_else(|| track.delivered.get(&seq))
        .cloned()
}

/// Whether a key ends a tool call's stream: its result, or why it stopped.
pub(super) fn ends_call(key: &str) -> bool {
    is_result(key) || key.ends_with(":stopped")
}

/// Whether a key is a tool call's result (not an error in its place).
pub(super) fn is_result(key: &str) -> bool {
    key.ends_with(":result")
}

impl Checker {
    /// The stream can deliver nothing more: every event it still owed the client whose side
    /// effect was not applied some other way (a replay, a naive copy) is lost — silently,
    /// unless the client was told (the session's loss, or the stream it is now bound to was
    /// flagged new: continuity broke). A tool call whose result was never emitted is owed its
    /// result.
    pub(super) fn settle_stream(&mut self, session: SessionId, stream: StreamId, at: LabTime) {
        let flagged_new = self
            .bound
            .get(&session)
            .filter(|b| **b != stream)
            .and_then(|b| self.track(session, *b))
            .is_some_and(|t| t.flagged_new);
        let told = self
            .told
            .get(&session)
            .copied()
            .or(flagged_new.then_some(Told::FlaggedNew));
        self.settle(session, stream, told, at);
    }

    /// The client learned that `session` will not give it everything: what it still owes is
    /// undelivered, told; what is emitted there from now on is not owed.
    pub(super) fn settle_told(&mut self, session: SessionId, told: Told, at: LabTime) {
        self.told.entry(session).or_insert(told);
        let told = self.told[&session];
        for stream in self.streams_of(session) {
            self.settle(session, stream, Some(told), at);
        }
    }

    /// How a client leaving `session` knew: by the refusal the session last answered it with,
    /// else by the session's end.
    pub(super) fn told_by_refusal(&self, session: SessionId) -> Told {
        match self.refusals_of(session) {
            Some(r) => Told::Refused {
                status: r.status,
                reason: r.reason,
            },
            None => Told::SessionEnded,
        }
    }

    /// The client gave up a tool call, and knows it: what the call still owes is undelivered,
    /// told. A call the client never heard from is named by elimination: each call of the
    /// session that delivered nothing yet.
    pub(super) fn settle_call_told(
        &mut self,
        session: SessionId,
        call: Option<StreamId>,
        refused: Option<RejectReason>,
        at: LabTime,
    ) {
        let told = match refused {
            Some(reason) => Told::Refused {
                status: reason.http_status(),
                reason: Some(reason),
            },
            None => Told::GaveUp {
                refusals: self.refusals_of(session),
            },
        };
        let calls: Vec<StreamId> = match call {
            Some(call) => vec![call],
            None => self
                .streams_of(session)
                .into_iter()
                .filter(|s| {
                    self.track(session, *s).is_some_and(|t| {
                        t.seen == 0 && t.call.is_some_and(|c| !c.settled && c.steps == 0)
                    })
                })
                .collect(),
        };
        for call in calls {
            self.settle(session, call, Some(told), at);
        }
    }

    /// The call's runner died and nothing will adopt it: its result can no longer come. Only
    /// the result is judged now; events it already sent may still be replayed from the store.
    pub(super) fn settle_orphaned_call(&mut self, session: SessionId, call: StreamId, at: LabTime) {
        if !self.witnessed.contains(&session) {
            return;
        }
        let told = self.told.get(&session).copied();
        let Some(track) = self.streams.get_mut(&(session, call)) else {
            return;
        };
        let Some(c) = track.call.as_mut().filter(|c| !c.settled && !c.end_emitted) else {
            return;
        };
        c.settled = true;
        let steps = c.steps;
        self.report(match told {
            Some(told) => Anomaly::Undelivered {
                owed: Owed::CallResult { call },
                told,
                at,
            },
            None => Anomaly::CallLost {
                session,
                call,
                steps,
                at,
            },
        });
    }

    /// The run is over and the lab was let quiesce: nothing still owed can arrive. The client
    /// knows of what its own sessions lost when it was told, or when it is still reconnecting;
    /// everything else is lost silently.
    pub(super) fn settle_run(&mut self, reconnecting: bool, at: LabTime) {
        let mut sessions: Vec<SessionId> = self.witnessed.iter().copied().collect();
        sessions.sort();
        for session in sessions {
            let told = self.told.get(&session).copied().or_else(|| {
                (reconnecting && self.client_session == Some(session))
                    .then_some(Told::StillReconnecting)
            });
            for stream in self.streams_of(session) {
                self.settle(session, stream, told, at);
            }
        }
    }

    /// One stream's open obligations, judged now: undelivered when `told`, else lost.
    pub(super) fn settle(
        &mut self,
        session: SessionId,
        stream: StreamId,
        told: Option<Told>,
        at: LabTime,
    ) {
        let witnessed = self.witnessed.contains(&session);
        let Some(track) = self.streams.get_mut(&(session, stream)) else {
            return;
        };
        let owed = std::mem::take(&mut track.pending);
        let call = track.call.as_mut().filter(|c| witnessed && !c.settled);
        let call_owed = call.map(|c| {
            c.settled = true;
            (!c.end_emitted).then_some(c.steps)
        });
        for (seq, key) in owed {
            if self.applied.contains_key(&key) {
                continue;
            }
            let event = EventId { stream, seq };
            self.report(match told {
                Some(told) => Anomaly::Undelivered {
                    owed: Owed::Event { event },
                    told,
                    at,
                },
                None => Anomaly::Lost { event, at },
            });
        }
        if let Some(Some(steps)) = call_owed {
            self.report(match told {
                Some(told) => Anomaly::Undelivered {
                    owed: Owed::CallResult { call: stream },
                    told,
                    at,
                },
                None => Anomaly::CallLost {
                    session,
                    call: stream,
                    steps,
                    at,
                },
            });
        }
    }

    /// The session's streams, in order: settlements are reported the same way on every run.
    fn streams_of(&self, session: SessionId) -> Vec<StreamId> {
        let mut streams: Vec<StreamId> = self
            .streams
            .keys()
            .filter(|(s, _)| *s == session)
            .map(|(_, id)| *id)
            .collect();
        streams.sort();
        streams
    }

    /// Condition 3, as the store keeps it: an id the stream already issued, written again (a
    /// store rolled back to an older snapshot hands the same ids out twice). The same content
    /// sent again is a replay (a replica records what it sends), not a reuse.
    pub(super) fn check_id_not_reused(
        &mut self,
        stream: StreamId,
        seq: u64,
        first: Arc<str>,
        key: &Arc<str>,
        at: LabTime,
    ) {
        if first == *key {
            return;
        }
        self.report(Anomaly::ReusedId {
            event: EventId { stream, seq },
            first,
            second: key.clone(),
            at,
        });
    }

    /// What is owed and not yet settled, now: events emitted and not delivered, and tool calls
    /// whose result has not been emitted (for the client pane's "owed … open …").
    pub fn open_obligations(&self) -> u64 {
        self.streams
            .iter()
            .filter(|((s, _), _)| self.witnessed.contains(s))
            .map(|(_, t)| {
                let call = t
                    .call
                    .is_some_and(|c| !c.settled && !c.end_emitted && t.kind == StreamKind::Request);
                t.pending.len() as u64 + u64::from(call)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
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
        let step = f.key(Effect::Progress { call: CALL, step: 1 });
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
}
