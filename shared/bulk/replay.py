"""Bulk replay: the poisoned messages a selection names, sent back to their queues.

The selection is rows naming an endpoint and a message id: the output of
``bus poison list --json``, or the ``poisoned`` folder of an audit export. The driver groups
it by endpoint, and one task per endpoint takes those messages from the endpoint's poison
queue with ``shared.bus.poison.replay_report`` (the ``bus replay`` path): each original signal
goes back to its queue and keeps its token, so its message is processed exactly once however
often it is replayed. A retried task or a job run again finds the messages it already moved
gone from the poison queue (``not_waiting``) and sends nothing for them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from shared.bulk.outcomes import Outcome
from shared.bulk.send import RequestCounter
from shared.bus.poison import read_poison, replay_report
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.instrumented import InstrumentedAccount

MAX_MESSAGE_ID_CHARS = 200


@dataclass(frozen=True)
class ReplayTask:
    storage: StorageSettings
    parked_container: str


def replay_partition(
    task: ReplayTask, requests: RequestCounter, groups: Iterable[Any]
) -> Iterator[Outcome]:
    """Runs inside a Spark task: each group is an endpoint with the message ids selected."""
    outcomes: list[Outcome] = []
    for group in groups:
        endpoint, ids = str(group[0]), sorted({str(i) for i in group[1]})
        found, made = asyncio.run(_replay_endpoint(task, endpoint, ids))
        outcomes += found
        requests.add(made)
    return iter(outcomes)


async def _replay_endpoint(
    task: ReplayTask, endpoint: str, ids: list[str]
) -> tuple[list[Outcome], int]:
    wanted, chosen = set(ids), set[str]()
    taken = 0

    def select(content: str) -> bool:
        # Every entry that claims a selected id is taken, not only the first: the id is the
        # entry's own claim, so a planted or damaged entry could otherwise stand in for the
        # real one. Replaying a real copy twice is harmless (one token, one processing).
        nonlocal taken
        message_id = read_poison(content).message_id
        if message_id not in wanted:
            return False
        chosen.add(message_id)
        taken += 1
        return True

    async with AzureStorageAccount(task.storage) as raw:
        account = InstrumentedAccount(raw)
        # No limit: copies of one id may be anywhere in the queue, so the pass reads it all.
        report = await replay_report(
            account, endpoint, sys.maxsize, task.parked_container, select=select
        )
        made = account.instrumentation.count
    uncertain = "; ".join(report.skipped)
    outcomes: list[Outcome] = []
    for message_id in ids:
        if message_id not in chosen and not report.complete:
            why = "the pass stopped before the end of the poison queue: run the job again"
            outcomes.append((_name(endpoint, message_id), None, "uncertain", why, [], None))
        elif message_id not in chosen:
            outcomes.append((_name(endpoint, message_id), None, "not_waiting", None, [], None))
        elif report.skipped:
            # replay_report says how many it could not send, not which: every one taken is
            # marked, and a run of the job again replays what is still waiting.
            reason = f"replayed {report.replayed} of {taken} taken: {uncertain}"
            outcomes.append((_name(endpoint, message_id), None, "uncertain", reason, [], None))
        else:
            outcomes.append((_name(endpoint, message_id), None, "sent", None, [message_id], None))
    return outcomes, made


def _name(endpoint: str, message_id: str) -> str:
    return f"{endpoint}/{message_id}"
