"""What operators are told of a saga endpoint (shared/bus/saga_counts.py): its instances
live and completed, the timeouts its live instances wait for and the earliest due, its
``saga_not_found`` messages from the audit rows, and rows that are no instance counted as
unreadable, never fatal; ``bus status``'s counts and words; a look bounded by a limit says
so. In each mode that runs a saga, in memory, on Azurite, and with the rows in PostgreSQL
(the model and a real server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.bus.app import Mode
from shared.bus.records import STATE_ROW
from shared.bus.saga import SAGA_ROW_TYPE, PendingTimeout, SagaRow
from shared.bus.saga_counts import SagaCounts, count_sagas
from shared.cli.records import count_records, describe
from shared.errors import InvalidValue
from shared.stores.table import Entity
from tests.bus.harness import (
    Harness,
    document_backends,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
    sql_backends,
)
from tests.bus.test_sagas import (
    SAGA_MODES,
    PaymentReceived,
    Shipped,
    StartCheckout,
    send,
    started,
)
from tests.conftest import Backend

pytestmark = pytest.mark.parametrize(
    "backend",
    [
        *(pytest.param(("memory", m), id=f"memory-{m}") for m in SAGA_MODES),
        *(
            pytest.param(("azurite", m), id=f"azurite-{m}", marks=pytest.mark.azurite)
            for m in SAGA_MODES
        ),
        *sql_backends(SAGA_MODES),
        *document_backends(SAGA_MODES, real=["token"]),
    ],
    indirect=True,
)

SOON = datetime(2031, 1, 1, 9, 0, tzinfo=UTC)
LATER = datetime(2031, 1, 2, 9, 0, tzinfo=UTC)


def timeout(message_id: str, due: datetime | None) -> PendingTimeout:
    return PendingTimeout(message_id=message_id, type="PaymentDue", due=due, handle={})


def instance_entity(partition: str, row: SagaRow) -> Entity:
    return Entity(partition, STATE_ROW, {"type": SAGA_ROW_TYPE, "data": row.to_json()})


async def processed(backend: Backend, mode: Mode) -> tuple[Harness, str]:
    """Two live instances, one completed, and two messages that found none (one for an
    instance never started, one a start after completion)."""
    harness, saga = await started(backend, mode)
    for order in ("o1", "o2", "o3"):
        await send(harness, saga, StartCheckout(order_id=order), f"start-{order}")
    await harness.run_until_quiet()
    await send(harness, saga, Shipped(order_id="o3"), "shipped-o3")
    await send(harness, saga, PaymentReceived(order_id="never"), "paid-never")
    await harness.run_until_quiet()
    await send(harness, saga, StartCheckout(order_id="o3"), "start-o3-again")
    await harness.run_until_quiet()
    return harness, saga


async def test_counts_follow_what_the_messages_did(backend: Backend, mode: Mode) -> None:
    harness, saga = await processed(backend, mode)

    counts = await count_sagas(harness.rows(saga).rows())

    assert counts == SagaCounts(
        live=2,
        completed=1,
        not_found=2,
        instances_scanned=3,
        audit_rows_scanned=9,  # 3 starts, their 3 replies, shipped, the 2 not found
        complete=True,
    )


async def test_pending_timeouts_and_rows_that_are_no_instance(backend: Backend, mode: Mode) -> None:
    harness, saga = await processed(backend, mode)
    rows = harness.rows(saga).rows()
    waiting = SagaRow(
        state={"seen": []},
        timeouts=(timeout("t-later", LATER), timeout("t-soon", SOON), timeout("t-now", None)),
        started_by="m-1",
    )
    await rows.insert(instance_entity("t1", waiting))
    # Written by hand: no saga wrote these, and the receiver would refuse them too.
    await rows.insert(Entity("bad1", STATE_ROW, {"type": SAGA_ROW_TYPE, "data": "{"}))
    await rows.insert(Entity("bad2", STATE_ROW, {"type": "Checkout", "data": "not json"}))
    await rows.insert(Entity("bad3", STATE_ROW, {"type": SAGA_ROW_TYPE}))
    bad_due = '{"timeouts": [{"message_id": "x", "type": "T", "due": "soon", "handle": {}}]}'
    await rows.insert(Entity("bad4", STATE_ROW, {"type": SAGA_ROW_TYPE, "data": bad_due}))

    counts = await count_sagas(rows)

    assert (counts.live, counts.completed, counts.unreadable) == (3, 1, 4)
    assert counts.timeouts_pending == 3
    assert counts.next_timeout_due == SOON
    found = await count_records(harness.app.endpoints[saga], harness.rows(saga))
    assert {k: v for k, v in found.items() if k.startswith("saga_")} == {
        "saga_instances_live": 3,
        "saga_instances_completed": 1,
        "saga_timeouts_pending": 3,
        "saga_next_timeout_due": SOON.isoformat(),
        "saga_not_found": 2,
        "saga_unreadable": 4,
    }
    assert describe(found).endswith(
        "; saga: 3 live, 1 completed, 3 timeouts pending (next due 2031-01-01T09:00:00+00:00), "
        "2 saga_not_found, 4 unreadable"
    )
    assert describe(found).startswith("outbox: 0 open, " if mode == "token" else "processed rows: ")


async def test_a_look_stopped_at_its_limit_says_so(backend: Backend, mode: Mode) -> None:
    harness, saga = await processed(backend, mode)
    rows = harness.rows(saga).rows()

    counts = await count_sagas(rows, limit=2)

    assert (counts.instances_scanned, counts.audit_rows_scanned) == (2, 2)
    assert counts.complete is False
    assert counts.live + counts.completed == 2
    assert counts.not_found <= 2
    with pytest.raises(InvalidValue):
        await count_sagas(rows, limit=0)


async def test_an_ordinary_endpoint_reports_no_saga_counts(backend: Backend, mode: Mode) -> None:
    harness, saga = await processed(backend, mode)
    payments = f"pay{saga[8:]}"

    found = await count_records(harness.app.endpoints[payments], harness.rows(payments))

    assert not any(k.startswith("saga_") for k in found)
    assert "saga" not in describe(found)


async def test_a_message_for_an_unreadable_instance_is_parked_with_why(
    backend: Backend, mode: Mode
) -> None:
    """What the docs tell an operator of an unreadable instance: its messages fail on it and
    are parked once their tries are spent, the row left as it was."""
    harness, saga = await processed(backend, mode)
    damaged = Entity("bad1", STATE_ROW, {"type": SAGA_ROW_TYPE, "data": "{"})
    await harness.rows(saga).rows().insert(damaged)

    await send(harness, saga, PaymentReceived(order_id="bad1"), "paid-bad1")
    await harness.run_until_quiet()

    [parked] = [p["poison"] for p in await harness.poison_messages(saga)]
    assert isinstance(parked, dict)
    assert parked["error_type"] == "CorruptRecord"
    assert "not a saga instance" in str(parked["reason"])
    assert (await count_sagas(harness.rows(saga).rows())).unreadable == 1
