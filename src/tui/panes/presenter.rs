//! Presenter mode's big verdict, and the card that hides it while a room predicts.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use tui_big_text::{BigText, PixelSize};

/// Rows the big verdict takes: the word in 4-row letters, every count, two rows of its sentence.
pub const HEIGHT: u16 = 9;
/// Rows of the big letters (an 8×8 font at half a cell per pixel row).
const BIG_ROWS: u16 = 4;

/// The verdict, large: the leading word in big letters (what the back row reads), every count
/// beneath in whole fields, and the sentence wrapped between words.
pub fn render_verdict(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let verdict = &snap.view.verdict;
    let style = theme.verdict(verdict.clean).add_modifier(Modifier::BOLD);
    let outer = block("verdict", theme);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let word = match verdict.counts.iter().next() {
        _ if verdict.clean => "CLEAN",
        Some((kind, _)) => super::invariant::short(*kind),
        None => "CLEAN",
    };
    // An 8×8 letter is 8 cells wide at half height (the more legible), 4 in quadrants.
    let letters = u16::try_from(word.chars().count()).unwrap_or(u16::MAX);
    let pixels = [(PixelSize::HalfHeight, 8), (PixelSize::Quadrant, 4)]
        .into_iter()
        .find(|(_, cells)| letters.saturating_mul(*cells) <= inner.width)
        .map(|(size, _)| size);
    let big = inner.height > BIG_ROWS && pixels.is_some();
    let [word_area, rest] = Layout::vertical([
        Constraint::Length(if big { BIG_ROWS } else { 0 }),
        Constraint::Fill(1),
    ])
    .areas(inner);
    if big {
        let text = BigText::builder()
            .pixel_size(pixels.unwrap_or(PixelSize::Quadrant))
            .style(style)
            .lines(vec![Line::from(word)])
            .centered()
            .build();
        frame.render_widget(text, word_area);
    }
    // Every count as a whole field: `×1` never wraps away from its word.
    let fields: Vec<Vec<Span<'static>>> = if verdict.clean {
        vec![vec![Span::styled(
            "CLEAN",
            style.add_modifier(Modifier::REVERSED),
        )]]
    } else {
        verdict
            .counts
            .iter()
            .enumerate()
            .map(|(i, (kind, n))| {
                let sep = if i == 0 { "" } else { " · " };
                vec![
                    Span::raw(sep),
                    Span::styled(
                        format!("{} ×{n}", super::invariant::short(*kind)),
                        style.add_modifier(Modifier::REVERSED),
                    ),
                ]
            })
            .collect()
    };
    let counts = super::fields(fields, usize::from(rest.width)).centered();
    let [counts_area, sentence_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(rest);
    frame.render_widget(counts, counts_area);
    let sentence = super::wrap_cut(
        &verdict.headline,
        usize::from(sentence_area.width),
        usize::from(sentence_area.height),
    );
    frame.render_widget(
        Paragraph::new(
            sentence
                .into_iter()
                .map(|l| Line::styled(l, theme.text()).centered())
                .collect::<Vec<_>>(),
        ),
        sentence_area,
    );
}

/// What stands where the verdict will be: the question, and the key that answers it.
pub fn render_hidden(frame: &mut Frame, area: Rect, theme: &Theme) {
    let lines = vec![
        Line::styled(
            "VERDICT HIDDEN",
            theme.accent().add_modifier(Modifier::BOLD),
        )
        .centered(),
        Line::raw("predict: did the session fork? was anything applied twice? or clean?")
            .centered(),
        Line::styled("V reveals", theme.key()).centered(),
    ];
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block("verdict · predict, then reveal", theme)),
        area,
    );
}
