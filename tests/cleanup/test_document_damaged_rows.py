"""Damaged partition documents, written straight into the store as anyone who may write to it
could (an operator, a script, an attacker): a document that is not JSON, JSON that is not an
object, a document that names another partition than its key, one whose row is not
``[version, properties]``, and a well-formed document holding a row whose properties the bus
cannot read. The cleanup hands each to ``on_damaged`` (the task counts it as a bad row, with
its document and why), keeps it as it is, and cleans every other row of its page, pass after
pass: nothing is deleted wrongly, and one damaged document keeps nothing else from being read.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shared.bus.app import Mode
from shared.bus.modes.processed_table import PROCESSED_PREFIX
from shared.bus.modes.state_based import version_row
from shared.bus.records import AUDIT_PREFIX, STATE_ROW, outbox_row
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.resources import rows_container
from shared.stores.documents import document_key
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.table import Entity
from tests.bus.flow import FlowNames, Ledger, PlaceOrder, build_flow
from tests.bus.harness import (
    MODES,
    DocumentBackend,
    Harness,
    document_backends,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend")
)
from tests.conftest import Backend, unique_name

DAY = 86_400.0
LATER = 8 * DAY
"""Past every window mode's retention and the audit's (``audit_retention_seconds`` below)."""
TASK: dict[Mode, tuple[str, str, int]] = {
    "token": ("outbox", "outbox_records", 4),
    "processed_messages": ("processed_rows", "processed_rows", 4),
    "state_based": ("state_versions", "state_versions", 1),  # o1's first version
    "entity_outbox": ("entity_outbox_entries", "entity_outbox_entries", 4),
}
"""Per mode: the cleanup task that pages through the mode's rows, what it removes and how
many the flow leaves for it (orders o1, o2, o3 and o1 again)."""


def mode_row(mode: Mode, partition: str) -> str:
    """A row key of the mode's own rows, which its task reads."""
    if mode == "token":
        return outbox_row(f"{partition}-message")
    if mode == "processed_messages":
        return f"{PROCESSED_PREFIX}{partition}-message"
    return version_row(1) if mode == "state_based" else STATE_ROW


def damaged_documents(mode: Mode) -> dict[str, bytes]:
    """Stored bytes the bus cannot read, by partition key: keys sort among the good
    documents' (o1, o2, o3), so every page of the flow's rows meets them."""

    def document(partition: str, rows: object, pk: str | None = None) -> bytes:
        content = {"f": 1, "pk": partition if pk is None else pk, "w": None, "rows": rows}
        return json.dumps(content).encode()

    unreadable = [["v1", {"committed_at": ["moment", 1], "now": ["datetime", "yesterday"]}]]
    return {
        "o1-not-json": b"not json {",
        "o1-not-an-object": b'["a", "list"]',
        "o2-other-partition": document("o9", {mode_row(mode, "o9"): ["v", {}]}),
        "o2-row-not-a-pair": document("o2-row-not-a-pair", {mode_row(mode, "x"): "v"}),
        "o2-no-rows": document("o2-no-rows", ["not", "a", "map"]),
        "o3-unreadable-row": document(
            "o3-unreadable-row", {mode_row(mode, "o3-unreadable-row"): unreadable[0]}
        ),
    }


async def store_damaged(harness: Harness, backend: Backend, endpoint: str, mode: Mode) -> None:
    """Each damaged document written where the endpoint's documents are, bypassing the bus."""
    assert isinstance(backend, DocumentBackend)
    for partition, data in damaged_documents(mode).items():
        key = document_key(partition)
        if isinstance(backend.cosmos, MemoryDocumentDatabase):
            stored = backend.cosmos.containers.setdefault(endpoint, {})
            stored[key] = (data, backend.cosmos.new_etag())
        else:
            container = harness.raw.blob_container(rows_container(endpoint))
            await container.create(key, data)


async def stored_damaged(harness: Harness, backend: Backend, endpoint: str) -> dict[str, bytes]:
    """The damaged documents as stored now, by partition key."""
    assert isinstance(backend, DocumentBackend)
    found: dict[str, bytes] = {}
    for partition in damaged_documents("token"):
        key = document_key(partition)
        if isinstance(backend.cosmos, MemoryDocumentDatabase):
            found[partition] = backend.cosmos.containers[endpoint][key][0]
        else:
            container = harness.raw.blob_container(rows_container(endpoint))
            found[partition] = (await container.read(key)).data
    return found


async def flow(backend: Backend, mode: Mode) -> tuple[Harness, FlowNames]:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, mode=mode))
    for order, key in (("o1", "o1"), ("o2", "o2"), ("o3", "o3"), ("o1", "o1-again")):
        await harness.setup_bus.client().send(
            PlaceOrder(order_id=order, amount=5), to=names.orders, idempotency_key=key
        )
    await harness.run_until_quiet()
    return harness, names


