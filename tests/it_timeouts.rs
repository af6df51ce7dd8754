//! Timeouts in HTTP mode: http-request (408), server (504), connect (503 to a blackhole),
//! client, http-keep-alive.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn cfg_for(defaults: &str, timeouts: &str, be: &str) -> (String, u16) {
    let port = free_port();
    (
        format!(
            "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n{timeouts}\n    default_backend be\nbackend be\n{be}"
        ),
        port,
    )
}

/// Sluice with frontend lines `fe_lines` before one backend server s1 (started here).
fn start_s1(defaults: &str, fe_lines: &str) -> (Sluice, u16, HttpBackend) {
    let b = HttpBackend::start("s1");
    let (cfg, port) = cfg_for(
        defaults,
        fe_lines,
        &format!("    server s1 {}\n", b.hostport()),
    );
    (Sluice::start(&cfg), port, b)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn http_request_timeout_gives_408() {
    let (s, port, b) = start_s1(LOGGED_HTTP, "    timeout http-request 300ms");
    let mut c = HttpClient::connect(port);
    let t0 = Instant::now();
    c.send("GET / HTTP/1.1\r\nHost: t\r\nX-Incomplete: yes\r\n");
    let r = c.read_response();
    let took = t0.elapsed();
    assert_eq!(r.status, 408);
    assert!(r.body_str().contains("<h1>408 "), "{}", r.body_str());
    assert!(took >= ms(280), "408 after {took:?}");
    assert!(took < ms(5000), "408 after {took:?}");
    c.expect_closed();
    assert_eq!(b.reqs(), 0);
    let line = s.wait_log_line(|l| l.contains(" 408 "), WAIT);
    assert!(line.contains("cR--"), "{line}");
    assert!(line.ends_with("\"<BADREQ>\""), "{line}");
}

#[test]
fn http_request_timeout_covers_a_trickling_head() {
    let (_s, port, b) = start_s1(DEFAULTS_HTTP, "    timeout http-request 400ms");
    let mut c = HttpClient::connect(port);
    let mut w = c.tcp().try_clone().unwrap();
    let t0 = Instant::now();
    // A slowloris client: one header line every 50 ms, for 3 s unless cut off.
    let trickle = std::thread::spawn(move || {
        use std::io::Write;
        if w.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n").is_err() {
            return;
        }
        for i in 0..60 {
            std::thread::sleep(ms(50));
            if w.write_all(format!("X-{i}: v\r\n").as_bytes()).is_err() {
                return;
            }
        }
    });
    let r = c.read_response();
    let took = t0.elapsed();
    assert_eq!(
        r.status, 408,
        "the head never completed within timeout http-request"
    );
    assert!(took >= ms(380) && took < ms(2500), "408 after {took:?}");
    drop(c);
    trickle.join().unwrap();
    assert_eq!(b.reqs(), 0);
}

#[test]
fn idle_connection_without_request_gets_408_after_timeout() {
    let (_s, port, _b) = start_s1(DEFAULTS_HTTP, "    timeout http-request 300ms");
    let mut c = HttpClient::connect(port);
    let t0 = Instant::now();
    let r = c.read_response();
    assert_eq!(r.status, 408);
    assert!(t0.elapsed() >= ms(280), "{:?}", t0.elapsed());
    c.expect_closed();
}

/// `option http-ignore-probes`: the same idle connection (a browser's pre-connection) is
/// closed without a 408 and without a log line; a real request still gets its 408 line.
#[test]
fn http_ignore_probes_closes_empty_connections_silently() {
    let (s, port, _b) = start_s1(
        LOGGED_HTTP,
        "    timeout http-request 300ms\n    option http-ignore-probes",
    );
    let mut probe = HttpClient::connect(port);
    let t0 = Instant::now();
    assert!(matches!(
        probe.wait_closed(WAIT),
        Closed::Eof | Closed::Reset
    ));
    assert!(t0.elapsed() >= ms(280), "{:?}", t0.elapsed());
    // A client that sent part of a head is no probe: 408, logged.
    let mut c = HttpClient::connect(port);
    c.send("GET / HT");
    assert_eq!(c.read_response().status, 408);
    let line = s.wait_log_line(|l| l.contains(" 408 "), WAIT);
    assert!(line.contains("<BADREQ>") || line.contains(" cR"), "{line}");
    assert_eq!(
        s.stdout
            .snapshot()
            .iter()
            .filter(|l| l.contains(" fe "))
            .count(),
        1
    );
}

