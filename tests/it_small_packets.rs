//! No 40 ms Nagle/delayed-ACK stalls: a server that writes its response head and body in
//! two sends with Nagle on, a client that sends its request in two segments, and a client
//! that reads one byte at a time all get their answers at once. And no segment more than
//! needed: a closing response carries the FIN, and `tcp-smart-accept` (the default in
//! `mode http`) lets the response acknowledge the request.

mod common;

use common::*;
use std::io::Write;
use std::time::{Duration, Instant};

/// A keep-alive server that answers every request with two writes (head, then body), Nagle
/// left on as Python's `http.server` does.
fn two_send_server() -> TcpBackend {
    TcpBackend::with_handler(|c, _| {
        let mut w = Wire::new(c);
        while let Ok(Some(_)) = w.read_until(b"\r\n\r\n") {
            let body = b"hello from a naive server";
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            if w.stream.write_all(head.as_bytes()).is_err() || w.stream.write_all(body).is_err() {
                return;
            }
        }
    })
}

fn proxy_to(addr: std::net::SocketAddr) -> (Sluice, u16) {
    proxy_with(addr, "")
}

/// [`proxy_to`] with `extra` lines (each ending in a newline) in `defaults`.
fn proxy_with(addr: std::net::SocketAddr, extra: &str) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n{DEFAULTS_HTTP}{extra}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server s1 {addr}\n"
    );
    (Sluice::start(&cfg), port)
}

/// Twelve requests on one keep-alive connection whose Nagle is on, each written by `send`
/// in pieces: past the first two, the median answer takes under 15 ms (a piece held until
/// the ACK of the one before, delayed by the proxy's kernel, would take ~40).
fn nagle_client_is_never_stalled(port: u16, send: impl Fn(&mut HttpClient, usize)) {
    let mut c = HttpClient::connect(port);
    c.tcp().set_nodelay(false).unwrap();
    let mut times = Vec::new();
    for i in 0..12 {
        let t = Instant::now();
        send(&mut c, i);
        assert_eq!(c.read_response().status, 200, "{i}");
        times.push(t.elapsed());
    }
    let m = median(times[2..].to_vec());
    assert!(m < Duration::from_millis(15), "median {m:?}: {times:?}");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Every request through a proxy whose kernel delays ACKs would take ~40 ms here (the
/// server's Nagle waits for the ACK of the head before sending the body).
#[test]
fn a_server_writing_head_and_body_apart_costs_no_40ms() {
    let server = two_send_server();
    let (_s, port) = proxy_to(server.addr);
    assert_no_stall(port, |r| {
        assert_eq!(r.body_str(), "hello from a naive server");
    });
}

/// Fifteen keep-alive GETs after three of warm-up (the first exchanges of a connection are
/// acknowledged at once anyway): each a 200 that `check` accepts, the median well under the
/// 40 ms of a delayed ACK.
fn assert_no_stall(port: u16, check: impl Fn(&Response)) {
    let mut c = HttpClient::connect(port);
    for _ in 0..3 {
        assert_eq!(c.get("/").status, 200);
    }
    let mut times = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let r = c.get("/");
        times.push(t.elapsed());
        assert_eq!(r.status, 200);
        check(&r);
    }
    let m = median(times.clone());
    assert!(m < Duration::from_millis(15), "median {m:?}: {times:?}");
}

/// A server that writes most of a large body, then its last bytes in a second send (Nagle
/// on, as a sendfile that ran out of send buffer does): the tail waits for the ACK of what
/// precedes it. The head arrives with far more than a buffer of body, so only the read that
/// drains the socket mid-body can tell that an ACK is owed; without one the kernel delays it
/// up to 40 ms on every request.
#[test]
fn a_server_holding_its_last_bytes_for_an_ack_costs_no_40ms() {
    const BULK: usize = 60 * 1024;
    const TAIL: usize = 100;
    let server = TcpBackend::with_handler(|c, _| {
        let mut w = Wire::new(c);
        let mut first =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BULK + TAIL).into_bytes();
        first.extend(std::iter::repeat_n(b'a', BULK));
        let tail = vec![b'z'; TAIL];
        while let Ok(Some(_)) = w.read_until(b"\r\n\r\n") {
            if w.stream.write_all(&first).is_err() || w.stream.write_all(&tail).is_err() {
                return;
            }
        }
    });
    let (_s, port) = proxy_to(server.addr);
    assert_no_stall(port, |r| {
        assert_eq!(r.body.len(), BULK + TAIL);
        assert!(r.body.ends_with(&[b'z'; TAIL]));
    });
}

/// A request sent in two segments with a pause between them is answered as soon as the
/// second arrives.
#[test]
fn a_request_in_two_segments_is_answered_at_once() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy_to(b.addr);
    let mut times = Vec::new();
    let mut c = HttpClient::connect(port);
    for i in 0..5 {
        c.send("GET /two HTTP/1.1\r\nHo");
        // The pause is the point of the test: the head arrives in two segments.
        std::thread::sleep(Duration::from_millis(30));
        let t = Instant::now();
        c.send("st: t\r\n\r\n");
        assert_eq!(c.read_response().status, 200, "{i}");
        times.push(t.elapsed());
    }
    let m = median(times.clone());
    assert!(m < Duration::from_millis(15), "median {m:?}: {times:?}");
}

