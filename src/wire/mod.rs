//! Thin adapters between HTTP and the core: the axum server, the reqwest client, SSE framing and
//! the fault proxy. They parse, ask the core, and write what it decided; the protocol rules
//! themselves live in `forkscope-core`. Every MCP request a client here sends is built by
//! [`mcp`].

pub mod balance;
pub mod client;
pub mod headers;
pub mod mcp;
pub mod proxy;
pub mod replica;
pub mod server;
pub mod sse;

/// The server's JSON-RPC writers live with the rest of the JSON-RPC shapes, in [`mcp`].
pub use mcp::jsonrpc;

use forkscope_core::{Client, Entropy, History, Server};
use rand::{RngCore, SeedableRng, rngs::StdRng};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Randomness for session ids and tokens: a CSPRNG seeded from the operating system.
#[derive(Debug)]
pub struct OsEntropy(StdRng);

impl OsEntropy {
    pub fn new() -> Self {
        OsEntropy(StdRng::from_os_rng())
    }
}

impl Default for OsEntropy {
    fn default() -> Self {
        Self::new()
    }
}

impl Entropy for OsEntropy {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}

/// Everything the adapters share: the core's server and client, the history both write to, and
/// the server's open SSE writers. One lock, held briefly and never across an await.
#[derive(Debug)]
pub struct Core {
    pub server: Server,
    pub client: Client,
    pub history: History,
    pub rng: OsEntropy,
    pub io: server::ServerIo,
}

impl Core {
    /// A fresh core for `policy`: server, client and history, no sessions yet.
    pub fn new(
        config: forkscope_core::LabConfig,
        policy: forkscope_core::Policy,
    ) -> Result<Core, forkscope_core::ConfigError> {
        Ok(Core {
            server: Server::new(config, policy)?,
            client: Client::new(policy, config.retry),
            history: History::new(config.history_capacity),
            rng: OsEntropy::new(),
            io: server::ServerIo::default(),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Shared(Arc<Mutex<Core>>);

impl Shared {
    pub fn new(core: Core) -> Self {
        Shared(Arc::new(Mutex::new(core)))
    }

    /// Locks the core. A panic elsewhere must not wedge the lab, so poisoning is ignored: the
    /// core's own methods leave it consistent between calls.
    pub fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
