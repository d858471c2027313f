//! One file per pane. Each renders from a [`crate::lab::Snapshot`] (pure data), so the whole
//! screen can be drawn into a test backend from a deterministic snapshot.

pub mod client;
pub mod event_card;
pub mod evidence;
pub mod exchanges;
pub mod footer;
pub mod header;
pub mod help;
pub mod invariant;
pub mod knobs;
pub mod lanes;
pub mod logs;
pub mod narration;
pub mod picker;
pub mod presenter;
pub mod proof;
pub mod streams;

use super::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Wrap};

/// A bordered pane with a title.
pub fn block<'a>(title: &'a str, theme: &Theme) -> Block<'a> {
    Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(theme.border())
        .title(Span::styled(format!(" {title} "), theme.title()))
}

/// A card over `area` (already narrowed to its width): as tall as its wrapped `lines`, centred
/// vertically, drawn over what is beneath.
pub fn card(frame: &mut Frame, area: Rect, lines: Vec<Line>, title: &str, theme: &Theme) {
    let inner = usize::from(area.width.saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let height = u16::try_from(rows + 2).unwrap_or(u16::MAX);
    let [area] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block(title, theme)),
        area,
    );
}

/// An event id as a person reads it: a keyed id's token cut to a few digits (`s1-8.e698…`).
pub fn short_id(id: &str) -> String {
    match id.split_once('.') {
        Some((scoped, token)) if token.len() > 4 => format!("{scoped}.{}…", &token[..4]),
        _ => id.to_owned(),
    }
}

/// `3.2 s` from milliseconds.
pub fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// A text bar `▇▇▇▁▁▁` of `width` cells filled to `ratio` (clamped to 0..=1).
pub fn bar(ratio: f64, width: usize) -> String {
    let filled = (ratio.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!(
        "{}{}",
        "▇".repeat(filled),
        "▁".repeat(width - filled.min(width))
    )
}
