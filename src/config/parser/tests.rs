//! End-to-end tests of the configuration parser through [`load`]: every supported keyword with
//! its HAProxy 2.6 semantics and defaults, `defaults` inheritance, cross-proxy resolution, and
//! the error messages (`file:line: 'keyword' in <section>: reason`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::load;
use crate::config::{
    Balance, Bind, BindAddr, Config, ConfigError, CpuMap, Deny, HashFunction, HashMethod, HashType,
    HeaderAction, HttpConnMode, HttpRequestAction, HttpResponseAction, HttpView, LfValue, LogDest,
    LogFormat, LogTarget, Mode, Proxy, ProxyKind, Redirect, RedirectKind, Reply,
};

// ---------------------------------------------------------------------------------------------
// Helpers

/// Joins lines with `\n`, so that `lines[i]` is line `i + 1` of the file.
fn cfg(lines: &[&str]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

fn parse(lines: &[&str]) -> Result<Config, Vec<ConfigError>> {
    load(&[("t.cfg".to_string(), cfg(lines))], &|_| None)
}

fn ok(lines: &[&str]) -> Config {
    match parse(lines) {
        Ok(c) => c,
        Err(e) => panic!("unexpected errors:\n{}", render(&e)),
    }
}

fn render(e: &[ConfigError]) -> String {
    e.iter().map(|e| format!("  {e}\n")).collect()
}

/// All errors, rendered as `file:line: message`.
fn errs(lines: &[&str]) -> Vec<String> {
    match parse(lines) {
        Ok(_) => panic!("expected errors, the configuration loaded:\n{}", cfg(lines)),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

/// The only error, rendered; checks it contains every one of `parts`.
fn err1(lines: &[&str], parts: &[&str]) -> String {
    let e = errs(lines);
    assert_eq!(e.len(), 1, "expected exactly one error, got {e:#?}");
    has(&e[0], parts);
    e.into_iter().next().unwrap()
}

/// The error reported for line `line` of `t.cfg`.
fn error_at(e: &[String], line: usize) -> &str {
    let prefix = format!("t.cfg:{line}: ");
    e.iter()
        .find(|m| m.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no error at line {line}: {e:#?}"))
}

/// The warnings of a loaded configuration, rendered as `file:line: message`.
fn warnings(c: &Config) -> Vec<String> {
    c.warnings.iter().map(ToString::to_string).collect()
}

/// Loads, expects exactly one warning, checks it contains every one of `parts`.
fn warn1(lines: &[&str], parts: &[&str]) -> Config {
    let c = ok(lines);
    let w = warnings(&c);
    assert_eq!(w.len(), 1, "expected exactly one warning, got {w:#?}");
    has(&w[0], parts);
    c
}

fn has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} does not contain {p:?}");
    }
}

fn px<'a>(c: &'a Config, name: &str) -> &'a Proxy {
    c.proxies
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no proxy '{name}'"))
}

fn idx(c: &Config, name: &str) -> usize {
    c.proxy_by_name(name).unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn tcp(s: &str) -> BindAddr {
    BindAddr::Tcp(sa(s))
}

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}

/// A minimal request view to evaluate parsed conditions.
struct Req {
    method: &'static str,
    uri: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    src: Option<IpAddr>,
}

impl Req {
    fn get(uri: &'static str) -> Req {
        Req {
            method: "GET",
            uri,
            headers: Vec::new(),
            src: Some("192.0.2.1".parse().unwrap()),
        }
    }
}

impl HttpView for Req {
    fn method(&self) -> &[u8] {
        self.method.as_bytes()
    }
    fn uri(&self) -> &[u8] {
        self.uri.as_bytes()
    }
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            .any(|(_, v)| f(v.as_bytes()))
    }
    fn src(&self) -> Option<IpAddr> {
        self.src
    }
}

/// A file in the temporary directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, content: &[u8]) -> TempFile {
        let p = std::env::temp_dir().join(format!(
            "sluice-parser-test-{}-{tag}.http",
            std::process::id()
        ));
        std::fs::write(&p, content).unwrap();
        TempFile(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// global

#[test]
fn global_defaults_without_global_section() {
    let c = ok(&["listen l", "  bind :80"]);
    let g = &c.global;
    assert_eq!(g.nbthread, None);
    assert_eq!(g.maxconn, None);
    assert!(!g.daemon);
    assert_eq!(g.pidfile, None);
    assert!(g.logs.is_empty());
    assert!(g.cpu_map.is_empty());
    assert_eq!((g.bufsize, g.maxrewrite, g.maxaccept), (16384, 1024, 64));
    assert!(g.idle_pool_shared);
    assert_eq!(g.hard_stop_after, None);
}

#[test]
fn global_keywords() {
    let c = ok(&[
        "global",
        "  nbthread 4",
        "  maxconn 20000",
        "  daemon",
        "  pidfile /run/sluice.pid",
        "  tune.bufsize 32768",
        "  tune.maxrewrite 4096",
        "  tune.maxaccept 16",
        "  tune.idle-pool.shared off",
        "  hard-stop-after 5m",
    ]);
    let g = &c.global;
    assert_eq!(g.nbthread, Some(4));
    assert_eq!(g.maxconn, Some(20000));
    assert!(g.daemon);
    assert_eq!(g.pidfile, Some(PathBuf::from("/run/sluice.pid")));
    assert_eq!((g.bufsize, g.maxrewrite, g.maxaccept), (32768, 4096, 16));
    assert!(!g.idle_pool_shared);
    assert_eq!(g.hard_stop_after, Some(Duration::from_secs(300)));

    let c = ok(&[
        "global",
        "  tune.bufsize 64k",
        "  tune.maxaccept -1",
        "  tune.idle-pool.shared on",
        "  hard-stop-after 1h",
    ]);
    assert_eq!(c.global.bufsize, 65536);
    assert_eq!(c.global.maxaccept, u32::MAX);
    assert!(c.global.idle_pool_shared);
    assert_eq!(c.global.hard_stop_after, Some(Duration::from_secs(3600)));
    assert!(c.proxies.is_empty());
}

#[test]
fn global_maxrewrite_is_readjusted_to_half_of_bufsize() {
    // HAProxy: "It is automatically readjusted to half of bufsize if it is larger than that."
    let c = ok(&["global", "  tune.bufsize 4096", "  tune.maxrewrite 3000"]);
    assert_eq!(c.global.maxrewrite, 2048);
    // Order does not matter: the check runs once the whole section is known.
    let c = ok(&["global", "  tune.maxrewrite 3000", "  tune.bufsize 4096"]);
    assert_eq!(c.global.maxrewrite, 2048);
    // The default (1024) too.
    let c = ok(&["global", "  tune.bufsize 1024"]);
    assert_eq!(c.global.maxrewrite, 512);
    let c = ok(&["global", "  tune.bufsize 16k", "  tune.maxrewrite 0"]);
    assert_eq!(c.global.maxrewrite, 0);
}

#[test]
fn several_global_sections_merge() {
    let c = ok(&[
        "global",
        "  nbthread 2",
        "  log stdout format raw local0",
        "defaults",
        "  mode http",
        "global",
        "  maxconn 100",
        "  log stderr local1",
        "  nbthread 3",
    ]);
    assert_eq!(c.global.nbthread, Some(3), "a later value wins");
    assert_eq!(c.global.maxconn, Some(100));
    assert_eq!(c.global.logs.len(), 2);
    assert_eq!(c.global.logs[0].dest, LogDest::Stdout);
    assert_eq!(c.global.logs[1].dest, LogDest::Stderr);

    // Across files as well.
    let c = load(
        &[
            ("a.cfg".into(), cfg(&["global", "  daemon"])),
            ("b.cfg".into(), cfg(&["global", "  maxconn 7"])),
        ],
        &|_| None,
    )
    .unwrap();
    assert!(c.global.daemon);
    assert_eq!(c.global.maxconn, Some(7));
}

#[test]
fn global_log_targets() {
    let c = ok(&[
        "global",
        "  log stdout format raw local0",
        "  log stderr format short daemon info",
        "  log 127.0.0.1 local0",
        "  log 10.0.0.1:1514 len 4096 format rfc5424 local7 info notice",
        "  log udp@192.0.2.10:5140 format rfc3164 user err",
        "  log [::1]:515 len 80 kern emerg",
        "  log /dev/log local2 debug",
        "  log unix@/run/log.sock format short auth",
        "  log fd@1 local0",
        "  log fd@2 local0",
        "  log ipv6@127.0.0.1 local0",
    ]);
    let l = &c.global.logs;
    assert_eq!(
        l[0],
        LogTarget {
            dest: LogDest::Stdout,
            format: LogFormat::Raw,
            facility: 16,
            level: 7,
            minlevel: 0,
            maxlen: 1024,
        }
    );
    assert_eq!(
        (&l[1].dest, l[1].format, l[1].facility, l[1].level),
        (&LogDest::Stderr, LogFormat::Short, 3, 6)
    );
    // Defaults: UDP port 514, HAProxy's `local` (RFC 3164 without the host name), every
    // level, 1024 bytes.
    assert_eq!(
        l[2],
        LogTarget {
            dest: LogDest::Udp(sa("127.0.0.1:514")),
            format: LogFormat::Local,
            facility: 16,
            level: 7,
            minlevel: 0,
            maxlen: 1024,
        }
    );
    assert_eq!(
        l[3],
        LogTarget {
            dest: LogDest::Udp(sa("10.0.0.1:1514")),
            format: LogFormat::Rfc5424,
            facility: 23,
            level: 6,
            minlevel: 5,
            maxlen: 4096,
        }
    );
    assert_eq!(l[4].dest, LogDest::Udp(sa("192.0.2.10:5140")));
    assert_eq!(
        (l[4].format, l[4].facility, l[4].level),
        (LogFormat::Rfc3164, 1, 3)
    );
    assert_eq!(l[5].dest, LogDest::Udp(sa("[::1]:515")));
    assert_eq!((l[5].maxlen, l[5].facility, l[5].level), (80, 0, 0));
    assert_eq!(l[6].dest, LogDest::Unix("/dev/log".into()));
    assert_eq!((l[6].facility, l[6].level), (18, 7));
    assert_eq!(l[7].dest, LogDest::Unix("/run/log.sock".into()));
    assert_eq!((l[7].format, l[7].facility), (LogFormat::Short, 4));
    assert_eq!(l[8].dest, LogDest::Stdout);
    assert_eq!(l[9].dest, LogDest::Stderr);
    assert_eq!(l[10].dest, LogDest::Udp(sa("[::ffff:127.0.0.1]:514")));
}

#[test]
fn global_cpu_map() {
    let c = ok(&[
        "global",
        "  nbthread 4",
        "  cpu-map 1/1-4 0-3",
        "  cpu-map auto:1/1-2 4 5",
        "  cpu-map all 0-1",
        "  cpu-map odd 2,3",
        "  cpu-map even 6",
        "  cpu-map auto:1/all 8-9",
        "  cpu-map 3 7",
    ]);
    let m = &c.global.cpu_map;
    assert_eq!(
        m[0],
        CpuMap {
            threads: vec![1, 2, 3, 4],
            cpus: vec![0, 1, 2, 3],
            auto: false
        }
    );
    assert_eq!(
        m[1],
        CpuMap {
            threads: vec![1, 2],
            cpus: vec![4, 5],
            auto: true
        }
    );
    assert_eq!(m[2].threads, vec![1, 2, 3, 4]);
    assert_eq!(
        (m[3].threads.clone(), m[3].cpus.clone()),
        (vec![1, 3], vec![2, 3])
    );
    assert_eq!(m[4].threads, vec![2, 4]);
    // auto: with more threads than CPUs: the extra threads keep no binding.
    assert_eq!((m[5].threads.clone(), m[5].auto), (vec![1, 2], true));
    assert_eq!(
        (m[6].threads.clone(), m[6].cpus.clone()),
        (vec![3], vec![7])
    );
}

#[test]
fn global_errors() {
    let e = errs(&[
        "global",                             // 1
        "  nbthread 0",                       // 2
        "  nbthreads 4",                      // 3
        "  maxconn lots",                     // 4
        "  daemon yes",                       // 5
        "  user no-such-user-sluice",         // 6
        "  stats maxconn 10",                 // 7
        "  maxzlibmem 20000",                 // 8
        "  nbproc 2",                         // 9
        "  log global",                       // 10
        "  log 127.0.0.1 locl0",              // 11
        "  log 127.0.0.1 format isox local0", // 12
        "  log 127.0.0.1 len 10 local0",      // 13
        "  tune.idle-pool.shared maybe",      // 14
        "  hard-stop-after 1q30s",            // 15
        "  hard-stop-after 30d",              // 16
        "  tune.bufsize 512",                 // 17
        "  cpu-map 2/1 0",                    // 18
        "  cpu-map auto:1-3 0-1",             // 19
        "  pidfile",                          // 20
        "  log ring@buf local0",              // 21
        "  log 127.0.0.1 local0 info chatty", // 22
        "  log 127.0.0.1:99999 local0",       // 23
        "  tune.maxaccept 0",                 // 24
    ]);
    assert_eq!(e.len(), 23, "{e:#?}");
    let find = |line: usize| error_at(&e, line);
    has(
        find(2),
        &[
            "'nbthread' in 'global' section",
            "'0' is out of range (expected 1 to 1024)",
        ],
    );
    has(
        find(3),
        &[
            "unknown keyword 'nbthreads' in 'global' section",
            "(did you mean 'nbthread'?)",
        ],
    );
    has(
        find(4),
        &[
            "'maxconn' in 'global' section",
            "'lots' is not a valid number",
        ],
    );
    has(
        find(5),
        &[
            "'daemon' in 'global' section",
            "unexpected extra argument 'yes'",
        ],
    );
    has(
        find(6),
        &["'user' in 'global' section: cannot find user id for 'no-such-user-sluice'"],
    );
    has(
        find(7),
        &["keyword 'stats maxconn' in 'global' section is not supported by sluice"],
    );
    has(find(8), &["'maxzlibmem'", "not supported by sluice"]);
    has(
        find(9),
        &["'nbproc'", "'global' section", "not supported", "nbthread"],
    );
    has(
        find(10),
        &[
            "'log' in 'global' section",
            "'log global' can only be used in proxies",
        ],
    );
    has(
        find(11),
        &[
            "'log' in 'global' section",
            "unknown syslog facility 'locl0'",
            "did you mean 'local0'",
        ],
    );
    has(
        find(12),
        &["unknown log format 'isox' (did you mean 'iso'?)"],
    );
    has(
        find(13),
        &["log line length", "out of range (expected 80 to 65535)"],
    );
    has(
        find(14),
        &[
            "'tune.idle-pool.shared'",
            "expected 'on' or 'off', got 'maybe'",
        ],
    );
    has(find(15), &["'hard-stop-after'", "only one unit is allowed"]);
    has(find(16), &["'hard-stop-after'", "too large"]);
    has(find(17), &["'tune.bufsize'", "512 is out of range"]);
    has(find(18), &["'cpu-map'", "only process/group '1'"]);
    has(find(19), &["'cpu-map'", "must have the same size"]);
    has(
        find(20),
        &["'pidfile' in 'global' section: missing file name"],
    );
    has(find(21), &["'ring@' targets are not supported by sluice"]);
    has(find(22), &["unknown log level 'chatty'"]);
    has(find(23), &["invalid port '99999'"]);
    has(find(24), &["'tune.maxaccept'", "or -1 for unlimited"]);
}

// ---------------------------------------------------------------------------------------------
// Sections, defaults and inheritance

#[test]
fn proxy_defaults_without_defaults_section() {
    let c = ok(&[
        "frontend fe",
        "  bind :80",
        "backend be",
        "listen li",
        "  bind :81",
    ]);
    assert_eq!(c.proxies.len(), 3);
    let fe = px(&c, "fe");
    assert_eq!(fe.kind, ProxyKind::Frontend);
    assert_eq!(fe.origin.file, "t.cfg");
    assert_eq!(fe.origin.line, 1);
    assert_eq!(fe.mode, Mode::Tcp, "HAProxy's default mode is tcp");
    assert_eq!(fe.maxconn, None);
    assert_eq!(fe.backlog, None);
    assert_eq!(fe.timeouts, Default::default());
    assert_eq!(
        fe.default_backend, None,
        "a frontend has no implicit backend"
    );
    assert!(fe.logs.is_empty());
    assert_eq!(fe.id, None);
    let be = px(&c, "be");
    assert_eq!(be.kind, ProxyKind::Backend);
    assert_eq!(be.retries, 3);
    assert_eq!(be.balance, Balance::RoundRobin);
    assert_eq!(be.hash_type, HashType::default());
    assert_eq!(
        (
            be.hash_type.method,
            be.hash_type.function,
            be.hash_type.avalanche
        ),
        (HashMethod::MapBased, HashFunction::Sdbm, false)
    );
    assert_eq!(be.default_backend, None);
    let o = &be.options;
    assert!(!o.httplog && !o.tcplog && !o.dontlognull && !o.redispatch && !o.abortonclose);
    assert!(o.forwardfor.is_none());
    assert_eq!(o.http_conn_mode, HttpConnMode::KeepAlive);
    // A listen without default_backend uses itself.
    let li = px(&c, "li");
    assert_eq!(li.kind, ProxyKind::Listen);
    assert_eq!(li.default_backend, Some(idx(&c, "li")));
    // Declaration order is kept.
    let names: Vec<&str> = c.proxies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["fe", "be", "li"]);
}

