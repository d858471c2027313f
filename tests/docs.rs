//! The docs cannot drift: every command in `README.md` and every page of `docs/` runs here, and
//! every output they show is compared with what the program prints (snapbox), so a changed
//! output fails until the doc changes with it.
//!
//! How a doc is read (see `docs/markdown.rs`):
//! - A ```` ```sh ```` block is pasted into a terminal, one command at a time, in the doc's
//!   order; terminals keep their variables and files between blocks, as a reader's do. A
//!   ```` ```text ```` block right after it (only blank lines between) is what the block
//!   prints, compared as a whole. A comment line `# in T3` (or `# in T2 and T3`) says which
//!   terminal; the default is T2. When the paragraph before a block says "T1 logs `…`", the
//!   block waits for that log line.
//! - A ```` ```console ```` block is `$ command` lines, each followed by its whole output.
//! - `cargo run --release --` and `forkscope` are the binary under test. `forkscope serve` and
//!   `forkscope proxy` run as T1, beside the terminals, on a free port that replaces the doc's
//!   in every later command and output; a ```` ```text ```` block that starts with `^C` presses
//!   Ctrl-C in T1 and shows what it prints then. A dashboard launch runs without a terminal,
//!   which checks its flags, settings and scenario, and prints the headless demonstration.
//! - A command exits 0 unless a comment beside it says `exits N`.
//! - The last command of a block whose output ends in `...` (more lines) or `^C` is a stream:
//!   it runs until its output matches, then is left running (the next command in that
//!   terminal presses Ctrl-C first, as a reader would) or interrupted.
//! - ```` ```text illustration ```` and ```` ```toml ```` blocks are not output; any other
//!   block kind, a command in a block the test cannot read, or an output block that follows no
//!   command, fails the test. So does a command that is neither run nor in [`SKIPPED`].

#[path = "docs/commands.rs"]
mod commands;
#[path = "docs/expect.rs"]
mod expect;
#[path = "docs/markdown.rs"]
mod markdown;
#[path = "docs/shell.rs"]
mod shell;

use commands::{Kind, PACE, SKIPPED, as_forkscope, classify, doc_commands, promised_exit};
use markdown::{Block, Logical};
use regex::Regex;
use shell::{Ended, Server, Terminal};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

/// A bound on one command (the longest, `check --depth 12`, takes seconds): a hang, not a
/// measurement.
const COMMAND_LIMIT: Duration = Duration::from_secs(90);
/// A bound on a stream showing what the doc shows, on a server starting or stopping, and on
/// a log line a doc waits for.
const STREAM_LIMIT: Duration = Duration::from_secs(30);

static T1_LOGS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"T1 logs `([^`]+)`").unwrap());
static LISTENS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"127\.0\.0\.1:(\d+)").unwrap());

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What a doc run did, for its summary line.
#[derive(Debug, Default)]
struct Tally {
    run: usize,
    dashboards: usize,
    skipped: Vec<String>,
    outputs: usize,
}

/// One doc, read and run in a scratch directory laid out as the repository root is.
struct DocRun {
    // Fields drop in order: what runs is stopped before its directory is removed.
    terminals: BTreeMap<String, Terminal>,
    /// T1: what runs beside the terminals, the latest last.
    servers: Vec<Server>,
    doc: &'static str,
    scratch: tempfile::TempDir,
    bin: PathBuf,
    /// The doc's port → the port its server really got.
    ports: Vec<(u16, u16)>,
    tally: Tally,
    failures: Vec<String>,
}

impl DocRun {
    fn new(doc: &'static str) -> DocRun {
        for tool in ["bash", "curl", "jq"] {
            let found = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .expect("sh runs");
            assert!(
                found.status.success(),
                "the docs' commands need {tool}: apt-get install {tool} (.ci/run installs it)"
            );
        }
        let scratch = tempfile::Builder::new()
            .prefix("forkscope-docs-")
            .tempdir()
            .expect("a scratch directory");
        let bin = scratch.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_forkscope"), bin.join("forkscope")).unwrap();
        // The docs' commands run from a checkout: the files they name are where they would be.
        for dir in ["scenarios", "interop"] {
            std::os::unix::fs::symlink(repo().join(dir), scratch.path().join(dir)).unwrap();
        }
        std::fs::create_dir(scratch.path().join("target")).unwrap();
        DocRun {
            doc,
            scratch,
            bin,
            terminals: BTreeMap::new(),
            servers: Vec::new(),
            ports: Vec::new(),
            tally: Tally::default(),
            failures: Vec::new(),
        }
    }

