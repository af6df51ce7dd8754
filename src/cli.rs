//! `cli`: the runtime command line on `stats socket` (HAProxy's "master-less" CLI): one
//! command line per connection — or several `;`-separated commands — answered with
//! HAProxy's output formats and error texts, each reply ending with an empty line; `prompt`
//! switches to interactive mode.
//!
//! It owns the socket listeners (run on the control thread, never on a worker), command
//! parsing, permission levels, and applying run-time changes to `backend` state (weights,
//! maintenance, maxconn), after which it rebuilds the LB tables so traffic follows at once.
//! It must not touch connections or sockets of the data path.

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::backend::{ServerState, Shared, unix_now};
use crate::config::{BindAddr, CliLevel, StatsSocket};

/// Longest command line accepted (HAProxy's is bounded by its buffer size too).
const MAX_LINE: usize = 16384;

pub const PERMISSION_DENIED: &str = "Permission denied\n";

/// State of one CLI connection.
pub struct Session {
    pub level: CliLevel,
    pub interactive: bool,
    /// Worker threads (for `show info`).
    pub nbthread: usize,
}

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
pub enum After {
    Continue,
    Quit,
}

/// Commands listed by `help` and in "Unknown command" replies: (usage, description, level).
const COMMANDS: &[(&str, &str, CliLevel)] = &[
    (
        "help [<command>]",
        "list matching or all commands",
        CliLevel::User,
    ),
    (
        "prompt",
        "toggle interactive mode with prompt",
        CliLevel::User,
    ),
    ("quit", "disconnect", CliLevel::User),
    (
        "show info",
        "report information about the running process",
        CliLevel::User,
    ),
    (
        "show stat [{<iid>|<px>} <type> <sid>] [typed|json] [up|no-maint]",
        "report counters for each proxy and server",
        CliLevel::User,
    ),
    (
        "show servers state [<backend>]",
        "dump volatile server information (all or for a single backend)",
        CliLevel::User,
    ),
    (
        "show backend",
        "list backends in the current running config",
        CliLevel::User,
    ),
    (
        "show sess",
        "report the list of current sessions",
        CliLevel::Operator,
    ),
    (
        "show activity",
        "show per-thread activity counters",
        CliLevel::User,
    ),
    (
        "add server <bk>/<srv> <addr> [opts]",
        "add a server to a backend (options of the 'server' line)",
        CliLevel::Admin,
    ),
    (
        "del server <bk>/<srv>",
        "remove a server in maintenance with no connection",
        CliLevel::Admin,
    ),
    (
        "shutdown session <id>",
        "kill a specific session",
        CliLevel::Admin,
    ),
    (
        "shutdown sessions server <bk>/<srv>",
        "kill sessions on a server",
        CliLevel::Admin,
    ),
    (
        "show resolvers [<resolvers section id>]",
        "dumps counters from all resolvers section and associated name servers",
        CliLevel::User,
    ),
    (
        "show peers [<section>]",
        "dump some information about all the peers or this peers section",
        CliLevel::User,
    ),
    (
        "show table [<table> [key <k> | data.<type> <op> <v>]]",
        "report table usage stats or dump this table's contents",
        CliLevel::Operator,
    ),
    (
        "clear table <table> [key <k> | data.<type> <op> <v>]",
        "remove an entry from a table",
        CliLevel::Admin,
    ),
    (
        "set table <table> key <k> [data.<type> <v>]*",
        "update or create a table entry's data",
        CliLevel::Admin,
    ),
    ("show cache", "show cache status", CliLevel::Admin),
    (
        "show pools",
        "report the server connection pools (idle, safe, used, reuse counters)",
        CliLevel::User,
    ),
    (
        "get weight <bk>/<srv>",
        "report a server's current weight",
        CliLevel::User,
    ),
    (
        "set weight <bk>/<srv> (<w>|<w>%)",
        "change a server's weight (deprecated)",
        CliLevel::Admin,
    ),
    (
        "set server <bk>/<srv> [opts]",
        "change a server's state, weight, maxconn, health, agent or addresses (state \
         ready|drain|maint, weight <w>, maxconn <n>, health up|stopping|down, agent up|down, \
         addr <ip> [port <p>], check-addr <ip> [port <p>], check-port <p>, agent-addr <ip> \
         [port <p>], agent-port <p>, agent-send <string>)",
        CliLevel::Admin,
    ),
    (
        "enable health <bk>/<srv>",
        "enable health checks on a server",
        CliLevel::Admin,
    ),
    (
        "disable health <bk>/<srv>",
        "disable health checks on a server (it then counts as UP)",
        CliLevel::Admin,
    ),
    (
        "enable agent <bk>/<srv>",
        "enable agent checks on a server",
        CliLevel::Admin,
    ),
    (
        "disable agent <bk>/<srv>",
        "disable agent checks on a server (the agent no longer holds it down)",
        CliLevel::Admin,
    ),
    (
        "enable server <bk>/<srv>",
        "enable a disabled server (use 'set server' instead)",
        CliLevel::Admin,
    ),
    (
        "disable server <bk>/<srv>",
        "disable a server for maintenance (use 'set server' instead)",
        CliLevel::Admin,
    ),
    (
        "set maxconn server <bk>/<srv>",
        "change a server's maxconn setting",
        CliLevel::Admin,
    ),
    (
        "set maxconn frontend <frontend> <value>",
        "change a frontend's maxconn setting",
        CliLevel::Admin,
    ),
    (
        "set maxconn global <value>",
        "change the per-process maxconn setting",
        CliLevel::Admin,
    ),
    (
        "clear counters [all]",
        "clear max statistics counters (or all counters)",
        CliLevel::Operator,
    ),
    (
        "show ssl cert [<certfile>]",
        "display the SSL certificates used in memory, or the details of a file",
        CliLevel::Admin,
    ),
    (
        "set ssl cert <certfile> <payload>",
        "replace a certificate file (PEM payload after '<<', ends with an empty line)",
        CliLevel::Admin,
    ),
    (
        "commit ssl cert <certfile>",
        "commit a certificate file: new handshakes use it, open connections keep theirs",
        CliLevel::Admin,
    ),
    (
        "abort ssl cert <certfile>",
        "abort a transaction for a certificate file",
        CliLevel::Admin,
    ),
];

fn usage(level: CliLevel, head: &str) -> String {
    let mut s = String::from(head);
    for (u, d, l) in COMMANDS {
        if *l <= level {
            s.push_str(&format!("  {u:<40}: {d}\n"));
        }
    }
    s
}

