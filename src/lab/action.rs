//! Everything a person (a key) or a scenario step can do to a lab: one enum, serde snake_case.

use forkscope_core::Tuning;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// NAT drop: cut the client side, the server side stays open and silent.
    DropConnection,
    /// Close both sides of every proxied connection.
    Reset,
    /// The server side of every dropped connection times out, as TCP would in the end: the
    /// server sees it close and starts the stream's grace window.
    ExpireHalfOpen,
    /// The next reconnect omits the resumption-token header.
    StripToken,
    /// Switch between the fenced and naive policies.
    ToggleNaive,
    /// Skip the rest of the client's backoff wait.
    ReconnectNow,
    /// The session's background task emits one event now.
    EmitBackground,
    /// The client calls `progress_task`.
    StartToolCall,
    TogglePause,
    /// While paused: advance lab time by one step (100 ms).
    Step,
    SpeedUp,
    SpeedDown,
    /// Tear the lab down and start a fresh one with the same options.
    Restart,
    /// Turn the lab's knobs while it runs (grace window, retry budget and backoff, replay
    /// buffer): the dashboard's `k` overlay, a scenario's `set` step. Fenced refuses a change
    /// that breaks condition 5, as it refuses such a configuration at start.
    Tune(Tuning),
    /// The fault proxy waits this many real milliseconds before forwarding each chunk, each
    /// way (0: none): a slow link, with the knobs overlay or `action = { add_latency = 50 }`.
    AddLatency(u64),
}

impl Action {
    /// Every action a key presses directly ([`Action::Tune`] and [`Action::AddLatency`] come
    /// from the knobs overlay).
    pub const ALL: [Action; 13] = [
        Action::DropConnection,
        Action::Reset,
        Action::ExpireHalfOpen,
        Action::StripToken,
        Action::ToggleNaive,
        Action::ReconnectNow,
        Action::EmitBackground,
        Action::StartToolCall,
        Action::TogglePause,
        Action::Step,
        Action::SpeedUp,
        Action::SpeedDown,
        Action::Restart,
    ];

    /// What it did, pressed under `before`: `n` switches to naive (and reproduces the fork) or
    /// back to fenced, which the bare key name cannot say.
    pub fn describe_from(self, before: forkscope_core::Policy) -> &'static str {
        match (self, before) {
            (Action::ToggleNaive, forkscope_core::Policy::Fenced) => {
                "switch to naive mode (reproduces the fork)"
            }
            (Action::ToggleNaive, forkscope_core::Policy::Naive) => {
                "switch back to fenced (the five conditions hold)"
            }
            (action, _) => action.describe(),
        }
    }

    /// What it does, in a few words (help screens, narration).
    pub fn describe(self) -> &'static str {
        match self {
            Action::DropConnection => "drop the connection (NAT drop: the server is not told)",
            Action::Reset => "reset the connection (both sides see it close)",
            Action::ExpireHalfOpen => {
                "time out the dropped connection's server side (the server sees it close)"
            }
            Action::StripToken => "strip the resumption token on the next reconnect",
            Action::ToggleNaive => "toggle naive mode (reproduces the fork)",
            Action::ReconnectNow => "reconnect now (skip the backoff wait)",
            Action::EmitBackground => "emit a background event",
            Action::StartToolCall => "start a progress_task tool call",
            Action::TogglePause => "pause / resume lab time",
            Action::Step => "single step (100 ms of lab time) while paused",
            Action::SpeedUp => "speed lab time up",
            Action::SpeedDown => "slow lab time down",
            Action::Restart => "restart the lab",
            Action::Tune(_) => "turn the lab's knobs",
            Action::AddLatency(_) => "set the link's added latency",
        }
    }
}

/// Lab milliseconds one `Step` advances.
pub const STEP_MS: u64 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_roundtrip_as_snake_case() {
        for action in Action::ALL {
            let json = serde_json::to_string(&action).unwrap();
            assert_eq!(serde_json::from_str::<Action>(&json).unwrap(), action);
        }
        assert_eq!(
            serde_json::to_string(&Action::DropConnection).unwrap(),
            "\"drop_connection\""
        );
    }
}
