#!/usr/bin/env python3
"""Runs sluice and HAProxy 2.6 as the two peers of one `peers` section and checks that their
stick tables agree: live updates both ways (requests tracked on either side, `set table` on
either side), for a section table (`/t`, string keys, counters and a rate), a proxy table
(`b_ip`, ip keys) and an integer-keyed one; then each process is restarted in turn and must
learn everything back from the other (a resync). Not part of CI (it needs HAProxy).

    python3 bench/peers_diff.py [--sluice target/release/sluice] [--haproxy /usr/sbin/haproxy]

Prints each table of both processes (entry pointers and expiry times left out) and exits 1
when they differ."""

import argparse
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import ProxyRun, cli, free_port  # noqa: E402

TABLES = ["mesh/t", "b_ip", "b_int"]


def config(me, ports, sock):
    return f"""global
    localpeer {me}
    stats socket {sock} mode 600 level admin
defaults
    mode http
    timeout connect 2s
    timeout client 10s
    timeout server 10s
peers mesh
    peer hap 127.0.0.1:{ports['hap_peer']}
    peer sl 127.0.0.1:{ports['sl_peer']}
    table t type string len 32 size 1k expire 60s store gpc0,gpt0,http_req_cnt,http_req_rate(10s)
backend b_ip
    stick-table type ip size 1k expire 60s store gpc0,conn_cnt peers mesh
backend b_int
    stick-table type integer size 1k expire 60s store gpt0,gpc0 peers mesh
frontend fe
    bind 127.0.0.1:{ports[me + '_http']}
    http-request track-sc0 req.hdr(x-user) table mesh/t
    http-request sc-inc-gpc0(0)
    http-request track-sc1 src table b_ip
    http-request return status 200
"""


def table(sock, name):
    """The entries of a table, as sorted `key=... data...` strings (no pointer, no expiry)."""
    rows = []
    for line in cli(sock, "show table " + name).splitlines():
        if ": key=" not in line:
            continue
        words = line.split(": ", 1)[1].split()
        rows.append(" ".join(w for w in words if not w.startswith(("exp=", "use="))))
    return sorted(rows)


def request(port, user):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nx-user: {user}\r\nConnection: close\r\n\r\n".encode())
    while s.recv(4096):
        pass
    s.close()


def agree(runs, what, timeout=6.0):
    """Waits until both processes show the same tables; prints them; True when they do."""
    deadline = time.monotonic() + timeout
    while True:
        got = {n: {t: table(r["sock"], t) for t in TABLES} for n, r in runs.items()}
        same = got["hap"] == got["sl"]
        if same or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(f"== {what}: {'same' if same else 'DIFFERENT'}")
    for t in TABLES:
        for n in ("hap", "sl"):
            print(f"  {n:3} {t}: {got[n][t]}")
    return same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default="target/release/sluice")
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="peers_diff.")
    ports = {k: free_port() for k in ("hap_peer", "sl_peer", "hap_http", "sl_http")}
    runs = {}
    for me, binary in (("hap", a.haproxy), ("sl", a.sluice)):
        sock = os.path.join(work, me + ".sock")
        runs[me] = {"sock": sock, "run": ProxyRun(me, binary, config(me, ports, sock), work)}
    ok = True
    try:
        for n, r in runs.items():
            r["run"].start([ports[n + "_http"], ports[n + "_peer"]])
        for user, side in (("alice", "sl"), ("alice", "sl"), ("bob", "hap"), ("carol", "sl")):
            request(ports[side + "_http"], user)
        cli(runs["hap"]["sock"], "set table mesh/t key dave data.gpt0 4")
        cli(runs["sl"]["sock"], "set table b_int key 258 data.gpt0 6 data.gpc0 2")
        ok &= agree(runs, "live updates both ways")
        for n in ("sl", "hap"):
            r = runs[n]["run"]
            r.stop()
            r.start([ports[n + "_http"], ports[n + "_peer"]])
            ok &= agree(runs, f"{n} restarted and resynchronised")
    finally:
        for r in runs.values():
            r["run"].stop()
    print("all the same" if ok else "DIFFERENCES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
