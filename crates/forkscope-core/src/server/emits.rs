//! Emits: onto a tool call's request stream, or from the session's background task onto its
//! standalone stream. A fenced stream refuses (and the refusal is recorded): a late emit never
//! lands on a stream the client abandoned.

use super::{BackgroundEmit, EmitError, Server, Session, StreamKind, StreamState};
use crate::event::{Event, Payload};
use crate::history::{History, Record};
use crate::ids::{ConnectionId, Entropy, EventId, IdScheme, ResumptionToken, SessionId, StreamId};
use crate::policy::Policy;
use crate::resume;
use crate::state::ReplayBudget;
use crate::time::LabTime;

impl Server {
    /// A POST whose response is an SSE stream (a tool call): a request stream, resumable by its
    /// own token, outside the standalone lineage. `request`: the POST's JSON-RPC id, when
    /// numeric (recorded: it names a call the client gives up before hearing from it).
    pub fn open_request_stream(
        &mut self,
        now: LabTime,
        session: SessionId,
        request: Option<u64>,
        connection: ConnectionId,
        rng: &mut impl Entropy,
        history: &mut History,
    ) -> Result<(StreamId, ResumptionToken), EmitError> {
        if !self.sessions.contains_key(&session) {
            return Err(EmitError::UnknownSession);
        }
        self.check_budget()
            .map_err(|budget| EmitError::OverBudget { budget })?;
        let ids = match self.policy {
            Policy::Fenced => resume::fenced::id_scheme(&self.config),
            Policy::Naive => IdScheme::Bare,
            sdk => resume::sdk::quirks(sdk).map_or(IdScheme::Bare, |q| q.ids),
        };
        let minted = self
            .mint_stream(
                now,
                session,
                StreamKind::Request,
                request,
                ids,
                true,
                Some(connection),
                rng,
                history,
            )
            .map_err(|max| EmitError::TooManyStreams { max })?;
        self.touch(now, session);
        Ok(minted)
    }

    /// Emits onto a given stream. Refused (and recorded) on a fenced stream: a late emit can
    /// never land on a stream the client has abandoned.
    pub fn emit(
        &mut self,
        now: LabTime,
        session_id: SessionId,
        stream_id: StreamId,
        payload: Payload,
        history: &mut History,
    ) -> Result<EventId, EmitError> {
        let session = self
            .sessions
            .get_mut(&session_id)
            .ok_or(EmitError::UnknownSession)?;
        emit_onto(now, session, stream_id, payload, &mut self.budget, history)
    }

    /// Emits from the session's background task. The task stays on the stream it writes to
    /// until that stream ends — which is how, under the naive policy, emits keep landing on an
    /// orphan. When its stream was fenced, the emit there is refused and counted, and the task
    /// moves to the session's active stream.
    pub fn emit_background(
        &mut self,
        now: LabTime,
        session_id: SessionId,
        payload: Payload,
        history: &mut History,
    ) -> Result<BackgroundEmit, EmitError> {
        let session = self
            .sessions
            .get_mut(&session_id)
            .ok_or(EmitError::UnknownSession)?;
        let mut refused_on = None;
        if let Some(target) = session.background_target {
            match emit_onto(
                now,
                session,
                target,
                payload.clone(),
                &mut self.budget,
                history,
            ) {
                Ok(event) => return Ok(BackgroundEmit { event, refused_on }),
                Err(EmitError::Fenced(stream)) => refused_on = Some(stream),
                Err(_) => {}
            }
        }
        session.background_target = session
            .active
            .filter(|id| session.stream(*id).is_some_and(|s| s.state.accepts_emits()));
        let target = session.background_target.ok_or(EmitError::NoStream)?;
        let event = emit_onto(now, session, target, payload, &mut self.budget, history)?;
        Ok(BackgroundEmit { event, refused_on })
    }

    /// The events after `after` (exclusive) on a stream, oldest first, in O(k). Errs when the
    /// stream is unknown or the events were evicted.
    pub fn replay(
        &self,
        session: SessionId,
        stream: StreamId,
        after: u64,
    ) -> Option<impl ExactSizeIterator<Item = &Event> + '_> {
        let stream = self.sessions.get(&session)?.stream(stream)?;
        stream.buffer.after(after, stream.high_water).ok()
    }

    /// A request stream's response was sent: nothing more is emitted on it, but it stays
    /// resumable for the retention window, so a client cut off before the result gets it.
    pub fn finish_request_stream(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        history: &mut History,
    ) {
        let retain_until = now.plus(self.config.retention_ms);
        let Some(target) = self.stream_mut(session, stream) else {
            return;
        };
        if target.state.accepts_emits() {
            target.state = StreamState::Finished {
                at: now,
                retain_until,
            };
            history.record(now, Record::StreamClosed { session, stream });
        }
    }
}

fn emit_onto(
    now: LabTime,
    session: &mut Session,
    stream_id: StreamId,
    payload: Payload,
    budget: &mut ReplayBudget,
    history: &mut History,
) -> Result<EventId, EmitError> {
    let session_id = session.id;
    let stream = session
        .stream_mut(stream_id)
        .ok_or(EmitError::UnknownStream(stream_id))?;
    match stream.state {
        StreamState::Fenced { .. } => {
            history.record(
                now,
                Record::LateEmitRefused {
                    session: session_id,
                    stream: stream_id,
                    key: payload.key,
                },
            );
            Err(EmitError::Fenced(stream_id))
        }
        StreamState::Closed { .. } | StreamState::Finished { .. } => {
            Err(EmitError::Closed(stream_id))
        }
        StreamState::Live | StreamState::Orphaned { .. } => {
            let key = payload.key.clone();
            let event = stream.push(now, payload, budget);
            if stream.kind == StreamKind::Standalone {
                session.counter += 1;
            }
            history.record(
                now,
                Record::Emitted {
                    session: session_id,
                    stream: stream_id,
                    seq: event.seq,
                    key,
                    copied: false,
                },
            );
            Ok(event)
        }
    }
}
