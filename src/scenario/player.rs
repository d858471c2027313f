//! Plays a scenario against a real lab (server, proxy, client on loopback) whose clock only
//! moves when the script says so, then judges the run against the file's expectations.

use super::format::{Expect, Scenario, StepKind, WaitFor};
use crate::lab::Core;
use crate::lab::{Lab, LabError, LabOptions, NotReached, Outcome, ProbeResult};
use forkscope_core::client::Phase;
use forkscope_core::client::RequestPhase;
use forkscope_core::history::Counters;
use forkscope_core::{Policy, Verdict};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Why a scenario stopped before its last step.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PlayError {
    /// Shared, so a run that records it can still be cloned.
    #[error("the lab did not start: {0}")]
    LabDidNotStart(Arc<LabError>),
    #[error("before step 1: {0}")]
    NeverConnected(WaitFailed),
    #[error("step {step} (line {line}): {failed}")]
    Step {
        step: usize,
        line: usize,
        failed: WaitFailed,
    },
}

impl serde::Serialize for PlayError {
    /// As its sentence: what a report shows.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A wait that ran out of time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("waiting for {} (`wait = \"{}\"`): {reason}", what.describe(*count), wait_name(what))]
pub struct WaitFailed {
    pub what: WaitFor,
    pub count: u64,
    pub reason: NotReached,
}

/// A wait's name as a scenario file spells it.
fn wait_name(what: &WaitFor) -> String {
    serde_json::to_value(what)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// One expectation, judged.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    pub what: String,
    pub ok: bool,
    pub got: String,
}

/// A scenario played under one policy.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Run {
    pub policy: Policy,
    /// The policy in force at the end, when a step pressed `n` (toggle_naive) and it differs:
    /// a fork it made is labelled `fenced → naive`, never `fenced` alone.
    pub ended_under: Option<Policy>,
    pub verdict: Option<Verdict>,
    pub counters: Option<Counters>,
    pub conditions_broken: Vec<u8>,
    /// Tool calls whose result the client applied.
    pub tool_results: u64,
    pub probes: Vec<ProbeResult>,
    /// The lab refused the configuration (with why).
    pub config_refused: Option<String>,
    /// The run itself failed (a wait timed out, the lab could not start).
    pub error: Option<PlayError>,
    pub checks: Vec<Check>,
    pub transcript: Vec<String>,
}

impl Run {
    /// `fenced`, or `fenced → naive` when the scenario switched policy on the way.
    pub fn label(&self) -> String {
        match self.ended_under {
            Some(now) => format!("{} → {}", self.policy.name(), now.name()),
            None => self.policy.name().to_owned(),
        }
    }

    pub fn ok(&self) -> bool {
        self.error.is_none() && self.checks.iter().all(|c| c.ok)
    }
}

/// Plays `scenario` under `policy`.
pub async fn play(scenario: &Scenario, policy: Policy) -> Run {
    let mut run = new_run(policy);
    let expect = scenario.expect.get(policy).cloned().unwrap_or_default();
    if let Err(e) = scenario.config.validate(policy) {
        run.config_refused = Some(e.to_string());
        run.transcript
            .push(format!("the lab refuses this configuration: {e}"));
        judge(&mut run, &expect);
        return run;
    }
    let lab = match Lab::start(lab_options(scenario, policy)).await {
        Ok(lab) => lab,
        Err(e) => {
            run.error = Some(PlayError::LabDidNotStart(Arc::new(e)));
            return run;
        }
    };
    let mut runs = [run];
    if let Err(e) = drive(&[&lab], scenario, &mut runs, &mut |_, _| {}).await {
        runs[0].error = Some(e);
    }
    let [mut run] = runs;
    finish(&lab, scenario.quiesce_ms).await;
    run.ended_under = Some(lab.policy()).filter(|now| *now != policy);
    {
        let core = lab.core();
        run.verdict = Some(core.history.verdict());
        run.counters = Some(core.history.checker().counters().clone());
        run.tool_results = core.client.tool_results();
    }
    let snapshot = lab.snapshot();
    run.conditions_broken = snapshot
        .view
        .conditions
        .iter()
        .filter(|c| !c.holds)
        .map(|c| c.condition.number())
        .collect();
    lab.stop().await;
    judge(&mut run, &expect);
    run
}

