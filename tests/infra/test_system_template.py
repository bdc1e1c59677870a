"""The system template (infra/system.bicep): one messaging account, per app a Function App, an
identity and its own state account, and least privilege between the apps.

No Bicep compiler runs here (docs/deploy.md, "Checking the templates"): the templates are
parsed with pycep-parser, and the role assignments each app's identity receives are computed
by following system.bicep's module loops over the example parameters file down to every
assignment, with ``provisioned.evaluate`` for the loop arrays and the names. Every assignment
is then judged by its account, its scope (the account, a queue, a container or a table) and
its role.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from provisioned import (
    INFRA_DIR,
    cosmos_resources_in_file,
    dotted,
    evaluate,
    file_environment,
    parse_bicep,
    unwrap,
)

from shared.app_loader import load_app
from shared.bus.app import STORES, BusApp
from shared.resources import Resources, resources_for, resources_json
from shared.runtime import Worker
from shared.settings import load_storage_settings, resolve_settings
from shared.system import store_fault

SYSTEM = INFRA_DIR / "system.bicep"
PARAMETERS = INFRA_DIR / "system.parameters.json"
APP = INFRA_DIR / "app"
DEPLOY_MD = INFRA_DIR.parent / "docs" / "deploy.md"

BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
QUEUE_DATA_MESSAGE_SENDER = "c6a89b2d-59bc-44d0-9896-0f6e12d7b80a"
TABLE_DATA_CONTRIBUTOR = "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"

SCOPE_TYPES = {
    "queue-role.bicep": "Microsoft.Storage/storageAccounts/queueServices/queues",
    "container-role.bicep": "Microsoft.Storage/storageAccounts/blobServices/containers",
    "table-role.bicep": "Microsoft.Storage/storageAccounts/tableServices/tables",
}
SCOPE_KINDS = {"queue-role.bicep": "queue", "container-role.bicep": "container"}
SCOPE_KINDS["table-role.bicep"] = "table"
SHARED_CONTAINERS = {"tokens", "payloads", "topics", "parked"}
PROVIDER_URL = {"BUS_SERVICE_PROVIDER_URL": "https://provider.example.com"}


@dataclass(frozen=True)
class Grant:
    """One role assignment: on which account (own or messaging), at which scope, which role."""

    account: str
    kind: str  # account, queue, container or table
    name: str  # the scope's name; the account's own name for kind "account"
    role: str


def load(relative: str) -> dict[str, Any]:
    template: dict[str, Any] = parse_bicep(INFRA_DIR / relative)
    return template


def example_apps() -> list[dict[str, Any]]:
    document = json.loads(PARAMETERS.read_text(encoding="utf-8"))
    apps: list[dict[str, Any]] = document["parameters"]["apps"]["value"]
    return apps


def module(template: dict[str, Any], path: str) -> tuple[Any, Any, dict[str, Any]]:
    """The one module of ``template`` deploying ``path``: (loop, condition, body)."""
    found = [m for m in template.get("modules", {}).values() if m["detail"]["path"] == path]
    assert len(found) == 1, f"expected one module {path}, found {len(found)}"
    loop, condition, body = unwrap(found[0]["config"])
    return loop, condition, body


def role_assignment(path: Path) -> dict[str, Any]:
    """The one role assignment of a role module, with its scope resolved to the resource."""
    template = parse_bicep(path)
    found = [
        r
        for r in template["resources"].values()
        if r["type"] == "Microsoft.Authorization/roleAssignments"
    ]
    assert len(found) == 1, f"{path.name}: one role assignment, found {len(found)}"
    loop, condition, body = unwrap(found[0]["config"])
    assert loop is None, path.name
    assert condition is None, path.name
    return {"body": body, "scope": template["resources"][body["scope"]], "template": template}


def messaging_grants(app: Mapping[str, Any]) -> Iterator[Grant]:
    """Every assignment messaging-roles.bicep makes for ``app``, its loops expanded."""
    path = APP / "messaging-roles.bicep"
    template = parse_bicep(path)
    env = file_environment(
        path, template, {"resources": app["resources"], "sendsTo": app["sendsTo"]}
    )
    for declared in template["modules"].values():
        role_file = declared["detail"]["path"]
        loop, condition, body = unwrap(declared["config"])
        assert condition is None, role_file
        assert loop is not None, f"{role_file}: each module loops over names"
        detail = loop["detail"]
        for item in evaluate(detail["array_name"], env):
            params = evaluate(body["params"], {**env, detail["item_name"]: item})
            assert params["principalId"] == "principalId"
            assert params["storageAccountName"] == "storageAccountName"
            kind = SCOPE_KINDS[role_file]
            yield Grant("messaging", kind, params[f"{kind}Name"], params["roleId"])


def own_account_grants() -> Iterator[Grant]:
    """What roles.bicep grants, in system-app.bicep, on the app's own account."""
    roles = load("app/roles.bicep")
    for role in roles["variables"]["storageDataRoles"]["value"].values():
        role_id = role if isinstance(role, str) else None
        if role_id is None:  # hierarchicalNamespace ? Owner : Contributor; passed false
            role_id = roles["variables"]["storageBlobDataContributorRoleId"]["value"]
        elif role_id in roles["variables"]:
            role_id = roles["variables"][role_id]["value"]
        yield Grant("own", "account", "own", role_id)


