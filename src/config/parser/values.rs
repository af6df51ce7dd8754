//! Value syntaxes shared by several keywords: numbers, durations, sizes, addresses, and the
//! literal strings that stand where HAProxy accepts a log-format expression.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Returns `words[i]` or an error naming what is missing.
pub(super) fn arg<'a>(words: &'a [String], i: usize, what: &str) -> Result<&'a str, String> {
    words
        .get(i)
        .map(String::as_str)
        .ok_or_else(|| format!("missing {what}"))
}

/// Errors if `words` has more than `n` words (the keyword included).
pub(super) fn no_extra(words: &[String], n: usize) -> Result<(), String> {
    match words.get(n) {
        None => Ok(()),
        Some(w) => Err(format!("unexpected extra argument '{w}'")),
    }
}

/// A non-negative integer (decimal).
pub(super) fn parse_u64(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{s}' is not a valid number"));
    }
    s.parse::<u64>().map_err(|_| format!("'{s}' is too large"))
}

pub(super) fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_u64(s)?;
    u32::try_from(v).map_err(|_| format!("'{s}' is too large (maximum {})", u32::MAX))
}

/// An integer in `min..=max`.
pub(super) fn parse_range(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let v = parse_u64(s)?;
    if v < min || v > max {
        return Err(format!("'{s}' is out of range (expected {min} to {max})"));
    }
    Ok(v)
}

/// HAProxy's time syntax: a number with an optional unit `us`, `ms` (default), `s`, `m`, `h`
/// or `d`. Only one unit is allowed. Limited to 2^31-1 milliseconds, as in HAProxy.
pub(super) fn parse_time(s: &str) -> Result<Duration, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!(
            "'{s}' is not a valid time (expected a number with an optional unit us, ms, s, m, \
             h or d)"
        ));
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| format!("time '{s}' is too large"))?;
    let rest = &s[digits..];
    const UNITS: [(&str, u64); 6] = [
        ("us", 1),
        ("ms", 1_000),
        ("s", 1_000_000),
        ("m", 60_000_000),
        ("h", 3_600_000_000),
        ("d", 86_400_000_000),
    ];
    let (unit, us_per) = if rest.is_empty() {
        ("", 1_000)
    } else if let Some(&(u, per)) = UNITS.iter().find(|(u, _)| rest.starts_with(u)) {
        (u, per)
    } else {
        return Err(format!(
            "invalid unit '{rest}' in time '{s}' (expected us, ms, s, m, h or d; only one unit \
             is allowed)"
        ));
    };
    if let Some(c) = rest[unit.len()..].chars().next() {
        // HAProxy 2.6 takes the first unit and warns (`1h30m` is one hour).
        super::super::parser::warn(format!(
            "unexpected character '{c}' after the timer value '{s}', only \
             (us=microseconds,ms=milliseconds,s=seconds,m=minutes,h=hours,d=days) are \
             supported. This will be reported as an error in next versions."
        ));
    }
    let us = n
        .checked_mul(us_per)
        .filter(|&us| us <= (i32::MAX as u64) * 1000)
        .ok_or_else(|| {
            format!("time '{s}' is too large (maximum 2147483647ms, about 24.8 days)")
        })?;
    Ok(Duration::from_micros(us))
}

/// A size in bytes with an optional `k`, `m` or `g` suffix (powers of 1024).
pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let bad =
        || format!("'{s}' is not a valid size (expected a number with an optional k, m or g)");
    if digits == 0 {
        return Err(bad());
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| format!("size '{s}' is too large"))?;
    let mult: u64 = match s[digits..].to_ascii_lowercase().as_str() {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

/// A literal where HAProxy takes a log-format string: `%%` is a literal `%`; any other `%`
/// starts an expression, which sluice cannot evaluate yet.
pub(super) fn literal_format(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('%') {
            out.push('%');
        } else {
            return Err(format!(
                "'{s}': log-format expressions are not supported by sluice yet (write '%%' for a \
                 literal '%')"
            ));
        }
    }
    Ok(out)
}

/// A log-format string where HAProxy takes one (header values, redirect targets): literal
/// when it holds no expression, else compiled.
pub(super) fn lf_value(s: &str) -> Result<crate::config::LfValue, String> {
    if let Ok(lit) = literal_format(s) {
        return Ok(crate::config::LfValue::Lit(lit));
    }
    let format = crate::config::logformat::parse(s, crate::config::Origin::default())?;
    if format.needs_local {
        crate::config::acl::LOCAL_ADDR_USED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(crate::config::LfValue::Fmt {
        text: s.into(),
        format: Box::new(format),
    })
}

/// Validates an HTTP header field name (an RFC 9110 token).
pub(super) fn header_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("'{s}' is not a valid header name"))
    }
}

/// An address family forced by an `ipv4@` / `ipv6@` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Any,
    V4,
    V6,
}

