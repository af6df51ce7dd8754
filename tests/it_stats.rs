//! Stats and the runtime CLI on `stats socket`: HAProxy 2.6's CSV (column order, counters after
//! real traffic), `show info`, server state and weight changes taking effect on traffic at
//! once, permission levels, error messages.

mod common;

use common::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// HAProxy 2.6's `show stat` columns, in order (management.txt §9.1), written out
/// independently of sluice's own list.
const HAPROXY_26_COLUMNS: &str = "pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,\
dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,\
pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,\
check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,\
req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last_chk,\
last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,agent_desc,\
check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie,mode,algo,\
conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,\
cache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,\
safe_conn_cur,used_conn_cur,need_conn_est,uweight,agg_server_status,agg_server_check_status,\
agg_check_status";

struct Setup {
    _s: Sluice,
    _dir: TempDir,
    port: u16,
    admin: PathBuf,
    user: PathBuf,
    _backends: Vec<HttpBackend>,
}

fn setup(balance: &str) -> Setup {
    let dir = TempDir::new();
    let admin = dir.join("admin.sock");
    let user = dir.join("user.sock");
    let port = free_port();
    let b1 = HttpBackend::start("s1");
    let b2 = HttpBackend::start("s2");
    let cfg = format!(
        "global\n    stats socket {} level admin mode 600\n    stats socket {} level user\n    stats timeout 5s\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    monitor-uri /alive\n    default_backend be\n\
backend be\n    balance {balance}\n    server s1 {}\n    server s2 {} id 7\n",
        admin.display(),
        user.display(),
        b1.hostport(),
        b2.hostport()
    );
    let s = Sluice::start(&cfg);
    Setup {
        _s: s,
        _dir: dir,
        port,
        admin,
        user,
        _backends: vec![b1, b2],
    }
}

fn cli(path: &Path, line: &str) -> String {
    stats_cli(path, line)
}

/// `show stat` parsed: header columns and rows as name → value maps, in order.
fn show_stat(path: &Path) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let out = cli(path, "show stat");
    assert!(
        out.ends_with("\n\n"),
        "reply must end with an empty line: {out:?}"
    );
    let mut lines = out.lines().filter(|l| !l.is_empty());
    let header = lines.next().expect("header");
    let header = header.strip_prefix("# ").expect("header starts with '# '");
    let cols: Vec<String> = header
        .strip_suffix(',')
        .expect("every field ends with a comma")
        .split(',')
        .map(String::from)
        .collect();
    let rows = lines
        .map(|l| {
            let vals: Vec<&str> = l
                .strip_suffix(',')
                .expect("trailing comma")
                .split(',')
                .collect();
            assert_eq!(
                vals.len(),
                cols.len(),
                "row has a different column count: {l}"
            );
            cols.iter()
                .cloned()
                .zip(vals.iter().map(|v| v.to_string()))
                .collect()
        })
        .collect();
    (cols, rows)
}

/// `show stat` once `ready` holds for it: counters are updated when a transaction ends, which
/// may be just after its response reached the client.
fn show_stat_when(
    path: &Path,
    ready: impl Fn(&[HashMap<String, String>]) -> bool,
) -> Vec<HashMap<String, String>> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (_, rows) = show_stat(path);
        if ready(&rows) || std::time::Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn row<'a>(rows: &'a [HashMap<String, String>], sv: &str) -> &'a HashMap<String, String> {
    rows.iter()
        .find(|r| r["svname"] == sv)
        .unwrap_or_else(|| panic!("no row {sv}"))
}

fn num(r: &HashMap<String, String>, k: &str) -> u64 {
    r[k].parse()
        .unwrap_or_else(|_| panic!("{k}={:?} is not a number", r[k]))
}

fn who(port: u16) -> String {
    let mut c = HttpClient::connect(port);
    let r = c.request("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    r.server()
}

fn tally(port: u16, n: usize) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for _ in 0..n {
        *m.entry(who(port)).or_insert(0) += 1;
    }
    m
}

