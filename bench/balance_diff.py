#!/usr/bin/env python3
"""Differential test of server selection (`balance`, `hash-type`, weights, backup) and of
access-log lines (`option httplog` / `option tcplog`, syslog over UDP and `log stdout`):
sluice vs HAProxy 2.6, same config, same requests.

Self-contained (Python 3 standard library only), loopback only, bounded in time, light
(one request at a time, one connection per request).

    python3 bench/balance_diff.py [--sluice target/release/sluice] [--haproxy /usr/sbin/haproxy]
                                  [--runs 2] [--only SUBSTR] [--no-logs] [--no-balance] [-v]

What it does:
  * starts 7 raw-socket origin servers s1..s7 on 127.0.0.1 that answer every request with
    `X-Server: sN` (404 for paths starting with /404, to get a 404 in the logs);
  * for each backend config (every `balance` algorithm, both hash types for the hash-based
    ones, weights, uri options, url_param, hdr(), source with client sockets bound to
    127.x.y.z, backup servers): writes one config, checks it with `-c` on both programs,
    then for each program (one after the other, so they never share the origins at the
    same time) starts it, sends the same request sequence, records which server answered
    each request, stops it. This is repeated --runs times; a program that does not give
    the same answers in every run makes the config "unstable" instead of a difference;
  * compares:
      hash algorithms: key -> server must be identical. "edge" keys (a missing parameter,
      a header without value, UTF-8 bytes, ...) are sent 5 times in a row: if the answers
      vary the key was not hashed (round-robin fallback), which is what is compared then;
      roundrobin / static-rr / backup: the sequence of servers (and whether it is only
      shifted, i.e. the same cycle from another starting offset);
      leastconn / first / random: the distribution only (random: within sampling noise);
    for hash configs, a small reference model of HAProxy 2.6's selection (map and
    consistent-hash ring, full_hash, implicit avalanche) is also evaluated on the main
    keys, with variants, to say which implementation detail explains each program's
    answers ("model:" lines; diagnosis only, the verdict is the direct comparison);
  * logs: a frontend with `option httplog`, `log 127.0.0.1:UDPPORT local0` and
    `log stdout format raw local0`; requests giving 200, 404 (from the server), 503 (no
    server up), 503/502 (connection refused), 400 (malformed), 408 (incomplete request),
    and an empty connection; three `mode tcp` frontends with `option tcplog`. The UDP
    datagrams and stdout lines are captured, split into syslog header + message, masked
    (pid, timestamps, client ports, timers) and compared field by field;
  * prints a summary per config. Exit status 0 when no difference, 1 otherwise.
"""

import argparse
import collections
import math
import os
import random
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import (  # noqa: E402
    HOST, Listener, check_config, free_port, listening_ports, stop_process)
NORIGINS = 7
EDGE_REPEAT = 5
VERBOSE = False


def vprint(*a):
    if VERBOSE:
        print(*a, flush=True)


# ==========================================================================
# origin servers
# ==========================================================================

class Origin(Listener):
    """Raw-socket threaded HTTP origin: reads one request head (and a Content-Length body),
    answers with a fixed response naming itself, closes."""

    def __init__(self, name):
        self.name = name
        super().__init__()

    def on_accept(self, c):
        threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            c.settimeout(5)
            buf = b""
            while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
                if len(buf) > 1 << 20:
                    return
            first = buf.split(b"\n", 1)[0]
            parts = first.split()
            path = parts[1] if len(parts) > 1 else b"/"
            if b"://" in path:
                rest = path.split(b"://", 1)[1]
                path = b"/" + rest.split(b"/", 1)[1] if b"/" in rest else b"/"
            status = b"404 Not Found" if path.startswith(b"/404") else b"200 OK"
            body = self.name.encode() + b"\n"
            resp = (b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain\r\n"
                    b"X-Server: " + self.name.encode() + b"\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n"
                    b"Connection: close\r\n\r\n" + body)
            c.sendall(resp)
            try:
                c.shutdown(socket.SHUT_WR)
                # drain what is left (a body) so that close() does not send an RST
                c.settimeout(0.5)
                while c.recv(65536):
                    pass
            except OSError:
                pass
        except OSError:
            pass
        finally:
            c.close()


# ==========================================================================
# running a proxy
# ==========================================================================

