#!/usr/bin/env python3
"""bench/tls.py: TLS handshakes per second, sluice vs HAProxy 2.6, loopback only.

For each certificate type (ECDSA P-256, RSA 2048) and each proxy, in one interleaved run:
start the proxy with `nbthread 2` and one `bind ... ssl crt` frontend that answers every
request itself (`http-request return`, so no origin is involved and the handshake dominates),
then run `openssl s_time` clients, each opening a new connection per request (GET /, HTTP/1.0):

  full     `s_time -new`:   every connection does a full handshake
  resumed  `s_time -reuse`: every connection after the first resumes the first session

and report connections/s (summed over the clients) and the proxy's CPU time per connection
(user+sys of its process from /proc, the steadiest figure on a shared 2-core machine).

    python3 bench/tls.py                       # 10 s per measurement, 2 clients, both proxies
    python3 bench/tls.py --duration 3 --proxies sluice

Needs: openssl (client and certificate generation), haproxy for the HAProxy column, and a
release build of sluice (target/release/sluice, or --sluice PATH). Every process it starts is
stopped by PID; every load step is bounded by --duration.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
CLK = os.sysconf('SC_CLK_TCK')

CONFIG = """global
    nbthread {threads}
    maxconn 9000
defaults
    mode http
    maxconn 9000
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe_tls
    bind 127.0.0.1:{port} ssl crt {crt}
    http-request return status 200 content-type text/plain string ok
"""


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def cpu_s(pid):
    """user+sys seconds of a process (all its threads)."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def make_certs(d):
    """Self-signed ECDSA P-256 and RSA 2048 bundles (certificate + key in one PEM)."""
    out = {}
    for name, keyargs in (('ecdsa', ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256']),
                          ('rsa', ['-newkey', 'rsa:2048'])):
        crt, key = os.path.join(d, f'{name}.crt'), os.path.join(d, f'{name}.key')
        subprocess.run(['openssl', 'req', '-x509', '-nodes', '-days', '30', *keyargs,
                        '-subj', '/CN=bench.example', '-keyout', key, '-out', crt],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bundle = os.path.join(d, f'{name}.pem')
        with open(bundle, 'w') as b:
            b.write(open(crt).read() + open(key).read())
        out[name] = bundle
    return out


def s_time(port, mode, duration, clients):
    """Runs `clients` s_time processes at once; returns (connections, wall-clock
    seconds): s_time's own "real seconds" are whole seconds, too coarse for a rate."""
    t0 = time.time()
    procs = [subprocess.Popen(['openssl', 's_time', '-connect', f'127.0.0.1:{port}', mode,
                               '-time', str(duration), '-www', '/'],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(clients)]
    total = 0
    for p in procs:
        try:
            out, _ = p.communicate(timeout=duration + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        m = re.search(r'(\d+) connections in (\d+) real seconds', out)
        if not m:
            raise RuntimeError('s_time gave no result:\n' + out[-1500:])
        total += int(m.group(1))
    return total, time.time() - t0


def measure(cmd, cfg_path, port, mode, a):
    lf = open(cfg_path + '.log', 'w')
    p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if not wait_port(port, p):
            raise RuntimeError(f'{cmd[0]} did not listen; log: {open(cfg_path + ".log").read()[-1500:]}')
        s_time(port, mode, 1, 1)   # warm-up
        c0 = cpu_s(p.pid)
        conns, wall = s_time(port, mode, a.duration, a.clients)
        c1 = cpu_s(p.pid)
        return conns / wall, (c1 - c0) * 1e6 / conns if conns else None
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        lf.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--duration', type=int, default=10, help='seconds per measurement (default 10)')
    ap.add_argument('--clients', type=int, default=2, help='parallel s_time clients (default 2)')
    ap.add_argument('--threads', type=int, default=2, help='proxy nbthread (default 2)')
    ap.add_argument('--proxies', default='sluice,haproxy')
    ap.add_argument('--sluice', default=os.path.join(ROOT, 'target', 'release', 'sluice'))
    a = ap.parse_args()
    for tool in ['openssl'] + (['haproxy'] if 'haproxy' in a.proxies else []):
        if not shutil.which(tool):
            sys.exit(f'{tool} not found (apt-get install -y {tool})')
    work = tempfile.mkdtemp(prefix='sluice-tls-bench.')
    try:
        certs = make_certs(work)
        rows = []
        print(f'# tls: nbthread {a.threads}, {a.clients} s_time clients, {a.duration} s each, '
              'new connection per request (GET /, answered by the proxy)')
        print(f'{"cert":6} {"mode":8} {"proxy":8} {"conn/s":>9} {"proxy CPU us/conn":>18}')
        for cert in ('ecdsa', 'rsa'):
            for mode, flag in (('full', '-new'), ('resumed', '-reuse')):
                for px in a.proxies.split(','):
                    port = free_port()
                    cfg = os.path.join(work, f'{px}-{cert}.cfg')
                    with open(cfg, 'w') as f:
                        f.write(CONFIG.format(threads=a.threads, port=port, crt=certs[cert]))
                    cmd = {'sluice': [a.sluice, '-db', '-f', cfg],
                           'haproxy': ['haproxy', '-db', '-f', cfg]}[px]
                    rate, us = measure(cmd, cfg, port, flag, a)
                    rows.append((cert, mode, px, rate, us))
                    print(f'{cert:6} {mode:8} {px:8} {rate:9.0f} {us:18.1f}', flush=True)
        names = a.proxies.split(',')
        if 'sluice' in names and 'haproxy' in names:
            print('\n# sluice / haproxy')
            for cert in ('ecdsa', 'rsa'):
                for mode in ('full', 'resumed'):
                    r = {px: (rate, us) for c, m, px, rate, us in rows if c == cert and m == mode}
                    print(f'{cert:6} {mode:8} conn/s x{r["sluice"][0] / r["haproxy"][0]:.2f}   '
                          f'CPU/conn x{r["sluice"][1] / r["haproxy"][1]:.2f}')
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
