"""What the audit takes from outside: the JSON text of Table Storage becomes typed deliveries
at that edge, and poison-queue contents are read without being trusted."""

from __future__ import annotations

import json
import uuid

import pytest

from shared.audit.next_steps import NOTHING_TO_DO, next_steps
from shared.audit.poisoned import poisoned_row
from shared.audit.rows import deliveries_of_audit, deliveries_of_ingress
from shared.audit.summary import AuditSummary, Invariants
from shared.bus.envelope import Signal
from shared.bus.poison import Reason, poison_body

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


def test_ingress_outgoing_keeps_only_what_names_a_delivery() -> None:
    full = {
        "destination": "orders",
        "message_id": "m1",
        "attempt_id": "a1",
        "token": "t",
        "partition_key": "p",
        "type": "PlaceOrder",
    }

    assert deliveries_of_ingress(json.dumps([full])) == [
        {"id": "m1", "type": "PlaceOrder", "destination": "orders"}
    ]
    assert deliveries_of_ingress(json.dumps([{"destination": "orders"}])) is None
    assert deliveries_of_ingress("oops") is None


def signal(message_id: str) -> str:
    token = f"web/{IN}/{ATTEMPT}/{message_id}"
    return Signal(
        message_id=message_id, attempt_id=ATTEMPT, token=token, partition_key="p"
    ).to_json()


def test_a_parked_signal_names_its_delivery_and_reason() -> None:
    body = poison_body(signal(M1), Reason("orders", "ValueError: declined", 5))

    assert poisoned_row("orders-poison", "orders", body) == (
        "orders-poison",
        "orders",
        M1,
        None,
        "ValueError: declined",
    )


def test_a_message_the_host_moved_is_read_as_a_raw_signal() -> None:
    row = poisoned_row("orders-poison", "orders", signal(M3))

    assert (row[2], row[4]) == (M3, "failed maxDequeueCount times (moved by the host)")


@pytest.mark.parametrize(
    "content",
    [
        '{"poison": 7}',
        '{"poison": {"reason": "x", "original": "../../etc/passwd"}}',
        '{"poison": {"reason": "x"}, "signal": 5}',
    ],
)
def test_a_damaged_poison_message_counts_but_names_no_delivery(content: str) -> None:
    row = poisoned_row("orders-poison", "orders", content)

    assert row[2] is None
    assert str(row[4]).startswith("unreadable poison message")


def test_a_reason_is_trusted_for_nothing_but_display_and_is_cut() -> None:
    body = poison_body("not a signal", Reason("orders", "x" * 5000, 1, message_id="m9"))

    row = poisoned_row("orders-poison", "orders", body)

    assert row[2] == "m9"  # the signal is unreadable; the reason's id still names it
    assert len(str(row[4])) == 500


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
