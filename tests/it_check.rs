//! Health checks: TCP connect checks and `option httpchk` + `http-check expect`, rise/fall
//! transitions, traffic following the state, log lines and stats columns.

mod common;

use common::*;
use std::net::TcpListener;
use std::time::Duration;

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

/// `CHECK_DEFAULTS` with an admin-level stats socket at `sock`.
fn admin_defaults(sock: &std::path::Path) -> String {
    format!(
        "global\n    stats socket {} level admin\n{}",
        sock.display(),
        CHECK_DEFAULTS.trim_start_matches("global\n")
    )
}

/// A column of the server row `be,NAME` in `show stat`.
fn stat_col(sock: &std::path::Path, srv: &str, col: &str) -> String {
    stat_column(sock, "be", srv, col)
}

/// A plain layer-4 check proves that the server listens without making it accept anything,
/// as HAProxy's: the handshake's last ACK is held back and the connection reset first, so
/// nothing ever reaches the server's accept queue. The server goes from DOWN (port closed) to
/// UP (listening) on such checks alone.
#[test]
fn layer4_checks_leave_nothing_for_the_server_to_accept() {
    let port_srv = closed_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server s1 127.0.0.1:{port_srv} check inter 50ms fall 1 rise 1\n",
        admin_defaults(&sock),
    );
    let _s = Sluice::start(&cfg);
    wait_until("the closed port is DOWN", WAIT, || {
        stat_col(&sock, "s1", "check_status") == "L4CON"
    });
    // A listener that never accepts: completed connections would pile up in its queue.
    let l = TcpListener::bind(lo(port_srv)).expect("bind the checked port");
    wait_until("the listening server is UP", WAIT, || {
        stat_col(&sock, "s1", "status") == "UP"
    });
    assert_eq!(stat_col(&sock, "s1", "check_status"), "L4OK");
    l.set_nonblocking(true).unwrap();
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a check connection reached the accept queue: {other:?}"),
    }
}

#[test]
fn tcp_check_marks_a_dead_server_down_and_traffic_avoids_it() {
    let good = HttpBackend::start("good");
    let dead = closed_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server dead 127.0.0.1:{dead} check inter 100ms fall 2 rise 2\n    server good {} check inter 100ms\n",
        admin_defaults(&sock),
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
    // First checks are spread over the interval: good's may come a little later.
    wait_until("good checked", WAIT, || {
        stat_col(&sock, "good", "status") == "UP"
    });
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
    // Default expectation (2xx/3xx): 503 fails with L7STS. With `log-health-checks` the
    // check's line gives the reason, and the state change follows without one (HAProxy's).
    let (s, port) = run("");
    let line = s.wait_log_line(|l| l.contains("Health check for server be/s1 failed"), WAIT);
    assert!(
        line.contains("reason: Layer7 wrong status, code: 503"),
        "{line}"
    );
    let line = s.wait_log_line(|l| l.contains("Server be/s1 is DOWN"), WAIT);
    assert!(
        line.starts_with(
            "Server be/s1 is DOWN. 0 active and 0 backup servers left. 0 sessions active, \
             0 requeued, 0 remaining in queue."
        ),
        "{line}"
    );
    s.wait_log_line(|l| l == "backend be has no server available!", WAIT);
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
        ("    http-check send uri-lf /x\n", "not supported by sluice"),
        (
            "    http-check expect statsu 200\n",
            "did you mean 'status'",
        ),
        (
            "    option httpchk GET / HTTP/2\n",
            "not supported by sluice",
        ),
        (
            "    tcp-check connect port 80 proto h2\n",
            "'tcp-check connect proto h2': invalid protocol for tcp-check",
        ),
        (
            "    server s 127.0.0.1:1 check check-ssl\n",
            "no CA file specified",
        ),
        (
            "    tcp-check send-binary 5g\n",
            "is not an even number of hexadecimal digits",
        ),
        (
            "    tcp-check expect status 200\n",
            "unknown 'tcp-check expect' match 'status'",
        ),
        (
            "    http-check expect hdr value x\n",
            "expected 'name' after 'hdr'",
        ),
        (
            "    http-check expect hdr name -m dom x\n",
            "unknown match method 'dom'",
        ),
        (
            "    tcp-check set-var(check.x) int(1)\n",
            "unknown 'tcp-check' action",
        ),
        (
            "    server s 127.0.0.1:1 agent-check\n",
            "'agent-check' needs 'agent-port'",
        ),
        (
            "    server s 127.0.0.1:1 on-error reboot\n",
            "'on-error' expects 'fastinter', 'fail-check', 'sudden-death' or 'mark-down'",
        ),
        (
            "    server s 127.0.0.1:1 check track t\n",
            "unable to enable checks and tracking at the same time",
        ),
        (
            "    server s 127.0.0.1:1 track nope\n",
            "'track': unknown server 'nope' in backend 'be'",
        ),
        (
            "    server t 127.0.0.1:1\n    server s 127.0.0.1:1 track t\n",
            "unable to use be/t for tracking as it does not have any check enabled",
        ),
        (
            "    server s 127.0.0.1:1 observe layer4\n",
            "'observe' needs 'check'",
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
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server a {} check inter 100ms rise 2\n    server b {} check inter 100ms\n",
        admin_defaults(&sock),
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
    // Agents and tracking are not wired for servers added at run time: refused, not ignored.
    let reply = stats_cli(
        &sock,
        "add server be/x 127.0.0.1:1 agent-check agent-port 1",
    );
    assert!(
        reply.contains("'agent-check' is not supported on 'add server'"),
        "{reply}"
    );
    let reply = stats_cli(&sock, "add server be/x 127.0.0.1:1 track a");
    assert!(
        reply.contains("'track' is not supported on 'add server'"),
        "{reply}"
    );
}

/// A backend section `be` with one checked server `s1` at `b`, these extra lines, and a
/// frontend on `port`.
fn one_server(port: u16, extra: &str, b: &HttpBackend, srv_opts: &str) -> String {
    format!(
        "{CHECK_DEFAULTS}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    option log-health-checks\n{extra}    server s1 {} check inter 100ms rise 1 fall 1 {srv_opts}\n",
        b.hostport()
    )
}

/// A backend answering `/health` with two `X-Role` values and `/ready` with a body.
fn role_backend() -> HttpBackend {
    HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/health" => Reply::Full {
            status: 200,
            headers: vec![("X-Role".into(), "primary, replica".into())],
            body: b"ok".to_vec(),
        },
        "/ready" => Reply::status(200, "s1", "all good"),
        _ => Reply::named("s1"),
    })
}

#[test]
fn http_check_send_sequences_on_one_connection() {
    let b = role_backend();
    let port = free_port();
    let rules = "    option httpchk\n    http-check send meth GET uri /health ver HTTP/1.1 hdr Host example.org hdr X-Probe 1\n    http-check expect status 200\n    http-check expect hdr name x-role value -m sub prim\n    http-check send meth POST uri /ready ver HTTP/1.1 body hello\n    http-check expect string good\n";
    let s = Sluice::start(&one_server(port, rules, &b, ""));
    let line = s.wait_log_line(
        |l| l.contains("Health check for server be/s1 succeeded"),
        WAIT,
    );
    assert!(
        line.contains("reason: Layer7 check passed, code: 200, info: \"OK\""),
        "{line}"
    );
    let reqs = b.wait_requests(2, WAIT);
    let (get, post) = (&reqs[0], &reqs[1]);
    assert_eq!(
        (get.method.as_str(), get.target.as_str()),
        ("GET", "/health")
    );
    assert_eq!(get.header("host"), Some("example.org"));
    assert_eq!(get.header("x-probe"), Some("1"));
    assert_eq!(
        get.header("connection"),
        None,
        "more requests follow on this connection"
    );
    assert_eq!(
        (post.method.as_str(), post.target.as_str()),
        ("POST", "/ready")
    );
    assert_eq!(post.body, b"hello");
    assert_eq!(post.header("connection"), Some("close"));
    assert_eq!(
        get.conn_id, post.conn_id,
        "both requests on one check connection"
    );
    assert_eq!(http_get(port, "/x").status, 200);
}

