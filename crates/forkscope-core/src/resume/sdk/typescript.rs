//! The TypeScript SDK, `@modelcontextprotocol/sdk` 1.32.2: `StreamableHTTPServerTransport`, a
//! session per transport, each with the `InMemoryEventStore` the SDK ships in
//! `examples/shared` (`interop/typescript/probe_server.mjs`).

use super::{
    Answer, Cite, HeadLimit, HttpQuirks, Quirks, ReplayFrom, ReplayOrder, SecondGet, Unreadable,
    WhileAttached,
};
use crate::ids::IdScheme;
use crate::policy::Policy;

pub(super) const TS_SDK: Quirks = Quirks {
    policy: Policy::TsSdk,
    sdk: "@modelcontextprotocol/sdk 1.32.2 (TypeScript), its InMemoryEventStore",
    summary: "the standalone stream cannot be resumed (a silent 200, held open), and a replay comes in the \
              order its ids sort, not the order events were sent",
    cites: &[
        Cite {
            // Ids are `<streamId>_<ms>_<random>`; the standalone stream's id is `_GET_stream`,
            // so `split('_')[0]` reads its stream as "" and the replay finds nothing.
            quirk: "the `_GET_stream_` id split: standalone resumes replay nothing",
            url: "https://github.com/modelcontextprotocol/typescript-sdk/issues/943",
        },
        Cite {
            quirk: "the same split, on main and v1.x (notifications silently dropped)",
            url: "https://github.com/modelcontextprotocol/typescript-sdk/issues/2560",
        },
        Cite {
            // `sort((a, b) => a[0].localeCompare(b[0]))`: ids of one millisecond sort by
            // their random suffix.
            quirk: "replay ordered by id: one millisecond's events out of order, again, or never",
            url: "https://github.com/modelcontextprotocol/typescript-sdk/pull/1978",
        },
        Cite {
            quirk: "DNS-rebinding protection off by default (no Origin check)",
            url: "https://github.com/modelcontextprotocol/typescript-sdk/pull/2676",
        },
        Cite {
            quirk: "unknown cursors: the spec does not say what to answer (an empty 200 here)",
            url: "https://github.com/modelcontextprotocol/modelcontextprotocol/issues/1939",
        },
    ],
    ids: IdScheme::Timestamped,
    keeps: None,
    replay: ReplayFrom::After,
    order: ReplayOrder::ById,
    standalone_resumable: false,
    finished_calls_resumable: true,
    // A reconnect re-registers the stream id and cleans up its predecessor.
    while_attached: WhileAttached::Replaces,
    second_get: SecondGet::Conflict,
    // `replayEventsAfter` returns "" and the transport registers the response under that id,
    // kept alive and never written to.
    unknown_cursor: Answer::HELD_OPEN,
    unreadable_cursor: Unreadable::Unknown,
    cursor_without_store: None,
    http: HttpQuirks {
        checks_origin: false,
        unsupported_version: 400,
        // Node's own 16 KiB limit on a request head.
        head: HeadLimit::Refused {
            bytes: 16 * 1024,
            status: 431,
        },
    },
};
