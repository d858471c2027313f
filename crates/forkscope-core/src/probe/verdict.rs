//! The probe's verdicts, in the checker's words, and whether each holds for a case.

use serde::Serialize;

/// What a case came to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantNames)]
#[serde(tag = "verdict", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Verdict {
    /// The stream went on where the client left it: each event once, in order, nothing missing.
    CleanContinuation,
    /// Refused with a 4xx the client can act on. A stock client re-initializes on 404 only
    /// (the transport's rule for a session the server no longer knows).
    TypedRejection { status: u16, reinitializes: bool },
    /// Answered 200 with a stream that replayed nothing from the cursor it was given: the client
    /// cannot tell its cursor was not honoured. `live` counts events that came later.
    SilentEmptyStream { live: u64 },
    /// An event the client already had arrived again.
    Duplicate { item: String },
    /// Events between two the client received never arrived.
    Gap { missing: String },
    /// An event arrived after one that follows it.
    OutOfOrder { item: String, after: String },
    /// The resumed stream carried events of another stream of the session.
    CrossStreamReplay { item: String },
    /// The stream carried events of another session.
    CrossSessionReplay { item: String },
    /// The old connection kept receiving after a second one was attached: the session forked.
    TwoLiveStreams { old: u64, new: u64 },
    /// No usable answer: a timeout, a reset, or a 5xx.
    NoAnswer { why: String },
    /// 2026-07-28 tasks: a re-issued call named the task its first call made.
    OneTask,
    /// 2026-07-28 tasks: a re-issued call made a second task beside the first.
    SecondTask,
    /// Answered with a JSON-RPC error of this code: the client is told.
    TypedError { code: i64 },
    /// Every `tasks/get` of a new task found it.
    KnownOnEveryRead { reads: u64 },
    /// Some `tasks/get` of a new task said it was unknown.
    UnknownOnSomeReads { unknown: u64, reads: u64 },
    /// A task's end stayed what it was first read.
    TerminalOnce { status: String },
    /// A task read as ended was later read otherwise.
    TerminalChanged { from: String, to: String },
    /// A listen opened after the task ended while none was open told its end.
    ToldOnRelisten { status: String },
    /// A listen opened after the task ended while none was open never told its end.
    LostInGap,
    /// A task the server acknowledged was unknown to read `read` of task `task` after a fault
    /// (a restart, a killed runner): forgotten.
    UnknownAfterFault { task: u64, read: u64 },
    /// More side effects than the case's tasks make in one run each: a step ran again.
    RanAgain { effects: u64, once: u64 },
    /// Fewer side effects than the completed tasks make: a step counted done never happened.
    EffectMissing { effects: u64, once: u64 },
    /// Every task was found after the fault and ended once, with one run's effects (when
    /// counted).
    SurvivedFault { effects: Option<u64> },
    /// 2025-11-25: a session `initialize` had just made was unknown (404) to the next request
    /// on it, in `lost` of `tries` sessions: sessions are kept in one process, so a balancer
    /// without affinity breaks every session.
    SessionPerProcess { lost: u64, tries: u64 },
    /// The case saw too little to judge what it tests: neither holds nor violated.
    NotExercised { because: Unexercised },
}

/// Why a case observed too little to judge: each way a case can be vacuous, named, so a
/// report never says `holds` of a behaviour it did not see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Unexercised {
    /// No event of the stream arrived on any connection.
    NoEventAtAll,
    /// The stream's last event arrived before the break: nothing was left to resume.
    EndedBeforeBreak { before: u64 },
    /// The break came before any event of the stream: there was no place to resume from.
    NothingBeforeBreak,
    /// Nothing arrived after the break from a source with no known end: a lost event cannot be
    /// told from a source gone quiet.
    SourceWentQuiet,
    /// After the break only the call's result arrived, and how many progress notifications the
    /// call sends is unknown: a gap cannot be told from a short call.
    OnlyTheEndAfterBreak,
    /// No event arrived while both connections were open: which of them the stream went to
    /// was never shown.
    NothingWhileBothOpen,
    /// Too few events of the stream to judge its order and gaps.
    TooFew { seen: u64 },
    /// The server declares no tasks extension: a second run of a re-issued call cannot be
    /// seen.
    NoTasks,
    /// The task did not end within the window.
    NoEndSeen,
    /// The server acknowledged no listen for the task (`subscriptions/listen` refused, or its
    /// acknowledgement named no task id).
    NoTaskListen,
}

