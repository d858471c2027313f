//! What a policy's server guarantees a 2026-07-28 client of the tasks extension, as five lines
//! a pane lists where 2025-11-25 lists the seed's five conditions: each holds or not by the
//! policy's rules ([`ModernQuirks`]), with why — and breaks where the checker found what it rules
//! out ([`judged`]), so the pane never says "holds" beside a verdict that says otherwise.

use super::listen::TaskListen;
use super::sdk::ModernQuirks;
use crate::history::{AnomalyKind, Verdict};
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

    /// The anomalies the checker names that break it, where one is found.
    pub fn broken_by(self) -> &'static [AnomalyKind] {
        match self {
            Guarantee::OneTaskPerKey => &[AnomalyKind::OrphanTask],
            Guarantee::DurableBeforeAnswer | Guarantee::ToldAfterGap => &[],
            Guarantee::OneRunner => &[AnomalyKind::TwoRunners, AnomalyKind::EffectTwice],
            Guarantee::TerminalOnce => &[AnomalyKind::TerminalTwice, AnomalyKind::StaleRead],
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
    /// The first anomaly the checker found that breaks it in this run, if any: it then does
    /// not hold, whatever the policy promises.
    pub broken: Option<AnomalyKind>,
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
                broken: None,
            }
        })
        .collect()
}

/// Each guarantee under `policy`'s rules, as this run's `verdict` bears it out: one the checker
/// found broken does not hold, and says by what.
pub fn judged(policy: Policy, verdict: &Verdict) -> Vec<GuaranteeStatus> {
    let mut list = guarantees(policy);
    for status in &mut list {
        status.broken = status
            .guarantee
            .broken_by()
            .iter()
            .copied()
            .find(|&kind| verdict.count(kind) > 0);
        status.holds &= status.broken.is_none();
    }
    list
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

    #[test]
    fn a_guarantee_the_checker_found_broken_does_not_hold() {
        let mut verdict = Verdict::default();
        verdict.counts.insert(AnomalyKind::TwoRunners, 1);
        let judged = judged(Policy::Naive, &verdict);
        let one_runner = &judged[usize::from(Guarantee::OneRunner.number() - 1)];
        assert!(!one_runner.holds);
        assert_eq!(one_runner.broken, Some(AnomalyKind::TwoRunners));
        let held: Vec<u8> = judged
            .iter()
            .filter(|g| g.holds)
            .map(|g| g.guarantee.number())
            .collect();
        assert_eq!(held, [2, 4]);
    }
}
