"""The deliveries waiting in poison queues: neither lost nor in flight, but parked with a
reason until an operator replays them (``bus replay``), after which they are processed once.

Each endpoint's poison queue is read through a ``StorageAccount`` in the driver, a page (32
messages, the most a receive returns) at a time: a peek cannot page past the first 32, so
messages are received, hidden for ``HOLD_SECONDS``, and made visible again at the end; the
audit takes nothing away. Each message is turned into its row as soon as it is received and
its content dropped, and at most ``cap`` messages are kept over all the queues: memory is
bounded by the cap, not by the queues. When the cap is reached the queue being read, and
every queue after it, gets a marker row saying about how many of its messages were not read
(``unread``); so does a queue whose count says it holds more than the receives returned.

Poison-queue contents are not trusted. An entry can cover a delivery only through its
signal, checked by the parser the pipeline uses (``Signal.parse``): its token name gives the
message id, the sender and the message whose processing sent it, which the checks then match
against a delivery actually sent to this endpoint (``shared.audit.checks.verify_poisoned``).
The id a wrapper's reason names is shown, never used. An entry is unverifiable (``problem``
says why) when its wrapper is damaged, it holds no parseable signal, its original (a
by-reference entry, kept in the parked-originals container) is missing or unreadable, or its
wrapper names another message id or another endpoint than its signal and queue, or the token
its signal names is not in the tokens container (a parked message's token is kept until it
is processed).

No pyspark here: the exporter uses it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from shared.audit.rows import Row
from shared.bus.envelope import MAX_SIGNAL_CHARS, TOKEN_NAME, Signal
from shared.bus.poison import DEFAULT_PARKED_CONTAINER, PoisonedMessage, Unreadable, unwrap
from shared.errors import MalformedSignal, NewerVersion, NotFound
from shared.resources import CONTAINERS, poison_queue
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.queue import MAX_RECEIVE_BATCH, MessageQueue

HOLD_SECONDS = 120.0
"""How long a message the audit is reading stays hidden if the audit dies before showing it
again (it shows every one again as soon as it has read its queue)."""
MAX_LISTED_REASON_CHARS = 500
MAX_LISTED_ID_CHARS = 200
DEFAULT_POISON_CAP = 10_000
"""Poison messages the audit keeps at most, over all queues (``run --poison-cap``)."""
MAX_ORIGINAL_BYTES = 4 * MAX_SIGNAL_CHARS
"""A parked original larger than this cannot be a signal (at most 4 UTF-8 bytes a
character): it is not read."""


def _text(value: object, limit: int = MAX_LISTED_ID_CHARS) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


@dataclass(frozen=True)
class _Entry:
    signal: Signal | None
    problem: str | None


def _check(parked: PoisonedMessage, endpoint: str, raw: str) -> _Entry:
    """The entry's signal when it parses and agrees with its wrapper, else why not."""
    try:
        signal = Signal.parse(raw)
    except MalformedSignal as e:
        return _Entry(None, f"no parseable signal: {str(e)[:300]}")
    except NewerVersion as e:
        return _Entry(None, str(e))
    except RecursionError:
        return _Entry(None, "no parseable signal: nested too deeply")
    claimed = parked.info.get("message_id")
    if claimed is not None and claimed != signal.message_id:
        return _Entry(
            signal,
            f"its wrapper names message {str(claimed)[:80]!r}, its signal {signal.message_id}",
        )
    named = parked.info.get("endpoint")
    if named is not None and named != endpoint:
        return _Entry(
            signal, f"its wrapper names endpoint {str(named)[:80]!r}, it waits in {endpoint}'s"
        )
    return _Entry(signal, None)


async def _token_exists(tokens: BlobContainer, signal: Signal) -> _Entry:
    try:
        await tokens.get_properties(signal.token)
    except NotFound:
        return _Entry(
            signal,
            f"its token {signal.token} is not in container {tokens.name} (processed since, or "
            "never created)",
        )
    return _Entry(signal, None)


async def _original(blobs: BlobContainer, name: str) -> tuple[str | None, str | None]:
    """(the parked original's text, None) or (None, why it cannot be read)."""
    try:
        properties = await blobs.get_properties(name)
        if properties.size > MAX_ORIGINAL_BYTES:
            return None, f"its original {name} is {properties.size} bytes: too large for a signal"
        data = (await blobs.read(name)).data
    except NotFound:
        return None, f"its original {name} is not in container {blobs.name}"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, f"its original {name} is not UTF-8 text"


