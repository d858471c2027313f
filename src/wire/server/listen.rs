//! `subscriptions/listen` on the 2026-07-28 side: a stream of `notifications/tasks` for the task
//! ids a client names ([EXT], "Task Status Notifications"). The core's
//! [`forkscope_core::tasks::listen`] says which ids are acknowledged and which reads are sent;
//! this file reads the tasks and writes the stream.
//!
//! Each open listen reads its tasks when the store says a task changed (the memory store wakes
//! its waiters; Redis publishes every task write, so another replica's write wakes it at once),
//! and, while a task it watches works, once a lease has passed with no change (its runner may
//! have died: the read adopts it, as a `tasks/get` does) — no fixed tick. It sends a state the
//! client was not sent yet, whichever replica wrote it. The first frame is the
//! acknowledgement; once nothing more can be sent (every task ended and told, or gone) the
//! subscription ends with its graceful completion result. The client ends it by closing the
//! stream.

use super::refusal::{Unavailable, json_response, unavailable};
use super::tasks::TaskHub;
use crate::wire::jsonrpc;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use forkscope_core::Record;
use forkscope_core::tasks::listen::{self, ListenAsk, ListenRefused, Watch};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::mpsc;

/// How soon a listen reads again when the store did not answer it.
const REREAD_UNANSWERED: std::time::Duration = std::time::Duration::from_millis(200);
/// The `_meta` key every frame of a subscription carries: the listen request's id.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The acknowledgement's `_meta` key (an extension of forkscope's) listing each asked task id
/// that was not acknowledged, with its reason (`unknown`, `expired`).
const NOT_ACKNOWLEDGED: &str = "io.forkscope/notAcknowledged";

/// Opens a listen for the request `id` with `params`; `declares_tasks`: its capabilities
/// declare the tasks extension.
pub(crate) async fn listen(
    hub: &Arc<TaskHub>,
    id: &Value,
    headers: &HeaderMap,
    params: &Value,
    declares_tasks: bool,
) -> Response {
    if !super::refusal::accepts(headers, "text/event-stream") {
        let why = "subscriptions/listen answers with an SSE stream: Accept must include text/event-stream";
        return json_response(
            StatusCode::NOT_ACCEPTABLE,
            jsonrpc::error(id, jsonrpc::INVALID_REQUEST, why, None),
        );
    }
    let filter = params.get("notifications");
    let task_ids = filter.and_then(|f| f.get("taskIds")).map(|ids| {
        ids.as_array()
            .and_then(|ids| ids.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or(())
    });
    let asked_tasks = task_ids.is_some();
    let rules = hub.rules();
    let ask = ListenAsk {
        has_filter: filter.is_some_and(Value::is_object),
        task_ids,
        declares_tasks,
    };
    let candidates = match listen::candidates(&ask, rules.listen) {
        Ok(candidates) => candidates,
        Err(refused) => return refused_listen(id, &refused),
    };
    let Ok(permit) = hub.listens.clone().try_acquire_owned() else {
        return unavailable(
            id,
            Unavailable::TooManyListens,
            "too many subscriptions are open",
            1,
        );
    };
    // Acknowledged: the tasks this store knows now, as read for the acknowledgement. A client
    // that names a task knows its id.
    let mut known = Vec::with_capacity(candidates.len());
    // The ids not acknowledged, and why: without it a listen on an unknown task would complete
    // with no notification, as one on a task whose end was already sent does.
    let mut missing = Vec::new();
    for task in candidates {
        match hub.read(task, None).await {
            Ok(Ok(read)) => {
                hub.report.tell(|| Record::TaskNamed { task: read.id });
                known.push(read);
            }
            Ok(Err(why)) => {
                let reason = why.reason();
                hub.report.tell(|| Record::TaskRefused { task, reason });
                missing.push(json!({ "taskId": task.to_string(), "reason": reason }));
            }
            Err(e) => return super::tasks::store_failed(id, &e),
        }
    }
    let mut meta = json!({ SUBSCRIPTION_ID: id });
    if !missing.is_empty() {
        meta[NOT_ACKNOWLEDGED] = json!(missing);
    }
    let mut notifications = json!({});
    if let Some(ids) = listen::acknowledged(asked_tasks, rules.listen, &known) {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        notifications["taskIds"] = json!(ids);
    }
    let watch = Watch::new(rules.listen, &known);
    let (tx, rx) = mpsc::channel::<String>(super::event_stream::STREAM_QUEUE);
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "_meta": meta, "notifications": notifications },
    });
    // The queue is empty: the acknowledgement is always the first frame.
    let _ = tx.try_send(frame(&ack));
    hub.counters
        .listens_opened
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stream = follow(hub.clone(), id.clone(), watch, tx);
    tokio::spawn(async move {
        stream.await;
        drop(permit);
    });
    super::event_stream::sse_response(rx)
}

