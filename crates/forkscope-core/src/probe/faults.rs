//! Judging a server's tasks across a fault the user's commands caused — a restart, a killed
//! runner, a runner paused past its lease — from two kinds of evidence only: what `tasks/get`
//! answered, and how many times the tool's side effect happened (counted by the user's
//! `--effects-cmd` or `--effects-tool`, never read from a log).
//!
//! The promise is the checker's: each task's work happens once, or the client is told. A task
//! the server acknowledged and then does not know was forgotten; an end that changes was not
//! an end; and effects past what one clean run of the same task makes mean a step ran again —
//! a second runner, or a run from the start. One clean run of the same shape, measured first
//! (the baseline), says how many effects a task makes: the probe never assumes the unit.

use super::tasks::TaskRead;
use super::verdict::{Finding, Unexercised, Verdict};

/// What a fault case saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcrossFault {
    /// Each task's reads after the fault, in order; each task was read before the fault, so
    /// the server had acknowledged it.
    pub reads_after: Vec<Vec<TaskRead>>,
    /// Each task's end as read before the fault (`None`: still working then).
    pub ends_before: Vec<Option<String>>,
    /// Effects one clean run of a task of the same shape made, and effects the case's tasks made
    /// in all (counted once they settled); `None` without a count.
    pub effects: Option<Effects>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effects {
    pub per_task: u64,
    pub counted: u64,
}

/// The case's tasks across its fault: forgotten, changed, ran again, lost an effect — or held.
pub fn judge_across_fault(seen: &AcrossFault, fault: &str) -> Finding {
    for (i, reads) in seen.reads_after.iter().enumerate() {
        if let Some(unknown) = reads.iter().position(|r| *r == TaskRead::Unknown) {
            return Finding::violated(
                Verdict::UnknownAfterFault {
                    task: i as u64 + 1,
                    read: unknown as u64 + 1,
                },
                format!(
                    "the server acknowledged the task, and after the {fault} answered that it does not know it: the client is told its task never was, and re-issues the call — the work runs again"
                ),
            );
        }
        let end_after = reads.iter().rev().find_map(|r| match r {
            TaskRead::Status(s) if super::tasks::is_terminal(s) => Some(s.as_str()),
            _ => None,
        });
        if let (Some(Some(before)), Some(after)) = (seen.ends_before.get(i), end_after)
            && before != after
        {
            return Finding::violated(
                Verdict::TerminalChanged {
                    from: before.clone(),
                    to: after.to_owned(),
                },
                format!(
                    "a task read as ended before the {fault} was read otherwise after it: a client that acted on the first end was told something else"
                ),
            );
        }
    }
    let completed = seen
        .reads_after
        .iter()
        .filter(|reads| {
            reads
                .iter()
                .rev()
                .find(|r| matches!(r, TaskRead::Status(_)))
                == Some(&TaskRead::Status("completed".into()))
        })
        .count() as u64;
    let all_ended = seen
        .reads_after
        .iter()
        .all(|reads| reads.iter().any(TaskRead::ended));
    if !all_ended {
        return Finding::not_exercised(
            Unexercised::NoEndSeen,
            format!("a task did not end within the window after the {fault}"),
        );
    }
    let Some(effects) = seen.effects else {
        return Finding::holds(
            Verdict::SurvivedFault { effects: None },
            format!(
                "every task was found after the {fault} and ended once (effects not counted: --effects-cmd or --effects-tool would show a step that ran twice)"
            ),
        );
    };
    // A task that failed or was cancelled may have done part of its work: up to one run's
    // effects each, never more.
    let once = effects.per_task * completed;
    let most = effects.per_task * seen.reads_after.len() as u64;
    if effects.counted > most {
        return Finding::violated(
            Verdict::RanAgain {
                effects: effects.counted,
                once: most,
            },
            format!(
                "{} side effects for work that makes {most} once ({} per task): after the {fault} a step ran again — a second runner, or the task run again from its start — and tasks/get never said so",
                effects.counted, effects.per_task
            ),
        );
    }
    if effects.counted < once {
        return Finding::violated(
            Verdict::EffectMissing {
                effects: effects.counted,
                once,
            },
            format!(
                "tasks read completed after the {fault} made {} side effects where their work makes {once}: a step the task counts as done never happened",
                effects.counted
            ),
        );
    }
    Finding::holds(
        Verdict::SurvivedFault {
            effects: Some(effects.counted),
        },
        format!(
            "every task was found after the {fault} and ended once, and the side effects are what one run makes ({} per task)",
            effects.per_task
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: &str) -> TaskRead {
        TaskRead::Status(s.into())
    }

    fn seen(reads: Vec<Vec<TaskRead>>, counted: Option<u64>) -> AcrossFault {
        AcrossFault {
            ends_before: vec![Some("completed".into()), None],
            reads_after: reads,
            effects: counted.map(|counted| Effects {
                per_task: 5,
                counted,
            }),
        }
    }

    #[test]
    fn forgotten_changed_ran_again_and_held_are_told_apart() {
        let done = || vec![status("completed")];
        let forgot = judge_across_fault(
            &seen(vec![done(), vec![TaskRead::Unknown]], Some(5)),
            "restart",
        );
        assert_eq!(
            forgot.verdict,
            Verdict::UnknownAfterFault { task: 2, read: 1 }
        );
        assert!(forgot.is_violated());
        let changed = judge_across_fault(
            &seen(vec![vec![status("failed")], done()], Some(10)),
            "restart",
        );
        assert!(matches!(changed.verdict, Verdict::TerminalChanged { .. }));
        let again = judge_across_fault(&seen(vec![done(), done()], Some(13)), "restart");
        assert_eq!(
            again.verdict,
            Verdict::RanAgain {
                effects: 13,
                once: 10
            }
        );
        assert!(again.is_violated());
        let lost = judge_across_fault(&seen(vec![done(), done()], Some(9)), "restart");
        assert!(matches!(lost.verdict, Verdict::EffectMissing { .. }));
        let held = judge_across_fault(&seen(vec![done(), done()], Some(10)), "restart");
        assert!(held.held(), "{held:?}");
        // A typed failure is the client told: its effects are not owed.
        let failed = judge_across_fault(
            &seen(
                vec![done(), vec![status("working"), status("failed")]],
                Some(5),
            ),
            "restart",
        );
        assert!(failed.held(), "{failed:?}");
        let uncounted = judge_across_fault(&seen(vec![done(), done()], None), "restart");
        assert!(uncounted.held() && uncounted.why.contains("not counted"));
        let open = judge_across_fault(
            &seen(vec![done(), vec![status("working")]], Some(5)),
            "restart",
        );
        assert!(matches!(
            open.verdict,
            Verdict::NotExercised {
                because: Unexercised::NoEndSeen
            }
        ));
    }
}
