//! `bind`, `server` and `default-server`.

use super::super::{Bind, BindAddr, Origin, Server};
use super::proxy::{Draft, ServerOpts};
use super::values::{
    Family, arg, parse_port, parse_range, parse_time, parse_u32, resolve_host, split_host_port,
    strip_family,
};
use super::{KwErr, did_you_mean};
use crate::config::tokenizer::Line;

const BIND_OPTIONS: &[&str] = &[
    "allow-0rtt",
    "name",
    "maxconn",
    "backlog",
    "defer-accept",
    "interface",
    "v4v6",
    "v6only",
    "proto",
];

/// Real HAProxy bind options that sluice does not implement.
const BIND_UNSUPPORTED: &[&str] = &[
    "ca-ignore-err",
    "ca-sign-file",
    "ca-sign-pass",
    "ca-verify-file",
    "crt-ignore-err",
    "npn",
    "accept-netscaler-cip",
    "transparent",
    "mss",
    "namespace",
    "process",
    "thread",
    "shards",
    "nice",
    "id",
    "user",
    "group",
    "uid",
    "gid",
    "mode",
    "level",
    "severity-output",
    "expose-fd",
    "sigalgs",
    "client-sigalgs",
    "no-ca-names",
    "force-sslv3",
    "force-tlsv10",
    "force-tlsv11",
    "generate-certificates",
    "tcp-ut",
    "quic-cc-algo",
    "quic-force-retry",
    "label",
];

const SERVER_OPTIONS: &[&str] = &[
    "cookie",
    "minconn",
    "init-addr",
    "weight",
    "maxconn",
    "maxqueue",
    "backup",
    "no-backup",
    "disabled",
    "enabled",
    "id",
    "pool-max-conn",
    "pool-purge-delay",
    "pool-low-conn",
    "pool-conn-name",
    "check-pool-conn-name",
    "max-reuse",
    "send-proxy",
    "send-proxy-v2",
    "proto",
    "no-send-proxy",
    "no-send-proxy-v2",
    "source",
    "resolvers",
    "resolve-prefer",
    "resolve-net",
    "resolve-opts",
];

/// Real HAProxy server options that sluice does not implement.
const SERVER_UNSUPPORTED: &[&str] = &[
    "send-proxy-v2-ssl",
    "send-proxy-v2-ssl-cn",
    "proxy-v2-options",
    "redir",
    "usesrc",
    "npn",
    "force-sslv3",
    "force-tlsv10",
    "force-tlsv11",
    "ssl-reuse",
    "no-ssl-reuse",
    "tfo",
    "namespace",
    "socks4",
    "tcp-ut",
    "ws",
    "allow-0rtt",
    "curves",
    "sigalgs",
    "client-sigalgs",
    "shard",
    "log-proto",
    "non-stick",
    "stick",
    "set-proxy-v2-tlv-fmt",
];

fn origin(l: &Line) -> Origin {
    Origin {
        file: l.file.clone(),
        line: l.line,
    }
}

/// `bind ADDR[,ADDR...] [options]`: one [`Bind`] per address (and per port of a range).
pub(super) fn bind(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let spec = arg(w, 1, "address")?;
    let mut addrs = Vec::new();
    for a in spec.split(',') {
        addrs.extend(bind_addr(a)?);
    }
    let mut proto = Bind {
        addr: BindAddr::Fd(-1),
        origin: origin(l),
        name: None,
        maxconn: None,
        backlog: None,
        defer_accept: false,
        tfo: false,
        accept_proxy: false,
        label: "".into(),
        v4v6: false,
        v6only: false,
        interface: None,
        proto: Default::default(),
        ssl: None,
    };
    let mut tls = crate::tls::BindTlsOpts::default();
    let mut i = 2;
    while i < w.len() {
        let opt = w[i].as_str();
        match opt {
            "name" => {
                proto.name = Some(arg(w, i + 1, "name after 'name'")?.to_string());
                i += 1;
            }
            "maxconn" => {
                proto.maxconn = Some(parse_u32(arg(w, i + 1, "number after 'maxconn'")?)?);
                i += 1;
            }
            "backlog" => {
                proto.backlog = Some(parse_u32(arg(w, i + 1, "number after 'backlog'")?)?);
                i += 1;
            }
            "defer-accept" => proto.defer_accept = true,
            "tfo" => proto.tfo = true,
            "accept-proxy" => proto.accept_proxy = true,
            "interface" => {
                proto.interface = Some(arg(w, i + 1, "name after 'interface'")?.to_string());
                i += 1;
            }
            "proto" => {
                use crate::stream::http2::BindProto;
                let v = arg(w, i + 1, "protocol name after 'proto'")?;
                proto.proto = match v {
                    "h1" => BindProto::H1,
                    "h2" => BindProto::H2,
                    "quic" | "none" | "fcgi" => {
                        return Err(format!(
                            "'proto {v}' is not supported by sluice (only 'h1' and 'h2')"
                        )
                        .into());
                    }
                    _ => {
                        return Err(format!(
                            "unknown protocol '{v}' after 'proto' (expected 'h1' or 'h2')"
                        )
                        .into());
                    }
                };
                i += 1;
            }
            "v4v6" => proto.v4v6 = true,
            "v6only" => proto.v6only = true,
            // Early data is an optimisation a client cannot count on: without it, a client
            // that offers 0-RTT does a full handshake and sends its request after it.
            "allow-0rtt" => super::warn(
                "bind option 'allow-0rtt' has no effect in sluice: TLS 1.3 early data is not \
                 accepted, clients send their first request after the handshake"
                    .to_string(),
            ),
            _ if crate::tls::BIND_TLS_OPTIONS.contains(&opt) => {
                if let Some(r) = crate::tls::parse_bind_opt(&mut tls, w, &mut i) {
                    r?;
                }
            }
            _ if BIND_UNSUPPORTED.contains(&opt) => {
                return Err(format!("bind option '{opt}' is not supported by sluice").into());
            }
            _ => {
                return Err(format!(
                    "unknown bind option '{opt}'{}",
                    did_you_mean(
                        opt,
                        BIND_OPTIONS
                            .iter()
                            .chain(crate::tls::BIND_TLS_OPTIONS)
                            .copied()
                    )
                )
                .into());
            }
        }
        i += 1;
    }
    if proto.v4v6 && proto.v6only {
        return Err("'v4v6' and 'v6only' cannot be used together"
            .to_string()
            .into());
    }
    let label = proto
        .name
        .clone()
        .unwrap_or_else(|| (d.p.binds.len() + 1).to_string());
    if tls.ssl {
        tls.apply_defaults(&d.tls_defaults);
    }
    proto.label = label.as_str().into();
    proto.ssl = tls.build(label)?;
    if proto.accept_proxy
        && addrs
            .iter()
            .any(|a| matches!(a, BindAddr::Unix(_) | BindAddr::Abns(_)))
    {
        return Err(
            "'accept-proxy' on a UNIX socket is not supported by sluice (TCP binds only)"
                .to_string()
                .into(),
        );
    }
    for a in addrs {
        d.p.binds.push(Bind {
            addr: a,
            ..proto.clone()
        });
    }
    Ok(())
}

