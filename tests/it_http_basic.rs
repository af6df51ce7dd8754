//! HTTP/1.x proxying: keep-alive, pipelining, HTTP/1.0, chunked with trailers, close-delimited
//! bodies, HEAD/204/304, 100-continue, header case and order, hop-by-hop headers, forwardfor,
//! server connection reuse, http-server-close / httpclose, large bodies, access log line.

mod common;

use common::*;
use std::io::Write as _;
use std::time::Duration;

/// One frontend `fe` on a fresh port, default backend `be` with the given servers.
fn proxy(
    defaults: &str,
    fe_extra: &str,
    be_extra: &str,
    servers: &[&HttpBackend],
) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n{fe_extra}\n    default_backend be\n{}",
        backend_section("be", be_extra, servers)
    );
    (Sluice::start(&cfg), port)
}

fn lower_names(h: &[(String, String)]) -> Vec<(String, String)> {
    h.iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect()
}

#[test]
fn simple_get_reaches_the_server() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let r = http_get(port, "/hello?x=1");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "s1");
    assert_eq!(r.server(), "s1");
    let req = b.last_request();
    assert_eq!(req.method, "GET");
    assert_eq!(req.target, "/hello?x=1");
    assert_eq!(req.header("host"), Some("test"));
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let b = HttpBackend::with_handler("s1", |r| Reply::echo_target("s1", r));
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for i in 0..5 {
        let r = c.get(&format!("/n{i}"));
        assert_eq!(r.status, 200);
        assert_eq!(r.body_str(), format!("/n{i}"));
        assert!(
            !r.conn_close(),
            "keep-alive response must not announce close: {:?}",
            r.headers
        );
    }
    // The connection is still usable and nothing else is pending on it.
    c.expect_silent_for(Duration::from_millis(100));
    assert_eq!(c.get("/last").body_str(), "/last");
}

#[test]
fn server_connection_is_reused_within_a_client_connection() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for _ in 0..6 {
        assert_eq!(c.get("/").status, 200);
    }
    assert_eq!(b.reqs(), 6);
    assert_eq!(
        b.conns(),
        1,
        "6 requests on one client connection should use one server connection"
    );
    let ids: Vec<usize> = b.requests().iter().map(|r| r.conn_id).collect();
    assert_eq!(ids, vec![0; 6]);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    // The first request is slow, the others fast: answers must still come in request order.
    let b = HttpBackend::with_handler("s1", |r| {
        if r.target == "/a" {
            std::thread::sleep(Duration::from_millis(100));
        }
        Reply::echo_target("s1", r)
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    c.send(
        "GET /a HTTP/1.1\r\nHost: t\r\n\r\n\
         POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nxyz\
         GET /c HTTP/1.1\r\nHost: t\r\n\r\n\
         GET /d HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    for want in ["/a", "/b", "/c", "/d"] {
        let r = c.read_final(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body_str(), want);
    }
    let reqs = b.wait_requests(4, WAIT);
    assert_eq!(reqs[1].body, b"xyz");
}

#[test]
fn http10_without_keepalive_is_closed_after_the_response() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request("GET / HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "s1");
    c.expect_closed();
}

#[test]
fn http10_with_keepalive_stays_open() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        let r = c.request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.body_str(), "s1");
        assert!(
            !r.close_delimited,
            "a kept-alive HTTP/1.0 response needs a length"
        );
    }
}

