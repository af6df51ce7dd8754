//! Load-balancing algorithms: roundrobin (weights), static-rr, leastconn, first, source, uri
//! (and its options), url_param, hdr, random; backup servers.

mod common;

use common::*;
use std::collections::HashMap;
use std::net::Ipv4Addr;

struct Farm {
    _s: Sluice,
    port: u16,
    backends: Vec<HttpBackend>,
}

/// Servers s1..sN (each answering with its name); `server_opts[i]` is appended to server i's line.
fn farm(balance: &str, server_opts: &[&str]) -> Farm {
    farm_with(balance, server_opts, |name| {
        let n = name.to_string();
        HttpBackend::with_handler(name, move |_| Reply::named(&n))
    })
}

fn farm_with(balance: &str, server_opts: &[&str], mk: impl Fn(&str) -> HttpBackend) -> Farm {
    let port = free_port();
    let backends: Vec<HttpBackend> = (1..=server_opts.len())
        .map(|i| mk(&format!("s{i}")))
        .collect();
    let mut cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    {balance}\n"
    );
    for (b, opts) in backends.iter().zip(server_opts) {
        cfg.push_str(&format!("    server {} {} {opts}\n", b.name, b.hostport()));
    }
    Farm {
        _s: Sluice::start(&cfg),
        port,
        backends,
    }
}

/// Which server answers `GET path` (fresh connection each time) with extra headers.
fn who(port: u16, path: &str, headers: &str) -> String {
    let mut c = HttpClient::connect(port);
    let r = c.request(format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{headers}\r\n"
    ));
    assert_eq!(r.status, 200, "{path}");
    r.server()
}

fn tally(names: impl IntoIterator<Item = String>) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for n in names {
        *m.entry(n).or_insert(0) += 1;
    }
    m
}

#[test]
fn roundrobin_equal_weights_alternates() {
    let f = farm("balance roundrobin", &["", "", ""]);
    let seq: Vec<String> = (0..12).map(|_| who(f.port, "/", "")).collect();
    let t = tally(seq.clone());
    assert_eq!(t.len(), 3, "{seq:?}");
    assert!(t.values().all(|&n| n == 4), "{seq:?}");
    // Strict rotation: every window of 3 consecutive picks has all three servers.
    for w in seq.windows(3) {
        let mut v = w.to_vec();
        v.sort();
        v.dedup();
        assert_eq!(v.len(), 3, "not a rotation: {seq:?}");
    }
}

#[test]
fn roundrobin_respects_weights() {
    let f = farm("balance roundrobin", &["weight 3", "weight 1"]);
    let t = tally((0..40).map(|_| who(f.port, "/", "")));
    assert_eq!(t.get("s1"), Some(&30), "{t:?}");
    assert_eq!(t.get("s2"), Some(&10), "{t:?}");
}

#[test]
fn roundrobin_with_unequal_weights_gives_haproxys_order() {
    // Recorded from HAProxy 2.6.12 on the same weights (`bench/balance_diff.py`): its fwrr
    // trees interleave the servers in this order, which an operator comparing logs sees.
    let f = farm(
        "balance roundrobin",
        &["weight 1", "weight 2", "weight 3", "weight 5"],
    );
    let seq: Vec<String> = (0..33).map(|_| who(f.port, "/", "")).collect();
    let want: Vec<String> = "4 3 4 2 4 3 4 1 3 2 4 4 3 4 2 4 3 4 1 3 2 4 4 3 4 2 4 3 4 1 3 2 4"
        .split(' ')
        .map(|n| format!("s{n}"))
        .collect();
    assert_eq!(seq, want);
}

#[test]
fn roundrobin_rotates_per_request_on_a_keepalive_connection() {
    let f = farm("balance roundrobin", &["", ""]);
    let mut c = HttpClient::connect(f.port);
    let seq: Vec<String> = (0..6).map(|_| c.get("/").server()).collect();
    let t = tally(seq.clone());
    assert_eq!(t.get("s1"), Some(&3), "{seq:?}");
    assert_eq!(t.get("s2"), Some(&3), "{seq:?}");
}

