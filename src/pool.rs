//! `pool`: idle server connections, kept per worker thread and per server for later requests
//! (DESIGN §4).
//!
//! Owns the idle lists and their limits: never more idle connections for a server than this
//! thread ever used at once since the last purge (HAProxy 2.0's rule against pools that grow
//! with `Connection: close` traffic), `pool-max-conn`, `max-reuse`, the periodic purge
//! (`pool-purge-delay`) that closes dead connections and half of the surplus, the watch that
//! closes an idle connection as soon as the server closes it or sends anything, and takeover:
//! a thread without an idle connection for a server takes one from another thread while the
//! server's idle total is at least `pool-low-conn` (`tune.idle-pool.shared on`).
//! Which request may use which idle connection (`http-reuse`) is decided by the caller,
//! `stream::http`.
//!
//! It must not connect. A thread pushes and pops its own idle connections without locks (the
//! owner end of a work-stealing deque); other threads only ever steal from the far end, and the
//! socket they take is moved from the owner's poller to theirs. Everything else here is the
//! thread's own.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_deque::{Steal, Stealer, Worker as Deque};
use tokio::io::Interest;

use crate::backend::PoolGauges;
use crate::stream::ServerStream;

/// The per-thread map of server pools is looked up twice per request: foldhash (randomly
/// seeded per process) instead of SipHash, which cost ~550 instructions per request.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Pool key: backend (proxy index), server index within it, and a hash of the connection's
/// `pool-conn-name` value and, for TLS servers whose `sni` comes from the request, of the SNI
/// it was opened with (0 without either). Connections are reused only under the same key.
pub type Key = (usize, usize, u64);

/// The pool key part of a connection's name (`pool-conn-name`, `check-pool-conn-name`) and,
/// for a TLS server whose `sni` comes from the request, of the SNI it was opened with (`sni`:
/// `Some` for such a server): 0 without either, never 0 with one, so named and unnamed
/// connections never mix. Traffic and checks compute it here alike.
pub fn name_hash(name: Option<&[u8]>, sni: Option<Option<&str>>) -> u64 {
    use std::hash::Hasher;
    if name.is_none() && sni.is_none() {
        return 0;
    }
    let mut h = std::hash::DefaultHasher::new();
    if let Some(v) = name {
        h.write(v);
    }
    if let Some(sni) = sni {
        // (Tagged, so that a name and an SNI never collide.)
        h.write_u8(0xff);
        h.write(sni.unwrap_or("").as_bytes());
    }
    h.finish() | 1
}

/// An idle server connection.
pub struct IdleConn {
    /// Plain or TLS: a TLS connection keeps its session, so reusing it costs no handshake.
    pub stream: ServerStream,
    /// Requests it has carried so far (at least 1 once pooled). A connection with 2 or more
    /// has proved that the server keeps it open between requests.
    pub uses: u32,
    /// The server's address generation when it was opened (`set server addr` bumps it: a
    /// connection to the old address is never reused).
    pub epoch: u32,
    /// When its last response ended.
    pub since: Instant,
}

/// How long an idle connection may have been idle and still be taken on the watcher's word
/// alone. The watcher learns of a close only when the thread polls its sockets, which a busy
/// thread does every few dozen tasks; a connection idle for longer is also asked directly (a
/// peek), since servers close idle connections after a timeout, not right after answering.
const TRUST_WATCH: Duration = Duration::from_millis(1);

impl IdleConn {
    /// Neither closed nor sent anything since it went idle: an idle server connection that
    /// becomes readable is unusable (EOF, or unsolicited data such as a 408).
    ///
    /// Asks the kernel (a non-blocking `MSG_PEEK`), not tokio's readiness cache, which may not
    /// have seen a FIN that arrived while the thread was busy.
    pub fn alive(&self) -> bool {
        self.stream.alive()
    }

