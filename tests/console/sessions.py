"""Transactional sessions as an operator may find them, for the console's tests: on an
endpoint of the session app, one request that committed and stopped before its signals
(waiting: crashed as tests/bus/test_sessions.py crashes one, before its first queue send), one
that finished, one that failed inside its block (its record left open), and a record damaged
by hand; and finished records written directly where a test needs more than a look reads."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime

from shared.bus.ids import fresh_id
from shared.bus.session_records import SessionRecord
from shared.provisioning import provision
from shared.runtime import Worker
from shared.settings import Settings
from shared.stores.account import StorageAccount
from shared.stores.instrumented import (
    Fault,
    Instrumentation,
    InstrumentedAccount,
    SimulatedCrash,
    fault_at_first,
)
from shared.stores.table import Entity
from tests.console.session_app import ORDERS, PlaceOrder, app

DAMAGED = Entity("damaged", "session|by-hand", {"status": "paid", "outgoing": "{"})
"""A session row no session wrote: a status the bus never writes, its signals not JSON."""


class RequestFailed(Exception):
    """The request's own error, after its writes and sends."""


async def provisioned(account: StorageAccount) -> None:
    await provision(account, Worker(app, Settings({}, {}), account).resources)


async def leave_sessions(account: StorageAccount, endpoint: str) -> None:
    """One session of each state on ``endpoint``, each in the partition its state names, and
    the damaged row."""
    watched = Instrumentation()
    worker = Worker(app, Settings({}, {}), InstrumentedAccount(account, watched))
    try:
        await _request(worker, endpoint, "finished")
        await _stopped(RequestFailed, _request(worker, endpoint, "open", fail=True))
        watched.plan = fault_at_first("queue.send", Fault.CRASH_BEFORE)
        await _stopped(SimulatedCrash, _request(worker, endpoint, "waiting"))
        watched.plan = lambda op: None
        await worker.endpoint_rows()[endpoint].insert(DAMAGED)
    finally:
        await worker.close()


async def _stopped(error: type[BaseException], request: Awaitable[None]) -> None:
    """``request`` run, which must stop with ``error``."""
    try:
        await request
    except error:
        return
    raise AssertionError(f"the request did not stop with {error.__name__}")


async def _request(worker: Worker, endpoint: str, order_id: str, *, fail: bool = False) -> None:
    """A web request: its order row and its PlaceOrder, in one session under its key."""
    async with worker.bus().session(endpoint, partition=order_id, key=order_id) as s:
        s.insert(Entity(order_id, f"order-{order_id}", {"amount": 5}))
        s.send(PlaceOrder(order_id=order_id), to=ORDERS)
        if fail:
            raise RequestFailed(order_id)


async def write_finished(account: StorageAccount, endpoint: str, count: int) -> None:
    """``count`` finished session records written directly in partitions ``z-...`` (after
    every partition ``leave_sessions`` uses), as a committed and signalled session leaves
    its record."""
    worker = Worker(app, Settings({}, {}), account)
    rows = worker.endpoint_rows()[endpoint]
    now = datetime.now(UTC)
    try:
        for i in range(count):
            record = SessionRecord(
                f"z-{i:04}",
                f"finished-{i}",
                round_id=fresh_id(),
                started_at=now,
                status="committed",
                committed_at=now,
                signalled=True,
            )
            await rows.insert(record.to_entity())
    finally:
        await worker.close()
