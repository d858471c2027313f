//! The scenario picker: the files in `scenarios/`, each with what it teaches.

use super::block;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

#[derive(Clone, Debug, Default)]
pub struct PickerView {
    /// File name, and its name or the error that keeps it from loading.
    pub entries: Vec<(String, Result<String, String>)>,
    pub selected: usize,
    pub teaches: Option<String>,
}

pub fn render(frame: &mut Frame, area: Rect, picker: &PickerView, theme: &Theme) {
    let [popup] = Layout::horizontal([Constraint::Max(90)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::vertical([Constraint::Max(24)])
        .flex(Flex::Center)
        .areas(popup);
    let mut lines = Vec::new();
    if picker.entries.is_empty() {
        lines.push(Line::styled(
            "no scenarios found in ./scenarios",
            theme.warn(),
        ));
    }
    for (i, (file, name)) in picker.entries.iter().enumerate() {
        let marker = if i == picker.selected { "▶ " } else { "  " };
        let (text, style) = match name {
            Ok(name) => (
                format!("{file:<34} {name}"),
                if i == picker.selected {
                    theme.key()
                } else {
                    theme.text()
                },
            ),
            Err(e) => (format!("{file:<34} ✘ {e}"), theme.bad()),
        };
        lines.push(Line::from(vec![
            Span::styled(marker, theme.key()),
            Span::styled(text, style),
        ]));
    }
    if let Some(teaches) = &picker.teaches {
        lines.push(Line::raw(""));
        lines.push(Line::styled(teaches.clone(), theme.dim()));
    }
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block(
                "scenarios · ↑↓ choose · Enter play · Esc close",
                theme,
            )),
        popup,
    );
}
