"""One payload per publish (``shared.bus.payloads``): an event for three subscribers stores its
body once and each token refers to it; an altered payload or a forged signal gets nothing
processed; the cleanup removes the payload only after the last token (a consumed token goes
with the cleanup's R7 of its receiver's O(m): ``shared.bus.receiver``); parking, ``bus
replay`` and ``bus poison show`` work with a shared body. On the in-memory stores and on
Azurite."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import timedelta

import pytest
from pydantic import ValidationError

from lab.local.azurite import AzuriteEndpoints
from shared.audit.poisoned import collect_poisoned
from shared.bulk.replay import ReplayTask, replay_partition
from shared.bus import BusApp, Command, Event, HandlerContext, Outcome
from shared.bus.envelope import Envelope, Signal, envelope_digest
from shared.bus.payloads import share
from shared.bus.poison import replay_report, unwrap
from shared.bus.poison_view import view
from shared.cleanup.base import CleanupContext
from shared.cleanup.payloads import SharedPayloads
from shared.cleanup.report import TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.clock import to_datetime
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bus.flow import Ledger
from tests.bus.harness import Harness
from tests.bus.test_sweep import Swept, sweep_all, sweep_counted
from tests.conftest import Backend, unique_name

TEXT = "lorem ipsum " * 1000
"""12,000 characters: an envelope longer than a signal carries (8,192)."""


class Shout(Command):
    partition_by = "key"
    key: str
    delay_seconds: int = 0


class Shouted(Event):
    partition_by = "key"
    key: str
    text: str


class Heard(Ledger):
    texts: list[str] = []
    """SHA-256 of each text heard."""


def shouting_app(suffix: str, failures: dict[str, int]) -> BusApp:
    """``hub{suffix}`` publishes Shouted (its text ``TEXT``) when told to; three subscribers
    record it. ``failures[name]``: how many more times that subscriber fails."""
    app = BusApp()
    hub = app.endpoint(f"hub{suffix}", state=Ledger)

    @hub.handles(Shout)
    def shout(ctx: HandlerContext[Ledger], command: Shout) -> None:
        ctx.state.applied.append(ctx.message_id)
        delay = timedelta(seconds=command.delay_seconds) if command.delay_seconds else None
        ctx.publish(Shouted(key=command.key, text=TEXT), delay=delay)

    for n in range(3):
        endpoint = app.endpoint(f"ear{n}{suffix}", state=Heard)

        @endpoint.handles(Shouted)
        def heard(ctx: HandlerContext[Heard], event: Shouted) -> None:
            if failures.get(ctx.endpoint, 0) > 0:
                failures[ctx.endpoint] -= 1
                raise RuntimeError("ear blocked")
            ctx.state.applied.append(ctx.message_id)
            ctx.state.texts.append(hashlib.sha256(event.text.encode()).hexdigest())

    return app


class Shouting:
    """A harness over ``shouting_app`` with what the tests look at."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.hub = next(n for n in harness.app.endpoints if n.startswith("hub"))
        self.ears = [n for n in harness.app.endpoints if n.startswith("ear")]
        self.payloads = harness.raw.blob_container(harness.config.payloads_container)
        self.tokens = harness.raw.blob_container(harness.config.tokens_container)

    @classmethod
    async def create(
        cls, backend: Backend, failures: dict[int, int] | None = None, **config: object
    ) -> Shouting:
        suffix = unique_name("")[:6]
        chosen = {f"ear{n}{suffix}": left for n, left in (failures or {}).items()}
        harness = await Harness.create(backend, shouting_app(suffix, chosen), **config)
        return cls(harness)

    async def shout(self, delay_seconds: int = 0) -> None:
        """The client's Shout, processed by the hub only: the event's tokens and signals are
        then waiting for the subscribers."""
        await self.harness.setup_bus.client().send(
            Shout(key="k", delay_seconds=delay_seconds), to=self.hub, idempotency_key="s"
        )
        for message in await self.harness.raw.queue(self.hub).receive(32):
            await self.harness.deliver(self.hub, message)

    async def deliver(self, *ears: str) -> None:
        """Every message waiting at these subscribers, once."""
        for ear in ears:
            for message in await self.harness.raw.queue(ear).receive(32):
                await self.harness.deliver(ear, message)

    async def outputs(self) -> list[str]:
        """The tokens of the hub's round: one for each subscriber."""
        return [blob.name async for blob in self.tokens.list(f"{self.hub}/")]

    async def payload_names(self) -> list[str]:
        return [blob.name async for blob in self.payloads.list()]

    async def heard(self) -> dict[str, list[str]]:
        heard = {}
        for ear in self.ears:
            state = Heard()
            async for row in self.harness.rows(ear).states():
                state = Heard.model_validate_json(row.data)
            heard[ear] = state.texts
        return heard

    async def cleanup(self, grace_seconds: float) -> TaskReport:
        """One pass of the payload task."""
        harness = self.harness
        context = CleanupContext(
            harness.raw,
            harness.config,
            CleanupSettings(grace_seconds=grace_seconds, page_size=1000),
            harness.cleanup_rows(),
            to_datetime(harness.config.clock()),
        )
        task, report = SharedPayloads(), TaskReport("payloads")
        continuation: str | None = None
        while True:
            continuation = await task.run_page(context, continuation, report)
            if continuation is None:
                return report


