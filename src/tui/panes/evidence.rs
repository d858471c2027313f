//! The evidence card: the first violation (or, when there is none, the first typed rejection)
//! pinned with a sentence saying why it matters, until dismissed — so the lesson stays on
//! screen after the lanes have scrolled on.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::{Anomaly, AnomalyKind, ClientAction, Record};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

/// What the card shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvidenceView {
    /// `FORK`, `TYPED REJECTION`, …
    pub title: String,
    /// Whether it is a violation (red) or a rejection that kept the invariant (green).
    pub violation: bool,
    /// Which lab (`naive`, `fenced`) and when.
    pub at: String,
    /// What happened, in the checker's or the server's words.
    pub said: String,
    /// Why it matters, in one sentence.
    pub why: String,
    /// The labs were paused on it (presenters' `--pause-at-violation`).
    pub paused: bool,
    /// The anomaly it shows: a card pinned on a duplicate gives way to the fork that explains
    /// it, when the checker sees the fork a moment later.
    pub kind: Option<AnomalyKind>,
}

/// Rows the card takes at least: its border and two lines.
pub const HEIGHT: u16 = 4;
/// Rows it may grow to, so a narrow screen wraps the sentence instead of cutting it.
const MAX_HEIGHT: u16 = 8;

/// Rows the card needs at `width` columns: its border and both lines wrapped at word
/// boundaries, as the paragraph wraps them.
pub fn height(evidence: &EvidenceView, width: u16) -> u16 {
    let inner = usize::from(width.saturating_sub(2)).max(1);
    let said = format!("{} {}", evidence.title, evidence.said);
    let rows = wrapped_rows(&said, inner) + wrapped_rows(&evidence.why, inner);
    (2 + u16::try_from(rows).unwrap_or(u16::MAX)).clamp(HEIGHT, MAX_HEIGHT)
}

/// Rows `text` takes when wrapped greedily at spaces into `width` columns (a word longer than
/// the width is broken).
fn wrapped_rows(text: &str, width: usize) -> usize {
    let mut rows = 1;
    let mut used = 0;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        let need = if used == 0 { len } else { used + 1 + len };
        if need <= width {
            used = need;
        } else {
            rows += usize::from(used > 0);
            rows += len.saturating_sub(1) / width;
            used = (len - 1) % width + 1;
        }
    }
    rows
}

/// The evidence in a lab's snapshot, if any: its first violation, else its first typed
/// rejection.
pub fn of(snap: &Snapshot) -> Option<EvidenceView> {
    let policy = snap.view.policy;
    if let Some(first) = &snap.view.verdict.first {
        let kind = first.kind();
        return Some(EvidenceView {
            title: super::invariant::short(kind).to_owned(),
            violation: true,
            at: format!("{policy} lab"),
            said: first.to_string(),
            why: match first {
                Anomaly::Fork {
                    across: Some(across),
                    ..
                } => format!(
                    "two replicas sending one stream: replica {} keeps sending on the connection \
                     the client left for replica {}, events the client will never see from it, \
                     and nothing on either side logs an error",
                    across.from, across.bound_on
                ),
                _ => why(kind).to_owned(),
            },
            paused: false,
            kind: Some(kind),
        });
    }
    snap.recent.iter().find_map(|entry| match &entry.record {
        Record::ResumeRejected { reason, .. } => Some(EvidenceView {
            title: "TYPED REJECTION".to_owned(),
            violation: false,
            at: format!("{policy} lab, {}", entry.at),
            said: format!(
                "the server refused a reconnect with {} {reason} instead of guessing",
                reason.http_status()
            ),
            why: match reason.client_action() {
                ClientAction::StartNewSession => {
                    "no stream identity and gap-freedom proven, so no resume: the client is told \
                     continuity broke and starts a new session — nothing forks, nothing is applied twice"
                }
                ClientAction::RetryLater => {
                    "another stream of the session may still be live: the client waits and \
                     retries rather than get a second live stream"
                }
            }
            .to_owned(),
            paused: false,
            kind: None,
        }),
        _ => None,
    })
}

