"""Delayed messages: due times, the queue's visibility delay, and never processing early.

A delayed message's due time travels in its envelope (``Envelope.deliver_at``), inside the
token, where the digest in the token's name protects it; the committed outgoing record keeps
it too (``OutgoingSignal.deliver_at``), so that R6 sends the signal hidden until then, also
when it is resumed after a crash. Storage Queues hide a message for at most 7 days: a longer
delay is sent hidden for 7 days, and each receiver that gets a signal before its due time
sends it again hidden for what remains (``visibility_delay``), then acknowledges the copy it
got. That covers the long delays, and also every early signal: a replayed or redelivered one,
one from outside, or a receiver whose clock is behind the sender's.

Sending again before acknowledging is what keeps it safe: a crash between the two leaves two
signals for one token, and the token's claim makes the second a duplicate; acknowledging first
could leave none. Nothing but the queue is written for a message that is not due: no outbox
record, no claim, so the token stays in flight until it is delivered.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from shared.clock import Clock
from shared.errors import InvalidValue
from shared.stores.queue import MAX_VISIBILITY_TIMEOUT, MessageQueue

MAX_DELAY = timedelta(days=3650)
"""The furthest due time a message may have: its token and outbox record stay until then."""
MIN_RESCHEDULE_SECONDS = 1.0
"""An early signal is hidden for at least this long: a receiver whose clock is a hair behind
the due time must not spin on it."""


class NotYetDue(Exception):
    """The message's due time has not come: hide its signal again (not a failure)."""

    def __init__(self, due: datetime) -> None:
        super().__init__(f"not due before {due.isoformat()}")
        self.due = due


def due_time(
    now: datetime, delay: timedelta | None = None, deliver_at: datetime | None = None
) -> datetime | None:
    """When a message sent at ``now`` with ``delay`` or ``deliver_at`` is due, or None for
    at once (no delay, a zero delay, or a due time already past)."""
    if delay is not None and deliver_at is not None:
        raise InvalidValue("give a message a delay or a deliver_at time, not both")
    if delay is not None:
        if not timedelta(0) <= delay <= MAX_DELAY:
            raise InvalidValue(
                f"a message's delay must be between 0 and {MAX_DELAY.days} days, not {delay}"
            )
        deliver_at = now + delay
    if deliver_at is None:
        return None
    if deliver_at.tzinfo is None:
        raise InvalidValue("deliver_at needs a time zone (a naive time is ambiguous)")
    if deliver_at - now > MAX_DELAY:
        raise InvalidValue(f"a message's due time is at most {MAX_DELAY.days} days away")
    return deliver_at if deliver_at > now else None


def queue_delay(due: datetime | None, clock: Clock) -> float:
    """How long to hide a signal for a message due at ``due``: what remains until then,
    whole seconds up (the queue's resolution), at most the queue's 7-day cap."""
    if due is None:
        return 0.0
    remaining = due.timestamp() - clock()
    if remaining <= 0:
        return 0.0
    return float(min(math.ceil(remaining), MAX_VISIBILITY_TIMEOUT))


async def send_hidden(queue: MessageQueue, content: str, delay: float) -> None:
    """Send a signal, hidden for ``delay`` seconds. A hidden signal never expires: its
    default time to live (7 days) would otherwise drop a signal hidden nearly that long."""
    if delay <= 0:
        await queue.send(content)
    else:
        await queue.send(content, visibility_delay=delay, time_to_live=-1)


def not_due(deliver_at: datetime | None, clock: Clock) -> NotYetDue | None:
    """The NotYetDue for a message due at ``deliver_at``, or None if it may be processed."""
    if deliver_at is None or deliver_at.timestamp() <= clock():
        return None
    return NotYetDue(deliver_at)


async def reschedule(queue: MessageQueue, raw: str, due: datetime, clock: Clock) -> None:
    """Send the signal ``raw`` again, hidden until ``due`` (or 7 days, whichever is first).
    The caller acknowledges the copy it got only after this returns."""
    delay = max(queue_delay(due, clock), MIN_RESCHEDULE_SECONDS)
    await send_hidden(queue, raw, delay)
