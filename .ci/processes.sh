# Process bookkeeping for every script .ci/run calls: source it, then start long-lived
# processes with `spawn` and bounded commands with `run_bounded`.
#
# Why a shared file: a script that starts a server must stop it on every way out — a normal
# end, a failure under `set -e`, INT/TERM/HUP, and the TERM a timeout sends — and must stop the
# process it meant, by PID. `cmd &` inside `( … )`, a `case`, a pipeline or `$(…)` makes `$!`
# name a subshell: killing it leaves the real server running with parent 1. So `spawn` runs a
# plain command in the background (bash execs it: `$!` is the command), and stopping a PID also
# stops whatever that process started (a `timeout`'s child, a wrapper's node or python).
#
# Commands are waited for in the background, never in the foreground: bash runs a trap only
# once the foreground command returns, so a TERM to the script would otherwise wait for it.
#
# Sourcing installs the traps. A script adds its own cleanup with `at_exit 'command'`; it runs
# after every process is stopped, and may set PROCS_STATUS, the status the script exits with.
# Bash 4.4 or later.

PROCS_PIDS=()
PROCS_AT_EXIT=()
PROCS_STOP_TIMEOUT="${PROCS_STOP_TIMEOUT:-5}" # s to wait after each signal before a harder one
SPAWNED=""

# True while PID runs. A zombie does not: PID 1 in a container may never reap an orphan.
procs_alive() {
    local stat
    { read -r stat </proc/"$1"/stat; } 2>/dev/null || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

# Prints PID and every process descended from it, parents before children.
procs_tree() {
    local -A children=()
    local pid ppid
    while read -r pid ppid; do
        children[$ppid]+=" $pid"
    done < <(ps -e -o pid=,ppid=)
    local queue=("$1") i=0
    while ((i < ${#queue[@]})); do
        pid="${queue[i]}"
        i=$((i + 1))
        printf '%s\n' "$pid"
        # shellcheck disable=SC2206 # word splitting is the point
        queue+=(${children[$pid]:-})
    done
}

# Waits up to PROCS_STOP_TIMEOUT seconds for every PID given to end; true if they did.
procs_wait_gone() {
    local i pid alive
    for ((i = 0; i < PROCS_STOP_TIMEOUT * 10; i++)); do
        alive=0
        for pid in "$@"; do
            procs_alive "$pid" && alive=1 && break
        done
        ((alive)) || return 0
        sleep 0.1
    done
    return 1
}

# stop_pids PID…: TERM to each, then KILL to any still running after PROCS_STOP_TIMEOUT.
stop_pids() {
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    procs_wait_gone "$@" || kill -KILL "$@" 2>/dev/null || true
}

# stop_tree PID [SIGNAL]: sends SIGNAL (default TERM) to PID, then TERM and at last KILL to
# PID and everything it had started that is still running. Reaps PID if it is our child.
stop_tree() {
    local top="$1" sig="${2:-TERM}" tree
    mapfile -t tree < <(procs_tree "$top")
    kill -"$sig" "$top" 2>/dev/null || true
    if ! procs_wait_gone "$top"; then
        kill -TERM "$top" 2>/dev/null || true
        procs_wait_gone "$top" || true
    fi
    # What it started and left behind (a wrapper's child, a `timeout`'s command) goes too.
    stop_pids "${tree[@]}"
    wait "$top" 2>/dev/null || true
}

# spawn [--close FD] COMMAND [ARGS…] [redirections]: starts COMMAND in the background and
# tracks it; its PID is in SPAWNED. COMMAND must be a program, not a function or a compound
# command. Never call spawn inside `$(…)` or a pipeline: the bookkeeping would stay in that
# subshell. --close FD: COMMAND does not inherit FD, which this shell keeps open (a `{var}>&-`
# on the call itself would close it here, for good). COMMAND reads what the call's stdin is:
# without `<&0`, bash would hand a background command /dev/null instead.
spawn() {
    local close=""
    if [[ "$1" == --close ]]; then
        close="$2"
        shift 2
    fi
    if [[ -n "$close" ]]; then
        "$@" <&0 {close}>&- &
    else
        "$@" <&0 &
    fi
    SPAWNED=$!
    PROCS_PIDS+=("$SPAWNED")
}

# Removes PID from the processes stopped at exit (it ended, or was stopped).
forget() {
    local kept=() pid
    for pid in "${PROCS_PIDS[@]}"; do
        [[ "$pid" == "$1" ]] || kept+=("$pid")
    done
    PROCS_PIDS=("${kept[@]}")
}

# stop PID [SIGNAL]: stop_tree, and forget it.
stop() {
    stop_tree "$@"
    forget "$1"
}

# Stops every tracked process, the last started first.
stop_all() {
    local i
    for ((i = ${#PROCS_PIDS[@]} - 1; i >= 0; i--)); do
        stop_tree "${PROCS_PIDS[i]}"
    done
    PROCS_PIDS=()
}

# run_bounded SECONDS [--close FD] COMMAND [ARGS…]: runs COMMAND under `timeout` (SECONDS 0:
# unbounded), in the background and waited for, so a signal to this script stops it at once.
# Returns its status: 124 when it ran out of time.
run_bounded() {
    local limit="$1" pid rc=0 close=()
    shift
    if [[ "$1" == --close ]]; then
        close=("$1" "$2")
        shift 2
    fi
    spawn "${close[@]}" timeout -k "$PROCS_STOP_TIMEOUT" "$limit" "$@"
    pid="$SPAWNED"
    wait "$pid" || rc=$?
    forget "$pid"
    return "$rc"
}

at_exit() {
    PROCS_AT_EXIT+=("$1")
}

procs_on_exit() {
    PROCS_STATUS=$?
    local cmd
    # Cleanup finishes even if someone presses Ctrl-C again; every wait in it is bounded.
    trap '' INT TERM HUP
    set +e
    stop_all
    for cmd in "${PROCS_AT_EXIT[@]}"; do
        eval "$cmd"
    done
    exit "$PROCS_STATUS"
}

# procs_marked NAME=VALUE: prints the PID of every live process whose environment holds
# NAME=VALUE — every process a run started, even one left behind with parent 1. Spawns
# nothing while it looks, and never lists the shell that asks.
procs_marked() {
    local dir pid entry entries
    for dir in /proc/[0-9]*; do
        pid="${dir#/proc/}"
        [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
        procs_alive "$pid" || continue
        { mapfile -d '' -t entries <"$dir/environ"; } 2>/dev/null || continue
        for entry in "${entries[@]}"; do
            if [[ "$entry" == "$1" ]]; then
                printf '%s\n' "$pid"
                break
            fi
        done
    done
}

trap procs_on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
