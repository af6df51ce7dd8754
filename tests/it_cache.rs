//! `cache` sections with `http-request cache-use` and `http-response cache-store`: what is
//! served from the cache and what is stored, as HAProxy 2.6.12 does it (each expectation was
//! observed on HAProxy with the same requests and responses). The origin counts the requests
//! it gets per path; a request it does not see was answered by the cache.

mod common;

use common::*;
use std::time::Duration;

/// The origin: the response is described by the query string. `cc=V` (Cache-Control),
/// `etag=V`, `lm=1` (Last-Modified), `vary=V`, `ce=V` (Content-Encoding), `age=N`,
/// `cookie=1` (Set-Cookie), `status=N`, `len=N` (body of N bytes, else the path),
/// `chunked=1`. Every response says how many requests its path got (`x-count`).
fn origin() -> HttpBackend {
    let counts = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        usize,
    >::new()));
    HttpBackend::with_handler("origin", move |r| {
        let (path, query) = r.target.split_once('?').unwrap_or((&r.target, ""));
        let n = {
            let mut c = counts.lock().unwrap();
            let e = c.entry(path.to_string()).or_default();
            *e += 1;
            *e
        };
        let mut status = 200;
        let mut headers: Vec<(String, String)> = vec![("x-count".into(), n.to_string())];
        let mut body = path.as_bytes().to_vec();
        let mut chunked = false;
        if let Some(v) = r.header("x-status") {
            status = v.parse().unwrap();
        }
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = v
                .replace("%20", " ")
                .replace("%2C", ",")
                .replace("%22", "\"");
            match k {
                "cc" => headers.push(("Cache-Control".into(), v)),
                "etag" => headers.push(("ETag".into(), format!("\"{v}\""))),
                "lm" => headers.push((
                    "Last-Modified".into(),
                    "Mon, 01 Jan 2024 00:00:00 GMT".into(),
                )),
                "vary" => headers.push(("Vary".into(), v)),
                "ce" => headers.push(("Content-Encoding".into(), v)),
                "age" => headers.push(("Age".into(), v)),
                "cookie" => headers.push(("Set-Cookie".into(), "sid=1; Path=/".into())),
                "status" => status = v.parse().unwrap(),
                "len" => body = vec![b'x'; v.parse().unwrap()],
                "chunked" => chunked = true,
                _ => {}
            }
        }
        if chunked {
            let mut raw = format!("HTTP/1.1 {status} OK\r\n").into_bytes();
            for (k, v) in &headers {
                raw.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
            }
            raw.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            raw.extend_from_slice(&common::chunked(&body, 7));
            return Reply::Raw(raw);
        }
        Reply::Full {
            status,
            headers,
            body,
        }
    })
}

struct Setup {
    s: Sluice,
    port: u16,
    _origin: HttpBackend,
    dir: TempDir,
}

/// sluice with cache `c1` (`cache_extra` lines added to it) used and filled by backend `be`;
/// the frontend tells in `x-hit` what `res.cache_hit`/`res.cache_name` said. Access logs on
/// stdout, an admin socket in `dir`.
fn setup(cache_extra: &str) -> Setup {
    let o = origin();
    let port = free_port();
    let dir = TempDir::new();
    let cfg = format!(
        "global\n    log stdout format raw local0\n    stats socket {sock} level admin\n\
         defaults\n    mode http\n    log global\n    option httplog\n    timeout connect 2s\n    \
         timeout client 10s\n    timeout server 10s\n\
         cache c1\n    total-max-size 4\n    max-age 60\n{cache_extra}\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-response set-header x-hit \"%[res.cache_hit] %[res.cache_name]\"\n    \
         http-after-response set-header x-after %[res.cache_hit]\n    \
         default_backend be\n\
         backend be\n    http-request cache-use c1\n    http-response cache-store c1\n    \
         server s1 {o}\n",
        sock = dir.join("s.sock").display(),
        o = o.hostport(),
    );
    Setup {
        s: Sluice::start(&cfg),
        port,
        _origin: o,
        dir,
    }
}

impl Setup {
    fn get(&self, target: &str) -> Response {
        self.raw(&format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        ))
    }

    fn raw(&self, req: &str) -> Response {
        http_raw(self.port, req)
    }

    /// The request number the origin saw for this response's path.
    fn count(r: &Response) -> u32 {
        r.header("x-count").expect("x-count").parse().unwrap()
    }

    fn cli(&self, line: &str) -> String {
        stats_cli(&self.dir.join("s.sock"), line)
    }
}

fn hit(r: &Response) -> bool {
    r.header("x-hit") == Some("1 c1")
}

