"""The console's actions: replay and discard parked messages, each recorded in the journal.

Replay is ``bus replay``'s (``shared.bus.poison.replay_report``): each message's original is
sent back, its token kept, so it is processed exactly once; what cannot be replayed is
skipped and stays parked. Discard is ``bus poison discard``'s (``shared.bus.discard``): each
message archived with who, when and why, then deleted. The journal row is written before the
action and completed after it (``shared.bus.journal``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.bus.discard import Discard, DiscardPlaces, discard_parked
from shared.bus.journal import Action, Journal, new_action
from shared.bus.poison import replay_report
from shared.console.parked import ParkedQueues
from shared.console.selection import Selection
from shared.resources import poison_queue
from shared.runtime import Worker


@dataclass(frozen=True)
class Replayed:
    action: Action
    replayed: int
    skipped: list[str]
    complete: bool
    """The pass looked at every parked message (``BUS_CONSOLE_LIST_LIMIT``, 15 s)."""


@dataclass(frozen=True)
class Discarded:
    action: Action
    discarded: int
    complete: bool


def journal_of(worker: Worker) -> Journal:
    return Journal(worker.account().table(worker.config.actions_table))


async def replay_selected(
    worker: Worker, parked: ParkedQueues, selection: Selection, who: str
) -> Replayed:
    action = new_action(
        "replay",
        who=who,
        endpoint=selection.endpoint,
        selector=selection.described(),
        reason=None,
        at=datetime.now(UTC),
    )
    journal = journal_of(worker)
    await journal.begin(action)
    async with parked.changing(selection.endpoint):
        report = await replay_report(
            worker.account(),
            selection.endpoint,
            sys.maxsize,
            worker.config.parked_container,
            select=selection.matches_content,
            ids=selection.ids,
            look_limit=worker.app_config.console.list_limit,
        )
    done = await journal.finish(action, report.replayed)
    return Replayed(done, report.replayed, report.skipped, report.complete)


async def discard_selected(
    worker: Worker, parked: ParkedQueues, selection: Selection, who: str, reason: str
) -> Discarded:
    now = datetime.now(UTC)
    discard = Discard(
        reason=reason,
        by=who,
        at=now,
        retention=timedelta(seconds=worker.config.discard_retention_seconds),
    )
    action = new_action(
        "discard",
        who=who,
        endpoint=selection.endpoint,
        selector=selection.described(),
        reason=reason,
        at=now,
    )
    journal = journal_of(worker)
    await journal.begin(action)
    account = worker.account()
    async with parked.changing(selection.endpoint):
        report = await discard_parked(
            account.queue(poison_queue(selection.endpoint)),
            selection.endpoint,
            selection.matches,
            DiscardPlaces.of(account, worker.config),
            discard,
            look_limit=worker.app_config.console.list_limit,
        )
    count = len(report.discarded)
    finished = await journal.finish(action, count)
    return Discarded(finished, count, report.complete)
