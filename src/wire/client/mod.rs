//! The lab's MCP client over reqwest: initializes, holds the standalone GET stream open,
//! reconnects inside its retry budget, and calls the tool. Every decision — what to send on a
//! reconnect, whether a response continues the stream, whether an event is applied — is asked
//! of the core's [`forkscope_core::Client`]; these files only speak HTTP and SSE, with every
//! request built by [`super::mcp`]. The standalone stream is followed in [`stream`], a tool
//! call and its resumes in [`call`].

mod call;
mod stream;
pub mod tasks;

use super::Shared;
use super::headers::MODELLED_REVISION;
use super::mcp::{
    self, Call, Endpoint, Headers, Initialize, Notification, Request, RequestId, method,
};
use crate::clock::LabClock;
use forkscope_core::SessionId;
use forkscope_core::client::Phase;
use forkscope_core::{LabTime, StreamHeaders};
use reqwest::header::HeaderMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// How long the client waits for a response's headers before calling the attempt failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting client re-reads the lab clock (which can be paused or sped up).
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the server answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the server sent no usable Mcp-Session-Id")]
    NoSession,
    #[error("the tool call's stream broke and could not be resumed: its result is lost")]
    ResultLost,
    /// The call's stream ended with a JSON-RPC error in place of its result (a server stopping,
    /// a store rolled back): the client is told, and the call is over.
    #[error("the tool call ended with an error: {message}{}", reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default())]
    CallFailed {
        message: String,
        reason: Option<String>,
    },
}

/// Where the client reports every HTTP exchange it makes (the lab keeps a few for the views).
pub trait ExchangeLog: Send + Sync + std::fmt::Debug {
    fn exchange(
        &self,
        at: LabTime,
        method: &'static str,
        what: String,
        status: u16,
        sent: &[(&str, String)],
        received: &HeaderMap,
    );
}

/// A handle to the running client, shared by its task and the lab's actions.
#[derive(Debug)]
pub struct LabClient {
    endpoint: Endpoint,
    shared: Shared,
    clock: Arc<LabClock>,
    exchanges: Arc<dyn ExchangeLog>,
    session: std::sync::Mutex<Option<SessionId>>,
    wake: Notify,
    force_reconnect: AtomicBool,
    next_request_id: AtomicU64,
}