    fn fail(&mut self, line: usize, what: impl std::fmt::Display) {
        let mut failure = format!("{}:{line}: {what}", self.doc);
        if let Some(t1) = self.servers.last_mut() {
            failure.push_str(&format!(
                "\nT1's log, at its end:\n{}",
                tail(&t1.read_log())
            ));
        }
        self.failures.push(failure);
    }

    /// The doc's ports replaced by the ones its servers got.
    fn with_ports(&self, text: &str) -> String {
        self.ports.iter().fold(text.to_string(), |t, (doc, real)| {
            t.replace(&format!("127.0.0.1:{doc}"), &format!("127.0.0.1:{real}"))
        })
    }

    /// What is pasted: the binary for `cargo run`, the test's pace, the real ports.
    fn prepared(&self, text: &str) -> String {
        let text = PACE
            .iter()
            .fold(as_forkscope(text), |t, (doc, test, _)| t.replace(doc, test));
        self.with_ports(&text)
    }

    /// Terminal NAME, ready for a command: a stream left running in it is ended first, as a
    /// reader presses Ctrl-C before pasting more.
    fn terminal(&mut self, name: &str) -> Result<&mut Terminal, String> {
        if !self.terminals.contains_key(name) {
            let terminal = Terminal::start(name, self.scratch.path(), &self.bin);
            self.terminals.insert(name.to_string(), terminal);
        }
        let terminal = self.terminals.get_mut(name).expect("just made");
        terminal
            .interrupt(STREAM_LIMIT)
            .map_err(|e| format!("{name}: Ctrl-C did not end the stream left running: {e}"))?;
        Ok(terminal)
    }

    fn run(mut self, text: &str) -> Tally {
        let blocks = markdown::blocks(text);
        let mut i = 0;
        while i < blocks.len() {
            let block = &blocks[i];
            let output = blocks
                .get(i + 1)
                .filter(|next| next.follows_block && next.info == "text");
            match block.info.as_str() {
                "sh" => {
                    self.sh_block(block, output);
                    i += 1 + usize::from(output.is_some());
                    continue;
                }
                "console" => self.console_block(block),
                "text" if block.body.starts_with("^C\n") => self.stop_server(block),
                _ => {
                    if let Err(e) = not_a_command_block(block) {
                        self.fail(block.line, e);
                    }
                }
            }
            i += 1;
        }
        self.terminals.clear();
        self.servers.clear();
        assert!(
            self.failures.is_empty(),
            "{} disagrees with the program ({} finding(s)):\n\n{}",
            self.doc,
            self.failures.len(),
            self.failures.join("\n\n")
        );
        self.tally
    }

    fn sh_block(&mut self, block: &Block, output: Option<&Block>) {
        let commands = markdown::logical_commands(&block.body);
        let terminals = commands
            .iter()
            .take_while(|c| c.code.is_empty())
            .flat_map(|c| &c.comments)
            .find_map(|c| c.strip_prefix("in T"))
            .map_or_else(
                || vec!["T2".to_string()],
                |names| {
                    let names = names.split(':').next().unwrap_or_default();
                    format!("T{names}")
                        .split(" and ")
                        .map(str::to_string)
                        .collect()
                },
            );
        self.await_cue(block);
        let commands: Vec<&Logical> = commands.iter().filter(|c| !c.code.is_empty()).collect();
        let shown = output.map(|o| (o.line, o.body.clone()));
        for name in &terminals {
            let mut printed = String::new();
            for (j, command) in commands.iter().enumerate() {
                let last = j + 1 == commands.len();
                let line = block.line + 1 + command.line;
                let expect_open = shown.as_ref().filter(|_| last).map(|(_, s)| s.as_str());
                match self.command(name, command, expect_open, &printed) {
                    Ok(out) => printed.push_str(&out),
                    Err(e) => {
                        self.fail(line, format!("`{}`: {e}", command.code));
                        return;
                    }
                }
            }
            if let Some((line, shown)) = &shown {
                self.tally.outputs += 1;
                // Ports are known once the block's servers have started.
                let shown = self.with_ports(shown).replace("\n^C\n", "\n...\n");
                if let Err(diff) = expect::compare(&printed, &shown) {
                    self.fail(
                        *line,
                        format!("the output shown is not what {name} printed:\n{diff}"),
                    );
                }
            }
        }
    }

