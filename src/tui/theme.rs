//! Every colour the dashboard uses, in one place. With `NO_COLOR` set, colours go and only
//! modifiers (bold, reversed, underline) remain, so the policy and the verdict still stand out.

use ratatui::style::{Color, Modifier, Style};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    pub fn from_env() -> Self {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    fn fg(&self, color: Color) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }

    pub fn text(&self) -> Style {
        Style::new()
    }
    pub fn dim(&self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new().add_modifier(Modifier::DIM)
        }
    }
    pub fn title(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    pub fn border(&self) -> Style {
        self.fg(Color::DarkGray)
    }
    pub fn good(&self) -> Style {
        self.fg(Color::Green)
    }
    pub fn bad(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    pub fn warn(&self) -> Style {
        self.fg(Color::Yellow)
    }
    pub fn accent(&self) -> Style {
        self.fg(Color::Magenta)
    }
    pub fn key(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    /// The policy badge: unmistakable at a glance, in colour or not.
    pub fn policy_badge(&self, fenced: bool) -> Style {
        let base = Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED);
        if !self.color {
            return base;
        }
        Style::new()
            .add_modifier(Modifier::BOLD)
            .fg(Color::Black)
            .bg(if fenced { Color::Green } else { Color::Red })
    }
    /// The verdict line: green when clean, red and underlined when not.
    pub fn verdict(&self, clean: bool) -> Style {
        if clean {
            self.good().add_modifier(Modifier::BOLD)
        } else {
            self.bad().add_modifier(Modifier::UNDERLINED)
        }
    }
    /// The lane colour of stream `n`.
    pub fn stream(&self, n: u32) -> Style {
        const PALETTE: [Color; 4] = [
            Color::Blue,
            Color::Cyan,
            Color::LightMagenta,
            Color::LightBlue,
        ];
        self.fg(PALETTE[(n as usize).saturating_sub(1) % PALETTE.len()])
    }
}
