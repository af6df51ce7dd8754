#!/usr/bin/env python3
"""SPOE cost: sluice and HAProxy side by side, each sending one NOTIFY per request to the
same SPOP agent, answering the request itself from the variable the agent set.

    python3 bench/spoe_bench.py [--duration 6] [--repeat 3] [--conns 20]

Per repetition each proxy in turn (HAProxy, sluice) is started fresh (nbthread 1, pinned
to CPU 1), checked to answer with the agent's value, and loaded by wrk (keep-alive, pinned
to CPU 0 with the agent) for --duration s. Reported: requests/s, the proxy's CPU us per
request (utime+stime of its process over the run), wrk's p99, and the same without SPOE
(the filter line removed) to show what an exchange adds. The agent (Python, a thread per
connection, frames answered in order) is the same for both; it bounds requests/s, so the
comparison that matters is the proxy CPU per request.
"""

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import difftool  # noqa: E402
import run  # noqa: E402  (bench/run.py: its wrk parser and CPU accounting)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def put_varint(out, v):
    if v < 240:
        out.append(v)
        return
    out.append((v & 0xFF) | 240)
    v = (v - 240) >> 4
    while v >= 128:
        out.append((v & 0xFF) | 128)
        v = (v - 128) >> 7
    out.append(v)


def get_varint(b, p):
    x = b[p]
    p += 1
    if x < 240:
        return x, p
    v, s = x, 4
    while True:
        y = b[p]
        p += 1
        v += y << s
        s += 7
        if y < 128:
            return v, p


def put_str(out, s):
    put_varint(out, len(s))
    out.extend(s)


def frame(kind, sid, fid, payload):
    f = bytearray([kind]) + struct.pack(">I", 1)
    put_varint(f, sid)
    put_varint(f, fid)
    f += payload
    return struct.pack(">I", len(f)) + bytes(f)


def recv_exact(c, n):
    buf = bytearray()
    while len(buf) < n:
        x = c.recv(n - len(buf))
        if not x:
            return None
        buf += x
    return bytes(buf)


class Agent(difftool.Listener):
    """HELLO answered with version 2.0; each NOTIFY acknowledged with
    set-var(txn.<prefix>.score) = 42."""

    HELLO = None

    def on_accept(self, c):
        threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = bytearray()
        put_str(hello, b"version")
        hello.append(8)
        put_str(hello, b"2.0")
        put_str(hello, b"max-frame-size")
        hello.append(3)
        put_varint(hello, 16380)
        put_str(hello, b"capabilities")
        hello.append(8)
        put_str(hello, b"pipelining")
        act = bytearray([1, 3, 2])
        put_str(act, b"score")
        act.append(3)
        put_varint(act, 42)
        act = bytes(act)
        try:
            while True:
                h = recv_exact(c, 4)
                if h is None:
                    return
                f = recv_exact(c, struct.unpack(">I", h)[0])
                if f is None:
                    return
                sid, p = get_varint(f, 5)
                fid, p = get_varint(f, p)
                if f[0] == 1:
                    c.sendall(frame(101, 0, 0, hello))
                elif f[0] == 3:
                    c.sendall(frame(103, sid, fid, act))
                else:
                    return
        except OSError:
            return
        finally:
            c.close()


SPOE_CONF = """[bench]
spoe-agent a
    messages m
    option var-prefix b
    timeout hello 2s
    timeout idle 30s
    timeout processing 2s
    use-backend agents
spoe-message m
    args ip=src path=path
    event on-frontend-http-request
"""


def config(port, agent_port, spoe_conf, with_spoe):
    flt = "    filter spoe engine bench config %s\n" % spoe_conf if with_spoe else ""
    return (
        "global\n    nbthread 1\n    maxconn 2000\n"
        "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n"
        "    timeout server 30s\n"
        "frontend fe\n    bind 127.0.0.1:%d\n%s"
        "    http-request return status 200 content-type text/plain lf-string "
        "\"score=%%[var(txn.b.score)]\\n\"\n"
        "backend agents\n    mode tcp\n    server a1 127.0.0.1:%d\n" % (port, flt, agent_port)
    )