#[test]
fn http10_server_keeps_an_http11_client_alive_with_an_explicit_header() {
    // Python's http.server and many application servers answer HTTP/1.0 with a length and
    // then close: the client side stays open, and says so, or the client would close it.
    let b = HttpBackend::with_handler("s1", |_| {
        Reply::RawClose(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for i in 0..2 {
        let r = c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.body_str(), "ok");
        assert_eq!(r.header("connection"), Some("keep-alive"), "request {i}");
    }
    assert_eq!(b.conns(), 2, "the server closed after each response");

    // Transfer-Encoding in an HTTP/1.0 response is faulty framing (RFC 9112 §6.1): the body
    // is forwarded, and the client connection ends with it.
    let b = HttpBackend::with_handler("s1", |_| {
        Reply::RawClose(
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n".to_vec(),
        )
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.body_str(), "ok");
    assert_eq!(r.header("connection"), Some("close"));
    c.expect_closed();
}

#[test]
fn content_length_lists_and_repeats_are_forwarded_as_one_value() {
    // RFC 9110 §8.6 lets a recipient take `3, 3` or two equal fields as one length; the next
    // hop must then get one field with one value (HAProxy does the same), or it may read the
    // length differently. With Transfer-Encoding, a response's Content-Length goes away.
    let b = HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/list" => Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok".to_vec()),
        "/te" => Reply::Raw(
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n\
              2\r\nok\r\n0\r\n\r\n"
                .to_vec(),
        ),
        _ => Reply::named("s1"),
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for req in [
        "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 3, 3\r\n\r\nabc",
        "POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc",
    ] {
        let r = c.request(req);
        assert_eq!(r.status, 200, "{req:?}");
    }
    let reqs = b.wait_requests(2, WAIT);
    for r in &reqs {
        let cl: Vec<_> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .collect();
        assert_eq!(cl.len(), 1, "{:?}", r.headers);
        assert_eq!(cl[0].1, "3");
        assert_eq!(r.body, b"abc");
    }
    let r = c.get("/list");
    assert_eq!(r.headers_named("content-length"), vec!["2"]);
    assert_eq!(r.body_str(), "ok");
    let r = c.get("/te");
    assert!(
        r.headers_named("content-length").is_empty(),
        "{:?}",
        r.headers
    );
    assert!(r.chunked);
    assert_eq!(r.body_str(), "ok");
}

#[test]
fn connection_close_from_client_closes_after_response() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    c.expect_closed();
}

#[test]
fn chunked_response_with_trailers_is_forwarded() {
    let b = HttpBackend::with_handler("s1", |_| {
        Reply::Raw(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n\
              5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Checksum: abc123\r\n\r\n"
                .to_vec(),
        )
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        let r = c.get("/");
        assert_eq!(r.status, 200);
        assert!(r.chunked, "response should stay chunked: {:?}", r.headers);
        assert_eq!(r.body_str(), "hello, world");
        assert_eq!(
            lower_names(&r.trailers),
            vec![("x-checksum".to_string(), "abc123".to_string())]
        );
    }
    assert_eq!(b.conns(), 1);
}

#[test]
fn chunked_request_with_trailers_is_forwarded() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request(
        "POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
         4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: yes\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let req = b.last_request();
    assert!(req.chunked);
    assert_eq!(
        String::from_utf8_lossy(&req.body),
        "Wikipedia in\r\n\r\nchunks."
    );
    assert_eq!(
        lower_names(&req.trailers),
        vec![("x-trailer".to_string(), "yes".to_string())]
    );
    // The connection is still in sync.
    assert_eq!(c.get("/after").status, 200);
}

#[test]
fn close_delimited_response_is_forwarded_entirely() {
    let body = "x".repeat(100_000);
    let b2 = body.clone();
    let b = HttpBackend::with_handler("s1", move |_| {
        Reply::RawClose(
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n{b2}").into_bytes(),
        )
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), body.len());
    assert_eq!(r.body_str(), body);
    if r.close_delimited {
        c.expect_closed();
    }
}

#[test]
fn head_response_has_no_body() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request("HEAD /x HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("2"));
    assert_eq!(b.last_request().method, "HEAD");
    // If sluice had waited for (or sent) a body, this next exchange would be out of sync.
    let r = c.get("/y");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "s1");
}

#[test]
fn status_204_and_304_have_no_body() {
    let b = HttpBackend::with_handler("s1", |r| match r.target.as_str() {
        "/204" => Reply::Raw(b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n".to_vec()),
        "/304" => Reply::Raw(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n\r\n".to_vec(),
        ),
        _ => Reply::named("s1"),
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.get("/204");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("x-a"), Some("1"));
    let r = c.get("/304");
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    let r = c.get("/other");
    assert_eq!(r.status, 200, "connection out of sync after 204/304");
    assert_eq!(r.body_str(), "s1");
    c.expect_silent_for(Duration::from_millis(100));
}

#[test]
fn expect_100_continue_is_relayed() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    c.send("PUT /up HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
    let interim = c.read_response();
    assert_eq!(
        interim.status, 100,
        "expected an interim 100 before sending the body"
    );
    c.send("0123456789");
    let r = c.read_final(false);
    assert_eq!(r.status, 200);
    assert_eq!(b.last_request().body, b"0123456789");
    assert_eq!(c.get("/next").status, 200);
}

#[test]
fn request_header_case_and_order_are_preserved() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request(
        "GET / HTTP/1.1\r\nhOsT: t\r\nX-Zeta: 1\r\nx-alpha: 2\r\nX-ZETA: 3\r\nAccept: */*\r\nx-MiXeD-CaSe: v a l\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let req = b.last_request();
    let want = [
        "hOsT",
        "X-Zeta",
        "x-alpha",
        "X-ZETA",
        "Accept",
        "x-MiXeD-CaSe",
    ];
    let got: Vec<&str> = req
        .header_names()
        .into_iter()
        .filter(|n| want.contains(n))
        .collect();
    assert_eq!(got, want, "all headers: {:?}", req.headers);
    assert_eq!(req.headers_named("x-zeta"), vec!["1", "3"]);
    assert_eq!(req.header("x-mixed-case"), Some("v a l"));
}

#[test]
fn response_header_case_and_order_are_preserved() {
    let b = HttpBackend::with_handler("s1", |_| {
        Reply::Raw(
            b"HTTP/1.1 200 OK\r\nx-Second: 2\r\nX-FIRST: 1\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
        )
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let r = http_get(port, "/");
    let want = ["x-Second", "X-FIRST", "Set-Cookie", "set-cookie"];
    let got: Vec<&str> = r
        .headers
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| want.contains(n))
        .collect();
    assert_eq!(got, want, "all headers: {:?}", r.headers);
    assert_eq!(r.headers_named("set-cookie"), vec!["a=1", "b=2"]);
    assert_eq!(r.body_str(), "ok");
}

#[test]
fn hop_by_hop_request_headers_are_removed() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.request(
        "GET / HTTP/1.1\r\nHost: t\r\nConnection: keep-alive, X-Private-Hop\r\nKeep-Alive: timeout=5\r\n\
         Proxy-Connection: keep-alive\r\nTE: trailers\r\nX-Private-Hop: secret\r\nX-End-To-End: kept\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let req = b.last_request();
    for h in ["keep-alive", "proxy-connection", "te", "x-private-hop"] {
        assert!(
            req.header(h).is_none(),
            "{h} must not be forwarded: {:?}",
            req.headers
        );
    }
    if let Some(conn) = req.header("connection") {
        assert!(
            !conn.to_ascii_lowercase().contains("x-private-hop"),
            "client's Connection forwarded: {conn}"
        );
    }
    assert_eq!(req.header("x-end-to-end"), Some("kept"));
}

#[test]
fn hop_by_hop_response_headers_are_removed() {
    let b = HttpBackend::with_handler("s1", |_| {
        Reply::Raw(
            b"HTTP/1.1 200 OK\r\nConnection: X-Server-Hop\r\nKeep-Alive: timeout=99\r\nX-Server-Hop: 1\r\n\
              X-Kept: yes\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
        )
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.get("/");
    assert_eq!(r.status, 200);
    assert!(r.header("keep-alive").is_none(), "{:?}", r.headers);
    assert!(r.header("x-server-hop").is_none(), "{:?}", r.headers);
    assert_eq!(r.header("x-kept"), Some("yes"));
    assert_eq!(c.get("/").status, 200);
}

#[test]
fn forwardfor_adds_client_address() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "    option forwardfor", "", &[&b]);
    let r = http_get(port, "/");
    assert_eq!(r.status, 200);
    assert_eq!(
        b.last_request().headers_named("x-forwarded-for"),
        vec!["127.0.0.1"]
    );
    // An existing header from the client is kept and ours comes after it.
    let mut c = HttpClient::connect(port);
    c.get_with("/", "X-Forwarded-For: 203.0.113.9\r\n");
    let xff = b.last_request().headers_named("x-forwarded-for").join(",");
    assert_eq!(xff.replace(' ', ""), "203.0.113.9,127.0.0.1");
}

#[test]
fn forwardfor_custom_header_and_except() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(
        DEFAULTS_HTTP,
        "    option forwardfor header X-Client-IP",
        "",
        &[&b],
    );
    http_get(port, "/");
    let req = b.last_request();
    assert_eq!(req.header("x-client-ip"), Some("127.0.0.1"));
    assert!(req.header("x-forwarded-for").is_none());
    drop(_s);

    let b2 = HttpBackend::start("s2");
    let (_s2, port2) = proxy(
        DEFAULTS_HTTP,
        "    option forwardfor except 127.0.0.0/8",
        "",
        &[&b2],
    );
    assert_eq!(http_get(port2, "/").status, 200);
    assert!(
        b2.last_request().header("x-forwarded-for").is_none(),
        "{:?}",
        b2.last_request().headers
    );
}

#[test]
fn http_server_close_opens_a_server_connection_per_request() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "    option http-server-close", "", &[&b]);
    let mut c = HttpClient::connect(port);
    for _ in 0..3 {
        let r = c.get("/");
        assert_eq!(r.status, 200);
        assert!(!r.conn_close(), "the client side stays keep-alive");
    }
    assert_eq!(b.reqs(), 3);
    assert_eq!(
        b.conns(),
        3,
        "server connection must be closed after each response"
    );
    // The server side is closed by sluice: all its connections end.
    b.wait_open_conns(|n| n == 0, WAIT);
}

#[test]
fn httpclose_closes_both_sides() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(DEFAULTS_HTTP, "    option httpclose", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.get("/");
    assert_eq!(r.status, 200);
    c.expect_closed();
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    assert_eq!(b.conns(), 2);
}

#[test]
fn large_bodies_both_ways() {
    let b = HttpBackend::with_handler("s1", |r| {
        Reply::status(200, "s1", r.body.iter().rev().copied().collect::<Vec<u8>>())
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, "", "", &[&b]);
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut c = HttpClient::connect(port);
    let mut req = format!(
        "POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    // Write from another thread: sluice may start answering before the upload ends.
    let w = c.tcp().try_clone().unwrap();
    let t = std::thread::spawn(move || {
        use std::io::Write;
        let mut w = w;
        w.write_all(&req).unwrap();
    });
    let r = c.read_final(false);
    t.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), body.len());
    assert!(
        r.body.iter().eq(body.iter().rev()),
        "body corrupted in transit"
    );
    assert_eq!(b.last_request().body, body);
}

#[test]
fn httplog_line_is_written() {
    let b = HttpBackend::start("s1");
    let (s, port) = proxy(LOGGED_HTTP, "", "", &[&b]);
    let mut c = HttpClient::connect(port);
    let r = c.get("/logged?q=1");
    assert_eq!(r.status, 200);
    let cport = c.local_port();
    let line = s.wait_log_line(|l| l.contains("/logged"), WAIT);
    let re = regex::Regex::new(
        r#"^127\.0\.0\.1:(\d+) \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d\.\d{3}\] fe be/s1 \d+/\d+/\d+/\d+/\d+ 200 (\d+) - - ---- \d+/\d+/\d+/\d+/0 0/0 "GET /logged\?q=1 HTTP/1\.1"$"#,
    )
    .unwrap();
    let caps = re
        .captures(&line)
        .unwrap_or_else(|| panic!("log line does not match: {line:?}"));
    assert_eq!(
        caps[1].parse::<u16>().unwrap(),
        cport,
        "client port in {line:?}"
    );
    let bytes: usize = caps[2].parse().unwrap();
    assert_eq!(
        bytes,
        r.raw_head.len() + r.body.len(),
        "bytes sent to the client in {line:?}"
    );
}

#[test]
fn unix_socket_bind_serves_http() {
    use std::os::unix::net::UnixStream;
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let sock = dir.join("fe.sock");
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind unix@{}\n    default_backend be\n{}",
        sock.display(),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let st = UnixStream::connect(&sock).expect("connect unix socket");
    st.set_read_timeout(Some(WAIT)).unwrap();
    let mut c = HttpClient::from_stream(st);
    let r = c.get("/via-unix");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "s1");
    assert_eq!(b.last_request().target, "/via-unix");
}

