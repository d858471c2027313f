//! Requests refused before they reach the core: each cause a [`Refusal`] variant whose status
//! and sentence are chosen here, once; the 503 a full server answers with; and the checks every
//! request on an existing session passes first.

use super::App;
use crate::wire::headers::{self, SUPPORTED_REVISIONS};
use crate::wire::{Core, jsonrpc};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forkscope_core::{SessionError, SessionId};
use serde_json::{Value, json};

/// A JSON body ends with a newline, so `curl` leaves the shell prompt on a line of its own.
pub(crate) fn json_response(status: StatusCode, mut body: String) -> Response {
    body.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn session_error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        jsonrpc::error(&Value::Null, jsonrpc::SESSION_ERROR, message, None),
    )
}

/// A request refused before it reaches the core, answered with its status and a JSON-RPC error
/// body that carries its sentence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("more than one {0} header: send exactly one")]
    RepeatedHeader(&'static str),
    /// Answered 400, or what the policy's HTTP layer answers instead.
    #[error("unsupported MCP-Protocol-Version; this server speaks {}", SUPPORTED_REVISIONS.join(", "))]
    UnsupportedVersion(StatusCode),
    #[error("request head too large")]
    HeadTooLarge(u16),
    #[error("missing Mcp-Session-Id: initialize first")]
    MissingSession,
    /// The session is unknown or ended: 404, which tells a client to initialize again.
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("no Host header: say which server you dialled")]
    NoHost,
    #[error("Host not allowed: forkscope answers to loopback names (add others with --allow-host)")]
    HostNotAllowed,
    #[error("Origin not allowed: forkscope serves loopback pages only")]
    OriginNotAllowed,
}

impl Refusal {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Refusal::RepeatedHeader(_) | Refusal::MissingSession | Refusal::NoHost => {
                StatusCode::BAD_REQUEST
            }
            Refusal::Session(_) => StatusCode::NOT_FOUND,
            Refusal::HostNotAllowed | Refusal::OriginNotAllowed => StatusCode::FORBIDDEN,
            Refusal::UnsupportedVersion(status) => *status,
            Refusal::HeadTooLarge(status) => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
            }
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        session_error(self.status(), &self.to_string())
    }
}

/// Why a full server refuses new work for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// The session limit is reached.
    TooManySessions,
    /// The replay memory budget is used up.
    OverBudget,
    /// The shared store (Redis) does not answer this replica.
    StoreUnreachable,
    /// Other replicas kept moving the record this request decides on (a burst of resumes of
    /// one stream): a retry will find it still.
    StoreContended,
    /// The task table is full (the tasks extension).
    TooManyTasks,
    /// As many `subscriptions/listen` streams are open as this server holds.
    TooManyListens,
}

impl Unavailable {
    fn reason(self) -> &'static str {
        match self {
            Unavailable::TooManySessions => "too_many_sessions",
            Unavailable::OverBudget => "over_budget",
            Unavailable::StoreUnreachable => "store_unavailable",
            Unavailable::StoreContended => "store_contended",
            Unavailable::TooManyTasks => "too_many_tasks",
            Unavailable::TooManyListens => "too_many_listens",
        }
    }
}

/// 500 for request `id`: the shared store holds a record no replica writes (a Lua error, a key
/// of the wrong type, a field that is not a number). Terminal: no `Retry-After`, since a retry
/// would read the same record; `data.reason` is `store_corrupt` and the message names the key.
pub(crate) fn store_corrupt(id: &Value, message: &str) -> Response {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        jsonrpc::error(
            id,
            jsonrpc::SESSION_ERROR,
            message,
            Some(json!({ "reason": "store_corrupt" })),
        ),
    )
}

