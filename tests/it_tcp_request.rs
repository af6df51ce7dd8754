//! `tcp-request connection|content accept|reject` and `tcp-request inspect-delay`, with
//! `req.ssl_hello_type`, `req.ssl_sni` and `req.len`: TLS passthrough routed by SNI, as
//! HAProxy users write it, with real sockets on both sides.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;

/// [`send`] in two pieces split at `at`: the second goes once sluice has read the first (and
/// waits for the rest).
fn send_in_two(port: u16, data: &[u8], at: usize) -> Vec<u8> {
    let mut c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(&data[..at]).unwrap();
    wait_consumed(&c);
    c.write_all(&data[at..]).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    got
}

#[test]
fn tls_passthrough_routed_by_sni() {
    let (a, b) = (recorder("A"), recorder("B"));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content accept if {{ req_ssl_hello_type 1 }}\n\
         \x20   tcp-request content reject\n\
         \x20   use_backend a if {{ req.ssl_sni -i a.example.com }}\n    default_backend b\n\
         backend a\n    server a {}\nbackend b\n    server b {}\n",
        a.b.hostport(),
        b.b.hostport()
    );
    let s = Sluice::start(&cfg);
    // The ClientHello goes to the server its SNI names, byte for byte.
    let hello = client_hello(Some("A.example.com"));
    assert_eq!(tcp_send(port, &hello), b"A");
    assert_eq!(a.seen.lock().unwrap().as_slice(), &[hello]);
    assert_eq!(tcp_send(port, &client_hello(Some("other.example"))), b"B");
    assert_eq!(tcp_send(port, &client_hello(None)), b"B");
    // A ClientHello sent in two pieces is waited for.
    let hello = client_hello(Some("a.example.com"));
    assert_eq!(send_in_two(port, &hello, 7), b"A");
    assert_eq!(a.seen.lock().unwrap().last().unwrap(), &hello);
    // Not TLS: rejected, logged PR, no server sees it.
    let before = a.b.conns() + b.b.conns();
    assert_eq!(tcp_send(port, b"GET / HTTP/1.0\r\n\r\n"), b"");
    let line = s.wait_log_line(|l| l.contains(" PR "), WAIT);
    assert!(line.contains(" fe fe/<NOSRV> "), "{line}");
    assert_eq!(a.b.conns() + b.b.conns(), before);
}

/// `req.ssl_alpn`: the first protocol the ClientHello offers (ACME's TLS-ALPN-01 challenge
/// routed to its own server, as HAProxy's documentation shows it).
#[test]
fn tls_passthrough_routed_by_alpn() {
    let (acme, web) = (recorder("ACME"), recorder("WEB"));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content accept if {{ req_ssl_hello_type 1 }}\n\
         \x20   use_backend acme if {{ req.ssl_alpn acme-tls/1 }}\n    default_backend web\n\
         backend acme\n    server a {}\nbackend web\n    server w {}\n",
        acme.b.hostport(),
        web.b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let hello = client_hello_alpn(Some("x.example"), &["acme-tls/1"]);
    assert_eq!(tcp_send(port, &hello), b"ACME");
    assert_eq!(acme.seen.lock().unwrap().as_slice(), &[hello]);
    assert_eq!(
        tcp_send(port, &client_hello_alpn(None, &["h2", "http/1.1"])),
        b"WEB"
    );
    assert_eq!(tcp_send(port, &client_hello(None)), b"WEB");
}

#[test]
fn backend_content_rules_and_connection_rules() {
    let a = recorder("A");
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        "global\n    stats socket {} level admin\n{LOGGED_TCP}\
         frontend open\n    bind 127.0.0.1:{p1}\n    tcp-request inspect-delay 2s\n\
         \x20   default_backend guarded\n\
         frontend closed\n    bind 127.0.0.1:{p2}\n    tcp-request connection reject if {{ src 127.0.0.0/8 }}\n\
         \x20   default_backend guarded\n\
         backend guarded\n    tcp-request content reject if {{ req.len lt 4 }}\n    server a {}\n",
        sock.display(),
        a.b.hostport()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(tcp_send(p1, b"long enough"), b"A");
    assert_eq!(tcp_send(p1, b"ab"), b"");
    assert_eq!(a.seen.lock().unwrap().len(), 1);
    assert_eq!(stat_column(&sock, "guarded", "BACKEND", "dreq"), "1");
    // Refused as it connects, before any byte.
    let mut c = TcpStream::connect(lo(p2)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(c.read(&mut b), Ok(0) | Err(_)));
    assert_eq!(stat_column(&sock, "closed", "FRONTEND", "dcon"), "1");
    assert_eq!(a.b.conns(), 1);
}

