//! Lua (`lua-load`): actions, sample fetches, converters and HTTP services registered by a
//! real script, run by the sluice binary on real requests; the configuration errors; a
//! runaway function stopped at `tune.lua.session-timeout`.

mod common;

use common::*;
use std::io::{Read, Write};

/// A script using most of what sluice offers: `...` are the arguments of `lua-load`.
const SCRIPT: &str = r#"
local greeting = ...
core.register_action("tag", {"http-req"}, function(txn, name)
  local host = txn.sf:req_hdr("host")
  txn.http:req_set_header("x-tag", name .. ":" .. host)
  txn.http:req_del_header("x-drop")
  txn:set_var("txn.seen", txn.f:path())
  local p = txn.sf:path()
  if p == "/deny" then return act.DENY end
  if p == "/reply" then
    local r = txn:reply({status = 201, body = "made by lua\n"})
    r:add_header("x-lua", "yes")
    txn:done(r)
  end
  if p == "/close" then txn:done() end
  if p == "/boom" then error("boom") end
  if p == "/error" then return act.ERROR end
  if p == "/abort" then return act.ABORT end
  if p == "/stop" then return act.STOP end
end, 1)
core.register_action("rsp", {"http-res"}, function(txn)
  txn.http:res_add_header("x-rsp", txn:get_var("txn.seen") or "none")
  local h = txn.http:res_get_headers()
  txn.http:res_set_header("x-server-was", h["x-server"] and h["x-server"][0] or "?")
end)
core.register_action("route", {"tcp-req"}, function(txn)
  txn:set_var("sess.be", "be_" .. txn.f:dst_port() % 2)
end)
core.register_fetches("double", function(txn, n) return tonumber(n) * 2 end)
core.register_fetches("hdr_names", function(txn)
  local names = {}
  for name, v in pairs(txn.http:req_get_headers()) do names[#names + 1] = name .. "=" .. v[0] end
  table.sort(names)
  return table.concat(names, ";")
end)
core.register_converters("rev", function(s) return s:reverse() end)
core.register_converters("wrap", function(s, l, r) return l .. s .. r end)
core.register_service("hello", "http", function(applet)
  local body = greeting .. " " .. applet.method .. " " .. applet.path .. " qs=" .. applet.qs
    .. " host=" .. applet.headers["host"][0] .. " len=" .. applet.length
    .. " line=" .. applet:getline() .. "rest=" .. applet:receive()
  applet:set_status(202)
  applet:add_header("content-type", "text/plain")
  applet:start_response()
  applet:send(body)
end)
core.register_service("raw", "tcp", function(applet) end)
core.register_action("spin", {"http-req"}, function(txn)
  while true do end
end)
"#;

fn script(dir: &TempDir) -> String {
    dir.write("t.lua", SCRIPT).display().to_string()
}

#[test]
fn actions_fetches_converters_and_services() {
    let dir = TempDir::new();
    let be = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "global\n    lua-load {} hi\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   http-request use-service lua.hello if {{ path_beg /svc }}\n\
\x20   http-request lua.tag abc\n\
\x20   http-request return status 200 content-type text/plain lf-string \"tag=%[req.hdr(x-tag)] d=%[lua.double(21)] r=%[path,lua.rev] w=%[path,lua.wrap(<,>)] n=%[lua.hdr_names]\" if {{ path /ret }}\n\
\x20   http-request return status 200 if {{ path /deny }} || {{ path /reply }} || {{ path /boom }} || {{ path /close }}\n\
\x20   http-request return status 299 if {{ path /stop }} || {{ path /error }} || {{ path /abort }}\n\
\x20   default_backend be\n\
backend be\n    http-response lua.rsp\n    server s1 {}\n",
        script(&dir),
        be.hostport()
    );
    let s = Sluice::start(&cfg);
    // Fetches, converters and an action's header, in a format.
    let r = http_raw(
        port,
        "GET /ret HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    // The fields as HAProxy's HTX has them: names in lower case, values numbered from 0,
    // no `Connection`; with the one the action added.
    assert_eq!(
        r.body_str(),
        "tag=abc:h d=42 r=ter/ w=</ret> n=host=h;x-a=1;x-tag=abc:h"
    );
    // An HTTP service: the request line, its fields, its body.
    let r = http_raw(
        port,
        "POST /svc/x?a=1 HTTP/1.1\r\nHost: h2\r\nContent-Length: 11\r\nConnection: close\r\n\r\nline1\nrest!",
    );
    assert_eq!(r.status, 202);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(
        r.body_str(),
        "hi POST /svc/x qs=a=1 host=h2 len=11 line=line1\nrest=rest!"
    );
    // act.DENY: a 403; act.ERROR: a 500; act.ABORT: HAProxy 2.6's 503; txn:done(reply):
    // that reply.
    assert_eq!(http_get(port, "/deny").status, 403);
    assert_eq!(http_get(port, "/error").status, 500);
    assert_eq!(http_get(port, "/abort").status, 503);
    let r = http_get(port, "/reply");
    assert_eq!((r.status, r.body_str().as_str()), (201, "made by lua\n"));
    assert_eq!(r.header("x-lua"), Some("yes"));
    // A runtime error is logged, and the rules go on (as in HAProxy): the `return` rule.
    assert_eq!(http_get(port, "/boom").status, 200);
    s.wait_stderr_line(
        |l| l.contains("Lua function 'tag': runtime error:") && l.contains("t.lua:16: boom"),
        WAIT,
    );
    // act.STOP: no more http-request rules (the 299 is not reached), the server answers.
    let r = http_get(port, "/stop");
    assert_eq!(r.status, 200);
    assert_eq!(r.server(), "s1");
    // txn:done() without a reply: closed without an answer.
    let mut c = HttpClient::connect(port);
    c.send("GET /close HTTP/1.1\r\nHost: h\r\n\r\n");
    c.expect_closed();
    // To the server: the action's header edits; from it: the response action's.
    let r = http_raw(
        port,
        "GET /fwd HTTP/1.1\r\nHost: h\r\nX-Drop: 1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-rsp"), Some("/fwd"));
    assert_eq!(r.header("x-server-was"), Some("s1"));
    let seen = be.last_request();
    assert_eq!(seen.header("x-tag"), Some("abc:h"));
    assert_eq!(seen.header("x-drop"), None);
}

