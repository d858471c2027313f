//! The server's work: the `progress_task` tool call and the background emitter, as sans-IO
//! state machines. Time comes in, [`ToolCall::poll_timeout`] and
//! [`BackgroundEmitter::poll_timeout`] say when they next have something to do, and each step
//! emits through the [`crate::server::Server`] the caller passes in.
//!
//! The Sim, the wire server, a replica's runner and emitter (`wire/replica/work.rs`, which
//! commit each step to the shared store rather than emit through a [`crate::server::Server`]:
//! [`ToolCall::take_due`], [`BackgroundEmitter::take_owed_number`]) and so both exhaustive checks
//! all drive these same machines: a proof about a tool call is about the code `serve` runs.
//! Only the bodies differ (the wire spells a JSON-RPC message; the Sim a stand-in), and they are
//! the adapter's to spell. A 2026-07-28 task's runner ([`TaskRunner`]) is the same schedule with
//! its lease renewed between steps.

mod background;
mod task_runner;
mod tool_call;

pub use background::{BackgroundEmitter, EmitRate, RateError};
pub use task_runner::{Mutation, RunnerWrite, TaskRunner};
pub use tool_call::{
    MAX_CALL_MS, MAX_DELAY_MS, MAX_STEPS, Steps, ToolCall, ToolOutcome, ToolSpec, ToolSpecError,
    ToolStep,
};

#[cfg(test)]
mod task_runner_tests;
#[cfg(test)]
mod tests;
