//! The runtime API of map and ACL pattern files (`show|get|add|set|del|clear map|acl`,
//! `prepare`/`commit` versions), as operators drive it over the stats socket: every change
//! is seen by the next request, through the converters (`use_backend %[...,map(FILE)]`) and
//! the ACLs (`acl ... -f FILE`) that use the file. Answers follow HAProxy 2.6.12's wording
//! (checked against it on the same commands).

mod common;

use common::*;

/// One request with `Host: host` on a fresh connection: the server that answered, or the
/// status when sluice answered itself.
fn route(port: u16, host: &str) -> String {
    let r = http_raw(
        port,
        format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    if r.status == 200 && r.header("x-server").is_some() {
        r.server()
    } else {
        format!("{} {}", r.status, r.body_str().trim())
    }
}

/// Servers answering "A", "B" and "C", and backends `be_a`, `be_b`, `be_c` for them.
fn three_backends() -> ([HttpBackend; 3], String) {
    let servers = ["A", "B", "C"].map(HttpBackend::start);
    let text = servers
        .iter()
        .zip(["be_a", "be_b", "be_c"])
        .map(|(s, name)| backend_section(name, "", &[s]))
        .collect();
    (servers, text)
}

#[test]
fn maps_and_acl_files_change_at_run_time() {
    let dir = TempDir::new();
    let hosts = dir.write("hosts.map", "a.example be_a\n");
    let block = dir.write("block.lst", "10.0.0.0/8\n");
    let vip = dir.write("vip.lst", "VIP.example\n");
    let (admin, user) = (dir.join("admin.sock"), dir.join("user.sock"));
    let (_servers, backends) = three_backends();
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {admin} level admin\n    stats socket {user} level user\n\
         {DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   acl blocked src -f {block}\n    acl vip req.hdr(host) -i -f {vip}\n\
         \x20   http-request deny if blocked\n\
         \x20   http-request return status 200 content-type text/plain string vip if vip\n\
         \x20   use_backend %[req.hdr(host),lower,map({hosts},be_c)]\n\
         {backends}",
        admin = admin.display(),
        user = user.display(),
        block = block.display(),
        vip = vip.display(),
        hosts = hosts.display(),
    );
    let _s = Sluice::start(&cfg);
    let cli = |cmd: &str| stats_cli(&admin, cmd);
    let h = hosts.display().to_string();

    // The files, their ids and uses.
    let maps = cli("show map");
    assert!(maps.starts_with("# id (file) description\n"), "{maps}");
    assert!(
        maps.contains(&format!(
            "({h}) pattern loaded from file '{h}' used by map at file "
        )) && maps.contains("curr_ver=0 next_ver=0 entry_cnt=1\n"),
        "{maps}"
    );
    let acls = cli("show acl");
    assert!(acls.contains(&format!("({})", block.display())), "{acls}");
    assert!(
        !acls.contains(&h),
        "a map used by no ACL is not an ACL: {acls}"
    );
    let map_id = maps.lines().nth(1).unwrap().split(' ').next().unwrap();
    let shown = cli(&format!("show map #{map_id}"));
    assert!(
        shown.starts_with("0x") && shown.ends_with(" a.example be_a\n\n"),
        "{shown}"
    );

    assert_eq!(route(port, "a.example"), "A");
    assert_eq!(route(port, "new.example"), "C");
    // add, set, del: the next request sees each change.
    assert_eq!(cli(&format!("add map {h} new.example be_a")), "\n");
    assert_eq!(route(port, "new.example"), "A");
    assert_eq!(cli(&format!("set map {h} a.example be_b")), "\n");
    assert_eq!(route(port, "a.example"), "B");
    assert_eq!(cli(&format!("del map {h} a.example")), "\n");
    assert_eq!(route(port, "a.example"), "C");
    assert_eq!(
        cli(&format!("get map {h} new.example")),
        "type=str, case=sensitive, found=yes, idx=tree, key=\"new.example\", value=\"be_a\", \
         type=\"str\"\n\n"
    );
    assert_eq!(
        cli(&format!("get map {h} a.example")),
        "type=str, case=sensitive, found=no\n\n"
    );
    // An entry by its reference (the first column of `show map`).
    let line = cli(&format!("show map {h}"));
    let uid = line.split(' ').next().unwrap().to_string();
    assert_eq!(cli(&format!("set map {h} #{uid} be_b")), "\n");
    assert_eq!(route(port, "new.example"), "B");
    // Several entries at once with a payload.
    assert_eq!(
        cli(&format!("add map {h} <<\nx.example be_a\ny.example be_b\n")),
        "\n"
    );
    assert_eq!(route(port, "x.example"), "A");
    assert_eq!(route(port, "y.example"), "B");

    // A version prepared aside replaces the whole map at its commit, atomically.
    assert_eq!(
        cli(&format!("prepare map {h}")),
        "New version created: 1\n\n"
    );
    assert_eq!(cli(&format!("add map @1 {h} z.example be_a")), "\n");
    assert_eq!(
        route(port, "z.example"),
        "C",
        "not visible before the commit"
    );
    assert_eq!(route(port, "x.example"), "A");
    assert_eq!(cli(&format!("show map @1 {h}")).lines().count(), 2);
    assert_eq!(cli(&format!("commit map @1 {h}")), "\n");
    assert_eq!(route(port, "z.example"), "A");
    assert_eq!(route(port, "x.example"), "C", "replaced by version 1");
    assert!(cli("show map").contains("curr_ver=1 next_ver=1 entry_cnt=1\n"));

    // ACL files: an address list and a case-insensitive host list.
    let bl = block.display().to_string();
    assert_eq!(cli(&format!("add acl {bl} 127.0.0.0/8")), "\n");
    let denied = route(port, "z.example");
    assert!(denied.starts_with("403 "), "{denied}");
    assert_eq!(
        cli(&format!("get acl {bl} 127.0.0.1")),
        "type=ip, case=sensitive, match=yes, idx=tree, pattern=\"127.0.0.0/8\"\n\n"
    );
    assert_eq!(cli(&format!("del acl {bl} 127.0.0.0/8")), "\n");
    assert_eq!(route(port, "z.example"), "A");
    let vl = vip.display().to_string();
    assert_eq!(route(port, "vip.EXAMPLE"), "200 vip");
    assert_eq!(cli(&format!("clear acl {vl}")), "\n");
    assert_eq!(route(port, "vip.example"), "C");
    assert_eq!(cli(&format!("add acl {vl} other.example")), "\n");
    assert_eq!(route(port, "OTHER.example"), "200 vip");

    // Errors, in HAProxy's words; nothing changes.
    assert_eq!(
        cli(&format!("add acl {bl} not-an-address")),
        "'not-an-address' is not a valid IPv4 or IPv6 address or network.\n\n"
    );
    assert_eq!(
        cli("show map /no/such.map"),
        "Unknown map identifier. Please use #<id> or <file>.\n\n"
    );
    assert_eq!(
        cli(&format!("show acl {h}")),
        "Unknown ACL identifier. Please use #<id> or <file>.\n\n"
    );
    assert_eq!(cli(&format!("del map {h} nope")), "Key not found.\n\n");
    assert_eq!(cli(&format!("set map {h} nope v")), "entry not found.\n\n");
    assert_eq!(
        cli(&format!("add map {h} lonely")),
        "'add map' expects three parameters (map identifier, key and value) or one parameter \
         (map identifier) and a payload\n\n"
    );
    assert_eq!(
        cli(&format!("add map @7 {h} k v")),
        "Version number in the future, please use 'prepare map' before.\n\n"
    );
    assert_eq!(
        cli(&format!("commit map @7 {h}")),
        "Version number out of range.\n\n"
    );
    assert!(
        stats_cli(&user, &format!("add map {h} k be_a")).contains("Permission denied"),
        "a user-level socket cannot change maps"
    );
    assert_eq!(route(port, "k"), "C");
    assert_eq!(route(port, "z.example"), "A");
}

/// `set-map`, `del-map`, `add-acl`, `del-acl` in `http-request` and `http-response` rules:
/// requests change the files that later requests are routed and filtered by, as the CLI
/// commands do.
#[test]
fn rules_change_maps_and_acls() {
    let dir = TempDir::new();
    let hosts = dir.write("hosts.map", "");
    let banned = dir.write("banned.lst", "");
    let seen = dir.write("seen.lst", "");
    let admin = dir.join("admin.sock");
    let (_servers, backends) = three_backends();
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {admin} level admin\n\
         {DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   acl banned req.hdr(x-client) -f {banned}\n\
         \x20   acl seen_ok str(200) -f {seen}\n\
         \x20   http-request set-map({hosts}) %[req.hdr(x-key)] %[req.hdr(x-val)] if {{ path /set }}\n\
         \x20   http-request del-map({hosts}) %[req.hdr(x-key)] if {{ path /del }}\n\
         \x20   http-request add-acl({banned}) %[req.hdr(x-ban)] if {{ path /ban }}\n\
         \x20   http-request del-acl({banned}) %[req.hdr(x-ban)] if {{ path /unban }}\n\
         \x20   http-request deny if banned\n\
         \x20   http-request return status 200 content-type text/plain string done if {{ path /set }} || {{ path /del }} || {{ path /ban }} || {{ path /unban }}\n\
         \x20   http-request return status 200 content-type text/plain string seen-200 if {{ path /seen }} seen_ok\n\
         \x20   http-response add-acl({seen}) %ST\n\
         \x20   use_backend %[req.hdr(host),map({hosts},be_c)]\n\
         {backends}",
        admin = admin.display(),
        banned = banned.display(),
        seen = seen.display(),
        hosts = hosts.display(),
    );
    let _s = Sluice::start(&cfg);
    let call = |path: &str, headers: &str| {
        let r = http_raw(
            port,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n"),
        );
        assert_eq!(r.status, 200, "{path}: {}", r.body_str());
    };
    let s = stats_cli(&admin, &format!("show acl {}", seen.display()));
    assert_eq!(s, "\n", "nothing answered yet");
    assert_eq!(route(port, "h.example"), "C");
    call("/set", "x-key: h.example\r\nx-val: be_a\r\n");
    assert_eq!(route(port, "h.example"), "A");
    // set-map replaces the value instead of adding a second entry.
    call("/set", "x-key: h.example\r\nx-val: be_b\r\n");
    assert_eq!(route(port, "h.example"), "B");
    let h = hosts.display().to_string();
    let shown = stats_cli(&admin, &format!("show map {h}"));
    assert_eq!(
        shown.lines().filter(|l| !l.is_empty()).count(),
        1,
        "{shown}"
    );
    assert!(shown.contains(" h.example be_b\n"), "{shown}");
    call("/del", "x-key: h.example\r\n");
    assert_eq!(route(port, "h.example"), "C");

    // add-acl / del-acl: a client banned by a request, then pardoned.
    let evil = |r: &str| {
        http_raw(
            port,
            format!("GET {r} HTTP/1.1\r\nHost: x\r\nx-client: evil\r\nConnection: close\r\n\r\n"),
        )
        .status
    };
    assert_eq!(evil("/"), 200);
    call("/ban", "x-ban: evil\r\n");
    call("/ban", "x-ban: evil\r\n");
    let bl = stats_cli(&admin, &format!("show acl {}", banned.display()));
    assert_eq!(
        bl.lines().filter(|l| l.ends_with(" evil")).count(),
        1,
        "{bl}"
    );
    assert_eq!(evil("/"), 403);
    call("/unban", "x-ban: evil\r\n");
    assert_eq!(evil("/"), 200);

    // http-response add-acl: the statuses servers answered (all 200 here), once each.
    assert_eq!(http_get(port, "/seen").body_str(), "seen-200");
    let s = stats_cli(&admin, &format!("show acl {}", seen.display()));
    assert_eq!(s.lines().filter(|l| l.ends_with(" 200")).count(), 1, "{s}");
}
