//! Process life: soft stop (SIGUSR1), hard stop (SIGTERM/SIGINT), hard-stop-after, `bind fd@N`,
//! global maxconn, environment variables and `.if` in the config, syslog over UDP, daemon mode,
//! bind failures, several binds.

mod common;

use common::*;
use nix::sys::signal::Signal;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The connection must end: closed, possibly after an error response (HAProxy sends a 502 to
/// requests cut by a hard stop).
fn assert_connection_ends(c: &mut HttpClient) {
    match c.wait_closed(WAIT) {
        Closed::Eof | Closed::Reset => {}
        Closed::Data(d) => {
            assert!(
                d.starts_with(b"HTTP/1.1 5"),
                "unexpected data: {:?}",
                String::from_utf8_lossy(&d)
            );
            let _ = c.wire.read_to_end();
        }
        Closed::StillOpen => panic!("connection still open"),
    }
}

fn simple(defaults: &str, global: &str, b: &HttpBackend) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "global\n{global}\n{defaults}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n{}",
        backend_section("be", "", &[b])
    );
    (Sluice::start(&cfg), port)
}

fn send_bg(port: u16, path: &str) -> std::thread::JoinHandle<(Response, HttpClient)> {
    let mut c = HttpClient::connect(port);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
    std::thread::spawn(move || {
        let r = c.read_final(false);
        (r, c)
    })
}

#[test]
fn soft_stop_finishes_in_flight_request_then_exits_0() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (s, port) = simple(DEFAULTS_HTTP, "", &b);
    let inflight = send_bg(port, "/slow");
    b.wait_requests(1, WAIT);
    s.signal(Signal::SIGUSR1);
    // Listeners close: new connections are refused...
    wait_until("listener closed after SIGUSR1", WAIT, || {
        connect_refused(port)
    });
    // ...but the process waits for the in-flight request.
    assert!(
        s.exit_status().is_none(),
        "sluice exited with a request in flight"
    );
    gate.release(1);
    let (r, mut c) = inflight.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "/slow");
    // The response itself announces the close, as HAProxy's does during a soft stop.
    assert!(r.conn_close(), "no 'connection: close' on {:?}", r.headers);
    c.expect_closed();
    let st = s
        .wait_exit(WAIT)
        .expect("sluice did not exit after its last request");
    assert_eq!(st.code(), Some(0), "{st:?}");
}

#[test]
fn soft_stop_closes_idle_keepalive_connections() {
    let b = HttpBackend::start("s1");
    let (s, port) = simple(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n    timeout server 60s\n",
        "",
        &b,
    );
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    s.signal(Signal::SIGUSR1);
    c.expect_closed();
    let st = s
        .wait_exit(WAIT)
        .expect("an idle keep-alive connection must not hold a soft stop");
    assert_eq!(st.code(), Some(0));
}

#[test]
fn sigterm_stops_at_once_even_with_requests_in_flight() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (s, port) = simple(DEFAULTS_HTTP, "", &b);
    let mut c = HttpClient::connect(port);
    c.send("GET /hang HTTP/1.1\r\nHost: t\r\n\r\n");
    b.wait_requests(1, WAIT);
    let t0 = Instant::now();
    s.signal(Signal::SIGTERM);
    let st = s.wait_exit(WAIT).expect("sluice ignored SIGTERM");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // sluice exits 0; HAProxy dies of the signal. Either way it stopped at once.
    assert!(st.code() == Some(0) || st.code().is_none(), "{st:?}");
    assert_connection_ends(&mut c);
    assert!(connect_refused(port));
}

#[test]
fn sigint_stops_at_once() {
    let b = HttpBackend::start("s1");
    let (s, port) = simple(DEFAULTS_HTTP, "", &b);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    s.signal(Signal::SIGINT);
    let st = s.wait_exit(WAIT).expect("sluice ignored SIGINT");
    assert!(st.code() == Some(0) || st.code().is_none(), "{st:?}");
    assert!(c.wait_closed(WAIT).is_closed());
}

