//! Stream lanes: events over lab time, one lane per stream, the client's deliveries beneath.
//! A fork shows as two lanes receiving at once with red emits on the orphan; a duplicate as a
//! red ◆ on the client lane.
//!
//! Each history entry is classified once, as it arrives ([`Classifier`]), into a [`Placed`]
//! mark; a frame only places the marks of its time window, so the lanes can scroll over a
//! whole run of 10⁵ events and still draw in well under a millisecond.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use crate::tui::weight::{self, Weigh};
use forkscope_core::history::{Entry, Record};
use forkscope_core::{SessionId, StreamId, StreamKind, StreamState};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// An emit onto an orphaned stream: the fork. A cross, not a dot, so it differs from `●` by
/// shape where colour is lost (a projector, `NO_COLOR`).
pub const ORPHAN_EMIT: char = '╳';

/// The lanes' glyphs, most needed first.
const LEGEND: [&str; 10] = [
    "╳ orphan emit",
    "◆ duplicate",
    "✗ rejected",
    "● emit",
    "▲ applied",
    "○ copied",
    "↺ resumed",
    "× refused",
    "┃ fenced",
    "╎ orphaned",
];

/// Lab milliseconds one column covers at most while the lanes follow the present: beyond it
/// the lanes scroll (or `z` shows the whole run in the width).
pub const MS_PER_COLUMN: u64 = 100;
/// Finest scale: a scripted run of a third of a second still spreads across the lanes.
const MIN_MS_PER_COLUMN: u64 = 2;
const LABEL: usize = 8;
const MAX_STREAM_LANES: usize = 4;

/// How bad a mark is; the worst one in a column wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Event,
    /// A resume: drawn over the events that share its column, so the `↺` is never hidden.
    Notable,
    Warn,
    Violation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub glyph: char,
    pub severity: Severity,
    /// Colours an event mark by its stream.
    stream: Option<StreamId>,
}

impl Mark {
    fn new(glyph: char, severity: Severity, stream: Option<StreamId>) -> Mark {
        Mark {
            glyph,
            severity,
            stream,
        }
    }
}

/// Which lane a mark is drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    Stream(StreamId),
    Client,
}

/// One classified history entry: where and how the lanes draw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub at_ms: u64,
    /// Index of its entry in the run's history.
    pub entry: usize,
    /// Drawn only while the client is in this session; `None`: always (the client's own
    /// refusals and deliveries show even after it moved to a new session).
    pub session: Option<SessionId>,
    pub row: Row,
    pub mark: Mark,
}

impl Placed {
    /// Whether the lanes of a client in `session` draw it.
    pub fn shown_for(&self, session: Option<SessionId>) -> bool {
        self.session.is_none() || self.session == session
    }
}

/// Turns history entries into marks, one at a time, keeping what it must remember: which
/// stream each session is bound to, which streams belong to requests, which side effects the
/// client applied.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    bound: HashMap<SessionId, StreamId>,
    requests: HashSet<(SessionId, StreamId)>,
    applied: HashSet<Arc<str>>,
    /// The heap bytes of the keys in `applied`, kept as they are added (summing them would
    /// walk the whole run).
    applied_keys: usize,
}

/// A mark owns nothing on the heap (its place in a `Vec` is counted by the `Vec`).
impl Weigh for Placed {
    fn heap(&self) -> usize {
        0
    }
}

impl Weigh for Classifier {
    fn heap(&self) -> usize {
        weight::table::<(SessionId, StreamId)>(self.bound.capacity())
            + weight::table::<(SessionId, StreamId)>(self.requests.capacity())
            + weight::table::<Arc<str>>(self.applied.capacity())
            + self.applied_keys
    }
}

