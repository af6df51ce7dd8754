//! `stats`: HAProxy 2.6's statistics as text — the CSV of `show stat` (and, later, `;csv` on
//! the stats page) and the `Key: value` lines of `show info`.
//!
//! It owns the column list and what sluice puts in each column. It only *reads* the shared
//! run-time state (`backend::Shared`); it must not change it and must not be called on the
//! request path (it allocates freely). Columns sluice cannot fill are left empty, never
//! removed, so tools that index columns by position keep working.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::backend::{BackendState, Counters, ServerState, Shared, unix_now};
use crate::config::{Mode, Proxy};

/// Every column of HAProxy 2.6's CSV, in documented order (management.txt §9.1).
pub const CSV_FIELDS: &[&str] = &[
    "pxname",
    "svname",
    "qcur",
    "qmax",
    "scur",
    "smax",
    "slim",
    "stot",
    "bin",
    "bout",
    "dreq",
    "dresp",
    "ereq",
    "econ",
    "eresp",
    "wretr",
    "wredis",
    "status",
    "weight",
    "act",
    "bck",
    "chkfail",
    "chkdown",
    "lastchg",
    "downtime",
    "qlimit",
    "pid",
    "iid",
    "sid",
    "throttle",
    "lbtot",
    "tracked",
    "type",
    "rate",
    "rate_lim",
    "rate_max",
    "check_status",
    "check_code",
    "check_duration",
    "hrsp_1xx",
    "hrsp_2xx",
    "hrsp_3xx",
    "hrsp_4xx",
    "hrsp_5xx",
    "hrsp_other",
    "hanafail",
    "req_rate",
    "req_rate_max",
    "req_tot",
    "cli_abrt",
    "srv_abrt",
    "comp_in",
    "comp_out",
    "comp_byp",
    "comp_rsp",
    "lastsess",
    "last_chk",
    "last_agt",
    "qtime",
    "ctime",
    "rtime",
    "ttime",
    "agent_status",
    "agent_code",
    "agent_duration",
    "check_desc",
    "agent_desc",
    "check_rise",
    "check_fall",
    "check_health",
    "agent_rise",
    "agent_fall",
    "agent_health",
    "addr",
    "cookie",
    "mode",
    "algo",
    "conn_rate",
    "conn_rate_max",
    "conn_tot",
    "intercepted",
    "dcon",
    "dses",
    "wrew",
    "connect",
    "reuse",
    "cache_lookups",
    "cache_hits",
    "srv_icur",
    "src_ilim",
    "qtime_max",
    "ctime_max",
    "rtime_max",
    "ttime_max",
    "eint",
    "idle_conn_cur",
    "safe_conn_cur",
    "used_conn_cur",
    "need_conn_est",
    "uweight",
    "agg_server_status",
    "agg_server_check_status",
    "agg_check_status",
    // sluice's own, appended after HAProxy 2.6's columns (HAProxy itself only ever appends,
    // and parsers go by the header): the connection pool counters of `show pools`.
    "pool_idle_max",
    "pool_purged",
    "pool_replayed",
    "pool_takeovers",
];

/// Object types, as the `type` column and `show stat`'s type mask number them.
pub const TYPE_FRONTEND: u32 = 0;
pub const TYPE_BACKEND: u32 = 1;
pub const TYPE_SERVER: u32 = 2;

/// One CSV line: every column starts empty.
pub struct Row(Vec<String>);

impl Row {
    /// The value of column `name` (empty when sluice cannot fill it).
    pub fn get(&self, name: &str) -> &str {
        match CSV_FIELDS.iter().position(|f| *f == name) {
            Some(i) => &self.0[i],
            None => {
                debug_assert!(false, "unknown stats column {name}");
                ""
            }
        }
    }

    fn new() -> Row {
        Row(vec![String::new(); CSV_FIELDS.len()])
    }

    fn set(&mut self, name: &str, v: impl std::fmt::Display) {
        match CSV_FIELDS.iter().position(|f| *f == name) {
            Some(i) => {
                self.0[i].clear();
                let _ = write!(self.0[i], "{v}");
            }
            None => debug_assert!(false, "unknown stats column {name}"),
        }
    }

    fn write_to(&self, out: &mut String) {
        for f in &self.0 {
            push_csv(out, f);
            out.push(',');
        }
        out.push('\n');
    }
}

/// A CSV field, quoted only when it must be (names cannot contain commas, but be safe).
fn push_csv(out: &mut String, f: &str) {
    if f.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&f.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(f);
    }
}

