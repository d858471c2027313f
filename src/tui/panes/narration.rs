//! The narration pane of a playing scenario: what the current step does and why it matters.

use super::block;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

/// Where a scenario's playback is, for the pane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narration {
    pub name: String,
    pub teaches: String,
    pub total: usize,
    /// Steps already run.
    pub done: usize,
    /// The last step's narration and its line in the file.
    pub said: Option<(usize, String)>,
    pub paused: bool,
    pub finished: bool,
    pub error: Option<String>,
}

pub const HEIGHT: u16 = 4;

pub fn render(frame: &mut Frame, area: Rect, n: &Narration, theme: &Theme) {
    let state = match (&n.error, n.finished, n.paused) {
        (Some(_), ..) => Span::styled("stopped", theme.bad()),
        (None, true, _) => Span::styled("finished", theme.good()),
        (None, false, true) => Span::styled("paused · space plays · s steps", theme.warn()),
        (None, false, false) => Span::styled("playing · space pauses", theme.dim()),
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("step {}/{}  ", n.done, n.total), theme.key()),
        state,
        Span::styled("  p picks another scenario", theme.dim()),
    ])];
    match (&n.error, &n.said) {
        (Some(e), _) => lines.push(Line::styled(e.clone(), theme.bad())),
        (None, Some((line, say))) => lines.push(Line::from(vec![
            Span::styled(format!("line {line}: "), theme.dim()),
            Span::raw(say.clone()),
        ])),
        (None, None) => lines.push(Line::styled(n.teaches.clone(), theme.dim())),
    }
    let title = format!("scenario · {}", n.name);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block(&title, theme)),
        area,
    );
}
