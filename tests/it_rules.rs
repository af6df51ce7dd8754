//! ACLs and rules: use_backend with named and anonymous ACLs, http-request
//! set/add/del-header, deny, return, redirect; http-response headers; monitor-uri.

mod common;

use common::*;

/// Frontend `fe` with `rules`, backends `a` and `b` (servers answering "A" and "B"), default `a`.
struct Two {
    s: Sluice,
    port: u16,
    a: HttpBackend,
    b: HttpBackend,
}

fn two(fe_rules: &str, be_a_extra: &str) -> Two {
    two_with(DEFAULTS_HTTP, fe_rules, be_a_extra)
}

fn two_with(defaults: &str, fe_rules: &str, be_a_extra: &str) -> Two {
    let a = HttpBackend::start("A");
    let b = HttpBackend::start("B");
    let port = free_port();
    let cfg = format!(
        "{defaults}frontend fe\n    bind 127.0.0.1:{port}\n{fe_rules}\n    default_backend a\n\
         backend a\n{be_a_extra}\n    server A {}\nbackend b\n    server B {}\n",
        a.hostport(),
        b.hostport()
    );
    Two {
        s: Sluice::start(&cfg),
        port,
        a,
        b,
    }
}

fn req(port: u16, raw_head_lines: &str) -> Response {
    let mut c = HttpClient::connect(port);
    c.request(format!("{raw_head_lines}Connection: close\r\n\r\n"))
}

#[test]
fn use_backend_with_path_acls() {
    let t = two(
        "    acl is_api path_beg /api/\n    acl is_png path_end .png\n    acl exact path /exact\n    acl re path_reg ^/re/[0-9]+$\n\
         use_backend b if is_api\n    use_backend b if is_png\n    use_backend b if exact\n    use_backend b if re",
        "",
    );
    let cases = [
        ("/api/users", "B"),
        ("/apix", "A"),
        ("/img/logo.png", "B"),
        ("/img/logo.png?x=1", "B"),
        ("/exact", "B"),
        ("/exact/", "A"),
        ("/re/123", "B"),
        ("/re/12a", "A"),
        ("/", "A"),
    ];
    for (path, want) in cases {
        assert_eq!(http_get(t.port, path).server(), want, "{path}");
    }
}

#[test]
fn acl_on_headers_method_and_source() {
    let t = two(
        "    acl h_admin hdr(X-Role) -i admin\n    acl h_beta hdr_beg(Host) beta.\n    acl h_org hdr_end(host) .org\n\
         acl m_post method POST\n    acl local src 127.0.0.0/8\n\
         use_backend b if h_admin\n    use_backend b if h_beta\n    use_backend b if h_org\n\
         use_backend b if m_post local",
        "",
    );
    assert_eq!(
        req(t.port, "GET / HTTP/1.1\r\nHost: t\r\nX-Role: ADMIN\r\n").server(),
        "B",
        "-i ignores case"
    );
    assert_eq!(
        req(t.port, "GET / HTTP/1.1\r\nHost: t\r\nX-Role: user\r\n").server(),
        "A"
    );
    assert_eq!(
        req(t.port, "GET / HTTP/1.1\r\nHost: beta.example.com\r\n").server(),
        "B"
    );
    assert_eq!(
        req(t.port, "GET / HTTP/1.1\r\nHost: example.org\r\n").server(),
        "B"
    );
    assert_eq!(
        req(t.port, "GET / HTTP/1.1\r\nHost: example.com\r\n").server(),
        "A"
    );
    assert_eq!(
        req(
            t.port,
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
        )
        .server(),
        "B"
    );
    assert_eq!(
        req(t.port, "PUT / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n").server(),
        "A"
    );
}

#[test]
fn acl_case_sensitivity_and_negation() {
    let t = two(
        "    acl cs path_beg /Api\n    acl ci path_beg -i /ci\n    use_backend b if cs\n    use_backend b if ci\n\
         use_backend b if !{ path_beg / }",
        "",
    );
    assert_eq!(http_get(t.port, "/Api/x").server(), "B");
    assert_eq!(
        http_get(t.port, "/api/x").server(),
        "A",
        "without -i matching is case-sensitive"
    );
    assert_eq!(http_get(t.port, "/CI/x").server(), "B");
    assert_eq!(http_get(t.port, "/x").server(), "A");
}

#[test]
fn anonymous_acls_or_and_unless() {
    let t = two(
        "    use_backend b if { path_beg /one } || { path_beg /two }\n\
         use_backend b if { hdr(X-A) 1 } { hdr(X-B) 1 }\n\
         use_backend b unless { path_beg / }",
        "",
    );
    assert_eq!(http_get(t.port, "/one").server(), "B");
    assert_eq!(http_get(t.port, "/two").server(), "B");
    assert_eq!(http_get(t.port, "/three").server(), "A");
    assert_eq!(
        req(t.port, "GET /x HTTP/1.1\r\nHost: t\r\nX-A: 1\r\nX-B: 1\r\n").server(),
        "B",
        "AND of two terms"
    );
    assert_eq!(
        req(t.port, "GET /x HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n").server(),
        "A"
    );
    assert_eq!(
        req(t.port, "GET /x HTTP/1.1\r\nHost: t\r\nX-B: 1\r\n").server(),
        "A"
    );
}

#[test]
fn first_matching_use_backend_wins() {
    let t = two(
        "    use_backend a if { path_beg /x }\n    use_backend b if { path_beg / }",
        "",
    );
    assert_eq!(http_get(t.port, "/x/1").server(), "A");
    assert_eq!(http_get(t.port, "/y").server(), "B");
}

#[test]
fn acl_with_several_patterns_matches_any() {
    let t = two(
        "    acl static path_end .css .js .png\n    use_backend b if static",
        "",
    );
    for p in ["/a.css", "/a.js", "/a.png"] {
        assert_eq!(http_get(t.port, p).server(), "B", "{p}");
    }
    assert_eq!(http_get(t.port, "/a.html").server(), "A");
}

#[test]
fn set_add_del_request_headers() {
    let t = two(
        "    http-request set-header X-Set new-value\n    http-request add-header X-Add added\n\
         http-request del-header X-Remove\n    http-request set-header X-Cond yes if { path_beg /cond }",
        "",
    );
    let r = req(
        t.port,
        "GET /cond HTTP/1.1\r\nHost: t\r\nX-Set: old1\r\nX-Set: old2\r\nX-Add: original\r\nx-remove: 1\r\nX-Remove: 2\r\n",
    );
    assert_eq!(r.status, 200);
    let q = t.a.last_request();
    assert_eq!(
        q.headers_named("x-set"),
        vec!["new-value"],
        "set-header replaces every occurrence"
    );
    assert_eq!(
        q.headers_named("x-add"),
        vec!["original", "added"],
        "add-header appends"
    );
    assert!(
        q.headers_named("x-remove").is_empty(),
        "del-header removes every occurrence: {:?}",
        q.headers
    );
    assert_eq!(q.header("x-cond"), Some("yes"));
    req(t.port, "GET /other HTTP/1.1\r\nHost: t\r\n");
    assert_eq!(t.a.last_request().header("x-cond"), None);
}