    fn console_block(&mut self, block: &Block) {
        let mut entries: Vec<(usize, String, String)> = Vec::new();
        let mut continued = false;
        for (n, line) in block.body.lines().enumerate() {
            if let Some(command) = line.strip_prefix("$ ") {
                entries.push((block.line + 1 + n, format!("{command}\n"), String::new()));
                continued = command.ends_with('\\');
            } else if let Some((_, command, output)) = entries.last_mut() {
                if continued {
                    command.push_str(line);
                    command.push('\n');
                    continued = line.ends_with('\\');
                } else {
                    output.push_str(line);
                    output.push('\n');
                }
            } else {
                self.fail(block.line, "a console block starts with `$ command`");
                return;
            }
        }
        for (line, command, shown) in entries {
            let logical = markdown::logical_commands(&command);
            let [command] = logical.as_slice() else {
                self.fail(line, "one `$` line, one command");
                continue;
            };
            let shown = self.with_ports(&shown);
            match self.command("T2", command, Some(&shown), "") {
                Ok(printed) => {
                    self.tally.outputs += 1;
                    let shown = shown.replace("\n^C\n", "\n...\n");
                    if let Err(diff) = expect::compare(&printed, &shown) {
                        self.fail(
                            line,
                            format!("`{}` prints otherwise:\n{diff}", command.code),
                        );
                    }
                }
                Err(e) => self.fail(line, format!("`{}`: {e}", command.code)),
            }
        }
    }

    /// Runs one command; what it printed. SHOWN, for the last command of a block, is the output
    /// the doc shows for the block, of which BEFORE was printed by the commands before it.
    fn command(
        &mut self,
        terminal: &str,
        command: &Logical,
        shown: Option<&str>,
        before: &str,
    ) -> Result<String, String> {
        let code = as_forkscope(&command.code);
        match classify(&code)? {
            Kind::Skipped(why) => {
                self.tally.skipped.push(format!("{code}  ({why})"));
                Ok(String::new())
            }
            Kind::Server => {
                self.tally.run += 1;
                self.start_server(&code)
            }
            kind @ (Kind::Run | Kind::Dashboard) => {
                self.tally.run += 1;
                let text = self.prepared(&command.text);
                let stream = shown
                    .filter(|s| s.ends_with("\n...\n") || s.ends_with("\n^C\n"))
                    .map(|s| {
                        (
                            self.with_ports(s).replace("\n^C\n", "\n...\n"),
                            s.ends_with("\n^C\n"),
                        )
                    });
                let term = self.terminal(terminal)?;
                term.start_command(&text)?;
                let (printed, ended) = match stream {
                    Some((pattern, press_ctrl_c)) => {
                        let (printed, ended) = term
                            .watch(STREAM_LIMIT, |so_far| {
                                expect::compare(&format!("{before}{so_far}"), &pattern).is_ok()
                            })
                            .map_err(|so_far| {
                                let diff = expect::compare(&format!("{before}{so_far}"), &pattern)
                                    .err()
                                    .unwrap_or_default();
                                format!(
                                    "after {STREAM_LIMIT:?}, still not the output shown:\n{diff}"
                                )
                            })?;
                        if ended == Ended::Running && press_ctrl_c {
                            term.interrupt(STREAM_LIMIT)?;
                        }
                        (printed, ended)
                    }
                    None => {
                        let (printed, status) = term.finish(COMMAND_LIMIT)?;
                        (printed, Ended::Status(status))
                    }
                };
                let promised = promised_exit(&command.comments);
                match ended {
                    Ended::Status(status) if status != promised => {
                        return Err(format!(
                            "exited {status}, and the doc says {promised}; it printed, at its end:\n{}",
                            tail(&printed)
                        ));
                    }
                    _ => {}
                }
                if kind == Kind::Dashboard {
                    self.tally.dashboards += 1;
                    if !printed.contains("no terminal for the dashboard") {
                        return Err(format!(
                            "a dashboard launch without a terminal prints the demonstration; it printed:\n{}",
                            tail(&printed)
                        ));
                    }
                }
                Ok(printed)
            }
        }
    }

