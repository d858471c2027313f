//! What an official SDK's server does with a reconnect, as `forkscope probe` measured it
//! (`interop/probe/*.toml`) and its source shows.
//!
//! Each SDK is a table of [`Quirks`] — plain data, one file per SDK, each quirk citing the SDK's
//! own thread — and [`decide`] reads the table: the question [`super::fenced`] answers with a
//! proof or a typed refusal, answered the way that SDK answers it. None of them fences; what
//! differs is how each loses, repeats or hides events. CI checks the table against the SDK:
//! the probe's findings against `forkscope serve --policy <sdk>` equal its findings against the
//! real server (`interop/check-probe.sh`).

mod python;
mod rmcp;
mod typescript;

use super::{Plan, Quirked};
use crate::ids::IdScheme;
use crate::policy::Policy;
use crate::state::{Session, Stream, StreamState};
use crate::vocabulary::{IdentityProof, StreamKind};

/// A `Last-Event-ID` that was not text: the adapter hands the core this in its place, so the
/// core decides what such a cursor means.
pub const UNREADABLE_CURSOR: &str = "\u{FFFD}";

/// One SDK server's resume behaviour, as data.
#[derive(Debug)]
pub struct Quirks {
    pub policy: Policy,
    /// The package and version reproduced, and how it was configured.
    pub sdk: &'static str,
    /// What goes wrong on a resume, in a sentence.
    pub summary: &'static str,
    /// The SDK's own threads on these quirks.
    pub cites: &'static [Cite],
    /// How its event ids are spelled.
    pub ids: IdScheme,
    /// How many of a stream's last events its store can find a cursor among; `None`: every
    /// event the lab keeps.
    pub keeps: Option<usize>,
    /// Whether the replay starts after the cursor's event or at it.
    pub replay: ReplayFrom,
    /// The order the replay comes in.
    pub order: ReplayOrder,
    /// Whether a cursor of the standalone stream is found at all.
    pub standalone_resumable: bool,
    /// Whether a tool call's stream can still be resumed once its result was sent.
    pub finished_calls_resumable: bool,
    /// A resume of a stream another connection still holds.
    pub while_attached: WhileAttached,
    /// A plain GET while the standalone stream is attached.
    pub second_get: SecondGet,
    /// What a cursor it cannot find (or will not resume) is answered with.
    pub unknown_cursor: Answer,
    /// What a non-text `Last-Event-ID` is taken for.
    pub unreadable_cursor: Unreadable,
    /// What a cursor is answered with when the server keeps no events at all.
    pub cursor_without_store: Option<Answer>,
    /// How its HTTP layer differs from forkscope's, before any resume rule.
    pub http: HttpQuirks,
}

