//! The `global` section (repeatable; every occurrence adds to the same settings).

use super::super::{CpuMap, Global};
use super::values::{arg, no_extra, parse_range, parse_size, parse_time, parse_u32, parse_u64};
use super::{GlobalExtra, KwErr, did_you_mean, logs};
use crate::config::tokenizer::Line;

const KEYWORDS: &[&str] = &[
    "nbthread",
    "maxconn",
    "daemon",
    "master-worker",
    "mworker-max-reloads",
    "pidfile",
    "log",
    "cpu-map",
    "tune.bufsize",
    "tune.maxrewrite",
    "tune.maxaccept",
    "tune.runqueue-depth",
    "tune.idle-pool.shared",
    "tune.rcvbuf.client",
    "tune.sndbuf.client",
    "tune.rcvbuf.server",
    "tune.sndbuf.server",
    "tune.h2.header-table-size",
    "tune.h2.initial-window-size",
    "tune.h2.max-concurrent-streams",
    "tune.h2.max-frame-size",
    "maxconnrate",
    "maxsessrate",
    "maxsslrate",
    "hard-stop-after",
    "stats",
    "chroot",
    "user",
    "group",
    "uid",
    "gid",
    "ca-base",
    "crt-base",
    "ssl-default-bind-ciphers",
    "ssl-default-bind-ciphersuites",
    "ssl-default-bind-options",
    "ssl-default-server-ciphers",
    "ssl-default-server-ciphersuites",
    "ssl-default-server-options",
    "ssl-server-verify",
    "ssl-default-bind-curves",
    "node",
    "description",
    "server-state-file",
    "server-state-base",
    "ulimit-n",
    "strict-limits",
    "zero-warning",
    "tune.ssl.default-dh-param",
    "tune.ssl.cachesize",
    "tune.ssl.lifetime",
    "tune.ssl.capture-buffer-size",
    "tune.ssl.capture-cipherlist-size",
    "maxpipes",
    "set-dumpable",
    "external-check",
    "insecure-fork-wanted",
    "insecure-setuid-wanted",
    "ssl-dh-param-file",
    "log-send-hostname",
    "unix-bind",
    "setenv",
    "presetenv",
    "resetenv",
    "unsetenv",
];

/// Real HAProxy global keywords that sluice does not implement.
const UNSUPPORTED: &[&str] = &[
    "key-base",
    "maxsslconn",
    "maxcomprate",
    "maxcompcpuusage",
    "maxzlibmem",
    "fd-hard-limit",
    "quiet",
    "debug",
    "expose-experimental-directives",
    "grace",
    "busy-polling",
    "noepoll",
    "nopoll",
    "nokqueue",
    "noevports",
    "nosplice",
    "nogetaddrinfo",
    "noreuseport",
    "h1-case-adjust",
    "h1-case-adjust-file",
    "h2-workaround-bogus-websocket-clients",
    "numa-cpu-mapping",
    "pp2-never-send-local",
    "cluster-secret",
    "thread-groups",
    "thread-group",
    "issuers-chain-path",
    "ssl-engine",
    "ssl-mode-async",
    "ssl-load-extra-files",
    "ssl-load-extra-del-ext",
    "ssl-skip-self-issued-ca",
    "ssl-propquery",
    "ssl-provider",
    "ssl-provider-path",
    "httpclient.resolvers.id",
    "httpclient.resolvers.prefer",
    "httpclient.ssl.ca-file",
    "httpclient.ssl.verify",
    "profiling.tasks",
    "profiling.memory",
    "anonkey",
];

/// Prefixes of whole families of HAProxy global keywords sluice does not implement.
const UNSUPPORTED_PREFIXES: &[&str] = &[
    "tune.",
    "ssl-default-",
    "ssl-",
    "lua-",
    "51degrees-",
    "wurfl-",
    "deviceatlas-",
    "httpclient.",
    "profiling.",
    "quic-",
];

/// `cpu-map` thread selections that depend on the final thread count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThreadSel {
    All,
    Odd,
    Even,
}