/// The header line, `# pxname,svname,...,` as HAProxy prints it.
pub fn csv_header() -> String {
    let mut s = String::from("# ");
    for f in CSV_FIELDS {
        s.push_str(f);
        s.push(',');
    }
    s.push('\n');
    s
}

/// Which rows `show stat [{<iid>|<proxy>} <type> <sid>]` asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter {
    /// Proxy index in the config (`None` = every proxy).
    pub proxy: Option<usize>,
    /// Bit mask: 1 frontends, 2 backends, 4 servers.
    pub types: u32,
    /// Server id (`None` = every server).
    pub sid: Option<u32>,
    /// Hide servers in maintenance or down (the stats page's `;up`, `show stat up`).
    pub up_only: bool,
    /// Hide servers in maintenance (`show stat no-maint`).
    pub no_maint: bool,
}

impl Filter {
    pub fn all() -> Filter {
        Filter {
            proxy: None,
            types: 7,
            sid: None,
            up_only: false,
            no_maint: false,
        }
    }
}

fn u(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(Relaxed)
}

/// The whole CSV (header and one line per object), in HAProxy's order: for each proxy in
/// declaration order, its FRONTEND, then its servers, then its BACKEND.
pub fn csv(shared: &Shared, filter: Filter) -> String {
    let mut out = csv_header();
    for_each_row(shared, filter, |_, row| row.write_to(&mut out));
    out
}

/// Appends the CSV lines (no header) of the rows `filter` selects.
pub fn csv_rows(shared: &Shared, filter: Filter, out: &mut String) {
    for_each_row(shared, filter, |_, row| row.write_to(out));
}

/// Calls `f(proxy index, row)` for every row `filter` selects, in HAProxy's order.
pub fn for_each_row(shared: &Shared, filter: Filter, mut f: impl FnMut(usize, Row)) {
    for (i, p) in shared.cfg.proxies.iter().enumerate() {
        if filter.proxy.is_some_and(|f| f != i) {
            continue;
        }
        if p.kind.has_frontend() && filter.types & 1 != 0 {
            f(i, frontend_row(shared, i, p));
        }
        let Some(be) = shared.proxies[i].be.as_ref() else {
            continue;
        };
        if filter.types & 4 != 0 {
            for s in be.servers.iter() {
                if s.deleted.load(Relaxed) || filter.sid.is_some_and(|sid| sid != s.puid) {
                    continue;
                }
                if filter.up_only && (s.maint.load(Relaxed) || !s.up.load(Relaxed)) {
                    continue;
                }
                if filter.no_maint && s.maint.load(Relaxed) {
                    continue;
                }
                f(i, server_row(shared, i, p, be, s));
            }
        }
        if filter.types & 2 != 0 {
            f(i, backend_row(shared, i, p, be));
        }
    }
}

/// How `show stat typed|json` describes a column: HAProxy's origin, nature and scope tags
/// (e.g. `MCP`: a metric, a counter, process-wide) and the value's type.
pub fn field_meta(name: &str) -> (&'static str, &'static str) {
    match name {
        "pxname" | "svname" => ("KNS", "str"),
        "pid" => ("KGP", "u32"),
        "iid" | "sid" => ("KGS", "u32"),
        "status" | "agg_server_status" | "agg_server_check_status" | "agg_check_status" => {
            ("SGP", if name == "status" { "str" } else { "u32" })
        }
        "act" | "bck" => ("SGP", "u32"),
        "type" | "check_rise" | "check_fall" | "check_health" | "agent_rise" | "agent_fall"
        | "agent_health" => ("CGS", "u32"),
        "addr" | "mode" | "algo" => ("CGS", "str"),
        "tracked" | "cookie" => ("CNS", "str"),
        "slim" | "qlimit" | "rate_lim" | "src_ilim" => ("CLP", "u32"),
        "check_status" | "last_chk" | "last_agt" | "check_desc" | "agent_desc" | "agent_status" => {
            ("MOP", "str")
        }
        "check_code" | "agent_code" => ("MOP", "u32"),
        "check_duration" | "agent_duration" => ("MDP", "u64"),
        "lastchg" => ("MAP", "u32"),
        "lastsess" => ("MAP", "s32"),
        "weight" | "uweight" | "throttle" | "qtime" | "ctime" | "rtime" | "ttime" => ("MaP", "u32"),
        "rate" | "req_rate" | "conn_rate" => ("MRP", "u32"),
        "qmax" | "smax" | "rate_max" | "req_rate_max" | "conn_rate_max" | "qtime_max"
        | "ctime_max" | "rtime_max" | "ttime_max" | "pool_idle_max" => ("MMP", "u32"),
        "qcur" | "scur" | "srv_icur" | "idle_conn_cur" | "safe_conn_cur" | "used_conn_cur"
        | "need_conn_est" => ("MGP", "u32"),
        "downtime" => ("MCP", "u32"),
        _ => ("MCP", "u64"),
    }
}