def grants_of(app: Mapping[str, Any]) -> set[Grant]:
    return {*own_account_grants(), *messaging_grants(app)}


def bus_resources(app: Mapping[str, Any]) -> tuple[BusApp, dict[str, Any]]:
    """The app its busApp names, and what `bus resources` prints for it (as a worker's, with
    the performer the runtime adds to an app that declares services), without the comment."""
    environ = {"BUS_APP": app["busApp"], "BUS_APP_NAME": app["name"], **PROVIDER_URL}
    settings = resolve_settings(environ=environ, local_file=None)
    loaded = load_app(app["busApp"])
    printed = json.loads(resources_json(Worker(loaded, settings).resources))
    printed.pop("$comment")
    return loaded, printed


# --------------------------------------------------------------------------
# the parameters file


def test_the_parameters_file_sets_known_parameters_and_every_required_one() -> None:
    params = load("system.bicep")["parameters"]
    given = json.loads(PARAMETERS.read_text(encoding="utf-8"))["parameters"]
    assert set(given) <= set(params), sorted(set(given) - set(params))
    required = {name for name, spec in params.items() if spec.get("default") is None}
    assert required <= set(given), sorted(required - set(given))
    assert re.fullmatch(r"[a-z][a-z0-9]{2,10}", given["namePrefix"]["value"])


def test_the_example_is_orders_payments_and_shipping_each_described_whole() -> None:
    apps = example_apps()
    assert [(a["name"], a["store"]) for a in apps] == [
        ("orders", "table"),
        ("payments", "postgres"),
        ("shipping", "table"),
    ]
    for app in apps:
        assert set(app) <= {"name", "busApp", "store", "sendsTo", "resources", "appSettings"}
        assert {"name", "busApp", "store", "sendsTo", "resources"} <= set(app), app["name"]
        assert re.fullmatch(r"[a-z][a-z0-9]{2,19}", app["name"]), app["name"]
        listed = set(app["resources"])
        assert {"containers", "tables", "endpoints"} <= listed, app["name"]
        assert listed <= {"containers", "tables", "endpoints", "blobEndpoints", "cosmosEndpoints"}


@pytest.mark.parametrize("app", example_apps(), ids=lambda a: a["name"])
def test_each_apps_resources_are_what_bus_resources_prints_for_it(app: dict[str, Any]) -> None:
    """The template creates and grants what this object lists: it must be what the app itself
    uses, generated with `BUS_APP=<busApp> BUS_APP_NAME=<name> bus resources`."""
    loaded, printed = bus_resources(app)
    assert app["resources"] == printed, (
        f"{app['name']}: regenerate its resources with BUS_APP={app['busApp']} "
        f"BUS_APP_NAME={app['name']} bus resources"
    )
    stores = {name: endpoint.store for name, endpoint in loaded.endpoints.items()}
    assert store_fault(app["store"], stores, app["busApp"]) is None
    # sendsTo is what the app declares of other apps: the queues it may add messages to.
    assert sorted(app["sendsTo"]) == sorted(loaded.routes.external)


