//! `send-proxy`, `send-proxy-v2` and `source` on servers: the PROXY header a server gets
//! (traffic in both modes, health checks), connections that carry a client's address staying
//! private to that client, and the local address connections are made from.

mod common;

use common::*;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

/// What a test server saw on one connection: the peer address and its PROXY header.
type Seen = Arc<Mutex<Vec<(std::net::SocketAddr, Vec<u8>)>>>;

/// An HTTP server that reads a PROXY v1 line first, then answers every request on the
/// connection with that line (without its CRLF) as the body.
fn v1_echo() -> (TcpBackend, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let server = TcpBackend::with_handler(move |c, _| {
        let peer = c.peer_addr().unwrap();
        let mut w = Wire::new(c);
        let Ok(Some(line)) = w.read_until(b"\r\n") else {
            return;
        };
        log.lock().unwrap().push((peer, line.clone()));
        let body = &line[..line.len() - 2];
        while let Ok(Some(_)) = w.read_until(b"\r\n\r\n") {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            if w.stream.write_all(head.as_bytes()).is_err() || w.stream.write_all(body).is_err() {
                return;
            }
        }
    });
    (server, seen)
}

fn http_proxy(addr: std::net::SocketAddr, be_extra: &str, server_opts: &str) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n{be_extra}    server s1 {addr} {server_opts}\n"
    );
    (Sluice::start(&cfg), port)
}

/// `send-proxy`: a new server connection starts with `PROXY TCP4 <client> <frontend> ...`;
/// it serves its client's later requests, and never another client's, even under
/// `http-reuse always`.
#[test]
fn send_proxy_tells_the_server_the_client_and_keeps_the_connection_private() {
    let (server, seen) = v1_echo();
    let (_s, port) = http_proxy(server.addr, "    http-reuse always\n", "send-proxy");
    let expect =
        |c: &HttpClient| format!("PROXY TCP4 127.0.0.1 127.0.0.1 {} {port}", c.local_port());
    let mut a = HttpClient::connect(port);
    for i in 0..2 {
        let r = a.get(&format!("/a{i}"));
        assert_eq!((r.status, r.body_str()), (200, expect(&a)));
    }
    assert_eq!(
        server.conns(),
        1,
        "the client's later request used its connection"
    );
    let mut b = HttpClient::connect(port);
    let r = b.get("/b");
    assert_eq!((r.status, r.body_str()), (200, expect(&b)));
    assert_eq!(
        server.conns(),
        2,
        "another client never gets that connection"
    );
    // And the first client still has its own.
    let r = a.get("/a2");
    assert_eq!(r.body_str(), expect(&a));
    assert_eq!(server.conns(), 2);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// `send-proxy-v2` in `mode tcp`: the binary header (signature, PROXY command, TCP over
/// IPv4, both addresses and ports) comes first, then the client's bytes.
#[test]
fn send_proxy_v2_in_tcp_mode() {
    // Echoes the header (16 + 12 bytes) and the bytes after it.
    let server = TcpBackend::with_handler(|mut c, _| {
        let mut buf = [0u8; 28 + 5];
        if c.read_exact(&mut buf).is_ok() {
            let _ = c.write_all(&buf);
        }
    });
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\nlisten l\n    bind 127.0.0.1:{port}\n    server s1 {} send-proxy-v2\n",
        server.addr
    );
    let _s = Sluice::start(&cfg);
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"hello").unwrap();
    let mut got = [0u8; 33];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got[..12], b"\r\n\r\n\0\r\nQUIT\n");
    assert_eq!(&got[12..16], &[0x21, 0x11, 0, 12]);
    assert_eq!(&got[16..24], &[127, 0, 0, 1, 127, 0, 0, 1]);
    let client_port = c.local_addr().unwrap().port();
    assert_eq!(&got[24..26], &client_port.to_be_bytes());
    assert_eq!(&got[26..28], &port.to_be_bytes());
    assert_eq!(&got[28..], b"hello");
}

