//! Cookie persistence (`cookie NAME insert|rewrite|prefix ...`, server `cookie VALUE`,
//! `option persist`) against real backends: which server gets each request, what the server
//! sees in `Cookie`, what the client gets in `Set-Cookie`, and the log's cookie letters. The
//! expected values are those HAProxy 2.6 produced for the same requests (checked side by side
//! while this was written).

mod common;

use common::*;

/// Two servers `s1` and `s2` (cookie values `c1` and `c2`) answering with their name; those
/// whose target contains `setck` also set `SRV=app` themselves, `maxage` adds a freshness
/// lifetime.
struct Pair {
    s: Sluice,
    port: u16,
    b1: HttpBackend,
    b2: HttpBackend,
}

fn server(name: &str) -> HttpBackend {
    let n = name.to_string();
    HttpBackend::with_handler(name, move |r| {
        let mut headers = vec![("X-Server".to_string(), n.clone())];
        if r.target.contains("setck") {
            headers.push(("Set-Cookie".into(), "SRV=app; Path=/".into()));
        }
        if r.target.contains("maxage") {
            headers.push(("Cache-Control".into(), "max-age=60".into()));
        }
        Reply::Full {
            status: 200,
            headers,
            body: n.as_bytes().to_vec(),
        }
    })
}

fn pair(cookie: &str, extra: &str, s2_opts: &str) -> Pair {
    let b1 = server("s1");
    let b2 = server("s2");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    balance roundrobin\n    {cookie}\n{extra}\n\
         \x20   server s1 {} cookie c1\n    server s2 {} cookie c2 {s2_opts}\n",
        b1.hostport(),
        b2.hostport()
    );
    Pair {
        s: Sluice::start(&cfg),
        port,
        b1,
        b2,
    }
}

fn get(port: u16, path: &str, cookie: Option<&str>) -> Response {
    let mut c = HttpClient::connect(port);
    let extra = cookie.map_or(String::new(), |v| format!("Cookie: {v}\r\n"));
    c.get_with(path, &extra)
}

/// The cookie letters (3rd and 4th termination-state characters) of the next log line.
fn letters(s: &Sluice, path: &str) -> String {
    let line = s.wait_log_line(|l| l.contains(&format!("GET {path} ")), WAIT);
    // `... 200 2 - - --NI 1/1/0/0/0 0/0 "GET / HTTP/1.1"`: the state follows `- - `.
    let at = line.find(" - - ").expect("httplog line") + 5;
    line[at + 2..at + 4].to_string()
}

#[test]
fn insert_indirect_sticks_and_hides_the_cookie_from_servers() {
    let t = pair("cookie SRV insert indirect nocache", "", "");
    // No cookie: balanced, and told where it went.
    let r = get(t.port, "/first?maxage", None);
    let first = r.server();
    let want = if first == "s1" { "c1" } else { "c2" };
    assert_eq!(
        r.header("set-cookie"),
        Some(&*format!("SRV={want}; path=/"))
    );
    // nocache: the response would be cacheable, so it is made private.
    assert_eq!(
        r.headers_named("cache-control"),
        vec!["max-age=60", "private"]
    );
    assert_eq!(letters(&t.s, "/first?maxage"), "NI");
    // With the cookie, every request goes to that server, which never sees the cookie, and
    // nothing is set again.
    for i in 0..6 {
        let path = format!("/again{i}");
        let r = get(t.port, &path, Some(&format!("a=1; SRV={want}; b=2")));
        assert_eq!(r.server(), first);
        assert_eq!(r.header("set-cookie"), None);
        assert_eq!(letters(&t.s, &path), "VN");
    }
    let seen: Vec<Request> = if first == "s1" {
        t.b1.requests()
    } else {
        t.b2.requests()
    };
    assert!(
        seen.iter()
            .skip(1)
            .all(|r| r.header("cookie") == Some("a=1; b=2")),
        "{:?}",
        seen.iter().map(|r| r.header("cookie")).collect::<Vec<_>>()
    );
    // A cookie alone in its header: the header goes.
    let r = get(t.port, "/alone", Some(&format!("SRV={want}")));
    assert_eq!(r.server(), first);
    let last = if first == "s1" {
        t.b1.last_request()
    } else {
        t.b2.last_request()
    };
    assert_eq!(last.header("cookie"), None, "{:?}", last.headers);
    // A value naming no server: balanced, a new cookie.
    let r = get(t.port, "/bad", Some("SRV=nope"));
    assert!(r.header("set-cookie").is_some());
    assert_eq!(letters(&t.s, "/bad"), "II");
    // A server's own cookie of that name is replaced by sluice's (`insert`).
    let r = get(t.port, "/setck", None);
    assert_eq!(r.headers_named("set-cookie").len(), 1);
    assert!(r.header("set-cookie").unwrap().starts_with("SRV=c"));
}

