#!/usr/bin/env python3
"""Differential test of timeouts and connection lifecycle: sluice vs HAProxy 2.6, same
config, same client behaviour, observed from outside (client socket and origin socket).

Self-contained (Python 3 standard library only), loopback only, light, bounded in time.

    python3 bench/timeout_diff.py [--sluice target/release/sluice] [--haproxy /usr/sbin/haproxy]
                                  [--runs 2] [--tol 150] [--only SUBSTR] [-v]

For every case a fresh origin server (raw sockets, scripted behaviour, records every event
with its time) and a fresh proxy process are started, the client script runs, the proxy is
stopped. Each case runs on HAProxy then on sluice (never at the same time), and the corpus
is run --runs times. Per case the observations are a flat dict:

    status*    status line code seen by the client (or None)
    t_*        milliseconds since the case's reference instant (None = did not happen)
    close*     how the client saw the connection end: fin / rst / open (still open at the
               end of the observation window) / refused
    be_*       what the origin saw: connections, requests, EOF/RST times, headers

A difference is reported only when it is present in every run: for t_* keys, when the two
values differ by more than --tol ms (or one is None), for other keys when they differ.
Exit status 0 when no stable difference, 1 otherwise.

Cases: timeout http-request (partial head, trickled head, empty connection, missing body),
http-keep-alive / http-request / client fallback for idle keep-alive, timeout client while
the server is slow, timeout server (no head, stalled body), timeout connect to a blackhole
(listening socket with a full accept queue: SYNs are dropped), connection refused with
retries 0/2, timeout queue and maxqueue, mode tcp half-closes both ways, idle timeouts,
timeout tunnel, client-fin/server-fin, WebSocket upgrade + tunnel timeout, keep-alive /
http-server-close / httpclose, reuse of an idle server connection by a new client
connection (http-reuse safe), SIGUSR1 soft stop with an in-flight request.
"""

import argparse
import base64
import hashlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import (  # noqa: E402
    HOST, Listener, check_config, free_port, listening_ports, stop_process)
VERBOSE = False


def vprint(*a):
    if VERBOSE:
        print(*a, flush=True)


def now():
    return time.monotonic()


def ms(t, t0):
    return None if t is None else int(round((t - t0) * 1000))


# ==========================================================================
# origin server
# ==========================================================================

