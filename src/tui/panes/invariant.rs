//! The invariant panel: the five conditions of the seed, green or red, and the checker's
//! verdict with its one-sentence explanation. A lab of 2026-07-28 alone has no stream to fence:
//! it lists the tasks extension's five guarantees under the policy instead.

use super::{block, wrap_words};
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::revision::Protocols;
use forkscope_core::{AnomalyKind, Condition};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

/// Rows below which the five conditions share one line, so the verdict and its sentence stay.
const COMPACT_BELOW: u16 = 11;

/// One line of the list: a condition of the seed, or a guarantee of the tasks extension.
struct Item<'s> {
    number: u8,
    holds: bool,
    title: &'static str,
    meaning: &'static str,
    note: std::borrow::Cow<'s, str>,
}

/// The list the lab's revision is judged by, and what it is called.
fn items(snap: &Snapshot) -> (&'static str, Vec<Item<'_>>) {
    if snap.protocols == Protocols::Modern {
        let items = snap.view.guarantees.iter().map(|g| Item {
            number: g.guarantee.number(),
            holds: g.holds,
            title: g.guarantee.title(),
            meaning: g.guarantee.meaning(),
            // The checker's finding outranks the policy's promise: name what broke it.
            note: match g.broken {
                Some(kind) => format!(
                    "the checker found {} ×{}",
                    short(kind),
                    snap.view.verdict.count(kind)
                )
                .into(),
                None => g.note.into(),
            },
        });
        return ("guarantee", items.collect());
    }
    let items = snap.view.conditions.iter().map(|c| Item {
        number: c.condition.number(),
        holds: c.holds,
        title: c.condition.title(),
        meaning: c.condition.meaning(),
        note: c.note.as_str().into(),
    });
    ("condition", items.collect())
}

/// `explained`: the condition a person asked about (keys 1–5): its meaning and why it holds
/// or not here lead the panel, at any size.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    explained: Option<Condition>,
    theme: &Theme,
) {
    // Conditions stay one line each (truncated to fit); only the verdict sentence wraps. A
    // short panel gives them one line together.
    let width = area.width.saturating_sub(2) as usize;
    let rows = area.height.saturating_sub(2) as usize;
    let verdict_rows = verdict_rows(snap, width, theme);
    let (noun, items) = items(snap);
    let explained = explained.and_then(|e| items.iter().find(|c| c.number == e.number()));
    // Compact: the list shares one line, which carries the `1–5` hint itself.
    let compact = area.height < COMPACT_BELOW || items.len() + verdict_rows > rows;
    let mut lines: Vec<Line> = if let Some(c) = explained {
        explain(c, width, theme)
    } else if compact {
        let mut fields = vec![vec![Span::styled(format!("{noun}s "), theme.title())]];
        for c in &items {
            let (mark, style) = if c.holds {
                ("✔", theme.good())
            } else {
                ("✘", theme.bad())
            };
            fields[0].push(Span::styled(format!("{mark}{} ", c.number), style));
        }
        fields.push(vec![Span::styled(" 1–5 explain", theme.dim())]);
        vec![super::fields(fields, width)]
    } else {
        full_conditions(&items, theme, width, rows.saturating_sub(verdict_rows))
    };
    // Too short for both: the verdict leads, and the conditions' line follows if it fits.
    if compact && explained.is_none() && 1 + verdict_rows > rows {
        let conditions = std::mem::take(&mut lines);
        push_verdict(&mut lines, snap, width, theme);
        lines.extend(conditions);
    } else {
        push_verdict(&mut lines, snap, width, theme);
    }
    if explained.is_none() && !compact && lines.len() < rows {
        lines.push(Line::styled(format!("1–5 explain a {noun}"), theme.dim()));
    }
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("invariant", theme)),
        area,
    );
}

