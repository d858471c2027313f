//! The server as an attacker and a careless client meet it, over real sockets: idle and
//! half-spoken connections, the connection cap, running out of descriptors, DNS rebinding,
//! refused requests that must change nothing, duplicate request ids, slow readers, and a
//! graceful stop. Every wait is bounded by [`LIMIT`] and ends on observed state.

use forkscope::clock::LabClock;
use forkscope::wire::headers::MODELLED_REVISION;
use forkscope::wire::mcp::{self, Body as _};
use forkscope::wire::server::{self, EmitRate, RunningServer, ServeOptions};
use forkscope::wire::sse::{Parser, SseEvent};
use forkscope::wire::{Core, Shared};
use forkscope_core::{LabConfig, Policy, SessionId, StreamIdentity};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any one wait may take before the test fails: a bound, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);

/// An `initialize` body, for the requests written byte by byte (their heads are the test).
fn initialize_body() -> String {
    let init = mcp::Initialize::new(MODELLED_REVISION, "t", "0");
    mcp::Request::new(mcp::RequestId(1), mcp::Call::Initialize(init)).body()
}

struct Server {
    shared: Shared,
    running: RunningServer,
    url: String,
}

async fn start(config: LabConfig, options: ServeOptions) -> Server {
    start_with_clock(config, options, Arc::new(LabClock::new())).await
}

async fn start_with_clock(
    config: LabConfig,
    options: ServeOptions,
    clock: Arc<LabClock>,
) -> Server {
    let shared = Shared::new(Core::new(config, Policy::Fenced).unwrap());
    let running = server::start(
        shared.clone(),
        clock,
        options,
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let url = format!("http://{}/mcp", running.addr);
    Server {
        shared,
        running,
        url,
    }
}

fn quick(options: ServeOptions) -> ServeOptions {
    ServeOptions {
        request_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..options
    }
}

/// Reads until the server closes the connection (EOF or reset); fails past [`LIMIT`].
async fn closed_by_server(tcp: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(LIMIT, tcp.read(&mut buf)).await {
            Err(_) => panic!("{what}: the server kept the connection open"),
            Ok(Ok(0) | Err(_)) => return seen,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// One HTTP/1.1 request written raw (`Connection: close`); the status and body of the answer.
async fn raw_exchange(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let answer = String::from_utf8(closed_by_server(&mut tcp, "a closed exchange").await).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn post_head(host: &str, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream{extra}"
    )
}

async fn initialize(url: &str) -> SessionId {
    let endpoint = mcp::Endpoint::new(reqwest::Client::new(), url);
    mcp::open_session(&endpoint, "t").await.unwrap()
}

fn on_session(request: reqwest::RequestBuilder, session: SessionId) -> reqwest::RequestBuilder {
    let id = session.to_string();
    mcp::Headers::session(&id, MODELLED_REVISION).apply(request)
}

fn tool_call(
    url: &str,
    session: SessionId,
    id: Value,
    steps: u64,
    delay_ms: u64,
) -> reqwest::RequestBuilder {
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"progress_task","arguments":{"steps":steps,"delay_ms":delay_ms},"_meta":{"progressToken":"p"}}});
    on_session(reqwest::Client::new().post(url), session)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string())
}

/// The session's standalone GET stream, open.
async fn standalone_stream(url: &str, session: SessionId) -> reqwest::Response {
    let id = session.to_string();
    let endpoint = mcp::Endpoint::new(reqwest::Client::new(), url);
    let response = call(endpoint.get_stream(mcp::Headers::session(&id, MODELLED_REVISION))).await;
    assert_eq!(response.status(), 200);
    response
}

/// Sends a request that must reach the server.
async fn call(request: reqwest::RequestBuilder) -> reqwest::Response {
    request.send().await.unwrap()
}