impl Classifier {
    /// The mark of the `index`th entry, if it draws one.
    pub fn place(&mut self, index: usize, entry: &Entry) -> Option<Placed> {
        let at_ms = entry.at.as_millis();
        let on = |session: SessionId, stream: StreamId, mark: Mark| Placed {
            at_ms,
            entry: index,
            session: Some(session),
            row: Row::Stream(stream),
            mark,
        };
        let client = |session: Option<SessionId>, mark: Mark| Placed {
            at_ms,
            entry: index,
            session,
            row: Row::Client,
            mark,
        };
        match &entry.record {
            Record::StreamOpened {
                session,
                stream,
                stream_kind: StreamKind::Request,
                ..
            } => {
                self.requests.insert((*session, *stream));
                None
            }
            // The client's lane shows the resume too: see `resumed`.
            Record::ResumeAccepted {
                session, stream, ..
            } => Some(on(
                *session,
                *stream,
                Mark::new('↺', Severity::Notable, Some(*stream)),
            )),
            Record::Attached {
                session, stream, ..
            } => {
                // The standalone stream a session last attached is the one the client is bound
                // to. A tool call's stream is attached beside it, never instead of it.
                if !self.requests.contains(&(*session, *stream)) {
                    self.bound.insert(*session, *stream);
                }
                Some(on(
                    *session,
                    *stream,
                    Mark::new('┣', Severity::Info, Some(*stream)),
                ))
            }
            Record::Emitted {
                session,
                stream,
                copied,
                ..
            } => {
                let orphan = self.bound.get(session).is_some_and(|b| b != stream)
                    && !copied
                    && !self.requests.contains(&(*session, *stream));
                let mark = match (orphan, copied) {
                    (true, _) => Mark::new(ORPHAN_EMIT, Severity::Violation, Some(*stream)),
                    (_, true) => Mark::new('○', Severity::Warn, Some(*stream)),
                    _ => Mark::new('●', Severity::Event, Some(*stream)),
                };
                Some(on(*session, *stream, mark))
            }
            Record::LateEmitRefused {
                session, stream, ..
            } => Some(on(*session, *stream, Mark::new('×', Severity::Warn, None))),
            Record::Fenced { session, stream } => {
                Some(on(*session, *stream, Mark::new('┃', Severity::Warn, None)))
            }
            Record::Orphaned {
                session, stream, ..
            } => Some(on(*session, *stream, Mark::new('╎', Severity::Warn, None))),
            Record::Delivered {
                event,
                key,
                applied,
                ..
            } => {
                let duplicate = *applied && !self.applied.insert(key.clone());
                if *applied && !duplicate {
                    self.applied_keys += key.heap();
                }
                let mark = match (applied, duplicate) {
                    (_, true) => Mark::new('◆', Severity::Violation, None),
                    (true, false) => Mark::new('▲', Severity::Event, Some(event.stream)),
                    (false, _) => Mark::new('·', Severity::Info, None),
                };
                Some(client(None, mark))
            }
            Record::ResumeRejected { .. } => {
                Some(client(None, Mark::new('✗', Severity::Warn, None)))
            }
            _ => None,
        }
    }

    /// Forgets what an entry the track let go taught it: the side effect it applied. A replay
    /// of an event applied before the kept run began then draws as applied, not ◆ (the verdict,
    /// which keeps every key, still counts it); without this the set would grow all day.
    pub fn forget(&mut self, entry: &Entry) {
        if let Record::Delivered {
            key, applied: true, ..
        } = &entry.record
        {
            if self.applied.remove(key) {
                self.applied_keys -= key.heap();
            }
        }
    }

    /// The client lane's ↺ for an accepted resume (a second mark for the same entry).
    pub fn resumed(index: usize, entry: &Entry) -> Option<Placed> {
        match &entry.record {
            Record::ResumeAccepted { session, .. } => Some(Placed {
                at_ms: entry.at.as_millis(),
                entry: index,
                session: Some(*session),
                row: Row::Client,
                mark: Mark::new('↺', Severity::Notable, None),
            }),
            _ => None,
        }
    }
}

/// Classifies a whole run at once (hand-built snapshots, tests).
pub fn classify(entries: &[Entry]) -> Vec<Placed> {
    let mut classifier = Classifier::default();
    let mut placed = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        placed.extend(classifier.place(i, entry));
        placed.extend(Classifier::resumed(i, entry));
    }
    placed
}

