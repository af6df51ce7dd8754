#!/usr/bin/env python3
"""bench/check_floor.py: the least CPU a plain connect check can cost on this machine.

    python3 bench/check_floor.py [--rate 10000] [--secs 8] [--tick-us 1000]

Builds bench/check_floor.c with gcc (into a temporary directory), starts bench/checks.py's
check target (10,000 listening ports, and its SYN capture, as in a real run) and runs the
floor program against it: one epoll loop doing nothing but checks. Its CPU per check is the
kernel's work for both ends of a loopback check (connect, SYN/SYN-ACK, reset), the floor
under any proxy's figure in bench/checks.py's `check work` column.
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--rate', type=int, default=10000, help='checks per second')
    ap.add_argument('--secs', type=float, default=8)
    ap.add_argument('--tick-us', type=int, default=1000, help='timer tick of the loop')
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--reuse', action='store_true',
                    help='also run the variant that keeps dissolved sockets (connect(AF_UNSPEC)) '
                         'for the next check, as sluice does; the two alternate')
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix='check_floor.')
    exe = os.path.join(tmp, 'check_floor')
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'check_floor.c')
    subprocess.run(['gcc', '-O2', '-o', exe, src], check=True)
    t = checks.Target(argparse.Namespace(servers=10000, per_addr=250), 'l4', tmp)
    try:
        for _ in range(a.repeat):
            for mode in (['new', 'reuse'] if a.reuse else ['new']):
                r = subprocess.run([exe, str(a.rate), str(a.secs), str(a.tick_us), mode],
                                   capture_output=True, text=True, timeout=a.secs + 30)
                print(r.stdout.strip() or r.stderr.strip(), flush=True)
    finally:
        t.close()


if __name__ == '__main__':
    main()
