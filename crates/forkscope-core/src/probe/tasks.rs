//! Judging another server's tasks (the 2026-07-28 tasks extension) from what the probe saw:
//! whether a re-issued call runs its work once, whether every read finds a task, and whether a
//! task's end stays what it first read. The promise is the checker's: exactly once, or told.

use super::verdict::{Finding, Unexercised, Verdict};
use crate::vocabulary::TaskStatus;

/// What a re-issued `tools/call` was answered with, beside the task the first call made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reissued {
    /// The task the first call made.
    SameTask,
    /// Another task; each one's last status the probe read (`None`: never read).
    OtherTask {
        first_end: Option<String>,
        second_end: Option<String>,
    },
    /// A JSON-RPC error with this code; the first task's last status read after it.
    Refused {
        code: i64,
        first_end: Option<String>,
    },
}

/// One `tasks/get` of a task, as the probe read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskRead {
    /// The task's status word.
    Status(String),
    /// Invalid params (-32602): the extension's answer for a task the server does not know,
    /// whether it never had it or it expired.
    Unknown,
    /// Any other error, or a result with no status: it says nothing of the task, and is not
    /// counted.
    Unanswered,
}

/// JSON-RPC's invalid params, which the extension answers an unknown or expired task with.
pub const UNKNOWN_TASK_CODE: i64 = -32602;

impl TaskRead {
    /// A `tasks/get` answered with a JSON-RPC error of `code`.
    pub fn of_error(code: Option<i64>) -> TaskRead {
        if code == Some(UNKNOWN_TASK_CODE) {
            TaskRead::Unknown
        } else {
            TaskRead::Unanswered
        }
    }

    /// A `tasks/get` answered with a result whose `status` is `status`.
    pub fn of_status(status: Option<&str>) -> TaskRead {
        match status {
            Some(s) => TaskRead::Status(s.to_owned()),
            None => TaskRead::Unanswered,
        }
    }

    /// Whether the read says the task ended.
    pub fn ended(&self) -> bool {
        matches!(self, TaskRead::Status(s) if is_terminal(s))
    }
}

/// The extension's terminal states (`completed`, `failed`, `cancelled`).
pub fn is_terminal(status: &str) -> bool {
    TaskStatus::parse(status).is_some_and(TaskStatus::is_terminal)
}

/// A call's `CreateTaskResult` was lost and the call re-issued under the same key with the same
/// arguments: one task, or the client told (an error), holds; a second task runs the work twice.
pub fn judge_reissue(reissued: &Reissued) -> Finding {
    match reissued {
        Reissued::SameTask => Finding::holds(
            Verdict::OneTask,
            "the re-issue under the same key named the task the first call made: the work runs once",
        ),
        Reissued::Refused {
            code,
            first_end: Some(end),
        } if end == "completed" => Finding::violated(
            Verdict::TypedError { code: *code },
            "the re-issue was refused with an error while the first call's task completed: the work happened, and the client was told the call failed",
        ),
        Reissued::Refused { code, .. } => Finding::holds(
            Verdict::TypedError { code: *code },
            "the re-issue was refused with an error, and the first call's task did not complete: the client is told, and nothing runs twice",
        ),
        Reissued::OtherTask {
            first_end,
            second_end,
        } => {
            let end = |e: &Option<String>| e.clone().unwrap_or_else(|| "unread".into());
            Finding::violated(
                Verdict::SecondTask,
                format!(
                    "the server made a second task for one intent (the first read {}, the second {}): the work runs twice, and the first task, whose id the client lost, is orphaned",
                    end(first_end),
                    end(second_end)
                ),
            )
        }
    }
}