pub(super) fn keyword(g: &mut Global, gx: &mut GlobalExtra, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let kw = w[0].as_str();
    if let Some(r) = super::checks::global_keyword(&mut g.checks, w) {
        return r.map_err(Into::into);
    }
    match kw {
        "nbthread" => {
            g.nbthread = Some(parse_range(arg(w, 1, "number of threads")?, 1, 1024)? as usize);
            no_extra(w, 2)?;
        }
        "maxconn" => {
            g.maxconn =
                Some(parse_range(arg(w, 1, "number of connections")?, 1, u32::MAX as u64)? as u32);
            no_extra(w, 2)?;
        }
        "daemon" => {
            no_extra(w, 1)?;
            g.daemon = true;
        }
        "mworker-max-reloads" => {
            let Some(v) = w.get(1) else {
                return Err("'mworker-max-reloads' expects an integer argument"
                    .to_string()
                    .into());
            };
            no_extra(w, 2)?;
            g.mworker_max_reloads = Some(v.parse().map_err(|_| {
                format!("'mworker-max-reloads' expects a non-negative integer, not '{v}'")
            })?);
        }
        "master-worker" => {
            g.master_worker = Some(match w.get(1).map(String::as_str) {
                None => false,
                Some("no-exit-on-failure") => {
                    no_extra(w, 2)?;
                    true
                }
                Some(x) => {
                    return Err(format!(
                        "'master-worker' only supports 'no-exit-on-failure', not '{x}'"
                    )
                    .into());
                }
            });
        }
        "pidfile" => {
            g.pidfile = Some(arg(w, 1, "file name")?.into());
            no_extra(w, 2)?;
        }
        "log" => {
            if w.get(1).map(String::as_str) == Some("global") {
                return Err("'log global' can only be used in proxies and defaults"
                    .to_string()
                    .into());
            }
            g.logs.push(logs::parse_target(&w[1..])?);
        }
        "cpu-map" => cpu_map(g, gx, w)?,
        "node" => {
            g.node = Some(arg(w, 1, "node name")?.to_string());
            no_extra(w, 2)?;
        }
        "server-state-file" | "server-state-base" => {
            let v = Some(arg(w, 1, "path")?.to_string());
            no_extra(w, 2)?;
            if kw == "server-state-file" {
                g.server_state_file = v;
            } else {
                g.server_state_base = v;
            }
        }
        // The rest of the line, as HAProxy takes it.
        "description" => {
            arg(w, 1, "description text")?;
            g.description = Some(w[1..].join(" "));
        }
        "ulimit-n" => {
            g.ulimit_n = Some(parse_range(
                arg(w, 1, "number of files")?,
                1,
                u32::MAX as u64,
            )?);
            no_extra(w, 2)?;
        }
        "unix-bind" => unix_bind(g, w)?,
        "strict-limits" => {
            no_extra(w, 1)?;
            g.strict_limits = true;
        }
        "zero-warning" => {
            no_extra(w, 1)?;
            g.zero_warning = true;
        }
        "set-dumpable" => {
            no_extra(w, 1)?;
            g.set_dumpable = true;
        }
        "external-check" => {
            no_extra(w, 1)?;
            g.external_check = true;
        }
        // Permissions HAProxy's own sandbox needs for external checks; sluice does not
        // forbid forking or set-uid programs, so they change nothing.
        "insecure-fork-wanted" | "insecure-setuid-wanted" => no_extra(w, 1)?,
        // Pipes serve kernel splicing only, which sluice does not use.
        "maxpipes" => {
            parse_u32(arg(w, 1, "number of pipes")?)?;
            no_extra(w, 2)?;
            super::warn(
                "'maxpipes' has no effect in sluice: pipes only serve kernel splicing, which \
                 sluice does not use"
                    .to_string(),
            );
        }
        "tune.ssl.capture-buffer-size" | "tune.ssl.capture-cipherlist-size" => {
            parse_u32(arg(w, 1, "size")?)?;
            no_extra(w, 2)?;
            super::warn(format!(
                "'{kw}' has no effect in sluice: the ClientHello captures it sizes \
                 (ssl_fc_cipherlist_*, ssl_fc_ecformats_bin, ...) are not supported"
            ));
        }
        "default-path" => {
            let policy = match (arg(w, 1, "current, config, parent or origin")?, w.get(2)) {
                ("current", None) => super::DefaultPath::Current,
                ("config", None) => super::DefaultPath::Config,
                ("parent", None) => super::DefaultPath::Parent,
                ("origin", Some(p)) => {
                    no_extra(w, 3)?;
                    super::DefaultPath::Origin(p.into())
                }
                ("origin", None) => {
                    return Err("'default-path origin' expects a directory"
                        .to_string()
                        .into());
                }
                ("current" | "config" | "parent", Some(x)) => {
                    return Err(format!("unexpected argument '{x}'").into());
                }
                (p, _) => {
                    return Err(format!(
                        "unknown policy '{p}' (expected current, config, parent or origin)"
                    )
                    .into());
                }
            };
            super::set_default_path(policy, &l.file)?;
        }
        "ssl-dh-param-file" => {
            let f = arg(w, 1, "a file of Diffie-Hellman parameters")?;
            no_extra(w, 2)?;
            std::fs::metadata(f).map_err(|e| format!("cannot read '{f}': {e}"))?;
            super::warn(
                "'ssl-dh-param-file' has no effect in sluice: its TLS library has no DHE \
                 cipher suites (ECDHE ones need no parameters)"
                    .to_string(),
            );
        }
        "tune.ssl.cachesize" => {
            // HAProxy's limit (a positive int); rustls reserves the room up front.
            let n = parse_range(arg(w, 1, "number of sessions")?, 0, i32::MAX as u64)?;
            g.tls.session_cache = Some(n as usize);
            no_extra(w, 2)?;
        }
        "tune.ssl.lifetime" => {
            // In seconds unless a unit is given (HAProxy's TIME_UNIT_S).
            let v = arg(w, 1, "time (in seconds unless a unit is given)")?;
            let secs = if v.bytes().all(|b| b.is_ascii_digit()) {
                parse_u32(v)?
            } else {
                u32::try_from(parse_time(v)?.as_secs()).unwrap_or(u32::MAX)
            };
            no_extra(w, 2)?;
            g.tls.session_lifetime = Some(secs);
        }
        // Diffie-Hellman parameters serve the DHE suites, which rustls does not have.
        "tune.ssl.default-dh-param" => {
            parse_range(arg(w, 1, "number of bits")?, 1024, 16384)?;
            no_extra(w, 2)?;
            super::warn(
                "'tune.ssl.default-dh-param' has no effect in sluice: its TLS library has no \
                 DHE cipher suites (ECDHE ones need no parameters)"
                    .to_string(),
            );
        }
        // Lua (see the `lua` module): the script runs now, so that later lines may name what
        // it registers.
        "lua-load" | "lua-load-per-thread" => {
            let file = arg(w, 1, "Lua file name")?;
            crate::lua::load(file, &w[2..])?;
        }
        "lua-prepend-path" => {
            let path = arg(w, 1, "path")?;
            let cpath = match w.get(2).map(String::as_str) {
                None | Some("path") => false,
                Some("cpath") => true,
                Some(o) => {
                    return Err(
                        format!("expects 'path' or 'cpath' after the path, got '{o}'").into(),
                    );
                }
            };
            no_extra(w, 3)?;
            crate::lua::prepend_path(path, cpath);
        }
        "tune.lua.maxmem" => {
            // Megabytes, as HAProxy's.
            let mb = parse_u64(arg(w, 1, "number of megabytes")?)?;
            no_extra(w, 2)?;
            crate::lua::set_tune(|t| t.maxmem = (mb as usize).saturating_mul(1 << 20));
        }
        "tune.lua.session-timeout" | "tune.lua.service-timeout" => {
            let t = parse_time(arg(w, 1, "timeout")?)?;
            no_extra(w, 2)?;
            let service = w[0] == "tune.lua.service-timeout";
            crate::lua::set_tune(|l| {
                if service {
                    l.service_timeout = t
                } else {
                    l.session_timeout = t
                }
            });
        }
        // No Lua task runs (`core.register_task` is refused), and functions run without
        // yielding: nothing for these to tune.
        "tune.lua.task-timeout" => {
            parse_time(arg(w, 1, "timeout")?)?;
            no_extra(w, 2)?;
        }
        "tune.lua.forced-yield" => {
            parse_range(arg(w, 1, "number")?, 1, u32::MAX as u64)?;
            no_extra(w, 2)?;
        }
        "tune.bufsize" => {
            let v = parse_size(arg(w, 1, "size")?)?;
            if !(1024..=(1 << 30)).contains(&v) {
                return Err(format!("{v} is out of range (expected 1024 to 1073741824)").into());
            }
            no_extra(w, 2)?;
            g.bufsize = v as usize;
        }
        "tune.maxrewrite" => {
            let v = parse_size(arg(w, 1, "size")?)?;
            no_extra(w, 2)?;
            g.maxrewrite = usize::try_from(v).map_err(|_| format!("'{v}' is too large"))?;
        }
        "tune.maxaccept" => {
            let v = arg(w, 1, "number")?;
            g.maxaccept = if v == "-1" {
                u32::MAX
            } else {
                parse_range(v, 1, u32::MAX as u64 - 1)
                    .map_err(|e| format!("{e} (or -1 for unlimited)"))? as u32
            };
            no_extra(w, 2)?;
        }
        "tune.runqueue-depth" => {
            g.runqueue_depth =
                parse_range(arg(w, 1, "number of tasks")?, 1, u32::MAX as u64)? as u32;
            no_extra(w, 2)?;
        }
        "maxconnrate" | "maxsessrate" | "maxsslrate" => {
            let n = parse_u32(arg(w, 1, "number per second")?)?;
            no_extra(w, 2)?;
            let v = (n > 0).then_some(n);
            match kw {
                "maxconnrate" => g.maxconnrate = v,
                "maxsessrate" => g.maxsessrate = v,
                _ => g.maxsslrate = v,
            }
        }
        "tune.rcvbuf.client" | "tune.sndbuf.client" | "tune.rcvbuf.server"
        | "tune.sndbuf.server" => {
            let v = parse_size(arg(w, 1, "size in bytes")?)?;
            no_extra(w, 2)?;
            let v = u32::try_from(v)
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("'{v}' is out of range (expected 1 to 4294967295)"))?;
            match kw {
                "tune.rcvbuf.client" => g.rcvbuf_client = Some(v),
                "tune.sndbuf.client" => g.sndbuf_client = Some(v),
                "tune.rcvbuf.server" => g.rcvbuf_server = Some(v),
                _ => g.sndbuf_server = Some(v),
            }
        }
        // Applied by the tokenizer as the line was read (the lines after it see the change);
        // only the arguments are checked here.
        "setenv" | "presetenv" => {
            arg(w, 1, "variable name")?;
            arg(w, 2, "value")?;
            no_extra(w, 3)?;
        }
        "unsetenv" => {
            arg(w, 1, "variable name")?;
        }
        "resetenv" => {}
        "tune.h2.header-table-size" => {
            g.h2.header_table_size = parse_range(arg(w, 1, "number")?, 0, 65536)? as u32;
            no_extra(w, 2)?;
        }
        "tune.h2.initial-window-size" => {
            // RFC 9113 §6.5.2: at most 2^31-1.
            g.h2.initial_window_size = parse_range(arg(w, 1, "number")?, 0, (1 << 31) - 1)? as u32;
            no_extra(w, 2)?;
        }
        "tune.h2.max-concurrent-streams" => {
            let n = parse_u32(arg(w, 1, "number")?)?;
            g.h2.max_concurrent_streams = if n == 0 { u32::MAX } else { n };
            no_extra(w, 2)?;
        }
        "tune.h2.max-frame-size" => {
            // RFC 9113 §6.5.2: 16384 to 16777215.
            g.h2.max_frame_size = Some(parse_range(arg(w, 1, "number")?, 16384, 16777215)? as u32);
            no_extra(w, 2)?;
        }
        "tune.idle-pool.shared" => {
            g.idle_pool_shared = match arg(w, 1, "'on' or 'off'")? {
                "on" => true,
                "off" => false,
                x => return Err(format!("expected 'on' or 'off', got '{x}'").into()),
            };
            no_extra(w, 2)?;
        }
        "stats" => stats(g, l)?,
        "localpeer" => {
            let name = arg(w, 1, "a peer name")?;
            no_extra(w, 2)?;
            g.localpeer = Some(name.to_string());
        }
        "log-send-hostname" => {
            let name = match w.get(1) {
                Some(n) => n.clone(),
                None => Some(crate::util::hostname())
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "localhost".into()),
            };
            no_extra(w, 2)?;
            g.log_send_hostname = Some(name);
        }
        "log-tag" => {
            let tag = arg(w, 1, "tag")?;
            // An RFC 3164 TAG: printable, no spaces, no ':' / '[' that would end it early.
            if tag.is_empty()
                || !tag
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !matches!(b, b':' | b'[' | b']'))
            {
                return Err(format!("invalid log tag '{tag}'").into());
            }
            g.log_tag = Some(tag.to_string());
            no_extra(w, 2)?;
        }
        "set-var" | "set-var-fmt" => {
            // `set-var proc.NAME EXPR`: evaluated now, with no session to read.
            let name = arg(w, 1, "variable name")?;
            let value = arg(
                w,
                2,
                if kw == "set-var" {
                    "expression"
                } else {
                    "format"
                },
            )?;
            no_extra(w, 3)?;
            let v = crate::vars::VarName::parse(name)?;
            if v.scope != crate::vars::Scope::Proc {
                return Err(format!(
                    "'{kw}' in the global section only sets 'proc.' variables, not '{name}'"
                )
                .into());
            }
            let view = crate::stream::http::SrcView(None, None, None, Default::default(), None);
            let val = if kw == "set-var" {
                let e = crate::config::SampleFetch::parse(value)?;
                e.value(&view).ok_or_else(|| {
                    format!(
                        "'{value}' gives no value here (the global section has no session: \
                         use constants such as str() and int())"
                    )
                })?
            } else {
                let f = crate::config::TextFormat::parse(value)?;
                let mut out = Vec::new();
                f.render_all(&view, &mut out);
                crate::config::converter::Val::Str(out)
            };
            crate::vars::proc_set(&v.name, val, &[]);
        }
        "hard-stop-after" => {
            g.hard_stop_after = Some(parse_time(arg(w, 1, "time")?)?);
            no_extra(w, 2)?;
        }
        "chroot" => {
            g.chroot = Some(arg(w, 1, "directory")?.into());
            no_extra(w, 2)?;
        }
        "uid" | "gid" => {
            let v = parse_u32(arg(w, 1, "numeric id")?)?;
            no_extra(w, 2)?;
            set_id(if kw == "uid" { &mut g.uid } else { &mut g.gid }, v, kw);
        }
        "user" => {
            let name = arg(w, 1, "user name")?;
            no_extra(w, 2)?;
            match nix::unistd::User::from_name(name) {
                Ok(Some(u)) => set_id(&mut g.uid, u.uid.as_raw(), kw),
                Ok(None) => return Err(format!("cannot find user id for '{name}'").into()),
                Err(e) => return Err(format!("cannot find user id for '{name}': {e}").into()),
            }
        }
        "group" => {
            let name = arg(w, 1, "group name")?;
            no_extra(w, 2)?;
            match nix::unistd::Group::from_name(name) {
                Ok(Some(gr)) => set_id(&mut g.gid, gr.gid.as_raw(), kw),
                Ok(None) => return Err(format!("cannot find group id for '{name}'").into()),
                Err(e) => return Err(format!("cannot find group id for '{name}': {e}").into()),
            }
        }
        "ca-base" | "crt-base" => {
            let dir = arg(w, 1, "directory")?;
            no_extra(w, 2)?;
            let slot = if kw == "ca-base" {
                &mut g.tls.ca_base
            } else {
                &mut g.tls.crt_base
            };
            if slot.is_some() {
                return Err(format!("'{kw}' already specified").into());
            }
            *slot = Some(dir.to_string());
        }
        "ssl-default-bind-ciphers"
        | "ssl-default-server-ciphers"
        | "ssl-default-bind-ciphersuites"
        | "ssl-default-server-ciphersuites" => {
            let list = arg(w, 1, "cipher list")?;
            no_extra(w, 2)?;
            let tls13 = kw.ends_with("ciphersuites");
            crate::tls::check_cipher_list(kw, list, tls13)?;
            let side = if kw.starts_with("ssl-default-bind") {
                &mut g.tls.bind
            } else {
                &mut g.tls.server
            };
            let v = Some(list.to_string());
            if tls13 {
                side.ciphersuites = v;
            } else {
                side.ciphers = v;
            }
        }
        "ssl-default-bind-curves" => {
            let list = arg(w, 1, "curve list")?;
            no_extra(w, 2)?;
            crate::tls::check_curves(kw, list)?;
            g.tls.bind.curves = Some(list.to_string());
        }
        "ssl-default-bind-options" => {
            crate::tls::parse_default_options(kw, &mut g.tls.bind, &w[1..], true)?
        }
        "ssl-default-server-options" => {
            crate::tls::parse_default_options(kw, &mut g.tls.server, &w[1..], false)?
        }
        "ssl-server-verify" => {
            g.tls.server_verify_none = match arg(w, 1, "'none' or 'required'")? {
                "none" => true,
                "required" => false,
                x => return Err(format!("expected 'none' or 'required', got '{x}'").into()),
            };
            no_extra(w, 2)?;
        }
        "nbproc" => {
            return Err(KwErr::Full(
                "keyword 'nbproc' in 'global' section: nbproc is not supported (sluice uses \
                 threads; see 'nbthread')"
                    .into(),
            ));
        }
        _ => return Err(KwErr::Full(unknown(kw))),
    }
    Ok(())
}

