//! A recording as an SVG picture: each frame's cells drawn as text on a dark terminal, either
//! animated at the recording's own pace (looping) or the final frame alone.
//!
//! The animation is CSS only — no script — because GitHub, like any page showing an SVG through
//! `<img>`, runs CSS animations there and never scripts. The frames are stacked into one tall
//! film and a single `@keyframes` moves it up a frame at a time (`steps(1, end)`: no sliding
//! between frames). Files stay small because a row is written once, in `<defs>`, however many
//! frames show it; a frame is a list of `<use>`s of its rows. Within a row, cells of one style
//! become one `<text>` and backgrounds of one colour one `<rect>`.

mod ink;

use super::{Frame, Recording};
use ink::{DEFAULT_BG, Ink, Rgb, escape_into, resolve};
use ratatui::buffer::{Buffer, CellDiffOption, CellWidth};
use std::collections::HashMap;
use std::fmt::Write as _;

/// A cell is this many user units (CSS pixels at 100 %) wide and high; the font is sized so that
/// a monospace glyph's advance (0.6 em in the usual terminal fonts) is exactly one cell.
pub const CELL_WIDTH: u32 = 9;
pub const CELL_HEIGHT: u32 = 17;
/// A margin around the screen, as a terminal window has: the last row's descenders (`_`) reach
/// just below the grid, and would otherwise be cut, or show at the top of the next frame.
pub const PADDING: u32 = 6;
const FONT_SIZE: u32 = 15;
/// Where the baseline sits in a cell. Box-drawing glyphs are about 1.16 em tall (17.5 units at
/// this size), a little more than the row, so a vertical border's rows overlap instead of
/// leaving hairline gaps between them.
const BASELINE: u32 = 14;
const FONT_FAMILY: &str = "ui-monospace,\"SFMono-Regular\",\"DejaVu Sans Mono\",\"Cascadia Mono\",Menlo,Consolas,\"Liberation Mono\",monospace";

/// The rows and styles a picture is written from: each distinct row markup once, each distinct
/// ink and background once (as a CSS class).
#[derive(Debug, Default)]
struct Sheet {
    rows: Vec<String>,
    row_ids: HashMap<String, usize>,
    inks: Vec<Ink>,
    ink_ids: HashMap<Ink, usize>,
    backgrounds: Vec<Rgb>,
    background_ids: HashMap<Rgb, usize>,
}

/// A frame as the ids of its rows (None: a blank row, nothing to draw).
type FrameRows = Vec<Option<usize>>;

impl Sheet {
    fn ink_class(&mut self, ink: Ink) -> usize {
        *self.ink_ids.entry(ink).or_insert_with(|| {
            self.inks.push(ink);
            self.inks.len() - 1
        })
    }

    fn background_class(&mut self, bg: Rgb) -> usize {
        *self.background_ids.entry(bg).or_insert_with(|| {
            self.backgrounds.push(bg);
            self.backgrounds.len() - 1
        })
    }

    fn frame(&mut self, screen: &Buffer) -> FrameRows {
        (0..screen.area.height)
            .map(|y| {
                let markup = self.row(screen, screen.area.y + y);
                if markup.is_empty() {
                    return None;
                }
                let next = self.rows.len();
                let id = *self.row_ids.entry(markup.clone()).or_insert(next);
                if id == next {
                    self.rows.push(markup);
                }
                Some(id)
            })
            .collect()
    }

    /// One row's markup, in the row's own coordinates (top at 0): background rects, then text.
    fn row(&mut self, screen: &Buffer, y: u16) -> String {
        let area = screen.area;
        // What each column shows: (text, ink, background). A column covered by the wide
        // character before it has no text of its own, but carries that character's background.
        let mut columns: Vec<(Option<&str>, Option<Ink>, Rgb)> = Vec::new();
        let mut covered = 0u16;
        for x in area.x..area.right() {
            let cell = &screen[(x, y)];
            let (ink, bg) = resolve(cell);
            if covered > 0 {
                covered -= 1;
                let bg = columns.last().map_or(bg, |c| c.2);
                columns.push((None, None, bg));
                continue;
            }
            // A skipped cell is drawn by something outside ratatui (an image, a link): here,
            // only its background.
            let symbol = match (cell.diff_option, cell.symbol()) {
                (CellDiffOption::Skip, _) | (_, "") => " ",
                (_, s) => s,
            };
            covered = cell.cell_width().max(1) - 1;
            columns.push((Some(symbol), ink, bg));
        }
        let mut markup = String::new();
        self.backgrounds_into(&mut markup, &columns);
        self.text_into(&mut markup, &columns);
        markup
    }

