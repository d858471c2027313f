//! A cheap snapshot of everything the dashboard shows: streams, the client cursor, the five
//! conditions and the checker's verdict.

use crate::client::{Client, Phase};
use crate::config::LabConfig;
use crate::history::{Counters, History, TaskLine, Verdict};
use crate::ids::{SessionId, StreamId};
use crate::policy::{Condition, Policy};
use crate::server::{Server, StreamState};
use crate::tasks::guarantee::{self, GuaranteeStatus};
use crate::time::LabTime;
use crate::vocabulary::{OrphanCause, StreamKind};
use serde::Serialize;

/// Tasks a view carries: more than a pane has rows for.
pub const TASKS_SHOWN: usize = 16;

#[derive(Clone, Debug, Serialize)]
pub struct View {
    pub at: LabTime,
    pub policy: Policy,
    pub config: LabConfig,
    pub sessions: Vec<SessionView>,
    pub client: Option<ClientView>,
    pub conditions: Vec<ConditionStatus>,
    /// 2026-07-28: what the policy guarantees a client of the tasks extension.
    pub guarantees: Vec<GuaranteeStatus>,
    /// 2026-07-28: the newest tasks the checker keeps, oldest first.
    pub tasks: Vec<TaskLine>,
    pub verdict: Verdict,
    pub counters: Counters,
    /// What the client is owed and has not had yet, and which can still arrive.
    pub owed_open: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionView {
    pub id: SessionId,
    pub short: String,
    /// The server's session counter: standalone events emitted in the session.
    pub counter: u64,
    pub streams: Vec<StreamView>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct GraceView {
    pub remaining_ms: u64,
    pub total_ms: u64,
    /// When the grace window started, and why.
    pub since: LabTime,
    pub cause: OrphanCause,
}

impl GraceView {
    /// The share of the grace window left, clamped to 0..=1 for a gauge.
    pub fn ratio(&self) -> f64 {
        if self.total_ms == 0 {
            return 0.0;
        }
        (self.remaining_ms as f64 / self.total_ms as f64).clamp(0.0, 1.0)
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct StreamView {
    pub id: StreamId,
    pub kind: StreamKind,
    pub state: StreamState,
    pub high_water: u64,
    pub last_emit: Option<LabTime>,
    pub buffered: usize,
    pub grace: Option<GraceView>,
    /// The standalone stream the server last attached.
    pub active: bool,
    /// A connection is attached (as far as the server knows).
    pub attached: bool,
    /// The background emitter writes here.
    pub background: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClientView {
    pub session: Option<SessionId>,
    pub bound_stream: Option<String>,
    pub cursor: Option<String>,
    pub has_token: bool,
    pub will_send_token: bool,
    pub phase: Phase,
    pub budget_left_ms: u64,
    pub applied: u64,
    pub replays_skipped: u64,
    pub reconciles: bool,
    /// The most recent tool call the client follows, if any.
    pub request: Option<crate::client::RequestStream>,
    /// When and why the client started its current session in place of an earlier one.
    pub renewed: Option<(LabTime, &'static str)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConditionStatus {
    pub condition: Condition,
    pub holds: bool,
    pub note: String,
}

impl View {
    pub fn compose(
        now: LabTime,
        server: &Server,
        client: Option<&Client>,
        history: &History,
    ) -> View {
        let sessions = server
            .sessions()
            .map(|session| SessionView {
                id: session.id(),
                short: session.id().short(),
                counter: session.counter(),
                streams: session
                    .streams()
                    .iter()
                    .map(|s| StreamView {
                        id: s.id(),
                        kind: s.kind(),
                        state: s.state(),
                        high_water: s.high_water(),
                        last_emit: s.last_emit(),
                        buffered: s.buffered(),
                        grace: match s.state() {
                            StreamState::Orphaned {
                                since,
                                grace_deadline,
                                cause,
                            } => Some(GraceView {
                                remaining_ms: grace_deadline.since(now),
                                total_ms: grace_deadline.since(since),
                                since,
                                cause,
                            }),
                            _ => None,
                        },
                        active: session.active() == Some(s.id()),
                        attached: s.connection().is_some(),
                        background: session.background_target() == Some(s.id()),
                    })
                    .collect(),
            })
            .collect();
        let client_view = client.map(|c| ClientView {
            session: c.session(),
            bound_stream: c.bound_stream().map(str::to_owned),
            cursor: c.cursor().map(str::to_owned),
            has_token: c.token().is_some(),
            will_send_token: c.will_send_token(),
            phase: c.phase(),
            budget_left_ms: c.budget_left_ms(now),
            applied: c.applied(),
            replays_skipped: c.skipped(),
            reconciles: c.reconciles(),
            request: c.requests().last().cloned(),
            renewed: c.renewed(),
        });
        let reconciles = client.map_or(server.policy() == Policy::Fenced, Client::reconciles);
        let verdict = history.verdict();
        View {
            at: now,
            policy: server.policy(),
            config: *server.config(),
            sessions,
            client: client_view,
            conditions: conditions(server.policy(), server.config(), reconciles),
            guarantees: guarantee::judged(server.policy(), &verdict),
            tasks: history.checker().tasks(TASKS_SHOWN),
            verdict,
            counters: history.checker().counters().clone(),
            owed_open: history.checker().open_obligations(),
        }
    }
}

/// Each of the five conditions, green or red, with a few words.
pub fn conditions(
    policy: Policy,
    config: &LabConfig,
    client_reconciles: bool,
) -> Vec<ConditionStatus> {
    let fenced = policy == Policy::Fenced;
    // An SDK policy breaks conditions 1–3 in its own way: say how, from its table.
    let sdk = crate::resume::sdk::quirks(policy);
    Condition::ALL
        .into_iter()
        .map(|condition| {
            let (holds, note) = match condition {
                Condition::CoValidated => (
                    fenced,
                    if fenced && config.identity == crate::config::StreamIdentity::EventId {
                        "Last-Event-ID carries its stream's key; a token header must agree"
                            .to_owned()
                    } else if fenced {
                        "a resume needs token and Last-Event-ID of one stream".to_owned()
                    } else if let Some(q) = sdk {
                        match q.ids {
                            crate::ids::IdScheme::Unnumbered => {
                                "no ids: a reconnect is a plain GET, nothing to check".to_owned()
                            }
                            _ => "Last-Event-ID alone, found in a store: nothing proven".to_owned(),
                        }
                    } else {
                        "a reconnect without the token is served anyway".to_owned()
                    },
                ),
                Condition::OldStreamFenced => (
                    fenced,
                    if fenced {
                        "orphans are fenced before a resume is granted".to_owned()
                    } else if sdk.is_some() {
                        "no fence: a half-open connection keeps the events".to_owned()
                    } else {
                        "an orphan keeps receiving emits for its grace window".to_owned()
                    },
                ),
                Condition::IdsNeverReused => (
                    fenced,
                    if fenced {
                        "ids name their stream (s2-41)".to_owned()
                    } else if let Some(q) = sdk {
                        match q.ids {
                            crate::ids::IdScheme::Timestamped => {
                                "ids sort at random within a ms; standalone's unread"
                            }
                            crate::ids::IdScheme::Uuid => {
                                "a uuid per event: no order, no stream in it"
                            }
                            crate::ids::IdScheme::Unnumbered => "no ids at all",
                            _ => "standalone ids count bare (41); a call's are 41/2",
                        }
                        .to_owned()
                    } else {
                        "bare ids: every new stream counts from 1 again".to_owned()
                    },
                ),
                Condition::ClientReconciles => (
                    client_reconciles,
                    if client_reconciles {
                        "no resumed echo ⇒ new stream, cursor reset".to_owned()
                    } else {
                        "whatever arrives is taken as a continuation".to_owned()
                    },
                ),
                Condition::GraceShorterThanRetryBudget => {
                    let holds = config.grace_shorter_than_retry_budget();
                    let cmp = if holds { "<" } else { "≥" };
                    (
                        holds,
                        format!(
                            "grace {} ms {cmp} retry budget {} ms",
                            config.grace_ms, config.retry.budget_ms
                        ),
                    )
                }
            };
            ConditionStatus {
                condition,
                holds,
                note,
            }
        })
        .collect()
}