#[test]
fn http_check_expect_matches_and_negations() {
    let b = role_backend();
    // (rules, expected log fragment, whether the server ends up down)
    let cases = [
        (
            "    http-check expect hdr name -m beg x-ro value -m reg ^rep\n",
            "Health check for server be/s1 succeeded",
            false,
        ),
        (
            "    http-check expect fhdr name X-Role value -m str \"primary, replica\"\n",
            "Health check for server be/s1 succeeded",
            false,
        ),
        (
            "    http-check expect rstatus ^2\n",
            "Health check for server be/s1 succeeded",
            false,
        ),
        (
            "    http-check expect ! hdr name x-role\n",
            "Health check for server be/s1 failed, reason: Layer7 wrong status, code: 200, info: \"OK\"",
            true,
        ),
        (
            "    http-check expect hdr name x-role value -m end prim\n",
            "Health check for server be/s1 failed, reason: Layer7 wrong status, code: 200",
            true,
        ),
        (
            "    http-check expect string nothere\n",
            "Health check for server be/s1 failed, reason: Layer7 invalid response, info: \"HTTP content check did not match\"",
            true,
        ),
        (
            "    http-check expect ! rstring ^o\n",
            "Health check for server be/s1 failed, reason: Layer7 invalid response, info: \"HTTP check matched unwanted content\"",
            true,
        ),
        (
            "    http-check expect status 500-599\n",
            "Health check for server be/s1 failed, reason: Layer7 wrong status, code: 200",
            true,
        ),
    ];
    for (rules, want, down) in cases {
        let port = free_port();
        let extra = format!("    option httpchk GET /health\n{rules}");
        let s = Sluice::start(&one_server(port, &extra, &b, ""));
        let line = s.wait_log_line(|l| l.contains(want), WAIT);
        assert!(line.contains(want), "{rules}: {line}");
        let status = http_get(port, "/x").status;
        assert_eq!(status, if down { 503 } else { 200 }, "{rules}");
    }
}

#[test]
fn disable_on_404_drains_and_recovers() {
    let not_found = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nf = not_found.clone();
    let a = HttpBackend::with_handler("a", move |r| {
        if r.target == "/health" && nf.load(std::sync::atomic::Ordering::SeqCst) {
            Reply::status(404, "a", "gone")
        } else {
            Reply::named("a")
        }
    });
    let b = HttpBackend::start("b");
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    option httpchk GET /health\n    http-check disable-on-404\n    http-check send-state\n    server a {} check inter 100ms weight 3\n    server b {} check inter 100ms\n",
        admin_defaults(&sock),
        a.hostport(),
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    // send-state: the server's state travels in every check request.
    wait_until("a check request to a", WAIT, || {
        a.requests().iter().any(|r| r.target == "/health")
    });
    let req = a
        .requests()
        .into_iter()
        .find(|r| r.target == "/health")
        .unwrap();
    let state = req
        .header("x-haproxy-server-state")
        .unwrap_or("")
        .to_string();
    assert!(
        state.starts_with("UP")
            && state.contains(&format!("address=127.0.0.1; port={}; name=be/a;", a.port()))
            && state.contains("weight=3/4"),
        "{state}"
    );
    not_found.store(true, std::sync::atomic::Ordering::SeqCst);
    let line = s.wait_log_line(|l| l.contains("Server be/a is stopping"), WAIT);
    assert!(
        line.contains("reason: Layer7 check conditionally passed, code: 404"),
        "{line}"
    );
    assert_eq!(stat_col(&sock, "a", "status"), "NOLB");
    assert_eq!(stat_col(&sock, "a", "weight"), "0");
    assert_eq!(stat_col(&sock, "a", "check_status"), "L7OKC");
    for i in 0..6 {
        assert_eq!(
            http_get(port, &format!("/n{i}")).header("x-server"),
            Some("b")
        );
    }
    // Back to 200: full weight and traffic again.
    not_found.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_until("a back to UP", WAIT, || {
        stat_col(&sock, "a", "status") == "UP"
    });
    assert_eq!(stat_col(&sock, "a", "weight"), "3");
    let seen_a = (0..8).any(|i| http_get(port, &format!("/u{i}")).header("x-server") == Some("a"));
    assert!(seen_a);
}

