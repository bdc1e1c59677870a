"""``bus poison list`` and ``bus replay``: poison messages looked at, and moved back."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.bus.journal import Journal, new_action
from shared.bus.parked_groups import poison_groups
from shared.bus.parked_pages import parked_page
from shared.bus.poison import read_poison, replay_report
from shared.cli.commands import EXIT_OK, print_json, say
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.terminal import ProgressBar, table, terminal_width

PAGE_SIZE = 100
"""Parked messages ``bus poison list`` shows of an endpoint unless told otherwise."""
GROUP_COLUMNS = ("endpoint", "type", "error type", "count", "example reason")
POISON_COLUMNS = (
    "endpoint",
    "message id",
    "type",
    "tries",
    "enqueued (UTC)",
    "last failure (UTC)",
    "reason",
)
"""``enqueued`` is when the first try's queue message was inserted; ``last failure`` when
the failure that parked it happened, or, for a message the Functions host moved (its
wrapper says nothing), when it was moved."""
REASON_CHARS = 400
"""A longer reason is cut in the table (wrapped to the terminal's width up to there);
``--json`` and ``bus poison show`` give it whole."""


def check_endpoints(worker: Worker, endpoints: list[str]) -> None:
    known = sorted(worker.app.endpoints)
    unknown = sorted(set(endpoints) - set(known))
    if unknown:
        raise ValueError(f"unknown endpoints {unknown}; known: {known}")


@dataclass(frozen=True)
class PoisonFilter:
    """Which poison messages a replay takes: all, or those of these ids and/or types."""

    message_ids: frozenset[str] = frozenset()
    message_types: frozenset[str] = frozenset()

    def __call__(self, content: str) -> bool:
        record = read_poison(content)
        return (not self.message_ids or record.message_id in self.message_ids) and (
            not self.message_types or record.message_type in self.message_types
        )


async def replay_command(
    worker: Worker,
    endpoints: list[str],
    *,
    limit: int,
    progress: bool | None,
    only: PoisonFilter | None = None,
    dry_run: bool = False,
    by: str = "",
) -> int:
    """Move poison messages back to their queues; each is processed exactly once. What cannot
    be replayed is skipped, one line each, and left in the poison queue. Endpoints with
    nothing to replay are not mentioned. Each endpoint's replay (not a dry run) is recorded
    in the action journal as ``by``'s (``shared.bus.journal``)."""
    check_endpoints(worker, endpoints)
    account, container = worker.account(), worker.config.parked_container
    journal = Journal(account.table(worker.config.actions_table))
    total = endpoints_replayed = skipped = 0
    verb = "would replay" if dry_run else "replayed"
    for endpoint in endpoints:
        waiting = await account.queue(poison_queue(endpoint)).approximate_count()
        if waiting == 0:
            continue
        # The bar counts messages looked at: a selection may look at every one waiting.
        looked_at = waiting if only is not None else min(waiting, limit)
        action = None
        if not dry_run:
            action = new_action(
                "replay",
                who=by,
                endpoint=endpoint,
                selector=_selector_text(only, limit),
                reason=None,
                at=datetime.now(UTC),
            )
            await journal.begin(action)
        with ProgressBar(f"replay {endpoint}", looked_at, enabled=progress) as bar:
            report = await replay_report(
                account,
                endpoint,
                limit,
                container,
                bar.advance,
                select=only,
                dry_run=dry_run,
                look_limit=worker.app_config.console.list_limit,
            )
        if action is not None:
            await journal.finish(action, report.replayed)
        for line in report.skipped:
            say(line)
        if not report.complete:
            say(incomplete_pass(endpoint, worker.app_config.console.list_limit, "replay"))
        if report.replayed or report.skipped:
            say(
                f"{endpoint}: {verb} {report.replayed} poison messages"
                + (f", skipped {len(report.skipped)}" if report.skipped else "")
            )
        total += report.replayed
        skipped += len(report.skipped)
        endpoints_replayed += bool(report.replayed)
    say(_replay_summary(verb, total, endpoints_replayed, skipped))
    return EXIT_OK


def _selector_text(only: PoisonFilter | None, limit: int) -> str:
    """Which messages a replay takes, as the action journal keeps it."""
    parts = [f"at most {limit}"]
    if only is not None and only.message_ids:
        parts.append("ids " + ", ".join(sorted(only.message_ids)))
    if only is not None and only.message_types:
        parts.append("types " + ", ".join(sorted(only.message_types)))
    return "; ".join(parts)


def _replay_summary(verb: str, total: int, endpoints: int, skipped: int) -> str:
    done = f"{verb} {total} messages from {endpoints} endpoints" if total else "nothing to replay"
    return done + (f", skipped {skipped}" if skipped else "")


@dataclass(frozen=True)
class ListPage:
    """Which parked messages ``bus poison list`` shows of each endpoint."""

    skip: int = 0
    size: int | None = PAGE_SIZE
    """None: every one."""


async def poison_list_command(
    worker: Worker,
    endpoints: list[str],
    *,
    as_json: bool,
    page: ListPage = ListPage(),
    grouped: bool = False,
) -> int:
    """Show the poison messages waiting, with what each says about why (looked at, not
    taken), a page of each endpoint; then how to ask for the next page, on stderr."""
    check_endpoints(worker, endpoints)
    account = worker.account()
    listed: list[dict[str, Any]] = []
    notes: list[str] = []
    limit = worker.app_config.console.list_limit
    for endpoint in endpoints:
        found = await parked_page(
            account.queue(poison_queue(endpoint)),
            endpoint,
            limit=limit,
            skip=page.skip,
            size=page.size,
        )
        listed += found.entries
        if not found.complete:
            notes.append(incomplete_pass(endpoint, limit, "list"))
        if found.more and page.size is not None:
            notes.append(_next_page(endpoint, page, page.skip + page.size))
    if grouped:
        _print_groups(poison_groups(listed), as_json=as_json)
    else:
        _print_messages(listed, as_json=as_json)
    for note in notes:
        print(note, file=sys.stderr)
    return EXIT_OK


def incomplete_pass(endpoint: str, limit: int, verb: str) -> str:
    """What a pass that stopped before the end of ``endpoint``'s poison queue says."""
    return (
        f"{endpoint}: incomplete: the pass stopped after {limit} messages "
        f"(BUS_CONSOLE_LIST_LIMIT) or its time; more are parked than it could {verb} "
        "(run it again for the rest)"
    )


def _next_page(endpoint: str, page: ListPage, skip: int) -> str:
    return (
        f"{endpoint}: more wait; next page: bus poison list {endpoint} "
        f"--page-size {page.size} --skip {skip} (or --all)"
    )


def _print_messages(listed: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print_json(listed)
    elif listed:
        rows = (_poison_row(item) for item in listed)
        say(table(POISON_COLUMNS, rows, wrap="reason", width=terminal_width()))
    else:
        say("no poison messages")


def _print_groups(groups: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print_json(groups)
    elif groups:
        rows = (
            (g["endpoint"], g["message_type"], g["error_type"], g["count"], _one_line(g))
            for g in groups
        )
        say(table(GROUP_COLUMNS, rows, wrap="example reason", width=terminal_width()))
    else:
        say("no poison messages")


def _one_line(item: dict[str, Any], key: str = "example_reason") -> str:
    reason = " ".join(str(item[key]).split())  # one line, whatever it held
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS] + "... (cut: --json shows it whole)"
    return reason


def _poison_row(item: dict[str, Any]) -> tuple[object, ...]:
    reason = _one_line(item, "reason")
    return (
        item["endpoint"],
        item["message_id"],
        item["message_type"],
        item["dequeue_count"],
        _short_time(item["enqueued_at"]),
        _short_time(item["failed_at"] or item["parked_at"]),
        reason,
    )


def _short_time(iso: str | None) -> str | None:
    """``2026-11-23 15:50:37`` for a table: UTC, as every time ``Reason`` keeps."""
    if iso is None:
        return None
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
