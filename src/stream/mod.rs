//! `stream`: one client connection from accept to close — in `mode tcp` a bidirectional tunnel
//! (`tcp`), in `mode http` a sequence of HTTP/1.x transactions (`http`). Also the server side
//! shared by both: picking a server, queueing, connecting with `retries` and `redispatch`.
//!
//! Everything here runs on the accepting worker thread and never takes a lock; shared state is
//! touched only through `backend`'s atomics. It must not parse configuration or HTTP syntax
//! itself (that is `config` and `http`).

pub mod http;
pub mod tcp;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use crate::backend::{self, PickError, PickInput, Shared, Slot};
use crate::config::Mode;
use crate::listener::Admission;
use crate::worker::Worker;

/// An accepted client connection.
pub enum Client {
    Tcp(TcpStream, SocketAddr),
    Unix(UnixStream),
}

/// Entry point for every accepted connection.
pub async fn serve(w: Rc<Worker>, proxy: usize, client: Client, adm: Admission, key: usize) {
    let accepted_at = std::time::SystemTime::now();
    let p = &w.shared.cfg.proxies[proxy];
    let fe = &w.shared.proxies[proxy].fe;
    fe.max_conns.fetch_max(fe.cur_conns.load(Relaxed), Relaxed);
    let peer = match &client {
        Client::Tcp(s, a) => {
            let _ = s.set_nodelay(true);
            if p.options.tcp_smart_accept {
                let _ = socket2::SockRef::from(s).set_tcp_quickack(false);
            }
            Some(*a)
        }
        Client::Unix(_) => None,
    };
    if !p.options.httplog && !p.options.tcplog && !p.logs.is_empty() {
        // getsockname() only when this log line needs it: it is a syscall per connection.
        let local = match &client {
            Client::Tcp(s, _) => s.local_addr().ok(),
            Client::Unix(_) => None,
        };
        let line = crate::log::connect_line(peer, local, &p.name, p.mode == Mode::Http);
        w.log.emit(&p.logs, crate::log::LEVEL_INFO, &line);
    }
    let ctx = SessionCtx {
        w: w.clone(),
        proxy,
        peer,
        accepted_at,
        key,
        _adm: adm,
    };
    match (client, p.mode) {
        // Boxed: the tunnel future is large and would size every HTTP connection's task too.
        (Client::Tcp(s, _), Mode::Tcp) => Box::pin(tcp::serve(ctx, s)).await,
        (Client::Unix(s), Mode::Tcp) => Box::pin(tcp::serve(ctx, s)).await,
        (Client::Tcp(s, _), Mode::Http) => http::serve(ctx, s).await,
        (Client::Unix(s), Mode::Http) => http::serve(ctx, s).await,
    }
}

/// What a session knows about itself.
pub struct SessionCtx {
    pub w: Rc<Worker>,
    /// Frontend index.
    pub proxy: usize,
    pub peer: Option<SocketAddr>,
    pub accepted_at: std::time::SystemTime,
    /// Its entry in the worker's session registry.
    pub key: usize,
    _adm: Admission,
}

impl SessionCtx {
    pub fn shared(&self) -> &Arc<Shared> {
        &self.w.shared
    }
}

/// A connected server, with its slot (released when dropped) and connect metrics.
pub struct ServerConn {
    pub stream: TcpStream,
    pub slot: Slot,
    pub retries: u32,
    pub redispatched: bool,
    /// Time to establish the connection (`%Tc`).
    pub connect_time: Duration,
}

/// Why no server connection could be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    Pick(PickError),
    /// Every attempt failed (refused, unreachable); `timeout` when the last one timed out.
    Failed {
        timeout: bool,
        retries: u32,
    },
}

impl ConnectError {
    /// Termination state chars as HAProxy logs them.
    pub fn term(&self) -> [u8; 2] {
        match self {
            ConnectError::Pick(PickError::QueueTimeout) => *b"sQ",
            ConnectError::Pick(PickError::NoServer) | ConnectError::Pick(PickError::QueueFull) => {
                *b"SC"
            }
            ConnectError::Failed { timeout: true, .. } => *b"sC",
            ConnectError::Failed { timeout: false, .. } => *b"SC",
        }
    }
}

/// Picks a server (queueing if needed) and connects, with `retries` and `option redispatch`
/// (HAProxy's default: redispatch on the last retry).
pub async fn connect_server(
    ctx: &SessionCtx,
    be: usize,
    input: &PickInput<'_>,
) -> Result<ServerConn, ConnectError> {
    let slot = backend::acquire(ctx.shared(), be, input, None)
        .await
        .map_err(ConnectError::Pick)?;
    connect_with_slot(ctx, be, input, slot).await
}

