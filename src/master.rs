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
/// Set in a worker's environment: the master's pid (a worker whose master is already gone
/// when it starts exits).
const ENV_MASTER: &str = "SLUICE_MASTER_PID";

/// In a worker: the master's socket, connected at start-up, before `chroot` and `user` take
/// the path and the permission to reach it away.
static READY: std::sync::OnceLock<UnixDatagram> = std::sync::OnceLock::new();

/// One worker process.
#[derive(Debug)]
struct Worker {
    pid: Pid,
    /// When it started (`show proc` uptime).
    since: std::time::Instant,
    /// Its private stats socket.
    sock: PathBuf,
    /// Reloads it has outlived (`mworker-max-reloads`).
    reloads: u32,
}

/// What a master CLI connection asks of the master's loop.
enum CliReq {
    /// `show proc`: the text to answer.
    ShowProc(tokio::sync::oneshot::Sender<String>),
    /// `reload`.
    Reload,
    /// `@N` / `@!PID`: the private socket of that worker, if there is one.
    Socket(Target, tokio::sync::oneshot::Sender<Option<PathBuf>>),
}

/// The process a master CLI command is for.
enum Target {
    /// `@1`: the current worker (HAProxy's relative number; there is one worker).
    Relative(u32),
    /// `@!PID`: any worker, current or former.
    Pid(i32),
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

/// In a worker, before it drops privileges: dies with the master (`SIGTERM`, as a soft stop
/// would be of no use to anyone then), and connects the socket it will report readiness on.
pub fn follow_master() -> Result<(), String> {
    if !is_worker() {
        return Ok(());
    }
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    // The master may have gone before the death signal was armed.
    let master = std::env::var(ENV_MASTER)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    if master.is_some_and(|m| nix::unistd::getppid().as_raw() != m) {
        return Err("the master process is gone".into());
    }
    if let Some(path) = std::env::var_os(ENV_READY) {
        let s = UnixDatagram::unbound()
            .and_then(|s| s.connect(&path).map(|()| s))
            .map_err(|e| format!("cannot reach the master: {e}"))?;
        let _ = READY.set(s);
    }
    Ok(())
}

/// In a worker, once it serves: tells the master.
pub fn notify_ready() {
    if let Some(s) = READY.get() {
        let _ = s.send(format!("READY {}", std::process::id()).as_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// The master's side.

/// The master's main loop; returns the exit code.
/// How the master runs: `daemon`, the pidfile it writes, `master-worker no-exit-on-failure`,
/// and `mworker-max-reloads`.
pub struct MasterCfg<'a> {
    pub daemon: bool,
    pub pidfile: Option<&'a Path>,
    pub keep_on_failure: bool,
    pub max_reloads: Option<u32>,
}

pub fn run(opts: &Options, mc: &MasterCfg<'_>) -> i32 {
    match run_inner(opts, mc) {
        Ok(code) => code,
        Err(e) => {
            crate::say!("[ALERT]    ({}) : {e}", std::process::id());
            1
        }
    }
}

fn run_inner(opts: &Options, mc: &MasterCfg<'_>) -> Result<i32, String> {
    let keep_on_failure = mc.keep_on_failure;
    if mc.daemon {
        nix::unistd::daemon(true, false).map_err(|e| format!("cannot go to background: {e}"))?;
    }
    let me = std::process::id();
    if let Some(pf) = mc.pidfile {
        std::fs::write(pf, format!("{me}\n"))
            .map_err(|e| format!("cannot write pidfile '{}': {e}", pf.display()))?;
    }
    // Private: the sockets in it hand out every listening socket to whoever connects. A
    // fresh name, created here (never one that exists: another user could own it).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("sluice-master-{me}-{nanos:x}"));
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
        // The master CLI listens before the first worker starts: whoever sees the service
        // ready (systemd, a script waiting for the port) can use it at once.
        let (cli_tx, mut cli_rx) = tokio::sync::mpsc::unbounded_channel::<CliReq>();
        if let Some(path) = &opts.master_cli {
            let _ = std::fs::remove_file(path);
            let l = tokio::net::UnixListener::bind(path)
                .map_err(|e| format!("master CLI: cannot bind '{}': {e}", path.display()))?;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            tokio::spawn(cli_accept(l, cli_tx.clone()));
        }
        let mut num = 0u32;
        let mut current = spawn(&exe, opts, &dir, &ready_path, num, None)?;
        let mut pending: Option<Worker> = None;
        let mut old: Vec<Worker> = Vec::new();
        let mut started = false;
        let mut stopping = false;
        // False once the current worker died and `no-exit-on-failure` kept the master.
        let mut current_alive = true;
        let mut buf = [0u8; 64];
        let started_at = std::time::Instant::now();
        let (mut reloads, mut failed) = (0u32, 0u32);
        loop {
            let reload = tokio::select! {
                _ = usr2.recv() => true,
                _ = hup.recv() => true,
                Some(req) = cli_rx.recv() => match req {
                    CliReq::Reload => true,
                    CliReq::ShowProc(tx) => {
                        let _ = tx.send(show_proc(me, started_at, (reloads, failed), current_alive.then_some(&current), &old));
                        false
                    }
                    CliReq::Socket(t, tx) => {
                        let w = match t {
                            Target::Relative(1) => current_alive.then_some(&current),
                            Target::Relative(_) => None,
                            Target::Pid(p) => std::iter::once(&current)
                                .filter(|_| current_alive)
                                .chain(&old)
                                .find(|w| w.pid.as_raw() == p),
                        };
                        let _ = tx.send(w.map(|w| w.sock.clone()));
                        false
                    }
                },
                _ = term.recv() => {
                    if !stop(&mut stopping, systemd, Signal::SIGTERM, current_alive.then_some(&current), &pending, &old) {
                        return Ok(0);
                    }
                    false
                }
                _ = int.recv() => {
                    if !stop(&mut stopping, systemd, Signal::SIGINT, current_alive.then_some(&current), &pending, &old) {
                        return Ok(0);
                    }
                    false
                }
                _ = usr1.recv() => {
                    if !stop(&mut stopping, systemd, Signal::SIGUSR1, current_alive.then_some(&current), &pending, &old) {
                        return Ok(0);
                    }
                    false
                }
                r = ready.recv(&mut buf) => {
                    let Ok(n) = r else { continue };
                    let Some(pid) = std::str::from_utf8(&buf[..n]).ok()
                        .and_then(|m| m.strip_prefix("READY "))
                        .and_then(|p| p.parse::<i32>().ok()) else { continue };
                    if pending.as_ref().is_some_and(|w| w.pid.as_raw() == pid) {
                        let new = pending.take().expect("checked just above");
                        reloads += 1;
                        crate::say!("[NOTICE]   ({me}) : Loading success.");
                        let prev = std::mem::replace(&mut current, new);
                        if current_alive {
                            let _ = kill(prev.pid, Signal::SIGUSR1);
                            old.push(prev);
                        }
                        // `mworker-max-reloads`: a former worker still finishing its
                        // connections after that many reloads is stopped outright.
                        for w in &mut old {
                            w.reloads += 1;
                            if mc.max_reloads.is_some_and(|m| w.reloads > m) {
                                crate::say!("[WARNING]  ({me}) : Former worker ({}) outlived {} reload(s) (mworker-max-reloads): sending SIGTERM.", w.pid, w.reloads - 1);
                                let _ = kill(w.pid, Signal::SIGTERM);
                            }
                        }
                        current_alive = true;
                        if !stopping {
                            sd_notify(systemd, "READY=1");
                        }
                    } else if current.pid.as_raw() == pid && !started {
                        started = true;
                        crate::say!("[NOTICE]   ({me}) : Loading success.");
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
                            crate::say!("[WARNING]  ({me}) : Former worker ({pid}) exited with code {code} ({})", why(code));
                            let _ = std::fs::remove_file(&w.sock);
                        } else if pending.as_ref().is_some_and(|w| w.pid == pid) {
                            let w = pending.take().expect("checked just above");
                            let _ = std::fs::remove_file(&w.sock);
                            failed += 1;
                            crate::say!("[ALERT]    ({me}) : Reload failed: the new worker ({pid}) exited with code {code} ({}); worker ({}) goes on serving.", why(code), current.pid);
                            if !stopping {
                                sd_notify(systemd, "READY=1");
                            }
                        } else if current.pid == pid && current_alive {
                            current_alive = false;
                            if stopping {
                                crate::say!("[WARNING]  ({me}) : Current worker ({pid}) exited with code {code} ({})", why(code));
                                if pending.is_none() && old.is_empty() {
                                    return Ok(code);
                                }
                                continue;
                            }
                            crate::say!("[ALERT]    ({me}) : Current worker ({pid}) exited with code {code} ({})", why(code));
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
                        if stopping && pending.is_none() && old.is_empty() && !current_alive {
                            return Ok(0);
                        }
                    }
                    false
                }
            };
            if reload && !stopping {
                if pending.is_some() {
                    crate::say!("[WARNING]  ({me}) : A reload is already in progress; ignored.");
                    continue;
                }
                crate::say!("[WARNING]  ({me}) : Reloading: starting a new worker");
                sd_notify(systemd, "RELOADING=1");
                num += 1;
                let from = current_alive.then_some(&current);
                match spawn(&exe, opts, &dir, &ready_path, num, from) {
                    Ok(w) => pending = Some(w),
                    Err(e) => {
                        crate::say!("[ALERT]    ({me}) : {e}");
                        sd_notify(systemd, "READY=1");
                    }
                }
            }
        }
    })
}

/// Serves the master CLI (`-S`): `show proc`, `reload`, `@1 CMD` / `@!PID CMD` (the command
/// relayed to that worker's CLI, at admin level), `help`, `quit`; one command line per
/// connection, as the stats socket's non-interactive mode.
async fn cli_accept(l: tokio::net::UnixListener, tx: tokio::sync::mpsc::UnboundedSender<CliReq>) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(cli_conn(s, tx.clone()));
    }
}

