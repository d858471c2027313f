//! The top line: the policy (unmistakable), lab time, speed, pause, addresses.

use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::Policy;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

pub fn policy_badge(policy: Policy, theme: &Theme) -> Span<'static> {
    let fenced = policy == Policy::Fenced;
    let label = if fenced { " FENCED " } else { " NAIVE " };
    Span::styled(label, theme.policy_badge(fenced))
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

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    compare: bool,
    travel: Option<Travel>,
    theme: &Theme,
) {
    let mut spans = vec![Span::styled(" forkscope ", theme.title())];
    if compare {
        spans.push(Span::styled(" COMPARE ", theme.accent()));
        spans.push(Span::raw(" same actions, two labs "));
    } else {
        spans.push(policy_badge(snap.view.policy, theme));
    }
    let seconds = snap.view.at.as_millis() as f64 / 1000.0;
    if let Some(t) = travel {
        // The past, unmistakably: what the screen showed then, and the way back.
        spans.push(Span::styled(
            format!(
                " ⏪ TIME TRAVEL  lab {seconds:.1} s · change {} of {} ",
                t.moment + 1,
                t.moments
            ),
            theme
                .accent()
                .add_modifier(ratatui::style::Modifier::REVERSED),
        ));
        spans.push(Span::styled("  ← → [ ] v · End: live", theme.dim()));
        frame.render_widget(Line::from(spans), area);
        return;
    }
    let clock = match (snap.scripted, snap.paused) {
        (true, _) => "⏯ scripted clock",
        (false, true) => "⏸ paused",
        (false, false) => "▶ running",
    };
    spans.push(Span::raw(format!(
        "  lab {seconds:.1} s  ×{}  ",
        trim_speed(snap.speed)
    )));
    spans.push(Span::styled(
        clock,
        if snap.paused {
            theme.warn()
        } else {
            theme.dim()
        },
    ));
    if !compare && area.width >= 100 {
        spans.push(Span::styled(
            format!("  server {}  proxy {}", snap.server_addr, snap.proxy_addr),
            theme.dim(),
        ));
    }
    frame.render_widget(Line::from(spans), area);
}

fn trim_speed(speed: f64) -> String {
    let s = format!("{speed:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}
