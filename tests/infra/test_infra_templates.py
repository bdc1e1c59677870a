"""Structural checks on the Bicep templates under infra/.

The templates are parsed with pycep-parser (no Bicep compiler is available)
and the assertions look at the parsed declarations, not at raw text, except
where the property being checked is textual by nature (checkov comments,
key material that would only appear inside interpolated strings).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from provisioned import INFRA_DIR, bicep_files, dotted, parse_bicep, unwrap, walk

from shared.app_loader import APP_SETTING, DEFAULT_APP, load_app

MAIN = INFRA_DIR / "main.bicep"
APP = INFRA_DIR / "app"
DEPLOY_MD = INFRA_DIR.parent / "docs" / "deploy.md"

EXPECTED_FILES = {
    "main.bicep",
    "app/identity.bicep",
    "app/monitoring.bicep",
    "app/storage.bicep",
    "app/roles.bicep",
    "app/function-app.bicep",
    "app/ingress-auth.bicep",
    "app/alerts.bicep",
}

STORAGE_BLOB_DATA_OWNER = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b"
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
STORAGE_QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
STORAGE_TABLE_DATA_CONTRIBUTOR = "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
SCOPED_ROLE_TEMPLATES = ("queue-role.bicep", "container-role.bicep", "table-role.bicep")

GUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")

ALL_FILES = bicep_files()
FILE_IDS = [str(p.relative_to(INFRA_DIR)) for p in ALL_FILES]


# --------------------------------------------------------------------------
# helpers


def load(relative: str) -> dict[str, Any]:
    template: dict[str, Any] = parse_bicep(INFRA_DIR / relative)
    return template


def description(spec: dict[str, Any]) -> str | None:
    for decorator in spec.get("decorators", []):
        if decorator.get("type") == "description":
            return str(decorator.get("argument") or "")
    return None


def decorator_argument(spec: dict[str, Any], kind: str) -> Any:
    for decorator in spec.get("decorators", []):
        if decorator.get("type") == kind:
            return decorator.get("argument")
    return None


def resources_of_type(template: dict[str, Any], arm_type: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template.get("resources", {}).items() if r["type"] == arm_type}


def only_resource(template: dict[str, Any], arm_type: str) -> tuple[str, dict[str, Any]]:
    found = resources_of_type(template, arm_type)
    assert len(found) == 1, f"expected exactly one {arm_type}, found {sorted(found)}"
    ((name, resource),) = found.items()
    loop, condition, body = unwrap(resource["config"])
    assert loop is None, f"{arm_type} {name} must not be a loop"
    assert condition is None, f"{arm_type} {name} must be unconditional"
    return name, body


def modules_by_path(template: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    return {
        name: m
        for name, m in template.get("modules", {}).items()
        if m.get("type") == "local" and m["detail"]["path"] == path
    }


def app_settings(function_app_template: dict[str, Any]) -> dict[str, Any]:
    """The site's appSettings as name -> parsed value, following concat() of variables."""
    _, site = only_resource(function_app_template, "Microsoft.Web/sites")
    raw = site["properties"]["siteConfig"]["appSettings"]
    variables = function_app_template.get("variables", {})

    def expand(node: Any) -> list[Any]:
        if isinstance(node, list):
            return node
        if isinstance(node, str) and node in variables:
            return expand(variables[node]["value"])
        if isinstance(node, dict) and node.get("function", {}).get("type") == "concat":
            out: list[Any] = []
            for arg in node["function"]["parameters"].values():
                out.extend(expand(arg))
            return out
        if isinstance(node, dict) and "loop_type" in node:
            # [for setting in items(additionalAppSettings): {...}] adds caller-chosen names.
            return []
        raise AssertionError(f"cannot follow appSettings expression {node!r}")

    settings: dict[str, Any] = {}
    for entry in expand(raw):
        assert set(entry) == {"name", "value"}, entry
        assert entry["name"] not in settings, f"duplicate app setting {entry['name']}"
        settings[entry["name"]] = entry["value"]
    return settings


# --------------------------------------------------------------------------
# files and parsing


def test_expected_template_files_exist() -> None:
    present = {str(p.relative_to(INFRA_DIR)) for p in ALL_FILES}
    missing = EXPECTED_FILES - present
    assert not missing, f"missing templates: {sorted(missing)}"


