//! Sample converters (`,lower`, `,map(FILE)`, `,ipmask(24)`, `,regsub(...)`), map files, ACL
//! pattern files (`-f`, `-i -f`, `-m beg -f`, `-M -f`), constant fetches (`str()`, `int()`)
//! and backend names computed per request (`use_backend %[req.hdr(host),lower,map(...)]`,
//! `use_backend be_%[...]`, the same on an SNI in `mode tcp`), as HAProxy users write them:
//! the real binary, real backends, files in a temporary directory. Expected values are those
//! HAProxy 2.6.12 gave (bench/results/converters-haproxy-2.6.12.json), or follow from its
//! source where that file has no case (noted where so).

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

/// One request on a fresh connection: `GET path` with `Host: host` (none if empty) and the
/// extra header lines `extra` (each ending in `\r\n`).
fn get(port: u16, path: &str, host: &str, extra: &str) -> Response {
    let host = if host.is_empty() {
        String::new()
    } else {
        format!("Host: {host}\r\n")
    };
    http_raw(
        port,
        format!("GET {path} HTTP/1.1\r\n{host}{extra}Connection: close\r\n\r\n"),
    )
}

/// The value of `name` in the last request `b` received (after a request through sluice).
fn seen(b: &HttpBackend, name: &str) -> Option<String> {
    b.last_request().header(name).map(str::to_string)
}

/// Every `X-Hit` header of the last request `b` received, in order.
fn hits(b: &HttpBackend) -> Vec<String> {
    b.last_request()
        .headers_named("x-hit")
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A frontend on `port` with `rules`, whose default backend `be` is server `b`.
fn one_backend(port: u16, rules: &str, b: &HttpBackend) -> String {
    format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n{rules}    default_backend be\n{}",
        backend_section("be", "", &[b])
    )
}

// ---------------------------------------------------------------------------------------------
// Dynamic backend names
// ---------------------------------------------------------------------------------------------

/// Virtual hosting from a map (HAProxy's documented `use_backend %[req.hdr(host),lower,map()]`):
/// the Host picks the backend whatever its case, an unknown host takes the map's default; a
/// name that names no backend stops the switching rules (a later matching static rule is not
/// used) and the default backend answers, or a 503 without one.
#[test]
fn host_routing_through_a_map() {
    let dir = TempDir::new();
    let hosts = dir.write(
        "hosts.map",
        "# host -> backend\n\nwww.example.com   be_www\napi.example.com\tbe_api\n\
         ghost.example.com be_missing\n",
    );
    let (www, api, def) = (
        HttpBackend::start("WWW"),
        HttpBackend::start("API"),
        HttpBackend::start("DEF"),
    );
    let (port, nodef) = (free_port(), free_port());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   use_backend %[req.hdr(host),lower,map({m},be_default)]\n\
         \x20   use_backend be_api if {{ path_beg /api }}\n\
         \x20   default_backend be_default\n\
         frontend fe_nodef\n    bind 127.0.0.1:{nodef}\n\
         \x20   use_backend %[req.hdr(host),lower,map({m})]\n\
         \x20   use_backend be_api if {{ path_beg /api }}\n\
         {}{}{}",
        backend_section("be_www", "", &[&www]),
        backend_section("be_api", "", &[&api]),
        backend_section("be_default", "", &[&def]),
        m = hosts.display(),
    );
    let _s = Sluice::start(&cfg);
    let cases = [
        ("/", "www.example.com", "WWW"),
        ("/", "WWW.Example.COM", "WWW"),
        ("/x", "api.example.com", "API"),
        ("/", "unknown.org", "DEF"),
        // The map's default names be_default: the later static rule is never reached.
        ("/api/v1", "unknown.org", "DEF"),
        // be_missing names no backend: the rules stop, the default backend answers.
        ("/api/v1", "ghost.example.com", "DEF"),
        ("/", "ghost.example.com", "DEF"),
    ];
    for (path, host, want) in cases {
        assert_eq!(get(port, path, host, "").server(), want, "{host}{path}");
    }
    // No Host at all (HTTP/1.0): no sample, no name, the rules stop there too.
    let r = http_raw(port, "GET /api/v1 HTTP/1.0\r\n\r\n");
    assert_eq!(r.server(), "DEF");
    assert_eq!(
        api.reqs(),
        1,
        "the static rule was used once, for api.example.com"
    );

    // Without a default backend: the computed name if it exists, else 503.
    assert_eq!(get(nodef, "/", "Www.Example.com", "").server(), "WWW");
    let before = www.reqs() + api.reqs() + def.reqs();
    let r = get(nodef, "/api/x", "ghost.example.com", "");
    assert_eq!(r.status, 503, "{r:?}");
    let r = get(nodef, "/api/x", "nowhere.example", "");
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(www.reqs() + api.reqs() + def.reqs(), before);
}

