//! Where marks fall on the lanes: the window of the axis a frame shows (lab time, or history
//! order for a scripted run), and the grid of cells each lane's marks land in, the worst mark
//! of a cell winning.

use super::marks::{Lane, Mark, Placed, Row};
use forkscope_core::history::AnomalyKind;
use forkscope_core::{SessionId, TaskId};
use std::collections::BTreeMap;

/// Lab milliseconds one column covers at most while the lanes follow the present: beyond it
/// the lanes scroll (or `z` shows the whole run in the width).
pub const MS_PER_COLUMN: u64 = 100;
/// Finest scale: a scripted run of a third of a second still spreads across the lanes.
const MIN_MS_PER_COLUMN: u64 = 2;

/// How much of the run the lanes show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Zoom {
    /// Scale to what happened, up to [`MS_PER_COLUMN`]; past that, the lanes scroll.
    #[default]
    Follow,
    /// The whole run in the width, however long.
    WholeRun,
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
pub(super) fn window_in_order(first: Option<u64>, end: u64, columns: usize) -> (u64, u64) {
    let columns = columns.max(1) as u64;
    let first = first.unwrap_or(end);
    let per = (end - first.min(end) + 1).div_ceil(columns).max(1);
    (first, per)
}

#[derive(Debug, Default)]
pub(super) struct Lanes {
    pub(super) streams: BTreeMap<Lane, Vec<Option<(Mark, usize)>>>,
    /// 2026-07-28: one lane per task.
    pub(super) tasks: BTreeMap<TaskId, Vec<Option<(Mark, usize)>>>,
    pub(super) client: Vec<Option<(Mark, usize)>>,
}

/// A cell keeps its worst mark, and the selected mark over any: a burst of deliveries in one
/// column must still show the one selected (else nothing on screen points at it).
fn put(
    lane: &mut [Option<(Mark, usize)>],
    column: usize,
    mark: Mark,
    index: usize,
    selected: Option<usize>,
) {
    if let Some(slot) = lane.get_mut(column)
        && slot.is_none_or(|(m, i)| {
            Some(index) == selected || (Some(i) != selected && m.severity <= mark.severity)
        })
    {
        *slot = Some((mark, index));
    }
}

/// Draws `cells` of another lane over `lane`, each cell by the rule of [`put`].
pub(super) fn merge(
    lane: &mut [Option<(Mark, usize)>],
    cells: &[Option<(Mark, usize)>],
    selected: Option<usize>,
) {
    for (column, cell) in cells.iter().enumerate() {
        if let Some((mark, index)) = cell {
            put(lane, column, *mark, *index, selected);
        }
    }
}

/// How the marks fall into columns: the window `(start, per)` on the axis, by order or by time,
/// and whether the verdict is hidden.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grid {
    pub(super) start: u64,
    pub(super) per: u64,
    pub(super) in_order: bool,
    pub(super) hide_verdict: bool,
    /// The selected mark, which wins its cell.
    pub(super) selected: Option<usize>,
}

/// Places the marks of `session` in the window into lanes; a cell keeps its worst mark.
pub(super) fn build(
    placed: &[Placed],
    session: Option<SessionId>,
    grid: Grid,
    columns: usize,
) -> Lanes {
    let Grid {
        start,
        per,
        in_order,
        hide_verdict,
        selected,
    } = grid;
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
        let mark = if hide_verdict {
            match p.mark.verdict_hidden() {
                Some(mark) => mark,
                None => continue,
            }
        } else {
            p.mark
        };
        let column = (((at - start) / per) as usize).min(columns.saturating_sub(1));
        let lane = match p.row {
            Row::Client => &mut lanes.client,
            Row::Stream(lane) => lanes
                .streams
                .entry(lane)
                .or_insert_with(|| vec![None; columns]),
            Row::Task(task) => lanes
                .tasks
                .entry(task)
                .or_insert_with(|| vec![None; columns]),
        };
        put(lane, column, mark, i, selected);
    }
    lanes
}

/// The session's first orphan emit, when it lies before the window.
#[derive(Clone, Copy, Debug)]
pub(super) struct ForkOffScreen {
    pub(super) lane: Lane,
    pub(super) at_ms: u64,
}

pub(super) fn first_fork_before(
    placed: &[Placed],
    session: Option<SessionId>,
    start: u64,
    in_order: bool,
) -> Option<ForkOffScreen> {
    let fork = placed
        .iter()
        .take_while(|p| p.coordinate(in_order) < start)
        .find(|p| p.mark.stands_for(AnomalyKind::Fork) && p.shown_for(session))?;
    match fork.row {
        Row::Stream(lane) => Some(ForkOffScreen {
            lane,
            at_ms: fork.at_ms,
        }),
        Row::Client | Row::Task(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Severity, place_all};
    use super::*;
    use forkscope_core::history::Entry;
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabConfig, Policy};

    fn glyphs(lane: &[Option<(Mark, usize)>]) -> String {
        lane.iter()
            .map(|m| m.map_or('.', |(m, _)| m.glyph))
            .collect()
    }

    fn grid(start: u64, per: u64, in_order: bool) -> Grid {
        Grid {
            start,
            per,
            in_order,
            hide_verdict: false,
            selected: None,
        }
    }

    fn forked() -> Sim {
        Sim::seed_incident(Policy::Naive)
    }

    #[test]
    fn a_naive_fork_paints_orphan_emits_and_duplicates_red() {
        let sim = forked();
        let entries: Vec<Entry> = sim.history().recent().iter().cloned().collect();
        let placed = place_all(&entries);
        let (start, per) = window(Some(0), sim.now().as_millis(), 5, Zoom::Follow);
        let lanes = build(&placed, sim.session(), grid(start, per, false), 5);
        let s1 = &lanes.streams[&Lane::of(forkscope_core::StreamId(1))];
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
        let placed = place_all(&entries);
        let used = |lanes: &Lanes| lanes.client.iter().filter(|c| c.is_some()).count();
        let (start, per) = window(Some(0), sim.now().as_millis(), 40, Zoom::Follow);
        let by_time = build(&placed, sim.session(), grid(start, per, false), 40);
        assert_eq!(used(&by_time), 1, "{}", glyphs(&by_time.client));
        let first = placed.first().map(|p| p.entry as u64);
        let end = placed.last().unwrap().entry as u64;
        let (start, per) = window_in_order(first, end, 40);
        let in_order = build(&placed, sim.session(), grid(start, per, true), 40);
        assert!(used(&in_order) >= 20, "{}", glyphs(&in_order.client));
    }
}
