//! A tool call's lease: how long its runner may go without committing a step before another
//! replica may take the call over. Judged by the store's clock alone, so replicas whose clocks
//! disagree still agree on expiry.

use super::Lease;

/// How long a lease lasts past its last renewal. A runner renews with every committed step, and
/// between steps at a third of this, so one missed renewal does not cost the lease.
pub const DEFAULT_LEASE_MS: u64 = 2_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    Held { remaining_ms: u64 },
    Expired,
}

pub fn lease_state(lease: &Lease, store_now_ms: u64) -> LeaseState {
    if store_now_ms >= lease.until_ms {
        LeaseState::Expired
    } else {
        LeaseState::Held {
            remaining_ms: lease.until_ms - store_now_ms,
        }
    }
}
