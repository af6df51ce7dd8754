#!/usr/bin/env python3
"""bench/tls_storm.py: a TLS handshake storm, sluice vs HAProxy 2.6, loopback only.

For each proxy in turn (same config, `nbthread 2` unless --threads, one `bind ... ssl crt`
frontend, ECDSA P-256 or --cert rsa, that answers every request itself with `http-request
return`):

  1. a keep-alive client (its own process, one TLS connection opened before the storm) sends
     GET / every 5 ms and records each request's latency, for the whole run;
  2. after --idle seconds, a storm client (its own process, asyncio) starts --clients
     connections at once and keeps them coming for --duration seconds. Connect + handshake
     must finish within 5 s, or it counts as a handshake timeout. Two kinds of storm:

     --mode hello (default): each client sends a ready-made ClientHello, reads the server's
       whole first flight (ServerHello ... Finished: the server's key exchange and signature
       are done; its size is measured once per proxy beforehand), closes, and starts over.
       The client does no crypto, yet in Python it still saturates before the proxy on two
       cores; --client c runs the same storm from bench/tls_hello.c (one epoll loop, a few
       us per handshake), which does overload the proxy.
     --mode full: each client does a real TLS handshake, sends GET / with `Connection:
       close`, reads the answer and closes (client-bound on this machine).

Reported per proxy: handshakes completed per second (the accept rate), handshake timeouts and
other errors, the handshake time p50/p99 (TCP connect to handshake done, as the client sees
it), the keep-alive client's p50/p99 when idle and during the storm (and their ratio: the
issue's target is <= 10x), and the proxy's CPU time per completed handshake.

    python3 bench/tls_storm.py                          # 5000 clients, 30 s, both proxies
    python3 bench/tls_storm.py --clients 2000 --duration 10 --proxies sluice

Needs openssl (certificate), haproxy for its column, gcc for --client c, and a release build
of sluice. By default the clients share the two cores with the proxy, so the keep-alive tail
is partly the kernel's scheduling; --pin (with --threads 1) gives the proxy a core of its own
(see bench/README.md for the other placement options). Every process it starts is stopped by
PID.
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import tls as base  # noqa: E402  (CONFIG, free_port, wait_port, cpu_s, make_certs)

REQ_KA = b'GET / HTTP/1.1\r\nHost: bench\r\n\r\n'
REQ_CLOSE = b'GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n'


def client_ctx():
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    # Every handshake a full one.
    c.options |= ssl.OP_NO_TICKET
    return c


def pct(v, p):
    if not v:
        return float('nan')
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


# ---------------------------------------------------------------------------------------------
# Roles run in their own processes
# ---------------------------------------------------------------------------------------------

def role_ka(a):
    """Keep-alive client: one TLS connection, GET every 5 ms until --until (monotonic)."""
    s = socket.create_connection(('127.0.0.1', a.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = client_ctx().wrap_socket(s)
    out = []
    errors = 0
    while time.monotonic() < a.until:
        t0 = time.monotonic()
        try:
            t.sendall(REQ_KA)
            buf = b''
            while b'\r\n\r\n' not in buf or not buf.endswith(b'ok'):
                d = t.recv(4096)
                if not d:
                    raise OSError('closed')
                buf += d
        except OSError:
            errors += 1
            break
        out.append((t0, time.monotonic() - t0))
        time.sleep(0.005)
    json.dump({'samples': out, 'errors': errors}, open(a.out, 'w'))


def client_hello():
    """The bytes of one ClientHello (TLS 1.3 and 1.2 offered, no session to resume)."""
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    o = client_ctx().wrap_bio(inc, out, server_hostname='bench.example')
    try:
        o.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def flight_size(port, hello):
    """Bytes of the server's first flight to `hello`: read until 300 ms of silence."""
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(hello)
    s.settimeout(0.3)
    n = 0
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            n += len(d)
    except socket.timeout:
        pass
    s.close()
    return n


