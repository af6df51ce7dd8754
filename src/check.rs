//! `check`: server health checks (DESIGN §5), first slice: TCP connect checks and
//! `option httpchk` with `http-check expect`, `inter`/`fastinter`/`downinter`, `rise`/`fall`,
//! `port`/`addr`, `timeout check`, HAProxy's state machine, log lines and stats columns.
//!
//! Owns each checked server's check task (spread over the worker threads at start-up, one
//! task per server on its thread) and the shared `CheckState` the stats plane reads. It
//! changes a server's operational state (`ServerState::up`) and asks the backend to rebuild
//! its tables; it must not touch client or pooled server connections: checks use their own.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::backend::unix_now;
use crate::config::{CheckCfg, ExpectKind, Proxy};
use crate::worker::Worker;

/// Result codes, as HAProxy names them in `check_status`.
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
}

impl Status {
    /// Every result a finished check can have, in HAProxy's order of check statuses.
    pub const RESULTS: [Status; 7] = [
        Status::L4Ok,
        Status::L4Tout,
        Status::L4Con,
        Status::L7Tout,
        Status::L7Rsp,
        Status::L7Ok,
        Status::L7Sts,
    ];

    fn from_u8(v: u8) -> Status {
        match v {
            1 => Status::L4Ok,
            2 => Status::L4Tout,
            3 => Status::L4Con,
            4 => Status::L7Ok,
            5 => Status::L7Tout,
            6 => Status::L7Rsp,
            7 => Status::L7Sts,
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
        }
    }

