//! The screen layout: which pane goes where, at any size. Pure: draws a [`Screen`] into any
//! ratatui backend, so whole-screen tests use `TestBackend`.

use super::knobs::Knobs;
use super::panes::event_card::{self, EventCard};
use super::panes::evidence::{self, EvidenceView};
use super::panes::lanes::{LaneSource, LanesDrawn};
use super::panes::narration::{self, Narration};
use super::panes::picker::{self, PickerView};
use super::panes::policies;
use super::panes::proof::{self, ProofView};
use super::panes::{
    client, exchanges, footer, header, help, invariant, knobs, lanes, logs, presenter, replicas,
    streams, tasks,
};
use super::theme::Theme;
use crate::lab::Snapshot;
use forkscope_core::revision::Protocols;
use forkscope_core::{Condition, ReplicaId};
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Below this the dashboard asks for a larger terminal instead of drawing a mess.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 20;
/// Three labs side by side need this many columns (a column each as wide as two labs get at
/// 80); narrower, the screen says so and shows each lab's verdict line.
pub const MIN_WIDTH_THREE: u16 = 120;

/// What a frame put on screen that keys act on: the lanes (for the mouse) and whether the
/// evidence card is up (Esc closes it before anything else).
#[derive(Debug, Default)]
pub struct Drawn {
    pub lanes: Vec<LanesDrawn>,
    pub evidence: bool,
}

/// What is open over the dashboard, as drawn.
#[derive(Clone, Copy, Debug)]
pub enum OverlayView<'a> {
    /// Help, scrolled down `scroll` rows.
    Help {
        scroll: u16,
    },
    Picker(&'a PickerView),
    /// The policy picker, the `selected` row marked.
    Policies {
        selected: usize,
    },
    /// The "prove it" card.
    Proof(&'a ProofView),
    Knobs(&'a Knobs),
}

/// Everything one frame shows.
#[derive(Debug)]
pub struct Screen<'a> {
    /// One lab, or two or three in compare mode (left to right as `--compare` names them).
    pub panels: &'a [Snapshot],
    pub log: &'a [(tracing::Level, String)],
    pub status: Option<&'a str>,
    pub theme: Theme,
    /// A scenario playing in the dashboard.
    pub narration: Option<&'a Narration>,
    /// The overlay open, if any: one at a time.
    pub overlay: Option<OverlayView<'a>>,
    /// The pinned evidence card.
    pub evidence: Option<&'a EvidenceView>,
    /// Each panel's lanes over the run (empty: classify what the snapshot carries).
    pub lanes: &'a [LaneSource<'a>],
    /// Time travel: the moment shown, of how many.
    pub travel: Option<header::Travel>,
    /// How far back time travel reaches (`None`: nothing to travel to yet).
    pub reach: Option<header::Reach>,
    /// The selected event, explained.
    pub event: Option<&'a EventCard>,
    /// Presenter mode: fewer panes, wider lanes, a bigger verdict.
    pub present: bool,
    /// Predict, then reveal: the verdict stays hidden.
    pub hide_verdict: bool,
    /// The condition explained on the invariant panel (keys 1–5).
    pub explained: Option<Condition>,
    /// In a lab of replicas, the replica the replica keys act on.
    pub replica: ReplicaId,
}

