#!/usr/bin/env bash
# Every script .ci/run calls ends what it starts, on every way out: a normal end, a failure,
# and INT, TERM or HUP midway. Each run here carries a marker in its environment, which every
# process it starts inherits (reparented to PID 1 or not); once the script has exited, no live
# process may still carry it.
#
# The forkscope it hands the scripts is a wrapper that runs the real binary as its child, the
# way a launcher runs node or python: stopping the wrapper's PID alone leaves the server.
# LEAKS_FAIL_PROBE makes its `probe` fail, for the failure path; LEAKS_HANG_PROBE makes it hang,
# deaf to TERM, for the timeout path.
#
# Usage: tests/ci/leaks.sh [path/to/forkscope]    (needs what the interop scripts need)
# Environment: LEAKS_CASES narrows the run to cases whose name contains one of its words.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REAL_BIN="$(realpath "${1:-$ROOT/target/release/forkscope}")"
[[ -x "$REAL_BIN" ]] || { echo "leaks: no forkscope binary at $REAL_BIN" >&2; exit 2; }
# shellcheck source=../../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
WAIT_FOR_START=180 # s: until the process to interrupt is up (a first run installs the SDKs)
WAIT_FOR_EXIT=60   # s: a script has this long to clean up and exit after a signal

WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-leaks.XXXXXX")"
at_exit 'rm -rf "$WORK"'
BIN="$WORK/forkscope"
cat >"$BIN" <<EOF
#!/usr/bin/env bash
if [[ "\${1:-}" == probe && -n "\${LEAKS_FAIL_PROBE:-}" ]]; then
    echo "forkscope (wrapper): probe fails on purpose" >&2
    exit 3
fi
if [[ "\${1:-}" == probe && -n "\${LEAKS_HANG_PROBE:-}" ]]; then
    trap '' TERM
    sleep 600
fi
"$REAL_BIN" "\$@"
EOF
chmod +x "$BIN"

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# The command line of PID, spaces for NULs; empty once it is gone.
cmdline() {
    local args
    { mapfile -d '' -t args <"/proc/$1/cmdline"; } 2>/dev/null || return 0
    printf '%s' "${args[*]}"
}

# True when a live process carrying MARK has a command line matching REGEX.
started() {
    local mark="$1" regex="$2" pid
    while read -r pid; do
        [[ "$(cmdline "$pid")" =~ $regex ]] && return 0
    done < <(procs_marked "LEAKS_MARK=$mark")
    return 1
}