    /// Arms the watch: the thread's watcher is woken when the server closes or writes.
    /// Returns false when the connection is already unusable.
    ///
    /// tokio keeps a connection "readable" until a read meets `WouldBlock`, which a response
    /// read to its announced end never does; such a stale readiness is cleared with a peek,
    /// so that the next readiness poll registers the watcher.
    ///
    /// For TLS the socket is watched under the TLS layer: anything arriving while idle is a
    /// close (`close_notify`, EOF) or unsolicited, and a connection whose session tickets
    /// came late is merely closed early.
    fn arm(&self, watcher: &Waker) -> bool {
        let Some(sock) = self.stream.sock() else {
            return false;
        };
        let mut cx = Context::from_waker(watcher);
        if sock.poll_read_ready(&mut cx).is_pending() {
            return true;
        }
        match sock.try_io(Interest::READABLE, || peek(sock.fd())) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                sock.poll_read_ready(&mut cx).is_pending()
            }
            _ => false,
        }
    }

    /// Usable by a request on this thread: not idle beyond the server's reuse window, and
    /// the watch saw nothing and either it went idle moments ago, or the request can be
    /// replayed (`replay_ok`), or a peek says so. (One syscall per reuse saved on the hot
    /// path: a close that the thread has not polled yet costs a replayable request a replay
    /// on a new connection, and others the peek.)
    fn usable(&self, g: &PoolGauges, replay_ok: bool) -> bool {
        let idle = self.since.elapsed();
        if g.reuse_window().is_some_and(|w| idle >= w) {
            return false;
        }
        let ok = self.stream.reusable(idle < TRUST_WATCH || replay_ok);
        if !ok {
            g.learn_timeout(idle, false);
        }
        ok
    }
}

