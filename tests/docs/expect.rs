//! How an output shown in a doc is compared with what the program printed: snapbox's
//! wildcards, written the way the docs write an elision, and the values that differ on every
//! run compared by their shape.
//!
//! - `…` inside a line is snapbox's `[..]` (any text on that line); `...` alone on a line is
//!   any number of lines. Both are what a reader takes them for.
//! - A session id or resumption token (32 hex digits) and an event id's stream key
//!   (`s2-3.OkoSInPANFy`) match any value of that shape, so a doc can show a real-looking one.
//! - Trailing blanks are ignored (a doc cannot show them) and `\r\n` is `\n` (HTTP headers).

use regex::Regex;
use std::sync::LazyLock;

/// Values that are random on every run, by shape, and what both sides become.
static SHAPES: LazyLock<[(Regex, &str); 2]> = LazyLock::new(|| {
    [
        (Regex::new(r"\b[0-9a-f]{32}\b").unwrap(), "<hex id>"),
        // A key is base64url: it may end in `-`, where `\b` finds no boundary.
        (
            Regex::new(r"(?m)\b(s\d+-\d+)\.[A-Za-z0-9_-]{11}([^A-Za-z0-9_-]|$)").unwrap(),
            "$1.<stream key>$2",
        ),
    ]
});

/// Terminal colour codes, which a doc never shows.
static ANSI: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\x1b\[[0-9;]*m").unwrap());

fn normalise(text: &str) -> String {
    let mut text = ANSI
        .replace_all(&text.replace("\r\n", "\n"), "")
        .into_owned();
    for (shape, placeholder) in SHAPES.iter() {
        text = shape.replace_all(&text, *placeholder).into_owned();
    }
    text.split('\n')
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The doc's text as a snapbox pattern.
fn pattern(shown: &str) -> String {
    normalise(&shown.replace('…', "[..]"))
}

/// Whether ACTUAL is what SHOWN shows; `Err` carries snapbox's diff.
pub fn compare(actual: &str, shown: &str) -> Result<(), String> {
    snapbox::Assert::new()
        .normalize_paths(false)
        .try_eq(
            Some(&"the program's output"),
            snapbox::Data::text(normalise(actual)),
            snapbox::Data::text(pattern(shown)),
        )
        .map_err(|e| e.to_string())
}

/// Whether LINE matches SHOWN anywhere in it (`…` a wildcard): for a log line a doc quotes.
pub fn line_contains(line: &str, shown: &str) -> bool {
    let line = normalise(line);
    let pattern = pattern(shown);
    let pieces: Vec<&str> = pattern.split("[..]").collect();
    let mut rest = line.as_str();
    for piece in pieces {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_keys_match_by_shape_and_ellipses_are_wildcards() {
        let actual = "mcp-session-id: e43ab783ef7d8398ba7a34bde3524199\r\ndate: Fri, 04 Dec\r\n\r\n\
                      id: s2-3.Eb-h4beB1wG\ndata: \nid: s2-4.Eb-h4beB1wG\n";
        let shown = "mcp-session-id: 61c5287a28a3f34fb4077f70ad4b165c\ndate: …\n\n\
                     id: s2-3.OkoSInPANFy\ndata:\n...\n";
        assert_eq!(compare(actual, shown), Ok(()));
        assert!(compare(actual, "id: s2-4.OkoSInPANFy\n...\n").is_err());
    }

    #[test]
    fn a_key_may_end_in_any_base64url_character() {
        let shown = "id: s1-4.KTrW6xtn9Lg\ndata: x\n";
        for key in ["HzLifxA7H0-", "-zLifxA7H0_", "HzLifxA7H0a"] {
            assert_eq!(
                compare(&format!("id: s1-4.{key}\ndata: x\n"), shown),
                Ok(())
            );
        }
        assert!(compare("id: s1-4.HzLifxA7H0-x\ndata: x\n", shown).is_err());
    }

    #[test]
    fn a_missing_trailing_newline_is_a_difference() {
        assert!(compare("{\"id\":null}", "{\"id\":null}\n").is_err());
    }

    #[test]
    fn a_quoted_log_line_is_found_with_its_wildcards() {
        let line = "INFO forkscope::wire::server::driver: stream ended by its deadline session=e43ab7 stream=s2 state=\"fenced\"";
        assert!(line_contains(
            line,
            "stream ended by its deadline … state=\"fenced\""
        ));
        assert!(!line_contains(
            line,
            "stream ended by its deadline … state=\"closed\""
        ));
    }
}
