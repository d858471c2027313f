//! The JSON-RPC messages an MCP client sends, as types: serializing one is the only way a
//! request body is written, so `initialize` and `tools/call` are spelled once.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Method names, for the clients here and for servers that match on them.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "notifications/initialized";
    pub const TOOLS_LIST: &str = "tools/list";
    pub const TOOLS_CALL: &str = "tools/call";
    pub const PING: &str = "ping";
    pub const CANCELLED: &str = "notifications/cancelled";
    pub const PROGRESS: &str = "notifications/progress";
    pub const LOG_SET_LEVEL: &str = "logging/setLevel";
}

/// The version field every message carries; it serializes as `"2.0"` and nothing else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JsonRpc;

impl Serialize for JsonRpc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("2.0")
    }
}

/// A request's id. forkscope's clients number their requests, so an id is a number; an answer
/// matches it only if it echoes that number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

impl RequestId {
    /// Whether `id`, as an answer carries it, is this request's.
    pub fn matches(self, id: &Value) -> bool {
        id.as_u64() == Some(self.0)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The token a `tools/call` asks its progress notifications to carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ProgressToken {
    Number(u64),
    Text(String),
}

/// `initialize`'s params: the revision the client speaks, no capabilities, and who it is.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Initialize {
    pub protocol_version: String,
    pub capabilities: Capabilities,
    pub client_info: Implementation,
}

impl Initialize {
    /// A client named `name` at `version`, speaking `revision`.
    pub fn new(revision: &str, name: &str, version: &str) -> Initialize {
        Initialize {
            protocol_version: revision.to_owned(),
            capabilities: Capabilities {},
            client_info: Implementation {
                name: name.to_owned(),
                version: version.to_owned(),
            },
        }
    }
}

/// A client's capabilities: forkscope's clients claim none.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Capabilities {}

#[derive(Clone, Debug, Serialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
}

/// `tools/call`'s params: the tool, its arguments, and the progress token if one is asked for.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

impl ToolCall {
    /// A call that streams: its progress notifications will carry `token`.
    pub fn with_progress(name: &str, arguments: Value, token: ProgressToken) -> ToolCall {
        ToolCall {
            name: name.to_owned(),
            arguments,
            meta: Some(Meta {
                progress_token: token,
            }),
        }
    }

    /// A call that wants only its result.
    pub fn plain(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            name: name.to_owned(),
            arguments,
            meta: None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    #[serde(rename = "progressToken")]
    pub progress_token: ProgressToken,
}

/// What a request asks, with its params.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "method", content = "params")]
pub enum Call {
    #[serde(rename = "initialize")]
    Initialize(Initialize),
    #[serde(rename = "tools/list")]
    ToolsList {},
    #[serde(rename = "tools/call")]
    ToolsCall(ToolCall),
    #[serde(rename = "ping")]
    Ping {},
}

/// A request: a call and the id its answer will carry.
#[derive(Clone, Debug, Serialize)]
pub struct Request {
    pub jsonrpc: JsonRpc,
    pub id: RequestId,
    #[serde(flatten)]
    pub call: Call,
}

impl Request {
    pub fn new(id: RequestId, call: Call) -> Request {
        Request {
            jsonrpc: JsonRpc,
            id,
            call,
        }
    }
}

/// A notification: no id, no answer.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "method", content = "params")]
pub enum Notification {
    /// Sent once `initialize` is answered: the session is ready.
    #[serde(rename = "notifications/initialized")]
    Initialized,
    /// The client no longer wants request `request_id`'s answer.
    #[serde(rename = "notifications/cancelled")]
    Cancelled {
        #[serde(rename = "requestId")]
        request_id: RequestId,
        reason: String,
    },
}

/// A message a client posts, as its body is written.
pub trait Body {
    fn body(&self) -> String;
}

impl Body for Request {
    fn body(&self) -> String {
        to_json(self)
    }
}

impl Body for Notification {
    fn body(&self) -> String {
        #[derive(Serialize)]
        struct Envelope<'a> {
            jsonrpc: JsonRpc,
            #[serde(flatten)]
            notification: &'a Notification,
        }
        to_json(&Envelope {
            jsonrpc: JsonRpc,
            notification: self,
        })
    }
}

fn to_json(message: &impl Serialize) -> String {
    // Strings, numbers, string-keyed maps and JSON values: nothing here can fail to serialize.
    serde_json::to_string(message).expect("an MCP message serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(body: String) -> Value {
        serde_json::from_str(&body).unwrap()
    }

    #[test]
    fn initialize_is_spelled_as_the_revision_says() {
        let init = Request::new(
            RequestId(0),
            Call::Initialize(Initialize::new("2025-11-25", "t", "0")),
        );
        assert_eq!(
            parsed(init.body()),
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}})
        );
    }

    #[test]
    fn a_tool_call_carries_its_progress_token_in_meta() {
        let call = ToolCall::with_progress(
            "progress_task",
            json!({"steps": 3}),
            ProgressToken::Text("p".into()),
        );
        let body = Request::new(RequestId(7), Call::ToolsCall(call)).body();
        assert_eq!(
            parsed(body),
            json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress_task","arguments":{"steps":3},"_meta":{"progressToken":"p"}}})
        );
        let plain = Request::new(
            RequestId(8),
            Call::ToolsCall(ToolCall::plain("x", json!({}))),
        );
        assert_eq!(
            parsed(plain.body())["params"],
            json!({"name":"x","arguments":{}})
        );
        let numbered = ToolCall::with_progress("x", json!({}), ProgressToken::Number(8));
        assert_eq!(
            serde_json::to_value(numbered).unwrap()["_meta"],
            json!({"progressToken": 8})
        );
    }

    #[test]
    fn notifications_have_no_id() {
        assert_eq!(
            parsed(Notification::Initialized.body()),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"})
        );
        let cancel = Notification::Cancelled {
            request_id: RequestId(3),
            reason: "user".into(),
        };
        assert_eq!(
            parsed(cancel.body()),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user"}})
        );
        let list = Request::new(RequestId(2), Call::ToolsList {});
        assert_eq!(
            parsed(list.body()),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}})
        );
    }

    #[test]
    fn each_message_is_sent_under_its_method_name() {
        let name = |body: String| parsed(body)["method"].as_str().unwrap().to_owned();
        let request = |call| name(Request::new(RequestId(1), call).body());
        let init = Initialize::new("2025-11-25", "t", "0");
        assert_eq!(request(Call::Initialize(init)), method::INITIALIZE);
        assert_eq!(request(Call::ToolsList {}), method::TOOLS_LIST);
        let call = ToolCall::plain("x", json!({}));
        assert_eq!(request(Call::ToolsCall(call)), method::TOOLS_CALL);
        assert_eq!(request(Call::Ping {}), method::PING);
        assert_eq!(name(Notification::Initialized.body()), method::INITIALIZED);
        let cancel = Notification::Cancelled {
            request_id: RequestId(1),
            reason: String::new(),
        };
        assert_eq!(name(cancel.body()), method::CANCELLED);
    }

    #[test]
    fn an_answer_matches_only_its_own_number() {
        assert!(RequestId(4).matches(&json!(4)));
        assert!(!RequestId(4).matches(&json!("4")));
        assert!(!RequestId(4).matches(&json!(4.0)));
    }
}
