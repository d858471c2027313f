#!/usr/bin/env python3
"""Interop check: the official Python MCP SDK (PyPI `mcp`) as a client against a
Streamable HTTP server (protocol revision 2025-11-25, initialize handshake).

Usage: python stock_client.py URL [--steps N]

Checks:
  1. initialize succeeds (handshake version 2025-11-25 offered by the SDK)
  2. tools/list contains a tool named `progress_task`
  3. tools/call progress_task {"steps": N} with a progress callback
     (the SDK sets params._meta.progressToken) receives exactly N progress
     notifications, progress 1..N in order, each with total N
  4. the result is not an error and its first content item is text containing "done"

Prints one line per check, then `python-sdk interop: P passed, F failed`.
Exit status 0 iff every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import traceback

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from checks import Checks

OVERALL_TIMEOUT_S = 30.0
TOOL_NAME = "progress_task"


async def run_checks(url: str, steps: int, checks: Checks) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with streamable_http_client(url) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream) as session:
            init = await session.initialize()
            checks.check(
                "initialize",
                True,
                f"protocolVersion={init.protocol_version} server={init.server_info.name!r} version={init.server_info.version!r}",
            )

            tools = await session.list_tools()
            names = [t.name for t in tools.tools]
            if not checks.check(f"tools/list contains {TOOL_NAME}", TOOL_NAME in names, f"tools={names}"):
                return

            result = await session.call_tool(
                TOOL_NAME,
                {"steps": steps},
                progress_callback=on_progress,
            )
            # The SDK dispatches each progress callback as its own task (start_soon),
            # so let already-delivered notifications drain before counting them.
            for _ in range(10):
                await anyio.sleep(0)
            await anyio.sleep(0.1)

            values = [p[0] for p in progress]
            totals = [p[1] for p in progress]
            expected = [float(i) for i in range(1, steps + 1)]
            checks.check(
                f"received exactly {steps} progress notifications",
                len(progress) == steps,
                f"got {len(progress)}",
            )
            checks.check(
                f"progress values are 1..{steps} in order",
                values == expected,
                f"got {values}",
            )
            checks.check(
                f"progress total is {steps} on every notification",
                len(totals) > 0 and all(t == steps for t in totals),
                f"got {totals}",
            )

            checks.check("tools/call result is not an error", not result.is_error, f"isError={result.is_error}")
            first = result.content[0] if result.content else None
            text = getattr(first, "text", None) if first is not None and first.type == "text" else None
            checks.check(
                "first content item is text containing 'done'",
                text is not None and "done" in text,
                f"got {first!r}",
            )


def main() -> int:
    parser = argparse.ArgumentParser(description="MCP Python SDK interop check (Streamable HTTP)")
    parser.add_argument("url", help="MCP endpoint URL, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--steps", type=int, default=5, help="progress steps to request (default 5)")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    checks = Checks()

    async def bounded() -> None:
        with anyio.fail_after(OVERALL_TIMEOUT_S):
            await run_checks(args.url, args.steps, checks)

    try:
        anyio.run(bounded)
    except TimeoutError:
        checks.check("run completed", False, f"timed out after {OVERALL_TIMEOUT_S:.0f}s")
    except BaseException as exc:  # noqa: BLE001 - report anything (incl. ExceptionGroup) as a failure
        if isinstance(exc, KeyboardInterrupt):
            raise
        # Unwrap single-exception groups from anyio task groups for a readable message.
        inner = exc
        while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
            inner = inner.exceptions[0]
        if isinstance(inner, TimeoutError):
            checks.check("run completed", False, f"timed out after {OVERALL_TIMEOUT_S:.0f}s")
        else:
            checks.check("run completed", False, f"{type(inner).__name__}: {inner}")
            traceback.print_exception(exc, file=sys.stderr)

    if checks.passed == 0 and checks.failed == 0:
        checks.check("run completed", False, "no checks executed")

    print(f"python-sdk interop: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