#[test]
fn static_rr_respects_weights() {
    let f = farm("balance static-rr", &["weight 2", "weight 1", "weight 1"]);
    let t = tally((0..40).map(|_| who(f.port, "/", "")));
    assert_eq!(t.get("s1"), Some(&20), "{t:?}");
    assert_eq!(t.get("s2"), Some(&10), "{t:?}");
    assert_eq!(t.get("s3"), Some(&10), "{t:?}");
}

#[test]
fn weight_zero_server_gets_nothing() {
    let f = farm("balance roundrobin", &["weight 0", ""]);
    let t = tally((0..10).map(|_| who(f.port, "/", "")));
    assert_eq!(t.get("s2"), Some(&10), "{t:?}");
}

#[test]
fn leastconn_picks_the_least_busy_server() {
    let gate = Gate::new();
    let g2 = gate.clone();
    let f = farm_with("balance leastconn", &["", ""], move |name| {
        let n = name.to_string();
        let g = g2.clone();
        HttpBackend::with_handler(name, move |r| {
            if r.target == "/slow" {
                g.wait();
            }
            Reply::named(&n)
        })
    });
    let port = f.port;
    let total = |f: &Farm| f.backends.iter().map(|b| b.reqs()).sum::<usize>();
    // Four slow requests, each sent once the previous one has reached a server.
    let mut handles = Vec::new();
    for i in 0..4 {
        handles.push(std::thread::spawn(move || who(port, "/slow", "")));
        wait_until("slow request reached a server", WAIT, || total(&f) == i + 1);
    }
    let busy: Vec<usize> = f.backends.iter().map(|b| b.reqs()).collect();
    assert_eq!(
        busy,
        vec![2, 2],
        "leastconn must spread concurrent requests evenly"
    );
    // s1 and s2 both hold 2; release everything and check each answered.
    gate.open();
    let t = tally(handles.into_iter().map(|h| h.join().unwrap()));
    assert_eq!(t.get("s1"), Some(&2));
    assert_eq!(t.get("s2"), Some(&2));
}

#[test]
fn leastconn_avoids_a_server_holding_a_long_request() {
    let gate = Gate::new();
    let g2 = gate.clone();
    let f = farm_with("balance leastconn", &["", ""], move |name| {
        let n = name.to_string();
        let g = g2.clone();
        HttpBackend::with_handler(name, move |r| {
            if r.target == "/slow" {
                g.wait();
            }
            Reply::named(&n)
        })
    });
    let port = f.port;
    let h = std::thread::spawn(move || who(port, "/slow", ""));
    wait_until("slow request reached a server", WAIT, || {
        f.backends.iter().any(|b| b.reqs() == 1)
    });
    let busy = if f.backends[0].reqs() == 1 {
        "s1"
    } else {
        "s2"
    };
    // Sequential requests on one keep-alive connection: each ends before the next starts, so
    // the busy server always has one more active request than the other.
    let mut c = HttpClient::connect(f.port);
    for _ in 0..6 {
        let r = c.get("/fast");
        assert_eq!(r.status, 200);
        assert_ne!(
            r.server(),
            busy,
            "leastconn sent a request to the busy server"
        );
    }
    gate.open();
    assert_eq!(h.join().unwrap(), busy);
}

#[test]
fn first_fills_servers_in_order() {
    let gate = Gate::new();
    let g2 = gate.clone();
    let f = farm_with(
        "balance first",
        &["maxconn 2", "maxconn 2", "maxconn 2"],
        move |name| {
            let n = name.to_string();
            let g = g2.clone();
            HttpBackend::with_handler(name, move |r| {
                if r.target == "/slow" {
                    g.wait();
                }
                Reply::named(&n)
            })
        },
    );
    // Sequential requests (one keep-alive connection) all go to the first server.
    let mut c = HttpClient::connect(f.port);
    for _ in 0..5 {
        assert_eq!(c.get("/").server(), "s1");
    }
    // Fill s1 (2 slow requests), then s2: the next goes to s3.
    let port = f.port;
    let mut hs = Vec::new();
    for (srv, n) in [(0usize, 6usize), (0, 7), (1, 1), (1, 2)] {
        hs.push(std::thread::spawn(move || who(port, "/slow", "")));
        wait_until("slow request arrived", WAIT, || f.backends[srv].reqs() == n);
    }
    assert_eq!(c.get("/").server(), "s3");
    assert_eq!(f.backends[2].reqs(), 1);
    gate.open();
    let got: Vec<String> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, vec!["s1", "s1", "s2", "s2"]);
    // Once the slow requests are over (their end may lag the client's read), s1 is first again.
    wait_until("s1 is used again", WAIT, || c.get("/").server() == "s1");
}

