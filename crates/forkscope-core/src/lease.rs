//! A lease: how long a runner may go without renewing before another may take its work over.
//! Both revisions' runners hold one — a 2025-11-25 tool call's on a replica, a 2026-07-28 task's
//! anywhere — and this is the one rule of when it has run out, judged by the store's clock alone,
//! so runners whose clocks disagree still agree on expiry.

/// How long a lease lasts past its last renewal.
pub const DEFAULT_LEASE_MS: u64 = 2_000;

/// Where a lease stands at a moment of the store's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    Held { remaining_ms: u64 },
    Expired,
}

impl LeaseState {
    /// A lease held until `until_ms`, read at `now_ms` (both on the store's clock).
    pub fn at(until_ms: u64, now_ms: u64) -> LeaseState {
        if now_ms >= until_ms {
            LeaseState::Expired
        } else {
            LeaseState::Held {
                remaining_ms: until_ms - now_ms,
            }
        }
    }

    pub fn is_expired(self) -> bool {
        self == LeaseState::Expired
    }
}

/// How often a runner renews a lease of `lease_ms`, whatever its steps' length: at a third of
/// it, so one late or lost renewal does not cost the lease.
pub fn renew_every(lease_ms: u64) -> u64 {
    (lease_ms / 3).max(1)
}
