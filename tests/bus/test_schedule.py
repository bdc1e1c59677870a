"""Due times of delayed messages, and the envelope form that carries them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from shared.bus.envelope import Envelope
from shared.bus.schedule import due_time
from shared.clock import to_datetime
from shared.errors import InvalidValue


def test_due_times_are_checked() -> None:
    now = to_datetime(1_700_000_000)
    assert due_time(now) is None
    assert due_time(now, timedelta(0)) is None
    assert due_time(now, timedelta(seconds=5)) == now + timedelta(seconds=5)
    assert due_time(now, deliver_at=now - timedelta(seconds=1)) is None
    with pytest.raises(InvalidValue, match="not both"):
        due_time(now, timedelta(seconds=1), now)
    with pytest.raises(InvalidValue, match="between 0 and 3650 days"):
        due_time(now, timedelta(seconds=-1))
    with pytest.raises(InvalidValue, match="between 0 and 3650 days"):
        due_time(now, timedelta(days=3651))
    with pytest.raises(InvalidValue, match="at most 3650 days away"):
        due_time(now, deliver_at=now + timedelta(days=3651))
    with pytest.raises(InvalidValue, match="time zone"):
        due_time(now, deliver_at=now.replace(tzinfo=None) + timedelta(days=1))


def test_an_undelayed_envelope_serialises_as_before() -> None:
    envelope = Envelope(
        id="i",
        type="T",
        kind="command",
        source="s",
        destination="d",
        partition_key="p",
        correlation_id="c",
        causation_id=None,
        created_at=to_datetime(0),
        body={},
    )
    assert "deliver_at" not in json.loads(envelope.to_bytes())
    due = envelope.model_copy(update={"deliver_at": to_datetime(5)})
    assert Envelope.from_bytes(due.to_bytes()).deliver_at == to_datetime(5)