/// Connects to the server `slot` holds, retrying and redispatching on failure.
pub async fn connect_with_slot(
    ctx: &SessionCtx,
    be: usize,
    input: &PickInput<'_>,
    mut slot: Slot,
) -> Result<ServerConn, ConnectError> {
    let shared = ctx.shared();
    let bp = &shared.cfg.proxies[be];
    let retries = bp.retries;
    let mut attempt = 0u32;
    let mut redispatched = false;
    loop {
        let addr = **slot.server_state().addr.load();
        let started = Instant::now();
        slot.server_state().counters.connects.fetch_add(1, Relaxed);
        let res = connect_one(addr, bp.timeouts.connect, bp.options.tcp_smart_connect).await;
        let seen = match res {
            Ok(_) => crate::check::Observed::L4Ok,
            Err(_) => crate::check::Observed::L4Err,
        };
        crate::check::observe(slot.server_state(), seen);
        match res {
            Ok(stream) => {
                return Ok(ServerConn {
                    stream,
                    connect_time: started.elapsed(),
                    slot,
                    retries: attempt,
                    redispatched,
                });
            }
            Err(timeout) => {
                let srv = slot.server_state();
                srv.counters.conn_errors.fetch_add(1, Relaxed);
                if attempt >= retries {
                    return Err(ConnectError::Failed {
                        timeout,
                        retries: attempt,
                    });
                }
                attempt += 1;
                srv.counters.retries.fetch_add(1, Relaxed);
                if bp.options.redispatch && attempt == retries {
                    let failed = slot.server;
                    drop(slot);
                    slot = backend::acquire(shared, be, input, Some(failed))
                        .await
                        .map_err(ConnectError::Pick)?;
                    if slot.server != failed {
                        redispatched = true;
                        slot.server_state()
                            .counters
                            .redispatches
                            .fetch_add(1, Relaxed);
                    }
                }
            }
        }
    }
}

/// One connection attempt; `Err(true)` = timed out, `Err(false)` = refused/unreachable.
async fn connect_one(
    addr: SocketAddr,
    timeout: Option<Duration>,
    smart: bool,
) -> Result<TcpStream, bool> {
    let fut = async {
        let sock = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if smart {
            // `tcp-smart-connect`: the ACK of the server's SYN-ACK leaves with the request.
            let _ = socket2::SockRef::from(&sock).set_tcp_quickack(false);
        }
        sock.connect(addr).await
    };
    let r = match timeout {
        Some(d) => match tokio::time::timeout(d, fut).await {
            Ok(r) => r,
            Err(_) => return Err(true),
        },
        None => fut.await,
    };
    match r {
        Ok(s) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Err(e) => Err(e.kind() == std::io::ErrorKind::TimedOut),
    }
}

/// Any client transport.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + 'static {
    /// Resolves when the socket has data (or EOF) to read, without reading it: lets an idle
    /// connection wait without holding a buffer.
    fn wait_readable(&self) -> impl std::future::Future<Output = std::io::Result<()>>;

    /// Writes all of `buf` telling the kernel that more follows at once (`MSG_MORE`), as
    /// HAProxy does while a body is unfinished: a response streamed in buffer-sized pieces
    /// then leaves in full segments, with fewer wake-ups of the receiver. The last piece of
    /// a message is always written without it.
    fn write_all_more(
        &mut self,
        buf: &[u8],
    ) -> impl std::future::Future<Output = std::io::Result<()>>;

    /// Acknowledges what arrived at once (`TCP_QUICKACK`): a client that sends a body after
    /// its head may be waiting for that ACK (Nagle), which `tcp-smart-accept` delays.
    fn quick_ack(&self) {}
}

impl ClientIo for TcpStream {
    fn wait_readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        self.readable()
    }

    fn quick_ack(&self) {
        let _ = socket2::SockRef::from(self).set_tcp_quickack(true);
    }

    async fn write_all_more(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let s: &TcpStream = self;
        let mut off = 0;
        while off < buf.len() {
            let r = s.try_io(tokio::io::Interest::WRITABLE, || {
                socket2::SockRef::from(s)
                    .send_with_flags(&buf[off..], libc::MSG_MORE | libc::MSG_NOSIGNAL)
            });
            match r {
                Ok(n) => off += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => s.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl ClientIo for UnixStream {
    fn wait_readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        self.readable()
    }

    async fn write_all_more(&mut self, buf: &[u8]) -> std::io::Result<()> {
        tokio::io::AsyncWriteExt::write_all(self, buf).await
    }
}

/// Awaits `fut`, bounded by an optional inactivity timeout. `None` = timed out.
pub async fn with_timeout<F: std::future::Future>(
    d: Option<Duration>,
    fut: F,
) -> Option<F::Output> {
    match d {
        Some(d) => tokio::time::timeout(d, fut).await.ok(),
        None => Some(fut.await),
    }
}