/// `use_backend be_%[req.hdr(x-tenant)]`: text and a sample make the name; names are
/// case-sensitive; a rule whose condition is false is skipped (unlike a name that names no
/// backend, which stops the rules).
#[test]
fn backend_name_from_text_and_a_header() {
    let (a, b, def) = (
        HttpBackend::start("A"),
        HttpBackend::start("B"),
        HttpBackend::start("DEF"),
    );
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   use_backend be_%[req.hdr(x-tenant)] if {{ req.hdr(x-tenant) -m found }}\n\
         \x20   use_backend be_b if {{ path /b }}\n\
         \x20   default_backend be_default\n{}{}{}",
        backend_section("be_a", "", &[&a]),
        backend_section("be_b", "", &[&b]),
        backend_section("be_default", "", &[&def]),
    );
    let _s = Sluice::start(&cfg);
    let cases = [
        ("/", "x-tenant: a\r\n", "A"),
        ("/", "x-tenant: b\r\n", "B"),
        ("/", "x-tenant: default\r\n", "DEF"),
        ("/", "x-tenant: A\r\n", "DEF"),
        ("/", "x-tenant: c\r\n", "DEF"),
        // be_c does not exist: the rules stop, /b's rule is not used.
        ("/b", "x-tenant: c\r\n", "DEF"),
        // No header: the dynamic rule's condition is false, the next rule applies.
        ("/b", "", "B"),
        ("/", "", "DEF"),
    ];
    for (path, hdr, want) in cases {
        assert_eq!(get(port, path, "t", hdr).server(), want, "{path} {hdr:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Map lookups
// ---------------------------------------------------------------------------------------------

/// `map_beg` takes the longest prefix whatever the file order, `map_ip` the most specific
/// network (also for an IPv4-mapped IPv6 address, and for `req.hdr_ip`, which drops a port).
#[test]
fn map_beg_longest_prefix_and_map_ip_most_specific_network() {
    let dir = TempDir::new();
    let beg = dir.write("beg.map", "/a short\n/ab long\n/abc/d deeper\n");
    let beg_rev = dir.write("beg_rev.map", "/abc/d deeper\n/ab long\n/a short\n");
    let ip = dir.write(
        "ip.map",
        "10.0.0.0/8 eight\n10.1.0.0/16 sixteen\n192.168.1.1 host\n2001:db8::/32 v6net\n\
         10.1.2.0/24 twentyfour\n",
    );
    let b = HttpBackend::start("B");
    let port = free_port();
    let rules = format!(
        "    http-request set-header X-Beg %[req.hdr(x-in),map_beg({},none)]\n\
         \x20   http-request set-header X-Beg-Rev %[req.hdr(x-in),map_beg({},none)]\n\
         \x20   http-request set-header X-Net %[req.hdr(x-ip),map_ip({ip},none)]\n\
         \x20   http-request set-header X-Hdr-Net %[req.hdr_ip(x-ip),map_ip({ip},none)]\n",
        beg.display(),
        beg_rev.display(),
        ip = ip.display(),
    );
    let _s = Sluice::start(&one_backend(port, &rules, &b));
    for (input, want) in [
        ("/abc", "long"),
        ("/abc/def", "deeper"),
        ("/ab", "long"),
        ("/a", "short"),
        ("/ax", "short"),
        ("/b", "none"),
    ] {
        assert_eq!(
            get(port, "/", "t", &format!("x-in: {input}\r\n")).status,
            200
        );
        assert_eq!(seen(&b, "x-beg").as_deref(), Some(want), "{input}");
        assert_eq!(seen(&b, "x-beg-rev").as_deref(), Some(want), "{input}");
    }
    for (input, want) in [
        ("10.1.2.3", "twentyfour"),
        ("10.1.3.3", "sixteen"),
        ("10.2.3.4", "eight"),
        ("192.168.1.1", "host"),
        ("192.168.1.2", "none"),
        ("2001:db8::1", "v6net"),
        ("::ffff:10.1.3.3", "sixteen"),
        ("11.0.0.1", "none"),
    ] {
        assert_eq!(
            get(port, "/", "t", &format!("x-ip: {input}\r\n")).status,
            200
        );
        assert_eq!(seen(&b, "x-net").as_deref(), Some(want), "{input}");
        assert_eq!(seen(&b, "x-hdr-net").as_deref(), Some(want), "{input}");
    }
    // hdr_ip drops an IPv4 address's port.
    get(port, "/", "t", "x-ip: 10.1.3.3:8080\r\n");
    assert_eq!(seen(&b, "x-hdr-net").as_deref(), Some("sixteen"));
}

/// `map_int` keys and ranges (`100:199`; `-1` is HAProxy's open range "up to 1"; input text is
/// read as a number up to its first non-digit), and `map_str_int` giving an integer an ACL
/// compares with `-m int gt 5`.
#[test]
fn map_int_ranges_and_map_str_int_in_an_acl() {
    let dir = TempDir::new();
    let int = dir.write(
        "int.map",
        "10 ten\n20 twenty\n-1 minus one\n100:199 hundreds\n",
    );
    let weights = dir.write("weights.map", "heavy 9\nlight 2\nedge 5\n");
    let (b, big) = (HttpBackend::start("B"), HttpBackend::start("BIG"));
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   acl big req.hdr(x-k),map_str_int({w},0) -m int gt 5\n\
         \x20   http-request set-header X-Int %[req.hdr(x-n),map_int({i},none)]\n\
         \x20   http-request set-header X-Weight %[req.hdr(x-k),map_str_int({w},0),add(1)]\n\
         \x20   use_backend be_big if big\n    default_backend be\n{}{}",
        backend_section("be", "", &[&b]),
        backend_section("be_big", "", &[&big]),
        w = weights.display(),
        i = int.display(),
    );
    let _s = Sluice::start(&cfg);
    for (n, want) in [
        ("10", "ten"),
        ("20", "twenty"),
        ("10abc", "ten"),
        ("150", "hundreds"),
        ("100", "hundreds"),
        ("199", "hundreds"),
        ("200", "none"),
        ("99", "none"),
        ("1", "minus one"),
        ("0", "minus one"),
        ("-5", "minus one"),
        ("2", "none"),
    ] {
        let r = get(port, "/", "t", &format!("x-n: {n}\r\n"));
        assert_eq!(r.server(), "B");
        assert_eq!(seen(&b, "x-int").as_deref(), Some(want), "x-n: {n}");
    }
    for (k, server, weight) in [
        ("heavy", "BIG", "10"),
        ("light", "B", "3"),
        ("edge", "B", "6"),
        ("unknown", "B", "1"),
    ] {
        let r = get(port, "/", "t", &format!("x-k: {k}\r\n"));
        assert_eq!(r.server(), server, "x-k: {k}");
        let to = if server == "BIG" { &big } else { &b };
        assert_eq!(seen(to, "x-weight").as_deref(), Some(weight), "x-k: {k}");
    }
}

/// `map_reg` (first matching line, in file order) and `map_regm` (the value's `\N` replaced
/// by the key's groups), read back in a redirect's Location and a header the server sees.
#[test]
fn map_reg_and_map_regm_with_backrefs() {
    let dir = TempDir::new();
    let reg = dir.write("reg.map", "^/img/.*\\.png$ png\n^/img/ img\n");
    let regm = dir.write(
        "regm.map",
        "^/u/([a-z]+)/([0-9]+)$ user=\\1,id=\\2\n^/p/(.*) page:\\1:\\1\n",
    );
    let b = HttpBackend::start("B");
    let port = free_port();
    let rules = format!(
        "    http-request redirect location /to/%[path,map_regm({m})] if {{ path,map_regm({m}) -m found }}\n\
         \x20   http-request set-header X-Reg %[req.hdr(x-in),map_reg({r},none)]\n",
        m = regm.display(),
        r = reg.display(),
    );
    let _s = Sluice::start(&one_backend(port, &rules, &b));
    for (path, loc) in [
        ("/u/bob/42", "/to/user=bob,id=42"),
        ("/p/abc", "/to/page:abc:abc"),
    ] {
        let r = get(port, path, "t", "");
        assert_eq!(r.status, 302, "{path}: {r:?}");
        assert_eq!(r.header("location"), Some(loc), "{path}");
    }
    // Case-sensitive: no line matches, no redirect.
    let r = get(port, "/u/Bob/42", "t", "x-in: /img/x.png\r\n");
    assert_eq!((r.status, r.server()), (200, "B".to_string()));
    assert_eq!(seen(&b, "x-reg").as_deref(), Some("png"));
    for (input, want) in [("/img/x.gif", "img"), ("/other", "none")] {
        get(port, "/", "t", &format!("x-in: {input}\r\n"));
        assert_eq!(seen(&b, "x-reg").as_deref(), Some(want), "{input}");
    }
    assert_eq!(b.reqs(), 3, "redirected requests never reach the server");
}

/// A map file's syntax: `#` comments (in the first column only: HAProxy's
/// pat_ref_read_from_file_smp tests for `#` before it strips leading blanks, so `  #k3 v3` is
/// key `#k3`), blank lines, leading blanks, a value running to the end of the line (inner
/// blanks kept, trailing ones not), the first of duplicated keys, a key with no value (an
/// empty value, not the default), CRLF lines, a last line without `\n`.
#[test]
fn map_file_syntax() {
    let dir = TempDir::new();
    let str_map = dir.write(
        "str.map",
        "# string map\n\n   alpha    value one   \nbeta\ttwo\ndup first\ndup second\n\
         Mixed MixedCase\nspaced   a  b   c  \t \n#hash notkey\n  #k3 v3\nk#1 hash-inside\nbare\n\
         tabkey\t\t  tabbed value\n\t\nlast no-newline",
    );
    let crlf = dir.write("crlf.map", "k1 v1\r\nk2  v two \r\n# c\r\n\r\nk3 v3\r\n");
    let b = HttpBackend::start("B");
    let port = free_port();
    let rules = format!(
        "    http-request set-header X-Out [%[req.hdr(x-in),map({},DEF)]]\n\
         \x20   http-request set-header X-Crlf [%[req.hdr(x-in),map({},DEF)]]\n\
         \x20   http-request set-header X-Upper %[req.hdr(x-in),lower,map({}),upper]\n",
        str_map.display(),
        crlf.display(),
        str_map.display(),
    );
    let _s = Sluice::start(&one_backend(port, &rules, &b));
    for (input, want) in [
        ("alpha", "[value one]"),
        ("beta", "[two]"),
        ("dup", "[first]"),
        ("Mixed", "[MixedCase]"),
        ("mixed", "[DEF]"),
        ("spaced", "[a  b   c]"),
        ("#hash", "[DEF]"),
        ("#k3", "[v3]"),
        ("k#1", "[hash-inside]"),
        ("bare", "[]"),
        ("tabkey", "[tabbed value]"),
        ("last", "[no-newline]"),
        ("zzz", "[DEF]"),
    ] {
        get(port, "/", "t", &format!("x-in: {input}\r\n"));
        assert_eq!(seen(&b, "x-out").as_deref(), Some(want), "{input}");
    }
    for (input, want) in [("k1", "[v1]"), ("k2", "[v two]"), ("k3", "[v3]")] {
        get(port, "/", "t", &format!("x-in: {input}\r\n"));
        assert_eq!(seen(&b, "x-crlf").as_deref(), Some(want), "{input}");
    }
    get(port, "/", "t", "x-in: ALPHA\r\n");
    assert_eq!(seen(&b, "x-upper").as_deref(), Some("VALUE ONE"));
}

// ---------------------------------------------------------------------------------------------
// Converters in conditions and headers
// ---------------------------------------------------------------------------------------------

/// Converters in ACL criteria, and the constant fetches `str()` and `int()`.
#[test]
fn converters_in_acl_conditions() {
    let b = HttpBackend::start("B");
    let port = free_port();
    let rules = "    acl lower_abc req.hdr(x-a),lower -m str abc\n\
         \x20   http-request add-header X-Hit lower if lower_abc\n\
         \x20   http-request add-header X-Hit long if { path,length gt 10 }\n\
         \x20   http-request add-header X-Hit lo8 if { src,ipmask(8) -m ip 127.0.0.0/8 }\n\
         \x20   http-request add-header X-Hit ten8 if { src,ipmask(8) -m ip 10.0.0.0/8 }\n\
         \x20   http-request add-header X-Hit upper if { str(abc),upper -m str ABC }\n\
         \x20   http-request add-header X-Hit upper-lc if { str(abc),upper -m str abc }\n\
         \x20   http-request add-header X-Hit int if { int(40),add(2) eq 42 }\n\
         \x20   http-request add-header X-Hit field if { req.hdr(x-a),field(2,.) -m str b }\n\
         \x20   http-request set-header X-Sum %[int(40),add(2)]\n\
         \x20   http-request set-header X-Net %[src,ipmask(24)]\n";
    let _s = Sluice::start(&one_backend(port, rules, &b));
    let want = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    get(port, "/0123456789", "t", "x-a: ABC\r\n");
    assert_eq!(hits(&b), want(&["lower", "long", "lo8", "upper", "int"]));
    assert_eq!(seen(&b, "x-sum").as_deref(), Some("42"));
    assert_eq!(seen(&b, "x-net").as_deref(), Some("127.0.0.0"));
    get(port, "/012345678", "t", "x-a: abd\r\n");
    assert_eq!(hits(&b), want(&["lo8", "upper", "int"]));
    get(port, "/", "t", "x-a: a.b.c\r\n");
    assert_eq!(hits(&b), want(&["lo8", "upper", "int", "field"]));
    // No header: no sample, so neither `lower` nor `field` matches.
    get(port, "/012345678901", "t", "");
    assert_eq!(hits(&b), want(&["long", "lo8", "upper", "int"]));
}

/// `regsub` in a header the server sees: all runs of `/` (with `g`) or only the first.
#[test]
fn regsub_in_a_header_the_server_sees() {
    let b = HttpBackend::start("B");
    let port = free_port();
    let rules = "    http-request set-header X-Path %[path,regsub('/+','/','g')]\n\
         \x20   http-request set-header X-First %[path,regsub('/+','/')]\n\
         \x20   http-request set-header X-Star [%[req.hdr(x-in),regsub('x*','-','g')]]\n\
         \x20   http-request set-header X-Comma '%[req.fhdr(x-in),regsub(\"b,c\",\"[,]\",g)]'\n";
    let _s = Sluice::start(&one_backend(port, rules, &b));
    get(port, "//a///b/c//?q=//", "t", "x-in: abc\r\n");
    let r = b.last_request();
    assert_eq!(r.target, "//a///b/c//?q=//", "the path itself is unchanged");
    assert_eq!(r.header("x-path"), Some("/a/b/c/"));
    assert_eq!(r.header("x-first"), Some("/a///b/c//"));
    assert_eq!(r.header("x-star"), Some("[-a-b-c-]"));
    get(port, "/plain", "t", "x-in: ab,cd\r\n");
    let r = b.last_request();
    assert_eq!(r.header("x-path"), Some("/plain"));
    assert_eq!(r.header("x-comma"), Some("a[,]d"));
}

// ---------------------------------------------------------------------------------------------
// ACL pattern files
// ---------------------------------------------------------------------------------------------

/// `-f FILE` (comments in column 1 only, leading blanks stripped, trailing blanks kept, blank
/// lines ignored), with `-i`, `-m beg`, inline patterns after it, `-M` (a map's keys) and an
/// empty file (accepted, never matches).
#[test]
fn acl_pattern_files() {
    let dir = TempDir::new();
    let pat = dir.write(
        "pat.txt",
        "# patterns\n\n  alpha\nbeta  \nGamma\ntwo words\n  #indented\n/ab\n",
    );
    let map = dir.write(
        "str.map",
        "# a map\n   alpha    value one\nbeta\ttwo\nbare\n",
    );
    let empty = dir.write("empty.txt", "");
    let b = HttpBackend::start("B");
    let port = free_port();
    let p = pat.display();
    let rules = format!(
        "    acl plain req.hdr(x-in) -f {p}\n\
         \x20   acl icase req.hdr(x-in) -i -f {p}\n\
         \x20   acl beg req.hdr(x-in) -m beg -f {p}\n\
         \x20   acl more req.hdr(x-in) -f {p} zeta\n\
         \x20   acl keys req.hdr(x-in) -M -f {}\n\
         \x20   acl none req.hdr(x-in) -f {}\n\
         \x20   acl query url_param(in),url_dec -f {p}\n\
         \x20   http-request add-header X-Hit plain if plain\n\
         \x20   http-request add-header X-Hit icase if icase\n\
         \x20   http-request add-header X-Hit beg if beg\n\
         \x20   http-request add-header X-Hit more if more\n\
         \x20   http-request add-header X-Hit keys if keys\n\
         \x20   http-request add-header X-Hit none if none\n\
         \x20   http-request add-header X-Hit query if query\n",
        map.display(),
        empty.display(),
    );
    let _s = Sluice::start(&one_backend(port, &rules, &b));
    let cases: &[(&str, &[&str])] = &[
        ("alpha", &["plain", "icase", "beg", "more", "keys"]),
        ("Gamma", &["plain", "icase", "beg", "more"]),
        ("GAMMA", &["icase"]),
        ("two words", &["plain", "icase", "beg", "more"]),
        // Only `#` in the first column is a comment.
        ("#indented", &["plain", "icase", "beg", "more"]),
        ("# patterns", &[]),
        // The pattern is `beta  `: trailing blanks are part of it. The map's key is `beta`.
        ("beta", &["keys"]),
        ("alphabet", &["beg"]),
        ("/abc", &["beg"]),
        ("zeta", &["more"]),
        // -M: keys only, a key without a value counts.
        ("value one", &[]),
        ("bare", &["keys"]),
        ("", &[]),
    ];
    for (input, want) in cases {
        get(port, "/", "t", &format!("x-in: {input}\r\n"));
        assert_eq!(hits(&b), *want, "x-in: {input:?}");
    }
    // `beta  ` (with its blanks) matches, through a query parameter that can carry them.
    get(port, "/?in=beta%20%20", "t", "");
    assert_eq!(hits(&b), ["query"]);
    get(port, "/?in=beta", "t", "");
    assert!(hits(&b).is_empty(), "{:?}", hits(&b));
}

/// A missing pattern or map file, or a `_int` map whose value is not an integer, is a
/// configuration error naming the line, which `-c` reports.
#[test]
fn missing_files_are_config_errors() {
    let dir = TempDir::new();
    let bad_int = dir.write("bad.map", "a 1\nb notanumber\n");
    let missing = dir.join("nosuch.lst");
    let m = missing.display();
    let cases = [
        (
            format!("acl x req.hdr(x) -f {m}"),
            format!("failed to open pattern file '{m}'"),
        ),
        (
            format!("acl x req.hdr(x) -M -f {m}"),
            format!("failed to open map file '{m}'"),
        ),
        (
            format!("http-request set-header X-Out %[req.hdr(x),map({m})]"),
            format!("failed to open map file '{m}'"),
        ),
        (
            format!("use_backend %[req.hdr(host),lower,map({m},be)]"),
            format!("failed to open map file '{m}'"),
        ),
        (
            format!(
                "http-request set-header X-Out %[req.hdr(x),map_str_int({})]",
                bad_int.display()
            ),
            "notanumber".to_string(),
        ),
    ];
    for (line, want) in cases {
        let (code, err) = Sluice::check(&format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:8080\n    {line}\n    default_backend be\n\
             backend be\n    server s 127.0.0.1:1\n"
        ));
        assert_ne!(code, 0, "{line}: {err}");
        assert!(
            err.contains("@CFG@:8") && err.contains(&want),
            "{line}: want '@CFG@:8' and {want:?} in: {err}"
        );
    }
    // The same with the files in place is valid, an empty pattern file too.
    let ok = dir.write("ok.map", "a 1\n");
    let empty = dir.write("empty.lst", "");
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:8080\n\
         \x20   acl x req.hdr(x) -f {}\n\
         \x20   http-request set-header X-Out %[req.hdr(x),map_str_int({})] if x\n\
         \x20   default_backend be\nbackend be\n    server s 127.0.0.1:1\n",
        empty.display(),
        ok.display()
    ));
    assert_eq!(code, 0, "{err}");
}

