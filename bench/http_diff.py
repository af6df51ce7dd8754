#!/usr/bin/env python3
"""Differential test of the HTTP/1 request path: sluice vs HAProxy 2.6.

Self-contained (standard library only), loopback only, bounded in time.

    python3 bench/http_diff.py [--sluice target/release/sluice] [--haproxy /usr/sbin/haproxy]
                               [--runs 2] [--only SUBSTR] [-v]

What it does:
  * starts two identical raw-socket origin servers (one per proxy, so the two
    proxies can be driven in parallel without mixing their origin logs); the
    origin records the exact bytes of every request it receives and answers
    according to the behaviour named in the request path (/b/NAME);
  * writes one config and runs it on HAProxy and on sluice (different ports),
    after checking it with -c on both;
  * sends a corpus of raw requests (same bytes to both proxies), records the
    responses, whether the connection was closed, the bytes the origin got,
    and, when the client connection is still open, sends a probe request to
    detect a desynchronised keep-alive stream;
  * repeats the corpus --runs times and reports only differences that are
    identical in every run (others are listed as unstable);
  * checks at the end that sluice is alive, did not panic and that its fd
    count came back to its baseline.
"""

import argparse
import hashlib
import os
import re
import select
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import HOST, Listener, ProxyRun, free_port  # noqa: E402

# --------------------------------------------------------------------------
# timeouts used in the proxy config (seconds) and by the client
T_CONNECT = 1.0
T_CLIENT = 2.0
T_SERVER = 1.5
T_HTTPREQ = 1.0
ORIGIN_IDLE = 1.5        # origin closes idle keep-alive connections after this
DEFAULT_WAIT = 3.0       # client gives up on a case after this (a hang)
GRACE = 0.25             # after the last expected response, wait this for a close



# ==========================================================================
# origin server
# ==========================================================================

class ConnReader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.eof = False

    def fill(self, timeout):
        if self.eof:
            return False
        self.sock.settimeout(timeout)
        try:
            d = self.sock.recv(65536)
        except socket.timeout:
            return False
        except OSError:
            self.eof = True
            return False
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def take(self, n):
        d, self.buf = self.buf[:n], self.buf[n:]
        return d


HEAD_END = re.compile(rb"\r?\n\r?\n")


def parse_head_lines(head):
    lines = head.split(b"\n")
    lines = [l[:-1] if l.endswith(b"\r") else l for l in lines]
    return lines[0], [l for l in lines[1:] if l != b""]


def hdr_values(hlines, name):
    out = []
    for l in hlines:
        if b":" in l:
            n, v = l.split(b":", 1)
            if n.strip().lower() == name:
                out.append(v.strip())
    return out


