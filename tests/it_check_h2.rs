//! HTTP/2 health checks: `check-proto h2` (prior knowledge over plain TCP, ALPN `h2` over TLS),
//! `http-check connect proto`, HTTP/2 chosen by ALPN, and the same `http-check send|expect`,
//! `disable-on-404` and result codes as HTTP/1.x checks. The servers are real HTTP/2 servers
//! (the `h2` crate's server side on a thread with its own tokio runtime).

mod common;

use common::*;
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One request as the HTTP/2 server received it.
#[derive(Debug, Clone, Default)]
struct Seen {
    method: String,
    path: String,
    scheme: String,
    authority: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The ALPN protocol of its TLS connection (`-`: none or plain TCP).
    alpn: String,
    /// Which connection it came on (numbered from 0 in accept order).
    conn: usize,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Status, headers and body of an answer.
type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);
type Handler = Arc<dyn Fn(&Seen) -> Answer + Send + Sync>;

/// An HTTP/2 server (h2c, or TLS offering only `h2`) answering with `handler`. Records each
/// request, and counts the connections the client ended with a GOAWAY frame.
struct H2Server {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    goaways: Arc<AtomicUsize>,
}

impl H2Server {
    fn start(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> H2Server {
        H2Server::spawn(Arc::new(handler), None)
    }

    fn start_tls(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> H2Server {
        let ck = rcgen::generate_simple_self_signed(vec!["h2.example".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let mut sc = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
        sc.alpn_protocols = vec![b"h2".to_vec()];
        H2Server::spawn(
            Arc::new(handler),
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(sc))),
        )
    }

    fn spawn(handler: Handler, tls: Option<tokio_rustls::TlsAcceptor>) -> H2Server {
        let l = std::net::TcpListener::bind(lo(0)).unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let goaways = Arc::new(AtomicUsize::new(0));
        let (s2, g2) = (seen.clone(), goaways.clone());
        let conns = AtomicUsize::new(0);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(l).unwrap();
                while let Ok((s, _)) = l.accept().await {
                    let (h, seen, goaways, tls) =
                        (handler.clone(), s2.clone(), g2.clone(), tls.clone());
                    let id = conns.fetch_add(1, SeqCst);
                    tokio::spawn(async move {
                        let got = match tls {
                            None => serve(Recorder::new(s), ("-".into(), id), &h, &seen).await,
                            Some(acc) => {
                                let Ok(t) = acc.accept(s).await else { return };
                                let alpn = t
                                    .get_ref()
                                    .1
                                    .alpn_protocol()
                                    .map(|a| String::from_utf8_lossy(a).into_owned())
                                    .unwrap_or_else(|| "-".into());
                                serve(Recorder::new(t), (alpn, id), &h, &seen).await
                            }
                        };
                        if has_goaway(&got) {
                            goaways.fetch_add(1, SeqCst);
                        }
                    });
                }
            });
        });
        H2Server {
            port,
            seen,
            goaways,
        }
    }

    fn hostport(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves one connection until the client ends it; returns every byte the client sent.
async fn serve<T: AsyncRead + AsyncWrite + Unpin>(
    io: Recorder<T>,
    (alpn, conn_id): (String, usize),
    h: &Handler,
    seen: &Mutex<Vec<Seen>>,
) -> Vec<u8> {
    let got = io.got.clone();
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return got.lock().unwrap().clone();
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        let (parts, mut body) = req.into_parts();
        let mut b = Vec::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            b.extend_from_slice(&chunk);
        }
        let s = Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            scheme: parts.uri.scheme_str().unwrap_or("").to_string(),
            authority: parts
                .uri
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
                .collect(),
            body: b,
            alpn: alpn.clone(),
            conn: conn_id,
        };
        let (status, hdrs, rbody) = h(&s);
        seen.lock().unwrap().push(s);
        let mut resp = http::Response::builder().status(status);
        for (n, v) in hdrs {
            resp = resp.header(n, v);
        }
        let Ok(mut send) = respond.send_response(resp.body(()).unwrap(), rbody.is_empty()) else {
            break;
        };
        if !rbody.is_empty() {
            let _ = send.send_data(rbody.into(), true);
        }
    }
    got.lock().unwrap().clone()
}

