//! `log-format`: HAProxy's custom log format strings (configuration.txt §8.2.4), compiled once
//! at configuration time into a list of nodes — literal text, separators, variables (`%ci`,
//! `%{+Q}r`, ...) and sample fetches (`%[ssl_fc_sni]`) — so that logging never parses text.
//! Rendering is `log`'s business; this module only knows the syntax and what each name means.

use super::SampleFetch;
use super::did_you_mean;

/// Per-item flags (`%{+Q,-X}ci`; `%{+Q}o` sets them for every following item).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// `Q`: strings between double quotes.
    pub quote: bool,
    /// `X`: addresses, ports and some counters in hexadecimal.
    pub hex: bool,
    /// `E`: `"`, `\` and `]` in strings escaped with a backslash.
    pub escape: bool,
}

/// A `%name` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// `%B`: bytes sent to the client.
    BytesOut,
    /// `%U`: bytes received from the client.
    BytesIn,
    /// `%CC` / `%CS`: captured cookies (sluice has no captures: `-`).
    CookieReq,
    CookieRsp,
    /// `%H`: host name.
    Hostname,
    /// `%ID`: the request's unique id (`unique-id-format`; `-` without one).
    UniqueId,
    /// `%ST`: HTTP status.
    Status,
    /// `%T` / `%Tl`: accept date, `10/Feb/2026:12:14:14 +0000`.
    DateGmt,
    DateLocal,
    /// `%Ts`: accept date, seconds since the epoch.
    Timestamp,
    /// `%ms`: milliseconds of the accept date (3 digits).
    Millis,
    Ta,
    Tc,
    Td,
    Th,
    Ti,
    Tq,
    Tr,
    TR,
    Tt,
    /// `%Tu`: the time the user saw, `Tt` minus the idle time `Ti`.
    Tu,
    Tw,
    /// `%ac %bc %fc %sc %rc %sq %bq`.
    ActConn,
    BeConn,
    FeConn,
    SrvConn,
    Retries,
    SrvQueue,
    BeQueue,
    /// `%b`, `%f`, `%ft` (`~` after the name on TLS), `%s`.
    Backend,
    Frontend,
    FrontendXprt,
    Server,
    /// `%bi %bp`: the server connection's source address.
    BeSrcIp,
    BeSrcPort,
    /// `%ci %cp`: the client's address.
    ClientIp,
    ClientPort,
    /// `%fi %fp`: the address the client connected to.
    FeIp,
    FePort,
    /// `%si %sp`: the server's address.
    SrvIp,
    SrvPort,
    /// `%hr %hrl %hs %hsl`: captured headers (none in sluice: nothing is printed).
    HdrReq,
    HdrReqList,
    HdrRsp,
    HdrRspList,
    /// `%HM %HP %HQ %HU %HV`: parts of the request line.
    Method,
    Path,
    Query,
    Uri,
    Version,
    /// `%lc`: the frontend's log line counter.
    LogCount,
    /// `%pid`.
    Pid,
    /// `%r`: the request line.
    Request,
    /// `%rt`: request (or TCP session) counter.
    ReqCount,
    /// `%sslc %sslv`: the client connection's TLS cipher and version.
    SslCipher,
    SslVersion,
    /// `%t`: accept date with milliseconds.
    Date,
    /// `%tr %trg %trl`: the request's date.
    ReqDate,
    ReqDateGmt,
    ReqDateLocal,
    /// `%ts` (2 chars) and `%tsc` (4 chars, with the cookie state).
    TermState,
    TermStateCookie,
}

