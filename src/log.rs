//! `log`: access logs in HAProxy's formats (`option httplog`, `option tcplog`, the default
//! connection log) sent to stdout/stderr or syslog (UDP, unix datagram) with HAProxy's
//! framings (`rfc3164`, `rfc5424`, `short`, `raw`).
//!
//! One [`Logger`] per worker thread, so sending never takes a lock; UDP sends are
//! non-blocking and a full socket buffer drops the line rather than stalling a request.
//! It must not decide *what* happened to a request (that is `stream`); it only formats.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::{Config, LogDest, LogFormat, LogTarget};

pub const LEVEL_INFO: u8 = 6;
pub const LEVEL_NOTICE: u8 = 5;
pub const LEVEL_ERR: u8 = 3;

pub struct Logger {
    udp: Option<UdpSocket>,
    unix: Option<UnixDatagram>,
    pid: u32,
    hostname: String,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A broken-down UTC time (sluice logs in UTC; see docs/compat.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tm {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub min: u32,
    pub sec: u32,
    pub micros: u32,
}

impl Tm {
    pub fn from_system(t: SystemTime) -> Tm {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = d.as_secs() as i64;
        let days = secs.div_euclid(86400);
        let rem = secs.rem_euclid(86400);
        // Civil-from-days (proleptic Gregorian), after H. Hinnant's well-known derivation.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
        Tm {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            min: (rem % 3600 / 60) as u32,
            sec: (rem % 60) as u32,
            micros: d.subsec_micros(),
        }
    }

    /// `23/Nov/2026:10:00:00.123` (HAProxy's `%tr`/`%t` with milliseconds).
    pub fn haproxy(&self, out: &mut String) {
        let _ = write!(
            out,
            "{:02}/{}/{:04}:{:02}:{:02}:{:02}.{:03}",
            self.day,
            MONTHS[(self.month - 1) as usize],
            self.year,
            self.hour,
            self.min,
            self.sec,
            self.micros / 1000
        );
    }
}

impl Logger {
    pub fn new(cfg: &Config) -> Logger {
        let any = |f: &dyn Fn(&LogDest) -> bool| {
            cfg.global
                .logs
                .iter()
                .chain(cfg.proxies.iter().flat_map(|p| p.logs.iter()))
                .any(|t| f(&t.dest))
        };
        let udp = any(&|d| matches!(d, LogDest::Udp(SocketAddr::V4(_))))
            .then(|| UdpSocket::bind("0.0.0.0:0").ok())
            .flatten();
        let udp = udp.or_else(|| {
            any(&|d| matches!(d, LogDest::Udp(SocketAddr::V6(_))))
                .then(|| UdpSocket::bind("[::]:0").ok())
                .flatten()
        });
        if let Some(u) = &udp {
            let _ = u.set_nonblocking(true);
        }
        let unix = any(&|d| matches!(d, LogDest::Unix(_)))
            .then(|| UnixDatagram::unbound().ok())
            .flatten();
        if let Some(u) = &unix {
            let _ = u.set_nonblocking(true);
        }
        Logger {
            udp,
            unix,
            pid: std::process::id(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "localhost".into()),
        }
    }

    /// Sends `msg` at `level` to every target that accepts that level.
    pub fn emit(&self, targets: &[LogTarget], level: u8, msg: &str) {
        if targets.is_empty() {
            return;
        }
        let now = Tm::from_system(SystemTime::now());
        let mut line = String::with_capacity(msg.len() + 64);
        for t in targets {
            if level > t.level {
                continue;
            }
            let level = level.max(t.minlevel);
            line.clear();
            let pri = t.facility as u32 * 8 + level as u32;
            match t.format {
                LogFormat::Rfc3164 => {
                    let _ = write!(
                        line,
                        "<{pri}>{} {:>2} {:02}:{:02}:{:02} sluice[{}]: ",
                        MONTHS[(now.month - 1) as usize],
                        now.day,
                        now.hour,
                        now.min,
                        now.sec,
                        self.pid
                    );
                }
                LogFormat::Rfc5424 => {
                    let _ = write!(
                        line,
                        "<{pri}>1 {:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00 {} sluice {} - - ",
                        now.year,
                        now.month,
                        now.day,
                        now.hour,
                        now.min,
                        now.sec,
                        now.micros,
                        self.hostname,
                        self.pid
                    );
                }
                LogFormat::Short => {
                    let _ = write!(line, "<{level}>");
                }
                LogFormat::Raw => {}
            }
            line.push_str(msg);
            if line.len() > t.maxlen {
                let mut cut = t.maxlen;
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
            }
            match &t.dest {
                LogDest::Stdout | LogDest::Stderr => {
                    line.push('\n');
                    if matches!(t.dest, LogDest::Stdout) {
                        let _ = std::io::stdout().lock().write_all(line.as_bytes());
                    } else {
                        let _ = std::io::stderr().lock().write_all(line.as_bytes());
                    }
                }
                LogDest::Udp(a) => {
                    if let Some(u) = &self.udp {
                        let _ = u.send_to(line.as_bytes(), a);
                    }
                }
                LogDest::Unix(p) => {
                    if let Some(u) = &self.unix {
                        let _ = u.send_to(line.as_bytes(), p);
                    }
                }
            }
        }
    }
}

/// Everything an access-log line needs about one HTTP transaction or TCP session.
#[derive(Debug, Default, Clone)]
pub struct Entry<'a> {
    pub client: Option<SocketAddr>,
    pub accept_time: Option<SystemTime>,
    pub frontend: &'a str,
    pub backend: &'a str,
    pub server: &'a str,
    /// HAProxy timers in ms; -1 = never reached.
    pub t_req: i64,
    pub t_wait: i64,
    pub t_connect: i64,
    pub t_resp: i64,
    pub t_active: i64,
    pub status: i32,
    pub bytes: u64,
    /// Termination state, 2 chars (`--`, `CD`, `sQ`, ...).
    pub term: [u8; 2],
    pub actconn: u32,
    pub feconn: u32,
    pub beconn: u32,
    pub srvconn: u32,
    pub retries: u32,
    pub redispatched: bool,
    pub srv_queue: u32,
    pub be_queue: u32,
    /// Request line, or `<BADREQ>`.
    pub request: &'a str,
}

fn client_str(out: &mut String, c: Option<SocketAddr>) {
    match c {
        Some(SocketAddr::V4(a)) => {
            let _ = write!(out, "{}:{}", a.ip(), a.port());
        }
        Some(SocketAddr::V6(a)) => match a.ip().to_ipv4_mapped() {
            Some(v4) => {
                let _ = write!(out, "{}:{}", v4, a.port());
            }
            None => {
                let _ = write!(out, "{}:{}", a.ip(), a.port());
            }
        },
        // unix sockets: HAProxy prints "unix:1"
        None => out.push_str("unix:1"),
    }
}

impl Entry<'_> {
    fn prefix(&self, out: &mut String) {
        client_str(out, self.client);
        out.push_str(" [");
        Tm::from_system(self.accept_time.unwrap_or_else(SystemTime::now)).haproxy(out);
        let _ = write!(out, "] {} {}/{} ", self.frontend, self.backend, self.server);
    }

