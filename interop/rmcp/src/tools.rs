//! The probe's tools under both sets of names, written with the SDK's `#[tool_router]` macros.
//! Each set is its own handler type because the macros fix a tool's name at compile time; the
//! behaviour behind them is shared.
//!
//! Under the probe's names, `progress_task` is also a task of the tasks extension when a
//! 2026-07-28 client declares it: the SDK's own `TaskManager`, one per process and shared by
//! every handler the service makes, as the SDK's tests use it. The work steps `steps` times,
//! `delay_ms` apart, and stops with `TaskExit::Cancelled` when a cancel comes first (the SDK's
//! cancel is cooperative). Nothing is added: no idempotency key is read, and a task lives in
//! this process's memory only.

use std::time::Duration;

use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, tool::ToolCallContext, wrapper::Parameters},
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
        CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
        ProgressNotificationParam, RequestMetaObject, ResourceUpdatedNotificationParam,
        ServerCapabilities, ServerConfig, UpdateTaskParams,
    },
    schemars,
    service::RequestContext,
    task_manager::{TaskExit, TaskManager, TaskOptions},
    tool, tool_handler, tool_router,
};
use serde::Deserialize;

/// More than any probe case asks for, so a mistyped argument cannot run for hours.
const MAX_COUNT: u32 = 10_000;

/// Sends `steps` progress notifications on the call's own stream (routed there by the progress
/// token), one every `delay_ms`, then answers.
async fn report_progress(
    meta: RequestMetaObject,
    peer: Peer<RoleServer>,
    steps: u32,
    delay_ms: u64,
) -> String {
    let steps = steps.clamp(1, MAX_COUNT);
    let token = meta.get_progress_token();
    for n in 1..=steps {
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        if let Some(token) = &token {
            let step = ProgressNotificationParam::new(token.clone(), f64::from(n))
                .with_total(f64::from(steps))
                .with_message(format!("step {n} of {steps}"));
            if peer.notify_progress(step).await.is_err() {
                break; // the session ended: nothing left to report to
            }
        }
    }
    format!("done after {steps} steps")
}

/// Answers at once and sends `count` `notifications/resources/updated` in the background: a
/// notification of no request, so the SDK routes it to the session's standalone stream.
fn notify_in_background(
    peer: Peer<RoleServer>,
    count: u32,
    delay_ms: u64,
    uri: impl Fn(u32) -> String + Send + 'static,
) -> String {
    let count = count.clamp(1, MAX_COUNT);
    tokio::spawn(async move {
        for n in 1..=count {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let updated = ResourceUpdatedNotificationParam::new(uri(n));
            if peer.notify_resource_updated(updated).await.is_err() {
                return; // the session ended
            }
        }
    });
    format!("emitting {count}")
}

/// Tools and resources (the standalone stream's notifications are `resources/updated`).
fn capabilities() -> ServerConfig {
    ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .build(),
    )
}

/// The same, with the tasks extension declared.
fn capabilities_with_tasks() -> ServerConfig {
    ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tasks()
            .build(),
    )
}

/// `progress_task` as a task: its steps, `delay_ms` apart, unless a cancel comes first.
fn spawn_progress_task(tasks: &TaskManager, args: ProgressArgs) -> CreateTaskResult {
    let steps = args.steps.clamp(1, MAX_COUNT);
    let delay = Duration::from_millis(args.delay_ms);
    let task = tasks.spawn(TaskOptions::new(), move |ctx| {
        Box::pin(async move {
            for n in 1..=steps {
                tokio::select! {
                    () = ctx.cancelled() => return Err(TaskExit::Cancelled),
                    () = tokio::time::sleep(delay) => {}
                }
                ctx.set_status_message(format!("step {n} of {steps}"));
            }
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "done after {steps} steps"
            ))]))
        })
    });
    CreateTaskResult::new(task)
}

fn five() -> u32 {
    5
}
fn ten() -> u32 {
    10
}
fn two_hundred() -> u32 {
    200
}
fn ms_20() -> u64 {
    20
}
fn ms_50() -> u64 {
    50
}
fn ms_100() -> u64 {
    100
}
fn label_x() -> String {
    "x".into()
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ProgressArgs {
    /// How many progress notifications to send.
    #[serde(default = "five")]
    steps: u32,
    /// Milliseconds before each notification.
    #[serde(default = "ms_100")]
    delay_ms: u64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct EmitArgs {
    /// How many notifications to send on the standalone stream.
    #[serde(default = "ten")]
    count: u32,
    /// Milliseconds before each notification.
    #[serde(default = "ms_20")]
    delay_ms: u64,
    /// Put into each notification's uri, to tell sessions apart.
    #[serde(default = "label_x")]
    label: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CountdownArgs {
    #[serde(default = "two_hundred")]
    count: u32,
    #[serde(default)]
    delay_ms: u64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PingArgs {
    #[serde(default = "five")]
    count: u32,
    #[serde(default = "ms_50")]
    delay_ms: u64,
}

/// `progress_task` and `emit_standalone`, the names the probe knows; `progress_task` is a task
/// for a client that declares the extension.
#[derive(Clone)]
pub struct ProbeNames {
    tool_router: ToolRouter<Self>,
    tasks: TaskManager,
}

impl ProbeNames {
    /// `tasks`: the process's one task manager.
    pub fn new(tasks: TaskManager) -> Self {
        Self {
            tool_router: Self::tool_router(),
            tasks,
        }
    }
}

#[tool_router]
impl ProbeNames {
    #[tool(
        description = "Sends a progress notification per step, one every delay_ms milliseconds."
    )]
    async fn progress_task(
        &self,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
        Parameters(args): Parameters<ProgressArgs>,
    ) -> String {
        report_progress(meta, peer, args.steps, args.delay_ms).await
    }

    #[tool(
        description = "Sends count numbered notifications on the session's standalone stream, in the background."
    )]
    async fn emit_standalone(
        &self,
        peer: Peer<RoleServer>,
        Parameters(args): Parameters<EmitArgs>,
    ) -> String {
        let label = args.label;
        notify_in_background(peer, args.count, args.delay_ms, move |n| {
            format!("urn:forkscope-probe:{label}:{n}")
        })
    }
}

/// By hand rather than `#[tool_handler]`: `call_tool` decides first whether the call is a task.
impl ServerHandler for ProbeNames {
    fn get_info(&self) -> ServerConfig {
        capabilities_with_tasks()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tool_router.list_all()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let declares_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if request.name == "progress_task" && declares_tasks {
            let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
            let args: ProgressArgs = serde_json::from_value(arguments)
                .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
            return Ok(CallToolResponse::Task(spawn_progress_task(
                &self.tasks,
                args,
            )));
        }
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }
}

/// `countdown` and `ping_all`: the same tools as another server might name them.
#[derive(Debug, Clone)]
pub struct OtherNames {
    tool_router: ToolRouter<Self>,
}

impl OtherNames {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl OtherNames {
    #[tool(description = "Counts to count, reporting each number as it goes.")]
    async fn countdown(
        &self,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
        Parameters(args): Parameters<CountdownArgs>,
    ) -> String {
        report_progress(meta, peer, args.count, args.delay_ms).await
    }

    #[tool(
        description = "Pings this session's clients count times on the standalone stream, in the background."
    )]
    async fn ping_all(
        &self,
        peer: Peer<RoleServer>,
        Parameters(args): Parameters<PingArgs>,
    ) -> String {
        notify_in_background(peer, args.count, args.delay_ms, |n| {
            format!("urn:ping-all:{n}")
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for OtherNames {
    fn get_info(&self) -> ServerConfig {
        capabilities()
    }
}
