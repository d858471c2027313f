//! The service harness itself (tests/common/services.rs): a real Redis starts, answers, comes
//! back empty from a restart and leaves no process behind; a real HAProxy balances round robin
//! without stickiness, streams a response as it is written, and sends everything to the
//! upstream left when one goes away. Each test passes with a note where the service is not
//! installed (and fails there under `FORKSCOPE_REQUIRE_SERVICES=1`).

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use common::services::{Haproxy, RedisServer, haproxy_config, process_gone};
use futures_util::StreamExt;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Polls of an observed condition before a test gives up on it (a bound, not a clock).
const POLLS: u32 = 500;
const POLL: Duration = Duration::from_millis(10);
/// A guard against a hang on one read through HAProxy, never the thing asserted.
const GUARD: Duration = Duration::from_secs(30);

/// Polls `done` up to [`POLLS`] times; true once it held.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    (0..POLLS).any(|_| done() || (std::thread::sleep(POLL), false).1)
}

#[test]
fn redis_starts_and_answers_ping() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    assert_eq!(redis.command(&["PING"]), "PONG");
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}/", redis.port()));
    assert_eq!(redis.addr().port(), redis.port());
    assert!(redis.addr().ip().is_loopback());
    assert!(!process_gone(redis.pid(), "redis-server"));
}

#[test]
fn redis_set_and_get_round_trip() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    assert_eq!(redis.command(&["SET", "fork:key", "a value"]), "OK");
    assert_eq!(redis.command(&["GET", "fork:key"]), "a value");
    assert_eq!(redis.command(&["GET", "absent"]), "(nil)");
    assert_eq!(redis.command(&["DBSIZE"]), "1");
    assert_eq!(redis.command(&["KEYS", "*"]), "fork:key");
    assert!(redis.command(&["INFO", "memory"]).contains("used_memory:"));
    assert!(
        redis
            .command(&["NO-SUCH-COMMAND"])
            .starts_with("(error) ERR")
    );
    assert_eq!(redis.command(&["FLUSHALL"]), "OK");
    assert_eq!(redis.command(&["KEYS", "*"]), "");
}

#[test]
fn redis_restart_comes_back_empty_on_the_same_port() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let (port, before) = (redis.port(), redis.pid());
    redis.command(&["SET", "survives", "no"]);
    assert_eq!(redis.command(&["DBSIZE"]), "1");
    redis.restart();
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid(), before);
    assert!(process_gone(before, "redis-server"));
    assert_eq!(redis.command(&["PING"]), "PONG");
    assert_eq!(redis.command(&["DBSIZE"]), "0");
}

#[test]
fn redis_kill9_ends_the_process_and_refuses_connections() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let pid = redis.pid();
    redis.kill9();
    assert!(process_gone(pid, "redis-server"));
    assert!(std::net::TcpStream::connect(redis.addr()).is_err());
    redis.restart();
    assert_eq!(redis.command(&["PING"]), "PONG");
}

#[test]
fn redis_drop_leaves_no_process() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let pid = redis.pid();
    drop(redis);
    assert!(
        eventually(|| process_gone(pid, "redis-server")),
        "redis-server {pid} still runs after its guard was dropped"
    );
}

#[test]
fn haproxy_config_lists_every_upstream_and_no_stickiness() {
    let upstreams: Vec<SocketAddr> = vec![
        "127.0.0.1:4001".parse().unwrap(),
        "127.0.0.1:4002".parse().unwrap(),
    ];
    let config = haproxy_config(4000, &upstreams);
    assert!(config.contains("bind 127.0.0.1:4000\n"));
    assert!(config.contains("    server upstream1 127.0.0.1:4001\n"));
    assert!(config.contains("    server upstream2 127.0.0.1:4002\n"));
    assert!(config.contains("balance roundrobin"));
    assert!(
        !config.contains('@'),
        "a placeholder left unfilled:\n{config}"
    );
    for sticky in ["cookie", "stick", "http-buffer-request", "compression"] {
        let set = config
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains(sticky));
        assert!(!set, "{sticky} is configured:\n{config}");
    }
}

#[test]
fn haproxy_config_is_filled_in_alike_here_and_in_ci() {
    let upstreams: Vec<SocketAddr> = vec![
        "127.0.0.1:4001".parse().unwrap(),
        "127.0.0.1:4002".parse().unwrap(),
    ];
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!(
        "source '{root}/.ci/processes.sh' && source '{root}/.ci/services.sh' && \
         haproxy_config upstream 4000 127.0.0.1:4001 127.0.0.1:4002"
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        haproxy_config(4000, &upstreams)
    );
}

/// A tiny HTTP upstream answering its own name; `/stream` writes a first chunk, then waits for
/// `release` before the second.
struct Upstream {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Upstream {
    async fn start(name: &'static str, release: watch::Receiver<bool>) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/mcp", get(move || async move { name }))
            .route(
                "/stream",
                get(move || {
                    let release = release.clone();
                    async move { streamed(name, release) }
                }),
            );
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Upstream {
            addr,
            shutdown: Some(shutdown),
            task,
        }
    }

