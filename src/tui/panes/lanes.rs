//! Stream lanes: events over lab time, one lane per stream, the client's deliveries beneath.
//! A fork shows as two lanes receiving at once with red emits on the orphan; a duplicate as a
//! red ◆ on the client lane.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::history::{Entry, Record};
use forkscope_core::{SessionId, StreamId, StreamKind};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Lab milliseconds one column covers.
pub const MS_PER_COLUMN: u64 = 100;
const LABEL: usize = 8;
const MAX_STREAM_LANES: usize = 4;

/// How bad a mark is; the worst one in a column wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Severity {
    Info,
    Event,
    Warn,
    Violation,
}

#[derive(Clone, Copy, Debug)]
struct Mark {
    glyph: char,
    severity: Severity,
    stream: Option<StreamId>,
}

#[derive(Debug, Default)]
struct Lanes {
    streams: BTreeMap<StreamId, Vec<Option<Mark>>>,
    client: Vec<Option<Mark>>,
}

fn put(lane: &mut [Option<Mark>], column: usize, mark: Mark) {
    if let Some(slot) = lane.get_mut(column)
        && slot.is_none_or(|m| m.severity <= mark.severity)
    {
        *slot = Some(mark);
    }
}

/// Builds the lanes of `session` for the `columns` columns ending at `now_ms`.
fn build(entries: &[Entry], session: Option<SessionId>, now_ms: u64, columns: usize) -> Lanes {
    let start = now_ms.saturating_sub(columns as u64 * MS_PER_COLUMN);
    let mut lanes = Lanes {
        client: vec![None; columns],
        ..Lanes::default()
    };
    // The standalone stream each session last attached: the one the client is bound to. A tool
    // call's stream is attached beside it, never instead of it.
    let mut bound: HashMap<SessionId, StreamId> = HashMap::new();
    let mut requests: HashSet<(SessionId, StreamId)> = HashSet::new();
    let mut applied: HashSet<Arc<str>> = HashSet::new();
    let column = |at: u64| -> Option<usize> {
        (at >= start)
            .then(|| (((at - start) / MS_PER_COLUMN) as usize).min(columns.saturating_sub(1)))
    };
    for entry in entries {
        let at = column(entry.at.as_millis());
        let ours = |s: &SessionId| Some(*s) == session;
        match &entry.record {
            Record::StreamOpened {
                session: s,
                stream,
                stream_kind: StreamKind::Request,
                ..
            } => {
                requests.insert((*s, *stream));
            }
            Record::ResumeAccepted {
                session: s, stream, ..
            } if ours(s) => {
                if let Some(c) = at {
                    lane(
                        &mut lanes,
                        *stream,
                        columns,
                        c,
                        Mark {
                            glyph: '↺',
                            severity: Severity::Info,
                            stream: Some(*stream),
                        },
                    );
                }
            }
            Record::Attached {
                session: s, stream, ..
            } => {
                if !requests.contains(&(*s, *stream)) {
                    bound.insert(*s, *stream);
                }
                if ours(s)
                    && let Some(c) = at
                {
                    lane(
                        &mut lanes,
                        *stream,
                        columns,
                        c,
                        Mark {
                            glyph: '┣',
                            severity: Severity::Info,
                            stream: Some(*stream),
                        },
                    );
                }
            }
            Record::Emitted {
                session: s,
                stream,
                copied,
                ..
            } if ours(s) => {
                let orphan = bound.get(s).is_some_and(|b| b != stream)
                    && !copied
                    && !requests.contains(&(*s, *stream));
                let mark = match (orphan, copied) {
                    (true, _) => Mark {
                        glyph: '◉',
                        severity: Severity::Violation,
                        stream: Some(*stream),
                    },
                    (_, true) => Mark {
                        glyph: '○',
                        severity: Severity::Warn,
                        stream: Some(*stream),
                    },
                    _ => Mark {
                        glyph: '●',
                        severity: Severity::Event,
                        stream: Some(*stream),
                    },
                };
                if let Some(c) = at {
                    lane(&mut lanes, *stream, columns, c, mark);
                }
            }
            Record::LateEmitRefused {
                session: s, stream, ..
            } if ours(s) => {
                if let Some(c) = at {
                    lane(
                        &mut lanes,
                        *stream,
                        columns,
                        c,
                        Mark {
                            glyph: '×',
                            severity: Severity::Warn,
                            stream: None,
                        },
                    );
                }
            }
            Record::Fenced { session: s, stream } if ours(s) => {
                if let Some(c) = at {
                    lane(
                        &mut lanes,
                        *stream,
                        columns,
                        c,
                        Mark {
                            glyph: '┃',
                            severity: Severity::Warn,
                            stream: None,
                        },
                    );
                }
            }
            Record::Orphaned {
                session: s, stream, ..
            } if ours(s) => {
                if let Some(c) = at {
                    lane(
                        &mut lanes,
                        *stream,
                        columns,
                        c,
                        Mark {
                            glyph: '╎',
                            severity: Severity::Warn,
                            stream: None,
                        },
                    );
                }
            }
            Record::Delivered {
                event,
                key,
                applied: was_applied,
                ..
            } => {
                let duplicate = *was_applied && !applied.insert(key.clone());
                let mark = match (was_applied, duplicate) {
                    (_, true) => Mark {
                        glyph: '◆',
                        severity: Severity::Violation,
                        stream: None,
                    },
                    (true, false) => Mark {
                        glyph: '▲',
                        severity: Severity::Event,
                        stream: Some(event.stream),
                    },
                    (false, _) => Mark {
                        glyph: '·',
                        severity: Severity::Info,
                        stream: None,
                    },
                };
                if let Some(c) = at {
                    put(&mut lanes.client, c, mark);
                }
            }
            // The client's own refusals show even after it moved to a new session.
            Record::ResumeRejected { .. } => {
                if let Some(c) = at {
                    put(
                        &mut lanes.client,
                        c,
                        Mark {
                            glyph: '✗',
                            severity: Severity::Warn,
                            stream: None,
                        },
                    );
                }
            }
            Record::ResumeAccepted { session: s, .. } if ours(s) => {
                if let Some(c) = at {
                    put(
                        &mut lanes.client,
                        c,
                        Mark {
                            glyph: '↺',
                            severity: Severity::Info,
                            stream: None,
                        },
                    );
                }
            }
            _ => {}
        }
    }
    lanes
}

