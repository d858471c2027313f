//! The probe's tools under both sets of names, written with the SDK's `#[tool_router]` macros.
//! Each set is its own handler type because the macros fix a tool's name at compile time; the
//! behaviour behind them is shared.

use std::time::Duration;

use rmcp::{
    Peer, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        ProgressNotificationParam, RequestMetaObject, ResourceUpdatedNotificationParam,
        ServerCapabilities, ServerConfig,
    },
    schemars, tool, tool_handler, tool_router,
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

/// `progress_task` and `emit_standalone`, the names the probe knows.
#[derive(Debug, Clone)]
pub struct ProbeNames {
    tool_router: ToolRouter<Self>,
}

impl ProbeNames {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for ProbeNames {
    fn get_info(&self) -> ServerConfig {
        capabilities()
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