#[test]
fn a_stored_response_answers_the_next_request_with_its_age() {
    let t = setup("");
    let first = t.get("/a?cc=max-age=30&age=5");
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-hit"), Some("0"), "a miss: no cache name");
    // The server's Age leaves a response being stored (the cache says its own).
    assert_eq!(first.header("age"), None);
    let second = t.get("/a?cc=max-age=30&age=5");
    assert!(hit(&second), "{:?}", second.headers);
    assert_eq!(Setup::count(&second), 1, "the origin saw one request");
    assert_eq!(second.body_str(), "/a");
    assert_eq!(
        second.header("x-after"),
        Some("1"),
        "http-after-response runs on hits"
    );
    assert_eq!(first.header("x-after"), Some("0"));
    let age: i64 = second.header("age").unwrap().parse().unwrap();
    assert!(
        (5..=7).contains(&age),
        "age {age}: the server's 5 s plus time stored"
    );
    let line = t.s.wait_log_line(|l| l.contains("be/<CACHE>"), WAIT);
    assert!(line.contains(" LR-- "), "{line}");
    // Tw/Tc/Tr are 0, not -1: nothing waited, connected or answered.
    let timers: Vec<&str> = line
        .split("be/<CACHE> ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .split('/')
        .collect();
    assert_eq!(&timers[1..4], ["0", "0", "0"], "{line}");
    // Keep-alive: two requests on one connection, both from the cache.
    let mut c = HttpClient::connect(t.port);
    for _ in 0..2 {
        let r = c.request("GET /a?cc=max-age=30&age=5 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(hit(&r));
        assert_eq!(r.body_str(), "/a");
        assert!(!r.conn_close());
    }
    let stat = t.cli("show stat");
    let row = stat.lines().find(|l| l.starts_with("be,BACKEND,")).unwrap();
    let head = stat.lines().next().unwrap();
    let col = |name: &str| {
        let i = head.split(',').position(|c| c == name).unwrap();
        row.split(',').nth(i).unwrap().to_string()
    };
    assert_eq!(col("cache_lookups"), "4");
    assert_eq!(col("cache_hits"), "3");
}

#[test]
fn requests_that_bypass_the_cache_or_are_not_stored() {
    let t = setup("");
    let url = "/r?cc=max-age=30";
    let req = |extra: &str, version: &str| {
        t.raw(&format!(
            "GET {url} HTTP/{version}\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
        ))
    };
    assert_eq!(Setup::count(&req("", "1.1")), 1);
    // Authorization and HTTP/1.0: neither served nor stored.
    assert_eq!(
        Setup::count(&req("Authorization: Basic dTpw\r\n", "1.1")),
        2
    );
    assert_eq!(Setup::count(&req("", "1.0")), 3);
    assert_eq!(Setup::count(&req("", "1.1")), 1, "still the first copy");
    // no-cache, a max-age, Pragma: the origin answers, and its response replaces the copy.
    for (i, h) in [
        "Cache-Control: no-cache\r\n",
        "Cache-Control: max-age=5\r\n",
        "Pragma: no-cache\r\n",
    ]
    .iter()
    .enumerate()
    {
        let r = req(h, "1.1");
        assert_eq!(Setup::count(&r), 4 + i as u32, "{h}");
        assert_eq!(Setup::count(&req("", "1.1")), 4 + i as u32, "stored by {h}");
    }
    // no-store: served from the cache, but a miss is not stored.
    assert!(hit(&req("Cache-Control: no-store\r\n", "1.1")));
    let fresh = t.raw("GET /ns?cc=max-age=30 HTTP/1.1\r\nHost: x\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n");
    assert_eq!(Setup::count(&fresh), 1);
    assert_eq!(Setup::count(&t.get("/ns?cc=max-age=30")), 2);
    // HEAD is answered from a GET's copy, without the body; a HEAD's response is not stored.
    let h = t.raw(&format!(
        "HEAD {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    ));
    assert!(hit(&h));
    assert!(h.body.is_empty());
    assert_eq!(h.header("content-length"), Some("2"));
    let hh = "HEAD /h?cc=max-age=30 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_eq!(Setup::count(&t.raw(hh)), 1);
    assert_eq!(Setup::count(&t.get("/h?cc=max-age=30")), 2);
    // The key is the Host and the whole target.
    let other_host = t.raw(&format!(
        "GET {url} HTTP/1.1\r\nHost: y\r\nConnection: close\r\n\r\n"
    ));
    assert!(!hit(&other_host));
}

#[test]
fn which_responses_are_stored() {
    let t = setup("    max-object-size 2000\n");
    let stored = |target: &str| {
        let a = t.get(target);
        let b = t.get(target);
        assert_eq!(a.body, b.body, "{target}: the same body either way");
        hit(&b)
    };
    assert!(stored("/s1?cc=max-age=30"));
    assert!(stored("/s2?cc=s-maxage=30"));
    assert!(stored("/s3?etag=v"), "a validator alone");
    assert!(stored("/s4?lm=1"));
    assert!(
        stored("/s5?cc=max-age=30&cookie=1"),
        "HAProxy keeps Set-Cookie responses"
    );
    assert!(stored("/s6?cc=max-age=30&chunked=1&len=30"));
    assert!(!stored("/n1?cc=max-age=30&status=404"));
    assert!(!stored("/n2?cc=private,max-age=30"));
    assert!(!stored("/n3?cc=no-cache"));
    assert!(!stored("/n4?cc=max-age=0&etag=v"));
    assert!(!stored("/n5?cc=public"), "no freshness, no validator");
    assert!(
        !stored("/n6?cc=max-age=30&vary=accept-encoding"),
        "process-vary is off"
    );
    assert!(
        !stored("/n7?cc=max-age=30&age=40"),
        "older than its max-age"
    );
    // Too large: delivered whole, not stored.
    let big = t.get("/n8?cc=max-age=30&len=5000");
    assert_eq!(big.body.len(), 5000);
    assert!(!stored("/n8?cc=max-age=30&len=5000"));
    assert!(!stored("/n9?cc=max-age=30&len=5000&chunked=1"));
    // A chunked response comes back from the cache with its length.
    let c = t.get("/s6?cc=max-age=30&chunked=1&len=30");
    assert_eq!(c.header("content-length"), Some("30"));
    assert!(!c.chunked);
    assert_eq!(c.body, vec![b'x'; 30]);
    // `show cache`: one line per stored URL, sorted by hash.
    let show = t.cli("show cache");
    let mut lines = show.lines();
    let head = lines.next().unwrap();
    assert!(head.contains(": c1 (shctx:0x"), "{show}");
    assert!(head.ends_with("available blocks:4096)"), "{show}");
    let entries: Vec<&str> = lines.filter(|l| l.contains(" hash:")).collect();
    assert_eq!(entries.len(), 6, "{show}");
    let hashes: Vec<u64> = entries
        .iter()
        .map(|l| {
            l.split("hash:")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(hashes.windows(2).all(|w| w[0] <= w[1]), "{show}");
    assert!(
        entries.iter().all(|l| l.contains("refcount:0, expire:")),
        "{show}"
    );
}

/// `set-status` before `cache-store`: the copy has the status the rules set, and the
/// rules after it do not reach the copy.
#[test]
fn the_copy_is_the_response_as_the_rules_left_it() {
    let o = origin();
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}cache c1\n    total-max-size 4\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    http-request cache-use c1\n    \
         http-response set-status 200 reason Fine if {{ status 203 }}\n    \
         http-response set-header x-before yes\n    http-response cache-store c1\n    \
         http-response set-header x-after %[res.cache_hit]\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        o.hostport()
    );
    let _s = Sluice::start(&cfg);
    let get = || {
        http_raw(
            port,
            "GET /p?cc=max-age=30&status=203 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    };
    let a = get();
    assert_eq!((a.status, a.reason.as_str()), (200, "Fine"));
    let b = get();
    assert_eq!(
        (b.status, b.reason.as_str()),
        (200, "Fine"),
        "stored as rewritten"
    );
    assert_eq!(Setup::count(&b), 1, "from the cache");
    assert_eq!(b.header("x-before"), Some("yes"));
    assert_eq!(
        b.headers_named("x-after"),
        ["1"],
        "added on the hit only, once"
    );
}

/// With `compression`, the copy is stored plain and compressed on the way out, hit or miss,
/// for the clients that accept it.
#[test]
fn copies_are_compressed_like_the_servers_responses() {
    let o = origin();
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}cache c1\n    total-max-size 4\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    http-request cache-use c1\n    \
         http-response cache-store c1\n    http-response set-header x-hit %[res.cache_hit]\n    \
         compression algo gzip\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        o.hostport()
    );
    let _s = Sluice::start(&cfg);
    let get = |ae: &str| {
        http_raw(
            port,
            format!(
                "GET /z?cc=max-age=30&len=3000 HTTP/1.1\r\nHost: x\r\n{ae}Connection: close\r\n\r\n"
            ),
        )
    };
    let gunzip = |b: &[u8]| {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(b), &mut out).unwrap();
        out
    };
    for (i, hit) in [(0, "0"), (1, "1")] {
        let r = get("Accept-Encoding: gzip\r\n");
        assert_eq!(r.header("x-hit"), Some(hit), "request {i}");
        assert_eq!(r.header("content-encoding"), Some("gzip"), "request {i}");
        assert!(r.chunked, "request {i}");
        assert_eq!(gunzip(&r.body), vec![b'x'; 3000], "request {i}");
    }
    // A client that does not accept gzip gets the plain copy.
    let r = get("");
    assert_eq!(r.header("x-hit"), Some("1"));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, vec![b'x'; 3000]);
}

#[test]
fn conditional_requests_get_304_from_the_cache() {
    let t = setup("");
    let url = "/c?cc=max-age=30&etag=abc&lm=1";
    assert_eq!(Setup::count(&t.get(url)), 1);
    let cond = |h: &str| {
        t.raw(&format!(
            "GET {url} HTTP/1.1\r\nHost: x\r\n{h}\r\nConnection: close\r\n\r\n"
        ))
    };
    for h in [
        "If-None-Match: \"abc\"",
        "If-None-Match: W/\"abc\"",
        "If-None-Match: \"zzz\", \"abc\"",
        "If-None-Match: *",
        "If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT",
        "If-Modified-Since: Tue, 02 Jan 2024 00:00:00 GMT",
    ] {
        let r = cond(h);
        assert_eq!(r.status, 304, "{h}");
        assert!(r.body.is_empty(), "{h}");
        assert_eq!(r.header("etag"), Some("\"abc\""), "{h}");
        assert!(hit(&r), "{h}");
    }
    for h in [
        "If-None-Match: \"zzz\"",
        "If-Modified-Since: Sun, 31 Dec 2023 00:00:00 GMT",
        "If-None-Match: \"zzz\"\r\nIf-Modified-Since: Tue, 02 Jan 2024 00:00:00 GMT",
    ] {
        let r = cond(h);
        assert_eq!(r.status, 200, "{h}");
        assert_eq!(r.body_str(), "/c", "{h}");
    }
}

#[test]
fn objects_expire_at_the_sections_max_age() {
    let t = setup("    max-age 1\n");
    assert_eq!(Setup::count(&t.get("/e?cc=max-age=30")), 1);
    let show = t.cli("show cache");
    // 1 s left, or 0 if a second boundary passed since it was stored.
    assert!(
        show.contains(", expire:1\n") || show.contains(", expire:0\n"),
        "{show}"
    );
    // Whole seconds, as HAProxy: the copy goes within two seconds.
    wait_until("the copy expired", Duration::from_secs(5), || {
        !hit(&t.get("/e?cc=max-age=30"))
    });
}

#[test]
fn a_successful_unsafe_request_drops_the_copy() {
    let t = setup("");
    let url = "/u?cc=max-age=30";
    assert_eq!(Setup::count(&t.get(url)), 1);
    let post = |status: u16| {
        t.raw(&format!(
            "POST {url} HTTP/1.1\r\nHost: x\r\nX-Status: {status}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        ))
    };
    // A failed POST leaves it; OPTIONS too.
    assert_eq!(post(500).status, 500);
    let o = t.raw(&format!(
        "OPTIONS {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(o.status, 200);
    assert!(hit(&t.get(url)));
    assert_eq!(post(200).status, 200);
    let after = t.get(url);
    assert!(!hit(&after), "dropped by the POST");
    assert!(hit(&t.get(url)), "stored again");
}

#[test]
fn process_vary_keeps_one_copy_per_content_coding() {
    let t = setup("    process-vary on\n    max-secondary-entries 2\n");
    let get = |target: &str, ae: &str| {
        t.raw(&format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\n{ae}Connection: close\r\n\r\n"
        ))
    };
    // A gzip copy serves requests that accept gzip (or say nothing), not the others.
    let g = "/v?cc=max-age=30&vary=accept-encoding&ce=gzip";
    assert!(!hit(&get(g, "Accept-Encoding: gzip\r\n")));
    assert!(hit(&get(g, "Accept-Encoding: br, gzip\r\n")));
    assert!(hit(&get(g, "Accept-Encoding: *\r\n")));
    assert!(hit(&get(g, "")));
    assert!(!hit(&get(g, "Accept-Encoding: br\r\n")));
    assert!(!hit(&get(g, "Accept-Encoding: gzip;q=0\r\n")));
    // An identity copy serves all but those refusing identity.
    let i = "/w?cc=max-age=30&vary=accept-encoding";
    assert!(!hit(&get(i, "Accept-Encoding: br\r\n")));
    assert!(hit(&get(i, "Accept-Encoding: gzip\r\n")));
    assert!(!hit(&get(i, "Accept-Encoding: identity;q=0\r\n")));
    // Vary on a header the cache does not manage: not stored.
    let u = "/x?cc=max-age=30&vary=user-agent";
    assert!(!hit(&get(u, "")));
    assert!(!hit(&get(u, "")));
}

#[test]
fn least_recently_used_objects_make_room() {
    let o = origin();
    let port = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}\
         cache small\n    total-max-size 1\n    max-object-size 400000\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    http-request cache-use small\n    \
         http-response cache-store small\n    \
         http-response set-header x-hit %[res.cache_hit]\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        o.hostport()
    );
    let s = Sluice::start(&cfg);
    let get = |n: u32| {
        http_raw(
            port,
            format!(
                "GET /o{n}?cc=max-age=60&len=300000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    // 1 MB holds three objects of 300 kB.
    for n in 1..=3 {
        assert_eq!(get(n).header("x-hit"), Some("0"));
    }
    assert_eq!(get(1).header("x-hit"), Some("1"), "o1 used again");
    assert_eq!(
        get(4).header("x-hit"),
        Some("0"),
        "o4 stored: o2 makes room"
    );
    assert_eq!(get(1).header("x-hit"), Some("1"));
    assert_eq!(get(3).header("x-hit"), Some("1"));
    assert_eq!(get(2).header("x-hit"), Some("0"), "o2 was evicted");
    // A frontend's own cache-use: logged under the frontend's name.
    let line = s.wait_log_line(|l| l.contains("fe/<CACHE>"), WAIT);
    assert!(line.contains(" fe fe/<CACHE> "), "{line}");
}

#[test]
fn cache_configuration_errors_name_the_line() {
    let base = "defaults\n    mode http\n    timeout client 1s\n    timeout server 1s\n    \
                timeout connect 1s\n";
    let fe = "frontend fe\n    bind 127.0.0.1:8080\n    http-request cache-use c1\n    \
              http-response cache-store c1\n    default_backend be\nbackend be\n    \
              server s1 127.0.0.1:1\n";
    let check = |cache: &str| Sluice::check(&format!("{base}{cache}{fe}"));
    let (code, err) = check("cache c1\n    max-age 60\n");
    assert_ne!(code, 0);
    assert!(
        err.contains(":6: cache 'c1': 'total-max-size' is mandatory"),
        "{err}"
    );
    let (code, err) = check("cache c1\n    total-max-size 1\n    max-object-size 600000\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot be greater than half of 'total-max-size' (524288 bytes)"),
        "{err}"
    );
    let (code, err) = check("cache c1\n    total-max-size 4\n    max-age 1m\n");
    assert_ne!(code, 0);
    assert!(
        err.contains(":8: 'max-age' in cache 'c1': 'max-age' takes a number of seconds"),
        "{err}"
    );
    let (code, err) = check("cache c1\n    total-max-size 4\n    max-size 4\n");
    assert_ne!(code, 0);
    assert!(
        err.contains(":8: 'max-size' in cache 'c1': unknown keyword 'max-size' in cache section"),
        "{err}"
    );
    let (code, err) = check("cache c2\n    total-max-size 4\n");
    assert_ne!(code, 0);
    assert!(err.contains(":10: unable to find cache 'c1'"), "{err}");
    let (code, err) = check("cache c1\n    total-max-size 4\ncache c1\n    total-max-size 8\n");
    assert_ne!(code, 0);
    assert!(
        err.contains(":8: cache 'c1' is already defined at "),
        "{err}"
    );
    let (code, err) = check(
        "cache c1\n    total-max-size 4\nfrontend f2\n    bind 127.0.0.1:8081\n    \
         filter bwlim-in x default-limit 1m default-period 1s\n    default_backend be\n",
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("filter 'bwlim-in' is not supported by sluice"),
        "{err}"
    );
    // res.cache_hit reads the response: not in http-request rules.
    let (code, err) = Sluice::check(&format!(
        "{base}cache c1\n    total-max-size 4\nfrontend fe\n    bind 127.0.0.1:8080\n    \
         http-request set-header x %[res.cache_hit]\n    default_backend be\nbackend be\n    \
         server s1 127.0.0.1:1\n"
    ));
    assert_ne!(code, 0, "{err}");
    let (code, err) =
        check("cache c1\n    total-max-size 4\n    process-vary on\n    max-secondary-entries 3\n");
    assert_eq!(code, 0, "{err}");
}
