//! The top line: the policy (unmistakable), lab time, speed, pause, addresses; travelling, the
//! moment shown and how far back travel reaches. At every width: words and whole parts go
//! before a number would be cut.

use super::seconds;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::Policy;
use forkscope_core::revision::Protocols;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

pub fn policy_badge(policy: Policy, theme: &Theme) -> Span<'static> {
    let label = format!(" {} ", policy.name().to_uppercase());
    Span::styled(label, theme.policy_badge(policy.fences()))
}

/// A lab of one revision says which, shrinking before the title goes; a lab of both says
/// nothing (the default).
fn revision<'a>(protocols: Protocols, theme: &Theme) -> Part<'a> {
    match protocols {
        Protocols::Both => Part::new(vec![Vec::new()]),
        one => Part::new(vec![
            vec![Span::styled(
                format!(" {} only", one.name()),
                theme.accent(),
            )],
            vec![Span::styled(format!(" {}", one.name()), theme.accent())],
            Vec::new(),
        ]),
    }
}

/// Time travel's position: the moment shown (0-based) of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Travel {
    pub moment: usize,
    pub moments: usize,
}

/// How far back time travel goes, and what of the run was thinned or let go on the way to stay
/// within its memory budget (lab milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The oldest moment kept: where Home goes.
    pub oldest_ms: u64,
    /// Older moments were let go.
    pub forgotten: bool,
    /// Before this only some changes are kept; from it on, every change.
    pub every_change_since_ms: Option<u64>,
    /// The lanes' oldest event kept: older ones were let go.
    pub lanes_since_ms: Option<u64>,
}

impl Reach {
    /// Whether anything of the run was thinned or let go: what the live line then mentions.
    pub fn trimmed(&self) -> bool {
        self.forgotten || self.every_change_since_ms.is_some() || self.lanes_since_ms.is_some()
    }
}

/// One part of the line in its forms, longest first; an empty form leaves it out.
struct Part<'a> {
    forms: Vec<Vec<Span<'a>>>,
    form: usize,
}

impl<'a> Part<'a> {
    fn new(forms: Vec<Vec<Span<'a>>>) -> Part<'a> {
        Part { forms, form: 0 }
    }

    fn one(span: Span<'a>) -> Part<'a> {
        Part::new(vec![vec![span]])
    }

    /// The part, or nothing when the line is too narrow.
    fn optional(span: Span<'a>) -> Part<'a> {
        Part::new(vec![vec![span], Vec::new()])
    }

    fn spans(&self) -> &[Span<'a>] {
        &self.forms[self.form]
    }
}

/// The fullest line that fits `width`: while it does not, the next part in `order` takes its
/// next shorter form (a part may be named more than once). Words go, whole parts go; a number
/// is never cut.
fn fit<'a>(mut parts: Vec<Part<'a>>, order: &[usize], width: u16) -> Line<'a> {
    let wide =
        |parts: &[Part]| -> usize { parts.iter().flat_map(|p| p.spans()).map(Span::width).sum() };
    for &i in order {
        if wide(&parts) <= usize::from(width) {
            break;
        }
        let part = &mut parts[i];
        part.form = (part.form + 1).min(part.forms.len() - 1);
    }
    Line::from(
        parts
            .iter()
            .flat_map(|p| p.spans().iter().cloned())
            .collect::<Vec<_>>(),
    )
}

/// The reach of travel, in its forms: `back to 0.0 s`, what was forgotten, from when every
/// change is kept, from when the lanes' events are.
fn reach_parts<'a>(reach: Reach, theme: &Theme) -> [Part<'a>; 4] {
    let back = seconds(reach.oldest_ms);
    let forgotten = if reach.forgotten {
        Part::new(vec![
            vec![Span::styled(" (older forgotten)", theme.warn())],
            vec![Span::styled(" (older gone)", theme.warn())],
            Vec::new(),
        ])
    } else {
        Part::new(vec![Vec::new()])
    };
    let every = match reach.every_change_since_ms {
        Some(ms) => Part::new(vec![
            vec![Span::styled(
                format!(" · every change since {}", seconds(ms)),
                theme.dim(),
            )],
            vec![Span::styled(
                format!(" · all since {}", seconds(ms)),
                theme.dim(),
            )],
            Vec::new(),
        ]),
        None => Part::new(vec![Vec::new()]),
    };
    let lanes = match reach.lanes_since_ms {
        Some(ms) => Part::optional(Span::styled(
            format!(" · lanes from {}", seconds(ms)),
            theme.dim(),
        )),
        None => Part::new(vec![Vec::new()]),
    };
    [
        Part::new(vec![
            vec![Span::raw(format!(" travel reaches back to {back}"))],
            vec![Span::raw(format!(" back to {back}"))],
        ]),
        forgotten,
        every,
        lanes,
    ]
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    compare: bool,
    travel: Option<Travel>,
    reach: Option<Reach>,
    theme: &Theme,
) {
    frame.render_widget(line(snap, compare, travel, reach, area.width, theme), area);
}

