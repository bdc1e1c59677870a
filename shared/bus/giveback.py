"""Giving a message back for an upgraded instance (issue 29).

A rolling deploy runs two versions of an app side by side. An instance that receives a message
written by a newer version than itself (``NewerVersion``: a message type or type version its
endpoint does not know, a newer format of a record) can neither process it (it would misread
it) nor park it as hostile (an upgraded instance reads it well). It gives it back: it sends
the signal again, hidden for a growing delay, with its give-back count (``Signal.given_back``)
one higher, and then acknowledges the copy it got. It writes nothing else: no outbox record, no
claim, so the message's token stays in flight as it was sent.

Sending first is what keeps it safe, as for delayed retries (``shared.bus.retries``) and early
delayed messages (``shared.bus.schedule``): a crash between the two leaves two signals for one
token, and the token's claim makes the second a duplicate; acknowledging first could leave
none. A send that fails goes to the host, which delivers the message again.

Delays start at ``FIRST_DELAY`` and double up to ``MAX_DELAY``; the last one is cut so that the
delays add up to ``BUS_GIVE_BACK_SECONDS`` exactly. Once they do, the message is parked with a
reason that says so (``parking_reason``), without its count, so that ``bus replay`` gives it a
whole window again. The count says how long the message was given back without a clock: the
delays are a function of it. Acknowledging restarts the host's dequeue count, so the count
(bounded by ``MAX_GIVE_BACKS``) is what bounds the give-backs, not ``maxDequeueCount``; and a
message given back is not a failed one: it uses none of its retry policy's retries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from shared.bus.envelope import MAX_GIVE_BACKS, MAX_SIGNAL_CHARS, Signal
from shared.errors import MalformedSignal, NewerTypeVersion, NewerVersion, UnknownMessageType
from shared.logsafe import shown

FIRST_DELAY = 10.0
"""Seconds the first give-back hides a message: an upgraded instance may be starting."""
MAX_DELAY = 300.0
"""The longest delay between two give-backs: a message waits at most this long after the
last old instance stopped."""
GIVEN_BACK = "given_back"
"""The signal's top-level field that counts give-backs, also in a signal too new to parse."""


@dataclass(frozen=True)
class Step:
    """Where a message stands in its give-back window."""

    waited: float
    """Seconds the earlier give-backs hid it for, together."""
    delay: float | None
    """Seconds to hide it for now, or None: the window is used up, park it."""


def next_step(given_back: int, window: float) -> Step:
    """The step after ``given_back`` give-backs within a window of ``window`` seconds (the
    count is bounded by ``MAX_GIVE_BACKS``, and so is this loop)."""
    waited, done = 0.0, 0
    while True:
        left = window - waited
        delay = min(FIRST_DELAY * 2 ** min(done, 16), MAX_DELAY, left) if left > 0 else None
        if done == given_back or delay is None:
            return Step(waited, delay)
        waited += delay
        done += 1


def kind_of(error: NewerVersion) -> str:
    """What was newer, for the give-back counter's attribute: the message's type (one the
    endpoint does not handle, or a newer version of one it does), or a record's format."""
    by_type = isinstance(error, UnknownMessageType | NewerTypeVersion)
    return "message_type" if by_type else "format"


def count_of(raw: str) -> tuple[dict[str, object], int]:
    """The signal ``raw`` as a JSON object and its give-back count (0 if absent), for a signal
    too new to parse as a ``Signal``. Raises MalformedSignal for text that is too long, not a
    JSON object, or whose count is not a whole number from 1 to ``MAX_GIVE_BACKS``."""
    if len(raw) > MAX_SIGNAL_CHARS:
        raise MalformedSignal(
            f"signal is {len(raw)} characters; at most {MAX_SIGNAL_CHARS} expected"
        )
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise MalformedSignal("signal is not JSON") from None
    if not isinstance(data, dict):
        raise MalformedSignal("signal is not a JSON object")
    if GIVEN_BACK not in data:
        return data, 0
    count = data[GIVEN_BACK]
    if type(count) is not int or not 1 <= count <= MAX_GIVE_BACKS:
        raise MalformedSignal(
            f"signal's {GIVEN_BACK} is not a whole number from 1 to {MAX_GIVE_BACKS}"
        )
    return data, count


def given_back_text(signal: Signal | dict[str, object], count: int) -> str:
    """The signal to send for give-back number ``count``: the parsed signal with its count,
    or a signal too new to parse with only its top-level count set."""
    if isinstance(signal, Signal):
        return signal.model_copy(update={GIVEN_BACK: count}).to_json()
    return json.dumps({**signal, GIVEN_BACK: count}, separators=(",", ":"))


def afresh_text(raw: str, signal: Signal | dict[str, object]) -> str:
    """The signal to park: without its count, so that ``bus replay`` starts a new window."""
    if isinstance(signal, Signal):
        return signal.model_copy(update={GIVEN_BACK: None}).to_json()
    if GIVEN_BACK not in signal:
        return raw
    return json.dumps({k: v for k, v in signal.items() if k != GIVEN_BACK}, separators=(",", ":"))


def parking_reason(error: NewerVersion, step: Step, count: int) -> str:
    """Why a message given back for its whole window is parked, and what brings it back."""
    if count:
        waited = (
            f"given back {count} time{'s' * (count != 1)} over {step.waited:.0f} s "
            "(BUS_GIVE_BACK_SECONDS) without an upgraded instance taking it"
        )
    else:
        waited = "not given back (BUS_GIVE_BACK_SECONDS is 0)"
    return (
        f"written by a newer version of the app than this instance: {shown(error)}; "
        f"{waited}; `bus replay` processes it once an upgraded instance serves this queue"
    )


def describe(message_id: str | None, error: NewerVersion, count: int, delay: float) -> str:
    """The log line of one give-back."""
    return (
        f"message {shown(message_id or '-', 100)} was written by a newer version "
        f"({shown(error)}); given back for an upgraded instance (give-back {count}, "
        f"hidden {delay:.0f} s)"
    )