def test_an_app_sends_only_to_endpoints_of_the_other_apps() -> None:
    apps = example_apps()
    owner = {e: a["name"] for a in apps for e in a["resources"]["endpoints"]}
    for app in apps:
        for endpoint in app["sendsTo"]:
            assert endpoint in owner, f"{app['name']} sends to {endpoint}, no app's endpoint"
            assert owner[endpoint] != app["name"], f"{app['name']} lists its own {endpoint}"


# --------------------------------------------------------------------------
# least privilege


@pytest.mark.parametrize("role_file", sorted(SCOPE_TYPES))
def test_each_role_module_grants_one_storage_role_on_one_queue_container_or_table(
    role_file: str,
) -> None:
    found = role_assignment(APP / role_file)
    assert found["scope"]["type"] == SCOPE_TYPES[role_file]
    assert found["scope"]["existing"] is True
    body = found["body"]
    assert body["properties"]["principalId"] == "principalId"
    allowed = next(
        d["argument"]
        for d in found["template"]["parameters"]["roleId"]["decorators"]
        if d["type"] == "allowed"
    )
    expected = {
        "queue-role.bicep": [QUEUE_DATA_CONTRIBUTOR, QUEUE_DATA_MESSAGE_SENDER],
        "container-role.bicep": [BLOB_DATA_CONTRIBUTOR],
        "table-role.bicep": [TABLE_DATA_CONTRIBUTOR],
    }[role_file]
    assert allowed == expected


def test_roles_on_the_apps_own_account_are_its_identitys_and_only_there() -> None:
    """roles.bicep grants at account scope; in a system only on the app's own storage module,
    never on the messaging account, and no other module anywhere in the system grants a role
    at account scope."""
    system_app = load("app/system-app.bicep")
    _, condition, body = module(system_app, "roles.bicep")
    assert condition is None
    params = body["params"]
    assert dotted(params["storageAccountName"]) == "storage.outputs.name"
    assert dotted(params["principalId"]) == "identity.outputs.principalId"
    assert params["hierarchicalNamespace"] is False
    _, _, storage = module(system_app, "storage.bicep")
    assert storage["params"]["name"] == "storageAccountName"
    # Its account name hashes the app's name: two apps never share one.
    suffix = system_app["variables"]["suffix"]["value"]["function"]["parameters"]
    assert "appName" in suffix.values()
    # Only system-app.bicep deploys roles.bicep; system.bicep grants nothing itself.
    system = load("system.bicep")
    paths = [m["detail"]["path"] for m in system["modules"].values()]
    assert not [p for p in paths if "role" in p], paths
    assert not system.get("resources")
    messaging_roles = load("app/messaging-roles.bicep")
    used = {m["detail"]["path"] for m in messaging_roles["modules"].values()}
    assert used <= set(SCOPE_TYPES), used


def test_the_messaging_roles_go_to_the_shared_messaging_account() -> None:
    _, _, body = module(load("app/system-app.bicep"), "messaging-roles.bicep")
    assert body["params"]["storageAccountName"] == "messagingAccountName"
    assert dotted(body["params"]["principalId"]) == "identity.outputs.principalId"
    _, _, apps = module(load("system.bicep"), "app/system-app.bicep")
    assert dotted(apps["params"]["messagingAccountName"]) == "messaging.outputs.name"
    _, _, messaging = module(load("system.bicep"), "app/storage.bicep")
    assert messaging["params"]["name"] == "messagingAccountName"


