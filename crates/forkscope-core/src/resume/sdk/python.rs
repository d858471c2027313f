//! The Python SDK, `mcp` 2.3.0: `StreamableHTTPSessionManager` under uvicorn
//! (`interop/python/probe_server.py`), without an event store and with one written as the
//! SDK's examples write theirs (uuid ids, 100 events kept per stream).

use super::{
    Answer, Cite, HeadLimit, HttpQuirks, Quirks, ReplayFrom, ReplayOrder, SecondGet, Unreadable,
    WhileAttached,
};
use crate::ids::IdScheme;
use crate::policy::Policy;

/// uvicorn (h11) refuses a request head past 16 KiB with a plain 400; a foreign `Origin` is
/// refused; an unsupported protocol version gets 405, not the 400 the transport asks for.
const UVICORN: HttpQuirks = HttpQuirks {
    checks_origin: true,
    unsupported_version: 405,
    head: HeadLimit::Refused {
        bytes: 16 * 1024,
        status: 400,
    },
};

const VERSION_STATUS: Cite = Cite {
    quirk: "status codes that are not the transport's (405 where 400 is asked, and back)",
    url: "https://github.com/modelcontextprotocol/python-sdk/issues/3102",
};

pub(super) const PYTHON_SDK: Quirks = Quirks {
    policy: Policy::PythonSdk,
    sdk: "mcp 2.3.0 (Python), no event store",
    summary: "no event has an id, so nothing can be resumed: a reconnect is a plain GET and what \
              was sent meanwhile is gone; a Last-Event-ID is answered 500",
    cites: &[
        Cite {
            quirk: "resumability only with an event store (none by default)",
            url: "https://github.com/modelcontextprotocol/python-sdk/pull/587",
        },
        VERSION_STATUS,
    ],
    ids: IdScheme::Unnumbered,
    keeps: Some(0),
    replay: ReplayFrom::After,
    order: ReplayOrder::Emitted,
    standalone_resumable: false,
    finished_calls_resumable: false,
    while_attached: WhileAttached::Shadow,
    second_get: SecondGet::Conflict,
    unknown_cursor: Answer::EMPTY,
    unreadable_cursor: Unreadable::Unknown,
    cursor_without_store: Some(Answer {
        status: 500,
        message: "Internal Server Error",
        held_open: false,
    }),
    http: UVICORN,
};

pub(super) const PYTHON_SDK_STORE: Quirks = Quirks {
    policy: Policy::PythonSdkStore,
    sdk: "mcp 2.3.0 (Python), in-memory event store as in its examples (100 events per stream)",
    summary: "an unknown or forgotten cursor gets an empty 200, and a resume while the old \
              connection still holds the stream replays, then ends",
    cites: &[
        Cite {
            // `_replay_events`: when the stream id is still registered, the replay is sent and
            // the response ends; the old connection keeps the live tail.
            quirk: "replay, then close, while the stream is still registered; the replay→live \
                    handoff can lose an event",
            url: "https://github.com/modelcontextprotocol/python-sdk/pull/3541",
        },
        Cite {
            quirk: "unknown cursors: the spec does not say what to answer (an empty 200 here)",
            url: "https://github.com/modelcontextprotocol/modelcontextprotocol/issues/1939",
        },
        VERSION_STATUS,
    ],
    ids: IdScheme::Uuid,
    keeps: Some(100),
    replay: ReplayFrom::After,
    order: ReplayOrder::Emitted,
    standalone_resumable: true,
    finished_calls_resumable: true,
    while_attached: WhileAttached::ReplayThenClose,
    second_get: SecondGet::Conflict,
    unknown_cursor: Answer::EMPTY,
    unreadable_cursor: Unreadable::Unknown,
    cursor_without_store: None,
    http: UVICORN,
};