/// Splits a line into commands at unescaped `;`, and each command into words (spaces and
/// tabs separate; a backslash escapes the next character), as HAProxy's CLI does.
pub fn split_commands(line: &str) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            ';' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                cmds.push(std::mem::take(&mut words));
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    cmds.push(words);
    cmds
}

/// Runs one command (already split into words) and returns its output.
pub async fn execute(shared: &Arc<Shared>, sess: &mut Session, args: &[String]) -> (String, After) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    // Commands that need the workers' own state ask every thread, then answer.
    let arg0 = |r: &[&str]| r.first().copied().unwrap_or("").to_string();
    let done = |out: String| (out, After::Continue);
    match a.as_slice() {
        ["show", "sess", rest @ ..] => {
            return match denied(sess, CliLevel::Operator) {
                Some(d) => d,
                None => done(show_sess(shared, rest).await),
            };
        }
        ["show", "activity", ..] => return done(show_activity(shared).await),
        ["shutdown", "session", rest @ ..] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => done(shutdown_session(shared, &arg0(rest)).await),
            };
        }
        ["add", "server", rest @ ..] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => done(add_server(shared, rest).await),
            };
        }
        ["del", "server", rest @ ..] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => done(del_server(shared, &arg0(rest)).await),
            };
        }
        ["shutdown", "sessions", "server", rest @ ..] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => done(shutdown_server_sessions(shared, &arg0(rest)).await),
            };
        }
        [
            "set",
            "server",
            spec,
            what @ ("health" | "agent"),
            rest @ ..,
        ] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => done(force_health(shared, spec, what, rest.first().copied()).await),
            };
        }
        [
            op @ ("enable" | "disable"),
            what @ ("health" | "agent"),
            rest @ ..,
        ] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => {
                    let f = match (*what, *op == "enable") {
                        ("health", on) => crate::check::Force::HealthEnabled(on),
                        (_, on) => crate::check::Force::AgentEnabled(on),
                    };
                    done(apply_force(shared, &arg0(rest), f).await)
                }
            };
        }
        ["clear", "counters", "all", ..] => {
            return match denied(sess, CliLevel::Admin) {
                Some(d) => d,
                None => {
                    clear_counters(shared, true);
                    // Latency histograms: each worker zeroes its own blocks (their only writer).
                    on_each_worker(shared, |w| w.shared.clear_timers(w.id)).await;
                    done(String::new())
                }
            };
        }
        _ => {}
    }
    let out = match a.as_slice() {
        ["show", "backend", ..] => {
            let mut o = String::from("# name\n");
            for (i, p) in shared.cfg.proxies.iter().enumerate() {
                if shared.proxies[i].be.is_some() {
                    o.push_str(&p.name);
                    o.push('\n');
                }
            }
            o
        }
        [] => String::new(),
        ["help", ..] => usage(
            sess.level,
            "The following commands are valid at this level:\n",
        ),
        ["prompt", ..] => {
            sess.interactive = !sess.interactive;
            String::new()
        }
        ["quit", ..] => return (String::new(), After::Quit),
        ["show", "info", ..] => crate::stats::info(shared, sess.nbthread),
        ["show", "stat", rest @ ..] => show_stat(shared, rest),
        ["show", "pools"] => crate::stats::show_pools(shared),
        ["show", "servers", "state", rest @ ..] => match rest.first() {
            None => crate::stats::servers_state(shared, None),
            Some(b) => match find_backend(shared, b) {
                Some(i) => crate::stats::servers_state(shared, Some(i)),
                None => "Can't find backend.\n".into(),
            },
        },
        ["get", "weight", rest @ ..] => get_weight(shared, rest),
        ["set", "weight", rest @ ..] => admin(sess, || {
            let Some(srv) = rest.first() else {
                return "Require 'backend/server' and 'weight' or 'weight%'.\n".into();
            };
            with_server(shared, srv, |be, s| {
                set_weight(be, s, rest.get(1).copied().unwrap_or(""))
            })
        }),
        ["set", "server", rest @ ..] => admin(sess, || set_server(shared, rest)),
        ["enable", "server", rest @ ..] => admin(sess, || {
            with_server(shared, rest.first().copied().unwrap_or(""), |be, s| {
                set_state(be, s, AdminState::Ready);
                String::new()
            })
        }),
        ["disable", "server", rest @ ..] => admin(sess, || {
            with_server(shared, rest.first().copied().unwrap_or(""), |be, s| {
                set_state(be, s, AdminState::Maint);
                String::new()
            })
        }),
        ["set", "maxconn", "server", rest @ ..] => admin(sess, || {
            with_server(shared, rest.first().copied().unwrap_or(""), |be, s| {
                set_maxconn(be, s, rest.get(1).copied().unwrap_or(""))
            })
        }),
        ["set", "maxconn", "frontend", rest @ ..] => {
            admin(sess, || set_maxconn_frontend(shared, rest))
        }
        ["set", "maxconn", "global", rest @ ..] => admin(sess, || set_maxconn_global(shared, rest)),
        ["show", "ssl", "cert", rest @ ..] => admin(sess, || {
            crate::tls::cli_show_cert(&shared.cfg, rest.first().copied())
        }),
        ["set", "ssl", "cert", path, payload] => admin(sess, || {
            crate::tls::cli_set_cert(&shared.cfg, path, payload)
        }),
        ["set", "ssl", "cert", ..] => admin(sess, || {
            "'set ssl cert' expects a filename and the certificate as a payload\n".into()
        }),
        ["commit", "ssl", "cert", path] => {
            admin(sess, || crate::tls::cli_commit_cert(&shared.cfg, path))
        }
        ["abort", "ssl", "cert", path] => admin(sess, || crate::tls::cli_abort_cert(path)),
        [
            verb @ ("show" | "get" | "add" | "set" | "del" | "clear" | "prepare" | "commit"),
            kind @ ("map" | "acl"),
            rest @ ..,
        ] => {
            if sess.level < CliLevel::Operator {
                PERMISSION_DENIED.into()
            } else {
                crate::map::cli(&shared.cfg.pat_refs, verb, kind, rest)
            }
        }
        ["show", "cache"] => crate::cache::cli_show(&shared.cfg.caches),
        ["show", "peers"] => crate::peers::cli_show(&shared.cfg.peers, None),
        ["show", "peers", name] => crate::peers::cli_show(&shared.cfg.peers, Some(name)),
        ["show", "resolvers"] => crate::resolvers::cli_show(&shared.cfg, None),
        ["show", "resolvers", name] => crate::resolvers::cli_show(&shared.cfg, Some(name)),
        ["show", "table", rest @ ..] => {
            if sess.level < CliLevel::Operator {
                PERMISSION_DENIED.into()
            } else {
                crate::stick::cli_show(&tables(shared), rest)
            }
        }
        ["clear", "table", rest @ ..] => {
            admin(sess, || crate::stick::cli_clear(&tables(shared), rest))
        }
        ["set", "table", rest @ ..] => admin(sess, || crate::stick::cli_set(&tables(shared), rest)),
        ["set", "maxconn", ..] => admin(sess, || {
            "Required arguments: 'frontend', 'server' or 'global'.\n".into()
        }),
        ["clear", "counters", ..] => {
            if sess.level < CliLevel::Operator {
                PERMISSION_DENIED.into()
            } else {
                clear_counters(shared, false);
                String::new()
            }
        }
        [first, ..] => usage(
            sess.level,
            &format!(
                "Unknown command: '{first}'. Please enter one of the following commands only:\n"
            ),
        ),
    };
    (out, After::Continue)
}

