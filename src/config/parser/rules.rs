//! Rule keywords: `use_backend`, `http-request`, `http-response`, `redirect` and
//! `tcp-request`.
//!
//! Conditions (`if`/`unless`) are parsed against the ACLs declared so far in the section, as in
//! HAProxy. Values that HAProxy reads as log-format strings are accepted only when they are
//! literal (`%%` allowed); sluice does not evaluate `%[...]` expressions yet and says so.

use super::super::acl::parse_cond;
use super::super::{
    Cond, Deny, HeaderAction, HttpRequestAction, HttpRequestRule, HttpResponseAction,
    HttpResponseRule, Origin, Re, Redirect, RedirectKind, RedirectRule, Reply, Service,
    StickAction, StickRule, TcpAction, TcpRequestRule, UriPart, UriRewrite,
};
use super::proxy::Draft;
use super::values::{header_name, lf_value, literal_format, parse_range};
use super::{KwErr, did_you_mean};
use crate::config::tokenizer::Line;

/// `http-request` actions sluice implements.
const REQUEST_ACTIONS: &[&str] = &[
    "allow",
    "set-log-level",
    "set-header",
    "add-header",
    "del-header",
    "replace-header",
    "replace-value",
    "deny",
    "silent-drop",
    "return",
    "redirect",
    "use-service",
    "auth",
    "set-path",
    "set-pathq",
    "set-query",
    "set-uri",
    "replace-path",
    "replace-pathq",
    "replace-uri",
    "cache-use",
    "capture",
    "send-spoe-group",
];
/// `http-response` actions sluice implements.
const RESPONSE_ACTIONS: &[&str] = &[
    "return",
    "set-log-level",
    "set-header",
    "add-header",
    "del-header",
    "replace-header",
    "replace-value",
    "deny",
    "silent-drop",
    "allow",
    "set-status",
    "cache-store",
    "capture",
    "send-spoe-group",
    "redirect",
];
/// Real HAProxy actions sluice does not implement (reported as unsupported, not unknown).
const UNSUPPORTED_ACTIONS: &[&str] = &[
    "disable-l7-retry",
    "do-resolve",
    "early-hint",
    "normalize-uri",
    "reject",
    "send-spoe-group",
    "set-dst",
    "set-dst-port",
    "set-mark",
    "set-method",
    "set-nice",
    "set-priority-class",
    "set-priority-offset",
    "set-src",
    "set-src-port",
    "set-timeout",
    "set-tos",
    "strict-mode",
    "tarpit",
    "wait-for-body",
    "wait-for-handshake",
];

/// Parses `set-var(NAME[,COND...]) EXPR`, `set-var-fmt(NAME[,COND...]) FMT` and
/// `unset-var(NAME)` (`None`: `action` is not one). `payload`: the expression may read the
/// client's first data (`tcp-request content`).
pub(super) fn var_action(
    action: &str,
    args: &[String],
    payload: bool,
) -> Result<Option<crate::config::VarAction>, String> {
    use crate::config::VarAction;
    use crate::vars::{SetCond, VarName};
    let Some((kw, inner)) = action.split_once('(') else {
        if matches!(action, "set-var" | "set-var-fmt" | "unset-var") {
            return Err(format!(
                "'{action}' expects a variable name in parentheses, as in '{action}(txn.name)'"
            ));
        }
        return Ok(None);
    };
    if !matches!(kw, "set-var" | "set-var-fmt" | "unset-var") {
        return Ok(None);
    }
    let Some(inner) = inner.strip_suffix(')') else {
        return Err(format!("'{action}': missing closing ')'"));
    };
    let mut parts = inner.split(',').map(str::trim);
    let name = VarName::parse(parts.next().unwrap_or(""))?;
    let conds = parts.map(SetCond::parse).collect::<Result<Box<[_]>, _>>()?;
    if kw == "unset-var" {
        if !conds.is_empty() {
            return Err(format!("'{action}': unset-var takes no condition"));
        }
        if let Some(a) = args.first() {
            return Err(format!("'{action}': unexpected argument '{a}'"));
        }
        return Ok(Some(VarAction::Unset(name)));
    }
    if conds.len() > 4 {
        return Err(format!("'{action}': at most 4 conditions"));
    }
    let [value] = args else {
        return Err(format!(
            "'{kw}' expects one {} after the variable name",
            if kw == "set-var" {
                "sample expression"
            } else {
                "format string"
            }
        ));
    };
    Ok(Some(if kw == "set-var" {
        let expr = if payload {
            crate::config::SampleFetch::parse_with_payload(value)
        } else {
            crate::config::SampleFetch::parse(value)
        }
        .map_err(|e| format!("'{kw}': {e}"))?;
        VarAction::Set { name, conds, expr }
    } else {
        let fmt = crate::config::TextFormat::parse(value).map_err(|e| format!("'{kw}': {e}"))?;
        VarAction::SetFmt {
            name,
            conds,
            fmt: std::sync::Arc::new(fmt),
        }
    }))
}

/// The stick-table actions, shared by `tcp-request` and `http-request`.
const STICK_ACTIONS: &[&str] = &[
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "sc-inc-gpc0(N)",
    "sc-inc-gpc1(N)",
    "sc-set-gpt0(N)",
];

/// The slot number of `sc-inc-gpc0(N)`-style actions.
fn sc_slot(action: &str, inner: &str) -> Result<usize, String> {
    match inner.trim().parse::<usize>() {
        Ok(n) if n < crate::stick::SLOTS => Ok(n),
        _ => Err(format!(
            "'{action}': invalid stick counter '{inner}' (expected 0 to {})",
            crate::stick::SLOTS - 1
        )),
    }
}

