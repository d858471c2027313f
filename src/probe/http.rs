//! The probe's side of the wire: a stock Streamable HTTP client with every read bounded in time
//! and size, and connections watched from spawned readers so a case can hold several at once.
//!
//! Only the transport's own headers are sent (`Mcp-Session-Id`, `MCP-Protocol-Version`,
//! `Last-Event-ID`): the probe tests a server as any client would meet it.

use super::items::item_of;
use crate::wire::headers::{LAST_EVENT_ID, MODELLED_REVISION, PROTOCOL_VERSION, SESSION_ID};
use crate::wire::sse::Parser;
use forkscope_core::probe::{Answer, Connection, End, Item, Received};
use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};

/// Bounds on everything the probe reads.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// How long a request may take to be answered (status and headers).
    pub answer: Duration,
    /// Bytes one connection's body may carry before the probe cuts it.
    pub body_bytes: usize,
    /// Bytes of a JSON or error body the probe reads.
    pub json_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            answer: Duration::from_secs(5),
            body_bytes: 8 << 20,
            json_bytes: 1 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{what}: no answer within {ms} ms")]
    Timeout { what: &'static str, ms: u128 },
    /// The whole chain of causes is said: reqwest's own message ("error sending request")
    /// names no reason; the connection refusal beneath it does.
    #[error("{what}: {}", error_chain(source))]
    Transport {
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: answered {status}{}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Status {
        what: &'static str,
        status: u16,
        reason: Option<String>,
    },
    #[error("{what}: {why}")]
    Protocol { what: &'static str, why: String },
}

/// A server under probe.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: reqwest::Url,
    http: reqwest::Client,
    pub bounds: Bounds,
}

/// A session the probe opened.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    pub version: String,
    /// A label unique to this session, put into the events the probe asks for.
    pub label: String,
    /// `serverInfo` from the initialize result, as `name version`.
    pub server: String,
    next_request: AtomicU64,
}

impl Session {
    pub fn request_id(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }
}

