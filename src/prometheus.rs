//! `prometheus`: the `http-request use-service prometheus-exporter` service — sluice's
//! counters in Prometheus' text exposition format (0.0.4), under the names of HAProxy's
//! exporter (`haproxy_process_*`, `haproxy_frontend_*`, `haproxy_backend_*`,
//! `haproxy_server_*`, same labels) so that existing dashboards and alerts work, plus the
//! latency histograms HAProxy does not have.
//!
//! It owns the metric names, their help text, and which stats column, state or histogram feeds
//! each one. Values come from `stats` (the very rows of `show stat` and the fields of `show
//! info`, so the CSV and the metrics never disagree) and from `histogram`. It only reads shared
//! state with relaxed loads and takes no lock the request path takes. It allocates freely, so
//! it must only run to answer a scrape, never on the request path of proxied traffic.
//! Metrics sluice has no value for are left out rather than exported as zeros or NaN.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::backend::{BackendState, ServerState, Shared};
use crate::check::Status;
use crate::config::Mode;
use crate::histogram::{BOUNDS_LE, BUCKETS, Snapshot, Timer};
use crate::stats::{self, Row};

/// Media type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Prometheus metric types sluice exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// Where the samples of a metric come from, for one frontend, backend or server.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// A `show stat` column as it is; an empty column gives no sample.
    Col(&'static str),
    /// The `hrsp_*` columns: one sample per `code` label (1xx .. 5xx, other).
    Codes,
    /// One sample per `state` label, 1 for the object's current state and 0 for the others.
    State,
    /// Per server state, how many servers of the backend are in it.
    AggServerStatus,
    /// One sample per check result, 1 for the last one (servers with running checks).
    CheckStatus,
    /// HTTP status of the last check, 0 if it had none (servers with running checks).
    CheckCode,
    /// Duration of the last check, once one has finished.
    CheckDuration,
    /// A latency histogram: the server's, or for a backend the sum of its servers'.
    Timer(Timer),
    /// The histogram of every health check's duration.
    CheckTimes,
    /// Idle connections closed by the purge or found dead (`show pools` purged).
    PoolPurged,
    /// Requests replayed on a new connection after a reused one failed unanswered.
    PoolReplayed,
    /// Idle connections a thread took over from another thread's pool.
    PoolTakeovers,
}

/// One exported metric family.
struct Metric {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    read: Read,
}

/// The parts of the exposition a scrape asks for: HAProxy's `scope` query parameters
/// (`global`, `frontend`, `backend`, `server`; all by default) and `no-maint` (servers in
/// maintenance left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub global: bool,
    pub frontend: bool,
    pub backend: bool,
    pub server: bool,
    pub no_maint: bool,
}

/// One frontend, backend or server: its labels and what its samples are read from.
struct Obj<'a> {
    proxy: &'a str,
    server: Option<&'a str>,
    http: bool,
    row: Row,
    be: Option<&'a BackendState>,
    srv: Option<&'a ServerState>,
}

/// The exposition being written. A family's `# HELP`/`# TYPE` lines are written just before
/// its first sample, so a family with no sample at all does not appear.
struct Out {
    text: String,
    pending: Option<(&'static str, &'static str, Kind)>,
}

const fn m(name: &'static str, kind: Kind, help: &'static str, read: Read) -> Metric {
    Metric {
        name,
        kind,
        help,
        read,
    }
}

use Kind::{Counter, Gauge, Histogram};

