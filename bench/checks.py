#!/usr/bin/env python3
"""bench/checks.py: health checks of 10,000 servers, sluice vs HAProxy 2.6, loopback only.

    python3 bench/checks.py --sluice /path/to/sluice --proxies sluice,haproxy \\
        --servers 10000 --inter 2s --duration 40 --modes l4,http

One check-target process (this script, --role target: plain epoll, no asyncio) listens on
--servers TCP ports spread over 127.0.0.0/8 (127.0.K.1, K = 1..40, --per-addr ports each,
from port 20000 up). In mode `l4` it accepts and closes each connection (plain connect
checks); in mode `http` it reads the request and answers `HTTP/1.1 200 OK` with
`Content-Length: 0`, then closes (`option httpchk GET /`). It records, per port, when each
check arrived (CLOCK_MONOTONIC at the epoll wake-up that saw the connection).

Both proxies get the same generated config (HAProxy syntax): `nbthread 2`, one backend with
--servers servers, `default-server check inter <inter>`, a stats socket, and a frontend that
answers `http-request return status 200 ... string ok` for the latency client. For each mode,
each proxy (in --proxies order) runs three phases, each a fresh proxy process:

  1. `empty`   : the same config with 0 servers; RSS after --settle s.
  2. `nocheck` : the 10,000 servers without `check`. After --settle s, a keep-alive latency
                 client (its own process, one connection, GET / every --lat-every s) runs for
                 --nocheck-window s; proxy CPU over that window; RSS at its end.
  3. `check`   : the 10,000 servers with `check`, run for --duration s. The first --warmup s
                 (default 10: the start-up spread covers one `inter`) are not measured; over
                 the rest (the steady window) it records the check arrivals, the proxy CPU, the
                 RSS at the end, and runs the same latency client. At the end, `show stat` on
                 the stats socket counts the servers not UP and their check_status.

Reported per proxy and mode:
  - schedule: for every server, the intervals between its consecutive checks inside the
    window; lateness = interval - inter, p50/p99/p99.9/max over all intervals (what the issue
    calls the delay between a check's due time and its start; HAProxy schedules the next check
    `inter` after the previous one ENDS, so its lateness includes the check's own duration,
    a fraction of a ms on loopback); checks per server (expected window/inter) and the fraction
    of servers with >= floor(window/inter) - 1 and >= floor(window/inter) checks;
  - CPU: the proxy's utime+stime (/proc/PID/stat, all threads) over the window, as % of one
    core, and per check; `check work` = check-phase CPU% - nocheck-phase CPU% (both carry the
    same latency-client traffic), and that difference per check;
  - memory: RSS empty / nocheck / check; per server with checks = (check - nocheck) / N, per
    configured server = (nocheck - empty) / N;
  - traffic latency: p50/p99/p99.9/p99.99/max of the latency client, checks on vs off;
  - servers not UP at the end (should be 0).

This is a 2-core machine: proxies (2 threads), the target and the latency client share both
cores, unpinned (--pin: the proxy on CPU 1, the target and the client on CPU 0). The target's own CPU is reported too. Every process started here is stopped by
PID in a finally block. Output goes to stdout; --out FILE also writes it there.
"""

import argparse
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import tls as base  # noqa: E402  (free_port, wait_port, cpu_s)
from difftool import cli  # noqa: E402
ROOT = os.path.dirname(BENCH)
CLK = os.sysconf('SC_CLK_TCK')
PAGE = os.sysconf('SC_PAGE_SIZE')
BASE_PORT = 20000

HTTP_OK = b'HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
REQ = b'GET / HTTP/1.1\r\nHost: bench\r\n\r\n'


def addr_of(i, per_addr):
    """Server i's (ip, port): 127.0.K.1 with K = 1 + i // per_addr."""
    k = 1 + i // per_addr
    return f'127.{k // 256}.{k % 256}.1', BASE_PORT + i % per_addr


