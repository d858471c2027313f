//! The fault proxy: an in-process TCP proxy between the lab's client and server.
//!
//! `drop_connection` is a NAT drop: the client's side is cut while the server's side stays open
//! and is no longer read, so the server's writes back up as they do behind a real NAT drop
//! (its packets go unacknowledged). Nothing tells the server: it finds out only from its own
//! liveness rules (keep-alive comments and a write deadline). `reset` closes both sides.
//! `hold` stops the server's bytes in the proxy as a stalled route does: a drop then loses them
//! in flight (a response the server sent and the client never got), `release` lets them go.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// A fault applied to every connection open through the proxy at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Cut the client side; keep the server side open and stop reading it (the server is not
    /// told).
    Drop,
    /// Close both sides.
    Reset,
    /// Close the server side of every dropped (half-open) connection, as TCP's user timeout
    /// or keep-alive does in the end: the server sees it close.
    ExpireHalfOpen,
    /// Let the server's bytes held since `Proxy::hold` go on to the client.
    Release,
}

/// How long a dropped, half-open server side is kept before the proxy lets it go.
const HALF_OPEN_KEPT: Duration = Duration::from_secs(300);
/// The receive buffer a dropped server side shrinks to: its window closes after a few KiB, so
/// the server's writes back up within seconds, as they would with nothing acknowledging them.
const DROPPED_RECV_BUFFER: usize = 2 * 1024;
/// The receive buffer of every upstream connection (the kernel doubles it).
const UPSTREAM_RECV_BUFFER: u32 = 4 * 1024;
const BUFFER: usize = 16 * 1024;
/// The most server bytes one connection holds (see `Proxy::hold`) before it stops reading.
const HOLD_CAP: usize = 1 << 20;
/// How often a held chunk reads the latency again (see `link`).
const LATENCY_RECHECK: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub struct ProxyStats {
    pub open: AtomicU64,
    pub half_open: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    /// Server bytes held in the proxy now (see `Proxy::hold`).
    pub held: AtomicU64,
}

#[derive(Debug)]
pub struct Proxy {
    pub addr: SocketAddr,
    faults: broadcast::Sender<Fault>,
    pub stats: Arc<ProxyStats>,
    /// Real milliseconds every chunk waits before it is forwarded, each way (0: none).
    latency_ms: Arc<AtomicU64>,
    /// Set while the server's bytes are held, not forwarded (see `Proxy::hold`).
    holding: Arc<AtomicBool>,
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
        let latency_ms = Arc::new(AtomicU64::new(0));
        let holding = Arc::new(AtomicBool::new(false));
        let accept = {
            let faults = faults.clone();
            let stats = stats.clone();
            let latency = latency_ms.clone();
            let holding = holding.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let faults = faults.subscribe();
                    let stats = stats.clone();
                    let latency = latency.clone();
                    let holding = holding.clone();
                    tokio::spawn(async move {
                        let Ok(server) = connect_small_window(upstream).await else {
                            return;
                        };
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        stats.open.fetch_add(1, Ordering::Relaxed);
                        let link_state = Link {
                            stats: &stats,
                            latency_ms: &latency,
                            holding: &holding,
                        };
                        link(client, server, faults, link_state).await;
                        stats.open.fetch_sub(1, Ordering::Relaxed);
                    });
                }
            })
        };
        Ok(Proxy {
            addr,
            faults,
            stats,
            latency_ms,
            holding,
            accept,
        })
    }

    pub fn inject(&self, fault: Fault) {
        // A drop ends the route that held the bytes (they are lost with it); a release lets
        // them go. Either way, what comes after flows again.
        if matches!(fault, Fault::Drop | Fault::Release) {
            self.holding.store(false, Ordering::Relaxed);
        }
        tracing::info!(
            ?fault,
            open = self.stats.open.load(Ordering::Relaxed),
            "proxy fault"
        );
        let _ = self.faults.send(fault);
    }

    /// Adds `ms` real milliseconds before every forwarded chunk, each way, from now on (a slow
    /// or distant link; 0 removes it).
    pub fn set_latency(&self, ms: u64) {
        tracing::info!(latency_ms = ms, "proxy latency");
        self.latency_ms.store(ms, Ordering::Relaxed);
    }

    /// Holds every byte the server sends, on every connection, from now until a drop (which
    /// loses them) or `Fault::Release`: a response in flight when its route dies.
    pub fn hold(&self) {
        tracing::info!("proxy holds the server's bytes");
        self.holding.store(true, Ordering::Relaxed);
    }

    /// Server bytes held in the proxy now.
    pub fn held_bytes(&self) -> u64 {
        self.stats.held.load(Ordering::Relaxed)
    }

    pub fn latency_ms(&self) -> u64 {
        self.latency_ms.load(Ordering::Relaxed)
    }

    pub fn open_connections(&self) -> u64 {
        self.stats.open.load(Ordering::Relaxed)
    }
}

