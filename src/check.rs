//! `check`: server health (DESIGN §5): TCP connect checks, `option httpchk` with `http-check
//! connect|send|expect` sequences over HTTP/1.x or HTTP/2 (`check-proto`, ALPN; the `h2`
//! crate's client) (`disable-on-404`, `send-state`), `option tcp-check` rule
//! sequences, agent checks, `observe` + `on-error` (traffic errors reported by the data path),
//! `slowstart`, `track`, `on-marked-down|up`, HAProxy's state machine, log lines and the state
//! the stats plane reads.
//!
//! Owns each checked server's check task and agent task (spread over the worker threads at
//! start-up; both tasks of a server live on one thread), and the shared `CheckState` / `Health`
//! atomics. It changes a server's operational state (`ServerState::up`), its NOLB and slowstart
//! throttles, and asks the backend to rebuild its tables. Checks use their own connections:
//! they never take or return a pooled data connection unless `check-reuse-pool` says so (then
//! an HTTP check borrows an idle one from this thread's pool and gives it back if reusable).
//! The data path reaches this module only through [`observe`] / [`observe_txn`] (relaxed
//! atomics, no lock).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::backend::{ServerState, unix_now};
use crate::config::{
    CheckCfg, CheckProto, CheckRule, CheckType, ConnectRule, ExpectKind, ExpectRule, HttpChk,
    HttpSend, Observe, OnError, Proxy, SendData,
};
use crate::worker::Worker;

// =============================================================================================
// Types
// =============================================================================================

/// Checks a thread starts per event-loop round (between two polls of its sockets). A check's
/// start (socket, connect: on loopback the whole TCP handshake) is its most expensive step,
/// and checks fall due in batches of one timer tick (1 ms: 5 per thread at 10,000 servers and
/// `inter 1s`). Four per round, measured against one and two, gave the lowest traffic tails
/// for the least extra CPU (one more poll per four checks); see README, "Health checks".
pub const STARTS_PER_ROUND: u32 = 4;

/// Result codes, as HAProxy names them in `check_status` / `agent_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Not checked yet.
    Ini = 0,
    L4Ok,
    L4Tout,
    L4Con,
    L7Ok,
    L7Tout,
    L7Rsp,
    L7Sts,
    /// `disable-on-404`: a 404 from a server that was up (it goes NOLB).
    L7OkC,
    /// `on-error`: a failure simulated from traffic errors.
    Hana,
    SockErr,
    /// An agent reply without a health word.
    Checked,
    /// TLS checks: the handshake passed (connect-only check), timed out, or failed.
    L6Ok,
    L6Tout,
    L6Rsp,
    /// `option external-check`: the program exited 0, exited otherwise (or could not run),
    /// or outlived `inter`.
    ProcOk,
    ProcErr,
    ProcTout,
}

impl Status {
    /// Every result a finished check can have, in HAProxy's order of check statuses.
    pub const RESULTS: [Status; 16] = [
        Status::Hana,
        Status::SockErr,
        Status::L4Ok,
        Status::L4Tout,
        Status::L4Con,
        Status::L6Ok,
        Status::L6Tout,
        Status::L6Rsp,
        Status::L7Tout,
        Status::L7Rsp,
        Status::L7Ok,
        Status::L7OkC,
        Status::L7Sts,
        Status::ProcErr,
        Status::ProcTout,
        Status::ProcOk,
    ];

    /// The result named by its `check_status` code (`ok-status L6OK`, ...).
    pub fn by_code(code: &str) -> Option<Status> {
        Status::RESULTS.into_iter().find(|s| s.code() == code)
    }

    fn from_u8(v: u8) -> Status {
        match v {
            1 => Status::L4Ok,
            2 => Status::L4Tout,
            3 => Status::L4Con,
            4 => Status::L7Ok,
            5 => Status::L7Tout,
            6 => Status::L7Rsp,
            7 => Status::L7Sts,
            8 => Status::L7OkC,
            9 => Status::Hana,
            10 => Status::SockErr,
            11 => Status::Checked,
            12 => Status::L6Ok,
            13 => Status::L6Tout,
            14 => Status::L6Rsp,
            15 => Status::ProcOk,
            16 => Status::ProcErr,
            17 => Status::ProcTout,
            _ => Status::Ini,
        }
    }

    /// `check_status` column text.
    pub fn code(self) -> &'static str {
        match self {
            Status::Ini => "INI",
            Status::L4Ok => "L4OK",
            Status::L4Tout => "L4TOUT",
            Status::L4Con => "L4CON",
            Status::L7Ok => "L7OK",
            Status::L7Tout => "L7TOUT",
            Status::L7Rsp => "L7RSP",
            Status::L7Sts => "L7STS",
            Status::L7OkC => "L7OKC",
            Status::Hana => "HANA",
            Status::SockErr => "SOCKERR",
            Status::Checked => "CHECKED",
            Status::L6Ok => "L6OK",
            Status::L6Tout => "L6TOUT",
            Status::L6Rsp => "L6RSP",
            Status::ProcOk => "PROCOK",
            Status::ProcErr => "PROCERR",
            Status::ProcTout => "PROCTOUT",
        }
    }

    /// HAProxy's reason text for log lines.
    pub fn reason(self) -> &'static str {
        match self {
            Status::Ini => "Initializing",
            Status::L4Ok => "Layer4 check passed",
            Status::L4Tout => "Layer4 timeout",
            Status::L4Con => "Layer4 connection problem",
            Status::L7Ok => "Layer7 check passed",
            Status::L7Tout => "Layer7 timeout",
            Status::L7Rsp => "Layer7 invalid response",
            Status::L7Sts => "Layer7 wrong status",
            Status::L7OkC => "Layer7 check conditionally passed",
            Status::Hana => "Health analyze",
            Status::SockErr => "Socket error",
            Status::Checked => "No status change",
            Status::L6Ok => "Layer6 check passed",
            Status::L6Tout => "Layer6 timeout",
            Status::L6Rsp => "Layer6 invalid response",
            Status::ProcOk => "External check passed",
            Status::ProcErr => "External check error",
            Status::ProcTout => "External check timeout",
        }
    }

    fn ok(self) -> bool {
        matches!(
            self,
            Status::L4Ok | Status::L6Ok | Status::L7Ok | Status::L7OkC | Status::ProcOk
        )
    }

    /// HAProxy prints `, code: N` for these (its `HCHK_STATUS_L57DATA` and above).
    fn has_code(self) -> bool {
        matches!(
            self,
            Status::L7Ok
                | Status::L7OkC
                | Status::L7Sts
                | Status::ProcOk
                | Status::ProcErr
                | Status::ProcTout
        )
    }

    /// HAProxy's numeric `HCHK_STATUS_*` value (`show servers state`'s `srv_check_status`).
    pub fn haproxy_code(self) -> u32 {
        match self {
            Status::Ini => 1,
            Status::Checked => 3,
            Status::Hana => 4,
            Status::SockErr => 5,
            Status::L4Ok => 6,
            Status::L4Tout => 7,
            Status::L4Con => 8,
            Status::L6Ok => 9,
            Status::L6Tout => 10,
            Status::L6Rsp => 11,
            Status::L7Tout => 12,
            Status::L7Rsp => 13,
            Status::L7Ok => 15,
            Status::L7OkC => 16,
            Status::L7Sts => 17,
            Status::ProcErr => 18,
            Status::ProcTout => 19,
            Status::ProcOk => 20,
        }
    }

    /// HAProxy's `CHK_RES_*`: 0 unknown, 1 neutral, 2 failed, 3 passed, 4 conditionally passed.
    pub fn result_code(self) -> u32 {
        match self {
            Status::Ini => 0,
            Status::Checked => 1,
            Status::L7OkC => 4,
            s if s.ok() => 3,
            _ => 2,
        }
    }
}

/// A checked server's state, shared with the stats plane (relaxed atomics).
#[derive(Debug)]
pub struct CheckState {
    pub rise: u32,
    pub fall: u32,
    /// HAProxy's health counter, 0 ..= rise + fall - 1; the server is up when it is >= rise.
    pub health: AtomicU32,
    status: AtomicU8,
    /// HTTP status of the last HTTP check (0 = none).
    pub last_code: AtomicU32,
    pub last_duration_ms: AtomicU64,
    /// Failed checks (`chkfail`) and UP -> DOWN transitions (`chkdown`).
    pub failed: AtomicU64,
    pub downs: AtomicU64,
    /// `disable health` stops the checks (their health is set to UP) until `enable health`.
    pub enabled: AtomicBool,
    /// Where checks go: `addr` and `port`, as changed at run time by `set server ...
    /// check-addr|check-port`; `target_gen` counts the changes so that the check task copies
    /// them only when they change.
    target: Mutex<(Option<std::net::IpAddr>, Option<u16>)>,
    target_gen: AtomicU32,
    /// How long every check took (the exporter's `haproxy_server_check_time_seconds`).
    pub durations: crate::histogram::Histogram,
    /// The last result's info text (`check_desc`). Written once per check, never by traffic.
    desc: Mutex<String>,
}

/// The agent's view of a server (`agent-check`), shared with the stats plane. Its health is
/// separate from the checks' (a server is UP only when both allow it); as in HAProxy, its rise
/// and fall are 1, so one flag holds it.
#[derive(Debug)]
pub struct AgentState {
    /// The agent's last health word: `up` (true) or `down|stopped|fail` (false), or as forced
    /// by `set server ... agent up|down`.
    pub up: AtomicBool,
    /// `disable agent` stops the agent checks (the agent then no longer holds the server
    /// down) until `enable agent`.
    pub enabled: AtomicBool,
    /// Where the agent is and what it is sent, as changed at run time (`set server ...
    /// agent-addr|agent-port|agent-send`).
    target: Mutex<AgentTarget>,
    status: AtomicU8,
    pub last_duration_ms: AtomicU64,
    desc: Mutex<String>,
}

/// Per-server health bookkeeping that does not need `check`: traffic observation, NOLB,
/// slowstart throttles, the agent. Lives in every `ServerState`.
#[derive(Debug, Default)]
pub struct Health {
    /// Consecutive errors seen by the data path (`observe`).
    pub errors: AtomicU32,
    /// The last one (an `Observed` as u8), for the log text.
    last_error: AtomicU8,
    /// Set by the data path when `errors` reaches `error-limit`; the check task acts on it.
    hana_pending: AtomicBool,
    /// Times `on-error` fired (`hanafail`).
    pub failed_hana: AtomicU64,
    /// Wakes the check task early (traffic errors).
    wake: tokio::sync::Notify,
    /// The 2.7 fix: the next check comes after `fastinter` even at full health.
    fastinter_once: AtomicBool,
    /// `disable-on-404` put the server in NOLB (stopping): effective weight 0.
    pub nolb: AtomicBool,
    /// Slowstart: the weight factor in 16ths (0 = not throttled) and the maxconn percentage.
    pub ss_w16: AtomicU32,
    pub ss_pct: AtomicU32,
    pub agent: Option<AgentState>,
}

/// What the data path saw on a server (HAProxy's `HANA_STATUS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Observed {
    L4Ok = 1,
    L4Err,
    HttpOk,
    HttpSts,
    HttpRsp,
    ReadTimeout,
    BrokenPipe,
}

impl Observed {
    fn from_u8(v: u8) -> Observed {
        match v {
            1 => Observed::L4Ok,
            2 => Observed::L4Err,
            3 => Observed::HttpOk,
            4 => Observed::HttpSts,
            5 => Observed::HttpRsp,
            6 => Observed::ReadTimeout,
            _ => Observed::BrokenPipe,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Observed::L4Ok => "L4 successful connection",
            Observed::L4Err => "L4 unsuccessful connection",
            Observed::HttpOk => "Correct http response",
            Observed::HttpSts => "Wrong http response",
            Observed::HttpRsp => "Invalid http response",
            Observed::ReadTimeout => "Read timeout (http)",
            Observed::BrokenPipe => "Close from server (http)",
        }
    }

    /// HAProxy's table: `Some(true)` an error, `Some(false)` a success, `None` ignored.
    fn verdict(self, mode: Observe) -> Option<bool> {
        match (self, mode) {
            (Observed::L4Ok, Observe::Layer4) => Some(false),
            (Observed::L4Ok, Observe::Layer7) => None,
            (Observed::L4Err, _) => Some(true),
            (_, Observe::Layer4) => None,
            (Observed::HttpOk, Observe::Layer7) => Some(false),
            (_, Observe::Layer7) => Some(true),
        }
    }
}

/// One check's outcome.
struct Outcome {
    status: Status,
    code: u16,
    desc: String,
}

impl Outcome {
    fn new(status: Status, code: u16, desc: impl Into<String>) -> Outcome {
        Outcome {
            status,
            code,
            desc: desc.into(),
        }
    }
}

/// What changed a server's operational state (for the log line).
enum Why<'a> {
    Check {
        status: Status,
        code: u16,
        desc: &'a str,
        ms: Option<u64>,
        /// `option log-health-checks` logged the check itself: the state line then gives no
        /// reason, as in HAProxy.
        logged: bool,
    },
    /// `track`: the state of `be/srv`.
    Via(&'a str),
    /// A command on the CLI or the stats page.
    Cli,
}

/// Reads at most this much of a check response (HAProxy reads one buffer).
const MAX_READ: usize = 16384;

// =============================================================================================
// Shared state
// =============================================================================================

impl CheckState {
    pub fn new(c: &CheckCfg) -> CheckState {
        CheckState {
            rise: c.rise,
            fall: c.fall,
            // As HAProxy: up at start-up, but down at the first failure.
            health: AtomicU32::new(c.rise),
            status: AtomicU8::new(Status::Ini as u8),
            last_code: AtomicU32::new(0),
            last_duration_ms: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            downs: AtomicU64::new(0),
            enabled: AtomicBool::new(true),
            target: Mutex::new((c.addr, c.port)),
            target_gen: AtomicU32::new(0),
            durations: crate::histogram::Histogram::default(),
            desc: Mutex::new(String::new()),
        }
    }

    /// The check's address and port now (`None`: the server's).
    pub fn target(&self) -> (Option<std::net::IpAddr>, Option<u16>) {
        self.target.lock().map(|t| *t).unwrap_or_default()
    }

    /// `set server ... check-addr|check-port`: the next checks go there.
    pub fn set_target(&self, addr: Option<Option<std::net::IpAddr>>, port: Option<u16>) {
        if let Ok(mut t) = self.target.lock() {
            if let Some(a) = addr {
                t.0 = a;
            }
            if port.is_some() {
                t.1 = port;
            }
        }
        self.target_gen.fetch_add(1, Relaxed);
    }

    pub fn status(&self) -> Status {
        Status::from_u8(self.status.load(Relaxed))
    }

    /// `check_desc`: the last result's info text.
    pub fn desc(&self) -> String {
        self.desc.lock().map(|d| d.clone()).unwrap_or_default()
    }

    fn up(&self) -> bool {
        self.health.load(Relaxed) >= self.rise
    }

