//! `master`: master-worker mode (`-W`, `-Ws`, `global master-worker`), as systemd units and
//! init scripts written for HAProxy run it. The master process serves no traffic: it starts a
//! worker process (this same binary on the same configuration files), and on `SIGUSR2` (or
//! `SIGHUP`) reloads by starting a new worker that takes the current one's listening sockets
//! (`-x`, over a private stats socket the master gives every worker) and soft-stops it
//! (`-sf`), so that no connection waiting to be accepted is lost. A new worker that fails
//! (a configuration error) leaves the current one serving. `SIGTERM`/`SIGINT`/`SIGUSR1` go on
//! to the workers; the master exits when they are gone. With `-Ws` it tells systemd
//! (`NOTIFY_SOCKET`) when the service is ready, reloading and stopping.
//!
//! It owns the worker processes' lifecycle and the two environment variables that make a
//! process a worker. It must not parse requests or bind listeners: workers do.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::cli_args::Options;

/// Set in a worker's environment: the path of the private stats socket it must open (admin
/// level, `expose-fd listeners`), which the next worker takes its listeners through.
const ENV_SOCK: &str = "SLUICE_WORKER_SOCK";
/// Set in a worker's environment: the master's datagram socket, told `READY <pid>` once the
/// worker serves.
const ENV_READY: &str = "SLUICE_MASTER_READY";

/// One worker process.
#[derive(Debug)]
struct Worker {
    pid: Pid,
    /// Its private stats socket.
    sock: PathBuf,
    /// The reload that started it (0 for the first).
    num: u32,
}

// ---------------------------------------------------------------------------------------------
// The worker's side.

/// In a worker: its private stats socket (`None` outside master-worker mode).
pub fn worker_socket() -> Option<PathBuf> {
    std::env::var_os(ENV_SOCK).map(PathBuf::from)
}

/// Whether this process is a worker of a master (which owns the pidfile and daemon mode).
pub fn is_worker() -> bool {
    std::env::var_os(ENV_SOCK).is_some()
}

/// In a worker: dies with the master (`SIGTERM`, as a soft stop would be of no use to
/// anyone then).
pub fn follow_master() {
    if is_worker() {
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    }
}

/// In a worker, once it serves: tells the master.
pub fn notify_ready() {
    if let Some(path) = std::env::var_os(ENV_READY)
        && let Ok(s) = UnixDatagram::unbound()
    {
        let _ = s.send_to(format!("READY {}", std::process::id()).as_bytes(), path);
    }
}

// ---------------------------------------------------------------------------------------------
// The master's side.

/// The master's main loop; returns the exit code.
pub fn run(opts: &Options, daemon: bool, pidfile: Option<&Path>, keep_on_failure: bool) -> i32 {
    match run_inner(opts, daemon, pidfile, keep_on_failure) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("[ALERT]    ({}) : {e}", std::process::id());
            1
        }
    }
}