/// The letter `show stat typed` starts a line with, and the `objType` of `show stat json`.
fn object_type(svname: &str) -> (&'static str, &'static str) {
    match svname {
        "FRONTEND" => ("F", "Frontend"),
        "BACKEND" => ("B", "Backend"),
        _ => ("S", "Server"),
    }
}

/// `show stat typed`: one `T.iid.sid.pos.name.pid:tags:type:value` line per non-empty column,
/// objects separated by an empty line, as HAProxy prints it.
pub fn typed(shared: &Shared, filter: Filter) -> String {
    let mut out = String::new();
    for_each_row(shared, filter, |_, row| {
        let (letter, _) = object_type(row.get("svname"));
        let (iid, sid) = (row.get("iid").to_string(), row.get("sid").to_string());
        for (pos, (name, v)) in CSV_FIELDS.iter().zip(&row.0).enumerate() {
            if v.is_empty() {
                continue;
            }
            let (tags, ty) = field_meta(name);
            let _ = writeln!(out, "{letter}.{iid}.{sid}.{pos}.{name}.1:{tags}:{ty}:{v}");
        }
        out.push('\n');
    });
    out
}

/// `show stat json`: an array (one per object) of arrays of field objects, HAProxy's schema.
pub fn json(shared: &Shared, filter: Filter) -> String {
    let mut out = String::from("[");
    let mut first_obj = true;
    for_each_row(shared, filter, |_, row| {
        let (_, obj) = object_type(row.get("svname"));
        if !first_obj {
            out.push(',');
        }
        first_obj = false;
        out.push('[');
        let mut first = true;
        for (pos, (name, v)) in CSV_FIELDS.iter().zip(&row.0).enumerate() {
            if v.is_empty() {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            let (tags, ty) = field_meta(name);
            let t = tags.as_bytes();
            let origin = match t[0] {
                b'K' => "Key",
                b'C' => "Config",
                b'S' => "Status",
                b'P' => "Product",
                _ => "Metric",
            };
            let nature = match t[1] {
                b'N' => "Name",
                b'L' => "Limit",
                b'M' => "Max",
                b'C' => "Counter",
                b'O' => "Output",
                b'R' => "Rate",
                b'A' => "Age",
                b'a' => "Avg",
                b'D' => "Duration",
                b'T' => "Time",
                _ => "Gauge",
            };
            let scope = if t[2] == b'S' { "Service" } else { "Process" };
            let value = if ty == "str" || v.parse::<i64>().is_err() {
                format!("{{\"type\":\"str\",\"value\":{}}}", json_string(v))
            } else {
                format!("{{\"type\":\"{ty}\",\"value\":{v}}}")
            };
            let _ = write!(
                out,
                "{{\"objType\":\"{obj}\",\"proxyId\":{},\"id\":{},\"field\":{{\"pos\":{pos},\
                 \"name\":\"{name}\"}},\"processNum\":1,\"tags\":{{\"origin\":\"{origin}\",\
                 \"nature\":\"{nature}\",\"scope\":\"{scope}\"}},\"value\":{value}}}",
                row.get("iid"),
                row.get("sid"),
            );
        }
        out.push(']');
    });
    out.push_str("]\n");
    out
}

/// A JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn mode_name(p: &Proxy) -> &'static str {
    match p.mode {
        Mode::Http => "http",
        Mode::Tcp => "tcp",
    }
}

/// Columns every row has: names, process number, ids, type, mode.
fn common(shared: &Shared, idx: usize, p: &Proxy, svname: &str, ty: u32, sid: u32) -> Row {
    let mut r = Row::new();
    r.set("pxname", &p.name);
    r.set("svname", svname);
    r.set("pid", 1);
    r.set("iid", shared.proxies[idx].uuid);
    r.set("sid", sid);
    r.set("type", ty);
    r.set("mode", mode_name(p));
    r
}

fn http_counters(r: &mut Row, c: &Counters) {
    for (i, name) in [
        "hrsp_1xx",
        "hrsp_2xx",
        "hrsp_3xx",
        "hrsp_4xx",
        "hrsp_5xx",
        "hrsp_other",
    ]
    .iter()
    .enumerate()
    {
        r.set(name, u(&c.hrsp[i]));
    }
    r.set("req_tot", u(&c.req_total));
}

