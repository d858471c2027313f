//! `forkscope balance` over real sockets on 127.0.0.1: small axum upstreams that say who they
//! are in an `x-upstream` header, the balancer in process (rotation, stickiness, out/in/next,
//! streaming, a dead upstream, every upstream out, the body bound), and the real binary driven
//! over its standard input. Every wait is bounded by [`LIMIT`] and ends on observed state.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use forkscope::wire::balance::{Balancer, MAX_BODY, Mode, Upstream, UpstreamStatus};
use futures_util::StreamExt;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::oneshot;

/// How long any one wait may take before the test fails: a bound, never a measurement.
const LIMIT: Duration = Duration::from_secs(20);

struct UpstreamState {
    name: &'static str,
    requests: AtomicUsize,
    /// Released by the test: `/sse` sends its second event only then.
    release: Mutex<Option<oneshot::Receiver<()>>>,
    /// Closed when `/sse`'s body is dropped: its reader went away.
    sse_gone: Mutex<Option<oneshot::Sender<()>>>,
    /// While true, a request is read and never answered, as a stopped process's are.
    held: tokio::sync::watch::Sender<bool>,
}

/// A tiny server that answers everything with `x-upstream: NAME` and, in the body, what it
/// received; a POST without `Mcp-Session-Id` gets one (`NAME-N`), as `initialize` does.
struct TestUpstream {
    url: String,
    state: Arc<UpstreamState>,
    _server: tokio::task::JoinHandle<()>,
}

impl TestUpstream {
    async fn start(name: &'static str) -> TestUpstream {
        let state = Arc::new(UpstreamState {
            name,
            requests: AtomicUsize::new(0),
            release: Mutex::new(None),
            sse_gone: Mutex::new(None),
            held: tokio::sync::watch::Sender::new(false),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        TestUpstream {
            url,
            state,
            _server: server,
        }
    }

    fn upstream(&self) -> Upstream {
        Upstream::parse(&self.url).unwrap()
    }

    fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Stops answering (a stopped process: connections are accepted, nothing comes back), or
    /// answers again, the held requests too.
    fn hold(&self, held: bool) {
        self.state.held.send_replace(held);
    }
}

async fn answer(State(state): State<Arc<UpstreamState>>, request: Request) -> Response {
    let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let mut held = state.held.subscribe();
    let _ = held.wait_for(|held| !held).await;
    let (parts, body) = request.into_parts();
    let mut response = if parts.uri.path() == "/task-sse" {
        // A `CreateTaskResult` framed as SSE, as rmcp 3.11 answers a task call: a priming
        // comment, then the answer, on a stream that stays open a while.
        let answer = format!(
            ": priming\n\ndata: {{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"resultType\":\"task\",\"taskId\":\"{}-task\"}}}}\n\n",
            state.name
        );
        let mut response = Response::new(Body::from(answer));
        response.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/event-stream"),
        );
        response
    } else if parts.uri.path() == "/sse" {
        let release = state.release.lock().unwrap().take();
        let gone = state.sse_gone.lock().unwrap().take();
        let first = futures_util::stream::once(async {
            Ok::<_, Infallible>(Bytes::from_static(b"data: one\n\n"))
        });
        let second = futures_util::stream::once(async move {
            let _gone = gone;
            if let Some(release) = release {
                let _ = release.await;
            }
            Ok(Bytes::from_static(b"data: two\n\n"))
        });
        let mut response = Response::new(Body::from_stream(first.chain(second)));
        response.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/event-stream"),
        );
        response
    } else {
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let custom = parts
            .headers
            .get("x-custom")
            .map_or("-", |v| v.to_str().unwrap());
        let hop = parts.headers.contains_key("keep-alive");
        Response::new(Body::from(format!(
            "{} {} {} body={} x-custom={custom} keep-alive={hop}",
            state.name,
            parts.method,
            parts.uri,
            body.len()
        )))
    };
    let headers = response.headers_mut();
    headers.insert("x-upstream", HeaderValue::from_static(state.name));
    if parts.method == "POST" && !parts.headers.contains_key("mcp-session-id") {
        let id = format!("{}-{n}", state.name);
        headers.insert("mcp-session-id", HeaderValue::from_str(&id).unwrap());
    }
    response
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(LIMIT)
        .build()
        .unwrap()
}

