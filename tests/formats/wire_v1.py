"""The wire formats as this version writes them: one example of each record that outlives the
code that wrote it (token envelopes and metadata, queue signals, poison wrappers), for
``fixtures/wire_v1.json``.

The fixture is written once, by this version, and checked in: later versions must still read
it (``test_wire_v1.py``). When a format changes on purpose, add a ``wire_v2`` beside it rather
than rewriting this one. ``python -m tests.formats.wire_v1`` writes the file only if it is
absent (``--force`` rewrites it, which is only right before the first version that reads it
ships)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.bus.envelope import Envelope, PayloadReference, Signal, token_name
from shared.bus.formats import FIRST, metadata_fields, stated
from shared.bus.origin import Origin
from shared.bus.outgoing import DUE_METADATA, ORIGIN_METADATA, UNCLAIMED
from shared.bus.poison import Reason, excerpt_body, poison_body, reference_body
from shared.bus.records import OUTBOX_PREFIX
from tests.formats.written_once import write_once

FIXTURE = Path(__file__).parent / "fixtures" / "wire_v1.json"
SENDER = "orders"
INCOMING = "0b6f1d6e-4a55-4d6f-9a1e-2f3c4d5e6f70"
ATTEMPT = "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d"
OUT = "9c8b7a6f-5e4d-5c3b-9a2f-1e0d9c8b7a6f"
CREATED = datetime(2026, 11, 26, 4, 0, 0, tzinfo=UTC)
DUE = datetime(2026, 11, 27, 4, 0, 0, tzinfo=UTC)
REASON = Reason(
    "shipping",
    "MessageSchemaError: ShipOrder: field 'address' is required",
    5,
    error_type="MessageSchemaError",
    message_id=OUT,
    message_type="ShipOrder",
    enqueued_at="2026-11-26T04:00:00+00:00",
    failed_at="2026-11-26T04:00:41+00:00",
)


def _envelope(**fields: Any) -> Envelope:
    values: dict[str, Any] = {
        "id": OUT,
        "type": "ShipOrder",
        "kind": "command",
        "source": SENDER,
        "destination": "shipping",
        "partition_key": "order-17",
        "correlation_id": INCOMING,
        "causation_id": INCOMING,
        "created_at": CREATED,
        "headers": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        **fields,
    }
    return Envelope.model_validate(values)


def examples(version: int = FIRST) -> dict[str, Any]:
    """Every example, as text exactly as it is stored or sent in format ``version`` (since
    format versions exist: the fixture holds format 1, ``wire_v2.py`` writes format 2)."""
    v = stated(version)
    inline = _envelope(v=v, body={"order_id": "order-17", "lines": [{"sku": "é-1", "qty": 2}]})
    delayed = _envelope(v=v, body={"order_id": "order-17"}, deliver_at=DUE)
    shared = _envelope(
        v=v,
        kind="event",
        type="OrderPlaced",
        destination="loyalty",
        headers={"topic": "orderplaced"},
        payload=PayloadReference(digest="q" * 43, size=20480),
    )
    inline_bytes = inline.to_bytes()
    token = token_name(SENDER, INCOMING, ATTEMPT, OUT, inline_bytes)
    plain = Signal(v=v, message_id=OUT, attempt_id=ATTEMPT, token=token, partition_key="order-17")
    hinted = plain.model_copy(
        update={"etag": '"0x8DD0A1B2C3D4E5F"', "envelope": inline_bytes.decode()}
    )
    retried = plain.model_copy(update={"retry": 2})
    origin = Origin(SENDER, "order-17", f"{OUTBOX_PREFIX}{INCOMING}").encode()
    return {
        "envelopes": {
            "inline": inline_bytes.decode(),
            "delayed": delayed.to_bytes().decode(),
            "shared": shared.to_bytes().decode(),
        },
        "token": {
            "name": token,
            "metadata": {
                **UNCLAIMED,
                **metadata_fields(version),
                ORIGIN_METADATA: origin,
                DUE_METADATA: DUE.isoformat(),
            },
        },
        "signals": {
            "plain": plain.to_json(),
            "hinted": hinted.to_json(),
            "retried": retried.to_json(),
        },
        "poison": {
            "inline": poison_body(plain.to_json(), REASON, version=version),
            "reference": reference_body(REASON, f"shipping/{ATTEMPT}", version=version),
            "excerpt": excerpt_body("not a signal \u2028 at all", REASON, version=version),
        },
    }


def main(argv: list[str] | None = None) -> int:
    return write_once("tests.formats.wire_v1", __doc__, FIXTURE, examples, argv)


if __name__ == "__main__":
    raise SystemExit(main())