/// Splits `HOST:PORT`, `[V6]:PORT`, `V6:PORT` (last colon) or `HOST` (no port). The host has
/// its brackets removed. Returns `(host, Some(port text))`.
pub(super) fn split_host_port(s: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = s.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return Err(format!("missing ']' in address '{s}'"));
        };
        let host = &rest[..end];
        let after = &rest[end + 1..];
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(p))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("unexpected '{after}' after ']' in address '{s}'")),
        };
    }
    match s.rfind(':') {
        Some(i) => {
            let host = &s[..i];
            // `::1` alone would otherwise be host `:` and port `1`.
            if host.ends_with(':') && host.len() > 1 && !host.ends_with("::") {
                return Err(format!("invalid address '{s}'"));
            }
            Ok((host, Some(&s[i + 1..])))
        }
        None => Ok((s, None)),
    }
}

pub(super) fn parse_port(p: &str, addr: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!("invalid port '{p}' in address '{addr}'")),
    }
}

/// Resolves a host for `family` (`""` and `*` are the wildcard address). Hostnames are resolved
/// now with the system resolver; the first matching result wins.
pub(super) fn resolve_host(host: &str, port: u16, family: Family) -> Result<SocketAddr, String> {
    if host.is_empty() || host == "*" {
        let ip = match family {
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        return Ok(SocketAddr::new(ip, port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return match (family, ip) {
            (Family::V4, IpAddr::V6(_)) => Err(format!("'{host}' is not an IPv4 address")),
            (Family::V6, IpAddr::V4(v4)) => {
                Ok(SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), port))
            }
            _ => Ok(SocketAddr::new(ip, port)),
        };
    }
    let valid_name = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !valid_name {
        return Err(format!("invalid address '{host}'"));
    }
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("could not resolve address '{host}': {e}"))?;
    addrs
        .into_iter()
        .find(|a| match family {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        })
        .ok_or_else(|| format!("could not resolve address '{host}': no suitable address"))
}

/// Strips an `ipv4@`, `ipv6@` (or, with `udp`, `udp@`, `udp4@`, `udp6@`) prefix.
pub(super) fn strip_family(s: &str, udp: bool) -> (Family, &str) {
    let prefixes: &[(&str, Family)] = if udp {
        &[
            ("ipv4@", Family::V4),
            ("ipv6@", Family::V6),
            ("udp@", Family::Any),
            ("udp4@", Family::V4),
            ("udp6@", Family::V6),
        ]
    } else {
        &[
            ("ipv4@", Family::V4),
            ("ipv6@", Family::V6),
            ("tcp@", Family::Any),
            ("tcp4@", Family::V4),
            ("tcp6@", Family::V6),
        ]
    };
    for (p, f) in prefixes {
        if let Some(rest) = s.strip_prefix(p) {
            return (*f, rest);
        }
    }
    (Family::Any, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("500"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_time("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_time("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_time("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_time("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_time("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_time("10ms"), Ok(Duration::from_millis(10)));
        // HAProxy 2.6: the first unit counts, with a warning.
        let _ = crate::config::parser::take_warnings();
        assert_eq!(parse_time("1m30s"), Ok(Duration::from_secs(60)));
        let w = crate::config::parser::take_warnings();
        assert!(
            w.len() == 1 && w[0].contains("unexpected character '3'"),
            "{w:?}"
        );
        assert_eq!(parse_time("5mss"), Ok(Duration::from_millis(5)));
        assert!(parse_time("5x").unwrap_err().contains("only one unit"));
        assert!(parse_time("s").is_err());
        assert!(parse_time("-5").is_err());
        assert!(parse_time("25d").unwrap_err().contains("too large"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16384"), Ok(16384));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("1t").is_err());
        assert!(parse_size("k").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(literal_format("a%%b").as_deref(), Ok("a%b"));
        assert_eq!(literal_format("plain").as_deref(), Ok("plain"));
        assert!(literal_format("%[src]").is_err());
        assert!(literal_format("50%").is_err());
    }

    #[test]
    fn host_port() {
        assert_eq!(split_host_port("1.2.3.4:80"), Ok(("1.2.3.4", Some("80"))));
        assert_eq!(split_host_port("[::1]:80"), Ok(("::1", Some("80"))));
        assert_eq!(split_host_port(":::80"), Ok(("::", Some("80"))));
        assert_eq!(split_host_port(":80"), Ok(("", Some("80"))));
        assert_eq!(split_host_port("host"), Ok(("host", None)));
        assert_eq!(split_host_port("[::1]"), Ok(("::1", None)));
        assert_eq!(
            resolve_host("", 80, Family::V6),
            Ok("[::]:80".parse().unwrap())
        );
        assert_eq!(
            resolve_host("localhost", 80, Family::V4),
            Ok("127.0.0.1:80".parse().unwrap())
        );
        assert!(resolve_host("::1", 80, Family::V4).is_err());
    }
}