async fn balancer(upstreams: &[&TestUpstream], mode: Mode) -> Balancer {
    let upstreams = upstreams.iter().map(|u| u.upstream()).collect();
    Balancer::start(SocketAddr::from(([127, 0, 0, 1], 0)), upstreams, mode)
        .await
        .unwrap()
}

/// Who answered a response: its `x-upstream`.
fn who(headers: &HeaderMap) -> String {
    headers
        .get("x-upstream")
        .map_or("nobody", |v| v.to_str().unwrap())
        .to_owned()
}

/// GETs `/` through `addr` `n` times and says who answered each.
async fn landings(addr: SocketAddr, n: usize) -> Vec<String> {
    let http = http();
    let mut seen = Vec::new();
    for _ in 0..n {
        let response = http.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        seen.push(who(response.headers()));
    }
    seen
}

/// POSTs to `/mcp` through `addr`, with `session` if given; says who answered and the session
/// id the response carried.
async fn post(addr: SocketAddr, session: Option<&str>) -> (String, Option<String>) {
    let mut request = http().post(format!("http://{addr}/mcp")).body("{}");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (who(response.headers()), session)
}

#[tokio::test]
async fn round_robin_alternates_whatever_the_session() {
    let (a, b, c) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
        TestUpstream::start("c").await,
    );
    let balancer = balancer(&[&a, &b, &c], Mode::RoundRobin).await;
    assert_eq!(
        landings(balancer.addr, 6).await,
        ["a", "b", "c", "a", "b", "c"]
    );
    let (first, session) = post(balancer.addr, None).await;
    assert_eq!(first, "a");
    let session = session.expect("the upstream gave a session id");
    let mut on_session = Vec::new();
    for _ in 0..3 {
        on_session.push(post(balancer.addr, Some(&session)).await.0);
    }
    assert_eq!(on_session, ["b", "c", "a"], "round-robin has no stickiness");
    let counts: Vec<u64> = balancer.status().iter().map(|s| s.forwarded).collect();
    assert_eq!(counts, [4, 3, 3]);
}

#[tokio::test]
async fn a_request_is_forwarded_as_it_came_and_its_hop_stays_behind() {
    let a = TestUpstream::start("a").await;
    let balancer = balancer(&[&a], Mode::RoundRobin).await;
    let response = http()
        .put(format!("http://{}/some/path?q=1&r=two", balancer.addr))
        .header("x-custom", "kept")
        .header("keep-alive", "timeout=5")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.text().await.unwrap(),
        "a PUT /some/path?q=1&r=two body=5 x-custom=kept keep-alive=false"
    );
}

#[tokio::test]
async fn sticky_keeps_a_session_on_the_upstream_that_first_answered_it() {
    let (a, b) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
    );
    let balancer = balancer(&[&a, &b], Mode::Sticky).await;
    let (on_a, session_a) = post(balancer.addr, None).await;
    let (on_b, session_b) = post(balancer.addr, None).await;
    assert_eq!((on_a.as_str(), on_b.as_str()), ("a", "b"));
    let (session_a, session_b) = (session_a.unwrap(), session_b.unwrap());
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(post(balancer.addr, Some(&session_b)).await.0);
        seen.push(post(balancer.addr, Some(&session_a)).await.0);
    }
    assert_eq!(seen, ["b", "a", "b", "a", "b", "a"]);
    // A session the balancer never saw answered goes in rotation.
    assert_eq!(
        [
            post(balancer.addr, Some("unknown")).await.0,
            post(balancer.addr, Some("unknown")).await.0
        ],
        ["a", "b"]
    );
    // A session whose upstream is out goes in rotation, and comes home when it is back in.
    balancer.take_out(1).unwrap();
    assert_eq!(post(balancer.addr, Some(&session_b)).await.0, "a");
    balancer.put_in(1).unwrap();
    assert_eq!(post(balancer.addr, Some(&session_b)).await.0, "b");
}