// ---------------------------------------------------------------------------------------------
// mode tcp: SNI routing through a map
// ---------------------------------------------------------------------------------------------

/// TLS passthrough routed by SNI through a map, HAProxy's usual
/// `use_backend %[req.ssl_sni,lower,map(sni.map)]` after an inspect-delay: the ClientHello
/// reaches the server its SNI maps to byte for byte; an unknown or absent SNI (no sample) and
/// a name that names no backend go to the default backend. A ClientHello in two pieces is
/// waited for.
#[test]
fn tcp_sni_routing_through_a_map() {
    let dir = TempDir::new();
    let sni = dir.write(
        "sni.map",
        "a.example.com be_a\nb.example.com be_b\nghost.example.com be_ghost\n",
    );
    let (a, b, other) = (recorder("A"), recorder("B"), recorder("OTHER"));
    let port = free_port();
    let cfg = format!(
        "{LOGGED_TCP}frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 2s\n\
         \x20   tcp-request content accept if {{ req.ssl_hello_type 1 }}\n\
         \x20   use_backend %[req.ssl_sni,lower,map({})]\n\
         \x20   use_backend be_b if {{ req.len gt 0 }}\n\
         \x20   default_backend be_other\n\
         backend be_a\n    server a {}\nbackend be_b\n    server b {}\n\
         backend be_other\n    server o {}\n",
        sni.display(),
        a.b.hostport(),
        b.b.hostport(),
        other.b.hostport()
    );
    let _s = Sluice::start(&cfg);
    let hello = client_hello(Some("A.Example.COM"));
    assert_eq!(tcp_send(port, &hello), b"A");
    assert_eq!(a.seen.lock().unwrap().as_slice(), &[hello]);
    let hello = client_hello(Some("b.example.com"));
    assert_eq!(tcp_send(port, &hello), b"B");
    assert_eq!(b.seen.lock().unwrap().as_slice(), &[hello]);
    // Not in the map, no SNI, or a name with no backend: the rules stop, the default answers
    // (the static `req.len gt 0` rule would have matched).
    for name in [Some("c.example.com"), None, Some("ghost.example.com")] {
        assert_eq!(tcp_send(port, &client_hello(name)), b"OTHER", "{name:?}");
    }
    assert_eq!(other.seen.lock().unwrap().len(), 3);
    // In two pieces: sluice waits for the whole ClientHello before choosing.
    let hello = client_hello(Some("a.example.com"));
    let mut c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(&hello[..9]).unwrap();
    wait_consumed(&c);
    c.write_all(&hello[9..]).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert_eq!(got, b"A");
    assert_eq!(a.seen.lock().unwrap().last().unwrap(), &hello);
    assert_eq!(b.b.conns(), 1);
}

