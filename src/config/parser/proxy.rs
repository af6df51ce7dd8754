//! Proxy sections (`defaults`, `frontend`, `backend`, `listen`): the draft being built, which
//! keyword each kind of section accepts, inheritance from `defaults`, and the simple keywords.
//! `bind`/`server` live in `server`, rules in `rules`, `log` targets in `logs`.

use std::collections::HashMap;

use super::super::acl::AclSet;
use super::super::{
    Balance, Cond, ConfigError, CookieCfg, CookieMode, HashFunction, HashMethod, HashType,
    HttpReuse, LogTarget, Mode, Origin, Proxy, ProxyKind, ProxyOptions, RetryOn, StatsPage,
    Timeouts,
};
use super::values::{arg, no_extra, parse_range, parse_time, parse_u32};
use super::{KwErr, did_you_mean, kind_name, logs, options, rules, server};
use crate::config::tokenizer::Line;

/// A `log` line of a proxy, before `log global` is expanded.
#[derive(Debug, Clone)]
pub(super) enum LogEntry {
    Global,
    Target(LogTarget),
}

/// `default-server` settings (also the defaults of every `server`).
#[derive(Debug, Clone)]
pub(super) struct ServerOpts {
    pub weight: u32,
    pub maxconn: u32,
    pub maxqueue: u32,
    pub backup: bool,
    pub disabled: bool,
    pub pool_max_conn: Option<u32>,
    pub pool_purge_delay: std::time::Duration,
    pub pool_low_conn: u32,
    pub pool_conn_name: Option<crate::config::NameExpr>,
    pub check_pool_conn_name: Option<crate::config::NameExpr>,
    pub max_reuse: Option<u32>,
    pub cookie: Option<String>,
    pub init_addr: Option<Vec<super::server::InitAddr>>,
    pub minconn: Option<u32>,
    pub send_proxy: Option<crate::send_proxy::Version>,
    /// `proto h1|h2`: `Some(true)` for h2.
    pub proto_h2: Option<bool>,
    pub source: Option<std::net::SocketAddr>,
    /// `source ADDR:LOW-HIGH`: the last port of the range (`source` has the first).
    pub source_high: Option<u16>,
    /// `resolvers NAME`, `resolve-prefer`, `resolve-net`, `resolve-opts`.
    pub resolvers: Option<String>,
    pub resolve_prefer_v4: bool,
    pub resolve_nets: Vec<crate::config::IpNet>,
    pub allow_dup_ip: bool,
    /// `resolve-opts ignore-weight`: SRV records' weights leave the server's alone.
    pub ignore_weight: bool,
    /// Health-check options (`check`, `inter`, `agent-check`, `track`, ...).
    pub chk: super::checks::ServerCheckOpts,
    pub tls: crate::tls::ServerTlsOpts,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            weight: 1,
            maxconn: 0,
            maxqueue: 0,
            backup: false,
            disabled: false,
            pool_max_conn: None,
            pool_purge_delay: std::time::Duration::from_secs(5),
            pool_low_conn: 0,
            pool_conn_name: None,
            check_pool_conn_name: None,
            max_reuse: None,
            cookie: None,
            init_addr: None,
            minconn: None,
            send_proxy: None,
            proto_h2: None,
            source: None,
            source_high: None,
            resolvers: None,
            resolve_prefer_v4: false,
            resolve_nets: Vec::new(),
            allow_dup_ip: false,
            ignore_weight: false,
            chk: super::checks::ServerCheckOpts::default(),
            tls: Default::default(),
        }
    }
}

/// A `use_backend` line: its name, the name's format when dynamic, its condition, its line.
pub(super) type UseBackendDraft = (
    String,
    Option<std::sync::Arc<crate::config::TextFormat>>,
    Option<Cond>,
    Origin,
);

/// A proxy (or `defaults` section) being parsed.
#[derive(Debug, Clone)]
pub(super) struct Draft {
    pub p: Proxy,
    pub is_defaults: bool,
    pub logs: Vec<LogEntry>,
    pub default_server: ServerOpts,
    pub acls: AclSet,
    pub default_backend: Option<(String, Origin)>,
    pub use_backends: Vec<UseBackendDraft>,
    /// Where `id` was set.
    pub id_at: Option<Origin>,
    /// Explicit uses of HTTP-only features: (where, keyword, reason). In `mode tcp` those
    /// with a reason are errors; the others are ignored with HAProxy's warning.
    pub http_only: Vec<(Origin, String, Option<String>)>,
    /// Whether `p.stats` came from this section's own `stats` lines (not from `defaults`).
    pub stats_own: bool,
    /// Whether the `http-check` / `tcp-check` rules are this section's own: the first rule a
    /// proxy writes replaces the ones inherited from `defaults` (HAProxy 2.2+).
    pub checks_own: [bool; 2],
    /// `http-check comment` / `tcp-check comment`: the comment of the next rule.
    pub pending_check_comment: Option<String>,
    /// The `global` section's TLS settings as they stood when this section began (HAProxy
    /// reads them when it parses a line's `ssl`).
    pub tls_defaults: crate::tls::TlsDefaults,
    /// `errorfiles NAME [CODE...]` naming an `http-errors` section not read yet: applied when
    /// the configuration is complete.
    pub pending_errorfiles: Vec<(String, Vec<u16>, Origin)>,
}

fn blank_proxy(name: &str, kind: ProxyKind, origin: Origin) -> Proxy {
    Proxy {
        name: name.to_string(),
        kind,
        origin,
        id: None,
        mode: Mode::Tcp,
        binds: Vec::new(),
        maxconn: None,
        backlog: None,
        timeouts: Timeouts::default(),
        options: ProxyOptions::default(),
        retries: 3,
        retry_on: RetryOn::default(),
        rate_limit_sessions: None,
        default_backend: None,
        use_backends: Vec::new(),
        servers: Vec::new(),
        balance: Balance::RoundRobin,
        hash_type: HashType::default(),
        source: None,
        logs: Vec::new(),
        monitor_uri: None,
        errorfiles: HashMap::new(),
        http_request: Vec::new(),
        http_response: Vec::new(),
        http_after_response: Vec::new(),
        capture_req: Vec::new(),
        capture_rsp: Vec::new(),
        redirects: Vec::new(),
        tcp_connection: Vec::new(),
        tcp_content: Vec::new(),
        inspect_delay: None,
        cookie: None,
        dynamic_cookie_key: None,
        compression: None,
        fullconn: None,
        stats: None,
        stick_table: None,
        spoe: Vec::new(),
        sticks: Vec::new(),
    }
}

impl Draft {
    fn new(name: &str, kind: ProxyKind, origin: Origin, base: Option<&Draft>) -> Draft {
        let mut p = blank_proxy(name, kind, origin);
        let mut logs = Vec::new();
        let mut default_server = ServerOpts::default();
        let mut default_backend = None;
        if let Some(b) = base {
            p.mode = b.p.mode;
            p.maxconn = b.p.maxconn;
            p.backlog = b.p.backlog;
            p.timeouts = b.p.timeouts.clone();
            p.options = b.p.options.clone();
            p.retries = b.p.retries;
            p.retry_on = b.p.retry_on;
            p.rate_limit_sessions = b.p.rate_limit_sessions;
            p.balance = b.p.balance.clone();
            p.hash_type = b.p.hash_type;
            p.errorfiles = b.p.errorfiles.clone();
            p.cookie = b.p.cookie.clone();
            // A proxy's own `compression algo|type` lines add to the inherited lists.
            p.compression = b.p.compression.clone();
            p.fullconn = b.p.fullconn;
            // HAProxy shares the defaults' stats settings with every proxy until the proxy
            // has a `stats` line of its own (which then starts from scratch).
            p.stats = b.p.stats.clone();
            logs = b.logs.clone();
            default_server = b.default_server.clone();
            // Frontend-side settings `defaults` may carry (HAProxy copies them only to proxies
            // with a frontend; a `defaults` draft is a listen).
            if kind.has_frontend() {
                p.monitor_uri = b.p.monitor_uri.clone();
                default_backend = b.default_backend.clone();
            }
        }
        Draft {
            p,
            is_defaults: false,
            logs,
            default_server,
            acls: AclSet::new(),
            default_backend,
            use_backends: Vec::new(),
            id_at: None,
            http_only: Vec::new(),
            stats_own: false,
            checks_own: [false; 2],
            pending_check_comment: None,
            tls_defaults: crate::tls::TlsDefaults::default(),
            pending_errorfiles: base
                .map(|b| b.pending_errorfiles.clone())
                .unwrap_or_default(),
        }
    }

    pub(super) fn new_defaults(name: &str, origin: Origin, base: Option<&Draft>) -> Draft {
        let mut d = Draft::new(name, ProxyKind::Listen, origin, base);
        d.is_defaults = true;
        crate::stick::set_current(None);
        d
    }

    pub(super) fn new_proxy(
        name: &str,
        kind: ProxyKind,
        origin: Origin,
        base: Option<&Draft>,
    ) -> Draft {
        crate::stick::set_current(Some(name));
        Draft::new(name, kind, origin, base)
    }

