#!/usr/bin/env bash
# Interop: stock official SDK clients — Python `mcp` (PyPI) and TypeScript
# `@modelcontextprotocol/sdk` (npm) — resume an interrupted tool call and an interrupted
# standalone GET stream against `forkscope serve`, through `forkscope proxy`'s NAT drop; and the
# Rust SDK's client (crates.io `rmcp`, in its 2026-07-28 mode) re-issues a task call whose
# `CreateTaskResult` the break lost, under the same idempotency key.
#
# Usage: interop/check-sdk-clients.sh [path/to/forkscope]
#
# For each policy (fenced, naive), each case (tool: a progress_task call cut at progress 10;
# stream: the standalone GET stream cut after 5 background emits; task: rmcp only, a 2026-07-28
# task call of progress_task whose answer the proxy holds and then drops) and each SDK, it starts
#   forkscope serve --port 0 --policy P --emit-every 0|50 --grace-ms 1000 [--identity event-id]
#   forkscope proxy --to 127.0.0.1:PORT --port 0        (stdin: a fifo the client writes `drop` to)
# runs the SDK's client against the proxy, and stops both. Every wait is bounded.
#   fenced: the SDK's own Last-Event-ID resume delivers everything exactly once.
#   naive:  the damage must show ("damage seen (expected under naive)" lines count as passes;
#           if naive stops damaging, those checks fail).
#   task:   the client's own checks hold under both; the server's checker verdict (it is stopped
#           with SIGINT) must be clean with each step applied once under fenced, and name the
#           double effect and the orphan task under naive.
# Prints one line per check and ends with `sdk interop: N passed, N failed`; exit 0 iff every
# expected check held, 1 otherwise, 2 when it cannot run (no binary, no python3/node/npm).
#
# Environment: SDK_INTEROP_SDKS="python typescript rmcp", SDK_INTEROP_POLICIES="fenced naive",
# SDK_INTEROP_CASES="tool stream task" narrow a run; FORKSCOPE_VENV moves the venv
# (default target/interop-venv); FORKSCOPE_INSTALL_TIMEOUT bounds pip and npm (s, default 600).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INTEROP="$ROOT/interop"
BIN="${1:-$ROOT/target/release/forkscope}"
SDKS="${SDK_INTEROP_SDKS:-python typescript rmcp}"
POLICIES="${SDK_INTEROP_POLICIES:-fenced naive}"
CASES="${SDK_INTEROP_CASES:-tool stream task}"
START_TIMEOUT=15   # s: a server or proxy that has not printed its address by then failed
CLIENT_TIMEOUT=90  # s: one client run (each client bounds itself at 40 s)
STOP_TIMEOUT=5     # s: per signal when stopping a process (its signal, then TERM, then KILL)
# Checks each client prints for one case.
expected_checks() { [[ "$1" == task ]] && echo 4 || echo 5; }
# Which SDK plays which case: the Python and TypeScript clients resume 2025-11-25 streams; the
# rmcp client makes the 2026-07-28 task call.
plays() { # case sdk
    case "$2" in
        rmcp) [[ "$1" == task ]] ;;
        *) [[ "$1" != task ]] ;;
    esac
}

die() { echo "check-sdk-clients: $*" >&2; exit 2; }
[[ -x "$BIN" ]] || die "no forkscope binary at $BIN (cargo build --release first)"
for tool in python3 node npm mkfifo timeout sha256sum; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

# ---- processes: every one started is tracked and stopped, whatever happens ------------------
# By PID, with whatever it started, on a normal end, a failure, INT/TERM/HUP and a client past
# its timeout; the client first, the server last (see .ci/processes.sh).
PROCS_STOP_TIMEOUT="$STOP_TIMEOUT"
# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-sdk-interop.XXXXXX")"
CTL_FD=""

close_ctl() {
    if [[ -n "$CTL_FD" ]]; then
        exec {CTL_FD}>&-
        CTL_FD=""
    fi
}
at_exit 'close_ctl; rm -rf "$WORK"'

# ---- bookkeeping -----------------------------------------------------------------------------
PASSED=0
FAILED=0
say() { printf '%s\n' "$*"; }
pass() { PASSED=$((PASSED + 1)); say "$1: PASS $2"; }
fail() { FAILED=$((FAILED + 1)); say "$1: FAIL $2"; }