/// `uid`/`user` or `gid`/`group`: a second one wins, with a warning (HAProxy: "Continuing.").
fn set_id(slot: &mut Option<u32>, v: u32, kw: &str) {
    if let Some(prev) = slot.replace(v) {
        let what = if matches!(kw, "uid" | "user") {
            "user/uid"
        } else {
            "gid/group"
        };
        crate::config::warn(format!(
            "'{kw}': {what} already specified (was {prev}, now {v})"
        ));
    }
}

fn unknown(kw: &str) -> String {
    let unsupported = format!("keyword '{kw}' in 'global' section is not supported by sluice");
    if UNSUPPORTED.contains(&kw) {
        return unsupported;
    }
    let hint = did_you_mean(kw, KEYWORDS.iter().copied());
    if hint.is_empty() && UNSUPPORTED_PREFIXES.iter().any(|p| kw.starts_with(p)) {
        return unsupported;
    }
    format!("unknown keyword '{kw}' in 'global' section{hint}")
}

/// `stats socket ADDR [level user|operator|admin] [mode OCTAL]` and `stats timeout T`.
fn stats(g: &mut Global, l: &Line) -> Result<(), KwErr> {
    use crate::config::{BindAddr, CliLevel, Origin, StatsSocket};
    let w = &l.words;
    match w.get(1).map(String::as_str) {
        Some("socket") => {
            let a = arg(w, 2, "socket address (path or IP:PORT)")?;
            let mut addrs = super::server::bind_addr(a)?;
            if addrs.len() != 1 {
                return Err(format!("'{a}': a stats socket takes one address, not a range").into());
            }
            let addr = addrs.remove(0);
            let mut sock = StatsSocket {
                addr,
                origin: Origin {
                    file: l.file.clone(),
                    line: l.line,
                },
                level: CliLevel::Operator,
                mode: None,
                uid: None,
                gid: None,
                expose_fd: false,
            };
            let mut i = 3;
            while i < w.len() {
                match w[i].as_str() {
                    "level" => {
                        sock.level = match arg(w, i + 1, "level")? {
                            "user" => CliLevel::User,
                            "operator" => CliLevel::Operator,
                            "admin" => CliLevel::Admin,
                            x => {
                                return Err(format!(
                                    "'level' only supports 'user', 'operator', and 'admin' (got '{x}')"
                                )
                                .into());
                            }
                        };
                    }
                    "mode" => {
                        let m = arg(w, i + 1, "octal mode")?;
                        let v = u32::from_str_radix(m, 8)
                            .ok()
                            .filter(|v| *v <= 0o7777)
                            .ok_or_else(|| format!("'mode' expects an octal mode, got '{m}'"))?;
                        if !matches!(sock.addr, BindAddr::Unix(_)) {
                            // HAProxy ignores it there too (a common Docker default).
                            super::warn(
                                "'mode' is ignored on a stats socket that is not a UNIX \
                                 socket path"
                                    .to_string(),
                            );
                        } else {
                            sock.mode = Some(v);
                        }
                    }
                    "expose-fd" => {
                        match arg(w, i + 1, "what to expose ('listeners')")? {
                            "listeners" => {}
                            x => {
                                return Err(format!(
                                    "'expose-fd' only supports 'listeners' (got '{x}')"
                                )
                                .into());
                            }
                        }
                        if !matches!(
                            sock.addr,
                            BindAddr::Unix(_) | BindAddr::Abns(_) | BindAddr::Fd(_)
                        ) {
                            // Accepted and ignored, as HAProxy does: descriptors cannot
                            // travel over TCP.
                            super::warn(
                                "'expose-fd listeners' is ignored on a TCP stats socket \
                                 (descriptors only travel over UNIX sockets)"
                                    .to_string(),
                            );
                        } else {
                            sock.expose_fd = true;
                        }
                    }
                    o @ ("uid" | "gid" | "user" | "group") => {
                        let (is_uid, id) =
                            owner(o, arg(w, i + 1, &format!("a value after '{o}'"))?)?;
                        if !matches!(sock.addr, BindAddr::Unix(_)) {
                            // Ignored there, as in HAProxy.
                            super::warn(format!(
                                "'{o}' is ignored on a stats socket that is not a UNIX \
                                 socket path"
                            ));
                            i += 2;
                            continue;
                        }
                        if is_uid {
                            sock.uid = Some(id);
                        } else {
                            sock.gid = Some(id);
                        }
                    }
                    x => {
                        return Err(format!(
                            "'stats socket' option '{x}' is not supported by sluice (supported: \
                             'level', 'mode', 'user', 'uid', 'group', 'gid', 'expose-fd \
                             listeners')"
                        )
                        .into());
                    }
                }
                i += 2;
            }
            g.stats_sockets.push(sock);
        }
        Some("timeout") => {
            g.stats_timeout = parse_time(arg(w, 2, "timeout")?)?;
            no_extra(w, 3)?;
        }
        Some(x) => {
            return Err(KwErr::Full(format!(
                "keyword 'stats {x}' in 'global' section is not supported by sluice (supported: \
                 'stats socket', 'stats timeout')"
            )));
        }
        None => {
            return Err("expects 'socket' or 'timeout'".to_string().into());
        }
    }
    Ok(())
}

