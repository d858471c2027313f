//! MCP's JSON-RPC over Streamable HTTP, written once. A client's half: the messages it sends
//! ([`message`]), the transport's headers every request carries ([`Headers`], applied by
//! [`Endpoint`]), and how an answer is read ([`response`]). The lab's client, the lab's raw
//! probes, `forkscope probe`, the benchmarks and the tests all build their requests here, so a
//! request is spelled in one place and a header is never forgotten on one path. What each
//! client does with the answers — follow a stream through the core, judge a server, time it —
//! stays with that client. The server's half — results, errors and their codes, notifications
//! as it writes them — is [`jsonrpc`].

pub mod jsonrpc;
pub mod message;
pub mod modern;
pub mod response;
pub mod session;

pub use message::{
    Body, Call, Initialize, Notification, ProgressToken, Request, RequestId, ToolCall, method,
};
pub use response::{Initialized, Response, RpcError, StreamIdentity};
pub use session::{OpenError, open_session, open_session_stream};

use crate::wire::headers;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue, ORIGIN};

/// What a `POST` accepts: a JSON answer or an SSE stream, as the transport requires.
const ACCEPT_POST: &str = "application/json, text/event-stream";
const ACCEPT_STREAM: &str = "text/event-stream";

/// The transport's headers of one request. Every request after `initialize` carries the session
/// and the revision; a resume adds its cursor (and, to forkscope, its stream's token).
#[derive(Clone, Copy, Debug, Default)]
pub struct Headers<'a> {
    /// `Mcp-Session-Id`.
    pub session: Option<&'a str>,
    /// `MCP-Protocol-Version`: the revision `initialize` agreed.
    pub protocol_version: Option<&'a str>,
    /// `Last-Event-ID`, as bytes: a cursor no header can carry is not sent (see [`sendable`]).
    pub last_event_id: Option<&'a [u8]>,
    /// `Mcp-Resumption-Token` (forkscope's extension): which stream a resume means.
    pub resumption_token: Option<&'a str>,
    /// `Origin`, as a browser would send it.
    pub origin: Option<&'a str>,
}

impl<'a> Headers<'a> {
    /// A request in `session`, speaking `revision`.
    pub fn session(session: &'a str, revision: &'a str) -> Headers<'a> {
        Headers {
            session: Some(session),
            protocol_version: Some(revision),
            ..Headers::default()
        }
    }

    /// With `Last-Event-ID: cursor`, if there is one.
    pub fn cursor(self, cursor: Option<&'a str>) -> Headers<'a> {
        Headers {
            last_event_id: cursor.map(str::as_bytes),
            ..self
        }
    }

    /// With `Mcp-Resumption-Token: token`, if there is one.
    pub fn token(self, token: Option<&'a str>) -> Headers<'a> {
        Headers {
            resumption_token: token,
            ..self
        }
    }

    /// Adds these headers to `request`: for a test that builds the rest of a request by hand.
    pub fn apply(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(session) = self.session {
            request = request.header(headers::SESSION_ID, session);
        }
        if let Some(version) = self.protocol_version {
            request = request.header(headers::PROTOCOL_VERSION, version);
        }
        if let Some(Ok(cursor)) = self.last_event_id.map(HeaderValue::from_bytes) {
            request = request.header(headers::LAST_EVENT_ID, cursor);
        }
        if let Some(token) = self.resumption_token {
            request = request.header(headers::RESUMPTION_TOKEN, token);
        }
        if let Some(origin) = self.origin {
            request = request.header(ORIGIN, origin);
        }
        request
    }
}

/// Whether `cursor` can be sent as a `Last-Event-ID` header at all.
pub fn sendable(cursor: &[u8]) -> bool {
    HeaderValue::from_bytes(cursor).is_ok()
}

/// An MCP endpoint and the HTTP client that reaches it: every request to it is built here.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub http: reqwest::Client,
    pub url: String,
}

impl Endpoint {
    pub fn new(http: reqwest::Client, url: impl Into<String>) -> Endpoint {
        Endpoint {
            http,
            url: url.into(),
        }
    }

    /// `POST` of a request or notification.
    pub fn post(&self, headers: Headers<'_>, message: &impl Body) -> reqwest::RequestBuilder {
        self.post_raw(headers, message.body())
    }

    /// `POST` of a body as given: for a test that sends what no client would.
    pub fn post_raw(&self, headers: Headers<'_>, body: String) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(&self.url)
            .header(ACCEPT, ACCEPT_POST)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        headers.apply(request)
    }

    /// `GET` of a stream: the session's standalone stream, or a resume.
    pub fn get_stream(&self, headers: Headers<'_>) -> reqwest::RequestBuilder {
        headers.apply(self.http.get(&self.url).header(ACCEPT, ACCEPT_STREAM))
    }

    /// `DELETE`: the session ends.
    pub fn delete(&self, headers: Headers<'_>) -> reqwest::RequestBuilder {
        headers.apply(self.http.delete(&self.url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(request: reqwest::RequestBuilder) -> reqwest::header::HeaderMap {
        request.build().unwrap().headers().clone()
    }

    #[test]
    fn every_header_is_applied_in_one_place() {
        let endpoint = Endpoint::new(reqwest::Client::new(), "http://127.0.0.1:1/mcp");
        let h = Headers {
            origin: Some("http://o.example"),
            ..Headers::session("abc", "2025-11-25")
                .cursor(Some("s1-4"))
                .token(Some("tok"))
        };
        let got = sent(endpoint.get_stream(h));
        assert_eq!(got[ACCEPT], "text/event-stream");
        assert_eq!(got[headers::SESSION_ID], "abc");
        assert_eq!(got[headers::PROTOCOL_VERSION], "2025-11-25");
        assert_eq!(got[headers::LAST_EVENT_ID], "s1-4");
        assert_eq!(got[headers::RESUMPTION_TOKEN], "tok");
        assert_eq!(got[ORIGIN], "http://o.example");
        let init = sent(endpoint.post(
            Headers::default(),
            &Request::new(RequestId(0), Call::ToolsList {}),
        ));
        assert_eq!(init[ACCEPT], ACCEPT_POST);
        assert!(!init.contains_key(headers::SESSION_ID));
    }

    #[test]
    fn a_cursor_no_header_can_carry_is_not_sent() {
        let endpoint = Endpoint::new(reqwest::Client::new(), "http://127.0.0.1:1/mcp");
        let bad: &[u8] = b"a\nb";
        assert!(!sendable(bad));
        let h = Headers {
            last_event_id: Some(bad),
            ..Headers::default()
        };
        assert!(!sent(endpoint.get_stream(h)).contains_key(headers::LAST_EVENT_ID));
    }
}
