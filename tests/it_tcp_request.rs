//! `tcp-request connection|content accept|reject` and `tcp-request inspect-delay`, with
//! `req.ssl_hello_type`, `req.ssl_sni` and `req.len`: TLS passthrough routed by SNI, as
//! HAProxy users write it, with real sockets on both sides.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

/// A TLS 1.2-style ClientHello record offering one cipher suite and, if given, an SNI.
fn client_hello(sni: Option<&str>) -> Vec<u8> {
    client_hello_alpn(sni, &[])
}

/// [`client_hello`] with an ALPN extension listing `alpn` (none when empty).
fn client_hello_alpn(sni: Option<&str>, alpn: &[&str]) -> Vec<u8> {
    let mut ext = Vec::new();
    if !alpn.is_empty() {
        let list: Vec<u8> = alpn
            .iter()
            .flat_map(|p| [&[p.len() as u8][..], p.as_bytes()].concat())
            .collect();
        ext.extend_from_slice(&[0, 16]); // application_layer_protocol_negotiation
        ext.extend_from_slice(&(list.len() as u16 + 2).to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
    }
    if let Some(name) = sni {
        let n = name.len() as u16;
        ext.extend_from_slice(&[0, 0]); // server_name
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0); // host_name
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name.as_bytes());
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A server that records the first bytes each connection sends, then answers its name.
struct Recorder {
    b: TcpBackend,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

fn recorder(name: &'static str) -> Recorder {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let b = TcpBackend::with_handler(move |mut s, _| {
        let mut buf = vec![0u8; 4096];
        s.set_read_timeout(Some(WAIT)).unwrap();
        if let Ok(n) = s.read(&mut buf) {
            s2.lock().unwrap().push(buf[..n].to_vec());
            let _ = s.write_all(name.as_bytes());
        }
    });
    Recorder { b, seen }
}

fn send(port: u16, data: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(data).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

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
    assert_eq!(send(port, &hello), b"A");
    assert_eq!(a.seen.lock().unwrap().as_slice(), &[hello]);
    assert_eq!(send(port, &client_hello(Some("other.example"))), b"B");
    assert_eq!(send(port, &client_hello(None)), b"B");
    // A ClientHello sent in two pieces is waited for.
    let hello = client_hello(Some("a.example.com"));
    assert_eq!(send_in_two(port, &hello, 7), b"A");
    assert_eq!(a.seen.lock().unwrap().last().unwrap(), &hello);
    // Not TLS: rejected, logged PR, no server sees it.
    let before = a.b.conns() + b.b.conns();
    assert_eq!(send(port, b"GET / HTTP/1.0\r\n\r\n"), b"");
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
    assert_eq!(send(port, &hello), b"ACME");
    assert_eq!(acme.seen.lock().unwrap().as_slice(), &[hello]);
    assert_eq!(
        send(port, &client_hello_alpn(None, &["h2", "http/1.1"])),
        b"WEB"
    );
    assert_eq!(send(port, &client_hello(None)), b"WEB");
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
    assert_eq!(send(p1, b"long enough"), b"A");
    assert_eq!(send(p1, b"ab"), b"");
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
    assert_eq!(send(port, req), b"WEB");
    assert_eq!(web.seen.lock().unwrap().as_slice(), &[req.to_vec()]);
    assert_eq!(send(port, b"SSH-2.0-OpenSSH_9.2\r\n"), b"OTHER");
    assert_eq!(send(port, &[0, 1, 2, 3]), b"OTHER");
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
    assert_eq!(send(port, &[5, 1, 0]), b"SOCKS");
    assert_eq!(socks.seen.lock().unwrap().as_slice(), &[vec![5, 1, 0]]);
    assert_eq!(send(port, &[3, 0, 0, 19, 14]), b"RDP");
    // 03 01 is not RDP's 03 00: the default.
    assert_eq!(send(port, &[3, 1, 0]), b"OTHER");
    // Text that could be the start of an HTTP request is held up to the inspect delay.
    assert_eq!(send(port, b"hello"), b"OTHER");
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
