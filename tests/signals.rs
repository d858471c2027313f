//! `forkscope serve` and `forkscope proxy` as a supervisor runs them: the real binary ends on
//! SIGTERM, SIGHUP or SIGINT, also while the proxy's stdin (its control channel) is still
//! open — a CI script stops its services with a signal, and one that ignores it outlives the run.
//!
//! Every child is held by a guard that kills and reaps it when dropped, so a failing assertion
//! leaves nothing running.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a process may take to start or to end: a bound on a hang, not a measurement.
const LIMIT: Duration = Duration::from_secs(20);

/// A running `forkscope`, killed and reaped when dropped (a panicking test included).
struct Running {
    child: Child,
    /// Held open, as a script holds the proxy's control fifo: EOF is not what stops it.
    _stdin: Option<ChildStdin>,
}

impl Running {
    /// Starts `forkscope ARGS` and waits for the first line it prints that contains `ready`.
    fn start(args: &[&str], ready: &str) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("forkscope starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut running = Running {
            child,
            _stdin: stdin,
        };
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            // Keeps draining stdout until the process ends, so it never blocks on a full pipe.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        loop {
            match lines.recv_timeout(LIMIT) {
                Ok(line) if line.contains(ready) => return running,
                Ok(_) => {}
                Err(e) => {
                    let status = running.child.try_wait();
                    panic!("forkscope {args:?} never printed {ready:?} ({e}; {status:?})");
                }
            }
        }
    }

    /// Sends SIGNAL (`TERM`, `HUP`, `INT`) the way a script does.
    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -{signal} {}", self.child.id());
    }

    /// The exit status, once the process has ended; `None` if it is still running at LIMIT.
    fn ended(&mut self) -> Option<ExitStatus> {
        let polls = LIMIT.as_millis() / 20;
        for _ in 0..polls {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[test]
fn serve_and_proxy_end_on_a_supervisors_signal_with_stdin_still_open() {
    for signal in ["TERM", "HUP", "INT"] {
        let mut serve = Running::start(
            &["serve", "--port", "0", "--emit-every", "0"],
            "forkscope serve: MCP Streamable HTTP",
        );
        serve.signal(signal);
        let status = serve.ended();
        assert!(
            status.is_some_and(|s| s.success()),
            "serve on SIG{signal}: {status:?}"
        );

        // No backend needed: the proxy dials its target only when a client connects.
        let mut proxy = Running::start(
            &["proxy", "--to", "127.0.0.1:9", "--port", "0"],
            "forkscope proxy: 127.0.0.1:",
        );
        proxy.signal(signal);
        let status = proxy.ended();
        assert!(
            status.is_some_and(|s| s.success()),
            "proxy on SIG{signal} with its stdin open: {status:?}"
        );
    }
}
