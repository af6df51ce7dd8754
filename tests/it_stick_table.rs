//! `stick-table`, `track-sc0..2`, the `sc_*` / `src_*` fetches, the gpc/gpt actions and the
//! `show|clear|set table` commands, as HAProxy operators use them for rate limiting: the real
//! binary, real backends, counters read back over the stats socket. The expected counter
//! values are those HAProxy 2.6.12 gave for the same configurations and traffic.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};

/// A `global` section with an admin stats socket in `dir`.
fn global(dir: &TempDir) -> String {
    format!(
        "global\n    stats socket {} level admin\n",
        dir.join("s.sock").display()
    )
}

/// The `show table NAME` line of `key`, or `None` when the key is not in the table.
fn entry(dir: &TempDir, table: &str, key: &str) -> Option<String> {
    table_entry(&dir.join("s.sock"), table, key)
}

/// The entry of `key` once `ready` holds for it: a response reaches the client before the
/// transaction's end is accounted (the counters and `use` of the entry it tracks).
fn settled(dir: &TempDir, table: &str, key: &str, ready: impl Fn(&str) -> bool) -> String {
    table_entry_when(&dir.join("s.sock"), table, key, ready)
}

use common::table_col as col;

#[test]
fn rate_limit_denies_from_the_request_over_the_limit_and_keeps_the_connection() {
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 100k expire 30s store http_req_rate(10s),conn_cnt,conn_cur,http_req_cnt,http_err_cnt
    http-request track-sc0 src
    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt 3 }}
    default_backend be
{}",
        global(&dir),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let statuses: Vec<u16> = (0..6).map(|_| c.get("/").status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert_eq!(
        b.requests().len(),
        3,
        "denied requests never reach the server"
    );
    let e = settled(&dir, "fe", "127.0.0.1", |e| col(e, "conn_cur") == 0);
    // Tracked per request: every request counts a "connection", and none is current now.
    assert_eq!(col(&e, "http_req_cnt"), 6, "{e}");
    assert_eq!(col(&e, "http_req_rate(10000)"), 6, "{e}");
    assert_eq!(col(&e, "http_err_cnt"), 3, "denies are errors: {e}");
    assert_eq!(col(&e, "conn_cnt"), 6, "{e}");
    assert_eq!(col(&e, "conn_cur"), 0, "{e}");
    assert_eq!(col(&e, "use"), 0, "{e}");
}