# Waits (bounded) for a line matching REGEX in FILE while PID lives; prints the match.
wait_for_line() {
    local file="$1" regex="$2" pid="$3" i line
    for ((i = 0; i < START_TIMEOUT * 20; i++)); do
        line="$(grep -E -o -m1 "$regex" "$file" 2>/dev/null || true)"
        if [[ -n "$line" ]]; then
            printf '%s\n' "$line"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# ---- dependencies ----------------------------------------------------------------------------
# Waited for in the background (each bounds its installs), so a signal stops them at once.
run_bounded 0 "$INTEROP/python/ensure-venv.sh" >"$WORK/python-path" ||
    die "could not set up the Python venv"
PYTHON="$(<"$WORK/python-path")"
PY_SDK="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || echo '?')"

TS_DIR="$INTEROP/typescript"
run_bounded 0 "$TS_DIR/ensure-sdk.sh" || die "npm ci failed in $TS_DIR"
TS_SDK="$(node -e 'console.log(require(process.argv[1]).version)' "$TS_DIR/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null || echo '?')"

RMCP_CLIENT=""
if [[ " $SDKS " == *" rmcp "* && " $CASES " == *" task "* ]]; then
    run_bounded 0 "$INTEROP/rmcp/ensure-server.sh" >"$WORK/rmcp-path" || die "could not build interop/rmcp"
    RMCP_CLIENT="$(dirname "$(<"$WORK/rmcp-path")")/forkscope-rmcp-task-client"
    [[ -x "$RMCP_CLIENT" ]] || die "interop/rmcp built no task client at $RMCP_CLIENT"
fi

say "== versions: forkscope $("$BIN" --version 2>/dev/null | awk '{print $2}'), python mcp $PY_SDK, typescript @modelcontextprotocol/sdk $TS_SDK, rmcp 3.11.0 (interop/rmcp/Cargo.toml), node $(node --version)"

# ---- one run: a server, a proxy, one SDK client, one case ------------------------------------
SERVER_PID=""
PROXY_PID=""

start_lab() { # policy case run-dir; sets SERVER_PID PROXY_PID PROXY_URL or returns 1
    local policy="$1" case="$2" dir="$3" emit=0 addr url extra=()
    [[ "$case" == stream ]] && emit=50
    [[ "$policy" == fenced ]] && extra=(--identity event-id)
    spawn "$BIN" serve --port 0 --policy "$policy" --emit-every "$emit" --grace-ms 1000 "${extra[@]}" \
        >"$dir/serve.out" 2>"$dir/serve.err" </dev/null
    SERVER_PID="$SPAWNED"
    url="$(wait_for_line "$dir/serve.out" 'http://127\.0\.0\.1:[0-9]+/mcp' "$SERVER_PID")" || {
        echo "--- forkscope serve did not start:" >&2
        cat "$dir/serve.out" "$dir/serve.err" >&2
        return 1
    }
    addr="${url#http://}"
    addr="${addr%/mcp}"

    mkfifo "$dir/proxy.ctl"
    # Held open read-write by this shell, so a client opening the fifo to write `drop` never
    # blocks, and the proxy sees EOF (and stops) only when close_ctl closes it.
    exec {CTL_FD}<>"$dir/proxy.ctl"
    spawn --close "$CTL_FD" "$BIN" proxy --to "$addr" --port 0 <"$dir/proxy.ctl" >"$dir/proxy.out" 2>"$dir/proxy.err"
    PROXY_PID="$SPAWNED"
    local line
    line="$(wait_for_line "$dir/proxy.out" 'forkscope proxy: 127\.0\.0\.1:[0-9]+' "$PROXY_PID")" || {
        echo "--- forkscope proxy did not start:" >&2
        cat "$dir/proxy.out" "$dir/proxy.err" >&2
        return 1
    }
    PROXY_URL="http://${line#forkscope proxy: }/mcp"
    return 0
}

# The server's own account of a task case, from its checker's verdict: fenced must be clean with
# every step applied once and one task made; naive must show the double effect and the orphan.
judge_task_verdict() { # policy label verdict-line
    local policy="$1" label="$2" verdict="$3"
    if [[ "$policy" == fenced ]]; then
        if [[ "$verdict" == *"checker verdict: clean"* && "$verdict" == *"each once, 1 task made"* ]]; then
            pass "$label" "one effect: the server's checker is clean, each step applied once, one task made"
        else
            fail "$label" "one effect: the server's checker is clean, each step applied once, one task made (${verdict:-no verdict})"
        fi
    elif [[ "$verdict" == *effect_twice* && "$verdict" == *orphan_task* ]]; then
        pass "$label" "damage seen (expected under naive): the server's checker names effect_twice and orphan_task"
    else
        fail "$label" "damage seen (expected under naive): effect_twice and orphan_task (${verdict:-no verdict})"
    fi
}

