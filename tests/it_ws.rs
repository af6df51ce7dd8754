//! WebSocket-style upgrades: 101 then a bidirectional byte tunnel; timeout tunnel; refused
//! upgrades stay HTTP.

mod common;

use common::*;
use std::io::Write;
use std::time::{Duration, Instant};

const UPGRADE_REQ: &str = "GET /chat HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

fn proxy(defaults: &str, b: &HttpBackend) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n{}",
        backend_section("be", "", &[b])
    );
    (Sluice::start(&cfg), port)
}

/// Sends the upgrade request and returns the client positioned after the 101 head.
fn upgrade(port: u16) -> HttpClient {
    let mut c = HttpClient::connect(port);
    c.send(UPGRADE_REQ);
    let r = c.read_response();
    assert_eq!(r.status, 101, "{:?}", r);
    assert_eq!(
        r.header("upgrade").map(|v| v.to_ascii_lowercase()),
        Some("websocket".into())
    );
    assert!(
        r.header("connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade")),
        "101 must carry Connection: upgrade: {:?}",
        r.headers
    );
    c
}

fn echo_round(c: &mut HttpClient, msg: &[u8]) {
    c.send(msg);
    let mut got = std::mem::take(&mut c.wire.buf);
    while got.len() < msg.len() {
        let mut b = [0u8; 65536];
        let n = read_retrying(&mut c.wire.stream, &mut b).expect("read from tunnel");
        assert!(n > 0, "tunnel closed early");
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, msg);
}

#[test]
fn upgrade_then_bidirectional_bytes() {
    let b = HttpBackend::with_handler("ws", |_| Reply::Upgrade);
    let (_s, port) = proxy(DEFAULTS_HTTP, &b);
    let mut c = upgrade(port);
    let req = b.last_request();
    assert_eq!(
        req.header("upgrade"),
        Some("websocket"),
        "Upgrade must reach the server: {:?}",
        req.headers
    );
    assert!(
        req.header("connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"))
    );
    assert_eq!(
        req.header("sec-websocket-key"),
        Some("dGhlIHNhbXBsZSBub25jZQ==")
    );
    // Frames are opaque bytes to the proxy, including things that look like HTTP.
    echo_round(&mut c, b"\x81\x05hello");
    echo_round(&mut c, b"GET / HTTP/1.1\r\nHost: not-http-anymore\r\n\r\n");
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    echo_round(&mut c, &big);
    // Client closes its side; the echo server closes too; the client sees EOF.
    c.shutdown_write();
    c.expect_closed();
}

#[test]
fn bytes_right_after_101_are_delivered() {
    let b = HttpBackend::with_handler("ws", |_| {
        Reply::RawClose(
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {WS_SAMPLE_ACCEPT}\r\n\r\nwelcome!"
            )
            .into_bytes(),
        )
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, &b);
    let mut c = upgrade(port);
    let rest = c.wire.read_to_end().unwrap();
    assert_eq!(String::from_utf8_lossy(&rest), "welcome!");
}

#[test]
fn refused_upgrade_stays_http() {
    let b = HttpBackend::start("plain");
    let (_s, port) = proxy(DEFAULTS_HTTP, &b);
    let mut c = HttpClient::connect(port);
    let r = c.request(UPGRADE_REQ);
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "plain");
    let r = c.get("/next");
    assert_eq!(
        r.status, 200,
        "connection must still speak HTTP after a refused upgrade"
    );
}

#[test]
fn timeout_tunnel_governs_an_upgraded_connection() {
    let b = HttpBackend::with_handler("ws", |_| Reply::Upgrade);
    let (_s, port) = proxy(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 200ms\n    timeout server 200ms\n    timeout tunnel 1200ms\n",
        &b,
    );
    let mut c = upgrade(port);
    echo_round(&mut c, b"x");
    let t0 = Instant::now();
    let closed = c.wait_closed(WAIT);
    let took = t0.elapsed();
    assert!(closed.is_closed(), "{closed:?}");
    assert!(
        took >= Duration::from_millis(1100),
        "tunnel closed after {took:?}: client/server timeout used"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
}

#[test]
fn upgrade_uses_its_own_server_connection() {
    // After a tunnel, the server connection can never be reused: a new client connection's
    // request must open a fresh one.
    let b = HttpBackend::with_handler("ws", |r| {
        if r.target == "/chat" {
            Reply::Upgrade
        } else {
            Reply::named("ws")
        }
    });
    let (_s, port) = proxy(DEFAULTS_HTTP, &b);
    let mut c = upgrade(port);
    echo_round(&mut c, b"abc");
    let r = http_get(port, "/plain");
    assert_eq!(r.status, 200);
    assert_eq!(b.conns(), 2);
    echo_round(&mut c, b"still tunnelled");
    c.wire.stream.write_all(b"").unwrap();
}

/// The bytes of an upgraded connection count both ways: the client's in `%U` and `bin`,
/// the server's in `%B` and `bout`, for the frontend, the backend and the server.
#[test]
fn tunnel_bytes_are_counted_both_ways() {
    let b = HttpBackend::with_handler("ws", |_| Reply::Upgrade);
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{LOGGED_HTTP}frontend fe\n    \
         bind 127.0.0.1:{port}\n    log-format \"ws %U %B\"\n    default_backend be\n{}",
        sock.display(),
        backend_section("be", "", &[&b])
    );
    let s = Sluice::start(&cfg);
    let mut c = upgrade(port);
    let msg = vec![b'x'; 10_000];
    echo_round(&mut c, &msg);
    c.shutdown_write();
    c.expect_closed();
    let line = s.wait_log_line(|l| l.starts_with("ws "), WAIT);
    let n: Vec<u64> = line[3..].split(' ').map(|v| v.parse().unwrap()).collect();
    assert!(n[0] > 10_000 && n[1] > 10_000, "{line}");
    for (px, sv) in [
        ("fe", "FRONTEND"),
        ("be", "BACKEND"),
        ("be", b.name.as_str()),
    ] {
        // The counters are added as the session ends, which may be just after its log line.
        let counted = || {
            let bin: u64 = stat_column(&sock, px, sv, "bin").parse().unwrap();
            let bout: u64 = stat_column(&sock, px, sv, "bout").parse().unwrap();
            bin > 10_000 && bout > 10_000
        };
        wait_until(&format!("{px}/{sv} bytes counted both ways"), WAIT, counted);
    }
}