class Origin(Listener):
    """kind: http | echo_bye | greet_close | greet_shut | silent | silent_hold

    http: keep-alive loop; answers 200 "ok" (Content-Length) after `delay` seconds (only for
    paths starting with `slowpath` when set); `stall`: sends a head announcing 100 bytes,
    10 bytes, then nothing; Upgrade requests get 101 then an echo tunnel.
    echo_bye: echoes; on EOF sends BYE and closes.  greet_close: on first data sends SRV
    and closes.  greet_shut: on first data sends SRV and shuts down its write side, keeps
    reading.  silent: reads, closes on EOF.  silent_hold: reads, keeps the socket open for
    3 s after EOF."""

    def __init__(self, kind="http", delay=0.0, slowpath=None, stall=False):
        self.kind, self.delay, self.slowpath, self.stall = kind, delay, slowpath, stall
        self.events = []
        self.lock = threading.Lock()
        self.ncid = 0
        super().__init__(backlog=64)

    def ev(self, cid, what, detail=None):
        with self.lock:
            self.events.append((now(), cid, what, detail))

    def on_accept(self, c):
        self.ncid += 1
        cid = self.ncid
        self.ev(cid, "accept")
        fn = self.serve_http if self.kind == "http" else self.serve_tcp
        threading.Thread(target=self.wrap, args=(fn, c, cid), daemon=True).start()

    def wrap(self, fn, c, cid):
        try:
            c.settimeout(8)
            fn(c, cid)
        except (ConnectionResetError, BrokenPipeError):
            self.ev(cid, "rst")
        except socket.timeout:
            self.ev(cid, "stuck")
        except OSError as e:
            self.ev(cid, "err", str(e))
        finally:
            try:
                c.close()
            except OSError:
                pass

    def recv(self, c, cid):
        d = c.recv(65536)
        if not d:
            self.ev(cid, "eof")
        return d

    def serve_http(self, c, cid):
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = self.recv(c, cid)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            parts = lines[0].split()
            path = parts[1].decode("latin1") if len(parts) > 1 else "/"
            hdrs = {}
            for ln in lines[1:]:
                if b":" in ln:
                    k, v = ln.split(b":", 1)
                    hdrs[k.strip().lower().decode("latin1")] = v.strip().decode("latin1")
            cl = int(hdrs.get("content-length", "0") or 0)
            self.ev(cid, "head", (path, hdrs.get("connection", "")))
            while len(buf) < cl:
                d = self.recv(c, cid)
                if not d:
                    return
                buf += d
            buf = buf[cl:]
            self.ev(cid, "req", (path, hdrs.get("connection", "")))
            if "upgrade" in hdrs:
                key = hdrs.get("sec-websocket-key", "").encode()
                acc = base64.b64encode(hashlib.sha1(
                    key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
                c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          b"Connection: Upgrade\r\n" +
                          (b"Sec-WebSocket-Accept: " + acc + b"\r\n" if key else b"") + b"\r\n")
                while True:
                    d = self.recv(c, cid)
                    if not d:
                        return
                    c.sendall(d)
            delay = self.delay if (self.slowpath is None or path.startswith(self.slowpath)) else 0
            end = now() + delay
            while now() < end:
                r, _, _ = select.select([c], [], [], max(0, end - now()))
                if r:
                    d = self.recv(c, cid)
                    if not d:
                        return
                    buf += d
            if self.stall:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                while self.recv(c, cid):
                    pass
                return
            close = "close" in hdrs.get("connection", "").lower()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" +
                      (b"Connection: close\r\n" if close else b"") + b"\r\nok")
            self.ev(cid, "resp")
            if close:
                self.ev(cid, "i_closed")
                return

    def serve_tcp(self, c, cid):
        shut = False
        while True:
            d = self.recv(c, cid)
            if not d:
                if self.kind == "echo_bye":
                    c.sendall(b"BYE")
                elif self.kind == "silent_hold":
                    time.sleep(3)
                return
            self.ev(cid, "data_after_shut" if shut else "data", d)
            if self.kind == "echo_bye":
                c.sendall(d)
            elif self.kind == "greet_close":
                c.sendall(b"SRV")
                self.ev(cid, "i_closed")
                return
            elif self.kind == "greet_shut" and not shut:
                c.sendall(b"SRV")
                c.shutdown(socket.SHUT_WR)
                shut = True
                self.ev(cid, "i_shut")

    def stop(self):
        self.close()

    # summaries -------------------------------------------------------------
    def settle(self):
        # let the origin threads record what just happened before the first summary
        if not getattr(self, "settled", False):
            time.sleep(0.15)
            self.settled = True

    def count(self, what):
        self.settle()
        return sum(1 for e in self.events if e[2] == what)

    def first(self, what, t0):
        """time of the first `what` event; what="eof" means the first eof OR rst (the
        kind is in be_close_kind())."""
        self.settle()
        for e in self.events:
            if e[2] == what or (what == "eof" and e[2] == "rst"):
                return ms(e[0], t0)
        return None

    def close_kind(self):
        self.settle()
        for e in self.events:
            if e[2] in ("eof", "rst"):
                return e[2]
        return None

    def details(self, what):
        self.settle()
        return [e[3] for e in self.events if e[2] == what]


class Blackhole:
    """A listening socket whose accept queue is full: further SYNs are dropped."""

    def __init__(self):
        self.lsock = socket.socket()
        self.lsock.bind((HOST, 0))
        self.lsock.listen(0)
        self.port = self.lsock.getsockname()[1]
        self.fill = []
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect((HOST, self.port))
            except (BlockingIOError, OSError):
                pass
            self.fill.append(s)
        time.sleep(0.1)

    def stop(self):
        for s in self.fill + [self.lsock]:
            try:
                s.close()
            except OSError:
                pass


# ==========================================================================
# proxies
# ==========================================================================