/// `count` tool calls with ids 0, 1, …, each admitted with its SSE response open.
async fn open_calls(
    url: &str,
    session: SessionId,
    count: u64,
    steps: u64,
    delay_ms: u64,
) -> Vec<reqwest::Response> {
    let mut open = Vec::new();
    for id in 0..count {
        let response = call(tool_call(url, session, json!(id), steps, delay_ms)).await;
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    open
}

/// Reads an SSE response to its end; fails if the body breaks off without its terminating
/// chunk (reqwest reports an incomplete body as an error).
async fn events_to_end(response: reqwest::Response) -> Vec<SseEvent> {
    let mut parser = Parser::new();
    let mut events = Vec::new();
    let mut body = response.bytes_stream();
    loop {
        match tokio::time::timeout(LIMIT, body.next()).await {
            Err(_) => panic!("the stream never ended"),
            Ok(None) => return events,
            Ok(Some(Err(e))) => panic!("the stream was cut, not ended: {e:?}"),
            Ok(Some(Ok(chunk))) => events.extend(parser.feed(&chunk).unwrap()),
        }
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Idle connections.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_half_spoken_connections_are_closed() {
    let server = start(LabConfig::default(), quick(ServeOptions::default())).await;
    let addr = server.running.addr;
    // Nothing at all.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    closed_by_server(&mut silent, "a silent connection").await;
    // A lone `P`: neither HTTP/1 nor the HTTP/2 preface yet.
    let mut undecided = TcpStream::connect(addr).await.unwrap();
    undecided.write_all(b"P").await.unwrap();
    closed_by_server(&mut undecided, "a connection that sent only P").await;
    // The HTTP/2 preface and settings, then nothing: an h2c connection parked without a request.
    let mut h2c = TcpStream::connect(addr).await.unwrap();
    h2c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    closed_by_server(&mut h2c, "a parked h2c connection").await;
    server.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_idle_after_its_response_is_closed() {
    let server = start(LabConfig::default(), quick(ServeOptions::default())).await;
    let mut tcp = TcpStream::connect(server.running.addr).await.unwrap();
    tcp.write_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let answer =
        String::from_utf8(closed_by_server(&mut tcp, "an idle keep-alive connection").await)
            .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    server.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_is_never_idle() {
    let server = start(LabConfig::default(), quick(ServeOptions::default())).await;
    let session = initialize(&server.url).await;
    let mut body = standalone_stream(&server.url, session).await.bytes_stream();
    // Keep-alive comments arrive once a second; three of them span ten idle timeouts.
    let mut keepalives = 0;
    while keepalives < 3 {
        let chunk = tokio::time::timeout(LIMIT, body.next())
            .await
            .expect("the stream stays open")
            .expect("the stream stays open")
            .unwrap();
        keepalives += chunk.windows(10).filter(|w| w == b"keep-alive").count();
    }
    server.running.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The connection cap.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_get_503() {
    let options = ServeOptions {
        max_connections: 2,
        request_read_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        ..ServeOptions::default()
    };
    let server = start(LabConfig::default(), options).await;
    let addr = server.running.addr;
    // Two connections that each served a request and now sit idle: the older goes first.
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 400");
        idle.push(tcp);
    }
    let (status, _) = raw_exchange(addr, "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1", "").await;
    assert_eq!(status, 400, "admitted: an ordinary answer, not 503");
    closed_by_server(&mut idle[0], "the oldest idle connection").await;
    drop(idle);
    // Two connections busy with open streams: nothing can be evicted, so a typed 503.
    let session = initialize(&server.url).await;
    let _streams = open_calls(&server.url, session, 2, 10, 60_000).await;
    let (status, body) = raw_exchange(addr, "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1", "").await;
    assert_eq!(status, 503, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], json!(-32001));
    server.running.stop().await;
}

/// `forkscope serve` as a child process, killed when dropped (also when the test fails).
struct Child {
    process: tokio::process::Child,
    url: String,
}

impl Child {
    /// SIGTERM, as a supervisor stops a server.
    fn terminate(&self) {
        let pid = self.process.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
    }
}

async fn serve_binary(prefix: &[&str], args: &[&str]) -> Child {
    serve_binary_logging(prefix, args, std::process::Stdio::null()).await
}

async fn serve_binary_logging(
    prefix: &[&str],
    args: &[&str],
    stderr: std::process::Stdio,
) -> Child {
    use tokio::io::AsyncBufReadExt;
    let bin = env!("CARGO_BIN_EXE_forkscope");
    let (program, rest) = match prefix.split_first() {
        Some((program, rest)) => (
            *program,
            rest.iter().copied().chain([bin]).collect::<Vec<_>>(),
        ),
        None => (bin, Vec::new()),
    };
    let mut process = tokio::process::Command::new(program)
        .args(rest)
        .args(["serve", "--port", "0"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(process.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(at) = line.find("http://") {
                let url = line[at..].split_whitespace().next().unwrap().to_owned();
                // Keep reading stdout so the server never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return url;
            }
        }
        panic!("forkscope serve printed no address");
    })
    .await
    .expect("forkscope serve starts");
    Child { process, url }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_server_backs_off_and_still_serves() {
    // 64 descriptors, and 70 sockets that never send a byte: accept hits EMFILE.
    let child = serve_binary(
        &["prlimit", "--nofile=64", "--"],
        &[
            "--request-timeout-ms",
            "600000",
            "--idle-timeout-ms",
            "600000",
        ],
    )
    .await;
    let addr: SocketAddr = child.url["http://".len()..child.url.len() - "/mcp".len()]
        .parse()
        .unwrap();
    let mut parked = Vec::new();
    for _ in 0..70 {
        parked.push(TcpStream::connect(addr).await.unwrap());
    }
    // A healthy client is still served: idle connections give back their descriptors.
    let session = tokio::time::timeout(LIMIT, initialize(&child.url))
        .await
        .expect("a healthy client is served while the server is out of descriptors");
    let _ = session;
    drop(parked);
    drop(child);
}

// ---------------------------------------------------------------------------------------------
// DNS rebinding.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_is_refused_by_host_and_by_doubled_origins() {
    let options = ServeOptions {
        allowed_hosts: vec!["lab.test".to_owned()],
        ..ServeOptions::default()
    };
    let server = start(LabConfig::default(), options).await;
    let addr = server.running.addr;
    let port = addr.port();
    // A rebound name, no Origin: refused before a session exists.
    for host in [
        "evil.com".to_owned(),
        format!("evil.com:{port}"),
        format!("127.0.0.1.evil.com:{port}"),
    ] {
        let (status, body) = raw_exchange(addr, &post_head(&host, ""), &initialize_body()).await;
        assert_eq!(status, 403, "{host}: {body}");
        assert!(body.contains("Host not allowed"), "{body}");
        assert!(body.ends_with("}\n"), "a JSON body ends its line: {body:?}");
    }
    let (status, _) = raw_exchange(
        addr,
        "GET /mcp HTTP/1.1\r\nHost: evil.com\r\nAccept: text/event-stream",
        "",
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        server.shared.lock().server.sessions().count(),
        0,
        "no session was opened"
    );
    // Loopback names, and a name allowed with --allow-host, pass.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "lab.test".to_owned(),
    ] {
        let (status, body) = raw_exchange(addr, &post_head(&host, ""), &initialize_body()).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    // Two Host headers, or two Origins in either order: neither can be believed.
    let host = format!("127.0.0.1:{port}");
    for extra in [
        "\r\nOrigin: http://127.0.0.1\r\nOrigin: http://evil.com",
        "\r\nOrigin: http://evil.com\r\nOrigin: http://127.0.0.1",
        "\r\nHost: evil.com",
    ] {
        let (status, body) = raw_exchange(addr, &post_head(&host, extra), &initialize_body()).await;
        assert_eq!(status, 400, "{extra:?}: {body}");
        assert!(body.contains("more than one"), "{body}");
    }
    server.running.stop().await;
}

// ---------------------------------------------------------------------------------------------
// A refused request changes nothing, the session's idle clock included.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_do_not_keep_a_session_alive() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let config = LabConfig {
        session_idle_ms: 3_000,
        identity: StreamIdentity::TokenHeader,
        ..LabConfig::default()
    };
    let server = start_with_clock(config, ServeOptions::default(), clock.clone()).await;
    let refused = initialize(&server.url).await;
    let untouched = initialize(&server.url).await;
    let http = reqwest::Client::new();
    for _ in 0..3 {
        clock.advance(900);
        // A malformed cursor, and a tool call with bad arguments: both refused.
        let get = on_session(http.get(&server.url), refused)
            .header("accept", "text/event-stream")
            .header("last-event-id", "not a cursor")
            .send()
            .await
            .unwrap();
        assert_eq!(get.status(), 400);
        let post = call(tool_call(&server.url, refused, json!(9), 0, 0)).await;
        let body: Value = post.json().await.unwrap();
        assert_eq!(body["error"]["code"], json!(-32602), "{body}");
    }
    // 3.6 s after they were opened, both sessions have been idle past 3 s.
    clock.advance(900);
    until("both sessions expire", || {
        let core = server.shared.lock();
        core.server.session(refused).is_none() && core.server.session(untouched).is_none()
    })
    .await;
    server.running.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Duplicate request ids.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_call_with_an_id_in_flight_is_refused_and_echoes_it() {
    let server = start(LabConfig::default(), ServeOptions::default()).await;
    let session = initialize(&server.url).await;
    let first = call(tool_call(&server.url, session, json!(7), 10, 60_000)).await;
    assert_eq!(first.status(), 200);
    let second = call(tool_call(&server.url, session, json!(7), 10, 60_000)).await;
    assert_eq!(second.status(), 409);
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["id"], json!(7), "{body}");
    assert_eq!(
        body["error"]["data"]["reason"], "duplicate_request_id",
        "{body}"
    );
    assert_eq!(server.shared.lock().io.running_tool_calls(), 1);
    // The same id in another session, or as a string, is another request.
    let other = initialize(&server.url).await;
    let elsewhere = call(tool_call(&server.url, other, json!(7), 10, 60_000)).await;
    assert_eq!(elsewhere.status(), 200);
    let as_string = call(tool_call(&server.url, session, json!("7"), 10, 60_000)).await;
    assert_eq!(as_string.status(), 200);
    // Once the first is cancelled, its id is free again.
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}});
    let accepted = on_session(reqwest::Client::new().post(&server.url), session)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(cancel.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    events_to_end(first).await;
    let again = call(tool_call(&server.url, session, json!(7), 1, 0)).await;
    assert_eq!(again.status(), 200);
    server.running.stop().await;
}

