//! `config`: the resolved configuration model, and the loader that builds it from HAProxy's
//! configuration language.
//!
//! This module owns the *meaning* of every keyword: after [`load`] returns, `defaults` sections
//! have been applied, `log global` has been expanded, names have been resolved and every value has
//! been validated. The runtime never re-parses text and never sees a keyword it does not support.
//! It must not open sockets or start threads (that is `listener` and `worker`).
//!
//! Files: `tokenizer` (words, quotes, variables, `.if` blocks), `parser` (sections and keywords),
//! `acl` (conditions: parsing and evaluation), `logformat` (`log-format` strings).

pub mod acl;
pub mod checks;
pub mod converter;
pub(crate) mod jwt;
pub mod logformat;
pub mod parser;
pub mod tokenizer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use acl::{Cond, HttpView, SampleFetch};
pub use checks::*;
pub use parser::{check_needs, dynamic_server, load, load_files, take_warnings, warn};

/// One configuration problem: `file:line: message` (line 0 = the whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

/// `" (did you mean 'x'?)"` for the candidate nearest to `word` by edit distance, or `""`.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = edit_distance(word, c);
        if best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    match best {
        // Close enough to be a typo: at most a third of the word (and at least one edit).
        Some((d, c)) if d <= (word.len() / 3).max(1) + usize::from(word.len() > 8) => {
            format!(" (did you mean '{c}'?)")
        }
        _ => String::new(),
    }
}

/// Optimal-string-alignment distance: Levenshtein plus adjacent transpositions counted as one
/// edit, so that the most common typo (`mdoe`, `nmae`) is suggested even for short words.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(prev2[j - 2] + 1);
            }
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// HAProxy version whose configuration language sluice implements (`-v`, `version_atleast`).
pub const HAPROXY_COMPAT_VERSION: &str = "2.6";

/// Where a keyword came from, for run-time messages ("server s1 at haproxy.cfg:12").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: usize,
}

/// The whole, validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub global: Global,
    /// Every `frontend`, `backend` and `listen` in declaration order.
    pub proxies: Vec<Proxy>,
    /// `resolvers` sections, in declaration order.
    pub resolvers: Vec<crate::resolvers::Resolvers>,
    /// Map and ACL pattern files, by id (what `show map`/`show acl` list and change).
    pub pat_refs: Vec<std::sync::Arc<crate::map::PatRef>>,
    /// `cache` sections, in declaration order.
    pub caches: Vec<std::sync::Arc<crate::cache::Cache>>,
    /// `peers` sections that have the local peer, in declaration order.
    pub peers: Vec<std::sync::Arc<crate::peers::Section>>,
    /// The tables declared in `peers` sections (`table` lines), run or not.
    pub peers_tables: Vec<std::sync::Arc<crate::stick::Table>>,
    /// What was accepted with a warning (`file:line: ...`).
    pub warnings: Vec<ConfigError>,
}

#[derive(Debug, Clone)]
pub struct Global {
    /// `nbthread`; `None` = number of CPUs.
    pub nbthread: Option<usize>,
    /// `maxconn`; `None` = derived from the file-descriptor limit, as HAProxy does.
    pub maxconn: Option<u32>,
    pub daemon: bool,
    /// `master-worker [no-exit-on-failure]`: `Some(no-exit-on-failure?)`.
    pub master_worker: Option<bool>,
    /// `mworker-max-reloads N`: a former worker outliving N reloads gets SIGTERM.
    pub mworker_max_reloads: Option<u32>,
    pub pidfile: Option<PathBuf>,
    pub logs: Vec<LogTarget>,
    pub cpu_map: Vec<CpuMap>,
    /// `tune.bufsize` (default 16384).
    pub bufsize: usize,
    /// `tune.maxrewrite` (default 1024).
    pub maxrewrite: usize,
    /// `tune.maxaccept` (default 64; HAProxy divides it among threads, we apply it per thread).
    pub maxaccept: u32,
    /// `maxconnrate` / `maxsessrate`: connections accepted per second, process-wide.
    pub maxconnrate: Option<u32>,
    pub maxsessrate: Option<u32>,
    /// `maxsslrate`: connections accepted per second on `ssl` binds, process-wide.
    pub maxsslrate: Option<u32>,
    /// `tune.runqueue-depth` (default 200): a thread with this many client TLS handshakes
    /// waiting to start pauses its `ssl` listeners until half of them have started.
    pub runqueue_depth: u32,
    /// `tune.idle-pool.shared on|off` (default on).
    pub idle_pool_shared: bool,
    /// `tune.rcvbuf.client`, `tune.sndbuf.client`: kernel buffer sizes of client sockets
    /// (set on the listening sockets, which accepted ones inherit); `None`: the system's.
    pub rcvbuf_client: Option<u32>,
    pub sndbuf_client: Option<u32>,
    /// `tune.rcvbuf.server`, `tune.sndbuf.server`: the same for server connections.
    pub rcvbuf_server: Option<u32>,
    pub sndbuf_server: Option<u32>,
    pub hard_stop_after: Option<Duration>,
    /// `log-tag`: the program name in syslog headers (default `sluice`).
    pub log_tag: Option<String>,
    /// `log-send-hostname [NAME]`: the host name in syslog headers (the system's without
    /// NAME); it also makes `rfc3164` the default format, as in HAProxy.
    pub log_send_hostname: Option<String>,
    /// `localpeer NAME`: the local peer's name in `peers` sections (`-L` wins over it).
    pub localpeer: Option<String>,
    /// `stats socket` lines, in order.
    pub stats_sockets: Vec<StatsSocket>,
    /// `stats timeout` (default 10s): idle time allowed on a CLI connection.
    pub stats_timeout: Duration,
    /// `spread-checks`, `max-spread-checks`, `tune.max-checks-per-thread`.
    pub checks: GlobalChecks,
    /// `chroot DIR`: entered once listeners are bound and the pidfile written.
    pub chroot: Option<PathBuf>,
    /// `uid` / `user`, `gid` / `group`: the identity sluice takes after binding (and `chroot`).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `crt-base`, `ca-base`, `ssl-default-*`, `ssl-server-verify`.
    pub tls: crate::tls::TlsDefaults,
    /// `node NAME` (default: the host name) and `description TEXT`: what the stats page's
    /// `show-node` / `show-desc` print when they name nothing of their own.
    pub node: Option<String>,
    pub description: Option<String>,
    /// `server-state-file` and `server-state-base`: where a `show servers state` dump is
    /// kept. HAProxy reads it only for backends with `load-server-state-from-file`, which
    /// sluice does not support (an error), so nothing reads these.
    pub server_state_file: Option<String>,
    pub server_state_base: Option<String>,
    /// `ulimit-n N`: the open-file limit to set instead of the hard limit.
    pub ulimit_n: Option<u64>,
    /// `strict-limits`: an open-file limit that cannot be set, or a `maxconn` it cannot
    /// carry, stops the start-up instead of a warning.
    pub strict_limits: bool,
    /// `zero-warning`: any warning stops the start-up (and makes `-c` fail).
    pub zero_warning: bool,
    /// `external-check`: `option external-check` may run programs.
    pub external_check: bool,
    /// `set-dumpable`: core dumps re-enabled after the change of identity, core and file
    /// size limits raised as far as allowed.
    pub set_dumpable: bool,
    /// `unix-bind`: defaults of every UNIX listening socket (binds and stats sockets).
    pub unix_bind: UnixBind,
    /// `tune.h2.*`.
    pub h2: H2Tune,
}

/// `unix-bind [prefix P] [mode M] [user U|uid N] [group G|gid N]`. The prefix is already
/// applied to the configuration's socket paths; the rest is applied once a socket is bound
/// (a `stats socket`'s own `mode` wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnixBind {
    pub prefix: Option<String>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl UnixBind {
    /// Applies the mode and owner to a freshly bound socket file; a socket's own settings
    /// (`own`: a `stats socket`'s `mode`, `uid`, `gid`) win.
    pub fn apply(&self, path: &std::path::Path, own: [Option<u32>; 3]) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let [mode, uid, gid] = own;
        if let Some(m) = mode.or(self.mode) {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(m))?;
        }
        let (uid, gid) = (uid.or(self.uid), gid.or(self.gid));
        if uid.is_some() || gid.is_some() {
            std::os::unix::fs::chown(path, uid, gid)?;
        }
        Ok(())
    }
}

