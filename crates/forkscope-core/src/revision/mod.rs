//! Which protocol revision a request speaks, and what the 2026-07-28 transport refuses.
//!
//! One endpoint serves both eras (S/basic/versioning.mdx, "Backward Compatibility"): a request
//! whose body carries the per-request `_meta` version, or whose `MCP-Protocol-Version` header
//! names the modern revision, is served statelessly under 2026-07-28; anything else is a
//! legacy (2025-11-25) request, which opens or continues a session with its fenced resumption.
//! `--protocol` narrows the endpoint to one era.
//!
//! The modern rules checked here, in the spec's order: the version header is present and
//! equals the body's `_meta` version (else `400 HeaderMismatch`, −32020); the version is one
//! this server serves (else `400 UnsupportedProtocolVersion`, −32022, listing the ones it
//! does); the required `_meta` fields are there (else `400`, −32602); `Mcp-Method` and, for
//! `tools/call`, `Mcp-Name` mirror the body (else −32020); the method exists (else `404`,
//! −32601). GET and DELETE are not part of the modern transport: `405` (streamable-http.mdx,
//! "Earlier Streamable HTTP Revisions").

#[cfg(test)]
mod tests;

use base64::Engine;
use std::fmt;
use std::str::FromStr;

/// The legacy revision forkscope models: sessions, a GET stream, `Last-Event-ID` resumption.
pub const LEGACY: &str = "2025-11-25";
/// The modern revision: no sessions, no GET stream, no resumption.
pub const MODERN: &str = "2026-07-28";
/// Legacy revisions an `initialize` may still settle on, the modelled one first.
pub const LEGACY_ACCEPTED: [&str; 3] = [LEGACY, "2025-06-18", "2025-03-26"];

/// The `_meta` keys every modern request carries (S/basic/index.mdx, "Per-request protocol
/// fields").
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Which eras an endpoint serves (`--protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocols {
    /// 2025-11-25 only: every request is a legacy one.
    Legacy,
    /// 2026-07-28 only: `initialize`, GET and DELETE are refused.
    Modern,
    /// Both, chosen per request by how the client opens.
    #[default]
    Both,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol {0:?}: expected {LEGACY}, {MODERN} or both")]
pub struct UnknownProtocols(pub String);

impl Protocols {
    pub const ALL: [Protocols; 3] = [Protocols::Legacy, Protocols::Modern, Protocols::Both];

    pub fn name(self) -> &'static str {
        match self {
            Protocols::Legacy => LEGACY,
            Protocols::Modern => MODERN,
            Protocols::Both => "both",
        }
    }

    pub fn serves_legacy(self) -> bool {
        self != Protocols::Modern
    }

    pub fn serves_modern(self) -> bool {
        self != Protocols::Legacy
    }

    /// What an endpoint offers of `self` when its server speaks 2026-07-28 or not (an SDK
    /// policy's `tasks::sdk::ModernQuirks::speaks`): without it, 2025-11-25 alone.
    pub fn spoken(self, speaks_modern: bool) -> Protocols {
        if speaks_modern {
            self
        } else {
            Protocols::Legacy
        }
    }

    /// What an `UnsupportedProtocolVersion` error lists, newest first.
    pub fn supported(self) -> Vec<&'static str> {
        let mut versions = Vec::new();
        if self.serves_modern() {
            versions.push(MODERN);
        }
        if self.serves_legacy() {
            versions.extend(LEGACY_ACCEPTED);
        }
        versions
    }
}

impl fmt::Display for Protocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Protocols {
    type Err = UnknownProtocols;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Protocols::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownProtocols(s.to_owned()))
    }
}

/// What a POST says about its era: the headers and the body fields the rules read.
#[derive(Clone, Copy, Debug, Default)]
pub struct PostHead<'a> {
    /// `MCP-Protocol-Version`.
    pub header_version: Option<&'a str>,
    /// `Mcp-Method`.
    pub header_method: Option<&'a str>,
    /// `Mcp-Name`, as sent (possibly in the `=?base64?…?=` form).
    pub header_name: Option<&'a str>,
    pub method: Option<&'a str>,
    /// The message has an id: a request, not a notification.
    pub is_request: bool,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`.
    pub meta_version: Option<&'a str>,
    /// `params._meta["io.modelcontextprotocol/clientCapabilities"]` is an object.
    pub has_capabilities: bool,
    /// `params.name` (or `params.uri`, or a task method's `params.taskId`): what `Mcp-Name`
    /// mirrors.
    pub name: Option<&'a str>,
    /// `initialize`'s `params.protocolVersion`.
    pub initialize_version: Option<&'a str>,
    /// A header of the three above sent more than once with different values, by name: a
    /// server that checks the first and a balancer that routes on the last would each read a
    /// different request.
    pub conflicting: Option<&'a str>,
}

