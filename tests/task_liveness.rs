//! A fenced task whose steps outlast its runner's lease still ends while it is polled, over real
//! sockets: the runner renews its lease between steps (the core's `TaskRunner`), so a read
//! adopts only a task whose runner stopped renewing. Before the renewal, every poll past the
//! lease adopted the task, the adopter waited a whole step again, and the task never ended.
//! On plain `forkscope serve`, and on two fenced replicas on the in-memory store and on a real
//! `redis-server`, with 1, 10 and 50 clients polling each at the task's `pollIntervalMs`.

mod common;

use common::replica_lab::{Backend, Lab};
use forkscope::wire::mcp::modern::ModernCall;
use forkscope::wire::server::ServeOptions;
use forkscope_core::Policy;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A bound on any one wait, never a measurement.
const LIMIT: Duration = Duration::from_secs(60);

crate::both_stores!(a_task_of_steps_longer_than_the_lease_completes_polled_on_both_replicas);

async fn request(http: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    let call = ModernCall {
        id: 1,
        method,
        params,
        tasks: true,
        key: None,
    };
    let response = call.post(http, url).send().await.unwrap();
    assert_eq!(response.status(), 200, "{method}");
    response.json().await.unwrap()
}

async fn create(http: &reqwest::Client, url: &str, steps: u64, delay_ms: u64) -> (String, u64) {
    let params =
        json!({ "name": "progress_task", "arguments": { "steps": steps, "delay_ms": delay_ms } });
    let created = request(http, url, "tools/call", params).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    let interval = created["result"]["pollIntervalMs"].as_u64().unwrap();
    (task, interval)
}

/// `clients` pollers, each reading the task at `interval`, turn by turn on every url, until it
/// is terminal; returns the terminal answer.
async fn polled(
    http: &reqwest::Client,
    urls: &[String],
    task: &str,
    interval: u64,
    clients: usize,
) -> Value {
    let mut pollers = tokio::task::JoinSet::new();
    for client in 0..clients {
        let (http, urls, task) = (http.clone(), urls.to_vec(), task.to_owned());
        pollers.spawn(async move {
            for read in client.. {
                let url = &urls[read % urls.len()];
                let got = request(&http, url, "tasks/get", json!({ "taskId": task })).await;
                assert!(got.get("error").is_none(), "{got}");
                if got["result"]["status"] != "working" {
                    return got["result"].clone();
                }
                // The pace the server asked for, as a stock client polls.
                tokio::time::sleep(Duration::from_millis(interval)).await;
            }
            unreachable!()
        });
    }
    let ended = tokio::time::timeout(LIMIT, pollers.join_next())
        .await
        .expect("the task never ended while polled")
        .unwrap()
        .unwrap();
    pollers.abort_all();
    ended
}

/// 3 steps of 2,500 ms against the default lease of 2,000 ms, read every 250 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_steps_longer_than_the_lease_completes_polled_on_plain_serve() {
    let (server, url) = common::serve(Policy::Fenced, ServeOptions::default()).await;
    let http = reqwest::Client::new();
    let (task, interval) = create(&http, &url, 3, 2_500).await;
    let ended = polled(&http, std::slice::from_ref(&url), &task, interval, 1).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(ended["result"]["content"][0]["text"], "done: 3 steps");
    assert_eq!(server.tasks().adopted.load(Ordering::Relaxed), 0);
    assert_eq!(server.tasks().steps_committed.load(Ordering::Relaxed), 3);
}

/// 3 steps of 1,500 ms against a lease of 1,000 ms, three tasks at once, polled by 1, 10 and 50
/// clients through both replicas: each completes, none is adopted, each step committed once.
async fn a_task_of_steps_longer_than_the_lease_completes_polled_on_both_replicas(backend: Backend) {
    let Some(lab) = Lab::start(backend, Policy::Fenced, None, 1_000).await else {
        return;
    };
    let urls = [lab.url(0), lab.url(1)];
    let mut runs = tokio::task::JoinSet::new();
    for (i, clients) in [1, 10, 50].into_iter().enumerate() {
        let (http, urls) = (lab.http.clone(), urls.clone());
        runs.spawn(async move {
            let (task, interval) = create(&http, &urls[i % 2], 3, 1_500).await;
            polled(&http, &urls, &task, interval, clients).await
        });
    }
    while let Some(ended) = runs.join_next().await {
        let ended = ended.unwrap();
        assert_eq!(ended["status"], "completed", "{ended}");
        assert_eq!(ended["result"]["content"][0]["text"], "done: 3 steps");
    }
    let adopted: u64 = (0..2)
        .map(|r| {
            lab.replicas[r]
                .tasks()
                .counters
                .adopted
                .load(Ordering::Relaxed)
        })
        .sum();
    let committed: u64 = (0..2)
        .map(|r| {
            lab.replicas[r]
                .tasks()
                .counters
                .steps_committed
                .load(Ordering::Relaxed)
        })
        .sum();
    assert_eq!(adopted, 0, "a renewing runner's task is never adopted");
    assert_eq!(committed, 9, "each step of the three tasks once");
}
