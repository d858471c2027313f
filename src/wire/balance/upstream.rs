//! The servers a balancer forwards to: `http://HOST:PORT`, parsed with `http::Uri` and checked
//! strictly (no path, no user), and a list of them with no server twice.

use std::fmt;
use std::net::Ipv6Addr;

/// One server the balancer forwards to, `http://HOST:PORT`, remembered as it was written so a
/// person can name it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    given: String,
    pub(super) host: String,
    pub(super) port: u16,
}

/// An upstream that is not `http://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {0:?} is not http://HOST:PORT (only plain http is forwarded)")]
    NotHttp(String),
    #[error(
        "upstream {0:?} has a path, query or user; give only http://HOST:PORT (each request's own path is forwarded)"
    )]
    NotJustHostAndPort(String),
    #[error("upstream {0:?} has no port; give it as http://HOST:PORT")]
    NoPort(String),
    #[error("upstream {given:?}: {port:?} is not a port (1-65535)")]
    BadPort { given: String, port: String },
    #[error("upstream {given:?}: {host:?} is not a host name or address")]
    BadHost { given: String, host: String },
}

impl Upstream {
    /// Reads `http://HOST:PORT` (a trailing `/` allowed; HOST a name, an IPv4 address or a
    /// bracketed IPv6 one): each part checked for a precise error, then the whole parsed as an
    /// `http::Uri`, whose authority must be that host and port.
    pub fn parse(given: &str) -> Result<Upstream, UpstreamError> {
        let rest = match given.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case("http://") => &given[7..],
            _ => return Err(UpstreamError::NotHttp(given.to_owned())),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(UpstreamError::NotJustHostAndPort(given.to_owned()));
        }
        let bad_host = |host: &str| UpstreamError::BadHost {
            given: given.to_owned(),
            host: host.to_owned(),
        };
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (v6, after) = bracketed.split_once(']').ok_or_else(|| bad_host(rest))?;
            v6.parse::<Ipv6Addr>().map_err(|_| bad_host(v6))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| UpstreamError::NoPort(given.to_owned()))?;
            (format!("[{v6}]"), port)
        } else {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| UpstreamError::NoPort(given.to_owned()))?;
            let name_like = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
            if host.is_empty() || !host.chars().all(name_like) {
                return Err(bad_host(host));
            }
            (host.to_ascii_lowercase(), port)
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(UpstreamError::BadPort {
                    given: given.to_owned(),
                    port: port.to_owned(),
                });
            }
        };
        // What the checks above let through is a URI whose authority is exactly HOST:PORT.
        let uri: hyper::Uri = given.parse().map_err(|_| bad_host(&host))?;
        if uri
            .authority()
            .map(|a| (a.host().to_ascii_lowercase(), a.port_u16()))
            != Some((host.clone(), Some(port)))
        {
            return Err(bad_host(&host));
        }
        Ok(Upstream {
            given: given.to_owned(),
            host,
            port,
        })
    }

    /// The URL as it was given.
    pub fn url(&self) -> &str {
        &self.given
    }

    /// `HOST:PORT`, the Host a request gets when its client sent none.
    pub(super) fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Whether `self` and `other` name the same server (`http://LOCALHOST:1/` is `http://localhost:1`).
    pub fn same_server(&self, other: &Upstream) -> bool {
        self.host == other.host && self.port == other.port
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.given)
    }
}

/// A list of upstreams the balancer cannot run on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamsError {
    #[error("no upstream to forward to: give at least one")]
    None,
    #[error(
        "upstream {second} (number {second_number}) is upstream {first_number} ({first}) again"
    )]
    Duplicate {
        first: String,
        first_number: usize,
        second: String,
        second_number: usize,
    },
}

/// Checks that there is at least one upstream and no server twice.
pub fn check_upstreams(upstreams: &[Upstream]) -> Result<(), UpstreamsError> {
    if upstreams.is_empty() {
        return Err(UpstreamsError::None);
    }
    for (j, second) in upstreams.iter().enumerate() {
        if let Some(i) = upstreams[..j].iter().position(|u| u.same_server(second)) {
            return Err(UpstreamsError::Duplicate {
                first: upstreams[i].given.clone(),
                first_number: i + 1,
                second: second.given.clone(),
                second_number: j + 1,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_are_http_host_port_and_nothing_else() {
        let ok = Upstream::parse("http://127.0.0.1:8931").unwrap();
        assert_eq!(ok.authority(), "127.0.0.1:8931");
        assert_eq!(ok.url(), "http://127.0.0.1:8931");
        assert!(Upstream::parse("HTTP://Localhost:1/").is_ok());
        assert_eq!(
            Upstream::parse("http://[::1]:9").unwrap().authority(),
            "[::1]:9"
        );
        for (given, expected) in [
            ("https://127.0.0.1:1", "NotHttp"),
            ("127.0.0.1:1", "NotHttp"),
            ("http://127.0.0.1:1/mcp", "NotJustHostAndPort"),
            ("http://u@127.0.0.1:1", "NotJustHostAndPort"),
            ("http://127.0.0.1", "NoPort"),
            ("http://127.0.0.1:0", "BadPort"),
            ("http://127.0.0.1:99999", "BadPort"),
            ("http://:1", "BadHost"),
            ("http://a b:1", "BadHost"),
        ] {
            let error = Upstream::parse(given).unwrap_err();
            assert!(
                format!("{error:?}").starts_with(expected),
                "{given}: {error:?}"
            );
        }
    }

    #[test]
    fn duplicates_are_the_same_server_however_written() {
        let list = |urls: &[&str]| -> Vec<Upstream> {
            urls.iter().map(|u| Upstream::parse(u).unwrap()).collect()
        };
        assert_eq!(check_upstreams(&[]), Err(UpstreamsError::None));
        assert!(check_upstreams(&list(&["http://a:1", "http://a:2"])).is_ok());
        let error =
            check_upstreams(&list(&["http://a:1", "http://b:1", "http://A:1/"])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "upstream http://A:1/ (number 3) is upstream 1 (http://a:1) again"
        );
    }
}