/// `del-header NAME -m beg|end|sub|reg` (HAProxy 2.6): the name is matched by that method,
/// case-insensitively; the regex sees the lower-case name, as in HAProxy; a name no field can
/// have only warns.
#[test]
fn del_header_matching_methods() {
    let t = two(
        "    http-request del-header x-debug- -m beg\n    http-request del-header -token -m end\n\
         http-request del-header secret -m sub\n    http-request del-header ^x-[0-9]+$ -m reg\n\
         http-request del-header ^Keep -m reg\n    http-request del-header ^Keep:.*$",
        "",
    );
    req(
        t.port,
        "GET / HTTP/1.1\r\nHost: t\r\nX-Debug-A: 1\r\nx-debug-b: 2\r\nX-Debugger: 3\r\n\
         Auth-Token: 4\r\nTOKEN: 5\r\nMy-SECRET-Key: 6\r\nX-12: 7\r\nx-12: 8\r\nX-12a: 9\r\n\
         Keep: 10\r\n",
    );
    let q = t.a.last_request();
    let names = q.header_names();
    for gone in [
        "X-Debug-A",
        "x-debug-b",
        "Auth-Token",
        "My-SECRET-Key",
        "X-12",
        "x-12",
    ] {
        assert!(!names.contains(&gone), "{gone} should be gone: {names:?}");
    }
    // `^Keep` never matches (the regex sees `keep`); `TOKEN` does not end with `-token`.
    for kept in ["X-Debugger", "TOKEN", "X-12a", "Keep"] {
        assert!(names.contains(&kept), "{kept} should stay: {names:?}");
    }
}

#[test]
fn backend_request_rules_apply_too() {
    let t = two(
        "    use_backend b if { path_beg /b }",
        "    http-request set-header X-Backend-A 1",
    );
    http_get(t.port, "/a");
    assert_eq!(t.a.last_request().header("x-backend-a"), Some("1"));
    http_get(t.port, "/b");
    assert_eq!(t.b.last_request().header("x-backend-a"), None);
}

#[test]
fn deny_with_default_and_custom_status() {
    let t = two(
        "    http-request deny if { path_beg /forbidden }\n    http-request deny deny_status 429 if { path_beg /slow-down }",
        "",
    );
    let mut c = HttpClient::connect(t.port);
    let r = c.get("/forbidden");
    assert_eq!(r.status, 403);
    assert!(r.body_str().contains("403 Forbidden"), "{}", r.body_str());
    c.expect_closed();
    let r = http_get(t.port, "/slow-down");
    assert_eq!(r.status, 429);
    assert!(r.body_str().contains("429"), "{}", r.body_str());
    assert_eq!(http_get(t.port, "/fine").status, 200);
    assert_eq!(t.a.reqs(), 1, "denied requests must not reach the server");
}

#[test]
fn rules_run_in_order_before_deny() {
    // deny is final: a set-header after it is never reached; one before it is irrelevant.
    let t = two(
        "    http-request set-header X-Step 1\n    http-request deny if { hdr(X-Step) 1 } { path_beg /d }\n\
         http-request set-header X-Step 2",
        "",
    );
    assert_eq!(http_get(t.port, "/d").status, 403);
    assert_eq!(http_get(t.port, "/ok").status, 200);
    assert_eq!(t.a.last_request().header("x-step"), Some("2"));
}

#[test]
fn http_request_return() {
    let t = two(
        "    http-request return status 200 content-type text/plain string \"pong\" hdr X-Extra yes if { path /ping }\n\
         http-request return status 404 if { path /missing }",
        "",
    );
    let mut c = HttpClient::connect(t.port);
    let r = c.get("/ping");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "pong");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("x-extra"), Some("yes"));
    // A returned response keeps the connection alive.
    let r = c.get("/missing");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-length"), Some("0"));
    assert_eq!(c.get("/served").server(), "A");
    assert_eq!(t.a.reqs(), 1);
}

#[test]
fn redirects() {
    let t = two(
        "    http-request redirect location https://example.com/new code 301 if { path /old }\n\
         http-request redirect prefix /v2 if { path_beg /v1 }\n\
         http-request redirect scheme https if { path_beg /secure }\n\
         http-request redirect location /temp if { path /tmp }\n\
         http-request redirect code 308 drop-query location /moved if { path /first }\n\
         http-request deny status 451 if { path /legal }",
        "",
    );
    // Options before the type, and `deny status N`, as HAProxy accepts them.
    let r = http_get(t.port, "/first?x=1");
    assert_eq!((r.status, r.header("location")), (308, Some("/moved")));
    assert_eq!(http_get(t.port, "/legal").status, 451);
    let r = http_get(t.port, "/old");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.com/new"));

    let r = http_get(t.port, "/v1/items?id=3");
    assert_eq!(r.status, 302, "default redirect code is 302");
    assert_eq!(r.header("location"), Some("/v2/v1/items?id=3"));

    let r = req(
        t.port,
        "GET /secure/page?a=b HTTP/1.1\r\nHost: www.example.net\r\n",
    );
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("https://www.example.net/secure/page?a=b")
    );

    let r = http_get(t.port, "/tmp");
    assert_eq!((r.status, r.header("location")), (302, Some("/temp")));
    assert_eq!(t.a.reqs(), 0);
}

/// The proxy keyword `redirect`: evaluated after the proxy's `http-request` rules (a deny or
/// a redirect there wins), the first matching rule answers, and a backend's own `redirect`
/// rules apply to the requests routed to it.
#[test]
fn redirect_keyword_after_http_request_rules() {
    let t = two(
        "    redirect location /never if { path /denied }\n\
         redirect scheme https code 301 if { hdr(host) -i www.example.net }\n\
         redirect location /first if { path /both }\n\
         redirect location /second if { path /both }\n\
         redirect prefix /new drop-query if { path_beg /old }\n\
         http-request deny status 403 if { path /denied }\n\
         http-request redirect location /by-rule if { path /ruled }\n\
         redirect location /by-keyword if { path /ruled }\n\
         use_backend b if { path_beg /to-b }",
        "",
    );
    let r = req(t.port, "GET /a?b=c HTTP/1.1\r\nHost: www.example.net\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://www.example.net/a?b=c"));
    let r = http_get(t.port, "/both");
    assert_eq!((r.status, r.header("location")), (302, Some("/first")));
    let r = http_get(t.port, "/old/x?q=1");
    assert_eq!((r.status, r.header("location")), (302, Some("/new/old/x")));
    // http-request rules run first, whatever the order of the lines.
    let r = http_get(t.port, "/ruled");
    assert_eq!((r.status, r.header("location")), (302, Some("/by-rule")));
    assert_eq!(http_get(t.port, "/denied").status, 403);
    assert_eq!(t.a.reqs(), 0);
    assert_eq!(http_get(t.port, "/served").server(), "A");
    assert_eq!(http_get(t.port, "/to-b/x").server(), "B");
    assert_eq!(t.a.reqs(), 1);
}

/// A backend's `redirect` rules apply after the frontend picked it.
#[test]
fn redirect_keyword_in_a_backend() {
    let t = two(
        "",
        "    redirect location /elsewhere code 307 if { path_beg /gone }",
    );
    let r = http_get(t.port, "/gone/x");
    assert_eq!((r.status, r.header("location")), (307, Some("/elsewhere")));
    assert_eq!(http_get(t.port, "/kept").server(), "A");
    assert_eq!(t.a.reqs(), 1);
}

