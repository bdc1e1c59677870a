"""Names that come from outside are matched whole: a trailing newline or other suffix that a
'$'-anchored pattern would let through is refused by every check."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shared.bus.envelope import Signal
from shared.bus.messages import check_topic
from shared.errors import InvalidName, MalformedSignal
from shared.stores.names import (
    check_container_name,
    check_metadata,
    check_queue_name,
    check_table_name,
)

_ID = "0f0e0d0c-0b0a-4908-8706-050403020100"


@pytest.mark.parametrize(
    ("check", "good"),
    [
        (check_queue_name, "orders"),
        (check_container_name, "tokens"),
        (check_table_name, "orders"),
        (check_topic, "orderplaced"),
        (lambda name: check_metadata({name: "x"}), "claim"),
    ],
)
@pytest.mark.parametrize("suffix", ["\n", "\r\n", " ", "\x00"])
def test_a_good_name_with_a_suffix_is_refused(
    check: Callable[[str], object], good: str, suffix: str
) -> None:
    check(good)
    with pytest.raises(InvalidName):
        check(good + suffix)


@pytest.mark.parametrize("suffix", ["\n", "/..", "/x"])
def test_a_signal_whose_token_name_has_a_suffix_is_malformed(suffix: str) -> None:
    token = f"orders/{_ID}/{_ID}/{_ID}"
    Signal.parse(Signal(message_id=_ID, attempt_id=_ID, token=token, partition_key="p").to_json())
    raw = Signal(message_id=_ID, attempt_id=_ID, token=token + suffix, partition_key="p")
    with pytest.raises(MalformedSignal, match="outside the token naming scheme"):
        Signal.parse(raw.to_json())
