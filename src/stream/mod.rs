//! `stream`: one client connection from accept to close — in `mode tcp` a bidirectional tunnel
//! (`tcp`), in `mode http` a sequence of HTTP/1.x transactions (`http`). Also the server side
//! shared by both: picking a server, queueing, connecting with `retries` and `redispatch`.
//!
//! Everything here runs on the accepting worker thread and never takes a lock; shared state is
//! touched only through `backend`'s atomics. It must not parse configuration or HTTP syntax
//! itself (that is `config` and `http`).

pub mod http;
pub mod http2;
pub mod server_h2;
pub mod tcp;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
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

/// What a connection's bind says about how to serve it.
pub struct BindOpts {
    /// The bind's `ssl` configuration.
    pub tls: Option<Arc<crate::tls::BindTls>>,
    /// `accept-proxy`: the bind's label, for the log line of a bad PROXY header.
    pub accept_proxy: Option<Arc<str>>,
    /// `proto h1|h2`.
    pub proto: http2::BindProto,
}

/// Entry point for every accepted connection.
pub async fn serve(
    w: Rc<Worker>,
    proxy: usize,
    client: Client,
    adm: Admission,
    key: usize,
    opts: BindOpts,
) {
    let BindOpts {
        tls,
        accept_proxy,
        proto,
    } = opts;
    let mut client = client;
    let accepted_at = std::time::SystemTime::now();
    let p = &w.shared.cfg.proxies[proxy];
    let fe = &w.shared.proxies[proxy].fe;
    fe.max_conns.fetch_max(fe.cur_conns.load(Relaxed), Relaxed);
    let mut peer = match &client {
        Client::Tcp(_, a) => {
            // TCP_NODELAY and `tcp-smart-accept`'s delayed ACKs come from the listening
            // socket (Linux copies them to accepted sockets): no setsockopt per connection.
            Some(*a)
        }
        Client::Unix(_) => None,
    };
    let log_format = p
        .options
        .log_format
        .as_deref()
        .filter(|_| !p.logs.is_empty());
    // The default log line ("Connect from A to B"), logged now.
    let connect_line =
        !p.options.httplog && !p.options.tcplog && log_format.is_none() && !p.logs.is_empty();
    // getsockname() only when a log line, a rule (`dst`) or a PROXY header to a server may
    // need it: it is a syscall per connection.
    let mut pp: Option<Box<PpTlvs>> = None;
    let mut local = match &client {
        Client::Tcp(s, _)
            if connect_line
                || log_format.is_some_and(|f| f.needs_local)
                || crate::send_proxy::IN_USE.load(Relaxed)
                || crate::config::acl::LOCAL_ADDR_USED.load(Relaxed) =>
        {
            s.local_addr().ok()
        }
        _ => None,
    };
    // `tcp-request connection` rules: a reject closes the connection at once, unlogged, as
    // in HAProxy. (`tcp-request content` rules run per request in `mode http`, and on the
    // client's first data in `mode tcp`.)
    let mut sc = crate::stick::Trackers::default();
    let vars = crate::vars::Vars::default();
    if !p.tcp_connection.is_empty() {
        let sess = crate::config::acl::Sess {
            peer,
            local,
            frontend: &p.name,
            backend: &p.name,
            unique_id: None,
            sc: Default::default(),
            vars: Some(&vars),
            pp: None,
            shared: Some(&w.shared),
            server: None,
            tcp_fd: match &client {
                Client::Tcp(s, _) => Some(std::os::fd::AsFd::as_fd(s)),
                Client::Unix(_) => None,
            },
            profile: None,
        };
        let view = http::SrcView(peer.map(|a| a.ip()), None, None, sess, None);
        let verdict = tcp_rules(&p.tcp_connection, &view, &mut sc);
        if verdict != Verdict::Go {
            if verdict == Verdict::SilentDrop
                && let Client::Tcp(s, _) = &client
            {
                s.silent_drop();
            }
            fe.counters.denied_conn.fetch_add(1, Relaxed);
            return;
        }
    }
    // `accept-proxy`: the header is read after the connection rules (which see the
    // connection's own addresses, as in HAProxy); its addresses stand for the rest.
    if let Some(label) = &accept_proxy {
        let limit = match p.mode {
            Mode::Http => p.timeouts.http_request.or(p.timeouts.client),
            Mode::Tcp => p.timeouts.client,
        };
        let Client::Tcp(s, _) = &mut client else {
            unreachable!("accept-proxy is refused on UNIX binds")
        };
        match with_timeout(limit, read_proxy_header(s)).await {
            Some(Ok((addrs, tlvs))) => {
                if let Some((src, dst)) = addrs {
                    peer = Some(src);
                    local = Some(dst);
                }
                pp = tlvs;
            }
            Some(Err(())) | None => {
                fe.counters.req_errors.fetch_add(1, Relaxed);
                connection_error(
                    &w,
                    proxy,
                    peer,
                    accepted_at,
                    label,
                    "Received something which does not look like a PROXY protocol header",
                );
                return;
            }
        }
    }
    // The connection is a session now.
    sc.add(crate::stick::Data::SessCnt, 1);
    if connect_line {
        let line = crate::log::connect_line(peer, local, &p.name, p.mode == Mode::Http);
        w.log.emit(&p.logs, crate::log::LEVEL_INFO, &line);
    }
    let ctx = SessionCtx {
        w: w.clone(),
        proxy,
        peer,
        accepted_at,
        accepted: Instant::now(),
        local,
        t_handshake: 0,
        key,
        tls: None,
        sc,
        vars,
        pp,
        proto,
        h2_line: None,
        _adm: Some(adm),
        tcp_fd: match &client {
            Client::Tcp(s, _) if crate::config::acl::TCP_INFO_USED.load(Relaxed) => {
                std::os::fd::AsFd::as_fd(s)
                    .try_clone_to_owned()
                    .ok()
                    .map(Rc::new)
            }
            _ => None,
        },
        prof: PROFILE_USED
            .load(Relaxed)
            .then(|| Rc::new(Cell::new(TaskProfile::default()))),
    };
    if let Some(tls) = tls {
        // Boxed: a TLS session's futures are large and must not size plain sessions' tasks.
        return Box::pin(serve_tls(ctx, client, tls)).await;
    }
    match (client, p.mode) {
        // Boxed: the tunnel future is large and would size every HTTP connection's task too.
        (Client::Tcp(s, _), Mode::Tcp) => {
            profiled(ctx.prof.clone(), Box::pin(tcp::serve(ctx, s))).await
        }
        (Client::Unix(s), Mode::Tcp) => {
            profiled(ctx.prof.clone(), Box::pin(tcp::serve(ctx, s))).await
        }
        (Client::Tcp(s, _), Mode::Http) if proto == http2::BindProto::H2 => {
            http2::count_session(&ctx);
            Box::pin(http2::serve(ctx, bytes::BytesMut::new(), s)).await
        }
        (Client::Unix(s), Mode::Http) if proto == http2::BindProto::H2 => {
            http2::count_session(&ctx);
            Box::pin(http2::serve(ctx, bytes::BytesMut::new(), s)).await
        }
        (Client::Tcp(s, _), Mode::Http) => http::serve(ctx, s).await,
        (Client::Unix(s), Mode::Http) => http::serve(ctx, s).await,
    }
}

