//! Runtime CLI commands beyond counters: `show stat typed|json`, `show servers state`,
//! `show backend`, `show activity`, `show sess`, `shutdown session(s)`, `set maxconn
//! frontend|global`, `clear counters [all]`, and the permission level each one needs.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Setup {
    s: Sluice,
    _dir: TempDir,
    port: u16,
    admin: PathBuf,
    oper: PathBuf,
    user: PathBuf,
    _backends: Vec<HttpBackend>,
}

/// Frontend `fe` -> backend `be` (s1 gated, s2 with `id 7`, s3 `disabled`), backend `other`.
fn setup(gate: &Gate, global_extra: &str) -> Setup {
    let dir = TempDir::new();
    let (admin, oper, user) = (
        dir.join("admin.sock"),
        dir.join("oper.sock"),
        dir.join("user.sock"),
    );
    let port = free_port();
    let b1 = HttpBackend::gated("s1", gate);
    let b2 = HttpBackend::start("s2");
    let b3 = HttpBackend::start("s3");
    let cfg = format!(
        "global\n    nbthread 2\n{global_extra}    stats socket {} level admin\n    stats socket {} level operator\n\
         \x20   stats socket {} level user\n    stats timeout 5s\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
backend be\n    balance first\n    server s1 {}\n    server s2 {} id 7\n    server s3 {} disabled\n\
backend other\n    id 40\n    server o1 {} check port {}\n",
        admin.display(),
        oper.display(),
        user.display(),
        b1.hostport(),
        b2.hostport(),
        b3.hostport(),
        b2.hostport(),
        b2.port(),
    );
    let s = Sluice::start(&cfg);
    Setup {
        s,
        _dir: dir,
        port,
        admin,
        oper,
        user,
        _backends: vec![b1, b2, b3],
    }
}

fn cli(path: &Path, line: &str) -> String {
    stats_cli(path, line)
}

/// `show stat` as (header, rows of column -> value).
fn csv(path: &Path) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let out = cli(path, "show stat");
    let mut lines = out.lines().filter(|l| !l.is_empty());
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .trim_start_matches("# ")
        .trim_end_matches(',')
        .split(',')
        .map(String::from)
        .collect();
    let rows = lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect();
    (header, rows)
}

#[test]
fn show_stat_typed_matches_the_csv() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "");
    assert_eq!(http_get(t.port, "/x").status, 200);
    let (header, rows) = csv(&t.admin);
    let typed = cli(&t.user, "show stat typed");
    let re = regex::Regex::new(
        r"^([FBS])\.(\d+)\.(\d+)\.(\d+)\.([a-z0-9_]+)\.1:([KMCSP][NGMLCORADaT][SP]):(str|u32|u64|s32):(.*)$",
    )
    .unwrap();
    // Objects are separated by an empty line; each object's lines agree with its CSV row.
    let objects: Vec<&str> = typed
        .split("\n\n")
        .filter(|o| !o.trim().is_empty())
        .collect();
    assert_eq!(objects.len(), rows.len(), "{typed}");
    for (obj, row) in objects.iter().zip(&rows) {
        let mut seen = 0;
        for line in obj.lines() {
            let c = re
                .captures(line)
                .unwrap_or_else(|| panic!("bad typed line {line:?}"));
            let pos: usize = c[4].parse().unwrap();
            // The position is the CSV column index, the name that column's name.
            assert_eq!(header[pos], &c[5], "{line}");
            let letter = match row["type"].as_str() {
                "0" => "F",
                "1" => "B",
                _ => "S",
            };
            assert_eq!(&c[1], letter, "{line}");
            assert_eq!(&c[2], row["iid"], "{line}");
            assert_eq!(&c[3], row["sid"], "{line}");
            if c[7] != *"str" {
                assert!(c[8].parse::<i64>().is_ok(), "{line}");
            }
            // Stable columns have the CSV's value.
            if ["pxname", "svname", "iid", "sid", "weight", "addr"].contains(&&c[5]) {
                assert_eq!(&c[8], row[&c[5]], "{line}");
            }
            // A check may finish between the two reads and move a transition count
            // ("UP 1/3" -> "UP"): the state itself must agree.
            if &c[5] == "status" {
                let word = |s: &str| s.split(' ').next().unwrap_or("").to_string();
                assert_eq!(word(&c[8]), word(&row["status"]), "{line}");
            }
            seen += 1;
        }
        // Empty CSV columns are left out, the others all present.
        assert_eq!(seen, row.values().filter(|v| !v.is_empty()).count());
    }
    assert!(
        typed.contains("S.3.7.1.svname.1:KNS:str:s2\n"),
        "server s2 (id 7) of backend be (iid 3, after the CLI's and fe's):\n{typed}"
    );
    assert!(typed.contains("B.40.0.0.pxname.1:KNS:str:other\n"));
    // With a filter: only backend `other`'s servers.
    let only = cli(&t.user, "show stat other 4 -1 typed");
    assert!(
        only.lines().all(|l| l.is_empty() || l.starts_with("S.40.")),
        "{only}"
    );
    assert!(only.contains(".svname.1:KNS:str:o1\n"));
}