/// The same key with other arguments: an error tells the client its key is taken; a new task
/// runs what was asked, once; the first task's answer for other arguments is the wrong result.
pub fn judge_key_other_arguments(reissued: &Reissued) -> Finding {
    match reissued {
        Reissued::Refused { code, .. } => Finding::holds(
            Verdict::TypedError { code: *code },
            "the key of another call was refused with an error: the client is told",
        ),
        Reissued::OtherTask { .. } => Finding::holds(
            Verdict::SecondTask,
            "a new task for the new arguments: what was asked runs once (whether a key is read at all, task-reissue-same-key says)",
        ),
        Reissued::SameTask => Finding::violated(
            Verdict::OneTask,
            "the call was answered with the task of other arguments: the client reads a result it did not ask for",
        ),
    }
}

/// A task just made, read `reads.len()` times: each read must find it. Behind a balancer, a
/// read that lands where the task is not kept says unknown, and a stock client re-issues.
pub fn judge_repeated_reads(reads: &[TaskRead]) -> Finding {
    let unknown = reads.iter().filter(|r| **r == TaskRead::Unknown).count() as u64;
    let total = reads.iter().filter(|r| **r != TaskRead::Unanswered).count() as u64;
    if total == 0 {
        return Finding::not_exercised(
            Unexercised::TooFew { seen: 0 },
            "no tasks/get was answered with the task or with unknown",
        );
    }
    if unknown == 0 {
        Finding::holds(
            Verdict::KnownOnEveryRead { reads: total },
            "every tasks/get found the task, wherever it landed",
        )
    } else {
        Finding::violated(
            Verdict::UnknownOnSomeReads {
                unknown,
                reads: total,
            },
            "a task just made was unknown to some reads: it is kept where it was made only, and a client told `unknown` re-issues the call — two runners",
        )
    }
}

/// The reads of a task after a cancel, in order: the first terminal status must be the last
/// one, and every read past it must say it again.
pub fn judge_terminal(reads: &[TaskRead]) -> Finding {
    let mut ended: Option<&str> = None;
    for read in reads {
        match (read, ended) {
            (TaskRead::Status(s), None) if is_terminal(s) => ended = Some(s),
            (TaskRead::Status(s), Some(first)) if s != first => {
                return Finding::violated(
                    Verdict::TerminalChanged {
                        from: first.to_owned(),
                        to: s.clone(),
                    },
                    "a task read as ended was later read in another state: a client that acted on the first end was told something else",
                );
            }
            (TaskRead::Unknown, Some(first)) => {
                return Finding::violated(
                    Verdict::TerminalChanged {
                        from: first.to_owned(),
                        to: "unknown".into(),
                    },
                    "a task read as ended was unknown to a later read: its outcome is not where every read can find it, and a client told `unknown` re-issues the call",
                );
            }
            _ => {}
        }
    }
    match ended {
        Some(status) => Finding::holds(
            Verdict::TerminalOnce {
                status: status.to_owned(),
            },
            "the end the first read gave stayed on every read after the cancel",
        ),
        None => Finding::not_exercised(
            Unexercised::NoEndSeen,
            "the task did not end within the window, so whether its end stays was not seen",
        ),
    }
}

/// What a listen opened after a gap sent of a task that ended in the gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relisten {
    /// A `notifications/tasks` with the task's end (this status).
    EndSent(String),
    /// No end: the subscription completed without it, or the window closed first.
    NoEnd,
}