/// Plays the steps against one lab per run (two in compare mode: the same steps, each lab under
/// its run's policy). `on_step` is called after each step, for recordings and narration.
pub async fn drive(
    labs: &[&Lab],
    scenario: &Scenario,
    runs: &mut [Run],
    on_step: &mut (dyn FnMut(usize, &super::format::Step) + Send),
) -> Result<(), PlayError> {
    drive_paced(labs, scenario, runs, on_step, None).await
}

/// Lets a person pace a scenario in the dashboard: play, pause, one step at a time.
#[derive(Debug)]
pub struct Gate {
    pace: tokio::sync::watch::Sender<Pace>,
    /// Real milliseconds between steps while playing, so a person can follow.
    pub step_delay_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    Playing,
    Paused,
    /// Let one step through, then pause.
    StepOnce,
}

impl Gate {
    pub fn new(pace: Pace, step_delay_ms: u64) -> Self {
        Gate {
            pace: tokio::sync::watch::Sender::new(pace),
            step_delay_ms,
        }
    }

    pub fn set(&self, pace: Pace) {
        self.pace.send_replace(pace);
    }

    pub fn pace(&self) -> Pace {
        *self.pace.borrow()
    }

    /// Returns when the next step may run.
    async fn pass(&self) {
        let mut rx = self.pace.subscribe();
        loop {
            let pace = *rx.borrow_and_update();
            match pace {
                Pace::Playing => {
                    tokio::time::sleep(Duration::from_millis(self.step_delay_ms)).await;
                    if self.pace() != Pace::Paused {
                        return;
                    }
                }
                Pace::StepOnce => {
                    self.pace.send_replace(Pace::Paused);
                    return;
                }
                Pace::Paused => {}
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// [`drive`], waiting at each step for the gate when there is one.
pub async fn drive_paced(
    labs: &[&Lab],
    scenario: &Scenario,
    runs: &mut [Run],
    on_step: &mut (dyn FnMut(usize, &super::format::Step) + Send),
    gate: Option<&Gate>,
) -> Result<(), PlayError> {
    for lab in labs {
        // Answered, not connected: an SDK whose stream sends no priming event (python-sdk
        // without a store) gives the client no cursor until its first event.
        wait(lab, WaitFor::Answered, 1, 10_000, 0)
            .await
            .map_err(PlayError::NeverConnected)?;
    }
    // Decisions counted when the last acting step began: a `decision` wait is for what that
    // step caused, even if it already happened before the wait started.
    let mut marks: Vec<u64> = labs.iter().map(|lab| decisions(&lab.core())).collect();
    for (index, step) in scenario.steps.iter().enumerate() {
        if let Some(gate) = gate {
            gate.pass().await;
        }
        let context = |failed| PlayError::Step {
            step: index + 1,
            line: step.line,
            failed,
        };
        for ((lab, run), mark) in labs.iter().zip(runs.iter_mut()).zip(marks.iter_mut()) {
            if step.only.is_some_and(|p| p != run.policy) {
                continue;
            }
            if !matches!(step.kind, StepKind::Wait { .. } | StepKind::Say) {
                *mark = decisions(&lab.core());
            }
            let at = lab.clock().now();
            if let Some(say) = &step.say {
                run.transcript.push(format!("{at:>8}  {say}"));
            }
            match &step.kind {
                StepKind::Say => {}
                StepKind::Action { action, repeat } => {
                    for _ in 0..*repeat {
                        if let Outcome::Refused(e) = lab.apply(*action) {
                            run.transcript.push(format!("{at:>8}  refused: {e}"));
                        }
                    }
                    lab.until_applied().await;
                }
                StepKind::Advance { ms, repeat } => {
                    for i in 0..*repeat {
                        if i > 0 {
                            settle(lab).await;
                        }
                        lab.advance(*ms);
                    }
                }
                StepKind::Wait {
                    what,
                    count,
                    timeout_ms,
                } => {
                    wait(lab, *what, *count, *timeout_ms, *mark)
                        .await
                        .map_err(context)?;
                }
                StepKind::Probe(probe) => {
                    let result = lab.probe(probe).await;
                    run.transcript.push(format!(
                        "{at:>8}  probe → {}{}",
                        result.status,
                        result
                            .reason
                            .as_deref()
                            .map(|r| format!(" {r}"))
                            .unwrap_or_default()
                    ));
                    run.probes.push(result);
                }
            }
        }
        on_step(index, step);
    }
    Ok(())
}

/// The lab a scenario runs in: its configuration, and a clock that moves only when the script
/// advances it.
pub fn lab_options(scenario: &Scenario, policy: Policy) -> LabOptions {
    let defaults = LabOptions::default();
    LabOptions {
        policy,
        config: scenario.config,
        background: scenario
            .background_every_ms
            .map(forkscope_core::EmitRate::every_ms),
        start_paused: true,
        tool_steps: scenario.tool.map_or(defaults.tool_steps, |t| t.steps),
        tool_delay_ms: scenario.tool.map_or(defaults.tool_delay_ms, |t| t.delay_ms),
        replicas: scenario.replicas.clone(),
        mutate: scenario.mutate,
        task_cursor: scenario.task_cursor,
        ..defaults
    }
}

/// A fresh, empty run record for `policy`.
pub fn new_run(policy: Policy) -> Run {
    Run {
        policy,
        ended_under: None,
        verdict: None,
        counters: None,
        tool_results: 0,
        conditions_broken: Vec::new(),
        probes: Vec::new(),
        config_refused: None,
        error: None,
        checks: Vec::new(),
        transcript: Vec::new(),
    }
}

/// GET decisions the server has made: accepted, rejected, a new stream, or an SDK's own
/// answer (an empty 200, a bare 409) — as `check`'s model counts them.
fn decisions(core: &Core) -> u64 {
    let c = core.history.checker().counters();
    c.resumes_accepted
        + c.rejected_total()
        + c.new_streams_flagged
        + c.new_streams_silent
        + c.sdk_answers
}

async fn wait(
    lab: &Lab,
    what: WaitFor,
    count: u64,
    timeout_ms: u64,
    baseline: u64,
) -> Result<(), WaitFailed> {
    // A policy whose events carry no id (python-sdk without a store) never gives the client a
    // cursor: connected is then the stream's 200 alone.
    let unnumbered = forkscope_core::resume::sdk::quirks(lab.policy())
        .is_some_and(|q| q.ids == forkscope_core::IdScheme::Unnumbered);
    let task_client = lab.task_client().clone();
    let ready = |core: &Core| match what {
        WaitFor::Connected => {
            core.client.holds_stream() || (unnumbered && core.client.phase() == Phase::Connected)
        }
        WaitFor::Reconnecting => {
            matches!(core.client.phase(), Phase::Reconnecting { .. })
                && core
                    .client
                    .requests()
                    .iter()
                    .all(|r| r.phase != RequestPhase::Streaming)
        }
        WaitFor::Applied => core.client.applied() >= count,
        WaitFor::Decision => decisions(core) >= baseline + count,
        WaitFor::Emits => core.history.checker().counters().emits >= count,
        WaitFor::Orphaned => core.history.checker().counters().orphaned >= count,
        WaitFor::Refused => core.history.checker().counters().late_emits_refused >= count,
        WaitFor::Adopted => core.history.checker().counters().calls_adopted >= count,
        WaitFor::StepsApplied => core.history.checker().counters().steps_applied >= count,
        WaitFor::TasksEnded => task_client.counters.ended.load(Ordering::Relaxed) >= count,
        WaitFor::TasksAdopted => lab.tasks_adopted() >= count,
        WaitFor::TasksSettled => core.history.checker().counters().tasks_settled >= count,
        WaitFor::ReadsAgain => task_client.counters.reads_again.load(Ordering::Relaxed) >= count,
        // Only once the client has read the answer: a ruling is recorded before the client
        // acts on it (a refusal that sends it to a new session leaves it idle first).
        WaitFor::Answered => match core.client.phase() {
            Phase::Connected => core.client.holds_stream() || decisions(core) > baseline,
            // Refused (typed, or an SDK's bare 409) with the next try scheduled, or given up.
            Phase::Reconnecting {
                attempt: 1..,
                next_at: Some(_),
                ..
            }
            | Phase::GaveUp { .. } => true,
            // Ruled on, and the stream it got broke again (a replay that then ends): the client
            // has read the answer and scheduled its next try.
            Phase::Reconnecting {
                next_at: Some(_), ..
            } => decisions(core) > baseline,
            Phase::Reconnecting { .. } | Phase::Idle => false,
        },
        WaitFor::ToolProgress => core
            .client
            .requests()
            .last()
            .is_some_and(|r| r.cursor.is_some() && r.applied >= count),
        WaitFor::ToolDone => core
            .client
            .requests()
            .last()
            .is_some_and(|r| matches!(r.phase, RequestPhase::Done | RequestPhase::Failed)),
    };
    let failed = |reason| WaitFailed {
        what,
        count,
        reason,
    };
    let follows_tasks = matches!(
        what,
        WaitFor::StepsApplied | WaitFor::TasksEnded | WaitFor::TasksAdopted | WaitFor::TasksSettled
    );
    if follows_tasks && lab.tasks_run_on_lab_time() {
        // The lab's own tasks (and its 2026 client's polls) step on the lab's clock, which
        // only the script moves: waiting for their work is letting lab time pass, a little at
        // a time, up to the wait's limit read as lab time.
        let mut moved = 0;
        lab.until_tasks_at_rest().await;
        while !ready(&lab.core()) && moved < timeout_ms {
            lab.advance(TASK_STEP_MS);
            moved += TASK_STEP_MS;
            lab.until_tasks_at_rest().await;
        }
        return lab.wait_for(Duration::ZERO, ready).await.map_err(failed);
    }
    lab.wait_for(Duration::from_millis(timeout_ms), ready)
        .await
        .map_err(failed)
}

/// Lab time a wait on the lab's own tasks lets pass at once: under a task's step and the
/// client's poll interval, so the record keeps each at its own time.
const TASK_STEP_MS: u64 = 50;

/// Ends a run: lets the lab quiesce — moving lab time on by up to `quiesce_ms`, 250 ms at a
/// time, while anything is still owed or the client is reconnecting — then has the checker
/// judge what the client is still owed. Every reader of a finished run's verdict (`run`,
/// `record`, a scenario in the dashboard) ends it here, so they read one judgement.
pub async fn finish(lab: &Lab, quiesce_ms: u64) {
    const STEP_MS: u64 = 250;
    settle(lab).await;
    let mut moved = 0;
    while moved < quiesce_ms && awaits_more(&lab.core()) {
        // Straight to the client's next retry when one is due sooner: a long quiesce costs
        // as many steps as the client makes attempts, not as many as it waits milliseconds.
        let due = next_retry_in(lab).unwrap_or(STEP_MS);
        let ms = due.min(quiesce_ms - moved);
        lab.advance(ms);
        moved += ms;
        settle(lab).await;
    }
    lab.end_run();
}

/// Lab time until the client's next reconnect of its stream or of a tool call, if one is due.
fn next_retry_in(lab: &Lab) -> Option<u64> {
    let now = lab.clock().now();
    let core = lab.core();
    let due = core
        .client
        .requests()
        .iter()
        .filter_map(|r| r.poll_timeout())
        .chain(core.client.poll_timeout())
        .min()?;
    Some(due.since(now).max(1))
}

/// Whether the lab may still deliver something owed: an obligation is open, or the client is
/// on its way back to a stream.
fn awaits_more(core: &Core) -> bool {
    core.history.checker().open_obligations() > 0
        || matches!(core.client.phase(), Phase::Reconnecting { .. })
        || core.client.requests().iter().any(|r| {
            matches!(
                r.phase,
                RequestPhase::Resuming { .. } | RequestPhase::Streaming
            )
        })
}

/// Lets deliveries already on the wire land: waits until the history stops growing for a few
/// polls (bounded), so the verdict judges a quiet lab.
pub async fn settle(lab: &Lab) {
    let mut last = u64::MAX;
    let mut quiet = 0;
    for _ in 0..100 {
        let total = lab.core().history.total();
        quiet = if total == last { quiet + 1 } else { 0 };
        if quiet >= 3 {
            return;
        }
        last = total;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn judge(run: &mut Run, expect: &Expect) {
    let mut check = |what: String, ok: bool, got: String| run.checks.push(Check { what, ok, got });
    if let Some(want) = expect.config_refused {
        let got = run.config_refused.is_some();
        check(
            format!("config refused = {want}"),
            got == want,
            run.config_refused
                .clone()
                .unwrap_or_else(|| "accepted".into()),
        );
    } else if let Some(why) = &run.config_refused {
        check("config accepted".into(), false, why.clone());
    }
    if run.config_refused.is_some() {
        return;
    }
    let verdict = run.verdict.clone();
    let counters = run.counters.clone().unwrap_or_default();
    if let Some(want) = expect.clean {
        let got = verdict.as_ref().is_some_and(|v| v.clean);
        check(
            format!("clean = {want}"),
            got == want,
            verdict
                .as_ref()
                .map_or("no verdict".into(), |v| v.summary()),
        );
    }
    for (kind, count) in &expect.anomalies {
        let got = verdict.as_ref().map_or(0, |v| v.count(*kind));
        check(format!("{kind} {count}"), count.holds(got), got.to_string());
    }
    for (reason, count) in &expect.rejected {
        let got = counters.resumes_rejected.get(reason).copied().unwrap_or(0);
        check(
            format!("rejected {reason} {count}"),
            count.holds(got),
            got.to_string(),
        );
    }
    if let Some(count) = expect.resumes_accepted {
        check(
            format!("resumes accepted {count}"),
            count.holds(counters.resumes_accepted),
            counters.resumes_accepted.to_string(),
        );
    }
    if let Some(count) = expect.tool_results {
        check(
            format!("tool results applied {count}"),
            count.holds(run.tool_results),
            run.tool_results.to_string(),
        );
    }
    if let Some(count) = expect.late_emits_refused {
        let got = counters.late_emits_refused;
        check(
            format!("late emits refused {count}"),
            count.holds(got),
            got.to_string(),
        );
    }
    if let Some(count) = expect.applied {
        let got = counters.applied;
        check(
            format!("applied {count}"),
            count.holds(got),
            got.to_string(),
        );
    }
    if let Some(count) = expect.calls_adopted {
        let got = counters.calls_adopted;
        check(
            format!("calls adopted {count}"),
            count.holds(got),
            got.to_string(),
        );
    }
    if let Some(want) = &expect.conditions_broken {
        let got = &run.conditions_broken;
        check(
            format!("conditions broken {want:?}"),
            want == got,
            format!("{got:?}"),
        );
    }
    if let Some(want) = &expect.probe_statuses {
        let got: Vec<u16> = run.probes.iter().map(|p| p.status).collect();
        check(
            format!("probe statuses {want:?}"),
            *want == got,
            format!("{got:?}"),
        );
    }
    if let Some(want) = expect.probes_replay_alike {
        let accepted: Vec<&Vec<String>> = run
            .probes
            .iter()
            .filter(|p| p.status == 200)
            .map(|p| &p.replayed)
            .collect();
        let alike = accepted.len() >= 2 && accepted.windows(2).all(|w| w[0] == w[1]);
        check(
            format!("probes replay alike = {want}"),
            alike == want,
            format!("{accepted:?}"),
        );
    }
}
