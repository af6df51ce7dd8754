//! Health checks: TCP connect checks and `option httpchk` + `http-check expect`, rise/fall
//! transitions, traffic following the state, log lines and stats columns.

mod common;

use common::*;
use std::net::TcpListener;

const CHECK_DEFAULTS: &str = "global
    nbthread 1
    log stdout format raw local0
defaults
    mode http
    log global
    option httplog
    timeout connect 1s
    timeout client 10s
    timeout server 10s
    timeout check 1s
";

/// A column of the server row `be,NAME` in `show stat`.
fn stat_col(sock: &std::path::Path, srv: &str, col: &str) -> String {
    stat_column(sock, "be", srv, col)
}

#[test]
fn tcp_check_marks_a_dead_server_down_and_traffic_avoids_it() {
    let good = HttpBackend::start("good");
    let dead = closed_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}    stats socket {} level admin\n{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server dead 127.0.0.1:{dead} check inter 100ms fall 2 rise 2\n    server good {} check inter 100ms\n",
        "global\n",
        sock.display(),
        CHECK_DEFAULTS.trim_start_matches("global\n"),
        good.hostport()
    );
    let s = Sluice::start(&cfg);
    // HAProxy semantics: the first failure of a freshly started server marks it down.
    let line = s.wait_log_line(|l| l.contains("Server be/dead is DOWN"), WAIT);
    assert!(
        line.contains("reason: Layer4 connection problem")
            && line.contains("info: \"Connection refused\"")
            && line.contains("1 active and 0 backup servers left."),
        "{line}"
    );
    assert!(
        s.stderr
            .wait(
                |l| l.contains("[WARNING]") && l.contains("be/dead is DOWN"),
                WAIT
            )
            .is_some(),
        "{}",
        s.stderr.text()
    );
    // Every request now goes to the good server, none fails.
    for i in 0..6 {
        let r = http_get(port, &format!("/r{i}"));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-server"), Some("good"));
    }
    assert_eq!(stat_col(&sock, "dead", "status"), "DOWN");
    assert_eq!(stat_col(&sock, "dead", "check_status"), "L4CON");
    assert_eq!(stat_col(&sock, "good", "status"), "UP");
    assert_eq!(stat_col(&sock, "good", "check_status"), "L4OK");
    assert_eq!(stat_col(&sock, "dead", "chkdown"), "1");

    // The server comes back: after `rise` good checks it is UP and gets traffic again.
    let back = TcpListener::bind(lo(dead)).expect("rebind the dead port");
    let revived = HttpBackend::from_listener("dead", back);
    let line = s.wait_log_line(|l| l.contains("Server be/dead is UP"), WAIT);
    assert!(line.contains("reason: Layer4 check passed"), "{line}");
    let mut seen_dead = false;
    for i in 0..6 {
        let r = http_get(port, &format!("/b{i}"));
        assert_eq!(r.status, 200);
        seen_dead |= r.header("x-server") == Some("dead");
    }
    assert!(seen_dead, "the revived server gets traffic again");
    drop(revived);
}