stop_lab() { # run-dir label [policy case]
    local dir="$1" label="$2" verdict
    close_ctl
    [[ -n "$PROXY_PID" ]] && stop "$PROXY_PID"
    # SIGINT: forkscope serve then prints its checker's verdict on what it served.
    [[ -n "$SERVER_PID" ]] && stop "$SERVER_PID" INT
    if grep -q 'panicked' "$dir/serve.err" "$dir/proxy.err" 2>/dev/null; then
        fail "$label" "forkscope did not panic: $(grep -h -m1 'panicked' "$dir/serve.err" "$dir/proxy.err")"
    fi
    verdict="$(grep -h -m1 'checker verdict' "$dir/serve.out" 2>/dev/null || true)"
    [[ -n "$verdict" ]] && say "$label: note: server ${verdict#forkscope serve: }"
    [[ "${4:-}" == task ]] && judge_task_verdict "$3" "$label" "$verdict"
    SERVER_PID=""
    PROXY_PID=""
}

run_case() { # policy case sdk
    local policy="$1" case="$2" sdk="$3"
    local label="$policy $sdk $case" dir="$WORK/$policy-$case-$sdk" rc=0 checks=0 bad=0 line
    mkdir -p "$dir"
    if ! start_lab "$policy" "$case" "$dir"; then
        fail "$label" "lab started (serve + proxy): see the log above"
        stop_lab "$dir" "$label"
        return
    fi
    say "== $label: $PROXY_URL -> forkscope serve --policy $policy"
    local args=("$PROXY_URL" --case "$case" --policy "$policy" --proxy-ctl "$dir/proxy.ctl" --proxy-out "$dir/proxy.out")
    local client=()
    case "$sdk" in
        python) client=("$PYTHON" "$INTEROP/python/resume_client.py") ;;
        typescript) client=(node "$TS_DIR/resume_client.mjs") ;;
        rmcp)
            client=("$RMCP_CLIENT")
            args=("$PROXY_URL" --proxy-ctl "$dir/proxy.ctl" --proxy-out "$dir/proxy.out" --steps 5 --delay-ms 100)
            ;;
        *) fail "$label" "known SDK: $sdk"; stop_lab "$dir" "$label"; return ;;
    esac
    # In the background and waited for, so a signal to this script is handled at once (the
    # trap stops the client too); `timeout` bounds it.
    run_bounded "$CLIENT_TIMEOUT" --close "$CTL_FD" "${client[@]}" "${args[@]}" \
        >"$dir/client.out" 2>"$dir/client.err" </dev/null || rc=$?
    while IFS= read -r line; do
        case "$line" in
            "PASS "*) checks=$((checks + 1)); pass "$label" "${line#PASS }" ;;
            "FAIL "*) checks=$((checks + 1)); bad=$((bad + 1)); fail "$label" "${line#FAIL }" ;;
            "note: "*) say "$label: $line" ;;
        esac
    done <"$dir/client.out"
    if ((rc == 124 || rc == 137)); then
        fail "$label" "client finished within ${CLIENT_TIMEOUT}s: killed by timeout"
    elif ((rc != 0 && bad == 0)); then
        fail "$label" "client exited 0: exit status $rc"
    elif ((bad == 0 && checks != $(expected_checks "$case"))); then
        fail "$label" "client ran all $(expected_checks "$case") checks: saw $checks"
    fi
    if ((rc != 0)); then
        {
            echo "--- $label: client stderr (tail)"
            tail -n 20 "$dir/client.err"
            echo "--- $label: server stderr (tail)"
            tail -n 20 "$dir/serve.err" | sed 's/\x1b\[[0-9;]*m//g'
        } >&2
    fi
    stop_lab "$dir" "$label" "$policy" "$case"
}

for policy in $POLICIES; do
    for case in $CASES; do
        for sdk in $SDKS; do
            plays "$case" "$sdk" || continue
            run_case "$policy" "$case" "$sdk"
        done
    done
done

say "sdk interop: $PASSED passed, $FAILED failed"
((FAILED == 0 && PASSED > 0))
