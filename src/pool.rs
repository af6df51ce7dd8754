//! `pool`: idle server connections, kept per worker thread and per server for later requests
//! (DESIGN §4).
//!
//! Owns the idle lists and their limits: never more idle connections for a server than this
//! thread ever used at once since the last purge (HAProxy 2.0's rule against pools that grow
//! with `Connection: close` traffic), `pool-max-conn`, `max-reuse`, and the periodic purge
//! (`pool-purge-delay`) that closes dead connections and half of the surplus. Which request may
//! use which idle connection (`http-reuse`) is decided by the caller, `stream::http`.
//!
//! It must not connect, and nothing here is shared with other threads: a thread's pool is
//! touched only by that thread, without locks. (Cross-thread takeover is not implemented yet.)

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::backend::PoolGauges;
use std::sync::atomic::Ordering::Relaxed;

/// Pool key: backend (proxy index) and server index within it.
pub type Key = (usize, usize);

/// An idle server connection.
pub struct IdleConn {
    pub stream: TcpStream,
    /// Requests it has carried so far (at least 1 once pooled). A connection with 2 or more
    /// has proved that the server keeps it open between requests.
    pub uses: u32,
    /// The server's address generation when it was opened (`set server addr` bumps it: a
    /// connection to the old address is never reused).
    pub epoch: u32,
}

impl IdleConn {
    /// Neither closed nor sent anything since it went idle: an idle server connection that
    /// becomes readable is unusable (EOF, or unsolicited data such as a 408).
    ///
    /// Asks the kernel (a non-blocking `MSG_PEEK`), not tokio's readiness cache, which may not
    /// have seen a FIN that arrived while the thread was busy.
    pub fn alive(&self) -> bool {
        socket_alive(&self.stream)
    }
}

/// Whether an idle server connection has neither closed nor sent anything, asking the kernel
/// (a non-blocking `MSG_PEEK`) rather than tokio's readiness cache.
pub fn socket_alive(s: &TcpStream) -> bool {
    let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    let r = socket2::SockRef::from(s).recv_with_flags(&mut b, libc::MSG_PEEK | libc::MSG_DONTWAIT);
    matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Limits of one server's pool (from its `server` line).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `pool-max-conn` (`None` = unlimited, `Some(0)` = no pooling).
    pub max_idle: Option<u32>,
    /// `max-reuse` (`None` = unlimited): requests a connection may carry in all.
    pub max_reuse: Option<u32>,
}

#[derive(Default)]
struct ServerPool {
    /// LIFO: the most recently used connection is the likeliest to be alive and warm.
    idle: Vec<IdleConn>,
    /// Connections of this thread to the server currently carrying a request.
    used: u32,
    /// Peak of `used` since the last purge.
    max_used: u32,
}

/// The shared idle gauge a connection with `uses` requests behind it counts in.
fn idle_gauge(g: &PoolGauges, uses: u32) -> &std::sync::atomic::AtomicU32 {
    if uses >= 2 { &g.safe } else { &g.idle }
}

/// One worker thread's idle server connections.
#[derive(Default)]
pub struct ThreadPool {
    servers: RefCell<HashMap<Key, ServerPool>>,
}

impl ThreadPool {
    /// Takes the most recent live idle connection to `key` that has carried at least
    /// `min_uses` requests, and counts it as used. Dead ones met on the way are closed.
    pub fn take(&self, key: Key, min_uses: u32, g: &PoolGauges, epoch: u32) -> Option<IdleConn> {
        let mut m = self.servers.borrow_mut();
        let sp = m.get_mut(&key)?;
        let mut i = sp.idle.len();
        while i > 0 {
            i -= 1;
            if sp.idle[i].uses < min_uses {
                continue;
            }
            let c = sp.idle.swap_remove(i);
            idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
            if c.epoch != epoch || !c.alive() {
                g.purged.fetch_add(1, Relaxed);
                i = i.min(sp.idle.len());
                continue;
            }
            sp.used += 1;
            sp.max_used = sp.max_used.max(sp.used);
            g.used.fetch_add(1, Relaxed);
            return Some(c);
        }
        None
    }

    /// A new connection to `key` starts carrying a request.
    pub fn opened(&self, key: Key, g: &PoolGauges) {
        let mut m = self.servers.borrow_mut();
        let sp = m.entry(key).or_default();
        sp.used += 1;
        sp.max_used = sp.max_used.max(sp.used);
        g.used.fetch_add(1, Relaxed);
    }

