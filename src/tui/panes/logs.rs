//! The log pane, fed by the tracing ring.

use super::block;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use tracing::Level;

pub fn render(frame: &mut Frame, area: Rect, log: &[(Level, String)], theme: &Theme) {
    let room = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = log
        .iter()
        .skip(log.len().saturating_sub(room))
        .map(|(level, line)| {
            let style = match *level {
                Level::ERROR => theme.bad(),
                Level::WARN => theme.warn(),
                _ => theme.dim(),
            };
            Line::from(vec![
                Span::styled(format!("{:<5} ", level.as_str()), style),
                Span::raw(line.clone()),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block("log", theme)), area);
}
