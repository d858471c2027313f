#!/usr/bin/env bash
# Interop: `forkscope probe` against FastMCP with its tasks extension (PyPI `fastmcp-tasks`, the
# task runtime on Docket, pinned in interop/fastmcp/requirements.txt), the server
# interop/fastmcp/probe_server.py, on its in-memory backend as users start it first:
#   two processes behind `forkscope balance` round robin (no session affinity), each keeping its
#   own sessions and tasks. The probe must find what a client meets there, and say it:
#     call-resume        VIOLATED session_per_process (initialize answered, the next request 404);
#     task-get-repeated  VIOLATED unknown_on_some_reads (a task unknown where a read lands);
#   exit 1, and `--format junit` gives a JUnit report with those two testcases failed.
# Every wait is bounded; every process started is stopped by its PID on every way out (see
# .ci/processes.sh).
#
# Usage: interop/check-fastmcp.sh [path/to/forkscope]
# Exit: 0 the findings are as above, 1 they are not, 2 cannot run.
# Environment: FORKSCOPE_FASTMCP_VENV, FORKSCOPE_INSTALL_TIMEOUT as for the other interop checks.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
START_TIMEOUT=30     # s: a server not answering by then failed to start (FastMCP imports ~2 s)
PROBE_TIMEOUT=120    # s: the probe run (it bounds every read itself)
VERSION="4.1.4"      # the fastmcp-tasks the findings were written down for

die() { echo "check-fastmcp: $*" >&2; exit 2; }
[[ -x "$BIN" ]] || die "no forkscope binary at $BIN (cargo build --release first)"
for tool in python3 curl timeout; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-fastmcp.XXXXXX")"
at_exit 'rm -rf "$WORK"'

run_bounded 0 "$ROOT/interop/fastmcp/ensure-venv.sh" >"$WORK/python-path" ||
    die "could not set up the FastMCP venv"
PYTHON="$(<"$WORK/python-path")"
have="$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("fastmcp-tasks"))')"
[[ "$have" == "$VERSION" ]] || die "fastmcp-tasks $have installed, the findings are for $VERSION"
echo "== versions: fastmcp-tasks $have, fastmcp-slim $("$PYTHON" -c 'import importlib.metadata as m; print(m.version("fastmcp-slim"))')"

free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts a FastMCP process on a free port; sets UPSTREAM to its base URL, or fails. Not run in
# a command substitution: a subshell's spawn would be a process this script cannot stop.
start_fastmcp() {
    local name="$1" port pid
    port="$(free_port)"
    spawn "$PYTHON" "$ROOT/interop/fastmcp/probe_server.py" --port "$port" --backend memory \
        >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null
    pid="$SPAWNED"
    for _ in $(seq $((START_TIMEOUT * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        if curl -s -o /dev/null -m 1 "http://127.0.0.1:$port/mcp"; then
            UPSTREAM="http://127.0.0.1:$port"
            return 0
        fi
        sleep 0.1
    done
    echo "--- FastMCP $name did not start:" >&2
    cat "$WORK/$name.out" "$WORK/$name.err" >&2
    return 1
}

start_fastmcp a || exit 1
A="$UPSTREAM"
start_fastmcp b || exit 1
B="$UPSTREAM"
# The balancer reads commands from standard input; /dev/null leaves it as it starts.
spawn "$BIN" balance --port 0 --upstream "$A" --upstream "$B" >"$WORK/balance.out" 2>"$WORK/balance.err" </dev/null
BALANCE_PID="$SPAWNED"
URL=""
for _ in $(seq $((START_TIMEOUT * 10))); do
    URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/balance.out" | head -n1 || true)"
    [[ -n "$URL" ]] && break
    kill -0 "$BALANCE_PID" 2>/dev/null || break
    sleep 0.1
done
[[ -n "$URL" ]] || { cat "$WORK/balance.out" "$WORK/balance.err" >&2; die "forkscope balance did not start"; }
URL="$URL/mcp"
echo "== two FastMCP processes ($A, $B), memory backend, behind forkscope balance round robin at $URL"

rc=0
run_bounded "$PROBE_TIMEOUT" "$BIN" probe "$URL" --only call-resume,task-get-repeated --format junit \
    >"$WORK/junit.xml" 2>"$WORK/probe.err" || rc=$?
if [[ $rc -ne 1 ]]; then
    echo "check-fastmcp: the probe exited $rc; a violation found is exit 1" >&2
    cat "$WORK/junit.xml" "$WORK/probe.err" >&2
    exit 1
fi
"$PYTHON" - "$WORK/junit.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
cases = {c.get("name"): c for c in root.iter("testcase")}
want = {"call-resume": "session_per_process", "task-get-repeated": "unknown_on_some_reads"}
problems = []
if set(cases) != set(want):
    problems.append(f"testcases {sorted(cases)}, expected {sorted(want)}")
for name, verdict in want.items():
    failure = cases.get(name).find("failure") if name in cases else None
    found = failure.get("type") if failure is not None else "no failure"
    print(f"  {name}: {found}" + (f" ({failure.get('message')})" if failure is not None else ""))
    if found != verdict:
        problems.append(f"{name}: expected a failure of type {verdict}, found {found}")
if root.get("failures") != "2":
    problems.append(f"testsuites failures={root.get('failures')}, expected 2")
for p in problems:
    print(f"check-fastmcp: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
