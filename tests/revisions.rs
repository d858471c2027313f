//! Both protocol revisions on one endpoint, over real sockets: a 2025-11-25 client still opens
//! a session; a 2026-07-28 request is served statelessly, with the transport's refusals (the
//! version header mirrored, 405 on GET and DELETE, 404 for an unknown method) and its
//! cancellation (closing a call's response stream stops the call).

use forkscope::clock::LabClock;
use forkscope::wire::server::{self, RunningServer, ServeOptions};
use forkscope::wire::{Core, Shared};
use forkscope_core::AnomalyKind;
use forkscope_core::revision::{LEGACY, MODERN, Protocols};
use forkscope_core::{LabConfig, Policy};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A bound on any one wait, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);

async fn start(protocols: Protocols) -> (RunningServer, String) {
    let shared = Shared::new(Core::new(LabConfig::default(), Policy::Fenced).unwrap());
    let options = ServeOptions {
        protocols,
        ..ServeOptions::default()
    };
    let running = server::start(
        shared,
        Arc::new(LabClock::new()),
        options,
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let url = format!("http://{}/mcp", running.addr);
    (running, url)
}

/// A modern request: the `_meta` every one carries, and the headers that mirror it.
fn modern(method: &str, params: Value) -> (reqwest::header::HeaderMap, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p1",
    });
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("mcp-protocol-version", MODERN.parse().unwrap());
    headers.insert("mcp-method", method.parse().unwrap());
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        headers.insert("mcp-name", name.parse().unwrap());
    }
    headers.insert(
        "accept",
        "application/json, text/event-stream".parse().unwrap(),
    );
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    (headers, body)
}

async fn post(url: &str, headers: reqwest::header::HeaderMap, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .headers(headers)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn error_of(response: reqwest::Response) -> (u16, i64, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"]["code"].as_i64().unwrap(), body)
}

#[tokio::test]
async fn both_revisions_share_one_endpoint() {
    let (running, url) = start(Protocols::Both).await;
    // 2026-07-28: discover names both revisions, without a session.
    let (headers, body) = modern("server/discover", json!({}));
    let response = post(&url, headers, &body).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_none());
    let discovered: Value = response.json().await.unwrap();
    assert_eq!(discovered["result"]["resultType"], "complete");
    // A `CacheableResult`: rmcp 3.11's client refuses a discover result without these.
    assert_eq!(discovered["result"]["ttlMs"], 0);
    assert_eq!(discovered["result"]["cacheScope"], "public");
    let versions = &discovered["result"]["supportedVersions"];
    assert!(
        versions.as_array().unwrap().contains(&json!(MODERN)),
        "{versions}"
    );
    assert!(
        versions.as_array().unwrap().contains(&json!(LEGACY)),
        "{versions}"
    );
    // 2025-11-25: initialize still opens a session.
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    let response = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_some());
    // A 2026 GET or DELETE: 405, with what is allowed.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = reqwest::Client::new()
            .request(method.clone(), &url)
            .header("mcp-protocol-version", MODERN)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
        assert_eq!(response.headers()["allow"], "POST");
    }
    running.stop().await;
}

#[tokio::test]
async fn the_modern_transport_refuses_what_it_must() {
    let (running, url) = start(Protocols::Both).await;
    // The version header must mirror the body's `_meta`.
    let (mut headers, body) = modern("tools/list", json!({}));
    headers.insert("mcp-protocol-version", "2026-01-01".parse().unwrap());
    let (status, code, _) = error_of(post(&url, headers, &body).await).await;
    assert_eq!((status, code), (400, -32020));
    // Mcp-Name must mirror the tool's name.
    let (mut headers, body) = modern("tools/call", json!({ "name": "progress_task" }));
    headers.insert("mcp-name", "something_else".parse().unwrap());
    let (status, code, _) = error_of(post(&url, headers, &body).await).await;
    assert_eq!((status, code), (400, -32020));
    // An unserved version: the error lists what is served.
    let (mut headers, mut body) = modern("tools/list", json!({}));
    headers.insert("mcp-protocol-version", "1900-01-01".parse().unwrap());
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let (status, code, body) = error_of(post(&url, headers, &body).await).await;
    assert_eq!((status, code), (400, -32022));
    assert_eq!(body["error"]["data"]["requested"], "1900-01-01");
    // A method 2026-07-28 does not have here: 404 with −32601.
    let (headers, body) = modern("prompts/list", json!({}));
    let (status, code, _) = error_of(post(&url, headers, &body).await).await;
    assert_eq!((status, code), (404, -32601));
    // Mcp-Session-Id and Last-Event-ID are ignored: still stateless, no session minted.
    let (mut headers, body) = modern("tools/list", json!({}));
    headers.insert("mcp-session-id", "not-a-session".parse().unwrap());
    headers.insert("last-event-id", "s1-4".parse().unwrap());
    let response = post(&url, headers, &body).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_none());
    let listed: Value = response.json().await.unwrap();
    assert_eq!(listed["result"]["tools"][0]["name"], "progress_task");
    running.stop().await;
}

