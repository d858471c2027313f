//! Requests refused before they reach the core: a status and a JSON-RPC error body, and the
//! checks every request on an existing session passes first.

use super::App;
use crate::wire::headers::{self, SUPPORTED_REVISIONS};
use crate::wire::{Core, jsonrpc};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forkscope_core::{SessionError, SessionId};
use serde_json::Value;

/// A JSON body ends with a newline, so `curl` leaves the shell prompt on a line of its own.
pub(super) fn json_response(status: StatusCode, mut body: String) -> Response {
    body.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn session_error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        jsonrpc::error(&Value::Null, jsonrpc::SESSION_ERROR, message, None),
    )
}

/// A request refused before it reaches the core, answered with a JSON-RPC error body.
pub(super) struct Refusal(pub StatusCode, pub String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        session_error(self.0, &self.1)
    }
}

/// `MCP-Protocol-Version`, when present, must be one this server speaks — every copy of it.
fn check_protocol_version(headers: &HeaderMap) -> Result<(), Refusal> {
    let supported = headers
        .get_all(headers::PROTOCOL_VERSION)
        .iter()
        .all(|v| v.to_str().is_ok_and(|v| SUPPORTED_REVISIONS.contains(&v)));
    if supported {
        return Ok(());
    }
    Err(Refusal(
        StatusCode::BAD_REQUEST,
        format!(
            "unsupported MCP-Protocol-Version; this server speaks {}",
            SUPPORTED_REVISIONS.join(", ")
        ),
    ))
}

/// The session a request names: 400 without the header, 404 when unknown or ended.
fn session_of(headers: &HeaderMap, core: &Core) -> Result<SessionId, Refusal> {
    let mut copies = headers.get_all(headers::SESSION_ID).iter();
    let Some(raw) = copies.next() else {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "missing Mcp-Session-Id: initialize first".to_owned(),
        ));
    };
    if copies.next().is_some() {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "more than one Mcp-Session-Id header: send exactly one".to_owned(),
        ));
    }
    raw.to_str()
        .ok()
        .and_then(SessionId::parse)
        .filter(|id| core.server.session(*id).is_some())
        .ok_or_else(|| Refusal(StatusCode::NOT_FOUND, SessionError::Unknown.to_string()))
}

/// The checks every request on an existing session passes first: a protocol version this server
/// speaks, and a session it holds. Returns the locked core with the session. Its idle clock is
/// left alone: only an admitted request starts it over ([`forkscope_core::Server::touch`]).
pub(super) fn session_request<'a>(
    app: &'a App,
    headers: &HeaderMap,
) -> Result<(std::sync::MutexGuard<'a, Core>, SessionId), Refusal> {
    check_protocol_version(headers)?;
    let core = app.shared.lock();
    let session = session_of(headers, &core)?;
    Ok((core, session))
}

pub(super) fn accepts(headers: &HeaderMap, mime: &str) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').any(|m| {
                let m = m.split(';').next().unwrap_or("").trim();
                m == mime || m == "*/*"
            })
        })
    })
}