#[test]
fn show_stat_json_is_haproxy_schema() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "");
    let (header, rows) = csv(&t.admin);
    let out = cli(&t.user, "show stat json");
    let v: serde_json::Value = serde_json::from_str(out.trim_end()).expect("valid JSON");
    let objs = v.as_array().expect("array of objects");
    assert_eq!(objs.len(), rows.len());
    for (obj, row) in objs.iter().zip(&rows) {
        let fields = obj.as_array().expect("array of fields");
        assert!(!fields.is_empty());
        for f in fields {
            let pos = f["field"]["pos"].as_u64().unwrap() as usize;
            let name = f["field"]["name"].as_str().unwrap();
            assert_eq!(header[pos], name);
            assert_eq!(f["processNum"], 1);
            assert_eq!(f["proxyId"].to_string(), row["iid"]);
            assert_eq!(f["id"].to_string(), row["sid"]);
            let expect_type = match row["type"].as_str() {
                "0" => "Frontend",
                "1" => "Backend",
                _ => "Server",
            };
            assert_eq!(f["objType"], expect_type);
            for tag in ["origin", "nature", "scope"] {
                assert!(f["tags"][tag].is_string(), "{f}");
            }
            let val = &f["value"];
            let shown = match val["type"].as_str().unwrap() {
                "str" => val["value"].as_str().unwrap().to_string(),
                _ => val["value"].as_i64().expect("number").to_string(),
            };
            if ["pxname", "svname", "weight", "status", "mode"].contains(&name) {
                assert_eq!(shown, row[name], "{f}");
            }
        }
    }
    assert!(out.contains(r#""value":{"type":"str","value":"no check"}"#));
}

/// `show servers state` rows of one backend as server name -> fields.
fn servers_state(path: &Path, be: &str) -> HashMap<String, Vec<String>> {
    let out = cli(path, &format!("show servers state {be}"));
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1"), "format version: {out}");
    let header = lines.next().unwrap();
    let names: Vec<&str> = header.trim_start_matches("# ").split(' ').collect();
    assert_eq!(names.len(), 25, "{header}");
    assert_eq!(names[0], "be_id");
    assert_eq!(names[6], "srv_admin_state");
    assert_eq!(names[24], "srv_agent_port");
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<String> = l.split(' ').map(String::from).collect();
            assert_eq!(f.len(), 25, "{l}");
            (f[3].clone(), f)
        })
        .collect()
}