async fn cli_conn(s: tokio::net::UnixStream, tx: tokio::sync::mpsc::UnboundedSender<CliReq>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let (r, mut w) = s.into_split();
    let mut line = String::new();
    let mut r = tokio::io::BufReader::new(r);
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), r.read_line(&mut line));
    if !matches!(read.await, Ok(Ok(n)) if n > 0) {
        return;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let out = match words.as_slice() {
        ["show", "proc", ..] => {
            let (otx, orx) = tokio::sync::oneshot::channel();
            let _ = tx.send(CliReq::ShowProc(otx));
            orx.await.unwrap_or_default()
        }
        ["reload", ..] => {
            let _ = tx.send(CliReq::Reload);
            String::new()
        }
        [at, rest @ ..] if at.starts_with('@') && !rest.is_empty() => {
            let t = match at.strip_prefix("@!") {
                Some(p) => p.parse().ok().map(Target::Pid),
                None => at[1..].parse().ok().map(Target::Relative),
            };
            let sock = match t {
                Some(t) => {
                    let (otx, orx) = tokio::sync::oneshot::channel();
                    let _ = tx.send(CliReq::Socket(t, otx));
                    orx.await.ok().flatten()
                }
                None => None,
            };
            match sock {
                // The worker's own CLI answers; its reply goes back as it is.
                Some(p) => match tokio::net::UnixStream::connect(&p).await {
                    Ok(mut ws) => {
                        let _ = ws
                            .write_all(format!("{}\n", rest.join(" ")).as_bytes())
                            .await;
                        let mut reply = Vec::new();
                        let _ = tokio::time::timeout(
                            std::time::Duration::from_secs(10),
                            ws.read_to_end(&mut reply),
                        )
                        .await;
                        let _ = w.write_all(&reply).await;
                        return;
                    }
                    Err(_) => "Can't find the target CLI!\n".into(),
                },
                None => "Can't find the target CLI!\n".into(),
            }
        }
        ["help", ..] | [] => MASTER_HELP.into(),
        ["quit", ..] => return,
        _ => format!("Unknown command: '{}'. {MASTER_HELP}", words[0]),
    };
    let _ = w.write_all(out.as_bytes()).await;
    let _ = w.write_all(b"\n").await;
}