#[test]
fn insert_attributes_and_postonly() {
    let t = pair(
        "cookie SRV insert httponly secure domain .example.com attr SameSite=Lax",
        "",
        "",
    );
    let r = get(t.port, "/", Some("SRV=c2"));
    assert_eq!(r.server(), "s2");
    // Not indirect: the server sees the cookie, and a direct hit sets nothing.
    assert_eq!(t.b2.last_request().header("cookie"), Some("SRV=c2"));
    assert_eq!(r.header("set-cookie"), None);
    let r = get(t.port, "/", Some("SRV=zz"));
    let v = if r.server() == "s1" { "c1" } else { "c2" };
    assert_eq!(
        r.header("set-cookie"),
        Some(&*format!(
            "SRV={v}; path=/; domain=.example.com; HttpOnly; Secure; SameSite=Lax"
        ))
    );
    drop(t);
    let t = pair("cookie SRV insert postonly", "", "");
    assert_eq!(get(t.port, "/", None).header("set-cookie"), None);
    let mut c = HttpClient::connect(t.port);
    let r = c.request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    assert!(r.header("set-cookie").is_some());
}

#[test]
fn rewrite_and_prefix_edit_the_servers_cookie() {
    let t = pair("cookie SRV rewrite", "", "");
    let r = get(t.port, "/setck", Some("SRV=c2"));
    assert_eq!(r.server(), "s2");
    assert_eq!(r.header("set-cookie"), Some("SRV=c2; Path=/"));
    assert_eq!(letters(&t.s, "/setck"), "VR");
    // Without a server cookie, nothing is inserted.
    let r = get(t.port, "/plain", None);
    assert_eq!(r.header("set-cookie"), None);
    assert_eq!(letters(&t.s, "/plain"), "NN");
    drop(t);

    let t = pair("cookie SRV prefix", "", "");
    let r = get(t.port, "/setck", Some("SRV=c1~session42"));
    assert_eq!(r.server(), "s1");
    // The server sees its own value, and the client gets it back prefixed.
    assert_eq!(t.b1.last_request().header("cookie"), Some("SRV=session42"));
    assert_eq!(r.header("set-cookie"), Some("SRV=c1~app; Path=/"));
    assert_eq!(letters(&t.s, "/setck"), "VR");
}

#[test]
fn preserve_keeps_the_servers_cookie() {
    let t = pair("cookie SRV insert preserve", "", "");
    let r = get(t.port, "/setck", None);
    assert_eq!(r.headers_named("set-cookie"), vec!["SRV=app; Path=/"]);
    assert_eq!(letters(&t.s, "/setck"), "NP");
}

#[test]
fn a_down_server_loses_its_cookie_unless_persist() {
    // s2 in maintenance: its cookie no longer counts.
    let t = pair("cookie SRV insert indirect", "", "disabled");
    for i in 0..3 {
        let path = format!("/d{i}");
        let r = get(t.port, &path, Some("SRV=c2"));
        assert_eq!(r.server(), "s1");
        assert_eq!(r.header("set-cookie"), Some("SRV=c1; path=/"));
        assert_eq!(letters(&t.s, &path), "DI");
    }
    assert_eq!(t.b2.reqs(), 0);
    drop(t);
    // option persist: it goes there anyway.
    let t = pair(
        "cookie SRV insert indirect",
        "    option persist",
        "disabled",
    );
    let r = get(t.port, "/p", Some("SRV=c2"));
    assert_eq!(r.server(), "s2");
    assert_eq!(r.header("set-cookie"), None);
    assert_eq!(letters(&t.s, "/p"), "DN");
    assert_eq!(t.b1.reqs(), 0);
}

#[test]
fn persist_with_redispatch_moves_a_failed_request() {
    let b1 = server("s1");
    let port = free_port();
    let dead = closed_port();
    let cfg = format!(
        "{LOGGED_HTTP}    retries 1\nfrontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    cookie SRV insert indirect\n    option persist\n    option redispatch\n\
         \x20   server s1 {} cookie c1\n    server s2 127.0.0.1:{dead} cookie c2 disabled\n",
        b1.hostport()
    );
    let s = Sluice::start(&cfg);
    let r = get(port, "/x", Some("SRV=c2"));
    assert_eq!(r.status, 200);
    assert_eq!(r.server(), "s1");
    assert_eq!(r.header("set-cookie"), Some("SRV=c1; path=/"));
    assert_eq!(letters(&s, "/x"), "DI");
}

