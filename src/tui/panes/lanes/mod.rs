//! Stream lanes: events over lab time, one lane per stream, the client's deliveries beneath.
//! A fork shows as two lanes receiving at once with red emits on the orphan; a duplicate as a
//! red ◆ on the client lane — wherever the checker tagged an entry with an anomaly, and only
//! there.
//!
//! Each history entry becomes its marks once, as it arrives ([`marks`]); a frame only places
//! the marks of its time window, so the lanes can scroll over a whole run of 10⁵ events and
//! still draw in well under a millisecond.

mod grid;
mod marks;

use grid::{ForkOffScreen, Grid, build, first_fork_before, window_in_order};
pub use grid::{MS_PER_COLUMN, Zoom, window};
pub use marks::{
    CALL_LOST, CURSOR_BACK, DRIFT, DUPLICATE, EFFECT_TWICE, FOUND_BY_KEY, GAP, LOST, Lane, Mark,
    ORPHAN_EMIT, ORPHAN_TASK, Placed, REUSED_ID, RUNNER_LOST, Row, STEP, Severity, TASK_ENDED,
    TASK_MADE, TWO_RUNNERS, UNDELIVERED, place, place_all,
};

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use crate::tui::weight::Weigh;
use forkscope_core::StreamState;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// The lanes' glyphs and their words, most needed first.
const LEGEND: [(char, &str); 17] = [
    (ORPHAN_EMIT, "orphan emit"),
    (DUPLICATE, "duplicate"),
    ('✗', "rejected"),
    ('●', "emit"),
    ('▲', "applied"),
    ('○', "copied"),
    ('↺', "resumed"),
    ('×', "refused"),
    ('┃', "fenced"),
    ('╎', "orphaned"),
    (LOST, "lost"),
    (CALL_LOST, "call lost"),
    (UNDELIVERED, "undelivered, told"),
    (REUSED_ID, "reused id"),
    (GAP, "gap"),
    (CURSOR_BACK, "cursor back"),
    (DRIFT, "drift"),
];

/// The legend while task lanes are shown: 2026-07-28's glyphs first.
const TASK_LEGEND: [(char, &str); 9] = [
    (TASK_MADE, "task made"),
    (STEP, "step"),
    (TASK_ENDED, "ended"),
    (FOUND_BY_KEY, "found by key"),
    (RUNNER_LOST, "runner lost"),
    (ORPHAN_TASK, "orphan task"),
    (TWO_RUNNERS, "two runners"),
    (EFFECT_TWICE, "re-applied"),
    ('▲', "applied"),
];

const LABEL: usize = 8;
const MAX_STREAM_LANES: usize = 4;
/// 2026-07-28: task lanes shown at most (those with a violation first, then the newest).
const MAX_TASK_LANES: usize = 3;

/// A mark owns nothing on the heap (its place in a `Vec` is counted by the `Vec`).
impl Weigh for Placed {
    fn heap(&self) -> usize {
        0
    }
}

/// What the lanes of one lab draw: its classified marks up to the instant shown.
#[derive(Clone, Copy, Debug)]
pub struct LaneSource<'a> {
    pub placed: &'a [Placed],
    /// The instant shown: the window's right edge.
    pub end_ms: u64,
    pub zoom: Zoom,
    /// The selected mark (index into `placed`), drawn highlighted.
    pub selected: Option<usize>,
    /// Predict, then reveal: violations drawn as plain events until the verdict is revealed.
    pub hide_verdict: bool,
    /// Columns by order of arrival, not lab time: a scripted clock stands still while a
    /// scenario's steps happen, so time would pile the whole story into one column.
    pub in_order: bool,
}

/// Whether the lanes have a task's marks to draw (2026-07-28): they then want rows for task
/// lanes. Without a timeline, what the snapshot carries.
pub fn shows_tasks(snap: &Snapshot, source: Option<LaneSource>) -> bool {
    let is_task = |p: &Placed| matches!(p.row, Row::Task(_));
    match source {
        Some(source) => source.placed.iter().any(is_task),
        None => place_all(&snap.recent).iter().any(is_task),
    }
}