/// One condition explained, alone: in presenter mode, where the verdict stands above it in
/// full and a repeat of it would be cut.
pub fn render_explained(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    explained: Condition,
    theme: &Theme,
) {
    let width = area.width.saturating_sub(2) as usize;
    let (_, items) = items(snap);
    let Some(c) = items.iter().find(|c| c.number == explained.number()) else {
        return;
    };
    let mut lines = explain(c, width, theme);
    if lines.len() < area.height.saturating_sub(2) as usize {
        lines.push(Line::styled(
            format!("{} again closes this", explained.number()),
            theme.dim(),
        ));
    }
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("invariant", theme)),
        area,
    );
}

/// Rows (borders included) the compact panel needs at `width` to show the conditions' line and
/// the whole verdict: counts, typed rejections and sentence.
pub fn rows_wanted(snap: &Snapshot, width: u16, theme: &Theme) -> u16 {
    let rows = verdict_rows(snap, usize::from(width.saturating_sub(2)), theme);
    u16::try_from(rows + 3).unwrap_or(u16::MAX)
}

/// Rows the verdict takes at `width`, counted as the paragraph will wrap them: by words.
fn verdict_rows(snap: &Snapshot, width: usize, theme: &Theme) -> usize {
    let mut verdict = Vec::new();
    push_verdict(&mut verdict, snap, width, theme);
    verdict
        .iter()
        .map(|l| {
            let text: String = l.spans.iter().map(|s| s.content.as_ref()).collect();
            wrap_words(&text, width).len().max(1)
        })
        .sum()
}

/// One condition, explained: its title, what it means, and why it holds or not in this run.
fn explain(c: &Item, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let (mark, style) = if c.holds {
        ("✔ holds", theme.good())
    } else {
        ("✘ broken", theme.bad())
    };
    let mut lines = vec![Line::styled(
        format!("{mark} · {} {}", c.number, c.title),
        style,
    )];
    let mut said = |label: &str, text: &str| {
        for (i, row) in wrap_words(&format!("{label}{text}"), width)
            .into_iter()
            .enumerate()
        {
            lines.push(Line::styled(
                row,
                if i == 0 { theme.text() } else { theme.dim() },
            ));
        }
    };
    said("means: ", c.meaning);
    if !c.note.is_empty() {
        said("here: ", &c.note);
    }
    lines
}

/// The conditions in `budget` rows: each with its mark, number and title, and why it holds or
/// not — beside the title when it fits, else wrapped beneath it, never cut mid-sentence. When
/// the notes do not all fit, the broken conditions keep theirs (they explain the verdict); when
/// even those do not, the titles alone.
fn full_conditions<'a>(
    items: &[Item],
    theme: &Theme,
    width: usize,
    budget: usize,
) -> Vec<Line<'a>> {
    // Most said first: every note and each broken condition's meaning; then less, until the
    // layout fits.
    let layouts = [(true, true), (true, false), (false, true), (false, false)].map(
        |(all_notes, meanings)| {
            let mut lines = Vec::new();
            for c in items {
                let (mark, style) = if c.holds {
                    ("✔", theme.good())
                } else {
                    ("✘", theme.bad())
                };
                let head = format!("{mark} {} {}", c.number, c.title);
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
                if meanings && !c.holds {
                    for part in
                        wrap_words(&format!("means: {}", c.meaning), width.saturating_sub(4))
                    {
                        lines.push(Line::styled(format!("    {part}"), theme.dim()));
                    }
                }
            }
            lines
        },
    );
    if let Some(fits) = layouts.into_iter().find(|l| l.len() <= budget) {
        fits
    } else {
        items
            .iter()
            .map(|c| {
                let (mark, style) = if c.holds {
                    ("✔", theme.good())
                } else {
                    ("✘", theme.bad())
                };
                Line::styled(format!("{mark} {} {}", c.number, c.title), style)
            })
            .collect()
    }
}

/// The verdict, the typed rejections, and the leading anomaly's sentence.
fn push_verdict(lines: &mut Vec<Line<'_>>, snap: &Snapshot, width: usize, theme: &Theme) {
    // A count never wraps away from its kind: the line breaks between `KIND ×n` fields.
    lines.extend(super::wrap_fields(verdict_fields(snap, theme), width));
    push_rejections_and_headline(lines, snap, width, theme);
}

