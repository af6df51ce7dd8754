//! `backend`: the run-time state shared by all threads for proxies and servers — connection
//! counts, server weights and states, the pending-request queues, and server selection with
//! `maxconn`/`maxqueue`/`timeout queue`.
//!
//! Everything here is atomics plus one mutex per backend that is taken only when a server is
//! full (queueing) or when a queued request is handed a slot; the common path (a free server)
//! is lock-free. It must not do I/O: connecting is `stream`'s job.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::oneshot;

use crate::config::{Balance, Config, HashMethod, Proxy, Server};
use crate::lb::{self, Candidate, Tables};

/// Per-server run-time state.
#[derive(Debug)]
pub struct ServerState {
    pub name: String,
    /// Current address (`set server addr` may change it later).
    pub addr: ArcSwap<SocketAddr>,
    /// Bumped by each address change, so pooled connections to an old address are dropped.
    pub addr_gen: AtomicU32,
    /// The host name the server resolves (`show servers state` `srv_fqdn`): its configured
    /// name, or for a slot of an SRV record the target of the record it holds (none while
    /// free). Written by the `resolvers` task only.
    pub fqdn: arc_swap::ArcSwapOption<String>,
    pub puid: u32,
    pub backup: bool,
    /// Current user weight.
    pub weight: AtomicU32,
    pub maxconn: AtomicU32,
    pub maxqueue: u32,
    /// Administrative maintenance (`disabled`, `set server ... state maint`).
    pub maint: AtomicBool,
    /// Whether `maint` still comes from `disabled` on the server line (no command changed
    /// the state since): HAProxy reports that as CMAINT rather than forced maintenance.
    pub config_maint: AtomicBool,
    /// Maintenance for want of an address (`init-addr none`): ends when one is set.
    pub rmaint: AtomicBool,
    /// `minconn` with the backend's `fullconn`: a maxconn that grows with the backend's load.
    pub dynamic: DynMaxconn,
    /// Administrative drain (`set server ... state drain`): effective weight 0, no new traffic.
    pub drain: AtomicBool,
    /// Configured weight (`get weight` reports it as "initial").
    pub iweight: u32,
    /// Unix time (seconds) of the last state change (stats `lastchg`).
    pub last_change: AtomicU64,
    /// Highest `queued` seen (stats `qmax`).
    pub max_queued: AtomicU32,
    /// `source ADDR:LOW-HIGH`: the turn of the next connection's port in the range.
    pub source_turn: AtomicU32,
    /// Operational state (health checks); true until checks say otherwise.
    pub up: AtomicBool,
    /// Requests currently being served (HAProxy's `served`, stats `scur`).
    pub served: AtomicU32,
    pub max_served: AtomicU32,
    /// Requests waiting in this server's own queue.
    pub queued: AtomicU32,
    pub counters: Counters,
    /// Connection pool gauges, summed over threads (each thread's pool updates them).
    pub pool: PoolGauges,
    /// Health-check state, for servers with `check`.
    pub check: Option<crate::check::CheckState>,
    /// Observe counters, NOLB, slowstart throttles, agent state (the `check` module's).
    pub health: crate::check::Health,
    /// The `server` line it was built from (or the `add server` command): settings that never
    /// change at run time (pool limits, check port, whether `id` was explicit).
    pub conf: Server,
    /// Removed by `del server`: never picked, shown or found again (its index stays taken).
    pub deleted: AtomicBool,
    /// Latency histograms of the requests this server answered, one block per worker thread.
    pub timers: crate::histogram::Timers,
}

/// HAProxy's dynamic maxconn (`minconn` on the server, `fullconn` on its backend): below
/// `fullconn` backend connections, a server accepts `max(minconn, maxconn * load / fullconn)`
/// at once, so that a lightly loaded backend keeps its servers' queues short.
#[derive(Debug, Default)]
pub struct DynMaxconn {
    /// 0: not dynamic (`maxconn` as is).
    pub minconn: u32,
    pub fullconn: u32,
    /// The backend's load as HAProxy counts it (`beconn`): its requests holding a slot and
    /// those queued (shared with its [`BackendState::cur_conns`] and `queued`).
    pub be_conns: Arc<AtomicU32>,
    pub be_queued: Arc<AtomicU32>,
}

impl DynMaxconn {
    fn limit(&self, maxconn: u32) -> u32 {
        if self.minconn == 0 || maxconn == 0 || self.minconn >= maxconn || self.fullconn == 0 {
            return maxconn;
        }
        let load = self.be_conns.load(Relaxed) + self.be_queued.load(Relaxed);
        if load >= self.fullconn {
            return maxconn;
        }
        let scaled = (u64::from(load) * u64::from(maxconn) / u64::from(self.fullconn)) as u32;
        scaled.max(self.minconn).max(1)
    }
}

/// A server's connection pool state across all threads: what `show pools` and the stats
/// columns `srv_icur`, `idle_conn_cur`, `safe_conn_cur`, `used_conn_cur` show. Written by the
/// worker threads' pools with relaxed atomics only.
#[derive(Debug, Default)]
pub struct PoolGauges {
    /// Idle connections that carried one request so far.
    pub idle: AtomicU32,
    /// Idle connections that carried two or more (proved reusable: HAProxy's "safe").
    pub safe: AtomicU32,
    /// Pooled connections currently carrying a request.
    pub used: AtomicU32,
    /// The most of them in use at once (all threads) since the last purge.
    pub used_max: AtomicU32,
    /// The connections the server is estimated to need: the peak of the last purge period,
    /// decaying by half each period, as HAProxy's `est_need_conns`. Idle plus used stays
    /// under it (plus `pool-low-conn`), which caps pools under `Connection: close` loads.
    pub est_need: AtomicU32,
    /// The most idle connections (idle + safe, all threads) held at once so far.
    pub idle_max: AtomicU32,
    /// The server's idle keep-alive timeout as learned (ms, 0 = unknown): from its
    /// `Keep-Alive: timeout=N` header, or else from the idle time after which it was seen
    /// closing an idle connection. Idle connections are not reused near it.
    pub ka_timeout_ms: AtomicU32,
    /// `ka_timeout_ms` came from the server's own header (observations do not override it).
    pub ka_from_header: AtomicBool,
    /// Each worker thread's share (its idle connections, their far end for takeover, and its
    /// own counters), indexed by worker id.
    pub threads: Box<[crossbeam_utils::CachePadded<crate::pool::ThreadShelf>]>,
}