EXPECTED = hashlib.sha256(TEXT.encode()).hexdigest()


async def test_a_publish_to_three_subscribers_writes_its_body_once(backend: Backend) -> None:
    shouting = await Shouting.create(backend)

    await shouting.shout()

    [payload] = await shouting.payload_names()
    body = (await shouting.payloads.read(payload)).data
    assert json.loads(body) == {"key": "k", "text": TEXT}
    tokens = [blob async for blob in shouting.tokens.list(f"{shouting.hub}/")]
    assert len(tokens) == 3
    assert all(token.size < 2000 for token in tokens)  # the body is not in them
    await shouting.harness.run_until_quiet()
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}
    assert await shouting.harness.tokens_in_flight() == []


async def test_a_payload_overwritten_by_an_attacker_gets_nothing_processed(
    backend: Backend,
) -> None:
    """Blob write access is not enough: the altered payload does not match the digest its
    tokens' names bind, so each subscriber parks the message at once with that reason and
    keeps its token. Put back (say, from a blob version), the replay processes it once."""
    shouting = await Shouting.create(backend, parked_container=unique_name("parked"))
    await shouting.harness.raw.blob_container(
        shouting.harness.config.parked_container
    ).create_if_missing()
    await shouting.shout()
    [payload] = await shouting.payload_names()
    genuine = await shouting.payloads.read(payload)
    forged = json.dumps({"key": "k", "text": "pay mallory"}).encode()
    await shouting.payloads.upload(payload, forged, genuine.metadata)

    await shouting.harness.run_until_quiet()

    assert await shouting.heard() == {ear: [] for ear in shouting.ears}
    for ear in shouting.ears:
        [parked] = await shouting.harness.raw.queue(poison_queue(ear)).peek()
        reason = str(unwrap(parked.content, ear).info["reason"])
        assert "altered since it was sent" in reason
    # The subscribers' three tokens, unclaimed, are all that is in flight (the hub's own
    # incoming token only waits for the cleanup's R7).
    outputs = await shouting.outputs()
    assert len(outputs) == 3
    assert sorted(await shouting.harness.tokens_in_flight()) == sorted(outputs)
    await shouting.payloads.upload(payload, genuine.data, genuine.metadata)
    for ear in shouting.ears:
        report = await replay_report(
            shouting.harness.raw, ear, container=shouting.harness.config.parked_container
        )
        assert report.replayed == 1
    await shouting.harness.run_until_quiet()
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}
    assert await shouting.harness.tokens_in_flight() == []


