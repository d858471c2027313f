//! What a POST on `/mcp` says, read once for every server that answers it (the in-process one
//! and the replica on a shared store): the body's media type, one JSON-RPC 2.0 message, the
//! method; `initialize`'s negotiated revision and result; a `tools/call`'s arguments.

// A refusal is the response itself, sent as soon as it is made: boxing it would buy nothing.
#![allow(clippy::result_large_err)]

use super::refusal::{json_response, session_error};
use super::tool;
use crate::wire::headers::{MODELLED_REVISION, SUPPORTED_REVISIONS};
use crate::wire::jsonrpc;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use forkscope_core::vocabulary::LogLevel;
use forkscope_core::work::ToolSpec;
use serde_json::{Value, json};

/// One JSON-RPC message, read and checked.
#[derive(Debug)]
pub(crate) struct Incoming {
    /// `None`: a notification or a response.
    pub id: Option<Value>,
    pub method: Option<String>,
    pub message: Value,
}

impl Incoming {
    /// Reads a POST body; a refusal is the response to send.
    pub(crate) fn read(
        headers: &HeaderMap,
        body: Result<Bytes, BytesRejection>,
    ) -> Result<Incoming, Response> {
        let body = match body {
            Ok(body) => body,
            // Too large (413) or unreadable: a JSON-RPC error like every other refusal.
            Err(rejection) => {
                let status = rejection.status();
                let message = match status {
                    StatusCode::PAYLOAD_TOO_LARGE => {
                        format!("the request body is over {} bytes", super::MAX_BODY_BYTES)
                    }
                    _ => format!("the request body could not be read: {rejection}"),
                };
                return Err(json_response(
                    status,
                    jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, &message, None),
                ));
            }
        };
        // Every Content-Type copy must say JSON: a request that says two things is refused.
        let mut types = headers.get_all(header::CONTENT_TYPE).iter().peekable();
        let is_json = types.peek().is_some()
            && types.all(|ct| {
                ct.to_str().is_ok_and(|ct| {
                    ct.split(';')
                        .next()
                        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
                })
            });
        if !is_json {
            return Err(session_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "POST bodies must be application/json",
            ));
        }
        let message: Value = serde_json::from_slice(&body).map_err(|e| {
            json_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::error(
                    &Value::Null,
                    jsonrpc::PARSE_ERROR,
                    &format!("invalid JSON: {e}"),
                    None,
                ),
            )
        })?;
        if !message.is_object() || message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let why =
                "expected one JSON-RPC 2.0 message (batches are not part of revision 2025-11-25)";
            return Err(json_response(
                StatusCode::BAD_REQUEST,
                jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, why, None),
            ));
        }
        let id = message.get("id").cloned();
        let method = match message.get("method") {
            None => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(_) => {
                return Err(json_response(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::error(
                        id.as_ref().unwrap_or(&Value::Null),
                        jsonrpc::INVALID_REQUEST,
                        "method must be a string",
                        None,
                    ),
                ));
            }
        };
        Ok(Incoming {
            id,
            method,
            message,
        })
    }

    pub(crate) fn params(&self) -> Value {
        self.message.get("params").cloned().unwrap_or(Value::Null)
    }
}

/// Where a request on a session goes, for every server alike.
#[derive(Debug)]
pub(crate) enum Routed {
    /// Answered here. `served`: the request was served (`ping`, `tools/list`), not refused, so
    /// it counts as the session's activity.
    Answered { response: Response, served: bool },
    /// A `tools/call` that may stream: the server opens its stream.
    CallTool,
}

pub(crate) fn route(method: &str, id: &Value, headers: &HeaderMap) -> Routed {
    let (response, served) = match method {
        "ping" => (
            json_response(StatusCode::OK, jsonrpc::result(id, json!({}))),
            true,
        ),
        "tools/list" => (
            json_response(
                StatusCode::OK,
                jsonrpc::result(
                    id,
                    json!({ "tools": [tool::schema(), super::emission::schema()] }),
                ),
            ),
            true,
        ),
        "tools/call" if !super::refusal::accepts(headers, "text/event-stream") => (
            json_response(
                StatusCode::NOT_ACCEPTABLE,
                jsonrpc::error(
                    id,
                    jsonrpc::INVALID_REQUEST,
                    "tools/call answers with an SSE stream: Accept must include text/event-stream",
                    None,
                ),
            ),
            false,
        ),
        "tools/call" => return Routed::CallTool,
        other => (
            json_response(
                StatusCode::OK,
                jsonrpc::error(
                    id,
                    jsonrpc::METHOD_NOT_FOUND,
                    &format!("method not found: {other}"),
                    None,
                ),
            ),
            false,
        ),
    };
    Routed::Answered { response, served }
}

/// `logging/setLevel`'s level; a refusal (−32602, naming the levels) is the response.
pub(crate) fn log_level(id: &Value, params: &Value) -> Result<LogLevel, Response> {
    let word = params.get("level").and_then(Value::as_str);
    word.and_then(LogLevel::parse).ok_or_else(|| {
        json_response(
            StatusCode::OK,
            jsonrpc::error(
                id,
                jsonrpc::INVALID_PARAMS,
                &format!(
                    "level must be one of {}; got {}",
                    LogLevel::names().join(", "),
                    params.get("level").unwrap_or(&Value::Null)
                ),
                None,
            ),
        )
    })
}

/// The answer to a `logging/setLevel` the server honoured.
pub(crate) fn log_level_set(id: &Value) -> Response {
    json_response(StatusCode::OK, jsonrpc::result(id, json!({})))
}

/// The revision an `initialize` settles on: the client's, when this server speaks it.
pub(crate) fn negotiated_version(message: &Value) -> &'static str {
    let requested = message
        .pointer("/params/protocolVersion")
        .and_then(Value::as_str);
    SUPPORTED_REVISIONS
        .iter()
        .copied()
        .find(|v| Some(*v) == requested)
        .unwrap_or(MODELLED_REVISION)
}

pub(crate) fn initialize_result(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false }, "logging": {} },
        "serverInfo": { "name": "forkscope", "version": env!("CARGO_PKG_VERSION") },
        "instructions": "forkscope models MCP Streamable HTTP 2025-11-25 resumption. Call progress_task; open GET /mcp for background events."
    })
}

/// A `tools/call`'s tool, arguments and progress token; a refusal (−32602) is the response.
pub(crate) fn tool_call(id: &Value, params: &Value) -> Result<(ToolSpec, Option<Value>), Response> {
    let invalid = |message: String| {
        json_response(
            StatusCode::OK,
            jsonrpc::error(id, jsonrpc::INVALID_PARAMS, &message, None),
        )
    };
    let name = params.get("name").and_then(Value::as_str);
    if name != Some("progress_task") {
        return Err(invalid(format!(
            "unknown tool {}; the tools are progress_task and emit_standalone",
            name.unwrap_or("(none)")
        )));
    }
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(_) => return Err(invalid("arguments must be an object".to_owned())),
    };
    let args = tool::parse_arguments(&args).map_err(|e| invalid(e.to_string()))?;
    let progress_token = match params.pointer("/_meta/progressToken") {
        None | Some(Value::Null) => None,
        Some(token) => match tool::check_progress_token(token) {
            Ok(()) => Some(token.clone()),
            Err(e) => return Err(invalid(e.to_string())),
        },
    };
    Ok((args, progress_token))
}