/// The session's standalone GET over a raw socket with a 2 KB receive buffer, its request sent:
/// a reader whose window the server fills at once.
async fn small_window_get(addr: std::net::SocketAddr, session: SessionId) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(2_048).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp
}

// ---------------------------------------------------------------------------------------------
// A slow reader that reads all along is alive.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_that_keeps_reading_is_never_cut() {
    let options = ServeOptions {
        background: Some(EmitRate::every_ms(1)),
        liveness: forkscope::wire::server::liveness::Liveness {
            keepalive_ms: Some(1_000),
            write_deadline_ms: Some(1_000),
        },
        ..ServeOptions::default()
    };
    let server = start(LabConfig::default(), options).await;
    let session = initialize(&server.url).await;
    // A 2 KB receive buffer, read 1 KB at a time four times a second: 4 KB/s.
    let mut tcp = small_window_get(server.running.addr, session).await;
    let mut read = 0usize;
    let mut buf = [0u8; 1024];
    // 24 KB at 4 KB/s: six times the write deadline.
    while read < 24 * 1024 {
        let n = tokio::time::timeout(LIMIT, tcp.read(&mut buf))
            .await
            .expect("bytes keep coming")
            .unwrap_or_else(|e| panic!("cut after {read} bytes: {e}"));
        assert!(n > 0, "the server ended the stream after {read} bytes");
        read += n;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let live = {
        let core = server.shared.lock();
        core.server
            .session(session)
            .unwrap()
            .streams()
            .iter()
            .any(|s| s.state().label() == "live")
    };
    assert!(live, "the slow reader's stream is still live");
    server.running.stop().await;
}