@pytest.mark.parametrize("path", ALL_FILES, ids=FILE_IDS)
def test_template_parses(path: Path) -> None:
    template = parse_bicep(path)
    assert isinstance(template, dict)
    assert template.get("resources") or template.get("modules"), f"{path} declares nothing"


def test_main_targets_resource_group() -> None:
    assert load("main.bicep")["globals"]["scope"]["value"] == "resourceGroup"


def test_main_modules_point_at_existing_files() -> None:
    modules = load("main.bicep")["modules"]
    assert modules
    for name, module in modules.items():
        assert module["type"] == "local", name
        assert (INFRA_DIR / module["detail"]["path"]).is_file(), (
            f"module {name} -> {module['detail']['path']}"
        )


# --------------------------------------------------------------------------
# parameters and outputs


@pytest.mark.parametrize("path", ALL_FILES, ids=FILE_IDS)
def test_every_parameter_has_required_or_optional_description(path: Path) -> None:
    params = parse_bicep(path).get("parameters", {})
    assert params, f"{path} has no parameters"
    for name, spec in params.items():
        text = description(spec)
        assert text, f"{path.name}: param {name} has no @description"
        has_default = spec.get("default") is not None
        if has_default:
            assert text.startswith("Optional. "), (
                f"{path.name}: param {name} has a default; description must start 'Optional. '"
            )
        else:
            assert text.startswith("Required. "), (
                f"{path.name}: param {name} has no default; description must start 'Required. '"
            )
        assert len(text) > len("Optional. ") + 10, (
            f"{path.name}: param {name} description is too thin"
        )


@pytest.mark.parametrize("path", ALL_FILES, ids=FILE_IDS)
def test_every_output_has_description(path: Path) -> None:
    outputs = parse_bicep(path).get("outputs", {})
    assert outputs, f"{path} has no outputs"
    for name, spec in outputs.items():
        text = description(spec)
        assert (text or "").strip(), f"{path.name}: output {name} has no @description"


def test_main_parameters_file_matches_main() -> None:
    main_params = load("main.bicep")["parameters"]
    document = json.loads((INFRA_DIR / "main.parameters.json").read_text(encoding="utf-8"))
    given = document["parameters"]
    unknown = set(given) - set(main_params)
    assert not unknown, f"main.parameters.json sets unknown parameters {sorted(unknown)}"
    required = {name for name, spec in main_params.items() if spec.get("default") is None}
    assert required <= set(given), (
        f"main.parameters.json misses required {sorted(required - set(given))}"
    )
    for name, entry in given.items():
        assert set(entry) == {"value"}, (
            f"{name} must be a plain value (no Key Vault references needed)"
        )
        allowed = decorator_argument(main_params[name], "allowed")
        if allowed is not None:
            assert entry["value"] in allowed, f"{name}={entry['value']!r} not in {allowed}"
    prefix = given["namePrefix"]["value"]
    assert re.fullmatch(r"[a-z][a-z0-9]{2,10}", prefix), prefix


def test_main_has_sensible_defaults() -> None:
    params = load("main.bicep")["parameters"]
    assert dotted(params["location"]["default"]) is None  # an expression, not a fixed region
    assert (
        params["location"]["default"]["operator"]["operands"]["operand_1"]["function"]["type"]
        == "resource_group"
    )
    assert params["tags"]["type"] == "object"
    assert params["tags"]["default"] is not None
    assert params["namePrefix"]["default"] is None
    assert params["deployerPrincipalId"]["default"] == ""
    assert params["storagePublicNetworkAccess"]["default"] == "Enabled"
    assert sorted(decorator_argument(params["storagePublicNetworkAccess"], "allowed")) == [
        "Disabled",
        "Enabled",
    ]


# --------------------------------------------------------------------------
# storage account


def test_storage_account_is_locked_down() -> None:
    _, account = only_resource(load("app/storage.bicep"), "Microsoft.Storage/storageAccounts")
    props = account["properties"]
    assert props["allowSharedKeyAccess"] is False
    assert props["minimumTlsVersion"] == "TLS1_2"
    assert props["supportsHttpsTrafficOnly"] is True
    assert props["allowBlobPublicAccess"] is False
    assert props["defaultToOAuthAuthentication"] is True
    assert props["allowCrossTenantReplication"] is False
    assert account["kind"] == "StorageV2"


ZONE_REDUNDANT = {"Standard_ZRS", "Standard_GZRS", "Standard_RAGZRS"}