/// One bind address: `IP:PORT`, `*:PORT`, `:PORT`, `[V6]:PORT`, `:::PORT`, port ranges
/// `:8000-8002`, `ipv4@`/`ipv6@` prefixes, `unix@PATH` or `/path`, `fd@N`.
pub(super) fn bind_addr(a: &str) -> Result<Vec<BindAddr>, String> {
    if a.is_empty() {
        return Err("empty bind address".into());
    }
    if let Some(n) = a.strip_prefix("fd@") {
        let fd = parse_range(n, 0, i32::MAX as u64).map_err(|e| format!("'{a}': {e}"))?;
        return Ok(vec![BindAddr::Fd(fd as i32)]);
    }
    let unix = a
        .strip_prefix("unix@")
        .or_else(|| a.strip_prefix("uxst@"))
        .or_else(|| a.starts_with('/').then_some(a));
    if let Some(p) = unix {
        if p.is_empty() {
            return Err(format!("missing socket path in '{a}'"));
        }
        return Ok(vec![BindAddr::Unix(p.into())]);
    }
    if let Some(n) = a.strip_prefix("abns@") {
        if n.is_empty() || n.len() > 107 {
            return Err(format!(
                "bind address '{a}': an abstract socket name of 1 to 107 bytes is expected"
            ));
        }
        return Ok(vec![BindAddr::Abns(n.to_string())]);
    }
    for unsupported in [
        "sockpair@",
        "udp@",
        "udp4@",
        "udp6@",
        "quic4@",
        "quic6@",
        "uxdg@",
    ] {
        if a.starts_with(unsupported) {
            return Err(format!(
                "bind address '{a}': '{unsupported}' addresses are not supported by sluice"
            ));
        }
    }
    let (family, rest) = strip_family(a, false);
    let (host, ports) = split_host_port(rest)?;
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return Err(format!("port is required in bind address '{a}'"));
    };
    let (lo, hi) = match ports.split_once('-') {
        Some((x, y)) => (parse_port(x, a)?, parse_port(y, a)?),
        None => {
            let p = parse_port(ports, a)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err(format!(
            "invalid port range '{ports}' in '{a}' (start > end)"
        ));
    }
    let first = resolve_host(host, lo, family)?;
    Ok((lo..=hi)
        .map(|p| {
            let mut s = first;
            s.set_port(p);
            BindAddr::Tcp(s)
        })
        .collect())
}