#[test]
fn connection_tracking_counts_rejected_connections_and_sessions_apart() {
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 1m expire 60s store conn_cnt,conn_cur,conn_rate(60s),sess_cnt,http_req_cnt
    tcp-request connection track-sc0 src
    tcp-request connection reject if {{ sc_conn_rate(0) gt 2 }}
    default_backend be
{}",
        global(&dir),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut open = Vec::new();
    for n in 1..=2 {
        let mut c = HttpClient::connect(port);
        assert_eq!(c.get("/").status, 200);
        // Tracked for the whole connection: current while it is open.
        let e = entry(&dir, "fe", "127.0.0.1").unwrap();
        assert_eq!(col(&e, "conn_cur"), n, "{e}");
        assert_eq!(col(&e, "use"), n, "{e}");
        open.push(c);
    }
    drop(open);
    let mut third = HttpClient::connect(port);
    third.send("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    third.expect_closed();
    wait_until("the rejected connection is released", WAIT, || {
        entry(&dir, "fe", "127.0.0.1").is_some_and(|e| col(&e, "conn_cur") == 0)
    });
    let e = entry(&dir, "fe", "127.0.0.1").unwrap();
    assert_eq!(
        col(&e, "conn_cnt"),
        3,
        "a rejected connection still counts: {e}"
    );
    assert_eq!(col(&e, "conn_rate(60000)"), 3, "{e}");
    assert_eq!(
        col(&e, "sess_cnt"),
        2,
        "only accepted ones are sessions: {e}"
    );
    assert_eq!(col(&e, "http_req_cnt"), 2, "{e}");
    assert_eq!(b.requests().len(), 2);
}

#[test]
fn concurrent_connection_limit_per_source_follows_closes() {
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 1m expire 60s store conn_cur
    tcp-request connection track-sc1 src
    tcp-request connection reject if {{ sc1_conn_cur gt 2 }}
    default_backend be
{}",
        global(&dir),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut held: Vec<HttpClient> = (0..2)
        .map(|_| {
            let mut c = HttpClient::connect(port);
            assert_eq!(c.get("/").status, 200);
            c
        })
        .collect();
    let mut over = HttpClient::connect(port);
    over.send("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    over.expect_closed();
    // One held connection closes: a new one fits again once sluice has seen the close.
    drop(held.pop());
    wait_until("one connection left", WAIT, || {
        entry(&dir, "fe", "127.0.0.1").is_some_and(|e| col(&e, "conn_cur") == 1)
    });
    let mut again = HttpClient::connect(port);
    assert_eq!(again.get("/").status, 200);
    // Another source address is counted on its own.
    let other = connect_from(Ipv4Addr::new(127, 0, 0, 2), lo(port));
    let mut c = HttpClient::from_tcp(other);
    assert_eq!(c.get("/").status, 200);
    let e = entry(&dir, "fe", "127.0.0.2").unwrap();
    assert_eq!(col(&e, "conn_cur"), 1, "{e}");
}

#[test]
fn content_rules_track_the_path_per_request_and_count_server_errors() {
    let b = HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/nf" => Reply::status(404, "s1", "nope"),
        "/bad" => Reply::status(503, "s1", "down"),
        "/ni" => Reply::status(501, "s1", "not implemented"),
        _ => Reply::named("s1"),
    });
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type string len 8 size 2k expire 1h store http_req_cnt,http_err_cnt,http_fail_cnt,http_err_rate(10m)
    tcp-request content track-sc0 path
    default_backend be
{}",
        global(&dir),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    for p in ["/", "/nf", "/nf", "/bad", "/ni", "/a-long-path"] {
        c.get(p);
    }
    let nf = entry(&dir, "fe", "/nf").unwrap();
    assert_eq!(col(&nf, "http_req_cnt"), 2, "{nf}");
    assert_eq!(
        col(&nf, "http_err_cnt"),
        2,
        "a server's 404 is an error: {nf}"
    );
    assert_eq!(col(&nf, "http_err_rate(600000)"), 2, "{nf}");
    let bad = entry(&dir, "fe", "/bad").unwrap();
    assert_eq!(
        col(&bad, "http_fail_cnt"),
        1,
        "a server's 503 is a failure: {bad}"
    );
    assert_eq!(col(&bad, "http_err_cnt"), 0, "{bad}");
    let ni = entry(&dir, "fe", "/ni").unwrap();
    assert_eq!(
        col(&ni, "http_fail_cnt"),
        0,
        "501 is not a server failure: {ni}"
    );
    // Keys are cut at the table's `len`.
    let long = entry(&dir, "fe", "/a-long-").unwrap();
    assert_eq!(col(&long, "http_req_cnt"), 1, "{long}");
    let used = stats_cli(&dir.join("s.sock"), "show table");
    assert_eq!(used, "# table: fe, type: string, size:2048, used:5\n\n");
}

#[test]
fn gpc_and_gpt_actions_and_fetches_on_a_table_of_its_own() {
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
backend st_abuse
    stick-table type ip size 1k expire 30s store gpc0,gpt0,http_req_cnt

frontend fe
    bind 127.0.0.1:{port}
    http-request track-sc2 src table st_abuse
    http-request sc-inc-gpc0(2) if {{ path /bad }}
    http-request sc-set-gpt0(2) 7 if {{ path /tag }}
    http-request set-header x-gpc0 %[sc_get_gpc0(2)]
    http-request set-header x-gpt0 %[sc2_get_gpt0]
    http-request set-header x-tracked %[sc_tracked(2)]/%[sc_tracked(0)]
    http-request set-header x-src-req %[src_http_req_cnt(st_abuse)]
    http-request deny if {{ sc_get_gpc0(2) ge 2 }}
    default_backend be
{}",
        global(&dir),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/bad").status, 200);
    assert_eq!(c.get("/tag").status, 200);
    assert_eq!(c.get("/").status, 200);
    assert_eq!(
        c.get("/bad").status,
        403,
        "the second /bad reaches the limit"
    );
    assert_eq!(c.get("/").status, 403, "and stays denied");
    let reqs = b.requests();
    let h = |i: usize, n: &str| reqs[i].header(n).unwrap_or("").to_string();
    assert_eq!(h(0, "x-gpc0"), "1");
    assert_eq!(h(0, "x-gpt0"), "0");
    assert_eq!(h(1, "x-gpt0"), "7");
    assert_eq!(h(2, "x-tracked"), "1/0");
    assert_eq!(h(2, "x-src-req"), "3");
    // The CLI clears the counter, and the client is let through again.
    let sock = dir.join("s.sock");
    assert_eq!(
        stats_cli(&sock, "set table st_abuse key 127.0.0.1 data.gpc0 0"),
        "\n"
    );
    assert_eq!(c.get("/").status, 200);
}

