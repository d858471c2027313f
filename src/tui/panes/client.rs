//! The client's side: bound stream identity, cursor, token, retry budget, side effects.

use super::{block, seconds, short_id};
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::AnomalyKind;
use forkscope_core::StreamIdentity;
use forkscope_core::client::{Phase, RequestPhase};
use forkscope_core::revision::Protocols;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// `hidden`: predict, then reveal — the applied and duplicate counts are the verdict's, so they
/// wait too.
pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, hidden: bool, theme: &Theme) {
    if snap.protocols == Protocols::Modern {
        return render_modern(frame, area, snap, hidden, theme);
    }
    let Some(client) = &snap.view.client else {
        frame.render_widget(
            Paragraph::new("no client").block(block("client", theme)),
            area,
        );
        return;
    };
    let label = |s: &'static str| Span::styled(format!("{s:<8}"), theme.dim());
    let phase = match client.phase {
        Phase::Idle => Span::styled("idle", theme.dim()),
        Phase::Connected => Span::styled("connected", theme.good()),
        Phase::Reconnecting {
            attempt,
            next_at: Some(at),
            ..
        } => Span::styled(
            format!("reconnecting · attempt {} at {at}", attempt + 1),
            theme.warn(),
        ),
        Phase::Reconnecting {
            attempt,
            next_at: None,
            ..
        } => Span::styled(
            format!("reconnecting · attempt {attempt} in flight"),
            theme.warn(),
        ),
        Phase::GaveUp { at } => Span::styled(format!("gave up at {at}"), theme.bad()),
    };
    // Each line in full where it fits, else its short form: a narrow pane (80×24) keeps the
    // values and drops the words the glossary explains.
    let inner = area.width.saturating_sub(2) as usize;
    let fit = |forms: Vec<Vec<Span<'static>>>| {
        super::fit(forms.into_iter().map(Line::from).collect(), inner)
    };
    let bound = match (&client.bound_stream, client.reconciles) {
        (_, false) => Span::styled("unchecked: assumes continuity", theme.warn()),
        (Some(s), true) => Span::styled(
            format!("{s} (echoed)"),
            theme.stream(s.trim_start_matches('s').parse().unwrap_or(1)),
        ),
        (None, true) => Span::styled("none yet", theme.dim()),
    };
    let token: Vec<Span<'static>> = match (client.has_token, client.will_send_token) {
        (true, true) => ["✓ held · sent on reconnect", "✓ held, sent"]
            .map(|text| Span::styled(text, theme.good()))
            .into(),
        (true, false)
            if snap.view.config.identity == StreamIdentity::EventId
                && snap.view.policy == forkscope_core::Policy::Fenced =>
        {
            [
                "✗ header STRIPPED · the id still carries it",
                "✗ STRIPPED · the id carries it",
                "✗ STRIPPED, id has it",
            ]
            .map(|text| Span::styled(text, theme.warn()))
            .into()
        }
        (true, false) => [
            "✗ will be STRIPPED on the next reconnect",
            "✗ STRIPPED on reconnect",
            "✗ STRIPPED",
        ]
        .map(|text| Span::styled(text, theme.bad()))
        .into(),
        (false, _) => vec![Span::styled("– none", theme.dim())],
    };
    let duplicates = snap.view.verdict.count(AnomalyKind::Duplicate);
    // Connected, the budget is full and says little; a new session restarts stream ids at s1,
    // and a second "s1" would look like an id reused across streams (condition 3): say so.
    let phase_forms: Vec<Vec<Span<'static>>> = match client.renewed {
        Some((_, why)) if client.phase == Phase::Connected => {
            let new = |text: &str| Span::styled(text.to_owned(), theme.accent());
            vec![
                vec![
                    label("phase"),
                    phase.clone(),
                    new(&format!("  new session ({why}): ids from s1")),
                ],
                vec![
                    label("phase"),
                    phase.clone(),
                    new("  new session: ids from s1"),
                ],
                // Narrow: a new session is connected by definition; the ids matter more.
                vec![label("phase"), new("new session: ids from s1")],
            ]
        }
        _ => [
            format!(
                "  budget {} of {}",
                seconds(client.budget_left_ms),
                seconds(snap.view.config.retry.budget_ms)
            ),
            format!("  budget {}", seconds(client.budget_left_ms)),
        ]
        .into_iter()
        .map(|text| {
            vec![
                label("phase"),
                phase.clone(),
                Span::styled(text, theme.dim()),
            ]
        })
        // Narrow (60×20): the phase alone; the budget is full while connected.
        .chain(std::iter::once(vec![label("phase"), phase.clone()]))
        .collect(),
    };
    let cursor = Span::raw(
        client
            .cursor
            .as_deref()
            .map_or_else(|| "–".into(), short_id),
    );
    let short_bound = match &bound.content {
        text if text.starts_with("unchecked") => Span::styled("unchecked", bound.style),
        _ => bound.clone(),
    };
    // A short pane (compare mode) keeps what the lesson needs: side effects and duplicates,
    // then the cursor, the phase, the token; in their usual order.
    // The owed line comes next (the verdict sums it up on a short pane), but a running tool
    // call outranks it.
    let rows = usize::from(area.height.saturating_sub(2));
    let order = if client.request.is_some() {
        [3, 1, 0, 2, 4, 5]
    } else {
        [3, 1, 0, 2, 5, 4]
    };
    let owed_has_row = order.iter().take(rows).any(|&line| line == 5);
    let lines = vec![
        fit(phase_forms),
        // The cursor first: a narrow pane cuts the explanation of the binding, not the value.
        fit([bound, short_bound]
            .into_iter()
            .map(|bound| {
                vec![
                    label("cursor"),
                    cursor.clone(),
                    Span::styled("  bound ", theme.dim()),
                    bound,
                ]
            })
            .collect()),
        fit(token
            .into_iter()
            .map(|token| vec![label("token"), token])
            .collect()),
        // Whole fields, duplicates before skipped: the count the lesson is about stays.
        {
            let applied = vec![
                label("applied"),
                // Hidden too while a room predicts: beside the other lab's, the count gives
                // the duplicates away.
                Span::raw(if hidden {
                    "?".to_owned()
                } else {
                    client.applied.to_string()
                }),
            ];
            let duplicates = |word: &'static str| {
                vec![
                    Span::styled(word, theme.dim()),
                    Span::styled(
                        if hidden {
                            "?".to_owned()
                        } else {
                            duplicates.to_string()
                        },
                        if hidden {
                            theme.dim()
                        } else if duplicates > 0 {
                            theme.bad()
                        } else {
                            theme.good()
                        },
                    ),
                ]
            };
            let skipped = vec![
                Span::styled("  skipped ", theme.dim()),
                Span::raw(client.replays_skipped.to_string()),
            ];
            // Where the owed line has no row (a short pane, the evidence card beneath), its
            // sum rides on this one: what arrived of what was owed.
            let counters = &snap.view.counters;
            let owed_sum = vec![
                Span::styled("  owed ", theme.dim()),
                Span::styled(
                    if hidden {
                        "?".to_owned()
                    } else {
                        format!("{}/{}", counters.owed_delivered, counters.owed)
                    },
                    if hidden || counters.owed_delivered == counters.owed {
                        theme.dim()
                    } else {
                        theme.warn()
                    },
                ),
            ];
            let mut forms = Vec::new();
            if !owed_has_row {
                forms.extend([
                    vec![
                        applied.clone(),
                        skipped.clone(),
                        duplicates("  duplicates "),
                        owed_sum.clone(),
                    ],
                    vec![
                        applied.clone(),
                        duplicates("  duplicates "),
                        owed_sum.clone(),
                    ],
                    vec![applied.clone(), duplicates("  dup "), owed_sum],
                ]);
            }
            forms.extend([
                vec![applied.clone(), skipped, duplicates("  duplicates ")],
                vec![applied.clone(), duplicates("  duplicates ")],
                vec![applied, duplicates("  dup ")],
            ]);
            let at = forms
                .iter()
                .position(|f| f.iter().flatten().map(Span::width).sum::<usize>() <= inner)
                .unwrap_or(forms.len() - 1);
            super::fields(forms[at].clone(), inner)
        },
        tool_call(client.request.as_ref(), theme, inner),
        owed(snap, hidden, theme, inner),
    ];
    let mut keep: Vec<usize> = order.into_iter().take(rows).collect();
    keep.sort_unstable();
    let lines: Vec<Line> = lines
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, l)| super::clip(l, inner))
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block("client", theme)), area);
}