/// Parses server options from `words` into `o` (and `id` for real servers).
fn server_opts(
    words: &[String],
    o: &mut ServerOpts,
    mut id: Option<&mut Option<u32>>,
) -> Result<(), String> {
    let mut i = 0;
    while i < words.len() {
        let opt = words[i].as_str();
        let val = |what: &str| arg(words, i + 1, &format!("{what} after '{opt}'"));
        match opt {
            "weight" => {
                o.weight =
                    parse_range(val("weight")?, 0, 256).map_err(|e| format!("weight {e}"))? as u32;
                i += 1;
            }
            "maxconn" => {
                o.maxconn = parse_u32(val("number")?)?;
                i += 1;
            }
            "maxqueue" => {
                o.maxqueue = parse_u32(val("number")?)?;
                i += 1;
            }
            // HAProxy's -1 means unlimited for both.
            "pool-max-conn" => {
                let v = val("number")?;
                o.pool_max_conn = if v == "-1" { None } else { Some(parse_u32(v)?) };
                i += 1;
            }
            "cookie" => {
                let v = val("value")?;
                if let Some(c) = v
                    .bytes()
                    .find(|&c| c.is_ascii_control() || b" ;,\"\\".contains(&c))
                {
                    return Err(format!(
                        "'cookie': character '{}' is not permitted in a cookie value",
                        c.escape_ascii()
                    ));
                }
                o.cookie = Some(v.to_string());
                i += 1;
            }
            "minconn" => {
                o.minconn = Some(parse_u32(val("number")?)?);
                i += 1;
            }
            "init-addr" => {
                o.init_addr = Some(init_addr(val("methods")?)?);
                i += 1;
            }
            "resolvers" => {
                o.resolvers = Some(val("resolvers section name")?.to_string());
                i += 1;
            }
            "resolve-prefer" => {
                o.resolve_prefer_v4 = match val("family")? {
                    "ipv4" => true,
                    "ipv6" => false,
                    f => {
                        return Err(format!(
                            "'resolve-prefer' expects 'ipv4' or 'ipv6' (got '{f}')"
                        ));
                    }
                };
                i += 1;
            }
            "resolve-net" => {
                o.resolve_nets = val("networks")?
                    .split(',')
                    .map(crate::config::acl::parse_ipnet)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("'resolve-net': {e}"))?;
                i += 1;
            }
            "resolve-opts" => {
                for opt in val("options")?.split(',') {
                    match opt {
                        "allow-dup-ip" => o.allow_dup_ip = true,
                        "prevent-dup-ip" => o.allow_dup_ip = false,
                        "ignore-weight" => o.ignore_weight = true,
                        x => {
                            return Err(format!(
                                "'resolve-opts': unknown option '{x}' (allow-dup-ip, \
                                 prevent-dup-ip, ignore-weight)"
                            ));
                        }
                    }
                }
                i += 1;
            }
            "max-reuse" => {
                let v = val("number")?;
                o.max_reuse = if v == "-1" { None } else { Some(parse_u32(v)?) };
                i += 1;
            }
            "pool-conn-name" | "check-pool-conn-name" => {
                let e = crate::config::NameExpr::parse(val("expression")?)?;
                if opt == "pool-conn-name" {
                    o.pool_conn_name = Some(e);
                } else {
                    o.check_pool_conn_name = Some(e);
                }
                i += 1;
            }
            "pool-low-conn" => {
                o.pool_low_conn = parse_u32(val("number")?)?;
                i += 1;
            }
            "send-proxy" => o.send_proxy = Some(crate::send_proxy::Version::V1),
            "send-proxy-v2" => o.send_proxy = Some(crate::send_proxy::Version::V2),
            "no-send-proxy" | "no-send-proxy-v2" => o.send_proxy = None,
            "proto" => {
                let v = arg(words, i + 1, "protocol name after 'proto'")?;
                o.proto_h2 = Some(match v {
                    "h1" => false,
                    "h2" => true,
                    "fcgi" | "none" | "quic" => {
                        return Err(format!(
                            "'proto {v}' is not supported by sluice (only 'h1' and 'h2')"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "unknown protocol '{v}' after 'proto' (expected 'h1' or 'h2')"
                        ));
                    }
                });
                i += 1;
            }
            // `source ADDR[:PORT]`: the local address of connections to the server (port 0
            // or none: any). `usesrc` and `interface` (transparent proxying) are not
            // supported and stay errors.
            "source" => {
                let (a, high) = source_range(val("address")?)?;
                o.source = Some(a);
                o.source_high = high;
                i += 1;
            }
            "pool-purge-delay" => {
                let t = parse_time(val("time")?)?;
                if t.is_zero() {
                    return Err("'pool-purge-delay' must be greater than 0".into());
                }
                o.pool_purge_delay = t;
                i += 1;
            }
            "backup" => o.backup = true,
            "no-backup" => o.backup = false,
            "disabled" => o.disabled = true,
            "enabled" => o.disabled = false,
            "id" => {
                let v = parse_range(val("id")?, 1, i32::MAX as u64)? as u32;
                match id.as_deref_mut() {
                    Some(slot) => *slot = Some(v),
                    None => {
                        return Err("server option 'id' cannot be used in 'default-server'".into());
                    }
                }
                i += 1;
            }
            _ if crate::tls::SERVER_TLS_OPTIONS.contains(&opt) => {
                let mut j = i;
                if let Some(r) = crate::tls::parse_server_opt(&mut o.tls, words, &mut j) {
                    r?;
                }
                i = j;
            }
            _ if SERVER_UNSUPPORTED.contains(&opt) => {
                return Err(format!("server option '{opt}' is not supported by sluice"));
            }
            _ => match super::checks::server_opt(words, i, &mut o.chk) {
                Some(r) => i += r?,
                None => {
                    return Err(format!(
                        "unknown server option '{opt}'{}",
                        did_you_mean(
                            opt,
                            SERVER_OPTIONS
                                .iter()
                                .chain(super::checks::SERVER_OPTIONS)
                                .chain(crate::tls::SERVER_TLS_OPTIONS)
                                .copied()
                        )
                    ));
                }
            },
        }
        i += 1;
    }
    Ok(())
}

