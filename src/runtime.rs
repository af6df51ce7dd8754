//! `runtime`: process start-up and shutdown — file-descriptor limit and `maxconn`, binding,
//! daemon mode and pidfile, worker threads, signals (SIGINT/SIGTERM hard stop, SIGUSR1 soft
//! stop, `hard-stop-after`), `-sf`/`-st`. It must not serve traffic itself.

use std::sync::Arc;

use tokio::sync::watch;

use crate::backend::Shared;
use crate::cli_args::Options;
use crate::config::{Config, Mode};
use crate::worker::{self, RunState};

/// File descriptors kept aside for listeners, logs, pidfile and the like.
const FD_RESERVE: u64 = 64;

pub fn version_string(verbose: bool) -> String {
    let mut s = format!(
        "sluice version {} - HAProxy {} configuration language\n",
        env!("CARGO_PKG_VERSION"),
        crate::config::HAPROXY_COMPAT_VERSION
    );
    if verbose {
        s.push_str(&format!(
            "Running on: {} {}\n\
             Build options: rust, tokio current-thread runtime per worker, httparse HTTP/1 codec\n\
             Feature list : +THREAD +REUSEPORT +LINUX_TPROXY -OPENSSL -LUA +PROMEX\n\
             Default settings : bufsize = 16384, maxrewrite = 1024, maxaccept = 64\n\
             Available polling systems : epoll (via tokio)\n\
             Available multiplexer protocols : h1 (mode http), none (mode tcp)\n\
             Available services : prometheus-exporter\n",
            std::env::consts::OS,
            std::env::consts::ARCH
        ));
    }
    s
}

fn pid() -> u32 {
    std::process::id()
}

/// Sets the fd limit (`ulimit-n`, else the hard limit) and derives the global maxconn that
/// fits. Returns it and the number of warnings given; with `strict-limits`, what would be a
/// warning is an error.
fn settle_maxconn(cfg: &Config, opts: &Options) -> Result<(u32, usize), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    let strict = cfg.global.strict_limits;
    let mut warnings = 0;
    let mut limit = soft;
    // `ulimit-n N` sets both limits to N (raising the hard one needs privileges).
    let (want_soft, want_hard) = match cfg.global.ulimit_n {
        Some(n) => (n, n.max(hard)),
        None => (hard, hard),
    };
    if soft != want_soft {
        match setrlimit(Resource::RLIMIT_NOFILE, want_soft, want_hard) {
            Ok(()) => limit = want_soft,
            Err(e) if strict => {
                return Err(format!(
                    "[sluice.main()] Cannot raise FD limit to {want_soft}, limit is {soft} \
                     ({e}); 'strict-limits' makes this fatal."
                ));
            }
            Err(e) => {
                warnings += 1;
                crate::say!(
                    "[WARNING] ({}) : cannot set the open-file limit from {soft} to \
                     {want_soft}: {e}",
                    pid()
                );
            }
        }
    }
    // Each proxied connection needs two descriptors (client + server).
    let fit = (limit.saturating_sub(FD_RESERVE) / 2)
        .max(1)
        .min(u32::MAX as u64) as u32;
    let wanted = opts.maxconn.or(cfg.global.maxconn);
    let maxconn = match wanted {
        Some(m) if m > fit => {
            let why = format!(
                "maxconn {m} cannot be honoured: it needs {} file descriptors but the limit is \
                 {limit} (hard limit {hard})",
                2 * m as u64 + FD_RESERVE
            );
            if strict {
                return Err(format!("{why}; 'strict-limits' makes this fatal."));
            }
            warnings += 1;
            crate::say!(
                "[WARNING] ({}) : {why}; using maxconn {fit}. Raise 'ulimit -n' to allow more.",
                pid()
            );
            fit
        }
        Some(m) => m,
        // HAProxy derives it from the fd limit too.
        None => fit,
    };
    Ok((maxconn, warnings))
}