    fn backgrounds_into(&mut self, out: &mut String, columns: &[(Option<&str>, Option<Ink>, Rgb)]) {
        let mut x = 0;
        while x < columns.len() {
            let bg = columns[x].2;
            let run = columns[x..].iter().take_while(|c| c.2 == bg).count();
            if bg != DEFAULT_BG {
                let class = self.background_class(bg);
                let _ = write!(
                    out,
                    r#"<rect x="{}" width="{}" height="{CELL_HEIGHT}" class="b{class}"/>"#,
                    x as u32 * CELL_WIDTH,
                    run as u32 * CELL_WIDTH
                );
            }
            x += run;
        }
    }

    /// Runs of one ink become one `<text>`; blanks between them join the run when they would
    /// look the same in its ink (so a sentence is one element, not one per word), and a run's
    /// `textLength` pins its end to the grid whatever the font's real advance.
    fn text_into(&mut self, out: &mut String, columns: &[(Option<&str>, Option<Ink>, Rgb)]) {
        struct Run {
            start: usize,
            ink: Ink,
            text: String,
            /// Columns up to the end of the last visible character.
            end: usize,
        }
        let mut runs: Vec<Run> = Vec::new();
        let mut current: Option<Run> = None;
        // Blanks seen since the current run's last visible character.
        let mut blanks = 0usize;
        for (x, (symbol, ink, _)) in columns.iter().enumerate() {
            let (Some(symbol), Some(ink)) = (symbol, ink) else {
                // Covered by a wide character (already in the run) or hidden text: a hidden
                // cell is a blank.
                if symbol.is_some() {
                    blanks += 1;
                }
                continue;
            };
            let blank = *symbol == " " && !ink.marks_blanks();
            if blank {
                if current.as_ref().is_some_and(|r| !r.ink.marks_blanks()) {
                    blanks += 1;
                } else if let Some(run) = current.take() {
                    runs.push(run);
                }
                continue;
            }
            match &mut current {
                Some(run) if run.ink == *ink => {
                    run.text.extend(std::iter::repeat_n(' ', blanks));
                    run.text.push_str(symbol);
                }
                _ => {
                    runs.extend(current.take());
                    current = Some(Run {
                        start: x,
                        ink: *ink,
                        text: (*symbol).to_owned(),
                        end: x,
                    });
                }
            }
            blanks = 0;
            if let Some(run) = &mut current {
                // The character's own width: everything up to the next column that shows one.
                let width = columns[x + 1..]
                    .iter()
                    .take_while(|c| c.0.is_none())
                    .count();
                run.end = x + 1 + width;
            }
        }
        runs.extend(current);
        for run in runs {
            let class = self.ink_class(run.ink);
            let _ = write!(
                out,
                r#"<text x="{}" y="{BASELINE}" textLength="{}" class="t{class}">"#,
                run.start as u32 * CELL_WIDTH,
                (run.end - run.start) as u32 * CELL_WIDTH
            );
            escape_into(out, &run.text);
            out.push_str("</text>");
        }
    }
}

/// A frame of the picture: consecutive recorded frames with the same screen merged.
struct Shown<'a> {
    frame: &'a Frame,
    start: f64,
    duration: f64,
    first_violation: Option<&'a str>,
}

fn shown(frames: &[Frame]) -> Vec<Shown<'_>> {
    let mut shown: Vec<Shown<'_>> = Vec::new();
    let mut start = 0.0;
    for frame in frames {
        match shown.last_mut() {
            Some(last) if last.frame.screen == frame.screen => {
                last.duration += frame.hold;
                last.first_violation = last.first_violation.or(frame.first_violation.as_deref());
            }
            _ => shown.push(Shown {
                frame,
                start,
                duration: frame.hold,
                first_violation: frame.first_violation.as_deref(),
            }),
        }
        start += frame.hold;
    }
    shown
}

/// Every frame, each up for as long as the recording held it, looping.
pub fn animated(recording: &Recording) -> String {
    picture(recording, shown(&recording.frames))
}

/// The final frame alone (the verdict, and the violation when there was one).
pub fn still(recording: &Recording) -> String {
    let last = shown(&recording.frames).pop();
    picture(recording, last.into_iter().collect())
}