    /// The stats `status` text: `UP`, `DOWN`, or a transition such as `UP 1/3`/`DOWN 1/2`.
    pub fn status_text(&self) -> String {
        let h = self.health.load(Relaxed);
        let (rise, fall) = (self.rise, self.fall);
        if h >= rise {
            let full = rise + fall - 1;
            if h == full {
                "UP".into()
            } else {
                format!("UP {}/{}", h - rise + 1, fall)
            }
        } else if h == 0 {
            "DOWN".into()
        } else {
            format!("DOWN {h}/{rise}")
        }
    }
}

/// The run-time part of an agent's settings.
#[derive(Debug, Clone)]
pub struct AgentTarget {
    pub addr: Option<std::net::IpAddr>,
    pub port: u16,
    pub send: Option<String>,
}

impl AgentState {
    fn new(c: &crate::config::AgentCfg) -> AgentState {
        AgentState {
            up: AtomicBool::new(true),
            enabled: AtomicBool::new(true),
            target: Mutex::new(AgentTarget {
                addr: c.addr,
                port: c.port,
                send: c.send.clone(),
            }),
            status: AtomicU8::new(Status::Ini as u8),
            last_duration_ms: AtomicU64::new(0),
            desc: Mutex::new(String::new()),
        }
    }

    pub fn status(&self) -> Status {
        Status::from_u8(self.status.load(Relaxed))
    }

    pub fn desc(&self) -> String {
        self.desc.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// The agent's address, port and send string now.
    pub fn target(&self) -> Option<AgentTarget> {
        self.target.lock().ok().map(|t| t.clone())
    }

    /// Changes the agent's address, port or send string for its next checks.
    pub fn set_target(&self, f: impl FnOnce(&mut AgentTarget)) {
        if let Ok(mut t) = self.target.lock() {
            f(&mut t);
        }
    }
}

impl Health {
    pub fn new(s: &crate::config::Server) -> Health {
        Health {
            agent: s.health.agent.as_ref().map(AgentState::new),
            ..Health::default()
        }
    }

    /// The slowstart throttle (`throttle` column), when ramping.
    pub fn throttle(&self) -> Option<u32> {
        match self.ss_pct.load(Relaxed) {
            0 => None,
            p => Some(p),
        }
    }
}

// =============================================================================================
// The data path's seam: `observe`
// =============================================================================================

/// Reports what traffic saw on server `srv`: a relaxed load when `observe` is off; a relaxed
/// add (or a store on a success after errors) when on; at `error-limit` errors, one flag swap
/// and a wake of the check task, which applies `on-error`.
#[inline]
pub fn observe(srv: &ServerState, ev: Observed) {
    let Some(mode) = srv.conf.health.observe else {
        return;
    };
    let Some(error) = ev.verdict(mode) else {
        return;
    };
    let h = &srv.health;
    if !error {
        if h.errors.load(Relaxed) != 0 {
            h.errors.store(0, Relaxed);
        }
        return;
    }
    let n = h.errors.fetch_add(1, Relaxed) + 1;
    h.last_error.store(ev as u8, Relaxed);
    if n >= srv.conf.health.error_limit && !h.hana_pending.swap(true, Relaxed) {
        h.wake.notify_one();
    }
}

/// An HTTP transaction's end as the data path accounts it: the status from the server, or the
/// termination state when the server failed before its response head (`SH`, `sH`).
#[inline]
pub fn observe_txn(srv: &ServerState, from_server: bool, status: i32, term: [u8; 2]) {
    if srv.conf.health.observe != Some(Observe::Layer7) {
        return;
    }
    let ev = if from_server {
        // HAProxy: 5xx are errors, except 501 and 505 (the server's own choice).
        if (100..500).contains(&status) || status == 501 || status == 505 {
            Observed::HttpOk
        } else {
            Observed::HttpSts
        }
    } else {
        match term {
            [b'S', b'H'] => Observed::HttpRsp,
            [b's', b'H'] => Observed::ReadTimeout,
            [b'S', b'D'] => Observed::BrokenPipe,
            _ => return,
        }
    };
    observe(srv, ev);
}

// =============================================================================================
// Scheduling
// =============================================================================================

/// Starts the check and agent tasks of the servers this worker thread owns: checked servers
/// are dealt round-robin over threads, and each first check is spread over its interval so
/// that thousands of servers do not all connect at once.
pub fn spawn_checks(w: &Rc<Worker>, thread: usize, nbthread: usize) {
    let shared = w.shared.clone();
    let g = &shared.cfg.global.checks;
    // HAProxy spreads first checks over the smallest interval of all (at most
    // `max-spread-checks`), in declaration order.
    let servers = || {
        shared
            .cfg
            .proxies
            .iter()
            .flat_map(|p| p.servers.iter())
            .filter(|s| s.check.is_some() || s.health.agent.is_some())
    };
    let total = servers().count().max(1) as u32;
    let mininter = servers()
        .flat_map(|s| {
            s.check
                .as_ref()
                .map(|c| c.inter)
                .into_iter()
                .chain(s.health.agent.as_ref().map(|a| a.inter))
        })
        .min()
        .unwrap_or(Duration::from_secs(2));
    let window = g.max_spread.map_or(mininter, |m| m.min(mininter));
    let mut n = 0u32;
    for (pi, p) in shared.cfg.proxies.iter().enumerate() {
        for (si, s) in p.servers.iter().enumerate() {
            if s.check.is_none() && s.health.agent.is_none() {
                continue;
            }
            let offset = window * n / total;
            let mine = n as usize % nbthread == thread;
            n += 1;
            if !mine {
                continue;
            }
            if let Some(cfg) = s.check.clone() {
                load(thread).fetch_add(1, Relaxed);
                let w = w.clone();
                tokio::task::spawn_local(async move {
                    run(w, pi, si, cfg, offset, false).await;
                });
            }
            if s.health.agent.is_some() {
                tokio::task::spawn_local(run_agent(w.clone(), pi, si, offset));
            }
        }
    }
}

/// Starts the checks of a server added at run time (`add server ... check`) on this thread.
pub fn spawn_one(w: &Rc<Worker>, pi: usize, si: usize, cfg: CheckCfg) {
    load(w.id).fetch_add(1, Relaxed);
    tokio::task::spawn_local(run(w.clone(), pi, si, cfg, Duration::ZERO, false));
}

/// The check task of one server: sleeps until the next check is due (or the data path reports
/// `error-limit` errors), runs it, and applies the result.
async fn run(
    w: Rc<Worker>,
    pi: usize,
    si: usize,
    mut cfg: CheckCfg,
    first: Duration,
    mut migrated: bool,
) {
    let shared = w.shared.clone();
    let p = &shared.cfg.proxies[pi];
    let srv = shared.server(pi, si);
    let Some(st) = srv.check.as_ref() else { return };
    // The generation of the check address and port copied into `cfg` (`u32::MAX`: none yet).
    let mut target_gen = u32::MAX;
    let h = &srv.health;
    let spread = shared.cfg.global.checks.spread;
    let mut due = tokio::time::Instant::now() + first;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = h.wake.notified() => {
                if h.hana_pending.swap(false, Relaxed) {
                    on_traffic_errors(&w, p, pi, si);
                    // The next check comes after `fastinter` at the latest.
                    due = due.min(tokio::time::Instant::now() + cfg.fastinter);
                    h.fastinter_once.store(false, Relaxed);
                }
                continue;
            }
        }
        if w.stopping.get() || srv.deleted.load(Relaxed) {
            load(w.id).fetch_sub(1, Relaxed);
            return;
        }
        // Paused, or nothing to check yet (`init-addr none`, no address set).
        if !st.enabled.load(Relaxed) || srv.rmaint.load(Relaxed) {
            due = tokio::time::Instant::now() + cfg.inter;
            continue;
        }
        // At most one migration per wake-up, and never right after one (no bouncing).
        if !migrated && let Some(to) = migration_target(&w) {
            let c2 = cfg.clone();
            let job: crate::worker::CtlJob = Box::new(move |w2| {
                tokio::task::spawn_local(run(w2.clone(), pi, si, c2, Duration::ZERO, true));
            });
            if let Some(tx) = shared.workers.get().and_then(|ws| ws.get(to)) {
                load(to).fetch_add(1, Relaxed);
                if tx.send(job).is_ok() {
                    load(w.id).fetch_sub(1, Relaxed);
                    MIGRATED[w.id % MIGRATED.len()].fetch_add(1, Relaxed);
                    return;
                }
                // That worker is gone (stopping): keep running here.
                load(to).fetch_sub(1, Relaxed);
            }
        }
        migrated = false;
        // `set server ... check-addr|check-port` since the last check: one relaxed load when
        // nothing changed.
        let g = st.target_gen.load(Relaxed);
        if g != target_gen {
            target_gen = g;
            (cfg.addr, cfg.port) = st.target();
        }
        let start = Instant::now();
        let out = {
            // `tune.max-checks-per-thread`: wait for a slot in this thread's FIFO.
            let _slot = CheckSlot::take(shared.cfg.global.checks.max_per_thread).await;
            // At most STARTS_PER_ROUND check starts per event-loop round: checks that fell
            // due in the same timer tick start a few at a time, with the thread's sockets
            // polled in between.
            w.check_starts.turn().await;
            // Boxed: the running check's state lives on the heap only while it runs, so a
            // sleeping check task stays small.
            Box::pin(check_once(&w, p, (pi, si), srv, &cfg)).await
        };
        let took = start.elapsed();
        let ms = took.as_millis() as u64;
        st.durations.record(took);
        apply_result(&w, p, pi, si, out, ms);
        due = tokio::time::Instant::now() + jitter(next_interval(st, h, &cfg), spread);
    }
}

/// `spread-checks N`: HAProxy's random variation of each interval, within +/- N%.
fn jitter(d: Duration, pct: u32) -> Duration {
    if pct == 0 {
        return d;
    }
    let rv = d.as_secs_f64() * pct as f64 / 100.0;
    let r = crate::util::rand_u32() as f64 / u32::MAX as f64;
    Duration::from_secs_f64((d.as_secs_f64() + rv * (1.0 - 2.0 * r)).max(0.001))
}

/// Check load per worker thread: check tasks it owns (what migration compares).
static LOADS: [AtomicU32; 256] = [const { AtomicU32::new(0) }; 256];

/// Check tasks each worker thread handed to another one (migrations out of it).
static MIGRATED: [AtomicU64; 256] = [const { AtomicU64::new(0) }; 256];

fn load(thread: usize) -> &'static AtomicU32 {
    &LOADS[thread % LOADS.len()]
}

/// Per worker thread: the check tasks it owns and how many it migrated away (`show
/// activity`).
pub fn thread_loads(nbthread: usize) -> Vec<(u32, u64)> {
    (0..nbthread)
        .map(|t| {
            (
                load(t).load(Relaxed),
                MIGRATED[t % MIGRATED.len()].load(Relaxed),
            )
        })
        .collect()
}

/// DESIGN §5: a waking check moves to one random other thread whose check load is under half
/// of this thread's.
fn migration_target(w: &Worker) -> Option<usize> {
    let n = w.shared.nbthread;
    if n < 2 {
        return None;
    }
    let k = crate::util::rand_u32() as usize % (n - 1);
    let other = if k >= w.id { k + 1 } else { k };
    should_migrate(load(w.id).load(Relaxed), load(other).load(Relaxed)).then_some(other)
}

/// `other` is under half of `mine` even once it has this check (so the check cannot bounce
/// back at its next wake-up).
fn should_migrate(mine: u32, other: u32) -> bool {
    2 * (other + 1) <= mine
}

thread_local! {
    /// This thread's running checks and the FIFO of those waiting for a slot.
    static LIMITER: std::cell::RefCell<(u32, std::collections::VecDeque<tokio::sync::oneshot::Sender<()>>)> =
        const { std::cell::RefCell::new((0, std::collections::VecDeque::new())) };
}

/// A running check's place under `tune.max-checks-per-thread`; handed to the oldest waiter
/// when dropped.
struct CheckSlot(bool);

impl CheckSlot {
    async fn take(max: u32) -> CheckSlot {
        if max == 0 {
            return CheckSlot(false);
        }
        let rx = LIMITER.with(|l| {
            let mut l = l.borrow_mut();
            if l.0 < max {
                l.0 += 1;
                None
            } else {
                let (tx, rx) = tokio::sync::oneshot::channel();
                l.1.push_back(tx);
                Some(rx)
            }
        });
        if let Some(rx) = rx {
            // The slot of a finishing check is handed over as is (the count stays).
            let _ = rx.await;
        }
        CheckSlot(true)
    }
}

impl Drop for CheckSlot {
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        LIMITER.with(|l| {
            let mut l = l.borrow_mut();
            while let Some(tx) = l.1.pop_front() {
                if tx.send(()).is_ok() {
                    return;
                }
            }
            l.0 -= 1;
        });
    }
}

/// HAProxy's `srv_getinter`: `inter` at full health, `downinter` when down, `fastinter` in
/// between — and `fastinter` once after traffic errors even at full health (HAProxy 2.7 fix).
fn next_interval(st: &CheckState, h: &Health, cfg: &CheckCfg) -> Duration {
    let hv = st.health.load(Relaxed);
    if h.fastinter_once.swap(false, Relaxed) {
        cfg.fastinter
    } else if hv == st.rise + st.fall - 1 {
        cfg.inter
    } else if hv == 0 {
        cfg.downinter
    } else {
        cfg.fastinter
    }
}

// =============================================================================================
// Results and state changes
// =============================================================================================

/// Records a check's outcome, updates the health counter and the server's state, and logs.
fn apply_result(w: &Worker, p: &Proxy, pi: usize, si: usize, out: Outcome, ms: u64) {
    let srv = w.shared.server(pi, si);
    let Some(st) = srv.check.as_ref() else { return };
    let prev = st.status.swap(out.status as u8, Relaxed);
    st.last_code.store(out.code as u32, Relaxed);
    st.last_duration_ms.store(ms, Relaxed);
    if let Ok(mut d) = st.desc.lock() {
        d.clone_from(&out.desc);
    }
    if !out.status.ok() {
        st.failed.fetch_add(1, Relaxed);
    } else if srv.conf.health.observe.is_some() {
        // As HAProxy: a passed check clears the traffic error count.
        srv.health.errors.store(0, Relaxed);
    }
    let before = st.health.load(Relaxed);
    apply(st, out.status.ok());
    let mut why = Why::Check {
        status: out.status,
        code: out.code,
        desc: &out.desc,
        ms: Some(ms),
        logged: false,
    };
    // NOLB follows the conditional pass of `disable-on-404`; any other pass clears it.
    if out.status.ok() && st.up() {
        let nolb = out.status == Status::L7OkC;
        if srv.health.nolb.swap(nolb, Relaxed) != nolb {
            srv.last_change.store(unix_now(), Relaxed);
            w.shared.backend(pi).changed();
            if nolb && srv.up.load(Relaxed) {
                let line = format!(
                    "Server {}/{} is stopping, reason: {}{}{}. {}",
                    p.name,
                    srv.name,
                    out.status.reason(),
                    info_text(&why),
                    duration_text(&why),
                    counts(w, pi, true),
                );
                w.log.emit(&p.logs, 4, &line);
            }
        }
    }
    // HAProxy reports a check when its status or the health counter changed, before the
    // state change it may cause.
    let report = prev != out.status as u8 || before != st.health.load(Relaxed);
    if report && p.options.log_health_checks {
        log_check(w, p, srv, st, &why);
        if let Why::Check { logged, .. } = &mut why {
            *logged = true;
        }
    }
    update_state(w, pi, si, &why);
}

