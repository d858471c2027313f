#!/usr/bin/env bash
# Drives the real forkscope dashboard through the seed incident with keys, under tmux, and reads
# the screen: naive must show the fork, fenced must stay clean with a typed rejection. Also
# checks resize, a tiny terminal, q, Ctrl-C and a panic all leave the terminal usable.
# Synchronises on what the screen shows (polling capture-pane), never on fixed sleeps.
# Usage: tests/tmux/dashboard.sh [path/to/forkscope]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$(realpath "${1:-$ROOT/target/release/forkscope}")"
[[ -x "$BIN" ]] || { echo "no forkscope binary at $BIN" >&2; exit 2; }
command -v tmux >/dev/null || { echo "tmux is required" >&2; exit 2; }
# Every process started here is stopped on every way out: a normal end, a failure, INT/TERM/HUP.
# shellcheck source=../../.ci/processes.sh
source "$ROOT/.ci/processes.sh"

# A fresh tmux server (socket) per run: restarting one server at once can race its shutdown.
RUN=0
SOCKET="forkscope-test-$$-0"
T() { tmux -L "$SOCKET" "$@"; }
# Ends this run's tmux server and what runs in its panes. The server is no child of ours (it
# detaches), so its PID and its panes' are read before kill-server, and whatever outlives the
# hang-up is stopped by PID.
cleanup() {
    local server tree=()
    server="$(T display-message -p '#{pid}' 2>/dev/null || true)"
    [[ -n "$server" ]] && mapfile -t tree < <(procs_tree "$server")
    T kill-server 2>/dev/null || true
    procs_wait_gone "${tree[@]}" || stop_pids "${tree[@]}"
}
at_exit cleanup
passed=0
failed=0

screen() { T capture-pane -p -t fs; }

# wait_for REGEX [seconds]: poll the screen until it matches.
wait_for() {
    local pattern="$1" limit="${2:-20}" i
    for ((i = 0; i < limit * 10; i++)); do
        if screen | grep -Eq -- "$pattern"; then return 0; fi
        sleep 0.1
    done
    echo "--- screen (waiting for /$pattern/):" >&2
    screen >&2
    return 1
}

# wait_without REGEX [seconds]: poll the screen until it no longer matches.
wait_without() {
    local pattern="$1" limit="${2:-20}" i
    for ((i = 0; i < limit * 10; i++)); do
        if ! screen | grep -Eq -- "$pattern"; then return 0; fi
        sleep 0.1
    done
    echo "--- screen (waiting for /$pattern/ to go):" >&2
    screen >&2
    return 1
}

check() {
    local name="$1"; shift
    if "$@"; then
        passed=$((passed + 1)); echo "PASS $name"
    else
        failed=$((failed + 1)); echo "FAIL $name"
    fi
}

start() {
    cleanup
    RUN=$((RUN + 1))
    SOCKET="forkscope-test-$$-$RUN"
    # After the program ends, show its exit status and whether the terminal is back in
    # canonical mode with echo on.
    T new-session -d -s fs -x "${2:-120}" -y "${3:-40}" \
        "env $1 '$BIN' ${4:-}; echo \"EXITED \$?\"; stty -a | grep -Eo -- '-?icanon|-?echo ' | tr '\\n' ' '; echo; sleep 600"
}

