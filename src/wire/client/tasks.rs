//! The lab's 2026-07-28 client: calls `progress_task` as a task of the tasks extension, one
//! idempotency key per intent, and re-issues as the revision says when the answer does not
//! come — a broken response, or one the lab's fault lost on the way — under a new request id
//! and the same key. Then it polls `tasks/get` until the task ends.
//!
//! It reports nothing to the checker: the server's own record of what ran (a task made, each
//! step applied, each end) is the evidence, so a double effect is judged where it happened.

use super::super::mcp::modern::{self, ModernCall};
use forkscope_core::Entropy;
use forkscope_core::tasks::{META_DONE, META_SEEN, POLL_INTERVAL_MS, Seen};
use forkscope_core::work::ToolSpec;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Calls one intent makes at most: the first, and three re-issues (after a lost answer, or a
/// task the server did not know).
pub const MAX_CALLS: u32 = 4;
/// How long a call or a poll waits for its answer before it counts as broken.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Polls in a row that may fail (the connection dropped, the server gone) before the client
/// gives the task up.
const MAX_FAILED_POLLS: u32 = 20;
/// Polls one task gets at most: far past any task the lab runs.
const MAX_POLLS: u32 = 2_400;

/// What the client did, for the scenario waits.
#[derive(Debug, Default)]
pub struct TaskClientCounters {
    /// Intents begun.
    pub intents: AtomicU64,
    /// Tasks read back as ended (any terminal status).
    pub ended: AtomicU64,
    /// Reads again answered, whatever the answer ([`TaskClient::read_again`]).
    pub reads_again: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum TaskClientError {
    #[error("no answer after {MAX_CALLS} calls")]
    NoAnswer,
    #[error("the server refused the call: {0}")]
    Refused(String),
    #[error("the task could no longer be read: {0}")]
    Unreadable(String),
    /// The server answered with a plain result stream: under this policy it runs no tasks.
    #[error(
        "the server made no task: it ran the call plainly (the policy's server has no tasks extension)"
    )]
    NoTask,
}

/// What a request was answered with.
enum Answer {
    Json(Value),
    /// An SSE stream: a call run plainly, not a task.
    Stream,
}

/// A JSON-RPC error's message, as the server wrote it.
fn message(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_owned()
}

/// Why polling a task stopped short of its end.
enum Polled {
    /// The server does not know the task (−32602, `data.reason` unknown).
    Unknown,
    Failed(String),
}

#[derive(Debug)]
pub struct TaskClient {
    http: reqwest::Client,
    url: String,
    spec: ToolSpec,
    next_id: AtomicU64,
    /// Answers still to lose on the way (the lab's fault, armed by a key, once per press).
    lose_next: AtomicU32,
    /// Spelled into every key: keys stay this client's, so a store another lab left
    /// (Redis keeps a key past its task's TTL) never answers for one of this lab's intents.
    nonce: u32,
    pub counters: TaskClientCounters,
    /// The last task polled and what its reads told: sent back with each read of it (the
    /// task's cursor), so a store rolled back under what the client saw refuses the read
    /// rather than answer with less, or adopt and run again what the client saw done.
    last: std::sync::Mutex<Option<(String, Seen)>>,
    /// Where each exchange is reported (the lab's http pane), at the lab's time.
    log: Option<(Arc<dyn super::ExchangeLog>, Arc<crate::clock::LabClock>)>,
}

impl TaskClient {
    pub fn new(url: String, spec: ToolSpec) -> TaskClient {
        TaskClient {
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_default(),
            url,
            spec,
            next_id: AtomicU64::new(1),
            lose_next: AtomicU32::new(0),
            nonce: crate::wire::OsEntropy::new().next_u64() as u32,
            counters: TaskClientCounters::default(),
            last: std::sync::Mutex::new(None),
            log: None,
        }
    }

    /// Reports each exchange to `log`, stamped by `clock`.
    pub fn logging_to(
        mut self,
        log: Arc<dyn super::ExchangeLog>,
        clock: Arc<crate::clock::LabClock>,
    ) -> TaskClient {
        self.log = Some((log, clock));
        self
    }

    /// The next `CreateTaskResult` the server sends is lost on the way (one more for each
    /// press): the client reads it as a broken answer and re-issues.
    pub fn lose_next_answer(&self) {
        self.lose_next.fetch_add(1, Ordering::SeqCst);
    }

    async fn send(&self, method: &str, params: Value, key: Option<&str>) -> Option<Answer> {
        let call = ModernCall {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            method,
            params,
            tasks: true,
            key,
        };
        let sent = call.post(&self.http, &self.url).timeout(ANSWER_TIMEOUT);
        let response = sent.send().await.ok()?;
        if let Some((log, clock)) = &self.log {
            // Named as the lanes name it: the tool, or `t` and the task's short id.
            let name = match call.params.get("taskId").and_then(Value::as_str) {
                Some(task) => format!("t{}", task.get(..6).unwrap_or(task)),
                None => "progress_task".to_owned(),
            };
            let mut shown = vec![(crate::wire::headers::MCP_METHOD, method.to_owned())];
            if let Some(key) = key {
                shown.push(("_meta idempotencyKey", key.to_owned()));
            }
            log.exchange(
                clock.now(),
                "POST",
                format!("{method} {name}"),
                response.status().as_u16(),
                &shown,
                response.headers(),
            );
        }
        if crate::wire::mcp::response::is_event_stream(response.headers()) {
            return Some(Answer::Stream);
        }
        response.json::<Value>().await.ok().map(Answer::Json)
    }

