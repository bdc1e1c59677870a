"""The start-up storage check of the local host and the CLI: fail fast and say why.

Without it a wrong connection setting shows only as silence: the SDK retries an unreachable
endpoint for over a minute per call, and queue workers log nothing while they wait. One
cheap read, bounded in time, tells apart the three usual causes: storage unreachable,
authentication refused, resources not provisioned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from shared.errors import ConfigurationError, NotFound, OutcomeUnknown, StorageError
from shared.stores.account import StorageAccount

CHECK_SECONDS = 10.0


class StorageUnavailable(StorageError):
    """Storage cannot be used as configured: unreachable, or the request was refused."""


class ResourcesMissing(ConfigurationError):
    """Storage answers, but the app's queues are not there: not provisioned yet."""


async def check_storage_ready(
    account: StorageAccount,
    queues: Iterable[str],
    *,
    describe: str,
    require_resources: bool = True,
    seconds: float = CHECK_SECONDS,
    tables: Iterable[str] = (),
) -> None:
    """Read the approximate depth of each of ``queues`` and the first row of each of
    ``tables`` (a state account holds no queue). ``describe`` says which storage (never with
    keys) for the message. ``require_resources`` False accepts missing queues and tables
    (``bus provision`` is about to create them)."""
    missing: dict[str, list[str]] = {"queues": [], "tables": []}
    try:
        async with asyncio.timeout(seconds):
            for queue in queues:
                try:
                    await account.queue(queue).approximate_count()
                except NotFound:
                    missing["queues"].append(queue)
            for table in tables:
                try:
                    await account.table(table).query(page_size=1)
                except NotFound:
                    missing["tables"].append(table)
    except (TimeoutError, OutcomeUnknown) as e:
        detail = "" if isinstance(e, TimeoutError) else f" ({e})"
        raise StorageUnavailable(
            f"storage unreachable: {describe} did not answer within {seconds:.0f}s{detail}; "
            "is it running (Azurite: node_modules/.bin/azurite) and is the connection "
            "setting right?"
        ) from None
    except StorageError as e:
        raise StorageUnavailable(
            f"storage refused the request: {describe}: {e}; check the account key in the "
            "connection string, or the identity's data roles"
        ) from None
    listed = "; ".join(f"{kind} {', '.join(names)}" for kind, names in missing.items() if names)
    if listed and require_resources:
        raise ResourcesMissing(f"resources missing in {describe}: {listed}; run `bus provision`")
