#!/usr/bin/env python3
"""Idle keep-alive client for the `idle` scenario of bench/run.py.

    python3 bench/idle_client.py PORT N [--path /] [--timeout 120] [--hold 600]

Opens N TCP connections to 127.0.0.1:PORT, one after the other, and on each
sends one HTTP/1.1 keep-alive GET and reads the whole response (status line,
headers, Content-Length body), so the proxy has really set up each client
connection (and, depending on its design, an origin-side connection). The
sockets are then held open, idle.

When all N are done it prints ONE JSON line on stdout:
    {"ok": N_ok, "errors": N_err, "seconds": setup_time, "first_error": "..."}
and then holds every connection until its standard input is closed (the
harness closes it after measuring), or until --hold seconds have passed,
whichever comes first. Then it closes everything and exits.

Its own fd limit: the soft RLIMIT_NOFILE is raised to the hard one first
(N sockets + a few are needed).
"""
import argparse
import json
import resource
import select
import socket
import sys
import time


def read_response(s, deadline):
    """Read one HTTP/1.1 response with a Content-Length body. Returns the
    status code. Raises on EOF, timeout or an unframed response."""
    buf = b''
    while b'\r\n\r\n' not in buf:
        s.settimeout(max(0.01, deadline - time.time()))
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError('EOF before end of headers')
        buf += chunk
    head, _, body = buf.partition(b'\r\n\r\n')
    lines = head.split(b'\r\n')
    status = int(lines[0].split()[1])
    clen = None
    for line in lines[1:]:
        k, _, v = line.partition(b':')
        if k.strip().lower() == b'content-length':
            clen = int(v.strip())
        if k.strip().lower() == b'transfer-encoding':
            raise ValueError('chunked response: not expected from the origin')
    if clen is None:
        raise ValueError('response without Content-Length')
    while len(body) < clen:
        s.settimeout(max(0.01, deadline - time.time()))
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError('EOF in body')
        body += chunk
    if len(body) != clen:
        raise ValueError(f'{len(body) - clen} bytes after the body')
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('port', type=int)
    ap.add_argument('n', type=int)
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--path', default='/')
    ap.add_argument('--timeout', type=float, default=120.0, help='max seconds to set up all N')
    ap.add_argument('--hold', type=float, default=600.0, help='max seconds to hold them afterwards')
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if a.n + 16 > soft:
        sys.exit(f'idle_client: {a.n} connections need more than the open-file limit {soft}')

    req = (f'GET {a.path} HTTP/1.1\r\nHost: bench\r\nConnection: keep-alive\r\n\r\n').encode()
    socks, errors, first_error = [], 0, None
    t0 = time.time()
    deadline = t0 + a.timeout
    for i in range(a.n):
        if time.time() >= deadline:
            errors += a.n - i
            first_error = first_error or f'setup timeout after {i} connections'
            break
        s = None
        try:
            s = socket.create_connection((a.host, a.port), timeout=max(0.01, deadline - time.time()))
            s.sendall(req)
            st = read_response(s, deadline)
            if st != 200:
                raise ValueError(f'status {st}')
            socks.append(s)
        except (OSError, ValueError) as e:
            errors += 1
            first_error = first_error or f'connection {i}: {type(e).__name__}: {e}'
            if s is not None:
                s.close()
    print(json.dumps({'ok': len(socks), 'errors': errors, 'seconds': round(time.time() - t0, 3),
                      'first_error': first_error}), flush=True)

    # hold until stdin is closed (EOF) or --hold expires
    t_end = time.time() + a.hold
    while time.time() < t_end:
        r, _, _ = select.select([sys.stdin], [], [], min(1.0, max(0.0, t_end - time.time())))
        if r and not sys.stdin.buffer.read1(4096):
            break
    for s in socks:
        s.close()


if __name__ == '__main__':
    main()