/// Parses a stick-table action (`None`: `action` is not one). `args` are the words after
/// the action, up to the condition.
fn stick_action(d: &Draft, action: &str, args: &[String]) -> Result<Option<StickAction>, String> {
    if let Some(n) = action.strip_prefix("track-sc") {
        if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
            return Ok(None);
        }
        let slot = match n.parse::<usize>() {
            Ok(n) if n < crate::stick::SLOTS => n,
            _ => {
                return Err(format!(
                    "'{action}': sluice has {} stick counters (track-sc0 to track-sc{}), as \
                     HAProxy by default",
                    crate::stick::SLOTS,
                    crate::stick::SLOTS - 1
                ));
            }
        };
        let Some(key) = args.first() else {
            return Err(format!(
                "'{action}' expects a key sample, as in '{action} src'"
            ));
        };
        let key = crate::config::SampleFetch::parse(key).map_err(|e| format!("'{action}': {e}"))?;
        let table = match &args[1..] {
            [] => {
                if d.is_defaults {
                    return Err(format!(
                        "'{action}' needs a 'table' argument in a defaults section"
                    ));
                }
                crate::stick::reference(&d.p.name)
            }
            [t, name] if t == "table" => crate::stick::reference(name),
            [t] if t == "table" => {
                return Err(format!("'{action}': missing table name after 'table'"));
            }
            [x, ..] => {
                return Err(format!(
                    "'{action}': unexpected argument '{x}' (expected 'table NAME', 'if' or 'unless')"
                ));
            }
        };
        return Ok(Some(StickAction::Track { slot, key, table }));
    }
    let Some((name, rest)) = action.split_once('(') else {
        return Ok(None);
    };
    if !matches!(name, "sc-inc-gpc0" | "sc-inc-gpc1" | "sc-set-gpt0") {
        return Ok(None);
    }
    let Some(inner) = rest.strip_suffix(')') else {
        return Err(format!("'{action}': missing ')'"));
    };
    let slot = sc_slot(action, inner)?;
    Ok(Some(match name {
        "sc-inc-gpc0" | "sc-inc-gpc1" => {
            if let Some(x) = args.first() {
                return Err(format!("'{action}': unexpected argument '{x}'"));
            }
            let gpc = if name.ends_with('0') {
                crate::stick::Data::Gpc0
            } else {
                crate::stick::Data::Gpc1
            };
            StickAction::IncGpc { slot, gpc }
        }
        _ => {
            let value = match args {
                [v] => v.parse::<i64>().map_err(|_| {
                    format!(
                        "'{action} {v}': only an integer value is supported by sluice (sample \
                         expressions are not)"
                    )
                })?,
                [] => return Err(format!("'{action}' expects a value")),
                [_, x, ..] => return Err(format!("'{action}': unexpected argument '{x}'")),
            };
            StickAction::SetGpt0 { slot, value }
        }
    }))
}

fn origin(l: &Line) -> Origin {
    Origin {
        file: l.file.clone(),
        line: l.line,
    }
}

/// Splits `words` at the first `if`/`unless`: (action words, condition). Only `http-response`
/// and `http-after-response` rules see a response (`status`, `res.hdr`).
fn split_cond(d: &Draft, words: &[String]) -> Result<(usize, Option<Cond>), String> {
    let r = match words.iter().position(|w| w == "if" || w == "unless") {
        None => (words.len(), None),
        Some(i) => (i, Some(parse_cond(&words[i..], &d.acls)?)),
    };
    let on_response = words[0] == "http-response"
        || words[0] == "http-after-response"
        || (words[0] == "stick" && words.get(1).is_some_and(|k| k == "store-response"));
    if !on_response && r.1.as_ref().is_some_and(Cond::uses_response) {
        return Err(
            "the condition reads the response ('status', 'res.hdr', 'shdr', ...), \
                    which only 'http-response' and 'http-after-response' rules see"
                .to_string(),
        );
    }
    Ok(r)
}

/// `use_backend NAME [if|unless COND]`.
pub(super) fn use_backend(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let (end, cond) = split_cond(d, w)?;
    if end < 2 {
        return Err("missing backend name".to_string().into());
    }
    if end > 2 {
        return Err(format!(
            "unexpected argument '{}' (expected 'if' or 'unless' after the backend name)",
            w[2]
        )
        .into());
    }
    let name = &w[1];
    // HTTP samples are fine in `mode tcp` too: they read the request head the session's
    // first data holds, as in HAProxy.
    let dynamic = if name.contains('%') {
        Some(std::sync::Arc::new(crate::config::TextFormat::parse(name)?))
    } else {
        None
    };
    d.use_backends
        .push((name.clone(), dynamic, cond, origin(l)));
    Ok(())
}

fn action_error(action: &str, known: &[&str]) -> KwErr {
    if UNSUPPORTED_ACTIONS.contains(&action) {
        KwErr::Reason(format!("action '{action}' is not supported by sluice"))
    } else {
        KwErr::Reason(format!(
            "unknown action '{action}' (supported: {}){}",
            known.join(", "),
            did_you_mean(action, known.iter().copied())
        ))
    }
}

/// `set-header|add-header NAME VALUE` / `del-header NAME`. `args` excludes the action word.
fn header_action(action: &str, args: &[String]) -> Result<HeaderAction, String> {
    if matches!(action, "replace-header" | "replace-value") {
        let [name, re, fmt] = args else {
            return Err(format!(
                "'{action}' expects a header name, a regex and a replacement"
            ));
        };
        let regex = regex::bytes::Regex::new(re)
            .map_err(|e| format!("'{action}': invalid regex '{re}': {e}"))?;
        return Ok(HeaderAction::Replace {
            name: header_name(name)?,
            regex: crate::config::Re(regex),
            value: lf_value(fmt)?,
            each_value: action == "replace-value",
        });
    }
    let want = if action == "del-header" { 1 } else { 2 };
    if args.len() < want {
        return Err(if want == 1 {
            format!("'{action}' expects a header name")
        } else {
            format!("'{action}' expects a header name and a value")
        });
    }
    if action == "del-header" {
        return del_header(args);
    }
    if args.len() > want {
        return Err(format!(
            "'{action}': unexpected argument '{}' (quote values that contain spaces)",
            args[want]
        ));
    }
    let name = header_name(&args[0])?;
    Ok(match action {
        "set-header" => HeaderAction::SetHeader {
            name,
            value: lf_value(&args[1])?,
        },
        _ => HeaderAction::AddHeader {
            name,
            value: lf_value(&args[1])?,
        },
    })
}