/// HAProxy's health counter update; returns `Some(true)` when the counter just crossed to UP,
/// `Some(false)` when it just crossed to DOWN.
pub fn apply(st: &CheckState, ok: bool) -> Option<bool> {
    let (rise, fall) = (st.rise, st.fall);
    let full = rise + fall - 1;
    let next = |h: u32| match (ok, h >= rise) {
        (true, true) => full,
        (true, false) if h + 1 >= rise => full,
        (true, false) => h + 1,
        (false, true) if h - 1 < rise => 0,
        (false, true) => h - 1,
        (false, false) => 0,
    };
    // One atomic step: a value forced meanwhile from another thread (the CLI's or the stats
    // page's `health down|up`) is the one this result applies to, never overwritten by a
    // copy read before it.
    let h = match st.health.fetch_update(Relaxed, Relaxed, |h| Some(next(h))) {
        Ok(h) | Err(h) => h,
    };
    let crossed = (h >= rise) != (next(h) >= rise);
    match (crossed, ok) {
        (true, true) => Some(true),
        (true, false) => {
            st.downs.fetch_add(1, Relaxed);
            Some(false)
        }
        _ => None,
    }
}

/// Whether every source of health agrees the server is up: its checks, its agent, and the
/// server it tracks. Each keeps its own state: `disable health` sets the checks' health to UP
/// (a health forced afterwards by `set server ... health` still counts, as no check runs to
/// change it), and a disabled agent is not asked.
fn healthy(w: &Worker, srv: &ServerState) -> bool {
    let check_ok = srv.check.as_ref().is_none_or(|c| c.up());
    let agent_ok = srv
        .health
        .agent
        .as_ref()
        .is_none_or(|a| !a.enabled.load(Relaxed) || a.up.load(Relaxed));
    let track_ok = srv
        .conf
        .health
        .track_idx
        .is_none_or(|(tp, ts)| w.shared.server(tp, ts).up.load(Relaxed));
    check_ok && agent_ok && track_ok
}

/// Recomputes server `si`'s operational state; on a change applies it (tables, trackers,
/// `on-marked-*`, slowstart) and logs it. Returns whether it changed.
fn update_state(w: &Worker, pi: usize, si: usize, why: &Why) -> bool {
    let shared = &w.shared;
    let srv = shared.server(pi, si);
    let up = healthy(w, srv);
    if srv.up.swap(up, Relaxed) == up {
        return false;
    }
    let p = &shared.cfg.proxies[pi];
    srv.last_change.store(unix_now(), Relaxed);
    if !up {
        srv.health.nolb.store(false, Relaxed);
        srv.health.ss_w16.store(0, Relaxed);
        srv.health.ss_pct.store(0, Relaxed);
    } else if let Some(t) = srv.conf.health.slowstart {
        // Throttled before anything sees it up (tables, logs, stats).
        start_slowstart(w, pi, si, t);
    }
    let be = shared.backend(pi);
    be.changed();
    let how = match why {
        Why::Check { logged: true, .. } => String::new(),
        Why::Check { status, .. } => format!(
            ", reason: {}{}{}",
            status.reason(),
            info_text(why),
            duration_text(why)
        ),
        Why::Via(t) => format!(" via {t}"),
        Why::Cli => ", changed from CLI".to_string(),
    };
    // HAProxy's tail: the sessions on the server and its queue (sluice moves no queued
    // request when a server goes down: the backend's queue serves every server).
    let (served, queued) = (srv.served.load(Relaxed), srv.queued.load(Relaxed));
    let sessions = if up {
        format!("0 sessions requeued, {queued} total in queue.")
    } else {
        format!("{served} sessions active, 0 requeued, {queued} remaining in queue.")
    };
    let line = format!(
        "Server {}/{} is {}{how}. {} {sessions}",
        p.name,
        srv.name,
        if up { "UP" } else { "DOWN" },
        counts(w, pi, up),
    );
    let pid = std::process::id();
    crate::say!(
        "[{}] ({pid}) : {line}",
        if up { "NOTICE" } else { "WARNING" },
    );
    w.log.emit(&p.logs, if up { 5 } else { 1 }, &line);
    if !up && !be.servers.iter().any(|s| s.usable()) {
        let kind = if p.kind == crate::config::ProxyKind::Listen {
            "proxy"
        } else {
            "backend"
        };
        let line = format!("{kind} {} has no server available!", p.name);
        crate::say!("[ALERT] ({pid}) : {line}");
        w.log.emit(&p.logs, 0, &line);
    }
    let h = &srv.conf.health;
    if !up && h.down_kills_sessions {
        kill_sessions(w, pi, &[si]);
    }
    if up && h.up_kills_backup_sessions && !srv.backup {
        let backups: Vec<usize> = be
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.backup)
            .map(|(i, _)| i)
            .collect();
        kill_sessions(w, pi, &backups);
    }
    // Servers tracking this one follow it.
    let me = format!("{}/{}", p.name, srv.name);
    for (tpi, tp) in shared.cfg.proxies.iter().enumerate() {
        for (tsi, ts) in tp.servers.iter().enumerate() {
            if ts.health.track_idx == Some((pi, si)) {
                update_state(w, tpi, tsi, &Why::Via(&me));
            }
        }
    }
    true
}

/// `N active and M backup servers online|left.`
pub(crate) fn counts(w: &Worker, pi: usize, up: bool) -> String {
    let be = w.shared.backend(pi);
    let (act, bck) = be.servers.iter().fold((0, 0), |(a, b), s| {
        if s.usable() {
            if s.backup { (a, b + 1) } else { (a + 1, b) }
        } else {
            (a, b)
        }
    });
    format!(
        "{act} active and {bck} backup servers {}.",
        if up { "online" } else { "left" }
    )
}

/// `, code: N, info: "..."` as HAProxy appends them.
fn info_text(why: &Why) -> String {
    let Why::Check {
        status, code, desc, ..
    } = why
    else {
        return String::new();
    };
    let mut s = String::new();
    if status.has_code() {
        s.push_str(&format!(", code: {code}"));
    }
    if !desc.is_empty() {
        s.push_str(&format!(", info: \"{}\"", desc.replace('"', "\\\"")));
    }
    s
}

fn duration_text(why: &Why) -> String {
    match why {
        Why::Check { ms: Some(ms), .. } => format!(", check duration: {ms}ms"),
        _ => String::new(),
    }
}

/// `Health check for server be/s succeeded|failed, reason: ..., status: 2/3 UP.`
fn log_check(w: &Worker, p: &Proxy, srv: &ServerState, st: &CheckState, why: &Why) {
    let Why::Check { status, .. } = why else {
        return;
    };
    let h = st.health.load(Relaxed);
    let state = if h >= st.rise {
        let word = if srv.weight.load(Relaxed) == 0 {
            "DRAIN"
        } else {
            "UP"
        };
        format!("{}/{} {word}", h - st.rise + 1, st.fall)
    } else {
        format!("{}/{} DOWN", h, st.rise)
    };
    let line = format!(
        "Health check for {}server {}/{} {}{}, reason: {}{}{}, status: {state}.",
        if srv.backup { "backup " } else { "" },
        p.name,
        srv.name,
        if *status == Status::L7OkC {
            "conditionally "
        } else {
            ""
        },
        if status.ok() { "succeeded" } else { "failed" },
        status.reason(),
        info_text(why),
        duration_text(why),
    );
    w.log.emit(&p.logs, 5, &line);
}

/// `on-marked-down shutdown-sessions` / `on-marked-up shutdown-backup-sessions`: every worker
/// thread closes the client connections attached to these servers.
fn kill_sessions(w: &Worker, pi: usize, servers: &[usize]) {
    let Some(workers) = w.shared.workers.get() else {
        return;
    };
    for tx in workers {
        let list = servers.to_vec();
        let job: crate::worker::CtlJob = Box::new(move |w| {
            for s in &list {
                w.kill_server_sessions(pi, *s);
            }
        });
        let _ = tx.send(job);
    }
}

/// What the CLI (or the stats page) changes in a server's health sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Force {
    /// `set server ... health up|stopping|down`.
    HealthUp,
    HealthStopping,
    HealthDown,
    /// `enable|disable health`.
    HealthEnabled(bool),
    /// `set server ... agent up|down`.
    AgentUp,
    AgentDown,
    /// `enable|disable agent`.
    AgentEnabled(bool),
}

/// Applies `f` to server `si` of proxy `pi` (HAProxy's rules and error texts), then has a
/// worker thread recompute the server's state from all its sources, apply it (tables,
/// trackers, `on-marked-*`, slowstart) and log a change as "changed from CLI". The receiver
/// says when that is done.
pub fn cli_force(
    shared: &crate::backend::Shared,
    pi: usize,
    si: usize,
    f: Force,
) -> Result<Option<tokio::sync::oneshot::Receiver<()>>, &'static str> {
    let srv = shared.server(pi, si);
    let health = || {
        srv.check
            .as_ref()
            .ok_or("Health checks are not enabled on this server.\n")
    };
    let agent = || {
        srv.health
            .agent
            .as_ref()
            .filter(|a| a.enabled.load(Relaxed))
            .ok_or("agent checks are not enabled on this server.\n")
    };
    match f {
        Force::HealthUp | Force::HealthStopping | Force::HealthDown => {
            let st = health()?;
            let up = f != Force::HealthDown;
            st.health
                .store(if up { st.rise + st.fall - 1 } else { 0 }, Relaxed);
            // NOLB: up, but no new load-balanced traffic until a check passes again.
            srv.health.nolb.store(f == Force::HealthStopping, Relaxed);
        }
        Force::HealthEnabled(on) => {
            let st = srv
                .check
                .as_ref()
                .ok_or("Health checks are not enabled on this server.\n")?;
            st.enabled.store(on, Relaxed);
            if !on {
                // Unchecked: UP, unless another source holds the server down.
                st.health.store(st.rise + st.fall - 1, Relaxed);
            }
        }
        Force::AgentUp | Force::AgentDown => {
            agent()?.up.store(f == Force::AgentUp, Relaxed);
        }
        Force::AgentEnabled(on) => {
            let ag = srv.health.agent.as_ref().ok_or(if on {
                "Agent was not configured on this server, cannot enable.\n"
            } else {
                "Agent was not configured on this server, cannot disable.\n"
            })?;
            ag.enabled.store(on, Relaxed);
        }
    }
    let Some(workers) = shared.workers.get().filter(|w| !w.is_empty()) else {
        return Ok(None);
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: crate::worker::CtlJob = Box::new(move |w| {
        if !update_state(w, pi, si, &Why::Cli) {
            // Same state, but NOLB may have changed.
            w.shared.backend(pi).changed();
        }
        let _ = tx.send(());
    });
    Ok(workers[si % workers.len()].send(job).is_ok().then_some(rx))
}

/// `on-error`: applies the configured reaction to `error-limit` consecutive traffic errors.
fn on_traffic_errors(w: &Worker, p: &Proxy, pi: usize, si: usize) {
    let srv = w.shared.server(pi, si);
    let Some(st) = srv.check.as_ref() else { return };
    let h = &srv.health;
    let n = h.errors.swap(0, Relaxed);
    let last = Observed::from_u8(h.last_error.load(Relaxed));
    h.failed_hana.fetch_add(1, Relaxed);
    // Every mode forces `fastinter` for the next check.
    h.fastinter_once.store(true, Relaxed);
    let (rise, full) = (st.rise, st.rise + st.fall - 1);
    let fail = match srv.conf.health.on_error {
        OnError::Fastinter => false,
        OnError::SuddenDeath => {
            // A pre-fatal failed check: the next failure takes the server down.
            if st.health.load(Relaxed) > rise {
                st.health.store((rise + 1).min(full), Relaxed);
            }
            true
        }
        OnError::FailCheck => true,
        OnError::MarkDown => {
            st.health.store(rise, Relaxed);
            true
        }
    };
    if !fail {
        return;
    }
    let desc = format!(
        "Detected {} consecutive errors, last one was: {}",
        n.max(srv.conf.health.error_limit),
        last.text()
    );
    st.status.store(Status::Hana as u8, Relaxed);
    if let Ok(mut d) = st.desc.lock() {
        d.clone_from(&desc);
    }
    st.failed.fetch_add(1, Relaxed);
    apply(st, false);
    let logged = p.options.log_health_checks;
    let why = Why::Check {
        status: Status::Hana,
        code: 0,
        desc: &desc,
        ms: None,
        logged,
    };
    if logged {
        log_check(w, p, srv, st, &why);
    }
    update_state(w, pi, si, &why);
}

/// `slowstart T`: after coming back, the server's weight grows linearly from 1/16 of its
/// weight to all of it over T (HAProxy: `(16 * elapsed + T) / T` sixteenths, dynamic
/// algorithms only), and its maxconn from 1 to all of it (`max(1, maxconn * elapsed / T)`),
/// re-evaluated every max(1 s, T/20).
fn start_slowstart(w: &Worker, pi: usize, si: usize, t: Duration) {
    let shared = w.shared.clone();
    let step = t.div_f64(20.0).max(Duration::from_secs(1));
    let tms = t.as_millis().max(1) as u64;
    let start = Instant::now();
    let set = move |shared: &crate::backend::Shared| -> bool {
        let srv = shared.server(pi, si);
        let be = shared.backend(pi);
        let el = start.elapsed().as_millis() as u64;
        let h = &srv.health;
        if el >= tms || !srv.up.load(Relaxed) {
            h.ss_w16.store(0, Relaxed);
            h.ss_pct.store(0, Relaxed);
            be.changed();
            return false;
        }
        let w16 = if be.dynamic_weights() {
            ((16 * el + tms) / tms).clamp(1, 16) as u32
        } else {
            16
        };
        h.ss_w16.store(w16, Relaxed);
        h.ss_pct
            .store((100 * el / tms).clamp(1, 100) as u32, Relaxed);
        be.changed();
        true
    };
    if !set(&shared) {
        return;
    }
    tokio::task::spawn_local(async move {
        loop {
            tokio::time::sleep(step).await;
            if !set(&shared) {
                return;
            }
        }
    });
}

// =============================================================================================
// Running one check
// =============================================================================================

