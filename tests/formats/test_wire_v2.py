"""This version reads format 2, the first with versions: the checked-in
``fixtures/wire_v2.json`` (``wire_v2.py`` says how it was made), and still reads format 1
(``test_wire_v1.py``, ``test_stored_v1.py``) as format 1."""

from __future__ import annotations

import json
from typing import Any

from shared.bus.envelope import Envelope, Signal
from shared.bus.formats import FIRST, metadata_version
from shared.bus.ingress import ingress_version
from shared.bus.poison import read_poison, unwrap
from shared.bus.records import OutboxRecord
from shared.bus.state.properties import decode_properties
from shared.stores.table import Entity
from tests.formats import stored_v1, wire_v1
from tests.formats.test_stored_v1 import entity
from tests.formats.wire_v2 import FIXTURE, examples

WRITTEN: dict[str, Any] = json.loads(FIXTURE.read_text())
FIRST_WIRE: dict[str, Any] = json.loads(wire_v1.FIXTURE.read_text())
FIRST_STORED: dict[str, Any] = json.loads(stored_v1.FIXTURE.read_text())


def test_this_version_writes_format_2_as_the_fixture_holds_it() -> None:
    assert examples() == WRITTEN


def test_format_1_is_what_this_version_writes_with_bus_wire_format_1() -> None:
    assert wire_v1.examples(FIRST) == FIRST_WIRE
    assert stored_v1.examples(FIRST) == FIRST_STORED


def test_envelopes_of_format_2_are_read_and_written_back_to_the_same_bytes() -> None:
    for name, text in WRITTEN["envelopes"].items():
        envelope = Envelope.from_bytes(text.encode())

        assert envelope.v == 2, name
        assert envelope.to_bytes() == text.encode()
        first = Envelope.from_bytes(FIRST_WIRE["envelopes"][name].encode())
        assert envelope.model_copy(update={"v": None}) == first


def test_signals_of_format_2_parse_as_their_first_format_does() -> None:
    for name, text in WRITTEN["signals"].items():
        signal = Signal.parse(text)
        first = Signal.parse(FIRST_WIRE["signals"][name])

        assert (signal.v, first.v) == (2, None)
        assert signal.model_copy(update={"v": None}) == first.model_copy(
            update={"token": signal.token, "envelope": signal.envelope}
        )
    hinted = Signal.parse(WRITTEN["signals"]["hinted"])
    assert hinted.bound_envelope_copy() == WRITTEN["envelopes"]["inline"]


def test_token_metadata_says_its_format() -> None:
    assert metadata_version(WRITTEN["token"]["metadata"], "token") == 2
    assert metadata_version(FIRST_WIRE["token"]["metadata"], "token") == 1


def test_poison_wrappers_of_format_2_unwrap_as_those_of_format_1() -> None:
    for form in ("inline", "reference", "excerpt"):
        second = unwrap(WRITTEN["poison"][form], "shipping")
        first = unwrap(FIRST_WIRE["poison"][form], "shipping")

        assert (second.reason, second.original, second.info) == (
            first.reason,
            first.original,
            first.info,
        )
        assert read_poison(WRITTEN["poison"][form]).newer is False
    assert unwrap(WRITTEN["poison"]["inline"], "shipping").signal == WRITTEN["signals"]["plain"]


def test_outbox_records_of_both_formats_are_read_from_the_table_and_from_postgresql() -> None:
    for status in ("claimed", "committed"):
        for fixture, version in ((WRITTEN, 2), (FIRST_STORED, 1)):
            row = entity(fixture["outbox"]["table"][status])
            from_sql = Entity(
                row.partition_key,
                row.row_key,
                decode_properties(fixture["outbox"]["postgres"][status]),
            )

            record = OutboxRecord.from_entity(row)

            assert record.format == version
            assert OutboxRecord.from_entity(from_sql) == record
            assert record.to_entity().properties == row.properties
        second = OutboxRecord.from_entity(entity(WRITTEN["outbox"]["table"][status]))
        first = OutboxRecord.from_entity(entity(FIRST_STORED["outbox"]["table"][status]))
        assert second.outgoing == first.outgoing
        assert (second.claim, second.abandoned) == (first.claim, first.abandoned)


def test_ingress_records_of_both_formats_are_read() -> None:
    for scope in ("scoped", "unscoped"):
        assert ingress_version(entity(WRITTEN["ingress"][scope])) == 2
        assert ingress_version(entity(FIRST_STORED["ingress"][scope])) == 1