#[test]
fn a_tcp_content_action_sets_the_variable_a_backend_is_chosen_by() {
    let dir = TempDir::new();
    let (even, odd) = (TcpBackend::echo(), TcpBackend::echo());
    let port = free_port();
    let cfg = format!(
        "global\n    lua-load {}\n\
defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\
frontend fe\n    bind 127.0.0.1:{port}\n    tcp-request content lua.route\n\
\x20   use_backend %[var(sess.be)]\n\
backend be_0\n    server s {}\nbackend be_1\n    server s {}\n",
        script(&dir),
        even.hostport(),
        odd.hostport()
    );
    let _s = Sluice::start(&cfg);
    let mut c = std::net::TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"ping").unwrap();
    let mut echoed = [0u8; 4];
    c.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping");
    let (want, other) = if port.is_multiple_of(2) {
        (&even, &odd)
    } else {
        (&odd, &even)
    };
    assert_eq!((want.conns(), other.conns()), (1, 0));
}

#[test]
fn a_runaway_function_is_stopped_and_the_thread_serves_on() {
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n    lua-load {}\n    tune.lua.session-timeout 200ms\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   http-request lua.spin if {{ path /spin }}\n    http-request return status 204\n",
        script(&dir)
    );
    let s = Sluice::start(&cfg);
    // Stopped, logged, and the rules go on, as after any runtime error.
    assert_eq!(http_get(port, "/spin").status, 204);
    s.wait_stderr_line(
        |l| l.contains("Lua function 'spin': runtime error: execution timeout"),
        WAIT,
    );
    // The one thread is free again.
    assert_eq!(http_get(port, "/").status, 204);
}

