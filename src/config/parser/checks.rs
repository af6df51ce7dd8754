//! Health-check keywords: `option httpchk`, `http-check ...`, `tcp-check ...` (proxies), the
//! check options of `server`/`default-server` lines (`check`, `inter`, `agent-check`,
//! `observe`, `slowstart`, `track`, ...) and the cross-proxy resolution of `track`.
//!
//! Produces the plain data of `config::checks`; it must not run anything (that is `check`).

use std::time::Duration;

use super::super::{
    AgentCfg, CheckCfg, CheckProto, CheckRule, ConfigError, ConnectRule, ExpectKind, ExpectRule,
    GlobalChecks, HealthCfg, HttpChk, HttpSend, Match, MatchMethod, Observe, OnError, Proxy,
    SendData, SendRule,
};
use super::proxy::Draft;
use super::values::{arg, header_name, no_extra, parse_port, parse_range, parse_time};
use super::{KwErr, did_you_mean};
use crate::config::tokenizer::Line;

// ---------------------------------------------------------------------------------------------
// option httpchk
// ---------------------------------------------------------------------------------------------

/// `option httpchk`, `option httpchk URI`, `option httpchk METHOD URI [VERSION]`.
pub(super) fn httpchk(w: &[String]) -> Result<HttpChk, String> {
    let mut c = HttpChk {
        method: "OPTIONS".into(),
        uri: "/".into(),
        version: "HTTP/1.0".into(),
        hdrs: Vec::new(),
        body: String::new(),
    };
    match w.len() {
        0 => {}
        1 => c.uri = w[0].clone(),
        2 | 3 => {
            c.method = w[0].clone();
            c.uri = w[1].clone();
            if let Some(v) = w.get(2) {
                c.version = v.clone();
                split_old_style_headers(&mut c)?;
            }
        }
        _ => return Err(format!("'option httpchk': unexpected argument '{}'", w[3])),
    }
    check_method(&c.method).map_err(|e| format!("'option httpchk': {e}"))?;
    check_uri(&c.uri).map_err(|e| format!("'option httpchk': {e}"))?;
    check_version(&c.version).map_err(|e| format!("'option httpchk': {e}"))?;
    Ok(c)
}

/// The pre-2.2 way to send headers (and a body): appended to the version with `\r\n`
/// (`option httpchk GET / HTTP/1.1\r\nHost:\ www`). HAProxy still accepts it, turning it
/// into `http-check send hdr ...`; so does sluice, with a warning pointing there.
fn split_old_style_headers(c: &mut HttpChk) -> Result<(), String> {
    let Some(at) = c.version.find("\r\n") else {
        return Ok(());
    };
    let rest = c.version[at + 2..].to_string();
    c.version.truncate(at);
    let (head, body) = match rest.find("\r\n\r\n") {
        Some(b) => (&rest[..b], &rest[b + 4..]),
        None => (rest.strip_suffix("\r\n").unwrap_or(&rest), ""),
    };
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("'option httpchk': header line '{line}' has no ':'"))?;
        let name = header_name(name).map_err(|e| format!("'option httpchk': {e}"))?;
        c.hdrs.push((name, value.trim().to_string()));
    }
    c.body = body.to_string();
    crate::config::warn(
        "'option httpchk': headers appended to the HTTP version with '\\r\\n' are deprecated \
         (as in HAProxy); they are sent, but 'http-check send hdr NAME VALUE' is the way to \
         write them"
            .to_string(),
    );
    Ok(())
}

fn check_method(m: &str) -> Result<(), String> {
    if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(format!("invalid method '{m}'"));
    }
    Ok(())
}

fn check_uri(u: &str) -> Result<(), String> {
    if u.is_empty() || u.bytes().any(|b| b <= b' ') {
        return Err(format!("invalid URI '{u}'"));
    }
    Ok(())
}

