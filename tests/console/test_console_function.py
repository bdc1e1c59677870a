"""The console as the deployed app's HTTP function, exercised without the Functions host: the
binding BUS_CONSOLE_ENABLED adds (refused without a credential of the console's own), its
secret, the identity the platform vouches for (only with App Service authentication on and
Entra's sign-in), CSRF values shared by every instance, the redirect to the page's folder,
and actions through it. In-memory storage: these test the translation at the edge; the
handlers are tested over real HTTP, and a host key against the console in
test_console_keys.py."""

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
from shared.console.function import DEPLOYED_DOWNLOAD_BYTES
from shared.console.headers import CONTENT_SECURITY_POLICY
from shared.errors import ConfigurationError
from shared.provisioning import provision
from shared.resources import poison_queue
from shared.sample.app import app as sample_app
from shared.settings import resolve_settings
from shared.stores.memory import MemoryStorageAccount
from tests.bus.test_parked_body_stream import order, parked
from tests.conftest import sample_settings

ORIGIN = "https://shop-bus.azurewebsites.net"
SECRET = "console-secret-0123456789-abcdefghij"
SIGNED_IN = {"X-Console-Secret": SECRET}
ADA_ID = "0c5e7d1a-2b3c-4d5e-8f90-a1b2c3d4e5f6"
ADA = {
    "X-MS-CLIENT-PRINCIPAL-NAME": "ada@contoso.example",
    "X-MS-CLIENT-PRINCIPAL-ID": ADA_ID,
    "X-MS-CLIENT-PRINCIPAL-IDP": "aad",
}
ENTRA_BEHIND_AUTH = {"BUS_CONSOLE_IDENTITY": "entra", "WEBSITE_AUTH_ENABLED": "True"}
Function = Callable[[func.HttpRequest], Awaitable[func.HttpResponse]]


def functions(worker: runtime.Worker) -> dict[str, Any]:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_functions(blueprint(worker))
    return {str(f.get_function_name()): f for f in app.get_functions()}


def console_settings(**settings: str) -> dict[str, str]:
    """The console enabled, with its secret unless ``settings`` say otherwise."""
    return {"BUS_CONSOLE_ENABLED": "true", "BUS_CONSOLE_SECRET": SECRET, **settings}


async def deployed(
    account: MemoryStorageAccount | None = None, /, **settings: str
) -> tuple[Function, MemoryStorageAccount]:
    """The console function of the sample app on provisioned in-memory storage."""
    storage = account or MemoryStorageAccount()
    worker = runtime.Worker(sample_app, sample_settings(**console_settings(**settings)), storage)
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
    """``method path`` as the host hands it over; ``headers`` None: the console secret's."""
    data = b"" if body is None else json.dumps(body).encode()
    return func.HttpRequest(
        method,
        f"{ORIGIN}/api/console/{path}{query}",
        headers=SIGNED_IN if headers is None else headers,
        params=dict(p.split("=", 1) for p in query.lstrip("?").split("&") if p),
        route_params={"path": path} if path else {},
        body=data,
    )


async def answer(function: Function, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    response = await function(request(*args, **kwargs))
    return response.status_code, json.loads(response.get_body())


def test_the_console_function_is_bound_only_when_the_setting_enables_it() -> None:
    off = functions(runtime.Worker(sample_app, sample_settings()))
    on = functions(runtime.Worker(sample_app, sample_settings(**console_settings())))

    assert CONSOLE_FUNCTION not in off
    bound = [*sample_app.endpoints, *sample_app.http_routes, *FIXED_FUNCTIONS, CONSOLE_FUNCTION]
    assert sorted(on) == sorted(bound)
    trigger = on[CONSOLE_FUNCTION].get_trigger()
    assert trigger.get_binding_name() == "httpTrigger"
    assert trigger.route == "console/{*path}"
    assert sorted(m.value for m in trigger.methods) == ["GET", "POST"]
    # Its own credential guards it: every host key would open a function-level route.
    assert trigger.auth_level == func.AuthLevel.ANONYMOUS


def test_an_endpoint_named_console_is_refused_when_the_console_is_enabled() -> None:
    app = BusApp()
    app.endpoint("console")
    settings = resolve_settings(environ=console_settings(), local_file=None)
    with pytest.raises(ConfigurationError, match="share a function name"):
        blueprint(runtime.Worker(app, settings))


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"BUS_CONSOLE_IDENTITY": "secret"},
        {"BUS_CONSOLE_SECRET": "   "},
        {"BUS_CONSOLE_READ_ONLY": "true"},
    ],
)
def test_with_no_credential_of_its_own_the_console_refuses_to_bind(
    settings: dict[str, str],
) -> None:
    """Bound at function level, the console would open to every host key: no secret and no
    Entra sign-in is a start-up error naming both settings, read-only or not."""
    worker = runtime.Worker(
        sample_app, sample_settings(BUS_CONSOLE_ENABLED="true", **settings), MemoryStorageAccount()
    )

    with pytest.raises(ConfigurationError) as refused:
        functions(worker)

    assert "BUS_CONSOLE_SECRET" in str(refused.value)
    assert "BUS_CONSOLE_IDENTITY=entra" in str(refused.value)


