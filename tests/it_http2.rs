//! HTTP/2 clients: prior knowledge on a clear-text bind (detected from the preface, or forced
//! with `proto h2`), each stream relayed to HTTP/1.1 servers as HAProxy 2.6 relays it (checked
//! against HAProxy 2.6.12 on the same requests): `host` from `:authority` first, `cookie`
//! fields merged, bodies of unknown length chunked, hop-by-hop fields dropped from answers,
//! the request line logged as `METHOD scheme://authority/path HTTP/2.0`, one session per
//! connection. The client is the `h2` crate's, over real sockets.

mod common;

use bytes::Bytes;
use common::h2server::{H2Server, Seen};
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

type Client = h2::client::SendRequest<Bytes>;

/// An HTTP/2 connection with prior knowledge; its driver runs on the test's runtime.
async fn connect(port: u16) -> Client {
    let tcp = tokio::net::TcpStream::connect(lo(port)).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// What a stream got back: status, fields, body, trailers.
struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

impl Got {
    fn all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }
}

/// Sends `req` with `body` (none: the HEADERS frame ends the stream; the body goes in
/// several DATA frames otherwise) and reads the whole answer.
async fn exchange(c: &mut Client, req: http::Request<()>, body: Option<&[u8]>) -> Got {
    let mut c = c.clone().ready().await.unwrap();
    let (rsp, mut tx) = c.send_request(req, body.is_none()).unwrap();
    if let Some(b) = body {
        for piece in b.chunks(10_000) {
            tx.reserve_capacity(piece.len());
            let mut left = Bytes::copy_from_slice(piece);
            while !left.is_empty() {
                let n = std::future::poll_fn(|cx| tx.poll_capacity(cx))
                    .await
                    .unwrap()
                    .unwrap();
                let part = left.split_to(n.min(left.len()));
                tx.send_data(part, false).unwrap();
            }
        }
        tx.send_data(Bytes::new(), true).unwrap();
    }
    let rsp = rsp.await.unwrap();
    let (parts, mut b) = rsp.into_parts();
    let mut body = Vec::new();
    while let Some(d) = b.data().await {
        let d = d.unwrap();
        body.extend_from_slice(&d);
        let _ = b.flow_control().release_capacity(d.len());
    }
    let trailers = b.trailers().await.unwrap();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
        trailers,
    }
}

/// Waits (polling, bounded by `T`) until `cond` holds, without blocking the test's runtime.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + T;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The SETTINGS sluice sends first on a connection opened with the HTTP/2 preface.
fn server_settings(port: u16) -> std::collections::HashMap<u16, u32> {
    use std::io::{Read, Write};
    let mut t = std::net::TcpStream::connect(lo(port)).unwrap();
    t.set_read_timeout(Some(T)).unwrap();
    t.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    let mut head = [0u8; 9];
    t.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "the first frame must be SETTINGS");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut body = vec![0u8; len];
    t.read_exact(&mut body).unwrap();
    body.chunks(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect()
}

fn get(port: u16, path: &str) -> http::Request<()> {
    http::Request::builder()
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .body(())
        .unwrap()
}

fn proxy(fe_extra: &str, global: &str, be: &HttpBackend) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "global\n{global}\
defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port}\n    option httplog\n    log stdout format raw local0\n{fe_extra}\
\x20   default_backend be\n\
backend be\n    server s1 {}\n",
        be.hostport()
    );
    (Sluice::start(&cfg), port)
}

