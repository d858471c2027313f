#!/usr/bin/env bash
# Interop: `forkscope probe`'s fault cases (task-survives-restart, task-runner-killed,
# task-runner-paused), with the faults given as commands, as a user gives them, and the side
# effects counted from a file (`--effects-cmd 'wc -l < FILE'`), against two task runtimes that
# keep tasks on a real redis-server, each as two processes behind `forkscope balance`:
#   FastMCP with fastmcp-tasks (Docket; redelivery after 2 s)   VIOLATED ran_again: a killed or
#       stalled worker's task is run again from its start (at least once), a restarted one too;
#   forkscope serve, fenced replicas                             every case holds: a task
#       whose runner died or stalled is adopted on a read and goes on from its last step.
# The commands are small scripts this check writes (`ctl`): a restart stops both processes and
# starts them again on their ports; a kill or a pause aims at the process running the task (for
# FastMCP, the pid on the task's last effect line; for serve, the replica that logged the task's
# creation). The balancer gives up on a silent upstream after 500 ms, so reads reach the other.
# FastMCP's restart case is written down with both outcomes it gives (`ran_again`, and in about
# one run in four `survived_fault`: the restarted task read completed with one run's effects, not
# yet explained); its kill and pause cases gave `ran_again` in every run. A runtime whose
# findings differ from these is probed again once (as interop/check-probe.sh does for a race):
# serve's restart once counted 39 effects for 40 (a replica killed between a step's commit and
# its effect line); twice in a row fails the check.
# Every process is stopped on every way out: those this script spawns by PID, those the commands
# start by the PID files they write.
#
# Usage: interop/check-faults.sh [path/to/forkscope]
# Exit: 0 the findings are as above, 1 they are not, 2 cannot run.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/release/forkscope}"
PROBE_TIMEOUT=300 # s: one probe run of the three cases (each bounds its commands itself)
START_TIMEOUT=30  # s: a server not answering by then failed to start
CASES=task-survives-restart,task-runner-killed,task-runner-paused

die() { echo "check-faults: $*" >&2; exit 2; }
[[ -x "$BIN" ]] || die "no forkscope binary at $BIN (cargo build --release first)"
for tool in python3 curl timeout redis-cli; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
# shellcheck source=../.ci/services.sh
source "$ROOT/.ci/services.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-faults.XXXXXX")"
# What the fault commands started is stopped by its PID file (a stopped process too: KILL).
at_exit 'for f in "$WORK"/*.pid; do [[ -f "$f" ]] && kill -KILL "$(<"$f")" 2>/dev/null; done; rm -rf "$WORK"'

run_bounded 0 "$ROOT/interop/fastmcp/ensure-venv.sh" >"$WORK/python-path" ||
    die "could not set up the FastMCP venv"
PYTHON="$(<"$WORK/python-path")"
start_redis || die "redis-server did not start"

# ctl KIND: the fault commands' script for one runtime, its two processes on ports A and B.
write_ctl() {
    local kind="$1" port_a="$2" port_b="$3" ctl="$WORK/$1-ctl"
    cat >"$ctl" <<EOF
#!/usr/bin/env bash
# $ctl start|restart|runner SIGNAL: what the probe's fault flags run for $kind.
set -u
W="$WORK"; KIND="$kind"
start_one() {
    case "\$KIND" in
        fastmcp) "$PYTHON" "$ROOT/interop/fastmcp/probe_server.py" --port "\$2" --backend redis \\
                    --redis-url "${REDIS_URL}1" --effects "\$W/\$KIND.effects" --redelivery-timeout 2 \\
                    >>"\$W/\$KIND-\$1.log" 2>&1 </dev/null & ;;
        serve) "$BIN" serve --store "${REDIS_URL}2" --replica "\$1" --port "\$2" \\
                    --effects-file "\$W/\$KIND.effects" >>"\$W/\$KIND-\$1.out" 2>>"\$W/\$KIND-\$1.err" </dev/null & ;;
    esac
    echo \$! >"\$W/\$KIND-\$1.pid"
}
up() {
    local i
    for ((i = 0; i < $START_TIMEOUT * 10; i++)); do
        curl -s -o /dev/null -m 1 "http://127.0.0.1:\$1/mcp" && return 0
        sleep 0.1
    done
    return 1
}
stop_one() {
    local pid
    pid="\$(cat "\$W/\$KIND-\$1.pid" 2>/dev/null)" || return 0
    kill -KILL "\$pid" 2>/dev/null
    while kill -0 "\$pid" 2>/dev/null; do sleep 0.05; done
}
# The process running task \$FORKSCOPE_PROBE_TASK.
runner_pid() {
    case "\$KIND" in
        fastmcp) grep "task \$FORKSCOPE_PROBE_TASK " "\$W/\$KIND.effects" | tail -n 1 | sed -n 's/.* pid=\([0-9]*\) .*/\1/p' ;;
        serve) local r; for r in a b; do
                   grep -q "task created task=\${FORKSCOPE_PROBE_TASK:0:6}" "\$W/\$KIND-\$r.err" && cat "\$W/\$KIND-\$r.pid"
               done | head -n 1 ;;
    esac
}
case "\$1" in
    start | restart)
        stop_one a; stop_one b
        start_one a $port_a; start_one b $port_b
        up $port_a && up $port_b ;;
    runner)
        pid="\$(runner_pid)"
        [[ -n "\$pid" ]] || { echo "no process runs task \$FORKSCOPE_PROBE_TASK" >&2; exit 1; }
        kill -"\$2" "\$pid" ;;