def parse_time(s):
    s = s.strip()
    if s.endswith('ms'):
        return float(s[:-2]) / 1000
    if s.endswith('s'):
        return float(s[:-1])
    return float(s) / 1000   # HAProxy: a bare number is milliseconds


def pct(v, p):
    if not v:
        return float('nan')
    return v[min(len(v) - 1, int(len(v) * p / 100))]


# ---------------------------------------------------------------------------------------------
# Role: the check target
# ---------------------------------------------------------------------------------------------

SOL_PACKET, PACKET_STATISTICS = 263, 6
SO_TIMESTAMPNS = 35
SO_ATTACH_FILTER = 26


def build_filter(per_addr, servers):
    """Classic BPF for an AF_PACKET SOCK_DGRAM socket on lo (offsets from the IP header): keep
    only incoming TCP SYNs without ACK to the servers' ports (lo shows each packet twice:
    the outgoing copy is dropped)."""
    lo, hi = BASE_PORT, BASE_PORT + min(per_addr, servers)
    ACCEPT, DROP = 11, 12
    prog = [  # (code, jt, jf, k), jt/jf as absolute targets, None = next
        (0x20, None, None, 0xfffff004),   # ld pkttype (SKF_AD_PKTTYPE)
        (0x15, DROP, None, 4),            # PACKET_OUTGOING
        (0x30, None, None, 9),            # ldb [9]: protocol
        (0x15, None, DROP, 6),            # TCP
        (0xb1, None, None, 0),            # ldxb 4*([0]&0xf): X = IP header length
        (0x48, None, None, 2),            # ldh [x+2]: destination port
        (0x35, None, DROP, lo),           # >= lo
        (0x35, DROP, None, hi),           # >= hi
        (0x50, None, None, 13),           # ldb [x+13]: TCP flags
        (0x54, None, None, 0x12),         # & (SYN|ACK)
        (0x15, ACCEPT, DROP, 0x02),       # SYN alone
        (0x06, None, None, 128),          # ACCEPT: ret 128
        (0x06, None, None, 0),            # DROP: ret 0
    ]
    return [(c, 0 if jt is None else jt - n - 1, 0 if jf is None else jf - n - 1, k)
            for n, (c, jt, jf, k) in enumerate(prog)]