/// A Redis-like TCP server: answers `+PONG` to a line containing `PING` (mode 0), `-ERR`
/// (mode 1), closes at once (mode 2) or never answers (mode 3). Records what it received.
struct PingServer {
    tcp: TcpBackend,
    mode: std::sync::Arc<std::sync::atomic::AtomicU8>,
    got: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl PingServer {
    fn start() -> PingServer {
        use std::io::Write;
        let mode = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (m, g) = (mode.clone(), got.clone());
        let tcp = TcpBackend::with_handler(move |mut s, _| {
            let mode = m.load(std::sync::atomic::Ordering::SeqCst);
            if mode == 2 {
                return;
            }
            let mut buf = Vec::new();
            let mut chunk = [0u8; 256];
            while !buf.windows(4).any(|w| w == b"PING") {
                match read_retrying(&mut s, &mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            g.lock().unwrap().push(buf);
            match mode {
                0 => {
                    let _ = s.write_all(b"+PONG\r\n");
                }
                1 => {
                    let _ = s.write_all(b"-ERR unknown\r\n");
                }
                _ => {
                    let _ = read_retrying(&mut s, &mut chunk);
                }
            }
        });
        PingServer { tcp, mode, got }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, std::sync::atomic::Ordering::SeqCst);
    }
}

fn tcp_cfg(port: u16, rules: &str, srv: &str, srv_opts: &str) -> String {
    format!(
        "global\n    nbthread 1\n    log stdout format raw local0\ndefaults\n    mode tcp\n    log global\n    timeout connect 1s\n    timeout client 10s\n    timeout server 10s\n    timeout check 300ms\nlisten li\n    bind 127.0.0.1:{port}\n    option log-health-checks\n    option tcp-check\n{rules}    server s1 {srv} check inter 100ms rise 1 fall 1 {srv_opts}\n"
    )
}

#[test]
fn tcp_check_sequences_and_their_failure_texts() {
    let ping = PingServer::start();
    let addr = ping.tcp.hostport();
    let rules = "    tcp-check send PING\\r\\n\n    tcp-check comment pong-step\n    tcp-check expect string +PONG\n";
    let port = free_port();
    let s = Sluice::start(&tcp_cfg(port, rules, &addr, ""));
    let line = s.wait_log_line(
        |l| l.contains("Health check for server li/s1 succeeded"),
        WAIT,
    );
    assert!(
        line.contains("reason: Layer7 check passed, code: 0, info: \"(tcp-check)\""),
        "{line}"
    );
    assert!(ping.got.lock().unwrap().iter().any(|g| g == b"PING\r\n"));
    // Wrong answer, with the comment of the failing step.
    ping.set(1);
    let failed = |l: &str| l.contains("Health check for server li/s1 failed");
    let line = s.wait_log_line(failed, WAIT);
    assert!(
        line.contains(
            "reason: Layer7 invalid response, info: \"TCPCHK did not match content '+PONG' at step 3 comment: 'pong-step'\""
        ),
        "{line}"
    );
    ping.set(0);
    s.wait_log_line(|l| l.contains("Server li/s1 is UP"), WAIT);
    // Closed without a byte.
    ping.set(2);
    let line = s.wait_log_lines(2, failed, WAIT)[1].clone();
    assert!(
        line.contains("info: \"TCPCHK got an empty response at step 3 comment: 'pong-step'\""),
        "{line}"
    );
    ping.set(0);
    s.wait_log_lines(2, |l| l.contains("Server li/s1 is UP"), WAIT);
    // Never answers: a timeout at the expect step (HAProxy's leading space included).
    ping.set(3);
    let line = s.wait_log_lines(3, failed, WAIT)[2].clone();
    assert!(
        line.contains(
            "reason: Layer7 timeout, info: \" at step 3 of tcp-check (expect string '+PONG') comment: 'pong-step'\""
        ),
        "{line}"
    );
}

#[test]
fn tcp_check_binary_negation_connect_options() {
    let ping = PingServer::start();
    let addr = ping.tcp.hostport();
    let other = ping.tcp.addr.port();
    let dead = closed_port();
    let cases = [
        // send-binary + expect binary.
        (
            "    tcp-check send-binary 50494e470d0a\n    tcp-check expect binary 2b504f4e47\n",
            addr.clone(),
            "Health check for server li/s1 succeeded",
        ),
        // Negation and rstring with min-recv.
        (
            "    tcp-check send PING\\r\\n\n    tcp-check expect ! string -ERR\n    tcp-check expect min-recv 5 rstring ^.PONG\n    tcp-check expect string PONG min-recv 5 comment after-the-pattern\n",
            addr.clone(),
            "Health check for server li/s1 succeeded",
        ),
        // A connect rule to another port than the server's, with a PROXY header.
        (
            &*format!(
                "    tcp-check connect port {other} send-proxy\n    tcp-check send PING\\r\\n\n    tcp-check expect string PONG\n"
            ),
            format!("127.0.0.1:{dead}"),
            "Health check for server li/s1 succeeded",
        ),
        // The implicit first connect fails.
        (
            "    tcp-check send PING\\r\\n\n",
            format!("127.0.0.1:{dead}"),
            "Health check for server li/s1 failed, reason: Layer4 connection problem, info: \"Connection refused at initial connection step of tcp-check\"",
        ),
        // An explicit connect fails.
        (
            &*format!("    tcp-check connect port {dead}\n"),
            addr.clone(),
            &*format!(
                "Health check for server li/s1 failed, reason: Layer4 connection problem, info: \"Connection refused at step 1 of tcp-check (connect port {dead})\""
            ),
        ),
        // Matched unwanted content.
        (
            "    tcp-check send PING\\r\\n\n    tcp-check expect ! string PONG\n",
            addr.clone(),
            "info: \"TCPCHK matched unwanted content 'PONG' at step 3\"",
        ),
    ];
    for (rules, server, want) in cases {
        let port = free_port();
        let s = Sluice::start(&tcp_cfg(port, rules, &server, ""));
        let line = s.wait_log_line(|l| l.contains(want), WAIT);
        assert!(line.contains(want), "{rules}: {line}");
    }
    assert!(
        ping.got
            .lock()
            .unwrap()
            .iter()
            .any(|g| g.starts_with(b"PROXY UNKNOWN\r\nPING")),
        "the PROXY header precedes the check's data"
    );
}

/// An agent: answers every connection with the current reply line and closes; records what
/// the check sent first.
struct Agent {
    tcp: TcpBackend,
    reply: std::sync::Arc<std::sync::Mutex<String>>,
    got: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Agent {
    fn start(first: &str) -> Agent {
        use std::io::Write;
        let reply = std::sync::Arc::new(std::sync::Mutex::new(first.to_string()));
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (r, g) = (reply.clone(), got.clone());
        let tcp = TcpBackend::with_handler(move |mut s, _| {
            s.set_read_timeout(Some(std::time::Duration::from_millis(50)))
                .unwrap();
            let mut b = [0u8; 64];
            if let Ok(n) = read_retrying(&mut s, &mut b) {
                *g.lock().unwrap() = b[..n].to_vec();
            }
            let line = r.lock().unwrap().clone();
            let _ = s.write_all(line.as_bytes());
        });
        Agent { tcp, reply, got }
    }

    fn say(&self, line: &str) {
        *self.reply.lock().unwrap() = line.to_string();
    }
}

#[test]
fn agent_replies_change_weight_state_and_maxconn() {
    let a = HttpBackend::start("a");
    let b = HttpBackend::start("b");
    let agent = Agent::start("up 50%\n");
    let dead = closed_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server a {} check inter 100ms weight 10 agent-check agent-port {} agent-inter 100ms agent-send \"hello\\n\"\n    server b {} check inter 100ms\n    server c {} agent-check agent-port {dead} agent-inter 100ms\n",
        admin_defaults(&sock),
        a.hostport(),
        agent.tcp.addr.port(),
        b.hostport(),
        b.hostport(),
    );
    let s = Sluice::start(&cfg);
    let col = |srv: &str, c: &str| stat_col(&sock, srv, c);
    wait_until("agent weight 50%", WAIT, || col("a", "weight") == "5");
    assert_eq!(col("a", "agent_status"), "L7OK");
    assert_eq!(*agent.got.lock().unwrap(), b"hello\n");
    // An unreachable agent changes nothing.
    wait_until("agent of c unreachable", WAIT, || {
        col("c", "agent_status") == "L4CON"
    });
    assert_eq!(col("c", "status"), "no check");
    agent.say("maxconn:7 drain\n");
    wait_until("agent drain", WAIT, || col("a", "status") == "DRAIN");
    assert_eq!(col("a", "slim"), "7");
    assert_eq!(col("a", "weight"), "0");
    for i in 0..6 {
        assert_ne!(
            http_get(port, &format!("/d{i}")).header("x-server"),
            Some("a")
        );
    }
    agent.say("ready,up\n");
    wait_until("agent ready", WAIT, || col("a", "status") == "UP");
    assert_eq!(col("a", "weight"), "5");
    agent.say("down #maintenance window\n");
    let line = s.wait_log_line(|l| l.contains("Server be/a is DOWN"), WAIT);
    assert!(
        line.contains(
            "reason: Layer7 wrong status, code: 0, info: \"via agent : down (maintenance window)\""
        ),
        "{line}"
    );
    assert_eq!(col("a", "status"), "DOWN");
    assert_eq!(col("a", "agent_status"), "L7STS");
    for i in 0..6 {
        assert_ne!(
            http_get(port, &format!("/x{i}")).header("x-server"),
            Some("a")
        );
    }
    agent.say("up 100%\n");
    s.wait_log_line(|l| l.contains("Server be/a is UP"), WAIT);
    wait_until("full weight", WAIT, || col("a", "weight") == "10");
    agent.say("maint\n");
    wait_until("agent maint", WAIT, || col("a", "status") == "MAINT");
}

/// The `show servers state be` fields of server `srv`.
fn server_state_fields(sock: &std::path::Path, srv: &str) -> Vec<String> {
    stats_cli(sock, "show servers state be")
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.len() > 24 && f[3] == srv)
        .unwrap_or_else(|| panic!("no state line for {srv}"))
}

/// The agent and the health checks are separate sources over the CLI: a server is UP only
/// when both allow it. `set server ... health|agent`, `enable|disable health|agent`, and
/// the run-time `check-addr`, `check-port`, `agent-addr`, `agent-port`, `agent-send`.
#[test]
fn cli_agent_and_health_are_separate_sources() {
    let a = HttpBackend::start("a");
    let b = HttpBackend::start("b");
    let agent = Agent::start("down #first\n");
    let agent2 = Agent::start("down #second agent\n");
    let dead = closed_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server a {} check inter 100ms rise 1 fall 1 agent-check agent-port {} agent-inter 100ms\n    server b {} check inter 100ms\n",
        admin_defaults(&sock),
        a.hostport(),
        agent.tcp.addr.port(),
        b.hostport(),
    );
    let s = Sluice::start(&cfg);
    let col = |srv: &str, c: &str| stat_col(&sock, srv, c);
    let cli = |cmd: &str| stats_cli(&sock, cmd);
    // The agent holds the server down while its checks pass.
    wait_until("down via the agent", WAIT, || {
        col("a", "agent_status") == "L7STS" && col("a", "check_status") == "L4OK"
    });
    assert_eq!(col("a", "status"), "DOWN");
    // Forcing the checks' health up does not override the agent.
    assert_eq!(cli("set server be/a health up"), "\n");
    assert_eq!(col("a", "status"), "DOWN");
    assert_eq!(col("a", "check_health"), "1");
    // Without the agent, the checks alone decide: UP at once.
    assert_eq!(cli("disable agent be/a"), "\n");
    assert_eq!(col("a", "status"), "UP");
    s.wait_log_line(|l| l.contains("Server be/a is UP, changed from CLI."), WAIT);
    assert_eq!(
        server_state_fields(&sock, "a")[14],
        "18",
        "agent configured, disabled"
    );
    assert_eq!(
        cli("set server be/a agent down"),
        "agent checks are not enabled on this server.\n\n"
    );
    // Health forced while its checks are disabled: the forced state holds.
    assert_eq!(cli("disable health be/a"), "\n");
    assert_eq!(cli("set server be/a health down"), "\n");
    assert_eq!(col("a", "status"), "DOWN");
    assert_eq!(cli("set server be/a health stopping"), "\n");
    assert_eq!(col("a", "status"), "NOLB");
    assert_eq!(cli("set server be/a health up"), "\n");
    assert_eq!(col("a", "status"), "UP");
    assert_eq!(cli("enable health be/a"), "\n");
    // The agent again: its next reply takes the server down; `agent up` is overridden by it
    // only at its next check, so it is told `up` first.
    assert_eq!(cli("enable agent be/a"), "\n");
    assert_eq!(server_state_fields(&sock, "a")[14], "22", "agent enabled");
    wait_until("down via the agent again", WAIT, || {
        col("a", "status") == "DOWN"
    });
    agent.say("up\n");
    wait_until("up via the agent", WAIT, || col("a", "status") == "UP");
    assert_eq!(cli("set server be/a agent down"), "\n");
    s.wait_log_line(
        |l| l.contains("Server be/a is DOWN, changed from CLI."),
        WAIT,
    );
    // The agent's address, port and send string change for its next checks.
    assert_eq!(
        cli(&format!(
            "set server be/a agent-port {}",
            agent2.tcp.addr.port()
        )),
        "agent port updated.\n\n"
    );
    assert_eq!(cli("set server be/a agent-send hi"), "\n");
    wait_until("the second agent answers", WAIT, || {
        col("a", "agent_desc").contains("second agent")
    });
    wait_until("sent the new string", WAIT, || {
        *agent2.got.lock().unwrap() == b"hi"
    });
    assert_eq!(col("a", "status"), "DOWN");
    assert_eq!(
        cli(&format!(
            "set server be/a agent-addr 127.0.0.1 port {}",
            agent.tcp.addr.port()
        )),
        "agent addr updated.\n\n"
    );
    wait_until("the first agent again", WAIT, || col("a", "status") == "UP");
    let st = server_state_fields(&sock, "a");
    assert_eq!(st[23], "127.0.0.1");
    assert_eq!(st[24], agent.tcp.addr.port().to_string());
    // The check's port and address.
    assert_eq!(
        cli(&format!("set server be/a check-port {dead}")),
        "health check port updated.\n\n"
    );
    wait_until("checks go to the dead port", WAIT, || {
        col("a", "check_status") == "L4CON" && col("a", "status") == "DOWN"
    });
    assert_eq!(server_state_fields(&sock, "a")[21], dead.to_string());
    assert_eq!(
        cli(&format!(
            "set server be/a check-addr 127.0.0.1 port {}",
            a.port()
        )),
        "health check addr updated.\n\n"
    );
    wait_until("checks pass again", WAIT, || col("a", "status") == "UP");
    assert_eq!(server_state_fields(&sock, "a")[22], "127.0.0.1");
    // Errors.
    for (cmd, want) in [
        (
            "set server be/b agent up",
            "agent checks are not enabled on this server.\n",
        ),
        (
            "enable agent be/b",
            "Agent was not configured on this server, cannot enable.\n",
        ),
        (
            "disable agent be/b",
            "Agent was not configured on this server, cannot disable.\n",
        ),
        (
            "set server be/a agent sideways",
            "'set server <srv> agent' expects 'up' or 'down'.\n",
        ),
        (
            "set server be/a check-port x",
            "'set server <srv> check-port' expects an integer as argument.\n",
        ),
        (
            "set server be/b agent-addr 127.0.0.1",
            "agent checks are not enabled on this server.\n",
        ),
        (
            "set server be/a agent-addr nowhere",
            "incorrect addr address given for agent.\n",
        ),
        ("disable agent be/zz", "No such server.\n"),
    ] {
        assert_eq!(cli(cmd), format!("{want}\n"), "{cmd}");
    }
}

