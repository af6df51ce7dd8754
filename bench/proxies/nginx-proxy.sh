#!/usr/bin/env bash
# nginx as the third reverse proxy. Renders nginx-proxy.conf with the BENCH_*
# environment variables into $BENCH_WORKDIR and execs nginx in the foreground
# (master + BENCH_THREADS workers), so the PID the harness holds is the nginx
# master; CPU and RSS are summed over master + workers.
#   BENCH_HTTP_PORT=.. BENCH_TCP_PORT=.. BENCH_BACKEND_PORT=.. BENCH_THREADS=1 \
#   BENCH_WORKDIR=/tmp/x bash bench/proxies/nginx-proxy.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
w=${BENCH_WORKDIR:?}
mkdir -p "$w/tmp"
chmod 755 "$w"
sed -e "s|@HTTP_PORT@|${BENCH_HTTP_PORT:?}|g" \
    -e "s|@TCP_PORT@|${BENCH_TCP_PORT:?}|g" \
    -e "s|@BACKEND_PORT@|${BENCH_BACKEND_PORT:?}|g" \
    -e "s|@THREADS@|${BENCH_THREADS:-1}|g" \
    -e "s|@HTTPS_PORT@|${BENCH_HTTPS_PORT:?}|g" \
    -e "s|@CERT@|${BENCH_CERT:?}|g" \
    -e "s|@WORKDIR@|$w|g" \
    "$here/nginx-proxy.conf" >"$w/nginx-proxy.conf"
exec nginx -e "$w/error.log" -p "$w" -c "$w/nginx-proxy.conf"
