//! HTTP/2 health checks: `check-proto h2` (prior knowledge over plain TCP, ALPN `h2` over TLS),
//! `http-check connect proto`, HTTP/2 chosen by ALPN, and the same `http-check send|expect`,
//! `disable-on-404` and result codes as HTTP/1.x checks. The servers are real HTTP/2 servers
//! (the `h2` crate's server side on a thread with its own tokio runtime).

mod common;

use common::h2server::*;
use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering::SeqCst};

fn ok(body: &str) -> Answer {
    (200, vec![], body.as_bytes().to_vec())
}

/// `global` with an admin stats socket and health-check logs on stdout, and `defaults`.
fn head(sock: &std::path::Path) -> String {
    format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n    log stdout format raw local0\n\
defaults\n    mode http\n    log global\n    option log-health-checks\n    timeout connect 1s\n\
\x20   timeout client 10s\n    timeout server 10s\n    timeout check 1s\n",
        sock.display()
    )
}

/// Over h2c: a 200 brings the server UP (L7OK, the request as configured, GOAWAY at the end
/// of each check), a 503 takes it DOWN (L7STS), `expect string` reads the HTTP/2 body, an
/// HTTP/1-only server fails with L7RSP, `http-check connect proto h2` works without
/// `check-proto`, and `default-server` carries `check-proto`.
#[test]
fn h2c_checks_follow_the_answers() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let up = H2Server::start(|_| ok("fine"));
    let down = H2Server::start(|_| (503, vec![], b"busy".to_vec()));
    let body = H2Server::start(|s| {
        (
            200,
            vec![("x-state", "ready, warm".to_string())],
            format!("{} {} healthy-h2", s.method, s.path).into_bytes(),
        )
    });
    let h1 = HttpBackend::start("h1-only");
    let cfg = format!(
        "{}backend b_up\n    option httpchk GET /health\n\
\x20   default-server check-proto h2 inter 100ms rise 1 fall 1\n\
\x20   server s {up} check\n\
backend b_down\n    option httpchk GET /health\n\
\x20   server s {down} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_body\n    option httpchk\n\
\x20   http-check send meth POST uri /probe ver HTTP/1.1 hdr Host check.example hdr X-Probe yes hdr Connection close body ping\n\
\x20   http-check expect string healthy-h2\n    http-check expect hdr name x-state value warm\n\
\x20   server s {body} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_nomatch\n    option httpchk GET /\n    http-check expect string nope\n\
\x20   server s {body} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_h1\n    option httpchk GET /\n\
\x20   server s {h1} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_rule\n    option httpchk GET /rule\n    http-check connect proto h2\n\
\x20   server s {up} check inter 100ms rise 1 fall 1\n\
backend b_seq\n    option httpchk\n    http-check send uri /first\n    http-check expect status 200\n\
\x20   http-check send uri /second\n    http-check expect status 200\n\
\x20   server s {up} check check-proto h2 inter 100ms rise 1 fall 1\n",
        head(&sock),
        up = up.hostport(),
        down = down.hostport(),
        body = body.hostport(),
        h1 = h1.hostport(),
    );
    let s = Sluice::start(&cfg);
    let col = |be: &str, c: &str| stat_column(&sock, be, "s", c);

    wait_until("the h2 server answering 200 is UP", WAIT, || {
        col("b_up", "check_status") == "L7OK"
    });
    assert_eq!(col("b_up", "status"), "UP");
    assert_eq!(col("b_up", "check_code"), "200");
    let r = up
        .requests()
        .into_iter()
        .find(|r| r.path == "/health")
        .expect("the check request");
    assert_eq!(r.method, "GET");
    assert_eq!(r.authority, "", "no Host, no :authority");
    // Each check ends its connection with GOAWAY.
    wait_until("check connections end with GOAWAY", WAIT, || {
        up.goaways.load(SeqCst) >= 2
    });

    // With `log-health-checks`, the check's line gives the reason (HAProxy's).
    let line = s.wait_log_line(
        |l| l.contains("Health check for server b_down/s failed"),
        WAIT,
    );
    assert!(
        line.contains("reason: Layer7 wrong status, code: 503"),
        "{line}"
    );
    assert_eq!(col("b_down", "check_status"), "L7STS");
    assert_eq!(col("b_down", "check_code"), "503");

    wait_until("expect string and hdr on the h2 answer", WAIT, || {
        col("b_body", "check_status") == "L7OK"
    });
    let r = body
        .requests()
        .into_iter()
        .find(|r| r.path == "/probe")
        .expect("the http-check send request");
    assert_eq!(r.method, "POST");
    assert_eq!(r.authority, "check.example", "Host becomes :authority");
    assert_eq!(r.header("x-probe"), Some("yes"));
    assert_eq!(r.header("content-length"), Some("4"));
    assert_eq!(r.body, b"ping");
    assert_eq!(r.header("host"), None);
    assert_eq!(r.header("connection"), None, "forbidden in HTTP/2");

    wait_until("a body that does not match fails", WAIT, || {
        col("b_nomatch", "check_status") == "L7RSP"
    });
    assert_eq!(
        col("b_nomatch", "check_desc"),
        "HTTP content check did not match"
    );
    assert!(col("b_nomatch", "status").starts_with("DOWN"));

    wait_until("an HTTP/1-only server fails an h2 check", WAIT, || {
        col("b_h1", "check_status") == "L7RSP"
    });
    assert_eq!(
        col("b_h1", "check_desc"),
        "HTTP/2 check got an HTTP/1.x response"
    );
    assert!(col("b_h1", "status").starts_with("DOWN"));
    // It got the HTTP/2 preface, not an HTTP/1 request.
    let reqs = h1.requests();
    assert!(reqs.iter().any(|r| r.method == "PRI"), "{reqs:?}");
    assert!(!reqs.iter().any(|r| r.method == "GET"), "{reqs:?}");

    wait_until("http-check connect proto h2", WAIT, || {
        col("b_rule", "check_status") == "L7OK"
    });
    assert!(up.requests().iter().any(|r| r.path == "/rule"));

    // Successive sends are streams of one connection.
    wait_until("a two-request sequence", WAIT, || {
        col("b_seq", "check_status") == "L7OK"
    });
    let reqs = up.requests();
    let first = reqs.iter().find(|r| r.path == "/first").expect("/first");
    let second = reqs
        .iter()
        .find(|r| r.path == "/second" && r.conn == first.conn)
        .map(|r| r.conn);
    assert_eq!(second, Some(first.conn), "{reqs:?}");
}

