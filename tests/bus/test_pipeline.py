"""The receive pipeline end to end, in every endpoint mode, on the in-memory stores and on
Azurite (the ``backend`` fixture here is one per store and mode; ``mode`` names the mode).

In every scenario each state change must be applied exactly once and each output processed
exactly once; handlers record the ids they apply, so a duplicate shows as a repeated id.
Token-specific checks (the claim, the operation budget of R1-R9) apply to token mode; the
other modes have their own budgets, measured in ``docs/modes.md``.
"""

from __future__ import annotations

import asyncio
import json
import typing

import pytest

from shared.bus import Outcome
from shared.bus.app import Mode, Store
from shared.bus.ids import derived_id
from shared.stores.instrumented import Fault, Operation, fault_at
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import (
    SQL_BACKENDS,
    Harness,
    SqlBackend,
    attempt_of,
    backend_modes,
    committed_attempts,
    document_write,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
    rows_store,
)
from tests.bus.test_sweep import sweep_all
from tests.conftest import Backend, unique_name


def flow_names() -> FlowNames:
    return FlowNames.with_suffix(unique_name("")[:8])


async def place_order(
    harness: Harness, names: FlowNames, order: str = "o1", key: str | None = None
) -> str:
    receipt = await harness.setup_bus.client().send(
        PlaceOrder(order_id=order, amount=10), to=names.orders, idempotency_key=key or order
    )
    [message_id] = receipt.message_ids
    return message_id


async def assert_quiet(harness: Harness) -> None:
    """Nothing left in any queue or poison queue."""
    depths = await harness.queue_depths()
    assert {k: v for k, v in depths.items() if v} == {}


async def test_a_command_is_processed_once(backend: Backend, mode: Mode) -> None:
    names = flow_names()
    harness = await Harness.create(
        backend, build_flow(names, publish=False, charge=False, mode=mode)
    )

    message_id = await place_order(harness, names)
    await harness.run_until_quiet()

    ledger = await harness.state(names.orders, "o1")
    assert ledger.applied == [message_id]
    assert ledger.total == 10
    assert await harness.audit_ids(names.orders) == [message_id]
    assert await harness.tokens_in_flight() == []
    await assert_quiet(harness)


async def test_an_event_reaches_every_subscriber_once(backend: Backend, mode: Mode) -> None:
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, charge=False, mode=mode))

    placed = await place_order(harness, names)
    await harness.run_until_quiet()

    loyalty = await harness.applied(names.loyalty)
    shipping = await harness.applied(names.shipping)
    assert loyalty == [derived_id(placed, "out", 0, names.loyalty)]
    assert shipping == [derived_id(placed, "out", 0, names.shipping)]
    [orders_audit] = [e async for e in harness.rows(names.orders).audit_entities()]
    assert sorted(__import__("json").loads(str(orders_audit["caused"])), key=str) == sorted(
        [
            {"id": loyalty[0], "type": "OrderPlaced", "destination": names.loyalty},
            {"id": shipping[0], "type": "OrderPlaced", "destination": names.shipping},
        ],
        key=str,
    )
    assert await harness.tokens_in_flight() == []


async def test_a_chain_of_three_endpoints(backend: Backend, mode: Mode) -> None:
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))

    placed = await place_order(harness, names)
    await harness.run_until_quiet()

    charge = derived_id(placed, "out", 0, names.payments)
    ship = derived_id(charge, "out", 0, names.shipping)
    assert await harness.applied(names.orders) == [placed]
    assert await harness.applied(names.payments) == [charge]
    assert await harness.applied(names.shipping) == [ship]
    assert (await harness.state(names.payments, "o1")).total == 10
    assert await harness.tokens_in_flight() == []