/// A thread in the SDK's repository about one quirk.
#[derive(Debug)]
pub struct Cite {
    pub quirk: &'static str,
    pub url: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayFrom {
    /// The events after the cursor's (the transport's rule).
    After,
    /// The cursor's own event again, then the rest: it arrives twice.
    Including,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayOrder {
    /// As emitted.
    Emitted,
    /// As the ids sort, from the first id that sorts after the cursor's: within one
    /// millisecond ids sort at random, so events come out of order, again, or never.
    ById,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhileAttached {
    /// The new connection takes the stream; the old one is closed.
    Replaces,
    /// The replay is sent, then the new connection ends: the old one keeps the stream.
    ReplayThenClose,
    /// The new connection gets nothing (a keep-alive-only "shadow"): a 200 held open.
    Shadow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecondGet {
    /// 409 Conflict: one standalone stream per session.
    Conflict,
    /// The new connection takes the standalone stream over, with no replay.
    Replaces,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// As a cursor that names nothing.
    Unknown,
    /// As no cursor at all: a plain GET.
    Absent,
}

/// A status and a sentence the SDK answers with instead of a stream; 200 is an event stream
/// with nothing in it — the silent answer a stock client takes for success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub message: &'static str,
    /// A 200 stream kept open with keep-alives only, never fed: the client waits on it.
    pub held_open: bool,
}

impl Answer {
    /// 200, an event stream with nothing in it, ended at once: a stock client reconnects.
    pub const EMPTY: Answer = Answer {
        status: 200,
        message: "",
        held_open: false,
    };
    /// 200, an event stream kept open and never fed: a stock client waits on it for good.
    pub const HELD_OPEN: Answer = Answer {
        status: 200,
        message: "",
        held_open: true,
    };
}

/// The SDK server's HTTP layer, where it differs from forkscope's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpQuirks {
    /// Whether a foreign `Origin` is refused (DNS rebinding).
    pub checks_origin: bool,
    /// The status an unsupported `MCP-Protocol-Version` gets.
    pub unsupported_version: u16,
    /// How large a request head it reads, and what it answers past that.
    pub head: HeadLimit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadLimit {
    /// Refused with this status past this many bytes.
    Refused { bytes: usize, status: u16 },
    /// Read whole (up to the lab's own ceiling for these policies, 96 KiB).
    Unbounded,
}

/// forkscope's own HTTP layer: what `fenced` and `naive` answer.
pub const FORKSCOPE_HTTP: HttpQuirks = HttpQuirks {
    checks_origin: true,
    unsupported_version: 400,
    head: HeadLimit::Refused {
        bytes: 16 * 1024,
        status: 431,
    },
};

/// The largest request head any policy reads: what the lab's HTTP server is built with when
/// it serves a policy whose head is [`HeadLimit::Unbounded`].
pub const MAX_HEAD_BYTES: usize = 96 * 1024;

impl Quirks {
    /// Each rule of the table in words: (what, how this SDK does it).
    pub fn rules(&self) -> Vec<(&'static str, String)> {
        let answer = |a: Answer| match (a.status, a.held_open) {
            (200, true) => "200, an event stream held open and never fed".to_owned(),
            (200, false) => "200, an empty event stream, ended at once".to_owned(),
            (status, _) => format!("{status} {}", a.message),
        };
        let ids = match self.ids {
            IdScheme::Timestamped => {
                "<stream>_<ms>_<random>; the standalone stream's start `_GET_stream_`"
            }
            IdScheme::Uuid => "a uuid per event: the store alone knows its stream and place",
            IdScheme::Unnumbered => "none: events carry no id",
            IdScheme::Indexed => "<index> on the standalone stream, <index>/<request> on a call's",
            IdScheme::Keyed | IdScheme::Scoped => "stream-scoped, with the stream's key",
            IdScheme::Bare => "a bare counter per stream",
        };
        let mut rules = vec![
            ("event ids", ids.to_owned()),
            (
                "kept per stream",
                match (self.ids, self.keeps) {
                    (IdScheme::Unnumbered, _) => "nothing".to_owned(),
                    (_, Some(n)) => format!("the last {n} events"),
                    (_, None) => "every event".to_owned(),
                },
            ),
        ];
        if let Some(a) = self.cursor_without_store {
            rules.push(("any Last-Event-ID", answer(a)));
        } else {
            rules.extend([
                ("unknown cursor", answer(self.unknown_cursor)),
                (
                    "replay",
                    match (self.replay, self.order) {
                        (ReplayFrom::Including, _) => {
                            "from the cursor's own event (it arrives twice)".to_owned()
                        }
                        (_, ReplayOrder::ById) => {
                            "what sorts after the cursor's id, in id order".to_owned()
                        }
                        _ => "after the cursor, in order".to_owned(),
                    },
                ),
                (
                    "standalone stream",
                    if self.standalone_resumable {
                        "resumable".to_owned()
                    } else {
                        format!("never found: {}", answer(self.unknown_cursor))
                    },
                ),
                (
                    "finished call",
                    if self.finished_calls_resumable {
                        "resumable".to_owned()
                    } else {
                        format!("forgotten with its result: {}", answer(self.unknown_cursor))
                    },
                ),
                (
                    "resume while attached",
                    match self.while_attached {
                        WhileAttached::Replaces => "takes the stream; the old connection is closed",
                        WhileAttached::ReplayThenClose => {
                            "replay, then ended; the old one keeps it"
                        }
                        WhileAttached::Shadow => "a shadow: 200, held open, never fed",
                    }
                    .to_owned(),
                ),
            ]);
        }
        rules.extend([
            (
                "second plain GET",
                match self.second_get {
                    SecondGet::Conflict => "409 while the standalone stream is attached",
                    SecondGet::Replaces => "takes the standalone stream over",
                }
                .to_owned(),
            ),
            (
                "foreign Origin",
                if self.http.checks_origin {
                    "403"
                } else {
                    "accepted"
                }
                .to_owned(),
            ),
            (
                "unsupported version",
                self.http.unsupported_version.to_string(),
            ),
            (
                "64 KiB header",
                match self.http.head {
                    HeadLimit::Refused { bytes, status } => {
                        format!("{status} past {} KiB", bytes / 1024)
                    }
                    HeadLimit::Unbounded => "read".to_owned(),
                },
            ),
        ]);
        rules
    }
}

/// The table of an SDK policy; `None` for `fenced` and `naive`.
pub fn quirks(policy: Policy) -> Option<&'static Quirks> {
    match policy {
        Policy::Fenced | Policy::Naive => None,
        Policy::TsSdk => Some(&typescript::TS_SDK),
        Policy::PythonSdk => Some(&python::PYTHON_SDK),
        Policy::PythonSdkStore => Some(&python::PYTHON_SDK_STORE),
        Policy::Rmcp => Some(&rmcp::RMCP),
    }
}

/// The HTTP layer a policy's server has.
pub fn http(policy: Policy) -> HttpQuirks {
    quirks(policy).map_or(FORKSCOPE_HTTP, |q| q.http)
}

/// A GET on `session`, decided as the SDK would.
pub(crate) fn decide(q: &Quirks, session: &Session, last_event_id: Option<&str>) -> Plan {
    let cursor = match last_event_id {
        Some(UNREADABLE_CURSOR) if q.unreadable_cursor == Unreadable::Absent => None,
        other => other,
    };
    let Some(raw) = cursor else {
        return plain_get(q, session);
    };
    if let Some(answer) = q.cursor_without_store {
        return Plan::Answer(answer);
    }
    let Some((stream, seq)) = find(q, session, raw) else {
        return Plan::Answer(q.unknown_cursor);
    };
    let finished = matches!(stream.state(), StreamState::Finished { .. });
    let unresumable = (stream.kind() == StreamKind::Standalone && !q.standalone_resumable)
        || (finished && !q.finished_calls_resumable)
        || matches!(stream.state(), StreamState::Fenced { .. });
    if unresumable {
        return Plan::Answer(q.unknown_cursor);
    }
    let mut quirked = Quirked {
        by_id: q.order == ReplayOrder::ById,
        ..Quirked::default()
    };
    if stream.connection().is_some() && !finished {
        match q.while_attached {
            WhileAttached::Replaces => quirked.replaces = true,
            WhileAttached::ReplayThenClose => quirked.then_close = true,
            WhileAttached::Shadow => return Plan::Answer(Answer::HELD_OPEN),
        }
    }
    let after = match q.replay {
        ReplayFrom::After => seq,
        ReplayFrom::Including => seq.saturating_sub(1),
    };
    Plan::Resume {
        stream: stream.id(),
        after,
        fence: Vec::new(),
        proof: IdentityProof::Unchecked,
        quirked,
    }
}

/// A GET without a cursor: the session's one standalone stream, attached afresh with nothing
/// replayed — what was sent while nobody listened is gone — or a 409 while it is attached.
fn plain_get(q: &Quirks, session: &Session) -> Plan {
    let standalone = session
        .active()
        .and_then(|id| session.stream(id))
        .filter(|s| s.kind() == StreamKind::Standalone && s.state().accepts_emits());
    match standalone {
        Some(s) if s.connection().is_some() && q.second_get == SecondGet::Conflict => {
            Plan::Answer(Answer {
                status: 409,
                message: "Conflict: Only one SSE stream is allowed per session",
                held_open: false,
            })
        }
        Some(s) => Plan::Resume {
            stream: s.id(),
            after: s.high_water(),
            fence: Vec::new(),
            proof: IdentityProof::Unchecked,
            quirked: Quirked {
                replaces: true,
                ..Quirked::default()
            },
        },
        None => Plan::Mint {
            flagged_new: false,
            backlog_from: None,
            orphan: None,
            fence: Vec::new(),
            ids: q.ids,
        },
    }
}

/// The event a cursor names, found as the SDK's store finds it: by its exact spelling, among
/// this session's streams and the last [`Quirks::keeps`] events of each (the priming event too,
/// while nothing has been forgotten).
fn find<'s>(q: &Quirks, session: &'s Session, raw: &str) -> Option<(&'s Stream, u64)> {
    session.streams().iter().find_map(|s| {
        let keeps = q.keeps.unwrap_or(usize::MAX);
        let kept = s.buffer.iter();
        let skip = s.buffer.len().saturating_sub(keeps);
        let priming =
            (skip == 0 && s.oldest_buffered().is_none_or(|o| o <= 1)).then(|| (0, s.opened_at()));
        priming
            .into_iter()
            .chain(kept.skip(skip).map(|e| (e.id.seq, e.emitted_at)))
            .find(|(seq, at)| s.wire_id(*seq, *at) == raw)
            .map(|(seq, _)| (s, seq))
    })
}

/// Every SDK policy's table, for `--help`, the README and the tests.
pub fn all() -> impl Iterator<Item = &'static Quirks> {
    Policy::SDKS.into_iter().filter_map(quirks)
}

/// What `policy` is, in a line: the fence, the seed, or the SDK and setup an SDK policy
/// reproduces (from its table). Here, beside the tables, so `policy` names the policies and
/// imports nothing above it.
pub fn summary(policy: Policy) -> &'static str {
    match quirks(policy) {
        Some(quirks) => quirks.sdk,
        None if policy.fences() => {
            "every resume proven (stream identity, no gap) or refused with a typed reason"
        }
        None => "the seed incident: a fresh stream replayed from 0, the orphan keeps emitting",
    }
}