/// Where the lanes were drawn, for the mouse: which row is which lane, and the time scale.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LanesDrawn {
    pub area: Rect,
    /// Screen row → lane.
    pub rows: Vec<(u16, Row)>,
    /// Screen column of the first time column.
    pub first_column: u16,
    pub columns: u16,
    /// The axis: lab milliseconds, or (in order) history entries.
    pub start_ms: u64,
    pub ms_per_column: u64,
    pub in_order: bool,
    /// Tasks with no lane of their own: their marks are drawn on the client's.
    pub on_client: Vec<forkscope_core::TaskId>,
}

impl LanesDrawn {
    /// Whether a mark on `row` is drawn on `lane` (a task without a lane, on the client's).
    pub fn draws_on(&self, row: Row, lane: Row) -> bool {
        row == lane
            || (lane == Row::Client && matches!(row, Row::Task(t) if self.on_client.contains(&t)))
    }

    /// The span of the axis a screen cell covers, and its lane; `None` off the lanes.
    pub fn hit(&self, column: u16, row: u16) -> Option<(Row, u64, u64)> {
        let lane = self.rows.iter().find(|(r, _)| *r == row)?.1;
        let offset = column.checked_sub(self.first_column)?;
        if offset >= self.columns {
            return None;
        }
        let from = self.start_ms + u64::from(offset) * self.ms_per_column;
        Some((lane, from, from + self.ms_per_column))
    }
}

fn styled(cell: Option<(Mark, usize)>, source: &LaneSource, theme: &Theme) -> Span<'static> {
    match cell {
        None => Span::styled("·", theme.border()),
        Some((m, index)) => {
            let mut style: Style = match m.severity {
                Severity::Violation => theme.bad(),
                Severity::Warn => theme.warn(),
                Severity::Info => theme.dim(),
                Severity::Notable => theme.accent(),
                Severity::Event => m.stream.map_or(theme.good(), |s| theme.stream(s.0)),
            };
            if source.selected == Some(index) {
                style = style.add_modifier(Modifier::REVERSED | Modifier::BOLD);
            }
            Span::styled(m.glyph.to_string(), style)
        }
    }
}

/// Writes `◂╳ fork 4.2 s` over the start of the fork's lane, where it is empty (else just
/// `◂╳`): the fork scrolled off the left edge, and this says so and when.
fn point_back(
    cells: &mut [Span<'static>],
    marks: &[Option<(Mark, usize)>],
    fork: ForkOffScreen,
    theme: &Theme,
) {
    let long = format!("◂{ORPHAN_EMIT} fork at {} ", span_words(fork.at_ms));
    let short = format!("◂{ORPHAN_EMIT}");
    let empty = marks.iter().take_while(|m| m.is_none()).count();
    let text = if long.chars().count() <= empty {
        long
    } else {
        short
    };
    for (cell, glyph) in cells.iter_mut().zip(text.chars()) {
        *cell = Span::styled(glyph.to_string(), theme.bad());
    }
}

/// The newest resume in view that fenced its stream's old connection: its column, and
/// `fenced s1 (was on conn 3)`.
fn fence_in_view(lane: Lane, marks: &[Option<(Mark, usize)>]) -> Option<(usize, String)> {
    marks.iter().enumerate().rev().find_map(|(column, m)| {
        let conn = m.and_then(|(m, _)| m.was_on)?;
        Some((
            column,
            format!("fenced {} (was on conn {conn})", lane.stream),
        ))
    })
}

/// The legend's row saying the fence under the resume's column: `↑ fenced s1 (was on conn
/// 3)`, or ending at it (`… ↑`) where the row has no room after it.
fn fence_row(column: usize, said: &str, room: usize) -> Option<String> {
    let after = format!("↑ {said}");
    let before = format!("{said} ↑");
    let at = LABEL + column;
    if at + after.chars().count() <= room {
        return Some(format!("{:at$}{after}", ""));
    }
    let width = before.chars().count();
    (at + 1 >= width && at < room).then(|| format!("{:pad$}{before}", "", pad = at + 1 - width))
}

type Cells = Vec<Option<(Mark, usize)>>;

/// The task lanes shown in `room` rows: those the verdict's leading anomaly names first (the
/// story its sentence tells stays in view), then those with a violation, then the newest (the
/// last to appear in the window), in the order they appeared.
fn shown_tasks<'t>(
    tasks: &'t std::collections::BTreeMap<forkscope_core::TaskId, Cells>,
    room: usize,
    named: &[forkscope_core::TaskId],
) -> Vec<(&'t forkscope_core::TaskId, &'t Cells)> {
    let first_mark = |marks: &Cells| marks.iter().position(Option::is_some).unwrap_or(usize::MAX);
    let violates = |marks: &Cells| {
        marks
            .iter()
            .flatten()
            .any(|(m, _)| m.severity == Severity::Violation)
    };
    let mut shown: Vec<_> = tasks.iter().collect();
    shown.sort_by_key(|(task, marks)| {
        (
            !named.contains(task),
            std::cmp::Reverse(violates(marks)),
            std::cmp::Reverse(first_mark(marks)),
        )
    });
    shown.truncate(room);
    // Two lanes whose first marks share a column go in the order their tasks were recorded.
    let first_entry = |marks: &Cells| marks.iter().flatten().map(|(_, entry)| *entry).min();
    shown.sort_by_key(|(_, marks)| (first_mark(marks), first_entry(marks)));
    shown
}

