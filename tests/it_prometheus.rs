//! `http-request use-service prometheus-exporter`: the exposition is well formed (every family
//! has HELP and TYPE, every sample is `name{labels} value`), server and frontend counters and
//! the latency histograms match known traffic (buckets cumulative, `+Inf` = `_count` = the
//! requests sent, plausible `_sum`), CLI state changes show at once, the rule's condition
//! selects what is answered, `scope`/`no-maint`, TCP sessions and health-check histograms,
//! and configuration errors.

mod common;

use common::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// A strict reader of the text exposition format
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

#[derive(Debug, Default)]
struct Expo {
    /// Family name -> (help, type).
    families: HashMap<String, (String, String)>,
    samples: Vec<Sample>,
}

/// Reads `{k="v",...}` starting at `s[0] == '{'`; returns the labels and the rest after `}`.
fn parse_labels(s: &str) -> (Vec<(String, String)>, &str) {
    let b = s.as_bytes();
    assert_eq!(b[0], b'{');
    let mut i = 1;
    let mut out = Vec::new();
    loop {
        if b[i] == b'}' {
            return (out, &s[i + 1..]);
        }
        let eq = i + s[i..].find('=').expect("label '='");
        let key = &s[i..eq];
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad label name {key:?} in {s:?}"
        );
        assert_eq!(b[eq + 1], b'"', "label value must be quoted: {s:?}");
        let mut j = eq + 2;
        let mut val = String::new();
        loop {
            match b[j] {
                b'\\' => {
                    val.push(match b[j + 1] {
                        b'n' => '\n',
                        c => c as char,
                    });
                    j += 2;
                }
                b'"' => break,
                _ => {
                    let c = s[j..].chars().next().unwrap();
                    val.push(c);
                    j += c.len_utf8();
                }
            }
        }
        out.push((key.to_string(), val));
        i = j + 1;
        match b[i] {
            b',' => i += 1,
            b'}' => {}
            c => panic!("unexpected {:?} after a label in {s:?}", c as char),
        }
    }
}

/// Parses the whole text, asserting the format: HELP then TYPE once per family, before its
/// samples, a family's samples together, sample names valid for the family's type.
fn parse(text: &str) -> Expo {
    let mut e = Expo::default();
    let mut current: Option<String> = None;
    let mut closed: Vec<String> = Vec::new();
    let mut help: Option<(String, String)> = None;
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').expect("HELP has text");
            assert!(!h.trim().is_empty(), "empty HELP for {name}");
            assert!(
                !e.families.contains_key(name) && !closed.contains(&name.to_string()),
                "family {name} declared twice"
            );
            if let Some(c) = current.take() {
                closed.push(c);
            }
            help = Some((name.to_string(), h.to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE has a type");
            let (hname, h) = help
                .take()
                .unwrap_or_else(|| panic!("TYPE without HELP: {line}"));
            assert_eq!(hname, name, "TYPE follows the HELP of the same family");
            assert!(
                ["gauge", "counter", "histogram"].contains(&ty),
                "type {ty} of {name}"
            );
            e.families.insert(name.to_string(), (h, ty.to_string()));
            current = Some(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        assert!(help.is_none(), "sample between HELP and TYPE: {line}");
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value: {line}"));
        let name = &line[..name_end];
        assert!(
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..])
        } else {
            (Vec::new(), &line[name_end..])
        };
        let v = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("one space before the value: {line:?}"));
        assert!(!v.contains(' '), "no timestamp expected: {line:?}");
        let value: f64 = match v {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value {v:?} in {line:?}")),
        };
        assert!(!value.is_nan(), "sluice exports no NaN: {line}");
        let fam = current
            .as_deref()
            .unwrap_or_else(|| panic!("sample before any family: {line}"));
        let ty = &e.families[fam].1;
        let ok = if ty == "histogram" {
            [
                format!("{fam}_bucket"),
                format!("{fam}_sum"),
                format!("{fam}_count"),
            ]
            .contains(&name.to_string())
        } else {
            name == fam
        };
        assert!(ok, "sample {name} does not belong to family {fam} ({ty})");
        e.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    assert!(help.is_none(), "HELP without TYPE at the end");
    e
}