async def storm(a):
    ctx = client_ctx()
    end = time.monotonic() + a.duration
    res = {'done': 0, 'timeouts': 0, 'errors': 0, 'hs': []}
    hello = client_hello()

    async def one_hello():
        while time.monotonic() < end:
            t0 = time.monotonic()
            w = None
            try:
                async def exchange():
                    nonlocal w
                    r, w = await asyncio.open_connection('127.0.0.1', a.port)
                    w.write(hello)
                    # ECDSA signatures vary by a few bytes: the flight is there when all but
                    # the last few bytes of its measured size are.
                    got = 0
                    while got < a.flight - 8:
                        d = await r.read(65536)
                        if not d:
                            raise asyncio.IncompleteReadError(b'', a.flight)
                        got += len(d)
                await asyncio.wait_for(exchange(), 5)
                res['hs'].append(time.monotonic() - t0)
                res['done'] += 1
            except asyncio.TimeoutError:
                res['timeouts'] += 1
            except (OSError, asyncio.IncompleteReadError):
                res['errors'] += 1
                await asyncio.sleep(0.01)
            if w is not None:
                w.close()

    async def one():
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                r, w = await asyncio.wait_for(
                    asyncio.open_connection('127.0.0.1', a.port, ssl=ctx,
                                            ssl_handshake_timeout=5), 5)
            except asyncio.TimeoutError:
                res['timeouts'] += 1
                continue
            except OSError:
                res['errors'] += 1
                await asyncio.sleep(0.01)
                continue
            res['hs'].append(time.monotonic() - t0)
            try:
                w.write(REQ_CLOSE)
                await asyncio.wait_for(r.read(), 10)
                res['done'] += 1
            except (OSError, asyncio.TimeoutError):
                res['errors'] += 1
            w.close()
            try:
                await w.wait_closed()
            except OSError:
                pass

    f = one_hello if a.mode == 'hello' else one
    await asyncio.gather(*(f() for _ in range(a.clients)))
    return res


def role_storm(a):
    res = asyncio.run(storm(a))
    json.dump(res, open(a.out, 'w'))


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------