#[test]
fn lua_configuration_errors_name_the_line_and_the_reason() {
    let dir = TempDir::new();
    let good = script(&dir);
    let bad = dir
        .write("bad.lua", "core.register_action(\n")
        .display()
        .to_string();
    let sleeps = dir
        .write("sleep.lua", "core.sleep(1)\n")
        .display()
        .to_string();
    let fe = "frontend fe\n    mode http\n    bind 127.0.0.1:1\n";
    for (cfg, want) in [
        (
            "global\n    lua-load /nonexistent/x.lua\n".to_string(),
            ":2: 'lua-load' in 'global' section: cannot read Lua file '/nonexistent/x.lua'"
                .to_string(),
        ),
        (
            format!("global\n    lua-load {bad}\n"),
            format!("failed to load Lua file '{bad}': syntax error"),
        ),
        (
            format!("global\n    lua-load {sleeps}\n"),
            "core.sleep is not supported by sluice".to_string(),
        ),
        (
            format!("global\n    lua-load {good}\n{fe}    http-request lua.nosuch\n"),
            ":6: 'http-request' in frontend 'fe': unknown action 'lua.nosuch'".to_string(),
        ),
        (
            format!("global\n    lua-load {good}\n{fe}    http-response lua.tag x\n"),
            "Lua action 'tag' is not registered for 'http-res' rules (it is for: http-req)"
                .to_string(),
        ),
        (
            format!("global\n    lua-load {good}\n{fe}    http-request lua.tag\n"),
            "Lua action 'tag' expects 1 argument(s), got 0".to_string(),
        ),
        (
            format!("global\n    lua-load {good}\n{fe}    http-request lua.tag a b\n"),
            "Lua action 'tag': unexpected argument 'b'".to_string(),
        ),
        (
            format!(
                "global\n    lua-load {good}\n{fe}    http-request set-var(txn.x) lua.nosuch\n"
            ),
            "unknown sample fetch 'lua.nosuch' (no Lua script registers".to_string(),
        ),
        (
            format!(
                "global\n    lua-load {good}\n{fe}    http-request set-var(txn.x) path,lua.nosuch\n"
            ),
            "unknown converter 'lua.nosuch'".to_string(),
        ),
        (
            format!("global\n    lua-load {good}\n{fe}    http-request use-service lua.raw\n"),
            "Lua service 'raw' is a 'tcp' service".to_string(),
        ),
        (
            format!("global\n    lua-load {good}\n{fe}    http-request use-service lua.none\n"),
            "unknown service 'lua.none'".to_string(),
        ),
        (
            "global\n    lua-prepend-path /x/?.lua sideways\n".to_string(),
            "expects 'path' or 'cpath' after the path, got 'sideways'".to_string(),
        ),
    ] {
        let (code, err) = Sluice::check(&cfg);
        assert_eq!(code, 1, "{cfg}\n{err}");
        assert!(err.contains(&want), "{cfg}\nwant: {want}\ngot: {err}");
    }
    // The good script with the tuning keywords: valid.
    let (code, err) = Sluice::check(&format!(
        "global\n    lua-prepend-path {}/?.lua\n    lua-load-per-thread {good} x\n\
\x20   tune.lua.maxmem 64\n    tune.lua.session-timeout 2s\n    tune.lua.service-timeout 3s\n\
\x20   tune.lua.task-timeout 1s\n    tune.lua.forced-yield 5000\n\
{fe}    http-request lua.tag x if {{ path /x }}\n    http-request set-var(txn.y) lua.double(2),lua.rev\n",
        dir.path().display()
    ));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_script_requires_a_module_from_the_prepended_path() {
    let dir = TempDir::new();
    dir.write(
        "helper.lua",
        "return {shout = function(s) return s:upper() .. '!' end}\n",
    );
    let main = dir.write(
        "main.lua",
        "local h = require('helper')\n\
         core.register_converters('shout', function(s) return h.shout(s) end)\n",
    );
    let port = free_port();
    let cfg = format!(
        "global\n    lua-prepend-path {}/?.lua\n    lua-load {}\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   http-request return status 200 content-type text/plain lf-string \"%[path,lua.shout]\"\n",
        dir.path().display(),
        main.display()
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(http_get(port, "/hey").body_str(), "/HEY!");
}

/// A CORS script in the style of the usual one: one action name for the request (with three
/// arguments) and for the response, a private value passed from one to the other, and a
/// preflight answered by the request action.
const CORS: &str = r#"
local function allowed(list, v)
  for item in string.gmatch(list, "[^,]+") do
    if item == "*" or item == v then return true end
  end
  return false
end
core.register_action("cors", {"http-req"}, function(txn, methods, origins, headers)
  local h = txn.http:req_get_headers()
  local origin = h["origin"] and h["origin"][0]
  txn:set_priv({origin = origin, ok = origin ~= nil and allowed(origins, origin)})
  if txn.sf:method() == "OPTIONS" and origin then
    local r = txn:reply()
    r:set_status(204, "No Content")
    r:add_header("access-control-allow-methods", methods)
    r:add_header("access-control-allow-headers", headers)
    if allowed(origins, origin) then r:add_header("access-control-allow-origin", origin) end
    txn:done(r)
  end
end, 3)
core.register_action("cors", {"http-res"}, function(txn)
  local p = txn:get_priv()
  if p and p.ok then txn.http:res_set_header("access-control-allow-origin", p.origin) end
end)
"#;

#[test]
fn one_action_name_for_request_and_response_with_a_private_value_between() {
    let dir = TempDir::new();
    let be = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "global\n    lua-load {}\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   http-request lua.cors \"GET,PUT\" \"https://a.example,https://b.example\" \"x-k\"\n\
\x20   http-response lua.cors\n    default_backend be\n\
backend be\n    server s1 {}\n",
        dir.write("cors.lua", CORS).display(),
        be.hostport()
    );
    let _s = Sluice::start(&cfg);
    // A preflight: answered by the request action.
    let r = http_raw(
        port,
        "OPTIONS /x HTTP/1.1\r\nHost: h\r\nOrigin: https://b.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-methods"), Some("GET,PUT"));
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://b.example")
    );
    assert_eq!(be.reqs(), 0);
    // A request: the response action reads what the request action kept.
    let mut c = HttpClient::connect(port);
    let r = c.request("GET /x HTTP/1.1\r\nHost: h\r\nOrigin: https://a.example\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://a.example")
    );
    // The next request on the connection is a new transaction: nothing kept from the last.
    let r = c.request("GET /y HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = c.request("GET /z HTTP/1.1\r\nHost: h\r\nOrigin: https://evil.example\r\n\r\n");
    assert_eq!(r.header("access-control-allow-origin"), None);
}