    /// One intent, to its end: the task's final status. A task the server says it does not
    /// know (a poll that landed on a replica that never had it) is re-issued too, as a stock
    /// client does: the intent's key is what keeps that from running the work twice.
    pub async fn intent(&self) -> Result<String, TaskClientError> {
        let n = self.counters.intents.fetch_add(1, Ordering::Relaxed) + 1;
        let key = format!("intent-{:08x}-{n}", self.nonce);
        let mut calls = 0;
        loop {
            let task = self.create(&key, &mut calls).await?;
            match self.poll(&task).await {
                Err(Polled::Unknown) if calls < MAX_CALLS => {}
                Err(Polled::Unknown) => {
                    return Err(TaskClientError::Unreadable("unknown task".into()));
                }
                Err(Polled::Failed(why)) => return Err(TaskClientError::Unreadable(why)),
                Ok(status) => return Ok(status),
            }
        }
    }

    /// Calls until an answer names a task, `calls` counting every call the intent made.
    async fn create(&self, key: &str, calls: &mut u32) -> Result<String, TaskClientError> {
        let params = json!({
            "name": "progress_task",
            "arguments": { "steps": self.spec.steps, "delay_ms": self.spec.delay_ms },
        });
        while *calls < MAX_CALLS {
            *calls += 1;
            let answer = match self.send("tools/call", params.clone(), Some(key)).await {
                Some(Answer::Json(answer)) => answer,
                Some(Answer::Stream) => return Err(TaskClientError::NoTask),
                None => continue,
            };
            if let Some(error) = answer.get("error") {
                return Err(TaskClientError::Refused(message(error)));
            }
            let lost = self
                .lose_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if lost.is_ok() {
                continue;
            }
            let created = answer.get("result").and_then(modern::created_task);
            if let Some(task) = created {
                return Ok(task.to_owned());
            }
        }
        Err(TaskClientError::NoAnswer)
    }

    /// What this client was told of `task`, as a read of it says so.
    fn seen(&self, task: &str) -> Value {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.as_ref() {
            Some((t, seen)) if t == task => json!({ "taskId": task,
                "_meta": { META_SEEN: { "done": seen.done, "ended": seen.ended } } }),
            _ => json!({ "taskId": task }),
        }
    }

    /// Remembers what a read of `task` told: its steps done, and whether it had ended.
    fn told(&self, task: &str, read: &Value) {
        let done = read.pointer("/result/_meta").and_then(|m| m.get(META_DONE));
        let ended = read
            .pointer("/result/status")
            .and_then(Value::as_str)
            .is_some_and(|s| s != "working");
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let seen = match last.as_ref() {
            Some((t, seen)) if t == task => *seen,
            _ => Seen::default(),
        };
        let seen = Seen {
            done: seen.done.max(done.and_then(Value::as_u64).unwrap_or(0)),
            ended: seen.ended || ended,
        };
        *last = Some((task.to_owned(), seen));
    }

    /// Reads the last task polled once more, saying what it was told: its status, or the
    /// server's refusal.
    pub async fn read_again(&self) -> Result<String, TaskClientError> {
        let task = {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            last.as_ref().map(|(t, _)| t.clone())
        };
        let task = task.ok_or_else(|| TaskClientError::Unreadable("no task read yet".into()))?;
        let answer = self.send("tasks/get", self.seen(&task), None).await;
        self.counters.reads_again.fetch_add(1, Ordering::Relaxed);
        let Some(Answer::Json(read)) = answer else {
            return Err(TaskClientError::Unreadable("no answer".into()));
        };
        if let Some(error) = read.get("error") {
            return Err(TaskClientError::Unreadable(message(error)));
        }
        self.told(&task, &read);
        let status = read.pointer("/result/status").and_then(Value::as_str);
        Ok(status.unwrap_or("no status").to_owned())
    }

    async fn poll(&self, task: &str) -> Result<String, Polled> {
        let mut failed = 0;
        for _ in 0..MAX_POLLS {
            tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
            let read = self.send("tasks/get", self.seen(task), None).await;
            let Some(Answer::Json(read)) = read else {
                failed += 1;
                if failed >= MAX_FAILED_POLLS {
                    return Err(Polled::Failed("no answer".into()));
                }
                continue;
            };
            if let Some(error) = read.get("error") {
                match error.pointer("/data/reason").and_then(Value::as_str) {
                    Some("unknown") => return Err(Polled::Unknown),
                    // No retry cures these.
                    Some("expired" | "store_corrupt") => {
                        return Err(Polled::Failed(message(error)));
                    }
                    // The store holds less than this client read: a runner still alive finds
                    // it too on its next write and ends the task, typed — poll on for that end
                    // (a while, as for a store not answering).
                    // Anything else (a store not answering) may pass: poll again.
                    _ => {
                        failed += 1;
                        if failed >= MAX_FAILED_POLLS {
                            return Err(Polled::Failed(message(error)));
                        }
                        continue;
                    }
                }
            }
            failed = 0;
            self.told(task, &read);
            let status = read.pointer("/result/status").and_then(Value::as_str);
            if let Some(status) = status.filter(|s| *s != "working") {
                self.counters.ended.fetch_add(1, Ordering::Relaxed);
                return Ok(status.to_owned());
            }
        }
        Err(Polled::Failed("it never ended".into()))
    }
}
