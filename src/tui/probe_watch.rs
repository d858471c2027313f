//! `forkscope probe URL --watch`: the battery as it runs, one case at a time. The target
//! server's connections are lanes on one arrival axis, each event a mark on its lane, the
//! events that break the rule marked ✕ in red, and the verdict in the checker's words.
//!
//! The probe runs on its own task and reports [`Progress`]; this view only draws what it was
//! told, so what it shows is exactly what the text report says.

use super::theme::Theme;
use crate::probe::{self, CaseReport, Options, Outcome, ProbeError, Progress, Report};
use forkscope_core::probe::{Answer, Connection, End, Item};
use ratatui::Frame;
use ratatui::crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

/// Why `--watch` stopped without a report.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("--watch needs a terminal; leave it out for the text report")]
    NoTerminal,
    #[error("the terminal failed: {0}")]
    Terminal(std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Probe(#[from] ProbeError),
}

#[derive(Debug, Clone)]
struct Header {
    server: String,
    protocol: String,
    call_tool: Option<String>,
    standalone: String,
}

/// What the view knows of a probe run.
#[derive(Debug)]
pub struct Watch {
    url: String,
    header: Option<Header>,
    cases: Vec<&'static str>,
    reports: Vec<Option<CaseReport>>,
    running: Option<usize>,
    selected: usize,
    /// The selection follows the running case until a key moves it.
    follow: bool,
    done: bool,
    theme: Theme,
}

impl Watch {
    pub fn new(url: &str, theme: Theme) -> Watch {
        Watch {
            url: url.to_owned(),
            header: None,
            cases: Vec::new(),
            reports: Vec::new(),
            running: None,
            selected: 0,
            follow: true,
            done: false,
            theme,
        }
    }

    pub fn apply(&mut self, progress: Progress) {
        match progress {
            Progress::Discovered {
                server,
                protocol,
                call_tool,
                standalone,
                cases,
            } => {
                self.header = Some(Header {
                    server,
                    protocol,
                    call_tool,
                    standalone,
                });
                self.reports = vec![None; cases.len()];
                self.cases = cases;
            }
            Progress::Started(name) => {
                self.running = self.cases.iter().position(|c| *c == name);
                if self.follow {
                    // Keep the last finished case on screen while the next one runs.
                    if let Some(i) = self.running {
                        if i == 0 {
                            self.selected = 0;
                        }
                    }
                }
            }
            Progress::Finished(report) => {
                if let Some(i) = self.cases.iter().position(|c| *c == report.case) {
                    self.reports[i] = Some(*report);
                    if self.follow {
                        self.selected = i;
                    }
                }
                self.running = None;
            }
        }
    }

    pub fn finish(&mut self) {
        self.done = true;
        self.running = None;
    }

    /// Handles a key; says whether to quit.
    pub fn key(&mut self, key: KeyEvent) -> bool {
        let last = self.cases.len().saturating_sub(1);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return true,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Up | KeyCode::Char('k') => {
                self.follow = false;
                self.selected = self.selected.saturating_sub(1);
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.follow = false;
                self.selected = (self.selected + 1).min(last);
            }
            KeyCode::Home => {
                self.follow = false;
                self.selected = 0;
            }
            KeyCode::End => {
                self.follow = false;
                self.selected = last;
            }
            KeyCode::Char('f') => self.follow = true,
            // The next violated case after the selected one, wrapping.
            KeyCode::Char('v') | KeyCode::Tab => {
                let n = self.cases.len();
                if let Some(i) = (1..=n).map(|d| (self.selected + d) % n.max(1)).find(|&i| {
                    matches!(
                        self.reports.get(i),
                        Some(Some(CaseReport {
                            outcome: Outcome::Violated,
                            ..
                        }))
                    )
                }) {
                    self.follow = false;
                    self.selected = i;
                }
            }
            _ => {}
        }
        false
    }

    /// The cases finished so far, as a report (all of them once the run is over).
    pub fn report(&self) -> Option<Report> {
        let header = self.header.as_ref()?;
        Some(Report {
            url: self.url.clone(),
            server: header.server.clone(),
            protocol: header.protocol.clone(),
            call_tool: header.call_tool.clone(),
            standalone: header.standalone.clone(),
            cases: self.reports.iter().flatten().cloned().collect(),
            expected: None,
        })
    }

    pub fn render(&self, frame: &mut Frame) {
        let t = &self.theme;
        let [top, body, bottom] = Layout::vertical([
            Constraint::Length(2),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        let mut title = vec![
            Span::styled(" forkscope probe ", t.title()),
            Span::raw(self.url.clone()),
        ];
        let second = match &self.header {
            Some(h) => {
                title.push(Span::styled(
                    format!("  {} ({})", h.server, h.protocol),
                    t.dim(),
                ));
                format!(
                    " call tool: {} · standalone: {}",
                    h.call_tool.as_deref().unwrap_or("none"),
                    h.standalone
                )
            }
            None => " opening a session…".into(),
        };
        frame.render_widget(
            Paragraph::new(vec![Line::from(title), Line::styled(second, t.dim())]),
            top,
        );
        let list_width = (self.cases.iter().map(|c| c.len()).max().unwrap_or(20) as u16 + 6)
            .min(body.width / 3)
            .max(12);
        let [list, detail] =
            Layout::horizontal([Constraint::Length(list_width), Constraint::Min(0)]).areas(body);
        self.render_list(frame, list);
        self.render_detail(frame, detail);
        self.render_footer(frame, bottom);
    }

    fn render_list(&self, frame: &mut Frame, area: Rect) {
        let t = &self.theme;
        let block = Block::bordered().title(" cases ").border_style(t.border());
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let rows = inner.height as usize;
        // Keep the selected case in view.
        let first = self.selected.saturating_sub(rows.saturating_sub(1));
        let lines: Vec<Line> = self
            .cases
            .iter()
            .enumerate()
            .skip(first)
            .take(rows)
            .map(|(i, name)| {
                let (mark, style) = match (&self.reports[i], self.running == Some(i)) {
                    (_, true) => ("…", t.warn()),
                    (Some(r), _) => match r.outcome {
                        Outcome::Holds => ("✓", t.good()),
                        Outcome::Violated => ("✗", t.bad()),
                        Outcome::NotRun => ("–", t.dim()),
                    },
                    (None, false) => (" ", t.dim()),
                };
                let mut line = Line::from(vec![
                    Span::styled(format!("{mark} "), style),
                    Span::raw(name.to_string()),
                ]);
                if i == self.selected {
                    line =
                        line.style(Style::new().add_modifier(ratatui::style::Modifier::REVERSED));
                }
                line
            })
            .collect();
        frame.render_widget(Paragraph::new(lines), inner);
    }

    fn render_detail(&self, frame: &mut Frame, area: Rect) {
        let t = &self.theme;
        let name = self.cases.get(self.selected).copied().unwrap_or("");
        let block = Block::bordered()
            .title(format!(" {name} "))
            .border_style(t.border());
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let does = probe::cases::CASES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, d)| *d)
            .unwrap_or("");
        let Some(Some(report)) = self.reports.get(self.selected) else {
            let waiting = if self.running == Some(self.selected) {
                "running…"
            } else if self.done || self.header.is_none() {
                ""
            } else {
                "waiting for its turn"
            };
            frame.render_widget(
                Paragraph::new(vec![Line::styled(does, t.dim()), Line::raw(waiting)])
                    .wrap(Wrap { trim: false }),
                inner,
            );
            return;
        };
        let (badge, style) = match report.outcome {
            Outcome::Holds => ("holds", t.verdict(true)),
            Outcome::Violated => ("VIOLATED", t.verdict(false)),
            Outcome::NotRun => ("not run", t.dim()),
        };
        let mut head = vec![
            Line::styled(does, t.dim()),
            Line::from(vec![
                Span::styled(badge, style),
                Span::raw("  "),
                Span::raw(match report.outcome {
                    Outcome::NotRun => report.why.clone(),
                    _ => report.says.clone(),
                }),
            ]),
        ];
        if !matches!(report.outcome, Outcome::NotRun) {
            head.push(Line::styled(report.why.clone(), t.dim()));
        }
        let head_height = wrapped_height(&head, inner.width).min(inner.height);
        let [head_area, lanes_area, legend_area] = Layout::vertical([
            Constraint::Length(head_height),
            Constraint::Min(0),
            Constraint::Length(u16::from(inner.height > head_height + 4)),
        ])
        .areas(inner);
        frame.render_widget(Paragraph::new(head).wrap(Wrap { trim: false }), head_area);
        if report.connections.is_empty() {
            return;
        }
        // Lanes are cut to the width, never wrapped; the evidence below them wraps.
        let lane_lines = lanes(&report.connections, &report.marked, lanes_area.width, t);
        let lane_height = (lane_lines.len() as u16 + 1).min(lanes_area.height);
        let [lane_area, evidence_area] =
            Layout::vertical([Constraint::Length(lane_height), Constraint::Min(0)])
                .areas(lanes_area);
        let mut with_gap = vec![Line::raw("")];
        with_gap.extend(lane_lines);
        frame.render_widget(Paragraph::new(with_gap), lane_area);
        let mut lines = vec![Line::raw("")];
        for conn in &report.connections {
            lines.push(Line::raw(probe::evidence(conn)));
        }
        frame.render_widget(
            Paragraph::new(lines).wrap(Wrap { trim: false }),
            evidence_area,
        );
        frame.render_widget(
            Paragraph::new(Line::styled(
                "▪ event  · priming  ✕ breaks the rule  ✂ dropped by the probe  ┤ closed by the server  → open",
                t.dim(),
            )),
            legend_area,
        );
    }

    fn render_footer(&self, frame: &mut Frame, area: Rect) {
        let t = &self.theme;
        let finished = self.reports.iter().flatten().count();
        let violated = self
            .reports
            .iter()
            .flatten()
            .filter(|r| matches!(r.outcome, Outcome::Violated))
            .count();
        let state = if self.done {
            format!("done: {finished} cases, {violated} violated")
        } else {
            format!("{finished}/{} cases, {violated} violated", self.cases.len())
        };
        let line = Line::from(vec![
            Span::styled(" ↑↓", t.key()),
            Span::raw(" case  "),
            Span::styled("v", t.key()),
            Span::raw(" next violated  "),
            Span::styled("f", t.key()),
            Span::raw(" follow  "),
            Span::styled("q", t.key()),
            Span::raw(" quit   "),
            Span::styled(state, if violated > 0 { t.bad() } else { t.good() }),
        ]);
        frame.render_widget(Paragraph::new(line), area);
    }
}

