//! The watch's lanes: the target server's connections on one arrival axis, each event a mark,
//! the ones that break the rule ✕.

use crate::tui::theme::Theme;
use forkscope_core::probe::{Answer, Connection, End, Item};
use ratatui::text::{Line, Span};

/// One lane per connection on a shared arrival axis: where it opened, each event it received,
/// the marked ones ✕, and how it ended.
pub(super) fn lanes(
    connections: &[Connection],
    marked: &[u64],
    width: u16,
    t: &Theme,
) -> Vec<Line<'static>> {
    let label_width = (usize::from(width) / 3).clamp(8, 34);
    let axis = usize::from(width).saturating_sub(label_width + 3).max(4);
    let last = connections
        .iter()
        .flat_map(|c| {
            c.answer
                .opened()
                .into_iter()
                .chain(c.events.iter().map(|r| r.order))
        })
        .max()
        .unwrap_or(1)
        .max(2);
    let col = |order: u64| ((order.saturating_sub(1)) as usize * (axis - 1)) / (last as usize - 1);
    connections
        .iter()
        .map(|c| {
            let mut label = format!("{} {}", c.label, c.request);
            if label.chars().count() > label_width {
                label = label.chars().take(label_width - 1).collect::<String>() + "…";
            }
            let mut spans = vec![Span::raw(format!("{label:label_width$}  "))];
            let Some(opened) = c.answer.opened() else {
                let said = match &c.answer {
                    Answer::Rejected { status, reason } => {
                        format!("{status} {}", reason.as_deref().unwrap_or(""))
                    }
                    Answer::Json { status, .. } => format!("{status} JSON"),
                    Answer::NoAnswer { why } => why.clone(),
                    Answer::Stream { .. } => String::new(),
                };
                spans.push(Span::styled(said, t.warn()));
                return Line::from(spans);
            };
            // Each cell: 0 nothing, 1 the lane, 2 priming, 3 an event, 4 a marked event.
            let mut cells = vec![0u8; axis];
            let start = col(opened);
            let end = match c.end {
                End::Open => axis - 1,
                _ => c.events.last().map_or(start, |r| col(r.order)),
            };
            for cell in cells.iter_mut().take(end + 1).skip(start) {
                *cell = 1;
            }
            for r in &c.events {
                let at = col(r.order);
                let kind = if marked.contains(&r.order) {
                    4
                } else if r.item == Item::Priming {
                    2
                } else {
                    3
                };
                cells[at] = cells[at].max(kind);
            }
            let mut run = String::new();
            let mut run_kind = 255u8;
            let style_of = |k: u8| match k {
                4 => t.bad(),
                3 => t.accent(),
                _ => t.dim(),
            };
            for &k in &cells {
                if k != run_kind && !run.is_empty() {
                    spans.push(Span::styled(std::mem::take(&mut run), style_of(run_kind)));
                }
                run_kind = k;
                run.push(match k {
                    0 => ' ',
                    1 => '─',
                    2 => '·',
                    3 => '▪',
                    _ => '✕',
                });
            }
            if !run.is_empty() {
                spans.push(Span::styled(run, style_of(run_kind)));
            }
            spans.push(Span::styled(
                match c.end {
                    End::Open => "→",
                    End::DroppedByProbe => "✂",
                    End::ClosedByServer => "┤",
                    End::Broken => "✗",
                },
                t.dim(),
            ));
            Line::from(spans)
        })
        .collect()
}