#[test]
fn http_response_header_rules() {
    let a = HttpBackend::with_handler("A", |_| {
        Reply::Raw(
            b"HTTP/1.1 200 OK\r\nServer: secret/1.0\r\nX-Old: 1\r\nX-Old: 2\r\nX-Keep: k\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        )
    });
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    http-response set-header X-Frontend fe\n    default_backend a\n\
         backend a\n    http-response set-header X-Cond yes if {{ src 127.0.0.0/8 }}\n\
         http-response set-header X-Never 1 if {{ src 10.0.0.0/8 }}\n\
         http-response del-header Server\n    http-response set-header X-Old new\n    http-response add-header X-Keep k2\n    server A {}\n",
        a.hostport()
    );
    let _s = Sluice::start(&cfg);
    let r = http_get(port, "/cond");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("server"), None, "{:?}", r.headers);
    assert_eq!(r.headers_named("x-old"), vec!["new"]);
    assert_eq!(r.headers_named("x-keep"), vec!["k", "k2"]);
    assert_eq!(r.header("x-frontend"), Some("fe"));
    assert_eq!(r.header("x-cond"), Some("yes"), "conditional response rule");
    assert_eq!(r.header("x-never"), None);
    assert_eq!(r.body_str(), "ok");
}

#[test]
fn monitor_uri_answers_directly() {
    let t = two("    monitor-uri /healthz", "");
    let mut c = HttpClient::connect(t.port);
    let r = c.get("/healthz");
    assert_eq!(r.status, 200);
    assert_eq!(t.a.reqs(), 0, "monitor-uri must not reach the backend");
    assert_eq!(
        c.get("/healthz?x").status,
        200,
        "monitor-uri keeps the connection usable"
    );
    assert_eq!(http_get(t.port, "/other").server(), "A");
}

#[test]
fn rules_in_listen_section() {
    let b = HttpBackend::start("L");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}listen app\n    bind 127.0.0.1:{port}\n    http-request deny if {{ path_beg /admin }}\n    server L {}\n",
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(http_get(port, "/admin/x").status, 403);
    assert_eq!(http_get(port, "/x").server(), "L");
}

#[test]
fn rule_processing_is_logged_with_the_backend() {
    let t = two_with(LOGGED_HTTP, "    use_backend b if { path_beg /to-b }", "");
    http_get(t.port, "/to-b/1");
    let line = t.s.wait_log_line(|l| l.contains("/to-b/1"), WAIT);
    assert!(line.contains(" fe b/B "), "{line}");
    assert_eq!(t.b.reqs(), 1);
}

/// Header values are log-format strings, as in HAProxy: `%[fetch]` and `%var` are evaluated
/// on each request. Checked against HAProxy 2.6's output for the same rules: a missing
/// sample prints nothing (not `-`), spaces are kept, `+Q` quotes variables only.
#[test]
fn header_values_are_log_formats() {
    let t = two(
        "    http-request set-header X-Src %[src]\n\
         http-request set-header X-Client \"%ci:%[src_port]\"\n\
         http-request set-header X-Dst %[dst]:%[dst_port]\n\
         http-request set-header X-Fe \"%[fe_name] %f %b\"\n\
         http-request set-header X-Base %[base]\n\
         http-request set-header X-Q \"%[query]|%[url_param(id)]|%[cook(sid)]\"\n\
         http-request set-header X-Missing \"[%[req.hdr(nope)]]\"\n\
         http-request set-header X-Spaces \"a  b %{+Q}ci %{+Q}[src]\"\n\
         http-request set-header X-Pct 100%%\n\
         http-request set-header X-Line \"%HM %HP\"",
        "    http-request set-header X-Be %[be_name]\n\
         http-response set-header X-Served-By \"%s/%[be_name]/%ST\"",
    );
    let mut c = HttpClient::connect(t.port);
    let cport = c.local_port();
    let r = c.request(
        "GET /p/q?a=1&id=42 HTTP/1.1\r\nHost: h.example\r\nCookie: x=1; sid=abc\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-served-by"), Some("A/a/200"));
    let q = t.a.last_request();
    let h = |n: &str| q.header(n).map(str::to_string);
    let port = t.port;
    assert_eq!(h("x-src").as_deref(), Some("127.0.0.1"));
    assert_eq!(h("x-client"), Some(format!("127.0.0.1:{cport}")));
    assert_eq!(h("x-dst"), Some(format!("127.0.0.1:{port}")));
    assert_eq!(
        h("x-fe").as_deref(),
        Some("fe fe fe"),
        "before switching, %b is the frontend"
    );
    assert_eq!(h("x-be").as_deref(), Some("a"));
    assert_eq!(h("x-base").as_deref(), Some("h.example/p/q"));
    assert_eq!(h("x-q").as_deref(), Some("a=1&id=42|42|abc"));
    assert_eq!(h("x-missing").as_deref(), Some("[]"));
    assert_eq!(
        h("x-spaces").as_deref(),
        Some("a  b \"127.0.0.1\" 127.0.0.1")
    );
    assert_eq!(h("x-pct").as_deref(), Some("100%"));
    assert_eq!(h("x-line").as_deref(), Some("GET /p/q"));
}

/// A redirect target is a log-format too (`https://%[hdr(host)]%[capture.req.uri]`), and
/// the new connection fetches work in conditions.
#[test]
fn redirect_formats_and_connection_fetches() {
    let a = HttpBackend::start("A");
    let b = HttpBackend::start("B");
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{p1}\n    bind 127.0.0.1:{p2}\n\
         http-request redirect location https://%[hdr(host)]%[capture.req.uri] code 301 if {{ path_beg /secure }}\n\
         redirect prefix http://%[req.hdr(host)]/v2 if {{ path_beg /v1 }}\n\
         acl on_p2 dst_port {p2}\n\
         acl proxied url_ip 10.0.0.0/8\n\
         use_backend b if on_p2\n    use_backend b if proxied\n\
         use_backend b if {{ cook_beg(grp) beta }}\n\
         use_backend b if {{ urlp(v) 2 }}\n\
         default_backend a\n\
         backend a\n    server A {}\nbackend b\n    server B {}\n",
        a.hostport(),
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let r = req(
        p1,
        "GET /secure/x?y=1 HTTP/1.1\r\nHost: www.example.org\r\n",
    );
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://www.example.org/secure/x?y=1")
    );
    let r = req(p1, "GET /v1/items HTTP/1.1\r\nHost: h\r\n");
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("http://h/v2/v1/items"))
    );
    assert_eq!(http_get(p1, "/").server(), "A");
    assert_eq!(
        http_get(p2, "/").server(),
        "B",
        "dst_port picks by listening port"
    );
    assert_eq!(
        req(
            p1,
            "GET http://10.1.2.3:8080/x HTTP/1.1\r\nHost: 10.1.2.3:8080\r\n"
        )
        .server(),
        "B"
    );
    assert_eq!(
        req(
            p1,
            "GET http://192.168.1.1/x HTTP/1.1\r\nHost: 192.168.1.1\r\n"
        )
        .server(),
        "A"
    );
    assert_eq!(
        req(p1, "GET / HTTP/1.1\r\nHost: h\r\nCookie: grp=beta-7\r\n").server(),
        "B"
    );
    assert_eq!(http_get(p1, "/?v=2").server(), "B");
    assert_eq!(http_get(p1, "/?v=3").server(), "A");
}

