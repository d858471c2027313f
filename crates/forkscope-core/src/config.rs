//! Lab configuration: grace window, client retry budget and backoff, and every bound that keeps
//! memory finite. Condition 5 is checked here.

use crate::policy::Policy;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The client's reconnect schedule: exponential backoff from `initial_backoff_ms`, capped at
/// `max_backoff_ms`, until `budget_ms` have passed since the connection was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub budget_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_backoff_ms: 250,
            max_backoff_ms: 2_000,
            budget_ms: 15_000,
        }
    }
}

/// Where the fenced policy reads a stream's identity from on a resume (condition 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamIdentity {
    /// Event ids carry the stream's key (`s2-41.<key>`), so `Last-Event-ID` alone
    /// co-validates: what stock MCP clients send is enough to resume. A token header, when
    /// sent as well, must name the same stream.
    #[default]
    EventId,
    /// The seed's two-header model: ids say `s2-41` and a resume needs the
    /// `Mcp-Resumption-Token` header too; without it the fenced server refuses (`missing_token`).
    /// Teaches the `strip_token` lesson; stock clients cannot resume under it.
    TokenHeader,
}

impl StreamIdentity {
    pub fn name(self) -> &'static str {
        match self {
            StreamIdentity::EventId => "event id",
            StreamIdentity::TokenHeader => "token header",
        }
    }

    pub fn toggled(self) -> Self {
        match self {
            StreamIdentity::EventId => StreamIdentity::TokenHeader,
            StreamIdentity::TokenHeader => StreamIdentity::EventId,
        }
    }
}

/// Everything a lab is parameterised by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LabConfig {
    /// How long an orphaned stream stays live (and blocks a new stream) before it is fenced
    /// (fenced policy) or closed (naive policy).
    pub grace_ms: u64,
    pub retry: RetryConfig,
    /// Events kept per stream for replay. A cursor older than the oldest kept event cannot be
    /// proven gap-free.
    pub replay_buffer: usize,
    /// Bytes kept per stream for replay; whichever bound is hit first evicts the oldest
    /// events.
    pub replay_buffer_bytes: usize,
    /// Bytes kept for replay across every stream of every session (the per-stream bounds alone
    /// would allow 64 × 16 × 512 KiB = 512 MiB). New sessions and tool calls are admitted
    /// only while one more full stream fits, else refused (`over_budget`); an emit past it
    /// makes room by evicting the oldest events of its own stream, so the budget is exceeded
    /// by at most the newest event of each stream.
    pub replay_budget_bytes: usize,
    /// Sessions the server holds at once; `initialize` past this is refused.
    pub max_sessions: usize,
    /// Streams a session keeps, ended ones included; the oldest ended ones are forgotten first.
    pub max_streams_per_session: usize,
    /// History records kept for views; the checker's verdict covers all of them regardless.
    pub history_capacity: usize,
    /// How the fenced policy proves stream identity (new streams take the mode in force when
    /// they are minted).
    pub identity: StreamIdentity,
    /// How long a finished request stream (a tool call whose result was sent) stays resumable:
    /// a client cut off before the result can still fetch it. Past it, a resume is refused
    /// with `stream_closed`. Defaults to the client's retry budget.
    pub retention_ms: u64,
    /// A session with no connection attached and no request for this long is ended, so
    /// abandoned sessions free their slot (and their memory).
    pub session_idle_ms: u64,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            grace_ms: 5_000,
            retry: RetryConfig::default(),
            replay_buffer: 1_024,
            replay_buffer_bytes: 512 * 1024,
            replay_budget_bytes: 48 * 1024 * 1024,
            max_sessions: 64,
            max_streams_per_session: 16,
            history_capacity: 65_536,
            identity: StreamIdentity::default(),
            retention_ms: RetryConfig::default().budget_ms,
            session_idle_ms: 10 * 60 * 1_000,
        }
    }
}