/// The configuration's stick tables, in declaration order.
fn tables(shared: &Shared) -> Vec<&Arc<crate::stick::Table>> {
    shared
        .cfg
        .proxies
        .iter()
        .filter_map(|p| p.stick_table.as_ref())
        .chain(shared.cfg.peers_tables.iter())
        .collect()
}

/// `Permission denied` when the session's level is below `need`.
fn denied(sess: &Session, need: CliLevel) -> Option<(String, After)> {
    (sess.level < need).then(|| (PERMISSION_DENIED.to_string(), After::Continue))
}

fn admin(sess: &Session, f: impl FnOnce() -> String) -> String {
    if sess.level < CliLevel::Admin {
        return PERMISSION_DENIED.into();
    }
    f()
}

/// Finds a proxy that `keep` accepts by name or `#ID`: its index.
fn find_proxy(shared: &Shared, want: &str, keep: impl Fn(usize) -> bool) -> Option<usize> {
    (0..shared.cfg.proxies.len()).find(|&i| {
        keep(i)
            && match want.strip_prefix('#') {
                Some(n) => n.parse::<u32>().is_ok_and(|n| n == shared.proxies[i].uuid),
                None => shared.cfg.proxies[i].name == want,
            }
    })
}

/// Finds a backend by name or `#ID`: its proxy index.
pub fn find_backend(shared: &Shared, want: &str) -> Option<usize> {
    find_proxy(shared, want, |i| shared.proxies[i].be.is_some())
}

/// Finds `BACKEND/SERVER` (by name, or `#ID` for either part, as HAProxy allows).
fn find_server<'a>(
    shared: &'a Shared,
    spec: &str,
) -> Result<(&'a crate::backend::BackendState, &'a ServerState), &'static str> {
    let (bname, sname) = spec.split_once('/').unwrap_or(("", spec));
    let by = |name: &str, id: u32, want: &str| match want.strip_prefix('#') {
        Some(n) => n.parse::<u32>().is_ok_and(|n| n == id),
        None => name == want,
    };
    let be = find_backend(shared, bname).and_then(|i| shared.proxies[i].be.as_ref());
    let Some(be) = be else {
        return Err("No such backend.\n");
    };
    match be
        .servers
        .iter()
        .find(|s| !s.deleted.load(Relaxed) && by(&s.name, s.puid, sname))
    {
        Some(s) => Ok((be, s)),
        None => Err("No such server.\n"),
    }
}

fn with_server(
    shared: &Shared,
    spec: &str,
    f: impl FnOnce(&crate::backend::BackendState, &ServerState) -> String,
) -> String {
    if spec.is_empty() {
        return "Require 'backend/server'.\n".into();
    }
    match find_server(shared, spec) {
        Ok((be, s)) => f(be, s),
        Err(e) => e.into(),
    }
}

fn get_weight(shared: &Shared, rest: &[&str]) -> String {
    let Some(spec) = rest.first() else {
        return "Require 'backend/server'.\n".into();
    };
    match find_server(shared, spec) {
        Ok((_, s)) => format!("{} (initial {})\n", s.weight.load(Relaxed), s.iweight),
        Err("No such backend.\n") => "Can't find backend.\n".into(),
        Err(_) => "Can't find server.\n".into(),
    }
}

/// HAProxy's `server_parse_weight_change_request`: `W` (0..=256) or `W%` of the initial weight.
pub(crate) fn set_weight(be: &crate::backend::BackendState, s: &ServerState, w: &str) -> String {
    if w.is_empty() {
        return "Require <weight> or <weight%>.\n".into();
    }
    let digits = w
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(w.len(), |(i, _)| i);
    let Ok(n) = w[..digits].parse::<i64>() else {
        return "Empty weight string empty or preceded by garbage".into();
    };
    let rest = &w[digits..];
    let v = if rest == "%" {
        if n < 0 {
            return "Relative weight must be positive.\n".into();
        }
        (s.iweight as i64 * n / 100).min(256)
    } else if !(0..=256).contains(&n) {
        return "Absolute weight can only be between 0 and 256 inclusive.\n".into();
    } else if !rest.is_empty() {
        return "Trailing garbage in weight string".into();
    } else {
        n
    };
    let v = v as u32;
    if v != 0 && v != s.iweight && !be.dynamic_weights() {
        return "Backend is using a static LB algorithm and only accepts weights '0%' and '100%'.\n"
            .into();
    }
    s.weight.store(v, Relaxed);
    be.changed();
    String::new()
}

/// A server's administrative state, as `set server ... state` and the stats page set it.
#[derive(Clone, Copy)]
pub enum AdminState {
    Ready,
    Drain,
    Maint,
}

/// Sets a server's administrative state; traffic follows at once. Always succeeds.
pub fn set_state(be: &crate::backend::BackendState, s: &ServerState, st: AdminState) -> bool {
    let (maint, drain) = match st {
        AdminState::Ready => (false, false),
        AdminState::Drain => (false, true),
        AdminState::Maint => (true, false),
    };
    s.config_maint.store(false, Relaxed);
    let was_maint = s.maint.swap(maint, Relaxed);
    let was_drain = s.drain.swap(drain, Relaxed);
    if was_maint != maint || was_drain != drain {
        s.last_change.store(unix_now(), Relaxed);
    }
    be.changed();
    true
}

/// `enable|disable` health checks, or force the check result `up|down|stopping` (the stats
/// page's actions): false when the server has no health checks. The server's state follows
/// on a worker thread moments later.
pub fn set_health(shared: &Shared, pi: usize, si: usize, what: &str) -> bool {
    use crate::check::Force;
    let f = match what {
        "enable" => Force::HealthEnabled(true),
        "disable" => Force::HealthEnabled(false),
        "up" => Force::HealthUp,
        "down" => Force::HealthDown,
        "stopping" => Force::HealthStopping,
        _ => return false,
    };
    crate::check::cli_force(shared, pi, si, f).is_ok()
}

