//! Header names: the MCP transport's, and forkscope's extensions for stream identity.

pub const SESSION_ID: &str = "mcp-session-id";
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub const LAST_EVENT_ID: &str = "last-event-id";
/// 2026-07-28: the body's method, mirrored for intermediaries.
pub const MCP_METHOD: &str = "mcp-method";
/// 2026-07-28: a `tools/call`'s tool name (or a resource's URI), mirrored.
pub const MCP_NAME: &str = "mcp-name";
/// Extension: the resumption token naming one stream (request: to resume; response: issued).
pub const RESUMPTION_TOKEN: &str = "mcp-resumption-token";
/// Extension: the identity echo of a stream response.
pub const STREAM_ID: &str = "mcp-stream-id";
/// Extension: `true` on a resumed stream, `false` on a stream flagged new.
pub const STREAM_RESUMED: &str = "mcp-stream-resumed";
/// Which replica answered (a lab extension header, like the two above; clients ignore it).
pub const SERVED_BY: &str = "mcp-served-by";

/// The revision forkscope models, and the older ones it still accepts.
pub const MODELLED_REVISION: &str = forkscope_core::revision::LEGACY;
pub const SUPPORTED_REVISIONS: [&str; 3] = forkscope_core::revision::LEGACY_ACCEPTED;
