//! The policy picker (`o`): every policy the lab runs, each with what it is in a line and the
//! threads its quirks come from, so a room can pick the SDK its own server uses.

use super::block;
use crate::tui::theme::Theme;
use forkscope_core::Policy;
use forkscope_core::resume::sdk;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

/// The picker's rows: the policy's name and summary, then (selected) its sources.
pub fn lines(selected: usize, theme: &Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for (i, policy) in Policy::ALL.iter().enumerate() {
        let chosen = i == selected;
        let marker = if chosen { "▶ " } else { "  " };
        let style = if chosen { theme.key() } else { theme.text() };
        lines.push(Line::from(vec![
            Span::styled(marker, theme.key()),
            Span::styled(format!("{:<17}", policy.name()), style),
            Span::styled(forkscope_core::resume::sdk::summary(*policy), style),
        ]));
        if !chosen {
            continue;
        }
        match sdk::quirks(*policy) {
            Some(quirks) => {
                lines.push(Line::styled(format!("    {}", quirks.summary), theme.dim()));
                // The address on a line of its own: a wrapped one would lose its indent.
                for cite in quirks.cites {
                    lines.push(Line::styled(format!("    · {}", cite.quirk), theme.dim()));
                    lines.push(Line::styled(format!("      {}", cite.url), theme.dim()));
                }
            }
            None => lines.push(Line::styled(
                if policy.fences() {
                    "    forkscope's own: the five conditions (docs/dashboard.md, \"The invariant\")"
                } else {
                    "    the seed incident's server (docs: the incident write-up)"
                },
                theme.dim(),
            )),
        }
    }
    lines
}

pub fn render(frame: &mut Frame, area: Rect, selected: usize, theme: &Theme) {
    let [popup] = Layout::horizontal([Constraint::Max(110)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::vertical([Constraint::Max(22)])
        .flex(Flex::Center)
        .areas(popup);
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines(selected, theme))
            .wrap(Wrap { trim: false })
            .block(block(
                "policies · ↑↓ choose · Enter: a fresh lab under it · Esc close",
                theme,
            )),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line]) -> String {
        lines
            .iter()
            .map(|l| {
                l.spans
                    .iter()
                    .map(|s| s.content.as_ref())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_policy_is_listed_and_the_selected_one_shows_its_sources() {
        let theme = Theme { color: false };
        for (i, policy) in Policy::ALL.iter().enumerate() {
            let shown = text(&lines(i, &theme));
            for p in Policy::ALL {
                assert!(shown.contains(p.name()), "{p} in:\n{shown}");
            }
            assert!(shown.contains(&format!("▶ {}", policy.name())), "{shown}");
            if let Some(quirks) = sdk::quirks(*policy) {
                for cite in quirks.cites {
                    assert!(shown.contains(cite.url), "{policy}: {}\n{shown}", cite.url);
                }
            }
        }
    }
}
