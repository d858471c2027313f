//! Everything a person (a key) or a scenario step can do to a lab: one enum, serde snake_case.

use forkscope_core::{Policy, ReplicaId, Tuning};
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
    /// Switch between the fenced and naive policies (an SDK policy goes to fenced). Kept for
    /// the files that say it; the dashboard's `n` journals [`Action::SetPolicy`].
    ToggleNaive,
    /// Put this policy in force (`action = { set_policy = "rmcp" }`): what the dashboard's `n`
    /// (naive ⇄ fenced) and `o` (any of [`Policy::ALL`]) journal. A lab of replicas takes only
    /// naive or fenced.
    SetPolicy(Policy),
    /// Skip the rest of the client's backoff wait.
    ReconnectNow,
    /// The session's background task emits one event now.
    EmitBackground,
    /// The client calls `progress_task`.
    StartToolCall,
    /// 2026-07-28: the lab's second client calls `progress_task` as a task of the tasks
    /// extension, under an idempotency key of its own intent, re-issuing when the answer does
    /// not come; then it polls the task to its end.
    CallTask,
    /// 2026-07-28: the next `CreateTaskResult` is lost on the way; the client re-issues.
    LoseAnswer,
    /// 2026-07-28: the client reads the last task it polled once more, saying what it was told.
    ReadTaskAgain,
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
    // A lab of replicas behind a balancer (`forkscope --replicas 2`); refused by a lab of one.
    /// Replica R stops at once, as a crash does: its tasks end, it starts no new work and tells
    /// the lab nothing more, its port refuses, and the client's streams through it end.
    KillReplica(ReplicaId),
    /// Start a killed replica again under its name (with nothing in memory).
    ReviveReplica(ReplicaId),
    /// Cut replica R off from the store: it keeps running and serving, and its store calls fail
    /// (its lease cannot be renewed).
    Partition(ReplicaId),
    /// Replica R reaches the store again.
    Heal(ReplicaId),
    /// Switch the balancer between round-robin and sticky routing.
    ToggleRouting,
    /// The balancer sends the next request (an initialize, a GET, a POST) to replica R.
    RouteNext(ReplicaId),
    /// Replica R's background emitters for the session emit once each, now.
    EmitOn(ReplicaId),
    /// The store loses this lab's sessions, streams and tasks, as a Redis without persistence
    /// loses everything when it restarts (other labs and servers on the same Redis keep theirs).
    RestartStore,
    /// The store keeps an image of this lab's sessions and tasks as they are now, for
    /// `RestoreStore`.
    SnapshotStore,
    /// The store is restored from the last `SnapshotStore`, as a Redis restored from an older RDB
    /// snapshot (or an async replica promoted by failover) forgets what was written since.
    RestoreStore,
}

