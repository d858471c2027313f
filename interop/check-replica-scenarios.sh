#!/usr/bin/env bash
# Every shipped replica scenario (scenarios/replicas-*.toml), headless, both policies, RUNS times
# on each store: the in-memory one, and a real redis-server started on a free 127.0.0.1 port
# (.ci/services.sh) and stopped by its PID on every way out. A scenario's verdict must be the
# same on every run: each `forkscope run` pass must exit 0.
#
# Usage: interop/check-replica-scenarios.sh [path/to/forkscope]
# Prints a PASS/FAIL line per pass and ends with `check-replica-scenarios: N passed, N failed`.
# Exit: 0 every pass held, 1 one did not, 2 cannot run (no binary, redis-server missing).
# Environment: RUNS (default 5), REPLICA_STORES="memory redis" (the stores tried).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
RUNS="${RUNS:-5}"
STORES="${REPLICA_STORES-memory redis}"
RUN_TIMEOUT=300 # s: one pass over every replica scenario, both policies

die() { echo "check-replica-scenarios: $*" >&2; exit 2; }
[[ -x "$BIN" ]] || die "no forkscope binary at $BIN (cargo build --release first)"
command -v timeout >/dev/null || die "timeout is needed"
shopt -s nullglob
FILES=("$ROOT"/scenarios/replicas-*.toml)
((${#FILES[@]})) || die "no scenarios/replicas-*.toml"

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
# shellcheck source=../.ci/services.sh
source "$ROOT/.ci/services.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-replica-scenarios.XXXXXX")"
at_exit 'rm -rf "$WORK"'

passed=0
failed=0
for store in $STORES; do
    case "$store" in
        memory) url=memory ;;
        redis)
            command -v redis-server >/dev/null || die "redis-server is needed"
            start_redis || die "redis-server did not start"
            url="$REDIS_URL"
            ;;
        *) die "unknown store $store (memory or redis)" ;;
    esac
    for ((run = 1; run <= RUNS; run++)); do
        out="$WORK/$store-$run.out"
        # In the background and waited for: a signal to this script stops it at once.
        if run_bounded "$RUN_TIMEOUT" "$BIN" run --store "$url" "${FILES[@]}" >"$out" 2>&1; then
            passed=$((passed + 1))
            echo "PASS $store run $run: $(grep -c '^  PASS' "$out") policy runs passed"
        else
            failed=$((failed + 1))
            echo "FAIL $store run $run"
            grep -E '^(scenarios|  FAIL|        )' "$out" | head -40
        fi
    done
done
echo "check-replica-scenarios: $passed passed, $failed failed"
((failed == 0 && passed > 0))
