//! Presenter mode's big verdict, and the card that hides it while a room predicts.

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use tui_big_text::{BigText, PixelSize};

/// Rows the big verdict takes at least, when there are: the word in 4-row letters, a row of
/// counts, two rows of its sentence.
pub const HEIGHT: u16 = 9;

/// Rows (borders included) the verdict of `snap` needs at `width` to show its letters, every
/// count and its whole sentence: what a presenter screen gives it when the lanes can spare it.
pub fn wanted_height(snap: &Snapshot, width: u16) -> u16 {
    let inner = usize::from(width.saturating_sub(2));
    let verdict = &snap.view.verdict;
    let counts = super::wrap_fields(count_fields(snap, Style::default()), inner).len();
    let sentence = super::wrap_cut(&verdict.headline, inner, usize::MAX).len();
    u16::try_from(4 + counts + sentence + 2)
        .unwrap_or(u16::MAX)
        .max(HEIGHT)
}

/// The verdict's words ([`super::invariant::verdict_words`]) in one style, reversed: what
/// the big letters stand over.
fn count_fields(snap: &Snapshot, style: Style) -> Vec<Vec<Span<'static>>> {
    super::invariant::verdict_words(snap, |tone| match tone {
        super::invariant::Tone::SoFar => Style::default(),
        _ => style.add_modifier(Modifier::REVERSED),
    })
}