#[test]
fn an_empty_connection_is_logged_without_dontlognull() {
    let b = HttpBackend::start("s1");
    let (s, port) = proxy(LOGGED_HTTP, "", "", &[&b]);
    // Connected, then closed without a byte: HAProxy logs `400 0 - - CR-- ... "<BADREQ>"`.
    let empty = HttpClient::connect(port);
    let eport = empty.local_port();
    drop(empty);
    let line = s.wait_log_line(|l| l.contains(&format!(":{eport} ")), WAIT);
    assert!(
        line.contains(" fe/<NOSRV> -1/-1/-1/-1/") && line.contains(" 400 0 - - CR-- "),
        "{line}"
    );
    assert!(line.ends_with("\"<BADREQ>\""), "{line}");
}

#[test]
fn a_refused_connection_is_logged_with_the_server_that_refused_it() {
    // As HAProxy logs it: `be/dead ... SC--` (http) and `bt/dead ... SC` (tcp), not <NOSRV>.
    let (hp, tp) = (free_port(), free_port());
    let dead = closed_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{hp}\n    default_backend be\n\
         backend be\n    server dead 127.0.0.1:{dead}\n\
         frontend ft\n    mode tcp\n    option tcplog\n    bind 127.0.0.1:{tp}\n    default_backend bt\n\
         backend bt\n    mode tcp\n    server dead 127.0.0.1:{dead}\n"
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(hp);
    let cport = c.local_port();
    assert_eq!(c.get("/refused").status, 502);
    let line = s.wait_log_line(|l| l.contains(&format!(":{cport} ")), WAIT);
    assert!(
        line.contains(" fe be/dead ") && line.contains(" SC-- "),
        "{line}"
    );
    let mut t = std::net::TcpStream::connect(lo(tp)).unwrap();
    let tport = t.local_addr().unwrap().port();
    t.set_read_timeout(Some(WAIT)).unwrap();
    let _ = std::io::Read::read(&mut t, &mut [0u8; 16]);
    let line = s.wait_log_line(|l| l.contains(&format!(":{tport} ")), WAIT);
    assert!(
        line.contains(" ft bt/dead ") && line.contains(" SC "),
        "{line}"
    );
}

