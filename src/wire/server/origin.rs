//! Origin validation against DNS rebinding: a browser page from elsewhere must not reach a
//! local server. Requests without `Origin` (non-browser clients) pass.

use super::refusal::session_error;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

pub(super) async fn check_origin(request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin.to_str().is_ok_and(origin_is_local)
    {
        return session_error(
            StatusCode::FORBIDDEN,
            "Origin not allowed: forkscope serves loopback pages only",
        );
    }
    next.run(request).await
}

fn origin_is_local(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    // `[::1]:port` or `host:port`; a port, when its colon is there, must be a real one.
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match rest.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        },
    };
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return false;
    }
    host == "127.0.0.1" || host == "::1" || host.eq_ignore_ascii_case("localhost")
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
}