/// Warns about what a configuration leaves unset; returns how many warnings it gave.
fn warn_config(cfg: &Config) -> usize {
    let mut n = 0;
    for p in &cfg.proxies {
        let t = &p.timeouts;
        let mut missing = Vec::new();
        if p.kind.has_frontend() && t.client.is_none() {
            missing.push("client");
        }
        if p.kind.has_backend() {
            if t.connect.is_none() {
                missing.push("connect");
            }
            if t.server.is_none() {
                missing.push("server");
            }
        }
        if !missing.is_empty() {
            n += 1;
            crate::say!(
                "[WARNING] ({}) : config : missing timeouts for {} '{}'. | While not properly invalid, you will certainly encounter various problems | with such a configuration. To fix this, please ensure that all following | timeouts are set to a non-zero value: '{}'.",
                pid(),
                match p.kind {
                    crate::config::ProxyKind::Frontend => "frontend",
                    crate::config::ProxyKind::Backend => "backend",
                    crate::config::ProxyKind::Listen => "proxy",
                },
                p.name,
                missing.join("', '")
            );
        }
    }
    n
}

/// Runs sluice until it is stopped. Returns once every worker has exited.
pub fn run(cfg: Config, opts: &Options) -> Result<(), String> {
    let nbthread = cfg
        .global
        .nbthread
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let mut warnings = if opts.quiet { 0 } else { warn_config(&cfg) };
    let (maxconn, w) = settle_maxconn(&cfg, opts)?;
    warnings += w;
    if cfg.global.zero_warning && warnings > 0 {
        return Err("Some warnings were found and 'zero-warning' is set. Aborting.".into());
    }
    let cfg = Arc::new(cfg);
    let shared = Arc::new(Shared::new(cfg.clone(), maxconn, nbthread));
    // `-x`: the old process's listening sockets, taken before anything here binds (our stats
    // socket may replace the very file we ask through).
    let mut inherited = match &opts.sockets_from {
        Some(path) => match crate::reload::fetch(path) {
            Ok(i) => {
                if opts.debug {
                    crate::say!(
                        "[NOTICE] ({}) : took {} listening socket(s) from '{}'",
                        pid(),
                        i.len(),
                        path.display()
                    );
                }
                i
            }
            Err(e) => {
                // As HAProxy: the reload goes on, binding anew.
                crate::say!("[WARNING] ({}) : {e}; binding new sockets instead.", pid());
                crate::reload::Inherited::default()
            }
        },
        None => crate::reload::Inherited::default(),
    };
    crate::stream::RCVBUF_SERVER.store(
        cfg.global.rcvbuf_server.unwrap_or(0),
        std::sync::atomic::Ordering::Relaxed,
    );
    crate::stream::SNDBUF_SERVER.store(
        cfg.global.sndbuf_server.unwrap_or(0),
        std::sync::atomic::Ordering::Relaxed,
    );
    let listeners = crate::listener::bind_all(&cfg, nbthread, &mut inherited)
        .map_err(|e| e.join("\n[ALERT] (sluice) : "))?;
    // Sockets of binds this configuration no longer has close here.
    drop(inherited);
    let bind_files: Vec<_> = cfg
        .proxies
        .iter()
        .flat_map(|p| &p.binds)
        .filter_map(|b| match &b.addr {
            crate::config::BindAddr::Unix(path) => Some((path.clone(), file_id(path))),
            _ => None,
        })
        .collect();
    if cfg.global.stats_sockets.iter().any(|s| s.expose_fd) {
        let exposed = crate::reload::Exposed::of(&listeners)
            .map_err(|e| format!("cannot keep listening sockets for 'expose-fd': {e}"))?;
        let _ = shared.exposed.set(exposed);
    }
    let cli_listeners = crate::cli::bind_all(&cfg.global.stats_sockets, &cfg.global.unix_bind)?;
    crate::peers::bind_all(&cfg.peers)?;
    if opts.debug {
        for l in &listeners {
            let p = &cfg.proxies[l.proxy];
            crate::say!(
                "[NOTICE] ({}) : {} '{}' listening on {} ({} thread{}, mode {})",
                pid(),
                if p.kind.has_backend() {
                    "proxy"
                } else {
                    "frontend"
                },
                p.name,
                l.sockets[0].local_addr_string(),
                nbthread,
                if nbthread == 1 { "" } else { "s" },
                if p.mode == Mode::Http { "http" } else { "tcp" }
            );
        }
        for f in &opts.ignored {
            crate::say!(
                "[NOTICE] ({}) : flag '{f}' accepted for compatibility; it has no effect in sluice",
                pid()
            );
        }
        crate::say!(
            "[NOTICE] ({}) : {nbthread} worker thread(s), global maxconn {maxconn}",
            pid()
        );
    }
    // Daemon mode: after binding (errors reach the terminal), before any thread starts.
    // A master's worker: the master owns daemon mode and the pidfile, and the worker dies
    // with it.
    let worker = crate::master::is_worker();
    crate::master::follow_master()?;
    let daemon = (opts.daemon || cfg.global.daemon) && !opts.foreground && !worker;
    if daemon {
        nix::unistd::daemon(true, false).map_err(|e| format!("cannot go to background: {e}"))?;
    }
    if let Some(pf) = opts
        .pidfile
        .as_ref()
        .or(cfg.global.pidfile.as_ref())
        .filter(|_| !worker)
    {
        std::fs::write(pf, format!("{}\n", pid()))
            .map_err(|e| format!("cannot write pidfile '{}': {e}", pf.display()))?;
    }
    for &p in &opts.finish_pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGUSR1,
        );
    }
    for &p in &opts.terminate_pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGTERM,
        );
    }

    set_identity(&cfg.global)?;

    // The control loop and its signal handlers exist before any worker accepts: a SIGUSR1
    // sent as soon as sluice serves must find its handler, not the default action (exit).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the control loop: {e}"))?;
    let (mut sigint, mut sigterm, mut sigusr1) = {
        use tokio::signal::unix::{SignalKind, signal};
        let _enter = rt.enter();
        let h = |k: SignalKind| signal(k).map_err(|e| format!("cannot handle signals: {e}"));
        (
            h(SignalKind::interrupt())?,
            h(SignalKind::terminate())?,
            h(SignalKind::user_defined1())?,
        )
    };

    // The stats socket CLI runs on this control thread, never on a worker.
    let cli_paths = {
        let _enter = rt.enter();
        crate::cli::spawn_all(cli_listeners, shared.clone(), nbthread)
            .map_err(|e| format!("cannot start the stats socket: {e}"))?
    };
    let (state_tx, state_rx) = watch::channel(RunState::Running);
    // Hand each thread its socket of every bind.
    let mut per_thread: Vec<Vec<_>> = (0..nbthread).map(|_| Vec::new()).collect();
    for mut l in listeners {
        let socks = std::mem::take(&mut l.sockets);
        let proxy = l.proxy;
        let l = Arc::new(l);
        for (i, s) in socks.into_iter().enumerate() {
            per_thread[i % nbthread].push((proxy, l.clone(), s));
        }
    }
    let (ctl_tx, ctl_rx): (Vec<_>, Vec<_>) = (0..nbthread)
        .map(|_| tokio::sync::mpsc::unbounded_channel())
        .unzip();
    let _ = shared.workers.set(ctl_tx);
    let mut handles = Vec::new();
    for ((t, ls), ctl) in per_thread.into_iter().enumerate().zip(ctl_rx) {
        let cpus = cpus_for_thread(&cfg, t + 1);
        let h = worker::spawn(t, nbthread, shared.clone(), ls, cpus, state_rx.clone(), ctl)
            .map_err(|e| format!("cannot start thread {}: {e}", t + 1))?;
        handles.push(h);
    }
    drop(state_rx);
    crate::master::notify_ready();

    let hard_stop_after = cfg.global.hard_stop_after;
    let shared_ctl = shared.clone();
    rt.block_on(async move {
        let done = tokio::task::spawn_blocking(move || {
            for h in handles {
                let _ = h.join();
            }
        });
        tokio::pin!(done);
        let mut hard_deadline: Option<tokio::time::Instant> = None;
        loop {
            let sleep_hard = async {
                match hard_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut done => break,
                _ = sigint.recv() => { let _ = state_tx.send(RunState::HardStop); }
                _ = sigterm.recv() => { let _ = state_tx.send(RunState::HardStop); }
                _ = sigusr1.recv() => {
                    if *state_tx.borrow() == RunState::Running {
                        crate::say!("[WARNING] ({}) : soft stop requested (SIGUSR1): closing listeners, finishing in-flight requests.", pid());
                        shared_ctl.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
                        if let Some(x) = shared_ctl.exposed.get() {
                            x.release_unless_handed_out();
                        }
                        let _ = state_tx.send(RunState::SoftStop);
                        if let Some(d) = hard_stop_after {
                            hard_deadline = Some(tokio::time::Instant::now() + d);
                        }
                    }
                }
                _ = sleep_hard => {
                    crate::say!("[WARNING] ({}) : hard-stop-after reached: closing remaining connections.", pid());
                    let _ = state_tx.send(RunState::HardStop);
                    hard_deadline = None;
                }
            }
        }
    });
    // Remove the UNIX socket files we created, unless a new process owns them now: it took
    // our listeners (`-x`), or bound its own stats socket at the same path (a reload).
    for (p, id) in &cli_paths {
        remove_if_same(p, *id);
    }
    if !shared.exposed.get().is_some_and(|x| x.handed_out()) {
        for (p, id) in &bind_files {
            remove_if_same(p, *id);
        }
    }
    Ok(())
}