/// A check's own connection and what it received since the last send.
struct Conn {
    s: Wire,
    /// Where it goes (a closing HTTP response is followed by a new connection there).
    peer: Option<SocketAddr>,
    /// Received since the last send (raw connections only).
    buf: Vec<u8>,
    eof: bool,
    /// The last HTTP response allows another request on this connection.
    reusable: bool,
    /// A request was sent on it already.
    used: bool,
    /// Taken from the server's idle pool (`check-reuse-pool`): given back if still reusable
    /// when the check ends, released (and closed) otherwise.
    pooled: Option<Pooled>,
    /// A bare layer-4 check's socket: dissolved and kept for the next one when it ends
    /// (see [`SPARE`]).
    spare: bool,
    /// It goes to the server's UNIX socket (a new connection goes there too).
    unix: bool,
}

/// What a check connection carries over its transport: plain, or TLS (`check-ssl`, or a
/// server with `ssl` checked on its own address).
enum Wire {
    /// Bytes as they come: tcp-check data, HTTP/1.x, or nothing (a connect-only check).
    Raw(crate::stream::ServerStream),
    /// HTTP/2 (`check-proto h2`, `connect proto h2`, or `h2` agreed by ALPN).
    H2(Box<H2Conn>),
}

impl Wire {
    fn raw(&mut self) -> Option<&mut crate::stream::ServerStream> {
        match self {
            Wire::Raw(s) => Some(s),
            Wire::H2(_) => None,
        }
    }
}

impl Conn {
    fn new(s: Wire, peer: Option<SocketAddr>) -> Conn {
        Conn {
            s,
            peer,
            buf: Vec::new(),
            eof: false,
            reusable: false,
            used: false,
            pooled: None,
            spare: false,
            unix: false,
        }
    }

    /// Ends the connection at the end of a check (or before the next `connect`). An HTTP/2
    /// connection still open says GOAWAY first, as HAProxy's multiplexer does when it
    /// releases one; any other is closed (FIN, or the reset of a bare layer-4 check).
    async fn close(self, deadline: tokio::time::Instant) {
        if self.spare {
            let v6 = self.peer.is_some_and(|a| a.is_ipv6());
            if let Wire::Raw(crate::stream::ServerStream::Plain(s)) = self.s {
                spare_keep(s, v6);
            }
            return;
        }
        if let Wire::H2(h) = self.s
            && h.ended.is_none()
        {
            let H2Conn { send, conn, .. } = *h;
            // With no request handle left, the connection future sends GOAWAY(NO_ERROR),
            // flushes it and shuts its transport down; it never waits for the server.
            drop(send);
            let _ = tokio::time::timeout_at(deadline, conn).await;
        }
    }
}

/// An HTTP/2 check connection, client side of the `h2` crate. Nothing is spawned: the
/// connection future is polled only while a request runs and when the connection ends, so
/// between checks nothing of it exists, and during one its buffers are bounded by the
/// windows it advertises (`MAX_READ`).
struct H2Conn {
    send: h2::client::SendRequest<Bytes>,
    conn: Pin<Box<h2::client::Connection<Sniff, Bytes>>>,
    /// The first bytes the server sent (see [`Sniff`]).
    head: Rc<RefCell<Vec<u8>>>,
    /// Why the connection ended (error or close), once it did.
    ended: Option<String>,
    /// The request of the last send step: the next expect step sends it and reads the answer.
    pending: Option<(http::Request<()>, Bytes)>,
    /// The answer to that request, for the expect steps after the first.
    resp: Option<HttpResp>,
}

/// How many of the server's first bytes an HTTP/2 check keeps.
const SNIFF: usize = 8;

/// The transport of an HTTP/2 check, keeping the first bytes the server sends: a server that
/// answers the preface in HTTP/1.x is then reported as such instead of as a framing error.
struct Sniff {
    io: crate::stream::ServerStream,
    head: Rc<RefCell<Vec<u8>>>,
}

impl AsyncRead for Sniff {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.io).poll_read(cx, buf);
        let mut head = me.head.borrow_mut();
        if head.len() < SNIFF {
            let new = &buf.filled()[before..];
            let n = new.len().min(SNIFF - head.len());
            head.extend_from_slice(&new[..n]);
        }
        r
    }
}

impl AsyncWrite for Sniff {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A pooled data connection lent to a check. Dropping it closes the connection and tells the
/// pool it is gone; `give_back` returns it.
struct Pooled {
    w: Rc<Worker>,
    key: crate::pool::Key,
    /// Requests it carried before the check.
    uses: u32,
    /// The server's address generation when it was opened.
    epoch: u32,
    /// Given back already (the drop then has nothing to release).
    returned: bool,
}

impl Pooled {
    fn gauges(&self) -> &crate::backend::PoolGauges {
        &self.w.shared.server(self.key.0, self.key.1).pool
    }

    fn limits(&self) -> crate::pool::Limits {
        crate::pool::Limits::of(&self.w.shared.server(self.key.0, self.key.1).conf)
    }

    /// Back to the pool, one more request behind it (the pool applies its limits).
    fn give_back(mut self, stream: crate::stream::ServerStream) {
        let conn = crate::pool::IdleConn {
            stream,
            uses: self.uses + 1,
            epoch: self.epoch,
            since: Instant::now(),
        };
        self.w
            .pool
            .release(self.key, Some(conn), self.limits(), self.gauges());
        self.returned = true;
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if self.returned {
            return;
        }
        self.w
            .pool
            .release(self.key, None, self.limits(), self.gauges());
    }
}

/// One step of a check sequence, with HAProxy's implicit steps made explicit.
enum Step<'a> {
    /// The implicit first connect (HAProxy's step "initial connection").
    Connect0,
    Connect(&'a ConnectRule),
    /// The request of `option httpchk` (no `http-check send`).
    HttpDefault,
    Send(&'a SendData),
    Expect(&'a ExpectRule),
    /// An HTTP response is valid if its status is 2xx or 3xx (no `http-check expect`).
    ExpectDefault,
}

/// The steps of a proxy's check, with their comments.
fn plan(p: &Proxy) -> Vec<(Step<'_>, Option<&str>)> {
    let mut v: Vec<(Step, Option<&str>)> = Vec::new();
    let rules = match p.options.check_type {
        CheckType::Connect | CheckType::External => return vec![(Step::Connect0, None)],
        CheckType::Http => &p.options.http_checks,
        CheckType::Tcp => &p.options.tcp_checks,
    };
    if !matches!(rules.first(), Some(CheckRule::Connect(_))) {
        v.push((Step::Connect0, None));
    }
    let http = p.options.check_type == CheckType::Http;
    if http && !rules.iter().any(|r| matches!(r, CheckRule::Send(_))) {
        let at = v.len() + usize::from(matches!(rules.first(), Some(CheckRule::Connect(_))));
        for r in rules {
            v.push((to_step(r), r.comment()));
        }
        v.insert(at, (Step::HttpDefault, None));
    } else {
        for r in rules {
            v.push((to_step(r), r.comment()));
        }
    }
    if http {
        // Every request gets an expectation: 2xx/3xx unless a rule says otherwise.
        let mut i = 0;
        while i < v.len() {
            if matches!(v[i].0, Step::Send(_) | Step::HttpDefault) {
                let has = v[i + 1..]
                    .iter()
                    .take_while(|(s, _)| {
                        !matches!(
                            s,
                            Step::Send(_) | Step::HttpDefault | Step::Connect(_) | Step::Connect0
                        )
                    })
                    .any(|(s, _)| matches!(s, Step::Expect(_)));
                if !has {
                    v.insert(i + 1, (Step::ExpectDefault, None));
                }
            }
            i += 1;
        }
    }
    v
}

fn to_step(r: &CheckRule) -> Step<'_> {
    match r {
        CheckRule::Connect(c) => Step::Connect(c),
        CheckRule::Send(s) => Step::Send(&s.data),
        CheckRule::Expect(e) => Step::Expect(e),
    }
}

/// Runs the proxy's check sequence against server `srv`. With `check-reuse-pool`, a check
/// that failed on a pooled connection before receiving anything (the server closed it as we
/// sent: the idle-close race) runs again on a fresh connection, so the race never counts as
/// a failed check; a pooled connection still reusable at the end goes back to the pool.
async fn check_once(
    w: &Rc<Worker>,
    p: &Proxy,
    idx: (usize, usize),
    srv: &ServerState,
    cfg: &CheckCfg,
) -> Outcome {
    if p.options.check_type == CheckType::External {
        return external_check(w, p, idx, srv, cfg).await;
    }
    let mut conn: Option<Conn> = None;
    let mut out = run_steps(w, p, idx, srv, cfg, &mut conn, cfg.reuse_pool).await;
    if !out.status.ok()
        && conn.as_ref().is_some_and(|c| {
            c.pooled.is_some() && c.buf.is_empty() && (c.eof || out.status == Status::SockErr)
        })
    {
        drop(conn.take());
        out = run_steps(w, p, idx, srv, cfg, &mut conn, false).await;
    }
    match conn {
        Some(Conn {
            s: Wire::Raw(s),
            pooled: Some(pooled),
            reusable: true,
            ..
        }) if out.status.ok() => pooled.give_back(s),
        Some(c) => {
            let bound = p.timeouts.check.unwrap_or(cfg.inter);
            c.close(tokio::time::Instant::now() + bound).await;
        }
        None => {}
    }
    out
}

/// `option external-check`: runs `external-check command` without a shell, with HAProxy's
/// arguments (`PROXY_ADDR PROXY_PORT SERVER_ADDR SERVER_PORT`, `NOT_USED` for a proxy without
/// a TCP or UNIX listener) and its environment, which is nothing else but `PATH` (`external-check
/// path`, empty by default). Exit status 0 passes; anything else fails with the status as the
/// code; a program still running after `inter` gets SIGTERM and the check fails
/// (`PROCTOUT`), as in HAProxy 2.6. The server's own address is given, not the check's.
async fn external_check(
    w: &Worker,
    p: &Proxy,
    (pi, _): (usize, usize),
    srv: &ServerState,
    cfg: &CheckCfg,
) -> Outcome {
    let ext = &p.options.external_check;
    let Some(cmd) = ext.command.as_deref() else {
        return Outcome::new(Status::ProcErr, 0, "no external-check command");
    };
    // The first listener with an address, as HAProxy takes it.
    let bind = p.binds.iter().find_map(|b| match &b.addr {
        crate::config::BindAddr::Tcp(a) => Some((a.ip().to_string(), a.port().to_string())),
        crate::config::BindAddr::Unix(path) => Some((path.display().to_string(), String::new())),
        _ => None,
    });
    let (paddr, pport) = bind.unwrap_or_default();
    let sa = **srv.addr.load();
    let (saddr, sport) = match &srv.conf.unix {
        Some(crate::config::UnixTarget::Path(path)) => (path.display().to_string(), String::new()),
        Some(crate::config::UnixTarget::Abstract(n)) => (n.clone(), String::new()),
        None => (sa.ip().to_string(), sa.port().to_string()),
    };
    let or_unused = |s: &str| {
        if s.is_empty() {
            "NOT_USED".to_string()
        } else {
            s.to_string()
        }
    };
    let proto = match (p.mode, srv.conf.h2) {
        (crate::config::Mode::Tcp, _) => "tcp",
        (_, crate::config::ServerH2::Always) => "h2",
        _ => "h1",
    };
    let mut c = tokio::process::Command::new(cmd);
    c.args([
        or_unused(&paddr),
        or_unused(&pport),
        saddr.clone(),
        or_unused(&sport),
    ])
    .env_clear()
    .env("PATH", ext.path.as_deref().unwrap_or(""))
    .env("HAPROXY_PROXY_ADDR", &paddr)
    .env("HAPROXY_PROXY_ID", w.shared.proxies[pi].uuid.to_string())
    .env("HAPROXY_PROXY_NAME", &p.name)
    .env("HAPROXY_PROXY_PORT", &pport)
    .env("HAPROXY_SERVER_ADDR", &saddr)
    .env(
        "HAPROXY_SERVER_CURCONN",
        srv.served.load(Relaxed).to_string(),
    )
    .env("HAPROXY_SERVER_ID", srv.puid.to_string())
    .env(
        "HAPROXY_SERVER_MAXCONN",
        srv.maxconn.load(Relaxed).to_string(),
    )
    .env("HAPROXY_SERVER_NAME", &srv.name)
    .env("HAPROXY_SERVER_PORT", &sport)
    .env("HAPROXY_SERVER_PROTO", proto)
    .env("HAPROXY_SERVER_SSL", if srv.conf.ssl { "1" } else { "0" })
    .stdin(std::process::Stdio::null())
    // A check task that ends (server deleted, soft stop) takes its program with it.
    .kill_on_drop(true);
    let mut child = match c.spawn() {
        Ok(c) => c,
        // HAProxy's child exits with -1 (255) when it cannot execute the command.
        Err(e) => return Outcome::new(Status::ProcErr, 255, format!("{cmd}: {e}")),
    };
    // `inter`, or at most `timeout connect` when `timeout check` is set (HAProxy 2.6).
    let limit = match (p.timeouts.check, p.timeouts.connect) {
        (Some(_), Some(c)) => cfg.inter.min(c),
        _ => cfg.inter,
    };
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(st)) => match st.code() {
            Some(0) => Outcome::new(Status::ProcOk, 0, ""),
            Some(code) => Outcome::new(Status::ProcErr, code as u16, ""),
            None => Outcome::new(Status::ProcErr, 0, "killed by a signal"),
        },
        Ok(Err(e)) => Outcome::new(Status::ProcErr, 0, e.to_string()),
        Err(_) => {
            if let Some(pid) = child.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            // SIGTERM was sent, as HAProxy sends it: the program gets 10 s to exit and be
            // reaped, then the drop kills it (and tokio's orphan queue reaps it).
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            });
            Outcome::new(Status::ProcTout, 0, "")
        }
    }
}

