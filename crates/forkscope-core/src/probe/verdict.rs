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
            Verdict::CleanContinuation => 0,
            Verdict::TypedRejection { .. } => 1,
            Verdict::NoAnswer { .. } => 2,
            Verdict::SilentEmptyStream { .. } => 3,
            Verdict::OutOfOrder { .. } => 4,
            Verdict::Gap { .. } => 5,
            Verdict::Duplicate { .. } => 6,
            Verdict::TwoLiveStreams { .. } => 7,
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
        }
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A verdict and whether it is what a correct server does in this case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub verdict: Verdict,
    pub holds: bool,
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
            holds: true,
            why: why.into(),
            marked: Vec::new(),
        }
    }

    pub fn violated(verdict: Verdict, why: impl Into<String>) -> Finding {
        Finding {
            verdict,
            holds: false,
            why: why.into(),
            marked: Vec::new(),
        }
    }

    /// The same finding, with these events marked.
    pub fn marking(mut self, orders: impl IntoIterator<Item = u64>) -> Finding {
        self.marked.extend(orders);
        self
    }
}
