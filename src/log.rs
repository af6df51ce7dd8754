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

use crate::config::logformat::{Flags, LogFormat as CustomFormat, Node, Var};
use crate::config::{Config, LogDest, LogFormat, LogTarget};

pub const LEVEL_INFO: u8 = 6;
pub const LEVEL_NOTICE: u8 = 5;
pub const LEVEL_ERR: u8 = 3;

/// HAProxy's "potentially interesting" session: redispatched, ended by an error other than
/// a local answer (termination state not `-` nor `L`), retried without an error, or an HTTP
/// status of 5xx (`status` 0 outside HTTP). `option log-separate-errors` logs these at `err`,
/// `option dontlog-normal` logs only these.
pub fn worth_err(term: [u8; 2], retries: u32, redispatched: bool, status: i32) -> bool {
    redispatched
        || !matches!(term[0], b'-' | b'L')
        || (term[0] == b'-' && retries > 0)
        || status >= 500
}

/// The level of a traffic log line under a frontend's options; `None`: not logged
/// (`dontlog-normal`).
pub fn traffic_level(o: &crate::config::ProxyOptions, interesting: bool) -> Option<u8> {
    match (interesting, o.log_separate_errors, o.dontlog_normal) {
        (false, _, true) => None,
        (true, true, _) => Some(LEVEL_ERR),
        _ => Some(LEVEL_INFO),
    }
}

pub struct Logger {
    udp: Option<UdpSocket>,
    unix: Option<UnixDatagram>,
    pid: u32,
    /// The syslog program name (`log-tag`).
    tag: String,
    /// `log-send-hostname`: the host name in syslog headers.
    hostname: Option<String>,
    /// The system's host name (`%H`).
    host: String,
}

