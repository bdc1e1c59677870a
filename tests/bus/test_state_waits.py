"""How long a message waits for a state store that does not answer (``Failures._state_wait``,
docs/retries.md): as long as the outage has lasted, whatever the number of messages meeting it."""

from __future__ import annotations

import random
from typing import Any

from shared.bus.app import BusApp, Endpoint
from shared.bus.config import BusConfig
from shared.bus.failures import FIRST_STATE_WAIT_SECONDS, STATE_WAIT_JITTER, Failures
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount


def failures(clock: ManualClock, cap: float = 300.0) -> Failures:
    app = BusApp()
    endpoint: Endpoint[Any] = app.endpoint("shipping")
    account = MemoryStorageAccount(clock=clock)
    config = BusConfig(clock=clock, jitter=random.Random(1), state_wait_max_seconds=cap)
    return Failures(endpoint, account, config, account.blob_container("tokens"))


def test_many_messages_meeting_one_short_outage_all_wait_briefly() -> None:
    clock = ManualClock()
    waits = failures(clock)

    drawn = [waits._state_wait() for _ in range(40)]  # 40 messages in flight, at once

    assert max(drawn) <= FIRST_STATE_WAIT_SECONDS
    assert min(drawn) >= FIRST_STATE_WAIT_SECONDS * (1 - STATE_WAIT_JITTER)


def test_the_waits_follow_the_outage_s_length_up_to_the_cap() -> None:
    clock = ManualClock()
    waits = failures(clock, cap=120.0)
    waits._state_wait()

    clock.advance(60)
    sixty = waits._state_wait()
    clock.advance(600)
    capped = waits._state_wait()
    waits.answered()
    afresh = waits._state_wait()

    assert 60 * (1 - STATE_WAIT_JITTER) <= sixty <= 60
    assert 120 * (1 - STATE_WAIT_JITTER) <= capped <= 120
    assert afresh <= FIRST_STATE_WAIT_SECONDS
