#!/usr/bin/env bash
# Makes sure interop/inspector/node_modules holds what package-lock.json pins (`npm ci`, again
# whenever the lock file changes: a hash stamp inside node_modules). Prints nothing on stdout.
# FORKSCOPE_INSTALL_TIMEOUT bounds npm (seconds, default 600).
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STAMP="$DIR/node_modules/.forkscope-lock.sha256"
INSTALL_TIMEOUT="${FORKSCOPE_INSTALL_TIMEOUT:-600}"
# npm runs in the background and is stopped with this script (INT, TERM, HUP included).
# shellcheck source=../../.ci/processes.sh
source "$DIR/../../.ci/processes.sh"

want_hash="$(sha256sum "$DIR/package-lock.json" | cut -d' ' -f1)"
if [[ "$want_hash" != "$(cat "$STAMP" 2>/dev/null || true)" ]]; then
    echo "installing the MCP Inspector (npm ci in interop/inspector)" >&2
    cd "$DIR"
    run_bounded "$INSTALL_TIMEOUT" npm ci --no-audit --no-fund --ignore-scripts >&2
    printf '%s\n' "$want_hash" > "$STAMP"
fi
