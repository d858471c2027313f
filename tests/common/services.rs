//! Real `redis-server` and `haproxy` processes for the replica tests, each on a free 127.0.0.1
//! port, each owned by a guard whose Drop kills and reaps it on every path a test takes (a
//! panic included).
//!
//! A machine with only Rust still passes `cargo test`: a missing binary skips the tests that
//! need it, with one line on stderr. CI sets `FORKSCOPE_REQUIRE_SERVICES=1`, and then a missing
//! binary fails them instead, so a test that claims Redis never passes by skipping there.
//!
//! Starting waits on the service alone, never on a task of the caller's runtime, so an async
//! test may call it directly: it blocks its thread for the few polls the service takes to come
//! up. "Up" is observed, not assumed: the process itself holds the listening socket (a port
//! taken by someone else in the meantime is a retry on another port), and Redis answers PING.
//!
//! HAProxy's configuration is `.ci/haproxy.cfg.template`, the same text CI's
//! `.ci/services.sh` fills in, so the tests and CI run one load balancer.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;

/// Set to `1`, a missing service binary fails the test instead of skipping it.
pub const REQUIRE_SERVICES: &str = "FORKSCOPE_REQUIRE_SERVICES";

/// The load balancer's configuration, with `@BIND_PORT@` and a `@SERVERS@` line to fill in.
pub const HAPROXY_TEMPLATE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/.ci/haproxy.cfg.template"
));

/// Polls of a starting service before it counts as failed to start (a bound, not a clock).
const READY_POLLS: u32 = 1000;
const POLL: Duration = Duration::from_millis(10);
/// Free ports tried before giving up: another process may take one between the pick and the bind.
const PORT_ATTEMPTS: u32 = 5;
/// A guard on every socket read and write of the test's Redis client, so a hung Redis fails the test.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` with nothing saved to disk, on a free 127.0.0.1 port.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    dir: TempDir,
    port: u16,
    pid: u32,
    child: Option<Child>,
    /// Started again with its append-only file (see [`RedisServer::enable_aof`]).
    aof: bool,
}

impl RedisServer {
    /// Starts one, or returns `None` (after a line on stderr) when `redis-server` is not
    /// installed and [`REQUIRE_SERVICES`] is not set.
    pub fn start() -> Option<RedisServer> {
        let binary = binary_or_skip("redis-server", "redis-server", "Redis")?;
        let mut server = RedisServer {
            binary,
            dir: scratch_dir("redis"),
            port: 0,
            pid: 0,
            child: None,
            aof: false,
        };
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            match server.launch() {
                Startup::Ready => return Some(server),
                Startup::PortTaken => continue,
                Startup::Failed(why) => panic!("redis-server did not start: {why}"),
            }
        }
        panic!("redis-server found each of {PORT_ATTEMPTS} free ports taken by the time it bound");
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id of the server last started (it may have been killed since).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGKILL, as a crash would end it: nothing is flushed, every connection drops. Returns
    /// once the process is reaped.
    pub fn kill9(&mut self) {
        stop(&mut self.child);
    }

    /// Kills the server and starts a fresh, empty one on the same port, ready to answer.
    pub fn restart(&mut self) {
        self.kill9();
        match self.launch() {
            Startup::Ready => {}
            Startup::PortTaken => panic!(
                "redis-server could not restart: port {} was taken while it was down\n{}",
                self.port,
                self.log()
            ),
            Startup::Failed(why) => panic!("redis-server did not restart: {why}"),
        }
    }

    /// Writes what Redis holds now to an RDB file (`SAVE`) and keeps it aside: an older
    /// snapshot for [`RedisServer::restore`]. The server's own dump is removed again, so a plain
    /// [`RedisServer::restart`] still comes back empty.
    pub fn save_snapshot(&self, name: &str) -> PathBuf {
        assert_eq!(self.command(&["SAVE"]), "OK");
        let dump = self.dir.path().join("dump.rdb");
        let kept = self.dir.path().join(format!("{name}.rdb"));
        fs::rename(&dump, &kept).unwrap_or_else(|e| panic!("keeping {}: {e}", dump.display()));
        kept
    }

    /// Kills the server and starts it again from `snapshot` (an RDB file from
    /// [`RedisServer::save_snapshot`]) on the same port: what a Redis restored from an older
    /// backup, or an async replica promoted by failover, comes back holding.
    pub fn restore(&mut self, snapshot: &Path) {
        self.kill9();
        let dump = self.dir.path().join("dump.rdb");
        fs::copy(snapshot, &dump)
            .unwrap_or_else(|e| panic!("restoring {}: {e}", snapshot.display()));
        match self.launch() {
            Startup::Ready => {}
            other => panic!("redis-server did not come back from its snapshot: {other:?}"),
        }
        let _ = fs::remove_file(&dump);
    }

