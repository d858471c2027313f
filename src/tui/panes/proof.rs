//! The "prove it" card: a bounded `forkscope check` of the lab's policy, its progress, and its
//! verdict — for naive, the shortest schedule that forks, step by step, ready to play.

use super::card;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};

/// What the card shows, as plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProofView {
    /// `fenced`, `naive`, or `naive and fenced`.
    pub policies: String,
    /// While searching: the depth done and the distinct states so far.
    pub progress: Option<(usize, u64)>,
    /// One block per policy once done: its verdict line, the figures, then details.
    pub results: Vec<ProofResult>,
    /// A counterexample can be played (Enter).
    pub playable: bool,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProofResult {
    pub holds: bool,
    pub verdict: String,
    pub figures: String,
    /// The counterexample's steps (with what each did), or what the search reached.
    pub details: Vec<String>,
}

pub fn render(frame: &mut Frame, area: Rect, proof: &ProofView, theme: &Theme) {
    let [popup] = Layout::horizontal([Constraint::Max(96)])
        .flex(Flex::Center)
        .areas(area);
    let mut lines = Vec::new();
    if let Some(e) = &proof.error {
        lines.push(Line::styled(e.clone(), theme.bad()));
    }
    if proof.results.is_empty() && proof.error.is_none() {
        let (depth, states) = proof.progress.unwrap_or((0, 0));
        lines.push(Line::styled(
            format!(
                "exploring every interleaving of the lab's steps under {} …",
                proof.policies
            ),
            theme.text(),
        ));
        lines.push(Line::styled(
            format!("depth {depth} done, {states} distinct states so far"),
            theme.dim(),
        ));
    }
    for result in &proof.results {
        let mark = if result.holds {
            Span::styled("✔ ", theme.good())
        } else {
            Span::styled("✘ ", theme.bad())
        };
        lines.push(Line::from(vec![
            mark,
            Span::styled(
                result.verdict.clone(),
                if result.holds {
                    theme.good()
                } else {
                    theme.bad()
                },
            ),
        ]));
        lines.push(Line::styled(result.figures.clone(), theme.dim()));
        for detail in &result.details {
            let style = if detail.trim_start().starts_with('✘') {
                theme.bad()
            } else if detail.starts_with("  ") {
                theme.dim()
            } else {
                theme.text()
            };
            lines.push(Line::styled(detail.clone(), style));
        }
        lines.push(Line::raw(""));
    }
    let title = if proof.playable {
        "prove it · Enter plays the counterexample · Esc close"
    } else {
        "prove it · Esc close"
    };
    card(frame, popup, lines, title, theme);
}
