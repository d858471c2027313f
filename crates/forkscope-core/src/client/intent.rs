//! A 2026-07-28 client's one intent as a sans-IO machine: call a tool as a task under the
//! intent's idempotency key, re-issue as the revision says when the answer does not come (a new
//! request id, the same key), then poll `tasks/get` until the task ends, carrying the task's
//! cursor ([`Seen`]) with every read.
//!
//! The lab's client (`wire/client/tasks.rs`) and `check --protocol 2026-07-28`'s model both
//! drive this machine: what the client re-issues, how long it polls, what it gives up on and
//! what it tells the server it saw are decided here, once. The caller sends what
//! [`Intent::next`] asks for and says how each answer came back; time is a parameter.

use crate::tasks::{POLL_INTERVAL_MS, Seen, Status};
use crate::time::LabTime;

/// Calls one intent makes at most: the first, and three re-issues (after a lost answer, or a
/// task the server did not know).
pub const MAX_CALLS: u32 = 4;
/// Reads in a row that may fail (no answer, a store not answering) before the client gives
/// the task up.
pub const MAX_FAILED_READS: u32 = 20;
/// Reads one task gets at most at the client's own pace: far past any task the lab runs.
pub const MAX_READS: u32 = 2_400;

/// What the machine wants done next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntentStep<T> {
    /// Call the tool as a task under the intent's key; answer with [`Intent::answered`].
    Call,
    /// Read `task` with `tasks/get`, saying it was told `seen`; answer with [`Intent::read`].
    Read { task: T, seen: Seen },
    /// Nothing before this moment.
    Wait(LabTime),
    /// A call or a read is on its way: nothing until its answer.
    Awaiting,
    /// The intent is over ([`Intent::outcome`]).
    Over,
}

/// How a call came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallAnswer<T> {
    /// A `CreateTaskResult` naming the task.
    Created(T),
    /// No answer: the response broke, timed out, named no task, or was lost on the way.
    Lost,
    /// A JSON-RPC error: the server refused the call.
    Refused(String),
    /// A plain result stream: the server ran the call with no task (it has no tasks extension).
    Plain,
}

/// How a read came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadAnswer {
    /// The task as the server holds it; `done`: the steps it says are done
    /// (`_meta["io.forkscope/done"]`, when it says).
    Read { status: Status, done: Option<u64> },
    /// No answer, or an error a retry may cure (a store not answering, or one rolled back under
    /// the task whose typed end is still to be read).
    Passing(String),
    /// The server does not know the task (a replica that never had it): re-issue under the key.
    Unknown,
    /// An error no retry cures (the task expired, its record is corrupt).
    Final(String),
}

impl ReadAnswer {
    /// A `tasks/get` error, by its `data.reason`.
    pub fn refused(reason: Option<&str>, message: String) -> ReadAnswer {
        match reason {
            Some("unknown") => ReadAnswer::Unknown,
            Some("expired" | "store_corrupt") => ReadAnswer::Final(message),
            // Anything else may pass: a store not answering, or one found rolled back under
            // this client's cursor, whose typed end the next read tells.
            _ => ReadAnswer::Passing(message),
        }
    }
}

/// Why an intent ended without its task's end.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntentError {
    #[error("no answer after {0} calls")]
    NoAnswer(u32),
    #[error("the server refused the call: {0}")]
    Refused(String),
    #[error("the task could no longer be read: {0}")]
    Unreadable(String),
    #[error(
        "the server made no task: it ran the call plainly (the policy's server has no tasks extension)"
    )]
    NoTask,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// A call is due (the first, or a re-issue).
    Calling,
    /// A call is on its way.
    Called,
    /// The task is known; the next read falls due at `next_read`.
    Polling,
    /// A read is on its way.
    Reading,
    Over,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent<T> {
    max_calls: u32,
    calls: u32,
    phase: Phase,
    /// The task the client knows, and what its reads told (the task's cursor).
    known: Option<(T, Seen)>,
    next_read: LabTime,
    /// Reads in a row that failed.
    failed: u32,
    /// Reads made at the client's own pace.
    reads: u32,
    outcome: Option<Result<Status, IntentError>>,
}