/// An idle pooled connection for the first connect of an HTTP check (`check-reuse-pool`),
/// when that connect goes to the server's own address without a PROXY header and would open
/// the same kind of connection as the server's traffic (which is what the pool holds): plain
/// for a plain server; for an `ssl` server, TLS with the server's own ALPN and, when its SNI
/// is fixed, that SNI. Keyed as traffic keys it: by `check-pool-conn-name` (for traffic,
/// `pool-conn-name`) and, for a server whose SNI comes from the request (`sni
/// req.hdr(host)`), by the check's SNI (`check-sni`).
fn pooled_conn(
    w: &Rc<Worker>,
    p: &Proxy,
    at: (usize, usize),
    srv: &ServerState,
    cfg: &CheckCfg,
    rule: Option<&ConnectRule>,
) -> Option<Conn> {
    let own_default = rule.is_none_or(|r| {
        r.default
            && r.port.is_none()
            && r.addr.is_none()
            && !r.send_proxy
            && !r.ssl
            && r.sni.is_none()
            && r.alpn.is_none()
            && r.proto.is_none()
    });
    if p.options.check_type != CheckType::Http
        || !own_default
        || cfg.port.is_some()
        || cfg.addr.is_some()
        || cfg.send_proxy
        // Pooled connections carry HTTP/1.1.
        || cfg.proto == Some(CheckProto::H2)
    {
        return None;
    }
    let tls = check_tls(srv, cfg, rule);
    if tls.is_some() != srv.conf.ssl {
        return None;
    }
    let mut sni = None;
    if let Some(t) = tls {
        if t.alpn.is_some() {
            // `check-alpn`: not what traffic connections negotiated.
            return None;
        }
        match &t.tls.sni {
            Some(crate::tls::SniExpr::ReqHost) => sni = Some(t.sni),
            Some(crate::tls::SniExpr::Str(s)) if t.sni.is_some_and(|c| c != s) => return None,
            None if t.sni.is_some() => return None,
            _ => {}
        }
    }
    let name: Option<&[u8]> = match &srv.conf.check_pool_conn_name {
        Some(crate::config::NameExpr::Str(s)) => Some(s.as_bytes()),
        // A check has no request: a header-based name is empty, as for a request without it.
        Some(crate::config::NameExpr::ReqHdr(_)) => Some(b""),
        None => None,
    };
    let name = crate::pool::name_hash(name, sni);
    let key = (at.0, at.1, name);
    let epoch = srv.addr_gen.load(Relaxed);
    let c = w.pool.take(
        key,
        1,
        crate::pool::Limits::of(&srv.conf),
        &srv.pool,
        epoch,
        false,
    )?;
    let unix = matches!(c.stream, crate::stream::ServerStream::Unix(_));
    let peer = match unix {
        true => Some(**srv.addr.load()),
        false => c.stream.tcp().and_then(|s| s.peer_addr().ok()),
    };
    Some(Conn {
        s: Wire::Raw(c.stream),
        peer,
        buf: Vec::new(),
        eof: false,
        reusable: false,
        used: false,
        pooled: Some(Pooled {
            w: w.clone(),
            key,
            uses: c.uses,
            epoch: c.epoch,
            returned: false,
        }),
        spare: false,
        unix,
    })
}

/// One run of the check sequence; the connection it ends with is left in `conn`.
async fn run_steps(
    w: &Rc<Worker>,
    p: &Proxy,
    srv_idx: (usize, usize),
    srv: &ServerState,
    cfg: &CheckCfg,
    conn: &mut Option<Conn>,
    allow_pool: bool,
) -> Outcome {
    // HAProxy: connect within min(timeout connect, inter); `timeout check` (or inter without
    // it) then bounds the rest.
    let connect_to = p.timeouts.connect.map_or(cfg.inter, |c| c.min(cfg.inter));
    let read_to = p.timeouts.check.unwrap_or(cfg.inter);
    let steps = plan(p);
    let protocol = p.options.protocol_check;
    let tcp_rules = p.options.check_type == CheckType::Tcp && !protocol;
    let http = p.options.check_type == CheckType::Http;
    // How the current connection was opened: a new request after a closing response opens
    // the same kind again.
    let mut conn_tls: Option<CheckTls> = None;
    let mut conn_proxy = None;
    let mut conn_mux = Mux::Plain;
    let mut deadline = tokio::time::Instant::now() + connect_to + read_to;
    let mut last: Option<Outcome> = None;
    // `option mysql-check`: the server version its greeting gave, the info of a passed check.
    let mut mysql_version = String::new();
    for (idx, (step, comment)) in steps.iter().enumerate() {
        // HAProxy numbers a protocol check's steps from its first send.
        let step_id = if protocol { idx } else { idx + 1 };
        let cmt = |s: String| match comment {
            Some(c) => format!("{s} comment: '{c}'"),
            None => s,
        };
        // Where a tcp-check failed, as HAProxy appends it to connection errors.
        let at = |what: &str| -> String {
            if !tcp_rules {
                return String::new();
            }
            if matches!(step, Step::Connect0) {
                " at initial connection step of tcp-check".into()
            } else {
                cmt(format!(" at step {step_id} of tcp-check{what}"))
            }
        };
        match step {
            Step::Connect0 | Step::Connect(_) => {
                let rule = match step {
                    Step::Connect(c) => Some(*c),
                    _ => None,
                };
                let base = **srv.addr.load();
                let default = rule.is_none_or(|r| r.default);
                let ip = rule
                    .and_then(|r| r.addr)
                    .or(if default { cfg.addr } else { None })
                    .unwrap_or(base.ip());
                let port = rule
                    .and_then(|r| r.port)
                    .or(if default { cfg.port } else { None })
                    .unwrap_or(base.port());
                // `check-send-proxy`, or the server's `send-proxy*` when the check goes to the
                // server's own address (HAProxy's rule); in the server's version, else v1.
                let own_addr = ip == base.ip() && port == base.port();
                let send = rule.is_some_and(|r| r.send_proxy)
                    || (default && cfg.send_proxy)
                    || (own_addr && srv.conf.send_proxy.is_some());
                let proxy_hdr = send.then(|| {
                    crate::send_proxy::local(
                        srv.conf
                            .send_proxy
                            .unwrap_or(crate::send_proxy::Version::V1),
                    )
                });
                let what = match rule.and_then(|r| r.port) {
                    Some(port) => format!(" (connect port {port})"),
                    None => " (connect)".into(),
                };
                // A new connect closes the previous connection first.
                if let Some(c) = conn.take() {
                    c.close(deadline).await;
                }
                let tls = check_tls(srv, cfg, rule);
                let mux = if http {
                    match rule
                        .and_then(|r| r.proto)
                        .or(if default { cfg.proto } else { None })
                    {
                        Some(CheckProto::H2) => Mux::H2,
                        Some(CheckProto::H1) => Mux::Plain,
                        None => Mux::ByAlpn,
                    }
                } else {
                    Mux::Plain
                };
                conn_tls = tls;
                conn_proxy = proxy_hdr;
                conn_mux = mux;
                // `check-reuse-pool`: only the sequence's first connect may borrow.
                if allow_pool
                    && idx == 0
                    && let Some(c) = pooled_conn(w, p, srv_idx, srv, cfg, rule)
                {
                    *conn = Some(c);
                    deadline = tokio::time::Instant::now() + read_to;
                    continue;
                }
                let bare = tls.is_none() && proxy_hdr.is_none() && idx + 1 == steps.len();
                let addr = SocketAddr::new(ip, port);
                let src = srv.source_now();
                // A server on a UNIX socket is checked there, unless the check names an
                // address or a port of its own.
                let unix = srv.conf.unix.as_ref().filter(|_| own_addr);
                match connect(addr, unix, src, connect_to, proxy_hdr, tls, bare, mux).await {
                    Ok(c) => *conn = Some(c),
                    Err((st, e)) => return Outcome::new(st, 0, format!("{e}{}", at(&what))),
                }
                deadline = tokio::time::Instant::now() + read_to;
            }
            Step::HttpDefault | Step::Send(_) => {
                let Some(c) = conn.as_mut() else {
                    return Outcome::new(Status::SockErr, 0, "no connection");
                };
                let more = steps[idx + 1..]
                    .iter()
                    .any(|(s, _)| matches!(s, Step::Send(_) | Step::HttpDefault))
                    && !steps[idx + 1..]
                        .iter()
                        .take_while(|(s, _)| !matches!(s, Step::Send(_) | Step::HttpDefault))
                        .any(|(s, _)| matches!(s, Step::Connect(_)));
                // A pooled connection is asked to stay open (it goes back to the pool).
                let end = if c.pooled.is_some() {
                    ConnEnd::KeepAlive
                } else if more {
                    ConnEnd::Default
                } else {
                    ConnEnd::Close
                };
                let base = p.options.httpchk.as_ref();
                let req = match step {
                    Step::Send(SendData::Bytes(b)) => Err(b),
                    Step::Send(SendData::Http(h)) => Ok(request_parts(w, p, srv, base, Some(h))),
                    _ => Ok(request_parts(w, p, srv, base, None)),
                };
                if http
                    && c.used
                    && !c.reusable
                    && let Some(a) = c.peer
                {
                    // The previous response ends the connection: a new one for this request.
                    let src = srv.source_now();
                    let unix = srv.conf.unix.as_ref().filter(|_| c.unix);
                    let (px, tls, mux) = (conn_proxy, conn_tls, conn_mux);
                    match connect(a, unix, src, connect_to, px, tls, false, mux).await {
                        Ok(n) => *c = n,
                        Err((st, e)) => return Outcome::new(st, 0, e),
                    }
                }
                c.buf.clear();
                c.reusable = false;
                c.used = true;
                let bytes = match (&mut c.s, req) {
                    (Wire::H2(h), Ok(r)) => {
                        // Sent by the expect step, which drives the connection meanwhile.
                        match h2_request(&r, conn_tls.is_some()) {
                            Ok(x) => h.pending = Some(x),
                            Err(e) => return Outcome::new(Status::SockErr, 0, cmt(e)),
                        }
                        h.resp = None;
                        continue;
                    }
                    (_, Ok(r)) => http1_request(&r, end),
                    (_, Err(b)) => b.clone(),
                };
                let Some(s) = c.s.raw() else {
                    return Outcome::new(Status::SockErr, 0, "no connection");
                };
                let wr = tokio::time::timeout_at(deadline, async {
                    s.write_all(&bytes).await?;
                    s.flush().await
                })
                .await;
                match wr {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        return Outcome::new(Status::SockErr, 0, format!("{e}{}", at(" (send)")));
                    }
                    Err(_) => return Outcome::new(Status::L7Tout, 0, at(" (send)")),
                }
            }
            Step::Expect(_) | Step::ExpectDefault => {
                let Some(c) = conn.as_mut() else {
                    return Outcome::new(Status::SockErr, 0, "no connection");
                };
                let out = if http {
                    let rule = match step {
                        Step::Expect(e) => Some(*e),
                        _ => None,
                    };
                    expect_http(w, p, srv, c, rule, deadline, &cmt).await
                } else {
                    let Step::Expect(e) = step else {
                        continue;
                    };
                    match e.kind {
                        ExpectKind::Mysql { ok } => {
                            expect_mysql(c, ok, deadline, &mut mysql_version).await
                        }
                        _ => expect_tcp(c, e, deadline, step_id, &cmt, &at).await,
                    }
                };
                match out {
                    Ok(o) => last = Some(o),
                    Err(o) => return o,
                }
            }
        }
    }
    // All steps ran: the last one decides the result (HAProxy's end of `tcpcheck_main`).
    match steps.last().map(|(s, _)| s) {
        Some(Step::Expect(_) | Step::ExpectDefault) if http => {
            last.unwrap_or_else(|| Outcome::new(Status::L7Ok, 0, ""))
        }
        // A connect-only check over TLS passed layer 6 (HAProxy's L6OK).
        Some(Step::Connect0) | None
            if conn
                .as_ref()
                .is_some_and(|c| matches!(c.s, Wire::Raw(crate::stream::ServerStream::Tls(_)))) =>
        {
            Outcome::new(Status::L6Ok, 0, "")
        }
        Some(Step::Connect0) | None => Outcome::new(Status::L4Ok, 0, ""),
        Some(Step::Connect(_)) => Outcome::new(Status::L4Ok, 0, "(tcp-check)"),
        // The last expect's `ok-status` and `on-success`, as HAProxy ends a tcp-check.
        Some(Step::Expect(_)) => {
            last.unwrap_or_else(|| Outcome::new(Status::L7Ok, 0, "(tcp-check)"))
        }
        _ => Outcome::new(Status::L7Ok, 0, "(tcp-check)"),
    }
}

/// The TLS side of one check connection: the server line's client settings, and the SNI and
/// ALPN list this connection asks for (`None`: the server's own).
#[derive(Clone, Copy)]
struct CheckTls<'a> {
    tls: &'a crate::tls::ServerTls,
    sni: Option<&'a str>,
    alpn: Option<&'a [Vec<u8>]>,
}

/// Whether a check connection runs over TLS, and with what. HAProxy's rules: a `connect` rule
/// with `ssl` always does; the implicit first connect and `connect default` follow `check-ssl`
/// / `no-check-ssl`, else the server's `ssl` when the check goes to the server's own address
/// (an explicit check `port` or `addr` is not assumed to speak TLS); any other `connect` rule
/// is plain. SNI and ALPN come from the rule, else (default connects) from `check-sni` /
/// `check-alpn`, else from the server line.
fn check_tls<'a>(
    srv: &'a ServerState,
    cfg: &'a CheckCfg,
    rule: Option<&'a ConnectRule>,
) -> Option<CheckTls<'a>> {
    let default = rule.is_none_or(|r| r.default);
    let on = if rule.is_some_and(|r| r.ssl) {
        true
    } else if default {
        match cfg.ssl {
            Some(b) => b,
            None => srv.conf.ssl && cfg.port.is_none() && cfg.addr.is_none(),
        }
    } else {
        false
    };
    if !on {
        return None;
    }
    // Built at configuration time for every server whose checks may use TLS.
    let tls = srv.conf.tls.as_deref()?;
    let sni =
        rule.and_then(|r| r.sni.as_deref())
            .or(if default { cfg.sni.as_deref() } else { None });
    let proto = rule
        .and_then(|r| r.proto)
        .or(if default { cfg.proto } else { None });
    // HTTP/2 over TLS is agreed by ALPN (RFC 9113 §3.2): a forced `h2` offers it unless an
    // ALPN list is configured for the checks.
    let alpn = rule
        .and_then(|r| r.alpn.as_deref())
        .or(if default { cfg.alpn.as_deref() } else { None })
        .or(if proto == Some(CheckProto::H2) {
            Some(H2_ALPN.as_slice())
        } else {
            None
        });
    Some(CheckTls { tls, sni, alpn })
}

static H2_ALPN: std::sync::LazyLock<Vec<Vec<u8>>> =
    std::sync::LazyLock::new(|| vec![b"h2".to_vec()]);

/// What an HTTP check connection speaks once it is open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mux {
    /// tcp-check bytes, HTTP/1.x (`check-proto h1`), or nothing.
    Plain,
    /// HTTP/2 with prior knowledge, or over TLS whatever ALPN agreed (`proto h2` forces it).
    H2,
    /// An HTTP check with no `proto`: HTTP/2 when TLS agreed `h2` (HAProxy picks the
    /// multiplexer by ALPN), else HTTP/1.x.
    ByAlpn,
}

/// How many dissolved check sockets a thread keeps per address family: enough for the
/// bare checks it has in flight at once (a handful at 10,000 checks/s on loopback); any more
/// are closed. They count against the descriptors `FD_RESERVE` leaves besides `maxconn`.
const SPARE_SOCKETS: usize = 32;

