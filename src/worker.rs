//! `worker`: the thread-per-core runtime. Each worker is an OS thread (pinned per `cpu-map`)
//! running its own tokio current-thread runtime; every connection it accepts lives and dies on
//! it, so per-connection state is `Rc`/`RefCell` and never locked.
//!
//! It owns thread start-up, the accept loops, and stopping (soft: stop accepting and let
//! in-flight work finish; hard: drop everything). It must not parse protocols.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::{Notify, mpsc, watch};

use crate::backend::Shared;
use crate::listener::{BoundListener, StdListener, has_room, try_admit};
use crate::log::Logger;

/// Process-wide run state, broadcast to every worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunState {
    Running,
    /// SIGUSR1: stop accepting, finish in-flight requests, exit.
    SoftStop,
    /// SIGINT/SIGTERM or `hard-stop-after`: close everything now.
    HardStop,
}

/// A job the control thread runs on a worker (`show sess`, `shutdown sessions`, ...): the
/// only way anything outside a worker reaches its thread-local state.
pub type CtlJob = Box<dyn FnOnce(&Rc<Worker>) + Send>;

/// One live client connection, as `show sess` lists it and `shutdown session(s)` finds it.
pub struct SessEntry {
    pub abort: Option<tokio::task::AbortHandle>,
    /// Frontend index.
    pub fe: usize,
    pub src: Option<std::net::SocketAddr>,
    pub since: std::time::Instant,
    /// (backend, server) of the request in progress, if a server is attached.
    pub srv: Option<(usize, usize)>,
}

/// Per-thread counters for `show activity` (only this thread writes them).
#[derive(Default)]
pub struct Activity {
    pub accepted: Cell<u64>,
}

/// What one worker thread knows; shared by all tasks of the thread through `Rc`.
pub struct Worker {
    pub id: usize,
    pub shared: Arc<Shared>,
    pub log: Logger,
    /// Set once a soft stop began: connections close after their current request.
    pub stopping: Cell<bool>,
    /// Woken when `stopping` becomes true (idle keep-alive connections wait on it).
    pub stop_notify: Notify,
    /// Live client connections on this thread.
    pub active: Cell<usize>,
    idle_notify: Notify,
    /// Background work a soft stop waits for besides connections (the peers' hand-over of
    /// the stick tables to the next process); see [`Hold`].
    holds: Cell<usize>,
    /// Recycled I/O buffers: an idle connection holds none (HAProxy's buffer pools idea), so
    /// 10,000 idle keep-alive clients cost sockets, not 16 KiB each.
    bufs: std::cell::RefCell<Vec<bytes::BytesMut>>,
    /// This thread's idle server connections (DESIGN §4).
    pub pool: crate::pool::ThreadPool,
    /// Live client connections of this thread, for the CLI.
    pub sessions: std::cell::RefCell<slab::Slab<SessEntry>>,
    pub activity: Activity,
    /// When this thread's client TLS handshakes may start (DESIGN §6).
    pub hs: crate::handshake::HandshakeSched,
    /// When this thread's health checks may start: a few per event-loop round, so that
    /// checks falling due in the same timer tick never hold traffic up for more than a few
    /// check starts (DESIGN §5). Never pauses a listener.
    pub check_starts: crate::handshake::HandshakeSched,
}

/// Buffers kept for reuse per thread; beyond this they go back to the allocator.
const BUF_POOL_MAX: usize = 256;

impl Worker {
    /// Records which server session `key` now talks to (`None`: none).
    pub fn session_server(&self, key: usize, srv: Option<(usize, usize)>) {
        if let Some(e) = self.sessions.borrow_mut().get_mut(key) {
            e.srv = srv;
        }
    }

    /// Closes this thread's client connections attached to server `srv` of backend `be`
    /// (`shutdown sessions server`, the stats page's "Kill Sessions").
    pub fn kill_server_sessions(&self, be: usize, srv: usize) {
        // Collected first: aborting must not happen while the registry is borrowed.
        let handles: Vec<_> = self
            .sessions
            .borrow()
            .iter()
            .filter(|(_, e)| e.srv == Some((be, srv)))
            .filter_map(|(_, e)| e.abort.clone())
            .collect();
        for h in handles {
            h.abort();
        }
    }

    /// An empty buffer with at least `size` bytes of capacity.
    pub fn take_buf(&self, size: usize) -> bytes::BytesMut {
        match self.bufs.borrow_mut().pop() {
            Some(mut b) => {
                b.clear();
                b.reserve(size);
                b
            }
            None => bytes::BytesMut::with_capacity(size),
        }
    }

