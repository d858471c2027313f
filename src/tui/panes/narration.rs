//! The narration pane of a playing scenario: what the current step does and why it matters.

use super::block;
pub use crate::scenario::narration::Narration;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

/// Rows the pane takes: the border, the progress line, the narration, and one line per lab
/// for what its server decided.
pub const HEIGHT: u16 = 6;

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
    let mut first = vec![
        Span::styled(format!("step {}/{}  ", n.done, n.total), theme.key()),
        state,
    ];
    if let Some(doing) = n.doing.as_ref().filter(|_| !n.finished) {
        first.push(Span::styled(format!(" · {doing}"), theme.dim()));
    }
    first.push(Span::styled(next, theme.dim()));
    let mut lines = vec![Line::from(first)];
    match (&n.error, &n.said) {
        (Some(e), _) => lines.push(Line::styled(e.clone(), theme.bad())),
        (None, Some((_, say))) => lines.push(Line::raw(say.clone())),
        (None, None) => lines.push(Line::styled(n.teaches.clone(), theme.dim())),
    }
    // One line per lab, cut to the width, so neither side's decision pushes the other out.
    let width = usize::from(area.width.saturating_sub(2));
    for (policy, facts) in &n.decided {
        let label = format!("{policy}: ");
        let room = width.saturating_sub(label.chars().count());
        let shown: String = if facts.chars().count() > room {
            let mut cut: String = facts.chars().take(room.saturating_sub(1)).collect();
            cut.push('…');
            cut
        } else {
            facts.clone()
        };
        lines.push(Line::from(vec![
            Span::styled(label, theme.key()),
            Span::styled(shown, theme.dim()),
        ]));
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