/// Config for observe tests: server `s1` whose traffic goes to `srv` but whose checks go to
/// port `chk` on 127.0.0.1.
fn observe_cfg(port: u16, srv: &str, chk: u16, opts: &str, extra: &str) -> String {
    format!(
        "{CHECK_DEFAULTS}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    retries 0\n    option log-health-checks\n{extra}    server s1 {srv} check port {chk} {opts}\n"
    )
}

#[test]
fn observe_layer4_mark_down_and_sudden_death() {
    let live = TcpBackend::echo();
    let chk = live.addr.port();
    let dead = closed_port();
    // mark-down: two failed connects take the server down at once.
    let port = free_port();
    let s = Sluice::start(&observe_cfg(
        port,
        &format!("127.0.0.1:{dead}"),
        chk,
        "inter 100ms rise 1 fall 3 observe layer4 error-limit 2 on-error mark-down",
        "",
    ));
    s.wait_log_line(
        |l| l.contains("Health check for server be/s1 succeeded"),
        WAIT,
    );
    assert_eq!(http_get(port, "/1").status, 502);
    assert_eq!(http_get(port, "/2").status, 502);
    let line = s.wait_log_line(|l| l.contains("Health check for server be/s1 failed"), WAIT);
    assert!(
        line.contains(
            "reason: Health analyze, info: \"Detected 2 consecutive errors, last one was: L4 unsuccessful connection\", status: 0/1 DOWN."
        ),
        "{line}"
    );
    // The checks themselves pass: it comes back.
    s.wait_log_line(|l| l.contains("Server be/s1 is UP"), WAIT);
    drop(s);
    // sudden-death: one error leaves the server one failure away from DOWN.
    let port = free_port();
    let s = Sluice::start(&observe_cfg(
        port,
        &format!("127.0.0.1:{dead}"),
        chk,
        "inter 100ms rise 1 fall 3 observe layer4 error-limit 1 on-error sudden-death",
        "",
    ));
    s.wait_log_line(
        |l| l.contains("Health check for server be/s1 succeeded"),
        WAIT,
    );
    assert_eq!(http_get(port, "/1").status, 502);
    let line = s.wait_log_line(
        |l| l.contains("Health check for server be/s1 failed, reason: Health analyze"),
        WAIT,
    );
    assert!(line.ends_with("status: 1/3 UP."), "{line}");
}

#[test]
fn on_error_fastinter_works_at_full_health() {
    // HAProxy 2.7 fix: with `inter 10s`, a traffic error brings the next check within
    // `fastinter` even though the server's health is at its maximum.
    let live = TcpBackend::echo();
    let dead = closed_port();
    let port = free_port();
    let s = Sluice::start(&observe_cfg(
        port,
        &format!("127.0.0.1:{dead}"),
        live.addr.port(),
        "inter 10s fastinter 100ms rise 1 fall 3 observe layer4 error-limit 1 on-error fastinter",
        // A check that sends something, so that the server accepts it and counts it (a bare
        // layer-4 check never reaches its accept()).
        "    option tcp-check\n    tcp-check send x\n",
    ));
    s.wait_log_line(
        |l| l.contains("Health check for server be/s1 succeeded"),
        WAIT,
    );
    wait_until("first check connection", WAIT, || live.conns() >= 1);
    let before = live.conns();
    assert_eq!(http_get(port, "/1").status, 502);
    wait_until(
        "a fastinter check after the error",
        Duration::from_secs(3),
        || live.conns() > before,
    );
}

#[test]
fn observe_layer7_counts_server_errors() {
    let b = HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/fail" => Reply::status(500, "s1", "boom"),
        "/nope" => Reply::status(501, "s1", "not implemented"),
        _ => Reply::named("s1"),
    });
    let port = free_port();
    let s = Sluice::start(&observe_cfg(
        port,
        &b.hostport(),
        b.port(),
        "inter 100ms rise 1 fall 2 observe layer7 error-limit 3 on-error mark-down",
        "    option httpchk GET /health\n",
    ));
    s.wait_log_line(
        |l| l.contains("Health check for server be/s1 succeeded"),
        WAIT,
    );
    // 501 is the server's choice, not an error; a success resets the count.
    for p in ["/fail", "/fail", "/nope", "/ok", "/fail", "/fail"] {
        http_get(port, p);
    }
    assert!(!s.stdout.text().contains("is DOWN"), "{}", s.stdout.text());
    http_get(port, "/fail");
    let line = s.wait_log_line(|l| l.contains("Health check for server be/s1 failed"), WAIT);
    assert!(
        line.contains("info: \"Detected 3 consecutive errors, last one was: Wrong http response\""),
        "{line}"
    );
}