/// `default-server [options]`: applies to the following servers of the section.
pub(super) fn default_server(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let mut o = d.default_server.clone();
    server_opts(&l.words[1..], &mut o, None)?;
    d.default_server = o;
    Ok(())
}

/// `server NAME ADDR:PORT [options]`.
pub(super) fn server(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let name = arg(w, 1, "server name")?;
    let addr = arg(w, 2, "server address")?;
    one_server(d, l, name, addr, &w[3..])
}

/// `server-template PREFIX NUM|FIRST-LAST ADDR [options]`: servers PREFIX1..PREFIXNUM (or
/// PREFIXFIRST..PREFIXLAST) with the same address and options; with `resolvers`, they share
/// the name's addresses, one each.
pub(super) fn server_template(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let prefix = arg(w, 1, "server name prefix")?;
    let range = arg(w, 2, "number of servers or range")?;
    let addr = arg(w, 3, "server address")?;
    let bad = || format!("invalid number of servers or range '{range}' (expected N or A-B)");
    let (first, last) = match range.split_once('-') {
        Some((a, b)) => (
            a.parse::<u32>().map_err(|_| bad())?,
            b.parse::<u32>().map_err(|_| bad())?,
        ),
        None => (1, range.parse::<u32>().map_err(|_| bad())?),
    };
    if first == 0 || last < first || last - first >= 10_000 {
        return Err(bad().into());
    }
    for i in first..=last {
        one_server(d, l, &format!("{prefix}{i}"), addr, &w[4..])?;
    }
    Ok(())
}

fn one_server(
    d: &mut Draft,
    l: &Line,
    name: &str,
    addr: &str,
    opts: &[String],
) -> Result<(), KwErr> {
    if let Some(prev) = d.p.servers.iter().find(|s| s.name == name) {
        return Err(format!(
            "server '{name}' is already defined at {}:{}",
            prev.origin.file, prev.origin.line
        )
        .into());
    }
    let mut o = d.default_server.clone();
    let mut id = None;
    server_opts(opts, &mut o, Some(&mut id))?;
    o.chk.validate()?;
    if let Some(id) = id
        && let Some(prev) = d.p.servers.iter().find(|s| s.id == Some(id))
    {
        return Err(format!("server id {id} is already used by server '{}'", prev.name).into());
    }
    // HAProxy's rule: a name starting with '_' ("_service._proto.name") is an SRV record
    // name. Its servers are slots that the records fill at run time (address, port and
    // weight), so they start without an address, in maintenance, whatever `init-addr` says.
    if addr.starts_with('_') {
        return srv_record_server(d, l, name, addr, &o, id);
    }
    if let Some(t) = unix_target(addr)? {
        let sv = unix_server(name, origin(l), t, &o, id, &d.tls_defaults)?;
        d.p.servers.push(sv);
        return Ok(());
    }
    let sa = server_addr(addr, o.init_addr.as_deref())?;
    let mut sv = make_server(name, origin(l), sa.addr, &o, id, &d.tls_defaults)?;
    sv.unresolved = sa.unresolved;
    sv.port_map = sa.port_map;
    // A server named by a host name follows it at run time with its resolvers (an IP
    // address has nothing to resolve, as in HAProxy).
    if let Some(section) = &o.resolvers {
        let (host, _, _, _) = server_host_port(addr)?;
        if host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_err()
        {
            crate::resolvers::query(0, host, false, 512)
                .map_err(|e| format!("server address '{addr}': {e}"))?;
            sv.resolve = Some(server_resolve(&o, section, host, false));
        }
    }
    d.p.servers.push(sv);
    Ok(())
}

/// `unix@PATH`, `uxst@PATH`, `/PATH`, `abns@NAME`: a server on a UNIX socket.
fn unix_target(a: &str) -> Result<Option<crate::config::UnixTarget>, String> {
    use crate::config::UnixTarget;
    let t = if let Some(n) = a.strip_prefix("abns@") {
        UnixTarget::Abstract(n.to_string())
    } else if let Some(p) = a
        .strip_prefix("unix@")
        .or_else(|| a.strip_prefix("uxst@"))
        .or_else(|| a.starts_with('/').then_some(a))
    {
        UnixTarget::Path(p.into())
    } else {
        return Ok(None);
    };
    match &t {
        UnixTarget::Path(p) if p.as_os_str().is_empty() => {
            Err(format!("server address '{a}': missing socket path"))
        }
        UnixTarget::Abstract(n) if n.is_empty() => Err(format!(
            "server address '{a}': missing abstract socket name"
        )),
        // sun_path holds 108 bytes, with the terminating NUL (or the leading one of abns@).
        UnixTarget::Path(p) if p.as_os_str().len() > 107 => Err(format!(
            "server address '{a}': the path is longer than a UNIX socket address holds (107 \
             bytes)"
        )),
        UnixTarget::Abstract(n) if n.len() > 107 => Err(format!(
            "server address '{a}': the name is longer than a UNIX socket address holds (107 \
             bytes)"
        )),
        _ => Ok(Some(t)),
    }
}

