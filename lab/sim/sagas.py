"""The saga phase (issue 46): a saga endpoint (``BusApp.saga``, ``shared.bus.saga``) whose
instance starts, takes a reply, completes, and then meets a second starting message.

The app (``build_saga_app``): ``first`` is a saga with state ``Journal``, started by Start;
``second`` an ordinary token-mode endpoint (its state a ``Ledger``). Before the run the
client sends m0, a Start for instance ``k0``, and m1, a Pay for ``k1``, an instance nobody
starts; each is queued ``SimConfig.copies`` times. Then, each step the cause of the next:

1. Start (m0) creates ``k0`` and sends Charge to ``second``;
2. ``second`` replies CardCharged, correlated by a card and not by the order, so that only the
   reply header brings it back to ``k0`` (the second message for the instance);
3. CardCharged sends Ship to the saga itself; Ship completes the instance (the completing
   message) and sends Closed to ``second``, carrying the instance's journal, which the
   completion removes from its row;
4. ``second`` keeps that journal and sends a Start for ``k0`` again: a new message id with
   the same correlation, as a client's retry under a new key is. It finds the completed
   marker and is ``saga_not_found``, as is m1 (a Start after a Start that was itself such a
   retry sends nothing, so a run that wrongly starts ``k0`` again still ends).

Faults at every storage operation, copies and redeliveries, a cleanup pass at any point:
``World``'s. What the saga applied is read from the journals ``second`` keeps (and from a
live instance's row, should one be left), so the usual invariants judge its handlers and
outputs (NoDuplicatedProcessing, NoGhostMessages, NoLostMessages, ConsistentOutput: each
audit row's outputs, the reply's among them, and the journal that Closed carries); the audit
rows of the messages that found no instance are judged by ``check_sagas``
(``lab.sim.invariants``) with the instances' rows: NoResurrectedInstance,
NoUnstartedInstance, NoProcessingAfterCompletion and SagaNotFoundOnce.

A known-bad variant replaces the saga endpoint's receiver with a subclass in the lab
(``SagaVariantBus``), or wraps the stores as every other variant does.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.sim.invariants import (
    PROCESSED,
    Ended,
    Instance,
    Observation,
    Violation,
    check,
    check_sagas,
)
from lab.sim.model import ENDPOINTS, Applied, Journal, SimApp, Start, record
from lab.sim.world import CLIENT, World
from shared.bus import Bus, BusApp, BusConfig, Command, HandlerContext, Message
from shared.bus.pipeline import Pipeline
from shared.bus.receiver import Receiver
from shared.bus.records import AUDIT_PREFIX, STATE_ROW
from shared.bus.saga import SagaRow
from shared.bus.state.stores import DocumentDatabase, SqlDatabase
from shared.stores.account import StorageAccount

STARTED = "k0"
"""The instance the client's Start starts."""
NEVER_STARTED = "k1"
"""The instance the client's Pay is for: no message starts it."""


class Pay(Command):
    """A payment for an order: recorded by a live instance; m1 is for one never started."""

    partition_by = "key"
    key: str
    request: str


class Charge(Command):
    partition_by = "key"
    key: str
    path: str


class CardCharged(Command):  # not "Charged": the effect configurations' answer has that name
    """``second``'s reply to Charge: its own correlation property is the card, whose
    partition no instance is, so the reply header alone brings it to the instance."""

    partition_by = "card"
    card: str
    path: str


class Ship(Command):
    """The completing message: the saga sends it to itself."""

    partition_by = "key"
    key: str
    path: str


class Closed(Command):
    """The completed instance's journal, sent by its completing handler."""

    partition_by = "key"
    key: str
    path: str
    started: str
    """The logical name of the message that started the instance."""
    instance: list[Applied]


class Ledger(Journal):
    """``second``'s state: its own journal and the journals of the instances it was told
    were closed."""

    closed: list[Applied] = []


