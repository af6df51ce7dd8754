//! Command line: -v, -vv, -h, -c (valid / invalid with exact messages), -cc, unknown and
//! compatibility flags, -f DIR, -p PIDFILE.

mod common;

use common::*;

const GOOD: &str = "global
    maxconn 100
defaults
    mode http
    timeout connect 1s
    timeout client 1s
    timeout server 1s
frontend fe
    bind 127.0.0.1:18080
    default_backend be
backend be
    server s1 127.0.0.1:18081
";

fn alert_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("[ALERT]"))
        .collect()
}

#[test]
fn version_short() {
    let o = run_cli(&["-v"]);
    assert_eq!(o.code, 0, "{o:?}");
    let first = o.stdout.lines().next().unwrap_or("");
    let re = regex::Regex::new(r"^sluice version \d+\.\d+\.\d+").unwrap();
    assert!(re.is_match(first), "unexpected -v output: {:?}", o.stdout);
}

#[test]
fn version_verbose_is_a_superset() {
    let v = run_cli(&["-v"]);
    let vv = run_cli(&["-vv"]);
    assert_eq!(vv.code, 0, "{vv:?}");
    let first_v = v.stdout.lines().next().unwrap();
    assert_eq!(
        vv.stdout.lines().next().unwrap(),
        first_v,
        "-vv must start with the -v line"
    );
    assert!(
        vv.stdout.lines().filter(|l| !l.trim().is_empty()).count()
            > v.stdout.lines().filter(|l| !l.trim().is_empty()).count(),
        "-vv should say more than -v:\n{}",
        vv.stdout
    );
}

#[test]
fn help_prints_usage_and_exits_1() {
    let o = run_cli(&["-h"]);
    assert_eq!(o.code, 1, "HAProxy exits 1 on -h: {o:?}");
    assert!(o.stderr.contains("Usage"), "{o:?}");
    assert!(o.stderr.contains("-f"), "usage should mention -f: {o:?}");
}

#[test]
fn unknown_flag_is_rejected() {
    let o = run_cli(&["-zz", "-f", "/nonexistent.cfg"]);
    assert_ne!(o.code, 0, "{o:?}");
    assert!(
        o.stderr.contains("-zz"),
        "the error should name the flag: {o:?}"
    );
}

#[test]
fn check_valid_config() {
    let o = Sluice::check_full(GOOD, &[]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("Configuration file is valid"), "{o:?}");
    assert!(alert_lines(&o.stderr).is_empty(), "{o:?}");
}

#[test]
fn check_unknown_keyword_names_file_line_and_keyword() {
    let cfg = GOOD.replace(
        "    default_backend be\n",
        "    default_backend be\n    frobnicate yes\n",
    );
    // frobnicate is on line 11.
    let o = Sluice::check_full(&cfg, &[]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(!o.stdout.contains("Configuration file is valid"), "{o:?}");
    let alerts = alert_lines(&o.stderr);
    assert_eq!(
        alerts.len(),
        2,
        "one problem + the final line expected:\n{}",
        o.stderr
    );
    assert!(
        alerts[0].starts_with("[ALERT] (sluice) : config : @CFG@:11: "),
        "bad prefix: {:?}",
        alerts[0]
    );
    assert!(alerts[0].contains("'frobnicate'"), "{:?}", alerts[0]);
    assert!(
        alerts[1].contains("Fatal errors found in configuration (1 error"),
        "{:?}",
        alerts[1]
    );
}

#[test]
fn check_lists_every_error_in_order_with_count() {
    let cfg = "defaults
    mode http
    timeout connect 1s
    timeout client abc
    timeout server 1s
frontend fe
    bind 127.0.0.1:18080
    maxconn lots
    frobnicate
";
    let o = Sluice::check_full(cfg, &[]);
    assert_eq!(o.code, 1, "{o:?}");
    let alerts = alert_lines(&o.stderr);
    let last = *alerts.last().expect("no alert lines");
    assert_eq!(
        last, "[ALERT] (sluice) : config : Fatal errors found in configuration (3 errors).",
        "{}",
        o.stderr
    );
    let problems = &alerts[..alerts.len() - 1];
    assert_eq!(problems.len(), 3, "{}", o.stderr);
    let lines: Vec<&str> = problems
        .iter()
        .map(|l| {
            l.strip_prefix("[ALERT] (sluice) : config : @CFG@:")
                .unwrap_or_else(|| panic!("bad prefix: {l:?}"))
                .split(':')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(
        lines,
        vec!["4", "8", "9"],
        "errors must be listed in file order:\n{}",
        o.stderr
    );
    let by_line = |n: &str| {
        problems
            .iter()
            .find(|l| l.contains(&format!("@CFG@:{n}: ")))
            .unwrap()
    };
    assert!(
        by_line("4").contains("abc"),
        "timeout error should quote the value: {}",
        by_line("4")
    );
    assert!(by_line("8").contains("lots"), "{}", by_line("8"));
    assert!(by_line("9").contains("frobnicate"), "{}", by_line("9"));
}

#[test]
fn check_unknown_backend_reference() {
    let cfg = GOOD.replace("default_backend be", "default_backend nope_backend");
    let o = Sluice::check_full(&cfg, &[]);
    assert_eq!(o.code, 1, "{o:?}");
    let alerts = alert_lines(&o.stderr);
    assert!(alerts.len() >= 2, "{}", o.stderr);
    assert!(
        alerts.iter().any(|l| l.contains("nope_backend")),
        "the message should name the backend:\n{}",
        o.stderr
    );
}

#[test]
fn check_exact_tokenizer_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "global\n.endif\n",
            "@CFG@:2: '.endif' without a matching '.if'",
        ),
        ("global\n.alert \"boom\"\n", "@CFG@:2: boom"),
        ("global\n.frob x\n", "@CFG@:2: unknown directive '.frob'"),
        (
            "global\n    maxconn \"10\n",
            "@CFG@:2: unmatched quote (\")",
        ),
        (
            "global\n.if defined(HOME)\n    maxconn 10\n",
            "@CFG@:2: '.if' block is not closed (missing '.endif')",
        ),
    ];
    for (cfg, msg) in cases {
        let o = Sluice::check_full(cfg, &[]);
        assert_eq!(o.code, 1, "{cfg:?}: {o:?}");
        let want = format!("[ALERT] (sluice) : config : {msg}");
        assert!(
            o.stderr.lines().any(|l| l == want),
            "{cfg:?}: expected line {want:?} in:\n{}",
            o.stderr
        );
        assert!(
            o.stderr.lines().any(|l| l
                == "[ALERT] (sluice) : config : Fatal errors found in configuration (1 error)."),
            "{cfg:?}: final line missing:\n{}",
            o.stderr
        );
    }
}