/// `show info` fields exported as `haproxy_process_*`: (field, metric, type, help).
const PROCESS: &[(&str, &str, Kind, &str)] = &[
    (
        "Nbthread",
        "haproxy_process_nbthread",
        Gauge,
        "Worker threads.",
    ),
    (
        "Nbproc",
        "haproxy_process_nbproc",
        Gauge,
        "Processes (always 1).",
    ),
    (
        "Process_num",
        "haproxy_process_relative_process_id",
        Gauge,
        "Process number, from 1.",
    ),
    (
        "Uptime_sec",
        "haproxy_process_uptime_seconds",
        Gauge,
        "Time since the process started.",
    ),
    (
        "Start_time_sec",
        "haproxy_process_start_time_seconds",
        Gauge,
        "When the process started, in seconds since the Unix epoch.",
    ),
    (
        "Ulimit-n",
        "haproxy_process_max_fds",
        Gauge,
        "Limit on open file descriptors.",
    ),
    (
        "Maxconn",
        "haproxy_process_max_connections",
        Gauge,
        "Global limit on concurrent client connections.",
    ),
    (
        "Hard_maxconn",
        "haproxy_process_hard_max_connections",
        Gauge,
        "Hard global limit on concurrent client connections.",
    ),
    (
        "CurrConns",
        "haproxy_process_current_connections",
        Gauge,
        "Client connections open now.",
    ),
    (
        "CumConns",
        "haproxy_process_connections_total",
        Counter,
        "Client connections accepted.",
    ),
    (
        "CumReq",
        "haproxy_process_requests_total",
        Counter,
        "Requests received (HTTP requests, and TCP sessions).",
    ),
    (
        "CurrSslConns",
        "haproxy_process_current_ssl_connections",
        Gauge,
        "Client TLS connections open now (handshake begun).",
    ),
    (
        "CumSslConns",
        "haproxy_process_ssl_connections_total",
        Counter,
        "Client TLS handshakes begun.",
    ),
    (
        "SslRate",
        "haproxy_process_current_ssl_rate",
        Gauge,
        "Connections accepted on ssl binds in the current second.",
    ),
    (
        "SslRateLimit",
        "haproxy_process_limit_ssl_rate",
        Gauge,
        "maxsslrate (0: none).",
    ),
    (
        "MaxSslRate",
        "haproxy_process_max_ssl_rate",
        Gauge,
        "Most connections accepted on ssl binds in one second.",
    ),
    (
        "Stopping",
        "haproxy_process_stopping",
        Gauge,
        "1 once a soft stop has begun.",
    ),
    (
        "Jobs",
        "haproxy_process_jobs",
        Gauge,
        "Active jobs: client connections and listeners.",
    ),
    (
        "Unstoppable Jobs",
        "haproxy_process_unstoppable_jobs",
        Gauge,
        "Jobs a soft stop waits for regardless.",
    ),
    (
        "Listeners",
        "haproxy_process_listeners",
        Gauge,
        "Configured listening addresses.",
    ),
    (
        "TotalBytesOut",
        "haproxy_process_bytes_out_total",
        Counter,
        "Bytes sent to clients.",
    ),
];

const FRONTEND: &[Metric] = &[
    m(
        "haproxy_frontend_current_sessions",
        Gauge,
        "Client connections open now.",
        Read::Col("scur"),
    ),
    m(
        "haproxy_frontend_max_sessions",
        Gauge,
        "Most client connections open at once.",
        Read::Col("smax"),
    ),
    m(
        "haproxy_frontend_limit_sessions",
        Gauge,
        "Limit on concurrent client connections (maxconn).",
        Read::Col("slim"),
    ),
    m(
        "haproxy_frontend_sessions_total",
        Counter,
        "Client connections accepted.",
        Read::Col("stot"),
    ),
    m(
        "haproxy_frontend_bytes_in_total",
        Counter,
        "Bytes received from clients.",
        Read::Col("bin"),
    ),
    m(
        "haproxy_frontend_bytes_out_total",
        Counter,
        "Bytes sent to clients.",
        Read::Col("bout"),
    ),
    m(
        "haproxy_frontend_requests_denied_total",
        Counter,
        "Requests denied by http-request rules.",
        Read::Col("dreq"),
    ),
    m(
        "haproxy_frontend_responses_denied_total",
        Counter,
        "Responses denied by http-response rules.",
        Read::Col("dresp"),
    ),
    m(
        "haproxy_frontend_request_errors_total",
        Counter,
        "Invalid or timed-out requests.",
        Read::Col("ereq"),
    ),
    m(
        "haproxy_frontend_status",
        Gauge,
        "Frontend state: 1 for the current state label, 0 for the others.",
        Read::State,
    ),
    m(
        "haproxy_frontend_http_responses_total",
        Counter,
        "HTTP responses sent, by status class.",
        Read::Codes,
    ),
    m(
        "haproxy_frontend_http_requests_total",
        Counter,
        "HTTP requests received.",
        Read::Col("req_tot"),
    ),
    m(
        "haproxy_frontend_connections_total",
        Counter,
        "Client connections accepted.",
        Read::Col("conn_tot"),
    ),
    m(
        "haproxy_frontend_intercepted_requests_total",
        Counter,
        "Requests answered by sluice itself (stats page, monitor-uri, services).",
        Read::Col("intercepted"),
    ),
];