# 1. Naive: the seed incident forks.
start "" 120 40
check "dashboard opens fenced" wait_for "FENCED"
T send-keys -t fs n
check "n switches to naive" wait_for "NAIVE"
check "events arrive" wait_for "applied +([3-9]|[1-9][0-9])"
T send-keys -t fs t
check "t arms the token strip" wait_for "STRIPPED on the next reconnect"
T send-keys -t fs d
check "naive: the checker reports the fork" wait_for "verdict FORK ×1"
check "naive: two live GET streams" wait_for "2 live GET streams on one session"
check "naive: duplicates applied" wait_for "duplicates +[1-9]"
check "naive: the first violation is pinned as evidence" wait_for "evidence · naive lab · Enter dismisses"
T send-keys -t fs Enter
check "Enter dismisses the evidence card" wait_without "evidence · "
T resize-window -t fs -x 80 -y 24
check "80×24 still shows the verdict" wait_for "verdict FORK"
check "80×24: the key line ends with the way out" wait_for "^ \\? help .* … q quit *$"
check "80×24: the client's budget and binding, not cut mid-word" wait_for "budget [0-9.]+ s +│$"
T resize-window -t fs -x 40 -y 10
check "a tiny terminal asks to be enlarged" wait_for "enlarge the terminal"
T resize-window -t fs -x 120 -y 40
check "growing back redraws" wait_for "verdict FORK"
T send-keys -t fs q
check "q quits with status 0" wait_for "EXITED 0"
check "q leaves the terminal clean" wait_for "^icanon echo"

# 1b. The workshop's tools on the same fork: time travel, the glossary, presenter mode, predict,
# both lanes of the fork at 80×24 and 60×20, the knobs, and saving what was done.
SAVE_DIR="$(mktemp -d)"
cleanup
RUN=$((RUN + 1)); SOCKET="forkscope-test-$$-$RUN"
T new-session -d -s fs -x 120 -y 40 \
    "cd '$SAVE_DIR' && '$BIN'; echo \"EXITED \$?\"; stty -a | grep -Eo -- '-?icanon|-?echo ' | tr '\\n' ' '; echo; sleep 600"
check "1b: the dashboard opens" wait_for "FENCED"
T send-keys -t fs n
check "1b: events arrive" wait_for "applied +([3-9]|[1-9][0-9])"
T send-keys -t fs t d
check "1b: the fork" wait_for "verdict FORK"
T send-keys -t fs Enter
T send-keys -t fs v
check "v: time travel to the violations, the fork first" wait_for "violation 1 of [0-9]+: FORK"
check "v: the moment shows the fork" wait_for "verdict FORK"
T send-keys -t fs Left
check "←: one change earlier there was no fork yet" wait_without "verdict FORK"
T send-keys -t fs ,
check ", selects an event and explains it" wait_for "selected event · , . move"
T send-keys -t fs Escape
check "Esc clears the selection" wait_without "selected event · "
T send-keys -t fs End
check "End: back to live" wait_for "▶ running"
no_travel() { ! screen | grep -q 'TIME TRAVEL'; }
check "End: time travel left" no_travel
T send-keys -t fs '?'
check "?: the glossary explains the verdict words" wait_for "CURSOR BACK +the client's cursor moved backwards"
T send-keys -t fs Escape
T send-keys -t fs f
check "f: presenter mode, the verdict large" wait_for "╭ verdict ─"
T send-keys -t fs V
check "V: the verdict hidden for a vote" wait_for "VERDICT HIDDEN"
T send-keys -t fs V
check "V: revealed again" wait_for "revealed"
T send-keys -t fs f
check "f: the full dashboard again" wait_for "╭ invariant"
T resize-window -t fs -x 80 -y 24
check "80×24: both lanes of the fork" wait_for "^│s2 "
check "80×24: and the orphan's lane" wait_for "^│s1 .*╳"
T resize-window -t fs -x 60 -y 20
# Too short for the evidence card beneath the panes: it stands in the lanes' place, and Enter
# gives them back.
wait_for "verdict FORK" || true
if screen | grep -q "╭ evidence"; then
    check "60×20: the evidence card in the lanes' place" wait_for "^╭ evidence · naive lab"
    T send-keys -t fs Enter
