//! What one record does to itself (expiry, refresh, its log, how it reads as a
//! `StreamRecord`), apart from the store operations in the module above.

use super::*;

impl Stream {
    /// Whether the record is still kept at `now`: a finished stream for its retention from
    /// when it finished, any other for the idle time from its last request.
    pub(super) fn kept(&self, now: u64, retention: &Retention) -> bool {
        match self.finished_ms {
            Some(at) => now < at + retention.finished_ms,
            None => now.saturating_sub(self.touched_ms) < retention.session_idle_ms,
        }
    }

    /// A request read or wrote it. A finished stream keeps the retention it was given.
    pub(super) fn touch(&mut self, now: u64) {
        if self.state != RecordState::Finished {
            self.touched_ms = now;
        }
    }

    pub(super) fn finish(&mut self, now: u64) {
        self.state = RecordState::Finished;
        self.finished_ms = Some(now);
    }

    /// The events after `after` of up to `max` batches holding any.
    pub(super) fn after(&self, after: u64, max: usize) -> Events {
        let skip = self.log.partition_point(|e| e.batch_last <= after);
        let mut events = Vec::new();
        let (mut batches, mut batch) = (0, None);
        for e in self.log.range(skip..) {
            if batch != Some(e.batch_last) {
                batches += 1;
                if batches > max {
                    break;
                }
                batch = Some(e.batch_last);
            }
            if e.seq > after {
                events.push((e.seq, e.data.clone()));
            }
        }
        events
    }

    pub(super) fn record(&self, stream: StreamId, now: u64) -> Snapshot {
        Snapshot {
            record: self.stream_record(stream, now),
            call: self.call.as_ref().map(|c| CallSpec::clone(&c.spec)),
        }
    }

    pub(super) fn stream_record(&self, stream: StreamId, now: u64) -> StreamRecord {
        StreamRecord {
            stream,
            kind: self.kind,
            key: self.key,
            state: self.state,
            epoch: self.epoch,
            owner: self.owner.to_string(),
            high_water: self.high_water,
            oldest_kept: self.log.front().map_or(self.high_water + 1, |e| e.seq),
            call: self.call.as_ref().map(|c| CallRecord {
                steps: c.spec.steps,
                delay_ms: c.spec.delay_ms,
                done: c.done,
                lease: c.lease.clone(),
            }),
            now_ms: now,
            forgotten: self.forgotten,
        }
    }
}

/// The refusal of a write or an attach to a record that is not there: epoch 0, which no record
/// holds (every stream starts at 1), held by no one.
pub(super) fn no_record(stream: StreamId, writer: &str, writer_epoch: u64) -> StaleEpoch {
    StaleEpoch {
        stream,
        writer: writer.to_owned(),
        writer_epoch,
        current: 0,
        holder: String::new(),
    }
}

impl Session {
    /// The adoption rule, for [`StoreMachine::adopt`] and [`StoreMachine::resume`].
    pub(super) fn take_over(
        &mut self,
        stream: StreamId,
        expect_lease: u64,
        owner: &str,
        now: u64,
        retention: &Retention,
    ) -> Adoption {
        let Some(s) = self.stream(stream, now, retention) else {
            return Adoption::Lost;
        };
        s.touch(now);
        let live = s.state == RecordState::Live;
        let Some(call) = s.call.as_mut() else {
            return Adoption::Lost;
        };
        if call.lease.epoch != expect_lease || !live {
            return Adoption::Lost;
        }
        if let LeaseState::Held { remaining_ms } = lease_state(&call.lease, now) {
            return Adoption::NotExpired { remaining_ms };
        }
        call.lease = Lease {
            epoch: call.lease.epoch + 1,
            owner: owner.to_owned(),
            until_ms: now + retention.lease_ms,
        };
        Adoption::Adopted {
            lease: call.lease.epoch,
            done: call.done,
        }
    }

    /// The stream's record if it is still kept; one past its time is dropped.
    pub(super) fn stream(
        &mut self,
        stream: StreamId,
        now: u64,
        retention: &Retention,
    ) -> Option<&mut Stream> {
        self.stream_shared(stream, now, retention)
            .map(Arc::make_mut)
    }

    /// The stream's record if it is still kept, refreshed for a read: written (copied, if a
    /// clone of the store shares it) only when the refresh changes it.
    pub(super) fn read(
        &mut self,
        stream: StreamId,
        now: u64,
        retention: &Retention,
    ) -> Option<&Stream> {
        let s = self.stream_shared(stream, now, retention)?;
        if s.state != RecordState::Finished && s.touched_ms != now {
            Arc::make_mut(s).touch(now);
        }
        Some(s)
    }

    /// The stream's record if it is still kept, as shared; one past its time is dropped.
    pub(super) fn stream_shared(
        &mut self,
        stream: StreamId,
        now: u64,
        retention: &Retention,
    ) -> Option<&mut Arc<Stream>> {
        if self
            .streams
            .get(&stream.0)
            .is_some_and(|s| !s.kept(now, retention))
        {
            self.streams.remove(&stream.0);
        }
        self.streams.get_mut(&stream.0)
    }
}