#[test]
fn dated_cookies_expire() {
    let t = pair("cookie SRV insert maxidle 30m maxlife 4h", "", "");
    let r = get(t.port, "/", Some("SRV=c2"));
    // An undated cookie is accepted and gets its dates: SRV=c2|LAST|FIRST.
    assert_eq!(r.server(), "s2");
    let v = r.header("set-cookie").expect("dates added").to_string();
    let value = v.split(';').next().unwrap();
    let parts: Vec<&str> = value.split('|').collect();
    assert_eq!(parts.len(), 3, "{v}");
    assert_eq!(
        (parts[0], parts[1].len(), parts[1]),
        ("SRV=c2", 5, parts[2])
    );
    assert_eq!(letters(&t.s, "/"), "VU");
    // The same cookie sent back within the same 4 s unit: nothing to refresh... or a
    // refreshed date; either way it still goes to s2.
    let r = get(t.port, "/back", Some(value));
    assert_eq!(r.server(), "s2");
    // A date of 1970 is far too old.
    let r = get(t.port, "/old", Some("SRV=c2|AAAAB|AAAAB"));
    assert!(r.header("set-cookie").is_some());
    assert_eq!(letters(&t.s, "/old"), "OI");
}

#[test]
fn stats_show_the_cookie_values() {
    let b1 = server("s1");
    let port = free_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let cfg = format!(
        "global\n    stats socket {}\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   default_backend be\nbackend be\n    cookie JSESSIONID prefix\n\
         \x20   server s1 {} cookie one\n",
        sock.display(),
        b1.hostport()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(stat_column(&sock, "be", "s1", "cookie"), "one");
    assert_eq!(stat_column(&sock, "be", "BACKEND", "cookie"), "JSESSIONID");
}

#[test]
fn config_errors_name_the_problem() {
    let check = |cookie: &str| {
        let cfg = format!(
            "{DEFAULTS_HTTP}backend be\n    {cookie}\n    server s1 127.0.0.1:1 cookie a\n"
        );
        Sluice::check(&cfg)
    };
    for (line, want) in [
        ("cookie", "'cookie' expects <cookie_name> as argument"),
        (
            "cookie S insert rewrite",
            "cookie 'rewrite', 'insert' and 'prefix' modes are incompatible",
        ),
        (
            "cookie S rewrite indirect",
            "cookie 'rewrite' and 'indirect' modes are incompatible",
        ),
        (
            "cookie S prefix preserve",
            "cookie 'preserve' requires at least 'insert' or 'indirect'",
        ),
        ("cookie S insert maxidle", "'maxidle' expects <idletime>"),
        ("cookie S insert indirekt", "did you mean 'indirect'"),
        (
            "cookie S insert attr a;b",
            "not permitted in attribute value",
        ),
    ] {
        let (code, out) = check(line);
        assert_eq!(code, 1, "{line}: {out}");
        assert!(out.contains(want), "{line}: {out}");
        assert!(out.contains(":7: "), "{line}: names the line: {out}");
    }
    // `dynamic` without a key: servers without `cookie VALUE` get none (a warning).
    let (code, out) = check("cookie S insert dynamic");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("without 'dynamic-cookie-key'"), "{out}");
    let (code, out) = check("cookie S insert domain localhost");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("contains no embedded dot"), "{out}");
    // HTTP only: in `mode tcp`, ignored with HAProxy's warnings.
    let (code, out) = Sluice::check(
        "defaults\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n\
         backend be\n    mode tcp\n    cookie S insert\n    server s1 127.0.0.1:1 cookie a\n",
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(":7: cookie will be ignored for backend 'be' (needs 'mode http')."),
        "{out}"
    );
    assert!(
        out.contains(
            ":8: backend 'be' : ignoring cookie for server 's1' as HTTP mode is disabled."
        ),
        "{out}"
    );
}

/// `cookie NAME insert dynamic` with `dynamic-cookie-key`: a server without `cookie VALUE`
/// gets HAProxy's cookie for its address (a server with one keeps it), the client is told it
/// and sticks to that server with it.
#[test]
fn dynamic_cookies_name_servers_as_haproxy_does() {
    let b1 = server("s1");
    let b2 = server("s2");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    balance roundrobin\n    dynamic-cookie-key mysecret\n\
         \x20   cookie SRVID insert dynamic\n    server s1 {}\n    server s2 {} cookie fixed\n",
        b1.hostport(),
        b2.hostport()
    );
    let _s = Sluice::start(&cfg);
    let want1 = sluice::config::dynamic_cookie("mysecret", lo(b1.port()));
    let mut seen = std::collections::HashMap::new();
    for i in 0..2 {
        let r = get(port, &format!("/{i}"), None);
        let set = r
            .header("set-cookie")
            .expect("an inserted cookie")
            .to_string();
        seen.insert(r.header("x-server").unwrap().to_string(), set);
    }
    assert_eq!(seen["s1"], format!("SRVID={want1}; path=/"));
    assert_eq!(seen["s2"], "SRVID=fixed; path=/");
    for _ in 0..3 {
        let r = get(port, "/again", Some(&format!("SRVID={want1}")));
        assert_eq!(
            r.header("x-server"),
            Some("s1"),
            "the dynamic cookie sticks"
        );
    }
}
