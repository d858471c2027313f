//! A tool call's lease on a replica: the core's one lease rule ([`crate::lease`]) read on a
//! call's record.

use super::Lease;
pub use crate::lease::{DEFAULT_LEASE_MS, LeaseState};

pub fn lease_state(lease: &Lease, store_now_ms: u64) -> LeaseState {
    LeaseState::at(lease.until_ms, store_now_ms)
}
