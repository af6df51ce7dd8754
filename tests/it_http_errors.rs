//! Error statuses sluice generates itself (400, 414, 431, 501, 502, 503), request smuggling
//! attempts, error page shape, `errorfile` overrides, and whether the connection stays usable.

mod common;

use common::*;
use std::time::Duration;

fn proxy_cfg(defaults: &str, fe_extra: &str, be: &str) -> (String, u16) {
    let port = free_port();
    (
        format!(
            "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n{fe_extra}\n    default_backend be\n{be}"
        ),
        port,
    )
}

fn proxy(b: &HttpBackend) -> (Sluice, u16) {
    let (cfg, port) = proxy_cfg(DEFAULTS_HTTP, "", &backend_section("be", "", &[b]));
    (Sluice::start(&cfg), port)
}

/// The start of a request, for failure messages.
fn short(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    if s.len() > 160 {
        format!("{}...({} bytes)", &s[..160], s.len())
    } else {
        s.into_owned()
    }
}

/// Sends `raw` on a fresh connection, expects `status`, then the connection to be closed.
fn expect_error_and_close(port: u16, raw: &[u8], status: u16) -> Response {
    let mut c = HttpClient::connect(port);
    c.send(raw);
    let r = c
        .try_read_response(false)
        .unwrap_or_else(|e| panic!("no response to {:?}: {e}", short(raw)));
    assert_eq!(
        r.status,
        status,
        "request {:?} got {} {:?}",
        short(raw),
        r.status,
        r.body_str()
    );
    c.expect_closed();
    r
}

fn assert_builtin_page(r: &Response, status: u16, reason: &str) {
    assert_eq!(r.reason, reason);
    assert!(
        r.body_str()
            .starts_with(&format!("<html><body><h1>{status} {reason}</h1>")),
        "body: {:?}",
        r.body_str()
    );
    assert_eq!(
        r.header("content-length")
            .map(|v| v.parse::<usize>().unwrap()),
        Some(r.body.len())
    );
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert!(
        r.conn_close(),
        "error responses announce connection: close: {:?}",
        r.headers
    );
}

#[test]
fn malformed_requests_get_400_and_never_reach_the_server() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let cases: &[&[u8]] = &[
        // conflicting Content-Length
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\n\r\nhello!",
        // Content-Length together with Transfer-Encoding
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
        // malformed Content-Length
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5x\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\nhello",
        // whitespace before the colon
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length : 5\r\n\r\nhello",
        // obs-fold
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n  b\r\n\r\n",
        // control characters in a header value / name
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Bad: a\x01b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Bad: a\x00b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nX-B\x7fad: ab\r\n\r\n",
        // bare CR
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Bad: a\rb\r\n\r\n",
        // garbage request lines
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1 extra\r\nHost: t\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: t\r\n\r\n",
        // chunked not last
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    ];
    for raw in cases {
        let r = expect_error_and_close(port, raw, 400);
        assert_builtin_page(&r, 400, "Bad Request");
    }
    assert_eq!(
        b.reqs(),
        0,
        "a malformed request reached the server: {:?}",
        b.requests().first().map(|r| r.raw_head.clone())
    );
}

#[test]
fn identical_duplicate_content_length_is_accepted() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    let r = c.request(
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(r.status, 200);
    assert_eq!(b.last_request().body, b"hello");
    assert_eq!(c.get("/").status, 200);
}

#[test]
fn bad_chunk_size_gets_400() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    expect_error_and_close(
        port,
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        400,
    );
    // The server must not have seen a complete request with a body.
    assert!(b.requests().iter().all(|r| r.body.is_empty()));
}

#[test]
fn smuggled_second_request_is_not_forwarded() {
    // A classic CL.TE attempt: a proxy honouring Content-Length would forward the tail as a
    // second request. sluice must reject the whole message.
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let raw = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";
    expect_error_and_close(port, raw, 400);
    assert!(
        b.requests().iter().all(|r| r.target != "/smuggled"),
        "smuggled request reached the server"
    );
    assert_eq!(b.reqs(), 0);
}

#[test]
fn unknown_transfer_coding_gets_501() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let r = expect_error_and_close(
        port,
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: frobnicate\r\n\r\n",
        501,
    );
    assert_builtin_page(&r, 501, "Not Implemented");
    assert_eq!(b.reqs(), 0);
}

#[test]
fn long_request_line_gets_414_but_a_shorter_one_passes() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let ok_path = format!("/{}", "a".repeat(14_000));
    let r = http_get(port, &ok_path);
    assert_eq!(r.status, 200, "a 14 KB URI fits in bufsize - maxrewrite");
    assert_eq!(b.last_request().target, ok_path);

    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "b".repeat(16_000));
    let r = expect_error_and_close(port, long.as_bytes(), 414);
    assert_builtin_page(&r, 414, "URI Too Long");
    assert_eq!(b.reqs(), 1);
}

