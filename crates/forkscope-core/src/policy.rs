//! The two server/client policies and the five conditions of the seed they enforce or break.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// How the lab behaves on a reconnect. A run-time switch (key `n` in the dashboard).
///
/// `fenced` and `naive` are the design's two poles. The others reproduce, rule by rule, what
/// `forkscope probe` measured in an official SDK's server (see `resume::sdk`), so a workshop
/// can show "what your SDK does" offline, beside the fence.
///
/// The names are spelled once, in [`Policy::name`]: serde, the command line's parsers and
/// scenario files all read and write them through it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// All five conditions enforced: a resume is honoured only when stream identity and
    /// gap-freedom are proven, otherwise a typed rejection.
    #[default]
    Fenced,
    /// The seed incident exactly: a tokenless reconnect silently mints a fresh stream that
    /// replays from its own index 0 while the orphan keeps receiving emits.
    Naive,
    /// The TypeScript SDK 1.32.2 with the `InMemoryEventStore` it ships.
    TsSdk,
    /// The Python SDK 2.3.0 without an event store: no event has an id.
    PythonSdk,
    /// The Python SDK 2.3.0 with an event store written as its examples write theirs.
    PythonSdkStore,
    /// rmcp 3.11.0 with its default `LocalSessionManager`.
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

    /// The policy's name: the one spelling of it, on the command line, in files and on screen.
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

    /// Every name, for an error that lists them: `fenced, naive, ts-sdk, …`.
    pub fn names() -> String {
        Self::ALL.map(Policy::name).join(", ")
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

/// A name that is no policy's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy `{0}`: one of {names}", names = Policy::names())]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;

    fn from_str(name: &str) -> Result<Self, UnknownPolicy> {
        Policy::from_name(name).ok_or_else(|| UnknownPolicy(name.to_owned()))
    }
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
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
                "token and cursor must name one stream, and the cursor stay at or below its high-water mark"
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