/// `http-response deny`: the server's answer is replaced by the status's error page (502 by
/// default) or the rule's own reply, logged `PH` with no response time, counted in `dresp`;
/// `status` and `res.hdr()` read the response.
#[test]
fn http_response_deny_replaces_the_answer() {
    let srv = HttpBackend::with_handler("A", |r| {
        if r.target.contains("404") {
            Reply::status(404, "A", "missing")
        } else if r.target.contains("secret") {
            Reply::Full {
                status: 200,
                headers: vec![("X-Bad".into(), "1".into())],
                body: b"secret".to_vec(),
            }
        } else {
            Reply::named("A")
        }
    });
    let dir = TempDir::new();
    let sock = dir.join("stats.sock");
    let port = free_port();
    let global = LOGGED_HTTP.replacen(
        "global\n",
        &format!("global\n    stats socket {}\n", sock.display()),
        1,
    );
    let cfg = format!(
        "{global}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    http-response deny if {{ status 404 }}\n\
         http-response deny deny_status 403 content-type text/plain string nope hdr X-A b if {{ res.hdr(x-bad) -m found }}\n\
         http-response set-header X-Seen yes\n    server s1 {}\n",
        srv.hostport()
    );
    let s = Sluice::start(&cfg);

    let mut c = HttpClient::connect(port);
    let r = c.request("GET /404 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 502);
    assert_eq!(r.header("X-Server"), None, "nothing of the server's answer");
    assert!(r.conn_close(), "an error page ends the connection");
    let line = s.wait_log_line(|l| l.contains("/404"), WAIT);
    assert!(line.contains(" 502 ") && line.contains(" PH-- "), "{line}");
    assert!(line.contains("/-1/"), "no response time: {line}");

    let mut c = HttpClient::connect(port);
    let r = c.request("GET /secret HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.body_str().as_str()), (403, "nope"));
    assert_eq!(r.header("X-A"), Some("b"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("X-Seen"), None, "rules after the deny do not run");
    let line = s.wait_log_line(|l| l.contains("/secret"), WAIT);
    assert!(line.contains(" 403 ") && line.contains(" PH-- "), "{line}");

    // Other answers pass, and the connection stays usable.
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        let r = c.request("GET /ok HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!((r.status, r.body_str().as_str()), (200, "A"));
        assert_eq!(r.header("X-Seen"), Some("yes"));
    }
    assert_eq!(stat_column(&sock, "be", "s1", "dresp"), "2");
    assert_eq!(stat_column(&sock, "be", "BACKEND", "dresp"), "2");
    assert_eq!(stat_column(&sock, "fe", "FRONTEND", "dresp"), "2");
}

#[test]
fn response_samples_only_in_http_response_rules() {
    for line in [
        "http-request deny if { status 404 }",
        "use_backend be if { res.hdr(x) -m found }",
        "redirect location /x if { shdr(x) y }",
    ] {
        let (code, err) = Sluice::check(&format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind :8080\n    {line}\n    default_backend be\nbackend be\n    server s 127.0.0.1:1\n"
        ));
        assert_ne!(code, 0, "{line}");
        assert!(
            err.contains("which only 'http-response' and 'http-after-response' rules see"),
            "{line}: {err}"
        );
    }
}

/// `set-path`, `set-query`, `replace-path`, `replace-uri`: the server gets the rewritten target,
/// later rules and `use_backend` see it, and the access log keeps the request as received (as
/// HAProxy's `%r` does).
#[test]
fn request_target_rewrites() {
    let a = HttpBackend::with_handler("A", |r| Reply::echo_target("A", r));
    let b = HttpBackend::with_handler("B", |r| Reply::echo_target("B", r));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request replace-path ^/api/(.*) /\\1 if {{ path_beg /api/ }}\n\
         \x20   http-request set-query v=%[src_port] if {{ path /q }}\n\
         \x20   http-request set-path /renamed%[path] if {{ path_beg /old }}\n\
         \x20   http-request replace-uri ^/v1/(.*)$ /v2/\\1 \n\
         \x20   http-request set-header X-Seen-Path %[path]\n\
         \x20   use_backend b if {{ path_beg /v2/ }}\n    default_backend a\n\
         backend a\n    server A {}\nbackend b\n    server B {}\n",
        a.hostport(),
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    // replace-path strips the prefix (the query string stays), then replace-uri and
    // use_backend see the result.
    let r = c.request("GET /api/v1/users?id=7 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(
        (r.server(), r.body_str()),
        ("B".into(), "/v2/users?id=7".into())
    );
    assert_eq!(b.last_request().header("x-seen-path"), Some("/v2/users"));
    let line = s.wait_log_line(|l| l.contains(" fe b/B "), WAIT);
    assert!(
        line.contains("\"GET /api/v1/users?id=7 HTTP/1.1\""),
        "the log keeps the original: {line}"
    );
    // set-path keeps the query string; a log-format value sees the request.
    let r = c.request("GET /old/page?x=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.body_str(), "/renamed/old/page?x=1");
    // set-query replaces or adds the query string.
    let r = c.request("GET /q HTTP/1.1\r\nHost: t\r\n\r\n");
    let want = format!("/q?v={}", c.local_port());
    assert_eq!(r.body_str(), want);
    // No rule matches: untouched, HTTP/1.0 kept.
    let mut c10 = HttpClient::connect(port);
    let r = c10.request("GET /plain?a HTTP/1.0\r\n\r\n");
    assert_eq!(r.body_str(), "/plain?a");
    assert_eq!(a.last_request().version, "HTTP/1.0");
}

#[test]
fn rewrite_action_errors() {
    for (line, want) in [
        ("http-request set-path", "'set-path' expects one value"),
        (
            "http-request replace-path /a",
            "expects a regular expression and a replacement",
        ),
        (
            "http-request replace-uri ([ /x",
            "invalid regular expression '(['",
        ),
    ] {
        let (code, err) = Sluice::check(&format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind :8080\n    {line}\n    default_backend be\nbackend be\n    server s 127.0.0.1:1\n"
        ));
        assert_ne!(code, 0, "{line}");
        assert!(err.contains(":8: ") && err.contains(want), "{line}: {err}");
    }
}

/// `userlist` with `http_auth`, `http_auth_group` and `http-request auth`: HAProxy's 401 (the
/// realm, the connection kept for the retry, logged `LR`), plain and crypt(3) passwords
/// (SHA-512 and yescrypt, as Debian's `mkpasswd` makes them; in single quotes, since sluice
/// expands `$name` in unquoted words), groups from both sides.
#[test]
fn userlist_basic_auth() {
    use base64::Engine as _;
    let b = HttpBackend::start("A");
    let port = free_port();
    let cfg = format!(
        "global\n    log stdout format raw local0\n\
         userlist ops\n    group admin users carol\n    group dev\n\
         \x20   user alice insecure-password pw groups admin,dev\n\
         \x20   user bob password '$6$sluicesalt$2Kwkfc7XMI9qwpBviINNiYafd3p6E8kQt6vUzIYc7zTWXPt4z01ZhG/09ChgqGx.2SbuZMEAoS/VaNMH1LMiZ1' groups dev\n\
         \x20   user carol password '$y$j9T$abcdefghijklmnop$wRwvHNqzMkHLG74uLLCRVTwaZ.a1aIothEUeYGf9oED'\n\
         defaults\n    mode http\n    log global\n    option httplog\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request auth realm Ops if !{{ http_auth(ops) }}\n\
         \x20   http-request deny if {{ path_beg /admin }} !{{ http_auth_group(ops) admin }}\n\
         \x20   default_backend be\nbackend be\n    server A {}\n",
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let get = |c: &mut HttpClient, path: &str, cred: Option<&str>| {
        let auth = cred.map_or(String::new(), |c| {
            let v = base64::engine::general_purpose::STANDARD.encode(c);
            format!("Authorization: Basic {v}\r\n")
        });
        c.request(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}\r\n"))
    };
    let mut c = HttpClient::connect(port);
    let r = get(&mut c, "/", None);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"Ops\""));
    assert!(!r.conn_close(), "kept for the retry");
    let line = s.wait_log_line(|l| l.contains(" 401 "), WAIT);
    assert!(line.contains(" LR-- "), "{line}");
    // The retry on the same connection.
    assert_eq!(get(&mut c, "/", Some("alice:pw")).status, 200);
    assert_eq!(get(&mut c, "/", Some("alice:wrong")).status, 401);
    assert_eq!(get(&mut c, "/", Some("bob:s3cret pw")).status, 200);
    assert_eq!(get(&mut c, "/", Some("bob:s3cret")).status, 401);
    assert_eq!(get(&mut c, "/", Some("carol:pw")).status, 200);
    assert_eq!(get(&mut c, "/", Some("nobody:pw")).status, 401);
    // Groups: on the user line (alice) or listing the user (carol).
    assert_eq!(get(&mut c, "/admin", Some("alice:pw")).status, 200);
    assert_eq!(get(&mut c, "/admin", Some("carol:pw")).status, 200);
    assert_eq!(get(&mut c, "/admin", Some("bob:s3cret pw")).status, 403);
}

#[test]
fn userlist_errors() {
    for (text, want) in [
        (
            "userlist u\n    user a insecure-password x groups nope\n",
            ":1: userlist 'u': no such group 'nope' specified in user 'a'",
        ),
        (
            "userlist u\n    group g users ghost\n",
            ":1: userlist 'u': no such user 'ghost' specified in group 'g'",
        ),
        (
            "userlist u\n    user a password '$9$x$y'\n",
            ":2: 'user' in userlist 'u': the password of user 'a' is not a hash",
        ),
        ("userlist u\n    usr a\n", "(did you mean 'user'?)"),
        (
            "defaults\n    mode http\nfrontend fe\n    bind :8080\n    http-request auth if !{ http_auth(missing) }\n",
            ":5: unknown userlist 'missing'",
        ),
    ] {
        let (code, err) = Sluice::check(text);
        assert_ne!(code, 0, "{text}");
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// `replace-header` and `replace-value`, as operators use them: a server's absolute
/// `Location` made relative, a cookie rewritten with a sample, one value of a list changed.
#[test]
fn replace_header_and_replace_value() {
    let a = HttpBackend::with_handler("A", |_| {
        Reply::Raw(
            b"HTTP/1.1 302 Found\r\nLocation: http://internal:8080/app/login?x=1\r\nX-List: a=1, b=2,c=3\r\nContent-Length: 0\r\n\r\n".to_vec(),
        )
    });
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend a\n\
         backend a\n\
         \x20   http-request replace-header Cookie foo=([^;]*);(.*) foo=\\1;ip=%[src];\\2\n\
         \x20   http-request replace-value X-Forwarded-For ^10\\. hidden\n\
         \x20   http-request replace-header X-Absent .* never\n\
         \x20   http-response replace-header Location ^https?://[^/]*(/.*)$ \\1\n\
         \x20   http-response replace-value X-List ^b=.* b=changed\n\
         \x20   server A {}\n",
        a.hostport()
    );
    let _s = Sluice::start(&cfg);
    let r = req(
        port,
        "GET / HTTP/1.1\r\nHost: x\r\nCookie: foo=bar;baz=1\r\n\
         X-Forwarded-For: 10.1.2.3, 192.0.2.7, 10.9.9.9\r\n",
    );
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/app/login?x=1"));
    assert_eq!(r.header("x-list"), Some("a=1, b=changed,c=3"));
    let got = a.last_request();
    let h = |n: &str| {
        got.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(h("cookie").as_deref(), Some("foo=bar;ip=127.0.0.1;baz=1"));
    assert_eq!(
        h("x-forwarded-for").as_deref(),
        Some("hidden, 192.0.2.7, hidden")
    );
    assert_eq!(h("x-absent"), None);
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}backend a\n    http-request replace-header Cookie ( x\n    \
         http-response replace-value X-A b\n    server A 127.0.0.1:1\n"
    ));
    assert_eq!(code, 1);
    assert!(
        err.contains(":7: ") && err.contains("invalid regex '('"),
        "{err}"
    );
    assert!(
        err.contains(":8: ") && err.contains("expects a header name, a regex and a replacement"),
        "{err}"
    );
}

/// `option http-pretend-keepalive`: with `httpclose`, the server does not see
/// `connection: close` (HAProxy's remedy for servers that then stop chunking), and the
/// server connection is still used for one request only.
#[test]
fn http_pretend_keepalive_hides_the_close_from_the_server() {
    let a = HttpBackend::start("A");
    let b = HttpBackend::start("B");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}    option httpclose\nfrontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   use_backend b if {{ path_beg /b }}\n    default_backend a\n\
         backend a\n    option http-pretend-keepalive\n    server A {}\n\
         backend b\n    server B {}\n",
        a.hostport(),
        b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let conn_hdr = |r: &Request| {
        r.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("connection"))
            .map(|(_, v)| v.clone())
    };
    for _ in 0..2 {
        assert_eq!(http_get(port, "/a").status, 200);
    }
    assert_eq!(http_get(port, "/b").status, 200);
    let ra = a.requests();
    assert_eq!(ra.len(), 2);
    assert!(ra.iter().all(|r| conn_hdr(r).is_none()), "{ra:?}");
    assert_eq!(
        a.conns(),
        2,
        "one server connection per request all the same"
    );
    assert_eq!(conn_hdr(&b.last_request()).as_deref(), Some("close"));
}

