#!/usr/bin/env bash
# Interop: the official Python MCP SDK (PyPI `mcp`) against `forkscope serve`, under both
# policies; then its `Client` in mode="auto" against each `--protocol`, which must negotiate
# 2026-07-28 where the server offers it and 2025-11-25 where it does not. Each run starts the
# server on a free loopback port, runs a client through interop/python/run.sh, and stops it.
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
# Starts `forkscope serve ARGS…` on a free port; sets PID and URL, or fails the run.
start_serve() {
    local log="$1"
    shift
    spawn "$BIN" serve --port 0 "$@" >"$log" 2>"$log.err" </dev/null
    PID="$SPAWNED"
    URL=""
    for _ in $(seq 1 $((START_TIMEOUT * 10))); do
        URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$log" | head -n1 || true)"
        [[ -n "$URL" ]] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z "$URL" ]]; then
        echo "forkscope serve did not start:" >&2; cat "$log" "$log.err" >&2
        exit 1
    fi
}

for policy in fenced naive; do
    log="$WORK/$policy.out"
    start_serve "$log" --policy "$policy" --emit-every 200
    echo "== python SDK against forkscope serve --policy $policy ($URL)"
    if ! run_bounded "$CLIENT_TIMEOUT" "$ROOT/interop/python/run.sh" "$URL" --steps 5; then
        status=1
        echo "--- server log" >&2; tail -n 40 "$log.err" >&2
    fi
    stop "$PID"
done

# The SDK's `Client` in its default mode="auto" negotiates the revision the server offers:
# 2026-07-28 where it is offered (both revisions on one endpoint, or it alone), else the
# initialize handshake of 2025-11-25.
for protocol in both 2025-11-25 2026-07-28; do
    expect=2026-07-28
    [[ "$protocol" == 2025-11-25 ]] && expect=2025-11-25
    log="$WORK/auto-$protocol.out"
    start_serve "$log" --protocol "$protocol"
    echo "== python SDK Client(mode=\"auto\") against forkscope serve --protocol $protocol ($URL)"
    if ! run_bounded "$CLIENT_TIMEOUT" "$ROOT/interop/python/run.sh" --client auto_client.py "$URL" --expect "$expect"; then
        status=1
        echo "--- server log" >&2; tail -n 40 "$log.err" >&2
    fi
    stop "$PID"
done
exit "$status"
