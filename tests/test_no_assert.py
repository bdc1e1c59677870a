"""No ``assert`` statement in the library: ``python -O`` strips them, so a guard on input or on
stored state must be the project's own error, raised with or without ``-O``."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared import http_ingress
from shared.bus import Bus, BusApp, Message
from shared.bus.ingress import INGRESS_ROW
from shared.bus.modes.state_based import IndexEntry, Version
from shared.bus.records import OutboxRecord, outbox_row
from shared.cli.commands import subscribe_command
from shared.errors import ConfigurationError, CorruptRecord
from shared.runtime import Worker
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity
from tests.bus.flow import PlaceOrder
from tests.cleanup.test_cleanup_job import clean, new_flow, settings
from tests.conftest import Backend

REPO = Path(__file__).resolve().parents[1]

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def assert_lines(source: str) -> list[int]:
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assert)]


def library_asserts() -> dict[str, list[int]]:
    found = {}
    for path in sorted((REPO / "shared").rglob("*.py")):
        lines = assert_lines(path.read_text(encoding="utf-8"))
        if lines:
            found[path.relative_to(REPO).as_posix()] = lines
    return found


def test_the_scan_finds_an_assert_wherever_it_is_nested() -> None:
    source = "def f(x):\n    if x:\n        for y in x:\n            assert y, 'why'\n"
    assert assert_lines(source) == [4]
    assert assert_lines("x = 'assert y'\n# assert z\n") == []


def test_the_library_has_no_assert_statement() -> None:
    found = library_asserts()
    assert not found, f"assert statements (use the project's errors): {found}"


# --- stored rows of the wrong shape are CorruptRecord, not an AssertionError ---------------


def outbox_entity(**changes: object) -> Entity:
    properties: dict[str, object] = {
        "claim": "c1",
        "status": "claimed",
        "incoming": "tok",
        "started_at": WHEN,
        "outgoing": "[]",
        "abandoned": "[]",
        **changes,
    }
    return Entity("p", outbox_row("m1"), properties)  # type: ignore[arg-type]


def with_property(entity: Entity, name: str, value: object) -> Entity:
    properties = {**entity.properties, name: value}
    return Entity(entity.partition_key, entity.row_key, properties)  # type: ignore[arg-type]


def version_entity() -> Entity:
    return Version("p", 3, "m1", WHEN, WHEN, 7, "{}", []).to_entity()


def index_entity() -> Entity:
    return IndexEntry(
        partition_key="p", message_id="m1", committed_at=WHEN, outgoing=(), abandoned=(), version=3
    ).to_entity()


@pytest.mark.parametrize(
    ("field", "value"), [("status", "done"), ("started_at", "2026-01-01T00:00:00Z")]
)
def test_an_outbox_row_with_a_field_of_the_wrong_kind_is_a_corrupt_record(
    field: str, value: str
) -> None:
    assert OutboxRecord.from_entity(outbox_entity()).status == "claimed"
    with pytest.raises(CorruptRecord, match=field):
        OutboxRecord.from_entity(outbox_entity(**{field: value}))


@pytest.mark.parametrize("field", ["committed_at", "now"])
def test_a_state_version_row_with_a_time_that_is_not_a_time_is_a_corrupt_record(
    field: str,
) -> None:
    assert Version.from_entity(version_entity()).version == 3
    with pytest.raises(CorruptRecord, match="state row"):
        Version.from_entity(with_property(version_entity(), field, "yesterday"))


@pytest.mark.parametrize(("field", "value"), [("version", "3"), ("committed_at", 1767225600)])
def test_an_index_row_with_a_field_of_the_wrong_kind_is_a_corrupt_record(
    field: str, value: object
) -> None:
    assert IndexEntry.from_entity(index_entity()).version == 3
    with pytest.raises(CorruptRecord, match=field):
        IndexEntry.from_entity(with_property(index_entity(), field, value))


async def test_an_ingress_record_with_a_forged_expiry_is_refused_and_nothing_is_sent(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    ingress = harness.raw.table(harness.config.ingress_table)
    await ingress.insert(Entity("k-forged", INGRESS_ROW, {"expires_at": "never"}))

    with pytest.raises(CorruptRecord, match="expires_at"):
        await harness.setup_bus.client().send(
            PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k-forged"
        )
    assert await harness.tokens_in_flight() == []


async def test_cleanup_reports_a_committed_outbox_row_without_its_commit_time_and_keeps_it(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    table = harness.raw.table(names.orders)
    await table.insert(with_property(outbox_entity(), "status", "committed"))

    report = await clean(harness, settings())

    [outbox] = [t for t in report.tasks if t.task == f"outbox.{names.orders}"]
    assert outbox.finished  # the bad row is skipped and reported; the pass goes on
    assert outbox.kept["bad_row"] == 1
    [bad] = outbox.bad_rows
    assert "CorruptRecord: committed outbox record without committed_at" in bad
    assert (await table.get("p", outbox_row("m1"))).properties["status"] == "committed"
    assert all(t.skipped is None for t in report.tasks)


# --- input the callers can get wrong ------------------------------------------------------


class Ping(Message):
    """Neither a Command nor an Event: an endpoint may handle it, the ingress cannot send it."""

    n: int


def ping_bus() -> Bus:
    app = BusApp()
    app.endpoint("pings").handles(Ping)(lambda ctx, message: None)
    return Bus(app, MemoryStorageAccount())


async def test_the_ingress_answers_400_for_a_type_that_is_neither_command_nor_event() -> None:
    body = json.dumps({"type": "Ping", "body": {"n": 1}}).encode()
    answer = await http_ingress.handle(ping_bus(), {"Idempotency-Key": "k1"}, body)
    assert answer.status == 400
    assert "neither a Command nor an Event" in answer.body["error"]


async def test_subscribing_a_topic_without_an_endpoint_is_a_bad_request() -> None:
    account = MemoryStorageAccount()
    with pytest.raises(http_ingress.BadRequest, match="name the endpoint"):
        await subscribe_command(Worker.for_account(account), "OrderPlaced", None, subscribe=True)


def test_identity_settings_without_every_service_uri_are_a_configuration_error() -> None:
    settings = StorageSettings(blob_service_uri="https://acct.blob.core.windows.net")
    with pytest.raises(ConfigurationError, match="three service URIs"):
        AzureStorageAccount(settings)


GUARDS_UNDER_O = textwrap.dedent(
    """
    import asyncio, json, sys
    from tests.test_no_assert import (
        AzureStorageAccount, IndexEntry, OutboxRecord, StorageSettings, Version, http_ingress,
        index_entity, outbox_entity, ping_bus, subscribe_command, version_entity,
        with_property, MemoryStorageAccount, Worker,
    )

    def raised(call):
        try:
            result = call()
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
        except Exception as e:
            return type(e).__name__
        return getattr(result, "status", "no error")

    body = json.dumps({"type": "Ping", "body": {"n": 1}}).encode()
    print(json.dumps({
        "optimize": sys.flags.optimize,
        "outbox": raised(lambda: OutboxRecord.from_entity(outbox_entity(status="done"))),
        "version": raised(lambda: Version.from_entity(
            with_property(version_entity(), "now", "x"))),
        "index": raised(lambda: IndexEntry.from_entity(
            with_property(index_entity(), "version", "3"))),
        "account": raised(lambda: AzureStorageAccount(
            StorageSettings(blob_service_uri="https://a.blob.core.windows.net"))),
        "subscribe": raised(lambda: subscribe_command(
            Worker.for_account(MemoryStorageAccount()), "t", None, subscribe=True)),
        "ingress": raised(lambda: http_ingress.handle(ping_bus(), {"Idempotency-Key": "k"}, body)),
    }))
    """
)


def test_the_guards_hold_under_python_dash_o() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-O", "-c", GUARDS_UNDER_O],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {
        "optimize": 1,
        "outbox": "CorruptRecord",
        "version": "CorruptRecord",
        "index": "CorruptRecord",
        "account": "ConfigurationError",
        "subscribe": "BadRequest",
        "ingress": 400,
    }
