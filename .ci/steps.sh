# The steps .ci/run runs after the tests, one function each, for .ci/lane. Each uses BIN (the
# forkscope the tests built: one build profile for the whole run) and CI_TMP, and runs its
# commands with run_bounded, so a signal to the lane stops them with everything they started.
# shellcheck shell=bash disable=SC2034 # STEP_TITLE is read by .ci/lane

declare -A STEP_TITLE=(
    [demo]="headless demonstration (core), and the seed incident over real loopback HTTP"
    [scenarios]="every shipped scenario, headless, both policies"
    [check]="forkscope check: fenced holds; naive's shortest fork replays over sockets"
    [check_replicas]="forkscope check --replicas 2: fenced holds to depth 16; naive's fork across replicas replays"
    [python]="interop: the official Python MCP SDK against forkscope serve"
    [sdk_clients]="interop: the official Python and TypeScript SDK clients resume through forkscope proxy"
    [conformance]="interop: the MCP conformance suite's server scenarios against forkscope serve"
    [inspector]="interop: the MCP Inspector's CLI lists, calls and sets the log level against forkscope serve"
    [faults]="interop: probe's fault cases (restart, kill, pause by the user's commands; effects counted) find FastMCP's tasks running again and fenced serve replicas holding, on redis-server"
    [fastmcp]="interop: forkscope probe finds FastMCP's task runtime losing sessions and tasks behind a balancer without affinity (JUnit report)"
    [probe]="forkscope probe: fenced holds, naive is caught, the official SDK servers give their written-down findings"
    [services]="services: redis-server and haproxy start on free ports and stop by PID"
    [replicas]="replicas: probe through forkscope balance and HAProxy, both policies; SDK clients survive a killed replica"
    [replica_scenarios]="replica scenarios: every story, both policies, on the in-memory store and on Redis"
    [dashboard]="dashboard: the real binary under tmux, driven by keys"
    [leaks]="every script ends what it starts: at its end, on a failure, on INT/TERM/HUP"
)

step_demo() {
    local out
    for what in demo incident; do
        run_bounded 0 "$BIN" "$what" >"$CI_TMP/$what.out"
        out="$(<"$CI_TMP/$what.out")"
        echo "$out"
        grep -q "verdict: fork" <<<"$out"
        grep -q "verdict: clean" <<<"$out"
    done
}

step_scenarios() {
    run_bounded 0 "$BIN" run scenarios/*.toml
}

step_check() {
    run_bounded 0 "$BIN" check --policy fenced --depth 12
    local cx="$CI_TMP/shortest-fork.toml" code=0
    run_bounded 0 "$BIN" check --policy naive --client-only --anomaly fork --emit-scenario "$cx" || code=$?
    [[ $code -eq 1 ]] || { echo "naive must have a counterexample (exit 1), got exit $code" >&2; return 1; }
    run_bounded 0 "$BIN" run "$cx"
}

step_check_replicas() {
    # The proof is to depth 16 (5.7 million states, 14 s on two idle cores); the budget is one
    # a host that steals most of the CPU, running the other lanes beside it, still meets.
    run_bounded 0 "$BIN" check --replicas 2 --policy fenced --time-budget 300
    local cx="$CI_TMP/replica-fork.toml" code=0
    run_bounded 0 "$BIN" check --replicas 2 --policy naive --write "$cx" || code=$?
    [[ $code -eq 1 ]] || { echo "naive replicas must have a counterexample (exit 1), got exit $code" >&2; return 1; }
    run_bounded 0 "$BIN" run "$cx"
}

step_python() {
    command -v python3 >/dev/null || { echo "python3 is required for the interop check" >&2; return 1; }
    run_bounded 0 bash interop/check-python-sdk.sh "$BIN"
}

step_sdk_clients() {
    command -v node >/dev/null || { echo "node is required for the TypeScript SDK interop check" >&2; return 1; }
    run_bounded 0 bash interop/check-sdk-clients.sh "$BIN"
}

step_conformance() {
    run_bounded 0 bash interop/check-conformance.sh "$BIN"
}

step_inspector() {
    run_bounded 0 bash interop/check-inspector.sh "$BIN"
}

step_faults() {
    run_bounded 0 bash interop/check-faults.sh "$BIN"
}

step_fastmcp() {
    run_bounded 0 bash interop/check-fastmcp.sh "$BIN"
}

step_probe() {
    run_bounded 0 bash interop/check-probe.sh "$BIN"
}

step_services() {
    run_bounded 0 bash interop/check-services.sh "$BIN"
}

step_replicas() {
    run_bounded 0 bash interop/check-replicas.sh "$BIN"
}

step_replica_scenarios() {
    run_bounded 0 bash interop/check-replica-scenarios.sh "$BIN"
}

step_dashboard() {
    run_bounded 0 bash tests/tmux/dashboard.sh "$BIN"
}

step_leaks() {
    run_bounded 0 bash tests/ci/leaks.sh "$BIN"
}