/// `disable-on-404` over HTTP/2: a 404 from an UP server drains it (L7OKC, NOLB) and a 200
/// brings it back.
#[test]
fn h2_disable_on_404() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let status = Arc::new(AtomicU16::new(200));
    let st = status.clone();
    let srv = H2Server::start(move |_| (st.load(SeqCst), vec![], b"x".to_vec()));
    let cfg = format!(
        "{}backend be\n    option httpchk GET /\n    http-check disable-on-404\n\
\x20   server s {} check check-proto h2 inter 100ms rise 1 fall 1\n",
        head(&sock),
        srv.hostport()
    );
    let _s = Sluice::start(&cfg);
    let col = |c: &str| stat_column(&sock, "be", "s", c);
    wait_until("UP", WAIT, || col("status") == "UP");
    status.store(404, SeqCst);
    wait_until("a 404 drains the server", WAIT, || col("status") == "NOLB");
    assert_eq!(col("check_status"), "L7OKC");
    assert_eq!(col("check_code"), "404");
    status.store(200, SeqCst);
    wait_until("back UP", WAIT, || col("status") == "UP");
}

/// Over TLS: `check-proto h2` offers ALPN `h2` on its own; without `check-proto`, HTTP/2 is
/// used when `check-alpn` agrees on `h2` (HAProxy chooses by ALPN). The TLS server speaks
/// HTTP/2 only and refuses clients offering no `h2`.
#[test]
fn h2_checks_over_tls_use_alpn() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let srv = H2Server::start_tls(|s| ok(&format!("alpn={}", s.alpn)));
    let cfg = format!(
        "{}backend b_proto\n    option httpchk GET /proto\n    http-check send hdr Host tls.example\n\
\x20   http-check expect string alpn=h2\n\
\x20   server s {p} ssl verify none check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_alpn\n    option httpchk GET /alpn\n\
\x20   server s {p} ssl verify none check check-alpn h2 inter 100ms rise 1 fall 1\n\
backend b_h1\n    option httpchk GET /h1\n\
\x20   server s {p} ssl verify none check check-proto h1 check-alpn h2 inter 100ms rise 1 fall 1\n",
        head(&sock),
        p = srv.hostport(),
    );
    let _s = Sluice::start(&cfg);
    let col = |be: &str, c: &str| stat_column(&sock, be, "s", c);
    wait_until("check-proto h2 over TLS", WAIT, || {
        col("b_proto", "check_status") == "L7OK"
    });
    let r = srv
        .requests()
        .into_iter()
        .find(|r| r.path == "/proto")
        .expect("the TLS check request");
    assert_eq!(r.alpn, "h2");
    assert_eq!(
        (r.scheme.as_str(), r.authority.as_str()),
        ("https", "tls.example")
    );
    wait_until("h2 chosen by ALPN", WAIT, || {
        col("b_alpn", "check_status") == "L7OK"
    });
    assert!(srv.requests().iter().any(|r| r.path == "/alpn"));
    // `check-proto h1` wins over the ALPN: HTTP/1.x to an HTTP/2-only server fails.
    wait_until("check-proto h1 speaks HTTP/1.x", WAIT, || {
        col("b_h1", "check_status") == "L7RSP"
    });
    assert!(!srv.requests().iter().any(|r| r.path == "/h1"));
}

