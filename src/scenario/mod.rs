//! Scenarios: replayable stories in `scenarios/*.toml` — steps that are the same actions a
//! person presses, waits on observed state, and expectations per policy — played headless
//! against a real lab, with verdict tables in text or JSON.

pub mod bounds;
pub mod file;
pub mod format;
pub mod journal;
pub mod narration;
pub mod player;
pub mod report;
#[cfg(test)]
mod round_trip;

pub use format::{Scenario, ScenarioError, load};
pub use player::{PlayError, Run, play};
