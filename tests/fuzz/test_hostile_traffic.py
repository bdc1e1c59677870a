"""A running host under hostile traffic, with valid traffic flowing through it.

The local host serves the real function app on Azurite. While clients send orders and shots
over HTTP (some twice, as a client retry would), an attacker with queue send access puts a few
hundred hostile messages on every endpoint queue (``tests/fuzz/hostile.py``: random bytes,
non-ASCII text, invalid JSON, wrong types, path traversal, forbidden partition keys, trailing
newlines, oversized, base64 and raw), re-signals real tokens with forged bodies and sends them to
endpoints they are not addressed to, and an HTTP client sends hostile requests. Then:

- every hostile queue message is parked with a reason, or acknowledged as a harmless duplicate;
- no worker stopped (health answers 200 and all valid traffic was processed);
- no HTTP answer is a 5xx, and every error answer is JSON;
- after one cleanup pass no token, outbox record or row from hostile input is left;
- every valid message was processed exactly once, with the body its sender wrote.

``BUS_FUZZ_SEED`` replays a run (the seed is printed on failure).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from azure.storage.queue.aio import QueueClient

from lab.host.process import HostProcess
from lab.local import demo
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import runtime
from shared.bus.poison import Unreadable, unwrap
from shared.errors import NotFound
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite
from tests.fuzz.hostile import Request, Wire, http_requests, queue_messages

pytestmark = pytest.mark.azurite

SEED = int(os.environ.get("BUS_FUZZ_SEED", "20261123"))
FUNCTION_KEY = "fuzz-function-key"
HOSTILE_PER_ENDPOINT = 50
HOSTILE_REQUESTS_PER_KIND = 3
ORDERS, SHOTS = 10, 10
ENDPOINTS = ("shootingrange", "leaderboard", "orders", "payments", "shipping", "loyalty")

EXPECTED_STATUS: dict[str, set[int | None]] = {
    "not_json": {400},
    "deep_nesting": {400},
    "bad_idempotency_key": {400},
    "non_utf8_idempotency_key": {400},
    "bad_partition_key": {400},
    "unknown_type": {400},
    "schema_violation": {400},
    "huge_declared_body": {413},
    "stalled_body": {408, None},  # answered, or closed once the body is overdue
    "garbage_request_line": {400, 404, None},  # "GET /%zz" names no route
    "wrong_method": {405},
}


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: the sample app's resource names are fixed


@dataclass
class Sent:
    """What the attacker put on each queue, by what must become of it."""

    must_park: dict[str, list[Wire]] = field(default_factory=lambda: {e: [] for e in ENDPOINTS})
    park_or_ack: dict[str, list[str]] = field(default_factory=lambda: {e: [] for e in ENDPOINTS})
    ack: Counter[str] = field(default_factory=Counter)


@dataclass
class Valid:
    roots: set[str] = field(default_factory=set)
    orders: dict[str, int] = field(default_factory=dict)
    shots: Counter[str] = field(default_factory=Counter)
    keys: set[str] = field(default_factory=set)


def readings(wire: str) -> set[str]:
    """What the pipeline may have seen of ``wire``: the text itself, or its base64 decoding."""
    seen = {wire}
    with contextlib.suppress(binascii.Error, ValueError):
        seen.add(base64.b64decode(wire, validate=True).decode("utf-8"))
    return seen


async def send_raw(connection: str, queue: str, text: str) -> None:
    """As the attacker's own tool would: the text as it is, no encoding."""
    async with QueueClient.from_connection_string(connection, queue) as client:
        await client.send_message(text)


async def post_valid(session: aiohttp.ClientSession, url: str, key: str, body: object) -> list[str]:
    for _ in range(20):
        async with session.post(
            f"{url}/api/messages",
            json=body,
            headers={"Idempotency-Key": key, "x-functions-key": FUNCTION_KEY},
        ) as response:
            if response.status in (200, 202):
                return [str(i) for i in (await response.json())["message_ids"]]
            assert response.status >= 500, (key, response.status, await response.text())
        await asyncio.sleep(0.5)
    raise AssertionError(f"{key} was never accepted")