    /// `frontend 'fe'`, `defaults 'd'` or `'defaults' section`.
    pub(super) fn describe(&self) -> String {
        if self.is_defaults {
            if self.p.name.is_empty() {
                "'defaults' section".to_string()
            } else {
                format!("defaults '{}'", self.p.name)
            }
        } else {
            format!("{} '{}'", kind_name(self.p.kind), self.p.name)
        }
    }

    /// Records an HTTP-only keyword used explicitly on line `l`. If the proxy ends up in
    /// `mode tcp`, it is ignored with HAProxy's warning (see `tcp_mode_warning`).
    pub(super) fn needs_http(&mut self, l: &Line, what: &str) {
        self.record_http_only(l, what, None);
    }

    /// Records an HTTP-only use on line `l` that is an error in `mode tcp`, for `reason`:
    /// HTTP samples in a rule HAProxy would keep but that could never match, or a feature
    /// sluice only has in `mode http`.
    pub(super) fn needs_http_because(&mut self, l: &Line, what: &str, reason: &str) {
        self.record_http_only(l, what, Some(reason.to_string()));
    }

    fn record_http_only(&mut self, l: &Line, what: &str, reason: Option<String>) {
        if !self.is_defaults {
            let o = Origin {
                file: l.file.clone(),
                line: l.line,
            };
            self.http_only.push((o, what.to_string(), reason));
        }
    }

    /// A `mode tcp` frontend without `tcp-request inspect-delay` whose rules read the
    /// client's data (`req.payload`, `req.ssl_sni`, HTTP samples): they see what arrived with
    /// the connection, usually nothing. HAProxy warns of this for `tcp-request content` rules;
    /// sluice for `use_backend` too, where it silently routes to the default backend.
    fn warn_uninspected(&self, warnings: &mut Vec<ConfigError>) {
        let reads = |c: &crate::config::Cond| c.needs_payload() || c.uses_http();
        let rules = self
            .p
            .tcp_content
            .iter()
            .filter(|r| r.cond.as_ref().is_some_and(reads))
            .map(|r| (&r.origin, "tcp-request content"));
        let switching = self
            .use_backends
            .iter()
            .filter(|u| {
                u.2.as_ref().is_some_and(reads)
                    || u.1
                        .as_ref()
                        .is_some_and(|f| f.needs_payload() || f.uses_http())
            })
            .map(|u| (&u.3, "use_backend"));
        for (o, kw) in rules.chain(switching).take(1) {
            warnings.push(ConfigError {
                file: o.file.clone(),
                line: o.line,
                message: format!(
                    "'{kw}' in {}: its condition reads the client's data but there is no \
                     'tcp-request inspect-delay', so it sees only what came with the \
                     connection (usually nothing). Set 'tcp-request inspect-delay'.",
                    self.describe()
                ),
            });
        }
    }

    /// `option httplog` in a `mode tcp` frontend that may `switch-mode http`: HAProxy keeps
    /// its HTTP rules but still logs in the TCP format, with its warning.
    fn fall_back_to_tcplog(&mut self, warnings: &mut Vec<ConfigError>) {
        if let Some((o, what, _)) = self.http_only.iter().find(|h| h.1 == "option httplog") {
            warnings.push(ConfigError {
                file: o.file.clone(),
                line: o.line,
                message: self.tcp_mode_warning(what),
            });
        }
        let opts = &mut self.p.options;
        (opts.httplog, opts.httplog_clf, opts.tcplog) = (false, false, true);
    }

    /// The proxy as HAProxy's mode warnings name it: `proxy 'x'` for a `listen` section.
    fn haproxy_name(&self) -> String {
        match self.p.kind {
            ProxyKind::Listen => format!("proxy '{}'", self.p.name),
            k => format!("{} '{}'", kind_name(k), self.p.name),
        }
    }

    /// HAProxy's warning for an HTTP-only keyword `what` in a `mode tcp` proxy; where
    /// HAProxy ignores one without a word, the same sentence as its `capture` warning.
    fn tcp_mode_warning(&self, what: &str) -> String {
        let p = self.haproxy_name();
        match what {
            "http-request" | "http-response" | "http-after-response" | "redirect" => {
                format!("'{what}' rules ignored for {p} as they require HTTP mode.")
            }
            "option httplog" => format!(
                "'option httplog' not usable with {p} (needs 'mode http'). Falling back to \
                 'option tcplog'."
            ),
            "monitor-uri" | "cookie" => {
                format!("{what} will be ignored for {p} (needs 'mode http').")
            }
            w if w.starts_with("balance ") => format!(
                "Layer 7 hash not possible for {p} (needs 'mode http'). Falling back to round \
                 robin."
            ),
            w if w.starts_with("option ") => {
                format!("'{what}' ignored for {p} as it requires HTTP mode.")
            }
            _ => format!("'{what}' statement ignored for {p} as it requires HTTP mode."),
        }
    }

    /// End-of-section checks. In `mode tcp`, HTTP-only keywords are ignored as HAProxy
    /// ignores them, with its warning (pushed to `warnings`) for explicit ones: `httplog`
    /// becomes `tcplog`, HTTP rules, `forwardfor`, `cookie`, `stats` and the like are dropped,
    /// layer-7 balancing becomes `roundrobin`. HTTP samples in TCP rules stay errors.
    pub(super) fn finish(&mut self, warnings: &mut Vec<ConfigError>) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        // Check settings that depend on both the server line and the proxy's check rules.
        let mut servers = std::mem::take(&mut self.p.servers);
        for sv in &mut servers {
            if let Err(e) = super::server::check_needs(sv, &self.p) {
                errors.push(ConfigError {
                    file: sv.origin.file.clone(),
                    line: sv.origin.line,
                    message: format!("'server {}' in {}: {e}", sv.name, self.describe()),
                });
            }
        }
        self.p.servers = servers;
        // `cookie ... dynamic`: a cookie for each server without its own, from its address
        // (servers whose address is not known yet get none, as in HAProxy).
        if let (Some(c), Some(key)) = (&self.p.cookie, &self.p.dynamic_cookie_key)
            && c.dynamic
        {
            for sv in &mut self.p.servers {
                if sv.cookie.is_none() && !sv.unresolved && sv.unix.is_none() {
                    sv.cookie = Some(crate::config::dynamic_cookie(key, sv.addr));
                }
            }
        } else if self.p.cookie.as_ref().is_some_and(|c| c.dynamic) {
            warnings.push(ConfigError {
                file: self.p.origin.file.clone(),
                line: self.p.origin.line,
                message: format!(
                    "{}: 'cookie ... dynamic' without 'dynamic-cookie-key': servers without \
                     'cookie VALUE' get no cookie",
                    self.describe()
                ),
            });
        }
        // `send-spoe-group`: the engine is a `filter spoe` of this proxy, the group one its
        // agent lists.
        let engines = &self.p.spoe;
        let describe = self.describe();
        let req = self
            .p
            .http_request
            .iter_mut()
            .filter_map(|r| match &mut r.action {
                crate::config::HttpRequestAction::SendSpoeGroup(g) => {
                    Some((&r.origin, g, "request"))
                }
                _ => None,
            });
        let rsp = self
            .p
            .http_response
            .iter_mut()
            .filter_map(|r| match &mut r.action {
                crate::config::HttpResponseAction::SendSpoeGroup(g) => {
                    Some((&r.origin, g, "response"))
                }
                _ => None,
            });
        for (origin, g, side) in req.chain(rsp) {
            let found = engines
                .iter()
                .position(|e| e.id == g.engine_name)
                .ok_or_else(|| {
                    format!(
                        "unable to find SPOE engine '{}' in {describe} (declare it with \
                         'filter spoe engine {} config FILE')",
                        g.engine_name, g.engine_name
                    )
                })
                .and_then(|i| {
                    engines[i]
                        .group(&g.group_name)
                        .map(|j| (i, j))
                        .ok_or_else(|| {
                            format!(
                                "unable to find SPOE group '{}' in SPOE engine '{}' (groups \
                                 are listed by the agent's 'groups' line)",
                                g.group_name, g.engine_name
                            )
                        })
                });
            match found {
                Ok((i, j)) => {
                    g.engine = i;
                    g.group = j;
                }
                Err(m) => errors.push(ConfigError {
                    file: origin.file.clone(),
                    line: origin.line,
                    message: format!("'http-{side} send-spoe-group' in {describe}: {m}"),
                }),
            }
        }
        if self.p.mode == Mode::Http {
            for r in &self.p.tcp_content {
                if r.cond.as_ref().is_some_and(|c| c.reads_tcp_data()) {
                    errors.push(ConfigError {
                        file: r.origin.file.clone(),
                        line: r.origin.line,
                        message: format!(
                            "'tcp-request content' in {}: in 'mode http' these rules see each \
                             request, not the connection's raw data ('req.len', 'req.ssl_*' \
                             need 'mode tcp')",
                            self.describe()
                        ),
                    });
                }
            }
        }
        let what = self.describe();
        for b in &mut self.p.binds {
            use crate::stream::http2::BindProto;
            if self.p.mode == Mode::Tcp && b.proto != BindProto::Auto {
                errors.push(ConfigError {
                    file: b.origin.file.clone(),
                    line: b.origin.line,
                    message: format!(
                        "'bind' in {}: 'proto' names an HTTP version, and this proxy is in \
                         'mode tcp'",
                        what
                    ),
                });
            }
            // `proto h1`: HTTP/1.1 only, so h2 is never advertised (see
            // tls::BindTls::http1_only).
            if b.proto == BindProto::H1
                && let Some(t) = &b.ssl
            {
                b.ssl = Some(t.http1_only());
            }
        }
        if self.p.mode == Mode::Tcp
            && !self.is_defaults
            && self.p.kind.has_frontend()
            && self.p.inspect_delay.is_none()
        {
            self.warn_uninspected(warnings);
        }
        // A frontend that may `switch-mode http` keeps its HTTP setup for the sessions it
        // turns into HTTP (HAProxy warns about none of it then).
        if self.p.mode != Mode::Tcp {
            return errors;
        }
        if self.p.switches_to_http() {
            // HAProxy logs such a frontend's sessions, upgraded or not, in the TCP format.
            if self.p.options.httplog {
                self.fall_back_to_tcplog(warnings);
            }
            return errors;
        }
        let mut warned: Vec<&str> = Vec::new();
        for (o, what, reason) in &self.http_only {
            let (list, message) = match reason {
                Some(reason) => (
                    &mut errors,
                    format!("'{what}' in {}: {reason}", self.describe()),
                ),
                // Once per keyword and proxy, at its first line, as HAProxy warns.
                None if warned.contains(&what.as_str()) => continue,
                None => {
                    warned.push(what);
                    (&mut *warnings, self.tcp_mode_warning(what))
                }
            };
            list.push(ConfigError {
                file: o.file.clone(),
                line: o.line,
                message,
            });
        }
        // HAProxy reserves some variables for `mode http` (an inherited format included).
        if self.p.kind.has_frontend()
            && let Some(f) = &self.p.options.log_format
            && let Some(v) = f.http_var
        {
            errors.push(ConfigError {
                file: f.origin.file.clone(),
                line: f.origin.line,
                message: format!(
                    "'log-format' of {}: format variable '%{v}' is reserved for HTTP mode \
                     (this proxy is in mode tcp)",
                    self.describe()
                ),
            });
        }
        let opts = &mut self.p.options;
        if opts.httplog {
            opts.httplog = false;
            opts.httplog_clf = false;
            opts.tcplog = true;
        }
        opts.forwardfor = None;
        // Ignored with a warning above; a session this frontend upgrades to HTTP (its rules
        // pick an HTTP backend) must not see them either.
        opts.http_conn_mode = Default::default();
        opts.http_use_proxy_header = false;
        // An inherited `cookie` or `compression` only applies to HTTP (an explicit one was
        // reported above).
        self.p.cookie = None;
        self.p.compression = None;
        // An inherited `monitor-uri` only applies to HTTP (an explicit one was reported above).
        self.p.monitor_uri = None;
        // Likewise an inherited stats page (an explicit `stats` line was reported above).
        self.p.stats = None;
        let name = self.haproxy_name();
        for sv in &mut self.p.servers {
            if sv.cookie.take().is_some() {
                warnings.push(ConfigError {
                    file: sv.origin.file.clone(),
                    line: sv.origin.line,
                    message: format!(
                        "{name} : ignoring cookie for server '{}' as HTTP mode is disabled.",
                        sv.name
                    ),
                });
            }
        }
        // What only an HTTP stream reads, dropped so that nothing half-applies in `mode tcp`.
        let p = &mut self.p;
        p.http_request.clear();
        p.http_response.clear();
        p.http_after_response.clear();
        p.redirects.clear();
        p.capture_req.clear();
        p.capture_rsp.clear();
        p.options.http_buffer_request = false;
        if matches!(
            self.p.balance,
            Balance::Uri { .. } | Balance::UrlParam { .. } | Balance::Hdr { .. }
        ) {
            self.p.balance = Balance::RoundRobin;
        }
        errors
    }
}

