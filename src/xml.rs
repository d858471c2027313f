//! Text written into XML (an SVG recording, a JUnit report): the markup characters escaped,
//! and what XML 1.0 cannot carry never written, so every file parses — the one escaper both use.

/// What becomes of a control character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controls {
    /// A space, as a terminal cell draws it (every C0 control and DEL).
    Blank,
    /// Line breaks and tabs kept, as evidence quotes them; every other C0 control U+FFFD.
    Replace,
}

/// Appends `text` to `out`, escaped for an XML attribute value or character data.
pub fn escape_into(out: &mut String, text: &str, controls: Controls) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\u{0}'..='\u{1f}' | '\u{7f}' if controls == Controls::Blank => out.push(' '),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
}

/// [`escape_into`] a new string.
pub fn escape(text: &str, controls: Controls) -> String {
    let mut out = String::with_capacity(text.len());
    escape_into(&mut out, text, controls);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped_and_controls_never_written() {
        assert_eq!(
            escape("a<b>&\"'", Controls::Blank),
            "a&lt;b&gt;&amp;&quot;&apos;"
        );
        assert_eq!(escape("x\u{1}\ty\u{7f}", Controls::Blank), "x  y ");
        assert_eq!(
            escape("x\u{1}\ty\u{ffff}", Controls::Replace),
            "x\u{FFFD}\ty\u{FFFD}"
        );
    }
}