/// `source ADDR`: traffic and health checks leave from that address; checks of a
/// `send-proxy` server carry the header too, in its `UNKNOWN` form (a check has no client).
#[test]
fn source_address_and_proxy_header_of_checks() {
    let (server, seen) = v1_echo();
    let (_s, port) = http_proxy(
        server.addr,
        "",
        "send-proxy source 127.0.0.2 check inter 100ms",
    );
    let r = http_get(port, "/x");
    assert_eq!(r.status, 200);
    assert!(
        r.body_str().starts_with("PROXY TCP4 127.0.0.1 "),
        "{}",
        r.body_str()
    );
    wait_until("a health check arrived", WAIT, || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(_, l)| l == b"PROXY UNKNOWN\r\n")
    });
    for (peer, line) in seen.lock().unwrap().iter() {
        assert_eq!(
            peer.ip(),
            std::net::IpAddr::from([127, 0, 0, 2]),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}

/// `source ADDR` in a backend (here after the server line, as HAProxy allows): servers
/// without their own `source` connect from there, traffic and checks alike; a server's own
/// `source` wins.
#[test]
fn backend_source_applies_to_servers_without_their_own() {
    let (a, seen_a) = v1_echo();
    let (b, seen_b) = v1_echo();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    balance roundrobin\n    server a {} send-proxy check inter 100ms\n    server b {} send-proxy source 127.0.0.4\n    source 127.0.0.3\n",
        a.addr, b.addr
    );
    let _s = Sluice::start(&cfg);
    for i in 0..4 {
        assert_eq!(http_get(port, &format!("/{i}")).status, 200);
    }
    wait_until("a health check of server a arrived", WAIT, || {
        seen_a
            .lock()
            .unwrap()
            .iter()
            .any(|(_, l)| l == b"PROXY UNKNOWN\r\n")
    });
    let ips = |seen: &Seen| -> Vec<std::net::IpAddr> {
        seen.lock().unwrap().iter().map(|(p, _)| p.ip()).collect()
    };
    let (ia, ib) = (ips(&seen_a), ips(&seen_b));
    assert!(ia.len() >= 2 && ib.len() >= 2, "{ia:?} {ib:?}");
    assert!(
        ia.iter()
            .all(|ip| *ip == std::net::IpAddr::from([127, 0, 0, 3])),
        "{ia:?}"
    );
    assert!(
        ib.iter()
            .all(|ip| *ip == std::net::IpAddr::from([127, 0, 0, 4])),
        "{ib:?}"
    );
}

/// `source ADDR:LOW-HIGH` on a server: each new connection takes the next port of the range.
#[test]
fn server_source_port_range() {
    let (a, seen) = v1_echo();
    // Four ports free on 127.0.0.5 (no other test binds that address).
    let lo = loop {
        let p = free_port();
        if p < 65000 && (p..p + 4).all(|q| std::net::TcpListener::bind(("127.0.0.5", q)).is_ok()) {
            break p;
        }
    };
    let hi = lo + 3;
    let (_s, port) = http_proxy(
        a.addr,
        "    option httpclose\n",
        &format!("send-proxy source 127.0.0.5:{lo}-{hi}"),
    );
    for i in 0..8 {
        assert_eq!(http_get(port, &format!("/{i}")).status, 200);
    }
    let ports: Vec<u16> = seen.lock().unwrap().iter().map(|(p, _)| p.port()).collect();
    assert_eq!(ports.len(), 8, "a connection per request: {ports:?}");
    assert!(
        ports.iter().all(|p| (lo..=hi).contains(p)),
        "{lo}-{hi}: {ports:?}"
    );
    let distinct: std::collections::HashSet<_> = ports.iter().collect();
    assert_eq!(
        distinct.len(),
        4,
        "every port of the range in turn: {ports:?}"
    );
    // Two servers in turn, each with its own range: each uses every port of its own (a
    // cursor shared by the servers would give each only some).
    let (b, seen_b) = v1_echo();
    let lo2 = loop {
        let p = free_port();
        if p < 65000 && (p..p + 2).all(|q| std::net::TcpListener::bind(("127.0.0.6", q)).is_ok()) {
            break p;
        }
    };
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         default_backend be\nbackend be\n    option httpclose\n    balance roundrobin\n    \
         server a {} send-proxy source 127.0.0.6:{lo2}-{}\n    \
         server b {} send-proxy source 127.0.0.6:{lo2}-{}\n",
        a.addr,
        lo2 + 1,
        b.addr,
        lo2 + 1
    );
    let _s2 = Sluice::start(&cfg);
    seen.lock().unwrap().clear();
    for i in 0..8 {
        assert_eq!(http_get(port, &format!("/{i}")).status, 200);
    }
    for s in [&seen, &seen_b] {
        let ports: std::collections::HashSet<u16> =
            s.lock().unwrap().iter().map(|(p, _)| p.port()).collect();
        assert_eq!(ports.len(), 2, "both ports of the range: {ports:?}");
    }
    let (code, err) = Sluice::check(
        "defaults\n    mode http\nbackend be\n    server s1 127.0.0.1:1 source 127.0.0.1:2000-1000\n",
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("the port range ends (1000) before it starts (2000)"),
        "{err}"
    );
}

