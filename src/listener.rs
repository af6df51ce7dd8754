//! `listener`: `bind` lines turned into listening sockets, and the accept loop with its
//! admission limits (global, frontend and bind `maxconn`, `tune.maxaccept` per wake-up).
//!
//! TCP binds get one SO_REUSEPORT socket per worker thread so the kernel spreads connections
//! and no accept lock is shared; unix and inherited (`fd@N`) sockets are shared by all threads.
//! It must not parse protocols: an accepted connection is handed to `stream`.

use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixListener as StdUnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::*};

use socket2::{Domain, Protocol, Socket, Type};

use crate::backend::Shared;
use crate::config::{Bind, BindAddr, Config};

/// One listening socket for one thread.
pub enum StdListener {
    Tcp(std::net::TcpListener),
    Unix(StdUnixListener),
}

/// A `bind` line ready to be served: one socket per worker thread.
pub struct BoundListener {
    pub proxy: usize,
    pub bind: Bind,
    /// `sockets[i]` is thread `i % nbthread`'s socket (more sockets than threads only when
    /// inherited from an old process that had more threads).
    pub sockets: Vec<StdListener>,
    /// Connections currently accepted on this bind (for bind `maxconn`).
    pub cur_conns: Arc<AtomicU32>,
}

fn describe(addr: &BindAddr) -> String {
    match addr {
        BindAddr::Tcp(a) => a.to_string(),
        BindAddr::Unix(p) => format!("unix@{}", p.display()),
        BindAddr::Fd(n) => format!("fd@{n}"),
        BindAddr::Abns(n) => format!("abns@{n}"),
    }
}

fn tcp_socket(
    addr: SocketAddr,
    b: &Bind,
    backlog: i32,
    (smart, ka, nolinger): (bool, Option<crate::config::TcpKeepalive>, bool),
) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        // HAProxy binds `[::]` dual-stack unless `v6only`; `v4v6` forces dual-stack.
        s.set_only_v6(b.v6only && !b.v4v6)?;
    }
    s.set_nonblocking(true)?;
    // Accepted sockets inherit it (Linux copies the listener's TCP options), so no
    // connection ever waits on Nagle and none costs a setsockopt of its own.
    s.set_tcp_nodelay(true)?;
    if let Some(dev) = &b.interface {
        s.bind_device(Some(dev.as_bytes()))?;
    }
    s.bind(&addr.into())?;
    if b.defer_accept {
        crate::sys::set_defer_accept(&s, 1)?;
    }
    if b.tfo {
        crate::sys::set_fastopen(&s, backlog)?;
    }
    s.listen(backlog)?;
    // After listen(), which resets the delayed-ACK state.
    set_accept_options(&s, smart, ka, nolinger)?;
    Ok(s)
}

/// `tcp-smart-accept`, `option clitcpka` and `option nolinger` on a listening socket: accepted
/// sockets inherit its delayed-ACK mode (`TCP_QUICKACK` off, as HAProxy sets it), `SO_KEEPALIVE`
/// and `SO_LINGER`, so no
/// connection needs a setsockopt of its own. Set both ways, since an inherited socket may
/// carry the old process's setting.
fn set_accept_options(
    s: &Socket,
    smart: bool,
    keepalive: Option<crate::config::TcpKeepalive>,
    nolinger: bool,
) -> io::Result<()> {
    s.set_keepalive(keepalive.is_some())?;
    // `clitcpka-idle|intvl|cnt`: inherited by accepted sockets as well.
    if let Some(k) = keepalive {
        k.apply(&socket2::SockRef::from(s))?;
    }
    // `option nolinger`: accepted sockets close with a reset and leave no FIN_WAIT/TIME_WAIT.
    s.set_linger(nolinger.then_some(std::time::Duration::ZERO))?;
    s.set_tcp_quickack(!smart)
}