#[test]
fn prior_knowledge_requests_reach_http1_servers_as_haproxy_sends_them() {
    let be = HttpBackend::with_handler("s1", |_| Reply::Full {
        status: 200,
        headers: vec![
            ("Connection".into(), "keep-alive".into()),
            ("Keep-Alive".into(), "timeout=5".into()),
            ("Set-Cookie".into(), "s1=one".into()),
            ("Set-Cookie".into(), "s2=two".into()),
            ("X-Mixed-Case".into(), "Yes".into()),
        ],
        body: b"hello".to_vec(),
    });
    let (s, port) = proxy("", "", &be);
    let got = rt().block_on(async {
        let mut c = connect(port).await;
        let req = http::Request::builder()
            .uri(format!("http://127.0.0.1:{port}/a/b?x=1"))
            .header("x-foo", "bar")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        exchange(&mut c, req, None).await
    });
    let r = be.last_request();
    assert_eq!(
        String::from_utf8_lossy(&r.raw_head),
        format!(
            "GET /a/b?x=1 HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nx-foo: bar\r\n\
cookie: a=1; b=2\r\n\r\n"
        )
    );
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"hello");
    assert_eq!(got.all("set-cookie"), ["s1=one", "s2=two"]);
    assert_eq!(got.all("x-mixed-case"), ["Yes"]);
    assert_eq!(got.all("content-length"), ["5"]);
    for hop in ["connection", "keep-alive", "transfer-encoding"] {
        assert!(got.all(hop).is_empty(), "{hop} reached the HTTP/2 client");
    }
    s.wait_log_line(
        |l| l.contains(&format!("\"GET http://127.0.0.1:{port}/a/b?x=1 HTTP/2.0\"")),
        T,
    );
    // HTTP/1.1 on the same port is untouched.
    let r = http_get(port, "/h1");
    assert_eq!(r.status, 200);
    s.wait_log_line(|l| l.contains("\"GET /h1 HTTP/1.1\""), T);
}

#[test]
fn authority_wins_over_host_and_requests_without_authority_keep_their_host() {
    let be = HttpBackend::start("s1");
    let (_s, port) = proxy("", "", &be);
    rt().block_on(async {
        let mut c = connect(port).await;
        let req = http::Request::builder()
            .uri("http://auth.example/q")
            .header("host", "host.example")
            .body(())
            .unwrap();
        assert_eq!(exchange(&mut c, req, None).await.status, 200);
        let r = be.last_request();
        assert_eq!(r.headers_named("host"), ["auth.example"]);
        // Origin-form `:path` with no `:authority` (the h2 crate sends none for a
        // relative URI): the `host` field is passed as it is.
        let req = http::Request::builder()
            .uri("/r")
            .header("host", "only.example")
            .body(())
            .unwrap();
        assert_eq!(exchange(&mut c, req, None).await.status, 200);
        let r = be.last_request();
        assert_eq!(r.target, "/r");
        assert_eq!(r.headers_named("host"), ["only.example"]);
    });
}

#[test]
fn bodies_cross_in_both_directions_beyond_the_flow_control_windows() {
    // 300 kB each way: several times the 65535-byte initial windows of both sides.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let answer = big.clone();
    let be = HttpBackend::with_handler("s1", move |r| {
        if r.target == "/chunked" {
            let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            raw.extend_from_slice(&chunked(&answer, 7000));
            return Reply::Raw(raw);
        }
        Reply::Full {
            status: 200,
            headers: vec![],
            body: if r.method == "POST" {
                format!("got {}", r.body.len()).into_bytes()
            } else {
                answer.clone()
            },
        }
    });
    let (_s, port) = proxy("", "", &be);
    rt().block_on(async {
        let mut c = connect(port).await;
        // Upload with a length: passed with its content-length.
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{port}/up"))
            .header("content-length", big.len().to_string())
            .body(())
            .unwrap();
        let got = exchange(&mut c, req, Some(&big)).await;
        assert_eq!(got.body, format!("got {}", big.len()).as_bytes());
        let r = be.last_request();
        assert!(!r.chunked);
        assert_eq!(r.header("content-length"), Some("300000"));
        assert_eq!(r.body, big);
        // Upload of unknown length: chunked to the server.
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{port}/up2"))
            .body(())
            .unwrap();
        let got = exchange(&mut c, req, Some(&big)).await;
        assert_eq!(got.body, format!("got {}", big.len()).as_bytes());
        let r = be.last_request();
        assert!(
            r.chunked,
            "a body of unknown length must reach the server chunked"
        );
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.body, big);
        // Downloads, with a length and chunked (de-chunked, no length added).
        let got = exchange(&mut c, get(port, "/down"), None).await;
        assert_eq!(got.body.len(), big.len());
        assert!(got.body == big);
        assert_eq!(got.all("content-length"), ["300000"]);
        let got = exchange(&mut c, get(port, "/chunked"), None).await;
        assert!(got.body == big);
        assert!(got.all("content-length").is_empty());
        // HEAD: the length of the GET, no body.
        let req = http::Request::builder()
            .method("HEAD")
            .uri(format!("http://127.0.0.1:{port}/down"))
            .body(())
            .unwrap();
        let got = exchange(&mut c, req, None).await;
        assert_eq!(got.status, 200);
        assert!(got.body.is_empty());
        assert_eq!(got.all("content-length"), ["300000"]);
    });
}