/// `del-header NAME [-m str|beg|end|sub|reg]`. HAProxy takes any NAME; one that no field
/// can have (`^Server:.*$`, a regex written without `-m reg`) is kept, with a warning, as it
/// never matches.
fn del_header(args: &[String]) -> Result<HeaderAction, String> {
    use crate::config::NameMatch;
    let how = match args {
        [_] => NameMatch::Str,
        [_, m, meth] if m == "-m" => match meth.as_str() {
            "str" => NameMatch::Str,
            "beg" => NameMatch::Beg,
            "end" => NameMatch::End,
            "sub" => NameMatch::Sub,
            "reg" => NameMatch::Reg(crate::config::Re(
                regex::bytes::Regex::new(&args[0])
                    .map_err(|e| format!("'del-header': invalid regex '{}': {e}", args[0]))?,
            )),
            m => {
                return Err(format!(
                    "'del-header': unknown matching method '{m}' (expected str, beg, end, \
                     sub or reg)"
                ));
            }
        },
        [_, m] if m == "-m" => {
            return Err("'del-header': '-m' expects str, beg, end, sub or reg".into());
        }
        [] => return Err("'del-header' expects a header name".into()),
        [_, x, ..] => {
            return Err(format!(
                "'del-header': unexpected argument '{x}' (expected '-m METHOD', 'if' or \
                 'unless')"
            ));
        }
    };
    let name = args[0].clone();
    if !matches!(how, NameMatch::Reg(_)) && header_name(&name).is_err() {
        crate::config::parser::warn(format!(
            "'del-header': '{name}' is not a valid header name, so this rule never removes \
             anything (for a regex, add '-m reg')"
        ));
    }
    Ok(HeaderAction::DelHeader { name, how })
}

fn status_arg(args: &[String], i: usize, what: &str, lo: u64, hi: u64) -> Result<u16, String> {
    let v = args
        .get(i + 1)
        .ok_or_else(|| format!("'{what}' expects a status code"))?;
    Ok(parse_range(v, lo, hi)? as u16)
}

/// `deny [deny_status|status N] [REPLY]` (`status` is HAProxy 2.2+'s spelling): without
/// reply options, the status's error page.
fn deny(args: &[String], default_status: u16) -> Result<Deny, String> {
    let reply = reply("deny", args, default_status)?;
    let page_only = reply.content_type.is_none()
        && reply.body.is_empty()
        && reply.headers.is_empty()
        && reply.formats.is_none()
        && reply.raw.is_none();
    Ok(Deny {
        status: reply.status,
        reply: (!page_only).then_some(reply),
    })
}

/// The reply of `return` and `deny`: `[status N] [content-type T] [string S | lf-string S |
/// file F | lf-file F] [hdr N V]...` (`deny` also spells the status `deny_status`).
fn reply(what: &str, args: &[String], default_status: u16) -> Result<Reply, String> {
    let mut status = default_status;
    let mut content_type = None;
    let mut body: Option<Vec<u8>> = None;
    let mut headers = Vec::new();
    let mut formats: Option<Box<crate::config::ReplyFormats>> = None;
    let mut raw: Option<Vec<u8>> = None;
    let mut i = 0;
    let need = |i: usize, a: &str| -> Result<&String, String> {
        args.get(i + 1)
            .ok_or_else(|| format!("'{what}': '{a}' expects an argument"))
    };
    let mut known = vec![
        "status",
        "content-type",
        "string",
        "lf-string",
        "file",
        "lf-file",
        "errorfile",
        "errorfiles",
        "hdr",
    ];
    if what == "deny" {
        known.push("deny_status");
    }
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "status" | "deny_status" if known.contains(&a) => {
                status = status_arg(args, i, a, 200, 599)?;
                i += 2;
            }
            "content-type" => {
                content_type = Some(literal_format(need(i, a)?)?);
                i += 2;
            }
            "string" | "lf-string" | "file" | "lf-file" => {
                if body.is_some() || raw.is_some() {
                    return Err(format!(
                        "'{what}': only one of 'string', 'lf-string', 'file' and 'lf-file' may \
                         be given"
                    ));
                }
                let v = need(i, a)?;
                let mut lf = |text: &str| -> Result<Vec<u8>, String> {
                    match lf_value(text)? {
                        crate::config::LfValue::Lit(t) => Ok(t.into_bytes()),
                        f => {
                            formats.get_or_insert_with(Default::default).body = Some(f);
                            Ok(Vec::new())
                        }
                    }
                };
                body = Some(match a {
                    "string" => v.as_bytes().to_vec(),
                    "lf-string" => lf(v)?,
                    _ => {
                        let b = std::fs::read(v)
                            .map_err(|e| format!("'{what}': cannot read file '{v}': {e}"))?;
                        if a == "lf-file" {
                            lf(&String::from_utf8_lossy(&b))?
                        } else {
                            b
                        }
                    }
                });
                i += 2;
            }
            "hdr" => {
                let (Some(n), Some(v)) = (args.get(i + 1), args.get(i + 2)) else {
                    return Err(format!("'{what}': 'hdr' expects a header name and a value"));
                };
                let n = header_name(n)?;
                let lower = n.to_ascii_lowercase();
                if matches!(
                    lower.as_str(),
                    "content-length" | "content-type" | "transfer-encoding" | "connection"
                ) {
                    return Err(format!(
                        "'{what}': header '{n}' cannot be set with 'hdr' (sluice sets it)"
                    ));
                }
                match lf_value(v)? {
                    crate::config::LfValue::Lit(t) => headers.push((n, t)),
                    f => {
                        formats
                            .get_or_insert_with(Default::default)
                            .headers
                            .push((headers.len(), f));
                        headers.push((n, String::new()));
                    }
                }
                i += 3;
            }
            "errorfile" | "errorfiles" => {
                if body.is_some() || raw.is_some() {
                    return Err(format!(
                        "'{what}': only one of 'string', 'lf-string', 'file', 'lf-file', \
                         'errorfile' and 'errorfiles' may be given"
                    ));
                }
                let v = need(i, a)?;
                raw = Some(if a == "errorfile" {
                    std::fs::read(v)
                        .map_err(|e| format!("'{what}': cannot read file '{v}': {e}"))?
                } else {
                    let pages = crate::errorfile::section(v, &[status]).ok_or_else(|| {
                        format!(
                            "'{what}': unknown http-errors section '{v}' (declare it before \
                             this line)"
                        )
                    })?;
                    match pages.into_iter().next() {
                        Some((_, page)) => page,
                        None => {
                            return Err(format!(
                                "'{what}': http-errors '{v}' has no page for status {status} \
                                 (give 'status' first)"
                            ));
                        }
                    }
                });
                i += 2;
            }
            "default-errorfiles" => {
                return Err(format!(
                    "'{what}': 'default-errorfiles' is not supported by sluice (use \
                     'errorfile FILE', or 'deny' for the error page)"
                ));
            }
            _ => {
                return Err(format!(
                    "'{what}': unknown argument '{a}'{}",
                    did_you_mean(a, known.iter().copied())
                ));
            }
        }
    }
    if body.is_some() && content_type.is_none() {
        return Err(format!(
            "'{what}': a 'content-type' is required with a body"
        ));
    }
    if content_type.is_some() && body.is_none() {
        return Err(format!(
            "'{what}': 'content-type' given without 'string' or 'file'"
        ));
    }
    if body.is_some() && matches!(status, 204 | 304) {
        return Err(format!("'{what}': status {status} cannot have a body"));
    }
    Ok(Reply {
        status,
        content_type,
        body: body.unwrap_or_default(),
        headers,
        formats,
        raw,
    })
}