#[test]
fn anonymous_defaults_are_inherited() {
    let c = ok(&[
        "global",
        "  log 127.0.0.1 local0",
        "defaults",
        "  mode http",
        "  maxconn 500",
        "  backlog 64",
        "  timeout connect 5s",
        "  timeout client 30s",
        "  timeout server 30s",
        "  retries 5",
        "  balance leastconn",
        "  hash-type consistent djb2",
        "  option httplog",
        "  option dontlognull",
        "  option forwardfor",
        "  option http-server-close",
        "  option redispatch",
        "  log global",
        "  default-server weight 10 maxconn 50",
        "  monitor-uri /health",
        "frontend fe",
        "  bind :80",
        "  default_backend be",
        "backend be",
        "  server s1 10.0.0.1:80",
        "  server s2 10.0.0.2:80 weight 20",
    ]);
    for p in &c.proxies {
        assert_eq!(p.mode, Mode::Http, "{}", p.name);
        assert_eq!(p.maxconn, Some(500));
        assert_eq!(p.backlog, Some(64));
        assert_eq!(p.timeouts.connect, Some(Duration::from_secs(5)));
        assert_eq!(p.timeouts.client, Some(Duration::from_secs(30)));
        assert_eq!(p.timeouts.server, Some(Duration::from_secs(30)));
        assert_eq!(p.retries, 5);
        assert_eq!(p.balance, Balance::LeastConn);
        assert_eq!(p.hash_type.method, HashMethod::Consistent);
        assert_eq!(p.hash_type.function, HashFunction::Djb2);
        assert!(p.options.httplog && p.options.dontlognull && p.options.redispatch);
        assert_eq!(p.options.http_conn_mode, HttpConnMode::ServerClose);
        assert!(p.options.forwardfor.is_some());
        assert_eq!(p.logs, c.global.logs, "'log global' expanded");
    }
    assert_eq!(px(&c, "fe").monitor_uri.as_deref(), Some("/health"));
    assert_eq!(
        px(&c, "be").monitor_uri,
        None,
        "monitor-uri is a frontend setting"
    );
    let be = px(&c, "be");
    assert_eq!((be.servers[0].weight, be.servers[0].maxconn), (10, 50));
    assert_eq!((be.servers[1].weight, be.servers[1].maxconn), (20, 50));
    assert_eq!(px(&c, "fe").default_backend, Some(idx(&c, "be")));
}

#[test]
fn proxy_settings_override_defaults() {
    let c = ok(&[
        "defaults",
        "  mode http",
        "  timeout client 30s",
        "  option httplog",
        "  retries 2",
        "frontend fe",
        "  mode tcp",
        "  timeout client 10s",
        "  option tcplog",
        "  bind :80",
        "backend be",
        "  retries 0",
    ]);
    let fe = px(&c, "fe");
    assert_eq!(fe.mode, Mode::Tcp);
    assert_eq!(fe.timeouts.client, Some(Duration::from_secs(10)));
    assert!(fe.options.tcplog && !fe.options.httplog);
    assert_eq!(px(&c, "be").retries, 0);
}

#[test]
fn later_defaults_replace_earlier_ones() {
    let c = ok(&[
        "defaults",
        "  mode http",
        "  timeout connect 1s",
        "  retries 7",
        "backend a",
        "defaults",
        "  timeout server 2s",
        "backend b",
    ]);
    let a = px(&c, "a");
    assert_eq!(
        (a.mode, a.timeouts.connect, a.retries),
        (Mode::Http, ms(1000), 7)
    );
    // A new `defaults` section starts from scratch (no implicit merge with the previous one).
    let b = px(&c, "b");
    assert_eq!(b.mode, Mode::Tcp);
    assert_eq!(b.timeouts.connect, None);
    assert_eq!(b.timeouts.server, ms(2000));
    assert_eq!(b.retries, 3);
}

#[test]
fn defaults_apply_across_files_but_sections_do_not_continue() {
    let c = load(
        &[
            (
                "a.cfg".into(),
                cfg(&["defaults", "  mode http", "backend x"]),
            ),
            (
                "b.cfg".into(),
                cfg(&["  server s1 10.0.0.1:80", "backend y"]),
            ),
        ],
        &|_| None,
    );
    let e = c.unwrap_err();
    assert_eq!(e.len(), 1, "{}", render(&e));
    has(
        &e[0].to_string(),
        &["b.cfg:1:", "'server'", "appears before any section"],
    );
    let c = load(
        &[
            ("a.cfg".into(), cfg(&["defaults", "  mode http"])),
            ("b.cfg".into(), cfg(&["backend y"])),
        ],
        &|_| None,
    )
    .unwrap();
    assert_eq!(c.proxies[0].mode, Mode::Http);
    assert_eq!(c.proxies[0].origin.file, "b.cfg");
}

#[test]
fn named_defaults_and_from() {
    let c = ok(&[
        "defaults base",
        "  mode http",
        "  timeout connect 3s",
        "defaults child from base",
        "  timeout server 4s",
        "defaults other",
        "  timeout connect 9s",
        "backend uses_last",
        "backend uses_base from base",
        "backend uses_child from child",
    ]);
    // Without `from`, the last defaults section applies (here 'other', which has no 'from').
    let p = px(&c, "uses_last");
    assert_eq!((p.mode, p.timeouts.connect), (Mode::Tcp, ms(9000)));
    let p = px(&c, "uses_base");
    assert_eq!(
        (p.mode, p.timeouts.connect, p.timeouts.server),
        (Mode::Http, ms(3000), None)
    );
    let p = px(&c, "uses_child");
    assert_eq!(
        (p.mode, p.timeouts.connect, p.timeouts.server),
        (Mode::Http, ms(3000), ms(4000))
    );

    err1(
        &["defaults base", "backend b from bsae"],
        &[
            "t.cfg:2: ",
            "'backend'",
            "unknown defaults section 'bsae'",
            "(did you mean 'base'?)",
        ],
    );
    err1(
        &["defaults d from d"],
        &["t.cfg:1: ", "unknown defaults section 'd'"],
    );
    err1(
        &["backend b from"],
        &["t.cfg:1: ", "missing defaults section name after 'from'"],
    );
    // A proxy cannot inherit from a frontend or backend.
    err1(
        &["backend x", "backend y from x"],
        &["t.cfg:2: ", "unknown defaults section 'x'"],
    );
}

#[test]
fn section_header_errors() {
    err1(
        &["frontend"],
        &["t.cfg:1: ", "'frontend' section requires a name"],
    );
    err1(
        &["backend bad/name"],
        &["t.cfg:1: ", "'backend'", "invalid name 'bad/name'"],
    );
    err1(
        &["listen web 0.0.0.0:80"],
        &[
            "t.cfg:1: ",
            "'listen'",
            "unexpected argument '0.0.0.0:80'",
            "'bind'",
        ],
    );
    err1(
        &["global extra"],
        &[
            "t.cfg:1: ",
            "'global' section takes no argument (got 'extra')",
        ],
    );
    err1(
        &["  mode http", "frontend fe"],
        &["t.cfg:1: ", "keyword 'mode' appears before any section"],
    );
    // The body of an unnamed section is still checked.
    let e = errs(&["backend", "  balanse roundrobin"]);
    assert_eq!(e.len(), 2, "{e:#?}");
    has(&e[1], &["t.cfg:2: ", "unknown keyword 'balanse'"]);
    // Unsupported sections are reported once, and their content is skipped.
    err1(
        &["ring r", "  size 1024", "frontend fe", "  bind :80"],
        &["t.cfg:1: ", "section 'ring' is not supported by sluice"],
    );
    err1(
        &["mailers m", "  mailer smtp1 127.0.0.1:587"],
        &["section 'mailers' is not supported by sluice"],
    );
    err1(
        &[
            "resolvers dns",
            "  nameserver ns1 1.1.1.1:53",
            "resolvers dns",
            "  nameserver ns1 1.1.1.1:53",
        ],
        &["t.cfg:3: ", "resolvers 'dns' is already defined at t.cfg:1"],
    );
}

#[test]
fn listen_default_backend_and_loops() {
    let c = ok(&[
        "listen li",
        "  bind :80",
        "  default_backend other",
        "listen plain",
        "  bind :81",
        "backend other",
    ]);
    assert_eq!(px(&c, "li").default_backend, Some(idx(&c, "other")));
    assert_eq!(px(&c, "plain").default_backend, Some(idx(&c, "plain")));
    // HAProxy: "loop detected for default_backend".
    err1(
        &["listen li", "  bind :80", "  default_backend li"],
        &[
            "t.cfg:3: ",
            "'default_backend' in listen 'li'",
            "loop detected",
        ],
    );
}