/// Exactly once, or told: what the client was owed, what arrived, what can still arrive, and
/// what the checker settled as lost (silently) or undelivered (told). Counts only: the checker
/// judged them.
fn owed(snap: &Snapshot, hidden: bool, theme: &Theme, inner: usize) -> Line<'static> {
    let counters = &snap.view.counters;
    let verdict = &snap.view.verdict;
    let lost = verdict.count(AnomalyKind::Lost)
        + verdict.count(AnomalyKind::CallLost)
        + verdict.count(AnomalyKind::TaskLost);
    let told = verdict.count(AnomalyKind::Undelivered);
    let shown = |n: u64| {
        if hidden {
            "?".to_owned()
        } else {
            n.to_string()
        }
    };
    let field = |word: &'static str, n: u64, style| {
        vec![
            Span::styled(word, theme.dim()),
            Span::styled(shown(n), if hidden { theme.dim() } else { style }),
        ]
    };
    let delivered_style = if counters.owed_delivered == counters.owed {
        theme.good()
    } else {
        theme.text()
    };
    let mut fields = vec![
        vec![
            Span::styled(format!("{:<8}", "owed"), theme.dim()),
            Span::raw(shown(counters.owed)),
        ],
        field("  delivered ", counters.owed_delivered, delivered_style),
    ];
    if snap.view.owed_open > 0 {
        fields.push(field("  open ", snap.view.owed_open, theme.warn()));
    }
    if lost > 0 {
        fields.push(field("  lost ", lost, theme.bad()));
    }
    if told > 0 {
        fields.push(field("  told ", told, theme.warn()));
    }
    super::fields(fields, inner)
}

