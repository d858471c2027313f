//! One runner across a `kill -9`: two `forkscope serve --store redis://…` replica processes on
//! a real `redis-server`. A task starts on replica a; a is killed with SIGKILL mid-task; polls on
//! replica b find the task working until a's lease runs out by Redis's clock, then one adopts it
//! and runs it on from its last committed step. The task completes once, with every step
//! recorded once, and the keyed re-issue on b finds it.

mod common;

use common::services::RedisServer;
use forkscope::wire::mcp::modern::ModernCall;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A bound on any one wait, never a measurement.
const LIMIT: Duration = Duration::from_secs(30);

/// A replica process, killed when dropped.
struct Replica {
    child: Child,
    url: String,
}

impl Replica {
    fn start(redis: &RedisServer, name: &str) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args([
                "serve",
                "--port",
                "0",
                "--emit-every",
                "0",
                "--store",
                &redis.url(),
            ])
            .args(["--replica", name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("forkscope serve starts");
        let stdout = child.stdout.take().unwrap();
        let line = BufReader::new(stdout)
            .lines()
            .next()
            .expect("a start line")
            .unwrap();
        let url = line
            .split_once(" at ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .expect("the replica's URL")
            .to_owned();
        Replica { child, url }
    }

    fn kill9(&mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-9", &pid]).status().unwrap();
        assert!(status.success());
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn request(url: &str, method: &str, params: Value) -> Value {
    let call = ModernCall {
        id: 1,
        method,
        params,
        tasks: true,
        key: Some("order-9"),
    };
    let response = call
        .post(&reqwest::Client::new(), url)
        .send()
        .await
        .unwrap();
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_task_survives_a_kill_9_of_its_runner_with_one_runner_at_a_time() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut a = Replica::start(&redis, "a");
    let b = Replica::start(&redis, "b");
    let call = json!({ "name": "progress_task", "arguments": { "steps": 40, "delay_ms": 50 } });
    let created = request(&a.url, "tools/call", call.clone()).await;
    let task = created["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let get = json!({ "taskId": task });
    // b answers for it while a runs it.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let read = request(&b.url, "tasks/get", get.clone()).await;
        if common::steps_done(&read).is_some_and(|d| d >= 3) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill9();
    let deadline = tokio::time::Instant::now() + LIMIT;
    let done = loop {
        let read = request(&b.url, "tasks/get", get.clone()).await;
        assert!(read.get("error").is_none(), "{read}");
        if read["result"]["status"] != "working" {
            break read;
        }
        assert!(tokio::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["content"][0]["text"],
        "done: 40 steps"
    );
    // The store's record: adopted once (epoch 2, b's), every step recorded.
    let hash =
        forkscope::store::redis::tasks::task_key(forkscope_core::TaskId::parse(&task).unwrap());
    assert_eq!(redis.command(&["HGET", &hash, "epoch"]), "2");
    assert_eq!(redis.command(&["HGET", &hash, "done"]), "40");
    // The keyed re-issue, on b: the same task, nothing new runs.
    let again = request(&b.url, "tools/call", call).await;
    assert_eq!(again["result"]["taskId"], task.as_str());
    assert_eq!(again["result"]["status"], "completed");
}
