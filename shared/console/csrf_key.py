"""The key that signs the deployed console's CSRF values, the same on every instance.

Instances of the function app share nothing but storage, and a user's page may talk to any
of them, so the key is a row of the action journal's table (its own partition): the first
instance to need it creates it, every other reads it. ``bus console`` signs with a key of its
own, new at each start.
"""

from __future__ import annotations

import contextlib
import secrets

from shared.errors import AlreadyExists
from shared.stores.table import Entity, Table

PARTITION = "console"
ROW = "csrf-key"


async def shared_csrf_key(table: Table) -> bytes:
    """The key in ``table``, created at random if it has none yet."""
    # Another instance may have made it first: the one stored is the one that counts.
    with contextlib.suppress(AlreadyExists):
        await table.insert(Entity(PARTITION, ROW, {"key": secrets.token_hex(32)}))
    value = (await table.get(PARTITION, ROW)).get("key")
    if not isinstance(value, str) or len(value) < 32:
        raise ValueError(f"the console's key row {PARTITION}/{ROW} is not the console's")
    return value.encode("ascii", "replace")