/// Runs a `mode tcp` session, its polls counted when a format reads them (`cpu_calls`).
/// `f` comes boxed: the tunnel future is large, and held here by value it would size every
/// HTTP connection's task too (2.4x the RSS of 8,000 idle connections when it was).
async fn profiled<F: std::future::Future<Output = ()>>(
    prof: Option<Rc<Cell<TaskProfile>>>,
    f: std::pin::Pin<Box<F>>,
) {
    match &prof {
        Some(p) => Profiled { inner: f, prof: p }.await,
        None => f.await,
    }
}

/// Handshakes, then serves the decrypted stream like a plain one. The handshake, including
/// the wait for its turn on this thread (DESIGN §6, `handshake`), is bounded by `timeout
/// client` (`timeout http-request` first in `mode http`); a failure is logged as HAProxy does
/// ("SSL handshake failure") and closes the connection.
async fn serve_tls(mut ctx: SessionCtx, client: Client, tls: Arc<crate::tls::BindTls>) {
    let p = &ctx.w.shared.cfg.proxies[ctx.proxy];
    let t = &p.timeouts;
    let limit = match p.mode {
        Mode::Http => t.http_request.or(t.client),
        Mode::Tcp => t.client,
    };
    let http = p.mode == Mode::Http;
    let started = ctx.accepted;
    match with_timeout(limit, hello_and_turn(&ctx.w.hs, &client)).await {
        None => {
            let e = crate::tls::HandshakeError::Timeout;
            return handshake_failed(&ctx, &tls.label, &e.to_string());
        }
        Some(false) => {
            let hs = &ctx.w.hs;
            hs.dropped.set(hs.dropped.get() + 1);
            if !p.options.dontlognull {
                handshake_failed(&ctx, &tls.label, "");
            }
            return;
        }
        Some(true) => {}
    }
    let hs = &ctx.w.hs;
    hs.started.set(hs.started.get() + 1);
    let _ssl = SslConnGuard::new();
    let limit = limit.map(|d| d.saturating_sub(started.elapsed()));
    let smart_accept = p.options.smart_accept(p.mode, true);
    macro_rules! run {
        ($io:expr) => {
            match crate::tls::accept(&tls, $io, limit).await {
                Ok(s) => {
                    // `tcp-smart-accept` (on for `ssl` binds) delays ACKs, and nothing of ours
                    // may follow the client's last handshake flight (a resumed TLS 1.2
                    // session): a client whose Nagle holds its request until that flight is
                    // acknowledged would wait 40 ms. Acknowledge it now (without smart
                    // accept the kernel did, and the setsockopt would be for nothing).
                    if smart_accept {
                        s.quick_ack();
                    }
                    ctx.tls = Some(Box::new(crate::tls::server_info(&s)));
                    ctx.t_handshake = ctx.accepted.elapsed().as_millis() as i64;
                    let h2 = match ctx.proto {
                        http2::BindProto::Auto => ctx
                            .tls
                            .as_ref()
                            .is_some_and(|t| t.alpn.as_deref() == Some(b"h2")),
                        http2::BindProto::H1 => false,
                        http2::BindProto::H2 => true,
                    };
                    if http && h2 {
                        http2::count_session(&ctx);
                        http2::serve(ctx, bytes::BytesMut::new(), s).await
                    } else if http {
                        http::serve(ctx, s).await
                    } else {
                        profiled(ctx.prof.clone(), Box::pin(tcp::serve(ctx, s))).await
                    }
                }
                Err(e) => handshake_failed(&ctx, &tls.label, &e.to_string()),
            }
        };
    }
    match client {
        Client::Tcp(s, _) => run!(s),
        Client::Unix(s) => run!(s),
    }
}

/// Waits, without reading, for the client's first bytes (its ClientHello) and then for this
/// thread's turn to start a handshake. `false`: the client closed or reset the connection
/// before that; no crypto was done for it.
async fn hello_and_turn(hs: &crate::handshake::HandshakeSched, client: &Client) -> bool {
    let alive = match client {
        Client::Tcp(s, _) => hello(s).await,
        Client::Unix(s) => hello(s).await,
    };
    if !alive {
        return false;
    }
    hs.turn().await;
    // A close or reset may have come while this handshake waited.
    let gone = match client {
        Client::Tcp(s, _) => gone(s),
        Client::Unix(s) => gone(s),
    };
    if !gone {
        return true;
    }
    hs.give_back();
    false
}

/// A socket whose state can be polled without reading it.
trait Pollable: std::os::fd::AsFd {
    fn readable(&self) -> impl std::future::Future<Output = std::io::Result<()>>;
    fn try_io<R>(
        &self,
        interest: tokio::io::Interest,
        f: impl FnOnce() -> std::io::Result<R>,
    ) -> std::io::Result<R>;
}

impl Pollable for TcpStream {
    fn readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        TcpStream::readable(self)
    }
    fn try_io<R>(
        &self,
        interest: tokio::io::Interest,
        f: impl FnOnce() -> std::io::Result<R>,
    ) -> std::io::Result<R> {
        TcpStream::try_io(self, interest, f)
    }
}

impl Pollable for UnixStream {
    fn readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        UnixStream::readable(self)
    }
    fn try_io<R>(
        &self,
        interest: tokio::io::Interest,
        f: impl FnOnce() -> std::io::Result<R>,
    ) -> std::io::Result<R> {
        UnixStream::try_io(self, interest, f)
    }
}

