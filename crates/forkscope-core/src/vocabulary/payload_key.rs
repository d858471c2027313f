//! The key a payload carries: which side effect a client applies on receiving it. Applying one
//! key twice is a duplicate side effect however the event was numbered, so every emitter (the
//! tool call, the background emitter, in the Sim and on the wire alike) names its effects
//! through this one type, and everything that reads a key back parses it here.

use crate::ids::{SessionId, StreamId, parse_decimal};
use std::fmt::{self, Write as _};
use std::str::FromStr;
use std::sync::Arc;
use thiserror::Error;

/// The side effect a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Progress step `step` (from 1) of the tool call answered on request stream `call`.
    Progress { call: StreamId, step: u64 },
    /// The tool call's result.
    Result { call: StreamId },
    /// The tool call was cut short by a stopping server: its last message.
    Stopped { call: StreamId },
    /// The session's `n`th background event (from 1).
    Background { n: u64 },
}

/// A payload's key: a session (by its short spelling, enough to tell sessions apart in one
/// lab) and the effect. Spelled `3fa2c1:call2:progress3`, `3fa2c1:call2:result`,
/// `3fa2c1:call2:stopped` or `3fa2c1:bg:7`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PayloadKey {
    session: u32,
    effect: Effect,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "{0:?} is not a payload key (<session>:call<n>:progress<step>|result|stopped, or <session>:bg:<n>)"
)]
pub struct PayloadKeyError(String);

impl PayloadKey {
    pub fn new(session: SessionId, effect: Effect) -> Self {
        PayloadKey {
            session: session.short_bits(),
            effect,
        }
    }

    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The bits of the session's short spelling ([`SessionId::short_bits`]).
    pub fn session_bits(&self) -> u32 {
        self.session
    }

    /// Whether the key ends a tool call's stream (its result, or why it stopped).
    pub fn ends_call(&self) -> bool {
        matches!(self.effect, Effect::Result { .. } | Effect::Stopped { .. })
    }

    /// The key as a payload holds it. Spelled on the stack, then copied once into the `Arc`:
    /// one allocation per event, on the path every emit takes.
    pub fn to_shared(&self) -> Arc<str> {
        let mut spelled = Spelled::default();
        // A key is at most 6 + 5 + 10 + 9 + 20 bytes; `Spelled` holds 64.
        let _ = write!(spelled, "{self}");
        Arc::from(spelled.as_str())
    }
}

impl fmt::Display for PayloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06x}:", self.session)?;
        match self.effect {
            Effect::Progress { call, step } => write!(f, "call{}:progress{step}", call.0),
            Effect::Result { call } => write!(f, "call{}:result", call.0),
            Effect::Stopped { call } => write!(f, "call{}:stopped", call.0),
            Effect::Background { n } => write!(f, "bg:{n}"),
        }
    }
}

impl FromStr for PayloadKey {
    type Err = PayloadKeyError;

    /// Reads a key only as `Display` spells it.
    fn from_str(s: &str) -> Result<Self, PayloadKeyError> {
        let parse = || {
            let (session, rest) = s.split_once(':')?;
            let session = SessionId::parse_short(session)?;
            let effect = if let Some(n) = rest.strip_prefix("bg:") {
                Effect::Background {
                    n: parse_decimal(n)?,
                }
            } else {
                let (call, what) = rest.strip_prefix("call")?.split_once(':')?;
                let call = StreamId(parse_decimal(call)?);
                match what {
                    "result" => Effect::Result { call },
                    "stopped" => Effect::Stopped { call },
                    _ => Effect::Progress {
                        call,
                        step: parse_decimal(what.strip_prefix("progress")?)?,
                    },
                }
            };
            Some(PayloadKey { session, effect })
        };
        parse().ok_or_else(|| PayloadKeyError(s.to_owned()))
    }
}

impl From<PayloadKey> for Arc<str> {
    fn from(key: PayloadKey) -> Arc<str> {
        key.to_shared()
    }
}

/// A key's spelling on the stack.
struct Spelled {
    bytes: [u8; 64],
    len: usize,
}

impl Default for Spelled {
    fn default() -> Self {
        Spelled {
            bytes: [0; 64],
            len: 0,
        }
    }
}

impl Spelled {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever written in.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl fmt::Write for Spelled {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let room = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SplitMix64;

    #[test]
    fn every_effect_round_trips_through_its_spelling() {
        let session = SessionId::generate(&mut SplitMix64::new(7));
        let short = session.short();
        let call = StreamId(2);
        for (effect, spelled) in [
            (
                Effect::Progress { call, step: 3 },
                format!("{short}:call2:progress3"),
            ),
            (Effect::Result { call }, format!("{short}:call2:result")),
            (Effect::Stopped { call }, format!("{short}:call2:stopped")),
            (Effect::Background { n: 41 }, format!("{short}:bg:41")),
        ] {
            let key = PayloadKey::new(session, effect);
            assert_eq!(key.to_string(), spelled);
            assert_eq!(&*key.to_shared(), spelled);
            assert_eq!(spelled.parse::<PayloadKey>(), Ok(key));
            assert_eq!(
                key.ends_call(),
                matches!(effect, Effect::Result { .. } | Effect::Stopped { .. })
            );
        }
    }

    #[test]
    fn the_longest_key_fits_its_stack_spelling() {
        let session = SessionId::generate(&mut SplitMix64::new(1));
        let key = PayloadKey::new(
            session,
            Effect::Progress {
                call: StreamId(u32::MAX),
                step: u64::MAX,
            },
        );
        assert_eq!(&*key.to_shared(), key.to_string());
    }

    #[test]
    fn only_the_one_spelling_parses() {
        for bad in [
            "",
            "abc:bg:9",
            "3fa2c1:bg:09",
            "3fa2c1:bg:",
            "3FA2C1:bg:1",
            "3fa2c1:call:result",
            "3fa2c1:call1:progress",
            "3fa2c1:call1:progress01",
            "3fa2c1:call1:finished",
            "3fa2c1:call1",
        ] {
            assert!(bad.parse::<PayloadKey>().is_err(), "{bad:?} parsed");
        }
    }
}
