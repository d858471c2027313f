//! The tasks extension on two replicas over real sockets, on the in-memory store and on a real
//! `redis-server`: fenced replicas keep tasks in the shared store, so a poll on either replica
//! answers, and when the replica running a task is killed a poll on the other adopts it by its
//! lease and runs it on from its last committed step: one runner at a time, each step once.
//! Naive replicas keep tasks in their own process, as the SDKs' task managers do: a poll that
//! lands on the other replica is told the task does not exist, and the client's re-issue runs
//! the work a second time.

mod common;

use common::replica_lab::{Backend, Lab};
use forkscope::wire::balance::Mode;
use forkscope::wire::mcp::modern::ModernCall;
use forkscope_core::Policy;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A bound on any one wait, never a measurement.
const LIMIT: Duration = Duration::from_secs(30);

crate::both_stores!(
    a_killed_runners_task_is_adopted_by_a_poll_elsewhere_and_runs_each_step_once,
    a_keyed_re_issue_on_the_other_replica_finds_the_same_task,
    naive_replicas_lose_the_task_and_the_re_issue_runs_twice,
    fenced_tasks_need_no_stickiness_and_naive_ones_need_it_by_mcp_name,
);

async fn request(lab: &Lab, url: &str, method: &str, params: Value, key: Option<&str>) -> Value {
    let call = ModernCall {
        id: 1,
        method,
        params,
        tasks: true,
        key,
    };
    let response = call.post(&lab.http, url).send().await.unwrap();
    response.json().await.unwrap()
}

async fn create(lab: &Lab, url: &str, steps: u64, delay_ms: u64, key: Option<&str>) -> String {
    let params =
        json!({ "name": "progress_task", "arguments": { "steps": steps, "delay_ms": delay_ms } });
    let created = request(lab, url, "tools/call", params, key).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    created["result"]["taskId"].as_str().unwrap().to_owned()
}

async fn get(lab: &Lab, url: &str, task: &str) -> Value {
    request(lab, url, "tasks/get", json!({ "taskId": task }), None).await
}