class Proxy:
    def __init__(self, kind, binary, cfg_text, workdir, tag):
        self.kind = kind
        self.binary = binary
        self.cfg = os.path.join(workdir, f"{tag}-{kind}.cfg")
        with open(self.cfg, "w") as f:
            f.write(cfg_text)
        self.proc = None
        self.out = []
        self.err = []

    def check(self):
        return check_config(self.binary, self.cfg)

    def _reader(self, stream, sink):
        for line in iter(stream.readline, b""):
            sink.append((time.time(), line.rstrip(b"\n")))
        stream.close()

    def start(self, ports):
        self.proc = subprocess.Popen([self.binary, "-db", "-f", self.cfg],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        self.t_out = threading.Thread(target=self._reader, args=(self.proc.stdout, self.out),
                                      daemon=True)
        self.t_err = threading.Thread(target=self._reader, args=(self.proc.stderr, self.err),
                                      daemon=True)
        self.t_out.start()
        self.t_err.start()
        # readiness: wait until every port is in LISTEN state (read from /proc/net/tcp, so
        # that no probe connection shows up in the access logs)
        deadline = time.time() + 10
        pending = set(ports)
        while pending and time.time() < deadline:
            if self.proc.poll() is not None:
                break
            pending -= listening_ports()
            if pending:
                time.sleep(0.05)
        time.sleep(0.1)
        if pending:
            self.stop()
            raise RuntimeError(f"{self.kind} did not start: "
                               + b"\n".join(l for _, l in self.err[-20:]).decode("utf-8", "replace"))

    def stop(self):
        stop_process(self.proc)
        if self.proc:
            self.t_out.join(2)
            self.t_err.join(2)


# ==========================================================================
# client
# ==========================================================================

def raw_exchange(port, data, src=None, timeout=4.0, close_after_send=False):
    """Sends `data` on a new connection (bound to `src` if given) and reads until the peer
    closes. Returns the raw response bytes, or None on a connection error."""
    s = socket.socket()
    try:
        if src:
            s.bind((src, 0))
        s.settimeout(timeout)
        s.connect((HOST, port))
        if data:
            s.sendall(data)
        if close_after_send:
            s.shutdown(socket.SHUT_WR)
        buf = b""
        while True:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not d:
                break
            buf += d
        return buf
    except OSError:
        return None
    finally:
        s.close()


def parse_resp(raw):
    if raw is None:
        return ("ERR", None)
    if not raw:
        return ("EMPTY", None)
    head = raw.split(b"\r\n\r\n", 1)[0]
    lines = head.split(b"\r\n")
    parts = lines[0].split()
    status = parts[1].decode() if len(parts) > 1 else "?"
    srv = None
    for l in lines[1:]:
        if l.lower().startswith(b"x-server:"):
            srv = l.split(b":", 1)[1].strip().decode()
    return (status, srv)


class Req:
    """One request of a sequence. `key` is what the comparison is keyed on."""

    def __init__(self, key, target="/", headers=None, src=None, edge=False, version="HTTP/1.1",
                 method="GET"):
        self.key = key
        self.method = method
        self.target = target
        self.headers = headers if headers is not None else [b"Host: test.example"]
        self.src = src
        self.edge = edge
        self.version = version

    def bytes(self):
        t = self.target if isinstance(self.target, bytes) else self.target.encode()
        return (self.method.encode() + b" " + t + b" " + self.version.encode() + b"\r\n"
                + b"".join(h + b"\r\n" for h in self.headers)
                + b"Connection: close\r\n\r\n")


def send(port, req):
    return parse_resp(raw_exchange(port, req.bytes(), src=req.src))


# ==========================================================================
# key generators (deterministic)
# ==========================================================================

WORDS = ["api", "img", "static", "v1", "v2", "users", "items", "cart", "search", "css",
         "js", "assets", "blog", "2024", "news", "a", "b", "x", "data", "files"]


def gen_uris(n, seed):
    r = random.Random(seed)
    out = set()
    while len(out) < n:
        depth = r.randint(0, 5)
        segs = [r.choice(WORDS) if r.random() < 0.6 else
                "".join(r.choice("abcdefghijklmnopqrstuvwxyz0123456789-_.")
                        for _ in range(r.randint(1, 10)))
                for _ in range(depth)]
        u = "/" + "/".join(segs)
        if r.random() < 0.3:
            u += "/"
        if r.random() < 0.4:
            u += "?" + "&".join(f"{r.choice(WORDS)}={r.randint(0, 999)}"
                                for _ in range(r.randint(1, 3)))
        out.add(u)
    return sorted(out)


def gen_names(n, seed, prefix=""):
    r = random.Random(seed)
    out = set()
    while len(out) < n:
        out.add(prefix + "".join(r.choice("abcdefghijklmnopqrstuvwxyz0123456789")
                                 for _ in range(r.randint(1, 14))))
    return sorted(out)


def gen_hosts(n, seed):
    r = random.Random(seed)
    out = set()
    tlds = ["com", "org", "net", "io", "co.uk", "example"]
    while len(out) < n:
        labels = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz0123456789-")
                          for _ in range(r.randint(1, 10))).strip("-") or "h"
                  for _ in range(r.randint(0, 3))]
        h = ".".join(labels + [r.choice(WORDS), r.choice(tlds)])
        if r.random() < 0.15:
            h += f":{r.randint(80, 9000)}"
        out.add(h)
    return sorted(out)


def gen_sources(n, seed):
    r = random.Random(seed)
    out = set()
    while len(out) < n:
        a = f"127.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"
        out.add(a)
    return sorted(out, key=lambda a: tuple(int(x) for x in a.split(".")))


def reqs_uri(n=200, absolute=False, get_star=False):
    out = []
    for i, u in enumerate(gen_uris(n, 1)):
        if absolute and i % 2 == 0:
            h = f"h{i % 7}.example.com"
            out.append(Req(f"http://{h}{u}", f"http://{h}{u}", [f"Host: {h}".encode()]))
        else:
            out.append(Req(u, u))
    edges = ["/", "/a", "/A", "//a//b", "/a/b/c/d/e/f/g/h", "/%7Euser/x", "/a?", "/?x=1",
             "/a/b?c/d", "/a;p=1/b", "/" + "x" * 300, "/a/b/"]
    for e in edges:
        out.append(Req("edge " + e, e, edge=True))
    if get_star:
        out.append(Req("edge GET *", "*", edge=True))
    out.append(Req("edge OPTIONS *", "*", edge=True, method="OPTIONS"))
    out.append(Req("edge http://Abs.Example.com:8080/p/q?r=1",
                   "http://Abs.Example.com:8080/p/q?r=1", [b"Host: Abs.Example.com:8080"],
                   edge=True))
    out.append(Req("edge https://s.example.com/p/q", "https://s.example.com/p/q",
                   [b"Host: s.example.com"], edge=True))
    return out


def reqs_url_param(n=200):
    out = []
    r = random.Random(7)
    for i, name in enumerate(gen_names(n, 2)):
        k = i % 4
        if k == 0:
            t = f"/p?user={name}"
        elif k == 1:
            t = f"/p/q?a=1&user={name}"
        elif k == 2:
            t = f"/p?user={name}&b={r.randint(0, 99)}"
        else:
            t = f"/?x=y&user={name}&z=1"
        out.append(Req(f"user={name}", t))
    edges = ["/p?user", "/p?user=", "/p?USER=bob", "/p?xuser=bob", "/p?user=bob&user=alice",
             "/p?user=bob;x=1", "/p?user=bob%20x", "/p?&user=bob", "/p?user=bob&", "/p",
             "/p?a=1", "/p?user=bob#frag", "/p?user==bob", "/p?a=1?user=bob",
             "http://h.example.com/p?user=bob"]
    for e in edges:
        h = [b"Host: h.example.com"] if e.startswith("http:") else None
        out.append(Req("edge " + e, e, h, edge=True))
    return out


def reqs_hdr_user(n=200):
    out = []
    for name in gen_names(n, 3):
        out.append(Req(f"X-User: {name}", "/h", [b"Host: test.example",
                                                 b"X-User: " + name.encode()]))
    edges = [
        ("X-User: jos\u00e9 (UTF-8)", [b"X-User: jos\xc3\xa9"]),
        ("X-User: Zo\u00eb (UTF-8)", [b"X-User: Zo\xc3\xab"]),
        ("X-User: \\xff\\xfe (bytes >= 0x80)", [b"X-User: \xff\xfe"]),
        ("X-User: a,b", [b"X-User: a,b"]),
        ("X-User: a, b", [b"X-User: a, b"]),
        ("X-User: a (for comparison)", [b"X-User: a"]),
        ("X-User: a + X-User: b (two headers)", [b"X-User: a", b"X-User: b"]),
        ("x-user: bob (lower-case name)", [b"x-user: bob"]),
        ("X-User: bob (for comparison)", [b"X-User: bob"]),
        ("X-User:    bob    (spaces)", [b"X-User:    bob    "]),
        ("X-User: \"b,c\" (quoted comma)", [b"X-User: \"b,c\""]),
        ("X-User: (empty)", [b"X-User:"]),
        ("no X-User", []),
    ]
    for k, hs in edges:
        out.append(Req("edge " + k, "/h", [b"Host: test.example"] + hs, edge=True))
    return out