pub(crate) const MONTHS: [&str; 12] = [
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
            tag: cfg
                .global
                .log_tag
                .clone()
                .unwrap_or_else(|| "sluice".into()),
            hostname: cfg.global.log_send_hostname.clone(),
            host: Some(crate::util::hostname())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".into()),
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
            // HAProxy: `log-send-hostname` turns the default format into rfc3164.
            let format = match t.format {
                LogFormat::Local if self.hostname.is_some() => LogFormat::Rfc3164,
                f => f,
            };
            match format {
                LogFormat::Local | LogFormat::Rfc3164 => {
                    let _ = write!(
                        line,
                        "<{pri}>{} {:>2} {:02}:{:02}:{:02} ",
                        MONTHS[(now.month - 1) as usize],
                        now.day,
                        now.hour,
                        now.min,
                        now.sec,
                    );
                    if format == LogFormat::Rfc3164 {
                        // HAProxy's host name field without `log-send-hostname`.
                        line.push_str(self.hostname.as_deref().unwrap_or("localhost"));
                        line.push(' ');
                    }
                    let _ = write!(line, "{}[{}]: ", self.tag, self.pid);
                }
                LogFormat::Rfc5424 => {
                    let _ = write!(
                        line,
                        "<{pri}>1 {:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00 {} {} {} - - ",
                        now.year,
                        now.month,
                        now.day,
                        now.hour,
                        now.min,
                        now.sec,
                        now.micros,
                        self.hostname.as_deref().unwrap_or("-"),
                        self.tag,
                        self.pid
                    );
                }
                LogFormat::Short => {
                    let _ = write!(line, "<{level}>");
                }
                LogFormat::Priority => {
                    let _ = write!(line, "<{pri}>");
                }
                LogFormat::Timed | LogFormat::Iso => {
                    if format == LogFormat::Timed {
                        let _ = write!(line, "<{level}>");
                    }
                    let _ = write!(
                        line,
                        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00 ",
                        now.year, now.month, now.day, now.hour, now.min, now.sec, now.micros,
                    );
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

/// Captured values as HAProxy logs them: `{v1|v2|...}`, an empty value for a slot that
/// caught nothing, and `"`, `#`, `{`, `|`, `}`, control and non-ASCII bytes as `#XX`.
fn captures(out: &mut String, (n, v): (usize, &[Option<Box<[u8]>>])) {
    out.push('{');
    for i in 0..n {
        if i > 0 {
            out.push('|');
        }
        if let Some(Some(b)) = v.get(i) {
            for &c in b.iter() {
                if !(0x20..0x7f).contains(&c) || matches!(c, b'"' | b'#' | b'{' | b'|' | b'}') {
                    let _ = write!(out, "#{c:02X}");
                } else {
                    out.push(c as char);
                }
            }
        }
    }
    out.push('}');
}

/// Everything an access-log line needs about one HTTP transaction or TCP session.
#[derive(Debug, Default, Clone)]
pub struct Entry<'a> {
    pub client: Option<SocketAddr>,
    /// The client's TCP socket for `fc_rtt`-like fetches evaluated at log time.
    pub tcp_fd: Option<std::os::fd::BorrowedFd<'a>>,
    /// The request's poll counters for `cpu_calls`-like fetches evaluated at log time.
    pub profile: Option<crate::stream::TaskProfile>,
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
    /// Its cookie letters (`--` without cookie persistence; `NI`, `VN`, ...).
    pub cookie: [u8; 2],
    /// Logged before the end (`option logasap`): the total time and the byte count are
    /// lower bounds, printed with a `+`.
    pub asap: bool,
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
    // What only `log-format` lines use.
    /// The address the client connected to (`%fi`, `%fp`; taken only when the format needs it).
    pub local: Option<SocketAddr>,
    /// The server connection's source address (`%bi`, `%bp`; likewise).
    pub be_src: Option<SocketAddr>,
    /// The server's address (`%si`, `%sp`).
    pub srv_addr: Option<SocketAddr>,
    /// The server listens on a UNIX socket (`%si` is `unix`, `%sp` 0, as in HAProxy).
    pub srv_unix: bool,
    /// The client connection's TLS handshake (`%sslv`, `%sslc`, `%ft`, `ssl_*` fetches).
    pub tls: Option<&'a crate::tls::TlsInfo>,
    /// `%Th` (handshake) and `%Ti` (idle before the request) in ms; `%Tt` (total).
    pub t_handshake: i64,
    pub t_idle: i64,
    pub t_total: i64,
    /// When the request's first byte arrived (`%tr`); `None`: the accept date.
    pub req_time: Option<SystemTime>,
    /// Bytes received from the client (`%U`).
    pub bytes_in: u64,
    /// `%rt` and `%lc`.
    pub req_count: u64,
    pub log_count: u64,
    /// Samples of the `%[fetch]` nodes that read the request, taken when its head arrived
    /// (indexed by the node's slot; `None`: no sample).
    pub samples: &'a [Option<Box<[u8]>>],
    /// The frontend's request and response captures (`capture request header`, ...):
    /// how many slots it has, and what they hold (`%hr`, `%hs`, and `option httplog`).
    pub cap_req: (usize, &'a [Option<Box<[u8]>>]),
    pub cap_rsp: (usize, &'a [Option<Box<[u8]>>]),
    /// `%ID`: the request's `unique-id-format` value.
    pub unique_id: Option<&'a str>,
    /// The session's variables, for `%[var(...)]`.
    pub vars: Option<&'a crate::vars::Vars>,
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
            "{}/{}/{}/{}/{}{} {} {}{} - - {}{}{}{} ",
            self.t_req,
            self.t_wait,
            self.t_connect,
            self.t_resp,
            if self.asap { "+" } else { "" },
            self.t_active,
            self.status,
            if self.asap { "+" } else { "" },
            self.bytes,
            self.term[0] as char,
            self.term[1] as char,
            self.cookie[0] as char,
            self.cookie[1] as char
        );
        self.counters(&mut out);
        for c in [self.cap_req, self.cap_rsp] {
            if c.0 > 0 {
                out.push(' ');
                captures(&mut out, c);
            }
        }
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
            "{}/{}/{}{} {}{} {}{} ",
            self.t_wait,
            self.t_connect,
            if self.asap { "+" } else { "" },
            self.t_active,
            if self.asap { "+" } else { "" },
            self.bytes,
            self.term[0] as char,
            self.term[1] as char
        );
        self.counters(&mut out);
        out
    }
}

/// Appends `s` as a log string: quoted with `Q` (`""` when absent), else `-` when absent or
/// empty; `"`, `\` and `]` escaped with `E`.
fn put_text(out: &mut String, s: Option<&[u8]>, fl: Flags) {
    let s = s.filter(|s| !s.is_empty());
    if fl.quote {
        out.push('"');
    }
    match s {
        Some(b) => {
            let text = String::from_utf8_lossy(b);
            if fl.escape {
                for c in text.chars() {
                    if matches!(c, '"' | '\\' | ']') {
                        out.push('\\');
                    }
                    out.push(c);
                }
            } else {
                out.push_str(&text);
            }
        }
        None if !fl.quote => out.push('-'),
        None => {}
    }
    if fl.quote {
        out.push('"');
    }
}

fn put_ip(out: &mut String, a: Option<SocketAddr>, unix: &str, fl: Flags) {
    let Some(a) = a else {
        return put_text(out, Some(unix.as_bytes()), fl);
    };
    let ip = match a.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    };
    let mut tmp = String::with_capacity(40);
    if fl.hex {
        let bytes: Vec<u8> = match ip {
            std::net::IpAddr::V4(v) => v.octets().to_vec(),
            std::net::IpAddr::V6(v) => v.octets().to_vec(),
        };
        for b in bytes {
            let _ = write!(tmp, "{b:02X}");
        }
    } else {
        let _ = write!(tmp, "{ip}");
    }
    put_text(out, Some(tmp.as_bytes()), fl);
}