/// `http-response return`: a server's answer replaced by the proxy's own (here a friendlier
/// page for the server's 404s), the rest of the server's response never reaching the client.
#[test]
fn http_response_return_replaces_the_servers_answer() {
    let a = HttpBackend::with_handler("A", |r| {
        if r.target == "/missing" {
            Reply::status(404, "A", "server's own 404 page")
        } else if r.target == "/boom" {
            Reply::status(500, "A", "stack trace")
        } else {
            Reply::named("A")
        }
    });
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend a\n\
         backend a\n\
         \x20   http-response return status 404 content-type text/plain lf-string \"not here (%ST)\" hdr X-Replaced yes if {{ status 404 }}\n\
         \x20   http-response deny deny_status 502 content-type text/plain lf-string \"hidden %ST from %[src]\" if {{ status 500 }}\n\
         \x20   server A {}\n",
        a.hostport()
    );
    let _s = Sluice::start(&cfg);
    let r = http_get(port, "/missing");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-replaced"), Some("yes"));
    assert_eq!(r.body, b"not here (404)");
    // A deny's reply with samples, evaluated on the response.
    let r = http_get(port, "/boom");
    assert_eq!(r.status, 502);
    assert_eq!(r.body, b"hidden 500 from 127.0.0.1");
    let r = http_get(port, "/ok");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-replaced"), None);
    assert_eq!(r.body, b"A");
}

