//! The key line at the bottom, or a status message.

use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// `keys`: the lab's key line ([`crate::tui::keys::footer`]).
pub fn render(
    frame: &mut Frame,
    area: Rect,
    status: Option<&str>,
    keys: &[(&str, &str)],
    theme: &Theme,
) {
    let mut spans = Vec::new();
    if let Some(status) = status {
        // A message replaces the key list for a few seconds; `?` stays in reach.
        spans.push(Span::styled(" ?", theme.key()));
        spans.push(Span::styled(" help ", theme.dim()));
        // Word by word, so a message too long for the line ends in `…` at a word's end.
        spans.push(Span::raw(" "));
        for word in status.split(' ') {
            spans.push(Span::styled(format!("{word} "), theme.warn()));
        }
        let line = super::clip(Line::from(spans), area.width as usize);
        frame.render_widget(line, area);
        return;
    }
    // As many keys as fit, in order, and always the way out: `q quit` at the end, after a `…`
    // when some were left for the help to list.
    let width = |key: &str, what: &str| key.chars().count() + what.chars().count() + 3;
    let (last, rest) = keys.split_last().expect("the footer lists keys");
    let reserve = width(last.0, last.1) + 2;
    let mut used = 0;
    let mut cut = false;
    for (key, what) in rest {
        if used + width(key, what) + reserve > area.width as usize {
            cut = true;
            break;
        }
        used += width(key, what);
        spans.push(Span::styled(format!(" {key}"), theme.key()));
        spans.push(Span::styled(format!(" {what} "), theme.dim()));
    }
    if cut {
        spans.push(Span::styled(" …", theme.dim()));
    }
    spans.push(Span::styled(format!(" {}", last.0), theme.key()));
    spans.push(Span::styled(format!(" {} ", last.1), theme.dim()));
    frame.render_widget(Line::from(spans), area);
}