fi
check "60×20: both lanes of the fork" wait_for "^│s2 "
check "60×20: the orphan's lane with its orphan emits" wait_for "^│s1 .*╳"
check "60×20: the verdict" wait_for "verdict FORK"
T resize-window -t fs -x 120 -y 40
T send-keys -t fs k
check "k: the knobs card" wait_for "knobs · ↑↓ choose"
T send-keys -t fs Right Right Right Right Right
check "k: grace past the retry budget breaks condition 5" wait_for "✘ condition 5: grace 15000 ≥ retry budget 15000 ms — naive runs it"
T send-keys -t fs Enter
check "k: naive takes it" wait_for "✓ applied · Esc closes"
T send-keys -t fs Escape
check "k: condition 5 red on the panel" wait_for "grace 15000 ms ≥ retry budget 15000 ms"
T send-keys -t fs w
check "w: what was done is saved as a scenario" wait_for "saved [0-9]+ actions as forkscope-saved-1.toml"
T send-keys -t fs q
check "1b: q quits" wait_for "EXITED 0"
check "1b: the terminal is clean" wait_for "^icanon echo"
check "the saved scenario replays with the same verdict" "$BIN" run "$SAVE_DIR/forkscope-saved-1.toml"
rm -rf "$SAVE_DIR"

# 1c. Fenced refuses a knob that breaks condition 5, and changes nothing.
start "" 120 40
check "1c: the dashboard opens" wait_for "FENCED"
T send-keys -t fs k Right Right Right Right Right Enter
check "1c: fenced refuses condition 5 broken" wait_for "refused: fenced: the grace window \(15000 ms\) must be strictly shorter"
T send-keys -t fs Escape
check "1c: the panel still shows the old grace window" wait_for "grace 5000 ms < retry budget 15000 ms"
T send-keys -t fs q
check "1c: q quits" wait_for "EXITED 0"

# 2. Fenced, the seed's two-header model: the same keys end in a typed rejection and no fork.
start "" 120 40 "--identity token-header"
check "fenced: events arrive" wait_for "applied +([3-9]|[1-9][0-9])"
T send-keys -t fs t
T send-keys -t fs d
check "fenced: the reconnect is rejected, the verdict clean" wait_for "1 rejected"
check "fenced: the log names missing_token" wait_for "reason=missing_token"
check "fenced: verdict clean" wait_for "verdict CLEAN"
check "fenced: the typed rejection is on screen" wait_for "typed rejections 428 missing_token"
check "fenced: the rejection is pinned as evidence" wait_for "TYPED REJECTION the server refused a reconnect with 428 missing_token"
no_fork() { ! screen | grep -q 'FORK'; }
check "fenced: no fork anywhere" no_fork
check "fenced: the new session says why ids restart at s1" wait_for "phase   connected  new session.*: ids from s1"
T resize-window -t fs -x 80 -y 24
check "80×24: and still says so" wait_for "phase   new session: ids from s1"
T send-keys -t fs C-c
check "Ctrl-C quits with status 0" wait_for "EXITED 0"
check "Ctrl-C leaves the terminal clean" wait_for "^icanon echo"

# 2b. Fenced, identity in the event id (the default): a stripped header still resumes, and a
# tool call cut off mid-call resumes to its result, applied once.
start "" 120 40
check "event-id: events arrive" wait_for "applied +([3-9]|[1-9][0-9])"
T send-keys -t fs x
check "x starts a tool call" wait_for "call +#[0-9]+ s[0-9]+ · [1-9][0-9]* of [0-9]+ steps · streaming"
T send-keys -t fs t
check "event-id: t says the id still carries the token" wait_for "the id still carries it"
T send-keys -t fs d
check "d: the tool call's stream is resumed" wait_for "↺ resumed 1×"
check "d: its result is applied once" wait_for "result ✓ once"
check "d: and every step once, no more" wait_for "· ([0-9]+)( of |/)\\1( steps)? · result ✓ once"
check "event-id: nothing rejected" wait_for "[1-9][0-9]* resumes? accepted, 0 rejected"
check "event-id: verdict clean" wait_for "verdict CLEAN"
check "event-id: no fork anywhere" no_fork
T send-keys -t fs q
check "event-id: q quits" wait_for "EXITED 0"

