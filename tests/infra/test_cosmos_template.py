"""The stores of endpoints that keep their rows as documents, in the single app's template
(infra/main.bicep): the rows container of each ``store="blob"`` endpoint, and the optional
Cosmos DB account (infra/app/cosmos.bicep) with a container per ``store="cosmos"`` endpoint,
reached by identity only.

What is deployed is computed from the templates (``provisioned``) over a resources file
written into a copy of ``infra/``, as ``bus resources`` would write it for an app with such
endpoints, and over one without any.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from provisioned import (
    DEPLOYMENT_CONTAINER,
    INFRA_DIR,
    cosmos_provisioned,
    dotted,
    expected_resources,
    parse_bicep,
    provisioned_resources,
    unwrap,
)

from shared.resources import load_resources, resources_for, resources_json

COSMOS = INFRA_DIR / "app" / "cosmos.bicep"
MAIN = INFRA_DIR / "main.bicep"
DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"
SETTINGS = {"BUS_COSMOS_ENDPOINT", "BUS_COSMOS_DATABASE", "AZURE_CLIENT_ID"}


def resources(template: dict[str, Any], arm_type: str) -> list[tuple[Any, Any, dict[str, Any]]]:
    """(loop, condition, body) of every resource of ``arm_type``."""
    return [
        unwrap(resource["config"])
        for resource in template["resources"].values()
        if resource["type"] == arm_type
    ]


def only(template: dict[str, Any], arm_type: str) -> dict[str, Any]:
    [(loop, condition, body)] = resources(template, arm_type)
    assert loop is None
    assert condition is None
    return body


def infra_for(
    tmp_path: Path, blob: tuple[str, ...] = (), cosmos: tuple[str, ...] = ()
) -> tuple[Path, Path]:
    """A copy of infra/ whose resources file is what `bus resources` prints for an app with
    these endpoints, ``blob`` and ``cosmos`` among them; and that file."""
    infra = tmp_path / "infra"
    shutil.copytree(INFRA_DIR, infra)
    endpoints = ["orders", "loyalty", "ledger", "shipping"]
    listed = resources_for(endpoints, None, blob_endpoints=blob, cosmos_endpoints=cosmos)
    path = infra / "resources.json"
    path.write_text(resources_json(listed), encoding="utf-8")
    return infra, path


# --------------------------------------------------------------------------
# what main.bicep deploys for a resources file


def test_an_app_without_document_endpoints_gets_no_account_and_no_rows_container(
    tmp_path: Path,
) -> None:
    infra, path = infra_for(tmp_path)
    assert "cosmosEndpoints" not in json.loads(path.read_text(encoding="utf-8"))
    assert cosmos_provisioned(infra) == set()
    provisioned = provisioned_resources(infra)
    assert not {name for kind, name in provisioned if name.endswith("-rows")}
    assert provisioned == expected_resources(path) | {("container", DEPLOYMENT_CONTAINER)}


def test_each_blob_endpoint_gets_its_rows_container_in_the_apps_account(tmp_path: Path) -> None:
    infra, path = infra_for(tmp_path, blob=("loyalty", "shipping"))
    provisioned = provisioned_resources(infra)
    assert {("container", "loyalty-rows"), ("container", "shipping-rows")} <= provisioned
    assert ("container", "orders-rows") not in provisioned
    # Exactly what the library writes to (shared.resources.rows_container), nothing else.
    assert provisioned == expected_resources(path) | {("container", DEPLOYMENT_CONTAINER)}
    used = load_resources(path)
    assert {("container", c) for c in used.rows_containers} <= provisioned
    # Blob endpoints need no Cosmos DB.
    assert cosmos_provisioned(infra) == set()


def test_cosmos_endpoints_get_the_account_its_database_and_a_container_each(
    tmp_path: Path,
) -> None:
    infra, path = infra_for(tmp_path, blob=("loyalty",), cosmos=("ledger", "orders"))
    assert cosmos_provisioned(infra) == {
        ("account", "cosmos"),
        ("database", "bus"),
        ("container", "ledger"),
        ("container", "orders"),
    }
    assert set(load_resources(path).cosmos_endpoints) == {"ledger", "orders"}
    # Their queues and tables are the same as any endpoint's.
    assert ("table", "ledger") in provisioned_resources(infra)


def test_an_empty_cosmos_list_deploys_no_account(tmp_path: Path) -> None:
    infra, path = infra_for(tmp_path)
    document = json.loads(path.read_text(encoding="utf-8"))
    document["cosmosEndpoints"] = []
    document["blobEndpoints"] = []
    path.write_text(json.dumps(document), encoding="utf-8")
    assert cosmos_provisioned(infra) == set()
    assert provisioned_resources(infra) == expected_resources(path) | {
        ("container", DEPLOYMENT_CONTAINER)
    }


def test_the_repository_file_deploys_what_it_lists() -> None:
    listed = load_resources(INFRA_DIR / "resources.json")
    expected = {("container", name) for name in listed.cosmos_endpoints}
    found = {r for r in cosmos_provisioned() if r[0] == "container"}
    assert found == expected
    assert bool(cosmos_provisioned()) == bool(listed.cosmos_endpoints)


def test_main_deploys_the_account_only_for_cosmos_endpoints_and_sets_the_library_settings() -> None:
    main = parse_bicep(MAIN)
    module = main["modules"]["cosmos"]
    assert module["detail"]["path"] == "app/cosmos.bicep"
    assert module["config"]["condition"] == "cosmosEnabled"
    params = module["config"]["config"]["params"]
    assert params["containerNames"] == "cosmosContainerNames"
    assert params["databaseName"] == "cosmosDatabaseName"
    assert dotted(params["appPrincipalId"]) == "identity.outputs.principalId"
    assert params["deployerPrincipalId"] == "deployerPrincipalId"
    assert main["parameters"]["cosmosDatabaseName"]["default"] == "bus"
    assert main["parameters"]["cosmosZoneRedundant"]["default"] is True
    assert main["parameters"]["cosmosPublicNetworkAccess"]["default"] == "Enabled"

    settings = main["variables"]["cosmosAppSettings"]["value"]["operator"]["operands"]
    assert settings["condition"] == "cosmosEnabled"
    assert settings["false_value"] == {}
    chosen = settings["true_value"]
    assert set(chosen) == SETTINGS  # no BUS_COSMOS_KEY: the app signs in as its identity
    assert dotted(chosen["BUS_COSMOS_ENDPOINT"]) == "cosmos.outputs.endpoint"
    assert dotted(chosen["BUS_COSMOS_DATABASE"]) == "cosmos.outputs.databaseName"
    assert dotted(chosen["AZURE_CLIENT_ID"]) == "identity.outputs.clientId"
    function_app = main["modules"]["functionApp"]
    union = function_app["config"]["params"]["additionalAppSettings"]["function"]
    merged = list(union["parameters"].values())
    assert "cosmosAppSettings" in merged
    # The deployer's own additionalAppSettings still come last.
    assert merged[-1] == "additionalAppSettings"


# --------------------------------------------------------------------------
# the account


def test_the_account_is_serverless_nosql_and_refuses_keys() -> None:
    template = parse_bicep(COSMOS)
    account = only(template, "Microsoft.DocumentDB/databaseAccounts")
    assert account["kind"] == "GlobalDocumentDB"  # the API for NoSQL
    props = account["properties"]
    assert props["capabilities"] == [{"name": "EnableServerless"}]
    assert props["disableLocalAuth"] is True
    assert props["disableKeyBasedMetadataWriteAccess"] is True
    assert props["minimalTlsVersion"] == "Tls12"
    assert props["publicNetworkAccess"] == "publicNetworkAccess"
    assert props["enableMultipleWriteLocations"] is False
    # Serverless: one region, no failover regions.
    [location] = props["locations"]
    assert location["failoverPriority"] == 0
    assert location["isZoneRedundant"] == "zoneRedundant"
    # Another instance's read sees the last acknowledged write, as in Table Storage.
    assert props["consistencyPolicy"] == {"defaultConsistencyLevel": "Strong"}
    assert not any("key" in name.lower() for name in template.get("outputs", {}))


def test_each_container_is_partitioned_by_id_and_indexes_only_the_id() -> None:
    template = parse_bicep(COSMOS)
    database = only(template, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases")
    assert database["name"] == "databaseName"
    assert database["properties"]["resource"] == {"id": "databaseName"}
    [(loop, condition, container)] = resources(
        template, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers"
    )
    assert condition is None
    assert loop["detail"]["array_name"] == "containerNames"
    assert container["parent"] == "database"
    resource = container["properties"]["resource"]
    assert resource["id"] == container["name"] == loop["detail"]["item_name"]
    assert resource["partitionKey"] == {"paths": ["/id"], "kind": "Hash", "version": 2}
    indexing = resource["indexingPolicy"]
    assert indexing["includedPaths"] == [{"path": "/id/?"}]
    assert indexing["excludedPaths"] == [{"path": "/*"}]
    # Serverless: no throughput anywhere.
    assert "options" not in resource
    assert "options" not in container["properties"]


def test_the_identity_gets_the_built_in_data_contributor_role_on_the_account() -> None:
    template = parse_bicep(COSMOS)
    [(loop, condition, assignment)] = resources(
        template, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments"
    )
    assert condition is None
    principal = loop["detail"]["item_name"]
    assert loop["detail"]["array_name"] == "principals"
    principals = template["variables"]["principals"]["value"]["operator"]["operands"]
    assert principals["true_value"] == ["appPrincipalId"]
    assert principals["false_value"] == ["appPrincipalId", "deployerPrincipalId"]
    assert template["parameters"]["deployerPrincipalId"]["default"] == ""
    assert template["variables"]["dataContributorRoleId"]["value"] == DATA_CONTRIBUTOR
    assert assignment["parent"] == "account"
    props = assignment["properties"]
    assert props["principalId"] == principal
    assert dotted(props["scope"]) == "account.id"
    assert props["roleDefinitionId"] == (
        "${account.id}/sqlRoleDefinitions/${dataContributorRoleId}"
    )
    name = assignment["name"]["function"]
    assert name["type"] == "guid"
    args = [a for a in name["parameters"].values() if a is not None]
    assert [dotted(args[0]), args[1], args[2]] == ["account.id", principal, "dataContributorRoleId"]
    # The role is the data plane's only: no Azure role assignment, no custom role definition.
    types = {r["type"] for r in template["resources"].values()}
    assert "Microsoft.Authorization/roleAssignments" not in types
    assert "Microsoft.DocumentDB/databaseAccounts/sqlRoleDefinitions" not in types


def test_the_outputs_locate_the_account_and_database_and_hold_no_secret() -> None:
    outputs = parse_bicep(COSMOS)["outputs"]
    assert dotted(outputs["endpoint"]["value"]) == "account.properties.documentEndpoint"
    assert dotted(outputs["databaseName"]["value"]) == "database.name"


@pytest.mark.parametrize("check", ["CKV_AZURE_101", "CKV_AZURE_100"])
def test_the_checks_skipped_on_the_account_say_why(check: str) -> None:
    text = COSMOS.read_text(encoding="utf-8")
    [line] = [line for line in text.splitlines() if f"checkov:skip={check}:" in line]
    assert len(line.split(":", 2)[2]) > 80


def test_deploy_md_says_what_is_created_how_the_app_signs_in_what_it_costs_and_how_to_stop() -> (
    None
):
    text = (INFRA_DIR.parent / "docs" / "deploy.md").read_text(encoding="utf-8")
    start = text.index("## Cosmos DB and blob documents")
    section = text[start : text.index("\n## ", start + 1)]
    for said in (
        "<endpoint>-rows",  # what is created
        "serverless",
        "Cosmos DB Built-in Data Contributor",
        *sorted(SETTINGS),
        "disableLocalAuth",  # how the app signs in
        "BUS_COSMOS_KEY",
        "request units",  # what it costs
        "az cosmosdb delete",  # how to turn it off
    ):
        assert said in section, said
