//! What the dashboard's kept run weighs: an estimate of the heap bytes behind each thing time
//! travel keeps, so the run can be bounded in bytes rather than in counts (one moment can weigh
//! fifty times another, depending on how many exchanges and streams it shows).
//!
//! Estimates, not measurements, and deliberately on the high side: a `String` or `Vec` counts
//! its capacity, a shared `Arc<str>` counts wholly at every holder, a map its slots and a node's
//! bookkeeping. What the budget needs is proportion: twice the content, twice the weight.

use crate::lab::replicas::{Held, ReplicaView, StoredStream};
use crate::lab::{Exchange, ReplicasView, Snapshot};
use forkscope_core::history::{Counters, Entry, TaskLine, Verdict};
use forkscope_core::tasks::guarantee::GuaranteeStatus;
use forkscope_core::view::{ClientView, ConditionStatus, SessionView, StreamView};
use forkscope_core::{Anomaly, Record, View};
use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::Arc;

/// The heap bytes a value owns, beyond its own `size_of`.
pub trait Weigh {
    fn heap(&self) -> usize;
}

/// A value's whole weight: inline and heap.
pub fn weight<T: Weigh>(value: &T) -> usize {
    size_of::<T>() + value.heap()
}

/// An `Arc`'s two counters sit before its data.
const ARC_HEADER: usize = 2 * size_of::<usize>();
/// A B-tree leaf holds up to 11 entries, plus its parent link, index and length.
const BTREE_LEAF: usize = 11;
const BTREE_LEAF_EXTRA: usize = 16;
/// A tool call's resumption token is private to the core: counted at a token's usual length.
const TOKEN_ESTIMATE: usize = 64;

impl Weigh for String {
    fn heap(&self) -> usize {
        self.capacity()
    }
}

impl Weigh for Arc<str> {
    fn heap(&self) -> usize {
        ARC_HEADER + self.len()
    }
}

impl<T: Weigh> Weigh for Option<T> {
    fn heap(&self) -> usize {
        self.as_ref().map_or(0, T::heap)
    }
}

impl<T: Weigh> Weigh for Vec<T> {
    fn heap(&self) -> usize {
        self.capacity() * size_of::<T>() + self.iter().map(T::heap).sum::<usize>()
    }
}

impl<T: Weigh> Weigh for Arc<[T]> {
    fn heap(&self) -> usize {
        ARC_HEADER + self.len() * size_of::<T>() + self.iter().map(T::heap).sum::<usize>()
    }
}

impl<A: Weigh, B: Weigh> Weigh for (A, B) {
    fn heap(&self) -> usize {
        self.0.heap() + self.1.heap()
    }
}

/// A map of plain keys and values: its leaves, full or not.
fn btree<K, V>(map: &BTreeMap<K, V>) -> usize {
    map.len().div_ceil(BTREE_LEAF)
        * (BTREE_LEAF * (size_of::<K>() + size_of::<V>()) + BTREE_LEAF_EXTRA)
}

/// A hash table's slots for `capacity` entries of `T`: the entries and a control byte each.
pub fn table<T>(capacity: usize) -> usize {
    capacity * (size_of::<T>() + 1)
}

/// Types that own nothing on the heap.
macro_rules! plain {
    ($($t:ty),*) => {$(
        impl Weigh for $t {
            fn heap(&self) -> usize {
                0
            }
        }
    )*};
}
plain!(StreamView, usize, Held);

impl Weigh for Record {
    fn heap(&self) -> usize {
        match self {
            Record::Emitted { key, .. }
            | Record::LateEmitRefused { key, .. }
            | Record::Delivered { key, .. } => key.heap(),
            _ => 0,
        }
    }
}

impl Weigh for Entry {
    fn heap(&self) -> usize {
        let caused = self.caused.anomalies();
        let tags = if caused.is_empty() {
            0
        } else {
            ARC_HEADER
                + std::mem::size_of_val(caused)
                + caused.iter().map(Anomaly::heap).sum::<usize>()
        };
        self.record.heap() + tags
    }
}

impl Weigh for Exchange {
    fn heap(&self) -> usize {
        self.what.heap() + self.headers.heap()
    }
}

impl Weigh for SessionView {
    fn heap(&self) -> usize {
        self.short.heap() + self.streams.heap()
    }
}

impl Weigh for ClientView {
    fn heap(&self) -> usize {
        let request = self.request.as_ref().map_or(0, |r| {
            r.bound_stream.heap() + r.cursor.heap() + TOKEN_ESTIMATE
        });
        self.bound_stream.heap() + self.cursor.heap() + request
    }
}

impl Weigh for ConditionStatus {
    fn heap(&self) -> usize {
        self.note.heap()
    }
}

impl Weigh for GuaranteeStatus {
    fn heap(&self) -> usize {
        0
    }
}

impl Weigh for TaskLine {
    fn heap(&self) -> usize {
        // Its call's name is shared with the checker's own record of it.
        0
    }
}

impl Weigh for Anomaly {
    fn heap(&self) -> usize {
        match self {
            Anomaly::Duplicate { key, .. } => key.heap(),
            _ => 0,
        }
    }
}

impl Weigh for Verdict {
    fn heap(&self) -> usize {
        btree(&self.counts) + self.headline.heap() + self.first.heap()
    }
}

impl Weigh for Counters {
    fn heap(&self) -> usize {
        btree(&self.resumes_rejected)
    }
}

impl Weigh for View {
    fn heap(&self) -> usize {
        self.sessions.heap()
            + self.client.heap()
            + self.conditions.heap()
            + self.guarantees.heap()
            + self.tasks.heap()
            + self.verdict.heap()
            + self.counters.heap()
    }
}

impl Weigh for ReplicaView {
    fn heap(&self) -> usize {
        self.holds.heap() + self.recent.heap()
    }
}

impl Weigh for StoredStream {
    fn heap(&self) -> usize {
        self.owner.heap()
            + self
                .lease
                .as_ref()
                .map_or(0, |(_, holder, _)| holder.heap())
    }
}

impl Weigh for ReplicasView {
    fn heap(&self) -> usize {
        self.store.heap() + self.replicas.heap() + self.streams.heap() + self.store_error.heap()
    }
}

impl Weigh for Snapshot {
    fn heap(&self) -> usize {
        self.view.heap() + self.exchanges.heap() + self.recent.heap() + self.replicas.heap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::LabTime;

    fn exchange(what: &str) -> Exchange {
        Exchange {
            at: LabTime::ZERO,
            method: "GET",
            what: what.to_owned(),
            status: 200,
            headers: vec![("← mcp-session-id".to_owned(), "0123456789abcdef".to_owned())],
        }
    }

    #[test]
    fn twice_the_content_weighs_twice_as_much() {
        let one: Vec<Exchange> = (0..32).map(|i| exchange(&format!("GET {i}"))).collect();
        let two: Vec<Exchange> = (0..64).map(|i| exchange(&format!("GET {i}"))).collect();
        let (one, two) = (weight(&one), weight(&two));
        assert!(one > 32 * size_of::<Exchange>(), "the strings count: {one}");
        let ratio = two as f64 / one as f64;
        assert!((1.9..=2.1).contains(&ratio), "{one} → {two}");
    }

    #[test]
    fn a_string_weighs_what_it_allocated() {
        let mut s = String::with_capacity(100);
        s.push('x');
        assert_eq!(s.heap(), 100);
        assert_eq!(weight(&s), 100 + size_of::<String>());
        let key: Arc<str> = Arc::from("bg:12");
        assert_eq!(key.heap(), ARC_HEADER + 5);
    }
}