impl Target {
    pub fn new(url: reqwest::Url, bounds: Bounds) -> Result<Target, HttpError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(bounds.answer)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| HttpError::Transport {
                what: "building the HTTP client",
                source,
            })?;
        Ok(Target { url, http, bounds })
    }

    fn post(&self, session: Option<&Session>, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(self.url.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(s) = session {
            req = req
                .header(SESSION_ID, &s.id)
                .header(PROTOCOL_VERSION, &s.version);
        }
        req
    }

    async fn send(
        &self,
        what: &'static str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, HttpError> {
        match timeout(self.bounds.answer, req.send()).await {
            Err(_) => Err(HttpError::Timeout {
                what,
                ms: self.bounds.answer.as_millis(),
            }),
            Ok(Err(source)) => Err(HttpError::Transport { what, source }),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// Reads a JSON-RPC answer to request `id`, whether it came as JSON or as an SSE stream.
    async fn answer_of(
        &self,
        what: &'static str,
        resp: reqwest::Response,
        id: &Value,
    ) -> Result<Value, HttpError> {
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = read_bounded(resp, self.bounds.json_bytes, self.bounds.answer).await;
            return Err(HttpError::Status {
                what,
                status,
                reason: reason_of(&body),
            });
        }
        let deadline = Instant::now() + self.bounds.answer;
        let message = if is_event_stream(resp.headers()) {
            let mut parser = Parser::new();
            let mut body = resp.bytes_stream();
            let mut seen = 0usize;
            loop {
                let chunk = match timeout_at(deadline, body.next()).await {
                    Err(_) => {
                        return Err(HttpError::Timeout {
                            what,
                            ms: self.bounds.answer.as_millis(),
                        });
                    }
                    Ok(None) => {
                        return Err(HttpError::Protocol {
                            what,
                            why: "the stream ended without the response".into(),
                        });
                    }
                    Ok(Some(Err(source))) => return Err(HttpError::Transport { what, source }),
                    Ok(Some(Ok(chunk))) => chunk,
                };
                seen += chunk.len();
                if seen > self.bounds.json_bytes {
                    return Err(HttpError::Protocol {
                        what,
                        why: format!("over {} bytes before the response", self.bounds.json_bytes),
                    });
                }
                let events = parser.feed(&chunk).map_err(|e| HttpError::Protocol {
                    what,
                    why: e.to_string(),
                })?;
                let found = events.iter().find_map(|e| {
                    serde_json::from_str::<Value>(&e.data)
                        .ok()
                        .filter(|m| m.get("id") == Some(id) && m.get("method").is_none())
                });
                if let Some(m) = found {
                    break m;
                }
            }
        } else {
            let body = read_bounded(resp, self.bounds.json_bytes, self.bounds.answer).await;
            serde_json::from_slice(&body).map_err(|e| HttpError::Protocol {
                what,
                why: format!("not JSON: {e}"),
            })?
        };
        if let Some(error) = message.get("error") {
            return Err(HttpError::Protocol {
                what,
                why: format!("JSON-RPC error {error}"),
            });
        }
        message
            .get("result")
            .cloned()
            .ok_or_else(|| HttpError::Protocol {
                what,
                why: "a response without a result".into(),
            })
    }

    /// `initialize` and `notifications/initialized`: a new session, as a stock client opens it.
    pub async fn open_session(&self, label: String) -> Result<Session, HttpError> {
        let what = "initialize";
        let id = json!(0);
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {
                "protocolVersion": MODELLED_REVISION,
                "capabilities": {},
                "clientInfo": { "name": "forkscope-probe", "version": env!("CARGO_PKG_VERSION") }
            }
        });
        let resp = self.send(what, self.post(None, &body)).await?;
        let session_id = resp
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let result = self.answer_of(what, resp, &id).await?;
        let Some(session_id) = session_id else {
            return Err(HttpError::Protocol {
                what,
                why: "no Mcp-Session-Id: the server is stateless, and a stateless server has no streams to resume".into(),
            });
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(MODELLED_REVISION)
            .to_owned();
        let info = |field: &str| {
            result
                .pointer(&format!("/serverInfo/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .chars()
                .take(60)
                .collect::<String>()
        };
        let session = Session {
            id: session_id,
            version,
            label,
            server: format!("{} {}", info("name"), info("version")),
            next_request: AtomicU64::new(1),
        };
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let resp = self
            .send(
                "notifications/initialized",
                self.post(Some(&session), &note),
            )
            .await?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(HttpError::Status {
                what: "notifications/initialized",
                status,
                reason: None,
            });
        }
        Ok(session)
    }

    /// A request whose answer the probe needs before going on (`tools/list`, a quick tool).
    pub async fn request(
        &self,
        what: &'static str,
        session: &Session,
        method: &str,
        params: Value,
    ) -> Result<Value, HttpError> {
        let id = json!(session.request_id());
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let resp = self.send(what, self.post(Some(session), &body)).await?;
        self.answer_of(what, resp, &id).await
    }

    /// Ends a session (best effort: the case is over either way).
    pub async fn end_session(&self, session: &Session) {
        let req = self
            .http
            .delete(self.url.clone())
            .header(SESSION_ID, &session.id)
            .header(PROTOCOL_VERSION, &session.version);
        let _ = timeout(self.bounds.answer, req.send()).await;
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"))
}

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
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return Some(m.chars().take(120).collect());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(120).collect())
}

/// What a case sends besides the session's own headers.
#[derive(Debug, Default, Clone)]
pub struct Extra {
    /// `Last-Event-ID`, as raw bytes (a malformed one is the point of one case).
    pub last_event_id: Option<Vec<u8>>,
    /// Replaces the session id (another session's, or one nobody issued).
    pub session_id: Option<String>,
    pub protocol_version: Option<String>,
    pub origin: Option<String>,
}

/// The connections of one case, read concurrently, with one arrival order across them.
#[derive(Debug)]
pub struct Case {
    target: Target,
    order: Arc<AtomicU64>,
    changed: watch::Sender<u64>,
    connections: Mutex<Vec<Arc<Mutex<Connection>>>>,
    readers: Mutex<Vec<Option<JoinHandle<()>>>>,
}