/// A client reading its response one byte per read gets it whole and promptly.
#[test]
fn a_client_reading_byte_by_byte_gets_its_answer_at_once() {
    let b = HttpBackend::with_handler("s1", |_| Reply::status(200, "s1", vec![b'x'; 1500]));
    let (_s, port) = proxy_to(b.addr);
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        c.write_all(b"GET /bytes HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut one = [0u8; 1];
        while !got.ends_with(&[b'x'; 1500][..]) || !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = read_retrying(&mut c, &mut one).unwrap();
            assert_eq!(n, 1, "closed early after {} bytes", got.len());
            got.push(one[0]);
        }
        times.push(t.elapsed());
        assert!(got.starts_with(b"HTTP/1.1 200"));
    }
    let m = median(times.clone());
    assert!(m < Duration::from_millis(15), "median {m:?}: {times:?}");
}

/// `option tcp-smart-accept` delays the ACK of what a client sends, but not when a body is
/// announced: a client whose Nagle holds its body until the head is acknowledged (a POST in
/// two writes) is not made to wait 40 ms. `tcp-smart-connect` keeps server connections
/// working as usual.
#[test]
fn tcp_smart_accept_never_stalls_a_client_sending_a_body() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy_with(
        b.addr,
        "    option tcp-smart-accept\n    option tcp-smart-connect\n",
    );
    // The body waits for the ACK of the head.
    nagle_client_is_never_stalled(port, |c, i| {
        c.send(format!(
            "POST /p{i} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n"
        ));
        c.send("hello");
    });
    assert_eq!(b.reqs(), 12);
}

/// One `Connection: close` GET on a new connection: the response text, and the segments
/// the client received (all, with data).
fn close_get(port: u16, i: usize) -> (String, u32, u32) {
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(format!("GET /r{i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut w = Wire::new(c);
    let got = w.read_to_end().expect("reading the response");
    let (all, data) = segments_in(&w.stream);
    (String::from_utf8_lossy(&got).into_owned(), all, data)
}

/// The last response of a `Connection: close` client leaves with the FIN, in one segment:
/// besides the response, the client receives only the SYN-ACK and at most the ACK of its
/// request. (Sent apart, the FIN is one more segment for both ends to process, on every
/// request.) With `no option tcp-smart-accept` too.
#[test]
fn a_close_response_leaves_with_its_fin() {
    // Head and body in two sends: the proxy gets and writes them as two pieces too.
    let b = two_send_server();
    for extra in ["", "    no option tcp-smart-accept\n"] {
        let (_s, port) = proxy_with(b.addr, extra);
        for i in 0..3 {
            let (text, all, data) = close_get(port, i);
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(text.ends_with("hello from a naive server"), "{text}");
            assert_eq!(data, 1, "the response in one segment");
            assert!(
                all - data <= 2,
                "{extra}request {i}: {all} segments in, {data} with data: the FIN came apart"
            );
        }
    }
}

/// `tcp-smart-accept` is on by default in `mode http`, as in HAProxy: the ACK of a client's
/// request rides on the response, so a `Connection: close` client receives two segments in
/// all (SYN-ACK, response with FIN). `no option tcp-smart-accept` acknowledges the request
/// apart, as does a `mode tcp` listener. (The delayed ACK fires on its own after 40 ms: on a
/// loaded machine one answer may be slower than that, so the best of five is compared.)
#[test]
fn smart_accept_is_on_by_default_in_http_mode() {
    let b = two_send_server();
    let least = |extra: &str| {
        let (_s, port) = proxy_with(b.addr, extra);
        (0..5)
            .map(|i| {
                let (text, all, _) = close_get(port, i);
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                all
            })
            .min()
            .unwrap()
    };
    assert_eq!(least(""), 2, "the request's ACK rides on the response");
    assert_eq!(least("    option tcp-smart-accept\n"), 2);
    assert_eq!(
        least("    no option tcp-smart-accept\n"),
        3,
        "the request acknowledged at once"
    );
}

/// Under `tcp-smart-accept` (the default in `mode http`), a client with Nagle on that writes
/// its head in two pieces is not made to wait 40 ms for the ACK of the first: a partial head
/// is acknowledged at once.
#[test]
fn a_head_written_in_two_pieces_with_nagle_on_costs_no_40ms() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy_with(b.addr, "    option tcp-smart-accept\n");
    // The second piece waits for the ACK of the first.
    nagle_client_is_never_stalled(port, |c, i| {
        c.send(format!("GET /p{i} HTTP/1.1\r\nHo"));
        c.send("st: t\r\n\r\n");
    });
}