#[test]
fn default_backend_and_monitor_uri_in_defaults() {
    // HAProxy allows both in `defaults` ("defaults yes | frontend yes | listen yes | backend no").
    let c = ok(&[
        "defaults",
        "  mode http",
        "  default_backend app",
        "  monitor-uri /alive",
        "frontend fe",
        "  bind :80",
        "frontend fe2",
        "  bind :81",
        "  default_backend other",
        "  monitor-uri /ping",
        "backend app",
        "backend other",
    ]);
    assert_eq!(px(&c, "fe").default_backend, Some(idx(&c, "app")));
    assert_eq!(px(&c, "fe").monitor_uri.as_deref(), Some("/alive"));
    assert_eq!(px(&c, "fe2").default_backend, Some(idx(&c, "other")));
    assert_eq!(px(&c, "fe2").monitor_uri.as_deref(), Some("/ping"));
    assert_eq!(px(&c, "app").default_backend, None);
    assert_eq!(px(&c, "app").monitor_uri, None);

    // A tcp frontend inheriting from a tcp defaults section: monitor-uri is HTTP-only and
    // inherited silently dropped; an explicit one is dropped with HAProxy's warning.
    let c = ok(&[
        "defaults",
        "  monitor-uri /alive",
        "frontend fe",
        "  bind :80",
    ]);
    assert_eq!(px(&c, "fe").monitor_uri, None);
    let c = warn1(
        &["frontend fe", "  bind :80", "  monitor-uri /alive"],
        &[
            "t.cfg:3: ",
            "monitor-uri will be ignored for frontend 'fe' (needs 'mode http').",
        ],
    );
    assert_eq!(px(&c, "fe").monitor_uri, None);
    // An unknown inherited default backend is reported where it was written.
    err1(
        &[
            "defaults",
            "  default_backend nope",
            "frontend fe",
            "  bind :80",
        ],
        &[
            "t.cfg:2: ",
            "'default_backend' in frontend 'fe'",
            "unknown backend 'nope'",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// mode, bind, maxconn, backlog

#[test]
fn modes() {
    let c = ok(&[
        "backend a",
        "  mode http",
        "backend b",
        "  mode tcp",
        "backend c",
    ]);
    assert_eq!(px(&c, "a").mode, Mode::Http);
    assert_eq!(px(&c, "b").mode, Mode::Tcp);
    assert_eq!(px(&c, "c").mode, Mode::Tcp);
    err1(
        &["backend a", "  mode htp"],
        &[
            "t.cfg:2: ",
            "'mode' in backend 'a'",
            "unknown mode 'htp'",
            "did you mean 'http'",
        ],
    );
    err1(
        &["backend a", "  mode health"],
        &["'mode' in backend 'a'", "removed in HAProxy 2.4"],
    );
    err1(
        &["backend a", "  mode"],
        &["'mode' in backend 'a': missing mode"],
    );
    err1(
        &["backend a", "  mode http tcp"],
        &["unexpected extra argument 'tcp'"],
    );
}

#[test]
fn bind_addresses() {
    let c = ok(&[
        "frontend fe",
        "  bind 1.2.3.4:80",
        "  bind *:81",
        "  bind :82",
        "  bind [::]:83",
        "  bind :::84",
        "  bind ipv4@:85",
        "  bind ipv6@:86",
        "  bind ipv4@127.0.0.1:87",
        "  bind ipv6@[::1]:88",
        "  bind unix@/run/sluice.sock",
        "  bind /run/other.sock",
        "  bind fd@3",
        "  bind :8000-8002",
        "  bind 127.0.0.1:90,127.0.0.2:91",
        "  bind [::1]:92",
    ]);
    let addrs: Vec<BindAddr> = px(&c, "fe").binds.iter().map(|b| b.addr.clone()).collect();
    assert_eq!(
        addrs,
        vec![
            tcp("1.2.3.4:80"),
            tcp("0.0.0.0:81"),
            tcp("0.0.0.0:82"),
            tcp("[::]:83"),
            tcp("[::]:84"),
            tcp("0.0.0.0:85"),
            tcp("[::]:86"),
            tcp("127.0.0.1:87"),
            tcp("[::1]:88"),
            BindAddr::Unix("/run/sluice.sock".into()),
            BindAddr::Unix("/run/other.sock".into()),
            BindAddr::Fd(3),
            tcp("0.0.0.0:8000"),
            tcp("0.0.0.0:8001"),
            tcp("0.0.0.0:8002"),
            tcp("127.0.0.1:90"),
            tcp("127.0.0.2:91"),
            tcp("[::1]:92"),
        ]
    );
    let b = &px(&c, "fe").binds;
    assert_eq!((b[0].origin.file.as_str(), b[0].origin.line), ("t.cfg", 2));
    assert_eq!(
        b[14].origin.line, 14,
        "every port of a range shares the line"
    );
    // Bind defaults.
    assert_eq!(
        b[0],
        Bind {
            addr: tcp("1.2.3.4:80"),
            origin: b[0].origin.clone(),
            name: None,
            maxconn: None,
            backlog: None,
            defer_accept: false,
            tfo: false,
            accept_proxy: false,
            label: "1".into(),
            v4v6: false,
            v6only: false,
            interface: None,
            proto: Default::default(),
            ssl: None,
        }
    );
}

#[test]
fn bind_options() {
    let c = ok(&[
        "listen li",
        "  bind :80 name web maxconn 100 backlog 50 defer-accept tfo",
        "  bind [::]:81 v4v6",
        "  bind [::]:82 v6only name v6",
        "  bind :83,:84 name pair",
    ]);
    let b = &px(&c, "li").binds;
    assert_eq!(b[0].name.as_deref(), Some("web"));
    assert_eq!(
        (b[0].maxconn, b[0].backlog, b[0].defer_accept),
        (Some(100), Some(50), true)
    );
    assert!(b[0].tfo && !b[1].tfo);
    assert!(b[1].v4v6 && !b[1].v6only);
    assert!(b[2].v6only && !b[2].v4v6);
    assert_eq!(b[2].name.as_deref(), Some("v6"));
    assert_eq!(b[3].name.as_deref(), Some("pair"));
    assert_eq!(
        b[4].name.as_deref(),
        Some("pair"),
        "options apply to every address"
    );
}

#[test]
fn bind_errors() {
    let e = errs(&[
        "frontend fe",               // 1
        "  bind 1.2.3.4",            // 2
        "  bind :0",                 // 3
        "  bind :70000",             // 4
        "  bind :8002-8000",         // 5
        "  bind :80 ssl crt /x.pem", // 6
        "  bind :80 nmae web",       // 7
        "  bind :80 v4v6 v6only",    // 8
        "  bind :80 maxconn many",   // 9
        "  bind sockpair@3",         // 10
        "  bind",                    // 11
        "  bind bad_host!:80",       // 12
        "  bind [::1:80",            // 13
        "  bind ipv4@[::1]:80",      // 14
        "  bind :80 name",           // 15
        "  bind fd@x",               // 16
        "  bind :80,",               // 17
        "  bind udp@:53",            // 18
        "  bind unix@",              // 19
    ]);
    assert_eq!(e.len(), 18, "{e:#?}");
    let find = |line: usize| error_at(&e, line);
    for line in 2..=19 {
        has(find(line), &["'bind' in frontend 'fe': "]);
    }
    has(find(2), &["port is required in bind address '1.2.3.4'"]);
    has(find(3), &["invalid port '0'"]);
    has(find(4), &["invalid port '70000'"]);
    has(find(5), &["invalid port range '8002-8000'", "start > end"]);
    has(find(6), &["cannot read '/x.pem'"]);
    has(
        find(7),
        &["unknown bind option 'nmae'", "(did you mean 'name'?)"],
    );
    has(find(8), &["'v4v6' and 'v6only' cannot be used together"]);
    has(find(9), &["'many' is not a valid number"]);
    has(
        find(10),
        &["'sockpair@' addresses are not supported by sluice"],
    );
    has(find(11), &["missing address"]);
    has(find(12), &["invalid address 'bad_host!'"]);
    has(find(13), &["missing ']'"]);
    has(find(14), &["not an IPv4 address"]);
    has(find(15), &["missing name after 'name'"]);
    has(find(16), &["'fd@x'"]);
    has(find(17), &["empty bind address"]);
    has(find(18), &["'udp@' addresses are not supported by sluice"]);
    has(find(19), &["missing socket path"]);
    // In a backend, ignored with a warning as in HAProxy.
    let c = ok(&["backend be", "  bind :80"]);
    assert_eq!(
        warnings(&c),
        ["t.cfg:2: 'bind' ignored because backend 'be' has no frontend capability."]
    );
    assert!(px(&c, "be").binds.is_empty());
}

#[test]
fn maxconn_backlog_retries() {
    let c = ok(&[
        "defaults",
        "  maxconn 1000",
        "  backlog 10",
        "  retries 1",
        "frontend fe",
        "  bind :80",
        "  maxconn 2000",
        "  backlog 20",
        "backend be",
        "  retries 9",
    ]);
    let fe = px(&c, "fe");
    assert_eq!((fe.maxconn, fe.backlog), (Some(2000), Some(20)));
    assert_eq!(px(&c, "be").retries, 9);

    let e = errs(&[
        "frontend fe",           // 1
        "  maxconn -1",          // 2
        "  backlog 1e3",         // 3
        "  maxconn 99999999999", // 4
        "  retries 3",           // 5  wrong side: a warning (below)
        "backend be",            // 6
        "  maxconn 10",          // 7  wrong side: a warning (below)
        "  backlog 10",          // 8  wrong side: a warning (below)
        "  retries x",           // 9
        "  retries",             // 10
    ]);
    assert_eq!(e.len(), 5, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:2: ",
            "'maxconn' in frontend 'fe'",
            "'-1' is not a valid number",
        ],
    );
    has(
        &e[1],
        &[
            "t.cfg:3: ",
            "'backlog' in frontend 'fe'",
            "'1e3' is not a valid number",
        ],
    );
    has(&e[2], &["t.cfg:4: ", "'maxconn'", "too large"]);
    has(
        &e[3],
        &[
            "t.cfg:9: ",
            "'retries' in backend 'be'",
            "'x' is not a valid number",
        ],
    );
    has(
        &e[4],
        &[
            "t.cfg:10: ",
            "'retries' in backend 'be': missing number of retries",
        ],
    );
    // On the side a proxy lacks, HAProxy ignores them with a warning.
    let c = ok(&[
        "frontend fe",  // 1
        "  bind :80",   // 2
        "  retries 3",  // 3
        "backend be",   // 4
        "  maxconn 10", // 5
        "  backlog 10", // 6
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:3: 'retries' ignored because frontend 'fe' has no backend capability.",
            "t.cfg:5: 'maxconn' ignored because backend 'be' has no frontend capability. \
             Maybe you want 'fullconn' instead ?",
            "t.cfg:6: 'backlog' ignored because backend 'be' has no frontend capability.",
        ]
    );
    let be = px(&c, "be");
    assert_eq!((be.maxconn, be.backlog), (None, None));
}

// ---------------------------------------------------------------------------------------------
// timeouts

#[test]
fn every_timeout_and_unit() {
    let c = ok(&[
        "defaults",
        "  timeout connect 5000",
        "  timeout client 30s",
        "  timeout server 2m",
        "  timeout http-request 10ms",
        "  timeout http-keep-alive 1h",
        "  timeout queue 1d",
        "  timeout tunnel 1500us",
        "  timeout client-fin 0",
        "  timeout server-fin 3s",
        "  timeout check 2s",
        "listen li",
        "  bind :80",
    ]);
    let t = &px(&c, "li").timeouts;
    assert_eq!(t.connect, ms(5000), "no unit means milliseconds");
    assert_eq!(t.client, Some(Duration::from_secs(30)));
    assert_eq!(t.server, Some(Duration::from_secs(120)));
    assert_eq!(t.http_request, ms(10));
    assert_eq!(t.http_keep_alive, Some(Duration::from_secs(3600)));
    assert_eq!(t.queue, Some(Duration::from_secs(86400)));
    assert_eq!(t.tunnel, Some(Duration::from_micros(1500)));
    assert_eq!(t.client_fin, None, "0 means no timeout");
    assert_eq!(t.server_fin, Some(Duration::from_secs(3)));
    assert_eq!(t.check, Some(Duration::from_secs(2)));

    // 0 in a proxy removes an inherited timeout.
    let c = ok(&[
        "defaults",
        "  timeout server 5s",
        "backend be",
        "  timeout server 0s",
    ]);
    assert_eq!(px(&c, "be").timeouts.server, None);
    // The maximum, 2^31-1 ms.
    let c = ok(&["backend be", "  timeout server 2147483647"]);
    assert_eq!(px(&c, "be").timeouts.server, ms(2147483647));
    // Side-specific timeouts are accepted where they apply.
    ok(&[
        "frontend fe",
        "  timeout client 1s",
        "  timeout client-fin 1s",
        "  timeout http-request 1s",
        "  timeout http-keep-alive 1s",
        "  timeout tarpit 1s",
        "backend be",
        "  timeout connect 1s",
        "  timeout server 1s",
        "  timeout server-fin 1s",
        "  timeout queue 1s",
        "  timeout tunnel 1s",
        "  timeout check 1s",
        "  timeout http-request 1s",
        "  timeout http-keep-alive 1s",
    ]);
}

#[test]
fn timeout_errors() {
    let e = errs(&[
        "frontend fe",             // 1
        "  timeout server 1s",     // 2  wrong side: a warning (below)
        "  timeout connect 1s",    // 3  wrong side: a warning (below)
        "  timeout queue 1s",      // 4  wrong side: a warning (below)
        "  timeout clinet 1s",     // 5
        "  timeout tarpit 1x",     // 6
        "  timeout client",        // 7
        "  timeout client 1q30s",  // 8
        "  timeout client 10x",    // 9
        "  timeout client 25d",    // 10
        "  timeout client -1",     // 11
        "  timeout",               // 12
        "  timeout client 1s 2s",  // 13
        "backend be",              // 14
        "  timeout client 1s",     // 15 wrong side: a warning (below)
        "  timeout client-fin 1s", // 16 wrong side: a warning (below)
        "  timeout connect 1.5s",  // 17
    ]);
    assert_eq!(e.len(), 10, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:5: ",
            "'timeout' in frontend 'fe'",
            "unknown timeout 'clinet'",
            "(did you mean 'client'?)",
        ],
    );
    has(
        &e[1],
        &[
            "t.cfg:6: ",
            "'timeout' in frontend 'fe'",
            "invalid unit 'x'",
        ],
    );
    has(&e[2], &["t.cfg:7: ", "missing time value"]);
    has(&e[3], &["t.cfg:8: ", "only one unit is allowed"]);
    has(&e[4], &["t.cfg:9: ", "invalid unit 'x'"]);
    has(&e[5], &["t.cfg:10: ", "too large"]);
    has(&e[6], &["t.cfg:11: ", "'-1' is not a valid time"]);
    has(&e[7], &["t.cfg:12: ", "missing timeout name"]);
    has(&e[8], &["t.cfg:13: ", "unexpected extra argument '2s'"]);
    has(
        &e[9],
        &[
            "t.cfg:17: ",
            "'timeout' in backend 'be'",
            "invalid unit '.5s'",
        ],
    );
    // A timeout for the side a proxy lacks is ignored with HAProxy's warning.
    let c = ok(&[
        "frontend fe",             // 1
        "  bind :80",              // 2
        "  timeout server 1s",     // 3
        "  timeout connect 1s",    // 4
        "  timeout queue 1s",      // 5
        "backend be",              // 6
        "  timeout client 1s",     // 7
        "  timeout client-fin 1s", // 8
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:3: 'timeout server' will be ignored because frontend 'fe' has no backend capability",
            "t.cfg:4: 'timeout connect' will be ignored because frontend 'fe' has no backend capability",
            "t.cfg:5: 'timeout queue' will be ignored because frontend 'fe' has no backend capability",
            "t.cfg:7: 'timeout client' will be ignored because backend 'be' has no frontend capability",
            "t.cfg:8: 'timeout client-fin' will be ignored because backend 'be' has no frontend capability",
        ]
    );
    let (fe, be) = (&px(&c, "fe").timeouts, &px(&c, "be").timeouts);
    assert_eq!((fe.server, fe.connect, fe.queue), (None, None, None));
    assert_eq!((be.client, be.client_fin), (None, None));
}

// ---------------------------------------------------------------------------------------------
// default_backend, use_backend, acl

#[test]
fn use_backend_rules() {
    let c = ok(&[
        "frontend fe",
        "  mode http",
        "  bind :80",
        "  acl is_api path_beg /api",
        "  acl is_local src 127.0.0.1 ::1",
        "  use_backend api if is_api",
        "  use_backend static unless is_api || is_local",
        "  use_backend always",
        "  use_backend anon if { hdr(host) -i example.com }",
        "  default_backend web",
        "backend api",
        "  mode http",
        "backend static",
        "  mode http",
        "backend always",
        "  mode http",
        "backend anon",
        "  mode http",
        "backend web",
        "  mode http",
    ]);
    let fe = px(&c, "fe");
    assert_eq!(fe.default_backend, Some(idx(&c, "web")));
    let ub = &fe.use_backends;
    assert_eq!(ub.len(), 4);
    assert_eq!(ub[0].backend, Some(idx(&c, "api")));
    assert_eq!(ub[1].backend, Some(idx(&c, "static")));
    assert_eq!(ub[2].backend, Some(idx(&c, "always")));
    assert!(ub[2].cond.is_none());
    let api = ub[0].cond.as_ref().unwrap();
    assert!(!api.is_unless());
    assert!(api.eval(&Req::get("/api/v1")));
    assert!(!api.eval(&Req::get("/www")));
    let st = ub[1].cond.as_ref().unwrap();
    assert!(st.is_unless());
    assert!(st.eval(&Req::get("/www")));
    assert!(!st.eval(&Req::get("/api")));
    let mut local = Req::get("/www");
    local.src = Some("127.0.0.1".parse().unwrap());
    assert!(!st.eval(&local));
    let anon = ub[3].cond.as_ref().unwrap();
    let mut r = Req::get("/");
    r.headers.push(("Host", "EXAMPLE.com"));
    assert!(anon.eval(&r));
    assert!(!anon.eval(&Req::get("/")));

    // In mode tcp, conditions on the source address are fine.
    let c = ok(&[
        "frontend fe",
        "  bind :80",
        "  acl internal src 10.0.0.0/8",
        "  use_backend priv if internal",
        "  default_backend pub",
        "backend priv",
        "backend pub",
    ]);
    assert_eq!(px(&c, "fe").use_backends[0].backend, Some(idx(&c, "priv")));
}

#[test]
fn use_backend_errors() {
    let e = errs(&[
        "frontend fe",                    // 1
        "  bind :80",                     // 2
        "  acl is_api path_beg /api",     // 3
        "  use_backend api if bad(",      // 4  bad condition
        "  use_backend api if nope",      // 5  unknown ACL
        "  use_backend",                  // 6
        "  use_backend api extra",        // 7
        "  use_backend %[req.hdr(host)]", // 8
        "  use_backend apii",             // 9  unknown backend (resolution)
        "  use_backend fe2",              // 10 a frontend
        "  default_backend api other",    // 11
        "  use_backend api if",           // 12
        "frontend fe2",                   // 13
        "backend api",                    // 14
        "  use_backend api",              // 15 wrong side: a warning (below)
        "  default_backend api",          // 16 wrong side: a warning (below)
        "  acl x path /",                 // 17 fine
    ]);
    assert_eq!(e.len(), 8, "{e:#?}");
    has(&e[0], &["t.cfg:4: ", "'use_backend' in frontend 'fe'"]);
    has(
        &e[1],
        &[
            "t.cfg:5: ",
            "'use_backend' in frontend 'fe'",
            "unknown ACL 'nope'",
        ],
    );
    has(&e[2], &["t.cfg:6: ", "missing backend name"]);
    has(&e[3], &["t.cfg:7: ", "unexpected argument 'extra'"]);
    has(
        &e[4],
        &[
            "t.cfg:9: ",
            "'use_backend' in frontend 'fe'",
            "unknown backend 'apii'",
            "(did you mean 'api'?)",
        ],
    );
    has(
        &e[5],
        &[
            "t.cfg:10: ",
            "'fe2' is a frontend, it cannot be used as a backend",
        ],
    );
    has(
        &e[6],
        &[
            "t.cfg:11: ",
            "'default_backend' in frontend 'fe'",
            "unexpected extra argument 'other'",
        ],
    );
    has(&e[7], &["t.cfg:12: ", "missing condition after 'if'"]);
    // In a backend, HAProxy ignores them with a warning.
    let c = ok(&[
        "backend api",           // 1
        "  use_backend api",     // 2
        "  default_backend api", // 3
        "  acl x path /",        // 4
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:2: 'use_backend' ignored because backend 'api' has no frontend capability.",
            "t.cfg:3: 'default_backend' ignored because backend 'api' has no frontend capability.",
        ]
    );
    let api = px(&c, "api");
    assert!(api.use_backends.is_empty() && api.default_backend.is_none());
}

#[test]
fn mode_mismatch_between_frontend_and_backend() {
    err1(
        &[
            "frontend fe",
            "  mode http",
            "  bind :80",
            "  default_backend be",
            "backend be",
        ],
        &[
            "t.cfg:4: ",
            "'default_backend' in frontend 'fe'",
            "unable to use backend 'be' (mode tcp) from frontend 'fe' (mode http)",
        ],
    );
    err1(
        &[
            "frontend fe",
            "  mode http",
            "  bind :80",
            "  use_backend be if TRUE",
            "  default_backend ok",
            "backend be",
            "backend ok",
            "  mode http",
        ],
        &[
            "t.cfg:4: ",
            "'use_backend' in frontend 'fe'",
            "unable to use backend 'be' (mode tcp)",
        ],
    );
    // A tcp frontend may use an http backend: the session becomes HTTP (HAProxy's implicit
    // upgrade).
    let c = ok(&[
        "frontend fe",
        "  bind :80",
        "  default_backend be",
        "backend be",
        "  mode http",
    ]);
    assert_eq!(px(&c, "fe").default_backend, Some(idx(&c, "be")));
    // Listen sections too.
    err1(
        &[
            "listen li",
            "  mode http",
            "  bind :80",
            "  default_backend be",
            "backend be",
        ],
        &[
            "t.cfg:4: ",
            "'default_backend' in listen 'li'",
            "from listen 'li' (mode http)",
        ],
    );
}

#[test]
fn unknown_default_backend() {
    err1(
        &[
            "frontend fe",
            "  bind :80",
            "  default_backend appp",
            "backend app",
        ],
        &[
            "t.cfg:3: ",
            "'default_backend' in frontend 'fe'",
            "unknown backend 'appp'",
            "(did you mean 'app'?)",
        ],
    );
    let m = err1(
        &[
            "frontend fe",
            "  bind :80",
            "  default_backend zzzzzz",
            "backend app",
        ],
        &["unknown backend 'zzzzzz'"],
    );
    assert!(!m.contains("did you mean"), "{m}");
    // A listen is a backend too.
    let c = ok(&[
        "frontend fe",
        "  bind :80",
        "  default_backend li",
        "listen li",
        "  bind :81",
    ]);
    assert_eq!(px(&c, "fe").default_backend, Some(idx(&c, "li")));
}

#[test]
fn acl_errors() {
    let e = errs(&[
        "frontend fe",                    // 1
        "  mode http",                    // 2
        "  acl",                          // 3
        "  acl bad!name path /",          // 4
        "  acl x",                        // 5
        "  acl x no_such_fetch foo",      // 6
        "  http-request deny if missing", // 7
        "defaults",                       // 8
        "  acl x path /",                 // 9
    ]);
    assert_eq!(e.len(), 6, "{e:#?}");
    has(
        &e[0],
        &["t.cfg:3: ", "'acl' in frontend 'fe'", "missing ACL name"],
    );
    has(&e[1], &["t.cfg:4: ", "invalid ACL name 'bad!name'"]);
    has(&e[2], &["t.cfg:5: ", "missing criterion for ACL 'x'"]);
    has(
        &e[3],
        &["t.cfg:6: ", "'acl' in frontend 'fe'", "no_such_fetch"],
    );
    has(
        &e[4],
        &[
            "t.cfg:7: ",
            "'http-request' in frontend 'fe'",
            "unknown ACL 'missing'",
        ],
    );
    has(
        &e[5],
        &[
            "t.cfg:9: ",
            "keyword 'acl' is not allowed in 'defaults' section",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// servers

#[test]
fn servers_and_default_server() {
    let c = ok(&[
        "defaults",
        "  default-server maxqueue 7",
        "backend be",
        "  server s1 10.0.0.1:80",
        "  default-server weight 50 maxconn 10",
        "  server s2 10.0.0.2:8080 weight 0 maxconn 0 maxqueue 0 id 12",
        "  server s3 [2001:db8::1]:443 backup disabled",
        "  server s4 ipv4@127.0.0.1:81 id 4",
        "  default-server backup disabled",
        "  server s5 10.0.0.5:80 no-backup enabled",
        "  server s6 10.0.0.6:80 weight 256",
    ]);
    let s = &px(&c, "be").servers;
    assert_eq!(s.len(), 6);
    assert_eq!(s[0].name, "s1");
    assert_eq!(s[0].addr, sa("10.0.0.1:80"));
    assert_eq!((s[0].origin.file.as_str(), s[0].origin.line), ("t.cfg", 4));
    // HAProxy defaults: weight 1, no limits, not backup, enabled; default-server from defaults
    // applies, a later default-server does not apply to earlier servers.
    assert_eq!(
        (
            s[0].weight,
            s[0].maxconn,
            s[0].maxqueue,
            s[0].backup,
            s[0].disabled,
            s[0].id
        ),
        (1, 0, 7, false, false, None)
    );
    assert_eq!(
        (s[1].weight, s[1].maxconn, s[1].maxqueue, s[1].id),
        (0, 0, 0, Some(12))
    );
    assert_eq!(s[1].addr, sa("10.0.0.2:8080"));
    assert_eq!(s[2].addr, sa("[2001:db8::1]:443"));
    assert_eq!(
        (
            s[2].weight,
            s[2].maxconn,
            s[2].maxqueue,
            s[2].backup,
            s[2].disabled
        ),
        (50, 10, 7, true, true)
    );
    assert_eq!(s[3].addr, sa("127.0.0.1:81"));
    assert_eq!(s[3].id, Some(4));
    assert!(
        !s[4].backup && !s[4].disabled,
        "no-backup / enabled override default-server"
    );
    assert_eq!(s[5].weight, 256);
    assert!(s[5].backup && s[5].disabled);
    // A listen accepts servers too.
    let c = ok(&["listen li", "  bind :80", "  server s 10.0.0.1:80"]);
    assert_eq!(px(&c, "li").servers.len(), 1);
}

#[test]
fn server_errors() {
    let e = errs(&[
        "backend be",                             // 1
        "  server s1 10.0.0.1:80 check-ssl",      // 2
        "  server s2 10.0.0.2:80 ssl sni foo(x)", // 3
        "  server s3 10.0.0.3:80 wieght 2",       // 4
        "  server s4 10.0.0.4:80 weight 257",     // 5
        "  server s5 10.0.0.5:80-90",             // 6
        "  server s6 fd@3",                       // 7
        "  server s7 10.0.0.7:+x",                // 8
        "  server s8 10.0.0.8:80 id 5",           // 9
        "  server s9 10.0.0.9:80 id 5",           // 10
        "  server s8 10.0.0.10:80",               // 11
        "  server s10",                           // 12
        "  server",                               // 13
        "  default-server id 3",                  // 14
        "  default-server check-via-socks4",      // 15
        "  server s11 10.0.0.11:80 maxconn",      // 16
        "  server s12 10.0.0.12:0",               // 17
        "  server s13 10.0.0.13:80 id 0",         // 18
        "frontend fe",                            // 19
        "  server s 10.0.0.1:80",                 // 20
        "  default-server weight 2",              // 21
    ]);
    assert_eq!(e.len(), 18, "{e:#?}");
    let find = |line: usize| error_at(&e, line);
    for line in [2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 16, 17, 18] {
        has(find(line), &["'server' in backend 'be': "]);
    }
    has(find(2), &["no CA file specified"]);
    has(
        find(3),
        &["'sni foo(x)': only 'str(NAME)' and 'req.hdr(host)'"],
    );
    has(
        find(4),
        &["unknown server option 'wieght'", "(did you mean 'weight'?)"],
    );
    has(
        find(5),
        &["weight '257' is out of range (expected 0 to 256)"],
    );
    has(
        find(6),
        &[
            "server address '10.0.0.5:80-90'",
            "port ranges are not supported",
        ],
    );
    has(
        find(7),
        &["only TCP (IPv4/IPv6) and UNIX socket servers are supported by sluice"],
    );
    has(find(8), &["invalid port offset '+x'"]);
    has(find(10), &["server id 5 is already used by server 's8'"]);
    has(find(11), &["server 's8' is already defined at t.cfg:9"]);
    has(find(12), &["missing server address"]);
    has(find(13), &["missing server name"]);
    has(
        find(14),
        &[
            "'default-server' in backend 'be'",
            "'id' cannot be used in 'default-server'",
        ],
    );
    has(
        find(15),
        &[
            "'default-server' in backend 'be'",
            "server option 'check-via-socks4' is not supported by sluice",
        ],
    );
    has(find(16), &["missing number after 'maxconn'"]);
    has(find(17), &["invalid port '0'"]);
    has(find(18), &["'0' is out of range"]);
    has(
        find(20),
        &[
            "keyword 'server' is not allowed in frontend 'fe'",
            "(only in backend and listen sections)",
        ],
    );
    has(
        find(21),
        &["keyword 'default-server' is not allowed in frontend 'fe'"],
    );
}

// ---------------------------------------------------------------------------------------------
// balance and hash-type

#[test]
fn balance_algorithms() {
    let algos: &[(&str, Balance)] = &[
        ("roundrobin", Balance::RoundRobin),
        ("static-rr", Balance::StaticRr),
        ("leastconn", Balance::LeastConn),
        ("first", Balance::First),
        ("source", Balance::Source),
        ("random", Balance::Random { draws: 2 }),
        ("random(5)", Balance::Random { draws: 5 }),
        ("random(1)", Balance::Random { draws: 1 }),
        (
            "uri",
            Balance::Uri {
                whole: false,
                len: None,
                depth: None,
                path_only: false,
            },
        ),
        (
            "uri whole",
            Balance::Uri {
                whole: true,
                len: None,
                depth: None,
                path_only: false,
            },
        ),
        (
            "uri len 10 depth 3",
            Balance::Uri {
                whole: false,
                len: Some(10),
                depth: Some(3),
                path_only: false,
            },
        ),
        (
            "uri path-only depth 2 whole",
            Balance::Uri {
                whole: true,
                len: None,
                depth: Some(2),
                path_only: true,
            },
        ),
        (
            "url_param userid",
            Balance::UrlParam {
                name: "userid".into(),
            },
        ),
        (
            "hdr(Host)",
            Balance::Hdr {
                name: "Host".into(),
                use_domain_only: false,
            },
        ),
        (
            "hdr(host) use_domain_only",
            Balance::Hdr {
                name: "host".into(),
                use_domain_only: true,
            },
        ),
    ];
    for (text, want) in algos {
        let line = format!("  balance {text}");
        let c = ok(&["backend be", "  mode http", &line]);
        assert_eq!(&px(&c, "be").balance, want, "balance {text}");
    }
    // A later balance line replaces an earlier one.
    let c = ok(&["backend be", "  balance source", "  balance first"]);
    assert_eq!(px(&c, "be").balance, Balance::First);
    // Layer-4 algorithms are fine in mode tcp.
    let c = ok(&["backend be", "  balance source"]);
    assert_eq!(px(&c, "be").balance, Balance::Source);
}

#[test]
fn balance_errors() {
    let e = errs(&[
        "backend be",                        // 1
        "  mode http",                       // 2
        "  balance roundrobn",               // 3
        "  balance hash req.cookie(id)",     // 4
        "  balance rdp-cookie",              // 5
        "  balance random(0)",               // 6
        "  balance random(x)",               // 7
        "  balance hdr()",                   // 8
        "  balance hdr(host) use_domain",    // 9
        "  balance url_param id check_post", // 10
        "  balance url_param",               // 11
        "  balance uri hole",                // 12
        "  balance uri len",                 // 13
        "  balance roundrobin extra",        // 14
    ]);
    assert_eq!(e.len(), 12, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:3: ",
            "'balance' in backend 'be'",
            "unknown load-balancing algorithm 'roundrobn'",
            "(did you mean 'roundrobin'?)",
        ],
    );
    has(
        &e[1],
        &["t.cfg:4: ", "algorithm 'hash' is not supported by sluice"],
    );
    has(
        &e[2],
        &[
            "t.cfg:5: ",
            "algorithm 'rdp-cookie' is not supported by sluice",
        ],
    );
    has(&e[3], &["t.cfg:6: ", "'random(0)'", "out of range"]);
    has(&e[4], &["t.cfg:7: ", "'random(x)'"]);
    has(&e[5], &["t.cfg:8: ", "'hdr()'", "header name"]);
    has(
        &e[6],
        &[
            "t.cfg:9: ",
            "unexpected argument 'use_domain'",
            "use_domain_only",
        ],
    );
    has(
        &e[7],
        &["t.cfg:10: ", "check_post", "not supported by sluice"],
    );
    has(&e[8], &["t.cfg:11: ", "missing URL parameter name"]);
    has(
        &e[9],
        &[
            "t.cfg:12: ",
            "unknown 'balance uri' option 'hole'",
            "(did you mean 'whole'?)",
        ],
    );
    has(&e[10], &["t.cfg:13: ", "missing value after 'len'"]);
    has(&e[11], &["t.cfg:14: ", "unexpected extra argument 'extra'"]);
    // A bare `balance` is round robin, as in HAProxy.
    let c = ok(&["backend be", "  balance source", "  balance"]);
    assert_eq!(px(&c, "be").balance, Balance::RoundRobin);
    // In a frontend, HAProxy ignores it with a warning.
    let c = ok(&["frontend fe", "  bind :80", "  balance source"]);
    assert_eq!(
        warnings(&c),
        ["t.cfg:3: 'balance' ignored because frontend 'fe' has no backend capability."]
    );
    assert_eq!(px(&c, "fe").balance, Balance::RoundRobin);
}

#[test]
fn layer7_balance_in_tcp_mode() {
    // HAProxy falls back to roundrobin, with a warning when the line is the proxy's own.
    for algo in ["uri", "url_param id", "hdr(host)"] {
        let line = format!("  balance {algo}");
        let c = warn1(
            &["backend be", &line],
            &[
                "t.cfg:2: ",
                "Layer 7 hash not possible for backend 'be' (needs 'mode http'). Falling back \
                 to round robin.",
            ],
        );
        assert_eq!(px(&c, "be").balance, Balance::RoundRobin, "{algo}");
        let c = ok(&["defaults", &line, "backend be"]);
        assert_eq!(px(&c, "be").balance, Balance::RoundRobin, "{algo}");
        let c = ok(&["defaults", &line, "  mode http", "backend be"]);
        assert_ne!(px(&c, "be").balance, Balance::RoundRobin, "{algo}");
    }
    // `mode http` given after the balance line is fine (checked at the end of the section).
    ok(&["backend be", "  balance uri", "  mode http"]);
}

#[test]
fn hash_types() {
    let cases: &[(&str, HashMethod, HashFunction, bool)] = &[
        ("map-based", HashMethod::MapBased, HashFunction::Sdbm, false),
        (
            "consistent djb2",
            HashMethod::Consistent,
            HashFunction::Djb2,
            false,
        ),
        (
            "map-based wt6",
            HashMethod::MapBased,
            HashFunction::Wt6,
            false,
        ),
        (
            "map-based crc32 avalanche",
            HashMethod::MapBased,
            HashFunction::Crc32,
            true,
        ),
        (
            "consistent avalanche",
            HashMethod::Consistent,
            HashFunction::Sdbm,
            true,
        ),
        // A bare `consistent` implies sdbm with avalanche, as in HAProxy.
        (
            "consistent",
            HashMethod::Consistent,
            HashFunction::Sdbm,
            true,
        ),
        (
            "consistent sdbm",
            HashMethod::Consistent,
            HashFunction::Sdbm,
            false,
        ),
    ];
    for (text, method, function, avalanche) in cases {
        let line = format!("  hash-type {text}");
        let c = ok(&["backend be", "  balance source", &line]);
        let want = HashType {
            method: *method,
            function: *function,
            avalanche: *avalanche,
        };
        assert_eq!(px(&c, "be").hash_type, want, "hash-type {text}");
    }
    let e = errs(&[
        "backend be",
        "  hash-type consistant",
        "  hash-type consistent md5",
        "  hash-type consistent none",
        "  hash-type map-based sdbm djb2",
        "  hash-type",
    ]);
    assert_eq!(e.len(), 5, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:2: ",
            "'hash-type' in backend 'be'",
            "unknown hash method 'consistant'",
            "(did you mean 'consistent'?)",
        ],
    );
    has(&e[1], &["t.cfg:3: ", "unknown hash function 'md5'"]);
    has(
        &e[2],
        &[
            "t.cfg:4: ",
            "hash function 'none' is not supported by sluice",
        ],
    );
    has(&e[3], &["t.cfg:5: ", "unexpected argument 'djb2'"]);
    has(&e[4], &["t.cfg:6: ", "missing hash method"]);
    // In a frontend, HAProxy ignores it with a warning.
    let c = ok(&["frontend fe", "  bind :80", "  hash-type consistent djb2"]);
    assert_eq!(
        warnings(&c),
        ["t.cfg:3: 'hash-type' ignored because frontend 'fe' has no backend capability."]
    );
    assert_eq!(px(&c, "fe").hash_type, HashType::default());
}

// ---------------------------------------------------------------------------------------------
// options

#[test]
fn options() {
    let c = ok(&[
        "frontend fe",
        "  mode http",
        "  bind :80",
        "  option httplog",
        "  option dontlognull",
        "  option forwardfor",
        "  option http-server-close",
        "backend be",
        "  mode http",
        "  option redispatch",
        "  option abortonclose",
        "  option httpclose",
        "  option forwardfor except 127.0.0.0/8 header X-Client-IP if-none",
        "frontend fe2",
        "  mode http",
        "  bind :81",
        "  option httplog clf",
        "  option http-server-close",
        "  option http-keep-alive",
        "  option forwardfor if-none except ::1",
        "frontend fe3",
        "  bind :82",
        "  option tcplog",
    ]);
    let o = &px(&c, "fe").options;
    assert!(o.httplog && !o.httplog_clf && !o.tcplog && o.dontlognull);
    let ff = o.forwardfor.as_ref().unwrap();
    assert_eq!(ff.header, "X-Forwarded-For");
    assert_eq!(ff.except, None);
    assert!(!ff.if_none);
    assert_eq!(o.http_conn_mode, HttpConnMode::ServerClose);

    let o = &px(&c, "be").options;
    assert!(o.redispatch && o.abortonclose);
    assert_eq!(o.http_conn_mode, HttpConnMode::Close);
    let ff = o.forwardfor.as_ref().unwrap();
    assert_eq!(ff.header, "X-Client-IP");
    assert!(ff.if_none);
    let net = ff.except.unwrap();
    assert_eq!((net.addr, net.prefix), ("127.0.0.0".parse().unwrap(), 8));
    assert!(net.contains("127.1.2.3".parse().unwrap()));

    let o = &px(&c, "fe2").options;
    assert!(o.httplog && o.httplog_clf);
    assert_eq!(
        o.http_conn_mode,
        HttpConnMode::KeepAlive,
        "the last connection mode wins"
    );
    let ff = o.forwardfor.as_ref().unwrap();
    assert!(ff.if_none);
    assert_eq!(ff.except.unwrap().prefix, 128);

    let o = &px(&c, "fe3").options;
    assert!(o.tcplog && !o.httplog);
}

#[test]
fn no_option() {
    let c = ok(&[
        "defaults",
        "  mode http",
        "  option httplog clf",
        "  option dontlognull",
        "  option forwardfor",
        "  option httpclose",
        "  option redispatch",
        "  option abortonclose",
        "  option tcplog",
        "frontend fe",
        "  bind :80",
        "  no option dontlognull",
        "  no option forwardfor",
        "  no option httpclose",
        "  no option tcplog",
        "backend be",
        "  no option redispatch",
        "  no option abortonclose",
        "  no option http-server-close",
        "frontend fe2",
        "  bind :81",
        "  option httplog",
        "  no option httplog",
    ]);
    let o = &px(&c, "fe").options;
    assert!(!o.dontlognull && o.forwardfor.is_none() && !o.tcplog);
    assert!(!o.httplog, "'option tcplog' replaced httplog");
    assert_eq!(o.http_conn_mode, HttpConnMode::KeepAlive);
    let o = &px(&c, "be").options;
    assert!(!o.redispatch && !o.abortonclose);
    // HAProxy clears the connection mode only if the negated one is the current one.
    assert_eq!(o.http_conn_mode, HttpConnMode::Close);
    let o = &px(&c, "fe2").options;
    assert!(!o.httplog && !o.httplog_clf);
}

#[test]
fn no_option_connection_modes() {
    let modes = [
        ("http-keep-alive", HttpConnMode::KeepAlive),
        ("http-server-close", HttpConnMode::ServerClose),
        ("httpclose", HttpConnMode::Close),
    ];
    for (set, set_mode) in modes {
        for (neg, neg_mode) in modes {
            let a = format!("  option {set}");
            let b = format!("  no option {neg}");
            let c = ok(&["backend be", "  mode http", &a, &b]);
            let want = if set_mode == neg_mode {
                HttpConnMode::KeepAlive
            } else {
                set_mode
            };
            assert_eq!(
                px(&c, "be").options.http_conn_mode,
                want,
                "{set} then no {neg}"
            );
        }
    }
}

#[test]
fn check_and_agent_addresses_may_be_host_names() {
    let c = ok(&[
        "backend be",
        "  server s 127.0.0.1:80 check addr localhost port 9 agent-check agent-addr localhost \
         agent-port 10",
    ]);
    let sv = &px(&c, "be").servers[0];
    assert!(sv.check.as_ref().unwrap().addr.unwrap().is_loopback());
    assert!(
        sv.health
            .agent
            .as_ref()
            .unwrap()
            .addr
            .unwrap()
            .is_loopback()
    );
    err1(
        &[
            "backend be",
            "  server s 127.0.0.1:80 check addr no/such/host",
        ],
        &["t.cfg:2: ", "'addr': invalid address 'no/such/host'"],
    );
}

#[test]
fn contstats_and_splice_options() {
    let c = ok(&[
        "defaults",
        "  option contstats",
        "frontend fe",
        "  bind :80",
        "  option splice-auto",
        "  no option splice-request",
        "frontend fe2",
        "  bind :81",
        "  no option contstats",
    ]);
    assert!(px(&c, "fe").options.contstats);
    assert!(!px(&c, "fe2").options.contstats);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:5: 'option splice-auto' has no effect in sluice: it does not splice, data is \
          copied through its buffers"
        ]
    );
}

