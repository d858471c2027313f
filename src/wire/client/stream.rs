//! Following a stream: the GET that opens or resumes one, and reading its events into the
//! core. This is the client's hot path: one parse per chunk, one lock per event.

use super::{LabClient, RESPONSE_TIMEOUT, core_headers};
use crate::wire::headers::{self, MODELLED_REVISION};
use crate::wire::mcp::{Headers, RpcError, StreamIdentity};
use crate::wire::sse::{Parser, SseEvent};
use forkscope_core::{
    ClientAction, EventId, EventTruth, LabTime, RejectReason, SessionId, StreamId,
};
use futures_util::StreamExt;
use serde_json::Value;
use std::sync::Arc;

/// Which stream an event belongs to, for the core's client.
#[derive(Clone, Copy, Debug)]
pub(super) enum Follow {
    /// The session's standalone stream: the cursor the checker watches.
    Standalone,
    /// A tool call's response stream, by request id.
    Request(u64),
}

impl LabClient {
    /// A GET for a stream: a new one, or a resume with the cursor and token the core chose.
    /// Returns the request and the headers sent, as the exchange list shows them.
    pub(super) fn stream_get(
        &self,
        session: SessionId,
        token: Option<&str>,
        cursor: Option<&str>,
    ) -> (reqwest::RequestBuilder, Vec<(&'static str, String)>) {
        let id = session.to_string();
        let request = self.endpoint.get_stream(
            Headers::session(&id, MODELLED_REVISION)
                .cursor(cursor)
                .token(token),
        );
        let mut sent = Vec::new();
        if let Some(cursor) = cursor {
            sent.push((headers::LAST_EVENT_ID, cursor.to_owned()));
        }
        if let Some(token) = token {
            sent.push((headers::RESUMPTION_TOKEN, shorten(token)));
        }
        (request, sent)
    }

    /// One GET and, if a stream opens, reading it until it ends. The http pane names what the
    /// server did, not only what was asked: a resume answered with a new stream says so.
    pub(super) async fn stream_once(
        &self,
        session: SessionId,
        token: Option<String>,
        cursor: Option<String>,
    ) {
        let (request, sent) = self.stream_get(session, token.as_deref(), cursor.as_deref());
        let what = if cursor.is_some() || token.is_some() {
            "resume"
        } else {
            "open stream"
        };
        let response = match tokio::time::timeout(RESPONSE_TIMEOUT, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                tracing::info!(error = %e, "reconnect attempt failed");
                return self.attempt_failed();
            }
            Err(_) => {
                tracing::info!("reconnect attempt timed out");
                return self.attempt_failed();
            }
        };
        let status = response.status().as_u16();
        let identity = StreamIdentity::of(response.headers());
        let what = answered_as(what, status, &identity);
        self.record("GET", what, status, &sent, response.headers());
        if status == 404 {
            tracing::warn!(session = %session.short(), "session gone (404); initializing a new one");
            return self.abandon(session, false).await;
        }
        if status != 200 {
            let Some(reason) = rejection(response).await else {
                tracing::warn!(status, "unexpected answer to GET");
                return self.attempt_failed();
            };
            let now = self.clock.now();
            let action = {
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                core.client.on_rejected(now, reason, &mut core.history)
            };
            tracing::info!(%reason, action = action.as_str(), "resume rejected");
            if action == ClientAction::StartNewSession {
                self.abandon(session, true).await;
            }
            return;
        }
        let continuity = self
            .shared
            .lock()
            .client
            .on_stream_opened(core_headers(&identity));
        tracing::info!(
            ?continuity,
            stream = identity.stream.as_deref().unwrap_or("(no echo)"),
            "stream open"
        );
        self.read_events(session, response, Follow::Standalone)
            .await;
        let now = self.clock.now();
        self.shared.lock().client.on_disconnected(now);
        tracing::info!("stream ended");
    }

    /// Reads SSE events until the stream ends, handing each whole event to the core. Returns
    /// the JSON-RPC response a request stream carried, if it arrived.
    pub(super) async fn read_events(
        &self,
        session: SessionId,
        response: reqwest::Response,
        follow: Follow,
    ) -> Option<Value> {
        let mut parser = Parser::new();
        let mut bytes = response.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            let Ok(chunk) = chunk else { break };
            let Ok(events) = parser.feed(&chunk) else {
                break;
            };
            for event in events {
                if let Some(result) = self.deliver(session, event, follow) {
                    return Some(result);
                }
            }
        }
        None
    }

    /// Delivers one event to the core; returns the JSON-RPC response it carried, if it was
    /// applied (a replayed result is not a second result).
    fn deliver(&self, session: SessionId, event: SseEvent, follow: Follow) -> Option<Value> {
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        let now: LabTime = self.clock.now();
        if let Some(retry) = event.retry_ms {
            core.client.on_retry_hint(retry);
        }
        // The lab-only truth comment feeds the checker, nothing else: a server that sends
        // none is followed the same way, and the checker is simply told less.
        let truth = event.truth.as_ref().map(|t| EventTruth {
            session,
            event: EventId {
                stream: StreamId(t.stream),
                seq: t.seq,
            },
            key: t.key.as_deref().map(Arc::from),
        });
        let priming = event.data.is_empty();
        let id = event.id.as_deref();
        let delivery = match follow {
            Follow::Standalone => core
                .client
                .on_event(now, id, priming, truth, &mut core.history),
            Follow::Request(request) => {
                core.client
                    .on_request_event(now, request, id, priming, truth, &mut core.history)
            }
        };
        if delivery != forkscope_core::Delivery::Applied {
            return None;
        }
        // A JSON-RPC response, the result or an error, ends the call.
        let message: Value = serde_json::from_str(&event.data).ok()?;
        (message.get("result").is_some() || message.get("error").is_some()).then_some(message)
    }
}

/// The rule a refused GET names (`error.data.reason`), if it names one the core knows.
pub(super) async fn rejection(response: reqwest::Response) -> Option<RejectReason> {
    let body = response.bytes().await.ok()?;
    RejectReason::parse(RpcError::of_body(&body)?.reason()?)
}

/// A token as the exchange list shows it: enough to tell tokens apart, not to use one.
fn shorten(token: &str) -> String {
    format!("{}…", &token[..8.min(token.len())])
}

/// What a GET turned out to be, for the http pane: a resume the server answered with a new
/// stream (a fresh token, or `Mcp-Stream-Resumed: false`) is not a resume, though a naive
/// client takes it for one.
fn answered_as(asked: &str, status: u16, identity: &StreamIdentity) -> String {
    if status == 200 && asked == "resume" && identity.is_new() {
        "resume → new stream".to_owned()
    } else {
        asked.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn answered(asked: &str, status: u16, name: &'static str, value: &'static str) -> String {
        let mut received = HeaderMap::new();
        received.insert(name, HeaderValue::from_static(value));
        answered_as(asked, status, &StreamIdentity::of(&received))
    }

    #[test]
    fn a_resume_answered_with_a_new_stream_is_labelled_so() {
        let token = headers::RESUMPTION_TOKEN;
        let resumed = headers::STREAM_RESUMED;
        assert_eq!(answered("resume", 200, token, "ab"), "resume → new stream");
        assert_eq!(
            answered("resume", 200, resumed, "false"),
            "resume → new stream"
        );
        assert_eq!(answered("resume", 200, resumed, "true"), "resume");
        assert_eq!(answered("resume", 409, token, "ab"), "resume");
        assert_eq!(answered("open stream", 200, token, "ab"), "open stream");
    }
}