    /// HAProxy's reason text for log lines.
    fn reason(self) -> &'static str {
        match self {
            Status::Ini => "Initializing",
            Status::L4Ok => "Layer4 check passed",
            Status::L4Tout => "Layer4 timeout",
            Status::L4Con => "Layer4 connection problem",
            Status::L7Ok => "Layer7 check passed",
            Status::L7Tout => "Layer7 timeout",
            Status::L7Rsp => "Layer7 invalid response",
            Status::L7Sts => "Layer7 wrong status",
        }
    }

    fn ok(self) -> bool {
        matches!(self, Status::L4Ok | Status::L7Ok)
    }

    /// HAProxy's numeric `HCHK_STATUS_*` value (`show servers state`'s `srv_check_status`).
    pub fn haproxy_code(self) -> u32 {
        match self {
            Status::Ini => 1,
            Status::L4Ok => 6,
            Status::L4Tout => 7,
            Status::L4Con => 8,
            Status::L7Tout => 12,
            Status::L7Rsp => 13,
            Status::L7Ok => 15,
            Status::L7Sts => 17,
        }
    }

    /// HAProxy's `CHK_RES_*`: 0 unknown, 2 failed, 3 passed.
    pub fn result_code(self) -> u32 {
        match self {
            Status::Ini => 0,
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
    /// `disable health` stops the checks (the server then counts as UP) until `enable health`.
    pub enabled: std::sync::atomic::AtomicBool,
    /// How long every check took (the exporter's `haproxy_server_check_time_seconds`).
    pub durations: crate::histogram::Histogram,
}

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
            enabled: std::sync::atomic::AtomicBool::new(true),
            durations: crate::histogram::Histogram::default(),
        }
    }

    pub fn status(&self) -> Status {
        Status::from_u8(self.status.load(Relaxed))
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

/// Starts the check tasks of the servers this worker thread owns: checked servers are dealt
/// round-robin over threads, and each first check is spread over its interval so that
/// thousands of servers do not all connect at once.
pub fn spawn_checks(w: &Rc<Worker>, thread: usize, nbthread: usize) {
    let shared = w.shared.clone();
    let mut n = 0usize;
    for (pi, p) in shared.cfg.proxies.iter().enumerate() {
        for (si, s) in p.servers.iter().enumerate() {
            let Some(cfg) = s.check.clone() else { continue };
            let mine = n % nbthread == thread;
            n += 1;
            if !mine {
                continue;
            }
            let w = w.clone();
            // Spread: the k-th checked server starts at k/N of its interval.
            let offset = cfg.inter.mul_f64((n % 97) as f64 / 97.0);
            tokio::task::spawn_local(async move {
                tokio::time::sleep(offset).await;
                run(w, pi, si, cfg).await;
            });
        }
    }
}

/// Starts the checks of a server added at run time (`add server ... check`) on this thread.
pub fn spawn_one(w: &Rc<Worker>, pi: usize, si: usize, cfg: CheckCfg) {
    tokio::task::spawn_local(run(w.clone(), pi, si, cfg));
}

async fn run(w: Rc<Worker>, pi: usize, si: usize, cfg: CheckCfg) {
    let shared = w.shared.clone();
    let p = &shared.cfg.proxies[pi];
    let srv = shared.server(pi, si);
    let st = srv.check.as_ref().expect("checked server has check state");
    loop {
        if w.stopping.get() || srv.deleted.load(Relaxed) {
            return;
        }
        if !st.enabled.load(Relaxed) {
            tokio::time::sleep(cfg.inter).await;
            continue;
        }
        let start = Instant::now();
        let base = **srv.addr.load();
        let addr = SocketAddr::new(
            cfg.addr.unwrap_or(base.ip()),
            cfg.port.unwrap_or(base.port()),
        );
        let (status, code, info) = check_once(p, addr, &cfg).await;
        let took = start.elapsed();
        let ms = took.as_millis() as u64;
        st.durations.record(took);
        st.status.store(status as u8, Relaxed);
        st.last_code.store(code as u32, Relaxed);
        st.last_duration_ms.store(ms, Relaxed);
        if !status.ok() {
            st.failed.fetch_add(1, Relaxed);
        }
        let transition = apply(st, status.ok());
        report(&w, p, pi, si, status, &info, ms, transition);
        let h = st.health.load(Relaxed);
        let wait = if h == 0 {
            cfg.downinter
        } else if h == st.rise + st.fall - 1 {
            cfg.inter
        } else {
            cfg.fastinter
        };
        tokio::time::sleep(wait).await;
    }
}

/// HAProxy's health counter update; returns `Some(true)` when the server just went UP,
/// `Some(false)` when it just went DOWN.
pub fn apply(st: &CheckState, ok: bool) -> Option<bool> {
    let (rise, fall) = (st.rise, st.fall);
    let full = rise + fall - 1;
    let h = st.health.load(Relaxed);
    if ok {
        if h >= rise {
            st.health.store(full, Relaxed);
            None
        } else {
            let n = h + 1;
            if n >= rise {
                st.health.store(full, Relaxed);
                Some(true)
            } else {
                st.health.store(n, Relaxed);
                None
            }
        }
    } else if h >= rise {
        let n = h - 1;
        if n < rise {
            st.health.store(0, Relaxed);
            st.downs.fetch_add(1, Relaxed);
            Some(false)
        } else {
            st.health.store(n, Relaxed);
            None
        }
    } else {
        st.health.store(0, Relaxed);
        None
    }
}

/// `set server B/S health up|down` and `enable|disable health`: forces the health counter
/// and the server's state at once. Returns whether the server's state changed.
pub fn force(
    srv: &crate::backend::ServerState,
    be: &crate::backend::BackendState,
    up: bool,
) -> bool {
    let Some(st) = srv.check.as_ref() else {
        return false;
    };
    st.health
        .store(if up { st.rise + st.fall - 1 } else { 0 }, Relaxed);
    let changed = srv.up.swap(up, Relaxed) != up;
    if changed {
        if !up {
            st.downs.fetch_add(1, Relaxed);
        }
        srv.last_change.store(unix_now(), Relaxed);
        be.changed();
    }
    changed
}

/// Applies a transition to the server and logs it; logs each check with
/// `option log-health-checks`.
#[allow(clippy::too_many_arguments)]
fn report(
    w: &Worker,
    p: &Proxy,
    pi: usize,
    si: usize,
    status: Status,
    info: &str,
    ms: u64,
    transition: Option<bool>,
) {
    let shared = &w.shared;
    let srv = shared.server(pi, si);
    let st = srv.check.as_ref().expect("check state");
    let info_part = if info.is_empty() {
        String::new()
    } else {
        format!(", info: \"{info}\"")
    };
    let code_part = match st.last_code.load(Relaxed) {
        0 => String::new(),
        c => format!(", code: {c}"),
    };
    if let Some(up) = transition {
        srv.up.store(up, Relaxed);
        srv.last_change.store(unix_now(), Relaxed);
        let be = shared.backend(pi);
        be.changed();
        let (act, bck) = be.servers.iter().fold((0, 0), |(a, b), s| {
            if s.usable() {
                if s.backup { (a, b + 1) } else { (a + 1, b) }
            } else {
                (a, b)
            }
        });
        let line = format!(
            "Server {}/{} is {}, reason: {}{}{}, check duration: {ms}ms. {act} active and {bck} backup servers {}.",
            p.name,
            srv.name,
            if up { "UP" } else { "DOWN" },
            status.reason(),
            code_part,
            info_part,
            if up { "online" } else { "left" },
        );
        let level = if up { 5 } else { 1 };
        eprintln!(
            "[{}] ({}) : {line}",
            if up { "NOTICE" } else { "WARNING" },
            std::process::id()
        );
        w.log.emit(&p.logs, level, &line);
    } else if p.options.log_health_checks {
        let line = format!(
            "Health check for server {}/{} {}, reason: {}{}{}, check duration: {ms}ms, status: {}.",
            p.name,
            srv.name,
            if status.ok() { "succeeded" } else { "failed" },
            status.reason(),
            code_part,
            info_part,
            health_text(st),
        );
        w.log.emit(&p.logs, 6, &line);
    }
}

/// `status: 2/3 UP` as in HAProxy's health-check log lines.
fn health_text(st: &CheckState) -> String {
    let h = st.health.load(Relaxed);
    if h >= st.rise {
        format!("{}/{} UP", h - st.rise + 1, st.fall)
    } else {
        format!("{}/{} DOWN", h, st.rise)
    }
}

/// One check: connect (and with `option httpchk`, one HTTP exchange). Returns the status,
/// the HTTP code (0 if none) and HAProxy-style info text.
async fn check_once(p: &Proxy, addr: SocketAddr, cfg: &CheckCfg) -> (Status, u16, String) {
    // HAProxy: connect within min(timeout connect, inter); then `timeout check` (or inter
    // without it) bounds the response.
    let connect_to = p.timeouts.connect.map_or(cfg.inter, |c| c.min(cfg.inter));
    let read_to = p.timeouts.check.unwrap_or(cfg.inter);
    let conn = tokio::time::timeout(connect_to, TcpStream::connect(addr)).await;
    let mut stream = match conn {
        Err(_) => return (Status::L4Tout, 0, String::new()),
        Ok(Err(e)) => {
            let info = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "Connection refused".to_string(),
                _ => e.to_string(),
            };
            return (Status::L4Con, 0, info);
        }
        Ok(Ok(s)) => s,
    };
    let Some(chk) = p.options.httpchk.as_ref() else {
        return (Status::L4Ok, 0, String::new());
    };
    let req = format!(
        "{} {} {}\r\nConnection: close\r\n\r\n",
        chk.method, chk.uri, chk.version
    );
    let exchange = async {
        stream.write_all(req.as_bytes()).await?;
        // Bounded: a check reads at most 16 KiB (HAProxy reads one buffer).
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() >= 16384 {
                break;
            }
        }
        Ok::<Vec<u8>, std::io::Error>(buf)
    };
    let buf = match tokio::time::timeout(read_to, exchange).await {
        Err(_) => return (Status::L7Tout, 0, String::new()),
        Ok(Err(e)) => return (Status::L7Rsp, 0, e.to_string()),
        Ok(Ok(b)) => b,
    };
    let (code, reason) = match parse_status_line(&buf) {
        Some(x) => x,
        None => return (Status::L7Rsp, 0, "invalid response".into()),
    };
    let ok = match &p.options.http_check_expect {
        None => (200..400).contains(&code),
        Some(e) => {
            let m = match &e.kind {
                ExpectKind::Status(ranges) => ranges.iter().any(|(a, b)| (*a..=*b).contains(&code)),
                ExpectKind::RStatus(re) => re.is_match(&code.to_string()),
                ExpectKind::String(s) => body_of(&buf)
                    .windows(s.len().max(1))
                    .any(|w| w == s.as_bytes()),
                ExpectKind::RString(re) => re.is_match(&String::from_utf8_lossy(body_of(&buf))),
            };
            m != e.negate
        }
    };
    if ok {
        (Status::L7Ok, code, reason)
    } else {
        (Status::L7Sts, code, reason)
    }
}

/// `HTTP/1.x CODE REASON` of a response.
fn parse_status_line(buf: &[u8]) -> Option<(u16, String)> {
    let end = buf.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&buf[..end])
        .ok()?
        .trim_end_matches('\r');
    let mut it = line.splitn(3, ' ');
    let v = it.next()?;
    if !v.starts_with("HTTP/1.") {
        return None;
    }
    let code: u16 = it.next()?.parse().ok()?;
    Some((code, it.next().unwrap_or("").to_string()))
}

fn body_of(buf: &[u8]) -> &[u8] {
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => &buf[i + 4..],
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn st(rise: u32, fall: u32) -> CheckState {
        CheckState::new(&CheckCfg {
            inter: Duration::from_secs(1),
            fastinter: Duration::from_secs(1),
            downinter: Duration::from_secs(1),
            rise,
            fall,
            port: None,
            addr: None,
        })
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
    fn status_line_and_body() {
        assert_eq!(
            parse_status_line(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"),
            Some((503, "Service Unavailable".into()))
        );
        assert_eq!(parse_status_line(b"SSH-2.0\r\n"), None);
        assert_eq!(body_of(b"HTTP/1.0 200 OK\r\nA: b\r\n\r\nhello"), b"hello");
    }
}