/// How much of the run the lanes show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Zoom {
    /// Scale to what happened, up to [`MS_PER_COLUMN`]; past that, the lanes scroll.
    #[default]
    Follow,
    /// The whole run in the width, however long.
    WholeRun,
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
}

impl LanesDrawn {
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

/// The window `(start_ms, ms_per_column)` for `columns` columns ending at `end_ms`, given the
/// run's first mark.
pub fn window(first_ms: Option<u64>, end_ms: u64, columns: usize, zoom: Zoom) -> (u64, u64) {
    let columns = columns.max(1) as u64;
    let span = first_ms.map_or(0, |f| end_ms.saturating_sub(f)) + 1;
    let per = span.div_ceil(columns).max(MIN_MS_PER_COLUMN);
    let per = match zoom {
        Zoom::Follow => per.min(MS_PER_COLUMN),
        Zoom::WholeRun => per,
    };
    (end_ms.saturating_sub(columns * per - 1), per)
}

/// The window `(start, entries_per_column)` for `columns` columns ending at entry `end`.
fn window_in_order(first: Option<u64>, end: u64, columns: usize) -> (u64, u64) {
    let columns = columns.max(1) as u64;
    let first = first.unwrap_or(end);
    let per = (end - first.min(end) + 1).div_ceil(columns).max(1);
    (first, per)
}

#[derive(Debug, Default)]
struct Lanes {
    streams: BTreeMap<StreamId, Vec<Option<(Mark, usize)>>>,
    client: Vec<Option<(Mark, usize)>>,
}

fn put(lane: &mut [Option<(Mark, usize)>], column: usize, mark: Mark, index: usize) {
    if let Some(slot) = lane.get_mut(column)
        && slot.is_none_or(|(m, _)| m.severity <= mark.severity)
    {
        *slot = Some((mark, index));
    }
}

impl Placed {
    /// Where it lies on the lanes' axis: lab time, or its place in the history.
    pub fn coordinate(&self, in_order: bool) -> u64 {
        if in_order {
            self.entry as u64
        } else {
            self.at_ms
        }
    }
}

/// Places the marks of `session` in the window into lanes; a cell keeps its worst mark.
fn build(
    placed: &[Placed],
    session: Option<SessionId>,
    (start, per, in_order): (u64, u64, bool),
    columns: usize,
) -> Lanes {
    let mut lanes = Lanes {
        client: vec![None; columns],
        ..Lanes::default()
    };
    // Marks are in arrival order, which is lab-time order up to a tick: find the window's start.
    let from = placed.partition_point(|p| p.coordinate(in_order) < start);
    for (i, p) in placed.iter().enumerate().skip(from) {
        let at = p.coordinate(in_order);
        if !p.shown_for(session) || at < start {
            continue;
        }
        let column = (((at - start) / per) as usize).min(columns.saturating_sub(1));
        match p.row {
            Row::Client => put(&mut lanes.client, column, p.mark, i),
            Row::Stream(stream) => put(
                lanes
                    .streams
                    .entry(stream)
                    .or_insert_with(|| vec![None; columns]),
                column,
                p.mark,
                i,
            ),
        }
    }
    lanes
}

fn styled(cell: Option<(Mark, usize)>, source: &LaneSource, theme: &Theme) -> Span<'static> {
    match cell {
        None => Span::styled("·", theme.border()),
        Some((m, index)) => {
            let (glyph, severity) = match (source.hide_verdict, m.severity, m.glyph) {
                (true, Severity::Violation, ORPHAN_EMIT) => ('●', Severity::Event),
                (true, Severity::Violation, _) => ('▲', Severity::Event),
                _ => (m.glyph, m.severity),
            };
            let mut style: Style = match severity {
                Severity::Violation => theme.bad(),
                Severity::Warn => theme.warn(),
                Severity::Info => theme.dim(),
                Severity::Notable => theme.accent(),
                Severity::Event => m.stream.map_or(theme.good(), |s| theme.stream(s.0)),
            };
            if source.selected == Some(index) {
                style = style.add_modifier(Modifier::REVERSED | Modifier::BOLD);
            }
            Span::styled(glyph.to_string(), style)
        }
    }
}

