//! A `mode tcp` frontend whose session becomes HTTP, as HAProxy 2.6 does it: implicitly, when
//! its rules choose a `mode http` backend, or with `tcp-request content switch-mode http`.
//! Also HTTP samples (`path_beg`, `hdr(host)`) in a `mode tcp` frontend's rules, which read
//! the request head its first data holds. The routing of each case was checked against
//! HAProxy 2.6.12 on the same configurations (the first request of a connection is routed
//! by the rules on raw data, the later ones by the rules on each HTTP request).

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;

/// A backend answering `NAME TARGET x-via=VALUE`: which server, for which request, and
/// what the backend's HTTP rules added.
fn tagged(name: &'static str) -> HttpBackend {
    HttpBackend::with_handler(name, move |r| {
        let via = r.header("x-via").unwrap_or("-").to_string();
        Reply::status(200, name, format!("{name} {} x-via={via}", r.target))
    })
}

/// GETs each of `urls` in turn over an HTTP/2 connection; each must answer 200: the bodies.
async fn get_all(send: h2::client::SendRequest<bytes::Bytes>, urls: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for url in urls {
        let mut send = send.clone().ready().await.unwrap();
        let req = http::Request::get(*url).body(()).unwrap();
        let (rsp, _) = send.send_request(req, true).unwrap();
        let rsp = rsp.await.unwrap();
        assert_eq!(rsp.status(), 200, "{url}");
        let mut body = rsp.into_body();
        let mut b = Vec::new();
        while let Some(d) = body.data().await {
            b.extend_from_slice(&d.unwrap());
        }
        out.push(String::from_utf8(b).unwrap());
    }
    out
}

fn get(c: &mut HttpClient, path: &str) -> String {
    let r = c.get(path);
    assert_eq!(r.status, 200, "{path}: {}", r.body_str());
    r.body_str()
}

/// The implicit upgrade: an HTTP request goes to the `mode http` backend the rules chose,
/// with that backend's HTTP rules applied, and the connection stays HTTP for the next
/// requests (each one routed again); anything else stays a TCP tunnel to the TCP backend.
#[test]
fn a_tcp_frontend_hands_http_sessions_to_an_http_backend() {
    let web = tagged("web");
    let api = tagged("api");
    let echo = TcpBackend::echo();
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   use_backend api if HTTP {{ path_beg /api }}\n\
         \x20   use_backend web if HTTP\n    default_backend raw\n\
         backend web\n    mode http\n    http-request set-header x-via web-rules\n    server w {}\n\
         backend api\n    mode http\n    http-request set-header x-via api-rules\n    server a {}\n\
         backend raw\n    server e {}\n",
        web.hostport(),
        api.hostport(),
        echo.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(get(&mut c, "/index"), "web /index x-via=web-rules");
    // Same connection: routed again on the HTTP request.
    assert_eq!(get(&mut c, "/api/v1"), "api /api/v1 x-via=api-rules");
    assert_eq!(get(&mut c, "/other"), "web /other x-via=web-rules");
    assert_eq!(web.reqs(), 2);
    assert_eq!(api.reqs(), 1);
    // Each request is logged in the frontend's TCP format, naming its backend.
    let lines = s.wait_log_lines(3, |l| l.contains(" fe "), WAIT);
    let picked: Vec<&str> = lines
        .iter()
        .map(|l| l.split(' ').nth(3).unwrap_or(""))
        .collect();
    assert_eq!(picked, ["web/w", "api/a", "web/w"], "{lines:#?}");
    // Not HTTP: a plain tunnel to the TCP backend, byte for byte.
    let mut t = TcpStream::connect(lo(port)).unwrap();
    t.set_read_timeout(Some(WAIT)).unwrap();
    t.write_all(b"SSH-2.0-test\r\n").unwrap();
    let mut got = [0u8; 14];
    t.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"SSH-2.0-test\r\n");
}

