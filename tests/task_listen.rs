//! `notifications/tasks` on `subscriptions/listen` (2026-07-28, the tasks extension), over real
//! sockets: a listen is acknowledged for the tasks the server knows and tells each change to the
//! end, then completes. A listen stream has no replay, so a task that ends while no listen is
//! open (the gap) is the hazard: the fence sends each task's state now first, so a re-listen is
//! told the end; the spec's minimum (naive) sends only later changes, and a client waiting on
//! its listen is never told. On replicas, a listen alone (no poll) adopts a task whose runner
//! was killed, on the in-memory store and on a real `redis-server`.

mod common;

use common::replica_lab::{Backend, Lab};
use forkscope::wire::mcp::modern::ModernCall;
use forkscope::wire::server::{RunningServer, ServeOptions};
use forkscope::wire::sse::Parser;
use forkscope_core::Policy;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A bound on any one wait, never a measurement.
const LIMIT: Duration = Duration::from_secs(30);

async fn start_as(policy: Policy) -> (RunningServer, String) {
    common::serve(policy, ServeOptions::default()).await
}

fn modern(id: u64, method: &str, params: Value, tasks: bool) -> ModernCall<'_> {
    ModernCall {
        id,
        method,
        params,
        tasks,
        key: None,
    }
}

/// A request answered with JSON: the answer.
async fn answer(http: &reqwest::Client, url: &str, call: ModernCall<'_>) -> Value {
    let response = call.post(http, url).send().await.unwrap();
    response.json().await.unwrap()
}

async fn create(http: &reqwest::Client, url: &str, steps: u64, delay_ms: u64) -> String {
    let params =
        json!({ "name": "progress_task", "arguments": { "steps": steps, "delay_ms": delay_ms } });
    let created = answer(http, url, modern(1, "tools/call", params, true)).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    created["result"]["taskId"].as_str().unwrap().to_owned()
}