def test_a_short_or_unresolved_console_secret_stops_start_up_without_showing_it() -> None:
    short = "s3cr3t-but-short"
    reference = "@Microsoft.KeyVault(SecretUri=https://v.vault.azure.net/secrets/console)"

    with pytest.raises(ConfigurationError, match="too short") as too_short:
        runtime.Worker(sample_app, sample_settings(BUS_CONSOLE_SECRET=short))
    with pytest.raises(ConfigurationError, match="did not resolve") as unresolved:
        runtime.Worker(sample_app, sample_settings(BUS_CONSOLE_SECRET=reference))

    assert short not in str(too_short.value)
    assert "vault.azure.net" not in str(unresolved.value)


async def test_with_the_secret_who_acts_is_the_console_secret() -> None:
    function, _ = await deployed()

    status, session = await answer(function, "GET", "api/session")

    assert status == 200
    assert session["who"] == "console secret"
    assert session["read_only"] is False


@pytest.mark.parametrize(
    "sent",
    [
        {},
        {"X-Console-Secret": ""},
        {"X-Console-Secret": SECRET[:-1]},
        {"X-Console-Secret": SECRET + "x"},
        {"X-Console-Secret": SECRET[:-1] + chr(ord(SECRET[-1]) + 1)},
        {"X-Console-Secret": SECRET.upper()},
        {"Authorization": f"Bearer {SECRET}"},
        {"X-Functions-Key": SECRET},
    ],
)
async def test_an_absent_or_wrong_console_secret_is_401_on_every_api(
    sent: dict[str, str],
) -> None:
    function, account = await deployed()
    why = Reason("payments", "failed", 5, message_id="m-1", message_type="ChargePayment")
    await account.queue(poison_queue("payments")).send(poison_body("{}", why))
    action = {"Content-Type": "application/json", "Origin": ORIGIN, "X-Console-CSRF": "x"}
    discard = {"endpoint": "payments", "type": "ChargePayment", "reason": "gone"}

    answers = [
        await answer(function, "GET", path, headers=sent)
        for path in ("api/session", "api/failed", "api/overview", "api/actions")
    ]
    posted = await answer(function, "POST", "api/discard", headers={**sent, **action}, body=discard)

    assert [status for status, _ in answers] == [401] * 4
    assert posted[0] == 401
    assert "console secret" in answers[0][1]["error"]
    assert answers[0][1]["sign_in"] == "console-secret"  # the page shows its sign-in
    assert await account.queue(poison_queue("payments")).approximate_count() == 1


def test_entra_without_app_service_authentication_refuses_to_bind() -> None:
    """Without the platform's authentication in front, X-MS-CLIENT-PRINCIPAL-* are whatever
    a caller writes: the console will not start on them."""
    worker = runtime.Worker(
        sample_app, sample_settings(**console_settings(BUS_CONSOLE_IDENTITY="entra"))
    )

    with pytest.raises(ConfigurationError) as refused:
        functions(worker)

    assert "BUS_CONSOLE_IDENTITY=entra" in str(refused.value)
    assert "WEBSITE_AUTH_ENABLED" in str(refused.value)