# After a run has exited: nothing carrying its mark lives on. Stops what does, and fails.
nothing_left() {
    local name="$1" mark="$2" left pid
    mapfile -t left < <(procs_marked "LEAKS_MARK=$mark")
    if ((${#left[@]} == 0)); then
        pass "$name: nothing left running"
        return
    fi
    fail "$name: ${#left[@]} process(es) left running:"
    for pid in "${left[@]}"; do
        echo "    $pid (parent $(ps -o ppid= -p "$pid" | tr -d ' ')): $(cmdline "$pid")"
    done
    for pid in "${left[@]}"; do stop_tree "$pid"; done
}

# run_to_end NAME EXPECTED_EXIT [ENV=VALUE…] -- SCRIPT [ARGS…]: runs SCRIPT to its end.
run_to_end() {
    local name="$1" want="$2" mark="leaks-$$-$RANDOM" envs=() rc=0
    shift 2
    while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
    shift
    wanted "$name" || return 0
    echo "== $name"
    spawn env "LEAKS_MARK=$mark" "${envs[@]}" bash "$@" >"$WORK/$name.log" 2>&1
    wait "$SPAWNED" || rc=$?
    forget "$SPAWNED"
    if [[ "$rc" == "$want" ]]; then
        pass "$name: exit $rc"
    else
        fail "$name: exit $rc, expected $want"
        tail -n 20 "$WORK/$name.log" | sed 's/^/    /'
    fi
    nothing_left "$name" "$mark"
}

# interrupt NAME SIGNAL REGEX [ENV=VALUE…] -- SCRIPT [ARGS…]: starts SCRIPT, sends it SIGNAL
# once a process of the run whose command line matches REGEX is up, and checks the aftermath.
interrupt() {
    local name="$1" sig="$2" regex="$3" mark="leaks-$$-$RANDOM" envs=() pid i
    shift 3
    while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
    shift
    wanted "$name" || return 0
    echo "== $name"
    # Job control on: the script starts as a terminal would start it, INT not ignored.
    set -m
    spawn env "LEAKS_MARK=$mark" "${envs[@]}" bash "$@" >"$WORK/$name.log" 2>&1
    set +m
    pid="$SPAWNED"
    for ((i = 0; i < WAIT_FOR_START * 10; i++)); do
        started "$mark" "$regex" && break
        procs_alive "$pid" || break
        sleep 0.1
    done
    if ! started "$mark" "$regex"; then
        fail "$name: /$regex/ never started"
        tail -n 20 "$WORK/$name.log" | sed 's/^/    /'
        stop "$pid"
        nothing_left "$name" "$mark"
        return
    fi
    kill -"$sig" "$pid"
    for ((i = 0; i < WAIT_FOR_EXIT * 10; i++)); do
        procs_alive "$pid" || break
        sleep 0.1
    done
    if procs_alive "$pid"; then
        fail "$name: still running ${WAIT_FOR_EXIT}s after SIG$sig"
        stop "$pid"
    else
        wait "$pid" 2>/dev/null
        forget "$pid"
        pass "$name: exited on SIG$sig"
    fi
    nothing_left "$name" "$mark"
}

wanted() {
    local word
    [[ -z "${LEAKS_CASES:-}" ]] && return 0
    for word in $LEAKS_CASES; do
        [[ "$1" == *"$word"* ]] && return 0
    done
    return 1
}

PROBE="$ROOT/interop/check-probe.sh"
run_to_end probe-normal 0 PROBE_SERVERS=fenced -- "$PROBE" "$BIN"
run_to_end probe-failure 1 PROBE_SERVERS=fenced LEAKS_FAIL_PROBE=1 -- "$PROBE" "$BIN"
run_to_end probe-timeout 1 PROBE_SERVERS=fenced LEAKS_HANG_PROBE=1 PROBE_TIMEOUT=2 -- "$PROBE" "$BIN"
interrupt probe-term TERM 'forkscope serve' PROBE_SERVERS=fenced -- "$PROBE" "$BIN"
interrupt probe-int INT 'probe_server\.mjs' PROBE_SERVERS=typescript -- "$PROBE" "$BIN"
interrupt probe-hup HUP 'probe_server\.py' PROBE_SERVERS=python -- "$PROBE" "$BIN"
interrupt probe-rmcp-term TERM 'forkscope-probe-rmcp --port' PROBE_SERVERS=rmcp -- "$PROBE" "$BIN"
interrupt python-sdk-term TERM 'stock_client\.py' -- "$ROOT/interop/check-python-sdk.sh" "$BIN"
interrupt sdk-clients-int INT 'resume_client\.mjs' SDK_INTEROP_SDKS=typescript \
    -- "$ROOT/interop/check-sdk-clients.sh" "$BIN"
interrupt sdk-clients-term TERM 'resume_client\.py' SDK_INTEROP_SDKS=python \
    -- "$ROOT/interop/check-sdk-clients.sh" "$BIN"
interrupt fastmcp-term TERM 'forkscope balance' -- "$ROOT/interop/check-fastmcp.sh" "$BIN"
interrupt faults-term TERM 'forkscope probe ' -- "$ROOT/interop/check-faults.sh" "$BIN"
REPLICAS="$ROOT/interop/check-replicas.sh"
run_to_end replicas-failure 1 REPLICAS_POLICIES=fenced REPLICAS_BALANCERS=balance REPLICAS_SDKS= \
    LEAKS_FAIL_PROBE=1 -- "$REPLICAS" "$BIN"
interrupt replicas-term TERM 'forkscope probe ' REPLICAS_POLICIES=fenced REPLICAS_BALANCERS=haproxy \
    REPLICAS_SDKS= -- "$REPLICAS" "$BIN"
interrupt replicas-int INT 'resume_client\.py' REPLICAS_POLICIES= REPLICAS_SDKS=python -- "$REPLICAS" "$BIN"
interrupt replica-scenarios-term TERM 'forkscope run --store redis' RUNS=1 REPLICA_STORES=redis \
    -- "$ROOT/interop/check-replica-scenarios.sh" "$BIN"
interrupt tmux-term TERM 'forkscope$' -- "$ROOT/tests/tmux/dashboard.sh" "$BIN"
interrupt tmux-hup HUP 'probe .*--watch' -- "$ROOT/tests/tmux/dashboard.sh" "$BIN"

echo "ci leaks: $passed passed, $failed failed"
((failed == 0 && passed > 0))