/// Shortest idle time after which a server's close of an idle connection is taken for its
/// keep-alive timeout (real ones are seconds: nginx 75 s, Apache and Node.js 5 s).
const MIN_OBSERVED_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

impl PoolGauges {
    pub fn new(nbthread: usize) -> PoolGauges {
        PoolGauges {
            threads: crate::pool::shelves(nbthread),
            ..Default::default()
        }
    }

    /// Records the server's idle timeout: said by the server (`from_header`), or observed as
    /// the idle time after which it closed a connection (the latest observation wins, so a
    /// server that is reconfigured is followed; a header value is never overridden by one).
    pub fn learn_timeout(&self, t: std::time::Duration, from_header: bool) {
        let ms = t.as_millis().clamp(1, u32::MAX as u128) as u32;
        if from_header {
            self.ka_from_header.store(true, Relaxed);
        } else if self.ka_from_header.load(Relaxed) || t < MIN_OBSERVED_TIMEOUT {
            // A close that soon after a response is not an idle timeout (a restart, a
            // per-connection request limit): learning it would stop all reuse for good.
            return;
        }
        if self.ka_timeout_ms.load(Relaxed) != ms {
            self.ka_timeout_ms.store(ms, Relaxed);
        }
    }

    /// One more pooled connection carries a request.
    pub fn count_used(&self) {
        let n = self.used.fetch_add(1, Relaxed) + 1;
        self.used_max.fetch_max(n, Relaxed);
    }

    /// Counts `n` idle connections closed by thread `thread`'s pool.
    pub fn count_purged(&self, thread: usize, n: u64) {
        if let Some(t) = self.threads.get(thread) {
            t.purged.fetch_add(n, Relaxed);
        }
    }

    /// Counts a request replayed by thread `thread` after a reused connection failed.
    pub fn count_replayed(&self, thread: usize) {
        if let Some(t) = self.threads.get(thread) {
            t.replayed.fetch_add(1, Relaxed);
        }
    }

    /// A server's totals over its threads: idle connections closed by the purge or found dead
    /// when taken, requests replayed after a reused connection failed unanswered, and idle
    /// connections one thread took over from another's pool.
    pub fn purged(&self) -> u64 {
        self.sum(|t| &t.purged)
    }

    pub fn replayed(&self) -> u64 {
        self.sum(|t| &t.replayed)
    }

    pub fn takeovers(&self) -> u64 {
        self.sum(|t| &t.takeovers)
    }

    fn sum(&self, f: impl Fn(&crate::pool::ThreadShelf) -> &AtomicU64) -> u64 {
        self.threads.iter().map(|t| f(t).load(Relaxed)).sum()
    }

    /// How long a connection may stay idle and still be reused: three quarters of the
    /// learned timeout, so the request never races the server's close (`None`: unknown).
    pub fn reuse_window(&self) -> Option<std::time::Duration> {
        match self.ka_timeout_ms.load(Relaxed) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms as u64 * 3 / 4)),
        }
    }
}

/// Cumulative counters (stats plane reads them). Writers only ever `fetch_add(_, Relaxed)`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Sessions: accepted connections (frontend), requests routed (backend), requests given a
    /// slot (server) — HAProxy's `stot`.
    pub sessions_total: AtomicU64,
    /// HTTP responses by status class: 1xx, 2xx, 3xx, 4xx, 5xx, other (`hrsp_*`).
    pub hrsp: [AtomicU64; 6],
    /// HTTP requests (`req_tot`); for a TCP frontend, sessions (for `CumReq`).
    pub req_total: AtomicU64,
    /// Times a server was picked by the load balancer (`lbtot`).
    pub lbtot: AtomicU64,
    /// Requests denied by rules (`dreq`), `tcp-request content reject` included.
    pub denied_req: AtomicU64,
    /// Responses denied by `http-response deny` (`dresp`).
    pub denied_resp: AtomicU64,
    /// Connections refused by `tcp-request connection reject` (`dcon`).
    pub denied_conn: AtomicU64,
    /// Invalid or timed-out requests (`ereq`).
    pub req_errors: AtomicU64,
    /// Transfers aborted by the client / by the server (`cli_abrt`, `srv_abrt`).
    pub cli_aborts: AtomicU64,
    pub srv_aborts: AtomicU64,
    /// Server connection attempts (`connect`) and reuses of a kept connection (`reuse`).
    pub connects: AtomicU64,
    pub reuses: AtomicU64,
    /// Requests answered by sluice itself: monitor-uri, stats (`intercepted`).
    pub intercepted: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub conn_errors: AtomicU64,
    pub resp_errors: AtomicU64,
    pub retries: AtomicU64,
    /// `http-request cache-use` lookups, and those a stored object answered.
    pub cache_lookups: AtomicU64,
    pub cache_hits: AtomicU64,
    pub redispatches: AtomicU64,
    pub queue_timeouts: AtomicU64,
}

impl Counters {
    /// `clear counters all`: every cumulative counter back to zero.
    pub fn clear(&self) {
        let all = [
            &self.sessions_total,
            &self.req_total,
            &self.lbtot,
            &self.denied_req,
            &self.denied_resp,
            &self.denied_conn,
            &self.req_errors,
            &self.cli_aborts,
            &self.srv_aborts,
            &self.connects,
            &self.reuses,
            &self.intercepted,
            &self.bytes_in,
            &self.bytes_out,
            &self.conn_errors,
            &self.resp_errors,
            &self.retries,
            &self.redispatches,
            &self.queue_timeouts,
        ];
        for c in all.into_iter().chain(&self.hrsp) {
            c.store(0, Relaxed);
        }
    }
}