#[test]
fn marked_down_shuts_sessions_down() {
    use std::io::{Read, Write};
    let echo = TcpBackend::echo();
    let chk = TcpListener::bind(lo(0)).unwrap();
    let chk_port = chk.local_addr().unwrap().port();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 2\n    log stdout format raw local0\ndefaults\n    mode tcp\n    log global\n    timeout connect 1s\n    timeout client 10s\n    timeout server 10s\nlisten li\n    bind 127.0.0.1:{port}\n    server s1 {} check port {chk_port} inter 100ms rise 1 fall 1 on-marked-down shutdown-sessions\n",
        echo.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hi");
    drop(chk);
    s.wait_log_line(|l| l.contains("Server li/s1 is DOWN"), WAIT);
    let mut rest = [0u8; 8];
    let n = read_retrying(&mut c, &mut rest).unwrap_or(0);
    assert_eq!(n, 0, "the session was shut down with its server");
}

#[test]
fn slowstart_ramps_weight_after_coming_back() {
    let a = HttpBackend::start("a");
    let b = HttpBackend::start("b");
    let chk = TcpListener::bind(lo(0)).unwrap();
    let chk_port = chk.local_addr().unwrap().port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server a {} check port {chk_port} inter 100ms rise 1 fall 1 weight 100 maxconn 50 slowstart 2s\n    server b {} check inter 100ms\n",
        admin_defaults(&sock),
        a.hostport(),
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let col = |c: &str| stat_col(&sock, "a", c);
    // No slowstart at start-up.
    assert_eq!(col("weight"), "100");
    assert_eq!(col("throttle"), "");
    drop(chk);
    s.wait_log_line(|l| l.contains("Server be/a is DOWN"), WAIT);
    let _back = TcpListener::bind(lo(chk_port)).expect("rebind the check port");
    s.wait_log_line(|l| l.contains("Server be/a is UP"), WAIT);
    // Starts near 1/16 of its weight, with its maxconn throttled, and ramps up to all of it.
    let w: u32 = col("weight").parse().unwrap();
    assert!((7..100).contains(&w), "weight right after coming back: {w}");
    assert!(!col("throttle").is_empty());
    let mut seen = vec![w];
    wait_until("full weight after slowstart", WAIT, || {
        let w: u32 = col("weight").parse().unwrap();
        if seen.last() != Some(&w) {
            seen.push(w);
        }
        w == 100
    });
    assert!(seen.len() >= 3, "the weight grew in steps: {seen:?}");
    assert!(seen.windows(2).all(|p| p[0] < p[1]), "{seen:?}");
    assert_eq!(col("throttle"), "");
}

#[test]
fn track_follows_the_tracked_server() {
    let a = HttpBackend::start("a");
    let t = HttpBackend::start("t");
    let o = HttpBackend::start("o");
    let chk = TcpListener::bind(lo(0)).unwrap();
    let chk_port = chk.local_addr().unwrap().port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server a {} check port {chk_port} inter 100ms rise 1 fall 1\n    server t {} track a\n    server o {} check inter 100ms\nbackend be2\n    server u {} track be/t\n",
        admin_defaults(&sock),
        a.hostport(),
        t.hostport(),
        o.hostport(),
        t.hostport()
    );
    let s = Sluice::start(&cfg);
    assert_eq!(stat_col(&sock, "t", "tracked"), "be/a");
    assert_eq!(stat_col(&sock, "t", "status"), "UP");
    drop(chk);
    let line = s.wait_log_line(|l| l.contains("Server be/t is DOWN"), WAIT);
    assert!(
        line.contains("Server be/t is DOWN via be/a. 1 active and 0 backup servers left."),
        "{line}"
    );
    s.wait_log_line(|l| l.contains("Server be2/u is DOWN via be/t."), WAIT);
    assert_eq!(stat_col(&sock, "t", "status"), "DOWN");
    assert_eq!(stat_column(&sock, "be2", "u", "status"), "DOWN");
    for i in 0..6 {
        assert_eq!(
            http_get(port, &format!("/t{i}")).header("x-server"),
            Some("o")
        );
    }
    let _back = TcpListener::bind(lo(chk_port)).expect("rebind the check port");
    s.wait_log_line(|l| l.contains("Server be/t is UP via be/a."), WAIT);
    s.wait_log_line(|l| l.contains("Server be2/u is UP via be/t."), WAIT);
    assert_eq!(stat_col(&sock, "t", "status"), "UP");
    // A state forced over the CLI is followed too.
    assert_eq!(stats_cli(&sock, "disable health be/a"), "\n");
    assert_eq!(stats_cli(&sock, "set server be/a health down"), "\n");
    assert_eq!(stat_col(&sock, "t", "status"), "DOWN");
    assert_eq!(stat_column(&sock, "be2", "u", "status"), "DOWN");
}

#[test]
fn max_checks_per_thread_queues_checks_in_order() {
    // Three servers whose checks hang until `timeout check` (200ms): with a limit of 1 running
    // check per thread, each check starts only once the previous one gave up, in order.
    let starts = std::sync::Arc::new(std::sync::Mutex::new(
        Vec::<(std::time::Instant, u16)>::new(),
    ));
    let hang = || {
        let st = starts.clone();
        let t = std::sync::Arc::new(std::sync::OnceLock::<u16>::new());
        let t2 = t.clone();
        let b = TcpBackend::with_handler(move |mut s, _| {
            st.lock()
                .unwrap()
                .push((std::time::Instant::now(), *t2.get().unwrap_or(&0)));
            let mut buf = [0u8; 256];
            while matches!(read_retrying(&mut s, &mut buf), Ok(n) if n > 0) {}
        });
        let _ = t.set(b.addr.port());
        b
    };
    let (a, b, c) = (hang(), hang(), hang());
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n    tune.max-checks-per-thread 1\n    spread-checks 5\n    log stdout format raw local0\ndefaults\n    mode http\n    log global\n    timeout connect 1s\n    timeout client 10s\n    timeout server 10s\n    timeout check 200ms\nfrontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    option httpchk GET /health\n    default-server check inter 100ms rise 1 fall 1\n    server a {}\n    server b {}\n    server c {}\n",
        a.hostport(),
        b.hostport(),
        c.hostport()
    );
    let s = Sluice::start(&cfg);
    for srv in ["a", "b", "c"] {
        let line = s.wait_log_line(|l| l.contains(&format!("Server be/{srv} is DOWN")), WAIT);
        assert!(line.contains("reason: Layer7 timeout"), "{line}");
    }
    let st = starts.lock().unwrap().clone();
    assert!(st.len() >= 3, "{st:?}");
    // Declaration order, then one at a time: each start waits for the previous timeout.
    let order: Vec<u16> = st.iter().take(3).map(|(_, p)| *p).collect();
    assert_eq!(order, vec![a.addr.port(), b.addr.port(), c.addr.port()]);
    for w in st.windows(2).take(2) {
        let gap = w[1].0 - w[0].0;
        assert!(
            gap >= Duration::from_millis(150),
            "checks overlapped: {gap:?}"
        );
    }
}

#[test]
fn marked_up_shuts_backup_sessions_down() {
    use std::io::{Read, Write};
    let echo = TcpBackend::echo();
    let chk_port = closed_port();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 2\n    log stdout format raw local0\ndefaults\n    mode tcp\n    log global\n    timeout connect 1s\n    timeout client 10s\n    timeout server 10s\nlisten li\n    bind 127.0.0.1:{port}\n    server a {} check port {chk_port} inter 100ms rise 1 fall 1 on-marked-up shutdown-backup-sessions\n    server bk {} backup\n",
        echo.hostport(),
        echo.hostport()
    );
    let s = Sluice::start(&cfg);
    s.wait_log_line(|l| l.contains("Server li/a is DOWN"), WAIT);
    // Served by the backup.
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    c.read_exact(&mut b).unwrap();
    let _chk = TcpListener::bind(lo(chk_port)).expect("bind the check port");
    s.wait_log_line(|l| l.contains("Server li/a is UP"), WAIT);
    let mut rest = [0u8; 8];
    assert_eq!(
        read_retrying(&mut c, &mut rest).unwrap_or(0),
        0,
        "the backup's session was shut down"
    );
}

