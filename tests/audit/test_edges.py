"""What the audit takes from outside: the JSON text of Table Storage becomes typed deliveries
at that edge, and poison-queue contents are read without being trusted."""

from __future__ import annotations

import json
import uuid

import pytest

from shared.audit.next_steps import NOTHING_TO_DO, next_steps
from shared.audit.poisoned import MAX_ORIGINAL_BYTES, poisoned_row
from shared.audit.rows import (
    POISONED_COLUMNS,
    deliveries_of_audit,
    deliveries_of_ingress,
    ingress_row,
)
from shared.audit.summary import AuditSummary, Invariants
from shared.bus.envelope import Signal
from shared.bus.poison import Reason, poison_body, reference_body
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount

IN, ATTEMPT, M1, M3 = (str(uuid.UUID(int=i)) for i in (1, 2, 3, 4))


def test_caused_json_becomes_typed_deliveries() -> None:
    stored = json.dumps([{"id": "m2", "type": "ChargeCard", "destination": "payments"}])

    assert deliveries_of_audit(stored) == [
        {"id": "m2", "type": "ChargeCard", "destination": "payments"}
    ]
    assert deliveries_of_audit("[]") == []


@pytest.mark.parametrize(
    "stored", [None, 7, "{not json", '{"id": "m"}', "[1, 2]", '["m2"]', "[" * 5000]
)
def test_unreadable_caused_is_none_so_the_row_counts_as_invalid(stored: object) -> None:
    assert deliveries_of_audit(stored) is None


def test_mistyped_fields_of_a_caused_entry_become_none() -> None:
    stored = json.dumps([{"id": 5, "type": ["x"], "destination": "payments", "extra": 1}])

    assert deliveries_of_audit(stored) == [{"id": None, "type": None, "destination": "payments"}]


FULL_SIGNAL = {
    "destination": "orders",
    "message_id": "m1",
    "attempt_id": "a1",
    "token": "t",
    "partition_key": "p",
    "type": "PlaceOrder",
}
"""A delivery as the first format of an ingress record lists it: the whole signal."""


def test_ingress_outgoing_keeps_only_what_names_a_delivery() -> None:
    full = FULL_SIGNAL

    assert deliveries_of_ingress(json.dumps([full])) == [
        {"id": "m1", "type": "PlaceOrder", "destination": "orders"}
    ]
    assert deliveries_of_ingress(json.dumps([{"destination": "orders"}])) is None
    assert deliveries_of_ingress("oops") is None


@pytest.mark.parametrize(
    ("version", "read"), [(None, True), (1, True), (2, True), (3, False), ("2", False)]
)
def test_an_ingress_record_of_a_format_this_version_does_not_read_lists_no_deliveries(
    version: object, read: bool
) -> None:
    properties: dict[str, object] = {"sender": "http", "type": "PlaceOrder"}
    properties["outgoing"] = json.dumps([FULL_SIGNAL])
    if version is not None:
        properties["format"] = version

    row = ingress_row("ingress", "key-1", properties)

    # A newer record is counted as invalid (its deliveries unreadable), never misread
    expected = [{"id": "m1", "type": "PlaceOrder", "destination": "orders"}] if read else None
    assert row[-1] == expected


def signal(message_id: str, sender: str = "web") -> str:
    token = f"{sender}/{IN}/{ATTEMPT}/{message_id}"
    return Signal(
        message_id=message_id, attempt_id=ATTEMPT, token=token, partition_key="p"
    ).to_json()


def fields(row: tuple[object, ...]) -> dict[str, object]:
    return dict(zip(POISONED_COLUMNS, row, strict=True))


async def test_a_parked_signal_names_its_delivery_by_its_token() -> None:
    body = poison_body(signal(M1), Reason("orders", "ValueError: declined", 5, message_id=M1))

    row = fields(await poisoned_row("orders-poison", "orders", body))

    assert row == {
        "queue": "orders-poison",
        "endpoint": "orders",
        "message_id": M1,
        "message_type": None,
        "reason": "ValueError: declined",
        "sender": "web",
        "incoming_id": IN,
        "claimed_id": M1,
        "problem": None,
        "unread": None,
    }


async def test_a_message_the_host_moved_is_read_as_a_raw_signal() -> None:
    row = fields(await poisoned_row("orders-poison", "orders", signal(M3)))

    assert (row["message_id"], row["problem"]) == (M3, None)
    assert row["reason"] == "failed maxDequeueCount times (moved by the host)"


@pytest.mark.parametrize(
    "content",
    [
        '{"poison": 7}',
        '{"poison": {"reason": "x", "original": "../../etc/passwd"}}',
        '{"poison": {"reason": "x"}, "signal": 5}',
    ],
)
async def test_a_damaged_poison_message_is_unverifiable_and_names_no_delivery(
    content: str,
) -> None:
    row = fields(await poisoned_row("orders-poison", "orders", content))

    assert (row["message_id"], row["sender"], row["incoming_id"]) == (None, None, None)
    assert str(row["problem"]).startswith("unreadable wrapper")