fn check_version(v: &str) -> Result<(), String> {
    if !matches!(v, "HTTP/1.0" | "HTTP/1.1") {
        return Err(format!(
            "version '{v}' is not supported by sluice (HTTP/1.0 or HTTP/1.1)"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// http-check / tcp-check
// ---------------------------------------------------------------------------------------------

const HTTP_SUB: &[&str] = &[
    "comment",
    "connect",
    "disable-on-404",
    "expect",
    "send",
    "send-state",
];
const TCP_SUB: &[&str] = &["comment", "connect", "expect", "send", "send-binary"];
/// Real HAProxy actions of both that sluice does not implement.
const UNSUPPORTED_SUB: &[&str] = &[
    "set-var",
    "set-var-fmt",
    "unset-var",
    "send-lf",
    "send-binary-lf",
    "action",
];

/// Which rule list a keyword writes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Set {
    Http,
    Tcp,
}

impl Set {
    fn kw(self) -> &'static str {
        match self {
            Set::Http => "http-check",
            Set::Tcp => "tcp-check",
        }
    }
}

/// `http-check connect|send|expect|comment|send-state|disable-on-404 ...`.
pub(super) fn http_check(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    check_keyword(d, l, Set::Http)
}

/// `tcp-check connect|send|send-binary|expect|comment ...`.
pub(super) fn tcp_check(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    check_keyword(d, l, Set::Tcp)
}

fn check_keyword(d: &mut Draft, l: &Line, set: Set) -> Result<(), KwErr> {
    let w = &l.words;
    let kw = set.kw();
    let sub = arg(w, 1, &format!("'{kw}' action"))?;
    let subs = if set == Set::Http { HTTP_SUB } else { TCP_SUB };
    if UNSUPPORTED_SUB.contains(&sub) {
        return Err(format!("'{kw} {sub}' is not supported by sluice").into());
    }
    if !subs.contains(&sub) {
        return Err(format!(
            "unknown '{kw}' action '{sub}'{}",
            did_you_mean(sub, subs.iter().copied())
        )
        .into());
    }
    match sub {
        "disable-on-404" => {
            no_extra(w, 2)?;
            d.p.options.disable_on_404 = true;
            return Ok(());
        }
        "send-state" => {
            no_extra(w, 2)?;
            d.p.options.send_state = true;
            return Ok(());
        }
        _ => {}
    }
    let rule = match sub {
        "comment" => {
            let c = arg(w, 2, "comment text")?;
            no_extra(w, 3)?;
            // A comment names the rule that follows it.
            d.pending_check_comment = Some(c.to_string());
            return Ok(());
        }
        "connect" => CheckRule::Connect(connect(&w[2..], kw)?),
        "send" if set == Set::Http => CheckRule::Send(http_send(&w[2..])?),
        "send" | "send-binary" => CheckRule::Send(tcp_send(&w[2..], sub == "send-binary")?),
        _ => CheckRule::Expect(expect(&w[2..], set)?),
    };
    let idx = if set == Set::Http { 0 } else { 1 };
    if !d.checks_own[idx] {
        // The first rule of a proxy replaces the rules inherited from `defaults`.
        d.checks_own[idx] = true;
        rules_mut(d, set).clear();
        if set == Set::Tcp {
            d.p.options.protocol_check = false;
        }
    }
    let mut rule = rule;
    if let Some(c) = d.pending_check_comment.take() {
        set_comment(&mut rule, c);
    }
    rules_mut(d, set).push(rule);
    Ok(())
}

fn rules_mut(d: &mut Draft, set: Set) -> &mut Vec<CheckRule> {
    match set {
        Set::Http => &mut d.p.options.http_checks,
        Set::Tcp => &mut d.p.options.tcp_checks,
    }
}

fn set_comment(rule: &mut CheckRule, c: String) {
    let slot = match rule {
        CheckRule::Connect(x) => &mut x.comment,
        CheckRule::Send(x) => &mut x.comment,
        CheckRule::Expect(x) => &mut x.comment,
    };
    if slot.is_none() {
        *slot = Some(c);
    }
}

/// `connect [default] [port N] [addr A] [send-proxy] [ssl] [sni S] [alpn LIST] [linger]
/// [comment C]`.
fn connect(w: &[String], kw: &str) -> Result<ConnectRule, String> {
    let mut c = ConnectRule::default();
    let mut i = 0;
    while i < w.len() {
        let o = w[i].as_str();
        let val = |what: &str| arg(w, i + 1, &format!("{what} after '{o}'"));
        match o {
            "default" => c.default = true,
            "port" => {
                let v = val("port")?;
                c.port = Some(parse_port(v, v)?);
                i += 1;
            }
            "addr" => {
                let v = val("address")?;
                c.addr = Some(
                    v.parse()
                        .map_err(|_| format!("'{kw} connect addr': invalid IP address '{v}'"))?,
                );
                i += 1;
            }
            "send-proxy" => c.send_proxy = true,
            // sluice closes check connections with a FIN, which is what `linger` asks for.
            "linger" => {}
            "comment" => {
                c.comment = Some(val("text")?.to_string());
                i += 1;
            }
            "ssl" => c.ssl = true,
            "sni" => {
                c.sni = Some(
                    crate::tls::check_sni(val("name")?)
                        .map_err(|e| format!("'{kw} connect sni': {e}"))?,
                );
                i += 1;
            }
            "alpn" => {
                c.alpn = Some(
                    crate::tls::alpn_list(val("protocol list")?)
                        .map_err(|e| format!("'{kw} connect alpn': {e}"))?,
                );
                i += 1;
            }
            "proto" => {
                let v = val("protocol")?;
                let proto = parse_proto(v).map_err(|e| format!("'{kw} connect proto': {e}"))?;
                if kw == "tcp-check" {
                    // As HAProxy: an HTTP multiplexer cannot carry a tcp-check's bytes.
                    return Err(format!(
                        "'tcp-check connect proto {v}': invalid protocol for tcp-check ('{}' \
                         is an HTTP protocol, for http-check)",
                        proto.name()
                    ));
                }
                c.proto = Some(proto);
                i += 1;
            }
            "via-socks4" => {
                return Err(format!("'{kw} connect {o}' is not supported by sluice"));
            }
            _ => {
                return Err(format!(
                    "unknown '{kw} connect' option '{o}'{}",
                    did_you_mean(
                        o,
                        [
                            "default",
                            "port",
                            "addr",
                            "send-proxy",
                            "linger",
                            "comment",
                            "ssl",
                            "sni",
                            "alpn",
                            "proto"
                        ]
                    )
                ));
            }
        }
        i += 1;
    }
    Ok(c)
}

/// `check-proto` / `connect proto`: HAProxy's HTTP multiplexer names.
fn parse_proto(v: &str) -> Result<CheckProto, String> {
    CheckProto::parse(v).ok_or_else(|| format!("unknown protocol '{v}' (allowed: h1, h2)"))
}

/// `http-check send [meth M] [uri U] [ver V] [hdr NAME VALUE]... [body STR] [comment C]`.
fn http_send(w: &[String]) -> Result<SendRule, String> {
    let mut s = HttpSend::default();
    let mut comment = None;
    let mut i = 0;
    while i < w.len() {
        let o = w[i].as_str();
        let val = |what: &str| arg(w, i + 1, &format!("{what} after '{o}'"));
        match o {
            "meth" => {
                let m = val("method")?;
                check_method(m).map_err(|e| format!("'http-check send meth': {e}"))?;
                s.meth = Some(m.to_string());
            }
            "uri" => {
                let u = val("URI")?;
                check_uri(u).map_err(|e| format!("'http-check send uri': {e}"))?;
                s.uri = Some(u.to_string());
            }
            "ver" => {
                let v = val("version")?;
                check_version(v).map_err(|e| format!("'http-check send ver': {e}"))?;
                s.ver = Some(v.to_string());
            }
            "hdr" => {
                let name = super::values::header_name(val("header name")?)?;
                let v = arg(w, i + 2, "header value after 'hdr NAME'")?;
                if v.bytes().any(|b| b == b'\r' || b == b'\n') {
                    return Err(format!("'http-check send hdr {name}': invalid value"));
                }
                s.hdrs.push((name, v.to_string()));
                i += 1;
            }
            "body" => s.body = Some(val("body")?.to_string()),
            "comment" => comment = Some(val("text")?.to_string()),
            "uri-lf" | "body-lf" => {
                return Err(format!(
                    "'http-check send {o}' (log-format) is not supported by sluice"
                ));
            }
            _ => {
                return Err(format!(
                    "unknown 'http-check send' option '{o}'{}",
                    did_you_mean(o, ["meth", "uri", "ver", "hdr", "body", "comment"])
                ));
            }
        }
        i += 2;
    }
    Ok(SendRule {
        data: SendData::Http(s),
        comment,
    })
}

/// `tcp-check send STRING [comment C]` / `send-binary HEX [comment C]`.
fn tcp_send(w: &[String], binary: bool) -> Result<SendRule, String> {
    let data = arg(w, 0, if binary { "hex string" } else { "data" })?;
    let mut comment = None;
    match w.get(1).map(String::as_str) {
        None => {}
        Some("comment") => {
            comment = Some(arg(w, 2, "text after 'comment'")?.to_string());
            no_extra(w, 3)?;
        }
        Some(x) => return Err(format!("unexpected argument '{x}'")),
    }
    let bytes = if binary {
        hex(data).map_err(|e| format!("'tcp-check send-binary': {e}"))?
    } else {
        data.as_bytes().to_vec()
    };
    Ok(SendRule {
        data: SendData::Bytes(bytes),
        comment,
    })
}

fn hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("'{s}' is not an even number of hexadecimal digits"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// The value of `min-recv` at `w[i]` (`-1`: none).
fn min_recv_arg(w: &[String], i: usize) -> Result<Option<usize>, String> {
    let v = arg(w, i + 1, "number after 'min-recv'")?;
    Ok(if v == "-1" {
        None
    } else {
        Some(parse_range(v, 0, 1 << 20)? as usize)
    })
}

/// Check status codes an `expect` may name, by option (HAProxy's lists).
const OK_STATUSES: &[&str] = &["L7OK", "L7OKC", "L6OK", "L4OK"];
const ERROR_STATUSES: &[&str] = &["L7RSP", "L7STS", "L6RSP", "L4CON"];
const TOUT_STATUSES: &[&str] = &["L7TOUT", "L6TOUT", "L4TOUT"];

/// An option of `expect` at `w[i]`, before or after the pattern: the words it took, or
/// `None` when `w[i]` is not one.
fn expect_option(
    w: &[String],
    i: usize,
    set: Set,
    r: &mut ExpectRule,
) -> Result<Option<usize>, String> {
    let kw = set.kw();
    let Some(o) = w.get(i).map(String::as_str) else {
        return Ok(None);
    };
    let status = |list: &[&'static str]| -> Result<&'static str, String> {
        let v = arg(w, i + 1, &format!("a status after '{o}'"))?;
        list.iter()
            .copied()
            .find(|s| *s == v)
            .ok_or_else(|| format!("'{kw} expect {o}': '{v}' is not one of {}", list.join(", ")))
    };
    let text = || -> Result<String, String> {
        let v = arg(w, i + 1, &format!("text after '{o}'"))?;
        if v.contains('%') && !v.contains("%%") {
            return Err(format!(
                "'{kw} expect {o}': log-format expressions are not supported by sluice here \
                 (the text must be literal)"
            ));
        }
        Ok(v.replace("%%", "%"))
    };
    match o {
        "min-recv" => r.min_recv = min_recv_arg(w, i)?,
        "comment" => r.comment = Some(arg(w, i + 1, "text after 'comment'")?.to_string()),
        "ok-status" | "error-status" | "tout-status" | "on-success" | "on-error"
            if set == Set::Http =>
        {
            return Err(format!("'{kw} expect {o}' is not supported by sluice"));
        }
        "ok-status" => r.ok_status = Some(status(OK_STATUSES)?),
        "error-status" => r.error_status = Some(status(ERROR_STATUSES)?),
        "tout-status" => r.tout_status = Some(status(TOUT_STATUSES)?),
        "on-success" => r.on_success = Some(text()?),
        "on-error" => r.on_error = Some(text()?),
        "status-code" => return Err(format!("'{kw} expect {o}' is not supported by sluice")),
        _ => return Ok(None),
    }
    Ok(Some(2))
}

/// `expect [OPTIONS] [!] MATCH PATTERN [OPTIONS]`.
fn expect(w: &[String], set: Set) -> Result<ExpectRule, String> {
    let kw = set.kw();
    let mut r = ExpectRule::default();
    let mut i = 0;
    loop {
        let o = arg(w, i, "match")?;
        if o == "!" {
            r.negate = true;
            i += 1;
            continue;
        }
        match expect_option(w, i, set, &mut r)? {
            Some(n) => i += n,
            None => break,
        }
    }
    let what = w[i].as_str();
    let pat = arg(w, i + 1, "pattern")?;
    let mut end = i + 2;
    let re = |p: &str| regex::Regex::new(p).map_err(|e| format!("'{kw} expect {what}': {e}"));
    let bre =
        |p: &str| regex::bytes::Regex::new(p).map_err(|e| format!("'{kw} expect {what}': {e}"));
    let kind = match (set, what) {
        (Set::Http, "status") => ExpectKind::Status(status_list(pat)?),
        (Set::Http, "rstatus") => ExpectKind::RStatus(re(pat)?),
        (_, "string") => ExpectKind::String(pat.as_bytes().to_vec()),
        (_, "rstring") => ExpectKind::RString(bre(pat)?),
        (Set::Tcp, "binary") => {
            ExpectKind::Binary(hex(pat).map_err(|e| format!("'tcp-check expect binary': {e}"))?)
        }
        (Set::Tcp, "rbinary") => ExpectKind::RBinary(re(pat)?),
        (Set::Http, "hdr" | "fhdr") => {
            let (k, n) = hdr_expect(&w[i + 1..], what == "fhdr")?;
            end = i + 1 + n;
            k
        }
        (_, "custom" | "string-lf" | "binary-lf") => {
            return Err(format!("'{kw} expect {what}' is not supported by sluice"));
        }
        (_, x) => {
            let known: &[&str] = if set == Set::Http {
                &["status", "rstatus", "string", "rstring", "hdr", "fhdr"]
            } else {
                &["string", "rstring", "binary", "rbinary"]
            };
            return Err(format!(
                "unknown '{kw} expect' match '{x}'{}",
                did_you_mean(x, known.iter().copied())
            ));
        }
    };
    // The options may also come after the pattern (HAProxy reads them wherever they stand).
    while let Some(n) = expect_option(w, end, set, &mut r)? {
        end += n;
    }
    no_extra(w, end)?;
    r.kind = kind;
    Ok(r)
}

/// `name [-m M] NAME [value [-m M] VALUE] [full]`; returns the match and the words used.
fn hdr_expect(w: &[String], fhdr: bool) -> Result<(ExpectKind, usize), String> {
    let what = if fhdr { "fhdr" } else { "hdr" };
    if w.first().map(String::as_str) != Some("name") {
        return Err(format!(
            "'http-check expect {what}': expected 'name' after '{what}'"
        ));
    }
    let (name, mut i) = one_match(w, 1, what)?;
    let mut value = None;
    if w.get(i).is_some_and(|x| x == "value") {
        let (v, j) = one_match(w, i + 1, what)?;
        value = Some(v);
        i = j;
    }
    let mut full = fhdr;
    if w.get(i).is_some_and(|x| x == "full") {
        full = true;
        i += 1;
    }
    Ok((ExpectKind::Hdr { name, value, full }, i))
}

/// `[-m str|beg|end|sub|reg] PATTERN` at `w[i..]`; returns it and the next index.
fn one_match(w: &[String], mut i: usize, what: &str) -> Result<(Match, usize), String> {
    let mut method = MatchMethod::Str;
    if w.get(i).is_some_and(|x| x == "-m") {
        let m = arg(w, i + 1, "method after '-m'")?;
        method = match m {
            "str" => MatchMethod::Str,
            "beg" => MatchMethod::Beg,
            "end" => MatchMethod::End,
            "sub" => MatchMethod::Sub,
            "reg" => MatchMethod::Reg,
            x => {
                return Err(format!(
                    "'http-check expect {what}': unknown match method '{x}'{}",
                    did_you_mean(x, ["str", "beg", "end", "sub", "reg"])
                ));
            }
        };
        i += 2;
    }
    let pattern = arg(w, i, "pattern")?.to_string();
    let regex = if method == MatchMethod::Reg {
        Some(regex::Regex::new(&pattern).map_err(|e| format!("'http-check expect {what}': {e}"))?)
    } else {
        None
    };
    Ok((
        Match {
            method,
            pattern,
            regex,
        },
        i + 1,
    ))
}

/// `200`, `200-399`, `200,302,400-404`.
fn status_list(s: &str) -> Result<Vec<(u16, u16)>, String> {
    let code = |x: &str| -> Result<u16, String> {
        x.parse::<u16>()
            .ok()
            .filter(|c| (100..=599).contains(c))
            .ok_or_else(|| format!("'http-check expect status': invalid status '{x}'"))
    };
    s.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (code(a)?, code(b)?);
                if a > b {
                    return Err(format!("'http-check expect status': empty range '{part}'"));
                }
                Ok((a, b))
            }
            None => {
                let c = code(part)?;
                Ok((c, c))
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Server options
// ---------------------------------------------------------------------------------------------

/// Check options of `server` / `default-server` lines, as parsed so far.
#[derive(Debug, Clone)]
pub(super) struct ServerCheckOpts {
    pub check: bool,
    pub inter: Duration,
    pub fastinter: Option<Duration>,
    pub downinter: Option<Duration>,
    pub rise: u32,
    pub fall: u32,
    pub port: Option<u16>,
    pub addr: Option<std::net::IpAddr>,
    pub send_proxy: bool,
    pub ssl: Option<bool>,
    pub sni: Option<String>,
    pub alpn: Option<Vec<Vec<u8>>>,
    pub proto: Option<CheckProto>,
    pub reuse_pool: bool,
    pub agent: bool,
    pub agent_port: Option<u16>,
    pub agent_addr: Option<std::net::IpAddr>,
    pub agent_inter: Option<Duration>,
    pub agent_send: Option<String>,
    pub health: HealthCfg,
}

impl Default for ServerCheckOpts {
    fn default() -> Self {
        ServerCheckOpts {
            check: false,
            inter: Duration::from_secs(2),
            fastinter: None,
            downinter: None,
            rise: 2,
            fall: 3,
            port: None,
            addr: None,
            send_proxy: false,
            ssl: None,
            sni: None,
            alpn: None,
            proto: None,
            reuse_pool: false,
            agent: false,
            agent_port: None,
            agent_addr: None,
            agent_inter: None,
            agent_send: None,
            health: HealthCfg {
                error_limit: 10,
                ..HealthCfg::default()
            },
        }
    }
}

impl ServerCheckOpts {
    pub fn check_cfg(&self) -> Option<CheckCfg> {
        self.check.then(|| CheckCfg {
            inter: self.inter,
            fastinter: self.fastinter.unwrap_or(self.inter),
            downinter: self.downinter.unwrap_or(self.inter),
            rise: self.rise,
            fall: self.fall,
            port: self.port,
            addr: self.addr,
            send_proxy: self.send_proxy,
            ssl: self.ssl,
            sni: self.sni.clone(),
            alpn: self.alpn.clone(),
            proto: self.proto,
            reuse_pool: self.reuse_pool,
        })
    }

    pub fn health_cfg(&self) -> HealthCfg {
        let mut h = self.health.clone();
        h.agent = match (self.agent, self.agent_port) {
            (true, Some(port)) => Some(AgentCfg {
                port,
                addr: self.agent_addr,
                inter: self.agent_inter.unwrap_or(self.inter),
                send: self.agent_send.clone(),
            }),
            _ => None,
        };
        h
    }

    /// What a `server` line must satisfy once all its options are known.
    pub fn validate(&self) -> Result<(), String> {
        if self.agent && self.agent_port.is_none() {
            return Err("'agent-check' needs 'agent-port' (the agent's TCP port)".into());
        }
        if !self.check && self.health.observe.is_some() {
            // The check task is what acts on the errors traffic reports.
            return Err("'observe' needs 'check' on the same server".into());
        }
        if self.check && self.health.track.is_some() {
            // As HAProxy: a tracking server takes its state from the tracked one.
            return Err("unable to enable checks and tracking at the same time".into());
        }
        Ok(())
    }
}

impl ServerCheckOpts {
    /// What `add server` (CLI) cannot do yet: its checks start from the CLI, but agents and
    /// tracking are wired at start-up only.
    pub fn validate_dynamic(&self) -> Result<(), String> {
        if self.agent {
            return Err("'agent-check' is not supported on 'add server' by sluice".into());
        }
        if self.health.track.is_some() {
            return Err("'track' is not supported on 'add server' by sluice".into());
        }
        Ok(())
    }
}

/// Check options a `server` line accepts (for "did you mean").
pub(super) const SERVER_OPTIONS: &[&str] = &[
    "check",
    "no-check",
    "inter",
    "fastinter",
    "downinter",
    "rise",
    "fall",
    "port",
    "addr",
    "check-send-proxy",
    "agent-check",
    "no-agent-check",
    "agent-port",
    "agent-addr",
    "agent-inter",
    "agent-send",
    "observe",
    "error-limit",
    "on-error",
    "on-marked-down",
    "on-marked-up",
    "slowstart",
    "track",
];

/// Parses the check option at `words[i]` into `o`. `None`: not a check option; otherwise the
/// number of value words it used.
pub(super) fn server_opt(
    words: &[String],
    i: usize,
    o: &mut ServerCheckOpts,
) -> Option<Result<usize, String>> {
    let opt = words[i].as_str();
    let val = |what: &str| arg(words, i + 1, &format!("{what} after '{opt}'"));
    let time = |what: &str| -> Result<Duration, String> {
        let t = parse_time(val(what)?)?;
        if t.is_zero() {
            return Err(format!("'{opt}' must be greater than 0"));
        }
        Ok(t)
    };
    let r = || -> Result<usize, String> {
        match opt {
            "check" => o.check = true,
            "no-check" => o.check = false,
            "inter" => o.inter = time("time")?,
            "fastinter" => o.fastinter = Some(time("time")?),
            "downinter" => o.downinter = Some(time("time")?),
            "rise" | "fall" => {
                let v = parse_range(val("number")?, 1, 1_000_000)
                    .map_err(|e| format!("'{opt}': {e}"))? as u32;
                if opt == "rise" {
                    o.rise = v;
                } else {
                    o.fall = v;
                }
            }
            "port" => {
                let v = val("port")?;
                o.port = Some(parse_port(v, v)?);
            }
            "addr" | "agent-addr" => {
                let v = val("address")?;
                // A host name is resolved now, as HAProxy resolves it at start-up.
                let a = super::values::resolve_host(v, 0, super::values::Family::Any)
                    .map_err(|e| format!("'{opt}': {e}"))?
                    .ip();
                if opt == "addr" {
                    o.addr = Some(a);
                } else {
                    o.agent_addr = Some(a);
                }
            }
            "check-send-proxy" => {
                o.send_proxy = true;
                return Ok(0);
            }
            // Checks over TLS use the server's own client settings (its `ssl` options).
            "check-ssl" => {
                o.ssl = Some(true);
                return Ok(0);
            }
            "no-check-ssl" => {
                o.ssl = Some(false);
                return Ok(0);
            }
            "check-sni" => {
                o.sni =
                    Some(crate::tls::check_sni(val("name")?).map_err(|e| format!("'{opt}': {e}"))?);
            }
            "check-alpn" => {
                o.alpn = Some(
                    crate::tls::alpn_list(val("protocol list")?)
                        .map_err(|e| format!("'{opt}': {e}"))?,
                );
            }
            "check-reuse-pool" | "no-check-reuse-pool" => {
                o.reuse_pool = opt == "check-reuse-pool";
                return Ok(0);
            }
            "check-proto" => {
                o.proto = Some(parse_proto(val("protocol")?).map_err(|e| format!("'{opt}': {e}"))?);
            }
            "check-via-socks4" => {
                return Err(format!("server option '{opt}' is not supported by sluice"));
            }
            "agent-check" => o.agent = true,
            "no-agent-check" => o.agent = false,
            "agent-port" => {
                let v = val("port")?;
                o.agent_port = Some(parse_port(v, v)?);
            }
            "agent-inter" => o.agent_inter = Some(time("time")?),
            "agent-send" => o.agent_send = Some(val("string")?.to_string()),
            "observe" => {
                o.health.observe = match val("mode")? {
                    "layer4" => Some(Observe::Layer4),
                    "layer7" => Some(Observe::Layer7),
                    "none" => None,
                    x => {
                        return Err(format!(
                            "'observe' expects 'layer4', 'layer7' or 'none', not '{x}'"
                        ));
                    }
                }
            }
            "error-limit" => {
                o.health.error_limit = parse_range(val("number")?, 1, 1_000_000)
                    .map_err(|e| format!("'error-limit': {e}"))?
                    as u32;
            }
            "on-error" => {
                o.health.on_error = match val("mode")? {
                    "fastinter" => OnError::Fastinter,
                    "fail-check" => OnError::FailCheck,
                    "sudden-death" => OnError::SuddenDeath,
                    "mark-down" => OnError::MarkDown,
                    x => {
                        return Err(format!(
                            "'on-error' expects 'fastinter', 'fail-check', 'sudden-death' or \
                             'mark-down', not '{x}'"
                        ));
                    }
                }
            }
            "on-marked-down" => match val("action")? {
                "shutdown-sessions" => o.health.down_kills_sessions = true,
                x => {
                    return Err(format!(
                        "'on-marked-down' expects 'shutdown-sessions', not '{x}'"
                    ));
                }
            },
            "on-marked-up" => match val("action")? {
                "shutdown-backup-sessions" => o.health.up_kills_backup_sessions = true,
                x => {
                    return Err(format!(
                        "'on-marked-up' expects 'shutdown-backup-sessions', not '{x}'"
                    ));
                }
            },
            "slowstart" => {
                let t = parse_time(val("time")?)?;
                o.health.slowstart = (!t.is_zero()).then_some(t);
            }
            "track" => {
                let v = val("[backend/]server")?;
                o.health.track = Some(match v.split_once('/') {
                    Some((b, s)) if !b.is_empty() && !s.is_empty() => {
                        (Some(b.to_string()), s.to_string())
                    }
                    None if !v.is_empty() => (None, v.to_string()),
                    _ => return Err(format!("'track': invalid server '{v}'")),
                });
            }
            _ => unreachable!("filtered below"),
        }
        Ok(match opt {
            "check" | "no-check" | "agent-check" | "no-agent-check" => 0,
            _ => 1,
        })
    };
    let known = SERVER_OPTIONS.contains(&opt)
        || matches!(
            opt,
            "check-ssl"
                | "check-sni"
                | "check-alpn"
                | "no-check-ssl"
                | "check-proto"
                | "check-via-socks4"
                | "check-reuse-pool"
                | "no-check-reuse-pool"
        );
    known.then(r)
}

// ---------------------------------------------------------------------------------------------
// Global keywords
// ---------------------------------------------------------------------------------------------

/// `spread-checks N`, `max-spread-checks T`, `tune.max-checks-per-thread N`; `None` for any
/// other global keyword.
pub(super) fn global_keyword(g: &mut GlobalChecks, w: &[String]) -> Option<Result<(), String>> {
    let kw = w[0].as_str();
    let r = || -> Result<(), String> {
        match kw {
            "spread-checks" => {
                g.spread = parse_range(arg(w, 1, "percentage")?, 0, 50)
                    .map_err(|e| format!("'spread-checks': {e}"))?
                    as u32;
            }
            "max-spread-checks" => {
                g.max_spread = Some(parse_time(arg(w, 1, "time")?)?);
            }
            _ => {
                g.max_per_thread = parse_range(arg(w, 1, "number")?, 0, 1_000_000)
                    .map_err(|e| format!("'tune.max-checks-per-thread': {e}"))?
                    as u32;
            }
        }
        no_extra(w, 2)
    };
    matches!(
        kw,
        "spread-checks" | "max-spread-checks" | "tune.max-checks-per-thread"
    )
    .then(r)
}

// ---------------------------------------------------------------------------------------------
// track
// ---------------------------------------------------------------------------------------------

/// Resolves every `track [BACKEND/]SERVER` to indexes: the tracked server must exist, have
/// health checks (or track another one in turn), and chains must not loop.
pub(super) fn resolve_tracks(proxies: &mut [Proxy], errors: &mut Vec<ConfigError>) {
    let mut found = Vec::new();
    for (pi, p) in proxies.iter().enumerate() {
        for (si, s) in p.servers.iter().enumerate() {
            let Some((be, name)) = &s.health.track else {
                continue;
            };
            let err = |m: String| ConfigError {
                file: s.origin.file.clone(),
                line: s.origin.line,
                message: format!("'server {}' in backend '{}': {m}", s.name, p.name),
            };
            let ti = match be {
                None => Some(pi),
                Some(b) => proxies
                    .iter()
                    .position(|x| &x.name == b && x.kind.has_backend()),
            };
            let Some(ti) = ti else {
                errors.push(err(format!(
                    "'track': unknown backend '{}'",
                    be.as_deref().unwrap_or("")
                )));
                continue;
            };
            let Some(tsi) = proxies[ti].servers.iter().position(|x| &x.name == name) else {
                errors.push(err(format!(
                    "'track': unknown server '{name}' in backend '{}'",
                    proxies[ti].name
                )));
                continue;
            };
            let t = &proxies[ti].servers[tsi];
            if t.check.is_none() && t.health.track.is_none() {
                errors.push(err(format!(
                    "'track': unable to use {}/{name} for tracking as it does not have any \
                     check enabled",
                    proxies[ti].name
                )));
                continue;
            }
            found.push(((pi, si), (ti, tsi)));
        }
    }
    for ((pi, si), t) in &found {
        proxies[*pi].servers[*si].health.track_idx = Some(*t);
    }
    // Loops: follow each chain at most as many steps as there are trackers.
    for ((pi, si), _) in &found {
        let mut cur = (*pi, *si);
        for _ in 0..=found.len() {
            match proxies[cur.0].servers[cur.1].health.track_idx {
                Some(n) => cur = n,
                None => break,
            }
            if cur == (*pi, *si) {
                let s = &proxies[*pi].servers[*si];
                errors.push(ConfigError {
                    file: s.origin.file.clone(),
                    line: s.origin.line,
                    message: format!(
                        "'server {}' in backend '{}': 'track' loop detected",
                        s.name, proxies[*pi].name
                    ),
                });
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Protocol checks: `option redis-check|ssl-hello-chk|pgsql-check|mysql-check`
// ---------------------------------------------------------------------------------------------

/// The tcp-check rules a protocol check option stands for (HAProxy builds its own the same
/// way), from the option's arguments (`words` after the option name).
pub(super) fn protocol_check(name: &str, words: &[String]) -> Result<Vec<CheckRule>, String> {
    let send = |b: Vec<u8>| {
        CheckRule::Send(SendRule {
            data: SendData::Bytes(b),
            comment: None,
        })
    };
    let rbinary = |re: &str| ExpectKind::RBinary(regex::Regex::new(re).expect("fixed pattern"));
    let expect = |kind, min_recv, error_status, on_success: Option<&str>| {
        CheckRule::Expect(ExpectRule {
            kind,
            min_recv,
            error_status: Some(error_status),
            on_success: on_success.map(str::to_string),
            ..Default::default()
        })
    };
    Ok(match name {
        // PING must be answered by +PONG.
        "redis-check" => {
            no_extra(words, 0)?;
            vec![
                send(b"*1\r\n$4\r\nPING\r\n".to_vec()),
                expect(
                    ExpectKind::String(b"+PONG\r\n".to_vec()),
                    None,
                    "L7STS",
                    Some("Redis server is ok"),
                ),
            ]
        }
        // SPOP: a HAPROXY-HELLO marked `healthcheck`, answered by an AGENT-HELLO frame
        // (type 101 after the 4-byte length) rather than an AGENT-DISCONNECT.
        "spop-check" => {
            no_extra(words, 0)?;
            vec![
                send(crate::spoe::health_hello()),
                expect(
                    rbinary("^.{8}65"),
                    Some(5),
                    "L7RSP",
                    Some("SPOA server is ok"),
                ),
            ]
        }
        // A TLS ClientHello must be answered by a TLS record: a handshake (0x16) or an alert
        // (0x15) both show that TLS is spoken there.
        "ssl-hello-chk" => {
            no_extra(words, 0)?;
            vec![
                send(client_hello()),
                CheckRule::Expect(ExpectRule {
                    kind: rbinary("^1[56]"),
                    min_recv: Some(5),
                    ok_status: Some("L6OK"),
                    error_status: Some("L6RSP"),
                    tout_status: Some("L6TOUT"),
                    // HAProxy gives a passed hello no info text.
                    on_success: Some(String::new()),
                    ..Default::default()
                }),
            ]
        }
        // A StartupMessage for the user, answered by an Authentication request ('R') rather
        // than an ErrorResponse ('E').
        "pgsql-check" => {
            let user = match words {
                [u, name] if u == "user" => name,
                _ => return Err("'option pgsql-check' expects 'user <username>'".into()),
            };
            let mut body = 196608u32.to_be_bytes().to_vec(); // protocol 3.0
            body.extend_from_slice(b"user\0");
            body.extend_from_slice(user.as_bytes());
            body.extend_from_slice(b"\0\0");
            let mut msg = ((body.len() + 4) as u32).to_be_bytes().to_vec();
            msg.extend_from_slice(&body);
            vec![
                send(msg),
                CheckRule::Expect(ExpectRule {
                    negate: true,
                    kind: ExpectKind::RString(regex::bytes::Regex::new("^E").expect("fixed")),
                    min_recv: Some(5),
                    error_status: Some("L7RSP"),
                    ..Default::default()
                }),
                expect(
                    rbinary("^52000000[A-Z0-9]{2}000000(00|02|03|04|05|06|07|09|0A)"),
                    Some(9),
                    "L7STS",
                    Some("PostgreSQL server is ok"),
                ),
            ]
        }
        // The server's greeting (a packet of sequence 0, protocol version 10; an error packet
        // has 0xFF there); with a user, a login without password answered by an OK packet.
        // QUIT follows the login in the same send, so that the server does not log an
        // aborted connection and the OK stays the check's last step.
        "mysql-check" => {
            let greeting = expect(ExpectKind::Mysql { ok: false }, None, "L7RSP", None);
            let (user, pre41) = match words {
                [] => return Ok(vec![greeting]),
                [u, name] if u == "user" => (name, false),
                [u, name, v] if u == "user" && (v == "post-41" || v == "pre-41") => {
                    (name, v == "pre-41")
                }
                _ => {
                    return Err(
                        "'option mysql-check' expects [user <username> [post-41|pre-41]]".into(),
                    );
                }
            };
            let mut body = Vec::new();
            if pre41 {
                // Capabilities: long password; max packet 16 MiB (3 bytes).
                body.extend_from_slice(&[0x01, 0x00, 0x00, 0x00, 0x01]);
            } else {
                // Capabilities: long password, protocol 4.1, secure connection; max packet
                // 16 MiB; character set utf8; 23 reserved bytes.
                body.extend_from_slice(&0x0000_8201u32.to_le_bytes());
                body.extend_from_slice(&0x0100_0000u32.to_le_bytes());
                body.push(0x21);
                body.extend_from_slice(&[0; 23]);
            }
            body.extend_from_slice(user.as_bytes());
            body.push(0);
            if !pre41 {
                body.push(0); // no authentication data
            }
            let mut login = (body.len() as u32).to_le_bytes()[..3].to_vec();
            login.push(1); // sequence 1, after the greeting
            login.extend_from_slice(&body);
            login.extend_from_slice(&[0x01, 0x00, 0x00, 0x00, 0x01]);
            vec![
                greeting,
                send(login),
                expect(ExpectKind::Mysql { ok: true }, None, "L7STS", None),
            ]
        }
        _ => unreachable!("not a protocol check: {name}"),
    })
}

/// A TLS 1.2 ClientHello offering common suites, as `ssl-hello-chk` sends it. Its random is
/// fixed: the check needs an answer, not a session.
fn client_hello() -> Vec<u8> {
    const SUITES: [u16; 10] = [
        0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0x009c, 0x009d, 0x002f, 0x0035,
    ];
    let mut hello = vec![0x03, 0x03]; // client_version TLS 1.2
    hello.extend_from_slice(b"sluice ssl-hello-chk random!"); // 28 bytes
    hello.extend_from_slice(&[0; 4]); // completes the 32-byte random
    hello.push(0); // no session id
    hello.extend_from_slice(&((SUITES.len() * 2) as u16).to_be_bytes());
    for s in SUITES {
        hello.extend_from_slice(&s.to_be_bytes());
    }
    hello.extend_from_slice(&[1, 0]); // compression: null
    let mut hs = vec![0x01]; // ClientHello
    hs.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&hello);
    let mut rec = vec![0x16, 0x03, 0x01]; // handshake record, version TLS 1.0 for compatibility
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}
