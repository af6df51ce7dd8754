#!/usr/bin/env python3
"""Differential test of the Lua API: sluice vs HAProxy 2.6 (built with Lua 5.3) on one script.

Self-contained (standard library only), loopback only, bounded in time (a few seconds).

    python3 bench/lua_diff.py [--sluice PATH] [--haproxy PATH]

One Lua script (below) registers an `http-req` action, an `http-res` action, a fetch, a
converter and an HTTP service; one configuration uses them, with a Python origin server. Each
request of REQUESTS goes to both proxies (one connection each, `Connection: close`); the
status line, the header fields both proxies may differ on aside (`connection`, `date`,
`server`, `content-length`, `transfer-encoding`, which sluice's framing sets), and the body
are compared. Known differences (see docs/compat.md, "Lua") are printed as such; any other
difference makes the exit status 1.
"""

import argparse
import http.server
import os
import socket
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import HOST, ProxyRun, free_port  # noqa: E402

SCRIPT = r'''
core.register_action("probe", {"http-req"}, function(txn)
  local names = {}
  for n, v in pairs(txn.http:req_get_headers()) do
    names[#names + 1] = n .. "=" .. tostring(v[0]) .. "/" .. tostring(v[1])
  end
  table.sort(names)
  txn:set_var("txn.names", table.concat(names, ";"))
  txn:set_var("txn.missing", "[" .. tostring(txn.sf:req_hdr("nope")) .. "]")
  txn:set_var("txn.fmissing", "[" .. tostring(txn.f:req_hdr("nope")) .. "]")
  txn:set_var("txn.int", txn.f:req_hdr_cnt("x-a"))
  txn:set_var("txn.mtype", math.type(txn.f:req_hdr_cnt("x-a")))
  txn:set_var("txn.conv", txn.c:lower("ABC") .. txn.sc:upper("def"))
  txn:set_var("txn.path", txn.sf:path())
  local p = txn.sf:path()
  if p == "/deny" then return act.DENY end
  if p == "/abort" then return act.ABORT end
  if p == "/error" then return act.ERROR end
  if p == "/boom" then error("boom") end
  if p == "/done" then txn:done() end
  if p == "/reply" then
    local r = txn:reply({status = 418, headers = {["x-one"] = "1", ["content-type"] = "text/x"}, body = "tea"})
    r:add_header("x-two", "2")
    txn:done(r)
  end
  if p == "/set" then
    txn.http:req_set_path("/changed")
    txn.http:req_set_query("q=1")
    txn.http:req_add_header("x-added", "v")
  end
end)
core.register_action("rprobe", {"http-res"}, function(txn)
  local p = txn:get_var("txn.path")
  if p == "/rdeny" then return act.DENY end
  if p == "/rerror" then return act.ERROR end
  if p == "/rboom" then error("x") end
  if p == "/rabort" then return act.ABORT end
  if p == "/rdone" then txn:done() end
  if p == "/rreply" then txn:done(txn:reply({status = 203, body = "r"})) end
  txn.http:res_set_header("x-res", "r")
  if p == "/rstatus" then txn.http:res_set_status(299, "Fine") end
end)
core.register_fetches("f", function(txn, a, b) return (a or "-") .. (b or "-") end)
core.register_converters("c", function(s, a) return s .. "|" .. (a or "") end)
core.register_service("svc", "http", function(applet)
  local b = applet:receive()
  applet:set_status(200)
  applet:add_header("content-type", "text/plain")
  applet:add_header("x-len", applet.length)
  applet:start_response()
  applet:send(applet.method .. " " .. applet.path .. " " .. applet.qs .. " " .. applet.version .. " " .. b)
end)
'''

