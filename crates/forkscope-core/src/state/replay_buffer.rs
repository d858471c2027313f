//! A bounded per-stream replay buffer whose replay of the k events after a cursor costs O(k).
//!
//! A stream's sequence numbers are consecutive, so the position of any kept event is plain
//! arithmetic from the oldest kept one: no search, no scan of the buffer.
//!
//! The events sit behind an `Arc`, so a connection can take a finished stream's replay without
//! copying it ([`ReplayBuffer::share_after`]): a finished stream takes no more events, and the
//! rare change to a shared buffer (shedding under the memory budget) copies it first.

use crate::event::Event;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(crate) struct ReplayBuffer {
    events: Arc<VecDeque<Event>>,
    capacity: usize,
    /// Bound on the bytes kept; the oldest go first, the newest event always stays.
    max_bytes: usize,
    bytes: usize,
}

/// What one kept event costs on the heap: its key and body (each an `Arc<str>`, with two
/// counters before the text) and its record.
fn cost(event: &Event) -> usize {
    const ARC_HEADER: usize = 2 * std::mem::size_of::<usize>();
    event.payload.key.len()
        + event.payload.body.len()
        + 2 * ARC_HEADER
        + std::mem::size_of::<Event>()
}

/// Why a replay after a cursor cannot be served gap-free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Evicted {
    pub oldest_kept: u64,
}

impl ReplayBuffer {
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        ReplayBuffer {
            events: Arc::new(VecDeque::with_capacity(capacity.min(64))),
            capacity,
            max_bytes,
            bytes: 0,
        }
    }

    /// Drops the oldest events until both bounds hold (the newest always stays).
    fn evict_to_bounds(&mut self) {
        while self.events.len() > 1
            && (self.events.len() > self.capacity || self.bytes > self.max_bytes)
        {
            if let Some(old) = Arc::make_mut(&mut self.events).pop_front() {
                self.bytes -= cost(&old);
            }
        }
    }

    /// Evicts the oldest events (the newest always stays) until `want` bytes are freed or
    /// only the newest is left; returns the bytes freed.
    pub fn shed(&mut self, want: usize) -> usize {
        let mut freed = 0;
        while freed < want && self.events.len() > 1 {
            if let Some(old) = Arc::make_mut(&mut self.events).pop_front() {
                let c = cost(&old);
                self.bytes -= c;
                freed += c;
            }
        }
        freed
    }

    /// Bytes kept, as counted against the bound.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends the next event; its sequence must follow the newest kept one.
    pub fn push(&mut self, event: Event) {
        debug_assert!(
            self.events
                .back()
                .is_none_or(|last| last.id.seq + 1 == event.id.seq),
            "replay buffer sequences must be consecutive"
        );
        self.bytes += cost(&event);
        Arc::make_mut(&mut self.events).push_back(event);
        self.evict_to_bounds();
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn oldest_seq(&self) -> Option<u64> {
        self.events.front().map(|e| e.id.seq)
    }

    /// The events strictly after `cursor` (exclusive), oldest first. `high_water` is the
    /// stream's newest emitted sequence; a cursor at it replays nothing. Errs when events after
    /// the cursor were evicted, so gap-freedom cannot be proven.
    pub fn after(
        &self,
        cursor: u64,
        high_water: u64,
    ) -> Result<impl ExactSizeIterator<Item = &Event> + '_, Evicted> {
        let start = self.start_after(cursor, high_water)?;
        Ok(self.events.range(start..))
    }

    /// The same events as [`ReplayBuffer::after`], shared rather than copied: O(1) whatever
    /// their number. Meant for a buffer that takes no more events (a finished stream): one
    /// that still does copies itself on its next event while the share is held.
    pub fn share_after(&self, cursor: u64, high_water: u64) -> Result<SharedEvents, Evicted> {
        let start = self.start_after(cursor, high_water)?;
        Ok(SharedEvents {
            events: self.events.clone(),
            start,
        })
    }

    /// The index in `events` of the first event after `cursor`.
    fn start_after(&self, cursor: u64, high_water: u64) -> Result<usize, Evicted> {
        let start = match self.events.front() {
            None => {
                if cursor < high_water {
                    return Err(Evicted {
                        oldest_kept: high_water + 1,
                    });
                }
                0
            }
            Some(front) => {
                let first = front.id.seq;
                if cursor.saturating_add(1) < first {
                    return Err(Evicted { oldest_kept: first });
                }
                // cursor >= first - 1, so this is an index into the kept range (or past it).
                usize::try_from(cursor + 1 - first)
                    .unwrap_or(usize::MAX)
                    .min(self.events.len())
            }
        };
        Ok(start)
    }

    /// Frees every kept event (a finished stream's retention ran out); a replay still being
    /// written keeps its share until it is done.
    pub fn clear(&mut self) {
        self.events = Arc::default();
        self.bytes = 0;
    }

    /// Every kept event, oldest first (the naive policy copies these into a fresh stream).
    pub fn iter(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }
}