/// A request waiting for a server slot.
struct Waiter {
    seq: u64,
    /// The server it must go to (hash algorithms), or any server.
    server: Option<usize>,
    tx: oneshot::Sender<usize>,
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    next_seq: u64,
}

/// A backend's servers: the configured ones, then those `add server` appended. Append-only, so
/// the index of a server (what pools, sessions, queues and LB tables hold) never changes and
/// reading needs no lock; `del server` only marks a server deleted.
pub struct Servers(boxcar::Vec<ServerState>);

impl Servers {
    /// Every server in index order, deleted ones included (callers skip `deleted`).
    pub fn iter(&self) -> impl Iterator<Item = &ServerState> {
        self.0.iter().map(|(_, s)| s)
    }

    pub fn len(&self) -> usize {
        self.0.count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live (not deleted) server named `name`, with its index.
    pub fn by_name(&self, name: &str) -> Option<(usize, &ServerState)> {
        self.0
            .iter()
            .find(|(_, s)| s.name == name && !s.deleted.load(Relaxed))
    }
}

impl std::ops::Index<usize> for Servers {
    type Output = ServerState;
    fn index(&self, i: usize) -> &ServerState {
        &self.0[i]
    }
}

/// Per-backend run-time state.
pub struct BackendState {
    pub proxy_idx: usize,
    pub servers: Servers,
    pub balance: Balance,
    pub hash_method: HashMethod,
    /// `option allbackups`.
    allbackups: bool,
    pub active: ArcSwap<Tables>,
    pub backup: ArcSwap<Tables>,
    /// Walks the weighted map for static-rr and the hash algorithms' fallback, and rotates
    /// leastconn's starting point (roundrobin counts its turns in its `Tables`).
    rr_cursor: AtomicU64,
    /// Requests queued at backend or server level (fast check before taking the lock).
    pub queued: Arc<AtomicU32>,
    queue: Mutex<Queue>,
    pub queue_timeout: Option<Duration>,
    pub counters: Counters,
    /// Slots held right now by requests of this backend, and the most ever (`scur`, `smax`);
    /// its servers' dynamic maxconn reads it too.
    pub cur_conns: Arc<AtomicU32>,
    /// `fullconn` in force (0: no server has `minconn`).
    pub fullconn: u32,
    pub max_conns: AtomicU32,
    /// Highest number of requests queued without a server (`qmax`).
    pub max_queued: AtomicU32,
    /// Unix time of the last UP/DOWN change (`lastchg`), seconds spent DOWN before it, and
    /// whether it is DOWN now (no usable server).
    pub last_change: AtomicU64,
    pub down_total: AtomicU64,
    /// The tables no longer match the servers' states and weights (see `tables`).
    tables_dirty: AtomicBool,
    pub down: AtomicBool,
    /// Worker threads: servers added at run time get a histogram block for each.
    nbthread: usize,
}

/// Per-frontend run-time state.
#[derive(Debug, Default)]
pub struct FrontendState {
    /// `rate-limit sessions`.
    pub sess_rate: Option<crate::listener::RateLimit>,
    pub cur_conns: AtomicU32,
    /// Highest `cur_conns` seen (stats `smax`).
    pub max_conns: AtomicU32,
    pub maxconn: AtomicU32,
    pub counters: Counters,
    /// Access-log lines of this frontend (`%lc`; counted only when a format prints it).
    pub log_count: AtomicU64,
}

/// Run-time state of every proxy, indexed like `Config::proxies`.
pub struct ProxyState {
    /// HAProxy's proxy id (`iid`): explicit `id`, else the lowest free number in order.
    pub uuid: u32,
    pub fe: FrontendState,
    pub be: Option<BackendState>,
}

/// Why no server could be picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickError {
    /// No usable server at all (503).
    NoServer,
    /// Waited `timeout queue` (503, termination state `sQ`).
    QueueTimeout,
    /// Every queue is full.
    QueueFull,
}

/// What a request offers to hash-based algorithms.
pub struct PickInput<'a> {
    pub src: Option<IpAddr>,
    pub uri: &'a [u8],
    /// Value of the header named by `balance hdr(NAME)`, if present.
    pub hdr: Option<&'a [u8]>,
    /// The server a persistence cookie names: it is taken (or queued for) instead of
    /// balancing, even when down (`option persist` decided that already).
    pub persist: Option<usize>,
}

/// A held server slot; released (and possibly handed to a queued request) on drop.
pub struct Slot {
    be: Arc<Shared>,
    proxy: usize,
    pub server: usize,
    /// Time spent queued (`%Tw`).
    pub queued: Duration,
    released: bool,
}

/// Everything threads share: the config snapshot and the run-time state built from it.
pub struct Shared {
    pub cfg: Arc<Config>,
    pub proxies: Vec<ProxyState>,
    /// Global `maxconn` in force (`set maxconn global` may lower it, never above `hard_maxconn`).
    pub global_maxconn: AtomicU32,
    /// The maxconn settled at start-up from the configuration and the fd limit.
    pub hard_maxconn: u32,
    pub global_conns: AtomicU32,
    /// Signalled whenever a client connection closes (listeners paused on maxconn wait on it).
    pub conn_freed: tokio::sync::Notify,
    /// `maxconnrate` and `maxsessrate`.
    pub conn_rate: Option<crate::listener::RateLimit>,
    pub sess_rate: Option<crate::listener::RateLimit>,
    /// Connections accepted per second on `ssl` binds: limited by `maxsslrate`, always
    /// measured (`show info` `SslRate`, `MaxSslRate`).
    pub ssl_rate: crate::listener::RateLimit,
    /// When the process started (`show info` uptime).
    pub started: std::time::SystemTime,
    /// Set once a soft stop began (`show info` `Stopping`).
    pub stopping: AtomicBool,
    /// Copies of the listening sockets for a new process (`expose-fd listeners`).
    pub exposed: std::sync::OnceLock<crate::reload::Exposed>,
    /// One job queue per worker thread, set once the workers exist (the CLI's way in).
    pub workers:
        std::sync::OnceLock<Vec<tokio::sync::mpsc::UnboundedSender<crate::worker::CtlJob>>>,
    /// Number of worker threads (per-thread histogram blocks are sized by it).
    pub nbthread: usize,
}