/// Columns FRONTEND and BACKEND rows fill alike: sessions, bytes, denials.
fn traffic_counters(r: &mut Row, c: &Counters) {
    r.set("stot", u(&c.sessions_total));
    r.set("bin", u(&c.bytes_in));
    r.set("bout", u(&c.bytes_out));
    r.set("dreq", u(&c.denied_req));
    r.set("dresp", u(&c.denied_resp));
}

/// The FRONTEND row of proxy `idx`.
pub fn frontend_row(shared: &Shared, idx: usize, p: &Proxy) -> Row {
    let fe = &shared.proxies[idx].fe;
    let c = &fe.counters;
    let mut r = common(shared, idx, p, "FRONTEND", TYPE_FRONTEND, 0);
    r.set("scur", fe.cur_conns.load(Relaxed));
    r.set("smax", fe.max_conns.load(Relaxed));
    r.set("slim", fe.maxconn.load(Relaxed));
    traffic_counters(&mut r, c);
    r.set("ereq", u(&c.req_errors));
    let status = if shared.stopping.load(Relaxed) {
        "STOP"
    } else {
        "OPEN"
    };
    r.set("status", status);
    r.set(
        "rate_lim",
        shared.proxies[idx]
            .fe
            .sess_rate
            .as_ref()
            .map_or(0, |l| l.limit()),
    );
    if p.mode == Mode::Http {
        http_counters(&mut r, c);
        for f in ["comp_in", "comp_out", "comp_byp", "comp_rsp"] {
            r.set(f, 0);
        }
        r.set("intercepted", u(&c.intercepted));
        r.set("cache_lookups", u(&c.cache_lookups));
        r.set("cache_hits", u(&c.cache_hits));
    }
    r.set("conn_tot", u(&c.sessions_total));
    r.set("dcon", u(&c.denied_conn));
    r.set("dses", 0);
    r.set("wrew", 0);
    r.set("eint", 0);
    r
}

/// HAProxy's server status text for a server without health checks.
pub fn server_status(s: &ServerState) -> &'static str {
    if s.rmaint.load(Relaxed) && !s.config_maint.load(Relaxed) {
        "MAINT (resolution)"
    } else if s.maint.load(Relaxed) {
        "MAINT"
    } else if !s.up.load(Relaxed) {
        "DOWN"
    } else if s.drain.load(Relaxed) {
        "DRAIN"
    } else if s.health.nolb.load(Relaxed) {
        "NOLB"
    } else if s.check.is_some() {
        "UP"
    } else {
        // HAProxy shows this for an UP server without health checks.
        "no check"
    }
}

