//! One file per pane. Each renders from a [`crate::lab::Snapshot`] (pure data), so the whole
//! screen can be drawn into a test backend from a deterministic snapshot.

pub mod client;
pub mod event_card;
pub mod evidence;
pub mod exchanges;
pub mod footer;
pub mod header;
pub mod help;
pub mod invariant;
pub mod knobs;
pub mod lanes;
pub mod logs;
pub mod narration;
pub mod picker;
pub mod policies;
pub mod presenter;
pub mod proof;
pub mod replicas;
pub mod streams;
pub mod tasks;

use super::theme::Theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Wrap};

/// A bordered pane with a title.
pub fn block<'a>(title: &'a str, theme: &Theme) -> Block<'a> {
    Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(theme.border())
        .title(Span::styled(format!(" {title} "), theme.title()))
}

/// A card over `area` (already narrowed to its width): as tall as its wrapped `lines`, centred
/// vertically, drawn over what is beneath.
pub fn card(frame: &mut Frame, area: Rect, lines: Vec<Line>, title: &str, theme: &Theme) {
    let inner = usize::from(area.width.saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let height = u16::try_from(rows + 2).unwrap_or(u16::MAX);
    let [area] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block(title, theme)),
        area,
    );
}

/// An event id as a person reads it: a keyed id's token cut to a few digits (`s1-8.e698…`).
pub fn short_id(id: &str) -> String {
    match id.split_once('.') {
        Some((scoped, token)) if token.len() > 4 => format!("{scoped}.{}…", &token[..4]),
        _ => id.to_owned(),
    }
}

/// `3.2 s` from milliseconds.
pub fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// A text bar `▇▇▇▁▁▁` of `width` cells filled to `ratio` (clamped to 0..=1).
pub fn bar(ratio: f64, width: usize) -> String {
    let filled = (ratio.clamp(0.0, 1.0) * width as f64).round() as usize;
    format!(
        "{}{}",
        "▇".repeat(filled),
        "▁".repeat(width - filled.min(width))
    )
}

/// A line at most `width` cells wide that never cuts a value: whole spans go from its end,
/// and `…` says something went. Panes build a line a field per span (or see [`fields`]), so a
/// number is shown whole or not at all (a cut `duplicates 1` for 18 would be a lie on screen).
pub fn clip(line: Line<'static>, width: usize) -> Line<'static> {
    if line.width() <= width {
        return line;
    }
    let Line {
        spans,
        style,
        alignment,
    } = line;
    let mut clipped = fields(spans.into_iter().map(|s| vec![s]).collect(), width);
    clipped.style = style;
    clipped.alignment = alignment;
    clipped
}

/// As many whole fields (a label and its value, each a few spans) as fit `width`, and `…`
/// when some went.
pub fn fields(fields: Vec<Vec<Span<'static>>>, width: usize) -> Line<'static> {
    let wide = |f: &Vec<Span>| f.iter().map(Span::width).sum::<usize>();
    let total: usize = fields.iter().map(wide).sum();
    let mut spans = Vec::new();
    if total <= width {
        spans.extend(fields.into_iter().flatten());
        return Line::from(spans);
    }
    let mut used = 0;
    let mut style = Default::default();
    for field in fields {
        if used + wide(&field) + 1 > width {
            break;
        }
        used += wide(&field);
        style = field.last().map_or(style, |s: &Span| s.style);
        spans.extend(field);
    }
    // Trailing blanks of the last kept field would sit between the value and the sign.
    if let Some(last) = spans.last_mut() {
        let trimmed = last.content.trim_end().to_owned();
        last.content = trimmed.into();
    }
    if width > 0 {
        spans.push(Span::styled("…", style));
    }
    Line::from(spans)
}

/// The first of `forms` (longest first) that fits `width`, else the last one clipped.
pub fn fit(forms: Vec<Line<'static>>, width: usize) -> Line<'static> {
    let mut forms = forms;
    match forms.iter().position(|l| l.width() <= width) {
        Some(at) => forms.swap_remove(at),
        None => clip(forms.pop().unwrap_or_default(), width),
    }
}

/// Whole fields in lines of at most `width` cells: a line breaks between fields, never inside
/// one (`DUPLICATE ×10` stays together). Leading blanks of a field that starts a line go.
pub fn wrap_fields(fields: Vec<Vec<Span<'static>>>, width: usize) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = Vec::new();
    let mut line: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    for mut field in fields {
        let wide: usize = field.iter().map(Span::width).sum();
        if !line.is_empty() && used + wide > width {
            lines.push(Line::from(std::mem::take(&mut line)));
            used = 0;
        }
        if line.is_empty()
            && let Some(first) = field.first_mut()
        {
            let trimmed = first.content.trim_start().to_owned();
            first.content = trimmed.into();
        }
        used += field.iter().map(Span::width).sum::<usize>();
        line.extend(field);
    }
    if !line.is_empty() {
        lines.push(Line::from(line));
    }
    lines
}

/// Words or an opaque id (a token, a cursor) in at most `room` characters, ending in `…` when
/// shortened. Not for a number: a pane leaves a number out whole ([`fields`]).
pub fn shorten(text: &str, room: usize) -> String {
    if text.chars().count() <= room {
        return text.to_owned();
    }
    let kept: String = text.chars().take(room.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

/// `text` in lines of at most `width` characters, broken between words.
pub fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let width = width.max(8);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `text` wrapped between words into at most `rows` lines; when it needs more, the last line
/// drops whole words and ends in `…`, so no word (or number) is cut.
pub fn wrap_cut(text: &str, width: usize, rows: usize) -> Vec<String> {
    let mut lines = wrap_words(text, width);
    if lines.len() > rows {
        lines.truncate(rows);
        if let Some(last) = lines.last_mut() {
            while last.chars().count() + 1 > width.max(8) {
                match last.rfind(' ') {
                    Some(at) => last.truncate(at),
                    None => last.clear(),
                }
            }
            last.push('…');
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_drops_whole_fields_and_says_so() {
        let line = Line::from(vec![
            Span::raw("applied 29"),
            Span::raw("  skipped 0"),
            Span::raw("  duplicates 18"),
        ]);
        assert_eq!(clip(line.clone(), 40).to_string(), line.to_string());
        assert_eq!(clip(line.clone(), 30).to_string(), "applied 29  skipped 0…");
        assert_eq!(clip(line.clone(), 12).to_string(), "applied 29…");
        assert_eq!(clip(line, 5).to_string(), "…");
    }

    #[test]
    fn wrap_cut_ends_a_long_text_whole_words_and_a_sign() {
        let text = "fork: stream s1 received event 6 at 4.201 s while the client was bound";
        assert_eq!(
            wrap_cut(text, 30, 2),
            [
                "fork: stream s1 received event",
                "6 at 4.201 s while the client…"
            ]
        );
        assert_eq!(wrap_cut(text, 80, 2), [text]);
    }

    #[test]
    fn fit_takes_the_first_form_that_fits() {
        let forms = vec![
            Line::raw("budget 15.0 s of 15.0 s"),
            Line::raw("budget 15.0 s"),
        ];
        assert_eq!(
            fit(forms.clone(), 30).to_string(),
            "budget 15.0 s of 15.0 s"
        );
        assert_eq!(fit(forms.clone(), 14).to_string(), "budget 15.0 s");
        assert_eq!(fit(forms, 10).to_string(), "…");
    }
}
