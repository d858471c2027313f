#!/usr/bin/env bash
# Interop: the official Python MCP SDK (PyPI `mcp`) against `forkscope serve`, under both
# policies. Starts the server on a free loopback port, runs interop/python/run.sh, stops it.
# Every process it starts is stopped by its PID, with whatever that started, on every way out:
# a normal end, a failure, INT/TERM/HUP, a client past CLIENT_TIMEOUT (see .ci/processes.sh).
# Usage: interop/check-python-sdk.sh [path/to/forkscope]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
[[ -x "$BIN" ]] || { echo "no forkscope binary at $BIN (cargo build --release first)" >&2; exit 2; }
START_TIMEOUT=10   # s: a server that has not printed its address by then failed
CLIENT_TIMEOUT=120 # s: one client run, the SDK already installed

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-python-sdk.XXXXXX")"
at_exit 'rm -rf "$WORK"'

# The SDK first, bounded by its own install timeout, so the client's bound is the client's.
run_bounded 0 "$ROOT/interop/python/ensure-venv.sh" >/dev/null

status=0
for policy in fenced naive; do
    log="$WORK/$policy.out"
    spawn "$BIN" serve --port 0 --policy "$policy" --emit-every 200 >"$log" 2>"$log.err" </dev/null
    pid="$SPAWNED"
    url=""
    for _ in $(seq 1 $((START_TIMEOUT * 10))); do
        url="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$log" | head -n1 || true)"
        [[ -n "$url" ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z "$url" ]]; then
        echo "forkscope serve did not start:" >&2; cat "$log" "$log.err" >&2
        exit 1
    fi
    echo "== python SDK against forkscope serve --policy $policy ($url)"
    if ! run_bounded "$CLIENT_TIMEOUT" "$ROOT/interop/python/run.sh" "$url" --steps 5; then
        status=1
        echo "--- server log" >&2; tail -n 40 "$log.err" >&2
    fi
    stop "$pid"
done
exit "$status"
