//! The HTTP stats page (`stats enable`, `stats uri`, ...): `;csv` equal to the CLI's CSV, the
//! HTML page showing every server with its state after CLI changes, Basic authentication,
//! `stats scope`, `;up`, refresh, and configuration errors.

mod common;

use common::*;
use std::path::{Path, PathBuf};

struct Setup {
    _s: Sluice,
    _dir: TempDir,
    port: u16,
    sock: PathBuf,
    _backends: Vec<HttpBackend>,
}

/// A frontend `fe` (with `stats_lines` in a `listen stats` section on `port`), backend `be`
/// with s1 and s2 (no health checks), and another backend `other` with s3 (checked).
fn setup(stats_lines: &str) -> Setup {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let port = free_port();
    let fe_port = free_port();
    let b1 = HttpBackend::start("s1");
    let b2 = HttpBackend::start("s2");
    let b3 = HttpBackend::start("s3");
    let cfg = format!(
        "global\n    stats socket {} level admin\n    stats timeout 5s\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{fe_port}\n    default_backend be\n\
backend be\n    server s1 {}\n    server s2 {}\n\
backend other\n    server s3 {} check\n\
listen stats\n    bind 127.0.0.1:{port}\n{stats_lines}",
        sock.display(),
        b1.hostport(),
        b2.hostport(),
        b3.hostport(),
    );
    let s = Sluice::start(&cfg);
    Setup {
        _s: s,
        _dir: dir,
        port,
        sock,
        _backends: vec![b1, b2, b3],
    }
}

fn cli(path: &Path, line: &str) -> String {
    stats_cli(path, line)
}

/// The `<tr>` of `px/sv` on the page, if present.
fn row<'a>(html: &'a str, px: &str, sv: &str) -> Option<&'a str> {
    let key = format!("id=\"{px}/{sv}\"");
    let at = html.find(&key)?;
    let begin = html[..at].rfind("<tr ")?;
    let end = at + html[at..].find("</tr>")?;
    Some(&html[begin..end])
}

/// (row class, shown status) of `px/sv`.
fn state(html: &str, px: &str, sv: &str) -> (String, String) {
    let r = row(html, px, sv).unwrap_or_else(|| panic!("no row for {px}/{sv} in:\n{html}"));
    let attr = |name: &str| {
        let k = format!("{name}=\"");
        let i = r.find(&k).unwrap() + k.len();
        r[i..i + r[i..].find('"').unwrap()].to_string()
    };
    (attr("class"), attr("data-status"))
}

#[test]
fn csv_over_http_matches_the_cli() {
    let t = setup("    stats enable\n    stats uri /stats\n    stats refresh 5s\n");
    let r = http_get(t.port, "/stats;csv");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("refresh"), Some("5"));
    let body = r.body_str();
    let cli_out = cli(&t.sock, "show stat");
    assert_eq!(body.lines().next(), cli_out.lines().next());
    assert!(body.starts_with("# pxname,svname,qcur,qmax,scur,smax,"));
    // Same rows, in the same order (counters may move between the two reads).
    let names = |s: &str| -> Vec<String> {
        s.lines()
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(|l| l.split(',').take(2).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(names(&body), names(&cli_out));
    assert!(names(&body).contains(&"be,s2".to_string()));
    // `;csv;norefresh`: no Refresh header.
    let r = http_get(t.port, "/stats;csv;norefresh");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("refresh"), None);
    assert_eq!(r.body_str().lines().next(), cli_out.lines().next());
}