impl<T: Clone + PartialEq> Intent<T> {
    /// An intent about to make its first call, re-issuing up to `max_calls` calls in all.
    pub fn new(max_calls: u32) -> Intent<T> {
        Intent {
            max_calls,
            calls: 0,
            phase: Phase::Calling,
            known: None,
            next_read: LabTime::ZERO,
            failed: 0,
            reads: 0,
            outcome: None,
        }
    }

    /// What to do next at `now`. A call or a read it asks for is counted as sent.
    pub fn next(&mut self, now: LabTime) -> IntentStep<T> {
        match self.phase {
            Phase::Calling if self.calls < self.max_calls => {
                self.calls += 1;
                self.phase = Phase::Called;
                IntentStep::Call
            }
            Phase::Calling => self.over(Err(IntentError::NoAnswer(self.calls))),
            Phase::Polling if now < self.next_read => IntentStep::Wait(self.next_read),
            Phase::Polling if self.reads >= MAX_READS => {
                self.over(Err(IntentError::Unreadable("it never ended".into())))
            }
            Phase::Polling => {
                self.reads += 1;
                self.phase = Phase::Reading;
                let (task, seen) = self.known.clone().expect("polling knows its task");
                IntentStep::Read { task, seen }
            }
            Phase::Called | Phase::Reading => IntentStep::Awaiting,
            Phase::Over => IntentStep::Over,
        }
    }

    /// When [`Intent::next`] next has something to do: `None` while an answer is awaited or
    /// once the intent is over.
    pub fn poll_timeout(&self) -> Option<LabTime> {
        match self.phase {
            Phase::Calling => Some(LabTime::ZERO),
            Phase::Polling => Some(self.next_read),
            Phase::Called | Phase::Reading | Phase::Over => None,
        }
    }

    fn over(&mut self, outcome: Result<Status, IntentError>) -> IntentStep<T> {
        self.phase = Phase::Over;
        self.outcome = Some(outcome);
        IntentStep::Over
    }

    /// A call's answer came back at `now`.
    pub fn answered(&mut self, now: LabTime, answer: CallAnswer<T>) {
        if self.phase != Phase::Called {
            return;
        }
        match answer {
            CallAnswer::Created(task) => {
                // A re-issue that named the task known before keeps what its reads told.
                if self.known.as_ref().is_none_or(|(known, _)| *known != task) {
                    self.known = Some((task, Seen::default()));
                }
                self.phase = Phase::Polling;
                self.next_read = now.plus(POLL_INTERVAL_MS);
                self.failed = 0;
            }
            CallAnswer::Lost => self.phase = Phase::Calling,
            CallAnswer::Refused(why) => {
                self.over(Err(IntentError::Refused(why)));
            }
            CallAnswer::Plain => {
                self.over(Err(IntentError::NoTask));
            }
        }
    }

    /// A read of the known task came back at `now`: the one [`Intent::next`] asked for, or one
    /// the caller made on its own ([`Intent::reading`]: a read again, or the model's read at
    /// any moment). Once the intent is over, a read only updates the cursor.
    pub fn read(&mut self, now: LabTime, answer: ReadAnswer) {
        if let ReadAnswer::Read { status, done } = answer
            && let Some((_, seen)) = self.known.as_mut()
        {
            seen.done = seen.done.max(done.unwrap_or(0));
            seen.ended |= status.is_terminal();
        }
        if !matches!(self.phase, Phase::Polling | Phase::Reading) {
            return;
        }
        self.phase = Phase::Polling;
        self.next_read = now.plus(POLL_INTERVAL_MS);
        match answer {
            ReadAnswer::Read { status, .. } => {
                self.failed = 0;
                if status.is_terminal() {
                    self.over(Ok(status));
                }
            }
            ReadAnswer::Unknown if self.calls < self.max_calls => self.phase = Phase::Calling,
            ReadAnswer::Unknown => {
                self.over(Err(IntentError::Unreadable("unknown task".into())));
            }
            ReadAnswer::Final(why) => {
                self.over(Err(IntentError::Unreadable(why)));
            }
            ReadAnswer::Passing(why) => {
                self.failed += 1;
                if self.failed >= MAX_FAILED_READS {
                    self.over(Err(IntentError::Unreadable(why)));
                }
            }
        }
    }

