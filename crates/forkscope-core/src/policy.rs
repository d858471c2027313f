//! The two server/client policies and the five conditions of the seed they enforce or break.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How the lab behaves on a reconnect. A run-time switch (key `n` in the dashboard).
///
/// `fenced` and `naive` are the design's two poles. The others reproduce, rule by rule, what
/// `forkscope probe` measured in an official SDK's server (see `resume::sdk`), so a workshop
/// can show "what your SDK does" offline, beside the fence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Policy {
    /// All five conditions enforced: a resume is honoured only when stream identity and
    /// gap-freedom are proven, otherwise a typed rejection.
    #[default]
    #[serde(rename = "fenced")]
    Fenced,
    /// The seed incident exactly: a tokenless reconnect silently mints a fresh stream that
    /// replays from its own index 0 while the orphan keeps receiving emits.
    #[serde(rename = "naive")]
    Naive,
    /// The TypeScript SDK 1.32.2 with the `InMemoryEventStore` it ships.
    #[serde(rename = "ts-sdk")]
    TsSdk,
    /// The Python SDK 2.3.0 without an event store: no event has an id.
    #[serde(rename = "python-sdk")]
    PythonSdk,
    /// The Python SDK 2.3.0 with an event store written as its examples write theirs.
    #[serde(rename = "python-sdk-store")]
    PythonSdkStore,
    /// rmcp 3.11.0 with its default `LocalSessionManager`.
    #[serde(rename = "rmcp")]
    Rmcp,
}

impl Policy {
    /// Every policy, in the order `n` cycles through them: the two poles first.
    pub const ALL: [Policy; 6] = [
        Policy::Fenced,
        Policy::Naive,
        Policy::TsSdk,
        Policy::PythonSdk,
        Policy::PythonSdkStore,
        Policy::Rmcp,
    ];

    /// The policies that reproduce an SDK's server.
    pub const SDKS: [Policy; 4] = [
        Policy::TsSdk,
        Policy::PythonSdk,
        Policy::PythonSdkStore,
        Policy::Rmcp,
    ];

    /// Naive ⇄ fenced; any SDK policy goes to fenced (the fix).
    pub fn toggled(self) -> Self {
        match self {
            Policy::Fenced => Policy::Naive,
            _ => Policy::Fenced,
        }
    }

    /// The next policy in [`Policy::ALL`], wrapping.
    pub fn next(self) -> Self {
        let i = Self::ALL.iter().position(|p| *p == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fenced => "fenced",
            Policy::Naive => "naive",
            Policy::TsSdk => "ts-sdk",
            Policy::PythonSdk => "python-sdk",
            Policy::PythonSdkStore => "python-sdk-store",
            Policy::Rmcp => "rmcp",
        }
    }

    /// The policy a name (as [`Policy::name`] spells it) stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether this is the fence: stream identity proven, the old stream fenced, a typed
    /// refusal otherwise. Every other policy is unfenced, each in its own way.
    pub fn fences(self) -> bool {
        self == Policy::Fenced
    }

    /// Whether this policy reproduces an SDK's server.
    pub fn is_sdk(self) -> bool {
        !matches!(self, Policy::Fenced | Policy::Naive)
    }
}
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The five conditions of validity from the seed, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// 1. Token and `Last-Event-ID` co-validated; high-water ≥ cursor.
    CoValidated,
    /// 2. The old stream is fenced before (or atomically with) accepting a resume.
    OldStreamFenced,
    /// 3. Event ids are per-stream monotonic and never reused across streams.
    IdsNeverReused,
    /// 4. The client treats a response without a resumed-identity echo as a new stream.
    ClientReconciles,
    /// 5. The grace window is strictly shorter than the client's retry budget.
    GraceShorterThanRetryBudget,
}

impl Condition {
    pub const ALL: [Condition; 5] = [
        Condition::CoValidated,
        Condition::OldStreamFenced,
        Condition::IdsNeverReused,
        Condition::ClientReconciles,
        Condition::GraceShorterThanRetryBudget,
    ];

    pub fn number(self) -> u8 {
        self as u8 + 1
    }

    /// A few words for a dashboard row.
    pub fn title(self) -> &'static str {
        match self {
            Condition::CoValidated => "token + Last-Event-ID co-validated",
            Condition::OldStreamFenced => "old stream fenced before resume",
            Condition::IdsNeverReused => "event ids never reused across streams",
            Condition::ClientReconciles => "client resets on a missing identity echo",
            Condition::GraceShorterThanRetryBudget => "grace window < client retry budget",
        }
    }

    /// What it means, in one line: why the fork cannot happen while it holds.
    pub fn meaning(self) -> &'static str {
        match self {
            Condition::CoValidated => {
                "token and cursor must name one stream; the cursor within its high-water"
            }
            Condition::OldStreamFenced => {
                "the abandoned stream is closed first: no late emit can land on it"
            }
            Condition::IdsNeverReused => {
                "each stream numbers its own events; no id is shared across streams"
            }
            Condition::ClientReconciles => {
                "no echo of the resumed stream: the client assumes a new one"
            }
            Condition::GraceShorterThanRetryBudget => {
                "an orphan is fenced before the client stops retrying: no race"
            }
        }
    }

    /// Whether a policy's rules enforce this condition. The fenced policy enforces all five
    /// (condition 5 by refusing a configuration that breaks it); every other policy none.
    pub fn enforced_by(self, policy: Policy) -> bool {
        policy.fences()
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}) {}", self.number(), self.title())
    }
}
