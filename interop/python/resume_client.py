#!/usr/bin/env python3
"""Resumption interop: the official Python MCP SDK (PyPI `mcp`) as a stock client of
`forkscope serve`, reached through `forkscope proxy`, which cuts the connection mid-stream.

Usage:
  resume_client.py URL --case tool|stream --policy fenced|naive \
      --proxy-ctl FIFO --proxy-out FILE [--steps 25 --delay-ms 40 --drop-at 10] [--settle 5]

  URL          the proxy's endpoint (http://127.0.0.1:P/mcp)
  --proxy-ctl  the proxy's command input (a fifo the harness keeps open); this client writes
               `drop` there at the right moment
  --proxy-out  the proxy's stdout log, where it answers `ok drop N`

Case `tool` (a tool call cut mid-call): call progress_task {steps, delay_ms} with a progress
callback; when progress `--drop-at` has arrived, NAT-drop every connection. The SDK alone must
resume (it GETs /mcp with Last-Event-ID after the server's `retry:`).
  fenced: every progress value 1..steps arrives exactly once, in order, and so does the result.
  naive:  the resume lands on a fresh standalone stream: the result never arrives (bounded wait),
          the progress stops (damage, expected).

Case `stream` (the standalone GET stream cut): collect `notifications/message` through the SDK's
logging callback; after 5 arrived, NAT-drop; after the SDK reconnected, collect until the
background counter passes the pre-drop maximum by `--settle`.
  fenced: the `background` numbers are strictly consecutive: no duplicate, no gap.
  naive:  the new stream replays the session's backlog from its start: numbers repeat (damage,
          expected).

Only the SDK's public API is used: `streamable_http_client` (given an httpx2 client whose event
hooks record the requests on the wire), `ClientSession` with `logging_callback`, and
`call_tool(progress_callback=...)`.

Prints one `PASS name (detail)` / `FAIL name: detail` line per check and `note:` lines.
Exit status 0 iff every check passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from checks import Checks

TOOL_NAME = "progress_task"
CASE_TIMEOUT_S = 40.0
ACK_TIMEOUT_S = 5.0


def note(text: str) -> None:
    print(f"note: {text}", flush=True)


def short(value: str | None, keep: int = 24) -> str:
    if value is None:
        return "-"
    return value if len(value) <= keep else value[: keep - 1] + "…"


@dataclass
class Exchange:
    t: float
    method: str
    last_event_id: str | None
    status: int
    content_type: str


@dataclass
class Wire:
    """What went over HTTP, recorded by httpx2 event hooks (headers only; bodies stay unread)."""

    t0: float = field(default_factory=time.monotonic)
    exchanges: list[Exchange] = field(default_factory=list)

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        self.exchanges.append(
            Exchange(
                t=time.monotonic() - self.t0,
                method=request.method,
                last_event_id=request.headers.get("last-event-id"),
                status=response.status_code,
                content_type=response.headers.get("content-type", "").split(";")[0],
            )
        )

    def resumes_between(self, t0: float, t1: float) -> list[Exchange]:
        """GETs with Last-Event-ID from the drop until the client began to close its session."""
        return [x for x in self.exchanges if x.method == "GET" and x.last_event_id and t0 <= x.t < t1]


def describe(resumes: list[Exchange], t_drop: float) -> str:
    return ", ".join(
        f"GET Last-Event-ID={short(x.last_event_id)} -> {x.status} {x.content_type or ''} +{(x.t - t_drop) * 1000:.0f}ms".rstrip()
        for x in resumes
    )


def check_resumes(checks: Checks, naive: bool, resumes: list[Exchange], t_drop: float) -> None:
    """The SDK resumed with GET + Last-Event-ID. Fenced: every such GET is answered 200 (every
    stream the drop cut is resumed). Naive: one 200 is enough (it is a fresh stream anyway)."""
    ok = any(x.status == 200 for x in resumes) and (naive or all(x.status == 200 for x in resumes))
    checks.check(
        "SDK resumed with GET + Last-Event-ID, answered 200" + ("" if naive else " every time"),
        ok,
        describe(resumes, t_drop) or "no GET with Last-Event-ID after the drop",
    )


class ProxyControl:
    """Writes commands into the proxy's stdin fifo and waits for its `ok CMD N` answers."""

    def __init__(self, ctl: str, out: str) -> None:
        self.ctl = ctl
        self.out = out

    def _answers(self, cmd: str) -> list[str]:
        try:
            with open(self.out, encoding="utf-8", errors="replace") as f:
                return [line.strip() for line in f if line.startswith(f"ok {cmd}")]
        except FileNotFoundError:
            return []

    def send(self, cmd: str) -> int:
        """Sends a command; returns how many answers to it there were before."""
        before = len(self._answers(cmd))
        # Non-blocking: if nobody reads the fifo (the proxy died), fail at once instead of hanging.
        fd = os.open(self.ctl, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, f"{cmd}\n".encode())
        finally:
            os.close(fd)
        return before

    async def answer(self, cmd: str, before: int, timeout: float = ACK_TIMEOUT_S) -> int | None:
        """Waits for the answer to the command sent after `before` answers; returns N or None."""
        with anyio.move_on_after(timeout):
            while True:
                answers = self._answers(cmd)
                if len(answers) > before:
                    try:
                        return int(answers[before].split()[-1])
                    except ValueError:
                        return -1
                await anyio.sleep(0.02)
        return None


