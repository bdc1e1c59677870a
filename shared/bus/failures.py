"""What happens to a failing message: the one place that decides it (docs/retries.md).

``Pipeline.receive`` hands every error of a delivery here (``Failures.settle``), and ``RULES``
decides, read top to bottom; the first row that matches is the outcome. Rows with a stage
answer a condition of the message itself, met while reading its signal or processing its
message (a newer version's, a malformed one, one not due yet, no room in the body budget): the
message is given back, parked, deferred or postponed, and this copy may be acknowledged. The
rows without a stage decide a failure: any other error, and an error raised by one of those
answers (a send that failed). A failure is parked at once when retrying cannot help
(``PermanentFailure``), retried now or later by the endpoint's retry policy
(``shared.bus.retries``), else raised to the host, which delivers it again, and parked on the
host's last try. A delayed retry that could not be sent falls on to the rows below it.

The app's state store not answering (``StateUnreachable``: its table in the state account, its
PostgreSQL database or its Cosmos DB or blob documents timed out, lost its connection or
answered 5xx) is no failure of the message's: the message waits, sent again unchanged and
hidden for a growing, capped, jittered wait (``BUS_STATE_WAIT_MAX_SECONDS``), and this copy is
acknowledged, as a postponed one is.
No try is spent, the retry policy is not used, and it is never parked for this, however long
the outage: a separate state account leaves the queue trigger delivering while the state is
down, and without this each delivery would spend one of the host's ``maxDequeueCount`` tries.
The row applies whichever account holds the state: with one account for both roles, an
account wholly down fails the re-send too, and the error then goes on to the rows below
(raised to the host, as before; the trigger cannot fetch messages from that account either),
while an account whose table service alone is down, or a single request lost, lets the
message wait without spending a try. The waits grow with the outage this endpoint has seen:
each is as long as the outage has lasted so far (``FIRST_STATE_WAIT_SECONDS`` at least), so
a message's waits double wave after wave while the messages meeting one outage at once wait
alike; the first receive that ends without an error starts them afresh.

The actions carry the rows out with the modules that know their part: ``shared.bus.giveback``,
``shared.bus.schedule``, ``shared.bus.retries``, ``shared.bus.poison``, ``shared.bus.budget``.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, replace
from typing import Any

from shared.bus.app import Endpoint
from shared.bus.budget import BodyBudgetExhausted
from shared.bus.config import BusConfig
from shared.bus.delivery import Delivery, Outcome
from shared.bus.envelope import Signal, bus_message_id
from shared.bus.giveback import (
    afresh_text,
    count_of,
    describe,
    given_back_text,
    kind_of,
    next_step,
    parking_reason,
)
from shared.bus.poison import Reason, error_reason, park, utc_time
from shared.bus.retries import RetryPolicy
from shared.bus.schedule import NotYetDue, reschedule, send_hidden
from shared.clock import to_datetime
from shared.errors import (
    InvalidName,
    MalformedSignal,
    MessageSchemaError,
    NewerVersion,
    NotFound,
    PayloadMissing,
    PermanentFailure,
    StateUnreachable,
)
from shared.logsafe import REASON_CHARS, shown
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer

# The receive pipeline's logger: its failure lines have always been the receiver's.
log = logging.getLogger("shared.bus.receiver")

MIN_POSTPONE_SECONDS = 1.0
"""The shortest a postponed message is hidden: long enough for a worker to finish something."""


FIRST_STATE_WAIT_SECONDS = 5.0
"""The first wait for a state store that does not answer (or the cap, if that is shorter)."""
STATE_WAIT_JITTER = 0.2
"""Each wait is drawn from the last fifth below its nominal value, so that the messages of an
outage do not all come back at once."""


class Stage(enum.Enum):
    """Where a condition of the message itself was met."""

    SIGNAL = "reading its signal"
    MESSAGE = "processing its message"


class Action(enum.Enum):
    RETRY_NOW = "retry now"
    """Receive it again at once, in this invocation."""
    RETRY_LATER = "retry later"
    """Send its signal again hidden for the policy's next backoff, or park it once the delayed
    retries are used up."""
    GIVE_BACK = "give back"
    """Send its signal again hidden for an upgraded instance, or park it once the give-back
    window is used up."""
    DEFER = "defer"
    """Hide its signal again until its due time."""
    POSTPONE = "postpone"
    """Send its text again, unchanged, hidden for the body budget's wait."""
    WAIT = "wait for the state store"
    """Send its text again, unchanged, hidden for a growing wait: no try is spent and it is
    never parked for this; a send that fails falls on to the rows below."""
    PARK = "park"
    """Park it in the poison queue with its reason."""
    DUPLICATE_IF_GONE = "duplicate if its token is gone"
    """Acknowledge it as a duplicate if its token is gone; else it is a failure."""
    RAISE_TO_HOST = "raise to the host"
    """Raise the error: the host delivers the message again."""


