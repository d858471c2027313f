//! The logging utility's levels (RFC 5424's, as MCP names them), and the one rule they carry:
//! once a client sets a level with `logging/setLevel`, the server sends it log messages at that
//! level or more severe, and no others.

use serde::{Deserialize, Serialize};

/// The background emitter's events are log messages (`notifications/message`) of this level, on
/// one server and on replicas alike: a client that set a higher one is sent none of them.
pub const BACKGROUND_SEVERITY: LogLevel = LogLevel::Info;

/// A log message's severity, least severe first.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    /// The level a client named, spelled as MCP spells it; `None` for any other word.
    pub fn parse(word: &str) -> Option<LogLevel> {
        <LogLevel as strum::VariantArray>::VARIANTS
            .iter()
            .copied()
            .find(|level| level.as_str() == word)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every level's name, least severe first, for a refusal that lists them.
    pub fn names() -> Vec<&'static str> {
        <LogLevel as strum::VariantArray>::VARIANTS
            .iter()
            .map(|l| l.as_str())
            .collect()
    }

    /// The level as a number that orders as the levels do (0 = debug), for a store that
    /// compares it where the write lands (`append.lua`).
    pub fn rank(self) -> u8 {
        self as u8
    }

    /// The level of [`LogLevel::rank`] `rank`.
    pub fn of_rank(rank: u8) -> Option<LogLevel> {
        <LogLevel as strum::VariantArray>::VARIANTS
            .get(usize::from(rank))
            .copied()
    }

    /// Whether a message of `severity` is sent to a client that set this level (`None`: it set
    /// none, and every message is sent).
    pub fn sends(set: Option<LogLevel>, severity: LogLevel) -> bool {
        set.is_none_or(|min| severity >= min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_as_spelled_and_order_by_severity() {
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("Warning"), None);
        assert_eq!(LogLevel::parse("warn"), None);
        assert_eq!(LogLevel::names().len(), 8);
        assert!(LogLevel::Debug < LogLevel::Emergency);
        assert!(LogLevel::sends(None, LogLevel::Debug));
        assert!(LogLevel::sends(Some(LogLevel::Info), LogLevel::Info));
        assert!(!LogLevel::sends(Some(LogLevel::Notice), LogLevel::Info));
        for level in <LogLevel as strum::VariantArray>::VARIANTS {
            assert_eq!(LogLevel::of_rank(level.rank()), Some(*level));
        }
        assert_eq!(LogLevel::of_rank(8), None);
    }
}