def reqs_hdr_host(n=200):
    out = []
    for h in gen_hosts(n, 4):
        out.append(Req(f"Host: {h}", "/", [f"Host: {h}".encode()]))
    edges = [
        ("Host: example.com", "/", [b"Host: example.com"], "HTTP/1.1"),
        ("Host: Example.COM", "/", [b"Host: Example.COM"], "HTTP/1.1"),
        ("Host: example.com:8080", "/", [b"Host: example.com:8080"], "HTTP/1.1"),
        ("Host: example.com.", "/", [b"Host: example.com."], "HTTP/1.1"),
        ("absolute-form http://abs.example.com/ + same Host", "http://abs.example.com/",
         [b"Host: abs.example.com"], "HTTP/1.1"),
        ("Host: abs.example.com (for comparison)", "/", [b"Host: abs.example.com"], "HTTP/1.1"),
        ("HTTP/1.0 no Host", "/", [], "HTTP/1.0"),
        ("Host: www.b\u00fccher.de (UTF-8)", "/", [b"Host: www.b\xc3\xbccher.de"], "HTTP/1.1"),
        ("Host: localhost", "/", [b"Host: localhost"], "HTTP/1.1"),
        ("Host: localhost:8080", "/", [b"Host: localhost:8080"], "HTTP/1.1"),
        ("Host: 127.0.0.1:8080", "/", [b"Host: 127.0.0.1:8080"], "HTTP/1.1"),
        ("Host: [::1]:8080", "/", [b"Host: [::1]:8080"], "HTTP/1.1"),
        ("Host: www.example.com:8080", "/", [b"Host: www.example.com:8080"], "HTTP/1.1"),
        ("Host: a.b.c.d.example.co.uk", "/", [b"Host: a.b.c.d.example.co.uk"], "HTTP/1.1"),
    ]
    for k, t, hs, v in edges:
        out.append(Req("edge " + k, t, hs, edge=True, version=v))
    return out


def reqs_source(n=200):
    out = [Req(f"src {a}", "/", src=a) for a in gen_sources(n, 5)]
    for a in ["127.0.0.1", "127.0.0.2", "127.255.255.254", "127.1.0.0"]:
        out.append(Req(f"edge src {a}", "/", src=a, edge=True))
    return out


def reqs_plain(n):
    return [Req(f"#{i}", f"/r{i}") for i in range(n)]



# ==========================================================================
# reference model of HAProxy 2.6's hash-based selection (diagnosis only: it says which
# implementation detail explains each program's answers; the verdict is the comparison)
# ==========================================================================

M32 = 0xffffffff


def full_hash(a, mult=True):
    """HAProxy's full_hash (tools.h): Bob Jenkins' integer hash, then (2.x) multiplied by
    3221225473 "to better spread values all around the tree"."""
    a = (a + 0x7ed55d16 + (a << 12)) & M32
    a = (a ^ 0xc761c23c) ^ (a >> 19)
    a = (a + 0x165667b1 + (a << 5)) & M32
    a = ((a + 0xd3a2646c) & M32) ^ ((a << 9) & M32)
    a = (a + 0xfd7046c5 + (a << 3)) & M32
    a = (a ^ 0xb55a4f09) ^ (a >> 16)
    return (a * 3221225473) & M32 if mult else a & M32


def h_sdbm(b):
    h = 0
    for c in b:
        h = (c + (h << 6) + (h << 16) - h) & M32
    return h


def h_djb2(b):
    h = 5381
    for c in b:
        h = (h * 33 + c) & M32
    return h


def haproxy_map(weights):
    """recalc_server_map(): server index per slot, eweight = weight * 16."""
    ew = [w * 16 for w in weights]
    tot = sum(ew)
    score = [0] * len(ew)
    out = []
    for _ in range(tot):
        best, mx = None, 0
        for i, e in enumerate(ew):
            if e == 0:
                continue
            score[i] += e
            v = int((score[i] + tot) / tot)
            if best is None or v > mx:
                best, mx = i, v
        out.append(best)
        score[best] -= tot
    return out


class HashModel:
    def __init__(self, balance, hashtype, weights):
        self.balance = balance
        words = hashtype.split()
        self.method = words[0] if words else "map-based"
        self.function = words[1] if len(words) > 1 and words[1] != "avalanche" else None
        self.avalanche = "avalanche" in words
        self.weights = weights
        self.map = haproxy_map(weights)
        self._rings = {}

    def ring(self, mult):
        if mult not in self._rings:
            r = []
            for i, w in enumerate(self.weights):
                for node in range(w * 16):
                    r.append((full_hash((i + 1) * 4096 + node, mult), i))
            r.sort()
            self._rings[mult] = r
        return self._rings[mult]

    def key(self, req):
        """The bytes (or int for source) HAProxy hashes for a well-formed main request."""
        b = self.balance
        t = req.target if isinstance(req.target, bytes) else req.target.encode()
        if b == "source":
            return sum(int(x) << (8 * (3 - i)) for i, x in enumerate(req.src.split(".")))
        if b.startswith("uri"):
            opts = b.split()[1:]
            whole = "whole" in opts
            ln = int(opts[opts.index("len") + 1]) if "len" in opts else 0
            depth = int(opts[opts.index("depth") + 1]) + 1 if "depth" in opts else 0
            if "path-only" in opts and b"://" in t:
                rest = t.split(b"://", 1)[1]
                t = rest[rest.index(b"/"):] if b"/" in rest else b""
            if ln:
                t = t[:ln]
            end, slashes = 0, 0
            while end < len(t):
                c = t[end:end + 1]
                if c == b"/":
                    slashes += 1
                    if slashes == depth:
                        break
                elif c == b"?" and not whole:
                    break
                end += 1
            return t[:end]
        if b.startswith("url_param"):
            name = b.split()[1].encode()
            q = t.split(b"?", 1)[1]
            for kv in q.split(b"&"):
                if kv.startswith(name + b"="):
                    return kv[len(name) + 1:]
            return None
        if b.startswith("hdr("):
            hname = b[4:b.index(")")].lower().encode()
            val = None
            for h in req.headers:
                n, v = h.split(b":", 1)
                if n.strip().lower() == hname:
                    val = v.strip()
                    break
            if val is None:
                return None
            if "use_domain_only" in b:
                # get_server_hh(): walk back from the end; the first '.' ends the domain,
                # the next one starts it; position 0 is never examined
                p, ln, end, dohash = len(val), len(val), len(val), False
                while ln:
                    if dohash:
                        if val[p - 1:p] == b".":
                            break
                    elif p < len(val) and val[p:p + 1] == b".":
                        end, dohash = p, True
                    p -= 1
                    ln -= 1
                return val[p:end]
            return val
        return None

    def pick(self, req, mult=True, implicit_aval=True):
        k = self.key(req)
        if k is None:
            return None
        if isinstance(k, int):
            h = k
        else:
            h = h_djb2(k) if self.function == "djb2" else h_sdbm(k)
        aval = self.avalanche or (implicit_aval and self.method == "consistent"
                                  and self.function is None)
        if aval:
            h = full_hash(h, mult)
        if self.method == "consistent":
            import bisect
            r = self.ring(mult)
            keys = [x for x, _ in r]
            n = len(r)
            nx = bisect.bisect_left(keys, h)
            nx = 0 if nx == n else nx
            pv = nx - 1 if nx > 0 else n - 1
            dp, dn = (h - r[pv][0]) & M32, (r[nx][0] - h) & M32
            return "s%d" % ((r[pv][1] if dp <= dn else r[nx][1]) + 1)
        return "s%d" % (self.map[h % len(self.map)] + 1)