async def test_a_forged_signal_naming_anothers_payload_gets_nothing(backend: Backend) -> None:
    """Queue send access is not enough either. A signal whose envelope copy refers to the
    real payload's digest, under the attacker's own sender, looks for the payload under
    that sender and finds none; under the real sender's prefix, its copy is bound to its
    own made-up token name, which does not exist, so the claim fails. Neither is processed."""
    shouting = await Shouting.create(backend)
    await shouting.shout()
    [real] = [blob.name async for blob in shouting.tokens.list(f"{shouting.hub}/")][:1]
    envelope = Envelope.from_bytes((await shouting.tokens.read(real)).data)
    ear = envelope.destination
    sender, incoming, _, out, _ = real.split("/")
    outcomes = []
    for prefix in (f"mallory/{incoming}", f"{sender}/{incoming}"):
        attempt = "0badc0de-0000-4000-8000-000000000000"
        copy = envelope.model_copy(update={"source": prefix.split("/")[0]}).model_dump_json()
        name = f"{prefix}/{attempt}/{out}/{envelope_digest(copy.encode())}"
        signal = Signal(
            message_id=out,
            attempt_id=attempt,
            token=name,
            partition_key=envelope.partition_key,
            etag='"0x1"',
            envelope=copy,
        )
        outcomes.append(await shouting.harness.bus.receive(ear, signal.to_json()))

    assert outcomes == [Outcome.DUPLICATE, Outcome.DUPLICATE]
    assert (await shouting.heard())[ear] == []
    await shouting.harness.run_until_quiet()  # the real signals: processed once each
    assert await shouting.heard() == {e: [EXPECTED] for e in shouting.ears}


async def test_the_cleanup_removes_the_payload_only_after_the_last_token(
    backend: Backend,
) -> None:
    shouting = await Shouting.create(backend)
    await shouting.shout()
    assert (await shouting.cleanup(grace_seconds=3600)).kept == {"young": 1}
    await backend.elapse(1.5)
    await shouting.deliver(*shouting.ears[:2])
    # The two subscribers' records go with their tokens; the hub's waits for the third.
    assert await sweep_counted(shouting.harness) == Swept(2, 0, 2)
    [last] = await shouting.outputs()
    assert await shouting.harness.tokens_in_flight() == [last]

    waiting = await shouting.cleanup(grace_seconds=1)

    assert waiting.kept == {"tokens_waiting": 1}
    assert len(await shouting.payload_names()) == 1
    await shouting.deliver(shouting.ears[2])
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}
    # Consumed, the last token stays claimed until the cleanup's R7, and the payload with it:
    # a copy of its signal arriving meanwhile resumes (without reading it: test_payload_reads).
    assert (await shouting.cleanup(grace_seconds=1)).kept == {"tokens_waiting": 1}
    assert await sweep_counted(shouting.harness) == Swept(2, 0, 2)  # the hub's and the ear's
    gone = await shouting.cleanup(grace_seconds=1)
    assert (gone.removed, gone.kept) == ({"payloads": 1}, {})
    assert await shouting.payload_names() == []


async def test_a_duplicate_signal_after_the_payload_went_is_acknowledged(
    backend: Backend,
) -> None:
    """The payload goes once no token is left, so only after the cleanup's R7 deleted the
    consumed tokens; a copy of a signal still on its way then finds neither, and is a
    duplicate, not a loss."""
    shouting = await Shouting.create(backend)
    await shouting.shout()
    ear = shouting.ears[0]
    [signal] = await shouting.harness.raw.queue(ear).peek()
    await shouting.harness.run_until_quiet()
    await backend.elapse(1.5)
    # Consumed but not yet deleted, the tokens keep the payload: a copy now would resume.
    assert (await shouting.cleanup(grace_seconds=1)).kept == {"tokens_waiting": 1}
    await sweep_all(shouting.harness)
    assert (await shouting.cleanup(grace_seconds=1)).removed == {"payloads": 1}

    outcome = await shouting.harness.bus.receive(ear, signal.content)

    assert outcome is Outcome.DUPLICATE
    assert (await shouting.heard())[ear] == [EXPECTED]


async def test_a_missing_payload_whose_token_exists_is_retried_then_parked_saying_so(
    backend: Backend,
) -> None:
    shouting = await Shouting.create(
        backend, parked_container=unique_name("parked"), max_dequeue_count=3
    )
    await shouting.harness.raw.blob_container(
        shouting.harness.config.parked_container
    ).create_if_missing()
    await shouting.shout()
    [payload] = await shouting.payload_names()
    await shouting.payloads.delete(payload)
    ear = shouting.ears[0]
    [message] = await shouting.harness.raw.queue(ear).peek()

    tries = []
    for dequeue_count in (1, 2):
        try:
            await shouting.harness.bus.receive(ear, message.content, dequeue_count)
        except Exception as error:
            tries.append(type(error).__name__)
    last = await shouting.harness.bus.receive(ear, message.content, 3)

    assert (tries, last) == (["PayloadMissing", "PayloadMissing"], Outcome.POISONED)
    [parked] = await shouting.harness.raw.queue(poison_queue(ear)).peek()
    assert "shared payload" in str(unwrap(parked.content, ear).info["reason"])
    # Every subscriber's token is kept (the parked one's too); the hub's own incoming token
    # only waits for the cleanup's R7.
    outputs = await shouting.outputs()
    assert len(outputs) == 3
    assert sorted(await shouting.harness.tokens_in_flight()) == sorted(outputs)


