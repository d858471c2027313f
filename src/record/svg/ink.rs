//! Cell colours and text as SVG spells them: the dark terminal's palette, a cell's ink (colour
//! and weight) and background, and XML escaping.

use ratatui::style::{Color, Modifier};

/// The terminal's own colours, for `Color::Reset`.
pub(super) const DEFAULT_FG: Rgb = Rgb(0xd1, 0xd5, 0xda);
pub(super) const DEFAULT_BG: Rgb = Rgb(0x0d, 0x11, 0x17);

/// The sixteen ANSI colours of a dark terminal, in ANSI order (black, red, green, yellow, blue,
/// magenta, cyan, white; then their bright forms). Dark grey (8) is the dashboard's borders and
/// dim text, so it must stay readable on the background.
pub(super) const ANSI: [Rgb; 16] = [
    Rgb(0x1c, 0x1f, 0x24),
    Rgb(0xe5, 0x53, 0x4b),
    Rgb(0x57, 0xab, 0x5a),
    Rgb(0xc6, 0x90, 0x26),
    Rgb(0x53, 0x9b, 0xf5),
    Rgb(0xb0, 0x83, 0xf0),
    Rgb(0x39, 0xc5, 0xcf),
    Rgb(0xc5, 0xc8, 0xc6),
    Rgb(0x6e, 0x76, 0x81),
    Rgb(0xff, 0x93, 0x8a),
    Rgb(0x8d, 0xdb, 0x8c),
    Rgb(0xf0, 0xd4, 0x7a),
    Rgb(0x96, 0xd0, 0xff),
    Rgb(0xdc, 0xbd, 0xfb),
    Rgb(0x76, 0xe3, 0xea),
    Rgb(0xf0, 0xf3, 0xf6),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Rgb(pub(super) u8, pub(super) u8, pub(super) u8);

impl std::fmt::Display for Rgb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// The palette colour of `color`, `default` for `Color::Reset`.
pub(super) fn rgb(color: Color, default: Rgb) -> Rgb {
    let ansi = |n: usize| ANSI[n];
    match color {
        Color::Reset => default,
        Color::Black => ansi(0),
        Color::Red => ansi(1),
        Color::Green => ansi(2),
        Color::Yellow => ansi(3),
        Color::Blue => ansi(4),
        Color::Magenta => ansi(5),
        Color::Cyan => ansi(6),
        Color::Gray => ansi(7),
        Color::DarkGray => ansi(8),
        Color::LightRed => ansi(9),
        Color::LightGreen => ansi(10),
        Color::LightYellow => ansi(11),
        Color::LightBlue => ansi(12),
        Color::LightMagenta => ansi(13),
        Color::LightCyan => ansi(14),
        Color::White => ansi(15),
        Color::Rgb(r, g, b) => Rgb(r, g, b),
        Color::Indexed(n @ 0..16) => ansi(n as usize),
        // The xterm 6×6×6 cube, then the 24 greys.
        Color::Indexed(n @ 16..232) => {
            let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * v };
            let n = n - 16;
            Rgb(level(n / 36), level(n / 6 % 6), level(n % 6))
        }
        Color::Indexed(n) => {
            let v = 8 + 10 * (n - 232);
            Rgb(v, v, v)
        }
    }
}

/// How a run of text looks, once reversal and the terminal's defaults are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Ink {
    pub(super) fill: Rgb,
    pub(super) bold: bool,
    pub(super) italic: bool,
    pub(super) dim: bool,
    pub(super) underlined: bool,
    pub(super) crossed_out: bool,
}

impl Ink {
    pub(super) fn css(&self) -> String {
        let mut css = format!("fill:{}", self.fill);
        if self.bold {
            css.push_str(";font-weight:bold");
        }
        if self.italic {
            css.push_str(";font-style:italic");
        }
        if self.dim {
            css.push_str(";fill-opacity:.6");
        }
        match (self.underlined, self.crossed_out) {
            (true, true) => css.push_str(";text-decoration:underline line-through"),
            (true, false) => css.push_str(";text-decoration:underline"),
            (false, true) => css.push_str(";text-decoration:line-through"),
            (false, false) => {}
        }
        css
    }

    /// Whether a blank in this ink shows anything (a blank is otherwise just background).
    pub(super) fn marks_blanks(&self) -> bool {
        self.underlined || self.crossed_out
    }
}

/// One cell as drawn: its text (None when hidden), its ink, its background.
pub(super) fn resolve(cell: &ratatui::buffer::Cell) -> (Option<Ink>, Rgb) {
    let mut fg = rgb(cell.fg, DEFAULT_FG);
    let mut bg = rgb(cell.bg, DEFAULT_BG);
    if cell.modifier.contains(Modifier::REVERSED) {
        std::mem::swap(&mut fg, &mut bg);
    }
    let ink = Ink {
        fill: fg,
        bold: cell.modifier.contains(Modifier::BOLD),
        italic: cell.modifier.contains(Modifier::ITALIC),
        dim: cell.modifier.contains(Modifier::DIM),
        underlined: cell.modifier.contains(Modifier::UNDERLINED),
        crossed_out: cell.modifier.contains(Modifier::CROSSED_OUT),
    };
    let hidden = cell.modifier.contains(Modifier::HIDDEN);
    (if hidden { None } else { Some(ink) }, bg)
}

/// Text for the SVG: escaped as every XML file here is, a control drawn as the blank cell it is.
pub(super) fn escape_into(out: &mut String, text: &str) {
    crate::xml::escape_into(out, text, crate::xml::Controls::Blank);
}
