//! Servers on UNIX sockets (`server NAME unix@PATH`, `/PATH`, `abns@NAME`): HTTP and TCP
//! traffic, kept connections, PROXY headers, health checks, and how the stats and logs show
//! them (as HAProxy 2.6.12 does: `addr` is `unix`, `%si:%sp` is `unix:0`).

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

/// An HTTP/1.1 server on a UNIX socket: answers `unix NAME PATH` to each request, keeps
/// connections open, counts the connections it accepted. With `raw_first`, the first line
/// of each connection (a PROXY header) is recorded in `first_lines`.
struct UnixHttp {
    conns: Arc<AtomicUsize>,
    first_lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl UnixHttp {
    fn serve(l: UnixListener, name: &'static str, proxy_header: bool) -> UnixHttp {
        let conns = Arc::new(AtomicUsize::new(0));
        let first_lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c2, f2) = (conns.clone(), first_lines.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                c2.fetch_add(1, SeqCst);
                let f3 = f2.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut w = s;
                    if proxy_header {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        f3.lock().unwrap().push(line.trim_end().to_string());
                    }
                    loop {
                        let mut target = None;
                        loop {
                            let mut line = String::new();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if target.is_none() {
                                target = line.split(' ').nth(1).map(str::to_string);
                            }
                        }
                        let body = format!("unix {name} {}", target.unwrap_or_default());
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if w.write_all(resp.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        UnixHttp { conns, first_lines }
    }
}

#[test]
fn http_to_a_server_on_a_unix_socket() {
    let dir = TempDir::new();
    let path = dir.join("app.sock");
    let app = UnixHttp::serve(UnixListener::bind(&path).unwrap(), "app", false);
    let port = free_port();
    let cfg = format!(
        "global\n    log stdout format raw local0\n    stats socket {} level admin\n\
         defaults\n    mode http\n    log global\n    timeout connect 2s\n    \
         timeout client 10s\n    timeout server 10s\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    \
         log-format \"%b/%s %si:%sp %ST %r\"\n    default_backend be\n\
         backend be\n    server u1 unix@{}\n",
        dir.join("s.sock").display(),
        path.display()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    for p in ["/a", "/b"] {
        let r = c.request(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n"));
        assert_eq!((r.status, r.body_str()), (200, format!("unix app {p}")));
    }
    assert_eq!(app.conns.load(SeqCst), 1, "the server connection was kept");
    let line = s.wait_log_line(|l| l.contains("GET /b"), WAIT);
    assert!(line.starts_with("be/u1 unix:0 200 "), "{line}");
    assert_eq!(stat_column(&dir.join("s.sock"), "be", "u1", "addr"), "unix");
    let st = stats_cli(&dir.join("s.sock"), "show servers state be");
    let fields: Vec<&str> = st.lines().nth(2).unwrap().split(' ').collect();
    assert_eq!((fields[3], fields[4]), ("u1", "-"), "{st}");
}

#[test]
fn abstract_sockets_tcp_mode_and_proxy_headers() {
    let name = format!("sluice-test-{}", std::process::id());
    let a = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
    let app = UnixHttp::serve(UnixListener::bind_addr(&a).unwrap(), "abns", true);
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    server u1 abns@{name} send-proxy\n"
    );
    let _s = Sluice::start(&cfg);
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.write_all(b"GET /t HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = vec![0u8; 256];
    let n = read_retrying(&mut c, &mut got).unwrap();
    let text = String::from_utf8_lossy(&got[..n]).to_string();
    assert!(text.ends_with("unix abns /t"), "{text}");
    let local = c.local_addr().unwrap();
    let lines = app.first_lines.lock().unwrap().clone();
    assert_eq!(
        lines,
        [format!(
            "PROXY TCP4 127.0.0.1 127.0.0.1 {} {port}",
            local.port()
        )]
    );
}

#[test]
fn health_checks_reach_the_unix_socket() {
    let dir = TempDir::new();
    let path = dir.join("app.sock");
    let _app = UnixHttp::serve(UnixListener::bind(&path).unwrap(), "app", false);
    let gone = dir.join("gone.sock");
    let port = free_port();
    let sock = dir.join("s.sock");
    let cfg = format!(
        "global\n    stats socket {} level admin\n{LOGGED_HTTP}\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    option httpchk GET /health\n    \
         server up {} check inter 100ms\n    server down {} check inter 100ms\n",
        sock.display(),
        path.display(),
        gone.display()
    );
    let _s = Sluice::start(&cfg);
    wait_until("checks settled", Duration::from_secs(5), || {
        stat_column(&sock, "be", "up", "check_status") == "L7OK"
            && stat_column(&sock, "be", "down", "check_status") == "L4CON"
    });
    assert_eq!(stat_column(&sock, "be", "down", "status"), "DOWN");
    // Traffic goes to the one that is up.
    for _ in 0..3 {
        assert_eq!(http_get(port, "/x").body_str(), "unix app /x");
    }
}

#[test]
fn unix_servers_refuse_what_needs_ip() {
    let check = |server: &str| {
        Sluice::check(&format!(
            "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:8080\n    default_backend be\n\
             backend be\n    {server}\n"
        ))
    };
    let (code, err) = check("server u unix@/run/x.sock ssl verify none");
    assert_ne!(code, 0);
    assert!(
        err.contains("'ssl' on a server on a UNIX socket ('unix@/run/x.sock')"),
        "{err}"
    );
    let (code, err) = check("server u unix@");
    assert_ne!(code, 0);
    assert!(err.contains("missing socket path"), "{err}");
    let (code, err) = check("server u /run/x.sock source 127.0.0.1");
    assert_ne!(code, 0);
    assert!(err.contains("'source' does not apply"), "{err}");
    let (code, err) = check("server u /run/x.sock weight 5 maxconn 10");
    assert_eq!(code, 0, "{err}");
}

/// A proxy chained to another through an abstract socket, as HAProxy users write it
/// (`server x abns@name` in one proxy, `bind abns@name` in the other).
#[test]
fn proxies_chained_through_an_abstract_socket() {
    let app = HttpBackend::start("app");
    let port = free_port();
    let name = format!("sluice-chain-{}", std::process::id());
    let cfg = format!(
        "{LOGGED_HTTP}listen front\n    bind 127.0.0.1:{port}\n    server inner abns@{name}\n\
         frontend inner\n    bind abns@{name}\n    \
         http-request set-header x-via inner\n    default_backend app\n\
         backend app\n    server app {}\n",
        app.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    for p in ["/1", "/2"] {
        let r = c.request(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n"));
        assert_eq!((r.status, r.server()), (200, "app".to_string()));
    }
    assert_eq!(app.last_request().header("x-via"), Some("inner"));
    // The inner frontend logs the client as HAProxy logs a UNIX socket's.
    let line = s.wait_log_line(|l| l.contains(" inner app/app "), WAIT);
    assert!(line.starts_with("unix:"), "{line}");
    // `-c` accepts it too (nothing is bound then).
    let (code, err) = Sluice::check(&cfg);
    assert_eq!(code, 0, "{err}");
}
