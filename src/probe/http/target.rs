//! The server under probe and the sessions the probe opens on it: requests whose answer the
//! probe needs before it goes on (`initialize`, `tools/list`, a quick tool), each bounded.

use super::{error_chain, read_bounded, reason_of};
use crate::wire::headers::MODELLED_REVISION;
use crate::wire::mcp::modern::ModernCall;
use crate::wire::mcp::{
    self, Call, Endpoint, Headers, Initialize, Initialized, Notification, Request, RequestId,
    Response, RpcError, method,
};
use futures_util::StreamExt;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, timeout, timeout_at};

/// Bounds on everything the probe reads.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// How long a request may take to be answered (status and headers).
    pub answer: Duration,
    /// Bytes one connection's body may carry before the probe cuts it.
    pub body_bytes: usize,
    /// Bytes of a JSON or error body the probe reads.
    pub json_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            answer: Duration::from_secs(5),
            body_bytes: 8 << 20,
            json_bytes: 1 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{what}: no answer within {ms} ms")]
    Timeout { what: &'static str, ms: u128 },
    /// The whole chain of causes is said: reqwest's own message ("error sending request")
    /// names no reason; the connection refusal beneath it does.
    #[error("{what}: {}", error_chain(source))]
    Transport {
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: answered {status}{}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Status {
        what: &'static str,
        status: u16,
        reason: Option<String>,
    },
    #[error("{what}: {why}")]
    Protocol { what: &'static str, why: String },
    /// The request right after `initialize`, on the session it made, was answered 404: the
    /// session is unknown where the request landed. Who answered `initialize` is kept.
    #[error("{what}: answered 404 for the session initialize had just made")]
    SessionLost {
        what: &'static str,
        server: String,
        version: String,
    },
}

/// A server under probe.
#[derive(Debug, Clone)]
pub struct Target {
    pub(super) endpoint: Endpoint,
    pub bounds: Bounds,
}

/// A session the probe opened.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    pub version: String,
    /// A label unique to this session, put into the events the probe asks for.
    pub label: String,
    /// `serverInfo` from the initialize result, as `name version`.
    pub server: String,
    next_request: AtomicU64,
}

impl Session {
    pub fn request_id(&self) -> RequestId {
        RequestId(self.next_request.fetch_add(1, Ordering::Relaxed))
    }

    /// The headers of every request in this session.
    pub fn headers(&self) -> Headers<'_> {
        Headers::session(&self.id, &self.version)
    }
}