/// HAProxy also puts a unique ID in `mode tcp` logs; sluice makes one only for HTTP requests.
const UNIQUE_ID_TCP: &str = "sluice generates unique IDs only in 'mode http'";

// Where a keyword may appear.
pub(super) const D: u8 = 1;
pub(super) const F: u8 = 2;
pub(super) const B: u8 = 4;

/// Supported proxy keywords and the sections that accept them (`listen` accepts F and B).
const KEYWORDS: &[(&str, u8)] = &[
    ("acl", F | B),
    ("backlog", D | F),
    ("clitcpka-idle", D | F),
    ("clitcpka-intvl", D | F),
    ("clitcpka-cnt", D | F),
    ("srvtcpka-idle", D | B),
    ("srvtcpka-intvl", D | B),
    ("srvtcpka-cnt", D | B),
    ("balance", D | B),
    ("bind", F),
    ("compression", D | F | B),
    ("filter", F | B),
    ("cookie", D | B),
    ("dynamic-cookie-key", D | B),
    ("unique-id-format", D | F),
    ("unique-id-header", D | F),
    ("default-server", D | B),
    ("default_backend", D | F),
    ("description", F | B),
    ("enabled", D | F | B),
    ("errorfile", D | F | B),
    ("errorfiles", D | F | B),
    ("http-error", D | F | B),
    ("hash-type", D | B),
    ("fullconn", D | B),
    ("http-request", F | B),
    ("http-reuse", D | B),
    ("http-check", D | B),
    ("tcp-check", D | B),
    ("external-check", D | B),
    ("http-response", F | B),
    ("http-after-response", F | B),
    ("capture", F),
    ("declare", F),
    ("id", F | B),
    ("log", D | F | B),
    // HAProxy's "May be used in sections" table: not in backends (they log nothing).
    ("log-format", D | F),
    ("maxconn", D | F),
    ("mode", D | F | B),
    ("monitor-uri", D | F),
    ("no", D | F | B),
    ("option", D | F | B),
    ("retries", D | B),
    ("source", D | B),
    ("retry-on", D | B),
    ("rate-limit", D | F),
    ("redirect", F | B),
    ("tcp-request", F | B),
    ("stick-table", F | B),
    ("stick", B),
    ("server", B),
    ("server-template", B),
    ("stats", D | F | B),
    ("timeout", D | F | B),
    ("use_backend", F),
];

/// Real HAProxy proxy keywords that sluice does not implement.
const UNSUPPORTED: &[&str] = &[
    "stick-store-request",
    "stick-store-response",
    "tcp-response",
    "log-format-sd",
    "error-log-format",
    "log-tag",
    "dispatch",
    "hash-balance-factor",
    "hash-key",
    "server-state-file-name",
    "load-server-state-from-file",
    "persist",
    "force-persist",
    "ignore-persist",
    "errorloc",
    "errorloc302",
    "errorloc303",
    "email-alert",
    "grace",
    "bind-process",
    "monitor",
    "use-server",
    "use-fcgi-app",
    "declare",
    "max-keep-alive-queue",
    "max-session-srv-conns",
    "http-send-name-header",
    "disabled",
    "ssl",
    "crt",
    "check",
    "guid",
];

/// Keywords HAProxy removed, with what to write instead.
fn legacy(kw: &str) -> Option<&'static str> {
    Some(match kw {
        "contimeout" => "use 'timeout connect' instead",
        "clitimeout" => "use 'timeout client' instead",
        "srvtimeout" => "use 'timeout server' instead",
        "redispatch" => "use 'option redispatch' instead",
        "reqadd" | "reqdel" | "reqrep" | "reqirep" | "reqidel" | "reqallow" | "reqdeny"
        | "reqtarpit" | "reqpass" | "reqiallow" | "reqideny" | "reqitarpit" | "reqipass"
        | "block" => "was removed in HAProxy 2.1, use 'http-request' instead",
        "rspadd" | "rspdel" | "rsprep" | "rspirep" | "rspidel" | "rspdeny" | "rspideny" => {
            "was removed in HAProxy 2.1, use 'http-response' instead"
        }
        "monitor-net" => "was removed in HAProxy 2.5",
        _ => return None,
    })
}

fn allowed_list(mask: u8) -> String {
    let mut v = Vec::new();
    if mask & D != 0 {
        v.push("defaults");
    }
    if mask & F != 0 {
        v.push("frontend");
    }
    if mask & B != 0 {
        v.push("backend");
    }
    v.push("listen");
    match v.len() {
        1 => v[0].to_string(),
        n => format!("{} and {}", v[..n - 1].join(", "), v[n - 1]),
    }
}

/// Whether `mask` allows the current section.
/// The side a frontend or backend lacks, named as HAProxy's warnings name it.
pub(super) fn missing_side(d: &Draft) -> &'static str {
    if d.p.kind == ProxyKind::Frontend {
        "backend"
    } else {
        "frontend"
    }
}

pub(super) fn allowed(d: &Draft, mask: u8) -> bool {
    if d.is_defaults {
        return mask & D != 0;
    }
    match d.p.kind {
        ProxyKind::Frontend => mask & F != 0,
        ProxyKind::Backend => mask & B != 0,
        ProxyKind::Listen => mask & (F | B) != 0,
    }
}

