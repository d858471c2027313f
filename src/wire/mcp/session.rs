//! A bare session: `initialize`, `notifications/initialized`, and the standalone stream,
//! with nothing of the lab's client. For the lab's raw probes, the benchmarks and tests that
//! need a session the lab's client does not own.

use super::message::{Call, Initialize, Notification, Request, RequestId, method};
use super::response::{StreamIdentity, session_id};
use super::{Endpoint, Headers};
use crate::wire::headers::MODELLED_REVISION;
use forkscope_core::SessionId;

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{what}: {source}")]
    Http {
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    /// The body is kept: a refusal names its reason there (`over_budget`, …).
    #[error("{what}: answered {status}: {body}")]
    Status {
        what: &'static str,
        status: u16,
        body: String,
    },
    #[error("initialize: the server sent no usable Mcp-Session-Id")]
    NoSession,
    #[error("the stream's answer carried no Mcp-Resumption-Token")]
    NoToken,
}

/// `initialize` as client `name`, then `notifications/initialized`.
pub async fn open_session(endpoint: &Endpoint, name: &str) -> Result<SessionId, OpenError> {
    let init = Request::new(
        RequestId(0),
        Call::Initialize(Initialize::new(MODELLED_REVISION, name, "0")),
    );
    let what = method::INITIALIZE;
    let response = send(what, endpoint.post(Headers::default(), &init)).await?;
    let status = response.status().as_u16();
    let id = session_id(response.headers()).and_then(SessionId::parse);
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        return Err(OpenError::Status { what, status, body });
    }
    let id = id.ok_or(OpenError::NoSession)?;
    let session = id.to_string();
    let what = method::INITIALIZED;
    let headers = Headers::session(&session, MODELLED_REVISION);
    let ack = send(what, endpoint.post(headers, &Notification::Initialized)).await?;
    let status = ack.status().as_u16();
    if !(200..300).contains(&status) {
        let body = ack.text().await.unwrap_or_default();
        return Err(OpenError::Status { what, status, body });
    }
    Ok(id)
}

/// [`open_session`], then the standalone stream: the session, the stream's resumption token,
/// and the open response.
pub async fn open_session_stream(
    endpoint: &Endpoint,
    name: &str,
) -> Result<(SessionId, String, reqwest::Response), OpenError> {
    let session = open_session(endpoint, name).await?;
    let id = session.to_string();
    let what = "GET stream";
    let stream = send(
        what,
        endpoint.get_stream(Headers::session(&id, MODELLED_REVISION)),
    )
    .await?;
    let status = stream.status().as_u16();
    if status != 200 {
        let body = stream.text().await.unwrap_or_default();
        return Err(OpenError::Status { what, status, body });
    }
    let token = StreamIdentity::of(stream.headers())
        .token
        .ok_or(OpenError::NoToken)?;
    Ok((session, token, stream))
}

async fn send(
    what: &'static str,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, OpenError> {
    request
        .send()
        .await
        .map_err(|source| OpenError::Http { what, source })
}