MODEL_VARIANTS = [
    ("HAProxy 2.6", dict(mult=True, implicit_aval=True)),
    ("full_hash without the *3221225473 step", dict(mult=False, implicit_aval=True)),
    ("no implicit avalanche for a bare 'hash-type consistent'", dict(mult=True, implicit_aval=False)),
    ("both of the above", dict(mult=False, implicit_aval=False)),
]


def model_lines(case, reqs, results):
    """Which model variant explains each program's answers to the main keys."""
    main = [r for r in reqs if not r.edge]
    out = []
    for kind in ("haproxy", "sluice"):
        got = by_key(results[kind][0])
        scores = []
        for vname, kw in MODEL_VARIANTS:
            ok = sum(1 for r in main if got.get(r.key) and case.model.pick(r, **kw) == got[r.key][0][1])
            scores.append((ok, vname))
        best = max(scores)
        hap = scores[0][0]
        txt = f"  model: {kind} matches {hap}/{len(main)} of the HAProxy 2.6 model"
        if best[0] > hap:
            txt += f"; best variant: {best[1]} ({best[0]}/{len(main)})"
        out.append(txt)
    return out


# ==========================================================================
# configs
# ==========================================================================

W4 = [1, 2, 3, 5]
EQ4 = [1, 1, 1, 1]
W7 = [1, 2, 3, 5, 8, 13, 21]


def server_lines(origins, weights, extra=None, backup=()):
    lines = []
    for i, w in enumerate(weights):
        o = origins[i]
        opts = f" weight {w}" if w is not None else ""
        if extra and extra.get(i):
            opts += " " + extra[i]
        if i in backup:
            opts += " backup"
        lines.append(f"    server {o.name} {HOST}:{o.port}{opts}")
    return "\n".join(lines)


def balance_config(port, backend_body):
    return f"""global
    maxconn 2000

defaults
    mode http
    timeout connect 2s
    timeout client 5s
    timeout server 5s
    timeout http-request 3s

frontend fe
    bind {HOST}:{port}
    default_backend be

backend be
{backend_body}
"""


class Case:
    def __init__(self, name, body, reqs, mode, note="", model=None):
        self.model = model        # HashModel for hash cases (diagnosis only)
        self.name = name
        self.body = body          # function(origins) -> backend body text
        self.reqs = reqs          # function() -> list of Req
        self.mode = mode          # "hash" | "seq" | "dist" | "dist-exact" | "random"
        self.note = note


def make_cases():
    cases = []

    def simple(balance, weights, extra_lines="", extra=None, backup=()):
        def f(origins):
            return (f"    balance {balance}\n" + (extra_lines and extra_lines + "\n")
                    + server_lines(origins, weights, extra, backup))
        return f

    # --- sequence-based
    cases.append(Case("roundrobin w=1,1,1,1", simple("roundrobin", EQ4), lambda: reqs_plain(48), "seq"))
    cases.append(Case("roundrobin w=1,2,3,5", simple("roundrobin", W4), lambda: reqs_plain(66), "seq"))
    cases.append(Case("roundrobin w=1,2,3,5,8,13,21", simple("roundrobin", W7), lambda: reqs_plain(106), "seq"))
    cases.append(Case("roundrobin w=0,2,3,5 (weight 0)", simple("roundrobin", [0, 2, 3, 5]),
                      lambda: reqs_plain(40), "seq"))
    # fwrr's integer steps: weights 2,3,3 repeat every 127 turns, not 128
    cases.append(Case("roundrobin w=2,3,3 (period 127)", simple("roundrobin", [2, 3, 3]),
                      lambda: reqs_plain(300), "seq"))
    cases.append(Case("roundrobin w=3,1,3,2,2,1 (equal weights)", simple("roundrobin", [3, 1, 3, 2, 2, 1]),
                      lambda: reqs_plain(400), "seq"))
    cases.append(Case("static-rr w=1,1,1,1", simple("static-rr", EQ4), lambda: reqs_plain(48), "seq"))
    cases.append(Case("static-rr w=1,2,3,5", simple("static-rr", W4), lambda: reqs_plain(66), "seq"))
    cases.append(Case("static-rr w=1,2,3,5,8,13,21", simple("static-rr", W7), lambda: reqs_plain(106), "seq"))
    # --- backup servers
    cases.append(Case("backup: 3 actives disabled, 1 backup",
                      simple("roundrobin", [1, 1, 1, 1], extra={0: "disabled", 1: "disabled", 2: "disabled"},
                             backup=(3,)), lambda: reqs_plain(12), "seq"))
    cases.append(Case("backup: actives disabled, 2 backups (no allbackups)",
                      simple("roundrobin", [1, 1, 1, 2], extra={0: "disabled", 1: "disabled"},
                             backup=(2, 3)), lambda: reqs_plain(12), "seq"))
    cases.append(Case("backup: actives disabled, 2 backups + option allbackups",
                      simple("roundrobin", [1, 1, 1, 2], "    option allbackups",
                             extra={0: "disabled", 1: "disabled"}, backup=(2, 3)),
                      lambda: reqs_plain(24), "seq"))
    cases.append(Case("backup: 1 active up + backup",
                      simple("roundrobin", [1, 1, 1, 1], extra={0: "disabled", 1: "disabled"},
                             backup=(3,)), lambda: reqs_plain(12), "seq"))
    cases.append(Case("backup: uri hash, actives disabled, 2 backups + allbackups",
                      simple("uri", [1, 2, 3, 5], "    option allbackups",
                             extra={0: "disabled", 1: "disabled"}, backup=(2, 3)),
                      lambda: reqs_uri(100), "hash"))
    # --- distribution only
    cases.append(Case("leastconn w=1,2,3,5", simple("leastconn", W4), lambda: reqs_plain(100), "dist"))
    cases.append(Case("leastconn w=1,1,1,1", simple("leastconn", EQ4), lambda: reqs_plain(100), "dist"))
    cases.append(Case("first w=1,2,3,5", simple("first", W4), lambda: reqs_plain(50), "dist"))
    cases.append(Case("first w=1,2,3,5 maxconn 1", simple("first", W4, extra={i: "maxconn 1" for i in range(4)}),
                      lambda: reqs_plain(50), "dist"))
    cases.append(Case("random w=1,2,3,5", simple("random", W4), lambda: reqs_plain(400), "random"))
    cases.append(Case("random(1) w=1,2,3,5", simple("random(1)", W4), lambda: reqs_plain(400), "random"))
    # --- hash-based, both hash types
    hashed = [
        ("source", lambda: reqs_source(200), W4),
        ("uri", lambda: reqs_uri(200), W4),
        ("uri", lambda: reqs_uri(200), W7),
        ("uri whole", lambda: reqs_uri(200), W4),
        ("uri len 8", lambda: reqs_uri(200), W4),
        ("uri depth 2", lambda: reqs_uri(200), W4),
        ("uri path-only", lambda: reqs_uri(200, absolute=True), W4),
        ("uri whole len 12 depth 3", lambda: reqs_uri(200), W4),
        ("url_param user", lambda: reqs_url_param(200), W4),
        ("hdr(X-User)", lambda: reqs_hdr_user(200), W4),
        ("hdr(Host)", lambda: reqs_hdr_host(200), W4),
        ("hdr(host) use_domain_only", lambda: reqs_hdr_host(200), W4),
    ]
    for bal, rq, w in hashed:
        for ht in ("map-based", "consistent"):
            ws = ",".join(map(str, w))
            cases.append(Case(f"balance {bal} / hash-type {ht} w={ws}",
                              simple(bal, w, f"    hash-type {ht}"), rq, "hash",
                              model=HashModel(bal, ht, w)))
    # default hash-type (no hash-type line) and the non-default functions, for reference
    cases.append(Case("balance uri / no hash-type line w=1,2,3,5", simple("uri", W4),
                      lambda: reqs_uri(200, get_star=True), "hash", model=HashModel("uri", "", W4)))
    for bal, ht, rq in (("uri", "map-based sdbm avalanche", lambda: reqs_uri(200)),
                        ("uri", "consistent sdbm", lambda: reqs_uri(200)),
                        ("uri", "consistent djb2", lambda: reqs_uri(200)),
                        ("hdr(X-User)", "consistent djb2", lambda: reqs_hdr_user(200))):
        cases.append(Case(f"balance {bal} / hash-type {ht} w=1,2,3,5",
                          simple(bal, W4, f"    hash-type {ht}"), rq, "hash",
                          model=HashModel(bal, ht, W4)))
    return cases


