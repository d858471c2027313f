#!/usr/bin/env bash
# Makes sure the rmcp probe server (and the rmcp task client beside it) is built from interop/rmcp
# (`cargo build --release --locked` into target/interop-rmcp of this checkout), and prints the
# path of the server's binary. It is rebuilt whenever Cargo.toml, Cargo.lock or a source file
# changes (a hash stamp beside the binary).
# FORKSCOPE_INSTALL_TIMEOUT bounds the build (seconds, default 600).
set -euo pipefail

RMCP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$RMCP_DIR/../.." && pwd)"
TARGET="$REPO_ROOT/target/interop-rmcp"
BIN="$TARGET/release/forkscope-probe-rmcp"
STAMP="$TARGET/.forkscope-sources.sha256"
INSTALL_TIMEOUT="${FORKSCOPE_INSTALL_TIMEOUT:-600}"
# cargo runs in the background and is stopped with this script (INT, TERM, HUP included).
# shellcheck source=../../.ci/processes.sh
source "$REPO_ROOT/.ci/processes.sh"

sources_hash() {
    cd "$RMCP_DIR"
    find Cargo.toml Cargo.lock src -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

want_hash="$(sources_hash)"
CLIENT="$TARGET/release/forkscope-rmcp-task-client"
if [[ ! -x "$BIN" || ! -x "$CLIENT" || "$want_hash" != "$(cat "$STAMP" 2>/dev/null || true)" ]]; then
    echo "building the rmcp probe server (cargo build --release --locked in interop/rmcp)" >&2
    cd "$RMCP_DIR"
    run_bounded "$INSTALL_TIMEOUT" env CARGO_TARGET_DIR="$TARGET" cargo build --release --locked --quiet >&2
    printf '%s\n' "$want_hash" > "$STAMP"
fi

printf '%s\n' "$BIN"
