"""The cleanup's share of a measured round: once the round's queues are empty, one cleanup
pass over what it left, on the same account, past every retention window, its requests
counted by kind.

The pass is the production one (``shared.cleanup.job.run_cleanup`` with every standard task
for the round's endpoints), given a clock moved past the longest window it applies (audit
retention, the ingress window, each mode's retention, the grace period), so that everything
a message left is removed in this one pass: token mode's incoming tokens and outbox records,
processed rows, state versions and message-id index rows, entity outbox entries, audit rows
and the client's ingress records. Its lease outlasts the pass, so the heartbeat, which renews
every few seconds whatever the pass's size, does not make the count depend on the machine's
speed; its budget is long enough for the pass to finish (a pass that does not finish fails
the round). The floor has no cleanup: it leaves nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from lab.bench.modes import as_mode
from lab.bench.residue import Residue, measure_residue
from lab.bench.stores import BenchRows
from lab.bench.workload import Names, build_app
from shared.bus.config import BusConfig
from shared.bus.state.rows import EndpointRows
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.errors import BusError
from shared.provisioning import provision
from shared.resources import Resources
from shared.stores.account import StorageAccount
from shared.stores.instrumented import Instrumentation, InstrumentedAccount

PASS_SECONDS = 3600.0
"""The pass's lease and budget: longer than any pass of the bench's sizes."""
MARGIN_SECONDS = 3600.0


class CleanupIncomplete(BusError):
    """The pass did not finish every task: its count would be part of the cleanup's cost."""


@dataclass
class CleanupCount:
    operations: dict[str, int] = field(default_factory=dict)
    """The pass's requests by kind."""
    removed: dict[str, int] = field(default_factory=dict)
    """What the pass removed, by what it was (its tasks' report)."""
    residue_after: Residue = field(default_factory=Residue)
    """What is left once it ran (uncounted): the business state rows only, if it did all."""
    request_units: float | None = None
    """What the Cosmos DB account charged the pass (None: the rows are elsewhere)."""


def past_every_window(config: BusConfig, settings: CleanupSettings) -> float:
    """Seconds after the round at which the pass runs: past everything it would keep."""
    return MARGIN_SECONDS + max(
        settings.grace_seconds,
        settings.audit_retention_seconds,
        config.ingress_window_seconds,
        config.processed_retention_seconds,
        config.state_stream_retention_seconds,
        config.entity_outbox_retention_seconds,
    )


async def clean_round(
    raw: StorageAccount,
    names: Names,
    bus_mode: str,
    config: BusConfig,
    stores: BenchRows | None = None,
) -> CleanupCount:
    """One counted cleanup pass over round ``names``, whose endpoints are in ``bus_mode``
    with their rows in ``stores`` (None: their tables)."""
    stores = stores or BenchRows("table")
    settings = CleanupSettings(
        checkpoint_table=f"ck{names.tag}",
        lease_seconds=PASS_SECONDS,
        budget_seconds=PASS_SECONDS,
    )
    later = past_every_window(config, settings)
    wall = config.clock
    moved = replace(config, clock=lambda: wall() + later)
    await _provision_cleanup_containers(raw, moved)
    instrumentation = Instrumentation()
    counted = InstrumentedAccount(raw, instrumentation)
    app = build_app(names, as_mode(bus_mode), stores.store)
    rows: dict[str, EndpointRows] = {
        e: stores.rows(e, counted, instrumentation) for e in names.endpoints
    }
    charged_before = None if stores.charges is None else stores.charges.units
    report = await run_cleanup(
        counted, endpoint_modes(app), rows=rows, config=moved, settings=settings
    )
    charged = (
        None
        if stores.charges is None or charged_before is None
        else stores.charges.units - charged_before
    )
    unfinished = [f"{t.task} ({t.skipped})" for t in report.tasks if not t.finished]
    if unfinished:
        raise CleanupIncomplete(f"the cleanup pass did not finish {unfinished}")
    kinds = Counter(op.kind for op in instrumentation.operations)
    return CleanupCount(
        operations=dict(sorted(kinds.items())),
        removed=dict(sorted(report.removed().items())),
        residue_after=await measure_residue(raw, names, stores),
        request_units=charged,
    )


async def _provision_cleanup_containers(raw: StorageAccount, config: BusConfig) -> None:
    """The containers the cleanup's other tasks list (shared payloads, parked and discarded
    messages), as a deployment has them; uncounted, as the round's own provisioning is."""
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