const BACKEND: &[Metric] = &[
    m(
        "haproxy_backend_current_queue",
        Gauge,
        "Requests waiting for any server of the backend.",
        Read::Col("qcur"),
    ),
    m(
        "haproxy_backend_max_queue",
        Gauge,
        "Most requests waiting for any server at once.",
        Read::Col("qmax"),
    ),
    m(
        "haproxy_backend_current_sessions",
        Gauge,
        "Requests holding a server slot now.",
        Read::Col("scur"),
    ),
    m(
        "haproxy_backend_max_sessions",
        Gauge,
        "Most requests holding a server slot at once.",
        Read::Col("smax"),
    ),
    m(
        "haproxy_backend_sessions_total",
        Counter,
        "Requests (or TCP sessions) routed to the backend.",
        Read::Col("stot"),
    ),
    m(
        "haproxy_backend_bytes_in_total",
        Counter,
        "Request bytes received for the backend.",
        Read::Col("bin"),
    ),
    m(
        "haproxy_backend_bytes_out_total",
        Counter,
        "Response bytes sent for the backend.",
        Read::Col("bout"),
    ),
    m(
        "haproxy_backend_requests_denied_total",
        Counter,
        "Requests denied by http-request rules.",
        Read::Col("dreq"),
    ),
    m(
        "haproxy_backend_responses_denied_total",
        Counter,
        "Responses denied by http-response rules.",
        Read::Col("dresp"),
    ),
    m(
        "haproxy_backend_connection_errors_total",
        Counter,
        "Failed connection attempts to the backend's servers.",
        Read::Col("econ"),
    ),
    m(
        "haproxy_backend_response_errors_total",
        Counter,
        "Invalid or missing server responses.",
        Read::Col("eresp"),
    ),
    m(
        "haproxy_backend_retry_warnings_total",
        Counter,
        "Connection attempts retried.",
        Read::Col("wretr"),
    ),
    m(
        "haproxy_backend_redispatch_warnings_total",
        Counter,
        "Requests redispatched to another server.",
        Read::Col("wredis"),
    ),
    m(
        "haproxy_backend_status",
        Gauge,
        "Backend state: 1 for the current state label, 0 for the others.",
        Read::State,
    ),
    m(
        "haproxy_backend_weight",
        Gauge,
        "Total effective weight of the servers in use.",
        Read::Col("weight"),
    ),
    m(
        "haproxy_backend_active_servers",
        Gauge,
        "Usable active servers.",
        Read::Col("act"),
    ),
    m(
        "haproxy_backend_backup_servers",
        Gauge,
        "Usable backup servers.",
        Read::Col("bck"),
    ),
    m(
        "haproxy_backend_check_last_change_seconds",
        Gauge,
        "Time since the backend last went up or down.",
        Read::Col("lastchg"),
    ),
    m(
        "haproxy_backend_downtime_seconds_total",
        Counter,
        "Time the backend has spent with no usable server.",
        Read::Col("downtime"),
    ),
    m(
        "haproxy_backend_loadbalanced_total",
        Counter,
        "Times a server was picked by the load-balancing algorithm.",
        Read::Col("lbtot"),
    ),
    m(
        "haproxy_backend_http_responses_total",
        Counter,
        "HTTP responses sent, by status class.",
        Read::Codes,
    ),
    m(
        "haproxy_backend_http_requests_total",
        Counter,
        "HTTP requests routed to the backend.",
        Read::Col("req_tot"),
    ),
    m(
        "haproxy_backend_client_aborts_total",
        Counter,
        "Transfers aborted by the client.",
        Read::Col("cli_abrt"),
    ),
    m(
        "haproxy_backend_server_aborts_total",
        Counter,
        "Transfers aborted by the server.",
        Read::Col("srv_abrt"),
    ),
    m(
        "haproxy_backend_connection_attempts_total",
        Counter,
        "New connections attempted to the backend's servers.",
        Read::Col("connect"),
    ),
    m(
        "haproxy_backend_connection_reuses_total",
        Counter,
        "Requests sent on an already established server connection.",
        Read::Col("reuse"),
    ),
    m(
        "haproxy_backend_uweight",
        Gauge,
        "Total user weight of the usable active servers.",
        Read::Col("uweight"),
    ),
    m(
        "haproxy_backend_agg_server_status",
        Gauge,
        "Servers of the backend in each state.",
        Read::AggServerStatus,
    ),
    m(
        "haproxy_backend_queue_time_seconds",
        Histogram,
        "Time requests waited for a server slot (Tw), over the backend's servers.",
        Read::Timer(Timer::Queue),
    ),
    m(
        "haproxy_backend_connect_time_seconds",
        Histogram,
        "Time to establish new server connections (Tc); reused connections are not counted.",
        Read::Timer(Timer::Connect),
    ),
    m(
        "haproxy_backend_response_time_seconds",
        Histogram,
        "Time from sending a request to a server to its response headers (Tr).",
        Read::Timer(Timer::Response),
    ),
    m(
        "haproxy_backend_total_time_seconds",
        Histogram,
        "Time from the first request byte to the last response byte (Ta); TCP: session duration.",
        Read::Timer(Timer::Total),
    ),
];

