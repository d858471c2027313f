//! The log pane, fed by the tracing ring.

use super::block;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use tracing::Level;

/// `travelling`: the screen shows a past moment, but the log is the present's (it has no lab
/// time to rewind by), so its title says so.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    log: &[(Level, String)],
    travelling: bool,
    theme: &Theme,
) {
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
    let title = if travelling {
        "log · live, not the moment shown"
    } else {
        "log"
    };
    frame.render_widget(Paragraph::new(lines).block(block(title, theme)), area);
}