@pytest.mark.parametrize("app", example_apps(), ids=lambda a: a["name"])
def test_each_identity_gets_what_sending_and_receiving_need_and_no_more(
    app: dict[str, Any],
) -> None:
    """Every assignment of the app's identity, computed from the templates for the example:
    account-wide data roles on its own account only; in the messaging account, Queue Data
    Contributor on its own queues and poison queues, Message Sender on the queues it sends to,
    Blob Data Contributor on the containers it lists and Table Data Contributor on the tables
    it lists, each scoped to that one queue, container or table. Table Data Contributor at the
    messaging account's scope would let an app read and rewrite every other app's ingress
    records, checkpoints and journal: none is granted there."""
    resources = app["resources"]
    endpoints = resources["endpoints"]
    expected = {
        Grant("own", "account", "own", BLOB_DATA_CONTRIBUTOR),
        Grant("own", "account", "own", QUEUE_DATA_CONTRIBUTOR),
        Grant("own", "account", "own", TABLE_DATA_CONTRIBUTOR),
        *(Grant("messaging", "queue", e, QUEUE_DATA_CONTRIBUTOR) for e in endpoints),
        *(Grant("messaging", "queue", f"{e}-poison", QUEUE_DATA_CONTRIBUTOR) for e in endpoints),
        *(Grant("messaging", "queue", e, QUEUE_DATA_MESSAGE_SENDER) for e in app["sendsTo"]),
        *(
            Grant("messaging", "container", c, BLOB_DATA_CONTRIBUTOR)
            for c in resources["containers"].values()
        ),
        *(
            Grant("messaging", "table", t, TABLE_DATA_CONTRIBUTOR)
            for t in resources["tables"].values()
        ),
    }
    granted = grants_of(app)
    assert granted == expected, {
        "missing": expected - granted,
        "more than needed": granted - expected,
    }
    assert {g.name for g in granted if g.kind == "container"} >= SHARED_CONTAINERS
    assert not {g for g in granted if g.account == "messaging" and g.kind == "account"}


def test_no_identity_may_receive_from_or_delete_in_another_apps_queues() -> None:
    apps = example_apps()
    for app in apps:
        others = [
            q
            for other in apps
            if other is not app
            for e in other["resources"]["endpoints"]
            for q in (e, f"{e}-poison")
        ]
        for grant in grants_of(app):
            if grant.kind == "queue" and grant.name in others:
                assert grant.role == QUEUE_DATA_MESSAGE_SENDER, (app["name"], grant)
                assert not grant.name.endswith("-poison"), (app["name"], grant)


# --------------------------------------------------------------------------
# where each name lives


def names_created(relative: str, params: Mapping[str, Any]) -> set[tuple[str, str]]:
    path = INFRA_DIR / relative
    template = parse_bicep(path)
    env = file_environment(path, template, params)
    kinds = {
        "Microsoft.Storage/storageAccounts/queueServices/queues": "queue",
        "Microsoft.Storage/storageAccounts/blobServices/containers": "container",
        "Microsoft.Storage/storageAccounts/tableServices/tables": "table",
    }
    created = set()
    for resource in template["resources"].values():
        if resource.get("existing") or resource["type"] not in kinds:
            continue
        loop, condition, body = unwrap(resource["config"])
        assert loop is not None
        assert condition is None
        detail = loop["detail"]
        for item in evaluate(detail["array_name"], env):
            name = evaluate(body["name"], {**env, detail["item_name"]: item})
            created.add((kinds[resource["type"]], name))
    return created


@pytest.mark.parametrize("app", example_apps(), ids=lambda a: a["name"])
def test_messaging_holds_the_queues_containers_and_app_wide_tables_state_the_endpoint_tables(
    app: dict[str, Any],
) -> None:
    resources = app["resources"]
    endpoints = resources["endpoints"]
    assert names_created("app/messaging-names.bicep", {"resources": resources}) == {
        *(("queue", q) for e in endpoints for q in (e, f"{e}-poison")),
        *(("container", c) for c in resources["containers"].values()),
        *(("table", t) for t in resources["tables"].values()),
    }
    assert names_created("app/state-names.bicep", {"endpoints": endpoints}) == {
        ("table", e) for e in endpoints
    }
    # ... each in its own account.
    _, _, state = module(load("app/system-app.bicep"), "state-names.bicep")
    assert dotted(state["params"]["storageAccountName"]) == "storage.outputs.name"
    assert dotted(state["params"]["endpoints"]) == "resources.endpoints"
    _, _, names = module(load("system.bicep"), "app/messaging-names.bicep")
    assert dotted(names["params"]["storageAccountName"]) == "messaging.outputs.name"
    assert dotted(names["params"]["resources"]) == "app.resources"