#[test]
fn hard_stop_after_bounds_a_soft_stop() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (s, port) = simple(DEFAULTS_HTTP, "    hard-stop-after 600ms", &b);
    let mut c = HttpClient::connect(port);
    c.send("GET /hang HTTP/1.1\r\nHost: t\r\n\r\n");
    b.wait_requests(1, WAIT);
    let t0 = Instant::now();
    s.signal(Signal::SIGUSR1);
    let st = s
        .wait_exit(WAIT)
        .expect("hard-stop-after did not end the process");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(550),
        "exited after {took:?}, before hard-stop-after"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(st.code(), Some(0), "{st:?}");
    assert_connection_ends(&mut c);
}

#[test]
fn bind_inherited_fd() {
    let b = HttpBackend::start("s1");
    let listener = TcpListener::bind(lo(0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let fd = listener.as_raw_fd();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind fd@{fd}\n    default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::builder(&cfg).inherit_fd(fd).start();
    for i in 0..3 {
        let r = http_get(port, &format!("/fd{i}"));
        assert_eq!(r.status, 200);
        assert_eq!(r.body_str(), "s1");
    }
    assert_eq!(b.reqs(), 3);
    drop(listener);
}

#[test]
fn bind_fd_that_is_not_a_socket_fails() {
    let cfg =
        format!("{DEFAULTS_HTTP}frontend fe\n    bind fd@2\n    http-request return status 200\n");
    let s = Sluice::builder(&cfg).spawn();
    let st = s.wait_exit(WAIT).expect("sluice must refuse to start");
    assert_eq!(st.code(), Some(1), "{st:?}\n{}", s.stderr.text());
    assert!(s.stderr.text().contains("fd@2"), "{}", s.stderr.text());
}

#[test]
fn global_maxconn_holds_extra_connections_until_one_closes() {
    let b = HttpBackend::start("s1");
    let (_s, port) = simple(DEFAULTS_HTTP, "    maxconn 2", &b);
    let mut c1 = HttpClient::connect(port);
    let mut c2 = HttpClient::connect(port);
    assert_eq!(c1.get("/1").status, 200);
    assert_eq!(c2.get("/2").status, 200);
    // A third connection is not served while two are open...
    let mut c3 = HttpClient::connect(port);
    c3.send("GET /3 HTTP/1.1\r\nHost: t\r\n\r\n");
    c3.expect_silent_for(Duration::from_millis(700));
    assert_eq!(b.reqs(), 2);
    // ...until one of them closes.
    drop(c1);
    let r = c3.read_final(false);
    assert_eq!(r.status, 200);
    assert_eq!(b.last_request().target, "/3");
    assert_eq!(c2.get("/2b").status, 200);
}

#[test]
fn frontend_maxconn_limits_that_frontend() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    maxconn 1\n    default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut c1 = HttpClient::connect(port);
    assert_eq!(c1.get("/1").status, 200);
    let mut c2 = HttpClient::connect(port);
    c2.send("GET /2 HTTP/1.1\r\nHost: t\r\n\r\n");
    c2.expect_silent_for(Duration::from_millis(500));
    drop(c1);
    assert_eq!(c2.read_final(false).status, 200);
}

#[test]
fn environment_variables_and_conditions_choose_binds() {
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe
    bind \"127.0.0.1:${{SLUICE_IT_PORT_A}}\"
.if defined(SLUICE_IT_USE_B)
    bind 127.0.0.1:${{SLUICE_IT_PORT_B}}
.else
    bind \"127.0.0.1:${{SLUICE_IT_PORT_C-{pc}}}\"
.endif
.if streq(\"${{SLUICE_IT_MODE}}\",loud)
    http-request return status 200 content-type text/plain string \"LOUD\"
.endif
    http-request return status 200 content-type text/plain string \"${{SLUICE_IT_GREETING-hi}}\"
"
    );
    {
        let _s = Sluice::builder(&cfg)
            .env("SLUICE_IT_PORT_A", &pa.to_string())
            .env("SLUICE_IT_USE_B", "1")
            .env("SLUICE_IT_PORT_B", &pb.to_string())
            .env_remove("SLUICE_IT_GREETING")
            .env_remove("SLUICE_IT_MODE")
            .start();
        assert_eq!(http_get(pa, "/").body_str(), "hi");
        assert_eq!(http_get(pb, "/").body_str(), "hi");
        assert!(connect_refused(pc), "the .else branch must not be active");
    }
    {
        let _s = Sluice::builder(&cfg)
            .env("SLUICE_IT_PORT_A", &pa.to_string())
            .env("SLUICE_IT_PORT_B", &pb.to_string())
            .env_remove("SLUICE_IT_USE_B")
            .env("SLUICE_IT_GREETING", "hello there")
            .env("SLUICE_IT_MODE", "loud")
            .start();
        assert_eq!(http_get(pc, "/").body_str(), "LOUD");
        assert_eq!(http_get(pa, "/").body_str(), "LOUD");
        assert!(connect_refused(pb), "the .if branch must not be active");
    }
    {
        let _s = Sluice::builder(&cfg)
            .env("SLUICE_IT_PORT_A", &pa.to_string())
            .env_remove("SLUICE_IT_USE_B")
            .env("SLUICE_IT_GREETING", "hello there")
            .env("SLUICE_IT_MODE", "quiet")
            .start();
        assert_eq!(http_get(pc, "/").body_str(), "hello there");
    }
}

#[test]
fn setenv_lines_change_the_environment_for_the_lines_after_them_and_env_fetches() {
    let port = free_port();
    let cfg = format!(
        "global
    setenv SLUICE_IT_SET_PORT {port}
    presetenv SLUICE_IT_KEPT from-config
    presetenv SLUICE_IT_FRESH fresh
    unsetenv SLUICE_IT_DROPPED
{DEFAULTS_HTTP}frontend fe
    bind \"127.0.0.1:${{SLUICE_IT_SET_PORT}}\"
    http-after-response set-header x-kept \"$SLUICE_IT_KEPT\"
    http-after-response set-header x-fresh %[env(SLUICE_IT_FRESH)]
    http-after-response set-header x-dropped \"${{SLUICE_IT_DROPPED-none}}\"
    http-request return status 200 content-type text/plain string ok
"
    );
    let _s = Sluice::builder(&cfg)
        .env("SLUICE_IT_KEPT", "from-env")
        .env("SLUICE_IT_DROPPED", "secret")
        .env_remove("SLUICE_IT_FRESH")
        .env_remove("SLUICE_IT_SET_PORT")
        .start();
    let r = http_get(port, "/");
    assert_eq!(r.body_str(), "ok");
    assert_eq!(r.header("x-kept"), Some("from-env"));
    assert_eq!(r.header("x-fresh"), Some("fresh"));
    assert_eq!(r.header("x-dropped"), Some("none"));
    // Outside `global` they are errors, as in HAProxy.
    let (code, err) = Sluice::check("frontend f\n    setenv A b\n");
    assert_eq!(code, 1);
    assert!(err.contains("setenv"), "{err}");
}

/// A proxy logging (httplog) to a UDP syslog socket of the test; `global_extra` goes into
/// `global`. Returns the running sluice, its port and the socket.
fn syslogged(global_extra: &str, b: &HttpBackend) -> (Sluice, u16, UdpSocket) {
    let udp = UdpSocket::bind(lo(0)).unwrap();
    udp.set_read_timeout(Some(WAIT)).unwrap();
    let uport = udp.local_addr().unwrap().port();
    let port = free_port();
    let cfg = format!(
        "global\n    log 127.0.0.1:{uport} local0\n{global_extra}defaults\n    mode http\n    log global\n    option httplog\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n{}",
        backend_section("be", "", &[b])
    );
    (Sluice::start(&cfg), port, udp)
}

/// The first syslog datagram that contains `needle`.
fn datagram_with(udp: &UdpSocket, needle: &str) -> String {
    let mut buf = [0u8; 2048];
    loop {
        let (n, _) = udp
            .recv_from(&mut buf)
            .expect("no syslog datagram within 10 s");
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        if m.contains(needle) {
            return m;
        }
    }
}

#[test]
fn syslog_over_udp() {
    let b = HttpBackend::start("s1");
    let (s, port, udp) = syslogged("", &b);
    assert_eq!(http_get(port, "/syslogged").status, 200);
    let msg = datagram_with(&udp, "/syslogged");
    let re = regex::Regex::new(
        r#"^<134>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d sluice\[(\d+)\]: 127\.0\.0\.1:\d+ \[[^\]]+\] fe be/s1 [-\d/]+ 200 \d+ - - ---- [\d/]+ 0/0 "GET /syslogged HTTP/1\.1"\n?$"#,
    )
    .unwrap();
    let caps = re
        .captures(&msg)
        .unwrap_or_else(|| panic!("syslog message does not match: {msg:?}"));
    assert_eq!(caps[1].parse::<i32>().unwrap(), s.pid());
}

#[test]
fn daemon_mode_writes_pidfile_and_serves() {
    struct Reap(i32);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = dir.write(
        "d.cfg",
        format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n{}",
            backend_section("be", "", &[&b])
        ),
    );
    let pf = dir.join("d.pid");
    let o = run_cli(&[
        "-D",
        "-p",
        pf.to_str().unwrap(),
        "-f",
        cfg.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "the launching process exits 0: {o:?}");
    wait_until("pidfile written", WAIT, || {
        std::fs::read_to_string(&pf).is_ok_and(|t| t.ends_with('\n'))
    });
    let pid: i32 = std::fs::read_to_string(&pf)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("sluice"),
        "pid {pid} is not sluice"
    );
    let _reap = Reap(pid);
    let r = http_get(port, "/daemon");
    assert_eq!(r.status, 200);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    wait_until("daemon stopped listening", WAIT, || connect_refused(port));
    // Gone, or a zombie with no descriptors left (nobody may reap it here).
    wait_until("daemon exited", WAIT, || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() == 0)
            .unwrap_or(true)
    });
}