/// What a running lab may change (the dashboard's knobs, a scenario's `set` step): each field
/// given replaces the configuration's, the rest stay. A change applies from then on: a grace
/// window already running keeps its deadline, a stream keeps the buffer it was minted with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tuning {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_budget_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_backoff_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_backoff_ms: Option<u64>,
    /// Events kept per stream, for streams minted from now on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_buffer: Option<usize>,
}

/// `grace_ms = 8000, retry_budget_ms = 20000`: the fields given, in the words (and the TOML
/// inline-table syntax) of a scenario's `set` step, for logs, narration and saved scenarios.
impl std::fmt::Display for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields = [
            ("grace_ms", self.grace_ms),
            ("retry_budget_ms", self.retry_budget_ms),
            ("initial_backoff_ms", self.initial_backoff_ms),
            ("max_backoff_ms", self.max_backoff_ms),
            ("replay_buffer", self.replay_buffer.map(|n| n as u64)),
        ];
        let mut first = true;
        for (name, value) in fields {
            if let Some(value) = value {
                write!(f, "{}{name} = {value}", if first { "" } else { ", " })?;
                first = false;
            }
        }
        Ok(())
    }
}

impl Tuning {
    /// What changes from `config` to `to`, for the fields a running lab may change.
    pub fn between(config: &LabConfig, to: &LabConfig) -> Tuning {
        let changed = |a: u64, b: u64| (a != b).then_some(b);
        Tuning {
            grace_ms: changed(config.grace_ms, to.grace_ms),
            retry_budget_ms: changed(config.retry.budget_ms, to.retry.budget_ms),
            initial_backoff_ms: changed(
                config.retry.initial_backoff_ms,
                to.retry.initial_backoff_ms,
            ),
            max_backoff_ms: changed(config.retry.max_backoff_ms, to.retry.max_backoff_ms),
            replay_buffer: (config.replay_buffer != to.replay_buffer).then_some(to.replay_buffer),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Tuning::default()
    }
}

impl LabConfig {
    /// This configuration with `tuning`'s fields in place (not validated).
    pub fn tuned(&self, tuning: &Tuning) -> LabConfig {
        let mut next = *self;
        next.grace_ms = tuning.grace_ms.unwrap_or(next.grace_ms);
        next.retry.budget_ms = tuning.retry_budget_ms.unwrap_or(next.retry.budget_ms);
        next.retry.initial_backoff_ms = tuning
            .initial_backoff_ms
            .unwrap_or(next.retry.initial_backoff_ms);
        next.retry.max_backoff_ms = tuning.max_backoff_ms.unwrap_or(next.retry.max_backoff_ms);
        next.replay_buffer = tuning.replay_buffer.unwrap_or(next.replay_buffer);
        next
    }
}

/// A configuration the lab refuses, with what to change.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error(
        "the grace window ({grace_ms} ms) must be strictly shorter than the client's retry budget \
         ({budget_ms} ms) under the fenced policy (condition 5): otherwise the client gives up \
         while the orphaned stream is still live; lower grace_ms or raise retry.budget_ms"
    )]
    GraceNotShorterThanRetryBudget { grace_ms: u64, budget_ms: u64 },
    #[error("{field} must be at least {min}, got {got}")]
    TooSmall {
        field: &'static str,
        min: u64,
        got: u64,
    },
    #[error("retry.initial_backoff_ms ({initial}) must not exceed retry.max_backoff_ms ({max})")]
    BackoffInverted { initial: u64, max: u64 },
    #[error(
        "replay_budget_bytes ({budget}) must be at least replay_buffer_bytes ({per_stream}): \
         one stream alone must fit in the budget"
    )]
    BudgetBelowOneStream { budget: usize, per_stream: usize },
}

impl LabConfig {
    /// Condition 5, as a fact about this configuration.
    pub fn grace_shorter_than_retry_budget(&self) -> bool {
        self.grace_ms < self.retry.budget_ms
    }