class Run:
    def __init__(self, name, binary, cfgtext, workdir):
        self.name, self.binary = name, binary
        self.cfg = os.path.join(workdir, name + ".cfg")
        with open(self.cfg, "w") as f:
            f.write(cfgtext)
        self.errpath = os.path.join(workdir, name + ".out")
        self.proc = None

    def check(self):
        return check_config(self.binary, self.cfg)

    def start(self, port):
        self.errf = open(self.errpath, "w")
        self.proc = subprocess.Popen([self.binary, "-db", "-f", self.cfg], stdout=self.errf,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = now() + 10
        while now() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited at start: %s" % (self.name, open(self.errpath).read()))
            if port in listening_ports():
                time.sleep(0.05)
                return
            time.sleep(0.02)
        raise RuntimeError("%s did not start listening" % self.name)

    def stop(self):
        stop_process(self.proc, wait=3)
        self.errf.close()


# ==========================================================================
# client helpers
# ==========================================================================

def connect(port, timeout=2.0):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def GET(path="/", conn=None, extra=b""):
    return (b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n" +
            (b"Connection: " + conn.encode() + b"\r\n" if conn else b"") + extra + b"\r\n")


class Reader:
    """Reads from a client socket with a deadline, remembering FIN/RST."""

    def __init__(self, s):
        self.s, self.buf, self.closed, self.t_closed = s, b"", None, None
        self.t_first = None

    def fill(self, deadline):
        if self.closed:
            return False
        rem = deadline - now()
        if rem <= 0:
            return False
        r, _, _ = select.select([self.s], [], [], rem)
        if not r:
            return False
        try:
            d = self.s.recv(65536)
        except ConnectionResetError:
            self.closed, self.t_closed = "rst", now()
            return False
        except OSError:
            self.closed, self.t_closed = "err", now()
            return False
        if not d:
            self.closed, self.t_closed = "fin", now()
            return False
        if self.t_first is None:
            self.t_first = now()
        self.buf += d
        return True

    def response(self, limit):
        """One response -> (status, headers dict, body, t_complete) or (None,...) on
        close/timeout.  1xx responses are returned as is (head only)."""
        deadline = now() + limit
        while b"\r\n\r\n" not in self.buf:
            if not self.fill(deadline) and (self.closed or now() >= deadline):
                return None, {}, b"", None
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        parts = lines[0].split(None, 2)
        status = parts[1].decode() if len(parts) > 1 else lines[0][:20].decode("latin1")
        hdrs = {}
        for ln in lines[1:]:
            if b":" in ln:
                k, v = ln.split(b":", 1)
                hdrs[k.strip().lower().decode("latin1")] = v.strip().decode("latin1")
        if status.startswith("1"):
            self.buf = rest
            return status, hdrs, b"", now()
        cl = hdrs.get("content-length")
        if cl is not None:
            cl = int(cl)
            while len(rest) < cl:
                if not self.fill(deadline) and (self.closed or now() >= deadline):
                    break
                rest = self.buf.split(b"\r\n\r\n", 1)[1]
            body, self.buf = rest[:cl], rest[cl:]
        else:  # read until close
            while self.fill(deadline) or not (self.closed or now() >= deadline):
                pass
            body, self.buf = self.buf.split(b"\r\n\r\n", 1)[1], b""
        return status, hdrs, body, now()

    def until_close(self, limit):
        """Wait for the close (or `limit` s) -> (kind, t, extra bytes)."""
        start = len(self.buf)
        deadline = now() + limit
        while not self.closed and now() < deadline:
            self.fill(deadline)
        return (self.closed or "open"), self.t_closed, self.buf[start:]


# ==========================================================================
# configs
# ==========================================================================

def conf(mode="http", defaults="", fe="", be="", server="server s1 127.0.0.1:@BE@", glob=""):
    ind = lambda t: "".join("    " + l.strip() + "\n" for l in t.strip().splitlines() if l.strip())
    return ("global\n    maxconn 200\n" + ind(glob) +
            "\ndefaults\n    mode %s\n    timeout connect 1000ms\n    timeout client 3000ms\n"
            "    timeout server 3000ms\n" % mode + ind(defaults) +
            "\nfrontend fe\n    bind 127.0.0.1:@FE@\n" + ind(fe) + "    default_backend be\n"
            "\nbackend be\n" + ind(be) + "    " + server + "\n")


# ==========================================================================
# cases: each client function gets ctx (port, origin, run) and returns an obs dict
# ==========================================================================

CASES = []


def case(name, cfg, origin=None, desc=""):
    def deco(fn):
        CASES.append(dict(name=name, cfg=cfg, origin=origin or {}, fn=fn, desc=desc))
        return fn
    return deco


def one_request_then_close(ctx, req, limit=3.0, send_at=None):
    """Send req, read one response, then wait for the close."""
    s = connect(ctx.port)
    t0 = now()
    s.sendall(req)
    r = Reader(s)
    st, h, body, tr = r.response(limit)
    kind, tc, extra = r.until_close(max(0.3, limit - (now() - t0)))
    s.close()
    o = ctx.origin
    return dict(status=st, t_resp=ms(tr, t0), resp_conn=h.get("connection", "").lower(),
                close=kind, t_close=ms(tc, t0), be_reqs=o.count("req"), be_heads=o.count("head"), t_be_eof=o.first("eof", t0),
                be_close=o.close_kind())


# ---- timeout http-request ------------------------------------------------
HREQ = conf(defaults="timeout http-request 500ms")


@case("hreq_partial_head", HREQ, desc="head never finished")
def _(ctx):
    return one_request_then_close(ctx, b"GET / HTTP/1.1\r\nHost: t\r\n", 2.5)


@case("hreq_trickle_head", HREQ, desc="head sent 1 byte / 40 ms (2.4 s total)")
def _(ctx):
    s = connect(ctx.port)
    t0 = now()
    req = GET("/", extra=b"User-Agent: trickle-trickle-trickle\r\n")
    r = Reader(s)
    sent = 0
    for i in range(len(req)):
        try:
            s.sendall(req[i:i + 1])
            sent += 1
        except OSError:
            break
        if select.select([s], [], [], 0.04)[0]:
            break
    st, h, body, tr = r.response(max(0.2, 3.0 - (now() - t0)))
    kind, tc, _ = r.until_close(0.5)
    s.close()
    return dict(status=st, t_resp=ms(tr, t0), close=kind, t_close=ms(tc, t0),
                all_sent=(sent == len(req)), be_reqs=ctx.origin.count("req"))


@case("hreq_empty_conn", HREQ, desc="connection, nothing sent")
def _(ctx):
    return one_request_then_close(ctx, b"", 2.0)


@case("hreq_body_missing", conf(defaults="timeout http-request 300ms\ntimeout client 800ms"),
      desc="Content-Length: 10, 3 bytes sent")
def _(ctx):
    return one_request_then_close(
        ctx, b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc", 4.0)


# ---- idle keep-alive -----------------------------------------------------
def ka_idle(ctx):
    s = connect(ctx.port)
    s.sendall(GET("/"))
    r = Reader(s)
    st, h, body, tr = r.response(2)
    t0 = now()
    kind, tc, extra = r.until_close(2.5)
    s.close()
    return dict(status=st, close=kind, t_close=ms(tc, t0), sent_at_close=extra[:30],
                be_conns=ctx.origin.count("accept"), t_be_eof=ctx.origin.first("eof", t0))


case("ka_idle_keepalive_300", conf(defaults="timeout http-keep-alive 300ms\ntimeout client 1500ms"),
     desc="idle after response; ka 300, client 1500")(ka_idle)
case("ka_idle_fallback_hreq_400", conf(defaults="timeout http-request 400ms\ntimeout client 1500ms"),
     desc="no http-keep-alive; http-request 400, client 1500")(ka_idle)
case("ka_idle_fallback_client_600", conf(defaults="timeout client 600ms"),
     desc="only timeout client 600")(ka_idle)


@case("ka_partial_second_req", conf(defaults="timeout http-keep-alive 300ms\n"
                                    "timeout http-request 900ms\ntimeout client 2000ms"),
      desc="after a response, half a 2nd head: ka 300 / http-request 900")
def _(ctx):
    s = connect(ctx.port)
    s.sendall(GET("/"))
    r = Reader(s)
    r.response(2)
    t0 = now()
    s.sendall(b"GET /2 HTTP/1.1\r\n")
    st, h, body, tr = r.response(2.5)
    kind, tc, _ = r.until_close(0.5)
    s.close()
    return dict(status=st, t_resp=ms(tr, t0), close=kind, t_close=ms(tc, t0))


# ---- server side timeouts ------------------------------------------------
@case("client_timeout_while_server_slow", conf(defaults="timeout client 400ms\ntimeout server 3000ms"),
      origin=dict(delay=1.0), desc="client 400, server answers after 1000")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 2.5)


@case("server_timeout_no_head", conf(defaults="timeout server 400ms"), origin=dict(delay=2.0),
      desc="server 400, origin answers after 2000")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 2.5)


