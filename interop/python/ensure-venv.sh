#!/usr/bin/env bash
# Makes sure the interop venv exists with interop/python/requirements.txt installed, and prints
# the path of its python. The venv is target/interop-venv unless FORKSCOPE_VENV names another,
# and FORKSCOPE_REQUIREMENTS may name another requirements file (interop/fastmcp's venv is made
# so). It is reinstalled whenever the requirements change (a hash stamp inside the venv).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
VENV="${FORKSCOPE_VENV:-$REPO_ROOT/target/interop-venv}"
REQS="${FORKSCOPE_REQUIREMENTS:-$SCRIPT_DIR/requirements.txt}"
STAMP="$VENV/.forkscope-requirements.sha256"
# Bounds on the install steps (seconds): a registry that hangs must not hang the harness.
INSTALL_TIMEOUT="${FORKSCOPE_INSTALL_TIMEOUT:-600}"
# Installs run in the background and are stopped with this script (INT, TERM, HUP included).
# shellcheck source=../../.ci/processes.sh
source "$REPO_ROOT/.ci/processes.sh"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "creating venv at $VENV" >&2
    mkdir -p "$(dirname "$VENV")"
    run_bounded "$INSTALL_TIMEOUT" python3 -m venv "$VENV" >&2
fi

want_hash="$(sha256sum "$REQS" | cut -d' ' -f1)"
have_hash="$(cat "$STAMP" 2>/dev/null || true)"
if [[ "$want_hash" != "$have_hash" ]]; then
    echo "installing $(tr '\n' ' ' < "$REQS")into $VENV" >&2
    run_bounded "$INSTALL_TIMEOUT" "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS" >&2
    printf '%s\n' "$want_hash" > "$STAMP"
fi

printf '%s\n' "$VENV/bin/python"