/// Names, variables, and whether HAProxy reserves them for `mode http`.
const VARS: &[(&str, Var, bool)] = &[
    ("B", Var::BytesOut, false),
    ("CC", Var::CookieReq, true),
    ("CS", Var::CookieRsp, true),
    ("H", Var::Hostname, false),
    ("HM", Var::Method, true),
    ("HP", Var::Path, true),
    ("HQ", Var::Query, true),
    ("HU", Var::Uri, true),
    ("HV", Var::Version, true),
    ("ID", Var::UniqueId, true),
    ("ST", Var::Status, false),
    ("T", Var::DateGmt, false),
    ("Ta", Var::Ta, true),
    ("Tc", Var::Tc, false),
    ("Td", Var::Td, false),
    ("Th", Var::Th, false),
    ("Ti", Var::Ti, true),
    ("Tl", Var::DateLocal, false),
    ("Tq", Var::Tq, true),
    ("TR", Var::TR, true),
    ("Tr", Var::Tr, true),
    ("Ts", Var::Timestamp, false),
    ("Tt", Var::Tt, false),
    ("Tu", Var::Tu, false),
    ("Tw", Var::Tw, false),
    ("U", Var::BytesIn, false),
    ("ac", Var::ActConn, false),
    ("b", Var::Backend, false),
    ("bc", Var::BeConn, false),
    ("bi", Var::BeSrcIp, false),
    ("bp", Var::BeSrcPort, false),
    ("bq", Var::BeQueue, false),
    ("ci", Var::ClientIp, false),
    ("cp", Var::ClientPort, false),
    ("f", Var::Frontend, false),
    ("fc", Var::FeConn, false),
    ("fi", Var::FeIp, false),
    ("fp", Var::FePort, false),
    ("ft", Var::FrontendXprt, false),
    ("hr", Var::HdrReq, false),
    ("hrl", Var::HdrReqList, false),
    ("hs", Var::HdrRsp, false),
    ("hsl", Var::HdrRspList, false),
    ("lc", Var::LogCount, false),
    ("ms", Var::Millis, false),
    ("pid", Var::Pid, false),
    ("r", Var::Request, true),
    ("rc", Var::Retries, false),
    ("rt", Var::ReqCount, false),
    ("s", Var::Server, false),
    ("sc", Var::SrvConn, false),
    ("si", Var::SrvIp, false),
    ("sp", Var::SrvPort, false),
    ("sq", Var::SrvQueue, false),
    ("sslc", Var::SslCipher, false),
    ("sslv", Var::SslVersion, false),
    ("t", Var::Date, false),
    ("tr", Var::ReqDate, true),
    ("trg", Var::ReqDateGmt, true),
    ("trl", Var::ReqDateLocal, true),
    ("ts", Var::TermState, false),
    ("tsc", Var::TermStateCookie, false),
];

/// One compiled item of a format.
#[derive(Debug, Clone)]
pub enum Node {
    Text(Box<str>),
    /// This many unescaped spaces. A log line prints a single space, and none right after
    /// another separator or an item that printed nothing (HAProxy merges them); a header
    /// value keeps them all, as HAProxy does.
    Sep(u32),
    Var(Var, Flags),
    /// `%[fetch]`. `slot`: fetches that read the HTTP request are taken when its head arrives
    /// (the request is gone by log time) into this slot of the transaction's samples.
    Fetch {
        fetch: SampleFetch,
        flags: Flags,
        slot: Option<usize>,
    },
}

/// A compiled `log-format` string.
#[derive(Debug, Clone)]
pub struct LogFormat {
    pub nodes: Vec<Node>,
    /// How many fetches must be taken from the request head (`Node::Fetch::slot`).
    pub req_fetches: usize,
    /// The first variable HAProxy reserves for `mode http`, if any (an error in `mode tcp`).
    pub http_var: Option<&'static str>,
    /// Whether a node needs the frontend's local address (`%fi`, `%fp`), the server
    /// connection's source address (`%bi`, `%bp`) or the log counter (`%lc`).
    pub needs_local: bool,
    pub needs_be_src: bool,
    pub needs_log_count: bool,
    /// Where it was written (errors found when the proxy ends name this line).
    pub origin: super::Origin,
}

impl LogFormat {
    pub fn fetches(&self) -> impl Iterator<Item = (&SampleFetch, usize)> {
        self.nodes.iter().filter_map(|n| match n {
            Node::Fetch {
                fetch,
                slot: Some(s),
                ..
            } => Some((fetch, *s)),
            _ => None,
        })
    }
}

fn apply_flags(args: &str, flags: &mut Flags) -> Result<(), String> {
    for a in args.split(',') {
        let (on, name) = match a.as_bytes().first() {
            Some(b'+') => (true, &a[1..]),
            Some(b'-') => (false, &a[1..]),
            _ => {
                return Err(format!(
                    "invalid flag '{a}' in '%{{{args}}}' (expected +FLAG or -FLAG)"
                ));
            }
        };
        match name {
            "Q" => flags.quote = on,
            "X" => flags.hex = on,
            "E" => flags.escape = on,
            _ => {
                return Err(format!(
                    "unknown flag '{a}' in '%{{{args}}}' (sluice supports Q, X and E)"
                ));
            }
        }
    }
    Ok(())
}

