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
    let rows = area.height.saturating_sub(2) as usize;
    let mut verdict = Vec::new();
    push_verdict(&mut verdict, snap, theme);
    // Counted as the paragraph will wrap them: by words.
    let verdict_rows: usize = verdict
        .iter()
        .map(|l| {
            let text: String = l.spans.iter().map(|s| s.content.as_ref()).collect();
            wrap_words(&text, width).len().max(1)
        })
        .sum();
    let conditions = snap.view.conditions.len();
    let mut lines: Vec<Line> = if area.height < COMPACT_BELOW || conditions + verdict_rows > rows {
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
        full_conditions(snap, theme, width, rows.saturating_sub(verdict_rows))
    };
    push_verdict(&mut lines, snap, theme);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("invariant", theme)),
        area,
    );
}

/// The conditions in `budget` rows: each with its mark, number and title, and why it holds or
/// not — beside the title when it fits, else wrapped beneath it, never cut mid-sentence. When
/// the notes do not all fit, the broken conditions keep theirs (they explain the verdict); when
/// even those do not, the titles alone.
fn full_conditions<'a>(
    snap: &Snapshot,
    theme: &Theme,
    width: usize,
    budget: usize,
) -> Vec<Line<'a>> {
    let layouts = [true, false].map(|all_notes| {
        let mut lines = Vec::new();
        for c in &snap.view.conditions {
            let (mark, style) = if c.holds {
                ("✔", theme.good())
            } else {
                ("✘", theme.bad())
            };
            let head = format!("{mark} {} {}", c.condition.number(), c.condition.title());
            let note = (all_notes || !c.holds) && !c.note.is_empty();
            if !note {
                lines.push(Line::styled(head, style));
            } else if head.chars().count() + 3 + c.note.chars().count() <= width {
                lines.push(Line::from(vec![
                    Span::styled(head, style),
                    Span::styled(format!(" · {}", c.note), theme.dim()),
                ]));
            } else {
                lines.push(Line::styled(head, style));
                for part in wrap_words(&c.note, width.saturating_sub(4)) {
                    lines.push(Line::styled(format!("    {part}"), theme.dim()));
                }
            }
        }
        lines
    });
    let [all, broken] = layouts;
    if all.len() <= budget {
        all
    } else if broken.len() <= budget {
        broken
    } else {
        snap.view
            .conditions
            .iter()
            .map(|c| {
                let (mark, style) = if c.holds {
                    ("✔", theme.good())
                } else {
                    ("✘", theme.bad())
                };
                Line::styled(
                    format!("{mark} {} {}", c.condition.number(), c.condition.title()),
                    style,
                )
            })
            .collect()
    }
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let width = width.max(8);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The verdict, the typed rejections, and the leading anomaly's sentence.
/// The verdict in a word or a count per anomaly: `CLEAN`, `FORK ×1 · DUPLICATE ×3`.
pub(crate) fn summary(snap: &Snapshot) -> String {
    let verdict = &snap.view.verdict;
    if verdict.clean {
        "CLEAN".to_owned()
    } else {
        verdict
            .counts
            .iter()
            .map(|(kind, n)| format!("{} ×{n}", short(*kind)))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

fn push_verdict(lines: &mut Vec<Line<'_>>, snap: &Snapshot, theme: &Theme) {
    let verdict = &snap.view.verdict;
    let summary = summary(snap);
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

/// Short anomaly names for the verdict line (and the evidence card's title).
pub(crate) fn short(kind: AnomalyKind) -> &'static str {
    match kind {
        AnomalyKind::Fork => "FORK",
        AnomalyKind::Duplicate => "DUPLICATE",
        AnomalyKind::Gap => "GAP",
        AnomalyKind::NonMonotonicCursor => "CURSOR BACK",
        AnomalyKind::Lost => "LOST",
        AnomalyKind::CursorDrift => "DRIFT",
    }
}