/// The SSE `data:` payloads of a response, read until it ends.
async fn events(response: reqwest::Response) -> Vec<Value> {
    let text = tokio::time::timeout(LIMIT, response.text())
        .await
        .expect("the call's stream ends")
        .unwrap();
    assert!(
        !text.lines().any(|l| l.starts_with("id:")),
        "a 2026-07-28 stream is not resumable: no event ids\n{text}"
    );
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn a_call_streams_to_its_result_and_closing_its_stream_cancels_it() {
    let (running, url) = start(Protocols::Both).await;
    let (headers, body) = modern(
        "tools/call",
        json!({ "name": "progress_task", "arguments": { "steps": 3, "delay_ms": 0 } }),
    );
    let response = post(&url, headers, &body).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let got = events(response).await;
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[2]["params"]["progress"], 3);
    assert_eq!(got[3]["id"], 7);
    assert_eq!(got[3]["result"]["content"][0]["text"], "done: 3 steps");
    assert_eq!(running.modern().calls_completed.load(Ordering::Relaxed), 1);
    assert!(running.verdict().clean, "{}", running.verdict().summary());

    // A long call: read its first step, then close the stream.
    let (headers, body) = modern(
        "tools/call",
        json!({ "name": "progress_task", "arguments": { "steps": 100, "delay_ms": 50 } }),
    );
    let response = post(&url, headers, &body).await;
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(LIMIT, stream.next())
        .await
        .expect("a first step")
        .expect("a chunk")
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    drop(stream);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while running.modern().calls_cancelled.load(Ordering::Relaxed) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(running.modern().calls_completed.load(Ordering::Relaxed), 1);
    // The cancel the revision asks for left the call's effect half made: the checker says so.
    let verdict = running.verdict();
    assert_eq!(
        verdict.count(AnomalyKind::CutHalfway),
        1,
        "{}",
        verdict.summary()
    );
    running.stop().await;
}

#[tokio::test]
async fn one_revision_only_refuses_the_other() {
    let (running, url) = start(Protocols::Modern).await;
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    let response = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    let (status, code, body) = error_of(response).await;
    assert_eq!((status, code), (400, -32022));
    assert_eq!(body["error"]["data"]["supported"], json!([MODERN]));
    let response = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    running.stop().await;

    let (running, url) = start(Protocols::Legacy).await;
    let (headers, body) = modern("tools/list", json!({}));
    let (status, code, body) = error_of(post(&url, headers, &body).await).await;
    assert_eq!((status, code), (400, -32022));
    assert_eq!(body["error"]["data"]["supported"][0], LEGACY);
    running.stop().await;
}

/// `Mcp-Name`, `Mcp-Method` or `MCP-Protocol-Version` sent twice with different values is
/// refused 400 −32020 before anything reads either: the server would check the first and a
/// balancer route on the last. The same value twice is one value.
#[tokio::test]
async fn a_routing_header_sent_twice_with_different_values_is_refused() {
    let (running, url) = start(Protocols::Both).await;
    let params = json!({ "name": "progress_task", "arguments": { "steps": 1 } });
    for (name, other) in [
        ("mcp-name", "emit_standalone"),
        ("mcp-method", "tools/list"),
        ("mcp-protocol-version", LEGACY),
    ] {
        let (mut headers, body) = modern("tools/call", params.clone());
        headers.append(name, other.parse().unwrap());
        let (status, code, body) = error_of(post(&url, headers, &body).await).await;
        assert_eq!((status, code), (400, -32020), "{name}: {body}");
        let message = body["error"]["message"].as_str().unwrap().to_lowercase();
        assert!(message.contains(name), "{message}");
    }
    let (mut headers, body) = modern("tools/call", params);
    headers.append("mcp-name", "progress_task".parse().unwrap());
    assert_eq!(post(&url, headers, &body).await.status(), 200);
    running.stop().await;
}