impl Drop for Case {
    fn drop(&mut self) {
        for reader in lock(&self.readers).iter_mut().flatten() {
            reader.abort();
        }
    }
}

/// Readers only push and set fields; a poisoned lock still holds whole values.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A connection's index within its case.
pub type Conn = usize;

impl Case {
    pub fn new(target: &Target) -> Case {
        Case {
            target: target.clone(),
            order: Arc::new(AtomicU64::new(1)),
            changed: watch::channel(0).0,
            connections: Mutex::new(Vec::new()),
            readers: Mutex::new(Vec::new()),
        }
    }

    /// A GET on the session: the standalone stream, or a resume with `extra.last_event_id`.
    pub async fn get(&self, session: &Session, extra: Extra) -> Conn {
        let mut req = self
            .target
            .http
            .get(self.target.url.clone())
            .header(ACCEPT, "text/event-stream");
        let sid = extra.session_id.as_deref().unwrap_or(&session.id);
        let version = extra
            .protocol_version
            .as_deref()
            .unwrap_or(&session.version);
        req = req
            .header(SESSION_ID, sid)
            .header(PROTOCOL_VERSION, version);
        let mut line = String::from("GET");
        if let Some(id) = &extra.last_event_id {
            match HeaderValue::from_bytes(id) {
                Ok(value) => {
                    req = req.header(HeaderName::from_static(LAST_EVENT_ID), value);
                    line.push_str(&format!(
                        " Last-Event-ID: {}",
                        shorten(&String::from_utf8_lossy(id))
                    ));
                }
                Err(_) => line.push_str(" (Last-Event-ID not sendable)"),
            }
        }
        if extra.session_id.is_some() {
            line.push_str(&format!(" Mcp-Session-Id: {}", shorten(sid)));
        }
        if let Some(v) = &extra.protocol_version {
            line.push_str(&format!(" MCP-Protocol-Version: {v}"));
        }
        if let Some(origin) = &extra.origin {
            req = req.header(reqwest::header::ORIGIN, origin);
            line.push_str(&format!(" Origin: {origin}"));
        }
        self.open(line, req).await
    }

    /// `tools/call` with a progress token: the call's own stream.
    pub async fn call(
        &self,
        session: &Session,
        request: &Value,
        tool: &str,
        args: &Value,
        token: &str,
    ) -> Conn {
        let body = json!({
            "jsonrpc": "2.0", "id": request, "method": "tools/call",
            "params": { "name": tool, "arguments": args, "_meta": { "progressToken": token } }
        });
        let req = self.target.post(Some(session), &body);
        self.open(format!("POST tools/call {tool} {args}"), req)
            .await
    }

