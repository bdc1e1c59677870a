"""The test kit: a user's app run through the real receive pipeline over the in-memory
stores, on a manual clock, with the faults the simulator injects at hand.

Every delivery goes through the local host's queue worker (``shared.queue_trigger``: the
queue trigger's acknowledgement, retries and poison moves) and the bus's pipeline over an
instrumented account (``shared.stores.instrumented``), so a test can crash a delivery before
or after any storage operation. What the test reads (state, audit rows, tokens) is read
through the account itself, so reading never shifts the operations a fault plan counts."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Literal, TypeVar

from pydantic import BaseModel

from shared.bus import Bus, BusApp, BusConfig, Command, Event, Message, Outcome
from shared.bus.effects import EffectRequest
from shared.bus.envelope import TOKEN_NAME
from shared.bus.ingress import SendReceipt
from shared.bus.poison import PoisonRecord, read_poison
from shared.bus.state.instrumented import InstrumentedSql
from shared.bus.state.memory_sql import MemorySqlDatabase
from shared.clock import ManualClock
from shared.effects.memory import InMemoryProvider
from shared.errors import KitError, NotFound
from shared.host_json import QueueSettings
from shared.provisioning import provision
from shared.queue_trigger import QueueWorker
from shared.resources import poison_queue, resources_of
from shared.stores.instrumented import (
    Fault,
    Instrumentation,
    InstrumentedAccount,
    Operation,
    SimulatedCrash,
    no_faults,
)
from shared.stores.memory import MemoryStorageAccount
from shared.stores.memory.documents import MemoryDocumentDatabase
from shared.stores.queue import QueueMessage
from shared.testing.app_copy import copied_app, with_memory_performer
from shared.testing.records import AuditEntry, Delivered, audit_entry, delivered, token_message

S = TypeVar("S", bound=BaseModel)
M = TypeVar("M", bound=Message)

SENDER = "kit"
"""The ingress sender of the messages a test sends; they are the test's input, not output."""
LEASE_SECONDS = 30.0
MAX_DEQUEUE_COUNT = 5
"""host.json's default: a message failing this often is parked with its last error."""
MAX_PASSES = 1000
PEEK = 32
When = Literal["before", "after"]
_CRASHES: dict[When, Fault] = {"before": Fault.CRASH_BEFORE, "after": Fault.CRASH_AFTER}