/// The session's first orphan emit, when it lies before the window.
#[derive(Clone, Copy, Debug)]
struct ForkOffScreen {
    stream: StreamId,
    at_ms: u64,
}

fn first_fork_before(
    placed: &[Placed],
    session: Option<SessionId>,
    start: u64,
    in_order: bool,
) -> Option<ForkOffScreen> {
    let fork = placed
        .iter()
        .take_while(|p| p.coordinate(in_order) < start)
        .find(|p| p.mark.glyph == ORPHAN_EMIT && p.shown_for(session))?;
    match fork.row {
        Row::Stream(stream) => Some(ForkOffScreen {
            stream,
            at_ms: fork.at_ms,
        }),
        Row::Client => None,
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
            own = classify(&snap.recent);
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
    let (start_ms, per) = if in_order {
        // Every entry so far in the width (a scripted run is short), one per column at most.
        let end = source.placed.last().map_or(0, |p| p.entry as u64);
        window_in_order(first, end, columns)
    } else {
        window(first, source.end_ms, columns, source.zoom)
    };
    let mut lanes = build(source.placed, session, (start_ms, per, in_order), columns);
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
            .entry(stream.id)
            .or_insert_with(|| vec![None; columns]);
    }
    // The fork stays in view: once its first orphan emit has scrolled off the left edge, its
    // lane is kept and says where it went.
    let fork = first_fork_before(source.placed, session, start_ms, in_order);
    if let Some(f) = fork {
        lanes
            .streams
            .entry(f.stream)
            .or_insert_with(|| vec![None; columns]);
    }
    let inner = (area.height as usize).saturating_sub(2);
    let room = inner.saturating_sub(1).clamp(1, MAX_STREAM_LANES);
    let legend = inner > room.min(lanes.streams.len().max(1)) + 1;
    let mut lines = Vec::new();
    let mut rows = Vec::new();
    // Lanes with a violation first, then the newest; shown in stream order.
    let mut shown: Vec<_> = lanes.streams.iter().collect();
    let violates = |id: &StreamId, marks: &Vec<Option<(Mark, usize)>>| {
        fork.is_some_and(|f| f.stream == *id)
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
    let label = |name: String, pointed: bool| {
        let pointer = if pointed { "›" } else { " " };
        format!("{name:<width$}{pointer}", width = LABEL - 1)
    };
    for (stream, marks) in shown {
        let pointed = holds_selected(marks);
        selected_column = selected_column.or(pointed);
        let mut spans = vec![Span::styled(
            label(stream.to_string(), pointed.is_some()),
            theme.stream(stream.0),
        )];
        let mut cells: Vec<Span> = marks.iter().map(|m| styled(*m, &source, theme)).collect();
        // Only while no orphan emit of its lane is in view: then the fork is on screen.
        let in_view = marks.iter().flatten().any(|(m, _)| m.glyph == ORPHAN_EMIT);
        if let Some(f) = fork.filter(|f| f.stream == *stream && !in_view) {
            point_back(&mut cells, marks, f, theme);
        }
        spans.extend(cells);
        rows.push((top + lines.len() as u16, Row::Stream(*stream)));
        lines.push(Line::from(spans));
    }
    if lanes.streams.is_empty() {
        lines.push(Line::styled("no events yet", theme.dim()));
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
        let scale = match (in_order, source.zoom) {
            (true, _) => " in order (scripted clock)",
            (false, Zoom::Follow) => "",
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
        for (i, entry) in LEGEND.iter().enumerate() {
            // Room for this entry, and for the pointer to help unless it is the last.
            let tail = if i + 1 < LEGEND.len() {
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
            legend.push_str(entry);
        }
        lines.push(Line::styled(legend, theme.dim()));
    }
    frame.render_widget(Paragraph::new(lines).block(block("lanes", theme)), area);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabConfig, Policy};

    fn glyphs(lane: &[Option<(Mark, usize)>]) -> String {
        lane.iter()
            .map(|m| m.map_or('.', |(m, _)| m.glyph))
            .collect()
    }

    fn forked() -> Sim {
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
        sim
    }

    /// A live stream with nothing to say for longer than the lanes' span keeps its lane.
    #[test]
    fn a_live_but_quiet_stream_keeps_its_lane() {
        let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 1).unwrap();
        sim.start();
        sim.deliver_all();
        sim.advance(120_000);
        let snap = crate::lab::Snapshot::from_sim(&sim, Vec::new());
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 8)).unwrap();
        terminal
            .draw(|frame| {
                render(frame, frame.area(), &snap, None, &Theme::from_env());
            })
            .unwrap();
        let screen = terminal.backend().to_string();
        assert!(screen.contains("│s1 "), "{screen}");
    }

    #[test]
    fn a_naive_fork_paints_orphan_emits_and_duplicates_red() {
        let sim = forked();
        let entries: Vec<Entry> = sim.history().recent().iter().cloned().collect();
        let placed = classify(&entries);
        let (start, per) = window(Some(0), sim.now().as_millis(), 5, Zoom::Follow);
        let lanes = build(&placed, sim.session(), (start, per, false), 5);
        let s1 = &lanes.streams[&StreamId(1)];
        assert!(
            s1.iter()
                .flatten()
                .any(|(m, _)| m.severity == Severity::Violation),
            "{}",
            glyphs(s1)
        );
        assert!(
            lanes.client.iter().flatten().any(|(m, _)| m.glyph == '◆'),
            "{}",
            glyphs(&lanes.client)
        );
    }

    #[test]
    fn the_window_scales_to_a_short_run_and_scrolls_a_long_one() {
        // 400 ms of lab time over 80 columns: 5 ms a column, the whole story across the width.
        assert_eq!(window(Some(0), 400, 80, Zoom::Follow), (0, 6));
        // An hour: the lanes follow the present at 100 ms a column…
        let (start, per) = window(Some(0), 3_600_000, 80, Zoom::Follow);
        assert_eq!(per, MS_PER_COLUMN);
        assert_eq!(start, 3_600_000 - 80 * 100 + 1);
        // …or, zoomed out, show all of it.
        assert_eq!(window(Some(0), 3_600_000, 80, Zoom::WholeRun).0, 0);
    }

    #[test]
    fn a_scripted_run_spreads_by_order_when_its_clock_stands_still() {
        // Forty events at one lab instant (a scripted clock stands still between its steps): by
        // time they share one column; in order they spread across the width.
        let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 1).unwrap();
        sim.start();
        sim.deliver_all();
        for _ in 0..40 {
            sim.emit_background();
            sim.deliver_all();
        }
        let entries: Vec<Entry> = sim.history().recent().iter().cloned().collect();
        let placed = classify(&entries);
        let used = |lanes: &Lanes| lanes.client.iter().filter(|c| c.is_some()).count();
        let (start, per) = window(Some(0), sim.now().as_millis(), 40, Zoom::Follow);
        let by_time = build(&placed, sim.session(), (start, per, false), 40);
        assert_eq!(used(&by_time), 1, "{}", glyphs(&by_time.client));
        let first = placed.first().map(|p| p.entry as u64);
        let end = placed.last().unwrap().entry as u64;
        let (start, per) = window_in_order(first, end, 40);
        let in_order = build(&placed, sim.session(), (start, per, true), 40);
        assert!(used(&in_order) >= 20, "{}", glyphs(&in_order.client));
    }

    #[test]
    fn a_click_maps_to_its_lane_and_time() {
        let drawn = LanesDrawn {
            area: Rect::new(0, 0, 30, 6),
            rows: vec![(1, Row::Stream(StreamId(1))), (2, Row::Client)],
            first_column: 9,
            columns: 19,
            start_ms: 1000,
            ms_per_column: 10,
            in_order: false,
        };
        assert_eq!(
            drawn.hit(9, 1),
            Some((Row::Stream(StreamId(1)), 1000, 1010))
        );
        assert_eq!(drawn.hit(12, 2), Some((Row::Client, 1030, 1040)));
        assert_eq!(drawn.hit(3, 2), None, "the label column");
        assert_eq!(drawn.hit(12, 4), None, "below the lanes");
    }
}
