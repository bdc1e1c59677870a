"""The session phase (issue 45): web requests that commit a row of their own and the messages
they send together, through transactional sessions (``shared.bus.session``).

The app (``build_session_app``): ``first`` is declared ``sessions=True`` and handles nothing;
``second`` handles Step and ``third`` Happened, both token-mode receivers that journal what
they apply (``lab.sim.model``). The configuration's scheduled client sends
(``SimConfig.client_sends``) are the requests: request ``m<n>`` opens a session of ``first``
on partition ``k<n>`` under idempotency key ``m<n>`` and, unless it is a repeat
(``deduplicated``), inserts its order row (``order-m<n>-<try>``: a fresh row per try, as an
app that draws an order id per request would, so that only the key keeps a retry from
ordering twice), sends a Step to ``second`` and publishes Happened, which ``third``
subscribes to. The last ``SimConfig.session_rollbacks`` requests fail inside the block after
their writes and sends: the session rolls back. The first request is sent
``SimConfig.client_sends`` times under its key, so two sends of it may run at once (a request
racing its retry, or a dispatcher racing a redelivery) or one after the other; the others are
sent once. None is sent again after that: a client that never heard back gave up, so a
session committed by a request that stopped before its signals is finished by the cleanup
alone. A request that rolled back got its answer (an error of the app's own).

Every storage operation of a request is scheduled and faulted like an invocation's: its read
and insert of O(s), the topic read, the token creates, the commit (a late-landing one too),
the signals and the mark. The cleanup passes (``SimConfig.sweeps``, and those at the end)
run the sessions task of ``first`` beside the token tasks (``clean_sessions``), with a resend
delay (``SimConfig.session_resend``) one tick of the clock passes. While nothing runs and a
request is still to be sent again, time may jump past the grace period with a cleanup
pass (``SimConfig.waits``: a client that retries late). When the run is quiet, time passes the
resend delay and a cleanup pass runs once (the cleanup timer), so a session whose request
stopped between its commit and its signals has them sent, and the run goes on until that is
processed too.

Invariants (``check`` of ``lab.sim.invariants`` with the requests' order rows standing for
what ``first`` applied: id the session, name the request, cause the client; a request whose
client never heard back and whose session did not commit is excused from NoLostMessages, as
either outcome is right for it):
NoLostMessages (every message of a committed session processed, and every request that was
answered committed; a session's audit row only with its order row), NoGhostMessages (nothing
processed from a session that did not commit, nor from a request that rolled back; an order
row only with its session's audit row), NoDuplicatedProcessing (one order
row per request, each message processed once, whatever the retries and resends),
ConsistentOutput (each session's audit row lists the fault-free run's outputs) and
BoundedResidue: after the final pass no token is left, and after time passes the key's
window (``BUS_INGRESS_WINDOW_SECONDS``) and one more pass, no O(s) either.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

from lab.sim.cleanup import clean_sessions
from lab.sim.invariants import (
    BOUNDED_RESIDUE,
    NO_GHOST_MESSAGES,
    Observation,
    Violation,
    check,
)
from lab.sim.model import ENDPOINTS, Applied, Happened, Journal, SimApp, Step, record
from lab.sim.world import CLIENT, World
from shared.bus import BusApp, BusConfig, HandlerContext
from shared.bus.app import Endpoint, NoState
from shared.bus.records import AUDIT_PREFIX
from shared.bus.session import Session
from shared.bus.session_records import SESSION_PREFIX
from shared.errors import SessionConflict
from shared.stores.account import StorageAccount
from shared.stores.table import Entity

ORDER_PREFIX = "order-"


class RequestFailed(Exception):
    """A request's own failure inside its session's block, after its writes and sends."""


def build_session_app(suffix: str = "") -> SimApp:
    """``first`` takes sessions; ``second`` and ``third`` receive what they send."""
    app = BusApp()
    first: Endpoint[NoState] = app.endpoint(f"{ENDPOINTS[0]}{suffix}", sessions=True)
    second = app.endpoint(f"{ENDPOINTS[1]}{suffix}", Journal)
    third = app.endpoint(f"{ENDPOINTS[2]}{suffix}", Journal)

    @second.handles(Step)
    def step(ctx: HandlerContext[Journal], message: Step) -> None:
        record(ctx, message.path)

    @third.handles(Happened)
    def happened(ctx: HandlerContext[Journal], event: Happened) -> None:
        record(ctx, event.path)

    return SimApp(app, "single", first.name)


def order_digest(request: str) -> str:
    """What an order row says, reduced as ``model.digest`` reduces what a handler received."""
    return hashlib.sha256(json.dumps(["order", request]).encode()).hexdigest()[:16]


@dataclass
class SessionWorld(World):
    """A ``World`` whose client sends are web requests in transactional sessions."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tries: dict[int, int] = {}
        self.outcomes: dict[str, list[str]] = {}
        """Request -> how each of its sends ended that got an answer or a conflict:
        committed, deduplicated, rolled back, conflict."""
        self.resent = False
        self.left_beyond: list[str] = []
        """What the pass beyond the key's window left: O(s) rows and tokens."""
        self.unpaired: list[Violation] = []
        # The first request is sent ``client_sends`` times (a request racing its retry), the
        # others once; none again after that: a client that never heard back gave up.
        self.sends_left = {n: self.config.client_sends if n == 0 else 1 for n in self.sends_left}
        self.retries_left = dict.fromkeys(self.sends_left, 0)

    def _build_app(self, instrumented: StorageAccount) -> SimApp:
        return build_session_app(self.suffix)

    @property
    def _cleanup_config(self) -> BusConfig:
        return replace(self.bus_config, session_resend_seconds=self.config.session_resend)

    # -- the requests --------------------------------------------------------------------------

    def _session(self, partition: str, key: str) -> Session:
        declared = self.sim.app.get(self.sim.entry)
        return self.session_class(
            declared,
            self.bus.endpoint_state(declared.name).rows(),
            self.bus.account,
            self.bus.topics,
            self.bus_config,
            partition=partition,
            key=key,
            scope=declared.name,
        )

    async def _client_send(self, number: int) -> str:
        """Request ``m<number>``: a session under its key, its order row and its messages."""
        self.tries[number] = self.tries.get(number, 0) + 1
        name, partition = f"m{number}", f"k{number % self.config.partitions}"
        fails = number >= self.config.messages - self.config.session_rollbacks
        try:
            async with self._session(partition, name) as s:
                if s.deduplicated:
                    outcome = "deduplicated"
                else:
                    row = f"{ORDER_PREFIX}{name}-{self.tries[number]}"
                    fields = {"request": name, "session": s.session_id, "round": s.round_id}
                    s.insert(Entity(partition, row, fields))
                    s.send(Step(key=partition, hop=1, path=f"{name}>step"), to=self.endpoints[1])
                    if fails:
                        raise RequestFailed(f"request {name} failed after its writes")
                    s.publish(Happened(key=partition, path=f"{name}>happened"))
                    outcome = "committed"
        except RequestFailed:
            outcome = "rolled back"  # the client's answer: an error of the app's own
        except SessionConflict:
            self._ended(name, "conflict")
            raise  # no answer
        self._ended(name, outcome)
        self.receipts.add(number)
        return outcome

    def _ended(self, request: str, outcome: str) -> None:
        self.outcomes.setdefault(request, []).append(outcome)

    # -- time and the cleanup ------------------------------------------------------------------

    async def _cleanup(
        self, account: StorageAccount, grace: float, window: float, app: str | None = None
    ) -> None:
        await super()._cleanup(account, grace, window, app)
        entry = self.sim.entry
        rows = self._endpoint_rows(account)
        await clean_sessions(
            account,
            self.session_task(entry),
            {entry: rows[entry]},
            self._cleanup_config,
            grace_seconds=grace,
        )

    async def _wait_allowed(self) -> bool:
        """Also while a request is still to be sent again: the client's retry may come late."""
        if self.waited >= self.config.waits or self.scheduler.live() or self._unlanded():
            return False
        pending = any(left > 0 for left in self.sends_left.values())
        return pending or await super()._wait_allowed()

    async def _when_quiet(self) -> bool:
        """Once: time passes the resend delay and a cleanup pass runs (the timer), which
        signals a session whose request stopped after its commit; the run goes on."""
        if self.resent:
            return False
        self.resent = True
        await self._advance(self.config.session_resend + 1)
        await self._cleanup(self.quiet_account, self.config.sweep_grace, self.config.window)
        self._queues = {}
        self.fingerprint.barrier("resend")
        self.trace.append(f"{len(self.trace):4} time passes the resend delay; a cleanup pass runs")
        return True

    # -- the end -------------------------------------------------------------------------------

    async def _observe(self) -> Observation:
        seen = await super()._observe()
        entry = self.sim.entry
        orders: dict[str, Applied] = {}
        rounds: dict[str, str] = {}
        audited: set[str] = set()
        async for entity in self._endpoint_rows(self.account)[entry].every():
            if entity.row_key.startswith(ORDER_PREFIX):
                request = str(entity["request"])
                orders[entity.row_key] = Applied(
                    id=str(entity["round"]),
                    name=request,
                    source=CLIENT,
                    causation=None,
                    digest=order_digest(request),
                )
                rounds[entity.row_key] = str(entity["round"])
            elif entity.row_key.startswith(AUDIT_PREFIX):
                audited.add(entity.row_key.removeprefix(AUDIT_PREFIX))
        seen.applied[entry] = list(orders.values())
        seen.requests = {name: list(ended) for name, ended in self.outcomes.items()}
        # The audit rows outlive the run unless a stall or a wait outlasts their retention.
        kept = self.config.timing == "bounded" and not self.config.wait_outlasts_audit
        self.unpaired = [
            Violation(
                NO_GHOST_MESSAGES,
                f"order row {row} of {order.name} without its session's audit row: its session "
                "never committed",
            )
            for row, order in sorted(orders.items())
            if kept and rounds[row] not in audited
        ]
        await self._beyond_the_window()
        return seen

    async def _beyond_the_window(self) -> None:
        """Time passes the key's window; a cleanup pass (two: the receivers' R7 may come
        after the sessions task in one) must leave no O(s) and no token."""
        await self._advance(self.bus_config.ingress_window_seconds + 1)
        for _ in range(2):
            await self._cleanup(self.quiet_account, self.config.sweep_grace, self.config.window)
        rows = self._endpoint_rows(self.account)[self.sim.entry]
        self.left_beyond = [e.row_key async for e in rows.every(row_key_prefix=SESSION_PREFIX)]
        tokens = self.account.blob_container(self.bus_config.tokens_container)
        self.left_beyond += [blob.name async for blob in tokens.list()]

    async def _check(self, seen: Observation, reference: Observation) -> list[Violation]:
        """``check``, excusing the requests whose client never heard back and whose session
        did not commit (either is right for them: nothing of theirs may then be processed,
        which NoGhostMessages checks); an answered request is never excused."""
        committed = {a.name for a in seen.applied.get(self.sim.entry, [])}
        excused = {f"m{n}" for n in self.sends_left if n not in self.receipts} - committed
        found = check(
            seen,
            reference,
            client=CLIENT,
            residue=self.config.residue_checked,
            excused=excused,
        )
        found += self.unpaired
        if self.config.residue_checked and self.left_beyond:
            found.append(
                Violation(
                    BOUNDED_RESIDUE,
                    f"{len(self.left_beyond)} session record(s) or token(s) left after a pass "
                    "beyond the key's window: " + ", ".join(self.left_beyond[:3]),
                )
            )
        return found
