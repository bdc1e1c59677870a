"""Timer triggers: run a function at each time its NCRONTAB schedule names.

One local host runs each timer once per occurrence (the Functions host makes it a singleton
across instances with a blob lease; locally there is one instance). ``past_due`` is set when
an invocation starts noticeably later than scheduled, e.g. after a slow previous run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from azure.functions.timer import TimerRequest

from lab.host.functions import TimerFunction, invoke

log = logging.getLogger(__name__)

PAST_DUE_SECONDS = 1.0

Now = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


async def run_timer(
    timer: TimerFunction,
    stopping: asyncio.Event,
    function_timeout: float,
    now: Now = utc_now,
) -> int:
    """Invoke ``timer`` on schedule until ``stopping`` is set; returns how many runs there
    were. A failing run is logged and the schedule goes on, as on the host."""
    runs = 0
    if timer.run_on_startup:
        await _fire(timer, False, function_timeout)
        runs += 1
    due = timer.schedule.next_after(now())
    while not stopping.is_set():
        wait = (due - now()).total_seconds()
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), wait)
            continue
        await _fire(timer, -wait > PAST_DUE_SECONDS, function_timeout)
        runs += 1
        # Occurrences missed while the run took longer are skipped, not queued up.
        due = timer.schedule.next_after(max(due, now()))
    return runs


async def _fire(timer: TimerFunction, past_due: bool, function_timeout: float) -> None:
    request = TimerRequest(past_due=past_due)
    try:
        await invoke(timer.function, timer.arg_name, request, function_timeout)
    except Exception:
        log.exception("timer function %s failed", timer.name)