class Given(enum.Enum):
    """What must hold besides the error's type for a row to apply."""

    ALWAYS = "always"
    IMMEDIATE_RETRY_LEFT = "its retry policy has an immediate retry left"
    RETRY_POLICY = "it has a retry policy and a signal"
    HOST_TRIES_LEFT = "this is not the host's last try (BusConfig.max_dequeue_count)"


@dataclass(frozen=True)
class Rule:
    condition: str
    """The row in words, for the docs and the test that holds it."""
    errors: tuple[type[BaseException], ...]
    stage: Stage | None
    """Where a condition of the message was met; None for a failure, wherever it came from."""
    given: Given
    action: Action
    note: str = ""
    """Why a failure is parked now, in its reason."""

    def matches(self, error: BaseException, stage: Stage | None) -> bool:
        return self.stage is stage and isinstance(error, self.errors)


RULES: tuple[Rule, ...] = (
    Rule(
        "a signal in a format newer than this instance reads",
        (NewerVersion,),
        Stage.SIGNAL,
        Given.ALWAYS,
        Action.GIVE_BACK,
    ),
    Rule(
        "a signal that is not one (bad JSON or schema, nested too deeply, a bad partition key)",
        (MalformedSignal, InvalidName),
        Stage.SIGNAL,
        Given.ALWAYS,
        Action.PARK,
    ),
    Rule(
        "no room in the worker's body budget within its wait",
        (BodyBudgetExhausted,),
        Stage.MESSAGE,
        Given.ALWAYS,
        Action.POSTPONE,
    ),
    Rule(
        "a token or message written by a newer version",
        (NewerVersion,),
        Stage.MESSAGE,
        Given.ALWAYS,
        Action.GIVE_BACK,
    ),
    Rule(
        "a token or body that breaks its format or its message's schema",
        (MalformedSignal, MessageSchemaError),
        Stage.MESSAGE,
        Given.ALWAYS,
        Action.PARK,
    ),
    Rule(
        "a delayed message before its due time",
        (NotYetDue,),
        Stage.MESSAGE,
        Given.ALWAYS,
        Action.DEFER,
    ),
    Rule(
        "a shared payload missing",
        (PayloadMissing,),
        Stage.MESSAGE,
        Given.ALWAYS,
        Action.DUPLICATE_IF_GONE,
    ),
    Rule(
        "a failure retrying cannot help (DoNotRetry, a limit)",
        (PermanentFailure,),
        None,
        Given.ALWAYS,
        Action.PARK,
        note="not retried",
    ),
    Rule(
        "the app's state store not answering (a timeout, a lost connection, a 5xx)",
        (StateUnreachable,),
        None,
        Given.ALWAYS,
        Action.WAIT,
    ),
    Rule(
        "a failure with an immediate retry left",
        (Exception,),
        None,
        Given.IMMEDIATE_RETRY_LEFT,
        Action.RETRY_NOW,
    ),
    Rule(
        "a failure under a retry policy",
        (Exception,),
        None,
        Given.RETRY_POLICY,
        Action.RETRY_LATER,
    ),
    Rule(
        "a failure before the host's last try",
        (Exception,),
        None,
        Given.HOST_TRIES_LEFT,
        Action.RAISE_TO_HOST,
    ),
    Rule(
        "a failure on the host's last try",
        (Exception,),
        None,
        Given.ALWAYS,
        Action.PARK,
    ),
)


