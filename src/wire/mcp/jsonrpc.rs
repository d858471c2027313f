//! The JSON-RPC shapes the server writes: results, errors with their codes, notifications.
//! What a client sends is typed in [`super::message`].

use serde_json::{Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A resume the server refused (its `data.reason` says which rule).
pub const RESUME_REJECTED: i64 = -32002;
/// A session-level refusal (unknown session, session limit, bad headers).
pub const SESSION_ERROR: i64 = -32001;
/// A request cut short because the server is stopping: retry it (elsewhere, or later).
pub const SERVER_STOPPING: i64 = -32003;
/// A call cut short because the shared store was restored from an older state: its outcome is
/// unknown (`data.reason` is `store_rolled_back`).
pub const STORE_ROLLED_BACK: i64 = -32004;

pub fn result(id: &Value, result: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string()
}

pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> String {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error }).to_string()
}

pub fn notification(method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string()
}
