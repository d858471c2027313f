//! `forkscope probe URL --watch`: the battery as it runs, one case at a time. The target
//! server's connections are lanes on one arrival axis, each event a mark on its lane, the
//! events that break the rule marked ✕ in red, and the verdict in the checker's words.
//!
//! The probe runs on its own task and reports [`Progress`]; this view only draws what it was
//! told, so what it shows is exactly what the text report says.

mod lanes;

use crate::probe::{self, CaseReport, Options, Outcome, ProbeError, Progress, Report};
use crate::tui::theme::Theme;
use lanes::lanes;

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
        Some(Report::new(
            self.url.clone(),
            header.server.clone(),
            header.protocol.clone(),
            header.call_tool.clone(),
            header.standalone.clone(),
            self.reports.iter().flatten().cloned().collect(),
        ))
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
                        Outcome::NotExercised => ("○", t.dim()),
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
            Outcome::NotExercised => ("not exercised", t.dim()),
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
            // A case with no connection (a task case, a fault case): what it asked and was
            // answered, and the commands it ran.
            let mut lines = vec![Line::raw("")];
            lines.extend(report.notes.iter().map(|n| Line::raw(n.as_str())));
            frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), lanes_area);
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

/// Runs the battery under the view; returns the report of the cases run (all of them unless
/// the user quit early).
pub fn run(opts: &Options) -> Result<Report, WatchError> {
    use futures_util::StreamExt;
    if !crate::tui::has_terminal() {
        return Err(WatchError::NoTerminal);
    }
    // Bad input is refused before the screen is taken.
    probe::validate(opts)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WatchError::Runtime)?;
    let mut terminal = ratatui::init();
    crate::tui::install_panic_exit();
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
                let _frame = crate::tui::TERMINAL.lock();
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
mod tests;