/// The (proxy, server) indexes of `BACKEND/SERVER`, or the CLI's error text.
fn server_index(shared: &Shared, spec: &str) -> Result<(usize, usize), String> {
    if spec.is_empty() {
        return Err("Require 'backend/server'.\n".into());
    }
    let (be, s) = find_server(shared, spec)?;
    let si = be
        .servers
        .iter()
        .position(|x| std::ptr::eq(x, s))
        .ok_or("No such server.\n")?;
    Ok((be.proxy_idx, si))
}

/// Applies `f` to server `spec` and waits until its state follows (bounded: a stopping
/// worker may never answer).
async fn apply_force(shared: &Arc<Shared>, spec: &str, f: crate::check::Force) -> String {
    let (pi, si) = match server_index(shared, spec) {
        Ok(x) => x,
        Err(e) => return e,
    };
    match crate::check::cli_force(shared, pi, si, f) {
        Ok(Some(rx)) => {
            let _ = tokio::time::timeout(Duration::from_secs(1), rx).await;
            String::new()
        }
        Ok(None) => String::new(),
        Err(e) => e.into(),
    }
}

/// `set server B/S health up|stopping|down` and `set server B/S agent up|down`.
async fn force_health(shared: &Arc<Shared>, spec: &str, what: &str, arg: Option<&str>) -> String {
    use crate::check::Force;
    if let Ok((pi, si)) = server_index(shared, spec) {
        let s = shared.server(pi, si);
        if what == "health" && s.conf.health.track.is_some() {
            return "cannot change health on a tracking server.\n".into();
        }
    }
    let f = match (what, arg) {
        ("health", Some("up")) => Force::HealthUp,
        ("health", Some("stopping")) => Force::HealthStopping,
        ("health", Some("down")) => Force::HealthDown,
        ("agent", Some("up")) => Force::AgentUp,
        ("agent", Some("down")) => Force::AgentDown,
        ("health", _) => {
            if let Ok((pi, si)) = server_index(shared, spec)
                && shared.server(pi, si).check.is_none()
            {
                return "Health checks are not enabled on this server.\n".into();
            }
            return "'set server <srv> health' expects 'up', 'stopping', or 'down'.\n".into();
        }
        _ => {
            if let Ok((pi, si)) = server_index(shared, spec)
                && shared.server(pi, si).health.agent.is_none()
            {
                return "agent checks are not enabled on this server.\n".into();
            }
            return "'set server <srv> agent' expects 'up' or 'down'.\n".into();
        }
    };
    apply_force(shared, spec, f).await
}

fn set_server(shared: &Shared, rest: &[&str]) -> String {
    let spec = rest.first().copied().unwrap_or("");
    with_server(shared, spec, |be, s| match rest.get(1).copied() {
        Some("state") => match rest.get(2).copied() {
            Some("ready") => {
                set_state(be, s, AdminState::Ready);
                String::new()
            }
            Some("drain") => {
                set_state(be, s, AdminState::Drain);
                String::new()
            }
            Some("maint") => {
                set_state(be, s, AdminState::Maint);
                String::new()
            }
            _ => "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n".into(),
        },
        Some("weight") => set_weight(be, s, rest.get(2).copied().unwrap_or("")),
        Some("maxconn") => set_maxconn(be, s, rest.get(2).copied().unwrap_or("")),
        Some("addr") => set_addr(be, s, &rest[2..]),
        Some("check-addr") => set_check_addr(s, &rest[2..]),
        Some("check-port") => set_check_port(s, rest.get(2).copied()),
        Some("agent-addr") => set_agent_addr(s, &rest[2..]),
        Some("agent-port") => set_agent_port(s, rest.get(2).copied()),
        Some("agent-send") => set_agent_send(s, &rest[2..]),
        _ => "'set server <srv>' only supports 'state', 'weight', 'maxconn', 'health', 'agent', \
              'addr', 'check-addr', 'check-port', 'agent-addr', 'agent-port' and 'agent-send' \
              in sluice (HAProxy also has 'fqdn' and 'ssl').\n"
            .into(),
    })
}

/// `set server B/S addr IP [port PORT]`: new connections go to the new address at once.
fn set_addr(be: &crate::backend::BackendState, s: &ServerState, args: &[&str]) -> String {
    let Some(ip) = args.first() else {
        return "set server <b>/<s> addr requires an address and optionally a port.\n".into();
    };
    let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
        return format!("Invalid addr '{ip}'.\n");
    };
    let old = **s.addr.load();
    let port = match args.get(1..) {
        None | Some([]) => old.port(),
        Some(["port", p]) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return format!("Invalid port '{p}'.\n"),
        },
        Some(_) => {
            return "set server <b>/<s> addr requires an address and optionally a port.\n".into();
        }
    };
    let new = std::net::SocketAddr::new(ip, port);
    s.addr.store(std::sync::Arc::new(new));
    // Idle pooled connections to the old address are closed when next met.
    s.addr_gen.fetch_add(1, SeqCst);
    // A server that started without an address (`init-addr none`) now has one.
    if s.rmaint.swap(false, Relaxed) && !s.config_maint.load(Relaxed) {
        s.maint.store(false, Relaxed);
        s.last_change.store(unix_now(), Relaxed);
        be.changed();
    }
    let mut msg = String::new();
    if new.ip() != old.ip() {
        msg.push_str(&format!("IP changed from '{}' to '{}'", old.ip(), new.ip()));
    } else {
        msg.push_str("no need to change the addr");
    }
    if new.port() != old.port() {
        msg.push_str(&format!(
            ", port changed from '{}' to '{}'",
            old.port(),
            new.port()
        ));
    }
    msg.push_str(" by 'stats socket command'\n");
    msg
}

/// A port from the CLI (1..=65535).
fn cli_port(p: &str) -> Option<u16> {
    p.parse::<u16>().ok().filter(|p| *p > 0)
}

/// `set server B/S check-addr IP [port PORT]`: the next checks go there.
fn set_check_addr(s: &ServerState, args: &[&str]) -> String {
    let Some(ck) = &s.check else {
        return "health checks are not enabled on this server.\n".into();
    };
    let (ip, port) = match addr_and_port(args, "check-addr", |ip| {
        format!("Invalid check-addr '{ip}'.\n")
    }) {
        Ok(v) => v,
        Err(e) => return e,
    };
    ck.set_target(Some(Some(ip)), port);
    "health check addr updated.\n".into()
}

