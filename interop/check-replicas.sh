#!/usr/bin/env bash
# Replicas of `forkscope serve` on a real redis-server, behind a load balancer with no
# stickiness, so consecutive requests of one MCP session land on different replicas:
#
#   probe    two replicas `a` and `b` (--emit-every 50), fenced and then naive, behind
#            `forkscope balance` (round robin) and behind HAProxy (.ci/haproxy.cfg.template):
#            `forkscope probe` exits 0 under fenced (every case holds) and 1 under naive (the
#            fork is caught). Each run has its own redis-server, replicas and balancer.
#   kill     the official Python and TypeScript SDK clients (interop/*/resume_client.*) call
#            progress_task through HAProxy on fenced replicas with --lease-ms 1000; at progress
#            10 the replica running the call is killed (SIGKILL). The SDK's own Last-Event-ID
#            resume reaches the survivor through HAProxy, which adopts the call once its lease
#            has expired: every check the client prints under fenced must hold (progress 1..25
#            once each, in order; the result once), and the survivor's log must say it adopted
#            the call. The Rust SDK's client (rmcp 3.11, in its 2026-07-28 mode:
#            interop/rmcp/src/bin/task_client.rs --break kill) calls progress_task as a task (20
#            steps, 100 ms apart); once answered, the replica running the task is killed. The
#            client polls tasks/get through HAProxy until the survivor, having adopted the task
#            when its lease ran out, answers with the result: the client's checks must hold, and
#            the survivor's log must say it adopted the task and never made one.
#
# The clients were written for `forkscope proxy`: they write `drop` into a fifo and wait for
# `ok drop N` in the proxy's output. Here nothing proxies: a small reader on the fifo answers
# `drop` by killing the replica whose log says `tool call started` (`task created` for rmcp's
# task), then writes `ok drop 1`.
#
# Usage: interop/check-replicas.sh [path/to/forkscope]
# Prints a PASS/FAIL line per check and ends with `check-replicas: N passed, N failed`.
# Exit: 0 every check held, 1 one did not, 2 cannot run (no binary, a tool missing).
# Environment (a run narrowed to nothing is left empty, not defaulted):
#   REPLICAS_POLICIES="fenced naive"     the probe runs' policies
#   REPLICAS_BALANCERS="balance haproxy" the balancers the probe runs through
#   REPLICAS_SDKS="python typescript rmcp" the SDK clients of the kill case
#   PROBE_TIMEOUT                        one probe run (s, default 240)
#   FORKSCOPE_VENV, FORKSCOPE_INSTALL_TIMEOUT as for the other interop checks.
# Every wait is bounded; every process started is stopped by its PID, with whatever it started,
# on every way out: a normal end, a failure, INT/TERM/HUP (see .ci/processes.sh).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INTEROP="$ROOT/interop"
BIN="${1:-$ROOT/target/release/forkscope}"
POLICIES="${REPLICAS_POLICIES-fenced naive}"
BALANCERS="${REPLICAS_BALANCERS-balance haproxy}"
SDKS="${REPLICAS_SDKS-python typescript rmcp}"
START_POLLS=150                       # polls 0.1 s apart for a replica or balancer to print its address
PROBE_TIMEOUT="${PROBE_TIMEOUT:-240}" # s: one probe run (it bounds every read itself)
CLIENT_TIMEOUT=90                     # s: one SDK client run (each bounds itself at 40 s)
LOG_POLLS=50                          # polls 0.1 s apart for a line a replica logs
LEASE_MS=1000                         # a killed replica's call is adoptable this long after its last step
STOP_TIMEOUT=5                        # s: per signal when stopping a process

die() { echo "check-replicas: $*" >&2; exit 2; }
[[ -x "$BIN" ]] || die "no forkscope binary at $BIN (cargo build --release first)"
for tool in python3 redis-cli mkfifo timeout ps; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done
if [[ -n "$SDKS" ]]; then
    for tool in node npm sha256sum; do
        command -v "$tool" >/dev/null || die "$tool is needed"
    done
fi

PROCS_STOP_TIMEOUT="$STOP_TIMEOUT"
# shellcheck source=../.ci/processes.sh
source "$ROOT/.ci/processes.sh"
# shellcheck source=../.ci/services.sh
source "$ROOT/.ci/services.sh"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-replicas.XXXXXX")"
CTL_FD=""
close_ctl() {
    if [[ -n "$CTL_FD" ]]; then
        exec {CTL_FD}>&-
        CTL_FD=""
    fi
}
at_exit 'close_ctl; rm -rf "$WORK"'

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() {
    echo "check-replicas: $passed passed, $failed failed"
    ((failed == 0 && passed > 0))
    exit
}

