"""An MCP server built on the official Python SDK (mcp from PyPI), for `forkscope probe`.

It serves Streamable HTTP with the SDK's own session manager and adds nothing to the
transport: what the probe finds is what the SDK does. Two tools give the probe events:

- `progress_task {steps, delay_ms}`: a progress notification per step on the call's stream;
- `emit_standalone {count, delay_ms, label}`: returns at once, then sends `count`
  `notifications/resources/updated` (uri `urn:forkscope-probe:<label>:<n>`) on the session's
  standalone GET stream.

`--names other` names them as another server might, for the probe to find by schema alone:
`countdown {count, delay_ms}` (the progress tool) and `ping_all {count, delay_ms}`, which
notifies the session's standalone stream with `urn:ping-all:<n>`, unlabelled.

`--event-store memory` gives the session manager an in-memory event store written the way the
SDK's examples write theirs (uuid event ids, a bounded history per stream, replay of what
followed the given id on the same stream); without it the SDK has nothing to replay from.

Usage: probe_server.py --port N [--event-store none|memory] [--history N] [--names probe|other]
"""

import argparse
import asyncio
import collections
import logging
import uuid

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore


class BoundedMemoryEventStore(EventStore):
    """Event history per stream, the oldest dropped past `history` events."""

    def __init__(self, history: int):
        self.history = history
        self.streams: dict[str, collections.deque] = {}
        self.where: dict[str, str] = {}

    async def store_event(self, stream_id, message):
        event_id = str(uuid.uuid4())
        events = self.streams.setdefault(stream_id, collections.deque())
        if len(events) >= self.history:
            dropped_id, _ = events.popleft()
            self.where.pop(dropped_id, None)
        events.append((event_id, message))
        self.where[event_id] = stream_id
        return event_id

    async def replay_events_after(self, last_event_id, send_callback: EventCallback):
        stream_id = self.where.get(last_event_id)
        if stream_id is None:
            return None
        after = False
        for event_id, message in list(self.streams.get(stream_id, ())):
            if after and message is not None:
                await send_callback(EventMessage(message, event_id))
            elif event_id == last_event_id:
                after = True
        return stream_id


def build(store, names):
    server = MCPServer(name="forkscope-probe-python", version="1")
    background = set()

    async def progress(ctx, steps, delay_ms):
        steps = max(1, min(steps, 10_000))
        for n in range(1, steps + 1):
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            await ctx.report_progress(n, steps, f"step {n} of {steps}")
        return f"done after {steps} steps"

    def notify(ctx, count, delay_ms, uri):
        session = ctx.session
        count = max(1, min(count, 10_000))

        async def emit():
            for n in range(1, count + 1):
                await asyncio.sleep(max(delay_ms, 0) / 1000)
                try:
                    await session.send_resource_updated(uri(n))
                except Exception:  # the session ended: nothing left to send to
                    return

        task = asyncio.get_running_loop().create_task(emit())
        background.add(task)
        task.add_done_callback(background.discard)
        return f"emitting {count}"

    if names == "probe":

        @server.tool()
        async def progress_task(ctx: Context, steps: int = 5, delay_ms: int = 100) -> str:
            """Sends a progress notification per step, one every delay_ms milliseconds."""
            return await progress(ctx, steps, delay_ms)

        @server.tool()
        async def emit_standalone(ctx: Context, count: int = 10, delay_ms: int = 20, label: str = "x") -> str:
            """Sends count numbered notifications on the session's standalone stream, in the background."""
            return notify(ctx, count, delay_ms, lambda n: f"urn:forkscope-probe:{label}:{n}")

    else:

        @server.tool()
        async def countdown(ctx: Context, count: int = 200, delay_ms: int = 0) -> str:
            """Counts to count, reporting each number as it goes."""
            return await progress(ctx, count, delay_ms)

        @server.tool()
        async def ping_all(ctx: Context, count: int = 5, delay_ms: int = 50) -> str:
            """Pings this session's clients count times on the standalone stream, in the background."""
            return notify(ctx, count, delay_ms, lambda n: f"urn:ping-all:{n}")

    return server.streamable_http_app(event_store=store)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--event-store", choices=["none", "memory"], default="none")
    parser.add_argument("--history", type=int, default=100, help="events kept per stream")
    parser.add_argument("--names", choices=["probe", "other"], default="probe", help="the tools' names")
    args = parser.parse_args()
    store = BoundedMemoryEventStore(args.history) if args.event_store == "memory" else None
    logging.basicConfig(level=logging.WARNING)
    uvicorn.run(build(store, args.names), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