/// The events after a cursor, shared with the buffer they were kept in (see
/// [`ReplayBuffer::share_after`]).
#[derive(Clone, Debug)]
pub(crate) struct SharedEvents {
    events: Arc<VecDeque<Event>>,
    start: usize,
}

impl SharedEvents {
    pub fn len(&self) -> usize {
        self.events.len() - self.start
    }

    pub fn get(&self, index: usize) -> Option<&Event> {
        self.events.get(self.start.checked_add(index)?)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Event> + '_ {
        self.events.range(self.start..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Payload;
    use crate::ids::{EventId, StreamId};
    use crate::time::LabTime;

    fn event(seq: u64) -> Event {
        Event {
            id: EventId {
                stream: StreamId(1),
                seq,
            },
            payload: Payload::new(format!("k{seq}"), "{}"),
            emitted_at: LabTime::from_millis(seq),
        }
    }

    fn seqs<'a>(it: impl Iterator<Item = &'a Event>) -> Vec<u64> {
        it.map(|e| e.id.seq).collect()
    }

    #[test]
    fn replays_exclusive_of_the_cursor() {
        let mut buf = ReplayBuffer::new(10, usize::MAX);
        for seq in 1..=5 {
            buf.push(event(seq));
        }
        assert_eq!(seqs(buf.after(0, 5).unwrap()), vec![1, 2, 3, 4, 5]);
        assert_eq!(seqs(buf.after(3, 5).unwrap()), vec![4, 5]);
        assert_eq!(seqs(buf.after(5, 5).unwrap()), Vec::<u64>::new());
    }

    #[test]
    fn eviction_makes_old_cursors_unprovable() {
        let mut buf = ReplayBuffer::new(3, usize::MAX);
        for seq in 1..=6 {
            buf.push(event(seq));
        }
        assert_eq!(buf.len(), 3);
        assert_eq!(buf.oldest_seq(), Some(4));
        assert_eq!(
            seqs(buf.after(3, 6).unwrap()),
            vec![4, 5, 6],
            "cursor just before oldest"
        );
        assert_eq!(buf.after(2, 6).err(), Some(Evicted { oldest_kept: 4 }));
    }

    #[test]
    fn the_byte_bound_evicts_oldest_first_and_keeps_the_newest() {
        let one = cost(&event(10)); // the largest of the ten (its key has two digits)
        let mut buf = ReplayBuffer::new(100, one * 3);
        for seq in 1..=10 {
            buf.push(event(seq));
        }
        assert_eq!((buf.len(), buf.oldest_seq()), (3, Some(8)));
        assert!(buf.bytes() <= one * 3);
        assert_eq!(buf.after(6, 10).err(), Some(Evicted { oldest_kept: 8 }));
        let mut tiny = ReplayBuffer::new(100, 1);
        tiny.push(event(1));
        assert_eq!(
            tiny.len(),
            1,
            "an event over the bound still stays while newest"
        );
    }

    /// A share is the same events as `after`, and stays whole whatever happens to the buffer
    /// afterwards (shed, cleared, or — for a buffer still taking events — pushed to).
    #[test]
    fn a_shared_replay_is_what_after_gives_and_outlives_changes_to_the_buffer() {
        let mut buf = ReplayBuffer::new(10, usize::MAX);
        for seq in 1..=5 {
            buf.push(event(seq));
        }
        let shared = buf.share_after(2, 5).unwrap();
        assert_eq!(shared.len(), 3);
        assert_eq!(seqs(shared.iter()), seqs(buf.after(2, 5).unwrap()));
        assert_eq!(shared.get(0).map(|e| e.id.seq), Some(3));
        assert_eq!(shared.get(3).map(|e| e.id.seq), None);
        buf.push(event(6));
        buf.shed(usize::MAX);
        assert_eq!(seqs(buf.iter()), vec![6]);
        buf.clear();
        assert_eq!(seqs(shared.iter()), vec![3, 4, 5]);
        assert_eq!(
            buf.share_after(0, 6).err(),
            Some(Evicted { oldest_kept: 7 })
        );
        assert_eq!(buf.share_after(6, 6).unwrap().len(), 0);
    }

    #[test]
    fn an_empty_buffer_serves_only_a_cursor_at_high_water() {
        let buf = ReplayBuffer::new(3, usize::MAX);
        assert_eq!(buf.after(0, 0).unwrap().len(), 0);
        assert_eq!(buf.after(0, 2).err(), Some(Evicted { oldest_kept: 3 }));
    }
}