class Origin(Listener):
    """Threaded raw-socket origin. Records each request's raw bytes."""

    def __init__(self, label):
        self.label = label
        self.lock = threading.Lock()
        self.log = []          # list of (conn_id, raw_bytes, note)
        self.conn_seq = 0
        super().__init__(backlog=256)

    def reset(self):
        with self.lock:
            out = self.log
            self.log = []
        return out

    def record(self, cid, raw, note=""):
        with self.lock:
            self.log.append((cid, raw, note))

    def on_accept(self, c):
        with self.lock:
            self.conn_seq += 1
            cid = self.conn_seq
        threading.Thread(target=self.serve, args=(c, cid), daemon=True).start()

    def serve(self, c, cid):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        r = ConnReader(c)
        try:
            while True:
                # wait for a request head
                t0 = time.monotonic()
                lead = b""
                while True:
                    # like most servers, skip empty lines before a request line
                    # (RFC 9112 2.2); normalisation flags them
                    while r.buf[:1] in (b"\n",) or r.buf[:2] == b"\r\n":
                        lead += r.take(1 if r.buf[:1] == b"\n" else 2)
                    if HEAD_END.search(r.buf):
                        break
                    left = ORIGIN_IDLE - (time.monotonic() - t0) if not r.buf else 5.0
                    if left <= 0 or r.eof:
                        if r.buf or lead:
                            self.record(cid, lead + r.buf, "incomplete-head")
                        return
                    r.fill(min(left, 0.5))
                m = HEAD_END.search(r.buf)
                head = lead + r.take(m.end())
                reqline, hlines = parse_head_lines(head.lstrip(b"\r\n"))
                parts = reqline.split(b" ")
                method = parts[0] if parts else b""
                target = parts[1] if len(parts) > 1 else b""
                te = b",".join(hdr_values(hlines, b"transfer-encoding")).lower()
                cls = hdr_values(hlines, b"content-length")
                expect = b",".join(hdr_values(hlines, b"expect")).lower()
                body = b""
                note = ""
                want_continue = b"100-continue" in expect
                is_chunked = bool(te) and te.split(b",")[-1].strip() == b"chunked"
                if te and te.split(b",")[-1].strip() == b"chunked":
                    if want_continue and not r.buf:
                        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    ok, body = self.read_chunked(r)
                    if not ok:
                        self.record(cid, head + body, "bad-chunked")
                        return
                elif cls:
                    try:
                        n = int(cls[0].split(b",")[0].strip())
                    except ValueError:
                        n = 0
                        note = "bad-cl"
                    if want_continue and n > 0 and len(r.buf) < n:
                        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    while len(r.buf) < n and not r.eof:
                        if not r.fill(5.0):
                            break
                    body = r.take(n)
                    if len(body) < n:
                        self.record(cid, head + body, "short-body")
                        return
                self.record(cid, head + body, note)
                mb = re.search(rb"/b/([A-Za-z0-9_]+)", target)
                beh = mb.group(1).decode() if mb else "normal"
                keep = self.respond(c, beh, method, target, body, is_chunked, hlines)
                if not keep:
                    return
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def read_chunked(self, r):
        raw = b""
        while True:
            while b"\n" not in r.buf:
                if not r.fill(5.0):
                    return False, raw + r.take(len(r.buf))
            i = r.buf.index(b"\n") + 1
            line = r.take(i)
            raw += line
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                return False, raw
            if size == 0:
                # trailers up to an empty line
                while True:
                    while b"\n" not in r.buf:
                        if not r.fill(5.0):
                            return False, raw + r.take(len(r.buf))
                    i = r.buf.index(b"\n") + 1
                    line = r.take(i)
                    raw += line
                    if line.strip(b"\r\n") == b"":
                        return True, raw
            while len(r.buf) < size + 2:
                if not r.fill(5.0):
                    return False, raw + r.take(len(r.buf))
            raw += r.take(size)
            crlf = r.buf[:2]
            if crlf == b"\r\n":
                raw += r.take(2)
            elif crlf[:1] == b"\n":
                raw += r.take(1)
            else:
                return False, raw

    def respond(self, c, beh, method, target, body, chunked, hlines=()):
        head_only = method == b"HEAD"
        pb = b"target=" + target[:200] + b"\n" + b"bodylen=%d\n" % (len(decode_chunked(body)[0]) if chunked else len(body))

        def normal(extra=b""):
            h = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                 % len(pb)) + extra + b"X-Origin: " + self.label.encode() + b"\r\n\r\n"
            return h + (b"" if head_only else pb)

        s = c.sendall
        if beh == "normal" or beh == "echo":
            s(normal())
        elif beh == "chunked":
            h = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                 b"Trailer: X-T\r\n\r\n")
            s(h if head_only else h + b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: yes\r\n\r\n")
        elif beh == "close":
            s(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + (b"" if head_only else pb))
            return False
        elif beh == "closehdr":
            s(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
              + (b"" if head_only else pb))
            return False
        elif beh == "s204":
            s(b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n")
        elif beh == "s204cl":
            s(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        elif beh == "s304":
            s(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 100\r\n\r\n")
        elif beh == "s304te":
            s(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nTransfer-Encoding: chunked\r\n\r\n")
        elif beh == "early103":
            s(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
            time.sleep(0.05)
            s(normal())
        elif beh == "c100":
            s(b"HTTP/1.1 100 Continue\r\n\r\n" + normal())
        elif beh == "clte":
            h = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
            s(h if head_only else h + b"5\r\nhello\r\n0\r\n\r\n")
        elif beh == "badstatus":
            s(b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "garbage":
            s(b"garbage\r\n\r\n")
            time.sleep(0.5)
            return False
        elif beh == "split":
            r = normal()
            s(r[:20])
            time.sleep(0.2)
            s(r[20:])
        elif beh == "slow":
            time.sleep(T_SERVER + 1.0)
            s(normal())
        elif beh == "noanswer":
            return False
        elif beh == "reset":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return False
        elif beh == "partial":
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            return False
        elif beh == "bighead":
            s(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 20000 + b"\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "dupcl":
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")
            time.sleep(0.3)
            return False
        elif beh == "samecl":
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "http10":
            s(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + (b"" if head_only else pb))
            return False
        elif beh == "badchunk":
            s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
            time.sleep(0.3)
            return False
        elif beh == "badchunk_late":
            s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            time.sleep(0.2)
            s(b"zz\r\nhello\r\n0\r\n\r\n")
            time.sleep(0.3)
            return False
        elif beh == "headbody":
            # answers a HEAD with its body anyway (a broken server)
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHELLO")
        elif beh == "s204body":
            s(b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSMUGG")
        elif beh == "noreason":
            s(b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "lfonly":
            s(b"HTTP/1.1 200 OK\nContent-Length: 2\nContent-Type: text/plain\n\nok")
        elif beh == "cookies":
            s(b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "extra":
            # 5 bytes sent for a Content-Length of 2
            s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokXYZ")
        elif beh == "ctlresp":
            s(b"HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "foldresp":
            s(b"HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "spcolon":
            s(b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok")
            time.sleep(0.3)
            return False
        elif beh == "headte":
            # HEAD answered with a chunked announcement and no body
            s(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        elif beh == "s101":
            key = hdr_values(hlines, b"sec-websocket-key")
            acc = b""
            if key:
                import base64
                acc = b"Sec-WebSocket-Accept: " + base64.b64encode(hashlib.sha1(
                    key[0] + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()) + b"\r\n"
            s(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              + acc + b"\r\n")
            # echo whatever comes next for a short while
            c.settimeout(1.0)
            try:
                d = c.recv(1000)
                if d:
                    c.sendall(b"ECHO:" + d)
            except OSError:
                pass
            return False
        elif beh == "resp_http09":
            s(b"hello\n")
            return False
        elif beh == "s999":
            s(b"HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\nok")
        elif beh == "s099":
            s(b"HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok")
        else:
            s(normal())
        return True


# ==========================================================================
# proxies
# ==========================================================================

CONFIG = """\
global
    maxconn 500
    tune.bufsize 16384

defaults
    mode http
    timeout connect {tc}ms
    timeout client {tcl}ms
    timeout server {ts}ms
    timeout http-request {thr}ms
    option http-keep-alive

frontend fe
    bind 127.0.0.1:{p1}
    default_backend be

frontend fe2
    bind 127.0.0.1:{p2}
    option forwardfor
    http-request set-header X-Set foo
    http-request del-header X-Del
    http-response set-header X-Resp bar
    default_backend be

backend be
    server s1 127.0.0.1:{origin}
"""


class Proxy(ProxyRun):
    """One proxy under test, with its own origin and the two frontends of CONFIG."""

    def __init__(self, name, binary, args, workdir):
        self.origin = Origin(name)
        self.p1 = free_port()
        self.p2 = free_port()
        cfg = CONFIG.format(tc=int(T_CONNECT * 1000), tcl=int(T_CLIENT * 1000),
                            ts=int(T_SERVER * 1000), thr=int(T_HTTPREQ * 1000),
                            p1=self.p1, p2=self.p2, origin=self.origin.port)
        super().__init__(name, binary, cfg, workdir, args)

    def start(self):
        super().start((self.p1, self.p2))

    def fds(self):
        # HAProxy may run threads only; count the main process's fds
        try:
            return len(os.listdir("/proc/%d/fd" % self.proc.pid))
        except OSError:
            return -1

    def stop(self):
        super().stop()
        self.origin.close()


# ==========================================================================
# client side: raw sockets, response parsing
# ==========================================================================

def parse_responses(buf, methods, eof):
    """Parse as many responses as possible. Returns (list, rest, junk)."""
    out = []
    pos = 0
    idx = 0
    junk = None
    while pos < len(buf):
        m = HEAD_END.search(buf, pos)
        if not m:
            if not buf[pos:].startswith(b"HTTP/"[:len(buf) - pos]) and not b"HTTP/".startswith(buf[pos:pos + 5]):
                junk = buf[pos:]
                pos = len(buf)
            break
        head = buf[pos:m.end()]
        sl, hl = parse_head_lines(head)
        mm = re.match(rb"HTTP/(\d\.\d) (\d{3})(?: (.*))?$", sl)
        if not mm:
            junk = buf[pos:]
            pos = len(buf)
            break
        code = int(mm.group(2))
        hdrs = {}
        for l in hl:
            if b":" in l:
                n, v = l.split(b":", 1)
                n = n.strip().lower().decode("latin1")
                v = v.strip().decode("latin1")
                hdrs[n] = (hdrs[n] + "," + v) if n in hdrs else v
        r = {"code": code, "version": mm.group(1).decode(), "reason": (mm.group(3) or b"").decode("latin1"),
             "hdrs": hdrs, "complete": False, "bodylen": 0, "body": b""}
        bstart = m.end()
        method = methods[idx] if idx < len(methods) else "GET"
        if 100 <= code < 200 and code != 101:
            r["complete"] = True
            r["interim"] = True
            out.append(r)
            pos = bstart
            continue
        if code == 101:
            r["complete"] = True
            r["body"] = buf[bstart:]
            r["bodylen"] = len(buf) - bstart
            out.append(r)
            pos = len(buf)
            break
        idx += 1
        if method == "HEAD" or code in (204, 304):
            r["complete"] = True
            out.append(r)
            pos = bstart
            continue
        te = hdrs.get("transfer-encoding", "").lower()
        if "chunked" in te:
            p = bstart
            ok = False
            body = b""
            while True:
                e = buf.find(b"\n", p)
                if e < 0:
                    break
                try:
                    size = int(buf[p:e].split(b";")[0].strip(), 16)
                except ValueError:
                    junk = buf[p:]
                    break
                if size == 0:
                    # trailers
                    q = e + 1
                    t = HEAD_END.search(buf, e - 1) if False else None
                    while True:
                        f = buf.find(b"\n", q)
                        if f < 0:
                            break
                        line = buf[q:f + 1]
                        q = f + 1
                        if line.strip(b"\r\n") == b"":
                            ok = True
                            break
                        t = line.strip(b"\r\n").decode("latin1")
                        if ":" in t:
                            k, v = t.split(":", 1)
                            t = k.strip().lower() + ": " + v.strip()
                        r.setdefault("trailers", []).append(t)
                    p = q
                    break
                if len(buf) < e + 1 + size + 2:
                    break
                body += buf[e + 1:e + 1 + size]
                p = e + 1 + size
                if buf[p:p + 2] == b"\r\n":
                    p += 2
                elif buf[p:p + 1] == b"\n":
                    p += 1
            r["body"] = body
            r["bodylen"] = len(body)
            if ok:
                r["complete"] = True
                out.append(r)
                pos = p
                continue
            out.append(r)
            pos = len(buf)
            break
        if "content-length" in hdrs:
            try:
                n = int(hdrs["content-length"].split(",")[0])
            except ValueError:
                n = 0
            have = min(n, len(buf) - bstart)
            r["body"] = buf[bstart:bstart + have]
            r["bodylen"] = have
            if have == n:
                r["complete"] = True
                out.append(r)
                pos = bstart + n
                continue
            out.append(r)
            pos = len(buf)
            break
        # close-delimited
        r["body"] = buf[bstart:]
        r["bodylen"] = len(buf) - bstart
        r["complete"] = eof
        r["close_delimited"] = True
        out.append(r)
        pos = len(buf)
        break
    return out, buf[pos:], junk


class Client:
    def __init__(self, port):
        self.s = socket.create_connection((HOST, port), timeout=2)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.setblocking(False)
        self.buf = b""
        self.closed = None  # None, "fin", "rst"
        self.send_error = None

    def pump(self, t):
        end = time.monotonic() + t
        got = False
        while self.closed is None:
            left = end - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([self.s], [], [], left)
            if not r:
                break
            try:
                d = self.s.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                self.closed = "rst"
                break
            except OSError:
                self.closed = "rst"
                break
            if not d:
                self.closed = "fin"
                break
            self.buf += d
            got = True
        return got

    def send(self, data):
        self.s.setblocking(True)
        self.s.settimeout(2)
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError) as e:
            self.send_error = type(e).__name__
        self.s.setblocking(False)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class Case:
    def __init__(self, name, segs, methods=("GET",), fe=1, wait=DEFAULT_WAIT, probe=True,
                 shut_wr=False, note="", linger=False):
        self.name = name
        # segs: list of bytes or (delay, bytes)
        self.segs = [(0.0, s) if isinstance(s, (bytes, bytearray)) else s for s in segs]
        self.methods = list(methods)
        self.fe = fe
        self.wait = wait
        self.probe = probe
        self.shut_wr = shut_wr
        self.note = note
        self.linger = linger   # keep waiting for a close after the responses


def run_case(proxy, case):
    origin = proxy.origin
    origin.reset()
    port = proxy.p1 if case.fe == 1 else proxy.p2
    obs = {}
    try:
        c = Client(port)
    except OSError as e:
        return {"connect_error": type(e).__name__}
    t0 = time.monotonic()
    for delay, data in case.segs:
        if delay:
            c.pump(delay)
        if c.closed is not None:
            break
        c.send(data)
    if case.shut_wr:
        try:
            c.s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    t_sent = time.monotonic()
    deadline = t0 + case.wait + sum(d for d, _ in case.segs)
    nexp = len(case.methods)
    t_answer = None
    while c.closed is None and time.monotonic() < deadline:
        resps, rest, junk = parse_responses(c.buf, case.methods, False)
        finals = [r for r in resps if r["complete"] and not r.get("interim")]
        if len(finals) >= nexp and not rest:
            if t_answer is None:
                t_answer = time.monotonic()
            if not case.linger:
                # all expected responses: short grace to observe a close
                c.pump(GRACE)
                break
        c.pump(min(0.05, max(0.0, deadline - time.monotonic())))
    t_end = time.monotonic()
    obs["t_answer"] = None if t_answer is None else t_answer - t_sent
    obs["t_close"] = None if c.closed is None else t_end - t_sent
    elapsed = time.monotonic() - t0
    resps, rest, junk = parse_responses(c.buf, case.methods, c.closed is not None)
    obs["responses"] = resps
    obs["rawbuf"] = c.buf
    obs["junk"] = junk
    obs["rest"] = rest
    obs["closed"] = c.closed
    obs["send_error"] = c.send_error
    obs["elapsed"] = elapsed
    obs["hang"] = (c.closed is None and not any(r["complete"] and not r.get("interim") for r in resps))
    # desync probe on a still-open connection
    obs["probe"] = None
    if case.probe and c.closed is None and not obs["hang"]:
        tag = b"probe-" + case.name.encode()
        before = len(c.buf)
        c.send(b"GET /b/normal?" + tag + b" HTTP/1.1\r\nHost: example.com\r\n\r\n")
        pend = time.monotonic() + 3.0
        pr = None
        while time.monotonic() < pend:
            c.pump(0.1)
            rr, _, _ = parse_responses(c.buf[before:], ["GET"], c.closed is not None)
            fin = [r for r in rr if r["complete"] and not r.get("interim")]
            if fin:
                pr = fin[0]
                break
            if c.closed is not None:
                break
        if pr is None:
            obs["probe"] = "closed" if c.closed else "no-answer"
        else:
            ok = b"target=/b/normal?" + tag in pr["body"]
            obs["probe"] = "%d%s" % (pr["code"], "" if ok else " WRONG-BODY(%r)" % pr["body"][:40])
    c.close()
    time.sleep(0.05)
    obs["origin"] = origin.reset()
    return obs


# ==========================================================================
# observation summary and comparison
# ==========================================================================

REQLINE = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^ ]+ HTTP/[0-9]\.[0-9]$")


def decode_chunked(body):
    """Decode a chunked body as sent to the origin: (data, trailers, flags)."""
    data, trailers, flags = b"", [], []
    p = 0
    while True:
        e = body.find(b"\n", p)
        if e < 0:
            flags.append("unterminated")
            break
        line = body[p:e + 1]
        if not line.endswith(b"\r\n"):
            flags.append("bare-LF")
        sz = line.rstrip(b"\r\n")
        if b";" in sz:
            flags.append("chunk-ext")
            sz = sz.split(b";")[0]
        if sz != sz.strip() or sz.startswith(b"0") and len(sz) > 1:
            flags.append("size-not-canonical(%r)" % sz)
        try:
            n = int(sz.strip(), 16)
        except ValueError:
            flags.append("bad-size")
            break
        p = e + 1
        if n == 0:
            while True:
                e = body.find(b"\n", p)
                if e < 0:
                    flags.append("unterminated-trailers")
                    break
                line = body[p:e + 1]
                p = e + 1
                if not line.endswith(b"\r\n"):
                    flags.append("bare-LF")
                t = line.rstrip(b"\r\n")
                if not t:
                    break
                if b":" in t:
                    k, v = t.split(b":", 1)
                    trailers.append(k.strip().lower() + b": " + v.strip())
                else:
                    trailers.append(b"?" + t)
            break
        data += body[p:p + n]
        p += n
        if body[p:p + 2] == b"\r\n":
            p += 2
        elif body[p:p + 1] == b"\n":
            flags.append("bare-LF")
            p += 1
        else:
            flags.append("missing-CRLF")
    if p < len(body):
        flags.append("extra=%r" % body[p:p + 20])
    return data, trailers, sorted(set(flags))


def norm_origin_req(raw, note):
    """Normalise one request as the origin got it: header names lowercased,
    values trimmed, chunked bodies decoded (non-canonical framing flagged),
    line endings and leading empty lines flagged. Returns a printable string."""
    flags = []
    stripped = raw.lstrip(b"\r\n")
    if len(stripped) != len(raw):
        flags.append("LEADING-EMPTY-LINES")
    raw = stripped
    m = HEAD_END.search(raw)
    if not m:
        return "UNPARSED[%s] %s" % (note, short(raw))
    head, body = raw[:m.end()], raw[m.end():]
    if b"\r\n" not in head:
        flags.append("LF-only")
    elif head.count(b"\n") != head.count(b"\r\n"):
        flags.append("mixed-LF")
    rl, hl = parse_head_lines(head)
    if not REQLINE.match(rl):
        flags.append("BAD-REQUEST-LINE")
    hs = []
    chunked = False
    for l in hl:
        if b":" in l:
            n, v = l.split(b":", 1)
            n = n.strip().lower()
            v = v.strip()
            if n == b"connection":
                v = b", ".join(t.strip() for t in v.lower().split(b","))
            hs.append(n + b": " + v)
            if n == b"transfer-encoding" and v.strip().lower().endswith(b"chunked"):
                chunked = True
        else:
            hs.append(b"?" + l)
    # header order is not compared (stable sort by name keeps the order of
    # repeated fields)
    hs.sort(key=lambda h: h.split(b":", 1)[0])
    s = short(rl) + " {" + ", ".join(short(h, 60) for h in hs) + "}"
    if body and chunked:
        data, trailers, cflags = decode_chunked(body)
        s += " chunked-body=" + short(data, 60)
        if trailers:
            s += " trailers={" + ", ".join(short(t, 40) for t in trailers) + "}"
        flags += ["chunk:" + f for f in cflags]
    elif body:
        s += " body=" + short(body, 60)
    if note:
        flags.append(note)
    if flags:
        s += " [" + " ".join(flags) + "]"
    return s


def short(b, n=80):
    if isinstance(b, str):
        b = b.encode("latin1")
    if len(b) > n:
        h = hashlib.sha1(b).hexdigest()[:8]
        return repr(b[:n // 2])[2:-1] + "...(%dB #%s)" % (len(b), h)
    return repr(b)[2:-1]


def tbucket(t):
    for lo, hi, label in ((0.7, 1.3, "1s"), (1.3, 1.8, "1.5s"), (1.8, 2.4, "2s"), (2.4, 3.3, "3s")):
        if lo <= t < hi:
            return label
    return ">3.3s" if t >= 3.3 else "<0.7s"


def summarise(obs):
    """Reduce an observation to comparable fields (dict of str -> str)."""
    if "connect_error" in obs:
        return {"connect": obs["connect_error"]}
    f = {}
    resps = []
    for r in obs["responses"]:
        proxy_err = r["code"] >= 400
        parts = [str(r["code"])]
        if r.get("interim"):
            parts.append("(1xx)")
        else:
            h = r["hdrs"]
            if "connection" in h:
                parts.append("conn=" + h["connection"].lower())
            if "transfer-encoding" in h:
                parts.append("te=" + h["transfer-encoding"].lower())
            if not proxy_err:
                if "content-length" in h:
                    parts.append("cl=" + h["content-length"])
                parts.append("body=%d" % r["bodylen"])
                if r.get("close_delimited"):
                    parts.append("close-delim")
                if r.get("trailers"):
                    parts.append("trailers=" + "|".join(r["trailers"]))
                if "x-resp" in h:
                    parts.append("x-resp=" + h["x-resp"])
            if "content-type" in h:
                parts.append("ctype=" + h["content-type"].split(";")[0])
            if not r["complete"]:
                parts.append("INCOMPLETE")
        resps.append(" ".join(parts))
    f["resp"] = " ; ".join(resps) if resps else "(none)"
    if obs["junk"]:
        f["junk"] = short(obs["junk"], 40)
    f["closed"] = obs["closed"] or "open"
    # coarse timing, in buckets around the configured timeouts (1 / 1.5 / 2 s)
    tc = obs.get("t_close")
    if tc is not None and tc >= 0.7:
        f["timing"] = "closed after ~%s" % tbucket(tc)
    ta = obs.get("t_answer")
    if ta is not None and ta >= 0.7:
        f["timing"] = "answered after ~%s" % tbucket(ta) + (
            ", closed after ~%s" % tbucket(tc) if tc is not None else "")
    if obs["hang"]:
        f["hang"] = "HANG (no response in %.1fs, connection open)" % obs["elapsed"]
    if obs["probe"] is not None:
        f["probe"] = obs["probe"]
    f["origin"] = " || ".join(norm_origin_req(raw, note) for _, raw, note in obs["origin"]) or "(nothing)"
    return f


# ==========================================================================
# corpus
# ==========================================================================

def corpus():
    H = b"Host: example.com\r\n"
    C = []

    def add(*a, **k):
        C.append(Case(*a, **k))

    def get(path, extra=b"", ver=b"HTTP/1.1", method=b"GET"):
        return method + b" " + path + b" " + ver + b"\r\n" + H + extra + b"\r\n"

    # ---- valid requests, response behaviours
    add("get_basic", [get(b"/b/normal")])
    add("get_chunked_trailers", [get(b"/b/chunked")])
    add("get_chunked_te_trailers", [get(b"/b/chunked", b"TE: trailers\r\n")])
    add("get_close_delimited", [get(b"/b/close")])
    add("get_close_hdr", [get(b"/b/closehdr")])
    add("get_204", [get(b"/b/s204")])
    add("get_204_cl0", [get(b"/b/s204cl")])
    add("get_304_cl", [get(b"/b/s304")])
    add("get_304_te", [get(b"/b/s304te")])
    add("head_normal", [get(b"/b/normal", method=b"HEAD")], methods=["HEAD"])
    add("head_chunked", [get(b"/b/headte", method=b"HEAD")], methods=["HEAD"])
    add("head_close", [get(b"/b/close", method=b"HEAD")], methods=["HEAD"])
    add("resp_103_then_200", [get(b"/b/early103")])
    add("resp_unsolicited_100", [get(b"/b/c100")])
    add("resp_cl_and_te", [get(b"/b/clte")])
    add("resp_invalid_status", [get(b"/b/badstatus")])
    add("resp_garbage", [get(b"/b/garbage")])
    add("resp_http09", [get(b"/b/resp_http09")])
    add("resp_split_head", [get(b"/b/split")])
    add("resp_slow_504", [get(b"/b/slow")], wait=4.0)
    add("resp_no_answer", [get(b"/b/noanswer")])
    add("resp_reset", [get(b"/b/reset")])
    add("resp_truncated_body", [get(b"/b/partial")])
    add("resp_head_too_big", [get(b"/b/bighead")])
    add("resp_dup_cl_conflict", [get(b"/b/dupcl")])
    add("resp_dup_cl_same", [get(b"/b/samecl")])
    add("resp_http10_close", [get(b"/b/http10")])
    add("resp_bad_chunk", [get(b"/b/badchunk")])
    add("resp_bad_chunk_late", [get(b"/b/badchunk_late")])
    add("resp_head_with_body", [get(b"/b/headbody", method=b"HEAD")], methods=["HEAD"])
    add("resp_204_with_body", [get(b"/b/s204body")])
    add("resp_head_with_body_pipelined", [get(b"/b/headbody", method=b"HEAD") + get(b"/b/normal?2")],
        methods=["HEAD", "GET"])
    add("resp_no_reason", [get(b"/b/noreason")])
    add("resp_lf_only", [get(b"/b/lfonly")])
    add("resp_two_set_cookie", [get(b"/b/cookies")])
    add("resp_extra_bytes_then_probe", [get(b"/b/extra")])
    add("resp_ctl_in_header", [get(b"/b/ctlresp")])
    add("resp_obs_fold", [get(b"/b/foldresp")])
    add("resp_space_before_colon", [get(b"/b/spcolon")])
    add("resp_status_999", [get(b"/b/s999")])
    add("resp_status_099", [get(b"/b/s099")])

    # ---- valid requests, request shapes
    add("post_cl", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 11\r\n\r\nhello world"])
    add("post_cl_zero", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 0\r\n\r\n"])
    add("post_no_length_11", [b"POST /b/echo HTTP/1.1\r\n" + H + b"\r\n"])
    add("post_chunked_trailers",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
         b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"])
    add("post_chunked_ext",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
         b"5;ext=1\r\nhello\r\n0\r\n\r\n"])
    add("post_chunked_split",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhel",
         (0.2, b"lo\r\n0\r\n\r\n")])
    add("get_with_body_cl", [b"GET /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc"])
    add("pipelined_3_get", [get(b"/b/normal?1") + get(b"/b/normal?2") + get(b"/b/normal?3")],
        methods=["GET"] * 3)
    add("pipelined_post_get",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 4\r\n\r\nabcd" + get(b"/b/normal?2")],
        methods=["GET", "GET"])
    add("pipelined_head_get", [get(b"/b/normal", method=b"HEAD") + get(b"/b/normal?2")],
        methods=["HEAD", "GET"])
    add("pipelined_20_get", [b"".join(get(b"/b/normal?%d" % i) for i in range(20))],
        methods=["GET"] * 20)
    add("pipelined_after_close",
        [get(b"/b/normal?1", b"Connection: close\r\n") + get(b"/b/normal?2")], methods=["GET"])
    add("http10_plain", [b"GET /b/normal HTTP/1.0\r\n" + H + b"\r\n"])
    add("http10_keepalive", [b"GET /b/normal HTTP/1.0\r\n" + H + b"Connection: keep-alive\r\n\r\n"])
    add("http10_no_host", [b"GET /b/normal HTTP/1.0\r\n\r\n"])
    add("http10_chunked_resp", [b"GET /b/chunked HTTP/1.0\r\n" + H + b"Connection: keep-alive\r\n\r\n"])
    add("http10_post_no_length", [b"POST /b/echo HTTP/1.0\r\n" + H + b"\r\nabc"])
    add("http11_conn_close", [get(b"/b/normal", b"Connection: close\r\n")])
    add("http11_close_delim_resp_ka", [get(b"/b/close", b"Connection: keep-alive\r\n")])
    add("absolute_uri", [b"GET http://example.com/b/normal HTTP/1.1\r\n" + H + b"\r\n"])
    add("absolute_uri_host_mismatch",
        [b"GET http://other.example/b/normal HTTP/1.1\r\nHost: example.com\r\n\r\n"])
    add("absolute_uri_https", [b"GET https://example.com/b/normal HTTP/1.1\r\n" + H + b"\r\n"])
    add("expect_100_wait",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n",
         (0.4, b"hello")])
    add("expect_100_immediate",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\nhello"])
    add("expect_100_http10",
        [b"POST /b/echo HTTP/1.0\r\n" + H + b"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n",
         (0.4, b"hello")])
    add("expect_other", [get(b"/b/normal", b"Expect: foo\r\n")])
    add("options_star", [b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n"])
    add("connect_method", [b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"],
        probe=False)
    add("trace_method", [get(b"/b/normal", method=b"TRACE")])
    add("odd_method_token", [get(b"/b/normal", method=b"M-SEARCH")])
    add("odd_method_tchars", [get(b"/b/normal", method=b"F!#$%&'*+.^_`|~O")])
    add("lowercase_method", [get(b"/b/normal", method=b"get")])
    add("long_method", [get(b"/b/normal", method=b"X" * 100)])
    add("upgrade_websocket",
        [get(b"/b/s101", b"Connection: Upgrade\r\nUpgrade: websocket\r\n"), (0.3, b"ping")],
        probe=False)
    add("upgrade_websocket_full",
        [get(b"/b/s101", b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
                         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"),
         (0.3, b"ping")], probe=False)
    add("upgrade_h2c", [get(b"/b/normal", b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                                            b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n")])
    add("fe2_headers",
        [get(b"/b/normal", b"X-Del: gone\r\nX-Set: client\r\nX-Forwarded-For: 1.2.3.4\r\n")], fe=2)
    add("fe2_headers_http10", [b"GET /b/normal HTTP/1.0\r\nX-Del: a\r\n\r\n"], fe=2)
    add("query_and_pct", [get(b"/b/normal?a=1&b=%20x%2F")])
    add("uri_fragment", [get(b"/b/normal#frag")])
    add("uri_no_slash", [get(b"b/normal")])
    add("uri_8bit", [get(b"/b/normal/\xc3\xa9")])
    add("header_8bit_value", [get(b"/b/normal", b"X-U: caf\xc3\xa9\r\n")])
    add("header_ws_trim", [get(b"/b/normal", b"X-W:    spaced   \t\r\n")])
    add("header_empty_value", [get(b"/b/normal", b"X-E:\r\n")])
    add("host_with_port", [b"GET /b/normal HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"])
    add("host_empty", [b"GET /b/normal HTTP/1.1\r\nHost:\r\n\r\n"])
    add("host_invalid_chars", [b"GET /b/normal HTTP/1.1\r\nHost: a b\r\n\r\n"])
    add("leading_crlf", [b"\r\n\r\n" + get(b"/b/normal")])
    add("leading_one_crlf", [b"\r\n" + get(b"/b/normal")])
    add("leading_lf", [b"\n" + get(b"/b/normal")])
    add("leading_crlf_separate_send", [b"\r\n", (0.2, get(b"/b/normal"))])
    add("crlf_between_pipelined", [get(b"/b/normal?1") + b"\r\n" + get(b"/b/normal?2")],
        methods=["GET", "GET"])
    add("post_then_crlf_then_get",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 3\r\n\r\nabc\r\n" + get(b"/b/normal?2")],
        methods=["GET", "GET"])
    add("crlf_after_keepalive_response", [get(b"/b/normal?1"), (0.3, b"\r\n" + get(b"/b/normal?2"))],
        methods=["GET", "GET"])
    add("connection_close_keepalive", [get(b"/b/normal", b"Connection: close, keep-alive\r\n")])
    add("proxy_connection_hdr", [get(b"/b/normal", b"Proxy-Connection: keep-alive\r\n")])
    add("connection_lists_header", [get(b"/b/normal", b"Connection: X-Hop\r\nX-Hop: 1\r\n")])
    add("client_shut_wr", [get(b"/b/normal")], shut_wr=True, probe=False)
    add("head_split_slowly", [b"GET /b/normal HT", (0.3, b"TP/1.1\r\nHost: exa"), (0.3, b"mple.com\r\n\r\n")])
    add("te_chunked_on_get_zero", [b"GET /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"])
    add("te_chunked_uppercase",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("te_gzip_chunked",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("cl_leading_zeros", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 0005\r\n\r\nhello"])
    add("cl_dup_same", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"])
    add("cl_list_same", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 5, 5\r\n\r\nhello"])
    add("trailer_with_cl",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
         b"3\r\nabc\r\n0\r\nContent-Length: 99\r\n\r\n"])

    # ---- malformed requests
    add("cl_conflict_dup", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"])
    add("cl_conflict_list", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 5, 6\r\n\r\nhello!"])
    add("cl_negative", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n"])
    add("cl_plus", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: +5\r\n\r\nhello"])
    add("cl_non_numeric", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: abc\r\n\r\n"])
    add("cl_overflow", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\nx"])
    add("cl_empty", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length:\r\n\r\n"])
    add("cl_inner_space", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 1 1\r\n\r\nhello world"])
    add("cl_and_te",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"3\r\nabc\r\n0\r\n\r\n"])
    add("te_chunked_gzip",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("te_gzip_only", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\n\r\nabc"])
    add("te_unknown", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: foo\r\n\r\nabc"])
    add("te_identity", [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: identity\r\n\r\n"])
    add("te_chunked_twice",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("te_two_headers",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"3\r\nabc\r\n0\r\n\r\n"])
    add("te_http10",
        [b"POST /b/echo HTTP/1.0\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("te_space_before_colon",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding : chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("te_vertical_tab",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: \x0bchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"])
    add("chunk_size_invalid",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"])
    add("chunk_size_overflow",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
         b"fffffffffffffffff1\r\nabc\r\n0\r\n\r\n"])
    add("chunk_size_0x",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n"])
    add("chunk_size_trailing_space",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n"])
    add("chunk_missing_crlf",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcX0\r\n\r\n"])
    add("chunk_bare_lf",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n"])
    add("chunk_trailer_no_colon",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nbogus\r\n\r\n"])
    add("obs_fold", [get(b"/b/normal", b"X-A: a\r\n  folded\r\n")])
    add("obs_fold_first_header", [b"GET /b/normal HTTP/1.1\r\n folded: x\r\n" + H + b"\r\n"])
    add("ctl_in_header_value", [get(b"/b/normal", b"X-A: a\x01b\r\n")])
    add("del_in_header_value", [get(b"/b/normal", b"X-A: a\x7fb\r\n")])
    add("nul_in_header_value", [get(b"/b/normal", b"X-A: a\x00b\r\n")])
    add("cr_in_header_value", [get(b"/b/normal", b"X-A: a\rb\r\n")])
    add("space_before_colon", [get(b"/b/normal", b"X-A : b\r\n")])
    add("empty_header_name", [get(b"/b/normal", b": b\r\n")])
    add("header_no_colon", [get(b"/b/normal", b"X-NoColon\r\n")])
    add("header_name_bad_char", [get(b"/b/normal", b"X(A): b\r\n")])
    add("bare_lf_request", [b"GET /b/normal HTTP/1.1\nHost: example.com\n\n"])
    add("mixed_lf_crlf", [b"GET /b/normal HTTP/1.1\r\nHost: example.com\nX-A: b\r\n\r\n"])
    add("uri_too_long", [get(b"/b/normal?" + b"a" * 20000)])
    add("uri_just_under_buf", [get(b"/b/normal?" + b"a" * 15000)])
    add("header_too_large", [get(b"/b/normal", b"X-Big: " + b"b" * 20000 + b"\r\n")])
    add("header_way_too_large", [get(b"/b/normal", b"X-Big: " + b"b" * 200000 + b"\r\n")])
    add("headers_too_many", [get(b"/b/normal", b"".join(b"X-H%d: v\r\n" % i for i in range(120)))])
    add("headers_100", [get(b"/b/normal", b"".join(b"X-H%d: v\r\n" % i for i in range(98)))])
    add("nul_in_uri", [get(b"/b/nor\x00mal")])
    add("space_in_uri", [get(b"/b/nor mal")])
    add("ctl_in_uri", [get(b"/b/nor\x01mal")])
    add("del_in_uri", [get(b"/b/nor\x7fmal")])
    add("invalid_method_char", [get(b"/b/normal", method=b"G@T")])
    add("empty_method", [b" /b/normal HTTP/1.1\r\n" + H + b"\r\n"])
    add("version_http20", [get(b"/b/normal", ver=b"HTTP/2.0")])
    add("version_http12", [get(b"/b/normal", ver=b"HTTP/1.2")])
    add("version_http09_line", [b"GET /b/normal\r\n" + H + b"\r\n"])
    add("version_lowercase", [get(b"/b/normal", ver=b"http/1.1")])
    add("version_garbage", [get(b"/b/normal", ver=b"HTTP/1.x")])
    add("version_http3", [get(b"/b/normal", ver=b"HTTP/3.0")])
    add("double_space_reqline", [b"GET  /b/normal HTTP/1.1\r\n" + H + b"\r\n"])
    add("tab_in_reqline", [b"GET\t/b/normal HTTP/1.1\r\n" + H + b"\r\n"])
    add("missing_host_11", [b"GET /b/normal HTTP/1.1\r\n\r\n"])
    add("two_host_headers", [b"GET /b/normal HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"])
    add("two_host_same", [b"GET /b/normal HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n"])
    add("request_then_garbage", [get(b"/b/normal") + b"garbage\r\n\r\n"], methods=["GET", "GET"])
    add("garbage_only", [b"\x16\x03\x01\x00\x05hello\r\n\r\n"])
    add("head_never_finished_408", [b"GET /b/normal HTTP/1.1\r\n" + H], wait=3.0)
    add("idle_no_bytes", [b""], wait=3.0, probe=False)
    add("idle_after_response", [get(b"/b/normal")], wait=3.0, probe=False, linger=True)
    add("body_shorter_than_cl",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 10\r\n\r\nabc"], wait=4.0)
    add("chunked_body_unfinished",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"], wait=4.0)
    add("body_shorter_then_close",
        [b"POST /b/echo HTTP/1.1\r\n" + H + b"Content-Length: 10\r\n\r\nabc"], shut_wr=True,
        probe=False)
    return C


# idle_after_response: only the first response is expected, then the client
# idles; the interesting part is whether/how the connection gets closed.


# ==========================================================================
# main
# ==========================================================================

def compare(a, b):
    keys = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k) != b.get(k)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", default=None, help="run only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    ap.add_argument("--raw", action="store_true",
                    help="with -v: also print raw client/origin bytes of each case")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="http_diff.")
    hap = Proxy("haproxy", args.haproxy, ["-db"], work)
    slu = Proxy("sluice", args.sluice, ["-db"], work)
    for p in (hap, slu):
        rc, out = p.check()
        if rc != 0:
            print("config check failed for %s (rc=%d):\n%s" % (p.name, rc, out))
            sys.exit(2)
    cases = corpus()
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    print("config: %s (workdir %s); %d cases x %d runs" % (hap.cfg, work, len(cases), args.runs))

    results = {}   # name -> list of (sum_hap, sum_slu, obs_hap, obs_slu)
    problems = []
    try:
        hap.start()
        slu.start()
        time.sleep(0.3)
        base_fd = slu.fds()
        base_fd_hap = hap.fds()
        for run in range(args.runs):
            for case in cases:
                res = {}

                def go(p, key):
                    try:
                        res[key] = run_case(p, case)
                    except Exception as e:  # a harness bug must not hide as a difference
                        res[key] = {"connect_error": "harness:%r" % e}
                th = [threading.Thread(target=go, args=(hap, "h")),
                      threading.Thread(target=go, args=(slu, "s"))]
                for t in th:
                    t.start()
                for t in th:
                    t.join()
                sh, ss = summarise(res["h"]), summarise(res["s"])
                results.setdefault(case.name, []).append((sh, ss, res["h"], res["s"]))
                if args.verbose:
                    d = compare(sh, ss)
                    print("[run %d] %-32s %s" % (run + 1, case.name, "DIFF " + ",".join(d) if d else
                                                 "same: %s | %s%s" % (sh.get("resp"), sh.get("closed"),
                                                                      " HANG" if "hang" in sh else "")))
                    if args.raw:
                        for key, o in (("haproxy", res["h"]), ("sluice", res["s"])):
                            print("    %s client<-: %s" % (key, short(o.get("rawbuf", b""), 600)))
                            print("    %s closed=%s elapsed=%.2f" % (key, o.get("closed"), o.get("elapsed", 0)))
                            for cid, raw, note in o.get("origin", []):
                                print("    %s origin[c%d]: %s %s" % (key, cid, short(raw, 400), note))
                if not slu.alive():
                    problems.append("sluice DIED during case %s (run %d)" % (case.name, run + 1))
                    print(problems[-1])
                    break
            if not slu.alive():
                break
        # let keep-alive/idle connections expire, then check fds
        time.sleep(max(T_CLIENT, ORIGIN_IDLE, T_HTTPREQ) + 1.5)
        alive = slu.alive()
        end_fd = slu.fds() if alive else -1
        end_fd_hap = hap.fds()
    finally:
        hap.stop()
        slu.stop()

    # ---- report
    stable, unstable, same = [], [], []
    for c in cases:
        runs = results.get(c.name, [])
        diffs = [compare(sh, ss) for sh, ss, _, _ in runs]
        if not any(diffs):
            same.append(c.name)
            continue
        sigs = [tuple((k, sh.get(k), ss.get(k)) for k in compare(sh, ss)) for sh, ss, _, _ in runs]
        if len(runs) == args.runs and all(diffs) and all(s == sigs[0] for s in sigs):
            stable.append((c, runs[0]))
        else:
            unstable.append((c, runs, diffs))

    print()
    print("=" * 100)
    print("STABLE DIFFERENCES (identical in all %d runs)" % args.runs)
    print("=" * 100)
    for c, (sh, ss, oh, os_) in stable:
        print("\n## %s   [fe%d]" % (c.name, c.fe))
        req = b"".join(d for _, d in c.segs)
        print("   request: %s" % short(req, 110))
        for k in compare(sh, ss):
            print("   %-7s haproxy: %s" % (k, sh.get(k, "-")))
            print("   %-7s sluice : %s" % ("", ss.get(k, "-")))
    if unstable:
        print("\n" + "=" * 100)
        print("UNSTABLE (differ in some runs only, or differently): not counted")
        print("=" * 100)
        for c, runs, diffs in unstable:
            print("\n## %s" % c.name)
            for i, ((sh, ss, _, _), d) in enumerate(zip(runs, diffs)):
                if not d:
                    print("   run %d: same" % (i + 1))
                for k in d:
                    print("   run %d %-7s haproxy: %s" % (i + 1, k, sh.get(k, "-")))
                    print("   run %d %-7s sluice : %s" % (i + 1, "", ss.get(k, "-")))

    # ---- sluice health
    err = open(slu.errpath, errors="replace").read()
    if "panicked" in err or "RUST_BACKTRACE" in err:
        problems.append("sluice stderr mentions a panic: see %s" % slu.errpath)
    if not alive:
        problems.append("sluice is not alive after the corpus")
    if alive and end_fd != base_fd:
        problems.append("sluice fd count: baseline %d, after corpus %d" % (base_fd, end_fd))
    for c in cases:
        for sh, ss, oh, os_ in results.get(c.name, []):
            if "hang" in ss and "hang" not in sh:
                problems.append("sluice hang (haproxy answered): %s" % c.name)
            if "WRONG-BODY" in ss.get("probe", ""):
                problems.append("sluice desync (probe got another response): %s" % c.name)
    problems = list(dict.fromkeys(problems))

    print("\n" + "=" * 100)
    print("SUMMARY")
    print("=" * 100)
    print("cases: %d, runs: %d" % (len(cases), args.runs))
    print("same in every run: %d" % len(same))
    print("stable differences: %d" % len(stable))
    print("unstable: %d" % len(unstable))
    print("sluice alive: %s; fds baseline %d -> end %d (haproxy %d -> %d)"
          % (alive, base_fd, end_fd, base_fd_hap, end_fd_hap))
    if problems:
        print("SLUICE PROBLEMS:")
        for p in problems:
            print("  - " + p)
    else:
        print("no sluice problems detected (no death, panic, fd leak, hang-only-in-sluice or desync)")
    print("stable differing cases: " + ", ".join(c.name for c, _ in stable))


if __name__ == "__main__":
    main()