async def test_the_same_signal_delivered_twice_in_a_row_is_processed_once(
    backend: Backend, mode: Mode
) -> None:
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))
    placed = await place_order(harness, names)
    [signal] = await harness.raw.queue(names.orders).peek()

    await harness.run_until_quiet()
    await harness.raw.queue(names.orders).send(signal.content)
    await harness.run_until_quiet()

    assert await harness.applied(names.orders) == [placed]
    assert len(await harness.applied(names.shipping)) == 1
    if mode == "token":
        # Before the cleanup's R7 the copy finds orders' token claimed by its committed O(m):
        # it resumes and signals the ChargeCard again, and payments, then shipping, whose
        # tokens wait for the cleanup too, resume the same way. Nothing is applied twice.
        assert harness.outcomes[Outcome.RESUMED] == 3
        assert harness.outcomes[Outcome.DUPLICATE] == 0
        # After the cleanup pass the token is gone: a copy is a duplicate.
        await sweep_all(harness)
        await harness.raw.queue(names.orders).send(signal.content)
        await harness.run_until_quiet()
        assert await harness.applied(names.orders) == [placed]
        assert len(await harness.applied(names.shipping)) == 1
    assert harness.outcomes[Outcome.DUPLICATE] == 1


async def test_concurrent_copies_of_one_signal_are_processed_once(
    backend: Backend, mode: Mode
) -> None:
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, mode=mode))
    placed = await place_order(harness, names)
    queue = harness.raw.queue(names.orders)
    [signal] = await queue.peek()
    for _ in range(3):
        await queue.send(signal.content)

    async def yield_between_operations(operation: Operation) -> None:
        await asyncio.sleep(0)  # lets the copies interleave at every storage operation

    harness.instrumentation.on_operation = yield_between_operations
    copies = await queue.receive(32, visibility_timeout=30)
    assert len(copies) == 4
    await asyncio.gather(*(harness.deliver(names.orders, m) for m in copies))
    await harness.run_until_quiet()

    assert await harness.applied(names.orders) == [placed]
    assert len(await harness.applied(names.payments)) == 1
    assert len(await harness.applied(names.shipping)) == 2
    assert len(await harness.applied(names.loyalty)) == 1
    assert harness.outcomes[Outcome.PROCESSED] == 5
    await assert_quiet(harness)


async def fault_free_operations(backend: Backend, flow_mode: Mode | list[Mode]) -> list[Operation]:
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, mode=flow_mode))
    await place_order(harness, names)
    await harness.run_until_quiet()
    return harness.instrumentation.operations


BUDGET: dict[Mode, int] = {
    "token": 5,  # 6 when the signal carries no hints: see the hint tests below
    "state_based": 5,
    "processed_messages": 5,
    "entity_outbox": 6,
}
DOCUMENT_STORES: tuple[Store, ...] = ("cosmos", "blob")
MODES_BUT_TOKEN: list[Mode] = [m for m in BUDGET if m != "token"]
FAULTS = [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.ERROR_BEFORE, Fault.ERROR_AFTER]
MIXED: list[Mode] = ["state_based", "processed_messages", "token", "entity_outbox"]
"""orders, payments, shipping, loyalty: every mode sends to and receives from another."""


async def check_every_fault(backend: Backend, flow_mode: Mode | list[Mode]) -> None:
    operations = await fault_free_operations(backend, flow_mode)
    first_ack = next(i for i, op in enumerate(operations) if op.kind == "queue.delete")
    kinds = {op.kind for op in operations[: first_ack + 1]}
    first_mode = flow_mode[0] if isinstance(flow_mode, list) else flow_mode
    # Where the first endpoint's rows are: with a SQL or document backend, the endpoints of
    # its modes.
    store = rows_store(backend, first_mode)
    if isinstance(backend, SqlBackend):
        used = {op.kind for op in operations}
        assert {"sql.query" if flow_mode != "entity_outbox" else "sql.get", "sql.transact"} <= used
        assert "token" not in backend.sql_modes or "sql.insert" in used
    if store in DOCUMENT_STORES:
        # A document per partition: read, then created (the partition's first write) or
        # replaced under its ETag, before the first acknowledgement.
        assert {f"{store}.read", f"{store}.create", "blob.read", "queue.delete"} <= kinds
        assert any(document_write(op, store) for op in operations[:first_ack])
    else:
        rows = "sql" if store == "postgres" else "table"
        assert {
            "blob.read",
            f"{rows}.query" if flow_mode != "entity_outbox" else f"{rows}.get",
            "blob.create",
            f"{rows}.transact",
            "queue.send",
            "queue.delete",
        } <= kinds
        if first_mode == "token":
            assert f"{rows}.insert" in kinds  # R3
    if first_mode == "token":
        assert "blob.set_metadata" in kinds  # the claim, R4
        # R7 is the cleanup's: the first message is acknowledged with its token still there.
        assert "blob.delete" not in kinds
    else:
        assert "blob.delete" in kinds  # the window modes delete their token inline
    await fault_everywhere(backend, flow_mode, operations, first_ack)


