#!/usr/bin/env python3
"""Interop check: the official Python MCP SDK's `Client` in its default `mode="auto"` (probe
`server/discover`, fall back to the initialize handshake on a legacy server) against a server
that speaks the revisions given by --expect.

Usage: python auto_client.py URL --expect 2026-07-28|2025-11-25 [--steps N]

Checks:
  1. the client negotiated the expected revision
  2. tools/list contains `progress_task`
  3. tools/call progress_task {"steps": N} answers, not an error, with text containing "done"

Prints one line per check, then `python-sdk auto: P passed, F failed`.
Exit status 0 iff every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import traceback

import anyio
from mcp.client.client import Client

from checks import Checks

OVERALL_TIMEOUT_S = 30.0
TOOL_NAME = "progress_task"


async def run_checks(url: str, expect: str, steps: int, checks: Checks) -> None:
    async with Client(url) as client:  # mode="auto", the SDK's default
        checks.check(f"negotiated {expect}", client.protocol_version == expect, f"got {client.protocol_version}")
        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        checks.check(f"tools/list contains {TOOL_NAME}", TOOL_NAME in names, f"tools={names}")
        result = await client.call_tool(TOOL_NAME, {"steps": steps, "delay_ms": 20})
        first = result.content[0] if result.content else None
        text = getattr(first, "text", None) if first is not None and first.type == "text" else None
        checks.check(
            "tools/call answered, not an error, with 'done'",
            not result.is_error and text is not None and "done" in text,
            f"isError={result.is_error} text={text!r}",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description="MCP Python SDK mode='auto' negotiation check")
    parser.add_argument("url")
    parser.add_argument("--expect", required=True, choices=["2026-07-28", "2025-11-25"])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    checks = Checks()

    async def bounded() -> None:
        with anyio.fail_after(OVERALL_TIMEOUT_S):
            await run_checks(args.url, args.expect, args.steps, checks)

    try:
        anyio.run(bounded)
    except Exception as e:  # noqa: BLE001 - report any failure as a failed check
        traceback.print_exc(file=sys.stderr)
        checks.check("the client ran to its end", False, f"{type(e).__name__}: {e}")
    print(f"python-sdk auto: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 0 if checks.failed == 0 and checks.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
