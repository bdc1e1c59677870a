"""What a large body costs is measured without copying it needlessly, and the bytes and digests
the bus stores stay exactly what earlier versions stored: token bytes (their digest is in the
token's name), ingress fingerprints (a retry within the window is compared with them),
state-based output fingerprints (a replay is compared with them), and the payload limit
counted in UTF-8 bytes to the byte."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest

from lab.bench.large_app import StoreDocument
from shared.bus.context import PendingOutput
from shared.bus.envelope import Envelope
from shared.bus.ingress import fingerprint
from shared.bus.messages import check_payload_size
from shared.bus.modes.state_based import fingerprint as output_fingerprint
from shared.errors import MessageTooLarge
from shared.stores.names import holds_lone_surrogate

# Over the digest's 1 MiB slices, with characters of 1 to 4 UTF-8 bytes and JSON escapes.
CONTENT = ('aé€😀"\\\n\u2028' * 150_000)[:1_100_000]


def envelope(body: dict[str, object], deliver_at: datetime | None = None) -> Envelope:
    return Envelope(
        id="m",
        type="StoreDocument",
        kind="command",
        source="http",
        destination="documents",
        partition_key="d",
        correlation_id="c",
        causation_id=None,
        created_at=datetime(2026, 11, 26, tzinfo=UTC),
        body=body,
        deliver_at=deliver_at,
    )


@pytest.mark.parametrize("deliver_at", [None, datetime(2026, 12, 1, tzinfo=UTC)])
def test_token_bytes_are_the_envelope_s_json_as_before(deliver_at: datetime | None) -> None:
    sent = envelope({"doc_id": "d", "content": CONTENT}, deliver_at)
    assert sent.to_bytes() == sent.model_dump_json().encode("utf-8")
    assert Envelope.from_bytes(sent.to_bytes()) == sent


@pytest.mark.parametrize("delay", [None, timedelta(seconds=90)])
def test_an_ingress_fingerprint_is_the_digest_earlier_versions_wrote(
    delay: timedelta | None,
) -> None:
    message = StoreDocument(doc_id="d", content=CONTENT)
    asked = {
        "type": "StoreDocument",
        "to": "documents",
        "body": message.model_dump(mode="json"),
        "delay": None if delay is None else delay.total_seconds(),
        "deliver_at": None,
    }
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    output = PendingOutput(message, "documents", {})
    assert fingerprint(output, delay, None) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_a_state_based_output_fingerprint_is_the_digest_earlier_versions_stored() -> None:
    message = StoreDocument(doc_id="d", content=CONTENT)
    output = PendingOutput(message, "archive", {"h": "é"})
    text = json.dumps(
        {"body": message.model_dump(mode="json"), "headers": {"h": "é"}}, sort_keys=True
    )
    [printed] = output_fingerprint([output])
    assert printed == {
        "type": "StoreDocument",
        "to": "archive",
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def test_the_payload_limit_counts_utf8_bytes_to_the_byte() -> None:
    message = StoreDocument(doc_id="d", content="é" * 1000)
    size = len(message.model_dump_json().encode("utf-8"))
    check_payload_size(message, size)
    with pytest.raises(MessageTooLarge, match=f"body is {size:,} bytes; the limit is {size - 1:,}"):
        check_payload_size(message, size - 1)


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        ({"a": ["x", {"b": "é😀"}]}, False),
        ({"a": "ok\udcff"}, True),
        ({"\ud800": 1}, True),  # in a key
        ([[[["\udfff"]]]], True),
        ("plain", False),
        ({"n": 1, "f": 1.5, "t": True, "z": None}, False),
    ],
)
def test_a_lone_surrogate_is_found_anywhere_in_parsed_json(value: object, holds: bool) -> None:
    assert holds_lone_surrogate(value) is holds
