//! What the dashboard's integration tests share: key presses as the terminal delivers them.

use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers,
};

/// A plain character key, pressed.
pub fn key(c: char) -> Event {
    code(KeyCode::Char(c))
}

/// Any key, pressed without modifiers.
pub fn code(code: KeyCode) -> Event {
    Event::Key(KeyEvent {
        code,
        modifiers: KeyModifiers::NONE,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    })
}