/// `set-log-level`: a request's log line at another syslog level, or none (`silent`), from
/// an `http-request` or an `http-response` rule.
#[test]
fn set_log_level_changes_or_silences_the_log_line() {
    let a = HttpBackend::with_handler("A", |r| {
        if r.target == "/fail" {
            Reply::status(500, "A", "x")
        } else {
            Reply::named("A")
        }
    });
    let port = free_port();
    let cfg = format!(
        "global\n    log stdout format short local0\ndefaults\n    mode http\n    log global\n\
         \x20   option httplog\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request set-log-level silent if {{ path /health }}\n\
         \x20   http-request set-log-level debug if {{ path /debug }}\n\
         \x20   http-response set-log-level err if {{ status 500 }}\n\
         \x20   default_backend a\nbackend a\n    server A {}\n",
        a.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    for p in ["/health", "/debug", "/fail", "/health", "/plain"] {
        c.get(p);
    }
    // `format short` starts a line with `<LEVEL>`; lines come in request order on one
    // connection.
    let lines = s.wait_log_lines(
        3,
        |l| l.contains("GET /"),
        std::time::Duration::from_secs(5),
    );
    let at = |p: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("GET {p} ")))
            .unwrap_or_else(|| panic!("no line for {p}: {lines:?}"))
            .clone()
    };
    assert!(at("/debug").starts_with("<7>"), "{lines:?}");
    assert!(at("/fail").starts_with("<3>"), "{lines:?}");
    assert!(at("/plain").starts_with("<6>"), "{lines:?}");
    // Had the first /health been logged, it would be among the first three lines.
    assert!(
        lines.iter().all(|l| !l.contains("GET /health")),
        "silent requests are not logged: {lines:?}"
    );
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind :80\n    http-request set-log-level chatty\n"
    ));
    assert_eq!(code, 1);
    assert!(
        err.contains(":8: ") && err.contains("unknown level 'chatty'"),
        "{err}"
    );
}

/// `option http-buffer-request`: no server is chosen or connected to before the body is in
/// (a client that stops halfway gets a 408 at `timeout http-request`, and the server never
/// hears of it); a body sent in pieces reaches the server whole.
#[test]
fn http_buffer_request_waits_for_the_body() {
    let a = HttpBackend::with_handler("A", |r| Reply::status(200, "A", r.body.len().to_string()));
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}    timeout http-request 300ms\nfrontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   option http-buffer-request\n    default_backend a\nbackend a\n    server A {}\n",
        a.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    let r = c.read_response();
    assert_eq!(r.status, 408);
    assert_eq!(a.conns(), 0, "the server never saw the stalled upload");
    let mut c = HttpClient::connect(port);
    c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    c.send("56789");
    let r = c.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"10");
    assert_eq!(a.last_request().body, b"0123456789");
}

/// `http-response` formats may read the response they run on (`res.hdr`, `status`), in
/// header values and variables, as in HAProxy; a log format still may not (the response is
/// gone when the line is written).
#[test]
fn response_fetches_in_http_response_formats() {
    let t = two(
        "    http-response set-header X-Echo %[res.hdr(x-server)]-%[status]\n\
         \x20   http-response set-var(txn.srv) res.hdr(x-server),lower\n\
         \x20   http-response add-header X-Var %[var(txn.srv)]\n\
         \x20   http-response set-header X-Method %[method]\n\
         \x20   http-response set-header X-Options yes if { method OPTIONS }",
        "",
    );
    let r = http_get(t.port, "/");
    assert_eq!(r.server(), "A");
    assert_eq!(r.header("x-echo"), Some("A-200"));
    assert_eq!(r.header("x-var"), Some("a"));
    // The request's method is kept for the response rules, as in HAProxy.
    assert_eq!(r.header("x-method"), Some("GET"));
    assert_eq!(r.header("x-options"), None);
    let r = http_raw(
        t.port,
        "OPTIONS / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("x-method"), Some("OPTIONS"));
    assert_eq!(r.header("x-options"), Some("yes"));
    let (code, out) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:1\n    log-format %[res.hdr(x)]\n\
         \x20   http-request set-header X %[res.hdr(x)]\n    default_backend b\n\
         backend b\n    server s 127.0.0.1:1\n"
    ));
    assert_eq!(code, 1);
    assert!(
        out.contains(":8: ") && out.contains("'res.hdr' is not supported by sluice in log formats"),
        "{out}"
    );
    assert!(out.contains(":9: "), "{out}");
}

/// `option checkcache`: a response a shared cache could store together with its
/// `Set-Cookie` is blocked (502, `PH`, HAProxy's alert); what the cookie rules exempt passes.
#[test]
fn checkcache_blocks_cacheable_cookies() {
    let b = HttpBackend::with_handler("s1", |r| {
        let mut headers = vec![("X-Server".to_string(), "s1".to_string())];
        let mut h = |n: &str, v: &str| headers.push((n.into(), v.into()));
        let path = r.target.trim_start_matches('/');
        let status = if path.starts_with("302") { 302 } else { 200 };
        if path != "plain" {
            h("Set-Cookie", "SID=secret");
        }
        match path {
            "private" => h("Cache-Control", "max-age=60, private"),
            "nocache-cookie" => h("Cache-Control", "no-cache=\"set-cookie\""),
            "pragma" => h("Pragma", "no-cache"),
            "maxage0" => h("Cache-Control", "max-age=0"),
            "maxage60" => h("Cache-Control", "max-age=60"),
            "302public" => h("Cache-Control", "public"),
            _ => {}
        }
        Reply::Full {
            status,
            headers,
            body: b"body".to_vec(),
        }
    });
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    option checkcache\n    server s1 {}\n",
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    for (path, want) in [
        ("/plain", 200),
        ("/cookie", 502),
        ("/private", 200),
        ("/nocache-cookie", 200),
        ("/pragma", 200),
        ("/maxage0", 200),
        ("/maxage60", 502),
        ("/302", 302),
        ("/302public", 502),
    ] {
        assert_eq!(http_get(port, path).status, want, "{path}");
    }
    let post = http_raw(
        port,
        "POST /cookie HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(post.status, 200, "a POST response is not cacheable");
    let alert = s.wait_log_line(|l| l.contains("Blocking cacheable cookie"), WAIT);
    assert!(
        alert.contains("Blocking cacheable cookie in response from instance be, server s1."),
        "{alert}"
    );
    let line = s.wait_log_line(|l| l.contains("GET /cookie "), WAIT);
    assert!(line.contains(" 502 ") && line.contains(" PH--"), "{line}");
}

/// Request fetches the response rules cannot read are refused in their formats, as HAProxy
/// refuses them ("may not be reliably used here"), with the way out in the message.
#[test]
fn request_fetches_refused_in_http_response_formats() {
    for f in [
        "path",
        "req.hdr(host)",
        "url_param(a)",
        "cook(a)",
        "capture.req.uri",
    ] {
        let (code, out) = Sluice::check(&format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:1\n\
             \x20   http-response set-header X %[{f}]\n    default_backend b\n\
             backend b\n    server s 127.0.0.1:1\n"
        ));
        assert_eq!(code, 1, "{f}: {out}");
        assert!(
            out.contains(":8: ") && out.contains("set-var(txn.NAME)"),
            "{f}: {out}"
        );
    }
}