/// A server on a UNIX socket: what a TCP address would give (checks connect to the socket
/// too), except what needs one.
fn unix_server(
    name: &str,
    origin: Origin,
    t: crate::config::UnixTarget,
    o: &ServerOpts,
    id: Option<u32>,
    tls: &crate::tls::TlsDefaults,
) -> Result<Server, KwErr> {
    let any = std::net::SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0);
    let mut sv = make_server(name, origin, any, o, id, tls)?;
    if sv.ssl {
        return Err(format!(
            "'ssl' on a server on a UNIX socket ('{t}') is not supported by sluice"
        )
        .into());
    }
    if o.resolvers.is_some() {
        return Err(format!("'resolvers': server address '{t}' is not a host name").into());
    }
    if sv.source.is_some() {
        return Err(format!("'source' does not apply to a server on a UNIX socket ('{t}')").into());
    }
    sv.unix = Some(t);
    Ok(sv)
}

/// How a server follows DNS: `host` (an A/AAAA name, or an SRV record name) in `resolvers`
/// section `section` (its index is set once the sections are known).
fn server_resolve(
    o: &ServerOpts,
    section: &str,
    host: &str,
    srv_record: bool,
) -> crate::resolvers::ServerResolve {
    crate::resolvers::ServerResolve {
        section: usize::MAX,
        section_name: section.to_string(),
        hostname: host.to_string(),
        prefer_v4: o.resolve_prefer_v4,
        nets: o.resolve_nets.clone(),
        allow_dup_ip: o.allow_dup_ip,
        srv_record,
        ignore_weight: o.ignore_weight,
    }
}

/// A server (or template slot) named by an SRV record name (`_http._tcp.example.com`, a port
/// after it is ignored: the records give the port): it needs a resolvers section.
fn srv_record_server(
    d: &mut Draft,
    l: &Line,
    name: &str,
    addr: &str,
    o: &ServerOpts,
    id: Option<u32>,
) -> Result<(), KwErr> {
    let Some(section) = &o.resolvers else {
        return Err(format!(
            "server address '{addr}': an SRV record name ('_service._proto.name') needs \
             'resolvers' to be resolved"
        )
        .into());
    };
    let host = addr.split_once(':').map_or(addr, |(h, _)| h);
    crate::resolvers::query(0, host, false, 512)
        .map_err(|e| format!("server address '{addr}': {e}"))?;
    let any = std::net::SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0);
    let mut sv = make_server(name, origin(l), any, o, id, &d.tls_defaults)?;
    sv.unresolved = true;
    sv.resolve = Some(server_resolve(o, section, host, true));
    d.p.servers.push(sv);
    Ok(())
}

/// A server from the runtime CLI's `add server B/NAME ADDR [options]`: the same options as a
/// `server` line, but nothing inherited from `default-server` (as in HAProxy).
pub fn dynamic_server(
    name: &str,
    addr: &str,
    opts: &[String],
    tls_defaults: &crate::tls::TlsDefaults,
) -> Result<Server, String> {
    let mut o = ServerOpts::default();
    let mut id = None;
    server_opts(opts, &mut o, Some(&mut id))?;
    o.chk.validate()?;
    o.chk.validate_dynamic()?;
    if o.resolvers.is_some() {
        return Err(
            "'resolvers' is not supported by sluice on servers added at run time (declare \
             the server in the configuration)"
                .into(),
        );
    }
    let origin = Origin {
        file: "stats socket".into(),
        line: 0,
    };
    let sa = server_addr(addr, None)?;
    let mut sv = make_server(name, origin, sa.addr, &o, id, tls_defaults)?;
    sv.port_map = sa.port_map;
    Ok(sv)
}

/// A `Server` from parsed options.
fn make_server(
    name: &str,
    origin: Origin,
    addr: std::net::SocketAddr,
    o: &ServerOpts,
    id: Option<u32>,
    tls_defaults: &crate::tls::TlsDefaults,
) -> Result<Server, String> {
    let mut tls = o.tls.clone();
    tls.apply_defaults(tls_defaults);
    Ok(Server {
        name: name.to_string(),
        origin,
        addr,
        weight: o.weight,
        maxconn: o.maxconn,
        maxqueue: o.maxqueue,
        backup: o.backup,
        disabled: o.disabled,
        id,
        pool_max_conn: o.pool_max_conn,
        pool_purge_delay: o.pool_purge_delay,
        pool_low_conn: o.pool_low_conn,
        pool_conn_name: o.pool_conn_name.clone(),
        check_pool_conn_name: o.check_pool_conn_name.clone(),
        max_reuse: o.max_reuse,
        cookie: o.cookie.clone(),
        minconn: o.minconn,
        unresolved: false,
        resolve: None,
        port_map: None,
        unix: None,
        send_proxy: o.send_proxy,
        // Decided with the proxy's mode (`Draft::finish`): `Always` stands for `proto h2`
        // until then, `Never` for `proto h1`, `Alpn` for neither.
        h2: match o.proto_h2 {
            Some(true) => crate::config::ServerH2::Always,
            Some(false) => crate::config::ServerH2::Never,
            None => crate::config::ServerH2::Alpn,
        },
        source: o.source,
        source_high: o.source_high,
        check: o.chk.check_cfg(),
        health: o.chk.health_cfg(),
        // `check-ssl` on a server whose traffic is plain: the TLS settings of its line are
        // built for the checks alone (`ssl` stays off for traffic).
        tls: if o.chk.ssl == Some(true) && !tls.ssl {
            let mut t = tls.clone();
            t.ssl = true;
            t.build()?
        } else {
            tls.build()?
        },
        ssl: tls.ssl,
        tls_opts: tls,
    })
}