/// `cpu-map [auto:]THREADS CPUS...` with THREADS one of `N`, `N-M`, lists of those, `all`,
/// `odd`, `even`, each optionally after `1/` or `all/` (the only process/group there is).
fn cpu_map(g: &mut Global, gx: &mut GlobalExtra, w: &[String]) -> Result<(), String> {
    let sel = arg(w, 1, "thread set")?;
    let (auto, sel) = match sel.strip_prefix("auto:") {
        Some(s) => (true, s),
        None => (false, sel),
    };
    let threads = match sel.split_once('/') {
        Some((group, t)) => {
            if group != "1" && group != "all" {
                return Err(format!(
                    "'{group}/': only process/group '1' (or 'all') exists, sluice runs one \
                     process"
                ));
            }
            t
        }
        None => sel,
    };
    if w.len() < 3 {
        return Err("missing CPU set".into());
    }
    let mut cpus = Vec::new();
    for word in &w[2..] {
        cpus.extend(parse_set(word, 0, 4095, "CPU")?);
    }
    cpus.sort_unstable();
    cpus.dedup();
    let deferred = match threads {
        "all" => Some(ThreadSel::All),
        "odd" => Some(ThreadSel::Odd),
        "even" => Some(ThreadSel::Even),
        _ => None,
    };
    let mut tlist = Vec::new();
    if deferred.is_none() {
        tlist = parse_set(threads, 1, 1024, "thread")?;
        tlist.sort_unstable();
        tlist.dedup();
        if auto && tlist.len() != cpus.len() {
            return Err(format!(
                "with 'auto:', the thread set ({} threads) and the CPU set ({} CPUs) must have \
                 the same size",
                tlist.len(),
                cpus.len()
            ));
        }
    }
    if let Some(s) = deferred {
        gx.cpu_sets.push((g.cpu_map.len(), s));
    }
    g.cpu_map.push(CpuMap {
        threads: tlist,
        cpus,
        auto,
    });
    Ok(())
}

