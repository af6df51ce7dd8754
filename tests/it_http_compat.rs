//! Request-path behaviours found by comparing sluice with HAProxy 2.6 on the same bytes
//! (`bench/http_diff.py`): empty lines before a request, CRLF-only chunked framing in requests,
//! bad response framing arriving with the head, error answers closed without a reset, the
//! absolute-form authority against `Host`, a repeated identical `Host`, and a WebSocket
//! handshake without its key.

mod common;

use common::*;
use std::io::{Read, Write};

fn proxy(b: &HttpBackend) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n{}",
        backend_section("be", "", &[b])
    );
    (Sluice::start(&cfg), port)
}

#[test]
fn empty_lines_before_a_request_are_skipped() {
    let b = HttpBackend::start("b");
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    // Before the first request, bare LF and CRLF alike (RFC 9112 §2.2).
    let r = c.request("\r\n\nGET /first HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(r.status, 200);
    let req = b.last_request();
    assert_eq!(req.target, "/first");
    assert!(
        req.raw_head.starts_with(b"GET /first HTTP/1.1\r\n"),
        "the server got {:?}",
        String::from_utf8_lossy(&req.raw_head)
    );
    // A stray CRLF after a POST body (old clients send one), then a pipelined request.
    c.send(
        "POST /post HTTP/1.1\r\nHost: example.com\r\nContent-Length: 2\r\n\r\nab\r\n\
         GET /after HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(c.read_response().status, 200);
    assert_eq!(c.read_response().status, 200);
    let reqs = b.wait_requests(3, WAIT);
    assert_eq!(reqs[1].target, "/post");
    assert_eq!(reqs[1].body, b"ab");
    assert_eq!(reqs[2].target, "/after");
    assert!(reqs[2].raw_head.starts_with(b"GET /after HTTP/1.1\r\n"));
}

#[test]
fn a_bare_lf_in_request_chunked_framing_is_refused() {
    let b = HttpBackend::start("b");
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    c.send(
        "POST /x HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n",
    );
    let r = c.read_response();
    assert_eq!(r.status, 400);
    c.expect_closed();
    assert_eq!(b.reqs(), 0, "nothing may reach the server");
    // The same body with CRLF goes through.
    let mut c = HttpClient::connect(port);
    let r = c.request(
        "POST /x HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(b.last_request().body, b"abc");
}

#[test]
fn bad_chunk_framing_arriving_with_the_response_head_is_a_502() {
    let srv = TcpBackend::with_handler(|mut s, _| {
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while find(&head, b"\r\n\r\n").is_none() {
            match s.read(&mut b) {
                Ok(n) if n > 0 => head.extend_from_slice(&b[..n]),
                _ => return,
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n");
        let _ = s.read_to_end(&mut head);
    });
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        srv.hostport()
    );
    let _s = Sluice::start(&cfg);
    let r = http_get(port, "/");
    assert_eq!(r.status, 502);
}

#[test]
fn an_error_answer_with_input_left_unread_ends_with_a_fin_not_a_reset() {
    let b = HttpBackend::start("b");
    let (_s, port) = proxy(&b);
    let mut c = HttpClient::connect(port);
    // A request line far over the buffer: sluice answers 414 having read only part of it.
    let mut raw = b"GET /".to_vec();
    raw.extend(std::iter::repeat_n(b'a', 64 * 1024));
    raw.extend_from_slice(b" HTTP/1.1\r\nHost: example.com\r\n\r\n");
    c.send(&raw);
    let r = c.read_response();
    assert_eq!(r.status, 414);
    // Closed without unread input in sluice's socket, which would have sent a reset (and a
    // reset can destroy the answer before a client on a real network reads it).
    assert_eq!(c.wait_closed(WAIT), Closed::Eof);
    assert_eq!(b.reqs(), 0);
}

#[test]
fn an_absolute_form_authority_must_match_host() {
    let b = HttpBackend::start("b");
    let (_s, port) = proxy(&b);
    let r = http_raw(
        port,
        "GET http://other.example/x HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    assert_eq!(b.reqs(), 0);
    let r = http_raw(
        port,
        "GET http://Example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(b.last_request().target, "http://Example.com/x");
}

#[test]
fn a_repeated_identical_host_is_forwarded_once() {
    let b = HttpBackend::start("b");
    let (_s, port) = proxy(&b);
    let r = http_raw(
        port,
        "GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\nhost: a.example\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let req = b.last_request();
    assert_eq!(req.headers_named("host"), vec!["a.example"]);
    assert_eq!(req.header("x-a"), Some("1"));
}

#[test]
fn a_websocket_upgrade_without_its_key_is_refused() {
    let b = HttpBackend::start("b");
    let (_s, port) = proxy(&b);
    let r = http_raw(
        port,
        "GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    assert_eq!(b.reqs(), 0);
    // Any other Upgrade, or a plain request naming websocket without Connection: upgrade,
    // goes through.
    let r = http_raw(
        port,
        "GET /x HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}