/// Whether the server is spoken to in HTTP/2, now that its proxy's mode is known (servers of
/// the configuration and those added at run time alike): `proto h2` always, `ssl alpn h2`
/// when TLS agrees on it, never in `mode tcp` (a TCP proxy relays bytes, whatever protocol
/// they are). The TLS offer follows: `h2` is offered for `proto h2` without `alpn`, and never
/// to a server spoken to in HTTP/1.1.
fn settle_h2(sv: &mut Server, mode: crate::config::Mode) -> Result<(), String> {
    use crate::config::{Mode, ServerH2};
    let alpn_h2 = sv
        .tls
        .as_ref()
        .is_some_and(|t| t.config.alpn_protocols.iter().any(|p| p == b"h2"));
    sv.h2 = match (mode, sv.h2) {
        (Mode::Tcp, ServerH2::Always) => {
            return Err("'proto h2' names an HTTP version, and this proxy is in 'mode tcp'".into());
        }
        (Mode::Tcp, _) => ServerH2::Never,
        (Mode::Http, ServerH2::Always) => {
            if sv.ssl
                && !alpn_h2
                && let Some(t) = &sv.tls
            {
                sv.tls = Some(t.offering_h2());
            }
            ServerH2::Always
        }
        (Mode::Http, ServerH2::Alpn) if sv.ssl && alpn_h2 => ServerH2::Alpn,
        (Mode::Http, _) => {
            if let Some(t) = &sv.tls {
                sv.tls = Some(t.http1_only());
            }
            ServerH2::Never
        }
    };
    Ok(())
}

/// What a server of proxy `p` needs once both are complete: the proxy's `source` when it has
/// none of its own; and, for a checked server, TLS settings when a
/// `connect ... ssl` rule asks for TLS on a server whose line has neither `ssl` nor
/// `check-ssl` (built from its TLS options, as `check-ssl` would), and a `check-proto` only
/// with HTTP checks.
pub fn check_needs(s: &mut Server, p: &crate::config::Proxy) -> Result<(), String> {
    use crate::config::{CheckRule, CheckType};
    // The proxy's `source`, wherever it stands in the section, for servers without their own.
    if s.source.is_none() {
        s.source = p.source;
    }
    settle_h2(s, p.mode)?;
    let Some(chk) = &s.check else {
        return Ok(());
    };
    let rules: &[CheckRule] = match p.options.check_type {
        CheckType::Connect | CheckType::External => &[],
        CheckType::Http => &p.options.http_checks,
        CheckType::Tcp => &p.options.tcp_checks,
    };
    let connects = || {
        rules.iter().filter_map(|r| match r {
            CheckRule::Connect(c) => Some(c),
            _ => None,
        })
    };
    // A mapped port depends on each client: a check needs a port of its own (HAProxy's
    // alert, with its wording).
    if s.port_map.is_some()
        && chk.port.is_none()
        && !(matches!(rules.first(), Some(CheckRule::Connect(_)))
            && connects().all(|c| c.port.is_some()))
    {
        return Err(format!(
            "server '{}' has neither service port nor check port (give the check one with \
             'port N')",
            s.name
        ));
    }
    if let Some(proto) = chk.proto
        && p.options.check_type != CheckType::Http
    {
        // HAProxy refuses an HTTP multiplexer for tcp-check and layer-4 checks alike.
        return Err(format!(
            "'check-proto {}': incompatible with the backend's check type (it needs 'option \
             httpchk'; tcp-check and connect-only checks carry no HTTP)",
            proto.name()
        ));
    }
    if s.tls.is_none() && connects().any(|c| c.ssl) {
        let mut t = s.tls_opts.clone();
        t.ssl = true;
        s.tls = t
            .build()
            .map_err(|e| format!("TLS settings for 'connect ssl' checks: {e}"))?;
    }
    Ok(())
}

/// `source ADDR[:PORT]`: an IP address, with an optional port (none or 0: any).
/// A server's `source ADDR[:PORT|:LOW-HIGH]`: the address with the first port, and the last
/// port of a range (HAProxy's port ranges for servers).
fn source_range(a: &str) -> Result<(std::net::SocketAddr, Option<u16>), String> {
    let (_, rest) = strip_family(a, false);
    let Some((_, Some(ports))) = split_host_port(rest).ok() else {
        return Ok((source_addr(a)?, None));
    };
    let Some((lo, hi)) = ports.split_once('-') else {
        return Ok((source_addr(a)?, None));
    };
    let lo_n = parse_port(lo, a)?;
    let hi_n = parse_port(hi, a)?;
    if hi_n < lo_n {
        return Err(format!(
            "'source {a}': the port range ends ({hi_n}) before it starts ({lo_n})"
        ));
    }
    let base = &a[..a.len() - ports.len()];
    Ok((source_addr(&format!("{base}{lo}"))?, Some(hi_n)))
}