#[test]
fn bind_failure_is_reported_and_exits_1() {
    let taken = TcpListener::bind(lo(0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend busy\n    bind 127.0.0.1:{port}\n    http-request return status 200\n"
    );
    let s = Sluice::builder(&cfg).spawn();
    let st = s
        .wait_exit(WAIT)
        .expect("sluice must exit when it cannot bind");
    assert_eq!(st.code(), Some(1));
    let err = s.stderr.text();
    assert!(err.contains("[ALERT]"), "{err}");
    assert!(
        err.contains("Starting frontend busy: cannot bind socket"),
        "{err}"
    );
    assert!(err.contains(&format!("[127.0.0.1:{port}]")), "{err}");
    assert!(!err.contains(READY), "must not claim readiness: {err}");
}

#[test]
fn several_binds_and_frontends_in_one_process() {
    let b1 = HttpBackend::start("one");
    let b2 = HttpBackend::start("two");
    let (p1, p2, p3) = (free_port(), free_port(), free_port());
    let cfg = format!(
        "global\n    nbthread 2\n{DEFAULTS_HTTP}frontend f1\n    bind 127.0.0.1:{p1}\n    bind 127.0.0.1:{p2}\n    default_backend be1\n\
         frontend f2\n    bind 127.0.0.1:{p3}\n    default_backend be2\n{}{}",
        backend_section("be1", "", &[&b1]),
        backend_section("be2", "", &[&b2])
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(http_get(p1, "/").body_str(), "one");
    assert_eq!(http_get(p2, "/").body_str(), "one");
    assert_eq!(http_get(p3, "/").body_str(), "two");
    // Many concurrent clients over both threads.
    let hs: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = HttpClient::connect(if i % 2 == 0 { p1 } else { p3 });
                (0..10)
                    .map(|_| c.get("/").status)
                    .filter(|&s| s == 200)
                    .count()
            })
        })
        .collect();
    let ok: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, 160);
}

