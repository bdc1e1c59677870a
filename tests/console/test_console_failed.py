"""The console's failed messages over real HTTP: every parked message paged, filtered and
grouped, one message whole, replay and discard recorded in the action journal."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.resources import poison_queue
from tests.console.parking import (
    ERRORS,
    TYPES,
    archived,
    clear,
    park,
    park_sent_order,
    parked_content,
    waiting,
)
from tests.console.running import RunningConsole

pytestmark = pytest.mark.azurite

PARKED = 500


@pytest.fixture
def emptied(emulator: AzuriteEndpoints, console: RunningConsole) -> RunningConsole:
    """The console, with the payments and orders queues and their poison queues empty."""
    clear(emulator, "payments", "orders")
    return console


def every_page(console: RunningConsole, size: int, query: str = "") -> list[dict[str, object]]:
    listed: list[dict[str, object]] = []
    skip = 0
    while True:
        answer = console.get(f"/api/failed?size={size}&skip={skip}{query}")
        assert answer.status == 200, answer.body
        page = answer.json()
        listed += page["messages"]
        skip += size
        if skip >= page["total"]:
            return listed


def test_500_parked_messages_are_paged_through_each_once_and_none_is_taken(
    emptied: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(PARKED)])

    first = emptied.get("/api/failed?size=100").json()
    listed = every_page(emptied, 100)

    assert (first["total"], first["skip"], first["size"]) == (PARKED, 0, 100)
    assert len(listed) == PARKED
    assert len({m["id"] for m in listed}) == PARKED
    assert {m["message_id"] for m in listed} == {f"m-{i}" for i in range(PARKED)}
    one = next(m for m in listed if m["message_id"] == "m-7")
    assert one["endpoint"] == "payments"
    assert (one["type"], one["error_type"]) == (TYPES[1], ERRORS[2])
    assert (one["reason"], one["dequeue_count"]) == ("failure 7", 5)
    assert str(one["parked_at"]).endswith("+00:00")
    assert waiting(emulator, poison_queue("payments")) == PARKED


def test_filters_and_groups_count_as_bus_poison_list_group_does(
    emptied: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(100)])

    groups = emptied.get("/api/failed/groups").json()["groups"]
    chosen = emptied.get("/api/failed?endpoint=payments&type=RefundPayment&error=KeyError")

    expected = Counter((TYPES[i % 2], ERRORS[i % 5]) for i in range(100))
    assert {(g["type"], g["error_type"]): g["count"] for g in groups} == expected
    assert all(g["endpoint"] == "payments" for g in groups)
    assert chosen.json()["total"] == expected["RefundPayment", "KeyError"] == 10
    assert emptied.get("/api/failed?endpoint=nosuch").status == 404


def test_one_message_whole_with_its_body_read_from_its_token(
    emptied: RunningConsole, emulator: AzuriteEndpoints, project: Path
) -> None:
    hostile = "<script>alert('x')</script>\" onmouseover=\"x\x1b[2J\u2028"
    message_id = park_sent_order(emulator, project, "order-1", hostile, f"failed: {hostile}")
    [listed] = emptied.get("/api/failed?endpoint=orders").json()["messages"]

    answer = emptied.get(f"/api/failed/orders/{listed['id']}")

    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("application/json")
    assert b"<" not in answer.body  # no byte of it reads as markup
    assert b">" not in answer.body
    shown = answer.json()
    assert (shown["endpoint"], shown["id"], shown["message_id"]) == (
        "orders",
        listed["id"],
        message_id,
    )
    assert shown["type"] == "PlaceOrder"
    assert json.loads(shown["body"])["customer"] == hostile
    assert shown["reason"] == f"failed: {hostile}"
    assert shown["body_state"] == "shown"
    assert [step["what"] for step in shown["history"]] == ["sent", "parked (inline)"]


def test_a_message_not_parked_or_of_no_endpoint_is_404(emptied: RunningConsole) -> None:
    assert emptied.get("/api/failed/payments/00000000-0000-0000-0000-000000000000").status == 404
    assert emptied.get("/api/failed/nosuch/00000000-0000-0000-0000-000000000000").status == 404


def test_replay_of_ids_and_of_a_group_sends_them_back_and_is_journaled(
    emptied: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(20)])
    listed = emptied.get("/api/failed?size=500").json()["messages"]
    first = next(m for m in listed if m["message_id"] == "m-0")

    one = emptied.post("/api/replay", {"endpoint": "payments", "ids": [first["id"]]})
    group = emptied.post(
        "/api/replay", {"endpoint": "payments", "type": "RefundPayment", "error_type": "OSError"}
    )

    assert one.status == 200, one.body
    assert (one.json()["replayed"], one.json()["skipped"]) == (1, 0)
    assert group.json()["replayed"] == 2  # m-9 and m-19
    assert waiting(emulator, "payments") == 3
    assert emptied.get("/api/failed").json()["total"] == 17
    actions = emptied.get("/api/actions?size=2").json()
    newest, before = actions["actions"]
    assert newest["id"] == group.json()["action"]
    assert (newest["what"], newest["who"], newest["count"]) == ("replay", "ada", 2)
    assert newest["selector"] == "type RefundPayment; error type OSError"
    assert before["id"] == one.json()["action"]
    assert before["selector"] == f"ids {first['id']}"


def test_discard_archives_with_the_reason_and_the_journal_shows_it(
    emptied: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    park(emulator, [parked_content(i) for i in range(10)])

    done = emptied.post(
        "/api/discard",
        {"endpoint": "payments", "type": "ChargePayment", "reason": "charged by hand <b>"},
    )

    assert done.status == 200, done.body
    assert done.json()["discarded"] == 5
    assert emptied.get("/api/failed").json()["total"] == 5
    entries = [e for e in archived(emulator) if e["reason"] == "charged by hand <b>"]
    assert len(entries) == 5
    assert {e["by"] for e in entries} == {"ada"}
    [newest] = emptied.get("/api/actions?size=1").json()["actions"]
    assert (newest["what"], newest["reason"], newest["count"]) == (
        "discard",
        "charged by hand <b>",
        5,
    )


def test_a_discard_needs_a_reason_and_a_selection(emptied: RunningConsole) -> None:
    no_reason = emptied.post("/api/discard", {"endpoint": "payments", "type": "ChargePayment"})
    blank = emptied.post("/api/discard", {"endpoint": "payments", "ids": ["a"], "reason": " "})
    whole_queue = emptied.post("/api/discard", {"endpoint": "payments", "reason": "all"})

    assert no_reason.status == blank.status == whole_queue.status == 400
    assert "reason" in no_reason.json()["error"]