/// HTTP samples in a `mode tcp` frontend's `use_backend` read the request head of the first
/// data: with `tcp-request inspect-delay`, the first request is routed by its path too.
/// Without it, the rules see no data and the first request goes to the default backend, as
/// in HAProxy (and `sluice -c` warns of it); the next requests are routed by their path.
#[test]
fn http_samples_route_a_tcp_frontend_by_path() {
    let st = tagged("static");
    let app = tagged("app");
    let (delayed, undelayed) = (free_port(), free_port());
    let cfg = format!(
        "{LOGGED_TCP}frontend delayed\n    bind 127.0.0.1:{delayed}\n    tcp-request inspect-delay 5s\n\
         \x20   use_backend st if {{ path_beg /static }}\n    default_backend app\n\
         frontend undelayed\n    bind 127.0.0.1:{undelayed}\n\
         \x20   use_backend st if {{ path_beg /static }}\n    default_backend app\n\
         backend st\n    mode http\n    server s {}\n\
         backend app\n    mode http\n    server a {}\n",
        st.hostport(),
        app.hostport()
    );
    let check = Sluice::check(&cfg);
    assert_eq!(check.0, 0, "{}", check.1);
    assert!(
        check.1.contains("'use_backend' in frontend 'undelayed'")
            && check.1.contains("no 'tcp-request inspect-delay'"),
        "{}",
        check.1
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(delayed);
    assert_eq!(get(&mut c, "/static/a.css"), "static /static/a.css x-via=-");
    assert_eq!(get(&mut c, "/page"), "app /page x-via=-");
    assert_eq!(get(&mut c, "/static/b.css"), "static /static/b.css x-via=-");
    let mut c = HttpClient::connect(undelayed);
    // The rules ran when the connection opened, before its request arrived.
    assert_eq!(get(&mut c, "/static/a.css"), "app /static/a.css x-via=-");
    assert_eq!(get(&mut c, "/static/b.css"), "static /static/b.css x-via=-");
}

/// HTTP samples route plain TCP sessions too (the tunnel carries the request unchanged):
/// `hdr(host)` on the first data, with TCP backends only.
#[test]
fn http_samples_route_tcp_sessions_between_tcp_backends() {
    let (a, b) = (recorder("A"), recorder("B"));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   use_backend a if {{ hdr(host) -i a.example }}\n    default_backend b\n\
         backend a\n    server a {}\nbackend b\n    server b {}\n",
        a.b.hostport(),
        b.b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let req = b"GET / HTTP/1.1\r\nHost: A.example\r\n\r\n";
    assert_eq!(tcp_send(port, req), b"A");
    assert_eq!(a.seen.lock().unwrap().as_slice(), [req.to_vec()]);
    assert_eq!(
        tcp_send(port, b"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n"),
        b"B"
    );
    assert_eq!(tcp_send(port, b"not http at all\r\n\r\n"), b"B");
}

/// `switch-mode http`: the frontend's own HTTP rules apply to the upgraded session, its
/// `use_backend` rules route each request; a client that is not HTTP is rejected by the
/// next rule. Logged in the TCP format (`option httplog` falls back, as in HAProxy), with
/// `LR` for the request the frontend answered itself.
#[test]
fn switch_mode_http_applies_the_frontends_http_rules() {
    let st = tagged("static");
    let app = tagged("app");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    option httplog\n\
         \x20   tcp-request inspect-delay 5s\n\
         \x20   tcp-request content switch-mode http if HTTP\n\
         \x20   tcp-request content reject\n\
         \x20   http-request return status 200 content-type text/plain string here if {{ path /ret }}\n\
         \x20   http-request set-header x-via fe-rules\n\
         \x20   use_backend st if {{ path_beg /static }}\n    default_backend app\n\
         backend st\n    mode http\n    server s {}\n\
         backend app\n    mode http\n    server a {}\n",
        st.hostport(),
        app.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(get(&mut c, "/static/x"), "static /static/x x-via=fe-rules");
    assert_eq!(get(&mut c, "/ret"), "here");
    assert_eq!(get(&mut c, "/page"), "app /page x-via=fe-rules");
    let lines = s.wait_log_lines(3, |l| l.contains(" fe "), WAIT);
    assert!(lines[0].contains(" fe st/s "), "{lines:#?}");
    assert!(
        lines[1].contains(" fe fe/<NOSRV> ") && lines[1].contains(" LR "),
        "{lines:#?}"
    );
    assert!(lines[2].contains(" fe app/a "), "{lines:#?}");
    // tcplog, not httplog: no request line.
    assert!(lines.iter().all(|l| !l.contains("\"GET ")), "{lines:#?}");
    // Not HTTP: rejected, nothing reaches a server.
    assert!(tcp_send(port, b"SSH-2.0-test\r\n").is_empty());
    assert_eq!(st.reqs() + app.reqs(), 2);
}

/// A request routed later to a `mode tcp` backend cannot go there once the session is HTTP:
/// as in HAProxy, the connection is closed without an answer and the request logged `IR`;
/// the client's retry on a new connection is routed on its raw data, to the TCP backend.
#[test]
fn an_upgraded_session_never_reaches_a_tcp_backend() {
    let web = tagged("web");
    let echo = TcpBackend::echo();
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   use_backend raw if {{ path /raw }}\n    default_backend web\n\
         backend web\n    mode http\n    server w {}\nbackend raw\n    server e {}\n",
        web.hostport(),
        echo.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(get(&mut c, "/a"), "web /a x-via=-");
    c.send("GET /raw HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(c.wait_closed(WAIT).is_closed());
    let line = s.wait_log_line(|l| l.contains(" raw/<NOSRV> "), WAIT);
    assert!(line.contains(" IR "), "{line}");
    // A first request routed there on its raw data is a TCP session: tunnelled as is.
    let req = b"GET /raw HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut t = TcpStream::connect(lo(port)).unwrap();
    t.set_read_timeout(Some(WAIT)).unwrap();
    t.write_all(req).unwrap();
    let mut got = vec![0u8; req.len()];
    t.read_exact(&mut got).unwrap();
    assert_eq!(got, req);
}

/// HTTP/2 with prior knowledge on a `mode tcp` frontend: its preface is HTTP (`HTTP` ACL,
/// as in HAProxy), and each stream is routed by the frontend's rules.
#[test]
fn http2_prior_knowledge_through_switch_mode() {
    let st = tagged("static");
    let app = tagged("app");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content switch-mode http if HTTP\n\
         \x20   tcp-request content reject\n\
         \x20   use_backend st if {{ path_beg /static }}\n    default_backend app\n\
         backend st\n    mode http\n    server s {}\n\
         backend app\n    mode http\n    server a {}\n",
        st.hostport(),
        app.hostport()
    );
    let _s = Sluice::start(&cfg);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bodies = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(lo(port)).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        get_all(send, &["http://t/static/h2", "http://t/page"]).await
    });
    assert_eq!(bodies, ["static /static/h2 x-via=-", "app /page x-via=-"]);
}