    /// Drops the listener and closes its idle connections: the replica is gone.
    async fn stop(mut self) {
        let _ = self.shutdown.take().map(|s| s.send(()));
        tokio::time::timeout(GUARD, &mut self.task)
            .await
            .expect("the upstream stops")
            .unwrap();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn streamed(name: &'static str, mut release: watch::Receiver<bool>) -> Body {
    let first = futures_util::stream::once(async move {
        Ok::<_, Infallible>(Bytes::from(format!("first from {name}\n")))
    });
    let second = futures_util::stream::once(async move {
        let _ = release.wait_for(|released| *released).await;
        Ok::<_, Infallible>(Bytes::from_static(b"second\n"))
    });
    Body::from_stream(first.chain(second))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// GET `path` through HAProxy: the answering upstream's name.
async fn name_behind(client: &reqwest::Client, proxy: &Haproxy, path: &str) -> String {
    let url = format!("http://{}{path}", proxy.addr());
    let response = tokio::time::timeout(GUARD, client.get(&url).send())
        .await
        .expect("an answer through HAProxy")
        .unwrap_or_else(|e| panic!("GET {url}: {e}\n{}", proxy.log()));
    assert_eq!(response.status(), 200, "GET {url}\n{}", proxy.log());
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_alternates_between_upstreams() {
    let (_release, gate) = watch::channel(false);
    let a = Upstream::start("a", gate.clone()).await;
    let b = Upstream::start("b", gate).await;
    let Some(proxy) = Haproxy::start(&[a.addr, b.addr]) else {
        return;
    };
    assert_eq!(proxy.url(), format!("http://{}/mcp", proxy.addr()));
    let client = client();
    let mut names = Vec::new();
    for _ in 0..6 {
        names.push(name_behind(&client, &proxy, "/mcp").await);
    }
    assert!(names.iter().any(|n| n == "a") && names.iter().any(|n| n == "b"));
    assert!(
        names.windows(2).all(|pair| pair[0] != pair[1]),
        "round robin without stickiness alternates: {names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_streams_a_response_as_it_is_written() {
    let (release, gate) = watch::channel(false);
    let a = Upstream::start("a", gate.clone()).await;
    let b = Upstream::start("b", gate).await;
    let Some(proxy) = Haproxy::start(&[a.addr, b.addr]) else {
        return;
    };
    let url = format!("http://{}/stream", proxy.addr());
    let mut response = tokio::time::timeout(GUARD, client().get(&url).send())
        .await
        .expect("the head through HAProxy")
        .unwrap();
    assert_eq!(response.status(), 200);
    // The upstream has written one chunk and waits: only a proxy that forwards as it reads
    // lets the first line through now.
    let mut body = Vec::new();
    while !body.contains(&b'\n') {
        let chunk = tokio::time::timeout(GUARD, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("the first chunk is held back\n{}", proxy.log()))
            .unwrap()
            .expect("the body goes on past the first chunk");
        body.extend_from_slice(&chunk);
    }
    let first = String::from_utf8(body.clone()).unwrap();
    assert!(
        first == "first from a\n" || first == "first from b\n",
        "{first:?}"
    );
    release.send(true).unwrap();
    while let Some(chunk) = tokio::time::timeout(GUARD, response.chunk())
        .await
        .expect("the rest of the body")
        .unwrap()
    {
        body.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8(body).unwrap(), format!("{first}second\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_sends_everything_to_the_upstream_left() {
    let (_release, gate) = watch::channel(false);
    let a = Upstream::start("a", gate.clone()).await;
    let b = Upstream::start("b", gate).await;
    let Some(proxy) = Haproxy::start(&[a.addr, b.addr]) else {
        return;
    };
    // A new client connection for every request: HAProxy sends a session's first request on a
    // new server connection ("http-reuse safe"), so what reaches a stopped `a` is a connect.
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(name_behind(&client, &proxy, "/mcp").await);
    }
    seen.sort();
    assert_eq!(seen, ["a", "b"]);

    let a_addr = a.addr;
    a.stop().await;
    // `a` closed its kept connections as it stopped. A request HAProxy sends on one of them
    // before it reads the close gets a 502 (told, not lost: HAProxy never replays a request it
    // sent). Once HAProxy has let go of every one ...
    let mut released = false;
    for _ in 0..POLLS {
        released = proxy.connections_to(a_addr) == 0;
        if released {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert!(
        released,
        "HAProxy kept a connection to the stopped upstream"
    );
    // ... and before the check notices, a request routed to `a` meets a refused connect and is
    // sent on to `b` (redispatch): every one is answered, by `b`.
    for _ in 0..4 {
        assert_eq!(name_behind(&client, &proxy, "/mcp").await, "b");
    }
    // The TCP check marks `a` down at its first failure ...
    let mut down = false;
    for _ in 0..POLLS {
        down = proxy.log().contains("replicas/upstream1 is DOWN");
        if down {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert!(
        down,
        "HAProxy never marked the stopped upstream down:\n{}",
        proxy.log()
    );
    // ... and from then on round robin has one server.
    for _ in 0..10 {
        assert_eq!(name_behind(&client, &proxy, "/mcp").await, "b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_drop_leaves_no_process() {
    let (_release, gate) = watch::channel(false);
    let a = Upstream::start("a", gate).await;
    let Some(proxy) = Haproxy::start(&[a.addr]) else {
        return;
    };
    let pid = proxy.pid();
    assert!(!process_gone(pid, "haproxy"));
    drop(proxy);
    assert!(
        eventually(|| process_gone(pid, "haproxy")),
        "haproxy {pid} still runs after its guard was dropped"
    );
}