/// The latest tool call: how far it got, whether its stream was resumed, and its result. The
/// longest wording that fits: the outcome is what a narrow pane keeps.
fn tool_call(
    request: Option<&forkscope_core::client::RequestStream>,
    theme: &Theme,
    inner: usize,
) -> Line<'static> {
    let label = Span::styled(format!("{:<8}", "call"), theme.dim());
    let Some(r) = request else {
        return Line::from(vec![
            label,
            Span::styled("– none (x starts one)", theme.dim()),
        ]);
    };
    // The echoed stream, else the one its cursor names (`s3-5…`); bare ids name none.
    let stream = r
        .bound_stream
        .clone()
        .or_else(|| {
            let cursor = r.cursor.as_deref()?;
            let (stream, _) = cursor.split_once('-')?;
            stream.starts_with('s').then(|| stream.to_owned())
        })
        .map_or_else(String::new, |s| format!(" {s}"));
    let (state, short, style) = match r.phase {
        RequestPhase::Streaming => ("streaming".to_owned(), "…".to_owned(), theme.good()),
        RequestPhase::Resuming { attempt, .. } => (
            format!("resuming · attempt {}", attempt + 1),
            format!("↺ try {}", attempt + 1),
            theme.warn(),
        ),
        RequestPhase::Done => (
            "result ✓ once".to_owned(),
            "✓ once".to_owned(),
            theme.good(),
        ),
        RequestPhase::Failed => ("result LOST".to_owned(), "LOST".to_owned(), theme.bad()),
    };
    // `applied` counts the result too; a naive resume's replays show as more than all.
    let applied = r
        .applied
        .saturating_sub(u64::from(r.phase == RequestPhase::Done));
    let (progress, brief) = match r.steps {
        Some(steps) => (
            format!("{applied} of {steps} steps"),
            format!("{applied}/{steps}"),
        ),
        None => (format!("{} applied", r.applied), r.applied.to_string()),
    };
    let id = r.request_id;
    let resumed = |long: bool| match (r.resumes, long) {
        (0, _) => Vec::new(),
        (n, true) => vec![Span::styled(format!(" · ↺ resumed {n}×"), theme.accent())],
        (n, false) => vec![Span::styled(format!(" ↺{n}"), theme.accent())],
    };
    let form = |text: String, state: &str, long: bool| {
        let mut spans = vec![
            label.clone(),
            Span::raw(text),
            Span::styled(state.to_owned(), style),
        ];
        spans.extend(resumed(long));
        Line::from(spans)
    };
    let forms = vec![
        form(format!("#{id}{stream} · {progress} · "), &state, true),
        form(format!("#{id}{stream} · {brief} · "), &state, true),
        form(format!("#{id}{stream} {brief} "), &state, false),
        form(format!("#{id}{stream} {brief} "), &short, false),
        form(format!("{brief} "), &short, false),
    ];
    super::fit(forms, inner)
}