/// Connects upstream with a small receive buffer: on loopback a small window costs little
/// throughput, and when a NAT drop stops the reading, the server's bytes stop being
/// acknowledged after a few KiB instead of megabytes — what a dead route does at once.
async fn connect_small_window(upstream: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = match upstream {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_recv_buffer_size(UPSTREAM_RECV_BUFFER)?;
    socket.connect(upstream).await
}

/// What every link of one proxy shares.
struct Link<'a> {
    stats: &'a ProxyStats,
    latency_ms: &'a AtomicU64,
    holding: &'a AtomicBool,
}

async fn link(
    client: TcpStream,
    server: TcpStream,
    mut faults: broadcast::Receiver<Fault>,
    shared: Link<'_>,
) {
    let Link {
        stats,
        latency_ms,
        holding,
    } = shared;
    // Read again every few milliseconds while a chunk is held: lowering the latency (a healed
    // link, a stopped process resumed) lets what it holds go at once, not after the old wait.
    let delay = || async {
        let held = tokio::time::Instant::now();
        loop {
            let wait = Duration::from_millis(latency_ms.load(Ordering::Relaxed));
            let Some(left) = wait.checked_sub(held.elapsed()).filter(|l| !l.is_zero()) else {
                break;
            };
            tokio::time::sleep(left.min(LATENCY_RECHECK)).await;
        }
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut up = vec![0u8; BUFFER];
    let mut down = vec![0u8; BUFFER];
    // The server's bytes held by `Proxy::hold`, in order. Once anything is held, everything
    // after it is held too, until this link's own `Release` or `Drop`: the shared flag goes
    // off before each link has heard, and a chunk must not overtake the bytes before it.
    let mut held: Vec<u8> = Vec::new();
    // The server closed while bytes were held: they wait for their `Release` or `Drop`.
    let mut server_done = false;
    let forget_held = |held: &mut Vec<u8>| {
        stats.held.fetch_sub(held.len() as u64, Ordering::Relaxed);
        held.clear();
    };
    loop {
        let holds = holding.load(Ordering::Relaxed) || !held.is_empty();
        // A stalled route takes no more than its buffers do: past the cap, the server's
        // writes back up in the small-window socket, as they would.
        let full = holds && held.len() >= HOLD_CAP;
        let reads_server = !(server_done || full);
        tokio::select! {
            read = client_read.read(&mut up) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    stats.bytes_up.fetch_add(n as u64, Ordering::Relaxed);
                    delay().await;
                    if server_write.write_all(&up[..n]).await.is_err() { break; }
                }
            },
            read = server_read.read(&mut down), if reads_server => match read {
                Ok(0) | Err(_) if held.is_empty() => break,
                Ok(0) | Err(_) => server_done = true,
                Ok(n) => {
                    stats.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
                    if holds {
                        held.extend_from_slice(&down[..n]);
                        stats.held.fetch_add(n as u64, Ordering::Relaxed);
                        continue;
                    }
                    delay().await;
                    if client_write.write_all(&down[..n]).await.is_err() { break; }
                }
            },
            fault = faults.recv() => match fault {
                Ok(Fault::Drop) => {
                    forget_held(&mut held);
                    drop((client_read, client_write));
                    black_hole(server_read, server_write, faults, stats).await;
                    return;
                }
                Ok(Fault::Release) => {
                    let sent = client_write.write_all(&held).await;
                    forget_held(&mut held);
                    if sent.is_err() || server_done { break; }
                }
                // A missed `Release` (the channel lagged) must not hold the bytes for ever.
                Err(broadcast::error::RecvError::Lagged(_)) if !holding.load(Ordering::Relaxed) => {
                    let sent = client_write.write_all(&held).await;
                    forget_held(&mut held);
                    if sent.is_err() || server_done { break; }
                }
                Ok(Fault::Reset) | Err(broadcast::error::RecvError::Closed) => break,
                Ok(Fault::ExpireHalfOpen) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            },
        }
    }
    forget_held(&mut held);
}