impl Unexercised {
    /// The reason in a sentence.
    pub fn describe(&self) -> String {
        match self {
            Unexercised::NoEventAtAll => "no event of the stream arrived at all".into(),
            Unexercised::EndedBeforeBreak { before } => format!(
                "the whole stream ({before} event{}) arrived before the break: nothing was left to resume",
                plural(*before)
            ),
            Unexercised::NothingBeforeBreak => {
                "the break came before any event of the stream: there was no place to resume from"
                    .into()
            }
            Unexercised::SourceWentQuiet => {
                "nothing arrived after the break, and the source has no known end: a lost event cannot be told from a quiet source".into()
            }
            Unexercised::OnlyTheEndAfterBreak => {
                "only the result arrived after the break, and the call's length is unknown: a gap cannot be told from a short call".into()
            }
            Unexercised::NothingWhileBothOpen => {
                "no event arrived while both connections were open: where the stream went was never shown".into()
            }
            Unexercised::TooFew { seen } => format!(
                "{seen} event{} of the stream arrived: too few to judge order and gaps",
                plural(*seen)
            ),
            Unexercised::NoTasks => {
                "the server declares no tasks extension: a second run of a re-issued call cannot be seen".into()
            }
            Unexercised::NoEndSeen => "the task did not end within the window".into(),
            Unexercised::NoTaskListen => {
                "the server acknowledged no listen for the task: no notifications/tasks to lose".into()
            }
        }
    }
}