def attach_filter(sock, ins):
    import ctypes
    import struct
    buf = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *i) for i in ins))
    fprog = struct.pack('HL', len(ins), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    return buf


def role_target(a):
    import struct
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ep = select.epoll()
    lfd = {}                 # listener fd -> server index
    socks = []
    for i in range(a.servers):
        ip, port = addr_of(i, a.per_addr)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
        s.listen(64)
        s.setblocking(False)
        socks.append(s)
        lfd[s.fileno()] = i
        ep.register(s.fileno(), select.EPOLLIN)
    # Check arrivals are the SYNs: HAProxy's plain connect check sends RST right after the
    # SYN-ACK (delayed ACK, no data), so the connection never reaches accept().
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    keep = attach_filter(cap, build_filter(a.per_addr, a.servers))
    cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    cap.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    cap.bind(('lo', 0x0800))
    cap.setblocking(False)
    capfd = cap.fileno()
    ep.register(capfd, select.EPOLLIN)
    cap.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)   # reset the counters
    stdin = sys.stdin.fileno()
    os.set_blocking(stdin, False)
    ep.register(stdin, select.EPOLLIN)
    rec = [[] for _ in range(a.servers)]
    stats = {'syn': 0, 'accepted': 0, 'foreign': 0}
    conns = {}               # fd -> [socket, bytes so far]
    http = a.mode == 'http'
    print('ready', flush=True)
    ctl = b''
    while True:
        ev = ep.poll(1.0)
        for fd, e in ev:
            if fd == capfd:
                while True:
                    try:
                        d, anc, _, _ = cap.recvmsg(128, 64)
                    except (BlockingIOError, InterruptedError):
                        break
                    ts = None
                    for lvl, typ, data in anc:
                        if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                            sec, ns = struct.unpack('qq', data[:16])
                            ts = sec + ns * 1e-9
                    if ts is None:
                        ts = time.time()
                    ihl = (d[0] & 15) * 4
                    k = d[17] * 256 + d[18]
                    port = d[ihl + 2] * 256 + d[ihl + 3]
                    i = (k - 1) * a.per_addr + port - BASE_PORT
                    if d[16] != 127 or d[19] != 1 or not 0 <= i < a.servers:
                        stats['foreign'] += 1
                        continue
                    stats['syn'] += 1
                    rec[i].append(ts)
                continue
            i = lfd.get(fd)
            if i is not None:
                s = socks[i]
                while True:
                    try:
                        c, _ = s.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    stats['accepted'] += 1
                    if http:
                        c.setblocking(False)
                        conns[c.fileno()] = [c, b'']
                        ep.register(c.fileno(), select.EPOLLIN)
                    else:
                        c.close()
            elif fd == stdin:
                try:
                    d = os.read(stdin, 4096)
                except BlockingIOError:
                    continue
                if not d:
                    return
                ctl += d
                while b'\n' in ctl:
                    line, ctl = ctl.split(b'\n', 1)
                    cmd = line.decode().split()
                    if not cmd:
                        continue
                    if cmd[0] == 'clear':
                        rec = [[] for _ in range(a.servers)]
                        stats = dict.fromkeys(stats, 0)
                        cap.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
                        print('ok', flush=True)
                    elif cmd[0] == 'dump':
                        pk, dr = struct.unpack('II', cap.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
                        with open(cmd[1], 'w') as f:
                            json.dump({'arrivals': rec, 'capture_drops': dr, **stats}, f)
                        print('ok', flush=True)
                    elif cmd[0] == 'quit':
                        return
            else:
                st = conns.get(fd)
                if st is None:
                    continue
                c = st[0]
                try:
                    d = c.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    d = b''
                if d:
                    st[1] += d
                    if b'\r\n\r\n' not in st[1]:
                        continue
                    try:
                        c.send(HTTP_OK)
                    except OSError:
                        pass
                ep.unregister(fd)
                del conns[fd]
                c.close()
    del keep


# ---------------------------------------------------------------------------------------------
# Role: the keep-alive latency client
# ---------------------------------------------------------------------------------------------

def role_lat(a):
    s = socket.create_connection(('127.0.0.1', a.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    errors = 0
    i = 0
    start = time.monotonic()
    while True:
        due = start + i * a.every
        now = time.monotonic()
        if due >= a.until:
            break
        if due > now:
            time.sleep(due - now)
        i += 1
        t0 = time.monotonic()
        try:
            s.sendall(REQ)
            buf = b''
            while not (b'\r\n\r\n' in buf and buf.endswith(b'ok')):
                d = s.recv(4096)
                if not d:
                    raise OSError('closed')
                buf += d
        except OSError:
            errors += 1
            s.close()
            s = socket.create_connection(('127.0.0.1', a.port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            continue
        out.append(time.monotonic() - t0)
    with open(a.out, 'w') as f:
        json.dump({'lat': out, 'errors': errors}, f)


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------

free_port = base.free_port
cpu_s = base.cpu_s


def wait_port(port, proc, timeout=30.0):
    return base.wait_port(port, proc, timeout)


def rss_kib(pid):
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    return 0


def stop(p, timeout=5):
    if p is None or p.poll() is not None:
        return
    try:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def make_config(a, port, sock, servers, check, mode):
    lines = [
        'global',
        f'    nbthread {a.threads}',
        '    maxconn 2000',
        f'    stats socket {sock} mode 600 level admin',
        'defaults',
        '    mode http',
        '    timeout connect 2s',
        '    timeout client 30s',
        '    timeout server 30s',
        '    timeout check 2s',
        'frontend fe',
        f'    bind 127.0.0.1:{port}',
        '    http-request return status 200 content-type text/plain string ok',
        'backend be',
        '    balance roundrobin',
    ]
    if mode == 'http':
        lines.append('    option httpchk GET /')
    lines.append(f'    default-server inter {a.inter}' + (' check' if check else ''))
    for i in range(servers):
        ip, p = addr_of(i, a.per_addr)
        lines.append(f'    server s{i} {ip}:{p}')
    return '\n'.join(lines) + '\n'


def server_states(sock):
    """{status: count}, {check_status: count} for the servers of backend `be`."""
    out = cli(sock, 'show stat')
    lines = out.splitlines()
    hdr = lines[0].lstrip('# ').split(',')
    ist, ick, ipx, isv = hdr.index('status'), hdr.index('check_status'), hdr.index('pxname'), hdr.index('svname')
    st, ck = {}, {}
    for line in lines[1:]:
        f = line.split(',')
        if len(f) <= ick or f[ipx] != 'be' or f[isv] in ('BACKEND', 'FRONTEND'):
            continue
        st[f[ist]] = st.get(f[ist], 0) + 1
        ck[f[ick]] = ck.get(f[ick], 0) + 1
    return st, ck


class Target:
    def __init__(self, a, mode, tmp):
        self.tmp = tmp
        # (getattr: check_floor.py and checks_tls.py start a Target with their own options.)
        prefix = ['taskset', '-c', a.client_cpus] if getattr(a, 'pin', False) else []
        if getattr(a, 'target_idle', False):
            prefix += ['chrt', '--idle', '0']
        self.p = subprocess.Popen(prefix + [sys.executable, os.path.abspath(__file__), '--role', 'target',
                                   '--servers', str(a.servers), '--per-addr', str(a.per_addr),
                                   '--mode', mode],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  start_new_session=True)
        line = self.p.stdout.readline()
        if line.strip() != 'ready':
            raise RuntimeError('target did not start: ' + line)

    def cmd(self, c):
        self.p.stdin.write(c + '\n')
        self.p.stdin.flush()
        if self.p.stdout.readline().strip() != 'ok':
            raise RuntimeError('target: no answer to ' + c)

    def dump(self):
        path = os.path.join(self.tmp, 'arrivals.json')
        self.cmd('dump ' + path)
        with open(path) as f:
            return json.load(f)

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write('quit\n')
                self.p.stdin.flush()
            except OSError:
                pass
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        stop(self.p)


def start_lat(a, port, until, out):
    pin = ['taskset', '-c', a.client_cpus] if a.pin else []
    return subprocess.Popen(pin + [sys.executable, os.path.abspath(__file__), '--role', 'lat',
                             '--port', str(port), '--until', repr(until), '--every', str(a.lat_every),
                             '--out', out], start_new_session=True)


def lat_result(p, out, timeout):
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(p)
        raise RuntimeError('latency client overran')
    with open(out) as f:
        r = json.load(f)
    lat = sorted(r['lat'])
    return {'n': len(lat), 'errors': r['errors'],
            'p50': pct(lat, 50) * 1e3, 'p99': pct(lat, 99) * 1e3, 'p99.9': pct(lat, 99.9) * 1e3,
            'p99.99': pct(lat, 99.99) * 1e3, 'max': (lat[-1] if lat else float('nan')) * 1e3}


def run_phase(a, name, binary, mode, phase, target, tmp):
    """phase: empty | nocheck | check. Returns a dict of measurements."""
    port = free_port()
    sock = os.path.join(tmp, f'{name}-{phase}.sock')
    cfg = os.path.join(tmp, f'{name}-{mode}-{phase}.cfg')
    servers = 0 if phase == 'empty' else a.servers
    with open(cfg, 'w') as f:
        f.write(make_config(a, port, sock, servers, phase == 'check', mode))
    logp = cfg + '.log'
    lf = open(logp, 'w')
    p = lat = None
    res = {'phase': phase}
    try:
        t_start = time.monotonic()
        pin = ['taskset', '-c', a.proxy_cpus] if a.pin else []
        p = subprocess.Popen(pin + [binary, '-db', '-f', cfg], stdout=lf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        if not wait_port(port, p):
            raise RuntimeError(f'{name} did not listen; log:\n' + open(logp).read()[-2000:])
        res['listen_s'] = time.monotonic() - t_start
        if phase == 'empty':
            time.sleep(a.settle)
            res['rss_kib'] = rss_kib(p.pid)
            return res
        if phase == 'nocheck':
            time.sleep(a.settle)
            w0 = time.monotonic()
            w1 = w0 + a.nocheck_window
        else:
            w0 = t_start + a.warmup
            w1 = t_start + a.duration
            time.sleep(max(0, w0 - time.monotonic()))
        lat_out = os.path.join(tmp, f'lat-{name}-{mode}-{phase}.json')
        c0 = cpu_s(p.pid)
        tc0 = target and cpu_s(target.p.pid)
        t0 = time.monotonic()
        lat = start_lat(a, port, w1, lat_out)
        if target:
            target.cmd('clear')
        time.sleep(max(0, w1 - time.monotonic()))
        c1 = cpu_s(p.pid)
        t1 = time.monotonic()
        tc1 = target and cpu_s(target.p.pid)
        res['window_s'] = t1 - t0
        res['cpu_s'] = c1 - c0
        res['cpu_pct'] = 100 * (c1 - c0) / (t1 - t0)
        res['target_cpu_pct'] = 100 * (tc1 - tc0) / (t1 - t0) if target else None
        res['rss_kib'] = rss_kib(p.pid)
        dump = target.dump() if target else None
        res['lat'] = lat_result(lat, lat_out, 15)
        lat = None
        if p.poll() is not None:
            raise RuntimeError(f'{name} died; log:\n' + open(logp).read()[-2000:])
        st, ck = server_states(sock)
        res['status'] = st
        res['check_status'] = ck
        if dump is not None:
            off = time.time() - time.monotonic()   # arrivals carry kernel CLOCK_REALTIME stamps
            res['sched'] = schedule(dump['arrivals'], w0 + off, w1 + off, parse_time(a.inter))
            res['capture'] = {k: v for k, v in dump.items() if k != 'arrivals'}
        return res
    finally:
        stop(lat)
        stop(p)
        lf.close()
        if p is not None and p.returncode not in (0, -15, 143, None):
            res['exit'] = p.returncode


def schedule(arrivals, w0, w1, inter):
    late = []
    counts = []
    for times in arrivals:
        ts = [t for t in times if w0 <= t <= w1]
        counts.append(len(ts))
        for x, y in zip(ts, ts[1:]):
            late.append(y - x - inter)
    late.sort()
    counts.sort()
    n = len(counts)
    exp = int((w1 - w0) // inter)
    total = sum(counts)
    return {
        'checks': total, 'intervals': len(late), 'window_s': w1 - w0, 'expected_per_server': (w1 - w0) / inter,
        'late_p50_ms': pct(late, 50) * 1e3, 'late_p99_ms': pct(late, 99) * 1e3,
        'late_p999_ms': pct(late, 99.9) * 1e3, 'late_max_ms': (late[-1] if late else float('nan')) * 1e3,
        'late_min_ms': (late[0] if late else float('nan')) * 1e3,
        'late_over_50ms': sum(1 for x in late if x > 0.05),
        'count_min': counts[0] if counts else 0, 'count_p50': pct(counts, 50),
        'count_max': counts[-1] if counts else 0,
        'frac_ge_n_1': sum(1 for c in counts if c >= exp - 1) / n if n else 0,
        'frac_ge_n': sum(1 for c in counts if c >= exp) / n if n else 0, 'n_floor': exp,
        'never': sum(1 for c in counts if c == 0),
    }


def fmt_report(rows, a):
    out = []
    inter = parse_time(a.inter)
    for (name, mode), ph in rows.items():
        e, n, c = ph.get('empty', {}), ph.get('nocheck', {}), ph.get('check', {})
        out.append(f'== {name}  mode={mode}  servers={a.servers}  inter={a.inter}  nbthread={a.threads}')
        if 'error' in ph:
            out.append('   FAILED: ' + ph['error'])
        if c.get('sched'):
            s = c['sched']
            out.append(f'   schedule ({s["window_s"]:.1f} s window, {s["checks"]} checks, {s["checks"] / s["window_s"]:.0f}/s): '
                       f'lateness (interval - inter) p50 {s["late_p50_ms"]:.2f} ms, p99 {s["late_p99_ms"]:.2f} ms, '
                       f'p99.9 {s["late_p999_ms"]:.2f} ms, max {s["late_max_ms"]:.2f} ms, min {s["late_min_ms"]:.2f} ms; '
                       f'{s["late_over_50ms"]} of {s["intervals"]} intervals > 50 ms late')
            out.append(f'   checks per server: min {s["count_min"]} p50 {s["count_p50"]} max {s["count_max"]} '
                       f'(window/inter = {s["expected_per_server"]:.1f}); >= {s["n_floor"] - 1}: '
                       f'{100 * s["frac_ge_n_1"]:.2f} %, >= {s["n_floor"]}: {100 * s["frac_ge_n"]:.2f} %; never checked: {s["never"]}')
        if c.get('cpu_pct') is not None and n.get('cpu_pct') is not None and c.get('sched'):
            checks = c['sched']['checks']
            diff = c['cpu_pct'] - n['cpu_pct']
            per = c['cpu_s'] * 1e6 / checks if checks else float('nan')
            per_diff = diff / 100 * c['window_s'] * 1e6 / checks if checks else float('nan')
            out.append(f'   proxy CPU: checks on {c["cpu_pct"]:.1f} % of a core ({per:.1f} us/check), checks off '
                       f'{n["cpu_pct"]:.1f} %; check work {diff:.1f} % ({per_diff:.1f} us/check). '
                       f'target CPU {c["target_cpu_pct"]:.1f} %')
        if c.get('rss_kib') and n.get('rss_kib'):
            out.append(f'   RSS: empty {e.get("rss_kib", 0) / 1024:.1f} MiB, {a.servers} servers no check '
                       f'{n["rss_kib"] / 1024:.1f} MiB, with checks {c["rss_kib"] / 1024:.1f} MiB; per check '
                       f'{(c["rss_kib"] - n["rss_kib"]) * 1024 / a.servers:.0f} B, per configured server '
                       f'{(n["rss_kib"] - e.get("rss_kib", 0)) * 1024 / a.servers:.0f} B')
        for label, r in (('checks off', n), ('checks on ', c)):
            lt = r.get('lat')
            if lt:
                out.append(f'   latency {label}: n={lt["n"]} p50 {lt["p50"]:.3f} p99 {lt["p99"]:.3f} p99.9 {lt["p99.9"]:.3f} '
                           f'p99.99 {lt["p99.99"]:.3f} max {lt["max"]:.3f} ms, errors {lt["errors"]}')
        if n.get('lat') and c.get('lat'):
            out.append(f'   latency ratio on/off: p99 {c["lat"]["p99"] / n["lat"]["p99"]:.2f}x, '
                       f'p99.9 {c["lat"]["p99.9"] / n["lat"]["p99.9"]:.2f}x, p99.99 {c["lat"]["p99.99"] / n["lat"]["p99.99"]:.2f}x')
        if c.get('capture'):
            cp = c['capture']
            out.append(f'   SYN capture: {cp["syn"]} SYNs recorded, {cp["capture_drops"]} dropped by the capture socket, '
                       f'{cp["accepted"]} connections accepted by the target')
        if c.get('status') is not None:
            out.append(f'   servers at end: {c["status"]}  check_status: {c["check_status"]}')
        out.append('')
    _ = inter
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--role', default='harness', choices=['harness', 'target', 'lat'])
    ap.add_argument('--sluice', default=os.path.join(ROOT, 'target/release/sluice'))
    ap.add_argument('--haproxy', default='/usr/sbin/haproxy')
    ap.add_argument('--proxies', default='sluice,haproxy',
                    help='comma list of sluice, haproxy, or NAME=PATH (another sluice binary)')
    ap.add_argument('--modes', default='l4,http', help='l4 (plain connect), http (option httpchk)')
    ap.add_argument('--servers', type=int, default=10000)
    ap.add_argument('--per-addr', type=int, default=250, help='ports per 127.0.K.1 address')
    ap.add_argument('--inter', default='2s')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--duration', type=float, default=40, help='check phase length from start-up')
    ap.add_argument('--warmup', type=float, default=10, help='unmeasured start of the check phase')
    ap.add_argument('--nocheck-window', type=float, default=20)
    ap.add_argument('--settle', type=float, default=3)
    ap.add_argument('--lat-every', type=float, default=0.001, help='latency client pacing, s')
    ap.add_argument('--pin', action='store_true',
                    help='proxy under taskset -c PROXY_CPUS, target and latency client under '
                         'taskset -c CLIENT_CPUS (with --threads 1 on two cores)')
    ap.add_argument('--proxy-cpus', default='1')
    ap.add_argument('--client-cpus', default='0')
    ap.add_argument('--target-idle', action='store_true',
                    help='run the check target as SCHED_IDLE: the checked servers only get CPU time '
                         'the proxy and the latency client leave, as servers on other machines '
                         'would (the packet capture still timestamps in the kernel)')
    ap.add_argument('--out', help='also write the report here')
    ap.add_argument('--json', help='write raw results here')
    # role arguments
    ap.add_argument('--mode', default='l4')
    ap.add_argument('--port', type=int)
    ap.add_argument('--until', type=float)
    ap.add_argument('--every', type=float)
    a = ap.parse_args()
    if a.role == 'target':
        return role_target(a)
    if a.role == 'lat':
        return role_lat(a)

    proxies = []
    for x in a.proxies.split(','):
        if x == 'sluice':
            proxies.append(('sluice', a.sluice))
        elif x == 'haproxy':
            proxies.append(('haproxy', a.haproxy))
        elif '=' in x:
            proxies.append(tuple(x.split('=', 1)))
        else:
            sys.exit(f'unknown proxy {x}')
    head = [f'# bench/checks.py  {time.strftime("%Y-%m-%d %H:%M:%S")}',
            '# ' + ' '.join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            f'# git {subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}']
    for name, b in proxies:
        v = subprocess.run([b, '-v'], capture_output=True, text=True).stdout.splitlines()
        head.append(f'# {name}: {b}: {v[0] if v else "?"}')
    with open('/proc/loadavg') as f:
        head.append('# loadavg at start: ' + f.read().strip())
    print('\n'.join(head), flush=True)
    rows = {}
    raw = {'args': vars(a), 'results': {}}
    tmp = tempfile.mkdtemp(prefix='sluice-checks-')
    target = None
    try:
        for mode in a.modes.split(','):
            target = Target(a, mode, tmp)
            for name, b in proxies:
                ph = rows.setdefault((name, mode), {})
                try:
                    for phase in ('empty', 'nocheck', 'check'):
                        print(f'-- {name} {mode} {phase} ...', flush=True)
                        ph[phase] = run_phase(a, name, b, mode, phase,
                                              None if phase == 'empty' else target, tmp)
                        print('   ' + json.dumps(ph[phase]), flush=True)
                except Exception as ex:  # noqa: BLE001 - report and go on with the next proxy
                    ph['error'] = str(ex)
                    print(f'   FAILED: {ex}', flush=True)
                raw['results'][f'{name}/{mode}'] = ph
            target.close()
            target = None
    finally:
        if target:
            target.close()
    with open('/proc/loadavg') as f:
        tail = '# loadavg at end: ' + f.read().strip()
    rep = '\n'.join(head) + '\n\n' + fmt_report(rows, a) + '\n' + tail + '\n'
    print('\n' + fmt_report(rows, a) + '\n' + tail)
    if a.out:
        with open(a.out, 'w') as f:
            f.write(rep)
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(raw, f, indent=1, default=str)
    return 1 if any('error' in ph for ph in rows.values()) else 0


if __name__ == '__main__':
    sys.exit(main() or 0)