/// `IP [port PORT]` of `set server B/S check-addr|agent-addr`; `bad_ip` words the error
/// for an unparsable address.
fn addr_and_port(
    args: &[&str],
    cmd: &str,
    bad_ip: impl FnOnce(&str) -> String,
) -> Result<(std::net::IpAddr, Option<u16>), String> {
    let usage = || format!("set server <b>/<s> {cmd} requires an address and optionally a port.\n");
    let ip = args.first().ok_or_else(usage)?;
    let ip = ip.parse::<std::net::IpAddr>().map_err(|_| bad_ip(ip))?;
    let port = match args.get(1..) {
        None | Some([]) => None,
        Some(["port", p]) => Some(cli_port(p).ok_or_else(|| format!("Invalid port '{p}'.\n"))?),
        Some(_) => return Err(usage()),
    };
    Ok((ip, port))
}

/// `set server B/S check-port PORT`.
fn set_check_port(s: &ServerState, port: Option<&str>) -> String {
    let Some(ck) = &s.check else {
        return "health checks are not enabled on this server.\n".into();
    };
    match port.and_then(cli_port) {
        Some(p) => {
            ck.set_target(None, Some(p));
            "health check port updated.\n".into()
        }
        None => "'set server <srv> check-port' expects an integer as argument.\n".into(),
    }
}

/// `set server B/S agent-addr IP [port PORT]`.
fn set_agent_addr(s: &ServerState, args: &[&str]) -> String {
    let Some(ag) = &s.health.agent else {
        return "agent checks are not enabled on this server.\n".into();
    };
    let (ip, port) = match addr_and_port(args, "agent-addr", |_| {
        "incorrect addr address given for agent.\n".into()
    }) {
        Ok(v) => v,
        Err(e) => return e,
    };
    ag.set_target(|t| {
        t.addr = Some(ip);
        if let Some(p) = port {
            t.port = p;
        }
    });
    "agent addr updated.\n".into()
}

/// `set server B/S agent-port PORT`.
fn set_agent_port(s: &ServerState, port: Option<&str>) -> String {
    let Some(ag) = &s.health.agent else {
        return "agent checks are not enabled on this server.\n".into();
    };
    match port.and_then(cli_port) {
        Some(p) => {
            ag.set_target(|t| t.port = p);
            "agent port updated.\n".into()
        }
        None => "'set server <srv> agent-port' expects an integer as argument.\n".into(),
    }
}

/// `set server B/S agent-send STRING`: the words after `agent-send`, joined by spaces (quote
/// the string to keep its own spacing).
fn set_agent_send(s: &ServerState, args: &[&str]) -> String {
    let Some(ag) = &s.health.agent else {
        return "agent checks are not enabled on this server.\n".into();
    };
    if args.is_empty() {
        return "'set server <srv> agent-send' expects an argument.\n".into();
    }
    let v = args.join(" ");
    ag.set_target(|t| t.send = (!v.is_empty()).then_some(v));
    String::new()
}

pub(crate) fn set_maxconn(be: &crate::backend::BackendState, s: &ServerState, v: &str) -> String {
    if v.is_empty() {
        return "Require <maxconn>.\n".into();
    }
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    if digits == 0 {
        return "maxconn string empty or preceded by garbage".into();
    }
    if digits != v.len() {
        return "Trailing garbage in maxconn string".into();
    }
    let Ok(n) = v.parse::<u32>() else {
        return "maxconn string empty or preceded by garbage".into();
    };
    s.maxconn.store(n, SeqCst);
    // More room may let queued requests go now.
    be.changed();
    String::new()
}

/// `set maxconn frontend <fe> <n>`: listeners paused on the old limit resume at once.
fn set_maxconn_frontend(shared: &Shared, rest: &[&str]) -> String {
    let Some(name) = rest.first() else {
        return "A frontend name is expected.\n".into();
    };
    let found = find_proxy(shared, name, |i| shared.cfg.proxies[i].kind.has_frontend());
    let Some(i) = found else {
        return "No such frontend.\n".into();
    };
    let Some(v) = rest.get(1) else {
        return "Integer value expected.\n".into();
    };
    let Ok(v) = v.parse::<u32>() else {
        return "Integer value expected.\n".into();
    };
    shared.proxies[i].fe.maxconn.store(v, SeqCst);
    shared.conn_freed.notify_waiters();
    String::new()
}

/// `set maxconn global <n>`: within the start-up limit (0 or above it: the start-up limit).
fn set_maxconn_global(shared: &Shared, rest: &[&str]) -> String {
    let Some(v) = rest.first() else {
        return "Expects an integer value.\n".into();
    };
    let Ok(v) = v.parse::<i64>() else {
        return "Expects an integer value.\n".into();
    };
    if v > shared.hard_maxconn as i64 {
        return "Value out of range.\n".into();
    }
    let v = if v <= 0 {
        shared.hard_maxconn
    } else {
        v as u32
    };
    shared.global_maxconn.store(v, SeqCst);
    shared.conn_freed.notify_waiters();
    String::new()
}

/// `clear counters`: the maximums (`smax`, `qmax`); with `all`, every counter too.
fn clear_counters(shared: &Shared, all: bool) {
    shared.ssl_rate.clear_max();
    for ps in &shared.proxies {
        ps.fe.max_conns.store(0, Relaxed);
        if all {
            ps.fe.counters.clear();
        }
        let Some(be) = &ps.be else { continue };
        be.max_conns.store(0, Relaxed);
        be.max_queued.store(0, Relaxed);
        if all {
            be.counters.clear();
        }
        for s in be.servers.iter() {
            s.max_served.store(0, Relaxed);
            s.max_queued.store(0, Relaxed);
            if all {
                s.counters.clear();
                if let Some(ck) = &s.check {
                    ck.failed.store(0, Relaxed);
                    ck.downs.store(0, Relaxed);
                    ck.durations.clear();
                }
            }
        }
    }
}

