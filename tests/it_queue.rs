//! Server `maxconn` with the backend queue: FIFO service order, `timeout queue`, `maxqueue`.

mod common;

use common::*;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn start(be_extra: &str, server_opts: &str, b: &HttpBackend, defaults: &str) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n{be_extra}\n    server s1 {} {server_opts}\n",
        b.hostport()
    );
    (Sluice::start(&cfg), port)
}

/// Sends `GET path` on a new connection, returns once sluice has read it; the response is
/// collected by the returned thread.
fn send_bg(port: u16, path: &str) -> JoinHandle<(Response, Duration)> {
    let mut c = HttpClient::connect(port);
    let t0 = Instant::now();
    c.send(format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    ));
    wait_consumed(c.tcp());
    std::thread::spawn(move || {
        let r = c.read_final(false);
        (r, t0.elapsed())
    })
}

#[test]
fn maxconn_queues_requests_and_serves_them_in_fifo_order() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port) = start("", "maxconn 1", &b, DEFAULTS_HTTP);
    let first = send_bg(port, "/slow0");
    b.wait_requests(1, WAIT);
    // While /slow0 holds the only slot, four more arrive, in this order.
    let queued: Vec<_> = (1..=4)
        .map(|i| send_bg(port, &format!("/slow{i}")))
        .collect();
    // None of them may reach the server while the slot is taken.
    assert_eq!(b.reqs(), 1);
    assert_eq!(
        b.open_conns(),
        1,
        "maxconn 1 means one server connection at a time"
    );
    for i in 1..=5 {
        gate.release(1);
        if i < 5 {
            let reqs = b.wait_requests(i + 1, WAIT);
            assert_eq!(
                reqs.len(),
                i + 1,
                "only one queued request may be dequeued per freed slot"
            );
        }
    }
    let (r, _) = first.join().unwrap();
    assert_eq!(r.body_str(), "/slow0");
    for (i, h) in queued.into_iter().enumerate() {
        let (r, _) = h.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body_str(), format!("/slow{}", i + 1));
    }
    let order: Vec<String> = b.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        order,
        vec!["/slow0", "/slow1", "/slow2", "/slow3", "/slow4"],
        "queue must be FIFO"
    );
}

#[test]
fn timeout_queue_answers_503() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (s, port) = start("    timeout queue 400ms", "maxconn 1", &b, LOGGED_HTTP);
    let first = send_bg(port, "/slow0");
    b.wait_requests(1, WAIT);
    let waiting = send_bg(port, "/queued");
    let (r, took) = waiting.join().unwrap();
    assert_eq!(r.status, 503);
    assert!(
        r.body_str().contains("503 Service Unavailable"),
        "{}",
        r.body_str()
    );
    assert!(
        took >= Duration::from_millis(380),
        "503 came after {took:?}, before timeout queue"
    );
    assert!(took < Duration::from_secs(5), "503 came after {took:?}");
    assert_eq!(
        b.reqs(),
        1,
        "the timed-out request must not reach the server"
    );
    let line = s.wait_log_line(|l| l.contains("/queued"), WAIT);
    assert!(
        line.contains(" 503 ") && line.contains(" sQ-- "),
        "queue timeout is logged as sQ: {line}"
    );
    gate.open();
    assert_eq!(first.join().unwrap().0.status, 200);
}

#[test]
fn queued_request_is_served_before_timeout_queue_when_a_slot_frees() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port) = start("    timeout queue 5s", "maxconn 1", &b, DEFAULTS_HTTP);
    let first = send_bg(port, "/slow0");
    b.wait_requests(1, WAIT);
    let second = send_bg(port, "/fast");
    gate.release(1);
    let (r, took) = second.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "/fast");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(first.join().unwrap().0.status, 200);
}

