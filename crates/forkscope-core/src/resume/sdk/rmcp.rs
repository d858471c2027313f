//! The Rust SDK, rmcp 3.11.0: `StreamableHttpService` with its default `LocalSessionManager`
//! and `StreamableHttpServerConfig`, under axum (`interop/rmcp`). No event store: a stream is
//! resumed from the session's own cache of its last 16 events.

use super::{
    Answer, Cite, HeadLimit, HttpQuirks, Quirks, ReplayFrom, ReplayOrder, SecondGet, Unreadable,
    WhileAttached,
};
use crate::ids::IdScheme;
use crate::policy::Policy;

pub(super) const RMCP: Quirks = Quirks {
    policy: Policy::Rmcp,
    sdk: "rmcp 3.11.0 (Rust), LocalSessionManager default",
    summary: "a resume replays the cursor's own event again; a call's cache goes with its result; \
              a resume that fails, or lands while the old connection is open, is an empty 200",
    cites: &[
        Cite {
            // `CachedTx::sync` skips `index - front.index` events: the cursor's own is resent.
            quirk: "replay starts at the cursor's event, not after it (a duplicate)",
            url: "https://github.com/modelcontextprotocol/rust-sdk/issues/791",
        },
        Cite {
            quirk: "a failed resume answered 200 with an empty stream",
            url: "https://github.com/modelcontextprotocol/rust-sdk/issues/958",
        },
        Cite {
            quirk: "a resume while the old stream is attached gets a keep-alive-only shadow",
            url: "https://github.com/modelcontextprotocol/rust-sdk/pull/660",
        },
        Cite {
            quirk: "no Origin check by default (allowed_origins empty)",
            url: "https://github.com/modelcontextprotocol/rust-sdk/issues/822",
        },
        Cite {
            quirk: "request sizes bounded, Last-Event-ID not (a 64 KiB cursor is read)",
            url: "https://github.com/modelcontextprotocol/rust-sdk/pull/970",
        },
    ],
    ids: IdScheme::Indexed,
    keeps: Some(16),
    replay: ReplayFrom::Including,
    order: ReplayOrder::Emitted,
    standalone_resumable: true,
    finished_calls_resumable: false,
    while_attached: WhileAttached::Shadow,
    second_get: SecondGet::Replaces,
    unknown_cursor: Answer::EMPTY,
    unreadable_cursor: Unreadable::Absent,
    cursor_without_store: None,
    http: HttpQuirks {
        checks_origin: false,
        unsupported_version: 400,
        head: HeadLimit::Unbounded,
    },
};