impl Expo {
    /// The value of the sample with exactly these labels.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
            })
            .map(|s| s.value)
    }

    fn val(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
    }

    /// Whether any sample of `name` has label `k="v"`.
    fn any_with(&self, name: &str, k: &str, v: &str) -> bool {
        self.samples
            .iter()
            .any(|s| s.name == name && s.labels.iter().any(|(a, b)| a == k && b == v))
    }

    /// Checks a histogram's series with these labels and returns (buckets by `le`, sum,
    /// count): `le` increasing and ending with `+Inf`, counts cumulative, `+Inf` == `_count`.
    fn histogram(&self, fam: &str, labels: &[(&str, &str)]) -> (Vec<(f64, f64)>, f64, f64) {
        let bucket = format!("{fam}_bucket");
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == bucket
                    && s.labels.len() == labels.len() + 1
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
            })
            .map(|s| {
                let le = &s.labels.iter().find(|(k, _)| k == "le").expect("le").1;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("numeric le")
                };
                (le, s.value)
            })
            .collect();
        assert!(buckets.len() > 2, "no buckets for {fam} {labels:?}");
        let sorted = buckets.windows(2).all(|w| w[0].0 < w[1].0);
        assert!(sorted, "le bounds out of order: {buckets:?}");
        assert_eq!(buckets.last().unwrap().0, f64::INFINITY, "ends with +Inf");
        for w in buckets.windows(2) {
            assert!(w[0].1 <= w[1].1, "buckets not cumulative: {buckets:?}");
        }
        let sum = self.val(&format!("{fam}_sum"), labels);
        let count = self.val(&format!("{fam}_count"), labels);
        assert_eq!(buckets.last().unwrap().1, count, "+Inf bucket == _count");
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        (buckets, sum, count)
    }
}

// ---------------------------------------------------------------------------------------------
// Setup
// ---------------------------------------------------------------------------------------------

/// How long the test servers of `be` take to answer: the response-time histogram must see it.
const SERVER_DELAY: Duration = Duration::from_millis(5);

struct Setup {
    _s: Sluice,
    _dir: TempDir,
    /// The frontend with the exporter (`/metrics`; anything else goes to `be`).
    prom: u16,
    /// The proxied frontend.
    fe: u16,
    sock: PathBuf,
    b1: HttpBackend,
    b2: HttpBackend,
}

fn slow(name: &str) -> HttpBackend {
    let n = name.to_string();
    HttpBackend::with_handler(name, move |_| {
        std::thread::sleep(SERVER_DELAY);
        Reply::named(&n)
    })
}

/// `prom` (exporter if `path /metrics`, else `be`), `fe` -> `be` (s1, s2: 5 ms servers),
/// with a stats socket, on 2 threads. `extra` is appended to the configuration.
fn setup(extra: &str) -> Setup {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let (prom, fe) = (free_port(), free_port());
    let (b1, b2) = (slow("s1"), slow("s2"));
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n\
{DEFAULTS_HTTP}frontend prom\n    bind 127.0.0.1:{prom}\n\
    http-request use-service prometheus-exporter if {{ path /metrics }}\n    default_backend be\n\
frontend fe\n    bind 127.0.0.1:{fe}\n    default_backend be\n\
backend be\n    server s1 {}\n    server s2 {}\n{extra}",
        sock.display(),
        b1.hostport(),
        b2.hostport(),
    );
    Setup {
        _s: Sluice::start(&cfg),
        _dir: dir,
        prom,
        fe,
        sock,
        b1,
        b2,
    }
}

impl Setup {
    fn scrape_path(&self, path: &str) -> Expo {
        let r = http_get(self.prom, path);
        assert_eq!(r.status, 200, "{}", r.body_str());
        parse(&r.body_str())
    }

    fn scrape(&self) -> Expo {
        self.scrape_path("/metrics")
    }

    /// Scrapes until `f` holds (counters are added once the response has left).
    fn scrape_until(&self, what: &str, f: impl Fn(&Expo) -> bool) -> Expo {
        let mut last = None;
        wait_until(what, WAIT, || {
            let e = self.scrape();
            let ok = f(&e);
            last = Some(e);
            ok
        });
        last.unwrap()
    }
}

