//! `retry-on` and `retries`: which failures after a request was sent make sluice send it
//! again, and that only requests it can replay (idempotent, no body) ever are.

mod common;

use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// A server whose first `bad` requests get `fail`, and later ones a 200 naming the target.
fn flaky(bad: usize, fail: impl Fn() -> Reply + Send + Sync + 'static) -> HttpBackend {
    let n = Arc::new(AtomicUsize::new(0));
    HttpBackend::with_handler("s1", move |r| {
        if n.fetch_add(1, SeqCst) < bad {
            fail()
        } else {
            Reply::echo_target("s1", r)
        }
    })
}

/// One thread, `be_extra` in the backend, `http-reuse never` so every attempt is on a new
/// connection (the reused-connection replay, sluice's own rule, is tested in it_pool).
fn proxy(b: &HttpBackend, be_extra: &str) -> (Sluice, u16) {
    let port = free_port();
    let global = LOGGED_HTTP.replacen("global\n", "global\n    nbthread 1\n", 1);
    let cfg = format!(
        "{global}    timeout server 300ms\nfrontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    http-reuse never\n{be_extra}\n    server s1 {}\n",
        b.hostport()
    );
    (Sluice::start(&cfg), port)
}

fn post(port: u16) -> Response {
    http_raw(
        port,
        "POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
}

#[test]
fn empty_response_is_retried_only_when_asked() {
    let b = flaky(1, || Reply::Close);
    let (_s, port) = proxy(&b, "");
    assert_eq!(
        http_get(port, "/a").status,
        502,
        "default retry-on conn-failure"
    );
    let b = flaky(1, || Reply::Close);
    let (s, port) = proxy(&b, "    retry-on empty-response");
    let r = http_get(port, "/a");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "/a");
    assert_eq!(b.reqs(), 2);
    assert_eq!(b.conns(), 2, "the retry went on a new connection");
    // The log line counts the retry (HAProxy's `retries` field).
    let line = s.wait_log_line(|l| l.contains("GET /a"), WAIT);
    assert!(line.contains(" 200 "), "{line}");
}

#[test]
fn a_post_is_never_retried() {
    let b = flaky(1, || Reply::Close);
    let (_s, port) = proxy(&b, "    retry-on all-retryable-errors");
    assert_eq!(post(port).status, 502);
    assert_eq!(b.reqs(), 1, "the POST was sent once");
}

#[test]
fn statuses_are_retried_and_the_last_answer_is_kept_when_retries_run_out() {
    let b = flaky(1, || Reply::status(503, "s1", "busy"));
    let (_s, port) = proxy(&b, "    retry-on 503");
    let r = http_get(port, "/a");
    assert_eq!(r.status, 200);
    assert_eq!(b.reqs(), 2);
    // 404 is not in the list: answered as is.
    let b = flaky(1, || Reply::status(404, "s1", "nope"));
    let (_s, port) = proxy(&b, "    retry-on 503");
    assert_eq!(http_get(port, "/a").status, 404);
    assert_eq!(b.reqs(), 1);
    // `retries 2`: three attempts in all, then the last 503 goes to the client.
    let b = flaky(100, || Reply::status(503, "s1", "busy"));
    let (_s, port) = proxy(&b, "    retries 2\n    retry-on 503 504");
    let r = http_get(port, "/a");
    assert_eq!(r.status, 503);
    assert_eq!(r.body_str(), "busy");
    assert_eq!(b.reqs(), 3);
}

#[test]
fn response_timeout_and_junk_response() {
    let b = flaky(1, || Reply::Hang);
    let (_s, port) = proxy(&b, "    retry-on response-timeout");
    assert_eq!(http_get(port, "/slow").status, 200);
    assert_eq!(b.reqs(), 2);
    let b = flaky(1, || Reply::Hang);
    let (_s, port) = proxy(&b, "");
    assert_eq!(http_get(port, "/slow").status, 504);
    let b = flaky(1, || Reply::RawClose(b"NOT HTTP\r\n\r\n".to_vec()));
    let (_s, port) = proxy(&b, "    retry-on junk-response");
    assert_eq!(http_get(port, "/j").status, 200);
    assert_eq!(b.reqs(), 2);
}

#[test]
fn retry_on_config_errors() {
    let (code, err) = Sluice::check(
        "defaults\n    mode http\nbackend be\n    retry-on empty-response bogus\n    server s1 127.0.0.1:1\n",
    );
    assert_ne!(code, 0);
    assert!(
        err.contains(":4") && err.contains("retry-on") && err.contains("'bogus'"),
        "{err}"
    );
    let (code, err) = Sluice::check(
        "defaults\n    mode http\nbackend be\n    retry-on none 503\n    server s1 127.0.0.1:1\n",
    );
    assert_ne!(code, 0);
    assert!(err.contains("'none'"), "{err}");
    let (code, err) = Sluice::check(
        "defaults\n    mode http\n    retry-on 503\nbackend be\n    retry-on 502 conn-failure\n    server s1 127.0.0.1:1\n",
    );
    assert_eq!(code, 0, "{err}");
}
