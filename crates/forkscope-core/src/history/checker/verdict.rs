//! The checker's verdict at one instant: what a pane, a report and an exit status read.

use super::Checker;
use crate::history::anomaly::{Anomaly, AnomalyKind, Told};
use crate::vocabulary::RejectReason;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a pane, a report and a test read of the checker.
impl Checker {
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// The first anomaly a search stops at: of `target`'s kind when one is asked for, else the
    /// first violation (an undelivered obligation the client was told of is not one).
    pub fn first_wanted(&self, target: Option<AnomalyKind>) -> Option<&Anomaly> {
        self.anomalies.iter().find(|a| match target {
            Some(kind) => a.kind() == kind,
            None => a.kind().is_violation(),
        })
    }

    /// The first anomalies found, in the order they happened (at most 1,000 kept).
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.anomalies
    }

    pub fn verdict(&self) -> Verdict {
        let counts: BTreeMap<AnomalyKind, u64> = self.counts.clone();
        // The most telling anomaly leads: a fork explains the duplicates and drift after it.
        let lead = <AnomalyKind as strum::IntoEnumIterator>::iter()
            .find_map(|kind| self.anomalies.iter().find(|a| a.kind() == kind));
        let open = self.open_obligations() + self.requests.open_ends();
        let headline = match lead {
            // No client reported what it applied (stock clients of `forkscope serve` do not):
            // say what the server saw rather than "0 side effects applied".
            None if self.witnessed.is_empty() => format!(
                "no anomaly in what the server saw: {}, one live stream at a time \
                 ({}, {} rejected, {}; no client reported what it applied, so duplicates and \
                 losses are not judged)",
                counted(self.counters.emits, "event", "emitted"),
                counted(self.counters.resumes_accepted, "resume", "accepted"),
                self.counters.rejected_total(),
                counted(self.counters.late_emits_refused, "late emit", "refused"),
            ),
            // Nothing wrong yet, but something owed is still on its way: not a verdict yet.
            None if open > 0 => format!(
                "nothing wrong so far, and {open} owed still open: {} applied, on one stream at \
                 a time ({}, {} rejected, {})",
                counted(self.counters.applied, "side effect", ""),
                counted(self.counters.resumes_accepted, "resume", "accepted"),
                self.counters.rejected_total(),
                counted(self.counters.late_emits_refused, "late emit", "refused"),
            ),
            None => format!(
                "all owed arrived once: {} applied, on one stream at a time ({}, {} rejected, {})",
                counted(self.counters.applied, "side effect", ""),
                counted(self.counters.resumes_accepted, "resume", "accepted"),
                self.counters.rejected_total(),
                counted(self.counters.late_emits_refused, "late emit", "refused"),
            ),
            Some(lead) => lead.to_string(),
        };
        let headline = match (lead, self.counters.steps_applied) {
            // Nothing of either revision has happened yet.
            (None, 0) if self.counters.legacy_quiet() && self.counters.tasks_created == 0 => {
                "no anomaly: nothing has run yet".to_owned()
            }
            // Only 2026-07-28 happened (a lab of that revision alone, a stateless client):
            // nothing of streams to say, from its first task on.
            (None, steps) if self.counters.legacy_quiet() => format!(
                "no anomaly{}: 2026-07-28: {}, each once, {}",
                if open > 0 {
                    format!(" so far, and {open} owed still open")
                } else {
                    String::new()
                },
                counted(steps, "step", "applied"),
                counted(self.counters.tasks_created, "task", "made")
            ),
            (None, steps @ 1..) => format!(
                "{headline}; 2026-07-28: {}, each once, {}",
                counted(steps, "step", "applied"),
                counted(self.counters.tasks_created, "task", "made")
            ),
            _ => headline,
        };
        let told = self.anomalies.iter().find_map(|a| match a {
            Anomaly::Undelivered { told, .. } => Some(*told),
            _ => None,
        });
        Verdict {
            clean: counts.is_empty(),
            open,
            counts,
            headline,
            first: lead.cloned(),
            told,
        }
    }
}

/// `1 resume accepted`, `2 resumes accepted`: a count and its noun as a person writes them.
fn counted(n: u64, noun: &str, participle: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} {noun}{s} {participle}").trim_end().to_owned()
}

/// Counters kept alongside the anomalies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub emits: u64,
    pub applied: u64,
    /// Replayed events the client recognised as already seen and did not apply again.
    pub replays_skipped: u64,
    pub late_emits_refused: u64,
    pub resumes_accepted: u64,
    pub resumes_rejected: BTreeMap<RejectReason, u64>,
    pub new_streams_flagged: u64,
    pub new_streams_silent: u64,
    pub fences: u64,
    /// Grace windows started: the server judged a stream's client gone.
    pub orphaned: u64,
    /// Tool calls a replica took over after their runner's lease expired.
    pub calls_adopted: u64,
    /// GETs an SDK policy answered its own way (an empty 200, a bare 409) instead of ruling.
    pub sdk_answers: u64,
    /// What the client was owed: each event emitted on a stream it follows, and the result of
    /// each tool call it made (judged only for a client that reports what it receives).
    pub owed: u64,
    /// Of those, delivered.
    pub owed_delivered: u64,
    /// 2026-07-28: steps of calls' work applied, and tasks made.
    pub steps_applied: u64,
    pub tasks_created: u64,
    /// Calls whose idempotency key found the task made before.
    pub tasks_found_again: u64,
    /// Ends the server wrote (a runner's, a cancel's, the TTL's): one task ended twice counts
    /// twice.
    pub tasks_settled: u64,
}

