//! A stream's life after it was opened: its connection ends (it is orphaned, its grace window
//! starts), it is fenced, its grace or retention runs out, its session idles out. The timers
//! are polled in the quinn style: [`Server::poll_timeout`], then [`Server::handle_timeout`].

use super::{Expired, Server, Session, StreamState};
use crate::history::{History, Record};
use crate::ids::{ConnectionId, SessionId, StreamId};
use crate::policy::Policy;
use crate::time::LabTime;
use crate::vocabulary::OrphanCause;

impl Server {
    /// The earliest moment a session with nothing attached expires.
    pub(super) fn next_idle_deadline(&self) -> Option<LabTime> {
        let idle = self.config.session_idle_ms;
        self.sessions
            .values()
            .filter(|s| !s.in_use())
            .map(|s| s.last_activity.plus(idle))
            .min()
    }

    /// The adapter judged a stream's connection gone: it ended (EOF, reset), or stopped taking
    /// bytes (a NAT drop is only noticed that way). A live stream is orphaned: its grace
    /// window starts, recorded with `cause`. Returns whether it was.
    pub fn connection_closed(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        connection: ConnectionId,
        cause: OrphanCause,
        history: &mut History,
    ) -> bool {
        let Some(owner) = self.sessions.get_mut(&session) else {
            return false;
        };
        let Some(target) = owner.stream_mut(stream) else {
            return false;
        };
        if target.connection != Some(connection) {
            return false; // An old connection, already replaced by a resume.
        }
        target.connection = None;
        let live = target.state == StreamState::Live;
        // Its idle clock starts when its last connection ends.
        owner.last_activity = owner.last_activity.max(now);
        if live {
            self.orphan(now, session, stream, cause, history);
        }
        live
    }

    pub(super) fn orphan(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        cause: OrphanCause,
        history: &mut History,
    ) {
        let grace = self.config.grace_ms;
        let Some(target) = self.stream_mut(session, stream) else {
            return;
        };
        if target.state != StreamState::Live {
            return;
        }
        let grace_deadline = now.plus(grace);
        target.state = StreamState::Orphaned {
            since: now,
            grace_deadline,
            cause,
        };
        history.record(
            now,
            Record::Orphaned {
                session,
                stream,
                grace_deadline,
                cause,
            },
        );
    }

    pub(super) fn fence(
        &mut self,
        now: LabTime,
        session: SessionId,
        stream: StreamId,
        history: &mut History,
    ) {
        let Some(target) = self.stream_mut(session, stream) else {
            return;
        };
        if Session::ended(target.state) {
            return;
        }
        target.state = StreamState::Fenced { at: now };
        target.connection = None;
        history.record(now, Record::Fenced { session, stream });
    }

    /// The next deadline: a grace window, a finished stream's retention, or an idle session
    /// ending.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        self.sessions
            .values()
            .flat_map(|s| &s.streams)
            .filter_map(|s| match s.state {
                StreamState::Orphaned { grace_deadline, .. } => Some(grace_deadline),
                StreamState::Finished { retain_until, .. } => Some(retain_until),
                _ => None,
            })
            .chain(self.next_idle_deadline())
            .min()
    }

    /// Ends every session idle past its deadline; returns them.
    fn expire_idle_sessions(&mut self, now: LabTime, history: &mut History) -> Vec<SessionId> {
        let idle = self.config.session_idle_ms;
        let expired: Vec<SessionId> = self
            .sessions
            .values()
            .filter(|s| !s.in_use() && s.last_activity.plus(idle) <= now)
            .map(|s| s.id)
            .collect();
        for session in &expired {
            let _ = self.close_session(now, *session, history);
        }
        expired
    }

    /// Ends every orphan whose grace window is over: fenced under the fenced policy, merely
    /// closed under the naive one. Forgets the events of finished streams past retention.
    /// Returns what ended, for the adapter to stop writing.
    pub fn handle_timeout(&mut self, now: LabTime, history: &mut History) -> Vec<Expired> {
        self.expire_idle_sessions(now, history);
        let policy = self.policy;
        let budget = &mut self.budget;
        let mut expired = Vec::new();
        for session in self.sessions.values_mut() {
            for stream in &mut session.streams {
                if let StreamState::Finished { retain_until, .. } = stream.state
                    && retain_until <= now
                {
                    stream.state = StreamState::Closed { at: retain_until };
                    budget.release(stream.buffer.bytes());
                    stream.buffer.clear();
                    expired.push(Expired {
                        session: session.id,
                        stream: stream.id,
                        state: stream.state,
                        connection: stream.connection.take(),
                    });
                    continue;
                }
                let StreamState::Orphaned { grace_deadline, .. } = stream.state else {
                    continue;
                };
                if grace_deadline > now {
                    continue;
                }
                let connection = stream.connection.take();
                let (state, record) = match policy {
                    Policy::Fenced => (
                        StreamState::Fenced { at: grace_deadline },
                        Record::Fenced {
                            session: session.id,
                            stream: stream.id,
                        },
                    ),
                    // Unfenced: the orphan just ends (an SDK has no grace window to end; the
                    // lab's stands in for its notice of the broken connection).
                    _ => (
                        StreamState::Closed { at: grace_deadline },
                        Record::StreamClosed {
                            session: session.id,
                            stream: stream.id,
                        },
                    ),
                };
                stream.state = state;
                history.record(now, record);
                expired.push(Expired {
                    session: session.id,
                    stream: stream.id,
                    state,
                    connection,
                });
            }
        }
        expired
    }
}