#[test]
fn http_check_expect_rules() {
    // The backend answers 503 on /health and 200 elsewhere.
    let b = HttpBackend::with_handler("s1", |r| {
        if r.target == "/health" {
            Reply::status(503, "s1", "down for maintenance")
        } else {
            Reply::named("s1")
        }
    });
    let run = |expect: &str| {
        let port = free_port();
        let cfg = format!(
            "{CHECK_DEFAULTS}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    option httpchk GET /health\n{expect}    option log-health-checks\n    server s1 {} check inter 100ms rise 1 fall 1\n",
            b.hostport()
        );
        let s = Sluice::start(&cfg);
        (s, port)
    };
    // Default expectation (2xx/3xx): 503 fails with L7STS.
    let (s, port) = run("");
    let line = s.wait_log_line(|l| l.contains("Server be/s1 is DOWN"), WAIT);
    assert!(
        line.contains("reason: Layer7 wrong status, code: 503"),
        "{line}"
    );
    assert_eq!(http_get(port, "/x").status, 503, "no server left");
    let req = b
        .requests()
        .into_iter()
        .find(|r| r.target == "/health")
        .expect("the check request");
    assert_eq!(req.method, "GET");
    drop(s);
    // `http-check expect status 503` makes it a success.
    let (s, port) = run("    http-check expect status 503\n");
    let line = s.wait_log_line(
        |l| l.contains("Health check for server be/s1 succeeded"),
        WAIT,
    );
    assert!(
        line.contains("reason: Layer7 check passed, code: 503"),
        "{line}"
    );
    assert_eq!(http_get(port, "/x").status, 200);
    drop(s);
    // `! string maintenance` fails on the body.
    let (s, _port) = run("    http-check expect ! rstring maint(enance)?\n");
    s.wait_log_line(|l| l.contains("Server be/s1 is DOWN"), WAIT);
}

#[test]
fn check_keywords_are_validated() {
    let bad = [
        (
            "    server s 127.0.0.1:1 check inter 0\n",
            "'inter' must be greater than 0",
        ),
        (
            "    server s 127.0.0.1:1 check rise 0\n",
            "'rise': '0' is out of range",
        ),
        (
            "    http-check send meth GET\n",
            "not supported by sluice yet",
        ),
        (
            "    http-check expect statsu 200\n",
            "did you mean 'status'",
        ),
        (
            "    option httpchk GET / HTTP/2\n",
            "not supported by sluice",
        ),
    ];
    for (line, want) in bad {
        let cfg = format!("{CHECK_DEFAULTS}backend be\n{line}");
        let o = Sluice::check_full(&cfg, &[]);
        assert_eq!(o.code, 1, "{line}: {o:?}");
        assert!(o.stderr.contains(want), "{line}: {}", o.stderr);
    }
}

#[test]
fn cli_forces_health_and_moves_a_server() {
    let a = HttpBackend::start("a");
    let b = HttpBackend::start("b");
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server a {} check inter 100ms rise 2\n    server b {} check inter 100ms\n",
        sock.display(),
        CHECK_DEFAULTS.trim_start_matches("global\n"),
        a.hostport(),
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let who = || {
        http_get(port, "/")
            .header("x-server")
            .unwrap_or("")
            .to_string()
    };
    // With its checks disabled, a forced-down server stays down and gets no traffic.
    assert_eq!(stats_cli(&sock, "disable health be/a"), "\n");
    assert_eq!(stats_cli(&sock, "set server be/a health down"), "\n");
    assert_eq!(stat_col(&sock, "a", "status"), "DOWN");
    for _ in 0..4 {
        assert_eq!(who(), "b");
    }
    // Checks back on: `rise` good checks bring it UP, and it gets traffic again.
    assert_eq!(stats_cli(&sock, "enable health be/a"), "\n");
    s.wait_log_line(|l| l.contains("Server be/a is UP"), WAIT);
    let mut seen_a = false;
    for _ in 0..4 {
        seen_a |= who() == "a";
    }
    assert!(seen_a);
    // A new address applies to the next connections (here: b's port).
    let reply = stats_cli(
        &sock,
        &format!("set server be/a addr 127.0.0.1 port {}", b.port()),
    );
    assert!(
        reply.starts_with("no need to change the addr, port changed from")
            && reply.contains("by 'stats socket command'"),
        "{reply}"
    );
    for _ in 0..4 {
        assert_eq!(who(), "b");
    }
    // Errors.
    assert_eq!(
        stats_cli(&sock, "set server be/a health sideways"),
        "'set server <srv> health' expects 'up', 'stopping', or 'down'.\n\n"
    );
    assert!(stats_cli(&sock, "set server be/a addr nowhere").starts_with("Invalid addr"));
}