fn show_stat(shared: &Shared, rest: &[&str]) -> String {
    use crate::stats::Filter;
    let mut f = Filter::all();
    let mut words = rest;
    // Optional `domain proxy` (HAProxy's only domain with stats).
    if let ["domain", d, more @ ..] = words {
        if *d != "proxy" {
            return "Unknown domain\n".into();
        }
        words = more;
    }
    let mut filt: Vec<&str> = Vec::new();
    let mut format = "csv";
    for w in words {
        match *w {
            "typed" | "json" => format = w,
            "up" => f.up_only = true,
            "no-maint" => f.no_maint = true,
            "desc" => {
                return "'show stat ... desc' (field descriptions) is not supported by sluice.\n"
                    .into();
            }
            x => filt.push(x),
        }
    }
    match filt.as_slice() {
        [] => {}
        [px, ty, sid] => {
            if *px != "-1" {
                let idx = match px.parse::<u32>() {
                    Ok(id) => shared.proxies.iter().position(|p| p.uuid == id),
                    Err(_) => shared.cfg.proxy_by_name(px),
                };
                match idx {
                    Some(i) => f.proxy = Some(i),
                    None => return "No such proxy.\n".into(),
                }
            }
            f.types = match ty.parse::<i64>() {
                Ok(-1) => 7,
                Ok(n) if n >= 0 => (n & 7) as u32,
                _ => return "Invalid type\n".into(),
            };
            f.sid = match sid.parse::<i64>() {
                Ok(-1) => None,
                Ok(n) if n >= 0 => Some(n as u32),
                _ => return "Invalid server id\n".into(),
            };
        }
        _ => return "Require 3 arguments: {<iid>|<proxy>} <type> <sid>\n".into(),
    }
    match format {
        "typed" => crate::stats::typed(shared, f),
        "json" => crate::stats::json(shared, f),
        _ => crate::stats::csv(shared, f),
    }
}

/// Runs `f` on every worker thread and collects the answers (in thread order). A thread that
/// does not answer within a second (stopping) is left out rather than hanging the CLI.
async fn on_each_worker<T: Send + 'static>(
    shared: &Shared,
    f: impl Fn(&crate::worker::Worker) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let Some(workers) = shared.workers.get() else {
        return Vec::new();
    };
    let mut waits = Vec::new();
    for tx in workers {
        let (rtx, rrx) = tokio::sync::oneshot::channel();
        let f = f.clone();
        let job: crate::worker::CtlJob = Box::new(move |w| {
            let _ = rtx.send(f(w));
        });
        if tx.send(job).is_ok() {
            waits.push(rrx);
        }
    }
    let mut out = Vec::new();
    for r in waits {
        if let Ok(Ok(v)) = tokio::time::timeout(Duration::from_secs(1), r).await {
            out.push(v);
        }
    }
    out
}

/// Session ids as `show sess` prints them: the thread in the high bits, the registry key low.
fn session_id(thread: usize, key: usize) -> u64 {
    ((thread as u64 + 1) << 32) | key as u64
}

/// `show sess`: one line per live client connection, HAProxy's leading fields.
async fn show_sess(shared: &Arc<Shared>, rest: &[&str]) -> String {
    if let Some(w) = rest.first()
        && *w != "all"
    {
        return "'show sess <id>' (one session in detail) is not supported by sluice; use \
                'show sess'.\n"
            .into();
    }
    let sh = shared.clone();
    let lines = on_each_worker(shared, move |w| {
        let mut out = String::new();
        let now = std::time::Instant::now();
        for (key, e) in w.sessions.borrow().iter() {
            let p = &sh.cfg.proxies[e.fe];
            let (proto, src) = match e.src {
                Some(a) if a.is_ipv4() => ("tcpv4", a.to_string()),
                Some(a) => ("tcpv6", a.to_string()),
                None => ("unix_stream", "unix".to_string()),
            };
            let (be, srv) = match e.srv {
                Some((b, s)) => (
                    sh.cfg.proxies[b].name.as_str(),
                    sh.server(b, s).name.as_str(),
                ),
                None => ("<NONE>", "<none>"),
            };
            out.push_str(&format!(
                "0x{:x}: proto={proto} src={src} fe={} be={be} srv={srv} age={}s thr={}\n",
                session_id(w.id, key),
                p.name,
                now.duration_since(e.since).as_secs(),
                w.id + 1,
            ));
        }
        out
    })
    .await;
    lines.concat()
}

/// `shutdown session <id>`: closes one client connection (and its server side) at once.
async fn shutdown_session(shared: &Arc<Shared>, id: &str) -> String {
    let Ok(id) = u64::from_str_radix(id.trim_start_matches("0x"), 16) else {
        return "Session pointer expected (use 'show sess').\n".into();
    };
    let (thread, key) = ((id >> 32) as usize, (id & 0xffff_ffff) as usize);
    let found = on_each_worker(shared, move |w| {
        if w.id + 1 != thread {
            return false;
        }
        let h = w.sessions.borrow().get(key).and_then(|e| e.abort.clone());
        h.map(|h| h.abort()).is_some()
    })
    .await;
    if found.contains(&true) {
        String::new()
    } else {
        "No such session (use 'show sess').\n".into()
    }
}

/// `shutdown sessions server B/S`: closes every connection currently attached to the server.
async fn shutdown_server_sessions(shared: &Arc<Shared>, spec: &str) -> String {
    if spec.is_empty() {
        return "Require 'backend/server'.\n".into();
    }
    let (be, idx) = match find_server(shared, spec) {
        Ok((be, s)) => (
            be.proxy_idx,
            be.servers
                .iter()
                .position(|x| std::ptr::eq(x, s))
                .expect("found in this backend"),
        ),
        Err(e) => return e.into(),
    };
    on_each_worker(shared, move |w| w.kill_server_sessions(be, idx)).await;
    String::new()
}

/// `add server B/S ADDR [options]`: the server joins in maintenance when `disabled` is
/// given, else ready at once; its checks (with `check`) wait for `enable health`.
async fn add_server(shared: &Arc<Shared>, rest: &[&str]) -> String {
    let Some((spec, addr)) = rest.first().zip(rest.get(1)) else {
        return "'server' expects <backend>/<server> and an address.\n".into();
    };
    let Some((bname, sname)) = spec.split_once('/') else {
        return "Require 'backend/server'.\n".into();
    };
    if sname.is_empty() {
        return "Require 'backend/server'.\n".into();
    }
    let Some(bi) = find_backend(shared, bname) else {
        return "No such backend.\n".into();
    };
    let opts: Vec<String> = rest[2..].iter().map(|w| w.to_string()).collect();
    let conf = match crate::config::dynamic_server(sname, addr, &opts, &shared.cfg.global.tls)
        .and_then(|mut c| {
            crate::config::check_needs(&mut c, &shared.cfg.proxies[bi])?;
            Ok(c)
        }) {
        Ok(c) => c,
        Err(e) => return format!("{e}\n"),
    };
    let check = conf.check.clone();
    let be = shared.backend(bi);
    let si = match be.add_server(conf) {
        Ok(i) => i,
        Err(e) => return format!("{e}\n"),
    };
    if let Some(cfg) = check
        && let Some(workers) = shared.workers.get()
        && !workers.is_empty()
    {
        // Checks run on one worker, like those of configured servers.
        let job: crate::worker::CtlJob = Box::new(move |w| crate::check::spawn_one(w, bi, si, cfg));
        let _ = workers[si % workers.len()].send(job);
    }
    let mut reply: String = crate::config::take_warnings()
        .into_iter()
        .map(|w| format!("[WARNING] {w}\n"))
        .collect();
    reply.push_str("New server registered.\n");
    reply
}

