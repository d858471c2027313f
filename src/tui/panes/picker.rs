//! The scenario picker: the files in `scenarios/`, each with what it teaches.

use super::block;
use crate::scenario::ScenarioError;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct PickerView {
    /// File name, and its name or the error that keeps it from loading.
    pub entries: Vec<(String, Result<String, Arc<ScenarioError>>)>,
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
    // One row per scenario: a long name is cut, not wrapped back to the first column.
    let room = usize::from(popup.width.saturating_sub(2)).saturating_sub(2);
    let fit = |text: String| {
        if text.chars().count() <= room {
            return text;
        }
        let mut cut: String = text.chars().take(room.saturating_sub(1)).collect();
        cut.push('…');
        cut
    };
    for (i, (file, name)) in picker.entries.iter().enumerate() {
        let marker = if i == picker.selected { "▶ " } else { "  " };
        let (text, style) = match name {
            Ok(name) => (
                fit(format!("{file:<34} {name}")),
                if i == picker.selected {
                    theme.key()
                } else {
                    theme.text()
                },
            ),
            Err(e) => (fit(format!("{file:<34} ✘ {e}")), theme.bad()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    #[test]
    fn a_long_title_is_cut_not_wrapped_to_the_first_column() {
        let picker = PickerView {
            entries: vec![
                (
                    "grace-exceeds-budget.toml".into(),
                    Ok("A grace window as long as the client's retry budget, which condition 5 forbids, refused before it starts".into()),
                ),
                ("seed-incident.toml".into(), Ok("The seed incident".into())),
            ],
            selected: 0,
            teaches: None,
        };
        let mut terminal = Terminal::new(TestBackend::new(80, 12)).unwrap();
        let theme = Theme { color: false };
        terminal
            .draw(|f| render(f, f.area(), &picker, &theme))
            .unwrap();
        let rows: Vec<String> = (0..12)
            .map(|y| {
                (0..80)
                    .map(|x| terminal.backend().buffer()[(x, y)].symbol().to_owned())
                    .collect()
            })
            .collect();
        // The second entry is on the row right after the first: nothing wrapped between.
        let first = rows
            .iter()
            .position(|r| r.contains("grace-exceeds"))
            .unwrap();
        assert!(rows[first + 1].contains("seed-incident.toml"), "{rows:#?}");
        assert!(rows[first].contains('…'), "{rows:#?}");
    }
}
