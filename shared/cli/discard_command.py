"""``bus poison discard``: a parked message moved to the archive with a reason, never lost.

Who discards is ``--by`` or the user signed in to this machine; each discarded message prints
one audit line (who, when, what, why), every value from the message or the operator escaped,
and the discard is recorded in the action journal (``shared.bus.journal``), as the console's.
"""

from __future__ import annotations

import getpass
from datetime import UTC, datetime, timedelta

from shared.bus.discard import (
    Discard,
    Discarded,
    DiscardFilter,
    DiscardPlaces,
    discard_parked,
)
from shared.bus.journal import Journal, new_action
from shared.cli.commands import EXIT_FAILED, EXIT_OK, say
from shared.cli.poison_commands import check_endpoints, incomplete_pass
from shared.logsafe import shown
from shared.resources import poison_queue
from shared.runtime import Worker


def operator_name(given: str | None) -> str:
    """``--by`` when given, else the user signed in to this machine."""
    if given is not None:
        return given
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise ValueError("no signed-in user to name: say who discards with --by NAME") from None


async def discard_command(
    worker: Worker, endpoint: str, select: DiscardFilter, *, reason: str, by: str | None
) -> int:
    """Archive, then delete, the poison messages of ``endpoint`` that ``select`` takes; exit 1
    when none is parked."""
    check_endpoints(worker, [endpoint])
    config = worker.config
    discard = Discard(
        reason=reason,
        by=operator_name(by),
        at=datetime.now(UTC),
        retention=timedelta(seconds=config.discard_retention_seconds),
    )
    account = worker.account()
    journal = Journal(account.table(config.actions_table))
    action = new_action(
        "discard",
        who=discard.by,
        endpoint=endpoint,
        selector=selector_text(select),
        reason=reason,
        at=discard.at,
    )
    await journal.begin(action)
    limit = worker.app_config.console.list_limit
    report = await discard_parked(
        account.queue(poison_queue(endpoint)),
        endpoint,
        select,
        DiscardPlaces.of(account, config),
        discard,
        look_limit=limit,
    )
    await journal.finish(action, len(report.discarded))
    for discarded in report.discarded:
        say(audit_line(discarded, discard))
    if not report.complete:
        say(incomplete_pass(endpoint, limit, "discard"))
    elif not report.discarded:
        say(f"no poison message {_described(select)} in {endpoint}")
    return EXIT_OK if report.discarded else EXIT_FAILED


def selector_text(select: DiscardFilter) -> str:
    """Which messages a discard takes, as the action journal keeps it."""
    criteria = (
        ("id", select.message_id),
        ("type", select.message_type),
        ("error type", select.error_type),
    )
    return "; ".join(f"{label} {value}" for label, value in criteria if value is not None)


def _described(select: DiscardFilter) -> str:
    criteria = (
        ("", select.message_id),
        ("of type ", select.message_type),
        ("with error ", select.error_type),
    )
    return " ".join(f"{label}{shown(value, 100)}" for label, value in criteria if value is not None)


def audit_line(discarded: Discarded, discard: Discard) -> str:
    again = " (archived by an earlier discard, which did not finish)" * discarded.already_archived
    return (
        f"discarded {discarded.endpoint} message {shown(discarded.message_id, 200)} "
        f"(queue message {shown(discarded.queue_message_id, 100)}) "
        f"by {shown(discard.by, 200)} at {discard.at.isoformat(timespec='seconds')}: "
        f"{shown(discard.reason, 2000)}; archived as {shown(discarded.archived_as, 200)}{again}"
    )