async def fault_everywhere(
    backend: Backend, flow_mode: Mode | list[Mode], operations: list[Operation], first_ack: int
) -> None:
    faults = FAULTS
    if backend.clock is None:  # real services: each scenario costs real requests
        operations = operations[: first_ack + 1]
        faults = [Fault.CRASH_BEFORE, Fault.CRASH_AFTER]

    for index, operation in enumerate(operations):
        for fault in faults:
            names = flow_names()
            harness = await Harness.create(backend, build_flow(names, mode=flow_mode))
            placed = await place_order(harness, names)
            harness.instrumentation.plan = fault_at(index, fault)

            await harness.run_until_quiet()

            where = f"{fault.value} at operation {index} ({operation.kind})"
            assert harness.instrumentation.injected, where
            charge = derived_id(placed, "out", 0, names.payments)
            assert await harness.applied(names.orders) == [placed], where
            assert await harness.applied(names.payments) == [charge], where
            assert sorted(await harness.applied(names.shipping)) == sorted(
                [
                    derived_id(charge, "out", 0, names.shipping),
                    derived_id(placed, "out", 1, names.shipping),
                ]
            ), where
            assert await harness.applied(names.loyalty) == [
                derived_id(placed, "out", 1, names.loyalty)
            ], where
            for endpoint in names.all:
                assert sorted(await harness.audit_ids(endpoint)) == sorted(
                    await harness.applied(endpoint)
                ), where
            # NoLostMessages: no committed (signalled) token is left unconsumed. A token
            # processed in token mode stays, claimed by its receiver's committed O(m), until
            # the cleanup's R7: consumed, so not in flight.
            leftovers = {attempt_of(t) for t in await harness.tokens_in_flight()}
            assert not leftovers & await committed_attempts(harness), where
            await assert_quiet(harness)


@pytest.mark.parametrize(
    "backend",
    backend_modes(azurite=["token"], slow_azurite=MODES_BUT_TOKEN, slow_real_documents=["token"]),
    indirect=True,
)
async def test_a_fault_at_any_operation_then_redelivery_keeps_exactly_once(
    backend: Backend, mode: Mode
) -> None:
    """For every storage operation of the whole flow (R1-R9 at each of four endpoints) and
    every kind of fault, the flow still ends with each effect applied exactly once.

    On Azurite, where each scenario costs real requests, the crashes cover R1-R9 of the first
    message (every operation up to its acknowledgement); the in-memory run covers them all.
    The other modes run on Azurite under ``-m slow``, and so does token mode with its documents
    in blobs on Azurite (25 s) and on the local Cosmos DB server."""
    await check_every_fault(backend, mode)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(("memory", "token"), id="memory"),
        pytest.param(("memory-sql", "token"), id="memory-sql"),
        pytest.param(("memory-sql", "all"), id="memory-sql-all"),
        pytest.param(("memory-cosmos", "all"), id="memory-cosmos-all"),
        pytest.param(("memory-blob", "all"), id="memory-blob-all"),
    ],
    indirect=True,
)
async def test_endpoints_of_different_modes_interoperate_under_every_fault(
    backend: Backend,
) -> None:
    """One flow with an endpoint in each mode: the shared transport never lets a duplicate
    create a second token for one message, whichever mode sent it and whichever receives it.
    With ``memory-sql`` the token-mode endpoint keeps its rows in (the model of) PostgreSQL
    while the others use tables: the stores meet only in blobs and queues; with
    ``memory-sql-all`` every endpoint, whatever its mode, keeps its rows there, and with
    ``memory-cosmos-all`` and ``memory-blob-all`` in documents."""
    await check_every_fault(backend, MIXED)


