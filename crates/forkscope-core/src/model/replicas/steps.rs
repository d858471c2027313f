//! The replica lab's steps, each one operation of the store machine decided by `replica/`'s
//! own rules.

use super::*;
use crate::replica::store::{Adoption, Floor, Refused, Resumed, Writer};

impl ReplicaLab {
    pub(super) fn reconnect(&mut self, r: ReplicaId) {
        self.reconnects += 1;
        self.decisions += 1;
        let session = self.session;
        let Ok(Some(snapshot)) = self.store.snapshot(&session, STANDALONE, self.now_ms) else {
            return;
        };
        let record = snapshot.record;
        let cursor = WireCursor::Keyed {
            event: EventId {
                stream: STANDALONE,
                seq: self.cursor,
            },
            key: STANDALONE_KEY,
        }
        .to_string();
        let plan = replica::decide_get(self.policy, Some(&cursor), Some(&record), Some(&record));
        let (after, expect_epoch, proof) = match plan {
            GetPlan::Resume {
                after,
                expect_epoch,
                proof,
                ..
            } => (after, expect_epoch, proof),
            GetPlan::Reject(rejected) => {
                let by = self.by(r, None);
                let reason = rejected.reason();
                self.record(by, Record::ResumeRejected { session, reason });
                return;
            }
            // A keyed cursor of a stream the store keeps is resumed or refused, never answered
            // with a new stream: the client stays between attempts.
            GetPlan::Open { .. } => return,
        };
        // The compare-and-set: the record was read in this same step, so its epoch holds.
        let epoch = match expect_epoch {
            Some(_) => {
                let resumed = self.store.resume(
                    &session,
                    STANDALONE,
                    expect_epoch,
                    None,
                    r.name(),
                    self.now_ms,
                );
                match resumed {
                    Ok(Ok(resumed)) => resumed.epoch,
                    _ => return,
                }
            }
            None => None,
        };
        let high_water = record.high_water;
        let by = self.by(r, epoch);
        self.record(
            by,
            Record::ResumeAccepted {
                session,
                stream: STANDALONE,
                after,
                replay_len: (high_water - after) as usize,
                proof,
                // Across replicas the fence is the stream's epoch, not a connection.
                fenced_connection: None,
            },
        );
        self.record(
            by,
            Record::Attached {
                session,
                stream: STANDALONE,
                connection: ConnectionId(u64::from(self.reconnects)),
            },
        );
        let replica = self.replica_mut(r);
        replica.delivery = Some(Delivering {
            epoch,
            sent: after,
            replay_to: epoch.is_none().then_some(high_water),
        });
        replica.emitter = Some(epoch);
        self.connection = Connection::On(r);
        // Read now, not from the guards: this step wrote the store.
        if self.read_guards().call_live {
            self.resume_call(r);
        }
    }

    /// The client's GET for its tool call's stream, through `r`: a call whose lease expired is
    /// adopted here, under a bumped lease epoch.
    pub(super) fn resume_call(&mut self, r: ReplicaId) {
        let session = self.session;
        let Ok(Some(snapshot)) = self.store.snapshot(&session, CALL, self.now_ms) else {
            return;
        };
        self.decisions += 1;
        let record = snapshot.record;
        let cursor = WireCursor::Keyed {
            event: EventId {
                stream: CALL,
                seq: 0,
            },
            key: CALL_KEY,
        }
        .to_string();
        let plan = replica::decide_get(self.policy, Some(&cursor), Some(&record), None);
        let GetPlan::Resume {
            expect_epoch,
            adopt,
            ..
        } = plan
        else {
            return;
        };
        if expect_epoch.is_none() && adopt.is_none() {
            return;
        }
        let resumed = self
            .store
            .resume(&session, CALL, expect_epoch, adopt, r.name(), self.now_ms);
        let Ok(Ok(Resumed {
            adoption: Some(Adoption::Adopted { lease, done }),
            ..
        })) = resumed
        else {
            return;
        };
        self.replica_mut(r).runner = Some(Runner { lease, done });
        let by = self.by(r, Some(lease));
        self.record(
            by,
            Record::CallAdopted {
                session,
                stream: CALL,
                lease,
                done,
            },
        );
    }

