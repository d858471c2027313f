//! What the search may hold in memory, and what it does hold, in bytes. The explorer keeps a
//! fingerprint and a link for every state it found, so memory grows with the states found:
//! `--depth 30` would grow past any machine, and the allocator would abort the process. With
//! a budget the search stops cleanly at the last depth it explored in full instead.
//!
//! Estimated, not measured: the core reads no clock and no `/proc`, and an estimate keeps a
//! run reproducible (the same bounds stop at the same state on every machine).

use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A number of bytes, written and read as a person does: `512MiB`, `2GiB`, `1073741824`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

const UNITS: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

impl ByteSize {
    pub const fn mib(n: u64) -> Self {
        ByteSize(n << 20)
    }

    pub const fn gib(n: u64) -> Self {
        ByteSize(n << 30)
    }

    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    /// Exactly when a unit divides the size (`1 GiB`, `1536 MiB`, `64 KiB`), else about how
    /// many MiB or KiB (`612.4 MiB`, `745.3 KiB`); below a KiB, bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let exact = |(_, size): &&(&str, u64)| self.0 >= *size && self.0 % size == 0;
        if self.0 >= 1 << 20 {
            return match UNITS[..3].iter().find(exact) {
                Some((unit, size)) => write!(f, "{} {unit}", self.0 / size),
                None => write!(f, "{:.1} MiB", self.0 as f64 / (1u64 << 20) as f64),
            };
        }
        match UNITS[3..].iter().find(exact) {
            Some((unit, size)) => write!(f, "{} {unit}", self.0 / size),
            None if self.0 >= 1 << 10 => write!(f, "{:.1} KiB", self.0 as f64 / 1024.0),
            None => write!(f, "{} bytes", self.0),
        }
    }
}

impl Serialize for ByteSize {
    /// As a plain number of bytes: what a script compares.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

/// A size that does not read as one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    #[error(
        "{0:?} is not a size: write bytes, or a number with KiB, MiB, GiB or TiB (512MiB, 2GiB)"
    )]
    NotASize(String),
    #[error("{0:?} is more bytes than fit in 64 bits")]
    TooLarge(String),
}

impl FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let digits = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(trimmed.len());
        let (number, unit) = trimmed.split_at(digits);
        let not_a_size = || ByteSizeError::NotASize(text.to_owned());
        let number: u64 = number.parse().map_err(|_| not_a_size())?;
        let unit = unit.trim();
        // Binary units only: "GB" means 10⁹ to some and 2³⁰ to others, so it is refused.
        let scale = if unit.is_empty() || unit == "B" {
            1
        } else {
            UNITS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(unit))
                .map(|(_, size)| *size)
                .ok_or_else(not_a_size)?
        };
        number
            .checked_mul(scale)
            .map(ByteSize)
            .ok_or_else(|| ByteSizeError::TooLarge(text.to_owned()))
    }
}

/// The budget when none is given: a small share of a development machine that others use
/// too, and still enough for every schedule to depth 18 under fenced (foreign GETs included,
/// deliveries interleaved), past what CI checks (12).
pub const DEFAULT_MEMORY_BUDGET: ByteSize = ByteSize::gib(1);

/// Bytes one whole lab state holds while it is rebuilt and expanded: the
/// [`Sim`](crate::sim::Sim) (1,296 bytes inline) and what it owns on the heap (sessions,
/// streams and their replay buffers, the client, the checker), plus the allocator's overhead.
///
/// Measured on fenced's breadth-first frontiers with a counting allocator (2026-12-04): a
/// clone requested 5,118 bytes in 22 allocations at depth 8, 5,594 at depth 11 and 6,038 in
/// 26 at depth 14 (about 150 bytes more a level); random schedules 40 steps deep averaged
/// 5,549, so the growth flattens. With glibc's ~16 bytes per allocation that is 6.5 KB at
/// depth 14; 7 KiB leaves room for a few more levels.
pub const FRONTIER_STATE_BYTES: u64 = 7 * 1024;

/// Bytes each distinct state costs for the rest of the search: its 16-byte fingerprint in
/// the visited set (one control byte more, at most 7/8 full) and its 5-byte link in the tree,
/// taken at the worst moment, when a table or a level doubles and the old and the new both
/// live (3 × 8/7 × 17 + 3 × 5 = 73).
pub const VISITED_STATE_BYTES: u64 = 80;

/// Bytes the search holds besides its visited states: on each thread, a path of states being
/// rebuilt and expanded (a [`FRONTIER_STATE_BYTES`] state per level) and a round of
/// transitions waiting to be merged — about 1.5 MiB a thread at depth 18. A constant rather
/// than a count of threads, so the same bounds stop at the same state on every machine.
pub const WORKING_BYTES: u64 = 4 << 20;

/// The search's estimated memory after `visited` distinct states.
pub fn estimate(visited: u64) -> ByteSize {
    ByteSize(
        visited
            .saturating_mul(VISITED_STATE_BYTES)
            .saturating_add(WORKING_BYTES),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_and_print_as_a_person_writes_them() {
        for (text, bytes) in [
            ("1073741824", 1 << 30),
            ("512MiB", 512 << 20),
            ("2GiB", 2 << 30),
            ("2 gib", 2 << 30),
            ("64KiB", 64 << 10),
            ("100B", 100),
        ] {
            assert_eq!(text.parse(), Ok(ByteSize(bytes)), "{text}");
        }
        for bad in ["", "GiB", "1.5GiB", "2GB", "-1", "12 parsecs"] {
            assert!(
                matches!(bad.parse::<ByteSize>(), Err(ByteSizeError::NotASize(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            "17179869184GiB".parse::<ByteSize>(),
            Err(ByteSizeError::TooLarge(_))
        ));
        assert_eq!(ByteSize::gib(1).to_string(), "1 GiB");
        assert_eq!(ByteSize::mib(1536).to_string(), "1536 MiB");
        assert_eq!(ByteSize((612 << 20) + (400 << 10)).to_string(), "612.4 MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000 bytes");
        assert_eq!(ByteSize(64 << 10).to_string(), "64 KiB");
        assert_eq!(ByteSize(763_168).to_string(), "745.3 KiB");
        // What it prints, it reads.
        for size in [ByteSize::gib(1), ByteSize::mib(1536), ByteSize(1000)] {
            let printed = size.to_string().replace(' ', "").replace("bytes", "B");
            assert_eq!(printed.parse(), Ok(size));
        }
    }
}