# ---- one lab: a fresh redis-server, replicas a and b, a balancer -------------------------------
declare -A REPLICA_PID=() REPLICA_ADDR=()
LAB_PIDS=() # started for the current lab, in order; stopped last first
LAB_DIR=""

# Waits (bounded) for a line matching REGEX in FILE while PID lives; prints the match.
wait_for_line() {
    local file="$1" regex="$2" pid="$3" i line
    for ((i = 0; i < START_POLLS; i++)); do
        line="$(grep -E -o -m1 "$regex" "$file" 2>/dev/null || true)"
        if [[ -n "$line" ]]; then
            printf '%s\n' "$line"
            return 0
        fi
        procs_alive "$pid" || return 1
        sleep 0.1
    done
    return 1
}

# start_replica NAME POLICY SERVE_ARGS…: sets REPLICA_PID[NAME], REPLICA_ADDR[NAME] (HOST:PORT).
start_replica() {
    local name="$1" policy="$2" url
    shift 2
    spawn "$BIN" serve --store "$REDIS_URL" --replica "$name" --policy "$policy" --port 0 "$@" \
        >"$LAB_DIR/$name.out" 2>"$LAB_DIR/$name.err" </dev/null
    REPLICA_PID[$name]="$SPAWNED"
    LAB_PIDS+=("$SPAWNED")
    url="$(wait_for_line "$LAB_DIR/$name.out" "replica $name at http://127\.0\.0\.1:[0-9]+/mcp" "$SPAWNED")" || {
        echo "--- replica $name did not start:" >&2
        cat "$LAB_DIR/$name.out" "$LAB_DIR/$name.err" >&2
        return 1
    }
    url="${url#*http://}"
    REPLICA_ADDR[$name]="${url%/mcp}"
}

# start_lab LABEL POLICY BALANCER SERVE_ARGS…: sets LAB_URL, the balancer's MCP endpoint.
start_lab() {
    local label="$1" policy="$2" balancer="$3" line
    shift 3
    LAB_DIR="$WORK/$label"
    mkdir -p "$LAB_DIR"
    LAB_PIDS=()
    start_redis || return 1
    LAB_PIDS+=("$REDIS_PID")
    start_replica a "$policy" "$@" || return 1
    start_replica b "$policy" "$@" || return 1
    case "$balancer" in
        balance)
            # It keeps serving after the end of its stdin; a signal stops it.
            spawn "$BIN" balance --port 0 --upstream "http://${REPLICA_ADDR[a]}" \
                --upstream "http://${REPLICA_ADDR[b]}" >"$LAB_DIR/balance.out" 2>"$LAB_DIR/balance.err" </dev/null
            LAB_PIDS+=("$SPAWNED")
            line="$(wait_for_line "$LAB_DIR/balance.out" 'forkscope balance: http://127\.0\.0\.1:[0-9]+' "$SPAWNED")" || {
                echo "--- forkscope balance did not start:" >&2
                cat "$LAB_DIR/balance.out" "$LAB_DIR/balance.err" >&2
                return 1
            }
            LAB_URL="${line#forkscope balance: }/mcp"
            ;;
        haproxy)
            start_haproxy replica "${REPLICA_ADDR[a]}" "${REPLICA_ADDR[b]}" || return 1
            LAB_PIDS+=("$HAPROXY_PID")
            LAB_URL="$HAPROXY_URL"
            ;;
        *) die "no balancer named $balancer" ;;
    esac
}