class BusKit:
    """``app`` (a copy of it) on fresh in-memory stores. Nothing runs until the test sends:
    the stores are provisioned and the topics subscribed on first use."""

    def __init__(self, app: BusApp, *, seed: int = 0) -> None:
        self.clock = ManualClock()
        """The time every store and handler sees (``ctx.now()``); moved by ``advance``."""
        self.account = MemoryStorageAccount(clock=self.clock)
        self.instrumentation = Instrumentation()
        processing = InstrumentedAccount(self.account, self.instrumentation)
        self.app = copied_app(app)
        self.providers: dict[str, InMemoryProvider] = with_memory_performer(self.app, processing)
        """One in-memory provider per declared service; see ``provider``."""
        self.config = BusConfig(
            clock=self.clock,
            jitter=random.Random(seed),
            backoff_base=0.001,
            topic_cache_seconds=0.0,
            max_dequeue_count=MAX_DEQUEUE_COUNT,
        )
        sql = MemorySqlDatabase()
        cosmos = MemoryDocumentDatabase()
        self._bus = Bus(
            self.app,
            processing,
            self.config,
            sql=InstrumentedSql(sql, self.instrumentation),
            cosmos=cosmos,
        )
        self._reader = Bus(self.app, self.account, self.config, sql=sql, cosmos=cosmos)
        settings = QueueSettings(max_dequeue_count=MAX_DEQUEUE_COUNT, lease_seconds=LEASE_SECONDS)
        self._workers = {
            name: QueueWorker(processing, name, self._receiver(name), settings)
            for name in self.app.endpoints
        }
        self.outcomes: Counter[Outcome] = Counter()
        """How each delivery ended (processed, duplicate, resumed, poisoned...)."""
        self.crashes = 0
        self._containers = (self.config.tokens_container, self.config.payloads_container)
        self._seen: dict[tuple[str, str], Delivered] = {}
        self._keys = 0
        self._started = False

    def _receiver(self, endpoint: str) -> Callable[[str, int], Awaitable[None]]:
        async def receive(raw: str, dequeue_count: int) -> None:
            self.outcomes[await self._bus.receive(endpoint, raw, dequeue_count)] += 1

        return receive

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        config = self.config
        await provision(
            self.account,
            resources_of(
                config,
                (*self.app.endpoints, *self.app.routes.external),
                [e.name for e in self.app.endpoints.values() if e.store == "blob"],
            ),
        )
        await self._reader.subscribe_all()

    # Sending: the test's input, through the ingress as a client sends.

    async def send(
        self, command: Command, *, to: str, key: str | None = None, delay: timedelta | None = None
    ) -> SendReceipt:
        """Send ``command`` to endpoint ``to`` as a client does; ``key`` is its idempotency
        key (default: a new one per call, so each send is a new message)."""
        await self._start()
        client = self._reader.client(SENDER)
        return await client.send(command, to=to, idempotency_key=key or self._key(), delay=delay)

    async def publish(
        self, event: Event, *, key: str | None = None, delay: timedelta | None = None
    ) -> SendReceipt:
        """Publish ``event`` to its topic's subscribers, as a client does."""
        await self._start()
        client = self._reader.client(SENDER)
        return await client.publish(event, idempotency_key=key or self._key(), delay=delay)

    def _key(self) -> str:
        self._keys += 1
        return f"kit-{self._keys}"

    # Running.

    async def run_until_quiet(self, max_passes: int = MAX_PASSES) -> None:
        """Deliver every visible message of every endpoint, again and again, until none is
        left. Delayed messages and delayed retries stay hidden until ``advance`` reaches them."""
        await self._start()
        for _ in range(max_passes):
            busy = False
            for endpoint in self.app.endpoints:
                queue = self.account.queue(endpoint)
                for message in await queue.receive(PEEK, visibility_timeout=LEASE_SECONDS):
                    busy = True
                    await self._deliver(endpoint, message)
            if not busy:
                return
        raise KitError(
            f"the app did not become quiet after {max_passes} passes over its queues: "
            "do its handlers send messages to each other without end?"
        )

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on (delays, delayed retries and timeouts come due),
        then run until quiet."""
        self.clock.advance(seconds)
        await self.run_until_quiet()

    async def _deliver(self, endpoint: str, message: QueueMessage) -> None:
        """One function invocation. A crash ends it before its acknowledgement; the message
        is then visible again at once, as it would be once its lease ran out."""
        found = await delivered(self.account, self._containers, message.content)
        if found is not None:
            self._seen.setdefault((found.id, found.destination), found)
        try:
            await self._workers[endpoint].run_one(message)
        except SimulatedCrash:
            self.crashes += 1
            with contextlib.suppress(NotFound):  # gone if the crash came after the ack
                await self.account.queue(endpoint).update(
                    message.id, message.pop_receipt, visibility_timeout=0
                )

    async def _take(self, endpoint: str) -> QueueMessage:
        await self._start()
        self.app.get(endpoint)
        taken = await self.account.queue(endpoint).receive(1, visibility_timeout=LEASE_SECONDS)
        if not taken:
            raise KitError(f"no message is waiting at endpoint {endpoint}")
        return taken[0]

    async def deliver(self, endpoint: str) -> list[Operation]:
        """Deliver the next message waiting at ``endpoint`` once; the storage operations that
        delivery made, in order (what ``crash`` counts)."""
        message = await self._take(endpoint)
        mark = self.instrumentation.count
        await self._deliver(endpoint, message)
        return self.instrumentation.operations[mark:]

    # Faults.

    async def duplicate(self, endpoint: str, copies: int = 2) -> None:
        """Make the next message waiting at ``endpoint`` arrive ``copies`` times in all, as
        at-least-once queues may deliver it; ``run_until_quiet`` delivers them one by one."""
        _check_copies(copies)
        await self._start()
        queue = self.account.queue(endpoint)
        waiting = await queue.peek(1)
        if not waiting:
            raise KitError(f"no message is waiting at endpoint {endpoint}")
        for _ in range(copies - 1):
            await queue.send(waiting[0].content)

    async def deliver_concurrently(self, endpoint: str, copies: int = 2) -> None:
        """Deliver ``copies`` copies of the next message waiting at ``endpoint`` at the same
        time: each copy lets the others run at every storage operation it makes, so their
        steps interleave as two workers' would."""
        _check_copies(copies)
        first = await self._take(endpoint)
        queue = self.account.queue(endpoint)
        for _ in range(copies - 1):
            await queue.send(first.content)
        held = [first]
        others: list[QueueMessage] = []
        while len(held) < copies:
            received = await queue.receive(PEEK, visibility_timeout=LEASE_SECONDS)
            if not received:
                raise KitError(f"the copies sent to {endpoint} did not arrive")
            for message in received:
                same = message.content == first.content and len(held) < copies
                (held if same else others).append(message)
        for message in others:
            await queue.update(message.id, message.pop_receipt, visibility_timeout=0)
        self.instrumentation.on_operation = _let_others_run
        try:
            await asyncio.gather(*(self._deliver(endpoint, m) for m in held))
        finally:
            self.instrumentation.on_operation = None

    async def crash(self, endpoint: str, *, at: int | str, when: When = "before") -> Operation:
        """Deliver the next message waiting at ``endpoint`` and crash that invocation
        ``when`` (before or after) storage operation ``at``: its position among the
        delivery's operations (from 0, as ``deliver`` lists them) or the first of a kind
        (``"table.transact"``, ``"blob.create"``...). The message comes back at once; run
        until quiet to let it recover. Returns the operation it crashed at."""
        message = await self._take(endpoint)
        mark = self.instrumentation.count
        fault = _CRASHES[when]
        chosen: list[Operation] = []

        def plan(op: Operation) -> Fault | None:
            position = op.index - mark
            if chosen or (op.kind != at if isinstance(at, str) else position != at):
                return None
            chosen.append(op)
            return fault

        self.instrumentation.plan = plan
        try:
            await self._deliver(endpoint, message)
        finally:
            self.instrumentation.plan = no_faults
        if not chosen:
            made = [op.kind for op in self.instrumentation.operations[mark:]]
            raise KitError(f"the delivery made no operation {at!r}; it made {made}")
        return chosen[0]

    # Reading.

    async def state(self, endpoint: str, partition: str, model: type[S]) -> S:
        """The committed state of ``partition`` at ``endpoint`` as ``model`` (the model's
        defaults when nothing was committed there)."""
        await self._start()
        async for row in self._reader.endpoint_state(endpoint).states():
            if row.partition_key == partition:
                return model.model_validate_json(row.data)
        return model()

    async def audit(self, endpoint: str) -> list[AuditEntry]:
        """The audit rows of ``endpoint``: one per message it processed, with what it caused."""
        await self._start()
        rows = self._reader.endpoint_state(endpoint)
        return [
            audit_entry(endpoint, entity.partition_key, entity.properties)
            async for entity in rows.audit_entities()
        ]

    async def messages(
        self, *, to: str | None = None, of: type[Message] | None = None
    ) -> list[Delivered]:
        """Every message the app's handlers sent or published and committed (one per
        destination: an event once per subscriber), as the audit rows list them, whether
        delivered yet or not; not the test's own sends. ``to`` (a destination) and ``of`` (a
        message type) filter them."""
        found: list[Delivered] = []
        unseen: dict[str, Delivered] | None = None
        for endpoint in self.app.endpoints:
            for entry in await self.audit(endpoint):
                for caused in entry.caused or ():
                    if to is not None and caused.destination != to:
                        continue
                    message = self._seen.get((caused.id or "", caused.destination or ""))
                    if message is None:
                        unseen = unseen if unseen is not None else await self._waiting()
                        message = unseen.get(caused.id or "")
                    if message is not None and (of is None or message.is_a(of)):
                        found.append(message)
        return found

    async def sent(self, model: type[M], *, to: str | None = None) -> list[M]:
        """The messages of type ``model`` the app's handlers sent (``messages``), as models."""
        return [m.as_(model) for m in await self.messages(to=to, of=model)]

    async def _waiting(self) -> dict[str, Delivered]:
        """Messages whose tokens are still there (not processed yet, or sent to an endpoint
        of another app), by message id."""
        tokens = self.account.blob_container(self._containers[0])
        waiting: dict[str, Delivered] = {}
        async for blob in tokens.list():
            match = TOKEN_NAME.fullmatch(blob.name)
            if match is None or match["out"] in waiting:
                continue
            found = await token_message(self.account, self._containers, blob.name)
            if found is not None:
                waiting[found.id] = found
        return waiting

    async def effects(self, service: str | None = None) -> list[EffectRequest]:
        """The effects the app's handlers requested and committed (of ``service``, or all)."""
        requests = await self.sent(EffectRequest)
        return [r for r in requests if service is None or r.service == service]

    def provider(self, service: str) -> InMemoryProvider:
        """The in-memory provider answering the calls to ``service``: it succeeds by default;
        set ``declines``, ``lost_answers`` or ``unavailable`` to the number of next calls
        to refuse for good, to apply and lose the answer of, or to refuse with a 503; its
        ``ledger`` holds what it applied."""
        try:
            return self.providers[service]
        except KeyError:
            raise KitError(
                f"the app declares no service {service!r} (it declares {sorted(self.providers)})"
            ) from None

    async def parked(self, endpoint: str | None = None) -> list[PoisonRecord]:
        """The messages parked in ``endpoint``'s poison queue (every endpoint's by default),
        each with its reason, as ``bus poison list`` reads them."""
        await self._start()
        names = [endpoint] if endpoint is not None else list(self.app.endpoints)
        found: list[PoisonRecord] = []
        for name in names:
            self.app.get(name)
            peeked = await self.account.queue(poison_queue(name)).peek(PEEK)
            found += [read_poison(m.content) for m in peeked]
        return found


async def _let_others_run(operation: Operation) -> None:
    await asyncio.sleep(0)


def _check_copies(copies: int) -> None:
    if copies < 2:
        raise KitError(f"copies counts the message itself: at least 2, not {copies}")