    /// Starts `forkscope serve|proxy …` on a free port; its first line.
    fn start_server(&mut self, code: &str) -> Result<String, String> {
        if let Some(bad) = code.chars().find(|c| "|&;$'\"<>`".contains(*c)) {
            return Err(format!("a server is started without a shell: no `{bad}`"));
        }
        let code = self.prepared(code);
        let mut args: Vec<String> = code.split_whitespace().skip(1).map(String::from).collect();
        let serve = args[0] == "serve";
        let mut doc_port = None;
        if serve {
            // One T1 at a time: a reader stops the old server before starting another.
            self.servers.clear();
            match args.iter().position(|a| a == "--port") {
                Some(at) => {
                    doc_port = Some(args[at + 1].parse::<u16>().map_err(|e| e.to_string())?);
                    args[at + 1] = "0".to_string();
                }
                None => {
                    doc_port = Some(8931);
                    args.extend(["--port".to_string(), "0".to_string()]);
                }
            }
        }
        let server = Server::start(
            &self.bin.join("forkscope"),
            &args,
            self.scratch.path(),
            STREAM_LIMIT,
        );
        let banner = format!("{}\n", server.banner);
        if let Some(doc) = doc_port {
            let real = LISTENS
                .captures(&server.banner)
                .ok_or_else(|| format!("no address in its first line: {banner}"))?[1]
                .parse()
                .map_err(|e: std::num::ParseIntError| e.to_string())?;
            self.ports.retain(|(d, _)| *d != doc);
            self.ports.push((doc, real));
        }
        self.servers.push(server);
        Ok(banner)
    }

    /// The paragraph before BLOCK may say "T1 logs `…`": wait for that line first.
    fn await_cue(&mut self, block: &Block) {
        let Some(cue) = T1_LOGS.captures(&block.intro) else {
            return;
        };
        let cue = cue[1].to_string();
        let waited = match self.servers.last_mut() {
            Some(t1) => t1
                .await_log(STREAM_LIMIT, |line| expect::line_contains(line, &cue))
                .map_err(|e| format!("T1 never logged `{cue}`: {e}")),
            None => Err(format!("waits for T1 to log `{cue}`, and no T1 runs")),
        };
        if let Err(e) = waited {
            self.fail(block.line, e);
        }
    }

    /// A `^C` block: Ctrl-C in T1, and what it prints then.
    fn stop_server(&mut self, block: &Block) {
        self.await_cue(block);
        let Some(mut t1) = self.servers.pop() else {
            self.fail(block.line, "Ctrl-C for T1, and no T1 runs");
            return;
        };
        self.tally.outputs += 1;
        match t1.interrupt(STREAM_LIMIT) {
            Ok(printed) => {
                let shown = self.with_ports(&block.body);
                if let Err(diff) = expect::compare(&format!("^C\n{printed}"), &shown) {
                    self.fail(
                        block.line,
                        format!("T1 prints otherwise on Ctrl-C:\n{diff}"),
                    );
                }
            }
            Err(e) => self.fail(block.line, e),
        }
    }
}