/// The client of a 2026-07-28 lab: no session, no cursor, no token — each call stands alone,
/// and what it holds is the task ids that reached it. Each line in full where it fits, else
/// shorter.
fn render_modern(frame: &mut Frame, area: Rect, snap: &Snapshot, hidden: bool, theme: &Theme) {
    // The whole run's counts are the checker's; known and ended, of the tasks the view holds.
    let counters = &snap.view.counters;
    let (made, found) = (counters.tasks_created, counters.tasks_found_again);
    let orphans = snap
        .view
        .verdict
        .count(forkscope_core::AnomalyKind::OrphanTask);
    let tasks = &snap.view.tasks;
    let known = tasks.iter().filter(|t| t.named).count();
    let ended = tasks.iter().filter(|t| t.ended.is_some()).count();
    let of = if (tasks.len() as u64) < made {
        format!(" of the last {}", tasks.len())
    } else {
        String::new()
    };
    let inner = usize::from(area.width.saturating_sub(2));
    let label = |s: &'static str| Span::styled(format!("{s:<8}"), theme.dim());
    let fit = |label: Span<'static>, forms: Vec<String>, style| {
        let forms = forms
            .into_iter()
            .map(|f| Line::from(vec![label.clone(), Span::styled(f, style)]))
            .collect();
        super::fit(forms, inner)
    };
    let mut lines = vec![
        fit(
            label("wire"),
            vec![
                "2026-07-28: no session, cursor or token".into(),
                "2026-07-28: no session".into(),
                "2026-07-28".into(),
            ],
            theme.text(),
        ),
        fit(
            label("tasks"),
            vec![
                format!("{made} made · {found} re-issue(s) found one by key"),
                format!("{made} made · {found} found by key"),
                format!("{made} · ↻{found}"),
            ],
            theme.text(),
        ),
        fit(
            label("ids"),
            vec![
                format!("{known} known to it · {ended} ended{of}"),
                format!("{known} known · {ended} ended{of}"),
                format!("{known} known · {ended} ■"),
            ],
            theme.text(),
        ),
    ];
    if !hidden {
        let (forms, style) = if orphans == 0 {
            (vec!["none orphaned".to_owned()], theme.good())
        } else {
            (
                vec![
                    format!("{orphans} orphaned: id never reached it"),
                    format!("{orphans} orphaned"),
                    format!("⊗{orphans}"),
                ],
                theme.bad(),
            )
        };
        lines.push(fit(label("owed"), forms, style));
    }
    frame.render_widget(Paragraph::new(lines).block(block("client", theme)), area);
}