const MASTER_HELP: &str = concat!(
    "The following commands are valid at this level:\n",
    "  @!<pid>                                 : send a command to the <pid> process\n",
    "  @<relative pid>                         : send a command to the <relative pid> process\n",
    "  reload                                  : reload haproxy\n",
    "  show proc                               : show processes status\n",
    "  help [<command>]                        : list matching or all commands\n",
    "  quit                                    : disconnect\n",
);

/// `show proc`, in HAProxy's columns.
fn show_proc(
    me: u32,
    since: std::time::Instant,
    (reloads, failed): (u32, u32),
    current: Option<&Worker>,
    old: &[Worker],
) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let up = |t: std::time::Instant| {
        let s = t.elapsed().as_secs();
        format!(
            "{}d{:02}h{:02}m{:02}s",
            s / 86400,
            s / 3600 % 24,
            s / 60 % 60,
            s % 60
        )
    };
    let mut o = format!(
        "#{:<14} {:<15} {:<15} {:<15} {:<15}\n",
        "<PID>", "<type>", "<reloads>", "<uptime>", "<version>"
    );
    o += &format!(
        "{:<15} {:<15} {:<15} {:<15} {:<15}\n",
        me,
        "master",
        format!("{reloads} [failed: {failed}]"),
        up(since),
        version
    );
    o += "# workers\n";
    if let Some(w) = current {
        o += &format!(
            "{:<15} {:<15} {:<15} {:<15} {:<15}\n",
            w.pid,
            "worker",
            0,
            up(w.since),
            version
        );
    }
    if !old.is_empty() {
        o += "# old workers\n";
        for w in old {
            o += &format!(
                "{:<15} {:<15} {:<15} {:<15} {:<15}\n",
                w.pid,
                "worker",
                w.reloads,
                up(w.since),
                version
            );
        }
    }
    o += "# programs\n";
    o
}