#[test]
fn config_checks() {
    let (code, out) = Sluice::check(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n\
         frontend fe\n    bind 127.0.0.1:1\n    tcp-request content accept if { req_ssl_hello_type 1 }\n\
         \x20   tcp-request content track-sc0 src\n    tcp-request session accept\n\
         backend be\n    tcp-request connection reject\n    server s 127.0.0.1:1\n",
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(":8: 'tcp-request content' in frontend 'fe': in 'mode http'"),
        "{out}"
    );
    assert!(out.contains(":9: unable to find stick-table 'fe'"), "{out}");
    assert!(
        out.contains(":10: ") && out.contains("'tcp-request session' rules are not supported"),
        "{out}"
    );
    assert!(
        out.contains(":12: ") && out.contains("only apply to frontends"),
        "{out}"
    );
}

/// `HTTP` (`req.proto_http`) in `mode tcp`: protocol detection on the client's first data, as
/// in a frontend that sends HTTP to a web server and anything else elsewhere. A request head
/// in two pieces is waited for.
#[test]
fn http_detected_in_tcp_mode() {
    let (web, other) = (recorder("WEB"), recorder("OTHER"));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content accept if HTTP\n\
         \x20   use_backend web if HTTP\n    default_backend other\n\
         backend web\n    server w {}\nbackend other\n    server o {}\n",
        web.b.hostport(),
        other.b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(tcp_send(port, req), b"WEB");
    assert_eq!(web.seen.lock().unwrap().as_slice(), &[req.to_vec()]);
    assert_eq!(tcp_send(port, b"SSH-2.0-OpenSSH_9.2\r\n"), b"OTHER");
    assert_eq!(tcp_send(port, &[0, 1, 2, 3]), b"OTHER");
    assert_eq!(send_in_two(port, req, 10), b"WEB");
    assert_eq!(web.seen.lock().unwrap().last().unwrap(), &req.to_vec());
}

/// `req.payload(OFF,LEN) -m bin HEX`: protocols told apart by their first bytes (SOCKS5 starts
/// with 0x05, RDP's TPKT with 0x03), as real multiplexing configurations do.
#[test]
fn first_bytes_route_with_req_payload() {
    let (socks, rdp, other) = (recorder("SOCKS"), recorder("RDP"), recorder("OTHER"));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 1s\n\
         \x20   acl is_socks5 req.payload(0,1) -m bin 05\n\
         \x20   acl is_rdp req.payload(0,2) -m bin 0300\n\
         \x20   tcp-request content accept if is_socks5 || is_rdp\n\
         \x20   tcp-request content accept if {{ req.len gt 0 }}\n\
         \x20   use_backend socks if is_socks5\n    use_backend rdp if is_rdp\n\
         \x20   default_backend other\n\
         backend socks\n    server s {}\nbackend rdp\n    server r {}\nbackend other\n    server o {}\n",
        socks.b.hostport(),
        rdp.b.hostport(),
        other.b.hostport()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(tcp_send(port, &[5, 1, 0]), b"SOCKS");
    assert_eq!(socks.seen.lock().unwrap().as_slice(), &[vec![5, 1, 0]]);
    assert_eq!(tcp_send(port, &[3, 0, 0, 19, 14]), b"RDP");
    // 03 01 is not RDP's 03 00: the default.
    assert_eq!(tcp_send(port, &[3, 1, 0]), b"OTHER");
    // Text that could be the start of an HTTP request is held up to the inspect delay.
    assert_eq!(tcp_send(port, b"hello"), b"OTHER");
    let (code, err) = Sluice::check(&format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   acl a req.payload(0,1) -m bin 5\n    acl b req.payload(0) -m bin 05\n\
         \x20   default_backend o\nbackend o\n    server o 127.0.0.1:1\n"
    ));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("'5' is not a valid hex string"), "{err}");
    assert!(
        err.contains("'req.payload' expects (OFFSET,LENGTH)"),
        "{err}"
    );
}