const SERVER: &[Metric] = &[
    m(
        "haproxy_server_current_queue",
        Gauge,
        "Requests waiting for this server.",
        Read::Col("qcur"),
    ),
    m(
        "haproxy_server_max_queue",
        Gauge,
        "Most requests waiting for this server at once.",
        Read::Col("qmax"),
    ),
    m(
        "haproxy_server_current_sessions",
        Gauge,
        "Requests the server is serving now.",
        Read::Col("scur"),
    ),
    m(
        "haproxy_server_max_sessions",
        Gauge,
        "Most requests served at once.",
        Read::Col("smax"),
    ),
    m(
        "haproxy_server_limit_sessions",
        Gauge,
        "Limit on concurrent requests (maxconn).",
        Read::Col("slim"),
    ),
    m(
        "haproxy_server_sessions_total",
        Counter,
        "Requests (or TCP sessions) given to the server.",
        Read::Col("stot"),
    ),
    m(
        "haproxy_server_bytes_in_total",
        Counter,
        "Bytes sent to the server.",
        Read::Col("bin"),
    ),
    m(
        "haproxy_server_bytes_out_total",
        Counter,
        "Bytes received from the server.",
        Read::Col("bout"),
    ),
    m(
        "haproxy_server_responses_denied_total",
        Counter,
        "Responses denied by http-response rules.",
        Read::Col("dresp"),
    ),
    m(
        "haproxy_server_connection_errors_total",
        Counter,
        "Failed connection attempts.",
        Read::Col("econ"),
    ),
    m(
        "haproxy_server_response_errors_total",
        Counter,
        "Invalid or missing responses.",
        Read::Col("eresp"),
    ),
    m(
        "haproxy_server_retry_warnings_total",
        Counter,
        "Connection attempts retried.",
        Read::Col("wretr"),
    ),
    m(
        "haproxy_server_redispatch_warnings_total",
        Counter,
        "Requests redispatched away from this server.",
        Read::Col("wredis"),
    ),
    m(
        "haproxy_server_status",
        Gauge,
        "Server state: 1 for the current state label, 0 for the others.",
        Read::State,
    ),
    m(
        "haproxy_server_weight",
        Gauge,
        "Effective weight (0 while draining).",
        Read::Col("weight"),
    ),
    m(
        "haproxy_server_active",
        Gauge,
        "1 for an active server, 0 for a backup.",
        Read::Col("act"),
    ),
    m(
        "haproxy_server_backup",
        Gauge,
        "1 for a backup server, 0 for an active one.",
        Read::Col("bck"),
    ),
    m(
        "haproxy_server_check_failures_total",
        Counter,
        "Failed health checks.",
        Read::Col("chkfail"),
    ),
    m(
        "haproxy_server_check_up_down_total",
        Counter,
        "Transitions from UP to DOWN.",
        Read::Col("chkdown"),
    ),
    m(
        "haproxy_server_check_last_change_seconds",
        Gauge,
        "Time since the server's state last changed.",
        Read::Col("lastchg"),
    ),
    m(
        "haproxy_server_queue_limit",
        Gauge,
        "Limit on requests waiting for this server (maxqueue).",
        Read::Col("qlimit"),
    ),
    m(
        "haproxy_server_loadbalanced_total",
        Counter,
        "Times the load-balancing algorithm picked this server.",
        Read::Col("lbtot"),
    ),
    m(
        "haproxy_server_check_status",
        Gauge,
        "Result of the last health check: 1 for its state label, 0 for the others.",
        Read::CheckStatus,
    ),
    m(
        "haproxy_server_check_code",
        Gauge,
        "HTTP status of the last health check (0 if it had none).",
        Read::CheckCode,
    ),
    m(
        "haproxy_server_check_duration_seconds",
        Gauge,
        "Duration of the last health check.",
        Read::CheckDuration,
    ),
    m(
        "haproxy_server_http_responses_total",
        Counter,
        "HTTP responses received from the server, by status class.",
        Read::Codes,
    ),
    m(
        "haproxy_server_client_aborts_total",
        Counter,
        "Transfers aborted by the client.",
        Read::Col("cli_abrt"),
    ),
    m(
        "haproxy_server_server_aborts_total",
        Counter,
        "Transfers aborted by the server.",
        Read::Col("srv_abrt"),
    ),
    m(
        "haproxy_server_connection_attempts_total",
        Counter,
        "New connections attempted.",
        Read::Col("connect"),
    ),
    m(
        "haproxy_server_connection_reuses_total",
        Counter,
        "Requests sent on an already established connection.",
        Read::Col("reuse"),
    ),
    m(
        "haproxy_server_idle_connections_current",
        Gauge,
        "Idle connections kept for reuse, over all threads.",
        Read::Col("srv_icur"),
    ),
    m(
        "haproxy_server_idle_connections_limit",
        Gauge,
        "Limit on idle connections kept (pool-max-conn).",
        Read::Col("src_ilim"),
    ),
    m(
        "haproxy_server_unsafe_idle_connections_current",
        Gauge,
        "Idle connections that carried one request so far.",
        Read::Col("idle_conn_cur"),
    ),
    m(
        "haproxy_server_safe_idle_connections_current",
        Gauge,
        "Idle connections that carried two requests or more.",
        Read::Col("safe_conn_cur"),
    ),
    m(
        "haproxy_server_used_connections_current",
        Gauge,
        "Pooled connections carrying a request now.",
        Read::Col("used_conn_cur"),
    ),
    m(
        "haproxy_server_uweight",
        Gauge,
        "User weight.",
        Read::Col("uweight"),
    ),
    m(
        "haproxy_server_pool_idle_connections_max",
        Gauge,
        "Most idle connections kept for reuse at once, over all threads (show pools idle_max).",
        Read::Col("pool_idle_max"),
    ),
    m(
        "haproxy_server_pool_purged_connections_total",
        Counter,
        "Idle connections closed by the pool purge or found dead when taken.",
        Read::PoolPurged,
    ),
    m(
        "haproxy_server_pool_replayed_requests_total",
        Counter,
        "Requests replayed on a new connection after a reused one failed unanswered.",
        Read::PoolReplayed,
    ),
    m(
        "haproxy_server_pool_takeovers_total",
        Counter,
        "Idle connections a worker thread took over from another thread's pool.",
        Read::PoolTakeovers,
    ),
    m(
        "haproxy_server_queue_time_seconds",
        Histogram,
        "Time requests waited for a slot on this server (Tw).",
        Read::Timer(Timer::Queue),
    ),
    m(
        "haproxy_server_connect_time_seconds",
        Histogram,
        "Time to establish new connections (Tc); reused connections are not counted.",
        Read::Timer(Timer::Connect),
    ),
    m(
        "haproxy_server_response_time_seconds",
        Histogram,
        "Time from sending a request to the response headers (Tr).",
        Read::Timer(Timer::Response),
    ),
    m(
        "haproxy_server_total_time_seconds",
        Histogram,
        "Time from the first request byte to the last response byte (Ta); TCP: session duration.",
        Read::Timer(Timer::Total),
    ),
    m(
        "haproxy_server_check_time_seconds",
        Histogram,
        "Duration of every health check.",
        Read::CheckTimes,
    ),
];