def test_the_system_creates_no_names_from_resources_json_and_main_still_does() -> None:
    """resources.json is the single app's: the system's accounts get each app's names
    instead, and main.bicep keeps today's account with every name of the file."""
    system = load("system.bicep")
    _, _, messaging = module(system, "app/storage.bicep")
    assert messaging["params"]["resourcesFromFile"] is False
    _, _, own = module(load("app/system-app.bicep"), "storage.bicep")
    assert own["params"]["resourcesFromFile"] is False
    _, _, single = module(load("main.bicep"), "app/storage.bicep")
    assert "resourcesFromFile" not in single["params"]
    assert load("app/storage.bicep")["parameters"]["resourcesFromFile"]["default"] is True
    loop, _, _ = module(system, "app/messaging-names.bicep")
    assert loop is not None
    decorators = system["modules"]["messagingNames"]["decorators"]
    batch = [d["argument"] for d in decorators if d["type"] == "batchSize"]
    assert batch == [1], "the apps' messaging names must be created one app at a time"


# --------------------------------------------------------------------------
# app settings


def connection_settings() -> dict[str, Any]:
    """busConnectionSettings of system-app.bicep, its interpolated names resolved."""
    template = load("app/system-app.bicep")
    env = {
        name: template["variables"][name]["value"]
        for name in ("messagingConnection", "stateConnection")
    }
    raw = template["variables"]["busConnectionSettings"]["value"]
    return {evaluate(key.strip("'"), env): value for key, value in raw.items()}


def test_each_app_runs_its_bus_app_under_its_name() -> None:
    _, _, apps = module(load("system.bicep"), "app/system-app.bicep")
    assert dotted(apps["params"]["appName"]) == "app.name"
    assert dotted(apps["params"]["appModule"]) == "app.busApp"
    assert dotted(apps["params"]["store"]) == "app.store"
    assert dotted(apps["params"]["resources"]) == "app.resources"
    assert dotted(apps["params"]["sendsTo"]) == "app.sendsTo"
    template = load("app/system-app.bicep")
    _, _, function_app = module(template, "function-app.bicep")
    assert function_app["params"]["appModule"] == "appModule"
    assert dotted(function_app["params"]["storageAccountName"]) == "storage.outputs.name"
    assert connection_settings()["BUS_APP_NAME"] == "appName"
    # The connection settings come last: an app's extra settings cannot point it elsewhere.
    union = function_app["params"]["additionalAppSettings"]["function"]
    assert union["type"] == "union"
    assert list(union["parameters"].values())[-1] == "busConnectionSettings"
    assert {"ownRoles", "messagingRoles", "stateNames"} <= set(function_app["dependsOn"])