#[test]
fn table_commands_answer_as_haproxy() {
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 10 expire 30s store gpc0,http_req_rate(10s)
    http-request track-sc0 src
    http-request return status 200
backend be2
    stick-table type integer size 5
",
        global(&dir)
    );
    let _s = Sluice::start(&cfg);
    let sock = dir.join("s.sock");
    let cli = |l: &str| stats_cli(&sock, l);
    // Tables are listed the last declared first.
    assert_eq!(
        cli("show table"),
        "# table: be2, type: integer, size:5, used:0\n# table: fe, type: ip, size:10, used:0\n\n"
    );
    assert_eq!(cli("set table fe key 10.0.0.1 data.gpc0 5"), "\n");
    assert_eq!(cli("set table fe key 10.0.0.2 data.gpc0 1"), "\n");
    let one = cli("show table fe key 10.0.0.1");
    assert!(
        one.starts_with("# table: fe, type: ip, size:10, used:2\n0x"),
        "{one}"
    );
    assert!(one.contains(": key=10.0.0.1 use=0 exp="), "{one}");
    assert!(one.ends_with(" gpc0=5 http_req_rate(10000)=0\n\n"), "{one}");
    let big = cli("show table fe data.gpc0 gt 2");
    assert_eq!(big.matches(": key=").count(), 1, "{big}");
    assert!(big.contains("key=10.0.0.1 "), "{big}");
    assert_eq!(cli("show table fe key 10.9.9.9"), "\n");
    assert_eq!(cli("show table nosuch"), "No such table\n\n");
    assert_eq!(
        cli("show table fe data.nosuch gt 1"),
        "Filter entry #1: Unknown data type\n\n"
    );
    assert_eq!(
        cli("set table fe key 10.0.0.3 data.conn_cnt 1"),
        "Data type not stored in this table\n\n"
    );
    assert_eq!(cli("show table be2 key abc"), "Invalid key\n\n");
    // `clear table` removes one key, or every entry (here also the one a request made: its
    // tracking ended with the request). That a tracked entry stays is stick.rs's unit test.
    let mut c = HttpClient::connect(port);
    c.send("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    c.read_response();
    settled(&dir, "fe", "127.0.0.1", |e| col(e, "use") == 0);
    assert_eq!(cli("clear table fe key 10.0.0.2"), "\n");
    assert!(entry(&dir, "fe", "10.0.0.2").is_none());
    assert_eq!(cli("clear table fe"), "\n");
    assert_eq!(
        cli("show table"),
        "# table: be2, type: integer, size:5, used:0\n# table: fe, type: ip, size:10, used:0\n\n"
    );
}

#[test]
fn entries_expire_after_their_last_use() {
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 10 expire 300ms store http_req_cnt
    tcp-request connection track-sc0 src
    http-request return status 200
",
        global(&dir)
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    // Tracked by the open connection: it never expires, and exp stays at 0 once run down.
    wait_until("exp runs down to 0", WAIT, || {
        entry(&dir, "fe", "127.0.0.1").is_some_and(|e| col(&e, "exp") == 0)
    });
    assert_eq!(col(&entry(&dir, "fe", "127.0.0.1").unwrap(), "use"), 1);
    drop(c);
    wait_until("the released entry expires", WAIT, || {
        entry(&dir, "fe", "127.0.0.1").is_none()
    });
}

