"""Untrusted input to the local provider: each bad request gets a clear 4xx, saves nothing
under its key, and the provider keeps serving."""

from __future__ import annotations

import pytest

from lab.provider.server import MAX_BODY_BYTES
from tests.provider.client import Client, charge


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "a JSON object"),
        (b'"charge"', "a JSON object"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_400(
    client: Client, body: bytes, says: str
) -> None:
    refused = await client.call("charge", body, "k1")
    assert refused.status == 400
    assert says in refused.body["error"]["message"]
    assert (await client.call("charge", charge(), "k1")).status == 200  # the key is still free


@pytest.mark.parametrize(
    "body",
    [
        {"order": "o1", "amount": "1200", "currency": "eur"},
        {"order": "o1", "amount": True, "currency": "eur"},
        {"order": "o1", "amount": -5, "currency": "eur"},
        {"order": "", "amount": 5, "currency": "eur"},
        {"order": "o1", "amount": 5, "currency": "euros"},
        {"order": "o1", "amount": 5, "currency": "eur", "capture\n": False},
        {"amount": 5, "currency": "eur"},
    ],
)
async def test_a_charge_with_bad_fields_is_400_naming_them_on_one_line(
    client: Client, body: dict[str, object]
) -> None:
    refused = await client.call("charge", body, "k1")
    assert refused.status == 400
    assert "\n" not in refused.body["error"]["message"]
    assert client.keys() == []
    assert (await client.call("charge", charge(), "k1")).status == 200


async def test_a_body_over_the_limit_is_413(client: Client) -> None:
    huge = b'{"order": "' + b"x" * MAX_BODY_BYTES + b'"}'
    refused = await client.call("charge", huge, "k1")
    assert refused.status == 413
    assert client.keys() == []


async def test_bad_fault_settings_are_400_and_change_nothing(client: Client) -> None:
    refused = await client.control({"late": {"rate": 2.0}})
    unknown = await client.control({"explode": {"count": 1}})
    assert (refused.status, unknown.status) == (400, 400)
    assert (await client.call("charge", charge(), "k1")).status == 200