// ---------------------------------------------------------------------------------------------
// Stick tables on a converted key
// ---------------------------------------------------------------------------------------------

/// `track-sc0 src,ipmask(24)`: clients of one /24 share an entry keyed by the network.
#[test]
fn track_on_a_converted_key() {
    let dir = TempDir::new();
    let sock = dir.join("s.sock");
    let b = HttpBackend::start("B");
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}frontend fe\n\
         \x20   bind 127.0.0.1:{port}\n\
         \x20   stick-table type ip size 1k expire 60s store http_req_cnt\n\
         \x20   http-request track-sc0 src,ipmask(24)\n\
         \x20   http-request set-header X-Cnt %[sc_http_req_cnt(0)]\n\
         \x20   default_backend be\n{}",
        sock.display(),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    assert_eq!(c.get("/").status, 200);
    let mut other = HttpClient::from_tcp(connect_from(Ipv4Addr::new(127, 0, 0, 5), lo(port)));
    assert_eq!(other.get("/").status, 200);
    assert_eq!(seen(&b, "x-cnt").as_deref(), Some("3"));
    let out = stats_cli(&sock, "show table fe");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" key=")).collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(
        lines[0].contains(" key=127.0.0.0 ") && lines[0].contains(" http_req_cnt=3"),
        "{out}"
    );
    assert!(
        out.starts_with("# table: fe, type: ip, size:1024, used:1\n"),
        "{out}"
    );
}

/// `debug(PREFIX,stderr)` passes the sample on and writes it as HAProxy 2.6 does
/// (`[debug] PREFIX: type=T <VALUE>`); a ring name is accepted with a warning.
#[test]
fn debug_converter_traces_to_stderr() {
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-request return status 200 content-type text/plain lf-string \
         \"%[str(hello),debug(pfx,stderr)] %[int(5),debug(n,stderr)] %[str(x),debug(r)]\"\n"
    );
    let s = Sluice::start(&cfg);
    assert!(
        s.stderr
            .text()
            .contains("ring 'buf0' is not kept by sluice"),
        "{}",
        s.stderr.text()
    );
    let r = http_get(port, "/");
    assert_eq!(r.body_str(), "hello 5 x");
    for want in ["[debug] pfx: type=str <hello>", "[debug] n: type=sint <5>"] {
        assert!(
            s.stderr
                .wait(|l| l.contains(want), Duration::from_secs(10))
                .is_some(),
            "{want}: {}",
            s.stderr.text()
        );
    }
}
