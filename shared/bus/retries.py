"""Retry policies for handler errors: immediate retries, then delayed retries with
exponential backoff and jitter, then the poison queue.

Declared per endpoint, and per message type where one type needs another policy::

    app.endpoint("payments", retry=RetryPolicy.exponential(immediate=2, first=10, count=3),
                 retry_for={RefundPayment: RetryPolicy(immediate=0, delays=(60.0,))})

An endpoint without a policy keeps the host's behaviour: the error goes back to the host,
which retries after host.json's ``visibilityTimeout`` until ``maxDequeueCount``.

- Immediate retries run the whole receive again inside the same invocation. A failed round
  committed nothing, so a retry is exactly what a redelivery would be: it finds its own O(m)
  and claim and carries on.
- A delayed retry sends the signal again, hidden for the backoff, with its retry number
  (``Signal.retry``), and then the invocation returns so the host deletes the copy it holds.
  Sending first is what keeps it safe: a crash between the two leaves two signals for one
  token (the token's claim makes the second a duplicate); deleting first could leave none.
  Hiding the received message instead (a queue update) would need the host's pop receipt,
  which the host keeps and uses itself, and would keep counting towards its
  ``maxDequeueCount``; the new signal starts at dequeue count 0 instead.
- After the last delayed retry the message is parked with its last error as the reason,
  without its retry number, so that ``bus replay`` starts the policy afresh.
- A handler that raises ``DoNotRetry`` is parked at once, with its reason, under any policy;
  so is every other ``PermanentFailure`` (a state or an output over a limit: docs/retries.md).

The retry number in a signal is not trusted for anything but counting: a forged one can only
make that copy's retries end sooner or later, never skip or repeat an effect.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from shared.app_settings import MAX_DELAYED_RETRIES
from shared.errors import ConfigurationError
from shared.stores.queue import MAX_VISIBILITY_TIMEOUT

MAX_IMMEDIATE_RETRIES = 10
"""Immediate retries keep the invocation busy: more than this belongs in delayed retries."""


@dataclass(frozen=True)
class RetryPolicy:
    """``immediate`` retries at once, then one delayed retry per entry of ``delays``
    (seconds), each drawn within ``jitter`` (a fraction) of its nominal value, then poison."""

    immediate: int = 0
    delays: tuple[float, ...] = ()
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not 0 <= self.immediate <= MAX_IMMEDIATE_RETRIES:
            raise ConfigurationError(
                f"retry policy: immediate retries must be 0-{MAX_IMMEDIATE_RETRIES}, "
                f"not {self.immediate}"
            )
        if len(self.delays) > MAX_DELAYED_RETRIES:
            raise ConfigurationError(
                f"retry policy: at most {MAX_DELAYED_RETRIES} delayed retries, "
                f"not {len(self.delays)}"
            )
        for delay in self.delays:
            if not 1 <= delay <= MAX_VISIBILITY_TIMEOUT:
                raise ConfigurationError(
                    f"retry policy: each delay must be 1 s to 7 days (the queue's limit), "
                    f"not {delay}"
                )
        if not 0 <= self.jitter < 1:
            raise ConfigurationError(f"retry policy: jitter must be in [0, 1), not {self.jitter}")

    @classmethod
    def exponential(
        cls,
        *,
        immediate: int = 2,
        first: float = 10.0,
        factor: float = 6.0,
        count: int = 3,
        cap: float = MAX_VISIBILITY_TIMEOUT,
        jitter: float = 0.2,
    ) -> RetryPolicy:
        """``count`` delayed retries starting at ``first`` seconds, each ``factor`` times the
        one before, at most ``cap``: the defaults give 10 s, 1 min, 6 min."""
        delays = tuple(min(first * factor**i, cap) for i in range(count))
        return cls(immediate=immediate, delays=delays, jitter=jitter)

    def delay(self, retry: int, rng: random.Random) -> float | None:
        """Seconds to wait before delayed retry number ``retry`` + 1, or None once every
        delayed retry is used."""
        if not 0 <= retry < len(self.delays):
            return None
        nominal = self.delays[retry]
        drawn = rng.uniform(nominal * (1 - self.jitter), nominal * (1 + self.jitter))
        return float(min(max(drawn, 1.0), MAX_VISIBILITY_TIMEOUT))

    def describe(self, retry: int) -> str:
        return f"{self.immediate} immediate and {retry} delayed retries"
