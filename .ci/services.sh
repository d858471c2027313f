# Real redis-server and haproxy processes for scripts, on free 127.0.0.1 ports: the shell side
# of tests/common/services.rs. Source it after .ci/processes.sh.
#
# Both are started with `spawn`, so they are tracked by PID and stopped on every way out (a
# normal end, a failure, INT/TERM/HUP); a script may also `stop` them earlier. HAProxy's
# configuration is .ci/haproxy.cfg.template, the text the Rust tests fill in too.
#
#   free_port                          prints a port the kernel just handed out on 127.0.0.1
#   start_redis                        sets REDIS_PID, REDIS_PORT, REDIS_URL
#   start_haproxy NAME ADDR...         sets HAPROXY_PID, HAPROXY_PORT, HAPROXY_URL; servers are
#                                      NAME1, NAME2, … in front of ADDR (HOST:PORT) each
# Each returns 1, with the service's log on stderr, when it does not come up.

# shellcheck shell=bash disable=SC2034 # REDIS_* and HAPROXY_* are for the script sourcing this
SERVICES_START_POLLS=100 # polls 0.1 s apart before a service counts as failed to start
SERVICES_PORT_ATTEMPTS=5 # free ports tried: another process may take one before the bind
SERVICES_TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/haproxy.cfg.template"
SERVICES_DIR="$(mktemp -d "${TMPDIR:-/tmp}/forkscope-services.XXXXXX")"
at_exit 'rm -rf "$SERVICES_DIR"'

# Debian installs haproxy in /usr/sbin, which a user's PATH often lacks.
services_binary() {
    command -v "$1" 2>/dev/null && return 0
    local dir
    for dir in /usr/sbin /sbin; do
        [[ -x "$dir/$1" ]] && printf '%s\n' "$dir/$1" && return 0
    done
    echo "services: $1 is not installed (apt-get install $2)" >&2
    return 1
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# True when PID holds the socket listening on 127.0.0.1:PORT (read from /proc), so a start never
# mistakes another process that took the port for the one it started.
services_owns_listener() {
    local pid="$1" local_addr inodes=() line fields fd target inode
    local_addr="$(printf '0100007F:%04X' "$2")"
    while read -r line; do
        read -ra fields <<<"$line"
        [[ "${fields[1]}" == "$local_addr" && "${fields[3]}" == 0A ]] && inodes+=("${fields[9]}")
    done < <(tail -n +2 /proc/net/tcp)
    ((${#inodes[@]})) || return 1
    for fd in /proc/"$pid"/fd/*; do
        target="$(readlink "$fd" 2>/dev/null)" || continue
        for inode in "${inodes[@]}"; do
            [[ "$target" == "socket:[$inode]" ]] && return 0
        done
    done
    return 1
}

# services_wait PID PORT LOG CHECK…: polls until PID listens on PORT and CHECK succeeds. Status
# 0 up, 1 failed (PID stopped), 2 the port was taken (PID exited; try another).
services_wait() {
    local pid="$1" port="$2" log="$3" i
    shift 3
    for ((i = 0; i < SERVICES_START_POLLS; i++)); do
        if ! procs_alive "$pid"; then
            wait "$pid" 2>/dev/null
            forget "$pid"
            grep -q 'Address already in use' "$log" && return 2
            return 1
        fi
        services_owns_listener "$pid" "$port" && "$@" && return 0
        sleep 0.1
    done
    stop "$pid"
    return 1
}

services_redis_pong() {
    [[ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" == PONG ]]
}

start_redis() {
    local server port log attempt rc
    server="$(services_binary redis-server redis-server)" || return 1
    for ((attempt = 1; attempt <= SERVICES_PORT_ATTEMPTS; attempt++)); do
        port="$(free_port)"
        log="$SERVICES_DIR/redis-$port.log"
        spawn "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --daemonize no --dir "$SERVICES_DIR" >"$log" 2>&1 </dev/null
        rc=0
        services_wait "$SPAWNED" "$port" "$log" services_redis_pong "$port" || rc=$?
        if ((rc == 0)); then
            REDIS_PID="$SPAWNED"
            REDIS_PORT="$port"
            REDIS_URL="redis://127.0.0.1:$port/"
            return 0
        fi
        ((rc == 2)) && continue
        echo "services: redis-server did not start on port $port:" >&2
        cat "$log" >&2
        return 1
    done
    echo "services: redis-server found $SERVICES_PORT_ATTEMPTS free ports taken" >&2
    return 1
}

# haproxy_config NAME PORT ADDR…: the template with BIND_PORT and the SERVERS line filled in,
# as haproxy_config in tests/common/services.rs fills it in.
haproxy_config() {
    local name="$1" port="$2" line indent n addr
    shift 2
    while IFS= read -r line; do
        if [[ "$line" =~ ^([[:space:]]*)@SERVERS@[[:space:]]*$ ]]; then
            indent="${BASH_REMATCH[1]}"
            n=0
            for addr in "$@"; do
                n=$((n + 1))
                printf '%sserver %s%d %s\n' "$indent" "$name" "$n" "$addr"
            done
        else
            printf '%s\n' "${line//@BIND_PORT@/$port}"
        fi
    done <"$SERVICES_TEMPLATE"
}

services_accepts() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start_haproxy() {
    local name="$1" haproxy port cfg log attempt rc
    shift
    (($#)) || { echo "services: start_haproxy NAME UPSTREAM_ADDR…" >&2; return 1; }
    haproxy="$(services_binary haproxy haproxy)" || return 1
    for ((attempt = 1; attempt <= SERVICES_PORT_ATTEMPTS; attempt++)); do
        port="$(free_port)"
        cfg="$SERVICES_DIR/$name-$port.cfg"
        log="$SERVICES_DIR/$name-$port.log"
        haproxy_config "$name" "$port" "$@" >"$cfg"
        spawn "$haproxy" -db -f "$cfg" >"$log" 2>&1 </dev/null
        rc=0
        services_wait "$SPAWNED" "$port" "$log" services_accepts "$port" || rc=$?
        if ((rc == 0)); then
            HAPROXY_PID="$SPAWNED"
            HAPROXY_PORT="$port"
            HAPROXY_URL="http://127.0.0.1:$port/mcp"
            return 0
        fi
        ((rc == 2)) && continue
        echo "services: haproxy did not start on port $port ($cfg):" >&2
        cat "$log" >&2
        return 1
    done
    echo "services: haproxy found $SERVICES_PORT_ATTEMPTS free ports taken" >&2
    return 1
}
