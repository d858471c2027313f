//! The key line at the bottom, or a status message.

use crate::tui::keys::FOOTER;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

pub fn render(frame: &mut Frame, area: Rect, status: Option<&str>, theme: &Theme) {
    let mut spans = Vec::new();
    if let Some(status) = status {
        // A message replaces the key list for a few seconds; `?` stays in reach.
        spans.push(Span::styled(" ?", theme.key()));
        spans.push(Span::styled(" help ", theme.dim()));
        spans.push(Span::styled(format!(" {status}"), theme.warn()));
        frame.render_widget(Line::from(spans), area);
        return;
    }
    for (key, what) in FOOTER {
        spans.push(Span::styled(format!(" {key}"), theme.key()));
        spans.push(Span::styled(format!(" {what} "), theme.dim()));
    }
    frame.render_widget(Line::from(spans), area);
}