fn put_port(out: &mut String, a: Option<SocketAddr>, unix: &str, fl: Flags) {
    match a {
        Some(a) if fl.hex => {
            let _ = write!(out, "{:04X}", a.port());
        }
        Some(a) => {
            let _ = write!(out, "{}", a.port());
        }
        None => out.push_str(unix),
    }
}

/// `10/Feb/2026:12:14:14 +0000` (`%T`, `%trg`; sluice logs in UTC).
fn put_gmt(out: &mut String, t: SystemTime) {
    let tm = Tm::from_system(t);
    let _ = write!(
        out,
        "{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000",
        tm.day,
        MONTHS[(tm.month - 1) as usize],
        tm.year,
        tm.hour,
        tm.min,
        tm.sec
    );
}

/// The parts of a request line: method, URI, version.
fn request_parts(r: &str) -> (Option<&str>, Option<&str>, Option<&str>) {
    if r == "<BADREQ>" || r.is_empty() {
        return (None, None, None);
    }
    let mut it = r.splitn(3, ' ');
    (it.next(), it.next(), it.next())
}

/// What a format evaluated on a live request makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// A header value or a redirect target: spaces kept as written, a missing sample prints
    /// nothing, samples are not quoted.
    HeaderValue,
    /// The `unique-id-format` id, which HAProxy builds like a log line: no leading or
    /// repeated spaces, `-` for nothing.
    UniqueId,
}

impl Logger {
    /// Renders a `log-format` line.
    pub fn custom(&self, f: &CustomFormat, e: &Entry<'_>) -> String {
        let mut out = String::with_capacity(192);
        self.render(f, e, None, &mut out);
        out
    }

    /// Renders a format on a request being processed: every `%[fetch]` reads `view` now,
    /// variables read what `e` knows so far; `as_` says whose spacing and missing values apply.
    pub fn render_now(
        &self,
        f: &CustomFormat,
        e: &Entry<'_>,
        view: &dyn crate::config::HttpView,
        as_: Live,
        out: &mut String,
    ) {
        self.render(f, e, Some((view, as_ == Live::HeaderValue)), out)
    }