def run_wrk(port, duration, conns):
    """wrk pinned to CPU 0; its output read by bench/run.py's parser."""
    cmd = ["taskset", "-c", "0", "wrk", "-t1", "-c%d" % conns, "-d%ds" % duration,
           "--latency", "http://127.0.0.1:%d/" % port]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30).stdout
    return run.parse_wrk(out)


def one(name, binary, cfg, port, duration, conns, work):
    px = difftool.ProxyRun(name, binary, cfg, work)
    rc, out = px.check()
    if rc != 0:
        raise SystemExit("%s refuses its configuration: %s" % (name, out))
    # Started on CPU 1 (all its threads), execed by taskset: the pid is the proxy's.
    px.binary, px.args = "taskset", ["-c", "1", binary, "-db"]
    px.start([port])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            body = b""
            while True:
                x = s.recv(4096)
                if not x:
                    break
                body += x
        want = b"score=42" if "filter spoe" in cfg else b"score="
        if want not in body:
            raise SystemExit("%s answered %r" % (name, body[:200]))
        t0 = run.tree_cpu(px.proc.pid)
        w = run_wrk(port, duration, conns)
        t1 = run.tree_cpu(px.proc.pid)
    finally:
        px.stop()
    us = (t1 - t0) * 1e6 / max(w["requests"], 1)
    return {"req_s": w["requests"] / duration, "us_req": us, "p99_ms": w["p99_ms"],
            "errs": w["errors"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conns", type=int, default=20)
    ap.add_argument("--sluice", default=os.path.join(ROOT, "target/release/sluice"))
    ap.add_argument("--haproxy", default="haproxy")
    a = ap.parse_args()
    agent = Agent()
    work = tempfile.mkdtemp(prefix="spoe-bench-")
    conf = os.path.join(work, "spoe.conf")
    with open(conf, "w") as f:
        f.write(SPOE_CONF)
    # The agent's threads share CPU 0 with wrk.
    os.sched_setaffinity(0, {0})
    results = {}
    for rep in range(a.repeat):
        for with_spoe in (True, False):
            for name, binary in (("haproxy", a.haproxy), ("sluice", a.sluice)):
                port = difftool.free_port()
                cfg = config(port, agent.port, conf, with_spoe)
                r = one(name, binary, cfg, port, a.duration, a.conns, work)
                key = (name, "spoe" if with_spoe else "plain")
                results.setdefault(key, []).append(r)
                print("rep %d %-8s %-5s %8.0f req/s %7.2f us/req p99 %6.2f ms errs %d"
                      % (rep + 1, name, key[1], r["req_s"], r["us_req"], r["p99_ms"], r["errs"]),
                      flush=True)

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2]

    print("\nmedian over %d repetitions (wrk -t1 -c%d, %d s; proxy on CPU 1, wrk+agent on CPU 0)"
          % (a.repeat, a.conns, a.duration))
    print("%-8s %-5s %9s %9s %9s" % ("proxy", "case", "req/s", "us/req", "p99 ms"))
    for key, rs in sorted(results.items()):
        print("%-8s %-5s %9.0f %9.2f %9.2f" % (key[0], key[1], med([r["req_s"] for r in rs]),
                                             med([r["us_req"] for r in rs]),
                                             med([r["p99_ms"] for r in rs])))
    for case in ("spoe", "plain"):
        h = results[("haproxy", case)]
        s = results[("sluice", case)]
        ratios = sorted(x["us_req"] / y["us_req"] for x, y in zip(s, h))
        print("sluice/haproxy CPU us/req (%s): median %.3f (%.3f..%.3f)"
              % (case, med(ratios), ratios[0], ratios[-1]))
    added = {n: med([r["us_req"] for r in results[(n, "spoe")]])
             - med([r["us_req"] for r in results[(n, "plain")]]) for n in ("haproxy", "sluice")}
    print("CPU an exchange adds (us/req): haproxy %.2f, sluice %.2f" % (added["haproxy"], added["sluice"]))


if __name__ == "__main__":
    main()