/// Resolves once the client has sent bytes (`true`) or closed or failed (`false`). tokio's
/// readiness of a new socket is an assumption, so the socket itself is asked.
async fn hello<S: Pollable>(s: &S) -> bool {
    loop {
        if s.readable().await.is_err() {
            return false;
        }
        let r = s.try_io(tokio::io::Interest::READABLE, || {
            let st = crate::sys::peer_state(s.as_fd())?;
            match (st.gone, st.readable) {
                (true, _) => Ok(false),
                (false, true) => Ok(true),
                // Not yet: clears the readiness so that the next wait is for a real event.
                (false, false) => Err(std::io::ErrorKind::WouldBlock.into()),
            }
        });
        match r {
            Ok(alive) => return alive,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
}

/// The client closed its side or the connection failed (a TLS client that shut its side
/// down can never finish a handshake).
fn gone<S: Pollable>(s: &S) -> bool {
    crate::sys::peer_state(s.as_fd()).map_or(true, |st| st.gone)
}

/// TLS connections open now and in all, client and server side alike (`show info`
/// `CurrSslConns`, `CumSslConns`): process-wide, like HAProxy's `global.sslconns`.
pub static SSL_CONNS: AtomicU32 = AtomicU32::new(0);
pub static SSL_CONNS_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Counts one TLS connection while it lives: a client one from the start of its handshake
/// (a client that left before that costs no crypto and is not counted), a server one from
/// its connect until it closes, pooled idle time included.
struct SslConnGuard(());

impl SslConnGuard {
    fn new() -> SslConnGuard {
        SSL_CONNS.fetch_add(1, Relaxed);
        SSL_CONNS_TOTAL.fetch_add(1, Relaxed);
        SslConnGuard(())
    }
}

impl Drop for SslConnGuard {
    fn drop(&mut self) {
        SSL_CONNS.fetch_sub(1, Relaxed);
    }
}

/// Logs a failed client handshake: `IP:PORT [date] fe/bind: SSL handshake failure (why)`, or
/// `... Connection closed during SSL handshake` when `why` is empty (the client left first).
fn handshake_failed(ctx: &SessionCtx, bind: &str, why: &str) {
    let text = if why.is_empty() {
        "Connection closed during SSL handshake".to_string()
    } else {
        format!("SSL handshake failure ({why})")
    };
    connection_error(&ctx.w, ctx.proxy, ctx.peer, ctx.accepted_at, bind, &text);
}

/// HAProxy's line for a connection that failed before any stream began: `CLIENT [DATE]
/// FRONTEND/BIND: TEXT`.
fn connection_error(
    w: &Worker,
    proxy: usize,
    peer: Option<std::net::SocketAddr>,
    accepted_at: std::time::SystemTime,
    bind: &str,
    text: &str,
) {
    let p = &w.shared.cfg.proxies[proxy];
    if p.logs.is_empty() {
        return;
    }
    let mut line = String::with_capacity(96);
    match peer {
        Some(a) => line.push_str(&a.to_string()),
        None => line.push_str("unix:1"),
    }
    line.push_str(" [");
    crate::log::Tm::from_system(accepted_at).haproxy(&mut line);
    line.push_str("] ");
    line.push_str(&p.name);
    line.push('/');
    line.push_str(bind);
    line.push_str(": ");
    line.push_str(text);
    w.log.emit(&p.logs, crate::log::LEVEL_INFO, &line);
}

/// `accept-proxy`: consumes the PROXY header at the start of the connection, and nothing
/// after it (the request or the TLS ClientHello that follows stays in the socket). Every
/// byte taken belongs to the header: what is peeked is read only while the header is
/// incomplete, then exactly its rest. `Ok(None)`: a LOCAL/UNKNOWN header.
async fn read_proxy_header(
    s: &mut TcpStream,
) -> Result<(Option<(SocketAddr, SocketAddr)>, Option<Box<PpTlvs>>), ()> {
    use crate::send_proxy::{Received, parse};
    use tokio::io::AsyncReadExt;
    let mut taken: Vec<u8> = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = s.peek(&mut buf).await.map_err(|_| ())?;
        if n == 0 {
            return Err(());
        }
        let mut seen = taken.clone();
        seen.extend_from_slice(&buf[..n]);
        match parse(&seen) {
            Received::Header { len, addrs } => {
                let rest = len - taken.len();
                s.read_exact(&mut buf[..rest]).await.map_err(|_| ())?;
                taken.extend_from_slice(&buf[..rest]);
                let tlvs = crate::send_proxy::tlvs(&taken);
                let pp = (!tlvs.is_empty()).then(|| Box::new(PpTlvs(tlvs)));
                return Ok((addrs, pp));
            }
            Received::Invalid => return Err(()),
            Received::Partial if seen.len() > 4096 => return Err(()),
            Received::Partial => {
                s.read_exact(&mut buf[..n]).await.map_err(|_| ())?;
                taken.extend_from_slice(&buf[..n]);
            }
        }
    }
}

/// The TLVs of the client's PROXY protocol version 2 header (`fc_pp_authority`,
/// `fc_pp_unique_id`), in order.
#[derive(Debug, Clone)]
pub struct PpTlvs(pub Vec<(u8, Box<[u8]>)>);

impl PpTlvs {
    /// The value of the first TLV of type `t`.
    pub fn get(&self, t: u8) -> Option<&[u8]> {
        self.0.iter().find(|e| e.0 == t).map(|e| &*e.1)
    }
}

/// What `cpu_calls` and `cpu_ns_avg|tot` report of a session's current request (HAProxy's
/// task counters): how often its task was polled and, when a rule or format reads the times
/// ([`PROFILE_TIMED`]), how long those polls took.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskProfile {
    pub calls: u64,
    pub cpu_ns: u64,
}

/// Set when a configuration reads `cpu_calls`, `cpu_ns_*` or `lat_ns_*`: sessions then count
/// their polls (nothing is counted otherwise).
pub static PROFILE_USED: AtomicBool = AtomicBool::new(false);
/// Set when it reads `cpu_ns_*`: each poll is then timed (two clock reads).
pub static PROFILE_TIMED: AtomicBool = AtomicBool::new(false);

/// Counts (and with [`PROFILE_TIMED`] times) the polls of `inner` into `prof`. A poll is
/// counted as it starts, so that a log line written during it counts it, as HAProxy's does.
pub struct Profiled<'a, F> {
    pub inner: F,
    pub prof: &'a Cell<TaskProfile>,
}

impl<F: std::future::Future + Unpin> std::future::Future for Profiled<'_, F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let t0 = PROFILE_TIMED.load(Relaxed).then(Instant::now);
        let mut p = self.prof.get();
        p.calls += 1;
        self.prof.set(p);
        let r = std::pin::Pin::new(&mut self.inner).poll(cx);
        if let Some(t0) = t0 {
            let mut p = self.prof.get();
            p.cpu_ns += t0.elapsed().as_nanos() as u64;
            self.prof.set(p);
        }
        r
    }
}

