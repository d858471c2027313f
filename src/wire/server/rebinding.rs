//! DNS rebinding: a page from elsewhere must not reach a local server. A rebound name resolves
//! to 127.0.0.1, so the socket cannot tell; the request's names can:
//!
//! - **`Host`** (or HTTP/2's `:authority`) names what the caller dialled. A rebinding page
//!   dials its own domain, so any name but a loopback one (`127.0.0.1`, `localhost`, `[::1]`),
//!   the address the server is bound to, or one given with `--allow-host` is refused. The port
//!   is not what tells a rebinding apart (the page dials its own name on the server's port), and
//!   a proxy or balancer on this machine dials loopback on its own port, so any port passes.
//! - **`Origin`**, when a browser sends one, must be a loopback page. Non-browser clients send
//!   none and pass.
//!
//! Two copies of either header cannot both be believed, whatever their order: 400.

use super::refusal::Refusal;
use crate::wire::Shared;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use forkscope_core::resume::sdk::{self, FORKSCOPE_HTTP, HeadLimit, HttpQuirks};
use std::net::IpAddr;
use std::sync::Arc;

/// The host names a request may dial, besides loopback's.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts {
    /// Names from `--allow-host`, lowercased, with the port when one was given.
    extra: Vec<String>,
    /// The address the server is bound to, when it is not loopback.
    bound: Option<IpAddr>,
    /// The server whose policy says how its HTTP layer differs (an SDK policy may not check
    /// `Origin`, or may read a larger head); `None` (a replica): forkscope's own rules.
    policy_of: Option<Shared>,
}

impl AllowedHosts {
    /// Loopback names, the bound address and `extra` (`NAME` for any port, `NAME:PORT` for one).
    pub fn new(bound: IpAddr, extra: impl IntoIterator<Item = String>) -> Self {
        AllowedHosts {
            extra: extra.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            bound: (!bound.is_loopback() && !bound.is_unspecified()).then_some(bound),
            policy_of: None,
        }
    }

    /// The same, for a server whose HTTP layer follows its policy's.
    pub(crate) fn following(mut self, shared: Shared) -> Self {
        self.policy_of = Some(shared);
        self
    }

    /// The HTTP layer of the policy in force; read only when a request needs it.
    fn http(&self) -> HttpQuirks {
        self.policy_of
            .as_ref()
            .map_or(FORKSCOPE_HTTP, |s| sdk::http(s.lock().server.policy()))
    }

    /// Whether `authority` (`host[:port]`, as `Host` carries it) names this server.
    pub fn admits(&self, authority: &str) -> bool {
        let authority = authority.to_ascii_lowercase();
        let Some((host, port)) = split_authority(&authority) else {
            return false;
        };
        if is_loopback_name(host) || self.bound.is_some_and(|ip| same_ip(host, ip)) {
            return true;
        }
        self.extra.iter().any(|allowed| {
            split_authority(allowed).is_some_and(|(name, pinned)| {
                name == host && pinned.is_none_or(|pinned| Some(pinned) == port)
            })
        })
    }
}

/// Checks an `--allow-host` value: `NAME`, `NAME:PORT`, `[V6]` or `[V6]:PORT`.
pub fn parse_allowed_host(value: &str) -> Result<String, InvalidHost> {
    match split_authority(&value.to_ascii_lowercase()) {
        Some((host, _))
            if host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:_".contains(c)) =>
        {
            Ok(value.to_owned())
        }
        _ => Err(InvalidHost(value.to_owned())),
    }
}

/// An `--allow-host` value that is not a host name with an optional port.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a host name with an optional port (NAME, NAME:PORT, [V6]:PORT)")]
pub struct InvalidHost(String);

pub(crate) async fn check_names(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(refusal) = judge(&allowed, request.headers(), request.uri()) {
        return refusal.into_response();
    }
    next.run(request).await
}