#[test]
fn dontlognull_skips_empty_connections() {
    let b = HttpBackend::start("s1");
    let (s, port) = proxy(
        LOGGED_HTTP,
        "    option dontlognull\n    timeout http-request 300ms",
        "",
        &[&b],
    );
    // A connection that sends nothing and is closed by the timeout...
    let mut empty = HttpClient::connect(port);
    let eport = empty.local_port();
    match empty.wait_closed(WAIT) {
        Closed::Eof | Closed::Reset => {}
        Closed::Data(d) => {
            // HAProxy still answers 408 here (only the log is skipped).
            assert!(
                d.starts_with(b"HTTP/1.1 408"),
                "{:?}",
                String::from_utf8_lossy(&d)
            );
            empty.expect_closed();
        }
        Closed::StillOpen => panic!("empty connection not closed by timeout http-request"),
    }
    // ...leaves no log line, while a real request does.
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/real").status, 200);
    s.wait_log_line(|l| l.contains("/real"), WAIT);
    let lines = s.stdout.snapshot();
    assert!(
        !lines.iter().any(|l| l.contains(&format!(":{eport} "))),
        "empty connection was logged: {lines:?}"
    );
}

/// `option logasap`: the line is written when the response head has gone to the client, with
/// `+` before the total time and the byte count, while the body is still on its way.
#[test]
fn logasap_logs_when_the_head_is_sent() {
    let gate = Gate::new();
    let g = gate.clone();
    let srv = TcpBackend::with_handler(move |mut s, _| {
        let mut w = Wire::new(s.try_clone().unwrap());
        while let Ok(Some(_)) = w.read_until(b"\r\n\r\n") {
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
                .unwrap();
            g.wait();
            s.write_all(b"world").unwrap();
        }
    });
    let port = free_port();
    let cfg = format!(
        "{}frontend fe\n    bind 127.0.0.1:{port}\n    option logasap\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        LOGGED_HTTP,
        srv.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    c.send("GET /asap HTTP/1.1\r\nHost: x\r\n\r\n");
    // Logged before the body is complete: the server still holds "world".
    let line = s.wait_log_line(|l| l.contains("/asap"), WAIT);
    let re = regex::Regex::new(
        r#" fe be/s1 \d+/\d+/\d+/\d+/\+\d+ 200 \+(\d+) - - ---- .* "GET /asap HTTP/1\.1"$"#,
    )
    .unwrap();
    let caps = re
        .captures(&line)
        .unwrap_or_else(|| panic!("log line does not match: {line:?}"));
    gate.open();
    let r = c.read_response();
    assert_eq!(r.body_str(), "helloworld");
    // The bytes counted so far: the head and the 5 body bytes that came with it.
    let bytes: usize = caps[1].parse().unwrap();
    assert_eq!(bytes, r.raw_head.len() + 5, "{line}");
    // One line per request: the next request's line is the only other one.
    let r = c.get("/second");
    assert_eq!(r.body_str(), "helloworld");
    let lines = s.wait_log_lines(2, |l| l.contains(" fe be/s1 "), WAIT);
    assert_eq!(lines.iter().filter(|l| l.contains("/asap")).count(), 1);
}

/// `unix-bind prefix P mode M`: every UNIX socket (binds and stats sockets) is created under
/// the prefix with that mode; a stats socket's own `mode`, `uid` and `gid` win.
#[test]
fn unix_bind_prefix_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    // HAProxy prepends the prefix as is: "/x.sock" goes to "PREFIX/x.sock".
    let prefix = dir.path().display().to_string();
    // A stats socket's own owner and group (only root may give a file away).
    let root = nix::unistd::geteuid().is_root();
    let chown = if root { " uid 65534 gid 65534" } else { "" };
    let cfg = format!(
        "global\n    unix-bind prefix {prefix} mode 0640\n    stats socket /admin.sock level admin\n\
         \x20   stats socket unix@/own.sock mode 600{chown}\n\
         {DEFAULTS_HTTP}frontend fe\n    bind unix@/fe.sock\n    default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mode = |name: &str| {
        std::fs::metadata(dir.join(name))
            .unwrap_or_else(|e| panic!("{name} under the prefix: {e}"))
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("fe.sock"), 0o640);
    assert_eq!(mode("admin.sock"), 0o640);
    assert_eq!(mode("own.sock"), 0o600);
    use std::os::unix::fs::MetadataExt;
    let own = std::fs::metadata(dir.join("own.sock")).unwrap();
    let admin = std::fs::metadata(dir.join("admin.sock")).unwrap();
    if root {
        assert_eq!((own.uid(), own.gid()), (65534, 65534));
    }
    assert_eq!(admin.uid(), nix::unistd::geteuid().as_raw());
    assert!(stats_cli(&dir.join("admin.sock"), "show info").starts_with("Name: sluice"));
    let st = std::os::unix::net::UnixStream::connect(dir.join("fe.sock")).unwrap();
    st.set_read_timeout(Some(WAIT)).unwrap();
    let mut c = HttpClient::from_stream(st);
    assert_eq!(c.get("/").server(), "s1");
}

