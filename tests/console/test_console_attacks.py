"""The console attacked over real HTTP: missing, wrong and leaked credentials, forged actions,
GETs that try to change something, paths that try to leave the static folder or reach other
queues, oversized bodies, hostile values, a read-only console, and a foreign Host header.
After every refused action nothing has changed in storage."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bus.poison import Reason, poison_body
from shared.console.api import MAX_BODY_BYTES
from shared.console.headers import CONTENT_SECURITY_POLICY
from shared.resources import poison_queue
from tests.console.parking import clear, park, parked_content, waiting
from tests.console.running import Answer, RunningConsole, console_environ, running_console

pytestmark = pytest.mark.azurite

API_GETS = (
    "/api/session",
    "/api/overview",
    "/api/failed",
    "/api/failed/groups",
    "/api/actions",
    "/api/saga?endpoint=orders&instance=o-1",
)
HOSTILE = '<script>alert("x")</script>\'\x1b[2J\r\nbus: forged\u2028\x00' + "é" * 5000


@pytest.fixture
def parked(emulator: AzuriteEndpoints, console: RunningConsole) -> RunningConsole:
    """The console, with ten messages parked in payments."""
    clear(emulator, "payments")
    park(emulator, [parked_content(i) for i in range(10)])
    return console


def raw(
    console: RunningConsole,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> Answer:
    """A request sent as written: the path is not normalised or quoted by a client library."""
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_host="host" in {k.lower() for k in headers or {}})
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return Answer(answer.status, dict(answer.getheaders()), answer.read())
    finally:
        connection.close()


def bearer(console: RunningConsole) -> dict[str, str]:
    return {"Authorization": f"Bearer {console.token}"}


def assert_secured(answer: Answer) -> None:
    assert answer.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Referrer-Policy"] == "no-referrer"


def assert_refused(answer: Answer, status: int) -> None:
    assert answer.status == status, answer.body
    assert answer.headers["Content-Type"].startswith("application/json")
    assert isinstance(answer.json()["error"], str)
    assert_secured(answer)


# --- Credentials ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", API_GETS)
def test_no_token_or_a_wrong_one_is_refused_everywhere(console: RunningConsole, path: str) -> None:
    assert_refused(console.get(path, token=None), 401)
    wrong = ("y" if console.token.startswith("x") else "x") + console.token[1:]
    assert_refused(console.get(path, token=wrong), 401)
    assert_refused(raw(console, "GET", path, headers={"Authorization": "Bearer "}), 401)
    assert_refused(raw(console, "GET", path, headers={"Authorization": "Basic YWRhOmFkYQ=="}), 401)


def test_a_token_in_the_address_is_refused_even_beside_the_right_header(
    console: RunningConsole,
) -> None:
    leaked = console.get(f"/api/session?token={console.token}")

    assert_refused(leaked, 401)
    assert "Authorization header" in leaked.json()["error"]


def test_actions_without_a_token_change_nothing(
    parked: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    csrf = parked.session()["csrf"]
    body = {"endpoint": "payments", "type": "ChargePayment", "reason": "x"}

    for path in ("/api/replay", "/api/discard"):
        assert_refused(parked.post(path, body, csrf=csrf, token=None), 401)

    assert waiting(emulator, poison_queue("payments")) == 10


# --- Forged actions --------------------------------------------------------------------------


def test_forged_actions_are_refused_and_change_nothing(
    parked: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    body = {"endpoint": "payments", "type": "ChargePayment", "reason": "forged"}
    json_body = json.dumps(body).encode()
    csrf = parked.session()["csrf"]
    journaled = parked.get("/api/actions").json()["total"]
    form = b"endpoint=payments&type=ChargePayment&reason=forged"
    attempts = [
        parked.post("/api/discard", body, csrf=None),
        parked.post("/api/discard", body, csrf="0" * 64),
        parked.post("/api/replay", {"endpoint": "payments", "ids": ["a"]}, csrf=csrf[:-1] + "x"),
        parked.post("/api/discard", body, headers={"Origin": "https://evil.example"}),
        parked.post("/api/discard", body, headers={"Origin": "null"}),
        parked.request(
            "POST",
            "/api/discard",
            body=form,
            headers={"Content-Type": "application/x-www-form-urlencoded", "X-Console-CSRF": csrf},
        ),
        parked.request(
            "POST",
            "/api/discard",
            body=json_body,
            headers={"Content-Type": "text/plain", "X-Console-CSRF": csrf},
        ),
    ]

    for answer in attempts:
        assert_refused(answer, 403)
    assert waiting(emulator, poison_queue("payments")) == 10
    assert parked.get("/api/actions").json()["total"] == journaled


def test_an_action_from_the_consoles_own_origin_is_taken(
    parked: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    own = f"http://127.0.0.1:{parked.port}"
    body = {"endpoint": "payments", "type": "ChargePayment", "error_type": "KeyError"}

    answer = parked.post("/api/replay", body, headers={"Origin": own})

    assert answer.status == 200, answer.body
    assert answer.json()["replayed"] == 1  # m-0: ChargePayment, KeyError


@pytest.mark.parametrize(
    "path",
    [
        "/api/replay?endpoint=payments&type=ChargePayment",
        "/api/discard?endpoint=payments&type=ChargePayment&reason=x",
    ],
)
def test_gets_that_try_to_act_are_refused_and_change_nothing(
    parked: RunningConsole, emulator: AzuriteEndpoints, path: str
) -> None:
    assert_refused(parked.get(path), 405)
    assert_refused(parked.request("DELETE", "/api/failed"), 405)
    assert waiting(emulator, poison_queue("payments")) == 10


# --- Paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/../../../etc/passwd",
        "/static/../api.py",
        "/%2e%2e/%2e%2e/shared/console/api.py",
        "/console.js/../../api.py",
        "/..%2f..%2fpyproject.toml",
        "/index.html%00.js",
        "/static/index.html",
    ],
)
def test_static_paths_never_leave_the_page_files(console: RunningConsole, path: str) -> None:
    answer = raw(console, "GET", path)

    assert answer.status in (400, 404)
    assert b"import" not in answer.body
    assert b"root:" not in answer.body


@pytest.mark.parametrize(
    "path",
    [
        "/api/failed/..%2F..%2Ftokens/x",
        "/api/failed/payments/..%2F..%2Fx",
        "/api/failed/payments-poison/abc",
        "/api/failed/payments%0a/abc",
        "/api/failed/payments/abc%0d%0aSet-Cookie:%20x=1",
        "/api/failed/payments/" + "a" * 200,
        "/api/failed/payments/a/b",
        "/api/failed/nosuch/abc",
    ],
)
def test_message_paths_outside_the_apps_queues_are_404(console: RunningConsole, path: str) -> None:
    answer = raw(console, "GET", path, headers=bearer(console))

    assert_refused(answer, 404)
    assert "Set-Cookie" not in answer.headers


def test_hostile_selections_never_reach_storage(parked: RunningConsole) -> None:
    for body in (
        {"endpoint": "../tokens", "ids": ["a"]},
        {"endpoint": "payments-poison", "ids": ["a"]},
        {"endpoint": "payments", "ids": ["../../x"]},
        {"endpoint": "payments", "ids": ["a\r\nb"]},
        {"endpoint": "payments", "ids": "a"},
        {"endpoint": "payments", "ids": []},
        {"endpoint": "payments", "ids": ["a"], "type": "T"},
        {"endpoint": "payments", "type": 7},
        {"endpoint": "payments", "type": "x" * 3000},
        {"endpoint": "payments", "ids": ["a"], "extra": 1},
    ):
        answer = parked.post("/api/replay", body)
        assert answer.status in (400, 404), (body, answer.body)
    assert parked.post("/api/replay", ["not", "an", "object"]).status == 400
    bad_json = parked.request(
        "POST",
        "/api/replay",
        body=b"[" * 10_000,
        headers={"Content-Type": "application/json", "X-Console-CSRF": parked.session()["csrf"]},
    )
    assert_refused(bad_json, 400)


def test_an_oversized_body_is_refused(parked: RunningConsole, emulator: AzuriteEndpoints) -> None:
    ids = [f"{i:08d}-0000-0000-0000-000000000000" for i in range(3000)]

    answer = parked.post("/api/discard", {"endpoint": "payments", "ids": ids, "reason": "x"})

    assert len(json.dumps(ids)) > MAX_BODY_BYTES
    assert_refused(answer, 413)
    assert waiting(emulator, poison_queue("payments")) == 10


# --- Hostile values ----------------------------------------------------------------------------


def test_hostile_values_come_back_as_the_same_json_strings_never_markup(
    console: RunningConsole, emulator: AzuriteEndpoints
) -> None:
    clear(emulator, "payments")
    why = Reason(
        "payments",
        HOSTILE,
        5,
        error_type=HOSTILE[:300],
        message_id="m-hostile",
        message_type=HOSTILE[:200],
    )
    park(emulator, [poison_body(HOSTILE, why)])

    listed = console.get("/api/failed")
    groups = console.get("/api/failed/groups")
    [message] = listed.json()["messages"]
    one = console.get(f"/api/failed/payments/{message['id']}")

    for answer in (listed, groups, one):
        assert answer.status == 200
        assert b"<" not in answer.body
        assert b"\x1b" not in answer.body
        assert answer.body.isascii()
    assert message["reason"] == HOSTILE[:2000]
    assert message["type"] == HOSTILE[:200]
    assert message["error_type"] == HOSTILE[:300]
    assert groups.json()["groups"][0]["example_reason"] == HOSTILE[:2000]
    assert one.json()["reason"] == HOSTILE[:2000]
    assert HOSTILE[:1000] in one.json()["body"]  # the parked text, shown as the text it is

    discarded = console.post(
        "/api/discard", {"endpoint": "payments", "ids": [message["id"]], "reason": HOSTILE[:1999]}
    )
    assert discarded.status == 200
    [action] = console.get("/api/actions?size=1").json()["actions"]
    assert action["reason"] == HOSTILE[:1999]


# --- Read-only, Host -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def read_only_consoles(
    project: Path, emulator: AzuriteEndpoints
) -> Iterator[tuple[RunningConsole, RunningConsole]]:
    """One console started with --read-only, one with BUS_CONSOLE_READ_ONLY=true."""
    flagged = console_environ(emulator.connection_string)
    by_setting = console_environ(emulator.connection_string, BUS_CONSOLE_READ_ONLY="true")
    with (
        running_console(project, flagged, "--read-only") as one,
        running_console(project, by_setting) as other,
    ):
        yield one, other


def test_a_read_only_console_says_so_and_refuses_every_action(
    parked: RunningConsole,
    emulator: AzuriteEndpoints,
    read_only_consoles: tuple[RunningConsole, RunningConsole],
) -> None:
    for console in read_only_consoles:
        assert console.session()["read_only"] is True
        assert console.get("/api/failed").json()["total"] == 10
        for path in ("/api/replay", "/api/discard"):
            body = {"endpoint": "payments", "type": "ChargePayment", "reason": "x"}
            answer = console.post(path, body)
            assert_refused(answer, 403)
            assert "read-only" in answer.json()["error"]
    assert waiting(emulator, poison_queue("payments")) == 10


def test_a_request_for_another_host_name_is_refused(console: RunningConsole) -> None:
    rebound = raw(
        console, "GET", "/api/session", headers={**bearer(console), "Host": "evil.example:80"}
    )
    page = raw(console, "GET", "/", headers={"Host": f"attacker.example:{console.port}"})
    local = raw(console, "GET", "/", headers={"Host": f"localhost:{console.port}"})

    assert_refused(rebound, 421)
    assert page.status == 421
    assert local.status == 200


def test_every_answer_carries_the_security_headers(console: RunningConsole) -> None:
    for answer in (
        console.get("/"),
        console.get("/console.css"),
        console.get("/nosuch"),
        console.get("/api/session"),
        console.get("/api/nosuch"),
        console.get("/api/session", token=None),
    ):
        assert_secured(answer)
    assert console.get("/api/session").headers["Cache-Control"] == "no-store"
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
