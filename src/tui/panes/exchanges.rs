//! The last HTTP exchanges: method, status, and the headers that matter.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let room = area.height.saturating_sub(2) as usize;
    let mut lines = Vec::new();
    for exchange in snap.exchanges.iter().rev() {
        let status_style = match exchange.status {
            200..=299 => theme.good(),
            409 => theme.warn(),
            _ => theme.bad(),
        };
        let mut header = vec![
            Span::styled(format!("{:>7} ", exchange.at.to_string()), theme.dim()),
            Span::styled(format!("{:<7}", exchange.method), theme.key()),
            Span::styled(format!("{} ", exchange.status), status_style),
            Span::raw(exchange.what.clone()),
        ];
        if exchange.headers.is_empty() {
            header.push(Span::raw(""));
        }
        let mut block_lines = vec![Line::from(header)];
        for (name, value) in &exchange.headers {
            block_lines.push(Line::from(vec![
                Span::raw("          "),
                Span::styled(format!("{name}: "), theme.dim()),
                Span::raw(value.clone()),
            ]));
        }
        if lines.len() + block_lines.len() > room {
            break;
        }
        // Newest first on screen.
        lines.extend(block_lines);
    }
    if lines.is_empty() {
        lines.push(Line::styled("no exchanges yet", theme.dim()));
    }
    frame.render_widget(Paragraph::new(lines).block(block("http", theme)), area);
}
