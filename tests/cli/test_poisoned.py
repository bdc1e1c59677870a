"""Reading a poison message for ``bus poison list``: whatever its content, a record, never an
error; only what the content really says."""

from __future__ import annotations

import json

import pytest

from shared.bus.pipeline import poison_body
from shared.cli.poisoned import HOST_MOVED, MAX_FIELD_CHARS, PoisonRecord, read_poison

SIGNAL = json.dumps(
    {
        "message_id": "m-1",
        "attempt_id": "a-1",
        "token": "t",
        "partition_key": "p",
        "etag": '"0x1"',
        "envelope": json.dumps({"id": "m-1", "type": "PlaceOrder"}),
    }
)


def test_the_pipelines_wrapper_gives_reason_endpoint_count_id_and_type() -> None:
    record = read_poison(poison_body("orders", SIGNAL, "schema: amount missing", 3))
    assert record == PoisonRecord(
        reason="schema: amount missing",
        endpoint="orders",
        message_type="PlaceOrder",
        message_id="m-1",
        dequeue_count=3,
    )


def test_a_signal_moved_by_the_host_gives_its_id_and_the_type_its_envelope_copy_names() -> None:
    assert read_poison(SIGNAL) == PoisonRecord(HOST_MOVED, None, "PlaceOrder", "m-1")


def test_the_last_error_and_failure_times_are_read_when_the_wrapper_carries_them() -> None:
    body = json.dumps(
        {
            "poison": {
                "reason": "handler failed",
                "error": {"type": "KeyError", "message_type": "Pay", "message_id": "m-9"},
                "first_failure": "2026-01-01T00:00:00+00:00",
                "last_failure": "2026-01-01T00:05:00+00:00",
            },
            "reference": "parked/m-9",
        }
    )
    record = read_poison(body)
    assert (record.message_type, record.message_id) == ("Pay", "m-9")
    assert (record.first_failure, record.last_failure) == (
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:05:00+00:00",
    )


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not json",
        "[1, 2]",
        "null",
        '{"poison": "a string"}',
        '{"poison": {"reason": ["list"], "dequeue_count": true, "endpoint": {}}, "signal": 7}',
        '{"poison": {"dequeue_count": "5", "message_id": null}, "signal": "{not json"}',
        '{"message_id": ["x"], "envelope": "[]"}',
        "\x00\x1b[2J" * 1000,
    ],
)
def test_anything_else_is_a_record_with_only_what_it_really_says(body: str) -> None:
    record = read_poison(body)
    assert isinstance(record.reason, str)
    assert record.dequeue_count is None
    assert record.message_id is None
    assert record.endpoint is None


def test_text_from_the_message_is_cut_to_a_bounded_length() -> None:
    body = json.dumps({"poison": {"reason": "x" * 100_000, "message_id": "y" * 100_000}})
    record = read_poison(body)
    assert len(record.reason) == len(record.message_id or "") == MAX_FIELD_CHARS
