//! A GET on a session: a resume, or a request for a new standalone stream. The policy decides
//! ([`crate::resume::fenced`], [`crate::resume::naive`] or [`crate::resume::sdk`]); this file carries the decision out
//! atomically and records it. A rejection changes nothing.

use super::{Server, Session, SessionError, Stream, StreamKind, StreamState};
use crate::event::Payload;
use crate::history::{History, Record};
use crate::ids::{
    ConnectionId, Entropy, IdScheme, ResumptionToken, SessionId, StreamId, WireCursor,
};
use crate::policy::Policy;
use crate::resume::{
    self, NewStream, Plan, ResumeDecision, ResumeRejected, ResumeRequest, Resumed, StreamEcho,
    TokenLookup,
};
use crate::state::ReplayBudget;
use crate::time::LabTime;
use crate::vocabulary::OrphanCause;

impl Server {
    /// A GET on the session: a resume, or a request for a new standalone stream. The policy
    /// decides ([`resume::fenced`] or [`resume::naive`]); this carries the decision out
    /// atomically and records it.
    pub fn handle_get(
        &mut self,
        now: LabTime,
        request: &ResumeRequest<'_>,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<ResumeDecision, SessionError> {
        let token = self.lookup_token(request.session, request.token);
        let session = self
            .sessions
            .get(&request.session)
            .ok_or(SessionError::Unknown)?;
        let plan = match self.policy {
            Policy::Fenced => {
                // A keyed id names its stream and carries that stream's key: it identifies the
                // stream only when the key is that stream's, in this session.
                let cursor_key = match request.last_event_id.and_then(WireCursor::parse) {
                    Some(WireCursor::Keyed { event, key }) => match session.stream(event.stream) {
                        Some(s) if s.token.stream_key() == key => TokenLookup::Found(s.id),
                        _ => TokenLookup::Unknown,
                    },
                    _ => TokenLookup::Absent,
                };
                resume::fenced::decide(
                    session,
                    token,
                    cursor_key,
                    request.last_event_id,
                    now,
                    &self.config,
                )
            }
            Policy::Naive => resume::naive::decide(session, token, request.last_event_id),
            sdk => match resume::sdk::quirks(sdk) {
                Some(quirks) => resume::sdk::decide(quirks, session, request.last_event_id),
                None => unreachable!("fenced and naive are matched above"),
            },
        };
        let decision = self.carry_out(now, request, plan, rng, history);
        // A rejection changes nothing, the session's idle clock included: a client sending
        // only refused requests must not keep a session alive.
        if !matches!(
            decision,
            ResumeDecision::Reject(_) | ResumeDecision::Answered(_)
        ) {
            self.touch(now, request.session);
        }
        Ok(decision)
    }

    fn lookup_token(&self, session: SessionId, raw: Option<&str>) -> TokenLookup {
        let Some(raw) = raw else {
            return TokenLookup::Absent;
        };
        match ResumptionToken::parse(raw) {
            None => TokenLookup::Unknown,
            Some(token) => self.resolve(session, token),
        }
    }

    fn resolve(&self, session: SessionId, token: ResumptionToken) -> TokenLookup {
        match self.tokens.get(&token) {
            None => TokenLookup::Unknown,
            Some((owner, _)) if *owner != session => TokenLookup::OtherSession,
            Some((_, stream)) => TokenLookup::Found(*stream),
        }
    }