#[test]
fn source_sticks_per_client_address() {
    let f = farm("balance source", &["", "", ""]);
    let dst = lo(f.port);
    let mut seen = HashMap::new();
    for round in 0..3 {
        for last in 1..=24u8 {
            let src = Ipv4Addr::new(127, 0, 0, last);
            let mut c = HttpClient::from_tcp(connect_from(src, dst));
            let r = c.request("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            assert_eq!(r.status, 200);
            let prev = seen.entry(last).or_insert_with(|| r.server());
            assert_eq!(
                *prev,
                r.server(),
                "source 127.0.0.{last} changed server in round {round}"
            );
        }
    }
    let distinct = tally(seen.values().cloned());
    assert!(
        distinct.len() >= 2,
        "24 source addresses all hashed to one server: {distinct:?}"
    );
}

#[test]
fn uri_hash_is_stable_and_spreads() {
    let f = farm("balance uri", &["", "", ""]);
    let mut map = HashMap::new();
    for i in 0..30 {
        let p = format!("/item/{i}");
        let s = who(f.port, &p, "");
        map.insert(p, s);
    }
    for (p, s) in &map {
        assert_eq!(&who(f.port, p, ""), s, "{p} moved");
    }
    assert!(
        tally(map.values().cloned()).len() >= 2,
        "30 URIs on one server: {map:?}"
    );
    // By default the query string is not hashed.
    for i in 0..10 {
        assert_eq!(who(f.port, &format!("/item/3?v={i}"), ""), map["/item/3"]);
    }
}

#[test]
fn uri_whole_hashes_the_query_too() {
    let f = farm("balance uri whole", &["", "", ""]);
    let servers = tally((0..30).map(|i| who(f.port, &format!("/same?v={i}"), "")));
    assert!(
        servers.len() >= 2,
        "with 'whole' the query must count: {servers:?}"
    );
    let s = who(f.port, "/same?v=7", "");
    assert_eq!(who(f.port, "/same?v=7", ""), s);
}

#[test]
fn uri_depth_and_len_limit_what_is_hashed() {
    let f = farm("balance uri depth 1", &["", "", ""]);
    let s = who(f.port, "/a/x", "");
    for i in 0..10 {
        assert_eq!(
            who(f.port, &format!("/a/{i}/deep"), ""),
            s,
            "depth 1 hashes only /a"
        );
    }
    drop(f);
    let f = farm("balance uri len 4", &["", "", ""]);
    let s = who(f.port, "/abcdef", "");
    for i in 0..10 {
        assert_eq!(
            who(f.port, &format!("/abc{i}"), ""),
            s,
            "len 4 hashes only /abc"
        );
    }
    let spread = tally((0..30).map(|i| who(f.port, &format!("/{i:03}"), "")));
    assert!(spread.len() >= 2, "{spread:?}");
}

#[test]
fn url_param_hashes_the_parameter() {
    let f = farm("balance url_param user", &["", "", ""]);
    let mut map = HashMap::new();
    for u in 0..20 {
        map.insert(u, who(f.port, &format!("/p?x=1&user=u{u}&y=2"), ""));
    }
    for (u, s) in &map {
        assert_eq!(
            &who(f.port, &format!("/other?user=u{u}"), ""),
            s,
            "user u{u} moved"
        );
    }
    assert!(tally(map.values().cloned()).len() >= 2, "{map:?}");
    // Without the parameter: round robin.
    let t = tally((0..9).map(|_| who(f.port, "/noparam", "")));
    assert_eq!(
        t.len(),
        3,
        "requests without the parameter should rotate: {t:?}"
    );
}

#[test]
fn hdr_hashes_the_header() {
    let f = farm("balance hdr(X-Tenant)", &["", "", ""]);
    let mut map = HashMap::new();
    for t in 0..20 {
        map.insert(t, who(f.port, "/", &format!("X-Tenant: tenant-{t}\r\n")));
    }
    for (t, s) in &map {
        assert_eq!(
            &who(f.port, "/x", &format!("x-tenant: tenant-{t}\r\n")),
            s,
            "tenant {t} moved"
        );
    }
    assert!(tally(map.values().cloned()).len() >= 2, "{map:?}");
    let t = tally((0..9).map(|_| who(f.port, "/", "")));
    assert_eq!(
        t.len(),
        3,
        "requests without the header should rotate: {t:?}"
    );
}

#[test]
fn consistent_hashing_moves_few_keys_when_a_server_is_disabled() {
    let keys: Vec<String> = (0..60).map(|i| format!("/k/{i}")).collect();
    let f = farm("balance uri\n    hash-type consistent", &["", "", "", ""]);
    let before: Vec<String> = keys.iter().map(|k| who(f.port, k, "")).collect();
    drop(f);
    let f = farm(
        "balance uri\n    hash-type consistent",
        &["", "", "", "disabled"],
    );
    let after: Vec<String> = keys.iter().map(|k| who(f.port, k, "")).collect();
    for (b, a) in before.iter().zip(&after) {
        if b != "s4" {
            assert_eq!(
                a, b,
                "with consistent hashing, keys not on the removed server stay put"
            );
        }
        assert_ne!(a, "s4");
    }
}

#[test]
fn random_uses_every_server() {
    let f = farm("balance random", &["", ""]);
    let t = tally((0..100).map(|_| who(f.port, "/", "")));
    assert!(t.get("s1").copied().unwrap_or(0) >= 10, "{t:?}");
    assert!(t.get("s2").copied().unwrap_or(0) >= 10, "{t:?}");
}

#[test]
fn disabled_server_gets_no_traffic() {
    let f = farm("balance roundrobin", &["", "disabled", ""]);
    let t = tally((0..10).map(|_| who(f.port, "/", "")));
    assert_eq!(t.get("s2"), None, "{t:?}");
    assert_eq!(t.get("s1"), Some(&5));
    assert_eq!(t.get("s3"), Some(&5));
    assert_eq!(f.backends[1].conns(), 0);
}

#[test]
fn backup_is_unused_while_an_active_server_is_usable() {
    let f = farm("balance roundrobin", &["", "backup"]);
    for _ in 0..6 {
        assert_eq!(who(f.port, "/", ""), "s1");
    }
    assert_eq!(f.backends[1].conns(), 0);
}

#[test]
fn first_backup_only_when_all_actives_are_disabled() {
    let f = farm(
        "balance roundrobin",
        &["disabled", "disabled", "backup", "backup"],
    );
    for _ in 0..6 {
        assert_eq!(who(f.port, "/", ""), "s3", "only the first backup serves");
    }
    assert_eq!(f.backends[3].conns(), 0);
}

#[test]
fn default_server_settings_apply_unless_overridden() {
    let f = farm(
        "balance roundrobin\n    default-server weight 3",
        &["", "weight 1"],
    );
    let t = tally((0..40).map(|_| who(f.port, "/", "")));
    assert_eq!(t.get("s1"), Some(&30), "{t:?}");
    assert_eq!(t.get("s2"), Some(&10), "{t:?}");
}

#[test]
fn redispatch_moves_a_refused_request_to_another_server() {
    let dead = closed_port();
    let good = HttpBackend::start("good");
    let port = free_port();
    let mk = |redispatch: &str| {
        format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    balance roundrobin\n    retries 1\n    timeout connect 200ms\n{redispatch}\n    server dead 127.0.0.1:{dead}\n    server good {}\n",
            good.hostport()
        )
    };
    {
        let _s = Sluice::start(&mk("    option redispatch"));
        for _ in 0..6 {
            let r = http_get(port, "/");
            assert_eq!(
                r.status, 200,
                "with redispatch every request must be served"
            );
            assert_eq!(r.server(), "good");
        }
    }
    {
        let _s = Sluice::start(&mk(""));
        let statuses: Vec<u16> = (0..6).map(|_| http_get(port, "/").status).collect();
        assert_eq!(
            statuses.iter().filter(|&&s| s == 502).count(),
            3,
            "{statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|&&s| s == 200).count(),
            3,
            "{statuses:?}"
        );
    }
}