#[test]
fn servers_state_follows_cli_changes() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "");
    let st = servers_state(&t.user, "be");
    assert_eq!(st.len(), 3);
    let s1 = &st["s1"];
    // be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state uweight iweight
    assert_eq!(
        &s1[..9],
        // be is iid 3: with a stats socket, HAProxy's CLI proxy takes the first id.
        ["3", "be", "1", "s1", "127.0.0.1", "2", "0", "1", "1"]
    );
    assert_eq!(s1[15], "0", "backend id not forced");
    assert_eq!(s1[16], "0", "server id not forced");
    let s2 = &st["s2"];
    assert_eq!(s2[2], "7");
    assert_eq!(s2[16], "1", "server id forced");
    // `disabled` in the config: maintenance from the configuration (CMAINT, 0x04).
    assert_eq!(st["s3"][6], "4");

    assert_eq!(cli(&t.admin, "set server be/s1 state maint"), "\n");
    assert_eq!(cli(&t.admin, "set server be/s2 weight 5"), "\n");
    assert_eq!(cli(&t.admin, "set server be/s3 state drain"), "\n");
    let st = servers_state(&t.user, "be");
    assert_eq!(st["s1"][6], "1", "forced maintenance");
    assert_eq!(st["s2"][7], "5", "user weight");
    assert_eq!(st["s2"][8], "1", "initial weight");
    assert_eq!(st["s3"][6], "8", "forced drain");
    assert_eq!(st["s3"][5], "3", "draining: stopping");
    let port = st["s2"][18].parse::<u16>().unwrap();
    assert!(cli(&t.admin, "set server be/s2 addr 127.0.0.2").starts_with("IP changed from"));
    let st = servers_state(&t.user, "be");
    assert_eq!(st["s2"][4], "127.0.0.2");
    assert_eq!(st["s2"][18], port.to_string());

    // Checked server: check fields; forced id of the backend.
    let o = &servers_state(&t.user, "other")["o1"];
    assert_eq!(o[0], "40");
    assert_eq!(o[15], "1", "backend id forced");
    assert_eq!(o[13], "6", "checks configured and enabled");
    assert_eq!(o[21], t._backends[1].port().to_string(), "check port");
    assert_eq!(cli(&t.admin, "disable health other/o1"), "\n");
    assert_eq!(servers_state(&t.user, "other")["o1"][13], "14", "paused");

    // All backends; unknown backend.
    let all = cli(&t.user, "show servers state");
    assert_eq!(all.lines().filter(|l| l.starts_with("3 be ")).count(), 3);
    assert_eq!(
        all.lines().filter(|l| l.starts_with("40 other ")).count(),
        1
    );
    assert_eq!(
        cli(&t.user, "show servers state nope"),
        "Can't find backend.\n\n"
    );
    assert_eq!(cli(&t.user, "show backend"), "# name\nbe\nother\n\n");
}

/// The `show sess` line of the session from local port `port`.
fn sess_line(sock: &Path, port: u16) -> Option<String> {
    let out = cli(sock, "show sess");
    out.lines()
        .find(|l| l.contains(&format!("src=127.0.0.1:{port} ")))
        .map(String::from)
}

#[test]
fn show_sess_and_shutdown_sessions() {
    let gate = Gate::new();
    let t = setup(&gate, "");
    // A request held by s1.
    let mut busy = HttpClient::connect(t.port);
    busy.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let busy_port = busy.local_port();
    wait_until("session attached to s1", WAIT, || {
        sess_line(&t.oper, busy_port).is_some_and(|l| l.contains("srv=s1"))
    });
    let line = sess_line(&t.oper, busy_port).unwrap();
    assert!(line.starts_with("0x"), "{line}");
    assert!(line.contains(" proto=tcpv4 "), "{line}");
    assert!(line.contains(" fe=fe be=be srv=s1 "), "{line}");
    // An idle keep-alive client, attached to no server.
    let mut idle = HttpClient::connect(t.port);
    assert_eq!(idle.get("/fast").status, 200);
    let idle_port = idle.local_port();
    let idle_line = sess_line(&t.oper, idle_port).expect("idle session listed");
    assert!(idle_line.contains("be=<NONE> srv=<none>"), "{idle_line}");

    // Killing s1's sessions closes the busy client, not the idle one.
    assert_eq!(
        cli(&t.user, "shutdown sessions server be/s1"),
        "Permission denied\n\n"
    );
    assert_eq!(
        cli(&t.admin, "shutdown sessions server be/nope"),
        "No such server.\n\n"
    );
    assert_eq!(cli(&t.admin, "shutdown sessions server be/s1"), "\n");
    busy.expect_closed();
    wait_until("busy session gone", WAIT, || {
        sess_line(&t.oper, busy_port).is_none()
    });
    assert!(sess_line(&t.oper, idle_port).is_some());

    // One session by id.
    let id = idle_line.split(':').next().unwrap().to_string();
    assert_eq!(
        cli(&t.admin, "shutdown session 0xdeadbeef"),
        "No such session (use 'show sess').\n\n"
    );
    assert_eq!(
        cli(&t.admin, "shutdown session zz"),
        "Session pointer expected (use 'show sess').\n\n"
    );
    assert_eq!(cli(&t.admin, &format!("shutdown session {id}")), "\n");
    idle.expect_closed();
    // `show sess` needs the operator level.
    assert_eq!(cli(&t.user, "show sess"), "Permission denied\n\n");
    gate.open();
    drop(t.s);
}

