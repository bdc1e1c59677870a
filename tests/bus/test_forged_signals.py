"""Forged signals, written as the attacker would: someone who may read and send on the
endpoint queues (and their poison queues) but cannot write blobs or tables.

A real signal carries its token's creation ETag and a copy of the envelope (the hints that let
token mode skip reading the token). The attacker copies such a signal, changes the copy and
sends it. In every case below the forged body is never processed: the copy is used only when
its digest equals the one in the token's name, and a token addressed to another endpoint is
refused before anything is written. Every mode on the in-memory stores; token mode, the one
that uses the hints, on Azurite too.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from shared.bus import Outcome
from shared.bus.app import Mode
from shared.bus.envelope import envelope_digest
from shared.bus.poison import Reason, poison_body, replay
from shared.resources import poison_queue
from shared.stores.queue import QueueMessage
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize("backend", backend_modes(azurite=["token"]), indirect=True)

REAL_AMOUNT = 1250
FORGED_AMOUNT = 99_999_999


async def charge_in_flight(backend: Backend, mode: Mode) -> tuple[Harness, FlowNames, str]:
    """orders has processed a PlaceOrder of 1,250: the ChargeCard to payments is in flight,
    its signal (with hints) waiting in the payments queue. Returns that signal's text."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=False, mode=mode))
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o1", amount=REAL_AMOUNT), to=names.orders, idempotency_key="o1"
    )
    [order] = await harness.raw.queue(names.orders).receive(1, visibility_timeout=30)
    await harness.deliver(names.orders, order)
    [charge] = await harness.raw.queue(names.payments).peek()
    return harness, names, charge.content


def forge(real: str, *, rehash: bool = False, **envelope_changes: Any) -> str:
    """The real signal with its envelope copy changed; ``rehash`` also puts the forged copy's
    digest into the token name, as an attacker who knows the scheme would."""
    signal = json.loads(real)
    envelope = json.loads(signal["envelope"])
    body = {**envelope["body"], **envelope_changes.pop("body", {})}
    copy = json.dumps({**envelope, **envelope_changes, "body": body})
    signal["envelope"] = copy
    if rehash:
        prefix, _ = signal["token"].rsplit("/", 1)
        signal["token"] = f"{prefix}/{envelope_digest(copy.encode())}"
    if "partition_key" in envelope_changes:
        signal["partition_key"] = envelope_changes["partition_key"]
    return json.dumps(signal)


async def take(harness: Harness, queue: str, content: str) -> QueueMessage:
    """The queued message with exactly this content (received, so it is ours to deliver)."""
    messages = await harness.raw.queue(queue).receive(32, visibility_timeout=30)
    [wanted] = [m for m in messages if m.content == content]
    for other in messages:
        if other is not wanted:
            await harness.raw.queue(queue).update(other.id, other.pop_receipt, visibility_timeout=0)
    return wanted


async def assert_charged_once_with_the_real_amount(harness: Harness, names: FlowNames) -> None:
    ledger = await harness.state(names.payments, "o1")
    assert ledger.total == REAL_AMOUNT
    assert len(ledger.applied) == 1
    assert len(await harness.applied(names.shipping)) == 1  # the real ChargeCard went on
    assert await harness.tokens_in_flight() == []


async def test_a_changed_body_in_a_resent_signal_is_never_processed(
    backend: Backend, mode: Mode
) -> None:
    """(a) The attacker re-signals the in-flight token with the amount changed; the forged
    signal is delivered first, the real one after it."""
    harness, names, real = await charge_in_flight(backend, mode)
    forged = forge(real, body={"amount": FORGED_AMOUNT})
    await harness.raw.queue(names.payments).send(forged)

    await harness.deliver(names.payments, await take(harness, names.payments, forged))
    await harness.run_until_quiet()

    await assert_charged_once_with_the_real_amount(harness, names)


async def test_a_forged_signal_racing_the_real_one_is_never_processed(
    backend: Backend, mode: Mode
) -> None:
    """(b) Both copies are delivered at the same time: whichever wins, the amount charged is
    the one the sender wrote."""
    harness, names, real = await charge_in_flight(backend, mode)
    forged = forge(real, body={"amount": FORGED_AMOUNT})
    await harness.raw.queue(names.payments).send(forged)
    messages = await harness.raw.queue(names.payments).receive(2, visibility_timeout=30)
    assert sorted(m.content for m in messages) == sorted([real, forged])

    forged_first = sorted(messages, key=lambda m: m.content != forged)  # it was sent at once
    await asyncio.gather(*(harness.deliver(names.payments, m) for m in forged_first))
    await harness.run_until_quiet()

    await assert_charged_once_with_the_real_amount(harness, names)