fn peek(s: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize> {
    let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    socket2::SockRef::from(&s).recv_with_flags(&mut b, libc::MSG_PEEK | libc::MSG_DONTWAIT)
}

/// Whether an idle server connection has neither closed nor sent anything, asking the kernel
/// (a non-blocking `MSG_PEEK`) rather than tokio's readiness cache.
pub fn socket_alive(s: std::os::fd::BorrowedFd<'_>) -> bool {
    matches!(peek(s), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Limits of one server's pool (from its `server` line).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `pool-max-conn` (`None` = unlimited, `Some(0)` = no pooling).
    pub max_idle: Option<u32>,
    /// `max-reuse` (`None` = unlimited): requests a connection may carry in all.
    pub max_reuse: Option<u32>,
    /// `pool-low-conn`: below this many idle connections in all threads, a thread connects
    /// rather than taking one from another thread.
    pub low_conn: u32,
}

impl Limits {
    pub fn of(s: &crate::config::Server) -> Limits {
        Limits {
            max_idle: s.pool_max_conn,
            max_reuse: s.max_reuse,
            low_conn: s.pool_low_conn,
        }
    }
}

#[derive(Debug)]
/// The far ends of one thread's idle deques for one server, through which other threads take
/// its connections.
struct Stealers {
    proved: Stealer<IdleConn>,
    fresh: Stealer<IdleConn>,
}

/// One worker thread's share of a server's pool, as other threads and the stats plane see it.
/// Each counter is written by its own thread only (relaxed), so the lines never bounce.
#[derive(Debug, Default)]
pub struct ThreadShelf {
    stealers: OnceLock<Stealers>,
    /// Idle connections this thread holds now, and their peak.
    pub idle: AtomicU32,
    pub idle_max: AtomicU32,
    /// Pooled connections this thread opened, reused from its own pool, and took from others.
    pub new: AtomicU64,
    pub reused: AtomicU64,
    pub takeovers: AtomicU64,
    /// Idle connections this thread closed as dead, expired or surplus, and requests it
    /// replayed after a reused connection failed unanswered.
    pub purged: AtomicU64,
    pub replayed: AtomicU64,
}

/// `shelves` for `nbthread` threads.
pub fn shelves(nbthread: usize) -> Box<[crossbeam_utils::CachePadded<ThreadShelf>]> {
    (0..nbthread).map(|_| Default::default()).collect()
}

struct ServerPool {
    /// Idle connections that carried two or more requests (proved reusable), and those that
    /// carried one. The owner end is LIFO: the most recently used connection is the likeliest
    /// to be alive and warm; thieves take the oldest.
    proved: Deque<IdleConn>,
    fresh: Deque<IdleConn>,
    /// Connections of this thread to the server currently carrying a request.
    used: u32,
    /// Peak of `used` since the last purge.
    max_used: u32,
}

impl ServerPool {
    fn new() -> ServerPool {
        ServerPool {
            proved: Deque::new_lifo(),
            fresh: Deque::new_lifo(),
            used: 0,
            max_used: 0,
        }
    }

    fn len(&self) -> usize {
        self.proved.len() + self.fresh.len()
    }

    fn deque(&self, uses: u32) -> &Deque<IdleConn> {
        if uses >= 2 { &self.proved } else { &self.fresh }
    }

    /// Every idle connection, oldest first, leaving the deques empty.
    fn drain(&self) -> Vec<IdleConn> {
        let mut v = Vec::with_capacity(self.len());
        // Fresh ones first: the purge closes from the front.
        for d in [&self.fresh, &self.proved] {
            let start = v.len();
            while let Some(c) = d.pop() {
                v.push(c);
            }
            v[start..].reverse();
        }
        v
    }

    fn refill(&self, conns: Vec<IdleConn>) {
        for c in conns {
            self.deque(c.uses).push(c);
        }
    }
}

/// The shared idle gauge a connection with `uses` requests behind it counts in.
fn idle_gauge(g: &PoolGauges, uses: u32) -> &AtomicU32 {
    if uses >= 2 { &g.safe } else { &g.idle }
}

/// One worker thread's idle server connections.
pub struct ThreadPool {
    /// This worker's index (its shelf in each server's `PoolGauges::threads`).
    id: usize,
    /// `tune.idle-pool.shared`: whether threads take idle connections from each other.
    shared: bool,
    servers: RefCell<HashMap<Key, ServerPool>>,
    /// The watcher task's waker, once it runs (see `watch`).
    watcher: RefCell<Option<Waker>>,
}

impl Default for ThreadPool {
    fn default() -> Self {
        ThreadPool::new(0, false)
    }
}

impl ThreadPool {
    /// The pool of worker `id`; `shared` is `tune.idle-pool.shared`.
    pub fn new(id: usize, shared: bool) -> ThreadPool {
        ThreadPool {
            id,
            shared,
            servers: RefCell::new(HashMap::default()),
            watcher: RefCell::new(None),
        }
    }

    /// Takes the most recent live idle connection to `key` that has carried at least
    /// `min_uses` requests, from this thread's pool or else, as `pool-low-conn` allows, from
    /// another thread's, and counts it as used. Dead ones met on the way are closed.
    pub fn take(
        &self,
        key: Key,
        min_uses: u32,
        limits: Limits,
        g: &PoolGauges,
        epoch: u32,
        replay_ok: bool,
    ) -> Option<IdleConn> {
        let mut m = self.servers.borrow_mut();
        let sp = self.server(&mut m, key, g);
        let shelf = g.threads.get(self.id);
        let deques: &[&Deque<IdleConn>] = if min_uses >= 2 {
            &[&sp.proved]
        } else {
            &[&sp.proved, &sp.fresh]
        };
        for d in deques {
            while let Some(c) = d.pop() {
                idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
                if let Some(t) = shelf {
                    t.idle.fetch_sub(1, Relaxed);
                }
                if c.epoch != epoch || !c.usable(g, replay_ok) {
                    g.count_purged(self.id, 1);
                    continue;
                }
                if let Some(t) = shelf {
                    t.reused.fetch_add(1, Relaxed);
                }
                sp.used += 1;
                sp.max_used = sp.max_used.max(sp.used);
                g.count_used();
                return Some(c);
            }
        }
        if key.2 != 0 {
            // Only unnamed connections are published for takeover (one far end per thread and
            // server).
            return None;
        }
        let c = self.take_over(min_uses, limits, g, epoch, replay_ok)?;
        if let Some(t) = shelf {
            t.takeovers.fetch_add(1, Relaxed);
        }
        sp.used += 1;
        sp.max_used = sp.max_used.max(sp.used);
        g.count_used();
        Some(c)
    }

    /// Takes an idle connection from another thread, if the server's idle connections in all
    /// threads are at least `pool-low-conn`, moving its socket onto this thread's poller.
    fn take_over(
        &self,
        min_uses: u32,
        limits: Limits,
        g: &PoolGauges,
        epoch: u32,
        replay_ok: bool,
    ) -> Option<IdleConn> {
        let n = g.threads.len();
        if !self.shared || n < 2 {
            return None;
        }
        let total = g.idle.load(Relaxed) + g.safe.load(Relaxed);
        if total == 0 || total < limits.low_conn {
            return None;
        }
        for off in 1..n {
            let t = &g.threads[(self.id + off) % n];
            let Some(st) = t.stealers.get() else { continue };
            let stealers: &[&Stealer<IdleConn>] = if min_uses >= 2 {
                &[&st.proved]
            } else {
                &[&st.proved, &st.fresh]
            };
            for s in stealers {
                loop {
                    let c = match s.steal() {
                        Steal::Success(c) => c,
                        Steal::Retry => continue,
                        Steal::Empty => break,
                    };
                    idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
                    t.idle.fetch_sub(1, Relaxed);
                    // Off the owner's poller, onto this thread's. A failure means the owner's
                    // event loop is gone (shutting down): the connection is dropped.
                    let moved = c.stream.rehome().map(|stream| IdleConn {
                        stream,
                        uses: c.uses,
                        epoch: c.epoch,
                        since: c.since,
                    });
                    match moved {
                        Ok(c) if c.epoch == epoch && c.usable(g, replay_ok) => return Some(c),
                        _ => {
                            g.count_purged(self.id, 1);
                        }
                    }
                }
            }
        }
        None
    }

    /// The pool for `key`, created (and its far ends published for takeover) on first use.
    fn server<'m>(
        &self,
        m: &'m mut HashMap<Key, ServerPool>,
        key: Key,
        g: &PoolGauges,
    ) -> &'m mut ServerPool {
        m.entry(key).or_insert_with(|| {
            let sp = ServerPool::new();
            if key.2 == 0
                && let Some(t) = g.threads.get(self.id)
            {
                let _ = t.stealers.set(Stealers {
                    proved: sp.proved.stealer(),
                    fresh: sp.fresh.stealer(),
                });
            }
            sp
        })
    }

    /// A new connection to `key` starts carrying a request.
    pub fn opened(&self, key: Key, g: &PoolGauges) {
        let mut m = self.servers.borrow_mut();
        let sp = self.server(&mut m, key, g);
        sp.used += 1;
        sp.max_used = sp.max_used.max(sp.used);
        g.count_used();
        if let Some(t) = g.threads.get(self.id) {
            t.new.fetch_add(1, Relaxed);
        }
    }

    /// A connection to `key` stops carrying a request: pooled if `conn` is given and the
    /// limits allow, closed otherwise.
    pub fn release(&self, key: Key, conn: Option<IdleConn>, limits: Limits, g: &PoolGauges) {
        let mut m = self.servers.borrow_mut();
        let sp = self.server(&mut m, key, g);
        sp.used = sp.used.saturating_sub(1);
        g.used.fetch_sub(1, Relaxed);
        let Some(c) = conn else { return };
        if limits.max_reuse.is_some_and(|n| c.uses >= n) {
            return;
        }
        // HAProxy's rule (srv_add_to_idle_list), over all threads: never more idle than
        // `pool-max-conn`; and, unless this thread has no idle connection of its own to the
        // server (then it keeps one, so that threads need not take each other's), idle plus
        // used no more than the most used at once (or used now) plus `pool-low-conn`. That
        // is what keeps `Connection: close` loads from piling up idle connections.
        let own_empty = sp.len() == 0;
        // Counted first, then checked: two threads releasing at once cannot both pass.
        let gauge = idle_gauge(g, c.uses);
        gauge.fetch_add(1, Relaxed);
        let total = g.idle.load(Relaxed) + g.safe.load(Relaxed);
        let over_max = limits.max_idle.is_some_and(|m| total > m);
        let over_need = !own_empty && {
            let used = g.used.load(Relaxed);
            let need = g
                .used_max
                .load(Relaxed)
                .max(g.est_need.load(Relaxed))
                .max(used + 1);
            used + total > need + limits.low_conn
        };
        if over_max || over_need {
            gauge.fetch_sub(1, Relaxed);
            return;
        }
        if let Some(w) = self.watcher.borrow().as_ref()
            && !c.arm(w)
        {
            gauge.fetch_sub(1, Relaxed);
            g.count_purged(self.id, 1);
            return;
        }
        g.idle_max.fetch_max(total, Relaxed);
        if let Some(t) = g.threads.get(self.id) {
            let n = t.idle.fetch_add(1, Relaxed) + 1;
            t.idle_max.fetch_max(n, Relaxed);
        }
        sp.deque(c.uses).push(c);
    }

    /// Closes the idle connections (of server `only`, or all) that `keep` refuses; returns
    /// how many.
    fn sweep<'a>(
        &self,
        only: Option<(usize, usize)>,
        gauges: impl Fn(Key) -> &'a PoolGauges,
        mut keep: impl FnMut(&IdleConn, &PoolGauges) -> bool,
    ) -> usize {
        let m = self.servers.borrow();
        let mut closed = 0;
        for (key, sp) in m.iter() {
            if sp.len() == 0 || only.is_some_and(|k| k != (key.0, key.1)) {
                continue;
            }
            let g = gauges(*key);
            let mut conns = sp.drain();
            let before = conns.len();
            conns.retain(|c| {
                let k = keep(c, g);
                if !k {
                    idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
                }
                k
            });
            let gone = before - conns.len();
            if gone > 0 {
                g.count_purged(self.id, gone as u64);
                if let Some(t) = g.threads.get(self.id) {
                    t.idle.fetch_sub(gone as u32, Relaxed);
                }
            }
            closed += gone;
            sp.refill(conns);
        }
        closed
    }

    /// The watcher: sleeps until an idle connection of this thread becomes readable (the
    /// server closed it, or sent something unsolicited such as a 408), then closes every such
    /// connection at once, instead of letting it wait for the purge or the next request.
    pub async fn watch<'a>(&self, gauges: impl Fn(Key) -> &'a PoolGauges) {
        loop {
            let mut armed = false;
            std::future::poll_fn(|cx| {
                if armed {
                    return Poll::Ready(());
                }
                armed = true;
                *self.watcher.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
            let w = self.watcher.borrow().clone();
            if let Some(w) = w {
                self.sweep(None, &gauges, |c, g| {
                    let ok = c.arm(&w);
                    if !ok {
                        // The server closed it (or spoke) after this long idle: its timeout.
                        g.learn_timeout(c.since.elapsed(), false);
                    }
                    ok
                });
            }
        }
    }

    /// Closes every idle connection to server `key` (`del server`); returns how many.
    pub fn drop_server(&self, key: (usize, usize), g: &PoolGauges) -> usize {
        self.sweep(Some(key), |_| g, |_, _| false)
    }

    /// Closes every idle connection (the thread is ending: its deques' far ends outlive it).
    pub fn clear<'a>(&self, gauges: impl Fn(Key) -> &'a PoolGauges) {
        self.sweep(None, gauges, |_, _| false);
    }

    /// Idle connections now (all servers).
    pub fn idle_count(&self) -> usize {
        self.servers.borrow().values().map(|s| s.len()).sum()
    }

    /// Closes dead idle connections, then half of each server's surplus (idle connections
    /// beyond what the peak use since the last purge needed), and starts a new period.
    /// `gauges` gives each server's shared gauges.
    pub fn purge<'a>(&self, gauges: impl Fn(Key) -> &'a PoolGauges) {
        let mut m = self.servers.borrow_mut();
        for (key, sp) in m.iter_mut() {
            let needed = sp.max_used.saturating_sub(sp.used) as usize;
            sp.max_used = sp.used;
            let g = gauges(*key);
            // A new period for the server-wide estimate too (each thread's purge moves it).
            let peak = g.used_max.swap(g.used.load(Relaxed), Relaxed);
            let est = g.est_need.load(Relaxed);
            g.est_need.store(peak.max(est.midpoint(peak)), Relaxed);
            if sp.len() == 0 {
                continue;
            }
            let mut conns = sp.drain();
            let before = conns.len();
            let window = g.reuse_window();
            conns.retain(|c| {
                let k = c.alive() && window.is_none_or(|w| c.since.elapsed() < w);
                if !k {
                    idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
                }
                k
            });
            let surplus = conns.len().saturating_sub(needed);
            // Oldest first.
            for c in conns.drain(..surplus.div_ceil(2)) {
                idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
            }
            let gone = before - conns.len();
            g.count_purged(self.id, gone as u64);
            if let Some(t) = g.threads.get(self.id) {
                t.idle.fetch_sub(gone as u32, Relaxed);
            }
            sp.refill(conns);
        }
    }
}