fn wrapped_height(lines: &[Line], width: u16) -> u16 {
    let width = usize::from(width.max(1));
    lines
        .iter()
        .map(|l| l.width().max(1).div_ceil(width) as u16)
        .sum()
}

/// One lane per connection on a shared arrival axis: where it opened, each event it received,
/// the marked ones ✕, and how it ended.
fn lanes(connections: &[Connection], marked: &[u64], width: u16, t: &Theme) -> Vec<Line<'static>> {
    let label_width = (usize::from(width) / 3).clamp(8, 34);
    let axis = usize::from(width).saturating_sub(label_width + 3).max(4);
    let last = connections
        .iter()
        .flat_map(|c| {
            c.answer
                .opened()
                .into_iter()
                .chain(c.events.iter().map(|r| r.order))
        })
        .max()
        .unwrap_or(1)
        .max(2);
    let col = |order: u64| ((order.saturating_sub(1)) as usize * (axis - 1)) / (last as usize - 1);
    connections
        .iter()
        .map(|c| {
            let mut label = format!("{} {}", c.label, c.request);
            if label.chars().count() > label_width {
                label = label.chars().take(label_width - 1).collect::<String>() + "…";
            }
            let mut spans = vec![Span::raw(format!("{label:label_width$}  "))];
            let Some(opened) = c.answer.opened() else {
                let said = match &c.answer {
                    Answer::Rejected { status, reason } => {
                        format!("{status} {}", reason.as_deref().unwrap_or(""))
                    }
                    Answer::Json { status, .. } => format!("{status} JSON"),
                    Answer::NoAnswer { why } => why.clone(),
                    Answer::Stream { .. } => String::new(),
                };
                spans.push(Span::styled(said, t.warn()));
                return Line::from(spans);
            };
            // Each cell: 0 nothing, 1 the lane, 2 priming, 3 an event, 4 a marked event.
            let mut cells = vec![0u8; axis];
            let start = col(opened);
            let end = match c.end {
                End::Open => axis - 1,
                _ => c.events.last().map_or(start, |r| col(r.order)),
            };
            for cell in cells.iter_mut().take(end + 1).skip(start) {
                *cell = 1;
            }
            for r in &c.events {
                let at = col(r.order);
                let kind = if marked.contains(&r.order) {
                    4
                } else if r.item == Item::Priming {
                    2
                } else {
                    3
                };
                cells[at] = cells[at].max(kind);
            }
            let mut run = String::new();
            let mut run_kind = 255u8;
            let style_of = |k: u8| match k {
                4 => t.bad(),
                3 => t.accent(),
                _ => t.dim(),
            };
            for &k in &cells {
                if k != run_kind && !run.is_empty() {
                    spans.push(Span::styled(std::mem::take(&mut run), style_of(run_kind)));
                }
                run_kind = k;
                run.push(match k {
                    0 => ' ',
                    1 => '─',
                    2 => '·',
                    3 => '▪',
                    _ => '✕',
                });
            }
            if !run.is_empty() {
                spans.push(Span::styled(run, style_of(run_kind)));
            }
            spans.push(Span::styled(
                match c.end {
                    End::Open => "→",
                    End::DroppedByProbe => "✂",
                    End::ClosedByServer => "┤",
                    End::Broken => "✗",
                },
                t.dim(),
            ));
            Line::from(spans)
        })
        .collect()
}