/// `del server B/S`: in maintenance and unused; its idle pooled connections are closed first.
async fn del_server(shared: &Arc<Shared>, spec: &str) -> String {
    let Some((bname, sname)) = spec.split_once('/') else {
        return "Require 'backend/server'.\n".into();
    };
    let Some(bi) = find_backend(shared, bname) else {
        return "No such backend.\n".into();
    };
    let be = shared.backend(bi);
    let Some((si, s)) = be.servers.by_name(sname) else {
        return "No such server.\n".into();
    };
    if !s.maint.load(SeqCst) {
        return "Only servers in maintenance mode can be deleted.\n".into();
    }
    let sh = shared.clone();
    on_each_worker(shared, move |w| {
        w.pool.drop_server((bi, si), &sh.server(bi, si).pool);
    })
    .await;
    match be.del_server(si) {
        Ok(()) => "Server deleted.\n".into(),
        Err(e) => format!("{e}\n"),
    }
}

/// `show activity`: per-thread counters, `name: total [ thread1 thread2 ... ]` as HAProxy.
async fn show_activity(shared: &Arc<Shared>) -> String {
    const NAMES: [&str; 8] = [
        "accepted",
        "conns_cur",
        "idle_srv_conns",
        // Client TLS handshakes started, dropped before any crypto because their client had
        // gone, waiting for their turn now, and the most that ever waited (`handshake`).
        "ssl_hs_started",
        "ssl_hs_dropped",
        "ssl_hs_queued",
        "ssl_hs_queue_max",
        // Times the thread's `ssl` listeners paused on `tune.runqueue-depth`.
        "ssl_accept_paused",
    ];
    let per = on_each_worker(shared, |w| {
        [
            w.activity.accepted.get(),
            w.active.get() as u64,
            w.pool.idle_count() as u64,
            w.hs.started.get(),
            w.hs.dropped.get(),
            u64::from(w.hs.queued()),
            u64::from(w.hs.queue_max.get()),
            w.hs.pauses.get(),
        ]
    })
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let up = shared.started.elapsed().unwrap_or_default();
    let mut out = format!(
        "thread_id: 0 ({}..{})\ndate_now: {}.{:06}\nuptime_now: {}.{:06}\n",
        u32::from(!per.is_empty()),
        per.len(),
        now.as_secs(),
        now.subsec_micros(),
        up.as_secs(),
        up.subsec_micros()
    );
    // sluice's own, after HAProxy's: each thread's health-check tasks, and those it migrated
    // to another thread (DESIGN §5).
    let checks = crate::check::thread_loads(per.len());
    let rows = NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, per.iter().map(|t| t[i]).collect::<Vec<_>>()))
        .chain([
            ("checks_cur", checks.iter().map(|c| c.0 as u64).collect()),
            ("checks_migrated", checks.iter().map(|c| c.1).collect()),
        ]);
    for (name, vals) in rows {
        let total: u64 = vals.iter().sum();
        out.push_str(&format!("{name}: {total} ["));
        for v in vals {
            out.push_str(&format!(" {v}"));
        }
        out.push_str(" ]\n");
    }
    out
}

/// Serves one CLI connection until it quits, times out, or (non-interactive) after one line.
/// Serves one CLI connection. `getsocks`: the socket has `expose-fd listeners`; a `_getsocks`
/// command then ends the text dialogue and gives the stream back for the descriptors to be
/// sent over it ([`crate::reload`]).
pub async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    stream: S,
    level: CliLevel,
    nbthread: usize,
    getsocks: bool,
) -> Option<S> {
    let timeout = shared.cfg.global.stats_timeout;
    let (r, mut w) = tokio::io::split(stream);
    let mut r = BufReader::new(r);
    let mut sess = Session {
        level,
        interactive: false,
        nbthread,
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = tokio::time::timeout(
            timeout.max(Duration::from_millis(1)),
            (&mut r)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line),
        )
        .await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(_)) => {}
        }
        if line.len() > MAX_LINE {
            let _ = w.write_all(b"Command line too long.\n\n").await;
            return None;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let mut cmds = split_commands(text);
        // A command ending with `<<` takes the following lines, up to an empty one, as its
        // last argument (HAProxy's payload syntax, used by `set ssl cert`).
        if let Some(last) = cmds.last_mut()
            && last.last().is_some_and(|w| w == "<<")
        {
            let payload = read_payload(&mut r, timeout).await?;
            last.pop();
            last.push(payload);
        }
        let mut quit = false;
        for cmd in cmds {
            if cmd.first().is_some_and(|c| c == crate::reload::GETSOCKS) {
                if getsocks {
                    let _ = w.flush().await;
                    return Some(r.into_inner().unsplit(w));
                }
                let _ = w
                    .write_all(b"_getsocks: this stats socket has no 'expose-fd listeners'.\n\n")
                    .await;
                return None;
            }
            let (mut out, after) = execute(&shared, &mut sess, &cmd).await;
            if after == After::Quit {
                quit = true;
                break;
            }
            out.push_str(if sess.interactive { "\n> " } else { "\n" });
            if w.write_all(out.as_bytes()).await.is_err() {
                return None;
            }
        }
        let _ = w.flush().await;
        if quit || !sess.interactive {
            let _ = w.shutdown().await;
            return None;
        }
    }
}

/// Lines up to the first empty one (or EOF), at most [`MAX_PAYLOAD`] bytes.
async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    timeout: Duration,
) -> Option<String> {
    let mut payload = Vec::new();
    loop {
        let mut l = Vec::new();
        let n = tokio::time::timeout(
            timeout.max(Duration::from_millis(1)),
            r.take(MAX_PAYLOAD as u64).read_until(b'\n', &mut l),
        )
        .await
        .ok()?
        .ok()?;
        if n == 0 || l == b"\n" || l == b"\r\n" {
            break;
        }
        payload.extend_from_slice(&l);
        if payload.len() > MAX_PAYLOAD {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&payload).into_owned())
}

/// Largest `<<` payload accepted (a certificate chain with its key fits easily).
const MAX_PAYLOAD: usize = 1 << 20;