/// `N`, `N-M`, or a comma-separated list of those, each within `min..=max`.
fn parse_set(s: &str, min: u64, max: u64, what: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let bad = |e: String| format!("invalid {what} set '{s}': {e}");
        let a = parse_range(a, min, max).map_err(bad)?;
        let b = parse_range(b, min, max).map_err(bad)?;
        if a > b {
            return Err(format!("invalid {what} range '{part}' (start > end)"));
        }
        out.extend((a..=b).map(|n| n as usize));
    }
    Ok(out)
}

/// Checks that need the whole global section, and `cpu-map all|odd|even` expansion.
/// `unix-bind [prefix P] [mode M] [user U] [uid N] [group G] [gid N]`.
/// `uid N`, `gid N`, `user NAME` or `group NAME` of a UNIX socket: (is a user id, the id).
fn owner(opt: &str, v: &str) -> Result<(bool, u32), String> {
    Ok(match opt {
        "uid" => (true, parse_u32(v)?),
        "gid" => (false, parse_u32(v)?),
        "user" => match nix::unistd::User::from_name(v) {
            Ok(Some(x)) => (true, x.uid.as_raw()),
            _ => return Err(format!("cannot find user id for '{v}'")),
        },
        _ => match nix::unistd::Group::from_name(v) {
            Ok(Some(x)) => (false, x.gid.as_raw()),
            _ => return Err(format!("cannot find group id for '{v}'")),
        },
    })
}

