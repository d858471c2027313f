//! The 2026-07-28 revision on the same endpoint: stateless, one POST per request, no session,
//! no GET stream, no resumption. The core's [`forkscope_core::revision`] says which era a
//! request speaks and what is refused; this file answers a modern request: `server/discover`,
//! `tools/list`, and `tools/call` of `progress_task`, whose SSE response stream belongs to the
//! request alone — closing it cancels the call (streamable-http.mdx, "Cancellation").
//!
//! The replica server and the single server both pass every request through [`Modern::gate_post`]
//! first, so one copy of the era rules answers for both.

use super::event_stream::{self, pause, sse_response};
use super::handles::Report;
use super::incoming::{self, Incoming};
use super::refusal::json_response;
use super::tasks::{TASKS_EXTENSION, TaskHub};
use crate::wire::headers;
use crate::wire::jsonrpc;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forkscope_core::history::Run;
use forkscope_core::revision::{
    self, Era, META_VERSION, ModernRequest, PostHead, Protocols, Refusal,
};
use forkscope_core::tasks::{IDEMPOTENCY_KEY, KeyNeedsTask, Keyed, TaskRules};
use forkscope_core::work::{Steps, ToolStep};
use forkscope_core::{LabTime, Record, ToolSpec};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// What the modern side of an endpoint has done, for tests and the log.
#[derive(Debug, Default)]
pub struct ModernCounters {
    pub calls_started: AtomicU64,
    pub calls_completed: AtomicU64,
    /// Calls whose response stream the client closed before the result: cancelled.
    pub calls_cancelled: AtomicU64,
}

/// The era gate of one endpoint.
#[derive(Clone, Debug, Default)]
pub struct Modern {
    pub protocols: Protocols,
    pub counters: Arc<ModernCounters>,
    /// The tasks extension's tasks, for clients that declare it.
    pub tasks: Arc<TaskHub>,
    /// Who hears what each call and task did.
    report: Report,
}

/// What the gate did with a POST.
pub(crate) enum Gate {
    /// A legacy request: the session rules take it from here.
    Legacy,
    /// Answered here: a modern request, or a refusal under the era rules.
    Answered(Response),
}

impl Modern {
    /// `policy`: what the tasks side does with an idempotency key (the core's `TaskRules`);
    /// `store`: where tasks are kept when shared (fenced replicas), else this endpoint's own;
    /// `report`: who hears what each call and task did (the checker); `time`: what its tasks
    /// run on.
    pub fn new(
        protocols: Protocols,
        policy: forkscope_core::Policy,
        store: Option<crate::store::Store>,
        report: Report,
        time: crate::clock::Time,
    ) -> Modern {
        Modern {
            protocols: forkscope_core::server::protocols_spoken(protocols, policy),
            counters: Arc::default(),
            tasks: Arc::new(TaskHub::new(
                TaskRules::of(policy),
                store,
                report.clone(),
                time,
            )),
            report,
        }
    }

    /// Reads the era of a POST and answers it if it is modern (or refused).
    pub(crate) async fn gate_post(&self, headers: &HeaderMap, incoming: &Incoming) -> Gate {
        let message = &incoming.message;
        let meta = message.pointer("/params/_meta");
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let conflicting = [
            (headers::PROTOCOL_VERSION, "MCP-Protocol-Version"),
            (headers::MCP_METHOD, "Mcp-Method"),
            (headers::MCP_NAME, "Mcp-Name"),
        ]
        .into_iter()
        .find(|(name, _)| {
            let mut values = headers.get_all(*name).iter();
            let first = values.next();
            values.any(|v| Some(v) != first)
        })
        .map(|(_, spelled)| spelled);
        let params = message.get("params");
        let head = PostHead {
            header_version: header(headers::PROTOCOL_VERSION),
            header_method: header(headers::MCP_METHOD),
            header_name: header(headers::MCP_NAME),
            method: incoming.method.as_deref(),
            is_request: incoming.id.is_some(),
            meta_version: meta
                .and_then(|m| m.get(META_VERSION))
                .and_then(Value::as_str),
            has_capabilities: meta
                .and_then(|m| m.get(revision::META_CAPABILITIES))
                .is_some_and(Value::is_object),
            name: params
                .and_then(|p| {
                    p.get("name")
                        .or_else(|| p.get("uri"))
                        .or_else(|| p.get("taskId"))
                })
                .and_then(Value::as_str),
            initialize_version: params
                .and_then(|p| p.get("protocolVersion"))
                .and_then(Value::as_str),
            conflicting,
        };
        let id = incoming.id.clone().unwrap_or(Value::Null);
        match revision::classify_post(self.protocols, &head) {
            Ok(Era::Legacy) => Gate::Legacy,
            Ok(Era::Modern(request)) => {
                Gate::Answered(self.answer(request, &id, headers, incoming).await)
            }
            Err(refusal) => Gate::Answered(refused(&id, &refusal)),
        }
    }

