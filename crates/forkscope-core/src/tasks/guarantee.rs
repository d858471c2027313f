//! What a policy's server guarantees a 2026-07-28 client of the tasks extension, as five lines
//! a pane lists where 2025-11-25 lists the seed's five conditions: each holds or not by the
//! policy's rules ([`ModernQuirks`]), with why. The checker judges what actually happened.

use super::listen::TaskListen;
use super::sdk::ModernQuirks;
use crate::policy::Policy;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// 1. A re-issue under the call's key finds its task: the work runs once.
    OneTaskPerKey,
    /// 2. A task is stored before its `CreateTaskResult` is sent.
    DurableBeforeAnswer,
    /// 3. One runner at a time: a lease with a rising epoch, a stale write refused.
    OneRunner,
    /// 4. A task ends once: one compare-and-set settles complete, cancel and the TTL.
    TerminalOnce,
    /// 5. A listen opened after a gap is told what it missed.
    ToldAfterGap,
}

impl Guarantee {
    pub const ALL: [Guarantee; 5] = [
        Guarantee::OneTaskPerKey,
        Guarantee::DurableBeforeAnswer,
        Guarantee::OneRunner,
        Guarantee::TerminalOnce,
        Guarantee::ToldAfterGap,
    ];

    pub fn number(self) -> u8 {
        self as u8 + 1
    }

    /// A few words for a dashboard row.
    pub fn title(self) -> &'static str {
        match self {
            Guarantee::OneTaskPerKey => "a re-issue finds its task by key",
            Guarantee::DurableBeforeAnswer => "stored before CreateTaskResult",
            Guarantee::OneRunner => "one runner: lease + rising epoch",
            Guarantee::TerminalOnce => "one end: compare-and-set",
            Guarantee::ToldAfterGap => "a re-listen is told the end",
        }
    }

    /// What it means, in one line: which double effect or silent loss it rules out.
    pub fn meaning(self) -> &'static str {
        match self {
            Guarantee::OneTaskPerKey => {
                "a lost answer's re-issue names the same task: the work runs once, and no task is orphaned"
            }
            Guarantee::DurableBeforeAnswer => {
                "a client that got a task id can always read it, from any replica"
            }
            Guarantee::OneRunner => {
                "a runner that lost its lease has its next write refused: no step runs twice"
            }
            Guarantee::TerminalOnce => {
                "complete, cancel and the TTL race on one compare-and-set: every read returns the one end"
            }
            Guarantee::ToldAfterGap => {
                "a listen has no replay: sending each task's state now first tells a re-listen the end it missed"
            }
        }
    }
}

/// One guarantee under a policy, with a few words on why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GuaranteeStatus {
    pub guarantee: Guarantee,
    pub holds: bool,
    pub note: &'static str,
}

/// Each guarantee under `policy`'s rules.
pub fn guarantees(policy: Policy) -> Vec<GuaranteeStatus> {
    let quirks = ModernQuirks::of(policy);
    Guarantee::ALL
        .into_iter()
        .map(|guarantee| {
            let (holds, note) = status(guarantee, quirks);
            GuaranteeStatus {
                guarantee,
                holds,
                note,
            }
        })
        .collect()
}

fn status(guarantee: Guarantee, quirks: &ModernQuirks) -> (bool, &'static str) {
    if !quirks.speaks {
        return (false, "2026-07-28 is not spoken: no tasks at all");
    }
    if !quirks.runs_tasks {
        return (
            false,
            "no tasks: a call lives on its stream, and a break cancels it",
        );
    }
    match guarantee {
        Guarantee::OneTaskPerKey if quirks.honours_keys => {
            (true, "key + arguments → one task, before the answer")
        }
        Guarantee::OneTaskPerKey => (false, "no key is read: a re-issue makes a second task"),
        Guarantee::DurableBeforeAnswer => (true, "the store reads it back first"),
        Guarantee::OneRunner if quirks.honours_keys => {
            (true, "a dead runner's task is adopted under the next epoch")
        }
        Guarantee::OneRunner => (
            true,
            "in this one server; naive replicas each keep their own tasks",
        ),
        Guarantee::TerminalOnce => (true, "cancel and complete settle on one write"),
        Guarantee::ToldAfterGap => match quirks.listen {
            TaskListen::CurrentFirst => (true, "a listen sends each task's state now first"),
            TaskListen::ChangesOnly => (false, "changes only: an end in a gap is never told"),
            TaskListen::NoTaskIds => (false, "no notifications/tasks: the client must poll"),
            TaskListen::NotServed => (false, "no subscriptions/listen: the client must poll"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_gives_all_five_and_each_other_policy_says_which_it_lacks() {
        let holding = |policy| -> Vec<u8> {
            guarantees(policy)
                .iter()
                .filter(|g| g.holds)
                .map(|g| g.guarantee.number())
                .collect()
        };
        assert_eq!(holding(Policy::Fenced), [1, 2, 3, 4, 5]);
        assert_eq!(holding(Policy::Naive), [2, 3, 4]);
        assert_eq!(holding(Policy::Rmcp), [2, 3, 4]);
        assert!(holding(Policy::PythonSdk).is_empty());
        assert!(holding(Policy::TsSdk).is_empty());
        for policy in [Policy::Naive, Policy::TsSdk] {
            assert!(guarantees(policy).iter().all(|g| !g.note.is_empty()));
        }
    }
}