#[test]
fn csv_header_has_haproxy_26_columns_in_order() {
    let st = setup("roundrobin");
    let (cols, rows) = show_stat(&st.admin);
    let want: Vec<&str> = HAPROXY_26_COLUMNS.split(',').collect();
    assert_eq!(cols[..want.len()], want[..]);
    // sluice's pool counters come after HAProxy's columns, as HAProxy appends its own.
    assert_eq!(
        cols[want.len()..],
        [
            "pool_idle_max",
            "pool_purged",
            "pool_replayed",
            "pool_takeovers"
        ]
    );
    // HAProxy's order: FRONTEND, then servers, then BACKEND, proxies in declaration order.
    let order: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["pxname"].as_str(), r["svname"].as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("fe", "FRONTEND"),
            ("be", "s1"),
            ("be", "s2"),
            ("be", "BACKEND")
        ]
    );
    let fe = row(&rows, "FRONTEND");
    assert_eq!((fe["type"].as_str(), fe["status"].as_str()), ("0", "OPEN"));
    // iid 2: with a stats socket, HAProxy's CLI proxy takes the first id (HAProxy 2.6.12
    // numbers fe 2, be 3 on this configuration).
    assert_eq!((fe["iid"].as_str(), fe["sid"].as_str()), ("2", "0"));
    assert_eq!(fe["mode"], "http");
    let s1 = row(&rows, "s1");
    let s2 = row(&rows, "s2");
    assert_eq!(
        (s1["type"].as_str(), s1["status"].as_str()),
        ("2", "no check")
    );
    // iid 3 for the backend; explicit `id 7` respected, s1 gets the lowest free id.
    assert_eq!((s1["iid"].as_str(), s1["sid"].as_str()), ("3", "1"));
    assert_eq!(s2["sid"], "7");
    assert!(s1["addr"].starts_with("127.0.0.1:"));
    // Columns sluice cannot fill stay empty.
    assert_eq!(s1["check_status"], "");
    let be = row(&rows, "BACKEND");
    assert_eq!((be["type"].as_str(), be["status"].as_str()), ("1", "UP"));
    assert_eq!((be["act"].as_str(), be["weight"].as_str()), ("2", "2"));
    assert_eq!(be["algo"], "roundrobin");
}

#[test]
fn counters_follow_real_traffic() {
    let st = setup("roundrobin");
    for _ in 0..6 {
        who(st.port);
        // A client may have its answer before the server slot is released (on two
        // threads, the next request can overlap it): wait, so `smax` counts sequential use.
        show_stat_when(&st.admin, |r| {
            num(row(r, "s1"), "scur") == 0 && num(row(r, "s2"), "scur") == 0
        });
    }
    // A request for a missing backend path still goes to a server; monitor-uri is local.
    let mut c = HttpClient::connect(st.port);
    assert_eq!(c.get("/alive").status, 200);
    drop(c);
    let rows = show_stat_when(&st.admin, |r| {
        num(row(r, "FRONTEND"), "req_tot") == 7
            && num(row(r, "s1"), "hrsp_2xx") + num(row(r, "s2"), "hrsp_2xx") == 6
    });
    let fe = row(&rows, "FRONTEND");
    assert_eq!(num(fe, "stot"), 7);
    assert_eq!(num(fe, "req_tot"), 7);
    assert_eq!(num(fe, "hrsp_2xx"), 7);
    assert_eq!(num(fe, "intercepted"), 1);
    assert!(num(fe, "bin") > 0 && num(fe, "bout") > 0, "{fe:?}");
    let be = row(&rows, "BACKEND");
    assert_eq!(num(be, "stot"), 6);
    assert_eq!(num(be, "hrsp_2xx"), 6);
    assert_eq!(num(be, "lbtot"), 6);
    assert!(num(be, "bin") > 0 && num(be, "bout") > 0);
    for s in ["s1", "s2"] {
        let r = row(&rows, s);
        assert_eq!(num(r, "stot"), 3, "{s}");
        assert_eq!(num(r, "hrsp_2xx"), 3, "{s}");
        assert_eq!(num(r, "lbtot"), 3, "{s}");
        assert_eq!(num(r, "smax"), 1, "{s}");
        assert!(num(r, "bin") > 0 && num(r, "bout") > 0, "{s}");
    }
}

