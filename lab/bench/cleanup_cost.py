"""What the cleanup costs per processed message: the bench's workload drained in one process
on the in-memory stores, then one cleanup pass a grace period later, its storage requests
counted by kind.

Token mode leaves R7 to the cleanup (issue 33, docs/claim-by-delete.md), so this is where
the request it took off the hot path went. ``make bench`` now counts the cleanup as well, on
Azurite and past every retention window (``lab.bench.cleanup_pass``); this pass comes only a
grace period later, so it counts what goes with the tokens, not what waits for a retention
window. The in-memory stores make the counts exact and the same on
every run; the cleanup's requests are the same on Azure (its batch delete is one request per
64 tokens there too), only its timing is not measured here.

    .venv/bin/python -m lab.bench.cleanup_cost [--roots N] [--modes token processed_messages]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Sequence

from lab.bench.modes import as_mode
from lab.bench.seed import provision_run, seed
from lab.bench.workload import Names, build_app
from shared.bus import Bus, BusConfig
from shared.bus.state.rows import TableRows
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.provisioning import provision
from shared.resources import Resources
from shared.stores.instrumented import Instrumentation, InstrumentedAccount
from shared.stores.memory import MemoryStorageAccount


class _Clock:
    """The bus's clock, moved on by hand: the cleanup's pass comes a grace period later."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def _drain(bus: Bus, raw: MemoryStorageAccount, names: Names) -> int:
    handled = 0
    busy = True
    while busy:
        busy = False
        for endpoint in names.endpoints:
            for message in await raw.queue(endpoint).receive(32, visibility_timeout=60):
                await bus.receive(endpoint, message.content, message.dequeue_count)
                await raw.queue(endpoint).delete(message.id, message.pop_receipt)
                handled += 1
                busy = True
    return handled


async def measure(mode: str, roots: int) -> dict[str, object]:
    """Drain ``roots`` roots in ``mode``, then one cleanup pass past the grace period; the
    pass's requests by kind, per handled message, and what the pass removed."""
    clock = _Clock()
    raw = MemoryStorageAccount(clock)
    names = Names(f"c{mode[:3]}")
    config = BusConfig(
        tokens_container=names.tokens,
        topics_container=names.topics,
        ingress_table=names.ingress,
        clock=clock,
    )
    await provision_run(raw, names)
    # The containers the cleanup's other tasks read (shared payloads, parked and discarded
    # messages), under their default names: this account is the run's alone.
    await provision(
        raw,
        Resources(
            containers={
                "payloads": config.payloads_container,
                "parked": config.parked_container,
                "discarded": config.discarded_container,
            },
            tables={},
            endpoints=(),
        ),
    )
    await seed(raw, names, mode, config, roots, roots)
    app = build_app(names, as_mode(mode))
    handled = await _drain(Bus(app, raw, config), raw, names)
    settings = CleanupSettings()
    clock.now += settings.grace_seconds + 1
    instrumentation = Instrumentation()
    counted = InstrumentedAccount(raw, instrumentation)
    report = await run_cleanup(
        counted,
        endpoint_modes(app),
        rows={e: TableRows(counted.table(e)) for e in names.endpoints},
        config=config,
        settings=CleanupSettings(checkpoint_table=f"ck{names.tag}"),
    )
    kinds = Counter(op.kind for op in instrumentation.operations)
    removed: Counter[str] = Counter()
    for task in report.to_dict()["tasks"]:
        removed.update(task.get("removed", {}))
    tokens_left = len([b async for b in raw.blob_container(names.tokens).list()])
    return {
        "mode": mode,
        "handled": handled,
        "cleanup_requests": sum(kinds.values()),
        "per_message": round(sum(kinds.values()) / handled, 3),
        "by_kind": dict(sorted(kinds.items())),
        "removed": dict(sorted(removed.items())),
        "tokens_left": tokens_left,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, default=500)
    parser.add_argument("--modes", nargs="+", default=["token"])
    args = parser.parse_args(argv)
    for mode in args.modes:
        print(json.dumps(asyncio.run(measure(mode, args.roots))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
