#!/usr/bin/env bash
# Checks the rule of src/'s rooms: a room uses only its own and lower rooms,
# and inside a room calls go one way. Rooms, bottom to top:
#     base compile cache build host load op watch ops
#
#   check-rooms.sh [--root DIR] [OBJDIR]
#
# Includes (always; reads src/ under DIR, default this script's repository):
# every `#include "room/..."` of a file in src/<room>/ must name its own room
# or one below it, and a private header (*_private.h) only its own room. A
# directory of src/ that is not a known room fails too (a new room must be
# placed in the order here and in base/base.h).
#
# The CLI (tools/, when there): only the files tools/cli.h lists under
# "Privileged internal clients:" may include an internal header.
#
# Calls (when OBJDIR is given: the objects of src/, e.g. build/obj/src): a
# symbol an object uses must be defined in its own room or one below it, and
# the files of one room must not call each other in a circle (an include
# check cannot see either: a room's header may declare a function defined
# above it, and a room's files share one header).
#
# Prints one line per violation and exits 1; exits 0 when the rule holds.
set -euo pipefail

rooms=(base compile cache build host load op watch ops)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
objdir=
while [ $# -gt 0 ]; do
    case $1 in
        --root) root=$2; shift 2 ;;
        -*) echo "check-rooms: unknown flag $1" >&2; exit 2 ;;
        *) objdir=$1; shift ;;
    esac
done

rank_list=$(printf '%s\n' "${rooms[@]}" | awk '{printf "%s%s=%d", (NR > 1 ? " " : ""), $0, NR}')
fail=0

# Each directory of src/ must be a room.
for d in "$root"/src/*/; do
    r=$(basename "$d")
    if [[ " ${rooms[*]} " != *" $r "* ]]; then
        echo "src/$r/: not a room (rooms, bottom to top: ${rooms[*]})"
        fail=1
    fi
done

# Includes.
out=$(cd "$root" && find src -mindepth 2 -maxdepth 2 \( -name '*.c' -o -name '*.h' \) -print0 |
    sort -z | xargs -0 -r awk -v ranks="$rank_list" '
    BEGIN { n = split(ranks, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); rank[p[1]] = p[2] } }
    match($0, /^[ \t]*#[ \t]*include[ \t]*"[a-z_]+\/[^"]+"/) {
        split(FILENAME, f, "/"); room = f[2]
        inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
        split(inc, g, "/"); to = g[1]
        if (!(to in rank))
            printf "%s:%d: includes %s: %s is no room\n", FILENAME, FNR, inc, to
        else if (rank[to] > rank[room])
            printf "%s:%d: includes %s: the %s room is above the %s room\n", FILENAME, FNR, inc, to, room
        else if (to != room && inc ~ /_private\.h$/)
            printf "%s:%d: includes %s: a private header of the %s room\n", FILENAME, FNR, inc, to
    }')
if [ -n "$out" ]; then
    echo "$out"
    fail=1
fi

# The CLI's privileged internal clients.
if [ -f "$root/tools/cli.h" ]; then
    listed=" $(awk '/Privileged internal clients:/ { on = 1; next } on && /^ \*$/ { exit } on' \
        "$root/tools/cli.h" | grep -o '[a-z_]*\.c' | tr '\n' ' ')"
    for f in "$root"/tools/*.c; do
        [ -e "$f" ] || continue
        n=$(basename "$f")
        [[ "$listed" == *" $n "* ]] && continue
        hit=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]+/' "$f" | head -n 1 || true)
        if [ -n "$hit" ]; then
            echo "tools/$n:${hit%%:*}: includes an internal header but is not a privileged internal client (tools/cli.h)"
            fail=1
        fi
    done
fi

# Calls.
if [ -n "$objdir" ]; then
    # The objects of today's sources only (a build directory may keep the
    # object of a file since moved or removed).
    objs=()
    for src in "$root"/src/*/*.c; do
        o=${src#"$root"/src/}
        o=${o%.c}.o
        if [ ! -f "$objdir/$o" ]; then
            echo "check-rooms: $objdir/$o is missing: build first" >&2
            exit 2
        fi
        objs+=("$o")
    done
    table=$(cd "$objdir" && nm -A -g "${objs[@]}")
    # "user def" for every call between two objects, and the violations.
    edges=$(awk -v ranks="$rank_list" '
        BEGIN { n = split(ranks, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); rank[p[1]] = p[2] } }
        {
            obj = $1; sub(/:.*/, "", obj)
            if ($2 == "U") { uses[++nu] = obj " " $3; next }
            if ($(NF - 1) ~ /^[TDBRVWGS]$/) def[$NF] = obj
        }
        END {
            for (i = 1; i <= nu; i++) {
                split(uses[i], u, " "); obj = u[1]; sym = u[2]
                if (!(sym in def) || def[sym] == obj) continue
                split(obj, a, "/"); split(def[sym], b, "/")
                if (rank[b[1]] > rank[a[1]])
                    printf "VIOLATION %s calls %s, defined in %s: the %s room is above the %s room\n", obj, sym, def[sym], b[1], a[1]
                else if (a[1] == b[1])
                    printf "EDGE %s %s\n", def[sym], obj
            }
        }' <<<"$table" | sort -u)
    if grep -q '^VIOLATION' <<<"$edges"; then
        sed -n 's/^VIOLATION //p' <<<"$edges"
        fail=1
    fi
    # Inside a room: the files' call graph must have no circle (tsort names one).
    for r in "${rooms[@]}"; do
        pairs=$(awk -v r="$r" '$1 == "EDGE" && index($2, r "/") == 1 { print $2, $3 }' <<<"$edges")
        [ -n "$pairs" ] || continue
        if ! loop=$(tsort <<<"$pairs" 2>&1 >/dev/null) || [ -n "$loop" ]; then
            echo "the $r room's files call each other in a circle:"
            sed -n 's/^tsort: //p' <<<"$loop" | grep -v 'input contains a loop' | sed 's/^/    /'
            fail=1
        fi
    done
fi

exit "$fail"
