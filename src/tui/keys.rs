//! Keys → commands. Every lab-changing key is an [`Action`], the same values a scenario uses.

use super::timeline::Jump;
use crate::lab::Action;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Lab(Action),
    /// Naive ⇄ fenced, as a fresh lab (from an SDK's policy: fenced).
    NextPolicy,
    /// The policy picker: every policy with what it reproduces and its sources.
    PickPolicy,
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
    /// Restart the labs as a lab of replicas on the in-memory store, or back as one server.
    ToggleReplicas,
    /// Restart the labs on the next revision set: both, 2026-07-28 alone, 2025-11-25 alone.
    NextRevision,
    /// Choose the replica (0 = A) the replica keys act on.
    PickReplica(u8),
    /// A replica key, on the chosen replica.
    Replica(ReplicaKey),
    Quit,
}

/// What a replica key does to the chosen replica; a toggle reads the replica's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaKey {
    /// Kill it, or start it again once killed.
    KillOrStart,
    /// Partition it from the store, or heal it.
    IsolateOrHeal,
    /// The balancer's next request goes to it.
    RouteNext,
    /// Its background emitters emit once.
    Emit,
}

/// The bindings, in the order help lists them: key label, command, words.
pub const BINDINGS: [(&str, Command, &str); 30] = [
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
    ("n o", Command::NextPolicy, "naive ⇄ fenced · o: pick any"),
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
        "X a Y",
        Command::Lab(Action::CallTask),
        "task · a loses it · Y revision",
    ),
    (
        "space",
        Command::Lab(Action::TogglePause),
        "pause / resume lab time",
    ),
    ("s", Command::Lab(Action::Step), "single step while paused"),
    ("+ -", Command::Lab(Action::SpeedUp), "faster / slower"),
    ("R", Command::Lab(Action::Restart), "restart the lab"),
    ("m", Command::ToggleCompare, "compare: labs side by side"),
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
    ("L", Command::ToggleReplicas, "lab of replicas ⇄ one server"),
    ("1–5", Command::Explain(1), "explain a condition/guarantee"),
    ("?", Command::ToggleHelp, "this help"),
    ("q", Command::Quit, "quit (Esc closes things first)"),
];

/// The keys of a lab of replicas (`--replicas 2`, or `L`), listed by help only there. Every
/// replica action has one; A–D choose the replica the others act on.
pub const REPLICA_BINDINGS: [(&str, Command, &str); 9] = [
    (
        "A–D",
        Command::PickReplica(0),
        "choose the replica keys act on",
    ),
    (
        "K",
        Command::Replica(ReplicaKey::KillOrStart),
        "kill it ⇄ start it again",
    ),
    (
        "I",
        Command::Replica(ReplicaKey::IsolateOrHeal),
        "cut it from the store ⇄ heal",
    ),
    (
        "N",
        Command::Replica(ReplicaKey::RouteNext),
        "send the next request to it",
    ),
    (
        "E",
        Command::Replica(ReplicaKey::Emit),
        "its emitters emit once",
    ),
    (
        "G",
        Command::Lab(Action::ToggleRouting),
        "routing round-robin ⇄ sticky",
    ),
    (
        "S",
        Command::Lab(Action::RestartStore),
        "restart the store (loses all)",
    ),
    (
        "O",
        Command::Lab(Action::SnapshotStore),
        "take a snapshot of the store",
    ),
    (
        "U",
        Command::Lab(Action::RestoreStore),
        "restore it: a rollback",
    ),
];