    fn carry_out(
        &mut self,
        now: LabTime,
        request: &ResumeRequest<'_>,
        plan: Plan,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> ResumeDecision {
        let session_id = request.session;
        match plan {
            Plan::Reject(rejected) => self.reject(now, session_id, rejected, history),
            Plan::Answer(answer) => {
                let record = if answer.status == 200 {
                    Record::AnsweredSilently {
                        session: session_id,
                        held_open: answer.held_open,
                    }
                } else {
                    Record::AnsweredWithStatus {
                        session: session_id,
                        status: answer.status,
                    }
                };
                history.record(now, record);
                ResumeDecision::Answered(answer)
            }
            Plan::Resume {
                stream,
                after,
                fence,
                proof,
                quirked,
            } => {
                for id in &fence {
                    self.fence(now, session_id, *id, history);
                }
                let policy = self.policy;
                let session = self
                    .sessions
                    .get_mut(&session_id)
                    .expect("planned on this session");
                let target = session.stream_mut(stream).expect("planned on this stream");
                let finished = matches!(target.state, StreamState::Finished { .. });
                // Replay then close leaves the stream to the connection that holds it.
                let attaches = !quirked.then_close;
                if !finished && attaches {
                    target.state = StreamState::Live;
                }
                let previous = if attaches {
                    target.connection.replace(request.connection)
                } else {
                    None
                };
                let replay_len = target
                    .buffer
                    .after(after, target.high_water)
                    .map_or(0, |r| r.len());
                let ids = target.ids;
                let kind = target.kind;
                if kind == StreamKind::Standalone && attaches {
                    session.active = Some(stream);
                    retarget_background_if_ended(session);
                }
                if attaches {
                    history.record(
                        now,
                        Record::Attached {
                            session: session_id,
                            stream,
                            connection: request.connection,
                        },
                    );
                }
                let fenced = policy == Policy::Fenced;
                // Condition 2 at connection level: the old socket gets nothing more (and an SDK
                // that replaces a stream's connection closes the old one too).
                let detached =
                    previous.filter(|c| (fenced || quirked.replaces) && *c != request.connection);
                history.record(
                    now,
                    Record::ResumeAccepted {
                        session: session_id,
                        stream,
                        after,
                        replay_len,
                        proof,
                        fenced_connection: detached,
                    },
                );
                ResumeDecision::Resume(Resumed {
                    stream,
                    after,
                    replay_len,
                    detached,
                    echo: fenced.then_some(StreamEcho {
                        stream,
                        resumed: true,
                    }),
                    ids,
                    fenced: fence,
                    finished,
                    by_id: quirked.by_id,
                    then_close: quirked.then_close,
                })
            }
            Plan::Mint {
                flagged_new,
                backlog_from,
                orphan,
                fence,
                ids,
            } => {
                for id in &fence {
                    self.fence(now, session_id, *id, history);
                }
                if let Some(orphan) = orphan {
                    self.orphan(now, session_id, orphan, OrphanCause::Replaced, history);
                }
                let minted = self.mint_stream(
                    now,
                    session_id,
                    StreamKind::Standalone,
                    None,
                    ids,
                    flagged_new,
                    Some(request.connection),
                    rng,
                    history,
                );
                let (stream, token) = match minted {
                    Ok(minted) => minted,
                    Err(max) => {
                        return self.reject(
                            now,
                            session_id,
                            ResumeRejected::TooManyStreams { max },
                            history,
                        );
                    }
                };
                let session = self
                    .sessions
                    .get_mut(&session_id)
                    .expect("planned on this session");
                let replay_len = match backlog_from {
                    Some(from) => {
                        copy_backlog(now, session, from, stream, &mut self.budget, history)
                    }
                    None => 0,
                };
                ResumeDecision::NewStream(NewStream {
                    stream,
                    token,
                    echo: flagged_new.then_some(StreamEcho {
                        stream,
                        resumed: false,
                    }),
                    ids,
                    replay_len,
                    orphaned: orphan,
                    fenced: fence,
                })
            }
        }
    }

    fn reject(
        &mut self,
        now: LabTime,
        session: SessionId,
        rejected: ResumeRejected,
        history: &mut History,
    ) -> ResumeDecision {
        history.record(
            now,
            Record::ResumeRejected {
                session,
                reason: rejected.reason(),
            },
        );
        ResumeDecision::Reject(rejected)
    }

    /// Mints a stream, forgetting the oldest ended streams when the session is at its bound.
    /// Errs with the bound when every kept stream is still open. `request`: the call a request
    /// stream answers (its numeric JSON-RPC id).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mint_stream(
        &mut self,
        now: LabTime,
        session_id: SessionId,
        kind: StreamKind,
        request: Option<u64>,
        ids: IdScheme,
        flagged_new: bool,
        connection: Option<ConnectionId>,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<(StreamId, ResumptionToken), usize> {
        let max = self.config.max_streams_per_session;
        let capacity = self.config.replay_buffer;
        let capacity_bytes = self.config.replay_buffer_bytes;
        let session = self
            .sessions
            .get_mut(&session_id)
            .expect("caller checked the session");
        while session.streams.len() >= max {
            let Some(oldest_ended) = session.forgettable() else {
                return Err(max);
            };
            let forgotten = session.streams.remove(oldest_ended);
            self.budget.release(forgotten.buffer.bytes());
            self.tokens.remove(&forgotten.token);
            history.record(
                now,
                Record::StreamForgotten {
                    session: session_id,
                    stream: forgotten.id,
                },
            );
        }
        let token = loop {
            let token = ResumptionToken::generate(rng);
            if !self.tokens.contains_key(&token) {
                break token;
            }
        };
        let id = StreamId(session.next_stream);
        session.next_stream += 1;
        let mut stream = Stream::new(id, kind, token, ids, capacity, capacity_bytes, now);
        stream.connection = connection;
        session.streams.push(stream);
        if kind == StreamKind::Standalone {
            session.active = Some(id);
            retarget_background_if_ended(session);
        }
        self.tokens.insert(token, (session_id, id));
        history.record(
            now,
            Record::StreamOpened {
                session: session_id,
                stream: id,
                stream_kind: kind,
                ids,
                flagged_new,
                request,
            },
        );
        if let Some(connection) = connection {
            history.record(
                now,
                Record::Attached {
                    session: session_id,
                    stream: id,
                    connection,
                },
            );
        }
        Ok((id, token))
    }
}

/// The naive policy's "replay from its own index 0": the old stream's kept events, copied into
/// the new stream under fresh (reused) sequence numbers.
fn copy_backlog(
    now: LabTime,
    session: &mut Session,
    from: StreamId,
    into: StreamId,
    budget: &mut ReplayBudget,
    history: &mut History,
) -> usize {
    let backlog: Vec<Payload> = match session.stream(from) {
        Some(old) => old.buffer.iter().map(|e| e.payload.clone()).collect(),
        None => return 0,
    };
    let session_id = session.id;
    let stream = session.stream_mut(into).expect("just minted");
    for payload in &backlog {
        let key = payload.key.clone();
        let event = stream.push(now, payload.clone(), budget);
        history.record(
            now,
            Record::Emitted {
                session: session_id,
                stream: into,
                seq: event.seq,
                key,
                copied: true,
            },
        );
    }
    backlog.len()
}

/// Points the background task at the active stream when it has none, or its stream is gone or
/// closed. A fenced target is kept on purpose: the task's next emit there is refused and counted
/// (a late emit), and only then does it move.
pub(super) fn retarget_background_if_ended(session: &mut Session) {
    let keep = session
        .background_target
        .and_then(|id| session.stream(id))
        .is_some_and(|s| {
            !matches!(
                s.state,
                StreamState::Closed { .. } | StreamState::Finished { .. }
            )
        });
    if !keep {
        session.background_target = session.active;
    }
}