    /// A connection to `key` stops carrying a request: pooled if `conn` is given and the
    /// limits allow, closed otherwise.
    pub fn release(&self, key: Key, conn: Option<IdleConn>, limits: Limits, g: &PoolGauges) {
        let mut m = self.servers.borrow_mut();
        let sp = m.entry(key).or_default();
        sp.used = sp.used.saturating_sub(1);
        g.used.fetch_sub(1, Relaxed);
        let Some(c) = conn else { return };
        let cap = match limits.max_idle {
            Some(n) => n.min(sp.max_used),
            None => sp.max_used,
        };
        let worn = limits.max_reuse.is_some_and(|n| c.uses >= n);
        if !worn && (sp.idle.len() as u32) < cap {
            idle_gauge(g, c.uses).fetch_add(1, Relaxed);
            sp.idle.push(c);
        }
    }

    /// Closes every idle connection to `key` (`del server`); returns how many.
    pub fn drop_server(&self, key: Key, g: &PoolGauges) -> usize {
        let mut m = self.servers.borrow_mut();
        let Some(sp) = m.get_mut(&key) else { return 0 };
        let n = sp.idle.len();
        for c in sp.idle.drain(..) {
            idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
        }
        g.purged.fetch_add(n as u64, Relaxed);
        if sp.used == 0 {
            m.remove(&key);
        }
        n
    }

    /// Idle connections now (all servers).
    pub fn idle_count(&self) -> usize {
        self.servers.borrow().values().map(|s| s.idle.len()).sum()
    }

    /// Closes dead idle connections, then half of each server's surplus (idle connections
    /// beyond what the peak use since the last purge needed), and starts a new period.
    /// `gauges` gives each server's shared gauges.
    pub fn purge<'a>(&self, gauges: impl Fn(Key) -> &'a PoolGauges) {
        let mut m = self.servers.borrow_mut();
        for (key, sp) in m.iter_mut() {
            let g = gauges(*key);
            let before = sp.idle.len();
            let needed = sp.max_used.saturating_sub(sp.used) as usize;
            let mut kept = Vec::with_capacity(sp.idle.len());
            for c in sp.idle.drain(..) {
                if c.alive() {
                    kept.push(c);
                } else {
                    idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
                }
            }
            let surplus = kept.len().saturating_sub(needed);
            // Oldest first (the front of the LIFO list).
            for c in kept.drain(..surplus.div_ceil(2)) {
                idle_gauge(g, c.uses).fetch_sub(1, Relaxed);
            }
            sp.idle = kept;
            let gone = (before - sp.idle.len()) as u64;
            g.purged.fetch_add(gone, Relaxed);
            sp.max_used = sp.used;
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

    fn g() -> &'static PoolGauges {
        Box::leak(Box::default())
    }

    const NO_LIMIT: Limits = Limits {
        max_idle: None,
        max_reuse: None,
    };

    async fn pair(l: &tokio::net::TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    /// A connection to pool, opened at address epoch 0.
    fn idle(stream: TcpStream, uses: u32) -> Option<IdleConn> {
        Some(IdleConn {
            stream,
            uses,
            epoch: 0,
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
            let key = (0, 0);
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
            // The cap kept c2 and c1 and closed c0. The server now closes c2 and c1 (peers 2
            // and 1): taking finds both dead and closes them.
            peers.truncate(1);
            let c = p.take(key, 1, gg, 0);
            assert!(c.is_none());
            assert_eq!(gg.purged.load(Relaxed), 2);
            assert_eq!(p.idle_count(), 0);
        });
    }

    #[test]
    fn limits_and_min_uses() {
        rt().block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let p = ThreadPool::default();
            let gg = g();
            let key = (1, 2);
            let (c1, _s1) = pair(&l).await;
            let (c2, _s2) = pair(&l).await;
            p.opened(key, gg);
            p.opened(key, gg);
            let off = Limits {
                max_idle: Some(0),
                max_reuse: None,
            };
            p.release(key, idle(c1, 1), off, gg);
            assert_eq!(p.idle_count(), 0, "pool-max-conn 0 disables pooling");
            let worn = Limits {
                max_idle: None,
                max_reuse: Some(3),
            };
            p.release(key, idle(c2, 3), worn, gg);
            assert_eq!(p.idle_count(), 0, "max-reuse reached");
            let (c3, _s3) = pair(&l).await;
            p.opened(key, gg);
            p.release(key, idle(c3, 1), NO_LIMIT, gg);
            assert!(p.take(key, 2, gg, 0).is_none(), "not yet proved reusable");
            let c = p.take(key, 1, gg, 0).expect("usable");
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
            let key = (0, 0);
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
}
