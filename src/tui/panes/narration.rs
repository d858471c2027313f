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
    // A finished script leaves its lab frozen (scripted time): say how to get a live one.
    let next = if n.finished || n.error.is_some() {
        "  R returns to a live lab · p picks another scenario"
    } else {
        "  p picks another scenario"
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("step {}/{}  ", n.done, n.total), theme.key()),
        state,
        Span::styled(next, theme.dim()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn screen(n: &Narration) -> String {
        let mut terminal = Terminal::new(TestBackend::new(100, HEIGHT)).unwrap();
        let theme = Theme::from_env();
        terminal.draw(|f| render(f, f.area(), n, &theme)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        buffer.content.iter().map(|c| c.symbol()).collect()
    }

    #[test]
    fn a_finished_scenario_says_how_to_get_a_live_lab() {
        let playing = Narration {
            name: "x".into(),
            total: 3,
            done: 1,
            ..Narration::default()
        };
        assert!(!screen(&playing).contains("live lab"));
        let finished = Narration {
            done: 3,
            finished: true,
            ..playing
        };
        assert!(screen(&finished).contains("R returns to a live lab"));
    }
}