@case("server_timeout_stalled_body", conf(defaults="timeout server 400ms"), origin=dict(stall=True),
      desc="origin sends head (CL 100) + 10 bytes then stalls")
def _(ctx):
    s = connect(ctx.port)
    t0 = now()
    s.sendall(GET("/"))
    r = Reader(s)
    r.fill(now() + 1)
    kind, tc, _ = r.until_close(2.0)
    s.close()
    st = r.buf.split(b"\r\n", 1)[0].decode("latin1")
    body = r.buf.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in r.buf else b""
    return dict(status=st, body_bytes=len(body), close=kind, t_close=ms(tc, t0),
                t_be_eof=ctx.origin.first("eof", t0))


@case("connect_timeout_blackhole_retries1",
      conf(defaults="timeout connect 300ms", be="retries 1", server="server s1 127.0.0.1:@BH@"),
      desc="SYN dropped (full accept queue), connect 300, retries 1")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 3.0)


@case("refused_retries2", conf(be="retries 2", server="server s1 127.0.0.1:@DEAD@"),
      desc="closed port, retries 2")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 4.0)


@case("refused_retries0", conf(be="retries 0", server="server s1 127.0.0.1:@DEAD@"),
      desc="closed port, retries 0")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 2.0)


@case("refused_retries2_connect300",
      conf(defaults="timeout connect 300ms", be="retries 2", server="server s1 127.0.0.1:@DEAD@"),
      desc="closed port, retries 2, connect 300 (turn-around = min(connect, 1 s))")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 4.0)