/// Parses one keyword line of a proxy or defaults section.
pub(super) fn keyword(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let kw = w[0].as_str();
    let Some(&(_, mask)) = KEYWORDS.iter().find(|(k, _)| *k == kw) else {
        if let Some(hint) = legacy(kw) {
            return Err(KwErr::Full(format!(
                "keyword '{kw}' in {} is not supported: {hint}",
                d.describe()
            )));
        }
        if UNSUPPORTED.contains(&kw) {
            return Err(KwErr::Full(format!(
                "keyword '{kw}' in {} is not supported by sluice",
                d.describe()
            )));
        }
        return Err(KwErr::Full(format!(
            "unknown keyword '{kw}' in {}{}",
            d.describe(),
            did_you_mean(kw, KEYWORDS.iter().map(|(k, _)| *k))
        )));
    };
    if !allowed(d, mask) {
        // As HAProxy: in a proxy without the side a keyword acts on, it is ignored with a
        // warning (`server` lines excepted); in `defaults` it is an error.
        if d.is_defaults || matches!(kw, "server" | "default-server") {
            return Err(KwErr::Full(format!(
                "keyword '{kw}' is not allowed in {} (only in {} sections)",
                d.describe(),
                allowed_list(mask)
            )));
        }
        let hint = if kw == "maxconn" {
            " Maybe you want 'fullconn' instead ?"
        } else {
            ""
        };
        crate::config::parser::warn(format!(
            "'{kw}' ignored because {} has no {} capability.{hint}",
            d.describe(),
            missing_side(d)
        ));
        return Ok(());
    }
    match kw {
        "acl" => d.acls.add(&w[1..])?,
        "backlog" => {
            d.p.backlog = Some(parse_u32(arg(w, 1, "number of connections")?)?);
            no_extra(w, 2)?;
        }
        "maxconn" => {
            d.p.maxconn = Some(parse_u32(arg(w, 1, "number of connections")?)?);
            no_extra(w, 2)?;
        }
        // TCP keep-alive timing: times in seconds unless a unit is given, as HAProxy's.
        "clitcpka-idle" | "clitcpka-intvl" | "srvtcpka-idle" | "srvtcpka-intvl" => {
            let v = arg(w, 1, "timeout")?;
            let t = if v.bytes().all(|b| b.is_ascii_digit()) {
                std::time::Duration::from_secs(parse_u32(v)?.into())
            } else {
                parse_time(v)?
            };
            if t.is_zero() {
                return Err(format!("'{kw}' expects a time of at least 1s, got '{v}'").into());
            }
            // The kernel counts whole seconds.
            let t = std::time::Duration::from_secs(t.as_secs().max(1));
            no_extra(w, 2)?;
            let k = if kw.starts_with("cli") {
                &mut d.p.options.cli_tcpka_params
            } else {
                &mut d.p.options.srv_tcpka_params
            };
            if kw.ends_with("idle") {
                k.idle = Some(t);
            } else {
                k.intvl = Some(t);
            }
        }
        "clitcpka-cnt" | "srvtcpka-cnt" => {
            let n = parse_range(arg(w, 1, "count")?, 1, 127)? as u32;
            no_extra(w, 2)?;
            if kw.starts_with("cli") {
                d.p.options.cli_tcpka_params.cnt = Some(n);
            } else {
                d.p.options.srv_tcpka_params.cnt = Some(n);
            }
        }
        "retries" => {
            d.p.retries = parse_u32(arg(w, 1, "number of retries")?)?;
            no_extra(w, 2)?;
        }
        "retry-on" => d.p.retry_on = retry_on(w)?,
        // `source ADDR[:PORT]`: servers without their own `source` connect from there (applied
        // in `server::check_needs`, so also to servers added at run time). The transparent
        // proxy forms stay unsupported.
        "source" => {
            d.p.source = Some(super::server::source_addr(arg(w, 1, "address")?)?);
            if let Some(extra) = w.get(2) {
                return Err(format!(
                    "'{extra}' after 'source ADDR' is not supported by sluice (no transparent \
                     proxying: 'usesrc' and 'interface' are not available)"
                )
                .into());
            }
        }
        "rate-limit" => {
            if arg(w, 1, "'sessions'")? != "sessions" {
                return Err(format!("expects 'sessions', got '{}'", w[1]).into());
            }
            d.p.rate_limit_sessions = Some(parse_u32(arg(w, 2, "sessions per second")?)?);
            no_extra(w, 3)?;
        }
        "id" => {
            let v = parse_range(arg(w, 1, "proxy id")?, 1, i32::MAX as u64)?;
            no_extra(w, 2)?;
            d.p.id = Some(v as u32);
            d.id_at = Some(Origin {
                file: l.file.clone(),
                line: l.line,
            });
        }
        "description" | "enabled" => {}
        "mode" => {
            d.p.mode = match arg(w, 1, "mode ('tcp' or 'http')")? {
                "tcp" => Mode::Tcp,
                "http" => Mode::Http,
                "health" => {
                    return Err("mode 'health' was removed in HAProxy 2.4"
                        .to_string()
                        .into());
                }
                m => {
                    return Err(format!(
                        "unknown mode '{m}' (expected 'tcp' or 'http'){}",
                        did_you_mean(m, ["tcp", "http"])
                    )
                    .into());
                }
            };
            no_extra(w, 2)?;
        }
        "http-reuse" => {
            d.p.options.http_reuse =
                match arg(w, 1, "mode ('never', 'safe', 'aggressive' or 'always')")? {
                    "never" => HttpReuse::Never,
                    "safe" => HttpReuse::Safe,
                    "aggressive" => HttpReuse::Aggressive,
                    "always" => HttpReuse::Always,
                    m => {
                        return Err(format!(
                        "unknown mode '{m}' (expected 'never', 'safe', 'aggressive' or 'always'){}",
                        did_you_mean(m, ["never", "safe", "aggressive", "always"])
                    )
                    .into());
                    }
                };
            no_extra(w, 2)?;
            d.needs_http(l, "http-reuse");
        }
        "http-check" => super::checks::http_check(d, l)?,
        "tcp-check" => super::checks::tcp_check(d, l)?,
        "external-check" => {
            let what = match w.get(1).map(String::as_str) {
                Some("command") => &mut d.p.options.external_check.command,
                Some("path") => &mut d.p.options.external_check.path,
                Some(x) => {
                    return Err(format!(
                        "unknown 'external-check' keyword '{x}' (expected 'command' or 'path')"
                    )
                    .into());
                }
                None => return Err("expects 'command CMD' or 'path PATH'".to_string().into()),
            };
            *what = Some(arg(w, 2, "argument")?.to_string());
            no_extra(w, 3)?;
        }
        "monitor-uri" => {
            let uri = arg(w, 1, "URI")?;
            no_extra(w, 2)?;
            d.p.monitor_uri = Some(uri.to_string());
            d.needs_http(l, "monitor-uri");
        }
        "timeout" => timeout(d, w)?,
        "stats" => stats(d, l)?,
        "balance" => balance(d, l)?,
        "hash-type" => d.p.hash_type = hash_type(w)?,
        "errorfile" => errorfile(d, w)?,
        "errorfiles" => errorfiles(d, l)?,
        "http-error" => http_error(d, w)?,
        "option" => options::option(d, l, &w[1..], false)?,
        "no" => match w.get(1).map(String::as_str) {
            Some("option") => options::option(d, l, &w[2..], true)?,
            Some("log") => {
                no_extra(w, 2)?;
                d.logs.clear();
            }
            Some(x) => {
                return Err(format!("'no {x}': 'no' only applies to 'option' and 'log'").into());
            }
            None => return Err("missing keyword after 'no'".to_string().into()),
        },
        "log" => {
            if w.get(1).map(String::as_str) == Some("global") {
                no_extra(w, 2)?;
                d.logs.push(LogEntry::Global);
            } else {
                d.logs.push(LogEntry::Target(logs::parse_target(&w[1..])?));
            }
        }
        "log-format" => {
            let s = arg(w, 1, "format string")?;
            if w.len() > 2 {
                return Err(
                    "expects only one argument, don't forget to escape spaces (or quote \
                            the format)"
                        .to_string()
                        .into(),
                );
            }
            let origin = Origin {
                file: l.file.clone(),
                line: l.line,
            };
            let f = crate::config::logformat::parse(s, origin)?;
            // The last of `log-format`, `option httplog` and `option tcplog` wins.
            let o = &mut d.p.options;
            o.log_format = Some(std::sync::Arc::new(f));
            o.httplog = false;
            o.httplog_clf = false;
            o.tcplog = false;
        }
        "unique-id-format" => {
            let s = arg(w, 1, "format string")?;
            no_extra(w, 2)?;
            let origin = Origin {
                file: l.file.clone(),
                line: l.line,
            };
            let f = crate::config::logformat::parse(s, origin)?;
            if f.needs_local {
                crate::config::acl::LOCAL_ADDR_USED
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            d.p.options.unique_id_format = Some(std::sync::Arc::new(f));
            d.needs_http_because(l, "unique-id-format", UNIQUE_ID_TCP);
        }
        "unique-id-header" => {
            let name = super::values::header_name(arg(w, 1, "header name")?)?;
            no_extra(w, 2)?;
            d.p.options.unique_id_header = Some(name);
            d.needs_http_because(l, "unique-id-header", UNIQUE_ID_TCP);
        }
        "default_backend" => {
            let name = arg(w, 1, "backend name")?;
            no_extra(w, 2)?;
            let o = Origin {
                file: l.file.clone(),
                line: l.line,
            };
            d.default_backend = Some((name.to_string(), o));
        }
        "use_backend" => rules::use_backend(d, l)?,
        "http-request" => rules::http_request(d, l)?,
        "http-response" => rules::http_response(d, l)?,
        "http-after-response" => rules::http_after_response(d, l)?,
        "fullconn" => {
            d.p.fullconn =
                Some(parse_range(arg(w, 1, "number of connections")?, 1, u32::MAX as u64)? as u32);
            no_extra(w, 2)?;
        }
        "redirect" => rules::redirect_rule(d, l)?,
        "tcp-request" => rules::tcp_request(d, l)?,
        "stick" => rules::stick(d, l)?,
        "stick-table" => {
            if d.p.stick_table.is_some() {
                return Err(format!(
                    "only one stick-table per proxy is allowed ('{}' has one)",
                    d.p.name
                )
                .into());
            }
            let def = stick_table(w)?;
            d.p.stick_table = Some(crate::stick::declare(&d.p.name, def)?);
        }
        "cookie" => {
            d.p.cookie = Some(cookie(w)?);
            d.needs_http(l, "cookie");
        }
        "dynamic-cookie-key" => {
            d.p.dynamic_cookie_key = Some(arg(w, 1, "key")?.to_string());
            no_extra(w, 2)?;
        }
        "compression" => {
            let in_defaults = d.is_defaults;
            compression(
                d.p.compression.get_or_insert_with(Default::default),
                w,
                in_defaults,
            )?;
            d.needs_http(l, "compression");
        }
        "capture" => {
            // `capture request|response header NAME len N`.
            let which = arg(w, 1, "'request', 'response' or 'cookie'")?;
            if which == "cookie" {
                return Err("'capture cookie' is not supported by sluice"
                    .to_string()
                    .into());
            }
            if which != "request" && which != "response" {
                return Err(format!("expects 'request' or 'response' (got '{which}')").into());
            }
            if arg(w, 2, "'header'")? != "header" {
                return Err(format!("expects 'capture {which} header NAME len N'").into());
            }
            let name = arg(w, 3, "a header name")?.to_string();
            if arg(w, 4, "'len'")? != "len" {
                return Err(
                    format!("expects 'len N' after the header name (got '{}')", w[4]).into(),
                );
            }
            let len = parse_range(arg(w, 5, "a length")?, 1, 65535)? as usize;
            no_extra(w, 6)?;
            let slot = crate::config::CaptureSlot {
                header: Some(name),
                len,
            };
            if which == "request" {
                d.p.capture_req.push(slot);
            } else {
                d.p.capture_rsp.push(slot);
            }
            d.needs_http(l, "capture");
        }
        "declare" => {
            // `declare capture request|response len N`: a slot for `capture ... id N` rules.
            if arg(w, 1, "'capture'")? != "capture" {
                return Err(format!("only 'declare capture' exists (got '{}')", w[1]).into());
            }
            let which = arg(w, 2, "'request' or 'response'")?;
            if arg(w, 3, "'len'")? != "len" {
                return Err("expects 'declare capture request|response len N'"
                    .to_string()
                    .into());
            }
            let len = parse_range(arg(w, 4, "a length")?, 1, 65535)? as usize;
            no_extra(w, 5)?;
            let slot = crate::config::CaptureSlot { header: None, len };
            match which {
                "request" => d.p.capture_req.push(slot),
                "response" => d.p.capture_rsp.push(slot),
                x => return Err(format!("expects 'request' or 'response' (got '{x}')").into()),
            }
        }
        "filter" => {
            // sluice runs the cache before compression, as HAProxy does by default: the
            // only order a `filter` line may state for these two. Other filters are not
            // implemented.
            match (w.get(1).map(String::as_str), w.len()) {
                (Some("compression"), 2) => {}
                (Some("cache"), 3) => {
                    let _ = crate::cache::reference(&w[2]);
                }
                (Some("cache"), _) => {
                    return Err("'filter cache' expects a cache name".to_string().into());
                }
                (Some("compression"), _) => {
                    return Err("'filter compression' takes no argument".to_string().into());
                }
                (Some("spoe"), _) => {
                    let (mut engine, mut file) = (None, None);
                    let mut i = 2;
                    while i < w.len() {
                        match (w[i].as_str(), w.get(i + 1)) {
                            ("engine", Some(n)) => engine = Some(n.as_str()),
                            ("config", Some(f)) => file = Some(f.as_str()),
                            (k @ ("engine" | "config"), None) => {
                                return Err(format!("'filter spoe': '{k}' expects a value").into());
                            }
                            (o, _) => {
                                return Err(format!(
                                    "'filter spoe': unknown argument '{o}' (engine, config)"
                                )
                                .into());
                            }
                        }
                        i += 2;
                    }
                    let Some(file) = file else {
                        return Err("'filter spoe' expects 'config <file>'".to_string().into());
                    };
                    let bufsize = crate::spoe::BUFSIZE.get();
                    let mut e = crate::spoe::load(file, engine, bufsize)?;
                    e.at = (l.file.clone(), l.line);
                    if d.p.spoe.iter().any(|x| x.id == e.id) {
                        return Err(format!(
                            "'filter spoe': engine '{}' is declared twice in this proxy",
                            e.id
                        )
                        .into());
                    }
                    d.p.spoe.push(std::sync::Arc::new(e));
                    return Ok(());
                }
                // A debugging aid: it traces filter callbacks on stderr and changes no
                // traffic. Its options are checked, then it is dropped with a warning.
                (Some("trace"), _) => {
                    let mut i = 2;
                    while i < w.len() {
                        match w[i].as_str() {
                            "name" if i + 1 < w.len() => i += 2,
                            "random-parsing" | "random-forwarding" | "hexdump" => i += 1,
                            o => {
                                return Err(format!(
                                    "'filter trace': unknown argument '{o}' (name, \
                                     random-parsing, random-forwarding, hexdump)"
                                )
                                .into());
                            }
                        }
                    }
                    super::warn(
                        "'filter trace' has no effect in sluice: it prints no filter traces"
                            .to_string(),
                    );
                }
                (Some(f @ ("bwlim-in" | "bwlim-out" | "fcgi-app")), _) => {
                    return Err(format!("filter '{f}' is not supported by sluice").into());
                }
                (Some(f), _) => {
                    return Err(format!(
                        "unknown filter '{f}' (sluice has 'cache', 'compression' and 'spoe')"
                    )
                    .into());
                }
                (None, _) => return Err("expects a filter name".to_string().into()),
            }
            d.needs_http(l, "filter");
        }
        "bind" => server::bind(d, l)?,
        "server" => server::server(d, l)?,
        "server-template" => server::server_template(d, l)?,
        "default-server" => server::default_server(d, l)?,
        _ => unreachable!("keyword table and handlers disagree on '{kw}'"),
    }
    Ok(())
}

/// `compression algo NAME... | type MIME... | offload`: each `algo` and `type` line adds to
/// its list, as in HAProxy.
fn compression(
    c: &mut crate::compression::CompressionCfg,
    w: &[String],
    in_defaults: bool,
) -> Result<(), String> {
    use crate::compression::Algo;
    let what = arg(w, 1, "'algo', 'type' or 'offload'")?;
    match what {
        "algo" => {
            if w.len() < 3 {
                return Err("'compression algo' expects at least one algorithm".into());
            }
            for name in &w[2..] {
                let Some(&(_, a)) = Algo::ALL.iter().find(|(n, _)| n == name) else {
                    return Err(format!(
                        "unknown compression algorithm '{name}' (supported: identity, \
                         deflate, raw-deflate, gzip){}",
                        did_you_mean(name, Algo::ALL.iter().map(|(n, _)| *n))
                    ));
                };
                if !c.algos.contains(&a) {
                    c.algos.push(a);
                }
            }
        }
        "type" => {
            if w.len() < 3 {
                return Err("'compression type' expects at least one MIME type".into());
            }
            c.types.extend(w[2..].iter().cloned());
        }
        "offload" => {
            no_extra(w, 2)?;
            if in_defaults {
                // HAProxy 2.6 ignores it there (with this warning).
                super::warn("'compression' : 'offload' ignored in 'defaults' section.".into());
            } else {
                c.offload = true;
            }
        }
        "algo-req" | "algo-res" | "type-req" | "type-res" | "direction" | "minsize-req"
        | "minsize-res" => {
            return Err(format!(
                "'compression {what}' is not supported by sluice (HAProxy 2.6 has only \
                 'algo', 'type' and 'offload')"
            ));
        }
        o => {
            return Err(format!(
                "unknown 'compression' argument '{o}' (expected 'algo', 'type' or \
                 'offload'){}",
                did_you_mean(o, ["algo", "type", "offload"])
            ));
        }
    }
    Ok(())
}

/// `cookie NAME [rewrite|insert|prefix] [indirect] [nocache] [postonly] [preserve] [httponly]
/// [secure] [domain D]* [maxidle T] [maxlife T] [attr V]*`, with HAProxy's checks.
fn cookie(w: &[String]) -> Result<CookieCfg, String> {
    let name = w
        .get(1)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| "'cookie' expects <cookie_name> as argument".to_string())?;
    if let Some(c) = name.bytes().find(|&c| !cookie_name_char(c)) {
        return Err(format!(
            "'cookie': character '{}' is not permitted in a cookie name",
            c.escape_ascii()
        ));
    }
    let mut c = CookieCfg::new(name);
    let mut modes = 0;
    let mut i = 2;
    while i < w.len() {
        let opt = w[i].as_str();
        let val = |what: &str| {
            w.get(i + 1)
                .map(String::as_str)
                .ok_or_else(|| format!("'{opt}' expects {what} as argument"))
        };
        match opt {
            "rewrite" | "insert" | "prefix" => {
                modes += 1;
                c.mode = match opt {
                    "rewrite" => CookieMode::Rewrite,
                    "insert" => CookieMode::Insert,
                    _ => CookieMode::Prefix,
                };
            }
            "indirect" => c.indirect = true,
            "nocache" => c.nocache = true,
            "postonly" => c.postonly = true,
            "preserve" => c.preserve = true,
            "httponly" => c.httponly = true,
            "secure" => c.secure = true,
            "domain" => {
                let d = val("<domain>")?;
                if let Some(ch) = d
                    .bytes()
                    .find(|&b| b.is_ascii_control() || b" ;,\"".contains(&b))
                {
                    return Err(format!(
                        "character '{}' is not permitted in domain name '{d}'",
                        ch.escape_ascii()
                    ));
                }
                if !d[1.min(d.len())..].contains('.') {
                    super::warn(format!(
                        "'cookie': domain '{d}' contains no embedded dot, this configuration \
                         may not work properly (see RFC6265#5.2.3)"
                    ));
                }
                c.domains.push(d.to_string());
                i += 1;
            }
            "maxidle" | "maxlife" => {
                let what = if opt == "maxidle" {
                    "<idletime>"
                } else {
                    "<lifetime>"
                };
                let v = cookie_secs(val(&format!("{what} in seconds"))?)?;
                if opt == "maxidle" {
                    c.maxidle = Some(v);
                } else {
                    c.maxlife = Some(v);
                }
                i += 1;
            }
            "attr" => {
                let a = val("<value>")?;
                if let Some(ch) = a.bytes().find(|&b| b.is_ascii_control() || b == b';') {
                    return Err(format!(
                        "character '{}' is not permitted in attribute value",
                        ch.escape_ascii()
                    ));
                }
                c.attrs.push(a.to_string());
                i += 1;
            }
            "dynamic" => c.dynamic = true,
            o => {
                return Err(format!(
                    "'cookie' supports 'rewrite', 'insert', 'prefix', 'indirect', 'nocache', \
                     'postonly', 'preserve', 'httponly', 'secure', 'domain', 'maxidle', \
                     'maxlife' and 'attr' options, not '{o}'{}",
                    did_you_mean(
                        o,
                        [
                            "rewrite", "insert", "prefix", "indirect", "nocache", "postonly",
                            "preserve", "httponly", "secure", "domain", "maxidle", "maxlife",
                            "attr"
                        ]
                    )
                ));
            }
        }
        i += 1;
    }
    if modes > 1 {
        return Err("cookie 'rewrite', 'insert' and 'prefix' modes are incompatible".to_string());
    }
    if c.mode == CookieMode::Rewrite && c.indirect {
        return Err("cookie 'rewrite' and 'indirect' modes are incompatible".to_string());
    }
    if c.preserve && c.mode != CookieMode::Insert && !c.indirect {
        return Err("cookie 'preserve' requires at least 'insert' or 'indirect'".to_string());
    }
    Ok(c)
}