#[test]
fn ipv6_dual_stack_bind() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind [::]:{port} v4v6\n    default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let s = Sluice::start(&cfg);
    let v6: std::net::SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let mut c6 = HttpClient::connect_addr(v6);
    assert_eq!(c6.get("/over-v6").status, 200);
    let mut c4 = HttpClient::connect(port);
    assert_eq!(c4.get("/over-v4").status, 200);
    // A v4 client of a dual-stack socket (HAProxy prints ::ffff:127.0.0.1).
    let l4 = s.wait_log_line(|l| l.contains("/over-v4"), WAIT);
    assert!(
        l4.contains(&format!("127.0.0.1:{} ", c4.local_port())),
        "{l4}"
    );
    let l6 = s.wait_log_line(|l| l.contains("/over-v6"), WAIT);
    assert!(l6.starts_with("::1:"), "{l6}");
}

#[test]
fn log_tag_names_the_program_in_syslog_headers() {
    let b = HttpBackend::start("s1");
    // What a migrated config keeps so that syslog rules matching `haproxy` still match.
    let (s, port, udp) = syslogged("    log-tag haproxy\n", &b);
    assert_eq!(http_get(port, "/tagged").status, 200);
    let msg = datagram_with(&udp, "/tagged");
    assert!(
        msg.contains(&format!(" haproxy[{}]: ", s.pid())),
        "syslog message: {msg:?}"
    );
    let (code, err) = Sluice::check("global\n    log-tag \"a b\"\n");
    assert_eq!(code, 1);
    assert!(err.contains("invalid log tag 'a b'"), "{err}");
}

