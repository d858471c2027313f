//! The 2026-07-28 cases that need a fault the user's commands cause (`crate::probe::faults`):
//! a task across a restart of the server, across the kill of the process running it, and across
//! a pause of that process past its lease. Each runs only when its command is given (else
//! `not run`, naming the flag), and is judged by the core's
//! [`forkscope_core::probe::faults::judge_across_fault`] from `tasks/get` and the effects
//! counted — never from a log.
//!
//! Every case runs a baseline first: one task of the same shape to its end, no fault, so the
//! effects one run makes are measured, not assumed. Then the task under test is made, read
//! working, and the fault comes.

use super::tasks::{discover, first_task, read, reads_until};
use super::{Ctx, NotRun, Outcome};
use crate::probe::discover::ToolPlan;
use crate::probe::faults::{self, Faults};
use forkscope_core::probe::Finding;
use forkscope_core::probe::faults::{AcrossFault, Effects, judge_across_fault};
use forkscope_core::probe::tasks::TaskRead;
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// The shape of every task a fault case makes: long enough that a fault lands mid-task, short
/// enough that a run from the start still ends within the case.
const STEPS: u64 = 20;
const DELAY_MS: u64 = 100;
const TASK: Duration = Duration::from_millis(STEPS * DELAY_MS);

/// Which fault a case causes.
#[derive(Clone, Copy)]
enum Fault {
    Restart,
    Kill,
    Pause,
}

impl Fault {
    fn words(self) -> &'static str {
        match self {
            Fault::Restart => "restart",
            Fault::Kill => "kill of its runner",
            Fault::Pause => "pause of its runner",
        }
    }

    /// The flags it needs that were not given.
    fn missing(self, f: &Faults) -> Vec<&'static str> {
        let needs: &[(&str, &Option<String>)] = match self {
            Fault::Restart => &[("--restart-cmd", &f.restart)],
            Fault::Kill => &[("--kill-cmd", &f.kill)],
            Fault::Pause => &[("--pause-cmd", &f.pause), ("--resume-cmd", &f.resume)],
        };
        needs
            .iter()
            .filter(|(_, cmd)| cmd.is_none())
            .map(|(flag, _)| *flag)
            .collect()
    }
}

/// The cases this module runs.
pub(super) const CASES: &[&str] = &[
    "task-survives-restart",
    "task-runner-killed",
    "task-runner-paused",
];

pub(super) async fn run(ctx: &Ctx, name: &str) -> Outcome {
    let fault = match name {
        "task-survives-restart" => Fault::Restart,
        "task-runner-killed" => Fault::Kill,
        "task-runner-paused" => Fault::Pause,
        other => return Err(NotRun(format!("no fault case named {other}"))),
    };
    let missing = fault.missing(&ctx.faults);
    if !missing.is_empty() {
        return Err(NotRun(format!(
            "it needs {} (the probe causes no fault on its own)",
            missing.join(" and ")
        )));
    }
    if !discover(ctx).await? {
        return Err(NotRun(
            "the server does not declare the tasks extension (io.modelcontextprotocol/tasks)"
                .into(),
        ));
    }
    let tool = ctx.call_tool.as_ref().ok_or_else(|| {
        NotRun("no tool to call: the server offers none the probe can make a task of".into())
    })?;
    Ok((across(ctx, tool, name, fault).await?, Vec::new()))
}