async def test_with_entra_who_acts_is_the_signed_in_name_beside_the_object_id() -> None:
    function, _ = await deployed(BUS_CONSOLE_SECRET="", **ENTRA_BEHIND_AUTH)
    bob = {
        **ADA,
        "X-MS-CLIENT-PRINCIPAL-NAME": "bob@contoso.example",
        "X-MS-CLIENT-PRINCIPAL-ID": ADA_ID.replace("0c5e", "9f9f"),
    }

    signed = await answer(function, "GET", "api/session", headers=ADA)
    other = await answer(function, "GET", "api/session", headers=bob)

    assert signed[0] == 200
    assert signed[1]["who"] == f"ada@contoso.example (object id {ADA_ID})"
    assert signed[1]["csrf"] != other[1]["csrf"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"X-MS-CLIENT-PRINCIPAL-IDP": None}, "Entra"),
        ({"X-MS-CLIENT-PRINCIPAL-IDP": "github"}, "Entra"),
        ({"X-MS-CLIENT-PRINCIPAL-IDP": "aad-b2c"}, "Entra"),
        ({"X-MS-CLIENT-PRINCIPAL-ID": None}, "object id"),
        ({"X-MS-CLIENT-PRINCIPAL-ID": "ada"}, "object id"),
        ({"X-MS-CLIENT-PRINCIPAL-ID": None, "X-MS-CLIENT-PRINCIPAL-NAME": None}, "object id"),
    ],
)
async def test_with_entra_a_request_not_signed_in_by_entra_is_401(
    change: dict[str, str | None], why: str
) -> None:
    function, _ = await deployed(BUS_CONSOLE_SECRET="", **ENTRA_BEHIND_AUTH)
    sent = {name: value for name, value in {**ADA, **change}.items() if value is not None}

    status, refused = await answer(function, "GET", "api/session", headers=sent)

    assert status == 401
    assert why in refused["error"]


async def test_with_entra_and_a_secret_both_are_required() -> None:
    function, _ = await deployed(**ENTRA_BEHIND_AUTH)

    entra_only = await answer(function, "GET", "api/session", headers=ADA)
    secret_only = await answer(function, "GET", "api/session", headers=SIGNED_IN)
    both = await answer(function, "GET", "api/session", headers={**ADA, **SIGNED_IN})

    assert (entra_only[0], secret_only[0], both[0]) == (401, 401, 200)
    assert both[1]["who"] == f"ada@contoso.example (object id {ADA_ID})"


async def test_the_principal_headers_are_ignored_unless_entra_is_asked_for() -> None:
    function, _ = await deployed(WEBSITE_AUTH_ENABLED="True")
    forged = {**SIGNED_IN, **ADA, "X-MS-CLIENT-PRINCIPAL-NAME": "admin"}

    assert (await answer(function, "GET", "api/session", headers=forged))[1]["who"] == (
        "console secret"
    )


async def test_the_journal_records_the_entra_object_id_of_who_discarded() -> None:
    function, account = await deployed(BUS_CONSOLE_SECRET="", **ENTRA_BEHIND_AUTH)
    why = Reason("payments", "failed", 5, message_id="m-1", message_type="ChargePayment")
    await account.queue(poison_queue("payments")).send(poison_body("{}", why))
    csrf = (await answer(function, "GET", "api/session", headers=ADA))[1]["csrf"]
    headers = {**ADA, "Content-Type": "application/json", "X-Console-CSRF": csrf}
    body = {"endpoint": "payments", "type": "ChargePayment", "reason": "charged by hand"}

    status, _ = await answer(function, "POST", "api/discard", headers=headers, body=body)

    assert status == 200
    [action] = (await answer(function, "GET", "api/actions", headers=ADA))[1]["actions"]
    assert action["who"] == f"ada@contoso.example (object id {ADA_ID})"


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
    headers = {**SIGNED_IN, "Content-Type": "application/json", "X-Console-CSRF": csrf}
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
    assert own == (200, {"action": own[1]["action"], "discarded": 1, "complete": True})
    [action] = (await answer(function, "GET", "api/actions"))[1]["actions"]
    assert (action["who"], action["reason"]) == ("console secret", "charged by hand")