def run_proxy(px, a, work, crt):
    port = base.free_port()
    px, _, path = px.partition('=')
    cfg = os.path.join(work, f'{px}.cfg')
    with open(cfg, 'w') as f:
        conf = base.CONFIG.format(threads=a.threads, port=port, crt=crt)
        if a.ciphersuites:
            # the same TLS 1.3 suites for both proxies (HAProxy 2.6 and sluice share the keyword)
            conf = conf.replace(f'ssl crt {crt}', f'ssl crt {crt} ciphersuites {a.ciphersuites}', 1)
        if a.cpu_map:
            # one worker per CPU, as an operator running thread-per-core would configure
            conf = conf.replace('global\n', f'global\n    cpu-map auto:1/1-{a.threads} 0-{a.threads - 1}\n', 1)
        f.write(conf)
    if path:
        # NAME=PATH: another sluice build (an A/B against an older commit).
        cmd = [path, '-db', '-f', cfg]
    else:
        cmd = {'sluice': [a.sluice, '-db', '-f', cfg],
               'haproxy': ['haproxy', '-db', '-f', cfg]}[px]
    lf = open(cfg + '.log', 'w')
    if a.pin:
        cmd = ['taskset', '-c', a.proxy_cpus] + cmd
    p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
    kids = []
    try:
        if not base.wait_port(port, p):
            raise RuntimeError(f'{px} did not listen: {open(cfg + ".log").read()[-1500:]}')
        me = [sys.executable, os.path.abspath(__file__), '--port', str(port)]
        # --pin: both clients on the client CPUs (the proxy has its own, see above).
        client_pin = ['taskset', '-c', a.client_cpus] if a.pin else []
        me = client_pin + me
        t_storm = time.monotonic() + a.idle
        t_end = t_storm + a.duration
        ka_out, st_out = os.path.join(work, f'{px}-ka.json'), os.path.join(work, f'{px}-st.json')
        ka_nice = ['nice', '-n', str(a.ka_nice)] if a.ka_nice else []
        kids.append(subprocess.Popen(ka_nice + me + ['--role', 'ka', '--until', str(t_end), '--out', ka_out]))
        time.sleep(max(0.0, t_storm - time.monotonic()))
        hello = client_hello()
        flight = flight_size(port, hello)
        c0 = base.cpu_s(p.pid)
        nice = ['nice', '-n', str(a.storm_nice)] if a.storm_nice else []
        if a.storm_idle:
            nice = ['chrt', '--idle', '0'] + nice
        if a.client == 'c':
            hello_file = os.path.join(work, 'hello.bin')
            with open(hello_file, 'wb') as f:
                f.write(hello)
            storm_cmd = client_pin + [a.c_client, str(port), str(a.clients), str(a.duration),
                                      hello_file, str(flight), st_out]
        else:
            storm_cmd = me + ['--role', 'storm', '--clients', str(a.clients),
                              '--duration', str(a.duration), '--out', st_out,
                              '--mode', a.mode, '--flight', str(flight)]
        kids.append(subprocess.Popen(nice + storm_cmd))
        for k in kids:
            k.wait(timeout=a.idle + a.duration + 60)
        c1 = base.cpu_s(p.pid)
        ka = json.load(open(ka_out))
        st = json.load(open(st_out))
        idle = [l for t, l in ka['samples'] if t < t_storm]
        busy = [l for t, l in ka['samples'] if t_storm + 1 <= t < t_end]
        hs = len(st['hs'])
        return {
            'proxy': px,
            'handshakes_per_s': hs / a.duration,
            'completed': st['done'],
            'hs_timeouts': st['timeouts'],
            'errors': st['errors'] + ka['errors'],
            'hs_p50_ms': pct(st['hs'], 50) * 1e3,
            'hs_p99_ms': pct(st['hs'], 99) * 1e3,
            'ka_idle_p50_ms': pct(idle, 50) * 1e3,
            'ka_idle_p99_ms': pct(idle, 99) * 1e3,
            'ka_storm_p50_ms': pct(busy, 50) * 1e3,
            'ka_storm_p99_ms': pct(busy, 99) * 1e3,
            'ka_storm_samples': len(busy),
            'cpu_us_per_hs': (c1 - c0) * 1e6 / hs if hs else float('nan'),
        }
    finally:
        for k in kids:
            if k.poll() is None:
                k.kill()
                k.wait()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        lf.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--clients', type=int, default=5000)
    ap.add_argument('--duration', type=float, default=30.0, help='storm seconds (default 30)')
    ap.add_argument('--idle', type=float, default=3.0, help='idle seconds before the storm')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--proxies', default='sluice,haproxy',
                    help='comma-separated: sluice, haproxy, or NAME=PATH for another sluice build')
    ap.add_argument('--sluice', default=os.path.join(ROOT, 'target', 'release', 'sluice'))
    ap.add_argument('--mode', choices=['hello', 'full'], default='hello')
    ap.add_argument('--ka-nice', type=int, default=0,
                    help='run the keep-alive client under nice -n N (negative: ahead of the proxy '
                         'and the storm client, so that its own scheduling drops out of its latency)')
    ap.add_argument('--ciphersuites', help='bind ... ciphersuites LIST in both proxies (TLS 1.3 '
                    'suites in preference order, e.g. TLS_AES_128_GCM_SHA256 to avoid SHA-384)')
    ap.add_argument('--cert', choices=['ecdsa', 'rsa'], default='ecdsa',
                    help='the certificate: ECDSA P-256 (default) or RSA 2048')
    ap.add_argument('--client', choices=['py', 'c'], default='py',
                    help='storm client: py (asyncio, --mode hello|full) or c (bench/tls_hello.c, '
                         'built with gcc: hello mode in one epoll loop, cheap enough that the '
                         'proxy saturates first)')
    ap.add_argument('--pin', action='store_true',
                    help='proxy under taskset -c PROXY_CPUS, both clients under taskset -c '
                         'CLIENT_CPUS: the proxy never waits for a core behind a client (use '
                         '--threads 1 on two cores)')
    ap.add_argument('--proxy-cpus', default='1')
    ap.add_argument('--client-cpus', default='0')
    ap.add_argument('--cpu-map', action='store_true',
                    help='pin worker thread N to CPU N-1 (cpu-map auto:1/1-T 0-(T-1)) in both proxies')
    ap.add_argument('--storm-idle', action='store_true',
                    help='run the storm client as SCHED_IDLE: it only gets CPU time the proxy and '
                         'the keep-alive client leave, as clients on other machines would')
    ap.add_argument('--storm-nice', type=int, default=0,
                    help='run the storm client under nice -n N, so that it takes the CPU the proxy '
                         'and the keep-alive client leave (clients on other machines, in effect)')
    ap.add_argument('--flight', type=int, help=argparse.SUPPRESS)
    ap.add_argument('--role', choices=['ka', 'storm'], help=argparse.SUPPRESS)
    ap.add_argument('--port', type=int, help=argparse.SUPPRESS)
    ap.add_argument('--until', type=float, help=argparse.SUPPRESS)
    ap.add_argument('--out', help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == 'ka':
        return role_ka(a)
    if a.role == 'storm':
        return role_storm(a)
    for tool in ['openssl'] + (['haproxy'] if 'haproxy' in a.proxies.split(',') else []):
        if not shutil.which(tool):
            sys.exit(f'{tool} not found (apt-get install -y {tool})')
    work = tempfile.mkdtemp(prefix='sluice-tls-storm.')
    try:
        crt = base.make_certs(work)[a.cert]
        if a.client == 'c':
            a.mode = 'hello'
            a.c_client = os.path.join(work, 'tls_hello')
            subprocess.run(['gcc', '-O2', '-o', a.c_client, os.path.join(BENCH, 'tls_hello.c')],
                           check=True)
        placement = [f'client {a.client}'] + [f for f, on in (
            ('storm client SCHED_IDLE', a.storm_idle), (f'storm nice {a.storm_nice}', a.storm_nice),
            (f'keep-alive nice {a.ka_nice}', a.ka_nice), ('cpu-map', a.cpu_map),
            (f'proxy on CPU {a.proxy_cpus}, clients on CPU {a.client_cpus}', a.pin),
            (f'ciphersuites {a.ciphersuites}', a.ciphersuites)) if on]
        print(f'# {" ".join(sys.argv)}')
        print(f'# {", ".join(placement)}')
        print(f'# tls storm ({a.mode}): {a.clients} clients at once, {a.duration:.0f} s, '
              f'nbthread {a.threads}, {"ECDSA P-256" if a.cert == "ecdsa" else "RSA 2048"}, '
              'full handshakes, 5 s handshake timeout; '
              'keep-alive client every 5 ms')
        cols = ['proxy', 'handshakes_per_s', 'hs_timeouts', 'errors', 'hs_p50_ms', 'hs_p99_ms',
                'ka_idle_p50_ms', 'ka_idle_p99_ms', 'ka_storm_p50_ms', 'ka_storm_p99_ms',
                'cpu_us_per_hs']
        print(' '.join(f'{c:>15}' for c in cols))
        for px in a.proxies.split(','):
            r = run_proxy(px, a, work, crt)
            px = r['proxy']
            print(' '.join(f'{r[c]:>15.1f}' if isinstance(r[c], float) else f'{r[c]:>15}'
                           for c in cols), flush=True)
            print(f'# {px}: keep-alive p99 storm/idle x{r["ka_storm_p99_ms"] / r["ka_idle_p99_ms"]:.1f}, '
                  f'{r["ka_storm_samples"]} storm samples, {r["completed"]} requests completed')
            print('# json ' + json.dumps(r), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