#[tokio::test]
async fn out_in_and_next_steer_the_rotation() {
    let (a, b) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
    );
    let balancer = balancer(&[&a, &b], Mode::RoundRobin).await;
    balancer.take_out(0).unwrap();
    assert_eq!(landings(balancer.addr, 3).await, ["b", "b", "b"]);
    // `next` goes around the rotation once, even to an upstream that is out.
    balancer.send_next_to(0).unwrap();
    assert!(balancer.status()[0].next);
    assert_eq!(landings(balancer.addr, 2).await, ["a", "b"]);
    balancer.put_in(0).unwrap();
    assert_eq!(landings(balancer.addr, 2).await, ["a", "b"]);
    assert_eq!(
        balancer.status(),
        [
            UpstreamStatus {
                url: a.url.clone(),
                in_rotation: true,
                forwarded: 2,
                next: false,
                answering: true,
            },
            UpstreamStatus {
                url: b.url.clone(),
                in_rotation: true,
                forwarded: 5,
                next: false,
                answering: true,
            },
        ]
    );
    let error = balancer.take_out(2).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no upstream at index 2: there are 2 (indexes 0 to 1)"
    );
}

#[tokio::test]
async fn an_sse_response_flows_event_by_event() {
    let a = TestUpstream::start("a").await;
    let (release, released) = oneshot::channel();
    *a.state.release.lock().unwrap() = Some(released);
    let balancer = balancer(&[&a], Mode::RoundRobin).await;
    let response = http()
        .get(format!("http://{}/sse", balancer.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.bytes_stream();
    let mut read = String::new();
    // The upstream holds its second event until the first has come through the balancer:
    // a balancer that buffered the body would never deliver the first, and this would time out.
    let first = tokio::time::timeout(LIMIT, async {
        while !read.contains("data: one\n\n") {
            let chunk = body.next().await.expect("the stream goes on").unwrap();
            read.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await;
    assert!(
        first.is_ok(),
        "the first event never came through: {read:?}"
    );
    assert!(!read.contains("two"));
    release.send(()).unwrap();
    tokio::time::timeout(LIMIT, async {
        while let Some(chunk) = body.next().await {
            read.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
    })
    .await
    .expect("the stream ends after the second event");
    assert_eq!(read, "data: one\n\ndata: two\n\n");
}

#[tokio::test]
async fn a_client_that_goes_away_closes_the_upstream_stream_too() {
    let a = TestUpstream::start("a").await;
    let (_release, released) = oneshot::channel();
    let (gone, upstream_dropped) = oneshot::channel();
    *a.state.release.lock().unwrap() = Some(released);
    *a.state.sse_gone.lock().unwrap() = Some(gone);
    let balancer = balancer(&[&a], Mode::RoundRobin).await;
    let response = http()
        .get(format!("http://{}/sse", balancer.addr))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut read = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while !read.ends_with(b"data: one\n\n") {
            read.extend_from_slice(&body.next().await.expect("the stream goes on").unwrap());
        }
    })
    .await
    .expect("the first event comes through");
    // The replica must see its stream close, as it would with no balancer between: that is
    // what starts its grace window.
    drop(body);
    let dropped = tokio::time::timeout(LIMIT, upstream_dropped).await;
    assert!(
        matches!(dropped, Ok(Err(_))),
        "the upstream's stream outlived its reader: {dropped:?}"
    );
}

/// An address nothing listens on any more: bound, then let go.
async fn dead_upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    Upstream::parse(&url).unwrap()
}

#[tokio::test]
async fn a_dead_upstream_is_routed_around_and_all_dead_is_a_502() {
    let a = TestUpstream::start("a").await;
    let dead = dead_upstream().await;
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let balancer = Balancer::start(listen, vec![dead.clone(), a.upstream()], Mode::RoundRobin)
        .await
        .unwrap();
    assert_eq!(landings(balancer.addr, 4).await, ["a", "a", "a", "a"]);
    let status = balancer.status();
    assert_eq!((status[0].forwarded, status[1].forwarded), (0, 4));

    let other_dead = dead_upstream().await;
    let balancer = Balancer::start(listen, vec![dead.clone(), other_dead.clone()], Mode::Sticky)
        .await
        .unwrap();
    let response = http()
        .get(format!("http://{}/", balancer.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let text = response.text().await.unwrap();
    assert!(text.starts_with("no upstream answered; tried 1 "), "{text}");
    assert!(
        text.contains(dead.url()) && text.contains(other_dead.url()),
        "{text}"
    );
}

/// Polls the balancer's status until `done` holds (bounded by [`LIMIT`]).
async fn until_status(balancer: &Balancer, done: impl Fn(&[UpstreamStatus]) -> bool) {
    tokio::time::timeout(LIMIT, async {
        while !done(&balancer.status()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the balancer's status never got there");
}

#[tokio::test]
async fn an_upstream_that_never_answers_is_passed_over_until_it_answers_again() {
    let (a, b) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
    );
    let balancer = balancer(&[&a, &b], Mode::RoundRobin).await;
    balancer.set_head_timeout(Duration::from_millis(300));
    a.hold(true);
    // The first GET lands on a, gets no head in time, and is sent on to b; a then rests.
    assert_eq!(landings(balancer.addr, 4).await, ["b", "b", "b", "b"]);
    let status = balancer.status();
    assert!(!status[0].answering && status[1].answering, "{status:?}");
    assert_eq!((status[0].forwarded, status[1].forwarded), (1, 4));

    // A POST may have reached the upstream that went quiet: 504, never sent again elsewhere.
    let b_before = b.requests();
    balancer.send_next_to(0).unwrap();
    let response = http()
        .post(format!("http://{}/mcp", balancer.addr))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let text = response.text().await.unwrap();
    assert!(text.contains("it is not sent again"), "{text}");
    assert_eq!(b.requests(), b_before, "the POST was not re-sent");

    // a answers again: a probe hears it, and the rotation takes it back.
    a.hold(false);
    until_status(&balancer, |s| s[0].answering).await;
    let landed = landings(balancer.addr, 4).await;
    assert!(landed.contains(&"a".to_owned()), "{landed:?}");
}

#[tokio::test]
async fn every_upstream_out_is_a_503_with_retry_after() {
    let (a, b) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
    );
    let balancer = balancer(&[&a, &b], Mode::RoundRobin).await;
    balancer.take_out(0).unwrap();
    balancer.take_out(1).unwrap();
    let response = http()
        .get(format!("http://{}/", balancer.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("every upstream is out of rotation")
    );
    assert_eq!(a.requests() + b.requests(), 0);
}

#[tokio::test]
async fn a_body_over_the_bound_is_a_413_and_never_forwarded() {
    let a = TestUpstream::start("a").await;
    let balancer = balancer(&[&a], Mode::RoundRobin).await;
    let url = format!("http://{}/mcp", balancer.addr);
    let response = http()
        .post(&url)
        .body(vec![b'x'; MAX_BODY + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Chunked, with no Content-Length to refuse on: counted as it is read.
    let chunks = futures_util::stream::iter(
        (0..=MAX_BODY / 4096).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b'x'; 4096]))),
    );
    let response = http()
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.requests(), 0);
    let response = http()
        .post(&url)
        .body(vec![b'x'; MAX_BODY])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains(&format!("body={MAX_BODY}"))
    );
}

/// The real `forkscope balance`, killed when dropped (a failing assertion included).
struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("forkscope starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Running {
            child,
            stdin,
            stdout,
        }
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(LIMIT, self.stdout.next_line())
            .await
            .expect("a line within the limit")
            .unwrap()
            .expect("stdout is open")
    }

    /// Sends one command and reads its one answer.
    async fn say(&mut self, command: &str) -> String {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        self.line().await
    }
}

#[tokio::test]
async fn the_binary_balances_and_answers_its_standard_input() {
    let (a, b) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
    );
    let mut running = Running::start(&[
        "balance",
        "--port",
        "0",
        "--upstream",
        &a.url,
        "--upstream",
        &b.url,
    ]);
    let first = running.line().await;
    let expected_tail = format!(" -> 1 {}, 2 {} (round-robin)", a.url, b.url);
    let address = first
        .strip_prefix("forkscope balance: http://")
        .and_then(|rest| rest.strip_suffix(&expected_tail))
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    let addr: SocketAddr = address.parse().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0);

    assert_eq!(
        running.say("status").await,
        format!(
            "ok 1 {} in 0 forwarded, 2 {} in 0 forwarded (round-robin)",
            a.url, b.url
        )
    );
    assert_eq!(running.say("next 2").await, format!("ok next 2 {}", b.url));
    assert_eq!(landings(addr, 3).await, ["b", "a", "b"]);
    assert_eq!(running.say("out 1").await, format!("ok out 1 {}", a.url));
    assert_eq!(landings(addr, 2).await, ["b", "b"]);
    assert_eq!(
        running.say(&format!("in {}", a.url)).await,
        format!("ok in 1 {}", a.url)
    );
    assert_eq!(
        running.say("status").await,
        format!(
            "ok 1 {} in 1 forwarded, 2 {} in 4 forwarded (round-robin)",
            a.url, b.url
        )
    );
    assert_eq!(
        running.say("drop").await,
        "error: unknown command \"drop\"; the commands are out, in, next, status"
    );
    assert_eq!(
        running.say("out 3").await,
        "error: no upstream \"3\": the upstreams are 1 to 2, or their URLs"
    );
    assert_eq!((a.requests(), b.requests()), (1, 4));
}