/// The keywords are checked: `source` needs an IP address, and the transparent-proxy forms
/// and TLV variants remain unsupported errors.
#[test]
fn send_proxy_and_source_errors() {
    for (opts, want) in [
        ("source localhost", "is not an IP address"),
        ("source 127.0.0.1 usesrc clientip", "usesrc"),
        ("send-proxy-v2-ssl", "send-proxy-v2-ssl"),
    ] {
        let (code, err) = Sluice::check(&format!(
            "defaults\n    mode http\nbackend be\n    server s1 127.0.0.1:1 {opts}\n"
        ));
        assert_ne!(code, 0, "{opts}");
        assert!(err.contains(":4") && err.contains(want), "{opts}: {err}");
    }
    let (code, err) = Sluice::check(
        "defaults\n    mode http\nbackend be\n    default-server send-proxy source 127.0.0.1:0\n    server s1 127.0.0.1:1 no-send-proxy\n",
    );
    assert_eq!(code, 0, "{err}");
    // The proxy-level keyword: in defaults and backends, with the same address rules.
    for (section, line, want) in [
        (
            "backend be",
            "source 127.0.0.1 usesrc clientip",
            "'usesrc' after 'source ADDR' is not supported",
        ),
        (
            "backend be",
            "source 127.0.0.1 interface eth0",
            "'interface' after 'source ADDR'",
        ),
        ("backend be", "source localhost", "is not an IP address"),
        ("backend be", "source", "address"),
    ] {
        let (code, err) =
            Sluice::check(&format!("defaults\n    mode http\n{section}\n    {line}\n"));
        assert_ne!(code, 0, "{line}");
        assert!(err.contains(":4") && err.contains(want), "{line}: {err}");
    }
    // In a frontend it means nothing: ignored with HAProxy's warning.
    let (code, err) = Sluice::check("defaults\n    mode http\nfrontend fe\n    source 127.0.0.1\n");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(":4: 'source' ignored because frontend 'fe' has no backend capability"),
        "{err}"
    );
    let (code, err) = Sluice::check(
        "defaults\n    mode http\n    source 127.0.0.1:0\nbackend be\n    server s1 127.0.0.1:1\n",
    );
    assert_eq!(code, 0, "{err}");
}