#[test]
fn http_options_in_tcp_mode() {
    // Explicit HTTP-only options in a tcp proxy are ignored with HAProxy's warnings...
    let c = warn1(
        &["listen li", "  bind :80", "  option httplog"],
        &[
            "t.cfg:3: ",
            "'option httplog' not usable with proxy 'li' (needs 'mode http'). Falling back to \
             'option tcplog'.",
        ],
    );
    assert!(px(&c, "li").options.tcplog && !px(&c, "li").options.httplog);
    for opt in [
        "forwardfor",
        "http-server-close",
        "httpclose",
        "http-keep-alive",
        "http-buffer-request",
    ] {
        let line = format!("  option {opt}");
        let c = warn1(
            &["frontend fe", "  bind :80", &line],
            &[
                "t.cfg:3: ",
                &format!("'option {opt}' ignored for frontend 'fe' as it requires HTTP mode."),
            ],
        );
        assert!(px(&c, "fe").options.forwardfor.is_none());
        assert!(!px(&c, "fe").options.http_buffer_request);
    }
    // ...but `no option X` is harmless.
    ok(&[
        "frontend fe",
        "  bind :80",
        "  no option httplog",
        "  no option forwardfor",
    ]);
    // Inherited from defaults, they fall back as in HAProxy: httplog becomes tcplog and
    // forwardfor is dropped.
    let c = ok(&[
        "defaults",
        "  option httplog",
        "  option forwardfor",
        "frontend fe",
        "  bind :80",
    ]);
    let o = &px(&c, "fe").options;
    assert!(!o.httplog && o.tcplog && o.forwardfor.is_none());
}