# 2b'. Presenters: --pause-at-violation stops the lab at the first violation.
start "" 120 40 "--pause-at-violation --policy naive"
check "pause-at-violation: events arrive" wait_for "applied +([3-9]|[1-9][0-9])"
T send-keys -t fs t
T send-keys -t fs d
check "pause-at-violation: paused on the evidence" wait_for "paused: space resumes"
check "pause-at-violation: the clock is paused" wait_for "⏸ paused"
T send-keys -t fs q
check "pause-at-violation: q quits" wait_for "EXITED 0"

# 2c. Prove it: P checks every schedule of the lab's policy; under naive the counterexample
# plays as a scenario.
start "" 120 40
check "P: the dashboard opens" wait_for "FENCED"
T send-keys -t fs P
check "P: fenced holds" wait_for "fenced: no fork, duplicate, gap, drift, loss or reused id in"
T send-keys -t fs Escape
T send-keys -t fs n
check "P: back to the lab, naive" wait_for "NAIVE"
T send-keys -t fs P
check "P: naive's shortest fork" wait_for "naive: counterexample in [0-9]+ steps: fork"
T send-keys -t fs Enter
check "Enter plays the counterexample" wait_for "scenario · Shortest fork under naive"
check "the counterexample forks over real sockets" wait_for "verdict FORK"
T send-keys -t fs q
check "prove it: q quits" wait_for "EXITED 0"

# 3. A scenario plays in the dashboard, side by side, and the session is recorded.
CAST="$(mktemp --suffix=.cast)"
cleanup
RUN=$((RUN + 1)); SOCKET="forkscope-test-$$-$RUN"
T new-session -d -s fs -x 120 -y 40 \
    "'$BIN' --scenario '$ROOT/scenarios/seed-incident.toml' --record '$CAST'; echo \"EXITED \$?\"; sleep 600"
check "scenario: narration shows" wait_for "scenario · The seed incident"
check "scenario: plays to the end" wait_for "step 10/10 +finished"
check "scenario: naive forks beside fenced" wait_for "verdict FORK"
check "scenario: fenced stays clean beside it" wait_for "verdict CLEAN"
T send-keys -t fs p
# The first of the shipped files, alphabetically: always in the picker's first page.
check "p opens the scenario picker" wait_for "clean-resume.toml"
T send-keys -t fs Escape
T send-keys -t fs q
check "scenario: q quits" wait_for "EXITED 0"
check "recording: says where it was saved" wait_for "recorded .*\\.cast"
check "recording: asciicast v2 header" grep -q '"version":2' "$CAST"
check "recording: first violation marked" grep -q '"m","first violation' "$CAST"
rm -f "$CAST"

# 4. A panic on a lab task restores the terminal and exits 101.
start "FORKSCOPE_TEST_PANIC_AFTER_MS=1500" 100 30
check "panic exits 101" wait_for "EXITED 101"
check "panic leaves the terminal clean" wait_for "^icanon echo"
check "panic message is readable" wait_for "forkscope panicked"

# 5. `probe --watch` against a naive server: lanes, the breaking events marked, q, exit 1.
SERVE_OUT="$(mktemp)"
spawn "$BIN" serve --port 0 --policy naive --emit-every 20 >"$SERVE_OUT" 2>/dev/null </dev/null
SERVE_PID="$SPAWNED"
URL=""
for _ in $(seq 100); do
    URL="$(grep -Eo 'http://127\.0\.0\.1:[0-9]+/mcp' "$SERVE_OUT" || true)"
    [[ -n "$URL" ]] && break
    sleep 0.1
done
start "" 120 32 "probe $URL --watch --only resume-while-old-open,bogus-cursor"
check "probe --watch: runs to the end" wait_for "done: 2 cases, 2 violated" 60
T send-keys -t fs Up
check "probe --watch: ↑ picks the other case" wait_for "VIOLATED  two live streams"
check "probe --watch: the fork is marked on the old connection's lane" wait_for "A GET .*✕"
T send-keys -t fs q
check "probe --watch: q quits with status 1 (violations)" wait_for "EXITED 1"
check "probe --watch: the report follows" wait_for "2 cases: 0 hold, 2 violated"
check "probe --watch: q leaves the terminal clean" wait_for "^icanon echo"
stop "$SERVE_PID"
rm -f "$SERVE_OUT"

