//! The oracle: reads the history one record at a time, names every anomaly, and says which
//! record caused it ([`Caused`]). The fork, duplicate, gap, loss and drift rules live here and
//! nowhere else: the views draw what this concluded.
//!
//! Incremental, so the dashboard's verdict is always current and costs O(1) per record.

mod canonical;
mod owed;
#[cfg(test)]
mod owed_tests;
mod requests;
#[cfg(test)]
mod requests_tests;
mod track;
mod verdict;

pub use requests::TaskLine;
pub use verdict::{Counters, Verdict};

use owed::ends_call;
use requests::Requests;
use track::{Call, Track};

use super::anomaly::{Across, Anomaly, AnomalyKind, AppliedAt, Drift, Refusals, Told};
use super::caused::Caused;
use super::record::{Entry, Record};
use crate::ids::{ByReplica, EventId, IdScheme, SessionId, StreamId};
use crate::time::LabTime;
use crate::vocabulary::{RejectReason, StreamKind};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Anomalies kept in full; past this they are only counted.
const KEPT_ANOMALIES: usize = 1_000;
/// Owed events tracked per stream, newest kept: a reader stalled for longer is judged on these.
const OWED_KEPT: usize = 4_096;

#[derive(Clone, Debug, Default)]
pub struct Checker {
    streams: HashMap<(SessionId, StreamId), Track>,
    /// The standalone stream each session last attached: what the client is bound to.
    bound: HashMap<SessionId, StreamId>,
    /// In a lab of replicas: the replica (and epoch) each stream was last attached on. A send
    /// from another replica, on an epoch not older, is a fork across replicas.
    attached_on: HashMap<(SessionId, StreamId), ByReplica>,
    /// Streams already reported forked across replicas, with the replica that sent.
    forked_across: HashSet<(SessionId, StreamId, crate::ids::ReplicaId)>,
    cursor: Option<(SessionId, EventId)>,
    applied: HashMap<Arc<str>, AppliedAt>,
    forked: HashSet<(SessionId, StreamId)>,
    drifted: HashSet<SessionId>,
    /// Sessions whose client waits on a 200 held open with no stream behind it (an SDK's
    /// silent answer), with the stream it was bound to: what is emitted there goes to a
    /// connection the client left, and the client will not ask for it again.
    silenced: HashMap<SessionId, StreamId>,
    /// Standalone emits per session: the server's session counter.
    session_counters: HashMap<SessionId, u64>,
    /// Sessions whose client reports what it receives (the lab's own client does; a stock
    /// client of `forkscope serve` does not). Only these are judged for lost events.
    witnessed: HashSet<SessionId>,
    /// The session the client is in now, as its deliveries say.
    client_session: Option<SessionId>,
    /// Sessions whose client was told it will not get everything: what they still owed is
    /// settled as undelivered, and what is emitted on them afterwards is not owed.
    told: HashMap<SessionId, Told>,
    /// Tool calls the client gave up before their stream opened, per session, by JSON-RPC id,
    /// with how it knew: a POST may reach the server after the client saw it fail, and the
    /// stream it opens then is that call's, already settled as told.
    given_up_unheard: HashMap<SessionId, Vec<(u64, Told)>>,
    /// The refusal the client's session last answered it with, and how many times in a row
    /// (a GET from anyone else is not the client's to be told by).
    refusals: Option<(SessionId, Refusals)>,
    /// 2026-07-28's requests and tasks.
    requests: Requests,
    counters: Counters,
    counts: BTreeMap<AnomalyKind, u64>,
    anomalies: Vec<Anomaly>,
    /// What the record being observed caused so far: empty between records.
    caused: Vec<Anomaly>,
}

impl Checker {
    /// Judges one record; returns the anomalies it caused, to tag its entry with.
    pub fn observe(&mut self, entry: &Entry) -> Caused {
        self.judge(entry);
        Caused::new(std::mem::take(&mut self.caused))
    }

