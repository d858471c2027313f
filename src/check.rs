//! `forkscope check`: the exhaustive explorer of `forkscope_core::model`, reported for people
//! and for scripts, and a counterexample turned into a scenario `forkscope run` replays over
//! real sockets.

pub mod replicas;
pub mod requests;

use crate::lab::{Action, Probe, ProbeToken};
use crate::scenario::file::{
    Count, Policies, ScenarioFile, StepFile, ToolArgs, WaitFor, WriteError,
};
use forkscope_core::model::{
    self, Bounds, Counterexample, Delivery, Exploration, Limits, ProbeGet, Progress, Step,
};
use forkscope_core::{Anomaly, ConfigError, LabConfig, Policy, StreamIdentity};
use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// One policy's search and how long it took: `S`, `R` and `T` are the model's step, rules
/// and told step (one server's by default; [`replicas::Checked`] for the replica lab).
#[derive(Debug)]
pub struct Checked<S = Step, R = Bounds, T = model::TraceStep> {
    pub exploration: Exploration<S, R>,
    pub elapsed: Duration,
    /// The counterexample told step by step (empty without one).
    pub trace: Vec<T>,
}

impl<S, R, T> Checked<S, R, T> {
    /// Runs a search (`search`, handed this process's clock for its time budget) and tells its
    /// counterexample step by step (`trace`): what `check` does for every model.
    pub(crate) fn timed(
        search: impl FnOnce(&mut dyn FnMut() -> Duration) -> Exploration<S, R>,
        trace: impl FnOnce(&[S]) -> Vec<T>,
    ) -> Self {
        let started = Instant::now();
        let exploration = search(&mut || started.elapsed());
        let elapsed = started.elapsed();
        let trace = exploration
            .counterexample
            .as_ref()
            .map(|c| trace(&c.steps))
            .unwrap_or_default();
        Checked {
            exploration,
            elapsed,
            trace,
        }
    }

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

/// Runs the search for one policy, its time budget on this process's clock; `on_progress`
/// hears after every round of the search.
pub fn check(
    config: LabConfig,
    policy: Policy,
    bounds: Bounds,
    limits: Limits,
    mut on_progress: impl FnMut(&Progress),
) -> Result<Checked, ConfigError> {
    let started = Instant::now();
    let exploration = model::explore_on(
        workers(),
        config,
        policy,
        bounds,
        limits,
        &mut || started.elapsed(),
        &mut on_progress,
    )?;
    let elapsed = started.elapsed();
    let trace = match &exploration.counterexample {
        Some(c) => model::trace(config, policy, &c.steps, bounds.delivery, c.ends_run)?,
        None => Vec::new(),
    };
    Ok(Checked {
        exploration,
        elapsed,
        trace,
    })
}

/// Every core the machine gives this process: the search is the same on any number.
pub fn workers() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// `1,234,567`: the core's, as its verdicts write numbers.
pub use forkscope_core::model::thousands;

/// The report for people.
pub fn text(checked: &[Checked]) -> String {
    let mut out = String::new();
    for c in checked {
        let e = &c.exploration;
        let _ = writeln!(out, "{}: {}", e.policy, e.verdict());
        let about = format!(
            "at most {} streams per session, {} delivery{}",
            e.rules.streams,
            delivery_name(e.rules.delivery),
            if e.rules.probes {
                ""
            } else {
                ", no foreign GETs"
            },
        );
        write_summary(&mut out, c, &about);
        if let Some(counterexample) = &e.counterexample {
            let _ = writeln!(
                out,
                "  shortest schedule, from a client connected to a fresh session:"
            );
            for (i, step) in c.trace.iter().enumerate() {
                write_step(&mut out, i + 1, &step.step, &step.happened, &step.anomalies);
            }
            let said = model::said_of(&c.trace, counterexample.anomaly.kind())
                .map_or_else(|| counterexample.anomaly.to_string(), str::to_owned);
            let _ = writeln!(out, "  the checker: {said}");
        } else {
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

/// What every model's report says of its search, after the verdict: the states, the depth,
/// what was explored (`about`), the time and the memory, and without a counterexample the
/// states by depth.
pub(crate) fn write_summary<S, R, T>(out: &mut String, c: &Checked<S, R, T>, about: &str) {
    let e = &c.exploration;
    let depth = match e.stopped {
        None => format!("depth {} of {}", e.depth_reached, e.limits.depth),
        Some(stopped) => format!(
            "depth {} of {} in full, {} cut short",
            e.proven_depth, e.limits.depth, stopped.at_depth
        ),
    };
    let _ = writeln!(
        out,
        "  {} distinct states, {} steps taken, {depth}, {about}; {:.2} s ({} states/s)",
        thousands(e.distinct),
        thousands(e.transitions),
        c.elapsed.as_secs_f64(),
        thousands(c.states_per_second() as u64)
    );
    let time = match e.limits.time_budget_secs {
        Some(secs) => format!(" and a {secs} s time budget"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "  memory: {} held at most (estimated), of a {} budget{time}",
        e.estimated_peak, e.limits.memory_budget
    );
    if e.counterexample.is_none() {
        let _ = writeln!(out, "  states by depth: {}", states_by_depth(&e.levels));
    }
}

pub(crate) fn delivery_name(delivery: Delivery) -> &'static str {
    match delivery {
        Delivery::Interleaved => "interleaved",
        Delivery::Eager => "eager",
    }
}

/// What every model's JSON report says of its search; `rules` is what it explored besides the
/// limits, under its own name.
pub(crate) fn json_summary<S: serde::Serialize, R, T: serde::Serialize>(
    c: &Checked<S, R, T>,
    rules: (&str, serde_json::Value),
) -> serde_json::Value {
    let e = &c.exploration;
    let mut report = serde_json::json!({
        "policy": e.policy,
        "verdict": e.verdict(),
        "holds": e.counterexample.is_none(),
        "complete": e.complete,
        "exhausted": e.exhausted,
        "limits": e.limits,
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
    });
    report[rules.0] = rules.1;
    report
}

/// The report for scripts.
pub fn json(checked: &[Checked]) -> serde_json::Value {
    serde_json::Value::Array(
        checked
            .iter()
            .map(|c| json_summary(c, ("bounds", serde_json::json!(c.exploration.rules))))
            .collect(),
    )
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
    /// The client spent its retry budget.
    gave_up: bool,
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
        gave_up: matches!(
            sim.client().phase(),
            forkscope_core::client::Phase::GaveUp { .. }
        ),
    }
}

/// A counterexample as a scenario file (see [`schedule_toml`]).
pub fn scenario_toml(
    config: LabConfig,
    checked: &Checked,
    counterexample: &Counterexample,
) -> Result<String, ScheduleError> {
    let e = &checked.exploration;
    schedule_toml(
        config,
        e.policy,
        &counterexample.steps,
        e.rules.delivery,
        &checked.trace,
        Some(&counterexample.anomaly),
    )
}

/// A schedule could not be written as a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Write(#[from] WriteError),
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
) -> Result<String, ScheduleError> {
    let file = schedule_file(config, policy, steps, delivery, trace, anomaly)?;
    Ok(format!(
        "# Written by forkscope from a schedule of `forkscope check`'s model.\n{}",
        file.to_toml()?
    ))
}

fn schedule_file(
    config: LabConfig,
    policy: Policy,
    steps: &[Step],
    delivery: Delivery,
    trace: &[model::TraceStep],
    anomaly: Option<&Anomaly>,
) -> Result<ScenarioFile, ConfigError> {
    let mut sim = model::initial(config, policy)?;
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
    let mut file = ScenarioFile::new(name, teaches, Policies::from(policy));
    let tool = sim.tool();
    file.tool = Some(ToolArgs {
        steps: tool.steps,
        delay_ms: tool.delay_ms,
    });
    // The model's protocol settings; its short history ring is an economy of the search,
    // not part of the schedule, so the replay keeps the lab's.
    file.config = LabConfig {
        grace_ms: config.grace_ms,
        retry: config.retry,
        replay_buffer: config.replay_buffer,
        retention_ms: config.retention_ms,
        session_idle_ms: config.session_idle_ms,
        identity: config.identity,
        ..LabConfig::default()
    };
    file.push(
        StepFile::wait(WaitFor::Connected, 1).say(
            "the client is connected to a fresh session: the state every schedule starts from",
        ),
    );
    let mut before = observe(&sim);
    for (i, step) in steps.iter().enumerate() {
        let now = sim.now();
        model::take(*step, &mut sim, delivery);
        let after = observe(&sim);
        let mut say = format!("{}. {step}", i + 1);
        if let Some(told) = trace.get(i) {
            for fact in &told.happened {
                let _ = write!(say, "; {fact}");
            }
            for anomaly in &told.anomalies {
                let _ = write!(say, " ✘ {anomaly}");
            }
        }
        let mut written: Vec<StepFile> = Vec::new();
        match step {
            Step::EmitBackground => written.push(StepFile::action(Action::EmitBackground)),
            Step::Deliver | Step::DeliverCall => {}
            Step::CallTool => written.push(StepFile::action(Action::StartToolCall)),
            Step::DropConnection => written.push(StepFile::action(Action::DropConnection)),
            Step::Reset => written.push(StepFile::action(Action::Reset)),
            Step::ExpireHalfOpen => written.push(StepFile::action(Action::ExpireHalfOpen)),
            Step::StripToken => written.push(StepFile::action(Action::StripToken)),
            Step::Reconnect => written.push(StepFile::action(Action::ReconnectNow)),
            Step::Advance => written.push(StepFile::advance(sim.now().since(now), 1)),
            Step::Probe(probe) => {
                let (token, cursor) = match probe {
                    ProbeGet::SameHeaders => (ProbeToken::Current, true),
                    ProbeGet::CursorOnly => (ProbeToken::None, true),
                    ProbeGet::Plain => (ProbeToken::None, false),
                    ProbeGet::GarbageToken => (ProbeToken::Garbage, true),
                };
                written.push(StepFile {
                    probe: Some(Probe {
                        token,
                        last_event_id: cursor.then(|| "current".to_owned()),
                    }),
                    ..StepFile::default()
                });
            }
        }
        if matches!(step, Step::CallTool) {
            written.push(StepFile::wait(WaitFor::ToolProgress, 0));
        }
        if after.call_done && !before.call_done {
            written.push(StepFile::wait(WaitFor::ToolDone, 1));
        } else if after.call_applied > before.call_applied {
            written.push(StepFile::wait(WaitFor::ToolProgress, after.call_applied));
        }
        if after.emits > before.emits {
            written.push(StepFile::wait(WaitFor::Emits, after.emits));
        }
        if after.applied > before.applied {
            written.push(StepFile::wait(WaitFor::Applied, after.applied));
        }
        if after.orphaned > before.orphaned && !matches!(step, Step::Probe(_)) {
            written.push(StepFile::wait(WaitFor::Orphaned, after.orphaned));
        }
        if after.gave_up && !before.gave_up {
            // The model's client spends its budget here. Over sockets its last tries may fall
            // a little differently (an SDK's bare refusal, answered in real time): wait for it
            // to be answered or to give up, not for a count of rulings it may not make.
            written.push(StepFile::wait(WaitFor::Answered, 1));
        } else if after.decisions > before.decisions {
            let ruled = (after.decisions - before.decisions) as u64;
            written.push(StepFile::wait(WaitFor::Decision, ruled));
        }
        if matches!(step, Step::DropConnection | Step::Reset) {
            written.push(StepFile::wait(WaitFor::Reconnecting, 1));
        } else if after.connected && !before.connected {
            written.push(StepFile::wait(WaitFor::Connected, 1));
        }
        // The first step says what happened; a step with nothing to press or wait for (a
        // priming event arriving) is only said.
        let mut written = written.into_iter();
        file.push(written.next().unwrap_or_default().say(say));
        written.for_each(|step| file.push(step));
        before = after;
    }
    let expect = file.expect.of(policy);
    match anomaly {
        Some(anomaly) => {
            expect.anomalies.insert(anomaly.kind(), Count::AtLeast(1));
        }
        None => expect.clean = Some(true),
    }
    Ok(file)
}

/// `1:9  2:40  3:137 …`: distinct states after each depth, a level a limit cut short marked.
pub(crate) fn states_by_depth(levels: &[forkscope_core::model::Level]) -> String {
    let levels: Vec<String> = levels
        .iter()
        .map(|l| {
            let cut = if l.complete { "" } else { " (cut short)" };
            format!("{}:{}{cut}", l.depth, thousands(l.distinct))
        })
        .collect();
    levels.join("  ")
}

/// One step of a counterexample, as both reports narrate it: what was done, what it made
/// happen, and what the checker said of it.
pub(crate) fn write_step(
    out: &mut String,
    n: usize,
    said: &impl std::fmt::Display,
    happened: &[impl std::fmt::Display],
    anomalies: &[impl std::fmt::Display],
) {
    let _ = writeln!(out, "  {n:>2}. {said}");
    for fact in happened {
        let _ = writeln!(out, "        {fact}");
    }
    for anomaly in anomalies {
        let _ = writeln!(out, "        ✘ {anomaly}");
    }
}
