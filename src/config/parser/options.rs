//! `option X` and `no option X`.

use super::super::acl::parse_ipnet;
use super::super::{ForwardFor, HttpConnMode};
use super::proxy::{B, D, Draft, F, allowed};
use super::values::{arg, header_name, no_extra};
use super::{KwErr, did_you_mean};
use crate::config::tokenizer::Line;

/// Supported options, where they apply, and whether they need `mode http`.
const OPTIONS: &[(&str, u8, bool)] = &[
    ("abortonclose", D | B, false),
    ("allbackups", D | B, false),
    ("dontlognull", D | F, false),
    ("dontlog-normal", D | F, false),
    ("log-separate-errors", D | F, false),
    ("logasap", D | F, false),
    ("forwardfor", D | F | B, true),
    ("http-keep-alive", D | F | B, true),
    ("http-server-close", D | F | B, true),
    ("httpclose", D | F | B, true),
    // HAProxy runs HTTP checks on TCP backends too.
    ("httpchk", D | B, false),
    ("httplog", D | F, true),
    ("log-health-checks", D | B, false),
    ("persist", D | B, false),
    ("prefer-last-server", D | B, false),
    ("http-pretend-keepalive", D | B, true),
    ("http-buffer-request", D | F | B, true),
    ("http-use-proxy-header", D | F, true),
    ("http-ignore-probes", D | F, true),
    // Per-listener rows in the stats: accepted with a warning (sluice has none).
    ("socket-stats", D | F, false),
    ("checkcache", D | B, true),
    ("redispatch", D | B, false),
    ("tcp-check", D | B, false),
    ("external-check", D | B, false),
    // Protocol checks: tcp-check rule sets of their own.
    ("redis-check", D | B, false),
    ("ssl-hello-chk", D | B, false),
    ("pgsql-check", D | B, false),
    ("mysql-check", D | B, false),
    ("spop-check", D | B, false),
    ("tcplog", D | F, false),
    ("tcp-smart-accept", D | F, false),
    ("tcp-smart-connect", D | B, false),
    // TCP keep-alive (SO_KEEPALIVE): `tcpka` sets the side(s) the section has.
    ("tcpka", D | F | B, false),
    ("clitcpka", D | F, false),
    ("srvtcpka", D | B, false),
    ("nolinger", D | F | B, false),
    ("contstats", D | F, false),
    // Kernel splicing: sluice copies through its buffers; accepted with a warning.
    ("splice-auto", D | F | B, false),
    ("splice-request", D | F | B, false),
    ("splice-response", D | F | B, false),
];

/// Real HAProxy options that sluice does not implement.
const UNSUPPORTED: &[&str] = &[
    "accept-invalid-http-request",
    "accept-invalid-http-response",
    "disable-h2-upgrade",
    "h1-case-adjust-bogus-client",
    "h1-case-adjust-bogus-server",
    "http-no-delay",
    "http-restrict-req-hdr-names",
    "http_proxy",
    "httpslog",
    "idle-close-on-response",
    "independent-streams",
    "ldap-check",
    "originalto",
    "smtpchk",
    "transparent",
];

