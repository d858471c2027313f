//! The replica lab's steps, each one store operation decided by `replica/`'s own rules.

use super::*;

impl ReplicaLab {
    pub(super) fn reconnect(&mut self, r: ReplicaId) {
        self.reconnects += 1;
        self.decisions += 1;
        let session = self.session;
        let record = self.standalone_snapshot();
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
            Some(read) => {
                self.standalone.epoch = read + 1;
                self.standalone.owner = r.to_string();
                Some(read + 1)
            }
            None => None,
        };
        let high_water = self.standalone.high_water;
        let by = self.by(r, epoch);
        self.record(
            by,
            Record::ResumeAccepted {
                session,
                stream: STANDALONE,
                after,
                replay_len: (high_water - after) as usize,
                proof,
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
        if self.call_running() {
            self.resume_call(r);
        }
    }

    /// The client's GET for its tool call's stream, through `r`: a call whose lease expired is
    /// adopted here, under a bumped lease epoch.
    pub(super) fn resume_call(&mut self, r: ReplicaId) {
        let Some(call) = self.call.as_ref() else {
            return;
        };
        self.decisions += 1;
        let record = StreamRecord {
            now_ms: self.now_ms,
            forgotten: None,
            ..call.clone()
        };
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
        let now_ms = self.now_ms;
        let session = self.session;
        let Some(call) = self.call.as_mut() else {
            return;
        };
        if let Some(read) = expect_epoch {
            call.epoch = read + 1;
            call.owner = r.to_string();
        }
        let Some(lease_epoch) = adopt else {
            return;
        };
        let Some(progress) = call.call.as_mut() else {
            return;
        };
        progress.lease = Lease {
            epoch: lease_epoch + 1,
            owner: r.to_string(),
            until_ms: now_ms + DEFAULT_LEASE_MS,
        };
        let done = progress.done;
        self.replica_mut(r).runner = Some(lease_epoch + 1);
        let by = self.by(r, Some(lease_epoch + 1));
        self.record(
            by,
            Record::CallAdopted {
                session,
                stream: CALL,
                lease: lease_epoch + 1,
                done,
            },
        );
    }

    pub(super) fn emit(&mut self, r: ReplicaId) {
        self.emits += 1;
        let Some(epoch) = self.replica(r).emitter else {
            return;
        };
        let stored = self.standalone.epoch;
        if replica::admits(self.policy, stored, epoch.unwrap_or(stored)) {
            self.standalone.high_water += 1;
            self.written_by.push(r);
            self.appended += 1;
            return;
        }
        // Refused: the emitter learns its epoch is stale and stops.
        self.replica_mut(r).emitter = None;
        let holder = ReplicaId::parse(&self.standalone.owner);
        let by = self.by(r, epoch);
        let session = self.session;
        self.record(
            by,
            Record::StaleWriteRefused {
                session,
                stream: STANDALONE,
                epoch: epoch.unwrap_or(0),
                current: stored,
                holder,
            },
        );
    }

    pub(super) fn send(&mut self, r: ReplicaId) {
        let Some(seq) = self.next_send(r) else {
            return;
        };
        let Some(delivery) = self.replica(r).delivery.clone() else {
            return;
        };
        let stored = self.standalone.epoch;
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
        self.call = Some(StreamRecord {
            stream: CALL,
            kind: StreamKind::Request,
            key: CALL_KEY,
            state: RecordState::Live,
            epoch: 1,
            owner: r.to_string(),
            high_water: 0,
            oldest_kept: 1,
            call: Some(CallRecord {
                steps: CALL_STEPS,
                delay_ms: 300,
                done: 0,
                lease: Lease {
                    epoch: 1,
                    owner: r.to_string(),
                    until_ms: self.now_ms + DEFAULT_LEASE_MS,
                },
            }),
            now_ms: self.now_ms,
            forgotten: None,
        });
        self.replica_mut(r).runner = Some(1);
        let by = self.by(r, fenced(self.policy, 1));
        self.record(
            by,
            Record::StreamOpened {
                session,
                stream: CALL,
                stream_kind: StreamKind::Request,
                ids: IdScheme::Keyed,
                flagged_new: true,
            },
        );
    }

    pub(super) fn call_step(&mut self, r: ReplicaId) {
        let Some(writer) = self.replica(r).runner else {
            return;
        };
        let policy = self.policy;
        let now_ms = self.now_ms;
        let Some(call) = self.call.as_mut() else {
            return;
        };
        let Some(progress) = call.call.as_mut() else {
            return;
        };
        let stored = progress.lease.epoch;
        if replica::admits(policy, stored, writer) {
            progress.done += 1;
            progress.lease.until_ms = now_ms + DEFAULT_LEASE_MS;
            call.high_water += 1;
            if progress.done > progress.steps {
                call.state = RecordState::Finished;
                self.replica_mut(r).runner = None;
            }
            return;
        }
        let holder = ReplicaId::parse(&progress.lease.owner);
        self.replica_mut(r).runner = None;
        let by = self.by(r, Some(writer));
        let session = self.session;
        self.record(
            by,
            Record::StaleWriteRefused {
                session,
                stream: CALL,
                epoch: writer,
                current: stored,
                holder,
            },
        );
    }
}