async def valid_traffic(url: str, rng: random.Random, valid: Valid) -> None:
    requests: list[tuple[str, object]] = []
    for i in range(ORDERS):
        order_id, amount = f"order{i}", 100 * rng.randint(1, 50)
        valid.orders[order_id] = amount
        body = {"order_id": order_id, "customer": f"cust{i % 20}", "amount_cents": amount}
        requests.append((order_id, {"type": "PlaceOrder", "to": "orders", "body": body}))
    for i in range(SHOTS):
        game = f"game{i % 3}"
        valid.shots[game] += 1
        body = {"game_id": game, "position": rng.randint(0, 9)}
        requests.append((f"shot{i}", {"type": "FireAt", "body": body}))
    rng.shuffle(requests)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for key, payload in requests:
            ids = await post_valid(session, url, key, payload)
            if rng.random() < 0.3:  # the client missed the answer and sends again
                assert await post_valid(session, url, key, payload) == ids
            valid.roots |= set(ids)
            valid.keys.add(key)


async def hostile_queue_traffic(connection: str, rng: random.Random, sent: Sent) -> None:
    for endpoint in ENDPOINTS:
        for wire in queue_messages(rng, endpoint, HOSTILE_PER_ENDPOINT):
            await send_raw(connection, endpoint, wire.text)
            if wire.kind == "foreign_sender":
                sent.ack[endpoint] += 1  # names a token that does not exist: a duplicate
            else:
                sent.must_park[endpoint].append(wire)
            await asyncio.sleep(0)


async def misuse_real_tokens(
    account: StorageAccount, connection: str, rng: random.Random, sent: Sent
) -> None:
    """With read access to the tokens: re-signal real tokens with a forged amount to their own
    endpoint, and send them as they are to an endpoint they are not addressed to."""
    tokens = account.blob_container(runtime.bus_config().tokens_container)
    for _ in range(30):
        names = [b.name async for b in tokens.list()]
        for name in rng.sample(names, min(3, len(names))):
            try:
                blob = await tokens.read(name)
            except NotFound:  # consumed meanwhile
                continue
            envelope = json.loads(blob.data)
            parts = name.split("/")
            signal = {
                "message_id": parts[3],
                "attempt_id": parts[2],
                "token": name,
                "partition_key": envelope["partition_key"],
            }
            forged = {**envelope, "body": {**envelope["body"], "amount_cents": 99_999_999}}
            resignal = {**signal, "etag": blob.etag, "envelope": json.dumps(forged)}
            await send_raw(connection, envelope["destination"], json.dumps(resignal))
            sent.ack[envelope["destination"]] += 1
            elsewhere = rng.choice([e for e in ENDPOINTS if e != envelope["destination"]])
            await send_raw(connection, elsewhere, json.dumps(signal))
            sent.park_or_ack[elsewhere].append(json.dumps(signal))
        await asyncio.sleep(0.2)