/// Whether the client's bytes (preface, then frames) hold a GOAWAY frame (type 7).
fn has_goaway(b: &[u8]) -> bool {
    let mut b = b
        .strip_prefix(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap_or(b);
    while b.len() >= 9 {
        let len = ((b[0] as usize) << 16) | ((b[1] as usize) << 8) | b[2] as usize;
        if b[3] == 7 {
            return true;
        }
        b = &b[(9 + len).min(b.len())..];
    }
    false
}

/// A transport that keeps what the peer sent (in clear: it sits above TLS).
struct Recorder<T> {
    io: T,
    got: Arc<Mutex<Vec<u8>>>,
}

impl<T> Recorder<T> {
    fn new(io: T) -> Recorder<T> {
        Recorder {
            io,
            got: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Recorder<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.io).poll_read(cx, buf);
        me.got
            .lock()
            .unwrap()
            .extend_from_slice(&buf.filled()[before..]);
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Recorder<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

fn ok(body: &str) -> Answer {
    (200, vec![], body.as_bytes().to_vec())
}

/// `global` with an admin stats socket and health-check logs on stdout, and `defaults`.
fn head(sock: &std::path::Path) -> String {
    format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n    log stdout format raw local0\n\
defaults\n    mode http\n    log global\n    option log-health-checks\n    timeout connect 1s\n\
\x20   timeout client 10s\n    timeout server 10s\n    timeout check 1s\n",
        sock.display()
    )
}

/// Over h2c: a 200 brings the server UP (L7OK, the request as configured, GOAWAY at the end
/// of each check), a 503 takes it DOWN (L7STS), `expect string` reads the HTTP/2 body, an
/// HTTP/1-only server fails with L7RSP, `http-check connect proto h2` works without
/// `check-proto`, and `default-server` carries `check-proto`.
#[test]
fn h2c_checks_follow_the_answers() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let up = H2Server::start(|_| ok("fine"));
    let down = H2Server::start(|_| (503, vec![], b"busy".to_vec()));
    let body = H2Server::start(|s| {
        (
            200,
            vec![("x-state", "ready, warm".to_string())],
            format!("{} {} healthy-h2", s.method, s.path).into_bytes(),
        )
    });
    let h1 = HttpBackend::start("h1-only");
    let cfg = format!(
        "{}backend b_up\n    option httpchk GET /health\n\
\x20   default-server check-proto h2 inter 100ms rise 1 fall 1\n\
\x20   server s {up} check\n\
backend b_down\n    option httpchk GET /health\n\
\x20   server s {down} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_body\n    option httpchk\n\
\x20   http-check send meth POST uri /probe ver HTTP/1.1 hdr Host check.example hdr X-Probe yes hdr Connection close body ping\n\
\x20   http-check expect string healthy-h2\n    http-check expect hdr name x-state value warm\n\
\x20   server s {body} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_nomatch\n    option httpchk GET /\n    http-check expect string nope\n\
\x20   server s {body} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_h1\n    option httpchk GET /\n\
\x20   server s {h1} check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_rule\n    option httpchk GET /rule\n    http-check connect proto h2\n\
\x20   server s {up} check inter 100ms rise 1 fall 1\n\
backend b_seq\n    option httpchk\n    http-check send uri /first\n    http-check expect status 200\n\
\x20   http-check send uri /second\n    http-check expect status 200\n\
\x20   server s {up} check check-proto h2 inter 100ms rise 1 fall 1\n",
        head(&sock),
        up = up.hostport(),
        down = down.hostport(),
        body = body.hostport(),
        h1 = h1.hostport(),
    );
    let s = Sluice::start(&cfg);
    let col = |be: &str, c: &str| stat_column(&sock, be, "s", c);

    wait_until("the h2 server answering 200 is UP", WAIT, || {
        col("b_up", "check_status") == "L7OK"
    });
    assert_eq!(col("b_up", "status"), "UP");
    assert_eq!(col("b_up", "check_code"), "200");
    let r = up
        .requests()
        .into_iter()
        .find(|r| r.path == "/health")
        .expect("the check request");
    assert_eq!(r.method, "GET");
    assert_eq!(r.authority, "", "no Host, no :authority");
    // Each check ends its connection with GOAWAY.
    wait_until("check connections end with GOAWAY", WAIT, || {
        up.goaways.load(SeqCst) >= 2
    });

    // With `log-health-checks`, the check's line gives the reason (HAProxy's).
    let line = s.wait_log_line(
        |l| l.contains("Health check for server b_down/s failed"),
        WAIT,
    );
    assert!(
        line.contains("reason: Layer7 wrong status, code: 503"),
        "{line}"
    );
    assert_eq!(col("b_down", "check_status"), "L7STS");
    assert_eq!(col("b_down", "check_code"), "503");

    wait_until("expect string and hdr on the h2 answer", WAIT, || {
        col("b_body", "check_status") == "L7OK"
    });
    let r = body
        .requests()
        .into_iter()
        .find(|r| r.path == "/probe")
        .expect("the http-check send request");
    assert_eq!(r.method, "POST");
    assert_eq!(r.authority, "check.example", "Host becomes :authority");
    assert_eq!(r.header("x-probe"), Some("yes"));
    assert_eq!(r.header("content-length"), Some("4"));
    assert_eq!(r.body, b"ping");
    assert_eq!(r.header("host"), None);
    assert_eq!(r.header("connection"), None, "forbidden in HTTP/2");

    wait_until("a body that does not match fails", WAIT, || {
        col("b_nomatch", "check_status") == "L7RSP"
    });
    assert_eq!(
        col("b_nomatch", "check_desc"),
        "HTTP content check did not match"
    );
    assert!(col("b_nomatch", "status").starts_with("DOWN"));

    wait_until("an HTTP/1-only server fails an h2 check", WAIT, || {
        col("b_h1", "check_status") == "L7RSP"
    });
    assert_eq!(
        col("b_h1", "check_desc"),
        "HTTP/2 check got an HTTP/1.x response"
    );
    assert!(col("b_h1", "status").starts_with("DOWN"));
    // It got the HTTP/2 preface, not an HTTP/1 request.
    let reqs = h1.requests();
    assert!(reqs.iter().any(|r| r.method == "PRI"), "{reqs:?}");
    assert!(!reqs.iter().any(|r| r.method == "GET"), "{reqs:?}");

    wait_until("http-check connect proto h2", WAIT, || {
        col("b_rule", "check_status") == "L7OK"
    });
    assert!(up.requests().iter().any(|r| r.path == "/rule"));

    // Successive sends are streams of one connection.
    wait_until("a two-request sequence", WAIT, || {
        col("b_seq", "check_status") == "L7OK"
    });
    let reqs = up.requests();
    let first = reqs.iter().find(|r| r.path == "/first").expect("/first");
    let second = reqs
        .iter()
        .find(|r| r.path == "/second" && r.conn == first.conn)
        .map(|r| r.conn);
    assert_eq!(second, Some(first.conn), "{reqs:?}");
}

/// `disable-on-404` over HTTP/2: a 404 from an UP server drains it (L7OKC, NOLB) and a 200
/// brings it back.
#[test]
fn h2_disable_on_404() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let status = Arc::new(AtomicU16::new(200));
    let st = status.clone();
    let srv = H2Server::start(move |_| (st.load(SeqCst), vec![], b"x".to_vec()));
    let cfg = format!(
        "{}backend be\n    option httpchk GET /\n    http-check disable-on-404\n\
\x20   server s {} check check-proto h2 inter 100ms rise 1 fall 1\n",
        head(&sock),
        srv.hostport()
    );
    let _s = Sluice::start(&cfg);
    let col = |c: &str| stat_column(&sock, "be", "s", c);
    wait_until("UP", WAIT, || col("status") == "UP");
    status.store(404, SeqCst);
    wait_until("a 404 drains the server", WAIT, || col("status") == "NOLB");
    assert_eq!(col("check_status"), "L7OKC");
    assert_eq!(col("check_code"), "404");
    status.store(200, SeqCst);
    wait_until("back UP", WAIT, || col("status") == "UP");
}

