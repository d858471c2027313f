//! The explorer's alphabet: every client, server, network and timer step, as the [`Sim`] takes
//! it. Each maps onto a scenario step, so a counterexample replays over real sockets.

use crate::ids::ConnectionId;
use crate::sim::Sim;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One step of the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The session's background task emits its next event (a late emit when its stream was
    /// fenced).
    EmitBackground,
    /// The oldest event in flight on the standalone stream reaches the client.
    Deliver,
    /// The client calls `progress_task`; the tool then takes its steps on its own timer.
    CallTool,
    /// The oldest event in flight on a tool call's stream reaches the client.
    DeliverCall,
    /// A NAT drop: the client loses the connection and what was in flight; the server is not
    /// told (half-open).
    DropConnection,
    /// Both sides see the connection close: the server starts the stream's grace window.
    Reset,
    /// The server side of a dropped connection times out at last: the server sees it close.
    ExpireHalfOpen,
    /// The client's next reconnect omits the token header.
    StripToken,
    /// The client reconnects now (skipping the rest of its backoff) with what it holds: its
    /// cursor, and its token unless stripped. Every cursor it can hold is reached this way: it
    /// holds the one of the last event it received.
    Reconnect,
    /// Lab time runs to the next timer: a grace window or retention ends, a backoff elapses
    /// (the client reconnects or resumes a call on its own), the tool takes its next step, a
    /// session idles out.
    Advance,
    /// A GET from someone else, on its own connection.
    Probe(ProbeGet),
}

/// The foreign GETs the explorer tries: what a stale tab, a stock client or a stranger sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeGet {
    /// The client's own token and cursor, from another connection (a stale tab).
    SameHeaders,
    /// The client's cursor alone, as a stock client sends it.
    CursorOnly,
    /// Neither token nor cursor: a request for a new stream.
    Plain,
    /// A well-formed token that names nothing, with the client's cursor.
    GarbageToken,
}

impl Step {
    /// Every step, in the order the explorer tries them.
    pub const ALL: [Step; 14] = [
        Step::EmitBackground,
        Step::Deliver,
        Step::CallTool,
        Step::DeliverCall,
        Step::DropConnection,
        Step::Reset,
        Step::ExpireHalfOpen,
        Step::StripToken,
        Step::Reconnect,
        Step::Advance,
        Step::Probe(ProbeGet::SameHeaders),
        Step::Probe(ProbeGet::CursorOnly),
        Step::Probe(ProbeGet::Plain),
        Step::Probe(ProbeGet::GarbageToken),
    ];

    /// Whether the step can change anything in this state (a disabled one is not tried).
    pub fn enabled(self, sim: &Sim) -> bool {
        match self {
            Step::EmitBackground => sim.session().is_some(),
            Step::Deliver => sim.in_flight() > 0,
            Step::CallTool => sim.session().is_some() && !sim.call_in_progress(),
            Step::DeliverCall => sim.call_in_flight() > 0,
            Step::DropConnection | Step::Reset => sim.any_connection(),
            Step::ExpireHalfOpen => sim.half_open(),
            Step::StripToken => sim.client().will_send_token(),
            Step::Reconnect => {
                matches!(
                    sim.client().phase(),
                    crate::client::Phase::Reconnecting { .. }
                )
            }
            Step::Advance => sim.next_deadline().is_some(),
            Step::Probe(_) => sim.session().is_some(),
        }
    }

    /// Takes the step.
    pub fn apply(self, sim: &mut Sim) {
        match self {
            Step::EmitBackground => sim.emit_background(),
            Step::Deliver => {
                sim.deliver(1);
            }
            Step::CallTool => {
                sim.call_tool();
            }
            Step::DeliverCall => {
                sim.deliver_call();
            }
            Step::DropConnection => sim.drop_connection(),
            Step::Reset => sim.reset(),
            Step::ExpireHalfOpen => sim.expire_half_open(),
            Step::StripToken => sim.strip_token(),
            Step::Reconnect => {
                sim.reconnect(true);
            }
            Step::Advance => {
                if let Some(at) = sim.next_deadline() {
                    sim.advance(at.since(sim.now()));
                }
            }
            Step::Probe(probe) => {
                let token = sim.client().token().map(str::to_owned);
                let cursor = sim.client().cursor().map(str::to_owned);
                let (token, cursor) = match probe {
                    ProbeGet::SameHeaders => (token, cursor),
                    ProbeGet::CursorOnly => (None, cursor),
                    ProbeGet::Plain => (None, None),
                    ProbeGet::GarbageToken => (Some(GARBAGE_TOKEN.to_owned()), cursor),
                };
                sim.probe_get(token.as_deref(), cursor.as_deref(), PROBE_CONNECTION);
            }
        }
    }
}

/// A token no stream was given.
pub const GARBAGE_TOKEN: &str = "ffffffffffffffffffffffffffffffff";
/// The connection foreign GETs arrive on: no one the explorer models reads it.
const PROBE_CONNECTION: ConnectionId = ConnectionId(u64::MAX);

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::EmitBackground => "the background task emits",
            Step::Deliver => "the next event in flight on the standalone stream reaches the client",
            Step::CallTool => "the client calls progress_task",
            Step::DeliverCall => {
                "the next event in flight on the tool call's stream reaches the client"
            }
            Step::DropConnection => {
                "NAT drop: the client loses the connection, the server is not told"
            }
            Step::Reset => "the connection resets: both sides see it close",
            Step::ExpireHalfOpen => {
                "the dropped connection's server side times out: the server sees it close"
            }
            Step::StripToken => "the client's next reconnect will omit the token header",
            Step::Reconnect => {
                "the client reconnects now, with its Last-Event-ID and its token unless stripped"
            }
            Step::Advance => "lab time runs to the next timer",
            Step::Probe(ProbeGet::SameHeaders) => {
                "a stale tab sends the client's token and Last-Event-ID"
            }
            Step::Probe(ProbeGet::CursorOnly) => "a stock client sends the Last-Event-ID alone",
            Step::Probe(ProbeGet::Plain) => "someone sends a plain GET (no token, no cursor)",
            Step::Probe(ProbeGet::GarbageToken) => {
                "someone sends a token that names nothing, with the cursor"
            }
        })
    }
}
