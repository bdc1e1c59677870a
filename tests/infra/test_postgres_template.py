"""The optional PostgreSQL Flexible Server (infra/app/postgres.bicep): Entra authentication
only, an administrator identity of its own, the app identity as a plain role, TLS, and the
app settings the library reads."""

from __future__ import annotations

from typing import Any

from provisioned import INFRA_DIR, dotted, parse_bicep, unwrap

from shared.bus.state.connection import ENTRA_SETTING, URL_SETTING

POSTGRES = INFRA_DIR / "app" / "postgres.bicep"
MAIN = INFRA_DIR / "main.bicep"


def resources(template: dict[str, Any], arm_type: str) -> list[tuple[Any, dict[str, Any]]]:
    """(condition, body) of every resource of ``arm_type``."""
    found = []
    for resource in template["resources"].values():
        if resource["type"] == arm_type:
            _, condition, body = unwrap(resource["config"])
            found.append((condition, body))
    return found


def test_the_server_accepts_entra_tokens_only() -> None:
    template = parse_bicep(POSTGRES)
    [(condition, server)] = resources(template, "Microsoft.DBforPostgreSQL/flexibleServers")

    assert condition is None
    auth = server["properties"]["authConfig"]
    assert auth["activeDirectoryAuth"] == "Enabled"
    assert auth["passwordAuth"] == "Disabled"
    assert "administratorLogin" not in server["properties"]
    assert not any("password" in name.lower() for name in template["parameters"])


def test_the_app_identity_is_no_administrator_of_the_server() -> None:
    template = parse_bicep(POSTGRES)
    principals = resources(template, "Microsoft.DBforPostgreSQL/flexibleServers/administrators")
    unconditional = [body for condition, body in principals if condition is None]

    [admin] = unconditional
    assert dotted(admin["name"]) == "dbAdmin.properties.principalId"
    assert dotted(admin["properties"]["principalName"]) == "dbAdmin.name"
    names = [dotted(body["name"]) for _, body in principals]
    assert "appPrincipalId" not in names


def test_a_deployment_script_makes_the_app_identity_a_plain_role() -> None:
    template = parse_bicep(POSTGRES)
    [(condition, script)] = resources(template, "Microsoft.Resources/deploymentScripts")

    assert condition["operator"]["operands"] == {
        "operand_1": "publicNetworkAccess",
        "operand_2": "Enabled",
    }
    assert script["kind"] == "AzureCLI"
    assert list(script["identity"]["userAssignedIdentities"]) == ["'${dbAdmin.id}'"]
    properties = script["properties"]
    loaded = properties["scriptContent"]["function"]["parameters"]["file_path"]
    env = {item["name"]: item["value"] for item in properties["environmentVariables"]}
    sql_file = env["ROLE_SQL"]["function"]["parameters"]["file_path"]
    assert (POSTGRES.parent / loaded).is_file()
    assert (POSTGRES.parent / sql_file).is_file()
    assert env["APP_ROLE"] == "appPrincipalName"
    assert env["APP_OBJECT_ID"] == "appPrincipalId"
    assert dotted(env["PGUSER"]) == "dbAdmin.name"
    assert dotted(env["PGDATABASE"]) == "database.name"


def test_tls_is_required_and_the_url_asks_for_it() -> None:
    template = parse_bicep(POSTGRES)
    [(_, setting)] = resources(template, "Microsoft.DBforPostgreSQL/flexibleServers/configurations")

    assert (setting["name"], setting["properties"]["value"]) == ("require_secure_transport", "on")
    url = template["outputs"]["url"]["value"]
    assert url.startswith("postgresql://${appPrincipalName}@")
    assert url.endswith("?sslmode=require")
    assert ":" not in url.split("//", 1)[1].split("@", 1)[0]  # no password in the URL


def test_main_deploys_it_only_when_asked_and_sets_the_library_settings() -> None:
    main = parse_bicep(MAIN)
    module = main["modules"]["postgres"]

    assert module["detail"]["path"] == "app/postgres.bicep"
    assert module["config"]["condition"] == "postgresEnabled"
    assert main["parameters"]["postgresEnabled"]["default"] is False
    settings = main["variables"]["postgresAppSettings"]["value"]["operator"]["operands"]
    assert settings["condition"] == "postgresEnabled"
    assert settings["false_value"] == {}
    chosen = settings["true_value"]
    assert set(chosen) == {URL_SETTING, ENTRA_SETTING, "AZURE_CLIENT_ID"}
    assert chosen[ENTRA_SETTING] == "true"
    assert dotted(chosen[URL_SETTING]) == "postgres.outputs.url"
