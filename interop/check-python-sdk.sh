#!/usr/bin/env bash
# Interop: the official Python MCP SDK (PyPI `mcp`) against `forkscope serve`, under both
# policies. Starts the server on a free loopback port, runs interop/python/run.sh, stops it.
# Usage: interop/check-python-sdk.sh [path/to/forkscope]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
[[ -x "$BIN" ]] || { echo "no forkscope binary at $BIN (cargo build --release first)" >&2; exit 2; }

status=0
for policy in fenced naive; do
    log="$(mktemp)"
    "$BIN" serve --port 0 --policy "$policy" --emit-every 200 >"$log" 2>"$log.err" &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    url=""
    for _ in $(seq 1 100); do
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
    if ! "$ROOT/interop/python/run.sh" "$url" --steps 5; then
        status=1
        echo "--- server log" >&2; tail -n 40 "$log.err" >&2
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    trap - EXIT
    rm -f "$log" "$log.err"
done
exit "$status"
