"""The simulator over endpoints that keep their rows in a document store (issue 47): one JSON
document per partition, in the Cosmos DB model (``-cosmos``) or as blobs of the account
(``-blob``). Every document request is a scheduled, faulted operation; the known-bad document
stores are caught."""

from __future__ import annotations

import pytest

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.documents import SimulatedDocumentDatabase
from lab.sim.explore import CONFIGS, exhaustive, replay
from lab.sim.invariants import NO_LOST_MESSAGES
from lab.sim.readings import WINDOW_MODES
from lab.sim.variants import (
    DOCUMENT_UNCONDITIONAL,
    ROW_VERSION_IGNORED,
    Variant,
)
from lab.sim.world import RunResult
from shared.bus.state.document_rows import DocumentRows
from shared.stores.instrumented import Fault, Instrumentation, Operation, fault_at_first
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.table import Entity

BOUND = 150
"""Schedules per search in ``make test`` (the full phases are in ``make simulate``)."""
STORES = ("cosmos", "blob")


def _rows(kind: str, fault: Fault) -> DocumentRows:
    """An endpoint's rows in the Cosmos DB model, ``fault`` at the first document write of
    ``kind``."""
    instrumentation = Instrumentation(plan=fault_at_first(kind, fault))
    database = SimulatedDocumentDatabase(MemoryDocumentDatabase(), instrumentation)
    return DocumentRows(database.endpoint_documents("first"))


async def test_an_update_whose_answer_was_lost_is_known_as_landed() -> None:
    """The store client sends the lost write again, which meets the write's own change (412):
    the partition's document names the write that wrote it, so the update is answered as
    done, once."""
    rows = _rows("cosmos.replace", Fault.ERROR_AFTER)
    version = await rows.insert(Entity("k0", "state", {"n": 1}))

    updated = await rows.update(Entity("k0", "state", {"n": 2}), version)

    stored = await rows.get("k0", "state")
    assert (stored["n"], stored.etag) == (2, updated)


async def test_an_insert_whose_answer_was_lost_is_known_as_landed() -> None:
    rows = _rows("cosmos.create", Fault.ERROR_AFTER)

    version = await rows.insert(Entity("k0", "outbox|m", {"n": 1}))

    assert (await rows.get("k0", "outbox|m")).etag == version


async def test_a_landed_write_is_known_as_landed_after_another_write_of_its_partition() -> None:
    """Another write of the partition comes between the lost answer and the read again, so
    the document names that write: the rows this write gave its versions show it landed
    (found by ``small-partition-cosmos`` and ``small-cosmos-entity_outbox``)."""
    database = MemoryDocumentDatabase()
    instrumentation = Instrumentation(plan=fault_at_first("cosmos.replace", Fault.ERROR_AFTER))
    rows = DocumentRows(
        SimulatedDocumentDatabase(database, instrumentation).endpoint_documents("first")
    )
    other = DocumentRows(database.endpoint_documents("first"))

    async def another_write_first(operation: Operation) -> None:
        if instrumentation.injected and operation.kind == "cosmos.read":
            instrumentation.on_operation = None
            await other.insert(Entity("k0", "audit|m1", {"n": 1}))

    version = await rows.insert(Entity("k0", "state", {"n": 1}))
    instrumentation.on_operation = another_write_first

    updated = await rows.update(Entity("k0", "state", {"n": 2}), version)

    stored = await rows.get("k0", "state")
    assert (stored["n"], stored.etag) == (2, updated)
    assert (await rows.get("k0", "audit|m1"))["n"] == 1


async def test_the_schedule_that_found_it_keeps_every_invariant() -> None:
    """Without the versions' check (only the write id), this schedule loses m0's output: its
    commit lands, the resend answers 412, the other copy writes the document, the commit is
    taken for a lost race."""
    result = await replay("small-cosmos-entity_outbox:" + "0." * 9 + "4.1")

    assert result.faults == 1
    assert result.ok, result.violations


def test_the_default_simulation_explores_both_document_stores() -> None:
    planned = {name for plan in DEFAULT_PLAN for name, _, _ in plan}

    assert {"small-partition-cosmos", "small-cosmos-entity_outbox"} <= planned
    for store in STORES:
        assert {f"small-{store}", f"small-sweep-{store}"} <= planned
        assert f"small-partition-{store}" in CONFIGS
        for mode in WINDOW_MODES:
            assert f"small-{store}-{mode}" in CONFIGS
            assert f"small-partition-{store}-{mode}" in CONFIGS
        assert all(CONFIGS[n].store == store for n in CONFIGS if f"-{store}" in n)


@pytest.mark.parametrize("store", STORES)
async def test_every_single_fault_at_every_operation_keeps_every_invariant(store: str) -> None:
    """Document reads and writes included: a crash between a write and its answer, a lost
    answer (the resend answered as a conflict), a late write."""
    summary = await exhaustive(
        CONFIGS[f"small-{store}"], max_deviations=0, max_faults=1, limit=BOUND
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.faults == summary.schedules - 1


@pytest.mark.parametrize("store", STORES)
async def test_messages_of_one_partition_keep_every_invariant_under_reordering(
    store: str,
) -> None:
    """Three messages of one partition: writes of different rows of one document meet on
    its ETag, and only the rows' own versions keep one commit from overwriting another."""
    summary = await exhaustive(
        CONFIGS[f"small-partition-{store}"], max_deviations=1, max_faults=0, limit=BOUND
    )

    assert summary.violations == 0, summary.failures[:1]


async def caught(variant: Variant, config: str, deviations: int, faults: int) -> RunResult:
    """The first schedule of ``config`` within the bounds where ``variant`` breaks an
    invariant."""
    summary = await exhaustive(
        CONFIGS[config],
        max_deviations=deviations,
        max_faults=faults,
        variant=variant,
        stop_at_first=True,
    )
    assert summary.failures, f"{variant.name} went unseen in {summary.schedules} schedules"
    return summary.failures[0][1]


async def test_an_unconditional_document_write_is_caught() -> None:
    """Two messages of one partition: the later write of the document drops the other's
    commit."""
    result = await caught(DOCUMENT_UNCONDITIONAL, "small-partition-cosmos", 1, 0)

    assert NO_LOST_MESSAGES in {v.invariant for v in result.violations}


async def test_an_unconditional_document_write_is_caught_between_two_copies() -> None:
    """Two copies of one message: the second's O(m) insert replaces the first's."""
    result = await caught(DOCUMENT_UNCONDITIONAL, "small-cosmos", 1, 0)

    assert NO_LOST_MESSAGES in {v.invariant for v in result.violations}


async def test_a_row_version_unchecked_inside_the_document_is_caught() -> None:
    """A message of the partition commits its state over the state another committed after
    the first read it (the document's ETag was read again, the row's version was not)."""
    result = await caught(ROW_VERSION_IGNORED, "small-partition-cosmos", 1, 0)

    assert NO_LOST_MESSAGES in {v.invariant for v in result.violations}