#[test]
fn a_server_that_stops_reading_the_body_gets_timeout_server() {
    use std::io::{Read, Write};
    // Accepts, then never reads: the body fills the socket buffers and stops.
    let l = std::net::TcpListener::bind(lo(0)).unwrap();
    let addr = l.local_addr().unwrap();
    let holder = std::thread::spawn(move || l.accept().map(|(s, _)| s));
    let (cfg, port) = cfg_for(
        LOGGED_HTTP,
        "",
        &format!("    timeout server 300ms\n    server s1 {addr}\n"),
    );
    let s = Sluice::start(&cfg);
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    let len = 64 << 20;
    c.write_all(
        format!("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: {len}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut w = c.try_clone().unwrap();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..(len / chunk.len()) {
            if w.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 504"),
        "{:?}",
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );
    let line = s.wait_log_line(|l| l.contains("/up"), WAIT);
    assert!(line.contains(" 504 ") && line.contains(" sD-- "), "{line}");
    drop(holder);
}

#[test]
fn server_timeout_gives_504() {
    let b = HttpBackend::with_handler("s1", |_| Reply::Hang);
    let (cfg, port) = cfg_for(
        LOGGED_HTTP,
        "",
        &format!("    timeout server 500ms\n    server s1 {}\n", b.hostport()),
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let t0 = Instant::now();
    let r = c.get("/hang");
    let took = t0.elapsed();
    assert_eq!(r.status, 504);
    assert!(r.body_str().contains("<h1>504 "), "{}", r.body_str());
    assert!(took >= ms(480) && took < ms(5000), "504 after {took:?}");
    c.expect_closed();
    let line = s.wait_log_line(|l| l.contains("/hang"), WAIT);
    assert!(
        line.contains(" 504 ") && line.contains(" sH-- "),
        "server timeout before headers is sH: {line}"
    );
    // The hung server connection is closed by sluice.
    b.wait_open_conns(|n| n == 0, WAIT);
}

#[test]
fn server_timeout_is_about_inactivity_not_total_time() {
    // The body arrives in 6 pieces 150 ms apart (900 ms in all) with timeout server 500ms.
    let slow = TcpBackend::with_handler(|mut s, _| {
        use std::io::Write;
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while find(&got, b"\r\n\r\n").is_none() {
            match read_retrying(&mut s, &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n");
        for c in b"abcdef" {
            std::thread::sleep(ms(150));
            if s.write_all(&[*c]).is_err() {
                return;
            }
        }
    });
    let (cfg, port) = cfg_for(
        DEFAULTS_HTTP,
        "",
        &format!(
            "    timeout server 500ms\n    server s1 {}\n",
            slow.hostport()
        ),
    );
    let _s = Sluice::start(&cfg);
    let r = http_get(port, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "abcdef");
}

#[test]
fn connect_timeout_to_a_blackhole_gives_503() {
    let hole = Blackhole::new();
    let (cfg, port) = cfg_for(
        LOGGED_HTTP,
        "",
        &format!(
            "    timeout connect 300ms\n    retries 1\n    server s1 {}\n",
            hole.hostport()
        ),
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let t0 = Instant::now();
    let r = c.get("/blackhole");
    let took = t0.elapsed();
    assert_eq!(r.status, 503);
    assert!(
        took >= ms(280),
        "503 after {took:?}: a connect attempt cannot have timed out yet"
    );
    assert!(took < ms(5000), "503 after {took:?}");
    c.expect_closed();
    let line = s.wait_log_line(|l| l.contains("/blackhole"), WAIT);
    assert!(
        line.contains(" 503 ") && line.contains(" sC-- "),
        "connect timeout is logged as sC: {line}"
    );
}

#[test]
fn connect_timeout_redispatches_to_a_working_server() {
    let hole = Blackhole::new();
    let good = HttpBackend::start("good");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    balance first\n    option redispatch\n    retries 1\n    timeout connect 300ms\n    server hole {}\n    server good {}\n",
        hole.hostport(),
        good.hostport()
    );
    let _s = Sluice::start(&cfg);
    let r = http_get(port, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.server(), "good");
}

#[test]
fn http_keep_alive_timeout_closes_idle_connection() {
    let (_s, port, _b) = start_s1(DEFAULTS_HTTP, "    timeout http-keep-alive 300ms");
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    let t0 = Instant::now();
    let closed = c.wait_closed(WAIT);
    let took = t0.elapsed();
    assert!(closed.is_closed(), "{closed:?}");
    assert!(
        took >= ms(250),
        "closed after {took:?}, before timeout http-keep-alive"
    );
    assert!(
        took < ms(5000),
        "closed after {took:?}; timeout client (10s) must not be what applied"
    );
}

#[test]
fn keep_alive_timeout_does_not_cut_an_active_client() {
    let (_s, port, _b) = start_s1(DEFAULTS_HTTP, "    timeout http-keep-alive 400ms");
    let mut c = HttpClient::connect(port);
    // 8 requests 100 ms apart: each gap is below the keep-alive timeout, the total is above.
    for _ in 0..8 {
        assert_eq!(c.get("/").status, 200);
        std::thread::sleep(ms(100));
    }
    assert_eq!(c.get("/").status, 200);
}

#[test]
fn client_timeout_closes_idle_connection_when_no_http_timeouts() {
    let (_s, port, _b) = start_s1(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 300ms\n    timeout server 10s\n",
        "",
    );
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    let t0 = Instant::now();
    let closed = c.wait_closed(WAIT);
    assert!(closed.is_closed(), "{closed:?}");
    assert!(
        t0.elapsed() >= ms(250) && t0.elapsed() < ms(5000),
        "{:?}",
        t0.elapsed()
    );
}

/// HAProxy's turn-around timer: a refused connection is retried on the same server only
/// after min(`timeout connect`, 1 s), so that a restarting server is not hammered.
#[test]
fn a_refused_connection_is_retried_after_the_turn_around_time() {
    let dead = closed_port();
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    retries 2\n    timeout connect 300ms\n    server dead 127.0.0.1:{dead}\n"
    );
    let s = Sluice::start(&cfg);
    let t0 = Instant::now();
    let r = http_get(port, "/");
    let took = t0.elapsed();
    assert_eq!(r.status, 502);
    // Two retries, each after 300 ms (timeout connect is below 1 s).
    assert!(
        took >= ms(580),
        "answered after {took:?}: retried without waiting"
    );
    let line = s.wait_log_line(|l| l.contains(" 502 "), WAIT);
    assert!(
        line.contains(" SC-- ") && line.contains(" be/dead "),
        "{line}"
    );
}

/// With `option redispatch`, a round-robin backend retries on another server at once: which
/// server serves does not matter, so there is no reason to wait for the one that refused.
#[test]
fn redispatch_in_round_robin_goes_to_another_server_without_waiting() {
    let dead = closed_port();
    let good = HttpBackend::start("good");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    balance roundrobin\n    option redispatch\n    retries 3\n    timeout connect 5s\n    server dead 127.0.0.1:{dead}\n    server good {}\n",
        good.hostport()
    );
    let _s = Sluice::start(&cfg);
    let t0 = Instant::now();
    // Round robin sends one of these two to the dead server first.
    for _ in 0..2 {
        let r = http_get(port, "/");
        assert_eq!(r.status, 200);
        assert_eq!(r.server(), "good");
    }
    let took = t0.elapsed();
    assert!(
        took < ms(1000),
        "took {took:?}: the redispatch waited for the turn-around timer (1 s)"
    );
}

/// `option redispatch 1`: every retry may go to another server, also with a hashing
/// algorithm, whose plain `option redispatch` waits for the last retry.
#[test]
fn redispatch_interval_one_leaves_a_refused_server_at_the_first_retry() {
    let dead = closed_port();
    let good = HttpBackend::start("good");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    balance hdr(X-Key)\n    option redispatch 1\n    retries 3\n    timeout connect 5s\n    server dead 127.0.0.1:{dead}\n    server good {}\n",
        good.hostport()
    );
    let s = Sluice::start(&cfg);
    // Find keys the hash sends to the dead server: their requests are redispatched.
    for k in 0..8 {
        let r = http_raw(
            port,
            format!("GET / HTTP/1.1\r\nHost: t\r\nX-Key: k{k}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(r.status, 200, "key k{k}");
    }
    // A redispatched request is logged with `+1` retries (moved after the first one).
    let lines = s.wait_log_lines(8, |l| l.contains(" 200 "), WAIT);
    let moved: Vec<&String> = lines.iter().filter(|l| l.contains("/+1 ")).collect();
    assert!(
        !moved.is_empty(),
        "no key hashed to the dead server: {lines:#?}"
    );
    for l in moved {
        assert!(l.contains(" be/good "), "{l}");
    }
}
