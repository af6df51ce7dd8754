//! Master-worker mode (`-W`, `-Ws`, `global master-worker`), as Debian's and Red Hat's
//! haproxy.service run it (`-Ws -f CONFIG -p PIDFILE`, `Type=notify`, `ExecReload=kill -USR2
//! $MAINPID`): systemd hears READY/RELOADING/STOPPING on `NOTIFY_SOCKET`, a reload serves the
//! new configuration without refusing a connection, a bad configuration leaves the current
//! worker serving, and SIGTERM takes everything down.

mod common;

use common::*;
use nix::sys::signal::Signal;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

fn config(port: u16, body: &str) -> String {
    format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request return status 200 content-type text/plain string {body}\n"
    )
}

/// The next message systemd would get.
fn next(n: &UnixDatagram) -> String {
    let mut b = [0u8; 256];
    let k = n.recv(&mut b).expect("a notification in time");
    String::from_utf8_lossy(&b[..k]).into_owned()
}

#[test]
fn systemd_notify_reloads_and_stops() {
    let tmp = TempDir::new();
    let notify_path = tmp.join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(WAIT)).unwrap();
    let pidfile = tmp.join("pid");
    let port = free_port();
    let s = Sluice::builder(&config(port, "one"))
        .arg("-Ws")
        .arg("-p")
        .arg(pidfile.display().to_string())
        .env("NOTIFY_SOCKET", &notify_path.display().to_string())
        .start();
    // The master is the service's main process: it says so, and the pidfile holds it.
    assert_eq!(next(&notify), format!("READY=1\nMAINPID={}", s.pid()));
    assert_eq!(
        std::fs::read_to_string(&pidfile).unwrap().trim(),
        s.pid().to_string()
    );
    assert_eq!(http_get(port, "/").body_str(), "one");

    // A reload while a client keeps connecting: every connection is served, by the old
    // configuration or the new one.
    std::fs::write(&s.cfg_path, config(port, "two")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, bad) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (stop, ok, bad) = (stop.clone(), ok.clone(), bad.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let r = http_raw(
                    port,
                    "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                );
                if r.status == 200 && matches!(r.body_str().as_str(), "one" | "two") {
                    ok.fetch_add(1, Ordering::SeqCst);
                } else {
                    bad.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    wait_until("requests before the reload", WAIT, || {
        ok.load(Ordering::SeqCst) > 20
    });
    s.signal(Signal::SIGUSR2);
    assert_eq!(next(&notify), "RELOADING=1");
    assert_eq!(next(&notify), "READY=1");
    let at_ready = ok.load(Ordering::SeqCst);
    wait_until("requests after the reload", WAIT, || {
        ok.load(Ordering::SeqCst) > at_ready + 20
    });
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap();
    assert_eq!(
        bad.load(Ordering::SeqCst),
        0,
        "a connection failed during the reload"
    );
    // The former worker may take a last connection until its soft stop closes its listeners.
    let first = worker_pids(&s)[0];
    wait_until("worker #0 gone", WAIT, || former_exited(&s, first));
    assert_eq!(http_get(port, "/").body_str(), "two");

    // A configuration error: the reload fails, the current worker goes on.
    std::fs::write(&s.cfg_path, config(port, "three") + "    bogus-keyword\n").unwrap();
    s.signal(Signal::SIGUSR2);
    assert_eq!(next(&notify), "RELOADING=1");
    assert_eq!(next(&notify), "READY=1");
    let alert = s.wait_stderr_line(|l| l.contains("Reload failed"), WAIT);
    assert!(alert.contains("exited with code 1"), "{alert}");
    assert!(s.stderr.text().contains("unknown keyword 'bogus-keyword'"));
    assert_eq!(http_get(port, "/").body_str(), "two");

    // SIGTERM: the workers go, then the master.
    s.signal(Signal::SIGTERM);
    assert_eq!(next(&notify), "STOPPING=1");
    let st = s.wait_exit(WAIT).expect("the master exits");
    assert!(st.success(), "{st:?}");
    assert!(connect_refused(port));
}

/// `master-worker` in the global section, without `-W`: the same mode, and a worker that
/// dies takes the master with it (HAProxy's default, without `no-exit-on-failure`).
#[test]
fn master_worker_keyword() {
    let port = free_port();
    let cfg = format!("global\n    master-worker\n{}", config(port, "kw"));
    let s = Sluice::builder(&cfg).start();
    assert_eq!(http_get(port, "/").body_str(), "kw");
    let worker = worker_pids(&s)[0];
    assert_ne!(worker, s.pid());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), Signal::SIGKILL).unwrap();
    let st = s.wait_exit(WAIT).expect("the master follows its worker");
    assert!(!st.success());
    s.wait_stderr_line(
        |l| {
            l.contains(&format!(
                "Current worker ({worker}) exited with code 137 (Killed)"
            ))
        },
        WAIT,
    );
    let (code, out) = Sluice::check("global\n    master-worker sometimes\n");
    assert_eq!(code, 1);
    assert!(
        out.contains("'master-worker' only supports 'no-exit-on-failure'"),
        "{out}"
    );
}