#[test]
fn show_activity_counts_accepted_connections_per_thread() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "");
    for _ in 0..6 {
        assert_eq!(http_get(t.port, "/x").status, 200);
    }
    let out = cli(&t.user, "show activity");
    let acc = out
        .lines()
        .find(|l| l.starts_with("accepted: "))
        .unwrap_or_else(|| panic!("{out}"));
    let re = regex::Regex::new(r"^accepted: (\d+) \[ (\d+) (\d+) \]$").unwrap();
    let c = re.captures(acc).unwrap_or_else(|| panic!("{acc}"));
    let (total, a, b): (u64, u64, u64) = (
        c[1].parse().unwrap(),
        c[2].parse().unwrap(),
        c[3].parse().unwrap(),
    );
    assert_eq!(total, 6);
    assert_eq!(a + b, total);
    assert!(out.starts_with("thread_id: 0 (1..2)\ndate_now: "), "{out}");
}

#[test]
fn set_maxconn_frontend_and_global() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "    maxconn 500\n");
    assert_eq!(
        cli(&t.oper, "set maxconn frontend fe 1"),
        "Permission denied\n\n"
    );
    assert_eq!(
        cli(&t.admin, "set maxconn frontend nope 1"),
        "No such frontend.\n\n"
    );
    assert_eq!(
        cli(&t.admin, "set maxconn frontend fe x"),
        "Integer value expected.\n\n"
    );
    assert_eq!(cli(&t.admin, "set maxconn frontend fe 1"), "\n");
    assert_eq!(stat_column(&t.admin, "fe", "FRONTEND", "slim"), "1");
    // One connection holds the only place: a second one waits until it closes.
    let mut first = HttpClient::connect(t.port);
    assert_eq!(first.get("/a").status, 200);
    let mut second = HttpClient::connect(t.port);
    second.send("GET /b HTTP/1.1\r\nHost: t\r\n\r\n");
    second.expect_silent_for(Duration::from_millis(300));
    drop(first);
    assert_eq!(second.read_response().status, 200);
    // Raising it lets connections in again at once.
    assert_eq!(cli(&t.admin, "set maxconn frontend fe 100"), "\n");
    let mut third = HttpClient::connect(t.port);
    assert_eq!(third.get("/c").status, 200);

    let info = |k: &str| {
        cli(&t.user, "show info")
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")).map(String::from))
            .unwrap()
    };
    assert_eq!(info("Maxconn"), "500");
    assert_eq!(
        cli(&t.admin, "set maxconn global 100000"),
        "Value out of range.\n\n"
    );
    assert_eq!(
        cli(&t.admin, "set maxconn global x"),
        "Expects an integer value.\n\n"
    );
    assert_eq!(cli(&t.admin, "set maxconn global 20"), "\n");
    assert_eq!(info("Maxconn"), "20");
    assert_eq!(info("Hard_maxconn"), "500");
    assert_eq!(cli(&t.admin, "set maxconn global 0"), "\n");
    assert_eq!(info("Maxconn"), "500", "0 means the start-up limit");
}