OUTPUTS = [(False, False, 0), (True, False, 1), (True, True, 3)]
"""No output, a send, and a send with a publish to two subscribers."""


def happy_path_params() -> list[typing.Any]:
    """Every output case on the in-memory stores; on Azurite and PostgreSQL, whose requests
    the same code counts the same way, the case with every kind of output (there the count
    also shows that a real ETag makes a good hint)."""
    params = []
    for backend in backend_modes():
        cases = OUTPUTS if str(backend.id).startswith("memory") else OUTPUTS[-1:]
        for case in cases:
            params.append(
                pytest.param(
                    *backend.values,
                    *case,
                    marks=backend.marks,
                    id=f"{backend.id}-{'-'.join(map(str, case))}",
                )
            )
    return params


@pytest.mark.parametrize(
    ("backend", "charge", "publish", "outputs"), happy_path_params(), indirect=["backend"]
)
async def test_the_happy_path_costs_its_modes_budget_plus_two_per_output(
    backend: Backend, mode: Mode, charge: bool, publish: bool, outputs: int
) -> None:
    """Exactly the counts docs/modes.md states. Token mode: 5 + 2n operations for a signal
    sent right after its token was created (its hints replace R1), 6 + 2n otherwise; the
    incoming token's delete (R7) is the cleanup's. The other modes skip the claim (no O(m)
    insert, no metadata write) but read and delete the incoming token: 5 + 2n, and one more
    for the entity outbox's clear."""
    names = flow_names()
    harness = await Harness.create(
        backend,
        build_flow(names, charge=charge, publish=publish, mode=mode),
        topic_cache_seconds=60.0,
    )
    await place_order(harness, names, "warm-up")  # fills the topic cache, as in steady state
    await place_order(harness, names, "o2")
    queue = harness.raw.queue(names.orders)
    first, second = await queue.receive(2, visibility_timeout=30)
    await harness.deliver(names.orders, first)

    mark = harness.instrumentation.count
    await harness.deliver(names.orders, second)
    used = harness.instrumentation.kinds_since(mark)

    budget = BUDGET[mode] - (mode == "entity_outbox" and outputs == 0)  # no clear needed
    assert sum(used.values()) == budget + 2 * outputs, used
    # The output tokens: blobs created outside the rows containers of blob documents.
    created = [
        op
        for op in harness.instrumentation.operations[mark:]
        if op.kind == "blob.create" and not document_write(op, "blob")
    ]
    assert len(created) == used["queue.send"] == outputs
    assert used["queue.delete"] == 1


TOKEN_ONLY = [
    pytest.param(("memory", "token"), id="memory-token"),
    pytest.param(("azurite", "token"), id="azurite-token", marks=pytest.mark.azurite),
    *SQL_BACKENDS,
]


def _without_hints(raw: str) -> str:
    data = json.loads(raw)
    data.pop("etag"), data.pop("envelope")
    return json.dumps(data)


def _with(raw: str, **changes: str) -> str:
    return json.dumps({**json.loads(raw), **changes})


@pytest.mark.parametrize("backend", TOKEN_ONLY, indirect=True)
async def test_a_hinted_signal_is_claimed_without_reading_its_token(
    backend: Backend, mode: Mode
) -> None:
    """The client signals a token it has just created with its ETag and envelope: token
    mode claims it straight away (no R1) and applies it once; the same signal without its
    hints costs the read."""
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))
    first = await place_order(harness, names, "o1")
    second = await place_order(harness, names, "o2")
    queue = harness.raw.queue(names.orders)
    hinted, plain = await queue.receive(2, visibility_timeout=30)
    assert "envelope" in json.loads(hinted.content)
    await queue.send(_without_hints(plain.content))
    await queue.delete(plain.id, plain.pop_receipt)

    mark = harness.instrumentation.count
    await harness.deliver(names.orders, hinted)
    assert harness.instrumentation.kinds_since(mark)["blob.read"] == 0
    mark = harness.instrumentation.count
    await harness.run_until_quiet()
    orders_reads = [
        op for op in harness.instrumentation.operations[mark:] if op.kind == "blob.read"
    ]
    assert orders_reads  # the plain signal read its token

    assert sorted(await harness.applied(names.orders)) == sorted([first, second])
    assert len(await harness.applied(names.shipping)) == 2
    await assert_quiet(harness)