def test_the_two_connections_are_identity_based_one_per_account() -> None:
    settings = connection_settings()
    messaging, state = settings["BUS_STORAGE_SETTING"], settings["BUS_STATE_STORAGE_SETTING"]
    variables = load("app/system-app.bicep")["variables"]
    messaging = variables[messaging]["value"]
    state = variables[state]["value"]
    assert messaging != state
    assert messaging != "AzureWebJobsStorage" != state
    where = {"blob": "blob", "queue": "queue", "table": "table"}
    for kind in where:
        assert (
            dotted(settings[f"{messaging}__{kind}ServiceUri"])
            == f"messagingAccount.properties.primaryEndpoints.{kind}"
        )
        assert dotted(settings[f"{state}__{kind}ServiceUri"]) == f"storage.outputs.{kind}Endpoint"
    for connection in (messaging, state):
        assert settings[f"{connection}__credential"] == "managedidentity"
        assert dotted(settings[f"{connection}__clientId"]) == "identity.outputs.clientId"
    # The runtime reads each group as a whole connection, as the user-assigned identity.
    values = {
        name: (f"https://{name.split('__')[0].lower()}.example" if isinstance(v, dict) else v)
        for name, v in settings.items()
        if "__" in name
    }
    values.update({f"{c}__clientId": "client-id" for c in (messaging, state)})
    for connection in (messaging, state):
        loaded = load_storage_settings(values, connection)
        assert loaded.managed_identity
        assert loaded.client_id == "client-id"
        assert loaded.blob_service_uri == f"https://{connection.lower()}.example"
    resource = load("app/system-app.bicep")["resources"]["messagingAccount"]
    assert resource["existing"] is True
    assert unwrap(resource["config"])[2]["name"] == "messagingAccountName"


def test_a_postgres_app_gets_its_own_server_and_a_table_app_none() -> None:
    template = load("app/system-app.bicep")
    _, condition, body = module(template, "postgres.bicep")
    assert condition == "isPostgres"
    is_postgres = template["variables"]["isPostgres"]["value"]["operator"]
    assert is_postgres["type"] == "equals"
    assert set(is_postgres["operands"].values()) == {"store", "postgres"}
    assert dotted(body["params"]["appPrincipalId"]) == "identity.outputs.principalId"
    settings = template["variables"]["postgresAppSettings"]["value"]["operator"]["operands"]
    assert dotted(settings["true_value"]["BUS_POSTGRES_URL"]) == "postgres.outputs.url"
    assert settings["true_value"]["BUS_POSTGRES_ENTRA"] == "true"
    assert settings["false_value"] == {}


# --------------------------------------------------------------------------
# docs


def test_deploy_md_says_how_to_deploy_a_system_and_what_each_identity_may_do() -> None:
    text = DEPLOY_MD.read_text(encoding="utf-8")
    start = text.index("## Deploying a system of services")
    section = text[start : text.index("\n## ", start + 1)]
    assert "--template-file infra/system.bicep" in section
    assert "--parameters infra/system.parameters.json" in section
    for role in (
        "Storage Queue Data Contributor",
        "Storage Queue Data Message Sender",
        "Storage Blob Data Contributor",
        "Storage Table Data Contributor",
    ):
        assert role in section, role
    for setting in ("BUS_APP_NAME", "BUS_STORAGE_SETTING", "BUS_STATE_STORAGE_SETTING"):
        assert setting in section, setting


# --------------------------------------------------------------------------
# apps whose endpoints keep their rows as documents


def system_app(store: str, resources: Resources) -> dict[str, Any]:
    """What system-app.bicep is given for an app of this store, with what `bus resources`
    prints for these resources (without the comment)."""
    printed = json.loads(resources_json(resources))
    printed.pop("$comment")
    return {"appName": "shop", "store": store, "resources": printed, "sendsTo": []}


def deployed_for(params: Mapping[str, Any]) -> dict[str, set[tuple[str, str]]]:
    """What system-app.bicep deploys for ``params``, followed into its modules: the names in
    the app's own (state) account and, when its cosmos module is deployed, in its Cosmos DB
    account."""
    path = APP / "system-app.bicep"
    template = parse_bicep(path)
    env = file_environment(path, template, params)
    _, _, state = module(template, "state-names.bicep")
    named = {k: evaluate(state["params"][k], env) for k in ("endpoints", "blobEndpoints")}
    found = {"state": names_created("app/state-names.bicep", named), "cosmos": set()}
    _, condition, cosmos = module(template, "cosmos.bicep")
    if evaluate(condition, env) is True:
        containers = evaluate(cosmos["params"]["containerNames"], env)
        found["cosmos"] = cosmos_resources_in_file(
            APP / "cosmos.bicep", {"containerNames": containers}
        )
    return found