fn why(kind: AnomalyKind) -> &'static str {
    match kind {
        AnomalyKind::Fork => {
            "two live streams in one session: the orphan keeps taking events the client will \
             never see, and nothing on either side logs an error"
        }
        AnomalyKind::Duplicate => {
            "a side effect applied twice: the replay looked like new events to a client that \
             was never told the stream was new"
        }
        AnomalyKind::Gap => "an event never arrived, silently: the client's state is missing it",
        AnomalyKind::NonMonotonicCursor => {
            "the client's cursor went backwards: its next resume asks for events it already \
             applied"
        }
        AnomalyKind::Lost => {
            "an event the client was owed went to a stream it had left: gone, and no one was told"
        }
        AnomalyKind::CursorDrift => {
            "the server's position and the client's cursor came apart: a later resume cannot \
             say where the client really is"
        }
        AnomalyKind::ReusedId => {
            "one id, two contents: the store forgot it had handed the id out, and a client whose \
             cursor passed it will never see the second write"
        }
        AnomalyKind::TaskLost => {
            "a task the client asked for never told it its end, and nothing told the client it \
             never will: its runners died, the store forgot it, or it never finished"
        }
        AnomalyKind::CallLost => {
            "a tool call the client made will never send its result, and nothing told the \
             client: it waits, believing the call is still running"
        }
        AnomalyKind::Undelivered => {
            "owed and never delivered, but the client was told: it knows what is missing — \
             safe, yet not everything arrived, so not clean"
        }
        AnomalyKind::TwoRunners => {
            "one call run twice at once: a re-issue made a second task while the first ran on \
             (or a runner past its lease still wrote), and the server never noticed"
        }
        AnomalyKind::EffectTwice => {
            "the fork is gone from the wire, the double charge is not: the client re-issued, as \
             2026-07-28 tells it to, and the server ran the call again"
        }
        AnomalyKind::TerminalTwice => {
            "a task ended twice (completed, then cancelled): two readers can be told two \
             different outcomes of one call"
        }
        AnomalyKind::StaleRead => {
            "a task read back from its end: the client saw it finished, then saw it working \
             again, from a copy that lagged"
        }
        AnomalyKind::OrphanTask => {
            "a task whose answer the client lost: there is no tasks/list to find it by, so it \
             runs (or ran) with no one to read its result, and the re-issue made another"
        }
        AnomalyKind::CutHalfway => {
            "the response stream closed, so the server cancelled the call, as the revision \
             says, after part of its work: the effect is half made, and the client cannot know \
             how far it got"
        }
    }
}

pub fn render(frame: &mut Frame, area: Rect, evidence: &EvidenceView, theme: &Theme) {
    let title = format!(
        "evidence · {} · Enter dismisses{}",
        evidence.at,
        if evidence.paused {
            " · paused: space resumes"
        } else {
            ""
        }
    );
    let style = if evidence.violation {
        theme.bad()
    } else {
        theme.good()
    };
    let lines = vec![
        Line::from(vec![
            Span::styled(format!("{} ", evidence.title), style),
            Span::styled(evidence.said.clone(), theme.text()),
        ]),
        Line::styled(evidence.why.clone(), theme.dim()),
    ];
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block(&title, theme)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_grows_to_wrap_its_sentence() {
        let card = EvidenceView {
            title: "DUPLICATE".to_owned(),
            violation: true,
            at: "naive lab".to_owned(),
            said:
                "d1a3eb:bg:1 was applied twice: first as s1#1 at 0.702 s, then as s2#1 at 6.283 s"
                    .to_owned(),
            why: why(AnomalyKind::Duplicate).to_owned(),
            paused: false,
            kind: None,
        };
        assert_eq!(height(&card, 200), HEIGHT, "both lines fit");
        assert_eq!(height(&card, 100), 5, "the why wraps onto a second row");
        assert!(height(&card, 60) > 5);
        assert_eq!(wrapped_rows("aaaa bbbb", 4), 2);
        assert_eq!(wrapped_rows("aaaa bbbb", 9), 1);
        assert_eq!(wrapped_rows("aaaaaaaaa", 4), 3);
    }
}