impl Action {
    /// What the action does to a 2025-11-25 stream or session, in a few words; `None` for an
    /// action that is not about one (a lab of 2026-07-28 alone refuses the others, naming it).
    pub fn on_a_stream(self) -> Option<&'static str> {
        match self {
            Action::DropConnection => Some("drop"),
            Action::Reset => Some("reset"),
            Action::ExpireHalfOpen => Some("time out half-open"),
            Action::StripToken => Some("strip a resumption token from"),
            Action::ReconnectNow => Some("reconnect"),
            Action::EmitBackground => Some("emit a background event on"),
            Action::StartToolCall => Some("call x's tool on"),
            _ => None,
        }
    }

    /// Every action a key presses directly ([`Action::Tune`] and [`Action::AddLatency`] come
    /// from the knobs overlay, [`Action::SetPolicy`] from `n`, which reads the policy in force).
    pub const ALL: [Action; 14] = [
        Action::DropConnection,
        Action::Reset,
        Action::ExpireHalfOpen,
        Action::StripToken,
        Action::ReconnectNow,
        Action::EmitBackground,
        Action::StartToolCall,
        Action::CallTask,
        Action::LoseAnswer,
        Action::TogglePause,
        Action::Step,
        Action::SpeedUp,
        Action::SpeedDown,
        Action::Restart,
    ];

    /// What it did, pressed under `before`: which policy a switch put in force, which the
    /// bare key name cannot say.
    pub fn describe_from(self, before: Policy) -> String {
        match self {
            Action::ToggleNaive => Action::SetPolicy(before.toggled()).describe_from(before),
            Action::SetPolicy(Policy::Naive) => "switch to naive mode (reproduces the fork)".into(),
            Action::SetPolicy(Policy::Fenced) => {
                "switch back to fenced (the five conditions hold)".into()
            }
            Action::SetPolicy(sdk) => format!("switch to {sdk} (what that SDK's server does)"),
            action => action.describe().to_owned(),
        }
    }

    /// Whether only a lab of replicas can do it.
    pub fn needs_replicas(self) -> bool {
        self.replica().is_some()
            || matches!(
                self,
                Action::ToggleRouting
                    | Action::RestartStore
                    | Action::SnapshotStore
                    | Action::RestoreStore
            )
    }

    /// The replica it names, if it names one.
    pub fn replica(self) -> Option<ReplicaId> {
        match self {
            Action::KillReplica(r)
            | Action::ReviveReplica(r)
            | Action::Partition(r)
            | Action::Heal(r)
            | Action::RouteNext(r)
            | Action::EmitOn(r) => Some(r),
            _ => None,
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
            Action::SetPolicy(_) => "put a policy in force (naive, fenced or an SDK's)",
            Action::ReconnectNow => "reconnect now (skip the backoff wait)",
            Action::EmitBackground => "emit a background event",
            Action::StartToolCall => "start a progress_task tool call",
            Action::CallTask => {
                "2026-07-28: call progress_task as a task, under a key of its own, re-issued \
                 when its answer does not come"
            }
            Action::LoseAnswer => {
                "2026-07-28: lose the next CreateTaskResult on the way (the client re-issues)"
            }
            Action::ReadTaskAgain => {
                "2026-07-28: read the last task once more (a client that looks again after its end)"
            }
            Action::TogglePause => "pause / resume lab time",
            Action::Step => "single step (100 ms of lab time) while paused",
            Action::SpeedUp => "speed lab time up",
            Action::SpeedDown => "slow lab time down",
            Action::Restart => "restart the lab",
            Action::Tune(_) => "turn the lab's knobs",
            Action::AddLatency(_) => "set the link's added latency",
            Action::KillReplica(_) => "kill a replica (a crash: it stops, its streams end)",
            Action::ReviveReplica(_) => "start a killed replica again",
            Action::Partition(_) => "partition a replica from the store (it keeps running)",
            Action::Heal(_) => "heal a replica's partition",
            Action::ToggleRouting => "switch routing between round-robin and sticky",
            Action::RouteNext(_) => "send the next request to a chosen replica",
            Action::EmitOn(_) => "a replica's background emitters emit once now",
            Action::RestartStore => "restart the store (this lab's sessions are lost)",
            Action::SnapshotStore => "take a snapshot of the store (this lab's sessions)",
            Action::RestoreStore => {
                "restore the store from its snapshot (it forgets what was written since)"
            }
        }
    }
}

/// Lab milliseconds one `Step` advances.
pub const STEP_MS: u64 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_actions_name_their_replica() {
        let a = ReplicaId::new(0).unwrap();
        let json = serde_json::to_string(&Action::KillReplica(a)).unwrap();
        assert_eq!(json, r#"{"kill_replica":"A"}"#);
        assert_eq!(
            serde_json::from_str::<Action>(&json).unwrap(),
            Action::KillReplica(a)
        );
        assert!(serde_json::from_str::<Action>(r#"{"kill_replica":"a"}"#).is_err());
    }

    #[test]
    fn set_policy_names_the_policy() {
        let json = serde_json::to_string(&Action::SetPolicy(Policy::Rmcp)).unwrap();
        assert_eq!(json, r#"{"set_policy":"rmcp"}"#);
        assert_eq!(
            serde_json::from_str::<Action>(r#"{"set_policy":"python-sdk-store"}"#).unwrap(),
            Action::SetPolicy(Policy::PythonSdkStore)
        );
        assert!(serde_json::from_str::<Action>(r#"{"set_policy":"grpc"}"#).is_err());
    }

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
