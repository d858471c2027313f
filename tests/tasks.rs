//! The tasks extension on `forkscope serve`, over real sockets (2026-07-28): a `tools/call`
//! from a client that declares the extension is answered with a task; the idempotency key makes
//! a re-issued call find its task instead of running the work again (without it the re-issue
//! runs twice); cancel is settled against completion and says which won; an unknown task is
//! told apart from an expired one.

mod common;

use forkscope::wire::mcp::modern::ModernCall;
use forkscope::wire::server::{RunningServer, ServeOptions};
use forkscope_core::{AnomalyKind, Policy};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A bound on any one wait, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);

async fn start() -> (RunningServer, String) {
    start_as(Policy::Fenced).await
}

async fn start_as(policy: Policy) -> (RunningServer, String) {
    common::serve(policy, ServeOptions::default()).await
}

/// A 2026-07-28 request from a client that declares the tasks extension; `name` is what
/// `Mcp-Name` mirrors (the tool, or the task id).
async fn request(url: &str, id: u64, method: &str, params: Value, key: Option<&str>) -> Value {
    let call = ModernCall {
        id,
        method,
        params,
        tasks: true,
        key,
    };
    let response = call
        .post(&reqwest::Client::new(), url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{method}");
    response.json().await.unwrap()
}

async fn call(url: &str, id: u64, steps: u64, delay_ms: u64, key: Option<&str>) -> Value {
    let params =
        json!({ "name": "progress_task", "arguments": { "steps": steps, "delay_ms": delay_ms } });
    request(url, id, "tools/call", params, key).await
}

async fn get(url: &str, task: &str) -> Value {
    request(url, 99, "tasks/get", json!({ "taskId": task }), None).await
}

/// Polls `tasks/get` until the task is terminal.
async fn until_terminal(url: &str, task: &str) -> Value {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let read = get(url, task).await;
        if read["result"]["status"] != "working" {
            return read["result"].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_re_issued_call_with_its_key_finds_its_task_and_runs_once() {
    let (running, url) = start().await;
    let first = call(&url, 1, 3, 20, Some("order-42")).await;
    let created = &first["result"];
    assert_eq!(created["resultType"], "task", "{first}");
    assert_eq!(created["status"], "working");
    assert!(created["ttlMs"].as_u64().is_some() && created["pollIntervalMs"].as_u64().is_some());
    let task = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(task.len(), 32);
    // The answer was lost; the client re-issues under a new request id.
    let again = call(&url, 2, 3, 20, Some("order-42")).await;
    assert_eq!(again["result"]["taskId"], task.as_str());
    let done = until_terminal(&url, &task).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["content"][0]["text"], "done: 3 steps");
    assert_eq!(running.tasks().created.load(Ordering::Relaxed), 1);
    assert_eq!(running.tasks().reused.load(Ordering::Relaxed), 1);
    assert_eq!(
        running.tasks().steps_committed.load(Ordering::Relaxed),
        3,
        "each step once"
    );
    // The same key for other arguments is refused, naming the task it belongs to.
    let other = call(&url, 3, 4, 20, Some("order-42")).await;
    assert_eq!(other["error"]["code"], -32602);
    assert_eq!(other["error"]["data"]["reason"], "idempotency_key_reused");
    assert_eq!(other["error"]["data"]["taskId"], task.as_str());
    running.stop().await;
}

#[tokio::test]
async fn without_a_key_the_re_issue_runs_the_work_twice() {
    let (running, url) = start().await;
    let a = call(&url, 1, 2, 10, None).await;
    let b = call(&url, 2, 2, 10, None).await;
    let (a, b) = (
        a["result"]["taskId"].as_str().unwrap(),
        b["result"]["taskId"].as_str().unwrap(),
    );
    assert_ne!(a, b, "two tasks for one intent: the double effect");
    until_terminal(&url, a).await;
    until_terminal(&url, b).await;
    assert_eq!(running.tasks().steps_committed.load(Ordering::Relaxed), 4);
    running.stop().await;
}

#[tokio::test]
async fn cancel_is_settled_against_completion_and_says_which_won() {
    let (running, url) = start().await;
    let long = call(&url, 1, 200, 50, Some("long")).await;
    let task = long["result"]["taskId"].as_str().unwrap().to_owned();
    let cancelled = request(&url, 2, "tasks/cancel", json!({ "taskId": task }), None).await;
    assert_eq!(cancelled["result"]["resultType"], "complete");
    assert_eq!(
        cancelled["result"]["_meta"]["io.forkscope/cancel"]["status"],
        "cancelled"
    );
    // The runner's next write is refused: it stops, and the task stays cancelled.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while running.tasks().writes_refused.load(Ordering::Relaxed) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the runner was not stopped"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let read = get(&url, &task).await;
    assert_eq!(read["result"]["status"], "cancelled");
    let committed = running.tasks().steps_committed.load(Ordering::Relaxed);
    assert!(committed < 200, "{committed}");
    // A cancel that comes after completion: the completion stands, and the answer says so.
    let short = call(&url, 3, 1, 0, None).await;
    let short = short["result"]["taskId"].as_str().unwrap().to_owned();
    until_terminal(&url, &short).await;
    let late = request(&url, 4, "tasks/cancel", json!({ "taskId": short }), None).await;
    assert_eq!(
        late["result"]["_meta"]["io.forkscope/cancel"]["status"],
        "completed"
    );
    assert_eq!(get(&url, &short).await["result"]["status"], "completed");
    running.stop().await;
}

#[tokio::test]
async fn an_unknown_task_is_invalid_params_with_its_reason() {
    let (running, url) = start().await;
    let unknown = get(&url, "0123456789abcdef0123456789abcdef").await;
    assert_eq!(unknown["error"]["code"], -32602);
    assert_eq!(unknown["error"]["data"]["reason"], "unknown");
    let garbage = get(&url, "not-a-task").await;
    assert_eq!(garbage["error"]["data"]["reason"], "unknown");
    let discovered = request(&url, 5, "server/discover", json!({}), None).await;
    assert!(
        discovered["result"]["capabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some(),
        "{discovered}"
    );
    running.stop().await;
}

/// `serve --policy naive` does what the extension's wire alone gives: it reads no key, so the
/// keyed re-issue makes a second task and the work runs twice.
#[tokio::test]
async fn naive_reads_no_key_and_the_re_issue_runs_twice() {
    let (running, url) = start_as(Policy::Naive).await;
    let a = call(&url, 1, 2, 10, Some("order-42")).await;
    let b = call(&url, 2, 2, 10, Some("order-42")).await;
    let (a, b) = (
        a["result"]["taskId"].as_str().unwrap(),
        b["result"]["taskId"].as_str().unwrap(),
    );
    assert_ne!(a, b);
    until_terminal(&url, a).await;
    until_terminal(&url, b).await;
    assert_eq!(running.tasks().steps_committed.load(Ordering::Relaxed), 4);
    assert_eq!(running.tasks().reused.load(Ordering::Relaxed), 0);
    running.stop().await;
}

/// The checker judges what `serve` did under 2026-07-28: a keyed call whose answer was lost
/// and re-issued is, under naive, an orphaned task, two runners of one call and each step
/// applied twice; under the fence, the same faults are clean.
#[tokio::test]
async fn the_verdict_names_the_double_effect_under_naive_and_is_clean_fenced() {
    for policy in [Policy::Naive, Policy::Fenced] {
        let (running, url) = start_as(policy).await;
        // A long call: its first task still runs when the re-issue's starts.
        let a = call(&url, 1, 200, 50, Some("charge-7")).await;
        let a = a["result"]["taskId"].as_str().unwrap().to_owned();
        // Its answer was lost: the client never names `a`, and re-issues.
        let b = call(&url, 2, 200, 50, Some("charge-7")).await;
        let b = b["result"]["taskId"].as_str().unwrap().to_owned();
        let deadline = tokio::time::Instant::now() + LIMIT;
        while running.tasks().steps_committed.load(Ordering::Relaxed) < 4 {
            assert!(tokio::time::Instant::now() < deadline, "no steps");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let verdict = running.verdict();
        match policy {
            Policy::Naive => {
                assert_ne!(a, b);
                assert_eq!(
                    verdict.count(AnomalyKind::OrphanTask),
                    1,
                    "{}",
                    verdict.summary()
                );
                assert_eq!(
                    verdict.count(AnomalyKind::TwoRunners),
                    1,
                    "{}",
                    verdict.summary()
                );
                assert!(
                    verdict.count(AnomalyKind::EffectTwice) >= 1,
                    "{}",
                    verdict.summary()
                );
            }
            _ => {
                assert_eq!(a, b);
                assert!(verdict.clean, "{}", verdict.summary());
            }
        }
        for task in [&a, &b] {
            request(&url, 3, "tasks/cancel", json!({ "taskId": task }), None).await;
        }
        if policy == Policy::Fenced {
            assert!(running.verdict().clean, "{}", running.verdict().summary());
        }
        running.stop().await;
    }
}

/// The proxy's `hold` and `drop` lose a `CreateTaskResult` on the wire, after the server has
/// answered (the task exists): the client's request fails, and its re-issue under the same key
/// finds that task under the fence — one task, each step once — where naive makes a second.
#[tokio::test]
async fn an_answer_lost_in_the_proxy_is_found_again_by_its_key() {
    use forkscope::wire::proxy::{Fault, Proxy};
    for policy in [Policy::Fenced, Policy::Naive] {
        let (running, _) = start_as(policy).await;
        let proxy = Proxy::start(running.addr).await.unwrap();
        let through = format!("http://{}/mcp", proxy.addr);
        proxy.hold();
        let params =
            json!({ "name": "progress_task", "arguments": { "steps": 3, "delay_ms": 10 } });
        let lost = {
            let (through, params) = (through.clone(), params.clone());
            tokio::spawn(async move {
                let call = ModernCall {
                    id: 1,
                    method: "tools/call",
                    params,
                    tasks: true,
                    key: Some("lost-answer"),
                };
                let sent = call.post(&reqwest::Client::new(), &through).send().await;
                match sent {
                    Ok(response) => response.bytes().await.map(|_| ()),
                    Err(e) => Err(e),
                }
            })
        };
        let deadline = tokio::time::Instant::now() + LIMIT;
        while proxy.held_bytes() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the answer never reached the proxy"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(running.tasks().created.load(Ordering::Relaxed), 1);
        proxy.inject(Fault::Drop);
        assert!(lost.await.unwrap().is_err(), "the client got no answer");
        assert_eq!(proxy.held_bytes(), 0, "a drop loses what the proxy held");
        // The re-issue goes through the proxy again: the drop ended the hold.
        let again = request(&through, 2, "tools/call", params, Some("lost-answer")).await;
        let task = again["result"]["taskId"].as_str().unwrap().to_owned();
        assert_eq!(until_terminal(&through, &task).await["status"], "completed");
        let created = running.tasks().created.load(Ordering::Relaxed);
        match policy {
            Policy::Naive => assert_eq!(created, 2, "naive made a second task"),
            _ => {
                assert_eq!(created, 1);
                assert_eq!(running.tasks().steps_committed.load(Ordering::Relaxed), 3);
                assert!(running.verdict().clean, "{}", running.verdict().summary());
            }
        }
        running.stop().await;
    }
}

/// `forkscope --protocol 2026-07-28`: the lab's 2025-11-25 client never starts (no session, no
/// stream), and its 2026 client's task calls are judged as on `both`: under naive, a lost
/// answer makes a second task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_only_lab_runs_its_tasks_without_a_session() {
    use forkscope::lab::{Action, Lab, LabOptions};
    use forkscope_core::revision::Protocols;
    let lab = Lab::start(LabOptions {
        policy: Policy::Naive,
        protocols: Protocols::Modern,
        background: None,
        tool_steps: 2,
        tool_delay_ms: 20,
        ..LabOptions::default()
    })
    .await
    .unwrap();
    lab.apply(Action::LoseAnswer);
    lab.apply(Action::CallTask);
    lab.wait_for(LIMIT, |core| {
        core.history.checker().counters().tasks_created >= 2
            && core.history.checker().counters().steps_applied >= 4
    })
    .await
    .unwrap();
    let (session, verdict) = {
        let core = lab.core();
        (core.client.session(), core.history.verdict())
    };
    assert!(session.is_none(), "no 2025-11-25 session was opened");
    assert_eq!(
        verdict.count(AnomalyKind::OrphanTask),
        1,
        "{}",
        verdict.summary()
    );
    lab.stop().await;
}

/// A key on a call that is not a task (its client did not declare the extension) is never
/// ignored: the fence refuses it, typed, and nothing runs; naive, as the SDKs, reads no key.
#[tokio::test]
async fn a_key_on_a_call_that_is_not_a_task_is_refused_never_ignored() {
    for (policy, refused) in [(Policy::Fenced, true), (Policy::Naive, false)] {
        let (running, url) = start_as(policy).await;
        let params = json!({ "name": "progress_task", "arguments": { "steps": 2, "delay_ms": 0 } });
        let call = ModernCall {
            id: 1,
            method: "tools/call",
            params,
            tasks: false,
            key: Some("order-9"),
        };
        let response = call
            .post(&reqwest::Client::new(), &url)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{policy}");
        let body = response.text().await.unwrap();
        if refused {
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"]["code"], -32602, "{body}");
            assert_eq!(
                body["error"]["data"]["reason"],
                "idempotency_key_needs_task"
            );
            assert_eq!(running.tasks().created.load(Ordering::Relaxed), 0);
            assert!(running.verdict().clean, "nothing ran");
        } else {
            assert!(body.contains("done: 2 steps"), "{policy}: {body}");
        }
        running.stop().await;
    }
}
