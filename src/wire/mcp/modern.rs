//! A 2026-07-28 request, spelled once: the `_meta` every request carries (the revision, the
//! client's capabilities, the tasks extension when declared, forkscope's idempotency key when
//! given) and the headers that mirror it (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`).
//! No session, no `Last-Event-ID`: nothing of 2025-11-25 is sent.

use crate::wire::headers;
use forkscope_core::revision::{META_CAPABILITIES, META_VERSION, MODERN};
use forkscope_core::tasks::{EXTENSION as TASKS_EXTENSION, IDEMPOTENCY_KEY};
use serde_json::{Value, json};

/// One 2026-07-28 request: `id`, `method` and its `params` (the `_meta` is added here).
#[derive(Clone, Debug)]
pub struct ModernCall<'a> {
    pub id: u64,
    pub method: &'a str,
    pub params: Value,
    /// Declare the tasks extension: the server may answer a `tools/call` with a task.
    pub tasks: bool,
    /// `_meta["io.forkscope/idempotencyKey"]`: what names the intent across re-issues.
    pub key: Option<&'a str>,
}

impl ModernCall<'_> {
    /// The request, ready to send to `url` (JSON or SSE accepted, as the transport requires).
    pub fn post(&self, http: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
        let mut params = self.params.clone();
        let mut capabilities = json!({});
        if self.tasks {
            capabilities["extensions"] = json!({ TASKS_EXTENSION: {} });
        }
        let mut meta = json!({ META_VERSION: MODERN, META_CAPABILITIES: capabilities });
        if let Some(key) = self.key {
            meta[IDEMPOTENCY_KEY] = json!(key);
        }
        // Entries the caller put in `_meta` itself stay beside these.
        if let Some(Value::Object(given)) = params.get("_meta") {
            for (name, value) in given {
                meta[name] = value.clone();
            }
        }
        params["_meta"] = meta;
        let name = params
            .get("name")
            .or_else(|| params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body =
            json!({ "jsonrpc": "2.0", "id": self.id, "method": self.method, "params": params });
        let mut request = http
            .post(url)
            .header(headers::PROTOCOL_VERSION, MODERN)
            .header(headers::MCP_METHOD, self.method)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&body);
        if let Some(name) = name {
            request = request.header(headers::MCP_NAME, name);
        }
        request
    }
}

/// The task a `CreateTaskResult` names: a result of `resultType: "task"` with its `taskId`.
/// Every reader of a `tools/call` answer asks this one question here (the lab's client, the
/// probe, the balancer learning where a task lives).
pub fn created_task(result: &Value) -> Option<&str> {
    (result.get("resultType").and_then(Value::as_str) == Some("task"))
        .then(|| result.get("taskId").and_then(Value::as_str))
        .flatten()
}