/// `http-request allow` / `http-response allow` end their section's rules (the backend's
/// still run); `http-response set-status CODE [reason TEXT]` changes the status the client
/// gets, the logs count, and the later rules see.
#[test]
fn allow_and_set_status() {
    let a = HttpBackend::start("A");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request allow if {{ path_beg /ok }}\n    http-request deny\n\
         \x20   http-response set-status 201 if {{ status 200 }}\n\
         \x20   http-response set-header X-Seen %[status]\n\
         \x20   default_backend be\n\
         backend be\n    http-request deny deny_status 451 if {{ path /ok/blocked }}\n\
         \x20   http-response set-status 299 reason \"Almost OK\" if {{ status 200 }} {{ res.hdr(x-server) -m found }}\n\
         \x20   http-response allow\n    http-response set-header X-Never yes\n\
         \x20   server s1 {}\n",
        a.hostport()
    );
    let s = Sluice::start(&cfg);
    assert_eq!(
        http_get(port, "/x").status,
        403,
        "not allowed: the deny runs"
    );
    assert_eq!(
        http_get(port, "/ok/blocked").status,
        451,
        "the backend's rules still run"
    );
    let r = http_raw(
        port,
        "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    // The backend's rules run first: 299 with its reason, then its `allow` skips its last
    // rule; the frontend's set-status does not match 299.
    assert_eq!(r.status, 299);
    assert_eq!(r.reason, "Almost OK");
    assert_eq!(r.header("x-never"), None);
    assert_eq!(
        r.header("x-seen"),
        Some("299"),
        "later rules see the new status"
    );
    let line = s.wait_log_line(|l| l.contains("GET /ok "), WAIT);
    assert!(line.contains(" 299 "), "{line}");
    let (code, out) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:1\n    http-response set-status 42\n\
         \x20   http-request allow now\n    default_backend b\nbackend b\n    server s 127.0.0.1:1\n"
    ));
    assert_eq!(code, 1);
    assert!(
        out.contains(":8: ") && out.contains("from 100 to 999"),
        "{out}"
    );
    assert!(
        out.contains(":9: ") && out.contains("unexpected argument 'now'"),
        "{out}"
    );
}

/// `http-after-response`: on every answer the client gets (the server's, and sluice's own:
/// deny, redirect, return, 503, 502), backend rules first, then the frontend's; `allow` ends a
/// section, `set-status` changes the status line. Expected heads are HAProxy 2.6.12's on the
/// same configuration and requests.
#[test]
fn http_after_response_edits_every_answer() {
    let srv = HttpBackend::start("A");
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-request set-var(txn.p) path\n    http-request deny if {{ path /deny }}\n    \
         http-request redirect location /x if {{ path /redir }}\n    \
         http-request return status 201 content-type text/plain string hi if {{ path /ret }}\n    \
         http-after-response set-header x-fe-after \"st=%[status] be=%[be_name]\"\n    \
         http-after-response add-header x-order fe\n    \
         http-after-response set-status 299 reason Fine if {{ var(txn.p) -m beg /st }}\n    \
         use_backend nosrv if {{ path /nosrv }}\n    default_backend be\n\
         backend be\n    http-response deny if {{ var(txn.p) -m str /rdeny }}\n    \
         http-after-response add-header x-order be\n    \
         http-after-response allow if {{ var(txn.p) -m str /allow }}\n    \
         http-after-response add-header x-order be2\n    server s1 {}\n\
         backend nosrv\n    http-after-response add-header x-order nosrv\n",
        srv.hostport()
    );
    let s = Sluice::start(&cfg);
    let get = |p: &str| http_get(port, p);
    let cases: [(&str, u16, &str, &[&str], &str); 8] = [
        ("/a", 200, "OK", &["be", "be2", "fe"], "st=200 be=be"),
        ("/sta", 299, "Fine", &["be", "be2", "fe"], "st=200 be=be"),
        ("/allow", 200, "OK", &["be", "fe"], "st=200 be=be"),
        ("/deny", 403, "Forbidden", &["fe"], "st=403 be=fe"),
        ("/redir", 302, "Found", &["fe"], "st=302 be=fe"),
        ("/ret", 201, "Created", &["fe"], "st=201 be=fe"),
        (
            "/nosrv",
            503,
            "Service Unavailable",
            &["nosrv", "fe"],
            "st=503 be=nosrv",
        ),
        (
            "/rdeny",
            502,
            "Bad Gateway",
            &["be", "be2", "fe"],
            "st=502 be=be",
        ),
    ];
    for (path, status, reason, order, after) in cases {
        let r = get(path);
        assert_eq!((r.status, r.reason.as_str()), (status, reason), "{path}");
        assert_eq!(r.headers_named("x-order"), order, "{path}");
        assert_eq!(r.header("x-fe-after"), Some(after), "{path}");
    }
    assert_eq!(get("/ret").body_str(), "hi", "the body is kept");
    // The log has the status the client got.
    let line = s.wait_log_line(|l| l.contains("GET /sta "), WAIT);
    assert!(line.contains(" 299 "), "{line}");
    // Keep-alive survives the rewrite of sluice's own answers.
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        let r = c.request("GET /ret HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!((r.status, r.body_str().as_str()), (201, "hi"));
    }
    let (code, err) = Sluice::check(&format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-after-response deny\n    default_backend be\nbackend be\n    server s1 {}\n",
        srv.hostport()
    ));
    assert_ne!(code, 0);
    assert!(
        err.contains(":12: 'http-after-response' in frontend 'fe': unknown action 'deny'"),
        "{err}"
    );
}

/// Fetches of the proxies' and servers' state and of the process: what HAProxy operators put
/// in headers (`srv_name`) and conditions (`nbsrv(be) lt 1`), read at the moment the rule
/// runs.
#[test]
fn state_fetches_see_servers_and_proxies() {
    let a = HttpBackend::start("A");
    let b = HttpBackend::start("B");
    let fb = HttpBackend::start("FB");
    let port = free_port();
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let cfg = format!(
        "global\n    stats socket {} level admin\n{LOGGED_HTTP}\
         frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-request set-header x-nb %[nbsrv(be)]\n    \
         http-request set-header x-slots %[connslots(be)]\n    \
         http-request set-header x-ids %[fe_id]/%[be_id]\n    \
         http-request set-header x-env %[env(SLUICE_T_ENV)]\n    \
         http-request set-header x-host %[hostname]\n    \
         http-request set-header x-rand %[rand(10)]\n    \
         http-request set-header x-date %[date(10)]\n    \
         http-request set-header x-date-ms %[date(-2000,ms)]\n    \
         http-request set-header x-date-us %[date(0,us)]/%[date_us]\n    \
         http-request set-header x-up %[srv_is_up(be/s2)]\n    \
         http-response set-header x-srv %[srv_name]/%[srv_id]\n    \
         use_backend fallback if {{ nbsrv(be) lt 1 }}\n    default_backend be\n\
         backend be\n    balance first\n    \
         server s1 {} id 7 maxconn 10 maxqueue 5\n    server s2 {} id 8 maxconn 10 maxqueue 5\n\
         backend fallback\n    server f {}\n",
        sock.display(),
        a.hostport(),
        b.hostport(),
        fb.hostport()
    );
    let s = Sluice::builder(&cfg).env("SLUICE_T_ENV", "hello").start();
    let r = http_get(port, "/x");
    assert_eq!(r.header("x-srv"), Some("s1/7"), "the server that answered");
    let got = a.last_request();
    assert_eq!(got.header("x-nb"), Some("2"));
    assert_eq!(
        got.header("x-slots"),
        Some("30"),
        "2 × (10 free + 5 queue places)"
    );
    // No backend yet: be_id is the frontend's. The CLI's proxy took id 1, as in HAProxy.
    assert_eq!(got.header("x-ids"), Some("2/2"));
    assert_eq!(got.header("x-env"), Some("hello"));
    assert_eq!(got.header("x-up"), Some("1"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(got.header("x-host"), Some(host.trim()));
    let rand: u32 = got.header("x-rand").unwrap().parse().unwrap();
    assert!(rand < 10);
    let date: u64 = got.header("x-date").unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((now + 8..=now + 12).contains(&date), "{date} vs {now}");
    // With a unit, the offset is in that unit; `date_us` is the microseconds of the second.
    let ms: u64 = got.header("x-date-ms").unwrap().parse().unwrap();
    assert!(
        (now * 1000 - 4000..=now * 1000 + 1000).contains(&ms),
        "{ms} vs {now}"
    );
    let (us, frac) = got.header("x-date-us").unwrap().split_once('/').unwrap();
    let (us, frac): (u64, u64) = (us.parse().unwrap(), frac.parse().unwrap());
    assert!(
        us / 1_000_000 + 2 >= now && us / 1_000_000 <= now,
        "{us} vs {now}"
    );
    assert!(frac < 1_000_000);
    // A draining server does not count (HAProxy counts servers with a weight).
    assert_eq!(stats_cli(&sock, "set server be/s2 state drain").trim(), "");
    let _ = http_get(port, "/d");
    assert_eq!(a.last_request().header("x-nb"), Some("1"));
    assert_eq!(stats_cli(&sock, "set server be/s2 state ready").trim(), "");
    // Servers in maintenance: nbsrv drops, and the condition sends to the fallback.
    assert_eq!(stats_cli(&sock, "set server be/s2 state maint").trim(), "");
    let _ = http_get(port, "/y");
    let got = a.last_request();
    assert_eq!(
        (got.header("x-nb"), got.header("x-up")),
        (Some("1"), Some("0"))
    );
    assert_eq!(got.header("x-slots"), Some("15"));
    assert_eq!(stats_cli(&sock, "set server be/s1 state maint").trim(), "");
    let r = http_get(port, "/z");
    assert_eq!(r.server(), "FB");
    assert_eq!(r.header("x-srv"), Some("f/1"));
    drop(s);
    // Arguments are checked at load.
    let (code, err) = Sluice::check(&format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-request set-header x %[srv_conn(be)]\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        a.hostport()
    ));
    assert_ne!(code, 0);
    assert!(err.contains("'srv_conn' expects BACKEND/SERVER"), "{err}");
    // Names must exist, as in HAProxy: a typo would make the rule silently never match.
    let (code, err) = Sluice::check(&format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         use_backend be if {{ nbsrv(bee) gt 0 }}\n    \
         http-request set-header x %[srv_conn(be/s9)]\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        a.hostport()
    ));
    assert_ne!(code, 0);
    assert!(
        err.contains(":12: 'nbsrv': unable to find backend 'bee'"),
        "{err}"
    );
    assert!(
        err.contains(":13: 'srv_conn': unable to find server 's9' in backend 'be'"),
        "{err}"
    );
    assert!(err.contains("(2 errors)"), "each reported once: {err}");
}

