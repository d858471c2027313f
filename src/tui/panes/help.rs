//! The help overlay: every key, and what the screen shows.

use super::block;
use crate::tui::keys::{BINDINGS, REPLICA_BINDINGS};
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

/// What the screen's words, glyphs and abbreviations mean.
pub const GLOSSARY: [(&str, &str); 34] = [
    (
        "FORK",
        "two live streams in one session, an emit on the one left",
    ),
    ("DUPLICATE", "a side effect applied twice (◆)"),
    ("GAP", "a stream's events arrived with one missing"),
    ("CURSOR BACK", "the client's cursor moved backwards"),
    (
        "LOST",
        "an event the client was owed and never got, without being told",
    ),
    (
        "DRIFT",
        "server's session position and client's cursor came apart",
    ),
    (
        "lanes",
        "● emit ╳ orphan emit ○ copied ▲ applied ◆ dup ↺ resumed",
    ),
    ("", "✗ rejected × refused ┃ fenced ╎ orphaned"),
    ("", "∅ lost ⋯ gap ↶ cursor back ≠ drift"),
    (
        "decision",
        "what a server decided (attach, resume, fence, refuse): [ ] step",
    ),
    (
        "grace",
        "why it started: closed, stalled (writes) or replaced",
    ),
    (
        "hw · bg",
        "high-water mark (newest seq) · the background emitter",
    ),
    ("← 11 s", "the lab time the lanes span (z: the whole run)"),
    (
        "unchecked",
        "the client never checks which stream it is on (naive's client)",
    ),
    (
        "counter",
        "background events the server emitted in the session",
    ),
    (
        "skipped",
        "replayed events the client knew it had applied: not again",
    ),
    (
        "late emit",
        "an emit onto a fenced stream: refused and counted (the fence)",
    ),
    (
        "in order",
        "a scripted run's lanes: one column per record, clock aside",
    ),
    (
        "◂╳ fork at",
        "the fork's first orphan emit, scrolled off the left edge",
    ),
    ("› ▲", "the selected event: its lane (›) and its column (▲)"),
    (
        "…",
        "more than fits: a whole field left out, never a cut number",
    ),
    (
        "identity",
        "how a resume (↺) knew its stream: token header or id key",
    ),
    (
        "CALL LOST",
        "a tool call's result never reached the client, untold",
    ),
    (
        "REUSED ID",
        "one event id written twice, for two different events",
    ),
    (
        "UNDELIVERED",
        "owed and never arrived, but the client was told (typed)",
    ),
    (
        "CLEAN",
        "all owed arrived once; \"so far\" while some is still open",
    ),
    (
        "TWO RUNNERS",
        "2026: one call run twice at once (two tasks, one key) ⇉",
    ),
    (
        "RE-APPLIED",
        "2026: a step applied again by a re-issued call ◈",
    ),
    (
        "ENDED TWICE",
        "2026: a task ended twice (completed, then cancelled) ⧈",
    ),
    ("STALE READ", "2026: a task read back from its end ↯"),
    (
        "ORPHAN TASK",
        "2026: a task the client lost the answer of ⊗",
    ),
    (
        "CUT HALFWAY",
        "2026: a closed stream cancelled a call midway ◐",
    ),
    (
        "TASK LOST",
        "2026: a task's end never reached the client, untold",
    ),
    (
        "t1a2b3c",
        "2026: a task's own lane: ◇ made, ↻ found by key, ▪ step, ■ ended, □ runner lost",
    ),
];

fn intro(modern_only: bool, theme: &Theme) -> Vec<Line<'static>> {
    let (title, story) = if modern_only {
        (
            "forkscope — MCP 2026-07-28: no stream to resume, a task to run once",
            "The re-issue: n, a, X: the answer naming the task is lost, the client asks again, and \
             naive makes a second task that runs the same work (⊗ orphan, ⇉ two runners, ◈ a step \
             applied again). Under fenced the key finds the first task: one task, each step once. \
             m shows both. Y speaks both revisions.",
        )
    } else {
        (
            "forkscope — MCP Streamable HTTP 2025-11-25 stream resumption",
            "The seed incident: n, a few events, t, d: the orphan keeps receiving (╳), the client \
             applies duplicates (◆). R, t, d under fenced: the id carries the stream's key, so it \
             resumes cleanly (--identity token-header: a typed 428). m shows both. k turns knobs.",
        )
    };
    vec![
        Line::styled(title, theme.title()),
        Line::styled(story, theme.dim()),
        Line::raw(""),
    ]
}

