#!/usr/bin/env bash
# What a proxy costs the *load* core in the keep-alive scenario: with the proxy pinned to
# CPU 1 and the nginx origin + wrk on CPU 0 (bench/run.py's placement), CPU 0 is the
# bottleneck, so requests/s measures how much work each proxy causes there.
#
#   bash bench/load_core.sh haproxy|sluice [SLUICE_BIN] [perf]
#
# Prints per request: context switches of the origin worker, of wrk and of the proxy, and
# IPIs (RES+CAL+IWI, both CPUs). With `perf`, also records CPU 0 for 5 s
# (perf record -C 0 -g) into /tmp/load_core-PROXY.data; compare with
#   perf report -i /tmp/load_core-PROXY.data --no-children --sort sym -g none
# Needs bench/setup.sh's tools; run under `flock /tmp/cargo.lock` like every benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
P=${1:?haproxy|sluice}; BIN=${2:-target/release/sluice}; PERF=${3:-}
W=$(mktemp -d /tmp/load_core.XXXXXX)
export BENCH_HTTP_PORT=18601 BENCH_TCP_PORT=18602 BENCH_BACKEND_PORT=18603 \
    BENCH_METRICS_PORT=18604 BENCH_HTTP20_PORT=18605 BENCH_CLOSING_PORT=18606 \
    BENCH_CLOSING_BACKEND_PORT=18607 BENCH_WORKDIR=$W BENCH_THREADS=1
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; pkill -f "$W/o" 2>/dev/null || true; }
trap cleanup EXIT
taskset -c 0 bash bench/backend.sh "$W/o" 18603 18607 >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 100); do [ -s "$W/o/nginx.pid" ] && curl -sf -o /dev/null http://127.0.0.1:18603/ && break; sleep 0.1; done
# The https frontend needs a certificate; this measurement does not use it.
case $P in
    haproxy) sed '/^frontend fe_https/,/default_backend/d' bench/proxies/haproxy.cfg >"$W/p.cfg"
             taskset -c 1 haproxy -db -f "$W/p.cfg" >"$W/p.log" 2>&1 & pids+=($!) ;;
    *)       sed '/^frontend fe_https/,/default_backend/d' bench/proxies/sluice.cfg >"$W/p.cfg"
             taskset -c 1 "$BIN" -db -f "$W/p.cfg" >"$W/p.log" 2>&1 & pids+=($!) ;;
esac
PP=${pids[1]}
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:18601/" && break; sleep 0.1; done
OW=$(pgrep -f "nginx: worker process" -P "$(cat "$W/o/nginx.pid")" | head -1)
ctx()  { local s=0 t; for t in /proc/$1/task/*; do s=$((s + $(awk '/ctxt_switches/{x+=$2} END{print x}' "$t/status"))); done; echo $s; }
ipi()  { awk '/RES:|CAL:|IWI:/{for(i=2;i<=3;i++)s+=$i} END{print s}' /proc/interrupts; }
taskset -c 0 wrk -t1 -c50 -d2s http://127.0.0.1:18601/ >/dev/null      # warm-up
o0=$(ctx "$OW"); p0=$(ctx "$PP"); i0=$(ipi)
taskset -c 0 wrk -t1 -c50 -d10s http://127.0.0.1:18601/ >"$W/wrk.txt" & WP=$!
sleep 0.3
if [ -n "$PERF" ]; then perf record -q -C 0 -g -e cpu-clock -o "/tmp/load_core-$P.data" -- sleep 5 >/dev/null 2>&1; fi
wait $WP
o1=$(ctx "$OW"); p1=$(ctx "$PP"); i1=$(ipi)
req=$(awk '/requests in/{print $1}' "$W/wrk.txt")
python3 - "$P" "$req" "$o0" "$o1" "$p0" "$p1" "$i0" "$i1" <<'PY'
import sys
p, r, o0, o1, p0, p1, i0, i1 = sys.argv[1], *map(int, sys.argv[2:])
print(f'{p}: {r} requests in 10 s; per request: origin ctx {(o1-o0)/r:.3f}, '
      f'proxy ctx {(p1-p0)/r:.3f}, IPIs {(i1-i0)/r:.3f}')
PY