#[test]
fn maint_stops_traffic_and_ready_restores_it() {
    let st = setup("roundrobin");
    assert_eq!(cli(&st.admin, "set server be/s1 state maint"), "\n");
    let t = tally(st.port, 6);
    assert_eq!(t.get("s2"), Some(&6), "{t:?}");
    let (_, rows) = show_stat(&st.admin);
    assert_eq!(row(&rows, "s1")["status"], "MAINT");
    assert_eq!(row(&rows, "BACKEND")["act"], "1");
    assert_eq!(cli(&st.admin, "set server be/s1 state ready"), "\n");
    let t = tally(st.port, 6);
    assert_eq!((t.get("s1"), t.get("s2")), (Some(&3), Some(&3)), "{t:?}");
    // The older commands do the same.
    assert_eq!(cli(&st.admin, "disable server be/s2"), "\n");
    assert_eq!(tally(st.port, 4).get("s1"), Some(&4));
    assert_eq!(cli(&st.admin, "enable server be/s2"), "\n");
    // Drain: no new traffic, shown as DRAIN with weight 0.
    assert_eq!(cli(&st.admin, "set server be/s2 state drain"), "\n");
    assert_eq!(tally(st.port, 4).get("s1"), Some(&4));
    let (_, rows) = show_stat(&st.admin);
    let s2 = row(&rows, "s2");
    assert_eq!(
        (s2["status"].as_str(), s2["weight"].as_str()),
        ("DRAIN", "0")
    );
    assert_eq!(s2["uweight"], "1");
    // Every server in maintenance: the backend is DOWN and requests get 503.
    cli(
        &st.admin,
        "set server be/s1 state maint; set server be/s2 state maint",
    );
    let (_, rows) = show_stat(&st.admin);
    assert_eq!(row(&rows, "BACKEND")["status"], "DOWN");
    let mut c = HttpClient::connect(st.port);
    assert_eq!(c.get("/").status, 503);
}

#[test]
fn set_weight_changes_distribution() {
    let st = setup("roundrobin");
    assert_eq!(cli(&st.admin, "get weight be/s1"), "1 (initial 1)\n\n");
    assert_eq!(cli(&st.admin, "set weight be/s1 3"), "\n");
    assert_eq!(cli(&st.admin, "get weight be/s1"), "3 (initial 1)\n\n");
    let t = tally(st.port, 40);
    assert_eq!((t.get("s1"), t.get("s2")), (Some(&30), Some(&10)), "{t:?}");
    assert_eq!(cli(&st.admin, "set server be/s1 weight 0"), "\n");
    assert_eq!(tally(st.port, 5).get("s2"), Some(&5));
    // Relative weights are a percentage of the initial weight.
    assert_eq!(cli(&st.admin, "set weight be/s1 200%"), "\n");
    assert_eq!(cli(&st.admin, "get weight be/s1"), "2 (initial 1)\n\n");
    assert_eq!(
        cli(&st.admin, "set weight be/s1 300"),
        "Absolute weight can only be between 0 and 256 inclusive.\n\n"
    );
    assert_eq!(
        cli(&st.admin, "set weight be/s1"),
        "Require <weight> or <weight%>.\n\n"
    );
}

#[test]
fn static_algorithms_refuse_other_weights() {
    let st = setup("static-rr");
    assert_eq!(
        cli(&st.admin, "set weight be/s1 5"),
        "Backend is using a static LB algorithm and only accepts weights '0%' and '100%'.\n\n"
    );
    assert_eq!(cli(&st.admin, "set weight be/s1 0%"), "\n");
    assert_eq!(tally(st.port, 4).get("s2"), Some(&4));
}

#[test]
fn user_level_can_read_but_not_change() {
    let st = setup("roundrobin");
    for cmd in [
        "set weight be/s1 2",
        "set server be/s1 state maint",
        "disable server be/s1",
        "enable server be/s1",
        "set maxconn server be/s1 10",
    ] {
        assert_eq!(cli(&st.user, cmd), "Permission denied\n\n", "{cmd}");
    }
    assert_eq!(cli(&st.admin, "get weight be/s1"), "1 (initial 1)\n\n");
    assert_eq!(cli(&st.user, "get weight be/s1"), "1 (initial 1)\n\n");
    let help = cli(&st.user, "help");
    assert!(help.starts_with("The following commands are valid at this level:\n"));
    assert!(
        help.contains("show stat") && !help.contains("set weight"),
        "{help}"
    );
    let (cols, rows) = show_stat(&st.user);
    assert_eq!(cols.len(), 107);
    assert_eq!(rows.len(), 4);
    // Traffic still reaches both servers: nothing was changed.
    assert_eq!(tally(st.port, 4).len(), 2);
}