#[test]
fn long_headers_get_431() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let mut raw = String::from("GET / HTTP/1.1\r\nHost: t\r\n");
    for i in 0..20 {
        raw.push_str(&format!("X-Big-{i}: {}\r\n", "v".repeat(1000)));
    }
    raw.push_str("\r\n");
    let r = expect_error_and_close(port, raw.as_bytes(), 431);
    assert_builtin_page(&r, 431, "Request Header Fields Too Large");
    assert_eq!(b.reqs(), 0);
}

#[test]
fn tune_bufsize_lowers_the_limits() {
    let b = HttpBackend::start("s1");
    let (cfg, port) = proxy_cfg(
        &format!("global\n    tune.bufsize 4096\n    tune.maxrewrite 1024\n{DEFAULTS_HTTP}"),
        "",
        &backend_section("be", "", &[&b]),
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(
        http_get(port, &format!("/{}", "a".repeat(2000))).status,
        200
    );
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "b".repeat(3500));
    expect_error_and_close(port, long.as_bytes(), 414);
}

#[test]
fn garbage_from_server_gets_502() {
    let b = HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/garbage" => Reply::RawClose(b"THIS IS NOT HTTP\r\n\r\n".to_vec()),
        "/empty" => Reply::Close,
        "/truncated" => Reply::RawClose(b"HTTP/1.1 200 OK\r\nContent-Le".to_vec()),
        "/badcl" => Reply::RawClose(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
        ),
        "/badstatus" => Reply::RawClose(b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n".to_vec()),
        _ => Reply::named("s1"),
    });
    let (_s, port) = proxy(&b);
    for path in ["/garbage", "/empty", "/truncated", "/badcl", "/badstatus"] {
        let r = expect_error_and_close(
            port,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
            502,
        );
        assert_builtin_page(&r, 502, "Bad Gateway");
    }
}

#[test]
fn no_usable_server_gets_503() {
    // All servers disabled.
    let b = HttpBackend::start("s1");
    let be = format!("backend be\n    server s1 {} disabled\n", b.hostport());
    let (cfg, port) = proxy_cfg(DEFAULTS_HTTP, "", &be);
    let _s = Sluice::start(&cfg);
    let r = expect_error_and_close(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", 503);
    assert_builtin_page(&r, 503, "Service Unavailable");
    assert_eq!(b.conns(), 0);

    // A backend without any server.
    let (cfg, port) = proxy_cfg(DEFAULTS_HTTP, "", "backend be\n    balance roundrobin\n");
    let _s2 = Sluice::start(&cfg);
    expect_error_and_close(port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", 503);
}

#[test]
fn refused_connection_after_retries_gets_502_and_logs_sc() {
    let dead = closed_port();
    let be = format!("backend be\n    retries 2\n    server s1 127.0.0.1:{dead}\n");
    let (cfg, port) = proxy_cfg(LOGGED_HTTP, "", &be);
    let s = Sluice::start(&cfg);
    let r = expect_error_and_close(port, b"GET /refused HTTP/1.1\r\nHost: t\r\n\r\n", 502);
    assert_builtin_page(&r, 502, "Bad Gateway");
    let line = s.wait_log_line(|l| l.contains("/refused"), WAIT);
    assert!(line.contains(" 502 "), "{line}");
    assert!(
        line.contains(" SC-- "),
        "termination state should be SC: {line}"
    );
    // retries 2 → the log's retries counter (last of ac/fc/bc/sc/rc) is 2.
    let re = regex::Regex::new(r" \d+/\d+/\d+/\d+/\+?(\d+) \d+/\d+ ").unwrap();
    let caps = re
        .captures(&line)
        .unwrap_or_else(|| panic!("no counters in {line}"));
    assert_eq!(&caps[1], "2", "{line}");
}

#[test]
fn errorfile_replaces_the_whole_response_verbatim() {
    let dir = TempDir::new();
    let page = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nX-Custom: yes\r\nContent-Length: 7\r\n\r\nsorry\r\n";
    let f502 = dir.write("502.http", page);
    let page400 = b"HTTP/1.1 400 Bad Request\r\nX-Custom-400: 1\r\nContent-Length: 4\r\n\r\nnope";
    let f400 = dir.write("400.http", page400);
    let dead = closed_port();
    let be = format!(
        "backend be\n    retries 0\n    errorfile 502 {}\n    server s1 127.0.0.1:{dead}\n",
        f502.display()
    );
    let (cfg, port) = proxy_cfg(
        DEFAULTS_HTTP,
        &format!("    errorfile 400 {}", f400.display()),
        &be,
    );
    let _s = Sluice::start(&cfg);

    let mut c = HttpClient::connect(port);
    c.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let got = c.wire.read_to_end().unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(page));

    let mut c = HttpClient::connect(port);
    c.send("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
    let got = c.wire.read_to_end().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(page400)
    );
}

#[test]
fn server_error_status_keeps_the_connection_usable() {
    // A 500 / 404 from the server is a normal response: the client connection stays open.
    let b = HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/500" => Reply::status(500, "s1", "boom"),
        "/404" => Reply::status(404, "s1", "nope"),
        _ => Reply::named("s1"),
    });
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    let r = c.get("/500");
    assert_eq!((r.status, r.body_str().as_str()), (500, "boom"));
    let r = c.get("/404");
    assert_eq!((r.status, r.body_str().as_str()), (404, "nope"));
    let r = c.get("/ok");
    assert_eq!(r.status, 200);
    assert_eq!(b.conns(), 1);
}