impl Target {
    pub fn new(url: reqwest::Url, bounds: Bounds) -> Result<Target, HttpError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(bounds.answer)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| HttpError::Transport {
                what: "building the HTTP client",
                source,
            })?;
        Ok(Target {
            endpoint: Endpoint::new(http, url),
            bounds,
        })
    }

    async fn send(
        &self,
        what: &'static str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, HttpError> {
        match timeout(self.bounds.answer, req.send()).await {
            Err(_) => Err(HttpError::Timeout {
                what,
                ms: self.bounds.answer.as_millis(),
            }),
            Ok(Err(source)) => Err(HttpError::Transport { what, source }),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// Reads a JSON-RPC answer to request `id`, whether it came as JSON or as an SSE stream.
    async fn answer_of(
        &self,
        what: &'static str,
        resp: reqwest::Response,
        id: RequestId,
    ) -> Result<Value, HttpError> {
        match self.outcome_of(what, resp, id, false).await? {
            Ok(result) => Ok(result),
            Err(error) => Err(HttpError::Protocol {
                what,
                why: format!("JSON-RPC error {error}"),
            }),
        }
    }

    /// A 2026-07-28 request (no session): its result, or the JSON-RPC error it was answered
    /// with, read from JSON or SSE.
    pub async fn modern(
        &self,
        what: &'static str,
        call: &ModernCall<'_>,
    ) -> Result<Result<Value, RpcError>, HttpError> {
        let resp = self
            .send(what, call.post(&self.endpoint.http, &self.endpoint.url))
            .await?;
        self.outcome_of(what, resp, RequestId(call.id), true).await
    }

    /// A long-lived 2026-07-28 request (`subscriptions/listen`): its stream, to read message
    /// by message, or the answer that came instead (an error, a JSON result).
    pub async fn modern_open(
        &self,
        what: &'static str,
        call: &ModernCall<'_>,
    ) -> Result<Opened, HttpError> {
        let resp = self
            .send(what, call.post(&self.endpoint.http, &self.endpoint.url))
            .await?;
        if resp.status().is_success() && mcp::response::is_event_stream(resp.headers()) {
            return Ok(Opened::Stream(Messages {
                body: Box::pin(resp.bytes_stream()),
                parser: crate::wire::sse::Parser::new(),
                ready: std::collections::VecDeque::new(),
                seen: 0,
                limit: self.bounds.body_bytes,
            }));
        }
        Ok(Opened::Answer(
            self.outcome_of(what, resp, RequestId(call.id), true)
                .await?,
        ))
    }

    /// The answer to request `id`: its result or its error, whether it came as JSON or as an
    /// SSE stream. `typed_in_status`: a JSON-RPC error for `id` under a 4xx is the error the
    /// server answered with (a 2026-07-28 server maps its errors to statuses: FastMCP answers
    /// an unknown task 400 with −32602), not a refusal of the request.
    async fn outcome_of(
        &self,
        what: &'static str,
        resp: reqwest::Response,
        id: RequestId,
        typed_in_status: bool,
    ) -> Result<Result<Value, RpcError>, HttpError> {
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = read_bounded(resp, self.bounds.json_bytes, self.bounds.answer).await;
            if typed_in_status
                && (400..500).contains(&status)
                && let Some(error) = Response::parse(&body)
                    .filter(|r| r.answers(id))
                    .and_then(|r| r.error)
            {
                return Ok(Err(error));
            }
            return Err(HttpError::Status {
                what,
                status,
                reason: reason_of(&body),
            });
        }
        let message = if mcp::response::is_event_stream(resp.headers()) {
            self.answer_on_stream(what, resp, id).await?
        } else {
            let body = read_bounded(resp, self.bounds.json_bytes, self.bounds.answer).await;
            Response::read(&body).map_err(|e| HttpError::Protocol {
                what,
                why: format!("not JSON: {e}"),
            })?
        };
        message.outcome().ok_or(HttpError::Protocol {
            what,
            why: "a response without a result".into(),
        })
    }

    /// The answer to `id` on an SSE stream, read within the bounds.
    async fn answer_on_stream(
        &self,
        what: &'static str,
        resp: reqwest::Response,
        id: RequestId,
    ) -> Result<Response, HttpError> {
        let deadline = Instant::now() + self.bounds.answer;
        let mut parser = crate::wire::sse::Parser::new();
        let mut body = resp.bytes_stream();
        let mut seen = 0usize;
        loop {
            let chunk = match timeout_at(deadline, body.next()).await {
                Err(_) => {
                    return Err(HttpError::Timeout {
                        what,
                        ms: self.bounds.answer.as_millis(),
                    });
                }
                Ok(None) => {
                    return Err(HttpError::Protocol {
                        what,
                        why: "the stream ended without the response".into(),
                    });
                }
                Ok(Some(Err(source))) => return Err(HttpError::Transport { what, source }),
                Ok(Some(Ok(chunk))) => chunk,
            };
            seen += chunk.len();
            if seen > self.bounds.json_bytes {
                return Err(HttpError::Protocol {
                    what,
                    why: format!("over {} bytes before the response", self.bounds.json_bytes),
                });
            }
            let events = parser.feed(&chunk).map_err(|e| HttpError::Protocol {
                what,
                why: e.to_string(),
            })?;
            let found = events.iter().find_map(|e| {
                Response::parse(e.data.as_bytes()).filter(|message| message.answers(id))
            });
            if let Some(message) = found {
                return Ok(message);
            }
        }
    }

    /// `initialize` and `notifications/initialized`: a new session, as a stock client opens it.
    pub async fn open_session(&self, label: String) -> Result<Session, HttpError> {
        let what = method::INITIALIZE;
        let id = RequestId(0);
        let init = Initialize::new(
            MODELLED_REVISION,
            "forkscope-probe",
            env!("CARGO_PKG_VERSION"),
        );
        let init = Request::new(id, Call::Initialize(init));
        let resp = self
            .send(what, self.endpoint.post(Headers::default(), &init))
            .await?;
        let session_id = mcp::response::session_id(resp.headers()).map(str::to_owned);
        let result = self.answer_of(what, resp, id).await?;
        let Some(session_id) = session_id else {
            return Err(HttpError::Protocol {
                what,
                why: "no Mcp-Session-Id: the server is stateless, and a stateless server has no streams to resume".into(),
            });
        };
        let result = Initialized::of(&result);
        let info = |field: Option<String>| {
            field
                .as_deref()
                .unwrap_or("?")
                .chars()
                .take(60)
                .collect::<String>()
        };
        let session = Session {
            id: session_id,
            version: result
                .protocol_version
                .unwrap_or_else(|| MODELLED_REVISION.to_owned()),
            label,
            server: format!(
                "{} {}",
                info(result.server_name),
                info(result.server_version)
            ),
            next_request: AtomicU64::new(1),
        };
        let what = method::INITIALIZED;
        let note = self
            .endpoint
            .post(session.headers(), &Notification::Initialized);
        let resp = self.send(what, note).await?;
        let status = resp.status().as_u16();
        if status == 404 {
            return Err(HttpError::SessionLost {
                what,
                server: session.server,
                version: session.version,
            });
        }
        if !(200..300).contains(&status) {
            return Err(HttpError::Status {
                what,
                status,
                reason: None,
            });
        }
        Ok(session)
    }

    /// The server's MCP endpoint, as the probe was given it.
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// A request whose answer the probe needs before going on (`tools/list`, a quick tool).
    pub async fn request(
        &self,
        what: &'static str,
        session: &Session,
        call: Call,
    ) -> Result<Value, HttpError> {
        let id = session.request_id();
        let body = Request::new(id, call);
        let resp = self
            .send(what, self.endpoint.post(session.headers(), &body))
            .await?;
        self.answer_of(what, resp, id).await
    }

    /// [`Target::request`] on its own task: a tool that sends its notifications before it
    /// answers (an emitter whose answer comes after its whole run) is watched while it runs,
    /// not waited for. Bounded as every request is.
    pub fn request_detached(
        &self,
        what: &'static str,
        session: &Session,
        call: Call,
    ) -> tokio::task::JoinHandle<Result<Value, HttpError>> {
        let id = session.request_id();
        let body = Request::new(id, call);
        let req = self.endpoint.post(session.headers(), &body);
        let target = self.clone();
        tokio::spawn(async move {
            let resp = target.send(what, req).await?;
            target.answer_of(what, resp, id).await
        })
    }

    /// Ends a session (best effort: the case is over either way).
    pub async fn end_session(&self, session: &Session) {
        let req = self.endpoint.delete(session.headers());
        let _ = timeout(self.bounds.answer, req.send()).await;
    }
}

/// What a long-lived request was answered with.
#[derive(Debug)]
pub enum Opened {
    Stream(Messages),
    Answer(Result<Value, RpcError>),
}

type Body = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send>,
>;

/// An SSE response read one JSON-RPC message at a time, bounded in bytes. Dropping it closes
/// the connection.
pub struct Messages {
    body: Body,
    parser: crate::wire::sse::Parser,
    ready: std::collections::VecDeque<Value>,
    seen: usize,
    limit: usize,
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Messages")
            .field("ready", &self.ready.len())
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl Messages {
    /// The next message, or `None` when the stream ended, broke, went past its bound, or
    /// `deadline` came first. Data that is not JSON is skipped.
    pub async fn next(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Some(message);
            }
            let chunk = timeout_at(deadline, self.body.next()).await.ok()??.ok()?;
            self.seen += chunk.len();
            if self.seen > self.limit {
                return None;
            }
            let events = self.parser.feed(&chunk).ok()?;
            self.ready.extend(
                events
                    .iter()
                    .filter_map(|e| serde_json::from_str(&e.data).ok()),
            );
        }
    }
}