impl LabClient {
    pub fn new(
        url: String,
        shared: Shared,
        clock: Arc<LabClock>,
        exchanges: Arc<dyn ExchangeLog>,
    ) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(4)
            // Let go of an idle connection well before the server's idle timeout closes it, so
            // a request never races that close on a reused connection.
            .pool_idle_timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("a plain HTTP client builds");
        Arc::new(LabClient {
            endpoint: Endpoint::new(http, url),
            shared,
            clock,
            exchanges,
            session: std::sync::Mutex::new(None),
            wake: Notify::new(),
            force_reconnect: AtomicBool::new(false),
            next_request_id: AtomicU64::new(1),
        })
    }

    pub fn session(&self) -> Option<SessionId> {
        *self
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_session(&self, session: Option<SessionId>) {
        *self
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = session;
    }

    /// "Reconnect now": skip the rest of the backoff wait.
    pub fn reconnect_now(&self) {
        self.force_reconnect.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn record(
        &self,
        method: &'static str,
        what: String,
        status: u16,
        sent: &[(&str, String)],
        received: &HeaderMap,
    ) {
        let at = self.clock.now();
        self.exchanges
            .exchange(at, method, what, status, sent, received);
    }

    fn request_id(&self) -> RequestId {
        RequestId(self.next_request_id.fetch_add(1, Ordering::Relaxed))
    }

    /// `initialize` + `notifications/initialized`; tells the core a new session began.
    pub async fn initialize(&self) -> Result<SessionId, ClientError> {
        let init = Initialize::new(
            MODELLED_REVISION,
            "forkscope-lab",
            env!("CARGO_PKG_VERSION"),
        );
        let init = Request::new(self.request_id(), Call::Initialize(init));
        let response = self
            .endpoint
            .post(Headers::default(), &init)
            .timeout(RESPONSE_TIMEOUT)
            .send()
            .await?;
        let status = response.status().as_u16();
        self.record(
            "POST",
            method::INITIALIZE.into(),
            status,
            &[],
            response.headers(),
        );
        let session = mcp::response::session_id(response.headers()).and_then(SessionId::parse);
        if status != 200 {
            let message = response.text().await.unwrap_or_default();
            return Err(ClientError::Status { status, message });
        }
        let session = session.ok_or(ClientError::NoSession)?;
        let id = session.to_string();
        let ack = self
            .endpoint
            .post(
                Headers::session(&id, MODELLED_REVISION),
                &Notification::Initialized,
            )
            .timeout(RESPONSE_TIMEOUT)
            .send()
            .await?;
        self.record(
            "POST",
            method::INITIALIZED.into(),
            ack.status().as_u16(),
            &[],
            ack.headers(),
        );
        {
            let now = self.clock.now();
            let mut guard = self.shared.lock();
            let core = &mut *guard;
            core.client.begin_session(now, session, &mut core.history);
        }
        self.set_session(Some(session));
        tracing::info!(session = %session.short(), "client initialized");
        Ok(session)
    }

    /// Best-effort `DELETE` of a session the client abandons.
    async fn delete(&self, session: SessionId) {
        let id = session.to_string();
        let request = self
            .endpoint
            .delete(Headers::session(&id, MODELLED_REVISION))
            .timeout(RESPONSE_TIMEOUT);
        if let Ok(response) = request.send().await {
            self.record(
                "DELETE",
                "end session".into(),
                response.status().as_u16(),
                &[],
                response.headers(),
            );
        }
    }

    /// The client's life: keep a standalone stream, reconnecting as the core decides.
    pub async fn run(self: Arc<Self>) {
        loop {
            let Some(session) = self.session() else {
                if let Err(e) = self.initialize().await {
                    tracing::warn!(error = %e, "initialize failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                continue;
            };
            let phase = self.shared.lock().client.phase();
            let (token, cursor) = match phase {
                Phase::Idle | Phase::Connected => (None, None),
                Phase::Reconnecting { .. } => {
                    let plan = self.wait_for_reconnect().await;
                    let Some(plan) = plan else { continue };
                    if plan.token_stripped {
                        tracing::warn!(
                            "fault: the resumption token header was dropped on this retry"
                        );
                    }
                    (plan.token, plan.last_event_id)
                }
                Phase::GaveUp { .. } => {
                    tracing::warn!("retry budget exhausted; waiting for a reconnect or restart");
                    self.wake.notified().await;
                    if self.force_reconnect.swap(false, Ordering::SeqCst) {
                        // Start over: a new session (initialize resets the core's client).
                        self.abandon(session, true).await;
                    }
                    continue;
                }
            };
            self.stream_once(session, token, cursor).await;
        }
    }

    /// Waits until the core says a reconnect is due (or the user forces one), then takes it.
    async fn wait_for_reconnect(&self) -> Option<forkscope_core::ReconnectPlan> {
        loop {
            let force = self.force_reconnect.swap(false, Ordering::SeqCst);
            let now = self.clock.now();
            let (plan, due) = {
                let mut core = self.shared.lock();
                let plan = core.client.reconnect_plan(now, force);
                (plan, core.client.poll_timeout())
            };
            if plan.is_some() {
                return plan;
            }
            if !matches!(
                self.shared.lock().client.phase(),
                Phase::Reconnecting { .. }
            ) {
                return None;
            }
            let wait = due
                .and_then(|due| self.clock.real_ms_until(due))
                .map_or(POLL, |ms| Duration::from_millis(ms).min(POLL));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    fn attempt_failed(&self) {
        let now = self.clock.now();
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        core.client.on_attempt_failed(now, &mut core.history);
    }

    /// Gives up on `session` (DELETE when it may still exist) and starts over with a new one.
    async fn abandon(&self, session: SessionId, delete: bool) {
        if delete {
            self.delete(session).await;
        }
        self.set_session(None);
    }
}

/// A stream's identity headers as the core reads them.
fn core_headers(identity: &mcp::StreamIdentity) -> StreamHeaders<'_> {
    StreamHeaders {
        stream: identity.stream.as_deref(),
        resumed: identity.resumed,
        token: identity.token.as_deref(),
    }
}
