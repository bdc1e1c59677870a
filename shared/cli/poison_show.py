"""``bus poison show ID [ENDPOINT ...]``: one parked message whole, looked at, not taken.

The id is the one ``bus send`` printed, ``bus poison list`` lists and ``bus replay --id``
takes (the queue message id works too, for a parked text that names none). Like ``bus poison
list`` it looks in every endpoint's poison queue unless endpoints are named. Everything shown
came from a queue or a blob a sender may have written: each line is escaped (``shown``) and the
body is cut at ``--body-chars``; ``--body-file`` writes it whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.bus.poison_view import ParkedView, find_parked, view
from shared.cli.commands import EXIT_FAILED, EXIT_OK, print_json, say
from shared.cli.poison_commands import check_endpoints
from shared.logsafe import shown
from shared.runtime import Worker

BODY_CHARS = 4000
"""Characters of a body printed by default; ``--body-file`` writes it whole."""
LINE_CHARS = 1000
"""Characters of one line of a body kept on the screen (a long line is cut, not wrapped)."""


async def poison_show_command(
    worker: Worker,
    message_id: str,
    endpoints: list[str],
    *,
    as_json: bool,
    body_chars: int = BODY_CHARS,
    body_file: Path | None = None,
) -> int:
    """Print every poison message with this id (the same message may be parked twice), or
    say that none is parked (exit 1)."""
    check_endpoints(worker, endpoints)
    account, config = worker.account(), worker.config
    found: list[ParkedView] = []
    for endpoint in endpoints:
        for message in await find_parked(account, endpoint, message_id):
            found.append(
                await view(
                    account,
                    endpoint,
                    message,
                    tokens=config.tokens_container,
                    parked=config.parked_container,
                    payloads=config.payloads_container,
                )
            )
    if not found:
        say(f"no poison message {shown(message_id, 100)} in {', '.join(endpoints)}")
        return EXIT_FAILED
    if body_file is not None:
        _write_body(found[0], body_file)
    if as_json:
        print_json([parked.to_json() for parked in found])
        return EXIT_OK
    say("\n\n".join(_describe(parked, body_chars) for parked in found))
    return EXIT_OK


def _write_body(parked: ParkedView, path: Path) -> None:
    text = parked.body.text
    if text is None:
        raise ValueError(f"--body-file: no body to write ({parked.body.note})")
    try:
        path.write_text(text + "\n", encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise ValueError(f"--body-file {path}: {e.strerror or type(e).__name__}") from None


def _describe(parked: ParkedView, body_chars: int) -> str:
    record, signal, envelope = parked.record, parked.signal, parked.envelope
    facts: list[tuple[str, Any]] = [
        ("message id", record.message_id),
        ("queue message id", parked.queue_message_id),
        ("endpoint", parked.endpoint),
        ("type", envelope.get("type") or record.message_type),
        ("reason", record.reason),
        ("error type", record.error_type),
        ("tries", record.dequeue_count),
        ("delayed retries", signal.get("retry")),
        ("enqueued (first try)", record.enqueued_at),
        ("last failure", record.failed_at),
        ("parked at", parked.parked_at),
        ("expires", parked.expires_at or "never"),
        ("looked at by replays", parked.looked_at),
        ("form", parked.form + (f" ({record.original})" if record.original else "")),
        ("wrapper problem", parked.problem),
        ("partition key", signal.get("partition_key")),
        ("token", None if parked.token is None else f"{parked.token}: {signal.get('token')}"),
        *((name.replace("_", " "), value) for name, value in envelope.items() if _new(name, value)),
    ]
    lines = [f"{name + ':':<22}{shown(value, 4000)}" for name, value in facts if value is not None]
    lines.append(f"body ({parked.body.state}: {shown(parked.body.note, 1000)}):")
    lines += _body_lines(parked.body.text, body_chars)
    return "\n".join(lines)


def _new(name: str, value: object) -> bool:
    """An envelope field the lines above do not already show."""
    return bool(value) and name not in ("id", "type", "partition_key")


def _body_lines(text: str | None, limit: int) -> list[str]:
    if text is None:
        return ["  (none)"]
    lines = ["  " + shown(line, LINE_CHARS) for line in text[:limit].splitlines()]
    if len(text) > limit:
        lines.append(f"  ... ({len(text) - limit} more characters: --body-file PATH writes it)")
    return lines
