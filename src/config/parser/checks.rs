//! Health-check keywords of proxies: `option httpchk` and `http-check`. (The per-server
//! `check`, `inter`, `rise`, ... options are parsed with the other server options.)

use super::super::{ExpectKind, HttpCheckExpect, HttpChk};
use super::proxy::Draft;
use super::values::{arg, no_extra};
use super::{KwErr, did_you_mean};
use crate::config::tokenizer::Line;

/// `option httpchk`, `option httpchk URI`, `option httpchk METHOD URI [VERSION]`.
pub(super) fn httpchk(w: &[String]) -> Result<HttpChk, String> {
    let mut c = HttpChk {
        method: "OPTIONS".into(),
        uri: "/".into(),
        version: "HTTP/1.0".into(),
    };
    match w.len() {
        0 => {}
        1 => c.uri = w[0].clone(),
        2 | 3 => {
            c.method = w[0].clone();
            c.uri = w[1].clone();
            if let Some(v) = w.get(2) {
                c.version = v.clone();
            }
        }
        _ => return Err(format!("'option httpchk': unexpected argument '{}'", w[3])),
    }
    if !c.method.bytes().all(|b| b.is_ascii_alphabetic()) || c.method.is_empty() {
        return Err(format!("'option httpchk': invalid method '{}'", c.method));
    }
    if c.uri.bytes().any(|b| b <= b' ') {
        return Err(format!("'option httpchk': invalid URI '{}'", c.uri));
    }
    if !matches!(c.version.as_str(), "HTTP/1.0" | "HTTP/1.1") {
        return Err(format!(
            "'option httpchk': version '{}' is not supported by sluice (HTTP/1.0 or HTTP/1.1)",
            c.version
        ));
    }
    Ok(c)
}

const SUBKEYWORDS: &[&str] = &["expect"];
const UNSUPPORTED_SUB: &[&str] = &[
    "send",
    "connect",
    "send-state",
    "disable-on-404",
    "comment",
    "set-var",
    "set-var-fmt",
    "unset-var",
];

/// `http-check expect [!] status CODES | rstatus RE | string S | rstring RE`.
pub(super) fn http_check(d: &mut Draft, l: &Line) -> Result<(), KwErr> {
    let w = &l.words;
    let sub = arg(w, 1, "'http-check' action")?;
    if UNSUPPORTED_SUB.contains(&sub) {
        return Err(format!("'http-check {sub}' is not supported by sluice yet").into());
    }
    if sub != "expect" {
        return Err(format!(
            "unknown 'http-check' action '{sub}'{}",
            did_you_mean(sub, SUBKEYWORDS.iter().copied())
        )
        .into());
    }
    let mut i = 2;
    let negate = w.get(i).is_some_and(|x| x == "!");
    if negate {
        i += 1;
    }
    let what = arg(w, i, "match ('status', 'rstatus', 'string' or 'rstring')")?;
    let pat = arg(w, i + 1, "pattern")?;
    no_extra(w, i + 2)?;
    let regex = |p: &str| {
        regex::Regex::new(p).map_err(|e| format!("'http-check expect {what}': bad regex: {e}"))
    };
    let kind = match what {
        "status" => ExpectKind::Status(status_list(pat)?),
        "rstatus" => ExpectKind::RStatus(regex(pat)?),
        "string" => ExpectKind::String(pat.to_string()),
        "rstring" => ExpectKind::RString(regex(pat)?),
        "hdr" | "fhdr" | "custom" => {
            return Err(
                format!("'http-check expect {what}' is not supported by sluice yet").into(),
            );
        }
        x => {
            return Err(format!(
                "unknown 'http-check expect' match '{x}'{}",
                did_you_mean(x, ["status", "rstatus", "string", "rstring"])
            )
            .into());
        }
    };
    d.p.options.http_check_expect = Some(HttpCheckExpect { negate, kind });
    d.needs_http(l, "http-check");
    Ok(())
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
