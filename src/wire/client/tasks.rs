//! The lab's 2026-07-28 client: calls `progress_task` as a task of the tasks extension, one
//! idempotency key per intent, as the core's [`Intent`] machine says — its re-issues (a broken
//! response, or one the lab's fault lost on the way, re-issued under a new request id and the
//! same key), its polls of `tasks/get` at the task's interval, the cursor each read carries,
//! and when it gives up. This file only sends and reads.
//!
//! It reports nothing to the checker: the server's own record of what ran (a task made, each
//! step applied, each end) is the evidence, so a double effect is judged where it happened.

use super::super::mcp::modern::{self, ModernCall};
use forkscope_core::Entropy;
use forkscope_core::client::intent::{
    CallAnswer, Intent, IntentError, IntentStep, MAX_CALLS, ReadAnswer,
};
use forkscope_core::tasks::{META_DONE, META_SEEN, Seen, Status};
use forkscope_core::time::LabTime;
use forkscope_core::work::ToolSpec;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// How long a call or a read waits for its answer before it counts as broken.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the client did, for the scenario waits.
#[derive(Debug, Default)]
pub struct TaskClientCounters {
    /// Intents begun.
    pub intents: AtomicU64,
    /// Tasks read back as ended (any terminal status).
    pub ended: AtomicU64,
    /// Reads again answered, whatever the answer ([`TaskClient::read_again`]).
    pub reads_again: AtomicU64,
    /// Intents and reads again under way ([`TaskClient::at_work`]).
    pub at_work: std::sync::atomic::AtomicUsize,
}

/// One piece of the client's work under way, counted from before it is spawned until it ends
/// (or is dropped): the lab waits on it to know a step of its clock was fully taken.
#[derive(Debug)]
pub struct AtWork(Arc<TaskClient>);

impl AtWork {
    pub fn client(&self) -> &TaskClient {
        &self.0
    }
}