    pub(super) fn emit(&mut self, r: ReplicaId) {
        self.emits += 1;
        let Some(epoch) = self.replica(r).emitter else {
            return;
        };
        let (session, name) = (self.session, r.name());
        // No rollback here: the writer's floor (what its last write returned) never binds.
        let writer = match epoch {
            Some(epoch) => Writer::Epoch {
                epoch,
                name,
                background: None,
                floor: 0,
            },
            None => Writer::Unfenced {
                name,
                background: None,
            },
        };
        let event = [String::new()];
        match self
            .store
            .append(&session, STANDALONE, writer, &event, false, self.now_ms)
        {
            Ok(Ok(_)) => {
                self.written_by.push(r);
                self.appended += 1;
            }
            Ok(Err(Refused::Stale(stale))) => {
                // Refused: the emitter learns its epoch is stale and stops.
                self.replica_mut(r).emitter = None;
                let by = self.by(r, epoch);
                self.record(
                    by,
                    Record::StaleWriteRefused {
                        session,
                        stream: STANDALONE,
                        epoch: epoch.unwrap_or(0),
                        current: stale.current,
                        holder: ReplicaId::parse(&stale.holder),
                    },
                );
            }
            _ => self.replica_mut(r).emitter = None,
        }
    }

    pub(super) fn send(&mut self, r: ReplicaId) {
        let Some(seq) = self.next_send(r) else {
            return;
        };
        let Some(delivery) = self.replica(r).delivery.clone() else {
            return;
        };
        let stored = self.stored(STANDALONE).map_or(0, |s| s.epoch);
        if let Some(epoch) = delivery.epoch
            && !replica::admits(self.policy, stored, epoch)
        {
            // The read carries the epoch too: a superseded delivery ends instead of sending.
            self.replica_mut(r).delivery = None;
            return;
        }
        if let Some(d) = self.replica_mut(r).delivery.as_mut() {
            d.sent = seq;
        }
        let session = self.session;
        let key: Arc<str> = format!("{}:bg:{seq}", session.short()).into();
        let by = self.by(r, delivery.epoch);
        self.record(
            by,
            Record::Emitted {
                session,
                stream: STANDALONE,
                seq,
                key: key.clone(),
                copied: false,
            },
        );
        if self.connection != Connection::On(r) {
            // A half-open connection: the send goes nowhere the client reads.
            return;
        }
        let event = EventId {
            stream: STANDALONE,
            seq,
        };
        let applied = seq > self.cursor;
        self.record(
            None,
            Record::Delivered {
                session,
                event,
                key,
                applied,
            },
        );
        if applied {
            self.applied += 1;
            let from = EventId {
                stream: STANDALONE,
                seq: self.cursor,
            };
            self.cursor = seq;
            self.record(
                None,
                Record::CursorMoved {
                    session,
                    from: Some(from),
                    to: event,
                    reset: false,
                },
            );
        }
    }

    pub(super) fn call_start(&mut self, r: ReplicaId) {
        let session = self.session;
        let new = NewStream {
            kind: StreamKind::Request,
            key: CALL_KEY,
            owner: r.name().into(),
            call: Some(call_spec()),
            fence: None,
        };
        self.called = true;
        if self.store.open_stream(&session, &new, self.now_ms) != Ok(Ok(CALL)) {
            return;
        }
        self.replica_mut(r).runner = Some(Runner { lease: 1, done: 0 });
        let by = self.by(r, fenced(self.policy, 1));
        self.record(
            by,
            Record::StreamOpened {
                session,
                stream: CALL,
                stream_kind: StreamKind::Request,
                ids: IdScheme::Keyed,
                flagged_new: true,
                request: None,
            },
        );
    }

    pub(super) fn call_step(&mut self, r: ReplicaId) {
        let Some(runner) = self.replica(r).runner else {
            return;
        };
        let (session, name) = (self.session, r.name());
        // The call's next step, as the core's machine has it: a progress step, or the result,
        // which finishes the stream.
        let mut call = runner.call(session, self.now_ms);
        if call
            .take_due(LabTime::from_millis(self.now_ms), 1)
            .is_empty()
        {
            return;
        }
        let (done, finish) = (call.done(), call.is_over());
        let writer = match self.policy {
            Policy::Fenced => Writer::Lease {
                epoch: runner.lease,
                name,
                done: Some(done),
                floor: Floor::Check(0),
            },
            _ => Writer::Unfenced {
                name,
                background: None,
            },
        };
        let event = [String::new()];
        match self
            .store
            .append(&session, CALL, writer, &event, finish, self.now_ms)
        {
            Ok(Ok(_)) => {
                self.replica_mut(r).runner = (!finish).then_some(Runner { done, ..runner });
            }
            Ok(Err(Refused::Stale(stale))) => {
                self.replica_mut(r).runner = None;
                let by = self.by(r, Some(runner.lease));
                self.record(
                    by,
                    Record::StaleWriteRefused {
                        session,
                        stream: CALL,
                        epoch: runner.lease,
                        current: stale.current,
                        holder: ReplicaId::parse(&stale.holder),
                    },
                );
            }
            _ => self.replica_mut(r).runner = None,
        }
    }
}