/// The header line at `width`.
pub fn line<'a>(
    snap: &Snapshot,
    compare: bool,
    travel: Option<Travel>,
    reach: Option<Reach>,
    width: u16,
    theme: &Theme,
) -> Line<'a> {
    const TITLE: usize = 0;
    const SUBTITLE: usize = 2;
    let mut parts = vec![Part::optional(Span::styled(" forkscope ", theme.title()))];
    if compare {
        parts.push(Part::one(Span::styled(" COMPARE ", theme.accent())));
        let subtitle = match snap.protocols {
            Protocols::Both => " same actions in each lab ".to_owned(),
            one => format!(" same actions in each lab · {} only ", one.name()),
        };
        parts.push(Part::optional(Span::raw(subtitle)));
    } else {
        parts.push(Part::one(policy_badge(snap.view.policy, theme)));
        parts.push(revision(snap.protocols, theme));
    }
    let at = seconds(snap.view.at.as_millis());
    if let Some(t) = travel {
        // The past, unmistakably: what the screen showed then, how far back it goes, and the
        // way back.
        let past = theme
            .accent()
            .add_modifier(ratatui::style::Modifier::REVERSED);
        let (moment, moments) = (t.moment + 1, t.moments);
        const TRAVEL: usize = 3;
        parts.push(Part::new(vec![
            vec![Span::styled(
                format!(" ⏪ TIME TRAVEL  lab {at} · change {moment} of {moments} "),
                past,
            )],
            vec![Span::styled(
                format!(" ⏪ TIME TRAVEL {at} · {moment} of {moments} "),
                past,
            )],
            vec![Span::styled(
                format!(" ⏪ {at} · {moment}/{moments} "),
                past,
            )],
        ]));
        const BACK: usize = 4;
        const FORGOTTEN: usize = 5;
        const EVERY: usize = 6;
        const LANES: usize = 7;
        match reach {
            Some(r) => parts.extend(reach_parts(r, theme)),
            None => parts.extend((0..4).map(|_| Part::new(vec![Vec::new()]))),
        }
        const KEYS: usize = 8;
        parts.push(Part::optional(Span::styled(
            "  ← → [ ] v · End: live",
            theme.dim(),
        )));
        return fit(
            parts,
            &[
                SUBTITLE, BACK, TITLE, KEYS, LANES, EVERY, TRAVEL, EVERY, FORGOTTEN, TRAVEL,
                FORGOTTEN,
            ],
            width,
        );
    }
    let clock = match (snap.scripted, snap.paused) {
        (true, _) => "⏯ scripted clock",
        (false, true) => "⏸ paused",
        (false, false) => "▶ running",
    };
    parts.push(Part::one(Span::raw(format!(
        "  lab {at}  ×{}  ",
        trim_speed(snap.speed)
    ))));
    parts.push(Part::one(Span::styled(
        clock,
        if snap.paused {
            theme.warn()
        } else {
            theme.dim()
        },
    )));
    // Once the run was thinned or let go, how far back travel still reaches.
    const REACH: usize = 5;
    parts.push(match reach.filter(Reach::trimmed) {
        Some(r) => {
            let back = seconds(r.oldest_ms);
            let forgotten = if r.forgotten {
                " (older forgotten)"
            } else {
                ""
            };
            Part::new(vec![
                vec![Span::styled(
                    format!("  ⏪ travel back to {back}{forgotten}"),
                    theme.dim(),
                )],
                vec![Span::styled(format!("  ⏪ back to {back}"), theme.dim())],
                Vec::new(),
            ])
        }
        None => Part::new(vec![Vec::new()]),
    });
    const ADDRESSES: usize = 6;
    parts.push(if !compare && width >= 100 {
        Part::optional(Span::styled(
            format!("  server {}  proxy {}", snap.server_addr, snap.proxy_addr),
            theme.dim(),
        ))
    } else {
        Part::new(vec![Vec::new()])
    });
    fit(parts, &[REACH, ADDRESSES, SUBTITLE, TITLE, REACH], width)
}

