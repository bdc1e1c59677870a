"""Resource names come from the app; infra/resources.json is generated from it and checked;
the provisioner creates them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.local.azurite import REPO_ROOT
from shared.app_loader import APP_SETTING, configured_app
from shared.errors import ConfigurationError, NotFound
from shared.provisioning import provision
from shared.resources import (
    RESOURCES_FILE,
    Resources,
    check_resources_file,
    load_resources,
    poison_queue,
    resources_for,
    resources_json,
)
from shared.runtime import Worker
from shared.settings import LOCAL_SETTINGS_FILE, resolve_settings
from tests.conftest import CHECKOUT_ENVIRON, Backend, sample_provider_settings, unique_name

CHECKED_IN = REPO_ROOT / RESOURCES_FILE


def test_the_repository_resource_file_is_valid() -> None:
    resources = load_resources(CHECKED_IN)
    assert resources.endpoints
    assert {"tokens", "topics", "parked", "payloads"} <= set(resources.containers)
    for endpoint in resources.endpoints:
        assert endpoint in resources.queue_names
        assert poison_queue(endpoint) in resources.queue_names
        assert endpoint in resources.table_names


def test_the_repository_resource_file_is_what_bus_resources_prints_for_the_configured_app() -> None:
    """Bicep provisions what the checked-in file lists: it must be the names of the app this
    checkout is configured to run (``BUS_APP`` from the environment the suite started with or
    the checkout's ``local.settings.json``, the sample when unset), the one test that reads
    the checkout's configuration. On failure the message names the app and the command."""
    settings = resolve_settings(  # the sample's provider, unless the checkout names its own
        environ={**sample_provider_settings(), **CHECKOUT_ENVIRON},
        local_file=REPO_ROOT / LOCAL_SETTINGS_FILE,
    )
    app = settings.get(APP_SETTING) or "the sample app (BUS_APP unset)"
    checked = f"checked against {app} ({APP_SETTING} from the {settings.origin(APP_SETTING)})"
    # As `bus resources` prints them: a worker's, with the performer the runtime adds to an
    # app that declares services.
    expected = Worker(configured_app(settings), settings).resources
    try:
        check_resources_file(expected, CHECKED_IN)
    except ConfigurationError as e:
        pytest.fail(f"{e}; {checked}")
    assert CHECKED_IN.read_text() == resources_json(expected), checked


def test_a_file_that_does_not_match_the_app_is_refused_naming_the_command(
    tmp_path: Path,
) -> None:
    path = tmp_path / "resources.json"
    path.write_text(resources_json(resources_for(["orders", "billing"])))
    with pytest.raises(ConfigurationError) as raised:
        check_resources_file(resources_for(["orders", "inventory"]), path)
    message = str(raised.value)
    assert "endpoints ['inventory'] missing from the file" in message
    assert "endpoints ['billing'] not in the app" in message
    assert message.endswith("run `bus resources > infra/resources.json`")


def test_the_generated_file_reads_back_as_the_same_resources(tmp_path: Path) -> None:
    path = tmp_path / "resources.json"
    resources = resources_for(["inventory", "ledger"])
    path.write_text(resources_json(resources))
    assert load_resources(path) == resources


@pytest.mark.parametrize(
    "endpoints", [["Orders"], ["has-hyphen"], ["ab"], ["1orders"], ["orders", "orders"]]
)
def test_bad_endpoint_names_are_refused(tmp_path: Path, endpoints: list[str]) -> None:
    path = tmp_path / "resources.json"
    path.write_text(json.dumps({"containers": {}, "tables": {}, "endpoints": endpoints}))
    with pytest.raises(ConfigurationError):
        load_resources(path)


async def test_provisioning_creates_every_resource_and_can_run_twice(backend: Backend) -> None:
    suffix = unique_name("")[:8]
    resources = Resources(
        containers={"tokens": f"tok{suffix}"},
        tables={"ingress": f"ingress{suffix}"},
        endpoints=(f"orders{suffix}", f"billing{suffix}"),
    )
    account = backend.account
    with pytest.raises(NotFound):
        await account.queue(f"orders{suffix}").send("x")

    await provision(account, resources)
    report = await provision(account, resources)

    assert len(report.queues) == 4
    for queue in resources.queue_names:
        await account.queue(queue).send("x")
        await account.queue(queue).delete_queue()
    await account.blob_container(f"tok{suffix}").create("n", b"")
    await account.blob_container(f"tok{suffix}").delete_container()
    for table in resources.table_names:
        assert (await account.table(table).query()).entities == []
        await account.table(table).delete_table()
