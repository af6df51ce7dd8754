#!/usr/bin/env bash
# Origin server for the benchmarks: nginx master + 1 worker, in the foreground,
# with its own prefix dir (not the system service, no /etc/nginx, no :80).
#
#   bash bench/backend.sh DIR PORT [CLOSING_PORT]   # stop with Ctrl-C / SIGTERM to the PID
#
# CLOSING_PORT, if given, serves the same files with keepalive_timeout 300ms
# (the idle-close scenario: a server that closes idle connections).
#
# Locations (all static files, sendfile, fd cache):
#   /       100-byte body        /1k   1024-byte body      /64k  65536-byte body
#   /status stub_status (the harness reads "accepts" to count new connections
#           that the proxy opened to the origin)
# keepalive_requests is effectively unlimited so the origin never closes a
# reused connection on its own during a run.
set -euo pipefail
dir=${1:?usage: backend.sh DIR PORT}
port=${2:?usage: backend.sh DIR PORT [CLOSING_PORT]}
closing_port=${3:-}
workers=${BACKEND_WORKERS:-1}

mkdir -p "$dir/www" "$dir/tmp"
chmod 755 "$dir" "$dir/www"   # workers run as nobody: DIR and its parents must be world-traversable
body() { yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c "$1" || true; }  # yes gets SIGPIPE
body 100   >"$dir/www/small"
body 1024  >"$dir/www/1k"
body 65536 >"$dir/www/64k"
chmod 644 "$dir"/www/*

cat >"$dir/nginx.conf" <<EOF
worker_processes $workers;
worker_rlimit_nofile 20000;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 16384; }
http {
    access_log off;
    default_type text/plain;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache max=64 inactive=600s;
    open_file_cache_valid 600s;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    server {
        listen 127.0.0.1:$port backlog=4096;
        root $dir/www;
        location = /       { rewrite ^ /small break; }
        location = /status { stub_status; }
        location /         { }
    }
$(if [ -n "$closing_port" ]; then cat <<EOS
    # idle-close scenario: closes keep-alive connections idle for 300 ms
    server {
        listen 127.0.0.1:$closing_port backlog=4096;
        keepalive_timeout 300ms;
        root $dir/www;
        location = /       { rewrite ^ /small break; }
        location /         { }
    }
EOS
fi)
}
EOF
exec nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf"