/// `bind ... accept-proxy`: the PROXY header (v1 or v2, possibly in pieces) is consumed, its
/// client address is the one logs, rules and `X-Forwarded-For` see; `tcp-request connection`
/// rules still see the connection's own address; anything else is refused and logged as
/// HAProxy logs it.
#[test]
fn accept_proxy_takes_the_client_address_from_the_header() {
    use sluice::send_proxy::{Version, header};
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port} accept-proxy name pp\n\
         \x20   tcp-request connection reject if {{ src 192.0.2.0/24 }}\n\
         \x20   option forwardfor\n    http-request deny if {{ src 203.0.113.0/24 }}\n\
         \x20   default_backend be\nbackend be\n    server s1 {}\n",
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let client = "192.0.2.10:5555".parse().unwrap();
    let dst = "198.51.100.1:80".parse().unwrap();
    for v in [Version::V1, Version::V2] {
        let mut c = HttpClient::connect(port);
        let h = header(v, Some(client), Some(dst));
        // The header in two pieces, then a request on the same connection.
        c.wire.stream.write_all(&h[..5]).unwrap();
        wait_consumed(&c.wire.stream);
        c.wire.stream.write_all(&h[5..]).unwrap();
        let r = c.request("GET /pp HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200, "{v:?}");
        assert_eq!(
            b.last_request().header("x-forwarded-for"),
            Some("192.0.2.10"),
            "{v:?}"
        );
    }
    let line = s.wait_log_line(|l| l.contains("/pp "), WAIT);
    assert!(line.starts_with("192.0.2.10:5555 "), "{line}");
    // A rule after the header sees the header's address.
    let mut c = HttpClient::connect(port);
    let h = header(
        Version::V1,
        Some("203.0.113.5:1".parse().unwrap()),
        Some(dst),
    );
    c.wire.stream.write_all(&h).unwrap();
    assert_eq!(c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n").status, 403);
    // No header: closed without an answer, and logged.
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    let line = s.wait_log_line(|l| l.contains("PROXY protocol"), WAIT);
    assert!(
        line.contains(
            " fe/pp: Received something which does not look like a PROXY protocol header"
        ),
        "{line}"
    );
}

/// `fc_pp_authority` and `fc_pp_unique_id`: the authority (type 0x02) and unique id (0x05)
/// TLVs of a PROXY v2 header, for headers, variables and conditions; empty without them.
#[test]
fn accept_proxy_v2_tlvs() {
    use sluice::send_proxy::{Version, header};
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} accept-proxy\n\
         \x20   http-request deny if {{ fc_pp_authority -m str blocked.example }}\n\
         \x20   http-request set-var(txn.id) fc_pp_unique_id\n\
         \x20   http-request set-header X-PP-Id %[var(txn.id)]\n\
         \x20   http-request set-header X-PP-Authority %[fc_pp_authority]\n\
         \x20   default_backend be\nbackend be\n    server s1 {}\n",
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let with_tlvs = |tlvs: &[(u8, &[u8])]| {
        let mut h = header(
            Version::V2,
            Some("192.0.2.10:5555".parse().unwrap()),
            Some("198.51.100.1:80".parse().unwrap()),
        );
        for (t, v) in tlvs {
            h.push(*t);
            h.extend_from_slice(&(v.len() as u16).to_be_bytes());
            h.extend_from_slice(v);
        }
        let n = (h.len() - 16) as u16;
        h[14..16].copy_from_slice(&n.to_be_bytes());
        h
    };
    let get = |h: Vec<u8>| {
        let mut c = HttpClient::connect(port);
        c.wire.stream.write_all(&h).unwrap();
        c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n").status
    };
    let h = with_tlvs(&[
        (0x02, b"app.example"),
        (0x04, b"\0\0\0\0"),
        (0x05, b"req-42"),
    ]);
    assert_eq!(get(h), 200);
    let r = b.last_request();
    assert_eq!(r.header("x-pp-id"), Some("req-42"));
    assert_eq!(r.header("x-pp-authority"), Some("app.example"));
    assert_eq!(get(with_tlvs(&[(0x02, b"blocked.example")])), 403);
    assert_eq!(get(with_tlvs(&[])), 200);
    let r = b.last_request();
    assert_eq!(r.header("x-pp-id"), Some(""));
    assert_eq!(r.header("x-pp-authority"), Some(""));
}
