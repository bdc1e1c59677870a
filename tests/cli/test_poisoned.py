"""Reading a poison message for ``bus poison list``: whatever its content, a record, never an
error; only what the content really says."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.bus.poison import (
    HOST_MOVED_REASON,
    MAX_REASON_CHARS,
    PoisonRecord,
    Reason,
    error_reason,
    excerpt_body,
    poison_body,
    read_poison,
)

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


def test_a_refusal_parked_by_the_pipeline_gives_reason_endpoint_tries_id_and_type() -> None:
    reason = Reason("orders", "schema: amount missing", 1, error_type="ValidationError")
    record = read_poison(poison_body(SIGNAL, reason))
    assert record == PoisonRecord(
        reason="schema: amount missing",
        endpoint="orders",
        message_type="PlaceOrder",  # the wrapper names none here: the signal's envelope copy
        message_id="m-1",
        dequeue_count=1,
        error_type="ValidationError",
    )


def test_the_last_error_of_the_last_try_is_read_from_the_wrapper_not_the_signal() -> None:
    reason = error_reason(
        "payments",
        KeyError("card"),
        5,
        message_id="m-9",
        message_type="ChargePayment",
        enqueued_at=datetime(2026, 11, 23, 15, 50, 1, 999, tzinfo=UTC),
        failed_at=datetime(2026, 11, 23, 16, 50, 37, tzinfo=timezone(timedelta(hours=1))),
    )
    record = read_poison(poison_body('{"message_id": "other"}', reason))
    assert record == PoisonRecord(
        reason="KeyError: 'card'",
        endpoint="payments",
        message_type="ChargePayment",
        message_id="m-9",
        dequeue_count=5,
        error_type="KeyError",
        enqueued_at="2026-11-23T15:50:01+00:00",
        failed_at="2026-11-23T15:50:37+00:00",  # kept in UTC
    )


def test_a_failure_time_written_in_another_zone_is_read_in_utc() -> None:
    info = {"reason": "x", "failed_at": "2026-11-23T17:50:37.5+02:00"}
    record = read_poison(json.dumps({"poison": info, "signal": SIGNAL}))
    assert record.failed_at == "2026-11-23T15:50:37+00:00"


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2026-11-23T15:50:37",  # no zone: which time it means is unknown
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
        "2026-11-23T15:50:37+00:00" + " " * 40,
        "9" * 5000,
        12,
        None,
        True,
        ["2026-11-23T15:50:37+00:00"],
        {"at": "2026-11-23T15:50:37+00:00"},
    ],
)
def test_failure_times_that_are_not_times_with_a_zone_are_left_out(value: object) -> None:
    info = {"reason": "x", "enqueued_at": value, "failed_at": value}
    record = read_poison(json.dumps({"poison": info, "signal": SIGNAL}))
    assert (record.enqueued_at, record.failed_at) == (None, None)
    assert record.reason == "x"


def test_a_message_parked_by_reference_names_its_original() -> None:
    reason = Reason("orders", "signal is 70000 characters", 1, message_id="m-2")
    body = json.dumps({"poison": {**reason.as_json(), "original": "orders/1234"}})
    record = read_poison(body)
    assert (record.message_id, record.dequeue_count, record.original) == ("m-2", 1, "orders/1234")
    assert record.reason == "signal is 70000 characters"
    assert record.message_type is None


def test_a_signal_moved_by_the_host_gives_its_id_and_the_type_its_envelope_copy_names() -> None:
    assert read_poison(SIGNAL) == PoisonRecord(HOST_MOVED_REASON, None, "PlaceOrder", "m-1")


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
        "[" * 100_000,  # deeper than the JSON parser goes
        '{"poison": {}, "signal": "' + "[" * 100_000 + '"}',
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
    assert len(record.reason) == len(record.message_id or "") == MAX_REASON_CHARS


def test_an_excerpt_names_the_digest_and_length_of_the_text_it_stands_for() -> None:
    text = "!" * 60_000
    reason = Reason("orders", "signal is 60000 characters", 1, error_type="MalformedSignal")
    record = read_poison(excerpt_body(text, reason))
    assert record == PoisonRecord(
        reason="signal is 60000 characters",
        endpoint="orders",
        dequeue_count=1,
        error_type="MalformedSignal",
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        chars=60_000,
    )
    forged = json.dumps({"poison": {"reason": "r", "sha256": "<b>not hex</b>", "chars": "many"}})
    assert (read_poison(forged).sha256, read_poison(forged).chars) == (None, None)
