//! Keys → commands. Every lab-changing key is an [`Action`], the same values a scenario uses.

use crate::lab::Action;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Lab(Action),
    ToggleCompare,
    ToggleHelp,
    OpenPicker,
    /// Run a bounded exhaustive check of the lab's policy.
    Prove,
    Quit,
}

/// The bindings, in the order help lists them: key label, command, words.
pub const BINDINGS: [(&str, Command, &str); 19] = [
    (
        "d",
        Command::Lab(Action::DropConnection),
        "drop the connection (NAT drop)",
    ),
    (
        "r",
        Command::Lab(Action::Reset),
        "reset (both sides see it)",
    ),
    (
        "h",
        Command::Lab(Action::ExpireHalfOpen),
        "half-open side times out",
    ),
    (
        "t",
        Command::Lab(Action::StripToken),
        "strip the token on next retry",
    ),
    (
        "n",
        Command::Lab(Action::ToggleNaive),
        "naive ⇄ fenced (naive forks)",
    ),
    (
        "c",
        Command::Lab(Action::ReconnectNow),
        "reconnect now (skip backoff)",
    ),
    (
        "e",
        Command::Lab(Action::EmitBackground),
        "emit a background event",
    ),
    (
        "x",
        Command::Lab(Action::StartToolCall),
        "call the progress_task tool",
    ),
    (
        "space",
        Command::Lab(Action::TogglePause),
        "pause / resume lab time",
    ),
    ("s", Command::Lab(Action::Step), "single step while paused"),
    ("+", Command::Lab(Action::SpeedUp), "faster"),
    ("-", Command::Lab(Action::SpeedDown), "slower"),
    ("R", Command::Lab(Action::Restart), "restart the lab"),
    ("m", Command::ToggleCompare, "naive and fenced side by side"),
    ("p", Command::OpenPicker, "pick and play a scenario"),
    ("P", Command::Prove, "prove it: check every schedule"),
    ("?", Command::ToggleHelp, "this help"),
    ("q", Command::Quit, "quit (also Esc, Ctrl-C)"),
    ("Esc", Command::Quit, "quit (closes help first)"),
];

/// The short list the footer shows.
pub const FOOTER: [(&str, &str); 12] = [
    ("?", "help"),
    ("d", "drop"),
    ("t", "strip token"),
    ("n", "naive"),
    ("e", "emit"),
    ("x", "tool call"),
    ("c", "reconnect"),
    ("r", "reset"),
    ("space", "pause"),
    ("m", "compare"),
    ("p", "scenarios"),
    ("q", "quit"),
];

pub fn command_for(key: KeyEvent) -> Option<Command> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C'))
            .then_some(Command::Quit);
    }
    let label = match key.code {
        KeyCode::Char(' ') => "space".to_owned(),
        KeyCode::Char('=') => "+".to_owned(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::Esc => "Esc".to_owned(),
        _ => return None,
    };
    BINDINGS
        .iter()
        .find(|(k, _, _)| *k == label)
        .map(|(_, c, _)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyEventKind;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent {
            code,
            modifiers,
            kind: KeyEventKind::Press,
            state: ratatui::crossterm::event::KeyEventState::NONE,
        }
    }

    #[test]
    fn keys_map_to_commands() {
        assert_eq!(
            command_for(key(KeyCode::Char('d'), KeyModifiers::NONE)),
            Some(Command::Lab(Action::DropConnection))
        );
        assert_eq!(
            command_for(key(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Command::Quit)
        );
        assert_eq!(
            command_for(key(KeyCode::Char('c'), KeyModifiers::NONE)),
            Some(Command::Lab(Action::ReconnectNow))
        );
        assert_eq!(
            command_for(key(KeyCode::Char('R'), KeyModifiers::SHIFT)),
            Some(Command::Lab(Action::Restart))
        );
        assert_eq!(
            command_for(key(KeyCode::Char(' '), KeyModifiers::NONE)),
            Some(Command::Lab(Action::TogglePause))
        );
        assert_eq!(
            command_for(key(KeyCode::Esc, KeyModifiers::NONE)),
            Some(Command::Quit)
        );
        assert_eq!(
            command_for(key(KeyCode::Char('z'), KeyModifiers::NONE)),
            None
        );
    }

    #[test]
    fn every_lab_action_has_a_key() {
        for action in Action::ALL {
            assert!(
                BINDINGS.iter().any(|(_, c, _)| *c == Command::Lab(action)),
                "{action:?}"
            );
        }
    }
}