fn unix_bind(g: &mut Global, w: &[String]) -> Result<(), String> {
    let u = &mut g.unix_bind;
    if w.len() < 2 {
        return Err("expects 'prefix', 'mode', 'user', 'uid', 'group' or 'gid'".into());
    }
    let mut i = 1;
    while i < w.len() {
        let opt = w[i].as_str();
        let v = arg(w, i + 1, &format!("a value after '{opt}'"))?;
        match opt {
            "prefix" => u.prefix = Some(v.to_string()),
            "mode" => {
                u.mode = Some(
                    u32::from_str_radix(v, 8)
                        .ok()
                        .filter(|m| *m <= 0o7777)
                        .ok_or_else(|| format!("'mode {v}' is not an octal file mode"))?,
                );
            }
            "uid" | "gid" | "user" | "group" => {
                let (is_uid, id) = owner(opt, v)?;
                if is_uid {
                    u.uid = Some(id);
                } else {
                    u.gid = Some(id);
                }
            }
            o => {
                return Err(format!(
                    "unknown option '{o}' (expected 'prefix', 'mode', 'user', 'uid', 'group' or \
                     'gid'){}",
                    did_you_mean(o, ["prefix", "mode", "user", "uid", "group", "gid"])
                ));
            }
        }
        i += 2;
    }
    Ok(())
}

