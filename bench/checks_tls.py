#!/usr/bin/env python3
"""bench/checks_tls.py: TLS health checks of 2,000 servers with and without
`tune.max-checks-per-thread`, sluice vs HAProxy 2.6, loopback only.

    python3 bench/checks_tls.py --sluice /path/to/sluice --servers 2000 --inter 1s \\
        --timeout-check 1s --max-checks-per-thread 20 --duration 40 --modes httpchk,l4

The check target is nginx (/usr/sbin/nginx, a foreground instance with its own prefix dir,
`worker_processes` --nginx-workers, default 1), not Python: it terminates real TLS (a
self-signed ECDSA P-256 certificate made with bench/tls.py's make_certs) on --servers ports over
127.0.K.1 (bench/checks.py's addr_of: --per-addr ports per address from port 20000). Modes:

  httpchk   `option httpchk GET /` + `check check-ssl verify none`: nginx's http module,
            `return 200`, one access-log line per check request
  l4        `check check-ssl verify none` (TLS handshake, no request): nginx's stream module,
            `return "ok"` after the handshake, one access-log line per session

Configurations, run one after the other in each repetition and mode, every one with a fresh
nginx (so its log and CPU belong to that run) and a fresh proxy (`nbthread` --threads, default
2, one backend of --servers servers with `default-server inter I check check-ssl verify none`,
`timeout check` --timeout-check, `timeout connect` --timeout-connect, a stats socket, a
frontend with the Prometheus exporter):

  sluice-maxN   sluice with `tune.max-checks-per-thread N` (--max-checks-per-thread)
  sluice        sluice without it
  haproxy       HAProxy 2.6 without it (2.6 has no such keyword)

Every run lasts --duration s from the proxy's start (so the start-up, where all servers get
their first check within one `inter`, is included); the steady window is after --warmup s.

Measured per run:
  - nginx's log (the reliable per-check record, the same for all proxies): checks that reached
    nginx and were answered (http: status 200; stream: sessions); per check its server-side
    time, accept to log (http `$connection_time`: handshake + request + response; stream
    `$session_time`: handshake + "ok" + the proxy's close), ms resolution; TLS session
    resumption (`$ssl_session_reused`); the per-server intervals between consecutive check
    starts (start = `$msec` - that time) in the steady window, minus `inter` (the drift;
    both proxies schedule the next check `inter` after the previous one ends, so a check's own
    duration and any wait for a slot are in it); the most checks open at once on nginx
    (from the [start, end] intervals; ms rounding can add one or two);
  - nginx's stub_status `accepts` (every connection nginx accepted, answered or not);
  - the proxy's `show stat` every --stat-every s and at the end: per server `check_duration`
    (the last check's duration as the proxy saw it; sluice counts the wait for a
    max-checks-per-thread slot in it), `check_status`, `chkfail` (failed checks), status;
    the durations of all snapshots give the proxy-side p50/p99/max (a sample: each snapshot
    shows each server's last check);
  - sluice only: the Prometheus histogram `haproxy_server_check_time_seconds` (every check's
    duration, slot wait included), summed over servers: checks above 0.5/1/2 s;
  - the proxy's CPU (utime+stime, all threads) over the whole run and the steady window, nginx's
    CPU (master + workers), the proxy's RSS at the end.

This is a 2-core machine: proxy and nginx share both cores, unpinned. Every process started here
is stopped by PID in a finally block; every run is bounded by --duration (+ fixed timeouts).
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import checks  # noqa: E402  (addr_of, pct, parse_time, cli, stop, rss_kib, free_port, wait_port, cpu_s)
import tls  # noqa: E402  (make_certs)

ROOT = os.path.dirname(BENCH)
NGINX = '/usr/sbin/nginx'
STREAM_MODULE = '/usr/lib/nginx/modules/ngx_stream_module.so'
addr_of, pct, parse_time, cli, stop = checks.addr_of, checks.pct, checks.parse_time, checks.cli, checks.stop


# ---------------------------------------------------------------------------------------------
# nginx, the TLS check target
# ---------------------------------------------------------------------------------------------

def nginx_config(a, d, mode, pem, status_port):
    listens = []
    for i in range(a.servers):
        ip, port = addr_of(i, a.per_addr)
        listens.append(f'        listen {ip}:{port} ssl backlog=4096;')
    listens = '\n'.join(listens)
    tls_conf = (f'        ssl_certificate {pem};\n        ssl_certificate_key {pem};\n'
                '        ssl_protocols TLSv1.2 TLSv1.3;')
    head = (f'load_module {STREAM_MODULE};\n' if mode == 'l4' else '') + f"""worker_processes {a.nginx_workers};
