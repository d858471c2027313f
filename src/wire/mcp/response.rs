//! Reading what an MCP server answers: the JSON-RPC response, its error, the result of
//! `initialize`, and the transport's headers on the way back.
//!
//! Reading is lenient where a server may be odd: the probe meets servers it did not write, and
//! reports what they sent rather than failing to read it.

use super::message::RequestId;
use crate::wire::headers;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// A JSON-RPC response, or any message read as one: each part is there only if sent (a `null`
/// is sent, too).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Response {
    #[serde(default, deserialize_with = "present")]
    pub id: Option<Value>,
    /// Set on a request or notification: a message that is no response at all.
    #[serde(default, deserialize_with = "present")]
    pub method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    pub result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    pub error: Option<RpcError>,
}

/// A field that is there, whatever it holds.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    value: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(value).map(Some)
}

impl Response {
    /// Reads a body: an error if it is not JSON; JSON that is not an object carries nothing.
    pub fn read(body: &[u8]) -> Result<Response, serde_json::Error> {
        let value: Value = serde_json::from_slice(body)?;
        if value.is_object() {
            Response::deserialize(value)
        } else {
            Ok(Response::default())
        }
    }

    /// [`Response::read`], for a reader that has no use for why a body is not JSON.
    pub fn parse(body: &[u8]) -> Option<Response> {
        Response::read(body).ok()
    }

    /// Whether this is the answer to request `id` (a response carrying its id).
    pub fn answers(&self, id: RequestId) -> bool {
        self.method.is_none() && self.id.as_ref().is_some_and(|v| id.matches(v))
    }

    /// The result, or the error the server answered with, or `None` if it sent neither.
    pub fn outcome(self) -> Option<Result<Value, RpcError>> {
        match (self.error, self.result) {
            (Some(error), _) => Some(Err(error)),
            (None, Some(result)) => Some(Ok(result)),
            (None, None) => None,
        }
    }
}

/// A JSON-RPC error object, kept as the server sent it: its parts are read on demand, and it is
/// shown as it came (an odd error object is evidence too).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct RpcError(Value);

impl RpcError {
    pub fn code(&self) -> Option<i64> {
        self.0.get("code").and_then(Value::as_i64)
    }

    pub fn message(&self) -> Option<&str> {
        self.0.get("message").and_then(Value::as_str)
    }

    /// `data.reason`: which rule refused a resume (forkscope's servers name it).
    pub fn reason(&self) -> Option<&str> {
        self.0.pointer("/data/reason").and_then(Value::as_str)
    }

    /// The error of a refusal's body, if it is a JSON-RPC error.
    pub fn of_body(body: &[u8]) -> Option<RpcError> {
        Response::parse(body)?.error
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What `initialize`'s result says about the server, each part only if it sent it as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Initialized {
    /// The revision the server chose.
    pub protocol_version: Option<String>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
}

impl Initialized {
    pub fn of(result: &Value) -> Initialized {
        let text = |pointer: &str| {
            result
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Initialized {
            protocol_version: text("/protocolVersion"),
            server_name: text("/serverInfo/name"),
            server_version: text("/serverInfo/version"),
        }
    }
}

/// The session an answer to `initialize` opened: its `Mcp-Session-Id`, if readable.
pub fn session_id(received: &HeaderMap) -> Option<&str> {
    received
        .get(headers::SESSION_ID)
        .and_then(|v| v.to_str().ok())
}

/// Whether an answer is an SSE stream.
pub fn is_event_stream(received: &HeaderMap) -> bool {
    received
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"))
}

/// A stream response's identity headers (forkscope's extension), owned: they outlive the
/// response they came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamIdentity {
    /// `Mcp-Stream-Id`: which stream this is.
    pub stream: Option<String>,
    /// `Mcp-Stream-Resumed`: `true` on a resumed stream, `false` on one flagged new.
    pub resumed: Option<bool>,
    /// `Mcp-Resumption-Token`: issued with a new stream.
    pub token: Option<String>,
}

impl StreamIdentity {
    pub fn of(received: &HeaderMap) -> StreamIdentity {
        let get = |name: &str| {
            received
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        StreamIdentity {
            stream: get(headers::STREAM_ID),
            resumed: get(headers::STREAM_RESUMED).map(|v| v.eq_ignore_ascii_case("true")),
            token: get(headers::RESUMPTION_TOKEN),
        }
    }

    /// Whether the server answered with a new stream: a fresh token, or flagged not resumed.
    pub fn is_new(&self) -> bool {
        self.token.is_some() || self.resumed == Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_told_from_a_request_and_from_another_answer() {
        let answer = Response::parse(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#).unwrap();
        assert!(answer.answers(RequestId(3)));
        assert!(!answer.answers(RequestId(4)));
        let request = Response::parse(br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).unwrap();
        assert!(!request.answers(RequestId(3)));
        assert!(Response::parse(b"[1]").unwrap().id.is_none());
        assert!(Response::read(b"{nope").is_err());
        let null = Response::parse(br#"{"id":1,"error":null}"#).unwrap();
        assert_eq!(null.error.map(|e| e.to_string()).as_deref(), Some("null"));
    }

    #[test]
    fn an_error_says_its_parts_and_shows_as_sent() {
        let body = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32002,"message":"no","data":{"reason":"cursor_ahead"}}}"#;
        let error = RpcError::of_body(body).unwrap();
        assert_eq!(error.code(), Some(-32002));
        assert_eq!(error.message(), Some("no"));
        assert_eq!(error.reason(), Some("cursor_ahead"));
        let odd = RpcError::of_body(br#"{"error":"just text"}"#).unwrap();
        assert_eq!(
            (odd.code(), odd.to_string()),
            (None, "\"just text\"".into())
        );
        let outcome = Response::parse(body).unwrap().outcome();
        assert!(matches!(outcome, Some(Err(_))));
    }

    #[test]
    fn initialize_results_are_read_part_by_part() {
        let read = Initialized::of(&json!({
            "protocolVersion": "2025-06-18",
            "serverInfo": { "name": "s", "version": 2 }
        }));
        assert_eq!(read.protocol_version.as_deref(), Some("2025-06-18"));
        assert_eq!(read.server_name.as_deref(), Some("s"));
        assert_eq!(read.server_version, None);
    }
}
