//! Time travel in the dashboard: the run kept as moments ([`Timeline`]), which moment is shown,
//! `v` stepping through the violations fork first, and selecting a lane mark by key or click.
//! Travelling pauses lab time; going live resumes what travel paused.

use super::App;
use crate::lab::Snapshot;
use crate::tui::panes;
use crate::tui::panes::lanes::Row;
use crate::tui::timeline::{Jump, Timeline};
use forkscope_core::AnomalyKind;

/// The run as time travel keeps it, and where in it the screen is.
#[derive(Debug)]
pub(super) struct Travel {
    /// Every lab's run, and a moment each time something happened.
    pub timeline: Timeline,
    /// The bytes `timeline` may hold.
    pub budget: usize,
    /// The moment shown, or `None` for the present.
    pub at: Option<usize>,
    /// Travel paused lab time (and resumes it when back to live).
    pub paused: bool,
    /// What was last captured as a moment (see [`App::changes`]).
    pub captured: Option<u64>,
    /// Which of the run's violation stops `v` last travelled to.
    pub violation_step: Option<usize>,
}

impl Travel {
    pub fn new(labs: usize, budget: usize) -> Travel {
        Travel {
            timeline: Timeline::with_budget(labs, budget),
            budget,
            at: None,
            paused: false,
            captured: None,
            violation_step: None,
        }
    }

    /// A new run to travel through (new labs).
    pub fn restart(&mut self, labs: usize) {
        *self = Travel::new(labs, self.budget);
    }

    /// Takes in what the labs added to their histories and, when `changes` differs from the
    /// last capture, a moment of `panels`.
    pub fn record(
        &mut self,
        labs: &[std::sync::Arc<crate::lab::Lab>],
        panels: &[Snapshot],
        changes: u64,
    ) {
        if self.timeline.tracks.len() != labs.len() {
            self.timeline = Timeline::with_budget(labs.len(), self.budget);
        }
        // As far as each panel's snapshot saw, so a moment's marks and its verdict agree.
        for ((track, lab), panel) in self.timeline.tracks.iter_mut().zip(labs).zip(panels) {
            track.sync_to(&lab.core().history, panel.entries);
        }
        if self.captured != Some(changes) {
            self.timeline.capture(panels);
            self.captured = Some(changes);
        }
    }
}

/// A moment where a lab's count of one kind of violation grew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ViolationStop {
    moment: usize,
    panel: usize,
    kind: AnomalyKind,
}

/// Every moment a violation count grew, the first fork first and the rest in time order:
/// the fork explains the duplicates, which can reach the checker a moment before it.
fn violation_stops(timeline: &Timeline) -> Vec<ViolationStop> {
    let mut stops = Vec::new();
    let mut before: Vec<std::collections::BTreeMap<AnomalyKind, u64>> = Vec::new();
    for moment in 0..timeline.len() {
        let Some(m) = timeline.moment(moment) else {
            continue;
        };
        for (panel, frozen) in m.panels.iter().enumerate() {
            let counts = &frozen.snapshot.view.verdict.counts;
            if before.len() <= panel {
                before.resize(panel + 1, Default::default());
            }
            for (kind, n) in counts {
                if before[panel].get(kind).is_none_or(|was| was < n) {
                    stops.push(ViolationStop {
                        moment,
                        panel,
                        kind: *kind,
                    });
                }
            }
            before[panel] = counts.clone();
        }
    }
    if let Some(fork) = stops.iter().position(|s| s.kind == AnomalyKind::Fork) {
        let fork = stops.remove(fork);
        stops.insert(0, fork);
    }
    stops
}

