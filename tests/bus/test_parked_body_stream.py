"""A parked message's whole body as a download (``shared.bus.parked_body``): its bytes equal
the body, memory stays a few chunks whatever the body's size, and an altered token or payload
is never handed out as the body it claims to be, not even a first chunk of it."""

from __future__ import annotations

import gc
import hashlib
import json
import tracemalloc
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.bus.envelope import Envelope, PayloadReference, Signal, envelope_digest, token_name
from shared.bus.parked_body import CHUNK_BYTES, BodyDownload, BodyWithheld, body_download
from shared.bus.payloads import body_bytes, payload_name
from shared.bus.poison import Reason, poison_body
from shared.errors import PreconditionFailed
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.memory import MemoryStorageAccount
from shared.stores.queue import QueueMessage
from tests.conftest import Backend, unique_name

TOKENS, PARKED, PAYLOADS = "tokens", "parked", "payloads"


@dataclass(frozen=True)
class Parked:
    endpoint: str
    message: QueueMessage
    token: str
    payload: str | None
    """The shared payload's blob, when the body is shared."""


def order(customer_chars: int) -> dict[str, Any]:
    return {"order_id": "o-1", "customer": "é" + "x" * customer_chars, "lines": [1, {"a": "}"}]}


async def parked(
    account: StorageAccount, body: dict[str, Any], *, shared: bool, endpoint: str | None = None
) -> Parked:
    """A message whose token holds ``body`` (inline, or in a shared payload), its signal
    parked in ``endpoint``'s poison queue (a new one by default) as the pipeline parks a
    failed message."""
    endpoint = endpoint or unique_name("orders")[:40]
    for name in (TOKENS, PARKED, PAYLOADS):
        await account.blob_container(name).create_if_missing()
    message_id, attempt, incoming = (str(uuid.uuid4()) for _ in range(3))
    stored = body_bytes(body)
    reference = PayloadReference(digest=envelope_digest(stored), size=len(stored))
    envelope = Envelope(
        id=message_id,
        type="PlaceOrder",
        kind="command",
        source="shop",
        destination=endpoint,
        partition_key="o-1",
        correlation_id=message_id,
        causation_id=None,
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        headers={"body": "not this one"},
        body=None if shared else body,
        payload=reference if shared else None,
    )
    data = envelope.to_bytes()
    token = token_name("shop", incoming, attempt, message_id, data)
    await account.blob_container(TOKENS).create(token, data)
    payload = None
    if shared:
        payload = payload_name(token, reference.digest)
        await account.blob_container(PAYLOADS).create(payload, stored)
    signal = Signal(message_id=message_id, attempt_id=attempt, token=token, partition_key="o-1")
    poison = account.queue(poison_queue(endpoint))
    await poison.create_if_missing()
    raw = signal.model_dump_json(exclude_none=True)
    await poison.send(poison_body(raw, Reason(endpoint, "boom", 5)))
    *_, message = await poison.peek(32)  # the one just parked: the queue's last
    return Parked(endpoint, message, token, payload)


async def download(account: StorageAccount, found: Parked) -> BodyDownload:
    return await body_download(
        account, found.endpoint, found.message, tokens=TOKENS, parked=PARKED, payloads=PAYLOADS
    )


async def streamed_digest(got: BodyDownload) -> tuple[str, int, int]:
    """The SHA-256 of the stream, its length, and its largest chunk: nothing is kept."""
    digest, length, largest = hashlib.sha256(), 0, 0
    async for chunk in got.chunks():
        digest.update(chunk)
        length += len(chunk)
        largest = max(largest, len(chunk))
    return digest.hexdigest(), length, largest


@pytest.mark.parametrize("shared", [False, True], ids=["inline", "shared payload"])
async def test_the_stream_is_the_body_as_stored(backend: Backend, shared: bool) -> None:
    body = order(3 * CHUNK_BYTES)
    found = await parked(backend.account, body, shared=shared)

    got = await download(backend.account, found)
    streamed = b"".join([chunk async for chunk in got.chunks()])

    assert json.loads(streamed) == body
    assert streamed == body_bytes(body)
    assert got.size == len(streamed)


@pytest.mark.parametrize("shared", [False, True], ids=["inline", "shared payload"])
async def test_a_large_body_streams_holding_a_few_chunks_at_most(shared: bool) -> None:
    """A 24 MiB body, checked and streamed: the bytes live at once while it runs are a few
    chunks (the whole body would be 24 MiB, its parse several times that)."""
    account = MemoryStorageAccount()
    body = order(24 * 1024 * 1024)
    expected = body_bytes(body)
    found = await parked(account, body, shared=shared)
    del body  # the store keeps its copy; the test keeps only the expected digest
    want, size = hashlib.sha256(expected).hexdigest(), len(expected)
    del expected
    gc.collect()

    tracemalloc.start()
    try:
        got = await download(account, found)
        digest, length, largest = await streamed_digest(got)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert (digest, length) == (want, size)
    assert largest <= CHUNK_BYTES
    assert peak < 8 * CHUNK_BYTES, f"{peak} bytes live at once for a {size}-byte body"


@pytest.mark.parametrize("shared", [False, True], ids=["inline", "shared payload"])
async def test_an_altered_body_is_withheld_before_any_byte(backend: Backend, shared: bool) -> None:
    found = await parked(backend.account, order(2 * CHUNK_BYTES), shared=shared)
    altered = order(2 * CHUNK_BYTES) | {"customer": "mallory"}
    if found.payload is None:  # the token rewritten: its name's digest no longer matches
        old = (await backend.account.blob_container(TOKENS).read(found.token)).data
        forged = old.replace(b'"order_id":"o-1"', b'"order_id":"o-2"')
        await backend.account.blob_container(TOKENS).upload(found.token, forged)
    else:  # the payload rewritten: the token's reference no longer matches
        await backend.account.blob_container(PAYLOADS).upload(found.payload, body_bytes(altered))

    with pytest.raises(BodyWithheld) as refused:
        await download(backend.account, found)

    assert refused.value.state == "altered"


async def test_a_body_changed_between_the_check_and_the_stream_stops_the_stream(
    backend: Backend,
) -> None:
    found = await parked(backend.account, order(3 * CHUNK_BYTES), shared=False)
    got = await download(backend.account, found)
    tokens = backend.account.blob_container(TOKENS)
    checked = (await tokens.read(found.token)).data
    await tokens.upload(found.token, checked.replace(b'"o-1"', b'"o-2"'))  # after the check

    with pytest.raises(PreconditionFailed):
        async for _ in got.chunks():
            pass


async def test_a_gone_token_without_a_copy_is_missing(backend: Backend) -> None:
    found = await parked(backend.account, order(10), shared=False)
    await backend.account.blob_container(TOKENS).delete(found.token)

    with pytest.raises(BodyWithheld) as refused:
        await download(backend.account, found)

    assert refused.value.state == "missing"