    /// Checks bounds, and condition 5 when the policy enforces it. The naive policy accepts a
    /// configuration that breaks condition 5: seeing it fail is part of the lesson, and the
    /// dashboard shows it red.
    pub fn validate(&self, policy: Policy) -> Result<(), ConfigError> {
        let min = |field: &'static str, got: u64, min: u64| {
            if got < min {
                Err(ConfigError::TooSmall { field, min, got })
            } else {
                Ok(())
            }
        };
        min("replay_buffer", self.replay_buffer as u64, 1)?;
        min(
            "replay_buffer_bytes",
            self.replay_buffer_bytes as u64,
            1_024,
        )?;
        min("max_sessions", self.max_sessions as u64, 1)?;
        min(
            "max_streams_per_session",
            self.max_streams_per_session as u64,
            2,
        )?;
        min("history_capacity", self.history_capacity as u64, 16)?;
        min("retry.initial_backoff_ms", self.retry.initial_backoff_ms, 1)?;
        min("session_idle_ms", self.session_idle_ms, 1)?;
        if self.replay_budget_bytes < self.replay_buffer_bytes {
            return Err(ConfigError::BudgetBelowOneStream {
                budget: self.replay_budget_bytes,
                per_stream: self.replay_buffer_bytes,
            });
        }
        if self.retry.initial_backoff_ms > self.retry.max_backoff_ms {
            return Err(ConfigError::BackoffInverted {
                initial: self.retry.initial_backoff_ms,
                max: self.retry.max_backoff_ms,
            });
        }
        if policy == Policy::Fenced && !self.grace_shorter_than_retry_budget() {
            return Err(ConfigError::GraceNotShorterThanRetryBudget {
                grace_ms: self.grace_ms,
                budget_ms: self.retry.budget_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_refuses_condition_five_broken_and_naive_accepts_it() {
        let broken = LabConfig {
            grace_ms: 20_000,
            retry: RetryConfig {
                budget_ms: 10_000,
                ..RetryConfig::default()
            },
            ..LabConfig::default()
        };
        let err = broken.validate(Policy::Fenced).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::GraceNotShorterThanRetryBudget { .. }
        ));
        assert!(err.to_string().contains("condition 5"));
        assert_eq!(broken.validate(Policy::Naive), Ok(()));
        assert!(!broken.grace_shorter_than_retry_budget());
        let equal = LabConfig {
            grace_ms: 10_000,
            ..broken
        };
        assert!(equal.validate(Policy::Fenced).is_err(), "strictly shorter");
    }

    #[test]
    fn a_tuning_replaces_only_what_it_names() {
        let config = LabConfig::default();
        let tuning = Tuning {
            grace_ms: Some(8_000),
            retry_budget_ms: Some(20_000),
            ..Tuning::default()
        };
        let next = config.tuned(&tuning);
        assert_eq!((next.grace_ms, next.retry.budget_ms), (8_000, 20_000));
        assert_eq!(
            next.retry.initial_backoff_ms,
            config.retry.initial_backoff_ms
        );
        assert_eq!(next.replay_buffer, config.replay_buffer);
        assert_eq!(Tuning::between(&config, &next), tuning);
        assert!(Tuning::between(&config, &config).is_empty());
        assert_eq!(
            tuning.to_string(),
            "grace_ms = 8000, retry_budget_ms = 20000"
        );
    }

    #[test]
    fn bounds_are_checked() {
        let zero = LabConfig {
            replay_buffer: 0,
            ..LabConfig::default()
        };
        assert_eq!(
            zero.validate(Policy::Naive),
            Err(ConfigError::TooSmall {
                field: "replay_buffer",
                min: 1,
                got: 0
            })
        );
        let inverted = LabConfig {
            retry: RetryConfig {
                initial_backoff_ms: 10,
                max_backoff_ms: 5,
                budget_ms: 100,
            },
            ..LabConfig::default()
        };
        assert!(matches!(
            inverted.validate(Policy::Naive),
            Err(ConfigError::BackoffInverted { .. })
        ));
        assert_eq!(LabConfig::default().validate(Policy::Fenced), Ok(()));
    }
}