    async fn open(&self, line: String, req: reqwest::RequestBuilder) -> Conn {
        // The slot is taken before sending, so concurrent requests keep their labels.
        let (index, shared) = {
            let mut connections = lock(&self.connections);
            let shared = Arc::new(Mutex::new(Connection {
                label: label_of(connections.len()),
                request: line,
                answer: Answer::NoAnswer {
                    why: "no answer yet".into(),
                },
                events: Vec::new(),
                end: End::ClosedByServer,
            }));
            connections.push(shared.clone());
            lock(&self.readers).push(None);
            (connections.len() - 1, shared)
        };
        let answer = match timeout(self.target.bounds.answer, req.send()).await {
            Err(_) => Err(Answer::NoAnswer {
                why: format!(
                    "no answer within {} ms",
                    self.target.bounds.answer.as_millis()
                ),
            }),
            Ok(Err(e)) => Err(Answer::NoAnswer {
                why: format!("the request failed: {}", error_chain(&e)),
            }),
            Ok(Ok(resp)) => Ok(resp),
        };
        let resp = match answer {
            Err(answer) => {
                lock(&shared).answer = answer;
                self.changed.send_modify(|n| *n += 1);
                return index;
            }
            Ok(resp) => resp,
        };
        let status = resp.status().as_u16();
        let bounds = self.target.bounds;
        if !((200..300).contains(&status) && is_event_stream(resp.headers())) {
            let body = read_bounded(resp, bounds.json_bytes, bounds.answer).await;
            let reason = reason_of(&body);
            let answer = match status {
                200..=299 => Answer::Json {
                    status,
                    error: serde_json::from_slice::<Value>(&body)
                        .ok()
                        .and_then(|v| v.get("error").map(Value::to_string)),
                },
                400..=499 => Answer::Rejected { status, reason },
                _ => Answer::NoAnswer {
                    why: format!(
                        "answered {status}{}",
                        reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    ),
                },
            };
            lock(&shared).answer = answer;
            self.changed.send_modify(|n| *n += 1);
            return index;
        }
        {
            let mut conn = lock(&shared);
            conn.answer = Answer::Stream {
                status,
                opened: self.order.fetch_add(1, Ordering::SeqCst),
            };
            conn.end = End::Open;
        }
        self.changed.send_modify(|n| *n += 1);
        // The body is read in the background, so the case can open and drop others meanwhile.
        let order = self.order.clone();
        let changed = self.changed.clone();
        let reader = tokio::spawn(async move {
            let mut parser = Parser::new();
            let mut body = resp.bytes_stream();
            let mut seen = 0usize;
            let end = loop {
                match body.next().await {
                    None => break End::ClosedByServer,
                    Some(Err(_)) => break End::Broken,
                    Some(Ok(chunk)) => {
                        seen += chunk.len();
                        let Ok(events) = parser.feed(&chunk) else {
                            break End::Broken;
                        };
                        {
                            let mut conn = lock(&shared);
                            for e in events {
                                conn.events.push(Received {
                                    item: item_of(&e.data),
                                    event_id: e.id,
                                    order: order.fetch_add(1, Ordering::SeqCst),
                                });
                            }
                        }
                        changed.send_modify(|n| *n += 1);
                        if seen > bounds.body_bytes {
                            break End::Broken;
                        }
                    }
                }
            };
            lock(&shared).end = end;
            changed.send_modify(|n| *n += 1);
        });
        lock(&self.readers)[index] = Some(reader);
        index
    }

    /// Drops a connection from the client side, as a broken network looks to the client.
    pub fn drop_connection(&self, conn: Conn) {
        if let Some(reader) = lock(&self.readers)[conn].take() {
            reader.abort();
        }
        let shared = lock(&self.connections)[conn].clone();
        let mut c = lock(&shared);
        if c.end == End::Open {
            c.end = End::DroppedByProbe;
        }
    }

    /// Waits until `done` holds over the connections, or the deadline passes; says which.
    pub async fn wait_until(
        &self,
        deadline: Instant,
        mut done: impl FnMut(&[Connection]) -> bool,
    ) -> bool {
        let mut rx = self.changed.subscribe();
        loop {
            if done(&self.snapshot()) {
                return true;
            }
            match timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(&self.snapshot()),
            }
        }
    }

    /// The arrival order so far: events stamped later arrived after this call.
    pub fn order_now(&self) -> u64 {
        self.order.load(Ordering::SeqCst)
    }

    pub fn snapshot(&self) -> Vec<Connection> {
        lock(&self.connections)
            .iter()
            .map(|c| lock(c).clone())
            .collect()
    }

    pub fn connection(&self, conn: Conn) -> Connection {
        let shared = lock(&self.connections)[conn].clone();
        lock(&shared).clone()
    }

    /// The last event id connection `conn` received on an event that carried something (or
    /// on its priming event, if that is all it had).
    pub fn cursor(&self, conn: Conn) -> Option<String> {
        let shared = lock(&self.connections)[conn].clone();
        let c = lock(&shared);
        // An empty `id:` resets the last event id (SSE): the client then holds none.
        c.events
            .iter()
            .rev()
            .find_map(|r| r.event_id.clone())
            .filter(|id| !id.is_empty())
    }
}

/// Items of a connection, for wait conditions.
pub fn count(conn: &Connection, mut pred: impl FnMut(&Item) -> bool) -> usize {
    conn.events.iter().filter(|r| pred(&r.item)).count()
}

fn label_of(i: usize) -> String {
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    if i < letters.len() {
        (letters[i] as char).to_string()
    } else {
        format!("C{i}")
    }
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
