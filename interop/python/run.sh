#!/usr/bin/env bash
# Run an official Python MCP SDK interop client against a Streamable HTTP server.
# Usage: run.sh URL [stock_client.py args, e.g. --steps N]
#        run.sh --client resume_client.py URL [its args]
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLIENT="stock_client.py"
if [[ "${1:-}" == "--client" ]]; then
    CLIENT="${2:?--client needs a file name}"
    shift 2
fi
if [[ $# -lt 1 ]]; then
    echo "usage: $0 [--client FILE.py] URL [client args]" >&2
    exit 2
fi

PYTHON="$("$SCRIPT_DIR/ensure-venv.sh")"
exec "$PYTHON" "$SCRIPT_DIR/$CLIENT" "$@"