fn lane(lanes: &mut Lanes, stream: StreamId, columns: usize, column: usize, mark: Mark) {
    put(
        lanes
            .streams
            .entry(stream)
            .or_insert_with(|| vec![None; columns]),
        column,
        mark,
    );
}

fn styled(mark: Option<Mark>, theme: &Theme) -> Span<'static> {
    match mark {
        None => Span::styled("·", theme.border()),
        Some(m) => {
            let style: Style = match m.severity {
                Severity::Violation => theme.bad(),
                Severity::Warn => theme.warn(),
                Severity::Info => theme.dim(),
                Severity::Event => m.stream.map_or(theme.good(), |s| theme.stream(s.0)),
            };
            Span::styled(m.glyph.to_string(), style)
        }
    }
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let columns = (area.width as usize).saturating_sub(LABEL + 2).max(1);
    let session = snap.view.client.as_ref().and_then(|c| c.session);
    let lanes = build(&snap.recent, session, snap.view.at.as_millis(), columns);
    let inner = (area.height as usize).saturating_sub(2);
    let room = inner.saturating_sub(1).clamp(1, MAX_STREAM_LANES);
    let legend = inner > room.min(lanes.streams.len().max(1)) + 1;
    let mut lines = Vec::new();
    // Lanes with a violation first, then the newest; shown in stream order.
    let mut shown: Vec<_> = lanes.streams.iter().collect();
    let violates = |marks: &Vec<Option<Mark>>| {
        marks
            .iter()
            .flatten()
            .any(|m| m.severity == Severity::Violation)
    };
    shown.sort_by_key(|(id, marks)| (std::cmp::Reverse(violates(marks)), std::cmp::Reverse(**id)));
    shown.truncate(room);
    shown.sort_by_key(|(id, _)| **id);
    for (stream, marks) in shown {
        let mut spans = vec![Span::styled(
            format!("{:<width$}", stream.to_string(), width = LABEL),
            theme.stream(stream.0),
        )];
        spans.extend(marks.iter().map(|m| styled(*m, theme)));
        lines.push(Line::from(spans));
    }
    if lanes.streams.is_empty() {
        lines.push(Line::styled("no events yet", theme.dim()));
    }
    let mut client = vec![Span::styled(
        format!("{:<width$}", "client", width = LABEL),
        theme.title(),
    )];
    client.extend(lanes.client.iter().map(|m| styled(*m, theme)));
    lines.push(Line::from(client));
    let window = columns as u64 * MS_PER_COLUMN / 1000;
    if legend {
        lines.push(Line::styled(
        format!("{:<width$}← {window} s · ◉ orphan emit ◆ duplicate ✗ rejected ● emit ▲ applied ○ copied ↺ resumed × refused ┃ fenced ╎ orphaned", "", width = LABEL),
        theme.dim(),
    ));
    }
    frame.render_widget(Paragraph::new(lines).block(block("lanes", theme)), area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabConfig, Policy};

    fn glyphs(lane: &[Option<Mark>]) -> String {
        lane.iter().map(|m| m.map_or('.', |m| m.glyph)).collect()
    }

    #[test]
    fn a_naive_fork_paints_orphan_emits_and_duplicates_red() {
        let mut sim = Sim::new(LabConfig::default(), Policy::Naive, 1).unwrap();
        sim.start();
        sim.emit_background();
        sim.deliver_all();
        sim.advance(200);
        sim.drop_connection();
        sim.strip_token();
        sim.reconnect(true);
        sim.deliver_all();
        sim.advance(200);
        sim.emit_background();
        let entries: Vec<Entry> = sim.history().recent().iter().cloned().collect();
        let lanes = build(&entries, sim.session(), sim.now().as_millis(), 5);
        let s1 = &lanes.streams[&StreamId(1)];
        assert!(
            s1.iter()
                .flatten()
                .any(|m| m.severity == Severity::Violation),
            "{}",
            glyphs(s1)
        );
        assert!(
            lanes.client.iter().flatten().any(|m| m.glyph == '◆'),
            "{}",
            glyphs(&lanes.client)
        );
    }
}