@case("refused_redispatch_one_server",
      conf(be="retries 3\noption redispatch", server="server s1 127.0.0.1:@DEAD@"),
      desc="closed port, only server, retries 3 + redispatch")
def _(ctx):
    return one_request_then_close(ctx, GET("/"), 5.0)


for _algo in ("leastconn", "source", "random", "uri"):
    @case("refused_redispatch_2dead_" + _algo,
          conf(be="retries 2\noption redispatch\nbalance " + _algo,
               server="server s1 127.0.0.1:@DEAD@\n    server s2 127.0.0.1:@DEAD2@"),
          desc="two closed ports, retries 2 + redispatch, balance " + _algo)
    def _(ctx):
        return one_request_then_close(ctx, GET("/"), 4.0)


@case("refused_retries2_redispatch",
      conf(be="retries 2\noption redispatch\nbalance roundrobin",
           server="server s1 127.0.0.1:@DEAD@\n    server s2 127.0.0.1:@BE@"),
      desc="s1 closed port, s2 up, retries 2 + redispatch; 2 requests")
def _(ctx):
    out = {}
    t0 = now()
    for i in range(2):
        s = connect(ctx.port)
        s.sendall(GET("/", conn="close"))
        st, h, body, tr = Reader(s).response(4)
        out["status%d" % i] = st
        out["t_resp%d" % i] = ms(tr, t0)
        s.close()
        t0 = now()
    out["be_reqs"] = ctx.origin.count("req")
    return out