#[test]
fn clear_counters_max_then_all() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "");
    for _ in 0..3 {
        assert_eq!(http_get(t.port, "/x").status, 200);
    }
    let col = |c: &str| stat_column(&t.admin, "be", "s1", c);
    assert_eq!(col("stot"), "3");
    // (A slot may be released just after the client saw its response: 1 or 2.)
    assert_ne!(col("smax"), "0");
    assert_eq!(cli(&t.user, "clear counters"), "Permission denied\n\n");
    assert_eq!(cli(&t.oper, "clear counters"), "\n");
    assert_eq!(col("smax"), "0");
    assert_eq!(col("stot"), "3", "plain 'clear counters' keeps totals");
    assert_eq!(cli(&t.oper, "clear counters all"), "Permission denied\n\n");
    assert_eq!(cli(&t.admin, "clear counters all"), "\n");
    assert_eq!(col("stot"), "0");
    assert_eq!(col("hrsp_2xx"), "0");
    assert_eq!(stat_column(&t.admin, "fe", "FRONTEND", "req_tot"), "0");
    // Counting goes on from zero.
    assert_eq!(http_get(t.port, "/x").status, 200);
    assert_eq!(col("stot"), "1");
}

#[test]
fn add_and_del_server_at_run_time() {
    let gate = Gate::new();
    gate.open();
    let t = setup(&gate, "");
    let b4 = HttpBackend::start("s4");
    let add = format!("add server be/s4 {} weight 1", b4.hostport());
    assert_eq!(cli(&t.oper, &add), "Permission denied\n\n");
    assert_eq!(cli(&t.admin, &add), "New server registered.\n\n");
    assert_eq!(
        cli(&t.admin, &add),
        "Already exists a server with the same name in backend.\n\n"
    );
    assert!(
        cli(
            &t.admin,
            &format!("add server be/s9 {} wieght 1", b4.hostport())
        )
        .starts_with("unknown server option 'wieght'"),
    );
    assert_eq!(
        cli(&t.admin, &format!("add server nope/s9 {}", b4.hostport())),
        "No such backend.\n\n"
    );
    // Visible at once: CSV, servers state (lowest free id: 1, 2 and 7 are taken).
    assert_eq!(stat_column(&t.admin, "be", "s4", "status"), "no check");
    let st = servers_state(&t.user, "be");
    assert_eq!(st["s4"][2], "3");
    assert_eq!(st["s4"][16], "0");
    // Traffic reaches it once the others are out.
    for s in ["s1", "s2"] {
        assert_eq!(
            cli(&t.admin, &format!("set server be/{s} state maint")),
            "\n"
        );
    }
    for _ in 0..3 {
        let r = http_get(t.port, "/x");
        assert_eq!(r.status, 200);
        assert_eq!(r.server(), "s4");
    }
    assert_eq!(stat_column(&t.admin, "be", "s4", "stot"), "3");
    // Deleting needs maintenance first; pooled idle connections do not block it.
    assert_eq!(
        cli(&t.admin, "del server be/s4"),
        "Only servers in maintenance mode can be deleted.\n\n"
    );
    assert_eq!(cli(&t.admin, "set server be/s4 state maint"), "\n");
    assert_eq!(cli(&t.admin, "del server be/s4"), "Server deleted.\n\n");
    assert_eq!(cli(&t.admin, "del server be/s4"), "No such server.\n\n");
    assert!(!cli(&t.admin, "show stat").contains("be,s4,"));
    assert!(!servers_state(&t.user, "be").contains_key("s4"));
    assert_eq!(http_get(t.port, "/x").status, 503);
    // The name can be used again; the new server is a new one (fresh counters).
    assert_eq!(cli(&t.admin, &add), "New server registered.\n\n");
    assert_eq!(stat_column(&t.admin, "be", "s4", "stot"), "0");
    assert_eq!(http_get(t.port, "/x").server(), "s4");

    // With `check`: checks wait for `enable health`, then run.
    let add5 = format!("add server be/s5 {} check inter 100ms", b4.hostport());
    assert_eq!(cli(&t.admin, &add5), "New server registered.\n\n");
    assert_eq!(
        servers_state(&t.user, "be")["s5"][13],
        "14",
        "checks paused"
    );
    assert_eq!(cli(&t.admin, "enable health be/s5"), "\n");
    wait_until("first check of the added server", WAIT, || {
        stat_column(&t.admin, "be", "s5", "check_status") == "L4OK"
    });
}