#[test]
fn concurrent_streams_count_as_one_session_and_errors_keep_the_connection() {
    let gate = Gate::new();
    let be = HttpBackend::gated("s1", &gate);
    let dead = closed_port();
    let port = free_port();
    let sock = TempDir::new();
    let sock = sock.path().join("stats.sock");
    let cfg = format!(
        "global\n    stats socket {}\n    tune.h2.max-concurrent-streams 7\n\
defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port}\n    option httplog\n    log stdout format raw local0\n\
\x20   http-request deny if {{ path_beg /deny }}\n\
\x20   use_backend down if {{ path_beg /down }}\n    default_backend be\n\
backend be\n    server s1 {}\n\
backend down\n    retries 0\n    server d 127.0.0.1:{dead}\n",
        sock.display(),
        be.hostport()
    );
    let s = Sluice::start(&cfg);
    // The limit announced is tune.h2.max-concurrent-streams (SETTINGS_MAX_CONCURRENT_STREAMS).
    assert_eq!(server_settings(port).get(&3), Some(&7));
    rt().block_on(async {
        let mut c = connect(port).await;
        let _ = exchange(&mut c, get(port, "/first"), None).await;
        // Ten streams at once, held by the server until all have reached it.
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let mut c = c.clone();
                tokio::spawn(async move {
                    exchange(&mut c, get(port, &format!("/slow/{i}")), None).await
                })
            })
            .collect();
        // At most the announced 7 are open at once; the rest wait in the client.
        until("7 streams at the server", || be.requests().len() >= 8).await;
        assert_eq!(
            be.requests().len(),
            8,
            "more streams than announced were opened"
        );
        assert!(tasks.iter().all(|t| !t.is_finished()));
        gate.open();
        for (i, t) in tasks.into_iter().enumerate() {
            let g = t.await.unwrap();
            assert_eq!(g.status, 200);
            assert_eq!(g.body, format!("/slow/{i}").as_bytes());
        }
        // A denial and a dead server are answered on their stream; the connection serves on.
        assert_eq!(exchange(&mut c, get(port, "/deny"), None).await.status, 403);
        // (502: sluice's answer to a failed connect, see docs/compat.md; HAProxy's is 503.)
        assert_eq!(exchange(&mut c, get(port, "/down"), None).await.status, 502);
        assert_eq!(exchange(&mut c, get(port, "/last"), None).await.status, 200);
    });
    s.wait_log_line(|l| l.contains("PR--") && l.contains("/deny HTTP/2.0"), T);
    s.wait_log_line(
        |l| l.contains(" 502 ") && l.contains("SC--") && l.contains("/down HTTP/2.0"),
        T,
    );
    wait_until("the connection's end is counted", T, || {
        stat_column(&sock, "fe", "FRONTEND", "scur") == "0"
    });
    // Two connections (the SETTINGS probe and the client's), whatever their streams.
    assert_eq!(stat_column(&sock, "fe", "FRONTEND", "stot"), "2");
    assert_eq!(stat_column(&sock, "fe", "FRONTEND", "req_tot"), "14");
}