/// `option nolinger`: in a frontend, sluice's close of a client connection is a reset; in a
/// backend, its close of a server connection is. Without it, both are orderly (FIN).
#[test]
fn nolinger_closes_with_a_reset() {
    // Each server connection reports how its end looked once sluice closed it.
    let (tx, rx) = std::sync::mpsc::channel::<&'static str>();
    let tx = std::sync::Mutex::new(tx);
    let srv = TcpBackend::with_handler(move |mut s, _| {
        use std::io::Read as _;
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&b[..n]),
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        let end = match s.read(&mut b) {
            Ok(0) => "eof",
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => "reset",
            _ => "other",
        };
        let _ = tx.lock().unwrap().send(end);
    });
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend quiet\n    bind 127.0.0.1:{p1}\n    option nolinger\n\
         default_backend rst\n\
         frontend plain\n    bind 127.0.0.1:{p2}\n    default_backend fin\n\
         backend rst\n    option nolinger\n    option http-server-close\n    server s {a}\n\
         backend fin\n    option http-server-close\n    server s {a}\n",
        a = srv.addr
    );
    let _s = Sluice::start(&cfg);
    for (port, want) in [(p1, "reset"), (p2, "eof")] {
        let mut c = HttpClient::connect(port);
        let r = c.request("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        assert_eq!((r.status, r.body_str().as_str()), (200, "ok"));
        let client_end = c.wait_closed(WAIT);
        let server_end = rx.recv_timeout(WAIT).expect("server connection end");
        match want {
            "reset" => assert!(
                matches!(client_end, Closed::Reset),
                "client: {client_end:?}"
            ),
            _ => assert!(matches!(client_end, Closed::Eof), "client: {client_end:?}"),
        }
        assert_eq!(server_end, want, "server side of port {port}");
    }
}