    fn judge(&mut self, entry: &Entry) {
        let at = entry.at;
        match &entry.record {
            record @ (Record::CallStarted { .. }
            | Record::StepApplied { .. }
            | Record::CallCut { .. }
            | Record::RunStopped { .. }
            | Record::TaskCreated { .. }
            | Record::TaskNamed { .. }
            | Record::TaskSettled { .. }
            | Record::TaskRead { .. }
            | Record::TaskRefused { .. }) => self.judge_request(record, at),
            Record::SessionOpened { .. } => {}
            Record::ClientGaveUp => {
                if let Some(session) = self.client_session {
                    let refusals = self.refusals_of(session);
                    self.settle_told(session, Told::GaveUp { refusals }, at);
                }
            }
            Record::RunEnded { reconnecting } => {
                self.settle_run(*reconnecting, at);
                self.settle_tasks(at);
            }
            Record::CallAbandoned {
                session,
                call,
                request,
                refused,
                broken,
            } => {
                let told = self.told_by_abandon(*session, *refused, *broken);
                self.settle_call_told(*session, *call, *request, told, at);
            }
            Record::RunnerStopped {
                session,
                call,
                adoptable: false,
            } => self.settle_orphaned_call(*session, *call, at),
            Record::RunnerStopped { .. } => {}
            Record::ClientJoined { session } => {
                self.witnessed.insert(*session);
                self.client_session = Some(*session);
            }
            // What the session still owed is gone with it, and the client knows: undelivered,
            // told, not silent.
            Record::SessionClosed { session } => {
                if self.witnessed.contains(session) {
                    let told = self.told_by_refusal(*session);
                    self.settle_told(*session, told, at);
                }
                self.told.remove(session);
                if self.refusals.is_some_and(|(s, _)| s == *session) {
                    self.refusals = None;
                }
                if self.client_session == Some(*session) {
                    self.client_session = None;
                }
                self.witnessed.remove(session);
                self.streams.retain(|(s, _), _| s != session);
                self.bound.remove(session);
                self.attached_on.retain(|(s, _), _| s != session);
                self.forked_across.retain(|(s, _, _)| s != session);
                self.session_counters.remove(session);
                self.silenced.remove(session);
                self.given_up_unheard.remove(session);
            }
            Record::StreamOpened {
                session,
                stream,
                stream_kind,
                ids,
                flagged_new,
                request,
            } => {
                let counted =
                    *stream_kind == StreamKind::Request && self.witnessed.contains(session);
                if counted {
                    self.counters.owed += 1;
                }
                let track = Track {
                    kind: *stream_kind,
                    ids: *ids,
                    accepting: true,
                    high_water: 0,
                    seen: 0,
                    pending: BTreeMap::new(),
                    flagged_new: *flagged_new,
                    call: (*stream_kind == StreamKind::Request).then_some(Call {
                        counted,
                        request: *request,
                        ..Call::default()
                    }),
                    delivered: BTreeMap::new(),
                };
                self.streams.insert((*session, *stream), track);
                if let Some(request) = request {
                    self.settle_call_given_up_unheard(*session, *stream, *request, at);
                }
                if *stream_kind == StreamKind::Standalone {
                    if *flagged_new {
                        self.counters.new_streams_flagged += 1;
                    } else {
                        self.counters.new_streams_silent += 1;
                    }
                }
            }
            Record::Attached {
                session, stream, ..
            } => {
                // The client reads a stream again.
                self.silenced.remove(session);
                if let Some(by) = entry.by {
                    self.attach_on(*session, *stream, by);
                }
                if self
                    .track(*session, *stream)
                    .is_some_and(|t| t.kind == StreamKind::Standalone)
                    && let Some(left) = self.bound.insert(*session, *stream)
                    && left != *stream
                    && self.track(*session, left).is_some_and(|t| !t.accepting)
                {
                    // The client moved on from an ended stream: what it still owed is lost.
                    self.settle_stream(*session, left, at);
                }
            }
            Record::Orphaned { .. } => self.counters.orphaned += 1,
            Record::Fenced { session, stream } => {
                self.counters.fences += 1;
                self.stop_accepting(*session, *stream, at);
            }
            Record::StreamClosed { session, stream } => {
                self.stop_accepting(*session, *stream, at);
            }
            // Forget what was kept about it, so a long session's checker stays flat.
            Record::StreamForgotten { session, stream } => {
                self.settle_stream(*session, *stream, at);
                self.streams.remove(&(*session, *stream));
                self.forked.remove(&(*session, *stream));
                self.attached_on.remove(&(*session, *stream));
                self.forked_across
                    .retain(|(s, id, _)| (s, id) != (session, stream));
            }
            Record::Emitted {
                session,
                stream,
                seq,
                copied,
                key,
            } => {
                let forked =
                    !copied && self.check_emit_lands_on_bound_stream(*session, *stream, *seq, at);
                if let Some(by) = entry.by {
                    self.check_sent_from_bound_replica(*session, *stream, *seq, by, at);
                }
                if !copied {
                    self.counters.emits += 1;
                }
                // Emitted after the client was told the session is lost to it: not owed.
                let witnessed =
                    self.witnessed.contains(session) && !self.told.contains_key(session);
                // Sent to a connection the client left, while it waits on a silent answer.
                let silenced =
                    !copied && !forked && witnessed && self.silenced.get(session) == Some(stream);
                if silenced {
                    self.report(Anomaly::Lost {
                        event: EventId {
                            stream: *stream,
                            seq: *seq,
                        },
                        at,
                    });
                }
                let mut written_before = None;
                if let Some(track) = self.streams.get_mut(&(*session, *stream)) {
                    // Condition 3 as a store keeps it: an id at or below the high-water mark
                    // is written a second time (one comparison on the common path).
                    if !copied && *seq != 0 && *seq <= track.high_water {
                        written_before = owed::first_write(track, *seq);
                    }
                    track.high_water = track.high_water.max(*seq);
                    if let Some(call) = &mut track.call
                        && ends_call(key)
                    {
                        call.end_emitted = true;
                    }
                    // Owed, unless the client already gave up the call it belongs to; a forked
                    // or silenced emit was reported lost at once, every other one waits here.
                    let given_up = track.call.is_some_and(|c| c.settled);
                    let owed = witnessed && !given_up && *seq > track.seen;
                    if owed {
                        self.counters.owed += 1;
                    }
                    if owed && !forked && !silenced {
                        track.pending.insert(*seq, key.clone());
                        if track.pending.len() > OWED_KEPT {
                            track.pending.pop_first();
                        }
                    }
                }
                if let Some(first) = written_before {
                    self.check_id_not_reused(*stream, *seq, first, key, at);
                }
            }
            Record::Written {
                session,
                stream,
                seq,
                key,
            } => self.check_written(*session, *stream, *seq, key, at),
            Record::LateEmitRefused { .. } | Record::StaleWriteRefused { .. } => {
                self.counters.late_emits_refused += 1;
            }
            Record::CallAdopted { .. } => self.counters.calls_adopted += 1,
            Record::ResumeAccepted { session, .. } => {
                self.counters.resumes_accepted += 1;
                if self.refusals.is_some_and(|(s, _)| s == *session) {
                    self.refusals = None;
                }
            }
            Record::ResumeRejected { session, reason } => {
                *self.counters.resumes_rejected.entry(*reason).or_default() += 1;
                self.refused(*session, reason.http_status(), Some(*reason));
            }
            Record::AnsweredWithStatus { session, status } => {
                self.counters.sdk_answers += 1;
                self.refused(*session, *status, None);
            }
            Record::Delivered {
                session,
                event,
                key,
                applied,
            } => {
                self.check_delivery(*session, *event, key, *applied, at);
            }
            Record::CursorMoved {
                session,
                from,
                to,
                reset,
            } => {
                self.check_cursor_move(*session, *from, *to, *reset, at);
            }
            // The client left its session knowingly: what it still owed is undelivered, told by
            // the refusal that sent it away (or the session's end).
            Record::ClientNewSession => {
                if let Some(session) = self.client_session.take()
                    && !self.told.contains_key(&session)
                {
                    let told = self.told_by_refusal(session);
                    self.settle_told(session, told, at);
                }
                self.cursor = None;
                self.silenced.clear();
            }
            Record::AnsweredSilently { session, held_open } => {
                self.counters.sdk_answers += 1;
                if *held_open && let Some(&bound) = self.bound.get(session) {
                    self.silenced.insert(*session, bound);
                    // The client took the empty 200 for a resume and will not ask again: what
                    // the stream still owed it, sent to the connection it left, is lost now,
                    // whenever it was emitted.
                    self.settle(*session, bound, None, at);
                }
            }
        }
    }