/// The era a POST is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25: the session rules decide the rest.
    Legacy,
    /// 2026-07-28, stateless: what the request asks for.
    Modern(ModernRequest),
}

/// A modern request this server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModernRequest {
    /// `server/discover`: versions, capabilities, identity.
    Discover,
    ListTools,
    /// `tools/call`: its response stream is the request's; closing it cancels the call.
    CallTool,
    /// A notification: accepted (202) and nothing more, as the transport says.
    Notification,
    /// The tasks extension's methods ([EXT]): `Mcp-Name` carries the task id.
    GetTask,
    UpdateTask,
    CancelTask,
    /// `subscriptions/listen`: a long-lived stream of the notifications asked for (here, the
    /// tasks extension's `notifications/tasks`); closing it ends the subscription.
    Listen,
}

/// Why a request is refused under the era rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `400`, −32020: a required header is missing or does not mirror the body.
    HeaderMismatch(String),
    /// `400`, −32022: the version is not one this endpoint serves.
    Unsupported {
        requested: String,
        supported: Vec<&'static str>,
        why: &'static str,
    },
    /// `400`, −32602: a required `_meta` field is missing.
    MissingMeta(&'static str),
    /// `404`, −32601.
    MethodNotFound(String),
    /// `405`: GET and DELETE belong to the legacy transport.
    MethodNotAllowed(&'static str),
}

/// JSON-RPC codes the modern revision defines (S/basic/index.mdx, "Error Codes").
pub const HEADER_MISMATCH: i64 = -32020;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::MethodNotFound(_) => 404,
            Refusal::MethodNotAllowed(_) => 405,
            _ => 400,
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            Refusal::HeaderMismatch(_) => HEADER_MISMATCH,
            Refusal::Unsupported { .. } => UNSUPPORTED_PROTOCOL_VERSION,
            Refusal::MissingMeta(_) => -32602,
            Refusal::MethodNotFound(_) => -32601,
            Refusal::MethodNotAllowed(_) => -32600,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::HeaderMismatch(why) => write!(f, "Header mismatch: {why}"),
            Refusal::Unsupported { why, .. } => write!(f, "Unsupported protocol version: {why}"),
            Refusal::MissingMeta(key) => {
                write!(f, "Invalid params: _meta must carry {key} on every request")
            }
            Refusal::MethodNotFound(method) => write!(f, "Method not found: {method}"),
            Refusal::MethodNotAllowed(why) => f.write_str(why),
        }
    }
}