/// The glossary's words about 2025-11-25's streams and sessions (with the lines that go on
/// each): a lab of 2026-07-28 alone has none of them to show.
const STREAM_WORDS: [&str; 19] = [
    "FORK",
    "DUPLICATE",
    "GAP",
    "CURSOR BACK",
    "LOST",
    "DRIFT",
    "lanes",
    "decision",
    "grace",
    "hw · bg",
    "unchecked",
    "counter",
    "skipped",
    "late emit",
    "◂╳ fork at",
    "identity",
    "CALL LOST",
    "REUSED ID",
    "UNDELIVERED",
];

/// The glossary a lab shows: all of it, or (2026-07-28 alone) without the streams' words.
fn glossary(modern_only: bool) -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    let mut skipping = false;
    GLOSSARY.iter().filter(move |(word, _)| {
        // A line with no word goes on the one before it.
        if !word.is_empty() {
            skipping = modern_only && STREAM_WORDS.contains(word);
        }
        !skipping
    })
}

/// What a lab of replicas adds to the screen's words.
pub const REPLICA_GLOSSARY: [(&str, &str); 6] = [
    (
        "s1@A",
        "replica A's lane of stream s1: what A sent (●) or attached (┣)",
    ),
    (
        "",
        "two lanes of one stream receiving: the fork across replicas",
    ),
    (
        "ep",
        "a stream's epoch: who may write it; a new resume takes a new one",
    ),
    (
        "owner",
        "the replica that took the stream's epoch in the store",
    ),
    (
        "orphan",
        "a delivery the client left for another replica: it should stop",
    ),
    (
        "refused",
        "the store refused a replica's write on a stale epoch (×)",
    ),
];