/// Over TLS: `check-proto h2` offers ALPN `h2` on its own; without `check-proto`, HTTP/2 is
/// used when `check-alpn` agrees on `h2` (HAProxy chooses by ALPN). The TLS server speaks
/// HTTP/2 only and refuses clients offering no `h2`.
#[test]
fn h2_checks_over_tls_use_alpn() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let srv = H2Server::start_tls(|s| ok(&format!("alpn={}", s.alpn)));
    let cfg = format!(
        "{}backend b_proto\n    option httpchk GET /proto\n    http-check send hdr Host tls.example\n\
\x20   http-check expect string alpn=h2\n\
\x20   server s {p} ssl verify none check check-proto h2 inter 100ms rise 1 fall 1\n\
backend b_alpn\n    option httpchk GET /alpn\n\
\x20   server s {p} ssl verify none check check-alpn h2 inter 100ms rise 1 fall 1\n\
backend b_h1\n    option httpchk GET /h1\n\
\x20   server s {p} ssl verify none check check-proto h1 check-alpn h2 inter 100ms rise 1 fall 1\n",
        head(&sock),
        p = srv.hostport(),
    );
    let _s = Sluice::start(&cfg);
    let col = |be: &str, c: &str| stat_column(&sock, be, "s", c);
    wait_until("check-proto h2 over TLS", WAIT, || {
        col("b_proto", "check_status") == "L7OK"
    });
    let r = srv
        .requests()
        .into_iter()
        .find(|r| r.path == "/proto")
        .expect("the TLS check request");
    assert_eq!(r.alpn, "h2");
    assert_eq!(
        (r.scheme.as_str(), r.authority.as_str()),
        ("https", "tls.example")
    );
    wait_until("h2 chosen by ALPN", WAIT, || {
        col("b_alpn", "check_status") == "L7OK"
    });
    assert!(srv.requests().iter().any(|r| r.path == "/alpn"));
    // `check-proto h1` wins over the ALPN: HTTP/1.x to an HTTP/2-only server fails.
    wait_until("check-proto h1 speaks HTTP/1.x", WAIT, || {
        col("b_h1", "check_status") == "L7RSP"
    });
    assert!(!srv.requests().iter().any(|r| r.path == "/h1"));
}

