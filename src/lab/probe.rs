//! A raw GET on `/mcp` from outside the lab's client — a stale tab, a buggy retry layer, a
//! forged token — for scenarios' `probe` steps and the fuzz tests: what the server answers it.

use super::Lab;
use crate::wire::headers::MODELLED_REVISION;
use crate::wire::mcp;
use std::time::Duration;

/// Which token a probe sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeToken {
    None,
    /// The lab client's current token.
    Current,
    /// Well-formed, but names nothing.
    Garbage,
    /// A token minted for a second session.
    OtherSession,
}

/// A raw GET to send: token, and `Last-Event-ID` (`"current"`: the client's cursor).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    pub token: ProbeToken,
    #[serde(default)]
    pub last_event_id: Option<String>,
}

/// What a probe got back.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProbeResult {
    pub status: u16,
    pub reason: Option<String>,
    /// Ids of the events a 200 stream replayed.
    pub replayed: Vec<String>,
}

impl Lab {
    /// A raw GET on `/mcp` from outside the lab's client (a stale tab, a buggy retry layer):
    /// returns the status and, for a rejection, its reason. A 200 stream is read for its
    /// replayed event ids until `limit` arrive or it goes quiet.
    pub async fn probe(&self, request: &Probe) -> ProbeResult {
        let Some(session) = self.client.session() else {
            return ProbeResult {
                status: 0,
                reason: Some("no session".into()),
                replayed: Vec::new(),
            };
        };
        let token = match &request.token {
            ProbeToken::None => None,
            ProbeToken::Current => self.shared.lock().client.token().map(str::to_owned),
            ProbeToken::Garbage => Some("00000000000000000000000000000000".to_owned()),
            ProbeToken::OtherSession => self.token_of_another_session().await,
        };
        let cursor = match request.last_event_id.as_deref() {
            Some("current") => self.shared.lock().client.cursor().map(str::to_owned),
            other => other.map(str::to_owned),
        };
        let id = session.to_string();
        let headers = mcp::Headers::session(&id, MODELLED_REVISION)
            .cursor(cursor.as_deref())
            .token(token.as_deref());
        let get = self.endpoint().get_stream(headers);
        let Ok(response) = get.timeout(Duration::from_secs(5)).send().await else {
            return ProbeResult {
                status: 0,
                reason: Some("no answer".into()),
                replayed: Vec::new(),
            };
        };
        let status = response.status().as_u16();
        if status != 200 {
            let body = response.bytes().await.unwrap_or_default();
            let error = mcp::RpcError::of_body(&body);
            let reason = error.as_ref().and_then(|e| e.reason()).map(str::to_owned);
            return ProbeResult {
                status,
                reason,
                replayed: Vec::new(),
            };
        }
        // Read what the server replays; a live stream goes quiet once the replay is out.
        let mut parser = crate::wire::sse::Parser::new();
        let mut body = response.bytes_stream();
        let mut replayed = Vec::new();
        use futures_util::StreamExt;
        while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(Duration::from_millis(100), body.next()).await
        {
            for event in parser.feed(&chunk).unwrap_or_default() {
                if !event.data.is_empty()
                    && let Some(id) = event.id
                {
                    replayed.push(id);
                }
            }
        }
        ProbeResult {
            status,
            reason: None,
            replayed,
        }
    }

    /// Initializes a second session over raw HTTP and opens its stream: its token belongs to
    /// another session.
    async fn token_of_another_session(&self) -> Option<String> {
        let opened = mcp::open_session_stream(&self.endpoint(), "probe").await;
        opened.ok().map(|(_, token, _)| token)
    }

    /// The lab's server, reached directly (not through the proxy), by a client of its own.
    fn endpoint(&self) -> mcp::Endpoint {
        let url = format!("http://{}/mcp", self.server_addr());
        mcp::Endpoint::new(reqwest::Client::new(), url)
    }
}
