"""The app subscribes its endpoints itself when it starts serving.

A deployment provisions queues, tables and containers, but a topic's recipient list is data
(``shared.bus.topics``): on a fresh storage account nothing is subscribed, and every event
published is dropped for want of a subscriber. So the first invocation of any of the app's
functions in a process, before its own work (and so before any publish it makes is resolved
to recipients), runs ``Bus.subscribe_all`` with the app identity's rights; it is idempotent,
so every new instance doing it again changes nothing. It never fails the invocation: a
failure, or no answer within the time it is given (on the ingress, within the request's own
timeout), is logged at warning level and tried again on an invocation ``RETRY_SECONDS``
later, and the health endpoint reports the state and any topic still missing a subscriber.

``BUS_AUTO_SUBSCRIBE=false`` switches it off, for an operator who keeps an endpoint
unsubscribed on purpose (it would be subscribed again at the next start otherwise).
"""

from __future__ import annotations

import asyncio
import logging

from shared.bus import Bus
from shared.clock import Clock
from shared.errors import BusError
from shared.logsafe import shown

log = logging.getLogger(__name__)

RETRY_SECONDS = 30.0
"""After a failure, invocations within this long do not try again: an identity without the
rights would otherwise pay one failing storage call, and log one warning, per invocation."""


class StartupSubscription:
    """Once per process: subscribed, switched off, not tried yet, or failed (and why)."""

    def __init__(self, enabled: bool, clock: Clock) -> None:
        self.enabled = enabled
        self._clock = clock
        self._lock = asyncio.Lock()
        self._done = False
        self._failure: str | None = None
        self._next_try = float("-inf")

    @property
    def state(self) -> str:
        """``off``, ``done``, ``pending`` or ``failed: <why>``, as health reports it."""
        if not self.enabled:
            return "off"
        if self._done:
            return "done"
        return "pending" if self._failure is None else f"failed: {self._failure}"

    def _due(self) -> bool:
        return self.enabled and not self._done and self._clock() >= self._next_try

    async def ensure(self, bus: Bus, within: float) -> None:
        """Subscribe ``bus``'s endpoints unless done or switched off, giving up after
        ``within`` seconds; concurrent callers wait for the one that runs it. Never raises
        for a storage failure or a storage that does not answer: logs it."""
        if not self._due():
            return
        async with self._lock:
            if not self._due():
                return
            try:
                async with asyncio.timeout(within):
                    done = await bus.subscribe_all()
            except TimeoutError:
                self._failed(f"storage did not answer within {within:g} s")
                return
            except BusError as e:
                self._failed(shown(e))
                return
            self._done, self._failure = True, None
            log.info("start-up subscription: %d endpoint subscriptions in place", len(done))

    def _failed(self, why: str) -> None:
        self._failure = why
        self._next_try = self._clock() + RETRY_SECONDS
        log.warning(
            "start-up subscription: could not subscribe the endpoints (%s); tried again on an "
            "invocation in %.0f seconds or later, or run `bus subscribe --all`",
            why,
            RETRY_SECONDS,
        )