#[test]
fn check_proto_keywords_are_validated() {
    let bad = [
        (
            "    option httpchk\n    server s 127.0.0.1:1 check check-proto h3\n",
            ":5",
            "'check-proto': unknown protocol 'h3' (allowed: h1, h2)",
        ),
        (
            "    option httpchk\n    http-check connect proto fcgi\n",
            ":5",
            "'http-check connect proto': unknown protocol 'fcgi' (allowed: h1, h2)",
        ),
        (
            "    default-server check-proto\n",
            ":4",
            "missing protocol after 'check-proto'",
        ),
        (
            "    tcp-check connect port 80 proto h2\n",
            ":4",
            "'tcp-check connect proto h2': invalid protocol for tcp-check",
        ),
        (
            "    server s 127.0.0.1:1 check check-proto h2\n",
            ":4",
            "'check-proto h2': incompatible with the backend's check type",
        ),
        (
            "    option tcp-check\n    default-server check-proto h1\n    server s 127.0.0.1:1 check\n",
            ":6",
            "'check-proto h1': incompatible with the backend's check type",
        ),
    ];
    for (lines, at, want) in bad {
        let cfg = format!("defaults\n    mode http\nbackend be\n{lines}");
        let (code, out) = Sluice::check(&cfg);
        assert_ne!(code, 0, "{lines}");
        assert!(out.contains(at) && out.contains(want), "{lines}: {out}");
    }
    let good = [
        // `default-server` carries it; `check-alpn h2` is fine with HTTP checks now.
        "    option httpchk\n    default-server check-proto h2\n    server s 127.0.0.1:1 check\n",
        "    option httpchk\n    http-check connect proto h1\n    server s 127.0.0.1:1 check ssl verify none check-alpn h2,http/1.1\n",
        // Without `check`, as in HAProxy, nothing is checked and nothing is refused.
        "    server s 127.0.0.1:1 check-proto h2\n",
    ];
    for lines in good {
        let cfg = format!("defaults\n    mode http\nbackend be\n{lines}");
        let (code, out) = Sluice::check(&cfg);
        assert_eq!(code, 0, "{lines}: {out}");
    }
}