fn judge(
    allowed: &AllowedHosts,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> Result<(), Refusal> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => {
            return Err(Refusal::RepeatedHeader("Host"));
        }
        (Some(host), None) => host.to_str().ok().map(str::to_owned),
        // HTTP/2 carries the name in `:authority`, which hyper puts in the URI.
        (None, _) => uri.authority().map(|a| a.as_str().to_owned()),
    };
    match host {
        None => {
            return Err(Refusal::NoHost);
        }
        Some(host) if !allowed.admits(&host) => {
            tracing::warn!(host, "request for another host refused (DNS rebinding?)");
            return Err(Refusal::HostNotAllowed);
        }
        Some(_) => {}
    }
    // The head is read whole up to the largest any policy reads; past the smallest limit the
    // policy in force says whether it is refused, and how.
    let head = head_len(headers, uri);
    if head > FORKSCOPE_HEAD
        && let HeadLimit::Refused { bytes, status } = allowed.http().head
        && head > bytes
    {
        return Err(Refusal::HeadTooLarge(status));
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    match (origins.next(), origins.next()) {
        (Some(_), Some(_)) => Err(Refusal::RepeatedHeader("Origin")),
        (Some(origin), None)
            if !origin.to_str().is_ok_and(origin_is_local) && allowed.http().checks_origin =>
        {
            Err(Refusal::OriginNotAllowed)
        }
        _ => Ok(()),
    }
}

/// forkscope's own limit on a request head.
const FORKSCOPE_HEAD: usize = match FORKSCOPE_HTTP.head {
    HeadLimit::Refused { bytes, .. } => bytes,
    HeadLimit::Unbounded => usize::MAX,
};

/// About what the request head took on the wire: its target and every header line.
fn head_len(headers: &HeaderMap, uri: &axum::http::Uri) -> usize {
    let lines: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let target = uri.path_and_query().map_or(1, |p| p.as_str().len());
    lines + target + 16
}

/// `host[:port]` or `[v6][:port]`; a port, when its colon is there, must be a real one.
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']')?;
            match rest {
                "" => (host, None),
                rest => (host, Some(rest.strip_prefix(':')?)),
            }
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    Some((host, port))
}

fn is_loopback_name(host: &str) -> bool {
    host == "127.0.0.1" || host == "::1" || host == "localhost"
}

fn same_ip(host: &str, ip: IpAddr) -> bool {
    host.parse::<IpAddr>().is_ok_and(|h| h == ip)
}

fn origin_is_local(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    split_authority(&rest.to_ascii_lowercase()).is_some_and(|(host, _)| is_loopback_name(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_origins_pass() {
        for ok in [
            "http://127.0.0.1",
            "http://127.0.0.1:8080",
            "http://localhost:3000",
            "https://LOCALHOST",
            "http://[::1]:9",
        ] {
            assert!(origin_is_local(ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://127.0.0.1.evil.example",
            "http://localhost:99999",
            "ftp://127.0.0.1",
            "http://[::2]",
            "http://127.0.0.1:",
        ] {
            assert!(!origin_is_local(bad), "{bad}");
        }
    }

    #[test]
    fn hosts_are_loopback_names_the_bound_address_or_allowed() {
        let loopback = AllowedHosts::new(IpAddr::from([127, 0, 0, 1]), []);
        for ok in [
            "127.0.0.1:8931",
            "localhost:8931",
            "LOCALHOST",
            "[::1]:1",
            "127.0.0.1",
        ] {
            assert!(loopback.admits(ok), "{ok}");
        }
        for bad in [
            "evil.com",
            "evil.com:8931",
            "127.0.0.1.evil.com:8931",
            "localhost.evil.com",
            "10.0.0.1:8931",
            "localhost:99999",
            "127.0.0.1:",
            "",
            ":8931",
            "[::1",
        ] {
            assert!(!loopback.admits(bad), "{bad}");
        }
        let allowed = AllowedHosts::new(
            IpAddr::from([10, 1, 2, 3]),
            ["lab.test".to_owned(), "pinned.test:9000".to_owned()],
        );
        for ok in [
            "10.1.2.3:8931",
            "lab.test",
            "Lab.Test:1234",
            "pinned.test:9000",
        ] {
            assert!(allowed.admits(ok), "{ok}");
        }
        for bad in [
            "pinned.test:9001",
            "pinned.test",
            "10.1.2.4:8931",
            "evil.com",
        ] {
            assert!(!allowed.admits(bad), "{bad}");
        }
    }
}