thread_local! {
    /// This thread's spare sockets for bare layer-4 checks, IPv4 then IPv6. A finished check
    /// dissolves its connection with a reset ([`crate::sys::disconnect`]) and leaves the socket
    /// here, unregistered from the event loop; the next check connects it again. The packets
    /// are those of a new socket closed with linger 0 (SYN, SYN-ACK, RST; a new source
    /// port), but socket(), close() and the allocation and RCU-deferred freeing of a socket
    /// and a file per check are gone: a third of a loopback check's kernel time
    /// (`bench/check_floor.py --reuse`).
    static SPARE: RefCell<[Vec<socket2::Socket>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// Connects a bare check: a spare socket of this thread if there is one, else a new one.
async fn connect_spare(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let fam = usize::from(addr.is_ipv6());
    let mut sock = SPARE.with(|sp| sp.borrow_mut()[fam].pop());
    let to: socket2::SockAddr = addr.into();
    loop {
        let (s, reused) = match sock.take() {
            Some(s) => (s, true),
            None => {
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(addr),
                    socket2::Type::STREAM.nonblocking(),
                    Some(socket2::Protocol::TCP),
                )?;
                // Reset, not FIN, if the socket is ever closed rather than kept.
                s.set_linger(Some(Duration::ZERO))?;
                (s, false)
            }
        };
        // Held back: the reset then replaces the final ACK and the server never accepts. A
        // disconnect clears it, so it is set before every connect.
        let _ = s.set_tcp_quickack(false);
        match s.connect(&to) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            // A spare socket that cannot connect is dropped, and a new one tried: a check
            // must never fail because of a recycled socket.
            Err(_) if reused => continue,
            Err(e) => return Err(e),
        }
        // Registered only now: in its dissolved state the socket would report a hang-up,
        // which tokio keeps as final.
        let s = tokio::net::TcpStream::from_std(std::net::TcpStream::from(s))?;
        s.writable().await?;
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
        return Ok(s);
    }
}

/// Ends a bare check's connection with a reset and keeps its socket for the next check.
fn spare_keep(s: tokio::net::TcpStream, v6: bool) {
    let fam = usize::from(v6);
    // Unregistered first, so the dissolved socket never reaches the event loop.
    let Ok(s) = s.into_std() else { return };
    let s = socket2::Socket::from(s);
    // Any error the disconnect leaves pending is cleared by the next connect
    // (`tcp_connect_init`), so no getsockopt is spent on it here.
    if crate::sys::disconnect(std::os::fd::AsFd::as_fd(&s)).is_err() {
        return;
    }
    SPARE.with(|sp| {
        let v = &mut sp.borrow_mut()[fam];
        if v.len() < SPARE_SOCKETS {
            v.push(s);
        }
    });
}

/// Opens a check connection of its own from the server's `source`, starting with
/// `proxy_hdr` (a PROXY header), over TLS when `tls` is given.
///
/// `bare`: a pure layer-4 check (the connect is all there is). As HAProxy does, the final ACK
/// of the handshake is held back (quick-ack off before connecting) and the connection is
/// reset once established (linger 0): the server's SYN-ACK proves it listens, and its
/// application never has to accept and close a connection for every check.
#[allow(clippy::too_many_arguments)]
async fn connect(
    addr: SocketAddr,
    unix: Option<&crate::config::UnixTarget>,
    source: Option<SocketAddr>,
    to: Duration,
    proxy_hdr: Option<&[u8]>,
    tls: Option<CheckTls<'_>>,
    bare: bool,
    mux: Mux,
) -> Result<Conn, (Status, String)> {
    if let Some(t) = unix {
        // The server's UNIX socket: connected (and the PROXY header sent) as traffic is; no
        // TLS there.
        let mut s = match crate::stream::connect_unix(t, Some(to)).await {
            Ok(s) => s,
            Err(true) => return Err((Status::L4Tout, String::new())),
            Err(false) => return Err((Status::L4Con, "Connection refused".to_string())),
        };
        if let Some(h) = proxy_hdr
            && let Err(e) = s.write_all(h).await
        {
            return Err((Status::SockErr, e.to_string()));
        }
        let mut c = Conn::new(Wire::Raw(crate::stream::ServerStream::Unix(s)), Some(addr));
        c.unix = true;
        if mux == Mux::H2 {
            return Err((
                Status::SockErr,
                "HTTP/2 checks on a UNIX socket are not supported by sluice".to_string(),
            ));
        }
        return Ok(c);
    }
    // Without a `source` to bind, a bare check's socket is one of this thread's spares.
    let spare = bare && source.is_none();
    let connecting = async {
        if spare {
            return connect_spare(addr).await;
        }
        let s = crate::stream::server_socket(addr, source, bare)?
            .connect(addr)
            .await?;
        if bare {
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        }
        Ok::<_, std::io::Error>(s)
    };
    let s = match tokio::time::timeout(to, connecting).await {
        Err(_) => return Err((Status::L4Tout, String::new())),
        Ok(Err(e)) => {
            let info = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "Connection refused".to_string(),
                _ => e.to_string(),
            };
            return Err((Status::L4Con, info));
        }
        Ok(Ok(s)) => s,
    };
    let mut s = s;
    if !bare {
        // A bare check writes nothing, so it spares the setsockopt (one of its ~9 syscalls).
        let _ = s.set_nodelay(true);
    }
    if let Some(h) = proxy_hdr {
        // A check has no client: HAProxy sends the "UNKNOWN" / LOCAL form (before any TLS).
        if let Err(e) = s.write_all(h).await {
            return Err((Status::SockErr, e.to_string()));
        }
    }
    let s = match tls {
        None => crate::stream::ServerStream::Plain(s),
        Some(t) => match crate::tls::check_stream(t.tls, s, t.sni, t.alpn, Some(to)).await {
            Ok(s) => s,
            // HAProxy's layer 6 results: the TLS handshake failed or timed out.
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err((Status::L6Tout, String::new()));
            }
            Err(e) => return Err((Status::L6Rsp, format!("SSL handshake failure: {e}"))),
        },
    };
    let h2 = match mux {
        Mux::Plain => false,
        Mux::H2 => true,
        Mux::ByAlpn => match &s {
            crate::stream::ServerStream::Tls(t) => t.get_ref().1.alpn_protocol() == Some(b"h2"),
            _ => false,
        },
    };
    if !h2 {
        let mut c = Conn::new(Wire::Raw(s), Some(addr));
        c.spare = spare;
        return Ok(c);
    }
    let head = Rc::new(RefCell::new(Vec::new()));
    let io = Sniff {
        io: s,
        head: head.clone(),
    };
    // Our receive windows bound what the server may send ahead of our reading to what a
    // check reads at most; no server push.
    let hs = h2::client::Builder::new()
        .enable_push(false)
        .initial_window_size(MAX_READ as u32)
        .max_header_list_size(MAX_READ as u32)
        .handshake::<_, Bytes>(io);
    // The handshake only writes the preface and our SETTINGS.
    let (send, conn) = match tokio::time::timeout(to, hs).await {
        Err(_) => return Err((Status::L7Tout, "HTTP/2 preface".into())),
        Ok(Err(e)) => return Err((Status::SockErr, format!("HTTP/2 preface: {e}"))),
        Ok(Ok(x)) => x,
    };
    let h = H2Conn {
        send,
        conn: Box::pin(conn),
        head,
        ended: None,
        pending: None,
        resp: None,
    };
    Ok(Conn::new(Wire::H2(Box::new(h)), Some(addr)))
}

/// Reads once more into `c.buf` (bounded); false at EOF, error, or when the buffer is full.
/// Reads straight into the heap buffer: no array lives in the check task's future, so an idle
/// check keeps no buffer.
async fn read_more(c: &mut Conn, deadline: tokio::time::Instant) -> Result<bool, ()> {
    if c.eof || c.buf.len() >= MAX_READ {
        return Ok(false);
    }
    let Some(s) = c.s.raw() else {
        c.eof = true;
        return Ok(false);
    };
    let start = c.buf.len();
    c.buf.resize(start + (MAX_READ - start).min(4096), 0);
    let r = tokio::time::timeout_at(deadline, s.read(&mut c.buf[start..])).await;
    let n = match &r {
        Ok(Ok(n)) => *n,
        _ => 0,
    };
    c.buf.truncate(start + n);
    match r {
        Err(_) => Err(()),
        Ok(Ok(0)) | Ok(Err(_)) => {
            c.eof = true;
            Ok(false)
        }
        Ok(Ok(_)) => Ok(true),
    }
}

/// `tcp-check expect`: waits for enough data, then matches.
async fn expect_tcp(
    c: &mut Conn,
    e: &ExpectRule,
    deadline: tokio::time::Instant,
    step_id: usize,
    cmt: &dyn Fn(String) -> String,
    at: &dyn Fn(&str) -> String,
) -> Result<Outcome, Outcome> {
    let status =
        |named: Option<&str>, default: Status| named.and_then(Status::by_code).unwrap_or(default);
    let failed = |text: String| {
        let desc = match &e.on_error {
            Some(t) => t.clone(),
            None => cmt(text),
        };
        Outcome::new(status(e.error_status, Status::L7Rsp), 0, desc)
    };
    let desc_what = match &e.kind {
        ExpectKind::String(s) => format!(" (expect string '{}')", String::from_utf8_lossy(s)),
        ExpectKind::Binary(b) => format!(" (expect binary '{}')", hex_upper(b)),
        ExpectKind::RString(_) => " (expect regex)".into(),
        ExpectKind::RBinary(_) => " (expect binary regex)".into(),
        _ => String::new(),
    };
    loop {
        let last_read = c.eof || c.buf.len() >= MAX_READ;
        if c.buf.is_empty() && last_read {
            return Err(failed(format!(
                "TCPCHK got an empty response at step {step_id}"
            )));
        }
        let need = match &e.kind {
            ExpectKind::String(s) | ExpectKind::Binary(s) => s.len(),
            _ => 0,
        }
        .max(e.min_recv.unwrap_or(0));
        if !c.buf.is_empty() && (last_read || c.buf.len() >= need) {
            let m = match &e.kind {
                ExpectKind::String(s) | ExpectKind::Binary(s) => contains(&c.buf, s),
                ExpectKind::RString(re) => re.is_match(&c.buf),
                ExpectKind::RBinary(re) => re.is_match(&hex_upper(&c.buf)),
                _ => false,
            };
            // Without `min-recv`, a mismatch waits for more data while more may come.
            if m || last_read || e.min_recv.is_some() {
                if m != e.negate {
                    let info = e.on_success.as_deref().unwrap_or("(tcp-check)");
                    return Ok(Outcome::new(status(e.ok_status, Status::L7Ok), 0, info));
                }
                let what = match &e.kind {
                    ExpectKind::String(s) => format!(" '{}'", String::from_utf8_lossy(s)),
                    ExpectKind::Binary(_) => " (binary)".into(),
                    ExpectKind::RString(_) => " (regex)".into(),
                    _ => " (binary regex)".into(),
                };
                let head = if m {
                    "TCPCHK matched unwanted content"
                } else {
                    "TCPCHK did not match content"
                };
                return Err(failed(format!("{head}{what} at step {step_id}")));
            }
        }
        match read_more(c, deadline).await {
            Ok(_) => {}
            Err(()) => {
                let st = status(e.tout_status, Status::L7Tout);
                return Err(Outcome::new(st, 0, at(&desc_what)));
            }
        }
    }
}

/// `option mysql-check`'s expects, as HAProxy judges them: one whole packet; an error packet
/// (0xFF) fails with its code and message (L7STS); the greeting must be protocol 10 (else
/// L7RSP), its version string is the info; a login's answer must be an OK packet (0x00).
async fn expect_mysql(
    c: &mut Conn,
    ok: bool,
    deadline: tokio::time::Instant,
    version: &mut String,
) -> Result<Outcome, Outcome> {
    loop {
        if c.buf.len() >= 4 {
            let len =
                usize::from(c.buf[0]) | usize::from(c.buf[1]) << 8 | usize::from(c.buf[2]) << 16;
            if c.buf.len() >= 4 + len && len > 0 {
                let p = &c.buf[4..4 + len];
                if p[0] == 0xff {
                    let code = p.get(1..3).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                    let msg = String::from_utf8_lossy(p.get(3..).unwrap_or_default()).into_owned();
                    return Err(Outcome::new(Status::L7Sts, code, msg));
                }
                if !ok {
                    if p[0] != 0x0a {
                        return Err(Outcome::new(
                            Status::L7Rsp,
                            0,
                            format!("unsupported protocol version {}", p[0]),
                        ));
                    }
                    let v = &p[1..];
                    let v = &v[..memchr::memchr(0, v).unwrap_or(v.len())];
                    *version = String::from_utf8_lossy(v).into_owned();
                } else if p[0] != 0x00 {
                    return Err(Outcome::new(
                        Status::L7Rsp,
                        0,
                        "unexpected answer to the login",
                    ));
                }
                return Ok(Outcome::new(Status::L7Ok, 0, version.clone()));
            }
        }
        if c.eof || c.buf.len() >= MAX_READ {
            return Err(Outcome::new(Status::L7Rsp, 0, "incomplete MySQL packet"));
        }
        if read_more(c, deadline).await.is_err() {
            return Err(Outcome::new(Status::L7Tout, 0, ""));
        }
    }
}

/// A parsed check response.
struct Resp {
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    minor: u8,
    code: u16,
    reason: String,
    headers: Vec<(String, String)>,
    body_at: usize,
}

/// An HTTP response as the expect rules see it, whatever the HTTP version.
struct HttpResp {
    code: u16,
    /// The reason phrase (HTTP/2 has none: empty, as in HAProxy).
    reason: String,
    headers: Vec<(String, String)>,
    /// At most `MAX_READ` bytes, de-chunked.
    body: Vec<u8>,
}

/// `http-check expect` (or the default 2xx/3xx): reads the whole response (bounded), then
/// matches. Over HTTP/2 the first expect step after a send sends the request and reads the
/// answer; the following ones match the same answer.
async fn expect_http(
    w: &Worker,
    p: &Proxy,
    srv: &ServerState,
    c: &mut Conn,
    rule: Option<&ExpectRule>,
    deadline: tokio::time::Instant,
    cmt: &dyn Fn(String) -> String,
) -> Result<Outcome, Outcome> {
    let _ = w;
    if let Wire::H2(h) = &mut c.s {
        let resp = match h.resp.take() {
            Some(r) => r,
            None => match h2_exchange(h, deadline).await {
                Ok(r) => r,
                Err((st, desc)) => return Err(Outcome::new(st, 0, cmt(desc))),
            },
        };
        c.reusable = h.ended.is_none();
        let out = judge(p, srv, &resp, rule, cmt);
        h.resp = Some(resp);
        return out;
    }
    let resp = loop {
        match parse_head(&c.buf) {
            Ok(Some(r)) => {
                // Read the body: by length, chunked to its end, or to EOF.
                if body_complete(&r, &c.buf) || c.eof || c.buf.len() >= MAX_READ {
                    c.reusable = keep_alive(&r)
                        && body_complete(&r, &c.buf)
                        && !c.eof
                        && !trailing_bytes(&r, &c.buf);
                    break r;
                }
            }
            Ok(None) => {
                if c.eof || c.buf.len() >= MAX_READ {
                    return Err(Outcome::new(Status::L7Rsp, 0, cmt(String::new())));
                }
            }
            Err(()) => return Err(Outcome::new(Status::L7Rsp, 0, cmt(String::new()))),
        }
        if read_more(c, deadline).await.is_err() {
            return Err(Outcome::new(Status::L7Tout, 0, cmt(String::new())));
        }
        if c.eof && c.buf.is_empty() {
            return Err(Outcome::new(
                Status::L7Rsp,
                0,
                cmt("TCPCHK got an empty response".to_string()),
            ));
        }
    };
    let body = decoded_body(&resp, &c.buf);
    let resp = HttpResp {
        code: resp.code,
        reason: resp.reason,
        headers: resp.headers,
        body,
    };
    judge(p, srv, &resp, rule, cmt)
}

