//! TCP mode: bytes both ways, large transfers, half-close, server-speaks-first, tcplog line,
//! refused server, client/server/tunnel timeouts, roundrobin of connections.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

const TCP_DEFAULTS: &str = "defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
";

fn tcp_proxy(defaults: &str, extra: &str, servers: &[String]) -> (Sluice, u16) {
    let port = free_port();
    let mut cfg = format!(
        "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n{extra}\n"
    );
    for (i, s) in servers.iter().enumerate() {
        cfg.push_str(&format!("    server s{} {s}\n", i + 1));
    }
    (Sluice::start(&cfg), port)
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(lo(port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_write_timeout(Some(WAIT)).unwrap();
    s
}

fn read_exact_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    s.read_exact(&mut v).unwrap();
    v
}

/// Reads until EOF (or reset, or timeout); returns the bytes and what ended the read.
fn read_until_closed(s: &mut TcpStream, timeout: Duration) -> (Vec<u8>, Closed) {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 65536];
    loop {
        match read_retrying(s, &mut b) {
            Ok(0) => return (out, Closed::Eof),
            Ok(n) => out.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (out, Closed::Reset);
            }
            Err(_) => return (out, Closed::StillOpen),
        }
    }
}

#[test]
fn bytes_flow_both_ways() {
    let echo = TcpBackend::echo();
    let (_s, port) = tcp_proxy(TCP_DEFAULTS, "", &[echo.hostport()]);
    let mut c = connect(port);
    for msg in [
        &b"hello"[..],
        b"\x00\x01\x02binary\xff",
        b"GET / HTTP/1.1\r\n\r\n",
    ] {
        c.write_all(msg).unwrap();
        assert_eq!(read_exact_n(&mut c, msg.len()), msg);
    }
}

/// HTTP-only keywords in a `mode tcp` proxy are ignored (with HAProxy's warnings, checked in
/// the parser's tests): an HTTP request passes byte for byte, not denied, no header added.
#[test]
fn http_keywords_in_tcp_mode_are_ignored_as_haproxy_ignores_them() {
    let echo = TcpBackend::echo();
    let (_s, port) = tcp_proxy(
        TCP_DEFAULTS,
        "    http-request deny\n    option forwardfor\n    cookie S insert\n    \
         balance uri\n    redirect prefix /elsewhere",
        &[echo.hostport()],
    );
    let mut c = connect(port);
    let req = b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
    c.write_all(req).unwrap();
    assert_eq!(read_exact_n(&mut c, req.len()), req);
}

/// `option contstats`: a live TCP session's bytes are in the stats while it runs; without
/// it, they are added when it ends (HAProxy's default).
#[test]
fn contstats_counts_bytes_while_the_session_runs() {
    let echo = TcpBackend::echo();
    for contstats in [true, false] {
        let dir = TempDir::new();
        let sock = dir.join("admin.sock");
        let port = free_port();
        let opt = if contstats {
            "    option contstats\n"
        } else {
            ""
        };
        let cfg = format!(
            "global\n    stats socket {} level admin\n{TCP_DEFAULTS}frontend fe\n{opt}    \
             bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server s1 {}\n",
            sock.display(),
            echo.hostport()
        );
        let _s = Sluice::start(&cfg);
        let mut c = connect(port);
        let msg = [7u8; 3000];
        c.write_all(&msg).unwrap();
        read_exact_n(&mut c, msg.len());
        let live = || -> Vec<u64> {
            ["bin", "bout"]
                .iter()
                .map(|col| stat_column(&sock, "be", "s1", col).parse().unwrap())
                .collect()
        };
        if contstats {
            // The echo may reach the client a moment before its bytes are counted.
            wait_until("bytes counted while the session runs", WAIT, || {
                live() == [3000, 3000]
            });
        } else {
            let live = live();
            assert_eq!(live, [0, 0], "counted at the end only");
        }
        drop(c);
        // At the end both count the whole session once.
        wait_until("the session's end in the stats", WAIT, || {
            stat_column(&sock, "be", "s1", "bout") == "3000"
        });
        assert_eq!(stat_column(&sock, "be", "s1", "bin"), "3000");
        assert_eq!(stat_column(&sock, "fe", "FRONTEND", "bout"), "3000");
    }
}

