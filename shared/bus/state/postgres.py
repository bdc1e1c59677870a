"""PostgreSQL (asyncpg) at the edge of endpoint rows (``shared.bus.state.postgres_rows``):
asyncpg's errors as the project's, the commit's error rules, and the transaction a handler's
own writes through ``ctx.sql`` join, opened before the handler runs.

The database is always the app's state store, so a server that does not answer (a refused
or lost connection, a timeout) is ``StateUnreachable``: the message waits for it without
spending its tries (``shared.bus.failures``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from shared.bus.state.connection import Pools
from shared.errors import (
    AlreadyExists,
    InvalidValue,
    NotFound,
    PreconditionFailed,
    StateUnreachable,
    StorageError,
    TransactionFailed,
)

T = TypeVar("T")
Connection = asyncpg.Connection | PoolConnectionProxy

# Errors after which nobody knows whether the server applied the request.
_UNKNOWN = (OSError, TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)
# A concurrent transaction won: retry from the read, as after a 412.
_LOST_RACE = (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)


def _schema_missing(error: Exception) -> NotFound:
    return NotFound(f"the bus schema is missing ({error}): run `bus provision`")


async def translated(what: str, call: Callable[[], Awaitable[T]]) -> T:
    with _translating(what):
        return await call()


@contextlib.contextmanager
def _translating(what: str) -> Iterator[None]:
    """asyncpg's errors as the project's, at this adapter's edge."""
    try:
        yield
    except asyncpg.UniqueViolationError as e:
        raise AlreadyExists(f"{what}: {e}") from e
    except asyncpg.UndefinedTableError as e:
        raise _schema_missing(e) from e
    except _UNKNOWN as e:
        raise StateUnreachable(f"{what}: PostgreSQL did not answer: {e}") from e
    except asyncpg.PostgresError as e:
        raise StorageError(f"{what}: {type(e).__name__}: {e}") from e


async def commit_on(connection: Connection, endpoint: str, write: Callable[[], Awaitable[T]]) -> T:
    """Run ``write`` (the transaction's statements) and COMMIT, with asyncpg's errors as the
    commit's: a lost race or a lost connection before COMMIT is TransactionFailed (nothing
    landed), no answer to COMMIT itself is OutcomeUnknown (``StateUnreachable``)."""
    try:
        result = await write()
    except _LOST_RACE as e:
        raise TransactionFailed(0, PreconditionFailed(f"concurrent commit: {e}")) from e
    except _UNKNOWN as e:
        # Not committed yet: the server rolls back a transaction whose client is gone.
        raise TransactionFailed(0, PreconditionFailed(f"connection lost: {e}")) from e
    except asyncpg.PostgresError as e:
        raise StorageError(f"commit at {endpoint}: {type(e).__name__}: {e}") from e
    try:
        await connection.execute("COMMIT")
    except _UNKNOWN as e:
        raise StateUnreachable(f"COMMIT at {endpoint}: no answer: {e}") from e
    except _LOST_RACE as e:
        raise TransactionFailed(0, PreconditionFailed(f"concurrent commit: {e}")) from e
    return result


@contextlib.asynccontextmanager
async def open_transaction(
    pools: Pools, url: str, endpoint: str
) -> AsyncIterator[tuple[Connection, list[bool]]]:
    """A pooled connection inside BEGIN, and a flag the caller sets once it has committed;
    otherwise leaving rolls back."""
    pool = await translated(f"connecting for {endpoint}", lambda: pools.pool(url))
    connection = await translated(f"connecting for {endpoint}", pool.acquire)
    committed = [False]
    try:
        await translated(f"BEGIN at {endpoint}", lambda: connection.execute("BEGIN"))
        yield connection, committed
    finally:
        if not committed[0]:
            with contextlib.suppress(*_UNKNOWN, asyncpg.PostgresError):
                await connection.execute("ROLLBACK")
        await pool.release(connection)


@contextlib.asynccontextmanager
async def transaction_on(
    connection: Connection, endpoint: str
) -> AsyncIterator[tuple[Connection, list[bool]]]:
    """``open_transaction`` on a caller's own connection (a transactional session's): BEGIN
    there, ROLLBACK on leaving uncommitted, and the connection left open for its owner. One
    already inside a transaction is refused: the session must own the transaction it
    commits, or it could not know whether its rows landed."""
    if connection.is_in_transaction():
        raise InvalidValue(
            f"the session of {endpoint} opens its own transaction on the connection it is "
            "given: pass one that is not inside a transaction"
        )
    committed = [False]
    await translated(f"BEGIN at {endpoint}", lambda: connection.execute("BEGIN"))
    try:
        yield connection, committed
    finally:
        if not committed[0]:
            with contextlib.suppress(*_UNKNOWN, asyncpg.PostgresError):
                await connection.execute("ROLLBACK")
