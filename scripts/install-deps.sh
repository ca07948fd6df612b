#!/usr/bin/env bash
# Checks jitop's build dependencies and installs the missing Debian packages
# (apt-get when root; otherwise prints the exact command). The CUDA toolkit
# itself (NVRTC) is expected at $CUDA_HOME, default /usr/local/cuda.
set -euo pipefail

cuda_home=${CUDA_HOME:-/usr/local/cuda}
prefix=${DEPS_PREFIX:-}
missing=()

have_header() {
    [ -f "/usr/include/$1" ] || { [ -n "$prefix" ] && [ -f "$prefix/usr/include/$1" ]; }
}

command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
have_header xxhash.h || missing+=(libxxhash-dev)
have_header cmocka.h || missing+=(libcmocka-dev)
# libffi calls host functions whose signature is known only at run time.
have_header ffi.h || have_header x86_64-linux-gnu/ffi.h || have_header "$(uname -m)-linux-gnu/ffi.h" || missing+=(libffi-dev)
# Optional, never a failure: the Python package's tests (`make test` runs
# them where python3 has its headers, with pytest or a bundled runner) use
# Debian's headers and pytest for /usr/bin/python3, installed where apt-get
# can (as root).
optional=()
if [ -x /usr/bin/python3 ]; then
    pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
    [ -z "$pyver" ] || have_header "python$pyver/Python.h" || optional+=(python3-dev)
    [ -d /usr/lib/python3/dist-packages/pytest ] || optional+=(python3-pytest)
fi
if [ ${#optional[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # Its own apt-get call, whose failure (no network, no such package) only
    # warns: the Python suite is skipped where its packages are missing.
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq >/dev/null 2>&1 &&
           apt-get install -y -qq --no-install-recommends "${optional[@]}" >/dev/null 2>&1; }; then
        echo "install-deps: could not install the optional ${optional[*]} (the Python tests may skip)" >&2
    fi
fi
# The remote cache tier's HTTP client: only its header at build time (libcurl
# is opened with dlopen when a remote is configured; libcrypto, for entry
# signatures, comes with libcurl4's libssl3).
have_header curl/curl.h || have_header x86_64-linux-gnu/curl/curl.h ||
    have_header "$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/curl/curl.h" ||
    missing+=(libcurl4-openssl-dev)
# Optional: nginx with WebDAV listing, the real server of the remote cache
# tests (tests/support/nginx_dav.sh), where `make test` asks for it. Only
# installed where this script can install (root with apt-get); elsewhere
# those tests print SKIP, so its absence is a note, not a failure.
if [ "${JITOP_WANT_NGINX:-0}" = 1 ] && ! command -v nginx >/dev/null 2>&1 &&
    [ ! -x /usr/sbin/nginx ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        missing+=(nginx libnginx-mod-http-dav-ext)
    else
        echo "install-deps: nginx not installed: the remote cache tests will SKIP" \
            "(sudo apt-get install -y nginx libnginx-mod-http-dav-ext)" >&2
    fi
fi
# Optional: valgrind for `make valgrind`, only where asked for.
if [ "${JITOP_WANT_VALGRIND:-0}" = 1 ] && ! command -v valgrind >/dev/null 2>&1; then
    missing+=(valgrind)
fi

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "install-deps: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "install-deps: missing ${missing[*]}; run:" >&2
        echo "  sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

if [ ! -f "$cuda_home/include/nvrtc.h" ]; then
    echo "install-deps: no CUDA toolkit at $cuda_home (nvrtc.h not found)." >&2
    echo "  Install the CUDA toolkit (13.0 or later) and set CUDA_HOME to it." >&2
    exit 1
fi
