//! `forkscope check`: the exhaustive explorer of `forkscope_core::model`, reported for people
//! and for scripts, and a counterexample turned into a scenario `forkscope run` replays over
//! real sockets.

use forkscope_core::model::{
    self, Bounds, Counterexample, Delivery, Exploration, Level, ProbeGet, Step,
};
use forkscope_core::{Anomaly, ConfigError, LabConfig, Policy, StreamIdentity};
use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// One policy's search and how long it took.
#[derive(Debug)]
pub struct Checked {
    pub exploration: Exploration,
    pub elapsed: Duration,
    /// The counterexample told step by step (empty without one).
    pub trace: Vec<model::TraceStep>,
}

impl Checked {
    pub fn states_per_second(&self) -> f64 {
        self.exploration.distinct as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The explorer's lab configuration, with the identity mode asked for.
pub fn config(identity: StreamIdentity) -> LabConfig {
    LabConfig {
        identity,
        ..model::config()
    }
}

/// Runs the search for one policy; `on_level` sees each depth as it completes.
pub fn check(
    config: LabConfig,
    policy: Policy,
    bounds: Bounds,
    on_level: impl FnMut(&Level),
) -> Result<Checked, ConfigError> {
    let started = Instant::now();
    // Every core the machine gives this process: the search is the same on any number.
    let workers = std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN);
    let exploration = model::explore_on(workers, config, policy, bounds, on_level)?;
    let elapsed = started.elapsed();
    let trace = match &exploration.counterexample {
        Some(c) => model::trace(config, policy, &c.steps, c.delivery)?,
        None => Vec::new(),
    };
    Ok(Checked {
        exploration,
        elapsed,
        trace,
    })
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The report for people.
pub fn text(checked: &[Checked]) -> String {
    let mut out = String::new();
    for c in checked {
        let e = &c.exploration;
        let _ = writeln!(out, "{}: {}", e.policy, e.verdict());
        let depth = match e.stopped {
            None => format!("depth {} of {}", e.depth_reached, e.bounds.depth),
            Some(stopped) => format!(
                "depth {} of {} in full, {} cut short",
                e.proven_depth, e.bounds.depth, stopped.at_depth
            ),
        };
        let _ = writeln!(
            out,
            "  {} distinct states, {} steps taken, {depth}, at most {} streams per session, \
             {} delivery{}; {:.2} s ({} states/s)",
            thousands(e.distinct),
            thousands(e.transitions),
            e.bounds.streams,
            match e.bounds.delivery {
                Delivery::Interleaved => "interleaved",
                Delivery::Eager => "eager",
            },
            if e.bounds.probes {
                ""
            } else {
                ", no foreign GETs"
            },
            c.elapsed.as_secs_f64(),
            thousands(c.states_per_second() as u64)
        );
        let _ = writeln!(
            out,
            "  memory: {} held at most (estimated), of a {} budget",
            e.estimated_peak, e.bounds.memory_budget
        );
        if let Some(counterexample) = &e.counterexample {
            let _ = writeln!(
                out,
                "  shortest schedule, from a client connected to a fresh session:"
            );
            for (i, step) in c.trace.iter().enumerate() {
                let _ = writeln!(out, "  {:>2}. {}", i + 1, step.step);
                for fact in &step.happened {
                    let _ = writeln!(out, "        {fact}");
                }
                for anomaly in &step.anomalies {
                    let _ = writeln!(out, "        ✘ {anomaly}");
                }
            }
            let said = model::said_of(&c.trace, counterexample.anomaly.kind())
                .map_or_else(|| counterexample.anomaly.to_string(), str::to_owned);
            let _ = writeln!(out, "  the checker: {said}");
        } else {
            let levels: Vec<String> = e
                .levels
                .iter()
                .map(|l| {
                    let cut = if l.complete { "" } else { " (cut short)" };
                    format!("{}:{}{cut}", l.depth, thousands(l.distinct))
                })
                .collect();
            let _ = writeln!(out, "  states by depth: {}", levels.join("  "));
            let reached: Vec<String> = e
                .reached
                .iter()
                .map(|(what, n)| format!("{what} ({})", thousands(*n)))
                .collect();
            let _ = writeln!(out, "  reached (steps that did it): {}", reached.join(", "));
        }
    }
    out
}

/// The report for scripts.
pub fn json(checked: &[Checked]) -> serde_json::Value {
    serde_json::Value::Array(
        checked
            .iter()
            .map(|c| {
                let e = &c.exploration;
                serde_json::json!({
                    "policy": e.policy,
                    "verdict": e.verdict(),
                    "holds": e.counterexample.is_none(),
                    "complete": e.complete,
                    "exhausted": e.exhausted,
                    "bounds": e.bounds,
                    "distinct_states": e.distinct,
                    "transitions": e.transitions,
                    "pruned": e.pruned,
                    "depth_reached": e.depth_reached,
                    "proven_depth": e.proven_depth,
                    "stopped": e.stopped,
                    "estimated_peak_bytes": e.estimated_peak,
                    "workers": e.workers,
                    "elapsed_ms": c.elapsed.as_millis() as u64,
                    "states_per_second": c.states_per_second().round() as u64,
                    "levels": e.levels,
                    "reached": e.reached,
                    "counterexample": e.counterexample.as_ref().map(|x| serde_json::json!({
                        "anomaly": x.anomaly.kind(),
                        "said": x.anomaly.to_string(),
                        "steps": x.steps,
                        "trace": c.trace,
                    })),
                })
            })
            .collect(),
    )
}

fn quoted(text: &str) -> String {
    // TOML basic strings take JSON's escapes for what we write.
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

/// What the replayed lab shows after each step, for the waits that keep the real run in step
/// with the model.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Observed {
    /// Events the latest tool call applied, and whether its result was.
    call_applied: u64,
    call_done: bool,
    applied: u64,
    emits: u64,
    decisions: usize,
    orphaned: u64,
    connected: bool,
}

fn observe(sim: &forkscope_core::sim::Sim) -> Observed {
    let counters = sim.history().checker().counters();
    let call = sim.client().requests().last();
    Observed {
        call_applied: call.map_or(0, |r| r.applied),
        call_done: call.is_some_and(|r| r.phase == forkscope_core::client::RequestPhase::Done),
        applied: counters.applied,
        emits: counters.emits,
        decisions: sim.decisions().len(),
        orphaned: counters.orphaned,
        connected: sim.connected(),
    }
}

/// A counterexample as a scenario file (see [`schedule_toml`]).
pub fn scenario_toml(
    config: LabConfig,
    policy: Policy,
    counterexample: &Counterexample,
    trace: &[model::TraceStep],
) -> Result<String, ConfigError> {
    schedule_toml(
        config,
        policy,
        &counterexample.steps,
        counterexample.delivery,
        trace,
        Some(&counterexample.anomaly),
    )
}

/// A schedule as a scenario file: each model step becomes the action a person would press,
/// followed by waits on the state the model reached, so `forkscope run` replays it over real
/// sockets step for step, and the dashboard plays it with the checker's words as narration.
/// It expects `anomaly`'s kind (a counterexample), or a clean run. Over real sockets events
/// arrive at once: a schedule explored with [`Delivery::Interleaved`] that leaves an event in
/// flight across a fault may replay differently; one explored with [`Delivery::Eager`] does not.
pub fn schedule_toml(
    config: LabConfig,
    policy: Policy,
    steps: &[Step],
    delivery: Delivery,
    trace: &[model::TraceStep],
    anomaly: Option<&Anomaly>,
) -> Result<String, ConfigError> {
    let mut sim = model::initial(config, policy)?;
    let mut out = String::new();
    let said = anomaly.and_then(|a| model::said_of(trace, a.kind()).map(str::to_owned));
    let (name, teaches) = match anomaly {
        Some(anomaly) => (
            format!(
                "Shortest {} under {policy} ({} steps, found by forkscope check)",
                anomaly.kind(),
                steps.len()
            ),
            format!(
                "forkscope check explored every interleaving of the lab's steps; this is a \
                 shortest schedule in which the {policy} policy lets a {} happen. The checker, \
                 in the model: {}",
                anomaly.kind(),
                said.unwrap_or_else(|| anomaly.to_string())
            ),
        ),
        None => (
            format!("A {}-step schedule under {policy}", steps.len()),
            "A schedule of the lab's steps written by forkscope; the model found it clean."
                .to_owned(),
        ),
    };
    let _ = writeln!(
        out,
        "# Written by forkscope from a schedule of `forkscope check`'s model.\nname = {}\n\
         teaches = {}\npolicy = {}",
        quoted(&name),
        quoted(&teaches),
        quoted(policy.name()),
    );
    let identity = match config.identity {
        StreamIdentity::EventId => "event_id",
        StreamIdentity::TokenHeader => "token_header",
    };
    let tool = sim.tool();
    let _ = writeln!(
        out,
        "tool = {{ steps = {}, delay_ms = {} }}\n",
        tool.steps, tool.delay_ms
    );
    let _ = writeln!(
        out,
        "[config]\ngrace_ms = {}\nreplay_buffer = {}\nretention_ms = {}\nsession_idle_ms = {}\n\
         identity = \"{identity}\"\n\n[config.retry]\ninitial_backoff_ms = {}\nmax_backoff_ms = {}\n\
         budget_ms = {}\n",
        config.grace_ms,
        config.replay_buffer,
        config.retention_ms,
        config.session_idle_ms,
        config.retry.initial_backoff_ms,
        config.retry.max_backoff_ms,
        config.retry.budget_ms,
    );
    let _ = writeln!(
        out,
        "[[step]]\nwait = \"connected\"\nsay = \"the client is connected to a fresh session: the \
         state every schedule starts from\"\n"
    );
    let mut before = observe(&sim);
    for (i, step) in steps.iter().enumerate() {
        let now = sim.now();
        model::take(*step, &mut sim, delivery);
        let after = observe(&sim);
        let told = trace.get(i);
        let mut say = format!("{}. {step}", i + 1);
        if let Some(told) = told {
            for fact in &told.happened {
                let _ = write!(say, "; {fact}");
            }
            for anomaly in &told.anomalies {
                let _ = write!(say, " ✘ {anomaly}");
            }
        }
        let head = match step {
            Step::EmitBackground => "action = \"emit_background\"".to_owned(),
            Step::Deliver | Step::DeliverCall => String::new(),
            Step::CallTool => "action = \"start_tool_call\"".to_owned(),
            Step::DropConnection => "action = \"drop_connection\"".to_owned(),
            Step::Reset => "action = \"reset\"".to_owned(),
            Step::ExpireHalfOpen => "action = \"expire_half_open\"".to_owned(),
            Step::StripToken => "action = \"strip_token\"".to_owned(),
            Step::Reconnect => "action = \"reconnect_now\"".to_owned(),
            Step::Advance => format!("advance_ms = {}", sim.now().since(now)),
            Step::Probe(probe) => {
                let (token, cursor) = match probe {
                    ProbeGet::SameHeaders => ("current", true),
                    ProbeGet::CursorOnly => ("none", true),
                    ProbeGet::Plain => ("none", false),
                    ProbeGet::GarbageToken => ("garbage", true),
                };
                if cursor {
                    format!("probe = {{ token = \"{token}\", last_event_id = \"current\" }}")
                } else {
                    format!("probe = {{ token = \"{token}\" }}")
                }
            }
        };
        let mut waits: Vec<String> = Vec::new();
        if matches!(step, Step::CallTool) {
            waits.push("wait = \"tool_progress\"\ncount = 0".to_owned());
        }
        if after.call_done && !before.call_done {
            waits.push("wait = \"tool_done\"".to_owned());
        } else if after.call_applied > before.call_applied {
            waits.push(format!(
                "wait = \"tool_progress\"\ncount = {}",
                after.call_applied
            ));
        }
        if after.emits > before.emits {
            waits.push(format!("wait = \"emits\"\ncount = {}", after.emits));
        }
        if after.applied > before.applied {
            waits.push(format!("wait = \"applied\"\ncount = {}", after.applied));
        }
        if after.orphaned > before.orphaned && !matches!(step, Step::Probe(_)) {
            waits.push(format!("wait = \"orphaned\"\ncount = {}", after.orphaned));
        }
        if after.decisions > before.decisions {
            waits.push(format!(
                "wait = \"decision\"\ncount = {}",
                after.decisions - before.decisions
            ));
        }
        if matches!(step, Step::DropConnection | Step::Reset) {
            waits.push("wait = \"reconnecting\"".to_owned());
        } else if after.connected && !before.connected {
            waits.push("wait = \"connected\"".to_owned());
        }
        let mut first = true;
        if !head.is_empty() {
            let _ = writeln!(out, "[[step]]\n{head}\nsay = {}\n", quoted(&say));
            first = false;
        }
        for wait in waits {
            if first {
                let _ = writeln!(out, "[[step]]\n{wait}\nsay = {}\n", quoted(&say));
                first = false;
            } else {
                let _ = writeln!(out, "[[step]]\n{wait}\n");
            }
        }
        if first {
            // A step with nothing to press or wait for (a priming event arriving): say it.
            let _ = writeln!(out, "[[step]]\nsay = {}\n", quoted(&say));
        }
        before = after;
    }
    match anomaly {
        Some(anomaly) => {
            let _ = writeln!(
                out,
                "[expect.{}]\nanomalies = {{ {} = \">=1\" }}",
                policy.name(),
                serde_json::to_value(anomaly.kind())
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(out, "[expect.{}]\nclean = true", policy.name());
        }
    }
    Ok(out)
}

/// Writes `text` to a new file: never over an existing one, and never half-written (a
/// temporary file beside it, renamed into place).
pub fn write_new(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let temporary = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut file = std::fs::File::create_new(&temporary)?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    // A hard link fails when the target exists: no race can overwrite a file made meanwhile.
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    linked
}
