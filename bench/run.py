#!/usr/bin/env python3
"""sluice vs HAProxy vs nginx, side by side, loopback only.

    bench/run.sh [options]            # setup + release build + this script
    python3 bench/run.py [options]    # this script alone (tools installed, sluice built)

All proxies sit in front of the same nginx origin (bench/backend.sh). For each
repetition, for each scenario, each proxy in turn (A, B, C, A, B, C ...) is
started fresh, checked to return the origin's exact bytes, warmed up, measured
and stopped, so that machine noise lands on all of them alike.

Proxies (--proxies, default haproxy,sluice,nginx; ratios are against --base,
default haproxy), each one thread and pinned to one core:
  haproxy  haproxy -db -f bench/proxies/haproxy.cfg            (nbthread 1)
  sluice   target/release/sluice -db -f bench/proxies/sluice.cfg (nbthread 1)
  nginx    bash bench/proxies/nginx-proxy.sh                   (worker_processes 1)
--proxy NAME=CMD adds (or replaces) one: a foreground shell command with the
placeholders {http_port} {tcp_port} {backend_port} {metrics_port} {https_port} {cert} {threads}
{workdir} {bench} {root}, also exported as BENCH_HTTP_PORT ... BENCH_WORKDIR.

Scenarios (--scenarios, default ka,close,64k,tcp,idle; 'direct' and
'ka-scrape' on request):
  ka     wrk keep-alive, 100 B responses
  ka-scrape  the ka load while the harness GETs the proxy's Prometheus
         /metrics every --scrape-every s (0.1); compare with ka (the summary
         pairs them): the cost of being scraped. Needs a listener on
         BENCH_METRICS_PORT (sluice and HAProxy configs have one)
  close  wrk with 'Connection: close' (a new client connection per request)
  64k    wrk keep-alive, 64 KiB responses
  tcp    wrk keep-alive through the proxy's mode tcp (L4) listener
  idle   --idle-conns (8000) keep-alive connections, one request each, then
         held idle: proxy RSS held vs RSS idle before
  direct wrk straight to the origin (what the load side does alone)
  ka-20srv  the ka load through a backend of 20 servers (all the origin):
         per-server pools; with --threads 2 also takeovers between threads.
         Reports the reuse ratio (1 - origin new conns / requests) and, for
         proxies exporting haproxy_server_pool_takeovers_total, takeovers/s
  idle-close  --conns clients, each sending one keep-alive GET every
         0.2..0.4 s (random) for --duration s, to an origin that closes idle
         connections after 300 ms: idle server connections race the origin's
         close. Counts client-visible errors (any non-200 or socket error)
  h2     h2load over HTTP/2 with prior knowledge (h2c) to the proxy's HTTP
         port, --conns/10 connections with 10 streams each, 100 B bodies;
         the proxies speak HTTP/1.1 to the origin. h2load reports no
         percentiles: p50 is its mean, p99 is not given
  ka-tls the ka load over HTTPS: the proxy terminates TLS (one self-signed
         ECDSA P-256 bundle, BENCH_CERT, on BENCH_HTTPS_PORT; TLS 1.3, one
         handshake per wrk connection) and proxies in clear to the origin

Default placement (--pin): the proxy on CPU 1 (taskset), origin, wrk, the idle
client and this script on CPU 0. See bench/README.md for the columns and how
to read the ratios.

Results: one line per run as it happens, then a summary (medians, min..max,
paired ratios vs the base), saved as bench/results/<stamp>-<label>.txt + .json;
--report FILE.json re-prints the summary of a saved run.
"""
import argparse
import http.client
import json
import os
import re
import resource
import select
import shlex
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import tls as tls_bench  # bench/tls.py, beside this script: make_certs

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
CLK = os.sysconf('SC_CLK_TCK')

# name: (listener, path, client sends Connection: close, description)
SCENARIOS = {
    'direct': ('backend', '/', False, 'wrk -> origin directly, keep-alive (load side alone)'),
    'ka':     ('http', '/', False, 'HTTP keep-alive via proxy, 100 B body'),
    'ka-scrape': ('http', '/', False, 'ka while /metrics is scraped every --scrape-every s'),
    'close':  ('http', '/', True, "HTTP via proxy, client sends 'Connection: close'"),
    '64k':    ('http', '/64k', False, '64 KiB body via proxy, keep-alive'),
    'tcp':    ('tcp', '/', False, 'L4 (mode tcp) via proxy, keep-alive'),
    'idle':   ('http', '/', False, 'N idle keep-alive client connections, one request each, held'),
    'ka-20srv': ('http20', '/', False, 'keep-alive via a backend of 20 servers (run with --threads 2)'),
    'idle-close': ('closing', '/', False, '--conns paced keep-alive clients, origin closes idle after 300 ms'),
    'h2':     ('http', '/', False, 'HTTP/2 (h2c, 10 streams per connection) via proxy, 100 B body'),
    'ka-tls': ('https', '/', False, 'HTTPS keep-alive via proxy (TLS to the client, ECDSA P-256), 100 B body'),
}
DEFAULT_SCENARIOS = 'ka,close,64k,tcp,idle'
BUILTIN_PROXIES = {
    'haproxy': 'haproxy -db -f {bench}/proxies/haproxy.cfg',
    'sluice': '{root}/target/release/sluice -db -f {bench}/proxies/sluice.cfg',
    'nginx': 'bash {bench}/proxies/nginx-proxy.sh',
}
BODY_SIZES = {'/': 100, '/1k': 1024, '/64k': 65536}

STARTED = []  # every Popen we started and must stop


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class RunFailed(Exception):
    pass


# ---------------------------------------------------------------- processes
def start(argv, out, cpus=None, env=None, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT):
    if cpus is not None:
        argv = ['taskset', '-c', cpus] + argv
    p = subprocess.Popen(argv, stdout=out, stderr=stderr, stdin=stdin, env=env,
                         start_new_session=True)
    STARTED.append(p)
    return p