/// `4.2 s`, `300 ms`: a window's width as a person reads it.
fn span_words(ms: u64) -> String {
    if ms >= 10_000 {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    source: Option<LaneSource>,
    theme: &Theme,
) -> LanesDrawn {
    // Without a timeline (hand-built snapshots), classify what the snapshot carries.
    let own;
    let source = match source {
        Some(s) => s,
        None => {
            own = place_all(&snap.recent);
            LaneSource {
                placed: &own,
                end_ms: snap.view.at.as_millis(),
                zoom: Zoom::Follow,
                selected: None,
                hide_verdict: false,
                in_order: snap.scripted,
            }
        }
    };
    let columns = (area.width as usize).saturating_sub(LABEL + 2).max(1);
    let session = snap.view.client.as_ref().and_then(|c| c.session);
    let in_order = source.in_order;
    let first = source.placed.first().map(|p| p.coordinate(in_order));
    // No stream keeps a lane open while it is quiet (a lab of tasks): following, the window
    // ends at the last thing that happened once it would show nothing, so the tasks of a run
    // that went quiet stay on screen.
    let open_streams = snap
        .view
        .sessions
        .iter()
        .flat_map(|s| &s.streams)
        .any(|s| matches!(s.state, StreamState::Live | StreamState::Orphaned { .. }));
    let mut quiet_since = None;
    let (start_ms, per) = if in_order {
        // Every entry so far in the width (a scripted run is short), one per column at most.
        let end = source.placed.last().map_or(0, |p| p.entry as u64);
        window_in_order(first, end, columns)
    } else {
        let (start, per) = window(first, source.end_ms, columns, source.zoom);
        let last = source.placed.iter().map(|p| p.at_ms).max();
        match last {
            Some(last) if last < start && !open_streams && source.zoom == Zoom::Follow => {
                quiet_since = Some(last);
                window(first, last, columns, source.zoom)
            }
            _ => (start, per),
        }
    };
    let grid = Grid {
        start: start_ms,
        per,
        in_order,
        hide_verdict: source.hide_verdict,
        selected: source.selected,
    };
    let mut lanes = build(source.placed, session, grid, columns);
    // A stream that is live (or orphaned, still taking emits) keeps its lane while it is quiet:
    // a lane that vanished would read as a stream that ended.
    let open = snap
        .view
        .sessions
        .iter()
        .filter(|s| Some(s.id) == session)
        .flat_map(|s| &s.streams)
        .filter(|s| matches!(s.state, StreamState::Live | StreamState::Orphaned { .. }));
    for stream in open {
        lanes
            .streams
            .entry(Lane::of(stream.id))
            .or_insert_with(|| vec![None; columns]);
    }
    // In a lab of replicas, likewise every delivery a replica runs, the client's or an orphan's.
    let held = snap
        .replicas
        .iter()
        .flat_map(|r| &r.replicas)
        .flat_map(|r| {
            r.holds.iter().map(|h| Lane {
                stream: h.stream,
                replica: Some(r.id),
            })
        });
    for lane in held {
        lanes
            .streams
            .entry(lane)
            .or_insert_with(|| vec![None; columns]);
    }
    // The fork stays in view: once its first orphan emit has scrolled off the left edge, its
    // lane is kept and says where it went (unless the verdict is hidden).
    let fork = first_fork_before(source.placed, session, start_ms, in_order)
        .filter(|_| !source.hide_verdict);
    if let Some(f) = fork {
        lanes
            .streams
            .entry(f.lane)
            .or_insert_with(|| vec![None; columns]);
    }
    let inner = (area.height as usize).saturating_sub(2);
    // Rows go to the client, then one stream lane, then the task lanes, then more stream lanes,
    // then the legend: a task's lane says more than a quiet stream's or the legend. A task
    // left without a lane draws on the client's, so no mark is lost to a small pane.
    // (A lab of 2026-07-28 alone has no stream: no row is kept for one.)
    let named = snap
        .view
        .verdict
        .first
        .as_ref()
        .map(forkscope_core::history::Anomaly::tasks)
        .unwrap_or_default();
    // The tasks the verdict names outrank a quiet stream's lane: where they would not all fit
    // beside it, it yields its row (and the title says so).
    let named_here = named.iter().filter(|t| lanes.tasks.contains_key(t)).count();
    let quiet_streams = fork.is_none()
        && lanes
            .streams
            .values()
            .flatten()
            .flatten()
            .all(|(m, _)| m.severity != Severity::Violation);
    let streams_yield =
        !lanes.streams.is_empty() && quiet_streams && named_here + 2 > inner && named_here < inner;
    let one_stream =
        usize::from((!lanes.streams.is_empty() && !streams_yield) || lanes.tasks.is_empty());
    let task_room = inner.saturating_sub(1 + one_stream).min(MAX_TASK_LANES);
    let tasks_shown = shown_tasks(&lanes.tasks, task_room, &named);
    // The rows above the tasks: the stream lanes, or `no events yet`.
    let streams_wanted = if lanes.streams.is_empty() {
        usize::from(tasks_shown.is_empty())
    } else {
        lanes.streams.len()
    };
    let room = inner
        .saturating_sub(1 + tasks_shown.len())
        .clamp(usize::from(!streams_yield), MAX_STREAM_LANES);
    let hidden: Vec<_> = lanes
        .tasks
        .iter()
        .filter(|(task, _)| !tasks_shown.iter().any(|(shown, _)| shown == task))
        .map(|(task, cells)| (*task, cells.clone()))
        .collect();
    let on_client: Vec<_> = hidden.iter().map(|(task, _)| *task).collect();
    let on_client_count = on_client.len();
    for (_, cells) in hidden {
        grid::merge(&mut lanes.client, &cells, source.selected);
    }
    let legend = inner > room.min(streams_wanted) + tasks_shown.len() + 1;
    let mut lines = Vec::new();
    let mut rows = Vec::new();
    // Lanes with a violation first, then the newest; shown in stream order.
    let mut shown: Vec<_> = lanes.streams.iter().collect();
    let violates = |id: &Lane, marks: &Vec<Option<(Mark, usize)>>| {
        fork.is_some_and(|f| f.lane == *id)
            || marks
                .iter()
                .flatten()
                .any(|(m, _)| m.severity == Severity::Violation)
    };
    shown.sort_by_key(|(id, marks)| {
        (
            std::cmp::Reverse(violates(id, marks)),
            std::cmp::Reverse(**id),
        )
    });
    shown.truncate(room);
    shown.sort_by_key(|(id, _)| **id);
    let top = area.y + 1;
    // The selected mark's lane is pointed at from its label, and its column from the border
    // below: visible without colour, unlike the highlight alone.
    let holds_selected = |marks: &[Option<(Mark, usize)>]| {
        source
            .selected
            .and_then(|sel| marks.iter().position(|c| c.is_some_and(|(_, i)| i == sel)))
    };
    let mut selected_column = None;
    let mut fence = None;
    let label = |name: String, pointed: bool| {
        let pointer = if pointed { "›" } else { " " };
        format!("{name:<width$}{pointer}", width = LABEL - 1)
    };
    for (lane, marks) in shown {
        let pointed = holds_selected(marks);
        selected_column = selected_column.or(pointed);
        let mut spans = vec![Span::styled(
            label(lane.to_string(), pointed.is_some()),
            theme.stream(lane.stream.0),
        )];
        let mut cells: Vec<Span> = marks.iter().map(|m| styled(*m, &source, theme)).collect();
        // Only while no orphan emit of its lane is in view: then the fork is on screen.
        let in_view = marks.iter().flatten().any(|(m, _)| m.glyph == ORPHAN_EMIT);
        if let Some(f) = fork.filter(|f| f.lane == *lane && !in_view) {
            point_back(&mut cells, marks, f, theme);
        }
        fence = fence_in_view(*lane, marks).or(fence);
        spans.extend(cells);
        rows.push((top + lines.len() as u16, Row::Stream(*lane)));
        lines.push(Line::from(spans));
    }
    if lanes.streams.is_empty() && tasks_shown.is_empty() {
        let none = match snap.protocols {
            forkscope_core::revision::Protocols::Modern => "no task yet",
            _ => "no events yet",
        };
        lines.push(Line::styled(none, theme.dim()));
    }
    for (task, marks) in &tasks_shown {
        let pointed = holds_selected(marks);
        selected_column = selected_column.or(pointed);
        let mut spans = vec![Span::styled(
            label(format!("t{}", task.short()), pointed.is_some()),
            theme.accent(),
        )];
        spans.extend(marks.iter().map(|m| styled(*m, &source, theme)));
        rows.push((top + lines.len() as u16, Row::Task(**task)));
        lines.push(Line::from(spans));
    }
    let pointed = holds_selected(&lanes.client);
    selected_column = selected_column.or(pointed);
    let mut client = vec![Span::styled(
        label("client".to_owned(), pointed.is_some()),
        theme.title(),
    )];
    client.extend(lanes.client.iter().map(|m| styled(*m, &source, theme)));
    rows.push((top + lines.len() as u16, Row::Client));
    lines.push(Line::from(client));
    if legend {
        let quiet = quiet_since.map(|at| format!(" up to {} (quiet since)", span_words(at)));
        let scale = match (in_order, source.zoom) {
            (true, _) => " in order (scripted clock)",
            (false, Zoom::Follow) => quiet.as_deref().unwrap_or(""),
            (false, Zoom::WholeRun) => " (whole run, z)",
        };
        let mut legend = format!(
            "{:<width$}← {}{scale} ·",
            "",
            if in_order {
                format!("{} records", columns as u64 * per)
            } else {
                span_words(columns as u64 * per)
            },
            width = LABEL
        );
        // Whole entries only, as many as fit: a glyph without its word explains nothing.
        let room = usize::from(area.width.saturating_sub(2));
        const MORE: &str = " … ? help";
        // A lab of 2026-07-28 alone has only tasks to draw, from its first frame.
        let modern_only = snap.protocols == forkscope_core::revision::Protocols::Modern;
        let glyphs: &[(char, &str)] = if tasks_shown.is_empty() && !modern_only {
            &LEGEND
        } else {
            &TASK_LEGEND
        };
        for (i, (glyph, word)) in glyphs.iter().enumerate() {
            let entry = format!("{glyph} {word}");
            // Room for this entry, and for the pointer to help unless it is the last.
            let tail = if i + 1 < glyphs.len() {
                MORE.chars().count()
            } else {
                0
            };
            if legend.chars().count() + 1 + entry.chars().count() + tail > room {
                if legend.chars().count() + MORE.chars().count() <= room {
                    legend.push_str(MORE);
                }
                break;
            }
            legend.push(' ');
            legend.push_str(&entry);
        }
        // While a resume that fenced an old connection is in view, the row says so under it.
        let room = usize::from(area.width.saturating_sub(2));
        match fence.and_then(|(column, said)| fence_row(column, &said, room)) {
            Some(row) => lines.push(Line::styled(row, theme.accent())),
            None => lines.push(Line::styled(legend, theme.dim())),
        }
    }
    // Tasks without a lane of their own are said, not silently folded.
    let mut title = match on_client_count {
        0 => "lanes".to_owned(),
        1 => "lanes · 1 more task's marks on the client lane".to_owned(),
        n => format!("lanes · {n} more tasks' marks on the client lane"),
    };
    if streams_yield && room == 0 {
        title.push_str(" · quiet streams hidden");
    }
    frame.render_widget(Paragraph::new(lines).block(block(&title, theme)), area);
    if let Some(column) = selected_column {
        let x = area.x + 1 + LABEL as u16 + column as u16;
        let y = area.bottom().saturating_sub(1);
        if x < area.right().saturating_sub(1) && area.height >= 2 {
            frame.buffer_mut()[(x, y)]
                .set_symbol("▲")
                .set_style(theme.accent());
        }
    }
    LanesDrawn {
        area,
        rows,
        first_column: area.x + 1 + LABEL as u16,
        columns: columns as u16,
        start_ms,
        ms_per_column: per,
        in_order,
        on_client,
    }
}

#[cfg(test)]
mod tests;