CONFIG = '''global
    lua-load {script}
defaults
    mode http
    timeout connect 2s
    timeout client 5s
    timeout server 5s
frontend fe
    bind 127.0.0.1:{port}
    http-request use-service lua.svc if {{ path_beg /svc }}
    http-request lua.probe
    http-request return status 200 content-type text/plain lf-string "names=%[var(txn.names)] m=%[var(txn.missing)] fm=%[var(txn.fmissing)] i=%[var(txn.int)] t=%[var(txn.mtype)] c=%[var(txn.conv)] f=%[lua.f(x,y)] f0=%[lua.f] cv=%[path,lua.c(z)]" if {{ path /info }}
    default_backend be
backend be
    http-response lua.rprobe
    server s 127.0.0.1:{origin}
'''

REQUESTS = ["/info", "/deny", "/abort", "/error", "/boom", "/done", "/reply", "/set?a=b",
            "/rdeny", "/rerror", "/rboom", "/rabort", "/rdone", "/rreply", "/rstatus", "POST /svc/p?q=1"]

# Differences measured and documented (docs/compat.md, "Lua"): path -> why.
KNOWN = {
    "/deny": "sluice's own wording of its 403 page",
    "/error": "sluice's own wording of its 500 page",
    "/rerror": "sluice's own wording of its 500 page",
    "/rdeny": "HAProxy 2.6 answers act.DENY on a response with a 200 error page; sluice with 502",
    "/rabort": "HAProxy 2.6 forwards the response and leaves the connection open; sluice closes it",
    "/rstatus": "the reason given to res_set_status is not kept (the status's usual phrase)",
}
SKIP_FIELDS = {"connection", "date", "server", "content-length", "transfer-encoding"}


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        b = ("target=%s added=%s" % (self.path, self.headers.get("x-added"))).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(b)))
        self.send_header("x-server", "s")
        self.end_headers()
        try:
            self.wfile.write(b)
        except OSError:
            pass

    def log_message(self, *a):
        pass


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # Clients (the proxies) closing first is expected here.
        pass


def fetch(port, req):
    method, path = ("GET", req) if " " not in req else req.split(" ", 1)
    body = b"body" if method == "POST" else b""
    raw = f"{method} {path} HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
    s = socket.create_connection((HOST, port))
    s.settimeout(2)
    s.sendall(raw)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except socket.timeout:
        out += b"<no end within 2 s>"
    s.close()
    return out


def normal(resp):
    """Status line, the comparable fields (sorted), and the body (chunks joined)."""
    head, _, body = resp.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    fields = sorted(l.lower() for l in lines[1:] if l.split(":")[0].lower() not in SKIP_FIELDS)
    if b"transfer-encoding: chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    return lines[0], fields, body.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--sluice", default=os.path.join(here, "..", "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="haproxy")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lua-diff-")
    script = os.path.join(tmp, "d.lua")
    open(script, "w").write(SCRIPT)
    origin = free_port()
    srv = Server((HOST, origin), Origin)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    runs, ports = [], {}
    try:
        for name, exe in (("haproxy", a.haproxy), ("sluice", a.sluice)):
            ports[name] = free_port()
            cfg = CONFIG.format(script=script, port=ports[name], origin=origin)
            runs.append(ProxyRun(name, exe, cfg, tmp))
            runs[-1].start([ports[name]])
        same = known = other = 0
        for req in REQUESTS:
            h, s = normal(fetch(ports["haproxy"], req)), normal(fetch(ports["sluice"], req))
            if h == s:
                same += 1
                continue
            path = req.split(" ")[-1]
            tag = "known" if path in KNOWN else "DIFFERENT"
            known, other = known + (tag == "known"), other + (tag != "known")
            print(f"{tag}: {req}" + (f" ({KNOWN[path]})" if path in KNOWN else ""))
            print(f"   haproxy: {h}")
            print(f"   sluice : {s}")
        print(f"{len(REQUESTS)} requests: {same} the same, {known} known differences, {other} other")
        return 1 if other else 0
    finally:
        for r in runs:
            r.stop()
        srv.shutdown()


if __name__ == "__main__":
    sys.exit(main())