    /// The known task and its cursor, for a read the caller makes on its own.
    pub fn reading(&self) -> Option<(T, Seen)> {
        self.known.clone()
    }

    /// The task the client knows, if any.
    pub fn known(&self) -> Option<&T> {
        self.known.as_ref().map(|(task, _)| task)
    }

    /// Whether a call is due: nothing is known or on its way, and a call is left.
    pub fn wants_call(&self) -> bool {
        self.phase == Phase::Calling && self.calls < self.max_calls
    }

    /// Calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// How the intent ended: its task's final status, or why it gave up. `None` while it runs.
    pub fn outcome(&self) -> Option<&Result<Status, IntentError>> {
        self.outcome.as_ref()
    }

    /// The intent's state as words, for a model's fingerprint: its phase, calls, cursor and
    /// end (the task known is the caller's to number; the reads made are a bound, left out).
    pub fn canonical(&self) -> [u64; 5] {
        let seen = self
            .known
            .as_ref()
            .map(|(_, seen)| *seen)
            .unwrap_or_default();
        let ended = match &self.outcome {
            None => 0,
            Some(Ok(status)) => *status as u64 + 1,
            Some(Err(_)) => 99,
        };
        [
            self.phase as u64,
            u64::from(self.calls),
            seen.done,
            u64::from(seen.ended),
            ended,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: LabTime = LabTime::ZERO;

    fn at(ms: u64) -> LabTime {
        LabTime::from_millis(ms)
    }

    fn read(status: Status, done: u64) -> ReadAnswer {
        ReadAnswer::Read {
            status,
            done: Some(done),
        }
    }

    #[test]
    fn an_intent_calls_then_polls_at_its_interval_until_the_end() {
        let mut intent = Intent::new(MAX_CALLS);
        assert_eq!(intent.next(T0), IntentStep::Call);
        assert_eq!(intent.next(T0), IntentStep::Awaiting);
        intent.answered(T0, CallAnswer::Created("t1"));
        assert_eq!(intent.next(T0), IntentStep::Wait(at(POLL_INTERVAL_MS)));
        let first = intent.next(at(POLL_INTERVAL_MS));
        assert_eq!(
            first,
            IntentStep::Read {
                task: "t1",
                seen: Seen::default()
            }
        );
        intent.read(at(POLL_INTERVAL_MS), read(Status::Working, 1));
        let second = intent.next(at(2 * POLL_INTERVAL_MS));
        assert_eq!(
            second,
            IntentStep::Read {
                task: "t1",
                seen: Seen {
                    done: 1,
                    ended: false
                }
            }
        );
        intent.read(at(2 * POLL_INTERVAL_MS), read(Status::Completed, 2));
        assert_eq!(intent.next(at(10_000)), IntentStep::Over);
        assert_eq!(intent.outcome(), Some(&Ok(Status::Completed)));
    }

    #[test]
    fn a_lost_answer_is_reissued_until_the_calls_run_out() {
        let mut intent: Intent<&str> = Intent::new(3);
        for _ in 0..3 {
            assert_eq!(intent.next(T0), IntentStep::Call);
            intent.answered(T0, CallAnswer::Lost);
        }
        assert_eq!(intent.next(T0), IntentStep::Over);
        assert_eq!(intent.outcome(), Some(&Err(IntentError::NoAnswer(3))));
    }

    #[test]
    fn an_unknown_task_is_reissued_under_the_key_and_the_cursor_kept_for_the_same_task() {
        let mut intent = Intent::new(MAX_CALLS);
        intent.next(T0);
        intent.answered(T0, CallAnswer::Created("t1"));
        intent.next(at(POLL_INTERVAL_MS));
        intent.read(at(POLL_INTERVAL_MS), read(Status::Working, 1));
        intent.next(at(2 * POLL_INTERVAL_MS));
        intent.read(at(2 * POLL_INTERVAL_MS), ReadAnswer::Unknown);
        assert_eq!(intent.next(at(2 * POLL_INTERVAL_MS)), IntentStep::Call);
        intent.answered(at(2 * POLL_INTERVAL_MS), CallAnswer::Created("t1"));
        let step = intent.next(at(3 * POLL_INTERVAL_MS));
        assert!(matches!(step, IntentStep::Read { seen, .. } if seen.done == 1));
    }

    #[test]
    fn reads_that_may_pass_are_retried_a_while_and_a_final_one_ends_the_intent() {
        let mut intent = Intent::new(MAX_CALLS);
        intent.next(T0);
        intent.answered(T0, CallAnswer::Created(7u8));
        let mut now = T0;
        for _ in 0..MAX_FAILED_READS - 1 {
            now = now.plus(POLL_INTERVAL_MS);
            assert!(matches!(intent.next(now), IntentStep::Read { .. }));
            intent.read(now, ReadAnswer::Passing("store unavailable".into()));
        }
        now = now.plus(POLL_INTERVAL_MS);
        intent.next(now);
        intent.read(now, read(Status::Working, 0));
        now = now.plus(POLL_INTERVAL_MS);
        intent.next(now);
        intent.read(now, ReadAnswer::Final("the task expired".into()));
        let gave_up = Err(IntentError::Unreadable("the task expired".into()));
        assert_eq!(intent.outcome(), Some(&gave_up));
    }

    #[test]
    fn a_read_after_the_end_updates_the_cursor_and_not_the_outcome() {
        let mut intent = Intent::new(MAX_CALLS);
        intent.next(T0);
        intent.answered(T0, CallAnswer::Created(1u8));
        intent.read(T0, read(Status::Completed, 2));
        intent.read(T0, read(Status::Working, 3));
        assert_eq!(intent.outcome(), Some(&Ok(Status::Completed)));
        let (_, seen) = intent.reading().unwrap();
        assert_eq!(
            seen,
            Seen {
                done: 3,
                ended: true
            }
        );
    }

    #[test]
    fn a_refused_or_plain_call_ends_the_intent_typed() {
        let mut refused: Intent<u8> = Intent::new(MAX_CALLS);
        refused.next(T0);
        refused.answered(T0, CallAnswer::Refused("key reused".into()));
        assert_eq!(
            refused.outcome(),
            Some(&Err(IntentError::Refused("key reused".into())))
        );
        let mut plain: Intent<u8> = Intent::new(MAX_CALLS);
        plain.next(T0);
        plain.answered(T0, CallAnswer::Plain);
        assert_eq!(plain.outcome(), Some(&Err(IntentError::NoTask)));
    }

    #[test]
    fn a_refusal_is_read_by_its_reason() {
        assert_eq!(
            ReadAnswer::refused(Some("unknown"), String::new()),
            ReadAnswer::Unknown
        );
        for reason in ["expired", "store_corrupt"] {
            assert!(matches!(
                ReadAnswer::refused(Some(reason), String::new()),
                ReadAnswer::Final(_)
            ));
        }
        for reason in [Some("store_rolled_back"), Some("store_unavailable"), None] {
            assert!(matches!(
                ReadAnswer::refused(reason, String::new()),
                ReadAnswer::Passing(_)
            ));
        }
    }
}