fn picture(recording: &Recording, frames: Vec<Shown<'_>>) -> String {
    let width = u32::from(recording.width) * CELL_WIDTH + 2 * PADDING;
    // Also the film's pitch: frame k is drawn k heights down.
    let height = u32::from(recording.height) * CELL_HEIGHT + 2 * PADDING;
    let mut sheet = Sheet::default();
    let rows: Vec<FrameRows> = frames
        .iter()
        .map(|f| sheet.frame(&f.frame.screen))
        .collect();
    let total: f64 = frames.iter().map(|f| f.duration).sum();
    let animate = frames.len() > 1 && total > 0.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" xml:space="preserve">"#
    );
    svg.push_str("<title>");
    escape_into(&mut svg, &recording.title);
    svg.push_str("</title>\n<style>\n");
    let _ = writeln!(
        svg,
        "text{{font-family:{FONT_FAMILY};font-size:{FONT_SIZE}px;white-space:pre}}"
    );
    for (i, ink) in sheet.inks.iter().enumerate() {
        let _ = writeln!(svg, ".t{i}{{{}}}", ink.css());
    }
    for (i, bg) in sheet.backgrounds.iter().enumerate() {
        let _ = writeln!(svg, ".b{i}{{fill:{bg}}}");
    }
    if animate {
        svg.push_str("@keyframes film{");
        for (k, frame) in frames.iter().enumerate() {
            let _ = write!(
                svg,
                "{}%{{transform:translateY(-{}px)}}",
                percent(frame.start, total),
                k as u32 * height
            );
        }
        let _ = writeln!(
            svg,
            "100%{{transform:translateY(-{}px)}}}}",
            (frames.len() - 1) as u32 * height
        );
        let _ = writeln!(
            svg,
            "#film{{animation:film {}s steps(1,end) infinite}}",
            seconds(total)
        );
        // Whoever asked for less motion gets the verdict.
        let _ = writeln!(
            svg,
            "@media (prefers-reduced-motion:reduce){{#film{{animation:none;transform:translateY(-{}px)}}}}",
            (frames.len() - 1) as u32 * height
        );
    }
    svg.push_str("</style>\n<defs>\n");
    for (i, row) in sheet.rows.iter().enumerate() {
        let _ = writeln!(svg, r#"<g id="r{i}">{row}</g>"#);
    }
    let _ = writeln!(
        svg,
        "</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"{DEFAULT_BG}\"/>\n<g id=\"film\">"
    );
    for (k, (frame, rows)) in frames.iter().zip(&rows).enumerate() {
        let top = k as u32 * height + PADDING;
        let id = if frame.first_violation.is_some() {
            "first-violation".to_owned()
        } else {
            format!("frame{k}")
        };
        let _ = write!(
            svg,
            r#"<g id="{id}" class="frame" data-start="{}" data-duration="{}">"#,
            seconds(frame.start),
            seconds(frame.duration)
        );
        if let Some(headline) = frame.first_violation {
            svg.push_str("<title>first violation: ");
            escape_into(&mut svg, headline);
            svg.push_str("</title>");
        }
        svg.push('\n');
        for (y, row) in rows.iter().enumerate() {
            if let Some(row) = row {
                let _ = writeln!(
                    svg,
                    r##"<use href="#r{row}" x="{PADDING}" y="{}"/>"##,
                    top + y as u32 * CELL_HEIGHT
                );
            }
        }
        svg.push_str("</g>\n");
    }
    svg.push_str("</g>\n</svg>\n");
    svg
}

/// Seconds to the millisecond, without trailing zeros.
fn seconds(s: f64) -> String {
    trim(format!("{s:.3}"))
}

/// A keyframe's offset: three decimals keep every frame of a long run within a millisecond.
fn percent(at: f64, total: f64) -> String {
    trim(format!("{:.3}", at / total * 100.0))
}

fn trim(mut number: String) -> String {
    if number.contains('.') {
        while number.ends_with('0') {
            number.pop();
        }
        if number.ends_with('.') {
            number.pop();
        }
    }
    number
}

#[cfg(test)]
mod tests {
    use super::ink::{ANSI, DEFAULT_FG, rgb};
    use super::*;
    use ratatui::layout::Rect;
    use ratatui::style::Style;
    use ratatui::style::{Color, Modifier};

