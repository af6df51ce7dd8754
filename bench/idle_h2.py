#!/usr/bin/env python3
"""Memory held per idle client connection, HTTP/2 or HTTP/1.1, of a running proxy.

    python3 bench/idle_h2.py PORT PID N [h2|h1]

Opens N connections to 127.0.0.1:PORT, sends one request on each (HTTP/2 with
prior knowledge: the preface, an empty SETTINGS and a GET / HEADERS frame; or an
HTTP/1.1 GET), reads the answers, keeps the connections open and idle, and
prints the proxy's VmRSS (of PID) before and after, and the growth per
connection. The proxy must answer GET / itself or through a backend, with
timeouts longer than the few seconds this takes, and allow N connections.
"""
import socket
import sys
import time


def rss_kb(pid):
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1])
    return 0


def main():
    port, pid, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    proto = sys.argv[4] if len(sys.argv) > 4 else 'h2'
    if proto == 'h2':
        # HPACK: :method GET, :scheme http, :path / (static indexes), :authority literal.
        hdr = bytes([0x82, 0x86, 0x84, 0x41, 0x09]) + b'127.0.0.1'
        frame = len(hdr).to_bytes(3, 'big') + b'\x01\x05' + (1).to_bytes(4, 'big') + hdr
        first = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'\0\0\0\x04\0\0\0\0\0' + frame
    else:
        first = b'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'
    time.sleep(0.5)
    before = rss_kb(pid)
    socks = []
    for _ in range(n):
        s = socket.create_connection(('127.0.0.1', port))
        s.sendall(first)
        socks.append(s)
    time.sleep(1.0)
    for s in socks:
        s.setblocking(False)
        try:
            while s.recv(65536):
                pass
        except BlockingIOError:
            pass
    time.sleep(1.0)
    after = rss_kb(pid)
    print(f'{proto} n={n} RSS {before} -> {after} kB: {(after - before) * 1024 / n:.0f} B per connection')
    for s in socks:
        s.close()


if __name__ == '__main__':
    main()