#[test]
fn checks_never_use_data_connections() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{CHECK_DEFAULTS}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    http-reuse always\n    option httpchk GET /health\n    server s1 {} check inter 100ms\n",
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    for i in 0..5 {
        assert_eq!(c.get(&format!("/r{i}")).status, 200);
    }
    wait_until("three checks", WAIT, || {
        b.requests()
            .iter()
            .filter(|r| r.target == "/health")
            .count()
            >= 3
    });
    assert_eq!(c.get("/last").status, 200);
    let reqs = b.requests();
    let checks: Vec<usize> = reqs
        .iter()
        .filter(|r| r.target == "/health")
        .map(|r| r.conn_id)
        .collect();
    let data: Vec<usize> = reqs
        .iter()
        .filter(|r| r.target != "/health")
        .map(|r| r.conn_id)
        .collect();
    assert!(
        checks.iter().all(|c| !data.contains(c)),
        "checks {checks:?} data {data:?}"
    );
    let mut uniq = checks.clone();
    uniq.dedup();
    assert_eq!(
        uniq.len(),
        checks.len(),
        "one fresh connection per check: {checks:?}"
    );
    assert!(
        data.windows(2).all(|w| w[0] == w[1]),
        "traffic reused its pooled connection: {data:?}"
    );
}

/// `check-reuse-pool`: checks run on an idle pooled connection that carried traffic (and give
/// it back, so later checks and requests keep using it), asking to keep it open; without it
/// (`checks_never_use_data_connections`) they never do.
#[test]
fn check_reuse_pool_runs_checks_on_pooled_data_connections() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{CHECK_DEFAULTS}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    http-reuse always\n    option httpchk GET /health\n    server s1 {} check inter 100ms check-reuse-pool\n",
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/first").status, 200);
    let data_conn = b
        .requests()
        .iter()
        .find(|r| r.target == "/first")
        .map(|r| r.conn_id)
        .unwrap();
    // The connection waits in the pool between requests: a check takes it.
    wait_until("checks on the data connection", WAIT, || {
        health_checks_on(&b, data_conn) >= 3
    });
    // Given back each time: traffic still uses it.
    assert_eq!(c.get("/again").status, 200);
    let reqs = b.requests();
    let again = reqs.iter().find(|r| r.target == "/again").unwrap();
    assert_eq!(again.conn_id, data_conn, "traffic after checks: {reqs:?}");
    let check = reqs
        .iter()
        .find(|r| r.target == "/health" && r.conn_id == data_conn)
        .unwrap();
    // HTTP/1.0 (httpchk's default version) on a pooled connection asks to keep it open.
    assert_eq!(check.header("connection"), Some("keep-alive"), "{check:?}");
    // Checks that found the pool empty (before the first request) used their own connection.
    assert!(reqs.iter().all(|r| r.target != "/health"
        || r.conn_id == data_conn
        || r.header("connection") == Some("close")));
}

/// `check-pool-conn-name`: with `check-reuse-pool`, checks take only the pooled connections
/// whose `pool-conn-name` equals the check's name.
#[test]
fn check_pool_conn_name_selects_the_pooled_connections_checks_use() {
    // Each request held until its Host's gate opens.
    let (gate_a, gate_b) = (Gate::new(), Gate::new());
    let b = {
        let (ga, gb) = (gate_a.clone(), gate_b.clone());
        HttpBackend::with_handler("s1", move |r| {
            if r.target == "/slow/a.example" {
                ga.wait();
            } else if r.target == "/slow/b.example" {
                gb.wait();
            }
            Reply::echo_target("s1", r)
        })
    };
    let port = free_port();
    let cfg = format!(
        "{CHECK_DEFAULTS}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    http-reuse always\n    option httpchk GET /health\n    server s1 {} check inter 100ms check-reuse-pool pool-conn-name req.hdr(host) check-pool-conn-name str(b.example)\n",
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    // Two requests held at once, one per Host: two server connections, pooled under those
    // names once answered.
    let get = |h: &'static str| {
        std::thread::spawn(move || {
            http_raw(
                port,
                format!("GET /slow/{h} HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n"),
            )
            .status
        })
    };
    let (client_a, client_b) = (get("a.example"), get("b.example"));
    let conn_of = |target: &str| {
        b.requests()
            .iter()
            .find(|r| r.target == target)
            .map(|r| r.conn_id)
    };
    wait_until("both requests at the server", WAIT, || {
        conn_of("/slow/a.example").is_some() && conn_of("/slow/b.example").is_some()
    });
    // b.example's connection is pooled first, a.example's last: a check that ignored the
    // name would take a.example's, the most recent.
    gate_b.open();
    assert_eq!(client_b.join().unwrap(), 200);
    gate_a.open();
    assert_eq!(client_a.join().unwrap(), 200);
    let (a, named_b) = (
        conn_of("/slow/a.example").unwrap(),
        conn_of("/slow/b.example").unwrap(),
    );
    wait_until("checks on the connection named b.example", WAIT, || {
        health_checks_on(&b, named_b) >= 3
    });
    let reqs = b.requests();
    assert!(
        reqs.iter().all(|r| r.target != "/health" || r.conn_id != a),
        "a check ran on the connection named a.example: {reqs:?}"
    );
}

/// The idle-close race under `check-reuse-pool`: the server closes the pooled connection as
/// the check sends on it. The check runs again on a fresh connection and passes: no failed
/// check is counted.
#[test]
fn check_reuse_pool_retries_a_closed_pooled_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    // The first data connection's id; a check arriving on it is answered with a close.
    let data = std::sync::Arc::new(AtomicUsize::new(usize::MAX));
    let d2 = data.clone();
    let b = HttpBackend::with_handler("s1", move |r| {
        if r.target == "/first" {
            d2.store(r.conn_id, SeqCst);
        }
        if r.target == "/health" && r.conn_id == d2.load(SeqCst) {
            return Reply::Close;
        }
        Reply::named("s1")
    });
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    http-reuse always\n    option httpchk GET /health\n    server s1 {} check inter 100ms check-reuse-pool\n",
        admin_defaults(&sock),
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/first").status, 200);
    let first = data.load(SeqCst);
    wait_until("a check met the closing pooled connection", WAIT, || {
        b.requests()
            .iter()
            .any(|r| r.target == "/health" && r.conn_id == first)
    });
    // ... and ran again on a fresh connection right away.
    wait_until("the check ran again", WAIT, || {
        let reqs = b.requests();
        let at = reqs
            .iter()
            .position(|r| r.target == "/health" && r.conn_id == first)
            .unwrap();
        reqs[at + 1..]
            .iter()
            .any(|r| r.target == "/health" && r.conn_id != first)
    });
    wait_until("the check passed", WAIT, || {
        stat_col(&sock, "s1", "check_status") == "L7OK"
    });
    assert_eq!(stat_col(&sock, "s1", "chkfail"), "0");
    assert_eq!(stat_col(&sock, "s1", "status"), "UP");
}

