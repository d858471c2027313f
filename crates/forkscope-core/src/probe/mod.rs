//! Judging another server's resumption from what a stock client saw.
//!
//! `forkscope probe` drives a foreign MCP server over HTTP; this module owns the rules it
//! judges by, so the probe and the lab speak one vocabulary. The adapter reduces every SSE event
//! it receives to an [`Item`] (a progress count, a response, a numbered notification) and
//! every request to a [`Connection`]; [`judge`] then names what happened in the checker's words
//! ([`Verdict`]): a clean continuation, a typed rejection, or one of the ways a resume breaks the
//! invariant — two live streams, a duplicate, a gap, events of another stream or session.
//! [`tasks`] judges a 2026-07-28 server's tasks: a re-issue that runs twice, a task some reads
//! do not know, an end that changes.

mod continuity;
pub mod faults;
pub mod judge;
pub mod observed;
pub mod tasks;
pub mod verdict;

#[cfg(test)]
mod tests;

pub use judge::{
    Known, judge_burst, judge_concurrent_resumes, judge_foreign_cursor, judge_foreign_origin,
    judge_huge_cursor, judge_lost_sessions, judge_resume, judge_second_get, judge_unknown_session,
    judge_unresumable_call, judge_unsupported_version,
};
pub use observed::{Answer, Connection, End, Item, Received, StreamOf};
pub use verdict::{Finding, Judged, Unexercised, Verdict};