/// Current Unix time in seconds (for `lastchg`-style fields).
pub fn unix_now() -> u64 {
    crate::util::since_epoch().as_secs()
}

impl ServerState {
    /// The local address of a new connection: `source`, with the next port of its range, in
    /// turn per server (a cursor shared by servers would give a server only some ports).
    /// A port still busy towards this server makes that connect fail and be retried.
    pub fn source_now(&self) -> Option<SocketAddr> {
        let mut src = self.conf.source?;
        if let Some(high) = self.conf.source_high {
            let lo = u32::from(src.port());
            let n = u32::from(high) - lo + 1;
            let i = self.source_turn.fetch_add(1, Relaxed) % n;
            src.set_port((lo + i) as u16);
        }
        Some(src)
    }

    pub fn from_config(s: &Server, puid: u32, nbthread: usize, dynamic: DynMaxconn) -> ServerState {
        if s.send_proxy.is_some() {
            crate::send_proxy::IN_USE.store(true, Relaxed);
        }
        ServerState {
            name: s.name.clone(),
            addr: ArcSwap::from_pointee(s.addr),
            addr_gen: AtomicU32::new(0),
            fqdn: arc_swap::ArcSwapOption::from(
                s.resolve
                    .as_ref()
                    .filter(|r| !r.srv_record)
                    .map(|r| std::sync::Arc::new(r.hostname.clone())),
            ),
            puid,
            backup: s.backup,
            weight: AtomicU32::new(s.weight),
            maxconn: AtomicU32::new(s.maxconn),
            maxqueue: s.maxqueue,
            dynamic,
            maint: AtomicBool::new(s.disabled || s.unresolved),
            rmaint: AtomicBool::new(s.unresolved),
            config_maint: AtomicBool::new(s.disabled),
            drain: AtomicBool::new(false),
            pool: PoolGauges::new(nbthread),
            check: s.check.as_ref().map(crate::check::CheckState::new),
            health: crate::check::Health::new(s),
            timers: crate::histogram::Timers::new(nbthread),
            iweight: s.weight,
            last_change: AtomicU64::new(unix_now()),
            max_queued: AtomicU32::new(0),
            source_turn: AtomicU32::new(0),
            up: AtomicBool::new(true),
            served: AtomicU32::new(0),
            max_served: AtomicU32::new(0),
            queued: AtomicU32::new(0),
            counters: Counters::default(),
            conf: s.clone(),
            deleted: AtomicBool::new(false),
        }
    }

    pub fn usable(&self) -> bool {
        !self.maint.load(Relaxed) && self.up.load(Relaxed) && !self.deleted.load(Relaxed)
    }

    /// Effective weight: the user weight, or 0 while draining (admin drain, or NOLB from
    /// `disable-on-404`), scaled down during `slowstart`.
    pub fn eweight(&self) -> u32 {
        if self.drain.load(Relaxed) || self.health.nolb.load(Relaxed) {
            return 0;
        }
        let w = self.weight.load(Relaxed);
        match self.health.ss_w16.load(Relaxed) {
            0 => w,
            k => (w * k).div_ceil(16),
        }
    }

    /// Effective maxconn (0 = unlimited): `maxconn` (or its dynamic share, `minconn`),
    /// scaled down during `slowstart`.
    pub fn eff_maxconn(&self) -> u32 {
        let m = self.dynamic.limit(self.maxconn.load(Relaxed));
        match self.health.ss_pct.load(Relaxed) {
            0 => m,
            _ if m == 0 => 0,
            pct => (m * pct / 100).max(1),
        }
    }

    fn has_room(&self) -> bool {
        let m = self.eff_maxconn();
        m == 0 || self.served.load(SeqCst) < m
    }

    /// Takes a slot if the server is usable and below its maxconn. (Usability is checked here
    /// too: a pick may run on tables a concurrent change has not been rebuilt into yet.)
    fn try_take(&self) -> bool {
        self.usable() && self.take_room()
    }

    /// Takes a slot if the server has room, whatever its state: a request a persistence
    /// cookie sends to a server that is down (`option persist`).
    fn take_room(&self) -> bool {
        if self.deleted.load(Relaxed) {
            return false;
        }
        let m = self.eff_maxconn();
        let mut cur = self.served.load(SeqCst);
        loop {
            if m != 0 && cur >= m {
                return false;
            }
            match self
                .served
                .compare_exchange_weak(cur, cur + 1, SeqCst, SeqCst)
            {
                Ok(_) => {
                    self.max_served.fetch_max(cur + 1, Relaxed);
                    return true;
                }
                Err(c) => cur = c,
            }
        }
    }
}

/// HAProxy's automatic ids: explicit `id`s are kept, the others get the lowest free number in
/// declaration order, starting at 1.
pub fn assign_ids(explicit: &[Option<u32>]) -> Vec<u32> {
    let taken: std::collections::HashSet<u32> = explicit.iter().flatten().copied().collect();
    let mut next = 1;
    explicit
        .iter()
        .map(|e| match e {
            Some(id) => *id,
            None => {
                while taken.contains(&next) {
                    next += 1;
                }
                next += 1;
                next - 1
            }
        })
        .collect()
}