/// A listen stream has no replay: the end a task reached while the client had no listen open
/// is told by a new listen, or never — and a client waiting on its listen waits for ever.
pub fn judge_listen_gap(relisten: &Relisten) -> Finding {
    match relisten {
        Relisten::EndSent(status) => Finding::holds(
            Verdict::ToldOnRelisten {
                status: status.clone(),
            },
            "the new listen sent the task's state as it is now first: a client whose listen broke is told what it missed",
        ),
        Relisten::NoEnd => Finding::violated(
            Verdict::LostInGap,
            "the new listen sent only what changed after it opened: the end the task reached in the gap is never told, and a client waiting on its listen is never told its task ended (it must poll tasks/get to learn it)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Judged;

    fn status(s: &str) -> TaskRead {
        TaskRead::Status(s.into())
    }

    #[test]
    fn a_re_issue_holds_on_one_task_or_an_error_and_a_second_task_is_the_double_effect() {
        assert!(judge_reissue(&Reissued::SameTask).held());
        let refused = |first_end: Option<&str>| Reissued::Refused {
            code: -32602,
            first_end: first_end.map(str::to_owned),
        };
        assert!(judge_reissue(&refused(Some("working"))).held());
        assert!(
            judge_reissue(&refused(Some("completed"))).is_violated(),
            "the work happened and the client heard it failed"
        );
        let twice = judge_reissue(&Reissued::OtherTask {
            first_end: Some("completed".into()),
            second_end: None,
        });
        assert_eq!(twice.verdict, Verdict::SecondTask);
        assert!(twice.is_violated());
        assert!(
            twice
                .why
                .contains("first read completed, the second unread")
        );
    }

    #[test]
    fn other_arguments_under_a_key_must_not_get_the_first_task() {
        assert!(
            judge_key_other_arguments(&Reissued::Refused {
                code: -32602,
                first_end: None
            })
            .held()
        );
        assert!(
            judge_key_other_arguments(&Reissued::OtherTask {
                first_end: None,
                second_end: None
            })
            .held()
        );
        assert!(judge_key_other_arguments(&Reissued::SameTask).is_violated());
    }

    #[test]
    fn a_read_that_does_not_know_a_new_task_is_violated() {
        let every = judge_repeated_reads(&[status("working"), status("completed")]);
        assert_eq!(every.verdict, Verdict::KnownOnEveryRead { reads: 2 });
        let some = judge_repeated_reads(&[status("working"), TaskRead::Unknown, status("working")]);
        assert_eq!(
            some.verdict,
            Verdict::UnknownOnSomeReads {
                unknown: 1,
                reads: 3
            }
        );
        assert!(some.is_violated());
        assert_eq!(judge_repeated_reads(&[]).judged, Judged::NotExercised);
        // An answer that says nothing of the task is not counted either way.
        assert_eq!(
            judge_repeated_reads(&[status("working"), TaskRead::Unanswered]).verdict,
            Verdict::KnownOnEveryRead { reads: 1 }
        );
        assert_eq!(TaskRead::of_error(Some(-32603)), TaskRead::Unanswered);
        assert_eq!(TaskRead::of_error(Some(-32602)), TaskRead::Unknown);
        assert_eq!(TaskRead::of_status(None), TaskRead::Unanswered);
        assert!(is_terminal("cancelled") && !is_terminal("working") && !is_terminal("none"));
    }

    #[test]
    fn an_end_must_stay_what_it_was_first_read() {
        let once = judge_terminal(&[status("working"), status("cancelled"), status("cancelled")]);
        assert_eq!(
            once.verdict,
            Verdict::TerminalOnce {
                status: "cancelled".into()
            }
        );
        let changed = judge_terminal(&[status("cancelled"), status("completed")]);
        assert!(changed.is_violated());
        assert_eq!(
            changed.verdict,
            Verdict::TerminalChanged {
                from: "cancelled".into(),
                to: "completed".into()
            }
        );
        assert!(judge_terminal(&[status("completed"), TaskRead::Unknown]).is_violated());
        // Unknown before any end says nothing of the end.
        assert_eq!(
            judge_terminal(&[status("working"), TaskRead::Unknown]).judged,
            Judged::NotExercised
        );
    }

    #[test]
    fn a_listen_gap_holds_only_when_the_relisten_tells_the_end() {
        let told = judge_listen_gap(&Relisten::EndSent("completed".into()));
        assert!(told.held());
        assert_eq!(told.verdict.word(), "told_on_relisten");
        let lost = judge_listen_gap(&Relisten::NoEnd);
        assert!(lost.is_violated());
        assert_eq!(lost.verdict.word(), "lost_in_gap");
    }
}
