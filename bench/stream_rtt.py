#!/usr/bin/env python3
"""Round trips of a duplex HTTP/1.1 exchange through a proxy: the client sends a chunked
request one piece at a time and waits for each piece's echo, which a test server sends back
at once as a piece of its chunked answer. Shows whether a proxy forwards the request body
while the answer flows, and whether it holds answer pieces back (a piece sent with
`MSG_MORE` and no next piece waits 200 ms in the kernel).

    python3 bench/stream_rtt.py target/release/sluice
    python3 bench/stream_rtt.py /usr/sbin/haproxy

Prints the round trips in ms. Loopback only; stops by itself."""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import free_port, wait_listening  # noqa: E402

ROUNDS = 10


def echo_server(ls):
    c, _ = ls.accept()
    f = c.makefile("rb")
    while f.readline() not in (b"\r\n", b""):
        pass
    c.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    while True:
        n = int(f.readline().strip(), 16)
        if n == 0:
            f.readline()
            c.sendall(b"0\r\n\r\n")
            return
        d = f.read(n)
        f.read(2)
        c.sendall(b"%x\r\n%s\r\n" % (len(d), d))


def main():
    binary = sys.argv[1]
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(5)
    threading.Thread(target=echo_server, args=(ls,), daemon=True).start()
    port = free_port()
    cfg = os.path.join(tempfile.mkdtemp(prefix="stream_rtt."), "p.cfg")
    with open(cfg, "w") as f:
        f.write("defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n"
                "    timeout server 30s\nfrontend fe\n    bind 127.0.0.1:%d\n"
                "    default_backend be\nbackend be\n    server s1 127.0.0.1:%d\n"
                % (port, ls.getsockname()[1]))
    p = subprocess.Popen([binary, "-db", "-f", cfg])
    try:
        wait_listening(p, [port], binary)
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        buf = b""
        rtts = []
        for i in range(ROUNDS):
            piece = b"ping%d\r\n" % i
            t = time.monotonic()
            c.sendall(b"%x\r\n%s" % (len(piece) - 2, piece))
            while piece not in buf:
                d = c.recv(65536)
                if not d:
                    raise SystemExit("the connection ended")
                buf += d
            buf = buf[buf.index(piece) + len(piece):]
            rtts.append((time.monotonic() - t) * 1000)
        c.sendall(b"0\r\n\r\n")
        print("%s: round trips (ms): %s" % (binary, " ".join("%.1f" % r for r in rtts)))
    finally:
        p.terminate()
        p.wait(5)


if __name__ == "__main__":
    main()