impl BackendState {
    fn from_config(idx: usize, p: &Proxy, nbthread: usize) -> BackendState {
        let ids = assign_ids(&p.servers.iter().map(|s| s.id).collect::<Vec<_>>());
        let servers = Servers(boxcar::Vec::new());
        let cur_conns = Arc::new(AtomicU32::new(0));
        let queued = Arc::new(AtomicU32::new(0));
        for (s, id) in p.servers.iter().zip(ids) {
            let dynamic = DynMaxconn {
                minconn: s.minconn.unwrap_or(0),
                fullconn: p.fullconn.unwrap_or(0),
                be_conns: cur_conns.clone(),
                be_queued: queued.clone(),
            };
            servers
                .0
                .push(ServerState::from_config(s, id, nbthread, dynamic));
        }
        let be = BackendState {
            proxy_idx: idx,
            servers,
            balance: p.balance.clone(),
            hash_method: p.hash_type.method,
            allbackups: p.options.allbackups,
            active: ArcSwap::from_pointee(Tables::default()),
            backup: ArcSwap::from_pointee(Tables::default()),
            rr_cursor: AtomicU64::new(0),
            queued,
            queue: Mutex::new(Queue::default()),
            queue_timeout: p.timeouts.queue.or(p.timeouts.connect),
            counters: Counters::default(),
            cur_conns,
            fullconn: p.fullconn.unwrap_or(0),
            max_conns: AtomicU32::new(0),
            max_queued: AtomicU32::new(0),
            last_change: AtomicU64::new(unix_now()),
            down_total: AtomicU64::new(0),
            tables_dirty: AtomicBool::new(false),
            down: AtomicBool::new(false),
            nbthread,
        };
        be.rebuild_tables();
        be
    }

    /// Recomputes the LB tables from current weights and states. Call after any change.
    pub fn rebuild_tables(&self) {
        let consistent = self.hash_method == HashMethod::Consistent;
        let cand = |backup: bool| -> Vec<Candidate> {
            self.servers
                .iter()
                .enumerate()
                .filter(|(_, s)| s.backup == backup && s.usable())
                .map(|(i, s)| Candidate {
                    idx: i,
                    weight: s.eweight(),
                    puid: s.puid,
                })
                .collect()
        };
        let active = cand(false);
        // Without `option allbackups`, HAProxy uses only the first usable backup.
        let mut b = cand(true);
        if !self.allbackups {
            b.truncate(1);
        }
        let fwrr = self.balance == Balance::RoundRobin;
        let active = Tables::build(&active, consistent, fwrr);
        let b = Tables::build(&b, consistent, fwrr);
        // roundrobin goes on counting turns across rebuilds: restarting the order at each
        // change (a slowstart step, an agent weight) would favour the servers it starts with.
        active.continue_turns(&self.active.load());
        b.continue_turns(&self.backup.load());
        self.active.store(Arc::new(active));
        self.backup.store(Arc::new(b));
        self.note_down();
    }

    /// UP/DOWN bookkeeping for the stats plane (`lastchg`, `downtime`): one pass over the
    /// servers, so it can follow every change at once while the tables are rebuilt lazily.
    fn note_down(&self) {
        let down = !self.servers.iter().any(|s| s.usable());
        if self.down.swap(down, Relaxed) != down {
            let now = unix_now();
            let was = self.last_change.swap(now, Relaxed);
            if !down {
                self.down_total.fetch_add(now.saturating_sub(was), Relaxed);
            }
        }
    }

    /// Usable active servers with a weight (HAProxy's `srv_act`).
    pub fn usable_active(&self) -> usize {
        self.servers
            .iter()
            .filter(|s| !s.backup && s.usable() && s.eweight() > 0)
            .count()
    }

    /// Total seconds this backend has had no usable server.
    pub fn downtime(&self) -> u64 {
        let mut t = self.down_total.load(Relaxed);
        if self.down.load(Relaxed) {
            t += unix_now().saturating_sub(self.last_change.load(Relaxed));
        }
        t
    }

    /// Whether the algorithm accepts any weight at run time (HAProxy's `BE_LB_PROP_DYN`):
    /// static-rr and map-based hashing only take 0% or 100%.
    pub fn dynamic_weights(&self) -> bool {
        match self.balance {
            Balance::StaticRr => false,
            _ if self.balance.hashes_request() => self.hash_method == HashMethod::Consistent,
            _ => true,
        }
    }

