//! `stats_page`: the HTTP stats page (`stats enable`, `stats uri`, ...) — HAProxy's HTML page
//! for people and its `;csv` export, answered by the proxy itself.
//!
//! It owns URI matching, the page's options (`;csv`, `;up`, `;norefresh`), HTTP Basic
//! authentication against `stats auth`, `stats scope` filtering and the HTML. It reads the
//! counters through `stats` (the CSV rows), so the page, the CSV and the CLI never disagree.
//! It only runs for requests that match a stats URI; the data path pays one prefix compare.

use std::fmt::Write as _;

use crate::backend::Shared;
use crate::config::StatsPage;
use crate::stats::{self, Filter, Row};

/// Whether a request for `uri` with `method` is for the stats page; if so, the rest of the URI
/// after the prefix (where the `;csv`-style options are). GET, HEAD and POST only, as HAProxy.
pub fn matches<'a>(page: &StatsPage, method: &[u8], uri: &'a [u8]) -> Option<&'a [u8]> {
    if !matches!(method, b"GET" | b"HEAD" | b"POST") {
        return None;
    }
    // An absolute-form URI is compared by its path.
    let path = match uri.windows(3).position(|w| w == b"://") {
        Some(i) if uri[0] != b'/' => {
            let rest = &uri[i + 3..];
            &rest[rest.iter().position(|&b| b == b'/').unwrap_or(rest.len())..]
        }
        _ => uri,
    };
    path.strip_prefix(page.uri.as_bytes())
}

/// Options found after the stats URI.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub csv: bool,
    pub up: bool,
    pub norefresh: bool,
}

/// Scans the rest of the URI for `;csv`, `;up` and `;norefresh`, anywhere (as HAProxy does).
pub fn options(rest: &[u8]) -> Options {
    let has = |pat: &[u8]| rest.windows(pat.len()).any(|w| w == pat);
    Options {
        csv: has(b";csv"),
        up: has(b";up"),
        norefresh: has(b";norefresh"),
    }
}

/// Whether an `Authorization` header value carries one of the `user:password` accounts.
pub fn authorized(page: &StatsPage, authorization: Option<&[u8]>) -> bool {
    if page.auth.is_empty() {
        return true;
    }
    let Some(v) = authorization else {
        return false;
    };
    let v = v.trim_ascii();
    let Some(sp) = v.iter().position(|&b| b == b' ') else {
        return false;
    };
    if !v[..sp].eq_ignore_ascii_case(b"basic") {
        return false;
    }
    let Some(creds) = base64_decode(v[sp..].trim_ascii()) else {
        return false;
    };
    page.auth.iter().any(|a| a.as_bytes() == creds.as_slice())
}

/// Standard base64 (padding optional).
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = match s.iter().position(|&c| c == b'=') {
        Some(i) if s[i..].iter().all(|&c| c == b'=') && s[i..].len() <= 2 => &s[..i],
        Some(_) => return None,
        None => s,
    };
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

/// A full HTTP/1.1 response (head, and body unless `head_only`).
fn http_response(
    status: u16,
    headers: &[(&str, String)],
    content_type: &str,
    body: &str,
    head_only: bool,
) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\n",
        crate::http::reason_phrase(status),
        body.len()
    );
    if !content_type.is_empty() {
        let _ = write!(r, "content-type: {content_type}\r\n");
    }
    for (n, v) in headers {
        let _ = write!(r, "{n}: {v}\r\n");
    }
    r.push_str("\r\n");
    if !head_only {
        r.push_str(body);
    }
    r.into_bytes()
}

/// The `401 Unauthorized` challenge (HAProxy's text).
pub fn unauthorized(page: &StatsPage, head_only: bool) -> Vec<u8> {
    http_response(
        401,
        &[(
            "www-authenticate",
            format!("Basic realm=\"{}\"", page.realm),
        )],
        "text/html",
        "<html><body><h1>401 Unauthorized</h1>\nYou need a valid user and password to access \
         this content.\n</body></html>\n",
        head_only,
    )
}