    /// One more refusal of a GET: counted in a row while it repeats, for the client's session.
    fn refused(&mut self, session: SessionId, status: u16, reason: Option<RejectReason>) {
        if self.client_session != Some(session) {
            return;
        }
        let run = match &mut self.refusals {
            Some((s, run)) if *s == session && (run.status, run.reason) == (status, reason) => run,
            slot => {
                let fresh = Refusals {
                    status,
                    reason,
                    times: 0,
                };
                &mut slot.insert((session, fresh)).1
            }
        };
        run.times += 1;
    }

    /// The refusals the client's session answered it with, in a row, if `session` is it.
    fn refusals_of(&self, session: SessionId) -> Option<Refusals> {
        self.refusals
            .filter(|(s, _)| *s == session)
            .map(|(_, run)| run)
    }

    /// In a lab of replicas: the replica (and epoch) `stream` is attached on now, as the
    /// checker judges it — what a pane marks every other delivery of the stream an orphan by.
    pub fn attached_on(&self, session: SessionId, stream: StreamId) -> Option<ByReplica> {
        self.attached_on.get(&(session, stream)).copied()
    }

    /// Streams the checker keeps state about (bounded by what the server keeps).
    pub fn tracked_streams(&self) -> usize {
        self.streams.len()
    }

    fn track(&self, session: SessionId, stream: StreamId) -> Option<&Track> {
        self.streams.get(&(session, stream))
    }

