#!/usr/bin/env bash
# One command for the whole benchmark:
#   bench/run.sh [--no-setup] [--no-build] [run.py options...]
# 1. installs HAProxy, nginx (+ stream module) and wrk from Debian if missing
#    (bench/setup.sh, idempotent; skip with --no-setup);
# 2. builds sluice in release mode (cargo build --release in the repo root;
#    skip with --no-build, or automatically when --proxies leaves sluice out);
# 3. runs bench/run.py with the remaining options: sluice, HAProxy and nginx
#    interleaved, each pinned to one core with one thread; the summary goes to
#    stdout and bench/results/<stamp>-*.txt/.json.
# Examples:
#   bench/run.sh                                  # full matrix, 5 repetitions
#   bench/run.sh --duration 3 --warmup 1 --repeat 1 --idle-conns 1000   # smoke
#   bench/run.sh --scenarios ka,idle --repeat 3
#   bench/run.sh --proxies haproxy,nginx          # without sluice
#   python3 bench/run.py --help                   # every option
set -euo pipefail
bench=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench")

setup=1 build=1 args=() proxies=haproxy,sluice,nginx extra_sluice=0
while (($#)); do
    case $1 in
        --no-setup) setup=0 ;;
        --no-build) build=0 ;;
        --proxies) args+=("$1" "${2:?--proxies wants a list}"); proxies=$2; shift ;;
        --proxies=*) args+=("$1"); proxies=${1#--proxies=} ;;
        --proxy) args+=("$1" "${2:?--proxy wants NAME=CMD}"); [[ $2 == sluice=* ]] && extra_sluice=1; shift ;;
        *) args+=("$1") ;;
    esac
    shift
done

if ((setup)); then bash "$bench/setup.sh"; fi

# build only when the built-in sluice command is going to be run
if ((build)) && ((!extra_sluice)) && [[ ,$proxies, == *,sluice,* ]]; then
    echo "bench: cargo build --release in $root" >&2
    if ! (cd "$root" && cargo build --release); then
        echo "bench: the release build of sluice failed; fix it, or run without sluice: bench/run.sh --proxies haproxy,nginx" >&2
        exit 1
    fi
fi

exec python3 "$bench/run.py" "${args[@]}"
