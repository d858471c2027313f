//! The help overlay: every key, and what the screen shows.

use super::block;
use crate::tui::keys::BINDINGS;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

pub fn render(frame: &mut Frame, area: Rect, theme: &Theme) {
    let [popup] = Layout::horizontal([Constraint::Max(78)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::vertical([Constraint::Max(30)])
        .flex(Flex::Center)
        .areas(popup);
    let mut lines = vec![
        Line::styled(
            "forkscope — MCP Streamable HTTP 2025-11-25 stream resumption",
            theme.title(),
        ),
        Line::raw(""),
    ];
    for (key, _, what) in BINDINGS {
        lines.push(Line::from(vec![
            Span::styled(format!("  {key:<6}"), theme.key()),
            Span::raw(what),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "The seed incident: press n (naive), let a few events arrive, then t and d. \
         Watch the orphan keep receiving (red ●) and the client apply duplicates (red ◆). \
         Press n again and repeat: the fenced server answers 428 missing_token and nothing forks.",
        theme.dim(),
    ));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("help · ? or Esc to close", theme)),
        popup,
    );
}