#[test]
fn downinter_and_fastinter_pace_the_checks() {
    // The checked service fails (closes at once) until `ok` is set, then answers "OK".
    let ok = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let times = std::sync::Arc::new(std::sync::Mutex::new(
        Vec::<(std::time::Instant, bool)>::new(),
    ));
    let (o, t) = (ok.clone(), times.clone());
    let srv = TcpBackend::with_handler(move |mut s, _| {
        use std::io::Write;
        let good = o.load(std::sync::atomic::Ordering::SeqCst);
        t.lock().unwrap().push((std::time::Instant::now(), good));
        if good {
            let _ = s.write_all(b"OK\n");
        }
    });
    let port = free_port();
    let rules = "    tcp-check expect string OK\n";
    let s = Sluice::start(&tcp_cfg(
        port,
        rules,
        &srv.hostport(),
        "inter 10s fastinter 200ms downinter 100ms rise 3 fall 2",
    ));
    // Down at the first failure, then checked every `downinter`, not every `inter`.
    s.wait_log_line(|l| l.contains("Server li/s1 is DOWN"), WAIT);
    wait_until("checks at downinter", WAIT, || {
        times.lock().unwrap().len() >= 5
    });
    // Coming back: `fastinter` between the checks that raise the health.
    ok.store(true, std::sync::atomic::Ordering::SeqCst);
    s.wait_log_line(|l| l.contains("Server li/s1 is UP"), WAIT);
    let up_at = std::time::Instant::now();
    let good: Vec<std::time::Instant> = times
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, g)| *g)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(good.len(), 3, "rise 3");
    for w in good.windows(2) {
        assert!(
            w[1] - w[0] >= Duration::from_millis(190),
            "{:?}",
            w[1] - w[0]
        );
    }
    // UP and healthy: back to `inter` (10s), so no check for a good while.
    std::thread::sleep(Duration::from_millis(800));
    let after = times
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t > up_at)
        .count();
    assert_eq!(after, 0, "no check within inter once UP");
}

/// `checks_cur` and `checks_migrated` of `show activity`: per thread.
fn check_activity(sock: &std::path::Path) -> (Vec<u64>, Vec<u64>) {
    let out = stats_cli(sock, "show activity");
    let per = |name: &str| -> Vec<u64> {
        let l = out
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {out}"));
        let inner = &l[l.find('[').unwrap() + 1..l.find(']').unwrap()];
        inner
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    (per("checks_cur"), per("checks_migrated"))
}

/// Starts sluice with `nbthread 2` and the given servers in backend `be`; returns it with its
/// stats socket.
fn two_threads(servers: &str) -> (Sluice, TempDir, std::path::PathBuf) {
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{}backend be\n{servers}",
        sock.display(),
        CHECK_DEFAULTS
            .trim_start_matches("global\n")
            .replace("    nbthread 1\n", "")
    );
    (Sluice::start(&cfg), dir, sock)
}

/// Waits until every checked server `c0..c{n-1}` has failed at least `k` checks (each check is
/// a wake-up of its task).
fn wait_checks(sock: &std::path::Path, n: usize, k: u64) {
    wait_until("every check ran a few times", WAIT, || {
        (0..n).all(|i| {
            stat_col(sock, &format!("c{i}"), "chkfail")
                .parse::<u64>()
                .unwrap_or(0)
                >= k
        })
    });
}

/// DESIGN §5: a waking check migrates to the other thread while that thread's check load is
/// under half of its own (even counting the check), once per wake-up and never back. Start-up
/// deals checked servers round-robin over threads, so servers with only an agent (which do
/// not count as check load) in between put all ten checks on the first thread: three move, 10/0 ->
/// 7/3, and stay there.
#[test]
fn checks_migrate_from_a_loaded_thread_and_stay() {
    let dead = closed_port();
    let mut servers = String::new();
    for i in 0..10 {
        servers.push_str(&format!(
            "    server c{i} 127.0.0.1:{dead} check inter 100ms\n    server a{i} 127.0.0.1:{dead} agent-check agent-port {dead} agent-inter 1s\n"
        ));
    }
    let (_s, _dir, sock) = two_threads(&servers);
    wait_until("three checks migrated", WAIT, || {
        check_activity(&sock).1.iter().sum::<u64>() == 3
    });
    // Later wake-ups move nothing more, and the migrated checks run on their new thread.
    wait_checks(&sock, 10, 5);
    let (cur, migrated) = check_activity(&sock);
    assert_eq!(cur, vec![7, 3], "check tasks per thread");
    assert_eq!(migrated, vec![3, 0], "migrations out of each thread");
}

/// Balanced threads (five checks each): no check ever migrates.
#[test]
fn checks_do_not_migrate_between_balanced_threads() {
    let dead = closed_port();
    let servers: String = (0..10)
        .map(|i| format!("    server c{i} 127.0.0.1:{dead} check inter 100ms\n"))
        .collect();
    let (_s, _dir, sock) = two_threads(&servers);
    wait_checks(&sock, 10, 5);
    let (cur, migrated) = check_activity(&sock);
    assert_eq!(cur, vec![5, 5]);
    assert_eq!(migrated, vec![0, 0]);
}

/// How many `/health` checks the backend got on its connection `conn`.
fn health_checks_on(b: &HttpBackend, conn: usize) -> usize {
    b.requests()
        .iter()
        .filter(|r| r.target == "/health" && r.conn_id == conn)
        .count()
}