async def cleanup(harness: Harness, later: float, page_size: int) -> CleanupReport:
    clock = harness.config.clock
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: clock() + later),
        settings=CleanupSettings(
            budget_seconds=600,
            page_size=page_size,
            audit_retention_seconds=DAY,
            checkpoint_table=unique_name("cleanup"),
        ),
    )


def task(report: CleanupReport, task_id: str) -> TaskReport:
    [found] = [t for t in report.tasks if t.task == task_id]
    return found


WRITABLE = [p for p in document_backends(MODES, real=["token"]) if p.values[0][0] != "cosmos"]
"""The stores a test can write any bytes into: a Cosmos DB server keeps JSON objects only, so
what damage its items can carry (foreign or reserved properties) is checked at its adapter
(``tests/stores/test_cosmos_adapter.py``); here the model stands for it."""


@pytest.mark.parametrize("backend", WRITABLE, indirect=True)
@pytest.mark.parametrize("page_size", [100, 2])
async def test_damaged_documents_are_passed_over_and_the_rest_is_cleaned(
    backend: Backend, mode: Mode, page_size: int
) -> None:
    harness, names = await flow(backend, mode)
    await store_damaged(harness, backend, names.orders, mode)
    before = await stored_damaged(harness, backend, names.orders)
    task_id, kind, removable = TASK[mode]
    audit_rows = len(await good_rows(harness, names.orders, AUDIT_PREFIX))
    assert audit_rows == 4
    states = [e["data"] for e in await good_rows(harness, names.orders, STATE_ROW)]

    for attempt in (1, 2):  # the second pass meets the same documents and does the same
        report = await cleanup(harness, LATER, page_size)

        assert report.complete
        for current, removed, count in (
            (task_id, kind, removable),
            ("audit", "audit_rows", audit_rows),
        ):
            done = task(report, f"{current}.{names.orders}")
            assert done.skipped is None
            assert done.removed[removed] == (count if attempt == 1 else 0), (current, done)
            # Five documents are unreadable whole; the sixth's row only by the task that
            # reads rows of its key (its mode's task).
            assert done.kept["bad_row"] == (6 if current == task_id else 5), done.bad_rows
            described = "\n".join(done.bad_rows)
            for partition in ("o1-not-json", "o1-not-an-object", "o2-other-partition"):
                assert repr(document_key(partition)) in described
            assert "not JSON" in described
            assert "names another partition" in described
            assert "is not [version, properties]" in described
            assert "has no rows" in described
        assert await stored_damaged(harness, backend, names.orders) == before
    assert await good_rows(harness, names.orders, AUDIT_PREFIX) == []
    # the business state is kept (an entity outbox's map in the same row is trimmed)
    assert [e["data"] for e in await good_rows(harness, names.orders, STATE_ROW)] == states


async def good_rows(harness: Harness, endpoint: str, prefix: str) -> list[Entity]:
    """The rows of the flow's partitions (o1, o2, o3) whose keys start with ``prefix``,
    read partition by partition: reading across them would meet the damaged documents."""
    rows = harness.rows(endpoint).rows()
    found: list[Entity] = []
    for partition in ("o1", "o2", "o3"):
        page, _ = await rows.page(row_key_prefix=prefix, page_size=100, partition_key=partition)
        found += page
    return found


@pytest.mark.parametrize("backend", document_backends(["token"]), indirect=True)
async def test_a_processed_message_s_state_is_unharmed_by_damaged_neighbours(
    backend: Backend, mode: Mode
) -> None:
    """A message of a partition next to damaged documents is processed as ever: only a
    damaged document's own partition is refused, each try, until its message is parked with
    the reason (as a message meeting a damaged table row is); the document stays as it is."""
    harness, names = await flow(backend, mode)
    await store_damaged(harness, backend, names.orders, mode)
    before = await stored_damaged(harness, backend, names.orders)

    for order in ("o2", "o1-not-json"):
        await harness.setup_bus.client().send(
            PlaceOrder(order_id=order, amount=1), to=names.orders, idempotency_key=f"{order}+"
        )
    await harness.run_until_quiet()

    [o2] = (await harness.rows(names.orders).rows().read("o2", [STATE_ROW])).values()
    assert Ledger.model_validate_json(str(o2["data"])).total == 6
    [parked] = await harness.poison_messages(names.orders)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    assert "not JSON" in str(reason["reason"]), reason
    assert await stored_damaged(harness, backend, names.orders) == before