class Failures:
    """One endpoint's failure policy: ``RULES`` and the actions that carry them out."""

    def __init__(
        self,
        endpoint: Endpoint[Any],
        account: StorageAccount,
        config: BusConfig,
        tokens: BlobContainer,
    ) -> None:
        self.endpoint = endpoint
        self.account = account
        self.config = config
        self.tokens = tokens
        self.state_waits = 0
        """Waits for the state store since a receive last ended without an error."""
        self.outage_since: float | None = None
        """When the first of those waits began (the outage as this worker has seen it)."""

    def answered(self) -> None:
        """A receive ended without an error: the next wait for the state store starts short."""
        self.state_waits = 0
        self.outage_since = None

    async def settle(self, delivery: Delivery, error: Exception, retried: int) -> Outcome | None:
        """What becomes of ``delivery`` after ``error`` (``retried`` immediate retries done):
        its outcome, or None to receive it again now. Raises when the host should deliver it
        again."""
        stage = Stage.SIGNAL if delivery.signal is None else Stage.MESSAGE
        answer = next((rule for rule in RULES if rule.matches(error, stage)), None)
        if answer is not None:
            try:
                return await self._answer(answer, delivery, error)
            except Exception as failure:
                error = failure
        return await self._fail(delivery, error, retried)

    async def _fail(self, delivery: Delivery, error: Exception, retried: int) -> Outcome | None:
        for rule in RULES:
            if not rule.matches(error, None) or not self._holds(rule.given, delivery, retried):
                continue
            if rule.action is Action.RETRY_NOW:
                self._log_retry_now(delivery, error, retried + 1)
                return None
            if rule.action is Action.RAISE_TO_HOST:
                # The host logs the error with its traceback; the note says which message.
                error.add_note(self._where(delivery))
                raise error
            if rule.action is Action.PARK:
                return await self._park_failed(delivery, delivery.raw, error, rule.note)
            if rule.action is Action.WAIT:
                outcome = await self._wait_for_state(delivery, error)
            else:
                outcome = await self._retry_later(delivery, error)
            if outcome is not None:
                return outcome
        raise error  # unreachable: the last row takes every failure

    def _holds(self, given: Given, delivery: Delivery, retried: int) -> bool:
        policy = self.endpoint.retry_policy(delivery.message_type)
        match given:
            case Given.IMMEDIATE_RETRY_LEFT:
                return policy is not None and retried < policy.immediate
            case Given.RETRY_POLICY:
                return policy is not None and delivery.signal is not None
            case Given.HOST_TRIES_LEFT:
                last = self.config.max_dequeue_count
                return last is None or delivery.dequeue_count < last
        return True

    async def _answer(self, rule: Rule, delivery: Delivery, error: Exception) -> Outcome:
        """Carry out a row about the message itself; raises what is then a failure."""
        signal, action = delivery.signal, rule.action
        if action is Action.PARK:
            return await self._poison(delivery, str(error), type(error).__name__)
        if action is Action.POSTPONE and isinstance(error, BodyBudgetExhausted):
            return await self._postpone(delivery, error)
        if action is Action.GIVE_BACK and isinstance(error, NewerVersion):
            if signal is None:
                return await self._give_back_unparsed(delivery, error)
            return await self._give_back(delivery, error, signal, signal.given_back or 0)
        if action is Action.DEFER and isinstance(error, NotYetDue):
            queue = self.account.queue(self.endpoint.name)
            await reschedule(queue, delivery.raw, error.due, self.config.clock)
            return Outcome.DEFERRED
        if action is Action.DUPLICATE_IF_GONE and signal is not None:
            return await self._duplicate_if_gone(signal, error)
        raise error

    async def _duplicate_if_gone(self, signal: Signal, error: Exception) -> Outcome:
        """The payload goes only once no token refers to it: if the token is gone too, an
        earlier copy processed the message. If not, give the message back (``error``). Only
        its existence is asked: no body is read, so no budget is taken."""
        try:
            await self.tokens.get_properties(signal.token)
        except NotFound:
            return Outcome.DUPLICATE
        raise error

    def _log_retry_now(self, delivery: Delivery, error: Exception, retry: int) -> None:
        policy = self.endpoint.retry_policy(delivery.message_type)
        log.warning(
            "endpoint=%s message_id=%s: immediate retry %d of %d after %s: %s",
            self.endpoint.name,
            shown(delivery.message_id or "-", 100),
            retry,
            0 if policy is None else policy.immediate,
            type(error).__name__,
            shown(error),
        )

    async def _postpone(self, delivery: Delivery, error: BodyBudgetExhausted) -> Outcome:
        """Give the message back for later, as it is: the budget frees up as the invocations
        holding it end. Its text is sent again unchanged (no try counted, no give-back count:
        a busy worker is no fault of the message's), hidden for the wait, and this copy may
        be acknowledged; a send that fails raises, and the host delivers it again."""
        delay = max(self.config.body_budget_wait_seconds, MIN_POSTPONE_SECONDS)
        await send_hidden(self.account.queue(self.endpoint.name), delivery.raw, delay)
        log.warning(
            "endpoint %s: message %s postponed for %.0f s: %s",
            self.endpoint.name,
            shown(delivery.message_id or "-", 100),
            delay,
            error,
        )
        return Outcome.POSTPONED

    def _state_wait(self) -> float:
        """The next wait for the state store: as long as the outage has lasted so far, from
        the first wait at least, capped, jittered. An outage that has lasted t is waited out
        for about t more, so each wave of a message's waits doubles the last, while the many
        messages that meet one short outage at once all wait briefly: counting waits instead
        made a 10 s outage with 16 messages in flight hold the last of them 80 s (the demo's
        shipping), up to the cap with more."""
        cap = self.config.state_wait_max_seconds
        first = min(FIRST_STATE_WAIT_SECONDS, cap)
        now = self.config.clock()
        if self.outage_since is None:
            self.outage_since = now
        nominal = min(cap, max(first, now - self.outage_since))
        drawn = nominal * (1 - STATE_WAIT_JITTER * self.config.jitter.random())
        return max(drawn, MIN_POSTPONE_SECONDS)

    async def _wait_for_state(self, delivery: Delivery, error: Exception) -> Outcome | None:
        """Give the message back, unchanged, hidden while the state store does not answer,
        as a postponed message is (no try counted, no count in the signal, never parked for
        this). None when the re-send fails: the rows below decide, as for any failure."""
        delay, queue = self._state_wait(), self.account.queue(self.endpoint.name)
        try:
            await send_hidden(queue, delivery.raw, delay)
        except Exception as sending:
            log.warning(
                "endpoint %s: message %s not given back to wait for the state store (%s)",
                self.endpoint.name,
                shown(delivery.message_id or "-", 100),
                shown(sending),
            )
            return None
        self.state_waits += 1
        log.warning(
            "endpoint %s: message %s waits %.0f s for the state store (wait %d): %s",
            self.endpoint.name,
            shown(delivery.message_id or "-", 100),
            delay,
            self.state_waits,
            shown(error),
        )
        return Outcome.POSTPONED

    async def _give_back_unparsed(self, delivery: Delivery, error: NewerVersion) -> Outcome:
        """Give back a signal too new to parse: its text, with only its count set."""
        delivery.message_id = bus_message_id(delivery.raw)  # what it claims, for the log line
        try:
            data, count = count_of(delivery.raw)
        except MalformedSignal as e:
            return await self._poison(delivery, str(e), type(e).__name__)
        return await self._give_back(delivery, error, data, count)

    async def _give_back(
        self,
        delivery: Delivery,
        error: NewerVersion,
        signal: Signal | dict[str, object],
        count: int,
    ) -> Outcome:
        """Send the signal again hidden for the next delay and let this copy be acknowledged,
        or park it once the give-back window is used up (``shared.bus.giveback``). A send that
        fails raises: the host delivers the message again."""
        step = next_step(count, self.config.give_back_seconds)
        if step.delay is None:
            reason = parking_reason(error, step, count)
            raw = afresh_text(delivery.raw, signal)
            return await self._poison(delivery, reason, type(error).__name__, raw=raw)
        queue = self.account.queue(self.endpoint.name)
        await send_hidden(queue, given_back_text(signal, count + 1), step.delay)
        log.warning(
            "endpoint %s: %s",
            self.endpoint.name,
            describe(delivery.message_id, error, count + 1, step.delay),
        )
        delivery.trace.given_back = kind_of(error)
        return Outcome.GIVEN_BACK

    async def _retry_later(self, delivery: Delivery, error: Exception) -> Outcome | None:
        """Send the signal again, hidden for the policy's next backoff, or park it once the
        delayed retries are used up. None when the signal could not be sent: the host then
        retries as without a policy. (Why sending and then acknowledging is safe:
        ``shared.bus.retries``.)"""
        signal = delivery.signal
        policy = self.endpoint.retry_policy(delivery.message_type)
        if signal is None or policy is None:
            return None
        return await self._send_retry(delivery, error, signal, policy)

    async def _send_retry(
        self, delivery: Delivery, error: Exception, signal: Signal, policy: RetryPolicy
    ) -> Outcome | None:
        done = signal.retry or 0
        afresh = signal.model_copy(update={"retry": None}).to_json()
        delay = policy.delay(done, self.config.jitter)
        if delay is None:
            note = f"after {policy.describe(done)}"
            return await self._park_failed(delivery, afresh, error, note)
        again = signal.model_copy(update={"retry": done + 1}).to_json()
        try:
            await send_hidden(self.account.queue(self.endpoint.name), again, delay)
        except Exception as sending:
            log.warning(
                "endpoint %s: delayed retry of %s not scheduled (%s); the host retries it",
                self.endpoint.name,
                shown(signal.message_id),
                shown(sending),
            )
            return None
        log.warning(
            "%s failed: %s: %s; delayed retry %d of %d in %.0f s",
            self._where(delivery),
            type(error).__name__,
            shown(error),
            done + 1,
            len(policy.delays),
            delay,
        )
        return Outcome.RETRYING

    def _where(self, delivery: Delivery) -> str:
        return (
            f"receiving message {shown(delivery.message_id or '(no id)', 100)} of type "
            f"{shown(delivery.message_type or '(not decoded)', 100)} at endpoint "
            f"{self.endpoint.name}, "
            f"try {delivery.dequeue_count}"
        )

    async def _park_failed(
        self, delivery: Delivery, raw: str, error: Exception, note: str = ""
    ) -> Outcome:
        """Park ``raw`` (the delivery's text, or its signal afresh) with ``error`` (and
        ``note``, why now) as its reason."""
        where = self._where(delivery)
        log.error("%s failed: %s: %s", where, type(error).__name__, shown(error), exc_info=error)
        reason = error_reason(
            self.endpoint.name,
            error,
            delivery.dequeue_count,
            message_id=delivery.message_id,
            message_type=delivery.message_type,
            enqueued_at=delivery.enqueued_at,
            failed_at=to_datetime(self.config.clock()),
        )
        reason = replace(reason, reason=shown(reason.reason, REASON_CHARS))
        if note:
            reason = replace(reason, reason=f"{reason.reason} ({note})")
        await self._park(raw, reason)
        return Outcome.POISONED

    async def _poison(
        self, delivery: Delivery, reason: str, error_type: str, *, raw: str | None = None
    ) -> Outcome:
        """Park ``raw`` (by default the delivery's text) with ``reason``."""
        reason = shown(reason, REASON_CHARS)
        log.error(
            "endpoint %s: parking message %s in poison queue: %s",
            self.endpoint.name,
            shown(delivery.message_id or "-", 100),
            reason,
        )
        await self._park(
            delivery.raw if raw is None else raw,
            Reason(
                self.endpoint.name,
                reason,
                delivery.dequeue_count,
                error_type=error_type,
                message_id=delivery.message_id,
                message_type=delivery.message_type,
                enqueued_at=utc_time(delivery.enqueued_at),
                failed_at=utc_time(to_datetime(self.config.clock())),
            ),
        )
        return Outcome.POISONED

    async def _park(self, raw: str, reason: Reason) -> None:
        """Park ``raw``: whole, or, when it does not fit beside its reason, by reference only
        if it names a token that exists (its message must replay), else as an excerpt."""
        form = await park(
            self.account,
            raw,
            reason,
            self.config.parked_container,
            tokens=self.tokens,
            version=self.config.wire_format,
        )
        message = shown(reason.message_id or "-", 100)
        if form == "reference":
            log.error(
                "endpoint %s: message %s too large to park beside its reason; original kept "
                "in container %s",
                self.endpoint.name,
                message,
                self.config.parked_container,
            )
        elif form == "excerpt":
            log.error(
                "endpoint %s: refused text too large to park beside its reason names no "
                "token (message %s); parked as an excerpt and its SHA-256",
                self.endpoint.name,
                message,
            )
