//! The client's side: bound stream identity, cursor, token, retry budget, side effects.

use super::{block, seconds};
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::AnomalyKind;
use forkscope_core::client::Phase;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let Some(client) = &snap.view.client else {
        frame.render_widget(
            Paragraph::new("no client").block(block("client", theme)),
            area,
        );
        return;
    };
    let label = |s: &'static str| Span::styled(format!("{s:<8}"), theme.dim());
    let phase = match client.phase {
        Phase::Idle => Span::styled("idle", theme.dim()),
        Phase::Connected => Span::styled("connected", theme.good()),
        Phase::Reconnecting {
            attempt,
            next_at: Some(at),
            ..
        } => Span::styled(
            format!("reconnecting · attempt {} at {at}", attempt + 1),
            theme.warn(),
        ),
        Phase::Reconnecting {
            attempt,
            next_at: None,
            ..
        } => Span::styled(
            format!("reconnecting · attempt {attempt} in flight"),
            theme.warn(),
        ),
        Phase::GaveUp { at } => Span::styled(format!("gave up at {at}"), theme.bad()),
    };
    let bound = match (&client.bound_stream, client.reconciles) {
        (_, false) => Span::styled("unchecked: assumes continuity", theme.warn()),
        (Some(s), true) => Span::styled(
            format!("{s} (echoed)"),
            theme.stream(s.trim_start_matches('s').parse().unwrap_or(1)),
        ),
        (None, true) => Span::styled("none yet", theme.dim()),
    };
    let token = match (client.has_token, client.will_send_token) {
        (true, true) => Span::styled("✓ held · sent on reconnect", theme.good()),
        (true, false) => Span::styled("✗ will be STRIPPED on the next reconnect", theme.bad()),
        (false, _) => Span::styled("– none", theme.dim()),
    };
    let duplicates = snap.view.verdict.count(AnomalyKind::Duplicate);
    let lines = vec![
        Line::from(vec![
            label("phase"),
            phase,
            Span::styled(
                format!(
                    "  budget {} of {}",
                    seconds(client.budget_left_ms),
                    seconds(snap.view.config.retry.budget_ms)
                ),
                theme.dim(),
            ),
        ]),
        Line::from(vec![
            label("bound"),
            bound,
            Span::styled("  cursor ", theme.dim()),
            Span::raw(client.cursor.clone().unwrap_or_else(|| "–".into())),
        ]),
        Line::from(vec![label("token"), token]),
        Line::from(vec![
            label("applied"),
            Span::raw(client.applied.to_string()),
            Span::styled("  skipped ", theme.dim()),
            Span::raw(client.replays_skipped.to_string()),
            Span::styled("  duplicates ", theme.dim()),
            Span::styled(
                duplicates.to_string(),
                if duplicates > 0 {
                    theme.bad()
                } else {
                    theme.good()
                },
            ),
        ]),
    ];
    frame.render_widget(Paragraph::new(lines).block(block("client", theme)), area);
}