/// The verdict's words, `verdict FORK ×1 · DUPLICATE ×3` (or `CLEAN`, `so far · N open`), one
/// field per kind so a line breaks between them: the invariant panel's, and the one line each
/// lab keeps when three are too many for the terminal.
pub(crate) fn verdict_fields(snap: &Snapshot, theme: &Theme) -> Vec<Vec<Span<'static>>> {
    let mut fields = verdict_words(snap, |tone| match tone {
        Tone::Clean => theme.verdict(true),
        Tone::Violation => theme.verdict(false),
        Tone::Told | Tone::SoFar => theme.warn(),
    });
    if let Some(first) = fields.first_mut() {
        first.insert(0, Span::styled("verdict ", theme.title()));
    }
    fields
}

/// How one of the verdict's words reads: each view styles it its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tone {
    Clean,
    Violation,
    /// Undelivered, and the client was told so.
    Told,
    /// `so far · N open`: something owed is still on its way.
    SoFar,
}

/// The verdict's words, one field per kind so a line breaks between them (`×1` never wraps
/// away from its word): `CLEAN` and, while something owed is on its way, ` so far · N open`;
/// or `FORK ×1`, ` · DUPLICATE ×3`, an undelivered kind the client was told of saying how.
/// Every view that says the verdict in words says these, styled by `style`.
pub(crate) fn verdict_words(
    snap: &Snapshot,
    style: impl Fn(Tone) -> Style,
) -> Vec<Vec<Span<'static>>> {
    let verdict = &snap.view.verdict;
    if verdict.clean {
        let mut fields = vec![vec![Span::styled("CLEAN", style(Tone::Clean))]];
        // Clean only so far while something owed is on its way: the checker's count.
        if verdict.open > 0 {
            fields.push(vec![Span::styled(
                format!(" so far · {} open", verdict.open),
                style(Tone::SoFar),
            )]);
        }
        return fields;
    }
    verdict
        .counts
        .iter()
        .enumerate()
        .map(|(i, (kind, n))| {
            let sep = if i == 0 { "" } else { " · " };
            // Told is not silent: said with how the client learned.
            let (text, tone) = match (kind, verdict.told) {
                (AnomalyKind::Undelivered, Some(told)) => {
                    (format!("{} ×{n} (told: {told})", short(*kind)), Tone::Told)
                }
                _ => (format!("{} ×{n}", short(*kind)), Tone::Violation),
            };
            vec![Span::raw(sep), Span::styled(text, style(tone))]
        })
        .collect()
}

fn push_rejections_and_headline(
    lines: &mut Vec<Line<'_>>,
    snap: &Snapshot,
    width: usize,
    theme: &Theme,
) {
    let verdict = &snap.view.verdict;
    // The typed rejections are the fenced story's evidence: name them before the sentence.
    let rejected = &snap.view.counters.resumes_rejected;
    if !rejected.is_empty() {
        let mut fields = vec![vec![Span::styled("typed rejections ", theme.title())]];
        for (i, (reason, n)) in rejected.iter().enumerate() {
            let sep = if i == 0 { "" } else { " · " };
            let field = Span::styled(
                format!("{sep}{} {reason} ×{n}", reason.http_status()),
                theme.warn(),
            );
            if i == 0 {
                fields[0].push(field);
            } else {
                fields.push(vec![field]);
            }
        }
        lines.extend(super::wrap_fields(fields, width));
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
        AnomalyKind::CallLost => "CALL LOST",
        AnomalyKind::ReusedId => "REUSED ID",
        AnomalyKind::CursorDrift => "DRIFT",
        AnomalyKind::Undelivered => "UNDELIVERED",
        AnomalyKind::TwoRunners => "TWO RUNNERS",
        AnomalyKind::EffectTwice => "RE-APPLIED",
        AnomalyKind::TerminalTwice => "ENDED TWICE",
        AnomalyKind::StaleRead => "STALE READ",
        AnomalyKind::OrphanTask => "ORPHAN TASK",
        AnomalyKind::CutHalfway => "CUT HALFWAY",
        AnomalyKind::TaskLost => "TASK LOST",
    }
}