/// 503 for request `id`: the core's sentence, why in a word, and when to retry (in the body's
/// `retryAfterSecs` and in `Retry-After`).
pub(crate) fn unavailable(
    id: &Value,
    why: Unavailable,
    message: &str,
    retry_after_secs: u64,
) -> Response {
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        jsonrpc::error(
            id,
            jsonrpc::SESSION_ERROR,
            message,
            Some(json!({ "reason": why.reason(), "retryAfterSecs": retry_after_secs })),
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

/// `MCP-Protocol-Version`, when present, must be one this server speaks — every copy of it.
pub(crate) fn check_protocol_version(
    headers: &HeaderMap,
    status: StatusCode,
) -> Result<(), Refusal> {
    let supported = headers
        .get_all(headers::PROTOCOL_VERSION)
        .iter()
        .all(|v| v.to_str().is_ok_and(|v| SUPPORTED_REVISIONS.contains(&v)));
    if supported {
        return Ok(());
    }
    Err(Refusal::UnsupportedVersion(status))
}

/// The session a request names: 400 without the header, 404 when unknown or ended.
fn session_of(headers: &HeaderMap, core: &Core) -> Result<SessionId, Refusal> {
    let mut copies = headers.get_all(headers::SESSION_ID).iter();
    let Some(raw) = copies.next() else {
        return Err(Refusal::MissingSession);
    };
    if copies.next().is_some() {
        return Err(Refusal::RepeatedHeader("Mcp-Session-Id"));
    }
    raw.to_str()
        .ok()
        .and_then(SessionId::parse)
        .filter(|id| core.server.session(*id).is_some())
        .ok_or(Refusal::Session(SessionError::Unknown))
}

/// The checks every request on an existing session passes first: a protocol version this server
/// speaks, and a session it holds. Returns the locked core with the session. Its idle clock is
/// left alone: only an admitted request starts it over ([`forkscope_core::Server::touch`]).
pub(super) fn session_request<'a>(
    app: &'a App,
    headers: &HeaderMap,
) -> Result<(std::sync::MutexGuard<'a, Core>, SessionId), Refusal> {
    let core = app.shared.lock();
    let http = forkscope_core::resume::sdk::http(core.server.policy());
    let status = StatusCode::from_u16(http.unsupported_version).unwrap_or(StatusCode::BAD_REQUEST);
    check_protocol_version(headers, status)?;
    let session = session_of(headers, &core)?;
    Ok((core, session))
}

pub(crate) fn accepts(headers: &HeaderMap, mime: &str) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|m| {
                let m = m.split(';').next().unwrap_or("").trim();
                m == mime || m == "*/*"
            })
        })
    })
}

/// A resume the core refused: its status, its sentence, and in the body's data why in a word,
/// what the client should do, and the status again (for clients that only read bodies).
pub(crate) fn resume_rejected(rejected: &forkscope_core::ResumeRejected) -> Response {
    let reason = rejected.reason();
    let data = json!({
        "reason": reason.as_str(),
        "action": rejected.client_action().as_str(),
        "status": reason.http_status(),
    });
    let body = jsonrpc::error(
        &Value::Null,
        jsonrpc::RESUME_REJECTED,
        &rejected.to_string(),
        Some(data),
    );
    let status = StatusCode::from_u16(reason.http_status()).unwrap_or(StatusCode::CONFLICT);
    let mut response = json_response(status, body);
    if let Some(secs) = rejected.retry_after_secs() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// What an unreadable identity header is judged as: a value no id, cursor or token matches
/// (the core's rules say what else it may mean).
const UNREADABLE: &str = forkscope_core::resume::sdk::UNREADABLE_CURSOR;

/// A header that names a stream or a position: at most one copy (two copies that disagree
/// cannot both be believed, whatever their order), and one that is not visible ASCII is
/// present but malformed — never absent, which would turn a garbled resume into a new stream.
pub(crate) fn identity_header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<Option<&'a str>, Refusal> {
    let mut copies = headers.get_all(name).iter();
    let Some(value) = copies.next() else {
        return Ok(None);
    };
    if copies.next().is_some() {
        return Err(Refusal::RepeatedHeader(name));
    }
    Ok(Some(value.to_str().unwrap_or(UNREADABLE)))
}