# 6. A lab of replicas (`--replicas 2`), by keys: events on the replica that holds s1, a NAT drop
# that leaves that replica's side open, the reconnect sent to the other replica (N), an emit.
# Naive at 80×24: both replicas' lanes of s1 receive, the fork across replicas. Fenced at
# 100×30: the store refuses the old replica's late write, epoch and holder named. Then K kills
# the replica the client is on.
# The replica whose block in the replicas pane lists the client's delivery of s1.
sends_s1() {
    local line replica=""
    while IFS= read -r line; do
        [[ "$line" =~ ^│(▸|\ )([A-D])\  ]] && replica="${BASH_REMATCH[2]}"
        [[ "$line" =~ ^│\ +sends\ s1\  ]] && { echo "$replica"; return; }
    done < <(screen)
}
replicas() {
    local policy="$1" width="$2" height="$3" holder other
    start "" "$width" "$height" "--replicas 2 --policy $policy"
    check "replicas $policy: the replicas pane" wait_for "replicas · round-robin · store memory"
    T send-keys -t fs e e e
    check "replicas $policy: events applied" wait_for "applied +([3-9]|[1-9][0-9])"
    # The replica whose block lists the client's delivery of s1 holds it; the other gets the
    # reconnect.
    holder="$(sends_s1)"
    case "$holder" in A) other=B ;; B) other=A ;; *) other="" ;; esac
    check "replicas $policy: the pane says which replica sends s1" test -n "$other"
    T send-keys -t fs d "$other" N c
    check "replicas $policy: $other resumes s1" wait_for "resumes s1 after #"
    T send-keys -t fs e
    if [[ "$policy" == naive ]]; then
        check "replicas naive: $holder's lane of s1 received" wait_for "^│s1@$holder .*[●╳]"
        check "replicas naive: $other's lane of s1 receives too" wait_for "^│s1@$other .*●"
        check "replicas naive: the orphan's emit marked" wait_for "^│s1@$holder .*╳"
        check "replicas naive: the fork across replicas" wait_for "fork across replicas: stream s1"
        check "replicas naive: the verdict" wait_for "verdict FORK"
    else
        check "replicas fenced: the refusal on $holder's lane" wait_for "^│s1@$holder .*×"
        check "replicas fenced: the store refuses $holder's late write" \
            wait_for "× ($holder's write on s1 refused|$holder refused on s1): epoch 1 < 2, held by $other"
        check "replicas fenced: the store's record, epoch 2 owned by $other" \
            wait_for "store s1 +GET +live +ep 2 owner $other"
        check "replicas fenced: verdict clean" wait_for "verdict CLEAN"
        no_fork_across() { ! screen | grep -q 'FORK'; }
        check "replicas fenced: no fork" no_fork_across
    fi
    T send-keys -t fs K
    check "replicas $policy: K kills $other" wait_for "^│▸$other killed"
    check "replicas $policy: after the kill, $holder sends s1 again" wait_for "^│ +sends s1 "
    check "replicas $policy: both replicas' lanes of one session's s1" \
        wait_for "^│s1@$holder .*●"
    check "replicas $policy: … and the killed one's" wait_for "^│s1@$other .*●"
    T resize-window -t fs -x 40 -y 12
    check "replicas $policy: a tiny terminal asks to be enlarged" wait_for "enlarge the terminal"
    T resize-window -t fs -x "$width" -y "$height"
    check "replicas $policy: growing back redraws" wait_for "$other killed"
    T send-keys -t fs q
    check "replicas $policy: q quits with status 0" wait_for "EXITED 0"
    check "replicas $policy: q leaves the terminal clean" wait_for "^icanon echo"
}
replicas naive 80 24
replicas fenced 100 30

echo "dashboard tmux: $passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
