#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests and benchmarks: Debian's server
# (installed with apt when missing), run as a non-root user on a fresh data
# directory in /tmp (the postgres user may not reach into the checkout)
# and a free loopback port; target/pg remembers where.
#
#   scripts/pg.sh start [fast]   start (or keep) the cluster; prints its URL
#   scripts/pg.sh url            the running cluster's URL
#   scripts/pg.sh stop           stop it and remove its data
#   scripts/pg.sh down           fast shutdown, the data kept (`up` starts it again)
#   scripts/pg.sh kill9          SIGKILL to the postmaster, the data kept
#   scripts/pg.sh up             start a cluster that is down again, on its
#                                port and settings (crash recovery after kill9)
#
# ENGRAM_PG_STATE=<dir> keeps the state there instead of target/pg: a
# cluster of a test's own, which it may stop and kill (the PostgreSQL
# faults test).
#
# `fast` turns fsync off: for the tests, whose database never crashes (the
# replicas do). Benchmarks start it without.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${ENGRAM_PG_STATE:-$ROOT/target/pg}"
URL_FILE="$STATE/url"
DIR=$(cat "$STATE/dir" 2>/dev/null || true)
DATA="$DIR/data"

bindir() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [[ -z "$d" ]]; then
        echo "PostgreSQL server not found: installing Debian's postgresql package" >&2
        local sudo=""
        [[ $(id -u) -ne 0 ]] && sudo="sudo"
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q postgresql >&2 ||
            { $sudo apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q postgresql >&2; }
        d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    fi
    local version
    version=$(basename "$(dirname "$d")")
    if [[ ${version%%.*} -lt 15 ]]; then
        echo "PostgreSQL $version found; Engram needs 15 or later" >&2
        exit 1
    fi
    echo "$d"
}

# initdb and the server refuse to run as root: as root, they run as the
# package's `postgres` user on a directory it owns.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

running() {
    [[ -f "$URL_FILE" ]] && as_owner "$(bindir)/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
    local fast="${1:-}"
    if running; then
        cat "$URL_FILE"
        return
    fi
    local bin port
    bin=$(bindir)
    stop
    mkdir -p "$STATE"
    DIR=$(mktemp -d /tmp/engram-pg.XXXXXX)
    DATA="$DIR/data"
    echo "$DIR" >"$STATE/dir"
    chmod 755 "$DIR"
    if [[ $(id -u) -eq 0 ]]; then chown postgres "$DIR"; fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$bin/initdb" -D "$DATA" -U engram --auth=trust -E UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 ||
        { cat "$DIR/initdb.log" >&2; exit 1; }
    local opts="-c listen_addresses=127.0.0.1 -c port=$port -k $DIR -c max_connections=300"
    if [[ "$fast" == fast ]]; then
        opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    fi
    echo "$opts" >"$STATE/opts"
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$DIR/server.log" -o "$opts" -w start >/dev/null ||
        { cat "$DIR/server.log" >&2; exit 1; }
    echo "postgres://engram@127.0.0.1:$port/postgres" >"$URL_FILE"
    cat "$URL_FILE"
}

down() {
    as_owner "$(bindir)/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
}

kill9() {
    local pid
    pid=$(head -1 "$DATA/postmaster.pid")
    kill -9 "$pid"
    # Dead (a zombie counts: in a container nobody may reap it), so `up`
    # never meets it.
    while [[ -e /proc/$pid ]] && ! grep -q ') Z ' "/proc/$pid/stat" 2>/dev/null; do sleep 0.05; done
}

up() {
    # After kill9 the old server's backends notice their postmaster died
    # and leave; until the last has, the new one refuses to start (its
    # shared memory is still in use). Tries for 30 s.
    local bin tries=0
    bin=$(bindir)
    until as_owner "$bin/pg_ctl" -D "$DATA" -l "$DIR/server.log" -o "$(cat "$STATE/opts")" -w start >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [[ $tries -ge 60 ]]; then tail -20 "$DIR/server.log" >&2; exit 1; fi
        sleep 0.5
    done
}

stop() {
    if [[ -n "$DIR" && -d "$DATA" ]]; then
        as_owner "$(bindir)/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if [[ -n "$DIR" ]]; then rm -rf "$DIR"; fi
    rm -rf "$STATE"
}

case "${1:-}" in
    start) start "${2:-}" ;;
    url) running && cat "$URL_FILE" || { echo "no test PostgreSQL running: scripts/pg.sh start" >&2; exit 1; } ;;
    stop) stop ;;
    down) down ;;
    kill9) kill9 ;;
    up) up ;;
    *) echo "usage: $0 start [fast] | url | stop | down | kill9 | up" >&2; exit 2 ;;
esac
