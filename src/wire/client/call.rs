//! A tool call: `progress_task` posted with a progress token, its stream followed to the
//! result, and resumed through the core's schedule when it breaks first.

use super::stream::{Follow, rejection};
use super::{ClientError, LabClient, POLL, RESPONSE_TIMEOUT, core_headers};
use crate::wire::headers::MODELLED_REVISION;
use crate::wire::mcp::{Call, Headers, ProgressToken, Request, StreamIdentity, ToolCall, response};
use forkscope_core::SessionId;
use forkscope_core::client::RequestPhase;
use serde_json::{Value, json};
use std::time::Duration;

impl LabClient {
    /// Calls `progress_task` and follows its SSE response to the result. When the stream
    /// breaks first, resumes it (a GET with the stream's token and `Last-Event-ID`) inside the
    /// retry budget, as the core schedules; every progress step and the result are applied
    /// through the core exactly once.
    pub async fn call_tool(&self, steps: u64, delay_ms: u64) -> Result<Value, ClientError> {
        let session = self.session().ok_or(ClientError::NoSession)?;
        let request = self.request_id();
        let id = request.0;
        let call = ToolCall::with_progress(
            "progress_task",
            json!({ "steps": steps, "delay_ms": delay_ms }),
            ProgressToken::Number(id),
        );
        let body = Request::new(request, Call::ToolsCall(call));
        self.shared.lock().client.begin_request(id, Some(steps));
        let sid = session.to_string();
        let sent = self
            .endpoint
            .post(Headers::session(&sid, MODELLED_REVISION), &body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                let now = self.clock.now();
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                if error.is_connect() {
                    // Never sent: no server has the call, and nothing is owed for it.
                    core.client.on_request_failed(id);
                } else {
                    core.client.on_request_broken(now, id, &mut core.history);
                }
                return Err(error.into());
            }
        };
        let status = response.status().as_u16();
        self.record(
            "POST",
            format!("tools/call progress_task ({steps} steps)"),
            status,
            &[],
            response.headers(),
        );
        if matches!(status, 502 | 504) {
            // A gateway that sent the call on and heard nothing back: it may run.
            let now = self.clock.now();
            {
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                core.client.on_request_broken(now, id, &mut core.history);
            }
            let message = response.text().await.unwrap_or_default();
            return Err(ClientError::Status { status, message });
        }
        if status != 200 {
            self.shared.lock().client.on_request_done(id);
            let message = response.text().await.unwrap_or_default();
            return Err(ClientError::Status { status, message });
        }
        if !response::is_event_stream(response.headers()) {
            self.shared.lock().client.on_request_done(id);
            return Ok(response.json().await?);
        }
        let mut response = response;
        loop {
            let identity = StreamIdentity::of(response.headers());
            self.shared
                .lock()
                .client
                .on_request_stream_opened(id, core_headers(&identity));
            if let Some(answer) = self
                .read_events(session, response, Follow::Request(id))
                .await
            {
                let error = answer.get("error");
                let mut core = self.shared.lock();
                if error.is_some() {
                    core.client.on_request_failed(id);
                } else {
                    core.client.on_request_done(id);
                }
                drop(core);
                return match error {
                    Some(error) => Err(ClientError::CallFailed {
                        message: error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("(no message)")
                            .to_owned(),
                        reason: error
                            .pointer("/data/reason")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    }),
                    None => Ok(answer),
                };
            }
            tracing::info!(
                request = id,
                "the tool call's stream broke before its result; resuming"
            );
            let now = self.clock.now();
            self.shared.lock().client.on_request_lost(now, id);
            response = self.resume_request(session, id).await?;
        }
    }

    /// Resumes a tool call's stream: waits for the core's schedule, GETs with the stream's
    /// token and cursor, and retries inside the budget. Errs when the core gives up.
    async fn resume_request(
        &self,
        session: SessionId,
        id: u64,
    ) -> Result<reqwest::Response, ClientError> {
        loop {
            let plan = loop {
                let now = self.clock.now();
                let (plan, phase, due) = {
                    let mut core = self.shared.lock();
                    let plan = core.client.request_resume_plan(now, id);
                    let request = core.client.request(id);
                    (
                        plan,
                        request.map(|r| r.phase),
                        request.and_then(|r| r.poll_timeout()),
                    )
                };
                if let Some(plan) = plan {
                    break plan;
                }
                if !matches!(phase, Some(RequestPhase::Resuming { .. })) {
                    return Err(ClientError::ResultLost);
                }
                let wait = due
                    .and_then(|due| self.clock.real_ms_until(due))
                    .map_or(POLL, |ms| Duration::from_millis(ms).min(POLL));
                tokio::time::sleep(wait).await;
            };
            let (request, sent) = self.stream_get(
                session,
                plan.token.as_deref(),
                plan.last_event_id.as_deref(),
            );
            let answer = tokio::time::timeout(RESPONSE_TIMEOUT, request.send()).await;
            let rejected = match answer {
                Ok(Ok(response)) => {
                    let status = response.status().as_u16();
                    self.record(
                        "GET",
                        format!("resume tool call {id}"),
                        status,
                        &sent,
                        response.headers(),
                    );
                    if status == 200 {
                        return Ok(response);
                    }
                    rejection(response).await
                }
                _ => None,
            };
            let now = self.clock.now();
            let phase = {
                let mut guard = self.shared.lock();
                let core = &mut *guard;
                core.client
                    .on_request_attempt_failed(now, id, rejected, &mut core.history)
            };
            if phase == RequestPhase::Failed {
                tracing::warn!(request = id, reason = ?rejected, "the tool call's result is lost");
                return Err(ClientError::ResultLost);
            }
        }
    }
}
