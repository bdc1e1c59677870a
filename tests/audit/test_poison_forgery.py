"""The audit against whoever can write to a poison queue: an entry covers a delivery only
through a signal that parses and whose token names a delivery actually sent to that queue's
endpoint; anything else is reported as unverifiable and cannot turn a lost delivery into a
poisoned one. Poison queues are read a page at a time up to a cap, and a cut is reported."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.audit.cli import EXIT_VIOLATED, main
from shared.audit.poisoned import collect_poisoned
from shared.audit.rows import POISONED_COLUMNS
from shared.bus.envelope import Signal
from shared.bus.poison import Reason, park, parked_name, poison_body, reference_body
from shared.clock import ManualClock
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name

AS_OF = ["--as-of", "2100-01-01T00:00:00+00:00"]  # every unprocessed delivery is overdue


async def orders_in_queue(backend: Backend, count: int) -> tuple[Harness, FlowNames, list[Any]]:
    """``count`` orders sent by a client, their signals taken off the orders queue."""
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names))
    client = harness.setup_bus.client()
    for i in range(count):
        await client.send(
            PlaceOrder(order_id=f"o{i}", amount=10), to=names.orders, idempotency_key=f"o{i}"
        )
    queue = harness.raw.queue(names.orders)
    received: list[Any] = []
    while len(received) < count:
        received.extend(await queue.receive(32, visibility_timeout=300))
    return harness, names, received


def id_of(message: Any) -> str:
    return Signal.parse(message.content).message_id


async def drain(account: StorageAccount, name: str) -> list[str]:
    """Every message of a queue, received (and hidden) once each: their contents."""
    queue = account.queue(name)
    seen: dict[str, str] = {}
    while batch := await queue.receive(32, visibility_timeout=300):
        seen.update((m.id, m.content) for m in batch)
    return list(seen.values())


@pytest.mark.spark
@pytest.mark.azurite
async def test_a_forged_poison_entry_cannot_hide_a_message_lost_for_real(
    spark: Any,
    azurite: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shared.audit.export import export
    from shared.settings import StorageSettings
    from shared.stores.azure import AzureStorageAccount

    account = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    try:
        harness, names, [lost, inline, by_reference, fine] = await orders_in_queue(
            Backend("azurite", account), 4
        )
        orders = harness.raw.queue(names.orders)
        for message in (lost, inline, by_reference):  # taken: never processed
            await orders.delete(message.id, message.pop_receipt)
        await orders.update(fine.id, fine.pop_receipt, visibility_timeout=0)
        container = harness.config.parked_container
        parked = harness.raw.blob_container(container)
        await parked.create_if_missing()
        why = Reason(names.orders, "ValueError: card declined", 5, error_type="ValueError")
        # Two genuine parkings: inline, and by reference to the original in `parked`.
        await park(harness.raw, inline.content, why, container)
        original = parked_name(names.orders)
        await parked.upload(original, by_reference.content.encode())
        poison = harness.raw.queue(poison_queue(names.orders))
        await poison.send(reference_body(why, original))
        # The attacker's entries, each naming the lost message.
        victim = id_of(lost)
        forged_ids = str(uuid.uuid4()), str(uuid.uuid4())
        forged_token = f"mallory/{forged_ids[0]}/{forged_ids[1]}/{victim}"
        # The victim's own sender and incoming message, a made-up attempt: no such token.
        sender, incoming = Signal.parse(lost.content).token.split("/")[:2]
        made_up = f"{sender}/{incoming}/{forged_ids[1]}/{victim}"
        forgeries = [
            poison_body("not a signal", Reason(names.orders, "forged", 5, message_id=victim)),
            json.dumps({"message_id": victim}),  # as if the host had moved a signal
            Signal(  # parses, but its token was sent by nobody
                message_id=victim, attempt_id=forged_ids[1], token=forged_token, partition_key="o0"
            ).to_json(),
            Signal(
                message_id=victim, attempt_id=forged_ids[1], token=made_up, partition_key="o0"
            ).to_json(),
            # a genuine signal, with a wrapper that names the victim instead
            poison_body(inline.content, Reason(names.orders, "x", 1, message_id=victim)),
            reference_body(why, parked_name(names.orders)),  # an original that is not there
        ]
        for content in forgeries:
            await poison.send(content)
        # The lost message's own signal, parked in another endpoint's queue.
        await harness.raw.queue(poison_queue(names.payments)).send(lost.content)
        await harness.run_until_quiet()
    finally:
        await account.close()
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    tables = [
        *("--endpoints", ",".join(names.all), "--ingress-tables", harness.config.ingress_table),
        *("--tokens-container", harness.config.tokens_container),
    ]

    code = await asyncio.to_thread(main, ["run", "--out", str(tmp_path / "r"), *AS_OF, *tables])

    assert code == EXIT_VIOLATED
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (summary["verdict"], summary["invariants"]["lost"]) == ("FAIL", 1)
    assert [s["message_id"] for s in summary["samples"]["lost"]] == [victim]
    assert summary["poisoned"] == 2
    assert {s["message_id"] for s in summary["samples"]["poisoned"]} == {
        id_of(inline),
        id_of(by_reference),
    }
    assert summary["unverifiable_poison"] == 7
    assert summary["poison_unverifiable"] == {
        poison_queue(names.orders): 6,
        poison_queue(names.payments): 1,
    }
    problems = sorted(s["problem"].split(":")[0] for s in summary["samples"]["unverifiable_poison"])
    assert problems == sorted(
        [
            "no parseable signal",
            "no parseable signal",
            f"its token {forged_token} is not in container {harness.config.tokens_container} "
            "(processed since, or never created)",
            f"its token {made_up} is not in container {harness.config.tokens_container} "
            "(processed since, or never created)",
            "its token names no delivery sent to this endpoint (no send of this message id by "
            "the sender and incoming message its token names)",
            f"its wrapper names message '{victim}', its signal {id_of(inline)}",
            f"its original {json.loads(forgeries[-1])['poison']['original']} is not in "
            f"container {container}",
        ]
    )
    assert summary["poison_cut"] == {}
    html = (tmp_path / "r" / "report.html").read_text()
    assert "unverifiable poison messages" in html
    console = capsys.readouterr().out
    assert re.search(r"unverifiable poison +7 ", console)
    assert "lost=1" in console
    assert "unverifiable_poison=7" in console
    assert any("cover no delivery" in step for step in summary["next_steps"])

    # The same verdict from an export of the same account.
    account = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    try:
        ingress = [harness.config.ingress_table]
        await export(
            account,
            tmp_path / "export",
            endpoint_tables=names.all,
            ingress_tables=ingress,
            tokens_container=harness.config.tokens_container,
        )
        # The audit took nothing away: every poison message is there, visible again.
        assert len(await drain(account, poison_queue(names.orders))) == 8
    finally:
        await account.close()
    code = await asyncio.to_thread(
        main, ["run", "--input", str(tmp_path / "export"), "--out", str(tmp_path / "e"), *AS_OF]
    )
    assert code == EXIT_VIOLATED
    again = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert (again["invariants"]["lost"], again["poisoned"], again["unverifiable_poison"]) == (
        1,
        2,
        7,
    )


async def test_poison_queues_are_read_a_page_at_a_time_up_to_the_cap(backend: Backend) -> None:
    suffix = unique_name("")[:8]
    long, short, absent = f"capa{suffix}", f"capb{suffix}", f"capc{suffix}"
    for endpoint, count in ((long, 45), (short, 3)):
        queue = backend.account.queue(poison_queue(endpoint))
        await queue.create_if_missing()
        for i in range(count):
            await queue.send(poison_body("x", Reason(endpoint, f"failure {i}", 1)))

    rows = await collect_poisoned(backend.account, [long, short, absent], cap=40)

    read = [dict(zip(POISONED_COLUMNS, r, strict=True)) for r in rows]
    entries = [r for r in read if r["unread"] is None]
    assert len(entries) == 40  # more than a page (32), no more than the cap
    assert len({r["reason"] for r in entries}) == 40  # none read twice
    assert {r["queue"] for r in entries} == {poison_queue(long)}
    cut = {r["queue"]: r["unread"] for r in read if r["unread"] is not None}
    assert cut == {poison_queue(long): 5, poison_queue(short): 3}
    # Nothing taken away, every message visible again.
    assert len(await drain(backend.account, poison_queue(long))) == 45
    assert len(await drain(backend.account, poison_queue(short))) == 3


async def test_a_queue_that_fits_the_cap_exactly_is_not_cut(backend: Backend) -> None:
    endpoint = f"fits{unique_name('')[:8]}"
    queue = backend.account.queue(poison_queue(endpoint))
    await queue.create_if_missing()
    for i in range(32):
        await queue.send(poison_body("x", Reason(endpoint, f"failure {i}", 1)))

    rows = await collect_poisoned(backend.account, [endpoint], cap=32)

    assert len(rows) == 32
    assert all(r[-1] is None for r in rows)


@pytest.mark.spark
async def test_a_cut_poison_queue_cannot_hide_a_loss(spark: Any) -> None:
    from shared.audit.account_source import read_account
    from shared.audit.compute import AuditOptions, run_audit
    from shared.audit.summary import AuditSummary

    backend = Backend("memory", MemoryStorageAccount(ManualClock()))
    harness, names, messages = await orders_in_queue(backend, 2)
    for message in messages:
        await harness.raw.queue(names.orders).delete(message.id, message.pop_receipt)
        why = Reason(names.orders, "ValueError: card declined", 5)
        await park(harness.raw, message.content, why, harness.config.parked_container)
    tables: dict[str, Any] = {
        "endpoint_tables": names.all,
        "ingress_tables": [harness.config.ingress_table],
    }

    async def audit(cap: int) -> AuditSummary:
        audit_df, ingress_df, poisoned = await read_account(
            spark,
            harness.raw,
            **tables,
            poison_cap=cap,
            tokens_container=harness.config.tokens_container,
        )
        as_of = datetime.now(UTC) + timedelta(hours=1)
        return run_audit(audit_df, ingress_df, AuditOptions(as_of=as_of), poisoned=poisoned)

    whole, cut = await audit(10), await audit(1)

    assert (whole.verdict, whole.poisoned, whole.invariants.lost, whole.poison_cut) == (
        "PASS",
        2,
        0,
        {},
    )
    assert (cut.verdict, cut.poisoned, cut.invariants.lost) == ("FAIL", 1, 1)
    assert cut.poison_cut == {poison_queue(names.orders): 1}
    assert any("--poison-cap" in step for step in cut.next_steps)


@pytest.mark.spark
async def test_an_export_from_before_entries_were_verified_covers_nothing(
    spark: Any, tmp_path: Path
) -> None:
    from shared.audit.export import _write_page, export

    backend = Backend("memory", MemoryStorageAccount(ManualClock()))
    harness, names, [lost, fine] = await orders_in_queue(backend, 2)
    await harness.raw.queue(names.orders).delete(lost.id, lost.pop_receipt)
    await harness.raw.queue(names.orders).update(fine.id, fine.pop_receipt, visibility_timeout=0)
    await harness.run_until_quiet()
    out = tmp_path / "export"
    ingress = [harness.config.ingress_table]
    await export(harness.raw, out, endpoint_tables=names.all, ingress_tables=ingress)
    # The old layout: the id its signal or its reason named, and nothing to check it by.
    old = ("queue", "endpoint", "message_id", "message_type", "reason")
    row = (poison_queue(names.orders), names.orders, id_of(lost), "PlaceOrder", "declined")
    (out / "poisoned").mkdir(exist_ok=True)
    _write_page(out / "poisoned" / "poison-000000.parquet", [row], old, "parquet")

    code = await asyncio.to_thread(
        main, ["run", "--input", str(out), "--out", str(tmp_path / "r"), "--quiet", *AS_OF]
    )

    assert code == EXIT_VIOLATED
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (summary["invariants"]["lost"], summary["poisoned"]) == (1, 0)
    assert summary["unverifiable_poison"] == 1
    [entry] = summary["samples"]["unverifiable_poison"]
    assert entry["problem"].startswith("no signal read")


async def test_messages_another_reader_hides_are_reported_as_not_read(backend: Backend) -> None:
    endpoint = f"busy{unique_name('')[:8]}"
    queue = backend.account.queue(poison_queue(endpoint))
    await queue.create_if_missing()
    for i in range(5):
        await queue.send(poison_body("x", Reason(endpoint, f"failure {i}", 1)))
    taken = await queue.receive(2, visibility_timeout=300)  # a replay busy with two of them

    rows = await collect_poisoned(backend.account, [endpoint], cap=100)

    read = [dict(zip(POISONED_COLUMNS, r, strict=True)) for r in rows]
    assert len([r for r in read if r["unread"] is None]) == 3
    [marker] = [r for r in read if r["unread"] is not None]
    assert marker["unread"] == len(taken) == 2
    assert "not seen by the audit's receives" in str(marker["reason"])