impl Verdict {
    /// The verdict's name, as in JSON output and the expected-findings files; every name is
    /// listed by [`strum::VariantNames`].
    pub fn word(&self) -> &'static str {
        self.into()
    }

    /// How bad it is, for picking the worst of several findings: a leak across sessions
    /// first, a clean continuation last.
    pub fn severity(&self) -> u8 {
        match self {
            Verdict::NotExercised { .. }
            | Verdict::CleanContinuation
            | Verdict::OneTask
            | Verdict::KnownOnEveryRead { .. }
            | Verdict::TerminalOnce { .. }
            | Verdict::ToldOnRelisten { .. }
            | Verdict::SurvivedFault { .. } => 0,
            Verdict::UnknownAfterFault { .. } | Verdict::EffectMissing { .. } => 6,
            Verdict::RanAgain { .. } => 7,
            Verdict::TypedRejection { .. } | Verdict::TypedError { .. } => 1,
            Verdict::UnknownOnSomeReads { .. } => 5,
            Verdict::TerminalChanged { .. } => 6,
            Verdict::LostInGap => 5,
            Verdict::SecondTask => 7,
            Verdict::NoAnswer { .. } => 2,
            Verdict::SilentEmptyStream { .. } => 3,
            Verdict::OutOfOrder { .. } => 4,
            Verdict::Gap { .. } => 5,
            Verdict::Duplicate { .. } => 6,
            Verdict::TwoLiveStreams { .. } | Verdict::SessionPerProcess { .. } => 7,
            Verdict::CrossStreamReplay { .. } => 8,
            Verdict::CrossSessionReplay { .. } => 9,
        }
    }

    /// The verdict in a sentence.
    pub fn describe(&self) -> String {
        match self {
            Verdict::CleanContinuation => "clean continuation".into(),
            Verdict::TypedRejection {
                status,
                reinitializes: true,
            } => format!("typed rejection {status} (on which a stock client re-initializes)"),
            Verdict::TypedRejection { status, .. } => {
                format!(
                    "typed rejection {status} (a stock client reports it, and does not re-initialize)"
                )
            }
            Verdict::SilentEmptyStream { live: 0 } => {
                "silent empty stream: 200, and nothing replayed".into()
            }
            Verdict::SilentEmptyStream { live } => format!(
                "silent empty stream: 200, nothing replayed, then {live} live event{} as if the cursor were fine",
                plural(*live)
            ),
            Verdict::Duplicate { item } => format!("duplicate: {item} arrived twice"),
            Verdict::Gap { missing } => format!("gap: {missing} never arrived"),
            Verdict::OutOfOrder { item, after } => format!("out of order: {item} after {after}"),
            Verdict::CrossStreamReplay { item } => {
                format!("cross-stream replay: {item} belongs to another stream")
            }
            Verdict::CrossSessionReplay { item } => {
                format!("cross-session replay: {item} belongs to another session")
            }
            Verdict::TwoLiveStreams { old, new } => format!(
                "two live streams: the old connection received {old} event{} after the new one opened ({new} there)",
                plural(*old)
            ),
            Verdict::NoAnswer { why } => format!("no answer: {why}"),
            Verdict::OneTask => "one task: the re-issue named the first call's task".into(),
            Verdict::SecondTask => "second task: the re-issue made another task".into(),
            Verdict::TypedError { code } => format!("typed error {code}"),
            Verdict::KnownOnEveryRead { reads } => {
                format!("known on every read: {reads} tasks/get found the task")
            }
            Verdict::UnknownOnSomeReads { unknown, reads } => {
                format!(
                    "unknown on some reads: {unknown} of {reads} tasks/get did not know the task"
                )
            }
            Verdict::TerminalOnce { status } => format!("terminal once: {status}, on every read"),
            Verdict::TerminalChanged { from, to } => {
                format!("terminal changed: read {from}, then {to}")
            }
            Verdict::ToldOnRelisten { status } => {
                format!("told on relisten: the new listen sent the task's end, {status}")
            }
            Verdict::LostInGap => {
                "lost in the gap: the new listen never sent the end the task reached between listens".into()
            }
            Verdict::UnknownAfterFault { task, read } => format!(
                "unknown after the fault: read {read} of task {task}, acknowledged before it, said the task does not exist"
            ),
            Verdict::RanAgain { effects, once } => {
                format!("ran again: {effects} side effects where one run makes {once}")
            }
            Verdict::EffectMissing { effects, once } => format!(
                "effect missing: {effects} side effects where the completed work makes {once}"
            ),
            Verdict::SurvivedFault {
                effects: Some(effects),
            } => format!("survived the fault: each task ended once, {effects} side effects, one run's"),
            Verdict::SurvivedFault { effects: None } => {
                "survived the fault: each task found and ended once".into()
            }
            Verdict::SessionPerProcess { lost, tries } => format!(
                "session per process: {lost} of {tries} session{} initialize made {} unknown (404) to the next request",
                plural(*tries),
                if *lost == 1 { "was" } else { "were" }
            ),
            Verdict::NotExercised { because } => format!("not exercised: {}", because.describe()),
        }
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// How a case came out: what a correct server does, what it must not, or not seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    Holds,
    Violated,
    /// The case saw too little to judge; the verdict says why.
    NotExercised,
}

/// A verdict and whether it is what a correct server does in this case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub verdict: Verdict,
    pub judged: Judged,
    /// Why it holds or not, for this case.
    pub why: String,
    /// The arrival order of the events that break the rule (the duplicate, the late one, the
    /// first past a gap, what the old connection received after the new one opened), so a view
    /// can mark them.
    pub marked: Vec<u64>,
}

impl Finding {
    pub fn holds(verdict: Verdict, why: impl Into<String>) -> Finding {
        Finding {
            verdict,
            judged: Judged::Holds,
            why: why.into(),
            marked: Vec::new(),
        }
    }

    pub fn violated(verdict: Verdict, why: impl Into<String>) -> Finding {
        Finding {
            verdict,
            judged: Judged::Violated,
            why: why.into(),
            marked: Vec::new(),
        }
    }

    /// The case saw too little to judge, for this reason; `why` says what that leaves untested.
    pub fn not_exercised(because: Unexercised, why: impl Into<String>) -> Finding {
        Finding {
            verdict: Verdict::NotExercised { because },
            judged: Judged::NotExercised,
            why: why.into(),
            marked: Vec::new(),
        }
    }

    pub fn held(&self) -> bool {
        self.judged == Judged::Holds
    }

    pub fn is_violated(&self) -> bool {
        self.judged == Judged::Violated
    }

    /// The same finding, with these events marked.
    pub fn marking(mut self, orders: impl IntoIterator<Item = u64>) -> Finding {
        self.marked.extend(orders);
        self
    }
}