impl App {
    /// Moves through the past; the first move from the present pauses the labs.
    pub(super) fn travel_to(&mut self, jump: Jump) {
        if self.travel.timeline.is_empty() {
            self.say("nothing has happened yet to travel back to");
            return;
        }
        let from = match self.travel.at {
            Some(i) => i,
            None => {
                self.pause_for_travel();
                self.travel.timeline.len() - 1
            }
        };
        let timeline = &self.travel.timeline;
        let to = timeline.jump(from, jump);
        let violation = timeline.moment(to).is_some_and(|m| m.violation);
        let reach = timeline.reach();
        match jump {
            // The oldest moment kept: say when that is not the run's whole start (short: the
            // key line has 50 columns for it at the smallest size).
            Jump::Start => match reach {
                Some(r) if r.forgotten => self.say(format!(
                    "oldest kept: lab {}; older ones forgotten",
                    panes::seconds(r.oldest_ms)
                )),
                Some(r) => {
                    if let Some(since) = r.every_change_since_ms {
                        self.say(format!(
                            "run's start; every change since lab {}",
                            panes::seconds(since)
                        ));
                    }
                }
                None => {}
            },
            Jump::FirstViolation if !violation => self.say("no violation in this run"),
            Jump::PreviousDecision | Jump::NextDecision if to == from => {
                self.say("no decision that way")
            }
            Jump::Forward(_) if to == from => {
                self.say("the newest change; End (or l) goes back to live")
            }
            _ => {}
        }
        self.travel.at = Some(to);
    }

    /// `v`: the fork first, then every other violation in the order it happened; each press
    /// travels to the next and selects its mark in the lanes, so the card explains it.
    pub(super) fn step_violation(&mut self) {
        let stops = violation_stops(&self.travel.timeline);
        if stops.is_empty() {
            self.say("no violation in this run");
            return;
        }
        let next = match (self.travel.at, self.travel.violation_step) {
            (Some(_), Some(k)) => (k + 1) % stops.len(),
            _ => 0,
        };
        if self.travel.at.is_none() {
            self.pause_for_travel();
        }
        let stop = stops[next];
        self.travel.at = Some(stop.moment);
        self.travel.violation_step = Some(next);
        self.selected = self.mark_of(stop);
        let tail = if next + 1 == stops.len() {
            "the last; v starts over, End is live"
        } else {
            "v: the next"
        };
        self.say(format!(
            "violation {} of {}: {} · {tail}",
            next + 1,
            stops.len(),
            panes::invariant::short(stop.kind)
        ));
    }

    /// The lane mark of a violation stop: the one that arrived in its moment standing for an
    /// anomaly of its kind.
    fn mark_of(&self, stop: ViolationStop) -> Option<(usize, usize)> {
        let timeline = &self.travel.timeline;
        let moment = timeline.moment(stop.moment)?;
        let frozen = moment.panels.get(stop.panel)?;
        let from = stop
            .moment
            .checked_sub(1)
            .and_then(|m| timeline.moment(m))
            .and_then(|m| m.panels.get(stop.panel))
            .map_or(0, |f| f.placed);
        let (marks, base) = timeline.tracks[stop.panel].placed_until(frozen.placed);
        let from = from.saturating_sub(base);
        (from..marks.len())
            .find(|i| marks[*i].mark.stands_for(stop.kind))
            .map(|i| (stop.panel, base + i))
    }

    fn pause_for_travel(&mut self) {
        self.travel.paused = self.pause_running();
    }

    /// Back to the present; lab time runs again if time travel paused it.
    pub(super) fn go_live(&mut self) {
        self.travel.violation_step = None;
        if self.travel.at.take().is_none() {
            return;
        }
        if std::mem::take(&mut self.travel.paused) {
            self.resume_paused();
        }
        self.say("live");
    }

    /// The marks the selected panel shows now (or at the moment shown), and its session.
    fn shown(&self, panel: usize) -> Option<(usize, Option<forkscope_core::SessionId>)> {
        let timeline = &self.travel.timeline;
        let moment = match self.travel.at {
            Some(i) => timeline.moment(i)?,
            None => timeline.moment(timeline.len().checked_sub(1)?)?,
        };
        let frozen = moment.panels.get(panel)?;
        let end = match self.travel.at {
            Some(_) => frozen.placed,
            None => timeline.tracks.get(panel)?.ends().1,
        };
        let session = frozen.snapshot.view.client.as_ref().and_then(|c| c.session);
        Some((end, session))
    }