#[test]
fn option_errors() {
    let e = errs(&[
        "frontend fe",                           // 1
        "  mode http",                           // 2
        "  bind :80",                            // 3
        "  option httpchk GET /",                // 4 backend-only: a warning (below)
        "  option httplgo",                      // 5
        "  option forceclose",                   // 6
        "  option redispatch",                   // 7 backend-only: a warning (below)
        "  option forwardfor header bad:name",   // 8
        "  option forwardfor except not-a-net",  // 9
        "  option forwardfor expect 10.0.0.0/8", // 10
        "  option httplog json",                 // 11
        "  option dontlognull yes",              // 12
        "  option",                              // 13
        "  no option tcplog extra",              // 14
        "  no stats",                            // 15
        "  no",                                  // 16
        "backend be",                            // 17
        "  option dontlognull",                  // 18 frontend-only: a warning (below)
        "  option tcplog",                       // 19 frontend-only: a warning (below)
        "  option http-tunnel",                  // 20
    ]);
    assert_eq!(e.len(), 12, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:5: ",
            "'option' in frontend 'fe'",
            "unknown option 'httplgo'",
            "(did you mean 'httplog'?)",
        ],
    );
    has(
        &e[1],
        &[
            "t.cfg:6: ",
            "unknown option 'forceclose'",
            "use 'option httpclose'",
        ],
    );
    has(
        &e[2],
        &["t.cfg:8: ", "'bad:name' is not a valid header name"],
    );
    has(&e[3], &["t.cfg:9: ", "not-a-net"]);
    has(
        &e[4],
        &[
            "t.cfg:10: ",
            "unknown 'option forwardfor' argument 'expect'",
            "(did you mean 'except'?)",
        ],
    );
    has(
        &e[5],
        &["t.cfg:11: ", "unexpected argument 'json' (expected 'clf')"],
    );
    has(&e[6], &["t.cfg:12: ", "unexpected extra argument 'yes'"]);
    has(
        &e[7],
        &[
            "t.cfg:13: ",
            "'option' in frontend 'fe': missing option name",
        ],
    );
    has(
        &e[8],
        &[
            "t.cfg:14: ",
            "'no' in frontend 'fe'",
            "unexpected extra argument 'extra'",
        ],
    );
    has(
        &e[9],
        &[
            "t.cfg:15: ",
            "'no stats'",
            "'no' only applies to 'option' and 'log'",
        ],
    );
    has(&e[10], &["t.cfg:16: ", "missing keyword after 'no'"]);
    has(
        &e[11],
        &[
            "t.cfg:20: ",
            "'option' in backend 'be'",
            "unknown option 'http-tunnel'",
            "removed in HAProxy 2.1",
        ],
    );
    // An option for the side a proxy lacks is ignored with HAProxy's warning.
    let c = ok(&[
        "frontend fe",            // 1
        "  mode http",            // 2
        "  bind :80",             // 3
        "  option httpchk GET /", // 4
        "  option redispatch",    // 5
        "backend be",             // 6
        "  option dontlognull",   // 7
        "  option tcplog",        // 8
        "  option httplog",       // 9
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:4: 'httpchk' ignored because frontend 'fe' has no backend capability.",
            "t.cfg:5: 'redispatch' ignored because frontend 'fe' has no backend capability.",
            "t.cfg:7: 'dontlognull' ignored because backend 'be' has no frontend capability.",
            "t.cfg:8: backend 'be' : 'option tcplog' directive is ignored in backends.",
            "t.cfg:9: backend 'be' : 'option httplog' directive is ignored in backends.",
        ]
    );
    let (fe, be) = (&px(&c, "fe").options, &px(&c, "be").options);
    assert!(fe.httpchk.is_none() && !fe.redispatch);
    assert!(!be.dontlognull && !be.tcplog && !be.httplog);
}

// ---------------------------------------------------------------------------------------------
// log, monitor-uri, errorfile, id, description

#[test]
fn proxy_logs() {
    let c = ok(&[
        "global",
        "  log 127.0.0.1 local0",
        "  log stdout format raw daemon",
        "defaults",
        "  log global",
        "frontend inherits",
        "  bind :80",
        "frontend adds",
        "  bind :81",
        "  log 10.0.0.1:514 local1 info",
        "frontend silent",
        "  bind :82",
        "  no log",
        "frontend replaces",
        "  bind :83",
        "  no log",
        "  log stderr local2",
        "  log global",
    ]);
    let g = &c.global.logs;
    assert_eq!(px(&c, "inherits").logs, *g);
    let a = &px(&c, "adds").logs;
    assert_eq!(a.len(), 3);
    assert_eq!(&a[..2], &g[..]);
    assert_eq!(a[2].dest, LogDest::Udp(sa("10.0.0.1:514")));
    assert_eq!((a[2].facility, a[2].level), (17, 6));
    assert!(px(&c, "silent").logs.is_empty());
    let r = &px(&c, "replaces").logs;
    assert_eq!(r.len(), 3);
    assert_eq!(r[0].dest, LogDest::Stderr);
    assert_eq!(&r[1..], &g[..]);

    // `log global` with no global log targets means no logging.
    let c = ok(&["frontend fe", "  bind :80", "  log global"]);
    assert!(px(&c, "fe").logs.is_empty());

    let e = errs(&[
        "frontend fe",
        "  log global extra",
        "  log",
        "  log 127.0.0.1 local9",
        "  no log now",
    ]);
    assert_eq!(e.len(), 4, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:2: ",
            "'log' in frontend 'fe'",
            "unexpected extra argument 'extra'",
        ],
    );
    has(
        &e[1],
        &["t.cfg:3: ", "'log' in frontend 'fe': missing log address"],
    );
    has(&e[2], &["t.cfg:4: ", "unknown syslog facility 'local9'"]);
    has(
        &e[3],
        &[
            "t.cfg:5: ",
            "'no' in frontend 'fe'",
            "unexpected extra argument 'now'",
        ],
    );
}

#[test]
fn monitor_uri_errorfile_id_description() {
    let page = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown";
    let f = TempFile::new("503", page);
    let errorfile = format!("  errorfile 503 {}", f.path());
    let errorfile_be = format!("  errorfile 404 {}", f.path());
    let c = ok(&[
        "defaults",
        "  mode http",
        &errorfile,
        "frontend fe",
        "  bind :80",
        "  monitor-uri /haproxy_test",
        "  id 10",
        "  description my front end",
        "  enabled",
        "backend be",
        &errorfile_be,
        "  id 11",
    ]);
    let fe = px(&c, "fe");
    assert_eq!(fe.monitor_uri.as_deref(), Some("/haproxy_test"));
    assert_eq!(fe.id, Some(10));
    assert_eq!(fe.errorfiles.get(&503).map(Vec::as_slice), Some(&page[..]));
    let be = px(&c, "be");
    assert_eq!(be.id, Some(11));
    assert_eq!(be.errorfiles.len(), 2, "inherited 503 plus its own 404");
    assert_eq!(be.errorfiles.get(&404).map(Vec::as_slice), Some(&page[..]));

    let missing = "  errorfile 503 /nonexistent/sluice/503.http";
    let bad_code = format!("  errorfile 302 {}", f.path());
    let e = errs(&[
        "frontend fe",
        missing,
        &bad_code,
        "  errorfile 503",
        "  id 0",
        "  id abc",
        "  monitor-uri",
        "defaults",
        "  id 3",
    ]);
    assert_eq!(e.len(), 7, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:2: ",
            "'errorfile' in frontend 'fe'",
            "cannot read '/nonexistent/sluice/503.http'",
        ],
    );
    has(
        &e[1],
        &["t.cfg:3: ", "status code '302' cannot be customized"],
    );
    has(&e[2], &["t.cfg:4: ", "missing file name"]);
    has(
        &e[3],
        &["t.cfg:5: ", "'id' in frontend 'fe'", "'0' is out of range"],
    );
    has(&e[4], &["t.cfg:6: ", "'abc' is not a valid number"]);
    has(
        &e[5],
        &["t.cfg:7: ", "'monitor-uri' in frontend 'fe': missing URI"],
    );
    has(
        &e[6],
        &[
            "t.cfg:9: ",
            "keyword 'id' is not allowed in 'defaults' section",
        ],
    );
}

#[test]
fn duplicate_ids() {
    err1(
        &["frontend a", "  bind :80", "  id 5", "backend b", "  id 5"],
        &[
            "t.cfg:5: ",
            "'id' in backend 'b'",
            "id 5 is already used by frontend 'a' (at t.cfg:1)",
        ],
    );
    ok(&["frontend a", "  bind :80", "  id 5", "backend b", "  id 6"]);
    // Server ids are per backend.
    ok(&[
        "backend a",
        "  server s 10.0.0.1:80 id 1",
        "backend b",
        "  server s 10.0.0.1:80 id 1",
    ]);
}

#[test]
fn duplicate_proxy_names() {
    // A frontend and a backend may share a name (their capabilities do not overlap).
    let c = ok(&[
        "frontend app",
        "  bind :80",
        "  default_backend app",
        "backend app",
    ]);
    assert_eq!(c.proxies.len(), 2);
    assert_eq!(c.proxies[0].default_backend, Some(1));
    err1(
        &["backend app", "backend app"],
        &[
            "t.cfg:2: ",
            "backend 'app' has the same name as backend 'app' declared at t.cfg:1",
        ],
    );
    err1(
        &["frontend app", "  bind :80", "listen app", "  bind :81"],
        &[
            "t.cfg:3: ",
            "listen 'app' has the same name as frontend 'app' declared at t.cfg:1",
        ],
    );
    err1(
        &["listen app", "  bind :80", "backend app"],
        &[
            "t.cfg:3: ",
            "backend 'app' has the same name as listen 'app'",
        ],
    );
    // Across files, with the file of the first declaration.
    let e = load(
        &[
            ("a.cfg".into(), cfg(&["frontend fe", "  bind :80"])),
            ("b.cfg".into(), cfg(&["frontend fe", "  bind :81"])),
        ],
        &|_| None,
    )
    .unwrap_err();
    assert_eq!(e.len(), 1);
    has(&e[0].to_string(), &["b.cfg:1: ", "declared at a.cfg:1"]);
}

// ---------------------------------------------------------------------------------------------
// http-request / http-response

