#!/usr/bin/env python3
"""bench/tls_certs.py: how long `sluice -c` takes to load a directory of N certificates.

Generates N ECDSA P-256 certificates (one key each, distinct names, PEM bundles with the key,
signed by one CA) into a directory, writes a config with one `bind ... ssl crt DIR` line,
and times `sluice -c -f CFG` (a full configuration check loads and validates every
certificate and key, as start-up does).

    python3 bench/tls_certs.py                 # 10,000 certificates
    python3 bench/tls_certs.py --count 1000 --keep /tmp/certs

Needs python3-cryptography (Debian: apt-get install -y python3-cryptography) for the fast
generation, and a release build (target/release/sluice, or --sluice PATH).
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)


def generate(d, count):
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        sys.exit('python3-cryptography is needed: apt-get install -y python3-cryptography')
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'bench CA')])
    enc = serialization.Encoding.PEM
    for i in range(count):
        key = ec.generate_private_key(ec.SECP256R1())
        host = f'host{i}.bench.example'
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        with open(os.path.join(d, f'{host}.pem'), 'wb') as f:
            f.write(cert.public_bytes(enc))
            f.write(key.private_bytes(enc, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--count', type=int, default=10000)
    ap.add_argument('--sluice', default=os.path.join(ROOT, 'target', 'release', 'sluice'))
    ap.add_argument('--keep', help='generate into this directory and keep it')
    ap.add_argument('--runs', type=int, default=3)
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix='sluice-certs.')
    certs = os.path.join(work, 'certs')
    try:
        os.makedirs(certs, exist_ok=True)
        if len(os.listdir(certs)) != a.count:
            t = time.time()
            generate(certs, a.count)
            print(f'generated {a.count} certificates in {time.time() - t:.1f} s')
        cfg = os.path.join(work, 'certs.cfg')
        with open(cfg, 'w') as f:
            f.write(f'frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt {certs}\n'
                    '    http-request return status 200\n')
        for _ in range(a.runs):
            t = time.time()
            r = subprocess.run([a.sluice, '-c', '-f', cfg], capture_output=True, text=True)
            took = time.time() - t
            if r.returncode != 0:
                sys.exit(f'sluice -c failed ({r.returncode}):\n{r.stdout}{r.stderr}')
            print(f'sluice -c -f {cfg}: {a.count} certificates loaded in {took:.2f} s')
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
