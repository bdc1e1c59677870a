"""Texts spread across Table Storage properties (``shared.stores.spread``): the layout, its
boundaries, and parts written by someone else."""

from __future__ import annotations

import pytest

from shared.errors import CorruptRecord
from shared.stores.names import MAX_PROPERTY_BYTES
from shared.stores.spread import gathered, gathered_properties, spread
from shared.stores.table import Entity, TableValue, normalise_entity

ONE_PROPERTY_ASCII = MAX_PROPERTY_BYTES // 2


def entity(**properties: TableValue) -> Entity:
    return Entity("p", "r", properties, "etag-1")


@pytest.mark.parametrize(
    "text",
    [
        "a" * (ONE_PROPERTY_ASCII + 1),
        "b" * (5 * ONE_PROPERTY_ASCII + 17),
        "\u00e9" * 40_000,  # two bytes each in UTF-16, beyond one property
        "\U0001f600x" * 20_000,  # surrogate pairs: 6 bytes per two code points
    ],
    ids=["one-past", "five-and-a-bit", "accents", "astral"],
)
def test_a_long_text_is_spread_into_parts_a_table_accepts_and_joined_back(text: str) -> None:
    written = spread(entity(data=text, type="Counter", n=3))

    normalise_entity(written)  # every part within Table Storage's limits
    assert written["data"] != text
    assert written["type"] == "Counter"
    assert written.etag == "etag-1"
    back = gathered(written)
    assert back.properties == {"data": text, "type": "Counter", "n": 3}


@pytest.mark.parametrize(
    "text",
    [
        "a" * ONE_PROPERTY_ASCII,
        "\u00e9" * ONE_PROPERTY_ASCII,
        "\U0001f600" * (ONE_PROPERTY_ASCII // 2),
    ],
    ids=["ascii", "accents", "astral"],
)
def test_a_text_that_fits_one_property_keeps_the_layout_earlier_versions_read(text: str) -> None:
    row = entity(data=text)

    assert spread(row) is row
    assert gathered(row) is row


def test_parts_are_named_after_the_property_with_their_count() -> None:
    written = spread(entity(data="z" * (2 * ONE_PROPERTY_ASCII + 1)))

    assert sorted(written.properties) == ["data", "data__1", "data__2", "data__parts"]
    assert written["data__parts"] == 3
    assert written["data__2"] == "z"


@pytest.mark.parametrize(
    ("properties", "problem"),
    [
        ({"data": "a", "data__parts": 3, "data__1": "b"}, "missing some of its 3 parts"),
        ({"data": "a", "data__parts": 2, "data__1": 7}, "missing some of its 2 parts"),
        ({"data__parts": 2, "data__1": "b"}, "missing some of its 2 parts"),
        ({"data": "a", "data__parts": "2", "data__1": "b"}, "not a part count"),
        ({"data": "a", "data__parts": True, "data__1": "b"}, "not a part count"),
        ({"data": "a", "data__parts": 10**9}, "not a part count"),
        ({"data": "a", "data__parts": 1}, "not a part count"),
    ],
    ids=[
        "part-missing",
        "part-not-text",
        "first-missing",
        "count-text",
        "count-bool",
        "huge",
        "one",
    ],
)
def test_parts_that_do_not_agree_are_a_corrupt_record_naming_the_row(
    properties: dict[str, TableValue], problem: str
) -> None:
    with pytest.raises(CorruptRecord, match=problem) as raised:
        gathered(entity(**properties))
    assert "'p'/'r'" in str(raised.value)


def test_the_sdks_own_entities_are_joined_too() -> None:
    """The audit reads tables with the SDK, whose entities are dicts with system fields."""
    written = spread(entity(caused="[" + "1," * ONE_PROPERTY_ASCII + "1]"))
    sdk_entity = {"PartitionKey": "p", "RowKey": "r", **written.properties}

    joined = gathered_properties(sdk_entity, "audit row")

    assert joined["caused"] == "[" + "1," * ONE_PROPERTY_ASCII + "1]"
    assert not [name for name in joined if "__" in name]