# Stops the lab, the balancer first and redis-server last; a replica that panicked fails LABEL.
stop_lab() {
    local label="$1" i name
    for ((i = ${#LAB_PIDS[@]} - 1; i >= 0; i--)); do
        stop "${LAB_PIDS[i]}"
    done
    LAB_PIDS=()
    for name in a b; do
        if grep -q 'panicked' "$LAB_DIR/$name.err" 2>/dev/null; then
            fail "$label: replica $name did not panic: $(grep -m1 'panicked' "$LAB_DIR/$name.err")"
        fi
    done
    REPLICA_PID=()
    REPLICA_ADDR=()
}

# ---- dependencies ----------------------------------------------------------------------------
# Waited for in the background (each bounds its installs), so a signal stops them at once.
if [[ -n "$SDKS" ]]; then
    run_bounded 0 "$INTEROP/python/ensure-venv.sh" >"$WORK/python-path" ||
        die "could not set up the Python venv"
    PYTHON="$(<"$WORK/python-path")"
    TS_DIR="$INTEROP/typescript"
    run_bounded 0 "$TS_DIR/ensure-sdk.sh" || die "npm ci failed in $TS_DIR"
fi
RMCP_CLIENT=""
if [[ " $SDKS " == *" rmcp "* ]]; then
    run_bounded 0 "$INTEROP/rmcp/ensure-server.sh" >"$WORK/rmcp-path" || die "could not build interop/rmcp"
    RMCP_CLIENT="$(dirname "$(<"$WORK/rmcp-path")")/forkscope-rmcp-task-client"
    [[ -x "$RMCP_CLIENT" ]] || die "interop/rmcp built no task client at $RMCP_CLIENT"
fi

# ---- probe: fenced holds, naive is caught, through both balancers -------------------------------
for policy in $POLICIES; do
    want=0
    [[ "$policy" == naive ]] && want=1
    for balancer in $BALANCERS; do
        label="probe $policy via $balancer"
        if ! start_lab "probe-$policy-$balancer" "$policy" "$balancer" --emit-every 50; then
            fail "$label: the lab started (redis-server, replicas a and b, $balancer)"
            stop_lab "$label"
            continue
        fi
        echo "== $label: $LAB_URL -> a ${REPLICA_ADDR[a]}, b ${REPLICA_ADDR[b]} on $REDIS_URL"
        out="$LAB_DIR/probe.out"
        rc=0
        run_bounded "$PROBE_TIMEOUT" "$BIN" probe "$LAB_URL" >"$out" 2>"$LAB_DIR/probe.err" </dev/null || rc=$?
        summary="$(grep -E -m1 '^[0-9]+ cases:' "$out")"
        if ((rc == want)); then
            pass "$label: probe exits $rc (${summary:-no output})"
        else
            fail "$label: probe exits $want: exit $rc"
            {
                echo "--- $label: probe output"
                cat "$out" "$LAB_DIR/probe.err"
            } >&2
        fi
        stop_lab "$label"
    done
done

# ---- kill: a replica dies mid-call; the SDK resumes on the survivor ----------------------------
# answer_drops FIFO OUT KILLED MARK NAME PID LOG [NAME PID LOG]…, run as its own process: for
# every `drop` read from FIFO, SIGKILLs the replica whose LOG holds MARK (it started the call), with
# whatever that PID started, writes the replica's name to KILLED, and answers `ok drop N` in OUT
# (N replicas killed; 0 when no log named the call, which the client reports).
# shellcheck disable=SC2317 # run by `bash -c`, from its text
answer_drops() {
    local fifo="$1" out="$2" killed="$3" mark="$4" cmd name pid log n tree i
    shift 4
    local replicas=("$@")
    while IFS= read -r cmd; do
        [[ "$cmd" == drop ]] || continue
        n=0
        for ((i = 0; i + 2 < ${#replicas[@]}; i += 3)); do
            name="${replicas[i]}" pid="${replicas[i + 1]}" log="${replicas[i + 2]}"
            if grep -q "$mark" "$log" 2>/dev/null; then
                mapfile -t tree < <(procs_tree "$pid")
                kill -KILL "${tree[@]}" 2>/dev/null
                printf '%s\n' "$name" >>"$killed"
                n=$((n + 1))
                break
            fi
        done
        printf 'ok drop %d\n' "$n" >>"$out"
    done <"$fifo"
}

run_kill_case() {
    local sdk="$1"
    local label="kill $sdk" rc=0 checks=0 bad=0 line client=() killed survivor i dead
    # What the replica running the call logs, and what the survivor logs when it takes it over.
    local mark='tool call started' adopted='adopted a tool call whose lease expired'
    if [[ "$sdk" == rmcp ]]; then
        # Adopted with a step already committed: the survivor runs on from it.
        mark='task created' adopted="adopted a task whose runner's lease ran out .*done=[1-9]"
    fi
    if ! start_lab "kill-$sdk" fenced haproxy --emit-every 0 --lease-ms "$LEASE_MS"; then
        fail "$label: the lab started (redis-server, replicas a and b, haproxy)"
        stop_lab "$label"
        return
    fi
    echo "== $label: $LAB_URL -> a ${REPLICA_ADDR[a]}, b ${REPLICA_ADDR[b]} on $REDIS_URL, --lease-ms $LEASE_MS"
    local ctl="$LAB_DIR/drop.ctl" acks="$LAB_DIR/drop.out" killed_file="$LAB_DIR/killed"
    : >"$acks"
    mkfifo "$ctl"
    # Held open read-write by this shell, so a client opening the fifo to write `drop` never
    # blocks, and the reader sees EOF only when close_ctl closes it.
    exec {CTL_FD}<>"$ctl"
    spawn --close "$CTL_FD" bash -c "$(declare -f procs_tree answer_drops); answer_drops \"\$@\"" answer-drops \
        "$ctl" "$acks" "$killed_file" "$mark" \
        a "${REPLICA_PID[a]}" "$LAB_DIR/a.err" b "${REPLICA_PID[b]}" "$LAB_DIR/b.err" </dev/null
    local reader="$SPAWNED"
    local args=("$LAB_URL" --case tool --policy fenced --proxy-ctl "$ctl" --proxy-out "$acks"
        --steps 25 --delay-ms 40 --drop-at 10)
    case "$sdk" in
        python) client=("$PYTHON" "$INTEROP/python/resume_client.py") ;;
        typescript) client=(node "$TS_DIR/resume_client.mjs") ;;
        rmcp)
            client=("$RMCP_CLIENT")
            args=("$LAB_URL" --proxy-ctl "$ctl" --proxy-out "$acks" --break kill --steps 20 --delay-ms 100)
            ;;
        *) die "no SDK client named $sdk" ;;
    esac
    run_bounded "$CLIENT_TIMEOUT" --close "$CTL_FD" "${client[@]}" "${args[@]}" \
        >"$LAB_DIR/client.out" 2>"$LAB_DIR/client.err" </dev/null || rc=$?
    close_ctl
    stop "$reader"

    while IFS= read -r line; do
        case "$line" in
            "PASS "*) checks=$((checks + 1)); pass "$label: ${line#PASS }" ;;
            "FAIL "*) checks=$((checks + 1)); bad=$((bad + 1)); fail "$label: ${line#FAIL }" ;;
            "note: "*) echo "$label: $line" ;;
        esac
    done <"$LAB_DIR/client.out"
    if ((rc == 124 || rc == 137)); then
        fail "$label: client finished within ${CLIENT_TIMEOUT}s: killed by timeout"
    elif ((rc != 0 && bad == 0)); then
        fail "$label: client exited 0: exit status $rc"
    elif ((checks == 0)); then
        fail "$label: client printed its checks: none"
    fi

    killed="$(head -n 1 "$killed_file" 2>/dev/null || true)"
    if [[ -z "$killed" ]]; then
        fail "$label: a replica was running the call and was killed: no replica logged '$mark'"
    else
        survivor=a
        [[ "$killed" == a ]] && survivor=b
        dead=1
        procs_alive "${REPLICA_PID[$killed]}" && dead=0
        if ((dead)); then
            pass "$label: replica $killed ran the call and was killed (SIGKILL)"
        else
            fail "$label: replica $killed was killed: pid ${REPLICA_PID[$killed]} still runs"
        fi
        line=""
        for ((i = 0; i < LOG_POLLS; i++)); do
            line="$(sed 's/\x1b\[[0-9;]*m//g' "$LAB_DIR/$survivor.err" | grep -m1 -E "$adopted" || true)"
            [[ -n "$line" ]] && break
            sleep 0.1
        done
        if [[ -n "$line" ]]; then
            pass "$label: replica $survivor adopted the call: ${line#*INFO }"
        else
            fail "$label: replica $survivor logged '$adopted': not in its log"
        fi
        # One task: the survivor took the task over and never made another.
        if [[ "$sdk" == rmcp ]]; then
            if grep -q 'task created' "$LAB_DIR/$survivor.err"; then
                fail "$label: replica $survivor made no second task: it logged 'task created'"
            else
                pass "$label: replica $survivor made no second task: one task, run on from its last committed step"
            fi
        fi
    fi
    if ((rc != 0 || bad != 0)) || [[ -z "$killed" ]]; then
        {
            echo "--- $label: client stderr (tail)"
            tail -n 20 "$LAB_DIR/client.err"
            for name in a b; do
                echo "--- $label: replica $name stderr (tail)"
                tail -n 20 "$LAB_DIR/$name.err" | sed 's/\x1b\[[0-9;]*m//g'
            done
        } >&2
    fi
    stop_lab "$label"
}

for sdk in $SDKS; do
    run_kill_case "$sdk"
done

finish
