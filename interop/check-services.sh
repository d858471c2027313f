#!/usr/bin/env bash
# The services the replica setup runs on, started the way CI starts them (.ci/services.sh):
# redis-server on a free 127.0.0.1 port answers PING; haproxy, configured from
# .ci/haproxy.cfg.template, balances two `forkscope serve` replicas round robin, so two MCP
# `initialize` POSTs through it are answered 200 by one replica each; then everything is
# stopped by its PID and is gone. Every wait is bounded; every process started is stopped by
# its PID on every way out: a normal end, a failure, INT/TERM/HUP (see .ci/processes.sh).
#
# Usage: interop/check-services.sh [path/to/forkscope]
# Exit: 0 every check held, 1 one did not, 2 cannot run (a tool missing).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
START_POLLS=100     # polls 0.1 s apart before a replica that has not printed its address failed
REQUEST_TIMEOUT=10  # s: one request through haproxy
LOG_POLLS=50        # polls 0.1 s apart for a replica to log the session it opened

die() { echo "check-services: $*" >&2; exit 2; }
[[ -x "$BIN" ]] || die "no forkscope binary at $BIN (cargo build --release first)"
for tool in curl python3 redis-cli timeout; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
# shellcheck source=../.ci/services.sh
source "$ROOT/.ci/services.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-services.XXXXXX")"
at_exit 'rm -rf "$WORK"'

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() {
    echo "check-services: $passed passed, $failed failed"
    ((failed == 0 && passed > 0))
    exit
}

# ---- redis -----------------------------------------------------------------------------------
start_redis || { fail "redis-server starts"; finish; }
pass "redis-server starts: pid $REDIS_PID, $REDIS_URL"
reply="$(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>&1)"
if [[ "$reply" == PONG ]]; then pass "redis-cli ping: PONG"; else fail "redis-cli ping: $reply"; fi

# ---- two replicas behind haproxy ---------------------------------------------------------------
# Each on a port the kernel picks (--port 0), read back from what it prints: no port race.
REPLICA_PIDS=()
REPLICA_ADDRS=()
for n in 1 2; do
    out="$WORK/replica$n.out"
    spawn "$BIN" serve --port 0 >"$out" 2>"$WORK/replica$n.err" </dev/null
    REPLICA_PIDS+=("$SPAWNED")
    addr=""
    for ((i = 0; i < START_POLLS; i++)); do
        addr="$(grep -o '127\.0\.0\.1:[0-9]*/mcp' "$out" | head -n1 || true)"
        [[ -n "$addr" ]] && break
        procs_alive "$SPAWNED" || break
        sleep 0.1
    done
    if [[ -z "$addr" ]]; then
        fail "replica $n starts"
        cat "$out" "$WORK/replica$n.err" >&2
        finish
    fi
    REPLICA_ADDRS+=("${addr%/mcp}")
done
pass "two replicas: ${REPLICA_ADDRS[*]}"

start_haproxy replica "${REPLICA_ADDRS[@]}" || { fail "haproxy starts"; finish; }
pass "haproxy starts: pid $HAPROXY_PID, $HAPROXY_URL"

# The replica whose log names SESSION (it logs the first six characters), or nothing.
replica_of() {
    local n i
    for ((i = 0; i < LOG_POLLS; i++)); do
        for n in 1 2; do
            grep -q "session initialized session=${1:0:6}" "$WORK/replica$n.err" &&
                echo "$n" && return 0
        done
        sleep 0.1
    done
}

INITIALIZE='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"check-services","version":"0"}}}'
landed=()
for attempt in 1 2; do
    headers="$WORK/initialize$attempt.headers"
    status="$(curl -sS -m "$REQUEST_TIMEOUT" -o "$WORK/initialize$attempt.body" -D "$headers" \
        -w '%{http_code}' -X POST "$HAPROXY_URL" \
        -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' \
        --data "$INITIALIZE" 2>&1)"
    if [[ "$status" != 200 ]]; then
        fail "initialize $attempt through haproxy: $status"
        cat "$WORK/initialize$attempt.body" >&2 2>/dev/null
        continue
    fi
    session="$(tr -d '\r' <"$headers" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: *//p')"
    replica="$(replica_of "$session")"
    if [[ -n "$session" && -n "$replica" ]]; then
        pass "initialize $attempt through haproxy: 200, session $session on replica $replica"
        landed+=("$replica")
    else
        fail "initialize $attempt through haproxy: 200, but session '$session' is in no replica's log"
    fi
done
if ((${#landed[@]} == 2)) && [[ "${landed[0]}" != "${landed[1]}" ]]; then
    pass "round robin: one initialize on each replica"
else
    fail "round robin: the initializes landed on replica(s) ${landed[*]:-none}"
    cat "$SERVICES_DIR"/replica-*.log >&2 2>/dev/null
fi

# ---- stopped by PID ----------------------------------------------------------------------------
for pid in "$HAPROXY_PID" "${REPLICA_PIDS[@]}" "$REDIS_PID"; do
    stop "$pid"
done
left=()
for pid in "$HAPROXY_PID" "${REPLICA_PIDS[@]}" "$REDIS_PID"; do
    procs_alive "$pid" && left+=("$pid")
done
if ((${#left[@]} == 0)); then
    pass "haproxy, both replicas and redis-server stopped by PID"
else
    fail "still running after stop: ${left[*]}"
fi
finish
