"""Format versions (``shared.bus.formats``): every reader takes 1 and 2, refuses a newer
format with NewerVersion before it reads anything else and anything that is not a version as
damage; the writers write BUS_WIRE_FORMAT; a record of a newer format is never processed,
acknowledged as done or parked as malformed by the receive path."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.audit.poisoned import poisoned_row
from shared.audit.rows import POISONED_COLUMNS
from shared.bus import BusApp, Command, DoNotRetry, HandlerContext, Outcome
from shared.bus.envelope import Envelope, Signal
from shared.bus.giveback import FIRST_DELAY
from shared.bus.ingress import INGRESS_ROW, ingress_version
from shared.bus.pipeline import IncomingToken
from shared.bus.poison import read_poison, unwrap
from shared.bus.records import OutboxRecord, outbox_row
from shared.bus.state.properties import decode_properties, encode_properties
from shared.clock import ManualClock
from shared.errors import BusError, CorruptRecord, MalformedSignal, NewerVersion
from shared.resources import poison_queue
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name
from tests.formats.test_stored_v1 import entity
from tests.formats.wire_v2 import FIXTURE

WRITTEN: dict[str, Any] = json.loads(FIXTURE.read_text())
NOT_VERSIONS: list[object] = ["3", -1, 0, 2.5, True, 10**100]
NOT_METADATA_VERSIONS = ["-1", "0", "2.5", "true", "1" + "0" * 100, "03", " 3", ""]


def _json_with(text: str, version: object) -> str:
    data = json.loads(text)
    data["v"] = version
    return json.dumps(data)


def _row_with(row: dict[str, Any], version: object) -> Entity:
    """The fixture's row with ``format`` set to ``version``, of whatever type (as a store that
    holds anything might give it)."""
    found = entity(row)
    properties: dict[str, Any] = {**found.properties, "format": version}
    return Entity(found.partition_key, found.row_key, properties)


def _unwrapping(form: str) -> Callable[[object], object]:
    return lambda v: unwrap(_json_with(WRITTEN["poison"][form], v), "shipping")


def _through_postgresql(row: Entity) -> Entity:
    """``row`` as the PostgreSQL store keeps and reads it (its properties' text)."""
    stored = encode_properties(row.properties)
    return Entity(row.partition_key, row.row_key, decode_properties(stored))


READERS: dict[str, tuple[Callable[[object], object], type[BusError]]] = {
    "envelope": (
        lambda v: Envelope.from_bytes(_json_with(WRITTEN["envelopes"]["inline"], v).encode()),
        MalformedSignal,
    ),
    "signal": (
        lambda v: Signal.parse(_json_with(WRITTEN["signals"]["hinted"], v)),
        MalformedSignal,
    ),
    **{
        f"poison wrapper ({form})": (_unwrapping(form), CorruptRecord)
        for form in ("inline", "reference", "excerpt")
    },
    "outbox row": (
        lambda v: OutboxRecord.from_entity(_row_with(WRITTEN["outbox"]["table"]["committed"], v)),
        CorruptRecord,
    ),
    "outbox row in PostgreSQL": (
        lambda v: OutboxRecord.from_entity(
            _through_postgresql(_row_with(WRITTEN["outbox"]["table"]["claimed"], v))
        ),
        CorruptRecord,
    ),
    "ingress record": (
        lambda v: ingress_version(_row_with(WRITTEN["ingress"]["scoped"], v)),
        CorruptRecord,
    ),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_a_newer_format_naming_it_and_the_newest_it_reads(
    reader: str,
) -> None:
    read, _ = READERS[reader]

    with pytest.raises(NewerVersion, match=r"format version 3, .* reads formats up to 2"):
        read(3)
    read(2)
    read(1)


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("version", NOT_VERSIONS, ids=repr)
def test_every_reader_takes_what_is_no_version_for_damage(reader: str, version: object) -> None:
    read, damaged = READERS[reader]

    with pytest.raises(damaged, match="is not a whole number from 1") as raised:
        read(version)
    assert not isinstance(raised.value, NewerVersion)


async def _token_with(metadata: dict[str, str]) -> IncomingToken:
    container = MemoryStorageAccount().blob_container("tokens")
    await container.create_if_missing()
    name = json.loads(WRITTEN["signals"]["plain"])["token"]
    await container.create(name, WRITTEN["envelopes"]["inline"].encode(), metadata)
    return IncomingToken.of(await container.read(name))


async def test_token_metadata_of_a_newer_format_is_refused_and_of_both_formats_read() -> None:
    with pytest.raises(NewerVersion, match="format version 3"):
        await _token_with({**WRITTEN["token"]["metadata"], "format": "3"})
    for version in ("1", "2"):
        token = await _token_with({**WRITTEN["token"]["metadata"], "format": version})
        assert token.claim == ""


@pytest.mark.parametrize("text", NOT_METADATA_VERSIONS, ids=repr)
async def test_token_metadata_that_is_no_version_is_damage(text: str) -> None:
    with pytest.raises(CorruptRecord, match="in its metadata is not a whole number"):
        await _token_with({**WRITTEN["token"]["metadata"], "format": text})


def test_a_newer_poison_wrapper_is_listed_as_one_an_upgraded_version_reads() -> None:
    newer = _json_with(WRITTEN["poison"]["reference"], 3)

    record = read_poison(newer)

    assert record.newer
    assert "an upgraded version reads it" in record.reason
    assert (record.message_id, record.original) == (None, None)


async def test_the_audit_says_a_newer_poison_wrapper_is_for_an_upgraded_version() -> None:
    newer = _json_with(WRITTEN["poison"]["inline"], 3)

    newer_row = await poisoned_row("shipping-poison", "shipping", newer)
    ours = await poisoned_row("shipping-poison", "shipping", WRITTEN["poison"]["inline"])

    problem = str(dict(zip(POISONED_COLUMNS, newer_row, strict=True))["problem"])
    assert "format version 3" in problem
    assert "an upgraded version reads it" in problem
    assert "format version" not in str(dict(zip(POISONED_COLUMNS, ours, strict=True))["problem"])


# -- writers and the receive path, on real stores ------------------------------------------------


class ShipOrder(Command):
    partition_by = "order_id"
    order_id: str


def shipping_app(name: str, handled: list[str]) -> BusApp:
    """One endpoint: an order ``refused`` is parked at once, ``failing`` fails (retried),
    any other is recorded in ``handled``."""
    app = BusApp()

    @app.endpoint(name).handles(ShipOrder)
    def ship(ctx: HandlerContext[Any], cmd: ShipOrder) -> None:
        if cmd.order_id == "refused":
            raise DoNotRetry("refused")
        if cmd.order_id == "failing":
            raise RuntimeError("failing")
        handled.append(cmd.order_id)

    return app


async def _sent(harness: Harness, endpoint: str, order: str) -> str:
    """Send ``order`` from a client; the text of its signal, taken off the queue."""
    await harness.setup_bus.client("cli").send(
        ShipOrder(order_id=order), to=endpoint, idempotency_key=order
    )
    [message] = await harness.raw.queue(endpoint).receive(1, visibility_timeout=300)
    await harness.raw.queue(endpoint).delete(message.id, message.pop_receipt)
    return message.content


@pytest.mark.parametrize("version", [1, 2])
async def test_each_writer_writes_the_format_bus_wire_format_says(
    backend: Backend, version: int
) -> None:
    endpoint, handled = f"ship{unique_name('')[:10]}", list[str]()
    harness = await Harness.create(backend, shipping_app(endpoint, handled), wire_format=version)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    stated = version == 2

    signal = await _sent(harness, endpoint, "failing")
    token = await tokens.read(json.loads(signal)["token"])
    ingress = await harness.raw.table(harness.config.ingress_table).get("failing", INGRESS_ROW)
    assert ("v" in json.loads(signal), "v" in json.loads(token.data)) == (stated, stated)
    assert ("format" in token.metadata, "format" in ingress.properties) == (stated, stated)
    with pytest.raises(RuntimeError):
        await harness.bus.receive(endpoint, signal)
    claimed = await tokens.read(json.loads(signal)["token"])
    assert claimed.metadata["claim"]
    assert ("format" in claimed.metadata) == stated
    [outbox] = [e async for e in harness.rows(endpoint).rows().every(row_key_prefix="outbox|")]
    assert ("format" in outbox.properties) == stated

    await harness.bus.receive(endpoint, await _sent(harness, endpoint, "refused"))
    [parked] = await harness.raw.queue(poison_queue(endpoint)).peek()
    assert ("v" in json.loads(parked.content)) == stated
    assert handled == []


async def _refused_unread(harness: Harness, endpoint: str, signal: str) -> None:
    """Receiving ``signal`` gives it back for an upgraded instance (``shared.bus.giveback``):
    nothing processed or parked, and its own text sent again, hidden for the first delay,
    with a count of one (the queue is empty before: ``_sent`` took the signal off it)."""
    assert await harness.bus.receive(endpoint, signal, 1) == Outcome.GIVEN_BACK
    assert await harness.raw.queue(poison_queue(endpoint)).approximate_count() == 0
    queue = harness.raw.queue(endpoint)
    assert await queue.receive(1, visibility_timeout=1) == []  # hidden
    clock = harness.backend.clock
    assert isinstance(clock, ManualClock)
    clock.advance(FIRST_DELAY)
    [again] = await queue.receive(1, visibility_timeout=1)
    assert json.loads(again.content) == {**json.loads(signal), "given_back": 1}


async def _memory_harness(endpoint: str, handled: list[str]) -> Harness:
    clock = ManualClock(1_795_000_000.0)
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    return await Harness.create(backend, shipping_app(endpoint, handled))


async def test_a_signal_of_a_newer_format_is_not_processed_nor_parked() -> None:
    endpoint, handled = "shipping", list[str]()
    harness = await _memory_harness(endpoint, handled)
    signal = await _sent(harness, endpoint, "o1")

    await _refused_unread(harness, endpoint, _json_with(signal, 3))

    token = await harness.raw.blob_container(harness.config.tokens_container).read(
        json.loads(signal)["token"]
    )
    assert token.metadata["claim"] == ""
    assert await harness.outbox_records(endpoint) == []
    await harness.bus.receive(endpoint, signal, 2)  # the same message, as this version wrote it
    assert handled == ["o1"]


async def test_a_token_whose_metadata_is_of_a_newer_format_is_not_processed() -> None:
    endpoint, handled = "shipping", list[str]()
    harness = await _memory_harness(endpoint, handled)
    signal = await _sent(harness, endpoint, "o1")
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    name = json.loads(signal)["token"]
    token = await tokens.read(name)
    await tokens.set_metadata(name, {**token.metadata, "format": "3"}, etag=token.etag)

    await _refused_unread(harness, endpoint, signal)

    assert (await tokens.read(name)).metadata["claim"] == ""
    assert handled == []


async def test_an_outbox_record_of_a_newer_format_is_left_as_it_is() -> None:
    endpoint, handled = "shipping", list[str]()
    harness = await _memory_harness(endpoint, handled)
    signal = await _sent(harness, endpoint, "o1")
    parsed = Signal.parse(signal)
    rows = harness.rows(endpoint).rows()
    newer = OutboxRecord(
        parsed.partition_key,
        parsed.message_id,
        claim="claimed-by-a-newer-version",
        incoming_token=parsed.token,
        started_at=datetime(2026, 11, 26, tzinfo=UTC),
        format=3,
    ).to_entity()
    await rows.insert(newer)

    await _refused_unread(harness, endpoint, signal)

    stored = await rows.get(parsed.partition_key, outbox_row(parsed.message_id))
    assert stored.properties == newer.properties
    token = await harness.raw.blob_container(harness.config.tokens_container).read(parsed.token)
    assert token.metadata["claim"] == ""
    assert handled == []