/// `scroll`: rows scrolled down (↑↓ while it is open), clamped to what there is. `replicas`:
/// a lab of replicas, whose keys and words are listed too.
/// `modern_only`: a lab of 2026-07-28 alone, whose keys, words and guarantees are its own.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    scroll: u16,
    (replicas, modern_only): (bool, bool),
    theme: &Theme,
) {
    let [popup] = Layout::horizontal([Constraint::Max(84)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::vertical([Constraint::Max(38)])
        .flex(Flex::Center)
        .areas(popup);
    let mut lines = Vec::new();
    let extra: &[_] = if replicas { &REPLICA_BINDINGS } else { &[] };
    let bindings: Vec<_> = BINDINGS
        .iter()
        .chain(extra)
        .filter(|(_, command, _)| !(modern_only && crate::tui::keys::on_a_stream(command)))
        .collect();
    let half = bindings.len().div_ceil(2);
    // Two columns; only the left one is padded, so a row never runs past the popup.
    let cell = |i: usize, pad: bool| -> Vec<Span<'static>> {
        bindings.get(i).map_or_else(Vec::new, |(key, _, what)| {
            let what: String = what.chars().take(30).collect();
            let what = if pad { format!("{what:<30}") } else { what };
            vec![
                Span::styled(format!(" {key:<9}"), theme.key()),
                Span::raw(what),
            ]
        })
    };
    // Two columns where they fit (1 + 9 + 30 + 1 + 9 + 30 cells), else one.
    if popup.width >= 82 {
        for row in 0..half {
            let mut spans = cell(row, true);
            spans.extend(cell(row + half, false));
            lines.push(Line::from(spans));
        }
    } else {
        lines.extend((0..bindings.len()).map(|i| Line::from(cell(i, false))));
    }
    // The glossary: every word of the verdict, every glyph of the lanes, every abbreviation.
    lines.push(Line::raw(""));
    let extra: &[_] = if replicas { &REPLICA_GLOSSARY } else { &[] };
    for &(word, meaning) in glossary(modern_only).chain(extra) {
        lines.push(Line::from(vec![
            Span::styled(format!(" {word:<12}"), theme.title()),
            Span::styled(meaning, theme.dim()),
        ]));
    }
    // The five conditions (or a task's five guarantees), each with what it means: the why
    // behind the invariant panel.
    lines.push(Line::raw(""));
    let rules: Vec<(u8, &str, &str)> = if modern_only {
        lines.push(Line::styled(
            " the tasks extension's five guarantees (fenced keeps all)",
            theme.title(),
        ));
        forkscope_core::tasks::guarantee::Guarantee::ALL
            .iter()
            .map(|g| (g.number(), g.title(), g.meaning()))
            .collect()
    } else {
        lines.push(Line::styled(
            " the five conditions (fenced enforces all)",
            theme.title(),
        ));
        forkscope_core::Condition::ALL
            .iter()
            .map(|c| (c.number(), c.title(), c.meaning()))
            .collect()
    };
    for (number, title, meaning) in rules {
        lines.push(Line::styled(format!(" {number}. {title}"), theme.text()));
        lines.push(Line::styled(format!("    {meaning}"), theme.dim()));
    }
    // The introduction goes first when a short terminal has no room for it: keys and the
    // glossary are what the overlay is for.
    let intro = intro(modern_only, theme);
    let width = usize::from(popup.width.saturating_sub(2)).max(1);
    let rows =
        |lines: &[Line]| -> usize { lines.iter().map(|l| l.width().div_ceil(width).max(1)).sum() };
    let inner = usize::from(popup.height.saturating_sub(2));
    if inner >= rows(&lines) + rows(&intro) {
        lines.splice(0..0, intro);
    }
    let hidden = rows(&lines).saturating_sub(inner);
    let scroll = scroll.min(u16::try_from(hidden).unwrap_or(u16::MAX));
    let title = if hidden > 0 {
        "help · ↑↓ scroll · ? or Esc to close"
    } else {
        "help · ? or Esc to close"
    };
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0))
            .block(block(title, theme)),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::GLOSSARY;
    use crate::tui::theme::Theme;
    use forkscope_core::AnomalyKind;
    use strum::IntoEnumIterator;

    /// The help, top and bottom (scrolled as far as it goes).
    fn shown(modern_only: bool) -> String {
        [0, u16::MAX]
            .map(|scroll| {
                let backend = ratatui::backend::TestBackend::new(100, 40);
                let mut terminal = ratatui::Terminal::new(backend).unwrap();
                terminal
                    .draw(|frame| {
                        let (area, theme) = (frame.area(), Theme::from_env());
                        super::render(frame, area, scroll, (false, modern_only), &theme);
                    })
                    .unwrap();
                terminal.backend().to_string()
            })
            .join("\n")
    }

    /// A lab of 2026-07-28 alone is helped in its own words: its keys, its verdicts and its
    /// five guarantees, none of the streams' (nothing there to drop, strip or resume).
    #[test]
    fn a_2026_lab_is_helped_with_its_own_keys_words_and_guarantees() {
        let modern = shown(true);
        for stream_word in [
            "drop the connection",
            "strip the token",
            "FORK",
            "five conditions",
        ] {
            assert!(!modern.contains(stream_word), "{stream_word}\n{modern}");
        }
        for own in [
            "TWO RUNNERS",
            "ORPHAN TASK",
            "five guarantees",
            "one runner: lease",
        ] {
            assert!(modern.contains(own), "{own}\n{modern}");
        }
        let both = shown(false);
        for word in [
            "drop the connection",
            "FORK",
            "five conditions",
            "TWO RUNNERS",
        ] {
            assert!(both.contains(word), "{word}\n{both}");
        }
    }

    #[test]
    fn help_explains_every_verdict_word() {
        for kind in AnomalyKind::iter() {
            let word = super::super::invariant::short(kind);
            assert!(
                GLOSSARY.iter().any(|(w, _)| *w == word),
                "? does not explain {word}"
            );
        }
    }
}