    fn render(
        &self,
        f: &CustomFormat,
        e: &Entry<'_>,
        // The request being processed, and whether the format is a header value's.
        live: Option<(&dyn crate::config::HttpView, bool)>,
        out: &mut String,
    ) {
        let accept = e.accept_time.unwrap_or_else(SystemTime::now);
        let req_time = e.req_time.unwrap_or(accept);
        // HAProxy prints no space at the start, after a space, or after an empty item.
        let mut last_space = true;
        let mut fetched: Vec<u8> = Vec::new();
        for n in &f.nodes {
            let before = out.len();
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Sep(n) if live.is_some_and(|(_, header)| header) => {
                    out.extend(std::iter::repeat_n(' ', *n as usize));
                    continue;
                }
                Node::Sep(_) => {
                    if !last_space {
                        out.push(' ');
                        last_space = true;
                    }
                    continue;
                }
                Node::Fetch { fetch, flags, slot } => {
                    let v = match (live, slot) {
                        (Some((view, false)), _) => {
                            fetched.clear();
                            fetch.write(view, &mut fetched).then_some(&fetched[..])
                        }
                        (Some((view, true)), _) => {
                            // In a header value HAProxy neither quotes a sample nor prints
                            // `-` for a missing one.
                            fetched.clear();
                            if fetch.write(view, &mut fetched) && !fetched.is_empty() {
                                let fl = Flags {
                                    quote: false,
                                    ..*flags
                                };
                                put_text(out, Some(&fetched), fl);
                            }
                            continue;
                        }
                        (None, Some(s)) => e.samples.get(*s).and_then(|v| v.as_deref()),
                        (None, None) => {
                            fetched.clear();
                            // Evaluated at log time: only the source address and TLS state are left.
                            let view = crate::stream::http::SrcView(
                                e.client.map(|a| a.ip()),
                                e.tls,
                                None,
                                crate::config::acl::Sess {
                                    peer: e.client,
                                    local: e.local,
                                    frontend: e.frontend,
                                    backend: e.backend,
                                    unique_id: e.unique_id,
                                    sc: Default::default(),
                                    vars: e.vars,
                                    pp: None,
                                    shared: None,
                                    server: None,
                                    tcp_fd: e.tcp_fd,
                                    profile: e.profile,
                                },
                                None,
                            );
                            fetch.write(&view, &mut fetched).then_some(&fetched[..])
                        }
                    };
                    put_text(out, v, *flags);
                }
                Node::Var(v, fl) => self.var(out, *v, *fl, e, accept, req_time),
            }
            if out.len() != before {
                last_space = false;
            }
        }
    }

    fn var(
        &self,
        out: &mut String,
        v: Var,
        fl: Flags,
        e: &Entry<'_>,
        accept: SystemTime,
        req_time: SystemTime,
    ) {
        let num = |out: &mut String, n: i64| {
            let _ = write!(out, "{n}");
        };
        let text = |out: &mut String, s: Option<&str>| put_text(out, s.map(str::as_bytes), fl);
        // `%pid`, `%rt`: `+X` prints them as 4 hex digits at least.
        let dec_or_hex = |out: &mut String, n: u64| {
            let _ = if fl.hex {
                write!(out, "{n:04X}")
            } else {
                write!(out, "{n}")
            };
        };
        let tq = if e.t_req < 0 {
            -1
        } else {
            e.t_handshake.max(0) + e.t_idle.max(0) + e.t_req
        };
        let (method, uri, version) = request_parts(e.request);
        match v {
            Var::BytesOut => {
                if e.asap {
                    out.push('+');
                }
                num(out, e.bytes as i64)
            }
            Var::BytesIn => num(out, e.bytes_in as i64),
            Var::CookieReq | Var::CookieRsp => text(out, None),
            Var::UniqueId => text(out, e.unique_id),
            Var::Hostname => text(out, Some(&self.host)),
            Var::Status => num(out, e.status as i64),
            Var::DateGmt | Var::DateLocal => put_gmt(out, accept),
            Var::Timestamp => {
                let secs = accept
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs();
                if fl.hex {
                    let _ = write!(out, "{secs:08X}");
                } else {
                    let _ = write!(out, "{secs}");
                }
            }
            Var::Millis => {
                let _ = write!(out, "{:03}", Tm::from_system(accept).micros / 1000);
            }
            Var::Ta => {
                if e.asap {
                    out.push('+');
                }
                num(out, e.t_active)
            }
            Var::Tc => num(out, e.t_connect),
            Var::Th => num(out, e.t_handshake),
            Var::Ti => num(out, e.t_idle),
            Var::Tq => num(out, tq),
            Var::Tr => num(out, e.t_resp),
            Var::TR => num(out, e.t_req),
            Var::Tt => {
                if e.asap {
                    out.push('+');
                }
                num(out, e.t_total)
            }
            Var::Tu => {
                if e.asap {
                    out.push('+');
                }
                let tu = if e.t_total < 0 {
                    -1
                } else {
                    e.t_total - e.t_idle.max(0)
                };
                num(out, tu)
            }
            Var::Tw => num(out, e.t_wait),
            Var::Td => {
                let parts = [tq, e.t_wait, e.t_connect, e.t_resp];
                let d = if e.t_total < 0 || parts.iter().any(|&t| t < 0) {
                    -1
                } else {
                    e.t_total - parts.iter().sum::<i64>()
                };
                num(out, d)
            }
            Var::ActConn => num(out, e.actconn as i64),
            Var::BeConn => num(out, e.beconn as i64),
            Var::FeConn => num(out, e.feconn as i64),
            Var::SrvConn => num(out, e.srvconn as i64),
            Var::Retries => {
                if e.redispatched {
                    out.push('+');
                }
                num(out, e.retries as i64)
            }
            Var::SrvQueue => num(out, e.srv_queue as i64),
            Var::BeQueue => num(out, e.be_queue as i64),
            Var::Backend => text(out, Some(e.backend)),
            Var::Frontend => text(out, Some(e.frontend)),
            Var::FrontendXprt => {
                if e.tls.is_some() {
                    text(out, Some(&format!("{}~", e.frontend)))
                } else {
                    text(out, Some(e.frontend))
                }
            }
            Var::Server => text(out, Some(e.server)),
            Var::BeSrcIp => match e.be_src {
                Some(_) => put_ip(out, e.be_src, "-", fl),
                None => text(out, None),
            },
            Var::BeSrcPort => put_port(out, e.be_src, "-", fl),
            Var::ClientIp => put_ip(out, e.client, "unix", fl),
            Var::ClientPort => put_port(out, e.client, "1", fl),
            Var::FeIp => put_ip(out, e.local, "unix", fl),
            Var::FePort => put_port(out, e.local, "1", fl),
            Var::SrvIp if e.srv_unix => text(out, Some("unix")),
            Var::SrvPort if e.srv_unix => text(out, Some("0")),
            Var::SrvIp => match e.srv_addr {
                Some(_) => put_ip(out, e.srv_addr, "-", fl),
                None => text(out, None),
            },
            Var::SrvPort => put_port(out, e.srv_addr, "-", fl),
            Var::HdrReq | Var::HdrRsp => {
                let c = if matches!(v, Var::HdrReq) {
                    e.cap_req
                } else {
                    e.cap_rsp
                };
                if c.0 > 0 {
                    let mut t = String::new();
                    captures(&mut t, c);
                    out.push_str(&t);
                }
            }
            // The CLF lists are not produced yet.
            Var::HdrReqList | Var::HdrRspList => {}
            Var::Method => text(out, method),
            Var::Uri => text(out, uri),
            Var::Path => text(out, uri.map(|u| u.split('?').next().unwrap_or(u))),
            Var::Query => text(out, uri.and_then(|u| u.find('?').map(|q| &u[q..]))),
            Var::Version => text(out, version),
            Var::LogCount => num(out, e.log_count as i64),
            Var::Pid => dec_or_hex(out, self.pid as u64),
            Var::Request => text(out, Some(e.request)),
            Var::ReqCount => dec_or_hex(out, e.req_count),
            Var::SslCipher => text(out, e.tls.map(|t| t.cipher)),
            Var::SslVersion => text(out, e.tls.map(|t| t.protocol)),
            Var::Date => Tm::from_system(accept).haproxy(out),
            Var::ReqDate => Tm::from_system(req_time).haproxy(out),
            Var::ReqDateGmt | Var::ReqDateLocal => put_gmt(out, req_time),
            Var::TermState => {
                out.push(e.term[0] as char);
                out.push(e.term[1] as char);
            }
            Var::TermStateCookie => {
                out.push(e.term[0] as char);
                out.push(e.term[1] as char);
                out.push(e.cookie[0] as char);
                out.push(e.cookie[1] as char);
            }
        }
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
            cookie: *b"--",
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

    #[test]
    fn custom_format_rendering() {
        let cfg = Config::default();
        let log = Logger::new(&cfg);
        let f =
            |s: &str| crate::config::logformat::parse(s, crate::config::Origin::default()).unwrap();
        // One slot per request fetch node, in order.
        let ab = || Some(b"a\"b]".to_vec().into_boxed_slice());
        let samples = [ab(), ab(), None, None];
        let e = Entry {
            client: Some("[::ffff:10.0.0.1]:4242".parse().unwrap()),
            accept_time: Some(UNIX_EPOCH + Duration::from_millis(1_795_428_672_345)),
            frontend: "fe",
            backend: "be",
            server: "s1",
            t_handshake: 2,
            t_idle: 3,
            t_req: 4,
            t_wait: 1,
            t_connect: 1,
            t_resp: 5,
            t_active: 20,
            t_total: 25,
            status: 200,
            term: *b"CD",
            cookie: *b"--",
            retries: 1,
            redispatched: true,
            request: "GET /p?q=1 HTTP/1.1",
            samples: &samples,
            ..Default::default()
        };
        let line = |s: &str| log.custom(&f(s), &e);
        // Separators merge, and none follows an item that printed nothing.
        assert_eq!(line("  %ci:%cp   %hr %hs %b/%s  "), "10.0.0.1:4242 be/s1 ");
        assert_eq!(line("%{+X}ci:%{+X}cp"), "0A000001:1092");
        // `%o` flags hold for every later item; an item's own flags override them.
        assert_eq!(line("%{+Q}o %b %{-Q}s %sslv %{-Q}sslv"), "\"be\" s1 \"\" -");
        assert_eq!(
            line("%{+Q}[hdr(a)] %{+E}[hdr(a)] %[hdr(b)] %{+Q}[hdr(b)]"),
            "\"a\"b]\" a\\\"b\\] - \"\""
        );
        assert_eq!(
            line("%Tq %Td %Tt %rc %ts %tsc %ST %%"),
            "9 9 25 +1 CD CD-- 200 %"
        );
        assert_eq!(line("%HM|%HU|%HP|%HQ|%HV"), "GET|/p?q=1|/p|?q=1|HTTP/1.1");
        assert_eq!(
            line("[%t] %T %Ts %{+X}Ts %ms"),
            "[23/Nov/2026:10:11:12.345] 23/Nov/2026:10:11:12 +0000 1795428672 6B041140 345"
        );
        assert_eq!(
            line("%si %sp %bi %ID %CC [%[ssl_fc]] %[ssl_fc_sni] %ft"),
            "- - - - - [0] - fe"
        );
    }
}
