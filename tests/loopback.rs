//! Loopback integration tests: the real server, client and proxy on 127.0.0.1 with real
//! sockets. Synchronised on observed state, never on sleeps.

use forkscope::clock::LabClock;
use forkscope::incident;
use forkscope::lab::{Action, Lab, LabOptions};
use forkscope::wire::headers::MODELLED_REVISION;
use forkscope::wire::mcp::{self, Body as _};
use forkscope::wire::proxy::{Fault, Proxy};
use forkscope::wire::server::liveness::{KEEPALIVE_FRAME, Liveness};
use forkscope::wire::server::{self, RunningServer, ServeOptions};
use forkscope::wire::sse::{Parser, SseEvent};
use forkscope::wire::{Core, Shared};
use forkscope_core::client::Phase;
use forkscope_core::{
    AnomalyKind, Effect, LabConfig, OrphanCause, PayloadKey, Policy, Record, SessionId, StreamId,
    StreamIdentity,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// The seed incident, end to end.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_incident_over_http_naive_forks_and_duplicates() {
    let report = incident::run(Policy::Naive).await.unwrap();
    let v = &report.verdict;
    assert!(v.count(AnomalyKind::Fork) >= 1, "{v:?}");
    assert!(v.count(AnomalyKind::Duplicate) >= 1, "{v:?}");
    assert!(v.count(AnomalyKind::CursorDrift) >= 1, "{v:?}");
    assert_eq!(report.rejected_missing_token, 0, "naive never refuses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_incident_over_http_fenced_rejects_and_stays_clean() {
    let report = incident::run(Policy::Fenced).await.unwrap();
    assert!(report.verdict.clean, "{}", report.verdict.headline);
    assert_eq!(report.rejected_missing_token, 1);
    assert_eq!(report.applied, 44);
}

// ---------------------------------------------------------------------------------------------
// The lab: resume after a NAT drop, tool calls, faults.

async fn lab(policy: Policy) -> Lab {
    let options = LabOptions {
        policy,
        background: None,
        ..LabOptions::default()
    };
    let lab = Lab::start(options).await.unwrap();
    lab.wait_for(LIMIT, |c| {
        c.client.phase() == Phase::Connected && c.client.cursor().is_some()
    })
    .await
    .unwrap();
    lab
}

/// The tool-call side effects the client applied, in order.
fn applied_call_keys(core: &Core) -> Vec<String> {
    core.history
        .recent()
        .iter()
        .filter_map(|e| match &e.record {
            Record::Delivered {
                key, applied: true, ..
            } if key
                .parse::<PayloadKey>()
                .is_ok_and(|k| !matches!(k.effect(), Effect::Background { .. })) =>
            {
                Some(key.to_string())
            }
            _ => None,
        })
        .collect()
}

fn delivered(core: &Core) -> Vec<(u32, u64)> {
    core.history
        .recent()
        .iter()
        .filter_map(|e| match &e.record {
            Record::Delivered {
                event,
                applied: true,
                ..
            } => Some((event.stream.0, event.seq)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_resume_is_gap_free_and_exclusive_of_the_cursor() {
    let lab = lab(Policy::Fenced).await;
    for _ in 0..10 {
        lab.apply(Action::EmitBackground);
    }
    lab.wait_for(LIMIT, |c| c.client.applied() == 10)
        .await
        .unwrap();
    lab.apply(Action::DropConnection);
    lab.wait_for(LIMIT, |c| {
        matches!(c.client.phase(), Phase::Reconnecting { .. })
    })
    .await
    .unwrap();
    // Emitted while the client is away: written into the half-open void, kept for replay.
    for _ in 0..5 {
        lab.apply(Action::EmitBackground);
    }
    lab.wait_for(LIMIT, |c| c.client.applied() == 15)
        .await
        .unwrap();
    {
        let core = lab.core();
        assert!(core.client.cursor().unwrap().starts_with("s1-15."));
        assert_eq!(
            delivered(&core),
            (1..=15).map(|seq| (1, seq)).collect::<Vec<_>>(),
            "each once, in order"
        );
        assert_eq!(core.history.checker().counters().resumes_accepted, 1);
        assert!(
            core.history.verdict().clean,
            "{}",
            core.history.verdict().headline
        );
    }
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_orphans_the_stream_and_the_client_resumes_it() {
    let lab = lab(Policy::Fenced).await;
    for _ in 0..3 {
        lab.apply(Action::EmitBackground);
    }
    lab.wait_for(LIMIT, |c| c.client.applied() == 3)
        .await
        .unwrap();
    lab.apply(Action::Reset);
    lab.wait_for(LIMIT, |c| {
        c.history.checker().counters().resumes_accepted == 1
    })
    .await
    .unwrap();
    lab.apply(Action::EmitBackground);
    lab.wait_for(LIMIT, |c| c.client.applied() == 4)
        .await
        .unwrap();
    assert!(lab.core().history.verdict().clean);
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_call_streams_progress_then_its_result() {
    let lab = lab(Policy::Fenced).await;
    let result = lab.client().call_tool(5, 10).await.unwrap();
    assert_eq!(
        result
            .pointer("/result/content/0/text")
            .and_then(Value::as_str),
        Some("done: 5 steps")
    );
    {
        let core = lab.core();
        let keys = applied_call_keys(&core);
        assert_eq!(
            keys.len(),
            6,
            "five progress notifications and the result: {keys:?}"
        );
        let last: PayloadKey = keys.last().unwrap().parse().unwrap();
        assert!(matches!(last.effect(), Effect::Result { .. }));
        assert!(core.history.verdict().clean);
    }
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_labs_run_side_by_side() {
    let (naive, fenced) = tokio::join!(lab(Policy::Naive), lab(Policy::Fenced));
    assert_ne!(naive.server_addr(), fenced.server_addr());
    naive.apply(Action::EmitBackground);
    fenced.apply(Action::EmitBackground);
    naive
        .wait_for(LIMIT, |c| c.client.applied() == 1)
        .await
        .unwrap();
    fenced
        .wait_for(LIMIT, |c| c.client.applied() == 1)
        .await
        .unwrap();
    assert_eq!(naive.core().client.cursor(), Some("1"));
    assert!(fenced.core().client.cursor().unwrap().starts_with("s1-1."));
    naive.stop().await;
    fenced.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The server alone, driven by raw HTTP: every bad request gets a clear, typed answer and
// changes nothing.

struct Raw {
    shared: Shared,
    running: RunningServer,
    url: String,
    http: reqwest::Client,
}

/// The server with the seed's two-header model: the token co-validates the cursor.
async fn raw(policy: Policy) -> Raw {
    let config = LabConfig {
        identity: StreamIdentity::TokenHeader,
        ..LabConfig::default()
    };
    raw_with(policy, config, Arc::new(LabClock::new())).await
}

async fn raw_with(policy: Policy, config: LabConfig, clock: Arc<LabClock>) -> Raw {
    raw_with_options(policy, config, clock, ServeOptions::default()).await
}

async fn raw_with_options(
    policy: Policy,
    config: LabConfig,
    clock: Arc<LabClock>,
    options: ServeOptions,
) -> Raw {
    let core = Core::new(config, policy).unwrap();
    let shared = Shared::new(core);
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let running = server::start(shared.clone(), clock, options, addr)
        .await
        .unwrap();
    let url = format!("http://{}/mcp", running.addr);
    Raw {
        shared,
        running,
        url,
        http: reqwest::Client::new(),
    }
}

/// An open SSE response and its parser.
struct Stream {
    parser: Parser,
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    pending: std::collections::VecDeque<SseEvent>,
}

impl Stream {
    fn new(response: reqwest::Response) -> Self {
        Stream {
            parser: Parser::new(),
            body: Box::pin(response.bytes_stream()),
            pending: Default::default(),
        }
    }

    async fn next(&mut self) -> SseEvent {
        self.next_opt().await.expect("open")
    }

    /// The next event, or `None` when the stream ended.
    async fn next_opt(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout(LIMIT, self.body.next())
                .await
                .expect("an event")?
                .unwrap();
            self.pending.extend(self.parser.feed(&chunk).unwrap());
        }
    }
}

/// `initialize` with request id `id`, as the lab's clients send it.
fn initialize_request(id: u64) -> mcp::Request {
    let init = mcp::Initialize::new(MODELLED_REVISION, "t", "0");
    mcp::Request::new(mcp::RequestId(id), mcp::Call::Initialize(init))
}

impl Raw {
    fn endpoint(&self) -> mcp::Endpoint {
        mcp::Endpoint::new(self.http.clone(), self.url.clone())
    }

    async fn initialize(&self) -> SessionId {
        let response = self
            .endpoint()
            .post(mcp::Headers::default(), &initialize_request(1))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let session = mcp::response::session_id(response.headers()).unwrap();
        SessionId::parse(session).unwrap()
    }

    /// A `POST` of `body` as given (in `session`, if any): well-formed or not, as a test needs.
    fn post(&self, session: Option<SessionId>, body: String) -> reqwest::RequestBuilder {
        let id = session.map(|s| s.to_string());
        let headers = match &id {
            Some(id) => mcp::Headers::session(id, MODELLED_REVISION),
            None => mcp::Headers::default(),
        };
        self.endpoint().post_raw(headers, body)
    }

    fn get(
        &self,
        session: SessionId,
        token: Option<&str>,
        cursor: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let id = session.to_string();
        let headers = mcp::Headers::session(&id, MODELLED_REVISION)
            .cursor(cursor)
            .token(token);
        self.endpoint().get_stream(headers)
    }

    /// Opens the standalone stream, emits `n` events onto it and reads them; returns the token
    /// and the open stream.
    async fn stream_with(&self, session: SessionId, n: usize) -> (String, Stream) {
        let response = self.get(session, None, None).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["mcp-stream-id"], "s1");
        assert_eq!(response.headers()["mcp-stream-resumed"], "false");
        let token = response.headers()["mcp-resumption-token"]
            .to_str()
            .unwrap()
            .to_owned();
        let mut stream = Stream::new(response);
        let priming = stream.next().await;
        assert_eq!(
            (
                priming.id.as_deref(),
                priming.data.as_str(),
                priming.retry_ms
            ),
            (Some("s1-0"), "", Some(250))
        );
        for _ in 0..n {
            self.emit(session);
        }
        for seq in 1..=n {
            assert_eq!(stream.next().await.id, Some(format!("s1-{seq}")));
        }
        (token, stream)
    }

    fn emit(&self, session: SessionId) {
        let mut core = self.shared.lock();
        server::emit_background(&mut core, session, LabClock::new().now());
    }

    /// States and high-water marks of a session's streams.
    fn fingerprint(&self, session: SessionId) -> Vec<(StreamId, &'static str, u64)> {
        let core = self.shared.lock();
        let session = core.server.session(session).unwrap();
        session
            .streams()
            .iter()
            .map(|s| (s.id(), s.state().label(), s.high_water()))
            .collect()
    }
}

async fn rejection(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let reason = body
        .pointer("/error/data/reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    assert!(!message.is_empty(), "every refusal explains itself: {body}");
    (status, reason, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_twice_with_the_same_cursor_replays_the_same_events() {
    let raw = raw(Policy::Fenced).await;
    let session = raw.initialize().await;
    let (token, _first) = raw.stream_with(session, 8).await;
    let mut replays = Vec::new();
    for _ in 0..2 {
        let response = raw
            .get(session, Some(&token), Some("s1-5"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["mcp-stream-resumed"], "true");
        assert_eq!(response.headers()["mcp-stream-id"], "s1");
        let mut stream = Stream::new(response);
        let mut ids = Vec::new();
        for _ in 0..3 {
            let e = stream.next().await;
            ids.push((e.id.unwrap(), e.data));
        }
        replays.push(ids);
    }
    assert_eq!(replays[0], replays[1]);
    assert_eq!(
        replays[0]
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["s1-6", "s1-7", "s1-8"]
    );
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resumes_get_typed_errors_and_change_nothing() {
    let raw = raw(Policy::Fenced).await;
    let session = raw.initialize().await;
    let other = raw.initialize().await;
    let (token, _open) = raw.stream_with(session, 4).await;
    let (other_token, _other_open) = raw.stream_with(other, 0).await;
    let before = raw.fingerprint(session);
    let huge = "9".repeat(4_000);
    // (case, token, Last-Event-ID, session, status, reason)
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        SessionId,
        u16,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "cursor ahead",
            Some(&token),
            Some("s1-99"),
            session,
            416,
            "cursor_ahead",
        ),
        (
            "unknown token",
            Some("0123456789abcdef0123456789abcdef"),
            Some("s1-2"),
            session,
            410,
            "unknown_token",
        ),
        (
            "garbage token",
            Some("not a token"),
            Some("s1-2"),
            session,
            410,
            "unknown_token",
        ),
        (
            "token of another session",
            Some(&other_token),
            Some("s1-0"),
            session,
            403,
            "token_of_another_session",
        ),
        (
            "malformed Last-Event-ID",
            Some(&token),
            Some("s1-two"),
            session,
            400,
            "malformed_cursor",
        ),
        (
            "huge Last-Event-ID",
            Some(&token),
            Some(&huge),
            session,
            400,
            "malformed_cursor",
        ),
        (
            "cursor of another stream",
            Some(&token),
            Some("s7-1"),
            session,
            400,
            "cursor_not_on_stream",
        ),
        (
            "missing token",
            None,
            Some("s1-2"),
            session,
            428,
            "missing_token",
        ),
        (
            "missing Last-Event-ID",
            Some(&token),
            None,
            session,
            428,
            "missing_last_event_id",
        ),
    ];
    for (name, token, cursor, on, status, reason) in cases {
        let response = raw.get(on, token, cursor).send().await.unwrap();
        let (got_status, got_reason, _) = rejection(response).await;
        assert_eq!(
            (got_status, got_reason.as_str()),
            (status, reason),
            "{name}"
        );
        assert_eq!(raw.fingerprint(session), before, "{name} changed nothing");
    }
    // The healthy stream is still attached and still delivering.
    let attached = raw.shared.lock().io.connections_of(session, StreamId(1));
    assert_eq!(attached, 1);
    raw.running.stop().await;
}

/// `s1-03` would name the same event as `s1-3` if the server read numbers loosely: every
/// spelling but the one the server wrote is a malformed cursor, under both identity schemes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_resumes_only_in_the_spelling_the_server_wrote() {
    for identity in [StreamIdentity::TokenHeader, StreamIdentity::EventId] {
        let config = LabConfig {
            identity,
            ..LabConfig::default()
        };
        let raw = raw_with(Policy::Fenced, config, Arc::new(LabClock::new())).await;
        let session = raw.initialize().await;
        let response = raw.get(session, None, None).send().await.unwrap();
        let token = response.headers()["mcp-resumption-token"]
            .to_str()
            .unwrap()
            .to_owned();
        let mut open = Stream::new(response);
        let mut ids = vec![open.next().await.id.unwrap()];
        for _ in 0..5 {
            raw.emit(session);
        }
        for _ in 0..5 {
            ids.push(open.next().await.id.unwrap());
        }
        let issued = ids[3].clone();
        let key = issued
            .split_once('.')
            .map_or(String::new(), |(_, k)| format!(".{k}"));
        assert_eq!(issued, format!("s1-3{key}"), "{identity:?}");
        let before = raw.fingerprint(session);
        let spellings = ["s1-03", "s01-3", "s1-003", "s1-+3"];
        // With the token header, and alone as a stock client sends it.
        for (spelling, token) in spellings
            .iter()
            .flat_map(|s| [(s, Some(token.as_str())), (s, None)])
        {
            let cursor = format!("{spelling}{key}");
            let response = raw.get(session, token, Some(&cursor)).send().await.unwrap();
            // Checked before the body is read: an accepted resume is an SSE stream that never ends.
            assert_eq!(
                response.status(),
                400,
                "{identity:?} {cursor} (token: {}) must be refused as malformed",
                token.is_some()
            );
            let (status, reason, message) = rejection(response).await;
            assert_eq!(
                (status, reason.as_str()),
                (400, "malformed_cursor"),
                "{identity:?} {cursor}: {message}"
            );
            assert!(
                message.contains(&cursor[..cursor.len().min(24)]),
                "{message}"
            );
            assert_eq!(raw.fingerprint(session), before, "{cursor} changed nothing");
        }
        let response = raw
            .get(session, Some(&token), Some(&issued))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{identity:?}");
        assert_eq!(response.headers()["mcp-stream-resumed"], "true");
        let mut resumed = Stream::new(response);
        assert_eq!(resumed.next().await.id.as_ref(), Some(&ids[4]));
        assert_eq!(resumed.next().await.id.as_ref(), Some(&ids[5]));
        raw.running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors() {
    let raw = raw(Policy::Fenced).await;
    let session = raw.initialize().await;
    let unknown = SessionId::parse("0000000000000000000000000000beef").unwrap();
    let list = json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}).to_string();

    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(raw.get(unknown, None, None).send().await.unwrap()),
        404,
        "unknown session"
    );
    assert_eq!(
        status(raw.post(None, list.clone()).send().await.unwrap()),
        400,
        "no session id"
    );
    let bad_origin = raw
        .post(Some(session), list.clone())
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(status(bad_origin), 403, "bad Origin");
    let local_origin = raw
        .post(Some(session), list.clone())
        .header("origin", "http://localhost:5173")
        .send()
        .await
        .unwrap();
    assert_eq!(status(local_origin), 200, "a loopback Origin passes");
    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100_000)
    );
    assert_eq!(
        status(raw.post(Some(session), oversized).send().await.unwrap()),
        413,
        "oversized body"
    );
    let version = raw
        .post(Some(session), list.clone())
        .header("mcp-protocol-version", "1999-01-01")
        .send()
        .await
        .unwrap();
    assert_eq!(status(version), 400, "unsupported protocol version");
    let text = raw
        .post(Some(session), list.clone())
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(status(text), 415, "not JSON");
    assert_eq!(
        status(
            raw.post(Some(session), "{nope".into())
                .send()
                .await
                .unwrap()
        ),
        400,
        "parse error"
    );
    assert_eq!(
        status(
            raw.post(Some(session), format!("[{list}]"))
                .send()
                .await
                .unwrap()
        ),
        400,
        "batch"
    );
    let no_accept = raw
        .http
        .get(&raw.url)
        .header("mcp-session-id", session.to_string())
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(status(no_accept), 406, "GET must accept text/event-stream");
    let unknown_method = raw
        .post(
            Some(session),
            json!({"jsonrpc":"2.0","id":4,"method":"nope"}).to_string(),
        )
        .send()
        .await
        .unwrap();
    let body: Value = unknown_method.json().await.unwrap();
    assert_eq!(body.pointer("/error/code"), Some(&json!(-32601)));
    let bad_args = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"progress_task","arguments":{"steps":0}}});
    let body: Value = raw
        .post(Some(session), bad_args.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body.pointer("/error/code"), Some(&json!(-32602)));
    // Nothing above created a stream or a session.
    {
        let core = raw.shared.lock();
        assert_eq!(core.server.sessions().count(), 1);
        assert!(core.server.session(session).unwrap().streams().is_empty());
    }
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_the_session() {
    let raw = raw(Policy::Fenced).await;
    let session = raw.initialize().await;
    let (_token, _stream) = raw.stream_with(session, 1).await;
    let id = session.to_string();
    let delete = raw
        .endpoint()
        .delete(mcp::Headers::session(&id, MODELLED_REVISION))
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 204);
    assert_eq!(
        raw.get(session, None, None).send().await.unwrap().status(),
        404
    );
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stream_waits_for_the_orphans_grace_window() {
    let raw = raw(Policy::Fenced).await;
    let session = raw.initialize().await;
    let (_token, _open) = raw.stream_with(session, 1).await;
    let response = raw.get(session, None, None).send().await.unwrap();
    assert!(response.headers().contains_key("retry-after"));
    let (status, reason, _) = rejection(response).await;
    assert_eq!((status, reason.as_str()), (409, "orphan_still_live"));
    raw.running.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The reference server: stock-client resumes, resumable tool calls, an event-driven driver.

impl Raw {
    /// `tools/call progress_task`; returns the open response.
    async fn call(&self, session: SessionId, steps: u64, delay_ms: u64) -> reqwest::Response {
        // Each call its own id: two in flight under one id are refused.
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(7);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let call = mcp::ToolCall::with_progress(
            "progress_task",
            json!({ "steps": steps, "delay_ms": delay_ms }),
            mcp::ProgressToken::Text("p".into()),
        );
        let body = mcp::Request::new(mcp::RequestId(id), mcp::Call::ToolsCall(call));
        let response = self.post(Some(session), body.body()).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response
    }

    fn stream_state(&self, session: SessionId, stream: StreamId) -> Option<&'static str> {
        let core = self.shared.lock();
        let state = core.server.session(session)?.stream(stream)?.state();
        Some(state.label())
    }
}

/// Reads a stream to its end: every event's (id, progress value or "result").
async fn read_to_end(response: reqwest::Response) -> Vec<(String, String)> {
    let mut parser = Parser::new();
    let mut body = response.bytes_stream();
    let mut events = Vec::new();
    while let Some(chunk) = tokio::time::timeout(LIMIT, body.next())
        .await
        .expect("the stream ends")
    {
        for e in parser.feed(&chunk.unwrap()).unwrap() {
            let what = if e.data.is_empty() {
                "priming".to_owned()
            } else {
                let v: Value = serde_json::from_str(&e.data).unwrap();
                match v.pointer("/params/progress") {
                    Some(p) => p.to_string(),
                    None if v.get("result").is_some() => "result".to_owned(),
                    None => v.to_string(),
                }
            };
            events.push((e.id.unwrap_or_default(), what));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_client_resumes_with_last_event_id_alone() {
    let raw = raw_with(
        Policy::Fenced,
        LabConfig::default(),
        Arc::new(LabClock::new()),
    )
    .await;
    let session = raw.initialize().await;
    let response = raw.get(session, None, None).send().await.unwrap();
    let mut first = Stream::new(response);
    let priming = first.next().await;
    let mut ids = vec![priming.id.unwrap()];
    for _ in 0..5 {
        raw.emit(session);
    }
    for _ in 0..5 {
        ids.push(first.next().await.id.unwrap());
    }
    assert!(ids[3].starts_with("s1-3."), "keyed ids: {ids:?}");
    // What a stock SDK client sends: session, version, Accept, Last-Event-ID. No token.
    let response = raw.get(session, None, Some(&ids[3])).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["mcp-stream-resumed"], "true");
    let mut resumed = Stream::new(response);
    assert_eq!(resumed.next().await.id.as_ref(), Some(&ids[4]));
    assert_eq!(resumed.next().await.id.as_ref(), Some(&ids[5]));
    // The old connection was detached atomically with the resume: it gets a last retry: and
    // ends, and the next emit goes to the resumed connection only.
    raw.emit(session);
    while let Some(late) = first.next_opt().await {
        assert!(
            late.data.is_empty(),
            "nothing more on the old connection: {late:?}"
        );
    }
    assert!(resumed.next().await.id.unwrap().starts_with("s1-6."));
    assert_eq!(raw.shared.lock().io.connections_of(session, StreamId(1)), 1);
    // A forged token in the id resumes nothing, and changes nothing.
    let forged = "s1-3.AAAAAAAAAAA";
    let (status, reason, _) =
        rejection(raw.get(session, None, Some(forged)).send().await.unwrap()).await;
    assert_eq!((status, reason.as_str()), (410, "unknown_token"));
    assert_eq!(raw.shared.lock().io.connections_of(session, StreamId(1)), 1);
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_tool_call_is_resumable_within_retention_then_refused() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let raw = raw_with(Policy::Fenced, LabConfig::default(), clock.clone()).await;
    let session = raw.initialize().await;
    // delay_ms 0 on a paused clock: no lab time passes, yet every step and the result arrive.
    let events = read_to_end(raw.call(session, session_steps(), 0).await).await;
    assert_eq!(
        events.len(),
        session_steps() as usize + 2,
        "priming, steps, result"
    );
    assert_eq!(events.last().unwrap().1, "result");
    let stream = StreamId(1); // the session's first stream: no GET was opened
    assert_eq!(raw.stream_state(session, stream), Some("finished"));
    // Resume from the priming event (a client cut off at once): every step and the result,
    // once each, then the stream ends.
    let priming = events[0].0.clone();
    for _ in 0..2 {
        let response = raw.get(session, None, Some(&priming)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["mcp-stream-resumed"], "true");
        let replay = read_to_end(response).await;
        assert_eq!(
            replay,
            events[1..].to_vec(),
            "the same continuation, every time"
        );
    }
    // From the last progress step: only the result.
    let before_result = events[events.len() - 2].0.clone();
    let replay = read_to_end(
        raw.get(session, None, Some(&before_result))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(replay.len(), 1);
    assert_eq!(replay[0].1, "result");
    // Past retention the driver closes it (woken by the clock), and a resume is refused.
    clock.advance(LabConfig::default().retention_ms);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while raw.stream_state(session, stream) != Some("closed") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "retention never ended"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (status, reason, _) =
        rejection(raw.get(session, None, Some(&priming)).send().await.unwrap()).await;
    assert_eq!((status, reason.as_str()), (410, "stream_closed"));
    raw.running.stop().await;
}

/// A long call whose every event still fits the replay buffer (1,024).
fn session_steps() -> u64 {
    1_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_ms_is_honoured_exactly_in_lab_time() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let raw = raw_with(Policy::Fenced, LabConfig::default(), clock.clone()).await;
    let session = raw.initialize().await;
    let mut stream = Stream::new(raw.call(session, 5, 100).await);
    assert_eq!(stream.next().await.data, "", "priming");
    let progress = |e: SseEvent| -> u64 {
        let v: Value = serde_json::from_str(&e.data).unwrap();
        v.pointer("/params/progress")
            .and_then(Value::as_u64)
            .unwrap()
    };
    // 350 ms of lab time: steps due at 100, 200 and 300 — three, no more.
    clock.advance(350);
    for want in 1..=3 {
        assert_eq!(progress(stream.next().await), want);
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(50), stream.next_opt())
            .await
            .is_err(),
        "step 4 is not due until 400 ms"
    );
    clock.advance(250);
    assert_eq!(progress(stream.next().await), 4);
    assert_eq!(progress(stream.next().await), 5);
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_cut_mid_call_resumes_and_applies_everything_once() {
    let options = LabOptions {
        policy: Policy::Fenced,
        background: None,
        tool_steps: 20,
        tool_delay_ms: 20,
        ..LabOptions::default()
    };
    let lab = Lab::start(options).await.unwrap();
    lab.wait_for(LIMIT, |c| c.client.phase() == Phase::Connected)
        .await
        .unwrap();
    lab.apply(Action::StartToolCall);
    lab.wait_for(LIMIT, |c| {
        c.client.requests().first().is_some_and(|r| r.applied >= 5)
    })
    .await
    .unwrap();
    lab.apply(Action::DropConnection);
    lab.wait_for(LIMIT, |c| {
        c.client
            .requests()
            .first()
            .is_some_and(|r| r.phase == forkscope_core::client::RequestPhase::Done)
    })
    .await
    .unwrap();
    {
        let core = lab.core();
        let request = &core.client.requests()[0];
        assert!(request.resumes >= 1, "{request:?}");
        assert_eq!(request.applied, 21, "20 progress steps and the result");
        let mut keys = applied_call_keys(&core);
        let total = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!((total, keys.len()), (21, 21), "each applied exactly once");
        assert!(
            core.history.verdict().clean,
            "{}",
            core.history.verdict().headline
        );
    }
    lab.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Hardening: JSON-RPC edges, header hygiene, cancellation.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_edges_get_typed_answers_with_the_request_id() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let raw = raw_with(Policy::Fenced, LabConfig::default(), clock).await;
    let session = raw.initialize().await;
    let post = |body: Value| raw.post(Some(session), body.to_string()).send();
    let error_of = |v: &Value| {
        (
            v.pointer("/id").cloned().unwrap_or(Value::Null),
            v.pointer("/error/code").and_then(Value::as_i64),
        )
    };
    // A method that is not a string is an invalid request, not a notification.
    let r = post(json!({"jsonrpc":"2.0","id":3,"method":5}))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        error_of(&r.json::<Value>().await.unwrap()),
        (json!(3), Some(-32600))
    );
    // Arguments that are not an object, a huge progress token, a call that would run for
    // days: invalid params, answered to the request.
    for (id, params) in [
        (4, json!({"name":"progress_task","arguments":[1,2]})),
        (5, json!({"name":"progress_task","arguments":"steps=3"})),
        (
            6,
            json!({"name":"progress_task","arguments":{"steps":3},"_meta":{"progressToken":"x".repeat(60_000)}}),
        ),
        (
            7,
            json!({"name":"progress_task","arguments":{"steps":10_000,"delay_ms":60_000}}),
        ),
    ] {
        let r = post(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params}))
            .await
            .unwrap();
        let body: Value = r.json().await.unwrap();
        assert_eq!(error_of(&body), (json!(id), Some(-32602)), "{body}");
    }
    // tools/call answers with SSE: a client that accepts only JSON is told so.
    let r = raw
        .http
        .post(&raw.url)
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .header("mcp-session-id", session.to_string())
        .header("mcp-protocol-version", "2025-11-25")
        .body(
            json!({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"progress_task"}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    assert_eq!(
        error_of(&r.json::<Value>().await.unwrap()),
        (json!(8), Some(-32600))
    );
    // A body over 64 KiB: 413, as JSON-RPC.
    let big = json!({"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"x".repeat(70_000)}});
    let r = post(big).await.unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body.pointer("/error/code").and_then(Value::as_i64),
        Some(-32600)
    );
    // The session's 17th open stream is refused, and the refusal carries the request id.
    let max = LabConfig::default().max_streams_per_session;
    let mut open = Vec::new();
    for _ in 0..max {
        open.push(raw.call(session, 5, 100).await);
    }
    let r = post(json!({"jsonrpc":"2.0","id":"seventeen","method":"tools/call","params":{"name":"progress_task","arguments":{"steps":5,"delay_ms":100}}}))
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["id"], json!("seventeen"));
    drop(open);
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_are_never_silently_absent_or_doubled() {
    let raw = raw_with(
        Policy::Fenced,
        LabConfig::default(),
        Arc::new(LabClock::new()),
    )
    .await;
    let session = raw.initialize().await;
    let response = raw.get(session, None, None).send().await.unwrap();
    let mut stream = Stream::new(response);
    let priming = stream.next().await.id.unwrap();
    let before = raw.fingerprint(session);
    let bad = reqwest::header::HeaderValue::from_bytes(b"s1-0.\xff\xfe").unwrap();
    // An unreadable Last-Event-ID is a malformed cursor, not a request for a new stream.
    let r = raw
        .get(session, None, None)
        .header("last-event-id", bad.clone())
        .send()
        .await
        .unwrap();
    let (status, reason, _) = rejection(r).await;
    assert_eq!((status, reason.as_str()), (400, "malformed_cursor"));
    // An unreadable token is an unknown token, not a missing one.
    let r = raw
        .get(session, None, Some(&priming))
        .header("mcp-resumption-token", bad)
        .send()
        .await
        .unwrap();
    let (status, reason, _) = rejection(r).await;
    assert_eq!((status, reason.as_str()), (410, "unknown_token"));
    // Two copies of an identity header: refused, whichever copy is the valid one.
    for (first, second) in [(priming.as_str(), "s9-9"), ("s9-9", priming.as_str())] {
        let r = raw
            .get(session, None, None)
            .header("last-event-id", first)
            .header("last-event-id", second)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{first} + {second}");
    }
    let r = raw
        .get(session, None, None)
        .header("mcp-session-id", session.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "two Mcp-Session-Id headers");
    // HEAD mints nothing.
    let r = raw
        .http
        .head(&raw.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session.to_string())
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(raw.fingerprint(session), before, "refusals changed nothing");
    assert_eq!(raw.shared.lock().io.connections_of(session, StreamId(1)), 1);
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_tool_call_stops_and_sends_no_result() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let raw = raw_with(Policy::Fenced, LabConfig::default(), clock.clone()).await;
    let session = raw.initialize().await;
    let body = json!({"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":{"name":"progress_task","arguments":{"steps":50,"delay_ms":100},"_meta":{"progressToken":"p"}}});
    let response = raw
        .post(Some(session), body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    clock.advance(250);
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call-1","reason":"user"}});
    let r = raw
        .post(Some(session), cancel.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let events = read_to_end(response).await;
    assert!(
        events.iter().all(|(_, what)| what != "result"),
        "{events:?}"
    );
    assert!(
        events.len() <= 3,
        "priming and at most two steps: {events:?}"
    );
    assert_eq!(raw.shared.lock().io.running_tool_calls(), 0);
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_reclaimed_and_a_full_server_says_when() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let config = LabConfig {
        max_sessions: 2,
        session_idle_ms: 1_000,
        ..LabConfig::default()
    };
    let raw = raw_with(Policy::Fenced, config, clock.clone()).await;
    raw.initialize().await;
    raw.initialize().await;
    let full = raw
        .post(None, initialize_request(1).body())
        .send()
        .await
        .unwrap();
    assert_eq!(full.status(), 503);
    assert_eq!(full.headers()["retry-after"], "1");
    // The driver is woken by the clock and ends both idle sessions.
    clock.advance(1_000);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while raw.shared.lock().server.sessions().count() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle sessions never expired"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    raw.initialize().await;
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_never_harms_a_healthy_stream() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let raw = raw_with(Policy::Fenced, LabConfig::default(), clock.clone()).await;
    let session = raw.initialize().await;
    let mut healthy = Stream::new(raw.get(session, None, None).send().await.unwrap());
    assert_eq!(healthy.next().await.data, "", "priming");
    let before = raw.fingerprint(session);
    // A tokenless GET (a second tab, a confused retry layer) while the stream is attached.
    let (status, reason, _) = rejection(raw.get(session, None, None).send().await.unwrap()).await;
    assert_eq!((status, reason.as_str()), (409, "orphan_still_live"));
    assert_eq!(
        raw.fingerprint(session),
        before,
        "the refusal changed nothing"
    );
    // Well past any grace window, the healthy stream is still live and still delivering.
    clock.advance(LabConfig::default().grace_ms * 2);
    raw.emit(session);
    assert!(healthy.next().await.id.unwrap().starts_with("s1-1."));
    assert_eq!(raw.fingerprint(session), vec![(StreamId(1), "live", 1)]);
    raw.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let shared = Shared::new(Core::new(LabConfig::default(), Policy::Fenced).unwrap());
    let options = ServeOptions {
        request_read_timeout: Duration::from_millis(200),
        ..ServeOptions::default()
    };
    let running = server::start(
        shared,
        Arc::new(LabClock::new()),
        options,
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let addr = running.addr;
    // Headers trickled and never finished: the server hangs up instead of waiting forever.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, slow.read_to_end(&mut answer))
        .await
        .expect("the server closes a connection whose headers never finish")
        .unwrap();
    // A POST whose body never arrives: 408, as JSON-RPC.
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(LIMIT, stalled.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"jsonrpc\":\"2.0\""), "{text}");
    // The connection cap: tests/hardening.rs.
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_client_follows_a_server_that_sends_no_truth() {
    use forkscope::lab::Exchanges;
    use forkscope::wire::client::LabClient;
    let server_core = Shared::new(Core::new(LabConfig::default(), Policy::Fenced).unwrap());
    let options = ServeOptions {
        truth_comments: false,
        ..ServeOptions::default()
    };
    let clock = Arc::new(LabClock::new());
    let running = server::start(
        server_core.clone(),
        clock.clone(),
        options,
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    // The client has a core of its own: nothing but the wire connects the two.
    let client_core = Shared::new(Core::new(LabConfig::default(), Policy::Fenced).unwrap());
    let client = LabClient::new(
        format!("http://{}/mcp", running.addr),
        client_core.clone(),
        clock.clone(),
        Arc::new(Exchanges::default()),
    );
    let task = tokio::spawn(client.clone().run());
    let deadline = tokio::time::Instant::now() + LIMIT;
    while client_core.lock().client.cursor().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "never connected");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let session = client.session().unwrap();
    for _ in 0..3 {
        server::emit_background(&mut server_core.lock(), session, clock.now());
    }
    while client_core.lock().client.applied() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "events never applied"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    {
        let core = client_core.lock();
        assert!(core.client.cursor().unwrap().starts_with("s1-3."));
        assert_eq!(core.client.applied(), 3);
        assert!(
            core.history.verdict().clean,
            "no truth, no invented anomalies"
        );
    }
    task.abort();
    running.stop().await;
}

/// One budget holds the replay memory of every session: past it, `initialize` and `tools/call`
/// get a typed 503 with Retry-After (the call's id echoed), and retention running out frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_budget_refuses_new_work_with_a_typed_error_until_memory_is_freed() {
    let clock = Arc::new(LabClock::new());
    clock.set_paused(true);
    let config = LabConfig {
        replay_buffer_bytes: 16 * 1024,
        replay_budget_bytes: 16 * 1024,
        retention_ms: 3_000,
        ..LabConfig::default()
    };
    let raw = raw_with(Policy::Fenced, config, clock.clone()).await;
    let session = raw.initialize().await;
    // 300 progress events of ~200 bytes: more than the whole budget.
    let events = read_to_end(raw.call(session, 300, 0).await).await;
    assert_eq!(events.last().unwrap().1, "result");
    assert!(raw.shared.lock().server.replay_bytes() > 8 * 1024);
    let call = mcp::ToolCall::plain("progress_task", json!({ "steps": 1 }));
    let call = mcp::Request::new(mcp::RequestId(77), mcp::Call::ToolsCall(call));
    let refused = raw.post(Some(session), call.body()).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "3");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["id"], 77, "{body}");
    assert_eq!(body["error"]["data"]["reason"], "over_budget", "{body}");
    let refused = raw
        .post(None, initialize_request(5).body())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "3");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        (body["id"].clone(), body["error"]["data"]["reason"].clone()),
        (json!(5), json!("over_budget"))
    );
    // Retention ends: the finished call's memory goes, new work is admitted again.
    clock.advance(3_000);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while raw.shared.lock().server.replay_bytes() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "never freed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let events = read_to_end(raw.call(session, 3, 0).await).await;
    assert_eq!(events.last().unwrap().1, "result");
    raw.running.stop().await;
}

/// Fast liveness rules for the tests (lab milliseconds; the lab clock runs in real time).
fn quick_liveness() -> ServeOptions {
    ServeOptions {
        liveness: Liveness {
            keepalive_ms: Some(50),
            write_deadline_ms: Some(300),
        },
        ..ServeOptions::default()
    }
}

/// Why the stream's grace window started, once it has.
fn orphan_cause(raw: &Raw, session: SessionId) -> Option<OrphanCause> {
    let core = raw.shared.lock();
    core.history.recent().iter().find_map(|e| match &e.record {
        Record::Orphaned {
            session: s, cause, ..
        } if *s == session => Some(*cause),
        _ => None,
    })
}

/// A NAT drop is noticed from the connection itself, even on an idle stream: the proxy stops
/// reading, the server's keep-alive comments go unacknowledged, and past the write deadline
/// the stream is orphaned as `writes_stalled` — with no other request arriving. Before
/// liveness the stream stayed live for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nat_dropped_stream_is_orphaned_by_its_stalled_writes() {
    let raw = raw_with_options(
        Policy::Fenced,
        LabConfig::default(),
        Arc::new(LabClock::new()),
        quick_liveness(),
    )
    .await;
    let proxy = Proxy::start(raw.running.addr).await.unwrap();
    let session = raw.initialize().await;
    let through_proxy = mcp::Endpoint::new(raw.http.clone(), format!("http://{}/mcp", proxy.addr));
    let id = session.to_string();
    let response = through_proxy
        .get_stream(mcp::Headers::session(&id, MODELLED_REVISION))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = Stream::new(response);
    stream.next().await; // priming
    proxy.inject(Fault::Drop);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while orphan_cause(&raw, session).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled stream was never orphaned"
        );
        // Nothing is emitted: the keep-alive comments alone back up.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        orphan_cause(&raw, session),
        Some(OrphanCause::WritesStalled)
    );
    assert_eq!(raw.stream_state(session, StreamId(1)), Some("orphaned"));
    assert_eq!(raw.shared.lock().io.open_connections(), 0, "cut off");
    raw.running.stop().await;
}

/// An idle stream gets keep-alive comments, and a reader that keeps reading is never judged
/// stalled, however long nothing happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_healthy_stream_gets_keep_alives_and_stays_live() {
    let raw = raw_with_options(
        Policy::Fenced,
        LabConfig::default(),
        Arc::new(LabClock::new()),
        quick_liveness(),
    )
    .await;
    let session = raw.initialize().await;
    let response = raw.get(session, None, None).send().await.unwrap();
    let mut body = Box::pin(response.bytes_stream());
    let mut seen = Vec::new();
    // Ten keep-alives: two write deadlines' worth of idleness at least.
    while seen
        .windows(KEEPALIVE_FRAME.len())
        .filter(|w| *w == KEEPALIVE_FRAME)
        .count()
        < 10
    {
        let chunk = tokio::time::timeout(LIMIT, body.next())
            .await
            .expect("keep-alives")
            .expect("open")
            .unwrap();
        seen.extend_from_slice(&chunk);
    }
    assert_eq!(orphan_cause(&raw, session), None);
    assert_eq!(raw.stream_state(session, StreamId(1)), Some("live"));
    // A standard SSE parser sees no event in them.
    let events = Parser::new().feed(&seen).unwrap();
    assert_eq!(events.len(), 1, "only the priming event: {events:?}");
    raw.running.stop().await;
}