/// `303 See Other` back to the page after a POST (sluice applies no admin action yet:
/// `st=DENY` when `stats admin` does not allow the client, `st=NONE` otherwise).
pub fn post_redirect(page: &StatsPage, rest: &[u8], admin: bool) -> Vec<u8> {
    let o = options(rest);
    let st = if admin { "NONE" } else { "DENY" };
    let loc = format!(
        "{};st={st}{}{}",
        page.uri,
        if o.up { ";up" } else { "" },
        if o.norefresh { ";norefresh" } else { "" }
    );
    http_response(303, &[("location", loc)], "", "", false)
}

/// Which proxies `stats scope` lets the page show (`.` = the serving proxy).
fn in_scope(shared: &Shared, page: &StatsPage, serving: usize, idx: usize) -> bool {
    let name = &shared.cfg.proxies[idx].name;
    page.scope.is_empty()
        || page
            .scope
            .iter()
            .any(|s| if s == "." { idx == serving } else { s == name })
}

/// The page (HTML or CSV) for a GET/HEAD on proxy `serving`'s stats URI.
pub fn render(
    shared: &Shared,
    page: &StatsPage,
    serving: usize,
    rest: &[u8],
    head_only: bool,
) -> Vec<u8> {
    let o = options(rest);
    let mut headers = Vec::new();
    if page.refresh > 0 && !o.norefresh {
        headers.push(("refresh", page.refresh.to_string()));
    }
    if o.csv {
        let mut out = stats::csv_header();
        for i in 0..shared.cfg.proxies.len() {
            if in_scope(shared, page, serving, i) {
                let f = Filter {
                    proxy: Some(i),
                    up_only: o.up,
                    ..Filter::all()
                };
                stats::csv_rows(shared, f, &mut out);
            }
        }
        return http_response(200, &headers, "text/plain", &out, head_only);
    }
    let st = std::str::from_utf8(rest)
        .ok()
        .and_then(|r| r.split(';').find_map(|p| p.strip_prefix("st=")))
        .unwrap_or("");
    let body = html(shared, page, serving, o, st);
    http_response(200, &headers, "text/html", &body, head_only)
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// HAProxy's colours (its stats page CSS), a sticky table header, no JavaScript.
const CSS: &str = "\
body {font-family: arial, helvetica, sans-serif; font-size: 12px; font-weight: normal; color: black; background: white;}
th,td {font-size: 10px;}
h1 {font-size: x-large; margin-bottom: 0.5em;}
h2 {font-family: helvetica, arial; font-size: x-large; font-weight: bold; font-style: italic; color: #6020a0; margin-top: 0em; margin-bottom: 0em;}
h3 {font-family: helvetica, arial; font-size: 16px; font-weight: bold; color: #b00040; background: #e8e8d0; margin-top: 0em; margin-bottom: 0em;}
li {margin-top: 0.25em; margin-right: 2em;}
.hr {margin-top: 0.25em; border-color: black; border-bottom-style: solid;}
.titre {background: #20D0D0; color: #000000; font-weight: bold; text-align: center;}
.frontend {background: #e8e8d0;}
.backend {background: #e8e8d0;}
.active_down {background: #ff9090;}
.active_up {background: #c0ffc0;}
.active_draining {background: #20a0FF;}
.active_no_check {background: #e0e0e0;}
.backup_down {background: #ff9090;}
.backup_up {background: #b0d0ff;}
.backup_draining {background: #cc9900;}
.backup_no_check {background: #e0e0e0;}
.maintain {background: #c07820;}
.msg {background: #ffff80; border: 1px solid gray; padding: 4px; display: inline-block;}
a.px:link, a.px:visited {color: #ffff40; text-decoration: none;}
a.lfsb:link, a.lfsb:visited {color: #000000; text-decoration: none;}
table.tbl {border-collapse: separate; border-spacing: 0; margin-bottom: 1.5em;}
table.tbl td {text-align: right; border-width: 0 1px 1px 0; border-style: solid; padding: 2px 3px; border-color: gray; white-space: nowrap;}
table.tbl td.ac {text-align: center;}
table.tbl td.al {text-align: left;}
table.tbl th {border-width: 0 1px 1px 0; border-style: solid; border-color: gray; white-space: nowrap; padding: 2px 3px; height: 18px; box-sizing: border-box;}
table.tbl tr > :first-child {border-left-width: 1px;}
table.tbl thead th {position: sticky; z-index: 1;}
table.tbl thead tr.px th {top: 0; border-top-width: 1px;}
table.tbl thead tr.grp th {top: 18px; background: #20D0D0;}
table.tbl thead tr.sub th {top: 36px; background: #20D0D0;}
table.tbl th.pxname {background: #b00040; color: #ffff40; font-weight: bold; text-align: left;}
table.lgd {border-collapse: collapse; border-width: 1px; border-style: none none none solid; border-color: black;}
table.lgd td {border-width: 1px; border-style: solid; border-color: gray; padding: 2px;}
table.lgd td.noborder {border-style: none; padding: 2px; white-space: nowrap;}
";

/// Column groups of each proxy table: (group title, [(sub-title, CSV column)]).
const GROUPS: &[(&str, &[(&str, &str)])] = &[
    (
        "Queue",
        &[("Cur", "qcur"), ("Max", "qmax"), ("Limit", "qlimit")],
    ),
    (
        "Sessions",
        &[
            ("Cur", "scur"),
            ("Max", "smax"),
            ("Limit", "slim"),
            ("Total", "stot"),
            ("LbTot", "lbtot"),
        ],
    ),
    ("Bytes", &[("In", "bin"), ("Out", "bout")]),
    ("Denied", &[("Req", "dreq"), ("Resp", "dresp")]),
    (
        "Errors",
        &[("Req", "ereq"), ("Conn", "econ"), ("Resp", "eresp")],
    ),
    ("Warnings", &[("Retr", "wretr"), ("Redis", "wredis")]),
    ("Connections", &[("New", "connect"), ("Reuse", "reuse")]),
];

/// The "Server" group, rendered specially (status colours, durations).
const SERVER_COLS: &[&str] = &["Status", "LastChg", "LastChk", "Wght", "Act", "Bck"];

/// `1d2h`, `3h4m`, `5m6s` or `7s`, as HAProxy writes durations on its page.
fn human_duration(secs: u64) -> String {
    let (d, h, m, s) = (
        secs / 86400,
        (secs % 86400) / 3600,
        (secs % 3600) / 60,
        secs % 60,
    );
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// A link to the page with the given options.
fn link(page: &StatsPage, up: bool, norefresh: bool, csv: bool) -> String {
    let mut s = escape(&page.uri);
    if up {
        s.push_str(";up");
    }
    if norefresh {
        s.push_str(";norefresh");
    }
    if csv {
        s.push_str(";csv");
    }
    s
}

fn html(shared: &Shared, page: &StatsPage, serving: usize, o: Options, st: &str) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let pid = std::process::id();
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|n| n.trim().to_string())
        .unwrap_or_default();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>Statistics Report for \
         sluice on {}</title>\n",
        escape(&node)
    );
    if page.refresh > 0 && !o.norefresh {
        let _ = writeln!(
            h,
            "<meta http-equiv=\"refresh\" content=\"{}\">",
            page.refresh
        );
    }
    let _ = write!(h, "<style>\n{CSS}</style></head>\n<body>\n");
    let _ = writeln!(h, "<h1>sluice</h1>");
    let _ = writeln!(
        h,
        "<h2>Statistics Report for pid {pid} on {}</h2>",
        escape(&node)
    );
    let _ = writeln!(
        h,
        "<hr width=\"100%\" class=\"hr\">\n<h3>&gt; General process information</h3>"
    );
    let up = shared.started.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let cur = shared
        .global_conns
        .load(std::sync::atomic::Ordering::Relaxed);
    let _ = write!(
        h,
        "<table border=\"0\"><tr><td align=\"left\" nowrap width=\"1%\"><p>\
         <b>pid = </b> {pid} (process #1, nbproc = 1)<br>\n\
         <b>uptime = </b> {}<br>\n\
         <b>system limits:</b> maxconn = {}<br>\n\
         <b>current conns = </b> {cur}<br>\n",
        stats::uptime_string(up),
        shared.global_maxconn
    );
    if !page.hide_version {
        let _ = writeln!(
            h,
            "<b>version = </b> sluice {}<br>",
            env!("CARGO_PKG_VERSION")
        );
    }
    h.push_str("</p></td>\n");
    if page.show_legends {
        h.push_str(
            "<td align=\"center\" nowrap><table class=\"lgd\">\
             <tr><td class=\"active_up\">&nbsp;</td><td class=\"noborder\">active UP</td>\
             <td class=\"backup_up\">&nbsp;</td><td class=\"noborder\">backup UP</td></tr>\n\
             <tr><td class=\"active_draining\">&nbsp;</td>\
             <td class=\"noborder\">active UP, draining (DRAIN)</td>\
             <td class=\"backup_draining\">&nbsp;</td>\
             <td class=\"noborder\">backup UP, draining (DRAIN)</td></tr>\n\
             <tr><td class=\"active_down\">&nbsp;</td>\
             <td class=\"noborder\" colspan=\"3\">active or backup DOWN</td></tr>\n\
             <tr><td class=\"active_no_check\">&nbsp;</td>\
             <td class=\"noborder\" colspan=\"3\">not checked</td></tr>\n\
             <tr><td class=\"maintain\">&nbsp;</td><td class=\"noborder\" colspan=\"3\">\
             active or backup DOWN for maintenance (MAINT)</td></tr>\n\
             </table></td>\n",
        );
    }
    h.push_str(
        "<td align=\"left\" valign=\"top\" nowrap width=\"1%\"><b>Display option:</b><ul>\n",
    );
    let _ = writeln!(
        h,
        "<li><a href=\"{}\">{}</a>",
        link(page, !o.up, o.norefresh, false),
        if o.up {
            "Show all servers"
        } else {
            "Hide 'DOWN' servers"
        }
    );
    if page.refresh > 0 {
        let _ = writeln!(
            h,
            "<li><a href=\"{}\">{}</a>",
            link(page, o.up, !o.norefresh, false),
            if o.norefresh {
                "Enable refresh"
            } else {
                "Disable refresh"
            }
        );
    }
    let _ = writeln!(
        h,
        "<li><a href=\"{}\">Refresh now</a>",
        link(page, o.up, o.norefresh, false)
    );
    let _ = writeln!(
        h,
        "<li><a href=\"{}\">CSV export</a>",
        link(page, o.up, true, true)
    );
    h.push_str("</ul></td></tr></table>\n");
    match st {
        "" => {}
        "DENY" => h.push_str("<p class=\"msg\">Action denied.</p>\n"),
        "NONE" => h.push_str(
            "<p class=\"msg\">Nothing has changed (sluice does not apply actions from the \
             page yet: use the stats socket).</p>\n",
        ),
        _ => h.push_str("<p class=\"msg\">Unknown action status.</p>\n"),
    }

    // One table per proxy in scope.
    let mut rows: Vec<Vec<Row>> = (0..shared.cfg.proxies.len()).map(|_| Vec::new()).collect();
    let f = Filter {
        up_only: o.up,
        ..Filter::all()
    };
    stats::for_each_row(shared, f, |i, r| rows[i].push(r));
    let ncols = 1 + GROUPS.iter().map(|(_, c)| c.len()).sum::<usize>() + SERVER_COLS.len();
    for (i, prows) in rows.iter().enumerate() {
        if !in_scope(shared, page, serving, i) {
            continue;
        }
        let name = escape(&shared.cfg.proxies[i].name);
        let _ = write!(
            h,
            "<table class=\"tbl\" width=\"100%\" id=\"px-{name}\">\n<thead>\n\
             <tr class=\"px\"><th class=\"pxname\" colspan=\"{ncols}\">\
             <a name=\"{name}\"></a><a class=\"px\" href=\"#{name}\">{name}</a></th></tr>\n\
             <tr class=\"grp\"><th rowspan=\"2\"></th>"
        );
        for (g, cols) in GROUPS {
            let _ = write!(h, "<th colspan=\"{}\">{g}</th>", cols.len());
        }
        let _ = write!(
            h,
            "<th colspan=\"{}\">Server</th></tr>\n<tr class=\"sub\">",
            SERVER_COLS.len()
        );
        for (_, cols) in GROUPS {
            for (c, _) in *cols {
                let _ = write!(h, "<th>{c}</th>");
            }
        }
        for c in SERVER_COLS {
            let _ = write!(h, "<th>{c}</th>");
        }
        h.push_str("</tr>\n</thead>\n<tbody>\n");
        for r in prows {
            row_html(&mut h, &name, r);
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</body></html>\n");
    h
}

/// One `<tr>`: a FRONTEND, a server or the BACKEND.
fn row_html(h: &mut String, pxname: &str, r: &Row) {
    let sv = r.get("svname");
    let status = r.get("status");
    let backup = r.get("bck") == "1";
    let ty = r.get("type");
    let (class, shown, status_class) = if ty == stats::TYPE_SERVER.to_string() {
        let side = if backup { "backup" } else { "active" };
        match status {
            "MAINT" => ("maintain".to_string(), "MAINT", ""),
            "DOWN" => (format!("{side}_down"), "DOWN", ""),
            "DRAIN" => (format!("{side}_draining"), "DRAIN", ""),
            "no check" => (format!("{side}_no_check"), "no check", ""),
            _ => (format!("{side}_up"), "UP", ""),
        }
    } else if ty == stats::TYPE_FRONTEND.to_string() {
        ("frontend".to_string(), status, "")
    } else {
        let sc = if status == "DOWN" { "active_down" } else { "" };
        ("backend".to_string(), status, sc)
    };
    let sv_e = escape(sv);
    let _ = write!(
        h,
        "<tr class=\"{class}\" id=\"{pxname}/{sv_e}\" data-status=\"{shown}\">\
         <td class=\"al\"><a name=\"{pxname}/{sv_e}\"></a>\
         <a class=\"lfsb\" href=\"#{pxname}/{sv_e}\">{sv_e}</a></td>"
    );
    for (_, cols) in GROUPS {
        for (_, c) in *cols {
            let _ = write!(h, "<td>{}</td>", escape(r.get(c)));
        }
    }
    let _ = write!(h, "<td class=\"ac {status_class}\">{}</td>", escape(shown));
    let lastchg = r.get("lastchg");
    let lastchg = lastchg
        .parse::<u64>()
        .map(human_duration)
        .unwrap_or_default();
    let _ = write!(h, "<td class=\"ac\">{lastchg}</td>");
    let chk = match (r.get("check_status"), r.get("check_code")) {
        (st, "") => st.to_string(),
        (st, code) => format!("{st}/{code}"),
    };
    let _ = write!(h, "<td class=\"al\">{}</td>", escape(&chk));
    for c in ["weight", "act", "bck"] {
        let _ = write!(h, "<td class=\"ac\">{}</td>", escape(r.get(c)));
    }
    h.push_str("</tr>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64() {
        assert_eq!(
            base64_decode(b"YWRtaW46c2VjcmV0").as_deref(),
            Some(&b"admin:secret"[..])
        );
        assert_eq!(base64_decode(b"YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(base64_decode(b"YWI=").as_deref(), Some(&b"ab"[..]));
        assert_eq!(base64_decode(b"YWI").as_deref(), Some(&b"ab"[..]));
        assert_eq!(base64_decode(b"Y"), None);
        assert_eq!(base64_decode(b"YW*="), None);
    }

    #[test]
    fn auth_and_matching() {
        let page = StatsPage {
            uri: "/stats".into(),
            auth: vec!["admin:secret".into()],
            ..StatsPage::default()
        };
        assert!(authorized(&page, Some(b"Basic YWRtaW46c2VjcmV0")));
        assert!(authorized(&page, Some(b"basic  YWRtaW46c2VjcmV0 ")));
        assert!(!authorized(&page, Some(b"Basic YWRtaW46d3Jvbmc=")));
        assert!(!authorized(&page, None));
        assert_eq!(matches(&page, b"GET", b"/stats;csv"), Some(&b";csv"[..]));
        assert_eq!(
            matches(&page, b"GET", b"http://h:80/stats;up"),
            Some(&b";up"[..])
        );
        assert_eq!(matches(&page, b"PUT", b"/stats"), None);
        assert_eq!(matches(&page, b"GET", b"/stat"), None);
        assert_eq!(
            options(b";csv;norefresh"),
            Options {
                csv: true,
                up: false,
                norefresh: true
            }
        );
        assert_eq!(escape("<a&\"b'>"), "&lt;a&amp;&quot;b&#39;&gt;");
        assert_eq!(human_duration(3725), "1h2m");
    }
}