/// Matches a response against an `http-check expect` rule (`None`: 2xx or 3xx).
fn judge(
    p: &Proxy,
    srv: &ServerState,
    resp: &HttpResp,
    rule: Option<&ExpectRule>,
    cmt: &dyn Fn(String) -> String,
) -> Result<Outcome, Outcome> {
    let code = resp.code;
    let body = &resp.body;
    // `disable-on-404`: a 404 from a server that is up means "stopping" (NOLB).
    if p.options.disable_on_404 && code == 404 && srv.up.load(Relaxed) {
        return Ok(Outcome::new(Status::L7OkC, code, resp.reason.clone()));
    }
    let Some(e) = rule else {
        return if (200..400).contains(&code) {
            Ok(Outcome::new(Status::L7Ok, code, resp.reason.clone()))
        } else {
            Err(Outcome::new(Status::L7Sts, code, cmt(resp.reason.clone())))
        };
    };
    let (m, fail_status, fail_desc) = match &e.kind {
        ExpectKind::Status(ranges) => (
            ranges.iter().any(|(a, b)| (*a..=*b).contains(&code)),
            Status::L7Sts,
            resp.reason.clone(),
        ),
        ExpectKind::RStatus(re) => (
            re.is_match(&code.to_string()),
            Status::L7Sts,
            resp.reason.clone(),
        ),
        ExpectKind::Hdr { name, value, full } => {
            let m = resp.headers.iter().any(|(n, v)| {
                if !name.matches(n, true) {
                    return false;
                }
                let Some(vm) = value else { return true };
                if *full {
                    vm.matches(v, false)
                } else {
                    v.split(',').any(|part| vm.matches(part.trim(), false))
                }
            });
            (m, Status::L7Sts, resp.reason.clone())
        }
        ExpectKind::String(s) | ExpectKind::Binary(s) => {
            if body.is_empty() {
                return Err(Outcome::new(
                    Status::L7Rsp,
                    code,
                    cmt("HTTP content check could not find a response body".into()),
                ));
            }
            (contains(body, s), Status::L7Rsp, String::new())
        }
        ExpectKind::RString(re) => {
            if body.is_empty() {
                return Err(Outcome::new(
                    Status::L7Rsp,
                    code,
                    cmt("HTTP content check could not find a response body".into()),
                ));
            }
            (re.is_match(body), Status::L7Rsp, String::new())
        }
        ExpectKind::RBinary(_) | ExpectKind::Mysql { .. } => (false, Status::L7Rsp, String::new()),
    };
    if m != e.negate {
        return Ok(Outcome::new(Status::L7Ok, code, resp.reason.clone()));
    }
    let desc = if fail_status == Status::L7Rsp {
        if e.negate {
            "HTTP check matched unwanted content".to_string()
        } else {
            "HTTP content check did not match".to_string()
        }
    } else {
        fail_desc
    };
    Err(Outcome::new(fail_status, code, cmt(desc)))
}

/// Parses a response head; `Ok(None)` = incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Resp>, ()> {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    match r.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(()),
        Ok(httparse::Status::Complete(n)) => Ok(Some(Resp {
            minor: r.version.unwrap_or(0),
            code: r.code.ok_or(())?,
            reason: r.reason.unwrap_or("").to_string(),
            headers: r
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect(),
            body_at: n,
        })),
    }
}

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn chunked(r: &Resp) -> bool {
    header(r, "transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
}

fn keep_alive(r: &Resp) -> bool {
    let conn = header(r, "connection").map(str::to_ascii_lowercase);
    let close = conn.as_deref().is_some_and(|v| v.contains("close"));
    // HTTP/1.0 closes unless the server says otherwise.
    let open = r.minor >= 1 || conn.as_deref().is_some_and(|v| v.contains("keep-alive"));
    open && !close && (chunked(r) || header(r, "content-length").is_some() || no_body(r))
}

fn no_body(r: &Resp) -> bool {
    (100..200).contains(&r.code) || r.code == 204 || r.code == 304
}

fn body_complete(r: &Resp, buf: &[u8]) -> bool {
    let body = &buf[r.body_at..];
    if no_body(r) {
        return true;
    }
    if chunked(r) {
        return dechunk(body).1;
    }
    match header(r, "content-length").and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(n) => body.len() >= n,
        None => false,
    }
}

/// Bytes after the end of a response framed by length (or without a body): a connection
/// carrying them is not in a known state, so it is not reused.
fn trailing_bytes(r: &Resp, buf: &[u8]) -> bool {
    if no_body(r) {
        return buf.len() > r.body_at;
    }
    if chunked(r) {
        return false;
    }
    header(r, "content-length")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|n| buf.len() > r.body_at + n)
}

fn decoded_body(r: &Resp, buf: &[u8]) -> Vec<u8> {
    let body = &buf[r.body_at.min(buf.len())..];
    if chunked(r) {
        return dechunk(body).0;
    }
    match header(r, "content-length").and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(n) => body[..n.min(body.len())].to_vec(),
        None => body.to_vec(),
    }
}

/// Decodes as much of a chunked body as is there; `.1` = the last chunk was seen.
fn dechunk(mut b: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|x| x == b"\r\n") else {
            return (out, false);
        };
        let line = String::from_utf8_lossy(&b[..eol]);
        let size = line.split(';').next().unwrap_or("").trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            return (out, false);
        };
        b = &b[eol + 2..];
        if n == 0 {
            return (out, true);
        }
        if b.len() < n {
            out.extend_from_slice(b);
            return (out, false);
        }
        out.extend_from_slice(&b[..n]);
        b = &b[(n + 2).min(b.len())..];
    }
}

/// What an HTTP check request says about its connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ConnEnd {
    /// Nothing (another request follows on it if the response allows).
    Default,
    /// `Connection: close`: the last request of the check.
    Close,
    /// Kept open (a pooled connection goes back to the pool): `Connection: keep-alive` for
    /// HTTP/1.0, whose default is to close.
    KeepAlive,
}

/// The request of an HTTP check, before it is put in one HTTP version or the other.
struct ReqParts<'a> {
    meth: &'a str,
    uri: &'a str,
    ver: &'a str,
    hdrs: Vec<(String, String)>,
    body: &'a str,
}

/// The request of an HTTP check: `option httpchk`'s line, overridden by `http-check send`.
fn request_parts<'a>(
    w: &Worker,
    p: &Proxy,
    srv: &ServerState,
    base: Option<&'a HttpChk>,
    send: Option<&'a HttpSend>,
) -> ReqParts<'a> {
    let meth = send
        .and_then(|s| s.meth.as_deref())
        .or(base.map(|b| b.method.as_str()))
        .unwrap_or("OPTIONS");
    let uri = send
        .and_then(|s| s.uri.as_deref())
        .or(base.map(|b| b.uri.as_str()))
        .unwrap_or("/");
    let ver = send
        .and_then(|s| s.ver.as_deref())
        .or(base.map(|b| b.version.as_str()))
        .unwrap_or("HTTP/1.0");
    // `option httpchk`'s own headers first, then those of `http-check send` (as HAProxy merges
    // the two rules).
    let mut hdrs: Vec<(String, String)> = base.map(|b| b.hdrs.clone()).unwrap_or_default();
    hdrs.extend(send.map(|s| s.hdrs.clone()).unwrap_or_default());
    if p.options.send_state {
        hdrs.push((
            "X-Haproxy-Server-State".into(),
            server_state_header(w, p, srv),
        ));
    }
    let body = send
        .and_then(|s| s.body.as_deref())
        .or(base.map(|b| b.body.as_str()))
        .unwrap_or("");
    ReqParts {
        meth,
        uri,
        ver,
        hdrs,
        body,
    }
}

/// The request in HTTP/1.x.
fn http1_request(r: &ReqParts, end: ConnEnd) -> Vec<u8> {
    let mut out = format!("{} {} {}\r\n", r.meth, r.uri, r.ver);
    for (n, v) in &r.hdrs {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    if !r.body.is_empty() {
        out.push_str(&format!("Content-Length: {}\r\n", r.body.len()));
    }
    match end {
        ConnEnd::Close => out.push_str("Connection: close\r\n"),
        ConnEnd::KeepAlive if r.ver == "HTTP/1.0" => out.push_str("Connection: keep-alive\r\n"),
        _ => {}
    }
    out.push_str("\r\n");
    out.push_str(r.body);
    out.into_bytes()
}

/// The request in HTTP/2: the version is not sent (HTTP/2 has none); `Host` becomes the
/// `:authority` (scheme `https` over TLS), and the fields HTTP/2 forbids (connection-specific,
/// RFC 9113 §8.2.2) are left out, as HAProxy's h2 multiplexer does.
fn h2_request(r: &ReqParts, tls: bool) -> Result<(http::Request<()>, Bytes), String> {
    let host = r
        .hdrs
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.as_str());
    let uri = match host {
        Some(h) if r.uri.starts_with('/') => {
            format!("{}://{h}{}", if tls { "https" } else { "http" }, r.uri)
        }
        _ => r.uri.to_string(),
    };
    let mut b = http::Request::builder().method(r.meth).uri(uri);
    for (n, v) in &r.hdrs {
        let lower = n.to_ascii_lowercase();
        let banned = matches!(
            lower.as_str(),
            "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
        ) || (lower == "te" && !v.eq_ignore_ascii_case("trailers"));
        if !banned {
            b = b.header(n.as_str(), v.as_str());
        }
    }
    if !r.body.is_empty() {
        b = b.header("content-length", r.body.len());
    }
    let req = b
        .body(())
        .map_err(|e| format!("invalid HTTP/2 request: {e}"))?;
    Ok((req, Bytes::copy_from_slice(r.body.as_bytes())))
}

