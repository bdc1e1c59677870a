"""The console as the deployed app's HTTP function, exercised without the Functions host: the
binding BUS_CONSOLE_ENABLED adds, the identity the platform vouches for, CSRF values shared
by every instance, the redirect to the page's folder, and actions through it. In-memory
storage: these test the translation at the edge; the handlers are tested over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import azure.functions as func
import pytest

from shared import runtime
from shared.bindings import CONSOLE_FUNCTION, FIXED_FUNCTIONS, blueprint
from shared.bus import BusApp
from shared.bus.poison import Reason, poison_body
from shared.console.headers import CONTENT_SECURITY_POLICY
from shared.errors import ConfigurationError
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.sample.app import app as sample_app
from shared.settings import resolve_settings
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import sample_settings

ORIGIN = "https://shop-bus.azurewebsites.net"
Function = Callable[[func.HttpRequest], Awaitable[func.HttpResponse]]


def functions(worker: runtime.Worker) -> dict[str, Any]:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_functions(blueprint(worker))
    return {str(f.get_function_name()): f for f in app.get_functions()}


async def deployed(
    account: MemoryStorageAccount | None = None, **settings: str
) -> tuple[Function, MemoryStorageAccount]:
    """The console function of the sample app on provisioned in-memory storage."""
    storage = account or MemoryStorageAccount()
    worker = runtime.Worker(
        sample_app, sample_settings(BUS_CONSOLE_ENABLED="true", **settings), storage
    )
    if account is None:
        await provision(storage, worker.resources)
    function: Function = functions(worker)[CONSOLE_FUNCTION].get_user_function()
    return function, storage


def request(
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: object = None,
    query: str = "",
) -> func.HttpRequest:
    data = b"" if body is None else json.dumps(body).encode()
    return func.HttpRequest(
        method,
        f"{ORIGIN}/api/console/{path}{query}",
        headers=headers or {},
        params=dict(p.split("=", 1) for p in query.lstrip("?").split("&") if p),
        route_params={"path": path} if path else {},
        body=data,
    )


async def answer(function: Function, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    response = await function(request(*args, **kwargs))
    return response.status_code, json.loads(response.get_body())


def test_the_console_function_is_bound_only_when_the_setting_enables_it() -> None:
    off = functions(runtime.Worker(sample_app, sample_settings()))
    on = functions(runtime.Worker(sample_app, sample_settings(BUS_CONSOLE_ENABLED="true")))

    assert CONSOLE_FUNCTION not in off
    assert sorted(on) == sorted([*sample_app.endpoints, *FIXED_FUNCTIONS, CONSOLE_FUNCTION])
    trigger = on[CONSOLE_FUNCTION].get_trigger()
    assert trigger.get_binding_name() == "httpTrigger"
    assert trigger.route == "console/{*path}"
    assert sorted(m.value for m in trigger.methods) == ["GET", "POST"]
    assert trigger.auth_level == func.AuthLevel.FUNCTION


def test_an_endpoint_named_console_is_refused_when_the_console_is_enabled() -> None:
    app = BusApp()
    app.endpoint("console")
    settings = resolve_settings(environ={"BUS_CONSOLE_ENABLED": "true"}, local_file=None)
    with pytest.raises(ConfigurationError, match="share a function name"):
        blueprint(runtime.Worker(app, settings))


async def test_with_a_function_key_who_acts_is_the_function_key() -> None:
    function, _ = await deployed()

    status, session = await answer(function, "GET", "api/session")

    assert status == 200
    assert session["who"] == "function key"
    assert session["read_only"] is False


async def test_with_entra_who_acts_is_the_signed_in_name_and_none_is_refused() -> None:
    function, _ = await deployed(BUS_CONSOLE_IDENTITY="entra")
    ada = {"X-MS-CLIENT-PRINCIPAL-NAME": "ada@contoso.example"}
    bob = {"X-MS-CLIENT-PRINCIPAL-NAME": "bob@contoso.example"}

    unsigned = await answer(function, "GET", "api/session")
    signed = await answer(function, "GET", "api/session", headers=ada)
    other = await answer(function, "GET", "api/session", headers=bob)

    assert unsigned[0] == 401
    assert signed[1]["who"] == "ada@contoso.example"
    assert signed[1]["csrf"] != other[1]["csrf"]


async def test_the_principal_header_is_ignored_unless_entra_is_in_front() -> None:
    function, _ = await deployed()
    forged = {"X-MS-CLIENT-PRINCIPAL-NAME": "admin"}

    assert (await answer(function, "GET", "api/session", headers=forged))[1]["who"] == (
        "function key"
    )


async def test_every_instance_signs_the_same_csrf_value() -> None:
    one, account = await deployed()
    other, _ = await deployed(account)

    first = (await answer(one, "GET", "api/session"))[1]["csrf"]
    second = (await answer(other, "GET", "api/session"))[1]["csrf"]

    assert first == second


async def test_a_discard_through_the_function_is_taken_from_its_own_origin_only() -> None:
    function, account = await deployed()
    why = Reason("payments", "failed", 5, message_id="m-1", message_type="ChargePayment")
    await account.queue(poison_queue("payments")).send(poison_body("{}", why))
    csrf = (await answer(function, "GET", "api/session"))[1]["csrf"]
    headers = {"Content-Type": "application/json", "X-Console-CSRF": csrf}
    body = {"endpoint": "payments", "type": "ChargePayment", "reason": "charged by hand"}

    foreign = await answer(
        function,
        "POST",
        "api/discard",
        headers={**headers, "Origin": "https://x.example"},
        body=body,
    )
    own = await answer(
        function, "POST", "api/discard", headers={**headers, "Origin": ORIGIN}, body=body
    )

    assert foreign[0] == 403
    assert own == (200, {"action": own[1]["action"], "discarded": 1})
    [action] = (await answer(function, "GET", "api/actions"))[1]["actions"]
    assert (action["who"], action["reason"]) == ("function key", "charged by hand")


async def test_read_only_by_setting_refuses_actions() -> None:
    function, _ = await deployed(BUS_CONSOLE_READ_ONLY="true")
    csrf = (await answer(function, "GET", "api/session"))[1]["csrf"]

    status, refused = await answer(
        function,
        "POST",
        "api/replay",
        headers={"Content-Type": "application/json", "X-Console-CSRF": csrf},
        body={"endpoint": "payments", "ids": ["a"]},
    )

    assert status == 403
    assert "read-only" in refused["error"]


async def test_the_page_is_served_with_its_headers_and_its_folder_address_redirected() -> None:
    function, _ = await deployed()

    page = await function(request("GET", "index.html"))
    folder = await function(request("GET", "", query="?code=k3y"))
    bare = await function(
        func.HttpRequest("GET", f"{ORIGIN}/api/console?code=k3y", params={"code": "k3y"}, body=b"")
    )

    assert page.status_code == 200
    assert page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert folder.status_code == 200
    assert folder.get_body() == page.get_body()
    assert bare.status_code == 308
    assert bare.headers["Location"] == f"{ORIGIN}/api/console/?code=k3y"