/// Polls `tasks/get` on `url` until `done` says so; returns every answer read.
async fn poll_until(lab: &Lab, url: &str, task: &str, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut seen = Vec::new();
    loop {
        let read = get(lab, url, task).await;
        let stop = done(&read);
        seen.push(read);
        if stop {
            return seen;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", seen.last());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_killed_runners_task_is_adopted_by_a_poll_elsewhere_and_runs_each_step_once(
    backend: Backend,
) {
    let Some(mut lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let (a, b) = (lab.url(0), lab.url(1));
    let task = create(&lab, &a, 30, 50, Some("order-7")).await;
    // Either replica answers for the task while a runs it.
    poll_until(&lab, &b, &task, |r| {
        common::steps_done(r).is_some_and(|d| d >= 3)
    })
    .await;
    assert_eq!(
        lab.replicas[1]
            .tasks()
            .counters
            .adopted
            .load(Ordering::Relaxed),
        0
    );
    let hub_a = lab.replicas[0].tasks();
    let hub_b = lab.replicas[1].tasks();
    lab.replicas.remove(0).kill();
    // b's polls find the task working until a's lease runs out; then one adopts it.
    let seen = poll_until(&lab, &b, &task, |r| r["result"]["status"] == "completed").await;
    let last = seen.last().unwrap();
    assert_eq!(
        last["result"]["result"]["content"][0]["text"],
        "done: 30 steps"
    );
    assert_eq!(
        hub_b.counters.adopted.load(Ordering::Relaxed),
        1,
        "adopted once"
    );
    // One runner at a time: the store's record went through exactly one adoption, and holds
    // every step. Each replica counts a step once the store took it, so the two counts add up
    // to the steps, less one if the kill fell between a's commit and its count.
    let id = forkscope_core::TaskId::parse(&task).unwrap();
    let stored = lab.store.task_get(id).await.unwrap().unwrap();
    assert_eq!((stored.epoch, stored.done), (2, 30), "{stored:?}");
    let by_a = hub_a.counters.steps_committed.load(Ordering::Relaxed);
    let by_b = hub_b.counters.steps_committed.load(Ordering::Relaxed);
    assert!(
        (29..=30).contains(&(by_a + by_b)),
        "a {by_a} + b {by_b}: each step once"
    );
    // b saw 3 steps done before the kill; a may not have counted the last it committed.
    assert!(by_a >= 2 && by_b >= 1, "a {by_a}, b {by_b}: both ran");
    assert_eq!(seen.iter().filter(|r| r.get("error").is_some()).count(), 0);
    // The keyed re-issue, on b, after all that: the same task, nothing new runs.
    let again = create(&lab, &b, 30, 50, Some("order-7")).await;
    assert_eq!(again, task);
    assert_eq!(hub_b.counters.created.load(Ordering::Relaxed), 0);
}

async fn a_keyed_re_issue_on_the_other_replica_finds_the_same_task(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let first = create(&lab, &lab.url(0), 3, 10, Some("k-1")).await;
    let again = create(&lab, &lab.url(1), 3, 10, Some("k-1")).await;
    assert_eq!(
        first, again,
        "one task for one key, whichever replica answers"
    );
    poll_until(&lab, &lab.url(1), &first, |r| {
        r["result"]["status"] == "completed"
    })
    .await;
    let committed: u64 = (0..2)
        .map(|i| {
            lab.replicas[i]
                .tasks()
                .counters
                .steps_committed
                .load(Ordering::Relaxed)
        })
        .sum();
    assert_eq!(committed, 3, "each step once");
    let other = request(
        &lab,
        &lab.url(1),
        "tools/call",
        json!({ "name": "progress_task", "arguments": { "steps": 4, "delay_ms": 10 } }),
        Some("k-1"),
    )
    .await;
    assert_eq!(other["error"]["data"]["reason"], "idempotency_key_reused");
}

async fn naive_replicas_lose_the_task_and_the_re_issue_runs_twice(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Naive, None, 2_000).await else {
        return;
    };
    let first = create(&lab, &lab.url(0), 3, 10, Some("k-1")).await;
    // The poll lands on b: the task is in a's process only.
    let elsewhere = get(&lab, &lab.url(1), &first).await;
    assert_eq!(elsewhere["error"]["code"], -32602, "{elsewhere}");
    assert_eq!(elsewhere["error"]["data"]["reason"], "unknown");
    // The client, told the task does not exist, re-issues on b: a second task, run twice.
    let second = create(&lab, &lab.url(1), 3, 10, Some("k-1")).await;
    assert_ne!(first, second);
    poll_until(&lab, &lab.url(0), &first, |r| {
        r["result"]["status"] == "completed"
    })
    .await;
    poll_until(&lab, &lab.url(1), &second, |r| {
        r["result"]["status"] == "completed"
    })
    .await;
    let committed: u64 = (0..2)
        .map(|i| {
            lab.replicas[i]
                .tasks()
                .counters
                .steps_committed
                .load(Ordering::Relaxed)
        })
        .sum();
    assert_eq!(committed, 6, "the work ran twice");
}

/// Through `forkscope balance`: round robin sends each poll to the other replica. Fenced tasks
/// are in the shared store, so every poll answers; naive ones are not, so the poll after the
/// create is told the task does not exist; sticky routing by `Mcp-Name` (the task id, learned
/// from the `CreateTaskResult`) keeps a naive task's polls on its replica.
async fn fenced_tasks_need_no_stickiness_and_naive_ones_need_it_by_mcp_name(backend: Backend) {
    for (policy, mode, told_unknown) in [
        (Policy::Fenced, Mode::RoundRobin, false),
        (Policy::Naive, Mode::RoundRobin, true),
        (Policy::Naive, Mode::Sticky, false),
    ] {
        let Some(lab) = Lab::start(backend, policy, None, 2_000).await else {
            return;
        };
        let balancer = lab.balancer_in(mode).await;
        let url = format!("http://{}/mcp", balancer.addr);
        let task = create(&lab, &url, 3, 20, None).await;
        let first = get(&lab, &url, &task).await;
        let unknown = first["error"]["data"]["reason"] == "unknown";
        assert_eq!(unknown, told_unknown, "{policy} {mode:?}: {first}");
        if !told_unknown {
            let seen = poll_until(&lab, &url, &task, |r| {
                r["result"]["status"] == "completed" || r.get("error").is_some()
            })
            .await;
            let last = seen.last().unwrap();
            assert_eq!(
                last["result"]["status"], "completed",
                "{policy} {mode:?}: {last}"
            );
        }
    }
}