/// Privilege of a CLI socket (`level`), ordered: each level can do what the lower ones can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CliLevel {
    User,
    Operator,
    Admin,
}

/// `stats socket PATH|IP:PORT [level L] [mode OCTAL]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSocket {
    /// `BindAddr::Unix` or `BindAddr::Tcp`.
    pub addr: BindAddr,
    pub origin: Origin,
    /// Default `operator`, as in HAProxy.
    pub level: CliLevel,
    /// `mode`, `uid`/`user` and `gid`/`group` of a UNIX socket file.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `expose-fd listeners`: a new process may take the listening sockets (`-x`).
    pub expose_fd: bool,
}

impl Default for Global {
    fn default() -> Self {
        Global {
            nbthread: None,
            maxconn: None,
            daemon: false,
            master_worker: None,
            mworker_max_reloads: None,
            pidfile: None,
            logs: Vec::new(),
            cpu_map: Vec::new(),
            bufsize: 16384,
            maxrewrite: 1024,
            maxaccept: 64,
            maxconnrate: None,
            maxsessrate: None,
            maxsslrate: None,
            runqueue_depth: 200,
            idle_pool_shared: true,
            rcvbuf_client: None,
            sndbuf_client: None,
            rcvbuf_server: None,
            sndbuf_server: None,
            hard_stop_after: None,
            log_tag: None,
            log_send_hostname: None,
            localpeer: None,
            stats_sockets: Vec::new(),
            stats_timeout: Duration::from_secs(10),
            checks: GlobalChecks::default(),
            chroot: None,
            uid: None,
            gid: None,
            tls: crate::tls::TlsDefaults::default(),
            node: None,
            server_state_file: None,
            server_state_base: None,
            description: None,
            ulimit_n: None,
            strict_limits: false,
            zero_warning: false,
            set_dumpable: false,
            external_check: false,
            unix_bind: UnixBind::default(),
            h2: H2Tune::default(),
        }
    }
}

/// When a server is spoken to in HTTP/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerH2 {
    /// HTTP/1.1 (`proto h1`, or no `h2` in a TLS server's `alpn`, or `mode tcp`).
    #[default]
    Never,
    /// When TLS agrees on `h2` (`ssl alpn h2,...`).
    Alpn,
    /// Always (`proto h2`): prior knowledge in clear text, whatever ALPN says over TLS.
    Always,
}

/// `tune.h2.*`: what sluice announces to HTTP/2 clients (HAProxy's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Tune {
    /// `tune.h2.header-table-size` (default 4096, at most 65536).
    pub header_table_size: u32,
    /// `tune.h2.initial-window-size` (default 65535).
    pub initial_window_size: u32,
    /// `tune.h2.max-concurrent-streams` (default 100; 0 in the file: no limit).
    pub max_concurrent_streams: u32,
    /// `tune.h2.max-frame-size` (default: the larger of 16384 and `tune.bufsize`).
    pub max_frame_size: Option<u32>,
}

impl Default for H2Tune {
    fn default() -> Self {
        use crate::stream::http2 as h;
        H2Tune {
            header_table_size: h::DEFAULT_HEADER_TABLE_SIZE,
            initial_window_size: h::DEFAULT_INITIAL_WINDOW_SIZE,
            max_concurrent_streams: h::DEFAULT_MAX_CONCURRENT_STREAMS,
            max_frame_size: None,
        }
    }
}

/// `cpu-map [auto:]1/1-4 0-3`: thread numbers (1-based, as in HAProxy) mapped to CPU sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuMap {
    /// 1-based thread numbers this line applies to.
    pub threads: Vec<usize>,
    pub cpus: Vec<usize>,
    /// `auto:`: thread N gets the N-th CPU of the set instead of the whole set.
    pub auto: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Tcp,
    Http,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyKind {
    Frontend,
    Backend,
    Listen,
}

impl ProxyKind {
    pub fn has_frontend(self) -> bool {
        matches!(self, ProxyKind::Frontend | ProxyKind::Listen)
    }
    pub fn has_backend(self) -> bool {
        matches!(self, ProxyKind::Backend | ProxyKind::Listen)
    }
}

/// HTTP connection mode (`option http-keep-alive` (default), `http-server-close`, `httpclose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpConnMode {
    #[default]
    KeepAlive,
    ServerClose,
    Close,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Option<Duration>,
    pub client: Option<Duration>,
    pub server: Option<Duration>,
    pub http_request: Option<Duration>,
    pub http_keep_alive: Option<Duration>,
    pub queue: Option<Duration>,
    pub tunnel: Option<Duration>,
    pub client_fin: Option<Duration>,
    pub server_fin: Option<Duration>,
    pub check: Option<Duration>,
    /// `timeout tarpit`: kept for what it means in HAProxy, the hold time of `tarpit` rules,
    /// which alone use it; sluice has no `tarpit` action (it is refused), so nothing reads it.
    pub tarpit: Option<Duration>,
}

/// `option forwardfor [except NET] [header NAME] [if-none]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardFor {
    /// Network whose sources do not get the header (`except 127.0.0.0/8`).
    pub except: Option<IpNet>,
    /// Header name, default `X-Forwarded-For`.
    pub header: String,
    pub if_none: bool,
}

/// An IPv4 or IPv6 network (`10.0.0.0/8`, `::1/128`); a bare address is a /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        // Compare v4-mapped v6 addresses as v4, as HAProxy does for `src` matching.
        // A v6 network is matched against the v4-mapped form of a v4 sample.
        let ip = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            (IpAddr::V6(_), IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
            _ => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let p = self.prefix.min(32) as u32;
                let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
                (u32::from(n) & mask) == (u32::from(a) & mask)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let p = self.prefix.min(128) as u32;
                let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
                (u128::from(n) & mask) == (u128::from(a) & mask)
            }
            _ => false,
        }
    }
}

/// `http-reuse` (default `safe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpReuse {
    Never,
    #[default]
    Safe,
    Aggressive,
    Always,
}