fn run_inner(
    opts: &Options,
    daemon: bool,
    pidfile: Option<&Path>,
    keep_on_failure: bool,
) -> Result<i32, String> {
    if daemon {
        nix::unistd::daemon(true, false).map_err(|e| format!("cannot go to background: {e}"))?;
    }
    let me = std::process::id();
    if let Some(pf) = pidfile {
        std::fs::write(pf, format!("{me}\n"))
            .map_err(|e| format!("cannot write pidfile '{}': {e}", pf.display()))?;
    }
    // Private: the sockets in it hand out every listening socket to whoever connects.
    let dir = std::env::temp_dir().join(format!("sluice-master-{me}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    let _cleanup = RemoveDir(dir.clone());
    let ready_path = dir.join("ready");
    let ready = UnixDatagram::bind(&ready_path)
        .map_err(|e| format!("cannot bind '{}': {e}", ready_path.display()))?;
    let systemd = opts.systemd;
    // The binary's path, read now: after a package upgrade replaces the file, a reload starts
    // the new binary, as HAProxy's re-executed master does (the running one's own path then
    // reads "... (deleted)").
    let exe = std::env::current_exe().map_err(|e| format!("cannot find sluice's binary: {e}"))?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the master's loop: {e}"))?;
    rt.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let sig = |k| signal(k).map_err(|e| format!("cannot handle signals: {e}"));
        let (mut usr2, mut hup, mut term, mut int, mut usr1, mut chld) = (
            sig(SignalKind::user_defined2())?,
            sig(SignalKind::hangup())?,
            sig(SignalKind::terminate())?,
            sig(SignalKind::interrupt())?,
            sig(SignalKind::user_defined1())?,
            sig(SignalKind::child())?,
        );
        ready
            .set_nonblocking(true)
            .map_err(|e| format!("master socket: {e}"))?;
        let ready = tokio::net::UnixDatagram::from_std(ready)
            .map_err(|e| format!("master socket: {e}"))?;
        let mut num = 0u32;
        let mut current = spawn(&exe, opts, &dir, &ready_path, num, None)?;
        let mut pending: Option<Worker> = None;
        let mut old: Vec<Worker> = Vec::new();
        let mut started = false;
        let mut stopping = false;
        let mut buf = [0u8; 64];
        loop {
            let reload = tokio::select! {
                _ = usr2.recv() => true,
                _ = hup.recv() => true,
                _ = term.recv() => { stop(&mut stopping, systemd, Signal::SIGTERM, &current, &pending, &old); false }
                _ = int.recv() => { stop(&mut stopping, systemd, Signal::SIGINT, &current, &pending, &old); false }
                _ = usr1.recv() => { stop(&mut stopping, systemd, Signal::SIGUSR1, &current, &pending, &old); false }
                r = ready.recv(&mut buf) => {
                    let Ok(n) = r else { continue };
                    let Some(pid) = std::str::from_utf8(&buf[..n]).ok()
                        .and_then(|m| m.strip_prefix("READY "))
                        .and_then(|p| p.parse::<i32>().ok()) else { continue };
                    if pending.as_ref().is_some_and(|w| w.pid.as_raw() == pid) {
                        let new = pending.take().expect("checked just above");
                        eprintln!("[NOTICE]   ({me}) : Loading success.");
                        old.push(std::mem::replace(&mut current, new));
                        sd_notify(systemd, "READY=1");
                    } else if current.pid.as_raw() == pid && !started {
                        started = true;
                        eprintln!("[NOTICE]   ({me}) : Loading success.");
                        sd_notify(systemd, &format!("READY=1\nMAINPID={me}"));
                    }
                    false
                }
                _ = chld.recv() => {
                    // Reap every worker that ended.
                    while let Ok(st) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                        let (pid, code) = match st {
                            WaitStatus::Exited(p, c) => (p, c),
                            WaitStatus::Signaled(p, s, _) => (p, 128 + s as i32),
                            _ => break,
                        };
                        if let Some(i) = old.iter().position(|w| w.pid == pid) {
                            let w = old.remove(i);
                            eprintln!("[NOTICE]   ({me}) : Former worker #{} ({pid}) exited with code {code}", w.num);
                            let _ = std::fs::remove_file(&w.sock);
                        } else if pending.as_ref().is_some_and(|w| w.pid == pid) {
                            let w = pending.take().expect("checked just above");
                            let _ = std::fs::remove_file(&w.sock);
                            eprintln!("[ALERT]    ({me}) : Reload failed: the new worker ({pid}) exited with code {code}; worker #{} ({}) goes on serving.", current.num, current.pid);
                            sd_notify(systemd, "READY=1");
                        } else if current.pid == pid {
                            if stopping {
                                eprintln!("[NOTICE]   ({me}) : Current worker #{} ({pid}) exited with code {code}", current.num);
                                if pending.is_none() && old.is_empty() {
                                    return Ok(code);
                                }
                                continue;
                            }
                            eprintln!("[ALERT]    ({me}) : Current worker #{} ({pid}) exited with code {code}", current.num);
                            if !keep_on_failure || !started {
                                // As HAProxy: the other workers go too, and so does the master.
                                stopping = true;
                                for w in pending.iter().chain(&old) {
                                    let _ = kill(w.pid, Signal::SIGTERM);
                                }
                                if pending.is_none() && old.is_empty() {
                                    return Ok(code);
                                }
                            }
                        } else {
                            continue;
                        }
                        if stopping && pending.is_none() && old.is_empty() && !alive(current.pid) {
                            return Ok(0);
                        }
                    }
                    false
                }
            };
            if reload && !stopping {
                if pending.is_some() {
                    eprintln!("[WARNING]  ({me}) : A reload is already in progress; ignored.");
                    continue;
                }
                eprintln!("[WARNING]  ({me}) : Reloading: starting a new worker");
                sd_notify(systemd, "RELOADING=1");
                num += 1;
                match spawn(&exe, opts, &dir, &ready_path, num, Some(&current)) {
                    Ok(w) => pending = Some(w),
                    Err(e) => {
                        eprintln!("[ALERT]    ({me}) : {e}");
                        sd_notify(systemd, "READY=1");
                    }
                }
            }
        }
    })
}

/// Forwards a stop signal to every worker.
fn stop(
    stopping: &mut bool,
    systemd: bool,
    s: Signal,
    current: &Worker,
    pending: &Option<Worker>,
    old: &[Worker],
) {
    *stopping = true;
    sd_notify(systemd, "STOPPING=1");
    for w in std::iter::once(current).chain(pending).chain(old) {
        let _ = kill(w.pid, s);
    }
}

fn alive(pid: Pid) -> bool {
    kill(pid, None).is_ok()
}

/// Starts a worker: this binary on the same configuration, in the foreground; `from`: the
/// worker whose listeners it takes and which it then soft-stops.
fn spawn(
    exe: &Path,
    opts: &Options,
    dir: &Path,
    ready: &Path,
    num: u32,
    from: Option<&Worker>,
) -> Result<Worker, String> {
    let sock = dir.join(format!("worker-{num}.sock"));
    let mut c = Command::new(exe);
    for f in &opts.files {
        c.arg("-f").arg(f);
    }
    if let Some(n) = opts.maxconn {
        c.arg("-n").arg(n.to_string());
    }
    if opts.quiet {
        c.arg("-q");
    }
    if opts.debug {
        c.arg("-d");
    }
    if let Some(w) = from {
        c.arg("-x")
            .arg(&w.sock)
            .arg("-sf")
            .arg(w.pid.as_raw().to_string());
    }
    c.env(ENV_SOCK, &sock).env(ENV_READY, ready);
    let child = c
        .spawn()
        .map_err(|e| format!("cannot start a worker: {e}"))?;
    let pid = Pid::from_raw(child.id() as i32);
    eprintln!(
        "[NOTICE]   ({}) : New worker #{num} ({pid}) forked",
        std::process::id()
    );
    // Reaped by the SIGCHLD handler, not through `child`.
    drop(child);
    Ok(Worker { pid, sock, num })
}

/// `-Ws`: a state change for systemd (`Type=notify` units), when it asked for them.
fn sd_notify(systemd: bool, msg: &str) {
    if !systemd {
        return;
    }
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(s) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    // An abstract socket's name starts with '@'.
    let _ = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|a| s.send_to_addr(msg.as_bytes(), &a))
        }
        None => s.send_to(msg.as_bytes(), &path),
    };
}

/// Removes the master's private directory when the master ends.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

use std::os::unix::fs::DirBuilderExt as _;