#[test]
fn html_shows_every_server_with_its_state() {
    let t = setup("    stats enable\n    stats uri /stats\n");
    // Before its first check, s3 shows HAProxy's transition text (up, 1 failure from down).
    let first = http_get(t.port, "/stats").body_str();
    let (class, shown) = state(&first, "other", "s3");
    assert!(
        (class == "active_going_down" && shown == "UP 1/3")
            || (class == "active_up" && shown == "UP"),
        "{class} {shown}"
    );
    wait_until("first check of s3", WAIT, || {
        stat_column(&t.sock, "other", "s3", "check_status") == "L4OK"
    });
    let r = http_get(t.port, "/stats");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html"));
    let html = r.body_str();
    for (px, sv) in [("be", "s1"), ("be", "s2")] {
        assert_eq!(
            state(&html, px, sv),
            ("active_no_check".into(), "no check".into()),
            "{px}/{sv}"
        );
    }
    assert_eq!(
        state(&html, "other", "s3"),
        ("active_up".into(), "UP".into())
    );
    assert_eq!(state(&html, "fe", "FRONTEND").1, "OPEN");
    assert_eq!(state(&html, "be", "BACKEND").1, "UP");
    assert!(html.contains("id=\"px-stats\""));
    assert!(!html.contains("<script"));
    assert!(html.contains("position: sticky"));

    assert_eq!(cli(&t.sock, "set server be/s1 state maint"), "\n");
    assert_eq!(cli(&t.sock, "set server be/s2 state drain"), "\n");
    let html = http_get(t.port, "/stats").body_str();
    assert_eq!(
        state(&html, "be", "s1"),
        ("maintain".into(), "MAINT".into())
    );
    assert_eq!(
        state(&html, "be", "s2"),
        ("active_draining".into(), "DRAIN".into())
    );
    assert_eq!(
        state(&html, "other", "s3"),
        ("active_up".into(), "UP".into())
    );
    // Both in maintenance: the backend is DOWN.
    assert_eq!(cli(&t.sock, "set server be/s2 state maint"), "\n");
    let html = http_get(t.port, "/stats").body_str();
    assert_eq!(state(&html, "be", "BACKEND").1, "DOWN");
}

#[test]
fn up_hides_servers_that_are_not_up() {
    let t = setup("    stats uri /st\n");
    assert_eq!(cli(&t.sock, "set server be/s1 state maint"), "\n");
    let html = http_get(t.port, "/st;up").body_str();
    assert!(row(&html, "be", "s1").is_none(), "{html}");
    assert!(row(&html, "be", "s2").is_some());
    let csv = http_get(t.port, "/st;csv;up").body_str();
    assert!(!csv.contains("\nbe,s1,"), "{csv}");
    assert!(csv.contains("\nbe,s2,"));
    // Without `;up` it is there.
    let html = http_get(t.port, "/st").body_str();
    assert!(row(&html, "be", "s1").is_some());
}

#[test]
fn refresh_meta_present_or_absent() {
    let t = setup("    stats uri /stats\n    stats refresh 7\n");
    let r = http_get(t.port, "/stats");
    assert!(
        r.body_str()
            .contains("<meta http-equiv=\"refresh\" content=\"7\">")
    );
    assert_eq!(r.header("refresh"), Some("7"));
    let r = http_get(t.port, "/stats;norefresh");
    assert!(!r.body_str().contains("http-equiv=\"refresh\""));
    assert_eq!(r.header("refresh"), None);

    let t = setup("    stats uri /stats\n");
    let r = http_get(t.port, "/stats");
    assert!(!r.body_str().contains("http-equiv=\"refresh\""));
    assert_eq!(r.header("refresh"), None);
}

#[test]
fn basic_auth() {
    let t = setup(
        "    stats enable\n    stats uri /stats\n    stats realm Sluice\\ Stats\n\
         \x20   stats auth admin:secret\n    stats auth ops:pw\n",
    );
    let r = http_get(t.port, "/stats");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"Sluice Stats\"")
    );
    // admin:secret, ops:pw, admin:wrong
    let get = |cred: &str| {
        let mut c = HttpClient::connect(t.port);
        c.get_with("/stats;csv", &format!("Authorization: Basic {cred}\r\n"))
    };
    assert_eq!(get("YWRtaW46c2VjcmV0").status, 200);
    assert_eq!(get("b3BzOnB3").status, 200);
    assert_eq!(get("YWRtaW46d3Jvbmc=").status, 401);
    // Keep-alive after a 401 and after the page.
    let mut c = HttpClient::connect(t.port);
    assert_eq!(c.get("/stats").status, 401);
    assert_eq!(
        c.get_with("/stats", "Authorization: Basic YWRtaW46c2VjcmV0\r\n")
            .status,
        200
    );
}

