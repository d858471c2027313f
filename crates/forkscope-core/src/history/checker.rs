//! The oracle: reads the history one record at a time, names every anomaly, and says which
//! record caused it ([`Caused`]). The fork, duplicate, gap, loss and drift rules live here and
//! nowhere else: the views draw what this concluded.
//!
//! Incremental, so the dashboard's verdict is always current and costs O(1) per record.

use super::anomaly::{Across, Anomaly, AnomalyKind, AppliedAt, Drift};
use super::caused::Caused;
use super::record::{Entry, Record};
use crate::ids::{ByReplica, EventId, IdScheme, SessionId, StreamId};
use crate::time::LabTime;
use crate::vocabulary::{RejectReason, StreamKind};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Anomalies kept in full; past this they are only counted.
const KEPT_ANOMALIES: usize = 1_000;
/// Owed events tracked per stream, newest kept: a reader stalled for longer is judged on these.
const OWED_KEPT: usize = 4_096;

#[derive(Clone, Debug)]
struct Track {
    kind: StreamKind,
    ids: IdScheme,
    accepting: bool,
    high_water: u64,
    /// Highest sequence the client has received on this stream (0: just the priming event).
    seen: u64,
    /// Events emitted here and not yet delivered, by sequence: judged when the stream can no
    /// longer deliver them (see [`Checker::settle_stream`]).
    pending: BTreeMap<u64, Arc<str>>,
    /// Opened flagged as new (`Mcp-Stream-Resumed: false`): a client moving onto it was told
    /// that continuity broke.
    flagged_new: bool,
}

/// Counters kept alongside the anomalies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub emits: u64,
    pub applied: u64,
    /// Replayed events the client recognised as already seen and did not apply again.
    pub replays_skipped: u64,
    pub late_emits_refused: u64,
    pub resumes_accepted: u64,
    pub resumes_rejected: BTreeMap<RejectReason, u64>,
    pub new_streams_flagged: u64,
    pub new_streams_silent: u64,
    pub fences: u64,
    /// Grace windows started: the server judged a stream's client gone.
    pub orphaned: u64,
    /// Tool calls a replica took over after their runner's lease expired.
    pub calls_adopted: u64,
}