/// Server states as HAProxy's exporter labels them (sluice has no NOLB state: always 0).
const SERVER_STATES: [&str; 5] = ["DOWN", "UP", "MAINT", "DRAIN", "NOLB"];
/// Frontend and backend states.
const PROXY_STATES: [&str; 2] = ["DOWN", "UP"];
/// `code` labels of the `hrsp_*` columns.
const CODES: [(&str, &str); 6] = [
    ("1xx", "hrsp_1xx"),
    ("2xx", "hrsp_2xx"),
    ("3xx", "hrsp_3xx"),
    ("4xx", "hrsp_4xx"),
    ("5xx", "hrsp_5xx"),
    ("other", "hrsp_other"),
];

impl Query {
    pub const ALL: Query = Query {
        global: true,
        frontend: true,
        backend: true,
        server: true,
        no_maint: false,
    };

    /// Reads the query string (after `?`). As HAProxy: `scope=NAME` may repeat and selects
    /// parts (once one is given, only those named), `scope=*` selects every part, an empty
    /// `scope=` clears the ones selected so far; `no-maint` leaves out servers in
    /// maintenance. `listener` and `sticktable` are accepted (sluice has no such metrics).
    /// Other parameters are ignored.
    pub fn parse(qs: &[u8]) -> Result<Query, String> {
        let mut q = Query::ALL;
        let mut scoped = false;
        for (k, v) in crate::http::urlencoded_pairs(qs) {
            match (k.as_str(), v.as_deref()) {
                ("scope", v) => {
                    if !scoped {
                        scoped = true;
                        q.set_scopes(false);
                    }
                    match v {
                        None => return Err("'scope' needs a value".into()),
                        Some("") => q.set_scopes(false),
                        Some("*") => q.set_scopes(true),
                        Some("global") => q.global = true,
                        Some("frontend") => q.frontend = true,
                        Some("backend") => q.backend = true,
                        Some("server") => q.server = true,
                        Some("listener" | "sticktable") => {}
                        Some(other) => return Err(format!("unknown scope '{other}'")),
                    }
                }
                ("no-maint", _) => q.no_maint = true,
                _ => {}
            }
        }
        Ok(q)
    }