#[test]
fn check_missing_file() {
    let o = run_cli(&["-c", "-f", "/nonexistent/sluice-it.cfg"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("/nonexistent/sluice-it.cfg"), "{o:?}");
}

#[test]
fn check_expands_variables_and_conditions() {
    let cfg = "global
.if defined(SLUICE_IT_BAD)
    frobnicate
.endif
    maxconn \"${SLUICE_IT_MAXCONN-50}\"
";
    let ok = Sluice::check_full(cfg, &[]);
    assert_eq!(ok.code, 0, "{ok:?}");
    let bad = Sluice::check_full(cfg, &[("SLUICE_IT_BAD", "1")]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("@CFG@:3: "), "{bad:?}");
    let badnum = Sluice::check_full(cfg, &[("SLUICE_IT_MAXCONN", "lots")]);
    assert_eq!(
        badnum.code, 1,
        "maxconn 'lots' must be rejected: {badnum:?}"
    );
    assert!(badnum.stderr.contains("@CFG@:5: "), "{badnum:?}");
}

#[test]
fn cc_evaluates_conditions() {
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Env, i32)] = &[
        ("defined(SLUICE_IT_CC)", &[("SLUICE_IT_CC", "1")], 0),
        ("defined(SLUICE_IT_CC_UNSET)", &[], 1),
        ("streq(foo,foo)", &[], 0),
        ("streq(foo,bar)", &[], 1),
        ("strneq(foo,bar)", &[], 0),
        ("version_atleast(2.4)", &[], 0),
        ("version_atleast(99.0)", &[], 1),
        ("version_before(99.0)", &[], 0),
        (
            "defined(SLUICE_IT_CC) && streq(\"$SLUICE_IT_CC\",yes)",
            &[("SLUICE_IT_CC", "yes")],
            0,
        ),
        ("!defined(SLUICE_IT_CC_UNSET) || streq(a,b)", &[], 0),
        ("nosuchpredicate(1)", &[], 2),
    ];
    for (expr, env, code) in cases {
        let o = run_cli_env(&["-cc", expr], env);
        assert_eq!(o.code, *code, "-cc {expr:?} with {env:?}: {o:?}");
    }
}

