//! The logging utility over real sockets: `serve` declares `logging`, so it answers
//! `logging/setLevel` and honours it — the background emitter's `notifications/message` (info)
//! stop once a client sets `warning`, while the standalone stream's other notifications go on.
//! Synchronised on the order events arrive in on one stream, never on time. Replicas keep the
//! level in the shared store, so it holds whichever replica the request lands on (the store's
//! own rule is tests/store.rs's `a_log_level_above_info_withholds_background_events`).

mod common;

use forkscope::clock::LabClock;
use forkscope::wire::headers::MODELLED_REVISION;
use forkscope::wire::server::background::EmitRate;
use forkscope::wire::server::{self, ServeOptions};
use forkscope::wire::sse::Parser;
use forkscope::wire::{Core, Shared};
use forkscope_core::{LabConfig, Policy};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

struct Client {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl Client {
    fn post(&self, body: Value) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODELLED_REVISION)
            .header("mcp-session-id", &self.session)
            .json(&body)
    }

    async fn answer(&self, body: Value) -> Value {
        let response = self.post(body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }
}

async fn client(url: String) -> Client {
    let http = reqwest::Client::new();
    let init = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": { "protocolVersion": MODELLED_REVISION, "capabilities": {},
                    "clientInfo": { "name": "t", "version": "0" } }
    });
    let response = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer.pointer("/result/capabilities/logging"),
        Some(&json!({})),
        "{answer}"
    );
    let client = Client { http, url, session };
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(client.post(note).send().await.unwrap().status(), 202);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_level_is_answered_checked_and_honoured() {
    let core = Core::new(LabConfig::default(), Policy::Fenced).unwrap();
    let options = ServeOptions {
        background: Some(EmitRate::every_ms(5)),
        ..ServeOptions::default()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let running = server::start(Shared::new(core), Arc::new(LabClock::new()), options, addr)
        .await
        .unwrap();
    let c = client(format!("http://{}/mcp", running.addr)).await;

    // A level MCP does not name is refused, naming the levels.
    let bad = c
        .answer(json!({ "jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": { "level": "loud" } }))
        .await;
    assert_eq!(bad.pointer("/error/code"), Some(&json!(-32602)), "{bad}");
    let why = bad
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap();
    assert!(why.contains("debug, info, notice, warning"), "{why}");

    // The standalone stream carries the background emitter's log messages.
    let get = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", MODELLED_REVISION)
        .header("mcp-session-id", &c.session)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let mut body = get.bytes_stream();
    let mut parser = Parser::new();
    let mut methods: Vec<String> = Vec::new();
    let mut next = async || -> String {
        loop {
            if let Some(m) = methods.first().cloned() {
                methods.remove(0);
                return m;
            }
            let chunk = tokio::time::timeout(LIMIT, body.next())
                .await
                .expect("an event within the limit")
                .expect("the stream stays open")
                .unwrap();
            for e in parser.feed(&chunk).unwrap() {
                if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                    methods.push(v["method"].as_str().unwrap_or("?").to_owned());
                }
            }
        }
    };
    while next().await != "notifications/message" {}

    let set = c
        .answer(json!({ "jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": { "level": "warning" } }))
        .await;
    assert_eq!(set, json!({ "jsonrpc": "2.0", "id": 2, "result": {} }));
    // Three notifications that are not log messages, sent after the level was set, 20 ms
    // apart: the background schedule (one every 5 ms) would put a few of its own between them.
    let emit = c
        .answer(json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": { "name": "emit_standalone", "arguments": { "count": 3, "delay_ms": 20 } } }))
        .await;
    assert!(emit.get("result").is_some(), "{emit}");
    // Log messages emitted before the level was set may still be on their way; from the first
    // notification sent after it on, none.
    let mut seen = next().await;
    while seen == "notifications/message" {
        seen = next().await;
    }
    let mut after = vec![seen];
    while after
        .iter()
        .filter(|m| *m == "notifications/resources/updated")
        .count()
        < 3
    {
        after.push(next().await);
    }
    assert!(
        after.iter().all(|m| m == "notifications/resources/updated"),
        "after setLevel warning: {after:?}"
    );
    running.stop().await;
}

/// On replicas the level is the session's, in the store: set through one replica, it is read by
/// the replica that emits. Each answer is typed: a level MCP does not name −32602, a session
/// the store does not hold 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_answer_set_level_for_the_session_whichever_replica_it_lands_on() {
    use common::replica_lab::{Backend, Lab};
    for backend in [Backend::Memory, Backend::Redis] {
        let Some(lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
            continue; // no redis-server here, and FORKSCOPE_REQUIRE_SERVICES unset
        };
        let session = lab.initialize(&lab.url(0)).await;
        let set = |level: &str| json!({ "jsonrpc": "2.0", "id": 5, "method": "logging/setLevel", "params": { "level": level } });
        let answer = |response: reqwest::Response| async move {
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        };
        let (status, body) = answer(
            lab.post(&lab.url(1), &session, set("error"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, &body),
            (200, &json!({ "jsonrpc": "2.0", "id": 5, "result": {} })),
            "{backend:?}"
        );
        let (status, body) = answer(
            lab.post(&lab.url(0), &session, set("verbose"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body.pointer("/error/code")),
            (200, Some(&json!(-32602))),
            "{backend:?} {body}"
        );
        let unknown = "0".repeat(32);
        let response = lab
            .post(&lab.url(0), &unknown, set("info"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{backend:?}");
    }
}