    fn set_scopes(&mut self, on: bool) {
        self.global = on;
        self.frontend = on;
        self.backend = on;
        self.server = on;
    }
}

/// The whole HTTP response to a scrape: 200 with the exposition, or 400 for a bad query.
pub fn response(shared: &Shared, query: &[u8], head_only: bool) -> (u16, Vec<u8>) {
    use crate::stats_page::http_response;
    match Query::parse(query) {
        Ok(q) => (
            200,
            http_response(200, &[], CONTENT_TYPE, &render(shared, q), head_only),
        ),
        Err(e) => (
            400,
            http_response(400, &[], "text/plain", &format!("{e}\n"), head_only),
        ),
    }
}

/// The exposition text: process, then frontends, backends and servers in configuration
/// order, each metric family with all its samples together.
pub fn render(shared: &Shared, q: Query) -> String {
    let mut out = Out {
        text: String::with_capacity(64 * 1024),
        pending: None,
    };
    if q.global {
        process(&mut out, shared);
    }
    let cfg = &shared.cfg;
    let http = |i: usize| cfg.proxies[i].mode == Mode::Http;
    if q.frontend {
        let objs: Vec<Obj> = cfg
            .proxies
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kind.has_frontend())
            .map(|(i, p)| Obj {
                proxy: &p.name,
                server: None,
                http: http(i),
                row: stats::frontend_row(shared, i, p),
                be: None,
                srv: None,
            })
            .collect();
        out.families(FRONTEND, &objs);
    }
    let backends = || {
        cfg.proxies
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p, shared.proxies[i].be.as_ref()?)))
    };
    if q.backend {
        let objs: Vec<Obj> = backends()
            .map(|(i, p, be)| Obj {
                proxy: &p.name,
                server: None,
                http: http(i),
                row: stats::backend_row(shared, i, p, be),
                be: Some(be),
                srv: None,
            })
            .collect();
        out.families(BACKEND, &objs);
    }
    if q.server {
        let mut objs = Vec::new();
        for (i, p, be) in backends() {
            for s in be.servers.iter() {
                if s.deleted.load(Relaxed) || (q.no_maint && s.maint.load(Relaxed)) {
                    continue;
                }
                objs.push(Obj {
                    proxy: &p.name,
                    server: Some(&s.name),
                    http: http(i),
                    row: stats::server_row(shared, i, p, be, s),
                    be: Some(be),
                    srv: Some(s),
                });
            }
        }
        out.families(SERVER, &objs);
    }
    out.text
}

/// `haproxy_process_*`, from the fields of `show info`.
fn process(out: &mut Out, shared: &Shared) {
    let fields = stats::info_fields(shared, shared.nbthread);
    for &(field, name, kind, help) in PROCESS {
        out.begin(name, help, kind);
        if let Some((_, v)) = fields.iter().find(|(k, _)| *k == field)
            && is_number(v)
        {
            out.sample(name, &[], v);
        }
    }
    out.begin(
        "haproxy_process_build_info",
        "Build information: the version label; the value is always 1.",
        Gauge,
    );
    out.sample(
        "haproxy_process_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.pending = None;
}

/// A stats column that holds a number (empty columns hold none).
fn is_number(v: &str) -> bool {
    !v.is_empty() && v.parse::<f64>().is_ok()
}

/// HAProxy's server state for the exporter.
fn server_state(s: &ServerState) -> &'static str {
    match stats::server_status(s) {
        "MAINT" => "MAINT",
        "DOWN" => "DOWN",
        "DRAIN" => "DRAIN",
        "NOLB" => "NOLB",
        // "UP", or "no check" for a server without health checks.
        _ => "UP",
    }
}

impl Obj<'_> {
    /// The object's labels: `proxy`, and `server` for a server.
    fn labels(&self) -> Vec<(&str, &str)> {
        let mut l = vec![("proxy", self.proxy)];
        if let Some(s) = self.server {
            l.push(("server", s));
        }
        l
    }

    fn with<'a>(&'a self, k: &'a str, v: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut l = self.labels();
        l.push((k, v));
        l
    }

    /// The checks of a server whose checks are running (not `disable health`).
    fn check(&self) -> Option<&crate::check::CheckState> {
        self.srv?.check.as_ref().filter(|c| c.enabled.load(Relaxed))
    }

    /// Histogram of timer `t`: the server's own, or the sum over a backend's servers. Deleted
    /// servers stay in the sum, so that a backend's histograms never go down.
    fn timer(&self, t: Timer) -> Option<Snapshot> {
        if t == Timer::Response && !self.http {
            return None;
        }
        if let Some(s) = self.srv {
            return Some(s.timers.snapshot(t));
        }
        let mut sum = Snapshot::default();
        for s in self.be?.servers.iter() {
            sum.merge(&s.timers.snapshot(t));
        }
        Some(sum)
    }
}