    /// The stream was fenced or closed: emits no longer land on it. A standalone stream the
    /// client is no longer bound to can deliver nothing more, so it is settled now; the one it
    /// is bound to is settled when the client moves on. (A request stream is closed when its
    /// result is queued, before it is delivered: it is settled when forgotten.)
    fn stop_accepting(&mut self, session: SessionId, stream: StreamId, at: LabTime) {
        let Some(track) = self.streams.get_mut(&(session, stream)) else {
            return;
        };
        track.accepting = false;
        if track.kind == StreamKind::Standalone && self.bound.get(&session) != Some(&stream) {
            self.settle_stream(session, stream, at);
        }
    }

    /// Fork, lost and drift: an emit onto a standalone stream other than the one the client is
    /// bound to, while that one is live too. Returns whether it was (the emit is then lost).
    fn check_emit_lands_on_bound_stream(
        &mut self,
        session: SessionId,
        stream: StreamId,
        seq: u64,
        at: LabTime,
    ) -> bool {
        if self
            .track(session, stream)
            .is_none_or(|t| t.kind != StreamKind::Standalone)
        {
            return false;
        }
        let counter = {
            let counter = self.session_counters.entry(session).or_default();
            *counter += 1;
            *counter
        };
        let Some(&bound) = self.bound.get(&session) else {
            return false;
        };
        if bound == stream || self.track(session, bound).is_none_or(|t| !t.accepting) {
            return false;
        }
        if self.forked.insert((session, stream)) {
            self.report(Anomaly::Fork {
                session,
                orphan: stream,
                bound,
                seq,
                at,
                across: None,
            });
        }
        self.report(Anomaly::Lost {
            event: EventId { stream, seq },
            at,
        });
        if self.drifted.insert(session) {
            let cursor = self.cursor.filter(|(s, _)| *s == session).map(|(_, c)| c);
            let drift = Drift::CounterAdvancedElsewhere {
                counter,
                on: stream,
                cursor,
            };
            self.report(Anomaly::CursorDrift { session, drift, at });
        }
        true
    }

    /// A new attach on a replica; under fenced only a newer epoch replaces the one held, so a
    /// late-recorded older attach cannot move the binding back.
    fn attach_on(&mut self, session: SessionId, stream: StreamId, by: ByReplica) {
        let held = self.attached_on.entry((session, stream)).or_insert(by);
        if !by.precedes(held) {
            *held = by;
        }
    }