/// How often a thread purges its pools: the smallest `pool-purge-delay` of the servers, or
/// `None` when no server pools connections.
pub fn purge_interval(cfg: &crate::config::Config) -> Option<Duration> {
    cfg.proxies
        .iter()
        .filter(|p| p.mode == crate::config::Mode::Http && p.options.http_reuse != HttpReuse::Never)
        .flat_map(|p| p.servers.iter())
        .filter(|s| s.pool_max_conn != Some(0))
        .map(|s| s.pool_purge_delay)
        .min()
}

pub use crate::config::HttpReuse;

#[cfg(test)]
mod tests {
    use super::*;

    /// The gauges of a server, for one worker thread (id 0).
    fn g() -> &'static PoolGauges {
        Box::leak(Box::new(PoolGauges::new(1)))
    }

    const NO_LIMIT: Limits = Limits {
        max_idle: None,
        max_reuse: None,
        low_conn: 0,
    };

    use tokio::net::TcpStream;

    async fn pair(l: &tokio::net::TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    /// A connection to pool, opened at address epoch 0.
    fn idle(stream: TcpStream, uses: u32) -> Option<IdleConn> {
        Some(IdleConn {
            stream: ServerStream::Plain(stream),
            uses,
            epoch: 0,
            since: Instant::now() - Duration::from_secs(1),
        })
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn idle_never_exceeds_peak_use_and_dead_ones_are_skipped() {
        rt().block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let p = ThreadPool::default();
            let gg = g();
            let key = (0, 0, 0);
            // Two connections in use at once, then three released: only two may stay.
            let mut peers = Vec::new();
            let mut conns = Vec::new();
            for _ in 0..3 {
                let (c, s) = pair(&l).await;
                peers.push(s);
                conns.push(c);
            }
            p.opened(key, gg);
            p.opened(key, gg);
            p.release(key, idle(conns.pop().unwrap(), 1), NO_LIMIT, gg);
            p.opened(key, gg);
            p.release(key, idle(conns.pop().unwrap(), 1), NO_LIMIT, gg);
            p.release(key, idle(conns.pop().unwrap(), 1), NO_LIMIT, gg);
            assert_eq!(p.idle_count(), 2);
            // c2 was kept (the thread had none), c1 not (idle + used would have been three for
            // a peak of two), c0 again. The server now closes c2 and c0 (peers 2 and 0):
            // taking finds both dead and closes them.
            peers.remove(2);
            peers.remove(0);
            let c = p.take(key, 1, NO_LIMIT, gg, 0, false);
            assert!(c.is_none());
            assert_eq!(gg.purged(), 2);
            assert_eq!(p.idle_count(), 0);
        });
    }

    #[test]
    fn limits_and_min_uses() {
        rt().block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let p = ThreadPool::default();
            let gg = g();
            let key = (1, 2, 0);
            let (c1, _s1) = pair(&l).await;
            let (c2, _s2) = pair(&l).await;
            p.opened(key, gg);
            p.opened(key, gg);
            let off = Limits {
                max_idle: Some(0),
                ..NO_LIMIT
            };
            p.release(key, idle(c1, 1), off, gg);
            assert_eq!(p.idle_count(), 0, "pool-max-conn 0 disables pooling");
            let worn = Limits {
                max_reuse: Some(3),
                ..NO_LIMIT
            };
            p.release(key, idle(c2, 3), worn, gg);
            assert_eq!(p.idle_count(), 0, "max-reuse reached");
            let (c3, _s3) = pair(&l).await;
            p.opened(key, gg);
            p.release(key, idle(c3, 1), NO_LIMIT, gg);
            assert!(
                p.take(key, 2, NO_LIMIT, gg, 0, false).is_none(),
                "not yet proved reusable"
            );
            let c = p.take(key, 1, NO_LIMIT, gg, 0, false).expect("usable");
            assert_eq!(c.uses, 1);
            assert_eq!(gg.used.load(Relaxed), 1);
        });
    }

    #[test]
    fn purge_closes_half_of_the_surplus() {
        rt().block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let p = ThreadPool::default();
            let gg = g();
            let key = (0, 0, 0);
            let mut keep = Vec::new();
            let mut conns = Vec::new();
            for _ in 0..4 {
                let (c, s) = pair(&l).await;
                keep.push(s);
                conns.push(c);
                p.opened(key, gg);
            }
            for c in conns {
                p.release(key, idle(c, 1), NO_LIMIT, gg);
            }
            assert_eq!(p.idle_count(), 4);
            // Period 1 peaked at 4 in use: nothing is surplus yet.
            p.purge(|_| gg);
            assert_eq!(p.idle_count(), 4);
            // Period 2 used none: all 4 are surplus, half go.
            p.purge(|_| gg);
            assert_eq!(p.idle_count(), 2);
            p.purge(|_| gg);
            assert_eq!(p.idle_count(), 1);
            p.purge(|_| gg);
            assert_eq!(p.idle_count(), 0);
        });
    }

    #[test]
    fn takeover_moves_an_idle_connection_between_threads_above_pool_low_conn() {
        rt().block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let gg: &'static PoolGauges = Box::leak(Box::new(PoolGauges::new(2)));
            let t0 = ThreadPool::new(0, true);
            let t1 = ThreadPool::new(1, true);
            let key = (0, 0, 0);
            let (c, mut peer) = pair(&l).await;
            t0.opened(key, gg);
            t0.release(key, idle(c, 2), NO_LIMIT, gg);
            assert_eq!(gg.threads[0].idle.load(Relaxed), 1);
            // Below `pool-low-conn`: thread 1 connects instead.
            let low = Limits {
                low_conn: 2,
                ..NO_LIMIT
            };
            assert!(t1.take(key, 1, low, gg, 0, false).is_none());
            assert_eq!(gg.takeovers(), 0);
            // At it: thread 1 takes thread 0's connection, and the socket still works.
            let mut c = t1.take(key, 1, NO_LIMIT, gg, 0, false).expect("taken over");
            assert_eq!(c.uses, 2);
            assert_eq!(t0.idle_count(), 0);
            assert_eq!(gg.takeovers(), 1);
            assert_eq!(gg.threads[1].takeovers.load(Relaxed), 1);
            assert_eq!(gg.threads[0].idle.load(Relaxed), 0);
            assert_eq!(gg.safe.load(Relaxed), 0);
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            c.stream.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            peer.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"x");
            // Returned on thread 1, it is thread 1's now.
            t1.release(key, Some(c), NO_LIMIT, gg);
            assert_eq!(t1.idle_count(), 1);
            // With `tune.idle-pool.shared off`, no thread takes another's.
            let t2 = ThreadPool::new(0, false);
            assert!(t2.take(key, 1, NO_LIMIT, gg, 0, false).is_none());
        });
    }

    #[test]
    fn the_watcher_closes_an_idle_connection_the_server_closed() {
        rt().block_on(async {
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                    let gg: &'static PoolGauges = Box::leak(Box::new(PoolGauges::new(1)));
                    let p = std::rc::Rc::new(ThreadPool::new(0, true));
                    {
                        let p = p.clone();
                        tokio::task::spawn_local(async move { p.watch(|_| gg).await });
                    }
                    tokio::task::yield_now().await;
                    let key = (0, 0, 0);
                    let (c, peer) = pair(&l).await;
                    let (c2, _peer2) = pair(&l).await;
                    p.opened(key, gg);
                    p.opened(key, gg);
                    p.release(key, idle(c, 1), NO_LIMIT, gg);
                    p.release(key, idle(c2, 1), NO_LIMIT, gg);
                    assert_eq!(p.idle_count(), 2);
                    drop(peer);
                    // No request and no purge: the watcher alone notices the close.
                    tokio::time::timeout(Duration::from_secs(10), async {
                        while p.idle_count() != 1 {
                            tokio::task::yield_now().await;
                        }
                    })
                    .await
                    .expect("closed idle connection dropped");
                    assert_eq!(gg.purged(), 1);
                    assert_eq!(gg.idle.load(Relaxed), 1);
                    assert_eq!(gg.threads[0].idle.load(Relaxed), 1);
                })
                .await;
        });
    }
}