fn trim_speed(speed: f64) -> String {
    let s = format!("{speed:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::sim::Sim;
    use forkscope_core::{LabConfig, Policy};

    fn snapshot(at_ms: u64) -> Snapshot {
        let mut sim = Sim::new(LabConfig::default(), Policy::Fenced, 1).unwrap();
        sim.start();
        sim.advance(at_ms);
        Snapshot::from_sim(&sim, Vec::new())
    }

    fn text(line: &Line) -> String {
        line.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    const WIDTHS: [u16; 4] = [60, 80, 100, 120];
    const THEME: Theme = Theme { color: false };

    #[test]
    fn travelling_the_line_says_how_far_back_at_every_width_and_cuts_no_number() {
        let snap = snapshot(28_812_300);
        let reach = Reach {
            oldest_ms: 27_000_000,
            forgotten: true,
            every_change_since_ms: Some(28_700_000),
            lanes_since_ms: Some(28_650_000),
        };
        let travel = Travel {
            moment: 4_999,
            moments: 12_000,
        };
        for compare in [false, true] {
            for width in WIDTHS {
                let line = line(&snap, compare, Some(travel), Some(reach), width, &THEME);
                let shown = text(&line);
                assert!(line.width() <= usize::from(width), "{width}: {shown}");
                assert!(shown.contains("⏪"), "{width}: {shown}");
                assert!(shown.contains("28812.3 s"), "{width}: {shown}");
                assert!(
                    shown.contains("5000 of 12000") || shown.contains("5000/12000"),
                    "{width}: {shown}"
                );
                assert!(shown.contains("back to 27000.0 s"), "{width}: {shown}");
                // What fits is whole: a number is there in full or not at all.
                for (number, prefix) in [("28700.0 s", "since "), ("28650.0 s", "lanes from ")] {
                    let at = shown.find(prefix);
                    assert!(
                        at.is_none()
                            || shown[at.unwrap()..].starts_with(&format!("{prefix}{number}")),
                        "{width}: {shown}"
                    );
                }
            }
        }
        let wide = text(&line(&snap, false, Some(travel), Some(reach), 240, &THEME));
        assert!(
            wide.contains("travel reaches back to 27000.0 s (older forgotten) · every change since 28700.0 s · lanes from 28650.0 s"),
            "{wide}"
        );
        let narrow = text(&line(&snap, false, Some(travel), Some(reach), 80, &THEME));
        assert!(
            narrow.contains("(older gone)"),
            "at 80 columns it still says older moments went: {narrow}"
        );
    }

    #[test]
    fn live_the_line_mentions_the_reach_only_once_the_run_was_trimmed() {
        let snap = snapshot(812_300);
        let whole = Reach {
            oldest_ms: 0,
            forgotten: false,
            every_change_since_ms: None,
            lanes_since_ms: None,
        };
        let thinned = Reach {
            every_change_since_ms: Some(700_000),
            ..whole
        };
        for width in WIDTHS {
            let untouched = text(&line(&snap, false, None, Some(whole), width, &THEME));
            assert!(!untouched.contains("back to"), "{untouched}");
            let line = line(&snap, false, None, Some(thinned), width, &THEME);
            let shown = text(&line);
            assert!(line.width() <= usize::from(width), "{width}: {shown}");
            assert!(shown.contains("lab 812.3 s"), "{width}: {shown}");
            assert!(shown.contains("back to 0.0 s"), "{width}: {shown}");
        }
    }
}