async fn across(ctx: &Ctx, tool: &ToolPlan, name: &str, fault: Fault) -> Result<Finding, NotRun> {
    let f = &ctx.faults;
    let note = |line: String| ctx.note(line);
    let settle = Duration::from_secs(3);
    // The baseline: one task of the same shape, no fault.
    let before = if f.counts_effects() {
        faults::effects(f, &ctx.target, &note).await
    } else {
        None
    };
    let key = ctx.task_key(name);
    let baseline = first_task(ctx, tool, &format!("{key}-baseline"), STEPS, DELAY_MS).await?;
    let reads = reads_until(ctx, &baseline, Instant::now() + TASK + ctx.window).await?;
    if reads.last() != Some(&TaskRead::Status("completed".into())) {
        return Err(NotRun(format!(
            "the baseline task (no fault) did not complete within the window: its last read was {:?}",
            reads.last()
        )));
    }
    let after_baseline = match before {
        Some(_) => faults::settled_effects(f, &ctx.target, settle, &note).await,
        None => None,
    };
    let per_task = match (before, after_baseline) {
        (Some(b), Some(a)) if a > b => Some(a - b),
        (Some(_), Some(_)) => {
            ctx.note(
                "the effect count did not move while the baseline task ran: effects not judged"
                    .into(),
            );
            None
        }
        _ => None,
    };
    // The task under test, read working before the fault — and, where effects are counted,
    // seen to have done some of its work: a task acknowledged but not yet picked up by a worker
    // reads `working` too, and a fault then would test nothing.
    let task = first_task(ctx, tool, &key, STEPS, DELAY_MS).await?;
    sleep(Duration::from_millis(3 * DELAY_MS)).await;
    if let (Some(base), Some(_)) = (after_baseline, per_task) {
        let until = Instant::now() + TASK;
        let quiet = |_: String| {};
        loop {
            let now = faults::effects(f, &ctx.target, &quiet).await;
            if now.is_some_and(|n| n > base) {
                ctx.note(format!(
                    "the task's work began: effects counted {}",
                    now.unwrap_or(base)
                ));
                break;
            }
            if Instant::now() > until {
                return Err(NotRun(format!(
                    "the task made no side effect within {} ms of its making: its work never began, so a fault would test nothing",
                    TASK.as_millis() + 3 * u128::from(DELAY_MS)
                )));
            }
            sleep(Duration::from_millis(DELAY_MS / 2)).await;
        }
    }
    match read(ctx, &task).await? {
        TaskRead::Status(s) if s == "working" => {}
        other => {
            return Err(NotRun(format!(
                "the task was not working when the fault was due (read {other:?})"
            )));
        }
    }
    cause(ctx, fault, &task).await?;
    let deadline = Instant::now() + 2 * TASK + ctx.window;
    let mut after_task = Vec::new();
    if matches!(fault, Fault::Pause) {
        // Reads while the runner is paused: where a read may adopt a task whose lease ran out.
        let until = Instant::now() + Duration::from_millis(f.pause_ms);
        while Instant::now() < until {
            after_task.push(read(ctx, &task).await.unwrap_or(TaskRead::Unanswered));
            sleep(Duration::from_millis(250)).await;
        }
        let resume = f.resume.as_deref().unwrap_or_default();
        faults::run(
            "--resume-cmd",
            resume,
            &ctx.target,
            Some(&task),
            false,
            &note,
        )
        .await;
    }
    after_task.extend(reads_through(ctx, &task, deadline).await);
    let mut after_baseline_reads = Vec::new();
    for _ in 0..3 {
        after_baseline_reads.push(read(ctx, &baseline).await.unwrap_or(TaskRead::Unanswered));
    }
    let counted = match (before, per_task) {
        (Some(b), Some(per_task)) => faults::settled_effects(f, &ctx.target, settle, &note)
            .await
            .map(|end| Effects {
                per_task,
                counted: end.saturating_sub(b),
            }),
        _ => None,
    };
    Ok(judge_across_fault(
        &AcrossFault {
            reads_after: vec![after_baseline_reads, after_task],
            ends_before: vec![Some("completed".into()), None],
            effects: counted,
        },
        fault.words(),
    ))
}

/// Reads `task` until a read says it ended, or `deadline`: a read the fault left unanswered
/// (a process gone, a balancer's 502) says nothing of the task and the reading goes on.
async fn reads_through(ctx: &Ctx, task: &str, deadline: Instant) -> Vec<TaskRead> {
    let mut reads = Vec::new();
    loop {
        let got = read(ctx, task).await.unwrap_or(TaskRead::Unanswered);
        let ended = got.ended();
        reads.push(got);
        if ended || Instant::now() > deadline {
            return reads;
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the fault's command (and, for a kill, the restart that brings the server back when one
/// is given), then waits until the server answers again.
async fn cause(ctx: &Ctx, fault: Fault, task: &str) -> Result<(), NotRun> {
    let f = &ctx.faults;
    let note = |line: String| ctx.note(line);
    let (flag, cmd) = match fault {
        Fault::Restart => ("--restart-cmd", f.restart.as_deref()),
        Fault::Kill => ("--kill-cmd", f.kill.as_deref()),
        Fault::Pause => ("--pause-cmd", f.pause.as_deref()),
    };
    let ran = faults::run(
        flag,
        cmd.unwrap_or_default(),
        &ctx.target,
        Some(task),
        false,
        &note,
    )
    .await;
    if !ran.ok {
        return Err(NotRun(format!(
            "{flag} failed, so the fault may not have happened"
        )));
    }
    if let (Fault::Kill, Some(restart)) = (fault, f.restart.as_deref()) {
        faults::run(
            "--restart-cmd",
            restart,
            &ctx.target,
            Some(task),
            false,
            &note,
        )
        .await;
    }
    if matches!(fault, Fault::Pause) {
        return Ok(());
    }
    match faults::answering_again(&ctx.target).await {
        Some(took) => {
            note(format!(
                "the server answered again after {:.2} s",
                took.as_secs_f64()
            ));
            Ok(())
        }
        None => Err(NotRun(format!(
            "after {flag} the server did not answer within {} s",
            faults::ANSWER_AGAIN_LIMIT.as_secs()
        ))),
    }
}