impl Counters {
    pub fn rejected_total(&self) -> u64 {
        self.resumes_rejected.values().sum()
    }
}

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
            Record::SessionOpened { .. } => {}
            Record::ClientGaveUp => {}
            // What the session still owed is gone with it, and the client knows: not silent.
            Record::SessionClosed { session } => {
                self.witnessed.remove(session);
                self.streams.retain(|(s, _), _| s != session);
                self.bound.remove(session);
                self.attached_on.retain(|(s, _), _| s != session);
                self.forked_across.retain(|(s, _, _)| s != session);
                self.session_counters.remove(session);
                self.silenced.remove(session);
            }
            Record::StreamOpened {
                session,
                stream,
                stream_kind,
                ids,
                flagged_new,
            } => {
                let track = Track {
                    kind: *stream_kind,
                    ids: *ids,
                    accepting: true,
                    high_water: 0,
                    seen: 0,
                    pending: BTreeMap::new(),
                    flagged_new: *flagged_new,
                };
                self.streams.insert((*session, *stream), track);
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
                let witnessed = self.witnessed.contains(session);
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
                if let Some(track) = self.streams.get_mut(&(*session, *stream)) {
                    track.high_water = track.high_water.max(*seq);
                    // A forked or silenced emit is reported lost at once; every other one is
                    // owed.
                    if witnessed && !forked && !silenced && *seq > track.seen {
                        track.pending.insert(*seq, key.clone());
                        if track.pending.len() > OWED_KEPT {
                            track.pending.pop_first();
                        }
                    }
                }
            }
            Record::LateEmitRefused { .. } | Record::StaleWriteRefused { .. } => {
                self.counters.late_emits_refused += 1;
            }
            Record::CallAdopted { .. } => self.counters.calls_adopted += 1,
            Record::ResumeAccepted { .. } => self.counters.resumes_accepted += 1,
            Record::ResumeRejected { reason, .. } => {
                *self.counters.resumes_rejected.entry(*reason).or_default() += 1;
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
            Record::ClientNewSession => {
                self.cursor = None;
                self.silenced.clear();
            }
            Record::AnsweredSilently { session, held_open } => {
                if *held_open && let Some(&bound) = self.bound.get(session) {
                    self.silenced.insert(*session, bound);
                }
            }
        }
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

    /// The stream can deliver nothing more: every event it still owed the client whose side
    /// effect was not applied some other way (a replay, a naive copy) is lost — silently,
    /// unless the stream the client is now bound to was flagged new (it was told continuity
    /// broke, as it is when it starts a new session).
    fn settle_stream(&mut self, session: SessionId, stream: StreamId, at: LabTime) {
        let told = self
            .bound
            .get(&session)
            .filter(|b| **b != stream)
            .and_then(|b| self.track(session, *b))
            .is_some_and(|t| t.flagged_new);
        let Some(track) = self.streams.get_mut(&(session, stream)) else {
            return;
        };
        let owed = std::mem::take(&mut track.pending);
        if told {
            return;
        }
        for (seq, key) in owed {
            if !self.applied.contains_key(&key) {
                self.report(Anomaly::Lost {
                    event: EventId { stream, seq },
                    at,
                });
            }
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
        if self.forked_across.insert((session, stream, by.replica)) {
            self.report(Anomaly::Fork {
                session,
                orphan: stream,
                bound: stream,
                seq,
                at,
                across: Some(Across {
                    from: by.replica,
                    bound_on: bound.replica,
                }),
            });
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
        if let Some(track) = self.streams.get_mut(&(session, event.stream)) {
            let expected = track.seen + 1;
            track.seen = track.seen.max(event.seq);
            track.pending.remove(&event.seq);
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

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// The first anomalies found, in the order they happened (at most 1,000 kept).
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.anomalies
    }

    pub fn verdict(&self) -> Verdict {
        let counts: BTreeMap<AnomalyKind, u64> = self.counts.clone();
        // The most telling anomaly leads: a fork explains the duplicates and drift after it.
        let lead = <AnomalyKind as strum::IntoEnumIterator>::iter()
            .find_map(|kind| self.anomalies.iter().find(|a| a.kind() == kind));
        let headline = match lead {
            // No client reported what it applied (stock clients of `forkscope serve` do not):
            // say what the server saw rather than "0 side effects applied".
            None if self.witnessed.is_empty() => format!(
                "no anomaly in what the server saw: {}, one live stream at a time \
                 ({}, {} rejected, {}; no client reported what it applied, so duplicates and \
                 losses are not judged)",
                counted(self.counters.emits, "event", "emitted"),
                counted(self.counters.resumes_accepted, "resume", "accepted"),
                self.counters.rejected_total(),
                counted(self.counters.late_emits_refused, "late emit", "refused"),
            ),
            None => format!(
                "no anomaly: {} applied, each once, on one stream at a time ({}, {} rejected, {})",
                counted(self.counters.applied, "side effect", ""),
                counted(self.counters.resumes_accepted, "resume", "accepted"),
                self.counters.rejected_total(),
                counted(self.counters.late_emits_refused, "late emit", "refused"),
            ),
            Some(lead) => lead.to_string(),
        };
        Verdict {
            clean: counts.is_empty(),
            counts,
            headline,
            first: lead.cloned(),
        }
    }
}

/// `1 resume accepted`, `2 resumes accepted`: a count and its noun as a person writes them.
fn counted(n: u64, noun: &str, participle: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} {noun}{s} {participle}").trim_end().to_owned()
}

/// The checker's judgement at one instant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub clean: bool,
    pub counts: BTreeMap<AnomalyKind, u64>,
    /// One sentence: the leading anomaly, or a summary of a clean run.
    pub headline: String,
    pub first: Option<Anomaly>,
}