    /// GET and DELETE: `None` when the legacy rules take them, else the 405.
    pub(crate) fn gate_get_or_delete(&self, headers: &HeaderMap) -> Option<Response> {
        let version = headers
            .get(headers::PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok());
        let refusal = revision::classify_get_or_delete(self.protocols, version).err()?;
        let mut response = refused(&Value::Null, &refusal);
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        Some(response)
    }

    async fn answer(
        &self,
        request: ModernRequest,
        id: &Value,
        headers: &HeaderMap,
        incoming: &Incoming,
    ) -> Response {
        match request {
            ModernRequest::Notification => StatusCode::ACCEPTED.into_response(),
            ModernRequest::Discover => complete(
                id,
                cacheable(discover_result(
                    self.protocols,
                    self.tasks.rules().runs_tasks,
                )),
            ),
            ModernRequest::ListTools => {
                complete(id, cacheable(json!({ "tools": [super::tool::schema()] })))
            }
            ModernRequest::CallTool => self.call_tool(id, headers, &incoming.params()).await,
            ModernRequest::GetTask => self.tasks.get(id, &incoming.params()).await,
            ModernRequest::UpdateTask => self.tasks.update(id, &incoming.params()).await,
            ModernRequest::CancelTask => self.tasks.cancel(id, &incoming.params()).await,
            ModernRequest::Listen => {
                let params = incoming.params();
                let declares = declares_tasks(&params);
                super::listen::listen(&self.tasks, id, headers, &params, declares).await
            }
        }
    }

    async fn call_tool(&self, id: &Value, headers: &HeaderMap, params: &Value) -> Response {
        if params.get("name").and_then(Value::as_str) == Some("emit_standalone") {
            let why = "emit_standalone needs the legacy GET stream; 2026-07-28 has none";
            return json_response(
                StatusCode::OK,
                jsonrpc::error(id, jsonrpc::INVALID_PARAMS, why, None),
            );
        }
        let (spec, progress_token) = match incoming::tool_call(id, params) {
            Ok(call) => call,
            Err(refused) => return refused,
        };
        // The server decides: a client that declares the tasks extension gets a task, where
        // the policy runs tasks at all.
        if declares_tasks(params) && self.tasks.rules().runs_tasks {
            return match idempotency_key(params, spec) {
                Ok(keyed) => self.tasks.call(id, spec, keyed).await,
                Err(why) => json_response(
                    StatusCode::OK,
                    jsonrpc::error(id, jsonrpc::INVALID_PARAMS, why, None),
                ),
            };
        }
        let named = matches!(key_of(params), Ok(Some(_)));
        if let Err(refused) = self.tasks.rules().plain_call_key(named) {
            let data = json!({ "reason": KeyNeedsTask::REASON });
            return json_response(
                StatusCode::OK,
                jsonrpc::error(
                    id,
                    jsonrpc::INVALID_PARAMS,
                    &refused.to_string(),
                    Some(data),
                ),
            );
        }
        if !super::refusal::accepts(headers, "text/event-stream") {
            let why =
                "tools/call answers with an SSE stream: Accept must include text/event-stream";
            return json_response(
                StatusCode::NOT_ACCEPTABLE,
                jsonrpc::error(id, jsonrpc::INVALID_REQUEST, why, None),
            );
        }
        let (tx, rx) = mpsc::channel::<String>(event_stream::STREAM_QUEUE);
        // Named by its id and this endpoint's count: clients reuse ids across calls.
        let n = self.counters.calls_started.fetch_add(1, Ordering::Relaxed) + 1;
        let run = Run::Request(format!("{id} #{n}").into());
        // The call the client meant: its key if it named one, else this request alone.
        let op = match key_of(params) {
            Ok(Some(key)) if key.len() <= forkscope_core::tasks::MAX_KEY_BYTES => Arc::from(key),
            _ => run.op_name(),
        };
        self.report.tell(|| Record::CallStarted {
            op,
            run: run.clone(),
        });
        tokio::spawn(run_call(
            Call {
                id: id.clone(),
                run,
                progress_token,
                spec,
            },
            tx,
            self.counters.clone(),
            self.report.clone(),
        ));
        sse_response(rx)
    }
}

/// The request's capabilities declare the tasks extension.
fn declares_tasks(params: &Value) -> bool {
    params
        .pointer("/_meta")
        .and_then(|m| m.get(revision::META_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some()
}

/// `_meta["io.forkscope/idempotencyKey"]`, read once for both kinds of call: a task's is
/// honoured as the policy says, a plain call's only names the call for the checker (the fence
/// keeps its promise through tasks), so a re-issue under the same key is known for the same
/// call.
fn key_of(params: &Value) -> Result<Option<&str>, &'static str> {
    match params
        .pointer("/_meta")
        .and_then(|m| m.get(IDEMPOTENCY_KEY))
    {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(key)) if !key.is_empty() => Ok(Some(key)),
        Some(_) => Err("_meta[\"io.forkscope/idempotencyKey\"] must be a non-empty string"),
    }
}

