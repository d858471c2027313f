//! The invariant panel: the five conditions of the seed, green or red, and the checker's
//! verdict with its one-sentence explanation.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::AnomalyKind;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

/// Rows below which the five conditions share one line, so the verdict and its sentence stay.
const COMPACT_BELOW: u16 = 11;

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    // Conditions stay one line each (truncated to fit); only the verdict sentence wraps. A
    // short panel gives them one line together.
    let width = area.width.saturating_sub(2) as usize;
    let mut lines: Vec<Line> = if area.height < COMPACT_BELOW {
        let mut spans = vec![Span::styled("conditions ", theme.title())];
        for c in &snap.view.conditions {
            let (mark, style) = if c.holds {
                ("✔", theme.good())
            } else {
                ("✘", theme.bad())
            };
            spans.push(Span::styled(
                format!("{mark}{} ", c.condition.number()),
                style,
            ));
        }
        vec![Line::from(spans)]
    } else {
        full_conditions(snap, theme, width)
    };
    push_verdict(&mut lines, snap, theme);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("invariant", theme)),
        area,
    );
}

/// One line per condition: its mark, number and title, and why it holds or not.
fn full_conditions<'a>(snap: &Snapshot, theme: &Theme, width: usize) -> Vec<Line<'a>> {
    snap.view
        .conditions
        .iter()
        .map(|c| {
            let (mark, style) = if c.holds {
                ("✔", theme.good())
            } else {
                ("✘", theme.bad())
            };
            let head: String = format!("{mark} {} {}", c.condition.number(), c.condition.title())
                .chars()
                .take(width)
                .collect();
            let room = width.saturating_sub(head.chars().count() + 3);
            let note: String = c.note.chars().take(room).collect();
            let note = if note.is_empty() {
                String::new()
            } else {
                format!(" · {note}")
            };
            Line::from(vec![
                Span::styled(head, style),
                Span::styled(note, theme.dim()),
            ])
        })
        .collect()
}

/// The verdict, the typed rejections, and the leading anomaly's sentence.
fn push_verdict(lines: &mut Vec<Line<'_>>, snap: &Snapshot, theme: &Theme) {
    let verdict = &snap.view.verdict;
    let summary = if verdict.clean {
        "CLEAN".to_owned()
    } else {
        verdict
            .counts
            .iter()
            .map(|(kind, n)| format!("{} ×{n}", short(*kind)))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    lines.push(Line::from(vec![
        Span::styled("verdict ", theme.title()),
        Span::styled(summary, theme.verdict(verdict.clean)),
    ]));
    // The typed rejections are the fenced story's evidence: name them before the sentence.
    let rejected = &snap.view.counters.resumes_rejected;
    if !rejected.is_empty() {
        let list: Vec<String> = rejected
            .iter()
            .map(|(reason, n)| format!("{} {reason} ×{n}", reason.http_status()))
            .collect();
        lines.push(Line::from(vec![
            Span::styled("typed rejections ", theme.title()),
            Span::styled(list.join(" · "), theme.warn()),
        ]));
    }
    lines.push(Line::styled(
        verdict.headline.clone(),
        if verdict.clean {
            theme.dim()
        } else {
            theme.text()
        },
    ));
}

/// Short anomaly names for the verdict line.
fn short(kind: AnomalyKind) -> &'static str {
    match kind {
        AnomalyKind::Fork => "FORK",
        AnomalyKind::Duplicate => "DUPLICATE",
        AnomalyKind::Gap => "GAP",
        AnomalyKind::NonMonotonicCursor => "CURSOR BACK",
        AnomalyKind::Lost => "LOST",
        AnomalyKind::CursorDrift => "DRIFT",
    }
}