/// A `mode tcp` frontend with an `ssl` bind whose rules pick an HTTP backend: a client that
/// agreed on `h2` by ALPN is served HTTP/2 (each stream routed by the frontend's rules), one
/// that agreed on `http/1.1` HTTP/1.1, both through the backend's HTTP rules.
#[test]
fn tls_clients_are_upgraded_by_their_alpn() {
    let dir = TempDir::new();
    let ck = rcgen::generate_simple_self_signed(vec!["up.example".to_string()]).unwrap();
    let pem = dir.write(
        "c.pem",
        format!("{}{}", ck.cert.pem(), ck.signing_key.serialize_pem()),
    );
    let web = tagged("web");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port} ssl crt {} alpn h2,http/1.1\n\
         \x20   default_backend web\n\
         backend web\n    mode http\n    http-request set-header x-via %[ssl_fc_alpn]\n\
         \x20   server w {}\n",
        pem.display(),
        web.hostport()
    );
    let _s = Sluice::start(&cfg);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let connect = |alpn: &'static [&'static str]| async move {
            let cfg = insecure_client(alpn, rustls::DEFAULT_VERSIONS);
            let tcp = tokio::net::TcpStream::connect(lo(port)).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("up.example").unwrap();
            tokio_rustls::TlsConnector::from(cfg)
                .connect(name, tcp)
                .await
                .unwrap()
        };
        let t = connect(&["h2", "http/1.1"]).await;
        assert_eq!(t.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (send, conn) = h2::client::handshake(t).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let got = get_all(send, &["https://up.example/one", "https://up.example/two"]).await;
        assert_eq!(got, ["web /one x-via=h2", "web /two x-via=h2"]);
        let mut t = connect(&["http/1.1"]).await;
        assert_eq!(t.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        t.write_all(b"GET /h1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = t.read_to_end(&mut out).await;
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.ends_with("web /h1 x-via=http/1.1"), "{out}");
    });
}

/// The first request of an upgraded session is the raw data the frontend's rules already
/// judged: they do not run again for it, and the variables they set reach the backend's
/// HTTP rules (HAProxy: "neither lost nor reexecuted"); each later request runs them once.
#[test]
fn the_first_request_is_judged_once_and_keeps_its_variables() {
    let seen = HttpBackend::with_handler("s", |r| {
        let h = |n: &str| r.header(n).unwrap_or("-").to_string();
        Reply::status(200, "s", format!("n={} t={}", h("x-n"), h("x-t")))
    });
    let (implicit, switched) = (free_port(), free_port());
    let cfg = format!(
        "{LOGGED_TCP}frontend imp\n    bind 127.0.0.1:{implicit}\n    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content set-var(sess.n) var(sess.n,0),add(1)\n\
         \x20   tcp-request content set-var(txn.t) str(raw) if {{ req.len gt 0 }}\n\
         \x20   default_backend web\n\
         frontend sw\n    bind 127.0.0.1:{switched}\n    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content set-var(sess.n) var(sess.n,0),add(1)\n\
         \x20   tcp-request content set-var(txn.t) str(raw) if {{ req.len gt 0 }}\n\
         \x20   tcp-request content switch-mode http if HTTP\n\
         \x20   default_backend web\n\
         backend web\n    mode http\n    http-request set-header x-n %[var(sess.n)]\n\
         \x20   http-request set-header x-t %[var(txn.t)] if {{ var(txn.t) -m found }}\n\
         \x20   server s {}\n",
        seen.hostport()
    );
    let _s = Sluice::start(&cfg);
    for port in [implicit, switched] {
        let mut c = HttpClient::connect(port);
        assert_eq!(c.get("/a").body_str(), "n=1 t=raw", "port {port}");
        // A later request: the rules run once for it, on the HTTP view (no raw data there,
        // so `txn.t` is not set again, and the previous request's is gone).
        assert_eq!(c.get("/b").body_str(), "n=2 t=-", "port {port}");
    }
}