#[test]
fn add_server_needs_a_dynamic_algorithm() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let b = HttpBackend::start("s1");
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}backend be\n    balance source\n    server s1 {}\n",
        sock.display(),
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(
        cli(&sock, &format!("add server be/s2 {}", b.hostport())),
        "Backend must use a dynamic load balancing to support dynamic servers.\n\n"
    );
}

#[test]
fn stats_socket_on_an_inherited_fd() {
    use std::os::fd::AsRawFd;
    let dir = TempDir::new();
    let path = dir.join("inherited.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let fd = listener.as_raw_fd();
    let b = HttpBackend::start("s1");
    let cfg = format!(
        "global\n    stats socket fd@{fd} level admin\n{DEFAULTS_HTTP}backend be\n    server s1 {}\n",
        b.hostport()
    );
    let s = Sluice::builder(&cfg).inherit_fd(fd).start();
    assert_eq!(cli(&path, "show backend"), "# name\nbe\n\n");
    assert_eq!(cli(&path, "set server be/s1 state drain"), "\n");
    assert_eq!(stat_column(&path, "be", "s1", "status"), "DRAIN");
    drop(s);
    // A descriptor that is not a listening socket stops start-up with a clear error.
    let bad = format!(
        "global\n    stats socket fd@2\n{DEFAULTS_HTTP}backend be\n    server s1 {}\n",
        b.hostport()
    );
    let s = Sluice::builder(&bad).spawn();
    let st = s.wait_exit(WAIT).expect("sluice must refuse to start");
    assert_eq!(st.code(), Some(1));
    assert!(s.stderr.text().contains("fd@2"), "{}", s.stderr.text());
}

/// `init-addr none`: a server whose name does not resolve starts without an address, in
/// maintenance ("MAINT (resolution)", admin state 0x20) and without checks; `set server ...
/// addr` gives it one and puts it in service. Without `none`, the same name is a config error.
#[test]
fn init_addr_none_starts_unresolved_until_an_address_is_set() {
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let port = free_port();
    let body = format!(
        "{DEFAULTS_HTTP}    default-server init-addr last,libc,none\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    server s1 no-such-host.invalid:{} check inter 100ms\n",
        b.port()
    );
    let s = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{body}",
        sock.display()
    ));
    assert_eq!(
        stat_column(&sock, "be", "s1", "status"),
        "MAINT (resolution)"
    );
    let state = stats_cli(&sock, "show servers state be");
    let row: Vec<&str> = state
        .lines()
        .find(|l| l.contains(" s1 "))
        .expect("s1 row")
        .split(' ')
        .collect();
    assert_eq!((row[4], row[6]), ("0.0.0.0", "32"), "{state}");
    assert_eq!(http_get(port, "/").status, 503);
    assert_eq!(b.reqs(), 0);
    assert!(
        stats_cli(
            &sock,
            &format!("set server be/s1 addr 127.0.0.1 port {}", b.port())
        )
        .starts_with("IP changed from")
    );
    // In service (its checks start now: `UP`, or `UP 1/3` before the first one).
    assert!(stat_column(&sock, "be", "s1", "status").starts_with("UP"));
    assert_eq!(http_get(port, "/").server(), "s1");
    // And its checks run against the new address.
    wait_until("a check of s1 passed", WAIT, || {
        stat_column(&sock, "be", "s1", "check_status") == "L4OK"
    });
    drop(s);
    // Without `none`, HAProxy refuses to start; so does sluice, naming the line.
    let (code, out) = Sluice::check(&body.replace("last,libc,none", "last,libc"));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("could not resolve address 'no-such-host.invalid'"),
        "{out}"
    );
}
