//! The key line at the bottom, or a status message.

use crate::tui::keys::FOOTER;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

pub fn render(frame: &mut Frame, area: Rect, status: Option<&str>, theme: &Theme) {
    let mut spans = Vec::new();
    if let Some(status) = status {
        spans.push(Span::styled(format!(" {status} "), theme.warn()));
        spans.push(Span::raw(" "));
    }
    for (key, what) in FOOTER {
        spans.push(Span::styled(format!(" {key}"), theme.key()));
        spans.push(Span::styled(format!(" {what} "), theme.dim()));
    }
    frame.render_widget(Line::from(spans), area);
}
