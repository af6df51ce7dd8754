//! `log ADDR [len N] [format F] FACILITY [LEVEL [MINLEVEL]]` targets (global and proxies).

use std::path::PathBuf;

use super::super::{LogDest, LogFormat, LogTarget};
use super::did_you_mean;
use super::values::{arg, parse_port, parse_range, resolve_host, split_host_port, strip_family};

pub(super) const FACILITIES: &[&str] = &[
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "auth2",
    "ftp", "ntp", "audit", "alert", "cron2", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

pub(super) const LEVELS: &[&str] = &[
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

/// Parses the words after `log` (`log global` is handled by the callers).
pub(super) fn parse_target(w: &[String]) -> Result<LogTarget, String> {
    let addr = arg(w, 0, "log address")?;
    let dest = dest(addr)?;
    let mut t = LogTarget {
        dest,
        format: LogFormat::Local,
        facility: 0,
        level: 7,
        minlevel: 0,
        maxlen: 1024,
    };
    let mut i = 1;
    loop {
        match w.get(i).map(String::as_str) {
            Some("len") => {
                t.maxlen = parse_range(arg(w, i + 1, "length after 'len'")?, 80, 65535)
                    .map_err(|e| format!("log line length {e}"))?
                    as usize;
                i += 2;
            }
            Some("format") => {
                t.format = match arg(w, i + 1, "format name after 'format'")? {
                    "local" => LogFormat::Local,
                    "rfc3164" => LogFormat::Rfc3164,
                    "rfc5424" => LogFormat::Rfc5424,
                    "short" => LogFormat::Short,
                    "priority" => LogFormat::Priority,
                    "timed" => LogFormat::Timed,
                    "iso" => LogFormat::Iso,
                    "raw" => LogFormat::Raw,
                    f => {
                        let known = [
                            "local", "rfc3164", "rfc5424", "short", "priority", "timed", "iso",
                            "raw",
                        ];
                        return Err(format!(
                            "unknown log format '{f}'{}",
                            did_you_mean(f, known)
                        ));
                    }
                };
                i += 2;
            }
            Some("sample") => {
                return Err("log sampling ('sample') is not supported by sluice".into());
            }
            Some("profile") => {
                return Err("log profiles ('profile') are not supported by sluice".into());
            }
            _ => break,
        }
    }
    let fac = w
        .get(i)
        .ok_or_else(|| format!("missing syslog facility after '{addr}' (e.g. 'local0')"))?;
    t.facility = FACILITIES.iter().position(|f| f == fac).ok_or_else(|| {
        format!(
            "unknown syslog facility '{fac}'{}",
            did_you_mean(fac, FACILITIES.iter().copied())
        )
    })? as u8;
    if let Some(lv) = w.get(i + 1) {
        t.level = level(lv)?;
    }
    if let Some(lv) = w.get(i + 2) {
        t.minlevel = level(lv)?;
    }
    if let Some(x) = w.get(i + 3) {
        return Err(format!("unexpected extra argument '{x}'"));
    }
    Ok(t)
}

fn level(s: &str) -> Result<u8, String> {
    LEVELS
        .iter()
        .position(|l| *l == s)
        .map(|p| p as u8)
        .ok_or_else(|| {
            format!(
                "unknown log level '{s}'{}",
                did_you_mean(s, LEVELS.iter().copied())
            )
        })
}

fn dest(addr: &str) -> Result<LogDest, String> {
    match addr {
        "stdout" | "fd@1" => return Ok(LogDest::Stdout),
        "stderr" | "fd@2" => return Ok(LogDest::Stderr),
        _ => {}
    }
    if addr.starts_with('/') {
        return Ok(LogDest::Unix(PathBuf::from(addr)));
    }
    if let Some(p) = addr.strip_prefix("unix@") {
        if p.is_empty() {
            return Err("missing socket path after 'unix@'".into());
        }
        return Ok(LogDest::Unix(PathBuf::from(p)));
    }
    for unsupported in [
        "fd@",
        "ring@",
        "tcp@",
        "tcp4@",
        "tcp6@",
        "abns@",
        "uxst@",
        "sockpair@",
    ] {
        if addr.starts_with(unsupported) {
            return Err(format!(
                "log address '{addr}': '{unsupported}' targets are not supported by sluice"
            ));
        }
    }
    let (family, rest) = strip_family(addr, true);
    let (host, port) = split_host_port(rest)?;
    if host.is_empty() {
        return Err(format!("missing host in log address '{addr}'"));
    }
    let port = match port {
        Some(p) => parse_port(p, addr)?,
        None => 514,
    };
    Ok(LogDest::Udp(resolve_host(host, port, family)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn targets() {
        let t = parse_target(&w("127.0.0.1 local0")).unwrap();
        assert_eq!(t.dest, LogDest::Udp("127.0.0.1:514".parse().unwrap()));
        assert_eq!(
            (t.facility, t.level, t.minlevel, t.maxlen),
            (16, 7, 0, 1024)
        );
        let t = parse_target(&w(
            "udp@10.0.0.1:1514 len 4096 format rfc5424 local7 info notice",
        ))
        .unwrap();
        assert_eq!(t.dest, LogDest::Udp("10.0.0.1:1514".parse().unwrap()));
        assert_eq!(t.format, LogFormat::Rfc5424);
        assert_eq!(
            (t.facility, t.level, t.minlevel, t.maxlen),
            (23, 6, 5, 4096)
        );
        let t = parse_target(&w("stdout format raw daemon")).unwrap();
        assert_eq!(
            (t.dest, t.format, t.facility),
            (LogDest::Stdout, LogFormat::Raw, 3)
        );
        let t = parse_target(&w("/dev/log local2 err")).unwrap();
        assert_eq!(t.dest, LogDest::Unix("/dev/log".into()));
        assert_eq!(t.level, 3);
        let t = parse_target(&w("[::1]:515 user")).unwrap();
        assert_eq!(t.dest, LogDest::Udp("[::1]:515".parse().unwrap()));
    }

    #[test]
    fn bad_targets() {
        assert_eq!(
            parse_target(&w("127.0.0.1 locl0")).unwrap_err(),
            "unknown syslog facility 'locl0' (did you mean 'local0'?)"
        );
        assert!(
            parse_target(&w("127.0.0.1"))
                .unwrap_err()
                .contains("missing syslog facility")
        );
        assert!(parse_target(&w("127.0.0.1 len 10 local0")).is_err());
        assert!(
            parse_target(&w("ring@buf local0"))
                .unwrap_err()
                .contains("not supported")
        );
        assert!(parse_target(&w("127.0.0.1 local0 info err extra")).is_err());
    }
}
