"""What the differential tools (http_diff, balance_diff, timeout_diff, compression_diff,
converter_diff, peers_diff, lua_diff) share: loopback ports, a threaded raw-socket listener for their origins, and
running a proxy binary on a config file (check, start and wait until it listens, stop).

Each tool keeps what is its own: what its origin answers, what its client sends, and how it
compares the two proxies."""

import os
import signal
import socket
import subprocess
import threading
import time

HOST = "127.0.0.1"


def free_port(kind=socket.SOCK_STREAM):
    """A loopback port nothing is bound to right now."""
    s = socket.socket(socket.AF_INET, kind)
    s.bind((HOST, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listening_ports():
    """Local ports in LISTEN state (IPv4 and IPv6), read from /proc/net/tcp{,6}: a readiness
    check that opens no connection, so none shows in a proxy's logs or an origin's records."""
    out = set()
    for fn in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(fn) as f:
                for line in f.readlines()[1:]:
                    parts = line.split()
                    if parts[3] == "0A":
                        out.add(int(parts[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return out


class Listener:
    """A listening socket on HOST with an accept thread; `on_accept(conn)` runs on that
    thread for each connection (subclasses usually start a thread per connection there)."""

    def __init__(self, backlog=512):
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((HOST, 0))
        self.lsock.listen(backlog)
        self.port = self.lsock.getsockname()[1]
        self.stopping = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.on_accept(c)

    def on_accept(self, c):
        raise NotImplementedError

    def close(self):
        self.stopping = True
        try:
            self.lsock.close()
        except OSError:
            pass


def cli(sock, cmd, timeout=10):
    """One command on a stats socket (UNIX path `sock`): its whole answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock)
    s.sendall(cmd.encode() + b'\n')
    buf = b''
    while True:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    s.close()
    return buf.decode(errors='replace')


def check_config(binary, cfg):
    """`BINARY -c -f CFG`: (exit status, its output)."""
    r = subprocess.run([binary, "-c", "-f", cfg], capture_output=True, timeout=20, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def wait_listening(proc, ports, what, timeout=10.0, output=lambda: ""):
    """Waits until every port in `ports` listens; raises if the process exits first or the
    ports are not all there within `timeout` (`output()` says why, in the error)."""
    deadline = time.monotonic() + timeout
    pending = set(ports)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited at start: %s" % (what, output()))
        pending -= listening_ports()
        if not pending:
            return
        time.sleep(0.02)
    raise RuntimeError("%s did not start listening: %s" % (what, output()))


def stop_process(proc, wait=5):
    """SIGTERM, then SIGKILL if it has not exited within `wait` seconds."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(wait)


class ProxyRun:
    """A proxy binary on a config file in `workdir`, output to `<name>.stderr` there."""

    def __init__(self, name, binary, cfg_text, workdir, args=("-db",)):
        self.name = name
        self.binary = binary
        self.args = list(args)
        self.cfg = os.path.join(workdir, name + ".cfg")
        with open(self.cfg, "w") as f:
            f.write(cfg_text)
        self.errpath = os.path.join(workdir, name + ".stderr")
        self.proc = None
        self.errf = None

    def check(self):
        return check_config(self.binary, self.cfg)

    def start(self, ports):
        self.errf = open(self.errpath, "w")
        self.proc = subprocess.Popen([self.binary] + self.args + ["-f", self.cfg],
                                     stdout=self.errf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        wait_listening(self.proc, ports, self.name, output=lambda: open(self.errpath).read())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        stop_process(self.proc)
        if self.errf:
            self.errf.close()
            self.errf = None
