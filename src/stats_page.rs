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

/// Standard base64, padding optional (what browsers and curl send either way).
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const B64: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    B64.decode(s).ok()
}

/// A full HTTP/1.1 response (head, and body unless `head_only`).
pub fn http_response(
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

/// The admin actions the page offers (HAProxy's form values and labels).
const ACTIONS_HTML: &str = "<option value=\"\"></option>\
<option value=\"ready\">Set state to READY</option>\
<option value=\"drain\">Set state to DRAIN</option>\
<option value=\"maint\">Set state to MAINT</option>\
<option value=\"dhlth\">Health: disable checks</option>\
<option value=\"ehlth\">Health: enable checks</option>\
<option value=\"hrunn\">Health: force UP</option>\
<option value=\"hnolb\">Health: force NOLB</option>\
<option value=\"hdown\">Health: force DOWN</option>\
<option value=\"shutdown\">Kill Sessions</option>";

/// Largest admin form accepted (HAProxy is bounded by its buffer too).
pub const MAX_POST: u64 = 16384;

/// Applies a POSTed admin action (`body`: `None` when the request was too large or chunked)
/// and answers `303 See Other` back to the page with the outcome in `;st=`, as HAProxy.
/// `kill` closes the sessions of a server (it needs the workers: the caller provides it).
pub fn post(
    shared: &Shared,
    page: &StatsPage,
    rest: &[u8],
    body: Result<&[u8], &'static str>,
    admin: bool,
    kill: &dyn Fn(usize, usize),
) -> Vec<u8> {
    let o = options(rest);
    let st = if !admin {
        "DENY"
    } else {
        match body {
            Err(st) => st,
            Ok(body) => apply(shared, &crate::http::urlencoded_pairs(body), kill),
        }
    };
    let loc = format!(
        "{};st={st}{}{}",
        page.uri,
        if o.up { ";up" } else { "" },
        if o.norefresh { ";norefresh" } else { "" }
    );
    http_response(303, &[("location", loc)], "", "", false)
}

/// Runs `action` on every server `s` of backend `b`: the status code for the page.
fn apply(
    shared: &Shared,
    form: &[(String, Option<String>)],
    kill: &dyn Fn(usize, usize),
) -> &'static str {
    use crate::cli::{AdminState, set_health, set_state};
    let get = |k: &str| {
        form.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_deref().unwrap_or(""))
    };
    let (Some(b), Some(action)) = (get("b"), get("action")) else {
        return "ERRP";
    };
    let Some(bi) = crate::cli::find_backend(shared, b) else {
        return "ERRP";
    };
    if !matches!(
        action,
        "ready" | "drain" | "maint" | "dhlth" | "ehlth" | "hrunn" | "hnolb" | "hdown" | "shutdown"
    ) {
        return "ERRP";
    }
    let be = shared.backend(bi);
    let names: Vec<&str> = form
        .iter()
        .filter(|(n, _)| n == "s")
        .map(|(_, v)| v.as_deref().unwrap_or(""))
        .collect();
    if names.is_empty() {
        return "NONE";
    }
    let mut done = 0;
    for name in &names {
        let Some((si, s)) = be.servers.by_name(name) else {
            continue;
        };
        let ok = match action {
            "ready" => set_state(be, s, AdminState::Ready),
            "drain" => set_state(be, s, AdminState::Drain),
            "maint" => set_state(be, s, AdminState::Maint),
            "dhlth" => set_health(shared, bi, si, "disable"),
            "ehlth" => set_health(shared, bi, si, "enable"),
            "hrunn" => set_health(shared, bi, si, "up"),
            "hnolb" => set_health(shared, bi, si, "stopping"),
            "hdown" => set_health(shared, bi, si, "down"),
            _ => {
                kill(bi, si);
                true
            }
        };
        done += usize::from(ok);
    }
    match done {
        0 => "ERRP",
        n if n == names.len() => "DONE",
        _ => "PART",
    }
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
    admin: bool,
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
    let body = html(shared, page, serving, o, st, admin);
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
.active_going_up {background: #ffd020;}
.active_going_down {background: #ffffa0;}
.backup_going_up {background: #ff80ff;}
.backup_going_down {background: #c060ff;}
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
    (
        "Connections",
        &[
            ("New", "connect"),
            ("Reuse", "reuse"),
            ("Idle", "srv_icur"),
            ("IdleMax", "pool_idle_max"),
            ("Purged", "pool_purged"),
            ("Replay", "pool_replayed"),
            ("Takeover", "pool_takeovers"),
        ],
    ),
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

fn html(
    shared: &Shared,
    page: &StatsPage,
    serving: usize,
    o: Options,
    st: &str,
    admin: bool,
) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let pid = std::process::id();
    let node = crate::util::hostname();
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
    // As HAProxy: the node only with `stats show-node`, the description with `show-desc`.
    let g = &shared.cfg.global;
    let _ = write!(h, "<h2>Statistics Report for pid {pid}");
    if let Some(n) = &page.show_node {
        let n = n.as_deref().or(g.node.as_deref()).unwrap_or(&node);
        let _ = write!(h, " on {}", escape(n));
    }
    if let Some(d) = &page.show_desc {
        let d = d.as_deref().or(g.description.as_deref()).unwrap_or("");
        let _ = write!(h, ": {}", escape(d));
    }
    h.push_str("</h2>\n");
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
        shared
            .global_maxconn
            .load(std::sync::atomic::Ordering::Relaxed)
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
    let msg = match st {
        "" => "",
        "DONE" => "Action processed successfully.",
        "NONE" => "Nothing has changed.",
        "PART" => {
            "Action partially processed. Some server names are probably unknown or ambiguous \
             (duplicated names in the backend)."
        }
        "ERRP" => {
            "Action not processed because of invalid parameters. The action is probably \
             unknown, or the backend or server names are unknown."
        }
        "EXCD" => "Action not processed: the request was too large. Retry with fewer servers.",
        "DENY" => "Action denied.",
        "IVAL" => "Invalid request (unsupported method or chunked encoded request).",
        _ => "Unexpected result.",
    };
    if !msg.is_empty() {
        let _ = writeln!(h, "<p class=\"msg\" id=\"st\">{msg}</p>");
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
        let form = admin
            && shared.proxies[i].be.as_ref().is_some_and(|b| {
                b.servers
                    .iter()
                    .any(|s| !s.deleted.load(std::sync::atomic::Ordering::Relaxed))
            });
        if form {
            let _ = writeln!(
                h,
                "<form method=\"post\" action=\"{}\">",
                escape(&link(page, o.up, o.norefresh, false))
            );
        }
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
            row_html(&mut h, &name, r, form);
        }
        h.push_str("</tbody></table>\n");
        if form {
            let _ = writeln!(
                h,
                "<p>Choose the action to perform on the checked servers: \
                 <select name=\"action\">{ACTIONS_HTML}</select>\
                 <input type=\"hidden\" name=\"b\" value=\"#{}\">\
                 <input type=\"submit\" value=\"Apply\"></p></form>",
                shared.proxies[i].uuid
            );
        }
    }
    h.push_str("</body></html>\n");
    h
}

/// One `<tr>`: a FRONTEND, a server or the BACKEND.
fn row_html(h: &mut String, pxname: &str, r: &Row, form: bool) {
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
            // `disable-on-404`: soft-stopped like DRAIN, shown as HAProxy names it.
            s if s.starts_with("NOLB") => (format!("{side}_draining"), s, ""),
            "no check" => (format!("{side}_no_check"), "no check", ""),
            // Transitions keep their `n/m` count, coloured as HAProxy does.
            s if s.starts_with("UP ") => (format!("{side}_going_down"), s, ""),
            s if s.starts_with("DOWN ") => (format!("{side}_going_up"), s, ""),
            _ => (format!("{side}_up"), "UP", ""),
        }
    } else if ty == stats::TYPE_FRONTEND.to_string() {
        ("frontend".to_string(), status, "")
    } else {
        let sc = if status == "DOWN" { "active_down" } else { "" };
        ("backend".to_string(), status, sc)
    };
    let sv_e = escape(sv);
    let check = if form && ty == stats::TYPE_SERVER.to_string() {
        format!("<input type=\"checkbox\" name=\"s\" value=\"{sv_e}\">")
    } else {
        String::new()
    };
    let _ = write!(
        h,
        "<tr class=\"{class}\" id=\"{pxname}/{sv_e}\" data-status=\"{shown}\">\
         <td class=\"al\">{check}<a name=\"{pxname}/{sv_e}\"></a>\
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
    let mut chk = match (r.get("check_status"), r.get("check_code")) {
        (st, "") => st.to_string(),
        (st, code) => format!("{st}/{code}"),
    };
    let dur = r.get("check_duration");
    if !chk.is_empty() && !dur.is_empty() && r.get("check_status") != "INI" {
        chk.push_str(&format!(" in {dur}ms"));
    }
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