/// The row of server `s` of backend `idx`.
pub fn server_row(
    shared: &Shared,
    idx: usize,
    p: &Proxy,
    _be: &BackendState,
    s: &ServerState,
) -> Row {
    let c = &s.counters;
    let mut r = common(shared, idx, p, &s.name, TYPE_SERVER, s.puid);
    r.set("qcur", s.queued.load(Relaxed));
    r.set("qmax", s.max_queued.load(Relaxed));
    r.set("scur", s.served.load(Relaxed));
    r.set("smax", s.max_served.load(Relaxed));
    let maxconn = s.maxconn.load(Relaxed);
    if maxconn != 0 {
        r.set("slim", maxconn);
    }
    r.set("stot", u(&c.sessions_total));
    r.set("bin", u(&c.bytes_in));
    r.set("bout", u(&c.bytes_out));
    r.set("dresp", u(&c.denied_resp));
    r.set("econ", u(&c.conn_errors));
    r.set("eresp", u(&c.resp_errors));
    r.set("wretr", u(&c.retries));
    r.set("wredis", u(&c.redispatches));
    r.set("status", server_status(s));
    r.set("weight", s.eweight());
    r.set("act", u8::from(!s.backup));
    r.set("bck", u8::from(s.backup));
    r.set(
        "lastchg",
        unix_now().saturating_sub(s.last_change.load(Relaxed)),
    );
    if s.maxqueue != 0 {
        r.set("qlimit", s.maxqueue);
    }
    r.set("lbtot", u(&c.lbtot));
    if p.mode == Mode::Http {
        http_counters(&mut r, c);
    }
    r.set("cli_abrt", u(&c.cli_aborts));
    r.set("srv_abrt", u(&c.srv_aborts));
    match &s.conf.unix {
        // HAProxy's `addr` column for a UNIX socket.
        Some(_) => r.set("addr", "unix"),
        None => r.set("addr", **s.addr.load()),
    }
    if let Some(c) = &s.conf.cookie {
        r.set("cookie", c);
    }
    r.set("wrew", 0);
    r.set("connect", u(&c.connects));
    r.set("reuse", u(&c.reuses));
    r.set("eint", 0);
    if let Some(ck) = &s.check {
        if !s.maint.load(Relaxed) && !s.drain.load(Relaxed) {
            let text = ck.status_text();
            if s.health.nolb.load(Relaxed) {
                // HAProxy: NOLB, or NOLB 2/3 while it degrades.
                r.set("status", text.replacen("UP", "NOLB", 1));
            } else if !s.up.load(Relaxed) && text.starts_with("UP") {
                // Down although its own checks pass: the agent or a tracked server says so.
                r.set("status", "DOWN");
            } else {
                r.set("status", text);
            }
        }
        let desc = ck.desc();
        if !desc.is_empty() {
            r.set("check_desc", desc);
        }
        r.set("hanafail", u(&s.health.failed_hana));
        r.set("chkfail", u(&ck.failed));
        r.set("chkdown", u(&ck.downs));
        let st = ck.status();
        r.set("check_status", st.code());
        let code = ck.last_code.load(Relaxed);
        if code != 0 {
            r.set("check_code", code);
        }
        r.set("check_duration", ck.last_duration_ms.load(Relaxed));
        r.set("last_chk", st.code());
        r.set("check_rise", ck.rise);
        r.set("check_fall", ck.fall);
        r.set("check_health", ck.health.load(Relaxed));
    }
    if let Some(ag) = &s.health.agent {
        let st = ag.status();
        r.set("agent_status", st.code());
        r.set("last_agt", st.code());
        r.set("agent_duration", ag.last_duration_ms.load(Relaxed));
        let desc = ag.desc();
        if !desc.is_empty() {
            r.set("agent_desc", desc);
        }
        r.set("agent_rise", 1);
        r.set("agent_fall", 1);
        r.set("agent_health", u8::from(ag.up.load(Relaxed)));
        if s.check.is_none() && !s.up.load(Relaxed) && !s.maint.load(Relaxed) {
            r.set("status", "DOWN");
        }
    }
    if s.check.is_none() && s.conf.health.track_idx.is_some() && !s.maint.load(Relaxed) {
        if !s.up.load(Relaxed) {
            r.set("status", "DOWN");
        } else if !s.drain.load(Relaxed) {
            r.set("status", "UP");
        }
    }
    if let Some((tp, ts)) = s.conf.health.track_idx {
        r.set(
            "tracked",
            format!(
                "{}/{}",
                shared.cfg.proxies[tp].name, shared.cfg.proxies[tp].servers[ts].name
            ),
        );
    }
    if let Some(t) = s.health.throttle() {
        r.set("throttle", t);
    }
    if p.mode == Mode::Http {
        let g = &s.pool;
        let (idle, safe) = (g.idle.load(Relaxed), g.safe.load(Relaxed));
        r.set("srv_icur", idle + safe);
        if let Some(n) = p
            .servers
            .iter()
            .find(|c| c.name == s.name)
            .and_then(|c| c.pool_max_conn)
        {
            r.set("src_ilim", n);
        }
        r.set("idle_conn_cur", idle);
        r.set("safe_conn_cur", safe);
        r.set("used_conn_cur", g.used.load(Relaxed));
        r.set("pool_idle_max", g.idle_max.load(Relaxed));
        r.set("pool_purged", g.purged());
        r.set("pool_replayed", g.replayed());
        r.set("pool_takeovers", g.takeovers());
    }
    r.set("uweight", s.weight.load(Relaxed));
    r
}

/// `show pools`: sluice's server connection pools, one line per server of each HTTP backend.
pub fn show_pools(shared: &Shared) -> String {
    let mut out = String::from(
        "# backend/server: idle safe used new reused purged replayed takeovers ka_timeout (idle \
         = carried one request, safe = carried two or more; summed over threads; ka_timeout = \
         the server's idle timeout as learned from its Keep-Alive header or its closes, - if \
         unknown), then per thread: \
         idle now and its peak, pooled connections opened, reused from the thread's own pool, \
         taken over from other threads, idle connections closed, requests replayed\n",
    );
    for (i, p) in shared.cfg.proxies.iter().enumerate() {
        let Some(be) = shared.proxies[i].be.as_ref() else {
            continue;
        };
        if p.mode != Mode::Http {
            continue;
        }
        for s in be.servers.iter().filter(|s| !s.deleted.load(Relaxed)) {
            let g = &s.pool;
            let c = &s.counters;
            out.push_str(&format!(
                "{}/{}: idle={} safe={} used={} new={} reused={} purged={} replayed={} takeovers={} idle_max={} ka_timeout={}\n",
                p.name,
                s.name,
                g.idle.load(Relaxed),
                g.safe.load(Relaxed),
                g.used.load(Relaxed),
                c.connects.load(Relaxed),
                c.reuses.load(Relaxed),
                g.purged(),
                g.replayed(),
                g.takeovers(),
                g.idle_max.load(Relaxed),
                match g.ka_timeout_ms.load(Relaxed) {
                    0 => "-".to_string(),
                    ms => format!("{ms}ms"),
                },
            ));
            for (t, th) in g.threads.iter().enumerate() {
                out.push_str(&format!(
                    "  thread {}: idle={} idle_max={} new={} reused={} takeovers={} purged={} replayed={}\n",
                    t + 1,
                    th.idle.load(Relaxed),
                    th.idle_max.load(Relaxed),
                    th.new.load(Relaxed),
                    th.reused.load(Relaxed),
                    th.takeovers.load(Relaxed),
                    th.purged.load(Relaxed),
                    th.replayed.load(Relaxed),
                ));
            }
        }
    }
    out
}

