"""This version reads what it wrote before any format carried a version: the checked-in
``fixtures/wire_v1.json`` (``wire_v1.py`` says how it was made). A later version that changes
a format keeps this file and these tests, and adds its own beside them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.bus.envelope import TOKEN_NAME, Envelope, Signal, envelope_digest
from shared.bus.origin import Origin
from shared.bus.poison import unwrap
from shared.bus.records import OUTBOX_PREFIX
from tests.formats.wire_v1 import ATTEMPT, DUE, FIXTURE, INCOMING, OUT, SENDER, examples

WRITTEN: dict[str, Any] = json.loads(FIXTURE.read_text())


def test_this_version_still_writes_the_first_formats_byte_for_byte() -> None:
    """Fails when a format changes: then add a second fixture, and keep reading this one."""
    assert examples() == WRITTEN


@pytest.mark.parametrize("name", ["inline", "delayed", "shared"])
def test_each_envelope_is_read_and_written_back_to_the_same_bytes(name: str) -> None:
    text = WRITTEN["envelopes"][name]

    envelope = Envelope.from_bytes(text.encode())

    assert (envelope.id, envelope.source, envelope.causation_id) == (OUT, SENDER, INCOMING)
    assert envelope.to_bytes() == text.encode()


def test_the_envelopes_carry_their_body_due_time_or_payload_reference() -> None:
    inline, delayed, shared = (
        Envelope.from_bytes(WRITTEN["envelopes"][n].encode())
        for n in ("inline", "delayed", "shared")
    )

    assert inline.body == {"order_id": "order-17", "lines": [{"sku": "é-1", "qty": 2}]}
    assert (inline.deliver_at, inline.payload) == (None, None)
    assert delayed.deliver_at == DUE
    assert shared.body is None
    assert shared.payload is not None
    assert (shared.payload.digest, shared.payload.size) == ("q" * 43, 20480)


def test_the_token_name_binds_the_inline_envelope_and_its_metadata_names_its_origin() -> None:
    token = WRITTEN["token"]
    match = TOKEN_NAME.fullmatch(token["name"])

    assert match is not None
    assert (match["sender"], match["incoming"], match["attempt"], match["out"]) == (
        SENDER,
        INCOMING,
        ATTEMPT,
        OUT,
    )
    assert match["digest"] == envelope_digest(WRITTEN["envelopes"]["inline"].encode())
    metadata = token["metadata"]
    assert metadata["claim"] == ""
    origin = Origin.decode(metadata["origin"])
    assert origin == Origin(SENDER, "order-17", f"{OUTBOX_PREFIX}{INCOMING}")
    assert metadata["due"] == DUE.isoformat()


def test_each_signal_parses_with_its_hints_and_retry_count() -> None:
    plain, hinted, retried = (
        Signal.parse(WRITTEN["signals"][n]) for n in ("plain", "hinted", "retried")
    )

    assert (plain.message_id, plain.attempt_id, plain.token) == (
        OUT,
        ATTEMPT,
        WRITTEN["token"]["name"],
    )
    assert plain.bound_envelope_copy() is None
    assert hinted.bound_envelope_copy() == WRITTEN["envelopes"]["inline"]
    assert retried.retry == 2


def test_each_poison_wrapper_gives_back_its_original_and_reason() -> None:
    inline = unwrap(WRITTEN["poison"]["inline"], "shipping")
    reference = unwrap(WRITTEN["poison"]["reference"], "shipping")
    excerpt = unwrap(WRITTEN["poison"]["excerpt"], "shipping")

    assert inline.signal == WRITTEN["signals"]["plain"]
    assert inline.message_id == OUT
    assert inline.message_type == "ShipOrder"
    assert "field 'address' is required" in inline.reason
    assert (reference.signal, reference.original) == (None, f"shipping/{ATTEMPT}")
    assert excerpt.excerpt_only
    assert excerpt.info.get("failed_at") == "2026-11-26T04:00:41+00:00"