impl Verdict {
    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// `fork ×1, duplicate ×41` or `clean`.
    pub fn summary(&self) -> String {
        if self.clean {
            return "clean".to_owned();
        }
        self.counts
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Checker {
    /// Canonical form ([`crate::canon`]): what later judgements read. The counters
    /// and anomalies are left out (an explored state has none), and so is what it knows about
    /// sessions the server no longer holds: none of their events can reach the client again.
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        let known = |c: &crate::canon::Canon, s: &SessionId| c.known(*s);
        let streams: Vec<_> = self
            .streams
            .iter()
            .filter(|((s, _), _)| known(c, s))
            .collect();
        c.unordered(streams, |c, ((session, stream), track)| {
            c.session(*session);
            c.stream(*stream);
            c.tag(track.kind as u8);
            c.tag(track.ids as u8);
            c.flag(track.accepting);
            c.number(track.high_water);
            c.number(track.seen);
            c.flag(track.flagged_new);
            c.number(track.pending.len() as u64);
            for (seq, key) in &track.pending {
                c.number(*seq);
                c.key(key);
            }
        });
        let bound: Vec<_> = self.bound.iter().filter(|(s, _)| known(c, s)).collect();
        c.unordered(bound, |c, (session, stream)| {
            c.session(*session);
            c.stream(*stream);
        });
        let attached: Vec<_> = self
            .attached_on
            .iter()
            .filter(|((s, _), _)| known(c, s))
            .collect();
        c.unordered(attached, |c, ((session, stream), by)| {
            c.session(*session);
            c.stream(*stream);
            c.number(by.replica.index() as u64);
            c.number(by.epoch.map_or(0, |e| e + 1));
        });
        let across: Vec<_> = self
            .forked_across
            .iter()
            .filter(|(s, _, _)| known(c, s))
            .collect();
        c.unordered(across, |c, (session, stream, replica)| {
            c.session(*session);
            c.stream(*stream);
            c.number(replica.index() as u64);
        });
        match self.cursor {
            Some((session, event)) if known(c, &session) => {
                c.tag(1);
                c.session(session);
                c.stream(event.stream);
                c.number(event.seq);
            }
            Some(_) => c.tag(2),
            None => c.tag(0),
        }
        let applied: Vec<_> = self.applied.keys().filter(|k| c.key_known(k)).collect();
        c.unordered(applied, |c, key| c.key(key));
        let forked: Vec<_> = self.forked.iter().filter(|(s, _)| known(c, s)).collect();
        c.unordered(forked, |c, (session, stream)| {
            c.session(*session);
            c.stream(*stream);
        });
        let drifted: Vec<_> = self.drifted.iter().filter(|s| known(c, s)).collect();
        c.unordered(drifted, |c, session| c.session(*session));
        let counters: Vec<_> = self
            .session_counters
            .iter()
            .filter(|(s, _)| known(c, s))
            .collect();
        c.unordered(counters, |c, (session, n)| {
            c.session(*session);
            c.number(*n);
        });
        let witnessed: Vec<_> = self.witnessed.iter().filter(|s| known(c, s)).collect();
        c.unordered(witnessed, |c, session| c.session(*session));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SplitMix64;

    /// A server whose clients report nothing (stock clients of `forkscope serve`) is not
    /// credited with "0 side effects applied": the verdict says what it could judge.
    #[test]
    fn a_verdict_without_a_witness_says_what_it_judged() {
        let mut checker = Checker::default();
        let session = SessionId::generate(&mut SplitMix64::new(7));
        checker.observe(&Entry {
            at: LabTime::ZERO,
            by: None,
            record: Record::SessionOpened { session },
            caused: Caused::NOTHING,
        });
        let verdict = checker.verdict();
        assert!(verdict.clean);
        assert!(
            verdict
                .headline
                .starts_with("no anomaly in what the server saw: 0 events emitted"),
            "{}",
            verdict.headline
        );
        assert!(
            !verdict.headline.contains("side effects applied"),
            "{}",
            verdict.headline
        );
    }

    #[test]
    fn counts_read_as_a_person_writes_them() {
        assert_eq!(counted(1, "resume", "accepted"), "1 resume accepted");
        assert_eq!(counted(0, "resume", "accepted"), "0 resumes accepted");
        assert_eq!(counted(44, "side effect", ""), "44 side effects");
    }
}