/// `set-log-level LEVEL|silent`: the syslog level (`None` for silent).
fn log_level(args: &[String]) -> Result<Option<u8>, String> {
    let [l] = args else {
        return Err("'set-log-level' expects a level (emerg ... debug) or 'silent'".into());
    };
    if l == "silent" {
        return Ok(None);
    }
    match super::logs::LEVELS.iter().position(|x| x == l) {
        Some(i) => Ok(Some(i as u8)),
        None => Err(format!(
            "'set-log-level': unknown level '{l}' (expected 'silent' or one of {})",
            super::logs::LEVELS.join(", ")
        )),
    }
}

/// The reply of `http-error` (as `return`'s).
pub(super) fn reply_for(what: &str, args: &[String], status: u16) -> Result<Reply, String> {
    reply(what, args, status)
}

/// `set-path|set-pathq|set-query|set-uri FMT` and `replace-path|replace-pathq|replace-uri
/// REGEX FMT`.
fn rewrite(action: &str, args: &[String]) -> Result<UriRewrite, String> {
    let (what, replace) = match action.split_once('-') {
        Some(("replace", w)) => (w, true),
        Some((_, w)) => (w, false),
        None => unreachable!("rewrite actions have a dash"),
    };
    let part = match what {
        "path" => UriPart::Path,
        "pathq" => UriPart::PathQ,
        "query" => UriPart::Query,
        _ => UriPart::Uri,
    };
    let want = if replace { 2 } else { 1 };
    if args.len() != want {
        return Err(if replace {
            format!("'{action}' expects a regular expression and a replacement")
        } else {
            format!("'{action}' expects one value (quote values that contain spaces)")
        });
    }
    let regex = if replace {
        Some(Re(regex::bytes::Regex::new(&args[0]).map_err(|e| {
            format!("'{action}': invalid regular expression '{}': {e}", args[0])
        })?))
    } else {
        None
    };
    Ok(UriRewrite {
        part,
        regex,
        value: lf_value(&args[want - 1])?,
    })
}

/// `send-spoe-group ENGINE GROUP`: resolved when the proxy's section ends.
fn spoe_group(args: &[String]) -> Result<crate::spoe::GroupRef, String> {
    match args {
        [e, g] => Ok(crate::spoe::GroupRef {
            engine_name: e.as_str().into(),
            group_name: g.as_str().into(),
            engine: usize::MAX,
            group: usize::MAX,
        }),
        _ => Err("'send-spoe-group' expects an engine name and a group name".into()),
    }
}

/// `redirect location|prefix|scheme TARGET [code N] [drop-query] [append-slash]`.
fn redirect(args: &[String]) -> Result<HttpRequestAction, String> {
    // HAProxy takes the type and the options in any order (`redirect code 301 location /x`).
    let mut kind_target: Option<(RedirectKind, String)> = None;
    let mut rd = Redirect {
        kind: RedirectKind::Location,
        target: Default::default(),
        code: 302,
        drop_query: false,
        append_slash: false,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            k @ ("location" | "prefix" | "scheme") => {
                if kind_target.is_some() {
                    return Err(format!(
                        "'redirect': '{k}' given after another redirect type"
                    ));
                }
                let kind = match k {
                    "location" => RedirectKind::Location,
                    "prefix" => RedirectKind::Prefix,
                    _ => RedirectKind::Scheme,
                };
                let t = args
                    .get(i + 1)
                    .ok_or_else(|| format!("'redirect {k}' expects a target"))?;
                kind_target = Some((kind, t.clone()));
                i += 2;
            }
            "code" => {
                let c = status_arg(args, i, "code", 0, 999)?;
                if !matches!(c, 301 | 302 | 303 | 307 | 308) {
                    return Err(format!(
                        "'redirect': code {c} is not a redirect (expected 301, 302, 303, 307 or \
                         308)"
                    ));
                }
                rd.code = c;
                i += 2;
            }
            "drop-query" => {
                rd.drop_query = true;
                i += 1;
            }
            "append-slash" => {
                rd.append_slash = true;
                i += 1;
            }
            o @ ("set-cookie" | "clear-cookie" | "ignore-empty") => {
                return Err(format!(
                    "'redirect': option '{o}' is not supported by sluice"
                ));
            }
            o => {
                return Err(format!(
                    "'redirect': unknown type or option '{o}' (expected 'location', 'prefix' or \
                     'scheme', then options){}",
                    did_you_mean(
                        o,
                        [
                            "location",
                            "prefix",
                            "scheme",
                            "code",
                            "drop-query",
                            "append-slash"
                        ]
                    )
                ));
            }
        }
    }
    let Some((kind, target)) = kind_target else {
        return Err("'redirect' expects 'location', 'prefix' or 'scheme'".into());
    };
    rd.kind = kind;
    rd.target = lf_value(&target)?;
    Ok(HttpRequestAction::Redirect(rd))
}