esac
EOF
    chmod +x "$ctl"
}

# probe_runtime KIND: both processes started, the three cases probed; 0 the findings are KIND's.
probe_runtime() {
    local kind="$1" port_a port_b ctl balance_pid url rc want want_rc status=0
    port_a="$(free_port)"
    port_b="$(free_port)"
    # Each attempt starts from an empty store: FastMCP's queue in db 1, serve's records in db 2.
    redis-cli -p "$REDIS_PORT" -n "$([[ $kind == fastmcp ]] && echo 1 || echo 2)" flushdb >/dev/null
    write_ctl "$kind" "$port_a" "$port_b"
    ctl="$WORK/$kind-ctl"
    run_bounded 120 "$ctl" start || { cat "$WORK/$kind"-*.log "$WORK/$kind"-*.err 2>/dev/null >&2; die "$kind did not start"; }
    spawn "$BIN" balance --port 0 --head-timeout-ms 500 --upstream "http://127.0.0.1:$port_a" \
        --upstream "http://127.0.0.1:$port_b" >"$WORK/$kind-balance.out" 2>"$WORK/$kind-balance.err" </dev/null
    balance_pid="$SPAWNED"
    url=""
    for _ in $(seq $((START_TIMEOUT * 10))); do
        url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/$kind-balance.out" | head -n1 || true)"
        [[ -n "$url" ]] && break
        sleep 0.1
    done
    [[ -n "$url" ]] || die "forkscope balance did not start"
    echo "== $kind: two processes on redis-server (127.0.0.1:$port_a, :$port_b), behind forkscope balance at $url/mcp"
    rc=0
    run_bounded "$PROBE_TIMEOUT" "$BIN" probe "$url/mcp" --only "$CASES" --format json \
        --restart-cmd "$ctl restart" --kill-cmd "$ctl runner KILL" \
        --pause-cmd "$ctl runner STOP" --resume-cmd "$ctl runner CONT" --pause-ms 5000 \
        --effects-cmd "cat '$WORK/$kind.effects' 2>/dev/null | wc -l" >"$WORK/$kind.json" 2>"$WORK/$kind.probe.err" || rc=$?
    # FastMCP's restart case is written down with both outcomes it gives: in about one run in
    # four the restarted task read completed with one run's effects (not yet explained).
    case "$kind" in
        fastmcp) want="task-survives-restart=ran_again|survived_fault ran_again" want_rc=1 ;;
        serve) want=survived_fault want_rc=0 ;;
    esac
    if ! "$PYTHON" - "$WORK/$kind.json" "$want" <<'PY'; then
import json, sys
report = json.load(open(sys.argv[1]))
# "CASE=A|B ... DEFAULT": the verdicts a case may give; the last word for every other case.
words = sys.argv[2].split()
default = set(words[-1].split("|"))
per_case = {w.split("=")[0]: set(w.split("=")[1].split("|")) for w in words[:-1]}
bad = 0
for case in report["cases"]:
    print(f"  {case['case']}: {case['outcome']} {case.get('verdict')} — {case['says']}")
    for note in case.get("notes", []):
        print(f"      {note}")
    want = per_case.get(case["case"], default)
    if case.get("verdict") not in want:
        bad += 1
        print(f"check-faults: {case['case']}: expected {' or '.join(sorted(want))}, found {case.get('verdict')}: {case['why']}", file=sys.stderr)
sys.exit(1 if bad or len(report["cases"]) != 3 else 0)
PY
        status=1
    fi
    if [[ $rc -ne $want_rc ]]; then
        echo "check-faults: $kind: the probe exited $rc, expected $want_rc" >&2
        cat "$WORK/$kind.probe.err" >&2
        status=1
    fi
    stop "$balance_pid"
    for f in "$WORK/$kind"-?.pid; do kill -KILL "$(<"$f")" 2>/dev/null; done
    rm -f "$WORK/$kind".effects "$WORK/$kind"-*.pid
    return "$status"
}

FAILED=0
for kind in fastmcp serve; do
    if ! probe_runtime "$kind"; then
        echo "== $kind: the findings differ; probing again once"
        probe_runtime "$kind" || FAILED=1
    fi
done
exit "$FAILED"