async def poisoned_row(
    queue: str,
    endpoint: str,
    content: str,
    originals: BlobContainer | None = None,
    tokens: BlobContainer | None = None,
) -> Row:
    """``POISONED_COLUMNS`` of one poison message: ``message_id``, ``sender`` and
    ``incoming_id`` from its signal's token name (None without a parseable signal),
    ``message_type`` and ``claimed_id`` as its wrapper says (shown, never matched), its
    reason, and ``problem``: None when its signal checks out, else why the audit cannot
    verify it. ``originals`` is the parked-originals container a by-reference entry's
    original is read from (without it such an entry is unverifiable); with ``tokens`` (the
    tokens container) the token a signal names must exist there too: a parked message's
    token is kept until it is processed, so a name with a made-up attempt id or digest, or of
    a message processed since, covers nothing."""
    try:
        parked = unwrap(content, endpoint)
    except Unreadable as e:
        return (queue, endpoint, None, None, "", None, None, None, f"unreadable wrapper: {e}", None)
    except NewerVersion as e:
        return (queue, endpoint, None, None, "", None, None, None, str(e), None)
    raw, problem = parked.signal, None
    if raw is None and parked.original is not None:
        if originals is None:
            problem = f"its original {parked.original} was not read"
        else:
            raw, problem = await _original(originals, parked.original)
    entry = _check(parked, endpoint, raw) if raw is not None else _Entry(None, problem)
    if entry.signal is not None and entry.problem is None and tokens is not None:
        entry = await _token_exists(tokens, entry.signal)
    signal = entry.signal
    match = TOKEN_NAME.fullmatch(signal.token) if signal is not None else None
    return (
        queue,
        endpoint,
        signal.message_id if signal is not None else None,
        _text(parked.info.get("message_type")),
        parked.reason[:MAX_LISTED_REASON_CHARS],
        None if match is None else match["sender"],
        None if match is None else match["incoming"],
        _text(parked.info.get("message_id")),
        entry.problem,
        None,
    )


def cut_row(queue: str, endpoint: str, unread: int, why: str) -> Row:
    """The marker of a queue the audit did not read to its end: about ``unread`` of its
    messages were not read, because of ``why``."""
    return (queue, endpoint, None, None, f"not read: {why}", None, None, None, None, unread)


def _capped(cap: int) -> str:
    return f"the audit keeps at most {cap:,} poison messages"


UNSEEN = (
    "not seen by the audit's receives (hidden by another reader, or added while it read the queue)"
)


@dataclass
class _Budget:
    left: int


async def _read_queue(
    queue: MessageQueue,
    endpoint: str,
    originals: BlobContainer | None,
    tokens: BlobContainer | None,
    budget: _Budget,
    rows: list[Row],
) -> bool:
    """Receive ``queue`` a page at a time into ``rows`` until it is drained or the budget
    is spent; returns whether some of its messages were left unread. Every message received
    is made visible again before returning; only ids and pop receipts are held meanwhile."""
    held: dict[str, str] = {}
    cut = False
    try:
        while True:
            wanted = min(MAX_RECEIVE_BATCH, max(budget.left, 1))
            batch = await queue.receive(wanted, visibility_timeout=HOLD_SECONDS)
            fresh = [m for m in batch if m.id not in held]
            held.update((m.id, m.pop_receipt) for m in batch)
            if not fresh:
                break
            if budget.left <= 0:  # this one looked past the cap: there was more
                cut = True
                break
            for message in fresh[: budget.left]:
                content = message.content
                rows.append(await poisoned_row(queue.name, endpoint, content, originals, tokens))
            cut = len(fresh) > budget.left
            budget.left -= min(len(fresh), budget.left)
            if cut:
                break
    finally:
        for message_id, receipt in held.items():
            with contextlib.suppress(NotFound):
                await queue.update(message_id, receipt, visibility_timeout=0)
    return cut


async def collect_poisoned(
    account: StorageAccount,
    endpoints: Sequence[str],
    *,
    cap: int = DEFAULT_POISON_CAP,
    container: str = DEFAULT_PARKED_CONTAINER,
    tokens: str = CONTAINERS["tokens"],
) -> list[Row]:
    """Up to ``cap`` messages waiting in the poison queues of ``endpoints``, one row each,
    and a marker row (``unread`` set) for every queue not read to its end (cut at the cap, or
    holding more messages than the receives returned); a queue that does not exist holds
    none. By-reference entries are checked against their originals in ``container``, and
    every signal's token must exist in the container ``tokens``."""
    if cap < 0:
        raise ValueError("the poison cap must not be negative")
    rows: list[Row] = []
    budget = _Budget(cap)
    originals = account.blob_container(container)
    token_blobs = account.blob_container(tokens)
    for endpoint in endpoints:
        name = poison_queue(endpoint)
        queue = account.queue(name)
        try:
            if budget.left <= 0:
                waiting = await queue.approximate_count()
                if waiting:
                    rows.append(cut_row(name, endpoint, waiting, _capped(cap)))
                continue
            before = len(rows)
            cut = await _read_queue(queue, endpoint, originals, token_blobs, budget, rows)
            # The count includes hidden messages: more than were read means some were not.
            unread = await queue.approximate_count() - (len(rows) - before)
            if cut:
                rows.append(cut_row(name, endpoint, max(unread, 1), _capped(cap)))
            elif unread > 0:
                rows.append(cut_row(name, endpoint, unread, UNSEEN))
        except NotFound:
            continue
    return rows