/// `option http-buffer-request` waits for the body before the frontend's http-request rules,
/// as HAProxy does, so that they can read it (`req.body`, `req.body_size`).
#[test]
fn buffered_body_is_seen_by_request_rules() {
    let t = two(
        "    option http-buffer-request\n    \
         http-request deny if { req.body -m sub evil }\n    \
         http-request set-header x-size %[req.body_size]\n    \
         http-request set-header x-ver %[req.ver]\n    \
         use_backend b if { req.body_len gt 3 }",
        "",
    );
    let post = |body: &str| {
        let mut c = HttpClient::connect(t.port);
        // The head alone first: the body comes in a later segment.
        c.send(format!(
            "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ));
        // The proxy has read the head (and waits for the body) before the body is sent.
        wait_consumed(&c.wire.stream);
        c.request(body)
    };
    assert_eq!(post("this is evil").status, 403);
    let r = post("fine body");
    assert_eq!((r.status, r.body_str().as_str()), (200, "B"));
    assert_eq!(post("ok").body_str(), "A");
    let seen = t.b.requests();
    let last = seen.last().unwrap();
    assert_eq!(last.header("x-size"), Some("9"));
    assert_eq!(last.header("x-ver"), Some("1.1"));
    let _ = &t.a;
}

/// `capture.req.hdr(N)` / `capture.res.hdr(N)` read capture slots in `http-response` rules
/// (what `http-request capture` or `capture request header` kept).
#[test]
fn capture_slots_in_response_rules() {
    let t = two(
        "    declare capture request len 32\n    capture request header User-Agent len 16\n    \
         capture response header X-Server len 8\n    \
         http-request capture req.hdr(host) id 0\n    \
         http-response set-header x-host %[capture.req.hdr(0)]\n    \
         http-response set-header x-ua %[capture.req.hdr(1)]\n    \
         http-response set-header x-srv %[capture.res.hdr(0)]",
        "",
    );
    let r = req(
        t.port,
        "GET / HTTP/1.1\r\nHost: example.org\r\nUser-Agent: probe/1.0\r\n",
    );
    assert_eq!(r.header("x-host"), Some("example.org"));
    assert_eq!(r.header("x-ua"), Some("probe/1.0"));
    assert_eq!(r.header("x-srv"), Some("A"));
    let _ = (&t.a, &t.b, &t.s);
    // In http-request rules the slots are refused, with where they work.
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{}\n    declare capture request len 8\n    \
         http-request set-header x %[capture.req.hdr(0)]\n    default_backend a\nbackend a\n    server s 127.0.0.1:1\n",
        free_port()
    ));
    assert_ne!(code, 0);
    assert!(err.contains("in 'http-response' rules only"), "{err}");
}

/// `http-response redirect location FMT [code N]` replaces the server's answer; only
/// `location` redirects are possible there, as in HAProxy.
#[test]
fn http_response_redirect_location() {
    let t = two(
        "    http-response redirect location /moved?from=%[status]&by=%[res.hdr(x-server)] code 303 if { status 200 }",
        "",
    );
    let r = req(t.port, "GET /x HTTP/1.1\r\nHost: h\r\n");
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/moved?from=200&by=A"));
    assert_eq!(r.body_str(), "");
    let _ = (&t.a, &t.b, &t.s);
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{}\n    http-response redirect prefix /p\n    \
         default_backend a\nbackend a\n    server s 127.0.0.1:1\n",
        free_port()
    ));
    assert_ne!(code, 0);
    assert!(err.contains("only 'location' redirects"), "{err}");
}

/// `option http-use-proxy-header`: a proxied request (absolute target) is authenticated as a
/// proxy does, with `Proxy-Authorization` and a 407; an origin-form one as before.
#[test]
fn proxy_header_authentication() {
    let port = free_port();
    let cfg = format!(
        "userlist u\n    user bob insecure-password pw\n{DEFAULTS_HTTP}frontend fe\n    \
         bind 127.0.0.1:{port}\n    option http-use-proxy-header\n    \
         http-request auth realm px unless {{ http_auth(u) }}\n    \
         http-request return status 200 content-type text/plain string ok\n"
    );
    let _s = Sluice::start(&cfg);
    // "bob:pw"
    let creds = "Ym9iOnB3";
    let r = req(
        port,
        "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n",
    );
    assert_eq!(r.status, 407);
    assert_eq!(r.header("proxy-authenticate"), Some("Basic realm=\"px\""));
    assert_eq!(r.header("www-authenticate"), None);
    let ok = format!(
        "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic {creds}\r\n"
    );
    assert_eq!(req(port, &ok).status, 200);
    // The origin's header does not authenticate to the proxy.
    let wrong = format!(
        "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nAuthorization: Basic {creds}\r\n"
    );
    assert_eq!(req(port, &wrong).status, 407);
    // An origin-form request: 401 and Authorization.
    let r = req(port, "GET /x HTTP/1.1\r\nHost: h\r\n");
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    let ok = format!("GET /x HTTP/1.1\r\nHost: h\r\nAuthorization: Basic {creds}\r\n");
    assert_eq!(req(port, &ok).status, 200);
}