/// `emit_standalone` waits for a slow reader's writer as the background emitter does, rather
/// than fill its queue and get the connection cut: 40,000 notifications asked for at once (four
/// runs), while the reader is not reading yet, all arrive on the one connection, each run's in
/// order. (Without the room check the connection was cut after 15,027.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_standalone_waits_for_room_rather_than_cut_a_slow_reader() {
    let options = ServeOptions {
        background: None,
        liveness: forkscope::wire::server::liveness::Liveness {
            keepalive_ms: None,
            write_deadline_ms: None,
        },
        ..ServeOptions::default()
    };
    let server = start(LabConfig::default(), options).await;
    let session = initialize(&server.url).await;
    // The server's writer queue, not the kernel, holds what is unread.
    let mut tcp = small_window_get(server.running.addr, session).await;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(LIMIT, tcp.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "no response head");
        raw.extend_from_slice(&buf[..n]);
    }
    for (id, label) in [(1, "w"), (2, "x"), (3, "y"), (4, "z")] {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"emit_standalone","arguments":{"count":10_000,"delay_ms":0,"label":label}}});
        let answered = call(
            on_session(reqwest::Client::new().post(&server.url), session)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await;
        assert_eq!(answered.status(), 200);
    }
    // Let the run get ahead of a reader that reads nothing (the condition, not a sync).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let each = b"urn:forkscope-probe:";
    let mut seen = 0;
    while seen < 40_000 {
        let n = tokio::time::timeout(LIMIT, tcp.read(&mut buf))
            .await
            .expect("notifications keep coming")
            .unwrap();
        assert!(n > 0, "the stream was cut after {seen} notifications");
        // Counted in what is new (and the few bytes before it a match may start in).
        let from = raw.len().saturating_sub(each.len() - 1);
        raw.extend_from_slice(&buf[..n]);
        seen += raw[from..]
            .windows(each.len())
            .filter(|w| w == each)
            .count();
    }
    let text = String::from_utf8_lossy(&raw);
    let numbers: Vec<u64> = text
        .split("urn:forkscope-probe:w:")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(numbers, (1..=10_000).collect::<Vec<_>>());
    server.running.stop().await;
}