/// `chroot`, then `gid`/`group` and `uid`/`user`, in HAProxy's order: once every listener and
/// stats socket is bound and the pidfile written (they may need the old root and privileges),
/// before anything is served. Each failure stops the start, as in HAProxy. Log targets that
/// are UNIX sockets are reached by path at each message, so after `chroot` the path is looked
/// up inside the new root (Debian's rsyslog makes `/var/lib/haproxy/dev/log` for that).
fn set_identity(g: &crate::config::Global) -> Result<(), String> {
    use nix::unistd::{Gid, Uid};
    if let Some(dir) = &g.chroot {
        nix::unistd::chroot(dir.as_path())
            .and_then(|()| nix::unistd::chdir("/"))
            .map_err(|e| format!("[sluice.main()] Cannot chroot({}): {e}.", dir.display()))?;
    }
    if let Some(gid) = g.gid {
        // Supplementary groups would keep the old identity's access; only root can drop them,
        // and failing to is worth a warning only (HAProxy's behaviour).
        if nix::unistd::getgroups().is_ok_and(|v| !v.is_empty())
            && let Err(e) = nix::unistd::setgroups(&[])
        {
            crate::say!(
                "[WARNING] ({}) : [sluice.main()] Failed to drop supplementary groups: {e}. \
                 Using 'gid'/'group' without 'uid'/'user' is generally useless.",
                pid()
            );
        }
        nix::unistd::setgid(Gid::from_raw(gid))
            .map_err(|e| format!("[sluice.main()] Cannot set gid {gid}: {e}."))?;
    }
    if let Some(uid) = g.uid
        && Uid::current().as_raw() != uid
    {
        nix::unistd::setuid(Uid::from_raw(uid))
            .map_err(|e| format!("[sluice.main()] Cannot set uid {uid}: {e}."))?;
    }
    if g.set_dumpable {
        set_dumpable();
    }
    Ok(())
}