    fn counters(&self, out: &mut String) {
        let _ = write!(
            out,
            "{}/{}/{}/{}/{}{} {}/{}",
            self.actconn,
            self.feconn,
            self.beconn,
            self.srvconn,
            if self.redispatched { "+" } else { "" },
            self.retries,
            self.srv_queue,
            self.be_queue
        );
    }

    /// `option httplog`:
    /// `%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %{+Q}r`
    pub fn httplog(&self) -> String {
        let mut out = String::with_capacity(160);
        self.prefix(&mut out);
        let _ = write!(
            out,
            "{}/{}/{}/{}/{} {} {} - - {}{}-- ",
            self.t_req,
            self.t_wait,
            self.t_connect,
            self.t_resp,
            self.t_active,
            self.status,
            self.bytes,
            self.term[0] as char,
            self.term[1] as char
        );
        self.counters(&mut out);
        out.push_str(" \"");
        out.push_str(self.request);
        out.push('"');
        out
    }

    /// `option tcplog`: `%ci:%cp [%t] %ft %b/%s %Tw/%Tc/%Tt %B %ts %ac/%fc/%bc/%sc/%rc %sq/%bq`
    pub fn tcplog(&self) -> String {
        let mut out = String::with_capacity(128);
        self.prefix(&mut out);
        let _ = write!(
            out,
            "{}/{}/{} {} {}{} ",
            self.t_wait,
            self.t_connect,
            self.t_active,
            self.bytes,
            self.term[0] as char,
            self.term[1] as char
        );
        self.counters(&mut out);
        out
    }
}

/// The default (no `option *log`) line, logged at accept time.
pub fn connect_line(
    client: Option<SocketAddr>,
    local: Option<SocketAddr>,
    frontend: &str,
    http: bool,
) -> String {
    let mut out = String::from("Connect from ");
    client_str(&mut out, client);
    out.push_str(" to ");
    client_str(&mut out, local);
    let _ = write!(out, " ({frontend}/{})", if http { "HTTP" } else { "TCP" });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn civil_time() {
        // 2026-11-23 10:11:12.345 UTC
        let t = UNIX_EPOCH + Duration::from_millis(1_795_428_672_345);
        let tm = Tm::from_system(t);
        assert_eq!(
            (tm.year, tm.month, tm.day, tm.hour, tm.min, tm.sec),
            (2026, 11, 23, 10, 11, 12)
        );
        let mut s = String::new();
        tm.haproxy(&mut s);
        assert_eq!(s, "23/Nov/2026:10:11:12.345");
        let leap = Tm::from_system(UNIX_EPOCH + Duration::from_secs(951_782_400)); // 2000-02-29
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
    }

    #[test]
    fn httplog_field_order() {
        let e = Entry {
            client: Some("10.0.0.1:4242".parse().unwrap()),
            accept_time: Some(UNIX_EPOCH + Duration::from_millis(1_795_428_672_345)),
            frontend: "fe",
            backend: "be",
            server: "s1",
            t_req: 0,
            t_wait: 0,
            t_connect: 1,
            t_resp: 2,
            t_active: 3,
            status: 200,
            bytes: 150,
            term: *b"--",
            actconn: 1,
            feconn: 1,
            beconn: 1,
            srvconn: 1,
            retries: 0,
            request: "GET / HTTP/1.1",
            ..Default::default()
        };
        assert_eq!(
            e.httplog(),
            "10.0.0.1:4242 [23/Nov/2026:10:11:12.345] fe be/s1 0/0/1/2/3 200 150 - - ---- 1/1/1/1/0 0/0 \"GET / HTTP/1.1\""
        );
        assert_eq!(
            e.tcplog(),
            "10.0.0.1:4242 [23/Nov/2026:10:11:12.345] fe be/s1 0/1/3 150 -- 1/1/1/1/0 0/0"
        );
    }
}
