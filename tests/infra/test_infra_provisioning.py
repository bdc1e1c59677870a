"""Every queue, poison queue, table and container named in infra/resources.json
is provisioned by the Bicep templates, and nothing is hard-coded beside it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from provisioned import (
    DEPLOYMENT_CONTAINER,
    INFRA_DIR,
    POISON_SUFFIX,
    RESOURCES_JSON,
    UnsupportedExpression,
    expected_resources,
    provisioned_resources,
)


def names() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RESOURCES_JSON.read_text(encoding="utf-8"))
    return data


def copy_infra(tmp_path: Path) -> Path:
    target = tmp_path / "infra"
    shutil.copytree(INFRA_DIR, target)
    return target


def test_resources_json_lists_something() -> None:
    data = names()
    assert data["endpoints"], "no endpoints in resources.json"
    assert data["tables"]
    assert data["containers"]


def test_every_name_in_resources_json_is_provisioned() -> None:
    missing = expected_resources() - provisioned_resources()
    assert not missing, f"resources.json names not provisioned by infra/: {sorted(missing)}"


def test_each_endpoint_has_queue_poison_queue_and_table() -> None:
    provisioned = provisioned_resources()
    for endpoint in names()["endpoints"]:
        assert ("queue", endpoint) in provisioned
        assert ("queue", endpoint + POISON_SUFFIX) in provisioned
        assert ("table", endpoint) in provisioned


def test_only_resources_json_names_plus_deployment_container_are_provisioned() -> None:
    # Anything else would be a name hard-coded in a template, out of sync with
    # the Python provisioner that reads the same JSON.
    assert provisioned_resources() == expected_resources() | {("container", DEPLOYMENT_CONTAINER)}


def test_adding_names_to_resources_json_provisions_them(tmp_path: Path) -> None:
    infra = copy_infra(tmp_path)
    data = names()
    data["endpoints"].append("inventory2")
    data["tables"]["audit"] = "auditlog"
    data["containers"]["archive"] = "archive"
    (infra / "resources.json").write_text(json.dumps(data), encoding="utf-8")

    provisioned = provisioned_resources(infra)
    assert {
        ("queue", "inventory2"),
        ("queue", "inventory2-poison"),
        ("table", "inventory2"),
        ("table", "auditlog"),
        ("container", "archive"),
    } <= provisioned
    assert provisioned == expected_resources(infra / "resources.json") | {
        ("container", DEPLOYMENT_CONTAINER)
    }


def test_removing_an_endpoint_from_resources_json_removes_it(tmp_path: Path) -> None:
    infra = copy_infra(tmp_path)
    data = names()
    dropped = data["endpoints"].pop()
    (infra / "resources.json").write_text(json.dumps(data), encoding="utf-8")
    provisioned = provisioned_resources(infra)
    assert ("queue", dropped) not in provisioned
    assert ("queue", dropped + POISON_SUFFIX) not in provisioned


def test_names_are_valid_azure_storage_names() -> None:
    queue_or_container = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]")
    table = re.compile(r"[A-Za-z][A-Za-z0-9]{2,62}")
    for kind, name in provisioned_resources():
        pattern = table if kind == "table" else queue_or_container
        assert pattern.fullmatch(name), f"invalid {kind} name {name!r}"


# --------------------------------------------------------------------------
# the helper itself must notice when templates stop provisioning names


def test_helper_ignores_a_storage_module_that_main_does_not_always_deploy(tmp_path: Path) -> None:
    infra = copy_infra(tmp_path)
    main = infra / "main.bicep"
    text = main.read_text(encoding="utf-8")
    declaration = "module storage 'app/storage.bicep' = {"
    assert declaration in text
    main.write_text(
        text.replace(declaration, "module storage 'app/storage.bicep' = if (false) {"),
        encoding="utf-8",
    )
    assert provisioned_resources(infra) == set()


def test_helper_notices_a_dropped_poison_queue_loop(tmp_path: Path) -> None:
    infra = copy_infra(tmp_path)
    storage = infra / "app" / "storage.bicep"
    text = storage.read_text(encoding="utf-8")
    assert "'${endpoint}-poison'" in text
    storage.write_text(text.replace("'${endpoint}-poison'", "endpoint"), encoding="utf-8")
    missing = expected_resources() - provisioned_resources(infra)
    assert missing == {("queue", e + POISON_SUFFIX) for e in names()["endpoints"]}


def test_helper_refuses_expressions_it_cannot_evaluate(tmp_path: Path) -> None:
    infra = copy_infra(tmp_path)
    storage = infra / "app" / "storage.bicep"
    text = storage.read_text(encoding="utf-8")
    storage.write_text(text.replace("'${endpoint}-poison'", "toUpper(endpoint)"), encoding="utf-8")
    with pytest.raises(UnsupportedExpression):
        provisioned_resources(infra)


def test_names_the_library_uses_are_provisioned() -> None:
    # shared.resources reads the same JSON for the app and the Azurite provisioner.
    from shared.resources import load_resources

    used = load_resources(INFRA_DIR / "resources.json")
    wanted = (
        {("queue", name) for name in used.queue_names}
        | {("table", name) for name in used.table_names}
        | {("container", name) for name in used.container_names}
        | {("container", name) for name in used.rows_containers}
    )
    assert wanted
    missing = wanted - provisioned_resources()
    assert not missing, f"used by the library but not provisioned: {sorted(missing)}"