/// A bound CLI socket, not yet serving.
pub enum CliListener {
    /// With the socket file to remove at exit (`None`: inherited `fd@N`, not ours).
    Unix(std::os::unix::net::UnixListener, Option<std::path::PathBuf>),
    Tcp(std::net::TcpListener),
}

/// Binds every `stats socket` (before workers start, so errors stop start-up).
/// Each comes with its level and whether it has `expose-fd listeners`.
pub fn bind_all(
    socks: &[StatsSocket],
    unix_bind: &crate::config::UnixBind,
) -> Result<Vec<(CliListener, CliLevel, bool)>, String> {
    let mut out = Vec::new();
    for s in socks {
        let where_ = format!("{}:{}", s.origin.file, s.origin.line);
        let l = match &s.addr {
            BindAddr::Unix(path) => {
                // A stale socket file from a previous run would make bind() fail.
                if std::fs::symlink_metadata(path)
                    .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                {
                    let _ = std::fs::remove_file(path);
                }
                let l = std::os::unix::net::UnixListener::bind(path).map_err(|e| {
                    format!(
                        "stats socket at {where_}: cannot bind UNIX socket '{}': {e}",
                        path.display()
                    )
                })?;
                unix_bind.apply(path, [s.mode, s.uid, s.gid]).map_err(|e| {
                    format!(
                        "stats socket at {where_}: cannot set the mode or owner of '{}': {e}",
                        path.display()
                    )
                })?;
                CliListener::Unix(l, Some(path.clone()))
            }
            BindAddr::Abns(n) => {
                use std::os::linux::net::SocketAddrExt;
                let l = std::os::unix::net::SocketAddr::from_abstract_name(n.as_bytes())
                    .and_then(|a| std::os::unix::net::UnixListener::bind_addr(&a))
                    .map_err(|e| format!("stats socket at {where_}: cannot bind abns@{n}: {e}"))?;
                CliListener::Unix(l, None)
            }
            BindAddr::Tcp(a) => CliListener::Tcp(
                std::net::TcpListener::bind(a)
                    .map_err(|e| format!("stats socket at {where_}: cannot bind {a}: {e}"))?,
            ),
            // An inherited listening socket (from a parent process or a supervisor).
            BindAddr::Fd(n) => {
                let s = crate::sys::adopt_listening_fd(*n)
                    .map_err(|e| format!("stats socket at {where_}: fd@{n}: {e}"))?;
                match s.domain() {
                    Ok(socket2::Domain::UNIX) => CliListener::Unix(
                        std::os::unix::net::UnixListener::from(std::os::fd::OwnedFd::from(s)),
                        None,
                    ),
                    _ => CliListener::Tcp(s.into()),
                }
            }
        };
        out.push((l, s.level, s.expose_fd));
    }
    Ok(out)
}

/// Serves an accepted CLI connection on its own task; after an accept error (out of file
/// descriptors, say) waits a little instead of spinning.
async fn serve_accepted<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    accepted: std::io::Result<S>,
    serve: impl FnOnce(S) -> tokio::task::JoinHandle<()>,
) {
    match accepted {
        Ok(s) => {
            serve(s);
        }
        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
    }
}

/// A UNIX socket CLI connection; on `_getsocks` (with `expose-fd listeners`), the listening
/// sockets are sent over it.
async fn serve_unix(
    s: tokio::net::UnixStream,
    shared: Arc<Shared>,
    level: CliLevel,
    nbthread: usize,
    expose: bool,
) {
    let Some(s) = serve_conn(shared.clone(), s, level, nbthread, expose).await else {
        return;
    };
    let Some(x) = shared.exposed.get() else {
        return;
    };
    match x.send(&s).await {
        Ok(n) => crate::say!(
            "[NOTICE] ({}) : {n} listening socket(s) handed to a new process (_getsocks)",
            std::process::id()
        ),
        Err(e) => crate::say!(
            "[WARNING] ({}) : _getsocks: cannot send the listening sockets: {e}",
            std::process::id()
        ),
    }
}

/// A UNIX socket file this process created, and its identity (device, inode) then.
pub type SocketFile = (std::path::PathBuf, Option<(u64, u64)>);

/// Starts serving bound CLI sockets on the current (control) runtime. Returns the UNIX socket
/// files to remove at exit (if still the same files).
pub fn spawn_all(
    listeners: Vec<(CliListener, CliLevel, bool)>,
    shared: Arc<Shared>,
    nbthread: usize,
) -> std::io::Result<Vec<SocketFile>> {
    let mut paths = Vec::new();
    for (l, level, expose) in listeners {
        let shared = shared.clone();
        match l {
            CliListener::Unix(l, path) => {
                l.set_nonblocking(true)?;
                let l = tokio::net::UnixListener::from_std(l)?;
                paths.extend(path.map(|p| {
                    let id = crate::runtime::file_id(&p);
                    (p, id)
                }));
                tokio::spawn(async move {
                    loop {
                        let c = l.accept().await.map(|(s, _)| s);
                        serve_accepted(c, |s| {
                            tokio::spawn(serve_unix(s, shared.clone(), level, nbthread, expose))
                        })
                        .await;
                    }
                });
            }
            CliListener::Tcp(l) => {
                l.set_nonblocking(true)?;
                let l = tokio::net::TcpListener::from_std(l)?;
                tokio::spawn(async move {
                    loop {
                        let c = l.accept().await.map(|(s, _)| s);
                        serve_accepted(c, |s| {
                            let shared = shared.clone();
                            tokio::spawn(async move {
                                serve_conn(shared, s, level, nbthread, false).await;
                            })
                        })
                        .await;
                    }
                });
            }
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_haproxy() {
        assert_eq!(
            split_commands("show info; show  stat\t-1 7 -1"),
            vec![
                vec!["show".to_string(), "info".into()],
                vec![
                    "show".into(),
                    "stat".into(),
                    "-1".into(),
                    "7".into(),
                    "-1".into()
                ],
            ]
        );
        assert_eq!(
            split_commands(r"set server a\;b/s state ready"),
            vec![vec![
                "set".to_string(),
                "server".into(),
                "a;b/s".into(),
                "state".into(),
                "ready".into()
            ]]
        );
        assert_eq!(split_commands(""), vec![Vec::<String>::new()]);
    }

    #[test]
    fn help_lists_only_allowed_commands() {
        let u = usage(CliLevel::User, "");
        assert!(u.contains("show stat") && !u.contains("set weight"));
        let a = usage(CliLevel::Admin, "");
        assert!(a.contains("set weight") && a.contains("disable server"));
    }
}