#[test]
fn http_request_rules() {
    let c = ok(&[
        "frontend fe",
        "  mode http",
        "  bind :80",
        "  acl blocked src 203.0.113.0/24",
        "  http-request set-header X-Proxy sluice",
        "  http-request add-header X-Via \"sluice 1.0\"",
        "  http-request del-header X-Secret",
        "  http-request deny if blocked",
        "  http-request deny deny_status 429 unless blocked",
        "  http-request return",
        "  http-request return status 503 content-type text/plain string \"gone fishing\" hdr X-A b",
        "  http-request redirect location https://example.com/",
        "  http-request redirect prefix /new code 301 drop-query append-slash",
        "  http-request redirect scheme https code 308 if !blocked",
        "  http-request set-header X-Pct 100%%",
        "  http-response set-header X-Server sluice",
        "  http-response add-header Cache-Control no-cache",
        "  http-response del-header Server if blocked",
    ]);
    let fe = px(&c, "fe");
    let r: Vec<&HttpRequestAction> = fe.http_request.iter().map(|r| &r.action).collect();
    assert_eq!(r.len(), 11);
    assert_eq!(
        *r[0],
        HttpRequestAction::Header(HeaderAction::SetHeader {
            name: "X-Proxy".into(),
            value: "sluice".into()
        })
    );
    assert_eq!(
        *r[1],
        HttpRequestAction::Header(HeaderAction::AddHeader {
            name: "X-Via".into(),
            value: "sluice 1.0".into()
        })
    );
    assert_eq!(
        *r[2],
        HttpRequestAction::Header(HeaderAction::DelHeader {
            name: "X-Secret".into(),
            how: crate::config::NameMatch::Str,
        })
    );
    assert_eq!(
        *r[3],
        HttpRequestAction::Deny(Deny {
            status: 403,
            reply: None
        }),
        "default deny status"
    );
    assert_eq!(
        *r[4],
        HttpRequestAction::Deny(Deny {
            status: 429,
            reply: None
        })
    );
    assert_eq!(
        *r[5],
        HttpRequestAction::Return(Reply {
            status: 200,
            content_type: None,
            body: Vec::new(),
            headers: Vec::new(),
            formats: None,
            raw: None
        })
    );
    assert_eq!(
        *r[6],
        HttpRequestAction::Return(Reply {
            status: 503,
            content_type: Some("text/plain".into()),
            body: b"gone fishing".to_vec(),
            headers: vec![("X-A".into(), "b".into())],
            formats: None,
            raw: None
        })
    );
    assert_eq!(
        *r[7],
        HttpRequestAction::Redirect(Redirect {
            kind: RedirectKind::Location,
            target: "https://example.com/".into(),
            code: 302,
            drop_query: false,
            append_slash: false
        })
    );
    assert_eq!(
        *r[8],
        HttpRequestAction::Redirect(Redirect {
            kind: RedirectKind::Prefix,
            target: "/new".into(),
            code: 301,
            drop_query: true,
            append_slash: true
        })
    );
    assert_eq!(
        *r[9],
        HttpRequestAction::Redirect(Redirect {
            kind: RedirectKind::Scheme,
            target: "https".into(),
            code: 308,
            drop_query: false,
            append_slash: false
        })
    );
    assert_eq!(
        *r[10],
        HttpRequestAction::Header(HeaderAction::SetHeader {
            name: "X-Pct".into(),
            value: "100%".into()
        })
    );
    // Conditions and origins.
    let rules = &fe.http_request;
    assert!(rules[0].cond.is_none());
    assert_eq!(
        (rules[0].origin.file.as_str(), rules[0].origin.line),
        ("t.cfg", 5)
    );
    let mut bad = Req::get("/");
    bad.src = Some("203.0.113.9".parse().unwrap());
    assert!(rules[3].cond.as_ref().unwrap().eval(&bad));
    assert!(!rules[3].cond.as_ref().unwrap().eval(&Req::get("/")));
    assert!(rules[4].cond.as_ref().unwrap().is_unless());
    assert!(!rules[9].cond.as_ref().unwrap().eval(&bad));

    let resp: Vec<&HttpResponseAction> = fe.http_response.iter().map(|r| &r.action).collect();
    assert_eq!(
        resp,
        [
            &HttpResponseAction::Header(HeaderAction::SetHeader {
                name: "X-Server".into(),
                value: "sluice".into()
            }),
            &HttpResponseAction::Header(HeaderAction::AddHeader {
                name: "Cache-Control".into(),
                value: "no-cache".into()
            }),
            &HttpResponseAction::Header(HeaderAction::DelHeader {
                name: "Server".into(),
                how: crate::config::NameMatch::Str,
            }),
        ]
    );
    assert!(fe.http_response[2].cond.is_some());

    // `return file`: the body is read at load time.
    let f = TempFile::new("return", b"<h1>maintenance</h1>");
    let line = format!(
        "  http-request return status 503 content-type text/html file {}",
        f.path()
    );
    let c = ok(&["backend be", "  mode http", &line]);
    match &px(&c, "be").http_request[0].action {
        HttpRequestAction::Return(Reply { status, body, .. }) => {
            assert_eq!(
                (*status, body.as_slice()),
                (503, &b"<h1>maintenance</h1>"[..])
            );
        }
        a => panic!("{a:?}"),
    }

    // `http-response deny`: 502 by default; `deny_status` and a reply of its own, as in
    // `return`.
    let c = ok(&[
        "backend be",
        "  mode http",
        "  http-response deny if { status 404 }",
        "  http-response deny deny_status 403 content-type text/plain string nope hdr X-A b",
        "  http-request deny status 429 content-type text/plain string slow",
    ]);
    let be = px(&c, "be");
    assert_eq!(
        be.http_response[0].action,
        HttpResponseAction::Deny(Deny {
            status: 502,
            reply: None
        })
    );
    let nope = Reply {
        status: 403,
        content_type: Some("text/plain".into()),
        body: b"nope".to_vec(),
        headers: vec![("X-A".into(), "b".into())],
        formats: None,
        raw: None,
    };
    assert_eq!(
        be.http_response[1].action,
        HttpResponseAction::Deny(Deny {
            status: 403,
            reply: Some(nope.clone())
        })
    );
    assert_eq!(
        String::from_utf8(nope.render(false, true)).unwrap(),
        "HTTP/1.1 403 Forbidden\r\ncontent-length: 4\r\ncontent-type: text/plain\r\n\
         X-A: b\r\nconnection: close\r\n\r\nnope"
    );
    match &be.http_request[0].action {
        HttpRequestAction::Deny(Deny {
            status: 429,
            reply: Some(r),
        }) => assert_eq!(r.body, b"slow"),
        a => panic!("{a:?}"),
    }
}

#[test]
fn http_rule_errors() {
    let e = errs(&[
        "frontend fe",                                                       // 1
        "  mode http",                                                       // 2
        "  bind :80",                                                        // 3
        "  http-request set-header X-A 50%",                                 // 4
        "  http-request set-hedaer X-A b",                                   // 5
        "  http-request tarpit",                                             // 6
        "  http-request",                                                    // 7
        "  http-request set-header X-A",                                     // 8
        "  http-request set-header X-A b c",                                 // 9
        "  http-request set-header Bad:Name v",                              // 10
        "  http-request deny deny_status 99",                                // 11
        "  http-request deny status 403 string no",                          // 12
        "  http-request return string hi",                                   // 13
        "  http-request return status 204 content-type text/plain string x", // 14
        "  http-request return content-type text/plain",                     // 15
        "  http-request return hdr Content-Length 3",                        // 16
        "  http-request redirect location /x code 200",                      // 17
        "  http-request redirect to /x",                                     // 18
        "  http-request redirect location",                                  // 19
        "  http-request redirect location /x set-cookie a=b",                // 20
        "  http-response set-status 1000",                                   // 21
        "  http-response return status 200 string x",                        // 22
        "  http-response set-header X-A",                                    // 23
        "  http-request del-header X-A -m all",                              // 24
        "  http-request return file /nonexistent/sluice/body",               // 25
    ]);
    assert_eq!(e.len(), 22, "{e:#?}");
    let find = |line: usize| error_at(&e, line);
    for line in (4..=20).chain([24, 25]) {
        has(find(line), &["'http-request' in frontend 'fe': "]);
    }
    for line in 21..=23 {
        has(find(line), &["'http-response' in frontend 'fe': "]);
    }
    has(
        find(4),
        &[
            "'%' at offset 2 is not followed by a variable name",
            "(write '%%' for a literal '%')",
        ],
    );
    has(
        find(5),
        &[
            "unknown action 'set-hedaer'",
            "(did you mean 'set-header'?)",
        ],
    );
    has(find(6), &["action 'tarpit' is not supported by sluice"]);
    has(find(7), &["missing action"]);
    has(find(8), &["'set-header' expects a header name and a value"]);
    has(find(9), &["unexpected argument 'c'", "quote values"]);
    has(find(10), &["'Bad:Name' is not a valid header name"]);
    has(find(11), &["'99' is out of range (expected 200 to 599)"]);
    has(
        find(12),
        &["'deny': a 'content-type' is required with a body"],
    );
    has(find(13), &["a 'content-type' is required with a body"]);
    has(find(14), &["status 204 cannot have a body"]);
    has(
        find(15),
        &["'content-type' given without 'string' or 'file'"],
    );
    has(
        find(16),
        &["header 'Content-Length' cannot be set with 'hdr'"],
    );
    has(find(17), &["code 200 is not a redirect"]);
    has(find(18), &["'redirect': unknown type or option 'to'"]);
    has(find(19), &["'redirect location' expects a target"]);
    has(
        find(20),
        &["option 'set-cookie' is not supported by sluice"],
    );
    has(
        find(21),
        &["'set-status' expects a status code from 100 to 999"],
    );
    has(find(22), &["a 'content-type' is required with a body"]);
    has(
        find(23),
        &["'set-header' expects a header name and a value"],
    );
    has(find(24), &["unknown matching method 'all'"]);
    has(find(25), &["cannot read file '/nonexistent/sluice/body'"]);
    // A log-format expression in a header value is accepted (compiled, not literal).
    let c = ok(&[
        "frontend fe",
        "  mode http",
        "  bind :80",
        "  http-request set-header X-Src %[src]",
    ]);
    let HttpRequestAction::Header(h) = &px(&c, "fe").http_request[0].action else {
        panic!("not a header action");
    };
    assert!(
        matches!(h.value(), Some(LfValue::Fmt { text, .. }) if &**text == "%[src]"),
        "{h:?}"
    );
}

#[test]
fn del_header_methods_bare_balance_and_realm_words() {
    let c = ok(&[
        "defaults",
        "  mode http",
        "listen l",
        "  bind :80",
        "  http-response del-header ^Server:.*$",
        "  http-request del-header x- -m beg",
        "  stats enable",
        "  stats realm HAProxy Statistics",
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:5: 'del-header': '^Server:.*$' is not a valid header name, so this rule never \
             removes anything (for a regex, add '-m reg')",
            "t.cfg:8: 'stats realm': only the first word is the realm ('HAProxy'), as in HAProxy; \
             'Statistics' ignored (escape spaces with a backslash or quote the realm)",
        ]
    );
    assert_eq!(px(&c, "l").stats.as_ref().unwrap().realm, "HAProxy");
    assert_eq!(
        px(&c, "l").http_request[0].action,
        HttpRequestAction::Header(HeaderAction::DelHeader {
            name: "x-".into(),
            how: crate::config::NameMatch::Beg,
        })
    );
    let e = errs(&[
        "frontend fe",
        "  mode http",
        "  bind :80",
        "  http-request del-header x -m exact",
        "  http-request del-header ( -m reg",
        "  http-request del-header x -m",
        "  http-request del-header x y",
    ]);
    assert_eq!(e.len(), 4, "{e:#?}");
    has(&e[0], &["t.cfg:4: ", "unknown matching method 'exact'"]);
    has(&e[1], &["t.cfg:5: ", "invalid regex '('"]);
    has(
        &e[2],
        &["t.cfg:6: ", "'-m' expects str, beg, end, sub or reg"],
    );
    has(&e[3], &["t.cfg:7: ", "unexpected argument 'y'"]);
}

#[test]
fn http_rules_in_tcp_mode_are_ignored_with_haproxy_warnings() {
    let c = ok(&[
        "frontend fe",
        "  bind :80",
        "  http-request deny",
        "  http-response del-header Server",
        "  http-request allow",
        "  default_backend be",
        "backend be",
        "  http-request set-header X-A b",
        "  redirect prefix /x",
        "  http-after-response set-header X-B c",
        "  server s 127.0.0.1:80 cookie s1",
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:3: 'http-request' rules ignored for frontend 'fe' as they require HTTP mode.",
            "t.cfg:4: 'http-response' rules ignored for frontend 'fe' as they require HTTP mode.",
            "t.cfg:8: 'http-request' rules ignored for backend 'be' as they require HTTP mode.",
            "t.cfg:9: 'redirect' rules ignored for backend 'be' as they require HTTP mode.",
            "t.cfg:10: 'http-after-response' rules ignored for backend 'be' as they require HTTP \
             mode.",
            "t.cfg:11: backend 'be' : ignoring cookie for server 's' as HTTP mode is disabled.",
        ]
    );
    for name in ["fe", "be"] {
        let p = px(&c, name);
        assert!(
            p.http_request.is_empty() && p.http_response.is_empty(),
            "{name}"
        );
        assert!(
            p.http_after_response.is_empty() && p.redirects.is_empty(),
            "{name}"
        );
    }
    assert_eq!(px(&c, "be").servers[0].cookie, None);
    // In `defaults` it is not a mode question: the keyword is not allowed there.
    err1(
        &["defaults", "  http-request deny"],
        &[
            "t.cfg:2: ",
            "keyword 'http-request' is not allowed in 'defaults' section",
        ],
    );
    // Inherited `mode http` is enough.
    ok(&[
        "defaults",
        "  mode http",
        "frontend fe",
        "  bind :80",
        "  http-request deny",
    ]);
}

// ---------------------------------------------------------------------------------------------
// Error reporting

#[test]
fn unknown_keywords_suggest_the_nearest() {
    err1(
        &[
            "frontend fe",
            "  bind :80",
            "  defualt_backend be",
            "backend be",
        ],
        &[
            "t.cfg:3: ",
            "unknown keyword 'defualt_backend' in frontend 'fe'",
            "(did you mean 'default_backend'?)",
        ],
    );
    err1(
        &["backend be", "  servr s 10.0.0.1:80"],
        &[
            "t.cfg:2: ",
            "unknown keyword 'servr' in backend 'be'",
            "(did you mean 'server'?)",
        ],
    );
    err1(
        &["defaults", "  tiemout connect 5s"],
        &[
            "t.cfg:2: ",
            "unknown keyword 'tiemout' in 'defaults' section",
            "(did you mean 'timeout'?)",
        ],
    );
    err1(
        &["defaults web", "  mdoe http"],
        &[
            "t.cfg:2: ",
            "unknown keyword 'mdoe' in defaults 'web'",
            "(did you mean 'mode'?)",
        ],
    );
    let m = err1(
        &["listen li", "  frobnicate 1"],
        &["unknown keyword 'frobnicate' in listen 'li'"],
    );
    assert!(!m.contains("did you mean"), "{m}");
    err1(
        &["globl"],
        &[
            "t.cfg:1: ",
            "keyword 'globl' appears before any section",
            "(did you mean 'global'?)",
        ],
    );
}

#[test]
fn http_reuse_and_pool_server_options() {
    let cfg = ok(&[
        "defaults",
        "  mode http",
        "  http-reuse always",
        "backend b",
        "  server s 127.0.0.1:1 pool-max-conn 10 pool-purge-delay 2s max-reuse 100",
        "  server t 127.0.0.1:2 pool-max-conn -1 max-reuse -1",
        "backend c",
        "  http-reuse never",
        "  server s 127.0.0.1:1",
    ]);
    let b = &cfg.proxies[0];
    assert_eq!(b.options.http_reuse, crate::config::HttpReuse::Always);
    assert_eq!(b.servers[0].pool_max_conn, Some(10));
    assert_eq!(
        b.servers[0].pool_purge_delay,
        std::time::Duration::from_secs(2)
    );
    assert_eq!(b.servers[0].max_reuse, Some(100));
    assert_eq!(b.servers[1].pool_max_conn, None);
    assert_eq!(b.servers[1].max_reuse, None);
    assert_eq!(
        b.servers[1].pool_purge_delay,
        std::time::Duration::from_secs(5)
    );
    assert_eq!(
        cfg.proxies[1].options.http_reuse,
        crate::config::HttpReuse::Never
    );
}

#[test]
fn unsupported_haproxy_keywords() {
    for kw in [
        "email-alert mailers m",
        "tcp-response content accept",
        "persist rdp-cookie",
        "log-format-sd %ci",
        "force-persist if TRUE",
    ] {
        let line = format!("  {kw}");
        let name = kw.split(' ').next().unwrap();
        err1(
            &["listen li", "  bind :80", &line],
            &[
                "t.cfg:3: ",
                &format!("keyword '{name}' in listen 'li' is not supported by sluice"),
            ],
        );
    }
    // Removed keywords say what to use instead.
    err1(
        &["backend be", "  contimeout 5000"],
        &[
            "t.cfg:2: ",
            "keyword 'contimeout' in backend 'be' is not supported",
            "use 'timeout connect' instead",
        ],
    );
    err1(
        &["frontend fe", "  reqadd X-A:\\ b"],
        &[
            "keyword 'reqadd' in frontend 'fe'",
            "removed in HAProxy 2.1",
            "'http-request'",
        ],
    );
}