/// The BACKEND row of proxy `idx`.
pub fn backend_row(shared: &Shared, idx: usize, p: &Proxy, be: &BackendState) -> Row {
    let c = &be.counters;
    let mut r = common(shared, idx, p, "BACKEND", TYPE_BACKEND, 0);
    let srv_queued: u32 = be.servers.iter().map(|s| s.queued.load(Relaxed)).sum();
    r.set("qcur", be.queued.load(Relaxed).saturating_sub(srv_queued));
    r.set("qmax", be.max_queued.load(Relaxed));
    r.set("scur", be.cur_conns.load(Relaxed));
    r.set("smax", be.max_conns.load(Relaxed));
    traffic_counters(&mut r, c);
    // Connection-level errors and retries are counted per server; the backend shows the sum.
    let sum = |f: fn(&Counters) -> &std::sync::atomic::AtomicU64| -> u64 {
        be.servers.iter().map(|s| u(f(&s.counters))).sum()
    };
    r.set("econ", sum(|c| &c.conn_errors));
    r.set("eresp", sum(|c| &c.resp_errors));
    r.set("wretr", sum(|c| &c.retries));
    r.set("wredis", sum(|c| &c.redispatches));
    let usable = |backup: bool| {
        be.servers
            .iter()
            .filter(move |s| s.backup == backup && s.usable())
    };
    let act = usable(false).count();
    let bck = usable(true).count();
    r.set("status", if act + bck > 0 { "UP" } else { "DOWN" });
    // HAProxy shows the active servers' total weight, or the backups' when no active is up.
    let weight: u32 = if act > 0 {
        usable(false).map(|s| s.eweight()).sum()
    } else {
        usable(true).map(|s| s.eweight()).sum()
    };
    r.set("weight", weight);
    r.set("act", act);
    r.set("bck", bck);
    r.set("chkdown", 0);
    r.set(
        "lastchg",
        unix_now().saturating_sub(be.last_change.load(Relaxed)),
    );
    r.set("downtime", be.downtime());
    r.set("lbtot", u(&c.lbtot));
    if p.mode == Mode::Http {
        http_counters(&mut r, c);
        for f in ["comp_in", "comp_out", "comp_byp", "comp_rsp"] {
            r.set(f, 0);
        }
        r.set("cache_lookups", u(&c.cache_lookups));
        r.set("cache_hits", u(&c.cache_hits));
    }
    r.set("cli_abrt", u(&c.cli_aborts));
    r.set("srv_abrt", u(&c.srv_aborts));
    r.set("algo", be.algo_name());
    if let Some(c) = &p.cookie {
        r.set("cookie", &c.name);
    }
    r.set("wrew", 0);
    r.set("connect", sum(|c| &c.connects));
    r.set("reuse", sum(|c| &c.reuses));
    if p.mode == Mode::Http {
        let servers = || be.servers.iter();
        r.set(
            "pool_purged",
            servers().map(|s| s.pool.purged()).sum::<u64>(),
        );
        r.set(
            "pool_replayed",
            servers().map(|s| s.pool.replayed()).sum::<u64>(),
        );
        r.set(
            "pool_takeovers",
            servers().map(|s| s.pool.takeovers()).sum::<u64>(),
        );
    }
    r.set("eint", 0);
    let uweight: u32 = usable(false).map(|s| s.weight.load(Relaxed)).sum();
    r.set("uweight", uweight);
    r.set("agg_server_status", 0);
    r.set("agg_server_check_status", 0);
    r.set("agg_check_status", 0);
    r
}

