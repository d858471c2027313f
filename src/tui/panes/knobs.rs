//! The knobs card: each setting, what the labs run with and what it is turned to, whether it
//! applies live or restarts the labs, and condition 5 as the edited values stand.

use super::card;
use crate::tui::knobs::{Knob, Knobs};
use crate::tui::theme::Theme;
use forkscope_core::Policy;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use strum::VariantArray as _;

pub fn render(frame: &mut Frame, area: Rect, knobs: &Knobs, policies: &[Policy], theme: &Theme) {
    let [popup] = Layout::horizontal([Constraint::Max(78)])
        .flex(Flex::Center)
        .areas(area);
    let mut lines = Vec::new();
    for (i, knob) in Knob::VARIANTS.iter().copied().enumerate() {
        let selected = i == knobs.selected;
        let (now, to) = (knobs.running.shown(knob), knobs.edited.shown(knob));
        let value = if now == to {
            Span::styled(format!("{now:>14}"), theme.text())
        } else {
            Span::styled(format!("{now:>6} → {to:<6}"), theme.accent())
        };
        lines.push(Line::from(vec![
            Span::styled(if selected { "▸ " } else { "  " }, theme.key()),
            Span::styled(
                format!("{:<34}", knob.label()),
                if selected {
                    theme.title()
                } else {
                    theme.text()
                },
            ),
            value,
            Span::styled(
                if knob.live() {
                    "  live"
                } else {
                    "  ↻ restarts"
                },
                theme.dim(),
            ),
        ]));
    }
    lines.push(Line::raw(""));
    let c = &knobs.edited.config;
    if knobs.condition_five_holds() {
        lines.push(Line::styled(
            format!(
                "✔ condition 5: grace {} ms < retry budget {} ms",
                c.grace_ms, c.retry.budget_ms
            ),
            theme.good(),
        ));
    } else {
        let fenced = policies.contains(&Policy::Fenced);
        lines.push(Line::styled(
            format!(
                "✘ condition 5: grace {} ≥ retry budget {} ms — {}",
                c.grace_ms,
                c.retry.budget_ms,
                if fenced {
                    "fenced refuses it"
                } else {
                    "naive runs it anyway (the lesson)"
                }
            ),
            theme.bad(),
        ));
    }
    if let Some(why) = &knobs.refused {
        lines.push(Line::styled(why.clone(), theme.bad()));
    }
    let changed = knobs.changed();
    lines.push(Line::styled(
        if knobs.refused.is_some() {
            "turn a value, or Esc to leave the lab as it is".to_owned()
        } else if knobs.applied {
            "✓ applied · Esc closes".to_owned()
        } else if changed.is_empty() {
            "nothing changed yet".to_owned()
        } else if changed.iter().any(|k| !k.live()) {
            "Enter restarts the labs with these settings".to_owned()
        } else {
            "Enter turns them now, on the running labs".to_owned()
        },
        theme.dim(),
    ));
    card(
        frame,
        popup,
        lines,
        "knobs · ↑↓ choose · ←→ turn · Enter apply · Esc close",
        theme,
    );
}