def test_the_system_templates_accept_every_store_the_library_has() -> None:
    spec = load("app/system-app.bicep")["parameters"]["store"]
    allowed = next(d["argument"] for d in spec["decorators"] if d["type"] == "allowed")
    assert sorted(allowed) == sorted(STORES)


def test_a_blob_app_gets_each_blob_endpoints_rows_container_in_its_own_account() -> None:
    resources = resources_for(["orders", "loyalty", "ledger"], "shop", blob_endpoints=["loyalty"])
    for store in ("blob", "table"):
        found = deployed_for(system_app(store, resources))
        assert found["state"] == {
            ("table", "orders"),
            ("table", "loyalty"),
            ("table", "ledger"),
            ("container", "loyalty-rows"),
        }
        assert found["cosmos"] == set()
    # The app's account-wide Blob Data Contributor covers them; no other app has a role there.
    assert Grant("own", "account", "own", BLOB_DATA_CONTRIBUTOR) in set(own_account_grants())


def test_a_cosmos_app_gets_an_account_of_its_own_with_a_container_per_cosmos_endpoint() -> None:
    resources = resources_for(["orders", "ledger"], "shop", cosmos_endpoints=["ledger"])
    found = deployed_for(system_app("cosmos", resources))
    assert found["cosmos"] == {("database", "bus"), ("container", "ledger")}
    assert found["state"] == {("table", "orders"), ("table", "ledger")}


def test_an_app_of_another_store_gets_no_cosmos_account() -> None:
    resources = resources_for(["orders", "payments"], "shop")
    for store in ("table", "postgres", "blob"):
        assert deployed_for(system_app(store, resources))["cosmos"] == set(), store


def test_a_cosmos_app_signs_in_to_its_account_as_its_identity() -> None:
    template = load("app/system-app.bicep")
    _, condition, body = module(template, "cosmos.bicep")
    assert condition == "isCosmos"
    is_cosmos = template["variables"]["isCosmos"]["value"]["operator"]
    assert is_cosmos["type"] == "equals"
    assert set(is_cosmos["operands"].values()) == {"store", "cosmos"}
    params = body["params"]
    assert dotted(params["appPrincipalId"]) == "identity.outputs.principalId"
    assert "deployerPrincipalId" not in params  # a system has no deployer's roles
    # Each app's account is its own (its suffix hashes the app's name), and its name fits
    # an account name (cosmos.bicep's maxLength) for the longest prefix and app name.
    assert "appName" in template["variables"]["suffix"]["value"]["function"]["parameters"].values()
    name = template["variables"]["cosmosName"]["value"]
    assert name == "cosmos-${prefix}-${take(appName, 10)}-${suffix}"
    longest = name.replace("${prefix}", "p" * 11).replace("${take(appName, 10)}", "a" * 10)
    longest = longest.replace("${suffix}", "s" * 13)  # uniqueString()'s length
    name_spec = load("app/cosmos.bicep")["parameters"]["name"]
    limit = next(d["argument"] for d in name_spec["decorators"] if d["type"] == "max_length")
    assert len(longest) <= limit == 44
    settings = template["variables"]["cosmosAppSettings"]["value"]["operator"]["operands"]
    assert settings["condition"] == "isCosmos"
    assert settings["false_value"] == {}
    chosen = settings["true_value"]
    assert set(chosen) == {"BUS_COSMOS_ENDPOINT", "BUS_COSMOS_DATABASE", "AZURE_CLIENT_ID"}
    assert dotted(chosen["BUS_COSMOS_ENDPOINT"]) == "cosmos.outputs.endpoint"
    _, _, function_app = module(template, "function-app.bicep")
    union = function_app["params"]["additionalAppSettings"]["function"]["parameters"]
    assert "cosmosAppSettings" in union.values()
    _, _, apps = module(load("system.bicep"), "app/system-app.bicep")
    for name in ("cosmosPublicNetworkAccess", "cosmosZoneRedundant"):
        assert apps["params"][name] == name
