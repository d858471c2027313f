//! The fault proxy: an in-process TCP proxy between the lab's client and server.
//!
//! `drop_connection` is a NAT drop: the client's side is cut while the server's side stays open
//! and silently drained, so the server keeps believing its stream is live. `reset` closes both
//! sides.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// A fault applied to every connection open through the proxy at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Cut the client side; keep the server side open and drain it (the server is not told).
    Drop,
    /// Close both sides.
    Reset,
}

/// How long a drained, half-open server side is kept before the proxy lets it go.
const HALF_OPEN_KEPT: Duration = Duration::from_secs(300);
const BUFFER: usize = 16 * 1024;

#[derive(Debug, Default)]
pub struct ProxyStats {
    pub open: AtomicU64,
    pub half_open: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

#[derive(Debug)]
pub struct Proxy {
    pub addr: SocketAddr,
    faults: broadcast::Sender<Fault>,
    pub stats: Arc<ProxyStats>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = self.faults.send(Fault::Reset);
    }
}

impl Proxy {
    /// Listens on 127.0.0.1 (any free port) and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// Listens on `listen` and forwards every connection to `upstream`.
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (faults, _) = broadcast::channel(16);
        let stats = Arc::new(ProxyStats::default());
        let accept = {
            let faults = faults.clone();
            let stats = stats.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let faults = faults.subscribe();
                    let stats = stats.clone();
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        stats.open.fetch_add(1, Ordering::Relaxed);
                        link(client, server, faults, &stats).await;
                        stats.open.fetch_sub(1, Ordering::Relaxed);
                    });
                }
            })
        };
        Ok(Proxy {
            addr,
            faults,
            stats,
            accept,
        })
    }

    pub fn inject(&self, fault: Fault) {
        tracing::info!(
            ?fault,
            open = self.stats.open.load(Ordering::Relaxed),
            "proxy fault"
        );
        let _ = self.faults.send(fault);
    }

    pub fn open_connections(&self) -> u64 {
        self.stats.open.load(Ordering::Relaxed)
    }
}

async fn link(
    client: TcpStream,
    server: TcpStream,
    mut faults: broadcast::Receiver<Fault>,
    stats: &ProxyStats,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut up = vec![0u8; BUFFER];
    let mut down = vec![0u8; BUFFER];
    loop {
        tokio::select! {
            read = client_read.read(&mut up) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    stats.bytes_up.fetch_add(n as u64, Ordering::Relaxed);
                    if server_write.write_all(&up[..n]).await.is_err() { return; }
                }
            },
            read = server_read.read(&mut down) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    stats.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
                    if client_write.write_all(&down[..n]).await.is_err() { return; }
                }
            },
            fault = faults.recv() => match fault {
                Ok(Fault::Drop) => {
                    drop((client_read, client_write));
                    drain(server_read, server_write, stats).await;
                    return;
                }
                Ok(Fault::Reset) | Err(broadcast::error::RecvError::Closed) => return,
                Err(broadcast::error::RecvError::Lagged(_)) => {}
            },
        }
    }
}

/// Keeps the server's side open and reads whatever it sends into the void, like a route that
/// went dead without a FIN or RST.
async fn drain(
    mut server_read: tokio::net::tcp::OwnedReadHalf,
    server_write: tokio::net::tcp::OwnedWriteHalf,
    stats: &ProxyStats,
) {
    stats.half_open.fetch_add(1, Ordering::Relaxed);
    let mut sink = vec![0u8; BUFFER];
    let _ = tokio::time::timeout(HALF_OPEN_KEPT, async {
        while let Ok(n) = server_read.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    drop(server_write);
    stats.half_open.fetch_sub(1, Ordering::Relaxed);
}