/// Keeps the server's side open and reads nothing more from it, like a route that went dead
/// without a FIN or RST: what the server writes fills the socket buffers and stays there.
async fn black_hole(
    server_read: tokio::net::tcp::OwnedReadHalf,
    server_write: tokio::net::tcp::OwnedWriteHalf,
    mut faults: broadcast::Receiver<Fault>,
    stats: &ProxyStats,
) {
    stats.half_open.fetch_add(1, Ordering::Relaxed);
    let _ = socket2::SockRef::from(server_read.as_ref()).set_recv_buffer_size(DROPPED_RECV_BUFFER);
    // Held, not read, until the server gives up on it (it closes: the read sees EOF or an
    // error), the proxy does, or it is told to expire.
    let mut probe = server_read;
    let expired = async {
        loop {
            match faults.recv().await {
                Ok(Fault::ExpireHalfOpen) | Err(broadcast::error::RecvError::Closed) => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(HALF_OPEN_KEPT, wait_for_close(&mut probe)) => {}
        () = expired => {}
    }
    drop((probe, server_write));
    stats.half_open.fetch_sub(1, Ordering::Relaxed);
}

/// Waits until the peer closes, without taking any of its bytes: a zero-length peek wakes on
/// data too, so the wait sleeps between looks.
async fn wait_for_close(read: &mut tokio::net::tcp::OwnedReadHalf) {
    let mut one = [0u8; 1];
    loop {
        match read.peek(&mut one).await {
            Ok(0) | Err(_) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the server writes while the proxy holds reaches the client on release, whole and
    /// in order, and after a drop never does.
    #[tokio::test]
    async fn held_bytes_go_on_in_order_on_release_and_are_lost_on_drop() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    for part in [&b"first "[..], b"second ", b"third"] {
                        if socket.write_all(part).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    // Held open: the client's read ends on the proxy's side, not here.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                });
            }
        });
        let proxy = Proxy::start(upstream_addr).await.unwrap();
        let until_held = |n: u64| {
            let proxy = &proxy;
            async move {
                for _ in 0..2_000 {
                    if proxy.held_bytes() >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                panic!("the proxy never held {n} bytes");
            }
        };
        proxy.hold();
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        until_held(18).await;
        proxy.inject(Fault::Release);
        let mut got = vec![0u8; 18];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"first second third");
        assert_eq!(proxy.held_bytes(), 0);

        proxy.hold();
        let mut lost = TcpStream::connect(proxy.addr).await.unwrap();
        until_held(18).await;
        proxy.inject(Fault::Drop);
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), lost.read_to_end(&mut rest))
            .await
            .unwrap();
        assert!(
            read.is_err() || rest.is_empty(),
            "a dropped route delivered {rest:?}"
        );
        assert_eq!(proxy.held_bytes(), 0);
    }
}