async fn until_ended(http: &reqwest::Client, url: &str, task: &str) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let read = answer(
            http,
            url,
            modern(2, "tasks/get", json!({ "taskId": task }), true),
        )
        .await;
        if read["result"]["status"] != "working" {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Opens a listen with `notifications` and reads every frame until the stream closes.
async fn listen(url: &str, id: u64, notifications: Value, tasks: bool) -> Vec<Value> {
    let http = reqwest::Client::new();
    let call = modern(
        id,
        "subscriptions/listen",
        json!({ "notifications": notifications }),
        tasks,
    );
    let response = call.post(&http, url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let sse = response.headers()["content-type"] == "text/event-stream";
    if !sse {
        return vec![response.json().await.unwrap()];
    }
    let mut body = response.bytes_stream();
    let mut parser = Parser::new();
    let mut frames = Vec::new();
    while let Some(chunk) = tokio::time::timeout(LIMIT, body.next())
        .await
        .expect("the subscription ends once its tasks ended")
    {
        for event in parser.feed(&chunk.unwrap()).unwrap() {
            frames.push(serde_json::from_str(&event.data).unwrap());
        }
    }
    frames
}

fn told(frames: &[Value]) -> Vec<&str> {
    frames
        .iter()
        .filter(|f| f["method"] == "notifications/tasks")
        .map(|f| f["params"]["status"].as_str().unwrap())
        .collect()
}

/// The acknowledgement first, the graceful completion last, every frame naming the listen.
fn framed(frames: &[Value], id: u64) {
    assert_eq!(
        frames[0]["method"], "notifications/subscriptions/acknowledged",
        "{frames:?}"
    );
    let last = frames.last().unwrap();
    assert_eq!(last["id"], id);
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    for frame in frames {
        let meta = frame
            .pointer("/params/_meta")
            .or_else(|| frame.pointer("/result/_meta"));
        assert_eq!(
            meta.unwrap()["io.modelcontextprotocol/subscriptionId"],
            id,
            "{frame}"
        );
    }
}

#[tokio::test]
async fn a_listen_tells_each_change_of_its_task_and_completes_with_its_end() {
    let (running, url) = start_as(Policy::Fenced).await;
    let http = reqwest::Client::new();
    let task = create(&http, &url, 3, 40).await;
    let frames = listen(&url, 7, json!({ "taskIds": [task, "not-a-task"] }), true).await;
    framed(&frames, 7);
    assert_eq!(
        frames[0]["params"]["notifications"],
        json!({ "taskIds": [task] }),
        "acknowledged for the task it knows only"
    );
    let told = told(&frames);
    assert_eq!(told.last(), Some(&"completed"), "{frames:?}");
    assert!(told[..told.len() - 1].iter().all(|s| *s == "working"));
    // Each step was told (40 ms apart, each write wakes the listen), in order, once.
    let steps: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["params"]["statusMessage"].as_str())
        .filter(|m| m.starts_with("step ") && !m.starts_with("step 0"))
        .collect();
    assert_eq!(
        steps,
        ["step 1 of 3", "step 2 of 3", "step 3 of 3"],
        "{frames:?}"
    );
    let end = &frames[frames.len() - 2]["params"];
    assert_eq!(end["taskId"], task.as_str());
    assert_eq!(end["result"]["content"][0]["text"], "done: 3 steps");
    running.stop().await;
}

#[tokio::test]
async fn after_a_gap_a_relisten_is_told_the_end_under_the_fence_only() {
    for (policy, tells) in [(Policy::Fenced, true), (Policy::Naive, false)] {
        let (running, url) = start_as(policy).await;
        let http = reqwest::Client::new();
        let task = create(&http, &url, 2, 10).await;
        // The task ends while no listen is open.
        until_ended(&http, &url, &task).await;
        let frames = listen(&url, 9, json!({ "taskIds": [task] }), true).await;
        framed(&frames, 9);
        assert_eq!(
            frames[0]["params"]["notifications"]["taskIds"],
            json!([task])
        );
        let told = told(&frames);
        if tells {
            assert_eq!(told, ["completed"], "{policy:?}: {frames:?}");
        } else {
            assert!(told.is_empty(), "{policy:?}: never told: {frames:?}");
        }
        running.stop().await;
    }
}

#[tokio::test]
async fn a_listen_is_refused_clearly_and_acknowledges_only_what_is_served() {
    let (running, url) = start_as(Policy::Fenced).await;
    let task = "0123456789abcdef0123456789abcdef";
    // Task ids without the extension declared: the extension's -32021, naming it.
    let refused = listen(&url, 1, json!({ "taskIds": [task] }), false).await;
    assert_eq!(refused[0]["error"]["code"], -32021, "{refused:?}");
    assert!(
        refused[0]["error"]["data"]["requiredCapabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some()
    );
    let many = vec![task; 33];
    let refused = listen(&url, 2, json!({ "taskIds": many }), true).await;
    assert_eq!(refused[0]["error"]["code"], -32602);
    assert_eq!(refused[0]["error"]["data"]["reason"], "too_many_task_ids");
    let refused = listen(&url, 3, json!({ "taskIds": "all" }), true).await;
    assert_eq!(refused[0]["error"]["code"], -32602);
    let refused = listen(&url, 3, json!(["tasks"]), true).await;
    assert_eq!(refused[0]["error"]["code"], -32602);
    assert!(
        refused[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params.notifications")
    );
    // Nothing served asked for (this server's tools never change): an empty acknowledgement,
    // and nothing will ever be sent, so the subscription completes at once.
    let frames = listen(&url, 4, json!({ "toolsListChanged": true }), false).await;
    framed(&frames, 4);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0]["params"]["notifications"], json!({}));
    // An SSE stream or nothing: a client that accepts only JSON is told so.
    let body = json!({ "jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen", "params": {
        "notifications": {},
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                   "io.modelcontextprotocol/clientCapabilities": {} } } });
    let response = reqwest::Client::new()
        .post(&url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .header("accept", "application/json")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 406);
    running.stop().await;
}

/// A client that listens for its task knows its id: a re-issue of the call after that makes a
/// second task under naive (two runners), and the first is not an orphan.
#[tokio::test]
async fn a_listen_names_its_task_so_a_later_re_issue_orphans_nothing() {
    let (running, url) = start_as(Policy::Naive).await;
    let http = reqwest::Client::new();
    let first = create(&http, &url, 6, 30).await;
    let frames = listen(&url, 3, json!({ "taskIds": [first] }), true).await;
    framed(&frames, 3);
    create(&http, &url, 6, 30).await;
    let verdict = running.verdict();
    assert_eq!(
        verdict.count(forkscope_core::AnomalyKind::OrphanTask),
        0,
        "{}",
        verdict.headline
    );
    running.stop().await;
}