#[test]
fn bad_commands_get_haproxy_messages() {
    let st = setup("roundrobin");
    let out = cli(&st.admin, "frobnicate now");
    assert!(
        out.starts_with(
            "Unknown command: 'frobnicate'. Please enter one of the following commands only:\n"
        ),
        "{out}"
    );
    assert!(out.ends_with("\n\n"));
    assert_eq!(
        cli(&st.admin, "set server be/nope state ready"),
        "No such server.\n\n"
    );
    assert_eq!(
        cli(&st.admin, "set server nobe/s1 state ready"),
        "No such backend.\n\n"
    );
    assert_eq!(
        cli(&st.admin, "set server"),
        "Require 'backend/server'.\n\n"
    );
    assert_eq!(
        cli(&st.admin, "set server be/s1 state sleeping"),
        "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n\n"
    );
    assert_eq!(
        cli(&st.admin, "get weight nobe/s1"),
        "Can't find backend.\n\n"
    );
    assert_eq!(cli(&st.admin, "get weight be/s9"), "Can't find server.\n\n");
    assert_eq!(
        cli(&st.admin, "set maxconn server be/s1 ten"),
        "maxconn string empty or preceded by garbage\n"
    );
    // Garbage bytes and an empty line never crash it.
    assert_eq!(
        cli(&st.admin, "\u{1}\u{2}\u{ff}"),
        cli(&st.admin, "\u{1}\u{2}\u{ff}")
    );
    assert_eq!(cli(&st.admin, ""), "\n");
    assert!(cli(&st.admin, "show info").starts_with("Name: sluice\n"));
}

#[test]
fn show_info_reports_process_fields() {
    let st = setup("roundrobin");
    who(st.port);
    show_stat_when(&st.admin, |r| num(row(r, "FRONTEND"), "req_tot") == 1);
    let out = cli(&st.admin, "show info");
    assert!(out.ends_with("\n\n"));
    let f: HashMap<&str, &str> = out.lines().filter_map(|l| l.split_once(": ")).collect();
    for k in [
        "Name",
        "Version",
        "Nbthread",
        "Pid",
        "Uptime",
        "Uptime_sec",
        "Maxconn",
        "CurrConns",
        "CumConns",
        "CumReq",
        "Stopping",
    ] {
        assert!(f.contains_key(k), "missing {k} in {out}");
    }
    assert_eq!(f["Pid"], st._s.pid().to_string());
    assert_eq!(f["CumConns"], "1");
    assert_eq!(f["CumReq"], "1");
    assert_eq!(f["Stopping"], "0");
}

#[test]
fn semicolons_and_interactive_prompt() {
    let st = setup("roundrobin");
    let out = cli(&st.admin, "get weight be/s1; get weight be/s2");
    assert_eq!(out, "1 (initial 1)\n\n1 (initial 1)\n\n");
    // Interactive mode: the connection stays open, each reply ends with a prompt.
    let mut s = UnixStream::connect(&st.admin).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut w = Wire::new(s.try_clone().unwrap());
    s.write_all(b"prompt\n").unwrap();
    assert!(w.read_until(b"\n> ").unwrap().is_some());
    s.write_all(b"get weight be/s2\n").unwrap();
    let got = w.read_until(b"\n> ").unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&got), "1 (initial 1)\n\n> ");
    s.write_all(b"quit\n").unwrap();
    assert_eq!(w.read_to_end().unwrap(), b"");
}

#[test]
fn show_stat_filters_by_proxy_type_and_server() {
    let st = setup("roundrobin");
    let out = cli(&st.admin, "show stat be 4 7");
    let rows: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows[1].starts_with("be,s2,"));
    let out = cli(&st.admin, "show stat 2 1 -1");
    assert!(out.lines().nth(1).unwrap().starts_with("fe,FRONTEND,"));
    assert_eq!(cli(&st.admin, "show stat nope 1 -1"), "No such proxy.\n\n");
}

#[test]
fn set_maxconn_server_applies_at_once() {
    let st = setup("roundrobin");
    assert_eq!(cli(&st.admin, "set maxconn server be/s1 5"), "\n");
    let (_, rows) = show_stat(&st.admin);
    assert_eq!(row(&rows, "s1")["slim"], "5");
    assert_eq!(row(&rows, "s2")["slim"], "");
}

#[test]
fn global_stats_keywords_are_checked() {
    let (code, err) = Sluice::check(
        "global\n    stats socket /tmp/x.sock level boss\n    stats bind-process 1\n",
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("'level' only supports 'user', 'operator', and 'admin'"),
        "{err}"
    );
    assert!(
        err.contains("'stats bind-process' in 'global' section is not supported by sluice"),
        "{err}"
    );
}

#[test]
fn tcp_stats_socket_works_too() {
    let cport = free_port();
    let b = HttpBackend::start("s1");
    let port = free_port();
    let _s = Sluice::start(&format!(
        "global\n    stats socket 127.0.0.1:{cport} level user\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server s1 {}\n",
        b.hostport()
    ));
    let mut s = std::net::TcpStream::connect(lo(cport)).unwrap();
    s.write_all(b"get weight be/s1\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert_eq!(out, "1 (initial 1)\n\n");
}