#[test]
fn compat_flags_are_accepted() {
    let dir = TempDir::new();
    let p = dir.write("c.cfg", GOOD);
    let p = p.to_str().unwrap();
    let o = run_cli(&[
        "-c", "-f", p, "-dM", "-dI", "-L", "node1", "-m", "512", "-W", "-Ws", "-N", "100", "-dr",
        "-q",
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    let o = run_cli(&[
        "-c",
        "-f",
        p,
        "-dM0x55",
        "-dW",
        "-S",
        "/tmp/x.sock",
        "-C",
        "/",
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("Configuration file is valid"), "{o:?}");
}

#[test]
fn config_directory_loads_cfg_files_in_order() {
    let dir = TempDir::new();
    // defaults in the first file must apply to the frontend in the second one; a non-.cfg file
    // with garbage must be ignored.
    dir.write("conf/10-defaults.cfg", "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n");
    dir.write(
        "conf/20-proxies.cfg",
        "frontend fe\n    bind 127.0.0.1:18082\n    default_backend be\nbackend be\n    server s1 127.0.0.1:18083\n",
    );
    dir.write("conf/README", "this is not a config file\n");
    let d = dir.join("conf");
    let o = run_cli(&["-c", "-f", d.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{o:?}");

    dir.write("conf/30-bad.cfg", "backend be2\n    balance frobnicated\n");
    let o = run_cli(&["-c", "-f", d.to_str().unwrap()]);
    assert_eq!(o.code, 1, "{o:?}");
    let bad = dir.join("conf/30-bad.cfg");
    let want = format!("[ALERT] (sluice) : config : {}:2: ", bad.display());
    assert!(
        o.stderr.lines().any(|l| l.starts_with(&want)),
        "expected {want:?}... in:\n{}",
        o.stderr
    );
}

#[test]
fn several_files_report_their_own_names() {
    let dir = TempDir::new();
    let a = dir.write("a.cfg", "global\n    maxconn 10\n");
    let b = dir.write("b.cfg", "defaults\n    mode http\n    frobnicate\n");
    let o = run_cli(&["-c", "-f", a.to_str().unwrap(), "-f", b.to_str().unwrap()]);
    assert_eq!(o.code, 1, "{o:?}");
    let want = format!("[ALERT] (sluice) : config : {}:3: ", b.display());
    assert!(
        o.stderr.lines().any(|l| l.starts_with(&want)),
        "expected {want:?}... in:\n{}",
        o.stderr
    );
}

#[test]
fn pidfile_holds_the_running_pid() {
    let port = free_port();
    let dir = TempDir::new();
    let pf = dir.join("sluice.pid");
    let cfg =
        format!("{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    monitor-uri /up\n");
    let s = Sluice::builder(&cfg)
        .arg("-p")
        .arg(pf.to_str().unwrap())
        .start();
    wait_until("pidfile written", WAIT, || {
        std::fs::read_to_string(&pf).is_ok_and(|t| t.ends_with('\n'))
    });
    let text = std::fs::read_to_string(&pf).unwrap();
    assert_eq!(
        text.trim().parse::<i32>().unwrap(),
        s.pid(),
        "pidfile: {text:?}"
    );
    assert_eq!(http_get(port, "/up").status, 200);
}

#[test]
fn no_config_file_is_an_error() {
    let o = run_cli(&["-c"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.starts_with("[ALERT]"), "{o:?}");
}

/// Every keyword and option sluice implements, in one config (also valid for HAProxy 2.6).
const KITCHEN_SINK: &str = r#"global
    nbthread 2
    maxconn 500
    pidfile @DIR@/never-used.pid
    log stdout format raw local0
    log 127.0.0.1:5140 local1 info
    cpu-map 1/1-2 0-1
    tune.bufsize 16384
    tune.maxrewrite 1024
    tune.maxaccept 32
    tune.idle-pool.shared on
    hard-stop-after 30s

defaults
    mode http
    log global
    option httplog
    option dontlognull
    option redispatch
    retries 2
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 2s
    timeout queue 5s
    timeout tunnel 1h
    timeout client-fin 1s
    timeout server-fin 1s
    default-server weight 10 maxconn 100

frontend www
    bind 127.0.0.1:18100 name plain maxconn 100 backlog 64 defer-accept tfo
    bind unix@@DIR@/www.sock
    maxconn 200
    backlog 128
    monitor-uri /healthz
    option forwardfor except 127.0.0.0/8 header X-Real-IP
    option http-keep-alive
    errorfile 503 @DIR@/503.http
    acl is_api path_beg -i /api/
    acl is_img path_end .png .jpg
    acl is_exact path /exact
    acl is_re path_reg ^/v[0-9]+/
    acl has_admin hdr(X-Role) -i admin
    acl beta_host hdr_beg(host) beta.
    acl org_host hdr_end(host) .org
    acl is_post method POST
    acl local_net src 127.0.0.0/8 10.0.0.0/8
    http-request deny deny_status 429 if has_admin !local_net
    http-request set-header X-Frontend www
    http-request add-header X-Trace 1
    http-request del-header X-Internal
    http-request return status 200 content-type text/plain string "pong" hdr X-A b if {{ path /ping }}
    http-request redirect location https://example.com/ code 301 if {{ path /old }}
    http-request redirect prefix /v2 if {{ path_beg /v1/ }}
    http-request redirect scheme https if {{ hdr(host) -i secure.example.com }}
    http-response set-header X-Served-By sluice
    http-response add-header X-Extra 1
    http-response del-header Server
    use_backend api if is_api || is_exact
    use_backend static if is_img
    use_backend api unless {{ path_beg / }}
    default_backend app

backend app
    balance roundrobin
    option http-server-close
    option abortonclose
    server a1 127.0.0.1:18101 weight 3 maxconn 10 maxqueue 5 id 11
    server a2 127.0.0.1:18102 weight 1
    server a3 127.0.0.1:18103 backup
    server a4 127.0.0.1:18104 disabled

backend api
    balance uri depth 2
    hash-type consistent
    option httpclose
    server p1 127.0.0.1:18105
    server p2 127.0.0.1:18106

backend static
    balance hdr(X-Tenant)
    server s1 127.0.0.1:18107

backend b_static_rr
    balance static-rr
    server s1 127.0.0.1:18108

backend b_leastconn
    balance leastconn
    server s1 127.0.0.1:18108

backend b_first
    balance first
    server s1 127.0.0.1:18108

backend b_source
    balance source
    hash-type map-based
    server s1 127.0.0.1:18108

backend b_uri
    balance uri whole
    server s1 127.0.0.1:18108

backend b_uri2
    balance uri len 10 path-only
    server s1 127.0.0.1:18108

backend b_param
    balance url_param user
    server s1 127.0.0.1:18108

backend b_random
    balance random(3)
    server s1 127.0.0.1:18108

listen tcp_in
    mode tcp
    bind 127.0.0.1:18110
    option tcplog
    balance roundrobin
    server t1 127.0.0.1:18111
"#;

#[test]
fn check_accepts_every_supported_keyword() {
    let dir = TempDir::new();
    dir.write(
        "503.http",
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
    );
    let cfg = KITCHEN_SINK
        .replace("{{", "{")
        .replace("}}", "}")
        .replace("@DIR@", dir.path().to_str().unwrap());
    let p = dir.write("ks.cfg", &cfg);
    let o = run_cli(&["-c", "-f", p.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("Configuration file is valid"), "{o:?}");
    assert!(alert_lines(&o.stderr).is_empty(), "{}", o.stderr);
}

/// `default-path`: relative paths of a file start from its directory (`config`), its parent
/// (`parent`) or a given one (`origin`), as in HAProxy; `current` (the default) is where
/// sluice started. The policy carries over to the next files, each from its own directory.
#[test]
fn default_path_sets_where_relative_files_are_read_from() {
    let dir = TempDir::new();
    let page = "HTTP/1.0 503 Service Unavailable\r\ncontent-type: text/plain\r\n\r\ndown\n";
    dir.write("site/conf/errors/503.http", page);
    dir.write("site/errors/503.http", page);
    dir.write("site/other/errors/503.http", page);
    let body = |policy: &str, be: &str| {
        format!(
            "global\n    default-path {policy}\ndefaults\n    mode http\n    timeout connect 1s\n\
             \x20   timeout client 1s\n    timeout server 1s\nbackend {be}\n\
             \x20   errorfile 503 errors/503.http\n    server s1 127.0.0.1:18083\n"
        )
    };
    let check = |files: &[&std::path::Path]| {
        let mut args = vec!["-c"];
        for f in files {
            args.extend(["-f", f.to_str().unwrap()]);
        }
        run_cli(&args)
    };
    let conf = dir.write("site/conf/a.cfg", body("config", "a"));
    let o = check(&[&conf]);
    assert_eq!(o.code, 0, "{o:?}");
    // The next file is read from its own directory.
    let other = dir.write(
        "site/other/b.cfg",
        "backend b\n    errorfile 503 errors/503.http\n",
    );
    assert_eq!(check(&[&conf, &other]).code, 0);
    let conf = dir.write("site/conf/a.cfg", body("parent", "a"));
    assert_eq!(check(&[&conf]).code, 0);
    let origin = format!("origin {}", dir.join("site/other").display());
    let conf = dir.write("site/conf/a.cfg", body(&origin, "a"));
    assert_eq!(check(&[&conf]).code, 0);
    // `current`: from where sluice runs, where there is no `errors/503.http`.
    let conf = dir.write("site/conf/a.cfg", body("current", "a"));
    let o = check(&[&conf]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("errors/503.http"), "{}", o.stderr);
    let conf = dir.write("site/conf/a.cfg", body("nowhere", "a"));
    let o = check(&[&conf]);
    assert!(
        o.stderr.contains("unknown policy 'nowhere'"),
        "{}",
        o.stderr
    );
}
