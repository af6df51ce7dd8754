//! The `sluice` command: HAProxy's command line, then hand over to [`sluice::run`].
//!
//! Flags are parsed by hand rather than with clap because HAProxy's are not getopt-shaped
//! (`-db`, `-dM0x55`, `-sf PID PID...`, `-cc EXPR`) and scripts pass them verbatim.

use std::path::PathBuf;
use std::process::ExitCode;

use sluice::cli_args::{Action, Options};

/// mimalloc instead of glibc's malloc: a connection's task and buffers are a few KiB, past
/// glibc's thread cache, and its malloc/free paths cost ~10 % of the user-space instructions
/// of a `Connection: close` request.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn usage() -> String {
    format!(
        "sluice {} (HAProxy {} configuration language)\n\
Usage : sluice [-f <cfgfile|cfgdir>]* [ -vdVD ] [ -n <maxconn> ] [ -N <maxpconn> ]\n\
        [ -p <pidfile> ] [ -m <max megs> ] [ -C <dir> ] [-- <cfgfile>*]\n\
        -v displays version ; -vv shows known build options.\n\
        -h displays this help\n\
        -f <cfgfile|cfgdir> adds <cfgfile> to the list of configuration files (a directory loads its *.cfg in order)\n\
        -c check mode : only check config files and exit (0 = valid, 1 = errors, all listed)\n\
        -cc <expr> evaluate a .if condition : exit 0 when true, 1 when false\n\
        -d enters debug mode (foreground, verbose start-up) ; -db only disables background mode.\n\
        -D goes daemon ; -p writes pids of all children to this file\n\
        -q quiet mode : don't display messages ; -V enters verbose mode (disables quiet mode)\n\
        -n sets the maximum total # of connections (uses ulimit -n)\n\
        -sf/-st [pid ]* finishes/terminates old pids once sluice listens\n\
        -x <unix_socket> get listening sockets from a stats socket with 'expose-fd listeners'\n\
        -L <name> the local peer's name in 'peers' sections (default: the host name)\n\
        Accepted for compatibility: -dM[...], -dI, -dW, -dG, -de, -dp, -dS, -dr, -dV, -m <megs>, -N <n>\n        -W master-worker mode ; -Ws also notifies systemd (Type=notify) ; -S <sock> master CLI\n",
        env!("CARGO_PKG_VERSION"),
        sluice::config::HAPROXY_COMPAT_VERSION
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            sluice::say!("[ALERT] (sluice) : {e}\n{}", usage());
            return ExitCode::from(1);
        }
    };
    if let Some(name) = &opts.localpeer {
        sluice::peers::set_cli_local(name.clone());
    }
    match opts.action {
        Action::Help => {
            sluice::say!("{}", usage());
            ExitCode::from(1) // HAProxy exits 1 on -h too
        }
        Action::Version => {
            println!("{}", sluice::version_string(false));
            ExitCode::SUCCESS
        }
        Action::VersionVerbose => {
            println!("{}", sluice::version_string(true));
            ExitCode::SUCCESS
        }
        Action::EvalCond(ref expr) => {
            let env = |k: &str| std::env::var(k).ok();
            match sluice::config::tokenizer::eval_condition(expr, &env) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    sluice::say!("[ALERT] (sluice) : failed to evaluate condition '{expr}': {e}");
                    ExitCode::from(2)
                }
            }
        }
        Action::Check | Action::Run => {
            if opts.files.is_empty() {
                sluice::say!(
                    "[ALERT] (sluice) : No configuration file specified (use -f).\n{}",
                    usage()
                );
                return ExitCode::from(1);
            }
            let files: Vec<PathBuf> = opts.files.clone();
            let mut cfg = match sluice::config::load_files(&files) {
                Ok(c) => c,
                Err(errs) => {
                    for e in &errs {
                        sluice::say!("[ALERT] (sluice) : config : {e}");
                    }
                    sluice::say!(
                        "[ALERT] (sluice) : config : Fatal errors found in configuration ({} error{}).",
                        errs.len(),
                        if errs.len() == 1 { "" } else { "s" }
                    );
                    return ExitCode::from(1);
                }
            };
            if !opts.quiet {
                for w in &cfg.warnings {
                    sluice::say!("[WARNING] (sluice) : config : {w}");
                }
            }
            if cfg.global.zero_warning && !cfg.warnings.is_empty() {
                sluice::say!(
                    "[ALERT] (sluice) : config : Some warnings were found and 'zero-warning' is \
                     set. Aborting."
                );
                return ExitCode::from(1);
            }
            if matches!(opts.action, Action::Check) {
                if !opts.quiet {
                    println!("Configuration file is valid");
                }
                return ExitCode::SUCCESS;
            }
            // Master-worker mode: this process starts and watches the workers that serve.
            if (opts.master || cfg.global.master_worker.is_some()) && !sluice::master::is_worker() {
                let pidfile = opts.pidfile.clone().or(cfg.global.pidfile.clone());
                let mc = sluice::master::MasterCfg {
                    daemon: (opts.daemon || cfg.global.daemon) && !opts.foreground,
                    pidfile: pidfile.as_deref(),
                    keep_on_failure: cfg.global.master_worker == Some(true),
                    max_reloads: cfg.global.mworker_max_reloads,
                };
                drop(cfg);
                let code = sluice::master::run(&opts, &mc);
                return ExitCode::from(code.clamp(0, 255) as u8);
            }
            // A worker also opens the private stats socket its master gave it: the next
            // worker takes the listeners through it.
            if let Some(path) = sluice::master::worker_socket() {
                cfg.global.stats_sockets.push(sluice::config::StatsSocket {
                    addr: sluice::config::BindAddr::Unix(path),
                    origin: sluice::config::Origin {
                        file: "(master)".into(),
                        line: 0,
                    },
                    level: sluice::config::CliLevel::Admin,
                    mode: Some(0o600),
                    uid: None,
                    gid: None,
                    expose_fd: true,
                });
            }
            match sluice::run(cfg, &opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    sluice::say!("[ALERT] (sluice) : {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