/// Workers that drop privileges and chroot themselves (`uid`, `gid`, `chroot`, as the
/// packaged configurations do) still report to the master, so systemd hears READY and a
/// reload replaces them. Needs root to change identity; skipped otherwise.
#[test]
fn workers_that_drop_privileges_still_report() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: changing uid needs root");
        return;
    }
    let tmp = TempDir::new();
    let jail = tmp.join("jail");
    std::fs::create_dir(&jail).unwrap();
    let notify_path = tmp.join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(WAIT)).unwrap();
    let port = free_port();
    let cfg = |body: &str| {
        format!(
            "global\n    uid 65534\n    gid 65534\n    chroot {}\n{}",
            jail.display(),
            config(port, body)
        )
    };
    let s = Sluice::builder(&cfg("jailed"))
        .arg("-Ws")
        .env("NOTIFY_SOCKET", &notify_path.display().to_string())
        .start();
    assert_eq!(next(&notify), format!("READY=1\nMAINPID={}", s.pid()));
    assert_eq!(http_get(port, "/").body_str(), "jailed");
    std::fs::write(&s.cfg_path, cfg("again")).unwrap();
    s.signal(Signal::SIGUSR2);
    assert_eq!(next(&notify), "RELOADING=1");
    assert_eq!(next(&notify), "READY=1");
    let first = worker_pids(&s)[0];
    wait_until("worker #0 gone", WAIT, || former_exited(&s, first));
    assert_eq!(http_get(port, "/").body_str(), "again");
    s.signal(Signal::SIGTERM);
    assert!(s.wait_exit(WAIT).expect("the master exits").success());
}

/// `mworker-max-reloads 1`: a former worker still serving a long connection is stopped once
/// it has outlived one more reload; without the limit it would finish that connection.
#[test]
fn mworker_max_reloads_stops_lingering_workers() {
    let origin = TcpBackend::echo();
    let port = free_port();
    let cfg = format!(
        "global\n    mworker-max-reloads 1\n\
         defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
         listen l\n    bind 127.0.0.1:{port}\n    server o {}\n",
        origin.hostport()
    );
    let s = Sluice::builder(&cfg).arg("-W").start();
    // A tunnel held open through worker #0: its soft stop waits for it.
    let mut held = std::net::TcpStream::connect(lo(port)).unwrap();
    held.set_read_timeout(Some(WAIT)).unwrap();
    let echo = |c: &mut std::net::TcpStream| -> std::io::Result<[u8; 4]> {
        use std::io::{Read, Write};
        c.write_all(b"ping")?;
        let mut b = [0u8; 4];
        c.read_exact(&mut b).map(|()| b)
    };
    assert_eq!(&echo(&mut held).unwrap(), b"ping");
    s.signal(Signal::SIGUSR2);
    wait_until("two loadings", WAIT, || {
        s.stderr.text().matches("Loading success.").count() == 2
    });
    // One reload outlived: still serving its tunnel.
    assert_eq!(&echo(&mut held).unwrap(), b"ping");
    s.signal(Signal::SIGUSR2);
    wait_until("three loadings", WAIT, || {
        s.stderr.text().matches("Loading success.").count() == 3
    });
    let first = worker_pids(&s)[0];
    let line = s.wait_stderr_line(|l| l.contains("mworker-max-reloads"), WAIT);
    assert!(
        line.contains(&format!("Former worker ({first}) outlived 1 reload(s)")),
        "{line}"
    );
    wait_until("worker #0 gone", WAIT, || former_exited(&s, first));
    assert!(echo(&mut held).is_err(), "the tunnel ended with its worker");
    // The current worker serves new connections.
    let mut fresh = std::net::TcpStream::connect(lo(port)).unwrap();
    fresh.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(&echo(&mut fresh).unwrap(), b"ping");
}

/// The master CLI (`-S`, as Debian's unit passes it): `show proc` lists the master and its
/// worker in HAProxy's columns, `@1 CMD` and `@!PID CMD` relay a command to a worker's CLI,
/// and `reload` reloads.
#[test]
fn master_cli() {
    let tmp = TempDir::new();
    let sock = tmp.join("master.sock");
    let port = free_port();
    let s = Sluice::builder(&config(port, "one"))
        .arg("-W")
        .arg("-S")
        .arg(format!("{},mode,600", sock.display()))
        .start();
    let worker = worker_pids(&s)[0];
    let procs = stats_cli(&sock, "show proc");
    assert!(
        procs.starts_with("#<PID>          <type>          <reloads>       <uptime>"),
        "{procs}"
    );
    assert!(
        procs.contains(&format!("\n{:<15} master          0 [failed: 0]", s.pid())),
        "{procs}"
    );
    assert!(
        procs.contains(&format!("# workers\n{worker:<15} worker          0 ")),
        "{procs}"
    );
    let info = stats_cli(&sock, "@1 show info");
    assert!(info.contains(&format!("Pid: {worker}\n")), "{info}");
    let info = stats_cli(&sock, &format!("@!{worker} show info"));
    assert!(info.contains(&format!("Pid: {worker}\n")), "{info}");
    assert_eq!(
        stats_cli(&sock, "@!1 show info"),
        "Can't find the target CLI!\n\n"
    );
    std::fs::write(&s.cfg_path, config(port, "two")).unwrap();
    assert_eq!(stats_cli(&sock, "reload"), "\n");
    wait_until("reloaded", WAIT, || former_exited(&s, worker));
    assert_eq!(http_get(port, "/").body_str(), "two");
    let procs = stats_cli(&sock, "show proc");
    assert!(procs.contains(" master          1 [failed: 0]"), "{procs}");
    assert!(!procs.contains(&worker.to_string()), "{procs}");
}