#[test]
fn large_transfer_in_both_directions_at_once() {
    let echo = TcpBackend::echo();
    let (_s, port) = tcp_proxy(TCP_DEFAULTS, "", &[echo.hostport()]);
    let mut c = connect(port);
    let data: Vec<u8> = (0..4_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut w = c.try_clone().unwrap();
    let d2 = data.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&d2).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let (got, end) = read_until_closed(&mut c, WAIT);
    writer.join().unwrap();
    assert_eq!(end, Closed::Eof);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "data corrupted in transit");
}

#[test]
fn half_close_client_still_gets_the_reply() {
    // The server reads until EOF, then answers with what it got, then closes.
    let srv = TcpBackend::with_handler(|mut s, _| {
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let _ = s.write_all(format!("got {} bytes", all.len()).as_bytes());
    });
    let (_s, port) = tcp_proxy(TCP_DEFAULTS, "", &[srv.hostport()]);
    let mut c = connect(port);
    c.write_all(&[b'x'; 1000]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let (got, end) = read_until_closed(&mut c, WAIT);
    assert_eq!(String::from_utf8_lossy(&got), "got 1000 bytes");
    assert_eq!(end, Closed::Eof);
}

#[test]
fn half_close_server_side_still_accepts_client_data() {
    // The server sends a banner and shuts its side down, but keeps reading.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let tx = std::sync::Mutex::new(tx);
    let srv = TcpBackend::with_handler(move |mut s, _| {
        let _ = s.write_all(b"banner");
        let _ = s.shutdown(Shutdown::Write);
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let _ = tx.lock().unwrap().send(all);
    });
    let (_s, port) = tcp_proxy(TCP_DEFAULTS, "", &[srv.hostport()]);
    let mut c = connect(port);
    assert_eq!(read_exact_n(&mut c, 6), b"banner");
    // The server's FIN reaches the client...
    let mut b = [0u8; 16];
    assert_eq!(
        read_retrying(&mut c, &mut b).unwrap(),
        0,
        "server shutdown should reach the client as EOF"
    );
    // ...but the client can still send.
    c.write_all(b"late data").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let got = rx
        .recv_timeout(WAIT)
        .expect("server never saw the client's EOF");
    assert_eq!(String::from_utf8_lossy(&got), "late data");
}

#[test]
fn server_speaks_first() {
    let srv = TcpBackend::with_handler(|mut s, _| {
        let _ = s.write_all(b"220 ready\r\n");
        let _ = echo_once(&mut s);
    });
    let (_s, port) = tcp_proxy(TCP_DEFAULTS, "", &[srv.hostport()]);
    let mut c = connect(port);
    assert_eq!(read_exact_n(&mut c, 11), b"220 ready\r\n");
}

fn echo_once(s: &mut TcpStream) -> std::io::Result<()> {
    let mut b = [0u8; 1024];
    let n = read_retrying(s, &mut b)?;
    s.write_all(&b[..n])
}

#[test]
fn tcplog_line_after_close() {
    let srv = TcpBackend::with_handler(|mut s, _| {
        let mut b = [0u8; 5];
        if s.read_exact(&mut b).is_ok() {
            let _ = s.write_all(&[b'r'; 1234]);
        }
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let (s, port) = tcp_proxy(LOGGED_TCP, "", &[srv.hostport()]);
    let mut c = connect(port);
    let cport = c.local_addr().unwrap().port();
    c.write_all(b"hello").unwrap();
    assert_eq!(read_exact_n(&mut c, 1234).len(), 1234);
    drop(c);
    let line = s.wait_log_line(|l| l.contains(&format!(":{cport} ")), WAIT);
    let re = regex::Regex::new(
        r"^127\.0\.0\.1:(\d+) \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d\.\d{3}\] fe be/s1 (\d+)/(\d+)/(\d+) (\d+) (..) (\d+)/(\d+)/(\d+)/(\d+)/(\d+) (\d+)/(\d+)$",
    )
    .unwrap();
    let c = re
        .captures(&line)
        .unwrap_or_else(|| panic!("tcplog line does not match: {line:?}"));
    assert_eq!(c[1].parse::<u16>().unwrap(), cport);
    assert_eq!(&c[5], "1234", "bytes from server to client: {line}");
    assert_eq!(&c[6], "--", "a normal close: {line}");
    // Counters at log time: this connection on the process and frontend; the server side may
    // already be closed (HAProxy logs 1/1/0/0/0 here), so backend/server are 0 or 1; no retry.
    assert_eq!((&c[7], &c[8], &c[11]), ("1", "1", "0"), "{line}");
    assert!(
        ["0", "1"].contains(&&c[9]) && ["0", "1"].contains(&&c[10]),
        "{line}"
    );
    assert_eq!((&c[12], &c[13]), ("0", "0"), "{line}");
}

#[test]
fn refused_server_closes_the_client_and_logs_sc() {
    let dead = closed_port();
    let (s, port) = tcp_proxy(LOGGED_TCP, "    retries 1", &[format!("127.0.0.1:{dead}")]);
    let mut c = connect(port);
    let cport = c.local_addr().unwrap().port();
    let _ = c.write_all(b"anyone?");
    let (got, end) = read_until_closed(&mut c, WAIT);
    assert!(got.is_empty(), "TCP mode sends nothing on failure: {got:?}");
    assert!(end.is_closed(), "{end:?}");
    let line = s.wait_log_line(|l| l.contains(&format!(":{cport} ")), WAIT);
    assert!(
        line.contains(" SC "),
        "termination state SC expected: {line}"
    );
}

#[test]
fn roundrobin_spreads_connections() {
    let a = TcpBackend::with_handler(|mut s, _| {
        let _ = s.write_all(b"A");
    });
    let b = TcpBackend::with_handler(|mut s, _| {
        let _ = s.write_all(b"B");
    });
    let (_s, port) = tcp_proxy(
        TCP_DEFAULTS,
        "    balance roundrobin",
        &[a.hostport(), b.hostport()],
    );
    let mut seen = String::new();
    for _ in 0..6 {
        let mut c = connect(port);
        let (got, _) = read_until_closed(&mut c, WAIT);
        seen.push_str(&String::from_utf8_lossy(&got));
    }
    assert_eq!(seen.matches('A').count(), 3, "{seen}");
    assert_eq!(seen.matches('B').count(), 3, "{seen}");
}

fn idle_close_time(defaults: &str, extra: &str) -> Duration {
    let echo = TcpBackend::echo();
    let (_s, port) = tcp_proxy(defaults, extra, &[echo.hostport()]);
    let mut c = connect(port);
    c.write_all(b"ping").unwrap();
    assert_eq!(read_exact_n(&mut c, 4), b"ping");
    let t0 = Instant::now();
    let (got, end) = read_until_closed(&mut c, WAIT);
    assert!(got.is_empty());
    assert!(
        end.is_closed(),
        "idle connection not closed within {WAIT:?}: {end:?}"
    );
    t0.elapsed()
}

#[test]
fn timeout_client_closes_an_idle_connection() {
    let took = idle_close_time(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 300ms\n    timeout server 10s\n",
        "",
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn timeout_server_closes_an_idle_connection() {
    let took = idle_close_time(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 10s\n    timeout server 300ms\n",
        "",
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn timeout_tunnel_supersedes_client_and_server() {
    let took = idle_close_time(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 200ms\n    timeout server 200ms\n    timeout tunnel 1200ms\n",
        "",
    );
    assert!(
        took >= Duration::from_millis(1100),
        "closed after {took:?}: client/server timeouts applied instead of tunnel"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
}

#[test]
fn activity_resets_the_idle_timeout() {
    let echo = TcpBackend::echo();
    let (_s, port) = tcp_proxy(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 500ms\n    timeout server 500ms\n",
        "",
        &[echo.hostport()],
    );
    let mut c = connect(port);
    let t0 = Instant::now();
    // Talk every 100 ms for well over the timeout.
    while t0.elapsed() < Duration::from_millis(1500) {
        c.write_all(b"k").unwrap();
        assert_eq!(read_exact_n(&mut c, 1), b"k");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn listen_section_in_tcp_mode() {
    let echo = TcpBackend::echo();
    let port = free_port();
    let cfg = format!(
        "{TCP_DEFAULTS}listen l\n    bind 127.0.0.1:{port}\n    server e {}\n",
        echo.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = connect(port);
    c.write_all(b"via listen").unwrap();
    assert_eq!(read_exact_n(&mut c, 10), b"via listen");
}

/// `timeout server-fin`: once the client has half-closed and sluice has passed its FIN on to
/// the server, the server may stay silent only that long (instead of `timeout server`, 10 s
/// here) before sluice closes the session (HAProxy: the -fin timeout of the side sluice shut).
#[test]
fn server_fin_timeout_bounds_a_session_the_client_half_closed() {
    // The server reads to EOF and then never answers nor closes (until the test ends).
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let tx = std::sync::Mutex::new(tx);
    // Holds the server's socket open until the test ends (drops `hold`).
    let (hold, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let srv = TcpBackend::with_handler(move |mut s, _| {
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let _ = tx.lock().unwrap().send(());
        let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(30));
        drop(s);
    });
    // client-fin must not be the one that applies here.
    let defaults =
        format!("{TCP_DEFAULTS}    timeout server-fin 300ms\n    timeout client-fin 20s\n");
    let (_s, port) = tcp_proxy(&defaults, "", &[srv.hostport()]);
    let mut c = connect(port);
    c.write_all(b"hello").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    rx.recv_timeout(WAIT)
        .expect("the server saw the client's FIN");
    let t0 = Instant::now();
    let (_, end) = read_until_closed(&mut c, Duration::from_secs(8));
    let took = t0.elapsed();
    assert_ne!(end, Closed::StillOpen, "session not closed by server-fin");
    assert!(
        took < Duration::from_secs(5),
        "closed after {took:?}, not by server-fin"
    );
    assert!(
        took >= Duration::from_millis(250),
        "closed after only {took:?}"
    );
    drop(hold);
}

/// `timeout client-fin`: once the server has half-closed and sluice has passed its FIN on to
/// the client, the client may stay silent only that long before sluice closes the session
/// (the server sees its connection end well before the 10 s of `timeout client`).
#[test]
fn client_fin_timeout_bounds_a_session_the_server_half_closed() {
    let (tx, rx) = std::sync::mpsc::channel::<Duration>();
    let tx = std::sync::Mutex::new(tx);
    let srv = TcpBackend::with_handler(move |mut s, _| {
        let _ = s.write_all(b"bye");
        let _ = s.shutdown(Shutdown::Write);
        let t0 = Instant::now();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let _ = tx.lock().unwrap().send(t0.elapsed());
    });
    let defaults =
        format!("{TCP_DEFAULTS}    timeout client-fin 300ms\n    timeout server-fin 20s\n");
    let (_s, port) = tcp_proxy(&defaults, "", &[srv.hostport()]);
    let mut c = connect(port);
    assert_eq!(read_exact_n(&mut c, 3), b"bye");
    let (_, end) = read_until_closed(&mut c, WAIT);
    assert_eq!(end, Closed::Eof, "the server's FIN is forwarded");
    let took = rx
        .recv_timeout(WAIT)
        .expect("sluice closed the server side");
    assert!(
        took < Duration::from_secs(5),
        "closed after {took:?}, not by client-fin"
    );
    assert!(
        took >= Duration::from_millis(250),
        "closed after only {took:?}"
    );
}

/// The kernel's timer for the established IPv4 socket whose local port is `local` and remote
/// port `remote`, from /proc/net/tcp: 2 is the keep-alive timer (SO_KEEPALIVE on an idle
/// connection), 0 none.
fn tcp_timer(local: u16, remote: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let port = |a: &str| u16::from_str_radix(a.rsplit(':').next().unwrap(), 16).unwrap();
        (f[3] == "01" && port(f[1]) == local && port(f[2]) == remote)
            .then(|| f[5].split(':').next().unwrap().parse().unwrap())
    })
}

/// `option tcpka` (both sides), `clitcpka`, `srvtcpka`: SO_KEEPALIVE where they say, nowhere
/// else (seen as the kernel's keep-alive timer on the idle connections).
#[test]
fn tcpka_options_turn_on_keepalive_probes_where_they_apply() {
    // An echo server that records the port each connection came from.
    let peers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let p2 = peers.clone();
    let backend = TcpBackend::with_handler(move |mut s, _| {
        p2.lock().unwrap().push(s.peer_addr().unwrap().port());
        let mut buf = [0u8; 4];
        if s.read_exact(&mut buf).is_ok() {
            let _ = s.write_all(&buf);
        }
        let _ = s.read(&mut buf);
    });
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let mut cfg = String::from(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n",
    );
    for (i, opt) in ["tcpka", "clitcpka", "srvtcpka", "dontlognull"]
        .iter()
        .enumerate()
    {
        cfg.push_str(&format!(
            "listen l{i}\n    bind 127.0.0.1:{}\n    option {opt}\n    server s {}\n",
            ports[i],
            backend.hostport()
        ));
    }
    let _s = Sluice::start(&cfg);
    let bport = backend.addr.port();
    let mut want = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let mut c = TcpStream::connect(lo(*port)).unwrap();
        c.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).unwrap();
        let client_side = c.local_addr().unwrap().port();
        // The proxy's socket towards the client: local port = the listener's.
        let front = tcp_timer(*port, client_side);
        // The proxy's socket towards the server: from the port the server saw.
        let server_peer = peers.lock().unwrap()[i];
        let back = tcp_timer(server_peer, bport);
        want.push((i, front, back));
        drop(c);
    }
    assert_eq!(
        want,
        [
            (0, Some(2), Some(2)),
            (1, Some(2), Some(0)),
            (2, Some(0), Some(2)),
            (3, Some(0), Some(0)),
        ]
    );
}

/// `option logasap`: the line is written once the server is connected, while the session
/// is still open, with `+` before the total time and the bytes; none at the end.
#[test]
fn logasap_logs_at_connect() {
    let srv = TcpBackend::echo();
    let (s, port) = tcp_proxy(
        &LOGGED_TCP.replace("option tcplog", "option tcplog\n    option logasap"),
        "",
        &[srv.hostport()],
    );
    let mut c = connect(port);
    let cport = c.local_addr().unwrap().port();
    c.write_all(b"ping").unwrap();
    assert_eq!(read_exact_n(&mut c, 4), b"ping");
    // Still connected: the line is already there.
    let line = s.wait_log_line(|l| l.contains(&format!(":{cport} ")), WAIT);
    let re = regex::Regex::new(r" fe be/s1 \d+/\d+/\+\d+ \+0 -- 1/1/\d+/1/0 0/0$").unwrap();
    assert!(re.is_match(&line), "{line}");
    drop(c);
    // The session's end adds no second line: another session's line comes next.
    let mut c2 = connect(port);
    let cport2 = c2.local_addr().unwrap().port();
    c2.write_all(b"x").unwrap();
    assert_eq!(read_exact_n(&mut c2, 1), b"x");
    s.wait_log_line(|l| l.contains(&format!(":{cport2} ")), WAIT);
    let lines = s.wait_log_lines(2, |l| l.contains(" fe be/s1 "), WAIT);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(&format!(":{cport} ")))
            .count(),
        1,
        "{lines:?}"
    );
}

/// `tune.rcvbuf.client` / `tune.sndbuf.server`: the kernel buffers of the listening socket
/// (which accepted ones inherit) and of server connections, as `ss` shows them (Linux
/// doubles the value asked for, its bookkeeping overhead).
#[test]
fn socket_buffer_sizes_reach_the_kernel() {
    if std::process::Command::new("ss").arg("-V").output().is_err() {
        eprintln!("skipped: no ss");
        return;
    }
    let b = TcpBackend::echo();
    let port = free_port();
    let cfg = format!(
        "global\n    tune.rcvbuf.client 65536\n    tune.sndbuf.server 49152\n{LOGGED_TCP}\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        b.addr
    );
    let _s = Sluice::start(&cfg);
    let ss = |filter: &str| {
        let out = std::process::Command::new("ss")
            .args(["-tnm", "-a", filter])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let listening = ss(&format!("sport = :{port}"));
    assert!(listening.contains("rb131072"), "{listening}");
    // A connection through: sluice's socket to the server has the send buffer asked for.
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    std::io::Write::write_all(&mut c, b"ping").unwrap();
    let mut got = [0u8; 4];
    std::io::Read::read_exact(&mut c, &mut got).unwrap();
    let to_server = ss(&format!("dport = :{}", b.addr.port()));
    assert!(to_server.contains("tb98304"), "{to_server}");
}