    /// Name of the `balance` algorithm as the stats `algo` column shows it.
    pub fn algo_name(&self) -> &'static str {
        match self.balance {
            Balance::RoundRobin => "roundrobin",
            Balance::StaticRr => "static-rr",
            Balance::LeastConn => "leastconn",
            Balance::First => "first",
            Balance::Source => "source",
            Balance::Uri { .. } => "uri",
            Balance::UrlParam { .. } => "url_param",
            Balance::Hdr { .. } => "hdr",
            Balance::Random { .. } => "random",
        }
    }

    /// The tables in force: active servers, or backups when no active server is usable.
    /// Rebuilt here, by the first pick after changes: a burst of state changes (thousands of
    /// servers marked down by their checks at once) costs one rebuild, not one per change.
    /// Picks racing the rebuild on other threads use the previous tables; they still skip
    /// servers that are no longer usable.
    fn tables(&self) -> Arc<Tables> {
        if self.tables_dirty.load(Relaxed) && self.tables_dirty.swap(false, AcqRel) {
            self.rebuild_tables();
        }
        let a = self.active.load_full();
        if !a.is_empty() {
            return a;
        }
        self.backup.load_full()
    }

    fn hash_for(&self, input: &PickInput, ht: &crate::config::HashType) -> Option<u32> {
        Some(match &self.balance {
            Balance::Source => lb::hash_source(ht, input.src?),
            Balance::Uri {
                whole,
                len,
                depth,
                path_only,
            } => lb::hash_key(
                ht,
                lb::uri_hash_input(input.uri, *whole, *len, *depth, *path_only),
            ),
            Balance::UrlParam { name } => {
                lb::hash_key(ht, lb::url_param(input.uri, name.as_bytes())?)
            }
            Balance::Hdr {
                name: _,
                use_domain_only,
            } => {
                // HAProxy hashes the first value of a list (`a, b` -> `a`); an empty one means
                // no hash, and the request is balanced round-robin.
                let v = input.hdr?;
                let v = crate::http::trim_first_element(v);
                if v.is_empty() {
                    return None;
                }
                if *use_domain_only {
                    lb::hash_key(ht, domain_only(v))
                } else {
                    lb::hash_key(ht, v)
                }
            }
            _ => return None,
        })
    }

    /// Chooses a server without taking a slot: `Ok(Some(i))` a deterministic choice (hash),
    /// `Ok(None)` any server with room will do.
    fn preferred(
        &self,
        t: &Tables,
        input: &PickInput,
        ht: &crate::config::HashType,
    ) -> Option<usize> {
        let h = self.hash_for(input, ht)?;
        t.by_hash(h, self.hash_method).map(|s| s as usize)
    }

    /// Picks a server with room and takes its slot, without waiting.
    fn pick_free(&self, t: &Tables, avoid: Option<usize>) -> Option<usize> {
        let ok = |i: usize| Some(i) != avoid || t.servers.len() == 1;
        match &self.balance {
            Balance::First => t
                .servers
                .iter()
                .map(|&i| i as usize)
                .filter(|&i| ok(i) && self.servers[i].eweight() > 0)
                .min_by_key(|&i| self.servers[i].puid)
                .filter(|&i| self.servers[i].try_take())
                .or_else(|| {
                    let mut by_id: Vec<usize> = t.servers.iter().map(|&i| i as usize).collect();
                    by_id.sort_by_key(|&i| self.servers[i].puid);
                    by_id.into_iter().find(|&i| {
                        ok(i) && self.servers[i].eweight() > 0 && self.servers[i].try_take()
                    })
                }),
            Balance::LeastConn => {
                // Lowest served/weight; the cursor rotates the start so ties spread.
                let n = t.servers.len();
                if n == 0 {
                    return None;
                }
                let start = self.rr_cursor.fetch_add(1, Relaxed) as usize;
                let mut best: Option<(u64, usize)> = None;
                for k in 0..n {
                    let i = t.servers[(start + k) % n] as usize;
                    let s = &self.servers[i];
                    let w = s.eweight() as u64;
                    if w == 0 || !ok(i) || !s.has_room() {
                        continue;
                    }
                    // HAProxy's key (fwlc): 0 for an idle server whatever its weight, so
                    // idle servers take turns; weights count once requests are in flight.
                    let served = s.served.load(Relaxed) as u64;
                    let load = if served == 0 {
                        0
                    } else {
                        (served + 1) * 256 / w
                    };
                    if best.is_none_or(|(b, _)| load < b) {
                        best = Some((load, i));
                    }
                }
                let (_, i) = best?;
                if self.servers[i].try_take() {
                    Some(i)
                } else {
                    self.pick_any(t, ok)
                }
            }
            Balance::Random { draws } => {
                if t.map.is_empty() {
                    return None;
                }
                // HAProxy: each draw replaces the choice unless the previous one carries a
                // lower load for its weight (served × other's weight compared); equal loads,
                // idle servers included, go to the later draw.
                let mut best: Option<usize> = None;
                for _ in 0..(*draws).max(1) {
                    let i = t.map[(crate::util::rand_u32() as usize) % t.map.len()] as usize;
                    let s = &self.servers[i];
                    if !ok(i) || !s.has_room() {
                        continue;
                    }
                    best = match best {
                        Some(p)
                            if p != i && {
                                let q = &self.servers[p];
                                s.served.load(Relaxed) as u64 * q.eweight() as u64
                                    > q.served.load(Relaxed) as u64 * s.eweight() as u64
                            } =>
                        {
                            Some(p)
                        }
                        _ => Some(i),
                    };
                }
                match best {
                    Some(i) if self.servers[i].try_take() => Some(i),
                    _ => self.pick_any(t, ok),
                }
            }
            // roundrobin, static-rr, and hash algorithms whose preferred server is full.
            _ => self.pick_any(t, ok),
        }
    }

    /// Walks the weighted map from the round-robin cursor and takes the first server with room.
    fn pick_any(&self, t: &Tables, ok: impl Fn(usize) -> bool) -> Option<usize> {
        if !t.rr.is_empty() {
            // roundrobin: HAProxy's order; servers without room give their turn away.
            let start = t.rr_claim();
            return (0..t.rr.len() as u64)
                .filter_map(|k| t.rr_at(start + k))
                .map(|i| i as usize)
                .find(|&i| ok(i) && self.servers[i].try_take());
        }
        let n = t.map.len();
        if n == 0 {
            return None;
        }
        let start = self.rr_cursor.fetch_add(1, Relaxed) as usize;
        for k in 0..n {
            let i = t.map[(start + k) % n] as usize;
            if ok(i) && self.servers[i].try_take() {
                return Some(i);
            }
        }
        None
    }
}

/// `hdr(NAME) use_domain_only`, as HAProxy walks the value: back from the end to the last
/// dot, then the label before it ("www.example.com:8080" -> "example"); a value without a
/// dot ("localhost:8080", "[::1]:80") is hashed whole.
fn domain_only(v: &[u8]) -> &[u8] {
    let Some(end) = v.iter().rposition(|&c| c == b'.') else {
        return v;
    };
    let start = v[..end]
        .iter()
        .rposition(|&c| c == b'.')
        .map_or(0, |p| p + 1);
    &v[start..end]
}