async def test_a_parked_shared_message_is_shown_whole_and_replayed_once(
    backend: Backend,
) -> None:
    """``bus poison show`` (``view``) reads the body from the shared payload, checked; ``bus
    replay`` sends the signal back, and its token and payload were kept meanwhile."""
    shouting = await Shouting.create(
        backend,
        failures={0: 2},
        max_dequeue_count=2,
        parked_container=unique_name("parked"),
    )
    config = shouting.harness.config
    await shouting.harness.raw.blob_container(config.parked_container).create_if_missing()
    await shouting.shout()
    await shouting.harness.run_until_quiet()
    ear = shouting.ears[0]
    [parked] = await shouting.harness.raw.queue(poison_queue(ear)).peek()
    await backend.elapse(1.5)
    assert (await shouting.cleanup(grace_seconds=1)).kept == {"tokens_waiting": 1}

    shown = await view(
        shouting.harness.raw,
        ear,
        parked,
        tokens=config.tokens_container,
        parked=config.parked_container,
        payloads=config.payloads_container,
    )

    assert shown.body.state == "shown"
    assert "shared payload" in shown.body.note
    assert json.loads(shown.body.text or "") == {"key": "k", "text": TEXT}
    assert (
        await replay_report(shouting.harness.raw, ear, container=config.parked_container)
    ).replayed == 1
    await shouting.harness.run_until_quiet()
    assert await shouting.heard() == {e: [EXPECTED] for e in shouting.ears}
    await backend.elapse(1.5)
    await sweep_all(shouting.harness)  # R7: the consumed tokens go, then the payload can
    assert (await shouting.cleanup(grace_seconds=1)).removed == {"payloads": 1}


async def test_a_delayed_shared_event_waits_for_its_time_and_keeps_its_payload(
    backend: Backend,
) -> None:
    shouting = await Shouting.create(backend)
    await shouting.shout(delay_seconds=2)
    for ear in shouting.ears:
        assert await shouting.harness.raw.queue(ear).peek() == []  # hidden until due
    assert (await shouting.cleanup(grace_seconds=0)).kept == {"tokens_waiting": 1}

    await backend.elapse(2.5)
    await shouting.harness.run_until_quiet()

    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}


@pytest.mark.azurite
async def test_the_audit_lists_a_parked_shared_message_and_the_bulk_replay_sends_it_back(
    azurite: AzuriteEndpoints,
) -> None:
    """The audit's poisoned rows (``collect_poisoned``) verify the parked message against
    its token, which is kept, and the bulk replay's task (``replay_partition``, what each
    Spark task runs) sends its signal back: processed once, from the shared payload."""
    settings = StorageSettings(connection_string=azurite.connection_string)
    async with AzureStorageAccount(settings) as account:
        shouting = await Shouting.create(
            Backend("azurite", account),
            failures={0: 2},
            max_dequeue_count=2,
            parked_container=unique_name("parked"),
        )
        config = shouting.harness.config
        await account.blob_container(config.parked_container).create_if_missing()
        await shouting.shout()
        await shouting.harness.run_until_quiet()
        ear = shouting.ears[0]

        rows = await collect_poisoned(
            account, [ear], container=config.parked_container, tokens=config.tokens_container
        )
        task = ReplayTask(settings, config.parked_container)
        [(message_id, problem)] = [(row[2], row[8]) for row in rows]
        outcomes = await asyncio.to_thread(
            lambda: list(replay_partition(task, Counted(), [(ear, [message_id])]))
        )
        await shouting.harness.run_until_quiet()

        assert problem is None  # its token exists: a verifiable parked message
        assert [outcome[2] for outcome in outcomes] == ["sent"]
        assert await shouting.heard() == {e: [EXPECTED] for e in shouting.ears}


