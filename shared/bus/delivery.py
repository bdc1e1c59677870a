"""One queue message being received (``Delivery``) and what became of it (``Outcome``): what
the receive pipeline (``shared.bus.pipeline``) and its failure table (``shared.bus.failures``)
share."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from shared.bus.budget import Holding
from shared.bus.envelope import Signal
from shared.bus.telemetry import Receiving


class Outcome(enum.Enum):
    PROCESSED = "processed"
    """This invocation ran the handler and committed its effects."""
    RESUMED = "resumed"
    """The effects were already committed (by an earlier or concurrent copy); this
    invocation finished sending and deleting. Nothing was committed again."""
    SAGA_NOT_FOUND = "saga_not_found"
    """A saga's message for an instance that does not exist (never started, or completed):
    its not-found handler ran, or nothing did; the instance was not written
    (``shared.bus.saga``)."""
    DUPLICATE = "duplicate"
    """The token was already gone: an earlier copy finished everything."""
    CANCEL = "cancel"
    """A cancel (``ctx.cancel``) was carried out and committed at the message's endpoint:
    the message it names is cancelled, was processed already, or was not found (the cancel's
    own log line says which, ``shared.bus.cancel``)."""
    POISONED = "poisoned"
    ANOMALY = "anomaly"
    RETRYING = "retrying"
    """The handler failed; by the endpoint's retry policy the signal was sent again, hidden
    for a delayed retry, and this copy may be acknowledged (``shared.bus.retries``)."""
    DEFERRED = "deferred"
    """The message is not due yet (a delayed message): its signal was sent again, hidden
    until its due time, and nothing else was written (``shared.bus.schedule``)."""
    GIVEN_BACK = "given_back"
    """The message was written by a newer version than this instance (``NewerVersion``): its
    signal was sent again, hidden for a while, for an upgraded instance, and nothing else was
    written (``shared.bus.giveback``)."""
    POSTPONED = "postponed"
    """The worker's body budget had no room for the message's body within
    ``BusConfig.body_budget_wait_seconds`` (``shared.bus.budget``), or the app's state store
    did not answer (``StateUnreachable``, ``shared.bus.failures``): its signal was sent again,
    unchanged, hidden for a while, and this copy may be acknowledged. Not a failure of the
    message's: no try is counted, nothing is parked."""
    NONDETERMINISTIC = "nondeterministic"
    """State-based mode: replaying a duplicate on the restored state produced other outputs
    or another state than the committed run. The committed effects stand (they were sent,
    once); the handler must be fixed. See ``shared.bus.modes.errors.NondeterministicHandler``."""


@dataclass
class Delivery:
    """One queue message being received, passed through the pipeline: its text as given, which
    try this is, when its queue message was inserted (when the caller knows) and when this try
    started; then what is learnt on the way: its signal and id once parsed, its type once the
    envelope is decoded. For its log line, poison reason and receive span."""

    raw: str
    dequeue_count: int
    enqueued_at: datetime | None
    started: float
    """``time.monotonic()`` when this try began, for its log line's duration."""
    trace: Receiving
    """Its receive span, which ``_decode`` starts in the trace of the envelope."""
    holding: Holding
    """What it holds of the worker's body budget, released when its try ends."""
    signal: Signal | None = None
    message_id: str | None = None
    message_type: str | None = None