impl Shared {
    pub fn new(cfg: Arc<Config>, global_maxconn: u32, nbthread: usize) -> Shared {
        // With a `stats socket`, HAProxy's CLI has a proxy of its own, numbered before the
        // others: the first automatic id then goes to it (checked with HAProxy 2.6.12).
        let cli = !cfg.global.stats_sockets.is_empty();
        let ids: Vec<Option<u32>> = std::iter::once(None)
            .filter(|_| cli)
            .chain(cfg.proxies.iter().map(|p| p.id))
            .collect();
        let uuids = assign_ids(&ids).into_iter().skip(usize::from(cli));
        let proxies = cfg
            .proxies
            .iter()
            .enumerate()
            .zip(uuids)
            .map(|((i, p), uuid)| ProxyState {
                uuid,
                fe: FrontendState {
                    maxconn: AtomicU32::new(p.maxconn.unwrap_or(global_maxconn)),
                    sess_rate: p.rate_limit_sessions.map(crate::listener::RateLimit::new),
                    ..Default::default()
                },
                be: p
                    .kind
                    .has_backend()
                    .then(|| BackendState::from_config(i, p, nbthread)),
            })
            .collect();
        let conn_rate = cfg.global.maxconnrate.map(crate::listener::RateLimit::new);
        let sess_rate = cfg.global.maxsessrate.map(crate::listener::RateLimit::new);
        let ssl_rate = cfg.global.maxsslrate.map_or_else(
            crate::listener::RateLimit::counter,
            crate::listener::RateLimit::new,
        );
        Shared {
            cfg,
            proxies,
            global_maxconn: AtomicU32::new(global_maxconn),
            hard_maxconn: global_maxconn,
            global_conns: AtomicU32::new(0),
            conn_freed: tokio::sync::Notify::new(),
            conn_rate,
            sess_rate,
            ssl_rate,
            started: std::time::SystemTime::now(),
            stopping: AtomicBool::new(false),
            exposed: std::sync::OnceLock::new(),
            workers: std::sync::OnceLock::new(),
            nbthread,
        }
    }

    pub fn backend(&self, idx: usize) -> &BackendState {
        self.proxies[idx]
            .be
            .as_ref()
            .expect("config guarantees a backend")
    }

    /// `clear counters all`, on worker `thread`: zeroes that thread's latency histograms of
    /// every server. Only the owning thread may call it (it is their only writer).
    pub fn clear_timers(&self, thread: usize) {
        for be in self.proxies.iter().filter_map(|p| p.be.as_ref()) {
            for s in be.servers.iter() {
                s.timers.clear(thread);
            }
        }
    }

    pub fn server(&self, be: usize, srv: usize) -> &ServerState {
        &self.backend(be).servers[srv]
    }
}

/// Takes a server slot in backend `be_idx`, queueing (up to `timeout queue`) when all eligible
/// servers are full. `avoid` is a server to skip (redispatch after a failed connect).
pub async fn acquire(
    shared: &Arc<Shared>,
    be_idx: usize,
    input: &PickInput<'_>,
    avoid: Option<usize>,
) -> Result<Slot, PickError> {
    let be = shared.backend(be_idx);
    let ht = &shared.cfg.proxies[be_idx].hash_type;
    let t = be.tables();
    let mut persist = input.persist.filter(|_| avoid.is_none());
    // `option persist` to a server that is down: its slot if it has room, else balancing.
    if let Some(p) = persist
        && !be.servers[p].usable()
    {
        if be.servers[p].take_room() {
            be.took_slot(p);
            return Ok(Slot {
                be: shared.clone(),
                proxy: be_idx,
                server: p,
                queued: Duration::ZERO,
                released: false,
            });
        }
        persist = None;
    }
    if t.is_empty() && persist.is_none() {
        return Err(PickError::NoServer);
    }
    let preferred = if persist.is_some() {
        persist
    } else if avoid.is_none() {
        be.preferred(&t, input, ht)
    } else {
        None
    };
    // A slot handed over from the queue was counted by `dispatch_queue`.
    let slot_q = |server: usize, queued| Slot {
        be: shared.clone(),
        proxy: be_idx,
        server,
        queued,
        released: false,
    };
    let slot = |server| {
        be.took_slot(server);
        slot_q(server, Duration::ZERO)
    };
    // Fast path: nobody queued ahead of us and a server has room.
    if be.queued.load(SeqCst) == 0 {
        if let Some(p) = preferred {
            if be.servers[p].try_take() {
                return Ok(slot(p));
            }
        } else if let Some(i) = be.pick_free(&t, avoid) {
            return Ok(slot(i));
        }
    }
    // Slow path: queue in arrival order.
    let (tx, rx) = oneshot::channel();
    let seq;
    {
        let mut q = be.queue.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = preferred {
            let s = &be.servers[p];
            if s.maxqueue != 0 && s.queued.load(SeqCst) >= s.maxqueue {
                drop(q);
                // Server queue full: HAProxy redispatches to another server.
                return match be.pick_free(&t, Some(p)) {
                    Some(i) => Ok(slot(i)),
                    None => Err(PickError::QueueFull),
                };
            }
            let n = s.queued.fetch_add(1, SeqCst) + 1;
            s.max_queued.fetch_max(n, Relaxed);
        }
        let n = be.queued.fetch_add(1, SeqCst) + 1;
        if preferred.is_none() {
            be.max_queued.fetch_max(n, Relaxed);
        }
        // Re-check under the lock: a slot released before we became visible must not be lost.
        let got = if q.waiters.is_empty() {
            match preferred {
                Some(p) => be.servers[p].try_take().then_some(p),
                None => be.pick_free(&t, avoid),
            }
        } else {
            None
        };
        if let Some(i) = got {
            be.queued.fetch_sub(1, SeqCst);
            if let Some(p) = preferred {
                be.servers[p].queued.fetch_sub(1, SeqCst);
            }
            return Ok(slot(i));
        }
        seq = q.next_seq;
        q.next_seq += 1;
        q.waiters.push_back(Waiter {
            seq,
            server: preferred,
            tx,
        });
    }
    let started = std::time::Instant::now();
    let mut rx = rx;
    let res = match be.queue_timeout {
        Some(d) => tokio::time::timeout(d, &mut rx).await.ok(),
        None => Some((&mut rx).await),
    };
    if let Some(Ok(i)) = res {
        return Ok(slot_q(i, started.elapsed()));
    }
    // Timed out: leave the queue, unless a slot was handed to us in the meantime.
    let mut q = be.queue.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pos) = q.waiters.iter().position(|w| w.seq == seq) {
        let w = q.waiters.remove(pos).expect("position is valid");
        be.queued.fetch_sub(1, SeqCst);
        if let Some(p) = w.server {
            be.servers[p].queued.fetch_sub(1, SeqCst);
        }
        be.counters.queue_timeouts.fetch_add(1, Relaxed);
        return Err(PickError::QueueTimeout);
    }
    drop(q);
    // Dequeued just as we gave up: the slot is in the channel and is ours.
    match rx.try_recv() {
        Ok(i) => Ok(slot_q(i, started.elapsed())),
        Err(_) => Err(PickError::QueueTimeout),
    }
}