#[test]
fn error_after_good_requests_closes_the_connection() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    c.send(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Bad: a\x01b\r\n\r\nGET /after HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let r = c.read_final(false);
    assert_eq!(r.status, 400);
    c.expect_closed();
    assert!(
        b.requests().iter().all(|r| r.target != "/after"),
        "request after a 400 was processed"
    );
}

#[test]
fn client_closing_mid_head_is_not_answered() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    c.send("GET / HTTP/1.1\r\nHost:");
    c.shutdown_write();
    match c.wait_closed(WAIT) {
        Closed::Eof | Closed::Reset => {}
        Closed::Data(d) => {
            // HAProxy sends nothing for a request aborted by the client; at most a 400.
            let s = String::from_utf8_lossy(&d);
            assert!(s.starts_with("HTTP/1.1 400"), "unexpected data: {s:?}");
        }
        Closed::StillOpen => panic!("connection left open after the client aborted"),
    }
    assert_eq!(b.reqs(), 0);
}

#[test]
fn sluice_survives_a_burst_of_bad_requests() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b);
    for i in 0..50u8 {
        let mut c = HttpClient::connect(port);
        let junk: Vec<u8> = (0..200u32)
            .map(|j| ((j * 31 + i as u32 * 17) % 256) as u8)
            .collect();
        c.send(&junk);
        c.send("\r\n\r\n");
        let _ = c.wait_closed(Duration::from_secs(5));
    }
    assert_eq!(
        http_get(port, "/").status,
        200,
        "sluice must still serve after garbage input"
    );
}

/// `http-errors` sections imported with `errorfiles` (declared before or after the proxy, all
/// codes or some), and `http-error status` replies, in the order the lines come.
#[test]
fn http_errors_sections_and_http_error_replies() {
    let dir = TempDir::new();
    let page = |code: u16, tag: &str| {
        format!("HTTP/1.1 {code} X\r\nX-Page: {tag}\r\nContent-Length: 2\r\n\r\nok").into_bytes()
    };
    let p502 = dir.write("502.http", page(502, "site-502"));
    let p503 = dir.write("503.http", page(503, "site-503"));
    let p400 = dir.write("400.http", page(400, "late-400"));
    let dead = closed_port();
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}http-errors site\n    errorfile 502 {}\n    errorfile 503 {}\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    errorfiles late 400\n\
         \x20   use_backend empty if {{ path_beg /empty }}\n    default_backend be\n\
         backend be\n    retries 0\n    errorfiles site 502\n    server s1 127.0.0.1:{dead}\n\
         backend empty\n    errorfiles site\n\
         \x20   http-request return status 503 errorfiles site if {{ path /empty/page }}\n\
         \x20   http-request return status 200 errorfile {} if {{ path /empty/file }}\n\
         \x20   http-error status 503 content-type text/plain string \"no server\" hdr X-Why empty\n\
         http-errors late\n    errorfile 400 {}\n",
        p502.display(),
        p503.display(),
        p502.display(),
        p400.display()
    );
    let _s = Sluice::start(&cfg);
    let get = |path: &str| {
        let mut c = HttpClient::connect(port);
        c.get(path)
    };
    let r = get("/");
    assert_eq!(r.status, 502);
    assert_eq!(r.header("x-page"), Some("site-502"));
    // The `http-error` line after `errorfiles site` wins for 503.
    let r = get("/empty");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-why"), Some("empty"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.body, b"no server");
    // `return` with a whole page from a section or a file, sent as it is.
    let r = get("/empty/page");
    assert_eq!((r.status, r.header("x-page")), (503, Some("site-503")));
    let r = get("/empty/file");
    assert_eq!((r.status, r.header("x-page")), (502, Some("site-502")));
    // A section declared after the proxy that imports it.
    let mut c = HttpClient::connect(port);
    let r =
        c.request("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-page"), Some("late-400"));
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}backend be\n    errorfiles nope\n    http-error status 418 string x\n\
         \x20   server s1 127.0.0.1:1\nhttp-errors e\n    errorfile 503 /nonexistent/503.http\n"
    ));
    assert_eq!(code, 1);
    assert!(
        err.contains(":7: ") && err.contains("unknown http-errors section 'nope'"),
        "{err}"
    );
    assert!(
        err.contains(":8: ") && err.contains("status code '418' cannot be customized"),
        "{err}"
    );
    assert!(
        err.contains(":11: ") && err.contains("cannot read '/nonexistent/503.http'"),
        "{err}"
    );
}
