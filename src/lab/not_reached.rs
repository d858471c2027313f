//! A wait that ran out of time, said as a sentence: what a stuck scenario step reports.

use std::time::Duration;

/// The client's state in one sentence: `the client was reconnecting (attempt 2, next at
/// 0.55 s), had applied 41, cursor s1-41`.
pub(super) fn describe_client(client: Option<&forkscope_core::view::ClientView>) -> String {
    use forkscope_core::client::Phase;
    let Some(c) = client else {
        return "the lab had no client".to_owned();
    };
    let phase = match c.phase {
        Phase::Idle => "had no stream".to_owned(),
        Phase::Connected if c.cursor.is_none() => {
            "was connected but had no cursor yet (no event, not even a priming one)".to_owned()
        }
        Phase::Connected => "was connected".to_owned(),
        Phase::Reconnecting {
            attempt, next_at, ..
        } => match next_at {
            Some(at) => format!("was reconnecting (attempt {attempt} done, next at {at})"),
            None => format!("was reconnecting (attempt {} in flight)", attempt),
        },
        Phase::GaveUp { at } => format!("had given up at {at}"),
    };
    let cursor = c.cursor.as_deref().unwrap_or("none");
    format!(
        "the client {phase}, had applied {}, cursor {cursor}",
        c.applied
    )
}

/// A wait that ran out of time, with what the lab showed then.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not reached within {limit:?}; then {client}; the verdict read: {verdict}")]
pub struct NotReached {
    pub limit: Duration,
    /// The checker's headline at the deadline.
    pub verdict: String,
    /// The client at the deadline, in words: what a stuck wait is read by.
    pub client: String,
}