/// Compiles a format string (the tokenizer has already removed quotes and backslashes).
pub fn parse(s: &str, origin: super::Origin) -> Result<LogFormat, String> {
    let mut f = LogFormat {
        nodes: Vec::new(),
        req_fetches: 0,
        http_var: None,
        needs_local: false,
        needs_be_src: false,
        needs_log_count: false,
        origin,
    };
    let mut global = Flags::default();
    let mut text = String::new();
    let flush = |text: &mut String, nodes: &mut Vec<Node>| {
        if !text.is_empty() {
            nodes.push(Node::Text(std::mem::take(text).into()));
        }
    };
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b' ' {
            flush(&mut text, &mut f.nodes);
            match f.nodes.last_mut() {
                Some(Node::Sep(n)) => *n += 1,
                _ => f.nodes.push(Node::Sep(1)),
            }
            i += 1;
            continue;
        }
        if c != b'%' {
            let end = s[i..].find([' ', '%']).map_or(s.len(), |e| i + e);
            text.push_str(&s[i..end]);
            i = end;
            continue;
        }
        // '%'
        let at = i;
        i += 1;
        if b.get(i) == Some(&b'%') {
            text.push('%');
            i += 1;
            continue;
        }
        let mut flags = global;
        let mut args = None;
        if b.get(i) == Some(&b'{') {
            let Some(close) = s[i..].find('}') else {
                return Err(format!("missing '}}' after '{}'", &s[at..]));
            };
            let a = &s[i + 1..i + close];
            apply_flags(a, &mut flags)?;
            args = Some(a);
            i += close + 1;
        }
        if b.get(i) == Some(&b'[') {
            // Up to the matching ']' (brackets inside parentheses do not count).
            let mut depth = 0usize;
            let mut end = None;
            for (k, &ch) in b.iter().enumerate().skip(i + 1) {
                match ch {
                    b'(' => depth += 1,
                    b')' => depth = depth.saturating_sub(1),
                    b']' if depth == 0 => {
                        end = Some(k);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(end) = end else {
                return Err(format!("missing ']' after '{}'", &s[at..]));
            };
            let expr = &s[i + 1..end];
            if expr.is_empty() {
                return Err("empty sample fetch '%[]'".into());
            }
            let fetch = SampleFetch::parse(expr)?;
            let slot = fetch.uses_http().then(|| {
                f.req_fetches += 1;
                f.req_fetches - 1
            });
            flush(&mut text, &mut f.nodes);
            f.nodes.push(Node::Fetch { fetch, flags, slot });
            i = end + 1;
            continue;
        }
        let end = b[i..]
            .iter()
            .position(|c| !c.is_ascii_alphanumeric())
            .map_or(b.len(), |e| i + e);
        let name = &s[i..end];
        if name.is_empty() {
            return Err(format!(
                "'%' at offset {at} is not followed by a variable name (write '%%' for a \
                 literal '%')"
            ));
        }
        i = end;
        if name == "o" {
            if args.is_none() {
                return Err("'%o' needs flags, as in '%{+Q}o'".into());
            }
            global = flags;
            continue;
        }
        let Some(&(vname, var, http)) = VARS.iter().find(|(n, _, _)| *n == name) else {
            return Err(format!(
                "unknown variable '%{name}'{}",
                did_you_mean(name, VARS.iter().map(|(n, _, _)| *n).chain(["o"]))
            ));
        };
        if http && f.http_var.is_none() {
            f.http_var = Some(vname);
        }
        match var {
            Var::FeIp | Var::FePort => f.needs_local = true,
            Var::BeSrcIp | Var::BeSrcPort => f.needs_be_src = true,
            Var::LogCount => f.needs_log_count = true,
            _ => {}
        }
        flush(&mut text, &mut f.nodes);
        f.nodes.push(Node::Var(var, flags));
    }
    flush(&mut text, &mut f.nodes);
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<LogFormat, String> {
        parse(
            s,
            super::super::Origin {
                file: "t.cfg".into(),
                line: 1,
            },
        )
    }

    #[test]
    fn nodes() {
        let f = p("%ci:%cp  [%t] %{+Q}r %% x%[src]").unwrap();
        let q = Flags {
            quote: true,
            ..Flags::default()
        };
        let d = Flags::default();
        let n = &f.nodes;
        assert!(matches!(n[0], Node::Var(Var::ClientIp, fl) if fl == d));
        assert!(matches!(&n[1], Node::Text(t) if &**t == ":"));
        assert!(matches!(n[2], Node::Var(Var::ClientPort, _)));
        assert!(matches!(n[3], Node::Sep(2)));
        assert!(matches!(&n[4], Node::Text(t) if &**t == "["));
        assert!(matches!(n[5], Node::Var(Var::Date, _)));
        assert!(matches!(&n[6], Node::Text(t) if &**t == "]"));
        assert!(matches!(n[7], Node::Sep(1)));
        assert!(matches!(n[8], Node::Var(Var::Request, fl) if fl == q));
        assert!(matches!(n[9], Node::Sep(1)));
        assert!(matches!(&n[10], Node::Text(t) if &**t == "%"));
        assert!(matches!(n[11], Node::Sep(1)));
        assert!(matches!(&n[12], Node::Text(t) if &**t == "x"));
        assert!(matches!(n[13], Node::Fetch { slot: None, .. }));
        assert_eq!(n.len(), 14);
        assert_eq!(f.http_var, Some("r"));
        assert_eq!(f.req_fetches, 0);
    }

    #[test]
    fn global_flags_and_slots() {
        let f = p("%{+Q,+E}o %b %{-Q}s %[hdr(host)] %[path] %[ssl_fc_sni] %fi %bp %lc").unwrap();
        let n = &f.nodes;
        assert!(matches!(n[1], Node::Var(Var::Backend, fl) if fl.quote && fl.escape && !fl.hex));
        assert!(matches!(n[3], Node::Var(Var::Server, fl) if !fl.quote && fl.escape));
        assert!(matches!(n[5], Node::Fetch { slot: Some(0), flags, .. } if flags.quote));
        assert!(matches!(n[7], Node::Fetch { slot: Some(1), .. }));
        assert!(matches!(n[9], Node::Fetch { slot: None, .. }));
        assert_eq!(f.req_fetches, 2);
        assert_eq!(f.fetches().count(), 2);
        assert!(f.needs_local && f.needs_be_src && f.needs_log_count);
        assert_eq!(f.http_var, None);
        let f = p("%{+X}ci").unwrap();
        assert!(matches!(f.nodes[0], Node::Var(Var::ClientIp, fl) if fl.hex));
    }

    #[test]
    fn errors() {
        let e = |s: &str| p(s).unwrap_err();
        assert!(e("%xy").contains("unknown variable '%xy'"), "{}", e("%xy"));
        assert!(e("%cpx").contains("unknown variable '%cpx'"));
        assert!(e("%Tx").contains("unknown variable '%Tx'"));
        assert!(
            e("%sslvv").contains("(did you mean 'sslv'?)"),
            "{}",
            e("%sslvv")
        );
        assert!(e("a %").contains("not followed by a variable name"));
        assert!(e("% b").contains("not followed by a variable name"));
        assert!(e("%{+Q").contains("missing '}'"));
        assert!(e("%[src").contains("missing ']'"));
        assert!(e("%[]").contains("empty sample fetch"));
        assert!(e("%{+Z}ci").contains("unknown flag '+Z'"));
        assert!(e("%{Q}ci").contains("invalid flag 'Q'"));
        assert!(e("%o").contains("needs flags"));
        let u = e("%[nosuch]");
        assert!(u.contains("unknown sample fetch 'nosuch'"), "{u}");
        assert!(e("%[path_beg]").contains("unknown sample fetch 'path_beg'"));
        assert!(e("%[src(1)]").contains("takes no argument"));
        assert!(e("%[hdr]").contains("requires a header name"));
        assert!(e("%[src,lowr]").contains("did you mean 'lower'"));
        assert!(e("%[req.ssl_sni]").contains("not supported by sluice"));
    }
}