/// What a session knows about itself.
pub struct SessionCtx {
    pub w: Rc<Worker>,
    /// Frontend index.
    pub proxy: usize,
    pub peer: Option<SocketAddr>,
    pub accepted_at: std::time::SystemTime,
    /// The same instant on the monotonic clock (`%Th`, `%Ti`).
    pub accepted: Instant,
    /// The address the client connected to, when a `log-format` needs it (`%fi`, `%fp`).
    pub local: Option<SocketAddr>,
    /// Time from accept to the end of the TLS handshake, in ms (`%Th`; 0 without TLS).
    pub t_handshake: i64,
    /// Its entry in the worker's session registry.
    pub key: usize,
    /// The client handshake's results on `ssl` binds (boxed: plain sessions pay one pointer).
    pub tls: Option<Box<crate::tls::TlsInfo>>,
    /// The stick-table entries the session tracks (`tcp-request connection track-scN`, and
    /// in `mode tcp` `tcp-request content track-scN`).
    pub sc: crate::stick::Trackers,
    /// The session's variables and its current transaction's (`set-var`, `var()`).
    pub vars: crate::vars::Vars,
    /// TLVs of the client's PROXY v2 header (`accept-proxy`), if it had any.
    pub pp: Option<Box<PpTlvs>>,
    /// The bind's `proto`: whether an HTTP/1 session may turn into HTTP/2 on the preface.
    pub proto: http2::BindProto,
    /// Set for a stream of an HTTP/2 connection: the request line to log (HAProxy logs the
    /// absolute URI and `HTTP/2.0`; empty when the frontend logs no HTTP line). Such a
    /// session is one transaction, not a connection of its own: it counts no session and
    /// holds no `maxconn` place.
    pub h2_line: Option<Box<str>>,
    /// The connection's place in its `maxconn` limits (`None` for an HTTP/2 stream, whose
    /// connection holds it).
    _adm: Option<Admission>,
    /// A duplicate of the client's TCP socket, kept only when a rule or format reads its
    /// `TCP_INFO` (`fc_rtt`, ...): valid as long as the session, whatever the client does.
    pub tcp_fd: Option<Rc<std::os::fd::OwnedFd>>,
    /// The current request's poll counters, only when [`PROFILE_USED`].
    pub prof: Option<Rc<Cell<TaskProfile>>>,
}

impl SessionCtx {
    pub fn shared(&self) -> &Arc<Shared> {
        &self.w.shared
    }

    /// What rules see of the session (before a backend is chosen: `be_name` is the frontend).
    pub fn sess(&self) -> crate::config::acl::Sess<'_> {
        let name = &self.shared().cfg.proxies[self.proxy].name;
        crate::config::acl::Sess {
            peer: self.peer,
            local: self.local,
            frontend: name,
            backend: name,
            unique_id: None,
            sc: crate::stick::ScView {
                sess: Some(&self.sc),
                txn: None,
            },
            vars: Some(&self.vars),
            pp: self.pp.as_deref(),
            shared: Some(self.shared()),
            server: None,
            tcp_fd: self.tcp_fd.as_deref().map(std::os::fd::AsFd::as_fd),
            profile: self.prof.as_deref().map(Cell::get),
        }
    }
}

/// A server connection: plain TCP, or TLS (`server ... ssl`). An enum rather than a generic
/// so that pools and sessions hold either without doubling every server-side code path;
/// plain connections pay one predictable branch per I/O call.
pub enum ServerStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<ServerTcp>>),
    /// A server on a UNIX socket (`server NAME unix@PATH`).
    Unix(UnixStream),
    /// A stream on an HTTP/2 connection to the server (`server_h2`), spoken to as HTTP/1.1
    /// through a pipe. Never pooled: the connection underneath is shared instead.
    H2(Box<http2::PipeEnd>),
}

/// The socket under a server connection, as the pools watch it.
pub enum Sock<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

impl Sock<'_> {
    pub fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self {
            Sock::Tcp(s) => s.poll_read_ready(cx),
            Sock::Unix(s) => s.poll_read_ready(cx),
        }
    }

    pub fn try_io<R>(
        &self,
        interest: tokio::io::Interest,
        f: impl FnOnce() -> std::io::Result<R>,
    ) -> std::io::Result<R> {
        match self {
            Sock::Tcp(s) => s.try_io(interest, f),
            Sock::Unix(s) => s.try_io(interest, f),
        }
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix(s) => s.as_fd(),
        }
    }
}

/// The TCP socket under a TLS server connection. tokio-rustls offers no way to rebuild a
/// stream from its parts, so the socket sits in a slot that can be emptied and refilled: that
/// is how an idle TLS connection moves from one thread's poller to another's (takeover,
/// [`ServerStream::rehome`]) without a new handshake. The slot is empty only inside `rehome`.
/// It also carries the connection's place in `CurrSslConns`.
pub struct ServerTcp(Option<TcpStream>, SslConnGuard);

impl From<TcpStream> for ServerTcp {
    fn from(s: TcpStream) -> ServerTcp {
        ServerTcp(Some(s), SslConnGuard::new())
    }
}

fn no_socket() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "server socket moved away")
}

impl AsyncRead for ServerTcp {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match &mut self.get_mut().0 {
            Some(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            None => std::task::Poll::Ready(Err(no_socket())),
        }
    }
}