#[test]
fn a_full_table_drops_the_least_recently_used_key_unless_nopurge() {
    // The server answers whether the request was tracked.
    let b = HttpBackend::with_handler("s1", |r| {
        Reply::status(200, "s1", r.header("x-tracked").unwrap_or("").to_string())
    });
    let dir = TempDir::new();
    let port = free_port();
    let nport = free_port();
    let cfg = format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 2 expire 60s store http_req_cnt
    http-request track-sc0 src
    http-request set-header x-tracked %[sc_tracked(0)]
    default_backend be
frontend np
    bind 127.0.0.1:{nport}
    stick-table type ip size 2 nopurge store http_req_cnt
    http-request track-sc0 src
    http-request set-header x-tracked %[sc_tracked(0)]
    default_backend be
{}",
        global(&dir),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let get_from = |last: u8, port: u16| {
        let s = connect_from(Ipv4Addr::new(127, 0, 0, last), lo(port));
        let mut c = HttpClient::from_tcp(s);
        c.get("/").body_str()
    };
    for last in [1, 2, 1] {
        assert_eq!(get_from(last, port), "1");
        // The transaction's end (which updates the entry again) is accounted after the
        // response: the order of the updates is the order of the requests only once it is.
        settled(&dir, "fe", &format!("127.0.0.{last}"), |l| {
            l.contains(" use=0 ")
        });
    }
    assert_eq!(get_from(3, port), "1");
    assert!(entry(&dir, "fe", "127.0.0.1").is_some());
    assert!(
        entry(&dir, "fe", "127.0.0.2").is_none(),
        "the oldest one made room"
    );
    assert!(entry(&dir, "fe", "127.0.0.3").is_some());
    for last in [1, 2] {
        assert_eq!(get_from(last, nport), "1");
    }
    assert_eq!(
        get_from(3, nport),
        "0",
        "a full nopurge table refuses new keys"
    );
    assert!(entry(&dir, "np", "127.0.0.3").is_none());
}

#[test]
fn tcp_mode_content_tracking_counts_bytes_both_ways() {
    let echo = TcpBackend::with_handler(|mut s, _| {
        let mut buf = [0u8; 64];
        s.set_read_timeout(Some(WAIT)).unwrap();
        if let Ok(n) = s.read(&mut buf) {
            let _ = s.write_all(&buf[..n]);
            let _ = s.write_all(b"!!");
        }
    });
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "{}defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
listen tcp
    bind 127.0.0.1:{port}
    stick-table type ip size 10 store bytes_in_cnt,bytes_out_cnt,conn_cnt,sess_cnt,bytes_out_rate(1m)
    tcp-request content track-sc0 src
    server e {}
",
        global(&dir),
        echo.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"0123456789").unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"0123456789!!");
    drop(c);
    wait_until("the session ends", WAIT, || {
        entry(&dir, "tcp", "127.0.0.1").is_some_and(|e| col(&e, "use") == 0)
    });
    let e = entry(&dir, "tcp", "127.0.0.1").unwrap();
    assert_eq!(col(&e, "bytes_in_cnt"), 10, "{e}");
    assert_eq!(col(&e, "bytes_out_cnt"), 12, "{e}");
    assert_eq!(col(&e, "bytes_out_rate(60000)"), 12, "{e}");
    assert_eq!(col(&e, "conn_cnt"), 1, "{e}");
    assert_eq!(
        col(&e, "sess_cnt"),
        0,
        "content tracking is not a session's: {e}"
    );
}

#[test]
fn configuration_errors_name_the_line_and_the_table() {
    let cases: &[(&str, &str)] = &[
        (
            "frontend fe\n    bind 127.0.0.1:1\n    mode http\n    http-request track-sc0 src table nosuch\n",
            "stick-table 'nosuch'",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    mode http\n    http-request deny if { src_conn_cur gt 1 }\n",
            "stick-table 'fe'",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 1k store nosuchtype\n",
            "data type 'nosuchtype'",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 1k store http_req_rate\n",
            "expects a period",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 1k\n    stick-table type ip size 2k\n",
            "only one stick-table",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 1k\n    tcp-request connection track-sc3 src\n",
            "track-sc0 to track-sc2",
        ),
        (
            "defaults\n    stick-table type ip size 1k\n",
            "'stick-table' is not allowed in",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 1k\n    tcp-request connection track-sc0 hdr(host)\n",
            "reads the HTTP request",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 1k peers p\n",
            "unable to find sync peers 'p'",
        ),
    ];
    for (cfg, want) in cases {
        let (code, out) = Sluice::check(cfg);
        assert_eq!(code, 1, "{cfg}\n{out}");
        assert!(out.contains(want), "{cfg}\nwanted '{want}' in:\n{out}");
        assert!(out.contains("@CFG@:"), "file:line in: {out}");
    }
    // `sc_*` without a table is valid, as in HAProxy (nothing tracked: no sample).
    let (code, out) = Sluice::check(
        "frontend fe\n    bind 127.0.0.1:1\n    mode http\n    http-request deny if { sc_http_req_rate(0) gt 3 }\n",
    );
    assert_eq!(code, 0, "{out}");
}