/// `words` starts at the option name (after `option` or `no option`).
pub(super) fn option(d: &mut Draft, l: &Line, words: &[String], negate: bool) -> Result<(), KwErr> {
    let prefix = if negate { "no option" } else { "option" };
    let name = arg(words, 0, "option name")?;
    let Some(&(_, mask, http)) = OPTIONS.iter().find(|(n, _, _)| *n == name) else {
        if UNSUPPORTED.contains(&name) {
            return Err(KwErr::Full(format!(
                "keyword 'option {name}' in {} is not supported by sluice",
                d.describe()
            )));
        }
        let hint = match name {
            "forceclose" => " (removed in HAProxy 2.0, use 'option httpclose')".to_string(),
            "http-tunnel" => " (removed in HAProxy 2.1)".to_string(),
            _ => did_you_mean(name, OPTIONS.iter().map(|(n, _, _)| *n)),
        };
        return Err(format!("unknown option '{name}'{hint}").into());
    };
    if !allowed(d, mask) {
        // Every option is allowed in `defaults`: this is a frontend or a backend without the
        // side the option acts on. Ignored with HAProxy's warning.
        let msg = if matches!(name, "httplog" | "tcplog") {
            format!(
                "{} : '{prefix} {name}' directive is ignored in backends.",
                d.describe()
            )
        } else {
            format!(
                "'{name}' ignored because {} has no {} capability.",
                d.describe(),
                super::proxy::missing_side(d)
            )
        };
        crate::config::parser::warn(msg);
        return Ok(());
    }
    if http && !negate {
        d.needs_http(l, &format!("option {name}"));
    }
    if negate
        && matches!(
            name,
            "redis-check" | "ssl-hello-chk" | "pgsql-check" | "mysql-check" | "spop-check"
        )
    {
        return Err(
            format!("negation is not supported for option '{name}' (as in HAProxy)").into(),
        );
    }
    if name.starts_with("splice-") {
        no_extra(words, 1)?;
        if !negate {
            crate::config::parser::warn(format!(
                "'option {name}' has no effect in sluice: it does not splice, data is copied \
                 through its buffers"
            ));
        }
        return Ok(());
    }
    let o = &mut d.p.options;
    if negate {
        no_extra(words, 1)?;
        match name {
            "contstats" => o.contstats = false,
            "abortonclose" => o.abortonclose = false,
            "allbackups" => o.allbackups = false,
            "dontlognull" => o.dontlognull = false,
            "dontlog-normal" => o.dontlog_normal = false,
            "log-separate-errors" => o.log_separate_errors = false,
            "forwardfor" => o.forwardfor = None,
            "httplog" => {
                o.httplog = false;
                o.httplog_clf = false;
            }
            "tcplog" => o.tcplog = false,
            "redispatch" => o.redispatch = false,
            "persist" => o.persist = false,
            "prefer-last-server" => o.prefer_last_server = false,
            "http-pretend-keepalive" => o.http_pretend_keepalive = false,
            "http-buffer-request" => o.http_buffer_request = false,
            "http-use-proxy-header" => o.http_use_proxy_header = false,
            "http-ignore-probes" => o.http_ignore_probes = false,
            "socket-stats" => {}
            "checkcache" => o.checkcache = false,
            "logasap" => o.logasap = false,
            // Back to plain connects only if that was the check type in force.
            "httpchk" | "tcp-check" | "external-check" => {
                let t = match name {
                    "httpchk" => super::super::CheckType::Http,
                    "tcp-check" => super::super::CheckType::Tcp,
                    _ => super::super::CheckType::External,
                };
                if o.check_type == t {
                    o.check_type = super::super::CheckType::Connect;
                }
            }
            "log-health-checks" => o.log_health_checks = false,
            "tcp-smart-accept" => o.tcp_smart_accept = Some(false),
            "tcp-smart-connect" => o.tcp_smart_connect = false,
            "tcpka" => (o.cli_tcpka, o.srv_tcpka) = (false, false),
            "clitcpka" => o.cli_tcpka = false,
            "srvtcpka" => o.srv_tcpka = false,
            "nolinger" => o.nolinger = false,
            // As in HAProxy, `no option X` returns to the default connection mode only if X is
            // the current one (`option httpclose` + `no option http-server-close` keeps close).
            "http-server-close" | "httpclose" | "http-keep-alive" => {
                let m = match name {
                    "http-server-close" => HttpConnMode::ServerClose,
                    "httpclose" => HttpConnMode::Close,
                    _ => HttpConnMode::KeepAlive,
                };
                if o.http_conn_mode == m {
                    o.http_conn_mode = HttpConnMode::KeepAlive;
                }
            }
            _ => unreachable!(),
        }
        return Ok(());
    }
    match name {
        "httplog" => {
            o.httplog_clf = match words.get(1).map(String::as_str) {
                None => false,
                Some("clf") => {
                    no_extra(words, 2)?;
                    true
                }
                Some(x) => return Err(format!("unexpected argument '{x}' (expected 'clf')").into()),
            };
            o.httplog = true;
            o.tcplog = false;
            o.log_format = None;
        }
        "forwardfor" => o.forwardfor = Some(forwardfor(words)?),
        "redispatch" => {
            o.redispatch_after = match words.get(1) {
                None => -1,
                Some(n) => {
                    no_extra(words, 2)?;
                    n.parse::<i32>().map_err(|_| {
                        format!("'{n}' is not a retry interval (an integer: 1 = every retry, -1 = the last one, 0 = only where the server does not matter)")
                    })?
                }
            };
            // 0 ends the redispatches that count retries; like HAProxy 2.6, a backend that
            // does not hash still moves retries to its other servers.
            o.redispatch = true;
        }
        "httpchk" => {
            o.httpchk = Some(super::checks::httpchk(&words[1..])?);
            o.check_type = super::super::CheckType::Http;
        }
        "redis-check" | "ssl-hello-chk" | "pgsql-check" | "mysql-check" | "spop-check" => {
            o.tcp_checks = super::checks::protocol_check(name, &words[1..])?;
            o.protocol_check = true;
            o.check_type = super::super::CheckType::Tcp;
            // `tcp-check` lines after it replace these rules, as they replace inherited ones.
            d.checks_own[1] = false;
        }
        _ => {
            no_extra(words, 1)?;
            match name {
                "abortonclose" => o.abortonclose = true,
                "allbackups" => o.allbackups = true,
                "persist" => o.persist = true,
                "prefer-last-server" => o.prefer_last_server = true,
                "http-pretend-keepalive" => o.http_pretend_keepalive = true,
                "http-ignore-probes" => o.http_ignore_probes = true,
                "socket-stats" => crate::config::parser::warn(
                    "'option socket-stats' has no effect in sluice: its stats have no \
                     per-listener rows (the frontend's row counts every bind)"
                        .to_string(),
                ),
                "http-buffer-request" => o.http_buffer_request = true,
                "http-use-proxy-header" => o.http_use_proxy_header = true,
                "checkcache" => o.checkcache = true,
                "logasap" => o.logasap = true,
                "dontlognull" => o.dontlognull = true,
                "dontlog-normal" => o.dontlog_normal = true,
                "log-separate-errors" => o.log_separate_errors = true,
                "tcplog" => {
                    o.tcplog = true;
                    o.httplog = false;
                    o.httplog_clf = false;
                    o.log_format = None;
                }
                "log-health-checks" => o.log_health_checks = true,
                "tcp-smart-accept" => o.tcp_smart_accept = Some(true),
                "tcp-smart-connect" => o.tcp_smart_connect = true,
                "tcpka" => (o.cli_tcpka, o.srv_tcpka) = (true, true),
                "clitcpka" => o.cli_tcpka = true,
                "srvtcpka" => o.srv_tcpka = true,
                "nolinger" => o.nolinger = true,
                "contstats" => o.contstats = true,
                "tcp-check" => o.check_type = super::super::CheckType::Tcp,
                "external-check" => o.check_type = super::super::CheckType::External,
                "http-server-close" => o.http_conn_mode = HttpConnMode::ServerClose,
                "httpclose" => o.http_conn_mode = HttpConnMode::Close,
                "http-keep-alive" => o.http_conn_mode = HttpConnMode::KeepAlive,
                _ => unreachable!(),
            }
        }
    }
    Ok(())
}

/// `forwardfor [except NET] [header NAME] [if-none]`.
fn forwardfor(words: &[String]) -> Result<ForwardFor, String> {
    let mut ff = ForwardFor {
        except: None,
        header: "X-Forwarded-For".to_string(),
        if_none: false,
    };
    let mut i = 1;
    while i < words.len() {
        match words[i].as_str() {
            "except" => {
                ff.except = Some(parse_ipnet(arg(words, i + 1, "network after 'except'")?)?);
                i += 1;
            }
            "header" => {
                ff.header = header_name(arg(words, i + 1, "header name after 'header'")?)?;
                i += 1;
            }
            "if-none" => ff.if_none = true,
            x => {
                return Err(format!(
                    "unknown 'option forwardfor' argument '{x}' (expected except, header or \
                     if-none){}",
                    did_you_mean(x, ["except", "header", "if-none"])
                ));
            }
        }
        i += 1;
    }
    Ok(ff)
}