def http_client(wire: Wire) -> httpx2.AsyncClient:
    # The SDK's own defaults (create_mcp_http_client): 30 s, 300 s read for streams.
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"response": [wire.on_response]},
    )


async def drain_callbacks() -> None:
    # The SDK runs each callback as its own task: let delivered ones run before counting.
    for _ in range(10):
        await anyio.sleep(0)
    await anyio.sleep(0.1)


async def case_tool(args: argparse.Namespace, checks: Checks, proxy: ProxyControl) -> None:
    naive = args.policy == "naive"
    steps, drop_at = args.steps, args.drop_at
    wire = Wire()
    progress: list[float] = []
    drop = {"sent": False, "t": None, "at": None, "before": 0}

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if not drop["sent"] and value >= drop_at:
            drop["sent"] = True
            drop["t"] = time.monotonic() - wire.t0
            drop["at"] = value
            drop["before"] = proxy.send("drop")

    # The whole call may take its own run time plus a few reconnect delays; past this bound
    # the result is taken as lost.
    bound = steps * args.delay_ms / 1000.0 + args.lost_after
    result = None
    error: str | None = None
    async with http_client(wire) as client:
        async with streamable_http_client(args.url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                note(f"python: initialized, protocolVersion={init.protocol_version}")
                with anyio.move_on_after(bound):
                    try:
                        result = await session.call_tool(
                            TOOL_NAME,
                            {"steps": steps, "delay_ms": args.delay_ms},
                            progress_callback=on_progress,
                        )
                    except Exception as exc:  # noqa: BLE001 - the SDK's give-up surfaces here
                        error = f"{type(exc).__name__}: {exc}"
                await drain_callbacks()
                t_end = time.monotonic() - wire.t0

    if not checks.check(
        f"drop sent at progress {drop_at}", drop["sent"], f"sent at progress {drop['at']:.0f}" if drop["sent"] else f"progress seen: {progress}"
    ):
        return
    acked = await proxy.answer("drop", drop["before"])
    checks.check("proxy dropped the connections", acked is not None and acked >= 1, f"ok drop {acked}")
    check_resumes(checks, naive, wire.resumes_between(drop["t"], t_end), drop["t"])

    expected = [float(i) for i in range(1, steps + 1)]
    text = None
    if result is not None:
        first = result.content[0] if result.content else None
        text = getattr(first, "text", None)
    got_result = result is not None and not result.is_error and text is not None and "done" in text
    seen = f"{len(progress)} values: {compact(progress)}"
    if not naive:
        checks.check(f"progress 1..{steps} each exactly once, in order", progress == expected, seen)
        checks.check(
            "the tool call's result arrived",
            got_result,
            f"text={text!r}" if result is not None else (error or f"no result within {bound:.1f}s"),
        )
        return
    # naive: the reconnect without forkscope's token minted a fresh stream; the call's
    # remaining progress and its result went to the orphan the proxy drains.
    if got_result:
        checks.check(
            "damage seen (expected under naive): tool-call result lost",
            False,
            f"the result arrived ({text!r}) after {t_end:.1f}s: naive no longer loses it, behaviour changed",
        )
    else:
        why = error or f"no result within {bound:.1f}s of the call (cut at progress {drop['at']:.0f})"
        checks.check("damage seen (expected under naive): tool-call result lost", True, why)
    checks.check(
        "damage seen (expected under naive): progress incomplete or repeated",
        progress != expected,
        seen,
    )


def compact(values: list[float]) -> str:
    """1,2,3,4,7,7,8 -> '1-4,7,7-8'."""
    ints = [int(v) if float(v).is_integer() else v for v in values]
    out: list[str] = []
    i = 0
    while i < len(ints):
        j = i
        while j + 1 < len(ints) and isinstance(ints[j], int) and ints[j + 1] == ints[j] + 1:
            j += 1
        out.append(str(ints[i]) if i == j else f"{ints[i]}-{ints[j]}")
        i = j + 1
    return ",".join(out) if out else "(none)"


def analyse(numbers: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Duplicates, and gaps (a, b) where b came right after a with b != a + 1 and b > a."""
    seen: set[int] = set()
    dups: list[int] = []
    gaps: list[tuple[int, int]] = []
    for i, n in enumerate(numbers):
        if n in seen:
            dups.append(n)
        seen.add(n)
        if i and n > numbers[i - 1] + 1:
            gaps.append((numbers[i - 1], n))
    return dups, gaps


async def case_stream(args: argparse.Namespace, checks: Checks, proxy: ProxyControl) -> None:
    naive = args.policy == "naive"
    wire = Wire()
    numbers: list[int] = []
    other: list[str] = []
    arrived = anyio.Event()

    async def on_log(params) -> None:  # types.LoggingMessageNotificationParams
        data = params.data
        if isinstance(data, dict) and isinstance(data.get("background"), int):
            numbers.append(data["background"])
            arrived.set()
        else:
            other.append(repr(data))

    before_n = args.before
    result = {"max_before": None, "t": None, "t_end": None, "count_before": 0, "reached": False, "before_ok": False}
    async with http_client(wire) as client:
        async with streamable_http_client(args.url, http_client=client) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log) as session:
                init = await session.initialize()
                note(f"python: initialized, protocolVersion={init.protocol_version}")
                with anyio.move_on_after(args.wait):
                    while len(numbers) < before_n:
                        await anyio.sleep(0.01)
                    result["before_ok"] = True
                if result["before_ok"]:
                    result["max_before"] = max(numbers)
                    result["count_before"] = len(numbers)
                    result["t"] = time.monotonic() - wire.t0
                    sent_before = proxy.send("drop")
                    acked = await proxy.answer("drop", sent_before)
                    target = result["max_before"] + args.settle
                    with anyio.move_on_after(args.wait):
                        while not numbers or max(numbers) < target:
                            await anyio.sleep(0.01)
                        result["reached"] = True
                    # A moment more, so a late replay shows up in what is judged.
                    await anyio.sleep(0.2)
                    await drain_callbacks()
                result["t_end"] = time.monotonic() - wire.t0

    if not checks.check(
        f"{before_n} background notifications before the drop",
        result["before_ok"],
        f"got {len(numbers)}: {compact(numbers)}" if not result["before_ok"] else f"numbers {compact(numbers[: result['count_before']])}",
    ):
        return
    checks.check("proxy dropped the connections", acked is not None and acked >= 1, f"ok drop {acked}")
    check_resumes(checks, naive, wire.resumes_between(result["t"], result["t_end"]), result["t"])
    after = numbers[result["count_before"] :]
    checks.check(
        f"background counter reached {result['max_before'] + args.settle} after the reconnect",
        result["reached"],
        f"after the drop: {compact(after)}" if result["reached"] else f"within {args.wait:.0f}s only: {compact(after)}",
    )
    dups, gaps = analyse(numbers)
    seen = f"seen {compact(numbers)} (cut after {result['max_before']})"
    if other:
        note(f"python: other log messages: {other[:5]}")
    if not naive:
        checks.check(
            "background numbers strictly consecutive, no duplicate, no gap",
            not dups and not gaps and result["reached"],
            seen + (f"; duplicates {dups}" if dups else "") + (f"; gaps {gaps}" if gaps else ""),
        )
        return
    detail = seen + f"; duplicates {compact(dups)}" + (f"; gaps {gaps}" if gaps else "")
    checks.check(
        "damage seen (expected under naive): background numbers repeat",
        bool(dups),
        detail if dups else seen + "; no duplicate: naive no longer replays the backlog, behaviour changed",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description="Python MCP SDK resumption interop (through forkscope proxy)")
    parser.add_argument("url")
    parser.add_argument("--case", choices=["tool", "stream"], required=True)
    parser.add_argument("--policy", choices=["fenced", "naive"], required=True)
    parser.add_argument("--proxy-ctl", required=True)
    parser.add_argument("--proxy-out", required=True)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--delay-ms", type=int, default=40)
    parser.add_argument("--drop-at", type=int, default=10)
    parser.add_argument("--lost-after", type=float, default=5.0, help="seconds past the call's run time before its result counts as lost")
    parser.add_argument("--before", type=int, default=5, help="background notifications before the drop")
    parser.add_argument("--settle", type=int, default=5, help="collect until the counter passes the pre-drop maximum by this")
    parser.add_argument("--wait", type=float, default=12.0, help="bound on each wait of the stream case, seconds")
    args = parser.parse_args()
    if not 1 <= args.drop_at < args.steps:
        parser.error("--drop-at must be from 1 to steps-1")

    checks = Checks()
    proxy = ProxyControl(args.proxy_ctl, args.proxy_out)
    case = case_tool if args.case == "tool" else case_stream

    async def bounded() -> None:
        with anyio.fail_after(CASE_TIMEOUT_S):
            await case(args, checks, proxy)

    try:
        anyio.run(bounded)
    except BaseException as exc:  # noqa: BLE001 - report anything (incl. ExceptionGroup) as a failure
        if isinstance(exc, KeyboardInterrupt):
            raise
        inner = exc
        while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
            inner = inner.exceptions[0]
        if isinstance(inner, TimeoutError):
            checks.check("case completed", False, f"timed out after {CASE_TIMEOUT_S:.0f}s")
        else:
            checks.check("case completed", False, f"{type(inner).__name__}: {inner}")
            traceback.print_exception(exc, file=sys.stderr)
    if checks.passed == 0 and checks.failed == 0:
        checks.check("case completed", False, "no checks executed")
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