def stop(p):
    """SIGTERM the PID we started, then SIGKILL its own process group (which
    only holds processes it forked, e.g. nginx workers)."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)   # leftovers of our own group, if any
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        log(f'warning: pid {p.pid} did not exit')
    if p in STARTED:
        STARTED.remove(p)


def stop_all():
    for p in list(STARTED):
        stop(p)


def wait_port(port, proc, timeout=10.0):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(('127.0.0.1', port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def port_free(port):
    s = socket.socket()
    try:
        s.bind(('127.0.0.1', port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pick_ports(base, n):
    out, p = [], base
    while len(out) < n:
        if port_free(p):
            out.append(p)
        p += 1
    return out


# ---------------------------------------------------------------- measuring
def proc_table():
    """{pid: (ppid, utime+stime+cutime+cstime jiffies)} of every live process."""
    procs = {}
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open(f'/proc/{d}/stat') as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rindex(')') + 2:].split()
        procs[int(d)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    return procs


def tree_pids(root, procs=None):
    procs = procs or proc_table()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            out.append(pid)
            todo += [c for c, (pp, _) in procs.items() if pp == pid]
    return out


def tree_cpu(root):
    """utime+stime (+ reaped children) in seconds, summed over root and all
    its live descendants (a process's stat includes all its threads)."""
    procs = proc_table()
    return sum(procs[p][1] for p in tree_pids(root, procs)) / CLK


def tree_wakeups(root):
    """Voluntary context switches (times a thread went to sleep waiting for
    an event, so had to be woken again) summed over every thread of root's
    process tree."""
    n = 0
    for pid in tree_pids(root):
        try:
            tids = os.listdir(f'/proc/{pid}/task')
        except OSError:
            continue
        for tid in tids:
            n += status_kb(f'{pid}/task/{tid}', 'voluntary_ctxt_switches')
    return n


def status_kb(pid, field):
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kb(pid):
    try:
        with open(f'/proc/{pid}/smaps_rollup') as f:
            for line in f:
                if line.startswith('Pss:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_mem(root):
    """(VmRSS, VmHWM, Pss) in KiB summed over the proxy's process tree."""
    pids = tree_pids(root)
    return (sum(status_kb(p, 'VmRSS') for p in pids), sum(status_kb(p, 'VmHWM') for p in pids),
            sum(pss_kb(p) for p in pids))


class RssSampler:
    """Samples VmRSS summed over a fixed set of PIDs (the proxy's tree when
    started) every `interval` s in a thread; .stop() returns the maximum."""

    def __init__(self, root, interval=0.2):
        self.pids = tree_pids(root)
        self.max = self.sample()
        self.interval = interval
        self.ev = threading.Event()
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def sample(self):
        return sum(status_kb(p, 'VmRSS') for p in self.pids)

    def loop(self):
        while not self.ev.wait(self.interval):
            self.max = max(self.max, self.sample())

    def stop(self):
        self.ev.set()
        self.th.join()
        self.max = max(self.max, self.sample())
        return self.max


def cpu_stat():
    """{cpu: (busy, steal)} jiffies from /proc/stat; 'cpu' is the sum."""
    out = {}
    with open('/proc/stat') as f:
        for line in f:
            if not line.startswith('cpu'):
                break
            k, *v = line.split()
            v = [int(x) for x in v]
            # user nice system idle iowait irq softirq steal (guest is in user)
            out[k] = (v[0] + v[1] + v[2] + v[5] + v[6], v[7])
    return out


def ss_count(state, port):
    r = subprocess.run(['ss', '-Htn', 'state', state, f'( dport = :{port} )'],
                       capture_output=True, text=True, timeout=30)
    return sum(1 for line in r.stdout.splitlines() if line.strip())


def origin_counters(port):
    """(accepts, requests) counters from the origin's stub_status; both
    already include this query's own connection and request."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=5)
    c.request('GET', '/status')
    body = c.getresponse().read().decode()
    c.close()
    m = re.search(r'\n\s*(\d+)\s+(\d+)\s+(\d+)', body)
    return int(m.group(1)), int(m.group(3))


def http_get(port, path, tls=False):
    if tls:
        # The benchmark's own self-signed certificate: nothing to verify against.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        c = http.client.HTTPSConnection('127.0.0.1', port, timeout=5, context=ctx)
    else:
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=5)
    c.request('GET', path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def wait_quiet(limit_pct, max_wait):
    """Wait (bounded) until the whole machine's busy CPU over 1 s is below
    limit_pct (% of one core). Our own processes are idle at this point."""
    if max_wait <= 0:
        return None, 0.0
    t0 = time.time()
    while True:
        a = cpu_stat()['cpu'][0]
        time.sleep(1)
        busy = (cpu_stat()['cpu'][0] - a) / CLK * 100
        if busy <= limit_pct or time.time() - t0 >= max_wait:
            return round(busy, 1), round(time.time() - t0, 1)


UNITS = {'us': 1e-3, 'ms': 1.0, 's': 1e3, 'm': 60e3}
BYTES = {'B': 1, 'KB': 2**10, 'MB': 2**20, 'GB': 2**30, 'TB': 2**40}


def parse_wrk(out):
    def lat(pct):
        m = re.search(rf'^\s*{pct}%\s+([\d.]+)(us|ms|s|m)\s*$', out, re.M)
        return float(m.group(1)) * UNITS[m.group(2)] if m else None
    m = re.search(r'(\d+) requests in ([\d.]+)(\w+), ([\d.]+)(\w+) read', out)
    if not m:
        raise RunFailed('cannot parse wrk output:\n' + out)
    errors = 0
    m2 = re.search(r'Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)', out)
    if m2:
        errors += sum(int(x) for x in m2.groups())
    m3 = re.search(r'Non-2xx or 3xx responses: (\d+)', out)
    if m3:
        errors += int(m3.group(1))
    return {
        'requests': int(m.group(1)),
        'wrk_seconds': float(m.group(2)) * UNITS[m.group(3)] / 1e3,
        'bytes': float(m.group(4)) * BYTES[m.group(5)],
        'rps': float(re.search(r'Requests/sec:\s+([\d.]+)', out).group(1)),
        'p50_ms': lat(50), 'p99_ms': lat(99), 'errors': errors,
    }


def run_tool(argv, cpus, duration, on_tick):
    """Runs a load tool (wrk, h2load) pinned to `cpus`, killed after duration+30 s.
    on_tick() is called once, 1 s before the end, while the load is still on.
    Returns (its output, its rusage, on_tick's result, its exit status)."""
    if cpus is not None:
        argv = ['taskset', '-c', cpus] + argv
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, text=True)
    STARTED.append(p)
    killer = threading.Timer(duration + 30, p.kill)
    killer.start()
    tick = None
    if on_tick:
        time.sleep(max(0.0, duration - 1.0))
        tick = on_tick()
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    killer.cancel()
    STARTED.remove(p)
    return out, ru, tick, p.returncode


def run_h2load(url, a, cpus, on_tick=None, duration=None):
    """h2load (HTTP/2 with prior knowledge), bounded like run_wrk; the same return shape."""
    duration = duration or a.duration
    conns = max(1, a.conns // 10)
    argv = ['h2load', f'-t{a.wrk_threads}', f'-c{conns}', '-m10', f'-D{duration}', url]
    out, ru, tick, rc = run_tool(argv, cpus, duration, on_tick)
    m = re.search(r'finished in ([\d.]+)s, ([\d.]+) req/s', out)
    r = re.search(r'requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout', out)
    t = re.search(r'traffic: .*?\((\d+)\) total', out)
    lat = re.search(r'time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)', out)
    if rc != 0 or not (m and r and t):
        raise RunFailed(f'h2load exited {rc}: {out.strip()[-800:]}')
    ok = int(r.group(3))
    return {
        'requests': ok,
        'wrk_seconds': float(m.group(1)),
        'bytes': float(t.group(1)),
        'rps': ok / float(m.group(1)),
        'p50_ms': float(lat.group(5)) * UNITS[lat.group(6)] if lat else None,
        'p99_ms': None,
        'errors': int(r.group(1)) - ok,
        'wrk_wakeups': ru.ru_nvcsw,
    }, ru.ru_utime + ru.ru_stime, tick


def run_wrk(url, a, close, cpus, on_tick=None, duration=None):
    """wrk, bounded (killed after duration+30 s). on_tick() is called once,
    1 s before the end, while the load is still on. Returns (parsed output,
    wrk's own CPU seconds, on_tick's result)."""
    duration = duration or a.duration
    argv = ['wrk', f'-t{a.wrk_threads}', f'-c{a.conns}', f'-d{duration}s', '--latency', '--timeout', '5s']
    if close:
        argv += ['-H', 'Connection: close']
    argv.append(url)
    out, ru, tick, rc = run_tool(argv, cpus, duration, on_tick)
    if rc != 0:
        raise RunFailed(f'wrk exited {rc}: {out.strip()[-500:]}')
    out = parse_wrk(out)
    out['wrk_wakeups'] = ru.ru_nvcsw
    return out, ru.ru_utime + ru.ru_stime, tick


# ---------------------------------------------------------------- one run
class Proxy:
    def __init__(self, name, cmd):
        self.name, self.cmd = name, cmd


def start_proxy(px, ports, a, scratch):
    """Starts the proxy pinned; returns (Popen, logfile, workdir); the Popen's
    .tcp_listening / .metrics_listening say whether the TCP / metrics port
    accepts connections. Raises
    RunFailed when it does not listen on the HTTP port within 10 s."""
    wd = tempfile.mkdtemp(prefix=f'{px.name}.', dir=scratch)
    os.chmod(wd, 0o755)
    vals = dict(http_port=ports['http'], tcp_port=ports['tcp'], backend_port=ports['backend'],
                metrics_port=ports['metrics'], http20_port=ports['http20'],
                closing_port=ports['closing'], closing_backend_port=ports['closing_backend'],
                https_port=ports['https'], cert=a.cert,
                threads=a.threads, workdir=wd, bench=BENCH, root=ROOT)
    env = dict(os.environ, **{f'BENCH_{k.upper()}': str(v) for k, v in vals.items()})
    cmd = px.cmd.format(**vals)
    lf = open(os.path.join(wd, 'proxy.log'), 'w')
    p = start(['bash', '-c', 'exec ' + cmd], lf, cpus=a.proxy_cpus, env=env)
    if not wait_port(ports['http'], p):
        stop(p)
        lf.close()
        raise RunFailed(f'{px.name} did not listen on {ports["http"]} ({cmd}); log:\n'
                        + open(os.path.join(wd, 'proxy.log')).read()[-3000:])
    p.tcp_listening = wait_port(ports['tcp'], p, timeout=1.0)
    p.metrics_listening = wait_port(ports['metrics'], p, timeout=1.0)
    p.listening = {k: wait_port(ports[k], p, timeout=1.0) for k in ('http20', 'closing', 'https')}
    return p, lf, wd


def proxy_log(wd):
    try:
        return open(os.path.join(wd, 'proxy.log')).read()[-2000:]
    except OSError:
        return ''


def check_bodies(port, want, tls=False):
    """The proxy must return exactly the origin's bytes."""
    for path, body in want.items():
        try:
            st, got = http_get(port, path, tls)
        except OSError as e:
            return f'{path}: {type(e).__name__}: {e}'
        if st != 200 or got != body:
            return f'{path}: status {st}, {len(got)} bytes (want 200, {len(body)})'
    return None


def measure(sc, px, a, ports, scratch, origin, want):
    rec = {'scenario': sc, 'proxy': px.name if px else 'origin'}
    proc = lf = wd = None
    listener = SCENARIOS[sc][0]
    try:
        if px:
            proc, lf, wd = start_proxy(px, ports, a, scratch)
            if listener == 'tcp' and not proc.tcp_listening:
                rec['skipped'] = 'no tcp listener'
                return rec
            if sc == 'ka-scrape' and not proc.metrics_listening:
                rec['skipped'] = 'no metrics listener'
                return rec
            if listener in proc.listening and not proc.listening[listener]:
                rec['skipped'] = f'no {listener} listener'
                return rec
            bad = check_bodies(ports[listener], want, tls=listener == 'https')
            if bad:
                raise RunFailed(f'wrong content on the {listener} port: {bad}')
        if sc == 'idle':
            measure_idle(rec, proc, a, ports)
        elif sc == 'idle-close':
            measure_paced(rec, proc, a, ports, origin)
        else:
            measure_load(rec, sc, proc, a, ports, origin)
        if proc and proc.poll() is not None:
            raise RunFailed(f'proxy exited (status {proc.returncode}) during the run')
    except RunFailed as e:
        rec['failed'] = str(e).strip()
        if wd:
            rec['proxy_log'] = proxy_log(wd)
    finally:
        if proc:
            stop(proc)
            lf.close()
    return rec


def measure_load(rec, sc, proc, a, ports, origin):
    listener, path, close, _ = SCENARIOS[sc]
    port = ports[listener]
    scheme = 'https' if listener == 'https' else 'http'
    url = f'{scheme}://127.0.0.1:{port}{path}'
    rec['quiet_pct'], rec['quiet_wait_s'] = wait_quiet(a.quiet_pct, a.quiet_wait)
    load_tool = run_wrk
    if sc == 'h2':
        def load_tool(url, a, close, cpus, **kw):
            return run_h2load(url, a, cpus, **kw)
    if a.warmup > 0:
        load_tool(url, a, close, a.load_cpus, duration=a.warmup)
    bp = ports['backend']
    acc0, _ = origin_counters(bp)
    sampler = RssSampler(proc.pid) if proc else None
    s0, t0 = cpu_stat(), time.time()
    pc0, oc0 = (tree_cpu(proc.pid) if proc else 0.0), tree_cpu(origin.pid)
    pw0, ow0 = (tree_wakeups(proc.pid) if proc else 0), tree_wakeups(origin.pid)

    def at_load():
        return {'srv_est': ss_count('established', bp), 'cli_est': ss_count('established', port)}
    scraper = Scraper(ports['metrics'], a.scrape_every) if sc == 'ka-scrape' else None
    tk0 = takeovers(ports['metrics']) if sc == 'ka-20srv' and proc and proc.metrics_listening else None
    try:
        w, wrk_cpu, load = load_tool(url, a, close, a.load_cpus, on_tick=at_load)
    finally:
        if scraper:
            rec.update(scraper.stop())
    if tk0 is not None:
        tk1 = takeovers(ports['metrics'])
        if tk1 is not None:
            rec['takeovers'] = tk1 - tk0
    pc1, oc1 = (tree_cpu(proc.pid) if proc else 0.0), tree_cpu(origin.pid)
    pw1, ow1 = (tree_wakeups(proc.pid) if proc else 0), tree_wakeups(origin.pid)
    s1, t1 = cpu_stat(), time.time()
    acc1, _ = origin_counters(bp)
    if sampler:
        rec['rss_kb'] = sampler.stop()
        rec['rss_end_kb'], rec['hwm_kb'], rec['pss_end_kb'] = tree_mem(proc.pid)
    wall = t1 - t0
    rec.update(w)
    rec['mbps'] = w['bytes'] / w['wrk_seconds'] / 2**20
    rec['proxy_cpu_s'] = pc1 - pc0
    rec['cpu_us_per_req'] = rec['proxy_cpu_s'] * 1e6 / w['requests'] if w['requests'] else None
    rec['origin_cpu_s'] = oc1 - oc0
    rec['wrk_cpu_s'] = wrk_cpu
    if w['requests']:
        # CPU and sleeps per request of the load side (origin + wrk): on
        # loopback, waking a sleeping receiver is paid by the sender, so a
        # proxy that sleeps more often per request makes the other core work
        # harder for the same requests.
        n = w['requests']
        rec['load_cpu_us_per_req'] = (rec['origin_cpu_s'] + wrk_cpu) * 1e6 / n
        rec['wakeups_per_req'] = {'proxy': round((pw1 - pw0) / n, 3),
                                  'origin': round((ow1 - ow0) / n, 3),
                                  'wrk': round(w['wrk_wakeups'] / n, 3)}
    busy = {k: (s1[k][0] - s0[k][0]) / CLK for k in s0}
    steal = {k: (s1[k][1] - s0[k][1]) / CLK for k in s0}
    rec['wall_s'] = wall
    rec['cpu_busy_pct'] = {k: round(v / wall * 100, 1) for k, v in busy.items()}
    rec['steal_pct'] = round(steal['cpu'] / wall * 100, 1)
    # machine CPU not used by proxy+origin+wrk (other tenants, this script,
    # kernel work not charged to a task), in % of one core
    ours = rec['proxy_cpu_s'] + rec['origin_cpu_s'] + wrk_cpu
    rec['other_pct'] = round((busy['cpu'] - ours) / wall * 100, 1)
    rec['origin_new_conns'] = acc1 - acc0 - 1   # -1: the second counters query
    if w['requests']:
        rec['reuse_pct'] = round(100 * (1 - rec['origin_new_conns'] / w['requests']), 3)
    if 'takeovers' in rec:
        rec['takeovers_per_s'] = round(rec['takeovers'] / w['wrk_seconds'], 1)
    rec['srv_est_load'] = load['srv_est']
    rec['cli_est_load'] = load['cli_est']
    rec['srv_est_end'] = ss_count('established', bp)
    if scraper and rec['scrapes'] == 0:
        raise RunFailed(f"no successful scrape of /metrics ({rec['scrape_errors']} errors: "
                        f"{rec.get('scrape_first_error')})")


class Scraper:
    """GETs http://127.0.0.1:PORT/metrics every `every` s on one keep-alive
    connection (as Prometheus does) in a thread, from start to .stop(), which
    returns the scrape counts and timings for the run record."""

    def __init__(self, port, every):
        self.port, self.every = port, every
        self.ok = self.errors = self.bytes = 0
        self.ms = []
        self.first_error = None
        self.ev = threading.Event()
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def loop(self):
        conn = None
        next_at = time.monotonic()
        while not self.ev.is_set():
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=5)
                conn.request('GET', '/metrics')
                r = conn.getresponse()
                body = r.read()
                if r.status != 200 or not body.startswith(b'# HELP '):
                    raise OSError(f'status {r.status}, {len(body)} bytes')
                self.ok += 1
                self.bytes += len(body)
                self.ms.append((time.monotonic() - t0) * 1e3)
            except (OSError, http.client.HTTPException) as e:
                self.errors += 1
                self.first_error = self.first_error or f'{type(e).__name__}: {e}'
                if conn is not None:
                    conn.close()
                conn = None
            next_at += self.every
            self.ev.wait(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn.close()

    def stop(self):
        self.ev.set()
        self.th.join()
        return {'scrapes': self.ok, 'scrape_errors': self.errors,
                'scrape_first_error': self.first_error,
                'scrape_bytes': self.bytes // self.ok if self.ok else 0,
                'scrape_ms_p50': statistics.median(self.ms) if self.ms else None,
                'scrape_ms_max': max(self.ms) if self.ms else None}


def takeovers(port):
    """Sum of haproxy_server_pool_takeovers_total over be_20's servers, from
    the proxy's /metrics; None when it does not export it."""
    try:
        st, body = http_get(port, '/metrics')
    except OSError:
        return None
    if st != 200:
        return None
    n, seen = 0, False
    for ln in body.decode(errors='replace').splitlines():
        if ln.startswith('haproxy_server_pool_takeovers_total{') and 'proxy="be_20"' in ln:
            n += int(float(ln.rsplit(' ', 1)[1]))
            seen = True
    return n if seen else None


def measure_paced(rec, proc, a, ports, origin):
    """idle-close: a.conns keep-alive clients, each one GET every 0.2..0.4 s
    for a.duration s; every non-200 answer or socket error is an error (the
    client reconnects and goes on)."""
    import random
    port, bp = ports['closing'], ports['backend']
    rec['quiet_pct'], rec['quiet_wait_s'] = wait_quiet(a.quiet_pct, a.quiet_wait)
    acc0, _ = origin_counters(bp)
    sampler = RssSampler(proc.pid)
    s0, t0 = cpu_stat(), time.time()
    pc0, oc0 = tree_cpu(proc.pid), tree_cpu(origin.pid)
    end = t0 + a.duration
    lock = threading.Lock()
    lat, errs, first_err, nbytes = [], [0], [None], [0]

    def client(seed):
        rnd = random.Random(seed)
        c = None
        while time.time() < end:
            if c is None:
                c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
            t = time.perf_counter()
            try:
                c.request('GET', '/')
                r = c.getresponse()
                body = r.read()
                ok = r.status == 200 and len(body) == BODY_SIZES['/']
                err = None if ok else f'status {r.status}, {len(body)} bytes'
            except (OSError, http.client.HTTPException) as e:
                err = f'{type(e).__name__}: {e}'
                c.close()
                c = None
            dt = time.perf_counter() - t
            with lock:
                if err:
                    errs[0] += 1
                    first_err[0] = first_err[0] or err
                else:
                    lat.append(dt)
                    nbytes[0] += BODY_SIZES['/']
            time.sleep(rnd.uniform(0.2, 0.4))
        if c:
            c.close()
    ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(a.duration + 30)
    pc1, oc1 = tree_cpu(proc.pid), tree_cpu(origin.pid)
    s1, t1 = cpu_stat(), time.time()
    acc1, _ = origin_counters(bp)
    rec['rss_kb'] = sampler.stop()
    wall = t1 - t0
    lat.sort()
    n = len(lat)
    q = (lambda p: lat[min(n - 1, int(p * n))] * 1000) if n else (lambda p: float('nan'))
    rec.update({'requests': n, 'errors': errs[0], 'first_error': first_err[0], 'rps': n / wall,
                'mbps': nbytes[0] / wall / 2**20, 'p50_ms': q(0.5), 'p99_ms': q(0.99),
                'wrk_seconds': wall, 'bytes': nbytes[0]})
    rec['proxy_cpu_s'] = pc1 - pc0
    rec['cpu_us_per_req'] = rec['proxy_cpu_s'] * 1e6 / n if n else None
    rec['origin_cpu_s'] = oc1 - oc0
    busy = {k: (s1[k][0] - s0[k][0]) / CLK for k in s0}
    steal = {k: (s1[k][1] - s0[k][1]) / CLK for k in s0}
    rec['wall_s'] = wall
    rec['cpu_busy_pct'] = {k: round(v / wall * 100, 1) for k, v in busy.items()}
    rec['steal_pct'] = round(steal['cpu'] / wall * 100, 1)
    rec['other_pct'] = 0.0   # the clients are this script: not separable
    rec['origin_new_conns'] = acc1 - acc0 - 1
    rec['srv_est_end'] = ss_count('established', ports['closing_backend'])


def measure_idle(rec, proc, a, ports):
    """RSS of the proxy idle, then with a.idle_conns held keep-alive client
    connections that have each completed one request."""
    port, bp, n = ports['http'], ports['backend'], a.idle_conns
    rec['quiet_pct'], rec['quiet_wait_s'] = wait_quiet(a.quiet_pct, a.quiet_wait)
    time.sleep(a.idle_settle)        # let the body check's connections go away
    rec['rss_idle_kb'], _, rec['pss_idle_kb'] = tree_mem(proc.pid)
    sampler = RssSampler(proc.pid)
    pc0, t0 = tree_cpu(proc.pid), time.time()
    argv = [sys.executable, os.path.join(BENCH, 'idle_client.py'), str(port), str(n),
            '--timeout', str(a.idle_timeout), '--hold', str(a.idle_timeout + 120)]
    cl = start(argv, subprocess.PIPE, cpus=a.load_cpus, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        r, _, _ = select.select([cl.stdout], [], [], a.idle_timeout + 15)
        line = cl.stdout.readline() if r else b''
        if not line:
            err = cl.stderr.read().decode(errors='replace') if cl.poll() is not None else 'no answer'
            raise RunFailed(f'idle client failed: {err.strip()[-1000:]}')
        res = json.loads(line)
        pc1 = tree_cpu(proc.pid)
        time.sleep(a.idle_settle)
        rec['rss_held_kb'], rec['hwm_kb'], rec['pss_held_kb'] = tree_mem(proc.pid)
        rec['rss_kb'] = rec['rss_held_kb']
        rec['rss_peak_kb'] = sampler.stop()
        rec['cli_est'] = ss_count('established', port)
        rec['srv_est'] = ss_count('established', bp)
    finally:
        if sampler.th.is_alive():
            sampler.stop()
        try:
            cl.stdin.close()          # tells the client to let go
            cl.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop(cl)
    rec.update(conns=n, ok=res['ok'], errors=res['errors'], setup_s=res['seconds'],
               first_error=res['first_error'])
    rec['proxy_cpu_s'] = pc1 - pc0
    rec['cpu_us_per_conn'] = rec['proxy_cpu_s'] * 1e6 / res['ok'] if res['ok'] else None
    rec['rss_delta_kb'] = rec['rss_held_kb'] - rec['rss_idle_kb']
    rec['bytes_per_conn'] = rec['rss_delta_kb'] * 1024 / res['ok'] if res['ok'] else None
    rec['wall_s'] = time.time() - t0


# ---------------------------------------------------------------- reporting
def mib(kb):
    return kb / 1024 if kb is not None else float('nan')


def fmt_row(r):
    head = f"{r['scenario']:<9} {r['proxy']:<8}"
    if 'skipped' in r:
        return f"{head} skipped: {r['skipped']}"
    if 'failed' in r:
        return f"{head} FAILED: {r['failed'].splitlines()[0][:200]}"
    if r['scenario'] == 'idle':
        return (f"{head} {r['ok']}/{r['conns']} conns ok, {r['errors']} errors, setup {r['setup_s']:.2f} s; "
                f"RSS {mib(r['rss_idle_kb']):.1f} -> {mib(r['rss_held_kb']):.1f} MiB "
                f"(+{mib(r['rss_delta_kb']):.1f} MiB, {nz(r['bytes_per_conn']) / 1024:.1f} KiB/conn, "
                f"peak {mib(r['rss_peak_kb']):.1f}); CPU {nz(r['cpu_us_per_conn']):.1f} us/conn; "
                f"established: client {r['cli_est']}, origin {r['srv_est']}")
    row = (f"{head} {r['rps']:>9.0f} {r['mbps']:>8.1f} {r['p50_ms']:>7.3f} {nz(r['p99_ms']):>7.3f} "
           f"{r['errors']:>6} {nz(r.get('cpu_us_per_req')):>7.2f} {mib(r.get('rss_kb')):>7.1f} "
           f"{r['origin_new_conns']:>8} {r['other_pct']:>6.1f} {r['steal_pct']:>5.1f} "
           f"{r['cpu_busy_pct'].get('cpu0', 0):>3.0f}/{r['cpu_busy_pct'].get('cpu1', 0):<3.0f}")
    if 'wakeups_per_req' in r:
        wk = r['wakeups_per_req']
        row += (f"  load {r['load_cpu_us_per_req']:.1f} us/req, sleeps/req proxy {wk['proxy']:.2f} "
                f"origin {wk['origin']:.2f} wrk {wk['wrk']:.2f}")
    if 'reuse_pct' in r and r['scenario'] == 'ka-20srv':
        row += f"  reuse {r['reuse_pct']:.2f}%"
        if 'takeovers_per_s' in r:
            row += f", takeovers {r['takeovers_per_s']:.0f}/s"
    if r['scenario'] == 'idle-close' and r.get('first_error'):
        row += f"  first error: {r['first_error'][:80]}"
    if 'scrapes' in r:
        row += (f"  scrapes {r['scrapes']} ({r['scrape_errors']} errors, "
                f"{r['scrape_bytes'] / 1024:.1f} KiB, {nz(r['scrape_ms_p50']):.2f} ms median, "
                f"{nz(r['scrape_ms_max']):.2f} max)")
    return row


def nz(x):
    return float('nan') if x is None else x


HDR = (f"{'scen':<9} {'proxy':<8} {'req/s':>9} {'MB/s':>8} {'p50ms':>7} {'p99ms':>7} "
       f"{'errors':>6} {'us/req':>7} {'RSS_MiB':>7} {'orig_new':>8} {'other%':>6} {'stl%':>5} {'c0/c1%':>7}")

LEGEND = """\
req/s, MB/s, p50ms, p99ms, errors: from wrk (errors = socket errors + non-2xx/3xx).
us/req: proxy CPU microseconds per request = proxy utime+stime (summed over its
process tree, from /proc) during the measured run / requests completed.
RSS_MiB: max over the run of VmRSS summed over the proxy's process tree
(sampled every 0.2 s and at the end; nginx = master + worker).
orig_new: new TCP connections the origin accepted during the run (stub_status).
other%: machine CPU not used by proxy+origin+wrk, in % of one core (other
tenants, kernel work). stl%: hypervisor steal. c0/c1%: busy % of CPU 0
(origin+wrk when pinned) and CPU 1 (the proxy): the one near 100 is the bottleneck.
idle: N keep-alive connections, one request each, then held; RSS idle -> held
(after --idle-settle s), growth per connection, proxy CPU per connection set up,
and the connections still established client->proxy and proxy->origin."""


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float('nan')


def spread(xs, fmt='.2f'):
    xs = [x for x in xs if x is not None]
    if not xs:
        return '-'
    if max(xs) >= 100:
        fmt = '.0f'
    return f'{min(xs):{fmt}}..{max(xs):{fmt}}'


def ratio_str(rs):
    rs = [x for x in rs if x is not None]
    if not rs:
        return '-'
    return f'{med(rs):.3f} ({min(rs):.2f}..{max(rs):.2f})'


def paired(ok, a, b):
    """Runs of (scenario, proxy) `a` and `b` by repetition, the repetitions both have, and
    rat(key): the median (min..max) of b/a for that key over those repetitions."""
    A = {r['rep']: r for r in ok if (r['scenario'], r['proxy']) == a}
    B = {r['rep']: r for r in ok if (r['scenario'], r['proxy']) == b}
    reps = sorted(set(A) & set(B))

    def rat(key):
        out = []
        for i in reps:
            x, y = B[i].get(key), A[i].get(key)
            out.append(x / y if x is not None and y else None)
        return ratio_str(out)
    return A, B, reps, rat


def summarize(recs, names, base, scen_order=None):
    lines = []
    ok = [r for r in recs if 'skipped' not in r and 'failed' not in r]
    scen_order = scen_order or list(SCENARIOS)
    load_sc = [s for s in scen_order if s != 'idle']
    name_w = max([6] + [len(s) for s in scen_order])
    if any(r['scenario'] in load_sc for r in ok):
        lines.append('Load scenarios: median over repetitions (min..max)')
        lines.append(f"{'scen':<{name_w}} {'proxy':<8} {'n':>2} {'req/s':>8} {'(min..max)':>13} {'MB/s':>7} "
                     f"{'p50ms':>6} {'p99ms':>6} {'errs':>5} {'us/req':>6} {'(min..max)':>12} "
                     f"{'RSS_MiB':>7} {'orig_new':>8} {'other%':>6}")
        for sc in load_sc:
            for nm in (['origin'] if sc == 'direct' else names):
                rs = [r for r in ok if r['scenario'] == sc and r['proxy'] == nm]
                if not rs:
                    continue
                rps = [r['rps'] for r in rs]
                cpu = [r.get('cpu_us_per_req') for r in rs]
                rss = [mib(r['rss_kb']) for r in rs if 'rss_kb' in r]
                lines.append(
                    f"{sc:<{name_w}} {nm:<8} {len(rs):>2} {med(rps):>8.0f} {spread(rps):>13} "
                    f"{med([r['mbps'] for r in rs]):>7.1f} {med([r['p50_ms'] for r in rs]):>6.3f} "
                    f"{med([r['p99_ms'] for r in rs]):>6.3f} {sum(r['errors'] for r in rs):>5} "
                    f"{med(cpu):>6.2f} {spread(cpu):>12} {med(rss):>7.1f} "
                    f"{med([r['origin_new_conns'] for r in rs]):>8.0f} {med([r['other_pct'] for r in rs]):>6.1f}"
                    + (f"  ({sum(1 for r in rs if r.get('noisy'))} noisy kept)" if any(r.get('noisy') for r in rs) else '')
                    + (f"  reuse {med([r.get('reuse_pct') for r in rs]):.2f}%" if sc == 'ka-20srv' else '')
                    + (f", takeovers {med([r.get('takeovers_per_s') for r in rs]):.0f}/s"
                       if sc == 'ka-20srv' and any('takeovers_per_s' in r for r in rs) else ''))
    idle = [r for r in ok if r['scenario'] == 'idle']
    if idle:
        lines.append('')
        lines.append(f"Idle: {idle[0]['conns']} keep-alive connections held, one request each: median over repetitions")
        lines.append(f"{'proxy':<8} {'n':>2} {'ok':>6} {'errs':>5} {'setup_s':>7} {'RSS_idle':>8} {'RSS_held':>8} "
                     f"{'growth':>7} {'KiB/conn':>8} {'us/conn':>7} {'cli_est':>7} {'srv_est':>7}   (RSS in MiB)")
        for nm in names:
            rs = [r for r in idle if r['proxy'] == nm]
            if not rs:
                continue
            lines.append(
                f"{nm:<8} {len(rs):>2} {med([r['ok'] for r in rs]):>6.0f} {sum(r['errors'] for r in rs):>5} "
                f"{med([r['setup_s'] for r in rs]):>7.2f} {med([mib(r['rss_idle_kb']) for r in rs]):>8.1f} "
                f"{med([mib(r['rss_held_kb']) for r in rs]):>8.1f} {med([mib(r['rss_delta_kb']) for r in rs]):>7.1f} "
                f"{med([nz(r['bytes_per_conn']) / 1024 for r in rs]):>8.2f} "
                f"{med([r['cpu_us_per_conn'] for r in rs]):>7.1f} {med([r['cli_est'] for r in rs]):>7.0f} "
                f"{med([r['srv_est'] for r in rs]):>7.0f}")
    if 'ka' in scen_order and 'ka-scrape' in scen_order:
        lines.append('')
        lines.append('Scrape cost: ka-scrape / ka of the same proxy, paired by repetition: '
                     'median (min..max); req/s above 1 = faster while scraped')
        lines.append(f"{'proxy':<8} {'req/s':>21} {'CPU us/req':>21} {'p99':>21} {'scrapes/run':>12} {'KiB/scrape':>11}")
        for nm in names:
            A, B, reps, rat = paired(ok, ('ka', nm), ('ka-scrape', nm))
            if not reps:
                continue
            lines.append(f"{nm:<8} {rat('rps'):>21} {rat('cpu_us_per_req'):>21} {rat('p99_ms'):>21} "
                         f"{med([B[i]['scrapes'] for i in reps]):>12.0f} "
                         f"{med([B[i]['scrape_bytes'] / 1024 for i in reps]):>11.1f}")
    others = [n for n in names if n != base]
    if base in names and others:
        lines.append('')
        lines.append(f'Ratios X/{base}, paired by repetition (X run vs the {base} run of the same repetition '
                     f'and scenario): median (min..max).')
        lines.append(f'CPU us/req, p99, RSS: below 1 = X better. req/s: above 1 = X better. '
                     f'idle: CPU = us per connection, RSS = RSS held, growth = RSS held - RSS idle.')
        lines.append(f"{'scen':<{name_w}} {'proxy':<8} {'CPU us/req':>21} {'req/s':>21} {'p99':>21} {'RSS':>21} {'growth (idle)':>21}")
        for nm in others:
            for sc in scen_order:
                if sc == 'direct':
                    continue
                _, _, reps, rat = paired(ok, (sc, base), (sc, nm))
                if not reps:
                    continue
                if sc == 'idle':
                    cols = [rat('cpu_us_per_conn'), '-', '-', rat('rss_held_kb'), rat('rss_delta_kb')]
                else:
                    cols = [rat('cpu_us_per_req'), rat('rps'), rat('p99_ms'), rat('rss_kb'), '-']
                lines.append(f"{sc:<{name_w}} {nm:<8} " + ' '.join(f'{c:>21}' for c in cols))
    failed = [r for r in recs if 'failed' in r]
    if failed:
        lines.append('')
        lines.append(f'{len(failed)} run(s) FAILED (not in the medians):')
        for r in failed:
            lines.append(f"  rep {r.get('rep')} {r['scenario']} {r['proxy']}: {r['failed'].splitlines()[0][:300]}")
    return '\n'.join(lines)


# ---------------------------------------------------------------- main
def versions(proxies):
    def first(argv, stream='stdout'):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (getattr(r, stream).strip().split('\n') or [''])[0]
        except (OSError, subprocess.TimeoutExpired):
            return None
    v = {'haproxy': first(['haproxy', '-v']), 'nginx': first(['nginx', '-v'], 'stderr'),
         'wrk': first(['wrk', '-v']), 'kernel': os.uname().release,
         'git': first(['git', '-C', ROOT, 'describe', '--always', '--dirty']),
         'cpu': next((ln.split(':', 1)[1].strip() for ln in open('/proc/cpuinfo') if ln.startswith('model name')), None)}
    if any(p.name == 'sluice' for p in proxies):
        v['sluice'] = first([os.path.join(ROOT, 'target/release/sluice'), '-v'])
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--proxies', default='haproxy,sluice,nginx',
                    help='comma list, run in this order (built in: ' + ', '.join(BUILTIN_PROXIES) + ')')
    ap.add_argument('--proxy', action='append', default=[], metavar='NAME=CMD',
                    help='add or replace a proxy command (repeatable); it is run if NAME is in --proxies '
                         'or was not a built-in name')
    ap.add_argument('--base', default='haproxy', help='the proxy the ratios are relative to')
    ap.add_argument('--scenarios', default=DEFAULT_SCENARIOS,
                    help='comma list of: ' + ', '.join(SCENARIOS) + f' (default {DEFAULT_SCENARIOS})')
    ap.add_argument('--repeat', type=int, default=5, help='repetitions (interleaved)')
    ap.add_argument('--duration', type=int, default=10, help='seconds per measured run')
    ap.add_argument('--warmup', type=int, default=2, help='unrecorded seconds of the same load before each run')
    ap.add_argument('--conns', type=int, default=50, help='wrk connections')
    ap.add_argument('--wrk-threads', type=int, default=1)
    ap.add_argument('--threads', type=int, default=1, help='proxy threads/workers ({threads}, BENCH_THREADS)')
    ap.add_argument('--idle-conns', type=int, default=8000, help='connections held in the idle scenario')
    ap.add_argument('--scrape-every', type=float, default=0.1,
                    help='ka-scrape: seconds between two GETs of /metrics')
    ap.add_argument('--idle-settle', type=float, default=1.0,
                    help='idle: seconds to wait before each RSS reading (idle, then held)')
    ap.add_argument('--idle-timeout', type=float, default=120.0, help='idle: max seconds to set up all connections')
    ap.add_argument('--no-pin', action='store_true', help='no taskset at all')
    ap.add_argument('--proxy-cpus', default='1', help='taskset list for the proxy (pinned mode)')
    ap.add_argument('--load-cpus', default='0', help='taskset list for origin, wrk, idle client, harness')
    ap.add_argument('--quiet-pct', type=float, default=15.0,
                    help='before each run wait until machine busy CPU < this (%% of a core)')
    ap.add_argument('--quiet-wait', type=float, default=20.0, help='max seconds to wait for quiet (0: no wait)')
    ap.add_argument('--max-other', type=float, default=20.0,
                    help='a load run during which other load used more than this (%% of a core) is redone')
    ap.add_argument('--retries', type=int, default=2, help='max redos of a noisy run (then kept, flagged)')
    ap.add_argument('--base-port', type=int, default=18400)
    ap.add_argument('--label', default='', help='name for the results files')
    ap.add_argument('--report', metavar='JSON', help='only re-print the summary of a saved results/*.json')
    a = ap.parse_args()
    if a.report:
        d = json.load(open(a.report))
        m = d['meta']
        print(summarize(d['runs'], list(m['proxies']), m['args']['base'], m['args']['scenarios'].split(',')))
        return

    cmds = dict(BUILTIN_PROXIES)
    order = [n for n in a.proxies.split(',') if n]
    for spec in a.proxy:
        name, _, cmd = spec.partition('=')
        if not name or not cmd:
            sys.exit(f'--proxy wants NAME=COMMAND, got {spec!r}')
        if name not in cmds and name not in order:
            order.append(name)
        cmds[name] = cmd
    for n in order:
        if n not in cmds:
            sys.exit(f'unknown proxy {n!r}: give its command with --proxy {n}=CMD')
        if n == 'origin' or order.count(n) > 1:
            sys.exit(f'duplicate/reserved proxy name {n}')
    proxies = [Proxy(n, cmds[n]) for n in order]
    scen = [s for s in a.scenarios.split(',') if s]
    for s in scen:
        if s not in SCENARIOS:
            sys.exit(f'unknown scenario {s}')
    if 'sluice' in order and not os.access(os.path.join(ROOT, 'target/release/sluice'), os.X_OK) \
            and cmds['sluice'] == BUILTIN_PROXIES['sluice']:
        sys.exit(f'{ROOT}/target/release/sluice is missing: run bench/run.sh (it builds it), '
                 'or leave sluice out with --proxies haproxy,nginx')
    if 'idle' in scen:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if a.idle_conns + 64 > hard:
            sys.exit(f'--idle-conns {a.idle_conns} does not fit the hard open-file limit {hard}')
        if a.idle_conns > 9000 - 16:
            log(f'warning: --idle-conns {a.idle_conns} is above what proxies/*.cfg maxconn 9000 allows')
    if a.no_pin:
        a.proxy_cpus = a.load_cpus = None
    else:
        os.sched_setaffinity(0, {int(c) for c in a.load_cpus.split(',')})

    scratch = tempfile.mkdtemp(prefix='sluice-bench.')
    os.chmod(scratch, 0o755)
    bp, hp, tp, mp, h20, cp, cbp, sp = pick_ports(a.base_port, 8)
    ports = {'backend': bp, 'http': hp, 'tcp': tp, 'metrics': mp, 'http20': h20, 'closing': cp,
             'closing_backend': cbp, 'https': sp}
    # One self-signed ECDSA P-256 bundle (certificate + key in one PEM, which HAProxy, sluice
    # and nginx all read) for the ka-tls scenario's listeners, made as bench/tls.py makes its.
    a.cert = tls_bench.make_certs(scratch)['ecdsa']
    origin_dir = os.path.join(scratch, 'origin')
    olog = open(os.path.join(scratch, 'origin.log'), 'w')

    def on_signal(sig, frm):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)

    recs, discarded = [], []
    stamp = time.strftime('%Y%m%d-%H%M%S')
    tag = f"{stamp}-{a.label or '-'.join(p.name for p in proxies)}-{'nopin' if a.no_pin else 'pin'}"
    os.makedirs(os.path.join(BENCH, 'results'), exist_ok=True)
    out_base = os.path.join(BENCH, 'results', tag)
    meta = {'argv': sys.argv, 'args': vars(a), 'ports': ports, 'started': stamp,
            'proxies': {p.name: p.cmd for p in proxies}, 'versions': versions(proxies),
            'nofile_limit': resource.getrlimit(resource.RLIMIT_NOFILE),
            'loadavg_start': open('/proc/loadavg').read().strip()}
    try:
        origin = start(['bash', os.path.join(BENCH, 'backend.sh'), origin_dir, str(bp), str(cbp)], olog,
                       cpus=a.load_cpus)
        if not wait_port(bp, origin):
            sys.exit('origin did not start:\n' + open(os.path.join(scratch, 'origin.log')).read())
        want = {}
        for path, size in BODY_SIZES.items():
            st, body = http_get(bp, path)
            assert st == 200 and len(body) == size, (path, st, len(body))
            want[path] = body
        # preflight: every proxy must start and return the origin's bytes
        for px in proxies:
            try:
                p, lf, wd = start_proxy(px, ports, a, scratch)
            except RunFailed as e:
                sys.exit(f'preflight: {e}\n(leave it out with --proxies ...)')
            try:
                bad = check_bodies(ports['http'], want)
                tcp = p.tcp_listening
                if not bad and tcp:
                    bad = check_bodies(ports['tcp'], want)
            finally:
                stop(p)
                lf.close()
            if bad:
                sys.exit(f'preflight: {px.name} returned wrong content: {bad}\nlog:\n{proxy_log(wd)}')
            log(f'# preflight {px.name}: ok (http{", tcp" if tcp else ", no tcp listener"})')
        log(f'# ports {ports}, pin={"no" if a.no_pin else f"proxy@{a.proxy_cpus} load@{a.load_cpus}"}, '
            f'{a.repeat}x{a.duration}s (+{a.warmup}s warm-up), {a.conns} conns, idle {a.idle_conns}, '
            f'proxies: {[p.name for p in proxies]}, scenarios: {scen}')
        print(HDR, flush=True)
        for rep in range(a.repeat):
            for sc in scen:
                for px in ([None] if sc == 'direct' else proxies):
                    for attempt in range(a.retries + 1):
                        r = measure(sc, px, a, ports, scratch, origin, want)
                        r['rep'], r['attempt'] = rep, attempt
                        noisy = r.get('other_pct', 0) > a.max_other
                        if noisy and attempt < a.retries:
                            r['discarded'] = f"other load {r['other_pct']}% > {a.max_other}%"
                            discarded.append(r)
                            print(fmt_row(r) + '  (discarded, redo)', flush=True)
                            continue
                        r['noisy'] = noisy
                        recs.append(r)
                        print(fmt_row(r) + ('  (noisy, kept)' if noisy else ''), flush=True)
                        break
                    with open(out_base + '.json', 'w') as f:
                        json.dump({'meta': meta, 'runs': recs, 'discarded': discarded}, f, indent=1)
    except KeyboardInterrupt:
        log('interrupted')
    finally:
        stop_all()
        olog.close()
        subprocess.run(['rm', '-rf', scratch])
    meta['loadavg_end'] = open('/proc/loadavg').read().strip()
    summary = summarize(recs, [p.name for p in proxies], a.base, scen)
    summary += (f'\n\n{len(discarded)} run(s) discarded and redone for other load > {a.max_other}% of a core; '
                f'max other% kept: {max([r.get("other_pct", 0) for r in recs] or [0]):.1f}.')
    text = '\n'.join([f'# {tag}', f'# {" ".join(shlex.quote(x) for x in sys.argv)}',
                      f"# {meta['versions']}", '', HDR] + [fmt_row(r) for r in recs] +
                     ['', LEGEND, '', summary])
    with open(out_base + '.txt', 'w') as f:
        f.write(text + '\n')
    with open(out_base + '.json', 'w') as f:
        json.dump({'meta': meta, 'runs': recs, 'discarded': discarded, 'summary': summary}, f, indent=1)
    print('\n' + LEGEND + '\n\n' + summary)
    log(f'# saved {out_base}.txt and .json')
    if any('failed' in r for r in recs):
        sys.exit(1)


if __name__ == '__main__':
    main()