#[test]
fn scope_limits_the_proxies_shown() {
    let t = setup("    stats uri /stats\n    stats scope be\n    stats scope .\n");
    let html = http_get(t.port, "/stats").body_str();
    assert!(html.contains("id=\"px-be\""));
    assert!(html.contains("id=\"px-stats\""));
    assert!(!html.contains("id=\"px-other\""));
    assert!(!html.contains("id=\"px-fe\""));
    let csv = http_get(t.port, "/stats;csv").body_str();
    let pxs: std::collections::BTreeSet<&str> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(pxs.into_iter().collect::<Vec<_>>(), vec!["be", "stats"]);
}

#[test]
fn default_uri_prefix_match_and_other_paths() {
    let t = setup("    stats enable\n    stats hide-version\n    stats show-legends\n");
    let r = http_get(t.port, "/haproxy?stats");
    assert_eq!(r.status, 200);
    let html = r.body_str();
    assert!(!html.contains("version = "));
    assert!(html.contains("class=\"lgd\""));
    // A prefix: anything after it still gets the page.
    assert_eq!(http_get(t.port, "/haproxy?statsfoo").status, 200);
    // Other paths go to the servers (the `listen stats` section has none: 503).
    assert_eq!(http_get(t.port, "/other").status, 503);
    // HEAD: the head only.
    let mut c = HttpClient::connect(t.port);
    let r = c.request("HEAD /haproxy?stats HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[test]
fn post_answers_see_other() {
    let t = setup("    acl local src 127.0.0.1\n    stats uri /stats\n    stats admin if local\n");
    let r = http_raw(
        t.port,
        "POST /stats HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 303);
    // No backend or action given: invalid parameters.
    assert_eq!(r.header("location"), Some("/stats;st=ERRP"));
    let t = setup("    stats uri /stats\n");
    let r = http_raw(
        t.port,
        "POST /stats;up HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/stats;st=DENY;up"));
}

/// POSTs an admin form on `c`; returns the `Location` of the 303.
fn post_form(c: &mut HttpClient, body: &str) -> String {
    let r = c.request(format!(
        "POST /stats HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    assert_eq!(r.status, 303, "{body}");
    r.header("location").unwrap_or_default().to_string()
}

#[test]
fn admin_actions_from_the_page_apply_at_once() {
    let t = setup("    acl local src 127.0.0.1\n    stats uri /stats\n    stats admin if local\n");
    let html = http_get(t.port, "/stats").body_str();
    // A form per backend: a checkbox per server, the backend's id, the actions.
    assert!(html.contains("<input type=\"checkbox\" name=\"s\" value=\"s1\">"));
    // be is #3: the stats socket's proxy took id 1 (as in HAProxy), fe 2.
    assert!(html.contains("<input type=\"hidden\" name=\"b\" value=\"#3\">"));
    assert!(html.contains("<option value=\"maint\">"));
    let mut c = HttpClient::connect(t.port);
    assert_eq!(
        post_form(&mut c, "s=s1&s=s2&action=maint&b=%233"),
        "/stats;st=DONE"
    );
    // The same connection goes on (the form body was consumed), and the page shows it.
    let r = c.get("/stats;st=DONE");
    assert_eq!(r.status, 200);
    let html = r.body_str();
    assert!(html.contains("Action processed successfully."));
    assert_eq!(
        state(&html, "be", "s1"),
        ("maintain".into(), "MAINT".into())
    );
    assert_eq!(stat_column(&t.sock, "be", "s2", "status"), "MAINT");
    // One unknown server: partly done.
    assert_eq!(
        post_form(&mut c, "s=s1&s=nope&action=ready&b=be"),
        "/stats;st=PART"
    );
    assert_eq!(stat_column(&t.sock, "be", "s1", "status"), "no check");
    assert_eq!(stat_column(&t.sock, "be", "s2", "status"), "MAINT");
    assert_eq!(
        post_form(&mut c, "s=s2&action=drain&b=be"),
        "/stats;st=DONE"
    );
    assert_eq!(stat_column(&t.sock, "be", "s2", "status"), "DRAIN");
    // Nothing checked; unknown action; unknown backend; health action without checks.
    assert_eq!(post_form(&mut c, "action=ready&b=be"), "/stats;st=NONE");
    assert_eq!(
        post_form(&mut c, "s=s1&action=explode&b=be"),
        "/stats;st=ERRP"
    );
    assert_eq!(
        post_form(&mut c, "s=s1&action=ready&b=%2399"),
        "/stats;st=ERRP"
    );
    assert_eq!(
        post_form(&mut c, "s=s1&action=hdown&b=be"),
        "/stats;st=ERRP"
    );
    // Health actions on the checked server of `other` (iid 4).
    assert_eq!(
        post_form(&mut c, "s=s3&action=hdown&b=%234"),
        "/stats;st=DONE"
    );
    // The forced result reaches the server's state on its check thread, moments later. A
    // check that was in flight may pass right after it: then the server is on its way back
    // up ("DOWN 1/2"), still DOWN.
    wait_until("s3 forced DOWN", WAIT, || {
        stat_column(&t.sock, "other", "s3", "status").starts_with("DOWN")
    });
    assert_eq!(
        post_form(&mut c, "s=s3&action=hrunn&b=other"),
        "/stats;st=DONE"
    );
    wait_until("s3 forced UP", WAIT, || {
        stat_column(&t.sock, "other", "s3", "status") == "UP"
    });
    assert_eq!(
        post_form(&mut c, "s=s3&action=dhlth&b=other"),
        "/stats;st=DONE"
    );
    wait_until("s3 health checks disabled", WAIT, || {
        cli(&t.sock, "show servers state other")
            .lines()
            .any(|l| l.starts_with("4 other 1 s3 ") && l.split(' ').nth(13) == Some("14"))
    });
    assert_eq!(
        post_form(&mut c, "s=s3&action=ehlth&b=other"),
        "/stats;st=DONE"
    );
    // A form too large is refused without reading it, and the connection closes.
    let r = http_raw(
        t.port,
        "POST /stats HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\ns=s1",
    );
    assert_eq!(r.header("location"), Some("/stats;st=EXCD"));
}

#[test]
fn page_without_admin_has_no_form_and_denies_actions() {
    let t = setup("    stats uri /stats\n");
    let html = http_get(t.port, "/stats").body_str();
    assert!(
        !html.contains("<form"),
        "no admin form without 'stats admin'"
    );
    let mut c = HttpClient::connect(t.port);
    assert_eq!(
        post_form(&mut c, "s=s1&action=maint&b=be"),
        "/stats;st=DENY"
    );
    assert_eq!(stat_column(&t.sock, "be", "s1", "status"), "no check");
}

#[test]
fn stats_in_a_backend_and_from_defaults() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         \x20   stats uri /dstats\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    use_backend st if {{ path_beg /bstats }}\n    default_backend app\n\
         backend app\n    server s1 {}\n\
         backend st\n    stats uri /bstats\n",
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    // Inherited by the frontend from defaults.
    assert_eq!(http_get(port, "/dstats").status, 200);
    // The backend's own `stats uri` replaces the inherited settings.
    assert_eq!(http_get(port, "/bstats;csv").status, 200);
    assert_eq!(http_get(port, "/x").server(), "s1");
}

#[test]
fn config_errors() {
    let base = |extra: &str, mode: &str| {
        format!(
            "defaults\n    mode {mode}\nlisten l\n    bind 127.0.0.1:{}\n{extra}",
            free_port()
        )
    };
    let (code, err) = Sluice::check(&base("    stats enabel\n", "http"));
    assert_ne!(code, 0);
    assert!(
        err.contains("unknown keyword 'stats enabel'") && err.contains("'enable'"),
        "{err}"
    );
    // In `mode tcp`, ignored with HAProxy's warning.
    let (code, err) = Sluice::check(&base("    stats enable\n", "tcp"));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("'stats' statement ignored for proxy 'l' as it requires HTTP mode."),
        "{err}"
    );
    let (code, err) = Sluice::check(&base("    stats admin\n", "http"));
    assert_ne!(code, 0);
    assert!(err.contains("'if' or 'unless'"), "{err}");
    let (code, err) = Sluice::check(&base("    stats auth nocolon\n", "http"));
    assert_ne!(code, 0);
    assert!(err.contains("user:password"), "{err}");
    let (code, err) = Sluice::check(&base("    stats socket /tmp/x\n", "http"));
    assert_ne!(code, 0);
    assert!(
        err.contains("only allowed in the 'global' section"),
        "{err}"
    );
    let (code, err) = Sluice::check(&base("    stats refresh soon\n", "http"));
    assert_ne!(code, 0);
    assert!(err.contains("'soon'"), "{err}");
    // Inherited from a tcp `defaults` into a tcp proxy: silently dropped, as monitor-uri.
    let cfg = format!(
        "defaults\n    mode tcp\n    stats enable\nlisten l\n    bind 127.0.0.1:{}\n    server s 127.0.0.1:1\n",
        free_port()
    );
    let (code, err) = Sluice::check(&cfg);
    assert_eq!(code, 0, "{err}");
    let (code, _) = Sluice::check(&base(
        "    stats enable\n    stats uri /s\n    stats realm R\n    stats refresh 10s\n    \
         stats auth a:b\n    stats scope .\n    stats show-legends\n    stats hide-version\n    \
         stats admin if TRUE\n",
        "http",
    ));
    assert_eq!(code, 0);
}

/// `stats show-node [NAME]` and `stats show-desc [TEXT]` put the node and a description in
/// the page's title, from the global `node` and `description` unless they name their own;
/// the global `node` is also `show info`'s.
#[test]
fn show_node_and_desc_in_the_title() {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let (p1, p2, p3) = (free_port(), free_port(), free_port());
    let cfg = format!(
        "global\n    stats socket {} level admin\n    node lb-eu-1\n    description Main  edge\n\
{DEFAULTS_HTTP}listen plain\n    bind 127.0.0.1:{p1}\n    stats uri /s\n\
listen inherited\n    bind 127.0.0.1:{p2}\n    stats uri /s\n    stats show-node\n    stats show-desc\n\
listen own\n    bind 127.0.0.1:{p3}\n    stats uri /s\n    stats show-node edge-a\n    stats show-desc The edge, A\n",
        sock.display()
    );
    let _s = Sluice::start(&cfg);
    let title = |port| {
        let page = http_get(port, "/s").body_str();
        let at = page.find("<h2>").expect("h2");
        page[at..at + page[at..].find("</h2>").unwrap()].to_string()
    };
    let pid = _s.pid();
    assert_eq!(title(p1), format!("<h2>Statistics Report for pid {pid}"));
    assert_eq!(
        title(p2),
        format!("<h2>Statistics Report for pid {pid} on lb-eu-1: Main edge")
    );
    assert_eq!(
        title(p3),
        format!("<h2>Statistics Report for pid {pid} on edge-a: The edge, A")
    );
    assert!(
        stats_cli(&sock, "show info").contains("\nnode: lb-eu-1\n"),
        "{}",
        stats_cli(&sock, "show info")
    );
}
