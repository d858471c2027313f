//! The state a decision reads: sessions, the streams they minted, each stream's replay buffer,
//! and the one replay memory budget over all of them.
//!
//! It sits below both the policies that read it ([`crate::resume`]) and the server that
//! changes it ([`crate::server`]), so a policy decides on this state without importing the
//! server that carries its decision out.

mod budget;
mod replay_buffer;
mod session;
mod stream;

pub(crate) use budget::ReplayBudget;
pub(crate) use replay_buffer::SharedEvents;
pub use session::Session;
pub use stream::{Stream, StreamState};