/// `use-service NAME`: one of sluice's built-in services.
fn use_service(args: &[String]) -> Result<HttpRequestAction, String> {
    let names = || {
        Service::ALL
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(name) = args.first() else {
        return Err(format!(
            "'use-service' expects a service name (sluice provides: {})",
            names()
        ));
    };
    if let Some(lua) = name.strip_prefix("lua.") {
        crate::lua::service(lua)?;
        if let Some(extra) = args.get(1) {
            return Err(format!(
                "'use-service {name}': unexpected argument '{extra}' (expected 'if' or 'unless')"
            ));
        }
        return Ok(HttpRequestAction::UseService(Service::Lua(lua.into())));
    }
    let Some((_, svc)) = Service::ALL.iter().find(|(n, _)| n == name).cloned() else {
        return Err(format!(
            "'use-service': unknown service '{name}' (sluice provides: {})",
            names()
        ));
    };
    if let Some(extra) = args.get(1) {
        return Err(format!(
            "'use-service {name}': unexpected argument '{extra}' (expected 'if' or 'unless')"
        ));
    }
    Ok(HttpRequestAction::UseService(svc))
}

/// `capture EXPR len N` (request rules of a frontend: a new slot) or `capture EXPR id N` (a
/// slot declared before, by `declare capture` or an earlier rule, of this proxy).
fn capture(
    d: &mut Draft,
    args: &[String],
    request: bool,
) -> Result<crate::config::CaptureAction, String> {
    let [expr, how, n] = args else {
        return Err("expects 'capture SAMPLE len N' or 'capture SAMPLE id N'".into());
    };
    let expr = crate::config::SampleFetch::parse(expr)?;
    let n = parse_range(n, 0, 65535)? as usize;
    let slots = if request {
        &mut d.p.capture_req
    } else {
        &mut d.p.capture_rsp
    };
    let slot = match how.as_str() {
        "len" if request && !d.is_defaults && d.p.kind.has_frontend() => {
            if n == 0 {
                return Err("'capture ... len' expects a length of at least 1".into());
            }
            slots.push(crate::config::CaptureSlot {
                header: None,
                len: n,
            });
            slots.len() - 1
        }
        "len" => {
            return Err(
                "'capture ... len' declares a slot of a frontend ('http-response capture' and \
                 backends use 'id' with 'declare capture')"
                    .into(),
            );
        }
        "id" if n < slots.len() => n,
        "id" => {
            return Err(format!(
                "'capture ... id {n}': this proxy has no {} capture slot {n} (declare it first)",
                if request { "request" } else { "response" }
            ));
        }
        x => {
            return Err(format!(
                "expects 'len' or 'id' after the sample (got '{x}')"
            ));
        }
    };
    Ok(crate::config::CaptureAction { expr, slot })
}

/// `cache-use NAME`, `cache-store NAME`: the `cache` section (declared before or after).
fn cache_name(what: &str, args: &[String]) -> Result<crate::cache::Use, String> {
    match args {
        [name] => Ok(crate::cache::reference(name)),
        [] => Err(format!("'{what}' expects a cache name")),
        [_, extra, ..] => Err(format!(
            "'{what}': unexpected argument '{extra}' (expected 'if' or 'unless')"
        )),
    }
}

/// `http-request ACTION ARGS... [if|unless COND]`.
pub(super) fn http_request(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let Some(action) = w.get(1).map(String::as_str) else {
        return Err(format!("missing action (one of {})", REQUEST_ACTIONS.join(", ")).into());
    };
    let (end, cond) = split_cond(d, w)?;
    let args = &w[2..end];
    // Stick-table and variable actions are shared with `tcp-request`.
    let shared = match stick_action(d, action, args)? {
        Some(a) => Some(HttpRequestAction::Stick(a)),
        None => var_action(action, args, false)?.map(HttpRequestAction::SetVar),
    };
    let shared = match shared {
        Some(a) => Some(a),
        None => pat_edit(action, args)?.map(HttpRequestAction::PatEdit),
    };
    if let Some(action) = shared {
        d.needs_http(l, "http-request");
        d.p.http_request.push(HttpRequestRule {
            origin: origin(l),
            action,
            cond,
        });
        return Ok(());
    }
    if let Some(name) = action.strip_prefix("lua.") {
        let a = crate::lua::action(name, args, crate::lua::Kind::HttpReq)?;
        d.needs_http(l, "http-request");
        d.p.http_request.push(HttpRequestRule {
            origin: origin(l),
            action: HttpRequestAction::Lua(a),
            cond,
        });
        return Ok(());
    }
    if !REQUEST_ACTIONS.contains(&action) {
        return Err(action_error(action, REQUEST_ACTIONS));
    }
    let action = match action {
        "set-log-level" => HttpRequestAction::SetLogLevel(log_level(args)?),
        "deny" => HttpRequestAction::Deny(deny(args, 403)?),
        "silent-drop" => {
            no_args("silent-drop", args)?;
            HttpRequestAction::SilentDrop
        }
        "allow" => {
            no_args("allow", args)?;
            HttpRequestAction::Allow
        }
        "return" => HttpRequestAction::Return(reply("return", args, 200)?),
        "redirect" => redirect(args)?,
        "use-service" => use_service(args)?,
        "cache-use" => HttpRequestAction::CacheUse(cache_name("cache-use", args)?),
        "capture" => HttpRequestAction::Capture(capture(d, args, true)?),
        "send-spoe-group" => HttpRequestAction::SendSpoeGroup(spoe_group(args)?),
        "auth" => HttpRequestAction::Auth {
            realm: match args {
                [] => None,
                [k, r] if k == "realm" => Some(literal_format(r)?),
                _ => {
                    return Err("'auth' expects nothing or 'realm <realm>'"
                        .to_string()
                        .into());
                }
            },
        },
        a @ ("set-path" | "set-pathq" | "set-query" | "set-uri" | "replace-path"
        | "replace-pathq" | "replace-uri") => HttpRequestAction::Rewrite(rewrite(a, args)?),
        a => HttpRequestAction::Header(header_action(a, args)?),
    };
    d.needs_http(l, "http-request");
    d.p.http_request.push(HttpRequestRule {
        origin: origin(l),
        action,
        cond,
    });
    Ok(())
}

/// `redirect location|prefix|scheme TARGET [code N] [OPTIONS] [if|unless COND]`: the proxy
/// keyword, the same redirect as `http-request redirect`, in its own rule list.
pub(super) fn redirect_rule(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let (end, cond) = split_cond(d, w)?;
    let HttpRequestAction::Redirect(redirect) = redirect(&w[1..end])? else {
        unreachable!("redirect() builds a redirect");
    };
    d.needs_http(l, "redirect");
    d.p.redirects.push(RedirectRule {
        origin: origin(l),
        redirect,
        cond,
    });
    Ok(())
}

/// `tcp-request connection|content accept|reject [if|unless COND]` and `tcp-request
/// inspect-delay TIME`.
pub(super) fn tcp_request(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    use super::proxy::{F, allowed};
    let w = &l.words;
    let kinds = "'connection', 'content' or 'inspect-delay'";
    let Some(kind) = w.get(1).map(String::as_str) else {
        return Err(format!("expects {kinds}").into());
    };
    match kind {
        "inspect-delay" => {
            let t = super::values::parse_time(super::values::arg(w, 2, "a delay")?)?;
            super::values::no_extra(w, 3)?;
            d.p.inspect_delay = Some(t);
            return Ok(());
        }
        "connection" | "content" => {}
        "session" => {
            return Err("'tcp-request session' rules are not supported by sluice"
                .to_string()
                .into());
        }
        k => {
            return Err(format!(
                "unknown rule type '{k}' (expected {kinds}){}",
                did_you_mean(k, ["connection", "content", "inspect-delay"])
            )
            .into());
        }
    }
    if kind == "connection" && !allowed(d, F) {
        return Err(
            "'tcp-request connection' rules only apply to frontends (and listen)"
                .to_string()
                .into(),
        );
    }
    let Some(action) = w.get(2).map(String::as_str) else {
        return Err(format!("'tcp-request {kind}' expects 'accept' or 'reject'").into());
    };
    let (end, cond) = split_cond(d, w)?;
    let action = match action {
        "accept" => TcpAction::Accept,
        "reject" => TcpAction::Reject,
        "silent-drop" => TcpAction::SilentDrop,
        "switch-mode" if kind == "content" => switch_mode(d, &w[3..end.max(3)])?,
        a if a.starts_with("lua.") && kind == "content" => TcpAction::Lua(crate::lua::action(
            &a[4..],
            &w[3..end.max(3)],
            crate::lua::Kind::TcpReq,
        )?),
        a => match stick_action(d, a, &w[3..end.max(3)])? {
            Some(s) => TcpAction::Stick(s),
            None => match var_action(a, &w[3..end.max(3)], kind == "content")? {
                Some(v) => TcpAction::SetVar(v),
                None => {
                    let mut known = vec![
                        "accept",
                        "reject",
                        "silent-drop",
                        "set-var(NAME)",
                        "set-var-fmt(NAME)",
                        "unset-var(NAME)",
                    ];
                    known.extend(STICK_ACTIONS);
                    if kind == "content" {
                        known.push("switch-mode http");
                    }
                    return Err(format!(
                    "action '{a}' of 'tcp-request {kind}' is not supported by sluice (supported: \
                     {}){}",
                    known.join(", "),
                    did_you_mean(a, known.iter().copied())
                )
                .into());
                }
            },
        },
    };
    if matches!(
        action,
        TcpAction::Accept | TcpAction::Reject | TcpAction::SilentDrop
    ) && end != 3
    {
        return Err(format!("unexpected argument '{}' after '{}'", w[3], w[2]).into());
    }
    if kind == "connection"
        && let TcpAction::Stick(StickAction::Track { key, .. }) = &action
        && key.uses_http()
    {
        return Err(format!(
            "'tcp-request connection {}': the key '{}' reads the HTTP request, which is not \
             there yet when a connection opens",
            w[2],
            key.text()
        )
        .into());
    }
    if kind == "connection" && cond.as_ref().is_some_and(|c| c.needs_payload()) {
        return Err(
            "'tcp-request connection' rules cannot inspect the client's data (use \
                    'tcp-request content')"
                .to_string()
                .into(),
        );
    }
    let rule = TcpRequestRule {
        origin: origin(l),
        action,
        cond,
    };
    if kind == "connection" {
        d.p.tcp_connection.push(rule);
    } else {
        d.p.tcp_content.push(rule);
    }
    Ok(())
}

/// `tcp-request content switch-mode http [proto h1|h2]`: only a frontend can turn its
/// session into HTTP (a `listen` section would send it to its own `mode tcp` servers).
fn switch_mode(d: &Draft, args: &[String]) -> Result<TcpAction, KwErr> {
    use crate::stream::http2::BindProto;
    // HAProxy asks for the frontend capability (a `listen` section has it); in `mode http`
    // the rule only stops the rules, the stream being HTTP already.
    if !d.p.kind.has_frontend() || d.is_defaults {
        return Err(
            "'switch-mode' is only available in a frontend or a listen section"
                .to_string()
                .into(),
        );
    }
    match args.first().map(String::as_str) {
        Some("http") => {}
        Some(m) => {
            return Err(
                format!("'switch-mode': unknown mode '{m}' (only 'http' is supported)").into(),
            );
        }
        None => return Err("'switch-mode' expects 'http'".to_string().into()),
    }
    let proto = match &args[1..] {
        [] => BindProto::Auto,
        [k, v] if k == "proto" => match v.as_str() {
            "h1" => BindProto::H1,
            "h2" => BindProto::H2,
            p => {
                return Err(
                    format!("'switch-mode http': unknown proto '{p}' (expected h1 or h2)").into(),
                );
            }
        },
        [k] if k == "proto" => {
            return Err("'switch-mode http proto' expects h1 or h2"
                .to_string()
                .into());
        }
        [x, ..] => {
            return Err(format!(
                "'switch-mode http': unexpected argument '{x}' (expected 'proto')"
            )
            .into());
        }
    };
    Ok(TcpAction::SwitchMode(proto))
}

/// `http-response ACTION ARGS... [if|unless COND]`.
pub(super) fn http_response(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    crate::config::acl::SampleFetch::on_response(|| http_response_rule(d, l))
}

/// `http-after-response ACTION ARGS... [if|unless COND]`: HAProxy's header, status and
/// variable actions.
pub(super) fn http_after_response(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let action = l.words.get(1).map(String::as_str).unwrap_or("");
    let ok = AFTER_RESPONSE_ACTIONS.contains(&action)
        || action.starts_with("set-var(")
        || action.starts_with("set-var-fmt(")
        || action.starts_with("unset-var(");
    if !ok {
        if ["capture", "strict-mode"].contains(&action) {
            // (`capture` there needs slots of the frontend filled after the response.)
            return Err(format!("action '{action}' is not supported by sluice").into());
        }
        return Err(format!(
            "unknown action '{action}' (supported: {}, set-var(), set-var-fmt(), unset-var()){}",
            AFTER_RESPONSE_ACTIONS.join(", "),
            did_you_mean(action, AFTER_RESPONSE_ACTIONS.iter().copied())
        )
        .into());
    }
    let n = d.p.http_response.len();
    crate::config::acl::SampleFetch::on_response(|| http_response_rule(d, l))?;
    // Parsed as an http-response rule; moved to its own list.
    let rule = d.p.http_response.remove(n);
    d.p.http_after_response.push(rule);
    Ok(())
}

/// `http-after-response` actions sluice implements (and the `*-var()` ones).
const AFTER_RESPONSE_ACTIONS: &[&str] = &[
    "add-header",
    "allow",
    "del-header",
    "replace-header",
    "replace-value",
    "set-header",
    "set-status",
];

fn http_response_rule(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let Some(action) = w.get(1).map(String::as_str) else {
        return Err(format!("missing action (one of {})", RESPONSE_ACTIONS.join(", ")).into());
    };
    if ["set-map(", "del-map(", "add-acl(", "del-acl("]
        .iter()
        .any(|p| action.starts_with(p))
    {
        let (end, cond) = split_cond(d, w)?;
        let e = pat_edit(action, &w[2..end])?.expect("one of the four, by its name");
        d.needs_http(l, &l.words[0]);
        d.p.http_response.push(HttpResponseRule {
            origin: origin(l),
            action: HttpResponseAction::PatEdit(e),
            cond,
        });
        return Ok(());
    }
    if let Some(name) = action.strip_prefix("lua.") {
        let (end, cond) = split_cond(d, w)?;
        let a = crate::lua::action(name, &w[2..end], crate::lua::Kind::HttpRes)?;
        d.needs_http(l, &l.words[0]);
        d.p.http_response.push(HttpResponseRule {
            origin: origin(l),
            action: HttpResponseAction::Lua(a),
            cond,
        });
        return Ok(());
    }
    if !RESPONSE_ACTIONS.contains(&action) && !action.contains("-var") {
        if ["track-sc", "sc-inc-gpc", "sc-set-gpt"]
            .iter()
            .any(|p| action.starts_with(p))
        {
            return Err(format!(
                "action '{action}' is not supported by sluice in 'http-response' (stick-table \
                 actions are, in 'http-request' and 'tcp-request')"
            )
            .into());
        }
        return Err(action_error(action, RESPONSE_ACTIONS));
    }
    let (end, cond) = split_cond(d, w)?;
    let action = match action {
        a if var_action(a, &w[2..end], false)?.is_some() => HttpResponseAction::SetVar(
            var_action(a, &w[2..end], false)?.expect("checked just above"),
        ),
        "deny" => HttpResponseAction::Deny(deny(&w[2..end], 502)?),
        "silent-drop" => {
            no_args("silent-drop", &w[2..end])?;
            HttpResponseAction::SilentDrop
        }
        "allow" => {
            no_args("allow", &w[2..end])?;
            HttpResponseAction::Allow
        }
        "set-status" => set_status(&w[2..end])?,
        "return" => HttpResponseAction::Return(reply("return", &w[2..end], 200)?),
        "redirect" => match redirect(&w[2..end])? {
            HttpRequestAction::Redirect(rd) if rd.kind == crate::config::RedirectKind::Location => {
                HttpResponseAction::Redirect(rd)
            }
            _ => {
                return Err(
                    "only 'location' redirects are possible on a response (as in HAProxy)"
                        .to_string()
                        .into(),
                );
            }
        },
        "set-log-level" => HttpResponseAction::SetLogLevel(log_level(&w[2..end])?),
        "cache-store" => HttpResponseAction::CacheStore(cache_name("cache-store", &w[2..end])?),
        "capture" => HttpResponseAction::Capture(capture(d, &w[2..end], false)?),
        "send-spoe-group" => HttpResponseAction::SendSpoeGroup(spoe_group(&w[2..end])?),
        a => HttpResponseAction::Header(header_action(a, &w[2..end])?),
    };
    d.needs_http(l, &l.words[0]);
    d.p.http_response.push(HttpResponseRule {
        origin: origin(l),
        action,
        cond,
    });
    Ok(())
}

/// `stick on|match|store-request|store-response PATTERN [table NAME] [if|unless COND]`.
pub(super) fn stick(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let kinds = "'on', 'match', 'store-request' or 'store-response'";
    let (matches, stores) = match w.get(1).map(String::as_str) {
        Some("on") => (true, true),
        Some("match") => (true, false),
        Some("store-request" | "store-response") => (false, true),
        Some(k) => {
            return Err(format!(
                "unknown stick rule '{k}' (expected {kinds}){}",
                did_you_mean(k, ["on", "match", "store-request", "store-response"])
            )
            .into());
        }
        None => return Err(format!("expects {kinds}").into()),
    };
    let on_response = w[1] == "store-response";
    let (end, cond) = split_cond(d, w)?;
    let Some(key) = w.get(2).filter(|_| end > 2) else {
        return Err(format!(
            "'stick {}' expects a pattern, as in 'stick {} src'",
            w[1], w[1]
        )
        .into());
    };
    use crate::config::SampleFetch;
    let key = if on_response {
        // Read from the response head, as `http-response` rules read it.
        SampleFetch::on_response(|| SampleFetch::parse(key))?
    } else {
        match SampleFetch::parse(key) {
            Ok(k) => k,
            Err(_)
                if SampleFetch::on_response(|| SampleFetch::parse(key))
                    .is_ok_and(|k| k.uses_response()) =>
            {
                return Err(format!(
                    "'stick {}': the pattern reads the response, which only 'stick \
                     store-response' sees",
                    w[1]
                )
                .into());
            }
            Err(e) => return Err(e.into()),
        }
    };
    let table = match &w[3..end] {
        [] => crate::stick::reference(&d.p.name),
        [t, name] if t == "table" => crate::stick::reference(name),
        [x, ..] => {
            return Err(format!(
                "unexpected argument '{x}' (expected 'table NAME', 'if' or 'unless')"
            )
            .into());
        }
    };
    if on_response {
        // The response is read as HTTP: in `mode tcp` there is none to read.
        d.needs_http_because(
            l,
            "stick store-response",
            "sluice reads the response as HTTP, which requires 'mode http'",
        );
    } else if key.uses_http() {
        // No inspection waits for a `stick` pattern's data in `mode tcp`.
        d.needs_http_because(
            l,
            "stick",
            "its pattern reads the HTTP request, which requires 'mode http'",
        );
    }
    d.p.sticks.push(StickRule {
        origin: origin(l),
        matches,
        stores,
        on_response,
        key,
        table,
        cond,
    });
    Ok(())
}

/// An action that takes no argument.
fn no_args(action: &str, args: &[String]) -> Result<(), KwErr> {
    match args.first() {
        Some(a) => Err(format!("'{action}': unexpected argument '{a}'").into()),
        None => Ok(()),
    }
}

/// `set-map(FILE) KEY VALUE`, `del-map(FILE) KEY`, `add-acl(FILE) KEY`, `del-acl(FILE) KEY`
/// (`None`: `action` is none of them). The file is read like a map or ACL file using it, and
/// must exist (HAProxy accepts a file no rule reads, and then changes nothing).
fn pat_edit(action: &str, args: &[String]) -> Result<Option<crate::config::PatEdit>, KwErr> {
    use crate::config::PatOp;
    let Some((kw, rest)) = action.split_once('(') else {
        return Ok(None);
    };
    let op = match kw {
        "set-map" => PatOp::SetMap,
        "del-map" => PatOp::DelMap,
        "add-acl" => PatOp::AddAcl,
        "del-acl" => PatOp::DelAcl,
        _ => return Ok(None),
    };
    let path = match rest.strip_suffix(')') {
        Some(p) if !p.is_empty() => p,
        _ => return Err(format!("'{kw}' expects a file name in parentheses").into()),
    };
    let want = if op == PatOp::SetMap { 2 } else { 1 };
    if args.len() != want {
        return Err(format!(
            "'{kw}' expects {}",
            if want == 2 {
                "a key and a value (log-format strings)"
            } else {
                "a key (a log-format string)"
            }
        )
        .into());
    }
    let is_map = matches!(op, PatOp::SetMap | PatOp::DelMap);
    let file = crate::map::load(path, is_map, if is_map { "map" } else { "acl" })?;
    Ok(Some(crate::config::PatEdit {
        op,
        file,
        key: lf_value(&args[0])?,
        value: match args.get(1) {
            Some(v) => lf_value(v)?,
            None => Default::default(),
        },
    }))
}

/// `set-status CODE [reason TEXT]` (CODE from 100 to 999, as HAProxy takes it).
fn set_status(args: &[String]) -> Result<crate::config::HttpResponseAction, KwErr> {
    let usage =
        || "'set-status' expects a status code from 100 to 999, then optionally 'reason <text>'";
    let status = match args.first().map(|a| a.parse::<u16>()) {
        Some(Ok(n)) if (100..=999).contains(&n) => n,
        _ => return Err(usage().to_string().into()),
    };
    let reason = match &args[1..] {
        [] => None,
        [k, r] if k == "reason" && !r.contains(['\r', '\n']) => Some(r.clone()),
        _ => return Err(usage().to_string().into()),
    };
    Ok(crate::config::HttpResponseAction::SetStatus { status, reason })
}