    /// Selects the previous or next event the lanes show.
    pub(super) fn select(&mut self, direction: i8) {
        let panel = self.selected.map_or(0, |(p, _)| p);
        let Some((end, session)) = self.shown(panel) else {
            return;
        };
        let (marks, base) = self.travel.timeline.tracks[panel].placed_until(end);
        let shown = |i: &usize| marks[*i].shown_for(session);
        let current = self
            .selected
            .and_then(|(_, abs)| abs.checked_sub(base))
            .filter(|i| *i < marks.len());
        let next = match (current, direction) {
            (None, _) => (0..marks.len()).rev().find(shown),
            (Some(c), d) if d < 0 => (0..c).rev().find(shown).or(Some(c)),
            (Some(c), _) => (c + 1..marks.len()).find(shown).or(Some(c)),
        };
        match next {
            Some(i) => self.selected = Some((panel, base + i)),
            None => self.say("no events to select yet"),
        }
    }

    /// `,` `.`: selects an event, and stops following as space does (journalled as space is):
    /// a running lab would scroll the selected event out of view.
    pub(super) async fn select_and_hold(&mut self, direction: i8) {
        self.select(direction);
        let running = match &self.playback {
            Some(p) => !p.paused(),
            None => self.labs.iter().any(|l| !l.clock().paused()),
        };
        if self.selected.is_some() && self.travel.at.is_none() && running {
            self.lab_action(crate::lab::Action::TogglePause).await;
            self.say("paused to keep the selected event in view: space runs the lab again");
        }
    }

    /// Changes whenever something happened in a lab (not merely time passing): a new moment
    /// for time travel. Read from the snapshots the moment keeps, never from the labs again: a
    /// change that lands after a snapshot then makes the next moment instead of going unseen.
    pub(super) fn changes(&self, panels: &[Snapshot]) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for snap in panels {
            snap.entries.hash(&mut h);
            (snap.exchanges.len(), snap.exchanges.last().map(|e| e.at)).hash(&mut h);
            snap.paused.hash(&mut h);
            snap.replicas
                .as_ref()
                .map(|v| format!("{v:?}"))
                .hash(&mut h);
        }
        if let Some(p) = &self.playback {
            let n = p.narration();
            (n.done, n.finished).hash(&mut h);
        }
        h.finish()
    }

    /// A click on a lane selects the mark drawn in that cell.
    pub(super) fn click(&mut self, column: u16, row: u16) {
        let hit = self
            .lanes_drawn
            .iter()
            .enumerate()
            .find_map(|(p, d)| d.hit(column, row).map(|h| (p, h)));
        let Some((panel, (lane, from, to))) = hit else {
            return;
        };
        let in_order = self.lanes_drawn[panel].in_order;
        let drawn = self.lanes_drawn[panel].clone();
        let Some((end, session)) = self.shown(panel) else {
            return;
        };
        let (marks, base) = self.travel.timeline.tracks[panel].placed_until(end);
        let start = marks.partition_point(|m| m.coordinate(in_order) < from);
        // The cell draws its worst mark, the later of equals: select that one.
        let best = marks[start..]
            .iter()
            .enumerate()
            .take_while(|(_, m)| m.coordinate(in_order) < to)
            .filter(|(_, m)| drawn.draws_on(m.row, lane) && m.shown_for(session))
            .max_by_key(|(i, m)| (m.mark.severity, *i))
            .map(|(i, _)| base + start + i);
        self.selected = best.map(|abs| (panel, abs));
        if best.is_none() {
            self.say(match lane {
                Row::Client => "nothing the client received there",
                Row::Stream(_) => "no event there",
                Row::Task(_) => "nothing the task did there",
            });
        }
    }
}