/// The key with the call's arguments as the core compares them (the tool's parsed spec: two
/// spellings of the same arguments are the same call).
fn idempotency_key(params: &Value, spec: ToolSpec) -> Result<Option<Keyed>, &'static str> {
    Ok(key_of(params)?.map(|key| Keyed {
        key: key.to_owned(),
        arguments: format!(
            "progress_task steps={} delay_ms={}",
            spec.steps, spec.delay_ms
        ),
    }))
}

/// One plain call: its request, its run's name for the checker, and what it runs.
struct Call {
    id: Value,
    run: Run,
    progress_token: Option<Value>,
    spec: ToolSpec,
}

/// Runs one `progress_task` call on its own stream. The core's [`ToolCall`] says when each
/// step is due; a closed stream stops it at once (no further message for it is sent).
async fn run_call(
    Call {
        id,
        run,
        progress_token,
        spec,
    }: Call,
    tx: mpsc::Sender<String>,
    counters: Arc<ModernCounters>,
    report: Report,
) {
    let cut = |call: &Steps| {
        report.tell(|| Record::CallCut {
            run: run.clone(),
            done: call.done(),
            of: spec.steps,
        });
        cancelled(&counters, &id, call);
    };
    let started = tokio::time::Instant::now();
    let now = || LabTime::from_millis(started.elapsed().as_millis() as u64);
    let mut call = Steps::new(spec, progress_token.is_some(), now());
    while let Some(due) = call.poll_timeout() {
        let wait = due.since(now());
        // A step already due is taken at once: tokio's timer rounds even a zero sleep up to
        // its next millisecond tick.
        tokio::select! {
            () = tx.closed() => return cut(&call),
            () = pause(wait) => {}
        }
        let before = call.done();
        let due = call.take_due(now(), usize::MAX);
        // A step is its effect: applied once taken (silent ones too), heard of or not.
        for step in before + 1..=call.done() {
            report.tell(|| Record::StepApplied {
                run: run.clone(),
                step,
                of: spec.steps,
                epoch: 0,
            });
        }
        for step in due {
            let body = match step {
                ToolStep::Result { steps } => {
                    jsonrpc::result(&id, complete_fields(super::tool::result(steps)))
                }
                ToolStep::Progress { .. } => {
                    super::tool::step_body(&id, progress_token.as_ref(), step)
                }
            };
            let frame = crate::wire::sse::unnumbered(&body.to_string());
            if tx.send(frame).await.is_err() {
                return cut(&call);
            }
            if matches!(step, ToolStep::Result { .. }) {
                counters.calls_completed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The client closed the call's stream: the call stops, and sends nothing more.
fn cancelled(counters: &ModernCounters, id: &Value, call: &Steps) {
    counters.calls_cancelled.fetch_add(1, Ordering::Relaxed);
    tracing::info!(request = %id, done = call.done(), steps = call.spec().steps,
        "2026-07-28 call cancelled: the client closed its response stream");
}

/// A modern result: `resultType` and the server's identity in `_meta` (S/basic/index.mdx).
fn complete_fields(mut result: Value) -> Value {
    if let Some(fields) = result.as_object_mut() {
        fields.insert("resultType".to_owned(), json!("complete"));
        fields.insert(
            "_meta".to_owned(),
            json!({ "io.modelcontextprotocol/serverInfo": server_info() }),
        );
    }
    result
}

fn complete(id: &Value, result: Value) -> Response {
    json_response(StatusCode::OK, jsonrpc::result(id, complete_fields(result)))
}

/// A `CacheableResult`'s two fields, which 2026-07-28 requires of `server/discover` and
/// `tools/list` (schema.ts, `CacheableResult`): nothing here is the caller's own (`public`),
/// and a restart may change it (`--protocol`), so it is stale at once (`ttlMs` 0).
fn cacheable(mut result: Value) -> Value {
    result["ttlMs"] = json!(0);
    result["cacheScope"] = json!("public");
    result
}

fn server_info() -> Value {
    json!({ "name": "forkscope", "version": env!("CARGO_PKG_VERSION") })
}

fn discover_result(protocols: Protocols, runs_tasks: bool) -> Value {
    let extensions = if runs_tasks {
        json!({ TASKS_EXTENSION: {} })
    } else {
        json!({})
    };
    json!({
        "supportedVersions": protocols.supported(),
        "capabilities": { "tools": {}, "extensions": extensions },
        "instructions": "forkscope serves 2025-11-25 (sessions, fenced resumption) and 2026-07-28 (stateless) on one endpoint. Call progress_task: under 2026-07-28 its response stream is the call's, and closing it cancels the call."
    })
}

fn refused(id: &Value, refusal: &Refusal) -> Response {
    let data = match refusal {
        Refusal::Unsupported {
            requested,
            supported,
            ..
        } => Some(json!({ "supported": supported, "requested": requested })),
        _ => None,
    };
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(
        status,
        jsonrpc::error(id, refusal.code(), &refusal.to_string(), data),
    )
}