/// Runs the battery under the view; returns the report of the cases run (all of them unless
/// the user quit early).
pub fn run(opts: &Options) -> Result<Report, WatchError> {
    use futures_util::StreamExt;
    if !super::has_terminal() {
        return Err(WatchError::NoTerminal);
    }
    // Bad input is refused before the screen is taken.
    probe::validate(opts)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WatchError::Runtime)?;
    let mut terminal = ratatui::init();
    super::install_panic_exit();
    let result = runtime.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let owned = opts.clone();
        let mut task = tokio::spawn(async move {
            probe::probe_with(&owned, move |p| {
                let _ = tx.send(p);
            })
            .await
        });
        let mut watch = Watch::new(&opts.url, Theme::from_env());
        let mut events = EventStream::new();
        let mut outcome: Option<Result<Report, ProbeError>> = None;
        loop {
            {
                let _frame = super::TERMINAL.lock();
                terminal
                    .draw(|f| watch.render(f))
                    .map_err(WatchError::Terminal)?;
            }
            tokio::select! {
                Some(p) = rx.recv() => watch.apply(p),
                joined = &mut task, if outcome.is_none() => {
                    // Let every progress message already sent be shown first.
                    while let Ok(p) = rx.try_recv() {
                        watch.apply(p);
                    }
                    watch.finish();
                    match joined {
                        Ok(Err(e)) => return Err(WatchError::Probe(e)),
                        Ok(Ok(report)) => outcome = Some(Ok(report)),
                        Err(e) => outcome = Some(Err(ProbeError::BadUrl(format!("the probe task failed: {e}")))),
                    }
                }
                event = events.next() => match event {
                    Some(Ok(Event::Key(key))) if key.is_press() => {
                        if watch.key(key) {
                            break;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(WatchError::Terminal(e)),
                    None => break,
                },
            }
        }
        task.abort();
        match outcome {
            Some(Ok(report)) => Ok(report),
            Some(Err(e)) => Err(WatchError::Probe(e)),
            // Quit before the end: the cases run so far.
            None => watch.report().ok_or(WatchError::Probe(ProbeError::Interrupted)),
        }
    });
    ratatui::restore();
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::probe::Received;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn event(item: Item, order: u64) -> Received {
        Received {
            item,
            event_id: None,
            order,
        }
    }

    fn forked() -> CaseReport {
        let tick = |n| Item::Numbered {
            channel: "c".into(),
            n,
        };
        CaseReport {
            case: "resume-while-old-open",
            does: "resume while the old connection is still open",
            outcome: Outcome::Violated,
            verdict: Some("two_live_streams"),
            status: None,
            says: "two live streams: the old connection received 2 events after the new one opened (1 there)".into(),
            why: "the resume attached a second stream while the first still received events".into(),
            marked: vec![6, 8],
            connections: vec![
                Connection {
                    label: "A".into(),
                    request: "GET".into(),
                    answer: Answer::Stream { status: 200, opened: 1 },
                    events: vec![event(Item::Priming, 2), event(tick(1), 3), event(tick(2), 4), event(tick(3), 6), event(tick(4), 8)],
                    end: End::Open,
                },
                Connection {
                    label: "B".into(),
                    request: "GET Last-Event-ID: 2".into(),
                    answer: Answer::Stream { status: 200, opened: 5 },
                    events: vec![event(tick(3), 7)],
                    end: End::Open,
                },
            ],
        }
    }

    #[test]
    fn a_violated_case_shows_its_lanes_and_marks_the_breaking_events() {
        let mut watch = Watch::new("http://127.0.0.1:8931/mcp", Theme { color: false });
        watch.apply(Progress::Discovered {
            server: "forkscope 0.1.0".into(),
            protocol: "2025-11-25".into(),
            call_tool: Some("progress_task".into()),
            standalone: "the server's own events".into(),
            cases: vec!["standalone-resume", "resume-while-old-open"],
        });
        watch.apply(Progress::Started("resume-while-old-open"));
        watch.apply(Progress::Finished(Box::new(forked())));
        watch.finish();
        let mut terminal = Terminal::new(TestBackend::new(110, 24)).unwrap();
        terminal.draw(|f| watch.render(f)).unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .chunks(110)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        assert!(screen.contains("✗ resume-while-old-open"), "{screen}");
        assert!(screen.contains("VIOLATED  two live streams"), "{screen}");
        let lane_a = screen.lines().find(|l| l.contains("A GET ")).unwrap();
        assert_eq!(lane_a.matches('✕').count(), 2, "{screen}");
        let lane_b = screen
            .lines()
            .find(|l| l.contains("B GET Last-Event-ID"))
            .unwrap();
        assert!(lane_b.contains('▪') && !lane_b.contains('✕'), "{screen}");
        assert!(screen.contains("done: 1 cases, 1 violated"), "{screen}");
        // A tiny terminal draws without panicking.
        let mut tiny = Terminal::new(TestBackend::new(20, 5)).unwrap();
        tiny.draw(|f| watch.render(f)).unwrap();
    }

    #[test]
    fn keys_move_between_cases_and_quit() {
        let mut watch = Watch::new("u", Theme { color: false });
        watch.apply(Progress::Discovered {
            server: "s".into(),
            protocol: "p".into(),
            call_tool: None,
            standalone: "x".into(),
            cases: vec!["standalone-resume", "resume-while-old-open", "bogus-cursor"],
        });
        watch.apply(Progress::Finished(Box::new(forked())));
        assert_eq!(watch.selected, 1, "the selection follows the finished case");
        let press = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert!(!watch.key(press(KeyCode::Up)));
        assert_eq!(watch.selected, 0);
        watch.apply(Progress::Started("bogus-cursor"));
        assert_eq!(watch.selected, 0, "a moved selection stays put");
        assert!(!watch.key(press(KeyCode::Char('v'))));
        assert_eq!(watch.selected, 1, "v finds the violated case");
        assert!(watch.key(press(KeyCode::Char('q'))));
        assert!(watch.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert_eq!(watch.report().unwrap().cases.len(), 1);
    }
}
