//! `forkscope probe` against forkscope's own server over real loopback sockets: fenced holds in
//! every case, naive is caught forking, and bad input is refused before anything is sent.

use forkscope::clock::LabClock;
use forkscope::probe::{self, Options, Outcome, ProbeError};
use forkscope::wire::server::background::EmitRate;
use forkscope::wire::server::{self, RunningServer, ServeOptions};
use forkscope::wire::{Core, Shared};
use forkscope_core::{LabConfig, Policy};
use std::net::SocketAddr;
use std::sync::Arc;

async fn serve(policy: Policy) -> RunningServer {
    let core = Core::new(LabConfig::default(), policy).unwrap();
    let options = ServeOptions {
        background: Some(EmitRate::every_ms(20)),
        ..ServeOptions::default()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    server::start(Shared::new(core), Arc::new(LabClock::new()), options, addr)
        .await
        .unwrap()
}

fn options(url: String) -> Options {
    Options {
        url,
        repeat: 1,
        tool: None,
        args: None,
        count_arg: None,
        standalone_tool: None,
        standalone_args: None,
        standalone_count_arg: None,
        only: None,
        allow_remote: false,
        window_ms: 5_000,
        faults: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_server_holds_in_every_case() {
    let running = serve(Policy::Fenced).await;
    let report = probe::probe(&options(format!("http://{}/mcp", running.addr)))
        .await
        .unwrap();
    let text = probe::text(&report);
    assert_eq!(report.cases.len(), probe::cases::CASES.len(), "{text}");
    for case in &report.cases {
        // The fault cases need the user's commands (fault_cases_without_their_commands_…).
        if probe::cases::is_fault_case(case.case) {
            assert!(matches!(case.outcome, Outcome::NotRun), "{text}");
            continue;
        }
        assert!(
            matches!(case.outcome, Outcome::Holds),
            "{} did not hold:\n{text}",
            case.case
        );
    }
    assert!(!report.violated());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_server_is_caught_forking() {
    let running = serve(Policy::Naive).await;
    let mut opts = options(format!("http://{}/mcp", running.addr));
    opts.only = Some(vec![
        "resume-while-old-open".into(),
        "bogus-cursor".into(),
        "unknown-session".into(),
    ]);
    let report = probe::probe(&opts).await.unwrap();
    let text = probe::text(&report);
    let verdict = |name: &str| {
        report
            .cases
            .iter()
            .find(|c| c.case == name)
            .and_then(|c| c.verdict)
    };
    assert_eq!(
        verdict("resume-while-old-open"),
        Some("two_live_streams"),
        "{text}"
    );
    assert_eq!(
        verdict("bogus-cursor"),
        Some("silent_empty_stream"),
        "{text}"
    );
    assert_eq!(
        verdict("unknown-session"),
        Some("typed_rejection"),
        "{text}"
    );
    assert!(report.violated());
    assert!(
        text.contains("VIOLATED       resume-while-old-open"),
        "{text}"
    );
    // The evidence names both connections and what each received.
    assert!(text.contains("A GET → 200 stream"), "{text}");
    running.stop().await;
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let refuse = |url: &str| {
        let opts = options(url.into());
        async move { probe::probe(&opts).await.unwrap_err() }
    };
    assert!(matches!(
        refuse("http://192.0.2.1/mcp").await,
        ProbeError::Remote { .. }
    ));
    assert!(matches!(
        refuse("ftp://127.0.0.1/mcp").await,
        ProbeError::BadUrl(_)
    ));
    assert!(matches!(refuse("not a url").await, ProbeError::BadUrl(_)));
    // Nobody listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert!(matches!(
        refuse(&format!("http://127.0.0.1:{port}/mcp")).await,
        ProbeError::Unreachable(_)
    ));
    let mut opts = options("http://127.0.0.1:1/mcp".into());
    opts.only = Some(vec!["no-such-case".into()]);
    assert!(matches!(
        probe::probe(&opts).await.unwrap_err(),
        ProbeError::UnknownCase { .. }
    ));
    let mut opts = options("http://127.0.0.1:1/mcp".into());
    opts.tool = Some("t".into());
    opts.args = Some("[1]".into());
    assert!(matches!(
        probe::probe(&opts).await.unwrap_err(),
        ProbeError::BadArgs(_)
    ));
}

#[test]
fn an_expectations_file_is_checked_word_by_word() {
    let dir = std::env::temp_dir().join(format!("forkscope-expect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let typo = write("typo.toml", "[cases]\ncall-resume = \"gapp\"\n");
    let err = probe::expect::load(&typo).unwrap_err().to_string();
    assert!(err.contains("`gapp`, which is not a verdict"), "{err}");
    let unknown = write("unknown.toml", "[cases]\nno-such-case = \"gap\"\n");
    assert!(
        probe::expect::load(&unknown)
            .unwrap_err()
            .to_string()
            .contains("no case named no-such-case")
    );
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/probe");
    for entry in std::fs::read_dir(shipped).unwrap() {
        let path = entry.unwrap().path();
        let expected = probe::expect::load(&path).unwrap();
        // Every shipped file speaks of every case, so a new case must be written down.
        assert_eq!(
            expected.cases.len(),
            probe::cases::CASES.len(),
            "{}",
            path.display()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `forkscope serve` behind a proxy that renames its tool as another server might:
/// `progress_task {steps, delay_ms}` is offered as `countdown {count, pause_ms}`. Requests are
/// renamed back on the way in, so the server sees its own names.
async fn renamed(upstream: SocketAddr) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    proxied(upstream, false).await
}

/// [`renamed`], and with `unlabelled` the label taken out of every `emit_standalone` event
/// (`urn:forkscope-probe:LABEL:7` reads `urn:forkscope-probe:7`), as a server whose emitter
/// does not echo one sends them.
async fn proxied(
    upstream: SocketAddr,
    unlabelled: bool,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::response::Response;
    use futures_util::StreamExt;
    fn swap(text: &str, pairs: &[(&str, &str)]) -> String {
        pairs
            .iter()
            .fold(text.to_owned(), |t, (a, b)| t.replace(a, b))
    }
    async fn forward(
        State((upstream, unlabelled)): State<(SocketAddr, bool)>,
        req: Request,
    ) -> Response {
        let client = reqwest::Client::new();
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        let body = swap(
            &String::from_utf8_lossy(&body),
            &[
                ("\"countdown\"", "\"progress_task\""),
                ("\"count\"", "\"steps\""),
                ("\"pause_ms\"", "\"delay_ms\""),
            ],
        );
        let mut out = client.request(
            parts.method.clone(),
            format!("http://{upstream}{}", parts.uri.path()),
        );
        for (name, value) in &parts.headers {
            if name != "host" && name != "content-length" {
                out = out.header(name, value);
            }
        }
        let resp = out.body(body).send().await.unwrap();
        let mut answer = Response::builder().status(resp.status());
        for (name, value) in resp.headers() {
            if name != "content-length" {
                answer = answer.header(name, value);
            }
        }
        // Each chunk renamed on its own: the tool list is one small JSON body.
        let label = regex::Regex::new(r#"urn:forkscope-probe:[^:"]*:"#).unwrap();
        let stream = resp.bytes_stream().map(move |chunk| {
            chunk.map(|bytes| {
                let text = swap(
                    &String::from_utf8_lossy(&bytes),
                    &[
                        ("\"progress_task\"", "\"countdown\""),
                        ("\"steps\"", "\"count\""),
                        ("\"delay_ms\"", "\"pause_ms\""),
                    ],
                );
                if unlabelled {
                    label
                        .replace_all(&text, "urn:forkscope-probe:")
                        .into_owned()
                } else {
                    text
                }
            })
        });
        answer.body(Body::from_stream(stream)).unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(forward)
        .with_state((upstream, unlabelled));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_under_another_name_is_found_by_its_schema_and_used() {
    let running = serve(Policy::Fenced).await;
    let (proxy, task) = renamed(running.addr).await;
    let mut opts = options(format!("http://{proxy}/mcp"));
    opts.only = Some(vec![
        "call-resume".into(),
        "call-resume-after-result".into(),
        "burst-order".into(),
    ]);
    let report = probe::probe(&opts).await.unwrap();
    let text = probe::text(&report);
    let tool = report.call_tool.as_deref().unwrap_or_default();
    assert!(
        tool.starts_with("countdown (count arg `count`, pace arg `pause_ms`): chosen because"),
        "{text}"
    );
    assert!(text.contains("  tool: countdown"), "{text}");
    for case in &report.cases {
        assert!(
            matches!(case.outcome, Outcome::Holds),
            "{} did not hold:\n{text}",
            case.case
        );
        // Observed, not vacuous: events on both sides of the break, or a whole burst.
        assert!(!case.why.contains(", 0 after it"), "{text}");
    }
    // The burst's size reached the server through the renamed count argument.
    let burst = report
        .cases
        .iter()
        .find(|c| c.case == "burst-order")
        .unwrap();
    assert!(burst.why.starts_with("501 events"), "{text}");
    task.abort();
    running.stop().await;
}

/// The 2026-07-28 task cases: naive makes a second task for a re-issued call (the double
/// effect) and loses a task's end in a listen gap, the fence holds every case; the SDK policies offer what their SDKs offer — mcp 2.3.0 speaks the revision
/// without tasks, the TypeScript v1 SDK does not speak it — so the cases say why they did not
/// judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_cases_find_naives_second_task_and_lost_end_hold_under_the_fence_and_skip_what_an_sdk_does_not_offer()
 {
    let task_cases: Vec<String> = probe::cases::CASES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| name.starts_with("task-") && !probe::cases::is_fault_case(name))
        .map(str::to_owned)
        .collect();
    assert_eq!(task_cases.len(), 6);
    for (policy, expected) in [
        (
            Policy::Naive,
            [
                "second_task",
                "second_task",
                "known_on_every_read",
                "terminal_once",
                "terminal_once",
                "lost_in_gap",
            ],
        ),
        (
            Policy::Fenced,
            [
                "one_task",
                "typed_error",
                "known_on_every_read",
                "terminal_once",
                "terminal_once",
                "told_on_relisten",
            ],
        ),
        (
            Policy::PythonSdk,
            [
                "not_exercised",
                "not_run",
                "not_run",
                "not_run",
                "not_run",
                "not_run",
            ],
        ),
        (Policy::TsSdk, ["not_run"; 6]),
    ] {
        let running = serve(policy).await;
        let mut opts = options(format!("http://{}/mcp", running.addr));
        opts.only = Some(task_cases.clone());
        let report = probe::probe(&opts).await.unwrap();
        let text = probe::text(&report);
        let found: Vec<&str> = report
            .cases
            .iter()
            .map(|c| c.verdict.unwrap_or("not_run"))
            .collect();
        assert_eq!(found, expected, "{policy}:\n{text}");
        assert_eq!(report.violated(), policy == Policy::Naive, "{text}");
        if policy == Policy::Naive {
            assert!(text.contains("the work runs twice"), "{text}");
        } else {
            assert!(report.cases.iter().all(|c| !c.why.is_empty()), "{text}");
        }
        running.stop().await;
    }
}

/// A server of 2026-07-28 alone answers no `initialize`: the probe finds it by `server/discover`
/// and lists its tools statelessly, runs the task cases, and says of every resume case that it
/// was not run, and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_2026_alone_is_probed_by_its_task_cases() {
    let core = Core::new(LabConfig::default(), Policy::Fenced).unwrap();
    let serve = ServeOptions {
        protocols: forkscope_core::revision::Protocols::Modern,
        ..ServeOptions::default()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let running = server::start(Shared::new(core), Arc::new(LabClock::new()), serve, addr)
        .await
        .unwrap();
    let mut opts = options(format!("http://{}/mcp", running.addr));
    opts.only = Some(vec![
        "call-resume".into(),
        "task-reissue-same-key".into(),
        "task-listen-gap".into(),
    ]);
    let report = probe::probe(&opts).await.unwrap();
    let text = probe::text(&report);
    assert_eq!(report.protocol, "2026-07-28", "{text}");
    assert!(
        report
            .call_tool
            .as_deref()
            .is_some_and(|t| t.starts_with("progress_task")),
        "{text}"
    );
    let found: Vec<&str> = report
        .cases
        .iter()
        .map(|c| c.verdict.unwrap_or("not_run"))
        .collect();
    assert_eq!(found, ["not_run", "one_task", "told_on_relisten"], "{text}");
    assert!(report.cases[0].why.contains("2026-07-28 alone"), "{text}");
    running.stop().await;
}

/// Two servers that each keep their own sessions and tasks, behind `forkscope balance` round
/// robin: a client's every next request lands on the other. The probe says so, case by case —
/// never "not run", never "2026-07-28 alone" — and a CI's JUnit report fails on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_without_affinity_are_found_losing_sessions_and_tasks() {
    use forkscope::wire::balance::{Balancer, Mode, Upstream};
    let a = serve(Policy::Fenced).await;
    let b = serve(Policy::Fenced).await;
    let upstreams = [&a, &b]
        .iter()
        .map(|s| Upstream::parse(&format!("http://{}", s.addr)).unwrap())
        .collect();
    let balancer = Balancer::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        upstreams,
        Mode::RoundRobin,
    )
    .await
    .unwrap();
    let mut opts = options(format!("http://{}/mcp", balancer.addr));
    opts.only = Some(vec!["call-resume".into(), "task-get-repeated".into()]);
    let report = probe::probe(&opts).await.unwrap();
    let text = probe::text(&report);
    let found: Vec<(&str, &str)> = report
        .cases
        .iter()
        .map(|c| (c.case, c.verdict.unwrap_or("not_run")))
        .collect();
    assert_eq!(
        found,
        [
            ("call-resume", "session_per_process"),
            ("task-get-repeated", "unknown_on_some_reads"),
        ],
        "{text}"
    );
    assert!(report.violated(), "{text}");
    assert_eq!(report.revisions, ["2025-11-25", "2026-07-28"], "{text}");
    assert!(
        text.contains("(probed 2025-11-25 and 2026-07-28)"),
        "{text}"
    );
    // The JUnit report: one testcase per case, both failures.
    let xml = probe::junit::junit(&report);
    let doc = roxmltree::Document::parse(&xml).expect("well-formed JUnit XML");
    let failed: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .filter(|n| n.children().any(|c| c.has_tag_name("failure")))
        .filter_map(|n| n.attribute("name"))
        .collect();
    assert_eq!(failed, ["call-resume", "task-get-repeated"], "{xml}");
    a.stop().await;
    b.stop().await;
}

/// A fault case never causes a fault of its own: without the user's commands it is not run, and
/// says which flags it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_cases_without_their_commands_name_the_flags_they_need() {
    let running = serve(Policy::Fenced).await;
    let mut opts = options(format!("http://{}/mcp", running.addr));
    opts.only = Some(vec![
        "task-survives-restart".into(),
        "task-runner-killed".into(),
        "task-runner-paused".into(),
    ]);
    opts.faults.restart = Some("true".into());
    let report = probe::probe(&opts).await.unwrap();
    let text = probe::text(&report);
    let said: Vec<(&str, &str)> = report
        .cases
        .iter()
        .map(|c| (c.verdict.unwrap_or("not_run"), c.why.as_str()))
        .collect();
    // The restart case runs (its command does nothing, so the task simply goes on).
    assert_eq!(said[0].0, "survived_fault", "{text}");
    assert!(
        report.cases[0]
            .notes
            .iter()
            .any(|n| n.contains("ran --restart-cmd `true`: exit 0")),
        "{text}"
    );
    assert_eq!(
        said[1],
        (
            "not_run",
            "it needs --kill-cmd (the probe causes no fault on its own)"
        ),
        "{text}"
    );
    assert_eq!(
        said[2],
        (
            "not_run",
            "it needs --pause-cmd and --resume-cmd (the probe causes no fault on its own)"
        ),
        "{text}"
    );
    running.stop().await;
}

/// An emitter whose events carry no label (nor does its server echo one) still drives the
/// standalone cases: its numbered events are read as the session's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emitter_whose_events_carry_no_label_drives_the_standalone_cases() {
    let running = serve(Policy::Fenced).await;
    let (proxy, task) = proxied(running.addr, true).await;
    let mut opts = options(format!("http://{proxy}/mcp"));
    opts.standalone_tool = Some("emit_standalone".into());
    opts.only = Some(vec!["standalone-resume".into()]);
    let report = probe::probe(&opts).await.unwrap();
    let text = probe::text(&report);
    assert!(matches!(report.cases[0].outcome, Outcome::Holds), "{text}");
    assert_eq!(
        report.cases[0].verdict,
        Some("clean_continuation"),
        "{text}"
    );
    task.abort();
    running.stop().await;
}