/// `Uptime` as HAProxy writes it: `1d 2h03m04s`.
/// The header of `show servers state` (format version 1, HAProxy 2.x's 25 fields).
pub const SERVERS_STATE_FIELDS: &str = "be_id be_name srv_id srv_name srv_addr srv_op_state \
     srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status \
     srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id \
     srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr \
     srv_agent_addr srv_agent_port";

/// `show servers state [backend]`: `1`, the field names, then one line per server of the
/// chosen backend (or of every backend), as HAProxy writes its server-state file.
pub fn servers_state(shared: &Shared, only: Option<usize>) -> String {
    let mut out = format!("1\n# {SERVERS_STATE_FIELDS}\n");
    for (i, p) in shared.cfg.proxies.iter().enumerate() {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let Some(be) = shared.proxies[i].be.as_ref() else {
            continue;
        };
        for s in be.servers.iter().filter(|s| !s.deleted.load(Relaxed)) {
            server_state_line(&mut out, shared.proxies[i].uuid, p, s);
        }
    }
    out
}

fn server_state_line(out: &mut String, be_id: u32, p: &Proxy, s: &ServerState) {
    let addr = **s.addr.load();
    // srv_op_state: 0 stopped, 2 running, 3 stopping (HAProxy's SRV_ST_*).
    let op = if !s.up.load(Relaxed) {
        0
    } else if s.drain.load(Relaxed) {
        3
    } else {
        2
    };
    // srv_admin_state bits: 0x01 forced maintenance, 0x04 maintenance from the config
    // (`disabled`), 0x08 forced drain.
    let mut admin = 0u32;
    if s.rmaint.load(Relaxed) {
        // SRV_ADMF_RMAINT: no address yet.
        admin |= 0x20;
    }
    if s.maint.load(Relaxed) {
        admin |= if s.config_maint.load(Relaxed) {
            0x04
        } else if s.rmaint.load(Relaxed) {
            0
        } else {
            0x01
        };
    }
    if s.drain.load(Relaxed) {
        admin |= 0x08;
    }
    let since = unix_now().saturating_sub(s.last_change.load(Relaxed));
    let (status, result, health, chk_state) = match &s.check {
        Some(ck) => {
            let st = ck.status();
            // CHK_ST_CONFIGURED | CHK_ST_ENABLED, plus CHK_ST_PAUSED once disabled.
            let state = if ck.enabled.load(Relaxed) { 6 } else { 14 };
            (
                st.haproxy_code(),
                st.result_code(),
                ck.health.load(Relaxed),
                state,
            )
        }
        None => (1, 0, 0, 0),
    };
    // As changed at run time (`set server ... check-addr|check-port|agent-addr|agent-port`).
    let (check_addr, check_port) = s.check.as_ref().map(|c| c.target()).unwrap_or_default();
    let check_port = check_port.unwrap_or(0);
    let check_addr = check_addr.map_or("-".to_string(), |a| a.to_string());
    // CHK_ST_CONFIGURED | CHK_ST_AGENT, plus CHK_ST_ENABLED while enabled.
    let (agent_state, agent_addr, agent_port) = match &s.health.agent {
        Some(ag) => {
            let t = ag.target();
            (
                if ag.enabled.load(Relaxed) { 0x16 } else { 0x12 },
                t.as_ref()
                    .and_then(|t| t.addr)
                    .map_or("-".to_string(), |a| a.to_string()),
                t.map_or(0, |t| t.port),
            )
        }
        None => (0, "-".to_string(), 0),
    };
    let _ = writeln!(
        out,
        "{be_id} {} {} {} {} {op} {admin} {} {} {since} {status} {result} {health} {chk_state} \
         {agent_state} {} {} {} {} {} 0 {check_port} {check_addr} {agent_addr} {agent_port}",
        p.name,
        s.puid,
        s.name,
        // A server on a UNIX socket has no IP address nor port: `-` and 0, as HAProxy.
        if s.conf.unix.is_some() {
            "-".to_string()
        } else {
            addr.ip().to_string()
        },
        s.weight.load(Relaxed),
        s.iweight,
        u8::from(p.id.is_some()),
        u8::from(s.conf.id.is_some()),
        s.fqdn.load().as_deref().map_or("-", String::as_str),
        if s.conf.unix.is_some() {
            0
        } else {
            addr.port()
        },
        s.conf
            .resolve
            .as_ref()
            .filter(|r| r.srv_record)
            .map_or("-", |r| r.hostname.as_str()),
    );
}