impl<'a> Screen<'a> {
    /// A screen of `panels` and nothing else on it (benches, recordings).
    pub fn of(panels: &'a [Snapshot], theme: Theme) -> Screen<'a> {
        Screen {
            panels,
            log: &[],
            status: None,
            theme,
            narration: None,
            overlay: None,
            evidence: None,
            lanes: &[],
            travel: None,
            reach: None,
            event: None,
            present: false,
            hide_verdict: false,
            explained: None,
            replica: replicas::first(),
        }
    }
}

/// Draws a frame of a recorded scenario: the labs, the narration, a closing line.
pub fn draw_still(frame: &mut Frame, still: &crate::record::Still) {
    let screen = Screen {
        status: still.status,
        narration: Some(still.narration),
        ..Screen::of(still.panels, Theme { color: true })
    };
    draw(frame, &screen);
}

/// Draws the screen; returns where each panel's lanes went (for the mouse).
pub fn draw(frame: &mut Frame, screen: &Screen) -> Drawn {
    let area = frame.area();
    let theme = &screen.theme;
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let [middle] = Layout::vertical([Constraint::Length(3)])
            .flex(Flex::Center)
            .areas(area);
        let text = vec![
            Line::styled("forkscope", theme.title()),
            Line::raw(format!(
                "enlarge the terminal to at least {MIN_WIDTH}×{MIN_HEIGHT}"
            )),
            Line::styled(
                format!("now {}×{} · q quits", area.width, area.height),
                theme.dim(),
            ),
        ];
        frame.render_widget(Paragraph::new(text).centered(), middle);
        return Drawn::default();
    }
    let Some(first) = screen.panels.first() else {
        return Drawn::default();
    };
    let [top, body, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(area);
    let compare = screen.panels.len() > 1;
    header::render(
        frame,
        top,
        first,
        compare,
        screen.travel,
        screen.reach,
        theme,
    );
    let body = match screen.event {
        Some(card) if body.height >= 14 + event_card::height(card, body.width) => {
            let [body, pane] = Layout::vertical([
                Constraint::Fill(1),
                Constraint::Length(event_card::height(card, body.width)),
            ])
            .areas(body);
            event_card::render(frame, pane, card, theme);
            body
        }
        _ => body,
    };
    let evidence = screen.evidence.filter(|_| !screen.hide_verdict);
    // The card repeats a verdict the panes already show: it gets room only after them (two
    // columns need more rows than one).
    // A lab of replicas has its replicas pane to fit as well.
    let panes_need = match (compare, first.replicas.is_some()) {
        (true, _) => 22,
        (false, true) => 20,
        (false, false) => 16,
    };
    // A screen too short for the card beneath its panes (60×20) keeps its lanes: the card
    // waits for room (a resize), and the invariant pane says the same first violation.
    let mut card_drawn = false;
    let body = match evidence {
        Some(e) if body.height >= panes_need + evidence::height(e, body.width) => {
            let [body, pane] = Layout::vertical([
                Constraint::Fill(1),
                Constraint::Length(evidence::height(e, body.width)),
            ])
            .areas(body);
            evidence::render(frame, pane, e, theme);
            card_drawn = true;
            body
        }
        _ => body,
    };
    let body = match screen.narration {
        Some(n) => {
            let [body, pane] =
                Layout::vertical([Constraint::Fill(1), Constraint::Length(narration::HEIGHT)])
                    .areas(body);
            narration::render(frame, pane, n, theme);
            body
        }
        None => body,
    };
    let mut drawn = Vec::new();
    if compare && screen.panels.len() > 2 && body.width < MIN_WIDTH_THREE {
        draw_too_narrow(frame, body, screen, theme);
    } else if compare {
        let count = u32::try_from(screen.panels.len()).unwrap_or(u32::MAX);
        let columns = Layout::horizontal(screen.panels.iter().map(|_| Constraint::Ratio(1, count)))
            .split(body);
        for (i, (snap, column)) in screen.panels.iter().zip(columns.iter()).enumerate() {
            let lanes = screen.lanes.get(i).copied();
            drawn.push(if screen.present {
                draw_present(frame, *column, snap, lanes, true, screen, theme)
            } else {
                draw_column(frame, *column, snap, lanes, screen, theme)
            });
        }
    } else {
        let lanes = screen.lanes.first().copied();
        drawn.push(if screen.present {
            draw_present(frame, body, first, lanes, false, screen, theme)
        } else {
            draw_single(frame, body, first, lanes, screen, theme)
        });
    }
    let of_replicas = first.replicas.is_some();
    let modern_only = first.protocols == forkscope_core::revision::Protocols::Modern;
    let keys = crate::tui::keys::footer(of_replicas, modern_only);
    footer::render(frame, bottom, screen.status, keys, theme);
    match screen.overlay {
        Some(OverlayView::Picker(p)) => picker::render(frame, body, p, theme),
        Some(OverlayView::Policies { selected }) => policies::render(frame, body, selected, theme),
        Some(OverlayView::Proof(p)) => proof::render(frame, body, p, theme),
        Some(OverlayView::Knobs(k)) => {
            let policies: Vec<_> = screen.panels.iter().map(|p| p.view.policy).collect();
            knobs::render(frame, body, k, &policies, theme);
        }
        Some(OverlayView::Help { scroll }) => {
            help::render(frame, body, scroll, (of_replicas, modern_only), theme);
        }
        None => {}
    }
    Drawn {
        lanes: drawn,
        evidence: card_drawn,
    }
}

/// Three labs on a terminal too narrow for three columns: what to do, and each lab's verdict
/// line as the checker wrote it.
fn draw_too_narrow(frame: &mut Frame, area: Rect, screen: &Screen, theme: &Theme) {
    let mut text = vec![
        Line::styled(
            format!(
                "{} labs side by side need {MIN_WIDTH_THREE} columns (now {})",
                screen.panels.len(),
                area.width
            ),
            theme.title(),
        ),
        Line::styled("widen the terminal, or m for one lab", theme.dim()),
        Line::raw(""),
    ];
    for snap in screen.panels {
        let mut badge = vec![header::policy_badge(snap.view.policy, theme)];
        let verdict = &snap.view.verdict;
        if screen.hide_verdict {
            text.push(Line::from(badge));
            text.push(Line::styled("verdict hidden (V reveals)", theme.dim()));
        } else {
            // The verdict's words (FORK, LOST, CLEAN) first, as each lab's own panel says them.
            badge.push(Span::raw("  "));
            badge.extend(invariant::verdict_fields(snap, theme).into_iter().flatten());
            text.push(Line::from(badge));
            text.push(Line::styled(verdict.headline.clone(), theme.text()));
        }
        text.push(Line::raw(""));
    }
    frame.render_widget(
        Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
        area,
    );
}

/// The server's side: its streams (its tasks, under 2026-07-28 alone), or in a lab of replicas
/// each replica and the store.
/// The replica chosen, and predict-then-reveal (the checker's word on each task waits for
/// `V`), are the screen's.
fn server_pane(frame: &mut Frame, area: Rect, snap: &Snapshot, screen: &Screen, theme: &Theme) {
    let (chosen, hidden) = (screen.replica, screen.hide_verdict);
    match &snap.replicas {
        Some(view) => {
            let session = snap.view.client.as_ref().and_then(|c| c.session);
            replicas::render(frame, area, view, &snap.recent, session, chosen, theme);
        }
        // 2026-07-28 alone has no session and no stream: its tasks are the server's state.
        None if snap.protocols == Protocols::Modern => {
            tasks::render(frame, area, snap, hidden, theme)
        }
        None => streams::render(frame, area, snap, theme),
    }
}

/// The invariant panel, or the card that hides it while a room predicts.
fn verdict_pane(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    hidden: bool,
    explained: Option<Condition>,
    theme: &Theme,
) {
    if hidden {
        presenter::render_hidden(frame, area, snap, theme);
    } else {
        invariant::render(frame, area, snap, explained, theme);
    }
}

/// Presenter mode: the verdict large, the lanes wide, the client's line; no log, no http. A
/// condition asked about (keys 1–5) is explained in a panel where the client's pane was (or
/// over the lanes, when the screen is too short for the client's).
fn draw_present(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    lanes: Option<LaneSource>,
    badge: bool,
    screen: &Screen,
    theme: &Theme,
) -> LanesDrawn {
    let hidden = screen.hide_verdict;
    let client_height = if area.height >= 22 { 7 } else { 0 };
    // The lanes keep room for a fork (two stream lanes and the client's): a short area gives
    // up the big letters first, then verdict rows. Rows the lanes can spare go to a verdict
    // that needs them, the same in every column of a comparison (so the panes line up).
    let wanted = screen
        .panels
        .iter()
        .map(|p| presenter::wanted_height(p, area.width))
        .max()
        .unwrap_or(presenter::HEIGHT);
    let verdict_height = area
        .height
        .saturating_sub(6 + client_height + u16::from(badge))
        .clamp(3, wanted);
    let [badge_area, verdict_area, lanes_area, client_area] = Layout::vertical([
        Constraint::Length(u16::from(badge)),
        Constraint::Length(verdict_height),
        Constraint::Fill(1),
        Constraint::Length(client_height),
    ])
    .areas(area);
    if badge {
        let line = Line::from(vec![header::policy_badge(snap.view.policy, theme)]).centered();
        frame.render_widget(line, badge_area);
    }
    if hidden {
        presenter::render_hidden(frame, verdict_area, snap, theme);
    } else {
        // Side by side, every lab's verdict is lettered the same: big when each can be.
        let letters = (screen.panels.len() > 1).then(|| {
            let sizes: Option<Vec<usize>> = screen
                .panels
                .iter()
                .map(|p| presenter::letter_size(p, verdict_area))
                .collect();
            sizes.and_then(|sizes| sizes.into_iter().max())
        });
        presenter::render_verdict(frame, verdict_area, snap, theme, letters);
    }
    let lanes_area = Rect {
        height: lanes_area.height.min(9),
        ..lanes_area
    };
    let drawn = lanes::render(frame, lanes_area, snap, lanes, theme);
    let explained = screen.explained;
    match (explained, client_height > 0) {
        (Some(c), true) => invariant::render_explained(frame, client_area, snap, c, theme),
        (Some(c), false) => {
            frame.render_widget(ratatui::widgets::Clear, lanes_area);
            invariant::render_explained(frame, lanes_area, snap, c, theme);
        }
        (None, true) => client::render(frame, client_area, snap, hidden, theme),
        (None, false) => {}
    }
    drawn
}

fn draw_single(
    frame: &mut Frame,
    body: Rect,
    snap: &Snapshot,
    lanes: Option<LaneSource>,
    screen: &Screen,
    theme: &Theme,
) -> LanesDrawn {
    // The invariant panel (conditions, verdict, its sentence) never gives way; lanes shrink
    // first, then the log disappears.
    // The client's tool-call line needs the seventh row; only short terminals (under 28 rows)
    // give it up.
    // A lab of replicas needs two rows a replica (its state, what it sends) and the store's.
    let of_replicas = snap.replicas.is_some();
    let top_height: u16 = match (of_replicas, body.height) {
        (true, 26..) => 9,
        (true, _) => 8,
        (false, 26..) => 7,
        (false, _) => 6,
    };
    // A tall screen gives the invariant panel room for the conditions' explanations.
    let bottom_wanted: u16 = if body.height >= 36 { 16 } else { 11 };
    // Between 28 and 32 rows the lanes keep their minimum, so the call line and the log fit.
    // Replicas have more lanes: a stream has one per replica that sent on it.
    let wanted_lanes = match (of_replicas, body.height) {
        (_, 34..) => 8,
        (true, 26..) => 7,
        (_, 30..) => 6,
        _ => 5,
    };
    // Never fewer than three lanes: a fork is two stream lanes receiving at once, and the
    // client's lane shows what it applied.
    let lanes_height = body
        .height
        .saturating_sub(top_height + bottom_wanted)
        .clamp(5, wanted_lanes);
    let bottom_height = body
        .height
        .saturating_sub(top_height + lanes_height)
        .min(bottom_wanted);
    let log_height = body
        .height
        .saturating_sub(top_height + lanes_height + bottom_height);
    // A log too short to read gives its rows to the invariant panel, not to blank space.
    let (log_height, bottom_height) = if log_height >= 4 {
        (log_height, bottom_height)
    } else {
        (0, bottom_height + log_height)
    };
    let [top, lanes_area, bottom, log_area] = Layout::vertical([
        Constraint::Length(top_height),
        Constraint::Length(lanes_height),
        Constraint::Length(bottom_height),
        Constraint::Length(log_height),
    ])
    .areas(body);
    let share = if of_replicas { 60 } else { 52 };
    let [streams_area, client_area] =
        Layout::horizontal([Constraint::Percentage(share), Constraint::Fill(1)]).areas(top);
    server_pane(frame, streams_area, snap, screen, theme);
    client::render(frame, client_area, snap, screen.hide_verdict, theme);
    let drawn = lanes::render(frame, lanes_area, snap, lanes, theme);
    // Narrow: the invariant panel gets the whole width; the exchanges give way.
    if bottom.width >= 100 {
        let [invariant_area, http_area] =
            Layout::horizontal([Constraint::Percentage(55), Constraint::Fill(1)]).areas(bottom);
        verdict_pane(
            frame,
            invariant_area,
            snap,
            screen.hide_verdict,
            screen.explained,
            theme,
        );
        exchanges::render(frame, http_area, snap, theme);
    } else {
        verdict_pane(
            frame,
            bottom,
            snap,
            screen.hide_verdict,
            screen.explained,
            theme,
        );
    }
    if log_height > 0 {
        logs::render(frame, log_area, screen.log, screen.travel.is_some(), theme);
    }
    drawn
}

fn draw_column(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    lanes: Option<LaneSource>,
    screen: &Screen,
    theme: &Theme,
) -> LanesDrawn {
    let hidden = screen.hide_verdict;
    // The client's side effects and duplicates always show (two rows at least); a tall
    // terminal gives it its whole pane. The http line is the newest exchange.
    let (streams_height, client_height, http_height) = match (snap.replicas.is_some(), area.height)
    {
        (true, 30..) => (8, 5, 1),
        (true, 22..) => (6, 4, 0),
        (false, 30..) => (5, 7, 1),
        (false, 22..) => (5, 4, 1),
        (_, _) => (4, 3, 0),
    };
    // The verdict keeps its counts and its sentence whole: where they need the rows (a long
    // verdict, an evidence card open), the streams and then the http line give way, alike in
    // every column so the panes line up.
    let wanted = screen
        .panels
        .iter()
        .map(|p| invariant::rows_wanted(p, area.width, theme))
        .max()
        .unwrap_or(0);
    // A lab running 2026-07-28 tasks wants their lanes too: two more rows when the screen is
    // tall enough to give them.
    let lanes_height = if area.height >= 30 && lanes::shows_tasks(snap, lanes) {
        7
    } else {
        5
    };
    let room = |streams: u16, http: u16| {
        area.height
            .saturating_sub(1 + streams + client_height + lanes_height + http)
    };
    let (streams_height, http_height) = if room(streams_height, http_height) >= wanted {
        (streams_height, http_height)
    } else if room(0, http_height) >= wanted {
        (0, http_height)
    } else {
        (0, 0)
    };
    let [
        badge,
        streams_area,
        client_area,
        lanes_area,
        invariant_area,
        http_area,
    ] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(streams_height),
        Constraint::Length(client_height),
        Constraint::Length(lanes_height),
        Constraint::Fill(1),
        Constraint::Length(http_height),
    ])
    .areas(area);
    let line = Line::from(vec![header::policy_badge(snap.view.policy, theme)]).centered();
    frame.render_widget(line, badge);
    server_pane(frame, streams_area, snap, screen, theme);
    client::render(frame, client_area, snap, hidden, theme);
    let drawn = lanes::render(frame, lanes_area, snap, lanes, theme);
    verdict_pane(frame, invariant_area, snap, hidden, screen.explained, theme);
    frame.render_widget(
        exchanges::summary(snap, usize::from(http_area.width), theme),
        http_area,
    );
    drawn
}