# ---- queue ----------------------------------------------------------------
def parallel(ctx, starts, path="/", limit=3.0):
    res = {}
    t0 = now()

    def go(i, at):
        time.sleep(max(0, t0 + at - now()))
        try:
            s = connect(ctx.port)
        except OSError as e:
            res[i] = ("refused", None, None, None)
            return
        s.sendall(GET(path))
        r = Reader(s)
        st, h, body, tr = r.response(limit)
        res[i] = (st, ms(tr, t0), r.closed, ms(r.t_closed, t0))
        s.close()

    ths = [threading.Thread(target=go, args=(i, a)) for i, a in enumerate(starts)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    out = {}
    for i in range(len(starts)):
        st, tr, kind, tc = res[i]
        out["status%s" % "ABC"[i]] = st
        out["t_resp%s" % "ABC"[i]] = tr
    out["be_reqs"] = ctx.origin.count("req")
    return out


@case("queue_timeout", conf(be="timeout queue 400ms", server="server s1 127.0.0.1:@BE@ maxconn 1"),
      origin=dict(delay=1.2), desc="maxconn 1, A in flight 1200 ms, B at +100, queue 400")
def _(ctx):
    return parallel(ctx, [0, 0.1])


@case("maxqueue_1", conf(be="timeout queue 2000ms",
                         server="server s1 127.0.0.1:@BE@ maxconn 1 maxqueue 1"),
      origin=dict(delay=0.8), desc="maxconn 1 maxqueue 1; A, B +100, C +200; origin 800 ms")
def _(ctx):
    return parallel(ctx, [0, 0.1, 0.2])


# ---- mode tcp -------------------------------------------------------------
def tcp_conf(defaults=""):
    return conf(mode="tcp", defaults=defaults)


def send_then_shut(ctx, data):
    """Send data, then (0.1 s later) SHUT_WR; read until the proxy closes.
    Returns (reader, close kind, close time, time of the shutdown)."""
    s = connect(ctx.port)
    s.sendall(data)
    time.sleep(0.1)
    t0 = now()
    s.shutdown(socket.SHUT_WR)
    r = Reader(s)
    kind, tc, _ = r.until_close(2.5)
    s.close()
    return r, kind, tc, t0


@case("tcp_client_shutwr", tcp_conf(), origin=dict(kind="echo_bye"),
      desc="client sends hello then SHUT_WR; origin echoes, BYE on EOF")
def _(ctx):
    r, kind, tc, t0 = send_then_shut(ctx, b"hello")
    return dict(got=r.buf, close=kind, t_close=ms(tc, t0), t_be_eof=ctx.origin.first("eof", t0))


@case("tcp_server_close", tcp_conf(), origin=dict(kind="greet_close"),
      desc="origin sends SRV and closes on first data")
def _(ctx):
    s = connect(ctx.port)
    t0 = now()
    s.sendall(b"x")
    r = Reader(s)
    kind, tc, _ = r.until_close(2.5)
    s.close()
    return dict(got=r.buf, close=kind, t_close=ms(tc, t0))


@case("tcp_server_shutwr", tcp_conf(), origin=dict(kind="greet_shut"),
      desc="origin sends SRV + SHUT_WR; client then sends 'more' and closes")
def _(ctx):
    s = connect(ctx.port)
    t0 = now()
    s.sendall(b"x")
    r = Reader(s)
    kind, tc, _ = r.until_close(1.5)
    err = None
    try:
        s.sendall(b"more")
    except OSError as e:
        err = type(e).__name__
    time.sleep(0.3)
    s.close()
    time.sleep(0.2)
    o = ctx.origin
    return dict(got=r.buf, close=kind, t_close=ms(tc, t0), send_after=err,
                be_got_more=b"".join(o.details("data_after_shut")), t_be_eof=o.first("eof", t0))


def tcp_idle(ctx):
    s = connect(ctx.port)
    s.sendall(b"x")
    t0 = now()
    r = Reader(s)
    kind, tc, _ = r.until_close(2.5)
    s.close()
    return dict(close=kind, t_close=ms(tc, t0), t_be_eof=ctx.origin.first("eof", t0),
                be_close=ctx.origin.close_kind())


case("tcp_idle_client400", tcp_conf("timeout client 400ms\ntimeout server 1500ms"),
     origin=dict(kind="silent"), desc="idle; client 400 server 1500")(tcp_idle)
case("tcp_idle_server400", tcp_conf("timeout client 1500ms\ntimeout server 400ms"),
     origin=dict(kind="silent"), desc="idle; client 1500 server 400")(tcp_idle)
case("tcp_idle_tunnel900", tcp_conf("timeout client 300ms\ntimeout server 300ms\ntimeout tunnel 900ms"),
     origin=dict(kind="silent"), desc="idle; client/server 300, tunnel 900")(tcp_idle)


def tcp_client_shut_hold(ctx):
    r, kind, tc, t0 = send_then_shut(ctx, b"x")
    return dict(close=kind, t_close=ms(tc, t0), t_be_eof=ctx.origin.first("eof", t0),
                be_close=ctx.origin.close_kind())


def tcp_server_shut_silent_client(ctx):
    s = connect(ctx.port)
    s.sendall(b"x")
    r = Reader(s)
    kind, tc, _ = r.until_close(1.0)
    t0 = now()
    for e in list(ctx.origin.events):
        if e[2] == "i_shut":
            t0 = e[0]
    time.sleep(max(0, t0 + 2.2 - now()))
    s.close()
    return dict(got=r.buf, close=kind, t_close=ms(tc, t0), t_be_eof=ctx.origin.first("eof", t0),
                be_close=ctx.origin.close_kind())


TCPT = "timeout client 1500ms\ntimeout server 1500ms\n"
case("tcp_clientshut_client_fin300", tcp_conf(TCPT + "timeout client-fin 300ms"),
     origin=dict(kind="silent_hold"),
     desc="client SHUT_WR at +100 after data, origin holds; client-fin 300")(tcp_client_shut_hold)
case("tcp_clientshut_server_fin300", tcp_conf(TCPT + "timeout server-fin 300ms"),
     origin=dict(kind="silent_hold"),
     desc="client SHUT_WR at +100 after data, origin holds; server-fin 300")(tcp_client_shut_hold)
case("tcp_servershut_server_fin300", tcp_conf(TCPT + "timeout server-fin 300ms"),
     origin=dict(kind="greet_shut"),
     desc="origin SRV + SHUT_WR, client silent; server-fin 300")(tcp_server_shut_silent_client)
case("tcp_servershut_client_fin300", tcp_conf(TCPT + "timeout client-fin 300ms"),
     origin=dict(kind="greet_shut"),
     desc="origin SRV + SHUT_WR, client silent; client-fin 300")(tcp_server_shut_silent_client)


# ---- websocket ------------------------------------------------------------
def ws(ctx, key=True):
    s = connect(ctx.port)
    s.sendall(GET("/ws", conn="Upgrade", extra=b"Upgrade: websocket\r\n" + (
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        if key else b"")))
    r = Reader(s)
    st, h, _, _ = r.response(2)
    echo = None
    if st == "101":
        time.sleep(0.1)
        s.sendall(b"ping")
        d = now() + 1
        while b"ping" not in r.buf and r.fill(d):
            pass
        echo = b"ping" in r.buf
    t0 = now()
    kind, tc, _ = r.until_close(2.5)
    s.close()
    return dict(status=st, echo=echo, close=kind, t_close=ms(tc, t0),
                t_be_eof=ctx.origin.first("eof", t0))


case("ws_tunnel1000", conf(defaults="timeout client 300ms\ntimeout server 300ms\ntimeout tunnel 1000ms"),
     desc="101 then idle; client/server 300 tunnel 1000")(ws)
case("ws_no_tunnel", conf(defaults="timeout client 300ms\ntimeout server 600ms"),
     desc="101 then idle; client 300 server 600, no tunnel")(ws)
case("ws_without_key", conf(defaults="timeout client 300ms\ntimeout server 600ms"),
     desc="Upgrade: websocket without Sec-WebSocket-Key")(lambda ctx: ws(ctx, key=False))


# ---- connection modes -----------------------------------------------------
def two_requests(ctx):
    s = connect(ctx.port)
    r = Reader(s)
    out = {}
    o = ctx.origin
    for i in range(2):
        try:
            s.sendall(GET("/r%d" % i))
        except OSError as e:
            out["status%d" % i] = type(e).__name__
            break
        st, h, body, tr = r.response(2)
        out["status%d" % i] = st
        out["resp_conn%d" % i] = h.get("connection", "").lower()
        if st is None:
            out["close%d" % i] = r.closed
            break
        kind, tc, _ = r.until_close(0.3)
        out["close_after%d" % i] = kind
    # origin connections closed by the proxy while the client connection was still open
    out["be_eofs_before_client_close"] = o.count("eof")
    s.close()
    time.sleep(0.1)
    out["be_conns"] = o.count("accept")
    out["be_reqs"] = o.count("req")
    out["be_req_conn_hdr"] = ",".join(sorted(set(d[1].lower() for d in o.details("req"))))
    return out


case("conn_keepalive_default", conf(), desc="2 requests, default keep-alive")(two_requests)
case("conn_http_server_close", conf(defaults="option http-server-close"),
     desc="2 requests, option http-server-close")(two_requests)
case("conn_httpclose", conf(defaults="option httpclose"), desc="2 requests, option httpclose")(two_requests)


@case("reuse_first_request", conf(defaults="timeout http-keep-alive 3000ms"),
      desc="client K: 1 request then idle; new client A: 1 request (http-reuse safe default)")
def _(ctx):
    k = connect(ctx.port)
    k.sendall(GET("/k"))
    Reader(k).response(2)
    a = connect(ctx.port)
    a.sendall(GET("/a"))
    st, h, _, _ = Reader(a).response(2)
    o = ctx.origin
    out = dict(statusA=st, be_conns=o.count("accept"), be_reqs=o.count("req"))
    a.sendall(GET("/a2"))
    Reader(a).response(2)
    o.settled = False
    out["be_conns_after_2nd_reqA"] = o.count("accept")
    k.close()
    a.close()
    return out


# ---- soft stop ------------------------------------------------------------
@case("soft_stop_sigusr1", conf(defaults="timeout client 5000ms\ntimeout http-keep-alive 5000ms\n"
                                "timeout http-request 5000ms"),
      origin=dict(delay=1.0, slowpath="/slow"),
      desc="idle ka conn K + in-flight /slow (1 s) A; SIGUSR1 at +200; new conn B at +400")
def _(ctx):
    out = {}
    k = connect(ctx.port)
    k.sendall(GET("/fast"))
    kr = Reader(k)
    kr.response(2)
    a = connect(ctx.port)
    t0 = now()
    a.sendall(GET("/slow"))
    res = {}

    def run_a():
        r = Reader(a)
        st, h, b, tr = r.response(3)
        kind, tc, _ = r.until_close(1.0)
        res["A"] = (st, ms(tr, t0), h.get("connection", "").lower(), kind, ms(tc, t0))

    ta = threading.Thread(target=run_a)
    ta.start()
    time.sleep(max(0, t0 + 0.2 - now()))
    ctx.run.proc.send_signal(signal.SIGUSR1)
    time.sleep(max(0, t0 + 0.4 - now()))
    try:
        b = connect(ctx.port, timeout=1)
        b.sendall(GET("/fast"))
        st, h, _, _ = Reader(b).response(1.5)
        out["new_conn"] = "accepted:%s" % st
        b.close()
    except ConnectionRefusedError:
        out["new_conn"] = "refused"
    except OSError as e:
        out["new_conn"] = type(e).__name__
    kind, tc, _ = kr.until_close(max(0.1, t0 + 2.5 - now()))
    out["idle_ka_close"] = kind
    out["t_idle_ka_close"] = ms(tc, t0)
    ta.join()
    st, tr, cc, kind, tc = res["A"]
    out.update(statusA=st, t_respA=tr, resp_connA=cc, closeA=kind, t_closeA=tc)
    deadline = t0 + 4
    while now() < deadline and ctx.run.proc.poll() is None:
        time.sleep(0.02)
    out["be_conns"] = ctx.origin.count("accept")
    out["exited"] = ctx.run.proc.poll()
    out["t_exit"] = ms(now(), t0) if out["exited"] is not None else None
    k.close()
    a.close()
    return out


# ==========================================================================
# driver
# ==========================================================================

class Ctx:
    pass


def run_case(progname, binary, c, workdir):
    origin = Origin(**c["origin"])
    bh = None
    fe = free_port()
    text = c["cfg"].replace("@FE@", str(fe)).replace("@BE@", str(origin.port))
    for dead in ("@DEAD@", "@DEAD2@"):
        if dead in text:
            text = text.replace(dead, str(free_port()))
    if "@BH@" in text:
        bh = Blackhole()
        text = text.replace("@BH@", str(bh.port))
    run = Run("%s-%s" % (progname, c["name"]), binary, text, workdir)
    try:
        rc, msg = run.check()
        if rc != 0:
            return {"config": "rejected: " + msg.splitlines()[-1][:100] if msg else "rejected"}
        run.start(fe)
        ctx = Ctx()
        ctx.port, ctx.origin, ctx.run = fe, origin, run
        try:
            obs = c["fn"](ctx)
        except Exception as e:  # a client-side failure is an observation too
            obs = {"client_error": "%s: %s" % (type(e).__name__, e)}
        alive = run.proc.poll() is None
        if not alive and c["name"] != "soft_stop_sigusr1":
            obs["proxy_died"] = run.proc.returncode
        return obs
    except RuntimeError as e:
        return {"start_error": str(e)[:120]}
    finally:
        if run.proc:
            run.stop()
        origin.stop()
        if bh:
            bh.stop()


def differs(k, a, b, tol):
    if k.startswith("t_") and isinstance(a, int) and isinstance(b, int):
        return abs(a - b) > tol
    return a != b


def main():
    global VERBOSE
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--sluice", default=os.path.join(here, "..", "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tol", type=int, default=150, help="timing tolerance, ms")
    ap.add_argument("--only", default=None)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.v
    cases = [c for c in CASES if not args.only or args.only in c["name"]]
    progs = [("haproxy", args.haproxy), ("sluice", args.sluice)]
    workdir = tempfile.mkdtemp(prefix="timeout_diff.")
    results = {}  # (case, run) -> {prog: obs}
    tstart = now()
    for run_i in range(args.runs):
        for c in cases:
            for pn, pb in progs:
                obs = run_case(pn, pb, c, workdir)
                results.setdefault((c["name"], run_i), {})[pn] = obs
                vprint("run%d %-34s %-8s %s" % (run_i, c["name"], pn, obs))
    print("# %d cases x %d runs in %.0f s; tolerance %d ms; configs in %s\n"
          % (len(cases), args.runs, now() - tstart, args.tol, workdir))
    ndiff = 0
    for c in cases:
        keys = []
        for run_i in range(args.runs):
            r = results[(c["name"], run_i)]
            for k in list(r["haproxy"]) + list(r["sluice"]):
                if k not in keys:
                    keys.append(k)
        stable, unstable = [], []
        for k in keys:
            flags = [differs(k, results[(c["name"], i)]["haproxy"].get(k),
                             results[(c["name"], i)]["sluice"].get(k), args.tol)
                     for i in range(args.runs)]
            vals = [(results[(c["name"], i)]["haproxy"].get(k),
                     results[(c["name"], i)]["sluice"].get(k)) for i in range(args.runs)]
            if all(flags):
                stable.append((k, vals))
            elif any(flags):
                unstable.append((k, vals))
        tag = "DIFF" if stable else "same"
        ndiff += bool(stable)
        print("%-4s %-34s %s" % (tag, c["name"], c["desc"]))
        h0 = results[(c["name"], 0)]["haproxy"]
        s0 = results[(c["name"], 0)]["sluice"]
        if stable or VERBOSE:
            print("       haproxy: %s" % h0)
            print("       sluice : %s" % s0)
        for k, vals in stable:
            print("       ! %-26s haproxy=%s  sluice=%s" % (
                k, "/".join(repr(v[0]) for v in vals), "/".join(repr(v[1]) for v in vals)))
        for k, vals in unstable:
            print("       ~ %-26s (not in every run) haproxy=%s  sluice=%s" % (
                k, "/".join(repr(v[0]) for v in vals), "/".join(repr(v[1]) for v in vals)))
    print("\n# %d of %d cases with stable differences" % (ndiff, len(cases)))
    return 1 if ndiff else 0


if __name__ == "__main__":
    sys.exit(main())