/// `chroot`, `uid`, `gid`: taken after the listeners are bound, by every thread. As root the
/// process ends up in the directory with the new identity and still serves; otherwise the
/// start fails with HAProxy's alert and exit status 1.
#[test]
fn chroot_uid_and_gid_are_taken_after_binding() {
    let root = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 2\n    chroot {}\n    uid 65534\n    gid 65534\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port}\n    http-request return status 200 content-type text/plain string jailed\n",
        root.path().display()
    );
    if !nix::unistd::Uid::effective().is_root() {
        let s = Sluice::builder(&cfg).spawn();
        let st = s
            .wait_exit(Duration::from_secs(10))
            .expect("sluice should exit");
        assert_eq!(st.code(), Some(1));
        assert!(
            s.stderr
                .wait(|l| l.contains("Cannot chroot("), Duration::from_secs(5))
                .is_some()
        );
        return;
    }
    let s = Sluice::start(&cfg);
    let r = http_get(port, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "jailed");
    let proc_dir = format!("/proc/{}", s.pid());
    // The readiness lines come before the workers start: wait for both of them.
    let count = || {
        std::fs::read_dir(format!("{proc_dir}/task"))
            .unwrap()
            .count()
    };
    wait_until(
        "the main thread and two workers",
        Duration::from_secs(10),
        || count() >= 3,
    );
    assert_eq!(
        std::fs::read_link(format!("{proc_dir}/root")).unwrap(),
        std::fs::canonicalize(root.path()).unwrap()
    );
    let mut threads = 0;
    for t in std::fs::read_dir(format!("{proc_dir}/task")).unwrap() {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        let ids = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap()
                .split_whitespace()
                .skip(1)
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("Uid:"), ["65534"; 4], "{status}");
        assert_eq!(ids("Gid:"), ["65534"; 4], "{status}");
        assert!(ids("Groups:").is_empty(), "supplementary groups dropped");
        threads += 1;
    }
    assert!(threads >= 3, "every thread checked: {threads}");
}

/// `ulimit-n` sets the open-file limit sluice runs with (and the maxconn it derives);
/// `strict-limits` turns a maxconn that limit cannot carry into a start-up failure;
/// `zero-warning` makes any warning fatal, `-c` included.
#[test]
fn ulimit_n_strict_limits_and_zero_warning() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let port = free_port();
    let body = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    http-request return status 200\n"
    );
    let s = Sluice::start(&format!(
        "global\n    ulimit-n 3000\n    stats socket {} level admin\n{body}",
        sock.display()
    ));
    let info = stats_cli(&sock, "show info");
    assert!(info.contains("\nUlimit-n: 3000\n"), "{info}");
    let maxconn: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("Maxconn: "))
        .expect("Maxconn")
        .parse()
        .unwrap();
    assert!(maxconn < 1500, "derived from 3000 files: {maxconn}");
    drop(s);

    // 5000 connections need more than 3000 files: a warning, or with strict-limits a refusal.
    let cfg = format!("global\n    ulimit-n 3000\n    maxconn 5000\n    strict-limits\n{body}");
    let s = Sluice::builder(&cfg).spawn();
    let status = s.wait_exit(WAIT).expect("refuses to start");
    assert_eq!(status.code(), Some(1));
    let err = s.stderr_text();
    assert!(
        err.contains("maxconn 5000 cannot be honoured") && err.contains("'strict-limits'"),
        "{err}"
    );
    assert!(connect_refused(port));

    // A configuration warning with zero-warning: `-c` fails.
    let warned = format!("global\n    zero-warning\n    tune.ssl.default-dh-param 2048\n{body}");
    let (code, out) = Sluice::check(&warned);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("'tune.ssl.default-dh-param' has no effect"),
        "{out}"
    );
    assert!(out.contains("'zero-warning' is set"), "{out}");
    let (code, out) = Sluice::check(&warned.replace("    zero-warning\n", ""));
    assert_eq!(code, 0, "{out}");
}