#[test]
fn keywords_in_the_wrong_section() {
    let e = errs(&[
        "defaults",               // 1
        "  bind :80",             // 2
        "  server s 10.0.0.1:80", // 3
        "  use_backend be",       // 4
        "frontend fe",            // 5
        "  server s 10.0.0.1:80", // 6
        "  balance roundrobin",   // 7  wrong side: a warning (below)
        "  retries 2",            // 8  wrong side: a warning (below)
        "  default_backend be",   // 9
        "backend be",             // 10
        "  bind :80",             // 11 wrong side: a warning (below)
        "  monitor-uri /x",       // 12 wrong side: a warning (below)
        "  option httplog",       // 13 wrong side: a warning (below)
        "global",                 // 14
        "  mode http",            // 15
        "  bind :80",             // 16
    ]);
    assert_eq!(e.len(), 6, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:2: ",
            "keyword 'bind' is not allowed in 'defaults' section",
            "(only in frontend and listen sections)",
        ],
    );
    has(
        &e[1],
        &[
            "t.cfg:3: ",
            "keyword 'server' is not allowed in 'defaults' section",
            "(only in backend and listen sections)",
        ],
    );
    has(
        &e[2],
        &[
            "t.cfg:4: ",
            "keyword 'use_backend' is not allowed in 'defaults' section",
        ],
    );
    has(
        &e[3],
        &[
            "t.cfg:6: ",
            "keyword 'server' is not allowed in frontend 'fe'",
        ],
    );
    has(
        &e[4],
        &["t.cfg:15: ", "unknown keyword 'mode' in 'global' section"],
    );
    has(
        &e[5],
        &["t.cfg:16: ", "unknown keyword 'bind' in 'global' section"],
    );
    // In a frontend or a backend, a keyword for the side it lacks is ignored with HAProxy's
    // warning (`server` above excepted).
    let c = ok(&[
        "frontend fe",          // 1
        "  bind :80",           // 2
        "  balance roundrobin", // 3
        "  retries 2",          // 4
        "  default_backend be", // 5
        "backend be",           // 6
        "  bind :80",           // 7
        "  monitor-uri /x",     // 8
        "  option httplog",     // 9
    ]);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:3: 'balance' ignored because frontend 'fe' has no backend capability.",
            "t.cfg:4: 'retries' ignored because frontend 'fe' has no backend capability.",
            "t.cfg:7: 'bind' ignored because backend 'be' has no frontend capability.",
            "t.cfg:8: 'monitor-uri' ignored because backend 'be' has no frontend capability.",
            "t.cfg:9: backend 'be' : 'option httplog' directive is ignored in backends.",
        ]
    );
    let be = px(&c, "be");
    assert!(be.binds.is_empty() && be.monitor_uri.is_none() && !be.options.httplog);
}

#[test]
fn every_error_has_file_line_keyword_and_section() {
    let lines = [
        "global",                           // 1
        "  nbthread x",                     // 2
        "defaults",                         // 3
        "  timeout connect forever",        // 4
        "frontend fe",                      // 5
        "  bind :80 bogus",                 // 6
        "  maxconn x",                      // 7
        "  default_backend missing",        // 8
        "backend be",                       // 9
        "  server s1 10.0.0.1:80 weight x", // 10
        "  balance nope",                   // 11
    ];
    let e = parse(&lines).unwrap_err();
    let want: &[(usize, &str, &str)] = &[
        (2, "'nbthread'", "'global' section"),
        (4, "'timeout'", "'defaults' section"),
        (6, "'bind'", "frontend 'fe'"),
        (7, "'maxconn'", "frontend 'fe'"),
        (8, "'default_backend'", "frontend 'fe'"),
        (10, "'server'", "backend 'be'"),
        (11, "'balance'", "backend 'be'"),
    ];
    assert_eq!(e.len(), want.len(), "{}", render(&e));
    for (err, (line, kw, section)) in e.iter().zip(want) {
        assert_eq!(err.file, "t.cfg");
        assert_eq!(err.line, *line, "{err}");
        let s = err.to_string();
        assert!(s.starts_with(&format!("t.cfg:{line}: ")), "{s}");
        has(&s, &[kw, section]);
        // A reason follows the keyword and section.
        let reason = s.rsplit(": ").next().unwrap();
        assert!(reason.len() > 5, "no reason in {s:?}");
    }
}

#[test]
fn all_errors_are_reported_in_file_and_line_order() {
    // Resolution errors (found last) and section errors are merged and sorted.
    let e = load(
        &[
            (
                "first.cfg".into(),
                cfg(&[
                    "frontend fe",            // 1
                    "  bind :80",             // 2
                    "  use_backend nowhere",  // 3  resolution
                    "  unique-id-format %ci", // 4  end-of-section (mode tcp)
                    "  server s 10.0.0.1:80", // 5  wrong section
                    "backend dup",            // 6
                    "backend dup",            // 7  duplicate
                ]),
            ),
            (
                "second.cfg".into(),
                cfg(&[
                    "global",                    // 1
                    "  nbthread 0",              // 2
                    "frontend fe2",              // 3
                    "  bind :81",                // 4
                    "  default_backend nowhere", // 5 resolution
                    "  option htplog",           // 6
                ]),
            ),
        ],
        &|_| None,
    )
    .unwrap_err();
    let at: Vec<(String, usize)> = e.iter().map(|e| (e.file.clone(), e.line)).collect();
    assert_eq!(
        at,
        [
            ("first.cfg".to_string(), 3),
            ("first.cfg".to_string(), 4),
            ("first.cfg".to_string(), 5),
            ("first.cfg".to_string(), 7),
            ("second.cfg".to_string(), 2),
            ("second.cfg".to_string(), 5),
            ("second.cfg".to_string(), 6),
        ],
        "{}",
        render(&e)
    );
}

#[test]
fn tokenizer_errors_are_reported_with_parser_errors() {
    let e = errs(&[
        "frontend fe",
        "  bind :80",
        "  http-request set-header X-A \"unterminated",
        "  mdoe tcp",
    ]);
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].starts_with("t.cfg:3: "), "{e:#?}");
    has(&e[1], &["t.cfg:4: ", "unknown keyword 'mdoe'"]);
}

#[test]
fn environment_variables_and_quotes() {
    let env = |k: &str| match k {
        "PORT" => Some("8080".to_string()),
        "BACKEND" => Some("app".to_string()),
        _ => None,
    };
    let text = cfg(&[
        "frontend fe",
        "  bind \":${PORT}\"",
        "  default_backend \"$BACKEND\"",
        "backend app",
        "  server s1 '10.0.0.1:80' # a comment",
    ]);
    let c = load(&[("env.cfg".into(), text)], &env).unwrap();
    assert_eq!(px(&c, "fe").binds[0].addr, tcp("0.0.0.0:8080"));
    assert_eq!(px(&c, "fe").default_backend, Some(idx(&c, "app")));
    assert_eq!(px(&c, "app").servers[0].addr, sa("10.0.0.1:80"));
}

#[test]
fn odd_input_never_panics() {
    let lines = [
        "frontend",
        "backend",
        "listen",
        "defaults",
        "global",
        "frontend a from",
        "defaults from",
        "option",
        "no",
        "no option",
        "no log",
        "log",
        "log global",
        "timeout",
        "timeout client",
        "bind",
        "bind ,",
        "bind :",
        "bind [",
        "bind []:80",
        "bind [::1]x",
        "bind ::1",
        "bind fd@",
        "bind ipv6@",
        "bind :1-",
        "bind :-1",
        "server",
        "server s",
        "server s :",
        "server s [::1]",
        "default-server",
        "default-server weight",
        "balance",
        "balance hdr(",
        "balance random(",
        "balance random()",
        "balance uri len",
        "hash-type",
        "use_backend",
        "use_backend if",
        "use_backend x unless",
        "default_backend",
        "acl",
        "acl a",
        "acl a path_beg",
        "http-request",
        "http-request deny deny_status",
        "http-request return status",
        "http-request return hdr",
        "http-request return hdr a",
        "http-request redirect",
        "http-request redirect scheme",
        "http-request set-header",
        "http-request del-header",
        "http-response",
        "errorfile",
        "errorfile 503",
        "id",
        "mode",
        "monitor-uri",
        "maxconn",
        "backlog",
        "retries",
        "cpu-map",
        "cpu-map 1/",
        "cpu-map auto:",
        "cpu-map 1",
        "cpu-map 1-",
        "cpu-map , 0",
        "nbthread",
        "log stdout format",
        "log stdout len",
        "log udp@ local0",
        "log unix@ local0",
        "tune.bufsize 99999999999999999999k",
        "hard-stop-after 99999999999999999999999d",
        "timeout client 18446744073709551615us",
        "\"\"",
        "''",
        "option forwardfor except",
        "option forwardfor header",
        "http-request set-header X-A \"\"",
        "use_backend x if !",
        "use_backend x if { path",
        "use_backend x if || a",
        "\u{e9}t\u{e9} 1",
        "bind :80 name \u{e9}",
    ];
    let sections = [
        "",
        "global",
        "defaults",
        "frontend f",
        "backend b",
        "listen l",
    ];
    for s in sections {
        for l in lines {
            for mode in ["", "  mode http"] {
                let text = cfg(&[s, mode, &format!("  {l}")]);
                let _ = load(&[("odd.cfg".into(), text)], &|_| None);
            }
        }
    }
}

#[test]
fn stats_page_keywords_and_inheritance() {
    let c = ok(&[
        "defaults",
        "  mode http",
        "  stats auth a:b",
        "  stats refresh 2m",
        "frontend fe",
        "  bind :80",
        "  default_backend app",
        "backend app",
        "  stats uri /s",
        "  stats scope .",
        "  stats scope fe",
        "  stats realm My\\ Realm",
        "  acl local src 127.0.0.1",
        "  stats admin if local",
    ]);
    // Inherited as is.
    let fe = px(&c, "fe").stats.as_ref().unwrap();
    assert_eq!(fe.uri, "/haproxy?stats");
    assert_eq!(fe.auth, vec!["a:b".to_string()]);
    assert_eq!(fe.refresh, 120);
    // An own `stats` line starts from scratch, as in HAProxy.
    let be = px(&c, "app").stats.as_ref().unwrap();
    assert_eq!(be.uri, "/s");
    assert!(be.auth.is_empty());
    assert_eq!(be.refresh, 0);
    assert_eq!(be.scope, vec![".".to_string(), "fe".into()]);
    assert_eq!(be.realm, "My Realm");
    assert!(be.admin.is_some());

    err1(
        &["listen l", "  bind :80", "  mode http", "  stats urii /x"],
        &["unknown keyword 'stats urii'", "did you mean 'uri'"],
    );
    let c = warn1(
        &["listen l", "  bind :80", "  stats enable"],
        &["'stats' statement ignored for proxy 'l' as it requires HTTP mode."],
    );
    assert!(px(&c, "l").stats.is_none());
    err1(
        &["defaults", "  mode http", "  stats admin if TRUE"],
        &["'stats admin' is not allowed in 'defaults'"],
    );
    err1(
        &["listen l", "  bind :80", "  mode http", "  stats uri"],
        &["missing URI prefix"],
    );
}

#[test]
fn use_service_prometheus_exporter() {
    let c = ok(&[
        "frontend fe",
        "  mode http",
        "  bind :8405",
        "  http-request use-service prometheus-exporter if { path /metrics }",
        "backend be",
        "  mode http",
        "  http-request use-service prometheus-exporter",
    ]);
    for name in ["fe", "be"] {
        let r = &px(&c, name).http_request;
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0].action,
            HttpRequestAction::UseService(crate::config::Service::PrometheusExporter)
        );
        assert_eq!(r[0].cond.is_some(), name == "fe");
    }
    let e = errs(&[
        "frontend fe",                                         // 1
        "  mode http",                                         // 2
        "  bind :8405",                                        // 3
        "  http-request use-service prometheus",               // 4
        "  http-request use-service",                          // 5
        "  http-request use-service prometheus-exporter x",    // 6
        "  http-request use-service lua.svc if { path /lua }", // 7
    ]);
    assert_eq!(e.len(), 4, "{e:#?}");
    has(
        &e[0],
        &[
            "t.cfg:4: ",
            "unknown service 'prometheus'",
            "(sluice provides: prometheus-exporter)",
        ],
    );
    has(&e[1], &["t.cfg:5: ", "expects a service name"]);
    has(&e[2], &["t.cfg:6: ", "unexpected argument 'x'"]);
    has(&e[3], &["t.cfg:7: ", "unknown service 'lua.svc'"]);
    // Like every http-request action, it needs mode http (HAProxy ignores it otherwise).
    warn1(
        &[
            "listen l",
            "  mode tcp",
            "  bind :8405",
            "  http-request use-service prometheus-exporter",
            "  server s 127.0.0.1:80",
        ],
        &["t.cfg:4: ", "'http-request' rules ignored for proxy 'l'"],
    );
}

// ---------------------------------------------------------------------------------------------
// log-format

#[test]
fn log_format_sections_inheritance_and_last_wins() {
    use crate::config::logformat::{Node, Var};
    let c = ok(&[
        "defaults",                           // 1
        "  mode http",                        // 2
        "  log-format \"%ci %{+Q}r %[src]\"", // 3
        "frontend inherit",                   // 4
        "  bind :80",                         // 5
        "frontend httplog_wins",              // 6
        "  bind :81",                         // 7
        "  option httplog",                   // 8
        "frontend own",                       // 9
        "  bind :82",                         // 10
        "  option tcplog",                    // 11
        "  log-format %b\\ %s",               // 12
        "listen li",                          // 13
        "  bind :83",                         // 14
        "  log-format %ft",                   // 15
        "  server s 127.0.0.1:8080",          // 16
        "backend be",                         // 17
        "  server s 127.0.0.1:8080",          // 18
    ]);
    let o = &px(&c, "inherit").options;
    let f = o.log_format.as_ref().expect("inherited");
    assert!(!o.httplog && !o.tcplog);
    assert_eq!(f.origin.line, 3);
    assert!(matches!(f.nodes[0], Node::Var(Var::ClientIp, _)));
    let o = &px(&c, "httplog_wins").options;
    assert!(o.httplog && o.log_format.is_none());
    let o = &px(&c, "own").options;
    assert!(!o.tcplog, "log-format after option tcplog wins");
    let f = o.log_format.as_ref().unwrap();
    assert!(matches!(
        f.nodes[..],
        [
            Node::Var(Var::Backend, _),
            Node::Sep(_),
            Node::Var(Var::Server, _)
        ]
    ));
    let f = px(&c, "li").options.log_format.as_ref().unwrap();
    assert!(matches!(f.nodes[..], [Node::Var(Var::FrontendXprt, _)]));
    // In mode tcp, variables free of HTTP are fine, inherited or not.
    let c = ok(&[
        "defaults",
        "  log-format \"%ci:%cp %ft %b/%s %Tw/%Tc/%Tt %B %U %ts %sslv %sslc %[ssl_fc_sni]\"",
        "frontend fe",
        "  bind :80",
        "  option tcplog",
        "frontend fe2",
        "  bind :81",
    ]);
    assert!(px(&c, "fe").options.tcplog);
    assert!(px(&c, "fe2").options.log_format.is_some());
}

#[test]
fn log_format_errors() {
    let e = errs(&[
        "defaults",                    // 1
        "  mode http",                 // 2
        "  log-format %xy",            // 3
        "frontend fe",                 // 4
        "  bind :80",                  // 5
        "  log-format %[nosuch]",      // 6
        "  log-format",                // 7
        "  log-format %ci %cp",        // 8
        "  log-format %{+Q",           // 9
        "  log-format %[src",          // 10
        "  log-format %{+Z}ci",        // 11
        "  log-format 50%",            // 12
        "  log-format %[path_beg]",    // 13
        "backend be",                  // 14
        "  log-format %ci",            // 15 wrong side: a warning (below)
        "frontend tcpfe",              // 16
        "  mode tcp",                  // 17
        "  bind :81",                  // 18
        "  log-format \"%ci %{+Q}r\"", // 19
        "  default_backend be2",       // 20
        "backend be2",                 // 21
        "  mode tcp",                  // 22
        "  server s 127.0.0.1:80",     // 23
    ]);
    let find = |line: usize| error_at(&e, line);
    has(
        find(3),
        &[
            "'log-format' in 'defaults' section: ",
            "unknown variable '%xy'",
        ],
    );
    has(
        find(6),
        &[
            "'log-format' in frontend 'fe': ",
            "unknown sample fetch 'nosuch'",
        ],
    );
    has(find(7), &["'log-format'", "missing format string"]);
    has(find(8), &["expects only one argument", "escape spaces"]);
    has(find(9), &["missing '}'"]);
    has(find(10), &["missing ']'"]);
    has(find(11), &["unknown flag '+Z'"]);
    has(find(12), &["not followed by a variable name", "'%%'"]);
    has(find(13), &["unknown sample fetch 'path_beg'"]);
    has(
        find(19),
        &[
            "'log-format' of frontend 'tcpfe'",
            "'%r' is reserved for HTTP mode",
        ],
    );
    assert_eq!(e.len(), 10, "{e:#?}");
    // In a backend, HAProxy ignores it with a warning.
    let c = ok(&["backend be", "  log-format %ci"]);
    assert_eq!(
        warnings(&c),
        ["t.cfg:2: 'log-format' ignored because backend 'be' has no frontend capability."]
    );
    assert!(px(&c, "be").options.log_format.is_none());
    // An HTTP format inherited by a tcp proxy is reported at the line that wrote it.
    err1(
        &[
            "defaults",         // 1
            "  log-format %HM", // 2
            "frontend fe",      // 3
            "  bind :80",       // 4
        ],
        &[
            "t.cfg:2: ",
            "'log-format' of frontend 'fe'",
            "'%HM' is reserved for HTTP mode",
        ],
    );
}