/// Binds every `bind` of every frontend. Errors name the proxy and address, like HAProxy's
/// "Starting frontend fe: cannot bind socket (Address already in use) [127.0.0.1:80]".
/// Sockets taken from an old process (`-x`, [`crate::reload::fetch`]) are used for the binds
/// they belong to, so that the connections waiting in them are served here.
pub fn bind_all(
    cfg: &Config,
    nbthread: usize,
    inherited: &mut crate::reload::Inherited,
) -> Result<Vec<BoundListener>, Vec<String>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (pi, p) in cfg.proxies.iter().enumerate() {
        if !p.kind.has_frontend() {
            continue;
        }
        for b in &p.binds {
            let backlog =
                b.backlog
                    .or(p.backlog)
                    .unwrap_or_else(|| p.maxconn.unwrap_or(1024).min(65535)) as i32;
            let smart = p.options.smart_accept(p.mode, b.ssl.is_some());
            let ka = p.options.cli_tcpka.then_some(p.options.cli_tcpka_params);
            let nolinger = p.options.nolinger;
            let taken = crate::reload::bind_key(&b.addr)
                .map(|k| inherited.take(&k))
                .unwrap_or_default();
            let res: io::Result<Vec<StdListener>> = (|| match &b.addr {
                BindAddr::Tcp(a) => {
                    let mut v = Vec::with_capacity(nbthread.max(taken.len()));
                    // Every inherited socket is kept (an old process with more threads had
                    // more): closing one would reset the connections queued in it.
                    for fd in taken {
                        let s = Socket::from(fd);
                        s.set_nonblocking(true)?;
                        s.set_tcp_nodelay(true)?;
                        // This configuration's backlog and defer-accept.
                        s.listen(backlog)?;
                        set_accept_options(&s, smart, ka, nolinger)?;
                        crate::sys::set_defer_accept(&s, i32::from(b.defer_accept))?;
                        if b.tfo {
                            crate::sys::set_fastopen(&s, backlog)?;
                        }
                        v.push(StdListener::Tcp(s.into()));
                    }
                    let actual = match v.first() {
                        Some(StdListener::Tcp(t)) => t.local_addr()?,
                        _ => {
                            let first = tcp_socket(*a, b, backlog, (smart, ka, nolinger))?;
                            // Port 0 binds (tests) must give every thread the same port.
                            let actual = first.local_addr()?.as_socket().unwrap_or(*a);
                            v.push(StdListener::Tcp(first.into()));
                            actual
                        }
                    };
                    while v.len() < nbthread {
                        v.push(StdListener::Tcp(
                            tcp_socket(actual, b, backlog, (smart, ka, nolinger))?.into(),
                        ));
                    }
                    // `tune.rcvbuf.client`, `tune.sndbuf.client`: accepted sockets inherit
                    // the listener's buffer sizes.
                    for l in &v {
                        if let StdListener::Tcp(t) = l {
                            let s = socket2::SockRef::from(t);
                            if let Some(n) = cfg.global.rcvbuf_client {
                                s.set_recv_buffer_size(n as usize)?;
                            }
                            if let Some(n) = cfg.global.sndbuf_client {
                                s.set_send_buffer_size(n as usize)?;
                            }
                        }
                    }
                    Ok(v)
                }
                BindAddr::Unix(_) | BindAddr::Abns(_) if !taken.is_empty() => {
                    // The old process's socket, file and all (its copies are duplicates of
                    // one socket).
                    let fd = taken.into_iter().next().ok_or(io::ErrorKind::NotFound)?;
                    let l = StdUnixListener::from(fd);
                    l.set_nonblocking(true)?;
                    shared_copies(StdListener::Unix(l), nbthread)
                }
                BindAddr::Unix(path) => {
                    // HAProxy replaces a stale socket file; refuse to remove anything else.
                    if let Ok(md) = std::fs::symlink_metadata(path) {
                        use std::os::unix::fs::FileTypeExt;
                        if md.file_type().is_socket() {
                            let _ = std::fs::remove_file(path);
                        }
                    }
                    let l = StdUnixListener::bind(path)?;
                    cfg.global.unix_bind.apply(path, [None; 3])?;
                    l.set_nonblocking(true)?;
                    shared_copies(StdListener::Unix(l), nbthread)
                }
                BindAddr::Abns(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                    let l = StdUnixListener::bind_addr(&a)?;
                    l.set_nonblocking(true)?;
                    shared_copies(StdListener::Unix(l), nbthread)
                }
                BindAddr::Fd(n) => {
                    let s = crate::sys::adopt_listening_fd(*n)?;
                    s.set_nonblocking(true)?;
                    if s.domain()? != Domain::UNIX {
                        s.set_tcp_nodelay(true)?;
                        set_accept_options(&s, smart, ka, nolinger)?;
                    }
                    let l = match s.domain()? {
                        Domain::UNIX => {
                            StdListener::Unix(StdUnixListener::from(std::os::fd::OwnedFd::from(s)))
                        }
                        _ => StdListener::Tcp(s.into()),
                    };
                    shared_copies(l, nbthread)
                }
            })();
            match res {
                Ok(sockets) => out.push(BoundListener {
                    proxy: pi,
                    bind: b.clone(),
                    sockets,
                    cur_conns: Arc::new(AtomicU32::new(0)),
                }),
                Err(e) => errors.push(format!(
                    "Starting frontend {}: cannot bind socket ({}) [{}] ({}:{})",
                    p.name,
                    e,
                    describe(&b.addr),
                    b.origin.file,
                    b.origin.line
                )),
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// A socket all threads accept on: each thread gets a duplicate descriptor of it.
fn shared_copies(l: StdListener, n: usize) -> io::Result<Vec<StdListener>> {
    let mut v = Vec::with_capacity(n);
    for _ in 1..n {
        v.push(match &l {
            StdListener::Tcp(t) => StdListener::Tcp(t.try_clone()?),
            StdListener::Unix(u) => StdListener::Unix(u.try_clone()?),
        });
    }
    v.push(l);
    Ok(v)
}

impl StdListener {
    pub fn local_addr_string(&self) -> String {
        match self {
            StdListener::Tcp(t) => t.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            StdListener::Unix(u) => u
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_default(),
        }
    }
}

/// Holds one admitted client connection's place in every `maxconn` it counts against.
pub struct Admission {
    shared: Arc<Shared>,
    proxy: usize,
    bind: Arc<AtomicU32>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.shared.global_conns.fetch_sub(1, SeqCst);
        self.shared.proxies[self.proxy]
            .fe
            .cur_conns
            .fetch_sub(1, SeqCst);
        self.bind.fetch_sub(1, SeqCst);
        self.shared.conn_freed.notify_waiters();
    }
}

/// True if one more connection would fit every limit (a hint: [`try_admit`] decides).
pub fn has_room(
    shared: &Arc<Shared>,
    proxy: usize,
    bind: &AtomicU32,
    bind_max: Option<u32>,
) -> bool {
    let fe = &shared.proxies[proxy].fe;
    shared.global_conns.load(SeqCst) < shared.global_maxconn.load(Relaxed)
        && fe.cur_conns.load(SeqCst) < fe.maxconn.load(Relaxed)
        && bind.load(SeqCst) < bind_max.unwrap_or(u32::MAX)
}

/// Counts one more connection whatever the limits: for a connection already accepted when
/// the process stops listening, which no other process can take any more (serving it beats
/// resetting it; at most one per thread and listener).
pub fn admit_anyway(shared: &Arc<Shared>, proxy: usize, bind: &Arc<AtomicU32>) -> Admission {
    shared.global_conns.fetch_add(1, SeqCst);
    shared.proxies[proxy].fe.cur_conns.fetch_add(1, SeqCst);
    bind.fetch_add(1, SeqCst);
    Admission {
        shared: shared.clone(),
        proxy,
        bind: bind.clone(),
    }
}

/// Counts one more connection if global, frontend and bind limits allow it.
pub fn try_admit(
    shared: &Arc<Shared>,
    proxy: usize,
    bind: &Arc<AtomicU32>,
    bind_max: Option<u32>,
) -> Option<Admission> {
    fn take(c: &AtomicU32, max: u32) -> bool {
        c.fetch_update(SeqCst, SeqCst, |v| (v < max).then_some(v + 1))
            .is_ok()
    }
    if !take(&shared.global_conns, shared.global_maxconn.load(Relaxed)) {
        return None;
    }
    let fe = &shared.proxies[proxy].fe;
    if !take(&fe.cur_conns, fe.maxconn.load(Relaxed)) {
        shared.global_conns.fetch_sub(1, SeqCst);
        return None;
    }
    if !take(bind, bind_max.unwrap_or(u32::MAX)) {
        shared.global_conns.fetch_sub(1, SeqCst);
        fe.cur_conns.fetch_sub(1, SeqCst);
        return None;
    }
    Some(Admission {
        shared: shared.clone(),
        proxy,
        bind: bind.clone(),
    })
}

/// A per-second event limit shared by all threads (`maxconnrate`, `maxsessrate`, `maxsslrate`,
/// `rate-limit sessions`): at most `limit` events in each second of the process's monotonic
/// clock. Beyond it, listeners stop accepting (connections wait in the backlog) until the
/// next second, as HAProxy's paused listeners do. With no limit ([`RateLimit::counter`]) it
/// only measures the rate (`show info` `SslRate`).
#[derive(Debug)]
pub struct RateLimit {
    limit: u32,
    /// The current second (high 32 bits) and the events counted in it (low 32 bits).
    state: std::sync::atomic::AtomicU64,
    /// The most events counted in one second (`MaxSslRate`; `clear counters` resets it).
    max: AtomicU32,
    base: std::time::Instant,
}

impl RateLimit {
    pub fn new(limit: u32) -> RateLimit {
        RateLimit {
            limit,
            state: std::sync::atomic::AtomicU64::new(0),
            max: AtomicU32::new(0),
            base: std::time::Instant::now(),
        }
    }

    /// A rate that is measured, never limited.
    pub fn counter() -> RateLimit {
        RateLimit::new(u32::MAX)
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The most events seen in one second since start-up or the last [`RateLimit::clear_max`].
    pub fn max(&self) -> u32 {
        self.max.load(Relaxed)
    }

    pub fn clear_max(&self) {
        self.max.store(0, Relaxed);
    }

    fn now(&self) -> (u64, std::time::Duration) {
        let e = self.base.elapsed();
        let sec = e.as_secs() + 1;
        let to_next = std::time::Duration::from_secs(sec) - e;
        (sec, to_next)
    }

    /// Events counted in the current second.
    pub fn current(&self) -> u32 {
        let (sec, _) = self.now();
        let s = self.state.load(SeqCst);
        if s >> 32 == sec { s as u32 } else { 0 }
    }

    /// `None` if an event may happen now, else how long until the next second.
    pub fn wait(&self) -> Option<std::time::Duration> {
        if self.limit == u32::MAX {
            return None;
        }
        let (_, to_next) = self.now();
        (self.current() >= self.limit).then_some(to_next)
    }

    /// Counts one event if the current second has room; else how long until the next one.
    pub fn take(&self) -> Result<(), std::time::Duration> {
        let (sec, to_next) = self.now();
        let prev = self
            .state
            .fetch_update(SeqCst, SeqCst, |s| {
                if s >> 32 != sec {
                    Some(sec << 32 | 1)
                } else if (s as u32) < self.limit {
                    Some(s + 1)
                } else {
                    None
                }
            })
            .map_err(|_| to_next)?;
        let n = if prev >> 32 == sec {
            prev as u32 + 1
        } else {
            1
        };
        if n > self.max.load(Relaxed) {
            self.max.fetch_max(n, Relaxed);
        }
        Ok(())
    }

    /// Gives back an event taken this second (another limit refused the connection).
    pub fn give_back(&self) {
        let (sec, _) = self.now();
        let _ = self.state.fetch_update(SeqCst, SeqCst, |s| {
            (s >> 32 == sec && s as u32 > 0).then_some(s - 1)
        });
    }
}

/// The rate limits a connection accepted for `proxy` is subject to; `ssl`: on an `ssl` bind
/// (`maxsslrate`, and the `SslRate` measure).
fn rate_limits(shared: &Shared, proxy: usize, ssl: bool) -> [Option<&RateLimit>; 4] {
    [
        shared.conn_rate.as_ref(),
        shared.sess_rate.as_ref(),
        shared.proxies[proxy].fe.sess_rate.as_ref(),
        ssl.then_some(&shared.ssl_rate),
    ]
}

/// `None` if no rate limit of `proxy` is reached, else how long until one frees up.
pub fn rate_wait(shared: &Shared, proxy: usize, ssl: bool) -> Option<std::time::Duration> {
    rate_limits(shared, proxy, ssl)
        .into_iter()
        .flatten()
        .filter_map(|r| r.wait())
        .max()
}

/// Counts an accepted connection in every rate limit of `proxy`, or in none (and says how
/// long to wait) if one is reached.
pub fn rate_take(shared: &Shared, proxy: usize, ssl: bool) -> Result<(), std::time::Duration> {
    let limits = rate_limits(shared, proxy, ssl);
    for (i, r) in limits.iter().enumerate() {
        if let Some(Err(d)) = r.map(|r| r.take()) {
            for done in limits[..i].iter().flatten() {
                done.give_back();
            }
            return Err(d);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn accepted_sockets_inherit_the_keepalive_timing() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        s.bind(&addr.into()).unwrap();
        s.listen(16).unwrap();
        let k = crate::config::TcpKeepalive {
            idle: Some(Duration::from_secs(37)),
            intvl: Some(Duration::from_secs(7)),
            cnt: Some(5),
        };
        set_accept_options(&s, false, Some(k), false).unwrap();
        let to = s.local_addr().unwrap().as_socket().unwrap();
        let _c = std::net::TcpStream::connect(to).unwrap();
        let (a, _) = s.accept().unwrap();
        assert!(a.keepalive().unwrap());
        assert_eq!(a.tcp_keepalive_time().unwrap(), Duration::from_secs(37));
        assert_eq!(a.tcp_keepalive_interval().unwrap(), Duration::from_secs(7));
        assert_eq!(a.tcp_keepalive_retries().unwrap(), 5);
        // Without `option clitcpka`, no keep-alive at all.
        set_accept_options(&s, false, None, false).unwrap();
        let _c2 = std::net::TcpStream::connect(to).unwrap();
        let (b, _) = s.accept().unwrap();
        assert!(!b.keepalive().unwrap());
    }
}
