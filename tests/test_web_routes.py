"""The app's own web routes (``BusApp.route``, ``shared.web``, ``shared.web_serving``): what a
declaration may be, how a request is answered whatever its handler raises, without the host
and behind the local host's front end with its function keys."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import RawTestServer, TestClient
from pydantic import BaseModel, Field

from lab.host.functions import load_functions
from lab.host.http import HttpFrontEnd, Keys
from shared import runtime
from shared.bus import Bus, BusApp, Command
from shared.http_ingress import handle
from shared.platform_identity import PRINCIPAL_ID, PRINCIPAL_IDP, PlatformAuth
from shared.provisioning import provision
from shared.settings import resolve_settings
from shared.stores.instrumented import Fault, fault_at_first
from shared.stores.table import Entity
from shared.web import WebError, WebRequest, WebResponse
from shared.web_serving import serve
from tests.bus.harness import Harness, per_mode_backend
from tests.conftest import Backend, unique_name

__all__ = ["per_mode_backend"]

REPO = Path(__file__).resolve().parents[1]
BOUND = 2048


class Noted(Command):
    partition_by = "ref"
    ref: str


class Notes(BaseModel):
    refs: list[str] = []


class Note(BaseModel):
    ref: str = Field(pattern=r"^[a-z0-9-]{1,40}$")
    text: str = Field(max_length=200)


calls: list[str] = []
"""The handlers' invocations, so that a test can say a request never reached one."""


async def take_note(request: WebRequest, bus: Bus) -> WebResponse:
    calls.append("take_note")
    key, scope = request.idempotency_key(), request.scope(bus.config)
    note = request.model(Note)
    async with bus.session("desk", partition=note.ref, key=key, scope=scope) as s:
        if not s.deduplicated:
            s.insert(Entity(note.ref, "note", {"text": note.text}))
            s.send(Noted(ref=note.ref), to="notes")
    body = {"message_ids": list(s.message_ids), "deduplicated": s.deduplicated}
    return WebResponse.json(200 if s.deduplicated else 202, body)


async def refuse(request: WebRequest, bus: Bus) -> WebResponse:
    raise WebError(404, f"no note {request.route_params.get('ref')!r}")


async def broken(request: WebRequest, bus: Bus) -> WebResponse:
    raise KeyError("a secret the client must not see")


async def wrong_answer(request: WebRequest, bus: Bus) -> str:
    return "not a response"


def build_app() -> BusApp:
    app = BusApp()
    app.endpoint("desk", sessions=True)
    notes = app.endpoint("notes", Notes)

    @notes.handles(Noted)
    def note(ctx, message: Noted) -> None:  # type: ignore[no-untyped-def]
        ctx.state.refs.append(message.ref)

    app.route("notes", max_body_bytes=BOUND)(take_note)
    app.route("notes/{ref}", methods=["GET"])(refuse)
    app.route("broken", methods=["GET"])(broken)
    app.route("wrong", methods=["GET"])(wrong_answer)
    return app


pytestmark = pytest.mark.parametrize(
    "backend",
    [
        pytest.param(("memory", "token"), id="memory"),
        pytest.param(("azurite", "token"), id="azurite", marks=pytest.mark.azurite),
    ],
    indirect=True,
)


@pytest.fixture
async def harness(backend: Backend) -> Harness:
    calls.clear()
    return await Harness.create(backend, build_app())


@pytest.fixture
def ref() -> str:
    """A note of this test's own: the emulator's tables outlive a test."""
    return unique_name("n-")


def request(body: object, key: str | None = "k1", **headers: str) -> WebRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {**headers, **({} if key is None else {"Idempotency-Key": key})}
    return WebRequest("POST", "/api/notes", sent, raw)


async def post(harness: Harness, sent: WebRequest, route: str = "take_note") -> WebResponse:
    return await serve(harness.bus, harness.app.http_routes[route], sent)


def answer(response: WebResponse) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(response.body)
    return value


async def user_rows(harness: Harness, ref: str) -> dict[str, Entity]:
    return await harness.rows("desk").rows().read(ref, ["note"])


async def refs(harness: Harness, ref: str) -> list[str]:
    """What ``notes`` applied for ``ref``: one entry per processing."""
    return (await harness.applied_state("notes", ref, Notes)).refs


def note(ref: str, text: str = "hello") -> dict[str, str]:
    return {"ref": ref, "text": text}


async def test_a_request_commits_its_row_and_message_once_and_a_retry_adds_nothing(
    harness: Harness, ref: str
) -> None:
    first = await post(harness, request(note(ref)))
    assert first.status == 202
    again = await post(harness, request(note(ref, "changed")))
    assert (again.status, answer(again)) == (200, {**answer(first), "deduplicated": True})
    await harness.run_until_quiet()
    assert await refs(harness, ref) == [ref]
    assert (await user_rows(harness, ref))["note"]["text"] == "hello"


BAD_INPUT = [
    ({"key": None}, None, 400, "the Idempotency-Key header is required"),
    ({"key": "a, b"}, None, 400, "send one Idempotency-Key header"),
    ({"key": "x" * 201}, None, 400, "idempotency key must be 1-200 characters"),
    ({"key": "k\x07"}, None, 400, "control character"),
    ({}, b"{not json", 400, "the body must be JSON"),
    ({}, b"[" * 2000, 400, "nested too deeply"),
    ({}, b'{"ref": "\\udcff", "text": ""}', 400, "not valid Unicode"),
    ({}, {"ref": "N/1", "text": "x"}, 400, "invalid Note: ref: String should match"),
    ({}, {"ref": "n1", "text": "x" * 5000}, 413, "this route takes at most 2,048 bytes"),
]


