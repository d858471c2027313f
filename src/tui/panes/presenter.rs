//! Presenter mode's big verdict, and the card that hides it while a room predicts.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

/// Rows the big verdict takes.
pub const HEIGHT: u16 = 5;

/// The verdict, large: the word on a coloured band, its sentence beneath.
pub fn render_verdict(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let verdict = &snap.view.verdict;
    let band = format!("  {}  ", super::invariant::summary(snap));
    let lines = vec![
        Line::from(Span::styled(
            band,
            theme
                .verdict(verdict.clean)
                .add_modifier(Modifier::REVERSED | Modifier::BOLD),
        ))
        .centered(),
        Line::styled(verdict.headline.clone(), theme.text()).centered(),
    ];
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("verdict", theme)),
        area,
    );
}

/// What stands where the verdict will be: the question, and the key that answers it.
pub fn render_hidden(frame: &mut Frame, area: Rect, theme: &Theme) {
    let lines = vec![
        Line::styled(
            "VERDICT HIDDEN",
            theme.accent().add_modifier(Modifier::BOLD),
        )
        .centered(),
        Line::raw("predict: did the session fork? was anything applied twice? or clean?")
            .centered(),
        Line::styled("V reveals", theme.key()).centered(),
    ];
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("verdict · predict, then reveal", theme)),
        area,
    );
}