# ==========================================================================
# running a case
# ==========================================================================

def run_sequence(kind, binary, cfg_text, workdir, tag, port, reqs):
    p = Proxy(kind, binary, cfg_text, workdir, tag)
    p.start([port])
    res = []
    try:
        for r in reqs:
            n = EDGE_REPEAT if r.edge else 1
            for _ in range(n):
                res.append((r.key, send(port, r)))
    finally:
        p.stop()
    return res, p


def summarize_edge(answers):
    """answers: list of (status, srv) for one edge key sent EDGE_REPEAT times."""
    sts = sorted(set(a[0] for a in answers))
    srvs = [a[1] for a in answers]
    if sts != ["200"]:
        return "status " + "/".join(sts) + ("" if len(set(srvs)) <= 1 else " servers " + ",".join(str(s) for s in srvs))
    if len(set(srvs)) == 1:
        return f"hashed -> {srvs[0]}"
    return "not hashed (varies: " + ",".join(srvs) + ")"


def by_key(res):
    d = collections.OrderedDict()
    for k, a in res:
        d.setdefault(k, []).append(a)
    return d


def rotation(a, b):
    """Smallest k such that b == a shifted by k (b[i] == a[i+k]) over the common part; None."""
    n = len(a)
    for k in range(1, n // 2):
        if all(b[i] == a[i + k] for i in range(n - k)):
            return k
    for k in range(1, n // 2):
        if all(a[i] == b[i + k] for i in range(n - k)):
            return -k
    return None


def fmt_seq(seq, n=24):
    return " ".join((s or "-").replace("s", "") for s in seq[:n]) + (" ..." if len(seq) > n else "")


def compare_case(case, results):
    """results: {kind: [run results]}. Returns (status, lines)."""
    lines = []
    # stability of each program across runs
    unstable = []
    for kind, runs in results.items():
        if case.mode in ("hash", "seq", "dist-exact"):
            base = runs[0]
            for r in runs[1:]:
                if case.mode == "hash":
                    a = {k: summarize_edge(v) if len(v) > 1 else v[0] for k, v in by_key(base).items()}
                    b = {k: summarize_edge(v) if len(v) > 1 else v[0] for k, v in by_key(r).items()}
                    # an edge key that is not hashed may vary between runs in its servers
                    diff = [k for k in a if a[k] != b.get(k)
                            and not (str(a[k]).startswith("not hashed") and str(b.get(k)).startswith("not hashed"))]
                    if diff:
                        unstable.append(f"{kind}: {len(diff)} keys differ between runs, e.g. {diff[0]}: {a[diff[0]]} vs {b[diff[0]]}")
                elif [x for _, x in r] != [x for _, x in base]:
                    unstable.append(f"{kind}: sequence differs between runs")
    h = results["haproxy"][0]
    s = results["sluice"][0]
    errs = {kind: [(k, a) for k, a in results[kind][0] if a[0] not in ("200",)] for kind in results}
    if case.mode == "hash":
        hk, sk = by_key(h), by_key(s)
        main_diff = []
        edge_rows = []
        nmain = 0
        for k in hk:
            ha, sa = hk[k], sk.get(k, [])
            if len(ha) == 1:
                nmain += 1
                if ha[0] != (sa[0] if sa else None):
                    main_diff.append((k, ha[0], sa[0] if sa else None))
            else:
                he, se = summarize_edge(ha), summarize_edge(sa)
                same = he == se or (he.startswith("not hashed") and se.startswith("not hashed"))
                edge_rows.append((k, he, se, same))
        if main_diff:
            lines.append(f"  {len(main_diff)}/{nmain} keys go to a different server:")
            for k, ha, sa in main_diff[:6]:
                kk = k if len(k) < 70 else k[:45] + f"...({len(k)} chars)"
                lines.append(f"    {kk!r}: haproxy {ha[1] or ha[0]}  sluice {(sa[1] or sa[0]) if sa else '?'}")
        else:
            lines.append(f"  {nmain}/{nmain} keys: same server")
        hd = collections.Counter(a[0][1] for k, a in hk.items() if len(a) == 1)
        sd = collections.Counter(a[0][1] for k, a in sk.items() if len(a) == 1)
        lines.append("  distribution haproxy " + dist_str(hd) + " | sluice " + dist_str(sd))
        ediff = [r for r in edge_rows if not r[3]]
        for k, he, se, same in ediff:
            kk = k[5:] if len(k) < 70 else k[5:50] + f"...({len(k) - 5} chars)"
            lines.append(f"    EDGE {kk!r}: haproxy {he} | sluice {se}")
        nsame = len(edge_rows) - len(ediff)
        if edge_rows:
            lines.append(f"  edge keys: {nsame}/{len(edge_rows)} same")
        differs = bool(main_diff or ediff)
    elif case.mode == "seq":
        hs = [a[1] for _, a in h]
        ss = [a[1] for _, a in s]
        if hs == ss:
            lines.append(f"  same sequence ({len(hs)} requests): {fmt_seq(hs)}")
            differs = False
        else:
            differs = True
            rot = rotation(hs, ss)
            hd, sd = collections.Counter(hs), collections.Counter(ss)
            if rot is not None:
                lines.append(f"  same cycle, other starting offset ({rot:+d})")
            else:
                lines.append("  different sequence")
            lines.append(f"    haproxy: {fmt_seq(hs, 33)}")
            lines.append(f"    sluice : {fmt_seq(ss, 33)}")
            lines.append("    distribution haproxy " + dist_str(hd) + " | sluice " + dist_str(sd))
    else:
        hs = [a[1] for _, a in h]
        ss = [a[1] for _, a in s]
        hd, sd = collections.Counter(hs), collections.Counter(ss)
        lines.append("  distribution haproxy " + dist_str(hd) + " | sluice " + dist_str(sd))
        if case.mode == "random":
            # two-sample test per server on the proportions; flag beyond 4 sigma
            n1, n2 = len(hs), len(ss)
            worst = 0.0
            for k in set(hd) | set(sd):
                p1, p2 = hd[k] / n1, sd[k] / n2
                p = (hd[k] + sd[k]) / (n1 + n2)
                sig = math.sqrt(max(p * (1 - p) * (1 / n1 + 1 / n2), 1e-12))
                worst = max(worst, abs(p1 - p2) / sig)
            differs = worst > 4.0
            lines.append(f"  largest deviation {worst:.1f} sigma (flagged above 4)")
        else:
            differs = hd != sd
            if differs:
                lines.append(f"    haproxy seq: {fmt_seq(hs, 30)}")
                lines.append(f"    sluice  seq: {fmt_seq(ss, 30)}")
    for kind in ("haproxy", "sluice"):
        e = errs[kind]
        if e and case.mode != "hash":
            lines.append(f"  {kind}: {len(e)} non-200 answers, e.g. {e[0]}")
    if unstable:
        lines.extend("  UNSTABLE " + u for u in unstable)
        return ("UNSTABLE", lines)
    return ("DIFF" if differs else "same", lines)


def dist_str(c):
    return " ".join(f"{k}:{c[k]}" for k in sorted(c, key=lambda x: (x is None, str(x))))


def run_balance(args, origins, workdir):
    cases = make_cases()
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    summary = []
    for ci, case in enumerate(cases):
        t0 = time.time()
        body = case.body(origins)
        reqs = case.reqs()
        results = {"haproxy": [], "sluice": []}
        skip = None
        for kind, binary in (("haproxy", args.haproxy), ("sluice", args.sluice)):
            port = free_port()
            cfg = balance_config(port, body)
            p = Proxy(kind, binary, cfg, workdir, f"case{ci}")
            rc, out = p.check()
            if rc != 0:
                skip = f"{kind} -c rejects the config (rc {rc}): {out.strip()[:300]}"
                break
        if skip:
            summary.append((case.name, "REJECTED", ["  " + skip], body))
            print(f"[{case.name}] REJECTED: {skip}", flush=True)
            continue
        for run in range(args.runs):
            for kind, binary in (("haproxy", args.haproxy), ("sluice", args.sluice)):
                port = free_port()
                cfg = balance_config(port, body)
                res, _ = run_sequence(kind, binary, cfg, workdir, f"case{ci}", port, reqs)
                results[kind].append(res)
        status, lines = compare_case(case, results)
        if case.model is not None:
            try:
                lines += model_lines(case, reqs, results)
            except Exception as e:  # diagnosis only
                lines.append(f"  model: error {e!r}")
        summary.append((case.name, status, lines, body))
        print(f"[{case.name}] {status} ({time.time() - t0:.1f}s)", flush=True)
        if VERBOSE or status != "same":
            for l in lines:
                print(l, flush=True)
    return summary


# ==========================================================================
# logs
# ==========================================================================

SYSLOG_RE = re.compile(rb"^<(\d+)>([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?:(\S+) )?([^\s\[:]+)\[(\d+)\]: (.*)$", re.S)


class UdpCollector:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.msgs = []
        self.running = True
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while self.running:
            r, _, _ = select.select([self.sock], [], [], 0.1)
            if r:
                d, _ = self.sock.recvfrom(65536)
                self.msgs.append((time.time(), d))

    def close(self):
        self.running = False
        self.t.join(1)
        self.sock.close()


def log_config(ports, udp, origins, dead_port):
    o = origins[0]
    return f"""global
    maxconn 2000

defaults
    timeout connect 500ms
    timeout client 5s
    timeout server 5s
    timeout http-request 1s

frontend fe_http
    mode http
    bind {HOST}:{ports['http']}
    option httplog
    log {HOST}:{udp} local0
    log stdout format raw local0
    use_backend be_none if {{ path_beg /none }}
    use_backend be_refused if {{ path_beg /refused }}
    default_backend be_ok

backend be_ok
    mode http
    server s1 {HOST}:{o.port}

backend be_none
    mode http
    server s1 {HOST}:{o.port} disabled

backend be_refused
    mode http
    retries 1
    server dead {HOST}:{dead_port}

frontend fe_tcp
    mode tcp
    bind {HOST}:{ports['tcp']}
    option tcplog
    log {HOST}:{udp} local0
    log stdout format raw local0
    default_backend bt_ok

frontend fe_tcp_none
    mode tcp
    bind {HOST}:{ports['tcp_none']}
    option tcplog
    log {HOST}:{udp} local0
    log stdout format raw local0
    default_backend bt_none

frontend fe_tcp_refused
    mode tcp
    bind {HOST}:{ports['tcp_refused']}
    option tcplog
    log {HOST}:{udp} local0
    log stdout format raw local0
    default_backend bt_refused

backend bt_ok
    mode tcp
    server s1 {HOST}:{o.port}

backend bt_none
    mode tcp
    server s1 {HOST}:{o.port} disabled

backend bt_refused
    mode tcp
    retries 1
    server dead {HOST}:{dead_port}
"""


# (label, port key, raw bytes, close_after_send, read timeout)
LOG_REQUESTS = [
    ("http 200", "http", b"GET /ok?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", False, 4),
    ("http 404 from server", "http", b"GET /404/missing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", False, 4),
    ("http HEAD 200", "http", b"HEAD /ok HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", False, 4),
    ("http POST 200", "http", b"POST /ok HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", False, 4),
    ("http HTTP/1.0 200", "http", b"GET /ok HTTP/1.0\r\n\r\n", False, 4),
    ("http 503 no server up", "http", b"GET /none/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", False, 4),
    ("http refused (503/502)", "http", b"GET /refused HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", False, 6),
    ("http 400 malformed header", "http", b"GET /bad HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n", False, 4),
    ("http 400 bad request line", "http", b"G@T /bad HTTP/1.1\r\nHost: t\r\n\r\n", False, 4),
    ("http 408 incomplete request", "http", b"GET /slow HTTP/1.1\r\nHost: t\r\n", False, 4),
    ("http empty connection", "http", b"", True, 4),
    ("tcp ok", "tcp", b"GET /ok HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", False, 4),
    ("tcp no server up", "tcp_none", b"hello\r\n", False, 4),
    ("tcp refused", "tcp_refused", b"hello\r\n", False, 6),
]

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()

HTTPLOG_RE = re.compile(r"^(?P<ci>\S+):(?P<cp>\d+) \[(?P<date>[^\]]+)\] (?P<ft>\S+) (?P<bs>\S+) "
                        r"(?P<timers>\S+) (?P<status>\S+) (?P<bytes>\S+) (?P<cc>\S+) (?P<cs>\S+) "
                        r"(?P<term>\S+) (?P<conns>\S+) (?P<queues>\S+) (?P<req>.*)$")
TCPLOG_RE = re.compile(r"^(?P<ci>\S+):(?P<cp>\d+) \[(?P<date>[^\]]+)\] (?P<ft>\S+) (?P<bs>\S+) "
                       r"(?P<timers>\S+) (?P<bytes>\S+) (?P<term>\S+) (?P<conns>\S+) (?P<queues>\S+)$")
DATE_RE = re.compile(r"^\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d\.\d{3}$")


def mask_timers(t):
    return "/".join(("-1" if x == "-1" else ("+N" if x.startswith("+") else "N"))
                    for x in t.split("/"))


def parse_access(msg):
    """Returns (kind, {field: masked value}) or (None, masked msg)."""
    for kind, rx in (("httplog", HTTPLOG_RE), ("tcplog", TCPLOG_RE)):
        m = rx.match(msg)
        if m:
            d = m.groupdict()
            d["cp"] = "PORT"
            d["date"] = "DATE" if DATE_RE.match(d["date"]) else "BADDATE(" + d["date"] + ")"
            d["timers"] = mask_timers(d["timers"])
            return kind, d
    return None, re.sub(r"\d+", "N", msg)


FIELD_ORDER = ["ci", "cp", "date", "ft", "bs", "timers", "status", "bytes", "cc", "cs", "term",
               "conns", "queues", "req"]


def masked_line(kind, d):
    if kind is None:
        return d
    f = dict(d)
    base = f"{f['ci']}:{f['cp']} [{f['date']}] {f['ft']} {f['bs']} {f['timers']} "
    if kind == "httplog":
        return base + f"{f['status']} {f['bytes']} {f['cc']} {f['cs']} {f['term']} {f['conns']} {f['queues']} {f['req']}"
    return base + f"{f['bytes']} {f['term']} {f['conns']} {f['queues']}"


def split_syslog(d):
    m = SYSLOG_RE.match(d)
    if not m:
        return None, d.decode("utf-8", "replace")
    pri, ts, host, tag, pid, msg = m.groups()
    hdr = {"pri": int(pri), "ts": ts.decode(), "host": host.decode() if host else None,
           "tag": tag.decode(), "pid": int(pid)}
    return hdr, msg.decode("utf-8", "replace").rstrip("\n")


def run_logs_once(kind, binary, origins, workdir, dead_port):
    udp = UdpCollector()
    ports = {k: free_port() for k in ("http", "tcp", "tcp_none", "tcp_refused")}
    cfg = log_config(ports, udp.port, origins, dead_port)
    p = Proxy(kind, binary, cfg, workdir, "logs")
    rc, out = p.check()
    if rc != 0:
        udp.close()
        raise RuntimeError(f"{kind} -c rejects the log config: {out[:400]}")
    p.start(list(ports.values()))
    time.sleep(0.3)
    startup = list(udp.msgs)
    marks = []
    try:
        for label, pk, data, close_after, to in LOG_REQUESTS:
            n0 = len(udp.msgs)
            o0 = len(p.out)
            t0 = time.time()
            raw = raw_exchange(ports[pk], data, timeout=to, close_after_send=close_after)
            # wait for the log line(s) of this request (sent when the stream ends)
            deadline = time.time() + 2.0
            while time.time() < deadline and len(udp.msgs) == n0:
                time.sleep(0.02)
            time.sleep(0.15)
            st = parse_resp(raw)[0] if pk == "http" else (f"{len(raw)} bytes" if raw is not None else "ERR")
            marks.append((label, st, udp.msgs[n0:], p.out[o0:], time.time() - t0))
    finally:
        p.stop()
        time.sleep(0.1)
        udp.close()
    return {"startup": startup, "marks": marks, "stderr": p.err, "stdout": p.out}


def run_logs(args, origins, workdir):
    dead = free_port()   # nothing listens there
    runs = {"haproxy": [], "sluice": []}
    for _ in range(args.runs):
        for kind, binary in (("haproxy", args.haproxy), ("sluice", args.sluice)):
            runs[kind].append(run_logs_once(kind, binary, origins, workdir, dead))
    lines = []
    ndiff = 0

    # syslog header
    def headers(run):
        hs = []
        for _, d in run["startup"]:
            hs.append(split_syslog(d)[0])
        for m in run["marks"]:
            for _, d in m[2]:
                hs.append(split_syslog(d)[0])
        return hs

    lines.append("syslog header (UDP, rfc3164):")
    for kind in ("haproxy", "sluice"):
        r = runs[kind][0]
        allm = [d for _, d in r["startup"]] + [d for m in r["marks"] for _, d in m[2]]
        ex = allm[0] if allm else b""
        hs = [h for h in headers(r) if h]
        pris = sorted(set(h["pri"] for h in hs))
        tags = sorted(set(h["tag"] for h in hs))
        hosts = sorted(set(str(h["host"]) for h in hs))
        bad = len(allm) - len(hs)
        lines.append(f"  {kind:8s}: PRI {pris} tag {tags} hostname {hosts}"
                     + (f", {bad} datagrams not RFC 3164" if bad else "")
                     + f"; e.g. {ex[:90]!r}")
    # startup messages
    lines.append("startup datagrams (before any request):")
    for kind in ("haproxy", "sluice"):
        r = runs[kind][0]
        ms = []
        for _, d in r["startup"]:
            h, msg = split_syslog(d)
            ms.append((h["pri"] if h else "?", msg))
        lines.append(f"  {kind:8s}: " + ("; ".join(f"<{p}> {m}" for p, m in ms) if ms else "(none)"))
    hs_ = sorted(re.sub(r"\d+", "N", m) for _, d in runs["haproxy"][0]["startup"] for m in [split_syslog(d)[1]])
    ss_ = sorted(re.sub(r"\d+", "N", m) for _, d in runs["sluice"][0]["startup"] for m in [split_syslog(d)[1]])
    if hs_ != ss_:
        ndiff += 1

    # per request
    def per_request(run):
        out = []
        for label, st, dgrams, stdout_lines, dt in run["marks"]:
            items = []
            for _, d in dgrams:
                h, msg = split_syslog(d)
                k, f = parse_access(msg)
                items.append((h["pri"] if h else None, k, f, msg))
            so = [l.decode("utf-8", "replace") for _, l in stdout_lines]
            out.append((label, st, items, so))
        return out

    # stability across runs
    unstable = []
    for kind in runs:
        ref = [(l, st, [(p, masked_line(k, f)) for p, k, f, _ in it]) for l, st, it, _ in per_request(runs[kind][0])]
        for r in runs[kind][1:]:
            cur = [(l, st, [(p, masked_line(k, f)) for p, k, f, _ in it]) for l, st, it, _ in per_request(r)]
            for a, b in zip(ref, cur):
                if a != b:
                    unstable.append(f"{kind} '{a[0]}': {a[2]} vs {b[2]}")
    H = per_request(runs["haproxy"][0])
    S = per_request(runs["sluice"][0])
    lines.append("access-log lines (masked: client port, date, timers; '-1' timers kept):")
    for (label, hst, hit, hso), (_, sst, sit, sso) in zip(H, S):
        row_diff = []
        if hst != sst:
            row_diff.append(f"client got {hst} from haproxy, {sst} from sluice")
        if len(hit) != len(sit):
            row_diff.append(f"{len(hit)} datagram(s) from haproxy, {len(sit)} from sluice")
        for i in range(max(len(hit), len(sit))):
            a = hit[i] if i < len(hit) else None
            b = sit[i] if i < len(sit) else None
            if a and b:
                if a[0] != b[0]:
                    row_diff.append(f"PRI <{a[0]}> vs <{b[0]}>")
                if a[1] != b[1]:
                    row_diff.append(f"format {a[1]} vs {b[1]}")
                elif a[1] is None:
                    if a[2] != b[2]:
                        row_diff.append("non-access line differs")
                else:
                    for fld in FIELD_ORDER:
                        if fld in a[2] and a[2].get(fld) != b[2].get(fld):
                            row_diff.append(f"{fld}: {a[2].get(fld)!r} vs {b[2].get(fld)!r}")
        # stdout raw vs udp message (each program with itself)
        for kind, it, so in (("haproxy", hit, hso), ("sluice", sit, sso)):
            udp_msgs = [m for _, _, _, m in it]
            if udp_msgs != so[:len(udp_msgs)] or len(so) != len(udp_msgs):
                row_diff.append(f"{kind}: stdout raw lines {so!r} != UDP messages {udp_msgs!r}")
        mark = "DIFF" if row_diff else "same"
        if row_diff:
            ndiff += 1
        lines.append(f"  [{label}] {mark}")
        for kind, it in (("haproxy", hit), ("sluice", sit)):
            for p, k, f, _ in it:
                lines.append(f"    {kind:8s} <{p}> {masked_line(k, f)}")
            if not it:
                lines.append(f"    {kind:8s} (no log line)")
        for d in row_diff:
            lines.append(f"      - {d}")
        if row_diff:
            for kind, it in (("haproxy", hit), ("sluice", sit)):
                for _, _, _, m in it:
                    lines.append(f"      raw {kind:8s} {m}")
    if unstable:
        lines.append("UNSTABLE (a program gave different masked lines across runs):")
        lines.extend("  " + u for u in unstable)
    return ndiff, unstable, lines


# ==========================================================================

def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", default=None, help="only balance configs whose name contains this")
    ap.add_argument("--no-logs", action="store_true")
    ap.add_argument("--no-balance", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.verbose
    for b in (args.sluice, args.haproxy):
        if not os.access(b, os.X_OK):
            sys.exit(f"not executable: {b}")
    workdir = tempfile.mkdtemp(prefix="balance_diff.")
    origins = [Origin(f"s{i + 1}") for i in range(NORIGINS)]
    t0 = time.time()
    ndiff = 0
    unstable_any = False
    try:
        summary = []
        if not args.no_balance:
            summary = run_balance(args, origins, workdir)
        log_out = None
        if not args.no_logs and not args.only:
            log_out = run_logs(args, origins, workdir)
        print()
        print("=" * 78)
        print(f"SUMMARY  (haproxy {args.haproxy}, sluice {args.sluice}, {args.runs} runs each, "
              f"{time.time() - t0:.0f}s)")
        print("=" * 78)
        for name, status, lines, body in summary:
            print(f"[{status:8s}] {name}")
            if status != "same" or VERBOSE:
                for l in lines:
                    print(l)
            if status in ("DIFF", "REJECTED"):
                ndiff += 1
            if status == "UNSTABLE":
                unstable_any = True
        if log_out:
            n, unstable, lines = log_out
            ndiff += n
            unstable_any = unstable_any or bool(unstable)
            print()
            print("LOGS: " + ("same" if n == 0 else f"{n} difference(s)"))
            for l in lines:
                print(l)
        print()
        print(f"{ndiff} config(s)/log case(s) differ" + (", some UNSTABLE" if unstable_any else ""))
    finally:
        for o in origins:
            o.close()
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(1 if ndiff else 0)


if __name__ == "__main__":
    main()