impl Drop for AtWork {
    fn drop(&mut self) {
        self.0.counters.at_work.fetch_sub(1, Ordering::SeqCst);
    }
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

/// A `tasks/get` answer, as the core's [`Intent`] reads answers.
fn read_answer(answer: Option<Answer>) -> ReadAnswer {
    let Some(Answer::Json(read)) = answer else {
        return ReadAnswer::Passing("no answer".into());
    };
    if let Some(error) = read.get("error") {
        let reason = error.pointer("/data/reason").and_then(Value::as_str);
        return ReadAnswer::refused(reason, message(error));
    }
    let status = read.pointer("/result/status").and_then(Value::as_str);
    match status.and_then(Status::parse) {
        Some(status) => ReadAnswer::Read {
            status,
            done: read
                .pointer("/result/_meta")
                .and_then(|m| m.get(META_DONE))
                .and_then(Value::as_u64),
        },
        None => ReadAnswer::Passing(format!("a task read with no status: {read}")),
    }
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
    /// The last intent that read its task, as of its last read: its cursor is sent back with
    /// each read again, so a store rolled back under what the client saw refuses the read
    /// rather than answer with less, or adopt and run again what the client saw done.
    last: std::sync::Mutex<Option<Intent<String>>>,
    /// Whether reads carry the cursor; `false`: a stock client's reads.
    cursor: bool,
    /// Where each exchange is reported (the lab's http pane), at the lab's time.
    log: Option<(Arc<dyn super::ExchangeLog>, Arc<crate::clock::LabClock>)>,
    /// What it waits on between reads: real time, or the lab's clock.
    time: crate::clock::Time,
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
            cursor: true,
            log: None,
            time: crate::clock::Time::real(),
        }
    }

    /// Counts a piece of work (an intent, a read again) as under way until the guard drops.
    pub fn begin(self: &Arc<Self>) -> AtWork {
        self.counters.at_work.fetch_add(1, Ordering::SeqCst);
        AtWork(self.clone())
    }

    /// Waits between reads on `time` (the lab's clock: a paused lab polls no more).
    pub fn on(mut self, time: crate::clock::Time) -> TaskClient {
        self.time = time;
        self
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

    /// Reads carry the task's cursor (`true`, forkscope's client) or say nothing of what they
    /// were told (`false`, as the SDKs' clients read).
    pub fn with_cursor(mut self, cursor: bool) -> TaskClient {
        self.cursor = cursor;
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

    /// One intent, to its end: the task's final status, as the core's [`Intent`] decides. A
    /// task the server says it does not know (a poll that landed on a replica that never had
    /// it) is re-issued too, as a stock client does: the intent's key is what keeps that from
    /// running the work twice.
    pub async fn intent(&self) -> Result<Status, IntentError> {
        let n = self.counters.intents.fetch_add(1, Ordering::Relaxed) + 1;
        let key = format!("intent-{:08x}-{n}", self.nonce);
        let now = || self.time.now();
        let mut intent = Intent::new(MAX_CALLS);
        loop {
            match intent.next(now()) {
                IntentStep::Call => {
                    let answer = self.call(&key).await;
                    intent.answered(now(), answer);
                }
                IntentStep::Read { task, seen } => {
                    let answer =
                        read_answer(self.send("tasks/get", self.read(&task, seen), None).await);
                    intent.read(now(), answer);
                    if let Some(Ok(_)) = intent.outcome() {
                        self.counters.ended.fetch_add(1, Ordering::Relaxed);
                    }
                    *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(intent.clone());
                }
                IntentStep::Wait(until) => self.time.sleep_until(until).await,
                // Every answer is given before the next step is asked for.
                IntentStep::Awaiting | IntentStep::Over => break,
            }
        }
        match intent.outcome() {
            Some(outcome) => outcome.clone(),
            None => Err(IntentError::Unreadable("an answer went missing".into())),
        }
    }

    /// One call of the tool as a task under `key`.
    async fn call(&self, key: &str) -> CallAnswer<String> {
        let params = json!({
            "name": "progress_task",
            "arguments": { "steps": self.spec.steps, "delay_ms": self.spec.delay_ms },
        });
        let answer = match self.send("tools/call", params, Some(key)).await {
            Some(Answer::Json(answer)) => answer,
            Some(Answer::Stream) => return CallAnswer::Plain,
            None => return CallAnswer::Lost,
        };
        if let Some(error) = answer.get("error") {
            return CallAnswer::Refused(message(error));
        }
        let lost = self
            .lose_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match answer.get("result").and_then(modern::created_task) {
            Some(task) if lost.is_err() => CallAnswer::Created(task.to_owned()),
            _ => CallAnswer::Lost,
        }
    }

    /// `tasks/get`'s params for `task`, saying what the client was told of it (the task's
    /// cursor) unless it reads as a stock client.
    fn read(&self, task: &str, seen: Seen) -> Value {
        match self.cursor {
            true => json!({ "taskId": task,
                "_meta": { META_SEEN: { "done": seen.done, "ended": seen.ended } } }),
            false => json!({ "taskId": task }),
        }
    }

    /// Reads the last task polled once more, saying what it was told: its status, or the
    /// server's refusal.
    pub async fn read_again(&self) -> Result<Status, IntentError> {
        let known = {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            last.as_ref().and_then(Intent::reading)
        };
        let (task, seen) =
            known.ok_or_else(|| IntentError::Unreadable("no task read yet".into()))?;
        let answer = read_answer(self.send("tasks/get", self.read(&task, seen), None).await);
        self.counters.reads_again.fetch_add(1, Ordering::Relaxed);
        if let Some(intent) = self.last.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            intent.read(LabTime::ZERO, answer.clone());
        }
        match answer {
            ReadAnswer::Read { status, .. } => Ok(status),
            ReadAnswer::Passing(why) | ReadAnswer::Final(why) => Err(IntentError::Unreadable(why)),
            ReadAnswer::Unknown => Err(IntentError::Unreadable("unknown task".into())),
        }
    }
}