/// A frontend on `port` in front of backend `be`, whose lines besides its servers are
/// `be_lines` (persistence rules), with the stats socket of `dir`.
fn persistence(dir: &TempDir, port: u16, be_lines: &str, servers: &[&HttpBackend]) -> String {
    format!(
        "{}{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
{}",
        global(dir),
        backend_section("be", be_lines, servers)
    )
}

#[test]
fn stick_on_src_keeps_a_client_on_its_server_until_that_server_goes() {
    let s1 = HttpBackend::start("s1");
    let s2 = HttpBackend::start("s2");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = persistence(
        &dir,
        port,
        "    balance roundrobin\n    stick-table type ip size 1m expire 30m\n    stick on src",
        &[&s1, &s2],
    );
    let _s = Sluice::start(&cfg);
    let from = |last: u8| {
        let s = connect_from(Ipv4Addr::new(127, 0, 0, last), lo(port));
        HttpClient::from_tcp(s).get("/").server()
    };
    // Roundrobin alone would alternate; each source stays where it first went.
    let first: Vec<String> = [1, 2, 1, 1, 2, 3, 1].iter().map(|&l| from(l)).collect();
    assert_eq!(first[0], first[2]);
    assert_eq!(first[0], first[3]);
    assert_eq!(first[0], first[6]);
    assert_eq!(first[1], first[4]);
    assert_ne!(
        first[0], first[1],
        "the second source was balanced to the other server"
    );
    let e = entry(&dir, "be", "127.0.0.1").unwrap();
    let id = if first[0] == "s1" { 1 } else { 2 };
    assert_eq!(col(&e, "server_id"), id, "{e}");
    // Its server in maintenance: the source moves, and the table follows.
    let sock = dir.join("s.sock");
    let (gone, other) = if id == 1 { ("s1", "s2") } else { ("s2", "s1") };
    assert_eq!(stats_cli(&sock, &format!("disable server be/{gone}")), "\n");
    assert_eq!(from(1), other);
    assert_eq!(stats_cli(&sock, &format!("enable server be/{gone}")), "\n");
    assert_eq!(
        from(1),
        other,
        "the new entry wins once the old server is back"
    );
    let e = entry(&dir, "be", "127.0.0.1").unwrap();
    assert_eq!(col(&e, "server_id"), 3 - id, "{e}");
}

/// A server that starts a session: a `Set-Cookie: JSESSIONID=<server>-<n>` on each request
/// that has no such cookie, and the server's name in the body.
fn session_server(name: &'static str) -> HttpBackend {
    let n = std::sync::atomic::AtomicUsize::new(0);
    HttpBackend::with_handler(name, move |r| {
        let has = r
            .header("cookie")
            .is_some_and(|c| c.contains("JSESSIONID="));
        let headers = if has {
            vec![]
        } else {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            vec![(
                "Set-Cookie".into(),
                format!("JSESSIONID={name}-{i}; Path=/; HttpOnly"),
            )]
        };
        Reply::Full {
            status: 200,
            headers,
            body: name.as_bytes().to_vec(),
        }
    })
}

#[test]
fn stick_store_response_learns_the_session_cookie_a_server_sets() {
    // HAProxy's application-cookie persistence: the server names its session in a cookie,
    // the table learns it from the response, and requests carrying it go back there.
    let s1 = session_server("s1");
    let s2 = session_server("s2");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = persistence(
        &dir,
        port,
        "    balance roundrobin\n    stick-table type string len 32 size 1k expire 30m\n\
    stick on req.cook(JSESSIONID)\n    stick store-response res.cook(JSESSIONID)",
        &[&s1, &s2],
    );
    let _s = Sluice::start(&cfg);
    // Two new sessions, balanced to the two servers; each learns its cookie.
    let mut cookies = Vec::new();
    for _ in 0..2 {
        let r = HttpClient::connect(port).get("/");
        let c = r
            .header("set-cookie")
            .expect("a session cookie")
            .to_string();
        cookies.push((r.body_str(), c.split(';').next().unwrap().to_string()));
    }
    assert_ne!(
        cookies[0].0, cookies[1].0,
        "roundrobin spreads new sessions"
    );
    // Each session's requests go to its server, whatever roundrobin would pick: several in a
    // row, where roundrobin alone would alternate.
    for (server, cookie) in &cookies {
        for _ in 0..3 {
            let r = HttpClient::connect(port).get_with("/", &format!("Cookie: {cookie}\r\n"));
            assert_eq!(&r.body_str(), server, "{cookie}");
        }
    }
    // The table holds each cookie value with its server's id.
    for (server, cookie) in &cookies {
        let value = cookie.strip_prefix("JSESSIONID=").unwrap();
        let e = entry(&dir, "be", value).expect("the learnt cookie");
        let id = if server == "s1" { 1 } else { 2 };
        assert_eq!(col(&e, "server_id"), id, "{e}");
    }
}