/// The pre-2.2 `option httpchk` syntax, still common in the wild: headers after the version,
/// joined with `\r\n` (escapes of the config language), sent ahead of `http-check send`'s own;
/// the file loads with a warning pointing to `http-check send hdr`.
#[test]
fn httpchk_headers_written_after_the_version_are_sent() {
    let b = HttpBackend::start("s1");
    let cfg = format!(
        "{CHECK_DEFAULTS}backend be\n    option httpchk GET /health HTTP/1.1\\r\\nHost:\\ health.example\\r\\nX-Probe:\\ 1\n\
\x20   http-check send hdr X-Also yes\n    server s1 {} check inter 100ms\n",
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    assert!(
        s.stderr
            .wait(
                |l| l.contains("[WARNING]") && l.contains("'option httpchk': headers appended"),
                WAIT
            )
            .is_some()
    );
    wait_until("a check", WAIT, || {
        b.requests().iter().any(|r| r.target == "/health")
    });
    let reqs = b.requests();
    let r = reqs.iter().find(|r| r.target == "/health").unwrap();
    assert_eq!((r.method.as_str(), r.version.as_str()), ("GET", "HTTP/1.1"));
    let names: Vec<(&str, &str)> = r
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .filter(|(n, _)| !n.eq_ignore_ascii_case("connection"))
        .collect();
    assert_eq!(
        names,
        [
            ("Host", "health.example"),
            ("X-Probe", "1"),
            ("X-Also", "yes")
        ]
    );
}

/// How a [`Scripted`] server answers a burst of bytes (`None`: it does not).
type Script = fn(&[u8]) -> Option<Vec<u8>>;

/// A server that speaks a scripted protocol: `greeting` on connect, then `reply(request)` to
/// each burst of bytes received (`None`: no answer). Records everything it receives.
struct Scripted {
    tcp: TcpBackend,
    got: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Scripted {
    fn start(greeting: &[u8], reply: Script) -> Scripted {
        use std::io::Write;
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        let greeting = greeting.to_vec();
        let tcp = TcpBackend::with_handler(move |mut s, _| {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            if !greeting.is_empty() && s.write_all(&greeting).is_err() {
                return;
            }
            let mut chunk = [0u8; 512];
            while let Ok(n @ 1..) = read_retrying(&mut s, &mut chunk) {
                g.lock().unwrap().extend_from_slice(&chunk[..n]);
                if let Some(r) = reply(&chunk[..n])
                    && s.write_all(&r).is_err()
                {
                    return;
                }
            }
        });
        Scripted { tcp, got }
    }
}

/// `option redis-check|ssl-hello-chk|pgsql-check|mysql-check`: each sends its protocol's
/// opening and judges the answer, with HAProxy's statuses and info texts.
#[test]
fn protocol_check_options() {
    // MySQL's greeting: length 3 bytes LE, sequence 0, protocol 10, a version string, ...
    let mut greeting = vec![0x0a];
    greeting.extend_from_slice(b"5.7.0-fake\0");
    greeting.extend_from_slice(&[0; 20]);
    let mut my = (greeting.len() as u32).to_le_bytes()[..3].to_vec();
    my.push(0);
    my.extend_from_slice(&greeting);
    let ok_packet = |_: &[u8]| Some(vec![7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]);
    let cases: [(&str, &[u8], Script, &str); 9] = [
        (
            "option redis-check",
            b"",
            |r| {
                r.starts_with(b"*1\r\n$4\r\nPING\r\n")
                    .then(|| b"+PONG\r\n".to_vec())
            },
            "succeeded, reason: Layer7 check passed, code: 0, info: \"Redis server is ok\"",
        ),
        (
            "option redis-check",
            b"",
            // Not +PONG, and the connection stays open: the expect waits for more until the
            // check times out, as HAProxy's does (no min-recv).
            |_| Some(b"-NOAUTH Authentication required.\r\n".to_vec()),
            "failed, reason: Layer7 timeout",
        ),
        (
            "option ssl-hello-chk",
            b"",
            // A TLS alert (protocol_version) is still TLS.
            |r| (r[0] == 0x16).then(|| vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]),
            "succeeded, reason: Layer6 check passed",
        ),
        (
            "option ssl-hello-chk",
            b"",
            |_| Some(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
            "failed, reason: Layer6 invalid response",
        ),
        (
            "option pgsql-check user haproxy",
            b"",
            // AuthenticationOk.
            |_| Some(vec![b'R', 0, 0, 0, 8, 0, 0, 0, 0]),
            "succeeded, reason: Layer7 check passed, code: 0, info: \"PostgreSQL server is ok\"",
        ),
        (
            "option pgsql-check user haproxy",
            b"",
            |_| Some(b"EFATAL: no such role\0".to_vec()),
            "failed, reason: Layer7 invalid response",
        ),
        (
            "option mysql-check",
            &my,
            |_| None,
            // The info is the version the greeting announced, as HAProxy reports it.
            "succeeded, reason: Layer7 check passed, code: 0, info: \"5.7.0-fake\"",
        ),
        (
            "option mysql-check user haproxy",
            &my,
            ok_packet,
            // The info is the version the greeting announced, as HAProxy reports it.
            "succeeded, reason: Layer7 check passed, code: 0, info: \"5.7.0-fake\"",
        ),
        (
            "option mysql-check user nobody",
            &my,
            // ER_ACCESS_DENIED_ERROR (1045), SQL state 28000.
            |_| {
                let mut p = vec![0xff, 0x15, 0x04];
                p.extend_from_slice(b"#28000Access denied");
                let mut pkt = (p.len() as u32).to_le_bytes()[..3].to_vec();
                pkt.push(2);
                pkt.extend_from_slice(&p);
                Some(pkt)
            },
            "failed, reason: Layer7 wrong status, code: 1045, info: \"#28000Access denied\"",
        ),
    ];
    for (option, greet, reply, want) in cases {
        let srv = Scripted::start(greet, reply);
        let port = free_port();
        let rules = format!("    {option}\n");
        let s = Sluice::start(&tcp_cfg(port, &rules, &srv.tcp.hostport(), ""));
        let line = s.wait_log_line(|l| l.contains("li/s1") && l.contains(want), WAIT);
        assert!(line.contains(want), "{option}: {line}");
        let got = srv.got.lock().unwrap().clone();
        match option {
            "option pgsql-check user haproxy" => {
                // StartupMessage: length, protocol 3.0, user=haproxy.
                assert_eq!(&got[4..8], &[0, 3, 0, 0]);
                assert!(find(&got, b"user\0haproxy\0\0").is_some(), "{got:?}");
            }
            "option mysql-check user haproxy" => {
                assert_eq!(got[3], 1, "the login is packet 1");
                assert!(find(&got, b"haproxy\0").is_some(), "{got:?}");
                assert!(got.ends_with(&[1, 0, 0, 0, 1]), "then QUIT: {got:?}");
            }
            _ => {}
        }
    }
    // Arguments as HAProxy takes them.
    for (option, err) in [
        ("option pgsql-check", "expects 'user <username>'"),
        (
            "option mysql-check user a new-41",
            "expects [user <username>",
        ),
        ("option redis-check now", "unexpected"),
        ("no option ssl-hello-chk", "negation is not supported"),
    ] {
        let (code, e) = Sluice::check(&format!(
            "backend be\n    {option}\n    server s 127.0.0.1:1 check\n"
        ));
        assert_ne!(code, 0, "{option}");
        assert!(e.contains(":2: ") && e.contains(err), "{option}: {e}");
    }
}

/// `option external-check`: HAProxy's arguments and environment (and nothing else of
/// sluice's environment), exit 0 passes, another status fails with it as the code, a program
/// outliving `inter` is a timeout; the global permission and the command are required.
#[test]
fn external_checks_run_a_program_with_haproxys_arguments() {
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let srv_port = closed_port();
    // The script records what it got, then exits with the status written in `rc`.
    let rc = dir.join("rc");
    std::fs::write(&rc, "0").unwrap();
    let script = dir.write(
        "check.sh",
        format!(
            "#!/bin/sh\nenv > {d}/env.tmp && mv {d}/env.tmp {d}/env\necho \"$@\" > {d}/args\n\
             [ -f {d}/hang ] && sleep 5\nexit $(cat {d}/rc)\n",
            d = dir.path().display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = format!(
        "global\n    external-check\n    insecure-fork-wanted\n{}frontend fe\n    \
         bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    option external-check\n    \
         option log-health-checks\n    external-check command {}\n    \
         external-check path \"/usr/bin:/bin\"\n    \
         server s1 127.0.0.1:{srv_port} check inter 300ms rise 1 fall 1 id 7 maxconn 33\n",
        admin_defaults(&sock),
        script.display()
    );
    let s = Sluice::builder(&cfg).env("SLUICE_TEST_SECRET", "x").start();
    wait_until("a passed external check", WAIT, || {
        stat_col(&sock, "s1", "check_status") == "PROCOK"
    });
    assert_eq!(stat_col(&sock, "s1", "status"), "UP");
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    assert_eq!(
        args.trim(),
        format!("NOT_USED NOT_USED 127.0.0.1 {srv_port}")
    );
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    for want in [
        "HAPROXY_PROXY_NAME=be".to_string(),
        "HAPROXY_PROXY_ADDR=".to_string(),
        "HAPROXY_SERVER_ADDR=127.0.0.1".to_string(),
        format!("HAPROXY_SERVER_PORT={srv_port}"),
        "HAPROXY_SERVER_ID=7".to_string(),
        "HAPROXY_SERVER_MAXCONN=33".to_string(),
        "HAPROXY_SERVER_NAME=s1".to_string(),
        "HAPROXY_SERVER_PROTO=h1".to_string(),
        "HAPROXY_SERVER_SSL=0".to_string(),
        "PATH=/usr/bin:/bin".to_string(),
    ] {
        assert!(env.lines().any(|l| l == want), "{want} in:\n{env}");
    }
    assert!(
        !env.contains("SLUICE_TEST_SECRET"),
        "sluice's environment leaked:\n{env}"
    );
    // A failing status: DOWN, the status as the code, HAProxy's texts.
    std::fs::write(&rc, "3").unwrap();
    wait_until("a failed external check", WAIT, || {
        stat_col(&sock, "s1", "status") == "DOWN"
    });
    assert_eq!(stat_col(&sock, "s1", "check_status"), "PROCERR");
    assert_eq!(stat_col(&sock, "s1", "check_code"), "3");
    s.wait_log_line(
        |l| {
            l.contains(
                "Health check for server be/s1 failed, reason: External check error, code: 3",
            )
        },
        WAIT,
    );
    // A program still running after `inter`: a timeout.
    std::fs::write(dir.join("hang"), "").unwrap();
    std::fs::write(&rc, "0").unwrap();
    wait_until("a timed-out external check", WAIT, || {
        stat_col(&sock, "s1", "check_status") == "PROCTOUT"
    });
    // Without the global permission, or without a command: HAProxy's errors.
    for (global, cmd, want) in [
        (
            "",
            "    external-check command /bin/true\n",
            "unable to find required 'global.external-check'.",
        ),
        (
            "    external-check\n",
            "",
            "unable to find required 'external-check command'.",
        ),
    ] {
        let (code, out) = Sluice::check(&format!(
            "global\n{global}{}backend be\n    option external-check\n{cmd}    server s1 127.0.0.1:1 check\n",
            DEFAULTS_HTTP
        ));
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!("Proxy 'be' : 'option external-check' {want}")),
            "{out}"
        );
    }
}