    /// Turns on the append-only file, every write fsynced, and waits for its first rewrite: from
    /// here a restart loads it.
    pub fn enable_aof(&mut self) {
        assert_eq!(self.command(&["CONFIG", "SET", "appendonly", "yes"]), "OK");
        self.aof = true;
        for _ in 0..READY_POLLS {
            let info = self.command(&["INFO", "persistence"]);
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
                && self.aof_tail().is_some()
            {
                return;
            }
            std::thread::sleep(POLL);
        }
        panic!("the append-only file was not written\n{}", self.log());
    }

    /// The append-only file's newest part and its length now: the mark [`RedisServer::truncate_aof`]
    /// cuts back to.
    pub fn aof_tail(&self) -> Option<(PathBuf, u64)> {
        let dir = self.dir.path().join("appendonlydir");
        // `appendonly.aof.N.incr.aof`: the newest part has the largest N.
        let number = |p: &PathBuf| -> Option<u64> {
            let name = p.file_name()?.to_str()?.strip_suffix(".incr.aof")?;
            name.rsplit('.').next()?.parse().ok()
        };
        let tail = fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| Some((number(&p)?, p)))
            .max()?
            .1;
        let len = fs::metadata(&tail).ok()?.len();
        Some((tail, len))
    }

    /// Kills the server, cuts its append-only file back to `mark`, and starts it again from it:
    /// what a Redis whose last writes never reached the disk comes back holding.
    pub fn truncate_aof(&mut self, mark: &(PathBuf, u64)) {
        self.kill9();
        let file = fs::OpenOptions::new().write(true).open(&mark.0).unwrap();
        file.set_len(mark.1).unwrap();
        drop(file);
        match self.launch() {
            Startup::Ready => {}
            other => panic!("redis-server did not come back from its cut AOF: {other:?}"),
        }
    }

    /// A second server replicating this one, on a port of its own.
    pub fn start_replica(&self) -> Option<RedisServer> {
        let replica = RedisServer::start()?;
        let port = self.port.to_string();
        assert_eq!(replica.command(&["REPLICAOF", "127.0.0.1", &port]), "OK");
        for _ in 0..READY_POLLS {
            if replica
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
            {
                return Some(replica);
            }
            std::thread::sleep(POLL);
        }
        panic!("the replica never synced\n{}", replica.log());
    }

    /// Stops replicating: from here it lags its master by every write that follows.
    pub fn stop_replicating(&self) {
        assert_eq!(self.command(&["REPLICAOF", "NO", "ONE"]), "OK");
    }

    /// The failover: this server dies, and `replica`'s data comes up where it was (the address
    /// a store's clients know, as behind Sentinel or a fixed name): every write the replica
    /// lagged by is gone.
    pub fn fail_over_to(&mut self, replica: &RedisServer) {
        let promoted = replica.save_snapshot("promoted");
        self.restore(&promoted);
    }

    /// Sends one command and renders its reply as text: a status or a bulk string as itself,
    /// an integer in decimal, an error as `(error) MESSAGE`, a nil as `(nil)`, an array as its
    /// elements one per line (empty: ""). Panics when Redis cannot be reached.
    pub fn command(&self, args: &[&str]) -> String {
        redis_command(self.port, args)
            .unwrap_or_else(|e| panic!("redis {args:?} on port {}: {e}\n{}", self.port, self.log()))
    }

    fn launch(&mut self) -> Startup {
        let log = self.dir.path().join("redis.log");
        let since = log_len(&log);
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--daemonize", "no"])
            .args(["--appendonly", if self.aof { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(append(&log))
            .stderr(append(&log))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.binary.display()));
        self.pid = child.id();
        self.child = Some(child);
        let (pid, port) = (self.pid, self.port);
        wait_ready(&mut self.child, &log, since, || {
            owns_listener(pid, port) && redis_command(port, &["PING"]).is_ok_and(|r| r == "PONG")
        })
    }

    fn log(&self) -> String {
        read_log(&self.dir.path().join("redis.log"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// An `haproxy` balancing HTTP round robin over upstreams, from `.ci/haproxy.cfg.template`.
#[derive(Debug)]
pub struct Haproxy {
    dir: TempDir,
    port: u16,
    pid: u32,
    child: Option<Child>,
}

impl Haproxy {
    /// Starts one in front of `upstreams`, or returns `None` (after a line on stderr) when
    /// `haproxy` is not installed and [`REQUIRE_SERVICES`] is not set. Ready once its frontend
    /// accepts connections; the upstreams need not be up yet.
    pub fn start(upstreams: &[SocketAddr]) -> Option<Haproxy> {
        assert!(!upstreams.is_empty(), "HAProxy needs at least one upstream");
        let binary = binary_or_skip("haproxy", "haproxy", "HAProxy")?;
        let dir = scratch_dir("haproxy");
        let config = dir.path().join("haproxy.cfg");
        let log = dir.path().join("haproxy.log");
        let mut proxy = Haproxy {
            dir,
            port: 0,
            pid: 0,
            child: None,
        };
        for _ in 0..PORT_ATTEMPTS {
            proxy.port = free_port();
            fs::write(&config, haproxy_config(proxy.port, upstreams))
                .unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
            let since = log_len(&log);
            let child = Command::new(&binary)
                .arg("-db")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(append(&log))
                .stderr(append(&log))
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", binary.display()));
            proxy.pid = child.id();
            proxy.child = Some(child);
            let (pid, port) = (proxy.pid, proxy.port);
            let addr = proxy.addr();
            match wait_ready(&mut proxy.child, &log, since, || {
                owns_listener(pid, port) && TcpStream::connect_timeout(&addr, IO_TIMEOUT).is_ok()
            }) {
                Startup::Ready => return Some(proxy),
                Startup::PortTaken => continue,
                Startup::Failed(why) => panic!(
                    "haproxy did not start: {why}\nconfiguration {}:\n{}",
                    config.display(),
                    read_log(&config)
                ),
            }
        }
        panic!("haproxy found each of {PORT_ATTEMPTS} free ports taken by the time it bound");
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The MCP endpoint through the load balancer: `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// How many connections HAProxy still holds to `upstream`, in any state: one the upstream
    /// closed stays until HAProxy has read the close and closed its end.
    pub fn connections_to(&self, upstream: SocketAddr) -> usize {
        let std::net::IpAddr::V4(ip) = upstream.ip() else {
            return 0;
        };
        // /proc/net/tcp spells an IPv4 address as the little-endian hex of its 32 bits.
        let remote = format!("{:08X}:{:04X}", u32::from(ip).swap_bytes(), upstream.port());
        owned_sockets(self.pid, |fields| fields[2] == remote)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What HAProxy wrote to stdout and stderr so far (alerts, warnings, servers going down).
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join("haproxy.log"))
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// The template with its placeholders filled in: the frontend on `port`, one `server` line
/// per upstream (`upstream1`, `upstream2`, …), the same way `.ci/services.sh` fills it in.
pub fn haproxy_config(port: u16, upstreams: &[SocketAddr]) -> String {
    let mut config = String::new();
    for line in HAPROXY_TEMPLATE.lines() {
        if line.trim() == "@SERVERS@" {
            let indent = &line[..line.len() - line.trim_start().len()];
            for (n, addr) in upstreams.iter().enumerate() {
                let _ = writeln!(config, "{indent}server upstream{} {addr}", n + 1);
            }
        } else {
            let _ = writeln!(config, "{}", line.replace("@BIND_PORT@", &port.to_string()));
        }
    }
    config
}

/// True once `pid` is no longer a running process: gone from /proc, a zombie, or its number
/// reused by a program other than `name` (the kernel's short name, e.g. `redis-server`).
pub fn process_gone(pid: u32, name: &str) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let comm = stat
        .split_once(" (")
        .and_then(|(_, rest)| rest.rsplit_once(") "));
    match comm {
        Some((comm, rest)) => comm != name || rest.starts_with('Z'),
        None => false,
    }
}

/// How a start attempt ended.
#[derive(Debug)]
enum Startup {
    Ready,
    /// The port was taken between the pick and the bind: try another.
    PortTaken,
    Failed(String),
}

/// Polls `ready` until it holds, the child exits, or [`READY_POLLS`] run out. A child that
/// exited is reaped and cleared; one still running when the polls run out stays for Drop.
/// Whether the port was taken is read from what the log gained past `since`, this attempt's.
fn wait_ready(
    child: &mut Option<Child>,
    log: &Path,
    since: u64,
    ready: impl Fn() -> bool,
) -> Startup {
    for _ in 0..READY_POLLS {
        let running = child.as_mut().expect("a child was just started");
        match running.try_wait() {
            Ok(Some(status)) => {
                *child = None;
                let text = read_log(log);
                let this_attempt = text.get(since as usize..).unwrap_or(&text);
                return if this_attempt.contains("Address already in use") {
                    Startup::PortTaken
                } else {
                    Startup::Failed(format!("it exited ({status}); its log:\n{text}"))
                };
            }
            Ok(None) => {}
            Err(e) => return Startup::Failed(format!("waiting for it: {e}")),
        }
        if ready() {
            return Startup::Ready;
        }
        std::thread::sleep(POLL);
    }
    Startup::Failed(format!(
        "not ready after {READY_POLLS} polls; its log:\n{}",
        read_log(log)
    ))
}

/// SIGKILL and reap, if still ours to stop.
fn stop(child: &mut Option<Child>) {
    if let Some(mut running) = child.take() {
        let _ = running.kill();
        let _ = running.wait();
    }
}

/// The binary `name`, or `None` with a note when it is missing and not required.
fn binary_or_skip(name: &str, package: &str, tests: &str) -> Option<PathBuf> {
    if let Some(path) = find_binary(name) {
        return Some(path);
    }
    if std::env::var(REQUIRE_SERVICES).as_deref() == Ok("1") {
        panic!("{name} is required ({REQUIRE_SERVICES}=1): apt-get install {package}");
    }
    // Straight to the process's stderr: the test harness captures `eprintln!`, and a skip
    // that nobody sees reads as a pass.
    let _ = writeln!(
        io::stderr(),
        "note: the {tests} tests are skipped: {name} is not installed \
         (apt-get install {package}; {REQUIRE_SERVICES}=1 makes this a failure)"
    );
    None
}

/// `name` on PATH, or in /usr/sbin and /sbin, where Debian installs `haproxy` and which a
/// user's PATH often lacks.
fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn scratch_dir(what: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("forkscope-{what}."))
        .tempdir()
        .unwrap_or_else(|e| panic!("a scratch directory for {what}: {e}"))
}

/// A port the kernel just handed out on 127.0.0.1, free again once this returns.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

fn append(log: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()))
}

fn log_len(log: &Path) -> u64 {
    fs::metadata(log).map_or(0, |meta| meta.len())
}

fn read_log(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| format!("({} unreadable: {e})", path.display()))
}

/// True when `pid` holds the socket listening on 127.0.0.1:`port`, so a start attempt never
/// mistakes another process that took the port for its own. Read from /proc; where there is
/// none (not Linux), any listener counts.
fn owns_listener(pid: u32, port: u16) -> bool {
    let local = format!("0100007F:{port:04X}");
    // local_address, st (0A: LISTEN)
    owned_sockets(pid, |fields| fields[1] == local && fields[3] == "0A") > 0
}

/// How many of `pid`'s TCP sockets (over IPv4, as every service here binds 127.0.0.1) have
/// a `/proc/net/tcp` row that `row` accepts (its whitespace-split fields). Unreadable `/proc`
/// counts as one, so a start on a system without it is not refused for want of it.
fn owned_sockets(pid: u32, row: impl Fn(&[&str]) -> bool) -> usize {
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return 1;
    };
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 9 && row(&fields)).then(|| format!("socket:[{}]", fields[9]))
        })
        .collect();
    if inodes.is_empty() {
        return 0;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|target| inodes.iter().any(|s| target.as_os_str() == s.as_str()))
        })
        .count()
}

/// One command through the `redis` crate's own client, its reply rendered as
/// [`RedisServer::command`] says.
fn redis_command(port: u16, args: &[&str]) -> redis::RedisResult<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_connection_with_timeout(IO_TIMEOUT)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let (name, rest) = args.split_first().expect("a command");
    match redis::cmd(name).arg(rest).query::<redis::Value>(&mut conn) {
        Ok(reply) => Ok(render(&reply)),
        // An error reply is an answer, not a failure to reach Redis.
        Err(e) if e.kind() != redis::ErrorKind::Io && e.code().is_some() => Ok(format!(
            "(error) {} {}",
            e.code().unwrap_or_default(),
            e.detail().unwrap_or_default()
        )),
        Err(e) => Err(e),
    }
}

fn render(reply: &redis::Value) -> String {
    use redis::Value;
    match reply {
        Value::Nil => "(nil)".to_owned(),
        Value::Int(n) => n.to_string(),
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_owned(),
        Value::Array(items) | Value::Set(items) => {
            items.iter().map(render).collect::<Vec<_>>().join("\n")
        }
        Value::VerbatimString { text, .. } => text.clone(),
        Value::ServerError(e) => format!("(error) {e:?}"),
        other => format!("{other:?}"),
    }
}