/// The era of a POST, or why it is refused.
pub fn classify_post(served: Protocols, head: &PostHead<'_>) -> Result<Era, Refusal> {
    if let Some(name) = head.conflicting {
        return Err(Refusal::HeaderMismatch(format!(
            "the {name} header is sent more than once, with different values"
        )));
    }
    let modern = head.meta_version.is_some() || head.header_version == Some(MODERN);
    if !modern {
        return legacy(served, head);
    }
    let Some(header) = head.header_version else {
        return Err(Refusal::HeaderMismatch(format!(
            "the MCP-Protocol-Version header is missing; the body's _meta says {}",
            head.meta_version.unwrap_or_default()
        )));
    };
    let Some(version) = head.meta_version else {
        return Err(Refusal::MissingMeta(META_VERSION));
    };
    if header != version {
        return Err(Refusal::HeaderMismatch(format!(
            "MCP-Protocol-Version header value '{header}' does not match body value '{version}'"
        )));
    }
    if version != MODERN || !served.serves_modern() {
        let why = if LEGACY_ACCEPTED.contains(&version) && served.serves_legacy() {
            "a legacy revision is negotiated by initialize, not per request"
        } else {
            "this server does not serve it"
        };
        return Err(Refusal::Unsupported {
            requested: version.to_owned(),
            supported: served.supported(),
            why,
        });
    }
    if !head.has_capabilities {
        return Err(Refusal::MissingMeta(META_CAPABILITIES));
    }
    let Some(method) = head.method else {
        return Err(Refusal::HeaderMismatch("the body has no method".to_owned()));
    };
    match head.header_method {
        None => {
            return Err(Refusal::HeaderMismatch(
                "the Mcp-Method header is missing".to_owned(),
            ));
        }
        Some(said) if said != method => {
            return Err(Refusal::HeaderMismatch(format!(
                "Mcp-Method header value '{said}' does not match body value '{method}'"
            )));
        }
        Some(_) => {}
    }
    if !head.is_request {
        return Ok(Era::Modern(ModernRequest::Notification));
    }
    if names_its_target(method) {
        check_name(head.header_name, head.name)?;
    }
    match method {
        "server/discover" => Ok(Era::Modern(ModernRequest::Discover)),
        "tools/list" => Ok(Era::Modern(ModernRequest::ListTools)),
        "tools/call" => Ok(Era::Modern(ModernRequest::CallTool)),
        "tasks/get" => Ok(Era::Modern(ModernRequest::GetTask)),
        "tasks/update" => Ok(Era::Modern(ModernRequest::UpdateTask)),
        "tasks/cancel" => Ok(Era::Modern(ModernRequest::CancelTask)),
        "subscriptions/listen" => Ok(Era::Modern(ModernRequest::Listen)),
        other => Err(Refusal::MethodNotFound(other.to_owned())),
    }
}

/// A request without the modern `_meta`: the legacy rules take it, where they are served.
fn legacy(served: Protocols, head: &PostHead<'_>) -> Result<Era, Refusal> {
    if served.serves_legacy() {
        return Ok(Era::Legacy);
    }
    let supported = served.supported();
    if head.method == Some("initialize") {
        // A legacy client has no way forward: the error names what is served.
        return Err(Refusal::Unsupported {
            requested: head.initialize_version.unwrap_or(LEGACY).to_owned(),
            supported,
            why: "this server speaks only 2026-07-28, which has no initialize",
        });
    }
    match head.header_version {
        None => Err(Refusal::HeaderMismatch(
            "the MCP-Protocol-Version header is missing".to_owned(),
        )),
        Some(requested) => Err(Refusal::Unsupported {
            requested: requested.to_owned(),
            supported,
            why: "this server does not serve it",
        }),
    }
}

/// The methods whose target `Mcp-Name` mirrors (streamable-http.mdx, "Standard Request
/// Headers"), and the tasks extension's, whose `Mcp-Name` is the task id ([EXT], "Routing
/// Headers").
fn names_its_target(method: &str) -> bool {
    matches!(
        method,
        "tools/call"
            | "resources/read"
            | "prompts/get"
            | "tasks/get"
            | "tasks/update"
            | "tasks/cancel"
    )
}

fn check_name(header: Option<&str>, body: Option<&str>) -> Result<(), Refusal> {
    let Some(header) = header else {
        return Err(Refusal::HeaderMismatch(
            "the Mcp-Name header is missing".to_owned(),
        ));
    };
    let decoded = decode_header_value(header).ok_or_else(|| {
        Refusal::HeaderMismatch(format!(
            "Mcp-Name header value '{header}' is not valid base64 UTF-8"
        ))
    })?;
    let body = body.unwrap_or_default();
    if decoded != body {
        return Err(Refusal::HeaderMismatch(format!(
            "Mcp-Name header value '{decoded}' does not match body value '{body}'"
        )));
    }
    Ok(())
}

/// A mirrored header's value: plain, or `=?base64?…?=` (streamable-http.mdx, "Value
/// Encoding"). `None`: the encoded form does not decode to UTF-8.
pub fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// GET and DELETE: served under the legacy rules, or refused with 405. In a dual-era endpoint
/// the version header says which era the client speaks.
pub fn classify_get_or_delete(
    served: Protocols,
    header_version: Option<&str>,
) -> Result<(), Refusal> {
    let modern = match served {
        Protocols::Modern => true,
        Protocols::Both => header_version == Some(MODERN),
        // The legacy rules refuse a version they do not speak.
        Protocols::Legacy => false,
    };
    if modern {
        return Err(Refusal::MethodNotAllowed(
            "2026-07-28 has no GET stream and no sessions: every message is a POST (use subscriptions/listen for change notifications)",
        ));
    }
    Ok(())
}
