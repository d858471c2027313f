//! The decision boundary of the seed: what the server does with a reconnect.
//!
//! A GET on a session either resumes an identified stream from `Last-Event-ID` (exclusive),
//! rejects with a typed reason, or starts a new stream. Each policy has its own file:
//! [`fenced`] proves identity and gap-freedom or refuses; [`naive`] reproduces the incident;
//! [`sdk`] answers as an official SDK's server does, from a table per SDK.
//! Both only *decide*; [`crate::server::Server::handle_get`] carries the decision out.

pub mod fenced;
pub mod naive;
mod rejected;
pub mod sdk;

pub use crate::vocabulary::{ClientAction, IdentityProof, RejectReason};
pub use rejected::ResumeRejected;
pub(crate) use rejected::shown;

use crate::ids::{ConnectionId, IdScheme, ResumptionToken, SessionId, StreamId};

/// A GET on `/mcp` as the adapter parsed it: the reconnect the core rules on.
#[derive(Clone, Copy, Debug)]
pub struct ResumeRequest<'a> {
    pub session: SessionId,
    /// The resumption-token extension header, if the client sent one.
    pub token: Option<&'a str>,
    /// The `Last-Event-ID` header, if the client sent one.
    pub last_event_id: Option<&'a str>,
    /// The connection the answer will be written on.
    pub connection: ConnectionId,
}

/// The stream-identity echo a response carries (`Mcp-Stream-Id`, `Mcp-Stream-Resumed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamEcho {
    pub stream: StreamId,
    pub resumed: bool,
}

/// What the server decided, for the adapter to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeDecision {
    /// (a) Continue `stream`: replay the events after `after` (exclusive), then the live tail.
    Resume(Resumed),
    /// (b) Refuse, with a reason that says what the client should do.
    Reject(ResumeRejected),
    /// (c) A new stream; `echo` is `Some` with `resumed: false` when it is flagged as new.
    NewStream(NewStream),
    /// (d) An SDK policy's answer instead of a stream: a status and a sentence, or (200) an
    /// event stream with nothing in it, closed at once. Nothing changes.
    Answered(sdk::Answer),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    pub stream: StreamId,
    /// The cursor's sequence; replay starts after it.
    pub after: u64,
    /// How many buffered events the replay carries.
    pub replay_len: usize,
    /// The stream's previous connection, detached atomically with this resume: nothing more
    /// may be written to it. `None` under the naive policy even when one was attached.
    pub detached: Option<ConnectionId>,
    pub echo: Option<StreamEcho>,
    pub ids: IdScheme,
    /// Other streams of the session fenced by this resume (condition 2).
    pub fenced: Vec<StreamId>,
    /// The stream already finished (a tool call whose result was sent): the connection ends
    /// after the replay.
    pub finished: bool,
    /// The replay is chosen and ordered by how the ids sort, not by position (an SDK's store).
    pub by_id: bool,
    /// The connection ends after the replay: another connection keeps the stream (an SDK).
    pub then_close: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewStream {
    pub stream: StreamId,
    pub token: ResumptionToken,
    /// `None` under the naive policy: nothing tells the client this is not a continuation.
    pub echo: Option<StreamEcho>,
    pub ids: IdScheme,
    /// Events the new stream starts with (the naive policy copies the session's backlog); the
    /// adapter replays them from index 0.
    pub replay_len: usize,
    /// A stream this request orphaned: it stays live until its grace deadline.
    pub orphaned: Option<StreamId>,
    /// Streams fenced so that this one is the only live one.
    pub fenced: Vec<StreamId>,
}

/// The token header as the server resolved it, before any policy looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenLookup {
    Absent,
    /// Malformed, or well-formed but naming nothing.
    Unknown,
    OtherSession,
    Found(StreamId),
}

/// What a policy decided, before the server carries it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    Resume {
        stream: StreamId,
        after: u64,
        fence: Vec<StreamId>,
        proof: IdentityProof,
        quirked: Quirked,
    },
    /// An SDK's answer instead of a stream: changes nothing.
    Answer(sdk::Answer),
    /// A rejection changes nothing: no stream, timer or counter moves.
    Reject(ResumeRejected),
    Mint {
        flagged_new: bool,
        /// Copy this stream's buffered events into the new stream (naive).
        backlog_from: Option<StreamId>,
        orphan: Option<StreamId>,
        fence: Vec<StreamId>,
        ids: IdScheme,
    },
}

/// How an SDK policy's resume differs from the fence's; all `false` under fenced and naive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Quirked {
    /// See [`Resumed::by_id`].
    pub by_id: bool,
    /// See [`Resumed::then_close`].
    pub then_close: bool,
    /// The stream's previous connection is closed: this one takes its place.
    pub replaces: bool,
}

impl Plan {
    pub(crate) fn reject(rejected: ResumeRejected) -> Plan {
        Plan::Reject(rejected)
    }
}
