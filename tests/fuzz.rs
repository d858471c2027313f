//! Byte fuzzing, proptest-driven so it runs in `cargo test` (and so in CI) for a bounded
//! number of cases: every parser of untrusted input — the SSE parser, cursors, tokens and
//! session ids, JSON-RPC bodies and headers over a real socket, scenario files — answers
//! arbitrary input without panicking and without unbounded allocation.
//! `FORKSCOPE_FUZZ_CASES=100000 cargo test --test fuzz` runs a longer soak.

use forkscope::clock::LabClock;
use forkscope::scenario::format;
use forkscope::wire::mcp;
use forkscope::wire::server::{self, ServeOptions};
use forkscope::wire::sse::{MAX_LINE, Parser};
use forkscope::wire::{Core, Shared};
use forkscope_core::{LabConfig, Policy, ResumptionToken, SessionId, WireCursor};
use proptest::prelude::*;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("FORKSCOPE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Bytes that look like SSE often enough to reach deep states.
fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"id: s1-".to_vec()),
        Just(b"retry: ".to_vec()),
        Just(b": truth s1 2 k\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"event: x\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec(piece, 0..60).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(cases(2_000))]

    #[test]
    fn the_sse_parser_takes_any_bytes_in_any_chunks(bytes in sse_bytes(), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut whole = Parser::new();
        let all = whole.feed(&bytes);
        // The same bytes cut anywhere give the same events (or the same refusal).
        let mut parser = Parser::new();
        let mut events = Vec::new();
        let mut failed = false;
        let mut at = 0;
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        points.push(bytes.len());
        for point in points {
            match parser.feed(&bytes[at..point]) {
                Ok(mut e) => events.append(&mut e),
                Err(_) => { failed = true; break; }
            }
            at = point;
        }
        if let (Ok(all), false) = (&all, failed) {
            prop_assert_eq!(all, &events);
        }
        for e in &events {
            // Lossy UTF-8 may widen a byte into U+FFFD (three bytes), never more.
            prop_assert!(e.data.len() <= 3 * bytes.len());
        }
    }

    #[test]
    fn identities_parse_or_refuse(s in ".{0,100}") {
        let _ = WireCursor::parse(&s);
        let _ = ResumptionToken::parse(&s);
        let _ = SessionId::parse(&s);
        if let Some(cursor) = WireCursor::parse(&s) {
            // What parses prints back to something that parses to the same.
            prop_assert_eq!(WireCursor::parse(&cursor.to_string()), Some(cursor));
        }
    }

    #[test]
    fn scenario_files_load_or_say_where_they_are_wrong(text in ".{0,400}") {
        match format::parse(&text, Path::new("fuzz.toml")) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().contains("fuzz.toml")),
        }
    }

    #[test]
    fn scenario_shaped_files_too(steps in proptest::collection::vec(
        prop_oneof![
            Just("[[step]]\naction = \"drop_connection\"\n".to_owned()),
            Just("[[step]]\nwait = \"applied\"\ncount = 3\n".to_owned()),
            Just("[[step]]\nadvance_ms = 100\n".to_owned()),
            Just("[config]\ngrace_ms = 0\n".to_owned()),
            Just("[expect.fenced]\nclean = true\n".to_owned()),
            ".{0,40}",
        ], 0..8)) {
        let text = format!("name = \"x\"\nteaches = \"y\"\n{}", steps.concat());
        let _ = format::parse(&text, Path::new("fuzz.toml"));
    }
}

#[test]
fn an_overlong_line_is_refused_not_buffered() {
    let mut parser = Parser::new();
    let chunk = vec![b'x'; 64 * 1024];
    let mut refused = false;
    for _ in 0..(MAX_LINE / chunk.len() + 2) {
        if parser.feed(&chunk).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused, "a line past MAX_LINE is an error");
}

/// JSON-RPC bodies and identity headers, sent over a real socket to a running server: every
/// answer is a well-formed HTTP response (no panic, no dropped connection), and the server
/// keeps serving.
#[test]
fn the_server_answers_any_body_and_headers() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (url, session, running) = runtime.block_on(async {
        let shared = Shared::new(Core::new(LabConfig::default(), Policy::Fenced).unwrap());
        let running = server::start(
            shared,
            Arc::new(LabClock::new()),
            ServeOptions::default(),
            SocketAddr::from(([127, 0, 0, 1], 0)),
        )
        .await
        .unwrap();
        let url = format!("http://{}/mcp", running.addr);
        let endpoint = mcp::Endpoint::new(reqwest::Client::new(), url.clone());
        let session = mcp::open_session(&endpoint, "fuzz")
            .await
            .unwrap()
            .to_string();
        (url, session, running)
    });
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        Just(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress_task","arguments":{"steps":1,"delay_ms":0}}}"#.to_vec()),
        (any::<i64>(), ".{0,20}", ".{0,20}").prop_map(|(id, m, a)| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{}","params":{{"name":"{}","arguments":{{"steps":{id}}}}}}}"#,
                m.replace('"', ""), a.replace('"', "")).into_bytes()
        }),
    ];
    let header =
        proptest::collection::vec(32u8..127, 0..90).prop_map(|b| String::from_utf8(b).unwrap());
    let mut runner = proptest::test_runner::TestRunner::new(cases(300));
    runner
        .run(&(body, header.clone(), header), |(body, cursor, token)| {
            runtime.block_on(async {
                let post = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-session-id", &session)
                    .header("mcp-protocol-version", "2025-11-25")
                    .body(body)
                    .send()
                    .await
                    .expect("every POST is answered");
                prop_assert!(post.status().as_u16() < 500 || post.status().as_u16() == 503);
                let get = http
                    .get(&url)
                    .header("accept", "text/event-stream")
                    .header("mcp-session-id", &session)
                    .header("mcp-protocol-version", "2025-11-25")
                    .header("last-event-id", cursor.trim())
                    .header("mcp-resumption-token", token.trim())
                    .send()
                    .await
                    .expect("every GET is answered");
                prop_assert!(get.status().as_u16() < 500);
                Ok(())
            })
        })
        .unwrap();
    runtime.block_on(running.stop());
}