#[test]
fn option_redispatch_takes_haproxys_interval() {
    let c = ok(&[
        "defaults",
        "  mode http",
        "backend b1",
        "  option redispatch",
        "backend b2",
        "  option redispatch 2",
        "backend b3",
        "  option redispatch -2",
        "backend b4",
        "  option redispatch 0",
    ]);
    let o = |n| {
        let o = &px(&c, n).options;
        (o.redispatch, o.redispatch_after)
    };
    assert_eq!(o("b1"), (true, -1));
    assert_eq!(o("b2"), (true, 2));
    assert_eq!(o("b3"), (true, -2));
    // 0 stops the counted redispatches only (measured on HAProxy 2.6.12: a round-robin
    // backend still retries on its other servers at once).
    assert_eq!(o("b4"), (true, 0));
    err1(
        &["backend b", "  option redispatch x"],
        &["t.cfg:2: ", "'x' is not a retry interval"],
    );
    err1(
        &["backend b", "  option redispatch 1 2"],
        &["t.cfg:2: ", "unexpected extra argument '2'"],
    );
}

#[test]
fn cookie_persistence_settings() {
    use crate::config::{CookieCfg, CookieMode};
    let c = ok(&[
        "defaults",
        "  mode http",
        "  cookie D insert",
        "backend inherits",
        "  server s1 127.0.0.1:80 cookie one",
        "backend own",
        "  cookie SRV insert indirect nocache postonly httponly secure domain .a.com domain .b.com maxidle 30m maxlife 2 attr SameSite=Lax",
        "  option persist",
        "  default-server cookie shared",
        "  server s1 127.0.0.1:80",
        "  server s2 127.0.0.1:81 cookie two",
        "backend passive",
        "  cookie JSESSIONID",
        "  no option persist",
        "  server s1 127.0.0.1:80",
    ]);
    let p = |name: &str| c.proxies.iter().find(|p| p.name == name).unwrap();
    assert_eq!(p("inherits").cookie.as_ref().unwrap().name, "D");
    assert_eq!(p("inherits").servers[0].cookie.as_deref(), Some("one"));
    assert_eq!(
        p("own").cookie,
        Some(CookieCfg {
            name: "SRV".into(),
            mode: CookieMode::Insert,
            indirect: true,
            nocache: true,
            postonly: true,
            preserve: false,
            httponly: true,
            secure: true,
            domains: vec![".a.com".into(), ".b.com".into()],
            maxidle: Some(1800),
            maxlife: Some(2),
            attrs: vec!["SameSite=Lax".into()],
            dynamic: false,
        })
    );
    assert!(p("own").options.persist);
    let own: Vec<_> = p("own").servers.iter().map(|s| s.cookie.clone()).collect();
    assert_eq!(own, [Some("shared".into()), Some("two".into())]);
    let passive = p("passive").cookie.as_ref().unwrap();
    assert_eq!(
        (passive.mode, passive.indirect),
        (CookieMode::Passive, false)
    );
    assert!(!p("passive").options.persist);
    // A server cookie value cannot break the header it goes into.
    err1(
        &["backend be", "  server s1 127.0.0.1:80 cookie a;b"],
        &["t.cfg:2: ", "not permitted in a cookie value"],
    );
    // Not in a frontend: HAProxy warns and ignores it there.
    let c = ok(&["frontend fe", "  bind :80", "  cookie SRV insert"]);
    assert_eq!(
        warnings(&c),
        ["t.cfg:3: 'cookie' ignored because frontend 'fe' has no backend capability."]
    );
    assert!(px(&c, "fe").cookie.is_none());
}

#[test]
fn redirect_rules_keyword() {
    let c = ok(&[
        "frontend fe",
        "  mode http",
        "  bind :80",
        "  redirect scheme https code 301 if !{ path_beg /.well-known/ }",
        "  redirect prefix /new drop-query",
        "  default_backend be",
        "backend be",
        "  mode http",
        "  redirect location /x",
        "  server s1 127.0.0.1:80",
    ]);
    let fe = &c.proxies[0];
    assert_eq!(fe.redirects.len(), 2);
    assert_eq!(fe.redirects[0].redirect.code, 301);
    assert!(fe.redirects[0].cond.is_some());
    assert!(fe.redirects[1].redirect.drop_query && fe.redirects[1].cond.is_none());
    assert_eq!(c.proxies[1].redirects.len(), 1);
    err1(
        &["defaults", "  redirect location /x"],
        &["t.cfg:2: ", "redirect"],
    );
    err1(
        &[
            "frontend fe",
            "  bind :80",
            "  redirect location /x code 200",
        ],
        &["t.cfg:3: ", "code 200 is not a redirect"],
    );
    warn1(
        &[
            "frontend fe",
            "  bind :80",
            "  mode tcp",
            "  redirect location /x",
        ],
        &["t.cfg:4: ", "'redirect' rules ignored for frontend 'fe'"],
    );
}

#[test]
fn global_node_description_and_limits() {
    let c = ok(&[
        "global",
        "  node lb1",
        "  description two words",
        "  ulimit-n 4096",
        "  strict-limits",
        "  zero-warning",
        "  tune.ssl.default-dh-param 2048",
        "listen st",
        "  mode http",
        "  bind :80",
        "  bind :81 allow-0rtt",
        "  stats show-node",
        "  stats show-desc Edge proxy",
    ]);
    let g = &c.global;
    assert_eq!(g.node.as_deref(), Some("lb1"));
    assert_eq!(g.description.as_deref(), Some("two words"));
    assert_eq!(g.ulimit_n, Some(4096));
    assert!(g.strict_limits && g.zero_warning);
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(
        c.warnings[0].message.contains("default-dh-param"),
        "{:?}",
        c.warnings
    );
    // `allow-0rtt` is accepted with a word: clients do a full handshake.
    assert_eq!(c.warnings[1].line, 11, "{:?}", c.warnings);
    assert!(
        c.warnings[1].message.contains("'allow-0rtt' has no effect"),
        "{:?}",
        c.warnings
    );
    let st = c.proxies[0].stats.as_ref().unwrap();
    assert_eq!(st.show_node, Some(None));
    assert_eq!(st.show_desc, Some(Some("Edge proxy".into())));
    err1(
        &["global", "  tune.ssl.default-dh-param 512"],
        &["t.cfg:2: ", "out of range"],
    );
    err1(&["global", "  ulimit-n"], &["t.cfg:2: ", "ulimit-n"]);
}

#[test]
fn unix_bind_settings() {
    let c = ok(&[
        "global",
        "  unix-bind prefix /var/lib/haproxy/ mode 0400 uid 0 gid 0",
        "  stats socket unix@admin.sock",
        "frontend fe",
        "  bind unix@fe.sock",
        "  bind 127.0.0.1:80",
    ]);
    let u = &c.global.unix_bind;
    assert_eq!(
        (u.prefix.as_deref(), u.mode, u.uid, u.gid),
        (Some("/var/lib/haproxy/"), Some(0o400), Some(0), Some(0))
    );
    assert_eq!(
        c.global.stats_sockets[0].addr,
        BindAddr::Unix("/var/lib/haproxy/admin.sock".into())
    );
    assert_eq!(
        c.proxies[0].binds[0].addr,
        BindAddr::Unix("/var/lib/haproxy/fe.sock".into())
    );
    err1(
        &["global", "  unix-bind mode 0999"],
        &["t.cfg:2: ", "not an octal file mode"],
    );
    err1(
        &["global", "  unix-bind prefx /x"],
        &["t.cfg:2: ", "did you mean 'prefix'"],
    );
}

#[test]
fn minconn_and_fullconn() {
    let c = ok(&[
        "global",
        "  maxconn 3000",
        "frontend a",
        "  bind :80",
        "  maxconn 1000",
        "  default_backend dyn",
        "frontend b",
        "  bind :81",
        "  use_backend dyn if TRUE",
        "  default_backend fixed",
        "backend dyn",
        "  server s1 127.0.0.1:80 minconn 10 maxconn 100",
        "backend fixed",
        "  option prefer-last-server",
        "  fullconn 50",
        "  server s1 127.0.0.1:80",
    ]);
    let p = |n: &str| c.proxies.iter().find(|p| p.name == n).unwrap();
    // 10 % of 1000 + 3000 (frontend b counts the global maxconn).
    assert_eq!(p("dyn").fullconn, Some(400));
    assert_eq!(p("dyn").servers[0].minconn, Some(10));
    assert_eq!(p("fixed").fullconn, Some(50));
    assert!(p("fixed").options.prefer_last_server);
    assert!(!p("dyn").options.prefer_last_server);
}

#[test]
fn tcp_keepalive_timings() {
    let c = ok(&[
        "defaults",
        "  clitcpka-idle 30",
        "  srvtcpka-cnt 4",
        "frontend f",
        "  bind :8000",
        "  option clitcpka",
        "  clitcpka-intvl 2500ms",
        "  clitcpka-cnt 9",
        "  default_backend b",
        "backend b",
        "  srvtcpka-idle 1m",
        "  srvtcpka-intvl 10s",
        "  server s 127.0.0.1:1",
    ]);
    let s = Duration::from_secs;
    let f = &px(&c, "f").options;
    // Seconds by default; a unit as written; the kernel's whole seconds.
    assert_eq!(f.cli_tcpka_params.idle, Some(s(30)));
    assert_eq!(f.cli_tcpka_params.intvl, Some(s(2)));
    assert_eq!(f.cli_tcpka_params.cnt, Some(9));
    let b = &px(&c, "b").options;
    assert_eq!(b.srv_tcpka_params.idle, Some(s(60)));
    assert_eq!(b.srv_tcpka_params.intvl, Some(s(10)));
    assert_eq!(b.srv_tcpka_params.cnt, Some(4));
    err1(
        &["frontend f", "  clitcpka-idle 0"],
        &[
            "t.cfg:2: ",
            "'clitcpka-idle' expects a time of at least 1s, got '0'",
        ],
    );
    err1(
        &["backend b", "  srvtcpka-cnt 200"],
        &["t.cfg:2: ", "srvtcpka-cnt", "200"],
    );
    err1(
        &["frontend f", "  clitcpka-intvl"],
        &["t.cfg:2: ", "clitcpka-intvl"],
    );
}

#[test]
fn switch_mode_http() {
    use crate::stream::http2::BindProto;
    // Its frontend keeps its HTTP rules, and `option httplog` still falls back to tcplog.
    let c = ok(&[
        "frontend fe",                                             // 1
        "  bind :80",                                              // 2
        "  option httplog",                                        // 3
        "  tcp-request inspect-delay 5s",                          // 4
        "  tcp-request content switch-mode http proto h2 if HTTP", // 5
        "  tcp-request content switch-mode http",                  // 6
        "  http-request set-header x-a b",                         // 7
        "  default_backend be",                                    // 8
        "backend be",                                              // 9
        "  mode http",                                             // 10
    ]);
    let fe = px(&c, "fe");
    assert!(fe.switches_to_http());
    assert!(matches!(
        fe.tcp_content[0].action,
        crate::config::TcpAction::SwitchMode(BindProto::H2)
    ));
    assert!(matches!(
        fe.tcp_content[1].action,
        crate::config::TcpAction::SwitchMode(BindProto::Auto)
    ));
    assert_eq!(fe.http_request.len(), 1, "kept for upgraded sessions");
    assert!(fe.options.tcplog && !fe.options.httplog);
    assert_eq!(
        warnings(&c),
        [
            "t.cfg:3: 'option httplog' not usable with frontend 'fe' (needs 'mode http'). \
          Falling back to 'option tcplog'."
        ]
    );
    // Without it, HTTP rules in a tcp frontend are dropped with HAProxy's warning.
    let c = ok(&[
        "frontend fe",
        "  bind :80",
        "  http-request set-header x-a b",
    ]);
    assert!(px(&c, "fe").http_request.is_empty());
    let e = errs(&[
        "frontend fe",                                     // 1
        "  bind :80",                                      // 2
        "  tcp-request content switch-mode tcp",           // 3
        "  tcp-request content switch-mode http proto h3", // 4
        "  tcp-request content switch-mode http extra",    // 5
        "  tcp-request content switch-mode",               // 6
        "  tcp-request connection switch-mode http",       // 7
        "backend be",                                      // 8
        "  tcp-request content switch-mode http",          // 9
    ]);
    assert_eq!(e.len(), 6, "{e:#?}");
    has(&e[0], &["t.cfg:3: ", "unknown mode 'tcp'"]);
    has(&e[1], &["t.cfg:4: ", "unknown proto 'h3'"]);
    has(&e[2], &["t.cfg:5: ", "unexpected argument 'extra'"]);
    has(&e[3], &["t.cfg:6: ", "expects 'http'"]);
    has(
        &e[4],
        &["t.cfg:7: ", "'tcp-request connection'", "switch-mode"],
    );
    has(&e[5], &["t.cfg:9: ", "only available in a frontend"]);
    // A listen section has the frontend side; in `mode http` the rule only stops the rules.
    ok(&[
        "listen li",
        "  bind :80",
        "  tcp-request content switch-mode http",
        "  server s 127.0.0.1:1",
        "frontend hf",
        "  mode http",
        "  tcp-request content switch-mode http",
    ]);
    // A tcp frontend's HTTP connection options (inherited) do not reach upgraded sessions.
    let c = ok(&[
        "defaults",
        "  mode http",
        "  option httpclose",
        "frontend fe",
        "  mode tcp",
        "  bind :80",
        "  default_backend be",
        "backend be",
    ]);
    let fe = px(&c, "fe");
    assert_eq!(
        fe.options.http_conn_mode,
        crate::config::HttpConnMode::default()
    );
}

#[test]
fn tcp_rules_reading_data_without_inspect_delay_are_warned_about() {
    let c = ok(&[
        "frontend fe",                              // 1
        "  bind :80",                               // 2
        "  use_backend st if { path_beg /static }", // 3
        "  default_backend be",                     // 4
        "backend st",                               // 5
        "backend be",                               // 6
    ]);
    let w = warnings(&c);
    assert_eq!(w.len(), 1, "{w:#?}");
    has(
        &w[0],
        &[
            "t.cfg:3: ",
            "'use_backend' in frontend 'fe'",
            "no 'tcp-request inspect-delay'",
        ],
    );
    // With a delay, or reading only addresses, nothing to say.
    for lines in [
        &[
            "frontend fe",
            "  bind :80",
            "  tcp-request inspect-delay 1s",
            "  use_backend be if { path_beg /static }",
            "backend be",
        ][..],
        &[
            "frontend fe",
            "  bind :80",
            "  use_backend be if { src 10.0.0.1 }",
            "backend be",
        ],
    ] {
        assert!(warnings(&ok(lines)).is_empty(), "{lines:?}");
    }
}

#[test]
fn debugging_and_stats_extras_are_accepted_with_a_warning() {
    let c = ok(&[
        "frontend fe",                    // 1
        "  mode http",                    // 2
        "  bind :80",                     // 3
        "  filter trace name t1 hexdump", // 4
        "  option socket-stats",          // 5
        "  option http-ignore-probes",    // 6
        "  stats enable",                 // 7
        "  stats show-modules",           // 8
    ]);
    let w = warnings(&c);
    assert_eq!(w.len(), 3, "{w:#?}");
    has(&w[0], &["t.cfg:4: ", "'filter trace' has no effect"]);
    has(&w[1], &["t.cfg:5: ", "'option socket-stats' has no effect"]);
    has(&w[2], &["t.cfg:8: ", "'stats show-modules' has no effect"]);
    assert!(px(&c, "fe").options.http_ignore_probes);
    err1(
        &["frontend fe", "  mode http", "  filter trace verbose"],
        &["t.cfg:3: ", "'filter trace': unknown argument 'verbose'"],
    );
}