const WEIGHTS_1235: [&str; 4] = ["weight 1", "weight 2", "weight 3", "weight 5"];

/// Servers chosen for `/k/0` .. `/k/15` (URI hash) and for sources 127.0.0.1 .. 127.0.0.12.
fn placements(f: &Farm, uri: bool) -> String {
    let dst = lo(f.port);
    let v: Vec<String> = if uri {
        (0..16)
            .map(|i| who(f.port, &format!("/k/{i}"), ""))
            .collect()
    } else {
        (1..=12u8)
            .map(|last| {
                let src = Ipv4Addr::new(127, 0, 0, last);
                let mut c = HttpClient::from_tcp(connect_from(src, dst));
                let r = c.request("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
                assert_eq!(r.status, 200);
                r.server()
            })
            .collect()
    };
    v.join(" ")
}

/// The placements below were recorded from HAProxy 2.6.12 on the same configs (these tests
/// pass against it through `tests/fixtures/it/haproxy-shim.py`): a bare `hash-type
/// consistent` is sdbm with avalanche, and the ring keys end with HAProxy's multiplication.
#[test]
fn consistent_hashing_places_keys_where_haproxy_does() {
    let f = farm("balance uri\n    hash-type consistent", &WEIGHTS_1235);
    assert_eq!(
        placements(&f, true),
        "s2 s4 s4 s1 s4 s4 s4 s4 s2 s4 s2 s4 s4 s3 s4 s3"
    );
    drop(f);
    let f = farm("balance uri\n    hash-type consistent djb2", &WEIGHTS_1235);
    assert_eq!(
        placements(&f, true),
        "s3 s3 s3 s3 s3 s3 s3 s3 s3 s3 s4 s4 s4 s4 s4 s4"
    );
    drop(f);
    let f = farm("balance source\n    hash-type consistent", &WEIGHTS_1235);
    assert_eq!(placements(&f, false), "s3 s4 s2 s1 s3 s3 s3 s4 s3 s2 s3 s4");
}

#[test]
fn leastconn_lets_idle_servers_take_turns_whatever_their_weight() {
    // HAProxy's leastconn key is 0 for an idle server: one request at a time goes to each
    // server in turn; weights matter only with requests in flight.
    let f = farm("balance leastconn", &WEIGHTS_1235);
    let t = tally((0..40).map(|_| who(f.port, "/", "")));
    for s in ["s1", "s2", "s3", "s4"] {
        assert_eq!(t.get(s), Some(&10), "{t:?}");
    }
}

#[test]
fn random_draws_follow_the_weights_when_servers_are_idle() {
    // Two draws; between two idle servers the later draw wins (HAProxy), so sequential
    // requests follow the weights: about 1 in 4 for the weight-1 server. Keeping the heavier
    // server on ties instead would give it 1 in 16.
    let f = farm("balance random(2)", &["weight 1", "weight 3"]);
    let t = tally((0..400).map(|_| who(f.port, "/", "")));
    let light = t.get("s1").copied().unwrap_or(0);
    assert!((60..=140).contains(&light), "{t:?}");
}

#[test]
fn all_backups_share_the_load_with_option_allbackups() {
    let f = farm(
        "balance roundrobin\n    option allbackups",
        &["disabled", "backup", "backup"],
    );
    let t = tally((0..10).map(|_| who(f.port, "/", "")));
    assert_eq!(t.get("s2"), Some(&5), "{t:?}");
    assert_eq!(t.get("s3"), Some(&5), "{t:?}");
}

#[test]
fn hdr_hashes_the_first_value_and_an_empty_one_falls_back_to_roundrobin() {
    let f = farm("balance hdr(X-User)", &["", "", "", ""]);
    for u in ["alice", "bob", "carol", "dave", "erin"] {
        assert_eq!(
            who(f.port, "/", &format!("X-User: {u}, other\r\n")),
            who(f.port, "/", &format!("X-User: {u}\r\n")),
            "only the first value of the list is hashed"
        );
    }
    let t = tally((0..8).map(|_| who(f.port, "/", "X-User:\r\n")));
    assert_eq!(t.len(), 4, "an empty value is balanced round-robin: {t:?}");
}