#[test]
fn stick_store_response_is_checked() {
    for (cfg, want) in [
        (
            "backend be\n    stick-table type string size 1k\n    stick store-request res.cook(x)\n",
            "the pattern reads the response, which only 'stick store-response' sees",
        ),
        (
            "backend be\n    mode tcp\n    stick-table type string size 1k\n    stick store-response res.cook(x)\n",
            "requires 'mode http'",
        ),
        (
            "backend be\n    stick-table type string size 1k\n    stick store-respons res.cook(x)\n",
            "did you mean 'store-response'",
        ),
    ] {
        let (code, out) = Sluice::check(cfg);
        assert_eq!(code, 1, "{cfg}\n{out}");
        assert!(out.contains(want), "{cfg}\nwanted '{want}' in:\n{out}");
    }
    // A response condition is allowed there.
    let (code, out) = Sluice::check(
        "backend be\n    mode http\n    stick-table type string size 1k\n\
    stick store-response res.cook(x) if { status 200 }\n",
    );
    assert_eq!(code, 0, "{out}");
}

#[test]
fn stick_on_in_tcp_mode_and_stick_match_only_reads() {
    let a = TcpBackend::with_handler(|mut s, _| {
        let _ = s.write_all(b"A");
    });
    let b = TcpBackend::with_handler(|mut s, _| {
        let _ = s.write_all(b"B");
    });
    let dir = TempDir::new();
    let port = free_port();
    let mport = free_port();
    let cfg = format!(
        "{}defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
listen ftp
    bind 127.0.0.1:{port}
    balance roundrobin
    stick-table type ip size 10 expire 1h
    stick on src
    server a {}
    server b {}
listen readonly
    bind 127.0.0.1:{mport}
    balance roundrobin
    stick match src table ftp
    server a {}
    server b {}
",
        global(&dir),
        a.hostport(),
        b.hostport(),
        a.hostport(),
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let one = |port: u16| {
        let mut c = TcpStream::connect(lo(port)).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8(out).unwrap()
    };
    let got: Vec<String> = (0..4).map(|_| one(port)).collect();
    assert!(got.iter().all(|g| *g == got[0]), "{got:?}");
    // The other proxy follows the entry, and a source it does not know is balanced.
    let m: Vec<String> = (0..3).map(|_| one(mport)).collect();
    assert!(m.iter().all(|g| *g == got[0]), "{m:?}");
    let other = |last: u8| {
        let mut c = connect_from(Ipv4Addr::new(127, 0, 0, last), lo(mport));
        c.set_read_timeout(Some(WAIT)).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8(out).unwrap()
    };
    let o: Vec<String> = (0..2).map(|_| other(9)).collect();
    assert_ne!(o[0], o[1], "no entry: plain roundrobin");
    assert!(
        entry(&dir, "ftp", "127.0.0.9").is_none(),
        "stick match never writes"
    );
}

#[test]
fn gpc_fetches_on_a_table_without_gpc0_answer_as_haproxy() {
    // HAProxy 2.6.12: `sc_inc_gpc0` gives 0, a real sample, when the table does not store
    // gpc0; `sc_get_gpc0` gives no sample at all.
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}
frontend fe
    bind 127.0.0.1:{port}
    stick-table type ip size 10 store http_req_cnt
    http-request track-sc0 src
    http-request set-header x-inc %[sc_inc_gpc0(0)]
    http-request set-header x-get %[sc_get_gpc0(0)]
    http-request set-header x-inc-acl yes if {{ sc_inc_gpc0(0) ge 0 }}
    http-request set-header x-get-acl yes if {{ sc_get_gpc0(0) ge 0 }}
    default_backend be
{}",
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(http_get(port, "/").status, 200);
    let r = &b.requests()[0];
    assert_eq!(r.header("x-inc"), Some("0"));
    assert_eq!(r.header("x-get").unwrap_or(""), "");
    assert_eq!(r.header("x-inc-acl"), Some("yes"));
    assert_eq!(r.header("x-get-acl"), None);
}