async def exchange(port: int, request: Request) -> tuple[int | None, str]:
    """One raw HTTP exchange: the status (None when the host closed without an answer) and
    the Content-Type of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request.head)
        await writer.drain()
        status_line = b""
        if request.answer_before_body:
            with contextlib.suppress(TimeoutError):
                status_line = await asyncio.wait_for(reader.readline(), 5)
        if not status_line:
            if request.send_body and request.body:
                writer.write(request.body)
                await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 20)
        if not status_line:
            return None, ""
        content_type = ""
        while (line := await asyncio.wait_for(reader.readline(), 20)) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-type":
                content_type = value.strip()
        return int(status_line.split()[1]), content_type
    except ConnectionError:
        return None, ""
    finally:
        writer.close()


async def hostile_http_traffic(port: int, rng: random.Random) -> list[tuple[str, int | None, str]]:
    kinds = len(EXPECTED_STATUS)
    requests = list(http_requests(rng, FUNCTION_KEY, kinds * HOSTILE_REQUESTS_PER_KIND))
    answers = await asyncio.gather(*(exchange(port, r) for r in requests))
    return [(r.kind, status, kind) for r, (status, kind) in zip(requests, answers, strict=True)]


async def poison_contents(account: StorageAccount, endpoint: str) -> list[str]:
    """Every poison message of ``endpoint`` (received and left in place: peek shows 32)."""
    queue = account.queue(poison_queue(endpoint))
    contents: dict[str, str] = {}
    while batch := await queue.receive(32, visibility_timeout=120):
        contents.update({m.id: m.content for m in batch})
    return list(contents.values())


async def originals(account: StorageAccount, endpoint: str) -> list[tuple[str, str]]:
    """(original text, reason) of every poison message: parked whole or by reference; for
    one kept as an excerpt (a text naming no token, too large to park beside its reason),
    the SHA-256 of the whole text stands for it, as ``sha256:<hex>`` (``digest_of``)."""
    found = []
    parked = account.blob_container(runtime.bus_config().parked_container)
    for content in await poison_contents(account, endpoint):
        try:
            message = unwrap(content, endpoint)
        except Unreadable as e:
            raise AssertionError(f"{endpoint}: a poison message is unreadable: {e}") from e
        if message.signal is not None:
            found.append((message.signal, message.reason))
        elif message.excerpt_only:
            found.append((f"sha256:{message.info['sha256']}", message.reason))
        else:
            assert message.original is not None
            blob = await parked.read(message.original)
            found.append((blob.data.decode("utf-8"), message.reason))
    return found


def digest_of(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}"


async def test_hostile_traffic_parks_or_drops_every_hostile_message_and_loses_nothing(
    own_azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    connection = own_azurite.connection_string
    host = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": connection,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            "BUS_HOST_FUNCTION_KEY": FUNCTION_KEY,
        },
        tmp_path / "host.log",
        args=["--lease-seconds", "5"],
    )
    sent, valid = Sent(), Valid()
    async with AzureStorageAccount(StorageSettings(connection)) as account:
        worker = runtime.Worker.for_account(account)
        await provision(account, worker.resources)
        await worker.bus().subscribe_all()
        await asyncio.to_thread(host.start)
        try:
            _, _, _, http_answers = await asyncio.gather(
                valid_traffic(host.url, random.Random(rng.random()), valid),
                hostile_queue_traffic(connection, random.Random(rng.random()), sent),
                misuse_real_tokens(account, connection, random.Random(rng.random()), sent),
                hostile_http_traffic(host.port, random.Random(rng.random())),
            )
            assert await demo.quiescent(account, time.monotonic() + 120), "queues never drained"
            async with (
                aiohttp.ClientSession() as session,
                session.get(
                    f"{host.url}/api/health", headers={"x-functions-key": FUNCTION_KEY}
                ) as health,
            ):
                assert health.status == 200, await health.text()  # no worker stopped
        finally:
            stopped = await asyncio.to_thread(host.stop)
        assert stopped == 0, f"seed {SEED}"

        await worker.cleanup(grace_seconds=0)
        verdict = await demo.verify(
            account, valid.roots, valid.orders, valid.shots, 0, worker.config
        )
        parked = {e: await originals(account, e) for e in ENDPOINTS}
        partitions = {
            e: {x.partition_key async for x in account.table(e).query_all()} for e in ENDPOINTS
        }
        ingress_keys = {x.partition_key async for x in account.table("ingress").query_all()}

    # Every valid message processed exactly once, with its sender's body; nothing left behind.
    assert verdict.state_errors == [], f"seed {SEED}"
    assert (verdict.lost, verdict.ghosts, verdict.residue) == (0, 0, 0), f"seed {SEED}"
    deliveries = demo.DELIVERIES_PER_ORDER * ORDERS + demo.DELIVERIES_PER_SHOT * SHOTS
    assert verdict.sent == verdict.processed == deliveries
    # Only valid input made rows: the orders', customers' and games' partitions, the valid keys.
    allowed = set(valid.orders) | {f"cust{i % 20}" for i in range(ORDERS)} | set(valid.shots)
    assert {e: p - allowed for e, p in partitions.items()} == {e: set() for e in ENDPOINTS}
    assert ingress_keys == set(valid.keys)  # BUS_INGRESS_KEY_SCOPES is off by default
    # Every hostile queue message parked with a reason, or acknowledged as a duplicate.
    for endpoint in ENDPOINTS:
        accepted = {r for w in sent.must_park[endpoint] for r in readings(w.text)}
        accepted |= set(sent.park_or_ack[endpoint])
        accepted |= {digest_of(text) for text in accepted}
        found = parked[endpoint]
        assert all(reason for _, reason in found), endpoint
        strangers = [text[:80] for text, _ in found if text not in accepted]
        assert strangers == [], f"{endpoint}: parked what nobody hostile sent (seed {SEED})"
        must_total = len(sent.must_park[endpoint])
        assert must_total <= len(found) <= must_total + len(sent.park_or_ack[endpoint]), endpoint
    # No HTTP answer is a 5xx; every answer is what the request deserves, in JSON.
    for kind, status, content_type in http_answers:
        assert status in EXPECTED_STATUS[kind], (kind, status, f"seed {SEED}")
        assert status is None or content_type.startswith("application/json"), (kind, status)