    fn rendered(buffer: &Buffer) -> (String, Sheet) {
        let mut sheet = Sheet::default();
        let markup = sheet.row(buffer, 0);
        (markup, sheet)
    }

    #[test]
    fn cells_become_escaped_text_with_their_colours() {
        let mut buffer = Buffer::empty(Rect::new(0, 0, 12, 1));
        buffer.set_string(0, 0, "<&>", Style::new());
        buffer.set_string(
            4,
            0,
            "R",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        );
        buffer.set_string(6, 0, "V", Style::new().add_modifier(Modifier::REVERSED));
        let (markup, sheet) = rendered(&buffer);
        assert!(markup.contains(">&lt;&amp;&gt;</text>"), "{markup}");
        assert!(!markup.contains("<&>"), "{markup}");

        let red_bold = Ink {
            fill: ANSI[1],
            bold: true,
            italic: false,
            dim: false,
            underlined: false,
            crossed_out: false,
        };
        let red = sheet.ink_ids[&red_bold];
        assert!(
            markup.contains(&format!(
                r#"<text x="36" y="14" textLength="9" class="t{red}">R<"#
            )),
            "{markup}"
        );
        assert_eq!(red_bold.css(), "fill:#e5534b;font-weight:bold");

        // Reversed: the text takes the background's colour, the cell the text's.
        let reversed = Ink {
            fill: DEFAULT_BG,
            bold: false,
            ..red_bold
        };
        let v = sheet.ink_ids[&reversed];
        assert!(
            markup.contains(&format!(r#"x="54" y="14" textLength="9" class="t{v}">V<"#)),
            "{markup}"
        );
        assert_eq!(sheet.backgrounds, vec![DEFAULT_FG]);
        assert!(
            markup.contains(r#"<rect x="54" width="9" height="17" class="b0"/>"#),
            "{markup}"
        );
    }

    #[test]
    fn a_wide_character_takes_two_cells_and_blanks_join_a_run() {
        let mut buffer = Buffer::empty(Rect::new(0, 0, 10, 1));
        buffer.set_string(0, 0, "a 界 b", Style::new());
        let (markup, _) = rendered(&buffer);
        // One run: a, blank, the wide character over two cells, blank, b — six cells.
        assert_eq!(
            markup,
            r#"<text x="0" y="14" textLength="54" class="t0">a 界 b</text>"#
        );
    }

    #[test]
    fn palette_covers_indexed_and_rgb_colours() {
        assert_eq!(rgb(Color::Indexed(9), DEFAULT_FG), ANSI[9]);
        assert_eq!(rgb(Color::Indexed(196), DEFAULT_FG), Rgb(255, 0, 0));
        assert_eq!(rgb(Color::Indexed(232), DEFAULT_FG), Rgb(8, 8, 8));
        assert_eq!(rgb(Color::Rgb(1, 2, 3), DEFAULT_FG), Rgb(1, 2, 3));
        assert_eq!(rgb(Color::Reset, DEFAULT_BG), DEFAULT_BG);
        assert_eq!(Rgb(1, 2, 255).to_string(), "#0102ff");
    }

    fn frame(text: &str, hold: f64, first_violation: Option<&str>) -> Frame {
        let mut screen = Buffer::empty(Rect::new(0, 0, 4, 1));
        screen.set_string(0, 0, text, Style::new());
        Frame {
            at: 0.0,
            hold,
            ansi: Vec::new(),
            screen,
            first_violation: first_violation.map(str::to_owned),
        }
    }

    #[test]
    fn a_frame_that_repeats_the_screen_extends_the_one_before() {
        let frames = [
            frame("a", 1.0, None),
            frame("a", 0.5, Some("FORK")),
            frame("b", 2.0, None),
            frame("b", 0.0, None),
        ];
        let shown = shown(&frames);
        let times: Vec<(f64, f64)> = shown.iter().map(|s| (s.start, s.duration)).collect();
        assert_eq!(times, [(0.0, 1.5), (1.5, 2.0)]);
        assert_eq!(shown[0].first_violation, Some("FORK"));
        assert_eq!(shown[1].first_violation, None);
    }

    #[test]
    fn numbers_lose_trailing_zeros() {
        assert_eq!(seconds(2.5), "2.5");
        assert_eq!(seconds(3.0), "3");
        assert_eq!(percent(1.0, 3.0), "33.333");
    }
}