#[test]
fn proto_h2_binds_speak_http2_only_and_proto_h1_binds_never_switch() {
    let be = HttpBackend::start("s1");
    let (h2port, h1port) = (free_port(), free_port());
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend f2\n    bind 127.0.0.1:{h2port} proto h2\n    default_backend be\n\
frontend f1\n    bind 127.0.0.1:{h1port} proto h1\n    default_backend be\n\
backend be\n    server s1 {}\n",
        be.hostport()
    );
    let _s = Sluice::start(&cfg);
    rt().block_on(async {
        let mut c = connect(h2port).await;
        assert_eq!(exchange(&mut c, get(h2port, "/"), None).await.status, 200);
    });
    // HTTP/1.1 on the h2-only bind: closed without an HTTP/1 answer, as HAProxy does (what
    // comes back is HTTP/2 frames, the server's SETTINGS, at most).
    let got = tcp_send(h2port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(
        !got.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(
        be.requests().len(),
        1,
        "the HTTP/1 request must not reach the server"
    );
    // The preface on an h1-only bind is an HTTP/1 request like any other: 400.
    let got = tcp_send(h1port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert!(
        got.starts_with(b"HTTP/1.1 400"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn a_failed_preface_is_logged_as_haproxy_logs_it() {
    // HAProxy 2.6.12 on a `proto h2` bind: an HTTP/1 request, or a broken preface, gives
    // `fe fe/<NOSRV> -1/-1/-1/-1/0 0 0 - - PR-- ... "<BADREQ>"`; a connection closed before
    // sending anything too, except under `option dontlognull`.
    let be = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n\
defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port} proto h2\n    option httplog\n    option dontlognull\n\
\x20   log stdout format raw local0\n    default_backend be\n\
backend be\n    server s1 {}\n",
        be.hostport()
    );
    let s = Sluice::start(&cfg);
    // Nothing sent, then closed: not logged (dontlognull). Then an HTTP/1 request, then a
    // broken preface: both logged, in that order, with nothing before them.
    drop(std::net::TcpStream::connect(lo(port)).unwrap());
    tcp_send(port, b"GET /h1 HTTP/1.1\r\nHost: a\r\n\r\n");
    tcp_send(port, b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
    let lines = s.wait_log_lines(2, |l| l.contains("<BADREQ>"), T);
    for l in &lines {
        assert!(
            l.contains(" fe fe/<NOSRV> -1/-1/-1/-1/") && l.contains(" 0 0 - - PR-- "),
            "{l}"
        );
        assert!(l.ends_with("\"<BADREQ>\""), "{l}");
    }
    // Give the empty connection's line, had there been one, the time to come: a third
    // connection's line is awaited, and only then are all lines counted.
    tcp_send(port, b"GET /third HTTP/1.1\r\nHost: a\r\n\r\n");
    let lines = s.wait_log_lines(3, |l| l.contains("<BADREQ>"), T);
    let all = s.stdout.snapshot();
    let logged: Vec<_> = all.iter().filter(|l| l.contains(" fe fe/")).collect();
    assert_eq!(logged.len(), 3, "{all:?}");
    assert!(lines[2].contains("PR--"));
    assert!(be.requests().is_empty());
}

#[test]
fn configuration_errors_for_proto_and_tune_h2() {
    let bad = [
        (
            "frontend f\n    mode tcp\n    bind :8080 proto h2\n    default_backend b\nbackend b\n    mode tcp\n    server s 127.0.0.1:1\n",
            "'mode tcp'",
        ),
        (
            "frontend f\n    mode http\n    bind :8080 proto h3\n    default_backend b\nbackend b\n    server s 127.0.0.1:1\n",
            "unknown protocol 'h3'",
        ),
        ("global\n    tune.h2.max-frame-size 1000\n", "out of range"),
        (
            "global\n    tune.h2.header-table-size 70000\n",
            "out of range",
        ),
    ];
    for (cfg, want) in bad {
        let (code, err) = Sluice::check(cfg);
        assert_eq!(code, 1, "{cfg}");
        assert!(err.contains(want), "{cfg}: {err}");
    }
    let (code, err) = Sluice::check(
        "global\n    tune.h2.max-concurrent-streams 0\n    tune.h2.initial-window-size 1048576\n\
\x20   tune.h2.header-table-size 8192\n    tune.h2.max-frame-size 32768\n",
    );
    assert_eq!(code, 0, "{err}");
}

/// A TLS connection offering `alpn`; returns it with the protocol agreed.
async fn tls_connect(
    port: u16,
    alpn: &[&str],
) -> (
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    Option<Vec<u8>>,
) {
    let cfg = insecure_client(alpn, rustls::DEFAULT_VERSIONS);
    let tcp = tokio::net::TcpStream::connect(lo(port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("h2.example").unwrap();
    let t = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .unwrap();
    let alpn = t.get_ref().1.alpn_protocol().map(|a| a.to_vec());
    (t, alpn)
}

#[test]
fn alpn_h2_on_ssl_binds_serves_http2_and_http1_clients_alike() {
    let dir = TempDir::new();
    let ck = rcgen::generate_simple_self_signed(vec!["h2.example".to_string()]).unwrap();
    let pem = dir.path().join("c.pem");
    std::fs::write(
        &pem,
        format!("{}{}", ck.cert.pem(), ck.signing_key.serialize_pem()),
    )
    .unwrap();
    let be = HttpBackend::with_handler("s1", |r| Reply::echo_target("s1", r));
    let (port, h1port) = (free_port(), free_port());
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port} ssl crt {p} alpn h2,http/1.1\n\
\x20   bind 127.0.0.1:{h1port} ssl crt {p} alpn h2,http/1.1 proto h1\n\
\x20   option httplog\n    log stdout format raw local0\n\
\x20   http-request set-header x-alpn %[ssl_fc_alpn]\n    default_backend be\n\
backend be\n    server s1 {}\n",
        be.hostport(),
        p = pem.display()
    );
    let s = Sluice::start(&cfg);
    rt().block_on(async {
        let (t, alpn) = tls_connect(port, &["h2", "http/1.1"]).await;
        assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
        let (send, conn) = h2::client::handshake(t).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut c = send;
        let req = http::Request::builder()
            .uri(format!("https://127.0.0.1:{port}/over-tls"))
            .body(())
            .unwrap();
        let got = exchange(&mut c, req, None).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body, b"/over-tls");
        assert_eq!(be.last_request().header("x-alpn"), Some("h2"));
        // A client without h2 speaks HTTP/1.1 on the same bind.
        let (mut t, alpn) = tls_connect(port, &["http/1.1"]).await;
        assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        t.write_all(b"GET /h1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = t.read_to_end(&mut out).await;
        assert!(
            out.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(be.last_request().header("x-alpn"), Some("http/1.1"));
        // `proto h1`: h2 is not offered even when the bind's alpn lists it.
        let (_t, alpn) = tls_connect(h1port, &["h2", "http/1.1"]).await;
        assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    });
    s.wait_log_line(
        |l| {
            l.contains(&format!(
                "\"GET https://127.0.0.1:{port}/over-tls HTTP/2.0\""
            ))
        },
        T,
    );
}

#[test]
fn soft_stop_lets_streams_in_flight_finish_and_refuses_new_ones() {
    let gate = Gate::new();
    let be = HttpBackend::gated("s1", &gate);
    let (s, port) = proxy("", "", &be);
    rt().block_on(async {
        let mut c = connect(port).await;
        let mut c2 = c.clone();
        let slow = tokio::spawn(async move { exchange(&mut c2, get(port, "/slow"), None).await });
        until("the slow request at the server", || {
            !be.requests().is_empty()
        })
        .await;
        s.signal(nix::sys::signal::Signal::SIGUSR1);
        // The listener goes first; then GOAWAY frames end the connection for new streams.
        // (A first GOAWAY announces the end, and a second one, a round trip later, names
        // the last stream served: streams sent in between may still be served.)
        wait_until("listener closed after SIGUSR1", T, || connect_refused(port));
        let mut served_late = 0;
        loop {
            let Ok(mut ready) = c.clone().ready().await else {
                break;
            };
            let Ok((rsp, _)) = ready.send_request(get(port, "/late"), true) else {
                break;
            };
            match rsp.await {
                Err(_) => break,
                Ok(_) => served_late += 1,
            }
            assert!(
                served_late < 100,
                "new streams are still served after soft stop"
            );
        }
        assert!(s.exit_status().is_none(), "exited with a stream in flight");
        gate.open();
        let got = slow.await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.body, b"/slow");
        let _ = &mut c;
    });
    let st = s
        .wait_exit(T)
        .expect("sluice did not exit after its last stream");
    assert!(st.success(), "{st:?}");
}

#[test]
fn a_stream_reset_by_the_client_releases_its_server_connection() {
    let be = HttpBackend::with_handler("s1", |r| {
        if r.target == "/hang" {
            return Reply::Hang;
        }
        Reply::echo_target("s1", r)
    });
    let port = free_port();
    let sock = TempDir::new();
    let sock = sock.path().join("stats.sock");
    let cfg = format!(
        "global\n    stats socket {}\n\
defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
backend be\n    server s1 {}\n",
        sock.display(),
        be.hostport()
    );
    let _s = Sluice::start(&cfg);
    rt().block_on(async {
        let mut c = connect(port).await;
        let mut ready = c.clone().ready().await.unwrap();
        let (rsp, mut tx) = ready.send_request(get(port, "/hang"), true).unwrap();
        drop(rsp);
        until("the request at the server", || !be.requests().is_empty()).await;
        assert_eq!(stat_column(&sock, "be", "s1", "scur"), "1");
        tx.send_reset(h2::Reason::CANCEL);
        // The server connection is closed, not kept for the abandoned answer.
        until("the server connection closed", || be.open_conns() == 0).await;
        assert_eq!(stat_column(&sock, "be", "s1", "scur"), "0");
        // The connection itself serves on.
        let got = exchange(&mut c, get(port, "/after"), None).await;
        assert_eq!(got.body, b"/after");
    });
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 to servers.

/// One worker thread (each thread keeps its own HTTP/2 connection to a server), and a stats
/// socket in `dir`.
fn h2_backend_proxy(server_line: &str) -> (Sluice, u16) {
    h2_backend_proxy_in(&TempDir::new(), server_line)
}

fn h2_backend_proxy_in(dir: &TempDir, server_line: &str) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n    stats socket {}\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port}\n    option httplog\n    log stdout format raw local0\n\
\x20   default_backend be\n\
backend be\n    {server_line}\n",
        dir.path().join("stats.sock").display()
    );
    (Sluice::start(&cfg), port)
}

fn echo(s: &Seen) -> (u16, Vec<(&'static str, String)>, Vec<u8>) {
    let body = format!("{} {} {} {}", s.method, s.path, s.authority, s.body.len());
    (200, vec![("x-h2", "yes".into())], body.into_bytes())
}

#[test]
fn proto_h2_servers_take_every_request_as_a_stream_of_one_connection() {
    let srv = H2Server::start(echo);
    let dir = TempDir::new();
    let (s, port) = h2_backend_proxy_in(&dir, &format!("server s1 {} proto h2", srv.hostport()));
    // Three HTTP/1.1 clients, one after the other.
    for i in 0..3 {
        let r = http_get(port, &format!("/one/{i}?q=1"));
        assert_eq!(r.status, 200);
        // (`http_get` sends `Host: test`, which becomes `:authority`.)
        assert_eq!(r.body_str(), format!("GET /one/{i} test 0"));
        assert_eq!(r.header("x-h2"), Some("yes"));
    }
    s.wait_log_line(|l| l.contains("\"GET /one/2?q=1 HTTP/1.1\""), T);
    // Bodies with a length and chunked reach the server whole.
    let r = http_raw(
        port,
        "POST /up HTTP/1.1\r\nHost: h.example\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert_eq!(r.body_str(), "POST /up h.example 5");
    let r = http_raw(
        port,
        "POST /up2 HTTP/1.1\r\nHost: h.example\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
    );
    assert_eq!(r.body_str(), "POST /up2 h.example 7");
    let seen = srv.requests();
    assert_eq!(seen.len(), 5);
    assert!(
        seen.iter().all(|r| r.conn == 0),
        "one connection for all: {seen:?}"
    );
    assert!(seen.iter().all(|r| r.scheme == "http"));
    assert_eq!(seen[4].body, b"abcdefg");
    assert_eq!(seen[4].header("transfer-encoding"), None);
    assert_eq!(seen[3].header("content-length"), Some("5"));
    // One connection, four reuses of it (HAProxy's `connect` and `reuse` columns), and
    // none in the idle pools' accounting.
    let sock = dir.path().join("stats.sock");
    assert_eq!(stat_column(&sock, "be", "s1", "connect"), "1");
    assert_eq!(stat_column(&sock, "be", "s1", "reuse"), "4");
    assert_eq!(stat_column(&sock, "be", "s1", "used_conn_cur"), "0");
    assert_eq!(stat_column(&sock, "be", "s1", "idle_conn_cur"), "0");
}

#[test]
fn a_stream_the_session_gives_up_is_reset_at_the_server() {
    let srv = H2Server::start(|s| {
        if s.path == "/hang" {
            return (0, vec![], vec![]);
        }
        echo(s)
    });
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n\
\x20   timeout server 300ms\n\
frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
backend be\n    server s1 {} proto h2\n",
        srv.hostport()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(http_get(port, "/hang").status, 504);
    // The abandoned stream is reset (CANCEL), not left open at the server.
    wait_until("the stream reset at the server", T, || {
        srv.requests()
            .iter()
            .any(|r| r.method == "RESET" && r.path == "/hang")
    });
    // The shared connection serves on.
    for i in 0..3 {
        assert_eq!(http_get(port, &format!("/after/{i}")).status, 200);
    }
    assert!(srv.requests().iter().all(|r| r.conn == 0));
}

#[test]
fn a_client_that_ignores_the_goaway_is_disconnected() {
    use std::io::{Read, Write};
    let be = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 300ms\n    timeout server 10s\n\
\x20   timeout http-keep-alive 100ms\n\
frontend fe\n    bind 127.0.0.1:{port} proto h2\n    default_backend be\n\
backend be\n    server s1 {}\n",
        be.hostport()
    );
    let _s = Sluice::start(&cfg);
    // The preface and an empty SETTINGS, then silence: no SETTINGS or PING acknowledgement.
    let mut t = std::net::TcpStream::connect(lo(port)).unwrap();
    t.set_read_timeout(Some(T)).unwrap();
    t.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    let started = std::time::Instant::now();
    let mut sink = Vec::new();
    // Keep-alive timeout, GOAWAY, then `timeout client` to take it: the connection ends.
    let r = t.read_to_end(&mut sink);
    assert!(r.is_ok(), "the connection was not closed: {r:?}");
    assert!(
        started.elapsed() < T,
        "closed only after {:?}",
        started.elapsed()
    );
}

#[test]
fn grpc_through_http2_on_both_sides_keeps_its_trailers() {
    let srv = H2Server::with_trailers(|s| {
        let reply = (
            200,
            vec![("content-type", "application/grpc".to_string())],
            s.body.clone(),
        );
        (
            reply,
            vec![("grpc-status", "0".into()), ("grpc-message", "ok".into())],
        )
    });
    let (_s, port) = h2_backend_proxy(&format!("server s1 {} proto h2", srv.hostport()));
    let msg = b"\0\0\0\0\x05hello";
    let got = rt().block_on(async {
        let mut c = connect(port).await;
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{port}/pkg.Svc/Call"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        exchange(&mut c, req, Some(msg)).await
    });
    assert_eq!(got.status, 200);
    assert_eq!(got.body, msg);
    let t = got
        .trailers
        .expect("the server's trailers reach the client");
    assert_eq!(t.get("grpc-status").unwrap(), "0");
    assert_eq!(t.get("grpc-message").unwrap(), "ok");
    let seen = srv.requests();
    assert_eq!(seen[0].path, "/pkg.Svc/Call");
    assert_eq!(seen[0].body, msg);
    assert_eq!(seen[0].header("te"), Some("trailers"));
    // An HTTP/1.1 client gets them as chunked trailers.
    let r = http_raw(
        port,
        "POST /pkg.Svc/Call HTTP/1.1\r\nHost: g\r\nContent-Type: application/grpc\r\n\
Content-Length: 10\r\nConnection: close\r\n\r\n\0\0\0\0\x05hello",
    );
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert!(
        r.trailers
            .iter()
            .any(|(n, v)| n == "grpc-status" && v == "0"),
        "{:?}",
        r.trailers
    );
}

#[test]
fn tls_servers_speak_http2_when_alpn_agrees_or_proto_h2_says_so() {
    let srv = H2Server::start_tls(echo);
    // `alpn h2,http/1.1`: h2 agreed.
    let (_s, port) = h2_backend_proxy(&format!(
        "server s1 {} ssl verify none alpn h2,http/1.1",
        srv.hostport()
    ));
    let r = http_get(port, "/a");
    assert_eq!(r.body_str(), "GET /a test 0");
    // `proto h2` without `alpn`: h2 is offered (this server accepts nothing else).
    let (_s2, port2) = h2_backend_proxy(&format!(
        "server s1 {} ssl verify none proto h2",
        srv.hostport()
    ));
    let r = http_get(port2, "/b");
    assert_eq!(r.body_str(), "GET /b test 0");
    let seen = srv.requests();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter().all(|r| r.alpn == "h2" && r.scheme == "https"),
        "{seen:?}"
    );
}

#[test]
fn proto_h2_on_a_tcp_server_is_a_configuration_error() {
    let (code, err) = Sluice::check("backend b\n    mode tcp\n    server s 127.0.0.1:1 proto h2\n");
    assert_eq!(code, 1);
    assert!(
        err.contains("'proto h2'") && err.contains("'mode tcp'"),
        "{err}"
    );
    let (code, err) =
        Sluice::check("backend b\n    mode http\n    server s 127.0.0.1:1 proto fcgi\n");
    assert_eq!(code, 1);
    assert!(err.contains("not supported"), "{err}");
}

#[test]
fn connection_tracked_counters_and_sess_variables_reach_every_stream() {
    let be = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   stick-table type ip size 1k expire 1m store http_req_cnt,conn_cur\n\
\x20   tcp-request connection track-sc0 src\n\
\x20   http-request deny deny_status 429 if {{ sc0_http_req_cnt gt 3 }}\n\
\x20   http-response set-header x-conn-cur %[sc0_conn_cur]\n\
\x20   tcp-request connection set-var(sess.tag) str(conn-tag)\n\
\x20   http-response set-header x-tag %[var(sess.tag)]\n\
\x20   default_backend be\n\
backend be\n    server s1 {}\n",
        be.hostport()
    );
    let _s = Sluice::start(&cfg);
    rt().block_on(async {
        let mut c = connect(port).await;
        let mut statuses = Vec::new();
        for i in 0..5 {
            let got = exchange(&mut c, get(port, &format!("/{i}")), None).await;
            if got.status == 200 {
                // One connection, however many streams; its `sess` variables seen by each.
                assert_eq!(got.all("x-conn-cur"), ["1"]);
                assert_eq!(got.all("x-tag"), ["conn-tag"]);
            }
            statuses.push(got.status);
        }
        // The limit holds across the connection's streams, as for HTTP/1 keep-alive.
        assert_eq!(statuses, [200, 200, 200, 429, 429]);
    });
}

#[test]
fn an_idle_server_connection_is_closed_after_pool_purge_delay() {
    let srv = H2Server::start(echo);
    let (_s, port) = h2_backend_proxy(&format!(
        "server s1 {} proto h2 pool-purge-delay 200ms",
        srv.hostport()
    ));
    assert_eq!(http_get(port, "/a").status, 200);
    wait_until("the idle connection closed", T, || {
        srv.closed.load(std::sync::atomic::Ordering::SeqCst) == 1
    });
    // The next request opens a new connection.
    assert_eq!(http_get(port, "/b").status, 200);
    let conns: Vec<usize> = srv.requests().iter().map(|r| r.conn).collect();
    assert_eq!(conns, [0, 1]);
}