impl Counters {
    pub fn rejected_total(&self) -> u64 {
        self.resumes_rejected.values().sum()
    }

    /// Nothing of 2025-11-25 happened: no event emitted or applied, no resume asked for.
    pub fn legacy_quiet(&self) -> bool {
        self.emits == 0
            && self.applied == 0
            && self.resumes_accepted == 0
            && self.rejected_total() == 0
            && self.late_emits_refused == 0
            && self.owed == 0
    }
}

/// The checker's judgement at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub clean: bool,
    /// What is owed and not settled yet: events on their way, a call's result, a task's end
    /// not yet read. A clean verdict with some open is clean *so far*.
    pub open: u64,
    pub counts: BTreeMap<AnomalyKind, u64>,
    /// One sentence: the leading anomaly, or a summary of a clean run.
    pub headline: String,
    pub first: Option<Anomaly>,
    /// How the client was told of the first undelivered obligation, if any was.
    pub told: Option<Told>,
}

impl Verdict {
    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// `fork ×1, duplicate ×41` or `clean`.
    pub fn summary(&self) -> String {
        if self.clean {
            return "clean".to_owned();
        }
        self.counts
            .iter()
            .map(|(k, n)| match (k, self.told) {
                (AnomalyKind::Undelivered, Some(told)) => format!("{k} ×{n} (told: {told})"),
                _ => format!("{k} ×{n}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Caused, Entry, Record};
    use crate::ids::{SessionId, SplitMix64};
    use crate::time::LabTime;

    /// A server whose clients report nothing (stock clients of `forkscope serve`) is not
    /// credited with "0 side effects applied": the verdict says what it could judge.
    #[test]
    fn a_verdict_without_a_witness_says_what_it_judged() {
        let mut checker = Checker::default();
        let session = SessionId::generate(&mut SplitMix64::new(7));
        checker.observe(&Entry {
            at: LabTime::ZERO,
            by: None,
            record: Record::SessionOpened { session },
            caused: Caused::NOTHING,
        });
        let verdict = checker.verdict();
        assert!(verdict.clean);
        // A session opened, and nothing run in it yet.
        assert_eq!(verdict.headline, "no anomaly: nothing has run yet");
        assert!(
            !verdict.headline.contains("side effects applied"),
            "{}",
            verdict.headline
        );
    }

    /// A run of 2026-07-28 alone has no stream to speak of: the verdict says what happened.
    #[test]
    fn a_verdict_of_2026_alone_says_nothing_of_streams() {
        use crate::history::Run;
        use crate::ids::TaskId;
        let mut checker = Checker::default();
        let task = TaskId::generate(&mut SplitMix64::new(7));
        let records = [
            Record::TaskCreated {
                op: "order-1".into(),
                task,
                fresh: true,
            },
            Record::StepApplied {
                run: Run::Task(task),
                step: 1,
                of: 1,
                epoch: 1,
            },
        ];
        for (i, record) in records.into_iter().enumerate() {
            checker.observe(&Entry {
                at: LabTime::ZERO,
                by: None,
                record,
                caused: Caused::NOTHING,
            });
            if i == 0 {
                // Made, no step yet: already the revision's words, none of streams.
                let made = checker.verdict().headline;
                assert!(made.contains("2026-07-28: 0 steps applied"), "{made}");
                assert!(!made.contains("stream"), "{made}");
            }
        }
        // Its end is not read yet: clean so far, with the end still owed.
        let verdict = checker.verdict();
        assert_eq!(verdict.open, 1);
        assert_eq!(
            verdict.headline,
            "no anomaly so far, and 1 owed still open: 2026-07-28: 1 step applied, each once, \
             1 task made"
        );
        checker.observe(&Entry {
            at: LabTime::ZERO,
            by: None,
            record: Record::TaskRead {
                task,
                status: crate::tasks::Status::Completed,
            },
            caused: Caused::NOTHING,
        });
        let verdict = checker.verdict();
        assert_eq!(verdict.open, 0);
        assert_eq!(
            verdict.headline,
            "no anomaly: 2026-07-28: 1 step applied, each once, 1 task made"
        );
    }

    #[test]
    fn counts_read_as_a_person_writes_them() {
        assert_eq!(counted(1, "resume", "accepted"), "1 resume accepted");
        assert_eq!(counted(0, "resume", "accepted"), "0 resumes accepted");
        assert_eq!(counted(44, "side effect", ""), "44 side effects");
    }
}
