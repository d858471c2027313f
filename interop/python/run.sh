#!/usr/bin/env bash
# Run the official Python MCP SDK interop check against a Streamable HTTP server.
# Usage: run.sh URL [extra stock_client.py args, e.g. --steps N]
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 URL [--steps N]" >&2
    exit 2
fi

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
VENV="${FORKSCOPE_VENV:-$REPO_ROOT/target/interop-venv}"
REQS="$SCRIPT_DIR/requirements.txt"
STAMP="$VENV/.forkscope-requirements.sha256"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "creating venv at $VENV" >&2
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi

want_hash="$(sha256sum "$REQS" | cut -d' ' -f1)"
have_hash="$(cat "$STAMP" 2>/dev/null || true)"
if [[ "$want_hash" != "$have_hash" ]]; then
    echo "installing $(tr '\n' ' ' < "$REQS")into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
    printf '%s\n' "$want_hash" > "$STAMP"
fi

exec "$VENV/bin/python" "$SCRIPT_DIR/stock_client.py" "$@"