def test_storage_is_zone_redundant_by_default() -> None:
    storage = load("app/storage.bicep")
    _, account = only_resource(storage, "Microsoft.Storage/storageAccounts")
    reference = account["sku"]["name"]
    sku = storage["parameters"][reference]
    assert sku["default"] == "Standard_ZRS"
    allowed = set(decorator_argument(sku, "allowed"))
    assert {"Standard_LRS", "Standard_ZRS", "Standard_GZRS"} <= allowed

    main = load("main.bicep")
    main_sku = main["parameters"]["storageSkuName"]
    assert main_sku["default"] == "Standard_ZRS"
    assert set(decorator_argument(main_sku, "allowed")) == allowed
    (module,) = modules_by_path(main, "app/storage.bicep").values()
    _, _, body = unwrap(module["config"])
    assert body["params"][reference] == "storageSkuName"

    document = json.loads((INFRA_DIR / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["storageSkuName"]["value"] in ZONE_REDUNDANT


def test_deploy_md_says_what_each_replication_choice_means_for_messages_in_flight() -> None:
    text = DEPLOY_MD.read_text(encoding="utf-8")
    start = text.index("## Storage redundancy")
    section = text[start : text.index("\n## ", start + 1)]
    for sku in ("Standard_LRS", "Standard_ZRS", "Standard_GRS", "Standard_GZRS"):
        assert f"| `{sku}`" in section, f"no row for {sku}"
    for record in ("token", "outbox record", "queue"):
        assert record in section, f"the section does not say what happens to each {record}"


def test_storage_public_network_access_is_a_parameter() -> None:
    storage = load("app/storage.bicep")
    _, account = only_resource(storage, "Microsoft.Storage/storageAccounts")
    reference = account["properties"]["publicNetworkAccess"]
    assert reference in storage["parameters"], "publicNetworkAccess must come from a parameter"
    assert sorted(decorator_argument(storage["parameters"][reference], "allowed")) == [
        "Disabled",
        "Enabled",
    ]
    (module,) = modules_by_path(load("main.bicep"), "app/storage.bicep").values()
    _, _, body = unwrap(module["config"])
    assert body["params"][reference] == "storagePublicNetworkAccess"


def test_blob_containers_are_private() -> None:
    containers = resources_of_type(
        load("app/storage.bicep"), "Microsoft.Storage/storageAccounts/blobServices/containers"
    )
    assert len(containers) >= 2
    for name, resource in containers.items():
        _, _, body = unwrap(resource["config"])
        assert body["properties"]["publicAccess"] == "None", name


def test_storage_names_come_from_resources_json() -> None:
    storage = load("app/storage.bicep")
    loaders = [
        spec["value"]["function"]["parameters"]["file_path"]
        for spec in storage["variables"].values()
        if isinstance(spec["value"], dict)
        and spec["value"].get("function", {}).get("type") == "load_json_content"
    ]
    assert loaders, "storage.bicep must loadJsonContent the shared resources.json"
    for relative in loaders:
        assert (APP / relative).resolve() == (INFRA_DIR / "resources.json").resolve()


# --------------------------------------------------------------------------
# identity and roles


def test_role_assignment_names_use_guid_of_scope_principal_and_role() -> None:
    checked = 0
    for path in ALL_FILES:
        template = parse_bicep(path)
        for name, resource in resources_of_type(
            template, "Microsoft.Authorization/roleAssignments"
        ).items():
            _, _, body = unwrap(resource["config"])
            function = body["name"]["function"]
            assert function["type"] == "guid", f"{path.name}:{name} name must be guid(...)"
            args = list(function["parameters"].values())
            args = [a for a in args if a is not None]
            assert len(args) == 3, f"{path.name}:{name} guid() must take scope, principal and role"
            scope = body["scope"]
            assert dotted(args[0]) == f"{scope}.id", (
                f"{path.name}:{name} first guid() argument must be {scope}.id"
            )
            assert args[1] == body["properties"]["principalId"] == "principalId"
            assert args[2] == body["properties"]["roleDefinitionId"], (
                f"{path.name}:{name} third guid() argument must be the role definition id"
            )
            checked += 1
    assert checked >= 2


def test_roles_are_the_narrow_data_roles_only() -> None:
    roles = load("app/roles.bicep")
    granted = {s for node in walk(roles) if isinstance(node, str) for s in GUID.findall(node)}
    assert granted == {
        STORAGE_BLOB_DATA_CONTRIBUTOR,
        STORAGE_BLOB_DATA_OWNER,
        STORAGE_QUEUE_DATA_CONTRIBUTOR,
        STORAGE_TABLE_DATA_CONTRIBUTOR,
        MONITORING_METRICS_PUBLISHER,
    }
    storage_roles = roles["variables"]["storageDataRoles"]["value"]
    assert set(storage_roles) == {
        "storageBlobData",
        "storageQueueDataContributor",
        "storageTableDataContributor",
    }
    assert storage_roles["storageQueueDataContributor"] == STORAGE_QUEUE_DATA_CONTRIBUTOR
    assert storage_roles["storageTableDataContributor"] == STORAGE_TABLE_DATA_CONTRIBUTOR
    assignments = resources_of_type(roles, "Microsoft.Authorization/roleAssignments")
    scopes = {}
    for name, resource in assignments.items():
        _, _, body = unwrap(resource["config"])
        scopes[name] = roles["resources"][body["scope"]]["type"]
    assert sorted(scopes.values()) == [
        "Microsoft.Insights/components",
        "Microsoft.Storage/storageAccounts",
    ]
    # Every other template leaves role definitions alone, but for the one-scope role modules of
    # a system of services, which test_system_template.py holds to their scopes and roles.
    for path in ALL_FILES:
        if path.name not in {"roles.bicep", *SCOPED_ROLE_TEMPLATES}:
            assert not resources_of_type(
                parse_bicep(path), "Microsoft.Authorization/roleAssignments"
            ), path.name


def test_blob_role_is_contributor_unless_hierarchical_namespaces_are_on() -> None:
    roles = load("app/roles.bicep")
    variables = roles["variables"]
    assert variables["storageBlobDataContributorRoleId"]["value"] == STORAGE_BLOB_DATA_CONTRIBUTOR
    assert variables["storageBlobDataOwnerRoleId"]["value"] == STORAGE_BLOB_DATA_OWNER
    parameter = roles["parameters"]["hierarchicalNamespace"]
    assert parameter["type"] == "bool"
    assert parameter["default"] is False
    assert "Owner" in (description(parameter) or "")
    # hierarchicalNamespace ? storageBlobDataOwnerRoleId : storageBlobDataContributorRoleId
    choice = variables["storageDataRoles"]["value"]["storageBlobData"]
    assert choice["operator"] == {
        "type": "conditional",
        "operands": {
            "condition": "hierarchicalNamespace",
            "true_value": "storageBlobDataOwnerRoleId",
            "false_value": "storageBlobDataContributorRoleId",
        },
    }
    # The one GUID literal for Owner is only that variable; nothing else names it.
    owner_mentions = [
        node for node in walk(roles) if isinstance(node, str) and STORAGE_BLOB_DATA_OWNER in node
    ]
    assert owner_mentions == [STORAGE_BLOB_DATA_OWNER]

    storage = load("app/storage.bicep")
    assert storage["parameters"]["isHnsEnabled"]["default"] is False
    _, account = only_resource(storage, "Microsoft.Storage/storageAccounts")
    assert account["properties"]["isHnsEnabled"] == "isHnsEnabled"

    main = load("main.bicep")
    switch = main["parameters"]["storageHierarchicalNamespace"]
    assert switch["default"] is False
    assert description(switch)
    for module in modules_by_path(main, "app/roles.bicep").values():
        _, _, body = unwrap(module["config"])
        assert body["params"]["hierarchicalNamespace"] == "storageHierarchicalNamespace"
    for module in modules_by_path(main, "app/storage.bicep").values():
        _, _, body = unwrap(module["config"])
        assert body["params"]["isHnsEnabled"] == "storageHierarchicalNamespace"
    roles_row = next(
        line
        for line in DEPLOY_MD.read_text(encoding="utf-8").splitlines()
        if line.startswith("| app identity | Storage Blob Data")
    )
    assert roles_row.startswith("| app identity | Storage Blob Data Contributor"), roles_row


def test_main_grants_roles_to_identity_and_optional_deployer() -> None:
    main = load("main.bicep")
    role_modules = modules_by_path(main, "app/roles.bicep")
    by_principal = {}
    for module in role_modules.values():
        _, condition, body = unwrap(module["config"])
        by_principal[dotted(body["params"]["principalId"])] = (condition, body["params"])
    assert set(by_principal) == {"identity.outputs.principalId", "deployerPrincipalId"}

    condition, params = by_principal["identity.outputs.principalId"]
    assert condition is None
    assert params["principalType"] == "ServicePrincipal"
    assert dotted(params["appInsightsName"]) == "monitoring.outputs.appInsightsName"
    assert params["assignMonitoringRole"] is True

    condition, params = by_principal["deployerPrincipalId"]
    # if (!empty(deployerPrincipalId))
    assert condition["operator"]["type"] == "not"
    inner = condition["operator"]["operands"]["bool_value"]["function"]
    assert inner["type"] == "empty"
    assert inner["parameters"]["item_to_test"] == "deployerPrincipalId"
    assert params["principalType"] == "deployerPrincipalType"
    # The deployer gets the storage data roles only, not telemetry publishing.
    assert params["assignMonitoringRole"] is False


def test_identity_is_user_assigned() -> None:
    _, identity = only_resource(
        load("app/identity.bicep"), "Microsoft.ManagedIdentity/userAssignedIdentities"
    )
    assert identity["name"] == "name"
    outputs = load("app/identity.bicep")["outputs"]
    assert dotted(outputs["clientId"]["value"]) == "identity.properties.clientId"
    assert dotted(outputs["principalId"]["value"]) == "identity.properties.principalId"


# --------------------------------------------------------------------------
# no keys


KEY_MATERIAL = re.compile(
    r"listKeys|listAccountSas|listServiceSas|listConnectionStrings|AccountKey=|SharedAccessSignature=|DefaultEndpointsProtocol=",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", ALL_FILES, ids=FILE_IDS)
def test_no_keys_or_key_based_connection_strings(path: Path) -> None:
    template = parse_bicep(path)
    for node in walk(template):
        if not isinstance(node, dict):
            continue
        function = node.get("function")
        if isinstance(function, dict):
            assert function.get("type") != "list_func", (
                f"{path.name} calls {function['parameters'].get('func_name')}"
            )
        operator = node.get("operator")
        if isinstance(operator, dict) and operator.get("type") == "function_accessor":
            func_name = operator["operands"]["func_name"]
            assert not func_name.lower().startswith("list"), f"{path.name} calls .{func_name}()"
    # Interpolated strings keep their ${...} expressions as text, so scan it too.
    found = KEY_MATERIAL.search(path.read_text(encoding="utf-8"))
    assert found is None, f"{path.name} mentions key material: {found and found.group(0)}"


# --------------------------------------------------------------------------
# function app


def test_function_app_settings_are_identity_based() -> None:
    template = load("app/function-app.bicep")
    settings = app_settings(template)
    assert (
        dotted(settings["AzureWebJobsStorage__blobServiceUri"])
        == "storageAccount.properties.primaryEndpoints.blob"
    )
    assert (
        dotted(settings["AzureWebJobsStorage__queueServiceUri"])
        == "storageAccount.properties.primaryEndpoints.queue"
    )
    assert (
        dotted(settings["AzureWebJobsStorage__tableServiceUri"])
        == "storageAccount.properties.primaryEndpoints.table"
    )
    assert settings["AzureWebJobsStorage__credential"] == "managedidentity"
    assert settings["AzureWebJobsStorage__clientId"] == "identityClientId"
    assert template["parameters"]["identityClientId"]["default"] is None
    assert (
        dotted(settings["APPLICATIONINSIGHTS_CONNECTION_STRING"])
        == "appInsights.properties.ConnectionString"
    )
    assert (
        settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"]
        == "ClientId=${identityClientId};Authorization=AAD"
    )
    # The bus's traces and metrics go through Azure Monitor's distro (shared/observability.py);
    # its logs reach Application Insights through the host already.
    assert settings["OTEL_LOGS_EXPORTER"] == "none"

    # No key-based storage connection of any kind.
    assert "AzureWebJobsStorage" not in settings
    for name in settings:
        assert not re.search(r"accountkey|sastoken|sas_token|sharedaccess", name, re.IGNORECASE), (
            name
        )
        if "connection" in name.lower().replace("_", ""):
            assert name == "APPLICATIONINSIGHTS_CONNECTION_STRING", (
                f"unexpected connection-string setting {name}"
            )
    # Flex Consumption rejects these; the runtime comes from functionAppConfig.
    for forbidden in (
        "FUNCTIONS_WORKER_RUNTIME",
        "FUNCTIONS_EXTENSION_VERSION",
        "WEBSITE_RUN_FROM_PACKAGE",
        "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
    ):
        assert forbidden not in settings


def test_main_app_module_parameter_sets_bus_app() -> None:
    """Without it a deployment runs the sample app whatever the published folder holds."""
    main = load("main.bicep")
    assert main["parameters"]["appModule"]["type"] == "string"
    assert main["parameters"]["appModule"]["default"] == DEFAULT_APP
    (module,) = modules_by_path(main, "app/function-app.bicep").values()
    _, _, body = unwrap(module["config"])
    assert dotted(body["params"]["appModule"]) == "appModule"
    function_app = load("app/function-app.bicep")
    assert function_app["parameters"]["appModule"]["default"] == DEFAULT_APP
    assert dotted(app_settings(function_app)[APP_SETTING]) == "appModule"


def conditional(condition: str, true_value: str, false_value: str) -> dict[str, Any]:
    """``condition ? true_value : false_value`` as the parser reads it."""
    operands = {"condition": condition, "true_value": true_value, "false_value": false_value}
    return {"operator": {"type": "conditional", "operands": operands}}


def test_the_console_is_off_and_read_only_unless_asked_and_trusts_entra_only_behind_it() -> None:
    """The deployed console (docs/console.md) is bound only with BUS_CONSOLE_ENABLED, refuses
    actions unless the deployment allows them, and reads who signed in from the platform's
    header only when App Service authentication is in front to set it; otherwise its own
    secret, a secure parameter, is its credential."""
    main = load("main.bicep")
    assert main["parameters"]["consoleEnabled"]["default"] is False
    assert main["parameters"]["consoleReadOnly"]["default"] is True
    (module,) = modules_by_path(main, "app/function-app.bicep").values()
    _, _, body = unwrap(module["config"])
    given = body["params"]
    assert (given["consoleEnabled"], given["consoleReadOnly"]) == (
        "consoleEnabled",
        "consoleReadOnly",
    )
    assert given["consoleIdentity"] == conditional("entraAuthEnabled", "entra", "secret")
    assert given["consoleSecret"] == "consoleSecret"
    assert main["parameters"]["consoleSecret"]["default"] == ""
    for template in (main, load("app/function-app.bicep")):
        assert {"type": "secure"} in template["parameters"]["consoleSecret"]["decorators"]

    function_app = load("app/function-app.bicep")
    params = function_app["parameters"]
    assert params["consoleEnabled"]["default"] is False
    assert params["consoleReadOnly"]["default"] is True
    assert params["consoleIdentity"]["default"] == "secret"
    assert sorted(decorator_argument(params["consoleIdentity"], "allowed")) == ["entra", "secret"]
    assert params["consoleSecret"]["default"] == ""
    settings = app_settings(function_app)
    assert settings["BUS_CONSOLE_ENABLED"] == conditional("consoleEnabled", "true", "false")
    assert settings["BUS_CONSOLE_READ_ONLY"] == conditional("consoleReadOnly", "true", "false")
    assert settings["BUS_CONSOLE_IDENTITY"] == "consoleIdentity"
    assert settings["BUS_CONSOLE_SECRET"] == "consoleSecret"


def test_the_parameters_file_names_an_app_that_loads() -> None:
    document = json.loads((INFRA_DIR / "main.parameters.json").read_text(encoding="utf-8"))
    reference = document["parameters"]["appModule"]["value"]
    assert reference == DEFAULT_APP
    assert load_app(reference).endpoints


def test_function_app_runs_on_flex_consumption_as_the_identity() -> None:
    template = load("app/function-app.bicep")
    _, plan = only_resource(template, "Microsoft.Web/serverfarms")
    assert plan["sku"] == {"name": "FC1", "tier": "FlexConsumption"}
    assert plan["properties"]["reserved"] is True

    _, site = only_resource(template, "Microsoft.Web/sites")
    assert site["kind"] == "functionapp,linux"
    assert site["identity"]["type"] == "UserAssigned"
    assert [key.strip("'") for key in site["identity"]["userAssignedIdentities"]] == [
        "${identityId}"
    ]
    props = site["properties"]
    assert props["httpsOnly"] is True
    assert dotted(props["serverFarmId"]) == "plan.id"
    assert props["siteConfig"]["minTlsVersion"] == "1.2"
    assert props["siteConfig"]["ftpsState"] == "Disabled"

    config = props["functionAppConfig"]
    assert config["runtime"]["name"] == "python"
    assert config["runtime"]["version"] == "pythonVersion"
    assert template["parameters"]["pythonVersion"]["default"] == "3.11"
    assert load("main.bicep")["parameters"]["pythonVersion"]["default"] == "3.11"
    storage = config["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    assert (
        storage["value"]
        == "${storageAccount.properties.primaryEndpoints.blob}${deploymentContainerName}"
    )
    assert storage["authentication"] == {
        "type": "UserAssignedIdentity",
        "userAssignedIdentityResourceId": "identityId",
    }
    scale = config["scaleAndConcurrency"]
    assert scale["maximumInstanceCount"] == "maximumInstanceCount"
    assert scale["instanceMemoryMB"] == "instanceMemoryMB"


def test_key_vault_references_are_resolved_as_the_apps_identity() -> None:
    """A service's credential may be a Key Vault reference (docs/effects.md); with only a
    user-assigned identity, the platform resolves none unless told which identity to use."""
    _, site = only_resource(load("app/function-app.bicep"), "Microsoft.Web/sites")
    assert site["properties"]["keyVaultReferenceIdentity"] == "identityId"


def test_basic_publishing_credentials_are_disabled() -> None:
    policies = resources_of_type(
        load("app/function-app.bicep"), "Microsoft.Web/sites/basicPublishingCredentialsPolicies"
    )
    seen = {}
    for resource in policies.values():
        _, _, body = unwrap(resource["config"])
        seen[body["name"]] = body["properties"]["allow"]
    assert seen == {"ftp": False, "scm": False}


def test_main_wires_modules_together() -> None:
    main = load("main.bicep")
    (module,) = modules_by_path(main, "app/function-app.bicep").values()
    loop, condition, body = unwrap(module["config"])
    assert loop is None
    assert condition is None
    params = body["params"]
    assert dotted(params["identityId"]) == "identity.outputs.id"
    assert dotted(params["identityClientId"]) == "identity.outputs.clientId"
    assert dotted(params["storageAccountName"]) == "storage.outputs.name"
    assert dotted(params["deploymentContainerName"]) == "storage.outputs.deploymentContainerName"
    assert dotted(params["appInsightsName"]) == "monitoring.outputs.appInsightsName"
    # The app must not start before its identity can read storage.
    assert "appRoles" in body.get("depends_on", body.get("dependsOn", []))


def test_storage_deployment_container_is_the_one_the_app_uses() -> None:
    storage = load("app/storage.bicep")
    assert storage["variables"]["deploymentContainerName"]["value"] == "deployments"
    assert (
        storage["outputs"]["deploymentContainerName"]["value"]["operator"]["operands"]["operand_1"]
        == "deploymentContainer"
    )


# --------------------------------------------------------------------------
# optional Microsoft Entra ID authentication of the HTTP routes

ENTRA_PARAMS = {
    "tenantId": "entraTenantId",
    "clientId": "entraClientId",
    "allowedAudiences": "entraAllowedAudiences",
    "allowedClientApplications": "entraAllowedClientApplications",
}


def test_entra_authentication_is_off_by_default_and_deployed_only_when_asked() -> None:
    main = load("main.bicep")
    params = main["parameters"]
    assert params["entraAuthEnabled"]["type"] == "bool"
    assert params["entraAuthEnabled"]["default"] is False
    assert params["entraClientId"]["default"] == ""
    assert params["entraAllowedAudiences"]["default"] == []
    assert params["entraAllowedClientApplications"]["default"] == []
    tenant = params["entraTenantId"]["default"]["operator"]["operands"]
    assert tenant["operand_1"]["function"]["type"] == "subscription"
    assert tenant["operand_2"] == "tenantId"

    (module,) = modules_by_path(main, "app/ingress-auth.bicep").values()
    loop, condition, body = unwrap(module["config"])
    assert loop is None
    assert condition == "entraAuthEnabled"
    given = body["params"]
    assert dotted(given.pop("functionAppName")) == "functionApp.outputs.name"
    assert given == ENTRA_PARAMS

    outcome = main["outputs"]["httpAuthentication"]["value"]["operator"]
    assert outcome["type"] == "conditional"
    assert outcome["operands"] == {
        "condition": "entraAuthEnabled",
        "true_value": "entraIdToken+functionKey",
        "false_value": "functionKey",
    }


def test_entra_authentication_requires_a_token_for_the_ingress_from_an_allowed_client() -> None:
    template = load("app/ingress-auth.bicep")
    (site_name, site) = only_resource(template, "Microsoft.Web/sites")
    assert template["resources"][site_name]["existing"] is True
    assert site["name"] == "functionAppName"
    _, config = only_resource(template, "Microsoft.Web/sites/config")
    assert config["parent"] == site_name
    assert config["name"] == "authsettingsV2"

    props = config["properties"]
    assert props["platform"]["enabled"] is True
    assert props["globalValidation"] == {
        "requireAuthentication": True,
        "unauthenticatedClientAction": "Return401",
    }
    assert props["httpSettings"]["requireHttps"] is True
    assert props["login"]["tokenStore"]["enabled"] is False
    assert set(props["identityProviders"]) == {"azureActiveDirectory"}
    entra = props["identityProviders"]["azureActiveDirectory"]
    assert entra["enabled"] is True
    assert entra["registration"] == {
        "clientId": "clientId",
        "openIdIssuer": "${environment().authentication.loginEndpoint}${tenantId}/v2.0",
    }
    validation = entra["validation"]
    assert validation["defaultAuthorizationPolicy"] == {
        "allowedApplications": "allowedClientApplications"
    }
    # Without explicit audiences: both forms of the ingress registration's own audience.
    audiences = template["variables"][validation["allowedAudiences"]]["value"]["operator"]
    assert audiences["operands"] == {
        "condition": {
            "function": {"type": "empty", "parameters": {"item_to_test": "allowedAudiences"}}
        },
        "true_value": ["api://${clientId}", "clientId"],
        "false_value": "allowedAudiences",
    }

    client_id = template["parameters"]["clientId"]
    assert client_id["default"] is None  # enabling the option without a registration fails
    assert decorator_argument(client_id, "min_length") == 36
    assert decorator_argument(client_id, "max_length") == 36


def test_the_client_certificate_skip_names_what_covers_callers_instead() -> None:
    text = (APP / "function-app.bicep").read_text(encoding="utf-8")
    (reason,) = [
        m.group(2)
        for m in map(SKIP.search, text.splitlines())
        if m and m.group(1) == "CKV_AZURE_17"
    ]
    assert "function key" in reason
    assert "entraAuthEnabled" in reason
    assert "ingress-auth.bicep" in reason


def test_every_main_parameter_and_output_is_documented_in_deploy_md() -> None:
    rows = [
        line for line in DEPLOY_MD.read_text(encoding="utf-8").splitlines() if line.startswith("| ")
    ]
    documented = {name for row in rows for name in re.findall(r"`([A-Za-z]+)`", row.split("|")[1])}
    main = load("main.bicep")
    missing = (set(main["parameters"]) | set(main["outputs"])) - documented
    assert not missing, f"docs/deploy.md has no table row for {sorted(missing)}"


# --------------------------------------------------------------------------
# monitoring


def test_application_insights_is_workspace_based_without_local_auth() -> None:
    monitoring = load("app/monitoring.bicep")
    workspace_name, _ = only_resource(monitoring, "Microsoft.OperationalInsights/workspaces")
    _, components = only_resource(monitoring, "Microsoft.Insights/components")
    props = components["properties"]
    assert props["DisableLocalAuth"] is True
    assert dotted(props["WorkspaceResourceId"]) == f"{workspace_name}.id"


# --------------------------------------------------------------------------
# checkov suppressions


SKIP = re.compile(r"//\s*checkov:skip=(CKV2?_[A-Z]+_\d+)(?::(.*))?$")


@pytest.mark.parametrize("path", ALL_FILES, ids=FILE_IDS)
def test_checkov_skips_sit_inside_resource_bodies_with_a_reason(path: Path) -> None:
    inside: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("resource ") and line.rstrip().endswith("{"):
            inside = line.split()[1]
        elif line.rstrip() in {"}", "}]"}:
            inside = None
        match = SKIP.search(line)
        if match:
            assert inside is not None, f"{path.name}:{number} checkov skip outside a resource body"
            reason = (match.group(2) or "").strip()
            assert len(reason) >= 30, (
                f"{path.name}:{number} checkov skip {match.group(1)} needs a real reason"
            )