class Counted:
    """Stands in for the Spark accumulator the bulk job gives its tasks."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, term: int) -> None:
        self.total += term


async def test_a_clients_publish_shares_its_body_too(backend: Backend) -> None:
    """The ingress client creates its tokens the same way: one payload, named under the
    client's sender and the round's incoming id, whose origin is the ingress record."""
    shouting = await Shouting.create(backend)
    client = shouting.harness.setup_bus.client("loudspeaker")

    await client.publish(Shouted(key="k", text=TEXT), idempotency_key="p")

    [payload] = await shouting.payload_names()
    assert payload.startswith("loudspeaker/")
    await shouting.harness.run_until_quiet()
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}
    await backend.elapse(1.5)
    await sweep_all(shouting.harness)  # R7: the consumed tokens go, then the payload can
    assert (await shouting.cleanup(grace_seconds=1)).removed == {"payloads": 1}


def an_envelope(**fields: object) -> Envelope:
    values: dict[str, object] = {
        "id": "i",
        "type": "T",
        "kind": "event",
        "source": "s",
        "destination": "d",
        "partition_key": "p",
        "correlation_id": "c",
        "causation_id": None,
        "created_at": to_datetime(0),
        "headers": {"topic": "t"},
        **fields,
    }
    return Envelope.model_validate(values)


def test_an_envelope_with_its_body_inline_keeps_the_bytes_and_digest_it_had() -> None:
    """The bytes (and so the token names) of the version before shared payloads."""
    inline = an_envelope(body={"key": "k", "text": "é"})

    assert inline.to_bytes() == (
        b'{"id":"i","type":"T","kind":"event","source":"s","destination":"d",'
        b'"partition_key":"p","correlation_id":"c","causation_id":null,'
        b'"created_at":"1970-01-01T00:00:00Z","headers":{"topic":"t"},'
        b'"body":{"key":"k","text":"\xc3\xa9"}}'
    )
    assert envelope_digest(inline.to_bytes()) == "kPbujUpmYJeIgHmRx-100iPwQI3k1QYeehyEvAnVtAw"


def test_an_envelope_carries_its_body_or_a_payload_reference_exactly_once() -> None:
    reference = {"digest": "A" * 43, "size": 12}
    shared = an_envelope(payload=reference)

    assert b'"body"' not in shared.to_bytes()
    assert Envelope.from_bytes(shared.to_bytes()) == shared
    with pytest.raises(ValidationError, match="either its body or a payload reference"):
        an_envelope()
    with pytest.raises(ValidationError, match="either its body or a payload reference"):
        an_envelope(body={}, payload=reference)
    with pytest.raises(ValidationError, match="digest"):
        an_envelope(payload={"digest": "A", "size": 1})


def test_copies_of_one_envelope_share_one_payload_and_equal_bodies_of_other_outputs_do_not() -> (
    None
):
    """``share`` groups deliveries by the body object they hold (the copies
    ``plan_deliveries`` makes for one output's destinations), never by equality: Python finds
    ``{"flag": True} == {"flag": 1}``, and those are two different bodies."""
    padding = "p" * 9000
    first = an_envelope(body={"flag": True, "padding": padding})
    copies = [first.model_copy(update={"destination": f"d{i}"}) for i in range(3)]
    other = an_envelope(body={"flag": 1, "padding": padding})
    other_copy = other.model_copy(update={"destination": "e"})

    envelopes, payloads = share([first, *copies, other, other_copy], 8192)

    assert len(payloads) == 2
    flags = sorted(data[: data.index(b",")] for data in payloads.values())
    assert flags == [b'{"flag":1', b'{"flag":true']
    references = [e.payload.digest for e in envelopes if e.payload is not None]
    assert len(references) == 6
    assert len(set(references[:4])) == 1
    assert references[4] == references[5] != references[0]


def test_a_body_carried_by_one_delivery_or_short_enough_stays_inline() -> None:
    alone = an_envelope(body={"padding": "p" * 9000})
    short = an_envelope(body={"text": "é" * 3000})  # 6,000 UTF-8 bytes, but 3,000 characters
    short_copy = short.model_copy(update={"destination": "e"})

    envelopes, payloads = share([alone, short, short_copy], 8192)

    assert payloads == {}
    assert envelopes == [alone, short, short_copy]