pub fn uptime_string(secs: u64) -> String {
    format!(
        "{}d {}h{:02}m{:02}s",
        secs / 86400,
        (secs % 86400) / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// `show info`: HAProxy's process fields that sluice can fill, `Name: value` per line.
/// Fields it cannot fill are left out, as HAProxy leaves out empty ones.
pub fn info(shared: &Shared, nbthread: usize) -> String {
    let mut out = String::new();
    for (k, v) in info_fields(shared, nbthread) {
        let _ = writeln!(out, "{k}: {v}");
    }
    out
}

/// The fields of `show info`, in HAProxy's order, as (name, value).
pub fn info_fields(shared: &Shared, nbthread: usize) -> Vec<(&'static str, String)> {
    let up = shared.started.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let start = shared
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (mut cum_conns, mut cum_req, mut bytes_out) = (0u64, 0u64, 0u64);
    for p in &shared.proxies {
        cum_conns += u(&p.fe.counters.sessions_total);
        cum_req += u(&p.fe.counters.req_total);
        bytes_out += u(&p.fe.counters.bytes_out);
    }
    let ulimit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(0);
    let listeners: usize = shared.cfg.proxies.iter().map(|p| p.binds.len()).sum();
    let cur = shared.global_conns.load(Relaxed);
    let node = shared
        .cfg
        .global
        .node
        .clone()
        .unwrap_or_else(crate::util::hostname);
    let fields: Vec<(&'static str, String)> = vec![
        ("Name", "sluice".into()),
        ("Version", env!("CARGO_PKG_VERSION").into()),
        ("Nbthread", nbthread.to_string()),
        ("Nbproc", "1".into()),
        ("Process_num", "1".into()),
        ("Pid", std::process::id().to_string()),
        ("Uptime", uptime_string(up)),
        ("Uptime_sec", up.to_string()),
        ("Ulimit-n", ulimit.to_string()),
        ("Maxconn", shared.global_maxconn.load(Relaxed).to_string()),
        ("Hard_maxconn", shared.hard_maxconn.to_string()),
        ("CurrConns", cur.to_string()),
        ("CumConns", cum_conns.to_string()),
        ("CumReq", cum_req.to_string()),
        (
            "CurrSslConns",
            crate::stream::SSL_CONNS.load(Relaxed).to_string(),
        ),
        (
            "CumSslConns",
            crate::stream::SSL_CONNS_TOTAL.load(Relaxed).to_string(),
        ),
        ("SslRate", shared.ssl_rate.current().to_string()),
        (
            "SslRateLimit",
            shared.cfg.global.maxsslrate.unwrap_or(0).to_string(),
        ),
        ("MaxSslRate", shared.ssl_rate.max().to_string()),
        ("node", node),
        (
            "Stopping",
            u8::from(shared.stopping.load(Relaxed)).to_string(),
        ),
        ("Jobs", (cur as usize + listeners).to_string()),
        ("Unstoppable Jobs", "0".into()),
        ("Listeners", listeners.to_string()),
        ("TotalBytesOut", bytes_out.to_string()),
        ("Start_time_sec", start.to_string()),
        ("Tainted", "0".into()),
    ];
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_haproxy_2_6() {
        let h = csv_header();
        assert!(h.starts_with(
            "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,\
             wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,\
             sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,\
             check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,"
        ));
        assert!(h.ends_with(
            "need_conn_est,uweight,agg_server_status,agg_server_check_status,agg_check_status,\
             pool_idle_max,pool_purged,pool_replayed,pool_takeovers,\n"
        ));
        assert_eq!(CSV_FIELDS.len(), 107);
        // Documented positions (management.txt numbers the columns from 0).
        for (i, name) in [
            (17, "status"),
            (27, "iid"),
            (32, "type"),
            (48, "req_tot"),
            (73, "addr"),
            (79, "conn_tot"),
            (99, "uweight"),
        ] {
            assert_eq!(CSV_FIELDS[i], name);
        }
    }

    #[test]
    fn rows_have_every_column_and_quote_when_needed() {
        let mut r = Row::new();
        r.set("pxname", "a,b");
        r.set("status", "no check");
        let mut s = String::new();
        r.write_to(&mut s);
        assert!(s.starts_with("\"a,b\",,"));
        // Every field is followed by a comma: as many commas outside the quotes as fields.
        let unquoted = s.replacen("\"a,b\"", "x", 1);
        assert_eq!(unquoted.matches(',').count(), CSV_FIELDS.len());
        assert!(s.ends_with(",\n"));
    }

    #[test]
    fn uptime_format() {
        assert_eq!(uptime_string(0), "0d 0h00m00s");
        assert_eq!(uptime_string(93784), "1d 2h03m04s");
    }
}