impl Out {
    /// Starts a family: its header is written with its first sample.
    fn begin(&mut self, name: &'static str, help: &'static str, kind: Kind) {
        self.pending = Some((name, help, kind));
    }

    fn header(&mut self) {
        if let Some((name, help, kind)) = self.pending.take() {
            let t = match kind {
                Gauge => "gauge",
                Counter => "counter",
                Histogram => "histogram",
            };
            let _ = write!(self.text, "# HELP {name} {help}\n# TYPE {name} {t}\n");
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        self.header();
        self.text.push_str(name);
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {v}");
    }

    /// `_bucket` lines (cumulative, ending with `+Inf` = the count), `_sum`, `_count`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], s: &Snapshot) {
        self.header();
        let mut cum = 0u64;
        for i in 0..BUCKETS {
            cum += s.counts[i];
            let le = BOUNDS_LE.get(i).copied().unwrap_or("+Inf");
            let _ = write!(self.text, "{name}_bucket");
            write_labels(&mut self.text, labels, Some(le));
            let _ = writeln!(self.text, " {cum}");
        }
        let _ = write!(self.text, "{name}_sum");
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {}", s.sum_seconds());
        let _ = write!(self.text, "{name}_count");
        write_labels(&mut self.text, labels, None);
        let _ = writeln!(self.text, " {cum}");
    }

    /// Every family of `metrics`, each with the samples of all `objs`.
    fn families(&mut self, metrics: &[Metric], objs: &[Obj]) {
        for m in metrics {
            self.begin(m.name, m.help, m.kind);
            for o in objs {
                self.samples(m, o);
            }
        }
        self.pending = None;
    }

    fn samples(&mut self, m: &Metric, o: &Obj) {
        match m.read {
            Read::Col(c) => {
                let v = o.row.get(c);
                if is_number(v) {
                    self.sample(m.name, &o.labels(), v);
                }
            }
            Read::Codes => {
                if !o.http {
                    return;
                }
                for (code, col) in CODES {
                    let v = o.row.get(col);
                    if is_number(v) {
                        self.sample(m.name, &o.with("code", code), v);
                    }
                }
            }
            Read::State => {
                let (states, cur): (&[&str], &str) = match (o.srv, o.be) {
                    (Some(s), _) => (&SERVER_STATES, server_state(s)),
                    (None, Some(_)) => (&PROXY_STATES, o.row.get("status")),
                    (None, None) => {
                        let up = o.row.get("status") == "OPEN";
                        (&PROXY_STATES, if up { "UP" } else { "DOWN" })
                    }
                };
                for st in states {
                    self.sample(m.name, &o.with("state", st), u8::from(*st == cur));
                }
            }
            Read::AggServerStatus => {
                let Some(be) = o.be else { return };
                for st in SERVER_STATES {
                    let n = be
                        .servers
                        .iter()
                        .filter(|s| !s.deleted.load(Relaxed) && server_state(s) == st)
                        .count();
                    self.sample(m.name, &o.with("state", st), n);
                }
            }
            Read::CheckStatus => {
                let Some(ck) = o.check() else { return };
                let cur = ck.status();
                for st in Status::RESULTS {
                    self.sample(m.name, &o.with("state", st.code()), u8::from(st == cur));
                }
            }
            Read::CheckCode => {
                let Some(ck) = o.check() else { return };
                self.sample(m.name, &o.labels(), ck.last_code.load(Relaxed));
            }
            Read::CheckDuration => {
                let Some(ck) = o.srv.and_then(|s| s.check.as_ref()) else {
                    return;
                };
                if ck.status() != Status::Ini {
                    let ms = ck.last_duration_ms.load(Relaxed);
                    self.sample(m.name, &o.labels(), ms as f64 / 1000.0);
                }
            }
            Read::Timer(t) => {
                if let Some(s) = o.timer(t) {
                    self.histogram(m.name, &o.labels(), &s);
                }
            }
            Read::CheckTimes => {
                if let Some(ck) = o.srv.and_then(|s| s.check.as_ref()) {
                    self.histogram(m.name, &o.labels(), &ck.durations.snapshot());
                }
            }
            Read::PoolPurged | Read::PoolReplayed | Read::PoolTakeovers => {
                let Some(s) = o.srv.filter(|_| o.http) else {
                    return;
                };
                let v = match m.read {
                    Read::PoolPurged => s.pool.purged(),
                    Read::PoolTakeovers => s.pool.takeovers(),
                    _ => s.pool.replayed(),
                };
                self.sample(m.name, &o.labels(), v);
            }
        }
    }
}