/// Forwards a stop signal to every live worker; `false` when there is none left to wait for.
fn stop(
    stopping: &mut bool,
    systemd: bool,
    s: Signal,
    current: Option<&Worker>,
    pending: &Option<Worker>,
    old: &[Worker],
) -> bool {
    if !*stopping {
        crate::say!(
            "[WARNING]  ({}) : Exiting Master process...",
            std::process::id()
        );
    }
    *stopping = true;
    sd_notify(systemd, "STOPPING=1");
    let mut any = false;
    for w in current.into_iter().chain(pending).chain(old) {
        let _ = kill(w.pid, s);
        any = true;
    }
    any
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
    if let Some(name) = &opts.localpeer {
        c.arg("-L").arg(name);
    }
    // The current worker is soft-stopped by the master once this one is ready (not by this
    // one with `-sf` as it starts: it may still fail after taking the sockets).
    if let Some(w) = from {
        c.arg("-x").arg(&w.sock);
    }
    c.env(ENV_SOCK, &sock)
        .env(ENV_READY, ready)
        .env(ENV_MASTER, std::process::id().to_string());
    let child = c
        .spawn()
        .map_err(|e| format!("cannot start a worker: {e}"))?;
    let pid = Pid::from_raw(child.id() as i32);
    crate::say!(
        "[NOTICE]   ({}) : New worker ({pid}) forked",
        std::process::id()
    );
    // Reaped by the SIGCHLD handler, not through `child`.
    drop(child);
    Ok(Worker {
        pid,
        since: std::time::Instant::now(),
        sock,
        reloads: 0,
    })
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

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};

/// HAProxy's words for a worker's exit code: "Exit", or the signal that ended it (128 + N).
fn why(code: i32) -> String {
    match code - 128 {
        n if n <= 0 => "Exit".into(),
        1 => "Hangup".into(),
        2 => "Interrupt".into(),
        6 => "Aborted".into(),
        9 => "Killed".into(),
        11 => "Segmentation fault".into(),
        15 => "Terminated".into(),
        n => format!("Signal {n}"),
    }
}