/// The short list the footer shows, most wanted first: a narrow footer keeps a prefix of it
/// and the last entry, the way out.
pub const FOOTER: [(&str, &str); 13] = [
    ("?", "help"),
    ("d", "drop"),
    ("t", "strip token"),
    ("n", "policy"),
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

/// The footer of a lab of replicas: the replica keys first, then the fault that forks.
pub const FOOTER_REPLICAS: [(&str, &str); 12] = [
    ("?", "help"),
    ("A B", "replica"),
    ("K", "kill⇄start"),
    ("N", "next→"),
    ("I", "isolate"),
    ("G", "routing"),
    ("d", "drop"),
    ("c", "reconnect"),
    ("e", "emit"),
    ("n", "naive"),
    ("L", "one server"),
    ("q", "quit"),
];

/// Whether `command` acts on a 2025-11-25 stream or session: a lab of 2026-07-28 alone has
/// none, and its help leaves the key out (the lab refuses it, saying so).
pub fn on_a_stream(command: &Command) -> bool {
    matches!(command, Command::Lab(action) if action.on_a_stream().is_some())
}

/// The footer of a lab of 2026-07-28 alone: its own keys (a task call, a lost answer), none of
/// the streams' (nothing to drop or resume on that wire).
pub const FOOTER_MODERN: [(&str, &str); 10] = [
    ("?", "help"),
    ("X", "task call"),
    ("a", "lose its answer"),
    ("n", "policy"),
    ("o", "SDKs"),
    ("←", "travel"),
    ("space", "pause"),
    ("m", "compare"),
    ("p", "scenarios"),
    ("q", "quit"),
];

/// The footer of a lab of 2026-07-28 replicas: the replica keys, then the task's.
pub const FOOTER_MODERN_REPLICAS: [(&str, &str); 11] = [
    ("?", "help"),
    ("A B", "replica"),
    ("K", "kill⇄start"),
    ("N", "next→"),
    ("I", "isolate"),
    ("G", "routing"),
    ("X", "task call"),
    ("a", "lose its answer"),
    ("n", "naive"),
    ("L", "one server"),
    ("q", "quit"),
];

/// The key line for a lab: of replicas or one server, speaking 2026-07-28 alone or not.
pub fn footer(replicas: bool, modern_only: bool) -> &'static [(&'static str, &'static str)] {
    match (replicas, modern_only) {
        (true, true) => &FOOTER_MODERN_REPLICAS,
        (true, false) => &FOOTER_REPLICAS,
        (false, true) => &FOOTER_MODERN,
        (false, false) => &FOOTER,
    }
}

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
        KeyCode::Char(c @ 'A'..='D') => Some(Command::PickReplica(c as u8 - b'A')),
        // One row of help for both: the toggle and the picker of every policy.
        KeyCode::Char('n') => Some(Command::NextPolicy),
        KeyCode::Char('o') => Some(Command::PickPolicy),
        // The second keys of the bindings that share a row of help ("+ -", "X a Y").
        KeyCode::Char('+') | KeyCode::Char('=') => Some(Command::Lab(Action::SpeedUp)),
        KeyCode::Char('-') => Some(Command::Lab(Action::SpeedDown)),
        KeyCode::Char('a') => Some(Command::Lab(Action::LoseAnswer)),
        KeyCode::Char('X') => Some(Command::Lab(Action::CallTask)),
        KeyCode::Char('Y') => Some(Command::NextRevision),
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
        .chain(&REPLICA_BINDINGS)
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
            command_for(key(KeyCode::Char('o'), KeyModifiers::NONE)),
            Some(Command::PickPolicy)
        );
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
        assert_eq!(
            command_for(key(KeyCode::Char('n'), KeyModifiers::NONE)),
            Some(Command::NextPolicy)
        );
        assert_eq!(
            command_for(key(KeyCode::Char('B'), KeyModifiers::SHIFT)),
            Some(Command::PickReplica(1))
        );
        assert_eq!(
            command_for(key(KeyCode::Char('K'), KeyModifiers::SHIFT)),
            Some(Command::Replica(ReplicaKey::KillOrStart))
        );
        assert_eq!(
            command_for(key(KeyCode::Char('G'), KeyModifiers::SHIFT)),
            Some(Command::Lab(Action::ToggleRouting))
        );
    }

    /// No key means two things: a replica key never shadows another.
    #[test]
    fn every_key_is_bound_once() {
        let mut labels: Vec<&str> = BINDINGS
            .iter()
            .chain(&REPLICA_BINDINGS)
            .map(|(k, _, _)| *k)
            .collect();
        let all = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), all);
    }

    /// Every replica action is reached by a replica key (the toggles reach both halves).
    #[test]
    fn every_replica_action_has_a_key() {
        let reached = |c: Command| REPLICA_BINDINGS.iter().any(|(_, b, _)| *b == c);
        assert!(reached(Command::Replica(ReplicaKey::KillOrStart)));
        assert!(reached(Command::Replica(ReplicaKey::IsolateOrHeal)));
        assert!(reached(Command::Replica(ReplicaKey::RouteNext)));
        assert!(reached(Command::Replica(ReplicaKey::Emit)));
        assert!(reached(Command::Lab(Action::ToggleRouting)));
        assert!(reached(Command::Lab(Action::RestartStore)));
        assert!(reached(Command::Lab(Action::SnapshotStore)));
        assert!(reached(Command::Lab(Action::RestoreStore)));
    }

    #[test]
    fn every_lab_action_has_a_key() {
        let pressed: Vec<_> = (' '..='~')
            .filter_map(|c| command_for(key(KeyCode::Char(c), KeyModifiers::NONE)))
            .collect();
        for action in Action::ALL {
            assert!(pressed.contains(&Command::Lab(action)), "{action:?}");
        }
    }
}
