//! forkscope: watch an MCP Streamable HTTP session fork, and watch a fenced resume prevent it.
//!
//! The protocol rules live in the `forkscope-core` crate. This crate holds the adapters
//! ([`wire`]: axum server, reqwest client, SSE, fault proxy), the running [`lab`] that wires
//! them to the core, and the headless runs built on them. The lab [`clock`] sits below both, so
//! the wire and the lab read one time source without depending on each other.

pub mod check;
pub mod clock;
pub mod demo;
pub mod incident;
pub mod lab;
pub mod new_file;
pub mod probe;
pub mod record;
pub mod scenario;
pub mod store;
pub mod tui;
pub mod wire;
pub mod xml;