async def test_a_forged_copy_renamed_to_its_own_digest_names_no_token(
    backend: Backend, mode: Mode
) -> None:
    """Re-hashing the forged copy into the token name makes the name point at a blob that
    does not exist: nothing is processed and no outbox row is left behind."""
    harness, names, real = await charge_in_flight(backend, mode)
    forged = forge(real, rehash=True, body={"amount": FORGED_AMOUNT})
    await harness.raw.queue(names.payments).send(forged)

    await harness.deliver(names.payments, await take(harness, names.payments, forged))
    rows_after_forgery = await harness.row_keys(names.payments)
    await harness.run_until_quiet()

    assert rows_after_forgery == []
    await assert_charged_once_with_the_real_amount(harness, names)


@pytest.mark.parametrize("rewrite", [False, True], ids=["copy-as-is", "copy-rewritten"])
async def test_another_endpoints_token_cannot_be_claimed_here(
    backend: Backend, mode: Mode, rewrite: bool
) -> None:
    """(c) The payments token's signal is sent to orders, as is or with its copy rewritten
    into a PlaceOrder for orders in a partition of the attacker's choosing. orders refuses it
    before writing anything; payments still charges the order."""
    harness, names, real = await charge_in_flight(backend, mode)
    forged = real
    if rewrite:
        forged = forge(
            real,
            type="PlaceOrder",
            destination=names.orders,
            partition_key="victim",
            body={"order_id": "victim", "amount": FORGED_AMOUNT},
        )
    await harness.raw.queue(names.orders).send(forged)

    await harness.deliver(names.orders, await take(harness, names.orders, forged))
    await harness.run_until_quiet()

    rows = await harness.row_keys(names.orders)
    assert {partition for partition, _ in rows} == {"o1"}  # nothing written for the forgery
    assert harness.outcomes[Outcome.POISONED] == 1
    [parked] = await harness.poison_messages(names.orders)
    refusal = str(parked["poison"])
    assert f"addressed to {names.payments}" in refusal or "not what the signal says" in refusal
    await assert_charged_once_with_the_real_amount(harness, names)


async def test_a_parked_signal_forged_out_of_the_poison_queue_is_never_processed(
    backend: Backend, mode: Mode
) -> None:
    """(d) The real signal was parked (as the host does after maxDequeueCount). The attacker
    copies it out of the poison queue, changes the amount and sends it; the operator later
    replays the parked original. The amount charged is the real one, once."""
    harness, names, real = await charge_in_flight(backend, mode)
    parked = await take(harness, names.payments, real)
    await harness.raw.queue(poison_queue(names.payments)).send(
        poison_body(real, Reason(names.payments, "payment provider unavailable", 5))
    )
    await harness.raw.queue(names.payments).delete(parked.id, parked.pop_receipt)
    [seen] = await harness.raw.queue(poison_queue(names.payments)).peek()
    copied = json.loads(seen.content)["signal"]
    await harness.raw.queue(names.payments).send(forge(copied, body={"amount": FORGED_AMOUNT}))

    await harness.run_until_quiet()
    assert await replay(harness.raw, names.payments) == 1
    await harness.run_until_quiet()

    await assert_charged_once_with_the_real_amount(harness, names)
    # The replayed original found it done. In token mode, before the cleanup's R7, that is
    # payments' token claimed by its committed O(m): it resumes, signalling the ShipOrder
    # again, and shipping resumes that one too.
    if mode == "token":
        assert harness.outcomes[Outcome.RESUMED] == 2
    else:
        assert harness.outcomes[Outcome.DUPLICATE] >= 1


async def test_a_token_name_with_a_trailing_newline_is_parked_and_writes_nothing(
    backend: Backend, mode: Mode
) -> None:
    """'$' alone matches before a final newline: the real token's name plus '\\n' used to pass
    validation, insert an outbox record and then fail at the blob-name check forever."""
    harness, names, real = await charge_in_flight(backend, mode)
    signal = json.loads(real)
    hostile = json.dumps({**signal, "token": signal["token"] + "\n"})
    await harness.raw.queue(names.payments).send(hostile)

    await harness.deliver(names.payments, await take(harness, names.payments, hostile))

    assert await harness.row_keys(names.payments) == []
    [parked] = await harness.poison_messages(names.payments)
    assert "outside the token naming scheme" in str(parked["poison"])
    await harness.run_until_quiet()
    await assert_charged_once_with_the_real_amount(harness, names)