// ---------------------------------------------------------------------------------------------
// A graceful stop.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_every_stream_cleanly_and_tells_running_calls_why() {
    let mut child = serve_binary(&[], &["--emit-every", "50"]).await;
    let session = initialize(&child.url).await;
    let calls = open_calls(&child.url, session, 10, 100, 1_000).await;
    let mut streams = Vec::new();
    for _ in 0..10 {
        let other = initialize(&child.url).await;
        streams.push(standalone_stream(&child.url, other).await);
    }
    child.terminate();
    for (id, response) in calls.into_iter().enumerate() {
        let events = events_to_end(response).await;
        let last: Value = serde_json::from_str(
            &events
                .last()
                .unwrap_or_else(|| panic!("call {id}: no event"))
                .data,
        )
        .unwrap_or_else(|e| panic!("call {id}: {e}: {events:?}"));
        assert_eq!(last["id"], json!(id), "{last}");
        assert_eq!(last["error"]["data"]["reason"], "server_stopping", "{last}");
    }
    for response in streams {
        let events = events_to_end(response).await;
        assert!(!events.is_empty());
    }
    let status = tokio::time::timeout(LIMIT, child.process.wait())
        .await
        .expect("the server exits once drained")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_carries_no_colour_codes() {
    let log = std::env::temp_dir().join(format!("forkscope-log-{}.txt", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = serve_binary_logging(&[], &["--emit-every", "0"], file.into()).await;
    initialize(&child.url).await;
    child.terminate();
    tokio::time::timeout(LIMIT, child.process.wait())
        .await
        .expect("the server exits")
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).unwrap();
    assert!(text.contains("session initialized"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file: {text:?}"
    );
}

/// A replica runs fenced or naive: an SDK policy is refused where the replica would start,
/// exit 2 with the reason, before any store is reached.
#[test]
fn a_replica_under_an_sdk_policy_is_refused_at_start() {
    for policy in ["ts-sdk", "python-sdk", "python-sdk-store", "rmcp"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args([
                "serve", "--port", "0", "--store", "memory", "--policy", policy,
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{policy}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("replicas run fenced or naive, not {policy}")),
            "{stderr}"
        );
    }
}
