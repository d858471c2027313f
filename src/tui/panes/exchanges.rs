//! The last HTTP exchanges: method, status, and the headers that matter.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::LabTime;
use forkscope_core::history::Record;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Exchanges shown with their headers; older ones get one line each, so more fit.
const DETAILED: usize = 2;

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let room = area.height.saturating_sub(2) as usize;
    let inner = usize::from(area.width.saturating_sub(2));
    let lines_of = |exchange: &crate::lab::Exchange, detailed: bool| {
        let status_style = match exchange.status {
            200..=299 => theme.good(),
            409 => theme.warn(),
            _ => theme.bad(),
        };
        let header = vec![
            Span::styled(format!("{:>7} ", exchange.at.to_string()), theme.dim()),
            Span::styled(format!("{:<7}", exchange.method), theme.key()),
            Span::styled(format!("{} ", exchange.status), status_style),
            // Words, not a value: shortened with `…` rather than left out.
            Span::raw(super::shorten(
                &exchange.what,
                inner.saturating_sub(7 + 1 + 7 + 4),
            )),
        ];
        let mut block_lines = vec![Line::from(header)];
        if detailed {
            for (name, value) in &exchange.headers {
                // A token or cursor is an opaque id: shortened, it says so with `…`.
                let room = inner.saturating_sub(10 + name.chars().count() + 2);
                let value = super::shorten(value, room);
                block_lines.push(Line::from(vec![
                    Span::raw("          "),
                    Span::styled(format!("{name}: "), theme.dim()),
                    Span::raw(value),
                ]));
            }
        }
        block_lines
    };
    let rejected = |e: &&crate::lab::Exchange| e.status >= 400;
    // The newest rejection: the lesson of a fenced run, kept on screen however much follows.
    let last_rejection = snap.exchanges.iter().rev().find(rejected);
    // The server's side of a resume the client cannot see: the old connection it fenced.
    let fences = fences(snap);
    let mut fences = fences.iter().rev().peekable();
    let mut lines = Vec::new();
    let mut shown_rejection = false;
    for (i, exchange) in snap.exchanges.iter().rev().enumerate() {
        // A fence is newer than the exchanges before it (its GET's answer comes after it).
        while let Some((at, said)) = fences.next_if(|(at, _)| *at > exchange.at) {
            if lines.len() < room {
                lines.push(Line::from(vec![
                    Span::styled(format!("{:>7} ", at.to_string()), theme.dim()),
                    Span::styled(format!("┃ {said}"), theme.accent()),
                ]));
            }
        }
        let is_last_rejection = last_rejection.is_some_and(|r| std::ptr::eq(r, exchange));
        let block_lines = lines_of(exchange, i < DETAILED || is_last_rejection);
        // Leave two rows for the rejection while it has not been shown.
        let reserve = if last_rejection.is_some() && !shown_rejection && !is_last_rejection {
            2
        } else {
            0
        };
        if lines.len() + block_lines.len() + reserve > room {
            break;
        }
        // Newest first on screen.
        lines.extend(block_lines);
        shown_rejection |= is_last_rejection;
    }
    if let (Some(rejection), false) = (last_rejection, shown_rejection) {
        let mut block_lines = lines_of(rejection, true);
        block_lines.truncate(room.saturating_sub(lines.len() + 1).max(1));
        if lines.len() < room {
            lines.push(Line::styled("   ⋯ the last rejection:", theme.dim()));
        }
        lines.extend(block_lines);
        lines.truncate(room.max(1));
    }
    if lines.is_empty() {
        lines.push(Line::styled("no exchanges yet", theme.dim()));
    }
    let lines: Vec<Line> = lines.into_iter().map(|l| super::clip(l, inner)).collect();
    frame.render_widget(Paragraph::new(lines).block(block("http", theme)), area);
}

/// Each resume in view that fenced the connection its stream was still on, oldest first:
/// `fenced s1 (was on conn 3)`, at its lab time.
fn fences(snap: &Snapshot) -> Vec<(LabTime, String)> {
    snap.recent
        .iter()
        .filter_map(|e| match &e.record {
            Record::ResumeAccepted {
                stream,
                fenced_connection: Some(c),
                ..
            } => Some((e.at, format!("fenced {stream} (was on conn {})", c.0))),
            _ => None,
        })
        .collect()
}

/// One line for a narrow column (compare mode): the newest exchange, and how many of the
/// run's exchanges were refused.
pub fn summary(snap: &Snapshot, width: usize, theme: &Theme) -> Line<'static> {
    let mut fields = vec![vec![Span::styled("http ", theme.title())]];
    match snap.exchanges.last() {
        None => fields.push(vec![Span::styled("no exchanges yet", theme.dim())]),
        Some(e) => {
            let style = match e.status {
                200..=299 => theme.good(),
                409 => theme.warn(),
                _ => theme.bad(),
            };
            fields.push(vec![
                Span::styled(format!("{} ", e.method), theme.key()),
                Span::styled(e.status.to_string(), style),
            ]);
            fields.push(vec![Span::raw(format!(" {}", e.what))]);
        }
    }
    let refused = snap.exchanges.iter().filter(|e| e.status >= 400).count();
    if refused > 0 {
        fields.insert(
            1,
            vec![Span::styled(format!("{refused} refused · "), theme.warn())],
        );
    }
    super::fields(fields, width)
}