/// Reads the watched tasks until nothing more can be sent, the client closes the stream, or
/// the server ends its listens (a drain: the graceful completion) or is killed (nothing more).
async fn follow(hub: Arc<TaskHub>, id: Value, mut watch: Watch, tx: mpsc::Sender<String>) {
    let completion = || {
        let done = json!({ "resultType": "complete", "_meta": { SUBSCRIPTION_ID: id } });
        frame(&jsonrpc::result(&id, done))
    };
    let feed = hub.store().task_changes();
    // A dead runner writes nothing: past a lease with no change, read again to adopt.
    let lease = std::time::Duration::from_millis(hub.store().retention().lease_ms);
    loop {
        // Armed before the reads: a write, or the end of listens, during them wakes the wait.
        // The store's word alone: every task write, this endpoint's and any other replica's,
        // goes through it and is told once.
        let stored = feed.next();
        let ending = hub.ending.notified();
        tokio::pin!(stored, ending);
        stored.as_mut().enable();
        ending.as_mut().enable();
        let (mut working, mut unanswered) = (false, false);
        if hub.listens_ending() {
            let _ = tx.send(completion()).await;
            return;
        }
        if hub.is_stopped() {
            return;
        }
        let pending: Vec<_> = watch.pending().collect();
        for task in pending {
            let read = match hub.read(task, None).await {
                Ok(read) => read,
                // The store did not answer: read again shortly.
                Err(_) => {
                    unanswered = true;
                    continue;
                }
            };
            let read = read.ok();
            working |= read.as_ref().is_some_and(|t| !t.status.is_terminal());
            if !watch.read(task, read.as_ref()) {
                continue;
            }
            let Some(read) = read else { continue };
            let mut params = hub.task_json(&read);
            params["_meta"] = json!({ SUBSCRIPTION_ID: id });
            let note =
                json!({ "jsonrpc": "2.0", "method": "notifications/tasks", "params": params });
            if tx.send(frame(&note)).await.is_err() {
                return;
            }
            // Told once it is on its way to the client, not before.
            hub.report.tell(|| Record::TaskRead {
                task: read.id,
                status: read.status,
            });
        }
        if watch.over() {
            let _ = tx.send(completion()).await;
            return;
        }
        tokio::select! {
            () = tx.closed() => return,
            () = &mut stored => {}
            () = &mut ending => {}
            () = tokio::time::sleep(lease), if working => {}
            () = tokio::time::sleep(REREAD_UNANSWERED), if unanswered => {}
        }
    }
}

fn frame(message: &impl std::fmt::Display) -> String {
    crate::wire::sse::unnumbered(&message.to_string())
}

fn refused_listen(id: &Value, refused: &ListenRefused) -> Response {
    let data = match refused {
        ListenRefused::MissingCapability => Some(json!({
            "requiredCapabilities": { "extensions": { super::tasks::TASKS_EXTENSION: {} } }
        })),
        ListenRefused::TooMany { max, .. } => {
            Some(json!({ "reason": "too_many_task_ids", "max": max }))
        }
        ListenRefused::NotServed | ListenRefused::NoFilter | ListenRefused::NotAList => None,
    };
    // No listen at all is what an unknown method gets on this transport: 404.
    let status = match refused {
        ListenRefused::NotServed => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    };
    json_response(
        status,
        jsonrpc::error(id, refused.code(), &refused.to_string(), data),
    )
}
