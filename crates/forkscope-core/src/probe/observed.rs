//! What the probe observed: each request it sent, how the server answered, and the events
//! each connection carried, stamped with one arrival order across connections (so "the old
//! connection received this after the new one opened" is a comparison, not a clock reading).

use serde::Serialize;

/// What one SSE event carried, as far as resumption is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Item {
    /// An event without data: a priming event, which only hands over an id to resume from.
    Priming,
    /// `notifications/progress`: the call's progress token and its count.
    Progress { token: String, n: u64 },
    /// The response to the request whose JSON-RPC id is `request` (as JSON text).
    Response { request: String },
    /// Another message that carries a counter; `channel` names its kind (the method and the
    /// text around the number), so two emitters never share one.
    Numbered { channel: String, n: u64 },
    /// A message without a counter, by its text.
    Other { text: String },
}

impl Item {
    /// Short form for evidence lines: `p7`, `#12`, `result`, `priming`.
    pub fn short(&self) -> String {
        match self {
            Item::Priming => "priming".into(),
            Item::Progress { n, .. } => format!("p{n}"),
            Item::Response { .. } => "result".into(),
            Item::Numbered { n, .. } => format!("#{n}"),
            Item::Other { .. } => "other".into(),
        }
    }
}

/// One event as a connection received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Received {
    pub item: Item,
    /// The SSE `id` field, if the event had one.
    pub event_id: Option<String>,
    /// Arrival order across every connection of a case.
    pub order: u64,
}

/// How the server answered a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answer {
    /// A `text/event-stream` body, opened at arrival order `opened`.
    Stream { status: u16, opened: u64 },
    /// A JSON body (a response, or a JSON-RPC error with a success status).
    Json { status: u16, error: Option<String> },
    /// A 4xx, with the JSON-RPC error or the body's first words if it gave any.
    Rejected { status: u16, reason: Option<String> },
    /// A 5xx, a timeout, a reset, or an answer that was neither a stream nor JSON.
    NoAnswer { why: String },
}

impl Answer {
    pub fn status(&self) -> Option<u16> {
        match self {
            Answer::Stream { status, .. }
            | Answer::Json { status, .. }
            | Answer::Rejected { status, .. } => Some(*status),
            Answer::NoAnswer { .. } => None,
        }
    }

    pub fn opened(&self) -> Option<u64> {
        match self {
            Answer::Stream { opened, .. } => Some(*opened),
            _ => None,
        }
    }
}

/// How a connection ended, as far as the probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// Still open when the case's window ended.
    Open,
    /// The probe dropped it (a client-side break, as a NAT drop looks to the client).
    DroppedByProbe,
    /// The server ended the body.
    ClosedByServer,
    /// The body broke off with an error, or went past the probe's size bound.
    Broken,
}

/// One request of a case and everything its answer carried.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// `A`, `B`, …: how the evidence names it.
    pub label: String,
    /// The request in one line: method and the headers that matter here.
    pub request: String,
    pub answer: Answer,
    pub events: Vec<Received>,
    pub end: End,
}

impl Connection {
    /// Events that are not priming events.
    pub fn carried(&self) -> impl Iterator<Item = &Received> {
        self.events.iter().filter(|r| r.item != Item::Priming)
    }
}

/// A logical stream the probe can recognise by its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamOf {
    /// A tool call: its progress token, its JSON-RPC id (as JSON text), and how many progress
    /// notifications a complete run sends, if the probe knows.
    Call {
        token: String,
        request: String,
        steps: Option<u64>,
    },
    /// Numbered notifications of one channel (the standalone stream's source), and the last
    /// number a complete run reaches, if the probe knows.
    Channel { channel: String, last: Option<u64> },
}

impl StreamOf {
    /// This connection carried the stream's last event: the call's result, or the last
    /// numbered event of a channel whose end is known.
    pub fn ended_in(&self, conn: &Connection) -> bool {
        conn.carried().any(|r| {
            self.owns(&r.item)
                && match (&r.item, self) {
                    (Item::Response { .. }, _) => true,
                    (
                        Item::Numbered { n, .. },
                        StreamOf::Channel {
                            last: Some(last), ..
                        },
                    ) => n >= last,
                    _ => false,
                }
        })
    }

    pub fn owns(&self, item: &Item) -> bool {
        match (self, item) {
            (StreamOf::Call { token, .. }, Item::Progress { token: t, .. }) => t == token,
            (StreamOf::Call { request, .. }, Item::Response { request: r }) => r == request,
            (StreamOf::Channel { channel, .. }, Item::Numbered { channel: c, .. }) => c == channel,
            _ => false,
        }
    }
}
