//! forkscope-core: the sans-IO, invariant-enforcing core of forkscope.
//!
//! The invariant (from the incident write-up): *at most one live stream is attached to a
//! session at a time, and every event the client applies is a monotonic, gap-free continuation
//! of exactly one stream identity.*
//!
//! Where things live:
//! - [`resume`]: the decision boundary. [`resume::fenced`] is the fencing rule;
//!   [`resume::naive`] reproduces the incident.
//! - [`state`]: sessions, streams, replay buffers: what a policy decides on.
//! - [`server`]: carries decisions out: resumes, emits, orphans, fences, grace timers.
//! - [`client`]: the cursor, the reconciliation rule, dedupe, backoff.
//! - [`work`]: the tool call and the background emitter, driven by the Sim and the wire alike.
//! - [`history`]: what happened, and the checker that names each anomaly.
//! - [`vocabulary`]: the words the others share (stream kinds, orphan causes, reject reasons,
//!   payload keys); it imports none of them.
//! - [`view`]: a snapshot for the dashboard.
//! - [`model`]: the exhaustive explorer that proves the fence up to a bound.
//! - [`tasks`]: the tasks extension's guarantees (one task per key, one runner, terminal once,
//!   cancel settled against complete, expiry distinct from never-existed).
//! - [`revision`]: which protocol revision a request speaks (2025-11-25 or 2026-07-28), and
//!   what the modern transport refuses.
//!
//! `ARCHITECTURE.md` at the repository's root draws these as floors: each module imports only
//! the ones below it.
//!
//! No async runtime, no I/O, no clock: time ([`LabTime`]) and randomness ([`Entropy`]) come
//! in from the caller, so every run is reproducible.

mod canon;
pub mod client;
pub mod config;
pub mod event;
pub mod history;
pub mod ids;
pub mod lease;
pub mod model;
pub mod policy;
pub mod probe;
pub mod replica;
pub mod resume;
pub mod revision;
pub mod server;
pub mod sim;
pub mod state;
pub mod tasks;
pub mod time;
pub mod view;
pub mod vocabulary;
pub mod work;

pub use client::{Client, Continuity, Delivery, EventTruth, ReconnectPlan, StreamHeaders};
pub use config::{ConfigError, LabConfig, RetryConfig, StreamIdentity, Tuning};
pub use event::{Event, Payload};
pub use history::{Anomaly, AnomalyKind, History, Record, Verdict};
pub use ids::{
    ByReplica, ConnectionId, Entropy, EventId, IdScheme, ReplicaId, ResumptionToken, SessionId,
    SplitMix64, StreamId, TaskId, WireCursor,
};
pub use policy::{Condition, Policy, UnknownPolicy};
pub use resume::{
    ClientAction, IdentityProof, NewStream, RejectReason, ResumeDecision, ResumeRejected,
    ResumeRequest, Resumed, StreamEcho,
};
pub use server::{EmitError, Server, SessionError, StreamState};
pub use time::LabTime;
pub use view::View;
pub use vocabulary::{Effect, OrphanCause, PayloadKey, StreamKind};
pub use work::{BackgroundEmitter, EmitRate, ToolCall, ToolSpec};