/// A server address without a port (or with `+N`/`-N`) connects to the port the client
/// connected to (plus N), as HAProxy's port mapping; such connections are not pooled for
/// other clients, and a checked one needs its own `port`.
#[test]
fn port_mapped_servers_follow_the_client_port() {
    // Servers on 127.0.0.2, on the frontend's port numbers (the frontend is on 127.0.0.1).
    let (p1, p2) = (free_port(), free_port());
    let bind2 = |p: u16| std::net::TcpListener::bind(("127.0.0.2", p)).expect("bind 127.0.0.2");
    let same = HttpBackend::from_listener("same", bind2(p1));
    let next = HttpBackend::from_listener("next", bind2(p2 + 1));
    let check_target = HttpBackend::start("chk");
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{p1}\n    default_backend mapped\n\
         frontend fe2\n    bind 127.0.0.1:{p2}\n    default_backend offset\n\
         backend mapped\n    option httpchk GET /health\n\
         server s 127.0.0.2 check addr 127.0.0.1 port {cport} inter 200ms\n\
         backend offset\n    server s 127.0.0.2:+1\n",
        cport = check_target.port()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(p1);
    assert_eq!(c.get("/a").server(), "same");
    assert_eq!(c.get("/b").server(), "same");
    assert_eq!(http_get(p2, "/").server(), "next", "port + 1");
    assert_eq!((same.reqs(), next.reqs()), (2, 1));
    // The check went to its own port.
    let r = check_target.wait_requests(1, WAIT);
    assert_eq!(r[0].target, "/health");
    drop(s);

    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}backend b\n    server s 127.0.0.2 check\n"
    ));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("server 's' has neither service port nor check port"),
        "{err}"
    );
}

/// `bind ... interface NAME` binds the listener to a device (`SO_BINDTODEVICE`): on `lo` it
/// serves loopback clients; a device that does not exist is a start-up error naming the bind.
#[test]
fn bind_interface() {
    let a = HttpBackend::start("A");
    let port = free_port();
    let cfg = |dev: &str| {
        format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} interface {dev}\n    default_backend be\n\
             backend be\n    server a {}\n",
            a.hostport()
        )
    };
    let s = Sluice::start(&cfg("lo"));
    assert_eq!(http_get(port, "/").server(), "A");
    drop(s);
    let bad = Sluice::builder(&cfg("nosuchdev0")).spawn();
    let st = bad
        .wait_exit(WAIT)
        .expect("sluice must exit when it cannot bind");
    assert!(!st.success());
    let err = bad.stderr_text();
    assert!(
        err.contains("Starting frontend fe: cannot bind socket")
            && err.contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

/// `bind ... tfo`: the listening socket takes TCP_FASTOPEN (a failure would stop the start)
/// and serves as any other.
#[test]
fn bind_with_tfo_serves() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} tfo\n    default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(http_get(port, "/").server(), "s1");
}
