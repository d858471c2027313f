#!/usr/bin/env bash
# Interop: the official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
# interop/conformance) runs its 2025-11-25 server scenarios that apply to forkscope's one tool
# against `forkscope serve` as users start it: both revisions on one endpoint (`--protocol both`,
# the default), and 2025-11-25 alone. A scenario passes when the suite reports every check
# passed and none failed. Scenarios left out need tools, resources or prompts forkscope does not
# serve (`tools-call-image`, `resources-*`, …).
# Every process it starts is stopped by its PID on every way out (see .ci/processes.sh).
# Usage: interop/check-conformance.sh [path/to/forkscope]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
[[ -x "$BIN" ]] || { echo "no forkscope binary at $BIN (cargo build --release first)" >&2; exit 2; }
START_TIMEOUT=10     # s: a server that has not printed its address by then failed
SCENARIO_TIMEOUT=120 # s: one scenario, the suite already installed
SCENARIOS=(server-initialize logging-set-level ping tools-list server-sse-multiple-streams)

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-conformance.XXXXXX")"
at_exit 'rm -rf "$WORK"'
run_bounded 0 "$ROOT/interop/conformance/ensure-suite.sh" >/dev/null
SUITE="$ROOT/interop/conformance/node_modules/.bin/conformance"

status=0
for protocol in both 2025-11-25; do
    log="$WORK/serve-$protocol.out"
    spawn "$BIN" serve --port 0 --protocol "$protocol" --emit-every 0 >"$log" 2>"$log.err" </dev/null
    pid="$SPAWNED"
    url=""
    for _ in $(seq 1 $((START_TIMEOUT * 10))); do
        url="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$log" | head -n1 || true)"
        [[ -n "$url" ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z "$url" ]]; then
        echo "forkscope serve --protocol $protocol did not start:" >&2; cat "$log" "$log.err" >&2
        exit 1
    fi
    for scenario in "${SCENARIOS[@]}"; do
        out="$WORK/$protocol-$scenario.txt"
        # The suite writes its results under the current directory: the scratch one.
        if (cd "$WORK" && run_bounded "$SCENARIO_TIMEOUT" "$SUITE" server --url "$url" --scenario "$scenario") >"$out" 2>&1 \
            && grep -Eq '^Passed: ([1-9][0-9]*)/\1, 0 failed' "$out"; then
            echo "PASS $scenario against serve --protocol $protocol: $(grep -E '^Passed:' "$out")"
        else
            status=1
            echo "FAIL $scenario against serve --protocol $protocol" >&2
            tail -n 30 "$out" >&2
        fi
    done
    stop "$pid"
done
exit "$status"