#[tokio::test]
async fn the_binary_refuses_an_upstream_that_is_not_http_host_port() {
    for (args, says) in [
        (
            &["balance", "--upstream", "https://127.0.0.1:1"][..],
            "is not http://HOST:PORT",
        ),
        (&["balance"][..], "no upstream to forward to"),
        (
            &[
                "balance",
                "--upstream",
                "http://127.0.0.1:1",
                "--upstream",
                "http://127.0.0.1:1/",
            ][..],
            "is upstream 1 (http://127.0.0.1:1) again",
        ),
    ] {
        let output = tokio::time::timeout(
            LIMIT,
            tokio::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
                .args(args)
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("it ends at once")
        .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.starts_with("forkscope balance: ") && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test]
async fn the_binary_keeps_balancing_after_its_input_ends_and_stops_on_a_signal() {
    let a = TestUpstream::start("a").await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .args(["balance", "--port", "0", "--upstream", &a.url])
        // As a script's background job has it: standard input is empty from the start.
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("forkscope starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(LIMIT, stdout.next_line())
        .await
        .expect("a line within the limit")
        .unwrap()
        .expect("the address line");
    let addr: SocketAddr = first
        .strip_prefix("forkscope balance: http://")
        .and_then(|rest| rest.split_once(' '))
        .map(|(addr, _)| addr.parse().unwrap())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    assert_eq!(landings(addr, 2).await, ["a", "a"]);
    let pid = child.id().expect("still running").to_string();
    let sent = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(sent.success());
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("it ends on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// Sticky mode learns a task from a `CreateTaskResult` that came as SSE (rmcp 3.11 frames every
/// answer so) as well as from JSON: every `tasks/get` naming it then goes where it was made.
#[tokio::test]
async fn sticky_learns_a_task_from_an_sse_answer_and_keeps_its_reads_there() {
    let (a, b) = (
        TestUpstream::start("a").await,
        TestUpstream::start("b").await,
    );
    let balancer = balancer(&[&a, &b], Mode::Sticky).await;
    let http = http();
    let created = http
        .post(format!("http://{}/task-sse", balancer.addr))
        .header("mcp-method", "tools/call")
        .body("{}")
        .send()
        .await
        .unwrap();
    let maker = who(created.headers());
    let body = created.text().await.unwrap();
    assert!(body.contains(&format!("{maker}-task")), "{body}");
    for _ in 0..4 {
        let read = http
            .post(format!("http://{}/mcp", balancer.addr))
            .header("mcp-method", "tasks/get")
            .header("mcp-name", format!("{maker}-task"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(who(read.headers()), maker, "a read went elsewhere");
    }
}

/// A client that stalls is cut off within the client timeout, as a replica does: a head that
/// never ends closes its connection, a body that never comes is answered 408. Neither reaches
/// an upstream.
#[tokio::test]
async fn a_stalled_client_is_cut_off_within_the_client_timeout() {
    use tokio::io::AsyncReadExt;
    let a = TestUpstream::start("a").await;
    let balancer = Balancer::start_bounded(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        vec![a.upstream()],
        Mode::RoundRobin,
        Duration::from_millis(300),
    )
    .await
    .unwrap();
    let read_all = |mut tcp: tokio::net::TcpStream| async move {
        let mut answer = Vec::new();
        tokio::time::timeout(LIMIT, tcp.read_to_end(&mut answer))
            .await
            .expect("the balancer never let go of a stalled client")
            .ok();
        String::from_utf8_lossy(&answer).into_owned()
    };
    // A body promised and never sent.
    let mut tcp = tokio::net::TcpStream::connect(balancer.addr).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\"")
        .await
        .unwrap();
    let answer = read_all(tcp).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A head never finished.
    let mut tcp = tokio::net::TcpStream::connect(balancer.addr).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let answer = read_all(tcp).await;
    assert!(!answer.contains("200"), "{answer}");
    assert_eq!(
        balancer.status()[0].forwarded,
        0,
        "nothing reached the upstream"
    );
}