@pytest.mark.parametrize(
    "raw",
    [
        "not a signal",
        json.dumps({"message_id": M1}),  # looks like one, is not
        json.dumps({"message_id": M1, "attempt_id": ATTEMPT, "token": "x", "partition_key": "p"}),
        signal(M3).replace(M3, M1, 1),  # its id no longer matches its token name
    ],
)
async def test_a_wrapper_naming_an_id_without_a_parseable_signal_covers_nothing(raw: str) -> None:
    body = poison_body(raw, Reason("orders", "x" * 5000, 1, message_id=M1))

    row = fields(await poisoned_row("orders-poison", "orders", body))

    assert row["message_id"] is None  # the reason's id is shown, never used
    assert row["claimed_id"] == M1
    assert str(row["problem"]).startswith("no parseable signal")
    assert len(str(row["reason"])) == 500


async def test_a_wrapper_that_disagrees_with_its_signal_is_unverifiable() -> None:
    other_id = poison_body(signal(M3), Reason("orders", "x", 1, message_id=M1))
    other_endpoint = poison_body(signal(M3), Reason("payments", "x", 1))

    by_id = fields(await poisoned_row("orders-poison", "orders", other_id))
    by_endpoint = fields(await poisoned_row("orders-poison", "orders", other_endpoint))

    assert "its wrapper names message" in str(by_id["problem"])
    assert "its wrapper names endpoint" in str(by_endpoint["problem"])


async def test_a_reference_is_verified_by_its_original_and_not_followed_elsewhere() -> None:
    account = MemoryStorageAccount(ManualClock())
    parked = account.blob_container("parked")
    await parked.create_if_missing()
    name = f"orders/{uuid.uuid4()}"
    await parked.upload(name, signal(M1).encode())
    missing = f"orders/{uuid.uuid4()}"
    big = f"orders/{uuid.uuid4()}"
    await parked.upload(big, b"x" * (MAX_ORIGINAL_BYTES + 1))

    def body(original: str) -> str:
        return reference_body(Reason("orders", "too large", 5), original)

    found = fields(await poisoned_row("orders-poison", "orders", body(name), parked))
    gone = fields(await poisoned_row("orders-poison", "orders", body(missing), parked))
    too_large = fields(await poisoned_row("orders-poison", "orders", body(big), parked))
    unread = fields(await poisoned_row("orders-poison", "orders", body(name)))

    assert (found["message_id"], found["sender"], found["problem"]) == (M1, "web", None)
    assert "is not in container parked" in str(gone["problem"])
    assert "too large for a signal" in str(too_large["problem"])
    assert (unread["message_id"], unread["problem"]) == (None, f"its original {name} was not read")


async def test_a_signal_covers_something_only_while_its_token_exists() -> None:
    account = MemoryStorageAccount(ManualClock())
    tokens = account.blob_container("tokens")
    await tokens.create_if_missing()
    kept = signal(M1)
    await tokens.upload(Signal.parse(kept).token, b"{}")
    body = poison_body(signal(M3), Reason("orders", "x", 1))

    found = fields(
        await poisoned_row(
            "orders-poison", "orders", poison_body(kept, Reason("orders", "x", 1)), None, tokens
        )
    )
    gone = fields(await poisoned_row("orders-poison", "orders", body, None, tokens))

    assert (found["message_id"], found["problem"]) == (M1, None)
    assert gone["message_id"] == M3  # its signal parses ...
    assert "is not in container tokens" in str(gone["problem"])  # ... but names no token


def summary(**counts: int) -> AuditSummary:
    inv = {k: counts.pop(k, 0) for k in ("duplicates", "lost", "ghosts", "invalid_rows")}
    return AuditSummary(
        verdict="PASS",
        as_of="2026-01-01T00:00:00+00:00",
        lost_after_seconds=300,
        audit_rows=0,
        ingress_rows=0,
        sent=0,
        processed=0,
        invariants=Invariants(**inv),
        **counts,  # type: ignore[arg-type]
    )


def test_next_steps_say_what_the_operator_does() -> None:
    assert next_steps(summary(in_flight=0)) == [NOTHING_TO_DO]
    [step] = next_steps(summary(in_flight=0, poisoned=2))
    assert "bus poison list" in step
    steps = next_steps(summary(in_flight=4, lost=1, duplicates=1))
    assert [s.split(" ", 1)[0] for s in steps] == ["1", "1", "4"]  # most urgent first
    assert "bug" in steps[0]
    assert "audit again later" in steps[-1]
