//! Keys → commands. Every lab-changing key is an [`Action`], the same values a scenario uses.

use super::timeline::Jump;
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
    /// Time travel: pause and move through what the screen showed.
    Travel(Jump),
    /// Back to the present (leaves time travel).
    Live,
    /// Select the previous (`-1`) or next (`1`) event in the lanes.
    Select(i8),
    /// Lanes: the whole run in the width, or follow the present.
    Zoom,
    /// Presenter mode: fewer panes, wider lanes, a bigger verdict.
    Present,
    /// Predict, then reveal: hide the verdict (and the red marks) until pressed again.
    HideVerdict,
    /// The knobs overlay: change the lab's settings.
    Knobs,
    /// Save what was done since the labs started as a scenario file.
    SaveScenario,
    /// Explain condition 1–5 on the invariant panel (again: close it).
    Explain(u8),
    Quit,
}

/// The bindings, in the order help lists them: key label, command, words.
pub const BINDINGS: [(&str, Command, &str); 29] = [
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
    (
        "← →",
        Command::Travel(Jump::Back(1)),
        "travel a change (PgUp/Dn: 10)",
    ),
    (
        "Home End",
        Command::Travel(Jump::Start),
        "oldest kept / live (also l)",
    ),
    (
        "v",
        Command::Travel(Jump::FirstViolation),
        "violations, the fork first",
    ),
    (
        "[ ]",
        Command::Travel(Jump::PreviousDecision),
        "previous / next decision",
    ),
    (", .", Command::Select(-1), "select an event (or click)"),
    ("z", Command::Zoom, "lanes: whole run ⇄ follow"),
    ("f", Command::Present, "presenter mode"),
    ("V", Command::HideVerdict, "predict: hide ⇄ reveal verdict"),
    ("k", Command::Knobs, "knobs: grace, retry, rates…"),
    ("w", Command::SaveScenario, "save what I did as a scenario"),
    ("1–5", Command::Explain(1), "explain a condition"),
    ("?", Command::ToggleHelp, "this help"),
    ("q", Command::Quit, "quit (Esc closes things first)"),
];

/// The short list the footer shows, most wanted first: a narrow footer keeps a prefix of it
/// and the last entry, the way out.
pub const FOOTER: [(&str, &str); 13] = [
    ("?", "help"),
    ("d", "drop"),
    ("t", "strip token"),
    ("n", "naive"),
    ("e", "emit"),
    ("x", "tool call"),
    ("←", "travel"),
    ("space", "pause"),
    ("m", "compare"),
    ("p", "scenarios"),
    ("c", "reconnect"),
    ("r", "reset"),
    ("q", "quit"),
];

/// Ctrl-C: the one key that means the same wherever the dashboard is.
pub fn is_interrupt(key: KeyEvent) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL)
        && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C'))
}

pub fn command_for(key: KeyEvent) -> Option<Command> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return is_interrupt(key).then_some(Command::Quit);
    }
    let travel = match key.code {
        KeyCode::Left => Some(Command::Travel(Jump::Back(1))),
        KeyCode::Right => Some(Command::Travel(Jump::Forward(1))),
        KeyCode::PageUp => Some(Command::Travel(Jump::Back(10))),
        KeyCode::PageDown => Some(Command::Travel(Jump::Forward(10))),
        KeyCode::Home => Some(Command::Travel(Jump::Start)),
        KeyCode::End | KeyCode::Char('l') => Some(Command::Live),
        // Esc closes what is open (help, a card, time travel) before it quits.
        KeyCode::Esc => Some(Command::Quit),
        KeyCode::Char('[') => Some(Command::Travel(Jump::PreviousDecision)),
        KeyCode::Char(']') => Some(Command::Travel(Jump::NextDecision)),
        KeyCode::Char(',') => Some(Command::Select(-1)),
        KeyCode::Char('.') => Some(Command::Select(1)),
        KeyCode::Char(c @ '1'..='5') => Some(Command::Explain(c as u8 - b'0')),
        _ => None,
    };
    if travel.is_some() {
        return travel;
    }
    let label = match key.code {
        KeyCode::Char(' ') => "space".to_owned(),
        KeyCode::Char('=') => "+".to_owned(),
        KeyCode::Char(c) => c.to_string(),
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
            command_for(key(KeyCode::Char('Z'), KeyModifiers::SHIFT)),
            None
        );
        assert_eq!(
            command_for(key(KeyCode::Left, KeyModifiers::NONE)),
            Some(Command::Travel(Jump::Back(1)))
        );
        assert_eq!(
            command_for(key(KeyCode::Char(']'), KeyModifiers::NONE)),
            Some(Command::Travel(Jump::NextDecision))
        );
        assert_eq!(
            command_for(key(KeyCode::End, KeyModifiers::NONE)),
            Some(Command::Live)
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