impl AsyncWrite for ServerTcp {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match &mut self.get_mut().0 {
            Some(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            None => std::task::Poll::Ready(Err(no_socket())),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match &mut self.get_mut().0 {
            Some(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            None => std::task::Poll::Ready(Err(no_socket())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match &mut self.get_mut().0 {
            Some(s) => std::pin::Pin::new(s).poll_flush(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match &mut self.get_mut().0 {
            Some(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }
}

/// Moves a socket off the poller it is registered with (another thread's) onto this
/// thread's. Fails when the old poller is gone (its thread is ending).
fn rehome_tcp(s: TcpStream) -> std::io::Result<TcpStream> {
    TcpStream::from_std(s.into_std()?)
}

impl ServerStream {
    /// The TCP socket underneath (`None` only for a TLS stream whose socket failed to move
    /// between threads, which is then dropped).
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ServerStream::Plain(s) => Some(s),
            ServerStream::Tls(s) => s.get_ref().0.0.as_ref(),
            ServerStream::Unix(_) | ServerStream::H2(_) => None,
        }
    }

    /// The socket underneath, TCP or UNIX.
    pub fn sock(&self) -> Option<Sock<'_>> {
        match self {
            ServerStream::Unix(s) => Some(Sock::Unix(s)),
            _ => self.tcp().map(Sock::Tcp),
        }
    }

    /// Acknowledges what arrived at once (`TCP_QUICKACK`): the server may be holding the
    /// rest of its response until our ACK (its Nagle, or a full send buffer), which the
    /// kernel would delay by up to 40 ms.
    pub fn quick_ack(&self) {
        if let Some(s) = self.tcp() {
            let _ = socket2::SockRef::from(s).set_tcp_quickack(true);
        }
    }

    /// The same connection, registered with the calling thread's poller (takeover). The TLS
    /// state moves along untouched: no new handshake.
    pub fn rehome(self) -> std::io::Result<ServerStream> {
        match self {
            ServerStream::Plain(s) => rehome_tcp(s).map(ServerStream::Plain),
            ServerStream::Unix(s) => UnixStream::from_std(s.into_std()?).map(ServerStream::Unix),
            ServerStream::H2(_) => Err(no_socket()),
            ServerStream::Tls(mut t) => {
                let slot = &mut t.get_mut().0.0;
                let s = slot.take().ok_or_else(no_socket)?;
                *slot = Some(rehome_tcp(s)?);
                Ok(ServerStream::Tls(t))
            }
        }
    }

    /// Writes all of `buf`; TLS records are flushed to the socket too.
    pub async fn send(&mut self, buf: &[u8]) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        match self {
            ServerStream::Plain(s) => s.write_all(buf).await,
            ServerStream::Unix(s) => s.write_all(buf).await,
            ServerStream::H2(s) => s.write_all(buf).await,
            ServerStream::Tls(s) => {
                s.write_all(buf).await?;
                s.flush().await
            }
        }
    }

    /// Whether the connection may wait in an idle pool (an HTTP/2 stream may not: its
    /// connection is shared instead).
    pub fn poolable(&self) -> bool {
        !matches!(self, ServerStream::H2(_))
    }

    /// Neither closed nor sent anything while idle (see [`crate::pool::socket_alive`]).
    pub fn alive(&self) -> bool {
        self.sock()
            .is_some_and(|s| crate::pool::socket_alive(s.fd()))
    }

    /// Usable for another request. With `trust_poller`, the event loop's word suffices when
    /// it has seen nothing arrive (no syscall): the short read that ended the last response
    /// cleared tokio's readiness, so a close the loop has polled shows as readable, and only
    /// one it has not polled yet slips through (the caller can afford that: a replay, or a
    /// connection idle for moments only). Otherwise, or when something did arrive, the
    /// kernel is asked (a peek).
    pub fn reusable(&self, trust_poller: bool) -> bool {
        if trust_poller && let Some(sock) = self.sock() {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if sock.poll_read_ready(&mut cx).is_pending() {
                return true;
            }
        }
        self.alive()
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            ServerStream::Unix(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            ServerStream::H2(s) => std::pin::Pin::new(&mut **s).poll_read(cx, buf),
            ServerStream::Tls(s) => std::pin::Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            ServerStream::Unix(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            ServerStream::H2(s) => std::pin::Pin::new(&mut **s).poll_write(cx, buf),
            ServerStream::Tls(s) => std::pin::Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            ServerStream::Unix(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            ServerStream::H2(s) => std::pin::Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            ServerStream::Tls(s) => std::pin::Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerStream::Plain(s) => s.is_write_vectored(),
            ServerStream::Unix(s) => s.is_write_vectored(),
            ServerStream::H2(_) => false,
            ServerStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            ServerStream::Unix(s) => std::pin::Pin::new(s).poll_flush(cx),
            ServerStream::H2(s) => std::pin::Pin::new(&mut **s).poll_flush(cx),
            ServerStream::Tls(s) => std::pin::Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            ServerStream::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            ServerStream::Unix(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            ServerStream::H2(s) => std::pin::Pin::new(&mut **s).poll_shutdown(cx),
            ServerStream::Tls(s) => std::pin::Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// A connected server, with its slot (released when dropped) and connect metrics.
pub struct ServerConn {
    pub stream: ServerStream,
    /// The SNI it was opened with (TLS with `sni` only): a connection is reused only for
    /// requests that would send the same.
    pub sni: Option<Box<str>>,
    pub slot: Slot,
    pub retries: u32,
    pub redispatched: bool,
    /// Time to establish the connection (`%Tc`).
    pub connect_time: Duration,
    /// A stream on an HTTP/2 connection that was already open (a reuse, for logs, counters
    /// and the replay of a request it fails unanswered).
    pub reused: bool,
}

/// Why no server connection could be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    Pick(PickError),
    /// Every attempt failed (refused, unreachable); `timeout` when the last one timed out.
    Failed {
        timeout: bool,
        retries: u32,
        /// The server of the last attempt (logs name it, as HAProxy's do).
        server: usize,
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

    /// The status answered to an HTTP client. A server that refused every attempt is a bad
    /// gateway (502, as the core issue specifies; HAProxy 2.6 itself answers 503 there, and
    /// its documentation allows either); no server to try, a full or timed-out queue, and a
    /// connect timeout are 503, as in HAProxy.
    pub fn status(&self) -> u16 {
        match self {
            ConnectError::Failed { timeout: false, .. } => 502,
            _ => 503,
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
    connect_with_slot(ctx, be, input, slot, None).await
}

/// The SNI a TLS server connection sends: `sni str(..)`, or the request's Host header
/// without its port (`sni req.hdr(host)`; `host` is that header, when the caller has one).
pub fn server_sni<'a>(t: &'a crate::tls::ServerTls, host: Option<&'a [u8]>) -> Option<&'a str> {
    match t.sni.as_ref()? {
        crate::tls::SniExpr::Str(s) => Some(s),
        crate::tls::SniExpr::ReqHost => {
            let h = std::str::from_utf8(host?).ok()?.trim();
            let h = match h.rsplit_once(':') {
                Some((name, port))
                    if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    name
                }
                _ => h,
            };
            (!h.is_empty()).then_some(h)
        }
    }
}

/// A TCP connection to `addr` (from the server's `source`), starting with `proxy_hdr`
/// (`send-proxy*`), with TLS on top for `server ... ssl`; the TLS handshake shares the
/// `timeout connect` budget. `Err(true)` = timed out.
async fn connect_stream(
    srv: &crate::backend::ServerState,
    addr: SocketAddr,
    timeout: Option<Duration>,
    opts: &crate::config::ProxyOptions,
    host: Option<&[u8]>,
    proxy_hdr: Option<&[u8]>,
    http_bufsize: Option<usize>,
) -> Result<(ServerStream, Option<Box<str>>, bool), bool> {
    use crate::config::ServerH2;
    let started = Instant::now();
    // HTTP/2 (`mode http` only): a new stream on this thread's connection to the server when
    // there is one. A connection with a PROXY header is its client's alone.
    let h2 = http_bufsize.filter(|_| srv.conf.h2 != ServerH2::Never);
    let target = |tls: bool, bufsize: usize| server_h2::Target { tls, addr, bufsize };
    // What is left of `timeout connect` for the next step (TLS, the HTTP/2 handshake).
    let left = || timeout.map(|d| d.saturating_sub(started.elapsed()));
    let private = proxy_hdr.is_some();
    let h2_sni = match &srv.conf.tls {
        Some(t) if srv.conf.ssl => server_sni(t, host),
        _ => None,
    };
    if let Some(bs) = h2
        && proxy_hdr.is_none()
        && let Some(s) = server_h2::existing(srv, addr, h2_sni, target(srv.conf.ssl, bs))
    {
        return Ok((s, h2_sni.map(Into::into), true));
    }
    if let Some(t) = &srv.conf.unix {
        let mut s = connect_unix(t, timeout).await?;
        if let Some(h) = proxy_hdr
            && tokio::io::AsyncWriteExt::write_all(&mut s, h)
                .await
                .is_err()
        {
            return Err(false);
        }
        if let Some(bs) = h2
            && srv.conf.h2 == ServerH2::Always
        {
            let t = target(false, bs);
            let s = server_h2::start(s, srv, addr, None, private, t, left()).await?;
            return Ok((s, None, false));
        }
        return Ok((ServerStream::Unix(s), None, false));
    }
    let mut tcp = connect_one(addr, srv.source_now(), timeout, opts).await?;
    if let Some(h) = proxy_hdr {
        // Before anything else, TLS included. A small write on a new connection: the
        // socket buffer takes it whole.
        if tokio::io::AsyncWriteExt::write_all(&mut tcp, h)
            .await
            .is_err()
        {
            return Err(false);
        }
    }
    let tls = match &srv.conf.tls {
        Some(t) if srv.conf.ssl => t,
        _ => {
            let Some(bs) = h2.filter(|_| srv.conf.h2 == ServerH2::Always) else {
                return Ok((ServerStream::Plain(tcp), None, false));
            };
            // HTTP/2 with prior knowledge.
            let t = target(false, bs);
            let s = server_h2::start(tcp, srv, addr, None, private, t, left()).await?;
            return Ok((s, None, false));
        }
    };
    let sni = server_sni(tls, host);
    let name = crate::tls::server_name(sni, addr.ip());
    let s = match crate::tls::connect(tls, ServerTcp::from(tcp), name, left()).await {
        Ok(s) => s,
        Err(e) => return Err(e.kind() == std::io::ErrorKind::TimedOut),
    };
    let agreed_h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
    match h2 {
        Some(bs) if srv.conf.h2 == ServerH2::Always || agreed_h2 => {
            let t = target(true, bs);
            let s = server_h2::start(s, srv, addr, sni, private, t, left()).await?;
            Ok((s, sni.map(Into::into), false))
        }
        _ => Ok((ServerStream::Tls(Box::new(s)), sni.map(Into::into), false)),
    }
}

/// The longest wait before retrying a refused connection on the same server (HAProxy's
/// turn-around timer, shortened to `timeout connect` when that is shorter).
const TURN_AROUND: Duration = Duration::from_secs(1);

/// Connects to the server `slot` holds, retrying and redispatching on failure.
/// `host`: the request's Host header, for servers whose SNI comes from it.
pub async fn connect_with_slot(
    ctx: &SessionCtx,
    be: usize,
    input: &PickInput<'_>,
    mut slot: Slot,
    host: Option<&[u8]>,
) -> Result<ServerConn, ConnectError> {
    let shared = ctx.shared();
    let bp = &shared.cfg.proxies[be];
    let retries = bp.retries;
    let mut attempt = 0u32;
    let mut redispatched = false;
    loop {
        let addr = slot
            .server_state()
            .conf
            .target(**slot.server_state().addr.load(), ctx.local);
        let started = Instant::now();
        let proxy_hdr = slot
            .server_state()
            .conf
            .send_proxy
            .map(|v| crate::send_proxy::header(v, ctx.peer, ctx.local));
        let res = connect_stream(
            slot.server_state(),
            addr,
            bp.timeouts.connect,
            &bp.options,
            host,
            proxy_hdr.as_deref(),
            (bp.mode == Mode::Http).then_some(shared.cfg.global.bufsize.max(1024)),
        )
        .await;
        // (A failed TLS handshake counts as a layer-4 error for `observe`, as HAProxy's
        // connection errors do.)
        let seen = match res {
            Ok(_) => crate::check::Observed::L4Ok,
            Err(_) => crate::check::Observed::L4Err,
        };
        crate::check::observe(slot.server_state(), seen);
        // A stream on an HTTP/2 connection already open is a reuse, not a connection.
        if !matches!(res, Ok((_, _, true))) {
            slot.server_state().counters.connects.fetch_add(1, Relaxed);
        }
        match res {
            Ok((stream, sni, reused)) => {
                return Ok(ServerConn {
                    stream,
                    sni,
                    connect_time: started.elapsed(),
                    slot,
                    retries: attempt,
                    redispatched,
                    reused,
                });
            }
            Err(timeout) => {
                let srv = slot.server_state();
                srv.counters.conn_errors.fetch_add(1, Relaxed);
                if attempt >= retries {
                    return Err(ConnectError::Failed {
                        timeout,
                        retries: attempt,
                        server: slot.server,
                    });
                }
                attempt += 1;
                srv.counters.retries.fetch_add(1, Relaxed);
                // HAProxy 2.6 (`stream_choose_redispatch`, `back_handle_st_cer`): with
                // `option redispatch`, the last retry (or every Nth, `option redispatch N`)
                // goes to another server, and so does every retry when this one is down, or
                // when the algorithm does not hash a request property (that server does not
                // matter) and there are other active servers. A refused connection (not a
                // timed-out one, which already waited) is retried after a turn-around of
                // min(`timeout connect`, 1 s), so that a restarting server is not hammered,
                // unless the retry goes to another of several servers.
                let active = shared.backend(be).usable_active();
                let due = match bp.options.redispatch_after {
                    n if n > 0 => attempt.is_multiple_of(n as u32),
                    n => {
                        // -1: the last retry; -N: the Nth before the end; 0: never.
                        let every = retries as i64 + 1 + n as i64;
                        every != 0 && (attempt as i64) % every == 0
                    }
                };
                let redispatch = bp.options.redispatch
                    && (due || !srv.usable() || (!bp.balance.hashes_request() && active > 1));
                let turn_around = !timeout && (!redispatch || active <= 1);
                let wait = async {
                    if turn_around {
                        let t = TURN_AROUND.min(bp.timeouts.connect.unwrap_or(TURN_AROUND));
                        tokio::time::sleep(t).await;
                    }
                };
                if !redispatch {
                    wait.await;
                } else {
                    let failed = slot.server;
                    // The slot is given back before the wait, as HAProxy releases the server.
                    drop(slot);
                    wait.await;
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

/// `tune.rcvbuf.server`, `tune.sndbuf.server` (0: the system's sizes): process-wide
/// settings of the configuration in force, read by every server socket.
pub static RCVBUF_SERVER: AtomicU32 = AtomicU32::new(0);
pub static SNDBUF_SERVER: AtomicU32 = AtomicU32::new(0);

/// A socket for a connection to a server at `addr` (traffic or check), bound to `source`
/// (the server's or its backend's `source`), with the final ACK of the TCP handshake held
/// back when `delay_ack` (`tcp-smart-connect`, bare layer-4 checks).
pub(crate) fn server_socket(
    addr: SocketAddr,
    source: Option<SocketAddr>,
    delay_ack: bool,
) -> std::io::Result<tokio::net::TcpSocket> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    match RCVBUF_SERVER.load(Relaxed) {
        0 => {}
        n => sock.set_recv_buffer_size(n)?,
    }
    match SNDBUF_SERVER.load(Relaxed) {
        0 => {}
        n => sock.set_send_buffer_size(n)?,
    }
    if let Some(src) = source {
        // A fixed port needs SO_REUSEADDR to be usable again while earlier connections from
        // it linger in TIME_WAIT (HAProxy sets it too).
        if src.port() != 0 {
            sock.set_reuseaddr(true)?;
        }
        sock.bind(src)?;
    }
    if delay_ack {
        let _ = socket2::SockRef::from(&sock).set_tcp_quickack(false);
    }
    Ok(sock)
}

/// One connection attempt; `Err(true)` = timed out, `Err(false)` = refused/unreachable.
async fn connect_one(
    addr: SocketAddr,
    source: Option<SocketAddr>,
    timeout: Option<Duration>,
    opts: &crate::config::ProxyOptions,
) -> Result<TcpStream, bool> {
    // `tcp-smart-connect`: the ACK of the server's SYN-ACK leaves with the request.
    let keepalive = opts.srv_tcpka;
    let smart = opts.tcp_smart_connect;
    let fut = async { server_socket(addr, source, smart)?.connect(addr).await };
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
            if keepalive {
                let r = socket2::SockRef::from(&s);
                let _ = r.set_keepalive(true);
                let _ = opts.srv_tcpka_params.apply(&r);
            }
            if opts.nolinger {
                // A zero linger time never blocks the close (tokio's warning is about
                // non-zero ones).
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
            }
            Ok(s)
        }
        Err(e) => Err(e.kind() == std::io::ErrorKind::TimedOut),
    }
}

/// A connection to a server's UNIX socket (a path, or an abstract name); `Err(true)` = timed
/// out. A UNIX connect completes at once or fails: a full listen queue (`EAGAIN`) is a
/// failed attempt (retried as a refused TCP connect is), as in HAProxy, since the socket is
/// left unconnected.
pub(crate) async fn connect_unix(
    t: &crate::config::UnixTarget,
    timeout: Option<Duration>,
) -> Result<UnixStream, bool> {
    let fut = async {
        let addr = unix_sockaddr(t)?;
        let s = socket2::Socket::new(
            socket2::Domain::UNIX,
            socket2::Type::STREAM.nonblocking(),
            None,
        )?;
        s.connect(&addr)?;
        let s = UnixStream::from_std(std::os::unix::net::UnixStream::from(
            std::os::fd::OwnedFd::from(s),
        ))?;
        s.writable().await?;
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
        Ok(s)
    };
    let r = match timeout {
        Some(d) => match tokio::time::timeout(d, fut).await {
            Ok(r) => r,
            Err(_) => return Err(true),
        },
        None => fut.await,
    };
    r.map_err(|e| e.kind() == std::io::ErrorKind::TimedOut)
}

/// The socket address of a UNIX target (`abns@`: a leading NUL, Linux's abstract namespace).
pub(crate) fn unix_sockaddr(t: &crate::config::UnixTarget) -> std::io::Result<socket2::SockAddr> {
    use std::os::unix::ffi::OsStrExt;
    match t {
        crate::config::UnixTarget::Path(p) => socket2::SockAddr::unix(p),
        crate::config::UnixTarget::Abstract(n) => {
            let mut name = vec![0u8];
            name.extend_from_slice(n.as_bytes());
            socket2::SockAddr::unix(std::ffi::OsStr::from_bytes(&name))
        }
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

    /// Resolves when the client has abandoned its request (an HTTP/2 stream reset), as
    /// opposed to closing its side, which a socket's EOF cannot tell apart. Never, for
    /// sockets.
    fn aborted(&self) -> impl std::future::Future<Output = ()> {
        std::future::pending()
    }

    /// Acknowledges what arrived at once (`TCP_QUICKACK`): a client that sends a body after
    /// its head may be waiting for that ACK (Nagle), which `tcp-smart-accept` delays.
    fn quick_ack(&self) {}

    /// Sends what [`write_all_more`](Self::write_all_more) left in the socket waiting for
    /// more: the more did not come at once (the server paused), and the kernel would hold
    /// it up to 200 ms.
    fn push_pending(&self) {}

    /// `silent-drop`: makes the coming close invisible to the client (nothing on a UNIX
    /// socket, whose peer is local anyway).
    fn silent_drop(&self) {}

    /// Whether ending the connection needs a shutdown before the close. A plain socket's
    /// close sends the same FIN (and the same RST if unread input remains) as a shutdown
    /// followed by a close, so the shutdown is one syscall per connection for nothing; TLS
    /// must send its `close_notify` first.
    fn shutdown_before_close(&self) -> bool {
        true
    }

    /// Writes all of `buf` and hands it to the kernel: a no-op flush on plain sockets, while
    /// TLS streams keep records the socket did not take until flushed.
    fn send(&mut self, buf: &[u8]) -> impl std::future::Future<Output = std::io::Result<()>> {
        async move {
            tokio::io::AsyncWriteExt::write_all(self, buf).await?;
            tokio::io::AsyncWriteExt::flush(self).await
        }
    }
}

impl ClientIo for TcpStream {
    fn wait_readable(&self) -> impl std::future::Future<Output = std::io::Result<()>> {
        self.readable()
    }

    fn quick_ack(&self) {
        let _ = socket2::SockRef::from(self).set_tcp_quickack(true);
    }

    fn push_pending(&self) {
        // Setting TCP_NODELAY (already on or not) pushes the queued partial segment out
        // (Linux: `tcp_push_pending_frames`), as the next send without MSG_MORE would.
        let _ = self.set_nodelay(true);
    }

    fn silent_drop(&self) {
        // As HAProxy: with TCP_REPAIR (it needs CAP_NET_ADMIN) the close sends nothing at
        // all, so the client keeps a connection that no longer exists here. Without it, the
        // reset the close sends (no lingering) gets a TTL of 1, so that it dies at the first
        // router (a client on the local network still sees it).
        // What arrived is acknowledged first: an ACK held back (`tcp-smart-accept`, delayed
        // ACKs) would have the client retransmit to a socket that no longer exists, and get
        // the kernel's reset within a retransmission timeout.
        self.quick_ack();
        if nix::sys::socket::setsockopt(self, nix::sys::socket::sockopt::TcpRepair, &1).is_ok() {
            return;
        }
        let s = socket2::SockRef::from(self);
        let _ = match self.peer_addr() {
            Ok(SocketAddr::V6(_)) => s.set_unicast_hops_v6(1),
            _ => s.set_ttl_v4(1),
        };
        let _ = s.set_linger(Some(Duration::ZERO));
    }

    fn shutdown_before_close(&self) -> bool {
        false
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

    fn shutdown_before_close(&self) -> bool {
        false
    }

    async fn write_all_more(&mut self, buf: &[u8]) -> std::io::Result<()> {
        tokio::io::AsyncWriteExt::write_all(self, buf).await
    }
}

impl<S: ClientIo> ClientIo for tokio_rustls::server::TlsStream<S> {
    async fn wait_readable(&self) -> std::io::Result<()> {
        let (io, conn) = self.get_ref();
        // Records already read and decrypted are waiting in rustls: the socket may never
        // become readable again for them.
        if !conn.wants_read() {
            return Ok(());
        }
        io.wait_readable().await
    }

    fn quick_ack(&self) {
        self.get_ref().0.quick_ack();
    }

    fn silent_drop(&self) {
        self.get_ref().0.silent_drop();
    }

    async fn write_all_more(&mut self, buf: &[u8]) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        // rustls keeps what the socket did not take; flushing hands it all to the kernel now
        // (nothing else would, if the next write is a while away).
        self.write_all(buf).await?;
        self.flush().await
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

/// What a stick-table action did: a slot to fill with a newly tracked entry, or nothing
/// more (the counters it moves are moved).
pub(crate) enum StickDone {
    Nothing,
    Track(usize, crate::stick::Tracked),
}

/// Carries out a stick-table action of a rule whose condition holds. A `track-scN` on a
/// slot the session or the request already tracks does nothing, as in HAProxy.
pub(crate) fn stick_act(
    a: &crate::config::StickAction,
    view: &dyn crate::config::HttpView,
) -> StickDone {
    use crate::config::StickAction;
    use crate::stick::{Data, Tracked};
    let sess = view.sess();
    match a {
        StickAction::Track { slot, key, table } => {
            if sess.sc.get(*slot).is_some() {
                return StickDone::Nothing;
            }
            let Some(t) = table.get() else {
                return StickDone::Nothing;
            };
            match key.key(view, t).and_then(|k| Tracked::start(t, k)) {
                Some(tr) => StickDone::Track(*slot, tr),
                None => StickDone::Nothing,
            }
        }
        StickAction::IncGpc { slot, gpc } => {
            if let Some(tr) = sess.sc.get(*slot) {
                tr.add(*gpc, 1);
            }
            StickDone::Nothing
        }
        StickAction::SetGpt0 { slot, value } => {
            if let Some(tr) = sess.sc.get(*slot) {
                tr.table.set(&tr.entry, Data::Gpt0, *value as u64);
            }
            StickDone::Nothing
        }
    }
}

/// What `tcp-request` rules decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Accepted, or no rule stopped the session.
    Go,
    /// `reject`: closed at once.
    Reject,
    /// `silent-drop`: closed without the client being told (`ClientIo::silent_drop`).
    SilentDrop,
    /// `switch-mode http`: accepted, and the session goes on as HTTP in this frontend.
    Http(http2::BindProto),
}

/// Runs `tcp-request` rules on a session's first data or its addresses. Entries tracked go
/// to `sc`.
pub(crate) fn tcp_rules(
    rules: &[crate::config::TcpRequestRule],
    base: &http::SrcView<'_>,
    sc: &mut crate::stick::Trackers,
) -> Verdict {
    use crate::config::TcpAction;
    for r in rules {
        let done = {
            let mut sess = base.3;
            sess.sc = crate::stick::ScView {
                sess: Some(sc),
                txn: None,
            };
            let view = http::SrcView(base.0, base.1, base.2, sess, base.4);
            if !r.cond.as_ref().is_none_or(|c| c.eval(&view)) {
                continue;
            }
            match &r.action {
                TcpAction::Accept => return Verdict::Go,
                TcpAction::SwitchMode(proto) => return Verdict::Http(*proto),
                TcpAction::Reject => return Verdict::Reject,
                TcpAction::SilentDrop => return Verdict::SilentDrop,
                TcpAction::Stick(a) => stick_act(a, &view),
                TcpAction::SetVar(a) => {
                    a.run(&view);
                    continue;
                }
                // Edits of an HTTP message mean nothing here; an end rejects.
                TcpAction::Lua(a) => {
                    let eff = crate::lua::run_action(a, &view, false, None);
                    if eff.end.is_some() {
                        return Verdict::Reject;
                    }
                    if eff.stop {
                        return Verdict::Go;
                    }
                    continue;
                }
            }
        };
        if let StickDone::Track(slot, t) = done {
            sc.0[slot] = Some(t);
        }
    }
    Verdict::Go
}

/// `stick match` / `stick on`: the server a stick table names for this request or session,
/// if one of backend `be_idx`'s rules finds it, and it can take traffic (or `option
/// persist` sends traffic to it anyway).
pub(crate) fn stick_match(
    shared: &Shared,
    be_idx: usize,
    view: &dyn crate::config::HttpView,
) -> Option<usize> {
    let bp = &shared.cfg.proxies[be_idx];
    let be = shared.backend(be_idx);
    for r in bp.sticks.iter().filter(|r| r.matches) {
        if !r.cond.as_ref().is_none_or(|c| c.eval(view)) {
            continue;
        }
        let Some(t) = r.table.get() else { continue };
        let Some(e) = r.key.key(view, t).and_then(|k| t.lookup(&k)) else {
            continue;
        };
        let id = t.get(&e, crate::stick::Data::ServerId).unwrap_or(0);
        let found = be
            .servers
            .iter()
            .position(|s| id != 0 && u64::from(s.puid) == id && !s.deleted.load(Relaxed));
        if let Some(i) = found
            && (be.servers[i].usable() || bp.options.persist)
        {
            return Some(i);
        }
    }
    None
}

/// `stick store-request` / `stick on` (`on_response` false), or `stick store-response`
/// (true, once the response head is in): writes the server chosen for this request or session
/// to the tables of backend `be_idx`'s rules (the last request wins).
pub(crate) fn stick_store(
    shared: &Shared,
    be_idx: usize,
    view: &dyn crate::config::HttpView,
    server: usize,
    on_response: bool,
) {
    let bp = &shared.cfg.proxies[be_idx];
    let puid = shared.backend(be_idx).servers[server].puid;
    for r in bp
        .sticks
        .iter()
        .filter(|r| r.stores && r.on_response == on_response)
    {
        if !r.cond.as_ref().is_none_or(|c| c.eval(view)) {
            continue;
        }
        let Some(t) = r.table.get() else { continue };
        if let Some(e) = r.key.key(view, t).and_then(|k| t.get_or_create(k)) {
            t.set(&e, crate::stick::Data::ServerId, puid.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::HandshakeSched;
    use std::io::Write;

    /// A client that sends its ClientHello, waits in the handshake queue and resets the
    /// connection before its turn is dropped at its turn, and its start goes to the next one.
    #[test]
    fn a_client_that_leaves_while_queued_is_dropped_at_its_turn() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let hs = Rc::new(HandshakeSched::new(200));
            // This round's start is taken, and no round task runs yet: the next waits.
            hs.turn().await;
            let mut clients = Vec::new();
            let mut waits = Vec::new();
            for _ in 0..2 {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                let (s, a) = l.accept().await.unwrap();
                c.write_all(b"\x16\x03\x01\x00\x05hello").unwrap();
                clients.push(c);
                let hs = hs.clone();
                waits.push(tokio::task::spawn_local(async move {
                    hello_and_turn(&hs, &Client::Tcp(s, a)).await
                }));
            }
            while hs.queued() < 2 {
                tokio::task::yield_now().await;
            }
            // The first in line resets its connection; the second stays.
            let gone = clients.remove(0);
            socket2::SockRef::from(&gone)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(gone);
            {
                let hs = hs.clone();
                tokio::task::spawn_local(async move { hs.run_rounds().await });
            }
            let second = waits.pop().unwrap();
            assert!(!waits.pop().unwrap().await.unwrap(), "gone: dropped");
            assert!(second.await.unwrap(), "still there: its turn");
            assert_eq!(hs.queued(), 0);
        });
    }
}