/// A token character of RFC 6265 (what a cookie name may hold).
pub(super) fn cookie_name_char(c: u8) -> bool {
    c.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&c)
}

/// `maxidle` / `maxlife`: a time in seconds by default (`30m`, `4h`, `7d` too).
fn cookie_secs(s: &str) -> Result<u32, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| format!("'{s}' is not a valid time (a number of seconds, or with a unit)"))?;
    let per = match &s[digits..] {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "ms" => return Ok(n.div_ceil(1000).try_into().unwrap_or(u32::MAX)),
        u => {
            return Err(format!(
                "invalid unit '{u}' in time '{s}' (expected s, m, h or d, or ms)"
            ));
        }
    };
    n.checked_mul(per)
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| v <= i32::MAX as u32)
        .ok_or_else(|| format!("time '{s}' is too large"))
}

/// `timeout NAME TIME`: which timeouts each side of a proxy uses.
const TIMEOUTS: &[(&str, u8)] = &[
    ("client", D | F),
    ("client-fin", D | F),
    ("connect", D | B),
    ("server", D | B),
    ("server-fin", D | B),
    ("http-request", D | F | B),
    ("http-keep-alive", D | F | B),
    ("queue", D | B),
    ("tunnel", D | B),
    ("check", D | B),
    ("tarpit", D | F | B),
];