@pytest.mark.parametrize("backend", TOKEN_ONLY, indirect=True)
@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param({"etag": '"0x1234"'}, id="stale-etag"),
        pytest.param({"envelope": "not json"}, id="unreadable-envelope"),
        pytest.param({"envelope": '{"id": "someone else"}'}, id="wrong-envelope"),
    ],
)
async def test_a_signal_whose_hints_are_wrong_falls_back_to_its_token(
    backend: Backend, mode: Mode, tamper: dict[str, str]
) -> None:
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))
    placed = await place_order(harness, names)
    queue = harness.raw.queue(names.orders)
    [original] = await queue.receive(1, visibility_timeout=30)
    await queue.send(_with(original.content, **tamper))
    await queue.delete(original.id, original.pop_receipt)

    await harness.run_until_quiet()

    assert await harness.applied(names.orders) == [placed]
    assert len(await harness.applied(names.shipping)) == 1
    assert harness.instrumentation.kinds_since(0)["blob.read"] >= 1
    assert await harness.tokens_in_flight() == []
    await assert_quiet(harness)


@pytest.mark.parametrize("backend", TOKEN_ONLY, indirect=True)
async def test_a_hinted_copy_after_the_message_finished_changes_nothing(
    backend: Backend, mode: Mode
) -> None:
    """Once the cleanup has deleted the token (R7, which token mode leaves to it) and retired
    O(m), the claim on the token's creation ETag fails: the copy reads nothing new, applies
    nothing and leaves no outbox record behind (the O(m) it inserted at R3 claims nothing
    and is removed again)."""
    names = flow_names()
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))
    placed = await place_order(harness, names)
    [signal] = await harness.raw.queue(names.orders).peek()
    await harness.run_until_quiet()
    await sweep_all(harness)
    assert await harness.tokens() == []
    assert await harness.outbox_records(names.orders) == []

    await harness.raw.queue(names.orders).send(signal.content)
    await harness.run_until_quiet()

    assert await harness.applied(names.orders) == [placed]
    assert harness.outcomes[Outcome.DUPLICATE] == 1
    assert await harness.outbox_records(names.orders) == []


@pytest.mark.parametrize("backend", [pytest.param(("memory", "token"), id="memory")], indirect=True)
@pytest.mark.parametrize("sender_mode", MODES_BUT_TOKEN)
async def test_every_mode_hints_the_signals_it_sends_to_a_token_endpoint(
    backend: Backend, sender_mode: Mode
) -> None:
    """Orders in ``sender_mode`` charges payments in token mode: the charge's signal carries
    its token's ETag and envelope, so payments claims the token without reading it."""
    names = flow_names()
    flow = build_flow(names, publish=False, mode=[sender_mode, "token", "token", "token"])
    harness = await Harness.create(backend, flow)
    placed = await place_order(harness, names)
    [order] = await harness.raw.queue(names.orders).receive(1, visibility_timeout=30)
    await harness.deliver(names.orders, order)

    [charge] = await harness.raw.queue(names.payments).receive(1, visibility_timeout=30)
    assert {"etag", "envelope"} <= json.loads(charge.content).keys()
    mark = harness.instrumentation.count
    await harness.deliver(names.payments, charge)

    assert harness.instrumentation.kinds_since(mark)["blob.read"] == 0
    assert await harness.applied(names.payments) == [derived_id(placed, "out", 0, names.payments)]