#[derive(Debug, Clone, Default)]
pub struct ProxyOptions {
    pub httplog: bool,
    /// `option httplog clf`
    pub httplog_clf: bool,
    pub tcplog: bool,
    /// `log-format`: replaces the `httplog`/`tcplog` line (the last of the three wins).
    pub log_format: Option<std::sync::Arc<logformat::LogFormat>>,
    /// `unique-id-format`: each request's unique id (`%ID`), made when its head arrives.
    pub unique_id_format: Option<std::sync::Arc<logformat::LogFormat>>,
    /// `unique-id-header NAME`: the header that carries the unique id to the server.
    pub unique_id_header: Option<String>,
    pub dontlognull: bool,
    /// `option dontlog-normal`: only the log lines [`crate::log::worth_err`] picks.
    pub dontlog_normal: bool,
    /// `option log-separate-errors`: those lines at level `err` instead of `info`.
    pub log_separate_errors: bool,
    pub forwardfor: Option<ForwardFor>,
    pub http_conn_mode: HttpConnMode,
    pub abortonclose: bool,
    /// `option allbackups`: with no active server up, balance over every usable backup
    /// instead of only the first one.
    pub allbackups: bool,
    pub redispatch: bool,
    /// `option redispatch <interval>`: redispatch on every Nth retry (N > 0), or on the
    /// |N|th retry before the last one (N < 0; the default -1 is the last retry).
    pub redispatch_after: i32,
    /// `http-reuse` (a backend setting).
    pub http_reuse: HttpReuse,
    /// Which health check the servers run (`option httpchk`, `option tcp-check`, or a
    /// plain connect).
    pub check_type: CheckType,
    /// `external-check command|path` (for `option external-check`).
    pub external_check: ExternalCheck,
    /// `option httpchk [METHOD] [URI] [VERSION]`: the request line of HTTP checks.
    pub httpchk: Option<HttpChk>,
    /// `http-check connect|send|expect` rules, in order (empty: one request, expect 2xx/3xx).
    pub http_checks: Vec<CheckRule>,
    /// `tcp-check connect|send|expect` rules, in order (empty: connect only).
    pub tcp_checks: Vec<CheckRule>,
    /// `tcp_checks` are the rules of `option redis-check|ssl-hello-chk|pgsql-check|
    /// mysql-check`, whose texts HAProxy words differently (steps counted from the first send,
    /// no "of tcp-check" on timeouts).
    pub protocol_check: bool,
    /// `http-check disable-on-404`.
    pub disable_on_404: bool,
    /// `http-check send-state`.
    pub send_state: bool,
    /// `option log-health-checks`.
    pub log_health_checks: bool,
    /// `option tcp-smart-accept`: the ACK of a client's request waits to ride on the
    /// response (delayed ACK on accepted sockets). `None` = not said: on for `mode http`
    /// and for `ssl` binds, as HAProxy ([`ProxyOptions::smart_accept`]).
    pub tcp_smart_accept: Option<bool>,
    /// `option tcp-smart-connect`: the ACK that completes a server connection waits to ride
    /// on the request.
    pub tcp_smart_connect: bool,
    /// `option clitcpka` (or `tcpka`): TCP keep-alive probes on client connections.
    pub cli_tcpka: bool,
    /// `option srvtcpka` (or `tcpka`): TCP keep-alive probes on server connections.
    pub srv_tcpka: bool,
    /// `clitcpka-idle`, `clitcpka-intvl`, `clitcpka-cnt`: the probes' timing on client
    /// connections (the system's when unset).
    pub cli_tcpka_params: TcpKeepalive,
    /// `srvtcpka-idle`, `srvtcpka-intvl`, `srvtcpka-cnt`: the same on server connections.
    pub srv_tcpka_params: TcpKeepalive,
    /// `option nolinger`: this proxy's side of a connection (clients in a frontend, servers
    /// in a backend) closes with a reset (`SO_LINGER` 0), freeing the socket at once.
    pub nolinger: bool,
    /// `option persist`: a cookie naming a server that is down still sends the request there.
    pub persist: bool,
    /// `option prefer-last-server`: a client connection's next request goes to the server
    /// its previous one used, while that server is usable and has room.
    pub prefer_last_server: bool,
    /// `option http-pretend-keepalive`: with `httpclose` or `http-server-close`, the request
    /// goes to the server without `connection: close` (servers that see it may stop using
    /// chunked encoding); the connection is closed after the response all the same.
    pub http_pretend_keepalive: bool,
    /// `option contstats`: a `mode tcp` session's bytes reach the stats as they move, not
    /// at its end.
    pub contstats: bool,
    /// `option http-buffer-request`: a request's body (up to the buffer size) is received
    /// before a server is chosen.
    pub http_buffer_request: bool,
    /// `option http-use-proxy-header`: a proxied request (its target starts with neither
    /// `/` nor `*`) is authenticated as a proxy does: `Proxy-Authorization`, 407.
    pub http_use_proxy_header: bool,
    /// `option http-ignore-probes`: a connection that closes or times out before its first
    /// request byte (a browser's pre-connect) is neither answered 408 nor logged nor counted.
    pub http_ignore_probes: bool,
    /// `option checkcache`: a response that a shared cache could store with its
    /// `Set-Cookie` is blocked (502, `PH`).
    pub checkcache: bool,
    /// `option logasap`: log a transaction when its response head is sent (HTTP), or its
    /// server connection is made (TCP), not at its end.
    pub logasap: bool,
}

/// The timing of TCP keep-alive probes (`TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpKeepalive {
    pub idle: Option<std::time::Duration>,
    pub intvl: Option<std::time::Duration>,
    pub cnt: Option<u32>,
}

impl TcpKeepalive {
    /// Sets what is configured on `s` (keep-alive itself is `option clitcpka|srvtcpka`).
    pub fn apply(&self, s: &socket2::SockRef<'_>) -> std::io::Result<()> {
        if *self == TcpKeepalive::default() {
            return Ok(());
        }
        let mut k = socket2::TcpKeepalive::new();
        if let Some(t) = self.idle {
            k = k.with_time(t);
        }
        if let Some(t) = self.intvl {
            k = k.with_interval(t);
        }
        if let Some(n) = self.cnt {
            k = k.with_retries(n);
        }
        s.set_tcp_keepalive(&k)
    }
}

impl ProxyOptions {
    /// Whether accepted connections delay their ACKs (`option tcp-smart-accept`): as said,
    /// or else on for `mode http` proxies and `ssl` binds, as HAProxy ("smart accept is
    /// automatic in HTTP mode"), off for plain `mode tcp`. A client's request is then
    /// acknowledged by the response itself: one segment less per connection.
    pub fn smart_accept(&self, mode: Mode, ssl: bool) -> bool {
        self.tcp_smart_accept.unwrap_or(mode == Mode::Http || ssl)
    }
}

/// `option httpchk`: the request line of HTTP checks (defaults `OPTIONS / HTTP/1.0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpChk {
    pub method: String,
    pub uri: String,
    pub version: String,
    /// Headers and body written after the version with `\r\n` (pre-2.2 syntax).
    pub hdrs: Vec<(String, String)>,
    pub body: String,
}

/// Health-check settings of a `server` line (`check` and its timings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckCfg {
    /// `inter` (default 2 s), `fastinter` and `downinter` (default: `inter`).
    pub inter: std::time::Duration,
    pub fastinter: std::time::Duration,
    pub downinter: std::time::Duration,
    /// `rise` (default 2) and `fall` (default 3).
    pub rise: u32,
    pub fall: u32,
    /// `port` / `addr`: where checks go (default: the server's address).
    pub port: Option<u16>,
    pub addr: Option<std::net::IpAddr>,
    /// `check-send-proxy`: checks start with a PROXY protocol header.
    pub send_proxy: bool,
    /// `check-ssl` (`Some(true)`) / `no-check-ssl` (`Some(false)`); `None`: checks use TLS
    /// when the server does (`ssl`) and no check `port`/`addr` is set (HAProxy's rule).
    pub ssl: Option<bool>,
    /// `check-sni NAME`: the SNI of TLS checks (default: the server's `sni str(..)`, if any).
    pub sni: Option<String>,
    /// `check-alpn LIST`: the ALPN protocols TLS checks offer (default: the server's `alpn`).
    pub alpn: Option<Vec<Vec<u8>>>,
    /// `check-proto h1|h2`: the HTTP version of HTTP checks (default: HTTP/2 when TLS
    /// negotiates `h2`, else HTTP/1.x).
    pub proto: Option<CheckProto>,
    /// `check-reuse-pool` (`no-check-reuse-pool`, the default): a plain HTTP check may run
    /// on an idle pooled connection of the server instead of opening its own.
    pub reuse_pool: bool,
}