/// Sends the pending request of an HTTP/2 check and reads its answer (the head, and the body
/// up to `MAX_READ` bytes), driving the connection meanwhile. Failures: `L7TOUT` past the
/// deadline, else `L7RSP` with what went wrong.
async fn h2_exchange(
    h: &mut H2Conn,
    deadline: tokio::time::Instant,
) -> Result<HttpResp, (Status, String)> {
    let Some((req, body)) = h.pending.take() else {
        return Err((Status::SockErr, "no request".into()));
    };
    if let Some(why) = &h.ended {
        return Err((Status::L7Rsp, why.clone()));
    }
    let send = h.send.clone();
    let work = async move {
        let mut send = send.ready().await?;
        let end = body.is_empty();
        let (resp, mut stream) = send.send_request(req, end)?;
        if !end {
            stream.send_data(body, true)?;
        }
        let (parts, mut recv) = resp.await?.into_parts();
        let mut data = Vec::new();
        while data.len() < MAX_READ {
            let Some(chunk) = recv.data().await else {
                break;
            };
            let chunk = chunk?;
            let _ = recv.flow_control().release_capacity(chunk.len());
            let room = MAX_READ - data.len();
            data.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        Ok::<_, h2::Error>((parts, data))
    };
    let (conn, ended, head) = (&mut h.conn, &mut h.ended, &h.head);
    let run = async {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            biased;
            r = &mut work => return r,
            r = conn.as_mut() => *ended = Some(h2_end(r.err(), &head.borrow())),
        }
        // The connection ended first: what it received may still complete the answer.
        work.await
    };
    match tokio::time::timeout_at(deadline, run).await {
        Err(_) => Err((Status::L7Tout, String::new())),
        Ok(Ok((parts, body))) => Ok(HttpResp {
            code: parts.status.as_u16(),
            reason: String::new(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body,
        }),
        Ok(Err(e)) => Err((
            Status::L7Rsp,
            h.ended
                .clone()
                .unwrap_or_else(|| h2_end(Some(e), &h.head.borrow())),
        )),
    }
}

/// Why an HTTP/2 check connection failed or ended, given its error (`None`: closed cleanly)
/// and the first bytes the server sent.
fn h2_end(e: Option<h2::Error>, head: &[u8]) -> String {
    if head.starts_with(b"HTTP/") {
        return "HTTP/2 check got an HTTP/1.x response".into();
    }
    match e {
        _ if head.is_empty() => "TCPCHK got an empty response".into(),
        None => "HTTP/2 connection closed by the server".into(),
        Some(e) => format!("HTTP/2 error: {e}"),
    }
}

/// `http-check send-state`: `UP 2/3; address=...; port=...; name=be/s; node=...;
/// weight=W/TOTAL; scur=S/BESCUR; qcur=Q`, as HAProxy builds it.
fn server_state_header(w: &Worker, p: &Proxy, srv: &ServerState) -> String {
    let be = w.shared.backend(
        w.shared
            .cfg
            .proxies
            .iter()
            .position(|x| std::ptr::eq(x, p))
            .unwrap_or(0),
    );
    let state = match srv.check.as_ref() {
        None => "no check".to_string(),
        Some(st) if !st.enabled.load(Relaxed) => "no check".to_string(),
        Some(st) => {
            let h = st.health.load(Relaxed);
            let nolb = srv.health.nolb.load(Relaxed);
            if srv.up.load(Relaxed) {
                let word = if nolb { "NOLB" } else { "UP" };
                if h == st.rise + st.fall - 1 {
                    word.to_string()
                } else {
                    format!("{word} {}/{}", h.saturating_sub(st.rise) + 1, st.fall)
                }
            } else if h > 0 {
                format!("DOWN {h}/{}", st.rise)
            } else {
                "DOWN".to_string()
            }
        }
    };
    let addr = **srv.addr.load();
    let node = w
        .shared
        .cfg
        .global
        .node
        .clone()
        .unwrap_or_else(crate::util::hostname);
    let total: u32 = be
        .servers
        .iter()
        .filter(|s| s.usable() && s.backup == srv.backup)
        .map(|s| s.eweight())
        .sum();
    format!(
        "{state}; address={}; port={}; name={}/{}; node={node}; weight={}/{total}; scur={}/{}; qcur={}",
        addr.ip(),
        addr.port(),
        p.name,
        srv.name,
        srv.eweight(),
        srv.served.load(Relaxed),
        be.cur_conns.load(Relaxed),
        srv.queued.load(Relaxed),
    )
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || memchr::memmem::find(hay, needle).is_some()
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

// =============================================================================================
// Agent checks
// =============================================================================================

/// The agent task of one server: connects to the agent every `agent-inter`, sends
/// `agent-send`, reads one line and applies it.
async fn run_agent(w: Rc<Worker>, pi: usize, si: usize, first: Duration) {
    let shared = w.shared.clone();
    let p = &shared.cfg.proxies[pi];
    let srv = shared.server(pi, si);
    let (Some(cfg), Some(ag)) = (srv.conf.health.agent.clone(), srv.health.agent.as_ref()) else {
        return;
    };
    tokio::time::sleep(first).await;
    loop {
        if w.stopping.get() || srv.deleted.load(Relaxed) {
            return;
        }
        if !ag.enabled.load(Relaxed) {
            // `disable agent`: no new agent check until `enable agent`.
            tokio::time::sleep(cfg.inter).await;
            continue;
        }
        let start = Instant::now();
        let connect_to = p.timeouts.connect.map_or(cfg.inter, |c| c.min(cfg.inter));
        let read_to = p.timeouts.check.unwrap_or(cfg.inter);
        // Read at each run: `set server ... agent-addr|agent-port|agent-send` apply to the next.
        let Some(target) = ag.target() else { return };
        let addr = SocketAddr::new(target.addr.unwrap_or(srv.addr.load().ip()), target.port);
        let _slot = CheckSlot::take(shared.cfg.global.checks.max_per_thread).await;
        let res = Box::pin(async {
            let src = srv.source_now();
            let mut c = connect(addr, None, src, connect_to, None, None, false, Mux::Plain).await?;
            if let Some(s) = &target.send
                && let Some(io) = c.s.raw()
            {
                io.write_all(s.as_bytes())
                    .await
                    .map_err(|e| (Status::SockErr, e.to_string()))?;
            }
            let deadline = tokio::time::Instant::now() + read_to;
            loop {
                if let Some(i) = c.buf.iter().position(|&b| b == b'\n' || b == b'\r') {
                    c.buf.truncate(i);
                    return Ok(Some(c.buf));
                }
                match read_more(&mut c, deadline).await {
                    Ok(true) => {}
                    // HAProxy ignores an incomplete line.
                    Ok(false) => return Ok(None),
                    Err(()) => return Err((Status::L7Tout, String::new())),
                }
            }
        })
        .await;
        let ms = start.elapsed().as_millis() as u64;
        ag.last_duration_ms.store(ms, Relaxed);
        match res {
            Err((st, e)) => {
                // Failing to reach the agent never marks the server down.
                ag.status.store(st as u8, Relaxed);
                if let Ok(mut d) = ag.desc.lock() {
                    *d = e;
                }
            }
            Ok(None) => {
                if let Ok(mut d) = ag.desc.lock() {
                    *d = "Ignoring incomplete line from agent".into();
                }
            }
            Ok(Some(line)) => {
                apply_agent(&w, p, pi, si, &String::from_utf8_lossy(&line), ms);
            }
        }
        drop(_slot);
        tokio::time::sleep(jitter(cfg.inter, shared.cfg.global.checks.spread)).await;
    }
}

/// What an agent line asks for (HAProxy's agent protocol): words separated by spaces, tabs
/// or commas, in any order, the last of each kind winning; `#` starts a description.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AgentReply {
    /// `up` (true) or `down`/`stopped`/`fail` (false), with the word.
    pub health: Option<(bool, String)>,
    /// `ready`, `drain` or `maint`.
    pub admin: Option<String>,
    /// `N%`.
    pub weight: Option<String>,
    /// `maxconn:N` (the value).
    pub maxconn: Option<String>,
    /// The first word it did not understand.
    pub error: Option<String>,
    pub desc: String,
}

pub fn parse_agent(line: &str) -> AgentReply {
    let mut r = AgentReply::default();
    let (words, desc) = match line.split_once('#') {
        Some((a, d)) => (a, d.trim()),
        None => (line, ""),
    };
    r.desc = desc.to_string();
    for word in words.split([' ', '\t', ',']).filter(|x| !x.is_empty()) {
        let lw = word.to_ascii_lowercase();
        match lw.as_str() {
            "up" => r.health = Some((true, word.to_string())),
            "down" | "stopped" | "fail" => r.health = Some((false, word.to_string())),
            "ready" | "drain" | "maint" => r.admin = Some(lw),
            _ if word.as_bytes()[0].is_ascii_digit() && word.contains('%') => {
                r.weight = Some(word.to_string())
            }
            _ if lw.starts_with("maxconn:") => r.maxconn = Some(word[8..].to_string()),
            _ => {
                if r.error.is_none() {
                    r.error = Some(word.to_string());
                }
            }
        }
    }
    r
}

fn apply_agent(w: &Worker, p: &Proxy, pi: usize, si: usize, line: &str, ms: u64) {
    let shared = &w.shared;
    let srv = shared.server(pi, si);
    let be = shared.backend(pi);
    let Some(ag) = srv.health.agent.as_ref() else {
        return;
    };
    let mut r = parse_agent(line);
    if !ag.enabled.load(Relaxed) {
        // Disabled while this check ran: what would change the weight is ignored (HAProxy),
        // so that `set weight` is not overridden.
        r.weight = None;
        if r.admin.as_deref() == Some("drain") {
            r.admin = None;
        }
    }
    // Admin state first, then weight and maxconn, then health (HAProxy's order).
    if let Some(a) = &r.admin {
        let st = match a.as_str() {
            "drain" => crate::cli::AdminState::Drain,
            "maint" => crate::cli::AdminState::Maint,
            _ => crate::cli::AdminState::Ready,
        };
        crate::cli::set_state(be, srv, st);
    }
    let mut warn = String::new();
    if let Some(wt) = &r.weight {
        warn = crate::cli::set_weight(be, srv, wt).trim_end().to_string();
    }
    if let Some(mc) = &r.maxconn {
        let m = crate::cli::set_maxconn(be, srv, mc).trim_end().to_string();
        if warn.is_empty() {
            warn = m;
        }
    }
    let (status, desc) = match &r.health {
        Some((up, word)) => {
            let mut msg = r.desc.clone();
            if msg.is_empty() || *up {
                if let Some(e) = &r.error {
                    msg = e.clone();
                } else if !warn.is_empty() {
                    msg = warn.clone();
                }
            }
            let desc = if msg.is_empty() {
                format!("via agent : {word}")
            } else {
                format!("via agent : {word} ({msg})")
            };
            (if *up { Status::L7Ok } else { Status::L7Sts }, desc)
        }
        None => match (&r.error, warn.is_empty()) {
            (Some(e), _) => (Status::Checked, format!("agent reports an error : {e}")),
            (None, false) => (Status::Checked, format!("agent warns : {warn}")),
            (None, true) => (Status::Checked, String::new()),
        },
    };
    ag.status.store(status as u8, Relaxed);
    if let Ok(mut d) = ag.desc.lock() {
        d.clone_from(&desc);
    }
    if let Some((up, _)) = r.health {
        ag.up.store(up, Relaxed);
    }
    let why = Why::Check {
        status,
        code: 0,
        desc: &desc,
        ms: Some(ms),
        logged: false,
    };
    if !update_state(w, pi, si, &why) && p.options.log_health_checks && r.health.is_some() {
        let line = format!(
            "Agent check for {}server {}/{} {}, reason: {}{}{}, status: {}.",
            if srv.backup { "backup " } else { "" },
            p.name,
            srv.name,
            if status == Status::L7Sts {
                "failed"
            } else {
                "succeeded"
            },
            status.reason(),
            info_text(&why),
            duration_text(&why),
            if ag.up.load(Relaxed) {
                "1/1 UP"
            } else {
                "0/1 DOWN"
            },
        );
        w.log.emit(&p.logs, 5, &line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The socket a descriptor refers to (`socket:[inode]`), to tell a reused socket from a
    /// new one that happens to get the same descriptor number.
    fn socket_id(s: &tokio::net::TcpStream) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", s.as_raw_fd())).unwrap()
    }

    #[test]
    fn a_bare_check_socket_is_dissolved_and_reused() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Listening, never accepting: a bare check needs only the handshake.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let up = l.local_addr().unwrap();
            let down = {
                let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                t.local_addr().unwrap()
            };
            let spares = || SPARE.with(|sp| sp.borrow()[0].len());
            assert_eq!(spares(), 0);
            let a = connect_spare(up).await.unwrap();
            let id = socket_id(&a);
            let port_a = a.local_addr().unwrap().port();
            spare_keep(a, false);
            assert_eq!(spares(), 1);
            // The next check connects the same socket again, from a new source port.
            let b = connect_spare(up).await.unwrap();
            assert_eq!(spares(), 0);
            assert_eq!(socket_id(&b), id);
            assert_eq!(b.peer_addr().unwrap(), up);
            assert_ne!(b.local_addr().unwrap().port(), port_a);
            spare_keep(b, false);
            // A refused connect on a reused socket is reported as such, and that socket is
            // not kept: the next check gets a new one that works.
            let e = connect_spare(down).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
            assert_eq!(spares(), 0);
            let c = connect_spare(up).await.unwrap();
            assert_ne!(socket_id(&c), id);
            spare_keep(c, false);
            assert_eq!(spares(), 1);
        });
    }

    fn st(rise: u32, fall: u32) -> CheckState {
        CheckState::new(&CheckCfg {
            inter: Duration::from_secs(1),
            fastinter: Duration::from_secs(1),
            downinter: Duration::from_secs(1),
            rise,
            fall,
            port: None,
            addr: None,
            send_proxy: false,
            ssl: None,
            sni: None,
            alpn: None,
            proto: None,
            reuse_pool: false,
        })
    }

    #[test]
    fn http2_requests_and_failure_texts() {
        let hdrs = vec![
            ("Host".to_string(), "a.example".to_string()),
            ("Connection".to_string(), "close".to_string()),
            ("TE".to_string(), "gzip".to_string()),
            ("X-Probe".to_string(), "1".to_string()),
        ];
        let r = ReqParts {
            meth: "POST",
            uri: "/p?q=1",
            ver: "HTTP/1.0",
            hdrs,
            body: "ping",
        };
        let (req, body) = h2_request(&r, true).unwrap();
        assert_eq!(req.uri().to_string(), "https://a.example/p?q=1");
        assert_eq!(req.method(), "POST");
        let names: Vec<&str> = req.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-probe", "content-length"]);
        assert_eq!(&body[..], b"ping");
        let (req, _) = h2_request(&ReqParts { hdrs: vec![], ..r }, false).unwrap();
        assert_eq!(req.uri().to_string(), "/p?q=1");
        assert_eq!(
            h2_end(None, b"HTTP/1.1 400"),
            "HTTP/2 check got an HTTP/1.x response"
        );
        assert_eq!(h2_end(None, b""), "TCPCHK got an empty response");
        assert_eq!(
            h2_end(None, b"\0\0\x12\x04"),
            "HTTP/2 connection closed by the server"
        );
    }

    #[test]
    fn starts_up_and_falls_at_the_first_failure() {
        let s = st(2, 3);
        assert_eq!(s.status_text(), "UP 1/3");
        assert_eq!(apply(&s, false), Some(false));
        assert_eq!(s.status_text(), "DOWN");
        assert_eq!(apply(&s, true), None);
        assert_eq!(s.status_text(), "DOWN 1/2");
        assert_eq!(apply(&s, true), Some(true));
        assert_eq!(s.status_text(), "UP");
        // Now fully up: it takes `fall` failures to go down.
        assert_eq!(apply(&s, false), None);
        assert_eq!(s.status_text(), "UP 2/3");
        assert_eq!(apply(&s, false), None);
        assert_eq!(s.status_text(), "UP 1/3");
        assert_eq!(apply(&s, true), None);
        assert_eq!(s.status_text(), "UP");
        for _ in 0..2 {
            assert_eq!(apply(&s, false), None);
        }
        assert_eq!(apply(&s, false), Some(false));
        assert_eq!(s.downs.load(Relaxed), 2);
        // A failure while going up starts over.
        assert_eq!(apply(&s, true), None);
        assert_eq!(apply(&s, false), None);
        assert_eq!(s.status_text(), "DOWN");
    }

    #[test]
    fn response_heads_and_bodies() {
        let r = parse_head(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.code, r.reason.as_str()), (503, "Service Unavailable"));
        assert!(parse_head(b"SSH-2.0\r\n").is_err());
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        let r = parse_head(raw).unwrap().unwrap();
        assert!(body_complete(&r, raw));
        assert_eq!(decoded_body(&r, raw), b"hello");
        let raw = b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nhello";
        let r = parse_head(raw).unwrap().unwrap();
        assert!(!body_complete(&r, raw));
    }

    #[test]
    fn reusable_responses() {
        let r = |raw: &[u8]| parse_head(raw).unwrap().unwrap();
        // HTTP/1.0 closes unless it says keep-alive; `close` always closes.
        assert!(!keep_alive(&r(
            b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"
        )));
        assert!(keep_alive(&r(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
        )));
        assert!(keep_alive(&r(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
        )));
        assert!(!keep_alive(&r(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n"
        )));
        // Unframed: the body ends at the close.
        assert!(!keep_alive(&r(b"HTTP/1.1 200 OK\r\n\r\n")));
        // Bytes after the announced end leave the connection in an unknown state.
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1";
        assert!(trailing_bytes(&r(raw), raw));
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert!(!trailing_bytes(&r(raw), raw));
        let raw = b"HTTP/1.1 204 No Content\r\n\r\nx";
        assert!(trailing_bytes(&r(raw), raw));
    }

    #[test]
    fn agent_words() {
        let r = parse_agent("75%, drain maxconn:30 #going away");
        assert_eq!(r.weight.as_deref(), Some("75%"));
        assert_eq!(r.admin.as_deref(), Some("drain"));
        assert_eq!(r.maxconn.as_deref(), Some("30"));
        assert_eq!(r.desc, "going away");
        assert_eq!(r.health, None);
        let r = parse_agent("up\tready junk stopped");
        assert_eq!(r.health, Some((false, "stopped".into())));
        assert_eq!(r.error.as_deref(), Some("junk"));
    }

    #[test]
    fn spreading_and_migration_rules() {
        let d = Duration::from_secs(1);
        assert_eq!(jitter(d, 0), d);
        for _ in 0..100 {
            let j = jitter(d, 10);
            assert!(
                j >= Duration::from_millis(899) && j <= Duration::from_millis(1101),
                "{j:?}"
            );
        }
        assert!(should_migrate(10, 4));
        assert!(!should_migrate(10, 5));
        assert!(
            !should_migrate(1, 0),
            "a lone check does not bounce between threads"
        );
        // After a move the reverse move is never due.
        assert!(should_migrate(4, 1) && !should_migrate(2, 3));
    }

    #[test]
    fn observe_table() {
        use Observe::*;
        assert_eq!(Observed::L4Ok.verdict(Layer4), Some(false));
        assert_eq!(Observed::L4Ok.verdict(Layer7), None);
        assert_eq!(Observed::L4Err.verdict(Layer7), Some(true));
        assert_eq!(Observed::HttpSts.verdict(Layer4), None);
        assert_eq!(Observed::HttpSts.verdict(Layer7), Some(true));
        assert_eq!(Observed::HttpOk.verdict(Layer7), Some(false));
    }
}