    /// Returns a buffer (its contents are discarded).
    pub fn give_buf(&self, b: bytes::BytesMut) {
        if b.capacity() == 0 {
            return;
        }
        let mut pool = self.bufs.borrow_mut();
        if pool.len() < BUF_POOL_MAX {
            pool.push(b);
        }
    }
}

/// Keeps a soft stop of the thread waiting until dropped (work that must end before the
/// process exits, and is no connection).
pub struct Hold(Rc<Worker>);

impl Hold {
    pub fn new(w: &Rc<Worker>) -> Hold {
        w.holds.set(w.holds.get() + 1);
        Hold(w.clone())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let n = self.0.holds.get() - 1;
        self.0.holds.set(n);
        if n == 0 {
            self.0.idle_notify.notify_waiters();
        }
    }
}

/// Holds one live connection in `Worker::active` and in the session registry.
pub struct ActiveGuard(Rc<Worker>, usize);

impl ActiveGuard {
    pub fn new(w: &Rc<Worker>, key: usize) -> ActiveGuard {
        w.active.set(w.active.get() + 1);
        ActiveGuard(w.clone(), key)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.sessions.borrow_mut().try_remove(self.1);
        let n = self.0.active.get() - 1;
        self.0.active.set(n);
        if n == 0 {
            self.0.idle_notify.notify_waiters();
        }
    }
}

/// Starts one worker thread serving its share of `listeners`.
pub fn spawn(
    id: usize,
    nbthread: usize,
    shared: Arc<Shared>,
    listeners: Vec<(usize, Arc<BoundListener>, StdListener)>,
    cpus: Option<Vec<usize>>,
    mut state: watch::Receiver<RunState>,
    mut ctl: mpsc::UnboundedReceiver<CtlJob>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("sluice-w{id}"))
        .spawn(move || {
            if let Some(cpus) = cpus {
                let mut set = nix::sched::CpuSet::new();
                for c in &cpus {
                    let _ = set.set(*c);
                }
                if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
                    crate::say!(
                        "[WARNING] (sluice) : thread {}: cpu-map {:?} failed: {e}",
                        id + 1,
                        cpus
                    );
                }
            }
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    crate::say!(
                        "[ALERT] (sluice) : thread {}: cannot start event loop: {e}",
                        id + 1
                    );
                    std::process::exit(1);
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let idle_pool_shared = shared.cfg.global.idle_pool_shared;
                let runqueue_depth = shared.cfg.global.runqueue_depth;
                let w = Rc::new(Worker {
                    id,
                    log: Logger::new(&shared.cfg),
                    shared,
                    stopping: Cell::new(false),
                    stop_notify: Notify::new(),
                    active: Cell::new(0),
                    idle_notify: Notify::new(),
                    holds: Cell::new(0),
                    bufs: std::cell::RefCell::new(Vec::new()),
                    pool: crate::pool::ThreadPool::new(id, idle_pool_shared),
                    sessions: std::cell::RefCell::new(slab::Slab::new()),
                    activity: Activity::default(),
                    hs: crate::handshake::HandshakeSched::new(runqueue_depth),
                    check_starts: crate::handshake::HandshakeSched::with_starts(
                        u32::MAX,
                        crate::check::STARTS_PER_ROUND,
                    ),
                });
                {
                    let w = w.clone();
                    tokio::task::spawn_local(async move { w.hs.run_rounds().await });
                }
                {
                    let w = w.clone();
                    tokio::task::spawn_local(async move { w.check_starts.run_rounds().await });
                }
                {
                    let w = w.clone();
                    tokio::task::spawn_local(async move {
                        while let Some(job) = ctl.recv().await {
                            job(&w);
                        }
                    });
                }
                crate::check::spawn_checks(&w, id, nbthread);
                if id == 0 {
                    crate::resolvers::spawn(&w);
                    crate::peers::spawn(&w);
                }
                {
                    let w = w.clone();
                    tokio::task::spawn_local(async move {
                        w.pool.watch(|(b, s, _)| &w.shared.server(b, s).pool).await;
                    });
                }
                if let Some(every) = crate::pool::purge_interval(&w.shared.cfg) {
                    let w = w.clone();
                    tokio::task::spawn_local(async move {
                        let mut tick = tokio::time::interval(every);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            w.pool.purge(|(b, s, _)| &w.shared.server(b, s).pool);
                        }
                    });
                }
                let (accept_stop_tx, accept_stop_rx) = watch::channel(false);
                let mut accept_loops = Vec::new();
                for (pidx, bl, sock) in listeners {
                    let w = w.clone();
                    let rx = accept_stop_rx.clone();
                    accept_loops.push(tokio::task::spawn_local(async move {
                        if let Err(e) = accept_loop(w, pidx, bl, sock, rx).await {
                            crate::say!("[ALERT] (sluice) : accept loop failed: {e}");
                        }
                    }));
                }
                // Wait for a stop request.
                let st = loop {
                    let s = *state.borrow_and_update();
                    if s != RunState::Running {
                        break s;
                    }
                    if state.changed().await.is_err() {
                        break RunState::HardStop;
                    }
                };
                let _ = accept_stop_tx.send(true);
                if st == RunState::SoftStop {
                    // The accept loops end at once, handing over any connection they had
                    // already accepted: only then does "no active connection" mean done.
                    for l in accept_loops {
                        let _ = l.await;
                    }
                    w.stopping.set(true);
                    w.stop_notify.notify_waiters();
                    // Finish in-flight work unless a hard stop arrives meanwhile.
                    loop {
                        let idle = w.idle_notify.notified();
                        tokio::pin!(idle);
                        idle.as_mut().enable();
                        if w.active.get() == 0 && w.holds.get() == 0 {
                            break;
                        }
                        tokio::select! {
                            _ = &mut idle => {}
                            r = state.changed() => {
                                if r.is_err() || *state.borrow() == RunState::HardStop {
                                    break;
                                }
                            }
                        }
                    }
                }
                // Idle server connections outlive the thread in the deques' far ends unless
                // closed here.
                w.pool.clear(|(b, s, _)| &w.shared.server(b, s).pool);
                // Returning drops the LocalSet's tasks: every socket of this thread closes.
            });
            // Tasks still alive (hard stop) are dropped with the LocalSet/runtime here.
            drop(local);
            drop(rt);
        })
}