/// The last lines of a long output, for a failure message.
fn tail(printed: &str) -> String {
    let lines: Vec<&str> = printed.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A block the test does not run must not hold a command (a reader would run it unchecked).
fn not_a_command_block(block: &Block) -> Result<(), String> {
    match block.info.as_str() {
        "text illustration" | "toml" => return Ok(()),
        "" => {}
        "text" => {
            return Err(
                "an output block that follows no command block: put it right after \
                        its command, or mark it ```text illustration if it is not output"
                    .to_string(),
            );
        }
        other => {
            return Err(format!(
                "a ```{other} block: the docs test reads sh, console, text, text illustration and toml"
            ));
        }
    }
    match block.body.lines().find(|l| {
        ["$ ", "forkscope ", "cargo ", "curl "]
            .iter()
            .any(|p| l.trim_start().starts_with(p))
    }) {
        Some(l) => Err(format!(
            "a command in a block the test does not run ({l:?}): write it in ```sh or ```console"
        )),
        None => Ok(()),
    }
}

fn run_doc(doc: &'static str) {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    let tally = DocRun::new(doc).run(&text);
    println!(
        "{doc}: {} commands run ({} of them dashboard launches, checked without a terminal), \
         {} outputs compared, {} skipped:",
        tally.run,
        tally.dashboards,
        tally.outputs,
        tally.skipped.len()
    );
    for skipped in &tally.skipped {
        println!("  skipped: {skipped}");
    }
}

/// Every doc a reader is sent to: the README and the manual's pages, each run on its own (a
/// page starts with fresh terminals, as a reader opening it does).
const DOCS: &[&str] = &[
    "README.md",
    "docs/dashboard.md",
    "docs/scenarios.md",
    "docs/check.md",
    "docs/probe.md",
    "docs/serve.md",
    "docs/replicas.md",
    "docs/workshop.md",
];

#[test]
fn readme_commands_print_what_the_readme_shows() {
    run_doc("README.md");
}

#[test]
fn dashboard_page_commands_print_what_it_shows() {
    run_doc("docs/dashboard.md");
}

#[test]
fn scenarios_page_commands_print_what_it_shows() {
    run_doc("docs/scenarios.md");
}

#[test]
fn check_page_commands_print_what_it_shows() {
    run_doc("docs/check.md");
}

#[test]
fn probe_page_commands_print_what_it_shows() {
    run_doc("docs/probe.md");
}

#[test]
fn serve_page_commands_print_what_it_shows() {
    run_doc("docs/serve.md");
}

#[test]
fn replicas_page_commands_print_what_it_shows() {
    run_doc("docs/replicas.md");
}

#[test]
fn workshop_commands_print_what_the_workshop_shows() {
    run_doc("docs/workshop.md");
}

/// No page of the manual escapes the test: every `docs/*.md` is in [`DOCS`].
#[test]
fn every_page_of_the_manual_is_run() {
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
            assert!(
                DOCS.contains(&name.as_str()),
                "{name} is not in DOCS: its commands would go unrun"
            );
        }
    }
}

/// The lists in `docs/commands.rs` stay true: every skipped command and every change of pace is still in a
/// doc (one left over would hide that the doc changed), and the docs hold no command the test
/// would neither run nor skip.
#[test]
fn every_skip_and_change_of_pace_names_a_command_the_docs_show() {
    let commands: Vec<(String, String)> = DOCS.iter().copied().flat_map(doc_commands).collect();
    for (skipped, _) in SKIPPED {
        assert!(
            commands.iter().any(|(code, _)| code == skipped),
            "SKIPPED lists `{skipped}`, which no doc shows any more"
        );
    }
    for (doc, _, _) in PACE {
        assert!(
            commands.iter().any(|(_, text)| text.contains(doc)),
            "PACE changes `{doc}`, which no doc command has any more"
        );
    }
    for (code, _) in &commands {
        if let Err(e) = classify(code) {
            panic!("{e}");
        }
    }
}

/// A dashboard launch written inline (`forkscope --policy naive --present`, in the workshop's
/// plan) runs too, without a terminal: that checks its flags, settings and scenario. One with a
/// placeholder in capitals (`scenarios/FILE.toml`) is a template, not a command.
#[test]
fn inline_dashboard_launches_are_accepted() {
    let launch = Regex::new(r"`forkscope (--[^`]*)`").unwrap();
    let placeholder = Regex::new(r"\b[A-Z]{3,}\b").unwrap();
    let mut checked = Vec::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        for found in launch.captures_iter(&text) {
            let args = &found[1];
            if placeholder.is_match(args) {
                continue;
            }
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
                .args(args.split_whitespace())
                .current_dir(repo())
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && said.contains("no terminal for the dashboard"),
                "{doc}: `forkscope {args}` is refused ({}): {said}",
                out.status
            );
            checked.push(format!("forkscope {args}"));
        }
    }
    println!("inline dashboard launches accepted: {}", checked.join(", "));
    assert!(
        !checked.is_empty(),
        "the docs show no dashboard launch inline any more"
    );
}