pub(super) fn source_addr(a: &str) -> Result<std::net::SocketAddr, String> {
    let (family, rest) = strip_family(a, false);
    let (host, port) = split_host_port(rest)?;
    if host.is_empty() || host == "*" {
        return Err(format!("'source {a}': an address is required"));
    }
    let port = match port.filter(|p| !p.is_empty()) {
        None | Some("0") => 0,
        Some(p) => parse_port(p, a)?,
    };
    if host.parse::<std::net::IpAddr>().is_err() {
        return Err(format!("'source {a}': '{host}' is not an IP address"));
    }
    resolve_host(host, port, family)
}

/// The host, port and address family of a server address (not yet resolved), and its port
/// mapping: without a port (`10.0.0.1`), or with `+N`/`-N`, the port is the one the client
/// connected to, plus N (HAProxy's port mapping); the port returned is then 0.
fn server_host_port(a: &str) -> Result<(&str, u16, Family, Option<i32>), String> {
    for unsupported in ["unix@", "uxst@", "abns@", "/"] {
        if a.starts_with(unsupported) {
            return Err(format!(
                "server address '{a}': a UNIX socket is not supported here (only on 'server' \
                 lines of the configuration)"
            ));
        }
    }
    for unsupported in ["fd@", "sockpair@", "udp@", "quic4@", "quic6@"] {
        if a.starts_with(unsupported) {
            return Err(format!(
                "server address '{a}': only TCP (IPv4/IPv6) and UNIX socket servers are \
                 supported by sluice"
            ));
        }
    }
    let (family, rest) = strip_family(a, false);
    let (host, port) = split_host_port(rest)?;
    // As HAProxy: no host or `*` is the "any" address, which connects to the local host.
    let host = match host {
        "" | "*" if family == Family::V6 => "::",
        "" | "*" => "0.0.0.0",
        h => h,
    };
    let Some(port) = port.filter(|p| !p.is_empty()) else {
        crate::config::acl::LOCAL_ADDR_USED.store(true, std::sync::atomic::Ordering::Relaxed);
        return Ok((host, 0, family, Some(0)));
    };
    if let Some(off) = port.strip_prefix('+').or(port.strip_prefix('-')) {
        let n = off
            .parse::<u16>()
            .map_err(|_| format!("invalid port offset '{port}' in server address '{a}'"))?;
        let n = if port.starts_with('-') {
            -i32::from(n)
        } else {
            i32::from(n)
        };
        crate::config::acl::LOCAL_ADDR_USED.store(true, std::sync::atomic::Ordering::Relaxed);
        return Ok((host, 0, family, Some(n)));
    }
    if port.contains('-') {
        return Err(format!(
            "server address '{a}': port ranges are not supported by sluice"
        ));
    }
    let port = parse_port(port, a)?;
    Ok((host, port, family, None))
}

/// How a `server` line's address becomes an IP address at start-up: `init-addr` methods
/// tried in order (HAProxy's default is `last,libc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum InitAddr {
    /// The address a server-state file recorded: sluice has no such file, so it never helps.
    Last,
    /// The system resolver.
    Libc,
    /// Start without an address, in maintenance, until one is set (`set server ... addr`).
    None,
    Ip(std::net::IpAddr),
}

/// `init-addr METHOD[,METHOD...]`.
fn init_addr(v: &str) -> Result<Vec<InitAddr>, String> {
    v.split(',')
        .map(|m| match m {
            "last" => Ok(InitAddr::Last),
            "libc" => Ok(InitAddr::Libc),
            "none" => Ok(InitAddr::None),
            ip => ip.parse().map(InitAddr::Ip).map_err(|_| {
                format!(
                    "'init-addr': unknown method '{ip}' (expected 'last', 'libc', 'none' or \
                     an IP address)"
                )
            }),
        })
        .collect()
}

/// A server line's address, resolved as its `init-addr` says, and its port mapping
/// ([`server_host_port`]). The flag is set when the server starts without an address (`none`).
fn server_addr(a: &str, init: Option<&[InitAddr]>) -> Result<ServerAddr, String> {
    let (host, port, family, map) = server_host_port(a)?;
    let (sa, unresolved) = resolve_server(host, port, family, init)?;
    Ok(ServerAddr {
        addr: sa,
        unresolved,
        port_map: map,
    })
}

/// What a server line's address gives.
pub(super) struct ServerAddr {
    addr: std::net::SocketAddr,
    unresolved: bool,
    port_map: Option<i32>,
}

