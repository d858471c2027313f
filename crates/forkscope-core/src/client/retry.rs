//! The client's reconnect schedule: exponential backoff inside a retry budget. The server's SSE
//! `retry:` hint raises the base delay: the client never comes back sooner than the server asked,
//! nor sooner than its own policy says.

use crate::config::RetryConfig;
use crate::time::LabTime;

/// The delay before reconnect attempt `attempt` (0-based).
pub fn backoff_ms(config: &RetryConfig, retry_hint_ms: Option<u64>, attempt: u32) -> u64 {
    let base = retry_hint_ms
        .unwrap_or(0)
        .max(config.initial_backoff_ms)
        .max(1);
    let cap = config.max_backoff_ms.max(base);
    base.saturating_mul(1u64 << attempt.min(32)).min(cap)
}

/// When the next attempt goes out after attempt `attempt` failed at `now`, for a loss at
/// `since`; `None` once that would be past the budget (the client gives up).
pub fn next_attempt_at(
    config: &RetryConfig,
    retry_hint_ms: Option<u64>,
    since: LabTime,
    attempt: u32,
    now: LabTime,
) -> Option<LabTime> {
    let due = now.plus(backoff_ms(config, retry_hint_ms, attempt));
    (due.since(since) <= config.budget_ms).then_some(due)
}

/// The full schedule of attempt times (ms after the loss) that fit in the budget.
pub fn schedule(config: &RetryConfig, retry_hint_ms: Option<u64>) -> Vec<u64> {
    let mut at = 0u64;
    let mut times = Vec::new();
    for attempt in 0.. {
        at = at.saturating_add(backoff_ms(config, retry_hint_ms, attempt));
        if at > config.budget_ms {
            break;
        }
        times.push(at);
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_the_budget() {
        let config = RetryConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 800,
            budget_ms: 3_000,
        };
        let delays: Vec<u64> = (0..6).map(|a| backoff_ms(&config, None, a)).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 800, 800]);
        assert_eq!(schedule(&config, None), vec![100, 300, 700, 1_500, 2_300]);
    }

    #[test]
    fn the_server_retry_hint_sets_the_base() {
        let config = RetryConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 800,
            budget_ms: 3_000,
        };
        assert_eq!(
            backoff_ms(&config, Some(1_000), 0),
            1_000,
            "a hint above the cap is honoured"
        );
        assert_eq!(backoff_ms(&config, Some(1_000), 3), 1_000);
        assert_eq!(
            backoff_ms(&config, Some(50), 1),
            200,
            "a hint below the policy's base is raised"
        );
        assert_eq!(
            backoff_ms(&config, None, 200),
            800,
            "huge attempt counts do not overflow"
        );
    }
}
