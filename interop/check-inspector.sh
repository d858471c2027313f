#!/usr/bin/env bash
# Interop: the MCP Inspector's CLI (npm `@modelcontextprotocol/inspector`, pinned in
# interop/inspector), the debugging client MCP users reach for first, against `forkscope serve`
# as users start it: both revisions on one endpoint (the default), and 2025-11-25 alone. The
# Inspector speaks 2025-11-25 (its `initialize`), and sets the server's log level on connect when
# the server declares `logging`, so every command below passes through `logging/setLevel` too.
# Each must succeed: `tools/list` names progress_task, `tools/call progress_task` returns its
# result, `logging/setLevel` is answered. Every process started is stopped by its PID on every
# way out (see .ci/processes.sh).
# Usage: interop/check-inspector.sh [path/to/forkscope]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
[[ -x "$BIN" ]] || { echo "no forkscope binary at $BIN (cargo build --release first)" >&2; exit 2; }
START_TIMEOUT=10   # s: a server that has not printed its address by then failed
CALL_TIMEOUT=60    # s: one Inspector command

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-inspector.XXXXXX")"
at_exit 'rm -rf "$WORK"'
run_bounded 0 "$ROOT/interop/inspector/ensure-inspector.sh" >/dev/null
INSPECTOR="$ROOT/interop/inspector/node_modules/.bin/mcp-inspector"
echo "== MCP Inspector $(node -e 'console.log(require(process.argv[1]).version)' "$ROOT/interop/inspector/node_modules/@modelcontextprotocol/inspector/package.json"), node $(node --version)"

# Runs the Inspector's CLI; its stdout must match the regex $1.
inspect() {
    local want="$1" out="$WORK/out.json"
    shift
    # Its catalog goes to the scratch folder, not ~/.mcp-inspector.
    if MCP_CATALOG_PATH="$WORK/catalog.json" run_bounded "$CALL_TIMEOUT" "$INSPECTOR" --cli "$URL" "$@" >"$out" 2>"$out.err" \
        && grep -Eq "$want" "$out"; then
        echo "PASS $* against serve --protocol $protocol"
    else
        status=1
        echo "FAIL $* against serve --protocol $protocol" >&2
        cat "$out" "$out.err" >&2
    fi
}

status=0
for protocol in both 2025-11-25; do
    log="$WORK/serve-$protocol.out"
    spawn "$BIN" serve --port 0 --protocol "$protocol" >"$log" 2>"$log.err" </dev/null
    pid="$SPAWNED"
    URL=""
    for _ in $(seq 1 $((START_TIMEOUT * 10))); do
        URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$log" | head -n1 || true)"
        [[ -n "$URL" ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n "$URL" ]] || { echo "forkscope serve --protocol $protocol did not start:" >&2; cat "$log" "$log.err" >&2; exit 1; }
    inspect '"name": "progress_task"' --method tools/list
    inspect '"text": "done: 3 steps"' --method tools/call --tool-name progress_task --tool-arg steps=3 --tool-arg delay_ms=10
    inspect '^\{\}$' --method logging/setLevel --log-level warning
    stop "$pid"
done
exit "$status"