worker_rlimit_nofile 20000;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
"""
    http_checks = ''
    if mode == 'httpchk':
        http_checks = f"""    server {{
{listens}
{tls_conf}
        access_log {d}/checks.log chk buffer=256k flush=1s;
        location / {{ return 200; }}
    }}
"""
    httpb = f"""http {{
    log_format chk '$msec $connection_time $server_addr $server_port $status $ssl_session_reused $ssl_protocol';
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    server {{
        listen 127.0.0.1:{status_port};
        location / {{ stub_status; }}
    }}
{http_checks}}}
"""
    stream = ''
    if mode == 'l4':
        stream = f"""stream {{
    log_format chk '$msec $session_time $server_addr $server_port $status $ssl_session_reused $ssl_protocol';
    server {{
{listens}
{tls_conf}
        access_log {d}/checks.log chk buffer=256k flush=1s;
        return "ok\\n";
    }}
}}
"""
    return head + httpb + stream


class Nginx:
    def __init__(self, a, tmp, mode, pem, tag):
        self.d = os.path.join(tmp, f'nginx-{tag}')
        self.per_addr = a.per_addr
        os.makedirs(os.path.join(self.d, 'tmp'))
        os.chmod(self.d, 0o755)   # workers run as nobody
        self.status_port = checks.free_port()
        conf = os.path.join(self.d, 'nginx.conf')
        with open(conf, 'w') as f:
            f.write(nginx_config(a, self.d, mode, pem, self.status_port))
        self.logf = open(os.path.join(self.d, 'stderr.log'), 'w')
        self.p = subprocess.Popen([NGINX, '-e', os.path.join(self.d, 'error.log'), '-p', self.d, '-c', conf],
                                  stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        if not checks.wait_port(self.status_port, self.p, 30):
            raise RuntimeError('nginx did not start: ' + self.errors())
        # every check port listens once the status port does (one configuration load)
        ip, port = addr_of(a.servers - 1, a.per_addr)
        socket.create_connection((ip, port), timeout=2).close()

    def errors(self):
        out = ''
        for n in ('stderr.log', 'error.log'):
            p = os.path.join(self.d, n)
            if os.path.exists(p):
                out += open(p).read()[-2000:]
        return out

    def accepts(self):
        c = http.client.HTTPConnection('127.0.0.1', self.status_port, timeout=5)
        c.request('GET', '/')
        body = c.getresponse().read().decode()
        c.close()
        return int(body.splitlines()[2].split()[0])

    def cpu(self):
        return tree_cpu(self.p.pid)

    def close(self):
        # SIGTERM to the master (its own PID): it stops its workers and flushes the log buffers
        stop(self.p, timeout=10)
        self.logf.close()

    def records(self):
        """[(start, dur, server_index, status, reused, proto)] from the check log."""
        out = []
        p = os.path.join(self.d, 'checks.log')
        if not os.path.exists(p):
            return out
        with open(p) as f:
            for line in f:
                f_ = line.split()
                if len(f_) < 7:
                    continue
                end, dur = float(f_[0]), float(f_[1])
                ip, port = f_[2], int(f_[3])
                k = int(ip.split('.')[1]) * 256 + int(ip.split('.')[2])
                i = (k - 1) * self.per_addr + port - checks.BASE_PORT
                out.append((end - dur, dur, i, f_[4], f_[5], f_[6]))
        return out


def tree_cpu(pid):
    """utime+stime of a process and its children (nginx: master + workers)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += checks.cpu_s(p)
            with open(f'/proc/{p}/task/{p}/children') as f:
                todo += [int(x) for x in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


# ---------------------------------------------------------------------------------------------
# The proxy
# ---------------------------------------------------------------------------------------------

def proxy_config(a, port, sock, mode, limit):
    g = [
        'global',
        f'    nbthread {a.threads}',
        '    maxconn 4000',
        f'    stats socket {sock} mode 600 level admin',
    ]
    if limit:
        g.append(f'    tune.max-checks-per-thread {limit}')
    lines = g + [
        'defaults',
        '    mode http',
        f'    timeout connect {a.timeout_connect}',
        '    timeout client 30s',
        '    timeout server 30s',
        f'    timeout check {a.timeout_check}',
        'frontend fe',
        f'    bind 127.0.0.1:{port}',
        '    http-request use-service prometheus-exporter if { path /metrics }',
        '    http-request return status 200 content-type text/plain string ok',
        'backend be',
        '    balance roundrobin',
    ]
    if mode == 'httpchk':
        lines.append('    option httpchk GET /')
    lines.append(f'    default-server inter {a.inter} check check-ssl verify none')
    for i in range(a.servers):
        ip, p = addr_of(i, a.per_addr)
        lines.append(f'    server s{i} {ip}:{p}')
    return '\n'.join(lines) + '\n'


def show_stat(sock):
    """[(status, check_status, chkfail, check_duration_ms or None)] for backend `be`'s servers."""
    out = cli(sock, 'show stat', timeout=20)
    lines = out.splitlines()
    hdr = lines[0].lstrip('# ').split(',')
    ix = {k: hdr.index(k) for k in ('pxname', 'svname', 'status', 'check_status', 'chkfail', 'check_duration')}
    rows = []
    for line in lines[1:]:
        f = line.split(',')
        if len(f) <= ix['check_duration'] or f[ix['pxname']] != 'be' or f[ix['svname']] in ('BACKEND', 'FRONTEND'):
            continue
        d = f[ix['check_duration']]
        rows.append((f[ix['status']], f[ix['check_status']], int(f[ix['chkfail']] or 0),
                     int(d) if d.isdigit() else None))
    return rows


def check_time_hist(port):
    """sluice: haproxy_server_check_time_seconds summed over servers: ({le: cumulative}, count)."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    c.request('GET', '/metrics?scope=server')
    body = c.getresponse().read().decode()
    c.close()
    buckets = {}
    for line in body.splitlines():
        if line.startswith('haproxy_server_check_time_seconds_bucket{'):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[le] = buckets.get(le, 0) + int(float(line.rsplit(' ', 1)[1]))
    return buckets


class OpenSampler(threading.Thread):
    """Every --open-every s: the proxy's check connections still open, from `ss` (kernel-side
    filter): TCP sockets to the check ports (destination port in the servers' range; only the
    proxy has such outgoing connections) in SYN-SENT, ESTABLISHED or CLOSE-WAIT (the proxy has
    not closed them yet). A running check holds one, so under max-checks-per-thread N the count
    should not pass N x nbthread (a sample can also catch a finished check's socket in the
    instant before the proxy closes it)."""

    def __init__(self, a):
        super().__init__(daemon=True)
        self.every = a.open_every
        hi = checks.BASE_PORT + min(a.per_addr, a.servers) - 1
        self.cmd = ['ss', '-Htn', 'state', 'syn-sent', 'state', 'established', 'state', 'close-wait',
                    f'( dport >= :{checks.BASE_PORT} and dport <= :{hi} )']
        self.samples = []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.wait(self.every):
            try:
                out = subprocess.run(self.cmd, capture_output=True, text=True, timeout=5).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            self.samples.append(out.count('\n'))

    def result(self):
        v = sorted(self.samples)
        return {'n': len(v), 'p50': pct(v, 50), 'p99': pct(v, 99), 'max': v[-1] if v else None}


def run_one(a, name, binary, limit, mode, pem, tmp, tag):
    res = {'name': name, 'mode': mode, 'limit': limit}
    port = checks.free_port()
    sock = os.path.join(tmp, f'{tag}.sock')
    cfg = os.path.join(tmp, f'{tag}.cfg')
    with open(cfg, 'w') as f:
        f.write(proxy_config(a, port, sock, mode, limit))
    ng = p = lf = None
    sampler = OpenSampler(a)
    try:
        ng = Nginx(a, tmp, mode, pem, tag)
        acc0 = ng.accepts()
        n0 = ng.cpu()
        lf = open(cfg + '.log', 'w')
        wall0 = time.time()
        t0 = time.monotonic()
        p = subprocess.Popen([binary, '-db', '-f', cfg], stdout=lf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        if not checks.wait_port(port, p, 30):
            raise RuntimeError(f'{name} did not listen; log:\n' + open(cfg + '.log').read()[-2000:])
        res['listen_s'] = time.monotonic() - t0
        sampler.start()
        w0, w1 = t0 + a.warmup, t0 + a.duration
        snaps = []           # check_duration samples from all snapshots
        snap_status = {}
        fail_w0 = None
        c_w0 = nc_w0 = None
        next_snap = t0 + a.stat_every
        while True:
            now = time.monotonic()
            if c_w0 is None and now >= w0:
                c_w0, nc_w0, tw0 = checks.cpu_s(p.pid), ng.cpu(), now
                fail_w0 = sum(r[2] for r in show_stat(sock))
            if now >= w1:
                break
            if p.poll() is not None:
                raise RuntimeError(f'{name} died (exit {p.returncode}); log:\n' + open(cfg + '.log').read()[-2000:])
            if now >= next_snap:
                for st, ck, _, d in show_stat(sock):
                    if d is not None:
                        snaps.append(d)
                    snap_status[ck] = snap_status.get(ck, 0) + 1
                next_snap += a.stat_every
            time.sleep(max(0.0, min(next_snap, w0 if c_w0 is None else w1, w1) - time.monotonic()))
        c1, nc1, tw1 = checks.cpu_s(p.pid), ng.cpu(), time.monotonic()
        sampler.halt.set()
        sampler.join(10)
        res['proxy_open'] = sampler.result()
        res['proxy_cpu_pct_window'] = 100 * (c1 - c_w0) / (tw1 - tw0)
        res['proxy_cpu_pct_run'] = 100 * c1 / (tw1 - t0)
        res['nginx_cpu_pct_window'] = 100 * (nc1 - nc_w0) / (tw1 - tw0)
        res['nginx_cpu_pct_run'] = 100 * (nc1 - n0) / (tw1 - t0)
        res['rss_mib'] = checks.rss_kib(p.pid) / 1024
        wall1 = time.time()
        end = show_stat(sock)
        res['not_up'] = sum(1 for r in end if r[0] != 'UP')
        res['status_end'] = count([r[0] for r in end])
        res['check_status_end'] = count([r[1] for r in end])
        res['chkfail_run'] = sum(r[2] for r in end)
        res['chkfail_window'] = res['chkfail_run'] - fail_w0
        res['check_status_snapshots'] = snap_status
        ds = sorted(snaps + [r[3] for r in end if r[3] is not None])
        res['proxy_dur_ms'] = {'n': len(ds), 'p50': pct(ds, 50), 'p99': pct(ds, 99), 'max': ds[-1] if ds else None,
                               'over_tc': sum(1 for x in ds if x > parse_time(a.timeout_check) * 1e3)}
        if name.startswith('sluice'):
            try:
                res['sluice_hist'] = check_time_hist(port)
            except (OSError, ValueError, IndexError) as ex:
                res['sluice_hist'] = {'error': str(ex)}
        res['accepts'] = ng.accepts() - acc0
        stop(p, timeout=10)
        if p.returncode not in (0, -15, 143):
            res['exit'] = p.returncode
        time.sleep(0.2)
        ng.close()   # flushes the access-log buffer
        res.update(analyse(a, mode, ng.records(), wall0, wall0 + a.warmup, wall0 + a.duration, wall1))
        res['proxy_log_tail'] = open(cfg + '.log').read()[-1500:]
        return res
    finally:
        sampler.halt.set()
        if sampler.is_alive():
            sampler.join(10)
        stop(p, timeout=10)
        if ng is not None:
            ng.close()
        if lf is not None:
            lf.close()


def count(xs):
    d = {}
    for x in xs:
        d[x] = d.get(x, 0) + 1
    return d


def analyse(a, mode, recs, wall0, ww0, ww1, wall_end):
    inter = parse_time(a.inter)
    tc = parse_time(a.timeout_check)
    # answered: http status 200; stream: the TLS handshake completed ($ssl_protocol set). The
    # stream status is 200 when nginx wrote its "ok" before the proxy closed, 500 when the
    # proxy closed first (a handshake-only check does not wait for data)
    ok = [r for r in recs if (r[3] == '200' if mode == 'httpchk' else r[5] not in ('-', ''))]
    durs = sorted(r[1] for r in ok)
    out = {
        'nginx_logged': len(recs), 'nginx_ok': len(ok), 'nginx_status': count(f'{r[3]}/{r[5]}' for r in recs),
        'reused': sum(1 for r in ok if r[4] == 'r'), 'protocols': count(r[5] for r in ok),
        'srv_dur_ms': {'p50': pct(durs, 50) * 1e3, 'p99': pct(durs, 99) * 1e3, 'p999': pct(durs, 99.9) * 1e3,
                       'max': (durs[-1] * 1e3) if durs else None,
                       'over_tc': sum(1 for x in durs if x > tc)},
    }
    # most checks open at once on nginx (ends sort before starts at the same ms)
    ev = sorted([(r[0], 1) for r in recs] + [(r[0] + r[1], -1) for r in recs], key=lambda e: (e[0], e[1]))
    cur = mx = 0
    for _, d in ev:
        cur += d
        mx = max(mx, cur)
    out['max_open'] = mx
    # first check of every server after start-up
    first = {}
    for r in ok:
        if r[2] not in first or r[0] < first[r[2]]:
            first[r[2]] = r[0]
    fs = sorted(first.values())
    out['first_checks'] = {'servers': len(first), 'spread_s': (fs[-1] - fs[0]) if fs else None,
                           'last_after_start_s': (fs[-1] - wall0) if fs else None}
    # steady window: drift of the intervals between starts, checks per server
    per = {}
    for r in ok:
        if ww0 <= r[0] <= ww1:
            per.setdefault(r[2], []).append(r[0])
    late, counts = [], []
    for i in range(a.servers):
        ts = sorted(per.get(i, []))
        counts.append(len(ts))
        late += [y - x - inter for x, y in zip(ts, ts[1:])]
    late.sort()
    counts.sort()
    out['window'] = {
        'seconds': ww1 - ww0, 'checks': sum(counts), 'per_s': sum(counts) / (ww1 - ww0),
        'expected_per_server': (ww1 - ww0) / inter,
        'count_min': counts[0] if counts else 0, 'count_p50': pct(counts, 50),
        'never': sum(1 for c in counts if c == 0),
        'late_p50_ms': pct(late, 50) * 1e3, 'late_p99_ms': pct(late, 99) * 1e3,
        'late_max_ms': (late[-1] * 1e3) if late else None,
        'late_over_inter': sum(1 for x in late if x > inter), 'intervals': len(late),
    }
    _ = wall_end
    return out


def fmt(v, f='{:.1f}'):
    return '-' if v is None else f.format(v)


def report(rows, a):
    out = []
    tc = a.timeout_check
    for r in rows:
        hdr = f'== {r["name"]}  mode={r["mode"]}  rep={r["rep"]}'
        out.append(hdr)
        if 'error' in r:
            out.append('   FAILED: ' + r['error'])
            out.append('')
            continue
        w = r['window']
        sd, pd = r['srv_dur_ms'], r['proxy_dur_ms']
        out.append(f'   checks answered by nginx over the run: {r["nginx_ok"]} (log lines {r["nginx_logged"]}, '
                   f'statuses {r["nginx_status"]}); nginx accepted {r["accepts"]} connections; '
                   f'TLS resumed {r["reused"]}, {r["protocols"]}')
        out.append(f'   failed checks (proxy chkfail): run {r["chkfail_run"]}, steady window {r["chkfail_window"]}; '
                   f'servers not UP at end: {r["not_up"]} {r["status_end"]}; check_status at end {r["check_status_end"]}')
        out.append(f'   check_status over {a.stat_every:g}s snapshots: {r["check_status_snapshots"]}')
        out.append(f'   nginx-side check time (accept to log, answered checks): p50 {sd["p50"]:.0f} ms, p99 {sd["p99"]:.0f} ms, '
                   f'p99.9 {sd["p999"]:.0f} ms, max {fmt(sd["max"], "{:.0f}")} ms; > timeout check ({tc}): {sd["over_tc"]}; '
                   f'most open at once: {r["max_open"]}')
        po = r.get('proxy_open') or {}
        out.append(f'   proxy-side check connections open ({po.get("n")} ss samples every {a.open_every:g}s over the run): '
                   f'p50 {po.get("p50")}, p99 {po.get("p99")}, max {po.get("max")}')
        out.append(f'   proxy-side check_duration ({pd["n"]} snapshot samples): p50 {fmt(pd["p50"], "{:.0f}")} ms, '
                   f'p99 {fmt(pd["p99"], "{:.0f}")} ms, max {fmt(pd["max"], "{:.0f}")} ms; > {tc}: {pd["over_tc"]}')
        h = r.get('sluice_hist')
        if h and 'error' not in h:
            n = h.get('+Inf', 0)
            out.append(f'   sluice check_time histogram (every check, slot wait included): {n} checks; '
                       f'> 0.5 s: {n - h.get("0.5", 0)}, > 1 s: {n - h.get("1", 0)}, > 2 s: {n - h.get("2", 0)}, '
                       f'> 5 s: {n - h.get("5", 0)}')
        fc = r['first_checks']
        out.append(f'   start-up: listening after {r["listen_s"]:.2f} s; first checks of {fc["servers"]} servers spread over '
                   f'{fmt(fc["spread_s"], "{:.2f}")} s, the last {fmt(fc["last_after_start_s"], "{:.2f}")} s after start')
        out.append(f'   steady window ({w["seconds"]:.0f} s): {w["checks"]} checks ({w["per_s"]:.0f}/s), per server min '
                   f'{w["count_min"]} p50 {w["count_p50"]} (window/inter {w["expected_per_server"]:.1f}), never {w["never"]}; '
                   f'drift (interval - inter) p50 {w["late_p50_ms"]:.0f} ms, p99 {w["late_p99_ms"]:.0f} ms, '
                   f'max {fmt(w["late_max_ms"], "{:.0f}")} ms; {w["late_over_inter"]} of {w["intervals"]} intervals > 2x inter')
        out.append(f'   CPU: proxy {r["proxy_cpu_pct_window"]:.1f} % of a core in the window ({r["proxy_cpu_pct_run"]:.1f} % '
                   f'over the run incl. start-up), nginx {r["nginx_cpu_pct_window"]:.1f} % ({r["nginx_cpu_pct_run"]:.1f} %); '
                   f'proxy RSS {r["rss_mib"]:.1f} MiB' + (f'; exit {r["exit"]}' if 'exit' in r else ''))
        out.append('')
    out.append('summary (whole run incl. start-up unless noted)')
    out.append(f'{"config":14} {"mode":8} {"rep":>3} {"answered":>8} {"chkfail":>7} {"notUP":>5} '
               f'{"srv p50/p99/max ms":>19} {">tc":>4} {"proxy p50/p99/max ms":>21} {">tc":>5} '
               f'{"drift p50/p99/max ms":>21} {"open":>5} {"pxOpen":>6} {"pxCPU%":>6} {"ngCPU%":>6}')
    for r in rows:
        if 'error' in r:
            out.append(f'{r["name"]:14} {r["mode"]:8} {r["rep"]:>3} FAILED')
            continue
        sd, pd, w = r['srv_dur_ms'], r['proxy_dur_ms'], r['window']
        out.append(f'{r["name"]:14} {r["mode"]:8} {r["rep"]:>3} {r["nginx_ok"]:>8} {r["chkfail_run"]:>7} {r["not_up"]:>5} '
                   f'{sd["p50"]:>5.0f}/{sd["p99"]:>5.0f}/{fmt(sd["max"], "{:>6.0f}")} {sd["over_tc"]:>4} '
                   f'{fmt(pd["p50"], "{:>5.0f}")}/{fmt(pd["p99"], "{:>6.0f}")}/{fmt(pd["max"], "{:>7.0f}")} {pd["over_tc"]:>5} '
                   f'{w["late_p50_ms"]:>5.0f}/{w["late_p99_ms"]:>6.0f}/{fmt(w["late_max_ms"], "{:>7.0f}")} {r["max_open"]:>5} '
                   f'{fmt((r.get("proxy_open") or {}).get("max"), "{:>6}")} {r["proxy_cpu_pct_window"]:>6.1f} {r["nginx_cpu_pct_window"]:>6.1f}')
    out.append(f'legend: answered = checks nginx answered (httpchk: 200; l4: TLS handshake done); chkfail = failed checks counted by the proxy; srv = '
               f'nginx accept-to-log time per answered check; proxy = show stat check_duration samples; >tc = over timeout '
               f'check {tc}; drift = interval between check starts - inter (steady window); open = most checks open at '
               f'once on nginx (stream mode: nginx logs after the proxy closed, so this can pass the proxy\'s own '
               f'count); pxOpen = most proxy check connections open in an ss sample; CPU in % of one core over the steady window')
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--sluice', default=os.path.join(ROOT, 'target/release/sluice'))
    ap.add_argument('--haproxy', default='/usr/sbin/haproxy')
    ap.add_argument('--configs', default='sluice-max,sluice,haproxy',
                    help='comma list of sluice-max (sluice with --max-checks-per-thread), sluice, haproxy')
    ap.add_argument('--max-checks-per-thread', type=int, default=20)
    ap.add_argument('--modes', default='httpchk,l4', help='httpchk (option httpchk over TLS), l4 (TLS handshake only)')
    ap.add_argument('--servers', type=int, default=2000)
    ap.add_argument('--per-addr', type=int, default=250, help='ports per 127.0.K.1 address')
    ap.add_argument('--inter', default='1s')
    ap.add_argument('--timeout-check', default='1s')
    ap.add_argument('--timeout-connect', default='1s')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--nginx-workers', type=int, default=1)
    ap.add_argument('--cert', default='ecdsa', choices=['ecdsa', 'rsa'])
    ap.add_argument('--duration', type=float, default=40, help='run length from the proxy start, s')
    ap.add_argument('--warmup', type=float, default=10, help='start of the steady window, s after the proxy start')
    ap.add_argument('--stat-every', type=float, default=2, help='show stat snapshot period, s')
    ap.add_argument('--open-every', type=float, default=0.2, help='ss sampling period of open check connections, s')
    ap.add_argument('--repeat', type=int, default=1)
    ap.add_argument('--out', help='also write the report here')
    ap.add_argument('--json', help='write raw results here')
    a = ap.parse_args()
    for tool in (NGINX, 'openssl'):
        if not shutil.which(tool):
            sys.exit(f'{tool} not found')
    configs = []
    for c in a.configs.split(','):
        if c == 'sluice-max':
            configs.append((f'sluice-max{a.max_checks_per_thread}', a.sluice, a.max_checks_per_thread))
        elif c == 'sluice':
            configs.append(('sluice', a.sluice, 0))
        elif c == 'haproxy':
            configs.append(('haproxy', a.haproxy, 0))
        else:
            sys.exit(f'unknown config {c}')
    head = [f'# bench/checks_tls.py  {time.strftime("%Y-%m-%d %H:%M:%S")}',
            '# ' + ' '.join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            f'# git {subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}']
    for name, b, _ in configs:
        v = subprocess.run([b, '-v'], capture_output=True, text=True).stdout.splitlines()
        head.append(f'# {name}: {b}: {v[0] if v else "?"}')
    nv = subprocess.run([NGINX, '-v'], capture_output=True, text=True).stderr.strip()
    head.append(f'# target: {nv}, worker_processes {a.nginx_workers}, {a.cert} certificate; proxies nbthread {a.threads}; '
                f'{a.servers} servers, inter {a.inter}, timeout check {a.timeout_check}, timeout connect {a.timeout_connect}')
    with open('/proc/loadavg') as f:
        head.append('# loadavg at start: ' + f.read().strip())
    print('\n'.join(head), flush=True)
    tmp = tempfile.mkdtemp(prefix='sluice-checks-tls-')
    os.chmod(tmp, 0o755)
    rows = []
    try:
        pem = tls.make_certs(tmp)[a.cert]
        os.chmod(pem, 0o644)
        for rep in range(1, a.repeat + 1):
            for mode in a.modes.split(','):
                for name, b, limit in configs:
                    tag = f'{name}-{mode}-{rep}'
                    print(f'-- {tag} ...', flush=True)
                    try:
                        r = run_one(a, name, b, limit, mode, pem, tmp, tag)
                    except Exception as ex:  # noqa: BLE001 - report and go on
                        r = {'name': name, 'mode': mode, 'limit': limit, 'error': str(ex)}
                    r['rep'] = rep
                    rows.append(r)
                    print('   ' + json.dumps({k: v for k, v in r.items() if k != 'proxy_log_tail'}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open('/proc/loadavg') as f:
        tail = '# loadavg at end: ' + f.read().strip()
    rep_txt = report(rows, a)
    print('\n' + rep_txt + '\n' + tail)
    if a.out:
        with open(a.out, 'w') as f:
            f.write('\n'.join(head) + '\n\n' + rep_txt + '\n' + tail + '\n')
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'args': vars(a), 'results': rows}, f, indent=1, default=str)
    return 1 if any('error' in r for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main() or 0)
