//! What the views read of a lab: one [`Snapshot`], taken at one instant (of a live lab, or of
//! the core's in-memory `Sim` for tests and recorded demos).

use super::{Exchange, RECENT_ENTRIES, ReplicasView};
use forkscope_core::View;
use forkscope_core::history::Entry;
use std::net::SocketAddr;

/// Everything the views show, taken at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub view: View,
    pub paused: bool,
    /// The clock moves only when a script advances it.
    pub scripted: bool,
    pub speed: f64,
    pub exchanges: Vec<Exchange>,
    /// The most recent history entries, oldest first.
    pub recent: Vec<Entry>,
    /// How many history entries the view was composed from (`History::total` then).
    pub entries: u64,
    pub server_connections: usize,
    pub proxied_connections: u64,
    pub half_open: u64,
    pub bytes_down: u64,
    pub bytes_up: u64,
    pub server_addr: SocketAddr,
    pub proxy_addr: SocketAddr,
    /// A lab of replicas: each replica, the balancer's routing, the store's records.
    pub replicas: Option<ReplicasView>,
    /// The revisions the lab's server speaks (`--protocol`, as its policy can speak them).
    pub protocols: forkscope_core::revision::Protocols,
}

impl Snapshot {
    /// A snapshot of an in-memory [`forkscope_core::sim::Sim`]: deterministic, for whole-screen
    /// tests, benches and recorded demos. No sockets, so the wire figures are zero.
    pub fn from_sim(sim: &forkscope_core::sim::Sim, exchanges: Vec<Exchange>) -> Snapshot {
        let recent = sim.history().recent();
        let skip = recent.len().saturating_sub(RECENT_ENTRIES);
        Snapshot {
            view: sim.view(),
            paused: false,
            scripted: false,
            speed: 1.0,
            exchanges,
            recent: recent.iter().skip(skip).cloned().collect(),
            entries: sim.history().total(),
            server_connections: usize::from(sim.connected()),
            proxied_connections: 0,
            half_open: 0,
            bytes_down: 0,
            bytes_up: 0,
            server_addr: SocketAddr::from(([127, 0, 0, 1], 8931)),
            proxy_addr: SocketAddr::from(([127, 0, 0, 1], 8932)),
            replicas: None,
            protocols: forkscope_core::revision::Protocols::Both,
        }
    }
}
