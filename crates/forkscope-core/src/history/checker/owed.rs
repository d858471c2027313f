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

    /// The client gave up a tool call and knew it: settled as told. `call`: its stream, when
    /// an event of it arrived; else `request` (its JSON-RPC id) finds the stream, or marks the
    /// stream the POST opens later, when it reaches the server after the client saw it fail.
    pub(super) fn settle_call_told(
        &mut self,
        session: SessionId,
        call: Option<StreamId>,
        request: u64,
        told: Told,
        at: LabTime,
    ) {
        let call = call.or_else(|| {
            self.streams_of(session).into_iter().rev().find(|s| {
                self.track(session, *s)
                    .is_some_and(|t| t.call.is_some_and(|c| c.request == Some(request)))
            })
        });
        match call {
            Some(call) => self.settle(session, call, Some(told), at),
            None => self
                .given_up_unheard
                .entry(session)
                .or_default()
                .push((request, told)),
        }
    }

    /// How the client knew it gave up a tool call: a refusal (`refused`), its retry budget
    /// spent, or its POST failed before any answer (`broken`).
    pub(super) fn told_by_abandon(
        &self,
        session: SessionId,
        refused: Option<RejectReason>,
        broken: bool,
    ) -> Told {
        match refused {
            Some(reason) => Told::Refused {
                status: reason.http_status(),
                reason: Some(reason),
            },
            None if broken => Told::CallEnded,
            None => Told::GaveUp {
                refusals: self.refusals_of(session),
            },
        }
    }

    /// A request stream opened for a call the client already gave up (its POST arrived after
    /// the client saw it fail): settled as told.
    pub(super) fn settle_call_given_up_unheard(
        &mut self,
        session: SessionId,
        stream: StreamId,
        request: u64,
        at: LabTime,
    ) {
        let Some(calls) = self.given_up_unheard.get_mut(&session) else {
            return;
        };
        let Some(i) = calls.iter().position(|(r, _)| *r == request) else {
            return;
        };
        let (_, told) = calls.swap_remove(i);
        self.settle(session, stream, Some(told), at);
    }

    /// The client received its call's last message: a result is what was owed; an error in its
    /// place (a server stopping, a store rolled back) tells the client it has none.
    pub(super) fn settle_call_end(&mut self, call: StreamId, key: &str, at: LabTime) {
        if is_result(key) {
            self.counters.owed_delivered += 1;
        } else {
            self.report(Anomaly::Undelivered {
                owed: Owed::CallResult { call },
                told: Told::CallEnded,
                at,
            });
        }
    }

    /// A replica's write to the store: an id it already issued, written with other content, is
    /// reused ([`Checker::check_id_not_reused`]).
    pub(super) fn check_written(
        &mut self,
        session: SessionId,
        stream: StreamId,
        seq: u64,
        key: &Arc<str>,
        at: LabTime,
    ) {
        let first = self
            .streams
            .get(&(session, stream))
            .and_then(|track| first_write(track, seq));
        if let Some(first) = first {
            self.check_id_not_reused(stream, seq, first, key, at);
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