#[test]
fn maxqueue_rejects_beyond_the_server_queue_length() {
    // maxqueue limits a server's own queue, used when the algorithm picked that server (here a
    // hash): with no other server to redispatch to, the request is refused.
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port) = start(
        "    balance uri\n    timeout queue 10s",
        "maxconn 1 maxqueue 1",
        &b,
        DEFAULTS_HTTP,
    );
    let first = send_bg(port, "/k?slow0");
    b.wait_requests(1, WAIT);
    let second = send_bg(port, "/k?slow1");
    // The queue (length 1) is full: the third must be refused without waiting for a slot.
    let t0 = Instant::now();
    let third = http_get(port, "/k?third");
    assert_eq!(third.status, 503, "{}", third.body_str());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(b.reqs(), 1);
    gate.open();
    assert_eq!(first.join().unwrap().0.status, 200);
    let (r, _) = second.join().unwrap();
    assert_eq!((r.status, r.body_str()), (200, "/k?slow1".to_string()));
    assert!(b.requests().iter().all(|r| r.target != "/k?third"));
}

/// `option abortonclose`: a queued request whose client closes is dropped (logged `CQ`) and
/// never reaches the server; without it, a half-closed client still gets its response.
#[test]
fn abortonclose_drops_a_queued_request_whose_client_left() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (s, port) = start("    option abortonclose", "maxconn 1", &b, LOGGED_HTTP);
    let first = send_bg(port, "/slow0");
    b.wait_requests(1, WAIT);
    let mut c = HttpClient::connect(port);
    c.send("GET /gone HTTP/1.1\r\nHost: t\r\n\r\n");
    wait_consumed(c.tcp());
    c.shutdown_write();
    let line = s.wait_log_line(|l| l.contains("/gone"), WAIT);
    assert!(
        line.contains(" CQ-- "),
        "aborted in queue is logged as CQ: {line}"
    );
    assert!(
        matches!(c.wait_closed(WAIT), Closed::Eof),
        "sluice closes the client"
    );
    gate.open();
    assert_eq!(first.join().unwrap().0.status, 200);
    // A later request proves the slot was released and /gone never went out.
    let after = send_bg(port, "/after");
    assert_eq!(after.join().unwrap().0.status, 200);
    let order: Vec<String> = b.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(order, vec!["/slow0", "/after"]);
}

#[test]
fn without_abortonclose_a_half_closed_client_still_gets_its_response() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port) = start("", "maxconn 1", &b, DEFAULTS_HTTP);
    let first = send_bg(port, "/slow0");
    b.wait_requests(1, WAIT);
    let mut c = HttpClient::connect(port);
    c.send("GET /kept HTTP/1.1\r\nHost: t\r\n\r\n");
    wait_consumed(c.tcp());
    c.shutdown_write();
    gate.open();
    assert_eq!(first.join().unwrap().0.status, 200);
    let r = c.read_final(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "/kept");
}

#[test]
fn requests_queued_for_a_server_put_in_maintenance_go_to_another() {
    let gate = Gate::new();
    let b1 = HttpBackend::gated("s1", &gate);
    let b2 = HttpBackend::gated("s2", &gate);
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}    timeout queue 20s\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    balance uri\n    hash-type consistent\n\
         \x20   server s1 {} maxconn 1\n    server s2 {} maxconn 1\n",
        sock.display(),
        b1.hostport(),
        b2.hostport()
    );
    let _s = Sluice::start(&cfg);
    // A path that hashes to s1 (`balance uri` ignores the query string).
    let path = (0..200)
        .map(|i| format!("/k{i}"))
        .find(|p| http_get(port, p).server() == "s1")
        .expect("some path hashes to s1");
    let held = send_bg(port, &format!("{path}?slow"));
    wait_until("s1 busy", WAIT, || {
        stat_column(&sock, "be", "s1", "scur") == "1"
    });
    // Same hash: waits in s1's own queue.
    let queued = send_bg(port, &format!("{path}?q"));
    wait_until("request queued for s1", WAIT, || {
        stat_column(&sock, "be", "s1", "qcur") == "1"
    });
    assert_eq!(stats_cli(&sock, "set server be/s1 state maint"), "\n");
    let (r, _) = queued.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.server(), "s2");
    assert_eq!(stat_column(&sock, "be", "s1", "qcur"), "0");
    gate.open();
    assert_eq!(held.join().unwrap().0.server(), "s1");
}
