//! The probe's side of the wire: a stock Streamable HTTP client with every read bounded in time
//! and size ([`target`]: the server and its sessions), and connections watched from spawned
//! readers so a case can hold several at once ([`connections`]). Requests are built by
//! [`crate::wire::mcp`], as every client here builds them.
//!
//! Only the transport's own headers are sent (`Mcp-Session-Id`, `MCP-Protocol-Version`,
//! `Last-Event-ID`): the probe tests a server as any client would meet it.

mod connections;
mod target;

pub use connections::{Case, Conn, Extra, count};
pub use target::{Bounds, HttpError, Messages, Opened, Session, Target};

use crate::wire::mcp::RpcError;
use futures_util::StreamExt;
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

async fn read_bounded(resp: reqwest::Response, max: usize, within: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    let deadline = Instant::now() + within;
    while let Ok(Some(Ok(chunk))) = timeout_at(deadline, body.next()).await {
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= max {
            break;
        }
    }
    out
}

/// The JSON-RPC error message of a refusal, or its body's first words.
fn reason_of(body: &[u8]) -> Option<String> {
    if let Some(message) = RpcError::of_body(body).as_ref().and_then(RpcError::message) {
        return Some(message.chars().take(120).collect());
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(120).collect())
}

pub fn shorten(s: &str) -> String {
    if s.chars().count() <= 48 {
        s.to_owned()
    } else {
        let head: String = s.chars().take(40).collect();
        format!("{head}… ({} bytes)", s.len())
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