/// A `frontend`, `backend` or `listen` section, with its `defaults` applied.
#[derive(Debug, Clone)]
pub struct Proxy {
    pub name: String,
    pub kind: ProxyKind,
    pub origin: Origin,
    /// Explicit `id`, if any (numbering of the others is the stats plane's business).
    pub id: Option<u32>,
    pub mode: Mode,
    pub binds: Vec<Bind>,
    /// Frontend `maxconn` (HAProxy default 2000 when neither the proxy nor defaults set it...
    /// except that since 2.2 it defaults to the global maxconn); `None` = global maxconn.
    pub maxconn: Option<u32>,
    pub backlog: Option<u32>,
    pub timeouts: Timeouts,
    pub options: ProxyOptions,
    /// `retries` (default 3).
    pub retries: u32,
    /// `retry-on` (default `conn-failure`).
    pub retry_on: RetryOn,
    /// `rate-limit sessions N`: new sessions per second this frontend accepts.
    pub rate_limit_sessions: Option<u32>,
    /// Index into `Config::proxies` of the `default_backend` (for `listen`: itself unless set).
    pub default_backend: Option<usize>,
    pub use_backends: Vec<UseBackend>,
    pub servers: Vec<Server>,
    /// `source ADDR[:PORT]` in the proxy: the local address of server connections (traffic,
    /// checks, agents) for servers without their own `source`.
    pub source: Option<std::net::SocketAddr>,
    pub balance: Balance,
    pub hash_type: HashType,
    /// Resolved log targets (`log global` already expanded; empty = no logging).
    pub logs: Vec<LogTarget>,
    pub monitor_uri: Option<String>,
    /// `errorfile CODE FILE`: the file's raw bytes (a full HTTP response, as in HAProxy).
    pub errorfiles: HashMap<u16, Vec<u8>>,
    pub http_request: Vec<HttpRequestRule>,
    pub http_response: Vec<HttpResponseRule>,
    /// `http-after-response`: header, status and variable actions on every response the
    /// client gets, sluice's own included (backend rules first, then the frontend's).
    pub http_after_response: Vec<HttpResponseRule>,
    /// `capture request header NAME len N`, `declare capture request len N`, and the slots
    /// of `http-request capture ... len N`, in declaration order (the log's `%hr`).
    pub capture_req: Vec<CaptureSlot>,
    /// The same for responses (`%hs`).
    pub capture_rsp: Vec<CaptureSlot>,
    /// `cookie NAME ...`: server persistence by a cookie (a backend setting).
    /// `dynamic-cookie-key KEY` (for `cookie ... dynamic`).
    pub dynamic_cookie_key: Option<String>,
    pub cookie: Option<CookieCfg>,
    /// `compression algo|type|offload`.
    pub compression: Option<crate::compression::CompressionCfg>,
    /// `fullconn N`: the backend load at which `minconn` servers reach their `maxconn`
    /// (default, when a server has `minconn`: 10 % of the maxconn of the frontends that can
    /// route to it, as HAProxy).
    pub fullconn: Option<u32>,
    /// `tcp-request connection accept|reject [COND]`: evaluated when a client connects.
    pub tcp_connection: Vec<TcpRequestRule>,
    /// `tcp-request content accept|reject [COND]` (`mode tcp`): evaluated on what the
    /// client sent first, waiting up to `tcp-request inspect-delay` for it.
    pub tcp_content: Vec<TcpRequestRule>,
    pub inspect_delay: Option<std::time::Duration>,
    /// `redirect ...` rules (the proxy keyword): evaluated after the proxy's `http-request`
    /// rules and its stats page, the first matching one answers.
    pub redirects: Vec<RedirectRule>,
    /// `stats ...`: the HTTP stats page this proxy serves (any `stats` keyword enables it).
    pub stats: Option<StatsPage>,
    /// `stick-table ...`: the proxy's table (its name is the proxy's).
    pub stick_table: Option<std::sync::Arc<crate::stick::Table>>,
    /// `filter spoe`: the SPOE engines of the proxy, in declaration order.
    pub spoe: Vec<std::sync::Arc<crate::spoe::Engine>>,
    /// `stick on|match|store-request`: server persistence through a stick table.
    pub sticks: Vec<StickRule>,
}

impl Proxy {
    /// Whether a `tcp-request content switch-mode http` rule may turn this `mode tcp`
    /// frontend's sessions into HTTP: its HTTP rules are then kept for them.
    pub fn switches_to_http(&self) -> bool {
        self.tcp_content
            .iter()
            .any(|r| matches!(r.action, TcpAction::SwitchMode(_)))
    }
}

/// `stick on|match|store-request|store-response PATTERN [table T] [if|unless COND]`.
#[derive(Debug, Clone)]
pub struct StickRule {
    pub origin: Origin,
    /// Reads the table to choose the server (`on`, `match`).
    pub matches: bool,
    /// Writes the chosen server to the table (`on`, `store-request`, `store-response`).
    pub stores: bool,
    /// `store-response`: written once the server's response head is in, with the pattern
    /// and condition read from the response.
    pub on_response: bool,
    pub key: SampleFetch,
    pub table: crate::stick::TableRef,
    pub cond: Option<Cond>,
}

/// What sluice does with the persistence cookie (`cookie NAME [rewrite|insert|prefix]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieMode {
    /// None of the three: the application sets the cookie, sluice only reads it.
    Passive,
    /// sluice sets the cookie in responses (`insert`).
    Insert,
    /// The server's `Set-Cookie: NAME=...` gets the server's cookie value (`rewrite`).
    Rewrite,
    /// The server's cookie value is prefixed with `SRVID~`, stripped again on requests.
    Prefix,
}

/// `cookie NAME [rewrite|insert|prefix] [indirect] [nocache] [postonly] [preserve] [httponly]
/// [secure] [domain D]* [maxidle T] [maxlife T] [attr V]*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieCfg {
    pub name: String,
    pub mode: CookieMode,
    /// No cookie sent to a client that already has a valid one; with `insert`, the cookie is
    /// also removed from requests before they reach the server.
    pub indirect: bool,
    /// `Cache-control: private` on cacheable responses that get an inserted cookie.
    pub nocache: bool,
    /// Insert only in responses to POST requests.
    pub postonly: bool,
    /// A server that sets the cookie itself keeps it (and sluice inserts none).
    pub preserve: bool,
    pub httponly: bool,
    pub secure: bool,
    pub domains: Vec<String>,
    /// Seconds after its last use (`maxidle`) or its first (`maxlife`) that a cookie stops
    /// counting; inserted cookies then carry those dates.
    pub maxidle: Option<u32>,
    pub maxlife: Option<u32>,
    /// `attr V`: extra attributes appended to inserted cookies (`SameSite=Lax`).
    pub attrs: Vec<String>,
    /// `dynamic`: servers without `cookie VALUE` get one made from the backend's
    /// `dynamic-cookie-key` and their address (see [`dynamic_cookie`]).
    pub dynamic: bool,
}

/// HAProxy's dynamic cookie of a server (`srv_set_dyncookie`): XXH64, seed 0, of the key's
/// bytes, the server's IP address (4 or 16 bytes) and its port as 4 big-endian bytes, printed
/// as 16 hexadecimal digits, so that sluice and HAProxy in front of the same servers agree.
pub fn dynamic_cookie(key: &str, addr: SocketAddr) -> String {
    let mut b = key.as_bytes().to_vec();
    match addr.ip() {
        std::net::IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
        std::net::IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
    }
    b.extend_from_slice(&u32::from(addr.port()).to_be_bytes());
    format!("{:016x}", xxhash_rust::xxh64::xxh64(&b, 0))
}

impl CookieCfg {
    /// `cookie NAME` alone: passive, no option.
    pub fn new(name: &str) -> CookieCfg {
        CookieCfg {
            name: name.to_string(),
            mode: CookieMode::Passive,
            indirect: false,
            nocache: false,
            postonly: false,
            preserve: false,
            httponly: false,
            secure: false,
            domains: Vec::new(),
            maxidle: None,
            maxlife: None,
            attrs: Vec::new(),
            dynamic: false,
        }
    }
}

/// HAProxy's default `stats uri`.
pub const DEFAULT_STATS_URI: &str = "/haproxy?stats";
/// HAProxy's default `stats realm`.
pub const DEFAULT_STATS_REALM: &str = "HAProxy Statistics";

/// The stats page of a proxy (`stats enable`, `stats uri`, `stats auth`, ...).
#[derive(Debug, Clone)]
pub struct StatsPage {
    /// URI prefix that selects the page (`stats uri`, default `/haproxy?stats`).
    pub uri: String,
    /// `stats realm` (default `HAProxy Statistics`).
    pub realm: String,
    /// `stats auth USER:PASS`, as `USER:PASS` strings; empty = no authentication.
    pub auth: Vec<String>,
    /// `stats refresh`, in seconds (0 = none).
    pub refresh: u32,
    /// `stats scope NAME`: proxies shown (empty = all; `.` = the serving proxy).
    pub scope: Vec<String>,
    pub show_legends: bool,
    pub hide_version: bool,
    /// `stats show-node [NAME]` (`Some(None)`: the global `node`) and `stats show-desc
    /// [TEXT]` (`Some(None)`: the global `description`): shown in the page's title.
    pub show_node: Option<Option<String>>,
    pub show_desc: Option<Option<String>>,
    /// `stats admin if|unless COND`.
    pub admin: Option<Cond>,
}

impl Default for StatsPage {
    fn default() -> Self {
        StatsPage {
            uri: DEFAULT_STATS_URI.to_string(),
            realm: DEFAULT_STATS_REALM.to_string(),
            auth: Vec::new(),
            refresh: 0,
            scope: Vec::new(),
            show_legends: false,
            hide_version: false,
            show_node: None,
            show_desc: None,
            admin: None,
        }
    }
}

/// `use_backend NAME [if|unless COND]`.
#[derive(Debug, Clone)]
pub struct UseBackend {
    /// Index into `Config::proxies`; `None` for a dynamic name.
    pub backend: Option<usize>,
    /// A name made per request (`use_backend be_%[req.hdr(host),lower]`).
    pub dynamic: Option<std::sync::Arc<TextFormat>>,
    pub cond: Option<Cond>,
}

