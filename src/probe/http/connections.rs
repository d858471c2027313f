//! The connections of one case: each request's answer, and each stream read in the background
//! into one arrival order across the case, so a case can hold several at once and wait on what
//! they received.

use super::target::{Session, Target};
use super::{error_chain, read_bounded, reason_of, shorten};
use crate::probe::items::item_of;
use crate::wire::mcp::{
    self, Call, Headers, ProgressToken, Request, RequestId, RpcError, ToolCall,
};
use crate::wire::sse::Parser;
use forkscope_core::probe::{Answer, Connection, End, Item, Received};
use futures_util::StreamExt;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};

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
        let sid = extra.session_id.as_deref().unwrap_or(&session.id);
        let version = extra
            .protocol_version
            .as_deref()
            .unwrap_or(&session.version);
        let headers = Headers {
            last_event_id: extra.last_event_id.as_deref(),
            origin: extra.origin.as_deref(),
            ..Headers::session(sid, version)
        };
        let mut line = String::from("GET");
        if let Some(id) = &extra.last_event_id {
            if mcp::sendable(id) {
                line.push_str(&format!(
                    " Last-Event-ID: {}",
                    shorten(&String::from_utf8_lossy(id))
                ));
            } else {
                line.push_str(" (Last-Event-ID not sendable)");
            }
        }
        if extra.session_id.is_some() {
            line.push_str(&format!(" Mcp-Session-Id: {}", shorten(sid)));
        }
        if let Some(v) = &extra.protocol_version {
            line.push_str(&format!(" MCP-Protocol-Version: {v}"));
        }
        if let Some(origin) = &extra.origin {
            line.push_str(&format!(" Origin: {origin}"));
        }
        self.open(line, self.target.endpoint.get_stream(headers))
            .await
    }

    /// A plain GET on the session carrying `bytes` of padding in a header of no meaning
    /// (`X-Forkscope-Padding`): what the HTTP layer does with a head that large, whatever the
    /// server would do with a cursor.
    pub async fn get_padded(&self, session: &Session, bytes: usize) -> Conn {
        let req = self
            .target
            .endpoint
            .get_stream(Headers::session(&session.id, &session.version))
            .header("x-forkscope-padding", "9".repeat(bytes));
        self.open(format!("GET X-Forkscope-Padding: ({bytes} bytes)"), req)
            .await
    }

    /// `tools/call` with a progress token: the call's own stream.
    pub async fn call(
        &self,
        session: &Session,
        request: RequestId,
        tool: &str,
        args: &Value,
        token: &str,
    ) -> Conn {
        let call = ToolCall::with_progress(tool, args.clone(), ProgressToken::Text(token.into()));
        let body = Request::new(request, Call::ToolsCall(call));
        let req = self.target.endpoint.post(session.headers(), &body);
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
        if !((200..300).contains(&status) && mcp::response::is_event_stream(resp.headers())) {
            let body = read_bounded(resp, bounds.json_bytes, bounds.answer).await;
            let reason = reason_of(&body);
            let answer = match status {
                200..=299 => Answer::Json {
                    status,
                    error: RpcError::of_body(&body).map(|e| e.to_string()),
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
                            // Dropped: what arrives after is not the client's (its cursor was
                            // taken at the drop), however the abort races this task.
                            if conn.end != End::Open {
                                return;
                            }
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
            {
                let mut conn = lock(&shared);
                if conn.end == End::Open {
                    conn.end = end;
                }
            }
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