impl Slot {
    pub fn server_state(&self) -> &ServerState {
        &self.be.backend(self.proxy).servers[self.server]
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        release(&self.be, self.proxy, self.server);
    }
}

/// Frees a slot of `server`, handing it to the oldest queued request that can use it.
fn release(shared: &Arc<Shared>, be_idx: usize, server: usize) {
    let be = shared.backend(be_idx);
    be.servers[server].served.fetch_sub(1, SeqCst);
    be.cur_conns.fetch_sub(1, Relaxed);
    if be.queued.load(SeqCst) == 0 {
        return;
    }
    dispatch_queue(be, Some(server));
}

impl BackendState {
    /// Counts a slot handed to a request (lbtot, stot, current/max sessions).
    fn took_slot(&self, server: usize) {
        let s = &self.servers[server];
        s.counters.lbtot.fetch_add(1, Relaxed);
        s.counters.sessions_total.fetch_add(1, Relaxed);
        self.counters.lbtot.fetch_add(1, Relaxed);
        let n = self.cur_conns.fetch_add(1, Relaxed) + 1;
        self.max_conns.fetch_max(n, Relaxed);
    }

    /// `add server`: appends a server built from `conf` (id: explicit, else the lowest free).
    /// Returns its index. Checks start paused, as HAProxy's (`enable health` starts them).
    pub fn add_server(&self, conf: Server) -> Result<usize, String> {
        if self.servers.by_name(&conf.name).is_some() {
            return Err("Already exists a server with the same name in backend.".into());
        }
        if !self.dynamic_weights() {
            return Err(
                "Backend must use a dynamic load balancing to support dynamic servers.".into(),
            );
        }
        let live = || self.servers.iter().filter(|s| !s.deleted.load(Relaxed));
        let puid = match conf.id {
            Some(id) => {
                if live().any(|s| s.puid == id) {
                    return Err(format!(
                        "The server id {id} is already used by another server."
                    ));
                }
                id
            }
            None => (1..).find(|n| !live().any(|s| s.puid == *n)).unwrap_or(1),
        };
        let dynamic = DynMaxconn {
            minconn: conf.minconn.unwrap_or(0),
            fullconn: self.fullconn,
            be_conns: self.cur_conns.clone(),
            be_queued: self.queued.clone(),
        };
        let st = ServerState::from_config(&conf, puid, self.nbthread, dynamic);
        if let Some(ck) = &st.check {
            ck.enabled.store(false, Relaxed);
        }
        let idx = self.servers.0.push(st);
        self.changed();
        Ok(idx)
    }

    /// `del server`: only a server in maintenance with nothing attached can go (HAProxy's
    /// rule). Idle pooled connections do not count: the caller closes them first.
    pub fn del_server(&self, idx: usize) -> Result<(), &'static str> {
        let s = &self.servers[idx];
        if !s.maint.load(SeqCst) {
            return Err("Only servers in maintenance mode can be deleted.");
        }
        if s.served.load(SeqCst) != 0 || s.queued.load(SeqCst) != 0 || s.pool.used.load(SeqCst) != 0
        {
            return Err("Server still has connections attached to it, cannot remove it.");
        }
        s.deleted.store(true, SeqCst);
        self.changed();
        Ok(())
    }

    /// After a run-time change that may free room (more `maxconn`, a server back from
    /// maintenance, a new weight): rebuild the tables and give queued requests every slot
    /// that is now free.
    pub fn changed(&self) {
        self.tables_dirty.store(true, Release);
        self.note_down();
        while self.queued.load(SeqCst) > 0 {
            let before = self.queued.load(SeqCst);
            dispatch_queue(self, None);
            if self.queued.load(SeqCst) >= before {
                break;
            }
        }
    }
}

/// Hands free slots to queued requests, oldest first. `freed`: the server whose slot was just
/// released (tried first for requests that can go anywhere); `None` = any server.
fn dispatch_queue(be: &BackendState, freed: Option<usize>) {
    let mut q = be.queue.lock().unwrap_or_else(|e| e.into_inner());
    let t = be.tables();
    let mut i = 0;
    while i < q.waiters.len() {
        let mut target = q.waiters[i].server;
        if target.is_some_and(|p| !be.servers[p].usable()) {
            // Its server went into maintenance or down: any server will do (HAProxy moves
            // such requests to the backend queue).
            if let Some(p) = q.waiters[i].server.take() {
                be.servers[p].queued.fetch_sub(1, SeqCst);
            }
            target = None;
        }
        let got = match target {
            Some(p) => be.servers[p].try_take().then_some(p),
            None => match freed {
                Some(f) if be.servers[f].usable() && be.servers[f].try_take() => Some(f),
                _ => be.pick_free(&t, None),
            },
        };
        match got {
            Some(s) => {
                let w = q.waiters.remove(i).expect("index in range");
                be.queued.fetch_sub(1, SeqCst);
                if let Some(p) = w.server {
                    be.servers[p].queued.fetch_sub(1, SeqCst);
                }
                be.took_slot(s);
                if let Err(s) = w.tx.send(s) {
                    // The waiter gave up at the same moment: give the slot back and go on.
                    be.servers[s].served.fetch_sub(1, SeqCst);
                    be.cur_conns.fetch_sub(1, Relaxed);
                    continue;
                }
                // One slot was freed: at most one hand-off is needed, unless the waiter was
                // bound to a different server that happened to have room.
                if freed.is_some() && (target.is_none() || target == freed) {
                    return;
                }
            }
            None => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::assign_ids;

    #[test]
    fn ids_fill_gaps_like_haproxy() {
        assert_eq!(assign_ids(&[None, Some(1), None, None]), vec![2, 1, 3, 4]);
        assert_eq!(assign_ids(&[Some(3), None, None, None]), vec![3, 1, 2, 4]);
    }
}