/// A string built per request from text and `%[expr]` samples: a dynamic backend name, a
/// `set-var-fmt` value.
#[derive(Debug)]
pub struct TextFormat {
    parts: Vec<NamePart>,
}

#[derive(Debug)]
enum NamePart {
    Text(Box<str>),
    Sample(SampleFetch),
}

impl TextFormat {
    /// Parses text with `%[...]` samples (`%%` is a `%`); other log-format variables are
    /// errors (sluice evaluates only samples here).
    pub fn parse(s: &str) -> Result<TextFormat, String> {
        let b = s.as_bytes();
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'%' {
                let ch = s[i..].chars().next().unwrap_or_default();
                text.push(ch);
                i += ch.len_utf8();
                continue;
            }
            match b.get(i + 1) {
                Some(b'%') => {
                    text.push('%');
                    i += 2;
                }
                Some(b'[') => {
                    let mut depth = 0usize;
                    let end = b[i + 2..].iter().enumerate().find_map(|(k, &c)| {
                        match c {
                            b'(' => depth += 1,
                            b')' => depth = depth.saturating_sub(1),
                            b']' if depth == 0 => return Some(i + 2 + k),
                            _ => {}
                        }
                        None
                    });
                    let Some(end) = end else {
                        return Err(format!("missing ']' in '{s}'"));
                    };
                    if !text.is_empty() {
                        parts.push(NamePart::Text(std::mem::take(&mut text).into()));
                    }
                    let f = SampleFetch::parse_with_payload(&s[i + 2..end])?;
                    parts.push(NamePart::Sample(f));
                    i = end + 1;
                }
                _ => {
                    return Err(format!(
                        "'{s}': only '%[expression]' samples are supported by sluice here \
                         (not other log-format variables)"
                    ));
                }
            }
        }
        if !text.is_empty() {
            parts.push(NamePart::Text(text.into()));
        }
        Ok(TextFormat { parts })
    }

    /// Whether a sample reads the HTTP request.
    pub fn uses_http(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, NamePart::Sample(f) if f.uses_http()))
    }

    /// Whether a sample reads the client's first data (`req.ssl_sni`).
    pub fn needs_payload(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, NamePart::Sample(f) if f.needs_payload()))
    }

    /// The text for this request into `out`, a missing sample as nothing.
    pub fn render_all(&self, view: &dyn HttpView, out: &mut Vec<u8>) {
        out.clear();
        for p in &self.parts {
            match p {
                NamePart::Text(t) => out.extend_from_slice(t.as_bytes()),
                NamePart::Sample(f) => {
                    f.write(view, out);
                }
            }
        }
    }

    /// The name for this request into `out`; `false` when a sample is missing.
    pub fn render(&self, view: &dyn HttpView, out: &mut Vec<u8>) -> bool {
        out.clear();
        for p in &self.parts {
            match p {
                NamePart::Text(t) => out.extend_from_slice(t.as_bytes()),
                NamePart::Sample(f) => {
                    if !f.write(view, out) {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// `set-var(NAME[,COND...]) EXPR`, `set-var-fmt(NAME[,COND...]) FMT`, `unset-var(NAME)`, in
/// `http-request`, `http-response` and `tcp-request` rules.
#[derive(Debug, Clone)]
pub enum VarAction {
    Set {
        name: crate::vars::VarName,
        conds: Box<[crate::vars::SetCond]>,
        expr: SampleFetch,
    },
    SetFmt {
        name: crate::vars::VarName,
        conds: Box<[crate::vars::SetCond]>,
        fmt: std::sync::Arc<TextFormat>,
    },
    Unset(crate::vars::VarName),
}

/// Rules compare by what they say (for configuration equality).
impl PartialEq for VarAction {
    fn eq(&self, o: &VarAction) -> bool {
        use VarAction::*;
        match (self, o) {
            (
                Set { name, conds, expr },
                Set {
                    name: n2,
                    conds: c2,
                    expr: e2,
                },
            ) => name == n2 && conds == c2 && expr.text() == e2.text(),
            (
                SetFmt { name, conds, fmt },
                SetFmt {
                    name: n2,
                    conds: c2,
                    fmt: f2,
                },
            ) => name == n2 && conds == c2 && std::sync::Arc::ptr_eq(fmt, f2),
            (Unset(a), Unset(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for VarAction {}

impl VarAction {
    /// Runs the action on the variables of the session `view` shows (or the process's).
    pub fn run(&self, view: &dyn HttpView) {
        let own = crate::vars::Vars::default();
        let vars = view.sess().vars.unwrap_or(&own);
        match self {
            VarAction::Set { name, conds, expr } => {
                if let Some(v) = expr.value(view) {
                    vars.set(name, v, conds);
                }
            }
            VarAction::SetFmt { name, conds, fmt } => {
                let mut out = Vec::new();
                fmt.render_all(view, &mut out);
                vars.set(name, converter::Val::Str(out), conds);
            }
            VarAction::Unset(name) => vars.unset(name),
        }
    }
}

impl UseBackend {
    /// The backend this rule picks for a request its condition matched: `None` when a
    /// dynamic name names no backend of mode `mode` (HAProxy then stops at the default
    /// backend).
    /// The backend this rule names for a request of a `from` frontend: a dynamic name only
    /// finds a backend an HTTP frontend could use (a `mode tcp` one may use either mode).
    pub fn target(&self, cfg: &Config, from: Mode, view: &dyn HttpView) -> Option<usize> {
        if let Some(b) = self.backend {
            return Some(b);
        }
        let d = self.dynamic.as_ref()?;
        let mut name = Vec::with_capacity(32);
        if !d.render(view, &mut name) {
            return None;
        }
        cfg.proxies.iter().position(|p| {
            p.kind.has_backend()
                && (p.mode == from || from == Mode::Tcp)
                && p.name.as_bytes() == name
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// `abns@NAME`: a UNIX socket in Linux's abstract namespace (no file).
    Abns(String),
    /// `fd@N`: an already-listening socket inherited from the parent process.
    Fd(i32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub addr: BindAddr,
    pub origin: Origin,
    pub name: Option<String>,
    pub maxconn: Option<u32>,
    pub backlog: Option<u32>,
    pub defer_accept: bool,
    /// `tfo`: TCP Fast Open on the listening socket.
    pub tfo: bool,
    /// `accept-proxy`: each connection starts with a PROXY header (v1 or v2) whose
    /// addresses replace the connection's for everything after `tcp-request connection`.
    pub accept_proxy: bool,
    /// How logs name the listener: its `name`, else its number in the proxy (`fe/1`). Shared:
    /// an `accept-proxy` session takes it without copying.
    pub label: std::sync::Arc<str>,
    pub v4v6: bool,
    pub v6only: bool,
    /// `interface NAME`: the socket receives only what arrives on that network interface
    /// (`SO_BINDTODEVICE`).
    pub interface: Option<String>,
    /// `ssl` and its options, certificates loaded (`None`: plain TCP).
    pub ssl: Option<std::sync::Arc<crate::tls::BindTls>>,
    /// `proto h1|h2`: the HTTP version its clients speak (default: either).
    pub proto: crate::stream::http2::BindProto,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    pub origin: Origin,
    pub addr: SocketAddr,
    /// `weight` (default 1, 0..=256).
    pub weight: u32,
    /// `maxconn` (0 = unlimited).
    pub maxconn: u32,
    /// `maxqueue` (0 = unlimited).
    pub maxqueue: u32,
    pub backup: bool,
    pub disabled: bool,
    pub id: Option<u32>,
    /// `pool-max-conn` (`None` = unlimited, HAProxy's -1; `Some(0)` disables pooling).
    pub pool_max_conn: Option<u32>,
    /// `pool-purge-delay` (default 5 s).
    pub pool_purge_delay: std::time::Duration,
    /// `pool-low-conn` (default 0): idle connections of the server in all threads below which
    /// a thread connects instead of taking one over from another thread.
    pub pool_low_conn: u32,
    /// `pool-conn-name EXPR`: idle connections are reused only for requests whose value of
    /// EXPR is the same.
    pub pool_conn_name: Option<NameExpr>,
    /// `check-pool-conn-name EXPR` (for checks that reuse pooled connections).
    pub check_pool_conn_name: Option<NameExpr>,
    /// `max-reuse` (`None` = unlimited).
    pub max_reuse: Option<u32>,
    /// `cookie VALUE`: what the backend's persistence cookie holds for this server.
    pub cookie: Option<String>,
    /// `minconn N`: the least of the dynamic maxconn (with the backend's `fullconn`).
    pub minconn: Option<u32>,
    /// Started without an address (`init-addr none` after the other methods failed): in
    /// maintenance until `set server ... addr` or its resolvers give it one.
    pub unresolved: bool,
    /// `resolvers NAME` on a server named by a host name: it follows the name's DNS records.
    pub resolve: Option<crate::resolvers::ServerResolve>,
    /// `send-proxy` / `send-proxy-v2`: new connections start with a PROXY header carrying
    /// the client's addresses (and stay private to that client).
    pub send_proxy: Option<crate::send_proxy::Version>,
    /// Whether requests go to this server in HTTP/2 (`proto h2`, or `alpn h2` agreed over
    /// TLS; `mode http` only).
    pub h2: ServerH2,
    /// Port mapping (an address without a port, or `:+N` / `:-N`): connections go to the port
    /// the client connected to plus this offset, and `addr`'s port is 0.
    pub port_map: Option<i32>,
    /// `unix@PATH`, `/PATH`, `abns@NAME`: the server listens on a UNIX socket (then `addr`
    /// is unused).
    pub unix: Option<UnixTarget>,
    /// `source ADDR[:PORT]`: the local address connections to the server are made from.
    pub source: Option<SocketAddr>,
    /// `source ADDR:LOW-HIGH`: connections take their port in LOW..=HIGH (`source` holds LOW),
    /// in turn; see `backend::ServerState::source_now`.
    pub source_high: Option<u16>,
    /// `check` (with its timings), `None` without it.
    pub check: Option<CheckCfg>,
    /// Agent, observe, slowstart, track and on-marked-* settings.
    pub health: HealthCfg,
    /// `ssl` and its options (`None`: plain TCP to this server).
    pub tls: Option<std::sync::Arc<crate::tls::ServerTls>>,
    /// `ssl`: sessions use TLS.
    pub ssl: bool,
    /// The TLS options of the line as written, kept so that TLS settings can be built for
    /// checks alone once the proxy is known (`tcp-check connect ssl` on a plain server).
    pub tls_opts: crate::tls::ServerTlsOpts,
}

/// A server's UNIX socket: a path, or a name in Linux's abstract namespace (`abns@`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnixTarget {
    Path(std::path::PathBuf),
    Abstract(String),
}

impl std::fmt::Display for UnixTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnixTarget::Path(p) => write!(f, "unix@{}", p.display()),
            UnixTarget::Abstract(n) => write!(f, "abns@{n}"),
        }
    }
}

impl Server {
    /// Whether its connections belong to one client and are never pooled for others: they
    /// carry that client's address (`send-proxy*`) or go to the port it connected to.
    pub fn private_conns(&self) -> bool {
        self.send_proxy.is_some() || self.port_map.is_some()
    }

    /// The address to connect to for a client that connected to `local`: the server's own, or
    /// with its port mapped. A mapping without a local address, or out of range, gives port 0,
    /// which no connection reaches.
    pub fn target(
        &self,
        addr: std::net::SocketAddr,
        local: Option<std::net::SocketAddr>,
    ) -> std::net::SocketAddr {
        match self.port_map {
            None => addr,
            Some(off) => {
                let p = local.map_or(0, |l| i32::from(l.port()) + off);
                let port = u16::try_from(p).unwrap_or(0);
                std::net::SocketAddr::new(addr.ip(), port)
            }
        }
    }
}

/// A naming expression (`pool-conn-name`): the subset of HAProxy's sample expressions sluice
/// evaluates there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameExpr {
    /// `str(TEXT)`: a constant.
    Str(String),
    /// `req.hdr(NAME)` / `hdr(NAME)`: the request's first `NAME` header value.
    ReqHdr(String),
}

impl NameExpr {
    pub fn parse(s: &str) -> Result<NameExpr, String> {
        let arg = |prefix: &str| {
            s.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(')'))
                .filter(|a| !a.is_empty())
        };
        if let Some(a) = arg("str(") {
            Ok(NameExpr::Str(a.to_string()))
        } else if let Some(a) = arg("req.hdr(").or_else(|| arg("hdr(")) {
            Ok(NameExpr::ReqHdr(a.to_ascii_lowercase()))
        } else {
            Err(format!(
                "unsupported expression '{s}' (sluice evaluates str(TEXT) and req.hdr(NAME) here)"
            ))
        }
    }
}

/// `retry-on`: which failures after a request was sent make sluice send it again (within
/// `retries`). Whatever it says, only requests sluice can replay are retried: idempotent
/// methods without a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOn {
    pub conn_failure: bool,
    /// The server closed the connection without a response byte.
    pub empty_response: bool,
    /// The response head was invalid.
    pub junk_response: bool,
    /// `timeout server` expired before a response byte.
    pub response_timeout: bool,
    /// Response statuses that are retried (401 403 404 408 425 500 501 502 503 504), as a
    /// bit per status in `RetryOn::STATUSES`.
    pub statuses: u16,
}

impl RetryOn {
    pub const STATUSES: [u16; 10] = [401, 403, 404, 408, 425, 500, 501, 502, 503, 504];

    pub fn none() -> RetryOn {
        RetryOn {
            conn_failure: false,
            empty_response: false,
            junk_response: false,
            response_timeout: false,
            statuses: 0,
        }
    }

    /// Whether a response with `status` is retried.
    pub fn status(&self, status: u16) -> bool {
        self.statuses != 0
            && RetryOn::STATUSES
                .iter()
                .position(|&s| s == status)
                .is_some_and(|i| self.statuses & (1 << i) != 0)
    }
}

impl Default for RetryOn {
    fn default() -> Self {
        RetryOn {
            conn_failure: true,
            ..RetryOn::none()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Balance {
    #[default]
    RoundRobin,
    StaticRr,
    LeastConn,
    First,
    Source,
    Uri {
        whole: bool,
        len: Option<usize>,
        depth: Option<usize>,
        path_only: bool,
    },
    UrlParam {
        name: String,
    },
    Hdr {
        name: String,
        use_domain_only: bool,
    },
    /// `random` / `random(N)`: draws (default 2).
    Random {
        draws: u32,
    },
}

impl Balance {
    /// Whether the server follows from a request property (HAProxy's `BE_LB_KIND_HI`):
    /// `source`, `uri`, `url_param`, `hdr()`. `random` does not count, as in HAProxy.
    pub fn hashes_request(&self) -> bool {
        matches!(
            self,
            Balance::Source | Balance::Uri { .. } | Balance::UrlParam { .. } | Balance::Hdr { .. }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashMethod {
    #[default]
    MapBased,
    Consistent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashFunction {
    #[default]
    Sdbm,
    Djb2,
    Wt6,
    Crc32,
}

/// `hash-type <method> [<function>] [avalanche]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HashType {
    pub method: HashMethod,
    pub function: HashFunction,
    pub avalanche: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogDest {
    Stdout,
    Stderr,
    Udp(SocketAddr),
    /// `log /dev/log ...` (unix datagram socket).
    Unix(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// HAProxy's default: RFC 3164 without the host name.
    #[default]
    Local,
    Rfc3164,
    Rfc5424,
    /// `<level>` and the text.
    Short,
    /// `<facility*8+level>` and the text.
    Priority,
    /// `<level>`, an ISO 8601 date, and the text.
    Timed,
    /// An ISO 8601 date and the text.
    Iso,
    Raw,
}

/// `log ADDR [len N] [format F] FACILITY [LEVEL [MINLEVEL]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTarget {
    pub dest: LogDest,
    pub format: LogFormat,
    /// syslog facility number (local0 = 16).
    pub facility: u8,
    /// Maximum level sent (0 emerg .. 7 debug; default 7).
    pub level: u8,
    pub minlevel: u8,
    /// `len N` (default 1024).
    pub maxlen: usize,
}

#[derive(Debug, Clone)]
pub struct HttpRequestRule {
    pub origin: Origin,
    pub action: HttpRequestAction,
    pub cond: Option<Cond>,
}

/// `tcp-request connection|content ACTION [if|unless COND]`.
#[derive(Debug, Clone)]
pub struct TcpRequestRule {
    pub origin: Origin,
    pub action: TcpAction,
    pub cond: Option<Cond>,
}

#[derive(Debug, Clone)]
pub enum TcpAction {
    /// Stops the evaluation and lets the session go on.
    Accept,
    /// Closes the connection.
    Reject,
    /// `silent-drop`: the connection disappears without the client being told.
    SilentDrop,
    /// A stick-table action; evaluation goes on with the next rule.
    Stick(StickAction),
    /// `set-var`, `set-var-fmt`, `unset-var`; evaluation goes on.
    SetVar(VarAction),
    /// `lua.NAME [ARGS]`: a Lua function registered with `core.register_action`.
    Lua(crate::lua::LuaAction),
    /// `switch-mode http [proto h1|h2]`: a `mode tcp` frontend's session becomes HTTP here,
    /// and the frontend's HTTP rules apply to it. Stops the evaluation.
    SwitchMode(crate::stream::http2::BindProto),
}

/// The stick-table actions of `tcp-request` and `http-request` rules.
#[derive(Debug, Clone)]
pub enum StickAction {
    /// `track-scN KEY [table T]`: slot N of the session (or the request) tracks the key's
    /// entry in table T (the rule's proxy's table by default).
    Track {
        slot: usize,
        key: acl::SampleFetch,
        table: crate::stick::TableRef,
    },
    /// `sc-inc-gpc0(N)`, `sc-inc-gpc1(N)`: adds one to the counter of what slot N tracks.
    IncGpc {
        slot: usize,
        gpc: crate::stick::Data,
    },
    /// `sc-set-gpt0(N) VALUE`.
    SetGpt0 { slot: usize, value: i64 },
}

impl PartialEq for StickAction {
    fn eq(&self, o: &StickAction) -> bool {
        use StickAction::*;
        match (self, o) {
            (
                Track {
                    slot: a,
                    key: k,
                    table: t,
                },
                Track {
                    slot: b,
                    key: l,
                    table: u,
                },
            ) => a == b && k.text() == l.text() && std::sync::Arc::ptr_eq(t, u),
            (IncGpc { slot: a, gpc: g }, IncGpc { slot: b, gpc: h }) => a == b && g == h,
            (SetGpt0 { slot: a, value: v }, SetGpt0 { slot: b, value: w }) => a == b && v == w,
            _ => false,
        }
    }
}

impl Eq for StickAction {}

/// `redirect location|prefix|scheme TARGET [code N] [OPTIONS] [if|unless COND]`.
#[derive(Debug, Clone)]
pub struct RedirectRule {
    pub origin: Origin,
    pub redirect: Redirect,
    pub cond: Option<Cond>,
}

#[derive(Debug, Clone)]
pub struct HttpResponseRule {
    pub origin: Origin,
    pub action: HttpResponseAction,
    pub cond: Option<Cond>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpResponseAction {
    Header(HeaderAction),
    /// `deny [deny_status N] [REPLY]` (default 502): the server's response is dropped with its
    /// connection, and the client gets the status's error page or the reply.
    Deny(Deny),
    /// `silent-drop`: the response is dropped and the client connection disappears without
    /// the client being told (see `stream::silent_drop`).
    SilentDrop,
    /// `allow`: no further rule of this section runs.
    Allow,
    /// `set-status CODE [reason TEXT]`: the status the client gets (and that is logged).
    SetStatus {
        status: u16,
        reason: Option<String>,
    },
    /// `set-map`, `del-map`, `add-acl`, `del-acl`: evaluation goes on.
    PatEdit(PatEdit),
    /// `set-var`, `set-var-fmt`, `unset-var`: evaluation goes on.
    SetVar(VarAction),
    /// `set-log-level LEVEL|silent` (`None`: silent): the transaction's log line goes out at
    /// that level, or not at all.
    SetLogLevel(Option<u8>),
    /// `return [status N] [REPLY]` (default 200): the server's response is dropped with its
    /// connection and the client gets this reply instead.
    Return(Reply),
    /// `cache-store NAME`: the response is kept in the cache, with its header fields as they
    /// are at this rule, if HAProxy's cache would keep it. Evaluation goes on.
    CacheStore(crate::cache::Use),
    /// `capture EXPR id N`: the sample goes into a response capture slot (`%hs`).
    Capture(CaptureAction),
    /// `send-spoe-group ENGINE GROUP`: as the request's; samples see the response.
    SendSpoeGroup(crate::spoe::GroupRef),
    /// `redirect location TARGET [code N]`: the server's response is dropped and the client
    /// is redirected (only `location` redirects, as in HAProxy).
    Redirect(Redirect),
    /// `lua.NAME [ARGS]`: a Lua function registered with `core.register_action`.
    Lua(crate::lua::LuaAction),
}

/// A capture slot of a frontend: a header (`capture request|response header NAME`) or a
/// slot that `http-request|http-response capture` rules fill; at most `len` bytes kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSlot {
    pub header: Option<String>,
    pub len: usize,
}

/// `http-request capture EXPR len N|id N`, `http-response capture EXPR id N`.
#[derive(Debug, Clone)]
pub struct CaptureAction {
    pub expr: SampleFetch,
    pub slot: usize,
}

impl PartialEq for CaptureAction {
    fn eq(&self, o: &CaptureAction) -> bool {
        self.expr.text() == o.expr.text() && self.slot == o.slot
    }
}

impl Eq for CaptureAction {}

/// `deny`'s answer: the status's error page (`errorfile` or built-in), or a reply of its own
/// when the rule gives `content-type`/`string`/`file`/`hdr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deny {
    pub status: u16,
    pub reply: Option<Reply>,
}

/// A response sluice writes itself (`http-request return`, `deny` with a body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
    /// Parts evaluated per request (`None`: the reply is all literal).
    pub formats: Option<Box<ReplyFormats>>,
    /// `errorfile FILE` / `errorfiles NAME`: a whole response sent as it is.
    pub raw: Option<Vec<u8>>,
}

/// The parts of a reply written as log-format strings with samples (`lf-string "%[...]"`,
/// `hdr X %[...]`), evaluated on each request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplyFormats {
    pub body: Option<LfValue>,
    /// Index into `Reply::headers`, and the value's format.
    pub headers: Vec<(usize, LfValue)>,
}

impl Reply {
    /// The whole response; the body is left out for a HEAD request, and `connection: close`
    /// added when the connection ends after it.
    pub fn render(&self, head_request: bool, close: bool) -> Vec<u8> {
        use std::fmt::Write as _;
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let mut r = format!(
            "HTTP/1.1 {} {}\r\ncontent-length: {}\r\n",
            self.status,
            crate::http::reason_phrase(self.status),
            self.body.len()
        );
        if let Some(ct) = &self.content_type {
            let _ = write!(r, "content-type: {ct}\r\n");
        }
        for (n, v) in &self.headers {
            let _ = write!(r, "{n}: {v}\r\n");
        }
        if close {
            r.push_str("connection: close\r\n");
        }
        r.push_str("\r\n");
        let mut bytes = r.into_bytes();
        if !head_request {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

/// A string HAProxy reads as a log-format (header values, redirect targets): literal text
/// (no `%` but `%%`), kept as is so that the common case costs nothing per request, or a
/// compiled format evaluated on each request.
#[derive(Debug, Clone)]
pub enum LfValue {
    Lit(String),
    Fmt {
        text: Box<str>,
        format: Box<logformat::LogFormat>,
    },
}

impl LfValue {
    /// The text as configured (`%%` unescaped for literals).
    pub fn text(&self) -> &str {
        match self {
            LfValue::Lit(s) => s,
            LfValue::Fmt { text, .. } => text,
        }
    }
}

impl PartialEq for LfValue {
    fn eq(&self, o: &LfValue) -> bool {
        matches!(self, LfValue::Lit(_)) == matches!(o, LfValue::Lit(_)) && self.text() == o.text()
    }
}

impl Eq for LfValue {}

impl Default for LfValue {
    fn default() -> LfValue {
        LfValue::Lit(String::new())
    }
}

impl From<&str> for LfValue {
    fn from(s: &str) -> LfValue {
        LfValue::Lit(s.to_string())
    }
}

/// `set-map(FILE) KEY VALUE`, `del-map(FILE) KEY`, `add-acl(FILE) KEY`, `del-acl(FILE) KEY`
/// (`http-request` and `http-response`): a rule changes a pattern file as the CLI's `set map`,
/// `del map`, `add acl`, `del acl` do. KEY and VALUE are log-format strings.
#[derive(Debug, Clone)]
pub struct PatEdit {
    pub op: PatOp,
    pub file: std::sync::Arc<crate::map::PatRef>,
    pub key: LfValue,
    /// `set-map` only.
    pub value: LfValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatOp {
    /// Sets the value of the entries with the key, or adds one.
    SetMap,
    DelMap,
    /// Adds the pattern unless the file has it.
    AddAcl,
    DelAcl,
}

impl PatEdit {
    /// Carries the edit out with the key and value evaluated on the transaction.
    pub fn apply(&self, key: &str, value: &str) {
        match self.op {
            PatOp::SetMap => self.file.rule_set(key, value),
            PatOp::AddAcl => self.file.rule_add(key),
            PatOp::DelMap | PatOp::DelAcl => self.file.rule_del(key),
        }
    }
}

impl PartialEq for PatEdit {
    fn eq(&self, o: &PatEdit) -> bool {
        self.op == o.op
            && std::sync::Arc::ptr_eq(&self.file, &o.file)
            && self.key == o.key
            && self.value == o.value
    }
}

impl Eq for PatEdit {}

/// Header edits shared by `http-request` and `http-response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderAction {
    SetHeader {
        name: String,
        value: LfValue,
    },
    AddHeader {
        name: String,
        value: LfValue,
    },
    /// `del-header NAME [-m str|beg|end|sub|reg]`.
    DelHeader {
        name: String,
        how: NameMatch,
    },
    /// `replace-header NAME REGEX FMT` (`each_value: false`): a field of that name whose
    /// value the regex matches takes FMT as its value, `\1`..`\9` being the regex's groups;
    /// `replace-value` does the same to each comma-separated value.
    Replace {
        name: String,
        regex: Re,
        value: LfValue,
        each_value: bool,
    },
}

/// How `del-header ... -m METH` compares a field's name with NAME: case-insensitively, as
/// HAProxy does; `reg` runs the regex as written on the lower-case name (HAProxy keeps names
/// in lower case, so `^x-` matches `X-Foo` and `^X-` matches nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameMatch {
    Str,
    Beg,
    End,
    Sub,
    Reg(Re),
}

impl NameMatch {
    /// Whether field name `n` matches `name` (lower-case for `beg`, `end` and `sub`).
    pub fn matches(&self, n: &[u8], name: &[u8]) -> bool {
        match self {
            NameMatch::Str => crate::http::header_eq(n, name),
            NameMatch::Beg => n.len() >= name.len() && n[..name.len()].eq_ignore_ascii_case(name),
            NameMatch::End => {
                n.len() >= name.len() && n[n.len() - name.len()..].eq_ignore_ascii_case(name)
            }
            NameMatch::Sub => {
                name.is_empty() || n.windows(name.len()).any(|w| w.eq_ignore_ascii_case(name))
            }
            // A name without upper case needs no copy (HTTP/2 names never have any).
            NameMatch::Reg(re) if !n.iter().any(u8::is_ascii_uppercase) => re.0.is_match(n),
            NameMatch::Reg(re) => re.0.is_match(&n.to_ascii_lowercase()),
        }
    }
}

impl HeaderAction {
    pub fn value(&self) -> Option<&LfValue> {
        match self {
            HeaderAction::SetHeader { value, .. }
            | HeaderAction::AddHeader { value, .. }
            | HeaderAction::Replace { value, .. } => Some(value),
            HeaderAction::DelHeader { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpRequestAction {
    Header(HeaderAction),
    /// `deny [deny_status N] [REPLY]` (default 403).
    Deny(Deny),
    /// `silent-drop`: the client connection disappears without the client being told.
    SilentDrop,
    /// `set-map`, `del-map`, `add-acl`, `del-acl`: evaluation goes on.
    PatEdit(PatEdit),
    /// `allow`: no further rule of this section runs; the request goes on.
    Allow,
    /// `return [status N] [content-type T] [string S | file F] [hdr N V]...` (default 200).
    Return(Reply),
    Redirect(Redirect),
    /// `use-service NAME`: sluice answers the request itself with a built-in service.
    UseService(Service),
    /// `auth [realm R]`: a 401 asking for Basic credentials (the realm defaults to the name
    /// of the proxy whose rule it is).
    Auth {
        realm: Option<String>,
    },
    /// `set-path|set-pathq|set-query|set-uri FMT`, `replace-path|replace-pathq|replace-uri
    /// REGEX FMT`: the request target the server gets, and later rules see.
    Rewrite(UriRewrite),
    /// `track-scN`, `sc-inc-gpc0`, `sc-set-gpt0`: evaluation goes on with the next rule.
    Stick(StickAction),
    /// `set-var`, `set-var-fmt`, `unset-var`: evaluation goes on.
    SetVar(VarAction),
    /// `set-log-level LEVEL|silent` (`None`: silent).
    SetLogLevel(Option<u8>),
    /// `cache-use NAME`: a fresh object of the cache answers the request (after the rest of
    /// the rules); the request's key is kept for `cache-store`. Evaluation goes on.
    CacheUse(crate::cache::Use),
    /// `capture EXPR len N|id N`: the sample goes into a request capture slot (`%hr`).
    Capture(CaptureAction),
    /// `send-spoe-group ENGINE GROUP`: the group's messages go to an agent of the proxy's SPOE
    /// engine, and the rules wait for its answer. Evaluation goes on.
    SendSpoeGroup(crate::spoe::GroupRef),
    /// `lua.NAME [ARGS]`: a Lua function registered with `core.register_action`; evaluation
    /// goes on unless it ends the transaction.
    Lua(crate::lua::LuaAction),
}

/// Which part of the request target a rewrite sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriPart {
    /// The path, without the query string.
    Path,
    /// The path and the query string.
    PathQ,
    /// The query string, after the `?`.
    Query,
    /// The whole target.
    Uri,
}

/// `set-*` (no regex: the part becomes the value) and `replace-*` (the part, when the regex
/// matches it, becomes the value with `\1`..`\9` replaced by the regex's groups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriRewrite {
    pub part: UriPart,
    pub regex: Option<Re>,
    pub value: LfValue,
}

/// A compiled regular expression that compares by its text (for configuration equality).
#[derive(Debug, Clone)]
pub struct Re(pub regex::bytes::Regex);

impl PartialEq for Re {
    fn eq(&self, o: &Re) -> bool {
        self.0.as_str() == o.0.as_str()
    }
}

impl Eq for Re {}

/// Services of `http-request use-service`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    /// `prometheus-exporter`: the metrics in Prometheus' text format.
    PrometheusExporter,
    /// `lua.NAME`: an HTTP service registered with `core.register_service`.
    Lua(Box<str>),
}

impl Service {
    /// Every service, with its configuration name.
    pub const ALL: &'static [(&'static str, Service)] =
        &[("prometheus-exporter", Service::PrometheusExporter)];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    Location,
    Prefix,
    Scheme,
}

/// `redirect location|prefix|scheme TARGET [code N] [drop-query] [append-slash]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub kind: RedirectKind,
    pub target: LfValue,
    /// 301, 302 (default), 303, 307 or 308.
    pub code: u16,
    pub drop_query: bool,
    pub append_slash: bool,
}

impl Config {
    pub fn proxy_by_name(&self, name: &str) -> Option<usize> {
        self.proxies.iter().position(|p| p.name == name)
    }
}

#[cfg(test)]
mod dynamic_cookie_tests {
    /// The value HAProxy 2.6.12 inserted for `dynamic-cookie-key mysecret` and a server at
    /// 127.0.0.1:19992 (`cookie SRVID insert dynamic`, read from its `Set-Cookie`).
    #[test]
    fn matches_haproxy() {
        let a = "127.0.0.1:19992".parse().unwrap();
        assert_eq!(super::dynamic_cookie("mysecret", a), "2c33aa68ad352740");
    }
}