fn srv<'a>(be: &'a str, s: &'a str) -> [(&'a str, &'a str); 2] {
    [("proxy", be), ("server", s)]
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn exposition_is_well_formed_with_haproxy_names() {
    let t = setup("");
    let r = http_get(t.prom, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let e = parse(&r.body_str());
    // Every family has HELP and TYPE (checked by `parse`), and HAProxy's names are there.
    for (name, ty) in [
        ("haproxy_process_nbthread", "gauge"),
        ("haproxy_process_uptime_seconds", "gauge"),
        ("haproxy_process_start_time_seconds", "gauge"),
        ("haproxy_process_current_connections", "gauge"),
        ("haproxy_process_max_connections", "gauge"),
        ("haproxy_process_requests_total", "counter"),
        ("haproxy_frontend_current_sessions", "gauge"),
        ("haproxy_frontend_limit_sessions", "gauge"),
        ("haproxy_frontend_sessions_total", "counter"),
        ("haproxy_frontend_http_responses_total", "counter"),
        ("haproxy_frontend_intercepted_requests_total", "counter"),
        ("haproxy_frontend_status", "gauge"),
        ("haproxy_backend_status", "gauge"),
        ("haproxy_backend_active_servers", "gauge"),
        ("haproxy_backend_current_queue", "gauge"),
        ("haproxy_backend_connection_attempts_total", "counter"),
        ("haproxy_server_status", "gauge"),
        ("haproxy_server_weight", "gauge"),
        ("haproxy_server_current_sessions", "gauge"),
        ("haproxy_server_idle_connections_current", "gauge"),
        ("haproxy_server_response_time_seconds", "histogram"),
        ("haproxy_backend_total_time_seconds", "histogram"),
    ] {
        let (_, t) = e
            .families
            .get(name)
            .unwrap_or_else(|| panic!("no family {name}"));
        assert_eq!(t, ty, "{name}");
    }
    assert_eq!(e.val("haproxy_process_nbthread", &[]), 2.0);
    assert!(e.val("haproxy_process_start_time_seconds", &[]) > 1.6e9);
    assert_eq!(
        e.val(
            "haproxy_frontend_status",
            &[("proxy", "fe"), ("state", "UP")]
        ),
        1.0
    );
    assert_eq!(
        e.val("haproxy_backend_active_servers", &[("proxy", "be")]),
        2.0
    );
    // No health checks: the server is UP, and one state of five is set.
    let st = |state| {
        e.val(
            "haproxy_server_status",
            &[("proxy", "be"), ("server", "s1"), ("state", state)],
        )
    };
    assert_eq!(st("UP"), 1.0);
    for s in ["DOWN", "MAINT", "DRAIN", "NOLB"] {
        assert_eq!(st(s), 0.0, "{s}");
    }
    // A server without maxconn has no limit to export: no sample rather than a made-up one.
    assert!(
        e.get("haproxy_server_limit_sessions", &srv("be", "s1"))
            .is_none()
    );
    // HEAD: the same head, no body.
    let mut c = HttpClient::connect(t.prom);
    let h = c.request("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty());
    assert!(
        h.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 1000
    );
}

#[test]
fn counters_and_histograms_match_the_traffic() {
    let t = setup("");
    const N: usize = 40;
    // Keep-alive: most requests reuse a server connection, so connect times are fewer.
    let mut c = HttpClient::connect(t.fe);
    for _ in 0..N {
        assert_eq!(c.get("/").status, 200);
    }
    let e = t.scrape_until(
        "the backend's total-time histogram to count every request",
        |e| {
            e.get(
                "haproxy_backend_total_time_seconds_count",
                &[("proxy", "be")],
            ) == Some(N as f64)
        },
    );
    let (n1, n2) = (t.b1.reqs(), t.b2.reqs());
    assert_eq!(n1 + n2, N);
    assert!(n1 > 0 && n2 > 0, "roundrobin used both servers: {n1} {n2}");
    assert_eq!(
        e.val("haproxy_frontend_http_requests_total", &[("proxy", "fe")]),
        N as f64
    );
    assert_eq!(
        e.val(
            "haproxy_frontend_http_responses_total",
            &[("proxy", "fe"), ("code", "2xx")]
        ),
        N as f64
    );
    assert_eq!(
        e.val(
            "haproxy_backend_http_responses_total",
            &[("proxy", "be"), ("code", "2xx")]
        ),
        N as f64
    );
    assert_eq!(
        e.val(
            "haproxy_frontend_http_responses_total",
            &[("proxy", "fe"), ("code", "5xx")]
        ),
        0.0
    );
    for (name, n) in [("s1", n1), ("s2", n2)] {
        let l = srv("be", name);
        let with_code = [l[0], l[1], ("code", "2xx")];
        assert_eq!(
            e.val("haproxy_server_http_responses_total", &with_code),
            n as f64,
            "{name}"
        );
        assert_eq!(e.val("haproxy_server_sessions_total", &l), n as f64);
        assert_eq!(e.val("haproxy_server_loadbalanced_total", &l), n as f64);
        assert_eq!(e.val("haproxy_server_current_sessions", &l), 0.0);
        // One client connection in keep-alive: a new server connection, then reuses.
        let attempts = e.val("haproxy_server_connection_attempts_total", &l);
        let reuses = e.val("haproxy_server_connection_reuses_total", &l);
        assert!(attempts >= 1.0, "{name}: {attempts}");
        assert_eq!(
            attempts + reuses,
            n as f64,
            "{name}: every request connected or reused"
        );
        // Histograms: `+Inf` == `_count` == requests the server answered.
        for fam in [
            "haproxy_server_response_time_seconds",
            "haproxy_server_total_time_seconds",
            "haproxy_server_queue_time_seconds",
        ] {
            let (_, _, count) = e.histogram(fam, &l);
            assert_eq!(count, n as f64, "{fam} {name}");
        }
        let (_, _, connects) = e.histogram("haproxy_server_connect_time_seconds", &l);
        assert_eq!(connects, attempts, "one connect time per new connection");
        // The server takes 5 ms: no response faster than 2 ms, and a sum of at least 5 ms
        // each (and far below a second each).
        let (buckets, sum, count) = e.histogram("haproxy_server_response_time_seconds", &l);
        let fast = buckets.iter().find(|(le, _)| *le == 0.002).unwrap().1;
        assert_eq!(
            fast, 0.0,
            "{name}: responses faster than the server: {buckets:?}"
        );
        assert!(
            sum >= count * SERVER_DELAY.as_secs_f64() && sum < count,
            "{name}: implausible sum {sum} for {count} responses"
        );
        let (_, total_sum, _) = e.histogram("haproxy_server_total_time_seconds", &l);
        assert!(
            total_sum >= sum,
            "the total time includes the response time"
        );
    }
    // The backend's histograms add up its servers'.
    let (_, _, count) = e.histogram("haproxy_backend_response_time_seconds", &[("proxy", "be")]);
    assert_eq!(count, N as f64);
    let (_, qsum, qcount) = e.histogram("haproxy_backend_queue_time_seconds", &[("proxy", "be")]);
    assert_eq!(qcount, N as f64);
    assert!(qsum < 1.0, "nothing queued: {qsum}");
}

#[test]
fn the_condition_selects_what_the_exporter_answers() {
    let t = setup("");
    let before = t.b1.reqs() + t.b2.reqs();
    let e = t.scrape();
    assert!(e.families.contains_key("haproxy_process_uptime_seconds"));
    assert_eq!(
        t.b1.reqs() + t.b2.reqs(),
        before,
        "/metrics never reaches a server"
    );
    // Another path of the same frontend is proxied.
    let r = http_get(t.prom, "/other");
    assert_eq!(r.status, 200);
    assert!(["s1", "s2"].contains(&r.server().as_str()), "{r:?}");
    assert!(!r.body_str().contains("haproxy_"));
    assert_eq!(t.b1.reqs() + t.b2.reqs(), before + 1);
    // Scrapes count as intercepted requests of their frontend; the proxied one does not
    // (a scrape sees the earlier ones, once they are accounted).
    let e = t.scrape_until("the earlier requests counted", |e| {
        let int = e.val(
            "haproxy_frontend_intercepted_requests_total",
            &[("proxy", "prom")],
        );
        let req = e.val("haproxy_frontend_http_requests_total", &[("proxy", "prom")]);
        int >= 1.0 && req - int == 1.0
    });
    assert_eq!(
        e.val(
            "haproxy_frontend_intercepted_requests_total",
            &[("proxy", "fe")]
        ),
        0.0
    );
    // `unless` works too, and the service can sit in a backend's rules.
    let p = free_port();
    let b = HttpBackend::start("x");
    let s = Sluice::start(&format!(
        "{DEFAULTS_HTTP}frontend f\n    bind 127.0.0.1:{p}\n    default_backend m\n\
backend m\n    http-request use-service prometheus-exporter unless {{ path_beg /app }}\n\
    server x {}\n",
        b.hostport()
    ));
    assert!(
        http_get(p, "/")
            .body_str()
            .contains("# TYPE haproxy_backend_status gauge")
    );
    assert_eq!(http_get(p, "/app/1").body_str(), "x");
    assert_eq!(b.reqs(), 1);
    drop(s);
}

#[test]
fn cli_state_changes_show_at_once() {
    let t = setup("");
    let status = |e: &Expo, state| {
        e.val(
            "haproxy_server_status",
            &[("proxy", "be"), ("server", "s1"), ("state", state)],
        )
    };
    assert_eq!(status(&t.scrape(), "UP"), 1.0);
    assert_eq!(stats_cli(&t.sock, "set server be/s1 state maint"), "\n");
    let e = t.scrape();
    assert_eq!(status(&e, "MAINT"), 1.0);
    assert_eq!(status(&e, "UP"), 0.0);
    let agg = |e: &Expo, state| {
        e.val(
            "haproxy_backend_agg_server_status",
            &[("proxy", "be"), ("state", state)],
        )
    };
    assert_eq!(agg(&e, "MAINT"), 1.0);
    assert_eq!(agg(&e, "UP"), 1.0);
    assert_eq!(
        e.val("haproxy_backend_active_servers", &[("proxy", "be")]),
        1.0
    );
    // `no-maint` leaves the server out; `scope` selects parts.
    let e = t.scrape_path("/metrics?scope=server&no-maint");
    assert!(!e.any_with("haproxy_server_status", "server", "s1"));
    assert!(e.any_with("haproxy_server_status", "server", "s2"));
    assert!(e.families.keys().all(|f| f.starts_with("haproxy_server_")));
    let e = t.scrape_path("/metrics?scope=frontend&scope=global");
    assert!(e.families.contains_key("haproxy_process_nbthread"));
    assert!(e.families.contains_key("haproxy_frontend_status"));
    assert!(
        !e.families
            .keys()
            .any(|f| f.starts_with("haproxy_server_") || f.starts_with("haproxy_backend_"))
    );
    let bad = http_get(t.prom, "/metrics?scope=servers");
    assert_eq!(bad.status, 400);
    assert!(bad.body_str().contains("unknown scope 'servers'"));
    // Drain: its own state, and no effective weight.
    stats_cli(&t.sock, "set server be/s1 state drain");
    let e = t.scrape();
    assert_eq!(status(&e, "DRAIN"), 1.0);
    assert_eq!(status(&e, "MAINT"), 0.0);
    assert_eq!(e.val("haproxy_server_weight", &srv("be", "s1")), 0.0);
    stats_cli(&t.sock, "set server be/s1 state ready");
    let e = t.scrape();
    assert_eq!(status(&e, "UP"), 1.0);
    assert_eq!(e.val("haproxy_server_weight", &srv("be", "s1")), 1.0);
    stats_cli(&t.sock, "set weight be/s1 7");
    assert_eq!(
        t.scrape().val("haproxy_server_weight", &srv("be", "s1")),
        7.0
    );
}

#[test]
fn health_checks_have_status_and_a_duration_histogram() {
    let b3 = HttpBackend::start("s3");
    let t = setup(&format!(
        "backend chk\n    option httpchk GET /health\n    server s3 {} check inter 100ms\n\
    server s4 127.0.0.1:{} check inter 100ms\n",
        b3.hostport(),
        closed_port()
    ));
    let e = t.scrape_until("two checks of each server", |e| {
        ["s3", "s4"].iter().all(|s| {
            e.get("haproxy_server_check_time_seconds_count", &srv("chk", s))
                .is_some_and(|n| n >= 2.0)
        })
    });
    let chk = |e: &Expo, s, state| {
        e.val(
            "haproxy_server_check_status",
            &[("proxy", "chk"), ("server", s), ("state", state)],
        )
    };
    assert_eq!(chk(&e, "s3", "L7OK"), 1.0);
    assert_eq!(chk(&e, "s3", "L4CON"), 0.0);
    assert_eq!(e.val("haproxy_server_check_code", &srv("chk", "s3")), 200.0);
    assert_eq!(chk(&e, "s4", "L4CON"), 1.0);
    assert_eq!(chk(&e, "s4", "L7OK"), 0.0);
    assert!(e.val("haproxy_server_check_failures_total", &srv("chk", "s4")) >= 1.0);
    assert_eq!(
        e.val(
            "haproxy_server_status",
            &[("proxy", "chk"), ("server", "s4"), ("state", "DOWN")]
        ),
        1.0
    );
    assert!(
        e.get("haproxy_server_check_duration_seconds", &srv("chk", "s3"))
            .is_some()
    );
    let (_, sum, count) = e.histogram("haproxy_server_check_time_seconds", &srv("chk", "s3"));
    assert!(count >= 2.0 && sum > 0.0 && sum < count, "{sum} {count}");
    // Servers without checks have no check metrics.
    assert!(
        e.get("haproxy_server_check_code", &srv("be", "s1"))
            .is_none()
    );
    assert!(!e.any_with("haproxy_server_check_time_seconds_count", "server", "s1"));
    // `disable health`: HAProxy stops exporting the check status.
    stats_cli(&t.sock, "disable health chk/s3");
    assert!(
        !t.scrape()
            .any_with("haproxy_server_check_status", "server", "s3")
    );
}

#[test]
fn tcp_sessions_have_connect_and_total_times() {
    let echo = TcpBackend::echo();
    let p = free_port();
    let t = setup(&format!(
        "listen l4\n    mode tcp\n    bind 127.0.0.1:{p}\n    server t1 {}\n",
        echo.hostport()
    ));
    for _ in 0..3 {
        let mut c = std::net::TcpStream::connect(lo(p)).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        c.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
    }
    let l = srv("l4", "t1");
    let e = t.scrape_until("three TCP sessions recorded", |e| {
        e.get("haproxy_server_total_time_seconds_count", &l) == Some(3.0)
    });
    let (_, _, connects) = e.histogram("haproxy_server_connect_time_seconds", &l);
    assert_eq!(connects, 3.0);
    let (_, _, queued) = e.histogram("haproxy_server_queue_time_seconds", &l);
    assert_eq!(queued, 3.0);
    assert_eq!(e.val("haproxy_server_sessions_total", &l), 3.0);
    assert_eq!(
        e.val("haproxy_frontend_sessions_total", &[("proxy", "l4")]),
        3.0
    );
    // No HTTP in mode tcp: no response time, no status classes.
    assert!(!e.any_with("haproxy_server_response_time_seconds_count", "proxy", "l4"));
    assert!(!e.any_with("haproxy_backend_response_time_seconds_count", "proxy", "l4"));
    assert!(!e.any_with("haproxy_server_http_responses_total", "proxy", "l4"));
    assert!(!e.any_with("haproxy_frontend_http_requests_total", "proxy", "l4"));
}

#[test]
fn use_service_errors_name_the_line() {
    let base = |rule: &str| {
        format!(
            "defaults\n    mode http\n    timeout client 1s\nfrontend f\n    bind 127.0.0.1:{}\n{rule}\n",
            free_port()
        )
    };
    let o = Sluice::check_full(
        &base("    http-request use-service prometheus-exporter if { path /metrics }"),
        &[],
    );
    assert_eq!(o.code, 0, "{o:?}");
    for (rule, want) in [
        (
            "    http-request use-service prometheus-exportr",
            "unknown service 'prometheus-exportr'",
        ),
        (
            "    http-request use-service lua.hello",
            "unknown service 'lua.hello'",
        ),
        ("    http-request use-service", "expects a service name"),
        (
            "    http-request use-service prometheus-exporter now",
            "unexpected argument 'now'",
        ),
    ] {
        let o = Sluice::check_full(&base(rule), &[]);
        assert_ne!(o.code, 0, "{rule}");
        assert!(
            o.stderr.contains("@CFG@:6:") && o.stderr.contains(want),
            "{rule}: {}",
            o.stderr
        );
    }
    let o = Sluice::check_full(
        &base("    http-request use-service prometheus-exportr"),
        &[],
    );
    assert!(
        o.stderr.contains("(sluice provides: prometheus-exporter)"),
        "{}",
        o.stderr
    );
}

#[test]
fn clear_counters_and_dynamic_servers() {
    let t = setup("");
    let mut c = HttpClient::connect(t.fe);
    for _ in 0..6 {
        assert_eq!(c.get("/").status, 200);
    }
    drop(c);
    let be = [("proxy", "be")];
    t.scrape_until("six requests recorded", |e| {
        e.get("haproxy_backend_total_time_seconds_count", &be) == Some(6.0)
    });
    // `clear counters all` zeroes the histograms with the counters.
    assert_eq!(stats_cli(&t.sock, "clear counters all"), "\n");
    let e = t.scrape();
    for s in ["s1", "s2"] {
        let l = srv("be", s);
        assert_eq!(e.val("haproxy_server_sessions_total", &l), 0.0);
        let (buckets, sum, count) = e.histogram("haproxy_server_total_time_seconds", &l);
        assert_eq!((count, sum), (0.0, 0.0), "{s}");
        assert!(buckets.iter().all(|(_, n)| *n == 0.0));
    }
    // A server added at run time has its histograms; once deleted it leaves the output, and
    // its backend's histograms keep what it served.
    let b3 = slow("s3");
    let add = format!("add server be/s3 {}", b3.hostport());
    assert_eq!(stats_cli(&t.sock, &add), "New server registered.\n\n");
    for s in ["s1", "s2"] {
        stats_cli(&t.sock, &format!("set server be/{s} state maint"));
    }
    for _ in 0..4 {
        assert_eq!(http_get(t.fe, "/").server(), "s3");
    }
    let l3 = srv("be", "s3");
    let e = t.scrape_until("four requests on s3", |e| {
        e.get("haproxy_server_response_time_seconds_count", &l3) == Some(4.0)
    });
    e.histogram("haproxy_server_total_time_seconds", &l3);
    assert_eq!(e.val("haproxy_backend_total_time_seconds_count", &be), 4.0);
    stats_cli(&t.sock, "set server be/s3 state maint");
    assert_eq!(
        stats_cli(&t.sock, "del server be/s3"),
        "Server deleted.\n\n"
    );
    let e = t.scrape();
    assert!(!e.any_with("haproxy_server_status", "server", "s3"));
    assert!(!e.any_with("haproxy_server_total_time_seconds_count", "server", "s3"));
    assert_eq!(e.val("haproxy_backend_total_time_seconds_count", &be), 4.0);
    assert_eq!(
        e.val(
            "haproxy_backend_agg_server_status",
            &[("proxy", "be"), ("state", "MAINT")]
        ),
        2.0
    );
}

/// Cross-thread takeovers are counted per server, as `show pools` counts them.
#[test]
fn pool_takeovers_are_exported() {
    let t = setup("");
    let servers = ["be/s1", "be/s2"];
    let sum = |col: &str| -> u64 { servers.iter().map(|s| pool_line(&t.sock, s).0[col]).sum() };
    // Sequential `Connection: close` clients, each after the previous server connection went
    // back to its thread's pool: a client accepted by the other thread takes it over.
    for i in 0..24 {
        assert_eq!(http_get(t.fe, &format!("/r{i}")).status, 200);
        wait_until("server connections released", WAIT, || sum("used") == 0);
    }
    let out = stats_cli(&t.sock, "show pools");
    let shown = sum("takeovers") as f64;
    let e = t.scrape();
    let exported = e.val("haproxy_server_pool_takeovers_total", &srv("be", "s1"))
        + e.val("haproxy_server_pool_takeovers_total", &srv("be", "s2"));
    assert!(shown >= 1.0, "{out}");
    assert_eq!(exported, shown, "{out}");
    // The most idle connections held at once, as `show pools` and the CSV say.
    for s in ["s1", "s2"] {
        let most = pool_line(&t.sock, &format!("be/{s}")).0["idle_max"];
        assert_eq!(
            e.val("haproxy_server_pool_idle_connections_max", &srv("be", s)),
            most as f64,
            "{out}"
        );
        assert_eq!(
            stat_column(&t.sock, "be", s, "pool_idle_max"),
            most.to_string()
        );
    }
    assert!(sum("idle_max") >= 1, "{out}");
}