fn timeout(d: &mut Draft, w: &[String]) -> Result<(), String> {
    let name = arg(w, 1, "timeout name")?;
    let Some(&(_, mask)) = TIMEOUTS.iter().find(|(n, _)| *n == name) else {
        return Err(format!(
            "unknown timeout '{name}'{}",
            did_you_mean(name, TIMEOUTS.iter().map(|(n, _)| *n))
        ));
    };
    if !allowed(d, mask) {
        // `defaults` accepts every timeout, so this is a frontend or a backend: ignored with
        // a warning, as in HAProxy.
        crate::config::parser::warn(format!(
            "'timeout {name}' will be ignored because {} has no {} capability",
            d.describe(),
            missing_side(d)
        ));
        return Ok(());
    }
    let t = parse_time(arg(w, 2, "time value")?)?;
    no_extra(w, 3)?;
    // 0 means "no timeout", as in HAProxy.
    let v = (!t.is_zero()).then_some(t);
    let tm = &mut d.p.timeouts;
    match name {
        "client" => tm.client = v,
        "client-fin" => tm.client_fin = v,
        "connect" => tm.connect = v,
        "server" => tm.server = v,
        "server-fin" => tm.server_fin = v,
        "http-request" => tm.http_request = v,
        "http-keep-alive" => tm.http_keep_alive = v,
        "queue" => tm.queue = v,
        "tunnel" => tm.tunnel = v,
        "tarpit" => tm.tarpit = v,
        _ => tm.check = v,
    }
    Ok(())
}

const ALGORITHMS: &[&str] = &[
    "roundrobin",
    "static-rr",
    "leastconn",
    "first",
    "source",
    "uri",
    "url_param",
    "hdr",
    "random",
];

fn balance(d: &mut Draft, l: &Line) -> Result<(), String> {
    let w = &l.words;
    // A bare `balance` is HAProxy's default, round robin (backend_parse_balance).
    let algo = w.get(1).map_or("roundrobin", String::as_str);
    let simple = |b: Balance| no_extra(w, 2).map(|_| b);
    let b = match algo {
        "roundrobin" => simple(Balance::RoundRobin)?,
        "static-rr" => simple(Balance::StaticRr)?,
        "leastconn" => simple(Balance::LeastConn)?,
        "first" => simple(Balance::First)?,
        "source" => simple(Balance::Source)?,
        "random" => simple(Balance::Random { draws: 2 })?,
        "uri" => {
            let (mut whole, mut len, mut depth, mut path_only) = (false, None, None, false);
            let mut i = 2;
            while i < w.len() {
                match w[i].as_str() {
                    "whole" => whole = true,
                    "path-only" => path_only = true,
                    "len" | "depth" => {
                        let v = parse_u32(arg(w, i + 1, &format!("value after '{}'", w[i]))?)?;
                        if w[i] == "len" {
                            len = Some(v as usize);
                        } else {
                            depth = Some(v as usize);
                        }
                        i += 1;
                    }
                    x => {
                        return Err(format!(
                            "unknown 'balance uri' option '{x}' (expected whole, len, depth or \
                             path-only){}",
                            did_you_mean(x, ["whole", "len", "depth", "path-only"])
                        ));
                    }
                }
                i += 1;
            }
            Balance::Uri {
                whole,
                len,
                depth,
                path_only,
            }
        }
        "url_param" => {
            let name = arg(w, 2, "URL parameter name")?;
            if let Some(x) = w.get(3) {
                if x == "check_post" {
                    return Err(
                        "'balance url_param ... check_post' is not supported by sluice".into(),
                    );
                }
                return Err(format!("unexpected extra argument '{x}'"));
            }
            Balance::UrlParam {
                name: name.to_string(),
            }
        }
        a if a.starts_with("hdr(") => {
            let name = a[4..].strip_suffix(')').unwrap_or("");
            if name.is_empty() {
                return Err(format!("'{a}': expected 'hdr(NAME)' with a header name"));
            }
            let use_domain_only = match w.get(2).map(String::as_str) {
                None => false,
                Some("use_domain_only") => {
                    no_extra(w, 3)?;
                    true
                }
                Some(x) => {
                    return Err(format!(
                        "unexpected argument '{x}' (expected 'use_domain_only')"
                    ));
                }
            };
            Balance::Hdr {
                name: name.to_string(),
                use_domain_only,
            }
        }
        a if a.starts_with("random(") => {
            let n = a[7..].strip_suffix(')').unwrap_or("");
            let draws = parse_range(n, 1, 1000).map_err(|e| format!("'{a}': {e}"))?;
            no_extra(w, 2)?;
            Balance::Random {
                draws: draws as u32,
            }
        }
        a if a == "hash" || a.starts_with("rdp-cookie") => {
            return Err(format!("algorithm '{a}' is not supported by sluice"));
        }
        a => {
            return Err(format!(
                "unknown load-balancing algorithm '{a}'{}",
                did_you_mean(a, ALGORITHMS.iter().copied())
            ));
        }
    };
    if matches!(
        b,
        Balance::Uri { .. } | Balance::UrlParam { .. } | Balance::Hdr { .. }
    ) {
        d.needs_http(l, &format!("balance {algo}"));
    }
    d.p.balance = b;
    Ok(())
}