    /// Fork across replicas: `by` sent an event of `stream` while the client was bound to that
    /// stream on another replica, on an epoch no older than the send's. The event stays owed:
    /// the shared log may still deliver it, and whether it was is judged as for any emit.
    fn check_sent_from_bound_replica(
        &mut self,
        session: SessionId,
        stream: StreamId,
        seq: u64,
        by: ByReplica,
        at: LabTime,
    ) {
        let Some(bound) = self.attached_on.get(&(session, stream)).copied() else {
            return;
        };
        if bound.replica == by.replica || by.precedes(&bound) {
            return;
        }
        let fork = Anomaly::Fork {
            session,
            orphan: stream,
            bound: stream,
            seq,
            at,
            across: Some(Across {
                from: by.replica,
                bound_on: bound.replica,
            }),
        };
        if self.forked_across.insert((session, stream, by.replica)) {
            self.report(fork);
        } else {
            // The same fork, carrying one more send: counted once, but each send is tagged,
            // so every event the orphan received is drawn where it landed.
            self.caused.push(fork);
        }
    }

    fn check_delivery(
        &mut self,
        session: SessionId,
        event: EventId,
        key: &Arc<str>,
        applied: bool,
        at: LabTime,
    ) {
        self.witnessed.insert(session);
        self.client_session = Some(session);
        if let Some(track) = self.streams.get_mut(&(session, event.stream)) {
            let expected = track.seen + 1;
            track.seen = track.seen.max(event.seq);
            if track.pending.remove(&event.seq).is_some() {
                self.counters.owed_delivered += 1;
            }
            track.delivered.insert(event.seq, key.clone());
            if track.delivered.len() > OWED_KEPT {
                track.delivered.pop_first();
            }
            let ended = track.call.as_mut().and_then(|call| {
                if !ends_call(key) {
                    call.steps += 1;
                    return None;
                }
                let owed = call.counted && !call.settled;
                call.settled = true;
                owed.then_some(key)
            });
            if let Some(key) = ended {
                self.settle_call_end(event.stream, key, at);
            }
            if event.seq > expected {
                self.report(Anomaly::Gap {
                    stream: event.stream,
                    expected,
                    got: event.seq,
                    at,
                });
            }
        }
        if !applied {
            self.counters.replays_skipped += 1;
            return;
        }
        self.counters.applied += 1;
        let now = AppliedAt { event, at };
        if let Some(first) = self.applied.get(key) {
            let first = *first;
            self.report(Anomaly::Duplicate {
                key: key.clone(),
                first,
                second: now,
            });
        } else {
            self.applied.insert(key.clone(), now);
        }
    }

    fn check_cursor_move(
        &mut self,
        session: SessionId,
        from: Option<EventId>,
        to: EventId,
        reset: bool,
        at: LabTime,
    ) {
        self.witnessed.insert(session);
        self.client_session = Some(session);
        if let Some(from) = from
            && !reset
            && (from.stream != to.stream || to.seq <= from.seq)
        {
            self.report(Anomaly::NonMonotonicCursor { from, to, at });
        }
        self.cursor = Some((session, to));
        // Condition 3 broken: the id the client holds is also an id of another stream.
        if self
            .track(session, to.stream)
            .is_some_and(|t| t.ids == IdScheme::Bare)
            && !self.drifted.contains(&session)
        {
            let also_on = self
                .streams
                .iter()
                .filter(|((s, id), t)| {
                    *s == session
                        && *id != to.stream
                        && t.ids == IdScheme::Bare
                        && t.high_water >= to.seq
                })
                .map(|((_, id), _)| *id)
                .min();
            if let Some(also_on) = also_on {
                self.drifted.insert(session);
                let drift = Drift::AmbiguousCursor {
                    cursor: to,
                    also_on,
                };
                self.report(Anomaly::CursorDrift { session, drift, at });
            }
        }
    }

    fn report(&mut self, anomaly: Anomaly) {
        *self.counts.entry(anomaly.kind()).or_default() += 1;
        if self.anomalies.len() < KEPT_ANOMALIES {
            self.anomalies.push(anomaly.clone());
        }
        self.caused.push(anomaly);
    }
}