@pytest.mark.parametrize(("headers", "body", "status", "error"), BAD_INPUT)
async def test_bad_input_is_a_4xx_that_says_why_and_writes_nothing(
    harness: Harness, ref: str, headers: dict[str, Any], body: object, status: int, error: str
) -> None:
    sent = request(note(ref) if body is None else body, **headers)
    response = await post(harness, sent)
    assert (response.status, error in answer(response)["error"]) == (status, True), response
    await harness.run_until_quiet()
    assert await user_rows(harness, ref) == {}
    assert await refs(harness, ref) == []
    assert await harness.tokens() == []


async def test_a_body_over_the_bound_never_reaches_the_handler(harness: Harness) -> None:
    response = await post(harness, request(b" " * (BOUND + 1)))
    assert response.status == 413
    assert calls == []


FORGED = {PRINCIPAL_ID: "00000000-0000-0000-0000-000000000001", PRINCIPAL_IDP: "aad"}


async def test_the_same_key_under_forged_identity_headers_is_the_same_request(
    harness: Harness, ref: str
) -> None:
    """Without the Entra option every function-key holder's keys are one scope: headers a
    caller writes to pass for someone else do not make a retry a new request."""
    first = await post(harness, request(note(ref)))
    again = await post(harness, request(note(ref), **FORGED))
    assert answer(again)["deduplicated"] is True
    assert answer(again)["message_ids"] == answer(first)["message_ids"]


async def test_with_the_entra_option_forged_headers_without_platform_sign_in_are_a_401(
    harness: Harness, ref: str
) -> None:
    harness.bus.config = replace(harness.bus.config, ingress_entra_callers=True)
    sent = request(note(ref), **FORGED)
    response = await post(harness, sent)
    assert response.status == 401
    assert "App Service authentication is off" in answer(response)["error"]
    ingress = await handle(harness.bus, sent.headers, b"{}")  # refused alike
    assert (ingress.status, ingress.body) == (response.status, answer(response))
    assert await user_rows(harness, ref) == {}
    signed = replace(sent, platform=PlatformAuth(enabled=True))
    assert (await post(harness, signed)).status == 202


async def test_a_conflicting_write_is_a_409_and_nothing_is_sent(harness: Harness, ref: str) -> None:
    assert (await post(harness, request(note(ref), key="first"))).status == 202
    response = await post(harness, request(note(ref), key="second"))  # its row exists
    assert response.status == 409
    assert "nothing was written or sent" in answer(response)["error"]
    await harness.run_until_quiet()
    assert await refs(harness, ref) == [ref]


@pytest.mark.parametrize("fault", [Fault.ERROR_BEFORE, Fault.ERROR_AFTER])
async def test_a_state_store_that_does_not_answer_is_a_503_and_the_retry_sends_once(
    harness: Harness, ref: str, fault: Fault
) -> None:
    harness.instrumentation.plan = fault_at_first("table.transact", fault)
    response = await post(harness, request(note(ref)))
    assert response.status == 503
    assert response.headers["Retry-After"] == "10"
    assert "retry with the same Idempotency-Key" in answer(response)["error"]
    harness.instrumentation.plan = lambda op: None
    retry = await post(harness, request(note(ref)))
    # Lost before it was applied: the retry commits. Applied, its answer lost: the retry
    # learns what was sent, and sends the signals the first did not.
    assert retry.status == (202 if fault is Fault.ERROR_BEFORE else 200)
    await harness.run_until_quiet()
    assert await refs(harness, ref) == [ref]


async def test_a_handler_that_fails_is_a_500_without_its_details(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    get = WebRequest("GET", "/api/broken")
    response = await post(harness, get, "broken")
    assert (response.status, answer(response)) == (500, {"error": "internal server error"})
    assert "secret" in caplog.text  # for the operator, in the log
    assert (await post(harness, get, "wrong_answer")).status == 500
    missing = replace(get, route_params={"ref": "n9"})
    refused = await post(harness, missing, "refuse")
    assert (refused.status, answer(refused)) == (404, {"error": "no note 'n9'"})


async def test_the_local_host_serves_the_routes_with_function_keys(
    harness: Harness, ref: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """function_app.py as the local host loads it, its worker this test's app."""
    worker = runtime.Worker(harness.app, resolve_settings(environ={}, local_file=None), harness.raw)
    await provision(harness.raw, worker.resources)
    monkeypatch.setattr(runtime, "_worker", worker)
    loaded = load_functions(REPO / "function_app.py", {"CLEANUP_SCHEDULE": "0 */5 * * * *"})
    front = HttpFrontEnd(loaded.http, Keys("fn", "master"), function_timeout=10)
    headers = {"Idempotency-Key": "h"}
    client: TestClient[Any, Any]
    async with TestClient(RawTestServer(front.dispatch)) as client:
        anonymous = await client.post("/api/notes", json=note(ref), headers=headers)
        assert anonymous.status == 401
        posted = await client.post("/api/Notes?code=fn", json=note(ref), headers=headers)
        assert (posted.status, len((await posted.json())["message_ids"])) == (202, 1)
        big = await client.post("/api/notes?code=fn", data=b"x" * (BOUND + 1), headers=headers)
        assert big.status == 413
        got = await client.get("/api/notes/n2?code=fn")
        assert (got.status, await got.json()) == (404, {"error": "no note 'n2'"})
    rows = worker.bus().endpoint_state("desk").rows()
    assert "note" in await rows.read(ref, ["note"])
    assert len(await harness.raw.queue("notes").peek(32)) == 1