fn hash_type(w: &[String]) -> Result<HashType, String> {
    let method = match arg(w, 1, "hash method ('map-based' or 'consistent')")? {
        "map-based" => HashMethod::MapBased,
        "consistent" => HashMethod::Consistent,
        m => {
            return Err(format!(
                "unknown hash method '{m}' (expected 'map-based' or 'consistent'){}",
                did_you_mean(m, ["map-based", "consistent"])
            ));
        }
    };
    let mut ht = HashType {
        method,
        ..HashType::default()
    };
    for (i, x) in w.iter().enumerate().skip(2) {
        match x.as_str() {
            "avalanche" => ht.avalanche = true,
            f if i == 2 => {
                ht.function = match f {
                    "sdbm" => HashFunction::Sdbm,
                    "djb2" => HashFunction::Djb2,
                    "wt6" => HashFunction::Wt6,
                    "crc32" => HashFunction::Crc32,
                    "none" => return Err("hash function 'none' is not supported by sluice".into()),
                    f => {
                        return Err(format!(
                            "unknown hash function '{f}'{}",
                            did_you_mean(f, ["sdbm", "djb2", "wt6", "crc32"])
                        ));
                    }
                }
            }
            x => return Err(format!("unexpected argument '{x}' (expected 'avalanche')")),
        }
    }
    // HAProxy: a bare `hash-type consistent` is `consistent sdbm avalanche` (without the
    // avalanche, close keys such as neighbouring source addresses bunch on one server).
    if w.len() == 2 && method == HashMethod::Consistent {
        ht.avalanche = true;
    }
    Ok(ht)
}

/// Status codes `errorfile` accepts (HAProxy 2.6).
const ERRORFILE_CODES: &[u16] = &[
    200, 400, 401, 403, 404, 405, 407, 408, 410, 413, 425, 429, 500, 501, 502, 503, 504,
];

fn errorfile(d: &mut Draft, w: &[String]) -> Result<(), String> {
    let (code, body) = errorfile_page(w)?;
    d.p.errorfiles.insert(code, body);
    Ok(())
}

/// A status code `errorfile`, `errorfiles` and `http-error` may customize.
fn error_code(code: &str) -> Result<u16, String> {
    match code.parse::<u16>() {
        Ok(c) if ERRORFILE_CODES.contains(&c) => Ok(c),
        _ => {
            let list: Vec<String> = ERRORFILE_CODES.iter().map(u16::to_string).collect();
            Err(format!(
                "status code '{code}' cannot be customized (allowed: {})",
                list.join(" ")
            ))
        }
    }
}

/// `errorfile CODE FILE` (in a proxy or an `http-errors` section): the code and the page.
pub(super) fn errorfile_page(w: &[String]) -> Result<(u16, Vec<u8>), String> {
    let code = arg(w, 1, "status code")?;
    let path = arg(w, 2, "file name")?;
    no_extra(w, 3)?;
    let code = error_code(code)?;
    let body = std::fs::read(path).map_err(|e| format!("cannot read '{path}': {e}"))?;
    Ok((code, body))
}

/// `errorfiles NAME [CODE...]`: the pages of an `http-errors` section (those of the codes
/// given), overriding the proxy's so far, as a series of `errorfile` lines would.
fn errorfiles(d: &mut Draft, l: &Line) -> Result<(), String> {
    let w = &l.words;
    let name = arg(w, 1, "http-errors section name")?;
    let codes = w[2..]
        .iter()
        .map(|c| error_code(c))
        .collect::<Result<Vec<_>, _>>()?;
    match crate::errorfile::section(name, &codes) {
        Some(pages) => d.p.errorfiles.extend(pages),
        None => d.pending_errorfiles.push((
            name.to_string(),
            codes,
            Origin {
                file: l.file.clone(),
                line: l.line,
            },
        )),
    }
    Ok(())
}

/// `http-error status CODE [content-type T] [string S|file F|errorfile F|errorfiles NAME|
/// default-errorfiles] [hdr N V]...`: the response sluice sends for CODE.
fn http_error(d: &mut Draft, w: &[String]) -> Result<(), String> {
    if w.get(1).map(String::as_str) != Some("status") {
        return Err("'http-error' expects 'status <code>' first".into());
    }
    let code = error_code(arg(w, 2, "status code")?)?;
    let rest = &w[3..];
    match rest.first().map(String::as_str) {
        Some("default-errorfiles") => {
            no_extra(rest, 1)?;
            d.p.errorfiles.remove(&code);
            return Ok(());
        }
        Some("errorfile") => {
            let path = arg(rest, 1, "file name")?;
            no_extra(rest, 2)?;
            let body = std::fs::read(path).map_err(|e| format!("cannot read '{path}': {e}"))?;
            d.p.errorfiles.insert(code, body);
            return Ok(());
        }
        Some("errorfiles") => {
            let name = arg(rest, 1, "http-errors section name")?;
            no_extra(rest, 2)?;
            let pages = crate::errorfile::section(name, &[code]).ok_or_else(|| {
                format!("unknown http-errors section '{name}' (declare it before this line)")
            })?;
            d.p.errorfiles.extend(pages);
            return Ok(());
        }
        _ => {}
    }
    let mut args = vec!["status".to_string(), code.to_string()];
    args.extend(rest.iter().cloned());
    let reply = super::rules::reply_for("http-error", &args, code)?;
    if reply.formats.is_some() {
        return Err(
            "'http-error': log-format values ('lf-string', 'lf-file', 'hdr' with '%[') are \
             not supported by sluice here (write the text as it should be sent)"
                .into(),
        );
    }
    d.p.errorfiles
        .insert(code, reply.render(false, code != 200));
    Ok(())
}

/// `stats` sub-keywords sluice implements in proxies.
const STATS_KEYWORDS: &[&str] = &[
    "admin",
    "auth",
    "enable",
    "hide-version",
    "realm",
    "refresh",
    "scope",
    "show-legends",
    "show-modules",
    "show-node",
    "show-desc",
    "uri",
];

/// `stats ...` in a proxy or defaults section: the HTTP stats page. Any of these lines enables
/// the page, as in HAProxy.
fn stats(d: &mut Draft, l: &Line) -> Result<(), String> {
    let w = &l.words;
    let Some(sub) = w.get(1).map(String::as_str) else {
        return Err(format!(
            "missing keyword after 'stats' (expected one of {})",
            STATS_KEYWORDS.join(", ")
        ));
    };
    if !STATS_KEYWORDS.contains(&sub) {
        return Err(match sub {
            "socket" | "timeout" | "maxconn" | "bind-process" => {
                format!("'stats {sub}' is only allowed in the 'global' section")
            }
            "http-request" => format!("'stats {sub}' is not supported by sluice"),
            _ => format!(
                "unknown keyword 'stats {sub}'{}",
                did_you_mean(sub, STATS_KEYWORDS.iter().copied())
            ),
        });
    }
    if sub == "admin" && d.is_defaults {
        return Err(
            "'stats admin' is not allowed in 'defaults' sections (only in frontend, \
                    backend and listen sections)"
                .into(),
        );
    }
    // The first own `stats` line detaches the proxy from the defaults' stats settings.
    if !d.is_defaults && !d.stats_own {
        d.p.stats = None;
        d.stats_own = true;
    }
    let mut st = d.p.stats.take().unwrap_or_default();
    let r = stats_sub(d, &mut st, sub, w);
    d.p.stats = Some(st);
    r?;
    d.needs_http(l, "stats");
    Ok(())
}