async def test_read_only_by_setting_refuses_actions() -> None:
    function, _ = await deployed(BUS_CONSOLE_READ_ONLY="true")
    csrf = (await answer(function, "GET", "api/session"))[1]["csrf"]

    status, refused = await answer(
        function,
        "POST",
        "api/replay",
        headers={**SIGNED_IN, "Content-Type": "application/json", "X-Console-CSRF": csrf},
        body={"endpoint": "payments", "ids": ["a"]},
    )

    assert status == 403
    assert "read-only" in refused["error"]


async def test_the_page_is_served_with_its_headers_and_its_folder_address_redirected() -> None:
    function, _ = await deployed()

    # The page holds no data: it loads without the secret, to ask for it.
    page = await function(request("GET", "index.html", headers={}))
    folder = await function(request("GET", "", query="?code=k3y", headers={}))
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


async def test_a_signed_in_name_however_long_leaves_the_object_id_in_the_journal() -> None:
    """The journal bounds who acted; a name chosen long enough must not push out the one part
    of it no one chooses."""
    function, account = await deployed(BUS_CONSOLE_SECRET="", **ENTRA_BEHIND_AUTH)
    long_name = {**ADA, "X-MS-CLIENT-PRINCIPAL-NAME": "ada@contoso.example" + "x" * 500}
    why = Reason("payments", "failed", 5, message_id="m-1", message_type="ChargePayment")
    await account.queue(poison_queue("payments")).send(poison_body("{}", why))
    csrf = (await answer(function, "GET", "api/session", headers=long_name))[1]["csrf"]
    headers = {**long_name, "Content-Type": "application/json", "X-Console-CSRF": csrf}
    body = {"endpoint": "payments", "ids": ["m-1"]}

    status, _ = await answer(function, "POST", "api/replay", headers=headers, body=body)

    assert status == 200
    [action] = (await answer(function, "GET", "api/actions", headers=ADA))[1]["actions"]
    assert action["who"].startswith("ada@contoso.example")
    assert action["who"].endswith(f"(object id {ADA_ID})")


async def test_a_body_is_downloaded_whole_up_to_the_deployed_bound_and_refused_above() -> None:
    """The host's Python worker answers whole: a body above the bound is refused with where
    to read it, not collected in memory."""
    function, account = await deployed()
    small = await parked(account, order(1000), shared=False, endpoint="payments")
    large = await parked(account, order(DEPLOYED_DOWNLOAD_BYTES), shared=True, endpoint="payments")

    whole = await function(request("GET", f"api/failed/payments/{small.message.id}/body"))
    refused = await answer(function, "GET", f"api/failed/payments/{large.message.id}/body")

    assert whole.status_code == 200
    assert json.loads(whole.get_body()) == order(1000)
    assert whole.headers["Content-Disposition"].startswith("attachment;")
    assert refused[0] == 413
    assert "bus poison show" in refused[1]["error"]


async def test_a_discard_capped_by_the_list_limit_says_it_did_not_reach_the_end() -> None:
    function, account = await deployed(BUS_CONSOLE_LIST_LIMIT="32")
    poison = account.queue(poison_queue("payments"))
    for i in range(40):
        why = Reason("payments", "failed", 5, message_id=f"m-{i}", message_type="ChargePayment")
        await poison.send(poison_body("{}", why))
    csrf = (await answer(function, "GET", "api/session"))[1]["csrf"]
    headers = {**SIGNED_IN, "Content-Type": "application/json", "X-Console-CSRF": csrf}
    body = {"endpoint": "payments", "type": "ChargePayment", "reason": "charged by hand"}

    first = await answer(
        function, "POST", "api/discard", headers={**headers, "Origin": ORIGIN}, body=body
    )
    rest = await answer(
        function, "POST", "api/discard", headers={**headers, "Origin": ORIGIN}, body=body
    )

    assert (first[1]["discarded"], first[1]["complete"]) == (32, False)
    assert (rest[1]["discarded"], rest[1]["complete"]) == (8, True)
    assert await poison.approximate_count() == 0
