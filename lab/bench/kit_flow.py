"""``python -m lab.bench.kit_flow``: what the test kit (``shared.testing``) costs a user's
test. ``--messages`` commands (100 by default) are sent to the first endpoint of a
three-endpoint flow (``front`` sends each on to ``middle``, which publishes an event that
``back`` handles), and the kit runs until quiet; every message goes through the real
pipeline over the in-memory stores, each storage operation through the instrumented account.

It prints the wall time of the sends, of the run until quiet and of both, the deliveries
and storage operations made, and the machine's load (``uptime``), best of ``--repeat`` runs
(each on a fresh kit)."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from collections.abc import Sequence

from pydantic import BaseModel

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.testing import BusKit


class Take(Command):
    partition_by = "key"
    key: str


class Pass(Command):
    partition_by = "key"
    key: str


class Passed(Event):
    partition_by = "key"
    key: str


class Count(BaseModel):
    seen: int = 0


def flow_app() -> BusApp:
    app = BusApp()
    front = app.endpoint("front", Count)
    middle = app.endpoint("middle", Count)
    back = app.endpoint("back", Count)

    @front.handles(Take)
    def take(ctx: HandlerContext[Count], cmd: Take) -> None:
        ctx.state.seen += 1
        ctx.send(Pass(key=cmd.key), to="middle")

    @middle.handles(Pass)
    def forward(ctx: HandlerContext[Count], cmd: Pass) -> None:
        ctx.state.seen += 1
        ctx.publish(Passed(key=cmd.key))

    @back.handles(Passed)
    def count(ctx: HandlerContext[Count], event: Passed) -> None:
        ctx.state.seen += 1

    return app


async def one_run(app: BusApp, messages: int) -> tuple[float, float, int, int]:
    """Seconds to send and to run until quiet, deliveries and storage operations."""
    kit = BusKit(app)
    started = time.perf_counter()
    for n in range(messages):
        await kit.send(Take(key=f"k{n % 10}"), to="front")
    sent = time.perf_counter()
    await kit.run_until_quiet()
    done = time.perf_counter()
    applied = sum([(await kit.state("back", f"k{n}", Count)).seen for n in range(10)])
    if applied != messages:
        raise SystemExit(f"back applied {applied} messages, {messages} were sent")
    return sent - started, done - sent, sum(kit.outcomes.values()), kit.instrumentation.count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    app = flow_app()
    runs = [asyncio.run(one_run(app, args.messages)) for _ in range(args.repeat)]
    send, run, deliveries, operations = min(runs, key=lambda r: r[0] + r[1])
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    print(f"kit flow: {args.messages} messages through 3 endpoints, best of {args.repeat}")
    print(f"  sends        {send:.3f} s")
    print(f"  until quiet  {run:.3f} s ({deliveries} deliveries, {operations} storage operations)")
    print(f"  total        {send + run:.3f} s")
    print(f"  all runs     {', '.join(f'{s + r:.3f}' for s, r, _, _ in runs)} s")
    print(f"  load         {load.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