fn stats_sub(d: &Draft, st: &mut StatsPage, sub: &str, w: &[String]) -> Result<(), String> {
    match sub {
        "enable" => no_extra(w, 2)?,
        "hide-version" => {
            no_extra(w, 2)?;
            st.hide_version = true;
        }
        "show-legends" => {
            no_extra(w, 2)?;
            st.show_legends = true;
        }
        "show-modules" => {
            no_extra(w, 2)?;
            super::warn(
                "'stats show-modules' has no effect in sluice: its stats page has no \
                 module columns (per-protocol counters)"
                    .to_string(),
            );
        }
        "show-node" => {
            st.show_node = Some(w.get(2).cloned());
            no_extra(w, 3)?;
        }
        // The rest of the line, as HAProxy takes it.
        "show-desc" => st.show_desc = Some((w.len() > 2).then(|| w[2..].join(" "))),
        "uri" => {
            let uri = arg(w, 2, "URI prefix")?;
            no_extra(w, 3)?;
            st.uri = uri.to_string();
        }
        "realm" => {
            let realm = arg(w, 2, "realm (spaces escaped with a backslash)")?;
            // HAProxy reads one word and ignores the rest without a word; say so.
            if w.len() > 3 {
                super::warn(format!(
                    "'stats realm': only the first word is the realm ('{realm}'), as in \
                     HAProxy; '{}' ignored (escape spaces with a backslash or quote the realm)",
                    w[3..].join(" ")
                ));
            }
            if realm.contains(['"', '\\']) {
                return Err(format!(
                    "realm '{realm}' must not contain double quotes or backslashes"
                ));
            }
            st.realm = realm.to_string();
        }
        "refresh" => {
            let v = arg(w, 2, "refresh interval (in seconds unless a unit is given)")?;
            no_extra(w, 3)?;
            let secs = if v.bytes().all(|b| b.is_ascii_digit()) {
                parse_u32(v)?
            } else {
                let t = parse_time(v)?;
                t.as_secs().max(u64::from(!t.is_zero())) as u32
            };
            st.refresh = secs;
        }
        "auth" => {
            let a = arg(w, 2, "'user:password' account")?;
            no_extra(w, 3)?;
            if !a.contains(':') || a.starts_with(':') {
                return Err(format!("'{a}': expected 'user:password'"));
            }
            st.auth.push(a.to_string());
        }
        "scope" => {
            let name = arg(w, 2, "proxy name (or '.' for this one)")?;
            no_extra(w, 3)?;
            st.scope.push(name.to_string());
        }
        "admin" => {
            match w.get(2).map(String::as_str) {
                Some("if" | "unless") => {}
                _ => {
                    return Err(
                        "'stats admin' requires either 'if' or 'unless' followed by a \
                                condition"
                            .into(),
                    );
                }
            }
            st.admin = Some(super::super::acl::parse_cond(&w[2..], &d.acls)?);
        }
        _ => unreachable!("stats keyword table and handlers disagree on '{sub}'"),
    }
    Ok(())
}

/// `retry-on KEYWORD...`: replaces the previous setting (HAProxy's rule: not cumulative).
fn retry_on(w: &[String]) -> Result<RetryOn, String> {
    if w.len() < 2 {
        return Err(
            "expects one or more of 'none', 'conn-failure', 'empty-response', \
                    'junk-response', 'response-timeout', '0rtt-rejected', \
                    'all-retryable-errors' or a status (401 403 404 408 425 500 501 502 503 504)"
                .to_string(),
        );
    }
    let mut r = RetryOn::none();
    for kw in &w[1..] {
        match kw.as_str() {
            "none" if w.len() == 2 => {}
            "none" => return Err("'none' cannot be combined with other keywords".to_string()),
            "conn-failure" => r.conn_failure = true,
            "empty-response" => r.empty_response = true,
            "junk-response" => r.junk_response = true,
            "response-timeout" => r.response_timeout = true,
            // No TLS early data towards servers: nothing is ever rejected.
            "0rtt-rejected" => {}
            "all-retryable-errors" => {
                r.conn_failure = true;
                r.empty_response = true;
                r.junk_response = true;
                r.response_timeout = true;
                for s in [500, 502, 503, 504] {
                    r.statuses |= status_bit(s).unwrap_or(0);
                }
            }
            x => match x.parse::<u16>().ok().and_then(status_bit) {
                Some(b) => r.statuses |= b,
                None => return Err(format!("unknown keyword '{x}'")),
            },
        }
    }
    Ok(r)
}

fn status_bit(s: u16) -> Option<u16> {
    RetryOn::STATUSES
        .iter()
        .position(|&x| x == s)
        .map(|i| 1 << i)
}

/// `stick-table type T [len N] size N [expire T] [nopurge] [store D[,D...]]...`.
pub(crate) fn stick_table(w: &[String]) -> Result<crate::stick::TableDef, String> {
    use crate::stick::{Data, KeyType, TableDef};
    let mut key = None;
    let mut size = None;
    let mut expire_ms = None;
    let mut nopurge = false;
    let mut store: Vec<(Data, u32)> = Vec::new();
    let mut peers = None;
    let mut i = 1;
    while i < w.len() {
        let kw = w[i].as_str();
        let val = |what: &str| arg(w, i + 1, what);
        match kw {
            "type" => {
                let t = val("a key type (ip, ipv6, integer, string, binary)")?;
                let mut len = |default: usize| -> Result<usize, String> {
                    if w.get(i + 2).map(String::as_str) != Some("len") {
                        return Ok(default);
                    }
                    let n = parse_range(arg(w, i + 3, "a key length")?, 1, 65536)? as usize;
                    i += 2;
                    Ok(n)
                };
                key = Some(match t {
                    "ip" => KeyType::Ip,
                    "ipv6" => KeyType::Ipv6,
                    "integer" => KeyType::Integer,
                    // HAProxy's bare `string` keeps 31 bytes (32 with its NUL), `len N` N bytes.
                    "string" => KeyType::String(len(31)?),
                    "binary" => KeyType::Binary(len(32)?),
                    t => {
                        return Err(format!(
                            "'type' expects ip, ipv6, integer, string or binary, got '{t}'{}",
                            did_you_mean(t, ["ip", "ipv6", "integer", "string", "binary"])
                        ));
                    }
                });
                i += 2;
            }
            "size" => {
                let n = super::values::parse_size(val("a number of entries")?)?;
                if n == 0 || n > u32::MAX as u64 {
                    return Err(format!("'size' must be between 1 and {}", u32::MAX));
                }
                size = Some(n as usize);
                i += 2;
            }
            "expire" => {
                let t = super::values::parse_time(val("a delay")?)?;
                expire_ms = Some(t.as_millis() as u64);
                i += 2;
            }
            "nopurge" => {
                nopurge = true;
                i += 1;
            }
            "store" => {
                for item in val("a list of data types")?.split(',') {
                    let (name, period) = match item.split_once('(') {
                        Some((n, rest)) => {
                            let Some(p) = rest.strip_suffix(')') else {
                                return Err(format!("missing ')' after '{item}'"));
                            };
                            (n, Some(p))
                        }
                        None => (item, None),
                    };
                    let Some(d) = Data::by_name(name) else {
                        let known = crate::stick::ALL_DATA.map(Data::name);
                        let hint = if matches!(
                            name,
                            "gpc" | "gpc_rate" | "gpt" | "server_key" | "server_name"
                        ) {
                            " is not supported by sluice".to_string()
                        } else {
                            format!(" is unknown{}", did_you_mean(name, known))
                        };
                        return Err(format!("data type '{name}' in 'store'{hint}"));
                    };
                    if store.iter().any(|(x, _)| *x == d) {
                        return Err(format!("data type '{name}' is stored twice"));
                    }
                    let period = match (d.is_rate(), period) {
                        (true, Some(p)) => {
                            let ms = super::values::parse_time(p)?.as_millis();
                            if ms == 0 || ms > u32::MAX as u128 {
                                return Err(format!("invalid period '{p}' for '{name}'"));
                            }
                            ms as u32
                        }
                        (true, None) => {
                            return Err(format!(
                                "data type '{name}' expects a period, as in '{name}(10s)'"
                            ));
                        }
                        (false, Some(_)) => {
                            return Err(format!("data type '{name}' takes no argument"));
                        }
                        (false, None) => 0,
                    };
                    store.push((d, period));
                }
                i += 2;
            }
            "peers" => {
                peers = Some(val("a peers section name")?.to_string());
                i += 2;
            }
            "srvkey" | "write-to" | "recv-only" => {
                return Err(format!(
                    "'{kw}' on a stick-table is not supported by sluice"
                ));
            }
            k => {
                return Err(format!(
                    "unknown argument '{k}' (expected type, size, expire, nopurge, store or \
                     peers){}",
                    did_you_mean(k, ["type", "size", "expire", "nopurge", "store", "peers"])
                ));
            }
        }
    }
    let Some(key) = key else {
        return Err("missing 'type'".to_string());
    };
    let Some(size) = size else {
        return Err("missing 'size'".to_string());
    };
    store.sort_by_key(|(d, _)| *d as u8);
    Ok(TableDef {
        key,
        size,
        expire_ms,
        nopurge,
        store,
        peers,
    })
}
