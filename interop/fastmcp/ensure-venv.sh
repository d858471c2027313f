#!/usr/bin/env bash
# Makes sure the FastMCP venv exists with interop/fastmcp/requirements.txt installed (FastMCP
# with its tasks extension, a pair that installs cleanly: fastmcp-tasks 4.1.4 pins
# fastmcp-slim[server] 4.1.4), and prints the path of its python. Its own venv, apart from the
# Python SDK's: target/fastmcp-venv unless FORKSCOPE_FASTMCP_VENV names another.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
export FORKSCOPE_VENV="${FORKSCOPE_FASTMCP_VENV:-$REPO_ROOT/target/fastmcp-venv}"
export FORKSCOPE_REQUIREMENTS="$SCRIPT_DIR/requirements.txt"
exec "$REPO_ROOT/interop/python/ensure-venv.sh"
