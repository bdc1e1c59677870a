"""Token mode leaves R7 (deleting the incoming token) to the cleanup (issue 33,
``shared.bus.receiver``): the token stays, claimed by O(m), until the cleanup's pass deletes
it and then retires O(m); copies before that pass resume, copies after it are duplicates.
Written against the stores, on the in-memory ones and on Azurite."""

from __future__ import annotations

import json

from shared.bus import Outcome
from shared.bus.envelope import TOKEN_NAME
from shared.bus.ids import fresh_id
from shared.bus.records import OutboxRecord
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.bus.test_sweep import residue, sweep_all
from tests.conftest import Backend, unique_name


async def processed_order(backend: Backend) -> tuple[Harness, FlowNames, str]:
    """orders, payments and shipping have processed one order; returns the text of the
    ChargeCard signal payments received."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=False))
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o1", amount=5), to=names.orders, idempotency_key="o1"
    )
    [order] = await harness.raw.queue(names.orders).receive(1, visibility_timeout=30)
    await harness.deliver(names.orders, order)
    [charge] = await harness.raw.queue(names.payments).peek()
    await harness.run_until_quiet()
    return harness, names, charge.content


async def only_record(harness: Harness, endpoint: str) -> OutboxRecord:
    [record] = await harness.outbox_records(endpoint)
    return record


async def test_each_processed_token_stays_claimed_by_its_outbox_record_until_the_cleanup(
    backend: Backend,
) -> None:
    harness, names, _ = await processed_order(backend)
    tokens = harness.raw.blob_container(harness.config.tokens_container)

    # The client's, orders' and payments' tokens were each received and processed.
    left = [blob async for blob in tokens.list()]
    assert len(left) == 3
    for endpoint in (names.orders, names.payments, names.shipping):
        record = await only_record(harness, endpoint)
        [blob] = [b for b in left if b.name == record.incoming_token]
        assert blob.metadata["claim"] == record.claim
    assert await harness.tokens_in_flight() == []

    removed_records, removed_abandoned = await sweep_all(harness)

    assert (removed_records, removed_abandoned) == (3, 0)
    assert await residue(harness) == (0, 0)  # one pass: each O(m) went with its token


async def test_a_copy_before_the_cleanup_resumes_and_one_after_it_is_a_duplicate(
    backend: Backend,
) -> None:
    harness, names, charge = await processed_order(backend)

    await harness.raw.queue(names.payments).send(charge)  # a duplicate of the signal
    await harness.run_until_quiet()
    # payments resumed and signalled the Shipment again; shipping, whose token waits for the
    # cleanup too, resumed the same way.
    assert harness.outcomes[Outcome.RESUMED] == 2
    assert harness.outcomes[Outcome.DUPLICATE] == 0

    await sweep_all(harness)
    await harness.raw.queue(names.payments).send(charge)
    await harness.run_until_quiet()

    assert harness.outcomes[Outcome.DUPLICATE] == 1  # its token is gone: nothing resent
    assert harness.outcomes[Outcome.RESUMED] == 2
    assert (await harness.state(names.payments, "o1")).total == 5
    assert len(await harness.applied(names.shipping)) == 1
    assert await residue(harness) == (0, 0)


async def test_a_second_token_of_a_processed_message_is_deleted_by_the_copy_that_claims_it(
    backend: Backend,
) -> None:
    """The cleanup deletes only the token O(m) names. Another token for the same message (the
    same envelope under another attempt: a create retried after an unknown outcome, signalled
    by someone who could list the container) is claimed for O(m) by its copy, which must
    delete it, or it would stay claimed for ever."""
    harness, names, charge = await processed_order(backend)
    record = await only_record(harness, names.payments)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    original = await tokens.read(record.incoming_token)
    parts = TOKEN_NAME.fullmatch(record.incoming_token)
    assert parts is not None
    attempt = fresh_id()
    twin = record.incoming_token.replace(parts["attempt"], attempt)
    await tokens.create(
        twin, original.data, {k: v for k, v in original.properties.metadata.items() if k != "claim"}
    )
    signal = {**json.loads(charge), "token": twin, "attempt_id": attempt}
    for hint in ("etag", "envelope"):
        signal.pop(hint, None)
    await harness.raw.queue(names.payments).send(json.dumps(signal))

    await harness.run_until_quiet()

    assert twin not in await harness.tokens()
    assert harness.outcomes[Outcome.RESUMED] == 2  # the twin's copy, then shipping's
    assert (await harness.state(names.payments, "o1")).total == 5
    await sweep_all(harness)
    assert await residue(harness) == (0, 0)