/// The verdict, large: the leading word in big letters (what the back row reads), every count
/// beneath in whole fields (wrapped onto more rows before any is dropped), and the sentence
/// wrapped between words. Rows are shared out so nothing is cut while something would fit
/// whole: the letters go first (the counts line leads with the same word), then the sentence
/// drops its closing parenthesis (the run's tallies), and only then is it cut with `…`. What
/// is shown is centred, so a short verdict leaves no blank rows beneath it.
///
/// `lettered`: `None` decides alone, as above; `Some(Some(i))` draws the letters at size
/// `LETTERS[i]` (which [`letter_size`] found fit); `Some(None)` draws none. Labs side by
/// side are told one answer ([`letter_size`] for all of them), so a reveal letters each side
/// the same.
pub fn render_verdict(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    theme: &Theme,
    lettered: Option<Option<usize>>,
) {
    let verdict = &snap.view.verdict;
    let style = theme.verdict(verdict.clean).add_modifier(Modifier::BOLD);
    let outer = block("verdict", theme);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let word = word(snap);
    let fields = count_fields(snap, style);
    let width = usize::from(inner.width);
    let rows = usize::from(inner.height);
    let counts = super::wrap_fields(fields, width);
    let full = super::wrap_cut(&verdict.headline, width, usize::MAX);
    let brief = without_tallies(&verdict.headline).map(|b| super::wrap_cut(b, width, usize::MAX));
    let letters = u16::try_from(word.chars().count()).unwrap_or(u16::MAX);
    // Letter sizes, tallest first, that fit the width: (rows, size).
    let sizes: Vec<(usize, PixelSize)> = LETTERS
        .iter()
        .enumerate()
        .filter(|(i, _)| lettered.is_none_or(|told| told == Some(*i)))
        .map(|(_, letter)| letter)
        .filter(|(_, _, cells)| letters.saturating_mul(*cells) <= inner.width)
        .map(|(rows, size, _)| (*rows, *size))
        .collect();
    let fits = |big: usize, sentence: &[String]| big + counts.len() + sentence.len() <= rows;
    let sentences: Vec<&Vec<String>> = [Some(&full), brief.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    // Letters with the whole sentence, else with its brief form; then without letters.
    let with_letters = sizes.first().and_then(|size| {
        let sentence = sentences.iter().find(|s| fits(size.0, s))?;
        Some((Some(*size), (*sentence).clone()))
    });
    let plan = with_letters.or_else(|| {
        let sentence = sentences.iter().find(|s| fits(0, s))?;
        Some((None, (*sentence).clone()))
    });
    let (size, sentence) = plan.unwrap_or_else(|| {
        // Nothing fits whole: no letters, the counts, and the sentence cut.
        let left = rows.saturating_sub(counts.len());
        let text = without_tallies(&verdict.headline).unwrap_or(&verdict.headline);
        (None, super::wrap_cut(text, width, left))
    });
    let big_rows = size.map_or(0, |(big, _)| big as u16);
    // What is left over goes above and below, evenly.
    let used = big_rows + (counts.len() + sentence.len()) as u16;
    let above = inner.height.saturating_sub(used) / 2;
    frame.render_widget(Clear, inner);
    let [_, word_area, counts_area, sentence_area] = Layout::vertical([
        Constraint::Length(above),
        Constraint::Length(big_rows),
        Constraint::Length(counts.len() as u16),
        Constraint::Fill(1),
    ])
    .areas(inner);
    if let Some((_, pixels)) = size {
        let text = BigText::builder()
            .pixel_size(pixels)
            .style(style)
            .lines(vec![Line::from(word)])
            .centered()
            .build();
        frame.render_widget(text, word_area);
    }
    let counts: Vec<Line> = counts.into_iter().map(Line::centered).collect();
    frame.render_widget(Paragraph::new(counts), counts_area);
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

/// The widest big letters (an index into [`LETTERS`]) the verdict of `snap` can take in `area`
/// (borders included): their width, its counts and its sentence (at least without its closing
/// tallies) fit whole. Labs side by side letter only when each can, all at the size the
/// narrowest allows: a reveal never shows one side in letters and the other in a line.
pub fn letter_size(snap: &Snapshot, area: Rect) -> Option<usize> {
    // Inside the verdict block's border.
    let inner = area.inner(ratatui::layout::Margin::new(1, 1));
    let width = usize::from(inner.width);
    let letters = u16::try_from(word(snap).chars().count()).unwrap_or(u16::MAX);
    let counts = super::wrap_fields(count_fields(snap, Style::default()), width).len();
    let headline = &snap.view.verdict.headline;
    let sentence = without_tallies(headline).unwrap_or(headline);
    let sentence = super::wrap_cut(sentence, width, usize::MAX).len();
    LETTERS.iter().position(|(rows, _, cells)| {
        letters.saturating_mul(*cells) <= inner.width
            && rows + counts + sentence <= usize::from(inner.height)
    })
}

/// The verdict's leading word, the one the letters spell.
fn word(snap: &Snapshot) -> &'static str {
    let verdict = &snap.view.verdict;
    match verdict.counts.iter().next() {
        _ if verdict.clean => "CLEAN",
        Some((kind, _)) => super::invariant::short(*kind),
        None => "CLEAN",
    }
}

/// The big letters' sizes, widest first: rows, pixel size, cells per 8×8 letter. Only block
/// and quadrant glyphs (`▀ ▄ █ ▘`): the smaller sizes draw with "legacy computing" symbols that
/// many fonts a projector laptop has do not carry.
const LETTERS: [(usize, PixelSize, u16); 2] =
    [(4, PixelSize::HalfHeight, 8), (4, PixelSize::Quadrant, 4)];

/// The headline without its closing parenthesis (`… at a time (1 resume accepted, 0
/// rejected)`): the run's tallies, which the counts and the panes say too.
fn without_tallies(headline: &str) -> Option<&str> {
    let open = headline.strip_suffix(')')?.rfind(" (")?;
    Some(&headline[..open])
}

/// What stands where the verdict will be: the question, and the key that answers it.
pub fn render_hidden(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let outer = block("verdict · predict, then reveal", theme);
    let inner = outer.inner(area);
    // 2026-07-28 alone has no session to fork: its question is how often the work ran.
    let question = match snap.protocols {
        forkscope_core::revision::Protocols::Modern => {
            "predict: did one call run twice? was a task orphaned? or clean?"
        }
        _ => "predict: did the session fork? was anything applied twice? or clean?",
    };
    let mut lines = vec![
        Line::styled(
            "VERDICT HIDDEN",
            theme.accent().add_modifier(Modifier::BOLD),
        )
        .centered(),
    ];
    lines.extend(
        super::wrap_words(question, usize::from(inner.width))
            .into_iter()
            .map(|l| Line::raw(l).centered()),
    );
    lines.push(Line::styled("V reveals", theme.key()).centered());
    // Centred in the card: the rows it does not need go above and below, not all beneath.
    let above = usize::from(inner.height).saturating_sub(lines.len()) / 2;
    let mut padded = vec![Line::raw(""); above];
    padded.extend(lines);
    frame.render_widget(Paragraph::new(padded).block(outer), area);
}
