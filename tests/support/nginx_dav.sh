#!/usr/bin/env bash
# A throwaway nginx with WebDAV for the remote cache tests and the fleet
# bench: its own nginx.conf, pid, logs and document root under DIR, bound to
# 127.0.0.1 on a free port. No root needed (nginx installed by
# scripts/install-deps.sh with JITOP_WANT_NGINX=1).
#
#   nginx_dav.sh start DIR   prints the port; exit 77 when nginx is absent
#   nginx_dav.sh stop DIR    stops it (the pid in DIR/nginx.pid only)
#
# Locations (all over DIR/www):
#   /cache/   GET, HEAD, PUT, DELETE, MKCOL; PROPFIND when the dav-ext module
#             is installed
#   /bad/     GET only, from DIR/www/bad (bodies a test crafts)
#   /err500/  every request answers 500
#   /slow/    DIR/www/cache at 1 byte per second (a timeout)
#   /auth/    DIR/www/cache for "Bearer jitop-test-token" or basic u:pw only
#   /auth2/   DIR/www/cache for the hairy credentials below only: a user and
#             a password, and a bearer token, holding the bytes that are
#             separators elsewhere (tests/cpu/test_remote_creds.c has the same)
set -euo pipefail
cmd=${1:?usage: nginx_dav.sh start|stop DIR}
dir=${2:?usage: nginx_dav.sh start|stop DIR}
nginx=$(command -v nginx || true)
[ -z "$nginx" ] && [ -x /usr/sbin/nginx ] && nginx=/usr/sbin/nginx

case $cmd in
stop)
    if [ -f "$dir/nginx.pid" ]; then
        pid=$(cat "$dir/nginx.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.05; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    exit 0 ;;
start) ;;
*) echo "nginx_dav.sh: unknown command $cmd" >&2; exit 2 ;;
esac

if [ -z "$nginx" ]; then
    echo "nginx not installed" >&2
    exit 77
fi
dir=$(cd "$dir" && pwd)
mkdir -p "$dir/www/cache" "$dir/www/bad" "$dir/tmp"
ext=
for m in /usr/lib/nginx/modules/ngx_http_dav_ext_module.so /usr/share/nginx/modules/ngx_http_dav_ext_module.so; do
    [ -f "$m" ] && { ext="load_module $m;"; break; }
done
# Workers run as the user who started nginx; as root nginx would switch to
# nobody, who could not write the temporary root.
# The password: every byte from 0x01 to 0xff (blanks, ',', '|', ':', '@',
# '%', '/', '?', '#', quotes, backslash, control bytes, non-ASCII). The user
# name: no ':' (HTTP basic forbids it), but ',' '|' '@' and a blank.
hairy_user='c i,|@x'
hairy_basic=$( { printf '%s:' "$hairy_user"; for i in $(seq 1 255); do printf "\\$(printf %03o "$i")"; done; } | base64 -w0)
hairy_token='tok,en|with space;and=%41+/~'
user=
[ "$(id -u)" = 0 ] && user="user root;"
for try in $(seq 20); do
    port=$(( 20000 + (RANDOM * 7 + $$ + try * 131) % 40000 ))
    cat > "$dir/nginx.conf" <<CONF
$ext
$user
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 512; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    client_max_body_size 0;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$port;
        root $dir/www;
        location /cache/ {
            dav_methods PUT DELETE MKCOL;
            create_full_put_path on;
            dav_access user:rw;
            ${ext:+dav_ext_methods PROPFIND OPTIONS;}
        }
        location /bad/ { limit_except GET HEAD { deny all; } }
        location /err500/ { return 500; }
        location /slow/ { alias $dir/www/cache/; limit_rate 1; }
        location /auth/ {
            alias $dir/www/cache/;
            if (\$http_authorization !~ "^(Bearer jitop-test-token|Basic dTpwdw==)\$") { return 401; }
        }
        location /auth2/ {
            alias $dir/www/cache/;
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw;
            set \$ok 0;
            if (\$http_authorization = "Basic $hairy_basic") { set \$ok 1; }
            if (\$http_authorization = "Bearer $hairy_token") { set \$ok 1; }
            if (\$ok = 0) { return 401; }
        }
    }
}
CONF
    if "$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" 2>>"$dir/start.log"; then
        for _ in $(seq 100); do
            [ -s "$dir/nginx.pid" ] && { echo "$port"; exit 0; }
            sleep 0.02
        done
    fi
done
echo "nginx_dav.sh: nginx did not start (see $dir/start.log, $dir/error.log)" >&2
exit 1