fn resolve_server(
    host: &str,
    port: u16,
    family: Family,
    init: Option<&[InitAddr]>,
) -> Result<(std::net::SocketAddr, bool), String> {
    let mut failure = None;
    for m in init.unwrap_or(&[InitAddr::Last, InitAddr::Libc]) {
        match m {
            InitAddr::Last => {}
            InitAddr::Libc => match resolve_host(host, port, family) {
                Ok(sa) => return Ok((sa, false)),
                Err(e) => failure = Some(e),
            },
            InitAddr::None => {
                let any = if family == Family::V6 {
                    std::net::Ipv6Addr::UNSPECIFIED.into()
                } else {
                    std::net::Ipv4Addr::UNSPECIFIED.into()
                };
                return Ok((std::net::SocketAddr::new(any, port), true));
            }
            &InitAddr::Ip(ip) => return Ok((std::net::SocketAddr::new(ip, port), false)),
        }
    }
    Err(failure.unwrap_or_else(|| {
        format!("could not resolve address '{host}': no 'init-addr' method applies")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(s: &str) -> BindAddr {
        BindAddr::Tcp(s.parse().unwrap())
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(bind_addr("1.2.3.4:80").unwrap(), vec![tcp("1.2.3.4:80")]);
        assert_eq!(bind_addr("*:80").unwrap(), vec![tcp("0.0.0.0:80")]);
        assert_eq!(bind_addr(":80").unwrap(), vec![tcp("0.0.0.0:80")]);
        assert_eq!(bind_addr("[::]:80").unwrap(), vec![tcp("[::]:80")]);
        assert_eq!(bind_addr(":::80").unwrap(), vec![tcp("[::]:80")]);
        assert_eq!(bind_addr("ipv6@:80").unwrap(), vec![tcp("[::]:80")]);
        assert_eq!(
            bind_addr("ipv4@127.0.0.1:81").unwrap(),
            vec![tcp("127.0.0.1:81")]
        );
        assert_eq!(
            bind_addr(":8000-8002").unwrap(),
            vec![
                tcp("0.0.0.0:8000"),
                tcp("0.0.0.0:8001"),
                tcp("0.0.0.0:8002")
            ]
        );
        assert_eq!(
            bind_addr("unix@/run/s.sock").unwrap(),
            vec![BindAddr::Unix("/run/s.sock".into())]
        );
        assert_eq!(
            bind_addr("/run/s.sock").unwrap(),
            vec![BindAddr::Unix("/run/s.sock".into())]
        );
        assert_eq!(bind_addr("fd@3").unwrap(), vec![BindAddr::Fd(3)]);
        assert!(
            bind_addr("1.2.3.4")
                .unwrap_err()
                .contains("port is required")
        );
        assert!(bind_addr(":8002-8000").is_err());
        assert!(bind_addr(":0").is_err());
        assert_eq!(
            bind_addr("abns@x").unwrap(),
            vec![BindAddr::Abns("x".into())]
        );
        assert!(bind_addr("abns@").is_err());
        assert!(
            bind_addr("sockpair@3")
                .unwrap_err()
                .contains("not supported")
        );
    }

    fn server_addr_t(a: &str) -> Result<std::net::SocketAddr, String> {
        server_addr(a, None).map(|sa| sa.addr)
    }

    fn addr_flag(a: &str, init: &[InitAddr]) -> Result<(std::net::SocketAddr, bool), String> {
        server_addr(a, Some(init)).map(|sa| (sa.addr, sa.unresolved))
    }

    #[test]
    fn init_addr_methods() {
        let none = [InitAddr::None];
        assert_eq!(
            addr_flag("no-such-host.invalid:80", &none),
            Ok(("0.0.0.0:80".parse().unwrap(), true))
        );
        let m = init_addr("last,libc,none").unwrap();
        assert_eq!(
            addr_flag("127.0.0.1:81", &m),
            Ok(("127.0.0.1:81".parse().unwrap(), false))
        );
        assert_eq!(
            addr_flag("no-such-host.invalid:80", &m),
            Ok(("0.0.0.0:80".parse().unwrap(), true))
        );
        let ip = init_addr("libc,10.1.2.3").unwrap();
        assert_eq!(
            addr_flag("no-such-host.invalid:80", &ip),
            Ok(("10.1.2.3:80".parse().unwrap(), false))
        );
        let e = addr_flag("no-such-host.invalid:80", &[InitAddr::Last]).unwrap_err();
        assert!(e.contains("could not resolve"), "{e}");
        assert!(
            init_addr("libc,dns")
                .unwrap_err()
                .contains("unknown method 'dns'")
        );
        // The syntax is checked whatever the method.
        assert!(
            addr_flag("10.0.0.1:x", &none)
                .unwrap_err()
                .contains("invalid port")
        );
    }

    #[test]
    fn server_addresses() {
        assert_eq!(
            server_addr_t("10.0.0.1:8080"),
            Ok("10.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(server_addr_t("[::1]:80"), Ok("[::1]:80".parse().unwrap()));
        assert_eq!(
            server_addr_t("ipv4@localhost:80"),
            Ok("127.0.0.1:80".parse().unwrap())
        );
        // HAProxy's "any" address: the local host.
        assert_eq!(server_addr_t(":80"), Ok("0.0.0.0:80".parse().unwrap()));
        assert_eq!(server_addr_t("*:80"), Ok("0.0.0.0:80".parse().unwrap()));
        assert_eq!(server_addr_t("ipv6@*:80"), Ok("[::]:80".parse().unwrap()));
        assert!(server_addr_t("unix@/x").is_err());
        // Port mapping: no port, `+N`, `-N` (the port is the client's destination port).
        let map = |a: &str| server_addr(a, None).map(|sa| (sa.addr.port(), sa.port_map));
        assert_eq!(map("10.0.0.1"), Ok((0, Some(0))));
        assert_eq!(map("10.0.0.1:+1"), Ok((0, Some(1))));
        assert_eq!(map("10.0.0.1:-1000"), Ok((0, Some(-1000))));
        assert_eq!(map("10.0.0.1:80"), Ok((80, None)));
        assert!(
            map("10.0.0.1:+x")
                .unwrap_err()
                .contains("invalid port offset")
        );
        assert!(map("10.0.0.1:80-90").unwrap_err().contains("port ranges"));
    }
}
