//! The server's side: the client's session and each of its streams — state, high-water mark,
//! last emit, connections, and an orphan's grace timer as a shrinking bar.

use super::{bar, block, seconds};
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::{StreamKind, StreamState};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let client_session = snap.view.client.as_ref().and_then(|c| c.session);
    let session = snap
        .view
        .sessions
        .iter()
        .find(|s| Some(s.id) == client_session)
        .or_else(|| snap.view.sessions.last());
    let mut lines = Vec::new();
    match session {
        None => lines.push(Line::styled("no session yet", theme.dim())),
        Some(session) => {
            lines.push(Line::from(vec![
                Span::styled("session ", theme.dim()),
                Span::raw(session.short.clone()),
                Span::raw(format!("  counter {}", session.counter)),
            ]));
            let live = session
                .streams
                .iter()
                .filter(|s| s.kind == StreamKind::Standalone && s.state.accepts_emits())
                .count();
            for stream in session
                .streams
                .iter()
                .rev()
                .take(area.height.saturating_sub(3) as usize)
                .rev()
            {
                let marker = if stream.active { "▶" } else { " " };
                let kind = if stream.kind == StreamKind::Standalone {
                    "GET "
                } else {
                    "POST"
                };
                let (state, style) = match stream.state {
                    StreamState::Live => (
                        "live",
                        if live > 1 && stream.kind == StreamKind::Standalone {
                            theme.bad()
                        } else {
                            theme.good()
                        },
                    ),
                    StreamState::Orphaned { .. } => ("orphaned", theme.warn()),
                    StreamState::Fenced { .. } => ("fenced", theme.accent()),
                    // Done, but its events (result included) can still be resumed.
                    StreamState::Finished { .. } => ("finished", theme.good()),
                    StreamState::Closed { .. } => ("closed", theme.dim()),
                };
                let mut spans = vec![
                    Span::styled(format!("{marker} "), theme.key()),
                    Span::styled(
                        format!("{:<4}", stream.id.to_string()),
                        theme.stream(stream.id.0),
                    ),
                    Span::styled(format!("{kind} "), theme.dim()),
                    Span::styled(format!("{state:<9}"), style),
                    Span::raw(format!("hw {:>4} ", stream.high_water)),
                ];
                if let Some(grace) = stream.grace {
                    // Seconds first: a narrow pane drops the bar, not the number.
                    spans.push(Span::styled(
                        format!("grace {}", seconds(grace.remaining_ms)),
                        theme.warn(),
                    ));
                    spans.push(Span::styled(
                        format!(" {}", bar(grace.ratio(), 8)),
                        theme.warn(),
                    ));
                } else if let Some(last) = stream.last_emit {
                    spans.push(Span::styled(format!("last {last}"), theme.dim()));
                }
                if stream.background {
                    spans.push(Span::styled(" ◀ bg", theme.dim()));
                }
                // Why and when its grace window started: its connection closed, its writes
                // stalled (how a NAT drop is noticed), or a naive new stream replaced it.
                if let Some(grace) = stream.grace {
                    spans.push(Span::styled(
                        format!(
                            " · {} {:.1}s",
                            grace.cause.describe(),
                            grace.since.as_millis() as f64 / 1_000.0
                        ),
                        theme.dim(),
                    ));
                }
                lines.push(Line::from(spans));
            }
            if live > 1 {
                lines.push(Line::styled(
                    format!("⚠ {live} live GET streams on one session"),
                    theme.bad(),
                ));
            }
        }
    }
    let others = snap
        .view
        .sessions
        .len()
        .saturating_sub(usize::from(session.is_some()));
    if others > 0 {
        lines.push(Line::styled(
            format!("+{others} other session(s)"),
            theme.dim(),
        ));
    }
    let inner = usize::from(area.width.saturating_sub(2));
    let lines: Vec<Line> = lines.into_iter().map(|l| super::clip(l, inner)).collect();
    frame.render_widget(
        Paragraph::new(lines).block(block("server · streams", theme)),
        area,
    );
}