/// An accept loop's stop signal: one waiter, registered once and polled by the loop's
/// `select!`s only when they are about to sleep, instead of a new
/// `watch::Receiver::changed()` registered and dropped per accepted connection.
struct StopWait {
    rx: watch::Receiver<bool>,
    fut: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    done: bool,
}

impl StopWait {
    fn new(rx: watch::Receiver<bool>) -> StopWait {
        let mut waiter = rx.clone();
        StopWait {
            rx,
            fut: Box::pin(async move {
                // A closed channel means the worker is going away: a stop too.
                let _ = waiter.wait_for(|stop| *stop).await;
            }),
            done: false,
        }
    }

    /// Completes once the stop was requested (at once if it already was).
    async fn wait(&mut self) {
        if !self.done {
            (&mut self.fut).await;
            self.done = true;
        }
    }

    /// Whether the stop was requested, without registering a waiter.
    fn stopped(&self) -> bool {
        self.done || *self.rx.borrow()
    }
}

async fn accept_loop(
    w: Rc<Worker>,
    pidx: usize,
    bl: Arc<BoundListener>,
    sock: StdListener,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    enum L {
        Tcp(tokio::net::TcpListener),
        Unix(tokio::net::UnixListener),
    }
    let l = match sock {
        StdListener::Tcp(t) => L::Tcp(tokio::net::TcpListener::from_std(t)?),
        StdListener::Unix(u) => L::Unix(tokio::net::UnixListener::from_std(u)?),
    };
    let maxaccept = w.shared.cfg.global.maxaccept.max(1);
    let ssl = bl.bind.ssl.is_some();
    let mut burst = 0u32;
    // One stop waiter for the loop's whole life: a fresh `changed()` (and a fresh
    // `conn_freed` waiter) per accepted connection registered and unregistered a waiter
    // under a lock each time, about 1,500 instructions per connection.
    let mut stop = StopWait::new(stop);
    loop {
        // At maxconn, stop accepting: connections wait in the kernel backlog, as in HAProxy.
        while !has_room(&w.shared, pidx, &bl.cur_conns, bl.bind.maxconn) {
            let freed = w.shared.conn_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if has_room(&w.shared, pidx, &bl.cur_conns, bl.bind.maxconn) {
                break;
            }
            tokio::select! {
                _ = &mut freed => {}
                _ = stop.wait() => return Ok(()),
            }
        }
        // tune.runqueue-depth: this thread has a backlog of handshakes to start; new ones
        // wait in the kernel backlog meanwhile (DESIGN §6).
        if ssl {
            tokio::select! {
                _ = w.hs.accept_allowed() => {}
                _ = stop.wait() => return Ok(()),
            }
        }
        // Rate limits reached: leave connections in the backlog until the next second.
        while let Some(d) = crate::listener::rate_wait(&w.shared, pidx, ssl) {
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = stop.wait() => return Ok(()),
            }
        }
        if burst >= maxaccept {
            // tune.maxaccept: let established connections run before taking more.
            burst = 0;
            tokio::task::yield_now().await;
        }
        if stop.stopped() {
            return Ok(());
        }
        // The accept first: when a connection is waiting, the stop waiter is not even polled.
        // A stop requested while this sleeps wakes it; the connection accepted in the same
        // wake-up, if any, is out of the backlog and served.
        let accepted = tokio::select! {
            biased;
            r = async {
                match &l {
                    L::Tcp(t) => t.accept().await.map(|(s, a)| crate::stream::Client::Tcp(s, a)),
                    L::Unix(u) => u.accept().await.map(|(s, _)| crate::stream::Client::Unix(s)),
                }
            } => r,
            _ = stop.wait() => return Ok(()),
        };
        // Another thread may have taken the last place meanwhile: then this connection waits
        // (accepted, unserved) for a place, exactly like one still in the backlog would. If
        // the process stops listening meanwhile, it is served anyway: out of the backlog, no
        // other process (a reload's new one) can take it any more.
        let accepted = match accepted {
            Ok(c) => loop {
                // A waiter costs nothing until enabled: only with no place left is it
                // registered, and the place checked again so that no release is missed.
                let freed = w.shared.conn_freed.notified();
                tokio::pin!(freed);
                let mut admitted = try_admit(&w.shared, pidx, &bl.cur_conns, bl.bind.maxconn);
                if admitted.is_none() {
                    freed.as_mut().enable();
                    admitted = try_admit(&w.shared, pidx, &bl.cur_conns, bl.bind.maxconn);
                }
                if let Some(a) = admitted {
                    // Another thread may have used the second's last place meanwhile: this
                    // connection then waits for the next second, as one in the backlog would.
                    while let Err(d) = crate::listener::rate_take(&w.shared, pidx, ssl) {
                        tokio::select! {
                            _ = tokio::time::sleep(d) => {}
                            _ = stop.wait() => break,
                        }
                    }
                    break Ok((c, a));
                }
                tokio::select! {
                    _ = &mut freed => {}
                    _ = stop.wait() => {
                        let a = crate::listener::admit_anyway(&w.shared, pidx, &bl.cur_conns);
                        break Ok((c, a));
                    }
                }
            },
            Err(e) => Err(e),
        };
        match accepted {
            Ok((client, adm)) => {
                burst += 1;
                w.activity.accepted.set(w.activity.accepted.get() + 1);
                let key = w.sessions.borrow_mut().insert(SessEntry {
                    abort: None,
                    fe: pidx,
                    src: match &client {
                        crate::stream::Client::Tcp(_, a) => Some(*a),
                        crate::stream::Client::Unix(_) => None,
                    },
                    since: std::time::Instant::now(),
                    srv: None,
                });
                let w2 = w.clone();
                let guard = ActiveGuard::new(&w, key);
                let opts = crate::stream::BindOpts {
                    tls: bl.bind.ssl.clone(),
                    accept_proxy: bl.bind.accept_proxy.then(|| bl.bind.label.clone()),
                    proto: bl.bind.proto,
                };
                // Boxed: a session's future is a few KiB, and spawning moves a task's future
                // three times (memcpy of all of it each time); a box moves as a pointer.
                let task = tokio::task::spawn_local(Box::pin(async move {
                    crate::stream::serve(w2, pidx, client, adm, key, opts).await;
                    drop(guard);
                }));
                if let Some(e) = w.sessions.borrow_mut().get_mut(key) {
                    e.abort = Some(task.abort_handle());
                }
            }
            Err(e) => {
                burst = 0;
                // EMFILE/ENFILE/ENOBUFS: back off briefly instead of spinning.
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE)
                        | Some(libc::ENFILE)
                        | Some(libc::ENOBUFS)
                        | Some(libc::ENOMEM)
                ) {
                    crate::say!(
                        "[WARNING] (sluice) : accept(): {e}; pausing this listener for 100ms"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}