pub(super) fn finish(g: &mut Global, gx: &GlobalExtra) {
    // As in HAProxy, `tune.maxrewrite` (set or default) is "automatically readjusted to half
    // of bufsize if it is larger than that", whatever the order of the two keywords.
    if g.maxrewrite >= g.bufsize / 2 {
        g.maxrewrite = g.bufsize / 2;
    }
    let n = g.nbthread.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .min(1024)
    });
    for &(i, sel) in &gx.cpu_sets {
        let m = &mut g.cpu_map[i];
        m.threads = (1..=n)
            .filter(|t| match sel {
                ThreadSel::All => true,
                ThreadSel::Odd => t % 2 == 1,
                ThreadSel::Even => t % 2 == 0,
            })
            .collect();
        if m.auto {
            // Threads beyond the CPU list keep no binding of their own.
            m.threads.truncate(m.cpus.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Line {
        Line {
            file: "t.cfg".into(),
            line: 1,
            words: s.split_whitespace().map(String::from).collect(),
            warnings: Vec::new(),
        }
    }

    fn run(lines: &[&str]) -> (Global, Vec<String>) {
        let mut g = Global::default();
        let mut gx = GlobalExtra::default();
        let mut errs = Vec::new();
        for l in lines {
            match keyword(&mut g, &mut gx, &line(l)) {
                Ok(()) => {}
                Err(KwErr::Reason(r)) => errs.push(r),
                Err(KwErr::Full(m)) => errs.push(m),
            }
        }
        finish(&mut g, &gx);
        (g, errs)
    }

    #[test]
    fn cpu_maps() {
        let (g, e) = run(&[
            "nbthread 4",
            "cpu-map 1/1-4 0-3",
            "cpu-map auto:1/1-2 4 5",
            "cpu-map all 0-1",
            "cpu-map odd 2,3",
            "cpu-map 3 7",
        ]);
        assert!(e.is_empty(), "{e:?}");
        let m = &g.cpu_map;
        assert_eq!(
            (m[0].threads.clone(), m[0].cpus.clone(), m[0].auto),
            (vec![1, 2, 3, 4], vec![0, 1, 2, 3], false)
        );
        assert_eq!(
            (m[1].threads.clone(), m[1].cpus.clone(), m[1].auto),
            (vec![1, 2], vec![4, 5], true)
        );
        assert_eq!(m[2].threads, vec![1, 2, 3, 4]);
        assert_eq!(m[3].threads, vec![1, 3]);
        assert_eq!(m[3].cpus, vec![2, 3]);
        assert_eq!(
            (m[4].threads.clone(), m[4].cpus.clone()),
            (vec![3], vec![7])
        );
    }

    #[test]
    fn errors() {
        let (_, e) = run(&[
            "cpu-map 2/1 0",
            "cpu-map auto:1-3 0-1",
            "cpu-map 4-1 0",
            "nbthread 0",
            "nbthread 1025",
            "tune.bufsize 512",
            "tune.idle-pool.shared maybe",
            "key-base /var/empty",
            "maxzlibmem 10",
            "maxcon 10",
            "nbproc 2",
        ]);
        assert_eq!(e.len(), 11, "{e:?}");
        assert!(e[7].contains("'key-base' in 'global' section is not supported by sluice"));
        assert!(e[8].contains("not supported by sluice"));
        assert_eq!(
            e[9],
            "unknown keyword 'maxcon' in 'global' section (did you mean 'maxconn'?)"
        );
        // Readjusted to half of bufsize, as HAProxy documents (not an error).
        let (g, e) = run(&["tune.bufsize 4096", "tune.maxrewrite 2048"]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(g.maxrewrite, 2048);
    }

    #[test]
    fn tls_session_tuning_and_hints() {
        let _ = crate::config::take_warnings();
        let (g, e) = run(&[
            "tune.ssl.cachesize 500",
            "tune.ssl.lifetime 2m",
            "set-dumpable",
            "maxpipes 1000",
            "tune.ssl.capture-cipherlist-size 2048",
        ]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(g.tls.session_cache, Some(500));
        assert_eq!(g.tls.session_lifetime, Some(120));
        assert!(g.set_dumpable);
        let w = crate::config::take_warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("'maxpipes' has no effect in sluice"), "{w:?}");
        assert!(
            w[1].contains("'tune.ssl.capture-cipherlist-size' has no effect"),
            "{w:?}"
        );
        // Seconds unless a unit is given, as in HAProxy.
        let (g, e) = run(&["tune.ssl.lifetime 600", "tune.ssl.cachesize 0"]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            (g.tls.session_lifetime, g.tls.session_cache),
            (Some(600), Some(0))
        );
        let (_, e) = run(&[
            "tune.ssl.lifetime soon",
            "tune.ssl.cachesize -1",
            "set-dumpable x",
            "tune.ssl.cachesize 4000000000",
        ]);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[3].contains("out of range"), "{e:?}");
    }

    #[test]
    fn identity_and_tls_defaults() {
        let (g, e) = run(&[
            "chroot /var/empty",
            "uid 100",
            "gid 200",
            "user root",
            "group root",
            "crt-base /etc/ssl/private",
            "ca-base /etc/ssl/certs/",
            "ssl-default-bind-ciphers ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256",
            "ssl-default-bind-options no-sslv3 no-tlsv10 ssl-max-ver TLSv1.2 prefer-client-ciphers",
            "ssl-default-server-ciphersuites TLS_AES_128_GCM_SHA256",
            "ssl-default-server-options force-tlsv13 no-tls-tickets",
            "ssl-server-verify none",
        ]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            g.chroot.as_deref(),
            Some(std::path::Path::new("/var/empty"))
        );
        // `user`/`group` after `uid`/`gid`: the later one wins (with a warning).
        assert_eq!((g.uid, g.gid), (Some(0), Some(0)));
        let w = crate::config::take_warnings();
        assert!(
            w.iter()
                .any(|m| m.contains("user/uid already specified (was 100, now 0)")),
            "{w:?}"
        );
        let t = &g.tls;
        assert_eq!(t.crt_base.as_deref(), Some("/etc/ssl/private"));
        assert_eq!(
            t.bind.ciphers.as_deref(),
            Some("ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256")
        );
        assert_eq!(t.bind.max, Some(rustls::ProtocolVersion::TLSv1_2));
        assert!(t.bind.prefer_client && !t.bind.no_tickets);
        assert_eq!(
            t.server.ciphersuites.as_deref(),
            Some("TLS_AES_128_GCM_SHA256")
        );
        assert_eq!(
            (t.server.min, t.server.max),
            (
                Some(rustls::ProtocolVersion::TLSv1_3),
                Some(rustls::ProtocolVersion::TLSv1_3)
            )
        );
        assert!(t.server.no_tickets && t.server_verify_none);
        assert!(
            w.iter()
                .any(|m| m.contains("DHE-RSA-AES128-GCM-SHA256 not implemented by rustls")),
            "{w:?}"
        );
    }

    #[test]
    fn server_state_paths() {
        let (g, e) = run(&[
            "server-state-base /var/state/haproxy",
            "server-state-file /etc/haproxy/haproxy.state",
        ]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            g.server_state_file.as_deref(),
            Some("/etc/haproxy/haproxy.state")
        );
        assert_eq!(g.server_state_base.as_deref(), Some("/var/state/haproxy"));
        let (_, e) = run(&["server-state-file"]);
        assert!(e[0].contains("path"), "{e:?}");
    }

    #[test]
    fn stats_keywords() {
        use crate::config::{BindAddr, CliLevel};
        let (g, e) = run(&[
            "stats socket /run/s.sock mode 600 level admin",
            "stats socket 127.0.0.1:9999 level user",
            "stats socket unix@/run/t.sock",
            "stats timeout 1m",
        ]);
        assert!(e.is_empty(), "{e:?}");
        let s = &g.stats_sockets;
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].addr, BindAddr::Unix("/run/s.sock".into()));
        assert_eq!((s[0].level, s[0].mode), (CliLevel::Admin, Some(0o600)));
        assert_eq!(s[1].level, CliLevel::User);
        assert_eq!(s[2].level, CliLevel::Operator);
        assert_eq!(g.stats_timeout, std::time::Duration::from_secs(60));
        let (_, e) = run(&[
            "stats socket /x level root",
            "stats socket /x mode 999",
            "stats socket 127.0.0.1:1 mode 600",
            "stats socket /x expose-fd sessions",
            "stats socket 127.0.0.1:2 expose-fd listeners",
            "stats maxconn 10",
            "stats",
        ]);
        // `mode` and `expose-fd` on a TCP socket are ignored (with a warning), as in HAProxy.
        assert_eq!(e.len(), 5, "{e:?}");
        assert!(e[2].contains("only supports 'listeners'"), "{e:?}");
        assert!(e[3].contains("'stats maxconn' in 'global' section is not supported"));
        let (g, e) = run(&["stats socket /x level admin expose-fd listeners"]);
        assert!(e.is_empty(), "{e:?}");
        assert!(g.stats_sockets[0].expose_fd);
        // Owner and group, by name or by id (root is 0 on every system).
        let (g, e) = run(&["stats socket /x user root gid 0 mode 660"]);
        assert!(e.is_empty(), "{e:?}");
        let s = &g.stats_sockets[0];
        assert_eq!((s.uid, s.gid, s.mode), (Some(0), Some(0), Some(0o660)));
        let (g, e) = run(&[
            "stats socket /x user no-such-user-here",
            "stats socket 127.0.0.1:3 uid 0",
        ]);
        assert!(
            e[0].contains("cannot find user id for 'no-such-user-here'"),
            "{e:?}"
        );
        assert_eq!(e.len(), 1, "'uid' on a TCP socket is ignored: {e:?}");
        assert_eq!(g.stats_sockets.last().map(|s| s.uid), Some(None));
    }

    #[test]
    fn socket_buffers_and_ignored_tls_parameters() {
        let (g, e) = run(&[
            "tune.rcvbuf.client 64k",
            "tune.sndbuf.client 32768",
            "tune.rcvbuf.server 1m",
            "tune.sndbuf.server 4096",
            "ssl-dh-param-file /dev/null",
        ]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            (
                g.rcvbuf_client,
                g.sndbuf_client,
                g.rcvbuf_server,
                g.sndbuf_server
            ),
            (Some(65536), Some(32768), Some(1 << 20), Some(4096))
        );
        assert!(
            super::super::take_warnings()
                .iter()
                .any(|w| w.contains("'ssl-dh-param-file' has no effect"))
        );
        let (_, e) = run(&["tune.rcvbuf.client 0", "ssl-dh-param-file /no/such/dh.pem"]);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[1].contains("cannot read '/no/such/dh.pem'"), "{e:?}");
    }

    #[test]
    fn values() {
        let (g, e) = run(&[
            "tune.bufsize 32k",
            "tune.maxrewrite 2048",
            "tune.maxaccept -1",
            "tune.idle-pool.shared off",
            "hard-stop-after 30s",
            "maxconn 5000",
            "pidfile /run/s.pid",
            "daemon",
        ]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            (g.bufsize, g.maxrewrite, g.maxaccept),
            (32768, 2048, u32::MAX)
        );
        assert!(!g.idle_pool_shared);
        assert_eq!(g.hard_stop_after, Some(std::time::Duration::from_secs(30)));
        assert_eq!(g.maxconn, Some(5000));
        let (g, _) = run(&["tune.bufsize 1024"]);
        assert_eq!(g.maxrewrite, 512);
    }
}