/// Whether this process may put a socket in TCP repair mode (CAP_NET_ADMIN), as sluice's
/// `silent-drop` tries first.
fn can_repair() -> bool {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    nix::sys::socket::setsockopt(&c, nix::sys::socket::sockopt::TcpRepair, &1).is_ok()
}

/// A client whose connection sluice silently dropped: with TCP repair, nothing at all
/// reaches it (no answer, no FIN, no RST) until it sends again, which the kernel, holding no
/// socket for it any more, answers with a reset. Without repair, the reset of the close (its
/// TTL of 1 does not matter on loopback).
fn assert_silently_dropped(mut c: TcpStream, repair: bool, what: &str) {
    let mut b = [0u8; 64];
    c.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let r = c.read(&mut b);
    if !repair {
        assert!(
            matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{what}: {r:?}"
        );
        return;
    }
    assert!(
        matches!(&r, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut)),
        "{what}: the client must hear nothing, got {r:?}"
    );
    c.set_read_timeout(Some(WAIT)).unwrap();
    let _ = c.write_all(b"more");
    let r = c.read(&mut b);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{what}: the connection must be gone on sluice's side, got {r:?}"
    );
}

/// `silent-drop` in `tcp-request connection`, `tcp-request content`, `http-request` and
/// `http-response` rules: the connection disappears without the client being told, and the
/// denial is counted (and logged `PR` in `mode http`).
#[test]
fn silent_drop_leaves_the_client_unaware() {
    let repair = can_repair();
    let a = recorder("A");
    let web = HttpBackend::start("web");
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let (p1, p2, p3, p4) = (free_port(), free_port(), free_port(), free_port());
    let cfg = format!(
        "global\n    stats socket {} level admin\n{LOGGED_TCP}\
         frontend conn\n    bind 127.0.0.1:{p1}\n    tcp-request connection silent-drop\n\
         \x20   default_backend raw\n\
         frontend content\n    bind 127.0.0.1:{p2}\n    tcp-request inspect-delay 2s\n\
         \x20   tcp-request content silent-drop if {{ req.len ge 4 }}\n    default_backend raw\n\
         frontend req\n    mode http\n    option httplog\n    bind 127.0.0.1:{p3}\n\
         \x20   http-request silent-drop if {{ path /drop }}\n    default_backend web\n\
         frontend rsp\n    mode http\n    option httplog\n    bind 127.0.0.1:{p4}\n\
         \x20   http-response silent-drop if {{ status 200 }}\n    default_backend web\n\
         backend raw\n    server a {}\n\
         backend web\n    mode http\n    server w {}\n",
        sock.display(),
        a.b.hostport(),
        web.hostport()
    );
    let s = Sluice::start(&cfg);
    let counted = |fe: &str, col: &str| {
        wait_until(&format!("{fe} {col} = 1"), WAIT, || {
            stat_column(&sock, fe, "FRONTEND", col) == "1"
        })
    };

    let c = TcpStream::connect(lo(p1)).unwrap();
    counted("conn", "dcon");
    assert_silently_dropped(c, repair, "tcp-request connection");

    let mut c = TcpStream::connect(lo(p2)).unwrap();
    c.write_all(b"hello").unwrap();
    counted("content", "dreq");
    assert_silently_dropped(c, repair, "tcp-request content");

    // The same frontend lets another request through: only the matching one is dropped.
    assert_eq!(http_get(p3, "/ok").status, 200);
    let mut c = TcpStream::connect(lo(p3)).unwrap();
    c.write_all(b"GET /drop HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let line = s.wait_log_line(|l| l.contains("GET /drop"), WAIT);
    assert!(
        line.contains(" PR--") && line.contains(" req req/<NOSRV> "),
        "{line}"
    );
    counted("req", "dreq");
    assert_silently_dropped(c, repair, "http-request");

    let mut c = TcpStream::connect(lo(p4)).unwrap();
    c.write_all(b"GET /r HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let line = s.wait_log_line(|l| l.contains("GET /r "), WAIT);
    assert!(line.contains(" PR--"), "{line}");
    counted("rsp", "dreq");
    assert_silently_dropped(c, repair, "http-response");
    assert_eq!(web.requests().len(), 2, "/ok and /r reached the server");
    assert!(a.seen.lock().unwrap().is_empty());
}
