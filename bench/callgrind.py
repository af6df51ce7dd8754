#!/usr/bin/env python3
"""User-space instructions per `Connection: close` request, counted by callgrind.

    python3 bench/callgrind.py [--proxies sluice,nginx,NAME=PATH] [--few 200] [--many 1000]

Wall-clock CPU on a shared 2-core VM moves by 20-30 % between runs; instruction counts do
not (the same binary and input give the same count whatever else the machine does). Each
proxy runs under `valgrind --tool=callgrind --separate-threads=yes` in front of the bench
origin (bench/backend.sh), one thread, and this script sends `--few` and then, in a second
fresh run, `--many` sequential `GET /` requests with `Connection: close`, each on a new
connection, checking every answer is a 200. The counters are dumped with `callgrind_control
-d` while the proxy still runs (a proxy stopped by a signal may not dump its worker threads),
summed over all threads, and the per-request figure is (many - few) / (many - few requests):
start-up cancels out. Kernel work (the syscalls themselves) is not counted: compare it with
`perf` or bench/run.py's CPU per request.

sluice is target/release/sluice unless NAME=PATH names another build (an A/B). nginx runs
with the bench's proxy settings (upstream keepalive pool, HTTP/1.1 to the origin) and
`master_process off`. The per-thread profiles stay in the printed directories for
`callgrind_annotate`.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tls as base  # noqa: E402  (wait_port)

ORIGIN_PORT = 18703
PROXY_PORT = 18701

SLUICE_CFG = """global
    nbthread 1
    maxconn 1000
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{proxy}
    default_backend be
backend be
    server o 127.0.0.1:{origin}
"""

NGINX_CFG = """worker_processes 1;
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1000; }}
http {{
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 30s;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    upstream origin {{
        server 127.0.0.1:{origin};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{proxy};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffer_size 16k;
            proxy_buffers 8 16k;
            proxy_max_temp_file_size 0;
        }}
    }}
}}
"""

REQUEST = b'GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: callgrind\r\nConnection: close\r\n\r\n'


def wait_port(port, proc, what):
    """bench/tls.py's wait_port (which also notices a process that died), but fatal."""
    if not base.wait_port(port, proc, timeout=60.0):
        raise SystemExit(f'{what}: nothing listens on port {port} (exit status {proc.poll()})')


def start_origin():
    d = tempfile.mkdtemp(prefix='sluice-cg-origin.')
    os.chmod(d, 0o755)  # nginx workers run as nobody
    p = subprocess.Popen(['bash', os.path.join(HERE, 'backend.sh'), d + '/o', str(ORIGIN_PORT)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    wait_port(ORIGIN_PORT, p, 'origin')
    return p, d


def one_run(name, path, n):
    d = tempfile.mkdtemp(prefix=f'sluice-cg-{name}.')
    if path == 'nginx':
        os.makedirs(d + '/tmp', exist_ok=True)
        with open(d + '/n.conf', 'w') as f:
            f.write(NGINX_CFG.format(dir=d, origin=ORIGIN_PORT, proxy=PROXY_PORT))
        cmd = ['nginx', '-e', d + '/error.log', '-p', d, '-c', d + '/n.conf']
    else:
        with open(d + '/c.cfg', 'w') as f:
            f.write(SLUICE_CFG.format(origin=ORIGIN_PORT, proxy=PROXY_PORT))
        cmd = [path, '-db', '-f', d + '/c.cfg']
    p = subprocess.Popen(['valgrind', '--tool=callgrind', '--separate-threads=yes',
                          f'--callgrind-out-file={d}/cg.out'] + cmd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(PROXY_PORT, p, name)
        for _ in range(n):
            s = socket.create_connection(('127.0.0.1', PROXY_PORT))
            s.sendall(REQUEST)
            data = bytearray()
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            s.close()
            if not data.startswith(b'HTTP/1.1 200'):
                raise SystemExit(f'{name}: unexpected answer {bytes(data[:80])!r}')
        subprocess.run(['callgrind_control', '-d', str(p.pid)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        # The dump is written by the tool thread shortly after the request.
        end = time.monotonic() + 30
        while time.monotonic() < end and not dumps(d):
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        p.kill()
        p.wait()
    total = 0
    for f in dumps(d):
        with open(f) as fh:
            m = re.search(r'^summary: (\d+)', fh.read(), re.M)
        total += int(m.group(1)) if m else 0
    return total, d


def dumps(d):
    return [os.path.join(d, f) for f in sorted(os.listdir(d))
            if f.startswith('cg.out.') and os.path.getsize(os.path.join(d, f)) > 0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--proxies', default='sluice,nginx')
    ap.add_argument('--few', type=int, default=200)
    ap.add_argument('--many', type=int, default=1000)
    a = ap.parse_args()
    if not shutil.which('valgrind') or not shutil.which('callgrind_control'):
        raise SystemExit('valgrind is needed (apt-get install valgrind)')
    origin, odir = start_origin()
    try:
        for item in a.proxies.split(','):
            name, _, path = item.partition('=')
            if not path:
                path = 'nginx' if name == 'nginx' else os.path.join(ROOT, 'target/release/sluice')
            few, d1 = one_run(name, path, a.few)
            many, d2 = one_run(name, path, a.many)
            per = (many - few) / (a.many - a.few)
            print(f'{name:10} {per:9.0f} instructions per close request '
                  f'({few} Ir for {a.few}, {many} Ir for {a.many}; profiles in {d2})')
            sys.stdout.flush()
    finally:
        os.killpg(origin.pid, signal.SIGTERM)


if __name__ == '__main__':
    main()