#[test]
fn check_proto_keywords_are_validated() {
    let bad = [
        (
            "    option httpchk\n    server s 127.0.0.1:1 check check-proto h3\n",
            ":5",
            "'check-proto': unknown protocol 'h3' (allowed: h1, h2)",
        ),
        (
            "    option httpchk\n    http-check connect proto fcgi\n",
            ":5",
            "'http-check connect proto': unknown protocol 'fcgi' (allowed: h1, h2)",
        ),
        (
            "    default-server check-proto\n",
            ":4",
            "missing protocol after 'check-proto'",
        ),
        (
            "    tcp-check connect port 80 proto h2\n",
            ":4",
            "'tcp-check connect proto h2': invalid protocol for tcp-check",
        ),
        (
            "    server s 127.0.0.1:1 check check-proto h2\n",
            ":4",
            "'check-proto h2': incompatible with the backend's check type",
        ),
        (
            "    option tcp-check\n    default-server check-proto h1\n    server s 127.0.0.1:1 check\n",
            ":6",
            "'check-proto h1': incompatible with the backend's check type",
        ),
    ];
    for (lines, at, want) in bad {
        let cfg = format!("defaults\n    mode http\nbackend be\n{lines}");
        let (code, out) = Sluice::check(&cfg);
        assert_ne!(code, 0, "{lines}");
        assert!(out.contains(at) && out.contains(want), "{lines}: {out}");
    }
    let good = [
        // `default-server` carries it; `check-alpn h2` is fine with HTTP checks now.
        "    option httpchk\n    default-server check-proto h2\n    server s 127.0.0.1:1 check\n",
        "    option httpchk\n    http-check connect proto h1\n    server s 127.0.0.1:1 check ssl verify none check-alpn h2,http/1.1\n",
        // Without `check`, as in HAProxy, nothing is checked and nothing is refused.
        "    server s 127.0.0.1:1 check-proto h2\n",
    ];
    for lines in good {
        let cfg = format!("defaults\n    mode http\nbackend be\n{lines}");
        let (code, out) = Sluice::check(&cfg);
        assert_eq!(code, 0, "{lines}: {out}");
    }
}
