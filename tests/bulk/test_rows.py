"""Job names, idempotency keys and the checks of each row, as hostile input would probe
them (no Spark, no storage: what a task decides before it sends anything)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.app_settings import MAX_PAYLOAD
from shared.bulk.keys import check_job_name, idempotency_key, row_key_text
from shared.bulk.rows import Planned, Rejected, Target, body_columns, check_target, plan_row
from shared.bus import BusApp, Message
from shared.errors import InvalidName
from shared.http_ingress import BadRequest
from shared.runtime import bus_config
from shared.sample.app import FireAt, PlaceOrder
from shared.sample.app import app as sample_app
from tests.bus.evolving import Dispatch

FIRE = check_target(sample_app, "FireAt", "shootingrange")


def plan(row: dict[str, Any], job: str = "job-1", target: Target = FIRE) -> Planned | Rejected:
    columns = tuple(target.fields)
    return plan_row(
        sample_app, bus_config(), target, job, row, key_column="game_id", body_columns=columns
    )


@pytest.mark.parametrize("name", ["a", "backfill-2026.11_23", "9" * 64])
def test_job_names_of_letters_digits_dots_dashes_underscores_are_accepted(name: str) -> None:
    assert check_job_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "a:b", "-a", ".a", "a b", "a/b", "é", "a\n", "9" * 65, "a\x00"]
)
def test_other_job_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidName, match="invalid job name"):
        check_job_name(name)


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a-b", "c"), ("a", "b-c")), (("a", "b:c"), ("a", "b:c ")), (("a", "1"), ("b", "1"))],
)
def test_two_jobs_or_two_keys_never_share_an_idempotency_key(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    assert idempotency_key(*first) != idempotency_key(*second)


def test_the_key_reads_back_as_its_job_and_row() -> None:
    key = idempotency_key("reprice", "order:17")
    assert key == "reprice:order:17"
    assert key.split(":", 1) == ["reprice", "order:17"]  # a job name holds no ':'


@pytest.mark.parametrize(
    ("value", "text"), [("k-1", "k-1"), (42, "42"), (-7, "-7"), (" padded ", " padded ")]
)
def test_row_keys_are_text_or_integers(value: object, text: str) -> None:
    assert row_key_text(value) == text


@pytest.mark.parametrize("value", [None, "", True, 1.5, float("nan"), {"a": 1}, [1], b"k"])
def test_other_row_keys_are_refused(value: object) -> None:
    with pytest.raises(InvalidName):
        row_key_text(value)


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("a#b", "contains one of"),
        ("a?b", "contains one of"),
        ("a\\b", "contains one of"),
        ("a\x7fb", "control character"),
        ("a\u0085b", "control character"),
        ("\udcff", "not valid Unicode"),
        ("k" * 195, "at most 194 fit beside job 'job-1'"),
    ],
)
def test_a_row_whose_key_cannot_be_an_idempotency_key_is_rejected(key: str, why: str) -> None:
    outcome = plan({"game_id": key, "position": 1})
    assert isinstance(outcome, Rejected)
    assert why in outcome.reason
    outcome.row.encode("utf-8")  # always writable, whatever the row held


def test_a_good_row_becomes_its_message_with_its_key() -> None:
    outcome = plan({"game_id": "g-1", "position": "7"})  # text converted as the schema says
    assert isinstance(outcome, Planned)
    assert outcome.sent.message == FireAt(game_id="g-1", position=7)
    assert (outcome.key, outcome.sent.to) == ("job-1:g-1", "shootingrange")


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"game_id": "g", "position": 10}, "invalid FireAt: position"),
        ({"game_id": "g", "position": "ten"}, "invalid FireAt: position"),
        ({"game_id": "g", "position": None}, "position: Field required"),
        ({"game_id": "g", "position": [1]}, "invalid FireAt: position"),
    ],
)
def test_a_row_whose_fields_the_type_refuses_is_rejected_with_the_schema_s_words(
    row: dict[str, Any], why: str
) -> None:
    outcome = plan(row)
    assert isinstance(outcome, Rejected)
    assert why in outcome.reason
    assert outcome.row_key == "g"


def test_a_row_too_large_for_a_message_is_rejected() -> None:
    order = check_target(sample_app, "PlaceOrder", None)
    row = {"order_id": "o-1", "customer": "x" * MAX_PAYLOAD.default, "amount_cents": 5}
    outcome = plan_row(
        sample_app,
        bus_config(),
        order,
        "job",
        row,
        key_column="order_id",
        body_columns=order.fields,
    )
    assert isinstance(outcome, Rejected)
    assert "the limit is 16,777,216 bytes (BUS_MAX_PAYLOAD_BYTES)" in outcome.reason
    assert len(outcome.row) <= 10_000


def test_the_target_is_checked_once_for_the_job() -> None:
    assert check_target(sample_app, "PlaceOrder", None).to == "orders"
    assert check_target(sample_app, "OrderPlaced", None).to is None  # an event: published
    assert set(check_target(sample_app, "PlaceOrder", None).fields) == set(PlaceOrder.model_fields)
    with pytest.raises(BadRequest, match="unknown message type 'Nope'"):
        check_target(sample_app, "Nope", None)
    with pytest.raises(BadRequest, match="does not handle FireAt"):
        check_target(sample_app, "FireAt", "orders")
    with pytest.raises(BadRequest, match="is an event"):
        check_target(sample_app, "OrderPlaced", "loyalty")


def test_body_columns_must_be_in_the_input_and_fields_of_the_type() -> None:
    assert body_columns(FIRE, ["game_id", "position"], "game_id") == ("game_id", "position")
    chosen = body_columns(FIRE, ["game_id", "position", "note"], "game_id", ["game_id", "position"])
    assert chosen == ("game_id", "position")
    with pytest.raises(BadRequest, match="not fields of FireAt"):
        body_columns(FIRE, ["game_id", "position", "note"], "game_id")
    with pytest.raises(BadRequest, match="no column 'id'"):
        body_columns(FIRE, ["game_id", "position"], "id")
    with pytest.raises(BadRequest, match=r"no columns \['nope'\]"):
        body_columns(FIRE, ["game_id", "position"], "game_id", ["nope"])


class Ping(Message):
    """Neither a Command nor an Event: an endpoint may handle it, a client cannot send it."""

    n: int


def test_a_type_that_is_neither_command_nor_event_is_refused_before_any_row() -> None:
    app = BusApp()
    app.endpoint("pings").handles(Ping)(lambda ctx, message: None)
    # Checked with the job's target, not found by each task as it sends (a failed job).
    with pytest.raises(BadRequest, match="Ping is neither a Command nor an Event"):
        check_target(app, "Ping", None)


def test_a_job_may_name_its_type_by_a_former_name() -> None:
    """A job written before a rename keeps working: the rows become the renamed type."""
    app = BusApp()
    app.endpoint("dock").handles(Dispatch)(lambda ctx, message: None)
    target = check_target(app, "Ship", None)
    assert (target.to, target.fields) == ("dock", ("order", "address"))
    planned = plan_row(
        app,
        bus_config(),
        target,
        "renamed",
        {"order": "o1", "address": "Quay 1"},
        key_column="order",
        body_columns=("order", "address"),
    )
    assert isinstance(planned, Planned)
    assert planned.sent.message == Dispatch(order="o1", address="Quay 1")
    assert planned.sent.to == "dock"
