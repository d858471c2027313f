//! The processes a reader of the docs runs, for the docs test: a terminal (a `bash` that keeps
//! its variables from one pasted block to the next, as T2 and T3 of the walkthrough do) and a
//! server (`forkscope serve` or `proxy`, as T1). Both are killed and reaped when dropped, by
//! their own process id, so a failing assertion leaves nothing running.
//!
//! Every wait is on something observed — output arriving, a command's end marker, a log line,
//! a closed pipe — and bounded, so a hang fails with what was seen instead of hanging.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What ends a command's output in a terminal: `\x1e STATUS \x1e`, printed after it.
const END: char = '\u{1e}';

/// How a command ended in a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It ended on its own, with this exit status.
    Status(i32),
    /// It is still running (left so on purpose: a stream a doc says to leave open).
    Running,
}

/// A `bash` reading commands from a pipe, its output (stderr included) read back by a thread.
#[derive(Debug)]
pub struct Terminal {
    name: String,
    child: Child,
    stdin: ChildStdin,
    chunks: Receiver<Vec<u8>>,
    /// Output not yet claimed by a command.
    pending: Vec<u8>,
    /// A command was started and its end marker has not been read.
    busy: bool,
}

impl Terminal {
    /// Starts a terminal in DIR, with BIN first on its PATH.
    pub fn start(name: &str, dir: &Path, bin: &Path) -> Terminal {
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(dir)
            .env("PATH", path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group: dropping the terminal kills what it started with it.
            .process_group(0)
            .spawn()
            .expect("bash starts");
        let stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let (tx, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let mut terminal = Terminal {
            name: name.to_string(),
            child,
            stdin,
            chunks,
            pending: Vec::new(),
            busy: false,
        };
        // A command's errors are part of what the reader sees; a failure inside a pipeline
        // fails the command, as the docs' commands are meant to succeed as a whole.
        terminal.write("exec 2>&1; set -o pipefail\n");
        terminal
    }

    fn write(&mut self, text: &str) {
        self.stdin
            .write_all(text.as_bytes())
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("terminal {} took no input: {e}", self.name));
    }

    /// Starts COMMAND; its output is read by `finish` or `watch`. Its standard input is
    /// /dev/null: what follows it in the pipe is for the shell.
    pub fn start_command(&mut self, command: &str) -> Result<(), String> {
        if self.busy {
            return Err(format!(
                "terminal {}: a command is still running",
                self.name
            ));
        }
        self.busy = true;
        self.write(&format!(
            "{{\n{command}\n}} </dev/null\nprintf '{END}%s{END}' \"$?\"\n"
        ));
        Ok(())
    }

    /// Takes the output read so far, and the exit status if the command ended.
    fn take_ended(&mut self) -> Option<(String, i32)> {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        let mut parts = text.splitn(3, END);
        let (output, status) = (parts.next()?, parts.next()?);
        let rest = parts.next()?;
        let status = status.parse().expect("the end marker carries a status");
        let output = output.to_string();
        self.pending = rest.as_bytes().to_vec();
        self.busy = false;
        Some((output, status))
    }

    fn receive(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.chunks.recv_timeout(left) {
            Ok(chunk) => {
                self.pending.extend(chunk);
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("terminal {} ended: {:?}", self.name, self.child.try_wait())
            }
        }
    }

    /// Waits up to LIMIT for the running command to end: its output and exit status.
    pub fn finish(&mut self, limit: Duration) -> Result<(String, i32), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(ended) = self.take_ended() {
                return Ok(ended);
            }
            if !self.receive(deadline) {
                let text = String::from_utf8_lossy(&self.pending);
                let lines: Vec<&str> = text.lines().collect();
                return Err(format!(
                    "still running after {limit:?}; its output so far, at its end:\n{}",
                    lines[lines.len().saturating_sub(30)..].join("\n")
                ));
            }
        }
    }

    /// Reads the running command's output until DONE says, of the complete lines so far, that
    /// they are what was expected; the command may go on running. Waits at most LIMIT, and
    /// then fails with the complete lines read.
    pub fn watch(
        &mut self,
        limit: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Result<(String, Ended), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some((output, status)) = self.take_ended() {
                return Ok((output, Ended::Status(status)));
            }
            let text = String::from_utf8_lossy(&self.pending).into_owned();
            let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
            if done(complete) {
                return Ok((complete.to_string(), Ended::Running));
            }
            if !self.receive(deadline) {
                return Err(complete.to_string());
            }
        }
    }

    /// The processes the shell runs for the current command, the first started first.
    fn command_processes(&self) -> Vec<String> {
        let pid = self.child.id();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .expect("/proc lists a process's children");
        let mut started: Vec<(u64, u32)> = children
            .split_whitespace()
            .filter_map(|child| {
                let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
                // Field 22, after the parenthesised name: clock ticks after boot.
                let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
                Some((fields.get(19)?.parse().ok()?, child.parse().ok()?))
            })
            .collect();
        started.sort_unstable();
        started
            .into_iter()
            .map(|(_, pid)| pid.to_string())
            .collect()
    }

    /// Presses Ctrl-C on the running command, then waits for its end; the shell itself
    /// carries on, as an interactive one does.
    ///
    /// It ends the pipeline's first process (curl), and the rest (tee) end on the end of their
    /// input, having written all of it: a reader presses Ctrl-C seconds after the output
    /// settled, while the test presses it the moment the output shown has arrived — ending tee
    /// too could cut it between writing a line to the terminal and writing it to its file.
    /// The signal is SIGTERM, not Ctrl-C's SIGINT: a test run started in the background, as
    /// `.ci/run` starts `cargo test`, hands its children SIGINT ignored, and no shell can undo
    /// that. For curl the two mean the same: it ends, and its connection closes.
    pub fn interrupt(&mut self, limit: Duration) -> Result<String, String> {
        if !self.busy {
            return Ok(String::new());
        }
        if let Some(first) = self.command_processes().first() {
            // A process that ended meanwhile is no error: the command is ending anyway.
            let _ = Command::new("kill")
                .args(["-TERM", first])
                .stderr(Stdio::null())
                .status()
                .expect("kill runs");
        }
        self.finish(limit).map(|(output, _)| output)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A long-running `forkscope` (serve, proxy), started from its argv and read line by line.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Held open: the proxy reads its commands from it, and EOF is not a stop.
    _stdin: ChildStdin,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    /// Log lines read so far.
    pub log: Vec<String>,
    /// The first line it printed: where it listens.
    pub banner: String,
}