/// A server that stops gracefully ends each open listen with its completion result; rmcp's
/// policy, like rmcp 3.11's default handler, has no listen at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_ends_each_listen_gracefully_and_rmcp_has_none() {
    let (running, url) = start_as(Policy::Fenced).await;
    let http = reqwest::Client::new();
    let task = create(&http, &url, 200, 50).await;
    let listening = tokio::spawn({
        let url = url.clone();
        async move { listen(&url, 5, json!({ "taskIds": [task] }), true).await }
    });
    // Once the listen is open, the server drains.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while running.tasks().listens_opened.load(Ordering::Relaxed) < 1 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.drain(Duration::from_secs(5)).await;
    let frames = listening.await.unwrap();
    framed(&frames, 5);
    assert!(told(&frames).iter().all(|s| *s == "working"), "{frames:?}");

    let (running, url) = start_as(Policy::Rmcp).await;
    let task = create(&http, &url, 1, 0).await;
    let call = modern(
        6,
        "subscriptions/listen",
        json!({ "notifications": { "taskIds": [task] } }),
        true,
    );
    let response = call.post(&http, &url).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32601, "{body}");
    running.stop().await;
}

crate::both_stores!(
    a_listen_alone_adopts_a_killed_runners_task_and_tells_its_end,
    a_listen_on_one_replica_is_woken_by_each_write_of_another,
);

/// A task run by replica A, listened to on B: B writes nothing, so only the store can wake its
/// listen (memory: its waiters; Redis: its `PUBLISH`). Each step is told on its own — steps
/// 150 ms apart, while with nothing but the lease's wake a listen would read once a lease.
async fn a_listen_on_one_replica_is_woken_by_each_write_of_another(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let (a, b) = (lab.url(0), lab.url(1));
    let task = create(&lab.http, &a, 4, 150).await;
    let frames = listen(&b, 12, json!({ "taskIds": [task] }), true).await;
    framed(&frames, 12);
    let steps: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["params"]["statusMessage"].as_str())
        .filter(|m| m.starts_with("step ") && !m.starts_with("step 0"))
        .collect();
    assert_eq!(
        steps,
        ["step 1 of 4", "step 2 of 4", "step 3 of 4", "step 4 of 4"],
        "{frames:?}"
    );
    assert_eq!(told(&frames).last(), Some(&"completed"));
}

async fn a_listen_alone_adopts_a_killed_runners_task_and_tells_its_end(backend: Backend) {
    let Some(mut lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let (a, b) = (lab.url(0), lab.url(1));
    let task = create(&lab.http, &a, 20, 50).await;
    let listening = tokio::spawn({
        let task = task.clone();
        async move { listen(&b, 11, json!({ "taskIds": [task] }), true).await }
    });
    // Once b's listen is open and the task past its second step, the replica running it dies.
    let hub_b = lab.replicas[1].tasks();
    let deadline = tokio::time::Instant::now() + LIMIT;
    let id = forkscope_core::TaskId::parse(&task).unwrap();
    while hub_b.counters.listens_opened.load(Ordering::Relaxed) < 1
        || lab.store.task_get(id).await.unwrap().unwrap().done < 2
    {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    lab.replicas.remove(0).kill();
    let frames = listening.await.unwrap();
    framed(&frames, 11);
    assert_eq!(told(&frames).last(), Some(&"completed"), "{frames:?}");
    assert_eq!(
        hub_b
            .counters
            .adopted
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no poll: the listen's own read adopted it"
    );
    let stored = lab.store.task_get(id).await.unwrap().unwrap();
    assert_eq!((stored.epoch, stored.done), (2, 20));
}

/// A listen on a task id the server does not know says so in its acknowledgement (an unknown
/// id's reason), rather than completing silently as a listen on an ended task does.
#[tokio::test]
async fn a_listen_on_an_unknown_task_says_so() {
    let (running, url) = start_as(Policy::Fenced).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let frames = listen(&url, 9, json!({ "taskIds": [unknown] }), true).await;
    framed(&frames, 9);
    let ack = &frames[0]["params"];
    assert_eq!(ack["notifications"], json!({ "taskIds": [] }), "{ack}");
    assert_eq!(
        ack["_meta"]["io.forkscope/notAcknowledged"],
        json!([{ "taskId": unknown, "reason": "unknown" }]),
        "{ack}"
    );
    running.stop().await;
}