/// `{k="v",...}` with the values escaped as the format requires (`\\`, `\"`, `\n`), plus an
/// `le` label for histogram buckets. Nothing at all when there is no label.
fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().copied().chain(le.map(|v| ("le", v))) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_scopes_like_haproxy() {
        assert_eq!(Query::parse(b"").unwrap(), Query::ALL);
        let q = Query::parse(b"scope=server").unwrap();
        assert!(q.server && !q.global && !q.frontend && !q.backend);
        let q = Query::parse(b"scope=frontend&scope=backend&no-maint").unwrap();
        assert!(q.frontend && q.backend && !q.server && !q.global && q.no_maint);
        let q = Query::parse(b"scope=*&scope=").unwrap();
        assert!(!q.global && !q.frontend && !q.backend && !q.server);
        let q = Query::parse(b"scope=&scope=global").unwrap();
        assert!(q.global && !q.server);
        let q = Query::parse(b"scope=%2A").unwrap();
        assert_eq!(q, Query::ALL);
        assert!(Query::parse(b"scope=listener").is_ok());
        assert!(
            Query::parse(b"scope=servers")
                .unwrap_err()
                .contains("'servers'")
        );
        assert!(Query::parse(b"scope").is_err());
        // Parameters sluice does not know are ignored.
        assert_eq!(Query::parse(b"extra-counters").unwrap(), Query::ALL);
    }

    #[test]
    fn labels_are_escaped() {
        let mut s = String::new();
        write_labels(&mut s, &[("proxy", "a\"b\\c\nd")], Some("0.5"));
        assert_eq!(s, r#"{proxy="a\"b\\c\nd",le="0.5"}"#);
        let mut s = String::new();
        write_labels(&mut s, &[], None);
        assert_eq!(s, "");
    }

    #[test]
    fn histogram_lines_are_cumulative_and_end_with_the_count() {
        let mut out = Out {
            text: String::new(),
            pending: None,
        };
        let mut snap = Snapshot::default();
        snap.counts[0] = 2;
        snap.counts[3] = 1;
        snap.counts[BUCKETS - 1] = 4;
        snap.sum_us = 1_500_000;
        out.begin("x_seconds", "X.", Histogram);
        out.histogram("x_seconds", &[("proxy", "p")], &snap);
        let t = out.text;
        assert!(t.starts_with("# HELP x_seconds X.\n# TYPE x_seconds histogram\n"));
        assert!(t.contains("x_seconds_bucket{proxy=\"p\",le=\"0.0005\"} 2\n"));
        assert!(t.contains("x_seconds_bucket{proxy=\"p\",le=\"0.001\"} 2\n"));
        assert!(t.contains("x_seconds_bucket{proxy=\"p\",le=\"0.005\"} 3\n"));
        assert!(t.contains("x_seconds_bucket{proxy=\"p\",le=\"60\"} 3\n"));
        assert!(t.contains("x_seconds_bucket{proxy=\"p\",le=\"+Inf\"} 7\n"));
        assert!(t.contains("x_seconds_sum{proxy=\"p\"} 1.5\n"));
        assert!(t.ends_with("x_seconds_count{proxy=\"p\"} 7\n"));
    }

    #[test]
    fn a_family_without_samples_has_no_header() {
        let mut out = Out {
            text: String::new(),
            pending: None,
        };
        out.families(&SERVER[..3], &[]);
        assert_eq!(out.text, "");
    }

    #[test]
    fn metric_names_are_unique_and_valid() {
        let mut names: Vec<&str> = PROCESS.iter().map(|p| p.1).collect();
        names.extend(FRONTEND.iter().chain(BACKEND).chain(SERVER).map(|m| m.name));
        let mut seen = std::collections::HashSet::new();
        for n in &names {
            assert!(seen.insert(*n), "duplicate {n}");
            assert!(n.starts_with("haproxy_"));
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{n}");
        }
        // Every stats column named exists in the CSV.
        for m in FRONTEND.iter().chain(BACKEND).chain(SERVER) {
            if let Read::Col(c) = m.read {
                assert!(stats::CSV_FIELDS.contains(&c), "{c}");
            }
        }
    }
}