fn lines_of(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Server {
    /// Starts BIN with ARGS in DIR and waits up to LIMIT for its first line.
    pub fn start(bin: &Path, args: &[String], dir: &Path, limit: Duration) -> Server {
        let mut child = Command::new(bin)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("forkscope starts");
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = lines_of(child.stdout.take().expect("stdout is piped"));
        let stderr = lines_of(child.stderr.take().expect("stderr is piped"));
        let mut server = Server {
            child,
            _stdin: stdin,
            stdout,
            stderr,
            log: Vec::new(),
            banner: String::new(),
        };
        match server.stdout.recv_timeout(limit) {
            Ok(line) => server.banner = line,
            Err(e) => {
                let log: Vec<String> = server.stderr.try_iter().collect();
                panic!(
                    "forkscope {} printed nothing in {limit:?} ({e}); exit {:?}; log:\n{}",
                    args.join(" "),
                    server.child.try_wait(),
                    log.join("\n")
                );
            }
        }
        server
    }

    /// Waits up to LIMIT for a log line that MATCHES; the log read so far on failure.
    pub fn await_log(
        &mut self,
        limit: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if self.log.iter().any(|line| matches(line)) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => self.log.push(line),
                Err(e) => {
                    return Err(format!(
                        "{e} after {limit:?}; log:\n{}",
                        self.log.join("\n")
                    ));
                }
            }
        }
    }

    /// The log so far, one line each.
    pub fn read_log(&mut self) -> String {
        self.log.extend(self.stderr.try_iter());
        self.log.join("\n")
    }

    /// Presses Ctrl-C (SIGINT) and returns what it printed from then until it ended (its
    /// standard output closed), waiting at most LIMIT.
    pub fn interrupt(&mut self, limit: Duration) -> Result<String, String> {
        let sent = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -INT {}", self.child.id());
        let deadline = Instant::now() + limit;
        let mut printed = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    printed.push_str(&line);
                    printed.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.wait();
                    return Ok(printed);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "still running {limit:?} after Ctrl-C; printed:\n{printed}"
                    ));
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
