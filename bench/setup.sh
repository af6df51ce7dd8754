#!/usr/bin/env bash
# Idempotent install of the benchmark tools from Debian packages.
#   bash bench/setup.sh
# Installs only what is missing (HAProxy 2.6, nginx + its stream module, wrk,
# ss, taskset, python3). Package installs must not start the distro services
# (they would grab :80 and burn CPU during runs): if the machine has no
# /usr/sbin/policy-rc.d, a temporary "exit 101" one is put in place for the
# duration of the install and removed afterwards.
set -euo pipefail

PKGS=(haproxy nginx-light libnginx-mod-stream wrk nghttp2-client curl iproute2 util-linux procps python3)
# nginx-light: smallest Debian nginx flavour; has proxy, upstream keepalive and
# stub_status. libnginx-mod-stream: the L4 proxy of the nginx peer (tcp scenario).

missing=()
for p in "${PKGS[@]}"; do
    if [[ $p == nginx-light ]] && command -v nginx >/dev/null 2>&1; then continue; fi
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then continue; fi
    missing+=("$p")
done

if ((${#missing[@]} == 0)); then
    echo "setup: all present"
else
    echo "setup: installing ${missing[*]}"
    SUDO=()
    if [[ $(id -u) != 0 ]]; then SUDO=(sudo); fi
    tmp_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${SUDO[@]}" chmod +x /usr/sbin/policy-rc.d
        tmp_policy=1
    fi
    trap '[[ $tmp_policy == 1 ]] && "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
    export DEBIAN_FRONTEND=noninteractive
    APT=("${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 -y --no-install-recommends)
    # apt lists may be missing or stale on a fresh machine: update once on failure
    if ! "${APT[@]}" install "${missing[@]}" >/tmp/bench-setup-apt.log 2>&1; then
        "${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
        "${APT[@]}" install "${missing[@]}"
    fi
fi

for b in haproxy nginx wrk h2load curl ss taskset python3; do
    command -v "$b" >/dev/null || { echo "setup: $b still missing" >&2; exit 1; }
done
[[ -e /usr/lib/nginx/modules/ngx_stream_module.so ]] || { echo "setup: nginx stream module missing" >&2; exit 1; }
echo "setup: haproxy $(haproxy -v | head -1 | awk '{print $3}'), $(nginx -v 2>&1 | sed 's/.*\///'), wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}')"
