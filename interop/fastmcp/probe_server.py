r"""A FastMCP server with the SEP-2663 tasks extension, for `forkscope probe`.

Built on `fastmcp-tasks==4.1.4` (which pins `fastmcp-slim[server]==4.1.4`, on `mcp` 2.3.0 and
`pydocket`). It serves Streamable HTTP at `/mcp`: the 2025-11-25 handshake era (initialize,
`Mcp-Session-Id`, standalone GET stream) and the 2026-07-28 per-request era (`server/discover`,
no session) on the same endpoint, with FastMCP's own transport and nothing added to it.

Tools (the probe picks them by their input schema):

- `progress_task {steps, delay_ms, label}`: task support "optional" (`task=True`): a plain call
  runs in the foreground and sends a progress notification per step on the call's stream; a
  2026-07-28 call whose `_meta` opts into `io.modelcontextprotocol/tasks` is answered at once
  with a `CreateTaskResult` and runs on the Docket worker (progress then goes to the task's
  Docket record, not to the wire). Either way the body sleeps `delay_ms` per step, records each
  step as a side effect (a line appended to `--effects`, flushed: `wc -l` counts them, as for
  `forkscope serve --effects-file`), and returns "done: {steps} steps".
- `emit_standalone {count, delay_ms, label}`: returns at once, then sends `count`
  `notifications/resources/updated` (uri `urn:forkscope-probe:<label>:<n>`) on the session's
  standalone GET stream. Handshake era only: a 2026-07-28 request has no session and no
  standing server-to-client stream, so there it sends nothing and says so in its result.

Backends (`--backend`): `memory` is Docket's in-process `memory://` (BurnerRedis): tasks live
in this process only, are invisible to any other process, and are gone when it exits.
`redis` points Docket at `--redis-url`; this process still runs its own Docket worker (the
tasks extension's lifespan starts one), so no separate worker is needed. Every process on the
same URL and Docket name ("fastmcp") shares one queue and may run any process's task. A task
whose worker stops renewing its lease for `--redelivery-timeout` seconds (default 300) is run
again from the start by another worker: at least once, so a stalled worker that wakes up
records the effect a second time. Extra workers may join the queue:

    FASTMCP_DOCKET_URL=redis://127.0.0.1:6379/0 FORKSCOPE_PROBE_EFFECTS=FILE \
        python -m fastmcp_tasks.worker_cli worker interop/fastmcp/probe_server.py

(that loads the module-level `mcp` below, configured from the environment).

Usage: probe_server.py --port N [--host H] [--backend memory|redis] [--redis-url URL]
                       [--effects FILE] [--redelivery-timeout SECONDS]
"""

import argparse
import asyncio
import os
import time
from datetime import timedelta

from fastmcp import Context, FastMCP
from fastmcp_tasks import TasksExtension
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


def record_effect(path, line):
    """Appends one line to `path` in a single write, so `wc -l` counts side effects."""
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def build(url=None, effects=None, redelivery_timeout=None):
    server = FastMCP(name="forkscope-probe-fastmcp", version="1")
    # What is left as None falls back to the FASTMCP_DOCKET_* environment, then to Docket's
    # defaults (memory://, redelivery after 300 s).
    server.add_extension(TasksExtension(url=url, redelivery_timeout=redelivery_timeout))
    background = set()

    @server.tool(task=True)
    async def progress_task(ctx: Context, steps: int = 3, delay_ms: int = 100, label: str = "") -> str:
        """Sends a progress notification per step, one every delay_ms milliseconds; may run as a task."""
        steps = max(1, min(steps, 10_000))
        where = f"task {ctx.task_id}" if ctx.is_background_task else "foreground"
        for n in range(1, steps + 1):
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            # Each step is the side effect (a line), as forkscope serve --effects-file counts.
            record_effect(effects, f"{time.time():.6f} pid={os.getpid()} {where} label={label!r} step {n} of {steps}")
            await ctx.report_progress(n, steps, f"step {n} of {steps}")
        return f"done: {steps} steps"

    @server.tool()
    async def emit_standalone(ctx: Context, count: int = 3, delay_ms: int = 10, label: str = "") -> str:
        """Sends count numbered notifications on the session's standalone stream, in the background."""
        count = max(1, min(count, 10_000))
        rc = ctx.request_context
        if rc is not None and rc.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # Sessionless: a notification not related to this request has nowhere to go.
            return f"nothing emitted: {rc.protocol_version} has no standalone stream"
        try:
            send = ctx.session.send_resource_updated
        except (RuntimeError, AttributeError):
            return "nothing emitted: no session"

        async def emit():
            for n in range(1, count + 1):
                await asyncio.sleep(max(delay_ms, 0) / 1000)
                try:
                    await send(f"urn:forkscope-probe:{label}:{n}")
                except Exception:  # the session ended: nothing left to send to
                    return

        task = asyncio.get_running_loop().create_task(emit())
        background.add(task)
        task.add_done_callback(background.discard)
        return f"emitting {count}"

    return server


# For `python -m fastmcp_tasks.worker_cli worker interop/fastmcp/probe_server.py`: configured
# from the environment (FASTMCP_DOCKET_URL, FORKSCOPE_PROBE_EFFECTS).
mcp = build(None, os.environ.get("FORKSCOPE_PROBE_EFFECTS"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--backend", choices=["memory", "redis"], default="memory")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="for --backend redis")
    parser.add_argument("--effects", help="append one line per step of progress_task (its side effect) here")
    parser.add_argument(
        "--redelivery-timeout",
        type=float,
        metavar="SECONDS",
        help="Docket's redelivery timeout: a task whose worker stops renewing its lease this long "
        "is run again by another worker (default 300)",
    )
    args = parser.parse_args()
    url = args.redis_url if args.backend == "redis" else "memory://"
    redelivery = timedelta(seconds=args.redelivery_timeout) if args.redelivery_timeout else None
    server = build(url, args.effects, redelivery)
    server.run(
        transport="http",
        host=args.host,
        port=args.port,
        path="/mcp",
        show_banner=False,
        log_level="WARNING",
    )


if __name__ == "__main__":
    main()