/// `set-dumpable`: as HAProxy, raise the core and file size limits (to unlimited if allowed,
/// else to the hard limit) and mark the process dumpable again, which a change of uid/gid
/// clears on Linux. Failures are warnings: the proxy runs the same without core dumps.
fn set_dumpable() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    for (res, name) in [
        (Resource::RLIMIT_CORE, "core size"),
        (Resource::RLIMIT_FSIZE, "file size"),
    ] {
        let inf = nix::sys::resource::RLIM_INFINITY;
        if setrlimit(res, inf, inf).is_err()
            && let Ok((_, hard)) = getrlimit(res)
            && let Err(e) = setrlimit(res, hard, hard)
        {
            crate::say!(
                "[WARNING] ({}) : [sluice.main()] set-dumpable: cannot raise the {name} limit: \
                 {e}.",
                pid()
            );
        }
    }
    if let Err(e) = nix::sys::prctl::set_dumpable(true) {
        crate::say!(
            "[WARNING] ({}) : [sluice.main()] set-dumpable: prctl(PR_SET_DUMPABLE) failed: {e}.",
            pid()
        );
    }
}

/// The identity (device, inode) of the file at `p`, if any.
pub fn file_id(p: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Removes the file at `p` if it is still the one identified by `id`.
fn remove_if_same(p: &std::path::Path, id: Option<(u64, u64)>) {
    if id.is_some() && file_id(p) == id {
        let _ = std::fs::remove_file(p);
    }
}

/// CPUs for thread `n` (1-based) per `cpu-map`; the last matching line wins, as in HAProxy.
fn cpus_for_thread(cfg: &Config, n: usize) -> Option<Vec<usize>> {
    let mut res = None;
    for m in &cfg.global.cpu_map {
        if let Some(pos) = m.threads.iter().position(|&t| t == n) {
            if m.auto {
                if let Some(&c) = m.cpus.get(pos % m.cpus.len().max(1)) {
                    res = Some(vec![c]);
                }
            } else {
                res = Some(m.cpus.clone());
            }
        }
    }
    res
}