def build_saga_app(suffix: str = "") -> SimApp:
    app = BusApp()
    saga = app.saga(f"{ENDPOINTS[0]}{suffix}", Journal, started_by=[Start])
    second = app.endpoint(f"{ENDPOINTS[1]}{suffix}", Ledger)

    @saga.handles(Start)
    def start(ctx: HandlerContext[Journal], message: Start) -> None:
        record(ctx, message.request)
        ctx.send(Charge(key=message.key, path=f"{message.request}>charge"), to=second.name)

    @saga.handles(Pay)
    def pay(ctx: HandlerContext[Journal], message: Pay) -> None:
        record(ctx, message.request)

    @saga.handles(CardCharged)
    def charged(ctx: HandlerContext[Journal], message: CardCharged) -> None:
        record(ctx, message.path)
        ctx.send(Ship(key=ctx.partition_key, path=f"{message.path}>ship"), to=saga.name)

    @saga.handles(Ship)
    def ship(ctx: HandlerContext[Journal], message: Ship) -> None:
        record(ctx, message.path)
        ctx.complete()
        journal = list(ctx.state.applied)
        path = f"{message.path}>closed"
        started = journal[0].name if journal else ""  # a wrongly started instance may have none
        closed = Closed(key=message.key, path=path, started=started, instance=journal)
        ctx.send(closed, to=second.name)

    @second.handles(Charge)
    def charge(ctx: HandlerContext[Journal], message: Charge) -> None:
        record(ctx, message.path)
        ctx.reply(CardCharged(card=f"card-{message.key}", path=f"{message.path}>charged"))

    @second.handles(Closed)
    def closed(ctx: HandlerContext[Journal], message: Closed) -> None:
        record(ctx, message.path)
        if isinstance(ctx.state, Ledger):  # second's state is a Ledger
            ctx.state.closed.extend(message.instance)
        if ">" not in message.started:  # started by a client's message: its retry comes
            ctx.send(Start(key=message.key, request=f"{message.path}>again"), to=saga.name)

    app.check()
    return SimApp(app, "single", saga.name)


class SagaVariantBus(Bus):
    """A bus whose saga endpoint receives with a known-bad variant's ``Receiver``."""

    def __init__(
        self,
        app: BusApp,
        account: StorageAccount,
        config: BusConfig,
        *,
        sql: SqlDatabase | None,
        cosmos: DocumentDatabase | None = None,
        receiver: type[Receiver],
    ) -> None:
        super().__init__(app, account, config, sql=sql, cosmos=cosmos)
        self._variant = receiver
        self._variant_receivers: dict[str, Pipeline] = {}

    def receiver(self, endpoint: str) -> Pipeline:
        declared = self.app.get(endpoint)
        if declared.saga is None:
            return super().receiver(endpoint)
        found = self._variant_receivers.get(endpoint)
        if found is None:
            found = self._variant_receivers[endpoint] = self._variant(
                declared,
                self.account,
                self.topics,
                self.config,
                state=self.endpoint_state(endpoint),
                budget=self.budget,
            )
        return found


@dataclass
class SagaWorld(World):
    """A ``World`` whose app is the saga's (``build_saga_app``)."""

    def _build_app(self, instrumented: StorageAccount) -> SimApp:
        return build_saga_app(self.suffix)

    def _bus(self) -> Bus:
        if self.receiver_class is None:
            return super()._bus()
        return SagaVariantBus(
            self.sim.app,
            self.watch,
            self.bus_config,
            sql=self.counted_sql,
            cosmos=self.counted_documents,
            receiver=self.receiver_class,
        )

    def _initial(self, number: int) -> tuple[Message, str | None]:
        """m0 starts ``k0``; m1 pays for ``k1``, which nothing starts."""
        if number == 0:
            return Start(key=STARTED, request="m0"), self.sim.entry
        return Pay(key=NEVER_STARTED, request=f"m{number}"), self.sim.entry

    async def _observe(self) -> Observation:
        seen = await super()._observe()
        saga, ledger = self.endpoints[0], self.endpoints[1]
        rows = self._endpoint_rows(self.account)
        instances: dict[str, Instance] = {}
        outcomes: dict[str, list[Ended]] = {}
        applied: list[Applied] = []
        async for entity in rows[saga].every():
            if entity.row_key == STATE_ROW:
                row = SagaRow.decode(str(entity["data"]), f"{saga} {entity.partition_key}")
                instances[entity.partition_key] = Instance(row.completed, row.started_by)
                applied += Journal.model_validate(row.state or {}).applied
            elif entity.row_key.startswith(AUDIT_PREFIX):
                ended = Ended(entity.partition_key, str(entity.get("outcome", PROCESSED)))
                outcomes.setdefault(str(entity["message_id"]), []).append(ended)
        async for entity in rows[ledger].every(row_key=STATE_ROW):
            applied += Ledger.model_validate_json(str(entity["data"])).closed
        seen.applied[saga] = applied
        seen.instances[saga] = instances
        seen.outcomes[saga] = outcomes
        # A message that found no instance ran no handler: check_sagas judges its audit row.
        processed = {m for m, ended in outcomes.items() if PROCESSED in {e.outcome for e in ended}}
        caused = seen.caused.get(saga, {})
        seen.caused[saga] = {m: c for m, c in caused.items() if m in processed}
        return seen

    async def _check(self, seen: Observation, reference: Observation) -> list[Violation]:
        found = check(seen, reference, client=CLIENT, residue=self.config.residue_checked)
        return found + check_sagas(seen, reference)
