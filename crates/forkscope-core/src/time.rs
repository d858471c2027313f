//! Lab time: milliseconds since the lab started, always passed in by the caller.
//!
//! The core never reads a clock, so every timer rule (grace windows, backoff, retry budgets)
//! is reproducible and testable without sleeping.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An instant on the lab clock, in milliseconds since the lab started.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct LabTime(u64);

impl LabTime {
    pub const ZERO: LabTime = LabTime(0);

    pub const fn from_millis(ms: u64) -> Self {
        LabTime(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + span`, saturating at the end of time rather than wrapping.
    #[must_use]
    pub const fn plus(self, span_ms: u64) -> Self {
        LabTime(self.0.saturating_add(span_ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn since(self, earlier: LabTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for LabTime {
    /// `4.2 s`, `12.05 s`: a person reads seconds; millisecond precision is kept when present.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_seconds(self.0, f)
    }
}

/// Formats a span or instant given in milliseconds as seconds, trimming needless zeros.
pub(crate) fn fmt_seconds(ms: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let secs = ms / 1000;
    let frac = ms % 1000;
    if frac == 0 {
        write!(f, "{secs}.0 s")
    } else if frac % 100 == 0 {
        write!(f, "{secs}.{} s", frac / 100)
    } else if frac % 10 == 0 {
        write!(f, "{secs}.{:02} s", frac / 10)
    } else {
        write!(f, "{secs}.{frac:03} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_seconds_without_needless_zeros() {
        assert_eq!(LabTime::from_millis(4200).to_string(), "4.2 s");
        assert_eq!(LabTime::from_millis(5000).to_string(), "5.0 s");
        assert_eq!(LabTime::from_millis(12_050).to_string(), "12.05 s");
        assert_eq!(LabTime::from_millis(7).to_string(), "0.007 s");
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(LabTime::from_millis(u64::MAX).plus(5).as_millis(), u64::MAX);
        assert_eq!(LabTime::from_millis(3).since(LabTime::from_millis(9)), 0);
        assert_eq!(LabTime::from_millis(9).since(LabTime::from_millis(3)), 6);
    }
}
